/* Ingress: sockets made inside a sandbox's network namespace, dials to its loopback, and
 * the pipes that carry bytes between a client and a sandbox port (ingress.h). Everything
 * runs on the loop thread; the only namespace switch is the pair of setns() calls around
 * socket() in ingress_socket. */
#include "daemon/net/ingress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/macros.h"
#include "daemon/util.h"

struct ingress_pipe;

/* One end of a pipe; out holds what is to be written to this end's fd. */
struct pipe_side {
        struct loop_src src;
        struct ingress_pipe *p;
        struct buf out;
        size_t out_off;
        bool rd_eof;   /* read EOF from this end */
        bool wr_shut;  /* shut down for writing (the other end's EOF passed on) */
        bool wr_dead;  /* writing failed: what is for this end is dropped */
};

struct ingress_pipe {
        struct ingress *ig;
        struct ingress_pipe *next, *prev;
        enum ingress_pipe_mode mode;
        struct pipe_side s[2]; /* 0: client, 1: upstream */
        char owner[INGRESS_OWNER_MAX + 1];
        uint16_t port;
        uint64_t last_ms;
        uint64_t linger_until_ms; /* 0: not lingering */
        bool closed;
};

struct ingress_dial {
        struct ingress *ig;
        struct ingress_dial *next, *prev;
        struct loop_src src;
        int netns;
        uint16_t port;
        int stage;         /* 0: 127.0.0.1, 1: ::1 */
        int err;           /* of the last attempt */
        char owner[INGRESS_OWNER_MAX + 1];
        ingress_dial_fn cb;
        void *ctx;
        uint64_t deadline_ms;
        bool done;         /* cb ran or was cancelled: freed after the batch */
        bool deferred;     /* a finish is queued with loop_defer */
};

struct ingress {
        struct loop *loop;
        int self_netns;    /* spaced's own network namespace, for the way back */
        struct ingress_pipe *pipes;
        struct ingress_dial *dials;
        size_t n_pipes, n_dials;
};

int ingress_new(struct loop *l, struct ingress **ret) {
        struct ingress *ig = calloc(1, sizeof *ig);
        if (!ig)
                return -ENOMEM;
        /* The thread's, not the process's: the loop thread is the one that comes back. */
        ig->self_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ig->self_netns < 0) {
                int r = -errno;
                free(ig);
                return r;
        }
        ig->loop = l;
        *ret = ig;
        return 0;
}

static void pipe_close(struct ingress_pipe *p);
static void dial_free_deferred(void *ptr);

struct ingress *ingress_free(struct ingress *ig) {
        if (!ig)
                return NULL;
        while (ig->pipes)
                pipe_close(ig->pipes);
        while (ig->dials) {
                struct ingress_dial *dl = ig->dials;
                ingress_dial_cancel(dl);
        }
        /* Their frees are deferred: they run at the loop's next batch or loop_free. */
        safe_close(ig->self_netns);
        free(ig);
        return NULL;
}

int ingress_socket(struct ingress *ig, int netns_fd, int family, int *ret) {
        if (setns(netns_fd, CLONE_NEWNET) < 0)
                return -errno; /* still in our own namespace */
        int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int e = errno;
        for (int i = 0; setns(ig->self_netns, CLONE_NEWNET) < 0; i++) {
                if (i == 3) {
                        /* Every socket spaced made from here on would be the sandbox's. */
                        log_error("ingress: cannot return to spaced's network namespace: %m");
                        abort();
                }
        }
        if (fd < 0)
                return -e;
        *ret = fd;
        return 0;
}

/* ---- dials ---- */

static void dial_unlink(struct ingress_dial *dl) {
        struct ingress *ig = dl->ig;
        if (dl->prev)
                dl->prev->next = dl->next;
        else
                ig->dials = dl->next;
        if (dl->next)
                dl->next->prev = dl->prev;
        dl->next = dl->prev = NULL;
        ig->n_dials--;
}

static void dial_free_deferred(void *ptr) {
        struct ingress_dial *dl = ptr;
        safe_close(dl->src.fd);
        safe_close(dl->netns);
        free(dl);
}

