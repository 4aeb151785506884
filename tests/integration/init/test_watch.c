/* Integration tests of space-init's op "watch" (docs/protocol.md §3.17): the real binary
 * over its protocol (--fd on a socketpair, --root on a temp dir); the events are made on
 * the host, in the directory init serves. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* The events of one watch stream: the bytes so far and the lines parsed from them. */
struct evs {
        uint32_t id;
        struct buf raw;
        size_t parsed; /* bytes of raw already split into lines */
        struct json **v;
        size_t n, cap;
        struct json *exit; /* the EXIT, once it came */
};

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put(const char *path, const char *data) {
        FILE *fp = fopen(path, "a");
        if (!fp)
                fail_msg("fopen %s: %s", path, strerror(errno));
        fputs(data, fp);
        assert_int_equal(fclose(fp), 0);
}

static void send_window(struct initc *c, uint32_t id, uint32_t grant) {
        uint8_t p[PROTO_WINDOW_LEN];
        proto_window_encode(grant, p);
        assert_int_equal(initc_send(c, PROTO_WINDOW, id, p, sizeof p), 0);
}

/* Sends a watch REQ; returns its parsed RESP (error or not) and the id in *ev. */
static struct json *watch_start(struct fx *f, const char *json, struct evs *ev) {
        int64_t id = initc_req(&f->c, json);
        assert_true(id > 0);
        *ev = (struct evs){ .id = (uint32_t)id, .raw = BUF_INIT(0) };
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, ev->id, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        struct json *r = NULL;
        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &r, NULL, 0), 0);
        initc_frame_free(&fr);
        return r;
}

static void evs_free(struct evs *ev) {
        for (size_t i = 0; i < ev->n; i++)
                json_free(ev->v[i]);
        free(ev->v);
        json_free(ev->exit);
        buf_free(&ev->raw);
}

/* Takes the frames of the stream for up to ms (less once quiet_ms pass without one, when
 * quiet_ms > 0); every complete line must be one JSON object. */
static void evs_take(struct fx *f, struct evs *ev, int ms, int quiet_ms) {
        int64_t end = mono_ms() + ms;
        while (!ev->exit) {
                int64_t left = end - mono_ms();
                if (left <= 0)
                        break;
                struct initc_frame fr;
                int r = initc_recv(&f->c, ev->id, &fr, quiet_ms > 0 && quiet_ms < left ? quiet_ms : (int)left);
                assert_true(r >= 0);
                if (r == 0)
                        break;
                if (fr.h.type == PROTO_EXIT) {
                        assert_int_equal(json_parse(fr.payload.data, fr.payload.len, &ev->exit, NULL, 0), 0);
                } else {
                        assert_int_equal(fr.h.type, PROTO_STDOUT);
                        assert_true(fr.payload.len > 0);
                        assert_int_equal(buf_append(&ev->raw, fr.payload.data, fr.payload.len), 0);
                }
                initc_frame_free(&fr);
        }
        for (;;) {
                const char *s = ev->raw.data + ev->parsed;
                const char *nl = memchr(s, '\n', ev->raw.len - ev->parsed);
                if (!nl)
                        break;
                struct json *j = NULL;
                if (json_parse(s, (size_t)(nl - s), &j, NULL, 0) < 0 || json_type(j) != JSON_OBJECT)
                        fail_msg("not a JSON object line: %.*s", (int)(nl - s), s);
                if (ev->n == ev->cap) {
                        ev->cap = ev->cap ? ev->cap * 2 : 64;
                        ev->v = realloc(ev->v, ev->cap * sizeof *ev->v);
                        assert_non_null(ev->v);
                }
                ev->v[ev->n++] = j;
                ev->parsed = (size_t)(nl - ev->raw.data) + 1;
        }
}

static bool ev_is(const struct json *j, const char *type, const char *path, int dir) {
        if (strcmp(json_get_str(j, "type") ?: "", type) != 0)
                return false;
        if (path && strcmp(json_get_str(j, "path") ?: "", path) != 0)
                return false;
        return dir < 0 || json_is_true(json_get(j, "dir")) == (dir == 1);
}

