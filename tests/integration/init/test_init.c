/* Integration tests of space-init over its real protocol: it runs as an ordinary
 * unprivileged process (--fd on a socketpair, or --listen) with --root on a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/text.h"
#include "harness.h"

/* init.h's INIT_TTY_STDIN_MAX: a terminal's unread input past which op input is EAGAIN */
#define INIT_TTY_STDIN_MAX_TEST (64u << 10)

static const char *init_path;
static bool sanitized; /* init runs with ASan: its shadow memory makes RSS meaningless */

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void rm_rf(const char *path) {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
        assert_int_equal(system(cmd), 0);
}

static struct json *call(struct initc *c, const char *fmt, ...) _printf_(2, 3);
static struct json *call(struct initc *c, const char *fmt, ...) {
        char req[8192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(req, sizeof req, fmt, ap);
        va_end(ap);
        struct json *resp = NULL;
        int r = initc_call(c, req, &resp);
        if (r < 0)
                fail_msg("request %s: %s", req, strerror(-r));
        return resp;
}

static void assert_error(struct json *resp, const char *code) {
        const char *got = initc_error_code(resp);
        if (!got || strcmp(got, code) != 0)
                fail_msg("expected error %s, got %s", code, got ? got : "success");
        assert_non_null(json_get_str(json_get(resp, "error"), "message"));
        int64_t e;
        assert_int_equal(json_get_int(json_get(resp, "error"), "errno", &e), 0);
        assert_true(e > 0);
}

static void assert_ok(struct json *resp) {
        if (json_get(resp, "error"))
                fail_msg("unexpected error: %s: %s", initc_error_code(resp),
                         json_get_str(json_get(resp, "error"), "message"));
}

static int64_t get_int(const struct json *j, const char *key) {
        int64_t v = 0;
        if (json_get_int(j, key, &v) < 0)
                fail_msg("no integer \"%s\"", key);
        return v;
}

/* Collects STDOUT/STDERR of id until EXIT (returned parsed) or until want bytes came. */
static struct json *collect(struct initc *c, uint32_t id, struct buf *out, struct buf *err, size_t want, int timeout_ms) {
        int64_t end = mono_ms() + timeout_ms;
        for (;;) {
                if (want && out->len + (err ? err->len : 0) >= want)
                        return NULL;
                struct initc_frame fr;
                int64_t left = end - mono_ms();
                int r = initc_recv(c, id, &fr, left > 0 ? (int)left : 0);
                if (r <= 0)
                        fail_msg("waiting for output of id %u: %s", id, r == 0 ? "timeout" : strerror(-r));
                if (fr.h.type == PROTO_STDOUT || fr.h.type == PROTO_STDERR) {
                        struct buf *b = fr.h.type == PROTO_STDOUT || !err ? out : err;
                        assert_int_equal(buf_append(b, fr.payload.data, fr.payload.len), 0);
                        initc_frame_free(&fr);
                        continue;
                }
                assert_int_equal(fr.h.type, PROTO_EXIT);
                struct json *j = NULL;
                assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &j, NULL, 0), 0);
                initc_frame_free(&fr);
                return j;
        }
}

/* ---- commands ---- */

static void test_hello_ping(void **state) {
        struct fx *f = *state;
        print_message("HELLO says version 1 and init's pid; ping answers pid and uptime\n");
        assert_int_equal(get_int(f->c.hello, "version"), 1);
        assert_int_equal(get_int(f->c.hello, "pid"), f->c.pid);
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"ping\"}");
        assert_int_equal(get_int(r, "pid"), f->c.pid);
        assert_true(get_int(r, "uptime_ms") >= 0);
}

static void test_exec_basic(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        print_message("stdout and stderr come apart, exit code 3 is reported\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo out; echo err >&2; exit 3\"]}",
                                   NULL, 0, &res, 10000), 0);
        assert_ok(res.resp);
        assert_true(get_int(res.resp, "pid") > 0);
        assert_string_equal(res.out.data, "out\n");
        assert_string_equal(res.err.data, "err\n");
        assert_int_equal(res.exit_code, 3);
        assert_int_equal(res.signal, -1);
        assert_false(res.timed_out);
        initc_result_free(&res);

        print_message("a command killed by a signal reports the signal\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"kill -9 $$\"]}", NULL, 0, &res, 10000), 0);
        assert_int_equal(res.signal, 9);
        assert_int_equal(res.exit_code, -1);
        initc_result_free(&res);
}

static void test_exec_env_cwd(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        char path[PATH_MAX + 16], expect[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/sub", f->root);
        assert_int_equal(mkdir(path, 0755), 0);
        print_message("env entries merge over the default environment; cwd resolves under the root\n");
        assert_int_equal(initc_run(&f->c,
                                   "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo \\\"$FOO|$HOME|$PATH|$LANG\\\"; pwd\"],"
                                   "\"env\":[\"FOO=bar\",\"HOME=/home/x\"],\"cwd\":\"/sub\"}",
                                   NULL, 0, &res, 10000), 0);
        assert_ok(res.resp);
        snprintf(expect, sizeof expect, "bar|/home/x|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|C.UTF-8\n%s\n", path);
        assert_string_equal(res.out.data, expect);
        assert_int_equal(res.exit_code, 0);
        initc_result_free(&res);

        print_message("a cwd of ../../.. stays at the root\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"../../..\"}", NULL, 0, &res, 10000), 0);
        snprintf(expect, sizeof expect, "%s\n", f->root);
        assert_string_equal(res.out.data, expect);
        initc_result_free(&res);

        print_message("bad env entry and bad argv are EINVAL\n");
        _cleanup_json_ struct json *r1 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"env\":[\"NOEQUALS\"]}");
        assert_error(r1, "EINVAL");
        _cleanup_json_ struct json *r2 = call(&f->c, "{\"op\":\"exec\",\"argv\":[]}");
        assert_error(r2, "EINVAL");
        /* (a background command with stdin is no longer refused: op input feeds it, test_input) */
}

static void test_exec_clean_fds(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        print_message("a command inherits only fds 0-2 and no ignored signals\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\","
                                          "\"ls /proc/self/fd | grep -v '^[012]$' | wc -l; grep SigIgn /proc/self/status\"]}",
                                   NULL, 0, &res, 10000), 0);
        /* ls sees its own directory fd, nothing else */
        assert_string_equal(res.out.data, "1\nSigIgn:\t0000000000000000\n");
        initc_result_free(&res);
}

static void test_exec_uid(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"id -u; id -g; id -G\"],"
                                          "\"uid\":65534,\"gid\":65534}", NULL, 0, &res, 10000), 0);
        if (geteuid() == 0) {
                print_message("uid/gid switch the command's ids and drop supplementary groups\n");
                assert_ok(res.resp);
                assert_string_equal(res.out.data, "65534\n65534\n65534\n");
        } else {
                print_message("unprivileged: switching ids is an EPERM exec error\n");
                assert_error(res.resp, "EPERM");
        }
        initc_result_free(&res);
}

static void test_exec_stdin(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        size_t n = 3u << 20; /* more than every pipe and init's stdin bound */
        char *data = malloc(n);
        assert_non_null(data);
        for (size_t i = 0; i < n; i++)
                data[i] = (char)('a' + i % 23);
        print_message("3 MiB of stdin reach cat and come back unchanged\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"cat\"],\"stdin\":true}", data, n, &res, 30000), 0);
        assert_ok(res.resp);
        assert_int_equal(res.out.len, n);
        assert_memory_equal(res.out.data, data, n);
        assert_int_equal(res.exit_code, 0);
        initc_result_free(&res);

        print_message("without stdin:true the command reads /dev/null (EOF at once)\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"wc\",\"-c\"]}", NULL, 0, &res, 10000), 0);
        assert_string_equal(res.out.data, "0\n");
        initc_result_free(&res);
        free(data);
}

static void test_exec_stdin_acks(void **state) {
        struct fx *f = *state;
        print_message("stdin_acks: init acks every stdin byte it took (WINDOW frames to spaced), and says so\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"exec\",\"argv\":[\"wc\",\"-c\"],\"stdin\":true,\"stdin_acks\":true}");
        assert_true(id > 0);
        struct initc_frame fr = { 0 };
        assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 10000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        _cleanup_json_ struct json *resp = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &resp, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_true(json_get_bool(resp, "stdin_acks", false));
        const size_t total = 1u << 20, step = 65536;
        char *chunk = calloc(1, step);
        assert_non_null(chunk);
        size_t acked = 0;
        for (size_t off = 0; off < total; off += step)
                assert_int_equal(initc_queue(&f->c, PROTO_STDIN, (uint32_t)id, chunk, step), 0);
        assert_int_equal(initc_queue(&f->c, PROTO_STDIN, (uint32_t)id, NULL, 0), 0);
        bool exited = false;
        struct buf out = BUF_INIT(0);
        for (int i = 0; i < 1000 && !exited; i++) {
                assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 10000), 1);
                if (fr.h.type == PROTO_WINDOW) {
                        assert_int_equal(fr.payload.len, PROTO_WINDOW_LEN);
                        acked += proto_window_decode((const uint8_t *)fr.payload.data);
                } else if (fr.h.type == PROTO_STDOUT) {
                        assert_int_equal(buf_append(&out, fr.payload.data, fr.payload.len), 0);
                } else {
                        assert_int_equal(fr.h.type, PROTO_EXIT);
                        exited = true;
                }
                initc_frame_free(&fr);
        }
        assert_true(exited);
        assert_int_equal(acked, total);
        assert_int_equal(buf_putc(&out, '\0'), 0);
        assert_string_equal(out.data, "1048576\n");
        buf_free(&out);
        free(chunk);
}

