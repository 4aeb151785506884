/* spaced's HTTP side: listening sockets, one struct conn per client, reading and parsing
 * requests one at a time (pipelined ones wait in the input buffer), dispatching them
 * through the router it was given, and writing answers with bounded output buffers. What
 * answers later reaches the client only through the connection's hook (server.h). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>

#include "common/frame.h"
#include "common/log.h"
#include "daemon/auth.h"
#include "daemon/server.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/http.h"
#include "daemon/loop.h"

static void conn_process(struct conn *c);
static void conn_update_events(struct conn *c);
static void conn_close(struct conn *c);

static void conn_free_deferred(void *p) {
        struct conn *c = p;
        buf_free(&c->in);
        buf_free(&c->out);
        buf_free(&c->body);
        free(c->parser);
        free(c);
}

void conn_set_hook(struct conn *c, const struct conn_hook_ops *ops, void *ctx) {
        c->hook = ops;
        c->hook_ctx = ctx;
}

void conn_clear_hook(struct conn *c, const void *ctx) {
        if (c->hook && c->hook_ctx == ctx) {
                c->hook = NULL;
                c->hook_ctx = NULL;
        }
}

void *conn_hook_ctx(const struct conn *c, const struct conn_hook_ops *ops) {
        return c->hook == ops ? c->hook_ctx : NULL;
}

/* Unhooks c and tells the hook: the request is answered (done), or its client is gone. */
static void conn_unhook(struct conn *c, bool answered) {
        const struct conn_hook_ops *h = c->hook;
        void *ctx = c->hook_ctx;
        if (!h)
                return;
        c->hook = NULL;
        c->hook_ctx = NULL;
        if (answered && h->done)
                h->done(c, ctx);
        else
                h->gone(c, ctx);
}

/* Detaches whatever waits on c, closes its fd and frees it after the batch. */
/* The request of c is answered (its head went out: a stream has begun) or gone: no
 * longer work in flight that a pool refill would slow (warmpool.c). */
static void conn_idle(struct conn *c) {
        if (!c->in_flight)
                return;
        c->in_flight = false;
        c->d->n_in_flight--;
        c->d->request_ms = util_now_ms();
}

static void conn_close(struct conn *c) {
        if (c->closed)
                return;
        c->closed = true;
        conn_idle(c);
        conn_unhook(c, false);
        loop_del(c->d->loop, &c->src);
        c->src.fd = safe_close(c->src.fd);
        if (c->prev)
                c->prev->next = c->next;
        else
                c->d->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        c->d->n_conns--;
        if (c->tcp)
                c->d->n_tcp--;
        else
                c->d->n_unix--;
        if (c->stranger)
                c->d->n_strangers--;
        (void)loop_defer(c->d->loop, conn_free_deferred, c);
}

/* The answer is out and the connection ends. A TCP client's request body that was not read
 * (an answer before it, a command that left its stdin unread) must not be closed on: the
 * kernel would answer the unread bytes with a reset, and a reset can destroy the end of the
 * answer before the client read it. So shut down our side and drop what comes until EOF. */
static void conn_end(struct conn *c) {
        if (c->closed)
                return;
        if (!c->tcp || !c->linger || c->peer_closed || shutdown(c->src.fd, SHUT_WR) < 0) {
                conn_close(c);
                return;
        }
        c->state = CONN_LINGER;
        c->in_paused = false;
        c->linger_until_ms = util_now_ms() + CONN_LINGER_MS;
        buf_free(&c->in);
        c->in_off = 0;
        conn_update_events(c);
}

bool conn_over_high(const struct conn *c) { return c->out.len - c->out_off > CONN_OUT_HIGH; }

bool conn_below_low(const struct conn *c) { return c->out.len - c->out_off < CONN_OUT_LOW; }

/* Writes as much queued output as the socket takes. */
static void conn_flush(struct conn *c) {
        while (c->out_off < c->out.len) {
                ssize_t n = send(c->src.fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        log_debug("conn: send: %m");
                        conn_close(c);
                        return;
                }
                c->out_off += (size_t)n;
        }
        if (c->out_off == c->out.len) {
                buf_reset(&c->out);
                c->out_off = 0;
        } else if (c->out_off > c->out.len / 2) {
                buf_consume(&c->out, c->out_off);
                c->out_off = 0;
        }
        if (c->state == CONN_CLOSING && c->out.len == 0)
                conn_end(c);
}

static void conn_update_events(struct conn *c) {
        if (c->closed)
                return;
        uint32_t ev = 0;
        bool want_in = c->state != CONN_CLOSING && !c->in_paused && !c->peer_closed &&
                       c->in.len - c->in_off < CONN_IN_MAX;
        if (want_in)
                ev |= EPOLLIN;
        if (!c->rdhup && !c->peer_closed)
                ev |= EPOLLRDHUP;
        if (c->out_off < c->out.len)
                ev |= EPOLLOUT;
        if (loop_mod(c->d->loop, &c->src, ev) < 0)
                conn_close(c);
}

