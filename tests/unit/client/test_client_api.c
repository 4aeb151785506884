/* Unit tests of libspace against a scripted fake spaced: request encoding, keep-alive and
 * reconnects, chunked NDJSON streams, error mapping, size limits and timeouts, the API
 * bearer token. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/http.h"
#include "common/buf.h"
#include "common/frame.h"
#include "fake_server.h"
#include "space/space.h"

/* ---- helpers ------------------------------------------------------------------- */

/* Starts f (its replies filled) and a client of it. */
static space_client *start_client(struct fake_server *f, int timeout_ms) {
        fake_start(f);
        space_client *c = NULL;
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = f->host,
                                                                           .timeout_ms = timeout_ms }),
                         0);
        return c;
}

static const char SESSION[] = "{\"id\":\"ses_0123456789abcdef\",\"sandbox_id\":\"sbx_0123456789abcdef\",\"state\":\"running\","
                              "\"template\":\"base\",\"runtime\":\"ns\",\"created_at\":\"2025-01-01T00:00:00Z\","
                              "\"limits\":{\"memory\":67108864,\"cpus\":1.5,\"pids\":128,\"disk\":2147483648},\"network\":false,"
                              "\"init_pid\":4242,\"health\":{\"alive\":true,\"oom_killed\":false,\"memory_bytes\":1000,\"pids\":2}}";

/* Starts f with the test session as its first answer and opens that session through a new
 * client: the setup most tests share. */
static space_session *open_session(struct fake_server *f, space_client **ret_c) {
        fake_reply_json(f, 0, "200 OK", SESSION);
        space_client *c = start_client(f, 5000);
        space_session *s = NULL;
        assert_int_equal(space_session_open(&s, c, "ses_0123456789abcdef"), 0);
        *ret_c = c;
        return s;
}

/* Frees s (may be NULL) and c, and waits for f to end: what a test's requests are checked
 * after. */
static void finish(struct fake_server *f, space_session *s, space_client *c) {
        space_session_free(s);
        space_client_free(c);
        fake_stop(f);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_addr_parse(void **state) {
        (void)state;
        printf("checks: daemon addresses parse as unix/tcp and bad ones are refused\n");
        struct http_addr a;
        char out[300];
        assert_int_equal(http_addr_parse("unix:/run/s.sock", &a), 0);
        assert_int_equal(a.kind, HTTP_ADDR_UNIX);
        assert_string_equal(a.path, "/run/s.sock");
        assert_int_equal(http_addr_parse("/var/lib/space/spaced.sock", &a), 0);
        assert_int_equal(a.kind, HTTP_ADDR_UNIX);
        assert_int_equal(http_addr_parse("tcp://127.0.0.1:8080", &a), 0);
        assert_int_equal(a.kind, HTTP_ADDR_TCP);
        assert_string_equal(a.host, "127.0.0.1");
        assert_string_equal(a.port, "8080");
        assert_int_equal(http_addr_parse("localhost:1", &a), 0);
        http_addr_format(&a, out, sizeof out);
        assert_string_equal(out, "tcp://localhost:1");
        assert_int_equal(http_addr_parse("[::1]:443", &a), 0);
        assert_string_equal(a.host, "::1");
        http_addr_format(&a, out, sizeof out);
        assert_string_equal(out, "tcp://[::1]:443");
        assert_int_equal(http_addr_parse("", &a), -EINVAL);
        assert_int_equal(http_addr_parse("unix:", &a), -EINVAL);
        assert_int_equal(http_addr_parse("localhost", &a), -EINVAL);
        assert_int_equal(http_addr_parse("host:", &a), -EINVAL);
        assert_int_equal(http_addr_parse("host:99999", &a), -EINVAL);
        assert_int_equal(http_addr_parse("host:12ab", &a), -EINVAL);
        assert_int_equal(http_addr_parse("http://host:80", &a), -EINVAL);
        assert_int_equal(http_addr_parse("::1:80", &a), -EINVAL);
        char longp[200];
        memset(longp, 'a', sizeof longp - 1);
        longp[0] = '/';
        longp[sizeof longp - 1] = '\0';
        assert_int_equal(http_addr_parse(longp, &a), -ENAMETOOLONG);
}

static void test_default_host(void **state) {
        (void)state;
        printf("checks: SPACE_HOST, then SPACE_DATA, then /var/lib/space choose the daemon\n");
        space_client *c = NULL;
        unsetenv("SPACE_HOST");
        unsetenv("SPACE_DATA");
        assert_int_equal(space_client_new(&c, NULL), 0);
        assert_string_equal(space_client_host(c), "unix:/var/lib/space/spaced.sock");
        c = space_client_free(c);
        setenv("SPACE_DATA", "/srv/sp", 1);
        assert_int_equal(space_client_new(&c, NULL), 0);
        assert_string_equal(space_client_host(c), "unix:/srv/sp/spaced.sock");
        c = space_client_free(c);
        setenv("SPACE_HOST", "127.0.0.1:7000", 1);
        assert_int_equal(space_client_new(&c, NULL), 0);
        assert_string_equal(space_client_host(c), "tcp://127.0.0.1:7000");
        c = space_client_free(c);
        setenv("SPACE_HOST", "nonsense", 1);
        assert_int_equal(space_client_new(&c, NULL), -EINVAL);
        assert_null(c);
        unsetenv("SPACE_HOST");
        unsetenv("SPACE_DATA");
}

static void test_api_token(void **state) {
        (void)state;
        printf("checks: the bearer token (option, else SPACE_TOKEN) goes on every request; 401 is -EPERM\n");
        struct fake_server f = { .nreplies = 3 };
        fake_reply_json(&f, 0, "200 OK", "{\"status\":\"ok\"}");
        fake_reply_json(&f, 1, "401 Unauthorized", "{\"error\":{\"code\":\"unauthorized\",\"message\":\"the bearer token is unknown or revoked\"}}");
        fake_reply_json(&f, 2, "200 OK", "{\"status\":\"ok\"}");
        fake_start(&f);
        space_client *c = NULL, *e = NULL, *n = NULL;
        setenv("SPACE_TOKEN", "spt_fromenv", 1);
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = f.host,
                                                                           .token = "spt_option" }), 0);
        assert_int_equal(space_client_new(&e, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = f.host }), 0);
        char *out = NULL;
        assert_int_equal(space_health(c, &out), 0);
        free(out);
        out = NULL;
        assert_int_equal(space_health(e, &out), -EPERM);
        assert_string_equal(space_client_last_error_code(e), "unauthorized");
        unsetenv("SPACE_TOKEN");
        assert_int_equal(space_client_new(&n, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = f.host }), 0);
        assert_int_equal(space_health(n, &out), 0);
        free(out);
        c = space_client_free(c);
        e = space_client_free(e);
        n = space_client_free(n);
        fake_stop(&f);
        assert_int_equal(f.served, 3);
        assert_non_null(strstr(f.requests[0], "\r\nAuthorization: Bearer spt_option\r\n"));
        assert_non_null(strstr(f.requests[1], "\r\nAuthorization: Bearer spt_fromenv\r\n"));
        assert_null(strcasestr(f.requests[2], "Authorization"));
        fake_free(&f);
        printf("checks: a token with a blank, a newline or over SPACE_MAX_API_TOKEN is -EKEYREJECTED; version 1 opts still work\n");
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .token = "a b" }), -EKEYREJECTED);
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .token = "a\r\nX: y" }), -EKEYREJECTED);
        char longt[SPACE_MAX_API_TOKEN + 2];
        memset(longt, 'a', sizeof longt - 1);
        longt[sizeof longt - 1] = '\0';
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .token = longt }), -EKEYREJECTED);
        assert_null(c);
        setenv("SPACE_TOKEN", "bad token", 1);
        assert_int_equal(space_client_new(&c, NULL), -EKEYREJECTED);
        unsetenv("SPACE_TOKEN");
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ .version = 1, .token = "ignored in v1" }), 0);
        c = space_client_free(c);
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ .version = 99 }), -EINVAL);
}

