/* Integration tests of space-init's ops rename and tree, stat's "names" and watch's "stat"
 * (docs/protocol.md §3.19, §3.20, §3.8, §3.17): the real binary over its protocol (--fd on a socketpair, --root on a
 * temp dir), the files made and checked on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static void put(const char *path, const char *data) {
        FILE *fp = fopen(path, "w");
        if (!fp)
                fail_msg("fopen %s: %s", path, strerror(errno));
        fputs(data, fp);
        assert_int_equal(fclose(fp), 0);
}

static struct json *call(struct fx *f, const char *json) {
        struct json *resp = NULL;
        assert_int_equal(initc_call(&f->c, json, &resp), 0);
        return resp;
}

static void assert_code(const struct json *resp, const char *code) {
        const char *got = initc_error_code(resp);
        if (!got || strcmp(got, code) != 0)
                fail_msg("expected %s, got %s", code, got ? got : "success");
}

static void assert_ok(const struct json *resp) {
        const char *got = initc_error_code(resp);
        if (got)
                fail_msg("expected success, got %s: %s", got, json_get_str(json_get(resp, "error"), "message"));
}

static void test_rename(void **state) {
        struct fx *f = *state;
        put(fx_host(f, "/a"), "A");
        put(fx_host(f, "/b"), "B");
        assert_int_equal(mkdir(fx_host(f, "/d"), 0755), 0);

        print_message("a file renamed: the old name gone, the bytes under the new one\n");
        _cleanup_json_ struct json *r1 = call(f, "{\"op\":\"rename\",\"from\":\"/a\",\"to\":\"/d/a2\"}");
        assert_ok(r1);
        assert_int_equal(access(fx_host(f, "/a"), F_OK), -1);
        assert_int_equal(access(fx_host(f, "/d/a2"), F_OK), 0);

        print_message("onto an existing file: replaced by default, EEXIST with replace:false\n");
        _cleanup_json_ struct json *r2 = call(f, "{\"op\":\"rename\",\"from\":\"/d/a2\",\"to\":\"/b\",\"replace\":false}");
        assert_code(r2, "EEXIST");
        assert_int_equal(access(fx_host(f, "/d/a2"), F_OK), 0);
        _cleanup_json_ struct json *r3 = call(f, "{\"op\":\"rename\",\"from\":\"/d/a2\",\"to\":\"/b\"}");
        assert_ok(r3);
        char got[8] = "";
        FILE *fp = fopen(fx_host(f, "/b"), "r");
        assert_non_null(fp);
        assert_non_null(fgets(got, sizeof got, fp));
        fclose(fp);
        assert_string_equal(got, "A");

        print_message("errors: a missing source ENOENT, a missing target dir ENOENT (parents makes it), the root EBUSY\n");
        _cleanup_json_ struct json *e1 = call(f, "{\"op\":\"rename\",\"from\":\"/nope\",\"to\":\"/x\"}");
        assert_code(e1, "ENOENT");
        assert_string_equal(json_get_str(json_get(e1, "error"), "message"), "/nope: No such file or directory");
        _cleanup_json_ struct json *e2 = call(f, "{\"op\":\"rename\",\"from\":\"/b\",\"to\":\"/p/q/b\"}");
        assert_code(e2, "ENOENT");
        _cleanup_json_ struct json *r4 = call(f, "{\"op\":\"rename\",\"from\":\"/b\",\"to\":\"/p/q/b\",\"parents\":true}");
        assert_ok(r4);
        assert_int_equal(access(fx_host(f, "/p/q/b"), F_OK), 0);
        _cleanup_json_ struct json *e3 = call(f, "{\"op\":\"rename\",\"from\":\"/\",\"to\":\"/x\"}");
        assert_code(e3, "EBUSY");
        _cleanup_json_ struct json *e4 = call(f, "{\"op\":\"rename\",\"from\":\"/p\"}");
        assert_code(e4, "EINVAL");

        print_message("paths stay inside the root: .. and an absolute symlink resolve under it\n");
        assert_int_equal(symlink("/", fx_host(f, "/up")), 0);
        _cleanup_json_ struct json *r5 = call(f, "{\"op\":\"rename\",\"from\":\"/p/q/b\",\"to\":\"/../../up/c\"}");
        assert_ok(r5);
        assert_int_equal(access(fx_host(f, "/c"), F_OK), 0);
        /* A symlink as the last component is moved itself, not what it points to. */
        _cleanup_json_ struct json *r6 = call(f, "{\"op\":\"rename\",\"from\":\"/up\",\"to\":\"/up2\"}");
        assert_ok(r6);
        struct stat st;
        assert_int_equal(lstat(fx_host(f, "/up2"), &st), 0);
        assert_true(S_ISLNK(st.st_mode));

        print_message("a directory onto a non-empty directory: ENOTEMPTY\n");
        assert_int_equal(mkdir(fx_host(f, "/e"), 0755), 0);
        put(fx_host(f, "/d/x"), "x");
        _cleanup_json_ struct json *e5 = call(f, "{\"op\":\"rename\",\"from\":\"/e\",\"to\":\"/d\"}");
        assert_true(initc_error_code(e5) && (!strcmp(initc_error_code(e5), "ENOTEMPTY") ||
                                             !strcmp(initc_error_code(e5), "EEXIST")));
}

