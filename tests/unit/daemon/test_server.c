/* Unit tests of spaced's HTTP server (server.c + routes + handlers that need no sandbox),
 * run in-process: a socketpair stands in for a client, the test turns the event loop.
 * Checks answers, JSON error bodies, limits, pipelining, connection handling, and bearer
 * authentication on TCP and the Unix socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "daemon/auth.h"
#include "daemon/e2b/e2b.h"
#include "daemon/spaced.h"
#include "daemon/http.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "runtime/runtime.h"

static const struct runtime_ops fake_rt = { .name = "fake" };

struct fixture {
        struct daemon d;
        int client;
        char tmp[64];
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        snprintf(f->tmp, sizeof f->tmp, "/tmp/spaced-unit.XXXXXX");
        assert_non_null(mkdtemp(f->tmp));
        f->d.data_dir = f->tmp;
        f->d.rt = &fake_rt;
        f->d.router = &api_router;
        f->d.unix_src.fd = f->d.tcp_src.fd = f->d.e2b_src.fd = f->d.accept_src.fd = -1;
        assert_int_equal(loop_new(&f->d.loop), 0);
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        assert_int_equal(srv_conn_new(&f->d, sv[0]), 0);
        f->client = sv[1];
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        srv_close_all(&f->d);
        loop_run_once(f->d.loop, 0);
        f->d.loop = loop_free(f->d.loop);
        if (f->client >= 0)
                close(f->client);
        rmdir(f->tmp);
        free(f);
        return 0;
}

/* Sends req (turning the loop while the socket is full), then collects what the server
 * answers until it has been quiet for a while. Returns the bytes read; *closed tells
 * whether the server closed the connection. */
static size_t exchange(struct fixture *f, const char *req, size_t len, char *out, size_t cap, bool *closed) {
        size_t sent = 0, got = 0;
        bool eof = false;
        int quiet = 0;
        while (quiet < 5) {
                if (sent < len) {
                        ssize_t n = send(f->client, req + sent, len - sent, MSG_NOSIGNAL);
                        if (n > 0)
                                sent += (size_t)n;
                        else if (n < 0 && errno != EAGAIN)
                                sent = len; /* server closed early: stop sending */
                }
                loop_run_once(f->d.loop, 10);
                bool progress = false;
                for (;;) {
                        if (got + 1 >= cap)
                                break;
                        ssize_t n = recv(f->client, out + got, cap - 1 - got, MSG_DONTWAIT);
                        if (n > 0) {
                                got += (size_t)n;
                                progress = true;
                                continue;
                        }
                        if (n == 0)
                                eof = true;
                        break;
                }
                if (eof && sent >= len)
                        break;
                quiet = progress || sent < len ? 0 : quiet + 1;
        }
        out[got] = '\0';
        if (closed)
                *closed = eof;
        return got;
}

static void send_str(struct fixture *f, const char *req, char *out, size_t cap, bool *closed) {
        exchange(f, req, strlen(req), out, cap, closed);
}

/* The JSON body of the first response in text, parsed. */
static struct json *body_of(const char *resp) {
        const char *b = strstr(resp, "\r\n\r\n");
        assert_non_null(b);
        b += 4;
        const char *e = strchr(b, '\n');
        struct json *j = NULL;
        char err[128];
        int r = json_parse(b, e ? (size_t)(e - b) : strlen(b), &j, err, sizeof err);
        if (r < 0)
                fail_msg("bad JSON body (%s): %s", err, b);
        return j;
}

static void check_error(const char *resp, int status, const char *code) {
        char line[64];
        snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
        if (strncmp(resp, line, strlen(line)) != 0)
                fail_msg("expected status %d, got: %.200s", status, resp);
        assert_non_null(strstr(resp, "Content-Type: application/json\r\n"));
        struct json *j = body_of(resp);
        const struct json *e = json_get(j, "error");
        assert_non_null(e);
        assert_string_equal(json_get_str(e, "code"), code);
        assert_non_null(json_get_str(e, "message"));
        assert_true(strlen(json_get_str(e, "message")) > 0);
        json_free(j);
}

static char resp[1 << 16];