static void test_exec_missing(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        print_message("a missing command is a quick ENOENT error, not a hang\n");
        int64_t t0 = mono_ms();
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"python4-does-not-exist\",\"-V\"]}", NULL, 0, &res, 5000), 0);
        assert_true(mono_ms() - t0 < 2000);
        assert_error(res.resp, "ENOENT");
        assert_non_null(strstr(json_get_str(json_get(res.resp, "error"), "message"), "python4-does-not-exist: command not found"));
        assert_null(res.exit);
        initc_result_free(&res);

        print_message("a missing absolute path, a non-executable file and a missing cwd are errors too\n");
        _cleanup_json_ struct json *r1 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"/nonexistent/bin/x\"]}");
        assert_error(r1, "ENOENT");
        char noexec[PATH_MAX + 16], req[PATH_MAX + 64];
        snprintf(noexec, sizeof noexec, "%s/noexec", f->root);
        int fd = open(noexec, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
        snprintf(req, sizeof req, "{\"op\":\"exec\",\"argv\":[\"%s\"]}", noexec);
        _cleanup_json_ struct json *r2 = call(&f->c, "%s", req);
        assert_error(r2, "EACCES");
        _cleanup_json_ struct json *r3 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"cwd\":\"/no/such/dir\"}");
        assert_error(r3, "ENOENT");
        assert_non_null(strstr(json_get_str(json_get(r3, "error"), "message"), "cwd"));
        /* the connection is still fine */
        _cleanup_json_ struct json *r4 = call(&f->c, "{\"op\":\"ping\"}");
        assert_ok(r4);
}

static bool pid_gone(pid_t pid, int within_ms) {
        int64_t end = mono_ms() + within_ms;
        while (mono_ms() < end) {
                if (kill(pid, 0) < 0 && errno == ESRCH)
                        return true;
                usleep(10000);
        }
        return false;
}

static void test_exec_timeout(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        print_message("timeout_ms kills the whole process group and says timed_out\n");
        int64_t t0 = mono_ms();
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"sleep 100 & echo $!; wait\"],\"timeout_ms\":300}",
                                   NULL, 0, &res, 10000), 0);
        int64_t took = mono_ms() - t0;
        assert_ok(res.resp);
        assert_int_equal(res.signal, 9);
        assert_true(res.timed_out);
        assert_true(took >= 250 && took < 5000);
        pid_t grandchild = (pid_t)atoi(res.out.data);
        assert_true(grandchild > 0);
        assert_true(pid_gone(grandchild, 3000)); /* killed and reaped by init */
        initc_result_free(&res);
}

static bool ps_find(struct initc *c, int64_t pid, struct json **ret_all, const struct json **ret) {
        struct json *ps = call(c, "{\"op\":\"ps\"}");
        assert_ok(ps);
        const struct json *list = json_get(ps, "processes");
        assert_int_equal(json_type(list), JSON_ARRAY);
        *ret_all = ps;
        for (size_t i = 0; i < json_len(list); i++)
                if (get_int(json_at(list, i), "pid") == pid) {
                        *ret = json_at(list, i);
                        return true;
                }
        return false;
}

static void test_background(void **state) {
        struct fx *f = *state;
        print_message("a background process outlives its request and ps lists it\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\","
                                                    "\"echo start; sleep 0.3; echo more >&2; exec sleep 60\"],\"background\":true}");
        assert_ok(r);
        int64_t pid = get_int(r, "pid");
        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        assert_int_equal(json_type(json_get(e, "exit_code")), JSON_NULL);
        assert_string_equal(json_str(json_at(json_get(e, "argv"), 0)), "sh");
        assert_true(get_int(e, "started_ms") > 1600000000000);
        json_free(ps);

        print_message("attach from offset 0 replays and then follows live output\n");
        int64_t aid = initc_req(&f->c, "{\"op\":\"attach\",\"pid\":0}");
        assert_true(aid > 0); /* pid 0: a bad request answered under its id */
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        initc_frame_free(&fr);

        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":0,\"follow\":true}", (long long)pid);
        aid = initc_req(&f->c, req);
        assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        _cleanup_json_ struct json *ar = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ar, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_int_equal(get_int(ar, "offset"), 0);
        assert_true(json_is_true(json_get(ar, "running")));
        _cleanup_buf_ struct buf out = BUF_INIT(0), err = BUF_INIT(0);
        assert_null(collect(&f->c, (uint32_t)aid, &out, &err, 11, 5000));
        assert_int_equal(out.len, 6);
        assert_memory_equal(out.data, "start\n", 6);
        assert_int_equal(err.len, 5);
        assert_memory_equal(err.data, "more\n", 5);

        print_message("signal reaches the process; the attached stream ends with its EXIT\n");
        _cleanup_json_ struct json *sr = call(&f->c, "{\"op\":\"signal\",\"pid\":%lld,\"signal\":15}", (long long)pid);
        assert_ok(sr);
        _cleanup_json_ struct json *ex = collect(&f->c, (uint32_t)aid, &out, &err, 0, 5000);
        assert_non_null(ex);
        assert_false(json_get_bool(ex, "running", true));
        assert_int_equal(get_int(ex, "signal"), 15);
        assert_int_equal(get_int(ex, "offset"), 11);

        print_message("ps keeps the ended process with its signal and output size\n");
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_false(json_is_true(json_get(e, "running")));
        assert_int_equal(get_int(e, "signal"), 15);
        assert_int_equal(get_int(e, "output_bytes"), 11);
        json_free(ps);

        print_message("attach at offset 3 without follow replays the rest, then EXIT\n");
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":3,\"follow\":false}", (long long)pid);
        aid = initc_req(&f->c, req);
        assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, 5000), 1);
        _cleanup_json_ struct json *ar2 = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ar2, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_int_equal(get_int(ar2, "offset"), 3);
        assert_int_equal(get_int(ar2, "end"), 11);
        assert_false(json_is_true(json_get(ar2, "running")));
        buf_reset(&out);
        buf_reset(&err);
        _cleanup_json_ struct json *ex2 = collect(&f->c, (uint32_t)aid, &out, &err, 0, 5000);
        assert_int_equal(out.len, 3);
        assert_memory_equal(out.data, "rt\n", 3);
        assert_int_equal(err.len, 5);
        assert_false(json_get_bool(ex2, "running", true));
        assert_int_equal(get_int(ex2, "signal"), 15);
        assert_int_equal(get_int(ex2, "offset"), 11);

        print_message("signal and attach on unknown pids are ESRCH\n");
        _cleanup_json_ struct json *s2 = call(&f->c, "{\"op\":\"signal\",\"pid\":%lld,\"signal\":9}", (long long)pid);
        assert_error(s2, "ESRCH");
        _cleanup_json_ struct json *s3 = call(&f->c, "{\"op\":\"attach\",\"pid\":999999999}");
        assert_error(s3, "ESRCH");
}

static void test_cancel_detaches(void **state) {
        struct fx *f = *state;
        print_message("CANCEL on a foreground exec turns it into a background process\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo a; sleep 0.5; echo b; exec sleep 60\"]}");
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 5000), 1);
        _cleanup_json_ struct json *r = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &r, NULL, 0), 0);
        initc_frame_free(&fr);
        int64_t pid = get_int(r, "pid");
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        assert_null(collect(&f->c, (uint32_t)id, &out, NULL, 2, 5000));
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, (uint32_t)id, NULL, 0), 0);

        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        json_free(ps);

        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld}", (long long)pid);
        int64_t aid = initc_req(&f->c, req);
        assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, 5000), 1);
        _cleanup_json_ struct json *ar = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ar, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_int_equal(get_int(ar, "offset"), 2); /* "a\n" went to the foreground stream */
        buf_reset(&out);
        assert_null(collect(&f->c, (uint32_t)aid, &out, NULL, 2, 5000));
        assert_memory_equal(out.data, "b\n", 2);

        print_message("CANCEL on an attach detaches without touching the process\n");
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, (uint32_t)aid, NULL, 0), 0);
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        json_free(ps);
        _cleanup_json_ struct json *sr = call(&f->c, "{\"op\":\"signal\",\"pid\":%lld,\"signal\":9}", (long long)pid);
        assert_ok(sr);
        assert_true(pid_gone((pid_t)pid, 3000));
}

static void test_reaps_orphans(void **state) {
        struct fx *f = *state;
        struct initc_result res;
        print_message("orphaned grandchildren reparent to init and are reaped (no zombies left)\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"(sleep 0.2 &) ; echo spawned\"]}", NULL, 0, &res, 10000), 0);
        assert_int_equal(res.exit_code, 0);
        initc_result_free(&res);
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)f->c.pid, (int)f->c.pid);
        int64_t end = mono_ms() + 3000;
        ssize_t n = 1;
        while (mono_ms() < end) {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                assert_true(fd >= 0);
                n = read(fd, buf, sizeof buf);
                close(fd);
                if (n == 0)
                        break;
                usleep(20000);
        }
        assert_int_equal(n, 0);
}

/* ---- files ---- */

static void write_file(struct initc *c, const char *req, const char *const *chunks, struct json **ret) {
        int64_t id = initc_req(c, req);
        assert_true(id > 0);
        for (size_t i = 0; chunks && chunks[i]; i++)
                assert_int_equal(initc_send(c, PROTO_DATA, (uint32_t)id, chunks[i], strlen(chunks[i])), 0);
        assert_int_equal(initc_send(c, PROTO_DATA, (uint32_t)id, NULL, 0), 0);
        struct initc_frame fr;
        assert_int_equal(initc_recv(c, (uint32_t)id, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, ret, NULL, 0), 0);
        initc_frame_free(&fr);
}

