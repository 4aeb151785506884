/* Unit tests of the protocol frame codec: header round trip, every bound that
 * proto_hdr_decode enforces, and frame peeking on input that arrives in pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/proto.h"

#define TEST_GRANT (128u << 10)

static void raw_hdr(uint8_t out[PROTO_HDR_SIZE], uint32_t magic, uint8_t version, uint8_t type,
                    uint16_t flags, uint32_t id, uint32_t len) {
        uint32_t v[] = { magic, id, len };
        int pos[] = { 0, 8, 12 };
        for (int i = 0; i < 3; i++)
                for (int b = 0; b < 4; b++)
                        out[pos[i] + b] = (uint8_t)(v[i] >> (8 * b));
        out[4] = version;
        out[5] = type;
        out[6] = (uint8_t)flags;
        out[7] = (uint8_t)(flags >> 8);
}

static void test_roundtrip(void **state) {
        print_message("header round trip for every type, little-endian layout\n");
        for (uint8_t t = PROTO_HELLO; t <= PROTO_TYPE_MAX; t++) {
                struct proto_hdr h = { .version = PROTO_VERSION, .type = t, .id = 0xA1B2C3D4u,
                                       .len = t == PROTO_CANCEL ? 0 : t == PROTO_WINDOW ? PROTO_WINDOW_LEN : t == PROTO_KEY ? PROTO_KEY_LEN : 1234 };
                uint8_t wire[PROTO_HDR_SIZE];
                proto_hdr_encode(&h, wire);
                struct proto_hdr back = { 0 };
                assert_int_equal(proto_hdr_decode(wire, &back), 0);
                assert_int_equal(back.version, PROTO_VERSION);
                assert_int_equal(back.type, t);
                assert_int_equal(back.flags, 0);
                assert_int_equal(back.id, 0xA1B2C3D4u);
                assert_int_equal(back.len, h.len);
        }
        struct proto_hdr h = { .version = 1, .type = PROTO_REQ, .id = 7, .len = 9 };
        uint8_t wire[PROTO_HDR_SIZE];
        proto_hdr_encode(&h, wire);
        static const uint8_t expect[PROTO_HDR_SIZE] = { 'S', 'P', 'C', '1', 1, 2, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0 };
        assert_memory_equal(wire, expect, sizeof expect);
}

static void test_bounds(void **state) {
        uint8_t w[PROTO_HDR_SIZE];
        struct proto_hdr h = { .type = 99, .id = 99 };

        print_message("bad magic -> EBADMSG\n");
        raw_hdr(w, 0x31435054u, 1, PROTO_REQ, 0, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EBADMSG);
        assert_int_equal(h.type, 99); /* untouched on failure */

        print_message("non-zero flags -> EBADMSG\n");
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_REQ, 0x100, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EBADMSG);

        print_message("version 0 and 2 -> EPROTONOSUPPORT\n");
        raw_hdr(w, PROTO_MAGIC, 0, PROTO_REQ, 0, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EPROTONOSUPPORT);
        raw_hdr(w, PROTO_MAGIC, 2, PROTO_REQ, 0, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EPROTONOSUPPORT);

        print_message("type 0 and PROTO_TYPE_MAX+1 -> EINVAL\n");
        raw_hdr(w, PROTO_MAGIC, 1, 0, 0, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EINVAL);
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_TYPE_MAX + 1, 0, 1, 0);
        assert_int_equal(proto_hdr_decode(w, &h), -EINVAL);

        print_message("payload at PROTO_MAX_PAYLOAD ok, one more -> EMSGSIZE\n");
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_DATA, 0, 1, PROTO_MAX_PAYLOAD);
        assert_int_equal(proto_hdr_decode(w, &h), 0);
        assert_int_equal(h.len, PROTO_MAX_PAYLOAD);
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_DATA, 0, 1, PROTO_MAX_PAYLOAD + 1);
        assert_int_equal(proto_hdr_decode(w, &h), -EMSGSIZE);
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_STDOUT, 0, 1, UINT32_MAX);
        assert_int_equal(proto_hdr_decode(w, &h), -EMSGSIZE);

        print_message("JSON types bounded by PROTO_MAX_JSON\n");
        uint8_t json_types[] = { PROTO_HELLO, PROTO_REQ, PROTO_RESP, PROTO_EXIT };
        for (size_t i = 0; i < sizeof json_types; i++) {
                assert_true(proto_type_is_json(json_types[i]));
                raw_hdr(w, PROTO_MAGIC, 1, json_types[i], 0, 1, PROTO_MAX_JSON);
                assert_int_equal(proto_hdr_decode(w, &h), 0);
                raw_hdr(w, PROTO_MAGIC, 1, json_types[i], 0, 1, PROTO_MAX_JSON + 1);
                assert_int_equal(proto_hdr_decode(w, &h), -EMSGSIZE);
        }
        assert_false(proto_type_is_json(PROTO_DATA));
        assert_false(proto_type_is_json(PROTO_STDIN));

        print_message("CANCEL carries no payload\n");
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_CANCEL, 0, 1, 1);
        assert_int_equal(proto_hdr_decode(w, &h), -EMSGSIZE);

        print_message("WINDOW carries exactly its 4-byte grant\n");
        for (uint32_t len = 0; len < 9; len++) {
                raw_hdr(w, PROTO_MAGIC, 1, PROTO_WINDOW, 0, 1, len);
                assert_int_equal(proto_hdr_decode(w, &h), len == PROTO_WINDOW_LEN ? 0 : -EMSGSIZE);
        }
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_WINDOW, 0, 1, PROTO_MAX_PAYLOAD);
        assert_int_equal(proto_hdr_decode(w, &h), -EMSGSIZE);
        assert_false(proto_type_is_json(PROTO_WINDOW));

        print_message("KEY carries exactly its %u-byte key\n", PROTO_KEY_LEN);
        for (uint32_t len = 0; len < PROTO_KEY_LEN + 4; len++) {
                raw_hdr(w, PROTO_MAGIC, 1, PROTO_KEY, 0, 0, len);
                assert_int_equal(proto_hdr_decode(w, &h), len == PROTO_KEY_LEN ? 0 : -EMSGSIZE);
        }
        assert_false(proto_type_is_json(PROTO_KEY));
        assert_string_equal(proto_type_name(PROTO_KEY), "KEY");
}

