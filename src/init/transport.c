/* space-init's transport: the one connection to spaced. It takes frames in (framing,
 * input bounds), queues frames out (the output queue and its cap, the flushes to the
 * socket or port), keeps each stream's window (protocol.md §3.14) and accepts the
 * connections that replace it. What a frame means is main.c's; the transport never
 * looks inside one. */
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "common/log.h"
#include "common/sock.h"
#include "init/init.h"

/* ---- output towards spaced ---- */

size_t conn_queued(const struct conn *c) { return c ? c->out.len - c->out_off : 0; }

void send_frame(uint8_t type, uint32_t id, const void *p, size_t n) {
        struct conn *c = g.conn;
        if (!c || c->closing)
                return;
        if (c->out_off > 0 && c->out_off == c->out.len) {
                buf_reset(&c->out);
                c->out_off = 0;
        }
        int r = proto_frame_append(&c->out, type, id, p, (uint32_t)n);
        if (r < 0) {
                /* Only a bug can get here (every producer checks the queue first). */
                log_error("dropping connection: cannot queue %s frame: %s", proto_type_name(type), strerror(-r));
                c->closing = true;
        }
}

void send_json(uint8_t type, uint32_t id, struct buf *json) { send_frame(type, id, json->data, json->len); }

/* flag (NULL for none): a member set true beside the three. */
static void json_w_error_flag(struct json_writer *w, int err, const char *msg, const char *flag) {
        const char *name = strerrorname_np(err);
        json_w_key(w, "error");
        json_w_obj_begin(w);
        json_w_kstr(w, "code", name ? name : "EIO");
        json_w_kint(w, "errno", err);
        json_w_kstr(w, "message", msg);
        if (flag)
                json_w_kbool(w, flag, true);
        json_w_obj_end(w);
}

void json_w_error(struct json_writer *w, int err, const char *msg) {
        json_w_error_flag(w, err, msg, NULL);
}

void send_error_flag(uint32_t id, int err, const char *flag, const char *msg) {
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_error_flag(&w, err, msg, flag);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

void send_error(uint32_t id, int err, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_error(&w, err, msg);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

void conn_flush(struct conn *c) {
        while (!c->closing && conn_queued(c) > 0) {
                const void *p = c->out.data + c->out_off;
                ssize_t n = c->is_sock ? send(c->w.fd, p, conn_queued(c), MSG_NOSIGNAL | MSG_DONTWAIT)
                                       : write(c->w.fd, p, conn_queued(c));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                c->closing = true;
                        break;
                }
                c->out_off += (size_t)n;
        }
        if (c->out_off == c->out.len) {
                buf_reset(&c->out);
                c->out_off = 0;
        } else if (c->out_off >= INIT_OUT_HIGH) {
                buf_consume(&c->out, c->out_off);
                c->out_off = 0;
        }
}

/* ---- stream windows ---- */

int req_window(const struct json *req, uint32_t *ret) {
        int64_t v = 0;
        if (json_get(req, "window") && (json_get_int(req, "window", &v) < 0 || v < 0 || v > PROTO_MAX_WINDOW))
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

void stream_set_window(struct stream *s, uint32_t window) {
        s->windowed = window > 0;
        s->credit = window;
}

size_t stream_room(const struct stream *s) { return s->windowed ? s->credit : SIZE_MAX; }

void stream_charge(struct stream *s, size_t n) {
        if (s->windowed)
                s->credit -= (uint32_t)MIN(n, (size_t)s->credit);
}

/* Never past PROTO_MAX_WINDOW: a grant over it is clipped, so no sum can overflow. */
void stream_grant(struct stream *s, uint32_t grant) {
        if (!s->windowed || s->kind == STREAM_WRITE)
                return;
        s->credit = (uint32_t)MIN((uint64_t)s->credit + grant, (uint64_t)PROTO_MAX_WINDOW);
}

/* ---- input from spaced ---- */

static void conn_cb(struct watch *w, uint32_t revents) {
        struct conn *c = container_of(w, struct conn, w);
        if (c->closing)
                return;
        if (revents & EPOLLERR) {
                log_info("connection error, closing it");
                c->closing = true;
                return;
        }
        if (revents & (EPOLLIN | EPOLLHUP)) {
                size_t room = c->in.max - c->in.len;
                if (room > INIT_CHUNK)
                        room = INIT_CHUNK;
                if (room == 0 && (revents & EPOLLHUP)) {
                        /* can't read the rest, and level-triggered HUP would spin */
                        c->closing = true;
                        return;
                }
                if (room > 0 && buf_reserve(&c->in, room) == 0) {
                        ssize_t n = read(w->fd, c->in.data + c->in.len, room);
                        if (n > 0)
                                c->in.len += (size_t)n;
                        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                                log_info("connection closed by spaced");
                                c->closing = true;
                                return;
                        }
                }
        }
        /* EPOLLOUT: the loop flushes after every batch of events. */
}

bool conn_next_frame(struct conn *c, struct proto_hdr *ret_h, const uint8_t **ret_p) {
        /* No new requests while their answers can't leave: that bounds init's memory, and
         * TCP-like backpressure reaches spaced through the socket. */
        if (c->closing || conn_queued(c) >= INIT_OUT_HIGH)
                return false;
        int r = proto_frame_peek(&c->in, ret_h, ret_p);
        if (r < 0) {
                log_warn("framing error from spaced (%s), closing the connection", strerror(-r));
                c->closing = true;
        }
        return r > 0;
}

void conn_frame_done(struct conn *c, const struct proto_hdr *h) { buf_consume(&c->in, PROTO_HDR_SIZE + h->len); }

void conn_watch(struct conn *c, bool want_input) {
        uint32_t ev = 0;
        if (want_input && c->in.len < c->in.max)
                ev |= EPOLLIN;
        if (conn_queued(c) > 0)
                ev |= EPOLLOUT;
        if (watch_set(&c->w, ev) < 0)
                c->closing = true;
}

/* ---- the connection ---- */

int conn_open(int fd) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->w = (struct watch){ .fd = fd, .cb = conn_cb };
        struct stat st;
        c->is_sock = fstat(fd, &st) < 0 || S_ISSOCK(st.st_mode);
        c->in = BUF_INIT(PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD);
        c->out = BUF_INIT(INIT_OUT_MAX);
        g.conn = c;
        int r = watch_set(&c->w, EPOLLIN);
        if (r < 0) {
                conn_free(c);
                return r;
        }
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer jw = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&jw);
        json_w_kint(&jw, "version", PROTO_VERSION);
        json_w_kint(&jw, "pid", getpid());
        json_w_kint(&jw, "uptime_ms", (int64_t)(now_ms() - g.start_ms));
        json_w_kbool(&jw, "window", true); /* honours "window" and WINDOW (§3.14) */
        json_w_kbool(&jw, "keys", true);   /* takes a KEY frame (§1) */
        json_w_kbool(&jw, "tty", true);    /* exec "tty" and op resize (§3.18) */
        json_w_kbool(&jw, "input", true);  /* op input, background stdin, "tag" (§3.21) */
        if (g.have_key) {
                char hex[2 * PROTO_KEY_LEN + 1];
                for (size_t i = 0; i < PROTO_KEY_LEN; i++)
                        snprintf(hex + 2 * i, 3, "%02x", g.key[i]);
                json_w_kstr(&jw, "key", hex);
        }
        json_w_obj_end(&jw);
        send_json(PROTO_HELLO, 0, &b);
        return 0;
}