static void test_keepalive(void **state) {
        (void)state;
        printf("checks: two requests share one kept-alive connection; the request line is right\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 0, "200 OK", "{\"status\":\"ok\"}");
        fake_reply_json(&f, 1, "200 OK", "{\"sessions\":[]}");
        space_client *c = start_client(&f, 5000);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), 0);
        assert_string_equal(j, "{\"status\":\"ok\"}");
        free(j);
        struct space_session_info *v = NULL;
        size_t n = 99;
        assert_int_equal(space_session_list(c, &v, &n), 0);
        assert_int_equal(n, 0);
        free(v);
        finish(&f, NULL, c);
        assert_int_equal(f.connections, 1);
        assert_int_equal(strncmp(f.requests[0], "GET /v1/health HTTP/1.1\r\n", 25), 0);
        assert_int_equal(strncmp(f.requests[1], "GET /v1/sessions HTTP/1.1\r\n", 27), 0);
        fake_free(&f);
}

static void test_reconnect_after_server_close(void **state) {
        (void)state;
        printf("checks: a kept-alive connection the server closed is reopened and the request resent\n");
        struct fake_server f = { .nreplies = 2 };
        /* keep-alive as far as the client knows, but the server hangs up right after */
        fake_reply_json(&f, 0, "200 OK", "{\"status\":\"ok\"}");
        f.replies[0].close_after = true;
        fake_reply_json(&f, 1, "200 OK", "{\"status\":\"ok\"}");
        space_client *c = start_client(&f, 5000);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), 0);
        free(j);
        usleep(50 * 1000);
        assert_int_equal(space_health(c, &j), 0);
        assert_string_equal(j, "{\"status\":\"ok\"}");
        free(j);
        finish(&f, NULL, c);
        assert_int_equal(f.connections, 2);
        fake_free(&f);
}

static void test_connection_close_header(void **state) {
        (void)state;
        printf("checks: 'Connection: close' answers are honoured (next request on a new connection)\n");
        struct fake_server f = { .nreplies = 2 };
        f.replies[0].raw = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}";
        f.replies[0].close_after = true;
        f.replies[1].raw = "HTTP/1.0 200 OK\r\n\r\n{\"a\":1}"; /* no length: body runs to close */
        f.replies[1].close_after = true;
        space_client *c = start_client(&f, 5000);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), 0);
        assert_string_equal(j, "{}");
        free(j);
        assert_int_equal(space_health(c, &j), 0);
        assert_string_equal(j, "{\"a\":1}");
        free(j);
        finish(&f, NULL, c);
        assert_int_equal(f.connections, 2);
        fake_free(&f);
}

static void test_create_request(void **state) {
        (void)state;
        printf("checks: space_session_new sends template, memory, cpus, pids, disk, env, network and reads the id\n");
        struct fake_server f = { .nreplies = 1 };
        fake_reply_json(&f, 0, "201 Created", SESSION);
        space_client *c = start_client(&f, 5000);
        space_session *s = NULL;
        const char *env[] = { "A=1", "B=x=y", NULL };
        assert_int_equal(space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = "base",
                                                                                 .memory = 64 << 20, .cpus = 1.5, .pids = 128,
                                                                                 .env = env, .network = true,
                                                                                 .disk = 2ull << 30 }),
                         0);
        assert_string_equal(space_session_id(s), "ses_0123456789abcdef");
        assert_non_null(strstr(space_session_json(s), "sbx_0123456789abcdef"));
        finish(&f, s, c);
        const char *req = f.requests[0];
        assert_int_equal(strncmp(req, "POST /v1/sessions HTTP/1.1\r\n", 28), 0);
        assert_non_null(strcasestr(req, "\r\nContent-Type: application/json\r\n"));
        const char *body = fake_request_body(&f, 0);
        assert_non_null(strstr(body, "\"template\":\"base\""));
        assert_non_null(strstr(body, "\"memory\":67108864"));
        assert_non_null(strstr(body, "\"cpus\":1.5"));
        assert_non_null(strstr(body, "\"pids\":128"));
        assert_non_null(strstr(body, "\"disk\":2147483648"));
        assert_non_null(strstr(body, "\"env\":{\"A\":\"1\",\"B\":\"x=y\"}"));
        assert_non_null(strstr(body, "\"network\":true"));
        fake_free(&f);
}

static void test_inspect_fields(void **state) {
        (void)state;
        printf("checks: the session object fills space_session_info\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 1, "200 OK", SESSION);
        space_client *c;
        space_session *s = open_session(&f, &c);
        struct space_session_info si;
        assert_int_equal(space_session_inspect(s, &si), 0);
        assert_string_equal(si.id, "ses_0123456789abcdef");
        assert_string_equal(si.state, "running");
        assert_string_equal(si.template_name, "base");
        assert_int_equal(si.memory_limit, 64 << 20);
        assert_true(si.cpus > 1.49 && si.cpus < 1.51);
        assert_int_equal(si.pids_limit, 128);
        assert_int_equal(si.disk_limit, 2ull << 30);
        assert_int_equal(si.init_pid, 4242);
        assert_true(si.alive);
        assert_false(si.oom_killed);
        finish(&f, s, c);
        fake_free(&f);
}

struct collected {
        char out[256];
        char err[256];
        int start_pid;
};

static int collect(void *ud, enum space_stream st, const void *data, size_t len) {
        struct collected *c = ud;
        char *dst = st == SPACE_STDOUT ? c->out : c->err;
        size_t have = strlen(dst);
        assert_true(have + len < sizeof c->out);
        memcpy(dst + have, data, len);
        dst[have + len] = '\0';
        return 0;
}

static void on_start(void *ud, int pid) { ((struct collected *)ud)->start_pid = pid; }

static void test_exec_stream(void **state) {
        (void)state;
        printf("checks: exec streams stdout/stderr (text and base64, lines split across chunks) and the exit code\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"start\",\"pid\":7}\n{\"type\":\"std", "out\",\"data\":\"4",
                                  "2\\n\"}\n{\"type\":\"stderr\",\"data_b64\":\"/wA=\"}\n",
                                  "{\"type\":\"future\",\"x\":1}\n{\"type\":\"exit\",\"exit_code\":3}\n", NULL);
        space_client *c;
        space_session *s = open_session(&f, &c);
        struct collected col = { 0 };
        const char *argv[] = { "sh", "-c", "exit 3", NULL };
        const char *env[] = { "K=V", NULL };
        struct space_exec_result res;
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .env = env, .cwd = "/root",
                                                                  .timeout_ms = 1500, .stdin_data = "hi\n", .stdin_len = 3,
                                                                  .on_output = collect, .on_start = on_start, .userdata = &col },
                                   &res),
                         0);
        assert_string_equal(col.out, "42\n");
        assert_int_equal((unsigned char)col.err[0], 0xff);
        assert_int_equal(col.start_pid, 7);
        assert_true(res.exited);
        assert_int_equal(res.exit_code, 3);
        assert_int_equal(res.signal, 0);
        assert_int_equal(res.pid, 7);
        finish(&f, s, c);
        const char *req = f.requests[1];
        assert_int_equal(strncmp(req, "POST /v1/sessions/ses_0123456789abcdef/exec HTTP/1.1\r\n", 54), 0);
        const char *body = fake_request_body(&f, 1);
        assert_non_null(strstr(body, "\"argv\":[\"sh\",\"-c\",\"exit 3\"]"));
        assert_non_null(strstr(body, "\"env\":{\"K\":\"V\"}"));
        assert_non_null(strstr(body, "\"cwd\":\"/root\""));
        assert_non_null(strstr(body, "\"timeout_ms\":1500"));
        assert_non_null(strstr(body, "\"stdin\":\"hi\\n\""));
        assert_null(strstr(body, "background"));
        fake_free(&f);
}

