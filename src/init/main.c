/* space-init: PID 1 of every sandbox. One single-threaded epoll loop serves one connection
 * to spaced (fd 3, or accepted on --listen or on the listening fd $SPACE_INIT_LISTEN_FD),
 * runs commands, streams their output, serves files and reaps every zombie. The newest
 * connection wins; with something to accept on, init and its processes outlive a lost
 * connection (a daemon restart). The protocol is docs/protocol.md. This file is the loop
 * and the dispatch of requests; transport.c carries the frames. */
#include <fcntl.h>
#include <getopt.h>
#include <linux/close_range.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "common/log.h"
#include "init/init.h"

struct init g = { .epfd = -EBADF, .root_fd = -EBADF, .pending_fd = -EBADF, .guest_init_fd = -EBADF, .guest_userns_fd = -EBADF,
                  .listen = { .fd = -EBADF } };

uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int watch_set(struct watch *w, uint32_t events) {
        if (w->fd < 0 || w->events == events)
                return 0;
        struct epoll_event ev = { .events = events, .data.ptr = w };
        int op = w->events == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
        if (epoll_ctl(g.epfd, op, w->fd, &ev) < 0)
                return -errno;
        w->events = events;
        return 0;
}

void watch_close(struct watch *w) {
        if (w->fd < 0)
                return;
        if (w->events)
                epoll_ctl(g.epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->events = 0;
        w->fd = safe_close(w->fd);
}

/* ---- streams: the live request ids of the connection ---- */

struct stream *stream_new(uint32_t id, enum stream_kind kind) {
        struct conn *c = g.conn;
        struct stream *s = calloc(1, sizeof *s);
        if (!s)
                return NULL;
        s->id = id;
        s->kind = kind;
        s->fd = -EBADF;
        s->dirfd = -EBADF;
        s->next = c->streams;
        c->streams = s;
        c->n_streams++;
        return s;
}

void stream_free(struct stream *s) {
        struct conn *c = g.conn;
        for (struct stream **pp = &c->streams; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        c->n_streams--;
                        break;
                }
        if (s->kind == STREAM_ATTACH && s->proc)
                s->proc->attached--;
        if (s->kind == STREAM_EXEC && s->proc)
                s->proc->fg = NULL;
        tcp_free(s->tcp);
        fsw_free(s->fsw);
        safe_close(s->fd);
        safe_close(s->dirfd);
        free(s->tmp_name);
        free(s->name);
        free(s);
}

static struct stream *stream_find(uint32_t id) {
        for (struct stream *s = g.conn->streams; s; s = s->next)
                if (s->id == id)
                        return s;
        return NULL;
}

/* ---- requests ---- */

static void op_ping(uint32_t id, const struct json *req) {
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "pid", getpid());
        json_w_kint(&w, "uptime_ms", (int64_t)(now_ms() - g.start_ms));
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

static const struct {
        const char *name;
        void (*fn)(uint32_t id, const struct json *req);
} ops[] = {
        { "exec", op_exec },   { "ps", op_ps },       { "attach", op_attach }, { "signal", op_signal },
        { "read", op_read },   { "write", op_write }, { "list", op_list },     { "stat", op_stat },
        { "mkdir", op_mkdir }, { "remove", op_remove }, { "ping", op_ping },
        { "connect", op_connect }, { "watch", op_watch },
        { "resize", op_resize }, { "rename", op_rename }, { "tree", op_tree }, { "input", op_input },
};

static void handle_req(uint32_t id, const uint8_t *p, size_t n) {
        if (id == 0) {
                send_error(0, EINVAL, "request id 0 is reserved");
                return;
        }
        if (stream_find(id)) {
                send_error(id, EBUSY, "request id %u is still in use", id);
                return;
        }
        _cleanup_json_ struct json *req = NULL;
        char err[128] = "";
        int r = json_parse((const char *)p, n, &req, err, sizeof err);
        if (r < 0) {
                send_error(id, EINVAL, "malformed request JSON: %s", err[0] ? err : strerror(-r));
                return;
        }
        const char *op = json_get_str(req, "op");
        if (json_type(req) != JSON_OBJECT || !op) {
                send_error(id, EINVAL, "a request is a JSON object with a string \"op\"");
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(ops); i++)
                if (strcmp(ops[i].name, op) == 0) {
                        ops[i].fn(id, req);
                        return;
                }
        send_error(id, EOPNOTSUPP, "unknown op \"%.64s\"", op);
}

/* A CANCEL, or the connection going: the stream ends without a reply. */
static void stream_cancel(struct stream *s) {
        switch (s->kind) {
        case STREAM_EXEC:
                proc_detach(s->proc);
                break;
        case STREAM_WRITE:
                write_abort(s);
                break;
        case STREAM_ATTACH:
        case STREAM_READ:
        case STREAM_TCP:
        case STREAM_WATCH:
                break;
        }
        stream_free(s);
}

static void handle_frame(const struct proto_hdr *h, const uint8_t *p) {
        struct stream *s;
        switch (h->type) {
        case PROTO_REQ:
                handle_req(h->id, p, h->len);
                break;
        case PROTO_STDIN:
                s = stream_find(h->id);
                if (s && (s->kind == STREAM_EXEC || (s->kind == STREAM_ATTACH && s->proc->tty)))
                        proc_stdin(s->proc, p, h->len); /* a terminal takes input from any attach */
                else if (s && s->kind == STREAM_TCP)
                        tcp_stdin(s, p, h->len);
                break;
        case PROTO_DATA:
                s = stream_find(h->id);
                if (s && s->kind == STREAM_WRITE)
                        write_data(s, p, h->len);
                break;
        case PROTO_CANCEL:
                s = stream_find(h->id);
                if (s)
                        stream_cancel(s);
                break;
        case PROTO_WINDOW:
                s = stream_find(h->id);
                if (s)
                        stream_grant(s, proto_window_decode(p));
                break;
        case PROTO_KEY:
                /* A new one replaces the old: a sandbox restored from a memory snapshot
                 * gets the key of its new spaced record. */
                memcpy(g.key, p, PROTO_KEY_LEN);
                g.have_key = true;
                break;
        default:
                log_debug("ignoring %s frame from spaced", proto_type_name(h->type));
                break;
        }
}

/* Requests wait too while a command's stdin is backed up (the transport holds them back
 * while the output queue is full): both bound init's memory. */
static void dispatch_input(struct conn *c) {
        struct proto_hdr h;
        const uint8_t *p;
        while (!proc_stdin_full() && conn_next_frame(c, &h, &p)) {
                handle_frame(&h, p);
                conn_frame_done(c, &h);
        }
}

/* ---- the connection's lifetime ---- */

static void conn_end(struct conn *c) {
        while (c->streams)
                stream_cancel(c->streams);
        conn_free(c);
}

static int conn_start(int fd) {
        if (g.conn) {
                log_info("a new connection replaces the active one");
                conn_end(g.conn);
        }
        return conn_open(fd);
}

/* ---- the guest's control port ---- */

/* One byte per command from the microvm driver, answered with the same byte:
 * 'S' flushes every filesystem (before the host reads the session disk), 'R' starts a
 * new connection on the init port (after a restore or a checkpoint: whatever the old
 * one was in the middle of is dropped, and HELLO comes first), 'N' brings the network up
 * (guest_net_up; answered 'E' when that failed). */
static void ctl_cb(struct watch *w, uint32_t revents) {
        char cmd[16];
        ssize_t n = read(w->fd, cmd, sizeof cmd);
        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                /* host side not connected: a port HUPs until it is, so poll it slowly */
                (void)watch_set(w, 0);
                g.ctl_retry_ms = now_ms() + 100;
                return;
        }
        (void)revents;
        for (ssize_t i = 0; i < n; i++) {
                if (cmd[i] == 'S')
                        sync();
                else if (cmd[i] == 'R') {
                        int fd = fcntl(g.guest_init_fd, F_DUPFD_CLOEXEC, 3);
                        if (fd < 0) {
                                log_error("guest: dup of the init port: %m");
                                continue;
                        }
                        safe_close(g.pending_fd);
                        g.pending_fd = fd;
                } else if (cmd[i] == 'N') {
                        if (guest_net_up() < 0) {
                                char e = 'E';
                                if (write(w->fd, &e, 1) != 1)
                                        log_warn("guest: control port answer: %m");
                                continue;
                        }
                } else
                        continue;
                if (write(w->fd, &cmd[i], 1) != 1)
                        log_warn("guest: control port answer: %m");
        }
}

