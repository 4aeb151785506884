/* Tree, snapshot-record and memory-image encodings: round trips, and every malformed
 * input (truncated at each byte, bad names, out-of-order or duplicate entries, chunk
 * lists longer than the file, over-limit counts, random corruption) is refused cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store-internal.h"

static struct t_xattr xa[] = { { "trusted.overlay.opaque", (const uint8_t *)"y", 1 }, { "user.empty", NULL, 0 } };
static struct t_chunk ch[] = { { 0, 100, { { 1 } } }, { 4096, 50, { { 2 } } } };

static void sample(struct t_entry e[5]) {
        memset(e, 0, 5 * sizeof *e);
        e[0] = (struct t_entry){ .name = "a-dir", .type = T_DIR, .mode = 0755, .uid = 1, .gid = 2, .mtime_sec = 1,
                                 .nxattr = 2, .xattrs = xa, .tree = { { 9 } } };
        e[1] = (struct t_entry){ .name = "b-file", .type = T_REG, .mode = 04755, .mtime_sec = -5, .mtime_nsec = 999999999,
                                 .size = 10000, .nchunks = 2, .chunks = ch, .link = 77 };
        e[2] = (struct t_entry){ .name = "c-link", .type = T_LNK, .mode = 0777, .target = "../../etc" };
        e[3] = (struct t_entry){ .name = "d-whiteout", .type = T_CHR, .major = 0, .minor = 0 };
        e[4] = (struct t_entry){ .name = "e\xff", .type = T_FIFO, .mode = 0600 };
}

static void test_tree_roundtrip(void **state) {
        (void)state;
        printf("checking a tree with every field encodes and decodes to the same values\n");
        struct t_entry e[5];
        sample(e);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(e, 5, &b), 0);
        struct tree t;
        assert_int_equal(tree_decode(b.data, b.len, &t), 0);
        assert_int_equal(t.n, 5);
        assert_string_equal(t.e[0].name, "a-dir");
        assert_int_equal(t.e[0].nxattr, 2);
        assert_string_equal(t.e[0].xattrs[0].name, "trusted.overlay.opaque");
        assert_memory_equal(t.e[0].xattrs[0].value, "y", 1);
        assert_int_equal(t.e[0].xattrs[1].vlen, 0);
        assert_int_equal(t.e[0].tree.b[0], 9);
        assert_int_equal(t.e[1].mode, 04755);
        assert_int_equal(t.e[1].mtime_sec, -5);
        assert_int_equal(t.e[1].mtime_nsec, 999999999);
        assert_int_equal(t.e[1].link, 77);
        assert_int_equal(t.e[1].nchunks, 2);
        assert_int_equal(t.e[1].chunks[1].off, 4096);
        assert_int_equal(t.e[1].chunks[1].hash.b[0], 2);
        assert_string_equal(t.e[2].target, "../../etc");
        assert_int_equal(t.e[3].type, T_CHR);
        assert_int_equal(t.e[4].type, T_FIFO);
        /* canonical: encoding the decoded tree gives the same bytes */
        _cleanup_buf_ struct buf b2 = BUF_INIT(0);
        assert_int_equal(tree_encode(t.e, t.n, &b2), 0);
        assert_int_equal(b.len, b2.len);
        assert_memory_equal(b.data, b2.data, b.len);
        tree_free(&t);
}

static void test_tree_truncated(void **state) {
        (void)state;
        printf("checking every truncation and every extension of a tree is refused\n");
        struct t_entry e[5];
        sample(e);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(e, 5, &b), 0);
        for (size_t n = 0; n < b.len; n++) {
                struct tree t;
                assert_int_equal(tree_decode(b.data, n, &t), -EBADMSG);
        }
        buf_putc(&b, 0);
        struct tree t;
        assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "trailing"));
}