struct bytes_out {
        struct buf out, err;
};

static int collect_bytes(void *ud, enum space_stream which, const void *data, size_t len) {
        struct bytes_out *b = ud;
        return buf_append(which == SPACE_STDOUT ? &b->out : &b->err, data, len);
}

/* Appends one frame of the binary stream framing. */
static void put_frame(struct buf *b, uint8_t kind, const void *p, size_t n) {
        uint8_t h[FRAME_HDR_SIZE];
        frame_hdr_encode(kind, (uint32_t)n, h);
        assert_int_equal(buf_append(b, h, sizeof h), 0);
        assert_int_equal(buf_append(b, p, n), 0);
}

static void test_exec_framed(void **state) {
        (void)state;
        printf("checks: exec asks for the binary framing and takes it whole or cut into chunks anywhere "
               "(every byte 0..255, NUL, empty and unknown frames)\n");
        struct buf frames = BUF_INIT(0);
        uint8_t all[256];
        for (int i = 0; i < 256; i++)
                all[i] = (uint8_t)i;
        static const char start[] = "{\"type\":\"start\",\"pid\":7}", exit_ev[] = "{\"type\":\"exit\",\"exit_code\":4}";
        put_frame(&frames, FRAME_EVENT, start, sizeof start - 1);
        put_frame(&frames, FRAME_STDOUT, "a\0b", 3);
        put_frame(&frames, FRAME_STDERR, "", 0);
        put_frame(&frames, 9, "zz", 2); /* a kind from a newer spaced: skipped */
        put_frame(&frames, FRAME_STDOUT, all, sizeof all);
        put_frame(&frames, FRAME_STDERR, "\xff", 1);
        put_frame(&frames, FRAME_EVENT, exit_ev, sizeof exit_ev - 1);
        const size_t cuts[] = { 1, 2, 3, 4, 5, 6, 7, 64, frames.len };
        for (size_t ci = 0; ci < sizeof cuts / sizeof cuts[0]; ci++) {
                size_t cut = cuts[ci];
                struct buf raw = BUF_INIT(0);
                assert_int_equal(buf_puts(&raw, "HTTP/1.1 200 OK\r\nContent-Type: " FRAME_CONTENT_TYPE
                                                 "\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
                for (size_t off = 0; off < frames.len; off += cut) {
                        size_t n = MIN(cut, frames.len - off);
                        assert_int_equal(buf_printf(&raw, "%zx\r\n", n), 0);
                        assert_int_equal(buf_append(&raw, frames.data + off, n), 0);
                        assert_int_equal(buf_puts(&raw, "\r\n"), 0);
                }
                assert_int_equal(buf_puts(&raw, "0\r\n\r\n"), 0);
                struct fake_server f = { .nreplies = 2 };
                fake_reply_take(&f, 1, raw.data, raw.len);
                space_client *c;
                space_session *s = open_session(&f, &c);
                struct bytes_out b = { BUF_INIT(0), BUF_INIT(0) };
                const char *argv[] = { "x", NULL };
                struct space_exec_result res;
                assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv,
                                                                          .on_output = collect_bytes, .userdata = &b },
                                            &res),
                                 0);
                finish(&f, s, c);
                assert_non_null(strstr(f.requests[1], "\r\nAccept: " FRAME_CONTENT_TYPE));
                assert_int_equal(b.out.len, 3 + sizeof all);
                assert_memory_equal(b.out.data, "a\0b", 3);
                assert_memory_equal(b.out.data + 3, all, sizeof all);
                assert_int_equal(b.err.len, 1);
                assert_int_equal(res.pid, 7);
                assert_true(res.exited);
                assert_int_equal(res.exit_code, 4);
                buf_free(&b.out);
                buf_free(&b.err);
                fake_free(&f);
        }
        buf_free(&frames);
}

static void test_exec_signal_and_binary_stdin(void **state) {
        (void)state;
        printf("checks: a signal exit is reported; binary stdin goes as stdin_b64\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"exit\",\"signal\":9,\"timed_out\":true}", NULL);
        space_client *c;
        space_session *s = open_session(&f, &c);
        const char *argv[] = { "sleep", "100", NULL };
        struct space_exec_result res;
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .stdin_data = "\xff\x00",
                                                                  .stdin_len = 2 },
                                   &res),
                         0);
        assert_true(res.exited);
        assert_int_equal(res.signal, 9);
        assert_true(res.timed_out);
        finish(&f, s, c);
        assert_non_null(strstr(f.requests[1], "\"stdin_b64\":\"/wA=\""));
        fake_free(&f);
}

static void test_exec_background(void **state) {
        (void)state;
        printf("checks: a background exec returns the pid from a 201 JSON answer\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 1, "201 Created", "{\"pid\":99}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        const char *argv[] = { "sleep", "100", NULL };
        struct space_exec_result res;
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .background = true }, &res), 0);
        assert_int_equal(res.pid, 99);
        assert_false(res.exited);
        finish(&f, s, c);
        assert_non_null(strstr(f.requests[1], "\"background\":true"));
        fake_free(&f);
}

static void test_exec_errors(void **state) {
        (void)state;
        printf("checks: 422 exec_failed -> -ENOEXEC with the daemon's message; a stream without exit -> error\n");
        struct fake_server f = { .nreplies = 3 };
        fake_reply_json(&f, 1, "422 Unprocessable Entity",
                               "{\"error\":{\"code\":\"exec_failed\",\"message\":\"nope: No such file or directory\"}}");
        fake_reply_chunked(&f, 2, "200 OK", "{\"type\":\"stdout\",\"data\":\"x\"}\n", NULL);
        space_client *c;
        space_session *s = open_session(&f, &c);
        const char *argv[] = { "nope", NULL };
        struct space_exec_result res = { .pid = -5 };
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv }, &res), -ENOEXEC);
        assert_string_equal(space_client_last_error(c), "nope: No such file or directory");
        assert_string_equal(space_client_last_error_code(c), "exec_failed");
        assert_int_equal(space_client_last_status(c), 422);
        assert_int_equal(res.pid, -5); /* untouched on failure */
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv }, &res), -ECONNRESET);
        assert_non_null(strstr(space_client_last_error(c), "before the command's exit"));
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = NULL }, &res), -EINVAL);
        finish(&f, s, c);
        fake_free(&f);
}

