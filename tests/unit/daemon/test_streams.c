/* Unit tests of a request's path from an HTTP client through spaced to space-init and
 * back, in-process: a socketpair stands in for the client, another for space-init (the
 * test speaks its frames), and a fake runtime hands spaced the latter. Checks what the
 * end-to-end tests cannot reach: a client that reads slower than its command writes, with
 * an init that has no stream windows (the whole sandbox waits for it, and goes on when it
 * catches up or leaves) and with one that has (only its stream waits); and an upload that
 * pauses while init's queue is full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/json.h"
#include "common/proto.h"
#include "common/text.h"
#include "daemon/auth.h"
#include "daemon/spaced.h"
#include "daemon/http.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "runtime/runtime.h"

#define SES_ID "ses_0123456789abcdef"
#define CMD_PID 42
#define OUT_FRAME (32u << 10)

struct fixture {
        struct daemon d;
        struct session *s;
        int client;      /* the HTTP client's end */
        int init;        /* space-init's end */
        int init_spaced; /* spaced's end of it (the fake sandbox's) */
        int pidfd;       /* never readable: init does not exit */
        struct buf from_init_side; /* frames spaced sent, not yet taken by the test */
        struct buf to_spaced;      /* frames init sends, not yet taken by its socket */
        char tmp[64];
};

static struct fixture *cur;

static int fake_init_fd(struct rt_sandbox *sb) { (void)sb; return cur->init_spaced; }
static int fake_pid_fd(struct rt_sandbox *sb) { (void)sb; return cur->pidfd; }
static pid_t fake_init_pid(struct rt_sandbox *sb) { (void)sb; return 4242; }
static int fake_health(struct rt_sandbox *sb, struct rt_health *ret) {
        (void)sb;
        *ret = (struct rt_health){ .alive = true };
        return 0;
}
static int fake_destroy(struct rt_sandbox *sb) { (void)sb; return 0; }

/* Just what session.c calls: the sandbox is the test's socket and an idle pidfd. */
static const struct runtime_ops fake_rt = {
        .name = "fake", .init_fd = fake_init_fd, .pid_fd = fake_pid_fd, .init_pid = fake_init_pid,
        .health = fake_health, .destroy = fake_destroy,
};

static int sandbox_token;

static void nonblock(int fd) { assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0); }

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        cur = f;
        snprintf(f->tmp, sizeof f->tmp, "/tmp/spaced-streams.XXXXXX");
        assert_non_null(mkdtemp(f->tmp));
        f->d = (struct daemon){ .data_dir = f->tmp, .rt = &fake_rt, .router = &api_router,
                                .unix_src.fd = -1, .tcp_src.fd = -1, .accept_src.fd = -1 };
        assert_int_equal(loop_new(&f->d.loop), 0);
        char path[128];
        snprintf(path, sizeof path, "%s/meta.db", f->tmp);
        assert_int_equal(meta_open(path, NULL, &f->d.meta), 0);
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        assert_int_equal(srv_conn_new(&f->d, sv[0]), 0);
        f->client = sv[1];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        f->init_spaced = sv[0];
        f->init = sv[1];
        nonblock(f->init);
        f->pidfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        assert_true(f->pidfd >= 0);
        f->from_init_side = BUF_INIT(0);
        f->to_spaced = BUF_INIT(0);

        struct session *s;
        assert_int_equal(ses_alloc(&f->d, SES_ID, &s), 0);
        s->template = strdup("base");
        snprintf(s->tenant, sizeof s->tenant, "%s", AUTH_LOCAL_TENANT);
        s->state = META_SESSION_RUNNING;
        s->sb = (struct rt_sandbox *)&sandbox_token;
        assert_int_equal(ses_watch(s), 0);
        f->s = s;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        srv_close_all(&f->d);
        ses_free(f->s);
        loop_run_once(f->d.loop, 0);
        f->d.loop = loop_free(f->d.loop);
        f->d.meta = meta_free(f->d.meta);
        if (f->client >= 0)
                close(f->client);
        close(f->init);
        close(f->init_spaced);
        close(f->pidfd);
        buf_free(&f->from_init_side);
        buf_free(&f->to_spaced);
        char path[128];
        static const char *const files[] = { "meta.db", "meta.db-wal", "meta.db-shm" };
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s/%s", f->tmp, files[i]);
                unlink(path);
        }
        rmdir(f->tmp);
        free(f);
        return 0;
}