/* Reads a file through init; returns the RESP, fills data. */
static struct json *read_file(struct initc *c, const char *req, struct buf *data) {
        int64_t id = initc_req(c, req);
        struct initc_frame fr;
        assert_int_equal(initc_recv(c, (uint32_t)id, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        struct json *resp = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &resp, NULL, 0), 0);
        initc_frame_free(&fr);
        if (json_get(resp, "error"))
                return resp;
        for (;;) {
                assert_int_equal(initc_recv(c, (uint32_t)id, &fr, 5000), 1);
                assert_int_equal(fr.h.type, PROTO_DATA);
                size_t n = fr.payload.len;
                assert_int_equal(buf_append(data, fr.payload.data, n), 0);
                initc_frame_free(&fr);
                if (n == 0)
                        return resp;
        }
}

static void test_files(void **state) {
        struct fx *f = *state;
        char host[PATH_MAX + 64];
        struct stat st;
        print_message("write with parents in three DATA frames, then check on the host\n");
        const char *chunks[] = { "hello ", "world", "\n", NULL };
        _cleanup_json_ struct json *w = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/dir/sub/f.txt\",\"mode\":384,\"parents\":true}", chunks, &w);
        assert_ok(w);
        assert_int_equal(get_int(w, "written"), 12);
        snprintf(host, sizeof host, "%s/dir/sub/f.txt", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_size, 12);
        assert_int_equal(st.st_mode & 07777, 0600);

        print_message("read it back whole and in part\n");
        _cleanup_buf_ struct buf data = BUF_INIT(0);
        _cleanup_json_ struct json *r = read_file(&f->c, "{\"op\":\"read\",\"path\":\"dir/sub/f.txt\"}", &data);
        assert_ok(r);
        assert_int_equal(get_int(r, "size"), 12);
        assert_int_equal(get_int(r, "mode") & 07777, 0600);
        assert_int_equal(data.len, 12);
        assert_memory_equal(data.data, "hello world\n", 12);
        buf_reset(&data);
        _cleanup_json_ struct json *r2 = read_file(&f->c, "{\"op\":\"read\",\"path\":\"/dir/sub/f.txt\",\"offset\":6,\"length\":5}", &data);
        assert_ok(r2);
        assert_int_equal(data.len, 5);
        assert_memory_equal(data.data, "world", 5);

        print_message("append adds to the file\n");
        const char *more[] = { "again\n", NULL };
        _cleanup_json_ struct json *w2 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/dir/sub/f.txt\",\"append\":true}", more, &w2);
        assert_ok(w2);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_size, 18);

        print_message("stat of a file, a directory and a symlink (not followed)\n");
        _cleanup_json_ struct json *s1 = call(&f->c, "{\"op\":\"stat\",\"path\":\"/dir/sub/f.txt\"}");
        assert_string_equal(json_get_str(s1, "type"), "file");
        assert_int_equal(get_int(s1, "size"), 18);
        assert_int_equal(get_int(s1, "uid"), getuid());
        _cleanup_json_ struct json *s2 = call(&f->c, "{\"op\":\"stat\",\"path\":\"/dir/sub/\"}");
        assert_string_equal(json_get_str(s2, "type"), "dir");
        snprintf(host, sizeof host, "%s/dir/link", f->root);
        assert_int_equal(symlink("sub/f.txt", host), 0);
        _cleanup_json_ struct json *s3 = call(&f->c, "{\"op\":\"stat\",\"path\":\"/dir/link\"}");
        assert_string_equal(json_get_str(s3, "type"), "symlink");
        assert_string_equal(json_get_str(s3, "target"), "sub/f.txt");

        print_message("list is sorted, typed, and pages with after/limit\n");
        const char *none[] = { NULL };
        _cleanup_json_ struct json *w3 = NULL, *w4 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/dir/a\"}", none, &w3);
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/dir/b\"}", none, &w4);
        assert_ok(w3);
        assert_int_equal(get_int(w3, "written"), 0);
        _cleanup_json_ struct json *l1 = call(&f->c, "{\"op\":\"list\",\"path\":\"/dir\"}");
        const struct json *ents = json_get(l1, "entries");
        assert_int_equal(json_len(ents), 4);
        const char *names[] = { "a", "b", "link", "sub" }, *types[] = { "file", "file", "symlink", "dir" };
        for (size_t i = 0; i < 4; i++) {
                assert_string_equal(json_get_str(json_at(ents, i), "name"), names[i]);
                assert_string_equal(json_get_str(json_at(ents, i), "type"), types[i]);
        }
        assert_false(json_get_bool(l1, "truncated", true));
        _cleanup_json_ struct json *l2 = call(&f->c, "{\"op\":\"list\",\"path\":\"/dir\",\"limit\":2}");
        assert_int_equal(json_len(json_get(l2, "entries")), 2);
        assert_true(json_get_bool(l2, "truncated", false));
        _cleanup_json_ struct json *l3 = call(&f->c, "{\"op\":\"list\",\"path\":\"/dir\",\"after\":\"b\"}");
        assert_int_equal(json_len(json_get(l3, "entries")), 2);
        assert_string_equal(json_get_str(json_at(json_get(l3, "entries"), 0), "name"), "link");

        print_message("mkdir with and without parents\n");
        _cleanup_json_ struct json *m1 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m/n\"}");
        assert_error(m1, "ENOENT");
        _cleanup_json_ struct json *m2 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m/n/o\",\"parents\":true,\"mode\":448}");
        assert_ok(m2);
        _cleanup_json_ struct json *m3 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m/n/o\",\"parents\":true}");
        assert_ok(m3);
        _cleanup_json_ struct json *m4 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m/n\"}");
        assert_error(m4, "EEXIST");
        snprintf(host, sizeof host, "%s/m/n/o", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0700);

        print_message("errors: read of a directory, of a missing file; remove of a non-empty dir\n");
        buf_reset(&data);
        _cleanup_json_ struct json *e1 = read_file(&f->c, "{\"op\":\"read\",\"path\":\"/dir\"}", &data);
        assert_error(e1, "EISDIR");
        _cleanup_json_ struct json *e2 = read_file(&f->c, "{\"op\":\"read\",\"path\":\"/nope\"}", &data);
        assert_error(e2, "ENOENT");
        _cleanup_json_ struct json *e3 = call(&f->c, "{\"op\":\"remove\",\"path\":\"/dir\"}");
        assert_error(e3, "ENOTEMPTY");

        print_message("a write that fails answers one error RESP after its DATA ends\n");
        const char *junk[] = { "x", "y", NULL };
        _cleanup_json_ struct json *e4 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/missing/dir/f\"}", junk, &e4);
        assert_error(e4, "ENOENT");

        print_message("a cancelled write leaves neither the file nor a temporary behind\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"write\",\"path\":\"/dir/cancelled\"}");
        assert_int_equal(initc_send(&f->c, PROTO_DATA, (uint32_t)id, "abc", 3), 0);
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, (uint32_t)id, NULL, 0), 0);
        _cleanup_json_ struct json *l4 = call(&f->c, "{\"op\":\"list\",\"path\":\"/dir\"}");
        assert_int_equal(json_len(json_get(l4, "entries")), 4);

        print_message("remove: a symlink, then a tree recursively\n");
        _cleanup_json_ struct json *d1 = call(&f->c, "{\"op\":\"remove\",\"path\":\"/dir/link\"}");
        assert_ok(d1);
        snprintf(host, sizeof host, "%s/dir/sub/f.txt", f->root);
        assert_int_equal(stat(host, &st), 0); /* the target stays */
        _cleanup_json_ struct json *d2 = call(&f->c, "{\"op\":\"remove\",\"path\":\"/dir\",\"recursive\":true}");
        assert_ok(d2);
        snprintf(host, sizeof host, "%s/dir", f->root);
        assert_int_equal(stat(host, &st), -1);
        _cleanup_json_ struct json *d3 = call(&f->c, "{\"op\":\"remove\",\"path\":\"/\",\"recursive\":true}");
        assert_error(d3, "EBUSY");
}

/* Writes text to root/rel on the host. */
static void put_host(const char *root, const char *rel, const char *text) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s", root, rel);
        FILE *fp = fopen(p, "w");
        assert_non_null(fp);
        assert_int_equal(fputs(text, fp) >= 0, 1);
        assert_int_equal(fclose(fp), 0);
}

