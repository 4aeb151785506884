/* Connections to sandbox ports carried by space-init (port_relay.h). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "common/proto.h"
#include "daemon/loop.h"
#include "daemon/port_relay.h"
#include "daemon/session.h"
#include "daemon/spaced.h"

/* One read from the caller's side: one STDIN frame. */
#define RELAY_CHUNK (64u << 10)

struct port_relay {
        struct loop_src src; /* our end of the socketpair, once init connected */
        struct daemon *d;
        struct session *s;
        struct op *op;       /* NULL once the stream ended */
        ingress_dial_fn cb;  /* NULL once called or cancelled */
        void *ctx;
        uint16_t port;
        struct buf to_sock;  /* from the port, not yet taken by the caller's side */
        bool port_eof;       /* the port half-closed: SHUT_WR once to_sock is out */
        bool sock_eof;       /* the caller's side half-closed: STDIN len 0 sent */
        bool shut;
        bool freeing;
};

/* The stream to init ended or is being cancelled: the session forgets the relay (which
 * may outlive it while the rest goes out to the caller's side). */
static void relay_unlink(struct port_relay *pr) {
        if (!pr->op)
                return;
        pr->op = NULL;
        if (pr->s->n_relays)
                pr->s->n_relays--;
        pr->s = NULL;
}

static void relay_free_deferred(void *p) {
        struct port_relay *pr = p;
        buf_free(&pr->to_sock);
        free(pr);
}

/* Ends the relay: its stream cancelled, our end closed; freed after the batch. */
static void relay_close(struct port_relay *pr) {
        if (pr->freeing)
                return;
        pr->freeing = true;
        struct op *op = pr->op;
        relay_unlink(pr);
        if (op && !op->done)
                op_client_gone(op);
        if (pr->src.fd >= 0) {
                loop_del(pr->d->loop, &pr->src);
                pr->src.fd = safe_close(pr->src.fd);
        }
        if (loop_defer(pr->d->loop, relay_free_deferred, pr) < 0)
                log_warn("port relay: cannot defer a free: leaking %zu bytes", sizeof *pr);
}

static void relay_report(struct port_relay *pr, int fd_or_err) {
        ingress_dial_fn cb = pr->cb;
        pr->cb = NULL;
        if (cb)
                cb(pr->ctx, fd_or_err);
        else
                safe_close(fd_or_err);
}

static void relay_update(struct port_relay *pr) {
        if (pr->src.fd < 0 || pr->freeing)
                return;
        uint32_t ev = 0;
        if (!pr->sock_eof && pr->op && !ses_stdin_full(pr->op))
                ev |= EPOLLIN;
        if (pr->to_sock.len > 0)
                ev |= EPOLLOUT;
        if (loop_mod(pr->d->loop, &pr->src, ev) < 0)
                relay_close(pr);
}

/* What the port sent goes to the caller's side as far as it takes it. */
static void relay_flush(struct port_relay *pr) {
        while (pr->to_sock.len > 0) {
                ssize_t n = send(pr->src.fd, pr->to_sock.data, pr->to_sock.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                relay_close(pr); /* the caller's side is gone */
                        return;
                }
                buf_consume(&pr->to_sock, (size_t)n);
        }
        if (pr->op && !pr->op->done)
                op_client_drained(pr->op, true);
        if (pr->port_eof && !pr->shut) {
                (void)shutdown(pr->src.fd, SHUT_WR);
                pr->shut = true;
        }
        if (!pr->op && pr->to_sock.len == 0)
                relay_close(pr); /* the stream ended and all of it went out */
}

static void relay_event(struct loop_src *src, uint32_t revents) {
        struct port_relay *pr = (struct port_relay *)((char *)src - offsetof(struct port_relay, src));
        if (pr->freeing)
                return;
        if (revents & EPOLLOUT)
                relay_flush(pr);
        if (pr->freeing)
                return;
        /* A hang-up is reported even while reading waits for stdin credit: what the caller
         * left in the socketpair is read then, at most its buffer past the credit, well
         * under init's INIT_STDIN_HIGH. */
        if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !pr->sock_eof && pr->op) {
                static uint8_t chunk[RELAY_CHUNK];
                ssize_t n = recv(src->fd, chunk, sizeof chunk, MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        goto out;
                if (n < 0) {
                        relay_close(pr);
                        return;
                }
                if (ses_send(pr->s, PROTO_STDIN, pr->op->id, chunk, (size_t)n) < 0) {
                        relay_close(pr);
                        return;
                }
                if (n == 0)
                        pr->sock_eof = true;
                else
                        pr->op->stdin_inflight += (uint64_t)n;
        }
        if ((revents & EPOLLHUP) && pr->sock_eof) {
                /* Both directions of the caller's side are shut: nobody reads what comes. */
                relay_close(pr);
                return;
        }
out:
        relay_update(pr);
}