static void turn(struct fixture *f, int times) {
        for (int i = 0; i < times; i++)
                loop_run_once(f->d.loop, 1);
}

/* Writes what init has queued for spaced as far as its socket takes it. */
static void init_pump(struct fixture *f) {
        while (f->to_spaced.len) {
                ssize_t w = send(f->init, f->to_spaced.data, f->to_spaced.len, MSG_NOSIGNAL);
                if (w <= 0) {
                        assert_true(w < 0 && errno == EAGAIN);
                        return;
                }
                buf_consume(&f->to_spaced, (size_t)w);
        }
}

/* Queues one frame as space-init; false while the last one still waits for room (spaced
 * does not read). */
static bool init_try_send(struct fixture *f, uint8_t type, uint32_t id, const void *p, size_t n) {
        init_pump(f);
        if (f->to_spaced.len)
                return false;
        assert_int_equal(proto_frame_append(&f->to_spaced, type, id, p, (uint32_t)n), 0);
        init_pump(f);
        return true;
}

/* Waits until what init queued went to spaced. */
static void init_flush(struct fixture *f) {
        for (int i = 0; i < 2000 && f->to_spaced.len; i++) {
                turn(f, 1);
                init_pump(f);
        }
        assert_int_equal(f->to_spaced.len, 0);
}

static void init_send_json(struct fixture *f, uint8_t type, uint32_t id, const char *json) {
        init_flush(f);
        assert_true(init_try_send(f, type, id, json, strlen(json)));
        init_flush(f);
}

/* The next frame spaced sent to init (turning the loop until one is whole). */
static void init_next_frame(struct fixture *f, struct proto_hdr *h, struct json **j, struct buf *payload) {
        for (int tries = 0; tries < 500; tries++) {
                const uint8_t *p;
                int r = proto_frame_peek(&f->from_init_side, h, &p);
                assert_true(r >= 0);
                if (r == 1) {
                        if (j) {
                                *j = NULL;
                                if (proto_type_is_json(h->type))
                                        assert_int_equal(json_parse((const char *)p, h->len, j, NULL, 0), 0);
                        }
                        if (payload) {
                                buf_reset(payload);
                                assert_int_equal(buf_append(payload, p, h->len), 0);
                        }
                        buf_consume(&f->from_init_side, PROTO_HDR_SIZE + h->len);
                        return;
                }
                char tmp[65536];
                ssize_t n = recv(f->init, tmp, sizeof tmp, MSG_DONTWAIT);
                if (n > 0)
                        assert_int_equal(buf_append(&f->from_init_side, tmp, (size_t)n), 0);
                else
                        turn(f, 1);
        }
        fail_msg("spaced sent init no frame");
}

/* Whether spaced sent a whole frame to init now (without waiting). */
static bool init_has_frame(struct fixture *f) {
        char tmp[65536];
        ssize_t n;
        while ((n = recv(f->init, tmp, sizeof tmp, MSG_DONTWAIT)) > 0)
                assert_int_equal(buf_append(&f->from_init_side, tmp, (size_t)n), 0);
        struct proto_hdr h;
        const uint8_t *p;
        return proto_frame_peek(&f->from_init_side, &h, &p) == 1;
}

static void hello(struct fixture *f, bool window) {
        char j[64];
        snprintf(j, sizeof j, "{\"version\":%d,\"pid\":1%s}", PROTO_VERSION, window ? ",\"window\":true" : "");
        init_send_json(f, PROTO_HELLO, 0, j);
        for (int i = 0; i < 100 && !f->s->ready; i++)
                turn(f, 1);
        assert_true(f->s->ready);
}

static void client_send(struct fixture *f, const char *req) {
        size_t len = strlen(req), off = 0;
        while (off < len) {
                ssize_t n = send(f->client, req + off, len - off, MSG_NOSIGNAL);
                if (n > 0)
                        off += (size_t)n;
                turn(f, 1);
        }
}

/* What the client got so far, appended to out (kept NUL-terminated). */
static void client_drain(struct fixture *f, struct buf *out) {
        char tmp[65536];
        ssize_t n;
        while ((n = recv(f->client, tmp, sizeof tmp, MSG_DONTWAIT)) > 0)
                assert_int_equal(buf_append(out, tmp, (size_t)n), 0);
        assert_int_equal(buf_putc(out, '\0'), 0);
        out->len--;
}

static bool stream_ended(const struct buf *b) { return b->len >= 5 && memcmp(b->data + b->len - 5, "0\r\n\r\n", 5) == 0; }