static void conn_append(struct conn *c, const void *data, size_t n) {
        if (c->closed)
                return;
        if (buf_append(&c->out, data, n) < 0) {
                /* Over CONN_OUT_MAX: the client does not read; it loses the connection. */
                log_warn("conn: output buffer full, dropping client");
                conn_close(c);
                return;
        }
}

static void conn_process_deferred(void *p) {
        struct conn *c = p;
        c->process_queued = false;
        conn_process(c);
}

/* The response to the current request is complete: go on with the next one. */
static void conn_request_done(struct conn *c) {
        /* Whatever answered no longer needs this client: when it closes now, that must not
         * count as a client going away mid-stream. */
        conn_unhook(c, true);
        c->resp_done = true;
        c->streaming = false;
        c->on_body = NULL;
        c->on_body_end = NULL;
        if (c->state == CONN_BODY_STREAM || c->state == CONN_BODY_JSON || http_parser_in_body(c->parser)) {
                /* Answered before the body was read (an error): rather than read up to 256 MiB
                 * we don't want, close once the answer is out. */
                c->keep_alive = false;
                c->linger = true;
        }
        if (!c->keep_alive) {
                c->state = CONN_CLOSING;
                if (c->out.len == c->out_off)
                        conn_end(c);
                return;
        }
        c->state = CONN_IDLE;
        c->idle_since_ms = util_now_ms();
        buf_free(&c->body);
        c->route = NULL;
        /* A pipelined next request is handled after the current batch, not inside the
         * stack of whoever answered this one (often a sandbox's frame handler). */
        if (!c->in_process && !c->process_queued) {
                c->process_queued = true;
                (void)loop_defer(c->d->loop, conn_process_deferred, c);
        }
}

static void conn_send_head(struct conn *c, int status, const char *ctype, int64_t len, const char *extra) {
        struct buf h = BUF_INIT(0);
        bool ka = c->keep_alive && !http_parser_in_body(c->parser) && c->state != CONN_BODY_STREAM &&
                  c->state != CONN_BODY_JSON;
        if (http_response_head(&h, status, ctype, len, ka, extra) == 0)
                conn_append(c, h.data, h.len);
        buf_free(&h);
        conn_idle(c);
        if (c->d->router && c->d->router->answered)
                c->d->router->answered(c, status);
        if (!ka)
                c->keep_alive = false;
}

/* The response is queued whole: send what the socket takes and go on with the next request. */
static void conn_response_complete(struct conn *c) {
        if (c->closed)
                return;
        conn_flush(c);
        if (c->closed)
                return;
        conn_request_done(c);
        conn_update_events(c);
}

/* A complete JSON response: the head (with extra header lines, if any), body, newline. */
static void conn_reply_body(struct conn *c, int status, const struct buf *body, const char *extra) {
        conn_send_head(c, status, "application/json", (int64_t)body->len + 1, extra);
        conn_append(c, body->data, body->len);
        conn_append(c, "\n", 1);
        conn_response_complete(c);
}

void conn_reply_json(struct conn *c, int status, const struct buf *body) {
        if (c->closed || c->resp_done)
                return;
        conn_reply_body(c, status, body, NULL);
}

void conn_reply_json_headers(struct conn *c, int status, const struct buf *body, const char *extra_headers) {
        if (c->closed || c->resp_done)
                return;
        conn_reply_body(c, status, body, extra_headers);
}

/* {"type":type,"error":{"code","message"}}; no type: a plain error body. */
static void error_json(struct buf *b, const char *type, int status, const char *msg) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        if (type)
                json_w_kstr(&w, "type", type);
        json_w_key(&w, "error");
        json_w_obj_begin(&w);
        json_w_kstr(&w, "code", http_status_code_name(status));
        json_w_kstr(&w, "message", msg);
        json_w_obj_end(&w);
        json_w_obj_end(&w);
}

void srv_error_body(struct buf *b, int status, const char *msg) { error_json(b, NULL, status, msg); }

/* An error answer; retry_s > 0 adds Retry-After. */
static void reply_error_msg(struct conn *c, int status, unsigned retry_s, const char *msg) {
        if (c->closed || c->resp_done)
                return;
        log_debug("%s %s -> %d %s", c->req ? c->req->method : "?", c->req ? c->req->target : "?", status, msg);
        if (c->error_reply) {
                /* Another API's dialect (the E2B API: daemon/e2b/e2b.h). */
                c->error_reply(c, status, msg);
                return;
        }
        struct buf b = BUF_INIT(0);
        if (c->streaming) {
                /* The status line is out already: the error becomes the stream's last event. */
                error_json(&b, "error", status, msg);
                conn_stream_event(c, &b);
                buf_free(&b);
                conn_stream_end(c);
                return;
        }
        srv_error_body(&b, status, msg);
        char hdr[160] = "";
        if (status == 405 && c->req) {
                char allow[128];
                c->d->router->allowed(c->req->path, allow, sizeof allow);
                snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
        } else if (status == 401) {
                /* RFC 7235: a 401 names the scheme that would work (RFC 6750 for Bearer). */
                snprintf(hdr, sizeof hdr, "WWW-Authenticate: Bearer realm=\"space\"\r\n");
        } else if (retry_s)
                snprintf(hdr, sizeof hdr, "Retry-After: %u\r\n", retry_s);
        conn_reply_body(c, status, &b, hdr[0] ? hdr : NULL);
        buf_free(&b);
}