static void test_error_mapping(void **state) {
        (void)state;
        printf("checks: 404/409/400 JSON errors map to -ENOENT/-EEXIST/-EINVAL; a non-JSON 500 to -EPROTO\n");
        struct fake_server f = { .nreplies = 4 };
        fake_reply_json(&f, 0, "404 Not Found", "{\"error\":{\"code\":\"not_found\",\"message\":\"no session ses_1\"}}");
        fake_reply_json(&f, 1, "409 Conflict", "{\"error\":{\"code\":\"conflict\",\"message\":\"in use\"}}");
        fake_reply_json(&f, 2, "400 Bad Request", "{\"error\":{\"code\":\"bad_request\",\"message\":\"bad\"}}");
        f.replies[3].raw = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops\n";
        space_client *c = start_client(&f, 5000);
        space_session *s = NULL;
        assert_int_equal(space_session_open(&s, c, "ses_1"), -ENOENT);
        assert_null(s);
        assert_string_equal(space_client_last_error(c), "no session ses_1");
        assert_string_equal(space_client_last_error_code(c), "not_found");
        assert_int_equal(space_template_delete(c, "base"), -EEXIST);
        assert_string_equal(space_client_last_error(c), "in use");
        assert_int_equal(space_session_delete_id(c, "ses_2"), -EINVAL);
        assert_int_equal(space_session_delete_id(c, "ses_3"), -EPROTO);
        assert_string_equal(space_client_last_error(c), "HTTP 500: oops");
        /* refused locally, nothing sent */
        assert_int_equal(space_session_delete_id(c, "../x"), -EINVAL);
        assert_null(space_client_last_error_code(c));
        finish(&f, NULL, c);
        assert_int_equal(strncmp(f.requests[1], "DELETE /v1/templates/base HTTP/1.1", 34), 0);
        fake_free(&f);
}

static void test_malformed_answers(void **state) {
        (void)state;
        printf("checks: a bad status line, a bad chunk size and a head over %u bytes are refused\n", HTTP_MAX_HEAD);
        struct fake_server f = { .nreplies = 3 };
        f.replies[0].raw = "HTTP/1.1 abc OK\r\n\r\n";
        f.replies[0].close_after = true;
        f.replies[1].raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";
        f.replies[1].close_after = true;
        size_t big = HTTP_MAX_HEAD + 1024;
        char *h = malloc(big + 64);
        int n = snprintf(h, 64, "HTTP/1.1 200 OK\r\nX-Pad: ");
        memset(h + n, 'a', big);
        memcpy(h + n + big, "\r\n\r\n", 5);
        fake_reply_take(&f, 2, h, 0);
        f.replies[2].close_after = true;
        space_client *c = start_client(&f, 5000);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), -EBADMSG);
        assert_int_equal(space_health(c, &j), -EBADMSG);
        assert_int_equal(space_health(c, &j), -E2BIG);
        assert_null(j);
        finish(&f, NULL, c);
        fake_free(&f);
}

static void test_size_limits(void **state) {
        (void)state;
        printf("checks: a file read over its max and an event line over SPACE_MAX_EVENT give -E2BIG\n");
        struct fake_server f = { .nreplies = 3 };
        f.replies[1].raw = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                           "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";
        /* one NDJSON line longer than the limit, never terminated */
        size_t big = SPACE_MAX_EVENT + 16;
        char *ev = malloc(big + 200);
        int n = snprintf(ev, 200, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", big);
        memset(ev + n, 'a', big);
        fake_reply_take(&f, 2, ev, (size_t)n + big);
        space_client *c;
        space_session *s = open_session(&f, &c);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(space_file_read(s, "/root/a b", 10, &data, &len), -E2BIG);
        assert_null(data);
        struct space_exec_result res;
        assert_int_equal(space_attach(s, 5, &(struct space_attach_opts){ SPACE_ATTACH_OPTS_INIT, .follow = true }, &res), -E2BIG);
        finish(&f, s, c);
        assert_int_equal(strncmp(f.requests[1], "GET /v1/sessions/ses_0123456789abcdef/files?path=/root/a%20b HTTP/1.1", 69), 0);
        assert_int_equal(strncmp(f.requests[2], "GET /v1/sessions/ses_0123456789abcdef/processes/5/output?offset=0&follow=1 ", 75), 0);
        fake_free(&f);
}

static void test_timeout(void **state) {
        (void)state;
        printf("checks: an ordinary request gives -ETIMEDOUT when the daemon doesn't answer in time\n");
        struct fake_server f = { .nreplies = 1 };
        fake_reply_json(&f, 0, "200 OK", "{}");
        f.replies[0].delay_ms = 1500;
        space_client *c = start_client(&f, 200);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), -ETIMEDOUT);
        assert_non_null(strstr(space_client_last_error(c), "did not answer"));
        finish(&f, NULL, c);
        fake_free(&f);
}

static void test_files(void **state) {
        (void)state;
        printf("checks: upload from an fd sends the file with mode and parents; download writes to an fd; stat and list parse\n");
        struct fake_server f = { .nreplies = 5 };
        fake_reply_json(&f, 1, "201 Created", "{\"written\":11}");
        f.replies[2].raw = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n";
        fake_reply_json(&f, 3, "200 OK", "{\"type\":\"file\",\"size\":11,\"mode\":420,\"uid\":0,\"gid\":0,\"mtime\":1700000000}");
        fake_reply_json(&f, 4, "200 OK", "{\"entries\":[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"mode\":\"0755\",\"mtime\":1},"
                                         "{\"name\":\"d\",\"type\":\"dir\",\"size\":0,\"mode\":493,\"mtime\":2}]}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        char tmpl[] = "/tmp/space-client-test-XXXXXX";
        int fd = mkstemp(tmpl);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "hello world", 11), 11);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        uint64_t written = 0;
        assert_int_equal(space_file_upload_fd(s, "/root/x.txt", fd, 0600, true, &written), 0);
        assert_int_equal(written, 11);
        assert_int_equal(ftruncate(fd, 0), 0);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        uint64_t got = 0;
        assert_int_equal(space_file_download_fd(s, "/root/x.txt", fd, &got), 0);
        assert_int_equal(got, 11);
        char back[32] = { 0 };
        assert_int_equal(pread(fd, back, sizeof back, 0), 11);
        assert_string_equal(back, "hello world");
        close(fd);
        unlink(tmpl);
        struct space_stat st;
        assert_int_equal(space_file_stat(s, "/root/x.txt", &st), 0);
        assert_string_equal(st.type, "file");
        assert_int_equal(st.size, 11);
        assert_int_equal(st.mode, 0644);
        assert_int_equal(st.mtime, 1700000000);
        struct space_dirent *ents = NULL;
        size_t n = 0;
        assert_int_equal(space_file_list(s, "/root", &ents, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ents[0].name, "a");
        assert_int_equal(ents[0].st.mode, 0755);
        assert_string_equal(ents[1].st.type, "dir");
        free(ents);
        finish(&f, s, c);
        assert_int_equal(strncmp(f.requests[1], "PUT /v1/sessions/ses_0123456789abcdef/files?path=/root/x.txt&mode=0600&parents=1 HTTP/1.1", 89), 0);
        assert_non_null(strstr(f.requests[1], "Content-Length: 11\r\n"));
        assert_string_equal(fake_request_body(&f, 1), "hello world");
        fake_free(&f);
}