static size_t count_char(const struct buf *b, char ch) {
        size_t n = 0;
        for (size_t i = 0; i < b->len; i++)
                n += b->data[i] == ch;
        return n;
}

/* The client sends request; init gets a REQ of op (returned, with its id). */
static struct json *request_to_init(struct fixture *f, const char *request, const char *op, uint32_t *id) {
        client_send(f, request);
        struct proto_hdr h;
        struct json *j;
        init_next_frame(f, &h, &j, NULL);
        assert_int_equal(h.type, PROTO_REQ);
        assert_string_equal(json_get_str(j, "op"), op);
        *id = h.id;
        return j;
}

/* POST exec; returns the REQ's id once init got it, and answers it with pid CMD_PID. */
static uint32_t start_exec(struct fixture *f, bool expect_window) {
        static const char body[] = "{\"argv\":[\"flood\"]}";
        char req[256];
        snprintf(req, sizeof req, "POST /v1/sessions/" SES_ID "/exec HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
                 sizeof body - 1, body);
        uint32_t id;
        struct json *j = request_to_init(f, req, "exec", &id);
        int64_t w = 0;
        assert_int_equal(json_get_int(j, "window", &w) == 0, expect_window);
        if (expect_window)
                assert_int_equal(w, SES_STREAM_WINDOW);
        json_free(j);
        char resp[64];
        snprintf(resp, sizeof resp, "{\"pid\":%d}", CMD_PID);
        init_send_json(f, PROTO_RESP, id, resp);
        turn(f, 3);
        return id;
}

static struct buf out_frame(void) {
        struct buf b = BUF_INIT(0);
        for (size_t i = 0; i < OUT_FRAME; i++)
                assert_int_equal(buf_putc(&b, 'Q'), 0);
        return b;
}

/* Sends stdout frames until spaced stops taking them (a stall: its socket to init fills)
 * or limit frames went; returns how many went. */
static size_t flood_until_stalled(struct fixture *f, uint32_t id, size_t limit) {
        struct buf q = out_frame();
        size_t sent = 0;
        int refused = 0;
        while (sent < limit && refused < 20) {
                if (init_try_send(f, PROTO_STDOUT, id, q.data, q.len)) {
                        sent++;
                        refused = 0;
                } else {
                        refused++;
                }
                turn(f, 1);
        }
        buf_free(&q);
        return sent;
}

static void test_stall_without_windows(void **state) {
        struct fixture *f = *state;
        hello(f, false);
        uint32_t id = start_exec(f, false);
        struct buf got = BUF_INIT(0);
        client_drain(f, &got);
        assert_non_null(strstr(got.data, "HTTP/1.1 200 OK\r\n"));
        assert_non_null(strstr(got.data, "{\"type\":\"start\",\"pid\":42}"));

        printf("check: an init without windows, a client that reads nothing: the session stops reading init\n");
        size_t sent = flood_until_stalled(f, id, 1024);
        assert_true(sent < 1024);
        assert_true(f->s->stalled);
        assert_non_null(f->s->ops);
        assert_true(f->s->ops->stalling);
        assert_true(f->d.conns->out.len - f->d.conns->out_off <= CONN_OUT_HIGH + 2 * OUT_FRAME);

        printf("check: once the client catches up, the session reads on and every byte arrives\n");
        struct buf q = out_frame();
        size_t total = 128;
        while (sent < total) {
                client_drain(f, &got);
                if (init_try_send(f, PROTO_STDOUT, id, q.data, q.len))
                        sent++;
                turn(f, 1);
        }
        buf_free(&q);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":0}");
        for (int i = 0; i < 2000 && !stream_ended(&got); i++) {
                client_drain(f, &got);
                turn(f, 1);
        }
        assert_false(f->s->stalled);
        assert_int_equal(count_char(&got, 'Q'), total * OUT_FRAME);
        assert_non_null(strstr(got.data, "{\"type\":\"exit\",\"exit_code\":0}\n\r\n0\r\n\r\n"));
        assert_null(f->s->ops);
        buf_free(&got);
}

