/* The `gvisor` runtime driver: a sandbox is a runsc (gVisor) container whose root is the
 * same overlay as ns (template layers + the session's writable layer, mounted on the
 * host, seen through id-mapped layers), with space-init as PID 1. Its checkpoints hold
 * process memory, so pause/resume/fork keep running processes. See docs/runtime-gvisor.md.
 * space-init listens inside the sandbox; the host reaches it through `runsc exec
 * space-init --relay` (a host socket held inside could not be checkpointed). */
#include "runtime/runtime.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sendfile.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include "common/buf.h"
#include "common/json.h"
#include "common/macros.h"
#include "runtime/cgroup.h"
#include "runtime/fsutil.h"
#include "runtime/gvisor/image.h"
#include "runtime/mount.h"
#include "runtime/quota.h"

#define RT_GV_RUNSC "/usr/bin/runsc"       /* SPACE_RUNSC overrides (tests, other installs) */
#define RT_GV_DEFAULT_MEMORY (512ull << 20)
#define RT_GV_DEFAULT_PIDS 512u
#define RT_GV_DEFAULT_NOFILE 4096u
#define RT_GV_MIN_MEMORY (64ull << 20)     /* the sentry itself needs some */
#define RT_GV_MAX_PIDS (1u << 22)
/* The host cgroup's pids limit counts the sentry's threads, not the sandbox's processes
 * (those are the sentry's goroutines). Go aborts the whole sentry when it cannot make a
 * thread ("failed to create new OS thread"), so a limit of exactly the session's pids
 * killed the sandbox under a burst of processes well below it (16 at a time blocking in
 * host syscalls: seen at 223 threads with pids.max 512 hit once). The sentry gets room for
 * a thread per sandbox task in a host syscall and its own runtime's threads, still bounded. */
#define RT_GV_SENTRY_THREADS 256u
static uint32_t host_pids(uint32_t pids) { return pids * 2 + RT_GV_SENTRY_THREADS; }
#define RT_GV_MAX_NOFILE (1u << 20)
#define RT_GV_MAX_PATH 4000
#define RT_GV_MAX_CONFIG (256u << 10)      /* config.json we write */
#define RT_GV_RUN_TIMEOUT_MS 30000         /* runsc run / restore / checkpoint */
#define RT_GV_CMD_TIMEOUT_MS 10000         /* pause, resume, delete */
#define RT_GV_RELAY_TIMEOUT_MS 5000        /* a relay that does not end after EOF */
#define RT_GV_INIT_PATH "/dev/.space-init"  /* space-init, bind-mounted read-only */
#define RT_GV_INIT_SOCK "/dev/.space-init.sock" /* where it listens, inside */
#define RT_GV_SHIM_NAME "libspace-statx.so"  /* beside the init binary */
#define RT_GV_SHIM_PATH "/dev/.space-statx.so"
#define RT_GV_IMAGE_MARK "space-gvisor"    /* file in a checkpoint dir: who wrote it */
#define RT_GV_IMAGE_VERSION "space-gvisor 1 runsc-20221219\n"
/* In a checkpoint dir of a sandbox that had a network: runsc restores such an image only
 * with --network=sandbox, and one without only with --network=none (the other way round
 * hangs), so a restore must match it. */
#define RT_GV_IMAGE_NET_MARK "space-gvisor-network"
#define RT_GV_LOG_DIR "runsc-logs"        /* DATA/runsc-logs: runsc.log of failed sandboxes */
#define RT_GV_KEPT_LOG_MAX (256u << 10)    /* the tail of runsc.log a kept copy holds */
#define RT_GV_KEPT_LOGS 32                 /* kept logs per host; the oldest go first */

struct rt_sandbox {
        char *id;
        char *run_dir;
        char *rootfs;          /* run_dir/rootfs: the overlay */
        bool mounted;
        struct rt_cgroup *cg;  /* runsc's group for us (cgroupsPath /space/<id>), or NULL */
        int sock;              /* our end of the relay to space-init */
        int relay_pidfd;       /* the `runsc exec ... --relay` process */
        int pidfd;             /* runsc's sandbox process: gone = space-init gone */
        pid_t pid;
        bool stopped;          /* checkpointed without leave_running */
        bool network;          /* runsc --network=sandbox in the prepared netns */
        bool reaped;
        int status;
        bool log_kept;         /* runsc.log was copied to DATA/runsc-logs */
        char kept_log[RT_GV_MAX_PATH + 64];
};

/* ---------------- host-level state ---------------- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static int host_err;
static char host_err_msg[256];
static char state_root[RT_GV_MAX_PATH]; /* DATA/runsc: runsc --root */
static char runsc_path[RT_GV_MAX_PATH];
static int idmap_userns = -EBADF;       /* user namespace fd: host 0.. <-> RT_ID_BASE.. */
static const char *host_data_dir;

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A user namespace whose ids RT_ID_BASE.. are the host's 0..: an id-mapped mount of a
 * shifted tree through it shows the template's root-owned files as root to runsc (whose
 * gofer has no id mapping of its own) and stores what runsc writes as root shifted again,
 * exactly like ns sandboxes do. Made once: a child in a new user namespace, its maps
 * written by us, its ns file kept. */
static int make_idmap_userns(void) {
        int pidfd = -1;
        struct clone_args cl = { .flags = CLONE_NEWUSER | CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd };
        long pid = syscall(SYS_clone3, &cl, sizeof cl);
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                for (;;)
                        pause();
        }
        char path[64], map[64];
        snprintf(map, sizeof map, "%u 0 %u\n", RT_ID_BASE, RT_ID_COUNT);
        int r = 0, fd = -EBADF;
        static const char *const files[] = { "uid_map", "gid_map" };
        for (size_t i = 0; i < ELEMENTSOF(files) && r == 0; i++) {
                snprintf(path, sizeof path, "/proc/%ld/%s", pid, files[i]);
                r = rt_write_file(path, map);
        }
        if (r == 0) {
                snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        r = -errno;
        }
        (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        int status;
        (void)rt_pidfd_wait(pidfd, true, &status);
        close(pidfd);
        return r < 0 ? r : fd;
}

