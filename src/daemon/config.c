/* spaced's configuration file: parsing "key = value" lines into settings, and merging them
 * in front of the command line (config.h). The values are not judged here: they become
 * "--key=value" options, so the checks spaced's main runs on an option run on them too,
 * and this file knows no option but the few named below. */
#include "daemon/config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macros.h"

/* Options a file cannot set: they are questions or say which file to read. */
static const char *const not_settable[] = { "help", "version", "config", "check-config" };
/* Options that may be given more than once; the others are set once per file. */
static const char *const repeatable[] = { "pool", "limit", "egress-open", "dns-upstream" };
/* Options an environment variable sets too; the variable wins over the file. */
static const struct {
        const char *key, *env;
} env_keys[] = { { "data", "SPACE_DATA" }, { "log-level", "SPACE_LOG" } };

struct setting {
        int opt;        /* index in opts */
        unsigned line;
        char *value;    /* NULL: a flag set to no */
};

struct cmd_opt {
        int opt;
        const char *value; /* NULL for a flag */
};

struct config {
        const struct option *opts;
        size_t n_opts;
        int argc;
        char *const *argv;
        bool *on_cmdline;            /* per option */
        struct cmd_opt *cmd;         /* the command line's options, in order */
        size_t n_cmd;
        const char *named;           /* --config PATH (the last one) */
        char *path;                  /* the file read, NULL when none */
        char *missing;               /* the default file that was not there */
        bool parsed;
        struct setting *set;
        size_t n_set;
        char **margv;                /* merged command line, NULL-terminated */
        unsigned *mline;             /* per merged argument: its line in the file, or 0 */
        int margc;
        char where[CONFIG_ERR_SIZE];
};

static bool in_list(const char *const *list, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i], name) == 0)
                        return true;
        return false;
}

static const char *env_of(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(env_keys); i++)
                if (strcmp(env_keys[i].key, key) == 0)
                        return env_keys[i].env;
        return NULL;
}

/* The environment variable that overrides key, when it is set (and not empty). */
static const char *env_override(const char *key) {
        const char *e = env_of(key), *v = e ? getenv(e) : NULL;
        return v && *v ? e : NULL;
}

static int find_opt(const struct config *c, const char *name) {
        for (size_t i = 0; i < c->n_opts; i++)
                if (strcmp(c->opts[i].name, name) == 0)
                        return (int)i;
        return -1;
}

static int fail(char err[CONFIG_ERR_SIZE], int r, const char *fmt, ...) _printf_(3, 4);
static int fail(char err[CONFIG_ERR_SIZE], int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, CONFIG_ERR_SIZE, fmt, ap);
        va_end(ap);
        return r;
}

struct config *config_free(struct config *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_set; i++)
                free(c->set[i].value);
        /* margv[0] and the arguments after the file's are argv's own */
        if (c->margv)
                for (int i = 1; i < c->margc; i++)
                        if (c->mline[i])
                                free(c->margv[i]);
        free(c->margv);
        free(c->mline);
        free(c->set);
        free(c->cmd);
        free(c->on_cmdline);
        free(c->path);
        free(c->missing);
        free(c);
        return NULL;
}

int config_new(const struct option *opts, int argc, char *const *argv, struct config **ret,
               char err[CONFIG_ERR_SIZE]) {
        if (!opts || argc < 1 || !argv || !ret)
                return fail(err, -EINVAL, "config: bad arguments");
        _cleanup_config_ struct config *c = calloc(1, sizeof *c);
        if (!c)
                return fail(err, -ENOMEM, "out of memory");
        c->opts = opts;
        while (opts[c->n_opts].name)
                c->n_opts++;
        c->argc = argc;
        c->argv = argv;
        c->on_cmdline = calloc(c->n_opts ? c->n_opts : 1, sizeof *c->on_cmdline);
        c->cmd = calloc((size_t)argc, sizeof *c->cmd);
        /* getopt_long permutes what it parses: it gets a copy */
        _cleanup_free_ char **copy = calloc((size_t)argc + 1, sizeof *copy);
        if (!c->on_cmdline || !c->cmd || !copy)
                return fail(err, -ENOMEM, "out of memory");
        memcpy(copy, argv, (size_t)argc * sizeof *copy);
        int saved_opterr = opterr;
        opterr = 0; /* main's own parse reports bad options */
        optind = 0; /* GNU: full re-initialisation */
        for (;;) {
                /* "h": spaced's short options, as main parses them */
                int idx = -1, o = getopt_long(argc, copy, "h", opts, &idx);
                if (o == -1)
                        break;
                if (o == '?' || o == ':')
                        continue;
                if (idx < 0) /* a short option: the long one with the same value */
                        for (size_t i = 0; i < c->n_opts && idx < 0; i++)
                                if (!opts[i].flag && opts[i].val == o)
                                        idx = (int)i;
                if (idx < 0)
                        continue;
                c->on_cmdline[idx] = true;
                c->cmd[c->n_cmd++] = (struct cmd_opt){ .opt = idx, .value = optarg };
                if (strcmp(opts[idx].name, "config") == 0)
                        c->named = optarg;
        }
        opterr = saved_opterr;
        optind = 0;
        *ret = TAKE_PTR(c);
        return 0;
}

