/* Runs the `space` binary against the scripted fake daemon and checks what a user sees:
 * stdout/stderr, exit statuses (command's code, 128+signal, 127 not started, 1 errors),
 * stdin forwarding, and that --json prints the daemon's document. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_server.h"
#include "space/space.h"

static const char *space_bin;
static const char SESSION[] = "{\"id\":\"ses_00000000000000aa\",\"sandbox_id\":\"sbx_00000000000000aa\",\"state\":\"running\","
                              "\"template\":\"base\",\"runtime\":\"ns\",\"created_at\":\"2025-01-01T00:00:00Z\","
                              "\"limits\":{\"memory\":536870912,\"cpus\":1,\"pids\":512}}";

struct run {
        int status; /* exit code */
        char out[4096];
        char err[4096];
};

static void slurp(const char *path, char *buf, size_t n) {
        FILE *f = fopen(path, "re");
        size_t got = f ? fread(buf, 1, n - 1, f) : 0;
        buf[got] = '\0';
        if (f)
                fclose(f);
}

/* Runs space with SPACE_HOST at the fake server; stdin from `input` (NULL: /dev/null). */
static void run_space(struct fake_server *f, const char *input, struct run *ret, ...) {
        char *argv[32] = { (char *)space_bin };
        va_list ap;
        va_start(ap, ret);
        size_t n = 1;
        char *a;
        while ((a = va_arg(ap, char *)) && n < 31)
                argv[n++] = a;
        va_end(ap);
        char outp[] = "/tmp/space-cli-out-XXXXXX", errp[] = "/tmp/space-cli-err-XXXXXX", inp[] = "/tmp/space-cli-in-XXXXXX";
        int ofd = mkstemp(outp), efd = mkstemp(errp), ifd = mkstemp(inp);
        assert_true(ofd >= 0 && efd >= 0 && ifd >= 0);
        if (input)
                assert_int_equal(write(ifd, input, strlen(input)), (ssize_t)strlen(input));
        lseek(ifd, 0, SEEK_SET);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                setenv("SPACE_HOST", f->host, 1);
                dup2(input ? ifd : open("/dev/null", O_RDONLY), 0);
                dup2(ofd, 1);
                dup2(efd, 2);
                execv(space_bin, argv);
                _exit(99);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        ret->status = WEXITSTATUS(st);
        slurp(outp, ret->out, sizeof ret->out);
        slurp(errp, ret->err, sizeof ret->err);
        close(ofd);
        close(efd);
        close(ifd);
        unlink(outp);
        unlink(errp);
        unlink(inp);
}

static void test_exec_output_and_code(void **state) {
        (void)state;
        printf("checks: space exec splits stdout/stderr, exits with the code, forwards piped stdin\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 0, "200 OK", SESSION);
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"start\",\"pid\":3}\n{\"type\":\"stdout\",\"data\":\"42\\n\"}\n"
                                            "{\"type\":\"stderr\",\"data\":\"warn\\n\"}\n{\"type\":\"exit\",\"exit_code\":3}\n", NULL);
        fake_start(&f);
        struct run r;
        run_space(&f, "input-text", &r, "exec", "ses_00000000000000aa", "--", "python3", "-c", "x", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 3);
        assert_string_equal(r.out, "42\n");
        assert_string_equal(r.err, "warn\n");
        assert_non_null(strstr(f.requests[1], "\"argv\":[\"python3\",\"-c\",\"x\"]"));
        /* stdin streams: ?stdin=stream, the JSON line, then our stdin as the rest of the body */
        assert_non_null(strstr(f.requests[1], "/exec?stdin=stream HTTP/1.1\r\n"));
        assert_non_null(strstr(f.requests[1], "\r\nTransfer-Encoding: chunked\r\n"));
        assert_non_null(strstr(f.requests[1], "\"]}\n\r\na\r\ninput-text\r\n0\r\n\r\n"));
        assert_null(strstr(f.requests[1], "\"stdin\""));
        fake_free(&f);
}

static void test_exec_signal_and_not_found(void **state) {
        (void)state;
        printf("checks: killed by signal 9 -> 137; command not found (422) -> 127 with the daemon's message\n");
        struct fake_server f = { .nreplies = 4 };
        fake_reply_json(&f, 0, "200 OK", SESSION);
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"exit\",\"signal\":9}\n", NULL);
        fake_reply_json(&f, 2, "200 OK", SESSION);
        fake_reply_json(&f, 3, "422 Unprocessable Entity",
                               "{\"error\":{\"code\":\"exec_failed\",\"message\":\"nosuch: command not found\"}}");
        fake_start(&f);
        struct run r;
        run_space(&f, NULL, &r, "exec", "ses_00000000000000aa", "sleep", "9", NULL);
        assert_int_equal(r.status, 137);
        run_space(&f, NULL, &r, "exec", "ses_00000000000000aa", "--", "nosuch", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 127);
        assert_string_equal(r.err, "space: nosuch: command not found\n");
        assert_null(strstr(f.requests[1], "\"stdin")); /* /dev/null: nothing to send */
        fake_free(&f);
}