static void test_stalled_client_leaves(void **state) {
        struct fixture *f = *state;
        hello(f, false);
        uint32_t id = start_exec(f, false);
        size_t sent = flood_until_stalled(f, id, 1024);
        assert_true(sent < 1024);
        assert_true(f->s->stalled);

        printf("check: the client that stalled the session leaves: its command is killed, the session reads on\n");
        close(f->client);
        f->client = -1;
        struct proto_hdr h;
        struct json *j;
        struct buf q = out_frame();
        bool killed = false;
        for (int i = 0; i < 200 && !killed; i++) {
                /* Output still in the socket is read and dropped now: more may follow. */
                (void)init_try_send(f, PROTO_STDOUT, id, q.data, q.len);
                turn(f, 1);
                if (!init_has_frame(f))
                        continue;
                init_next_frame(f, &h, &j, NULL);
                if (h.type == PROTO_REQ && json_get_str(j, "op") && strcmp(json_get_str(j, "op"), "signal") == 0) {
                        int64_t v;
                        assert_int_equal(json_get_int(j, "pid", &v), 0);
                        assert_int_equal(v, CMD_PID);
                        assert_int_equal(json_get_int(j, "signal", &v), 0);
                        assert_int_equal(v, 9);
                        assert_true(json_get_bool(j, "group", false));
                        killed = true;
                }
                json_free(j);
        }
        buf_free(&q);
        assert_true(killed);
        assert_false(f->s->stalled);
        init_send_json(f, PROTO_EXIT, id, "{\"signal\":9}");
        turn(f, 5);
        /* The kill's RESP is dropped; the exec ended with its EXIT. */
        for (struct op *op = f->s->ops; op; op = op->next)
                assert_int_equal(op->kind, OP_KILL);
}

static void test_windows_hold_only_the_stream(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        uint32_t id = start_exec(f, true);
        struct buf got = BUF_INIT(0), q = out_frame();
        uint64_t credit = SES_STREAM_WINDOW, sent = 0, total = 64;
        struct proto_hdr h;
        struct buf p = BUF_INIT(0);

        printf("check: with windows, a client that reads nothing holds back its stream, not the session\n");
        for (int idle = 0; idle < 20 && sent < total;) {
                if (credit >= OUT_FRAME && init_try_send(f, PROTO_STDOUT, id, q.data, q.len)) {
                        credit -= OUT_FRAME;
                        sent++;
                        idle = 0;
                } else {
                        idle++;
                }
                turn(f, 1);
                while (init_has_frame(f)) {
                        init_next_frame(f, &h, NULL, &p);
                        assert_int_equal(h.type, PROTO_WINDOW);
                        credit += proto_window_decode((const uint8_t *)p.data);
                }
        }
        assert_true(sent < total);
        assert_false(f->s->stalled);
        assert_true(credit < OUT_FRAME);
        assert_true(f->d.conns->out.len - f->d.conns->out_off <= CONN_OUT_HIGH + SES_STREAM_WINDOW + OUT_FRAME);

        printf("check: the client reads: the window opens again and every byte arrives\n");
        for (int i = 0; i < 5000 && sent < total; i++) {
                client_drain(f, &got);
                turn(f, 1);
                while (init_has_frame(f)) {
                        init_next_frame(f, &h, NULL, &p);
                        assert_int_equal(h.type, PROTO_WINDOW);
                        credit += proto_window_decode((const uint8_t *)p.data);
                }
                if (credit >= OUT_FRAME && init_try_send(f, PROTO_STDOUT, id, q.data, q.len)) {
                        credit -= OUT_FRAME;
                        sent++;
                }
        }
        assert_int_equal(sent, total);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":3}");
        for (int i = 0; i < 2000 && !stream_ended(&got); i++) {
                client_drain(f, &got);
                turn(f, 1);
        }
        assert_int_equal(count_char(&got, 'Q'), total * OUT_FRAME);
        assert_non_null(strstr(got.data, "{\"type\":\"exit\",\"exit_code\":3}\n\r\n0\r\n\r\n"));
        assert_null(f->s->ops);
        buf_free(&p);
        buf_free(&q);
        buf_free(&got);
}