static const struct json *entry_at(const struct json *entries, const char *path) {
        for (size_t i = 0; i < json_len(entries); i++) {
                const struct json *e = json_at(entries, i);
                if (strcmp(json_get_str(e, "path"), path) == 0)
                        return e;
        }
        return NULL;
}

static void test_tree(void **state) {
        struct fx *f = *state;
        assert_int_equal(mkdir(fx_host(f, "/etc"), 0755), 0);
        /* As root the file is given to 4321 (a name only this passwd has); else it is ours. */
        int uid = geteuid() == 0 ? 4321 : (int)getuid(), gid = geteuid() == 0 ? 4322 : (int)getgid();
        char pw[256];
        snprintf(pw, sizeof pw, "root:x:0:0::/root:/bin/sh\nme:x:%d:%d::/home/me:/bin/sh\n", uid, gid);
        put(fx_host(f, "/etc/passwd"), pw);
        snprintf(pw, sizeof pw, "root:x:0:\nmine:x:%d:\n", gid);
        put(fx_host(f, "/etc/group"), pw);
        assert_int_equal(mkdir(fx_host(f, "/t"), 0755), 0);
        assert_int_equal(mkdir(fx_host(f, "/t/sub"), 0700), 0);
        assert_int_equal(mkdir(fx_host(f, "/t/sub/deeper"), 0755), 0);
        put(fx_host(f, "/t/sub/deeper/z"), "z");
        put(fx_host(f, "/t/b.txt"), "hello");
        if (geteuid() == 0)
                assert_int_equal(chown(fx_host(f, "/t/b.txt"), (uid_t)uid, (gid_t)gid), 0);
        put(fx_host(f, "/t/sub/c"), "");
        assert_int_equal(symlink("/etc", fx_host(f, "/t/link")), 0);

        print_message("depth 1: the directory's own entries, in name order, with ids, names, a symlink's target\n");
        _cleanup_json_ struct json *r1 = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"names\":true}");
        assert_ok(r1);
        const struct json *e = json_get(r1, "entries");
        assert_int_equal(json_len(e), 3);
        assert_string_equal(json_get_str(json_at(e, 0), "path"), "b.txt");
        assert_string_equal(json_get_str(json_at(e, 1), "path"), "link");
        assert_string_equal(json_get_str(json_at(e, 2), "path"), "sub");
        const struct json *b = json_at(e, 0);
        int64_t v;
        assert_string_equal(json_get_str(b, "type"), "file");
        assert_int_equal(json_get_int(b, "size", &v), 0);
        assert_int_equal(v, 5);
        assert_int_equal(json_get_int(b, "uid", &v), 0);
        assert_int_equal(v, uid);
        assert_string_equal(json_get_str(b, "owner"), "me");
        assert_string_equal(json_get_str(b, "group"), "mine");
        assert_string_equal(json_get_str(json_at(e, 1), "type"), "symlink");
        assert_string_equal(json_get_str(json_at(e, 1), "target"), "/etc");
        assert_int_equal(json_get_int(json_at(e, 2), "mode", &v), 0);
        assert_int_equal(v & 07777, 0700);

        print_message("depth 2 and 3: entries below, depth-first; the symlink is not followed\n");
        _cleanup_json_ struct json *r2 = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":2}");
        assert_ok(r2);
        e = json_get(r2, "entries");
        assert_int_equal(json_len(e), 5);
        assert_string_equal(json_get_str(json_at(e, 3), "path"), "sub/c");
        assert_string_equal(json_get_str(json_at(e, 4), "path"), "sub/deeper");
        assert_null(json_get(json_at(e, 0), "owner")); /* no names asked for */
        assert_null(entry_at(e, "link/passwd"));
        _cleanup_json_ struct json *r3 = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":3}");
        assert_non_null(entry_at(json_get(r3, "entries"), "sub/deeper/z"));

        print_message("errors: a file ENOTDIR, missing ENOENT, depth 0 or 17 EINVAL\n");
        _cleanup_json_ struct json *e1 = call(f, "{\"op\":\"tree\",\"path\":\"/t/b.txt\"}");
        assert_code(e1, "ENOTDIR");
        _cleanup_json_ struct json *e2 = call(f, "{\"op\":\"tree\",\"path\":\"/none\"}");
        assert_code(e2, "ENOENT");
        _cleanup_json_ struct json *e3 = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":0}");
        assert_code(e3, "EINVAL");
        _cleanup_json_ struct json *e4 = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":17}");
        assert_code(e4, "EINVAL");

        print_message("\"after\": from any entry of a walk, the rest of it, in order\n");
        put(fx_host(f, "/t/sub/deeper/y"), "y");
        assert_int_equal(mkdir(fx_host(f, "/t/sub/a-dir"), 0755), 0);
        put(fx_host(f, "/t/sub/a-dir/in"), "");
        _cleanup_json_ struct json *all = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":3}");
        assert_ok(all);
        assert_false(json_get_bool(all, "truncated", true));
        const struct json *ae = json_get(all, "entries");
        assert_int_equal(json_len(ae), 9);
        for (size_t i = 0; i < json_len(ae); i++) {
                char req[PROTO_MAX_PATH + 128];
                snprintf(req, sizeof req, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":3,\"after\":\"%s\"}",
                         json_get_str(json_at(ae, i), "path"));
                _cleanup_json_ struct json *page = call(f, req);
                assert_ok(page);
                const struct json *pe = json_get(page, "entries");
                assert_int_equal(json_len(pe), json_len(ae) - i - 1);
                for (size_t k = 0; k < json_len(pe); k++)
                        assert_string_equal(json_get_str(json_at(pe, k), "path"), json_get_str(json_at(ae, i + 1 + k), "path"));
        }
        /* a cursor that is gone meanwhile: the walk goes on from where it would have been */
        _cleanup_json_ struct json *gone = call(f, "{\"op\":\"tree\",\"path\":\"/t\",\"depth\":3,\"after\":\"sub/b-gone\"}");
        assert_string_equal(json_get_str(json_at(json_get(gone, "entries"), 0), "path"), "sub/c");

        print_message("past INIT_TREE_MAX_ENTRIES (2048) a page is cut and says so; \"after\" its last gives the rest\n");
        assert_int_equal(mkdir(fx_host(f, "/many"), 0755), 0);
        for (int i = 0; i < 2049; i++) {
                FILE *fp = fopen(fx_host(f, "/many/f%04d", i), "w");
                assert_non_null(fp);
                fclose(fp);
        }
        _cleanup_json_ struct json *p1 = call(f, "{\"op\":\"tree\",\"path\":\"/many\",\"names\":true}");
        assert_ok(p1);
        assert_true(json_get_bool(p1, "truncated", false));
        assert_int_equal(json_len(json_get(p1, "entries")), 2048);
        assert_string_equal(json_get_str(json_at(json_get(p1, "entries"), 2047), "path"), "f2047");
        _cleanup_json_ struct json *p2 = call(f, "{\"op\":\"tree\",\"path\":\"/many\",\"names\":true,\"after\":\"f2047\"}");
        assert_false(json_get_bool(p2, "truncated", true));
        assert_int_equal(json_len(json_get(p2, "entries")), 1);
        assert_string_equal(json_get_str(json_at(json_get(p2, "entries"), 0), "path"), "f2048");

        print_message("stat with names: owner and group; without: neither\n");
        _cleanup_json_ struct json *s1 = call(f, "{\"op\":\"stat\",\"path\":\"/t/b.txt\",\"names\":true}");
        assert_string_equal(json_get_str(s1, "owner"), "me");
        assert_string_equal(json_get_str(s1, "group"), "mine");
        _cleanup_json_ struct json *s2 = call(f, "{\"op\":\"stat\",\"path\":\"/t/b.txt\"}");
        assert_null(json_get(s2, "owner"));
}

