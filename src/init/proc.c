/* Commands: spawning (exec failures reported through a close-on-exec pipe), output
 * pumping with backpressure, background processes with their output rings, attach,
 * signals, reaping and timeouts. */
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "common/log.h"
#include "common/text.h"
#include "init/init.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

static const char *const default_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/root",
        "TERM=xterm",
        "LANG=C.UTF-8",
};

enum spawn_stage { STAGE_SETUP, STAGE_CWD, STAGE_IDS, STAGE_EXEC };

struct spawn_err {
        int stage;
        int err;
};

static void strv_free(char **v) {
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

static void strv_freep(char ***v) { strv_free(*v); }

static bool proc_ended(const struct proc *p) { return p->exited && p->out.fd < 0 && p->err.fd < 0; }

/* A foreground command's pipes wait while the output queue is full or its stream's window
 * is shut: the command then blocks on its own full pipe, nothing else does. */
static bool attach_lagging(const struct proc *p);
static bool proc_paused(const struct proc *p) {
        if (p->background)
                return attach_lagging(p);
        return p->fg && (conn_queued(g.conn) >= INIT_OUT_HIGH || stream_room(p->fg) == 0);
}

/* A terminal waits (its program blocks on the pty) while a client attached to it is more
 * than half its ring behind: a screen must not lose bytes to a slow reader, who would
 * then see garbage. So does a background command for an attach that asked to hold it
 * ("hold", §3.21: E2B's streams lose no output). With nobody attached it runs on, its
 * ring keeping the newest output. */
static bool attach_lagging(const struct proc *p) {
        if (p->attached == 0 || !g.conn)
                return false;
        for (const struct stream *s = g.conn->streams; s; s = s->next)
                if (s->kind == STREAM_ATTACH && s->proc == p && (p->tty || s->hold) &&
                    p->ring.end_off - ring_cursor_off(&s->cursor) > p->ring.max / 2)
                        return true;
        return false;
}

static void proc_free(struct proc *p) {
        for (struct proc **pp = &g.procs; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        break;
                }
        if (p->background)
                g.n_bg--;
        watch_close(&p->out);
        watch_close(&p->err);
        watch_close(&p->in);
        buf_free(&p->stdin_pending);
        ring_free(&p->ring);
        strv_free(p->argv);
        strv_free(p->env);
        free(p->cwd);
        free(p->tag);
        free(p);
}

/* Tells spaced that n more stdin bytes left its hands, once enough piled up or when
 * asked (now): a WINDOW frame from init is a stdin ack (protocol.md §3.15). */
static void stdin_ack(struct proc *p, size_t n, bool now) {
        if (!p->stdin_acks)
                return;
        p->stdin_unacked += (uint32_t)n;
        if (p->fg && p->stdin_unacked > 0 && (now || p->stdin_unacked >= INIT_STDIN_ACK)) {
                uint8_t w[PROTO_WINDOW_LEN];
                proto_window_encode(p->stdin_unacked, w);
                send_frame(PROTO_WINDOW, p->fg->id, w, sizeof w);
                p->stdin_unacked = 0;
        }
}

static void proc_close_stdin(struct proc *p) {
        stdin_ack(p, p->stdin_pending.len, true); /* dropped: spaced may stop counting them */
        watch_close(&p->in);
        buf_free(&p->stdin_pending);
        p->stdin_eof = true;
}

/* Frees the oldest ended background process nobody is attached to, if the table is full. */
static int bg_make_room(void) {
        if (g.n_bg < PROTO_MAX_BG)
                return 0;
        for (struct proc *p = g.procs; p; p = p->next)
                if (p->background && proc_ended(p) && p->attached == 0) {
                        proc_free(p);
                        return 0;
                }
        return -EAGAIN;
}

/* ---- output ---- */

static void pipe_read(struct proc *p, struct watch *w, uint8_t type) {
        static uint8_t chunk[INIT_CHUNK];
        if (proc_paused(p))
                return; /* the queue filled up or the window shut during this batch */
        /* A background read is one ring record at most (a pipe made bigger than 64 KiB
         * would otherwise hand over more than ring_append takes). */
        size_t want = p->fg ? MIN(sizeof chunk, stream_room(p->fg)) : p->tty ? INIT_TTY_READ : RING_MAX_REC;
        ssize_t n = read(w->fd, chunk, want);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n <= 0) { /* a pty master reads EIO once no process holds its slave */
                watch_close(w);
                return;
        }
        p->last_activity_ms = now_ms();
        p->total_out += (uint64_t)n;
        if (p->fg) {
                stream_charge(p->fg, (size_t)n);
                send_frame(type, p->fg->id, chunk, (size_t)n);
        } else if (p->background) {
                int r = ring_append(&p->ring, type, chunk, (size_t)n);
                if (r < 0)
                        log_warn("pid %d: output dropped: %s", (int)p->pid, strerror(-r));
        }
        /* else: a process being killed because it could not be detached; output goes nowhere */
}

static void out_cb(struct watch *w, uint32_t revents) { pipe_read(container_of(w, struct proc, out), w, PROTO_STDOUT); }
static void err_cb(struct watch *w, uint32_t revents) { pipe_read(container_of(w, struct proc, err), w, PROTO_STDERR); }