static void host_setup(void) {
        const char *e = getenv("SPACE_RUNSC");
        snprintf(runsc_path, sizeof runsc_path, "%s", e && *e ? e : RT_GV_RUNSC);
        int r = 0;
        if (access(runsc_path, X_OK) < 0) {
                r = -errno;
                snprintf(host_err_msg, sizeof host_err_msg, "gvisor: runsc not found at %.150s (Debian package runsc)",
                         runsc_path);
        } else if ((r = rt_cgroup_host_init(NULL)) < 0) {
                snprintf(host_err_msg, sizeof host_err_msg, "gvisor: cgroup host init: %s", strerror(-r));
        } else if ((r = make_idmap_userns()) < 0) {
                snprintf(host_err_msg, sizeof host_err_msg, "gvisor: id-mapping user namespace: %s", strerror(-r));
        } else {
                idmap_userns = r;
                r = 0;
                if (snprintf(state_root, sizeof state_root, "%s/runsc", host_data_dir) >= (int)sizeof state_root)
                        r = -ENAMETOOLONG;
                else if (mkdir(state_root, 0700) < 0 && errno != EEXIST)
                        r = -errno;
                if (r < 0)
                        snprintf(host_err_msg, sizeof host_err_msg, "gvisor: state dir %.150s: %s", state_root,
                                 strerror(-r));
        }
        host_err = r;
}

static int ensure_host(void) {
        if (!host_data_dir) {
                runtime_set_error("gvisor: host_init was not called");
                return -EINVAL;
        }
        pthread_once(&host_once, host_setup);
        if (host_err < 0)
                runtime_set_error("%s", host_err_msg);
        return host_err;
}

static int gv_host_init(const char *data_dir) {
        if (!data_dir || data_dir[0] != '/' || strlen(data_dir) > RT_GV_MAX_PATH - 16)
                return -EINVAL;
        if (!host_data_dir)
                host_data_dir = strdup(data_dir);
        if (!host_data_dir)
                return -ENOMEM;
        return ensure_host();
}

/* ---------------- running runsc ---------------- */

/* Starts runsc with args (after the global flags every call shares) with the given stdio;
 * the child has no exit signal, so a generic waitpid(-1) reaper in the daemon never takes
 * it, and we wait through the returned pidfd. network: --network=sandbox (the bundle's
 * network namespace path is the prepared netns), else --network=none. */
static int runsc_spawn(const char *const *args, bool network, int in_fd, int out_fd, int err_fd, int *ret_pidfd) {
        char root_flag[RT_GV_MAX_PATH + 16];
        snprintf(root_flag, sizeof root_flag, "--root=%s", state_root);
        const char *argv[32];
        size_t n = 0;
        argv[n++] = "runsc";
        argv[n++] = root_flag;
        argv[n++] = network ? "--network=sandbox" : "--network=none";
        /* The host reads the writable layer for file snapshots while the sandbox runs:
         * shared mode keeps the sentry from holding written data back in its cache. */
        argv[n++] = "--file-access=shared";
        for (size_t i = 0; args[i]; i++) {
                if (n >= ELEMENTSOF(argv) - 1)
                        return -E2BIG;
                argv[n++] = args[i];
        }
        argv[n] = NULL;
        static char *const envp[] = { (char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
        int pidfd = -1;
        struct clone_args cl = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = 0 };
        long pid = syscall(SYS_clone3, &cl, sizeof cl);
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Only async-signal-safe calls from here: the daemon may be multi-threaded. */
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGPIPE, SIG_DFL);
                if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
                        _exit(127);
                /* runsc 20221219 refuses a network namespace in which
                 * /proc/sys/net/core/rmem_default exists, taking it for the host's: since
                 * Linux 6.x it exists in every one. An empty /proc/sys/net in a mount
                 * namespace of runsc's own hides it (the prepared netns is never the
                 * host's: ensured by the caller, who made it). */
                if (network && (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                                mount("none", "/proc/sys/net", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                      "size=4k,mode=0555") < 0))
                        _exit(126);
                (void)close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
                execve(runsc_path, (char *const *)argv, envp);
                _exit(127);
        }
        *ret_pidfd = pidfd;
        return 0;
}

