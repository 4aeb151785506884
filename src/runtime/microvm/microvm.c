/* The microvm runtime: every sandbox is a QEMU `microvm` machine (docs/runtime-microvm.md).
 * space-init is the guest's /init and speaks the usual protocol over a virtio-serial port
 * whose host end is a socketpair; QMP drives the VM (stop, cont, migrate); a cgroup holds
 * QEMU; checkpoint() writes the migration stream and the session disk as plain files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/macros.h"
#include "common/proto.h"
#include "runtime/cgroup.h"
#include "runtime/fsutil.h"
#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"

#define MV_IMAGE_VERSION 2 /* 2: RAM in its own page-aligned file, not in the stream */
#define MV_MAX_ID 64
#define MV_DEFAULT_MEMORY_MIB 256u
#define MV_MIN_MEMORY_MIB 96u
#define MV_MAX_MEMORY_MIB (64u << 10)
#define MV_QEMU_OVERHEAD_MIB 256u        /* QEMU itself + the TCG translation cache */
#define MV_TB_SIZE_MIB 64u
#define MV_DEFAULT_DISK_MIB 2048u
#define MV_MAX_DISK_MIB (1u << 20)
#define MV_PIDS 256u                      /* QEMU's threads */
#define MV_BOOT_TIMEOUT_MS 90000          /* TCG: ~3 s typical; a loaded host is slower */
/* A KVM boot takes well under a second; one that has not said HELLO by then is on a
 * KVM that cannot run this guest (ARCHITECTURE.md §6): TCG takes over. */
#define MV_KVM_BOOT_TIMEOUT_MS 20000
#define MV_QMP_TIMEOUT_MS 30000
#define MV_MIGRATE_TIMEOUT_MS 300000
#define MV_QMP_LINE_MAX (256u << 10)
#define MV_RAM_DIR "/dev/shm"
/* child fd layout */
#define MV_FD_INIT 3
#define MV_FD_CTL 4
#define MV_FD_QMP 5
#define MV_FD_DISK 6
#define MV_FD_LOWER 7
#define MV_FD_KERNEL 8
#define MV_FD_INITRD 9
#define MV_FD_INCOMING 10
#define MV_FD_SYNC 11
#define MV_FD_DISK_RO 12 /* QEMU probes an image read-only first: an fdset needs both modes */
#define MV_FD_RAM 13     /* guest RAM: a shared file mapping, page-aligned (ram in run_dir) */
#define MV_NFDS 14
/* The guest's virtio-net device is backed by QEMU's user-mode network (libslirp): the
 * guest's connections become QEMU's own sockets, in the prepared netns when the sandbox
 * has a network, else in an empty netns of QEMU's own. Its addressing (guest.c knows it). */
#define MV_NETDEV_BASE "user,id=net0,net=10.0.2.0/24,host=10.0.2.2,dns=10.0.2.3,dhcpstart=10.0.2.15,ipv6-net=fd00:a5ac::/64"
#define MV_NET_UP_TIMEOUT_MS 20000 /* the guest's eth0 appears after virtio-net probes */

struct rt_sandbox {
        char *id, *run_dir, *upper_dir, *guest_dir;
        char *image;           /* template ext4 image (shared, read-only) */
        char image_key[32];
        uint64_t memory_mib;
        struct rt_cgroup *cg;
        int init_sock, ctl_sock, qmp;
        char qbuf[MV_QMP_LINE_MAX];
        size_t qlen;
        int pidfd;
        pid_t pid;
        bool reaped, stopped, unprivileged;
        bool frozen;           /* freeze() said stop, thaw() not yet cont */
        bool kvm;              /* this VM's accelerator: KVM, else TCG */
        /* The VM has the virtio-net device (every one made since; an image taken before
         * has none, and is restored without). */
        bool nic;
        int status;
};

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool id_valid(const char *id) {
        size_t n = id ? strlen(id) : 0;
        if (n == 0 || n > MV_MAX_ID || id[0] == '-' || id[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", id[i]))
                        return false;
        return true;
}

static bool path_valid(const char *p) {
        return p && p[0] == '/' && strlen(p) < MV_MAX_PATH - 64;
}

const char *mv_guest_dir(void) {
        const char *g = getenv("SPACE_GUEST_DIR");
        return g && g[0] == '/' ? g : MV_DEFAULT_GUEST_DIR;
}

/* The guest's TSC runs at the host's rate under TCG; without tsc_early_khz the kernel's
 * calibration against emulated timers hangs most of the time. */
static unsigned long tsc_khz(void) {
        _cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
                double mhz;
                if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 100)
                        return (unsigned long)(mhz * 1000);
        }
        return 2000000;
}

static int poll_one(int fd, short ev, int pidfd, int64_t deadline) {
        for (;;) {
                int64_t left = deadline - now_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p[2] = { { .fd = fd, .events = ev }, { .fd = pidfd, .events = POLLIN } };
                int r = poll(p, pidfd >= 0 ? 2 : 1, (int)MIN(left, 1000));
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r > 0 && p[0].revents)
                        return 0;
                if (r > 0 && pidfd >= 0 && p[1].revents)
                        return -ECHILD; /* QEMU ended */
        }
}

/* ---------------- process ---------------- */

static int reap(struct rt_sandbox *sb, bool block) {
        if (sb->reaped || sb->pidfd < 0)
                return 0;
        int r = rt_pidfd_wait(sb->pidfd, block, &sb->status);
        if (r > 0)
                sb->reaped = true;
        return r < 0 ? r : 0;
}

static void kill_qemu(struct rt_sandbox *sb) {
        if (sb->pidfd < 0 || sb->reaped)
                return;
        (void)syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
        (void)reap(sb, true);
}

/* The last lines QEMU and the guest console wrote, for the error message. */
static void console_tail(struct rt_sandbox *sb, char *buf, size_t n) {
        char p[MV_MAX_PATH];
        snprintf(p, sizeof p, "%s/console.log", sb->run_dir);
        buf[0] = 0;
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return;
        off_t off = st.st_size > (off_t)n - 1 ? st.st_size - (off_t)n + 1 : 0;
        ssize_t k = pread(fd, buf, n - 1, off);
        buf[k > 0 ? k : 0] = 0;
        for (char *c = buf; *c; c++)
                if (*c == '\n' || *c == '\r')
                        *c = ' ';
}

static void fail(struct rt_sandbox *sb, const char *what, int r) {
        char tail[8192];
        console_tail(sb, tail, sizeof tail);
        /* space-init's own last words say most; else QEMU's or the kernel's */
        const char *from = tail, *q;
        for (q = strstr(tail, "space-init"); q; q = strstr(q + 1, "space-init"))
                from = q;
        if (from == tail && strlen(tail) > 300)
                from = tail + strlen(tail) - 300;
        runtime_set_error("microvm: %s: %s%s%.300s", what, strerror(-r), from[0] ? "; console: " : "", from);
}

