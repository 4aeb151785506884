/* A small JSON reader (DOM) and writer with hard limits, shared by spaced, space-init,
 * the CLI and libspace. No dependencies so that the static space-init can link it. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"

#define JSON_MAX_DEPTH 64
#define JSON_MAX_INPUT (16u << 20) /* longest text json_parse accepts */

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json; /* one node; a parsed document is a tree of them */

/* Parses exactly one JSON value (surrounding whitespace allowed). On failure returns
 * -EINVAL (syntax; when errbuf is given it says what and at which byte), -E2BIG (over
 * JSON_MAX_INPUT or JSON_MAX_DEPTH) or -ENOMEM; *ret is untouched. Strings are valid UTF-8
 * after parsing (\u escapes decoded; \u0000 is refused). */
int json_parse(const char *text, size_t len, struct json **ret, char *errbuf, size_t errlen);
struct json *json_free(struct json *j);
static inline void json_freep(struct json **j) { *j = json_free(*j); }
#define _cleanup_json_ _cleanup_(json_freep)

enum json_type json_type(const struct json *j);
/* Object member by key; NULL if j is not an object or has no such key. */
const struct json *json_get(const struct json *j, const char *key);
/* Array element or object member value by index; NULL if out of range. */
const struct json *json_at(const struct json *j, size_t i);
/* Object member key by index; NULL if out of range or not an object. */
const char *json_key_at(const struct json *j, size_t i);
/* Number of elements (array) or members (object); 0 for scalars. */
size_t json_len(const struct json *j);

/* Scalar accessors: NULL/false/-EINVAL when the node is not of that type. */
const char *json_str(const struct json *j);
bool json_is_true(const struct json *j);
/* Integer value: -EINVAL if not a number or not integral, -ERANGE if out of int64 range. */
int json_int(const struct json *j, int64_t *ret);
double json_num(const struct json *j);

/* Convenience on objects: member of a given type, or NULL / default. */
const char *json_get_str(const struct json *obj, const char *key);
/* -ENOENT if missing, -EINVAL if not an integer; *ret untouched on failure. */
int json_get_int(const struct json *obj, const char *key, int64_t *ret);
bool json_get_bool(const struct json *obj, const char *key, bool def);

/* Writer: appends to a struct buf, inserting commas by itself. The first error (for
 * example the buffer's cap) sticks in w->err and later calls do nothing. */
struct json_writer {
        struct buf *b;
        int depth;
        int err;
        bool need_comma[JSON_MAX_DEPTH + 1];
        bool after_key;
};
#define JSON_WRITER_INIT(bufp) ((struct json_writer){ .b = (bufp) })

void json_w_obj_begin(struct json_writer *w);
void json_w_obj_end(struct json_writer *w);
void json_w_arr_begin(struct json_writer *w);
void json_w_arr_end(struct json_writer *w);
void json_w_key(struct json_writer *w, const char *key);
void json_w_str(struct json_writer *w, const char *s);
/* Bytes that are not valid UTF-8 are written as U+FFFD. */
void json_w_strn(struct json_writer *w, const char *s, size_t n);
void json_w_int(struct json_writer *w, int64_t v);
void json_w_uint(struct json_writer *w, uint64_t v);
void json_w_double(struct json_writer *w, double v);
void json_w_bool(struct json_writer *w, bool v);
void json_w_null(struct json_writer *w);
/* Copies an already-encoded JSON value. */
void json_w_raw(struct json_writer *w, const char *json, size_t n);
/* Writes a parsed value back out (canonical form). */
void json_w_value(struct json_writer *w, const struct json *j);

/* Shorthands for key + value. */
static inline void json_w_kstr(struct json_writer *w, const char *k, const char *v) { json_w_key(w, k); v ? json_w_str(w, v) : json_w_null(w); }
static inline void json_w_kint(struct json_writer *w, const char *k, int64_t v) { json_w_key(w, k); json_w_int(w, v); }
static inline void json_w_kuint(struct json_writer *w, const char *k, uint64_t v) { json_w_key(w, k); json_w_uint(w, v); }
static inline void json_w_kbool(struct json_writer *w, const char *k, bool v) { json_w_key(w, k); json_w_bool(w, v); }