/* Waits for a pidfd child for up to timeout_ms (then SIGKILL); its wait status. */
static int wait_child(int pidfd, int timeout_ms, int *ret_status) {
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        int pr;
        int64_t deadline = now_ms() + timeout_ms;
        do {
                int64_t left = deadline - now_ms();
                pr = poll(&p, 1, left > 0 ? (int)left : 0);
        } while (pr < 0 && errno == EINTR);
        bool killed = false;
        if (pr == 0) {
                (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                killed = true;
        }
        int status = 0;
        int r = rt_pidfd_wait(pidfd, true, &status);
        if (r < 0)
                return r;
        if (killed)
                return -ETIMEDOUT;
        *ret_status = status;
        return 0;
}

/* The last line of the log at path. */
static void log_tail_of(const char *path, char *out, size_t size) {
        out[0] = 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return;
        char buf[1024];
        off_t off = st.st_size > (off_t)sizeof buf - 1 ? st.st_size - (off_t)sizeof buf + 1 : 0;
        ssize_t n = pread(fd, buf, sizeof buf - 1, off);
        if (n <= 0)
                return;
        buf[n] = 0;
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
                buf[--n] = 0;
        char *line = strrchr(buf, '\n');
        const char *t = line ? line + 1 : buf;
        size_t tl = MIN(strlen(t), size - 1);
        memcpy(out, t, tl);
        out[tl] = 0;
}

/* The last line runsc wrote to run_dir/runsc.log: why it failed. */
static void log_tail(const char *run_dir, char *out, size_t size) {
        char path[RT_GV_MAX_PATH + 16];
        snprintf(path, sizeof path, "%s/runsc.log", run_dir);
        log_tail_of(path, out, size);
}

static int open_log(const char *run_dir) {
        char path[RT_GV_MAX_PATH + 16];
        snprintf(path, sizeof path, "%s/runsc.log", run_dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0600);
        return fd < 0 ? -errno : fd;
}

struct kept_log {
        char name[NAME_MAX + 1];
        struct timespec mtime;
};

static int kept_log_cmp(const void *a, const void *b) {
        const struct kept_log *x = a, *y = b;
        if (x->mtime.tv_sec != y->mtime.tv_sec)
                return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

/* Leaves room for one more log in dir: the oldest beyond RT_GV_KEPT_LOGS - 1 go. */
static void prune_logs(const char *dir) {
        DIR *dh = opendir(dir);
        if (!dh)
                return;
        struct kept_log *v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(dh))) {
                size_t l = strlen(e->d_name);
                struct stat st;
                if (l < 5 || strcmp(e->d_name + l - 4, ".log") != 0 ||
                    fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (n == cap) {
                        size_t nc = cap ? cap * 2 : 64;
                        struct kept_log *nv = realloc(v, nc * sizeof *nv);
                        if (!nv)
                                break;
                        v = nv;
                        cap = nc;
                }
                snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
                v[n++].mtime = st.st_mtim;
        }
        if (n >= RT_GV_KEPT_LOGS) {
                qsort(v, n, sizeof *v, kept_log_cmp);
                for (size_t i = 0; i + RT_GV_KEPT_LOGS - 1 < n; i++)
                        (void)unlinkat(dirfd(dh), v[i].name, 0);
        }
        free(v);
        closedir(dh);
}

/* Teardown removes run_dir, and runsc.log in it is the only account of why runsc failed
 * or why a sandbox ended on its own (the sandbox process writes its last words there):
 * copies its tail to DATA/runsc-logs/<id>.log, after a line saying why it was kept. Once
 * per sandbox; sb->kept_log says where ("" when the log was empty). */
static void keep_log(struct rt_sandbox *sb, const char *why) {
        if (sb->log_kept)
                return;
        sb->log_kept = true;
        sb->kept_log[0] = 0;
        char src[RT_GV_MAX_PATH + 16], dir[RT_GV_MAX_PATH + 16], dst[RT_GV_MAX_PATH + 64];
        snprintf(src, sizeof src, "%s/runsc.log", sb->run_dir);
        _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0 || st.st_size == 0 || !host_data_dir)
                return;
        snprintf(dir, sizeof dir, "%s/" RT_GV_LOG_DIR, host_data_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return;
        prune_logs(dir);
        snprintf(dst, sizeof dst, "%s/%s.log", dir, sb->id);
        _cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (out < 0)
                return;
        off_t off = st.st_size > (off_t)RT_GV_KEPT_LOG_MAX ? st.st_size - (off_t)RT_GV_KEPT_LOG_MAX : 0;
        if (dprintf(out, "# space: runsc.log of sandbox %s (%s), last %lld of %lld bytes\n", sb->id, why,
                    (long long)(st.st_size - off), (long long)st.st_size) < 0)
                return;
        while (off < st.st_size) {
                ssize_t w = sendfile(out, in, &off, (size_t)(st.st_size - off));
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        break;
        }
        snprintf(sb->kept_log, sizeof sb->kept_log, "%s", dst);
}

/* Runs runsc to completion with stdio on /dev/null and stderr in run_dir/runsc.log.
 * A non-zero exit is -EIO with runsc's last words in runtime_last_error(). */
static int runsc_run(const char *run_dir, const char *what, bool network, const char *const *args, int timeout_ms) {
        _cleanup_close_ int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                return -errno;
        _cleanup_close_ int log_fd = open_log(run_dir);
        if (log_fd < 0)
                return log_fd;
        _cleanup_close_ int pidfd = -EBADF;
        int r = runsc_spawn(args, network, null_fd, log_fd, log_fd, &pidfd);
        if (r < 0) {
                runtime_set_error("gvisor: %s: cannot start runsc: %s", what, strerror(-r));
                return r;
        }
        int status = 0;
        r = wait_child(pidfd, timeout_ms, &status);
        if (r < 0) {
                runtime_set_error("gvisor: %s: %s", what, r == -ETIMEDOUT ? "runsc timed out" : strerror(-r));
                return r;
        }
        if (status != 0) {
                char tail[400];
                log_tail(run_dir, tail, sizeof tail);
                runtime_set_error("gvisor: %s: runsc failed (status %d): %s", what, status, tail);
                return -EIO;
        }
        return 0;
}

/* ---------------- the relay to space-init ---------------- */

static void relay_stop(struct rt_sandbox *sb) {
        /* EOF on its stdin ends the relay inside; it holds host fds, so a checkpoint
         * must not start before it is gone. */
        sb->sock = safe_close(sb->sock);
        if (sb->relay_pidfd >= 0) {
                int status;
                (void)wait_child(sb->relay_pidfd, RT_GV_RELAY_TIMEOUT_MS, &status);
                sb->relay_pidfd = safe_close(sb->relay_pidfd);
        }
}

static int relay_start(struct rt_sandbox *sb) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        _cleanup_close_ int log_fd = open_log(sb->run_dir);
        if (log_fd < 0) {
                close(sv[0]);
                close(sv[1]);
                return log_fd;
        }
        const char *args[] = { "exec", sb->id, RT_GV_INIT_PATH, "--relay", RT_GV_INIT_SOCK, NULL };
        int pidfd = -1;
        int r = runsc_spawn(args, sb->network, sv[1], sv[1], log_fd, &pidfd);
        close(sv[1]);
        if (r < 0) {
                close(sv[0]);
                return r;
        }
        sb->sock = sv[0];
        sb->relay_pidfd = pidfd;
        return 0;
}

/* ---------------- the bundle ---------------- */

/* Capabilities root keeps inside: the same set as ns (docs/runtime-ns.md). */
static const char *const keep_caps[] = {
        "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH",  "CAP_FOWNER",     "CAP_FSETID",
        "CAP_KILL",   "CAP_SETGID",       "CAP_SETUID",           "CAP_SETPCAP",    "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
};

static void w_mount(struct json_writer *w, const char *dst, const char *type, const char *src, const char *const *opts) {
        json_w_obj_begin(w);
        json_w_kstr(w, "destination", dst);
        json_w_kstr(w, "type", type);
        json_w_kstr(w, "source", src);
        if (opts) {
                json_w_key(w, "options");
                json_w_arr_begin(w);
                for (size_t i = 0; opts[i]; i++)
                        json_w_str(w, opts[i]);
                json_w_arr_end(w);
        }
        json_w_obj_end(w);
}

/* The statx shim (statx_shim.c) next to the init binary, and the ld.so.preload naming it
 * inside, written to run_dir: false when there is no shim (then coreutils' ls and stat
 * fail inside, docs/runtime-gvisor.md). */
