/* Terminals (docs/api.md "Terminals"): POST and GET /v1/sessions/{id}/terminals start and
 * list processes that space-init runs on a pseudo-terminal (docs/protocol.md §3.18), and
 * GET /v1/sessions/{id}/terminals/{pid} upgrades to a WebSocket (ws.h) carrying the
 * terminal's bytes both ways: binary frames are its output and what is typed, a text
 * frame {"type":"resize","rows":R,"cols":C} resizes it, and when it ends the server sends
 * {"type":"exit","exit_code":N} (or "signal") and closes. The socket is taken off HTTP
 * once init answered the attach; the terminal outlives the WebSocket and a new one
 * replays its recent output. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "common/proto.h"
#include "common/text.h"
#include "daemon/api.h"
#include "daemon/http.h"
#include "daemon/loop.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/spaced.h"
#include "daemon/ws.h"

/* WebSockets on the terminals of one session at once. */
#define TERM_WS_PER_SESSION 64u
/* Output queued for a WebSocket client past which init's stream waits for it. */
#define TERM_WS_OUT_HIGH (256u << 10)
#define TERM_WS_OUT_LOW (64u << 10)
/* Client bytes held unparsed: a whole message plus its header. */
#define TERM_WS_IN_MAX (WS_MAX_MESSAGE + 64u)
#define TERM_DEFAULT_ROWS 24
#define TERM_DEFAULT_COLS 80

struct term_ws {
        struct term_ws *next, *prev; /* every WebSocket of the daemon (the per-session cap) */
        struct loop_src src;         /* the client's socket, once upgraded */
        struct daemon *d;
        struct session *s;           /* NULL once the attach ended */
        struct op *op;               /* the attach stream; NULL once it ended */
        struct conn *c;              /* the HTTP connection until the upgrade */
        int64_t pid;
        char accept[WS_ACCEPT_LEN + 1];
        struct buf in;  /* from the client, not parsed yet */
        struct buf out; /* to the client */
        struct buf msg; /* a fragmented message being joined */
        uint8_t msg_op; /* its opcode; 0 = none under way */
        bool upgraded;
        bool parsing;   /* inside tws_parse: a room callback from a send must not re-enter */
        bool closing;   /* our close frame is queued: flush, then close */
        bool freeing;
};

static struct term_ws *all_ws;

static unsigned ws_count(const struct session *s) {
        unsigned n = 0;
        for (struct term_ws *t = all_ws; t; t = t->next)
                n += t->s == s && !t->freeing;
        return n;
}

static void tws_unlink_op(struct term_ws *t) {
        t->op = NULL;
        t->s = NULL;
}

static void tws_free_deferred(void *p) {
        struct term_ws *t = p;
        buf_free(&t->in);
        buf_free(&t->out);
        buf_free(&t->msg);
        free(t);
}

/* Ends t: the attach cancelled (the terminal lives on), the socket closed; freed after
 * the batch. */
static void tws_close(struct term_ws *t) {
        if (t->freeing)
                return;
        t->freeing = true;
        struct op *op = t->op;
        tws_unlink_op(t);
        if (op && !op->done)
                op_client_gone(op);
        if (t->c) {
                conn_clear_hook(t->c, t);
                t->c = NULL;
        }
        if (t->src.fd >= 0) {
                loop_del(t->d->loop, &t->src);
                t->src.fd = safe_close(t->src.fd);
        }
        if (t->prev)
                t->prev->next = t->next;
        else if (all_ws == t)
                all_ws = t->next;
        if (t->next)
                t->next->prev = t->prev;
        t->next = t->prev = NULL;
        if (loop_defer(t->d->loop, tws_free_deferred, t) < 0)
                log_warn("terminal websocket: cannot defer a free: leaking %zu bytes", sizeof *t);
}

