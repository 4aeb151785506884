/* Synchronous test client of the space-init protocol; see initc.h. */
#include "initc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#define INITC_MAX_STASH 100000

struct initc_stashed {
        struct initc_stashed *next;
        struct initc_frame f;
};

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int read_hello(struct initc *c) {
        struct initc_frame f = { 0 };
        int r = initc_recv_any(c, &f, 5000);
        if (r <= 0)
                return r == 0 ? -ETIMEDOUT : r;
        if (f.h.type != PROTO_HELLO || f.h.id != 0) {
                initc_frame_free(&f);
                return -EPROTO;
        }
        r = json_parse(f.payload.data, f.payload.len, &c->hello, NULL, 0);
        initc_frame_free(&f);
        return r;
}

int initc_spawn(struct initc *c, const char *init_path, const char *const *extra) {
        int sv[2];
        *c = (struct initc){ .fd = -1, .pid = -1, .next_id = 1, .in = BUF_INIT(0), .out = BUF_INIT(0) };
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                const char *argv[32] = { init_path, "--fd", "3" };
                int n = 3;
                for (size_t i = 0; extra && extra[i] && n < 30; i++)
                        argv[n++] = extra[i];
                argv[n] = NULL;
                if (sv[1] == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(sv[1], 3) < 0)
                        _exit(126);
                execv(init_path, (char *const *)argv);
                _exit(127);
        }
        close(sv[1]);
        c->fd = sv[0];
        c->pid = pid;
        return read_hello(c);
}

int initc_connect(struct initc *c, const char *sock_path) {
        *c = (struct initc){ .fd = -1, .pid = -1, .next_id = 1, .in = BUF_INIT(0), .out = BUF_INIT(0) };
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -errno;
        for (int i = 0; i < 100; i++) {
                if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0)
                        return read_hello(c);
                if (errno != ENOENT && errno != ECONNREFUSED)
                        return -errno;
                usleep(20000); /* init may still be starting */
        }
        return -ETIMEDOUT;
}

int initc_close(struct initc *c, int timeout_ms) {
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        buf_free(&c->in);
        buf_free(&c->out);
        c->out_off = 0;
        c->hello = json_free(c->hello);
        while (c->stash) {
                struct initc_stashed *s = c->stash;
                c->stash = s->next;
                initc_frame_free(&s->f);
                free(s);
        }
        c->n_stash = 0;
        if (c->pid <= 0)
                return 0;
        int64_t end = mono_ms() + timeout_ms;
        int st;
        for (;;) {
                pid_t p = waitpid(c->pid, &st, WNOHANG);
                if (p == c->pid)
                        break;
                if (mono_ms() >= end) {
                        kill(c->pid, SIGKILL);
                        waitpid(c->pid, &st, 0);
                        c->pid = -1;
                        return -ETIMEDOUT;
                }
                usleep(10000);
        }
        c->pid = -1;
        return st;
}

int initc_send(struct initc *c, uint8_t type, uint32_t id, const void *p, size_t n) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        int r = proto_frame_append(&b, type, id, p, (uint32_t)n);
        if (r < 0)
                return r;
        size_t off = 0;
        while (off < b.len) {
                ssize_t k = send(c->fd, b.data + off, b.len - off, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                off += (size_t)k;
        }
        return 0;
}

int initc_queue(struct initc *c, uint8_t type, uint32_t id, const void *p, size_t n) {
        return proto_frame_append(&c->out, type, id, p, (uint32_t)n);
}

int64_t initc_req(struct initc *c, const char *json) {
        uint32_t id = c->next_id++;
        int r = initc_send(c, PROTO_REQ, id, json, strlen(json));
        return r < 0 ? r : (int64_t)id;
}

int initc_recv_any(struct initc *c, struct initc_frame *f, int timeout_ms) {
        int64_t end = mono_ms() + timeout_ms;
        for (;;) {
                struct proto_hdr h;
                const uint8_t *p;
                int r = proto_frame_peek(&c->in, &h, &p);
                if (r < 0)
                        return r;
                if (r > 0) {
                        *f = (struct initc_frame){ .h = h, .payload = BUF_INIT(0) };
                        if (buf_append(&f->payload, p, h.len) < 0 || !buf_cstr(&f->payload))
                                return -ENOMEM;
                        buf_consume(&c->in, PROTO_HDR_SIZE + h.len);
                        return 1;
                }
                int64_t left = end - mono_ms();
                if (left <= 0)
                        return 0;
                bool sending = c->out_off < c->out.len;
                struct pollfd pfd = { .fd = c->fd, .events = POLLIN | (sending ? POLLOUT : 0) };
                r = poll(&pfd, 1, (int)left);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r <= 0)
                        continue;
                if (sending && (pfd.revents & POLLOUT)) {
                        ssize_t k = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                return -errno;
                        if (k > 0)
                                c->out_off += (size_t)k;
                        if (c->out_off == c->out.len) {
                                buf_reset(&c->out);
                                c->out_off = 0;
                        }
                }
                if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                if (buf_reserve(&c->in, 65536) < 0)
                        return -ENOMEM;
                ssize_t n = read(c->fd, c->in.data + c->in.len, 65536);
                if (n == 0)
                        return -EPIPE;
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                c->in.len += (size_t)n;
        }
}