static int relay_connected(struct port_relay *pr) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pr->src = (struct loop_src){ .fd = sv[0], .cb = relay_event };
        int r = loop_add(pr->d->loop, &pr->src, EPOLLIN);
        if (r < 0) {
                pr->src.fd = safe_close(pr->src.fd);
                safe_close(sv[1]);
                return r;
        }
        return sv[1];
}

static void relay_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                        const struct json *j) {
        struct port_relay *pr = client;
        (void)op;
        if (pr->freeing)
                return;
        switch (h->type) {
        case PROTO_RESP: {
                const struct json *e = json_get(j, "error");
                if (e) {
                        int64_t err = ECONNREFUSED;
                        (void)json_get_int(e, "errno", &err);
                        relay_report(pr, err > 0 && err < 4096 ? -(int)err : -ECONNREFUSED);
                        relay_close(pr);
                        return;
                }
                op_window_widen(op, SES_STREAM_WINDOW_RAW);
                int fd = relay_connected(pr);
                relay_report(pr, fd);
                if (fd < 0)
                        relay_close(pr);
                return;
        }
        case PROTO_STDOUT:
        case PROTO_STDERR:
                if (h->len == 0) {
                        pr->port_eof = true;
                } else if (buf_append(&pr->to_sock, payload, h->len) < 0) {
                        relay_close(pr);
                        return;
                }
                relay_flush(pr);
                break;
        case PROTO_EXIT:
                /* The stream ended (op_done comes with it): what is left goes out, then our
                 * end closes; an error (a reset) closes it at once. */
                if (json_get(j, "error"))
                        buf_reset(&pr->to_sock);
                pr->port_eof = true;
                relay_flush(pr);
                break;
        default:
                return;
        }
        relay_update(pr);
}

static void relay_fail(struct op *op, void *client, int err, const char *msg) {
        struct port_relay *pr = client;
        (void)op;
        log_debug("port relay %s:%u: %s", pr->s ? pr->s->id : "?", pr->port, msg);
        relay_unlink(pr);
        relay_report(pr, err == -EAGAIN ? -ECONNRESET : err < 0 ? err : -ECONNRESET);
        relay_close(pr);
}

static bool relay_behind(struct op *op, void *client) {
        struct port_relay *pr = client;
        (void)op;
        return pr->to_sock.len >= PORT_RELAY_BUF;
}

static void relay_room(struct op *op, void *client) {
        (void)op;
        relay_update(client);
}

static void relay_detach(struct op *op, void *client) {
        struct port_relay *pr = client;
        if (pr->op == op)
                relay_unlink(pr);
}

static const struct op_ops relay_ops = {
        .frame = relay_frame,
        .fail = relay_fail,
        .behind = relay_behind,
        .room = relay_room,
        .detach = relay_detach,
};

int port_relay_dial(struct session *s, uint16_t port, ingress_dial_fn cb, void *ctx, struct port_relay **ret) {
        if (!ses_usable(s))
                return -EPIPE;
        if (!s->init_window)
                return -EOPNOTSUPP;
        if (s->n_relays >= PORT_RELAYS_PER_SESSION)
                return -EAGAIN;
        struct port_relay *pr = calloc(1, sizeof *pr);
        if (!pr)
                return -ENOMEM;
        *pr = (struct port_relay){ .src.fd = -EBADF, .d = s->d, .s = s, .cb = cb, .ctx = ctx, .port = port,
                                   .to_sock = BUF_INIT(PORT_RELAY_BUF + PROTO_MAX_PAYLOAD) };
        int r = ses_op_new(s, OP_TCP, &relay_ops, pr, &pr->op);
        if (r < 0) {
                free(pr);
                return r;
        }
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "connect");
        json_w_kint(&w, "port", port);
        bool windowed = ses_req_window(s, &w);
        json_w_obj_end(&w);
        if ((r = w.err) < 0 || (r = ses_send_req(s, pr->op->id, &b)) < 0) {
                pr->cb = NULL;
                s->n_relays++; /* op_done's detach takes it back */
                op_done(pr->op);
                buf_free(&pr->to_sock);
                free(pr);
                return r;
        }
        if (windowed)
                op_window_start(pr->op);
        s->n_relays++;
        *ret = pr;
        return 0;
}

void port_relay_cancel(struct port_relay *pr) {
        if (!pr)
                return;
        pr->cb = NULL;
        relay_close(pr);
}