static bool shim_prepare(const struct rt_spec *spec, char *shim, size_t shim_size, char *preload, size_t preload_size) {
        const char *slash = strrchr(spec->init_path, '/');
        int n = snprintf(shim, shim_size, "%.*s/" RT_GV_SHIM_NAME, (int)(slash - spec->init_path), spec->init_path);
        if (n < 0 || (size_t)n >= shim_size || access(shim, R_OK) < 0)
                return false;
        n = snprintf(preload, preload_size, "%s/ld.so.preload", spec->run_dir);
        if (n < 0 || (size_t)n >= preload_size)
                return false;
        _cleanup_close_ int fd = open(preload, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        const char *line = RT_GV_SHIM_PATH "\n";
        return fd >= 0 && write(fd, line, strlen(line)) == (ssize_t)strlen(line);
}

/* The rootfs has a directory /etc (not a symlink: a bind mount must not follow one out). */
static bool rootfs_has_etc(const char *rootfs) {
        char p[RT_GV_MAX_PATH + 16];
        snprintf(p, sizeof p, "%s/etc", rootfs);
        struct stat st;
        return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int write_config(const struct rt_spec *spec, const char *rootfs, const char *bundle, uint64_t mem,
                        uint32_t pids, uint32_t nofile) {
        char shim[RT_GV_MAX_PATH + 32], preload[RT_GV_MAX_PATH + 32];
        bool with_shim = shim_prepare(spec, shim, sizeof shim, preload, sizeof preload);
        struct buf b = BUF_INIT(RT_GV_MAX_CONFIG);
        struct json_writer w = JSON_WRITER_INIT(&b);
        char env_id[32 + RT_MAX_ID], tmp_size[48], shm_size[48], cgpath[32 + RT_MAX_ID], netns[64];
        /* runsc opens it while we hold spec->netns_fd, and moves its sandbox there. */
        snprintf(netns, sizeof netns, "/proc/%d/fd/%d", (int)getpid(), spec->netns_fd);
        snprintf(env_id, sizeof env_id, "SPACE_SANDBOX_ID=%s", spec->id);
        snprintf(tmp_size, sizeof tmp_size, "size=%" PRIu64, mem);
        snprintf(shm_size, sizeof shm_size, "size=%" PRIu64, MIN(mem, (uint64_t)RT_MOUNT_SHM_SIZE));
        snprintf(cgpath, sizeof cgpath, "/" RT_CGROUP_PARENT "/%s", spec->id);

        json_w_obj_begin(&w);
        json_w_kstr(&w, "ociVersion", "1.0.0");
        json_w_key(&w, "process");
        json_w_obj_begin(&w);
        json_w_key(&w, "user");
        json_w_obj_begin(&w);
        json_w_kint(&w, "uid", 0);
        json_w_kint(&w, "gid", 0);
        json_w_obj_end(&w);
        json_w_key(&w, "args");
        json_w_arr_begin(&w);
        json_w_str(&w, RT_GV_INIT_PATH);
        json_w_str(&w, "--listen");
        json_w_str(&w, RT_GV_INIT_SOCK);
        json_w_arr_end(&w);
        json_w_key(&w, "env");
        json_w_arr_begin(&w);
        json_w_str(&w, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        json_w_str(&w, "HOME=/root");
        json_w_str(&w, "LANG=C.UTF-8");
        json_w_str(&w, env_id);
        json_w_arr_end(&w);
        json_w_kstr(&w, "cwd", "/");
        json_w_key(&w, "capabilities");
        json_w_obj_begin(&w);
        static const char *const sets[] = { "bounding", "effective", "permitted" };
        for (size_t s = 0; s < ELEMENTSOF(sets); s++) {
                json_w_key(&w, sets[s]);
                json_w_arr_begin(&w);
                for (size_t i = 0; i < ELEMENTSOF(keep_caps); i++)
                        json_w_str(&w, keep_caps[i]);
                json_w_arr_end(&w);
        }
        json_w_obj_end(&w);
        json_w_key(&w, "rlimits");
        json_w_arr_begin(&w);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "type", "RLIMIT_NOFILE");
        json_w_key(&w, "hard");
        json_w_uint(&w, nofile);
        json_w_key(&w, "soft");
        json_w_uint(&w, nofile);
        json_w_obj_end(&w);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "type", "RLIMIT_CORE");
        json_w_kint(&w, "hard", 0);
        json_w_kint(&w, "soft", 0);
        json_w_obj_end(&w);
        json_w_arr_end(&w);
        json_w_kbool(&w, "noNewPrivileges", true);
        json_w_obj_end(&w); /* process */

        json_w_key(&w, "root");
        json_w_obj_begin(&w);
        json_w_kstr(&w, "path", rootfs);
        json_w_kbool(&w, "readonly", false);
        json_w_obj_end(&w);
        json_w_kstr(&w, "hostname", spec->id);

        json_w_key(&w, "mounts");
        json_w_arr_begin(&w);
        w_mount(&w, "/proc", "proc", "proc", NULL);
        w_mount(&w, "/dev", "tmpfs", "tmpfs", NULL);
        w_mount(&w, "/sys", "sysfs", "sysfs", (const char *const[]){ "ro", "nosuid", "nodev", "noexec", NULL });
        w_mount(&w, "/tmp", "tmpfs", "tmpfs", (const char *const[]){ "mode=1777", tmp_size, NULL });
        w_mount(&w, "/dev/shm", "tmpfs", "shm", (const char *const[]){ "mode=1777", shm_size, NULL });
        w_mount(&w, RT_GV_INIT_PATH, "bind", spec->init_path, (const char *const[]){ "ro", "bind", NULL });
        if (with_shim) {
                w_mount(&w, RT_GV_SHIM_PATH, "bind", shim, (const char *const[]){ "ro", "bind", NULL });
                w_mount(&w, "/etc/ld.so.preload", "bind", preload, (const char *const[]){ "ro", "bind", NULL });
        }
        if (spec->resolv_conf && rootfs_has_etc(rootfs))
                w_mount(&w, "/etc/resolv.conf", "bind", spec->resolv_conf, (const char *const[]){ "ro", "bind", NULL });
        json_w_arr_end(&w);

        json_w_key(&w, "linux");
        json_w_obj_begin(&w);
        json_w_key(&w, "namespaces");
        json_w_arr_begin(&w);
        static const char *const nss[] = { "pid", "ipc", "uts", "mount", "network" };
        for (size_t i = 0; i < ELEMENTSOF(nss); i++) {
                json_w_obj_begin(&w);
                json_w_kstr(&w, "type", nss[i]);
                if (spec->network && strcmp(nss[i], "network") == 0)
                        json_w_kstr(&w, "path", netns);
                json_w_obj_end(&w);
        }
        json_w_arr_end(&w);
        json_w_kstr(&w, "cgroupsPath", cgpath);
        json_w_key(&w, "resources");
        json_w_obj_begin(&w);
        json_w_key(&w, "memory");
        json_w_obj_begin(&w);
        json_w_key(&w, "limit");
        json_w_uint(&w, mem);
        json_w_key(&w, "swap");
        json_w_uint(&w, mem);
        json_w_obj_end(&w);
        json_w_key(&w, "pids");
        json_w_obj_begin(&w);
        json_w_key(&w, "limit");
        json_w_uint(&w, host_pids(pids));
        json_w_obj_end(&w);
        if (spec->limits.cpu_millis) {
                json_w_key(&w, "cpu");
                json_w_obj_begin(&w);
                json_w_key(&w, "quota");
                json_w_uint(&w, (uint64_t)spec->limits.cpu_millis * RT_CGROUP_CPU_PERIOD_US / 1000);
                json_w_key(&w, "period");
                json_w_uint(&w, RT_CGROUP_CPU_PERIOD_US);
                json_w_obj_end(&w);
        }
        json_w_obj_end(&w); /* resources */
        json_w_obj_end(&w); /* linux */
        json_w_obj_end(&w);
        if (w.err < 0) {
                buf_free(&b);
                return w.err;
        }
        char path[RT_GV_MAX_PATH + 32];
        snprintf(path, sizeof path, "%s/config.json", bundle);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        int r = 0;
        if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len)
                r = fd < 0 || errno ? -errno : -EIO;
        buf_free(&b);
        return r;
}