static void test_tree_bad_names(void **state) {
        (void)state;
        printf("checking names with '/', '.', '..', NUL or empty are refused by encoder and decoder\n");
        static const char *const bad[] = { "..", ".", "a/b", "/", "" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct t_entry e = { .name = bad[i], .type = T_FIFO };
                _cleanup_buf_ struct buf b = BUF_INIT(0);
                assert_int_equal(tree_encode(&e, 1, &b), -EINVAL);
        }
        /* craft the bytes directly: encode "xx" and patch the name */
        for (size_t i = 0; i < 3; i++) {
                struct t_entry e = { .name = "xx", .type = T_FIFO };
                _cleanup_buf_ struct buf b = BUF_INIT(0);
                assert_int_equal(tree_encode(&e, 1, &b), 0);
                char *name = b.data + 12 + 3;
                if (i == 0)
                        memcpy(name, "..", 2);
                else if (i == 1)
                        memcpy(name, "a/", 2);
                else
                        memcpy(name, "a\0", 2);
                struct tree t;
                assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
                assert_non_null(strstr(store_error_detail(), "invalid entry name"));
        }
}

static void test_tree_order(void **state) {
        (void)state;
        printf("checking unsorted and duplicate entries are refused\n");
        struct t_entry e[2] = { { .name = "b", .type = T_FIFO }, { .name = "a", .type = T_FIFO } };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(e, 2, &b), -EINVAL);
        e[1].name = "b";
        assert_int_equal(tree_encode(e, 2, &b), -EINVAL);
        /* craft: encode a, b then rename b to a */
        e[0].name = "a";
        e[1].name = "b";
        assert_int_equal(tree_encode(e, 2, &b), 0);
        char *p = memmem(b.data + 12 + 4, b.len - 16, "b", 1);
        assert_non_null(p);
        *p = 'a';
        struct tree t;
        assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "not in order or duplicated"));
}

static void test_chunks_beyond_file(void **state) {
        (void)state;
        printf("checking a chunk list longer than the file is refused\n");
        struct t_chunk c[2] = { { 0, 100, { { 0 } } }, { 100, 100, { { 0 } } } };
        struct t_entry e = { .name = "f", .type = T_REG, .size = 200, .nchunks = 2, .chunks = c };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(&e, 1, &b), 0);
        /* patch the size down to 150: the second chunk now ends past it */
        char *sz = b.data + b.len - 2 * 44 - 12;
        put_le64((uint8_t *)sz, 150);
        struct tree t;
        assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "outside the file"));
        /* more chunks than bytes */
        put_le64((uint8_t *)sz, 1);
        assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "chunk list longer than the file"));
        /* overlapping chunks */
        e.chunks[1].off = 50;
        assert_int_equal(tree_encode(&e, 1, &b), -EINVAL);
}

static void test_counts_bounded(void **state) {
        (void)state;
        printf("checking a header claiming huge counts is refused before allocating\n");
        uint8_t h[16] = { 'S', 'P', 'T', 'R', 1, 0, 0, 0 };
        put_le32(h + 8, 0xffffffffu);
        struct tree t;
        assert_int_equal(tree_decode(h, 12, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "more than it can hold"));
        h[4] = 2; /* a future version */
        assert_int_equal(tree_decode(h, 12, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "version 2"));
        memcpy(h, "XXXX", 4);
        assert_int_equal(tree_decode(h, 12, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "bad magic"));
        /* xattr count over the limit */
        struct t_entry e = { .name = "x", .type = T_FIFO };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(&e, 1, &b), 0);
        put_le32((uint8_t *)b.data + b.len - 4, STORE_MAX_XATTRS + 1);
        assert_int_equal(tree_decode(b.data, b.len, &t), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "xattrs (limit"));
}

static void test_random_corruption(void **state) {
        (void)state;
        printf("checking 20000 randomly corrupted trees decode or fail without crashing\n");
        struct t_entry e[5];
        sample(e);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(e, 5, &b), 0);
        struct rng r = { 42 };
        unsigned refused = 0;
        for (int i = 0; i < 20000; i++) {
                _cleanup_free_ char *c = malloc(b.len);
                memcpy(c, b.data, b.len);
                for (int k = 0; k < 1 + (int)rng_below(&r, 4); k++)
                        c[rng_below(&r, b.len)] = (char)rng_next(&r);
                struct tree t;
                if (tree_decode(c, b.len, &t) == 0)
                        tree_free(&t);
                else
                        refused++;
        }
        printf("  %u refused\n", refused);
        assert_true(refused > 10000);
}