static void in_cb(struct watch *w, uint32_t revents) {
        struct proc *p = container_of(w, struct proc, in);
        while (p->stdin_pending.len > 0) {
                ssize_t n = write(w->fd, p->stdin_pending.data, p->stdin_pending.len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                proc_close_stdin(p); /* EPIPE: the command closed its stdin */
                        return;
                }
                buf_consume(&p->stdin_pending, (size_t)n);
                stdin_ack(p, (size_t)n, p->stdin_pending.len == 0);
        }
        if (p->stdin_eof)
                proc_close_stdin(p);
}

void proc_stdin(struct proc *p, const uint8_t *data, size_t n) {
        if (p->tty) {
                /* A terminal's input is never closed by a client (^D is a byte); what its
                 * program leaves unread is bounded, and the excess dropped, so that one
                 * terminal can never hold up the connection. */
                if (n == 0 || p->in.fd < 0)
                        return;
                size_t room = p->stdin_pending.len < INIT_TTY_STDIN_MAX ? INIT_TTY_STDIN_MAX - p->stdin_pending.len : 0;
                if (room < n)
                        log_warn("pid %d: terminal input not read, %zu bytes dropped", (int)p->pid, n - room);
                if (room > 0 && buf_append(&p->stdin_pending, data, MIN(n, room)) < 0)
                        log_warn("pid %d: terminal input dropped: out of memory", (int)p->pid);
                return;
        }
        if (p->in.fd < 0 || p->stdin_eof) {
                stdin_ack(p, n, true); /* the command closed its stdin: the bytes go nowhere */
                return;
        }
        if (n == 0) {
                p->stdin_eof = true;
                if (p->stdin_pending.len == 0)
                        proc_close_stdin(p);
                return;
        }
        if (buf_append(&p->stdin_pending, data, n) < 0) {
                log_warn("pid %d: stdin over its bound, closing it", (int)p->pid);
                proc_close_stdin(p);
        }
}

bool proc_stdin_full(void) {
        for (struct proc *p = g.procs; p; p = p->next)
                if (p->stdin_pending.len > INIT_STDIN_HIGH)
                        return true;
        return false;
}

/* ---- exit reporting ---- */

static void write_exit_fields(struct json_writer *w, const struct proc *p) {
        if (WIFSIGNALED(p->status))
                json_w_kint(w, "signal", WTERMSIG(p->status));
        else
                json_w_kint(w, "exit_code", WEXITSTATUS(p->status));
        if (p->timed_out)
                json_w_kbool(w, "timed_out", true);
}

void procs_reap(void) {
        for (;;) {
                int st;
                pid_t pid = waitpid(-1, &st, WNOHANG);
                if (pid <= 0)
                        break;
                for (struct proc *p = g.procs; p; p = p->next)
                        if (p->pid == pid && !p->exited) {
                                p->exited = true;
                                p->status = st;
                                p->deadline_ms = 0;
                                p->last_activity_ms = now_ms();
                                proc_close_stdin(p);
                                break;
                        }
        }
}

