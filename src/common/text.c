/* Base64 and UTF-8 helpers; see text.h. */
#include "common/text.h"

#include <string.h>
#include <strings.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int text_b64_encode(struct buf *out, const void *data, size_t n) {
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

int text_hex_digit(int c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
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

int text_b64_decode(struct buf *out, const char *s, size_t n) {
        if (n % 4 != 0)
                return -EINVAL;
        int r = buf_reserve(out, n / 4 * 3);
        if (r < 0)
                return r;
        size_t start = out->len;
        for (size_t i = 0; i < n; i += 4) {
                int v[4];
                int pad = 0;
                for (int k = 0; k < 4; k++) {
                        char ch = s[i + k];
                        if (ch == '=') {
                                /* padding only in the last group's last one or two places */
                                if (i + 4 != n || k < 2)
                                        goto bad;
                                pad++;
                                v[k] = 0;
                                continue;
                        }
                        if (pad)
                                goto bad;
                        v[k] = b64_value(ch);
                        if (v[k] < 0)
                                goto bad;
                }
                uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
                out->data[out->len++] = (char)(w >> 16);
                if (pad < 2)
                        out->data[out->len++] = (char)(w >> 8);
                if (pad < 1)
                        out->data[out->len++] = (char)w;
        }
        return 0;
bad:
        out->len = start; /* nothing half-decoded is left behind */
        return -EINVAL;
}

int text_utf8_seq(const uint8_t *s, size_t n) {
        uint8_t c = s[0];
        if (c < 0x80)
                return 1;
        int len;
        uint32_t min;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4, min = 0x10000;
        else
                return 0;
        uint32_t cp = c & (0x7f >> len);
        for (int i = 1; i < len; i++) {
                if ((size_t)i >= n)
                        return -1; /* the bytes so far were checked like a full sequence's */
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
                /* refuse overlong forms, surrogates and > U+10FFFF as early as the
                 * second byte, so a cut-short sequence is judged like a whole one */
                if (i == 1 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
                               (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f)))
                        return 0;
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

size_t text_utf8_valid_prefix(const uint8_t *s, size_t n) {
        size_t i = 0;
        while (i < n) {
                int l = text_utf8_seq(s + i, n - i);
                if (l <= 0)
                        return i;
                i += (size_t)l;
        }
        return i;
}

bool text_utf8_incomplete_tail(const uint8_t *s, size_t n) {
        return n > 0 && n < 4 && text_utf8_seq(s, n) == -1;
}

bool text_utf8_valid(const char *s, size_t n) {
        return !memchr(s, 0, n) && text_utf8_valid_prefix((const uint8_t *)s, n) == n;
}

bool text_list_has_token(const char *list, const char *token) {
        size_t tl = strlen(token);
        const char *p = list;
        while (*p) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *s = p;
                while (*p && *p != ',')
                        p++;
                const char *e = p;
                while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
                        e--;
                if ((size_t)(e - s) == tl && strncasecmp(s, token, tl) == 0)
                        return true;
        }
        return false;
}
