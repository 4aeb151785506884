/* sec-probe: makes one escape attempt per run, inside a sandbox, with the raw syscall
 * (so no library in between can fall back or hide the answer), and says what happened.
 * Static, copied into the sandbox by the escape suite (tests/security/attempts.sh).
 * Prints "ok …" and exits 0 when the call succeeded, "refused ERRNO (message)" and
 * exits 1 when the kernel (or the seccomp filter) said no; 2 is a usage error.
 * With --expect ERRNO (a name: EPERM, ENOSYS, …) first, a refusal counts only with that
 * errno, the one the mechanism the caller names answers: "refused EPERM, as expected"
 * exits 1, "refused ENOENT, expected EPERM" exits 3 (something else said no). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_MAX_FDS (1 << 21) /* more than any RLIMIT_NOFILE a sandbox may have */
#define PROBE_ERRNO_MAX 4096    /* errno values are below this (the kernel's MAX_ERRNO) */
#define PROBE_INOTIFY_MAX 65536 /* instances inotify_hold takes at most */
#define PROBE_HOLD_MAX_S 600    /* and holds at most this long */
#define PROBE_WRONG_ERRNO 3     /* exit status: refused, but not with the expected errno */

static int expected; /* --expect: the errno a refusal must carry; 0 = any */

static int refused(const char *what) {
        int e = errno;
        const char *name = strerrorname_np(e) ? strerrorname_np(e) : "?";
        if (!expected) {
                printf("%s -> refused %s (%s)\n", what, name, strerror(e));
                return 1;
        }
        if (e == expected) {
                printf("%s -> refused %s (%s), as expected\n", what, name, strerror(e));
                return 1;
        }
        printf("%s -> refused %s (%s), expected %s (%s)\n", what, name, strerror(e), strerrorname_np(expected),
               strerror(expected));
        return PROBE_WRONG_ERRNO;
}

/* "EPERM" -> EPERM; 0 for a name that is no errno. */
static int errno_by_name(const char *name) {
        for (int e = 1; e < PROBE_ERRNO_MAX; e++)
                if (strerrorname_np(e) && !strcmp(strerrorname_np(e), name))
                        return e;
        return 0;
}

static int done(const char *what, long r) {
        if (r < 0)
                return refused(what);
        printf("%s -> ok (%ld)\n", what, r);
        return 0;
}

static int p_keyctl(void) {
        return done("keyctl(KEYCTL_JOIN_SESSION_KEYRING)", syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "sec-probe"));
}