static void test_health_and_pipelining(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: GET /v1/health answers 200 with status ok\n");
        send_str(f, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp, &closed);
        assert_false(closed);
        assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
        struct json *j = body_of(resp);
        assert_string_equal(json_get_str(j, "status"), "ok");
        json_free(j);

        printf("check: three pipelined requests get three answers in order, connection kept\n");
        send_str(f,
                 "GET /v1/%68ealth HTTP/1.1\r\n\r\n"
                 "GET /v1/nope HTTP/1.1\r\n\r\n"
                 "GET /v1/sessions HTTP/1.1\r\n\r\n",
                 resp, sizeof resp, &closed);
        assert_false(closed);
        char *a = strstr(resp, "HTTP/1.1 200");
        char *b = strstr(resp, "HTTP/1.1 404");
        assert_non_null(a);
        assert_non_null(b);
        assert_true(a < b);
        char *c = strstr(b + 1, "HTTP/1.1 200");
        assert_non_null(c);
        assert_non_null(strstr(c, "{\"sessions\":[]}"));
        check_error(b, 404, "not_found");
}

/* The connection as if accepted on --listen, with a meta store holding one token of
 * tenant t1 (written to tok) and one revoked (rev). */
static void tcp_with_tokens(struct fixture *f, char tok[AUTH_TOKEN_LEN + 1], char rev[AUTH_TOKEN_LEN + 1]) {
        char path[128], h[META_HASH_HEX + 1];
        snprintf(path, sizeof path, "%s/meta.db", f->tmp);
        assert_int_equal(meta_open(path, NULL, &f->d.meta), 0);
        assert_int_equal(auth_token_new(tok), 0);
        assert_int_equal(meta_token_hash(tok, h), 0);
        assert_int_equal(meta_token_create(f->d.meta, h, "t1", NULL), 0);
        assert_int_equal(auth_token_new(rev), 0);
        assert_int_equal(meta_token_hash(rev, h), 0);
        assert_int_equal(meta_token_create(f->d.meta, h, "t1", NULL), 0);
        assert_int_equal(meta_token_revoke(f->d.meta, h), 0);
        f->d.conns->tcp = true;
}

static void drop_meta(struct fixture *f) {
        f->d.meta = meta_free(f->d.meta);
        char path[128];
        static const char *const files[] = { "meta.db", "meta.db-wal", "meta.db-shm" };
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s/%s", f->tmp, files[i]);
                unlink(path);
        }
}

