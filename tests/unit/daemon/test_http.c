/* Unit tests of spaced's HTTP/1.1 request parser (src/daemon/http.c): every byte split,
 * pipelining, chunked bodies, size limits, malformed input and percent-decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "daemon/http.h"

/* What one request looked like to the parser, collected from its events. */
struct seen {
        char method[16];
        char path[256];
        char query[256];
        char body[8192];
        size_t body_len;
        bool keep_alive;
        int error;
};

/* Feeds input in pieces of at most step bytes (the split points move with start), and
 * collects up to max requests. Returns the number of completed requests. */
static int run(const char *in, size_t len, size_t first, size_t step, struct seen *out, int max, uint64_t limit) {
        static struct http_parser p;
        http_parser_init(&p);
        int n = 0;
        size_t off = 0;
        bool is_first = true;
        memset(out, 0, sizeof *out * (size_t)max);
        do {
                size_t piece = is_first ? first : step;
                is_first = false;
                if (piece > len - off)
                        piece = len - off;
                const char *d = in + off;
                size_t left = piece;
                off += piece;
                for (;;) {
                        struct http_event ev;
                        size_t used = http_parser_feed(&p, d, left, &ev);
                        assert_true(used <= left);
                        d += used;
                        left -= used;
                        if (ev.type == HTTP_EV_NEED_MORE) {
                                assert_int_equal(left, 0);
                                break;
                        }
                        if (n >= max)
                                return n;
                        struct seen *s = &out[n];
                        if (ev.type == HTTP_EV_ERROR) {
                                s->error = ev.status;
                                return n;
                        }
                        if (ev.type == HTTP_EV_HEAD) {
                                const struct http_request *r = http_parser_request(&p);
                                snprintf(s->method, sizeof s->method, "%s", r->method);
                                snprintf(s->path, sizeof s->path, "%s", r->path);
                                snprintf(s->query, sizeof s->query, "%s", r->query);
                                s->keep_alive = r->keep_alive;
                                if (limit && http_parser_set_body_limit(&p, limit) < 0) {
                                        s->error = 413;
                                        return n;
                                }
                        } else if (ev.type == HTTP_EV_BODY) {
                                assert_true(ev.len > 0);
                                assert_true(s->body_len + ev.len <= sizeof s->body);
                                memcpy(s->body + s->body_len, ev.data, ev.len);
                                s->body_len += ev.len;
                        } else if (ev.type == HTTP_EV_END) {
                                n++;
                        }
                }
        } while (off < len);
        return n;
}

static const char PIPELINE[] =
        "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
        "POST /v1/sessions?x=1 HTTP/1.1\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello"
        "PUT /v1/sessions/ses_1/files?path=%2Froot%2Fa HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n10;ext=1\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n"
        "DELETE /v1/sessions/ses_%41 HTTP/1.1\r\nConnection: close\r\n\r\n";

static void check_pipeline(const struct seen *s, int n) {
        assert_int_equal(n, 4);
        assert_string_equal(s[0].method, "GET");
        assert_string_equal(s[0].path, "/v1/health");
        assert_int_equal(s[0].body_len, 0);
        assert_true(s[0].keep_alive);
        assert_string_equal(s[1].method, "POST");
        assert_string_equal(s[1].query, "x=1");
        assert_int_equal(s[1].body_len, 5);
        assert_memory_equal(s[1].body, "hello", 5);
        assert_string_equal(s[2].method, "PUT");
        assert_string_equal(s[2].path, "/v1/sessions/ses_1/files");
        assert_string_equal(s[2].query, "path=%2Froot%2Fa");
        assert_int_equal(s[2].body_len, 19);
        assert_memory_equal(s[2].body, "abc0123456789abcdef", 19);
        assert_string_equal(s[3].path, "/v1/sessions/ses_A");
        assert_false(s[3].keep_alive);
}

static void test_pipeline_whole(void **state) {
        (void)state;
        printf("check: four pipelined requests (length, chunked, no body) fed at once\n");
        struct seen s[5];
        check_pipeline(s, run(PIPELINE, strlen(PIPELINE), strlen(PIPELINE), 1, s, 5, 0));
}

static void test_split_every_byte(void **state) {
        (void)state;
        printf("check: the same stream split at every byte boundary, and byte by byte\n");
        size_t len = strlen(PIPELINE);
        static struct seen s[5];
        for (size_t first = 0; first <= len; first++)
                check_pipeline(s, run(PIPELINE, len, first, len, s, 5, 0));
        check_pipeline(s, run(PIPELINE, len, 1, 1, s, 5, 0));
        for (size_t step = 2; step < 40; step++)
                check_pipeline(s, run(PIPELINE, len, step, step, s, 5, 0));
}