/* The index of the first event like that at or after from, or -1. */
static ssize_t ev_find(const struct evs *ev, size_t from, const char *type, const char *path, int dir) {
        for (size_t i = from; i < ev->n; i++)
                if (ev_is(ev->v[i], type, path, dir))
                        return (ssize_t)i;
        return -1;
}

/* Waits (up to 5 s) for that event at or after from; returns its index. */
static size_t ev_wait(struct fx *f, struct evs *ev, size_t from, const char *type, const char *path, int dir) {
        int64_t end = mono_ms() + 5000;
        for (;;) {
                ssize_t i = ev_find(ev, from, type, path, dir);
                if (i >= 0)
                        return (size_t)i;
                if (mono_ms() >= end || ev->exit) {
                        for (size_t k = 0; k < ev->n; k++)
                                print_message("  got %s %s\n", json_get_str(ev->v[k], "type"), json_get_str(ev->v[k], "path"));
                        fail_msg("no %s event for %s", type, path ? path : "(any)");
                }
                evs_take(f, ev, 100, 0);
        }
}

static void assert_error(const struct json *resp, const char *code) {
        const char *got = initc_error_code(resp);
        if (!got || strcmp(got, code) != 0)
                fail_msg("expected error %s, got %s", code, got ? got : "success");
        assert_non_null(json_get_str(json_get(resp, "error"), "message"));
}

static void assert_ok(const struct json *resp) {
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

static void test_events(void **state) {
        struct fx *f = *state;
        assert_int_equal(mkdir(fx_host(f, "/w"), 0755), 0);
        assert_int_equal(mkdir(fx_host(f, "/w/old"), 0755), 0);
        struct evs ev;
        print_message("a watch of /w//./ answers with its normalized path and the directories it covers\n");
        _cleanup_json_ struct json *r = watch_start(f, "{\"op\":\"watch\",\"path\":\"/w//./\",\"recursive\":true}", &ev);
        assert_ok(r);
        assert_string_equal(json_get_str(r, "path"), "/w");
        assert_int_equal(get_int(r, "dirs"), 2);

        print_message("a tree made while init is stopped: its contents are reported as created\n");
        assert_int_equal(kill(f->c.pid, SIGSTOP), 0);
        assert_int_equal(mkdir(fx_host(f, "/w/a"), 0755), 0);
        assert_int_equal(mkdir(fx_host(f, "/w/a/b"), 0755), 0);
        put(fx_host(f, "/w/a/b/early"), "x");
        assert_int_equal(kill(f->c.pid, SIGCONT), 0);
        size_t i = ev_wait(f, &ev, 0, "create", "/w/a", 1);
        ev_wait(f, &ev, i, "create", "/w/a/b", 1);
        ev_wait(f, &ev, i, "create", "/w/a/b/early", 0);

        print_message("create, write, chmod, rename and remove in the nested directory\n");
        size_t from = ev.n;
        put(fx_host(f, "/w/a/b/f"), "hello");
        put(fx_host(f, "/w/a/b/f"), " again");
        assert_int_equal(chmod(fx_host(f, "/w/a/b/f"), 0600), 0);
        assert_int_equal(rename(fx_host(f, "/w/a/b/f"), fx_host(f, "/w/a/b/g")), 0);
        assert_int_equal(unlink(fx_host(f, "/w/a/b/g")), 0);
        i = ev_wait(f, &ev, from, "create", "/w/a/b/f", 0);
        i = ev_wait(f, &ev, i, "write", "/w/a/b/f", 0);
        i = ev_wait(f, &ev, i, "chmod", "/w/a/b/f", 0);
        i = ev_wait(f, &ev, i, "rename_from", "/w/a/b/f", 0);
        i = ev_wait(f, &ev, i, "rename_to", "/w/a/b/g", 0);
        i = ev_wait(f, &ev, i, "remove", "/w/a/b/g", 0);

        print_message("a directory moved inside the tree keeps its watch under its new name\n");
        from = ev.n;
        assert_int_equal(rename(fx_host(f, "/w/a/b"), fx_host(f, "/w/old/c")), 0);
        put(fx_host(f, "/w/old/c/h"), "y");
        i = ev_wait(f, &ev, from, "rename_from", "/w/a/b", 1);
        i = ev_wait(f, &ev, i, "rename_to", "/w/old/c", 1);
        i = ev_wait(f, &ev, i, "create", "/w/old/c/h", 0);
        assert_int_equal(ev_find(&ev, from, "create", "/w/a/b/h", -1), -1);

        print_message("a directory moved out of the tree is no longer reported\n");
        assert_int_equal(mkdir(fx_host(f, "/out"), 0755), 0);
        assert_int_equal(rename(fx_host(f, "/w/old/c"), fx_host(f, "/out/c")), 0);
        ev_wait(f, &ev, i, "rename_from", "/w/old/c", 1);
        from = ev.n;
        put(fx_host(f, "/out/c/after"), "z");
        put(fx_host(f, "/w/marker"), "m");
        ev_wait(f, &ev, from, "create", "/w/marker", 0);
        for (size_t k = from; k < ev.n; k++)
                assert_null(strstr(json_get_str(ev.v[k], "path"), "after"));

        print_message("chmod of the watched directory itself; removing it ends the stream\n");
        from = ev.n;
        assert_int_equal(chmod(fx_host(f, "/w"), 0700), 0);
        ev_wait(f, &ev, from, "chmod", "/w", 1);
        r = json_free(r);
        char cmd[PATH_MAX + 64];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx_host(f, "/w"));
        assert_int_equal(system(cmd), 0);
        ev_wait(f, &ev, from, "remove", "/w/marker", 0);
        ev_wait(f, &ev, from, "remove", "/w", 1);
        evs_take(f, &ev, 5000, 0);
        assert_non_null(ev.exit);
        assert_string_equal(json_get_str(ev.exit, "reason"), "removed");
        evs_free(&ev);
}