static void test_user(void **state) {
        (void)state;
        printf("checks: exec opts v3 \"user\", ?user= on uploads, \"user\" in mkdir; a bad user is refused unsent\n");
        struct fake_server f = { .nreplies = 4 };
        fake_reply_json(&f, 1, "200 OK", "{\"type\":\"start\",\"pid\":7}\n{\"type\":\"exit\",\"exit_code\":0}");
        fake_reply_json(&f, 2, "201 Created", "{\"written\":2}");
        fake_reply_json(&f, 3, "201 Created", "{}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        const char *argv[] = { "id", NULL };
        struct space_exec_result res;
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .user = "user" }, &res), 0);
        assert_int_equal(space_file_write_as(s, "/home/user/a", "hi", 2, 0, true, "1000"), 0);
        assert_int_equal(space_file_mkdir_as(s, "/home/user/d", false, "user"), 0);
        assert_int_equal(space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv, .user = "a&b" }, &res),
                         -EINVAL);
        assert_int_equal(space_file_write_as(s, "/x", "x", 1, 0, false, "Bad"), -EINVAL);
        assert_int_equal(space_file_mkdir_as(s, "/x", false, ""), -EINVAL);
        finish(&f, s, c);
        assert_non_null(strstr(fake_request_body(&f, 1), "\"user\":\"user\""));
        assert_int_equal(strncmp(f.requests[2], "PUT /v1/sessions/ses_0123456789abcdef/files?path=/home/user/a&mode=0644&parents=1&user=1000 HTTP/1.1", 99), 0);
        assert_non_null(strstr(fake_request_body(&f, 3), "\"user\":\"user\""));
        fake_free(&f);
}

