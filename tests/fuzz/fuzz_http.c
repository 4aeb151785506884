/* Fuzz target: spaced's incremental HTTP/1.1 request parser (src/daemon/http.c), the
 * first code every API byte reaches. The input is one connection's byte stream; it is
 * parsed once in one piece and once split at pseudo-random points (as reads arrive).
 * Properties: no crash or leak; every feed makes progress and consumes at most what it
 * was given; heads and bodies stay within their limits; both parses report the same
 * requests (head fields, body bytes, end) and the same error; the helpers a handler
 * calls on a parsed head (header lookup, query decoding) are safe on whatever it holds. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/buf.h"
#include "daemon/http.h"
#include "fuzz.h"

/* More than a fuzz input can ever hold: a bound on the events one input can cause. */
#define FUZZ_HTTP_MAX_EVENTS 100000u
/* The body limit a handler sets for odd-numbered requests (a JSON route's, scaled down
 * so a 4 KiB input can cross it). */
#define FUZZ_HTTP_SMALL_BODY 300u
/* What one parse of a 4 KiB input can report, with room to spare. */
#define FUZZ_HTTP_MAX_TRANSCRIPT (8u << 20)

/* Everything a parse reported, flattened into one transcript to compare. */
struct transcript {
        struct buf b;
        size_t body_run; /* body bytes since the last head (adjacent BODY events merge) */
};

static void tr_flush_body(struct transcript *t) {
        if (t->body_run) {
                FUZZ_CHECK(buf_printf(&t->b, "body %zu\n", t->body_run) == 0);
                t->body_run = 0;
        }
}

/* Reads the head the way a route handler would and records what it saw. */
static void tr_head(struct transcript *t, const struct http_parser *p, unsigned nreq) {
        const struct http_request *r = http_parser_request(p);
        FUZZ_CHECK(r->method && r->target && r->path && r->query);
        FUZZ_CHECK(strlen(r->method) < HTTP_MAX_METHOD);
        FUZZ_CHECK(r->target[0] == '/' && r->path[0] == '/');
        FUZZ_CHECK(strlen(r->target) < HTTP_MAX_HEAD && strlen(r->path) <= strlen(r->target));
        FUZZ_CHECK(r->version_minor == 0 || r->version_minor == 1);
        FUZZ_CHECK(r->n_headers <= HTTP_MAX_HEADERS);
        FUZZ_CHECK(!(r->chunked && r->has_length));
        FUZZ_CHECK(p->head_len <= HTTP_MAX_HEAD);
        FUZZ_CHECK(buf_printf(&t->b, "head %u %s %s|%s|%s v%d h%zu c%d l%d:%llu k%d e%d\n", nreq, r->method, r->target,
                              r->path, r->query, r->version_minor, r->n_headers, r->chunked, r->has_length,
                              (unsigned long long)r->content_length, r->keep_alive, r->expect_continue) == 0);
        for (size_t i = 0; i < r->n_headers; i++) {
                const char *v = r->headers[i].value;
                FUZZ_CHECK(r->headers[i].name[0] != '\0');
                FUZZ_CHECK(v[0] != ' ' && v[0] != '\t');
                FUZZ_CHECK(buf_printf(&t->b, " %s=%s\n", r->headers[i].name, v) == 0);
                /* the first field of a name wins */
                const char *first = http_request_header(r, r->headers[i].name);
                FUZZ_CHECK(first != NULL);
        }
        static const char *const keys[] = { "path", "recursive", "offset", "mode", "x" };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                char out[256];
                int k = http_query_get(r->query, keys[i], out, sizeof out);
                FUZZ_CHECK(k == 0 || k == -ENOENT || k == -EINVAL || k == -ENAMETOOLONG);
                if (k == 0)
                        FUZZ_CHECK(strlen(out) < sizeof out);
                FUZZ_CHECK(buf_printf(&t->b, " q.%s=%d%s\n", keys[i], k, k == 0 ? out : "") == 0);
        }
        char tiny[4];
        int k = http_query_get(r->query, "path", tiny, sizeof tiny);
        FUZZ_CHECK(k == 0 || k == -ENOENT || k == -EINVAL || k == -ENAMETOOLONG);
}

/* Runs the parser over data, handing it pieces as cut says (1..97 bytes each, cyclically),
 * or step bytes each when step > 0, or everything in one piece. */
