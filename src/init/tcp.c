/* TCP connections init opens inside the sandbox for spaced (op "connect",
 * docs/protocol.md §3.16): the way into a port of a runtime whose network stack spaced
 * cannot enter itself (gVisor's netstack, a microVM's guest kernel). The stream is framed
 * like a command with streamed stdin: STDIN frames carry what goes to the port (acked by
 * WINDOW frames once written; len 0 half-closes), STDOUT frames what the port sends
 * (counted against the stream's window; len 0 when it half-closed), and EXIT ends it. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/macros.h"
#include "init/init.h"

struct tcp_conn {
        struct watch w;
        struct stream *s;
        uint16_t port;
        int attempt;    /* the address being tried: 0 127.0.0.1, 1 [::1] */
        int last_err;   /* why the last attempt failed */
        bool connected;
        bool port_eof;  /* the port half-closed: STDOUT len 0 went out */
        bool in_eof;    /* spaced half-closed (STDIN len 0) */
        bool shut;      /* ... and that reached the port (shutdown SHUT_WR) */
        bool ended;     /* EXIT sent or failed: tcp_pump frees the stream */
        struct buf pending; /* from spaced, not written to the port yet */
        uint32_t unacked;
};

static unsigned n_tcp;

void tcp_free(struct tcp_conn *t) {
        if (!t)
                return;
        watch_close(&t->w);
        buf_free(&t->pending);
        n_tcp--;
        free(t);
}

static void tcp_ack(struct tcp_conn *t, size_t n, bool now) {
        t->unacked += (uint32_t)n;
        if (t->unacked > 0 && (now || t->unacked >= INIT_STDIN_ACK)) {
                uint8_t w[PROTO_WINDOW_LEN];
                proto_window_encode(t->unacked, w);
                send_frame(PROTO_WINDOW, t->s->id, w, sizeof w);
                t->unacked = 0;
        }
}

/* The end of the stream: EXIT, {} when both sides closed in order, else the error. */
static void tcp_end(struct tcp_conn *t, int err) {
        if (t->ended)
                return;
        t->ended = true;
        watch_close(&t->w);
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (err)
                json_w_error(&w, err, strerror(err));
        json_w_obj_end(&w);
        send_json(PROTO_EXIT, t->s->id, &b);
}

static void tcp_cb(struct watch *w, uint32_t revents);

/* Starts the next attempt; false once every address was tried (the RESP is an error). */
static bool tcp_try(struct tcp_conn *t) {
        for (; t->attempt < 2; t->attempt++) {
                int fam = t->attempt == 0 ? AF_INET : AF_INET6;
                int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        t->last_err = errno;
                        continue;
                }
                int one = 1;
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                int r;
                if (fam == AF_INET) {
                        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(t->port),
                                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
                        r = connect(fd, (struct sockaddr *)&a, sizeof a);
                } else {
                        struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(t->port),
                                                  .sin6_addr = IN6ADDR_LOOPBACK_INIT };
                        r = connect(fd, (struct sockaddr *)&a, sizeof a);
                }
                if (r < 0 && errno != EINPROGRESS) {
                        t->last_err = errno;
                        close(fd);
                        continue;
                }
                t->w = (struct watch){ .fd = fd, .cb = tcp_cb };
                if (watch_set(&t->w, EPOLLOUT) < 0) {
                        t->last_err = errno;
                        watch_close(&t->w);
                        continue;
                }
                return true;
        }
        return false;
}

static void tcp_connected(struct tcp_conn *t) {
        t->connected = true;
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kbool(&w, "stdin_acks", true);
        json_w_kstr(&w, "address", t->attempt == 0 ? "127.0.0.1" : "::1");
        json_w_obj_end(&w);
        send_json(PROTO_RESP, t->s->id, &b);
}

static void tcp_write(struct tcp_conn *t) {
        while (t->pending.len > 0) {
                ssize_t n = send(t->w.fd, t->pending.data, t->pending.len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                tcp_end(t, errno);
                        return;
                }
                buf_consume(&t->pending, (size_t)n);
                tcp_ack(t, (size_t)n, t->pending.len == 0);
        }
        if (t->in_eof && !t->shut) {
                (void)shutdown(t->w.fd, SHUT_WR);
                t->shut = true;
        }
}

static void tcp_read(struct tcp_conn *t) {
        static uint8_t chunk[INIT_CHUNK];
        if (conn_queued(g.conn) >= INIT_OUT_HIGH || stream_room(t->s) == 0)
                return;
        ssize_t n = recv(t->w.fd, chunk, MIN(sizeof chunk, stream_room(t->s)), 0);
        if (n < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        tcp_end(t, errno);
                return;
        }
        if (n == 0) {
                t->port_eof = true;
                send_frame(PROTO_STDOUT, t->s->id, NULL, 0);
                return;
        }
        stream_charge(t->s, (size_t)n);
        send_frame(PROTO_STDOUT, t->s->id, chunk, (size_t)n);
}