static void test_user(void **state) {
        struct fx *f = *state;
        char host[PATH_MAX + 64], expect[PATH_MAX + 512];
        struct stat st;
        struct initc_result res;
        snprintf(host, sizeof host, "%s/etc", f->root);
        assert_int_equal(mkdir(host, 0755), 0);
        snprintf(host, sizeof host, "%s/home", f->root);
        assert_int_equal(mkdir(host, 0755), 0);
        snprintf(host, sizeof host, "%s/home/user", f->root);
        assert_int_equal(mkdir(host, 0755), 0);
        put_host(f->root, "etc/passwd",
                 "root:x:0:0:root:/root:/bin/sh\n"
                 "# a comment\n"
                 "broken line\n"
                 "user:x:1000:1000::/home/user:/bin/sh\n"
                 "nohome:x:1001:1001::/nowhere:/bin/sh\n");
        put_host(f->root, "etc/group", "root:x:0:\nuser:x:1000:\nextra:x:2000:other,user\nnot:x:2001:other\n");

        print_message("unknown user: ENOENT \"no user NAME in /etc/passwd\", marked as a user error\n");
        _cleanup_json_ struct json *e1 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"bob\"}");
        assert_error(e1, "ENOENT");
        assert_string_equal(json_get_str(json_get(e1, "error"), "message"), "no user bob in /etc/passwd");
        assert_true(json_get_bool(json_get(e1, "error"), "user", false));
        _cleanup_json_ struct json *e2 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/d\",\"user\":\"bob\"}");
        assert_error(e2, "ENOENT");
        assert_true(json_get_bool(json_get(e2, "error"), "user", false));
        const char *none[] = { "x", NULL };
        _cleanup_json_ struct json *e3 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/w\",\"user\":\"bob\"}", none, &e3);
        assert_error(e3, "ENOENT");
        assert_true(json_get_bool(json_get(e3, "error"), "user", false));
        snprintf(host, sizeof host, "%s/w", f->root);
        assert_int_equal(access(host, F_OK), -1);
        _cleanup_json_ struct json *e4 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"user\",\"uid\":0}");
        assert_error(e4, "EINVAL");
        _cleanup_json_ struct json *e5 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":[1]}");
        assert_error(e5, "EINVAL");

        if (geteuid() != 0) {
                print_message("not root: skipping the id switches of \"user\"\n");
                return;
        }
        print_message("exec as user: uid/gid 1000, its groups, HOME/USER/LOGNAME/SHELL, cwd its home\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"id -u; id -g; id -G; "
                                          "echo \\\"$HOME|$USER|$LOGNAME|$SHELL\\\"; pwd\"],\"user\":\"user\"}",
                                   NULL, 0, &res, 10000), 0);
        assert_ok(res.resp);
        snprintf(expect, sizeof expect, "1000\n1000\n1000 2000\n/home/user|user|user|/bin/sh\n%s/home/user\n", f->root);
        assert_string_equal(res.out.data, expect);
        initc_result_free(&res);

        print_message("by uid; the request's env and cwd win over the user's\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"id -u; echo $HOME; pwd\"],"
                                          "\"user\":1000,\"env\":[\"HOME=/x\"],\"cwd\":\"/etc\"}",
                                   NULL, 0, &res, 10000), 0);
        assert_ok(res.resp);
        snprintf(expect, sizeof expect, "1000\n/x\n%s/etc\n", f->root);
        assert_string_equal(res.out.data, expect);
        initc_result_free(&res);

        print_message("a home that does not exist: cwd stays /; a uid not in passwd: gid = uid, HOME /\n");
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo $HOME; pwd\"],\"user\":\"nohome\"}",
                                   NULL, 0, &res, 10000), 0);
        snprintf(expect, sizeof expect, "/nowhere\n%s\n", f->root);
        assert_string_equal(res.out.data, expect);
        initc_result_free(&res);
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"id -u; id -g; echo $HOME\"],\"user\":\"4242\"}",
                                   NULL, 0, &res, 10000), 0);
        assert_string_equal(res.out.data, "4242\n4242\n/\n");
        initc_result_free(&res);

        print_message("write as user (with parents) and mkdir as user: owned by 1000; root's stay root's\n");
        const char *chunks[] = { "hi\n", NULL };
        _cleanup_json_ struct json *w = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/home/user/a/b/f.txt\",\"parents\":true,\"user\":\"user\"}", chunks, &w);
        assert_ok(w);
        snprintf(host, sizeof host, "%s/home/user/a/b/f.txt", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 1000);
        assert_int_equal(st.st_gid, 1000);
        snprintf(host, sizeof host, "%s/home/user/a", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 1000);
        _cleanup_json_ struct json *w2 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/rootfile\",\"append\":true}", chunks, &w2);
        assert_ok(w2);
        _cleanup_json_ struct json *w3 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/rootfile\",\"append\":true,\"user\":\"user\"}", chunks, &w3);
        assert_ok(w3);
        snprintf(host, sizeof host, "%s/rootfile", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 0);
        assert_int_equal(st.st_size, 6);
        _cleanup_json_ struct json *w4 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/newappend\",\"append\":true,\"user\":\"user\"}", chunks, &w4);
        assert_ok(w4);
        snprintf(host, sizeof host, "%s/newappend", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 1000);
        _cleanup_json_ struct json *m = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m1/m2\",\"parents\":true,\"user\":\"user\"}");
        assert_ok(m);
        snprintf(host, sizeof host, "%s/m1/m2", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 1000);
        _cleanup_json_ struct json *m2 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m3\",\"user\":1000}");
        assert_ok(m2);
        snprintf(host, sizeof host, "%s/m3", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 1000);
        _cleanup_json_ struct json *m3 = call(&f->c, "{\"op\":\"mkdir\",\"path\":\"/m4\"}");
        snprintf(host, sizeof host, "%s/m4", f->root);
        assert_int_equal(stat(host, &st), 0);
        assert_int_equal(st.st_uid, 0);

        print_message("a line over INIT_USER_LINE_MAX is skipped: its user is unknown\n");
        {
                char longline[1200];
                memset(longline, 'g', sizeof longline);
                memcpy(longline, "long:x:1002:1002:", 17);
                memcpy(longline + sizeof longline - 16, ":/home/x:/bin/s\n", 16);
                snprintf(host, sizeof host, "%s/etc/passwd", f->root);
                FILE *fp = fopen(host, "a");
                assert_non_null(fp);
                assert_int_equal(fwrite(longline, 1, sizeof longline, fp), sizeof longline);
                assert_int_equal(fclose(fp), 0);
        }
        _cleanup_json_ struct json *e7 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"long\"}");
        assert_error(e7, "ENOENT");

        print_message("an /etc/passwd over the size limit is EFBIG, not read\n");
        snprintf(host, sizeof host, "%s/etc/passwd", f->root);
        assert_int_equal(truncate(host, (2 << 20)), 0);
        _cleanup_json_ struct json *e6 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"user\"}");
        assert_error(e6, "EFBIG");
}

static void test_no_escape(void **state) {
        struct fx *f = *state;
        char outside[] = "/tmp/space-init-outside-XXXXXX", host[PATH_MAX + 64], req[PATH_MAX + 256];
        struct stat st;
        assert_non_null(mkdtemp(outside));
        snprintf(host, sizeof host, "%s/secret", outside);
        FILE *fp = fopen(host, "w");
        assert_non_null(fp);
        fputs("TOP", fp);
        fclose(fp);
        snprintf(host, sizeof host, "%s/abs", f->root);
        assert_int_equal(symlink(outside, host), 0);
        snprintf(host, sizeof host, "%s/rel", f->root);
        snprintf(req, sizeof req, "../../../../../../../..%s", outside);
        assert_int_equal(symlink(req, host), 0);

        print_message("reading through an absolute symlink, a relative one and ../.. finds nothing outside\n");
        const char *paths[] = { "/abs/secret", "rel/secret", NULL };
        _cleanup_buf_ struct buf data = BUF_INIT(0);
        for (size_t i = 0; paths[i]; i++) {
                snprintf(req, sizeof req, "{\"op\":\"read\",\"path\":\"%s\"}", paths[i]);
                _cleanup_json_ struct json *r = read_file(&f->c, req, &data);
                assert_error(r, "ENOENT");
        }
        snprintf(req, sizeof req, "{\"op\":\"read\",\"path\":\"../../../../..%s/secret\"}", outside);
        _cleanup_json_ struct json *r1 = read_file(&f->c, req, &data);
        assert_error(r1, "ENOENT");
        assert_int_equal(data.len, 0);

        print_message("writes, mkdirs and removes through them stay under the root\n");
        const char *chunks[] = { "pwned", NULL };
        _cleanup_json_ struct json *w1 = NULL, *w2 = NULL;
        write_file(&f->c, "{\"op\":\"write\",\"path\":\"/abs/pwn\",\"parents\":true}", chunks, &w1);
        assert_error(w1, "ENOENT"); /* the symlink dangles inside the root, like mkdir -p */
        snprintf(req, sizeof req, "{\"op\":\"write\",\"path\":\"../../..%s/pwn2\",\"parents\":true}", outside);
        write_file(&f->c, req, chunks, &w2);
        json_free(call(&f->c, "{\"op\":\"mkdir\",\"path\":\"rel/newdir\",\"parents\":true}")); /* where it lands is checked below */
        _cleanup_json_ struct json *d = call(&f->c, "{\"op\":\"remove\",\"path\":\"abs/secret\"}");
        assert_error(d, "ENOENT");
        snprintf(host, sizeof host, "%s/pwn", outside);
        assert_int_equal(stat(host, &st), -1);
        snprintf(host, sizeof host, "%s/pwn2", outside);
        assert_int_equal(stat(host, &st), -1);
        snprintf(host, sizeof host, "%s/newdir", outside);
        assert_int_equal(stat(host, &st), -1);
        snprintf(host, sizeof host, "%s/secret", outside);
        assert_int_equal(stat(host, &st), 0);
        /* what was written landed inside the root instead */
        assert_ok(w2);
        snprintf(host, sizeof host, "%s%s/pwn2", f->root, outside);
        assert_int_equal(stat(host, &st), 0);

        print_message("stat and list of ../.. are the root itself; an over-long path is refused\n");
        _cleanup_json_ struct json *s = call(&f->c, "{\"op\":\"stat\",\"path\":\"../..\"}");
        assert_ok(s);
        assert_string_equal(json_get_str(s, "type"), "dir");
        _cleanup_json_ struct json *l = call(&f->c, "{\"op\":\"list\",\"path\":\"../..\"}");
        assert_ok(l);
        bool saw_abs = false;
        for (size_t i = 0; i < json_len(json_get(l, "entries")); i++)
                saw_abs |= strcmp(json_get_str(json_at(json_get(l, "entries"), i), "name"), "abs") == 0;
        assert_true(saw_abs);
        char *longp = malloc(PROTO_MAX_PATH + 64);
        assert_non_null(longp);
        strcpy(longp, "{\"op\":\"stat\",\"path\":\"");
        size_t o = strlen(longp);
        memset(longp + o, 'a', PROTO_MAX_PATH + 1);
        strcpy(longp + o + PROTO_MAX_PATH + 1, "\"}");
        struct json *lr = NULL;
        assert_int_equal(initc_call(&f->c, longp, &lr), 0);
        assert_error(lr, "ENAMETOOLONG");
        json_free(lr);
        free(longp);
        rm_rf(outside);
}