void conn_reply_error(struct conn *c, int status, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        reply_error_msg(c, status, 0, msg);
}

void conn_reply_retry(struct conn *c, int status, unsigned retry_s, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        reply_error_msg(c, status, retry_s ? retry_s : 1, msg);
}

void conn_reply_empty(struct conn *c, int status) {
        if (c->closed || c->resp_done)
                return;
        conn_send_head(c, status, NULL, 0, NULL);
        conn_response_complete(c);
}

void conn_reply_typed(struct conn *c, int status, const char *content_type, const struct buf *body) {
        if (c->closed || c->resp_done)
                return;
        conn_send_head(c, status, content_type, (int64_t)body->len, NULL);
        conn_append(c, body->data, body->len);
        conn_response_complete(c);
}

void conn_reply_headers(struct conn *c, int status, const char *extra_headers) {
        if (c->closed || c->resp_done)
                return;
        conn_send_head(c, status, NULL, 0, extra_headers);
        conn_response_complete(c);
}

void conn_stream_begin(struct conn *c, int status, const char *content_type) {
        if (c->closed || c->resp_done || c->streaming)
                return;
        conn_send_head(c, status, content_type, -1, NULL);
        c->streaming = true;
        c->framed = content_type && strcmp(content_type, FRAME_CONTENT_TYPE) == 0;
        conn_flush(c);
        conn_update_events(c);
}

/* One chunk of a chunked response: its size line, then the parts of its data. */
static void conn_chunk(struct conn *c, const void *a, size_t an, const void *b, size_t bn) {
        struct buf h = BUF_INIT(0);
        if (buf_printf(&h, "%zx\r\n", an + bn) == 0) {
                conn_append(c, h.data, h.len);
                conn_append(c, a, an);
                conn_append(c, b, bn);
                conn_append(c, "\r\n", 2);
        }
        buf_free(&h);
        if (c->closed)
                return;
        conn_flush(c);
        conn_update_events(c);
}

void conn_stream_chunk(struct conn *c, const void *data, size_t n) {
        if (c->closed || !c->streaming || n == 0)
                return;
        conn_chunk(c, data, n, NULL, 0);
}

void conn_stream_event(struct conn *c, const struct buf *json_line) {
        if (c->closed || !c->streaming)
                return;
        if (c->framed)
                conn_stream_data(c, FRAME_EVENT, json_line->data, json_line->len);
        else
                conn_chunk(c, json_line->data, json_line->len, "\n", 1);
}

void conn_stream_data(struct conn *c, uint8_t kind, const void *data, size_t n) {
        if (c->closed || !c->streaming || !c->framed)
                return;
        uint8_t h[FRAME_HDR_SIZE];
        frame_hdr_encode(kind, (uint32_t)n, h);
        conn_chunk(c, h, sizeof h, data, n);
}

void conn_stream_end(struct conn *c) {
        if (c->closed || !c->streaming)
                return;
        c->d->request_ms = util_now_ms(); /* an exec's end: the pool's quiet starts after it */
        conn_append(c, "0\r\n\r\n", 5);
        conn_response_complete(c);
}

void conn_abort(struct conn *c) {
        if (c->closed)
                return;
        /* What is queued still goes out; the missing last chunk tells the client. */
        c->resp_done = true;
        c->state = CONN_CLOSING;
        c->keep_alive = false;
        conn_flush(c);
        if (!c->closed && c->out.len == c->out_off)
                conn_close(c);
        else
                conn_update_events(c);
}

void conn_continue(struct conn *c) {
        if (c->req && c->req->expect_continue && !c->closed) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                conn_append(c, cont, sizeof cont - 1);
                conn_flush(c);
                conn_update_events(c);
        }
}

int conn_detach(struct conn *c, struct buf *ret_out, struct buf *ret_in) {
        if (c->closed)
                return -EBADF;
        struct buf out = BUF_INIT(0), in = BUF_INIT(0);
        if (buf_append(&out, c->out.data ? c->out.data + c->out_off : "", c->out.len - c->out_off) < 0 ||
            buf_append(&in, c->in.data ? c->in.data + c->in_off : "", c->in.len - c->in_off) < 0) {
                buf_free(&out);
                buf_free(&in);
                return -ENOMEM;
        }
        loop_del(c->d->loop, &c->src);
        int fd = c->src.fd;
        c->src.fd = -EBADF;
        c->hook = NULL;
        c->hook_ctx = NULL;
        conn_close(c);
        *ret_out = out;
        *ret_in = in;
        return fd;
}

void conn_resume_input(struct conn *c) {
        if (c->closed || !c->in_paused)
                return;
        c->in_paused = false;
        conn_process(c);
}