/* ---------------- QMP ---------------- */

/* Next JSON line from QMP that is not an event. */
static int qmp_read(struct rt_sandbox *sb, int64_t deadline, struct json **ret) {
        for (;;) {
                char *nl = memchr(sb->qbuf, '\n', sb->qlen);
                if (nl) {
                        size_t n = (size_t)(nl - sb->qbuf) + 1;
                        struct json *j = NULL;
                        int r = json_parse(sb->qbuf, n - 1, &j, NULL, 0);
                        memmove(sb->qbuf, sb->qbuf + n, sb->qlen - n);
                        sb->qlen -= n;
                        if (r < 0)
                                return r;
                        if (json_get(j, "event")) {
                                json_free(j);
                                continue;
                        }
                        *ret = j;
                        return 0;
                }
                if (sb->qlen == sizeof sb->qbuf)
                        return -EMSGSIZE;
                int r = poll_one(sb->qmp, POLLIN, -1, deadline);
                if (r < 0)
                        return r;
                ssize_t k = read(sb->qmp, sb->qbuf + sb->qlen, sizeof sb->qbuf - sb->qlen);
                if (k < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -ECONNRESET;
                sb->qlen += (size_t)k;
        }
}

/* Sends one command (with fd over SCM_RIGHTS when >= 0) and waits for its answer. */
static int qmp_cmd_fd(struct rt_sandbox *sb, const char *cmd, int fd, struct json **ret) {
        if (sb->qmp < 0)
                return -ENOTCONN;
        size_t n = strlen(cmd);
        struct iovec iov = { .iov_base = (void *)cmd, .iov_len = n };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (fd >= 0) {
                mh.msg_control = u.buf;
                mh.msg_controllen = sizeof u.buf;
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        if (sendmsg(sb->qmp, &mh, MSG_NOSIGNAL) != (ssize_t)n)
                return -EIO;
        _cleanup_json_ struct json *j = NULL;
        int r = qmp_read(sb, now_ms() + MV_QMP_TIMEOUT_MS, &j);
        if (r < 0)
                return r;
        const struct json *e = json_get(j, "error");
        if (e) {
                const char *d = json_get_str(e, "desc");
                runtime_set_error("microvm: QMP %.60s: %s", cmd, d ? d : "error");
                return -EIO;
        }
        if (ret)
                *ret = TAKE_PTR(j);
        return 0;
}

static int qmp_cmd(struct rt_sandbox *sb, const char *cmd, struct json **ret) {
        return qmp_cmd_fd(sb, cmd, -1, ret);
}

static int qmp_handshake(struct rt_sandbox *sb) {
        _cleanup_json_ struct json *greet = NULL;
        int r = qmp_read(sb, now_ms() + MV_QMP_TIMEOUT_MS, &greet);
        if (r < 0)
                return r;
        if (!json_get(greet, "QMP"))
                return -EPROTO;
        return qmp_cmd(sb, "{\"execute\":\"qmp_capabilities\"}", NULL);
}

/* ---------------- the guest's ports ---------------- */

/* One control command (main.c: 'S' sync, 'R' new connection, 'N' network up), answered by
 * its echo ('E': it failed). */
static int ctl(struct rt_sandbox *sb, char cmd, int timeout_ms) {
        if (send(sb->ctl_sock, &cmd, 1, MSG_NOSIGNAL) != 1)
                return -errno;
        int64_t deadline = now_ms() + timeout_ms;
        for (;;) {
                int r = poll_one(sb->ctl_sock, POLLIN, sb->pidfd, deadline);
                if (r < 0)
                        return r;
                char c;
                ssize_t k = recv(sb->ctl_sock, &c, 1, MSG_DONTWAIT);
                if (k == 1 && c == cmd)
                        return 0;
                if (k == 1 && c == 'E')
                        return -EIO;
                if (k == 0)
                        return -ECONNRESET;
        }
}

/* Drops whatever an earlier connection left on the init port (frames the guest sent just
 * before a checkpoint) until the HELLO of the new one is next, and waits until all of
 * it has arrived (a checkpoint taken right after must not hold part of it in QEMU). */
static int await_hello(struct rt_sandbox *sb, int timeout_ms) {
        int64_t deadline = now_ms() + timeout_ms;
        for (;;) {
                int r = poll_one(sb->init_sock, POLLIN, sb->pidfd, deadline);
                if (r < 0)
                        return r;
                uint8_t h[PROTO_HDR_SIZE];
                ssize_t k = recv(sb->init_sock, h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
                if (k < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -ECONNRESET;
                static const uint8_t magic[4] = { 'S', 'P', 'C', '1' };
                size_t have = (size_t)k;
                if (have == sizeof h && memcmp(h, magic, 4) == 0 && h[5] == PROTO_HELLO) {
                        struct proto_hdr hd;
                        if (proto_hdr_decode(h, &hd) < 0 || hd.len > PROTO_MAX_JSON)
                                return -EPROTO;
                        _cleanup_free_ uint8_t *frame = malloc(PROTO_HDR_SIZE + hd.len);
                        if (!frame)
                                return -ENOMEM;
                        ssize_t got = recv(sb->init_sock, frame, PROTO_HDR_SIZE + hd.len, MSG_PEEK | MSG_DONTWAIT);
                        if (got == (ssize_t)(PROTO_HDR_SIZE + hd.len))
                                return 0;
                        struct timespec ts = { 0, 2000000 };
                        nanosleep(&ts, NULL);
                        continue;
                }
                if (have < sizeof h && memcmp(h, magic, MIN(have, 4)) == 0) {
                        /* a HELLO may be arriving: wait for more bytes */
                        struct timespec ts = { 0, 2000000 };
                        nanosleep(&ts, NULL);
                        continue;
                }
                /* skip to the next possible magic */
                size_t skip = 1;
                while (skip < have && h[skip] != 'S')
                        skip++;
                if (recv(sb->init_sock, h, skip, MSG_DONTWAIT) < 0)
                        return -errno;
        }
}

/* ---------------- QEMU ---------------- */

/* The guest RAM file: on tmpfs when there is one (guest memory written back to a disk
 * would cost I/O for nothing), else in run_dir. Found again from the id (reclaim). */
static void ram_path(const char *id, const char *run_dir, char *buf, size_t n) {
        struct stat st;
        if (stat(MV_RAM_DIR, &st) == 0 && S_ISDIR(st.st_mode))
                snprintf(buf, n, "%s/space-microvm-%s.ram", MV_RAM_DIR, id);
        else
                snprintf(buf, n, "%s/ram", run_dir);
}

struct qemu_fds {
        int fd[MV_NFDS];
};

static void qemu_fds_close(struct qemu_fds *q) {
        for (int i = 0; i < MV_NFDS; i++)
                q->fd[i] = safe_close(q->fd[i]);
}

/* Starts QEMU with the device set of docs/runtime-microvm.md; incoming_fd >= 0 restores
 * from a migration stream instead of booting. */
static int spawn_qemu(struct rt_sandbox *sb, const struct rt_spec *spec, int incoming_fd) {
        struct qemu_fds q;
        for (int i = 0; i < MV_NFDS; i++)
                q.fd[i] = -EBADF;
        int pairs[3][2], r = 0;
        int *mine[3] = { &sb->init_sock, &sb->ctl_sock, &sb->qmp };
        for (int i = 0; i < 3; i++) {
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[i]) < 0) {
                        r = -errno;
                        break;
                }
                *mine[i] = pairs[i][0];
                q.fd[MV_FD_INIT + i] = pairs[i][1];
        }
        char p[MV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/disk.qcow2", sb->run_dir);
        if (r == 0 && (q.fd[MV_FD_DISK] = open(p, O_RDWR | O_CLOEXEC)) < 0)
                r = -errno;
        if (r == 0 && (q.fd[MV_FD_DISK_RO] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
                r = -errno;
        ram_path(sb->id, sb->run_dir, p, sizeof p);
        if (r == 0 && (q.fd[MV_FD_RAM] = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
                r = -errno;
        if (r == 0 && (ftruncate(q.fd[MV_FD_RAM], (off_t)(sb->memory_mib << 20)) < 0 ||
                       (sb->unprivileged && fchown(q.fd[MV_FD_RAM], MV_QEMU_UID, MV_QEMU_UID) < 0)))
                r = -errno;
        if (r == 0 && (q.fd[MV_FD_LOWER] = open(sb->image, O_RDONLY | O_CLOEXEC)) < 0)
                r = -errno;
        snprintf(p, sizeof p, "%s/vmlinux", sb->guest_dir);
        if (r == 0 && (q.fd[MV_FD_KERNEL] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
                r = -errno;
        snprintf(p, sizeof p, "%s/initrd.cpio", sb->run_dir);
        if (r == 0 && (q.fd[MV_FD_INITRD] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
                r = -errno;
        int sync_pipe[2] = { -1, -1 };
        if (r == 0 && pipe2(sync_pipe, O_CLOEXEC) < 0)
                r = -errno;
        q.fd[MV_FD_SYNC] = sync_pipe[0];
        q.fd[MV_FD_INCOMING] = incoming_fd >= 0 ? fcntl(incoming_fd, F_DUPFD_CLOEXEC, 3) : -EBADF;
        snprintf(p, sizeof p, "%s/console.log", sb->run_dir);
        _cleanup_close_ int log = r == 0 ? open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -EBADF;
        if (r == 0 && log < 0)
                r = -errno;
        if (r < 0) {
                qemu_fds_close(&q);
                safe_close(sync_pipe[1]);
                runtime_set_error("microvm: preparing QEMU's files: %s", strerror(-r));
                return r;
        }

        /* Everything the child needs is built here: it must not allocate. */
        char mem[32], append[512], accel[64], kernel[32], initrd[32], chr_init[64], chr_ctl[64], chr_qmp[64];
        char ram[160], add_disk[64], add_disk_ro[64], add_lower[64], drv_disk[128], drv_lower[160];
        snprintf(mem, sizeof mem, "%llu", (unsigned long long)sb->memory_mib);
        unsigned long khz = tsc_khz();
        snprintf(append, sizeof append,
                 "console=ttyS0 panic=-1 reboot=t nokaslr mitigations=off tsc_early_khz=%lu tsc=reliable lpj=%lu "
                 "quiet pci=off rdinit=/init space_hostname=space -- --guest",
                 khz, khz);
        snprintf(accel, sizeof accel, sb->kvm ? "kvm" : "tcg,tb-size=%u", MV_TB_SIZE_MIB);
        snprintf(kernel, sizeof kernel, "/proc/self/fd/%d", MV_FD_KERNEL);
        snprintf(initrd, sizeof initrd, "/proc/self/fd/%d", MV_FD_INITRD);
        snprintf(chr_init, sizeof chr_init, "socket,id=init,fd=%d", MV_FD_INIT);
        snprintf(chr_ctl, sizeof chr_ctl, "socket,id=ctl,fd=%d", MV_FD_CTL);
        snprintf(chr_qmp, sizeof chr_qmp, "socket,id=qmp,fd=%d", MV_FD_QMP);
        snprintf(add_disk, sizeof add_disk, "fd=%d,set=1", MV_FD_DISK);
        snprintf(add_disk_ro, sizeof add_disk_ro, "fd=%d,set=1", MV_FD_DISK_RO);
        /* Guest RAM as a shared mapping of a file, left out of the migration stream
         * (x-ignore-shared): the image's RAM is then that file, page for page. */
        snprintf(ram, sizeof ram, "memory-backend-file,id=ram,size=%lluM,mem-path=/proc/self/fd/%d,share=on",
                 (unsigned long long)sb->memory_mib, MV_FD_RAM);
        snprintf(add_lower, sizeof add_lower, "fd=%d,set=2", MV_FD_LOWER);
        snprintf(drv_disk, sizeof drv_disk, "if=none,id=session,file=/dev/fdset/1,format=qcow2,cache=writeback,file.locking=off");
        snprintf(drv_lower, sizeof drv_lower, "if=none,id=lower,file=/dev/fdset/2,format=raw,readonly=on,file.locking=off");
        /* Without a network, QEMU's netns has nothing, and slirp is told to route nothing. */
        const char *netdev = spec->network ? MV_NETDEV_BASE : MV_NETDEV_BASE ",restrict=on";
        int netns_fd = spec->network ? spec->netns_fd : -EBADF;
        const char *resolv = spec->network ? spec->resolv_conf : NULL;
        const char *argv[80];
        size_t a = 0;
#define ARG(...)                                                       \
        do {                                                           \
                const char *_v[] = { __VA_ARGS__ };                    \
                for (size_t _i = 0; _i < ELEMENTSOF(_v); _i++)         \
                        argv[a++] = _v[_i];                            \
        } while (0)
        ARG(MV_QEMU_BIN, "-name", "space-microvm", "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-accel", accel, "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=ram", "-object", ram,
 "-cpu",
            sb->kvm ? "host" : "qemu64", "-smp", "1", "-m", mem, "-kernel", kernel, "-initrd", initrd, "-append",
            append, "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con", "-chardev", chr_qmp, "-mon",
            "chardev=qmp,mode=control", "-add-fd", add_disk, "-add-fd", add_disk_ro, "-add-fd", add_lower, "-drive", drv_lower, "-device",
            "virtio-blk-device,drive=lower,serial=space-lower", "-drive", drv_disk, "-device",
            "virtio-blk-device,drive=session,serial=space-session", "-device", "virtio-serial-device,max_ports=4",
            "-chardev", chr_init, "-device", "virtserialport,chardev=init,name=space.init,nr=1", "-chardev", chr_ctl,
            "-device", "virtserialport,chardev=ctl,name=space.ctl,nr=2", "-device", "virtio-rng-device", "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
        if (sb->nic)
                ARG("-netdev", netdev, "-device", "virtio-net-device,netdev=net0");
        if (incoming_fd >= 0)
                ARG("-incoming", "defer"); /* started over QMP once x-ignore-shared is on */
        argv[a] = NULL;
#undef ARG
        bool unpriv = sb->unprivileged;
        gid_t gid = MV_QEMU_UID;
        if (unpriv && sb->kvm && mv_kvm_gid(&gid) < 0) {
                qemu_fds_close(&q);
                safe_close(sync_pipe[1]);
                runtime_set_error("microvm: /dev/kvm is not open to the unprivileged QEMU's group");
                return -EACCES;
        }

        int pidfd = -1;
        struct clone_args ca = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = 0 };
        pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0) {
                /* child: first its network (netns_fd may be any number), then its resolver:
                 * slirp forwards the guest's DNS (10.0.2.3) to the first nameserver of
                 * the /etc/resolv.conf QEMU sees, so it sees the room's. */
                if (netns_fd >= 0 ? setns(netns_fd, CLONE_NEWNET) < 0 : unshare(CLONE_NEWNET) < 0)
                        _exit(124);
                if (resolv && (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                               mount(resolv, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0 ||
                               mount(NULL, "/etc/resolv.conf", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0))
                        _exit(123);
                /* fds to their places (via high numbers: sources may overlap targets) */
                int hi[MV_NFDS];
                for (int i = 0; i < MV_NFDS; i++)
                        hi[i] = q.fd[i] >= 0 ? fcntl(q.fd[i], F_DUPFD, 100) : -1;
                int nul = open("/dev/null", O_RDONLY);
                dup2(nul, 0);
                dup2(log, 1);
                dup2(log, 2);
                for (int i = 3; i < MV_NFDS; i++)
                        if (hi[i] >= 0)
                                dup2(hi[i], i);
                syscall(SYS_close_range, MV_NFDS, ~0u, 0);
                char c;
                if (read(MV_FD_SYNC, &c, 1) != 1)
                        _exit(125); /* the parent gave up */
                close(MV_FD_SYNC);
                if (unpriv && rt_child_setids(MV_QEMU_UID, gid) < 0)
                        _exit(126);
                execvp(argv[0], (char *const *)argv);
                _exit(127);
        }
        int e = errno;
        qemu_fds_close(&q);
        if (pid < 0) {
                safe_close(sync_pipe[1]);
                runtime_set_error("microvm: clone3: %s", strerror(e));
                return -e;
        }
        sb->pid = pid;
        sb->pidfd = pidfd;
        sb->reaped = false;
        r = rt_cgroup_attach(sb->cg, pid);
        if (r == 0 && write(sync_pipe[1], "g", 1) != 1)
                r = -errno;
        safe_close(sync_pipe[1]);
        if (r < 0) {
                kill_qemu(sb);
                runtime_set_error("microvm: QEMU into its cgroup: %s", strerror(-r));
                return r;
        }
        r = qmp_handshake(sb);
        if (r < 0) {
                kill_qemu(sb);
                fail(sb, "QMP", r);
        }
        return r;
}

/* Polls a QMP query until its "status" is no longer `busy` (prefix match: "inmigrate",
 * "active", "setup", …); the final status goes to st. */
static int qmp_wait_status(struct rt_sandbox *sb, const char *query, const char *const *busy, char *st, size_t n) {
        int64_t deadline = now_ms() + MV_MIGRATE_TIMEOUT_MS;
        struct timespec ts = { 0, 5 * 1000000 };
        while (now_ms() < deadline) {
                _cleanup_json_ struct json *j = NULL;
                int r = qmp_cmd(sb, query, &j);
                if (r < 0)
                        return r;
                const char *v = json_get_str(json_get(j, "return"), "status");
                bool waiting = false;
                for (size_t i = 0; v && busy[i]; i++)
                        waiting |= strcmp(v, busy[i]) == 0;
                if (!waiting) {
                        const char *d = json_get_str(json_get(j, "return"), "error-desc");
                        snprintf(st, n, "%s%s%s", v ? v : "none", d ? ": " : "", d ? d : "");
                        return 0;
                }
                nanosleep(&ts, NULL);
        }
        return -ETIMEDOUT;
}

#define MV_QMP_IGNORE_SHARED                                                                        \
        "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":[{\"capability\":" \
        "\"x-ignore-shared\",\"state\":true}]}}"

/* Loads the stream (RAM comes from the ram file: x-ignore-shared on both ends). A
 * restored VM comes up in the run state it was saved in, paused (checkpoint stops it
 * before migrating): once loaded, it is let run. */
static int resume_incoming(struct rt_sandbox *sb) {
        static const char *const busy[] = { "inmigrate", NULL };
        char st[256], cmd[128];
        snprintf(cmd, sizeof cmd, "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"fd:%d\"}}", MV_FD_INCOMING);
        int r = qmp_cmd(sb, MV_QMP_IGNORE_SHARED, NULL);
        if (r == 0)
                r = qmp_cmd(sb, cmd, NULL);
        if (r == 0)
                r = qmp_wait_status(sb, "{\"execute\":\"query-status\"}", busy, st, sizeof st);
        if (r < 0 || strcmp(st, "running") == 0)
                return r;
        return qmp_cmd(sb, "{\"execute\":\"cont\"}", NULL);
}

/* After boot or restore: a fresh connection on the init port with its HELLO next. */
static int connect_init(struct rt_sandbox *sb, int timeout_ms) {
        int r = ctl(sb, 'R', timeout_ms);
        if (r == 0)
                r = await_hello(sb, timeout_ms);
        return r;
}

/* ---------------- create / destroy ---------------- */

static void sandbox_files_remove(const char *id, const char *run_dir) {
        char ram[MV_MAX_PATH + 32];
        ram_path(id, run_dir, ram, sizeof ram);
        (void)unlink(ram);
        static const char *const names[] = { "disk.qcow2", "initrd.cpio", "console.log", "export.raw" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                char p[MV_MAX_PATH + 32];
                snprintf(p, sizeof p, "%s/%s", run_dir, names[i]);
                (void)unlink(p);
        }
        static const char *const dirs[] = { "export", "stage", "lower" };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                char p[MV_MAX_PATH + 32];
                snprintf(p, sizeof p, "%s/%s", run_dir, dirs[i]);
                (void)umount2(p, MNT_DETACH);
                (void)rt_rm_rf(p);
        }
}

static void sandbox_free(struct rt_sandbox *sb) {
        if (!sb)
                return;
        safe_close(sb->init_sock);
        safe_close(sb->ctl_sock);
        safe_close(sb->qmp);
        safe_close(sb->pidfd);
        rt_cgroup_free(sb->cg);
        free(sb->id);
        free(sb->run_dir);
        free(sb->upper_dir);
        free(sb->guest_dir);
        free(sb->image);
        free(sb);
}

static int mv_destroy(struct rt_sandbox *sb) {
        if (!sb)
                return 0;
        int ret = 0, r;
        kill_qemu(sb);
        if (sb->cg) {
                if ((r = rt_cgroup_kill_all(sb->cg)) < 0 && ret == 0)
                        ret = r;
                if ((r = rt_cgroup_remove(sb->cg)) < 0 && ret == 0)
                        ret = r;
        }
        sandbox_files_remove(sb->id, sb->run_dir);
        if (ret < 0)
                runtime_set_error("microvm: destroy %s: %s", sb->id, strerror(-ret));
        sandbox_free(sb);
        return ret;
}

static int mv_host_init(const char *data_dir) {
        (void)data_dir;
        int r = rt_cgroup_host_init(NULL);
        if (r < 0) {
                runtime_set_error("microvm: cgroup parent: %s", strerror(-r));
                return r;
        }
        char p[MV_MAX_PATH];
        snprintf(p, sizeof p, "%s/vmlinux", mv_guest_dir());
        if (access(p, R_OK) < 0) {
                r = -errno;
                runtime_set_error("microvm: no guest kernel at %s (run scripts/build-guest)", p);
                return r;
        }
        /* decided once per process (a probe of milliseconds, or the per-boot cache) */
        struct rt_accel_info ai;
        return rt_microvm_accel_info(&ai);
}

struct image_meta {
        uint64_t memory_mib;
        char image[32];
        bool kvm; /* saved under KVM (images without "accel" are TCG's) */
        bool nic; /* the VM had the virtio-net device (images without "nic" had none) */
};

static int meta_write(const char *dir, const struct rt_sandbox *sb) {
        char p[MV_MAX_PATH + 32], text[256];
        snprintf(p, sizeof p, "%s/microvm.json", dir);
        snprintf(text, sizeof text,
                 "{\"driver\":\"microvm\",\"version\":%d,\"memory_mib\":%llu,\"image\":\"%s\",\"accel\":\"%s\",\"nic\":%s}\n",
                 MV_IMAGE_VERSION, (unsigned long long)sb->memory_mib, sb->image_key, sb->kvm ? "kvm" : "tcg",
                 sb->nic ? "true" : "false");
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        size_t n = strlen(text);
        return write(fd, text, n) == (ssize_t)n ? 0 : -EIO;
}

static int meta_read(const char *dir, struct image_meta *ret) {
        char p[MV_MAX_PATH + 32], text[1024];
        snprintf(p, sizeof p, "%s/microvm.json", dir);
        int n = rt_read_file(p, text, sizeof text);
        if (n < 0)
                return n == -ENOENT ? -EINVAL : n;
        _cleanup_json_ struct json *j = NULL;
        if (json_parse(text, (size_t)n, &j, NULL, 0) < 0)
                return -EINVAL;
        int64_t v = 0, mib = 0;
        const char *drv = json_get_str(j, "driver"), *img = json_get_str(j, "image"),
                   *accel = json_get_str(j, "accel");
        if (!drv || strcmp(drv, "microvm") || json_get_int(j, "version", &v) < 0 || v != MV_IMAGE_VERSION ||
            json_get_int(j, "memory_mib", &mib) < 0 || mib < MV_MIN_MEMORY_MIB || mib > MV_MAX_MEMORY_MIB || !img ||
            strlen(img) >= sizeof ret->image || (accel && strcmp(accel, "kvm") && strcmp(accel, "tcg")))
                return -EINVAL;
        ret->memory_mib = (uint64_t)mib;
        ret->kvm = accel && strcmp(accel, "kvm") == 0;
        ret->nic = json_get_bool(j, "nic", false);
        snprintf(ret->image, sizeof ret->image, "%s", img);
        return 0;
}

/* QEMU reads its files through fds, but still needs to traverse nothing of ours: it can
 * run as an unprivileged user as long as that user can read the guest kernel's inode
 * (world-readable) and /proc/self/fd of itself. */
bool mv_unprivileged(void) {
        const char *e = getenv("SPACE_MICROVM_PRIVILEGED");
        return geteuid() == 0 && !(e && strcmp(e, "1") == 0);
}

static int warm_dir(const struct rt_sandbox *sb, const struct rt_spec *spec, char *buf, size_t n) {
        struct stat st;
        if (stat(spec->init_path, &st) < 0)
                return -errno;
        snprintf(buf, n, "%s/warm/v%d-%s-%lluM-%llx-%llx-%s-nic", sb->guest_dir, MV_IMAGE_VERSION, sb->image_key,
                 (unsigned long long)sb->memory_mib, (unsigned long long)st.st_mtim.tv_sec,
                 (unsigned long long)st.st_size, sb->kvm ? "kvm" : "tcg");
        return 0;
}

/* A new warm image supersedes the template's older ones (another space-init, an
 * older image version): they would never be used again. */
static void warm_prune(const struct rt_sandbox *sb, const char *keep) {
        char dir[MV_MAX_PATH + 16], mine[64];
        snprintf(dir, sizeof dir, "%s/warm", sb->guest_dir);
        snprintf(mine, sizeof mine, "-%s-%lluM-", sb->image_key, (unsigned long long)sb->memory_mib);
        const char *base = strrchr(keep, '/');
        base = base ? base + 1 : keep;
        _cleanup_closedir_ DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
                if (strstr(de->d_name, mine) && !strstr(de->d_name, ".tmp") && strcmp(de->d_name, base) != 0)
                        (void)rt_rm_rf_at(dirfd(d), de->d_name);
}

static bool warm_enabled(void) {
        const char *e = getenv("SPACE_MICROVM_WARM");
        return !(e && strcmp(e, "0") == 0);
}

static int mv_checkpoint(struct rt_sandbox *sb, const char *dir, bool leave_running);

static int dir_has_files(const char *path) {
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        return 1;
        return 0;
}

/* After a failed start: nothing of that QEMU is left, and the next start begins with
 * fresh RAM (holes, not the failed VM's pages). */
static void vm_reset(struct rt_sandbox *sb) {
        kill_qemu(sb);
        sb->init_sock = safe_close(sb->init_sock);
        sb->ctl_sock = safe_close(sb->ctl_sock);
        sb->qmp = safe_close(sb->qmp);
        sb->pidfd = safe_close(sb->pidfd);
        sb->qlen = 0;
        char ram[MV_MAX_PATH + 32];
        ram_path(sb->id, sb->run_dir, ram, sizeof ram);
        (void)unlink(ram);
}

/* Boots (or restores from `from`, a checkpoint directory) the VM of sb. */
static int start_vm(struct rt_sandbox *sb, const struct rt_spec *spec, const char *from) {
        char disk[MV_MAX_PATH + 32];
        snprintf(disk, sizeof disk, "%s/disk.qcow2", sb->run_dir);
        int r;
        _cleanup_close_ int mem = -EBADF;
        if (from) {
                char p[MV_MAX_PATH + 32];
                snprintf(p, sizeof p, "%s/disk.qcow2", from);
                r = mv_copy_file(p, disk);
                char ram[MV_MAX_PATH + 32];
                snprintf(p, sizeof p, "%s/ram", from);
                ram_path(sb->id, sb->run_dir, ram, sizeof ram);
                if (r == 0)
                        r = mv_copy_file(p, ram);
                snprintf(p, sizeof p, "%s/memory", from);
                if (r == 0 && (mem = open(p, O_RDONLY | O_CLOEXEC)) < 0)
                        r = -errno;
                if (r < 0) {
                        runtime_set_error("microvm: image %s: %s", from, strerror(-r));
                        return r;
                }
        } else {
                uint64_t mib = spec->limits.disk_bytes ? spec->limits.disk_bytes >> 20 : MV_DEFAULT_DISK_MIB;
                if (mib < 64 || mib > MV_MAX_DISK_MIB) {
                        runtime_set_error("microvm: disk limit %llu MiB out of range", (unsigned long long)mib);
                        return -EINVAL;
                }
                r = mv_session_disk(sb->guest_dir, spec->lower_dirs, spec->upper_dir, sb->run_dir, mib, disk);
                if (r < 0) {
                        if (!runtime_last_error()[0])
                                runtime_set_error("microvm: session disk: %s", strerror(-r));
                        return r;
                }
        }
        /* QEMU runs as MV_QEMU_UID then, and could not open a disk it does not own */
        if (sb->unprivileged && chown(disk, MV_QEMU_UID, MV_QEMU_UID) < 0) {
                r = -errno;
                runtime_set_error("microvm: giving the session disk %s to QEMU's uid %u: %s", disk,
                                  (unsigned)MV_QEMU_UID, strerror(-r));
                return r;
        }
        r = spawn_qemu(sb, spec, mem);
        if (r < 0)
                return r;
        if (from && (r = resume_incoming(sb)) < 0) {
                kill_qemu(sb);
                fail(sb, "loading the memory image", r);
                return r;
        }
        r = connect_init(sb, from ? MV_QMP_TIMEOUT_MS : sb->kvm ? MV_KVM_BOOT_TIMEOUT_MS : MV_BOOT_TIMEOUT_MS);
        if (r < 0) {
                kill_qemu(sb);
                fail(sb, from ? "restore" : "boot", r);
                return r;
        }
        return 0;
}

/* With a network, the guest brings eth0 up with slirp's addressing and points its
 * /etc/resolv.conf at slirp's DNS (main.c, 'N'); idempotent, so also after a restore
 * of a VM that had it up already. Without one the guest's eth0 may be up (a restored
 * image of a networked VM), but QEMU's own netns leads nowhere. */
static int net_up(struct rt_sandbox *sb, const struct rt_spec *spec) {
        if (!spec->network)
                return 0;
        int r = ctl(sb, 'N', MV_NET_UP_TIMEOUT_MS);
        if (r < 0)
                runtime_set_error("microvm: the guest did not bring its network up: %s (console.log in %s)",
                                  strerror(-r), sb->run_dir);
        return r;
}

static int mv_create(const struct rt_spec *spec, struct rt_sandbox **ret) {
        if (!spec || !id_valid(spec->id) || !path_valid(spec->run_dir) || !path_valid(spec->init_path) ||
            !spec->lower_dirs || !spec->lower_dirs[0] || (spec->upper_dir && !path_valid(spec->upper_dir))) {
                runtime_set_error("microvm: invalid spec");
                return -EINVAL;
        }
        runtime_set_error("%s", "");
        if (spec->network && !rt_is_netns(spec->netns_fd)) {
                runtime_set_error("microvm: netns_fd %d is not a network namespace", spec->netns_fd);
                return -EINVAL;
        }
        if (spec->network && spec->resolv_conf && !path_valid(spec->resolv_conf)) {
                runtime_set_error("microvm: resolv_conf must be an absolute path");
                return -EINVAL;
        }
        uint64_t mib = spec->limits.memory_bytes ? spec->limits.memory_bytes >> 20 : MV_DEFAULT_MEMORY_MIB;
        if (mib < MV_MIN_MEMORY_MIB || mib > MV_MAX_MEMORY_MIB) {
                runtime_set_error("microvm: memory limit %llu MiB: a VM needs %u..%u MiB", (unsigned long long)mib,
                                  MV_MIN_MEMORY_MIB, MV_MAX_MEMORY_MIB);
                return -EINVAL;
        }
        struct image_meta meta = { 0 };
        if (spec->restore_dir) {
                int r = meta_read(spec->restore_dir, &meta);
                if (r < 0) {
                        runtime_set_error("microvm: %s is not a microvm image of this version", spec->restore_dir);
                        return -EINVAL;
                }
                mib = meta.memory_mib; /* the saved machine's size, whatever the limit says now */
        }
        struct rt_sandbox *sb = calloc(1, sizeof *sb);
        if (!sb)
                return -ENOMEM;
        sb->init_sock = sb->ctl_sock = sb->qmp = sb->pidfd = -EBADF;
        sb->reaped = true;
        sb->memory_mib = mib;
        sb->unprivileged = mv_unprivileged();
        sb->id = strdup(spec->id);
        sb->run_dir = strdup(spec->run_dir);
        sb->upper_dir = spec->upper_dir ? strdup(spec->upper_dir) : NULL;
        sb->guest_dir = strdup(mv_guest_dir());
        int r = (!sb->id || !sb->run_dir || !sb->guest_dir || (spec->upper_dir && !sb->upper_dir)) ? -ENOMEM : 0;
        struct rt_accel_info ai = { 0 };
        if (r == 0)
                r = mv_host_init(NULL);
        if (r == 0 && (r = rt_microvm_accel_info(&ai)) == 0)
                sb->kvm = strcmp(ai.name, "kvm") == 0;
        bool probed_kvm = sb->kvm && ai.min_ips > 0; /* auto said kvm: a failed boot falls back */
        if (r == 0 && spec->restore_dir && meta.kvm && !sb->kvm) {
                runtime_set_error("microvm: image %s was saved under KVM; this host uses TCG (%s)", spec->restore_dir,
                                  ai.reason);
                r = -EINVAL;
        }
        if (spec->restore_dir)
                sb->kvm = meta.kvm; /* a TCG image restores under TCG, on any host */
        sb->nic = spec->restore_dir ? meta.nic : true;
        if (r == 0 && spec->network && !sb->nic) {
                runtime_set_error("microvm: image %s was saved by a VM without a network device; it cannot "
                                  "have a network", spec->restore_dir);
                r = -EOPNOTSUPP;
        }
        if (r == 0 && (r = mv_image_key(spec->lower_dirs, sb->image_key, sizeof sb->image_key)) < 0)
                runtime_set_error("microvm: template %s: %s", mv_template_dir(spec->lower_dirs), strerror(-r));
        if (r == 0 && spec->restore_dir && strcmp(meta.image, sb->image_key) != 0) {
                runtime_set_error("microvm: image %s was made from another template", spec->restore_dir);
                r = -EINVAL;
        }
        if (r == 0)
                r = mv_template_image(sb->guest_dir, spec->lower_dirs, &sb->image);
        char p[MV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/initrd.cpio", spec->run_dir);
        if (r == 0 && (r = mv_initramfs(sb->guest_dir, spec->init_path, p)) < 0)
                runtime_set_error("microvm: initramfs: %s", strerror(-r));
        if (r == 0 && (r = rt_cgroup_create(NULL, spec->id, &sb->cg)) < 0)
                runtime_set_error("microvm: cgroup %s: %s", spec->id, strerror(-r));
        if (r == 0 && (r = rt_cgroup_set_memory(sb->cg, (mib + MV_QEMU_OVERHEAD_MIB) << 20)) < 0)
                runtime_set_error("microvm: memory limit: %s", strerror(-r));
        if (r == 0 && (r = rt_cgroup_set_cpu(sb->cg, spec->limits.cpu_millis)) < 0)
                runtime_set_error("microvm: cpu limit: %s", strerror(-r));
        if (r == 0 && (r = rt_cgroup_set_pids(sb->cg, MV_PIDS)) < 0)
                runtime_set_error("microvm: pids limit: %s", strerror(-r));
        if (r < 0) {
                mv_destroy(sb);
                return r;
        }
        bool fresh = !spec->restore_dir && !strchr(spec->lower_dirs, ':') &&
                     !(spec->upper_dir && dir_has_files(spec->upper_dir));
        char warm[MV_MAX_PATH + 128] = "";
        if (fresh && warm_enabled() && warm_dir(sb, spec, warm, sizeof warm) == 0 && meta_read(warm, &meta) == 0) {
                /* warm start: the template's booted VM, restored */
                r = start_vm(sb, spec, warm);
                if (r == 0 && (r = net_up(sb, spec)) == 0) {
                        *ret = sb;
                        return 0;
                }
                /* a broken warm image is dropped; boot instead */
                (void)rt_rm_rf(warm);
                vm_reset(sb);
        }
        r = start_vm(sb, spec, spec->restore_dir);
        if (r < 0 && sb->kvm && probed_kvm && !spec->restore_dir && sb->pidfd >= 0) {
                /* QEMU ran but the guest never said HELLO: never hang on a KVM that cannot
                 * run it; TCG for this create and every later one of this host boot */
                char why[sizeof ((struct rt_accel_info *)0)->reason];
                snprintf(why, sizeof why, "a KVM boot did not reach HELLO (limit %d s), TCG since: %.250s",
                         MV_KVM_BOOT_TIMEOUT_MS / 1000, runtime_last_error());
                (void)mv_accel_mark_failed(sb->guest_dir, why);
                vm_reset(sb);
                sb->kvm = false;
                runtime_set_error("%s", "");
                r = start_vm(sb, spec, NULL);
                if (r == 0 && warm[0] && warm_dir(sb, spec, warm, sizeof warm) < 0)
                        warm[0] = 0;
        }
        if (r == 0 && fresh && warm[0] && warm_enabled()) {
                /* the first boot of a template leaves its warm image for the next creates */
                char tmp[MV_MAX_PATH + 160];
                snprintf(tmp, sizeof tmp, "%s.tmp%d", warm, (int)getpid());
                (void)rt_rm_rf(tmp);
                /* this boot's HELLO stays queued for the caller: the checkpoint lets the
                 * connection go on */
                if ((r = rt_mkdir_p(tmp, 0755)) == 0) {
                        char *saved_upper = sb->upper_dir;
                        sb->upper_dir = NULL; /* nothing to export: the guest wrote nothing yet */
                        r = mv_checkpoint(sb, tmp, true);
                        sb->upper_dir = saved_upper;
                        /* a stale or broken one (it did not load above) is replaced; a
                         * concurrent create's is as good as ours */
                        if (r == 0 && meta_read(warm, &meta) < 0)
                                (void)rt_rm_rf(warm);
                        if (r == 0 && rename(tmp, warm) < 0 && errno != EEXIST && errno != ENOTEMPTY) {
                                r = -errno;
                                runtime_set_error("microvm: warm image %s: %s", warm, strerror(-r));
                        }
                        if (r == 0)
                                warm_prune(sb, warm);
                        (void)rt_rm_rf(tmp);
                }
        }
        if (r == 0)
                r = net_up(sb, spec);
        if (r < 0) {
                mv_destroy(sb);
                return r;
        }
        *ret = sb;
        return 0;
}

/* ---------------- the rest of the table ---------------- */

static int mv_init_fd(struct rt_sandbox *sb) {
        return sb->init_sock;
}

static int mv_pid_fd(struct rt_sandbox *sb) {
        return sb->pidfd;
}

static pid_t mv_init_pid(struct rt_sandbox *sb) {
        return sb->pid;
}

/* QMP stop (run false) or cont; freeze/thaw keep `frozen` for checkpoint. */
static int set_running(struct rt_sandbox *sb, bool run) {
        int r = qmp_cmd(sb, run ? "{\"execute\":\"cont\"}" : "{\"execute\":\"stop\"}", NULL);
        if (r < 0 && !runtime_last_error()[0])
                runtime_set_error("microvm: %s %s: %s", run ? "cont" : "stop", sb->id, strerror(-r));
        if (r == 0)
                sb->frozen = !run;
        return r;
}

static int mv_freeze(struct rt_sandbox *sb) {
        return set_running(sb, false);
}

static int mv_thaw(struct rt_sandbox *sb) {
        return set_running(sb, true);
}

static int mv_health(struct rt_sandbox *sb, struct rt_health *ret) {
        int r = reap(sb, false);
        if (r < 0)
                return r;
        struct rt_health h = { .alive = !sb->reaped && !sb->stopped, .init_status = sb->status };
        r = rt_cgroup_usage(sb->cg, &h.oom_killed, &h.memory_bytes, &h.pids);
        if (r < 0)
                return r;
        (void)rt_cgroup_cpu_usage_ns(sb->cg, &h.cpu_ns); /* for metrics: informative */
        (void)rt_cgroup_memory_limit(sb->cg, &h.memory_limit_bytes);
        *ret = h;
        return 0;
}

static void mv_release(struct rt_sandbox *sb) {
        sandbox_free(sb);
}

static int wait_migration(struct rt_sandbox *sb) {
        static const char *const busy[] = { "none", "setup", "active", "pre-switchover", "device", NULL };
        char st[256];
        int r = qmp_wait_status(sb, "{\"execute\":\"query-migrate\"}", busy, st, sizeof st);
        if (r == 0 && strcmp(st, "completed") != 0) {
                runtime_set_error("microvm: migration %s", st);
                r = -EIO;
        }
        return r;
}

static int mv_checkpoint(struct rt_sandbox *sb, const char *dir, bool leave_running) {
        if (!sb || !dir || sb->reaped || sb->stopped)
                return -EINVAL;
        runtime_set_error("%s", "");
        /* the guest's page cache goes to the session disk first: the host reads it (a
         * frozen VM runs for that moment; it is stopped again below) */
        int r = sb->frozen ? qmp_cmd(sb, "{\"execute\":\"cont\"}", NULL) : 0;
        if (r == 0)
                r = ctl(sb, 'S', MV_QMP_TIMEOUT_MS);
        if (r < 0 && sb->frozen)
                (void)qmp_cmd(sb, "{\"execute\":\"stop\"}", NULL);
        if (r < 0) {
                fail(sb, "guest sync", r);
                return r;
        }
        char p[MV_MAX_PATH + 32];
        snprintf(p, sizeof p, "%s/memory", dir);
        _cleanup_close_ int mem = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (mem < 0) {
                r = -errno;
                runtime_set_error("microvm: %s: %s", p, strerror(-r));
                return r;
        }
        /* stop drains and flushes QEMU's block layer; the stream is then one pass */
        if ((r = qmp_cmd(sb, "{\"execute\":\"stop\"}", NULL)) < 0 ||
            (r = qmp_cmd(sb,
                         "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":"
                         "1099511627776}}",
                         NULL)) < 0 ||
            (r = qmp_cmd(sb, MV_QMP_IGNORE_SHARED, NULL)) < 0 ||
            (r = qmp_cmd_fd(sb, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"snap\"}}", mem, NULL)) < 0 ||
            (r = qmp_cmd(sb, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:snap\"}}", NULL)) < 0 ||
            (r = wait_migration(sb)) < 0) {
                if (!runtime_last_error()[0])
                        fail(sb, "checkpoint", r);
                (void)qmp_cmd(sb, sb->frozen ? "{\"execute\":\"stop\"}" : "{\"execute\":\"cont\"}", NULL);
                return r;
        }
        if (fsync(mem) < 0) {
                r = -errno;
                runtime_set_error("microvm: %s: %s", p, strerror(-r));
                return r;
        }
        char disk[MV_MAX_PATH + 32];
        snprintf(disk, sizeof disk, "%s/disk.qcow2", sb->run_dir);
        snprintf(p, sizeof p, "%s/disk.qcow2", dir);
        char ram[MV_MAX_PATH + 32], ram_img[MV_MAX_PATH + 32];
        ram_path(sb->id, sb->run_dir, ram, sizeof ram);
        snprintf(ram_img, sizeof ram_img, "%s/ram", dir);
        if ((r = mv_copy_file(disk, p)) < 0 || (r = mv_copy_file(ram, ram_img)) < 0 || (r = meta_write(dir, sb)) < 0) {
                runtime_set_error("microvm: image files in %s: %s", dir, strerror(-r));
                return r;
        }
        if (sb->upper_dir && (r = mv_export_upper(p, sb->run_dir, sb->upper_dir)) < 0)
                return r;
        if (!leave_running) {
                kill_qemu(sb);
                sb->stopped = true;
                return 0;
        }
        /* The same QEMU goes on: the init port's connection was never interrupted. */
        if (!sb->frozen && (r = qmp_cmd(sb, "{\"execute\":\"cont\"}", NULL)) < 0) {
                if (!runtime_last_error()[0])
                        fail(sb, "resume after checkpoint", r);
                return r;
        }
        return 0;
}

static int mv_reclaim(const char *id, const char *run_dir) {
        if (!id_valid(id) || !path_valid(run_dir))
                return -EINVAL;
        /* QEMU and nothing else is in the cgroup */
        int ret = rt_cgroup_reclaim(NULL, id);
        sandbox_files_remove(id, run_dir);
        if (ret < 0)
                runtime_set_error("microvm: reclaim of %s: %s", id, strerror(-ret));
        return ret;
}

const struct runtime_ops rt_microvm_ops = {
        .name = "microvm",
        /* netns_fd stays NULL: a server in the guest listens behind slirp, in no netns. */
        .network = true,
        .memory_snapshots = true,
        .live_checkpoint = true,
        .merged_upper = true,
        .image_in_place = true,
        .host_init = mv_host_init,
        .create = mv_create,
        .adopt = NULL,
        .init_fd = mv_init_fd,
        .pid_fd = mv_pid_fd,
        .init_pid = mv_init_pid,
        .freeze = mv_freeze,
        .thaw = mv_thaw,
        .health = mv_health,
        .release = mv_release,
        .checkpoint = mv_checkpoint,
        .destroy = mv_destroy,
        .reclaim = mv_reclaim,
};