static int p_add_key(void) {
        return done("add_key(user)", syscall(SYS_add_key, "user", "sec-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
}

static int p_bpf(void) {
        /* the smallest valid program: r0 = 0; exit */
        struct bpf_insn insns[2] = {
                { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
                { .code = BPF_JMP | BPF_EXIT },
        };
        union bpf_attr a;
        memset(&a, 0, sizeof a);
        a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
        a.insn_cnt = 2;
        a.insns = (uintptr_t)insns;
        a.license = (uintptr_t) "GPL";
        return done("bpf(BPF_PROG_LOAD socket filter)", syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a));
}

static int p_perf(void) {
        struct perf_event_attr a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.type = PERF_TYPE_SOFTWARE;
        a.config = PERF_COUNT_SW_CPU_CLOCK;
        a.exclude_kernel = 1;
        return done("perf_event_open(sw cpu clock, this process)", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
}

static int p_userfaultfd(void) {
        return done("userfaultfd(O_CLOEXEC)", syscall(SYS_userfaultfd, O_CLOEXEC));
}

static int p_io_uring(void) {
        uint8_t params[120];
        memset(params, 0, sizeof params);
        return done("io_uring_setup(8)", syscall(SYS_io_uring_setup, 8, params));
}

static int p_kexec(void) {
        return done("kexec_load(0 segments)", syscall(SYS_kexec_load, 0, 0, NULL, 0));
}

static int p_kexec_file(void) {
        return done("kexec_file_load(-1, -1, \"\", KEXEC_FILE_UNLOAD)", syscall(SYS_kexec_file_load, -1, -1, 1, "", 1));
}

static int p_init_module(void) {
        static const char elf[64] = "\177ELF";
        return done("init_module(fake ELF)", syscall(SYS_init_module, elf, sizeof elf, ""));
}

static int p_finit_module(void) {
        int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        return done("finit_module(/proc/self/exe)", syscall(SYS_finit_module, fd, "", 0));
}

static int p_delete_module(void) {
        return done("delete_module(\"overlay\")", syscall(SYS_delete_module, "overlay", O_NONBLOCK));
}

static int p_open_by_handle(void) {
        /* the "shocker" escape: a handle for inode 2 (the root of most filesystems) */
        struct {
                unsigned int handle_bytes;
                int handle_type;
                unsigned char f_handle[8];
        } h = { .handle_bytes = 8, .handle_type = 1, .f_handle = { 2, 0, 0, 0, 0, 0, 0, 0 } };
        return done("open_by_handle_at(/, inode 2)", syscall(SYS_open_by_handle_at, AT_FDCWD, &h, O_RDONLY));
}

static int p_name_to_handle(void) {
        struct {
                unsigned int handle_bytes;
                int handle_type;
                unsigned char f_handle[128];
        } h = { .handle_bytes = 128 };
        int mnt;
        return done("name_to_handle_at(/)", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &h, &mnt, 0));
}

static int p_mount(const char *type, const char *target) {
        char what[256];
        snprintf(what, sizeof what, "mount(-t %s none %s)", type, target);
        (void)mkdir(target, 0755);
        return done(what, mount("none", target, type, 0, NULL));
}

static int p_bind(const char *src, const char *target) {
        char what[256];
        snprintf(what, sizeof what, "mount(--bind %s %s)", src, target);
        (void)mkdir(target, 0755);
        return done(what, mount(src, target, NULL, MS_BIND | MS_REC, NULL));
}

static int p_remount(const char *target) {
        char what[256];
        snprintf(what, sizeof what, "mount(-o remount,rw %s)", target);
        return done(what, mount(NULL, target, NULL, MS_REMOUNT | MS_BIND, NULL));
}

static int p_umount(const char *target) {
        char what[256];
        snprintf(what, sizeof what, "umount2(%s, MNT_DETACH)", target);
        return done(what, umount2(target, MNT_DETACH));
}

static int p_pivot_root(void) {
        (void)mkdir("/tmp/newroot", 0755);
        (void)mkdir("/tmp/newroot/old", 0755);
        return done("pivot_root(/tmp/newroot, /tmp/newroot/old)", syscall(SYS_pivot_root, "/tmp/newroot", "/tmp/newroot/old"));
}

static int p_unshare(const char *which) {
        static const struct {
                const char *name;
                int flag;
        } f[] = { { "user", CLONE_NEWUSER }, { "mount", CLONE_NEWNS },   { "net", CLONE_NEWNET },
                  { "pid", CLONE_NEWPID },   { "uts", CLONE_NEWUTS },    { "ipc", CLONE_NEWIPC },
                  { "cgroup", CLONE_NEWCGROUP }, { "time", CLONE_NEWTIME } };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
                if (!strcmp(which, f[i].name)) {
                        char what[64];
                        snprintf(what, sizeof what, "unshare(CLONE_NEW%s)", which);
                        int r = unshare(f[i].flag);
                        if (r < 0)
                                return refused(what);
                        /* the namespace was made: what can root do in it? */
                        printf("%s -> ok; then ", what);
                        if (f[i].flag == CLONE_NEWUSER || f[i].flag == CLONE_NEWNS) {
                                r = done("mount(-t tmpfs none /tmp) in it", mount("none", "/tmp", "tmpfs", 0, NULL));
                                /* the refusal expected was of the unshare itself */
                                return r != 0 && expected ? PROBE_WRONG_ERRNO : r;
                        }
                        printf("nothing more to try\n");
                        return 0;
                }
        fprintf(stderr, "unknown namespace %s\n", which);
        return 2;
}

static int p_clone_newuser(void) {
        /* the raw clone flag, not unshare: seccomp must stop both */
        long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
        if (r == 0)
                _exit(0);
        if (r > 0)
                waitpid((pid_t)r, NULL, 0);
        return done("clone(CLONE_NEWUSER)", r);
}

static int p_setns(const char *path) {
        char what[300];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                snprintf(what, sizeof what, "open(%s)", path);
                return refused(what);
        }
        snprintf(what, sizeof what, "setns(%s)", path);
        return done(what, setns(fd, 0));
}

static int p_mknod(const char *path, char kind, unsigned maj, unsigned min) {
        char what[300];
        snprintf(what, sizeof what, "mknod(%s, %s %u:%u)", path, kind == 'b' ? "block" : "char", maj, min);
        int r = mknod(path, (kind == 'b' ? S_IFBLK : S_IFCHR) | 0600, makedev(maj, min));
        if (r == 0) {
                /* made: can it also be opened? (a node on a nodev mount can't) */
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                printf("%s -> ok; open -> %s\n", what, fd >= 0 ? "ok" : strerror(errno));
                return 0;
        }
        return refused(what);
}

static int p_ptrace(pid_t pid) {
        char what[64];
        snprintf(what, sizeof what, "ptrace(PTRACE_ATTACH, %d)", pid);
        if (ptrace(PTRACE_ATTACH, pid, NULL, NULL) < 0)
                return refused(what);
        char path[64], comm[64] = "?";
        snprintf(path, sizeof path, "/proc/%d/comm", pid);
        FILE *f = fopen(path, "re");
        if (f) {
                if (fgets(comm, sizeof comm, f))
                        comm[strcspn(comm, "\n")] = 0;
                fclose(f);
        }
        waitpid(pid, NULL, __WALL);
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
        printf("%s -> ok: attached to \"%s\" (a process of this sandbox)\n", what, comm);
        return 0;
}

/* PTRACE_SEIZE attaches without stopping the tracee: the quiet way to take over a
 * process (and the first step of injecting code into it). */
static int p_ptrace_seize(pid_t pid) {
        char what[64];
        snprintf(what, sizeof what, "ptrace(PTRACE_SEIZE, %d)", pid);
        if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) < 0)
                return refused(what);
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
        printf("%s -> ok: attached\n", what);
        return 0;
}

