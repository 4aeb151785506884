/* Unit tests of spaced's configuration file (src/daemon/config.c): the syntax (blanks,
 * comments, CRLF, a last line without its end), every error naming its line (unknown keys,
 * a key set twice, options a file cannot set, bad flags, control bytes, the limits), the
 * merge in front of the command line (the command line wins, a repeatable option replaced
 * whole, the environment over the file), reading the file named by --config or
 * $SPACE_CONFIG, --help despite a broken file, and what --check-config prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/macros.h"
#include "daemon/config.h"

/* The shape of spaced's table: options with a value, a repeatable one, a flag, and the
 * ones a file cannot set. */
enum { O_DATA = 256, O_LISTEN, O_POOL, O_LEVEL, O_FLAG, O_CONFIG, O_CHECK, O_VERSION };
static const struct option opts[] = {
        { "data", required_argument, NULL, O_DATA },       { "listen", required_argument, NULL, O_LISTEN },
        { "pool", required_argument, NULL, O_POOL },       { "log-level", required_argument, NULL, O_LEVEL },
        { "flag", no_argument, NULL, O_FLAG },             { "config", required_argument, NULL, O_CONFIG },
        { "check-config", no_argument, NULL, O_CHECK },    { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, O_VERSION },       {},
};

static char *argv_prog[] = { "spaced", NULL };

/* Parses text as spaced.conf for a command line of argv (NULL: none); returns the result. */
static int parse(const char *text, char **argv, struct config **ret, char err[CONFIG_ERR_SIZE]) {
        if (!argv)
                argv = argv_prog;
        int argc = 0;
        while (argv[argc])
                argc++;
        int r = config_new(opts, argc, argv, ret, err);
        if (r < 0)
                return r;
        return config_parse(*ret, "/etc/space/spaced.conf", text, strlen(text), err);
}

/* The merged command line joined by spaces. */
static void merged(struct config *c, char *buf, size_t n) {
        int argc;
        char **argv;
        assert_int_equal(config_merge(c, &argc, &argv), 0);
        assert_null(argv[argc]);
        buf[0] = '\0';
        for (int i = 0; i < argc; i++) {
                strncat(buf, argv[i], n - strlen(buf) - 1);
                if (i + 1 < argc)
                        strncat(buf, " ", n - strlen(buf) - 1);
        }
}

static void expect_error(const char *text, int code, const char *message) {
        char err[CONFIG_ERR_SIZE] = "";
        _cleanup_config_ struct config *c = NULL;
        printf("  %s", text);
        assert_int_equal(parse(text, NULL, &c, err), code);
        if (!strstr(err, message)) {
                printf("error was: %s\nwanted: %s\n", err, message);
                fail();
        }
}