static void parse(const uint8_t *data, size_t size, const uint8_t *cut, size_t ncut, size_t step,
                  struct transcript *t) {
        struct http_parser *p = malloc(sizeof *p);
        FUZZ_CHECK(p != NULL);
        http_parser_init(p);
        size_t off = 0, c = 0;
        unsigned nreq = 0, events = 0;
        uint64_t body_in_req = 0, limit = HTTP_MAX_UPLOAD;
        bool failed = false;
        while (off < size && !failed) {
                size_t piece = size - off;
                if (step)
                        piece = MIN(piece, step);
                else if (ncut) {
                        size_t want = (size_t)cut[c++ % ncut] % 97 + 1;
                        piece = MIN(piece, want);
                }
                const char *in = (const char *)data + off;
                size_t left = piece;
                for (;;) {
                        FUZZ_CHECK(++events < FUZZ_HTTP_MAX_EVENTS);
                        struct http_event ev;
                        size_t used = http_parser_feed(p, in, left, &ev);
                        FUZZ_CHECK(used <= left);
                        in += used;
                        left -= used;
                        if (ev.type == HTTP_EV_NEED_MORE) {
                                /* only when everything given was taken */
                                FUZZ_CHECK(left == 0);
                                break;
                        }
                        if (ev.type == HTTP_EV_ERROR) {
                                FUZZ_CHECK(ev.status == 400 || ev.status == 413 || ev.status == 417 || ev.status == 431);
                                FUZZ_CHECK(ev.message != NULL);
                                tr_flush_body(t);
                                FUZZ_CHECK(buf_printf(&t->b, "error %d %s\n", ev.status, ev.message) == 0);
                                /* the parser stays failed */
                                struct http_event again;
                                FUZZ_CHECK(http_parser_feed(p, "x", 1, &again) == 0 && again.type == HTTP_EV_ERROR &&
                                           again.status == ev.status);
                                failed = true;
                                break;
                        }
                        if (ev.type == HTTP_EV_HEAD) {
                                tr_flush_body(t);
                                tr_head(t, p, nreq);
                                body_in_req = 0;
                                /* what a handler does: a small limit for some routes */
                                limit = nreq % 2 ? FUZZ_HTTP_SMALL_BODY : HTTP_MAX_UPLOAD;
                                int k = http_parser_set_body_limit(p, limit);
                                const struct http_request *r = http_parser_request(p);
                                FUZZ_CHECK(k == 0 || (k == -EFBIG && r->has_length && r->content_length > limit));
                                FUZZ_CHECK(buf_printf(&t->b, "limit %d\n", k) == 0);
                                if (k < 0)
                                        limit = HTTP_MAX_UPLOAD; /* refused: the old limit holds */
                        } else if (ev.type == HTTP_EV_BODY) {
                                /* a slice of what this call consumed, ending where it stopped */
                                FUZZ_CHECK(ev.len > 0 && ev.len <= used && ev.data + ev.len == in);
                                FUZZ_CHECK(http_parser_in_body(p) || p->state == HTTP_S_END);
                                body_in_req += ev.len;
                                FUZZ_CHECK(body_in_req <= limit);
                                t->body_run += ev.len;
                        } else {
                                FUZZ_CHECK(ev.type == HTTP_EV_END);
                                FUZZ_CHECK(!http_parser_in_body(p));
                                tr_flush_body(t);
                                FUZZ_CHECK(buf_printf(&t->b, "end %u\n", nreq) == 0);
                                nreq++;
                        }
                        /* the head buffer never overflows, whatever came in */
                        FUZZ_CHECK(p->head_len <= HTTP_MAX_HEAD);
                }
                off += piece;
        }
        /* a request without body ends without more input */
        if (!failed) {
                struct http_event ev;
                (void)http_parser_feed(p, "", 0, &ev);
                if (ev.type == HTTP_EV_END) {
                        tr_flush_body(t);
                        FUZZ_CHECK(buf_printf(&t->b, "end %u\n", nreq) == 0);
                }
        }
        tr_flush_body(t);
        free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* The first 16 bytes (when there are more) choose the split points, reused cyclically
         * by a tiny generator so long inputs get cut everywhere too. */
        uint8_t cut[1024];
        size_t ncut = 0;
        if (size > 16) {
                uint32_t x = 2166136261u;
                for (size_t i = 0; i < 16; i++)
                        x = (x ^ data[i]) * 16777619u;
                data += 16, size -= 16;
                for (ncut = 0; ncut < sizeof cut; ncut++) { /* xorshift32 */
                        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                        cut[ncut] = (uint8_t)x;
                }
        }
        /* an exact-size copy, so a read past the end trips ASan */
        uint8_t *copy = malloc(size ? size : 1);
        FUZZ_CHECK(copy != NULL);
        memcpy(copy, data, size);

        struct transcript one = { .b = BUF_INIT(FUZZ_HTTP_MAX_TRANSCRIPT) }, split = { .b = BUF_INIT(FUZZ_HTTP_MAX_TRANSCRIPT) },
                          bytewise = { .b = BUF_INIT(FUZZ_HTTP_MAX_TRANSCRIPT) };
        parse(copy, size, NULL, 0, 0, &one);
        parse(copy, size, cut, ncut, ncut ? 0 : 7, &split);
        parse(copy, size, NULL, 0, 1, &bytewise);
        if (strcmp(buf_cstr(&one.b), buf_cstr(&split.b)) || strcmp(buf_cstr(&one.b), buf_cstr(&bytewise.b))) {
                fprintf(stderr, "one piece:\n%.*s\nsplit:\n%.*s\nbyte by byte:\n%.*s\n", (int)one.b.len, one.b.data,
                        (int)split.b.len, split.b.data, (int)bytewise.b.len, bytewise.b.data);
                FUZZ_CHECK(!"the split parse disagrees with the one-piece parse");
        }
        buf_free(&one.b);
        buf_free(&split.b);
        buf_free(&bytewise.b);
        free(copy);
        return 0;
}