static void test_early_answer(void **state) {
        (void)state;
        printf("checks: an upload the daemon refuses early (413, then close) reports the 413, not EPIPE\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_json(&f, 1, "413 Payload Too Large", "{\"error\":{\"code\":\"too_large\",\"message\":\"upload over 256 MiB\"}}");
        f.replies[1].after_head = true;
        space_client *c;
        space_session *s = open_session(&f, &c);
        size_t n = 16u << 20;
        char *big = calloc(1, n);
        assert_non_null(big);
        assert_int_equal(space_file_write(s, "/root/big", big, n, 0, false), -E2BIG);
        assert_string_equal(space_client_last_error(c), "upload over 256 MiB");
        free(big);
        finish(&f, s, c);
        fake_free(&f);
}

static void test_list_pages_and_attach_end(void **state) {
        (void)state;
        printf("checks: a truncated listing is fetched page by page; attach's end event gives the resume offset; 403/507 map\n");
        struct fake_server f = { .nreplies = 6 };
        fake_reply_json(&f, 1, "200 OK", "{\"entries\":[{\"name\":\"a\",\"type\":\"file\"},{\"name\":\"b c\",\"type\":\"file\"}],\"truncated\":true}");
        fake_reply_json(&f, 2, "200 OK", "{\"entries\":[{\"name\":\"d\",\"type\":\"dir\"}],\"truncated\":false}");
        fake_reply_chunked(&f, 3, "200 OK", "{\"type\":\"attach\",\"offset\":4,\"end\":9,\"running\":true}\n",
                                  "{\"type\":\"stdout\",\"data\":\"hello\"}\n{\"type\":\"end\",\"running\":true,\"offset\":9}\n", NULL);
        fake_reply_json(&f, 4, "403 Forbidden", "{\"error\":{\"code\":\"forbidden\",\"message\":\"no\"}}");
        fake_reply_json(&f, 5, "507 Insufficient Storage", "{\"error\":{\"code\":\"no_space\",\"message\":\"disk quota\"}}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        struct space_dirent *ents = NULL;
        size_t n = 0;
        assert_int_equal(space_file_list(s, "/root", &ents, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(ents[1].name, "b c");
        assert_string_equal(ents[2].name, "d");
        free(ents);
        struct space_exec_result res;
        assert_int_equal(space_attach(s, 5, &(struct space_attach_opts){ SPACE_ATTACH_OPTS_INIT, .offset = 4 }, &res), 0);
        assert_false(res.exited);
        assert_true(res.running);
        assert_int_equal(res.offset, 4);
        assert_int_equal(res.next_offset, 9);
        assert_int_equal(space_file_remove(s, "/etc", true), -EACCES);
        assert_int_equal(space_file_write(s, "/root/x", "x", 1, 0, false), -ENOSPC);
        assert_string_equal(space_client_last_error(c), "disk quota");
        finish(&f, s, c);
        static const char want2[] = "GET /v1/sessions/ses_0123456789abcdef/files/list?path=/root&after=b%20c HTTP/1.1\r\n";
        static const char want4[] = "DELETE /v1/sessions/ses_0123456789abcdef/files?path=/etc&recursive=1 HTTP/1.1\r\n";
        assert_int_equal(strncmp(f.requests[2], want2, sizeof want2 - 1), 0);
        assert_int_equal(strncmp(f.requests[4], want4, sizeof want4 - 1), 0);
        fake_free(&f);
}

static void progress(void *ud, const char *msg) {
        int *n = ud;
        assert_string_equal(msg, *n == 0 ? "debootstrap bookworm" : "unpacking");
        (*n)++;
}

static void test_template_build(void **state) {
        (void)state;
        printf("checks: template build streams progress and ends with the template; an error event fails it\n");
        struct fake_server f = { .nreplies = 2 };
        fake_reply_chunked(&f, 0, "200 OK", "{\"type\":\"progress\",\"message\":\"debootstrap bookworm\"}\n",
                                  "{\"type\":\"progress\",\"message\":\"unpacking\"}\n",
                                  "{\"type\":\"done\",\"template\":{\"name\":\"py\",\"size_bytes\":1234,\"created_at\":\"x\"}}\n", NULL);
        fake_reply_chunked(&f, 1, "200 OK", "{\"type\":\"error\",\"error\":{\"code\":\"bad_request\",\"message\":\"no such suite\"}}\n", NULL);
        space_client *c = start_client(&f, 5000);
        int nprog = 0;
        const char *pk[] = { "python3", "curl", NULL };
        struct space_template_info ti;
        assert_int_equal(space_template_build(c, &(struct space_template_build_opts){ SPACE_TEMPLATE_BUILD_OPTS_INIT, .name = "py",
                                                                                      .debootstrap_suite = "bookworm", .packages = pk,
                                                                                      .on_progress = progress, .userdata = &nprog },
                                              &ti),
                         0);
        assert_int_equal(nprog, 2);
        assert_string_equal(ti.name, "py");
        assert_int_equal(ti.size_bytes, 1234);
        assert_int_equal(space_template_build(c, &(struct space_template_build_opts){ SPACE_TEMPLATE_BUILD_OPTS_INIT, .name = "py",
                                                                                      .debootstrap_suite = "nosuch" },
                                              &ti),
                         -EINVAL);
        assert_string_equal(space_client_last_error(c), "no such suite");
        /* two sources, or packages without a suite: refused before sending */
        assert_int_equal(space_template_build(c, &(struct space_template_build_opts){ SPACE_TEMPLATE_BUILD_OPTS_INIT, .name = "py",
                                                                                      .from_dir = "/a", .packages = pk },
                                              &ti),
                         -EINVAL);
        assert_int_equal(space_template_build(c, &(struct space_template_build_opts){ SPACE_TEMPLATE_BUILD_OPTS_INIT, .name = "py",
                                                                                      .from_dir = "/a", .from_tar = "/b" },
                                              &ti),
                         -EINVAL);
        finish(&f, NULL, c);
        const char *body = fake_request_body(&f, 0);
        assert_string_equal(body, "{\"name\":\"py\",\"debootstrap\":{\"suite\":\"bookworm\",\"packages\":[\"python3\",\"curl\"]}}");
        fake_free(&f);
}

static void test_processes(void **state) {
        (void)state;
        printf("checks: the process list parses (argv, running, exit code, signal) and signal sends its body\n");
        struct fake_server f = { .nreplies = 3 };
        fake_reply_json(&f, 1, "200 OK", "{\"processes\":[{\"pid\":5,\"argv\":[\"sleep\",\"9\"],\"running\":true,\"exit_code\":null,"
                                         "\"signal\":null,\"started_ms\":1,\"output_bytes\":0},{\"pid\":6,\"argv\":[\"true\"],"
                                         "\"running\":false,\"exit_code\":0,\"timed_out\":true,\"started_ms\":2,\"output_bytes\":10}]}");
        fake_reply_json(&f, 2, "200 OK", "{}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        struct space_process *p = NULL;
        size_t n = 0;
        assert_int_equal(space_process_list(s, &p, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(p[0].pid, 5);
        assert_string_equal(p[0].argv[1], "9");
        assert_null(p[0].argv[2]);
        assert_true(p[0].running);
        assert_false(p[0].has_exit_code);
        assert_true(p[1].has_exit_code);
        assert_true(p[1].timed_out);
        assert_false(p[0].timed_out);
        assert_int_equal(p[1].output_bytes, 10);
        space_process_list_free(p, n);
        assert_int_equal(space_signal(s, 5, 15), 0);
        assert_int_equal(space_signal(s, 5, 0), -EINVAL);
        finish(&f, s, c);
        assert_string_equal(fake_request_body(&f, 2), "{\"signal\":15}");
        fake_free(&f);
}


/* ---- durable sessions ------------------------------------------------------------ */

#define TOKEN "tok_AbC-123_xyz0123456789abcdefghijklmnopqrstu"
static const char SESSION_TOK[] = "{\"id\":\"ses_0123456789abcdef\",\"state\":\"running\",\"token\":\"" TOKEN "\","
                                  "\"head_snapshot\":null,\"snapshot_interval_ms\":5000,\"retention\":3}";
static const char SNAP[] = "{\"id\":\"snap_00000000000000a1\",\"session\":\"ses_0123456789abcdef\",\"parent\":null,"
                           "\"created_at\":\"2025-01-01T00:00:00Z\",\"reason\":\"manual\",\"label\":\"draft\","
                           "\"bytes_added\":4096,\"logical_size\":123456,\"root\":\"ab12\",\"store_snapshot\":\"cd34\",\"freeze_ms\":1.25}";

static void test_session_token(void **state) {
        (void)state;
        printf("checks: create sends snapshot/interval/retention, keeps the token, and sends it on the session's requests\n");
        struct fake_server f = { .nreplies = 4 };
        fake_reply_json(&f, 0, "201 Created", SESSION_TOK);
        fake_reply_json(&f, 1, "201 Created", SNAP);
        fake_reply_json(&f, 2, "401 Unauthorized", "{\"error\":{\"code\":\"unauthorized\",\"message\":\"wrong token\"}}");
        f.replies[3].raw = "HTTP/1.1 204 No Content\r\n\r\n";
        space_client *c = start_client(&f, 5000);
        space_session *s = NULL;
        assert_int_equal(space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT,
                                                                                 .snapshot = "snap_00000000000000a1",
                                                                                 .no_rolling_snapshots = true,
                                                                                 .retention = 3 }),
                         0);
        assert_string_equal(space_session_token(s), TOKEN);
        struct space_snapshot_info si;
        assert_int_equal(space_snapshot_create(s, "draft", &si), 0);
        assert_string_equal(si.id, "snap_00000000000000a1");
        assert_string_equal(si.reason, "manual");
        assert_string_equal(si.label, "draft");
        assert_string_equal(si.parent, "");
        assert_int_equal(si.bytes_added, 4096);
        assert_int_equal(si.logical_size, 123456);
        assert_string_equal(si.root, "ab12");
        assert_string_equal(si.store_snapshot, "cd34");
        assert_true(si.freeze_ms > 1.2 && si.freeze_ms < 1.3);
        /* a token with a CR or a space could smuggle a header: refused */
        assert_int_equal(space_session_set_token(s, "bad token"), -EINVAL);
        assert_int_equal(space_session_set_token(s, "x\r\nEvil: 1"), -EINVAL);
        assert_string_equal(space_session_token(s), TOKEN);
        assert_int_equal(space_session_set_token(s, "wrong"), 0);
        assert_int_equal(space_session_pause(s), -EPERM);
        assert_string_equal(space_client_last_error_code(c), "unauthorized");
        assert_int_equal(space_session_set_token(s, NULL), 0);
        assert_null(space_session_token(s));
        assert_int_equal(space_session_delete(s), 0);
        finish(&f, s, c);
        const char *body = fake_request_body(&f, 0);
        assert_non_null(strstr(body, "\"snapshot\":\"snap_00000000000000a1\""));
        assert_non_null(strstr(body, "\"snapshot_interval_ms\":0"));
        assert_non_null(strstr(body, "\"retention\":3"));
        assert_null(strcasestr(f.requests[0], "X-Space-Session-Token"));
        assert_int_equal(strncmp(f.requests[1], "POST /v1/sessions/ses_0123456789abcdef/snapshots HTTP/1.1\r\n", 59), 0);
        assert_non_null(strstr(f.requests[1], "\r\nX-Space-Session-Token: " TOKEN "\r\n"));
        assert_non_null(strstr(f.requests[1], "{\"label\":\"draft\"}"));
        assert_int_equal(strncmp(f.requests[2], "POST /v1/sessions/ses_0123456789abcdef/pause HTTP/1.1\r\n", 55), 0);
        assert_non_null(strstr(f.requests[2], "\r\nX-Space-Session-Token: wrong\r\n"));
        assert_int_equal(strncmp(f.requests[3], "DELETE /v1/sessions/ses_0123456789abcdef HTTP/1.1\r\n", 51), 0);
        assert_null(strcasestr(f.requests[3], "X-Space-Session-Token"));
        fake_free(&f);
}

static void test_lifecycle_and_fork(void **state) {
        (void)state;
        printf("checks: pause/resume/restore refresh the handle; fork returns handles with their own tokens; 409 maps\n");
        struct fake_server f = { .nreplies = 6 };
        fake_reply_json(&f, 1, "200 OK", "{\"id\":\"ses_0123456789abcdef\",\"state\":\"paused\",\"sandbox_id\":null,"
                                         "\"head_snapshot\":\"snap_00000000000000a2\"}");
        fake_reply_json(&f, 2, "409 Conflict", "{\"error\":{\"code\":\"conflict\",\"message\":\"session is paused\"}}");
        fake_reply_json(&f, 3, "200 OK", SESSION);
        fake_reply_json(&f, 4, "200 OK", SESSION);
        fake_reply_json(&f, 5, "201 Created", "{\"sessions\":[{\"id\":\"ses_000000000000000b\",\"state\":\"running\","
                                              "\"token\":\"tokB\",\"parent_session\":\"ses_0123456789abcdef\"},"
                                              "{\"id\":\"ses_000000000000000c\",\"state\":\"running\",\"token\":\"tokC\"}]}");
        space_client *c;
        space_session *s = open_session(&f, &c);
        assert_null(space_session_token(s));
        assert_int_equal(space_session_pause(s), 0);
        assert_non_null(strstr(space_session_json(s), "\"paused\""));
        assert_int_equal(space_session_pause(s), -EEXIST);
        assert_string_equal(space_client_last_error(c), "session is paused");
        assert_non_null(strstr(space_session_json(s), "\"paused\""));
        assert_int_equal(space_session_resume(s), 0);
        assert_non_null(strstr(space_session_json(s), "\"running\""));
        assert_int_equal(space_session_restore(s, "snap_00000000000000a1"), 0);
        assert_int_equal(space_session_restore(s, "../x"), -EINVAL);
        space_session **v = NULL;
        size_t n = 0;
        assert_int_equal(space_session_fork(s, &(struct space_fork_opts){ SPACE_FORK_OPTS_INIT, .count = 99 }, &v, &n), -E2BIG);
        assert_int_equal(space_session_fork(s, &(struct space_fork_opts){ SPACE_FORK_OPTS_INIT, .snapshot = "snap_00000000000000a1",
                                                                          .count = 2 },
                                            &v, &n),
                         0);
        assert_int_equal(n, 2);
        assert_string_equal(space_session_id(v[0]), "ses_000000000000000b");
        assert_string_equal(space_session_token(v[0]), "tokB");
        assert_non_null(strstr(space_session_json(v[0]), "\"parent_session\":\"ses_0123456789abcdef\""));
        assert_string_equal(space_session_id(v[1]), "ses_000000000000000c");
        assert_string_equal(space_session_token(v[1]), "tokC");
        space_session_array_free(v, n);
        finish(&f, s, c);
        assert_int_equal(strncmp(f.requests[3], "POST /v1/sessions/ses_0123456789abcdef/resume HTTP/1.1", 54), 0);
        assert_non_null(strstr(f.requests[4], "{\"snapshot\":\"snap_00000000000000a1\"}"));
        assert_non_null(strstr(f.requests[5], "{\"snapshot\":\"snap_00000000000000a1\",\"count\":2}"));
        fake_free(&f);
}

static void test_timeouts(void **state) {
        (void)state;
        printf("checks: timeouts: set (PUT of the text as it is), 400 -> -EINVAL with the message, bad text refused\n"
               "        before sending; create sends timeout, idle_timeout, their actions and auto_resume\n");
        const char *t = "{\"timeout\":null,\"timeout_action\":\"pause\",\"idle_timeout\":600,\"idle_action\":\"pause\","
                        "\"auto_resume\":true,\"last_activity\":\"2026-12-03T10:00:00.000Z\"}";
        struct fake_server f = { .nreplies = 5 };
        fake_reply_json(&f, 1, "200 OK", t);
        fake_reply_json(&f, 2, "400 Bad Request",
                        "{\"error\":{\"code\":\"bad_request\",\"message\":\"idle_timeout must be an integer\"}}");
        fake_reply_json(&f, 3, "201 Created", SESSION);
        fake_reply_json(&f, 4, "201 Created", SESSION);
        space_client *c;
        space_session *s = open_session(&f, &c);
        char *j = NULL;
        assert_int_equal(space_session_timeouts_set(s, "{\"idle_timeout\":600,\"auto_resume\":true}", &j), 0);
        assert_string_equal(j, t);
        free(j);
        assert_int_equal(space_session_timeouts_set(s, "{\"idle_timeout\":0}", NULL), -EINVAL);
        assert_string_equal(space_client_last_error(c), "idle_timeout must be an integer");
        assert_int_equal(space_session_timeouts_set(s, "{\"idle\":", NULL), -EINVAL);
        assert_int_equal(space_session_timeouts_set(s, "[]", NULL), -EINVAL);
        assert_int_equal(space_session_timeouts_set(s, NULL, NULL), -EINVAL);
        space_session *n = NULL;
        assert_int_equal(space_session_new(&n, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .timeout_s = 3600,
                                                                                 .timeout_delete = true, .idle_timeout_s = 60,
                                                                                 .auto_resume = true }),
                         0);
        space_session_free(n);
        assert_int_equal(space_session_new(&n, c, &(struct space_session_opts){ .version = 5, .timeout_s = 3600 }), 0);
        space_session_free(n);
        assert_int_equal(space_session_new(&n, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .idle_timeout_s = -1 }),
                         -EINVAL);
        finish(&f, s, c);
        assert_int_equal(strncmp(f.requests[1], "PUT /v1/sessions/ses_0123456789abcdef/timeouts HTTP/1.1", 55), 0);
        assert_string_equal(fake_request_body(&f, 1), "{\"idle_timeout\":600,\"auto_resume\":true}");
        assert_string_equal(fake_request_body(&f, 2), "{\"idle_timeout\":0}");
        const char *body = fake_request_body(&f, 3);
        assert_non_null(strstr(body, "\"timeout\":3600,\"timeout_action\":\"delete\",\"idle_timeout\":60,"
                                     "\"auto_resume\":true"));
        assert_null(strstr(body, "idle_action"));
        printf("check: a version 5 struct sends no timeouts\n");
        assert_null(strstr(fake_request_body(&f, 4), "timeout"));
        fake_free(&f);
}

static void test_network_policy(void **state) {
        (void)state;
        printf("checks: the network policy: get, set (PUT of the text as it is), 403 -> -EACCES with the message,\n"
               "        bad text refused before sending; create sends network_json as \"network\"\n");
        const char *pol = "{\"egress\":false,\"allow\":[\"example.com\"],\"deny\":[],\"bandwidth\":null}";
        struct fake_server f = { .nreplies = 5 };
        fake_reply_json(&f, 1, "200 OK", pol);
        fake_reply_json(&f, 2, "200 OK", pol);
        fake_reply_json(&f, 3, "403 Forbidden",
                        "{\"error\":{\"code\":\"forbidden\",\"message\":\"egress is off on this host (spaced --egress on)\"}}");
        fake_reply_json(&f, 4, "201 Created", SESSION);
        space_client *c;
        space_session *s = open_session(&f, &c);
        char *j = NULL;
        assert_int_equal(space_session_network_get(s, &j), 0);
        assert_string_equal(j, pol);
        free(j);
        j = NULL;
        assert_int_equal(space_session_network_set(s, pol, &j), 0);
        assert_string_equal(j, pol);
        free(j);
        assert_int_equal(space_session_network_set(s, "{\"egress\":true}", NULL), -EACCES);
        assert_string_equal(space_client_last_error(c), "egress is off on this host (spaced --egress on)");
        assert_int_equal(space_session_network_set(s, "{\"egress\":", NULL), -EINVAL);
        assert_int_equal(space_session_network_set(s, "true", NULL), -EINVAL);
        assert_int_equal(space_session_network_set(s, NULL, NULL), -EINVAL);
        space_session *n = NULL;
        assert_int_equal(space_session_new(&n, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .network = true,
                                                                                 .network_json = "{\"egress\": false}" }),
                         0);
        space_session_free(n);
        assert_int_equal(space_session_new(&n, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT,
                                                                                 .network_json = "{nope" }),
                         -EINVAL);
        finish(&f, s, c);
        assert_int_equal(strncmp(f.requests[1], "GET /v1/sessions/ses_0123456789abcdef/network HTTP/1.1", 54), 0);
        assert_int_equal(strncmp(f.requests[2], "PUT /v1/sessions/ses_0123456789abcdef/network HTTP/1.1", 54), 0);
        assert_string_equal(fake_request_body(&f, 2), pol);
        assert_string_equal(fake_request_body(&f, 3), "{\"egress\":true}");
        assert_non_null(strstr(fake_request_body(&f, 4), "\"network\":{\"egress\":false}"));
        assert_null(strstr(fake_request_body(&f, 4), "\"network\":true"));
        fake_free(&f);
}

static void test_events_connect_gc(void **state) {
        (void)state;
        printf("checks: event pages (after/limit/next/more), append, connect with a token, snapshot list, gc\n");
        struct fake_server f = { .nreplies = 6 };
        fake_reply_json(&f, 0, "200 OK", "{\"id\":\"ses_0123456789abcdef\",\"state\":\"running\",\"processes\":[{\"pid\":7}]}");
        fake_reply_json(&f, 1, "200 OK", "{\"events\":[{\"seq\":5,\"time\":\"T5\",\"kind\":\"lifecycle\","
                                         "\"data\":{\"event\":\"created\",\"snapshot\":null}},"
                                         "{\"seq\":6,\"time\":\"T6\",\"kind\":\"agent\",\"data\":{\"a\":[1,2]}}],"
                                         "\"next\":6,\"more\":true}");
        fake_reply_json(&f, 2, "201 Created", "{\"seq\":7}");
        fake_reply_json(&f, 3, "200 OK", "{\"snapshots\":[" "{\"id\":\"snap_1\",\"reason\":\"rolling\"},{\"id\":\"snap_2\","
                                         "\"parent\":\"snap_1\",\"reason\":\"pause\"}]}");
        fake_reply_json(&f, 4, "200 OK", "{\"objects_removed\":12,\"bytes_freed\":34567}");
        fake_reply_json(&f, 5, "401 Unauthorized", "{\"error\":{\"code\":\"unauthorized\",\"message\":\"bad token\"}}");
        space_client *c = start_client(&f, 5000);
        space_session *s = NULL;
        assert_int_equal(space_session_connect(&s, c, "ses_0123456789abcdef", "secretTOKEN"), 0);
        assert_string_equal(space_session_token(s), "secretTOKEN");
        assert_non_null(strstr(space_session_json(s), "\"processes\""));
        struct space_event_page p;
        assert_int_equal(space_event_list(s, 4, 2, &p), 0);
        assert_int_equal(p.n, 2);
        assert_int_equal(p.events[0].seq, 5);
        assert_string_equal(p.events[0].kind, "lifecycle");
        assert_string_equal(p.events[0].time, "T5");
        assert_string_equal(p.events[0].data, "{\"event\":\"created\",\"snapshot\":null}");
        assert_string_equal(p.events[1].data, "{\"a\":[1,2]}");
        assert_int_equal(p.next, 6);
        assert_true(p.more);
        space_event_page_free(&p);
        assert_int_equal(space_event_list(s, 0, SPACE_MAX_EVENT_PAGE + 1, &p), -E2BIG);
        assert_int_equal(space_event_append(s, "note", "{not json", NULL), -EINVAL);
        uint64_t seq = 0;
        assert_int_equal(space_event_append(s, "note", "{\"text\":\"hi\"}", &seq), 0);
        assert_int_equal(seq, 7);
        struct space_snapshot_info *sv = NULL;
        size_t sn = 0;
        assert_int_equal(space_snapshot_list(s, &sv, &sn), 0);
        assert_int_equal(sn, 2);
        assert_string_equal(sv[1].parent, "snap_1");
        assert_string_equal(sv[1].reason, "pause");
        assert_true(sv[1].freeze_ms < 0);
        free(sv);
        struct space_gc_result g;
        assert_int_equal(space_gc(c, &g), 0);
        assert_int_equal(g.objects_removed, 12);
        assert_int_equal(g.bytes_freed, 34567);
        space_session_free(s);
        s = NULL;
        assert_int_equal(space_session_connect(&s, c, "ses_0123456789abcdef", "other"), -EPERM);
        assert_null(s);
        assert_int_equal(space_session_connect(&s, c, "ses_0123456789abcdef", "has space"), -EINVAL);
        finish(&f, NULL, c);
        assert_int_equal(strncmp(f.requests[0], "POST /v1/sessions/ses_0123456789abcdef/connect HTTP/1.1", 55), 0);
        assert_non_null(strstr(f.requests[0], "{\"token\":\"secretTOKEN\"}"));
        assert_int_equal(strncmp(f.requests[1], "GET /v1/sessions/ses_0123456789abcdef/events?after=4&limit=2 HTTP/1.1", 69), 0);
        assert_non_null(strstr(f.requests[1], "\r\nX-Space-Session-Token: secretTOKEN\r\n"));
        assert_non_null(strstr(f.requests[2], "{\"kind\":\"note\",\"data\":{\"text\":\"hi\"}}"));
        assert_int_equal(strncmp(f.requests[4], "POST /v1/gc HTTP/1.1", 20), 0);
        fake_free(&f);
}

static void test_connect_refused(void **state) {
        (void)state;
        printf("checks: no daemon -> a clear 'cannot connect' error\n");
        space_client *c = NULL;
        assert_int_equal(space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = "/nonexistent/spaced.sock" }), 0);
        char *j = NULL;
        assert_int_equal(space_health(c, &j), -ENOENT);
        assert_non_null(strstr(space_client_last_error(c), "cannot connect to spaced at unix:/nonexistent/spaced.sock"));
        space_client_free(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_addr_parse),
                cmocka_unit_test(test_default_host),
                cmocka_unit_test(test_keepalive),
                cmocka_unit_test(test_reconnect_after_server_close),
                cmocka_unit_test(test_connection_close_header),
                cmocka_unit_test(test_create_request),
                cmocka_unit_test(test_inspect_fields),
                cmocka_unit_test(test_exec_stream),
                cmocka_unit_test(test_exec_framed),
                cmocka_unit_test(test_exec_signal_and_binary_stdin),
                cmocka_unit_test(test_exec_background),
                cmocka_unit_test(test_exec_errors),
                cmocka_unit_test(test_error_mapping),
                cmocka_unit_test(test_malformed_answers),
                cmocka_unit_test(test_size_limits),
                cmocka_unit_test(test_timeout),
                cmocka_unit_test(test_files),
                cmocka_unit_test(test_user),
                cmocka_unit_test(test_early_answer),
                cmocka_unit_test(test_list_pages_and_attach_end),
                cmocka_unit_test(test_template_build),
                cmocka_unit_test(test_processes),
                cmocka_unit_test(test_connect_refused),
                cmocka_unit_test(test_session_token),
                cmocka_unit_test(test_api_token),
                cmocka_unit_test(test_lifecycle_and_fork),
                cmocka_unit_test(test_events_connect_gc),
                cmocka_unit_test(test_network_policy),
                cmocka_unit_test(test_timeouts),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
