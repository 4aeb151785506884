/* Unit tests of spaced's WebSocket framing (src/daemon/ws.c, #15): the handshake key of
 * RFC 6455 §1.3, client frames of every length encoding unmasked in place, frames split
 * anywhere (0 until whole), and each protocol error with its close code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ws.h"

/* A masked client frame of n payload bytes into out; its length. */
static size_t client_frame(uint8_t *out, uint8_t b0, const uint8_t *p, uint64_t n, bool masked) {
        static const uint8_t m[4] = { 0xA1, 0x5B, 0x07, 0xFE };
        size_t hl = 2;
        out[0] = b0;
        if (n < 126)
                out[1] = (uint8_t)n;
        else if (n <= 0xFFFF) {
                out[1] = 126;
                out[2] = (uint8_t)(n >> 8);
                out[3] = (uint8_t)n;
                hl = 4;
        } else {
                out[1] = 127;
                for (int i = 0; i < 8; i++)
                        out[2 + i] = (uint8_t)(n >> (56 - 8 * i));
                hl = 10;
        }
        if (masked) {
                out[1] |= 0x80;
                memcpy(out + hl, m, 4);
                hl += 4;
        }
        for (uint64_t i = 0; p && i < n; i++)
                out[hl + i] = p[i] ^ (masked ? m[i & 3] : 0);
        return hl + (size_t)(p ? n : 0);
}

static void test_accept_key(void **state) {
        (void)state;
        char out[WS_ACCEPT_LEN + 1];
        printf("check: the RFC's example key gives its accept value\n");
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
        assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        printf("check: a key that is not the base64 of 16 bytes is refused\n");
        assert_int_equal(ws_accept_key(NULL, out), -EINVAL);
        assert_int_equal(ws_accept_key("", out), -EINVAL);
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=", out), -EINVAL);
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25j!!==", out), -EINVAL);
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==x", out), -EINVAL);
}

static void test_parse_lengths(void **state) {
        (void)state;
        static uint8_t buf[70000 + 16], data[70000];
        for (size_t i = 0; i < sizeof data; i++)
                data[i] = (uint8_t)(i * 7 + 3);
        static const size_t lens[] = { 0, 1, 125, 126, 127, 65535, 65536, 70000 };
        printf("check: payloads of 0..70000 bytes (7-, 16- and 64-bit lengths) come back unmasked\n");
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                size_t fl = client_frame(buf, 0x82, data, lens[k], true);
                struct ws_frame f;
                uint16_t code = 1;
                assert_int_equal(ws_parse(buf, fl, WS_MAX_MESSAGE, &f, &code), (ssize_t)fl);
                assert_true(f.fin);
                assert_int_equal(f.opcode, WS_BINARY);
                assert_int_equal(f.len, lens[k]);
                if (lens[k])
                        assert_memory_equal(f.payload, data, lens[k]);
                assert_int_equal(code, 0);
                printf("check: cut anywhere, the %zu-byte frame is 0 (more needed)\n", lens[k]);
                client_frame(buf, 0x82, data, lens[k], true);
                for (size_t cut = 0; cut < fl; cut += (fl > 300 ? 997 : 1))
                        assert_int_equal(ws_parse(buf, cut, WS_MAX_MESSAGE, &f, &code), 0);
        }
}

static void expect_error(uint8_t b0, uint64_t n, bool masked, size_t max, ssize_t err, uint16_t want) {
        uint8_t buf[64];
        uint8_t p[2] = { 1, 2 };
        size_t fl = client_frame(buf, b0, n <= 2 ? p : NULL, n, masked);
        struct ws_frame f;
        uint16_t code = 0;
        assert_int_equal(ws_parse(buf, fl, max, &f, &code), err);
        assert_int_equal(code, want);
}

static void test_parse_errors(void **state) {
        (void)state;
        printf("check: an unmasked client frame is 1002\n");
        expect_error(0x82, 2, false, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        printf("check: reserved bits and opcodes are 1002\n");
        expect_error(0xC2, 2, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        expect_error(0x83, 2, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        expect_error(0x8B, 2, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        printf("check: a fragmented control frame, or one over 125 bytes, is 1002\n");
        expect_error(0x09, 2, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        expect_error(0x89, 126, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        printf("check: a payload over the bound is 1009, known from the header alone\n");
        expect_error(0x82, 2u << 20, true, WS_MAX_MESSAGE, -EMSGSIZE, WS_CLOSE_TOO_BIG);
        expect_error(0x82, 100, true, 99, -EMSGSIZE, WS_CLOSE_TOO_BIG);
        expect_error(0x82, UINT64_C(1) << 63, true, WS_MAX_MESSAGE, -EPROTO, WS_CLOSE_PROTOCOL);
        printf("check: ping, pong and close within bounds parse\n");
        uint8_t buf[64];
        struct ws_frame f;
        uint16_t code;
        size_t fl = client_frame(buf, 0x89, (const uint8_t *)"hi", 2, true);
        assert_int_equal(ws_parse(buf, fl, WS_MAX_MESSAGE, &f, &code), (ssize_t)fl);
        assert_int_equal(f.opcode, WS_PING);
        assert_memory_equal(f.payload, "hi", 2);
        fl = client_frame(buf, 0x01, (const uint8_t *)"ab", 2, true);
        assert_int_equal(ws_parse(buf, fl, WS_MAX_MESSAGE, &f, &code), (ssize_t)fl);
        assert_false(f.fin);
        assert_int_equal(f.opcode, WS_TEXT);
}

static void test_server_frames(void **state) {
        (void)state;
        printf("check: server frames are final, unmasked, with the shortest length encoding\n");
        static const size_t lens[] = { 0, 125, 126, 65535, 65536 };
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                struct buf b = BUF_INIT(0);
                uint8_t *p = calloc(1, lens[k] + 1);
                assert_int_equal(ws_frame_append(&b, WS_BINARY, p, lens[k]), 0);
                size_t hl = lens[k] < 126 ? 2 : lens[k] <= 0xFFFF ? 4 : 10;
                assert_int_equal(b.len, hl + lens[k]);
                assert_int_equal((uint8_t)b.data[0], 0x82);
                assert_int_equal((uint8_t)b.data[1] & 0x80, 0);
                buf_free(&b);
                free(p);
        }
        printf("check: a close frame carries its code and a reason cut to fit 125 bytes\n");
        struct buf b = BUF_INIT(0);
        char reason[300];
        memset(reason, 'r', sizeof reason - 1);
        reason[sizeof reason - 1] = 0;
        assert_int_equal(ws_close_append(&b, 1009, reason), 0);
        assert_int_equal(b.len, 2 + 125);
        assert_int_equal((uint8_t)b.data[0], 0x88);
        assert_int_equal((uint8_t)b.data[1], 125);
        assert_int_equal((uint8_t)b.data[2] << 8 | (uint8_t)b.data[3], 1009);
        buf_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_accept_key),
                cmocka_unit_test(test_parse_lengths),
                cmocka_unit_test(test_parse_errors),
                cmocka_unit_test(test_server_frames),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
