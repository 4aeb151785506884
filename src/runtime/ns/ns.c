/* The `ns` runtime driver: a sandbox is a process tree in new user, pid, mount, net, ipc,
 * uts and cgroup namespaces, on an overlayfs root, in its own cgroup(s), with a reduced
 * capability set, no_new_privs and a seccomp filter. See docs/runtime-ns.md.
 * Everything privileged happens in create (parent side) and ns_child (between clone and
 * exec); the rest only reads cgroup files and signals. */
#include "runtime/runtime.h"

#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <linux/openat2.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/nsfs.h>
#include <linux/securebits.h>
#include "common/macros.h"
#include "runtime/cgroup.h"
#include "runtime/fsutil.h"
#include "runtime/mount.h"
#include "runtime/quota.h"
#include "runtime/seccomp.h"

/* Driver defaults when rt_limits leaves a field 0, and the bounds of what a caller may ask. */
#define RT_NS_DEFAULT_MEMORY (512ull << 20)
#define RT_NS_DEFAULT_PIDS 512u
#define RT_NS_DEFAULT_NOFILE 4096u
#define RT_NS_MIN_MEMORY (8ull << 20)
#define RT_NS_MAX_PIDS (1u << 22)
#define RT_NS_MAX_NOFILE (1u << 20)
#define RT_NS_MAX_ID RT_MAX_ID
#define RT_NS_MAX_PATH 4000
#define RT_NS_SETUP_TIMEOUT_MS 10000
#define RT_NS_KILL_TIMEOUT_MS 10000
#define RT_NS_INIT_FD 3           /* space-init finds its socket here (SPACE_INIT_FD) */
#define RT_NS_LISTEN_FD 4         /* and its listening socket here (SPACE_INIT_LISTEN_FD) */
#define RT_NS_SOCK_NAME "init.sock" /* in run_dir: where a restarted daemon reconnects */
#define RT_NS_CHILD_FD_BASE 10    /* child moves the fds it needs above 0..3 first */
/* The owner of each sandbox's user namespace (docs/security.md "Per-user kernel limits"):
 * a host uid of its own, from this range, that no host user may have. The kernel charges
 * what the sandbox holds of per-user limits kept by user namespace (inotify instances and
 * watches, user namespaces, mqueue bytes, ...) to that owner in the parent namespace,
 * instead of to root (the daemon) as before, which host root and every sandbox shared.
 * Above systemd's container range (524288..1879048191), below its foreign range. */
#define RT_NS_OWNER_BASE 1879048192u  /* 0x70000000 */
#define RT_NS_OWNER_COUNT 65536u

/* rt_limits with the driver's defaults filled in: what a sandbox really gets. */
struct ns_limits {
        uint64_t mem;
        uint32_t cpu_millis, pids, nofile;
};

struct rt_sandbox {
        char *id;
        char *rootfs;          /* run_dir/rootfs: the overlay, mounted on the host */
        char *sock_path;       /* run_dir/init.sock */
        bool mounted;
        struct rt_cgroup *cg;
        int sock;              /* our end of the space-init socket */
        int pidfd;
        pid_t pid;
        bool adopted;          /* not our child (adopt after a daemon restart): no waitid */
        uid_t owner;           /* its user namespace's owner; 0: none taken from the range */
        bool reaped;
        int status;            /* wait status once reaped */
        struct ns_limits lim;  /* as applied (create, set_limits); unknown when adopted */
        int netns;             /* /proc/<init>/ns/net: how spaced reaches its ports (ingress) */
};

/* Everything the child needs, prepared before clone: the child must not allocate (the
 * parent may be multi-threaded and another thread may hold the malloc lock). */
struct child_args {
        const char *rootfs;
        const char *hostname;
        struct rt_mount_cfg mcfg;
        int sync_fd, sock_fd, exe_fd; /* sync: "go" in, error record out */
        int listen_fd;                /* run_dir/init.sock, for reconnects */
        int parent_sync_fd;           /* the parent's end: closed at once, or a dead parent
                                       * would never give us EOF */
        int rootfs_fd;                /* O_PATH of rootfs: the child's euid (the namespace's
                                       * owner) may not walk the host's path to it */
        rlim_t nofile;
        bool joined_netns;            /* a prepared netns: lo is up already */
        const struct rt_seccomp_prog *seccomp;
        char *const *argv;
        char *const *envp;
};

struct child_err {
        int err;
        char step[60];
};

/* Capabilities root keeps inside its namespace: what a package manager and ordinary
 * admin work need (own files, switch users, bind low ports, chroot). Everything else,
 * CAP_SYS_ADMIN (mount, new namespaces), CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE
 * (ptrace of own children needs none), CAP_MKNOD, ..., is dropped from the bounding set. */
static const int keep_caps[] = {
        CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID, CAP_KILL,
        CAP_SETGID, CAP_SETUID, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT,
        CAP_AUDIT_WRITE, CAP_SETFCAP,
};

/* ---------------- host-level state ---------------- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static int host_err;
static const char *host_err_step;
static struct rt_seccomp_prog seccomp_prog;

static void host_setup(void) {
        int r = rt_cgroup_host_init(NULL);
        if (r < 0) {
                host_err = r;
                host_err_step = "cgroup host init";
                return;
        }
        r = rt_seccomp_build(RT_SECCOMP_ALLOWLIST, &seccomp_prog);
        if (r < 0) {
                host_err = r;
                host_err_step = "build seccomp filter";
        }
}

static int ensure_host(void) {
        pthread_once(&host_once, host_setup);
        if (host_err < 0)
                runtime_set_error("ns: %s: %s", host_err_step, strerror(-host_err));
        return host_err;
}

/* space-init runs from a sealed memfd, not from its host file: /proc/1/exe and
 * /proc/1/maps inside then name "/memfd:space-init (deleted)", never the host path of the
 * binary (docs/security.md). One copy serves every sandbox of this process, made again
 * when the file on the host changes (an upgrade). */
static pthread_mutex_t init_exe_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
        int fd; /* read-only, sealed */
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
} init_exe = { .fd = -EBADF };

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010u
#endif

