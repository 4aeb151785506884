/* Seccomp policy of ns sandboxes: an allow-list. Three tables: the syscalls allowed
 * whatever their arguments, the syscalls refused with a chosen errno, and the few whose
 * arguments decide (clone/unshare flags, socket families, ioctl requests, personality).
 * The deny-list policy reads the same denials over a default of "allow" (kept for
 * comparison and as a fallback). See docs/security.md for the review behind the lists. */
#include "runtime/seccomp.h"

#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include "common/macros.h"

/* Anything not listed fails with ENOSYS, never EPERM or a kill: a syscall the list does not
 * know is most likely newer than the list, and glibc, Python, Go and libuv probe new
 * syscalls (clone3, faccessat2, statx, openat2, close_range, epoll_pwait2, ...) and fall
 * back to older ones on ENOSYS only. EPERM there breaks programs (the runc faccessat2
 * lesson); a kill turns a probe into a crash. */
#define RT_SECCOMP_DEFAULT_ERRNO ENOSYS

/* Allowed with any arguments. Reviewed against what bash, coreutils, python3 (pip, venv,
 * asyncio, threads, multiprocessing), git, gcc/make, node (libuv) and space-init
 * (docs/protocol.md §8) call. Names the running architecture lacks are skipped. */
static const char *const allow_syscalls[] = {
        /* files and descriptors */
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range",
        "lseek", "_llseek", "dup", "dup2", "dup3", "fcntl", "fcntl64", "flock", "fsync",
        "fdatasync", "syncfs", "sync", "sync_file_range", "truncate", "ftruncate", "fallocate",
        "fadvise64", "fadvise64_64", "readahead", "sendfile", "sendfile64", "copy_file_range",
        "splice", "tee", "vmsplice", "pipe", "pipe2",
        "stat", "fstat", "lstat", "newfstatat", "fstatat64", "stat64", "fstat64", "lstat64",
        "statx", "statfs", "fstatfs", "statfs64", "fstatfs64", "access", "faccessat",
        "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "chroot",
        "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat",
        "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat", "mknod",
        "mknodat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
        "fchownat", "chown32", "fchown32", "lchown32", "umask", "utime", "utimes",
        "futimesat", "utimensat", "utimensat_time64",
        "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr",
        "listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr",
        "fremovexattr",
        "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
        "memfd_create", "cachestat",
        /* polling and event descriptors */
        "poll", "ppoll", "ppoll_time64", "select", "_newselect", "pselect6",
        "pselect6_time64", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
        "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
        "timerfd_create", "timerfd_settime", "timerfd_gettime", "timerfd_settime64",
        "timerfd_gettime64",
        /* legacy AIO (databases, some runtimes); io_uring is refused below */
        "io_setup", "io_destroy", "io_getevents", "io_pgetevents", "io_submit", "io_cancel",
        /* memory */
        "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore",
        "msync", "mlock", "mlock2", "munlock", "mlockall", "munlockall", "remap_file_pages",
        "pkey_mprotect", "pkey_alloc", "pkey_free", "membarrier", "get_mempolicy",
        "map_shadow_stack", "process_madvise", "process_mrelease",
        /* processes, threads, signals */
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
        "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
        "sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigtimedwait_time64",
        "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause",
        "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
        "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "restart_syscall",
        "futex", "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
        "arch_prctl", "set_thread_area", "get_thread_area", "prctl", "seccomp",
        "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "kcmp",
        /* the pid namespace confines these to the sandbox's own processes; agents run
         * strace and gdb */
        "ptrace", "process_vm_readv", "process_vm_writev",
        "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        /* credentials (root inside only; the user namespace maps them) */
        "getuid", "geteuid", "getgid", "getegid", "getuid32", "geteuid32", "getgid32",
        "getegid32", "setuid", "setgid", "setuid32", "setgid32", "setreuid", "setregid",
        "setreuid32", "setregid32", "setresuid", "setresgid", "setresuid32", "setresgid32",
        "getresuid", "getresgid", "getresuid32", "getresgid32", "setfsuid", "setfsgid",
        "setfsuid32", "setfsgid32", "getgroups", "setgroups", "getgroups32", "setgroups32",
        "capget", "capset",
        /* scheduling, limits, accounting */
        "sched_yield", "sched_setparam", "sched_getparam", "sched_setscheduler",
        "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
        "sched_getaffinity", "sched_setattr", "sched_getattr", "getpriority", "setpriority",
        "ioprio_set", "ioprio_get", "getrlimit", "ugetrlimit", "setrlimit", "prlimit64",
        "getrusage", "times", "sysinfo", "getcpu", "uname", "sethostname", "setdomainname",
        "getrandom",
        /* time (reading it; setting it is refused below) */
        "time", "gettimeofday", "clock_gettime", "clock_gettime64", "clock_getres",
        "clock_getres_time64", "clock_nanosleep", "clock_nanosleep_time64", "nanosleep",
        "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
        "timer_settime64", "timer_gettime", "timer_gettime64", "timer_getoverrun",
        "timer_delete",
        /* System V and POSIX IPC (the ipc namespace is the sandbox's own) */
        "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
        "semtimedop_time64", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "ipc",
        "mq_open", "mq_unlink", "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive",
        "mq_timedreceive_time64", "mq_notify", "mq_getsetattr",
        /* sockets other than socket() itself (families are checked there) */
        "socketpair", "connect", "accept", "accept4", "bind", "listen", "shutdown",
        "getsockname", "getpeername", "setsockopt", "getsockopt", "sendto", "recvfrom",
        "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "recvmmsg_time64",
};