static bool is_blank(char ch) { return ch == ' ' || ch == '\t'; }

static bool key_char(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'; }

static bool parse_flag(const char *v, bool *ret) {
        static const char *const yes[] = { "yes", "true", "on", "1" }, *const no[] = { "no", "false", "off", "0" };
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcmp(v, yes[i]) == 0) {
                        *ret = true;
                        return true;
                } else if (strcmp(v, no[i]) == 0) {
                        *ret = false;
                        return true;
                }
        return false;
}

/* One line, without its end: a setting appended to c->set, or nothing (blank, comment). */
static int parse_line(struct config *c, const char *path, unsigned ln, char *s, char err[CONFIG_ERR_SIZE]) {
        while (is_blank(*s))
                s++;
        size_t n = strlen(s);
        while (n && is_blank(s[n - 1]))
                s[--n] = '\0';
        if (!*s || *s == '#')
                return 0;
        for (const char *p = s; *p; p++)
                if ((unsigned char)*p < 0x20 && *p != '\t')
                        return fail(err, -EINVAL, "%s:%u: a control character (byte 0x%02x)", path, ln, (unsigned)*p);
                else if (*p == 0x7f)
                        return fail(err, -EINVAL, "%s:%u: a control character (byte 0x7f)", path, ln);
        char *eq = strchr(s, '=');
        if (!eq)
                return fail(err, -EINVAL, "%s:%u: expected 'key = value', got '%.64s'", path, ln, s);
        char *k_end = eq;
        while (k_end > s && is_blank(k_end[-1]))
                k_end--;
        *k_end = '\0';
        char *v = eq + 1;
        while (is_blank(*v))
                v++;
        /* a '#' that starts the value or follows a blank starts a comment; one inside a
         * value is part of it */
        for (char *p = v; *p; p++)
                if (*p == '#' && (p == v || is_blank(p[-1]))) {
                        *p = '\0';
                        break;
                }
        n = strlen(v);
        while (n && is_blank(v[n - 1]))
                v[--n] = '\0';
        if (!*s)
                return fail(err, -EINVAL, "%s:%u: no key before '='", path, ln);
        for (const char *p = s; *p; p++)
                if (!key_char(*p))
                        return fail(err, -EINVAL, "%s:%u: unknown key '%.64s' (the keys are spaced's long options: spaced --help)",
                                    path, ln, s);
        int opt = find_opt(c, s);
        if (opt < 0) {
                char dashed[128];
                snprintf(dashed, sizeof dashed, "%s", s);
                for (char *p = dashed; *p; p++)
                        if (*p == '_')
                                *p = '-';
                if (strcmp(dashed, s) != 0 && find_opt(c, dashed) >= 0)
                        return fail(err, -EINVAL, "%s:%u: unknown key '%s' (did you mean '%s'?)", path, ln, s, dashed);
                return fail(err, -EINVAL, "%s:%u: unknown key '%.64s' (the keys are spaced's long options: spaced --help)",
                            path, ln, s);
        }
        if (in_list(not_settable, ELEMENTSOF(not_settable), s))
                return fail(err, -EINVAL, "%s:%u: '%s' cannot be set in a configuration file", path, ln, s);
        if (!*v)
                return fail(err, -EINVAL, "%s:%u: '%s' has no value", path, ln, s);
        if (!in_list(repeatable, ELEMENTSOF(repeatable), s))
                for (size_t i = 0; i < c->n_set; i++)
                        if (c->set[i].opt == opt)
                                return fail(err, -EINVAL, "%s:%u: '%s' is set twice (also on line %u)", path, ln, s,
                                            c->set[i].line);
        char *value = NULL;
        if (c->opts[opt].has_arg == no_argument) {
                bool on;
                if (!parse_flag(v, &on))
                        return fail(err, -EINVAL, "%s:%u: '%s' is yes or no, not '%.64s'", path, ln, s, v);
                if (on && !(value = strdup("yes")))
                        return fail(err, -ENOMEM, "out of memory");
        } else if (!(value = strdup(v)))
                return fail(err, -ENOMEM, "out of memory");
        if (c->n_set >= CONFIG_MAX_ENTRIES) {
                free(value);
                return fail(err, -E2BIG, "%s:%u: more than %u settings", path, ln, CONFIG_MAX_ENTRIES);
        }
        c->set[c->n_set++] = (struct setting){ .opt = opt, .line = ln, .value = value };
        return 0;
}