void conn_free(struct conn *c) {
        watch_close(&c->w);
        buf_free(&c->in);
        buf_free(&c->out);
        free(c);
        g.conn = NULL;
}

/* ---- accepting connections ---- */

/* The parent pid of pid (0: none in this pid namespace), from /proc/PID/stat. */
static int ppid_of(pid_t pid, pid_t *ret) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return n < 0 ? -errno : -EIO;
        buf[n] = 0;
        /* "pid (comm) state ppid …": comm may hold anything, ')' included */
        const char *p = strrchr(buf, ')');
        int ppid;
        char state;
        if (!p || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
                return -EIO;
        *ret = ppid;
        return 0;
}

/* Whether the peer on fd is the host's relay: its first byte (INIT_RELAY_HELLO) comes with
 * its credentials (SCM_CREDENTIALS, checked by the kernel: naming another pid needs
 * CAP_SYS_ADMIN, which no process of the sandbox has), and that pid has no parent in the
 * sandbox: every process of the sandbox descends from (or was reparented to) PID 1, so
 * only one started into it from outside (`runsc exec`) has none. SO_PEERCRED would be
 * simpler, but gVisor reports the listener's pid for an accepted socket. Init asks first
 * (INIT_RELAY_ASK) and waits at most INIT_RELAY_AUTH_MS for the answer. */
static bool peer_is_relay(int fd, pid_t *ret_pid) {
        /* asked for only now, with SO_PASSCRED set: gVisor attaches credentials only to
         * what is sent after the receiver asked for them */
        int one = 1;
        char ask = INIT_RELAY_ASK;
        if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0 || send(fd, &ask, 1, MSG_NOSIGNAL) != 1)
                return false;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, INIT_RELAY_AUTH_MS) != 1)
                return false;
        char byte = 0;
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
        if (recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1 || byte != INIT_RELAY_HELLO)
                return false;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS ||
            c->cmsg_len != CMSG_LEN(sizeof(struct ucred)))
                return false;
        struct ucred uc;
        memcpy(&uc, CMSG_DATA(c), sizeof uc);
        *ret_pid = uc.pid;
        pid_t ppid = -1;
        return uc.pid > 1 && ppid_of(uc.pid, &ppid) == 0 && ppid == 0;
}

static void listen_cb(struct watch *w, uint32_t revents) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        log_warn("accept: %m");
                return;
        }
        pid_t peer = 0;
        if (g.listen_outside_only && !peer_is_relay(fd, &peer)) {
                /* a process of the sandbox trying to take the daemon's place */
                log_warn("refused a connection from pid %d, a process of the sandbox", (int)peer);
                close(fd);
                return;
        }
        /* Started by the loop, outside the callbacks: replacing the active connection frees
         * it, and an event for it may still be pending in this epoll batch. */
        safe_close(g.pending_fd);
        g.pending_fd = fd;
}

static int listen_path(const char *path) {
        struct sockaddr_un sa;
        int r = sock_unix_addr(path, &sa);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        (void)unlink(path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0)
                return -errno;
        return TAKE_FD(fd);
}

int conn_listen(const char *path, int fd) {
        if (path) {
                fd = listen_path(path);
                if (fd < 0)
                        return fd;
        } else {
                int fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                        return -errno;
        }
        g.listen = (struct watch){ .fd = fd, .cb = listen_cb };
        return watch_set(&g.listen, EPOLLIN);
}