/* Ends dl: cb (unless cancelled) with fd or err; dl is freed after the batch. */
static void dial_finish(struct ingress_dial *dl, int fd_or_err) {
        if (dl->done) {
                safe_close(fd_or_err);
                return;
        }
        dl->done = true;
        loop_del(dl->ig->loop, &dl->src);
        if (fd_or_err >= 0 && fd_or_err == dl->src.fd)
                dl->src.fd = -EBADF; /* the callee's now */
        dial_unlink(dl);
        ingress_dial_fn cb = dl->cb;
        void *ctx = dl->ctx;
        (void)loop_defer(dl->ig->loop, dial_free_deferred, dl);
        cb(ctx, fd_or_err);
}

static void dial_event(struct loop_src *src, uint32_t revents);

/* Tries the next address; false when none is left (dl->err says why the last failed). */
static bool dial_attempt(struct ingress_dial *dl) {
        for (; dl->stage < 2; dl->stage++) {
                dl->src.fd = safe_close(dl->src.fd);
                int family = dl->stage == 0 ? AF_INET : AF_INET6;
                int fd;
                int r = ingress_socket(dl->ig, dl->netns, family, &fd);
                if (r < 0) {
                        dl->err = r;
                        continue;
                }
                dl->src.fd = fd;
                struct sockaddr_storage ss = { 0 };
                socklen_t sl;
                if (family == AF_INET) {
                        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
                        in->sin_family = AF_INET;
                        in->sin_port = htons(dl->port);
                        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                        sl = sizeof *in;
                } else {
                        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
                        in6->sin6_family = AF_INET6;
                        in6->sin6_port = htons(dl->port);
                        in6->sin6_addr = in6addr_loopback;
                        sl = sizeof *in6;
                }
                if (connect(fd, (struct sockaddr *)&ss, sl) == 0) {
                        dl->err = 0;
                        return true;
                }
                if (errno == EINPROGRESS) {
                        dl->err = -EINPROGRESS;
                        dl->src.cb = dial_event;
                        if (loop_add(dl->ig->loop, &dl->src, EPOLLOUT) == 0)
                                return true;
                        dl->err = -errno;
                        continue;
                }
                dl->err = -errno;
        }
        return false;
}

/* The port took the connection or refused it. */
static void dial_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct ingress_dial *dl = (struct ingress_dial *)((char *)src - offsetof(struct ingress_dial, src));
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(src->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                err = errno;
        if (err == 0) {
                dial_finish(dl, src->fd);
                return;
        }
        loop_del(dl->ig->loop, &dl->src);
        dl->err = -err;
        dl->stage++;
        if (!dial_attempt(dl))
                dial_finish(dl, dl->err);
        else if (dl->err == 0)
                dial_finish(dl, dl->src.fd);
}

/* A dial that ended inside ingress_dial reports after the caller's stack unwound. */
static void dial_report_deferred(void *ptr) {
        struct ingress_dial *dl = ptr;
        dl->deferred = false;
        if (dl->done) { /* cancelled meanwhile */
                dial_free_deferred(dl);
                return;
        }
        dial_finish(dl, dl->err == 0 ? dl->src.fd : dl->err);
}

int ingress_dial(struct ingress *ig, int netns_fd, uint16_t port, const char *owner, ingress_dial_fn cb, void *ctx,
                 struct ingress_dial **ret) {
        if (ig->n_pipes + ig->n_dials >= INGRESS_PIPES_MAX || ingress_count(ig, owner) >= INGRESS_PIPES_PER_OWNER)
                return -EAGAIN;
        struct ingress_dial *dl = calloc(1, sizeof *dl);
        if (!dl)
                return -ENOMEM;
        dl->src.fd = -EBADF;
        dl->netns = fcntl(netns_fd, F_DUPFD_CLOEXEC, 3);
        if (dl->netns < 0) {
                int r = -errno;
                free(dl);
                return r;
        }
        dl->ig = ig;
        dl->port = port;
        dl->cb = cb;
        dl->ctx = ctx;
        dl->deadline_ms = util_now_ms() + INGRESS_CONNECT_MS;
        snprintf(dl->owner, sizeof dl->owner, "%s", owner);
        dl->next = ig->dials;
        if (ig->dials)
                ig->dials->prev = dl;
        ig->dials = dl;
        ig->n_dials++;
        if (!dial_attempt(dl) || dl->err == 0) {
                /* Answered at once (loopback usually does): report after the caller's stack. */
                dl->deferred = true;
                if (loop_defer(ig->loop, dial_report_deferred, dl) < 0) {
                        dial_unlink(dl);
                        dial_free_deferred(dl);
                        return -ENOMEM;
                }
        }
        *ret = dl;
        return 0;
}

