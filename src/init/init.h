/* space-init internals: the state of the single-threaded event loop shared by its files
 * (main.c: loop and dispatch; transport.c: the connection to spaced; proc.c: commands;
 * fs.c: file operations). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/proto.h"
#include "init/ring.h"

#define INIT_OUT_HIGH (1u << 20)      /* output queue size that pauses foreground pipes */
#define INIT_OUT_MAX (8u << 20)       /* hard cap of the output queue */
#define INIT_STDIN_HIGH (2u << 20)    /* pending stdin of one command that pauses the socket */
#define INIT_STDIN_ACK (128u << 10)   /* stdin bytes written before init acks them to spaced */
#define INIT_CHUNK (256u << 10)       /* one read from a pipe or file */
#define INIT_MAX_STREAMS 1024         /* live request ids on one connection */
#define INIT_RELAY_ASK '?'            /* init's first byte to a relay: who are you? */
#define INIT_RELAY_HELLO 'R'          /* the relay's answer, with its credentials */
#define INIT_RELAY_AUTH_MS 1000       /* how long init waits for it on a new connection */
#define INIT_LINGER_MS 200            /* silence on the pipes after exit that ends a command */
#define INIT_TERM_GRACE_MS 3000       /* SIGTERM -> SIGKILL */
#define INIT_PS_ARGV_MAX 1024         /* argv bytes kept per process for ps */
#define INIT_RM_MAX_DEPTH 256         /* directory depth of a recursive remove */
#define INIT_MAX_TCP 256              /* connections to ports open at once (op connect) */
#define INIT_MAX_WATCHES 16           /* file watches at once (op watch) */
#define INIT_WATCH_DIRS 8192          /* directories one watch covers */
#define INIT_WATCH_QUEUE_EVENTS 1024  /* events a watch holds unsent before it overflows */
#define INIT_WATCH_QUEUE_BYTES (256u << 10) /* ... and their bytes */
#define INIT_TTY_READ 4096            /* one read from a terminal's master */
#define INIT_TTY_STDIN_MAX (64u << 10) /* typed input a terminal has not read yet; more is dropped */
#define INIT_TREE_MAX_DEPTH 16        /* levels one op tree descends */
#define INIT_TREE_MAX_ENTRIES 2048    /* entries of one page of op tree (at ~120 bytes, a RESP) */
/* op input (protocol.md §3.21): stdin a background process has not read yet, past which
 * input is refused (EAGAIN); under INIT_STDIN_HIGH, so that it never pauses the socket. */
#define INIT_INPUT_MAX (1u << 20)

/* An fd in the epoll set; the callback finds its owner with container_of. */
struct watch {
        int fd;
        uint32_t events; /* currently registered, 0 = not in the set */
        void (*cb)(struct watch *w, uint32_t revents);
};

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct stream;

struct proc {
        struct proc *next;
        pid_t pid;
        char **argv; /* NULL-terminated, shortened to INIT_PS_ARGV_MAX bytes */
        /* For ps (§3.21): the request's env (shortened as argv), its cwd, its tag (or NULL). */
        char **env;
        char *cwd, *tag;
        struct watch out, err, in;
        struct buf stdin_pending;
        bool stdin_eof;   /* close stdin once pending is written */
        /* Stdin credit (protocol.md §3.15): spaced asked for acks; bytes taken off its
         * hands (written to the pipe, or dropped) and not acked yet. */
        bool stdin_acks;
        uint32_t stdin_unacked;
        bool background;
        bool tty; /* a terminal (§3.18): out and in are its pty master; err unused */
        struct stream *fg; /* the foreground exec stream, NULL when detached */
        bool exited, timed_out;
        int status;
        uint64_t deadline_ms;     /* monotonic, 0 = none */
        uint64_t last_activity_ms; /* monotonic: exit or last output */
        int64_t started_ms;       /* wall clock */
        uint64_t total_out;
        struct ring ring;
        unsigned attached;
};

enum stream_kind { STREAM_EXEC, STREAM_ATTACH, STREAM_READ, STREAM_WRITE, STREAM_TCP, STREAM_WATCH };

struct tcp_conn;
struct fswatch;

struct stream {
        struct stream *next;
        uint32_t id;
        enum stream_kind kind;
        struct proc *proc;         /* EXEC, ATTACH */
        struct ring_cursor cursor; /* ATTACH */
        bool follow;               /* ATTACH */
        bool hold;                 /* ATTACH: the process waits while it lags (§3.21) */
        int fd;                    /* READ, WRITE */
        int64_t remaining;         /* READ: bytes left, -1 = to EOF */
        int dirfd;                 /* WRITE: parent directory */
        char *tmp_name, *name;     /* WRITE: temporary and final name; tmp NULL for append */
        uint64_t written;          /* WRITE */
        int err;                   /* WRITE: first error, kept until the end */
        char errmsg[256];
        /* EXEC, ATTACH, READ with a "window" (protocol.md §3.14): output bytes it may still
         * send; spaced's WINDOW frames add to it. Without a window: unbounded. */
        bool windowed;
        uint32_t credit;
        struct tcp_conn *tcp; /* TCP (tcp.c) */
        struct fswatch *fsw;  /* WATCH (watch.c) */
        bool err_user; /* WRITE: err is a bad "user" (send_user_error) */
};