static int init_memfd_copy(int src, off_t size) {
        /* MFD_EXEC: a vm.memfd_noexec=1 host makes memfds non-executable by default;
         * kernels before 6.3 do not know the flag (EINVAL) and make them executable. */
        _cleanup_close_ int m = memfd_create("space-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
        if (m < 0 && errno == EINVAL)
                m = memfd_create("space-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (m < 0)
                return -errno;
        off_t off = 0;
        while (off < size) {
                ssize_t n = sendfile(m, src, &off, (size_t)(size - off));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EIO; /* the file shrank under us */
        }
        if (fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return -errno;
        /* keep a read-only descriptor: nothing can write to the copy, even through us */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", m);
        int ro = open(proc, O_RDONLY | O_CLOEXEC);
        return ro < 0 ? -errno : ro;
}

/* A new descriptor of the sealed copy of the init binary at path. */
static int init_exe_open(const char *path) {
        _cleanup_close_ int src = open(path, O_RDONLY | O_CLOEXEC);
        if (src < 0)
                return -errno;
        struct stat st;
        if (fstat(src, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -ENOEXEC;
        pthread_mutex_lock(&init_exe_mu);
        int r = 0;
        if (init_exe.fd < 0 || init_exe.dev != st.st_dev || init_exe.ino != st.st_ino || init_exe.size != st.st_size ||
            init_exe.mtime.tv_sec != st.st_mtim.tv_sec || init_exe.mtime.tv_nsec != st.st_mtim.tv_nsec) {
                r = init_memfd_copy(src, st.st_size);
                if (r >= 0) {
                        safe_close(init_exe.fd);
                        init_exe.fd = r;
                        init_exe.dev = st.st_dev;
                        init_exe.ino = st.st_ino;
                        init_exe.size = st.st_size;
                        init_exe.mtime = st.st_mtim;
                }
        }
        int fd = r;
        if (r >= 0 && (fd = fcntl(init_exe.fd, F_DUPFD_CLOEXEC, 0)) < 0)
                fd = -errno;
        pthread_mutex_unlock(&init_exe_mu);
        return fd;
}

static int ns_host_init(const char *data_dir) {
        return ensure_host();
}

/* ---------------- user namespace owners ---------------- */

static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t owner_used[RT_NS_OWNER_COUNT / 8];

static bool owner_in_range(uid_t u) { return u >= RT_NS_OWNER_BASE && u - RT_NS_OWNER_BASE < RT_NS_OWNER_COUNT; }

/* Marks u taken (adopt: the owner a live sandbox has). */
static void owner_mark(uid_t u) {
        if (!owner_in_range(u))
                return;
        pthread_mutex_lock(&owner_lock);
        owner_used[(u - RT_NS_OWNER_BASE) / 8] |= (uint8_t)(1u << ((u - RT_NS_OWNER_BASE) % 8));
        pthread_mutex_unlock(&owner_lock);
}

/* A free owner, starting at a place the id picks. -EUSERS when every one is taken. */
static int owner_alloc(const char *id, uid_t *ret) {
        uint32_t h = 2166136261u;
        for (const char *c = id; *c; c++)
                h = (h ^ (uint8_t)*c) * 16777619u;
        int r = -EUSERS;
        pthread_mutex_lock(&owner_lock);
        for (uint32_t i = 0; i < RT_NS_OWNER_COUNT; i++) {
                uint32_t k = (h + i) % RT_NS_OWNER_COUNT;
                if (!(owner_used[k / 8] & (1u << (k % 8)))) {
                        owner_used[k / 8] |= (uint8_t)(1u << (k % 8));
                        *ret = RT_NS_OWNER_BASE + k;
                        r = 0;
                        break;
                }
        }
        pthread_mutex_unlock(&owner_lock);
        return r;
}

static void owner_free(uid_t u) {
        if (!owner_in_range(u))
                return;
        pthread_mutex_lock(&owner_lock);
        owner_used[(u - RT_NS_OWNER_BASE) / 8] &= (uint8_t)~(1u << ((u - RT_NS_OWNER_BASE) % 8));
        pthread_mutex_unlock(&owner_lock);
}

/* The owner of pid's user namespace, as the host sees it. */
static int owner_of(pid_t pid, uid_t *ret) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        uid_t u;
        if (ioctl(fd, NS_GET_OWNER_UID, &u) < 0)
                return -errno;
        *ret = u;
        return 0;
}

/* This thread's euid becomes owner, capabilities kept (SECBIT_NO_SETUID_FIXUP): what it
 * then does is done as the owner of a sandbox's user namespace, which holds every
 * capability there even where the daemon lacks one on the host (a host without
 * CAP_SYS_RESOURCE still lowers a sandbox's rlimits). Raw syscalls: they change this
 * thread's credentials only, not the daemon's other threads' (glibc's setresuid would
 * change them all). *saved: the securebits to put back with owner_leave. */
static int owner_enter(uid_t owner, int *saved) {
        int sb = prctl(PR_GET_SECUREBITS);
        if (sb < 0)
                return -errno;
        if (prctl(PR_SET_SECUREBITS, (unsigned long)sb | SECBIT_NO_SETUID_FIXUP) < 0)
                return -errno;
        if (syscall(SYS_setresuid, (uid_t)-1, owner, (uid_t)-1) < 0) {
                int r = -errno;
                (void)prctl(PR_SET_SECUREBITS, (unsigned long)sb);
                return r;
        }
        *saved = sb;
        return 0;
}

static void owner_leave(int saved) {
        /* a daemon thread left with another euid must not go on */
        if (syscall(SYS_setresuid, (uid_t)-1, (uid_t)0, (uid_t)-1) < 0 ||
            prctl(PR_SET_SECUREBITS, (unsigned long)saved) < 0)
                abort();
}

/* clone3 as the new user namespace's owner (its owner is the creator's euid). The child
 * clears the securebit itself. */
static long clone_as_owner(struct clone_args *cl, uid_t owner) {
        int saved, r = owner_enter(owner, &saved);
        if (r < 0)
                return r;
        long pid = syscall(SYS_clone3, cl, sizeof *cl);
        if (pid < 0)
                pid = -errno;
        if (pid != 0)
                owner_leave(saved);
        return pid;
}

/* ---------------- child side ---------------- */

_noreturn_ static void child_fail(const struct child_args *a, const char *step, int err) {
        struct child_err e = { .err = err > 0 ? err : EIO };
        strncpy(e.step, step, sizeof e.step - 1);
        ssize_t w _unused_ = send(a->sync_fd, &e, sizeof e, MSG_NOSIGNAL);
        _exit(127);
}

static int move_high(int fd) {
        return fcntl(fd, F_DUPFD_CLOEXEC, RT_NS_CHILD_FD_BASE);
}

static int loopback_up(void) {
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -errno;
        struct ifreq ifr = { 0 };
        strcpy(ifr.ifr_name, "lo");
        int r = 0;
        if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                r = -errno;
        else {
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                        r = -errno;
        }
        close(s);
        return r;
}

/* The parent side, before the clone: host_file bind-mounted read-only over the rootfs's
 * /etc/resolv.conf (the child's mount namespace copies it with the rootfs). The target is
 * resolved inside the rootfs (a symlink a sandbox left there cannot point at the host's
 * files) and made, empty, when missing; no /etc: nothing to do. */
static int resolv_bind(const char *rootfs, const char *host_file) {
        _cleanup_close_ int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return -errno;
        struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int etc = (int)syscall(SYS_openat2, root, "etc", &how, sizeof how);
        if (etc < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        how = (struct open_how){ .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int target = (int)syscall(SYS_openat2, root, "etc/resolv.conf", &how, sizeof how);
        if (target < 0 && errno == ENOENT) {
                how = (struct open_how){ .flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, .mode = 0644,
                                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
                _cleanup_close_ int made = (int)syscall(SYS_openat2, etc, "resolv.conf", &how, sizeof how);
                if (made < 0)
                        return -errno;
                if (fchown(made, RT_ID_BASE, RT_ID_BASE) < 0)
                        return -errno;
                how = (struct open_how){ .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
                target = (int)syscall(SYS_openat2, etc, "resolv.conf", &how, sizeof how);
        }
        if (target < 0)
                return -errno;
        struct stat st;
        if (fstat(target, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return 0; /* a directory or device there: the sandbox's own business */
        _cleanup_close_ int tree = (int)syscall(SYS_open_tree, AT_FDCWD, host_file, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0)
                return -errno;
        struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC };
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
                return -errno;
        if (syscall(SYS_move_mount, tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return -errno;
        return 0;
}

static int drop_caps(void) {
        uint64_t keep = 0;
        for (size_t i = 0; i < ELEMENTSOF(keep_caps); i++)
                keep |= 1ull << keep_caps[i];
        for (int c = 0; c <= 63; c++) {
                if (keep & (1ull << c))
                        continue;
                if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
                        if (errno == EINVAL) /* past the kernel's last capability */
                                break;
                        return -errno;
                }
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
                return -errno;
        /* Inheritable cleared so nothing survives exec outside the bounding set rules. */
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
        struct __user_cap_data_struct d[2] = {
                { .effective = (uint32_t)keep, .permitted = (uint32_t)keep, .inheritable = 0 },
                { .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32), .inheritable = 0 },
        };
        if (syscall(SYS_capset, &h, d) < 0)
                return -errno;
        return 0;
}

_noreturn_ static void ns_child(const struct child_args *in) {
        struct child_args a = *in;
        const char *step = "start";
        int r;

        /* The daemon may ignore or block signals (SIGPIPE, signalfd); init must start
         * with a clean slate, and both survive exec. */
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (int s = 1; s < NSIG; s++)
                if (s != SIGKILL && s != SIGSTOP)
                        signal(s, SIG_DFL);
        umask(022);

        close(a.parent_sync_fd);
        /* Out of the way of 0..3, which get the socket and /dev/null at the end. */
        if ((a.sync_fd = move_high(a.sync_fd)) < 0)
                _exit(126);
        if ((a.sock_fd = move_high(a.sock_fd)) < 0 || (a.listen_fd = move_high(a.listen_fd)) < 0 ||
            (a.exe_fd = move_high(a.exe_fd)) < 0 || (a.rootfs_fd = move_high(a.rootfs_fd)) < 0)
                child_fail(&a, "move fds", errno);

        /* Wait until the parent wrote our id maps and put us into the cgroups. EOF: the
         * parent gave up (or died); leave without a word. */
        char go;
        do
                r = (int)read(a.sync_fd, &go, 1);
        while (r < 0 && errno == EINTR);
        if (r != 1)
                _exit(1);
        /* Its own session: a signal to the daemon's process group or terminal (Ctrl-C)
         * must not reach the sandbox, which outlives the daemon. */
        if (setsid() < 0)
                child_fail(&a, "setsid", errno);

        /* Capabilities follow uid changes again (the parent kept them over its euid
         * change for the clone). */
        if (prctl(PR_SET_SECUREBITS, 0UL) < 0)
                child_fail(&a, "clear securebits", errno);
        /* The euid here is the namespace's owner, no uid the host's directories let in:
         * the rootfs is reached through the parent's O_PATH fd of it, as the cwd, before
         * the mount namespace is made (which carries the cwd over). A clone of it put on
         * top makes the root a mount of this namespace (the copied overlay mount is
         * locked; pivot_root refuses locked mounts). */
        if (fchdir(a.rootfs_fd) < 0)
                child_fail(&a, "chdir rootfs", errno);
        close(a.rootfs_fd);
        if (unshare(CLONE_NEWNS) < 0)
                child_fail(&a, "unshare mount namespace", errno);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                child_fail(&a, "make mounts private", errno);
        int tree = (int)syscall(SYS_open_tree, AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
        if (tree < 0)
                child_fail(&a, "clone rootfs mount", errno);
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, ".", MOVE_MOUNT_F_EMPTY_PATH) < 0)
                child_fail(&a, "bind rootfs", errno);
        if (fchdir(tree) < 0)
                child_fail(&a, "chdir rootfs", errno);
        close(tree);

        if ((r = rt_child_setids(0, 0)) < 0)
                child_fail(&a, "set ids", -r);
        /* After the parent moved us into our cgroup: that group becomes our cgroup root. */
        if (unshare(CLONE_NEWCGROUP) < 0)
                child_fail(&a, "unshare cgroup namespace", errno);

        r = rt_mount_setup_root(&a.mcfg, &step);
        if (r < 0)
                child_fail(&a, step, -r);
        r = rt_mount_pivot(&step);
        if (r < 0)
                child_fail(&a, step, -r);

        if (sethostname(a.hostname, strlen(a.hostname)) < 0)
                child_fail(&a, "sethostname", errno);
        r = a.joined_netns ? 0 : loopback_up();
        if (r < 0)
                child_fail(&a, "bring up lo", -r);
        struct rlimit rl = { a.nofile, a.nofile };
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                child_fail(&a, "setrlimit NOFILE", errno);
        /* No core files: a crashing process would write its memory into the session's
         * writable layer (and the daemon's core_pattern may even pipe it to a host
         * helper). The hard limit 0 cannot be raised without CAP_SYS_RESOURCE. No
         * RLIMIT_NPROC: the pids cgroup bounds the sandbox's tasks (see runtime-ns.md). */
        struct rlimit no_core = { 0, 0 };
        if (setrlimit(RLIMIT_CORE, &no_core) < 0)
                child_fail(&a, "setrlimit CORE", errno);

        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                child_fail(&a, "open /dev/null", errno);
        if (dup3(a.sock_fd, RT_NS_INIT_FD, 0) < 0)
                child_fail(&a, "dup init socket", errno);
        if (dup3(a.listen_fd, RT_NS_LISTEN_FD, 0) < 0)
                child_fail(&a, "dup listening socket", errno);
        for (int fd = 0; fd <= 2; fd++)
                if (dup3(null_fd, fd, 0) < 0)
                        child_fail(&a, "dup stdio", errno);
        /* Whatever else the daemon had open (its other threads do not all use CLOEXEC)
         * disappears at exec; the sync socket stays usable until then. */
        if (close_range(RT_NS_LISTEN_FD + 1, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
                child_fail(&a, "close_range", errno);

        r = drop_caps();
        if (r < 0)
                child_fail(&a, "drop capabilities", -r);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                child_fail(&a, "no_new_privs", errno);
        r = rt_seccomp_load(a.seccomp);
        if (r < 0)
                child_fail(&a, "load seccomp filter", -r);

        syscall(SYS_execveat, a.exe_fd, "", a.argv, a.envp, AT_EMPTY_PATH);
        child_fail(&a, "execveat space-init", errno);
}

/* ---------------- parent side ---------------- */

static bool path_valid(const char *p) {
        return p && p[0] == '/' && strlen(p) < RT_NS_MAX_PATH;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The first line of /proc/PID/FILE, without its newline. */
static int proc_read(pid_t pid, const char *file, char *out, size_t size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, out, size - 1);
        if (n < 0)
                return -errno;
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0';
        return 0;
}

static int write_id_map(pid_t pid, const char *file) {
        char path[64], map[64];
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
        snprintf(map, sizeof map, "0 %u %u\n", RT_ID_BASE, RT_ID_COUNT);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, map, strlen(map));
        if (n < 0)
                return -errno;
        return (size_t)n == strlen(map) ? 0 : -EIO;
}

/* Reaps space-init if it has exited. Our child has no exit signal (exit_signal 0), so a
 * daemon's generic waitpid(-1) reaper never steals it; __WALL is needed to see it. */
static int reap(struct rt_sandbox *sb, bool block) {
        if (sb->reaped || sb->pidfd < 0)
                return 0;
        if (sb->adopted) {
                /* Not our child: whoever inherited it reaps it; the pidfd still says when
                 * it ended, but not how. */
                struct pollfd p = { .fd = sb->pidfd, .events = POLLIN };
                int pr;
                do
                        pr = poll(&p, 1, block ? -1 : 0);
                while (pr < 0 && errno == EINTR);
                if (pr < 0)
                        return -errno;
                if (pr > 0) {
                        sb->reaped = true;
                        sb->status = SIGKILL; /* unknown; reported as killed */
                }
                return 0;
        }
        int r = rt_pidfd_wait(sb->pidfd, block, &sb->status);
        if (r > 0)
                sb->reaped = true;
        return r < 0 ? r : 0;
}

static int kill_and_reap(struct rt_sandbox *sb) {
        if (sb->pidfd < 0 || sb->reaped)
                return 0;
        /* SIGKILL of a pid namespace's init kills everything in the namespace. */
        if (syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
                return -errno;
        struct pollfd p = { .fd = sb->pidfd, .events = POLLIN };
        int r;
        do
                r = poll(&p, 1, RT_NS_KILL_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return -ETIMEDOUT;
        return reap(sb, true);
}

/* Undoes whatever create got to; also the body of destroy. Returns the first error. */
static int teardown(struct rt_sandbox *sb) {
        int ret = 0, r;
        if (sb->cg) {
                /* A frozen task never dies: thaw first (harmless when not frozen). */
                r = rt_cgroup_freeze(sb->cg, false);
                if (r < 0 && r != -ENOENT && ret == 0)
                        ret = r;
        }
        r = kill_and_reap(sb);
        if (r < 0 && ret == 0)
                ret = r;
        if (sb->cg) {
                r = rt_cgroup_kill_all(sb->cg);
                if (r < 0 && ret == 0)
                        ret = r;
                r = rt_cgroup_remove(sb->cg);
                if (r < 0 && ret == 0)
                        ret = r;
                sb->cg = rt_cgroup_free(sb->cg);
        }
        if (sb->mounted) {
                if (umount2(sb->rootfs, MNT_DETACH) < 0 && errno != EINVAL && ret == 0)
                        ret = -errno;
                sb->mounted = false;
        }
        if (sb->rootfs)
                rmdir(sb->rootfs);
        if (sb->sock_path)
                (void)unlink(sb->sock_path);
        sb->sock = safe_close(sb->sock);
        sb->pidfd = safe_close(sb->pidfd);
        if (ret == 0) { /* its processes are gone with their namespace */
                owner_free(sb->owner);
                sb->owner = 0;
        }
        if (ret < 0)
                runtime_set_error("ns: teardown of %s: %s", sb->id ? sb->id : "?", strerror(-ret));
        return ret;
}

/* The network namespace of init (pid): taken right after clone, while the pid is surely
 * ours, and kept for the sandbox's life. */
static int netns_open(pid_t pid, int *ret) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        *ret = fd;
        return 0;
}

static void sandbox_free(struct rt_sandbox *sb) {
        if (!sb)
                return;
        free(sb->id);
        free(sb->rootfs);
        free(sb->sock_path);
        safe_close(sb->netns);
        free(sb);
}

static int ns_destroy(struct rt_sandbox *sb) {
        if (!sb)
                return 0;
        int r = teardown(sb);
        sandbox_free(sb);
        return r;
}

/* A sockaddr for run_dir/init.sock. sun_path holds 107 bytes; a longer run_dir is
 * reached through an O_PATH fd of it (*dirfd, closed by the caller). */
static int sock_addr(const char *run_dir, struct sockaddr_un *sa, int *dirfd) {
        *sa = (struct sockaddr_un){ .sun_family = AF_UNIX };
        int n = snprintf(sa->sun_path, sizeof sa->sun_path, "%s/" RT_NS_SOCK_NAME, run_dir);
        if (n > 0 && (size_t)n < sizeof sa->sun_path)
                return 0;
        *dirfd = open(run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (*dirfd < 0)
                return -errno;
        snprintf(sa->sun_path, sizeof sa->sun_path, "/proc/self/fd/%d/" RT_NS_SOCK_NAME, *dirfd);
        return 0;
}

/* A unix stream socket and the address of init's socket in run_dir (for bind or connect,
 * while *dirfd is open). */
static int sock_new(const char *run_dir, struct sockaddr_un *sa, int *dirfd) {
        int r = sock_addr(run_dir, sa, dirfd);
        if (r < 0)
                return r;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        return fd < 0 ? -errno : fd;
}

/* The listening socket space-init keeps for reconnects. Bound on the host, in run_dir,
 * which is not mounted inside the sandbox: only the daemon (root) can reach it. */
static int listen_socket(const char *run_dir) {
        struct sockaddr_un sa;
        _cleanup_close_ int dirfd = -EBADF;
        _cleanup_close_ int fd = sock_new(run_dir, &sa, &dirfd);
        if (fd < 0)
                return fd;
        (void)unlink(sa.sun_path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(sa.sun_path, 0600) < 0 || listen(fd, 8) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* Connects to space-init's listening socket in run_dir. */
static int connect_init(const char *run_dir) {
        struct sockaddr_un sa;
        _cleanup_close_ int dirfd = -EBADF;
        _cleanup_close_ int fd = sock_new(run_dir, &sa, &dirfd);
        if (fd < 0)
                return fd;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                return -errno;
        return TAKE_FD(fd);
}

static void ns_release(struct rt_sandbox *sb) {
        if (!sb)
                return;
        sb->cg = rt_cgroup_free(sb->cg);
        sb->sock = safe_close(sb->sock);
        sb->pidfd = safe_close(sb->pidfd);
        sandbox_free(sb);
}

static int limits_resolve(const struct rt_limits *l, struct ns_limits *ret) {
        struct ns_limits v = {
                .mem = l->memory_bytes ? l->memory_bytes : RT_NS_DEFAULT_MEMORY,
                .cpu_millis = l->cpu_millis,
                .pids = l->pids ? l->pids : RT_NS_DEFAULT_PIDS,
                .nofile = l->nofile ? l->nofile : RT_NS_DEFAULT_NOFILE,
        };
        if (v.mem < RT_NS_MIN_MEMORY || v.pids > RT_NS_MAX_PIDS || v.nofile > RT_NS_MAX_NOFILE) {
                runtime_set_error("ns: limits out of range (memory >= %llu bytes, pids <= %u, nofile <= %u)",
                                  (unsigned long long)RT_NS_MIN_MEMORY, RT_NS_MAX_PIDS, RT_NS_MAX_NOFILE);
                return -ERANGE;
        }
        /* Raising the hard limit needs CAP_SYS_RESOURCE on the host: stay under ours. */
        struct rlimit cur;
        if (getrlimit(RLIMIT_NOFILE, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && v.nofile > cur.rlim_max)
                v.nofile = (uint32_t)cur.rlim_max;
        *ret = v;
        return 0;
}

/* The tmpfs sizes follow the memory limit (see create). */
static uint64_t shm_size(uint64_t mem) { return MIN(mem, RT_MOUNT_SHM_SIZE); }

static int ns_create(const struct rt_spec *spec, struct rt_sandbox **ret) {
        runtime_set_error("%s", "");
        if (!spec || !rt_id_valid(spec->id) || !spec->lower_dirs || !path_valid(spec->upper_dir) ||
            !path_valid(spec->work_dir) || !path_valid(spec->run_dir) || !path_valid(spec->init_path)) {
                runtime_set_error("ns: invalid spec (id or a path missing, relative or too long)");
                return -EINVAL;
        }
        if (spec->network && ioctl(spec->netns_fd, NS_GET_NSTYPE) != CLONE_NEWNET) {
                runtime_set_error("ns: invalid spec (netns_fd %d is not a network namespace)", spec->netns_fd);
                return -EINVAL;
        }
        const struct rt_limits *l = &spec->limits;
        struct ns_limits lim;
        int r = limits_resolve(l, &lim);
        if (r < 0)
                return r;
        uint64_t mem = lim.mem;
        uint32_t pids = lim.pids, nofile = lim.nofile;

        r = ensure_host();
        if (r < 0)
                return r;
        /* Before anything runs inside: the limits must hold from the first write. */
        r = rt_quota_apply(spec->upper_dir, spec->work_dir, l->disk_bytes, l->disk_inodes);
        if (r < 0)
                return r;

        struct rt_sandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->sock = sb->pidfd = sb->netns = -EBADF;
        _cleanup_free_ char *opts = NULL;
        _cleanup_close_ int exe_fd = -EBADF;
        /* sync: one byte "go" to the child; an error record back, or EOF once the exec
         * closed the child's close-on-exec end. A socket, not pipes, so that a child
         * that died early gives EPIPE and never SIGPIPE (MSG_NOSIGNAL) to the daemon. */
        int sv[2] = { -EBADF, -EBADF }, sync[2] = { -EBADF, -EBADF };
        _cleanup_close_ int lfd = -EBADF, rootfs_fd = -EBADF, own_net = -EBADF;
        const char *what = NULL;

        sb->id = strdup(spec->id);
        if (!sb->id || asprintf(&sb->rootfs, "%s/rootfs", spec->run_dir) < 0) {
                sb->rootfs = NULL;
                r = -ENOMEM;
                what = "allocate";
                goto fail;
        }
        if (mkdir(sb->rootfs, 0755) < 0 && errno != EEXIST) {
                r = -errno;
                what = "mkdir run_dir/rootfs";
                goto fail;
        }
        r = rt_mount_overlay_opts(spec->lower_dirs, spec->upper_dir, spec->work_dir, &opts);
        if (r < 0) {
                what = "overlay options";
                goto fail;
        }
        r = rt_match_upper_root(spec->lower_dirs, spec->upper_dir);
        if (r < 0) {
                what = "set owner of upper_dir";
                goto fail;
        }
        r = rt_mount_overlay(sb->rootfs, opts);
        if (r < 0) {
                what = "mount overlay rootfs";
                goto fail;
        }
        sb->mounted = true;
        if (spec->resolv_conf && (r = resolv_bind(sb->rootfs, spec->resolv_conf)) < 0) {
                what = "bind /etc/resolv.conf";
                goto fail;
        }

        r = rt_cgroup_create(NULL, spec->id, &sb->cg);
        if (r < 0) {
                what = "create cgroup";
                goto fail;
        }
        if ((r = rt_cgroup_set_memory(sb->cg, mem)) < 0) {
                what = "set memory limit";
                goto fail;
        }
        if ((r = rt_cgroup_set_cpu(sb->cg, l->cpu_millis)) < 0) {
                what = "set cpu limit";
                goto fail;
        }
        if ((r = rt_cgroup_set_pids(sb->cg, pids)) < 0) {
                what = "set pids limit";
                goto fail;
        }

        /* tmpfs pages count against the memory cgroup; the size bound keeps one mount
         * from taking all of it silently. */
        char tmp_opts[96], shm_opts[96], dev_opts[96];
        if ((r = rt_mount_tmpfs_opts(tmp_opts, sizeof tmp_opts, 01777, mem, RT_MOUNT_TMP_INODES)) < 0 ||
            (r = rt_mount_tmpfs_opts(shm_opts, sizeof shm_opts, 01777, shm_size(mem), RT_MOUNT_SHM_INODES)) < 0 ||
            (r = rt_mount_tmpfs_opts(dev_opts, sizeof dev_opts, 0755, RT_MOUNT_DEV_SIZE, RT_MOUNT_DEV_INODES)) < 0) {
                what = "tmpfs options";
                goto fail;
        }

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) < 0) {
                r = -errno;
                what = "socketpair";
                goto fail;
        }
        exe_fd = init_exe_open(spec->init_path);
        if (exe_fd < 0) {
                r = exe_fd;
                what = "copy init binary into a sealed memfd";
                goto fail;
        }
        if (asprintf(&sb->sock_path, "%s/" RT_NS_SOCK_NAME, spec->run_dir) < 0) {
                sb->sock_path = NULL;
                r = -ENOMEM;
                what = "allocate";
                goto fail;
        }
        lfd = listen_socket(spec->run_dir);
        if (lfd < 0) {
                r = lfd;
                what = "listen on run_dir/" RT_NS_SOCK_NAME;
                goto fail;
        }

        char env_id[16 + RT_NS_MAX_ID];
        snprintf(env_id, sizeof env_id, "SPACE_SANDBOX_ID=%s", spec->id);
        char *const argv[] = { (char *)"space-init", NULL };
        char *const envp[] = {
                (char *)"SPACE_INIT_FD=3",
                (char *)"SPACE_INIT_LISTEN_FD=4",
                env_id,
                (char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                (char *)"HOME=/root",
                (char *)"LANG=C.UTF-8",
                NULL,
        };
        rootfs_fd = open(sb->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfs_fd < 0) {
                r = -errno;
                what = "open rootfs";
                goto fail;
        }
        if ((r = owner_alloc(spec->id, &sb->owner)) < 0) {
                what = "take a user namespace owner";
                goto fail;
        }
        struct child_args ca = {
                .rootfs = sb->rootfs,
                .rootfs_fd = rootfs_fd,
                .hostname = spec->id,
                .mcfg = { .tmp_opts = tmp_opts, .shm_opts = shm_opts, .dev_opts = dev_opts },
                .sync_fd = sync[1],
                .parent_sync_fd = sync[0],
                .sock_fd = sv[1],
                .exe_fd = exe_fd,
                .listen_fd = lfd,
                .nofile = nofile,
                .joined_netns = spec->network,
                .seccomp = &seccomp_prog,
                .argv = argv,
                .envp = envp,
        };

        int pidfd = -1;
        struct clone_args cl = {
                /* CLONE_NEWNS: the child's, once it is in the rootfs */
                .flags = CLONE_NEWUSER | CLONE_NEWPID | (spec->network ? 0 : CLONE_NEWNET) | CLONE_NEWIPC |
                         CLONE_NEWUTS | CLONE_PIDFD,
                .pidfd = (uint64_t)(uintptr_t)&pidfd,
                .exit_signal = 0,
        };
        /* A prepared netns: this thread joins it for the clone (the child is made in the
         * creator's netns) and leaves it right after. */
        if (spec->network) {
                own_net = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
                if (own_net < 0 || setns(spec->netns_fd, CLONE_NEWNET) < 0) {
                        r = -errno;
                        what = "join the prepared network namespace";
                        goto fail;
                }
        }
        long pid = clone_as_owner(&cl, sb->owner);
        /* a daemon thread left in a sandbox's netns must not go on */
        if (pid != 0 && spec->network && setns(own_net, CLONE_NEWNET) < 0)
                abort();
        if (pid < 0) {
                r = (int)pid;
                what = "clone3";
                goto fail;
        }
        if (pid == 0)
                ns_child(&ca);

        sb->pid = (pid_t)pid;
        sb->pidfd = pidfd;
        if ((r = netns_open(sb->pid, &sb->netns)) < 0) {
                what = "open its network namespace";
                goto fail;
        }
        sync[1] = safe_close(sync[1]);
        sv[1] = safe_close(sv[1]);
        exe_fd = safe_close(exe_fd);
        lfd = safe_close(lfd);
        rootfs_fd = safe_close(rootfs_fd);

        /* A thread that makes sandboxes in the background (a warm pool) may run at a low
         * priority; the sandbox itself starts at the normal one, as if made on demand.
         * Lowering a nice value needs CAP_SYS_NICE on the host, which the child's new user
         * namespace doesn't give it: the parent does it. */
        errno = 0;
        int nice_now = getpriority(PRIO_PROCESS, 0);
        if ((nice_now != 0 || errno) && setpriority(PRIO_PROCESS, (id_t)sb->pid, 0) < 0) {
                r = -errno;
                what = "reset the priority";
                goto fail;
        }
        if ((r = write_id_map(sb->pid, "uid_map")) < 0 || (r = write_id_map(sb->pid, "gid_map")) < 0) {
                what = "write id maps";
                goto fail;
        }
        if ((r = rt_cgroup_attach(sb->cg, sb->pid)) < 0) {
                what = "attach to cgroup";
                goto fail;
        }
        if (send(sync[0], "g", 1, MSG_NOSIGNAL) != 1) {
                r = -errno;
                what = "signal child";
                goto fail;
        }

        /* EOF = the exec happened. */
        struct child_err ce;
        size_t got = 0;
        int64_t deadline = now_ms() + RT_NS_SETUP_TIMEOUT_MS;
        while (got < sizeof ce) {
                struct pollfd p = { .fd = sync[0], .events = POLLIN };
                int64_t left = deadline - now_ms();
                int pr = left > 0 ? poll(&p, 1, (int)left) : 0;
                if (pr < 0 && errno == EINTR)
                        continue;
                if (pr <= 0) {
                        r = pr < 0 ? -errno : -ETIMEDOUT;
                        /* Where the child is helps: still setting up (wchan), or exec'd
                         * already while another process holds a copy of its sync socket. */
                        char comm[32] = "?", wchan[64] = "?";
                        (void)proc_read(sb->pid, "comm", comm, sizeof comm);
                        (void)proc_read(sb->pid, "wchan", wchan, sizeof wchan);
                        runtime_set_error("ns: wait for sandbox setup: %s (child %s, in %s)", strerror(-r), comm, wchan);
                        what = NULL;
                        goto fail;
                }
                ssize_t n = read(sync[0], (char *)&ce + got, sizeof ce - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        if (got == sizeof ce) {
                ce.step[sizeof ce.step - 1] = 0;
                r = -ce.err;
                runtime_set_error("ns: sandbox setup failed at \"%s\": %s", ce.step, strerror(ce.err));
                what = NULL;
                goto fail;
        }
        /* Killed before exec (e.g. by the OOM killer during setup) reports nothing. */
        r = reap(sb, false);
        if (r == 0 && sb->reaped)
                r = -ECHILD;
        if (r < 0) {
                what = "sandbox init died during setup";
                goto fail;
        }

        safe_close(sync[0]);
        sb->sock = sv[0];
        sb->lim = lim;
        *ret = sb;
        return 0;

fail:
        if (what)
                runtime_set_error("ns: %s: %s", what, strerror(-r));
        {
                /* Keep the message of the first failure, not of the cleanup. */
                char msg[512];
                snprintf(msg, sizeof msg, "%s", runtime_last_error());
                teardown(sb);
                runtime_set_error("%s", msg);
        }
        sandbox_free(sb);
        safe_close(sv[0]);
        safe_close(sv[1]);
        safe_close(sync[0]);
        safe_close(sync[1]);
        return r;
}

/* True if pid's cgroup (as the host sees it) is the sandbox's: ".../space/<id>". A pid
 * reused by an unrelated process is not in that group. */
static bool in_sandbox_cgroup(pid_t pid, const char *id) {
        char path[64], line[512], want[RT_NS_MAX_ID + 16];
        snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
        snprintf(want, sizeof want, "/" RT_CGROUP_PARENT "/%s", id);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t wl = strlen(want);
        while (fgets(line, sizeof line, f)) {
                size_t n = strcspn(line, "\n");
                line[n] = 0;
                if (n >= wl && strcmp(line + n - wl, want) == 0)
                        return true;
        }
        return false;
}

static int ns_adopt(const struct rt_spec *spec, pid_t init_pid, struct rt_sandbox **ret) {
        runtime_set_error("%s", "");
        if (!spec || !rt_id_valid(spec->id) || !path_valid(spec->run_dir) || init_pid <= 1) {
                runtime_set_error("ns: adopt: invalid spec or pid");
                return -EINVAL;
        }
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, init_pid, 0);
        if (pidfd < 0) {
                runtime_set_error("ns: adopt %s: pid %d: %s", spec->id, (int)init_pid, strerror(errno));
                return errno == EINVAL ? -ESRCH : -errno;
        }
        /* Checked after the pidfd was taken: if the pid still names a process in the
         * sandbox's cgroup and the pidfd is not readable (not dead), they are the same. */
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (!in_sandbox_cgroup(init_pid, spec->id) || poll(&p, 1, 0) != 0) {
                runtime_set_error("ns: adopt %s: pid %d is not that sandbox's init", spec->id, (int)init_pid);
                return -ESRCH;
        }
        struct rt_sandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->sock = sb->pidfd = sb->netns = -EBADF;
        sb->adopted = true;
        sb->pid = init_pid;
        int r = -ENOMEM;
        sb->id = strdup(spec->id);
        if (!sb->id || asprintf(&sb->rootfs, "%s/rootfs", spec->run_dir) < 0 ||
            asprintf(&sb->sock_path, "%s/" RT_NS_SOCK_NAME, spec->run_dir) < 0) {
                sb->rootfs = sb->sock_path = NULL;
                goto fail;
        }
        r = rt_cgroup_open(NULL, spec->id, &sb->cg);
        if (r < 0) {
                runtime_set_error("ns: adopt %s: cgroup: %s", spec->id, strerror(-r));
                goto fail;
        }
        sb->mounted = true;
        r = connect_init(spec->run_dir);
        if (r < 0) {
                runtime_set_error("ns: adopt %s: connect to %s: %s", spec->id, sb->sock_path, strerror(-r));
                goto fail;
        }
        sb->sock = r;
        r = netns_open(init_pid, &sb->netns);
        if (r < 0) {
                runtime_set_error("ns: adopt %s: open its network namespace: %s", spec->id, strerror(-r));
                goto fail;
        }
        sb->pidfd = TAKE_FD(pidfd);
        /* A sandbox of an older spaced has root as its owner: nothing to take. */
        if (owner_of(init_pid, &sb->owner) < 0 || !owner_in_range(sb->owner))
                sb->owner = 0;
        owner_mark(sb->owner);
        *ret = sb;
        return 0;
fail:
        /* Nothing of the live sandbox is touched: the caller decides (reclaim, retry). */
        sb->cg = rt_cgroup_free(sb->cg);
        sb->sock = safe_close(sb->sock);
        sandbox_free(sb);
        return r;
}

static int ns_reconnect(struct rt_sandbox *sb) {
        size_t n = strlen(sb->sock_path), suffix = strlen("/" RT_NS_SOCK_NAME);
        if (n <= suffix)
                return -EINVAL;
        _cleanup_free_ char *run_dir = strndup(sb->sock_path, n - suffix);
        if (!run_dir)
                return -ENOMEM;
        int fd = connect_init(run_dir);
        if (fd < 0) {
                runtime_set_error("ns: reconnect %s: connect to %s: %s", sb->id, sb->sock_path, strerror(-fd));
                return fd;
        }
        safe_close(sb->sock);
        sb->sock = fd;
        return 0;
}

static int ns_netns_fd(struct rt_sandbox *sb) {
        return sb->netns;
}

static int ns_init_fd(struct rt_sandbox *sb) {
        return sb->sock;
}

static int ns_pid_fd(struct rt_sandbox *sb) {
        return sb->pidfd;
}

static pid_t ns_init_pid(struct rt_sandbox *sb) {
        return sb->pid;
}

static int ns_freeze(struct rt_sandbox *sb) {
        int r = rt_cgroup_freeze(sb->cg, true);
        if (r < 0)
                runtime_set_error("ns: freeze %s: %s", sb->id, strerror(-r));
        return r;
}

static int ns_thaw(struct rt_sandbox *sb) {
        int r = rt_cgroup_freeze(sb->cg, false);
        if (r < 0)
                runtime_set_error("ns: thaw %s: %s", sb->id, strerror(-r));
        return r;
}

static int ns_health(struct rt_sandbox *sb, struct rt_health *ret) {
        int r = reap(sb, false);
        if (r < 0)
                return r;
        struct rt_health h = { .alive = !sb->reaped, .init_status = sb->status };
        r = rt_cgroup_usage(sb->cg, &h.oom_killed, &h.memory_bytes, &h.pids);
        if (r < 0)
                return r;
        (void)rt_cgroup_cpu_usage_ns(sb->cg, &h.cpu_ns); /* for metrics: informative */
        (void)rt_cgroup_memory_limit(sb->cg, &h.memory_limit_bytes);
        *ret = h;
        return 0;
}

/* What create() would have set for l, on a sandbox create() made with other limits and
 * that nothing has used yet: cgroup limits, the sizes of /tmp and /dev/shm, RLIMIT_NOFILE
 * of init. Only what differs is written. Disk limits must be applied before anything
 * runs inside (create), so they are refused here. */
static int ns_set_limits(struct rt_sandbox *sb, const struct rt_limits *l) {
        runtime_set_error("%s", "");
        if (l->disk_bytes || l->disk_inodes) {
                runtime_set_error("ns: disk limits can only be set at create");
                return -EOPNOTSUPP;
        }
        if (sb->adopted || sb->reaped || !sb->cg) {
                runtime_set_error("ns: set_limits on %s: not a live sandbox of this daemon", sb->id);
                return -EINVAL;
        }
        struct ns_limits v;
        int r = limits_resolve(l, &v);
        if (r < 0)
                return r;
        const char *what = NULL;
        if (v.mem != sb->lim.mem) {
                char root[32];
                snprintf(root, sizeof root, "/proc/%d/root", (int)sb->pid);
                _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (rfd < 0) {
                        r = -errno;
                        what = "open /proc/PID/root";
                } else if ((r = rt_cgroup_set_memory(sb->cg, v.mem)) < 0) {
                        what = "set memory limit";
                } else if ((r = rt_mount_tmpfs_resize(rfd, "tmp", v.mem)) < 0) {
                        what = "resize /tmp";
                } else if (shm_size(v.mem) != shm_size(sb->lim.mem) &&
                           (r = rt_mount_tmpfs_resize(rfd, "dev/shm", shm_size(v.mem))) < 0) {
                        what = "resize /dev/shm";
                }
        }
        if (!what && v.cpu_millis != sb->lim.cpu_millis && (r = rt_cgroup_set_cpu(sb->cg, v.cpu_millis)) < 0)
                what = "set cpu limit";
        if (!what && v.pids != sb->lim.pids && (r = rt_cgroup_set_pids(sb->cg, v.pids)) < 0)
                what = "set pids limit";
        if (!what && v.nofile != sb->lim.nofile) {
                struct rlimit rl = { v.nofile, v.nofile };
                int saved, e = sb->owner ? owner_enter(sb->owner, &saved) : 0;
                if (e == 0) {
                        e = prlimit(sb->pid, RLIMIT_NOFILE, &rl, NULL) < 0 ? -errno : 0;
                        if (sb->owner)
                                owner_leave(saved);
                }
                if (e < 0) {
                        r = e;
                        what = "set RLIMIT_NOFILE";
                }
        }
        if (what) {
                /* Half-changed: the caller must not hand this sandbox out. */
                runtime_set_error("ns: set_limits on %s: %s: %s", sb->id, what, strerror(-r));
                return r;
        }
        sb->lim = v;
        return 0;
}

static int ns_reclaim(const char *id, const char *run_dir) {
        if (!rt_id_valid(id) || !path_valid(run_dir))
                return -EINVAL;
        /* Killing the pid namespace's init is not possible without its pidfd; the
         * cgroup holds every task anyway. */
        int ret = rt_cgroup_reclaim(NULL, id);
        char rootfs[RT_NS_MAX_PATH + 16];
        snprintf(rootfs, sizeof rootfs, "%s/rootfs", run_dir);
        if (umount2(rootfs, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT && ret == 0)
                ret = -errno;
        if (rmdir(rootfs) < 0 && errno != ENOENT && ret == 0)
                ret = -errno;
        if (ret < 0)
                runtime_set_error("ns: reclaim of %s: %s", id, strerror(-ret));
        return ret;
}

const struct runtime_ops rt_ns_ops = {
        .name = "ns",
        .memory_snapshots = false,
        .network = true,
        .host_init = ns_host_init,
        .create = ns_create,
        .adopt = ns_adopt,
        .reconnect = ns_reconnect,
        .init_fd = ns_init_fd,
        .netns_fd = ns_netns_fd,
        .pid_fd = ns_pid_fd,
        .init_pid = ns_init_pid,
        .freeze = ns_freeze,
        .thaw = ns_thaw,
        .health = ns_health,
        .destroy = ns_destroy,
        .release = ns_release,
        .set_limits = ns_set_limits,
        .reclaim = ns_reclaim,
};