/* ---- bounds ---- */

static long vm_kb(pid_t pid, const char *field) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        long v = -1;
        size_t fl = strlen(field);
        while (fgets(line, sizeof line, fp))
                if (strncmp(line, field, fl) == 0 && line[fl] == ':')
                        v = strtol(line + fl + 1, NULL, 10);
        fclose(fp);
        assert_true(v >= 0);
        return v;
}

static void test_flood_bounded(void **state) {
        struct fx *f = *state;
        const long limit_kb = sanitized ? 1024 * 1024 : 24 * 1024;
        print_message("a foreground flood (64 MB) while the client does not read: init's memory stays bounded\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"64000000\",\"/dev/zero\"]}");
        usleep(1500 * 1000);
        long hwm = vm_kb(f->c.pid, "VmHWM");
        print_message("  peak RSS while stalled: %ld kB\n", hwm);
        assert_true(hwm < limit_kb);
        size_t total = 0;
        struct json *ex = NULL;
        for (;;) {
                struct initc_frame fr;
                assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 20000), 1);
                if (fr.h.type == PROTO_STDOUT)
                        total += fr.payload.len;
                else if (fr.h.type == PROTO_EXIT) {
                        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ex, NULL, 0), 0);
                        initc_frame_free(&fr);
                        break;
                } else
                        assert_int_equal(fr.h.type, PROTO_RESP);
                initc_frame_free(&fr);
        }
        assert_int_equal(total, 64000000);
        assert_int_equal(get_int(ex, "exit_code"), 0);
        json_free(ex);

        print_message("a background flood (50 MB) keeps only the ring\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"50000000\",\"/dev/zero\"],\"background\":true}");
        int64_t pid = get_int(r, "pid");
        int64_t end = mono_ms() + 20000;
        for (;;) {
                struct json *ps = NULL;
                const struct json *e = NULL;
                assert_true(ps_find(&f->c, pid, &ps, &e));
                bool done = !json_is_true(json_get(e, "running")) && get_int(e, "output_bytes") == 50000000;
                json_free(ps);
                if (done)
                        break;
                assert_true(mono_ms() < end);
                usleep(50000);
        }
        hwm = vm_kb(f->c.pid, "VmHWM");
        print_message("  peak RSS: %ld kB\n", hwm);
        assert_true(hwm < limit_kb);
        char req[128];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld}", (long long)pid);
        id = initc_req(&f->c, req);
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 5000), 1);
        _cleanup_json_ struct json *ar = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ar, NULL, 0), 0);
        initc_frame_free(&fr);
        int64_t first = get_int(ar, "offset");
        assert_true(first >= 50000000 - (int64_t)PROTO_BG_RING && first < 50000000);
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        _cleanup_json_ struct json *ex2 = collect(&f->c, (uint32_t)id, &out, NULL, 0, 10000);
        assert_int_equal((int64_t)out.len, 50000000 - first);
        assert_int_equal(get_int(ex2, "offset"), 50000000);
}

static void test_bad_input(void **state) {
        struct fx *f = *state;
        print_message("malformed JSON, a non-object, an unknown op: errors under their ids\n");
        _cleanup_json_ struct json *r1 = call(&f->c, "{\"op\":");
        assert_error(r1, "EINVAL");
        _cleanup_json_ struct json *r2 = call(&f->c, "[1,2]");
        assert_error(r2, "EINVAL");
        _cleanup_json_ struct json *r3 = call(&f->c, "{\"op\":\"launch-missiles\"}");
        assert_error(r3, "EOPNOTSUPP");
        _cleanup_json_ struct json *r4 = call(&f->c, "{\"op\":\"signal\",\"pid\":1,\"signal\":\"TERM\"}");
        assert_error(r4, "EINVAL");

        print_message("a framing error (bad magic) closes the connection; init exits as nothing can reconnect\n");
        uint8_t junk[PROTO_HDR_SIZE] = "XXXXXXXXXXXXXXX";
        assert_int_equal(write(f->c.fd, junk, sizeof junk), (ssize_t)sizeof junk);
        struct initc_frame fr;
        assert_int_equal(initc_recv_any(&f->c, &fr, 5000), -EPIPE);
        /* teardown checks that init exited 0 */
}

static void test_random_frames(void **state) {
        struct fx *f = *state;
        print_message("2000 well-framed but random requests and stream frames: init answers or ignores, and lives\n");
        static const char *const pieces[] = {
                "{\"op\":\"exec\"", "{\"op\":\"read\"", "{\"op\":\"write\"", "{\"op\":\"attach\"",
                "{\"op\":\"list\"", "{\"op\":\"stat\"", "{\"op\":\"signal\"", "{\"op\":\"remove\"",
                ",\"path\":\"/x\"", ",\"path\":7", ",\"argv\":[\"true\"]", ",\"argv\":[1]", ",\"pid\":-3",
                ",\"offset\":1e300", ",\"length\":-7", ",\"mode\":99999", ",\"env\":[\"=\"]", ",\"timeout_ms\":1",
                ",\"background\":true", ",\"window\":1", ",\"signal\":0", ",\"path\":\"\"", "}", "]", "\"", "\\u0000", "{",
        };
        unsigned seed = 12345;
        char req[512];
        for (int i = 0; i < 2000; i++) {
                size_t n = 0;
                int parts = 1 + (int)(rand_r(&seed) % 5);
                for (int k = 0; k < parts; k++) {
                        const char *p = pieces[rand_r(&seed) % ELEMENTSOF(pieces)];
                        size_t l = strlen(p);
                        if (n + l + 2 >= sizeof req)
                                break;
                        memcpy(req + n, p, l);
                        n += l;
                }
                if (rand_r(&seed) % 2)
                        req[n++] = '}';
                uint8_t type = (uint8_t)(PROTO_REQ + rand_r(&seed) % 9); /* REQ..WINDOW, and the init-only types */
                uint32_t id = 1 + rand_r(&seed) % 50;
                size_t len = type == PROTO_CANCEL ? 0 : type == PROTO_WINDOW ? PROTO_WINDOW_LEN : type == PROTO_KEY ? PROTO_KEY_LEN : n;
                if (len > n) /* a WINDOW's 4 bytes from whatever the request text holds */
                        memset(req + n, 0x7f, len - n);
                assert_int_equal(initc_send(&f->c, type, id, req, len), 0);
        }
        /* Finish any writes left open so their ids can be reused, then check init still answers. */
        for (uint32_t id = 1; id <= 50; id++)
                assert_int_equal(initc_send(&f->c, PROTO_DATA, id, NULL, 0), 0);
        f->c.next_id = 1000;
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"ping\"}");
        assert_ok(r);
        assert_int_equal(get_int(r, "pid"), f->c.pid);
}

/* ---- --listen, reconnects, SIGTERM ---- */

static pid_t start_listener(const char *sock, const char *root) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                execl(init_path, init_path, "--listen", sock, "--root", root, (char *)NULL);
                _exit(127);
        }
        return pid;
}

static int wait_exit(pid_t pid, int ms) {
        int64_t end = mono_ms() + ms;
        int st;
        while (mono_ms() < end) {
                if (waitpid(pid, &st, WNOHANG) == pid)
                        return st;
                usleep(10000);
        }
        return -1;
}

/* ---- stream windows (protocol.md §3.14) ---- */

static void send_window(struct initc *c, uint32_t id, uint32_t grant) {
        uint8_t p[PROTO_WINDOW_LEN];
        proto_window_encode(grant, p);
        assert_int_equal(initc_send(c, PROTO_WINDOW, id, p, sizeof p), 0);
}

/* Takes the output frames of id (STDOUT/STDERR or DATA) that come within quiet_ms of each
 * other; returns their payload bytes. *ended says whether the stream's last frame came. */
static size_t take_output(struct initc *c, uint32_t id, int quiet_ms, bool *ended) {
        size_t total = 0;
        *ended = false;
        for (;;) {
                struct initc_frame fr;
                int r = initc_recv(c, id, &fr, quiet_ms);
                assert_true(r >= 0);
                if (r == 0)
                        return total;
                uint8_t t = fr.h.type;
                size_t n = fr.payload.len;
                initc_frame_free(&fr);
                if (t == PROTO_EXIT || (t == PROTO_DATA && n == 0)) {
                        *ended = true;
                        return total;
                }
                assert_true(t == PROTO_STDOUT || t == PROTO_STDERR || t == PROTO_DATA);
                total += n;
        }
}