/* c sent an authenticated request: it no longer counts against the strangers' slots. */
static void conn_known(struct conn *c) {
        if (!c->stranger)
                return;
        c->stranger = false;
        c->d->n_strangers--;
}

void conn_authenticated(struct conn *c) { conn_known(c); }

/* Who sends this request: c->tenant and c->admin, or a 401 answer and false. On the Unix
 * socket (mode 0600: only the daemon's user reaches it) no token means the local
 * operator; a token, when given, is checked everywhere (docs/security.md). */
static bool authenticate(struct conn *c) {
        const char *h = http_request_header(c->req, "Authorization");
        c->admin = false;
        c->tenant[0] = '\0';
        if (!h && !c->tcp) {
                c->admin = true;
                snprintf(c->tenant, sizeof c->tenant, "%s", AUTH_LOCAL_TENANT);
                return true;
        }
        const char *why = "a bearer token is required (Authorization: Bearer spt_…)";
        if (h) {
                char token[AUTH_TOKEN_LEN + 1];
                struct meta_token t;
                int r = auth_parse_bearer(h, token);
                if (r == 0)
                        r = auth_verify(c->d->meta, token, &t);
                explicit_bzero(token, sizeof token);
                if (r == 0) {
                        snprintf(c->tenant, sizeof c->tenant, "%s", t.tenant);
                        conn_known(c);
                        return true;
                }
                if (r == -EMSGSIZE)
                        why = "the Authorization header is too long";
                else if (r == -EPROTONOSUPPORT)
                        why = "only Bearer authorization is accepted";
                else if (r == -EINVAL)
                        why = "the bearer token is malformed";
                else if (r == -EACCES)
                        why = "the bearer token is unknown or revoked";
                else {
                        log_warn("checking a bearer token: %s", meta_last_error(c->d->meta));
                        c->state = CONN_BODY_DISCARD;
                        conn_reply_error(c, 500, "checking the token failed");
                        return false;
                }
        }
        c->state = CONN_BODY_DISCARD;
        conn_reply_error(c, 401, "%s", why);
        return false;
}

/* A request head is complete: authenticate and route it. */
static void on_head(struct conn *c) {
        c->req = http_parser_request(c->parser);
        c->head_since_ms = 0;
        c->keep_alive = c->req->keep_alive;
        c->resp_done = false;
        c->streaming = false;
        c->framed = false;
        buf_free(&c->body);
        c->body = BUF_INIT(HTTP_MAX_JSON_BODY);
        c->error_reply = NULL;
        log_debug("%s %s", c->req->method, c->req->target);
        /* Watching the pool or the daemon's health is no work that a refill would slow. */
        if (strcmp(c->req->method, "GET") || (strcmp(c->req->path, "/v1/pool") && strcmp(c->req->path, "/v1/health"))) {
                c->d->request_ms = util_now_ms();
                if (!c->in_flight) {
                        c->in_flight = true;
                        c->d->n_in_flight++;
                }
        }
        if (c->d->router->intercept && c->d->router->intercept(c))
                return;
        if (!authenticate(c))
                return;
        int r = c->d->router->match(c->req->method, c->req->path, &c->route, &c->params);
        if (r == -ENOENT) {
                c->state = CONN_BODY_DISCARD;
                conn_reply_error(c, 404, "no route for %s", c->req->path);
                return;
        }
        if (r == -EOPNOTSUPP) {
                c->state = CONN_BODY_DISCARD;
                conn_reply_error(c, 405, "method %s not allowed on %s", c->req->method, c->req->path);
                return;
        }
        if (c->d->router->hold && c->d->router->hold(c))
                return;
        conn_dispatch(c);
}

void conn_dispatch(struct conn *c) {
        if (c->route->body == API_BODY_STREAM) {
                c->state = CONN_BODY_STREAM;
                c->route->handler(c);
                return;
        }
        if (http_parser_set_body_limit(c->parser, HTTP_MAX_JSON_BODY) < 0) {
                c->state = CONN_BODY_DISCARD;
                conn_reply_error(c, 413, "request body over %u bytes", HTTP_MAX_JSON_BODY);
                return;
        }
        c->state = CONN_BODY_JSON;
        conn_continue(c);
}

static void on_body(struct conn *c, const char *data, size_t n) {
        switch (c->state) {
        case CONN_BODY_JSON:
                if (buf_append(&c->body, data, n) < 0)
                        conn_reply_error(c, 413, "request body over %u bytes", HTTP_MAX_JSON_BODY);
                break;
        case CONN_BODY_STREAM:
                if (c->on_body && c->on_body(c, data, n) < 0 && !c->resp_done)
                        conn_reply_error(c, 400, "upload failed");
                break;
        default:
                break;
        }
}

static void on_end(struct conn *c) {
        switch (c->state) {
        case CONN_BODY_JSON:
                c->state = CONN_WAIT;
                c->route->handler(c);
                break;
        case CONN_BODY_STREAM:
                c->state = CONN_WAIT;
                if (c->on_body_end)
                        c->on_body_end(c);
                else if (!c->resp_done)
                        conn_reply_error(c, 500, "upload handler lost");
                break;
        case CONN_BODY_DISCARD:
                c->state = c->keep_alive ? CONN_IDLE : CONN_CLOSING;
                c->idle_since_ms = util_now_ms();
                break;
        default:
                break;
        }
}