bool procs_any_running(void) {
        siginfo_t si = { 0 };
        return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

void procs_kill_all(int sig) {
        if (g.pid1) {
                kill(-1, sig);
                return;
        }
        for (struct proc *p = g.procs; p; p = p->next)
                if (!p->exited)
                        kill(-p->pid, sig);
}

void procs_tick(uint64_t now) {
        for (struct proc *p = g.procs; p; p = p->next) {
                if (!p->exited && p->deadline_ms && now >= p->deadline_ms) {
                        log_debug("pid %d: timeout, killing its process group", (int)p->pid);
                        kill(-p->pid, SIGKILL);
                        kill(p->pid, SIGKILL);
                        p->timed_out = true;
                        p->deadline_ms = 0;
                }
                if (p->exited && (p->out.fd >= 0 || p->err.fd >= 0)) {
                        if (proc_paused(p))
                                p->last_activity_ms = now;
                        else if (now >= p->last_activity_ms + INIT_LINGER_MS) {
                                /* A leftover grandchild holds the pipes: don't wait for it. */
                                watch_close(&p->out);
                                watch_close(&p->err);
                        }
                }
        }
}

uint64_t procs_next_deadline(void) {
        uint64_t next = 0;
        for (struct proc *p = g.procs; p; p = p->next) {
                uint64_t d = 0;
                if (!p->exited && p->deadline_ms)
                        d = p->deadline_ms;
                else if (p->exited && (p->out.fd >= 0 || p->err.fd >= 0) && !proc_paused(p))
                        d = p->last_activity_ms + INIT_LINGER_MS;
                if (d && (next == 0 || d < next))
                        next = d;
        }
        return next;
}

void proc_detach(struct proc *p) {
        proc_close_stdin(p);
        if (p->background)
                return;
        if (bg_make_room() == 0) {
                p->background = true;
                ring_init(&p->ring, PROTO_BG_RING, p->total_out);
                g.n_bg++;
                return;
        }
        log_warn("pid %d: no room to keep it in the background, killing it", (int)p->pid);
        if (!p->exited)
                kill(-p->pid, SIGKILL);
}

void procs_pump(void) {
        struct proc *next;
        for (struct proc *p = g.procs; p; p = next) {
                next = p->next;
                if (proc_ended(p) && p->fg) {
                        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                        struct json_writer w = JSON_WRITER_INIT(&b);
                        json_w_obj_begin(&w);
                        write_exit_fields(&w, p);
                        json_w_obj_end(&w);
                        send_json(PROTO_EXIT, p->fg->id, &b);
                        stream_free(p->fg);
                        proc_free(p);
                        continue;
                }
                if (proc_ended(p) && !p->background) {
                        proc_free(p);
                        continue;
                }
        }
        if (!g.conn)
                return;
        struct stream *snext;
        for (struct stream *s = g.conn->streams; s; s = snext) {
                snext = s->next;
                if (s->kind == STREAM_ATTACH)
                        attach_pump(s);
                else if (s->kind == STREAM_READ)
                        read_pump(s);
                else if (s->kind == STREAM_TCP)
                        tcp_pump(s);
                else if (s->kind == STREAM_WATCH)
                        fsw_pump(s);
        }
}

void procs_update_watches(void) {
        for (struct proc *p = g.procs; p; p = p->next) {
                uint32_t ev = proc_paused(p) ? 0 : EPOLLIN;
                watch_set(&p->out, ev);
                watch_set(&p->err, ev);
                if (p->in.fd >= 0)
                        watch_set(&p->in, p->stdin_pending.len > 0 ? EPOLLOUT : 0);
        }
}

/* ---- exec ---- */

/* Puts "K=V" e into v (n entries, room for one more): the same key is replaced. */
static int env_put(char **v, size_t *n, const char *e) {
        size_t klen = (size_t)(strchr(e, '=') - e) + 1;
        size_t j;
        for (j = 0; j < *n; j++)
                if (strncmp(v[j], e, klen) == 0)
                        break;
        char *d = strdup(e);
        if (!d)
                return -ENOMEM;
        if (j < *n) {
                free(v[j]);
                v[j] = d;
        } else
                v[(*n)++] = d;
        return 0;
}

/* The default environment, then extra (the user's HOME, USER, ... ), then the request's. */
static int env_build(const struct json *env, char *const *extra, size_t n_extra, char ***ret) {
        size_t n_user = json_len(env);
        char **v = calloc(ELEMENTSOF(default_env) + n_extra + n_user + 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < ELEMENTSOF(default_env); i++)
                if (!(v[n++] = strdup(default_env[i])))
                        goto oom;
        for (size_t i = 0; i < n_extra; i++)
                if (env_put(v, &n, extra[i]) < 0)
                        goto oom;
        for (size_t i = 0; i < n_user; i++) {
                const char *e = json_str(json_at(env, i));
                const char *eq = e ? strchr(e, '=') : NULL;
                if (!eq || eq == e) {
                        strv_free(v);
                        return -EINVAL;
                }
                if (env_put(v, &n, e) < 0)
                        goto oom;
        }
        *ret = v;
        return 0;
oom:
        strv_free(v);
        return -ENOMEM;
}

/* The environment a "user" brings: HOME, and USER, LOGNAME, SHELL when /etc/passwd names
 * it; the request's env still overrides them. */
static size_t user_env(const struct init_user *u, char buf[4][300], char *out[4]) {
        size_t n = 0;
        snprintf(buf[n], sizeof buf[n], "HOME=%s", u->home[0] ? u->home : "/");
        out[n] = buf[n];
        n++;
        if (u->known) {
                snprintf(buf[n], sizeof buf[n], "USER=%s", u->name);
                out[n] = buf[n];
                n++;
                snprintf(buf[n], sizeof buf[n], "LOGNAME=%s", u->name);
                out[n] = buf[n];
                n++;
                if (u->shell[0]) {
                        snprintf(buf[n], sizeof buf[n], "SHELL=%s", u->shell);
                        out[n] = buf[n];
                        n++;
                }
        }
        return n;
}

/* Copies argv (or env) for ps, keeping at most INIT_PS_ARGV_MAX bytes. */
static char **argv_for_ps(char **argv) {
        size_t n = 0, budget = INIT_PS_ARGV_MAX;
        while (argv[n])
                n++;
        char **v = calloc(n + 1, sizeof *v);
        if (!v)
                return NULL;
        for (size_t i = 0; i < n && budget > 0; i++) {
                v[i] = strndup(argv[i], budget);
                if (!v[i])
                        break;
                budget -= MIN(budget, strlen(v[i]) + 1);
        }
        return v;
}

static const char *env_get(char **envp, const char *key) {
        size_t k = strlen(key);
        for (char **e = envp; *e; e++)
                if (strncmp(*e, key, k) == 0 && (*e)[k] == '=')
                        return *e + k + 1;
        return NULL;
}

/* In the child: execve argv[0], looked up in the command's own PATH like execvp. */
static int child_exec(char **argv, char **envp) {
        const char *file = argv[0];
        if (!*file)
                return ENOENT;
        if (strchr(file, '/')) {
                execve(file, argv, envp);
                return errno;
        }
        const char *path = env_get(envp, "PATH");
        if (!path)
                path = "/usr/bin:/bin";
        bool eacces = false;
        size_t flen = strlen(file);
        for (const char *p = path;; p++) {
                const char *end = strchrnul(p, ':');
                size_t dlen = (size_t)(end - p);
                char full[PROTO_MAX_PATH + 256];
                if (dlen + flen + 2 <= sizeof full) {
                        memcpy(full, p, dlen);
                        size_t o = dlen;
                        if (o == 0)
                                full[o++] = '.';
                        full[o++] = '/';
                        memcpy(full + o, file, flen + 1);
                        execve(full, argv, envp);
                        if (errno == EACCES)
                                eacces = true;
                        else if (errno != ENOENT && errno != ENOTDIR)
                                return errno;
                }
                if (!*end)
                        break;
                p = end;
        }
        return eacces ? EACCES : ENOENT;
}

static _noreturn_ void child_fail(int fd, int stage, int err) {
        struct spawn_err se = { .stage = stage, .err = err };
        (void)!write(fd, &se, sizeof se);
        _exit(127);
}

struct spawn_req {
        char **argv, **envp;
        int cwd_fd;
        bool set_ids;
        uid_t uid;
        gid_t gid;
        const gid_t *groups; /* with set_ids: the supplementary groups (a "user"'s) */
        size_t n_groups;
        bool want_stdin;
        bool tty; /* in_r = out_w = err_w: the pty slave, to become the controlling terminal */
};

static _noreturn_ void child_run(const struct spawn_req *sr, int errfd, int in_r, int out_w, int err_w) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        /* Ignored signals survive exec: give the command a clean slate, whatever init
         * itself was started with. */
        /* The raw syscall, because glibc refuses its own reserved signals (32, 33), and an
         * ignored one of those inherited from whoever started init would leak through.
         * An all-zero kernel sigaction is SIG_DFL with no flags on every architecture. */
        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP) {
                        uint64_t ksa[4] = { 0 };
                        (void)syscall(SYS_rt_sigaction, sig, ksa, NULL, (size_t)(_NSIG / 8));
                }
        umask(022);
        /* microvm: into the guest's command namespace (guest_userns), before any id change */
        if (g.guest_userns_fd >= 0 && setns(g.guest_userns_fd, CLONE_NEWUSER) < 0)
                child_fail(errfd, STAGE_SETUP, errno);
        if (setsid() < 0)
                child_fail(errfd, STAGE_SETUP, errno);
        if (sr->tty && ioctl(in_r, TIOCSCTTY, 0) < 0)
                child_fail(errfd, STAGE_SETUP, errno);
        if (in_r < 0) {
                in_r = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (in_r < 0) {
                        /* a sandbox without /dev/null: an empty pipe is just as good */
                        int pp[2];
                        if (pipe2(pp, O_CLOEXEC) < 0)
                                child_fail(errfd, STAGE_SETUP, errno);
                        close(pp[1]);
                        in_r = pp[0];
                }
        }
        if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
                child_fail(errfd, STAGE_SETUP, errno);
        if (fchdir(sr->cwd_fd) < 0)
                child_fail(errfd, STAGE_CWD, errno);
        if (sr->set_ids) {
                if (setgroups(sr->n_groups, sr->groups) < 0 && errno != EPERM)
                        child_fail(errfd, STAGE_IDS, errno);
                if (setgid(sr->gid) < 0 || setuid(sr->uid) < 0)
                        child_fail(errfd, STAGE_IDS, errno);
        }
        child_fail(errfd, STAGE_EXEC, child_exec(sr->argv, sr->envp));
}

