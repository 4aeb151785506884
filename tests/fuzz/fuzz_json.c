/* Fuzz target: the JSON reader and writer (src/common/json.c), which every API request
 * body and every space-init control message goes through.
 * Properties: parsing never crashes or leaks whatever the bytes; a parsed value written
 * back out (canonical form) parses again and writing that gives the same bytes; every
 * accessor is safe on every node; any byte string written with json_w_strn comes back as
 * valid UTF-8, unchanged when it was valid UTF-8. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/buf.h"
#include "common/json.h"
#include "fuzz.h"

#define FUZZ_JSON_MAX_OUT (64u << 20)

static bool utf8_valid(const char *s, size_t n) {
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;
        while (i < n) {
                unsigned c = p[i];
                size_t k;
                unsigned min;
                if (c < 0x80) {
                        i++;
                        continue;
                } else if ((c & 0xe0) == 0xc0) {
                        k = 1, min = 0x80, c &= 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        k = 2, min = 0x800, c &= 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        k = 3, min = 0x10000, c &= 0x07;
                } else {
                        return false;
                }
                if (n - i <= k)
                        return false;
                for (size_t j = 1; j <= k; j++) {
                        if ((p[i + j] & 0xc0) != 0x80)
                                return false;
                        c = c << 6 | (p[i + j] & 0x3f);
                }
                if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
                        return false;
                i += k + 1;
        }
        return true;
}

/* Touches every accessor on every node; checks the answers agree with each other. */
static void walk(const struct json *j, int depth) {
        FUZZ_CHECK(depth <= JSON_MAX_DEPTH + 1);
        enum json_type t = json_type(j);
        size_t n = json_len(j);
        int64_t iv;
        switch (t) {
        case JSON_NULL:
        case JSON_BOOL:
                FUZZ_CHECK(n == 0);
                FUZZ_CHECK(json_str(j) == NULL);
                break;
        case JSON_NUMBER:
                FUZZ_CHECK(n == 0);
                /* the parser refuses numbers out of double range */
                FUZZ_CHECK(isfinite(json_num(j)));
                if (json_int(j, &iv) == 0)
                        FUZZ_CHECK((double)iv == json_num(j) || iv > (1ll << 53) || iv < -(1ll << 53));
                break;
        case JSON_STRING: {
                const char *s = json_str(j);
                FUZZ_CHECK(s != NULL);
                FUZZ_CHECK(utf8_valid(s, strlen(s)));
                FUZZ_CHECK(json_int(j, &iv) == -EINVAL);
                break;
        }
        case JSON_ARRAY:
                FUZZ_CHECK(json_key_at(j, 0) == NULL);
                for (size_t i = 0; i < n; i++)
                        walk(json_at(j, i), depth + 1);
                FUZZ_CHECK(json_at(j, n) == NULL);
                break;
        case JSON_OBJECT:
                for (size_t i = 0; i < n; i++) {
                        const char *k = json_key_at(j, i);
                        FUZZ_CHECK(k != NULL);
                        FUZZ_CHECK(utf8_valid(k, strlen(k)));
                        /* Duplicate keys: json_get finds one of them, never none. */
                        FUZZ_CHECK(json_get(j, k) != NULL);
                        (void)json_get_str(j, k);
                        (void)json_get_bool(j, k, false);
                        (void)json_get_int(j, k, &iv);
                        walk(json_at(j, i), depth + 1);
                }
                FUZZ_CHECK(json_at(j, n) == NULL);
                FUZZ_CHECK(json_key_at(j, n) == NULL);
                break;
        default:
                FUZZ_CHECK(!"unknown node type");
        }
}

static int write_value(const struct json *j, struct buf *out) {
        struct json_writer w = JSON_WRITER_INIT(out);
        json_w_value(&w, j);
        return w.err;
}

static void round_trip(const uint8_t *data, size_t size) {
        char err[128];
        struct json *j = NULL;
        int r = json_parse((const char *)data, size, &j, err, sizeof err);
        if (r < 0) {
                FUZZ_CHECK(j == NULL);
                FUZZ_CHECK(r == -EINVAL || r == -E2BIG || r == -ENOMEM);
                return;
        }
        FUZZ_CHECK(j != NULL);
        walk(j, 0);

        /* w1 = write(parse(input)), w2 = write(parse(w1)), w3 = write(parse(w2)): the
         * canonical form is a fixed point from w1 on. */
        struct buf w1 = BUF_INIT(FUZZ_JSON_MAX_OUT), w2 = BUF_INIT(FUZZ_JSON_MAX_OUT),
                   w3 = BUF_INIT(FUZZ_JSON_MAX_OUT);
        if (write_value(j, &w1) == 0) {
                struct json *j2 = NULL, *j3 = NULL;
                r = json_parse(w1.data ? w1.data : "", w1.len, &j2, err, sizeof err);
                if (r < 0)
                        fuzz_fail(__FILE__, __LINE__, err);
                FUZZ_CHECK(json_type(j2) == json_type(j));
                FUZZ_CHECK(json_len(j2) == json_len(j));
                FUZZ_CHECK(write_value(j2, &w2) == 0);
                FUZZ_CHECK(w1.len == w2.len && memcmp(w1.data, w2.data, w1.len) == 0);
                r = json_parse(w2.data, w2.len, &j3, err, sizeof err);
                if (r < 0)
                        fuzz_fail(__FILE__, __LINE__, err);
                FUZZ_CHECK(write_value(j3, &w3) == 0);
                FUZZ_CHECK(w2.len == w3.len && memcmp(w2.data, w3.data, w2.len) == 0);
                json_free(j3);
                json_free(j2);
        }
        buf_free(&w1);
        buf_free(&w2);
        buf_free(&w3);
        json_free(j);
}

/* The input as one string value: what a response carrying command output does. */
static void string_writer(const uint8_t *data, size_t size) {
        struct buf out = BUF_INIT(FUZZ_JSON_MAX_OUT);
        struct json_writer w = JSON_WRITER_INIT(&out);
        json_w_strn(&w, (const char *)data, size);
        FUZZ_CHECK(w.err == 0);
        struct json *j = NULL;
        char err[128];
        int r = json_parse(out.data, out.len, &j, err, sizeof err);
        /* \u0000 is refused by the reader, so a NUL byte may legitimately fail here. */
        if (r < 0) {
                FUZZ_CHECK(memchr(data, 0, size) != NULL);
        } else {
                FUZZ_CHECK(json_type(j) == JSON_STRING);
                const char *s = json_str(j);
                FUZZ_CHECK(utf8_valid(s, strlen(s)));
                if (utf8_valid((const char *)data, size) && !memchr(data, 0, size))
                        FUZZ_CHECK(strlen(s) == size && memcmp(s, data, size) == 0);
        }
        json_free(j);
        buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        round_trip(data, size);
        string_writer(data, size);
        return 0;
}