static void test_exec_stdin_unbounded(void **state) {
        (void)state;
        printf("checks: exec streams a stdin over the old %u-byte limit whole, in chunks after the JSON line\n",
               (unsigned)SPACE_MAX_STDIN);
        size_t total = SPACE_MAX_STDIN + 100000;
        char *in = malloc(total + 1);
        assert_non_null(in);
        memset(in, 'z', total);
        in[total] = '\0';
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 0, "200 OK", SESSION);
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"exit\",\"exit_code\":0}\n", NULL);
        fake_start(&f);
        struct run r;
        run_space(&f, in, &r, "exec", "ses_00000000000000aa", "--", "cat", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 0);
        assert_int_equal(f.served, 2);
        /* de-chunk the body after the JSON line's chunk: every byte of stdin, in order */
        const char *p = strstr(f.requests[1], "\"]}\n\r\n");
        assert_non_null(p);
        p += 6;
        size_t got = 0;
        for (int i = 0; i < 1000; i++) {
                char *end;
                unsigned long n = strtoul(p, &end, 16);
                assert_true(end > p && end[0] == '\r' && end[1] == '\n');
                if (n == 0)
                        break;
                p = end + 2;
                assert_int_equal(strspn(p, "z"), n);
                got += n;
                p += n;
                assert_memory_equal(p, "\r\n", 2);
                p += 2;
        }
        assert_int_equal(got, total);
        free(in);
        fake_free(&f);
}

static void test_errors_exit_1(void **state) {
        (void)state;
        printf("checks: an API error prints 'space: <message>' and exits 1\n");
        struct fake_server f = { .nreplies = 1 };
        fake_reply_json(&f, 0, "404 Not Found", "{\"error\":{\"code\":\"not_found\",\"message\":\"no session ses_x\"}}");
        fake_start(&f);
        struct run r;
        run_space(&f, NULL, &r, "inspect", "ses_x", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 1);
        assert_string_equal(r.err, "space: no session ses_x\n");
        assert_string_equal(r.out, "");
        fake_free(&f);
}

static void test_create_and_lists(void **state) {
        (void)state;
        printf("checks: create prints the id; ls prints a table; ls --json prints the daemon's JSON\n");
        char list[sizeof SESSION + 32];
        snprintf(list, sizeof list, "{\"sessions\":[%s]}", SESSION);
        struct fake_server f = { .nreplies = 3 };
        fake_reply_json(&f, 0, "201 Created", SESSION);
        fake_reply_json(&f, 1, "200 OK", list);
        fake_reply_json(&f, 2, "200 OK", list);
        fake_start(&f);
        struct run r;
        run_space(&f, NULL, &r, "create", "--memory", "1G", "--cpus", "2", "--pids", "100", "--env", "A=b", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "ses_00000000000000aa\n");
        run_space(&f, NULL, &r, "ls", NULL);
        assert_int_equal(r.status, 0);
        assert_non_null(strstr(r.out, "ID"));
        assert_non_null(strstr(r.out, "ses_00000000000000aa"));
        assert_non_null(strstr(r.out, "512 MiB"));
        run_space(&f, NULL, &r, "ls", "--json", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 0);
        assert_int_equal(strncmp(r.out, list, strlen(list)), 0);
        const char *body = fake_request_body(&f, 0);
        assert_non_null(strstr(body, "\"memory\":1073741824"));
        assert_non_null(strstr(body, "\"cpus\":2"));
        assert_non_null(strstr(body, "\"pids\":100"));
        assert_non_null(strstr(body, "\"env\":{\"A\":\"b\"}"));
        fake_free(&f);
}

static void test_background_and_logs(void **state) {
        (void)state;
        printf("checks: exec -d prints the pid; logs --follow prints output and exits with the code\n");
        struct fake_server f = { .nreplies = 4 };
        fake_reply_json(&f, 0, "200 OK", SESSION);
        fake_reply_json(&f, 1, "201 Created", "{\"pid\":77}");
        fake_reply_json(&f, 2, "200 OK", SESSION);
        fake_reply_chunked(&f, 3, "200 OK", "{\"type\":\"attach\",\"offset\":0,\"running\":true}\n{\"type\":\"stdout\",\"data\":\"a\\n\"}\n"
                                            "{\"type\":\"exit\",\"exit_code\":4}\n", NULL);
        fake_start(&f);
        struct run r;
        run_space(&f, NULL, &r, "exec", "-d", "ses_00000000000000aa", "--", "sleep", "5", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "77\n");
        run_space(&f, NULL, &r, "logs", "--follow", "--offset", "2", "ses_00000000000000aa", "77", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 4);
        assert_string_equal(r.out, "a\n");
        assert_non_null(strstr(f.requests[3], "/processes/77/output?offset=2&follow=1 "));
        fake_free(&f);
}