static void conn_process(struct conn *c) {
        if (c->in_process || c->closed)
                return;
        c->in_process = true;
        while (!c->closed) {
                if (c->state == CONN_WAIT || c->state == CONN_CLOSING || c->state == CONN_LINGER || c->in_paused)
                        break;
                /* An early answer (error) while the body still came: stop here. */
                if (c->resp_done && c->state != CONN_IDLE && c->state != CONN_BODY_DISCARD)
                        break;
                struct http_event ev;
                size_t avail = c->in.len - c->in_off;
                size_t used = http_parser_feed(c->parser, c->in.data ? c->in.data + c->in_off : NULL, avail, &ev);
                c->in_off += used;
                if (ev.type == HTTP_EV_NEED_MORE)
                        break;
                switch (ev.type) {
                case HTTP_EV_HEAD:
                        on_head(c);
                        break;
                case HTTP_EV_BODY:
                        on_body(c, ev.data, ev.len);
                        break;
                case HTTP_EV_END:
                        on_end(c);
                        break;
                case HTTP_EV_ERROR:
                        c->keep_alive = false;
                        if (c->streaming || (c->resp_done && c->state != CONN_IDLE)) {
                                /* Answered already (upload in progress): just drop the client. */
                                conn_abort(c);
                        } else {
                                c->resp_done = false;
                                c->state = CONN_BODY_DISCARD;
                                conn_unhook(c, false); /* an upload in progress is abandoned */
                                conn_reply_error(c, ev.status, "%s", ev.message);
                                if (!c->closed)
                                        c->state = CONN_CLOSING;
                        }
                        goto out;
                default:
                        break;
                }
        }
out:
        if (!c->closed) {
                if (c->in_off == c->in.len) {
                        buf_reset(&c->in);
                        c->in_off = 0;
                }
                /* EOF from the client and nothing left to parse: no request can complete
                 * any more. One being answered (CONN_WAIT) still gets its answer. */
                if (c->peer_closed && !c->in_paused && c->state != CONN_WAIT && c->state != CONN_CLOSING) {
                        c->state = CONN_CLOSING;
                        if (c->out.len == c->out_off)
                                conn_close(c);
                }
        }
        c->in_process = false;
        if (!c->closed)
                conn_update_events(c);
}

void conn_process_input(struct conn *c) {
        if (!c->closed)
                conn_process(c);
}

/* CONN_LINGER: what the client still sends is dropped; its EOF, an error, the deadline or
 * CONN_LINGER_MAX bytes end the connection. */
static void conn_read_linger(struct conn *c) {
        char tmp[16u << 10];
        for (int i = 0; i < 16; i++) {
                ssize_t n = recv(c->src.fd, tmp, sizeof tmp, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0 || (c->lingered += (uint64_t)n) > CONN_LINGER_MAX) {
                        conn_close(c);
                        return;
                }
        }
}

static void conn_read(struct conn *c) {
        if (c->state == CONN_LINGER) {
                conn_read_linger(c);
                return;
        }
        if (c->in_off > 0) {
                buf_consume(&c->in, c->in_off);
                c->in_off = 0;
        }
        size_t room = CONN_IN_MAX - MIN(c->in.len, (size_t)CONN_IN_MAX);
        if (room == 0)
                return;
        if (buf_reserve(&c->in, room) < 0) {
                conn_close(c);
                return;
        }
        ssize_t n = recv(c->src.fd, c->in.data + c->in.len, room, 0);
        if (n < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        conn_close(c);
                return;
        }
        if (n == 0) {
                c->peer_closed = true;
                if (c->hook && c->hook->hangup_is_gone)
                        conn_close(c);
                return;
        }
        c->in.len += (size_t)n;
        c->last_read_ms = util_now_ms();
        if (c->state == CONN_IDLE && !c->head_since_ms)
                c->head_since_ms = c->last_read_ms;
}

/* A limit of d->limits, or its default when the field is 0 (a daemon made by a test). */
static uint64_t lim(uint64_t v, uint64_t def) { return v ? v : def; }

/* A request head past its deadline: the deadline runs from the accept or the head's first
 * byte and is not moved by bytes that keep coming (a client dribbling a header a minute
 * would otherwise hold its slot for ever). */
static bool head_overdue(struct conn *c, uint64_t now) {
        bool pending = c->in.len > c->in_off || c->parser->head_len > 0;
        if (c->state != CONN_IDLE || c->closed || c->process_queued)
                return false;
        if (!c->head_since_ms && pending)
                c->head_since_ms = now; /* a pipelined head: due from now */
        return c->head_since_ms && now - c->head_since_ms > lim(c->d->limits.head_ms, LIM_HEAD_MS);
}