/* pidfd_open(pid) then pidfd_getfd of each of its descriptors 0..PROBE_GETFD_MAX: any
 * descriptor taken is a success (and named, from /proc/self/fd). */
#define PROBE_GETFD_MAX 64
static int p_pidfd_getfd(pid_t pid) {
        char what[64];
        snprintf(what, sizeof what, "pidfd_open(%d)", pid);
        int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pfd < 0)
                return refused(what);
        int taken = 0, err = 0;
        for (int fd = 0; fd <= PROBE_GETFD_MAX; fd++) {
                int got = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
                if (got < 0) {
                        if (errno != EBADF && !err) /* EBADF: no such fd in the target */
                                err = errno;
                        continue;
                }
                char link[64], target[256] = "?";
                snprintf(link, sizeof link, "/proc/self/fd/%d", got);
                ssize_t n = readlink(link, target, sizeof target - 1);
                target[n > 0 ? n : 0] = 0;
                printf("pidfd_getfd(%d, fd %d) -> ok: %s\n", pid, fd, target);
                close(got);
                taken++;
        }
        close(pfd);
        snprintf(what, sizeof what, "pidfd_getfd(pidfd of %d, fds 0..%d)", pid, PROBE_GETFD_MAX);
        if (taken)
                return done(what, taken);
        errno = err ? err : EBADF;
        return refused(what);
}