void ingress_dial_cancel(struct ingress_dial *dl) {
        if (!dl || dl->done)
                return;
        dl->done = true;
        loop_del(dl->ig->loop, &dl->src);
        dial_unlink(dl);
        if (!dl->deferred)
                (void)loop_defer(dl->ig->loop, dial_free_deferred, dl);
        /* else dial_report_deferred frees it */
}

/* ---- pipes ---- */

static void pipe_free_deferred(void *ptr) {
        struct ingress_pipe *p = ptr;
        for (int i = 0; i < 2; i++)
                buf_free(&p->s[i].out);
        free(p);
}

static void pipe_close(struct ingress_pipe *p) {
        if (p->closed)
                return;
        p->closed = true;
        struct ingress *ig = p->ig;
        for (int i = 0; i < 2; i++) {
                loop_del(ig->loop, &p->s[i].src);
                p->s[i].src.fd = safe_close(p->s[i].src.fd);
        }
        if (p->prev)
                p->prev->next = p->next;
        else
                ig->pipes = p->next;
        if (p->next)
                p->next->prev = p->prev;
        ig->n_pipes--;
        (void)loop_defer(ig->loop, pipe_free_deferred, p);
}

static size_t side_pending(const struct pipe_side *s) { return s->out.len - s->out_off; }

/* Writes what end i has queued; passes on the other end's EOF once all is out. */
static void side_flush(struct ingress_pipe *p, int i) {
        struct pipe_side *s = &p->s[i];
        while (side_pending(s) > 0 && !s->wr_dead) {
                ssize_t n = send(s->src.fd, s->out.data + s->out_off, side_pending(s), MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        /* This end no longer takes data (it closed, or reset); what the other
                         * end still says to it is dropped, but what it says goes on. */
                        s->wr_dead = true;
                        break;
                }
                s->out_off += (size_t)n;
                p->last_ms = util_now_ms();
        }
        if (s->wr_dead || s->out_off == s->out.len) {
                buf_reset(&s->out);
                s->out_off = 0;
        } else if (s->out_off > s->out.len / 2) {
                buf_consume(&s->out, s->out_off);
                s->out_off = 0;
        }
        if (!s->wr_shut && !s->wr_dead && p->s[1 - i].rd_eof && side_pending(s) == 0) {
                s->wr_shut = true;
                (void)shutdown(s->src.fd, SHUT_WR);
        }
}

/* A direction is over once its source ended and everything reached the sink (or the sink
 * takes nothing more). */
static bool dir_done(const struct ingress_pipe *p, int from) {
        const struct pipe_side *to = &p->s[1 - from];
        return p->s[from].rd_eof && (to->wr_dead || (to->wr_shut && side_pending(to) == 0));
}

static void pipe_update(struct ingress_pipe *p) {
        if (p->closed)
                return;
        if (dir_done(p, 0) && dir_done(p, 1)) {
                pipe_close(p);
                return;
        }
        if (p->mode == INGRESS_PIPE_HTTP && !p->linger_until_ms && dir_done(p, 1)) {
                /* The answer is out: the upstream hears nothing more, the client's rest is
                 * dropped until its EOF or the deadline. */
                p->linger_until_ms = util_now_ms() + INGRESS_LINGER_MS;
                p->s[1].wr_dead = true;
                buf_reset(&p->s[1].out);
                p->s[1].out_off = 0;
        }
        for (int i = 0; i < 2; i++) {
                struct pipe_side *s = &p->s[i];
                const struct pipe_side *o = &p->s[1 - i];
                uint32_t ev = 0;
                /* Reading i fills o's queue: only while it has room. */
                if (!s->rd_eof && (o->wr_dead || side_pending(o) < INGRESS_PIPE_BUF))
                        ev |= EPOLLIN;
                if (side_pending(s) > 0 && !s->wr_dead)
                        ev |= EPOLLOUT;
                if (ev == 0) {
                        /* Nothing to wait for on this end (it ended, its queue is empty):
                         * out of the set, or its hang-up would be reported for ever. */
                        loop_del(p->ig->loop, &s->src);
                } else if (!s->src.registered) {
                        if (loop_add(p->ig->loop, &s->src, ev) < 0) {
                                pipe_close(p);
                                return;
                        }
                } else if (loop_mod(p->ig->loop, &s->src, ev) < 0) {
                        pipe_close(p);
                        return;
                }
        }
}

