/* JSON reader and writer. The reader builds a small tree with a depth limit and an input
 * limit and accepts only valid UTF-8; the writer escapes everything a peer could send. */
#include "common/json.h"
#include "common/text.h"

#include <math.h>
#include <string.h>

struct json {
        enum json_type type;
        bool b;
        bool is_int;
        int64_t ival;
        double num;
        char *str;          /* JSON_STRING, NUL-terminated */
        struct json **items; /* JSON_ARRAY / JSON_OBJECT values */
        char **keys;         /* JSON_OBJECT keys */
        size_t n, cap;
};

struct parser {
        const char *p, *end, *start;
        int depth;
        char *errbuf;
        size_t errlen;
        int err;
};

static int fail(struct parser *ps, int err, const char *what) {
        if (ps->err == 0) {
                ps->err = err;
                if (ps->errbuf && ps->errlen)
                        snprintf(ps->errbuf, ps->errlen, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
        }
        return ps->err;
}

static void skip_ws(struct parser *ps) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
                ps->p++;
}

struct json *json_free(struct json *j) {
        if (!j)
                return NULL;
        for (size_t i = 0; i < j->n; i++) {
                json_free(j->items[i]);
                if (j->keys)
                        free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
        free(j->str);
        free(j);
        return NULL;
}

static struct json *node_new(enum json_type t) {
        struct json *j = calloc(1, sizeof *j);
        if (j)
                j->type = t;
        return j;
}

static int node_push(struct json *c, char *key, struct json *v) {
        if (c->n == c->cap) {
                size_t ncap = c->cap ? c->cap * 2 : 4;
                struct json **ni = realloc(c->items, ncap * sizeof *ni);
                if (!ni)
                        return -ENOMEM;
                c->items = ni;
                if (c->type == JSON_OBJECT) {
                        char **nk = realloc(c->keys, ncap * sizeof *nk);
                        if (!nk)
                                return -ENOMEM;
                        c->keys = nk;
                }
                c->cap = ncap;
        }
        c->items[c->n] = v;
        if (c->type == JSON_OBJECT)
                c->keys[c->n] = key;
        c->n++;
        return 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if invalid or cut short. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
        int l = text_utf8_seq(s, n);
        return l > 0 ? (size_t)l : 0;
}

static void put_utf8(struct buf *b, uint32_t cp, int *err) {
        char o[4];
        size_t n;
        if (cp < 0x80)
                o[0] = (char)cp, n = 1;
        else if (cp < 0x800)
                o[0] = (char)(0xc0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
        else if (cp < 0x10000)
                o[0] = (char)(0xe0 | (cp >> 12)), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
                o[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
        else
                o[0] = (char)(0xf0 | (cp >> 18)), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
                o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
        int r = buf_append(b, o, n);
        if (r < 0 && !*err)
                *err = r;
}

static int hex4(const char *p, uint32_t *ret) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
                char c = p[i];
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (uint32_t)(c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (uint32_t)(c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (uint32_t)(c - 'A' + 10);
                else
                        return -EINVAL;
        }
        *ret = v;
        return 0;
}

/* Parses a string at ps->p (which points at the opening quote) into a new C string. */
static int parse_string(struct parser *ps, char **ret) {
        struct buf b = BUF_INIT(0);
        int err = 0;
        ps->p++; /* opening quote */
        for (;;) {
                if (ps->p >= ps->end) {
                        buf_free(&b);
                        return fail(ps, -EINVAL, "unterminated string");
                }
                unsigned char c = (unsigned char)*ps->p;
                if (c == '"') {
                        ps->p++;
                        break;
                }
                if (c < 0x20) {
                        buf_free(&b);
                        return fail(ps, -EINVAL, "control character in string");
                }
                if (c == '\\') {
                        if (ps->end - ps->p < 2) {
                                buf_free(&b);
                                return fail(ps, -EINVAL, "unterminated escape");
                        }
                        char e = ps->p[1];
                        ps->p += 2;
                        char out;
                        switch (e) {
                        case '"': out = '"'; break;
                        case '\\': out = '\\'; break;
                        case '/': out = '/'; break;
                        case 'b': out = '\b'; break;
                        case 'f': out = '\f'; break;
                        case 'n': out = '\n'; break;
                        case 'r': out = '\r'; break;
                        case 't': out = '\t'; break;
                        case 'u': {
                                uint32_t cp;
                                if (ps->end - ps->p < 4 || hex4(ps->p, &cp) < 0) {
                                        buf_free(&b);
                                        return fail(ps, -EINVAL, "bad \\u escape");
                                }
                                ps->p += 4;
                                if (cp >= 0xd800 && cp <= 0xdbff) {
                                        uint32_t lo;
                                        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                                            hex4(ps->p + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
                                                buf_free(&b);
                                                return fail(ps, -EINVAL, "unpaired surrogate");
                                        }
                                        ps->p += 6;
                                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                                        buf_free(&b);
                                        return fail(ps, -EINVAL, "unpaired surrogate");
                                } else if (cp == 0) {
                                        buf_free(&b);
                                        return fail(ps, -EINVAL, "\\u0000 in string");
                                }
                                put_utf8(&b, cp, &err);
                                continue;
                        }
                        default:
                                buf_free(&b);
                                return fail(ps, -EINVAL, "unknown escape");
                        }
                        if (buf_putc(&b, out) < 0 && !err)
                                err = -ENOMEM;
                        continue;
                }
                /* Copy a run of plain bytes, checking UTF-8. */
                size_t n = utf8_seq((const unsigned char *)ps->p, (size_t)(ps->end - ps->p));
                if (n == 0) {
                        buf_free(&b);
                        return fail(ps, -EINVAL, "invalid UTF-8 in string");
                }
                if (buf_append(&b, ps->p, n) < 0 && !err)
                        err = -ENOMEM;
                ps->p += n;
        }
        if (err || !buf_cstr(&b)) {
                buf_free(&b);
                return fail(ps, err ? err : -ENOMEM, "out of memory");
        }
        if (!b.data) { /* empty string: make sure we hand out a real allocation */
                b.data = strdup("");
                if (!b.data)
                        return fail(ps, -ENOMEM, "out of memory");
        }
        *ret = b.data;
        return 0;
}

static int parse_number(struct parser *ps, struct json **ret) {
        const char *s = ps->p;
        const char *p = s;
        bool integral = true;
        if (p < ps->end && *p == '-')
                p++;
        if (p >= ps->end || !(*p >= '0' && *p <= '9'))
                return fail(ps, -EINVAL, "bad number");
        if (*p == '0')
                p++;
        else
                while (p < ps->end && *p >= '0' && *p <= '9')
                        p++;
        if (p < ps->end && *p == '.') {
                integral = false;
                p++;
                if (p >= ps->end || !(*p >= '0' && *p <= '9'))
                        return fail(ps, -EINVAL, "bad number");
                while (p < ps->end && *p >= '0' && *p <= '9')
                        p++;
        }
        if (p < ps->end && (*p == 'e' || *p == 'E')) {
                integral = false;
                p++;
                if (p < ps->end && (*p == '+' || *p == '-'))
                        p++;
                if (p >= ps->end || !(*p >= '0' && *p <= '9'))
                        return fail(ps, -EINVAL, "bad number");
                while (p < ps->end && *p >= '0' && *p <= '9')
                        p++;
        }
        size_t len = (size_t)(p - s);
        if (len > 64)
                return fail(ps, -EINVAL, "number too long");
        char tmp[65];
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        struct json *j = node_new(JSON_NUMBER);
        if (!j)
                return fail(ps, -ENOMEM, "out of memory");
        j->num = strtod(tmp, NULL);
        if (!isfinite(j->num)) {
                /* 1e999 would turn into inf, which JSON can't write back */
                json_free(j);
                return fail(ps, -EINVAL, "number out of range");
        }
        if (integral) {
                errno = 0;
                long long v = strtoll(tmp, NULL, 10);
                if (errno == 0) {
                        j->is_int = true;
                        j->ival = v;
                }
        }
        ps->p = p;
        *ret = j;
        return 0;
}

static int parse_value(struct parser *ps, struct json **ret);

static int parse_container(struct parser *ps, bool object, struct json **ret) {
        if (++ps->depth > JSON_MAX_DEPTH)
                return fail(ps, -E2BIG, "nesting too deep");
        char close = object ? '}' : ']';
        struct json *c = node_new(object ? JSON_OBJECT : JSON_ARRAY);
        if (!c)
                return fail(ps, -ENOMEM, "out of memory");
        ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                ps->depth--;
                *ret = c;
                return 0;
        }
        for (;;) {
                char *key = NULL;
                struct json *v = NULL;
                skip_ws(ps);
                if (object) {
                        if (ps->p >= ps->end || *ps->p != '"') {
                                json_free(c);
                                return fail(ps, -EINVAL, "expected object key");
                        }
                        if (parse_string(ps, &key) < 0) {
                                json_free(c);
                                return ps->err;
                        }
                        skip_ws(ps);
                        if (ps->p >= ps->end || *ps->p != ':') {
                                free(key);
                                json_free(c);
                                return fail(ps, -EINVAL, "expected ':'");
                        }
                        ps->p++;
                }
                if (parse_value(ps, &v) < 0) {
                        free(key);
                        json_free(c);
                        return ps->err;
                }
                if (node_push(c, key, v) < 0) {
                        free(key);
                        json_free(v);
                        json_free(c);
                        return fail(ps, -ENOMEM, "out of memory");
                }
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == close) {
                        ps->p++;
                        break;
                }
                json_free(c);
                return fail(ps, -EINVAL, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
        ps->depth--;
        *ret = c;
        return 0;
}

static int parse_literal(struct parser *ps, const char *lit, enum json_type t, bool b, struct json **ret) {
        size_t n = strlen(lit);
        if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
                return fail(ps, -EINVAL, "unexpected token");
        struct json *j = node_new(t);
        if (!j)
                return fail(ps, -ENOMEM, "out of memory");
        j->b = b;
        ps->p += n;
        *ret = j;
        return 0;
}

static int parse_value(struct parser *ps, struct json **ret) {
        skip_ws(ps);
        if (ps->p >= ps->end)
                return fail(ps, -EINVAL, "unexpected end of input");
        switch (*ps->p) {
        case '{':
                return parse_container(ps, true, ret);
        case '[':
                return parse_container(ps, false, ret);
        case '"': {
                char *s;
                if (parse_string(ps, &s) < 0)
                        return ps->err;
                struct json *j = node_new(JSON_STRING);
                if (!j) {
                        free(s);
                        return fail(ps, -ENOMEM, "out of memory");
                }
                j->str = s;
                *ret = j;
                return 0;
        }
        case 't':
                return parse_literal(ps, "true", JSON_BOOL, true, ret);
        case 'f':
                return parse_literal(ps, "false", JSON_BOOL, false, ret);
        case 'n':
                return parse_literal(ps, "null", JSON_NULL, false, ret);
        default:
                return parse_number(ps, ret);
        }
}

int json_parse(const char *text, size_t len, struct json **ret, char *errbuf, size_t errlen) {
        struct parser ps = { .p = text, .end = text + len, .start = text, .errbuf = errbuf, .errlen = errlen };
        if (len > JSON_MAX_INPUT)
                return fail(&ps, -E2BIG, "input too large");
        if (!text)
                return fail(&ps, -EINVAL, "no input");
        struct json *j = NULL;
        if (parse_value(&ps, &j) < 0)
                return ps.err;
        skip_ws(&ps);
        if (ps.p != ps.end) {
                json_free(j);
                return fail(&ps, -EINVAL, "trailing characters");
        }
        *ret = j;
        return 0;
}

enum json_type json_type(const struct json *j) { return j ? j->type : JSON_NULL; }

const struct json *json_get(const struct json *j, const char *key) {
        if (!j || j->type != JSON_OBJECT || !key)
                return NULL;
        /* Last one wins for duplicate keys, as most parsers do. */
        for (size_t i = j->n; i > 0; i--)
                if (strcmp(j->keys[i - 1], key) == 0)
                        return j->items[i - 1];
        return NULL;
}

const struct json *json_at(const struct json *j, size_t i) {
        if (!j || (j->type != JSON_ARRAY && j->type != JSON_OBJECT) || i >= j->n)
                return NULL;
        return j->items[i];
}

const char *json_key_at(const struct json *j, size_t i) {
        if (!j || j->type != JSON_OBJECT || i >= j->n)
                return NULL;
        return j->keys[i];
}

size_t json_len(const struct json *j) {
        if (!j || (j->type != JSON_ARRAY && j->type != JSON_OBJECT))
                return 0;
        return j->n;
}

const char *json_str(const struct json *j) { return j && j->type == JSON_STRING ? j->str : NULL; }
bool json_is_true(const struct json *j) { return j && j->type == JSON_BOOL && j->b; }
double json_num(const struct json *j) { return j && j->type == JSON_NUMBER ? j->num : 0.0; }

int json_int(const struct json *j, int64_t *ret) {
        if (!j || j->type != JSON_NUMBER)
                return -EINVAL;
        if (j->is_int) {
                *ret = j->ival;
                return 0;
        }
        if (!isfinite(j->num) || floor(j->num) != j->num)
                return -EINVAL;
        if (j->num < -9223372036854775808.0 || j->num >= 9223372036854775808.0)
                return -ERANGE;
        *ret = (int64_t)j->num;
        return 0;
}

const char *json_get_str(const struct json *obj, const char *key) { return json_str(json_get(obj, key)); }

int json_get_int(const struct json *obj, const char *key, int64_t *ret) {
        const struct json *v = json_get(obj, key);
        if (!v)
                return -ENOENT;
        return json_int(v, ret);
}

bool json_get_bool(const struct json *obj, const char *key, bool def) {
        const struct json *v = json_get(obj, key);
        if (!v || v->type != JSON_BOOL)
                return def;
        return v->b;
}

/* ---- writer ---- */

static void w_put(struct json_writer *w, const char *s, size_t n) {
        if (w->err)
                return;
        int r = buf_append(w->b, s, n);
        if (r < 0)
                w->err = r;
}

/* Separator before a value or key at the current level. */
static void w_sep(struct json_writer *w) {
        if (w->err)
                return;
        if (w->after_key) {
                w->after_key = false;
                return;
        }
        if (w->need_comma[w->depth])
                w_put(w, ",", 1);
        w->need_comma[w->depth] = true;
}

static void w_open(struct json_writer *w, char c) {
        w_sep(w);
        if (w->err)
                return;
        if (w->depth >= JSON_MAX_DEPTH) {
                w->err = -E2BIG;
                return;
        }
        w_put(w, &c, 1);
        w->depth++;
        w->need_comma[w->depth] = false;
}

static void w_close(struct json_writer *w, char c) {
        if (w->err)
                return;
        if (w->depth <= 0) {
                w->err = -EINVAL;
                return;
        }
        w->depth--;
        w_put(w, &c, 1);
}

void json_w_obj_begin(struct json_writer *w) { w_open(w, '{'); }
void json_w_obj_end(struct json_writer *w) { w_close(w, '}'); }
void json_w_arr_begin(struct json_writer *w) { w_open(w, '['); }
void json_w_arr_end(struct json_writer *w) { w_close(w, ']'); }

static void w_string(struct json_writer *w, const char *s, size_t n) {
        static const char hex[] = "0123456789abcdef";
        w_put(w, "\"", 1);
        size_t i = 0;
        while (i < n && !w->err) {
                unsigned char c = (unsigned char)s[i];
                if (c == '"' || c == '\\') {
                        char e[2] = { '\\', (char)c };
                        w_put(w, e, 2);
                        i++;
                } else if (c < 0x20 || c == 0x7f) {
                        char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
                        switch (c) {
                        case '\n': w_put(w, "\\n", 2); break;
                        case '\r': w_put(w, "\\r", 2); break;
                        case '\t': w_put(w, "\\t", 2); break;
                        default: w_put(w, e, 6);
                        }
                        i++;
                } else {
                        size_t l = utf8_seq((const unsigned char *)s + i, n - i);
                        if (l == 0) {
                                w_put(w, "\xef\xbf\xbd", 3); /* U+FFFD */
                                i++;
                        } else {
                                w_put(w, s + i, l);
                                i += l;
                        }
                }
        }
        w_put(w, "\"", 1);
}

void json_w_key(struct json_writer *w, const char *key) {
        w_sep(w);
        w_string(w, key, strlen(key));
        w_put(w, ":", 1);
        w->after_key = true;
}

void json_w_strn(struct json_writer *w, const char *s, size_t n) {
        w_sep(w);
        w_string(w, s, n);
}

void json_w_str(struct json_writer *w, const char *s) {
        if (!s) {
                json_w_null(w);
                return;
        }
        json_w_strn(w, s, strlen(s));
}

void json_w_int(struct json_writer *w, int64_t v) {
        char t[32];
        int n = snprintf(t, sizeof t, "%lld", (long long)v);
        w_sep(w);
        w_put(w, t, (size_t)n);
}

void json_w_uint(struct json_writer *w, uint64_t v) {
        char t[32];
        int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
        w_sep(w);
        w_put(w, t, (size_t)n);
}

void json_w_double(struct json_writer *w, double v) {
        if (!isfinite(v)) {
                json_w_null(w);
                return;
        }
        if (v == 0.0 && signbit(v)) {
                /* "-0" would read back as the integer 0 */
                w_sep(w);
                w_put(w, "-0.0", 4);
                return;
        }
        char t[40];
        int n = snprintf(t, sizeof t, "%.17g", v);
        /* Prefer the shortest form that reads back the same. */
        for (int prec = 1; prec < 17; prec++) {
                char s[40];
                int m = snprintf(s, sizeof s, "%.*g", prec, v);
                if (strtod(s, NULL) == v) {
                        memcpy(t, s, (size_t)m + 1);
                        n = m;
                        break;
                }
        }
        w_sep(w);
        w_put(w, t, (size_t)n);
}

void json_w_bool(struct json_writer *w, bool v) {
        w_sep(w);
        w_put(w, v ? "true" : "false", v ? 4 : 5);
}

void json_w_null(struct json_writer *w) {
        w_sep(w);
        w_put(w, "null", 4);
}

void json_w_raw(struct json_writer *w, const char *json, size_t n) {
        w_sep(w);
        w_put(w, json, n);
}

void json_w_value(struct json_writer *w, const struct json *j) {
        if (!j) {
                json_w_null(w);
                return;
        }
        switch (j->type) {
        case JSON_NULL: json_w_null(w); break;
        case JSON_BOOL: json_w_bool(w, j->b); break;
        case JSON_NUMBER:
                if (j->is_int)
                        json_w_int(w, j->ival);
                else
                        json_w_double(w, j->num);
                break;
        case JSON_STRING: json_w_str(w, j->str); break;
        case JSON_ARRAY:
                json_w_arr_begin(w);
                for (size_t i = 0; i < j->n; i++)
                        json_w_value(w, j->items[i]);
                json_w_arr_end(w);
                break;
        case JSON_OBJECT:
                json_w_obj_begin(w);
                for (size_t i = 0; i < j->n; i++) {
                        json_w_key(w, j->keys[i]);
                        json_w_value(w, j->items[i]);
                }
                json_w_obj_end(w);
                break;
        }
}