static void test_not_recursive(void **state) {
        struct fx *f = *state;
        assert_int_equal(mkdir(fx_host(f, "/n"), 0755), 0);
        assert_int_equal(mkdir(fx_host(f, "/n/sub"), 0755), 0);
        struct evs ev;
        _cleanup_json_ struct json *r = watch_start(f, "{\"op\":\"watch\",\"path\":\"n\",\"recursive\":false}", &ev);
        assert_ok(r);
        assert_int_equal(get_int(r, "dirs"), 1);
        print_message("recursive:false reports the directory's entries, nothing below them\n");
        assert_int_equal(mkdir(fx_host(f, "/n/d"), 0755), 0);
        put(fx_host(f, "/n/d/inner"), "x");
        put(fx_host(f, "/n/sub/inner"), "x");
        put(fx_host(f, "/n/marker"), "x");
        ev_wait(f, &ev, 0, "create", "/n/d", 1);
        ev_wait(f, &ev, 0, "create", "/n/marker", 0);
        for (size_t k = 0; k < ev.n; k++)
                assert_null(strstr(json_get_str(ev.v[k], "path"), "inner"));

        print_message("CANCEL ends the watch: nothing more comes for its id\n");
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, ev.id, NULL, 0), 0);
        _cleanup_json_ struct json *p = NULL;
        assert_int_equal(initc_call(&f->c, "{\"op\":\"ping\"}", &p), 0); /* the CANCEL was handled */
        size_t n0 = ev.raw.len;
        put(fx_host(f, "/n/late"), "x");
        evs_take(f, &ev, 500, 0);
        assert_int_equal(ev.raw.len, n0);
        assert_null(ev.exit);
        evs_free(&ev);
}