/* A cwd that cannot be entered: the error says "cwd":true, so that spaced can tell it from
 * a command that cannot start (the E2B API answers them differently, §3.21). */
static void send_cwd_error(uint32_t id, int err, const char *cwd) {
        char msg[600];
        snprintf(msg, sizeof msg, "cwd %.512s: %s", cwd, strerror(err));
        send_error_flag(id, err, "cwd", msg);
}

static void exec_fail_resp(uint32_t id, const struct spawn_err *se, const char *argv0, const char *cwd) {
        int e = se->err;
        switch (se->stage) {
        case STAGE_CWD:
                send_cwd_error(id, e, cwd);
                break;
        case STAGE_IDS:
                send_error(id, e, "cannot switch user: %s", strerror(e));
                break;
        case STAGE_EXEC:
                if (e == ENOENT && !strchr(argv0, '/'))
                        send_error(id, e, "%.512s: command not found", argv0);
                else
                        send_error(id, e, "%.512s: %s", argv0, strerror(e));
                break;
        default:
                send_error(id, e, "cannot start the command: %s", strerror(e));
                break;
        }
}

/* A new pseudo-terminal of rows x cols from the /dev/ptmx init sees: inside a sandbox its
 * own devpts instance (the runtimes mount one, newinstance), never a host terminal. */
static int tty_open(int *ret_master, int *ret_slave, int rows, int cols) {
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), r;
        if (m < 0)
                return -errno;
        struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
        if (grantpt(m) < 0 || unlockpt(m) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0)
                goto fail;
        /* The slave through the master itself where the kernel can (no path to race on) */
        int sl = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (sl < 0) {
                char name[128];
                if ((errno = ptsname_r(m, name, sizeof name)) != 0)
                        goto fail;
                sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (sl < 0)
                        goto fail;
        }
        *ret_master = m;
        *ret_slave = sl;
        return 0;
fail:
        r = -errno;
        close(m);
        return r;
}

static int nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