static void test_window(void **state) {
        print_message("WINDOW grant encodes little-endian; append refuses what the decoder would\n");
        uint8_t p[PROTO_WINDOW_LEN];
        proto_window_encode(0x00020001u, p);
        static const uint8_t expect[PROTO_WINDOW_LEN] = { 1, 0, 2, 0 };
        assert_memory_equal(p, expect, sizeof expect);
        assert_int_equal(proto_window_decode(p), 0x00020001u);
        proto_window_encode(UINT32_MAX, p);
        assert_int_equal(proto_window_decode(p), UINT32_MAX);

        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(proto_frame_append(&b, PROTO_WINDOW, 5, p, 3), -EMSGSIZE);
        assert_int_equal(proto_frame_append(&b, PROTO_WINDOW, 5, NULL, 0), -EMSGSIZE);
        assert_int_equal(proto_frame_append(&b, PROTO_CANCEL, 5, p, 1), -EMSGSIZE);
        assert_int_equal(b.len, 0);
        proto_window_encode(TEST_GRANT, p);
        assert_int_equal(proto_frame_append(&b, PROTO_WINDOW, 5, p, sizeof p), 0);
        struct proto_hdr h;
        const uint8_t *payload;
        assert_int_equal(proto_frame_peek(&b, &h, &payload), 1);
        assert_int_equal(h.type, PROTO_WINDOW);
        assert_int_equal(h.id, 5);
        assert_int_equal(h.len, PROTO_WINDOW_LEN);
        assert_int_equal(proto_window_decode(payload), TEST_GRANT);
}

static void test_append_limits(void **state) {
        print_message("frame_append refuses oversize, unknown types and respects the buffer cap\n");
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(proto_frame_append(&b, PROTO_REQ, 1, "x", PROTO_MAX_JSON + 1), -EMSGSIZE);
        assert_int_equal(proto_frame_append(&b, PROTO_DATA, 1, "x", PROTO_MAX_PAYLOAD + 1), -EMSGSIZE);
        assert_int_equal(proto_frame_append(&b, 0, 1, NULL, 0), -EINVAL);
        assert_int_equal(proto_frame_append(&b, PROTO_TYPE_MAX + 1, 1, NULL, 0), -EINVAL);
        assert_int_equal(b.len, 0);

        struct buf small = BUF_INIT(PROTO_HDR_SIZE + 3);
        assert_int_equal(proto_frame_append(&small, PROTO_DATA, 1, "abcd", 4), -E2BIG);
        assert_int_equal(small.len, 0); /* nothing half-written */
        assert_int_equal(proto_frame_append(&small, PROTO_DATA, 1, "abc", 3), 0);
        assert_int_equal(small.len, PROTO_HDR_SIZE + 3);
        buf_free(&small);
}