static int one_error(const char *in) {
        struct seen s[2];
        int n = run(in, strlen(in), strlen(in), 1, s, 2, 0);
        return n < 2 ? s[n].error : -1;
}

static void test_malformed(void **state) {
        (void)state;
        printf("check: malformed request lines and headers give 400\n");
        const char *bad[] = {
                "GET\r\n\r\n",
                "GET /x\r\n\r\n",
                "GET  /x HTTP/1.1\r\n\r\n",
                "GET /x HTTP/2.0\r\n\r\n",
                "GET x HTTP/1.1\r\n\r\n",
                "G(T /x HTTP/1.1\r\n\r\n",
                "GET /x HTTP/1.1\nHost: a\n\n",
                "GET /x HTTP/1.1\r\nNo colon here\r\n\r\n",
                "GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n",
                "GET /x HTTP/1.1\r\nA: b\r\n continued\r\n\r\n",
                "POST /x HTTP/1.1\r\nContent-Length: 12a\r\n\r\n",
                "POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
                "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
                "GET /a%zz HTTP/1.1\r\n\r\n",
                "GET /a%2 HTTP/1.1\r\n\r\n",
                "GET /a%00b HTTP/1.1\r\n\r\n",
                "GET /a\x01 HTTP/1.1\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                int st = one_error(bad[i]);
                if (st != 400)
                        printf("  input %zu gave %d\n", i, st);
                assert_int_equal(st, 400);
        }
}

static void test_oversize_head(void **state) {
        (void)state;
        printf("check: a head over %u bytes gives 431, even without a line end\n", HTTP_MAX_HEAD);
        static char big[HTTP_MAX_HEAD + 200];
        int n = snprintf(big, sizeof big, "GET /x HTTP/1.1\r\nX-Big: ");
        memset(big + n, 'a', sizeof big - (size_t)n - 1);
        big[sizeof big - 1] = '\0';
        assert_int_equal(one_error(big), 431);
        memcpy(big, "GET /", 5);
        memset(big + 5, 'b', sizeof big - 6);
        assert_int_equal(one_error(big), 431);

        printf("check: more than %d header fields give 431\n", HTTP_MAX_HEADERS);
        struct buf b = BUF_INIT(0);
        buf_puts(&b, "GET /x HTTP/1.1\r\n");
        for (int i = 0; i <= HTTP_MAX_HEADERS; i++)
                buf_printf(&b, "H%d: v\r\n", i);
        buf_puts(&b, "\r\n");
        assert_int_equal(one_error(buf_cstr(&b)), 431);
        buf_free(&b);
}