static void test_session_commands(void **state) {
        (void)state;
        printf("checks: create --token-file/--snapshot-interval; snapshot, fork -n, events paging, connect, gc output\n");
        struct fake_server f = { .nreplies = 12 };
        fake_reply_json(&f, 0, "201 Created", "{\"id\":\"ses_00000000000000aa\",\"state\":\"running\",\"token\":\"T0k-en_1\"}");
        fake_reply_json(&f, 1, "200 OK", SESSION);
        fake_reply_json(&f, 2, "201 Created", "{\"id\":\"snap_00000000000000s1\",\"session\":\"ses_00000000000000aa\","
                                              "\"reason\":\"manual\",\"label\":\"v1\",\"root\":\"ab\"}");
        fake_reply_json(&f, 3, "200 OK", SESSION);
        fake_reply_json(&f, 4, "201 Created", "{\"sessions\":[{\"id\":\"ses_00000000000000bb\",\"token\":\"tb\"},"
                                              "{\"id\":\"ses_00000000000000cc\",\"token\":\"tc\"}]}");
        fake_reply_json(&f, 5, "200 OK", SESSION);
        fake_reply_json(&f, 6, "200 OK", "{\"events\":[{\"seq\":1,\"time\":\"t1\",\"kind\":\"lifecycle\",\"data\":{\"event\":\"created\"}}],"
                                         "\"next\":1,\"more\":true}");
        fake_reply_json(&f, 7, "200 OK", "{\"events\":[{\"seq\":2,\"time\":\"t2\",\"kind\":\"note\",\"data\":{\"x\":1}}],"
                                         "\"next\":2,\"more\":false}");
        fake_reply_json(&f, 8, "200 OK", "{\"id\":\"ses_00000000000000aa\",\"state\":\"running\",\"processes\":[]}");
        fake_reply_json(&f, 9, "200 OK", "{\"objects_removed\":3,\"bytes_freed\":2048}");
        fake_reply_json(&f, 10, "200 OK", SESSION);
        fake_reply_json(&f, 11, "409 Conflict", "{\"error\":{\"code\":\"conflict\",\"message\":\"session is running\"}}");
        fake_start(&f);
        char tokfile[] = "/tmp/space-cli-tok-XXXXXX";
        int tfd = mkstemp(tokfile);
        assert_true(tfd >= 0);
        fchmod(tfd, 0644);
        close(tfd);
        struct run r;
        run_space(&f, NULL, &r, "create", "--snapshot-interval", "2s", "--retention", "4", "--token-file", tokfile, NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "ses_00000000000000aa\n");
        char tok[64];
        slurp(tokfile, tok, sizeof tok);
        assert_string_equal(tok, "T0k-en_1\n");
        struct stat st;
        assert_int_equal(stat(tokfile, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        unlink(tokfile);
        run_space(&f, NULL, &r, "snapshot", "--label", "v1", "ses_00000000000000aa", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "snap_00000000000000s1\n");
        run_space(&f, NULL, &r, "fork", "-n", "2", "ses_00000000000000aa", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "ses_00000000000000bb\nses_00000000000000cc\n");
        run_space(&f, NULL, &r, "events", "--json", "ses_00000000000000aa", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "{\"seq\":1,\"time\":\"t1\",\"kind\":\"lifecycle\",\"data\":{\"event\":\"created\"}}\n"
                                   "{\"seq\":2,\"time\":\"t2\",\"kind\":\"note\",\"data\":{\"x\":1}}\n");
        run_space(&f, NULL, &r, "connect", "--json", "--token", "T0k-en_1", "ses_00000000000000aa", NULL);
        assert_int_equal(r.status, 0);
        assert_non_null(strstr(r.out, "\"processes\":[]"));
        run_space(&f, NULL, &r, "gc", NULL);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.out, "removed 3 objects, freed 2 KiB\n");
        run_space(&f, NULL, &r, "resume", "ses_00000000000000aa", NULL);
        fake_stop(&f);
        assert_int_equal(r.status, 1);
        assert_string_equal(r.err, "space: ses_00000000000000aa: session is running\n");
        const char *body = fake_request_body(&f, 0);
        assert_non_null(strstr(body, "\"snapshot_interval_ms\":2000"));
        assert_non_null(strstr(body, "\"retention\":4"));
        assert_non_null(strstr(f.requests[4], "\"count\":2"));
        assert_non_null(strstr(f.requests[6], "GET /v1/sessions/ses_00000000000000aa/events?after=0&limit=1000 "));
        assert_non_null(strstr(f.requests[7], "GET /v1/sessions/ses_00000000000000aa/events?after=1&limit=1000 "));
        assert_non_null(strstr(f.requests[8], "{\"token\":\"T0k-en_1\"}"));
        fake_free(&f);
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: test_cli_run PATH-TO-space\n");
                return 2;
        }
        space_bin = argv[1];
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_exec_output_and_code),
                cmocka_unit_test(test_exec_signal_and_not_found),
                cmocka_unit_test(test_exec_stdin_unbounded),
                cmocka_unit_test(test_errors_exit_1),
                cmocka_unit_test(test_create_and_lists),
                cmocka_unit_test(test_background_and_logs),
                cmocka_unit_test(test_session_commands),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