/* One argument test: (arg[idx] & mask) == val. Every test masks: 32-bit kernel arguments
 * must not be compared on 64 bits (the kernel drops the upper half, a filter that looked
 * at it could be bypassed or could refuse honest callers). */
struct arg_test {
        unsigned idx;
        uint64_t mask, val;
};

#define LO32 0xffffffffull

struct rule {
        const char *name;
        int err; /* 0 = allow; otherwise the errno returned */
        unsigned n;
        struct arg_test t[3];
};

/* Refused whatever the arguments. EPERM is what the kernel itself answers a caller
 * without the capability; ENOSYS where callers are expected to fall back (io_uring users
 * to epoll, glibc from clone3 to clone); EOPNOTSUPP where the caller treats it as "this
 * filesystem cannot". */
static const struct rule deny_rules[] = {
        /* kernel images, modules, kernel-wide state */
        { "kexec_load", EPERM, 0, { { 0 } } },
        { "kexec_file_load", EPERM, 0, { { 0 } } },
        { "init_module", EPERM, 0, { { 0 } } },
        { "finit_module", EPERM, 0, { { 0 } } },
        { "delete_module", EPERM, 0, { { 0 } } },
        { "create_module", EPERM, 0, { { 0 } } },
        { "reboot", EPERM, 0, { { 0 } } },
        { "swapon", EPERM, 0, { { 0 } } },
        { "swapoff", EPERM, 0, { { 0 } } },
        { "acct", EPERM, 0, { { 0 } } },
        { "settimeofday", EPERM, 0, { { 0 } } },
        { "clock_settime", EPERM, 0, { { 0 } } },
        { "clock_settime64", EPERM, 0, { { 0 } } },
        { "clock_adjtime", EPERM, 0, { { 0 } } },
        { "clock_adjtime64", EPERM, 0, { { 0 } } },
        { "adjtimex", EPERM, 0, { { 0 } } },
        { "stime", EPERM, 0, { { 0 } } },
        { "syslog", EPERM, 0, { { 0 } } },
        { "quotactl", EPERM, 0, { { 0 } } },
        { "quotactl_fd", EPERM, 0, { { 0 } } },
        { "lookup_dcookie", EPERM, 0, { { 0 } } },
        { "nfsservctl", EPERM, 0, { { 0 } } },
        { "uselib", EPERM, 0, { { 0 } } },
        { "ustat", EPERM, 0, { { 0 } } },
        { "sysfs", EPERM, 0, { { 0 } } },
        { "_sysctl", EPERM, 0, { { 0 } } },
        { "iopl", EPERM, 0, { { 0 } } },
        { "ioperm", EPERM, 0, { { 0 } } },
        { "modify_ldt", EPERM, 0, { { 0 } } },
        { "vhangup", EPERM, 0, { { 0 } } },
        /* large kernel attack surface reachable without privilege */
        { "bpf", EPERM, 0, { { 0 } } },
        { "perf_event_open", EPERM, 0, { { 0 } } },
        { "userfaultfd", EPERM, 0, { { 0 } } },
        { "keyctl", EPERM, 0, { { 0 } } },
        { "add_key", EPERM, 0, { { 0 } } },
        { "request_key", EPERM, 0, { { 0 } } },
        { "io_uring_setup", ENOSYS, 0, { { 0 } } },
        { "io_uring_enter", ENOSYS, 0, { { 0 } } },
        { "io_uring_register", ENOSYS, 0, { { 0 } } },
        { "fanotify_init", EPERM, 0, { { 0 } } },
        { "open_by_handle_at", EPERM, 0, { { 0 } } },
        { "name_to_handle_at", EOPNOTSUPP, 0, { { 0 } } },
        { "mbind", EPERM, 0, { { 0 } } },
        { "migrate_pages", EPERM, 0, { { 0 } } },
        { "move_pages", EPERM, 0, { { 0 } } },
        { "set_mempolicy", EPERM, 0, { { 0 } } },
        { "set_mempolicy_home_node", EPERM, 0, { { 0 } } },
        /* mounts: the runtime made every mount before loading the filter; the capability
         * set forbids them too, this also closes the new mount API to probing */
        { "mount", EPERM, 0, { { 0 } } },
        { "umount", EPERM, 0, { { 0 } } },
        { "umount2", EPERM, 0, { { 0 } } },
        { "pivot_root", EPERM, 0, { { 0 } } },
        { "fsopen", EPERM, 0, { { 0 } } },
        { "fsconfig", EPERM, 0, { { 0 } } },
        { "fsmount", EPERM, 0, { { 0 } } },
        { "fspick", EPERM, 0, { { 0 } } },
        { "move_mount", EPERM, 0, { { 0 } } },
        { "open_tree", EPERM, 0, { { 0 } } },
        { "mount_setattr", EPERM, 0, { { 0 } } },
        { "setns", EPERM, 0, { { 0 } } },
        /* flags sit behind a pointer the filter cannot read; glibc falls back to clone */
        { "clone3", ENOSYS, 0, { { 0 } } },
};