/* Reads end i into the other end's queue (dropped if that end is dead). */
static void side_read(struct ingress_pipe *p, int i) {
        struct pipe_side *s = &p->s[i], *o = &p->s[1 - i];
        for (int round = 0; round < 4 && !s->rd_eof; round++) {
                size_t room = INGRESS_PIPE_BUF - MIN(side_pending(o), (size_t)INGRESS_PIPE_BUF);
                char tmp[16u << 10];
                char *dst = tmp;
                size_t want = sizeof tmp;
                if (!o->wr_dead) {
                        if (room == 0)
                                return;
                        if (buf_reserve(&o->out, room) < 0) {
                                pipe_close(p);
                                return;
                        }
                        dst = o->out.data + o->out.len;
                        want = room;
                }
                ssize_t n = recv(s->src.fd, dst, want, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        /* A reset: the other end gets none either (closing resets it too). */
                        pipe_close(p);
                        return;
                }
                if (n == 0) {
                        s->rd_eof = true;
                        return;
                }
                p->last_ms = util_now_ms();
                if (!o->wr_dead)
                        o->out.len += (size_t)n;
                if ((size_t)n < want)
                        return;
        }
}

static void side_event(struct loop_src *src, uint32_t revents) {
        struct pipe_side *s = (struct pipe_side *)src;
        struct ingress_pipe *p = s->p;
        int i = s == &p->s[0] ? 0 : 1;
        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                side_read(p, i);
                if (p->closed)
                        return;
                side_flush(p, 1 - i);
        }
        if (revents & (EPOLLOUT | EPOLLERR))
                side_flush(p, i);
        /* The other end's EOF may now pass on, and a queue that drained opens reading. */
        side_flush(p, 1 - i);
        pipe_update(p);
}

int ingress_pipe_new(struct ingress *ig, enum ingress_pipe_mode mode, const char *owner, uint16_t port, int client,
                     struct buf *to_client, int upstream, struct buf *to_upstream) {
        struct ingress_pipe *p = calloc(1, sizeof *p);
        if (!p) {
                safe_close(client);
                safe_close(upstream);
                return -ENOMEM;
        }
        p->ig = ig;
        p->mode = mode;
        p->port = port;
        snprintf(p->owner, sizeof p->owner, "%s", owner);
        int fds[2] = { client, upstream };
        struct buf *first[2] = { to_client, to_upstream };
        for (int i = 0; i < 2; i++) {
                struct pipe_side *s = &p->s[i];
                s->p = p;
                s->src.fd = fds[i];
                s->src.cb = side_event;
                s->out = BUF_INIT(0);
                if (first[i]) {
                        s->out = *first[i];
                        s->out.max = 0;
                        *first[i] = BUF_INIT(first[i]->max);
                }
        }
        p->last_ms = util_now_ms();
        p->next = ig->pipes;
        if (ig->pipes)
                ig->pipes->prev = p;
        ig->pipes = p;
        ig->n_pipes++;
        side_flush(p, 1);
        side_flush(p, 0);
        pipe_update(p);
        return 0;
}

size_t ingress_count(const struct ingress *ig, const char *owner) {
        size_t n = 0;
        for (const struct ingress_pipe *p = ig->pipes; p; p = p->next)
                n += !p->closed && strcmp(p->owner, owner) == 0;
        for (const struct ingress_dial *dl = ig->dials; dl; dl = dl->next)
                n += strcmp(dl->owner, owner) == 0;
        return n;
}

void ingress_close(struct ingress *ig, const char *owner, uint16_t port) {
        for (struct ingress_pipe *p = ig->pipes, *next; p; p = next) {
                next = p->next;
                if (strcmp(p->owner, owner) == 0 && (port == 0 || p->port == port))
                        pipe_close(p);
        }
}

void ingress_tick(struct ingress *ig) {
        uint64_t now = util_now_ms();
        for (struct ingress_pipe *p = ig->pipes, *next; p; p = next) {
                next = p->next;
                if ((p->linger_until_ms && now > p->linger_until_ms) || now - p->last_ms > INGRESS_IDLE_MS)
                        pipe_close(p);
        }
        for (struct ingress_dial *dl = ig->dials, *next; dl; dl = next) {
                next = dl->next;
                if (!dl->deferred && now > dl->deadline_ms)
                        dial_finish(dl, -ETIMEDOUT);
        }
}