/* open + read of a file: the first bytes read count as a success. */
static int p_read(const char *path) {
        char what[300], buf[256];
        snprintf(what, sizeof what, "read(%s)", path);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return refused(what);
        ssize_t n = read(fd, buf, sizeof buf);
        int e = errno;
        close(fd);
        errno = e;
        if (n < 0)
                return refused(what);
        return done(what, n);
}

static int p_readlink(const char *path) {
        char what[300], target[512];
        snprintf(what, sizeof what, "readlink(%s)", path);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0)
                return refused(what);
        target[n] = 0;
        printf("%s -> ok: %s\n", what, target);
        return 0;
}

static int p_kill(pid_t pid, int sig) {
        char what[64];
        snprintf(what, sizeof what, "kill(%d, %d)", pid, sig);
        return done(what, kill(pid, sig));
}

static int p_socket(const char *kind) {
        int r;
        if (!strcmp(kind, "raw"))
                r = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
        else if (!strcmp(kind, "raw6"))
                r = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
        else if (!strcmp(kind, "packet"))
                r = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x0003));
        else if (!strcmp(kind, "packet-dgram"))
                r = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(0x0003));
        else if (!strcmp(kind, "inet-packet"))
                r = socket(AF_INET, SOCK_PACKET | SOCK_CLOEXEC, htons(0x0003));
        else if (!strcmp(kind, "vsock"))
                r = socket(40 /* AF_VSOCK */, SOCK_STREAM | SOCK_CLOEXEC, 0);
        else if (!strcmp(kind, "netlink-audit"))
                r = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 9 /* NETLINK_AUDIT */);
        else {
                fprintf(stderr, "unknown socket kind %s\n", kind);
                return 2;
        }
        char what[64];
        snprintf(what, sizeof what, "socket(%s)", kind);
        return done(what, r);
}

static int p_connect_inet(const char *host, int port) {
        char what[128];
        snprintf(what, sizeof what, "connect(%s:%d)", host, port);
        struct sockaddr_storage ss;
        socklen_t sl;
        memset(&ss, 0, sizeof ss);
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t)port);
                sl = sizeof *a4;
        } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                sl = sizeof *a6;
        } else {
                fprintf(stderr, "bad address %s\n", host);
                return 2;
        }
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return refused(what);
        struct timeval tv = { .tv_sec = 3 };
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
                return refused(what);
        char buf[128] = "";
        ssize_t n = read(fd, buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        printf("%s -> ok: read \"%s\"\n", what, buf);
        return 0;
}

static int p_connect_unix(const char *path, bool abstract) {
        char what[160];
        snprintf(what, sizeof what, "connect(unix %s%s)", abstract ? "@" : "", path);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        size_t n = strlen(path);
        if (n + 2 > sizeof a.sun_path) {
                fprintf(stderr, "path too long\n");
                return 2;
        }
        memcpy(a.sun_path + (abstract ? 1 : 0), path, n);
        socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (abstract ? 1 : 0));
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return refused(what);
        if (connect(fd, (struct sockaddr *)&a, sl) < 0)
                return refused(what);
        char buf[128] = "";
        struct timeval tv = { .tv_sec = 2 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t k = read(fd, buf, sizeof buf - 1);
        buf[k > 0 ? k : 0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        printf("%s -> ok: read \"%s\"\n", what, buf);
        return 0;
}

static int p_sethostname(const char *name) {
        return done("sethostname", sethostname(name, strlen(name)));
}

static int p_settime(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 3600 * 24 * 365; /* a year ahead: unmistakable if it worked */
        int r = clock_settime(CLOCK_REALTIME, &ts);
        if (r == 0) {
                ts.tv_sec -= 3600 * 24 * 365;
                clock_settime(CLOCK_REALTIME, &ts);
        }
        return done("clock_settime(CLOCK_REALTIME, +1 year)", r);
}

static int p_settimeofday(void) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        return done("settimeofday(now)", settimeofday(&tv, NULL));
}