struct conn {
        struct watch w;
        struct buf in, out;
        size_t out_off; /* bytes of out already sent */
        struct stream *streams;
        unsigned n_streams;
        bool closing;
        bool is_sock; /* a socket (send with MSG_NOSIGNAL) or a virtio-serial port (write) */
};

struct init {
        int epfd;
        struct watch sig, listen;
        int root_fd;
        bool root_is_slash; /* root_fd is the process's own root (--root / or none) */
        bool pid1;
        /* --listen as PID 1 (the gvisor runtime): the socket is inside the sandbox, where
         * any process may connect; only the host's relay (started through `runsc exec`,
         * from outside the sandbox's process tree) is accepted (transport.c). */
        bool listen_outside_only;
        /* --guest (a microVM's /init): the host's stream arrives on a virtio-serial port
         * (guest_init_fd, dup'ed for every connection) and the control port (ctl) says
         * when to start a new one; see guest.c. */
        bool guest;
        int guest_init_fd;
        int guest_userns_fd; /* guest_userns(); -EBADF: commands run in init's own */
        struct watch ctl;
        uint64_t ctl_retry_ms;
        uint64_t start_ms;
        /* The key spaced gave (KEY frame): every HELLO carries it, so that a restarted
         * spaced can tell this init from a process that holds its socket (protocol.md §1). */
        uint8_t key[PROTO_KEY_LEN];
        bool have_key;
        struct conn *conn;
        int pending_fd; /* accepted, to replace conn at the top of the loop */
        struct proc *procs;
        unsigned n_bg;
        bool terminating;
        uint64_t term_deadline_ms;
        bool killed_hard;
};

extern struct init g;

uint64_t now_ms(void);
int64_t wall_ms(void);
int watch_set(struct watch *w, uint32_t events);
void watch_close(struct watch *w);

/* main.c: the live request ids of the connection. */
struct stream *stream_new(uint32_t id, enum stream_kind kind);
void stream_free(struct stream *s);

/* transport.c: the connection to spaced. Output is bounded by the connection's queue cap. */
size_t conn_queued(const struct conn *c);
void send_frame(uint8_t type, uint32_t id, const void *p, size_t n);
void send_json(uint8_t type, uint32_t id, struct buf *json);
void send_error(uint32_t id, int err, const char *fmt, ...) _printf_(3, 4);
/* An error RESP whose "error" also has flag:true, which tells spaced what failed (a "user",
 * a "cwd") where the errno alone does not. */
void send_error_flag(uint32_t id, int err, const char *flag, const char *msg);
/* The "error" member of an answer: {"code":"ENOENT","errno":N,"message":msg}. */
void json_w_error(struct json_writer *w, int err, const char *msg);
/* Writes what the queue holds, as far as the socket takes it. */
void conn_flush(struct conn *c);
/* The next whole frame from spaced (it stays in the input buffer until conn_frame_done);
 * false when there is none yet, the output queue is too full to take a request, or the
 * connection is closing (a framing error closes it). */
bool conn_next_frame(struct conn *c, struct proto_hdr *ret_h, const uint8_t **ret_p);
void conn_frame_done(struct conn *c, const struct proto_hdr *h);
/* epoll interest for the loop's next wait: output while some is queued, input when
 * want_input and the input buffer has room. */
void conn_watch(struct conn *c, bool want_input);
/* Takes fd as g.conn and queues HELLO; the caller has ended the previous connection. */
int conn_open(int fd);
/* Frees c (its streams already gone) and clears g.conn. */
void conn_free(struct conn *c);
/* Accepts connections on a new socket at path, or else on the listening socket fd; each
 * accepted one waits in g.pending_fd. */
int conn_listen(const char *path, int fd);
/* The optional "window" of a streaming request (0: none); -EINVAL when malformed. */
int req_window(const struct json *req, uint32_t *ret);
void stream_set_window(struct stream *s, uint32_t window);
/* Output bytes s may send now (SIZE_MAX without a window), and taking n of them. */
size_t stream_room(const struct stream *s);
void stream_charge(struct stream *s, size_t n);
/* A WINDOW from spaced: more room for s. */
void stream_grant(struct stream *s, uint32_t grant);

/* tcp.c: connections to ports inside the sandbox (op connect). */
void op_connect(uint32_t id, const struct json *req);
void tcp_stdin(struct stream *s, const uint8_t *data, size_t n);
void tcp_pump(struct stream *s);
void tcp_update_watches(void);
void tcp_free(struct tcp_conn *t);

/* watch.c: file watching (op watch). */
void op_watch(uint32_t id, const struct json *req);
void fsw_pump(struct stream *s);
void fsw_free(struct fswatch *f);