/* Decided by arguments. A call that matches none of its syscall's rules gets the default
 * (ENOSYS), so every allow below is as narrow as what programs do. */
static const struct rule arg_rules[] = {
        /* a nested user namespace would hand a full capability set back */
        { "clone", 0, 1, { { 0, CLONE_NEWUSER, 0 } } },
        { "clone", EPERM, 1, { { 0, CLONE_NEWUSER, CLONE_NEWUSER } } },
        { "unshare", 0, 1, { { 0, CLONE_NEWUSER, 0 } } },
        { "unshare", EPERM, 1, { { 0, CLONE_NEWUSER, CLONE_NEWUSER } } },

        /* Typing into a terminal (TIOCSTI) and console control (TIOCLINUX); the rest of
         * ioctl is allowed when the request's upper half is 0 (the kernel ignores it, so a
         * request with bits there could smuggle a refused one past the test). */
        { "ioctl", EPERM, 1, { { 1, LO32, TIOCSTI } } },
        { "ioctl", EPERM, 1, { { 1, LO32, TIOCLINUX } } },
        { "ioctl", 0, 1, { { 1, ~LO32, 0 } } },

        /* Query, Linux, 32-bit Linux, uname26, and ADDR_NO_RANDOMIZE (gdb); not the
         * historical personalities that map page zero or make data executable. */
        { "personality", 0, 1, { { 0, LO32, PER_LINUX } } },
        { "personality", 0, 1, { { 0, LO32, PER_LINUX32 } } },
        { "personality", 0, 1, { { 0, LO32, UNAME26 } } },
        { "personality", 0, 1, { { 0, LO32, UNAME26 | PER_LINUX32 } } },
        { "personality", 0, 1, { { 0, LO32, ADDR_NO_RANDOMIZE } } },
        { "personality", 0, 1, { { 0, LO32, ADDR_NO_RANDOMIZE | PER_LINUX32 } } },
        { "personality", 0, 1, { { 0, LO32, 0xffffffffu } } },

        /* Sockets: local, netlink (ip, getifaddrs) and TCP/UDP/ICMP-echo over IPv4/IPv6.
         * Raw and packet sockets are refused (spoofing, sniffing), and so are protocols
         * whose first use loads a rarely used kernel module (SCTP, DCCP, ...). */
        { "socket", 0, 1, { { 0, LO32, AF_UNIX } } },
        { "socket", 0, 1, { { 0, LO32, AF_NETLINK } } },
        { "socket", EPERM, 1, { { 0, LO32, AF_PACKET } } },
        { "socket", EPERM, 2, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_RAW } } },
        { "socket", EPERM, 2, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_RAW } } },
        { "socket", EPERM, 2, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_PACKET } } },
        { "socket", EPERM, 2, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_PACKET } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, 0 } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, IPPROTO_TCP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, IPPROTO_MPTCP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, 0 } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, IPPROTO_UDP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, IPPROTO_ICMP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, 0 } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, IPPROTO_TCP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_STREAM }, { 2, LO32, IPPROTO_MPTCP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, 0 } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, IPPROTO_UDP } } },
        { "socket", 0, 3, { { 0, LO32, AF_INET6 }, { 1, 0xf, SOCK_DGRAM }, { 2, LO32, IPPROTO_ICMPV6 } } },
};

