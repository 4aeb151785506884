/* WebSocket frames and handshake (ws.h). */
#include "daemon/ws.h"

#include <errno.h>
#include <openssl/sha.h>
#include <string.h>

#include "common/text.h"

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

int ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1]) {
        size_t kl = key ? strlen(key) : 0;
        if (kl != 24)
                return -EINVAL;
        struct buf raw = BUF_INIT(64);
        int r = text_b64_decode(&raw, key, kl);
        size_t rl = raw.len;
        buf_free(&raw);
        if (r < 0 || rl != 16)
                return -EINVAL;
        char cat[24 + sizeof ws_guid];
        memcpy(cat, key, 24);
        memcpy(cat + 24, ws_guid, sizeof ws_guid - 1);
        unsigned char md[SHA_DIGEST_LENGTH];
        SHA1((const unsigned char *)cat, 24 + sizeof ws_guid - 1, md);
        struct buf enc = BUF_INIT(64);
        r = text_b64_encode(&enc, md, sizeof md);
        if (r == 0 && enc.len == WS_ACCEPT_LEN) {
                memcpy(out, enc.data, WS_ACCEPT_LEN);
                out[WS_ACCEPT_LEN] = 0;
        } else if (r == 0)
                r = -EINVAL;
        buf_free(&enc);
        return r;
}

ssize_t ws_parse(uint8_t *data, size_t n, size_t max, struct ws_frame *f, uint16_t *close_code) {
        if (n < 2)
                return 0;
        uint8_t b0 = data[0], b1 = data[1];
        uint8_t opcode = b0 & 0x0F;
        *close_code = WS_CLOSE_PROTOCOL;
        if (b0 & 0x70)
                return -EPROTO; /* RSV bits: no extension was agreed */
        if (!(b1 & 0x80))
                return -EPROTO; /* a client's frames are masked (§5.1) */
        switch (opcode) {
        case WS_CONT:
        case WS_TEXT:
        case WS_BINARY:
        case WS_CLOSE:
        case WS_PING:
        case WS_PONG:
                break;
        default:
                return -EPROTO;
        }
        bool control = opcode & 0x8;
        uint64_t len = b1 & 0x7F;
        size_t hdr = 2;
        if (len == 126) {
                if (n < 4)
                        return 0;
                len = (uint64_t)data[2] << 8 | data[3];
                hdr = 4;
        } else if (len == 127) {
                if (n < 10)
                        return 0;
                len = 0;
                for (int i = 0; i < 8; i++)
                        len = len << 8 | data[2 + i];
                hdr = 10;
                if (len >> 63)
                        return -EPROTO;
        }
        if (control && (len > WS_MAX_CONTROL || !(b0 & 0x80)))
                return -EPROTO;
        if (len > max) {
                *close_code = WS_CLOSE_TOO_BIG;
                return -EMSGSIZE;
        }
        if (n < hdr + 4)
                return 0;
        const uint8_t *mask = data + hdr;
        hdr += 4;
        if (n - hdr < len)
                return 0;
        uint8_t *p = data + hdr;
        for (size_t i = 0; i < len; i++)
                p[i] ^= mask[i & 3];
        *f = (struct ws_frame){ .fin = b0 & 0x80, .opcode = opcode, .payload = p, .len = (size_t)len };
        *close_code = 0;
        return (ssize_t)(hdr + len);
}

int ws_frame_append(struct buf *out, uint8_t opcode, const void *payload, size_t n) {
        uint8_t h[10];
        size_t hl = 2;
        h[0] = 0x80 | (opcode & 0x0F);
        if (n < 126)
                h[1] = (uint8_t)n;
        else if (n <= 0xFFFF) {
                h[1] = 126;
                h[2] = (uint8_t)(n >> 8);
                h[3] = (uint8_t)n;
                hl = 4;
        } else {
                h[1] = 127;
                for (int i = 0; i < 8; i++)
                        h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
                hl = 10;
        }
        int r = buf_append(out, h, hl);
        if (r == 0 && n > 0)
                r = buf_append(out, payload, n);
        return r;
}

int ws_close_append(struct buf *out, uint16_t code, const char *reason) {
        uint8_t p[WS_MAX_CONTROL];
        size_t rl = reason ? strlen(reason) : 0;
        if (rl > sizeof p - 2)
                rl = sizeof p - 2;
        p[0] = (uint8_t)(code >> 8);
        p[1] = (uint8_t)code;
        if (rl)
                memcpy(p + 2, reason, rl);
        return ws_frame_append(out, WS_CLOSE, p, 2 + rl);
}