void srv_tick(struct daemon *d) {
        uint64_t now = util_now_ms();
        for (struct conn *c = d->conns, *next; c; c = next) {
                next = c->next;
                if (c->state == CONN_LINGER) {
                        if (now > c->linger_until_ms)
                                conn_close(c);
                        continue;
                }
                if (head_overdue(c, now)) {
                        uint64_t ms = lim(d->limits.head_ms, LIM_HEAD_MS);
                        log_info("closing a client whose request head did not arrive within %llu ms",
                                 (unsigned long long)ms);
                        c->state = CONN_BODY_DISCARD;
                        c->keep_alive = false;
                        c->resp_done = false; /* the answer of the request before, if any, is out */
                        c->req = NULL;        /* that request's, not this half-parsed head */
                        conn_reply_error(c, 408, "the request head did not arrive within %llu ms",
                                         (unsigned long long)ms);
                        if (!c->closed) {
                                c->state = CONN_CLOSING;
                                if (c->out.len == c->out_off)
                                        conn_close(c);
                        }
                        continue;
                }
                bool partial = (c->state == CONN_IDLE && (c->in.len > c->in_off || c->parser->head_len > 0)) ||
                               ((c->state == CONN_BODY_JSON || c->state == CONN_BODY_STREAM) && !c->in_paused &&
                                !c->streaming); /* a body beside a stream (exec's stdin) may idle */
                uint64_t limit = d->request_timeout_ms ? d->request_timeout_ms : CONN_REQUEST_TIMEOUT_MS;
                uint64_t idle_limit = d->idle_timeout_ms ? d->idle_timeout_ms : CONN_IDLE_TIMEOUT_MS;
                uint64_t since = c->idle_since_ms > c->last_read_ms ? c->idle_since_ms : c->last_read_ms;
                if (!c->closed && c->state == CONN_IDLE && !partial && c->out.len == c->out_off &&
                    !c->process_queued && now - since > idle_limit) {
                        log_debug("closing a keep-alive connection idle for %llu ms",
                                  (unsigned long long)(now - since));
                        conn_close(c);
                        continue;
                }
                if (!c->closed && partial && now - c->last_read_ms > limit) {
                        log_info("closing a client whose request stopped arriving");
                        if (c->streaming || c->resp_done)
                                conn_abort(c);
                        else {
                                if (c->state == CONN_IDLE)
                                        c->state = CONN_BODY_DISCARD;
                                c->keep_alive = false;
                                conn_reply_error(c, 408, "the request did not arrive within %llu ms",
                                                 (unsigned long long)limit);
                        }
                }
        }
}

/* The client shut down its sending side. Bytes it sent before may still be unread, so
 * reading goes on until EOF; but a client that hangs up while it waits for a stream
 * (exec, attach, download) is gone, and its request is cancelled (see docs/api.md). */
static void on_rdhup(struct conn *c) {
        c->rdhup = true;
        if (c->hook && c->hook->hangup_is_gone)
                conn_close(c);
}

static void conn_event(struct loop_src *src, uint32_t revents) {
        struct conn *c = (struct conn *)src;
        if (revents & (EPOLLERR | EPOLLHUP)) {
                conn_close(c);
                return;
        }
        if (revents & EPOLLOUT) {
                conn_flush(c);
                if (c->closed)
                        return;
                /* The client took output: what waits on it (a stream's window, a sandbox
                 * that held its frames) may go on. */
                if (c->hook && c->hook->drained)
                        c->hook->drained(c, c->hook_ctx);
                if (c->closed)
                        return;
        }
        if (revents & EPOLLIN) {
                conn_read(c);
                if (c->closed)
                        return;
                conn_process(c);
                if (c->closed)
                        return;
        }
        if (revents & EPOLLRDHUP) {
                on_rdhup(c);
                if (c->closed)
                        return;
        }
        conn_update_events(c);
}

static struct daemon *daemon_of_listener(struct loop_src *src, bool tcp) {
        return (struct daemon *)((char *)src - (tcp ? offsetof(struct daemon, tcp_src) : offsetof(struct daemon, unix_src)));
}

static struct daemon *daemon_of_e2b_listener(struct loop_src *src) {
        return (struct daemon *)((char *)src - offsetof(struct daemon, e2b_src));
}

int srv_conn_new(struct daemon *d, int fd) {
        struct conn *c = calloc(1, sizeof *c);
        struct http_parser *p = malloc(sizeof *p);
        if (!c || !p) {
                free(c);
                free(p);
                return -ENOMEM;
        }
        http_parser_init(p);
        c->parser = p;
        c->d = d;
        c->src.fd = fd;
        c->src.cb = conn_event;
        c->state = CONN_IDLE;
        c->keep_alive = true;
        c->last_read_ms = c->idle_since_ms = c->head_since_ms = util_now_ms();
        c->in = BUF_INIT(CONN_IN_MAX + 1);
        c->out = BUF_INIT(CONN_OUT_MAX);
        int r = loop_add(d->loop, &c->src, EPOLLIN | EPOLLRDHUP);
        if (r < 0) {
                free(p);
                free(c);
                return r;
        }
        c->next = d->conns;
        if (d->conns)
                d->conns->prev = c;
        d->conns = c;
        d->n_conns++;
        d->n_unix++; /* a TCP one is moved over by listener_event */
        return 0;
}