static void tcp_cb(struct watch *w, uint32_t revents) {
        struct tcp_conn *t = container_of(w, struct tcp_conn, w);
        if (t->ended)
                return;
        if (!t->connected) {
                int err = 0;
                socklen_t l = sizeof err;
                if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                        err = errno;
                if (err == 0 && (revents & EPOLLOUT)) {
                        tcp_connected(t);
                        return;
                }
                t->last_err = err ? err : ECONNREFUSED;
                watch_close(w);
                t->attempt++;
                if (!tcp_try(t)) {
                        send_error(t->s->id, t->last_err, "nothing answers on port %u: %s", t->port,
                                   strerror(t->last_err));
                        t->ended = true;
                }
                return;
        }
        if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !t->port_eof)
                tcp_read(t);
        if (!t->ended && (revents & (EPOLLOUT | EPOLLERR)) && t->pending.len > 0)
                tcp_write(t);
        if (!t->ended && t->port_eof && t->shut && t->pending.len == 0) {
                tcp_end(t, 0); /* both halves closed in order: a reset after that loses nothing */
                return;
        }
        if (!t->ended && (revents & EPOLLERR) && t->port_eof) {
                int err = 0;
                socklen_t l = sizeof err;
                (void)getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &l);
                tcp_end(t, err ? err : ECONNRESET);
        }
}

void op_connect(uint32_t id, const struct json *req) {
        int64_t port;
        uint32_t window;
        if (json_get_int(req, "port", &port) < 0 || port < 1 || port > 65535) {
                send_error(id, EINVAL, "\"port\" must be an integer 1..65535");
                return;
        }
        if (req_window(req, &window) < 0) {
                send_error(id, EINVAL, "\"window\" must be an integer 0..%u", PROTO_MAX_WINDOW);
                return;
        }
        if (n_tcp >= INIT_MAX_TCP) {
                send_error(id, EMFILE, "%u connections to ports are open already", INIT_MAX_TCP);
                return;
        }
        struct tcp_conn *t = calloc(1, sizeof *t);
        struct stream *s = t ? stream_new(id, STREAM_TCP) : NULL;
        if (!s) {
                free(t);
                send_error(id, ENOMEM, "out of memory");
                return;
        }
        n_tcp++;
        t->w.fd = -EBADF;
        t->s = s;
        t->port = (uint16_t)port;
        t->pending = BUF_INIT(INIT_STDIN_HIGH);
        s->tcp = t;
        stream_set_window(s, window);
        if (!tcp_try(t)) {
                send_error(id, t->last_err, "cannot connect to port %u: %s", t->port, strerror(t->last_err));
                stream_free(s);
        }
}

void tcp_stdin(struct stream *s, const uint8_t *data, size_t n) {
        struct tcp_conn *t = s->tcp;
        if (t->ended || t->in_eof || !t->connected) {
                tcp_ack(t, n, true); /* nowhere to go: spaced may stop counting them */
                return;
        }
        if (n == 0) {
                t->in_eof = true;
                tcp_write(t);
                return;
        }
        if (buf_append(&t->pending, data, n) < 0) {
                log_warn("port %u: more input than acked, closing the connection", t->port);
                tcp_end(t, ENOBUFS);
                return;
        }
        tcp_write(t);
}

/* The loop's pass: an ended stream goes; a connection whose two halves closed ends. */
void tcp_pump(struct stream *s) {
        struct tcp_conn *t = s->tcp;
        if (!t->ended && t->port_eof && t->shut && t->pending.len == 0)
                tcp_end(t, 0);
        if (t->ended)
                stream_free(s);
}

void tcp_update_watches(void) {
        if (!g.conn)
                return;
        bool room = conn_queued(g.conn) < INIT_OUT_HIGH;
        for (struct stream *s = g.conn->streams; s; s = s->next) {
                if (s->kind != STREAM_TCP || s->tcp->ended)
                        continue;
                struct tcp_conn *t = s->tcp;
                uint32_t ev = EPOLLOUT;
                if (t->connected) {
                        ev = 0;
                        if (!t->port_eof && room && stream_room(s) > 0)
                                ev |= EPOLLIN;
                        if (t->pending.len > 0)
                                ev |= EPOLLOUT;
                }
                if (watch_set(&t->w, ev) < 0)
                        tcp_end(t, errno);
        }
}
