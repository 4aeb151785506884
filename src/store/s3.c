/* The S3 client (s3.h) on libcurl: libcurl signs (CURLOPT_AWS_SIGV4) and moves the bytes;
 * this file builds path-style URLs, retries, maps answers to errnos and reads the few XML
 * elements of a ListObjectsV2 answer it needs. */
#include "store/s3.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/macros.h"

#define S3_ERR_BODY_MAX 4096u /* of an error answer, kept for the message */

struct s3 {
        CURL *h;
        char *endpoint, *access, *secret, *bucket;
        char sigv4[96];
        unsigned timeout_ms;
        unsigned retries;
        char err[S3_ERR_SIZE];
};

/* What a request sends: nothing, a buffer, or a file. */
struct s3_body {
        const uint8_t *data;
        int fd;
        uint64_t size, off;
};

/* Where its answer goes: a buffer (bounded) or a file; an error answer's body always
 * goes to errbody. */
struct s3_sink {
        struct buf *b;
        size_t max;
        int fd;
        off_t base;
        uint64_t n;
        bool too_big;
        int werr;
        struct buf errbody;
        CURL *h;
};

static int fail(struct s3 *s, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct s3 *s, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, sizeof s->err, fmt, ap);
        va_end(ap);
        return r;
}

const char *s3_last_error(const struct s3 *s) { return s ? s->err : "no S3 handle"; }

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static bool bucket_ok(const char *b) {
        size_t n = strlen(b);
        if (n < 3 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' || b[i] == '-'))
                        return false;
        return true;
}

int s3_new(const struct s3_config *c, struct s3 **ret) {
        if (!c || !c->endpoint || !c->region || !c->access_key || !c->secret_key || !c->bucket || !ret)
                return -EINVAL;
        if ((strncmp(c->endpoint, "http://", 7) != 0 && strncmp(c->endpoint, "https://", 8) != 0) ||
            strlen(c->endpoint) > 512 || !bucket_ok(c->bucket) || !*c->region || strlen(c->region) > 32 ||
            strspn(c->region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(c->region) ||
            c->retries > (int)S3_RETRIES_MAX || c->retries < -1)
                return -EINVAL;
        pthread_once(&global_once, global_init);
        if (global_rc != CURLE_OK)
                return -ENOMEM;
        struct s3 *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        size_t el = strlen(c->endpoint);
        while (el > 0 && c->endpoint[el - 1] == '/')
                el--;
        s->endpoint = strndup(c->endpoint, el);
        s->access = strdup(c->access_key);
        s->secret = strdup(c->secret_key);
        s->bucket = strdup(c->bucket);
        s->h = curl_easy_init();
        if (!s->endpoint || !s->access || !s->secret || !s->bucket || !s->h) {
                s3_free(s);
                return -ENOMEM;
        }
        snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", c->region);
        s->timeout_ms = c->timeout_ms ? c->timeout_ms : S3_DEFAULT_TIMEOUT_MS;
        s->retries = c->retries < 0 ? S3_DEFAULT_RETRIES : (unsigned)c->retries;
        *ret = s;
        return 0;
}

int s3_clone(const struct s3 *o, struct s3 **ret) {
        struct s3 *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->endpoint = strdup(o->endpoint);
        s->access = strdup(o->access);
        s->secret = strdup(o->secret);
        s->bucket = strdup(o->bucket);
        s->h = curl_easy_init();
        if (!s->endpoint || !s->access || !s->secret || !s->bucket || !s->h) {
                s3_free(s);
                return -ENOMEM;
        }
        memcpy(s->sigv4, o->sigv4, sizeof s->sigv4);
        s->timeout_ms = o->timeout_ms;
        s->retries = o->retries;
        *ret = s;
        return 0;
}

struct s3 *s3_free(struct s3 *s) {
        if (!s)
                return NULL;
        if (s->h)
                curl_easy_cleanup(s->h);
        free(s->endpoint);
        free(s->access);
        if (s->secret) {
                explicit_bzero(s->secret, strlen(s->secret));
                free(s->secret);
        }
        free(s->bucket);
        free(s);
        return NULL;
}

/* Percent-encodes s into out: unreserved characters stay, and '/' too when slash. */
static int encode(struct buf *out, const char *s, bool slash) {
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                bool keep = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                            *p == '-' || *p == '.' || *p == '_' || *p == '~' || (slash && *p == '/');
                int r = keep ? buf_putc(out, (char)*p)
                             : buf_printf(out, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int key_check(struct s3 *s, const char *key) {
        if (!key || !*key)
                return fail(s, -EINVAL, "an S3 key must not be empty");
        size_t n = strlen(key);
        if (n > S3_KEY_MAX)
                return fail(s, -EINVAL, "an S3 key is at most %u bytes (this one: %zu)", S3_KEY_MAX, n);
        if (key[0] == '/')
                return fail(s, -EINVAL, "an S3 key must not start with '/': %.64s", key);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
                        return fail(s, -EINVAL, "an S3 key must not hold control characters");
        return 0;
}

static size_t read_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
        struct s3_body *b = ud;
        size_t want = size * nmemb;
        uint64_t left = b->size - b->off;
        if (want > left)
                want = (size_t)left;
        if (!want)
                return 0;
        if (b->data) {
                memcpy(ptr, b->data + b->off, want);
        } else {
                ssize_t n;
                while ((n = pread(b->fd, ptr, want, (off_t)b->off)) < 0 && errno == EINTR)
                        ;
                if (n <= 0)
                        return CURL_READFUNC_ABORT; /* the file shrank or failed under us */
                want = (size_t)n;
        }
        b->off += want;
        return want;
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
        struct s3_sink *k = ud;
        size_t n = size * nmemb;
        long code = 0;
        curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &code);
        if (code < 200 || code >= 300) {
                size_t room = S3_ERR_BODY_MAX - k->errbody.len;
                (void)buf_append(&k->errbody, ptr, MIN(room, n));
                return n;
        }
        if (k->b) {
                if (k->b->len + n > k->max) {
                        k->too_big = true;
                        return 0;
                }
                if (buf_append(k->b, ptr, n) < 0) {
                        k->werr = -ENOMEM;
                        return 0;
                }
        } else if (k->fd >= 0) {
                for (size_t done = 0; done < n;) {
                        ssize_t w = write(k->fd, ptr + done, n - done);
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w < 0) {
                                k->werr = -errno;
                                return 0;
                        }
                        done += (size_t)w;
                }
        }
        k->n += n;
        return n;
}

/* The value of <tag> in an XML text (the first one at or after from), or NULL. */
static const char *xml_find(const char *from, const char *end, const char *tag, size_t *ret_len) {
        char open[64], close[64];
        snprintf(open, sizeof open, "<%s>", tag);
        snprintf(close, sizeof close, "</%s>", tag);
        const char *a = memmem(from, (size_t)(end - from), open, strlen(open));
        if (!a)
                return NULL;
        a += strlen(open);
        const char *z = memmem(a, (size_t)(end - a), close, strlen(close));
        if (!z)
                return NULL;
        *ret_len = (size_t)(z - a);
        return a;
}

/* An XML text value with its five predefined entities decoded; -EBADMSG for another. */
static int xml_text(const char *v, size_t n, struct buf *out) {
        static const struct { const char *ent; char c; } ents[] = {
                { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' },
        };
        buf_reset(out);
        for (size_t i = 0; i < n;) {
                if (v[i] != '&') {
                        if (buf_putc(out, v[i++]) < 0)
                                return -ENOMEM;
                        continue;
                }
                size_t k = 0;
                while (k < ELEMENTSOF(ents) && strncmp(v + i, ents[k].ent, MIN(strlen(ents[k].ent), n - i)) != 0)
                        k++;
                if (k == ELEMENTSOF(ents) || n - i < strlen(ents[k].ent))
                        return -EBADMSG;
                if (buf_putc(out, ents[k].c) < 0)
                        return -ENOMEM;
                i += strlen(ents[k].ent);
        }
        return buf_cstr(out) ? 0 : -ENOMEM;
}

static bool retryable(CURLcode rc) {
        return rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_SEND_ERROR ||
               rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* One request, tried again on a connection failure or a 5xx. key NULL: the bucket itself.
 * query: already encoded, sorted by name (SigV4's canonical order). Returns the HTTP
 * status (2xx..4xx) or a negative errno; *ret_len: the answer's Content-Length (HEAD),
 * *ret_mtime its Last-Modified (0 if none). */
static int request(struct s3 *s, const char *method, const char *key, const char *query, struct s3_body *body,
                   struct s3_sink *sink, uint64_t *ret_len, int64_t *ret_mtime) {
        _cleanup_buf_ struct buf url = BUF_INIT(0);
        int r = buf_printf(&url, "%s/%s", s->endpoint, s->bucket);
        if (!r && key)
                r = buf_putc(&url, '/') < 0 ? -ENOMEM : encode(&url, key, true);
        if (!r && query && *query)
                r = buf_printf(&url, "?%s", query);
        if (r < 0 || !buf_cstr(&url))
                return fail(s, -ENOMEM, "out of memory for a URL");
        /* Not "Expect:" to drop 100-continue: curl 7.88 signs the emptied header, and the
         * server answers SignatureDoesNotMatch (found with Swift's s3api). */
        struct curl_slist *hdr = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (!hdr)
                return fail(s, -ENOMEM, "out of memory for headers");
        int ret = -EIO;
        unsigned backoff = S3_BACKOFF_FIRST_MS;
        for (unsigned attempt = 0;; attempt++) {
                CURL *h = s->h;
                curl_easy_reset(h);
                if (body)
                        body->off = 0;
                if (sink) {
                        if (sink->b)
                                buf_reset(sink->b);
                        if (sink->fd >= 0 && (ftruncate(sink->fd, sink->base) < 0 || lseek(sink->fd, sink->base, SEEK_SET) < 0)) {
                                ret = fail(s, -errno, "cannot rewind the file for %s: %m", key ? key : s->bucket);
                                break;
                        }
                        buf_reset(&sink->errbody);
                        sink->n = 0;
                        sink->too_big = false;
                        sink->werr = 0;
                        sink->h = h;
                }
                curl_easy_setopt(h, CURLOPT_URL, url.data);
                curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
                curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
                curl_easy_setopt(h, CURLOPT_USERNAME, s->access);
                curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret);
                curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
                curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
                curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(s->timeout_ms, 5000u));
                curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 300L);
#if LIBCURL_VERSION_NUM >= 0x075500
                curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
                if (strcmp(method, "HEAD") == 0)
                        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
                if (ret_mtime)
                        curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
                else if (strcmp(method, "PUT") == 0) {
                        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
                        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
                        curl_easy_setopt(h, CURLOPT_READDATA, body);
                        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)(body ? body->size : 0));
                } else if (strcmp(method, "GET") != 0)
                        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
                struct s3_sink discard = { .fd = -1, .errbody = BUF_INIT(0), .h = h };
                struct s3_sink *k = sink ? sink : &discard;
                curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
                curl_easy_setopt(h, CURLOPT_WRITEDATA, k);
                CURLcode rc = curl_easy_perform(h);
                long code = 0;
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
                bool again = false;
                if (rc == CURLE_OK && code >= 500) {
                        ret = fail(s, -EIO, "%s %s: HTTP %ld", method, url.data, code);
                        again = true;
                } else if (rc == CURLE_OK) {
                        ret = (int)code;
                        if (ret_len) {
                                curl_off_t cl = -1;
                                curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                                *ret_len = cl < 0 ? 0 : (uint64_t)cl;
                        }
                        if (ret_mtime) {
                                curl_off_t ft = -1;
                                curl_easy_getinfo(h, CURLINFO_FILETIME_T, &ft);
                                *ret_mtime = ft < 0 ? 0 : (int64_t)ft;
                        }
                } else if (k->too_big) {
                        ret = fail(s, -EFBIG, "%s is larger than %zu bytes", key ? key : s->bucket, k->max);
                } else if (k->werr) {
                        ret = fail(s, k->werr, "writing %s: %s", key ? key : s->bucket, strerror(-k->werr));
                } else {
                        ret = fail(s, rc == CURLE_COULDNT_CONNECT ? -ECONNREFUSED : rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO,
                                   "%s %s: %s", method, url.data, curl_easy_strerror(rc));
                        again = retryable(rc);
                }
                if (ret >= 300 && k->errbody.len && buf_cstr(&k->errbody)) {
                        size_t cl = 0;
                        const char *c = xml_find(k->errbody.data, k->errbody.data + k->errbody.len, "Code", &cl);
                        fail(s, -EIO, "%s %s: HTTP %d %.*s", method, url.data, ret, c ? (int)MIN(cl, 64u) : 0, c ? c : "");
                } else if (ret >= 300) {
                        fail(s, -EIO, "%s %s: HTTP %d", method, url.data, ret);
                }
                buf_free(&discard.errbody);
                if (!again || attempt >= s->retries)
                        break;
                sleep_ms(backoff);
                backoff = MIN(backoff * 2, S3_BACKOFF_MAX_MS);
        }
        curl_slist_free_all(hdr);
        return ret;
}

