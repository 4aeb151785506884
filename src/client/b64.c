/* Base64 coding and UTF-8 validation used by libspace's exec and attach streams. */
#include "client/b64.h"

#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int client_b64_encode(struct buf *out, const void *data, size_t n) {
        const unsigned char *p = data;
        if (n > (SIZE_MAX / 4) * 3 - 3)
                return -E2BIG;
        int r = buf_reserve(out, (n + 2) / 3 * 4);
        if (r < 0)
                return r;
        char *o = out->data + out->len;
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
                *o++ = alphabet[v >> 18];
                *o++ = alphabet[(v >> 12) & 63];
                *o++ = alphabet[(v >> 6) & 63];
                *o++ = alphabet[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
                *o++ = alphabet[v >> 18];
                *o++ = alphabet[(v >> 12) & 63];
                *o++ = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
                *o++ = '=';
        }
        out->len = (size_t)(o - out->data);
        return 0;
}

static int b64_value(char c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int client_b64_decode(struct buf *out, const char *s, size_t n) {
        if (n % 4 != 0)
                return -EINVAL;
        int r = buf_reserve(out, n / 4 * 3);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i += 4) {
                int v[4];
                int pad = 0;
                for (int k = 0; k < 4; k++) {
                        char ch = s[i + k];
                        if (ch == '=') {
                                /* padding only in the last group's last one or two places */
                                if (i + 4 != n || k < 2)
                                        return -EINVAL;
                                pad++;
                                v[k] = 0;
                                continue;
                        }
                        if (pad)
                                return -EINVAL;
                        v[k] = b64_value(ch);
                        if (v[k] < 0)
                                return -EINVAL;
                }
                uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
                out->data[out->len++] = (char)(w >> 16);
                if (pad < 2)
                        out->data[out->len++] = (char)(w >> 8);
                if (pad < 1)
                        out->data[out->len++] = (char)w;
        }
        return 0;
}

bool client_utf8_valid(const char *s, size_t n) {
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;
        while (i < n) {
                unsigned char c = p[i];
                if (c == 0)
                        return false;
                if (c < 0x80) {
                        i++;
                        continue;
                }
                size_t len;
                uint32_t cp;
                if ((c & 0xE0) == 0xC0) {
                        len = 2;
                        cp = c & 0x1F;
                } else if ((c & 0xF0) == 0xE0) {
                        len = 3;
                        cp = c & 0x0F;
                } else if ((c & 0xF8) == 0xF0) {
                        len = 4;
                        cp = c & 0x07;
                } else {
                        return false;
                }
                if (i + len > n)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((p[i + k] & 0xC0) != 0x80)
                                return false;
                        cp = cp << 6 | (p[i + k] & 0x3F);
                }
                /* overlong forms, surrogates and values past U+10FFFF */
                if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                        return false;
                i += len;
        }
        return true;
}