static void test_overflow(void **state) {
        struct fx *f = *state;
        assert_int_equal(mkdir(fx_host(f, "/o"), 0755), 0);
        struct evs ev;
        print_message("a watch whose window stays shut holds its events in a bounded queue\n");
        _cleanup_json_ struct json *r = watch_start(f, "{\"op\":\"watch\",\"path\":\"/o\",\"window\":100}", &ev);
        assert_ok(r);
        for (int k = 0; k < 3000; k++) {
                char name[64];
                snprintf(name, sizeof name, "/o/file-%05d", k);
                int fd = open(fx_host(f, "%s", name), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                assert_true(fd >= 0);
                close(fd);
        }
        evs_take(f, &ev, 1000, 300);
        assert_true(ev.raw.len <= 100); /* the window: never more than granted */
        print_message("the window opens: the queue held at most 1024 events, then one overflow\n");
        send_window(&f->c, ev.id, 16u << 20);
        evs_take(f, &ev, 3000, 500);
        assert_null(ev.exit);
        ssize_t ov = ev_find(&ev, 0, "overflow", NULL, -1);
        assert_true(ov >= 0);
        assert_true(ev.n <= 1024 + 2);
        assert_true(ev.n < 3000);
        assert_int_equal(ev_find(&ev, (size_t)ov + 1, "overflow", NULL, -1), -1); /* one, not one per lost event */
        print_message("  %zu lines, overflow at %zd\n", ev.n, ov);
        print_message("events after the overflow come through again\n");
        put(fx_host(f, "/o/after"), "x");
        ev_wait(f, &ev, (size_t)ov, "create", "/o/after", 0);
        evs_free(&ev);
}

static void test_errors_limits(void **state) {
        struct fx *f = *state;
        struct evs ev;
        put(fx_host(f, "/file"), "x");
        print_message("a missing path is ENOENT, a file ENOTDIR, bad members EINVAL\n");
        const struct {
                const char *req, *code;
        } bad[] = {
                { "{\"op\":\"watch\",\"path\":\"/nope\"}", "ENOENT" },
                { "{\"op\":\"watch\",\"path\":\"/file\"}", "ENOTDIR" },
                { "{\"op\":\"watch\"}", "EINVAL" },
                { "{\"op\":\"watch\",\"path\":\"\"}", "EINVAL" },
                { "{\"op\":\"watch\",\"path\":\"/\",\"recursive\":1}", "EINVAL" },
                { "{\"op\":\"watch\",\"path\":\"/\",\"window\":-1}", "EINVAL" },
        };
        for (size_t k = 0; k < ELEMENTSOF(bad); k++) {
                _cleanup_json_ struct json *r = watch_start(f, bad[k].req, &ev);
                assert_error(r, bad[k].code);
                evs_free(&ev);
        }

        print_message("16 watches at once; the 17th is EMFILE until one is cancelled\n");
        uint32_t ids[16];
        for (int k = 0; k < 16; k++) {
                _cleanup_json_ struct json *r = watch_start(f, "{\"op\":\"watch\",\"path\":\"/\",\"recursive\":false}", &ev);
                assert_ok(r);
                ids[k] = ev.id;
                evs_free(&ev);
        }
        _cleanup_json_ struct json *e1 = watch_start(f, "{\"op\":\"watch\",\"path\":\"/\"}", &ev);
        assert_error(e1, "EMFILE");
        evs_free(&ev);
        for (int k = 0; k < 16; k++)
                assert_int_equal(initc_send(&f->c, PROTO_CANCEL, ids[k], NULL, 0), 0);

        print_message("8192 directories are fine; past them a later one is an overflow event, at start ENOSPC\n");
        assert_int_equal(mkdir(fx_host(f, "/big"), 0755), 0);
        for (int k = 0; k < 8191; k++)
                assert_int_equal(mkdir(fx_host(f, "/big/d%d", k), 0755), 0);
        _cleanup_json_ struct json *r = watch_start(f, "{\"op\":\"watch\",\"path\":\"/big\"}", &ev);
        assert_ok(r);
        assert_int_equal(get_int(r, "dirs"), 8192);
        assert_int_equal(mkdir(fx_host(f, "/big/one-more"), 0755), 0);
        size_t i = ev_wait(f, &ev, 0, "create", "/big/one-more", 1);
        i = ev_wait(f, &ev, i, "overflow", NULL, -1);
        assert_string_equal(json_get_str(ev.v[i], "reason"), "too many directories");
        put(fx_host(f, "/big/one-more/unseen"), "x");
        put(fx_host(f, "/big/d0/seen"), "x");
        ev_wait(f, &ev, i, "create", "/big/d0/seen", 0);
        assert_int_equal(ev_find(&ev, 0, "create", "/big/one-more/unseen", -1), -1);
        evs_free(&ev);
        struct evs ev2;
        _cleanup_json_ struct json *e2 = watch_start(f, "{\"op\":\"watch\",\"path\":\"/big\"}", &ev2);
        assert_error(e2, "ENOSPC");
        evs_free(&ev2);
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s PATH-TO-space-init\n", argv[0]);
                return 2;
        }
        fx_use(argv[1], "watch");
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_events, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_not_recursive, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_overflow, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_errors_limits, fx_setup, fx_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