static void tws_update(struct term_ws *t) {
        if (t->src.fd < 0 || t->freeing)
                return;
        uint32_t ev = 0;
        /* Input waits while init is behind on this terminal's stdin, or after our close. */
        if (!t->closing && t->op && !ses_stdin_full(t->op) && t->in.len < TERM_WS_IN_MAX)
                ev |= EPOLLIN;
        if (t->out.len > 0)
                ev |= EPOLLOUT;
        if (loop_mod(t->d->loop, &t->src, ev) < 0)
                tws_close(t);
}

static void tws_flush(struct term_ws *t) {
        while (t->out.len > 0) {
                ssize_t n = send(t->src.fd, t->out.data, t->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                tws_close(t); /* the client is gone */
                        return;
                }
                buf_consume(&t->out, (size_t)n);
        }
        if (t->op && !t->op->done)
                op_client_drained(t->op, t->out.len < TERM_WS_OUT_LOW);
        if (t->closing && t->out.len == 0)
                tws_close(t);
}

/* Our close frame (once), then the socket closes when it is out. */
static void tws_send_close(struct term_ws *t, uint16_t code, const char *reason) {
        if (t->closing)
                return;
        (void)ws_close_append(&t->out, code, reason);
        t->closing = true;
        struct op *op = t->op;
        tws_unlink_op(t);
        if (op && !op->done)
                op_client_gone(op);
}

/* A text frame from the client: {"type":"resize","rows":R,"cols":C}. */
static void tws_control_msg(struct term_ws *t, const uint8_t *p, size_t n) {
        _cleanup_json_ struct json *j = NULL;
        if (json_parse((const char *)p, n, &j, NULL, 0) < 0 || json_type(j) != JSON_OBJECT) {
                tws_send_close(t, WS_CLOSE_BAD_DATA, "a text message is a JSON object");
                return;
        }
        const char *type = json_get_str(j, "type");
        int64_t rows, cols;
        if (!type || strcmp(type, "resize") != 0) {
                tws_send_close(t, WS_CLOSE_BAD_DATA, "unknown message type (only \"resize\")");
                return;
        }
        if (json_get_int(j, "rows", &rows) < 0 || json_get_int(j, "cols", &cols) < 0 || rows < 1 ||
            rows > PROTO_MAX_TTY_DIM || cols < 1 || cols > PROTO_MAX_TTY_DIM) {
                tws_send_close(t, WS_CLOSE_BAD_DATA, "resize: rows and cols must be integers from 1 to 1000");
                return;
        }
        if (!t->s)
                return;
        /* Fire and forget: the terminal may end meanwhile, and that shows as its exit. */
        struct op *k;
        if (ses_op_new(t->s, OP_KILL, NULL, NULL, &k) < 0)
                return;
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "resize");
        json_w_kint(&w, "pid", t->pid);
        json_w_kint(&w, "rows", rows);
        json_w_kint(&w, "cols", cols);
        json_w_obj_end(&w);
        if (w.err || ses_send_req(t->s, k->id, &b) < 0)
                op_done(k);
}

/* What the client typed: STDIN frames on the attach id. */
static void tws_input(struct term_ws *t, const uint8_t *p, size_t n) {
        for (size_t off = 0; off < n && t->op; off += SES_UPLOAD_FRAME) {
                size_t len = MIN((size_t)SES_UPLOAD_FRAME, n - off);
                if (ses_send(t->s, PROTO_STDIN, t->op->id, p + off, len) < 0) {
                        tws_send_close(t, WS_CLOSE_INTERNAL, "the session's sandbox is gone");
                        return;
                }
        }
}

static void tws_message(struct term_ws *t, uint8_t opcode, const uint8_t *p, size_t n) {
        if (opcode == WS_BINARY)
                tws_input(t, p, n);
        else
                tws_control_msg(t, p, n);
}