static void test_upload_pauses(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        const size_t total = 4u << 20;
        char head[256];
        snprintf(head, sizeof head, "PUT /v1/sessions/" SES_ID "/files?path=/big HTTP/1.1\r\nContent-Length: %zu\r\n\r\n",
                 total);
        uint32_t id;
        struct json *j = request_to_init(f, head, "write", &id);
        assert_string_equal(json_get_str(j, "path"), "/big");
        json_free(j);
        struct proto_hdr h;

        printf("check: an upload to an init that reads nothing pauses at spaced's bound\n");
        char chunk[65536];
        memset(chunk, 'Z', sizeof chunk);
        size_t off = 0;
        for (int idle = 0; idle < 20 && off < total;) {
                ssize_t n = send(f->client, chunk, MIN(sizeof chunk, total - off), MSG_NOSIGNAL);
                if (n > 0) {
                        off += (size_t)n;
                        idle = 0;
                } else {
                        idle++;
                }
                turn(f, 1);
        }
        assert_true(off < total);
        assert_true(f->d.conns->in_paused);
        assert_true(f->s->out.len - f->s->out_off <= SES_OUT_MAX);

        printf("check: init takes the data: the upload goes on to its end and is answered 201\n");
        struct buf data = BUF_INIT(0);
        size_t received = 0;
        bool ended = false;
        for (int i = 0; i < 20000 && !ended; i++) {
                if (off < total) {
                        ssize_t n = send(f->client, chunk, MIN(sizeof chunk, total - off), MSG_NOSIGNAL);
                        if (n > 0)
                                off += (size_t)n;
                }
                turn(f, 1);
                while (init_has_frame(f)) {
                        init_next_frame(f, &h, NULL, &data);
                        assert_int_equal(h.type, PROTO_DATA);
                        assert_int_equal(h.id, id);
                        received += h.len;
                        if (h.len == 0)
                                ended = true;
                }
        }
        assert_true(ended);
        assert_int_equal(received, total);
        char resp[64];
        snprintf(resp, sizeof resp, "{\"written\":%zu}", total);
        init_send_json(f, PROTO_RESP, id, resp);
        struct buf got = BUF_INIT(0);
        client_drain(f, &got);
        for (int i = 0; i < 200 && !strstr(got.data, "}\n"); i++) {
                turn(f, 1);
                client_drain(f, &got);
        }
        assert_non_null(strstr(got.data, "HTTP/1.1 201 "));
        snprintf(resp, sizeof resp, "{\"written\":%zu}\n", total);
        assert_non_null(strstr(got.data, resp));
        assert_null(f->s->ops);
        buf_free(&got);
        buf_free(&data);
}

/* Every NDJSON line of a stream's body (chunk framing stripped: each event is one chunk
 * ending in a newline, and JSON text never holds a raw newline). */
static size_t stream_events(const struct buf *body, struct json **evs, size_t max) {
        size_t n = 0;
        const char *p = body->data, *end = body->data + body->len;
        while (n < max && (p = memmem(p, (size_t)(end - p), "\r\n{", 3))) {
                p += 2;
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                assert_non_null(nl);
                char err[128] = "";
                if (json_parse(p, (size_t)(nl - p), &evs[n], err, sizeof err) < 0)
                        fail_msg("event %zu does not parse (%s): %.*s", n, err, (int)MIN(nl - p, 200), p);
                n++;
                p = nl;
        }
        return n;
}

/* Appends what a stdout/stderr event carries (data or data_b64) to out. */
static void event_bytes(const struct json *ev, struct buf *out) {
        const char *d = json_get_str(ev, "data");
        const char *b = json_get_str(ev, "data_b64");
        assert_true((d != NULL) != (b != NULL));
        if (d)
                assert_int_equal(buf_append(out, d, strlen(d)), 0);
        else
                assert_int_equal(text_b64_decode(out, b, strlen(b)), 0);
}

static void test_output_every_byte(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        uint32_t id = start_exec(f, true);
        uint8_t all[256 + 3];
        memcpy(all, "a\0b", 3);
        for (int i = 0; i < 256; i++)
                all[3 + i] = (uint8_t)i;
        printf("check: a NUL byte, then every byte 0..255, then invalid UTF-8 reach the client as JSON it parses\n");
        init_send_json(f, PROTO_STDOUT, id, "x"); /* plain text, for contrast */
        init_flush(f);
        assert_true(init_try_send(f, PROTO_STDOUT, id, all, 3));
        init_flush(f);
        assert_true(init_try_send(f, PROTO_STDOUT, id, all + 3, 256));
        init_flush(f);
        assert_true(init_try_send(f, PROTO_STDERR, id, "\xff\xfe\0", 3));
        init_flush(f);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":0}");
        struct buf got = BUF_INIT(0);
        for (int i = 0; i < 2000 && !stream_ended(&got); i++) {
                client_drain(f, &got);
                turn(f, 1);
        }
        assert_true(stream_ended(&got));
        struct json *evs[16];
        size_t n = stream_events(&got, evs, 16);
        struct buf out = BUF_INIT(0), err = BUF_INIT(0);
        for (size_t i = 0; i < n; i++) {
                const char *t = json_get_str(evs[i], "type");
                if (strcmp(t, "stdout") == 0)
                        event_bytes(evs[i], &out);
                else if (strcmp(t, "stderr") == 0)
                        event_bytes(evs[i], &err);
                json_free(evs[i]);
        }
        assert_int_equal(out.len, 1 + sizeof all);
        assert_memory_equal(out.data, "x", 1);
        assert_memory_equal(out.data + 1, all, sizeof all);
        assert_int_equal(err.len, 3);
        assert_memory_equal(err.data, "\xff\xfe\0", 3);
        buf_free(&out);
        buf_free(&err);
        buf_free(&got);
}