int config_parse(struct config *c, const char *path, const char *text, size_t len, char err[CONFIG_ERR_SIZE]) {
        if (!c || !path || (!text && len))
                return fail(err, -EINVAL, "config: bad arguments");
        if (c->parsed)
                return fail(err, -EALREADY, "config: %s: a configuration is parsed once", path);
        if (len > CONFIG_MAX_SIZE)
                return fail(err, -E2BIG, "%s: larger than %u bytes", path, CONFIG_MAX_SIZE);
        c->set = calloc(CONFIG_MAX_ENTRIES, sizeof *c->set);
        if (!c->set)
                return fail(err, -ENOMEM, "out of memory");
        c->parsed = true;
        char line[CONFIG_MAX_LINE + 1];
        unsigned ln = 0;
        for (size_t pos = 0; pos < len;) {
                ln++;
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t end = nl ? (size_t)(nl - text) : len, n = end - pos;
                if (n && text[end - 1] == '\r') /* a file written on another system */
                        n--;
                if (n > CONFIG_MAX_LINE)
                        return fail(err, -EINVAL, "%s:%u: longer than %u bytes", path, ln, CONFIG_MAX_LINE);
                if (memchr(text + pos, '\0', n))
                        return fail(err, -EINVAL, "%s:%u: a NUL byte", path, ln);
                memcpy(line, text + pos, n);
                line[n] = '\0';
                int r = parse_line(c, path, ln, line, err);
                if (r < 0)
                        return r;
                pos = end + 1;
        }
        if (!(c->path = strdup(path)))
                return fail(err, -ENOMEM, "out of memory");
        return 0;
}