/* Parses what the client sent, frame by frame. */
static void tws_parse(struct term_ws *t) {
        if (t->parsing)
                return;
        t->parsing = true;
        size_t off = 0;
        while (!t->closing && !t->freeing && t->op && !ses_stdin_full(t->op)) {
                struct ws_frame f;
                uint16_t code;
                size_t room = WS_MAX_MESSAGE - t->msg.len;
                ssize_t r = ws_parse((uint8_t *)t->in.data + off, t->in.len - off, room, &f, &code);
                if (r == 0)
                        break;
                if (r < 0) {
                        tws_send_close(t, code, r == -EMSGSIZE ? "message over 1 MiB" : "protocol error");
                        break;
                }
                off += (size_t)r;
                switch (f.opcode) {
                case WS_PING:
                        (void)ws_frame_append(&t->out, WS_PONG, f.payload, f.len);
                        break;
                case WS_PONG:
                        break;
                case WS_CLOSE: {
                        /* Echo its code (§5.5.1), then close. */
                        uint16_t cc = f.len >= 2 ? (uint16_t)(f.payload[0] << 8 | f.payload[1]) : WS_CLOSE_NORMAL;
                        tws_send_close(t, cc, NULL);
                        break;
                }
                case WS_TEXT:
                case WS_BINARY:
                        if (t->msg_op) {
                                tws_send_close(t, WS_CLOSE_PROTOCOL, "a new message inside a fragmented one");
                                break;
                        }
                        if (f.fin) {
                                tws_message(t, f.opcode, f.payload, f.len);
                                break;
                        }
                        if (f.opcode == WS_BINARY) {
                                tws_input(t, f.payload, f.len); /* typed bytes need no joining */
                                t->msg_op = WS_BINARY;
                                break;
                        }
                        t->msg_op = f.opcode;
                        buf_reset(&t->msg);
                        (void)buf_append(&t->msg, f.payload, f.len);
                        break;
                case WS_CONT:
                        if (!t->msg_op) {
                                tws_send_close(t, WS_CLOSE_PROTOCOL, "a continuation without a message");
                                break;
                        }
                        if (t->msg_op == WS_BINARY)
                                tws_input(t, f.payload, f.len);
                        else if (buf_append(&t->msg, f.payload, f.len) < 0)
                                tws_send_close(t, WS_CLOSE_TOO_BIG, "message over 1 MiB");
                        if (f.fin && !t->closing) {
                                if (t->msg_op == WS_TEXT)
                                        tws_message(t, WS_TEXT, (const uint8_t *)t->msg.data, t->msg.len);
                                t->msg_op = 0;
                                buf_reset(&t->msg);
                        }
                        break;
                }
        }
        t->parsing = false;
        if (!t->freeing)
                buf_consume(&t->in, off);
}

static void tws_event(struct loop_src *src, uint32_t revents) {
        struct term_ws *t = (struct term_ws *)((char *)src - offsetof(struct term_ws, src));
        if (t->freeing)
                return;
        if (revents & EPOLLOUT)
                tws_flush(t);
        if (t->freeing)
                return;
        if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !t->closing) {
                if (buf_reserve(&t->in, 64u << 10) < 0) {
                        tws_close(t);
                        return;
                }
                size_t want = MIN((size_t)(64u << 10), TERM_WS_IN_MAX - t->in.len);
                ssize_t n = want ? recv(src->fd, t->in.data + t->in.len, want, MSG_DONTWAIT) : 0;
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        goto out;
                if (n <= 0 && want) {
                        tws_close(t); /* the client left without a close frame */
                        return;
                }
                t->in.len += (size_t)n;
                tws_parse(t);
                if (t->freeing)
                        return;
                tws_flush(t);
                if (t->freeing)
                        return;
        } else if (revents & (EPOLLHUP | EPOLLERR)) {
                tws_close(t);
                return;
        }
out:
        tws_update(t);
}