static void test_syntax(void **state) {
        (void)state;
        char err[CONFIG_ERR_SIZE], buf[1024];
        printf("check: blanks, comments, blank lines, CRLF and a last line without its end\n");
        _cleanup_config_ struct config *c = NULL;
        assert_int_equal(parse("# a comment\n"
                               "\n"
                               "   data   =   /srv/space  \n"
                               "\t# an indented comment\n"
                               "listen=127.0.0.1:7070 # after a blank: a comment\r\n"
                               "pool = base=2\n"
                               "pool = py#3=1\n" /* a '#' inside a value is part of it */
                               "log-level = debug",
                               NULL, &c, err),
                         0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced --data=/srv/space --listen=127.0.0.1:7070 --pool=base=2 --pool=py#3=1 "
                                 "--log-level=debug");
        assert_string_equal(config_get(c, "data"), "/srv/space");
        assert_string_equal(config_get(c, "pool"), "py#3=1");
        assert_null(config_get(c, "flag"));
        assert_string_equal(config_path(c), "/etc/space/spaced.conf");

        printf("check: an empty file and one of comments only set nothing\n");
        c = config_free(c);
        assert_int_equal(parse("", NULL, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced");
        c = config_free(c);
        assert_int_equal(parse("#x\n\n   \n", NULL, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced");

        printf("check: a flag takes yes/no (true/false, on/off, 1/0): yes is the bare option, no is nothing\n");
        c = config_free(c);
        assert_int_equal(parse("flag = yes\n", NULL, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced --flag");
        c = config_free(c);
        assert_int_equal(parse("flag = off\n", NULL, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced");
        printf("check: a configuration is parsed once\n");
        assert_int_equal(config_parse(c, "x", "", 0, err), -EALREADY);
}

static void test_errors(void **state) {
        (void)state;
        printf("check: each error names the file and the line\n");
        expect_error("data = /x\n\nbogus = 1\n", -EINVAL, "/etc/space/spaced.conf:3: unknown key 'bogus'");
        expect_error("log_level = debug\n", -EINVAL, ":1: unknown key 'log_level' (did you mean 'log-level'?)");
        expect_error("Data = /x\n", -EINVAL, ":1: unknown key 'Data'");
        expect_error("[daemon]\n", -EINVAL, ":1: expected 'key = value', got '[daemon]'");
        expect_error("\n\ndata /x\n", -EINVAL, ":3: expected 'key = value'");
        expect_error(" = /x\n", -EINVAL, ":1: no key before '='");
        expect_error("data =\n", -EINVAL, ":1: 'data' has no value");
        expect_error("data =   # only a comment\n", -EINVAL, ":1: 'data' has no value");
        expect_error("data = /a\nlisten = :1\ndata = /b\n", -EINVAL, ":3: 'data' is set twice (also on line 1)");
        expect_error("flag = yes\nflag = no\n", -EINVAL, ":2: 'flag' is set twice (also on line 1)");
        expect_error("flag = maybe\n", -EINVAL, ":1: 'flag' is yes or no, not 'maybe'");
        printf("check: a file cannot ask for help or the version, nor name another file or check itself\n");
        expect_error("help = yes\n", -EINVAL, ":1: 'help' cannot be set in a configuration file");
        expect_error("version = yes\n", -EINVAL, ":1: 'version' cannot be set");
        expect_error("config = /etc/other.conf\n", -EINVAL, ":1: 'config' cannot be set");
        expect_error("check-config = yes\n", -EINVAL, ":1: 'check-config' cannot be set");
        printf("check: control bytes and NUL bytes are refused\n");
        expect_error("data = /x\x01y\n", -EINVAL, ":1: a control character (byte 0x01)");
        expect_error("data = /x\x7f\n", -EINVAL, ":1: a control character (byte 0x7f)");
        char nul[] = "data = /x\n\ndata\0 = y\n";
        char err[CONFIG_ERR_SIZE];
        _cleanup_config_ struct config *c = NULL;
        assert_int_equal(config_new(opts, 1, argv_prog, &c, err), 0);
        assert_int_equal(config_parse(c, "f", nul, sizeof nul - 1, err), -EINVAL);
        assert_string_equal(err, "f:3: a NUL byte");
}

static void test_limits(void **state) {
        (void)state;
        char err[CONFIG_ERR_SIZE];
        printf("check: a line of CONFIG_MAX_LINE bytes is read, one byte more is refused with its number\n");
        size_t n = CONFIG_MAX_LINE + 64;
        _cleanup_free_ char *t = malloc(n);
        assert_non_null(t);
        snprintf(t, n, "#\ndata = /");
        size_t l = strlen("data = /");
        memset(t + 2 + l, 'a', CONFIG_MAX_LINE - l);
        strcpy(t + 2 + CONFIG_MAX_LINE, "\n");
        _cleanup_config_ struct config *c = NULL;
        assert_int_equal(parse(t, NULL, &c, err), 0);
        assert_int_equal(strlen(config_get(c, "data")), CONFIG_MAX_LINE - l + 1);
        c = config_free(c);
        memset(t + 2 + l, 'a', CONFIG_MAX_LINE - l + 1);
        strcpy(t + 2 + CONFIG_MAX_LINE + 1, "\n");
        assert_int_equal(parse(t, NULL, &c, err), -EINVAL);
        assert_non_null(strstr(err, ":2: longer than"));

        printf("check: CONFIG_MAX_ENTRIES settings are taken, one more is -E2BIG on its line\n");
        size_t m = (CONFIG_MAX_ENTRIES + 1) * 16;
        _cleanup_free_ char *p = calloc(1, m);
        assert_non_null(p);
        for (unsigned i = 0; i < CONFIG_MAX_ENTRIES; i++)
                snprintf(p + strlen(p), m - strlen(p), "pool = t%u=1\n", i);
        c = config_free(c);
        assert_int_equal(parse(p, NULL, &c, err), 0);
        snprintf(p + strlen(p), m - strlen(p), "pool = last=1\n");
        c = config_free(c);
        assert_int_equal(parse(p, NULL, &c, err), -E2BIG);
        char want[64];
        snprintf(want, sizeof want, ":%u: more than %u settings", CONFIG_MAX_ENTRIES + 1, CONFIG_MAX_ENTRIES);
        assert_non_null(strstr(err, want));

        printf("check: a file larger than CONFIG_MAX_SIZE is refused before any line\n");
        _cleanup_free_ char *big = malloc(CONFIG_MAX_SIZE + 2);
        assert_non_null(big);
        for (size_t i = 0; i < CONFIG_MAX_SIZE + 1; i++)
                big[i] = i % 64 == 63 ? '\n' : '#';
        big[CONFIG_MAX_SIZE + 1] = '\0';
        c = config_free(c);
        assert_int_equal(parse(big, NULL, &c, err), -E2BIG);
        assert_non_null(strstr(err, "larger than"));
        big[CONFIG_MAX_SIZE] = '\0';
        c = config_free(c);
        assert_int_equal(parse(big, NULL, &c, err), 0);
}

static void test_merge(void **state) {
        (void)state;
        char err[CONFIG_ERR_SIZE], buf[1024];
        unsetenv("SPACE_DATA");
        unsetenv("SPACE_LOG");
        const char *text = "data = /file\nlisten = 127.0.0.1:1\npool = a=1\npool = b=2\nlog-level = warn\n";

        printf("check: the command line wins: its options replace the file's, which come first\n");
        char *argv1[] = { "spaced", "--data", "/cmd", "--log-level=debug", NULL };
        _cleanup_config_ struct config *c = NULL;
        assert_int_equal(parse(text, argv1, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced --listen=127.0.0.1:1 --pool=a=1 --pool=b=2 --data /cmd --log-level=debug");
        assert_null(config_get(c, "data"));
        assert_string_equal(config_get(c, "listen"), "127.0.0.1:1");

        printf("check: a file's argument names its line, the command line's nothing\n");
        assert_string_equal(config_origin(c, 1), "/etc/space/spaced.conf:2: ");
        assert_string_equal(config_origin(c, 3), "/etc/space/spaced.conf:4: ");
        assert_string_equal(config_origin(c, 4), "");
        assert_string_equal(config_origin(c, 0), "");
        assert_string_equal(config_origin(c, 99), "");

        printf("check: one --pool on the command line replaces all of the file's; an abbreviation counts\n");
        char *argv2[] = { "spaced", "--po", "c=3", NULL };
        c = config_free(c);
        assert_int_equal(parse(text, argv2, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced --data=/file --listen=127.0.0.1:1 --log-level=warn --po c=3");

        printf("check: $SPACE_DATA and $SPACE_LOG win over the file (an empty one does not)\n");
        setenv("SPACE_DATA", "/env", 1);
        setenv("SPACE_LOG", "", 1);
        c = config_free(c);
        assert_int_equal(parse(text, NULL, &c, err), 0);
        merged(c, buf, sizeof buf);
        assert_string_equal(buf, "spaced --listen=127.0.0.1:1 --pool=a=1 --pool=b=2 --log-level=warn");
        assert_null(config_get(c, "data"));
        unsetenv("SPACE_DATA");
        unsetenv("SPACE_LOG");

        printf("check: getopt_long on the merged line sees the command line's value last\n");
        char *argv3[] = { "spaced", "--listen=cmd:2", "--data", "/d", NULL };
        c = config_free(c);
        assert_int_equal(parse("listen = file:1\nflag = yes\n", argv3, &c, err), 0);
        int argc;
        char **argv;
        assert_int_equal(config_merge(c, &argc, &argv), 0);
        const char *listen = NULL, *data = NULL;
        bool flag = false;
        int o;
        optind = 0;
        while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1)
                if (o == O_LISTEN)
                        listen = optarg;
                else if (o == O_DATA)
                        data = optarg;
                else if (o == O_FLAG)
                        flag = true;
        assert_string_equal(listen, "cmd:2");
        assert_string_equal(data, "/d");
        assert_true(flag);
        assert_int_equal(optind, argc);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_read(void **state) {
        (void)state;
        char dir[] = "/tmp/test_config.XXXXXX", path[64], bad[64], err[CONFIG_ERR_SIZE];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/spaced.conf", dir);
        snprintf(bad, sizeof bad, "%s/bad.conf", dir);
        write_file(path, "data = /from-file\n");
        write_file(bad, "data = /x\nnonsense = 1\n");
        unsetenv("SPACE_DATA");

        printf("check: --config PATH is read (the last one given)\n");
        char *argv1[] = { "spaced", "--config", bad, "--config", path, NULL };
        _cleanup_config_ struct config *c = NULL;
        int argc;
        char **argv;
        assert_int_equal(config_load(opts, 5, argv1, &c, &argc, &argv, err), 0);
        assert_string_equal(config_get(c, "data"), "/from-file");
        assert_string_equal(config_path(c), path);
        assert_int_equal(argc, 6);
        assert_string_equal(argv[1], "--data=/from-file");

        printf("check: else $SPACE_CONFIG; its errors name it and the line\n");
        setenv(CONFIG_ENV, bad, 1);
        c = config_free(c);
        assert_int_equal(config_load(opts, 1, argv_prog, &c, &argc, &argv, err), -EINVAL);
        char want[128];
        snprintf(want, sizeof want, "%s:2: unknown key 'nonsense'", bad);
        assert_string_equal(strstr(err, want) ? want : err, want);

        printf("check: --help and --version answer whatever the file says\n");
        char *argv2[] = { "spaced", "--help", NULL };
        assert_int_equal(config_load(opts, 2, argv2, &c, &argc, &argv, err), 0);
        c = config_free(c);
        char *argv3[] = { "spaced", "--version", NULL };
        assert_int_equal(config_load(opts, 2, argv3, &c, &argc, &argv, err), 0);
        c = config_free(c);

        printf("check: a file named that is missing is an error; a directory too; /dev/null is empty\n");
        char missing[80];
        snprintf(missing, sizeof missing, "%s/none.conf", dir);
        setenv(CONFIG_ENV, missing, 1);
        assert_int_equal(config_load(opts, 1, argv_prog, &c, &argc, &argv, err), -ENOENT);
        assert_non_null(strstr(err, missing));
        setenv(CONFIG_ENV, dir, 1);
        assert_int_equal(config_load(opts, 1, argv_prog, &c, &argc, &argv, err), -EISDIR);
        setenv(CONFIG_ENV, "/dev/null", 1);
        assert_int_equal(config_load(opts, 1, argv_prog, &c, &argc, &argv, err), 0);
        assert_int_equal(argc, 1);
        c = config_free(c);
        unsetenv(CONFIG_ENV);

        unlink(path);
        unlink(bad);
        assert_int_equal(rmdir(dir), 0);
}

static void test_print(void **state) {
        (void)state;
        char err[CONFIG_ERR_SIZE];
        unsetenv("SPACE_DATA");
        setenv("SPACE_LOG", "debug", 1);
        printf("check: --check-config's listing: each setting in effect with where it comes from\n");
        char *argv1[] = { "spaced", "--listen", "cmd:1", "--check-config", NULL };
        _cleanup_config_ struct config *c = NULL;
        assert_int_equal(parse("data = /file\nlisten = file:1\npool = a=1\n\npool = b=2\nlog-level = warn\nflag = no\n",
                               argv1, &c, err),
                         0);
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        assert_non_null(f);
        config_print(c, f);
        fclose(f);
        printf("%s", out);
        assert_non_null(strstr(out, "# /etc/space/spaced.conf: valid\n"));
        assert_non_null(strstr(out, "\ndata = /file "));
        assert_non_null(strstr(out, "# /etc/space/spaced.conf:1\n"));
        assert_non_null(strstr(out, "\nlisten = cmd:1 "));
        assert_null(strstr(out, "file:1"));
        assert_non_null(strstr(out, "\npool = a=1 "));
        assert_non_null(strstr(out, "# /etc/space/spaced.conf:5\n"));
        assert_non_null(strstr(out, "\nlog-level = debug "));
        assert_non_null(strstr(out, "# $SPACE_LOG\n"));
        assert_non_null(strstr(out, "\nflag = no "));
        assert_null(strstr(out, "check-config ="));
        assert_null(strstr(out, "help ="));
        free(out);
        unsetenv("SPACE_LOG");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_syntax), cmocka_unit_test(test_errors), cmocka_unit_test(test_limits),
                cmocka_unit_test(test_merge),  cmocka_unit_test(test_read),   cmocka_unit_test(test_print),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
