/* The WebSocket protocol (RFC 6455) as spaced's terminals speak it (api_terminals.c): the
 * handshake's accept key and the frames, server side. No I/O: the caller feeds bytes and
 * gets frames, so it can be unit-tested. No extensions, no subprotocols. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"

#define WS_MAX_MESSAGE (1u << 20) /* one client message (frames of it joined); over it: 1009 */
#define WS_MAX_CONTROL 125         /* a control frame's payload (the RFC's bound) */
#define WS_ACCEPT_LEN 28           /* base64 of a SHA-1 */

enum ws_opcode {
        WS_CONT = 0x0,
        WS_TEXT = 0x1,
        WS_BINARY = 0x2,
        WS_CLOSE = 0x8,
        WS_PING = 0x9,
        WS_PONG = 0xA,
};

/* Close codes we send (RFC 6455 §7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_BAD_DATA 1007
#define WS_CLOSE_TOO_BIG 1009
#define WS_CLOSE_INTERNAL 1011

/* Sec-WebSocket-Accept for the client's Sec-WebSocket-Key: base64(SHA-1(key + GUID)),
 * NUL-terminated in out. -EINVAL when key is not the base64 of 16 bytes (§4.2.1). */
int ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1]);

struct ws_frame {
        bool fin;
        uint8_t opcode;
        uint8_t *payload; /* unmasked, in the caller's buffer */
        size_t len;
};

/* One client frame from data[0..n): > 0 bytes it took (with *f; the payload is unmasked
 * in place), 0 when more bytes are needed, or a negative errno with *close_code the code
 * to close with: an unmasked frame, reserved bits or opcodes, a control frame fragmented
 * or over WS_MAX_CONTROL (-EPROTO, 1002), a payload over max (-EMSGSIZE, 1009). */
ssize_t ws_parse(uint8_t *data, size_t n, size_t max, struct ws_frame *f, uint16_t *close_code);
/* Appends one unmasked, final server frame. */
int ws_frame_append(struct buf *out, uint8_t opcode, const void *payload, size_t n);
/* Appends a close frame with code and a reason (cut to fit a control frame). */
int ws_close_append(struct buf *out, uint16_t code, const char *reason);