/* init answered the attach: the connection leaves HTTP with our 101. */
static void tws_upgrade(struct term_ws *t) {
        struct conn *c = t->c;
        t->c = NULL;
        conn_clear_hook(c, t);
        struct buf out, in;
        int fd = conn_detach(c, &out, &in);
        if (fd < 0) {
                tws_close(t);
                return;
        }
        int r = buf_append(&t->out, out.data ? out.data : "", out.len);
        if (r == 0)
                r = buf_printf(&t->out,
                               "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: %s\r\n\r\n",
                               t->accept);
        if (r == 0)
                r = buf_append(&t->in, in.data ? in.data : "", in.len);
        buf_free(&out);
        buf_free(&in);
        t->src = (struct loop_src){ .fd = fd, .cb = tws_event };
        if (r < 0 || loop_add(t->d->loop, &t->src, EPOLLIN | EPOLLOUT) < 0) {
                if (!t->src.registered)
                        t->src.fd = safe_close(t->src.fd);
                tws_close(t);
                return;
        }
        t->upgraded = true;
        tws_parse(t); /* frames that came with the head */
        if (!t->freeing)
                tws_update(t);
}

static void tws_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                      const struct json *j) {
        struct term_ws *t = client;
        if (t->freeing)
                return;
        switch (h->type) {
        case PROTO_RESP:
                if (api_resp_is_error(j)) {
                        struct conn *c = t->c;
                        t->c = NULL;
                        tws_unlink_op(t);
                        if (c) {
                                conn_clear_hook(c, t);
                                api_reply_init_error(c, j, false);
                        }
                        tws_close(t);
                        return;
                }
                op_window_widen(op, SES_STREAM_WINDOW_RAW);
                tws_upgrade(t);
                return;
        case PROTO_STDOUT:
        case PROTO_STDERR:
                if (!t->closing && ws_frame_append(&t->out, WS_BINARY, payload, h->len) < 0) {
                        tws_close(t);
                        return;
                }
                tws_flush(t);
                break;
        case PROTO_EXIT: {
                /* The terminal ended (op_done comes with it): its status, then the close. */
                _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                struct json_writer w = JSON_WRITER_INIT(&b);
                int64_t v;
                json_w_obj_begin(&w);
                json_w_kstr(&w, "type", "exit");
                if (json_get_int(j, "exit_code", &v) == 0)
                        json_w_kint(&w, "exit_code", v);
                if (json_get_int(j, "signal", &v) == 0)
                        json_w_kint(&w, "signal", v);
                json_w_obj_end(&w);
                tws_unlink_op(t);
                if (!t->closing && !w.err)
                        (void)ws_frame_append(&t->out, WS_TEXT, b.data, b.len);
                tws_send_close(t, WS_CLOSE_NORMAL, "the terminal ended");
                tws_flush(t);
                break;
        }
        default:
                return;
        }
        if (!t->freeing)
                tws_update(t);
}

static void tws_fail(struct op *op, void *client, int err, const char *msg) {
        struct term_ws *t = client;
        (void)op;
        (void)err;
        tws_unlink_op(t);
        if (t->c) {
                struct conn *c = t->c;
                t->c = NULL;
                conn_clear_hook(c, t);
                conn_reply_error(c, err == -EAGAIN ? 503 : 502, "terminal: %s", msg);
                tws_close(t);
                return;
        }
        tws_send_close(t, WS_CLOSE_GOING_AWAY, msg);
        tws_flush(t);
        if (!t->freeing)
                tws_update(t);
}

static bool tws_behind(struct op *op, void *client) {
        struct term_ws *t = client;
        (void)op;
        return t->out.len >= TERM_WS_OUT_HIGH;
}

static void tws_room(struct op *op, void *client) {
        struct term_ws *t = client;
        (void)op;
        if (t->freeing || !t->upgraded)
                return;
        tws_parse(t); /* input held back for init */
        if (!t->freeing)
                tws_flush(t);
        if (!t->freeing)
                tws_update(t);
}

static void tws_detach(struct op *op, void *client) {
        struct term_ws *t = client;
        if (t->op == op)
                tws_unlink_op(t);
}

static const struct op_ops tws_ops = {
        .frame = tws_frame,
        .fail = tws_fail,
        .behind = tws_behind,
        .room = tws_room,
        .detach = tws_detach,
};