void op_exec(uint32_t id, const struct json *req) {
        const struct json *jargv = json_get(req, "argv"), *jenv = json_get(req, "env");
        if (json_type(jargv) != JSON_ARRAY || json_len(jargv) == 0)
                return send_error(id, EINVAL, "\"argv\" must be a non-empty array of strings");
        if (jenv && json_type(jenv) != JSON_ARRAY)
                return send_error(id, EINVAL, "\"env\" must be an array of \"K=V\" strings");
        size_t argc = json_len(jargv);
        if (argc + json_len(jenv) > PROTO_MAX_ARGV)
                return send_error(id, E2BIG, "argv + env over %d entries", PROTO_MAX_ARGV);
        const char *cwd = json_get(req, "cwd") ? json_get_str(req, "cwd") : "/";
        if (!cwd)
                return send_error(id, EINVAL, "\"cwd\" must be a string");
        /* "user" (§3.1.1): ids, groups, HOME and friends, and the default cwd from the
         * sandbox's /etc/passwd. */
        const struct json *juser = json_get(req, "user");
        if (juser && json_type(juser) == JSON_NULL)
                juser = NULL;
        if (juser && (json_get(req, "uid") || json_get(req, "gid")))
                return send_error(id, EINVAL, "give \"user\" or \"uid\"/\"gid\", not both");
        struct init_user user;
        char uenv_buf[4][300], *uenv[4];
        size_t n_uenv = 0;
        if (juser) {
                char why[256];
                int ur = user_resolve(juser, &user, why, sizeof why);
                if (ur < 0)
                        return send_user_error(id, -ur, why);
                n_uenv = user_env(&user, uenv_buf, uenv);
                if (!json_get(req, "cwd")) {
                        int hfd;
                        if (fs_resolve(user.home, O_PATH | O_DIRECTORY, 0, &hfd) == 0) {
                                close(hfd);
                                cwd = user.home;
                        }
                }
        }
        int64_t timeout = 0, uid = juser ? (int64_t)user.uid : -1, gid = juser ? (int64_t)user.gid : -1;
        if (json_get(req, "timeout_ms") && (json_get_int(req, "timeout_ms", &timeout) < 0 || timeout < 0))
                return send_error(id, EINVAL, "\"timeout_ms\" must be an integer >= 0");
        if ((json_get(req, "uid") && (json_get_int(req, "uid", &uid) < 0 || uid < 0 || uid > UINT32_MAX - 1)) ||
            (json_get(req, "gid") && (json_get_int(req, "gid", &gid) < 0 || gid < 0 || gid > UINT32_MAX - 1)))
                return send_error(id, EINVAL, "\"uid\" and \"gid\" must be integers >= 0");
        bool want_stdin = json_get_bool(req, "stdin", false);
        bool stdin_acks = want_stdin && json_get_bool(req, "stdin_acks", false);
        bool background = json_get_bool(req, "background", false);
        uint32_t window = 0;
        if (req_window(req, &window) < 0)
                return send_error(id, EINVAL, "\"window\" must be an integer in 0..%u", PROTO_MAX_WINDOW);
        int64_t rows = 0, cols = 0;
        const struct json *jtty = json_get(req, "tty");
        bool tty = jtty && json_type(jtty) != JSON_NULL;
        if (tty && (json_type(jtty) != JSON_OBJECT || json_get_int(jtty, "rows", &rows) < 0 ||
                    json_get_int(jtty, "cols", &cols) < 0 || rows < 1 || rows > PROTO_MAX_TTY_DIM || cols < 1 ||
                    cols > PROTO_MAX_TTY_DIM))
                return send_error(id, EINVAL, "\"tty\" must be {\"rows\":1..%d,\"cols\":1..%d}", PROTO_MAX_TTY_DIM,
                                  PROTO_MAX_TTY_DIM);
        if (tty && want_stdin)
                return send_error(id, EINVAL, "a terminal's stdin is its terminal: no \"stdin\"");
        if (tty) {
                background = true; /* a terminal outlives its request: attach to it (§3.18) */
                unsigned n_tty = 0;
                for (struct proc *q = g.procs; q; q = q->next)
                        n_tty += q->tty && !q->exited;
                if (n_tty >= PROTO_MAX_TTY)
                        return send_error(id, EAGAIN, "%d terminals are running already", PROTO_MAX_TTY);
        }
        /* A background command's stdin (§3.21) is fed by op input from any request. */
        bool bg_stdin = background && want_stdin;
        const struct json *jtag = json_get(req, "tag");
        const char *tag = jtag && json_type(jtag) != JSON_NULL ? json_str(jtag) : NULL;
        if (jtag && json_type(jtag) != JSON_NULL && (!tag || strlen(tag) > PROTO_MAX_TAG))
                return send_error(id, EINVAL, "\"tag\" must be a string of at most %d bytes", PROTO_MAX_TAG);
        if (!background && g.conn->n_streams >= INIT_MAX_STREAMS)
                return send_error(id, EAGAIN, "too many live requests (%d)", INIT_MAX_STREAMS);
        if (background && bg_make_room() < 0)
                return send_error(id, EAGAIN, "%d background processes are still running", PROTO_MAX_BG);

        _cleanup_free_ char **argv = calloc(argc + 1, sizeof *argv);
        if (!argv)
                return send_error(id, ENOMEM, "out of memory");
        for (size_t i = 0; i < argc; i++)
                if (!(argv[i] = (char *)json_str(json_at(jargv, i))))
                        return send_error(id, EINVAL, "\"argv\" must be a non-empty array of strings");
        _cleanup_(strv_freep) char **envp = NULL;
        int r = env_build(jenv, uenv, n_uenv, &envp);
        if (r < 0)
                return send_error(id, -r, r == -EINVAL ? "\"env\" entries must be \"K=V\" strings" : "out of memory");

        _cleanup_close_ int cwd_fd = -EBADF;
        r = fs_resolve(cwd, O_PATH | O_DIRECTORY, 0, &cwd_fd);
        if (r < 0)
                return send_cwd_error(id, -r, cwd);

        int ep[2] = { -1, -1 }, op[2] = { -1, -1 }, erp[2] = { -1, -1 }, ip[2] = { -1, -1 };
        if (tty) {
                /* op: the pty (master, slave); ip[1]: the master again, for input */
                if (pipe2(ep, O_CLOEXEC) < 0) {
                        r = errno;
                        goto fail_pipes;
                }
                if ((r = -tty_open(&op[0], &op[1], (int)rows, (int)cols)) > 0)
                        goto fail_pipes;
                if ((ip[1] = fcntl(op[0], F_DUPFD_CLOEXEC, 3)) < 0) {
                        r = errno;
                        goto fail_pipes;
                }
        } else if (pipe2(ep, O_CLOEXEC) < 0 || pipe2(op, O_CLOEXEC) < 0 || pipe2(erp, O_CLOEXEC) < 0 ||
                   (want_stdin && pipe2(ip, O_CLOEXEC) < 0)) {
                r = errno;
                goto fail_pipes;
        }
        struct spawn_req sr = { .argv = argv, .envp = envp, .cwd_fd = cwd_fd, .want_stdin = want_stdin, .tty = tty,
                                .set_ids = juser || (uid >= 0 && (uid_t)uid != getuid()) || (gid >= 0 && (gid_t)gid != getgid()),
                                .uid = uid >= 0 ? (uid_t)uid : getuid(), .gid = gid >= 0 ? (gid_t)gid : getgid(),
                                .groups = juser ? user.groups : NULL, .n_groups = juser ? user.n_groups : 0 };
        pid_t pid = fork();
        if (pid < 0) {
                r = errno;
                goto fail_pipes;
        }
        if (pid == 0) {
                if (tty)
                        child_run(&sr, ep[1], op[1], op[1], op[1]);
                child_run(&sr, ep[1], ip[0], op[1], erp[1]);
        }

        close(ep[1]);
        close(op[1]);
        safe_close(erp[1]);
        if (ip[0] >= 0)
                close(ip[0]);
        struct spawn_err se;
        ssize_t n;
        do
                n = read(ep[0], &se, sizeof se);
        while (n < 0 && errno == EINTR);
        close(ep[0]);
        if (n == (ssize_t)sizeof se) {
                close(op[0]);
                safe_close(erp[0]);
                if (ip[1] >= 0)
                        close(ip[1]);
                (void)waitpid(pid, NULL, 0); /* it has exited or is about to */
                exec_fail_resp(id, &se, argv[0], cwd);
                return;
        }

        struct proc *p = calloc(1, sizeof *p);
        if (!p) {
                /* Can't track it: don't leave it running unseen. */
                kill(-pid, SIGKILL);
                close(op[0]);
                safe_close(erp[0]);
                if (ip[1] >= 0)
                        close(ip[1]);
                return send_error(id, ENOMEM, "out of memory");
        }
        p->pid = pid;
        p->argv = argv_for_ps(argv);
        {
                /* the request's env as it came (checked by env_build), for ps */
                _cleanup_free_ char **ev = calloc(json_len(jenv) + 1, sizeof *ev);
                for (size_t i = 0; ev && i < json_len(jenv); i++)
                        ev[i] = (char *)json_str(json_at(jenv, i));
                p->env = ev ? argv_for_ps(ev) : NULL;
        }
        p->cwd = strdup(cwd);
        p->tag = tag && *tag ? strdup(tag) : NULL;
        p->out = (struct watch){ .fd = op[0], .cb = out_cb };
        p->err = (struct watch){ .fd = erp[0], .cb = err_cb };
        p->in = (struct watch){ .fd = ip[1], .cb = in_cb };
        p->stdin_pending = BUF_INIT(INIT_STDIN_HIGH + PROTO_MAX_PAYLOAD);
        p->stdin_eof = !want_stdin && !tty;
        p->stdin_acks = stdin_acks && !bg_stdin;
        p->started_ms = wall_ms();
        p->last_activity_ms = now_ms();
        if (timeout > 0)
                p->deadline_ms = now_ms() + (uint64_t)timeout;
        (void)nonblock(op[0]);
        if (erp[0] >= 0)
                (void)nonblock(erp[0]);
        if (ip[1] >= 0)
                (void)nonblock(ip[1]);
        struct proc **tail = &g.procs;
        while (*tail)
                tail = &(*tail)->next;
        *tail = p;
        if (background) {
                p->background = true;
                p->tty = tty;
                ring_init(&p->ring, tty ? PROTO_TTY_RING : PROTO_BG_RING, 0);
                g.n_bg++;
        } else {
                struct stream *s = stream_new(id, STREAM_EXEC);
                if (!s) {
                        proc_detach(p);
                        return send_error(id, ENOMEM, "out of memory");
                }
                s->proc = p;
                stream_set_window(s, window);
                p->fg = s;
        }
        log_debug("started pid %d: %s%s", (int)pid, argv[0], background ? " (background)" : "");

        /* No cleanup attribute here: the goto below jumps past this declaration, and the
         * cleanup would then free an uninitialised buffer (heap corruption, init aborts). */
        struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "pid", pid);
        if (stdin_acks && !background)
                json_w_kbool(&w, "stdin_acks", true);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
        buf_free(&b);
        return;