static int p_adjtimex(void) {
        struct {
                unsigned int modes;
                long pad[40];
        } t = { .modes = 0x0001 /* ADJ_OFFSET */ };
        return done("adjtimex(ADJ_OFFSET)", syscall(SYS_adjtimex, &t));
}

/* The classic chroot escape: chroot into a subdir while keeping a cwd outside it, then
 * walk up with chdir("..") and chroot(".") again. With real root outside a namespace it
 * lands on the host's /; here / is the sandbox's root and ".." of it is itself. */
static int p_chroot_escape(const char *look_for) {
        (void)mkdir("/tmp/jail", 0755);
        int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (chroot("/tmp/jail") < 0)
                return refused("chroot(/tmp/jail)");
        if (fchdir(fd) < 0)
                return refused("fchdir(old root)");
        for (int i = 0; i < 64; i++)
                if (chdir("..") < 0)
                        return refused("chdir(..)");
        if (chroot(".") < 0)
                return refused("chroot(.)");
        struct stat st;
        char what[300];
        snprintf(what, sizeof what, "chroot(/tmp/jail), fchdir(outside), 64 x chdir(..), chroot(.) -> done; stat(%s)",
                 look_for);
        if (stat(look_for, &st) < 0)
                return refused(what); /* ENOENT: the walk ended inside */
        printf("%s -> ok: IS VISIBLE\n", what);
        return 0;
}