/* The peer a TCP client counts against: its IPv4 address (v4-mapped) or its IPv6 /64. */
static void peer_key(const struct sockaddr_storage *sa, uint8_t key[16]) {
        memset(key, 0, 16);
        if (sa->ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                key[10] = key[11] = 0xff;
                memcpy(key + 12, &in->sin_addr, 4);
        } else if (sa->ss_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
                        memcpy(key, &in6->sin6_addr, 16);
                else
                        memcpy(key, &in6->sin6_addr, 8);
        }
}

/* The oldest stranger (of peer, when not NULL), and how many TCP connections peer has.
 * The list is newest first. */
static struct conn *oldest_stranger(struct daemon *d, const uint8_t *peer, size_t *ret_n_peer) {
        struct conn *old = NULL;
        size_t n = 0;
        for (struct conn *c = d->conns; c; c = c->next) {
                if (!c->tcp || c->closed || (peer && memcmp(c->peer, peer, 16) != 0))
                        continue;
                n++;
                if (c->stranger)
                        old = c;
        }
        if (ret_n_peer)
                *ret_n_peer = n;
        return old;
}

/* Makes room for one more TCP connection from peer: when the TCP slots, the peer's slots
 * or the strangers' slots are full, the oldest stranger (the peer's own, for its slots)
 * is dropped. False when there is none to drop: the new one is refused. A client that
 * opens connections and never authenticates so only ever pushes out its own kind, and an
 * authenticated client gets a slot even while strangers hold all of theirs. */
static bool tcp_make_room(struct daemon *d, const uint8_t *peer) {
        size_t n_peer = 0;
        struct conn *victim = oldest_stranger(d, peer, &n_peer);
        if (n_peer >= lim(d->limits.per_peer, LIM_PER_PEER)) {
                if (!victim) {
                        log_warn("a peer holds its %zu TCP connections, refusing one", n_peer);
                        return false;
                }
                log_info("a peer is at its TCP connection limit: dropping its oldest unauthenticated one");
                conn_close(victim);
        }
        if (d->n_tcp >= lim(d->limits.tcp_conns, LIM_TCP_CONNS) ||
            d->n_strangers >= lim(d->limits.strangers, LIM_STRANGERS)) {
                victim = oldest_stranger(d, NULL, NULL);
                if (!victim) {
                        log_warn("too many TCP connections (%zu), refusing one", d->n_tcp);
                        return false;
                }
                log_info("connection slots full: dropping the oldest unauthenticated connection");
                conn_close(victim);
        }
        return d->n_tcp < lim(d->limits.tcp_conns, LIM_TCP_CONNS);
}

/* The listeners in the epoll set or out of it (both: the fds they lack are the process's). */
static void listeners_watch(struct daemon *d, bool on) {
        struct loop_src *srcs[] = { &d->unix_src, &d->tcp_src, &d->e2b_src };
        for (size_t i = 0; i < ELEMENTSOF(srcs); i++) {
                if (srcs[i]->fd < 0)
                        continue;
                if (!on)
                        loop_del(d->loop, srcs[i]);
                else if (!srcs[i]->registered && loop_add(d->loop, srcs[i], EPOLLIN) < 0)
                        log_error("watching a listening socket again: %m");
        }
}

/* accept found no fd to give (EMFILE, ENFILE, or ENOBUFS/ENOMEM for its buffers). The
 * connection stays queued and the listener readable, so a level-triggered loop would call
 * us again at once, for ever: the listeners leave the epoll set for SRV_ACCEPT_BACKOFF_MS
 * instead, and the shortage is logged once until an accept succeeds again. */
static void accept_backoff(struct daemon *d, int err) {
        if (!d->accept_short) {
                log_warn("accept: %s: out of file descriptors or memory; pausing new connections, "
                         "retrying every %u ms", strerror(err), SRV_ACCEPT_BACKOFF_MS);
                d->accept_short = true;
        }
        struct itimerspec its = { .it_value = { .tv_nsec = SRV_ACCEPT_BACKOFF_MS * 1000000L } };
        if (d->accept_src.fd < 0 || timerfd_settime(d->accept_src.fd, 0, &its, NULL) < 0)
                return; /* no timer: spinning is better than never accepting again */
        listeners_watch(d, false);
}