fail_pipes:
        for (int i = 0; i < 2; i++) {
                safe_close(ep[i]);
                safe_close(op[i]);
                safe_close(erp[i]);
                safe_close(ip[i]);
        }
        send_error(id, r, "cannot start the command: %s", strerror(r));
}

/* ---- ps, attach, signal ---- */

void op_ps(uint32_t id, const struct json *req) {
        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        _cleanup_buf_ struct buf one = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        bool truncated = false;
        json_w_obj_begin(&w);
        json_w_key(&w, "processes");
        json_w_arr_begin(&w);
        for (struct proc *p = g.procs; p; p = p->next) {
                if (!p->background)
                        continue;
                buf_reset(&one);
                struct json_writer ow = JSON_WRITER_INIT(&one);
                json_w_obj_begin(&ow);
                json_w_kint(&ow, "pid", p->pid);
                json_w_key(&ow, "argv");
                json_w_arr_begin(&ow);
                for (char **a = p->argv; a && *a; a++)
                        json_w_str(&ow, *a);
                json_w_arr_end(&ow);
                json_w_kbool(&ow, "running", !p->exited);
                json_w_key(&ow, "exit_code");
                if (p->exited && WIFEXITED(p->status))
                        json_w_int(&ow, WEXITSTATUS(p->status));
                else
                        json_w_null(&ow);
                json_w_key(&ow, "signal");
                if (p->exited && WIFSIGNALED(p->status))
                        json_w_int(&ow, WTERMSIG(p->status));
                else
                        json_w_null(&ow);
                json_w_kbool(&ow, "timed_out", p->timed_out);
                if (p->tty)
                        json_w_kbool(&ow, "tty", true);
                if (p->tag)
                        json_w_kstr(&ow, "tag", p->tag);
                json_w_kstr(&ow, "cwd", p->cwd ? p->cwd : "/");
                json_w_key(&ow, "env");
                json_w_arr_begin(&ow);
                for (char **e = p->env; e && *e; e++)
                        json_w_str(&ow, *e);
                json_w_arr_end(&ow);
                json_w_kbool(&ow, "stdin", !p->tty && p->in.fd >= 0 && !p->stdin_eof);
                json_w_kint(&ow, "started_ms", p->started_ms);
                json_w_key(&ow, "output_bytes");
                json_w_uint(&ow, p->total_out);
                json_w_obj_end(&ow);
                if (ow.err || b.len + one.len + 64 > PROTO_MAX_JSON) {
                        truncated = true;
                        break;
                }
                json_w_raw(&w, one.data, one.len);
        }
        json_w_arr_end(&w);
        json_w_kbool(&w, "truncated", truncated);
        json_w_obj_end(&w);
        if (w.err)
                return send_error(id, EOVERFLOW, "process list too large");
        send_json(PROTO_RESP, id, &b);
}

