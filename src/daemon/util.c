/* Helpers of spaced that need no daemon state; see util.h. */
#include "daemon/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

int util_random_id(const char *prefix, char *out, size_t outsz) {
        uint8_t raw[8];
        size_t got = 0;
        while (got < sizeof raw) {
                ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)n;
        }
        int n = snprintf(out, outsz, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, raw[0], raw[1], raw[2], raw[3],
                         raw[4], raw[5], raw[6], raw[7]);
        return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

bool util_id_valid(const char *id, const char *prefix) {
        size_t pl = strlen(prefix);
        if (strncmp(id, prefix, pl) != 0 || strlen(id) != pl + 16)
                return false;
        for (const char *c = id + pl; *c; c++)
                if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
                        return false;
        return true;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int util_b64_encode(struct buf *out, const void *data, size_t n) {
        const uint8_t *s = data;
        int r = buf_reserve(out, (n + 2) / 3 * 4);
        if (r < 0)
                return r;
        char *o = out->data + out->len;
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
                *o++ = b64chars[v >> 18 & 63];
                *o++ = b64chars[v >> 12 & 63];
                *o++ = b64chars[v >> 6 & 63];
                *o++ = b64chars[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
                *o++ = b64chars[v >> 18 & 63];
                *o++ = b64chars[v >> 12 & 63];
                *o++ = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
                *o++ = '=';
        }
        out->len = (size_t)(o - out->data);
        return 0;
}

static int b64val(char c) {
        const char *p = c ? strchr(b64chars, c) : NULL;
        return p ? (int)(p - b64chars) : -1;
}

int util_b64_decode(const char *in, size_t n, struct buf *out) {
        while (n > 0 && in[n - 1] == '=')
                n--;
        if (n % 4 == 1)
                return -EINVAL;
        int r = buf_reserve(out, n / 4 * 3 + 3);
        if (r < 0)
                return r;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t i = 0; i < n; i++) {
                int v = b64val(in[i]);
                if (v < 0)
                        return -EINVAL;
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out->data[out->len++] = (char)(acc >> bits & 0xff);
                }
        }
        return 0;
}

/* Length of the UTF-8 sequence starting at s (n bytes available): >0 valid, 0 invalid,
 * -1 valid so far but cut short. */
static int utf8_seq(const uint8_t *s, size_t n) {
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
                if (i == 1) {
                        if (c == 0xe0 && s[1] < 0xa0)
                                return 0;
                        if (c == 0xed && s[1] > 0x9f)
                                return 0;
                        if (c == 0xf0 && s[1] < 0x90)
                                return 0;
                        if (c == 0xf4 && s[1] > 0x8f)
                                return 0;
                }
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

size_t util_utf8_valid_prefix(const uint8_t *s, size_t n) {
        size_t i = 0;
        while (i < n) {
                int l = utf8_seq(s + i, n - i);
                if (l <= 0)
                        return i;
                i += (size_t)l;
        }
        return i;
}

bool util_utf8_incomplete_tail(const uint8_t *s, size_t n) {
        return n > 0 && n < 4 && utf8_seq(s, n) == -1;
}

int util_parse_size(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v >= 0) || isinf(v))
                return -EINVAL;
        uint64_t mul = 1;
        if (*end) {
                switch (*end) {
                case 'k': case 'K': mul = 1ull << 10; break;
                case 'm': case 'M': mul = 1ull << 20; break;
                case 'g': case 'G': mul = 1ull << 30; break;
                case 't': case 'T': mul = 1ull << 40; break;
                case 'b': case 'B': mul = 1; break;
                default: return -EINVAL;
                }
                end++;
                if (mul > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "i") == 0))
                        end += strlen(end);
                if (*end)
                        return -EINVAL;
        }
        double b = v * (double)mul;
        if (b >= 18446744073709549568.0)
                return -ERANGE;
        *ret = (uint64_t)b;
        return 0;
}

void util_rfc3339(time_t t, char *out, size_t outsz) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(out, outsz, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int util_errno_status(int err) {
        switch (err) {
        case ENOENT: case ESRCH: return 404;
        case EEXIST: case ENOTEMPTY: case EBUSY: case EAGAIN: case ETXTBSY: return 409;
        case EACCES: case EPERM: case EROFS: return 403;
        case EFBIG: case EMSGSIZE: return 413;
        case ENOSPC: case EDQUOT: return 507;
        case EINVAL: case EISDIR: case ENOTDIR: case ENAMETOOLONG: case ELOOP: case EXDEV:
        case EOPNOTSUPP: case ERANGE: case E2BIG:
                return 400;
        default: return 500;
        }
}