static int64_t resp_of(struct initc *c, int64_t id, const char *key) {
        struct initc_frame fr;
        assert_int_equal(initc_recv(c, (uint32_t)id, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        _cleanup_json_ struct json *r = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &r, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_ok(r);
        return key ? get_int(r, key) : 0;
}

static void test_windows(void **state) {
        struct fx *f = *state;
        bool ended;
        print_message("HELLO says init honours windows\n");
        assert_true(json_is_true(json_get(f->c.hello, "window")));

        print_message("an exec with a 1000-byte window sends exactly 1000 bytes, then holds its command\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"3000000\",\"/dev/zero\"],\"window\":1000}");
        int64_t pid = resp_of(&f->c, id, "pid");
        assert_int_equal(take_output(&f->c, (uint32_t)id, 500, &ended), 1000);
        assert_false(ended);
        assert_int_equal(kill((pid_t)pid, 0), 0); /* blocked on its full pipe, alive */
        print_message("other requests are answered meanwhile\n");
        _cleanup_json_ struct json *ping = call(&f->c, "{\"op\":\"ping\"}");
        assert_ok(ping);
        struct initc_result res;
        assert_int_equal(initc_run(&f->c, "{\"op\":\"exec\",\"argv\":[\"echo\",\"beside\"]}", NULL, 0, &res, 5000), 0);
        assert_int_equal(res.out.len, 7);
        initc_result_free(&res);
        print_message("grants add up: 5000 more bytes, then the rest\n");
        send_window(&f->c, (uint32_t)id, 2000);
        send_window(&f->c, (uint32_t)id, 3000);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 500, &ended), 5000);
        assert_false(ended);
        send_window(&f->c, (uint32_t)id, UINT32_MAX); /* clipped at PROTO_MAX_WINDOW, no overflow */
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        _cleanup_json_ struct json *ex = collect(&f->c, (uint32_t)id, &out, NULL, 0, 20000);
        assert_int_equal(out.len, 3000000 - 6000);
        assert_int_equal(get_int(ex, "exit_code"), 0);

        print_message("stdout and stderr share one window\n");
        id = initc_req(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"head -c 300 /dev/zero; head -c 300 /dev/zero >&2\"],\"window\":400}");
        (void)resp_of(&f->c, id, "pid");
        assert_int_equal(take_output(&f->c, (uint32_t)id, 500, &ended), 400);
        assert_false(ended);
        send_window(&f->c, (uint32_t)id, 1000);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 2000, &ended), 200);
        assert_true(ended);

        print_message("a read with a window: 10000 bytes, then the rest and the end\n");
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/big", f->root);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        for (int i = 0; i < 100000; i++)
                fputc('a' + i % 26, fp);
        assert_int_equal(fclose(fp), 0);
        id = initc_req(&f->c, "{\"op\":\"read\",\"path\":\"/big\",\"window\":10000}");
        assert_int_equal(resp_of(&f->c, id, "size"), 100000);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 500, &ended), 10000);
        assert_false(ended);
        send_window(&f->c, (uint32_t)id, 100000);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 2000, &ended), 90000);
        assert_true(ended);

        print_message("an attach with a window cuts ring records where the window ends\n");
        _cleanup_json_ struct json *bg = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"200000\",\"/dev/zero\"],\"background\":true}");
        int64_t bpid = get_int(bg, "pid");
        for (int64_t end = mono_ms() + 5000;;) {
                struct json *ps = NULL;
                const struct json *e = NULL;
                assert_true(ps_find(&f->c, bpid, &ps, &e));
                bool done = !json_is_true(json_get(e, "running")) && get_int(e, "output_bytes") == 200000;
                json_free(ps);
                if (done)
                        break;
                assert_true(mono_ms() < end);
                usleep(20000);
        }
        char req[160];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"window\":1000}", (long long)bpid);
        id = initc_req(&f->c, req);
        assert_int_equal(resp_of(&f->c, id, "offset"), 0);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 500, &ended), 1000);
        assert_false(ended);
        send_window(&f->c, (uint32_t)id, 199000);
        assert_int_equal(take_output(&f->c, (uint32_t)id, 2000, &ended), 199000);
        assert_true(ended);

        print_message("a bad window is EINVAL; WINDOW for unknown ids is ignored\n");
        _cleanup_json_ struct json *e1 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"window\":-1}");
        assert_error(e1, "EINVAL");
        _cleanup_json_ struct json *e2 = call(&f->c, "{\"op\":\"read\",\"path\":\"/big\",\"window\":%u}", PROTO_MAX_WINDOW + 1);
        assert_error(e2, "EINVAL");
        _cleanup_json_ struct json *e3 = call(&f->c, "{\"op\":\"attach\",\"pid\":%lld,\"window\":\"x\"}", (long long)bpid);
        assert_error(e3, "EINVAL");
        send_window(&f->c, 987654, 100);
        _cleanup_json_ struct json *ping2 = call(&f->c, "{\"op\":\"ping\"}");
        assert_ok(ping2);
}

static void test_listen_reconnect(void **state) {
        char dir[] = "/tmp/space-init-listen-XXXXXX", sock[PATH_MAX];
        assert_non_null(mkdtemp(dir));
        snprintf(sock, sizeof sock, "%s/init.sock", dir);
        pid_t ipid = start_listener(sock, dir);

        print_message("--listen: a background process survives the connection; the newest connection wins\n");
        struct initc c1, c2, c3;
        assert_int_equal(initc_connect(&c1, sock), 0);
        _cleanup_json_ struct json *r = call(&c1, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"background\":true}");
        int64_t pid = get_int(r, "pid");
        int64_t fid = initc_req(&c1, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo x; exec sleep 60\"]}");
        struct initc_frame fr;
        assert_int_equal(initc_recv(&c1, (uint32_t)fid, &fr, 5000), 1);
        _cleanup_json_ struct json *fr_resp = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &fr_resp, NULL, 0), 0);
        initc_frame_free(&fr);
        int64_t fpid = get_int(fr_resp, "pid");

        assert_int_equal(initc_connect(&c2, sock), 0);
        assert_int_equal(initc_recv(&c1, 12345, &fr, 5000), -EPIPE);
        initc_close(&c1, 0);
        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&c2, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        json_free(ps);
        print_message("a foreground command of a dropped connection goes on in the background\n");
        assert_true(ps_find(&c2, fpid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        json_free(ps);

        print_message("a command held back by a shut window goes on, into its ring, on a new connection\n");
        int64_t wid = initc_req(&c2, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"3000000\",\"/dev/zero\"],\"window\":1}");
        int64_t wpid = resp_of(&c2, wid, "pid");
        bool ended;
        assert_int_equal(take_output(&c2, (uint32_t)wid, 300, &ended), 1);
        initc_close(&c2, 0);
        assert_int_equal(initc_connect(&c2, sock), 0);
        for (int64_t end = mono_ms() + 10000;;) {
                assert_true(ps_find(&c2, wpid, &ps, &e));
                bool done = !json_is_true(json_get(e, "running")) && get_int(e, "output_bytes") == 3000000;
                json_free(ps);
                if (done)
                        break;
                assert_true(mono_ms() < end);
                usleep(20000);
        }
        initc_close(&c2, 0);

        assert_int_equal(initc_connect(&c3, sock), 0);
        assert_true(ps_find(&c3, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "running")));
        json_free(ps);

        print_message("SIGTERM: init terminates its processes and exits 0\n");
        assert_int_equal(kill(ipid, SIGTERM), 0);
        int st = wait_exit(ipid, 5000);
        assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_true(pid_gone((pid_t)pid, 2000));
        assert_true(pid_gone((pid_t)fpid, 2000));
        initc_close(&c3, 0);
        rm_rf(dir);
}

/* The init key (protocol.md §1): HELLO says init takes one, a KEY makes every later HELLO
 * show it, a newer KEY replaces it. */
static void test_listen_key(void **state) {
        (void)state;
        char dir[] = "/tmp/space-init-key-XXXXXX", sock[PATH_MAX];
        assert_non_null(mkdtemp(dir));
        snprintf(sock, sizeof sock, "%s/init.sock", dir);
        pid_t ipid = start_listener(sock, dir);

        print_message("HELLO says \"keys\", and has no key before one was given\n");
        struct initc c;
        assert_int_equal(initc_connect(&c, sock), 0);
        assert_true(json_is_true(json_get(c.hello, "keys")));
        assert_null(json_get(c.hello, "key"));
        uint8_t key[PROTO_KEY_LEN];
        char hex[2 * PROTO_KEY_LEN + 1];
        for (int round = 0; round < 2; round++) {
                for (size_t i = 0; i < sizeof key; i++) {
                        key[i] = (uint8_t)(i * 7 + 0x10 * round + 1);
                        snprintf(hex + 2 * i, 3, "%02x", key[i]);
                }
                assert_int_equal(initc_send(&c, PROTO_KEY, 0, key, sizeof key), 0);
                _cleanup_json_ struct json *r = call(&c, "{\"op\":\"ping\"}"); /* the KEY was handled */
                initc_close(&c, 0);
                print_message("round %d: the next connection's HELLO shows the newest key\n", round);
                assert_int_equal(initc_connect(&c, sock), 0);
                const char *shown = json_get_str(c.hello, "key");
                assert_non_null(shown);
                assert_string_equal(shown, hex);
        }
        assert_int_equal(kill(ipid, SIGTERM), 0);
        int st = wait_exit(ipid, 5000);
        assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        initc_close(&c, 0);
        rm_rf(dir);
}

/* Runs space-init as PID 1 of a new pid namespace (root only). *ret_host_pid gets its pid
 * as seen from here; the returned pid is a relay that exits with init's exit code. */
static pid_t start_pid1(struct initc *c, pid_t *ret_host_pid) {
        int sv[2], pp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
        pid_t relay = fork();
        assert_true(relay >= 0);
        if (relay == 0) {
                if (unshare(CLONE_NEWPID) < 0)
                        _exit(100);
                pid_t p = fork();
                if (p < 0)
                        _exit(101);
                if (p == 0) {
                        if (dup2(sv[1], 3) < 0)
                                _exit(126);
                        execl(init_path, init_path, "--fd", "3", (char *)NULL);
                        _exit(127);
                }
                (void)!write(pp[1], &p, sizeof p);
                int st;
                if (waitpid(p, &st, 0) < 0)
                        _exit(102);
                _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        }
        close(sv[1]);
        close(pp[1]);
        assert_int_equal(read(pp[0], ret_host_pid, sizeof *ret_host_pid), (ssize_t)sizeof *ret_host_pid);
        close(pp[0]);
        *c = (struct initc){ .fd = sv[0], .pid = -1, .next_id = 1, .in = BUF_INIT(0), .out = BUF_INIT(0) };
        struct initc_frame fr;
        assert_int_equal(initc_recv_any(c, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_HELLO);
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &c->hello, NULL, 0), 0);
        initc_frame_free(&fr);
        return relay;
}