/* The HTTP client left before init answered. */
static void tws_gone(struct conn *c, void *ctx) {
        struct term_ws *t = ctx;
        (void)c;
        t->c = NULL;
        tws_close(t);
}

static const struct conn_hook_ops tws_hook = { .gone = tws_gone };



/* GET /v1/sessions/{id}/terminals/{pid}: the WebSocket. */
void api_terminal_ws(struct conn *c) {
        struct session *s = api_session(c, true);
        int64_t pid;
        if (!s || api_pid_param(c, &pid) < 0)
                return;
        const struct http_request *r = c->req;
        const char *up = http_request_header(r, "Upgrade");
        if (!up || !text_list_has_token(up, "websocket") || !http_header_has_token(r, "Connection", "upgrade")) {
                conn_reply_error(c, 426, "a terminal is a WebSocket: \"Connection: Upgrade\" and \"Upgrade: websocket\"");
                return;
        }
        const char *ver = http_request_header(r, "Sec-WebSocket-Version");
        if (!ver || strcmp(ver, "13") != 0) {
                conn_reply_headers(c, 426, "Sec-WebSocket-Version: 13\r\n");
                return;
        }
        char accept[WS_ACCEPT_LEN + 1];
        if (ws_accept_key(http_request_header(r, "Sec-WebSocket-Key"), accept) < 0) {
                conn_reply_error(c, 400, "Sec-WebSocket-Key must be the base64 of 16 bytes");
                return;
        }
        if (!s->init_window || !s->init_tty) {
                conn_reply_error(c, 501, "the space-init of session %s is too old for terminals (pause and resume it)",
                                 s->id);
                return;
        }
        if (ws_count(s) >= TERM_WS_PER_SESSION) {
                conn_reply_retry(c, 503, 1, "session %s has %u terminal connections open already", s->id,
                                 TERM_WS_PER_SESSION);
                return;
        }
        struct term_ws *t = calloc(1, sizeof *t);
        if (!t) {
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        *t = (struct term_ws){ .src.fd = -EBADF, .d = c->d, .s = s, .c = c, .pid = pid,
                               .in = BUF_INIT(TERM_WS_IN_MAX + (64u << 10)),
                               .out = BUF_INIT(TERM_WS_OUT_HIGH + 2 * PROTO_MAX_PAYLOAD),
                               .msg = BUF_INIT(WS_MAX_MESSAGE) };
        memcpy(t->accept, accept, sizeof accept);
        int e = ses_op_new(s, OP_ATTACH, &tws_ops, t, &t->op);
        if (e < 0) {
                free(t);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "attach");
        json_w_kint(&w, "pid", pid);
        json_w_kint(&w, "offset", 0);
        json_w_kbool(&w, "follow", true);
        bool windowed = ses_req_window(s, &w);
        json_w_obj_end(&w);
        if ((e = w.err) < 0 || (e = ses_send_req(s, t->op->id, &b)) < 0) {
                struct op *op = t->op;
                tws_unlink_op(t);
                op_done(op);
                buf_free(&t->in);
                buf_free(&t->out);
                free(t);
                conn_reply_error(c, 503, "session %s: its sandbox cannot take requests", s->id);
                return;
        }
        if (windowed)
                op_window_start(t->op);
        t->next = all_ws;
        if (all_ws)
                all_ws->prev = t;
        all_ws = t;
        c->state = CONN_WAIT;
        conn_set_hook(c, &tws_hook, t);
}

/* ---- start and list ---- */

/* init's answer to the exec: the pid, or why it could not start (422, as an exec's). */
static void created_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                          const struct json *j) {
        (void)op;
        (void)payload;
        if (h->type != PROTO_RESP)
                return;
        if (api_resp_is_error(j)) {
                api_reply_init_error(client, j, true);
                return;
        }
        int64_t pid = 0;
        (void)json_get_int(j, "pid", &pid);
        api_reply_kint(client, 201, "pid", pid);
}