/* Families with rules of their own above; socket() refuses every other one with
 * EAFNOSUPPORT (what a kernel without them answers), including any from AF_MAX up. */
static bool family_has_rule(int f) {
        return f == AF_UNIX || f == AF_INET || f == AF_INET6 || f == AF_NETLINK || f == AF_PACKET;
}

static int add_rule(scmp_filter_ctx ctx, const struct rule *r, uint32_t action) {
        int nr = seccomp_syscall_resolve_name(r->name);
        if (nr == __NR_SCMP_ERROR)
                return 0; /* not a syscall on this architecture */
        struct scmp_arg_cmp c[3];
        for (unsigned i = 0; i < r->n; i++)
                c[i] = (struct scmp_arg_cmp){ .arg = r->t[i].idx, .op = SCMP_CMP_MASKED_EQ,
                                              .datum_a = r->t[i].mask, .datum_b = r->t[i].val };
        return seccomp_rule_add_array(ctx, action, nr, r->n, c);
}

static uint32_t rule_action(const struct rule *r) {
        return r->err ? SCMP_ACT_ERRNO((uint32_t)r->err) : SCMP_ACT_ALLOW;
}

static int add_rules(scmp_filter_ctx ctx, enum rt_seccomp_policy policy) {
        bool allowlist = policy == RT_SECCOMP_ALLOWLIST;
        int r;
        if (allowlist)
                for (size_t i = 0; i < ELEMENTSOF(allow_syscalls); i++) {
                        int nr = seccomp_syscall_resolve_name(allow_syscalls[i]);
                        if (nr == __NR_SCMP_ERROR)
                                continue;
                        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
                        if (r < 0)
                                return r;
                }
        for (size_t i = 0; i < ELEMENTSOF(deny_rules); i++) {
                /* ENOSYS denials are the allow-list's default already (and libseccomp
                 * refuses a rule whose action is the default). */
                if (allowlist && deny_rules[i].err == RT_SECCOMP_DEFAULT_ERRNO)
                        continue;
                r = add_rule(ctx, &deny_rules[i], rule_action(&deny_rules[i]));
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(arg_rules); i++) {
                /* Over a default of "allow", allow rules add nothing (libseccomp refuses
                 * a rule whose action is the default). */
                if (!allowlist && arg_rules[i].err == 0)
                        continue;
                r = add_rule(ctx, &arg_rules[i], rule_action(&arg_rules[i]));
                if (r < 0)
                        return r;
        }
        for (int f = 0; f < AF_MAX; f++) {
                if (family_has_rule(f))
                        continue;
                struct rule fr = { "socket", EAFNOSUPPORT, 1, { { 0, LO32, (uint64_t)f } } };
                r = add_rule(ctx, &fr, rule_action(&fr));
                if (r < 0)
                        return r;
        }
        /* Families the headers do not know yet. */
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), seccomp_syscall_resolve_name("socket"), 1,
                                (struct scmp_arg_cmp){ .arg = 0, .op = SCMP_CMP_GE, .datum_a = AF_MAX });
}