/* The lines of watch id until one holding want, within 5 s; returns them all. */
static void watch_until(struct fx *f, uint32_t id, const char *want, struct buf *out) {
        for (int i = 0; i < 50 && !(out->data && strstr(out->data, want)); i++) {
                struct initc_frame fr;
                int r = initc_recv(&f->c, id, &fr, 100);
                assert_true(r >= 0);
                if (r == 1) {
                        assert_int_equal(fr.h.type, PROTO_STDOUT);
                        assert_int_equal(buf_append(out, fr.payload.data, fr.payload.len), 0);
                        assert_int_equal(buf_append(out, "", 1), 0);
                        out->len--; /* NUL-terminated for strstr */
                        initc_frame_free(&fr);
                }
        }
        if (!out->data || !strstr(out->data, want))
                fail_msg("no %s in the events: %s", want, out->data ? out->data : "(none)");
}

static void test_watch_stat(void **state) {
        struct fx *f = *state;
        assert_int_equal(mkdir(fx_host(f, "/etc"), 0755), 0);
        put(fx_host(f, "/etc/passwd"), "root:x:0:0::/root:/bin/sh\n");
        put(fx_host(f, "/etc/group"), "root:x:0:\n");
        assert_int_equal(mkdir(fx_host(f, "/w"), 0755), 0);

        print_message("watch with stat: an event of what is there carries its stat and names\n");
        int64_t id = initc_req(&f->c, "{\"op\":\"watch\",\"path\":\"/w\",\"stat\":true}");
        assert_true(id > 0);
        struct initc_frame fr;
        assert_int_equal(initc_recv(&f->c, (uint32_t)id, &fr, 5000), 1);
        assert_int_equal(fr.h.type, PROTO_RESP);
        initc_frame_free(&fr);
        put(fx_host(f, "/w/x"), "12345");
        struct buf out = BUF_INIT(0);
        watch_until(f, (uint32_t)id, "\"type\":\"write\"", &out);
        const char *create = strstr(out.data, "{\"type\":\"create\"");
        assert_non_null(create);
        _cleanup_json_ struct json *ev = NULL;
        assert_int_equal(json_parse(create, strcspn(create, "\n"), &ev, NULL, 0), 0);
        const struct json *st = json_get(ev, "stat");
        assert_non_null(st);
        assert_string_equal(json_get_str(st, "type"), "file");
        if (geteuid() == 0)
                assert_string_equal(json_get_str(st, "owner"), "root");

        print_message("... and none for a remove\n");
        assert_int_equal(unlink(fx_host(f, "/w/x")), 0);
        watch_until(f, (uint32_t)id, "\"type\":\"remove\"", &out);
        const char *rm = strstr(out.data, "{\"type\":\"remove\"");
        assert_null(memmem(rm, strcspn(rm, "\n"), "\"stat\"", 6));
        buf_free(&out);
        assert_int_equal(initc_send(&f->c, PROTO_CANCEL, (uint32_t)id, NULL, 0), 0);
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s PATH-TO-space-init\n", argv[0]);
                return 2;
        }
        fx_use(argv[1], "fsops");
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_rename, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_tree, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_watch_stat, fx_setup, fx_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