static int p_nofile(void) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        printf("RLIMIT_NOFILE %llu/%llu; ", (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
        struct rlimit more = { .rlim_cur = PROBE_MAX_FDS, .rlim_max = PROBE_MAX_FDS };
        if (setrlimit(RLIMIT_NOFILE, &more) == 0) {
                printf("raised to %d; ", PROBE_MAX_FDS);
        } else {
                printf("raise to %d refused (%s); ", PROBE_MAX_FDS, strerrorname_np(errno));
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        long n = 0;
        for (;;) {
                int fd = open("/dev/null", O_RDONLY);
                if (fd < 0)
                        break;
                n++;
        }
        int e = errno;
        char what[64];
        snprintf(what, sizeof what, "opened %ld fds, then open(/dev/null)", n);
        if (n >= PROBE_MAX_FDS - 10) {
                printf("%s -> ok (stopped only by %s)\n", what, strerrorname_np(e));
                return 0;
        }
        errno = e;
        return refused(what); /* EMFILE: RLIMIT_NOFILE */
}

/* Takes inotify instances until the kernel says no (or max), says how many and why it
 * stopped, then holds them for secs seconds: another sandbox (or the host) tries its own
 * meanwhile. Exits 0 when it was stopped by a refusal, 1 when it reached max. */
static int p_inotify_hold(long max, long secs) {
        if (max <= 0 || max > PROBE_INOTIFY_MAX || secs < 0 || secs > PROBE_HOLD_MAX_S) {
                fprintf(stderr, "sec-probe: inotify_hold MAX SECONDS: MAX 1..%d, SECONDS 0..%d\n", PROBE_INOTIFY_MAX,
                        PROBE_HOLD_MAX_S);
                return 2;
        }
        long n = 0;
        int e = 0;
        while (n < max) {
                if (syscall(SYS_inotify_init1, IN_CLOEXEC) < 0) {
                        e = errno;
                        break;
                }
                n++;
        }
        printf("held %ld inotify instances, then %s\n", n, e ? strerrorname_np(e) : "the probe's own maximum");
        fflush(stdout);
        sleep((unsigned)secs);
        return e ? 0 : 1;
}

static int p_tiocsti(void) {
        int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
        if (fd < 0)
                fd = 0;
        char c = 'x';
        return done("ioctl(TIOCSTI)", ioctl(fd, TIOCSTI, &c));
}

static int p_syslog(void) {
        char buf[256];
        return done("syslog(SYSLOG_ACTION_READ_ALL)", klogctl(3, buf, sizeof buf));
}

static int p_reboot(void) {
        /* CAD_OFF only disables Ctrl-Alt-Del: harmless if it ever passed */
        return done("reboot(LINUX_REBOOT_CMD_CAD_OFF)",
                    syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_CAD_OFF, NULL));
}

static int p_iopl(void) {
#ifdef SYS_iopl
        return done("iopl(3)", syscall(SYS_iopl, 3));
#else
        errno = ENOSYS;
        return refused("iopl(3)");
#endif
}

static int p_swapon(void) {
        return done("swapon(/tmp/swap)", syscall(SYS_swapon, "/tmp/swap", 0));
}

/* Network (#14): sockets that would let a sandbox forge what it sends. */
static int p_raw(int family) {
        return done(family == AF_INET6 ? "socket(AF_INET6, SOCK_RAW, IPPROTO_RAW)" : "socket(AF_INET, SOCK_RAW, IPPROTO_RAW)",
                    socket(family, SOCK_RAW, IPPROTO_RAW));
}

static int p_packet(void) {
        return done("socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)", socket(AF_PACKET, SOCK_RAW, htons(0x0003)));
}

/* TCP connect to ADDR PORT from source address SRC (bind first): a spoofed source. */
static int p_connect_from(const char *src, const char *dst, const char *port) {
        struct sockaddr_in a = { .sin_family = AF_INET }, b = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
        if (inet_pton(AF_INET, src, &a.sin_addr) != 1 || inet_pton(AF_INET, dst, &b.sin_addr) != 1) {
                fprintf(stderr, "sec-probe: connect_from SRC DST PORT (IPv4)\n");
                return 2;
        }
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
                return refused("socket");
        int one = 1;
        (void)setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
                return refused("bind(spoofed source)");
        struct timeval tv = { .tv_sec = 3 };
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        return done("connect(from a spoofed source)", connect(fd, (struct sockaddr *)&b, sizeof b));
}

/* Prints real/effective ids and whether no_new_privs is set. */
static int p_ids(void) {
        uid_t r, e, s;
        getresuid(&r, &e, &s);
        printf("uid %u euid %u suid %u\n", r, e, s);
        return e == 0 ? 0 : 1;
}

/* Drops to uid/gid, then runs argv: for the setuid test. */
static int p_drop_exec(uid_t uid, char **argv) {
        if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                return refused("drop privileges");
        execv(argv[0], argv);
        return refused("execv");
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc > 2 && !strcmp(argv[1], "--expect")) {
                if (!(expected = errno_by_name(argv[2]))) {
                        fprintf(stderr, "sec-probe: --expect %s: not an errno name\n", argv[2]);
                        return 2;
                }
                argc -= 2;
                argv += 2;
        }
        if (argc < 2) {
                fprintf(stderr, "usage: sec-probe [--expect ERRNO] ATTEMPT [ARGS]\n");
                return 2;
        }
        const char *c = argv[1];
        const char *a2 = argc > 2 ? argv[2] : "", *a3 = argc > 3 ? argv[3] : "";
        if (!strcmp(c, "keyctl")) return p_keyctl();
        if (!strcmp(c, "add_key")) return p_add_key();
        if (!strcmp(c, "bpf")) return p_bpf();
        if (!strcmp(c, "perf_event_open")) return p_perf();
        if (!strcmp(c, "userfaultfd")) return p_userfaultfd();
        if (!strcmp(c, "io_uring")) return p_io_uring();
        if (!strcmp(c, "kexec_load")) return p_kexec();
        if (!strcmp(c, "kexec_file_load")) return p_kexec_file();
        if (!strcmp(c, "init_module")) return p_init_module();
        if (!strcmp(c, "finit_module")) return p_finit_module();
        if (!strcmp(c, "delete_module")) return p_delete_module();
        if (!strcmp(c, "open_by_handle_at")) return p_open_by_handle();
        if (!strcmp(c, "name_to_handle_at")) return p_name_to_handle();
        if (!strcmp(c, "mount") && argc > 3) return p_mount(a2, a3);
        if (!strcmp(c, "bind") && argc > 3) return p_bind(a2, a3);
        if (!strcmp(c, "remount") && argc > 2) return p_remount(a2);
        if (!strcmp(c, "umount") && argc > 2) return p_umount(a2);
        if (!strcmp(c, "pivot_root")) return p_pivot_root();
        if (!strcmp(c, "unshare") && argc > 2) return p_unshare(a2);
        if (!strcmp(c, "clone_newuser")) return p_clone_newuser();
        if (!strcmp(c, "setns") && argc > 2) return p_setns(a2);
        if (!strcmp(c, "mknod") && argc > 5) return p_mknod(a2, a3[0], (unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]));
        if (!strcmp(c, "ptrace") && argc > 2) return p_ptrace(atoi(a2));
        if (!strcmp(c, "ptrace_seize") && argc > 2) return p_ptrace_seize(atoi(a2));
        if (!strcmp(c, "pidfd_getfd") && argc > 2) return p_pidfd_getfd(atoi(a2));
        if (!strcmp(c, "read") && argc > 2) return p_read(a2);
        if (!strcmp(c, "readlink") && argc > 2) return p_readlink(a2);
        if (!strcmp(c, "kill") && argc > 3) return p_kill(atoi(a2), atoi(a3));
        if (!strcmp(c, "socket") && argc > 2) return p_socket(a2);
        if (!strcmp(c, "connect") && argc > 3) return p_connect_inet(a2, atoi(a3));
        if (!strcmp(c, "connect_unix") && argc > 2) return p_connect_unix(a2, false);
        if (!strcmp(c, "connect_abstract") && argc > 2) return p_connect_unix(a2, true);
        if (!strcmp(c, "sethostname") && argc > 2) return p_sethostname(a2);
        if (!strcmp(c, "clock_settime")) return p_settime();
        if (!strcmp(c, "settimeofday")) return p_settimeofday();
        if (!strcmp(c, "adjtimex")) return p_adjtimex();
        if (!strcmp(c, "chroot_escape") && argc > 2) return p_chroot_escape(a2);
        if (!strcmp(c, "nofile")) return p_nofile();
        if (!strcmp(c, "tiocsti")) return p_tiocsti();
        if (!strcmp(c, "inotify_init")) return done("inotify_init1", syscall(SYS_inotify_init1, IN_CLOEXEC));
        if (!strcmp(c, "inotify_hold") && argc > 3) return p_inotify_hold(atol(a2), atol(a3));
        if (!strcmp(c, "syslog")) return p_syslog();
        if (!strcmp(c, "reboot")) return p_reboot();
        if (!strcmp(c, "iopl")) return p_iopl();
        if (!strcmp(c, "swapon")) return p_swapon();
        if (!strcmp(c, "ids")) return p_ids();
        if (!strcmp(c, "raw4")) return p_raw(AF_INET);
        if (!strcmp(c, "raw6")) return p_raw(AF_INET6);
        if (!strcmp(c, "packet")) return p_packet();
        if (!strcmp(c, "connect_from")) return p_connect_from(a2, a3, argc > 4 ? argv[4] : "80");
        if (!strcmp(c, "drop_exec") && argc > 3) return p_drop_exec((uid_t)atoi(a2), argv + 3);
        if (!strcmp(c, "segv")) {
                volatile int *p = NULL;
                return *p;
        }
        fprintf(stderr, "sec-probe: unknown attempt or missing arguments: %s\n", c);
        return 2;
}
