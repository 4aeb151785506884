/* Seccomp probe, run inside a sandbox by test_base: calls each syscall the sandbox must
 * refuse, with harmless arguments, and prints one line "NAME ERRNO" per call (0 when the
 * call succeeded: the test then fails). Static, so it runs in any template. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <linux/fs.h>
#include <linux/sched.h>

static void report(const char *name, long r) {
        printf("%s %d\n", name, r < 0 ? errno : 0);
        if (r >= 0 && strncmp(name, "socket", 6) == 0)
                close((int)r);
}

#define P(name, call)                     \
        do {                              \
                errno = 0;                \
                report(name, (long)(call)); \
        } while (0)

int main(void) {
        struct timespec ts = { 0 };
        P("bpf", syscall(SYS_bpf, 0, NULL, 0));
        P("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
        P("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
        P("add_key", syscall(SYS_add_key, "user", "k", "v", 1, 0));
        P("request_key", syscall(SYS_request_key, "user", "k", NULL, 0));
        P("userfaultfd", syscall(SYS_userfaultfd, 0));
        P("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
        P("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
        P("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
        P("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
        P("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
        P("init_module", syscall(SYS_init_module, NULL, 0, ""));
        P("finit_module", syscall(SYS_finit_module, -1, "", 0));
        P("delete_module", syscall(SYS_delete_module, "x", 0));
        P("mount", mount("none", "/mnt", "tmpfs", 0, NULL));
        P("mount_bind", mount("/", "/mnt", NULL, MS_BIND, NULL));
        P("umount2", umount2("/tmp", MNT_DETACH));
        P("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
        P("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
        P("fspick", syscall(SYS_fspick, AT_FDCWD, "/tmp", 0));
        P("fsmount", syscall(SYS_fsmount, -1, 0, 0));
        P("move_mount", syscall(SYS_move_mount, -1, "", AT_FDCWD, "/mnt", 0));
        P("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */));
        P("mount_setattr", syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, NULL, 0));
        P("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
        P("swapon", syscall(SYS_swapon, "/tmp/swap", 0));
        P("swapoff", syscall(SYS_swapoff, "/tmp/swap"));
        P("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
        P("acct", syscall(SYS_acct, NULL));
        P("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, &ts));
        P("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
        P("adjtimex", syscall(SYS_adjtimex, NULL));
        P("setns", syscall(SYS_setns, -1, 0));
        P("unshare_newuser", unshare(CLONE_NEWUSER));
        /* raw clone so glibc's wrappers add nothing; a child that appeared leaves at once */
        long c = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);
        if (c == 0)
                _exit(0);
        if (c > 0)
                waitpid((pid_t)c, NULL, 0);
        report("clone_newuser", c);
        struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
        c = syscall(SYS_clone3, &ca, sizeof ca);
        if (c == 0)
                _exit(0);
        if (c > 0)
                waitpid((pid_t)c, NULL, 0);
        report("clone3", c);
        P("socket_packet", socket(AF_PACKET, SOCK_RAW, 0));
        P("socket_packet_dgram", socket(AF_PACKET, SOCK_DGRAM, 0));
        P("socket_raw4", socket(AF_INET, SOCK_RAW, IPPROTO_RAW));
        P("socket_raw6", socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6));
        P("socket_vsock", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
        P("ioctl_tiocsti", ioctl(0, TIOCSTI, "x"));
        P("modify_ldt", syscall(SYS_modify_ldt, 0, NULL, 0));
        /* What must keep working, as a control: a failure here means the probe is broken. */
        P("ok_socket_tcp", socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        P("ok_getpid", getpid());
        return 0;
}