/* Sends what the socket takes of b (from *off); returns whether any went. */
static bool client_push(struct fixture *f, const struct buf *b, size_t *off) {
        if (*off >= b->len)
                return false;
        ssize_t n = send(f->client, b->data + *off, b->len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0)
                return false;
        *off += (size_t)n;
        return true;
}

/* Init's side of a streamed stdin: takes the frames spaced sent, counting STDIN bytes
 * (checking they are 0,1,..,255,0,..) and noting the EOF. */
static void take_stdin(struct fixture *f, uint32_t id, size_t *got, bool *eof) {
        struct proto_hdr h;
        struct buf p = BUF_INIT(0);
        while (init_has_frame(f)) {
                init_next_frame(f, &h, NULL, &p);
                if (h.type == PROTO_WINDOW)
                        continue; /* output grants */
                assert_int_equal(h.type, PROTO_STDIN);
                assert_int_equal(h.id, id);
                for (size_t i = 0; i < h.len; i++)
                        assert_int_equal((uint8_t)p.data[i], (uint8_t)(*got + i));
                *got += h.len;
                if (h.len == 0)
                        *eof = true;
        }
        buf_free(&p);
}

static void test_stdin_stream(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        const size_t total = 8u << 20;
        static const char line[] = "{\"argv\":[\"cat\"]}\n";
        /* chunked: the JSON line and the first bytes in one chunk, the rest in 64 KiB chunks */
        struct buf req = BUF_INIT(0);
        assert_int_equal(buf_printf(&req, "POST /v1/sessions/" SES_ID "/exec?stdin=stream HTTP/1.1\r\n"
                                          "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s",
                                    sizeof line - 1 + 10, line), 0);
        size_t made = 0;
        for (; made < 10; made++)
                assert_int_equal(buf_putc(&req, (char)made), 0);
        assert_int_equal(buf_puts(&req, "\r\n"), 0);
        while (made < total) {
                size_t n = MIN((size_t)65536, total - made);
                assert_int_equal(buf_printf(&req, "%zx\r\n", n), 0);
                for (size_t i = 0; i < n; i++)
                        assert_int_equal(buf_putc(&req, (char)(made + i)), 0);
                made += n;
                assert_int_equal(buf_puts(&req, "\r\n"), 0);
        }
        assert_int_equal(buf_puts(&req, "0\r\n\r\n"), 0);

        size_t off = 0;
        for (int i = 0; i < 50 && !init_has_frame(f); i++) {
                client_push(f, &req, &off);
                turn(f, 1);
        }
        struct proto_hdr h;
        struct json *j;
        init_next_frame(f, &h, &j, NULL);
        assert_int_equal(h.type, PROTO_REQ);
        assert_string_equal(json_get_str(j, "op"), "exec");
        assert_true(json_get_bool(j, "stdin", false));
        assert_true(json_get_bool(j, "stdin_acks", false));
        json_free(j);
        uint32_t id = h.id;
        char resp[64];
        snprintf(resp, sizeof resp, "{\"pid\":%d,\"stdin_acks\":true}", CMD_PID);
        init_send_json(f, PROTO_RESP, id, resp);

        printf("check: stdin=stream: an init that acks nothing holds the client at spaced's credit\n");
        size_t got = 0;
        bool eof = false;
        for (int idle = 0; idle < 30;) {
                idle = client_push(f, &req, &off) ? 0 : idle + 1;
                turn(f, 1);
                take_stdin(f, id, &got, &eof);
        }
        assert_false(eof);
        assert_true(got < total);
        assert_true(got <= SES_STDIN_CREDIT + SES_UPLOAD_FRAME);
        assert_true(f->d.conns->in_paused);

        printf("check: output flows while stdin waits; acks let stdin go on to its end and EOF\n");
        assert_true(init_try_send(f, PROTO_STDOUT, id, "out", 3));
        size_t acked = 0;
        for (int i = 0; i < 20000 && !eof; i++) {
                client_push(f, &req, &off);
                turn(f, 1);
                take_stdin(f, id, &got, &eof);
                if (got > acked) {
                        uint8_t w[PROTO_WINDOW_LEN];
                        proto_window_encode((uint32_t)(got - acked), w);
                        if (init_try_send(f, PROTO_WINDOW, id, w, sizeof w))
                                acked = got;
                }
        }
        assert_true(eof);
        assert_int_equal(got, total);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":0}");
        struct buf out = BUF_INIT(0);
        for (int i = 0; i < 2000 && !stream_ended(&out); i++) {
                client_drain(f, &out);
                turn(f, 1);
        }
        assert_non_null(strstr(out.data, "{\"type\":\"start\",\"pid\":42}"));
        assert_non_null(strstr(out.data, "{\"type\":\"stdout\",\"data\":\"out\"}"));
        assert_non_null(strstr(out.data, "{\"type\":\"exit\",\"exit_code\":0}"));
        assert_null(f->s->ops);
        buf_free(&out);
        buf_free(&req);
}