int initc_recv(struct initc *c, uint32_t id, struct initc_frame *f, int timeout_ms) {
        int64_t end = mono_ms() + timeout_ms;
        for (struct initc_stashed **pp = &c->stash; *pp; pp = &(*pp)->next)
                if ((*pp)->f.h.id == id) {
                        struct initc_stashed *s = *pp;
                        *pp = s->next;
                        *f = s->f;
                        free(s);
                        c->n_stash--;
                        return 1;
                }
        for (;;) {
                int64_t left = end - mono_ms();
                int r = initc_recv_any(c, f, left > 0 ? (int)left : 0);
                if (r <= 0)
                        return r;
                if (f->h.id == id)
                        return 1;
                struct initc_stashed *s = calloc(1, sizeof *s);
                if (!s || c->n_stash >= INITC_MAX_STASH) {
                        free(s);
                        initc_frame_free(f);
                        return -ENOBUFS;
                }
                s->f = *f;
                struct initc_stashed **tail = &c->stash;
                while (*tail)
                        tail = &(*tail)->next;
                *tail = s;
                c->n_stash++;
        }
}

void initc_frame_free(struct initc_frame *f) { buf_free(&f->payload); }

int initc_call(struct initc *c, const char *json, struct json **ret_resp) {
        int64_t id = initc_req(c, json);
        if (id < 0)
                return (int)id;
        struct initc_frame f = { 0 };
        int r = initc_recv(c, (uint32_t)id, &f, 10000);
        if (r <= 0)
                return r == 0 ? -ETIMEDOUT : r;
        if (f.h.type != PROTO_RESP) {
                initc_frame_free(&f);
                return -EPROTO;
        }
        r = json_parse(f.payload.data, f.payload.len, ret_resp, NULL, 0);
        initc_frame_free(&f);
        return r;
}

int initc_run(struct initc *c, const char *json, const void *stdin_data, size_t stdin_len,
              struct initc_result *ret, int timeout_ms) {
        *ret = (struct initc_result){ .out = BUF_INIT(0), .err = BUF_INIT(0), .exit_code = -1, .signal = -1 };
        int64_t id = initc_req(c, json);
        if (id < 0)
                return (int)id;
        int64_t end = mono_ms() + timeout_ms;
        struct initc_frame f = { 0 };
        int r = initc_recv(c, (uint32_t)id, &f, timeout_ms);
        if (r <= 0)
                return r == 0 ? -ETIMEDOUT : r;
        if (f.h.type != PROTO_RESP) {
                initc_frame_free(&f);
                return -EPROTO;
        }
        r = json_parse(f.payload.data, f.payload.len, &ret->resp, NULL, 0);
        initc_frame_free(&f);
        if (r < 0)
                return r;
        if (json_get(ret->resp, "error"))
                return 0;
        if (stdin_data) {
                const char *p = stdin_data;
                while (stdin_len > 0) {
                        size_t n = stdin_len > 65536 ? 65536 : stdin_len;
                        if ((r = initc_queue(c, PROTO_STDIN, (uint32_t)id, p, n)) < 0)
                                return r;
                        p += n;
                        stdin_len -= n;
                }
                if ((r = initc_queue(c, PROTO_STDIN, (uint32_t)id, NULL, 0)) < 0)
                        return r;
        }
        for (;;) {
                int64_t left = end - mono_ms();
                r = initc_recv(c, (uint32_t)id, &f, left > 0 ? (int)left : 0);
                if (r <= 0)
                        return r == 0 ? -ETIMEDOUT : r;
                if (f.h.type == PROTO_STDOUT || f.h.type == PROTO_STDERR) {
                        r = buf_append(f.h.type == PROTO_STDOUT ? &ret->out : &ret->err, f.payload.data, f.payload.len);
                        initc_frame_free(&f);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (f.h.type != PROTO_EXIT) {
                        initc_frame_free(&f);
                        return -EPROTO;
                }
                r = json_parse(f.payload.data, f.payload.len, &ret->exit, NULL, 0);
                initc_frame_free(&f);
                if (r < 0)
                        return r;
                (void)json_get_int(ret->exit, "exit_code", &ret->exit_code);
                (void)json_get_int(ret->exit, "signal", &ret->signal);
                ret->timed_out = json_get_bool(ret->exit, "timed_out", false);
                buf_cstr(&ret->out);
                buf_cstr(&ret->err);
                return 0;
        }
}

void initc_result_free(struct initc_result *r) {
        r->resp = json_free(r->resp);
        r->exit = json_free(r->exit);
        buf_free(&r->out);
        buf_free(&r->err);
}

const char *initc_error_code(const struct json *resp) {
        return json_get_str(json_get(resp, "error"), "code");
}