static void test_peek_split(void **state) {
        print_message("frame_peek on input fed one byte at a time\n");
        _cleanup_buf_ struct buf wire = BUF_INIT(0);
        const char *json = "{\"op\":\"ping\"}";
        assert_int_equal(proto_frame_append(&wire, PROTO_REQ, 42, json, (uint32_t)strlen(json)), 0);
        assert_int_equal(proto_frame_append(&wire, PROTO_DATA, 43, NULL, 0), 0);
        assert_int_equal(proto_frame_append(&wire, PROTO_STDOUT, 44, "hello", 5), 0);

        _cleanup_buf_ struct buf in = BUF_INIT(0);
        int frames = 0;
        uint32_t ids[3] = { 0 };
        for (size_t i = 0; i < wire.len; i++) {
                assert_int_equal(buf_append(&in, wire.data + i, 1), 0);
                for (;;) {
                        struct proto_hdr h;
                        const uint8_t *p = NULL;
                        int r = proto_frame_peek(&in, &h, &p);
                        assert_true(r >= 0);
                        if (r == 0)
                                break;
                        assert_true(frames < 3);
                        ids[frames] = h.id;
                        if (h.id == 42) {
                                assert_int_equal(h.type, PROTO_REQ);
                                assert_int_equal(h.len, strlen(json));
                                assert_memory_equal(p, json, h.len);
                        } else if (h.id == 43) {
                                assert_int_equal(h.type, PROTO_DATA);
                                assert_int_equal(h.len, 0);
                        } else {
                                assert_int_equal(h.type, PROTO_STDOUT);
                                assert_memory_equal(p, "hello", 5);
                        }
                        frames++;
                        buf_consume(&in, PROTO_HDR_SIZE + h.len);
                }
        }
        assert_int_equal(frames, 3);
        assert_int_equal(ids[0], 42);
        assert_int_equal(ids[1], 43);
        assert_int_equal(ids[2], 44);
        assert_int_equal(in.len, 0);
}

static void test_peek_errors(void **state) {
        print_message("frame_peek: partial header -> 0, complete bad header -> error before payload arrives\n");
        _cleanup_buf_ struct buf in = BUF_INIT(0);
        uint8_t w[PROTO_HDR_SIZE];
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_DATA, 0, 5, PROTO_MAX_PAYLOAD + 1);
        struct proto_hdr h = { 0 };
        const uint8_t *p = NULL;
        assert_int_equal(buf_append(&in, w, PROTO_HDR_SIZE - 1), 0);
        assert_int_equal(proto_frame_peek(&in, &h, &p), 0);
        assert_int_equal(buf_append(&in, w + PROTO_HDR_SIZE - 1, 1), 0);
        assert_int_equal(proto_frame_peek(&in, &h, &p), -EMSGSIZE);
        assert_null(p);

        buf_reset(&in);
        raw_hdr(w, PROTO_MAGIC, 1, PROTO_DATA, 0, 5, 10);
        assert_int_equal(buf_append(&in, w, sizeof w), 0);
        assert_int_equal(buf_append(&in, "123456789", 9), 0);
        assert_int_equal(proto_frame_peek(&in, &h, &p), 0); /* one payload byte short */
        assert_int_equal(buf_append(&in, "0", 1), 0);
        assert_int_equal(proto_frame_peek(&in, &h, &p), 1);
        assert_int_equal(h.len, 10);
        assert_memory_equal(p, "1234567890", 10);

        buf_reset(&in);
        raw_hdr(w, 0xdeadbeefu, 1, PROTO_DATA, 0, 5, 0);
        assert_int_equal(buf_append(&in, w, sizeof w), 0);
        assert_int_equal(proto_frame_peek(&in, &h, &p), -EBADMSG);
}

static void test_names(void **state) {
        print_message("type names\n");
        assert_string_equal(proto_type_name(PROTO_HELLO), "HELLO");
        assert_string_equal(proto_type_name(PROTO_STDERR), "STDERR");
        assert_string_equal(proto_type_name(PROTO_CANCEL), "CANCEL");
        assert_string_equal(proto_type_name(PROTO_WINDOW), "WINDOW");
        assert_string_equal(proto_type_name(0), "UNKNOWN");
        assert_string_equal(proto_type_name(200), "UNKNOWN");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_roundtrip),     cmocka_unit_test(test_bounds),
                cmocka_unit_test(test_append_limits), cmocka_unit_test(test_peek_split),
                cmocka_unit_test(test_peek_errors),   cmocka_unit_test(test_names),
                cmocka_unit_test(test_window),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