static void test_pid1(void **state) {
        if (geteuid() != 0) {
                print_message("not root: skipping the PID 1 test\n");
                skip();
        }
        struct initc c;
        pid_t host_pid;
        pid_t relay = start_pid1(&c, &host_pid);
        print_message("as PID 1 of a pid namespace: HELLO and ping say pid 1\n");
        assert_int_equal(get_int(c.hello, "pid"), 1);
        _cleanup_json_ struct json *pr = call(&c, "{\"op\":\"ping\"}");
        assert_int_equal(get_int(pr, "pid"), 1);

        print_message("orphans of a command are reaped by PID 1\n");
        struct initc_result res;
        assert_int_equal(initc_run(&c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"(sleep 0.2 &); (sleep 0.1 &); echo $$\"]}",
                                   NULL, 0, &res, 10000), 0);
        assert_int_equal(res.exit_code, 0);
        assert_true(atoi(res.out.data) > 1);
        initc_result_free(&res);
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)host_pid, (int)host_pid);
        int64_t end = mono_ms() + 3000;
        ssize_t n = 1;
        while (n != 0 && mono_ms() < end) {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                assert_true(fd >= 0);
                n = read(fd, buf, sizeof buf);
                close(fd);
                usleep(20000);
        }
        assert_int_equal(n, 0);

        print_message("SIGTERM to PID 1: TERM to all, KILL after the grace period for one that ignores it, exit 0\n");
        _cleanup_json_ struct json *b1 = call(&c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"background\":true}");
        assert_ok(b1);
        _cleanup_json_ struct json *b2 = call(&c, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"trap '' TERM; sleep 60 & wait\"],\"background\":true}");
        assert_ok(b2);
        usleep(100000);
        int64_t t0 = mono_ms();
        assert_int_equal(kill(host_pid, SIGTERM), 0);
        int st = wait_exit(relay, 10000);
        int64_t took = mono_ms() - t0;
        print_message("  init exited after %lld ms\n", (long long)took);
        assert_true(st >= 0 && WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        assert_true(took >= 2500 && took < 8000);
        initc_close(&c, 0);
}


/* ---- terminals ---- */

/* Output of attach id until it holds needle (NUL-terminated in out); fails on EXIT. */
static void tty_wait_for(struct initc *c, uint32_t id, struct buf *out, const char *needle, int timeout_ms) {
        int64_t end = mono_ms() + timeout_ms;
        for (;;) {
                assert_int_equal(buf_append(out, "", 1), 0); /* NUL for strstr */
                out->len--;
                if (strstr(out->data, needle))
                        return;
                struct initc_frame fr;
                int64_t left = end - mono_ms();
                int r = initc_recv(c, id, &fr, left > 0 ? (int)left : 0);
                if (r <= 0)
                        fail_msg("waiting for \"%s\" from the terminal: %s; it showed: %.*s", needle,
                                 r == 0 ? "timeout" : strerror(-r), (int)out->len, out->data);
                if (fr.h.type != PROTO_STDOUT)
                        fail_msg("terminal frame of type %d while waiting for \"%s\": %.*s", fr.h.type, needle,
                                 (int)fr.payload.len, fr.payload.data);
                assert_int_equal(buf_append(out, fr.payload.data, fr.payload.len), 0);
                initc_frame_free(&fr);
        }
}

static int64_t tty_attach(struct initc *c, int64_t pid) {
        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":0,\"follow\":true}", (long long)pid);
        int64_t aid = initc_req(c, req);
        assert_true(aid > 0);
        (void)resp_of(c, aid, NULL);
        return aid;
}

static void tty_type(struct initc *c, int64_t aid, const char *s) {
        assert_int_equal(initc_send(c, PROTO_STDIN, (uint32_t)aid, s, strlen(s)), 0);
}

static void test_tty(void **state) {
        struct fx *f = *state;
        print_message("exec with a tty: the shell sees a terminal of the size asked for\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":33,\"cols\":77}}");
        assert_ok(r);
        int64_t pid = get_int(r, "pid");
        int64_t aid = tty_attach(&f->c, pid);
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        /* the echo of the input shows the command, only the output shows its result */
        tty_type(&f->c, aid, "test -t 0 && test -t 1 && test -t 2 && echo TTY_$((40+2)); stty size\n");
        tty_wait_for(&f->c, (uint32_t)aid, &out, "TTY_42", 5000);
        tty_wait_for(&f->c, (uint32_t)aid, &out, "33 77", 5000);

        print_message("the terminal is the shell's controlling terminal, from a devpts\n");
        buf_reset(&out);
        tty_type(&f->c, aid, "case $(tty) in /dev/pts/*) echo PTS_$((1+1));; esac\n");
        tty_wait_for(&f->c, (uint32_t)aid, &out, "PTS_2", 5000);

        print_message("ps marks it as a terminal\n");
        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_true(json_is_true(json_get(e, "tty")));
        json_free(ps);

        print_message("resize changes what stty size answers\n");
        _cleanup_json_ struct json *rs = call(&f->c, "{\"op\":\"resize\",\"pid\":%lld,\"rows\":51,\"cols\":132}", (long long)pid);
        assert_ok(rs);
        buf_reset(&out);
        tty_type(&f->c, aid, "stty size\n");
        tty_wait_for(&f->c, (uint32_t)aid, &out, "51 132", 5000);

        print_message("a client detaches; attaching again replays the recent screen and takes input\n");
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, (uint32_t)aid, NULL, 0), 0);
        int64_t aid2 = tty_attach(&f->c, pid);
        buf_reset(&out);
        tty_wait_for(&f->c, (uint32_t)aid2, &out, "TTY_42", 5000);
        tty_wait_for(&f->c, (uint32_t)aid2, &out, "51 132", 5000);
        buf_reset(&out);
        tty_type(&f->c, aid2, "echo AGAIN_$((3*3))\n");
        tty_wait_for(&f->c, (uint32_t)aid2, &out, "AGAIN_9", 5000);

        print_message("Ctrl-C is a byte that interrupts the foreground command of the terminal\n");
        buf_reset(&out);
        tty_type(&f->c, aid2, "sleep 100; echo AFTER_$((5+5))\n");
        usleep(300 * 1000);
        tty_type(&f->c, aid2, "\x03");
        tty_type(&f->c, aid2, "echo INT_$((2+3))\n");
        tty_wait_for(&f->c, (uint32_t)aid2, &out, "INT_5", 5000);
        assert_null(strstr(out.data, "AFTER_10"));

        print_message("exit 7 ends the attach with the shell's exit code\n");
        tty_type(&f->c, aid2, "exit 7\n");
        for (;;) {
                struct initc_frame fr;
                assert_int_equal(initc_recv(&f->c, (uint32_t)aid2, &fr, 5000), 1);
                if (fr.h.type == PROTO_STDOUT) {
                        initc_frame_free(&fr);
                        continue;
                }
                assert_int_equal(fr.h.type, PROTO_EXIT);
                _cleanup_json_ struct json *ex = NULL;
                assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ex, NULL, 0), 0);
                initc_frame_free(&fr);
                assert_int_equal(get_int(ex, "exit_code"), 7);
                break;
        }
        _cleanup_json_ struct json *rs2 = call(&f->c, "{\"op\":\"resize\",\"pid\":%lld,\"rows\":5,\"cols\":5}", (long long)pid);
        assert_error(rs2, "ESRCH");
}

static void test_tty_bad_input_and_limit(void **state) {
        struct fx *f = *state;
        print_message("bad tty sizes, stdin with a tty and resize of a non-terminal are refused\n");
        static const char *const bad[] = {
                "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":0,\"cols\":80}}",
                "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":1001}}",
                "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24}}",
                "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":true}",
                "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":80},\"stdin\":true}",
                "{\"op\":\"resize\",\"pid\":1,\"rows\":24}",
                "{\"op\":\"resize\",\"pid\":1,\"rows\":-1,\"cols\":80}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_json_ struct json *r = call(&f->c, "%s", bad[i]);
                assert_error(r, "EINVAL");
        }
        _cleanup_json_ struct json *bg = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"background\":true}");
        assert_ok(bg);
        _cleanup_json_ struct json *rn = call(&f->c, "{\"op\":\"resize\",\"pid\":%lld,\"rows\":5,\"cols\":5}",
                                              (long long)get_int(bg, "pid"));
        assert_error(rn, "ESRCH");

        print_message("at most %d terminals run at once\n", PROTO_MAX_TTY);
        for (int i = 0; i < PROTO_MAX_TTY; i++) {
                _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"tty\":{\"rows\":24,\"cols\":80}}");
                assert_ok(r);
        }
        _cleanup_json_ struct json *over = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"tty\":{\"rows\":24,\"cols\":80}}");
        assert_error(over, "EAGAIN");
}


/* ---- op input: stdin of background processes from any request (protocol.md §3.21) ---- */

/* {"op":"input","pid":pid,"data":base64 of n bytes of data[,"eof":true]} -> the RESP. */
static struct json *input_call(struct initc *c, int64_t pid, const void *data, size_t n, bool eof) {
        _cleanup_buf_ struct buf b64 = BUF_INIT(0), req = BUF_INIT(0);
        assert_int_equal(text_b64_encode(&b64, data, n), 0);
        assert_int_equal(buf_printf(&req, "{\"op\":\"input\",\"pid\":%lld,\"data\":\"%.*s\"%s}", (long long)pid,
                                    (int)b64.len, b64.data ? b64.data : "", eof ? ",\"eof\":true" : ""), 0);
        assert_int_equal(buf_append(&req, "", 1), 0);
        struct json *resp = NULL;
        assert_int_equal(initc_call(c, req.data, &resp), 0);
        return resp;
}