/* proc.c */
void op_exec(uint32_t id, const struct json *req);
void op_ps(uint32_t id, const struct json *req);
void op_attach(uint32_t id, const struct json *req);
void op_signal(uint32_t id, const struct json *req);
void op_resize(uint32_t id, const struct json *req);
void op_input(uint32_t id, const struct json *req);
void proc_stdin(struct proc *p, const uint8_t *data, size_t n);
bool proc_stdin_full(void);
void proc_detach(struct proc *p);
void procs_reap(void);
void procs_tick(uint64_t now);
uint64_t procs_next_deadline(void);
void procs_pump(void);
/* Pipe interests follow the output queue: call after the last flush of an iteration. */
void procs_update_watches(void);
void attach_pump(struct stream *s);
void procs_kill_all(int sig);
bool procs_any_running(void);

/* fs.c */
/* Opens path under the root with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS). */
int fs_resolve(const char *path, int flags, mode_t mode, int *ret);
void op_read(uint32_t id, const struct json *req);
void op_write(uint32_t id, const struct json *req);
void write_data(struct stream *s, const uint8_t *data, size_t n);
void op_list(uint32_t id, const struct json *req);
void op_stat(uint32_t id, const struct json *req);
void op_mkdir(uint32_t id, const struct json *req);
void op_remove(uint32_t id, const struct json *req);
void op_rename(uint32_t id, const struct json *req);
/* lstat of path under the root (its last component not followed); a symlink's text goes
 * to target (*tlen its length, -1 for anything else). */
int fs_lstat(const char *path, struct stat *st, char *target, size_t tsz, ssize_t *tlen);
/* stat's members (§3.8: type, size, mode, mtime, uid, gid, owner and group when nm is
 * given, target when tlen >= 0) into the object being written. */
struct init_names;
void fs_write_stat(struct json_writer *w, const struct stat *st, const struct init_names *nm, const char *target,
                   ssize_t tlen);
void op_tree(uint32_t id, const struct json *req);
void read_pump(struct stream *s);
void write_abort(struct stream *s);

/* user.c: the "user" of exec, write and mkdir (protocol.md §3.1.1). */
#define INIT_USER_FILE_MAX (1u << 20) /* /etc/passwd, /etc/group: bytes read at most */
#define INIT_USER_LINE_MAX 1024       /* longer lines are skipped */
#define INIT_USER_MAX_GROUPS 64       /* supplementary groups kept */
struct init_user {
        uid_t uid;
        gid_t gid;
        bool known; /* found in /etc/passwd (name, home, shell and groups are set) */
        char name[33], home[256], shell[256];
        gid_t groups[INIT_USER_MAX_GROUPS];
        size_t n_groups;
};
/* Resolves v (a JSON name or uid); a uid not in /etc/passwd gets gid = uid and home "/".
 * On failure err holds the message: -ENOENT "no user NAME in /etc/passwd", -EINVAL. */
int user_resolve(const struct json *v, struct init_user *u, char *err, size_t errn);
/* The error RESP of a failed user_resolve: ENOENT and EINVAL (a bad "user") carry
 * "user":true (spaced answers 400); others are plain errors. */
void send_user_error(uint32_t id, int err, const char *msg);
/* Gives the entry name in dirfd (not followed) to u; 0 at once for NULL. */
int user_chown(int dirfd, const char *name, const struct init_user *u);
/* The names of uids and gids (op stat and op tree with "names": E2B's EntryInfo has owner
 * and group names). Both files are read and split once per request, so a listing of
 * thousands of entries costs two reads, not one per entry. A missing file names nobody. */
struct init_idname {
        uint32_t id;
        const char *name; /* into the file's buffer */
};
struct init_names {
        char *pw_buf, *gr_buf;
        struct init_idname *users, *groups;
        size_t n_users, n_groups;
};
int user_names_load(struct init_names *n);
/* The name of uid (gid), or NULL when the sandbox's file has none. */
const char *user_names_uid(const struct init_names *n, uint32_t uid);
const char *user_names_gid(const struct init_names *n, uint32_t gid);
void user_names_free(struct init_names *n);

/* guest.c (--guest): the microVM's boot steps before the loop starts. */
int guest_boot(void);
int guest_open_ports(int *ret_init, int *ret_ctl);
/* A user namespace of the guest's own, every id mapped 1:1, that every command enters
 * before it runs (proc.c): root inside the sandbox is root over its files but holds no
 * capability of the guest's first user namespace, so it can neither ptrace space-init
 * (not dumpable) nor take its fds (pidfd_getfd, /proc/1/fd), load modules, kexec, use
 * bpf or /dev/mem (docs/security.md, item 5 on microvm). Also opens ports below 1024 and
 * ping to every uid (sysctls of the guest's own kernel). An fd of it in *ret_fd. */
int guest_userns(int *ret_fd);
/* eth0 (virtio-net, QEMU's user-mode network) up with slirp's addressing, the default
 * route via it and /etc/resolv.conf bind-mounted read-only to slirp's DNS: the microvm
 * driver asks for it (control port 'N') when the sandbox has a network. Idempotent. */
int guest_net_up(void);
/* relay.c: --relay PATH; returns the exit status. */
int init_relay(const char *path);