int config_read(struct config *c, char err[CONFIG_ERR_SIZE]) {
        const char *path = c->named, *e = getenv(CONFIG_ENV);
        bool may_miss = false;
        if (!path && e && *e)
                path = e;
        if (!path) {
                path = CONFIG_DEFAULT_PATH;
                may_miss = true;
        }
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                if (errno == ENOENT && may_miss) {
                        if (!(c->missing = strdup(path)))
                                return fail(err, -ENOMEM, "out of memory");
                        return 0;
                }
                return fail(err, -errno, "configuration file %s: %m", path);
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail(err, -errno, "configuration file %s: %m", path);
        if (S_ISDIR(st.st_mode))
                return fail(err, -EISDIR, "configuration file %s: a directory", path);
        _cleanup_free_ char *buf = malloc(CONFIG_MAX_SIZE + 1);
        if (!buf)
                return fail(err, -ENOMEM, "out of memory");
        size_t len = 0;
        while (len <= CONFIG_MAX_SIZE) {
                ssize_t k = read(fd, buf + len, CONFIG_MAX_SIZE + 1 - len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return fail(err, -errno, "configuration file %s: %m", path);
                if (k == 0)
                        break;
                len += (size_t)k;
        }
        return config_parse(c, path, buf, len, err);
}

/* Whether the file's setting s is in effect. */
static bool setting_used(const struct config *c, const struct setting *s) {
        const char *name = c->opts[s->opt].name;
        return !c->on_cmdline[s->opt] && !env_override(name);
}

int config_merge(struct config *c, int *ret_argc, char ***ret_argv) {
        if (!c->margv) {
                size_t n = 1 + c->n_set + (size_t)(c->argc - 1);
                c->margv = calloc(n + 1, sizeof *c->margv);
                c->mline = calloc(n + 1, sizeof *c->mline);
                if (!c->margv || !c->mline)
                        return -ENOMEM;
                int m = 0;
                c->margv[m++] = c->argv[0];
                for (size_t i = 0; i < c->n_set; i++) {
                        const struct setting *s = &c->set[i];
                        if (!setting_used(c, s) || !s->value)
                                continue;
                        const struct option *o = &c->opts[s->opt];
                        char *a = NULL;
                        int k = o->has_arg == no_argument ? asprintf(&a, "--%s", o->name)
                                                          : asprintf(&a, "--%s=%s", o->name, s->value);
                        if (k < 0)
                                return -ENOMEM;
                        c->mline[m] = s->line;
                        c->margv[m++] = a;
                        c->margc = m; /* so that config_free frees what is there */
                }
                for (int i = 1; i < c->argc; i++)
                        c->margv[m++] = c->argv[i];
                c->margc = m;
        }
        *ret_argc = c->margc;
        *ret_argv = c->margv;
        return 0;
}

int config_load(const struct option *opts, int argc, char *const *argv, struct config **ret, int *ret_argc,
                char ***ret_argv, char err[CONFIG_ERR_SIZE]) {
        _cleanup_config_ struct config *c = NULL;
        int r = config_new(opts, argc, argv, &c, err);
        if (r < 0)
                return r;
        /* --help and --version answer whatever the file says, even when it is broken */
        int help = find_opt(c, "help"), version = find_opt(c, "version");
        bool question = (help >= 0 && c->on_cmdline[help]) || (version >= 0 && c->on_cmdline[version]);
        if (!question && (r = config_read(c, err)) < 0)
                return r;
        if ((r = config_merge(c, ret_argc, ret_argv)) < 0)
                return fail(err, r, "out of memory");
        *ret = TAKE_PTR(c);
        return 0;
}

const char *config_origin(struct config *c, int i) {
        if (!c || i <= 0 || i >= c->margc || !c->mline || !c->mline[i])
                return "";
        snprintf(c->where, sizeof c->where, "%s:%u: ", c->path, c->mline[i]);
        return c->where;
}

const char *config_get(const struct config *c, const char *key) {
        const char *v = NULL;
        for (size_t i = 0; c && i < c->n_set; i++)
                if (strcmp(c->opts[c->set[i].opt].name, key) == 0 && setting_used(c, &c->set[i]))
                        v = c->set[i].value;
        return v;
}

const char *config_path(const struct config *c) {
        return c ? c->path : NULL;
}

static void print_setting(FILE *f, const char *name, const char *value, const char *from, unsigned line) {
        int w = fprintf(f, "%s = %s", name, value ? value : "yes");
        fprintf(f, "%*s# %s", w < 39 ? 39 - w : 1, "", from);
        if (line)
                fprintf(f, ":%u", line);
        fputc('\n', f);
}

void config_print(const struct config *c, FILE *f) {
        if (c->path)
                fprintf(f, "# %s: valid\n", c->path);
        else
                fprintf(f, "# no configuration file (%s does not exist)\n", c->missing ? c->missing : CONFIG_DEFAULT_PATH);
        fprintf(f, "# the settings in effect: the command line wins over the environment, which wins over the file\n");
        for (size_t i = 0; i < c->n_opts; i++) {
                const struct option *o = &c->opts[i];
                if (in_list(not_settable, ELEMENTSOF(not_settable), o->name) || find_opt(c, o->name) != (int)i)
                        continue;
                bool any = false;
                for (size_t k = 0; k < c->n_cmd; k++)
                        if (c->cmd[k].opt == (int)i) {
                                print_setting(f, o->name, c->cmd[k].value, "command line", 0);
                                any = true;
                        }
                const char *e = any ? NULL : env_override(o->name);
                if (e) {
                        char from[64];
                        snprintf(from, sizeof from, "$%s", e);
                        print_setting(f, o->name, getenv(e), from, 0);
                        any = true;
                }
                for (size_t k = 0; !any && k < c->n_set; k++)
                        if (c->set[k].opt == (int)i) {
                                /* every line of a repeatable key, the one line of another */
                                for (size_t j = k; j < c->n_set; j++)
                                        if (c->set[j].opt == (int)i)
                                                print_setting(f, o->name, c->set[j].value ? c->set[j].value : "no",
                                                              c->path, c->set[j].line);
                                any = true;
                        }
                if (any)
                        continue;
                _cleanup_free_ char *def = strcmp(o->name, "init") == 0 ? config_default_init() : NULL;
                int w = fprintf(f, "#%s = %s", o->name, def ? def : "");
                fprintf(f, "%*s# not set: the default%s\n", w < 39 ? 39 - w : 1, "", def ? "" : " (spaced --help)");
        }
}

char *config_default_init(void) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        char *p = NULL;
        if (n > 0) {
                exe[n] = '\0';
                const char *dir = dirname(exe);
                if (asprintf(&p, "%s/space-init", dir) < 0)
                        return NULL;
                if (access(p, X_OK) == 0)
                        return p;
                free(p);
                if (asprintf(&p, "%s/" SPACE_LIBEXEC_REL "/space-init", dir) < 0)
                        return NULL;
                char real[PATH_MAX];
                if (realpath(p, real) && access(real, X_OK) == 0) {
                        free(p);
                        return strdup(real);
                }
                free(p);
        }
        return strdup(SPACE_LIBEXECDIR "/space-init");
}