static void test_tcp_auth(void **state) {
        struct fixture *f = *state;
        char tok[AUTH_TOKEN_LEN + 1], rev[AUTH_TOKEN_LEN + 1], req[1024];
        bool closed;
        tcp_with_tokens(f, tok, rev);
        printf("check: on TCP, no token is 401 with WWW-Authenticate: Bearer, and the connection stays\n");
        send_str(f, "GET /v1/health HTTP/1.1\r\n\r\n", resp, sizeof resp, &closed);
        check_error(resp, 401, "unauthorized");
        assert_non_null(strstr(resp, "\r\nWWW-Authenticate: Bearer realm=\"space\"\r\n"));
        assert_false(closed);
        printf("check: a route that does not exist is 401 too (nothing is told before authentication)\n");
        send_str(f, "GET /v1/nope HTTP/1.1\r\n\r\n", resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        printf("check: a revoked, a malformed token and the Basic scheme are 401\n");
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", rev);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        send_str(f, "GET /v1/health HTTP/1.1\r\nAuthorization: Bearer spt_nope\r\n\r\n", resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: Basic %s\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        printf("check: the valid token is 200; an unknown session is 404; templates and GC are 403\n");
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: bearer  %s\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
        snprintf(req, sizeof req, "GET /v1/sessions/ses_0123456789abcdef HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 404, "not_found");
        snprintf(req, sizeof req, "POST /v1/gc HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 403, "forbidden");
        snprintf(req, sizeof req, "DELETE /v1/templates/base HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 403, "forbidden");
        printf("check: a 401 before a body was read closes the connection (as every early answer does)\n");
        send_str(f, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", resp, sizeof resp, &closed);
        check_error(resp, 401, "unauthorized");
        assert_true(closed);
        drop_meta(f);
}

static void test_unix_tokens(void **state) {
        struct fixture *f = *state;
        char tok[AUTH_TOKEN_LEN + 1], rev[AUTH_TOKEN_LEN + 1], req[1024];
        tcp_with_tokens(f, tok, rev);
        f->d.conns->tcp = false;
        printf("check: on the Unix socket no token is the operator (200); a revoked one is still 401\n");
        send_str(f, "GET /v1/health HTTP/1.1\r\n\r\n", resp, sizeof resp, NULL);
        assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", rev);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        printf("check: an Authorization header over %d bytes is 401\n", AUTH_HEADER_MAX);
        char big[AUTH_HEADER_MAX + 64];
        memset(big, 'A', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", big);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");
        drop_meta(f);
}

static void test_405(void **state) {
        struct fixture *f = *state;
        printf("check: a known path with a wrong method is 405 with an Allow header\n");
        send_str(f, "DELETE /v1/health HTTP/1.1\r\n\r\n", resp, sizeof resp, NULL);
        check_error(resp, 405, "method_not_allowed");
        assert_non_null(strstr(resp, "Allow: GET\r\n"));
}

static void test_malformed_closes(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: a malformed request line is 400 bad_request, then the server closes\n");
        send_str(f, "GET /v1/health HTTP/9\r\n\r\n", resp, sizeof resp, &closed);
        check_error(resp, 400, "bad_request");
        assert_non_null(strstr(resp, "Connection: close\r\n"));
        assert_true(closed);
        assert_int_equal(f->d.n_conns, 0);
}

static void test_oversize_head(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: a head over 16 KiB is 431 too_large\n");
        size_t n = HTTP_MAX_HEAD + 1024;
        char *big = malloc(n + 1);
        assert_non_null(big);
        memcpy(big, "GET /v1/health HTTP/1.1\r\nX-A: ", 30);
        memset(big + 30, 'a', n - 30);
        big[n] = '\0';
        exchange(f, big, n, resp, sizeof resp, &closed);
        free(big);
        check_error(resp, 431, "too_large");
        assert_true(closed);
}

static void test_oversize_json(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: a JSON body over 1 MiB is 413 too_large (declared length and chunked)\n");
        char head[256];
        snprintf(head, sizeof head, "POST /v1/sessions HTTP/1.1\r\nContent-Length: %u\r\n\r\n{", HTTP_MAX_JSON_BODY + 1);
        send_str(f, head, resp, sizeof resp, &closed);
        check_error(resp, 413, "too_large");
        assert_true(closed);
}

static void test_oversize_json_chunked(void **state) {
        struct fixture *f = *state;
        bool closed;
        size_t chunk = 256 << 10, n_chunks = 5;
        size_t total = 128 + n_chunks * (chunk + 16);
        char *req = malloc(total);
        assert_non_null(req);
        int o = snprintf(req, total, "POST /v1/sessions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (size_t i = 0; i < n_chunks; i++) {
                o += snprintf(req + o, total - (size_t)o, "%zx\r\n", chunk);
                memset(req + o, ' ', chunk);
                o += (int)chunk;
                o += snprintf(req + o, total - (size_t)o, "\r\n");
        }
        exchange(f, req, (size_t)o, resp, sizeof resp, &closed);
        free(req);
        check_error(resp, 413, "too_large");
        assert_true(closed);
}

static void test_bad_json_and_fields(void **state) {
        struct fixture *f = *state;
        printf("check: a malformed JSON body is 400 bad_request\n");
        send_str(f, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{\"a\":", resp, sizeof resp, NULL);
        check_error(resp, 400, "bad_request");
        printf("check: a JSON body that is not an object is 400\n");
        send_str(f, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]", resp, sizeof resp, NULL);
        check_error(resp, 400, "bad_request");
        printf("check: a template name that tries to leave its root is 400 (chunked body)\n");
        const char *t = "POST /v1/sessions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "d\r\n{\"template\":\"\r\n9\r\n../../etc\r\n2\r\n\"}\r\n0\r\n\r\n";
        send_str(f, t, resp, sizeof resp, NULL);
        check_error(resp, 400, "bad_request");
        printf("check: a template that does not exist is 404\n");
        send_str(f, "POST /v1/sessions HTTP/1.1\r\nContent-Length: 19\r\n\r\n{\"template\":\"nope\"}", resp, sizeof resp, NULL);
        check_error(resp, 404, "not_found");
        printf("check: a bad memory size is 400\n");
        const char *m = "{\"template\":\"x\",\"memory\":\"12Q\"}";
        char req[256];
        snprintf(req, sizeof req, "POST /v1/sessions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s", strlen(m), m);
        send_str(f, req, resp, sizeof resp, NULL);
        /* Template checks come first; either way the request must be refused with JSON. */
        assert_true(strncmp(resp, "HTTP/1.1 4", 10) == 0);
        printf("check: the connection survived all of these\n");
        assert_int_equal(f->d.n_conns, 1);
}

static void test_unknown_ids(void **state) {
        struct fixture *f = *state;
        printf("check: unknown session ids are 404 on every session route\n");
        const char *reqs[] = {
                "GET /v1/sessions/ses_0000000000000000 HTTP/1.1\r\n\r\n",
                "DELETE /v1/sessions/ses_0000000000000000 HTTP/1.1\r\n\r\n",
                "GET /v1/sessions/nope/files?path=/etc/passwd HTTP/1.1\r\n\r\n",
                "GET /v1/sessions/nope/processes HTTP/1.1\r\n\r\n",
                "POST /v1/sessions/nope/exec HTTP/1.1\r\nContent-Length: 15\r\n\r\n{\"argv\":[\"ls\"]}",
                "DELETE /v1/templates/nope HTTP/1.1\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
                send_str(f, reqs[i], resp, sizeof resp, NULL);
                check_error(resp, 404, "not_found");
        }
        printf("check: a template name with a slash is 400 on delete\n");
        send_str(f, "DELETE /v1/templates/..%2Fx HTTP/1.1\r\n\r\n", resp, sizeof resp, NULL);
        assert_true(strncmp(resp, "HTTP/1.1 4", 10) == 0);
}

static void test_upload_unknown_session(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: an upload to an unknown session is refused before 100 Continue\n");
        send_str(f, "PUT /v1/sessions/nope/files?path=/a HTTP/1.1\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n",
                 resp, sizeof resp, &closed);
        assert_null(strstr(resp, "100 Continue"));
        check_error(resp, 404, "not_found");
        assert_true(closed);
}

static void test_client_goes_away(void **state) {
        struct fixture *f = *state;
        printf("check: a client that closes is forgotten\n");
        assert_int_equal(f->d.n_conns, 1);
        close(f->client);
        f->client = -1;
        for (int i = 0; i < 5 && f->d.n_conns; i++)
                loop_run_once(f->d.loop, 10);
        assert_int_equal(f->d.n_conns, 0);
}

static void test_request_timeout(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: a request head that stops half-way is answered 408 and closed\n");
        f->d.request_timeout_ms = 50;
        send_str(f, "GET /v1/heal", resp, sizeof resp, &closed);
        assert_int_equal(resp[0], '\0');
        struct timespec ts = { 0, 80 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        srv_tick(&f->d);
        exchange(f, "", 0, resp, sizeof resp, &closed);
        check_error(resp, 408, "timeout");
        assert_true(closed);
}

static void test_idle_timeout(void **state) {
        struct fixture *f = *state;
        bool closed;
        printf("check: a keep-alive connection stays open after a response, then idles out\n");
        /* The limit is moved, not waited for, so that a loaded machine can't fail this. */
        f->d.idle_timeout_ms = 3600 * 1000;
        send_str(f, "GET /v1/health HTTP/1.1\r\n\r\n", resp, sizeof resp, &closed);
        assert_non_null(strstr(resp, "200 OK"));
        assert_false(closed);
        srv_tick(&f->d);
        assert_int_equal(f->d.n_conns, 1);
        f->d.idle_timeout_ms = 1;
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        srv_tick(&f->d);
        for (int i = 0; i < 5 && f->d.n_conns; i++)
                loop_run_once(f->d.loop, 10);
        assert_int_equal(f->d.n_conns, 0);
}

static void test_error_body_escapes(void **state) {
        (void)state;
        printf("check: error bodies are valid JSON whatever the message holds\n");
        struct buf b = BUF_INIT(0);
        srv_error_body(&b, 409, "a \"quoted\"\nline\\ \x01 end");
        struct json *j = NULL;
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        const struct json *e = json_get(j, "error");
        assert_string_equal(json_get_str(e, "code"), "conflict");
        assert_string_equal(json_get_str(e, "message"), "a \"quoted\"\nline\\ \x01 end");
        json_free(j);
        buf_free(&b);
}

/* {"code":N,"message":...} (the E2B API's REST errors) with status N. */
static void check_e2b_error(const char *r, int status) {
        char line[64];
        snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
        if (strncmp(r, line, strlen(line)) != 0)
                fail_msg("expected status %d, got: %.200s", status, r);
        struct json *j = body_of(r);
        int64_t code = 0;
        assert_int_equal(json_get_int(j, "code", &code), 0);
        assert_int_equal(code, status);
        assert_true(strlen(json_get_str(j, "message")) > 0);
        json_free(j);
}

/* A Connect error: status and {"code":"<code>","message":...}. */
static void check_rpc_error(const char *r, int status, const char *code) {
        char line[64];
        snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
        if (strncmp(r, line, strlen(line)) != 0)
                fail_msg("expected status %d, got: %.200s", status, r);
        assert_non_null(strstr(r, "Content-Type: application/json\r\n"));
        struct json *j = body_of(r);
        assert_string_equal(json_get_str(j, "code"), code);
        assert_true(strlen(json_get_str(j, "message")) > 0);
        json_free(j);
}

static void test_e2b_front(void **state) {
        struct fixture *f = *state;
        char tok[AUTH_TOKEN_LEN + 1], rev[AUTH_TOKEN_LEN + 1], key[AUTH_TOKEN_LEN + 1], req[1024], h[META_HASH_HEX + 1];
        tcp_with_tokens(f, tok, rev);
        assert_int_equal(auth_token_new_e2b(key), 0);
        assert_int_equal(meta_token_hash(key, h), 0);
        assert_int_equal(meta_token_create(f->d.meta, h, "t1", NULL), 0);
        printf("check: with --e2b off an X-API-KEY request is SPACE's: 401 in SPACE's dialect\n");
        snprintf(req, sizeof req, "GET /v2/sandboxes HTTP/1.1\r\nX-API-KEY: %s\r\n\r\n", key);
        send_str(f, req, resp, sizeof resp, NULL);
        check_error(resp, 401, "unauthorized");

        assert_int_equal(e2b_open(&f->d), 0);
        char path[128];
        struct stat st;
        snprintf(path, sizeof path, "%s/e2b.key", f->tmp);
        printf("check: e2b_open made DATA/e2b.key, 32 bytes, mode 0600\n");
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, E2B_SECRET_BYTES);
        assert_int_equal(st.st_mode & 0777, 0600);
        char t1[E2B_ACCESS_TOKEN_LEN + 1], t2[E2B_ACCESS_TOKEN_LEN + 1], t3[E2B_ACCESS_TOKEN_LEN + 1];
        e2b_access_token(f->d.e2b, "ses_0123456789abcdef", t1);
        e2b_access_token(f->d.e2b, "ses_0123456789abcdee", t2);
        printf("check: access tokens are 43 url-safe characters, one per id, the same after a reopen\n");
        assert_int_equal(strlen(t1), E2B_ACCESS_TOKEN_LEN);
        assert_string_not_equal(t1, t2);
        e2b_close(&f->d);
        assert_int_equal(e2b_open(&f->d), 0);
        e2b_access_token(f->d.e2b, "ses_0123456789abcdef", t3);
        assert_string_equal(t1, t3);

        printf("check: a bad X-API-KEY is 401 {\"code\":401}; a good one (e2b_ form) reaches the E2B routes\n");
        send_str(f, "GET /v2/sandboxes HTTP/1.1\r\nX-API-KEY: e2b_00\r\n\r\n", resp, sizeof resp, NULL);
        check_e2b_error(resp, 401);
        snprintf(req, sizeof req, "GET /v2/nope HTTP/1.1\r\nX-API-KEY: %s\r\n\r\n", key);
        send_str(f, req, resp, sizeof resp, NULL);
        check_e2b_error(resp, 404);
        snprintf(req, sizeof req, "PUT /v2/sandboxes HTTP/1.1\r\nX-API-KEY: %s\r\nContent-Length: 0\r\n\r\n", tok);
        send_str(f, req, resp, sizeof resp, NULL);
        check_e2b_error(resp, 405);
        printf("check: another tenant's or an unknown sandbox is body code 404\n");
        snprintf(req, sizeof req, "GET /sandboxes/ses_0123456789abcdef HTTP/1.1\r\nX-API-KEY: %s\r\n\r\n", key);
        send_str(f, req, resp, sizeof resp, NULL);
        check_e2b_error(resp, 404);

        printf("check: the right token for a sandbox that is not there is 502 {\"code\":502} (E2B's proxy)\n");
        snprintf(req, sizeof req,
                 "GET /health HTTP/1.1\r\nE2b-Sandbox-Id: ses_0123456789abcdef\r\nX-Access-Token: %s\r\n\r\n", t1);
        send_str(f, req, resp, sizeof resp, NULL);
        check_e2b_error(resp, 502);
        printf("check: a wrong X-Access-Token is 401, on REST and on Connect\n");
        snprintf(req, sizeof req,
                 "GET /health HTTP/1.1\r\nE2b-Sandbox-Id: ses_0123456789abcdef\r\nX-Access-Token: %s\r\n\r\n", t2);
        send_str(f, req, resp, sizeof resp, NULL);
        check_e2b_error(resp, 401);
        printf("check: SPACE's own requests are untouched with --e2b on\n");
        snprintf(req, sizeof req, "GET /v1/health HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", key);
        send_str(f, req, resp, sizeof resp, NULL);
        assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
        printf("check: the data plane without X-Access-Token is Connect unauthenticated (and, its body\n"
               "       unread, the connection closes)\n");
        send_str(f,
                 "POST /process.Process/List HTTP/1.1\r\nE2b-Sandbox-Id: ses_0123456789abcdef\r\n"
                 "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                 resp, sizeof resp, NULL);
        check_rpc_error(resp, 401, "unauthenticated");
        e2b_close(&f->d);
        unlink(path);
        drop_meta(f);
}

static void test_e2b_helpers(void **state) {
        (void)state;
        struct buf b = BUF_INIT(0);
        printf("check: proto3 bytes decode from either base64 alphabet, padded or not\n");
        assert_int_equal(e2b_b64_decode("aGk-_w==", 8, &b), 0);
        assert_int_equal(b.len, 4);
        assert_memory_equal(b.data, "hi>\xff", 4);
        buf_free(&b);
        b = BUF_INIT(0);
        assert_int_equal(e2b_b64_decode("aGk+/w", 6, &b), 0);
        assert_memory_equal(b.data, "hi>\xff", 4);
        buf_free(&b);
        b = BUF_INIT(0);
        assert_true(e2b_b64_decode("a*==", 4, &b) < 0);
        buf_free(&b);
        printf("check: paths resolve against the home: relative, ~, ~/x, absolute, empty\n");
        char out[64], home[32];
        e2b_home_of("user", home, sizeof home);
        assert_string_equal(home, "/home/user");
        e2b_home_of("root", home, sizeof home);
        assert_string_equal(home, "/root");
        e2b_home_of("user", home, sizeof home);
        assert_int_equal(e2b_abs_path("a/b", home, out, sizeof out), 0);
        assert_string_equal(out, "/home/user/a/b");
        assert_int_equal(e2b_abs_path("~", home, out, sizeof out), 0);
        assert_string_equal(out, "/home/user");
        assert_int_equal(e2b_abs_path("~/x", home, out, sizeof out), 0);
        assert_string_equal(out, "/home/user/x");
        assert_int_equal(e2b_abs_path("/etc", home, out, sizeof out), 0);
        assert_string_equal(out, "/etc");
        assert_int_equal(e2b_abs_path("", home, out, sizeof out), 0);
        assert_string_equal(out, "/home/user");
        assert_int_equal(e2b_abs_path("a-name-longer-than-the-buffer-a-name-longer-than-the-buffer", home, out, sizeof out),
                         -ENAMETOOLONG);
        printf("check: our statuses map to Connect codes the SDK knows\n");
        assert_string_equal(e2b_rpc_code_of_status(404), "not_found");
        assert_string_equal(e2b_rpc_code_of_status(409), "failed_precondition");
        assert_string_equal(e2b_rpc_code_of_status(503), "unavailable");
        assert_string_equal(e2b_rpc_code_of_status(500), "internal");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_health_and_pipelining, setup, teardown),
                cmocka_unit_test_setup_teardown(test_405, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tcp_auth, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unix_tokens, setup, teardown),
                cmocka_unit_test_setup_teardown(test_malformed_closes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_oversize_head, setup, teardown),
                cmocka_unit_test_setup_teardown(test_oversize_json, setup, teardown),
                cmocka_unit_test_setup_teardown(test_oversize_json_chunked, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_json_and_fields, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unknown_ids, setup, teardown),
                cmocka_unit_test_setup_teardown(test_upload_unknown_session, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_goes_away, setup, teardown),
                cmocka_unit_test_setup_teardown(test_request_timeout, setup, teardown),
                cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
                cmocka_unit_test(test_error_body_escapes),
                cmocka_unit_test_setup_teardown(test_e2b_front, setup, teardown),
                cmocka_unit_test(test_e2b_helpers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