/* ---------------- the root filesystem ---------------- */

/* Mounts an id-mapped clone of src at target (through idmap_userns). */
static int idmap_mount(const char *src, const char *target) {
        _cleanup_close_ int t = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (t < 0)
                return -errno;
        struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                .userns_fd = (uint64_t)idmap_userns };
        if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
                return -errno;
        if (mkdir(target, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (syscall(SYS_move_mount, t, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return -errno;
        return 0;
}

static void idmap_unmount_all(const char *dir) {
        char p[RT_GV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/uw", dir);
        (void)umount2(p, MNT_DETACH);
        (void)rmdir(p);
        /* Layers are l0, l1, ... without gaps. */
        for (unsigned i = 0; i < RT_MOUNT_MAX_LAYERS; i++) {
                snprintf(p, sizeof p, "%s/l%u", dir, i);
                if (umount2(p, MNT_DETACH) < 0 && errno == ENOENT)
                        break;
                (void)rmdir(p);
        }
        (void)rmdir(dir);
}

/* The overlay at sb->rootfs from id-mapped views of the layers. Upper and work must share
 * a parent (overlayfs wants them on one mount); that parent gets o+x so the mapped view
 * (where its host-root owner is nobody) can be walked. The layer mounts are dropped once
 * the overlay holds its own private clones of them. */
static int mount_rootfs(const struct rt_spec *spec, struct rt_sandbox *sb, const char **what) {
        char idm[RT_GV_MAX_PATH + 16], parent[RT_GV_MAX_PATH], lower[RT_MOUNT_MAX_OPTS + 1] = "";
        snprintf(idm, sizeof idm, "%s/idmap", spec->run_dir);
        const char *us = strrchr(spec->upper_dir, '/'), *ws = strrchr(spec->work_dir, '/');
        size_t pl = (size_t)(us - spec->upper_dir);
        if (pl == 0 || pl >= sizeof parent || (size_t)(ws - spec->work_dir) != pl ||
            strncmp(spec->upper_dir, spec->work_dir, pl) != 0) {
                *what = "upper_dir and work_dir must be in one directory";
                return -EINVAL;
        }
        memcpy(parent, spec->upper_dir, pl);
        parent[pl] = 0;
        struct stat st;
        if (stat(parent, &st) < 0 || (!(st.st_mode & S_IXOTH) && chmod(parent, (st.st_mode & 07777) | S_IXOTH) < 0)) {
                *what = "make the sandbox directory searchable";
                return -errno;
        }
        if (chown(spec->work_dir, RT_ID_BASE, RT_ID_BASE) < 0) {
                *what = "set owner of work_dir";
                return -errno;
        }
        if (mkdir(idm, 0700) < 0 && errno != EEXIST) {
                *what = "mkdir run_dir/idmap";
                return -errno;
        }
        int r = 0;
        size_t lo = 0;
        unsigned i = 0;
        for (const char *s = spec->lower_dirs; *s && r == 0; i++) {
                const char *e = strchr(s, ':');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                char layer[RT_GV_MAX_PATH], target[RT_GV_MAX_PATH + 32];
                if (n == 0 || n >= sizeof layer || i >= RT_MOUNT_MAX_LAYERS) {
                        *what = "lower_dirs";
                        r = -EINVAL;
                        break;
                }
                memcpy(layer, s, n);
                layer[n] = 0;
                snprintf(target, sizeof target, "%s/l%u", idm, i);
                if ((r = idmap_mount(layer, target)) < 0) {
                        *what = "id-mapped mount of a template layer";
                        break;
                }
                int k = snprintf(lower + lo, sizeof lower - lo, "%s%s", lo ? ":" : "", target);
                if (k < 0 || (size_t)k >= sizeof lower - lo) {
                        *what = "lower_dirs";
                        r = -E2BIG;
                        break;
                }
                lo += (size_t)k;
                s = e ? e + 1 : s + n;
        }
        char uw[RT_GV_MAX_PATH + 32], upper[2 * RT_GV_MAX_PATH], work[2 * RT_GV_MAX_PATH];
        snprintf(uw, sizeof uw, "%s/uw", idm);
        snprintf(upper, sizeof upper, "%s%s", uw, us);
        snprintf(work, sizeof work, "%s%s", uw, ws);
        _cleanup_free_ char *opts = NULL;
        if (r == 0 && (r = idmap_mount(parent, uw)) < 0)
                *what = "id-mapped mount of the writable layer";
        if (r == 0 && (r = rt_mount_overlay_opts(lower, upper, work, &opts)) < 0)
                *what = "overlay options";
        if (r == 0 && (r = rt_mount_overlay(sb->rootfs, opts)) < 0)
                *what = "mount overlay rootfs";
        if (r == 0)
                sb->mounted = true;
        idmap_unmount_all(idm);
        return r;
}

/* ---------------- create / destroy ---------------- */

static bool path_valid(const char *p) {
        return p && p[0] == '/' && strlen(p) < RT_GV_MAX_PATH;
}

static void sandbox_free(struct rt_sandbox *sb) {
        if (!sb)
                return;
        sb->cg = rt_cgroup_free(sb->cg);
        safe_close(sb->sock);
        safe_close(sb->relay_pidfd);
        safe_close(sb->pidfd);
        free(sb->id);
        free(sb->run_dir);
        free(sb->rootfs);
        free(sb);
}

static struct rt_sandbox *sandbox_new(const char *id, const char *run_dir) {
        struct rt_sandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return NULL;
        sb->sock = sb->relay_pidfd = sb->pidfd = -EBADF;
        sb->id = strdup(id);
        sb->run_dir = strdup(run_dir);
        if (!sb->id || !sb->run_dir || asprintf(&sb->rootfs, "%s/rootfs", run_dir) < 0) {
                sb->rootfs = NULL;
                sandbox_free(sb);
                return NULL;
        }
        return sb;
}

static void *reap_thread(void *p) {
        int pidfd = (int)(intptr_t)p;
        int status;
        (void)wait_child(pidfd, RT_GV_CMD_TIMEOUT_MS, &status);
        close(pidfd);
        return NULL;
}

/* `runsc delete` of a container a checkpoint stopped only removes runsc's state files,
 * but takes over a second (it polls for a sandbox that is already gone): it runs on
 * while we go on, and a detached thread reaps it. */
static void delete_in_background(const char *id) {
        _cleanup_close_ int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        const char *args[] = { "delete", "--force", id, NULL };
        int pidfd = -1;
        if (null_fd < 0 || runsc_spawn(args, false, null_fd, null_fd, null_fd, &pidfd) < 0)
                return;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, reap_thread, (void *)(intptr_t)pidfd) != 0)
                (void)reap_thread((void *)(intptr_t)pidfd);
        pthread_attr_destroy(&at);
}

/* A pidfd whose process has ended. */
static bool fd_readable(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return fd >= 0 && poll(&p, 1, 0) > 0;
}

/* Everything but the handle: the relay, the runsc container (kill + delete), the mount,
 * the bundle. Returns the first error. */
static int teardown(const char *id, const char *run_dir, struct rt_sandbox *sb) {
        int ret = 0;
        if (sb && !sb->stopped && (fd_readable(sb->pidfd) || fd_readable(sb->relay_pidfd)))
                keep_log(sb, "its sandbox or relay ended before destroy");
        if (sb)
                relay_stop(sb);
        int r = 0;
        if (sb && sb->stopped) {
                delete_in_background(id);
        } else {
                const char *args[] = { "delete", "--force", id, NULL };
                r = runsc_run(run_dir, "delete", sb && sb->network, args, RT_GV_CMD_TIMEOUT_MS);
        }
        /* runsc says "does not exist" for a container it never made or already removed. */
        if (r < 0 && !strstr(runtime_last_error(), "does not exist") && !strstr(runtime_last_error(), "not found"))
                ret = r;
        if (sb && sb->pidfd >= 0 && !sb->reaped) {
                /* If delete failed, the sandbox process is still ours to kill. */
                (void)syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
                struct pollfd p = { .fd = sb->pidfd, .events = POLLIN };
                (void)poll(&p, 1, RT_GV_CMD_TIMEOUT_MS);
        }
        char p[RT_GV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/rootfs", run_dir);
        if (umount2(p, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT && ret == 0)
                ret = -errno;
        if (sb)
                sb->mounted = false;
        (void)rmdir(p);
        snprintf(p, sizeof p, "%s/idmap", run_dir);
        idmap_unmount_all(p);
        snprintf(p, sizeof p, "%s/bundle", run_dir);
        (void)rt_rm_rf(p);
        snprintf(p, sizeof p, "%s/sandbox.pid", run_dir);
        (void)unlink(p);
        if (ret < 0)
                runtime_set_error("gvisor: teardown of %s: %s", id, strerror(-ret));
        return ret;
}

/* The sandbox process runsc wrote to pid_file, as a pidfd. */
static int open_sandbox_pid(const char *pid_file, pid_t *ret_pid, int *ret_pidfd) {
        char buf[32];
        int n = rt_read_file(pid_file, buf, sizeof buf);
        if (n < 0)
                return n;
        char *end;
        errno = 0;
        long v = strtol(buf, &end, 10);
        if (errno || end == buf || v <= 1 || v > INT32_MAX)
                return -EBADMSG;
        int fd = (int)syscall(SYS_pidfd_open, (pid_t)v, 0);
        if (fd < 0)
                return -errno;
        *ret_pid = (pid_t)v;
        *ret_pidfd = fd;
        return 0;
}

static int check_image(const char *dir) {
        char path[RT_GV_MAX_PATH + 32], buf[128];
        snprintf(path, sizeof path, "%s/" RT_GV_IMAGE_MARK, dir);
        int n = rt_read_file(path, buf, sizeof buf);
        if (n < 0 || strcmp(buf, RT_GV_IMAGE_VERSION) != 0)
                return -EINVAL;
        snprintf(path, sizeof path, "%s/" GV_IMAGE_FILE, dir);
        if (access(path, R_OK) == 0)
                return 0;
        snprintf(path, sizeof path, "%s/" GV_IMAGE_RAW, dir);
        return access(path, R_OK) < 0 ? -EINVAL : 0;
}

static bool image_has_network(const char *dir) {
        char path[RT_GV_MAX_PATH + 32];
        snprintf(path, sizeof path, "%s/" RT_GV_IMAGE_NET_MARK, dir);
        return access(path, F_OK) == 0;
}

static int gv_create(const struct rt_spec *spec, struct rt_sandbox **ret) {
        runtime_set_error("%s", "");
        if (!spec || !rt_id_valid(spec->id) || !spec->lower_dirs || !path_valid(spec->upper_dir) ||
            !path_valid(spec->work_dir) || !path_valid(spec->run_dir) || !path_valid(spec->init_path) ||
            (spec->restore_dir && !path_valid(spec->restore_dir))) {
                runtime_set_error("gvisor: invalid spec (id or a path missing, relative or too long)");
                return -EINVAL;
        }
        if (spec->network && !rt_is_netns(spec->netns_fd)) {
                runtime_set_error("gvisor: netns_fd %d is not a network namespace", spec->netns_fd);
                return -EINVAL;
        }
        if (spec->resolv_conf && !path_valid(spec->resolv_conf)) {
                runtime_set_error("gvisor: resolv_conf must be an absolute path");
                return -EINVAL;
        }
        const struct rt_limits *l = &spec->limits;
        uint64_t mem = l->memory_bytes ? l->memory_bytes : RT_GV_DEFAULT_MEMORY;
        uint32_t pids = l->pids ? l->pids : RT_GV_DEFAULT_PIDS;
        uint32_t nofile = l->nofile ? l->nofile : RT_GV_DEFAULT_NOFILE;
        if (mem < RT_GV_MIN_MEMORY || pids > RT_GV_MAX_PIDS || nofile > RT_GV_MAX_NOFILE ||
            l->cpu_millis > RT_CGROUP_MAX_CPU_MILLIS) {
                runtime_set_error("gvisor: limits out of range (memory >= %llu bytes, pids <= %u, nofile <= %u)",
                                  (unsigned long long)RT_GV_MIN_MEMORY, RT_GV_MAX_PIDS, RT_GV_MAX_NOFILE);
                return -ERANGE;
        }
        if (spec->restore_dir && check_image(spec->restore_dir) < 0) {
                runtime_set_error("gvisor: %s holds no checkpoint this driver wrote", spec->restore_dir);
                return -EINVAL;
        }
        if (spec->restore_dir && image_has_network(spec->restore_dir) != spec->network) {
                runtime_set_error("gvisor: the checkpoint in %s was taken %s a network; runsc restores it only %s one",
                                  spec->restore_dir, spec->network ? "without" : "with",
                                  spec->network ? "without" : "with");
                return -EINVAL;
        }
        int r = ensure_host();
        if (r < 0)
                return r;
        r = rt_quota_apply(spec->upper_dir, spec->work_dir, l->disk_bytes, l->disk_inodes);
        if (r < 0)
                return r;
        struct rt_sandbox *sb = sandbox_new(spec->id, spec->run_dir);
        if (!sb)
                return -ENOMEM;
        sb->network = spec->network;
        const char *what = NULL;
        char bundle[RT_GV_MAX_PATH + 16], pid_file[RT_GV_MAX_PATH + 32], pid_flag[RT_GV_MAX_PATH + 48],
                bundle_flag[RT_GV_MAX_PATH + 32], image_flag[RT_GV_MAX_PATH + 32];
        snprintf(bundle, sizeof bundle, "%s/bundle", spec->run_dir);
        snprintf(pid_file, sizeof pid_file, "%s/sandbox.pid", spec->run_dir);
        snprintf(pid_flag, sizeof pid_flag, "--pid-file=%s", pid_file);
        snprintf(bundle_flag, sizeof bundle_flag, "--bundle=%s", bundle);
        snprintf(image_flag, sizeof image_flag, "--image-path=%s", spec->restore_dir ? spec->restore_dir : "");

        if ((mkdir(sb->rootfs, 0755) < 0 && errno != EEXIST) || (mkdir(bundle, 0700) < 0 && errno != EEXIST)) {
                r = -errno;
                what = "mkdir in run_dir";
                goto fail;
        }
        if ((r = rt_match_upper_root(spec->lower_dirs, spec->upper_dir)) < 0) {
                what = "set owner of upper_dir";
                goto fail;
        }
        if ((r = mount_rootfs(spec, sb, &what)) < 0)
                goto fail;
        if ((r = write_config(spec, sb->rootfs, bundle, mem, pids, nofile)) < 0) {
                what = "write config.json";
                goto fail;
        }
        if (spec->restore_dir && (r = gv_image_join(spec->restore_dir)) < 0) {
                what = "rebuild the state file from the stored image";
                goto fail;
        }
        if (spec->restore_dir) {
                const char *args[] = { "restore", "--detach", image_flag, bundle_flag, pid_flag, spec->id, NULL };
                r = runsc_run(spec->run_dir, "restore", spec->network, args, RT_GV_RUN_TIMEOUT_MS);
        } else {
                const char *args[] = { "run", "--detach", bundle_flag, pid_flag, spec->id, NULL };
                r = runsc_run(spec->run_dir, "run", spec->network, args, RT_GV_RUN_TIMEOUT_MS);
        }
        if (r < 0)
                goto fail_quiet;
        if ((r = open_sandbox_pid(pid_file, &sb->pid, &sb->pidfd)) < 0) {
                what = "read the sandbox pid";
                goto fail;
        }
        /* runsc made the group; we only read it (usage, oom kills). */
        if (rt_cgroup_open(NULL, spec->id, &sb->cg) < 0)
                sb->cg = NULL;
        if ((r = relay_start(sb)) < 0) {
                what = "start the relay to space-init";
                goto fail;
        }
        *ret = sb;
        return 0;
fail:
        runtime_set_error("gvisor: %s: %s", what, strerror(-r));
fail_quiet: {
        char msg[512];
        keep_log(sb, spec->restore_dir ? "restore failed" : "create failed");
        if (sb->kept_log[0])
                snprintf(msg, sizeof msg, "%.300s (runsc's log: %.180s)", runtime_last_error(), sb->kept_log);
        else
                snprintf(msg, sizeof msg, "%s", runtime_last_error());
        (void)teardown(spec->id, spec->run_dir, sb);
        runtime_set_error("%s", msg);
}
        sandbox_free(sb);
        return r;
}

static int gv_destroy(struct rt_sandbox *sb) {
        if (!sb)
                return 0;
        int r = teardown(sb->id, sb->run_dir, sb);
        sandbox_free(sb);
        return r;
}

static void gv_release(struct rt_sandbox *sb) {
        /* The relay ends by itself when our end closes; the sandbox runs on. */
        sandbox_free(sb);
}

/* True if pid is runsc's sandbox process for container id: its command line names the
 * id as an argument ("runsc-sandbox ... boot ... <id>"). */
static bool is_sandbox_of(pid_t pid, const char *id) {
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return false;
        buf[n] = 0;
        if (!strstr(buf, "runsc"))
                return false;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
                if (strcmp(buf + i, id) == 0)
                        return true;
        return false;
}

static int gv_adopt(const struct rt_spec *spec, pid_t init_pid, struct rt_sandbox **ret) {
        runtime_set_error("%s", "");
        if (!spec || !rt_id_valid(spec->id) || !path_valid(spec->run_dir) || init_pid <= 1) {
                runtime_set_error("gvisor: adopt: invalid spec or pid");
                return -EINVAL;
        }
        int r = ensure_host();
        if (r < 0)
                return r;
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, init_pid, 0);
        if (pidfd < 0) {
                runtime_set_error("gvisor: adopt %s: pid %d: %s", spec->id, (int)init_pid, strerror(errno));
                return errno == EINVAL ? -ESRCH : -errno;
        }
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (!is_sandbox_of(init_pid, spec->id) || poll(&p, 1, 0) != 0) {
                runtime_set_error("gvisor: adopt %s: pid %d is not that sandbox", spec->id, (int)init_pid);
                return -ESRCH;
        }
        struct rt_sandbox *sb = sandbox_new(spec->id, spec->run_dir);
        if (!sb)
                return -ENOMEM;
        sb->pid = init_pid;
        sb->mounted = true;
        sb->network = spec->network;
        sb->pidfd = TAKE_FD(pidfd);
        if (rt_cgroup_open(NULL, spec->id, &sb->cg) < 0)
                sb->cg = NULL;
        r = relay_start(sb);
        if (r < 0) {
                runtime_set_error("gvisor: adopt %s: relay: %s", spec->id, strerror(-r));
                sandbox_free(sb);
                return r;
        }
        *ret = sb;
        return 0;
}

static int gv_init_fd(struct rt_sandbox *sb) {
        return sb->sock;
}

static int gv_pid_fd(struct rt_sandbox *sb) {
        return sb->pidfd;
}

static pid_t gv_init_pid(struct rt_sandbox *sb) {
        return sb->pid;
}

/* runsc pause/resume stop the sandbox's tasks inside the sentry (a cgroup freezer would
 * stop the sentry itself in the middle of whatever it was doing). */
static int gv_freeze(struct rt_sandbox *sb) {
        const char *args[] = { "pause", sb->id, NULL };
        return runsc_run(sb->run_dir, "pause", sb->network, args, RT_GV_CMD_TIMEOUT_MS);
}

static int gv_thaw(struct rt_sandbox *sb) {
        if (sb->stopped)
                return 0;
        const char *args[] = { "resume", sb->id, NULL };
        int r = runsc_run(sb->run_dir, "resume", sb->network, args, RT_GV_CMD_TIMEOUT_MS);
        /* Resuming one that is not paused is what thaw means: nothing to do. */
        if (r == -EIO && (strstr(runtime_last_error(), "not paused") || strstr(runtime_last_error(), "in state running")))
                return 0;
        return r;
}

static int gv_health(struct rt_sandbox *sb, struct rt_health *ret) {
        if (!sb->reaped && fd_readable(sb->pidfd)) {
                sb->reaped = true;
                sb->status = SIGKILL; /* not our child: how it ended is unknown */
                if (!sb->stopped)
                        keep_log(sb, "its sandbox process ended on its own");
        }
        struct rt_health h = { .alive = !sb->reaped, .init_status = sb->status };
        if (sb->reaped && !sb->stopped) {
                h.status_unknown = true;
                char tail[200] = "";
                if (sb->kept_log[0])
                        log_tail_of(sb->kept_log, tail, sizeof tail);
                snprintf(h.detail, sizeof h.detail, "runsc's sandbox process %d ended, how is unknown (not our child)%s%.120s%s%.100s",
                         (int)sb->pid, sb->kept_log[0] ? "; its log: " : "; runsc's log is empty", sb->kept_log,
                         tail[0] ? ": " : "", tail);
        }
        if (sb->cg) {
                uint64_t oom = 0;
                (void)rt_cgroup_oom_kills(sb->cg, &oom);
                h.oom_killed = oom > 0;
                (void)rt_cgroup_memory_current(sb->cg, &h.memory_bytes);
                (void)rt_cgroup_pids_current(sb->cg, &h.pids);
                (void)rt_cgroup_cpu_usage_ns(sb->cg, &h.cpu_ns);
                (void)rt_cgroup_memory_limit(sb->cg, &h.memory_limit_bytes);
        }
        *ret = h;
        return 0;
}

static int gv_checkpoint(struct rt_sandbox *sb, const char *dir, bool leave_running) {
        runtime_set_error("%s", "");
        if (!path_valid(dir) || sb->stopped)
                return -EINVAL;
        if (leave_running) {
                /* runsc 2022-12-19: `checkpoint --leave-running` hung here (and once left a
                 * container that could not exec): refused rather than risked. */
                runtime_set_error("gvisor: checkpoint with leave_running is not supported (unreliable in this runsc)");
                return -EOPNOTSUPP;
        }
        /* The relay holds host fds inside the sandbox, which a checkpoint cannot save. */
        relay_stop(sb);
        char image_flag[RT_GV_MAX_PATH + 32];
        snprintf(image_flag, sizeof image_flag, "--image-path=%s", dir);
        const char *args[] = { "checkpoint", image_flag, sb->id, NULL };
        int r = runsc_run(sb->run_dir, "checkpoint", sb->network, args, RT_GV_RUN_TIMEOUT_MS);
        /* Stored decompressed: what did not change between two checkpoints dedups. */
        if (r == 0 && (r = gv_image_split(dir)) < 0)
                runtime_set_error("gvisor: checkpoint: unpacking the state file: %s", strerror(-r));
        if (r == 0) {
                char path[RT_GV_MAX_PATH + 32];
                snprintf(path, sizeof path, "%s/" RT_GV_IMAGE_MARK, dir);
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (fd < 0 || write(fd, RT_GV_IMAGE_VERSION, strlen(RT_GV_IMAGE_VERSION)) < 0) {
                        r = -errno;
                        runtime_set_error("gvisor: checkpoint: writing %s: %s", path, strerror(-r));
                }
        }
        if (r == 0 && sb->network) {
                char path[RT_GV_MAX_PATH + 32];
                snprintf(path, sizeof path, "%s/" RT_GV_IMAGE_NET_MARK, dir);
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (fd < 0) {
                        r = -errno;
                        runtime_set_error("gvisor: checkpoint: writing %s: %s", path, strerror(-r));
                }
        }
        /* runsc stops the container after a checkpoint, whether it worked or not. */
        sb->stopped = true;
        return r;
}

static int gv_reclaim(const char *id, const char *run_dir) {
        if (!rt_id_valid(id) || !path_valid(run_dir))
                return -EINVAL;
        /* No bundle: runsc never ran for it (or teardown finished); at most a mount. */
        char p[RT_GV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/bundle", run_dir);
        if (access(p, F_OK) < 0) {
                snprintf(p, sizeof p, "%s/rootfs", run_dir);
                if (umount2(p, MNT_DETACH) == 0)
                        (void)rmdir(p);
                return 0;
        }
        int r = ensure_host();
        if (r < 0)
                return r;
        return teardown(id, run_dir, NULL);
}

const struct runtime_ops rt_gvisor_ops = {
        .name = "gvisor",
        .memory_snapshots = true,
        /* netns_fd stays NULL: with a network, a server inside listens in gVisor's own
         * netstack (reachable only through eth0's address from the veth's host end), not
         * on a socket of the prepared netns; without one, only on the sentry's loopback. */
        .network = true,
        .host_init = gv_host_init,
        .create = gv_create,
        .adopt = gv_adopt,
        .init_fd = gv_init_fd,
        .pid_fd = gv_pid_fd,
        .init_pid = gv_init_pid,
        .freeze = gv_freeze,
        .thaw = gv_thaw,
        .health = gv_health,
        .release = gv_release,
        .checkpoint = gv_checkpoint,
        .destroy = gv_destroy,
        .reclaim = gv_reclaim,
};