/* A status to an errno: the message is request()'s. */
static int status_errno(int st) {
        if (st < 0)
                return st;
        if (st >= 200 && st < 300)
                return 0;
        return st == 404 ? -ENOENT : st == 403 ? -EACCES : -EIO;
}

int s3_bucket_create(struct s3 *s) {
        struct s3_sink k = { .fd = -1, .errbody = BUF_INIT(0) };
        int st = request(s, "PUT", NULL, NULL, &(struct s3_body){ .fd = -1 }, &k, NULL, NULL);
        bool ours = st == 409 && k.errbody.len && buf_cstr(&k.errbody) && strstr(k.errbody.data, "BucketAlreadyOwnedByYou");
        buf_free(&k.errbody);
        return ours ? 0 : status_errno(st);
}

int s3_put(struct s3 *s, const char *key, const void *data, size_t n) {
        int r = key_check(s, key);
        if (r < 0)
                return r;
        if (!data && n)
                return fail(s, -EINVAL, "no data");
        struct s3_body b = { .data = data ? data : (const uint8_t *)"", .fd = -1, .size = n };
        return status_errno(request(s, "PUT", key, NULL, &b, NULL, NULL, NULL));
}

int s3_put_fd(struct s3 *s, const char *key, int fd) {
        int r = key_check(s, key);
        if (r < 0)
                return r;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail(s, -errno, "fstat: %m");
        if (!S_ISREG(st.st_mode))
                return fail(s, -EINVAL, "s3_put_fd takes a regular file");
        struct s3_body b = { .fd = fd, .size = (uint64_t)st.st_size };
        return status_errno(request(s, "PUT", key, NULL, &b, NULL, NULL, NULL));
}