/* ---- signals ---- */

static void begin_termination(void) {
        if (g.terminating)
                return;
        log_info("terminating: SIGTERM to every process");
        g.terminating = true;
        g.term_deadline_ms = now_ms() + INIT_TERM_GRACE_MS;
        procs_kill_all(SIGTERM);
}

static void sig_cb(struct watch *w, uint32_t revents) {
        struct signalfd_siginfo si;
        while (read(w->fd, &si, sizeof si) == (ssize_t)sizeof si) {
                switch (si.ssi_signo) {
                case SIGCHLD:
                        procs_reap();
                        break;
                case SIGTERM:
                case SIGINT:
                        begin_termination();
                        break;
                default:
                        break;
                }
        }
}

static int setup_signals(void) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
                return -errno;
        signal(SIGPIPE, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0)
                return -errno;
        g.sig = (struct watch){ .fd = fd, .cb = sig_cb };
        return watch_set(&g.sig, EPOLLIN);
}

/* ---- main ---- */

static void usage(FILE *f) {
        fprintf(f, "usage: space-init [--fd N] [--listen PATH] [--root DIR] [--guest] [--debug]\n"
                   "       space-init --relay PATH\n"
                   "PID 1 of a SPACE sandbox; speaks the protocol of docs/protocol.md on fd N\n"
                   "(default: $SPACE_INIT_FD, else 3) and/or on connections accepted at PATH\n"
                   "or on the listening socket $SPACE_INIT_LISTEN_FD.\n"
                   "--guest: /init of a microVM: mount the sandbox root from the virtio disks\n"
                   "and speak on the virtio-serial port space.init (docs/runtime-microvm.md).\n"
                   "--relay PATH: copy stdin/stdout to and from the unix socket PATH, where\n"
                   "another space-init listens (how the gvisor runtime reaches it); its first\n"
                   "byte carries its credentials: as PID 1, a --listen space-init accepts only a\n"
                   "relay started from outside the sandbox (no parent inside it).\n");
}