static void test_stdin_stream_old_init(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        printf("check: stdin=stream to an init that does not ack (no stdin_acks in its RESP): every byte "
               "still goes, bounded by the queue to init\n");
        const size_t total = 4u << 20;
        static const char line[] = "{\"argv\":[\"cat\"]}\n";
        struct buf req = BUF_INIT(0);
        assert_int_equal(buf_printf(&req, "POST /v1/sessions/" SES_ID "/exec?stdin=stream HTTP/1.1\r\n"
                                          "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n",
                                    sizeof line - 1, line), 0);
        for (size_t made = 0; made < total;) {
                size_t n = MIN((size_t)65536, total - made);
                assert_int_equal(buf_printf(&req, "%zx\r\n", n), 0);
                for (size_t i = 0; i < n; i++)
                        assert_int_equal(buf_putc(&req, (char)(made + i)), 0);
                made += n;
                assert_int_equal(buf_puts(&req, "\r\n"), 0);
        }
        assert_int_equal(buf_puts(&req, "0\r\n\r\n"), 0);
        size_t off = 0;
        for (int i = 0; i < 50 && !init_has_frame(f); i++) {
                client_push(f, &req, &off);
                turn(f, 1);
        }
        struct proto_hdr h;
        struct json *j;
        init_next_frame(f, &h, &j, NULL);
        assert_int_equal(h.type, PROTO_REQ);
        json_free(j);
        uint32_t id = h.id;
        char resp[64];
        snprintf(resp, sizeof resp, "{\"pid\":%d}", CMD_PID);
        init_send_json(f, PROTO_RESP, id, resp);
        size_t got = 0;
        bool eof = false;
        for (int i = 0; i < 20000 && !eof; i++) {
                client_push(f, &req, &off);
                turn(f, 1);
                take_stdin(f, id, &got, &eof);
        }
        assert_true(eof);
        assert_int_equal(got, total);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":0}");
        struct buf out = BUF_INIT(0);
        for (int i = 0; i < 2000 && !stream_ended(&out); i++) {
                client_drain(f, &out);
                turn(f, 1);
        }
        assert_non_null(strstr(out.data, "{\"type\":\"exit\",\"exit_code\":0}"));
        buf_free(&out);
        buf_free(&req);
}

static void test_stdin_stream_refused(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        printf("check: stdin=stream with stdin in the JSON, or a bad stdin= value: 400, nothing runs\n");
        static const char *reqs[] = {
                "POST /v1/sessions/" SES_ID "/exec?stdin=stream HTTP/1.1\r\nContent-Length: 29\r\n\r\n"
                "{\"argv\":[\"x\"],\"stdin\":\"a\"}\nxy",
                "POST /v1/sessions/" SES_ID "/exec?stdin=nope HTTP/1.1\r\nContent-Length: 15\r\n\r\n"
                "{\"argv\":[\"x\"]}",
        };
        for (size_t i = 0; i < 2; i++) {
                client_send(f, reqs[i]);
                struct buf got = BUF_INIT(0);
                for (int k = 0; k < 200 && !strstr(got.data ? got.data : "", "}\n"); k++) {
                        turn(f, 1);
                        client_drain(f, &got);
                }
                assert_non_null(strstr(got.data, "HTTP/1.1 400 "));
                assert_false(init_has_frame(f));
                buf_free(&got);
                if (f->d.conns && f->d.conns->keep_alive)
                        continue;
                break; /* refused before its body was read: the connection closes */
        }
}