int s3_get(struct s3 *s, const char *key, size_t max, void **ret_data, size_t *ret_n) {
        int r = key_check(s, key);
        if (r < 0)
                return r;
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct s3_sink k = { .b = &b, .max = max, .fd = -1, .errbody = BUF_INIT(0) };
        r = status_errno(request(s, "GET", key, NULL, NULL, &k, NULL, NULL));
        buf_free(&k.errbody);
        if (r < 0)
                return r;
        if (!buf_cstr(&b))
                return fail(s, -ENOMEM, "out of memory");
        *ret_n = b.len;
        *ret_data = b.data;
        b = BUF_INIT(0);
        return 0;
}

int s3_get_fd(struct s3 *s, const char *key, int fd, uint64_t *ret_n) {
        int r = key_check(s, key);
        if (r < 0)
                return r;
        off_t base = lseek(fd, 0, SEEK_CUR);
        if (base < 0)
                return fail(s, -errno, "lseek: %m");
        struct s3_sink k = { .fd = fd, .base = base, .errbody = BUF_INIT(0) };
        r = status_errno(request(s, "GET", key, NULL, NULL, &k, NULL, NULL));
        buf_free(&k.errbody);
        if (r < 0) {
                if (ftruncate(fd, base) < 0) {
                        /* the request's error is the one to report */
                }
                return r;
        }
        if (ret_n)
                *ret_n = k.n;
        return 0;
}