static void test_snapshot_record(void **state) {
        (void)state;
        printf("checking snapshot records round-trip and refuse truncation and bad flags\n");
        struct snap_record r = { 0 };
        r.info.has_parent = true;
        r.info.parent.b[0] = 5;
        r.info.has_memory = true;
        r.info.memory.b[1] = 6;
        r.info.time_ns = 1234567890123;
        r.info.reason = STORE_REASON_PAUSE;
        strcpy(r.info.session, "ses_abc");
        strcpy(r.info.label, "before upgrade");
        r.info.files = 3;
        r.info.bytes_logical = 99;
        r.root = (struct t_entry){ .name = "", .type = T_DIR, .mode = 0755, .tree = { { 7 } }, .nxattr = 1, .xattrs = xa };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(snap_encode(&r, &b), 0);
        struct snap_record d;
        assert_int_equal(snap_decode(b.data, b.len, &d), 0);
        assert_true(d.info.has_parent && d.info.has_memory);
        assert_int_equal(d.info.parent.b[0], 5);
        assert_int_equal(d.info.memory.b[1], 6);
        assert_int_equal(d.info.time_ns, 1234567890123);
        assert_int_equal(d.info.reason, STORE_REASON_PAUSE);
        assert_string_equal(d.info.session, "ses_abc");
        assert_string_equal(d.info.label, "before upgrade");
        assert_int_equal(d.info.root.b[0], 7);
        assert_int_equal(d.root.nxattr, 1);
        snap_record_free(&d);
        for (size_t n = 0; n < b.len; n++)
                assert_int_equal(snap_decode(b.data, n, &d), -EBADMSG);
        b.data[8] = 9; /* reason */
        assert_int_equal(snap_decode(b.data, b.len, &d), -EBADMSG);
        /* a root entry must be an unnamed directory */
        r.root.type = T_REG;
        assert_int_equal(snap_encode(&r, &b), -EINVAL);
        /* a session id exactly at the limit is accepted */
        r.root.type = T_DIR;
        memset(r.info.session, 'x', STORE_MAX_SESSION);
        r.info.session[STORE_MAX_SESSION] = 0;
        buf_reset(&b);
        assert_int_equal(snap_encode(&r, &b), 0);
}

static void test_memory_image(void **state) {
        (void)state;
        printf("checking memory images round-trip and refuse misaligned or overlong chunks\n");
        struct t_chunk c[2] = { { 0, STORE_MEMORY_CHUNK, { { 1 } } }, { 2 * STORE_MEMORY_CHUNK, 100, { { 2 } } } };
        struct mem_image m = { .size = 2 * STORE_MEMORY_CHUNK + 100, .chunk_size = STORE_MEMORY_CHUNK, .n = 2, .chunks = c };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(mem_encode(&m, &b), 0);
        struct mem_image d;
        assert_int_equal(mem_decode(b.data, b.len, &d), 0);
        assert_int_equal(d.n, 2);
        assert_int_equal(d.chunks[1].off, 2 * STORE_MEMORY_CHUNK);
        free(d.chunks);
        for (size_t n = 0; n < b.len; n++)
                assert_int_equal(mem_decode(b.data, n, &d), -EBADMSG);
        put_le64((uint8_t *)b.data + 24 + 44, 2 * STORE_MEMORY_CHUNK + 1);
        assert_int_equal(mem_decode(b.data, b.len, &d), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_tree_roundtrip),   cmocka_unit_test(test_tree_truncated),
                cmocka_unit_test(test_tree_bad_names),   cmocka_unit_test(test_tree_order),
                cmocka_unit_test(test_chunks_beyond_file), cmocka_unit_test(test_counts_bounded),
                cmocka_unit_test(test_random_corruption), cmocka_unit_test(test_snapshot_record),
                cmocka_unit_test(test_memory_image),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