static void stdio_ensure_open(void) {
        /* Pipes must never land on 0-2, or the dup2 in a child would clobber them. */
        for (int fd = 0; fd < 3; fd++)
                if (fcntl(fd, F_GETFD) < 0) {
                        int n = open("/dev/null", O_RDWR);
                        if (n >= 0 && n != fd) {
                                dup2(n, fd);
                                close(n);
                        }
                }
}

static int parse_fd(const char *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end || end == s || v < 0 || v > 65535)
                return -EINVAL;
        return (int)v;
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "fd", required_argument, NULL, 'f' },   { "listen", required_argument, NULL, 'l' },
                { "root", required_argument, NULL, 'r' }, { "debug", no_argument, NULL, 'd' },
                { "help", no_argument, NULL, 'h' },       { "guest", no_argument, NULL, 'g' },
                { "relay", required_argument, NULL, 'R' },
                {},
        };
        const char *listen_path = NULL, *root = "/";
        int conn_fd = -1, listen_fd = -1;
        bool fd_given = false;
        int c;

        log_set_ident("space-init");
        /* Not dumpable: a process of the sandbox (root inside, without CAP_SYS_PTRACE in
         * init's user namespace) can then neither ptrace init nor take its fds with
         * pidfd_getfd (the daemon connection, the listening socket, the root fd), nor read
         * its /proc/1/{environ,maps,mem,fd,exe}. Kept for life: init never execs or
         * changes its ids. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
                fprintf(stderr, "space-init: prctl(PR_SET_DUMPABLE): %s\n", strerror(errno));
                return 1;
        }
        /* Run from a sealed memfd (the ns runtime), the kernel names us "memfd:space-ini";
         * ps inside, and whoever looks for init by name, should see what it is. Run from a
         * path (gvisor, a microVM's /init) the name is the file's, and stays. */
        char comm[17] = "";
        if (prctl(PR_GET_NAME, comm, 0, 0, 0) == 0 && !strncmp(comm, "memfd:", 6))
                (void)prctl(PR_SET_NAME, "space-init", 0, 0, 0); /* a name only: failing changes nothing */
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
                switch (c) {
                case 'f':
                        conn_fd = parse_fd(optarg);
                        if (conn_fd < 0) {
                                fprintf(stderr, "space-init: bad --fd '%s'\n", optarg);
                                return 2;
                        }
                        fd_given = true;
                        break;
                case 'l':
                        listen_path = optarg;
                        break;
                case 'r':
                        root = optarg;
                        break;
                case 'g':
                        g.guest = true;
                        break;
                case 'd':
                        log_set_level(LOG_DEBUG);
                        break;
                case 'R':
                        return init_relay(optarg);
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        const char *le = g.guest ? NULL : getenv("SPACE_INIT_LISTEN_FD");
        if (le && !listen_path) {
                listen_fd = parse_fd(le);
                int type = 0;
                socklen_t tl = sizeof type;
                if (listen_fd < 0 || getsockopt(listen_fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM) {
                        fprintf(stderr, "space-init: SPACE_INIT_LISTEN_FD '%s' is not a stream socket\n", le);
                        return 2;
                }
        }
        if (g.guest) {
                int r = guest_boot();
                if (r >= 0)
                        r = guest_userns(&g.guest_userns_fd);
                if (r >= 0)
                        r = guest_open_ports(&g.guest_init_fd, &g.ctl.fd);
                if (r < 0) {
                        /* PID 1 exiting panics the guest, and the VM stops: the driver
                         * reports this line from the console. */
                        log_error("guest boot failed: %s", strerror(-r));
                        return 1;
                }
                g.ctl.cb = ctl_cb;
                conn_fd = -1;
        } else if (!fd_given) {
                const char *e = getenv("SPACE_INIT_FD");
                if (e) {
                        conn_fd = parse_fd(e);
                        if (conn_fd < 0) {
                                fprintf(stderr, "space-init: bad SPACE_INIT_FD '%s'\n", e);
                                return 2;
                        }
                } else if (!listen_path && listen_fd < 0)
                        conn_fd = 3;
        }
        if (!g.guest && conn_fd >= 0 && fcntl(conn_fd, F_GETFD) < 0) {
                if (fd_given || (!listen_path && listen_fd < 0)) {
                        fprintf(stderr, "space-init: fd %d is not open\n", conn_fd);
                        return 2;
                }
                conn_fd = -1;
        }

        g.start_ms = now_ms();
        g.pid1 = getpid() == 1;
        umask(0); /* modes in requests are exact; children get 022 back */
        stdio_ensure_open();
        /* Whatever fds the spawner leaked to us must not leak on to the commands. */
        (void)close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
        if (!g.pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                log_warn("cannot become a child subreaper: %m");

        g.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (g.root_fd < 0) {
                log_error("cannot open root %s: %m", root);
                return 1;
        }
        g.root_is_slash = strcmp(root, "/") == 0;
        g.epfd = epoll_create1(EPOLL_CLOEXEC);
        if (g.epfd < 0) {
                log_error("epoll_create1: %m");
                return 1;
        }
        int r = setup_signals();
        if (r < 0) {
                log_error("cannot set up signals: %s", strerror(-r));
                return 1;
        }
        g.listen_outside_only = listen_path && getpid() == 1;
        if (listen_path && (r = conn_listen(listen_path, -EBADF)) < 0) {
                log_error("cannot listen on %s: %s", listen_path, strerror(-r));
                return 1;
        } else if (!listen_path && listen_fd >= 0 && (r = conn_listen(NULL, listen_fd)) < 0) {
                log_error("listening fd %d: %s", listen_fd, strerror(-r));
                return 1;
        }
        if (g.guest && (r = watch_set(&g.ctl, EPOLLIN)) < 0) {
                log_error("epoll: %s", strerror(-r));
                return 1;
        }
        if (conn_fd >= 0) {
                r = conn_start(conn_fd);
                if (r < 0) {
                        log_error("cannot use fd %d: %s", conn_fd, strerror(-r));
                        return 1;
                }
        }
        log_debug("ready (pid %d, root %s)", (int)getpid(), root);

        for (;;) {
                /* Work first, then sleep: a frame queued before the loop (HELLO) or by the
                 * last callbacks must go out before epoll_wait can block. */
                if (g.pending_fd >= 0) {
                        int rc = conn_start(TAKE_FD(g.pending_fd));
                        if (rc < 0)
                                log_warn("cannot start connection: %s", strerror(-rc));
                }
                struct conn *cn = g.conn;
                if (cn && !cn->closing)
                        dispatch_input(cn);
                procs_pump();
                if (cn && !cn->closing)
                        conn_flush(cn);
                procs_pump(); /* refill what the flush freed, or a read stalls with nothing queued */
                if (cn && cn->closing) {
                        conn_end(cn);
                        cn = NULL;
                        if (g.listen.fd < 0 && !g.guest) {
                                log_info("connection gone and nothing to accept another: exiting");
                                procs_kill_all(SIGKILL);
                                return 0;
                        }
                }
                procs_update_watches();
                tcp_update_watches();
                if (g.guest && g.ctl.events == 0 && now_ms() >= g.ctl_retry_ms)
                        (void)watch_set(&g.ctl, EPOLLIN);
                if (cn)
                        conn_watch(cn, !proc_stdin_full());
                if (g.terminating) {
                        if (!procs_any_running()) {
                                log_info("every process ended: exiting");
                                return 0;
                        }
                        if (now_ms() >= g.term_deadline_ms) {
                                log_info("grace period over: SIGKILL to every process, exiting");
                                procs_kill_all(SIGKILL);
                                return 0;
                        }
                }

                uint64_t now = now_ms();
                uint64_t next = procs_next_deadline();
                if (g.terminating && (next == 0 || g.term_deadline_ms < next))
                        next = g.term_deadline_ms;
                int timeout = -1;
                if (cn && cn->closing)
                        timeout = 0;
                else if (next)
                        timeout = next > now ? (int)MIN(next - now, (uint64_t)60000) : 0;
                if (g.guest && g.ctl.events == 0 && (timeout < 0 || timeout > 100))
                        timeout = 100;
                struct epoll_event evs[64];
                int n = epoll_wait(g.epfd, evs, (int)ELEMENTSOF(evs), timeout);
                if (n < 0 && errno != EINTR) {
                        log_error("epoll_wait: %m");
                        return 1;
                }
                for (int i = 0; i < n; i++) {
                        struct watch *w = evs[i].data.ptr;
                        w->cb(w, evs[i].events);
                }
                procs_tick(now_ms());
        }
}