int s3_head_mtime(struct s3 *s, const char *key, uint64_t *ret_size, int64_t *ret_mtime) {
        int r = key_check(s, key);
        if (r < 0)
                return r;
        uint64_t n = 0;
        int64_t t = 0;
        r = status_errno(request(s, "HEAD", key, NULL, NULL, NULL, &n, &t));
        if (r == 0 && ret_size)
                *ret_size = n;
        if (r == 0 && ret_mtime)
                *ret_mtime = t;
        return r;
}

int s3_head(struct s3 *s, const char *key, uint64_t *ret_size) { return s3_head_mtime(s, key, ret_size, NULL); }

int s3_delete(struct s3 *s, const char *key) {
        int r = key_check(s, key);
        return r < 0 ? r : status_errno(request(s, "DELETE", key, NULL, NULL, NULL, NULL, NULL));
}

/* ListObjectsV2's LastModified, "2026-12-04T02:25:20.000Z": seconds since the epoch, or 0. */
static int64_t parse_mtime(const char *v, size_t n) {
        char tmp[40];
        if (!v || n == 0 || n >= sizeof tmp)
                return 0;
        memcpy(tmp, v, n);
        tmp[n] = '\0';
        struct tm tm = { 0 };
        char *end = strptime(tmp, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!end)
                return 0;
        time_t t = timegm(&tm);
        return t < 0 ? 0 : (int64_t)t;
}