static struct proc *proc_find(pid_t pid, bool background_only) {
        struct proc *found = NULL;
        for (struct proc *p = g.procs; p; p = p->next)
                if (p->pid == pid && (!background_only || p->background))
                        found = p; /* the newest: a pid may have been reused */
        return found;
}

void op_attach(uint32_t id, const struct json *req) {
        int64_t pid, offset = 0;
        if (json_get_int(req, "pid", &pid) < 0 || pid <= 0 || pid > INT32_MAX)
                return send_error(id, EINVAL, "\"pid\" must be a positive integer");
        if (json_get(req, "offset") && json_get_int(req, "offset", &offset) < 0)
                return send_error(id, EINVAL, "\"offset\" must be an integer");
        if (offset < 0)
                offset = 0;
        uint32_t window = 0;
        if (req_window(req, &window) < 0)
                return send_error(id, EINVAL, "\"window\" must be an integer in 0..%u", PROTO_MAX_WINDOW);
        struct proc *p = proc_find((pid_t)pid, true);
        if (!p)
                return send_error(id, ESRCH, "no background process %lld", (long long)pid);
        if (g.conn->n_streams >= INIT_MAX_STREAMS)
                return send_error(id, EAGAIN, "too many live requests (%d)", INIT_MAX_STREAMS);
        struct stream *s = stream_new(id, STREAM_ATTACH);
        if (!s)
                return send_error(id, ENOMEM, "out of memory");
        s->proc = p;
        stream_set_window(s, window);
        p->attached++;
        s->follow = json_get_bool(req, "follow", true);
        s->hold = json_get_bool(req, "hold", false);
        ring_seek(&p->ring, (uint64_t)offset, &s->cursor);

        _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "offset");
        json_w_uint(&w, ring_cursor_off(&s->cursor));
        json_w_key(&w, "end");
        json_w_uint(&w, p->ring.end_off);
        json_w_kbool(&w, "running", !p->exited);
        if (p->tty)
                json_w_kbool(&w, "tty", true);
        json_w_obj_end(&w);
        send_json(PROTO_RESP, id, &b);
}

void attach_pump(struct stream *s) {
        static uint8_t chunk[RING_MAX_REC];
        struct proc *p = s->proc;
        while (conn_queued(g.conn) < INIT_OUT_HIGH) {
                uint8_t type = PROTO_STDOUT;
                size_t room = MIN(sizeof chunk, stream_room(s));
                size_t n = ring_next(&p->ring, &s->cursor, &type, chunk, room);
                if (n > 0) {
                        stream_charge(s, n);
                        send_frame(type, s->id, chunk, n);
                        continue;
                }
                if (room == 0 && ring_cursor_off(&s->cursor) < p->ring.end_off)
                        return; /* output left, window shut: wait for a WINDOW */
                bool ended = proc_ended(p);
                if (!ended && s->follow)
                        return;
                _cleanup_buf_ struct buf b = BUF_INIT(PROTO_MAX_JSON);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_kbool(&w, "running", !ended);
                if (ended)
                        write_exit_fields(&w, p);
                json_w_key(&w, "offset");
                json_w_uint(&w, ring_cursor_off(&s->cursor));
                json_w_obj_end(&w);
                send_json(PROTO_EXIT, s->id, &b);
                stream_free(s);
                return;
        }
}

