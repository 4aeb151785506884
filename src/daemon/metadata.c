/* Session metadata (daemon/metadata.h): its rules, its text, and the list filters. */
#include "daemon/metadata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/macros.h"
#include "daemon/http.h"
#include "meta/meta.h"

int metadata_parse(const struct json *v, char **ret, char *why, size_t why_size) {
        *ret = NULL;
        if (!v || json_type(v) == JSON_NULL)
                return 0;
        if (json_type(v) != JSON_OBJECT) {
                snprintf(why, why_size, "metadata must be an object of string values");
                return -EINVAL;
        }
        size_t n = json_len(v);
        if (n > MD_KEYS_MAX) {
                snprintf(why, why_size, "metadata has %zu keys, at most %d are allowed", n, MD_KEYS_MAX);
                return -EINVAL;
        }
        for (size_t i = 0; i < n; i++) {
                const char *k = json_key_at(v, i);
                const char *s = json_str(json_at(v, i));
                size_t kl = strlen(k);
                if (kl == 0 || kl > MD_KEY_MAX) {
                        snprintf(why, why_size, "metadata key \"%.*s%s\" must be 1 to %d bytes", 40, k,
                                 kl > 40 ? "..." : "", MD_KEY_MAX);
                        return -EINVAL;
                }
                if (!s) {
                        snprintf(why, why_size, "metadata \"%s\": the value must be a string", k);
                        return -EINVAL;
                }
                if (strlen(s) > MD_VALUE_MAX) {
                        snprintf(why, why_size, "metadata \"%s\": the value is %zu bytes, at most %d are allowed", k,
                                 strlen(s), MD_VALUE_MAX);
                        return -EINVAL;
                }
                for (size_t j = 0; j < i; j++)
                        if (!strcmp(json_key_at(v, j), k)) {
                                snprintf(why, why_size, "metadata key \"%s\" is given twice", k);
                                return -EINVAL;
                        }
        }
        if (n == 0)
                return 0;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_value(&w, v);
        int r = w.err ? w.err : buf_putc(&b, '\0');
        /* Escapes can make the text longer than its bytes: meta keeps at most this. */
        if (r == 0 && b.len - 1 > META_JSON_MAX) {
                snprintf(why, why_size, "metadata is %zu bytes as JSON, at most %u are allowed", b.len - 1, META_JSON_MAX);
                r = -EINVAL;
        } else if (r == 0 && !(*ret = strdup(b.data))) {
                r = -ENOMEM;
        }
        buf_free(&b);
        return r;
}

void metadata_write_json(struct json_writer *w, const char *text) {
        if (text && *text)
                json_w_raw(w, text, strlen(text));
        else {
                json_w_obj_begin(w);
                json_w_obj_end(w);
        }
}

void metadata_filter_clear(struct md_filter *f) {
        for (size_t i = 0; i < f->n; i++) {
                free(f->keys[i]);
                free(f->values[i]);
        }
        f->n = 0;
}

/* One side of a pair: form-decoded, then (twice) percent-decoded again. */
static int decode_side(const char *in, size_t n, bool twice, char **ret) {
        char *a = malloc(n + 1), *b = NULL;
        if (!a)
                return -ENOMEM;
        size_t len;
        int r = http_pct_decode(in, n, true, a, n + 1, &len);
        if (r == 0 && twice) {
                if (!(b = malloc(len + 1)))
                        r = -ENOMEM;
                else if ((r = http_pct_decode(a, len, false, b, len + 1, NULL)) == 0) {
                        free(a);
                        a = TAKE_PTR(b);
                }
        }
        free(b);
        if (r < 0) {
                free(a);
                return r;
        }
        *ret = a;
        return 0;
}

int metadata_filter_parse(const char *text, bool twice, struct md_filter *f, char *why, size_t why_size) {
        *f = (struct md_filter){ 0 };
        size_t total = strlen(text);
        if (total > MD_FILTER_MAX) {
                snprintf(why, why_size, "metadata filter is over %d bytes", MD_FILTER_MAX);
                return -EINVAL;
        }
        for (const char *p = text; *p;) {
                const char *end = strchrnul(p, '&');
                if (end == p) {
                        p = *end ? end + 1 : end;
                        continue; /* "a=b&&c=d" */
                }
                if (f->n == MD_KEYS_MAX) {
                        snprintf(why, why_size, "metadata filter has more than %d pairs", MD_KEYS_MAX);
                        metadata_filter_clear(f);
                        return -EINVAL;
                }
                const char *eq = memchr(p, '=', (size_t)(end - p));
                const char *vs = eq ? eq + 1 : end;
                int r = decode_side(p, (size_t)((eq ? eq : end) - p), twice, &f->keys[f->n]);
                if (r == 0 && (r = decode_side(vs, (size_t)(end - vs), twice, &f->values[f->n])) < 0)
                        free(f->keys[f->n]);
                if (r == 0 && !*f->keys[f->n]) {
                        free(f->keys[f->n]);
                        free(f->values[f->n]);
                        r = -EINVAL;
                }
                if (r < 0) {
                        if (r != -ENOMEM)
                                snprintf(why, why_size, "metadata filter: \"%.*s\" is not key=value with percent-encoded "
                                         "key and value", (int)((end - p) > 60 ? 60 : (end - p)), p);
                        metadata_filter_clear(f);
                        return r == -ENOMEM ? r : -EINVAL;
                }
                f->n++;
                p = *end ? end + 1 : end;
        }
        return 0;
}

bool metadata_matches(const char *text, const struct md_filter *f) {
        if (!f->n)
                return true;
        if (!text)
                return false;
        _cleanup_json_ struct json *j = NULL;
        if (json_parse(text, strlen(text), &j, NULL, 0) < 0)
                return false;
        for (size_t i = 0; i < f->n; i++) {
                const char *v = json_get_str(j, f->keys[i]);
                if (!v || strcmp(v, f->values[i]) != 0)
                        return false;
        }
        return true;
}