int s3_list(struct s3 *s, const char *prefix, unsigned page_size,
            int (*fn)(const char *key, uint64_t size, int64_t mtime, void *ud), void *ud) {
        if (!fn || page_size > S3_LIST_PAGE_MAX)
                return fail(s, -EINVAL, "s3_list: a callback and 0..%u keys a page", S3_LIST_PAGE_MAX);
        if (!prefix)
                prefix = "";
        _cleanup_buf_ struct buf token = BUF_INIT(0), page = BUF_INIT(S3_LIST_REPLY_MAX), key = BUF_INIT(0),
                                 q = BUF_INIT(0);
        for (;;) {
                buf_reset(&q);
                int r = 0;
                /* sorted by name: continuation-token < list-type < max-keys < prefix */
                if (token.len)
                        r = buf_puts(&q, "continuation-token=") < 0 || encode(&q, token.data, false) < 0 ? -ENOMEM : 0;
                if (!r)
                        r = buf_printf(&q, "%slist-type=2&max-keys=%u&prefix=", q.len ? "&" : "",
                                       page_size ? page_size : S3_LIST_PAGE_MAX);
                if (!r)
                        r = encode(&q, prefix, false);
                if (r < 0 || !buf_cstr(&q))
                        return fail(s, -ENOMEM, "out of memory");
                struct s3_sink k = { .b = &page, .max = S3_LIST_REPLY_MAX, .fd = -1, .errbody = BUF_INIT(0) };
                r = status_errno(request(s, "GET", NULL, q.data, NULL, &k, NULL, NULL));
                buf_free(&k.errbody);
                if (r < 0)
                        return r;
                if (!buf_cstr(&page))
                        return fail(s, -ENOMEM, "out of memory");
                const char *end = page.data + page.len;
                size_t n;
                for (const char *c = page.data; (c = xml_find(c, end, "Contents", &n));) {
                        const char *cend = c + n;
                        size_t kl = 0, sl = 0, ml = 0;
                        const char *kv = xml_find(c, cend, "Key", &kl), *sv = xml_find(c, cend, "Size", &sl),
                                   *mv = xml_find(c, cend, "LastModified", &ml);
                        if (!kv || xml_text(kv, kl, &key) < 0)
                                return fail(s, -EIO, "a list answer with a bad <Key>");
                        uint64_t size = 0;
                        for (size_t i = 0; sv && i < sl && sv[i] >= '0' && sv[i] <= '9' && i < 20; i++)
                                size = size * 10 + (uint64_t)(sv[i] - '0');
                        if ((r = fn(key.data, size, parse_mtime(mv, ml), ud)) != 0)
                                return r;
                        c = cend;
                }
                size_t tl = 0, nl = 0;
                const char *t = xml_find(page.data, end, "IsTruncated", &tl);
                if (!t || tl != 4 || strncmp(t, "true", 4) != 0)
                        return 0;
                const char *nt = xml_find(page.data, end, "NextContinuationToken", &nl);
                if (!nt || !nl || xml_text(nt, nl, &token) < 0)
                        return fail(s, -EIO, "a truncated list answer without a NextContinuationToken");
        }
}