static void accept_timer_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, accept_src));
        uint64_t ticks;
        if (read(src->fd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
                log_debug("reading the accept timer: %m");
        if (!d->stopping)
                listeners_watch(d, true);
}

/* The back-off timer, made with the first listener: when it is needed no fd is left. */
static int accept_timer_init(struct daemon *d) {
        if (d->accept_src.fd >= 0)
                return 0;
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        d->accept_src.fd = fd;
        d->accept_src.cb = accept_timer_event;
        int r = loop_add(d->loop, &d->accept_src, EPOLLIN);
        if (r < 0)
                d->accept_src.fd = safe_close(fd);
        return r;
}

static void listener_event(struct daemon *d, struct loop_src *src, bool tcp) {
        for (int i = 0; i < 16; i++) {
                struct sockaddr_storage sa = { 0 };
                socklen_t salen = sizeof sa;
                int fd = accept4(src->fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                                accept_backoff(d, errno);
                        else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warn("accept: %m");
                        return;
                }
                if (d->accept_short) {
                        log_info("accepting connections again");
                        d->accept_short = false;
                }
                uint8_t peer[16];
                if (tcp)
                        peer_key(&sa, peer);
                if (d->stopping) {
                        close(fd);
                        continue;
                }
                /* The Unix socket has slots of its own: no TCP client can starve the operator. */
                if (!tcp && d->n_unix >= lim(d->limits.unix_conns, LIM_UNIX_CONNS)) {
                        log_warn("too many Unix-socket connections (%zu), refusing one", d->n_unix);
                        close(fd);
                        continue;
                }
                if (tcp && !tcp_make_room(d, peer)) {
                        close(fd);
                        continue;
                }
                if (srv_conn_new(d, fd) < 0) {
                        close(fd);
                        continue;
                }
                if (tcp) {
                        struct conn *c = d->conns; /* srv_conn_new puts it first */
                        c->tcp = true;
                        c->stranger = true;
                        memcpy(c->peer, peer, 16);
                        d->n_unix--;
                        d->n_tcp++;
                        d->n_strangers++;
                }
        }
}

static void unix_listener_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        listener_event(daemon_of_listener(src, false), src, false);
}

static void tcp_listener_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        listener_event(daemon_of_listener(src, true), src, true);
}

static void e2b_listener_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        listener_event(daemon_of_e2b_listener(src), src, true);
}

int srv_serve_unix(struct daemon *d, const struct srv_router *router, const char *path) {
        d->router = router;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        (void)unlink(path);
        /* Created 0600 from the start: no window in which others could connect. */
        mode_t old = umask(0177);
        int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        umask(old);
        if (r < 0)
                return -e;
        if (chmod(path, 0600) < 0 || listen(fd, 128) < 0)
                return -errno;
        r = accept_timer_init(d);
        if (r < 0)
                return r;
        d->unix_src.fd = fd;
        d->unix_src.cb = unix_listener_event;
        r = loop_add(d->loop, &d->unix_src, EPOLLIN);
        if (r < 0)
                return r;
        TAKE_FD(fd);
        return 0;
}

static int listen_tcp_on(struct daemon *d, struct loop_src *slot, void (*cb)(struct loop_src *, uint32_t),
                         const char *hostport);

int srv_listen_tcp(struct daemon *d, const char *hostport) {
        return listen_tcp_on(d, &d->tcp_src, tcp_listener_event, hostport);
}

int srv_listen_tcp_e2b(struct daemon *d, const char *hostport) {
        return listen_tcp_on(d, &d->e2b_src, e2b_listener_event, hostport);
}

static int listen_tcp_on(struct daemon *d, struct loop_src *slot, void (*cb)(struct loop_src *, uint32_t),
                         const char *hostport) {
        char host[256];
        const char *colon = strrchr(hostport, ':');
        if (!colon || (size_t)(colon - hostport) >= sizeof host)
                return -EINVAL;
        memcpy(host, hostport, (size_t)(colon - hostport));
        host[colon - hostport] = '\0';
        char *h = host;
        if (h[0] == '[') {
                size_t l = strlen(h);
                if (l < 2 || h[l - 1] != ']')
                        return -EINVAL;
                h[l - 1] = '\0';
                h++;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
        struct addrinfo *ai = NULL;
        if (getaddrinfo(*h ? h : NULL, colon + 1, &hints, &ai) != 0 || !ai)
                return -EINVAL;
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                freeaddrinfo(ai);
                return -errno;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
                int e = -errno;
                freeaddrinfo(ai);
                close(fd);
                return e;
        }
        freeaddrinfo(ai);
        int r = accept_timer_init(d);
        if (r < 0) {
                close(fd);
                return r;
        }
        slot->fd = fd;
        slot->cb = cb;
        r = loop_add(d->loop, slot, EPOLLIN);
        if (r < 0) {
                close(fd);
                slot->fd = -1;
        }
        return r;
}

void srv_close_all(struct daemon *d) {
        while (d->conns)
                conn_close(d->conns);
        if (d->unix_src.fd >= 0) {
                loop_del(d->loop, &d->unix_src);
                d->unix_src.fd = safe_close(d->unix_src.fd);
                if (d->sock_path)
                        (void)unlink(d->sock_path);
        }
        if (d->tcp_src.fd >= 0) {
                loop_del(d->loop, &d->tcp_src);
                d->tcp_src.fd = safe_close(d->tcp_src.fd);
        }
        if (d->e2b_src.fd >= 0) {
                loop_del(d->loop, &d->e2b_src);
                d->e2b_src.fd = safe_close(d->e2b_src.fd);
        }
        if (d->accept_src.fd >= 0) {
                loop_del(d->loop, &d->accept_src);
                d->accept_src.fd = safe_close(d->accept_src.fd);
        }
}