static void test_input(void **state) {
        struct fx *f = *state;
        assert_true(json_is_true(json_get(f->c.hello, "input")));
        print_message("a background command with stdin, a tag, an env and a cwd: ps shows them\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"cat\"],\"background\":true,"
                                                    "\"stdin\":true,\"tag\":\"job-1\",\"env\":[\"A=1\"],\"cwd\":\"/\"}");
        assert_ok(r);
        int64_t pid = get_int(r, "pid");
        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&f->c, pid, &ps, &e));
        assert_string_equal(json_get_str(e, "tag"), "job-1");
        assert_string_equal(json_get_str(e, "cwd"), "/");
        assert_int_equal(json_len(json_get(e, "env")), 1);
        assert_string_equal(json_str(json_at(json_get(e, "env"), 0)), "A=1");
        assert_true(json_is_true(json_get(e, "stdin")));
        json_free(ps);

        print_message("input reaches its stdin, the output its attach; eof ends it\n");
        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":0,\"follow\":true}", (long long)pid);
        int64_t aid = initc_req(&f->c, req);
        (void)resp_of(&f->c, aid, NULL);
        _cleanup_json_ struct json *i1 = input_call(&f->c, pid, "hello\n", 6, false);
        assert_ok(i1);
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        assert_null(collect(&f->c, (uint32_t)aid, &out, NULL, 6, 5000));
        assert_memory_equal(out.data, "hello\n", 6);
        _cleanup_json_ struct json *i2 = input_call(&f->c, pid, "bye\n", 4, true);
        assert_ok(i2);
        _cleanup_json_ struct json *ex = collect(&f->c, (uint32_t)aid, &out, NULL, 0, 5000);
        assert_non_null(ex);
        assert_int_equal(get_int(ex, "exit_code"), 0);
        assert_int_equal(out.len, 10);
        assert_memory_equal(out.data + 6, "bye\n", 4);
        _cleanup_json_ struct json *i3 = input_call(&f->c, pid, "x", 1, false);
        assert_error(i3, "ESRCH");

        print_message("input to a command without stdin is EPIPE; eof to it is nothing to do\n");
        _cleanup_json_ struct json *r2 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"background\":true}");
        assert_ok(r2);
        int64_t pid2 = get_int(r2, "pid");
        _cleanup_json_ struct json *i4 = input_call(&f->c, pid2, "x", 1, false);
        assert_error(i4, "EPIPE");
        _cleanup_json_ struct json *i5 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld,\"eof\":true}", (long long)pid2);
        assert_ok(i5);

        print_message("what a process does not read is bounded: input past it is EAGAIN\n");
        _cleanup_json_ struct json *r3 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"60\"],\"background\":true,"
                                                     "\"stdin\":true}");
        assert_ok(r3);
        int64_t pid3 = get_int(r3, "pid");
        size_t chunk = 150u << 10, taken = 0;
        _cleanup_free_ char *zeros = calloc(1, chunk);
        assert_non_null(zeros);
        for (int i = 0; i < 64; i++) {
                _cleanup_json_ struct json *ir = input_call(&f->c, pid3, zeros, chunk, false);
                if (json_get(ir, "error")) {
                        assert_error(ir, "EAGAIN");
                        break;
                }
                taken += chunk;
        }
        /* The pipe itself holds 64 KiB; the rest waits in init, at most INIT_INPUT_MAX. */
        assert_true(taken >= (1u << 20) - chunk);
        assert_true(taken <= (1u << 20) + (1u << 20));
        _cleanup_json_ struct json *alive = call(&f->c, "{\"op\":\"ping\"}");
        assert_ok(alive);

        print_message("bad input requests are EINVAL\n");
        _cleanup_json_ struct json *b1 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld}", (long long)pid3);
        assert_error(b1, "EINVAL");
        _cleanup_json_ struct json *b2 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld,\"data\":\"!!!\"}", (long long)pid3);
        assert_error(b2, "EINVAL");
        _cleanup_json_ struct json *b3 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld,\"data\":5}", (long long)pid3);
        assert_error(b3, "EINVAL");
        _cleanup_json_ struct json *b4 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld,\"eof\":\"yes\"}", (long long)pid3);
        assert_error(b4, "EINVAL");
        _cleanup_json_ struct json *b5 = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"background\":true,\"tag\":5}");
        assert_error(b5, "EINVAL");
        _cleanup_json_ struct json *b0 = call(&f->c, "{\"op\":\"input\",\"pid\":0,\"eof\":true}");
        assert_error(b0, "EINVAL");
        char longtag[PROTO_MAX_TAG + 2];
        memset(longtag, 't', sizeof longtag - 1);
        longtag[sizeof longtag - 1] = '\0';
        _cleanup_json_ struct json *bt = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"background\":true,\"tag\":\"%s\"}",
                                              longtag);
        assert_error(bt, "EINVAL");

        print_message("a cwd that does not exist: ENOENT with \"cwd\":true\n");
        _cleanup_json_ struct json *bc = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"true\"],\"background\":true,\"cwd\":\"/nope\"}");
        assert_error(bc, "ENOENT");
        assert_true(json_is_true(json_get(json_get(bc, "error"), "cwd")));
}

static void test_input_tty(void **state) {
        struct fx *f = *state;
        print_message("input to a terminal is typed; eof is refused (^D is a byte); attach says tty\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"sh\"],\"tty\":{\"rows\":24,\"cols\":80}}");
        assert_ok(r);
        int64_t pid = get_int(r, "pid");
        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":0,\"follow\":true}", (long long)pid);
        int64_t aid = initc_req(&f->c, req);
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        _cleanup_json_ struct json *ar = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ar, NULL, 0), 0);
        initc_frame_free(&fr);
        assert_true(json_is_true(json_get(ar, "tty")));
        const char *line = "echo IN_$((2+2))\n";
        _cleanup_json_ struct json *i1 = input_call(&f->c, pid, line, strlen(line), false);
        assert_ok(i1);
        _cleanup_buf_ struct buf out = BUF_INIT(0);
        tty_wait_for(&f->c, (uint32_t)aid, &out, "IN_4", 5000);
        _cleanup_json_ struct json *i2 = call(&f->c, "{\"op\":\"input\",\"pid\":%lld,\"eof\":true}", (long long)pid);
        assert_error(i2, "EINVAL");
        _cleanup_json_ struct json *big = NULL;
        _cleanup_free_ char *zeros = calloc(1, INIT_TTY_STDIN_MAX_TEST + 1);
        assert_non_null(zeros);
        big = input_call(&f->c, pid, zeros, INIT_TTY_STDIN_MAX_TEST + 1, false);
        assert_error(big, "EAGAIN");
}


static void test_attach_hold(void **state) {
        struct fx *f = *state;
        print_message("an attach with hold holds its background command back while it lags\n");
        _cleanup_json_ struct json *r = call(&f->c, "{\"op\":\"exec\",\"argv\":[\"head\",\"-c\",\"3000000\",\"/dev/zero\"],"
                                                    "\"background\":true}");
        assert_ok(r);
        int64_t pid = get_int(r, "pid");
        char req[256];
        snprintf(req, sizeof req, "{\"op\":\"attach\",\"pid\":%lld,\"offset\":0,\"follow\":true,\"hold\":true,"
                 "\"window\":65536}", (long long)pid);
        int64_t aid = initc_req(&f->c, req);
        (void)resp_of(&f->c, aid, NULL);
        usleep(500 * 1000);
        struct json *ps = NULL;
        const struct json *e = NULL;
        assert_true(ps_find(&f->c, pid, &ps, &e));
        int64_t made = get_int(e, "output_bytes");
        print_message("  made %lld bytes while its reader took 64 KiB\n", (long long)made);
        assert_true(json_is_true(json_get(e, "running")));
        assert_true(made < (1 << 20)); /* half the ring behind, plus what the pipe held */
        json_free(ps);

        print_message("as the reader takes it, all of it comes, nothing skipped\n");
        uint64_t got = 0;
        int64_t end = mono_ms() + 30000;
        for (;;) {
                struct initc_frame fr;
                int64_t left = end - mono_ms();
                assert_int_equal(initc_recv(&f->c, (uint32_t)aid, &fr, left > 0 ? (int)left : 0), 1);
                if (fr.h.type == PROTO_EXIT) {
                        _cleanup_json_ struct json *ex = NULL;
                        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ex, NULL, 0), 0);
                        initc_frame_free(&fr);
                        assert_int_equal(get_int(ex, "exit_code"), 0);
                        assert_int_equal(get_int(ex, "offset"), 3000000);
                        break;
                }
                assert_int_equal(fr.h.type, PROTO_STDOUT);
                got += fr.payload.len;
                uint8_t w[PROTO_WINDOW_LEN];
                proto_window_encode((uint32_t)fr.payload.len, w);
                assert_int_equal(initc_send(&f->c, PROTO_WINDOW, (uint32_t)aid, w, sizeof w), 0);
                initc_frame_free(&fr);
        }
        assert_int_equal(got, 3000000);
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s PATH-TO-space-init [--sanitized]\n", argv[0]);
                return 2;
        }
        init_path = argv[1];
        fx_use(init_path, "test");
        sanitized = argc > 2 && strcmp(argv[2], "--sanitized") == 0;
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_hello_ping, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_basic, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_env_cwd, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_clean_fds, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_uid, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_stdin, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_stdin_acks, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_missing, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_exec_timeout, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_background, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_cancel_detaches, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_reaps_orphans, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_files, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_user, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_no_escape, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_flood_bounded, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_windows, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_random_frames, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_bad_input, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_tty, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_tty_bad_input_and_limit, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_input, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_input_tty, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_attach_hold, fx_setup, fx_teardown),
                cmocka_unit_test(test_listen_reconnect),
                cmocka_unit_test(test_listen_key),
                cmocka_unit_test(test_pid1),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