static void test_oversize_body(void **state) {
        (void)state;
        struct seen s[2];
        printf("check: Content-Length over the per-request limit is refused (413)\n");
        const char *req = "POST /x HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world";
        assert_int_equal(run(req, strlen(req), strlen(req), 1, s, 1, 10), 0);
        assert_int_equal(s[0].error, 413);
        assert_int_equal(run(req, strlen(req), strlen(req), 1, s, 1, 11), 1);

        printf("check: Content-Length over the upload limit gives 413 without a set limit\n");
        char hdr[128];
        snprintf(hdr, sizeof hdr, "PUT /x HTTP/1.1\r\nContent-Length: %llu\r\n\r\nab",
                 (unsigned long long)HTTP_MAX_UPLOAD + 1);
        assert_int_equal(run(hdr, strlen(hdr), strlen(hdr), 1, s, 1, 0), 0);
        assert_int_equal(s[0].error, 413);
        assert_int_equal(one_error("PUT /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 413);

        printf("check: a chunked body that grows over the limit gives 413\n");
        const char *ch = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nghijkl\r\n0\r\n\r\n";
        assert_int_equal(run(ch, strlen(ch), strlen(ch), 1, s, 1, 11), 0);
        assert_int_equal(s[0].error, 413);
        assert_int_equal(run(ch, strlen(ch), strlen(ch), 1, s, 1, 12), 1);
        assert_int_equal(s[0].body_len, 12);
}

static void test_keep_alive_rules(void **state) {
        (void)state;
        printf("check: HTTP/1.0 closes unless keep-alive; 1.1 keeps alive unless close\n");
        struct seen s[2];
        const char *a = "GET /x HTTP/1.0\r\n\r\n";
        assert_int_equal(run(a, strlen(a), strlen(a), 1, s, 1, 0), 1);
        assert_false(s[0].keep_alive);
        const char *b = "GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
        assert_int_equal(run(b, strlen(b), strlen(b), 1, s, 1, 0), 1);
        assert_true(s[0].keep_alive);
        const char *c = "GET /x HTTP/1.1\r\nConnection: foo, close\r\n\r\n";
        assert_int_equal(run(c, strlen(c), strlen(c), 1, s, 1, 0), 1);
        assert_false(s[0].keep_alive);
        printf("check: leading empty lines before a request are skipped\n");
        const char *d = "\r\n\r\nGET /y HTTP/1.1\r\n\r\n";
        assert_int_equal(run(d, strlen(d), strlen(d), 1, s, 1, 0), 1);
        assert_string_equal(s[0].path, "/y");
}

static void test_headers(void **state) {
        (void)state;
        printf("check: header lookup is case-insensitive and values are trimmed\n");
        static struct http_parser p;
        http_parser_init(&p);
        const char *in = "GET /x HTTP/1.1\r\ncontent-TYPE:   text/plain  \r\nExpect: 100-continue\r\n\r\n";
        struct http_event ev;
        size_t used = http_parser_feed(&p, in, strlen(in), &ev);
        assert_int_equal(ev.type, HTTP_EV_HEAD);
        assert_int_equal(used, strlen(in));
        const struct http_request *r = http_parser_request(&p);
        assert_string_equal(http_request_header(r, "Content-Type"), "text/plain");
        assert_null(http_request_header(r, "Content-Length"));
        assert_true(r->expect_continue);
        assert_true(http_parser_in_body(&p) == false);
        used = http_parser_feed(&p, NULL, 0, &ev);
        assert_int_equal(ev.type, HTTP_EV_END);
        used = http_parser_feed(&p, NULL, 0, &ev);
        assert_int_equal(ev.type, HTTP_EV_NEED_MORE);
}

static void test_pct_decode(void **state) {
        (void)state;
        printf("check: percent-decoding of query values, '+' as space, bad escapes refused\n");
        char out[64];
        assert_int_equal(http_query_get("path=%2Froot%2Fa%20b.txt&mode=0644", "path", out, sizeof out), 0);
        assert_string_equal(out, "/root/a b.txt");
        assert_int_equal(http_query_get("path=%2Froot&mode=0644", "mode", out, sizeof out), 0);
        assert_string_equal(out, "0644");
        assert_int_equal(http_query_get("a=1&follow&b=2", "follow", out, sizeof out), 0);
        assert_string_equal(out, "");
        assert_int_equal(http_query_get("q=a+b", "q", out, sizeof out), 0);
        assert_string_equal(out, "a b");
        assert_int_equal(http_query_get("p%61th=x", "path", out, sizeof out), 0);
        assert_string_equal(out, "x");
        assert_int_equal(http_query_get("a=1", "b", out, sizeof out), -ENOENT);
        assert_int_equal(http_query_get("", "b", out, sizeof out), -ENOENT);
        assert_int_equal(http_query_get("a=%4", "a", out, sizeof out), -EINVAL);
        assert_int_equal(http_query_get("a=%g1", "a", out, sizeof out), -EINVAL);
        assert_int_equal(http_query_get("a=%00", "a", out, sizeof out), -EINVAL);
        assert_int_equal(http_query_get("a=%", "a", out, sizeof out), -EINVAL);
        assert_int_equal(http_query_get("a=0123456789", "a", out, 5), -ENAMETOOLONG);
        size_t n;
        assert_int_equal(http_pct_decode("%41%42c", 7, false, out, sizeof out, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(out, "ABc");
}

static void test_response(void **state) {
        (void)state;
        printf("check: response heads and chunk framing\n");
        struct buf b = BUF_INIT(0);
        assert_int_equal(http_response_head(&b, 404, "application/json", 7, true, NULL), 0);
        assert_string_equal(buf_cstr(&b), "HTTP/1.1 404 Not Found\r\nServer: spaced\r\nContent-Type: application/json\r\n"
                                          "Content-Length: 7\r\n\r\n");
        buf_reset(&b);
        assert_int_equal(http_response_head(&b, 200, "application/x-ndjson", -1, false, NULL), 0);
        assert_non_null(strstr(buf_cstr(&b), "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"));
        buf_reset(&b);
        http_chunk_append(&b, "hello world, this is 26 by", 26);
        http_chunk_append(&b, NULL, 0);
        assert_string_equal(buf_cstr(&b), "1a\r\nhello world, this is 26 by\r\n0\r\n\r\n");
        buf_free(&b);
        assert_string_equal(http_status_code_name(413), "too_large");
        assert_string_equal(http_status_code_name(431), "too_large");
        assert_string_equal(http_status_code_name(503), "unavailable");
        assert_string_equal(http_status_code_name(422), "exec_failed");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pipeline_whole), cmocka_unit_test(test_split_every_byte),
                cmocka_unit_test(test_malformed),      cmocka_unit_test(test_oversize_head),
                cmocka_unit_test(test_oversize_body),  cmocka_unit_test(test_keep_alive_rules),
                cmocka_unit_test(test_headers),        cmocka_unit_test(test_pct_decode),
                cmocka_unit_test(test_response),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