static void test_output_framed(void **state) {
        struct fixture *f = *state;
        hello(f, true);
        static const char body[] = "{\"argv\":[\"flood\"]}";
        char req[320];
        snprintf(req, sizeof req, "POST /v1/sessions/" SES_ID "/exec HTTP/1.1\r\nAccept: " FRAME_CONTENT_TYPE
                 "\r\nContent-Length: %zu\r\n\r\n%s", sizeof body - 1, body);
        uint32_t id;
        json_free(request_to_init(f, req, "exec", &id));
        char resp[64];
        snprintf(resp, sizeof resp, "{\"pid\":%d}", CMD_PID);
        init_send_json(f, PROTO_RESP, id, resp);
        printf("check: Accept: " FRAME_CONTENT_TYPE ": output as raw frames (NUL, every byte), events as JSON frames\n");
        uint8_t all[256];
        for (int i = 0; i < 256; i++)
                all[i] = (uint8_t)i;
        assert_true(init_try_send(f, PROTO_STDOUT, id, "a\0b", 3));
        init_flush(f);
        assert_true(init_try_send(f, PROTO_STDERR, id, all, sizeof all));
        init_flush(f);
        init_send_json(f, PROTO_EXIT, id, "{\"exit_code\":0}");
        struct buf got = BUF_INIT(0);
        for (int i = 0; i < 2000 && !stream_ended(&got); i++) {
                client_drain(f, &got);
                turn(f, 1);
        }
        assert_true(stream_ended(&got));
        assert_non_null(strstr(got.data, "\r\nContent-Type: " FRAME_CONTENT_TYPE "\r\n"));
        /* de-chunk the body, then read its frames */
        const char *p = strstr(got.data, "\r\n\r\n") + 4;
        struct buf fr = BUF_INIT(0);
        for (int i = 0; i < 100; i++) {
                char *end;
                unsigned long n = strtoul(p, &end, 16);
                if (n == 0)
                        break;
                assert_int_equal(buf_append(&fr, end + 2, n), 0);
                p = end + 2 + n + 2;
        }
        const uint8_t *q = (const uint8_t *)fr.data;
        size_t left = fr.len;
        uint8_t kinds[8];
        size_t nk = 0;
        struct buf out = BUF_INIT(0), err = BUF_INIT(0);
        while (left > 0 && nk < 8) {
                uint8_t kind;
                uint32_t len;
                assert_int_equal(frame_peek(q, left, &kind, &len), 1);
                kinds[nk++] = kind;
                if (kind == FRAME_STDOUT)
                        assert_int_equal(buf_append(&out, q + FRAME_HDR_SIZE, len), 0);
                if (kind == FRAME_STDERR)
                        assert_int_equal(buf_append(&err, q + FRAME_HDR_SIZE, len), 0);
                if (kind == FRAME_EVENT) {
                        struct json *ev;
                        assert_int_equal(json_parse((const char *)q + FRAME_HDR_SIZE, len, &ev, NULL, 0), 0);
                        assert_string_equal(json_get_str(ev, "type"), nk == 1 ? "start" : "exit");
                        json_free(ev);
                }
                q += FRAME_HDR_SIZE + len;
                left -= FRAME_HDR_SIZE + len;
        }
        assert_int_equal(left, 0);
        assert_int_equal(nk, 4);
        assert_int_equal(kinds[0], FRAME_EVENT);
        assert_int_equal(kinds[3], FRAME_EVENT);
        assert_int_equal(out.len, 3);
        assert_memory_equal(out.data, "a\0b", 3);
        assert_int_equal(err.len, sizeof all);
        assert_memory_equal(err.data, all, sizeof all);
        buf_free(&out);
        buf_free(&err);
        buf_free(&fr);
        buf_free(&got);
}

static const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_output_framed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stdin_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stdin_stream_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stdin_stream_old_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_every_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stall_without_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_client_leaves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_windows_hold_only_the_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_pauses, setup, teardown),
};

int main(void) { return cmocka_run_group_tests(tests, NULL, NULL); }