void op_signal(uint32_t id, const struct json *req) {
        int64_t pid, sig = SIGTERM;
        if (json_get_int(req, "pid", &pid) < 0 || pid <= 0 || pid > INT32_MAX)
                return send_error(id, EINVAL, "\"pid\" must be a positive integer");
        if (json_get(req, "signal") && (json_get_int(req, "signal", &sig) < 0 || sig < 0 || sig > SIGRTMAX))
                return send_error(id, EINVAL, "\"signal\" must be a signal number");
        bool group = json_get_bool(req, "group", true);
        struct proc *p = proc_find((pid_t)pid, false);
        if (!p || p->exited)
                return send_error(id, ESRCH, "no running process %lld started by init", (long long)pid);
        if (kill(group ? -p->pid : p->pid, (int)sig) < 0)
                return send_error(id, errno, "kill %lld: %s", (long long)pid, strerror(errno));
        send_frame(PROTO_RESP, id, "{}", 2);
}

void op_resize(uint32_t id, const struct json *req) {
        int64_t pid, rows, cols;
        if (json_get_int(req, "pid", &pid) < 0 || pid <= 0 || pid > INT32_MAX)
                return send_error(id, EINVAL, "\"pid\" must be a positive integer");
        if (json_get_int(req, "rows", &rows) < 0 || json_get_int(req, "cols", &cols) < 0 || rows < 1 ||
            rows > PROTO_MAX_TTY_DIM || cols < 1 || cols > PROTO_MAX_TTY_DIM)
                return send_error(id, EINVAL, "\"rows\" and \"cols\" must be integers in 1..%d", PROTO_MAX_TTY_DIM);
        struct proc *p = proc_find((pid_t)pid, true);
        if (!p || !p->tty)
                return send_error(id, ESRCH, "no terminal %lld", (long long)pid);
        if (p->out.fd < 0)
                return send_error(id, ESRCH, "terminal %lld has ended", (long long)pid);
        struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
        if (ioctl(p->out.fd, TIOCSWINSZ, &ws) < 0) /* the kernel sends SIGWINCH to its foreground */
                return send_error(id, errno, "resize %lld: %s", (long long)pid, strerror(errno));
        send_frame(PROTO_RESP, id, "{}", 2);
}

/* {"op":"input","pid":N,"data":"<base64>"} and/or "eof":true (§3.21): stdin of a background
 * process, or what is typed to a terminal, from any request. Queued, never waited for:
 * what the process has not read is bounded (INIT_INPUT_MAX, a terminal's
 * INIT_TTY_STDIN_MAX), and input past it is refused with EAGAIN, so that the sender
 * knows (a terminal's STDIN frames drop it instead: nobody is there to tell). */
void op_input(uint32_t id, const struct json *req) {
        int64_t pid;
        if (json_get_int(req, "pid", &pid) < 0 || pid <= 0 || pid > INT32_MAX)
                return send_error(id, EINVAL, "\"pid\" must be a positive integer");
        const struct json *jd = json_get(req, "data");
        const char *data = jd && json_type(jd) != JSON_NULL ? json_str(jd) : NULL;
        if (jd && json_type(jd) != JSON_NULL && !data)
                return send_error(id, EINVAL, "\"data\" must be a base64 string");
        const struct json *je = json_get(req, "eof");
        if (je && json_type(je) != JSON_BOOL && json_type(je) != JSON_NULL)
                return send_error(id, EINVAL, "\"eof\" must be true or false");
        bool eof = json_is_true(je);
        if (!data && !eof)
                return send_error(id, EINVAL, "give \"data\", \"eof\":true or both");
        _cleanup_buf_ struct buf in = BUF_INIT(PROTO_MAX_JSON);
        if (data && text_b64_decode(&in, data, strlen(data)) < 0)
                return send_error(id, EINVAL, "\"data\" is not valid base64");
        struct proc *p = proc_find((pid_t)pid, true);
        if (!p || p->exited)
                return send_error(id, ESRCH, "no running background process %lld", (long long)pid);
        if (p->tty) {
                if (eof)
                        return send_error(id, EINVAL, "a terminal's input is not closed: send ^D (\\u0004)");
                if (p->in.fd < 0)
                        return send_error(id, EPIPE, "terminal %lld has ended", (long long)pid);
                if (p->stdin_pending.len + in.len > INIT_TTY_STDIN_MAX)
                        return send_error(id, EAGAIN, "terminal %lld has %zu bytes of input unread (at most %u)",
                                          (long long)pid, p->stdin_pending.len, INIT_TTY_STDIN_MAX);
        } else {
                bool open = p->in.fd >= 0 && !p->stdin_eof;
                if (!open && eof && in.len == 0) {
                        send_frame(PROTO_RESP, id, "{}", 2); /* closed already: nothing to do */
                        return;
                }
                if (!open)
                        return send_error(id, EPIPE, "process %lld has no stdin open (start it with \"stdin\":true) "
                                          "or it was closed", (long long)pid);
                if (p->stdin_pending.len + in.len > INIT_INPUT_MAX)
                        return send_error(id, EAGAIN, "process %lld has %zu bytes of stdin unread (at most %u)",
                                          (long long)pid, p->stdin_pending.len, INIT_INPUT_MAX);
        }
        if (in.len > 0 && buf_append(&p->stdin_pending, in.data, in.len) < 0)
                return send_error(id, ENOMEM, "out of memory");
        if (eof) {
                p->stdin_eof = true;
                if (p->stdin_pending.len == 0)
                        proc_close_stdin(p);
        }
        send_frame(PROTO_RESP, id, "{}", 2);
}