static int export_bpf(scmp_filter_ctx ctx, struct rt_seccomp_prog *ret) {
        _cleanup_close_ int mfd = memfd_create("space-seccomp", MFD_CLOEXEC);
        if (mfd < 0)
                return -errno;
        int r = seccomp_export_bpf(ctx, mfd);
        if (r < 0)
                return r;
        struct stat st;
        if (fstat(mfd, &st) < 0)
                return -errno;
        size_t len = (size_t)st.st_size / sizeof(struct sock_filter);
        if (len == 0 || len > RT_SECCOMP_MAX_INSNS)
                return -E2BIG;
        struct sock_filter *insns = malloc(len * sizeof *insns);
        if (!insns)
                return -ENOMEM;
        if (pread(mfd, insns, len * sizeof *insns, 0) != (ssize_t)(len * sizeof *insns)) {
                free(insns);
                return -EIO;
        }
        ret->insns = insns;
        ret->len = len;
        return 0;
}

int rt_seccomp_build(enum rt_seccomp_policy policy, struct rt_seccomp_prog *ret) {
        if (policy != RT_SECCOMP_DENYLIST && policy != RT_SECCOMP_ALLOWLIST)
                return -EINVAL;
        scmp_filter_ctx ctx = seccomp_init(policy == RT_SECCOMP_ALLOWLIST ? SCMP_ACT_ERRNO(RT_SECCOMP_DEFAULT_ERRNO)
                                                                          : SCMP_ACT_ALLOW);
        if (!ctx)
                return -ENOMEM;
        int r;
        /* Other ABIs (i386 via int 0x80, x32) are refused outright rather than filtered:
         * the tables name native syscalls only. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
        /* A binary tree over syscall numbers: ~9 comparisons instead of ~300 per call. */
        if (r == 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
        if (r == 0)
                r = add_rules(ctx, policy);
        if (r == 0)
                r = export_bpf(ctx, ret);
        seccomp_release(ctx);
        return r;
}

void rt_seccomp_prog_free(struct rt_seccomp_prog *p) {
        if (!p)
                return;
        free(p->insns);
        p->insns = NULL;
        p->len = 0;
}

int rt_seccomp_load(const struct rt_seccomp_prog *p) {
        struct sock_fprog fprog = { .len = (unsigned short)p->len, .filter = p->insns };
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) < 0)
                return -errno;
        return 0;
}