static const struct op_ops created_ops = {
        .frame = created_frame,
        .fail = api_op_fail,
        .behind = api_op_behind,
        .detach = api_op_detach,
};

static int dim_of(struct conn *c, const struct json *body, const char *key, int64_t def, int64_t *ret) {
        return api_body_int(c, body, key, def, 1, PROTO_MAX_TTY_DIM, "rows and cols must be integers from 1 to 1000",
                            ret);
}

/* POST /v1/sessions/{id}/terminals {"cmd":[...],"rows","cols","env","cwd","user"} -> {"pid"}. */
void api_terminal_create(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, true, &body);
        if (!s)
                return;
        if (!s->init_tty) {
                conn_reply_error(c, 501, "the space-init of session %s is too old for terminals (pause and resume it)",
                                 s->id);
                return;
        }
        const struct json *cmd = api_body_argv(c, body, "cmd");
        if (!cmd)
                return;
        int64_t rows, cols;
        if (dim_of(c, body, "rows", TERM_DEFAULT_ROWS, &rows) < 0 || dim_of(c, body, "cols", TERM_DEFAULT_COLS, &cols) < 0)
                return;
        const struct json *v;
        const char *cwd = NULL;
        if ((v = json_get(body, "cwd")) && json_type(v) != JSON_NULL && !(cwd = json_str(v))) {
                conn_reply_error(c, 400, "cwd must be a string");
                return;
        }
        if (cwd && strlen(cwd) > PROTO_MAX_PATH) {
                conn_reply_error(c, 400, "cwd too long");
                return;
        }
        char user[API_USER_MAX];
        if (api_body_user(c, body, user) < 0)
                return;
        char **env = NULL;
        size_t n_env = 0;
        const char *why = "bad env";
        if (ses_parse_env(json_get(body, "env"), &env, &n_env, &why) < 0) {
                conn_reply_error(c, 400, "%s", why);
                return;
        }
        struct api_json r;
        api_req_begin(&r, "exec");
        r.b.max = PROTO_MAX_JSON;
        json_w_key(&r.w, "argv");
        json_w_value(&r.w, cmd);
        api_req_env(&r, s, "TERM=xterm-256color", env, n_env); /* what xterm.js and most terminals are */
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        if (cwd)
                json_w_kstr(&r.w, "cwd", cwd);
        api_req_user(&r, user);
        json_w_key(&r.w, "tty");
        json_w_obj_begin(&r.w);
        json_w_kint(&r.w, "rows", rows);
        json_w_kint(&r.w, "cols", cols);
        json_w_obj_end(&r.w);
        if (r.w.err) {
                buf_free(&r.b);
                conn_reply_error(c, 413, "the command line and environment are over %u bytes", PROTO_MAX_JSON);
                return;
        }
        struct op *op = api_op_new(c, s, OP_SIMPLE, &created_ops);
        if (!op) {
                buf_free(&r.b);
                return;
        }
        (void)api_op_send(c, op, &r);
}

/* ps, keeping the terminals. */
static void terminals_resp(struct conn *c, const struct json *resp) {
        struct api_json j;
        api_json_begin(&j);
        json_w_obj_begin(&j.w);
        json_w_key(&j.w, "terminals");
        json_w_arr_begin(&j.w);
        const struct json *procs = json_get(resp, "processes");
        for (size_t i = 0; i < json_len(procs); i++) {
                const struct json *p = json_at(procs, i);
                if (json_is_true(json_get(p, "tty")))
                        json_w_value(&j.w, p);
        }
        json_w_arr_end(&j.w);
        json_w_obj_end(&j.w);
        api_json_reply(c, 200, &j);
}

/* GET /v1/sessions/{id}/terminals */
void api_terminal_list(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        struct api_json r;
        api_req_begin(&r, "ps");
        (void)api_req_simple(c, s, &r, terminals_resp);
}
