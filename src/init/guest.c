/* space-init as the /init of a microVM's initramfs (--guest): loads the virtio modules,
 * builds the sandbox root (an overlay of the read-only template disk and the session
 * disk), moves into it and finds the virtio-serial ports it talks to the host through.
 * The layout is the contract with src/runtime/microvm/ (docs/runtime-microvm.md). */
#include <dirent.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "init/init.h"

#define GUEST_MODULE_DIR "/modules"      /* NN-name.ko, loaded in name order */
#define GUEST_DISK_WAIT_MS 20000         /* virtio-blk probing is slow under TCG */
#define GUEST_LOWER "/mnt/lower"          /* template disk, read-only */
#define GUEST_SESSION "/mnt/session"      /* session disk: upper/ and work/ */
#define GUEST_NEWROOT "/newroot"
#define GUEST_SERIAL_LOWER "space-lower"
#define GUEST_SERIAL_SESSION "space-session"
#define GUEST_PORT_INIT "space.init"
#define GUEST_PORT_CTL "space.ctl"
/* QEMU's -netdev user of the microvm driver (MV_NETDEV_BASE in microvm.c) */
#define GUEST_NET_IF "eth0"
#define GUEST_NET_ADDR "10.0.2.15"
#define GUEST_NET_MASK "255.255.255.0"
#define GUEST_NET_GW "10.0.2.2"
#define GUEST_NET_RESOLV "nameserver 10.0.2.3\n"
#define GUEST_NET_RESOLV_FILE "/run/space-resolv.conf"

static int load_modules(void) {
        _cleanup_closedir_ DIR *d = opendir(GUEST_MODULE_DIR);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        char *names[64];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < ELEMENTSOF(names))
                if (de->d_name[0] != '.')
                        names[n++] = strdup(de->d_name);
        /* insertion sort: a handful of names, and dependency order is their prefix */
        for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && names[j] && names[j - 1] && strcmp(names[j - 1], names[j]) > 0; j--) {
                        char *t = names[j];
                        names[j] = names[j - 1];
                        names[j - 1] = t;
                }
        int ret = 0;
        for (size_t i = 0; i < n; i++) {
                if (!names[i]) {
                        ret = -ENOMEM;
                        continue;
                }
                int fd = openat(dirfd(d), names[i], O_RDONLY | O_CLOEXEC);
                if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)) {
                        log_error("guest: module %s: %m", names[i]);
                        if (ret == 0)
                                ret = -errno;
                }
                if (fd >= 0)
                        close(fd);
                free(names[i]);
        }
        return ret;
}

static int wait_for(const char *path) {
        struct timespec ts = { 0, 5 * 1000000 };
        for (int waited = 0; waited < GUEST_DISK_WAIT_MS; waited += 5) {
                if (access(path, F_OK) == 0)
                        return 0;
                nanosleep(&ts, NULL);
        }
        return -ETIMEDOUT;
}

/* A one-line sysfs attribute, newline dropped; false if unreadable or empty. */
static bool read_attr(const char *path, char *val, size_t n) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t k = read(fd, val, n - 1);
        close(fd);
        if (k <= 0)
                return false;
        val[k] = 0;
        val[strcspn(val, "\n")] = 0;
        return true;
}

/* /dev/vdX of the virtio disk whose serial the host set (the probe order of virtio-mmio
 * devices is not the command line's). */
static int find_disk(const char *serial, char *dev, size_t n) {
        struct timespec ts = { 0, 5 * 1000000 };
        for (int waited = 0; waited < GUEST_DISK_WAIT_MS; waited += 5) {
                DIR *d = opendir("/sys/block");
                struct dirent *de;
                while (d && (de = readdir(d))) {
                        if (strncmp(de->d_name, "vd", 2) != 0)
                                continue;
                        char p[300], val[64];
                        snprintf(p, sizeof p, "/sys/block/%s/serial", de->d_name);
                        if (read_attr(p, val, sizeof val) && strcmp(val, serial) == 0) {
                                snprintf(dev, n, "/dev/%.32s", de->d_name);
                                closedir(d);
                                return wait_for(dev);
                        }
                }
                if (d)
                        closedir(d);
                nanosleep(&ts, NULL);
        }
        return -ETIMEDOUT;
}

static int mount_at(const char *src, const char *dst, const char *type, unsigned long fl, const char *data) {
        (void)mkdir(dst, 0755);
        if (mount(src, dst, type, fl, data) < 0) {
                int e = -errno;
                log_error("guest: mount %s on %s: %m", src, dst);
                return e;
        }
        return 0;
}

static void loopback_up(void) {
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return;
        struct ifreq ifr = { 0 };
        strcpy(ifr.ifr_name, "lo");
        if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                (void)ioctl(s, SIOCSIFFLAGS, &ifr);
        }
        close(s);
}

/* Runs the shell once, so that it, its loader and libc are in the page cache before the
 * template's warm image is taken from this boot: every VM restored from that image then
 * runs its first command without reading them from the disk (slow under TCG), and that
 * command does not fill hundreds of free pages with them between two snapshots (a second
 * snapshot stores what changed: docs/performance.md, "microVM sandboxes"). */
static void warm_shell(void) {
        pid_t pid = fork();
        if (pid == 0) {
                execl("/bin/sh", "sh", "-c", ":", (char *)NULL);
                _exit(127);
        }
        if (pid > 0)
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
}

int guest_boot(void) {
        int r;
        if ((r = mount_at("dev", "/dev", "devtmpfs", MS_NOSUID, "mode=0755")) < 0 ||
            (r = mount_at("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0 ||
            (r = mount_at("sys", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0)
                return r;
        if ((r = load_modules()) < 0)
                return r;
        char lower[64], session[64];
        if ((r = find_disk(GUEST_SERIAL_LOWER, lower, sizeof lower)) < 0 ||
            (r = find_disk(GUEST_SERIAL_SESSION, session, sizeof session)) < 0) {
                log_error("guest: the disks did not appear");
                return r;
        }
        (void)mkdir("/mnt", 0755);
        if ((r = mount_at(lower, GUEST_LOWER, "ext4", MS_RDONLY, "noload")) < 0 ||
            (r = mount_at(session, GUEST_SESSION, "ext4", MS_NOATIME, NULL)) < 0)
                return r;
        (void)mkdir(GUEST_SESSION "/upper", 0755);
        (void)mkdir(GUEST_SESSION "/work", 0700);
        if ((r = mount_at("overlay", GUEST_NEWROOT, "overlay", 0,
                          "lowerdir=" GUEST_LOWER ",upperdir=" GUEST_SESSION "/upper,workdir=" GUEST_SESSION "/work")) < 0)
                return r;
        static const char *const moved[] = { "/dev", "/proc", "/sys" };
        for (size_t i = 0; i < ELEMENTSOF(moved); i++) {
                char dst[64];
                snprintf(dst, sizeof dst, GUEST_NEWROOT "%s", moved[i]);
                if ((r = mount_at(moved[i], dst, NULL, MS_MOVE, NULL)) < 0)
                        return r;
        }
        /* The initramfs can't be pivoted away from; move the new root over it instead. */
        if (chdir(GUEST_NEWROOT) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0) {
                r = -errno;
                log_error("guest: switching root: %m");
                return r;
        }
        (void)mount_at("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666");
        (void)mount_at("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
        (void)mount_at("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
        const char *host = getenv("space_hostname");
        if (host && sethostname(host, strnlen(host, 64)) < 0)
                log_warn("guest: hostname %.64s: %m", host); /* the session runs on; only its name is off */
        loopback_up();
        warm_shell();
        return 0;
}

/* Writes s to an existing /proc file. */
static int proc_write(const char *path, const char *v) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t n = strlen(v);
        ssize_t w = write(fd, v, n);
        return w == (ssize_t)n ? 0 : w < 0 ? -errno : -EIO;
}

int guest_userns(int *ret_fd) {
        int sync[2];
        if (pipe2(sync, O_CLOEXEC) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(sync[0]);
                close(sync[1]);
                return r;
        }
        if (pid == 0) {
                /* The holder: enters a new user namespace, says so, waits to be killed. */
                char c = unshare(CLONE_NEWUSER) < 0 ? 'E' : 'U';
                close(sync[0]);
                if (write(sync[1], &c, 1) != 1 || c == 'E')
                        _exit(1);
                for (;;)
                        pause();
        }
        close(sync[1]);
        char c = 0;
        ssize_t n;
        while ((n = read(sync[0], &c, 1)) < 0 && errno == EINTR)
                ;
        close(sync[0]);
        int r = n == 1 && c == 'U' ? 0 : -EPERM;
        char p[64];
        /* Every id 1:1: the disk's owners stay what they are, only capabilities are scoped. */
        static const char *const maps[] = { "uid_map", "gid_map" };
        for (size_t i = 0; i < ELEMENTSOF(maps) && r == 0; i++) {
                snprintf(p, sizeof p, "/proc/%d/%s", (int)pid, maps[i]);
                r = proc_write(p, "0 0 4294967295\n");
        }
        int fd = -EBADF;
        if (r == 0) {
                snprintf(p, sizeof p, "/proc/%d/ns/user", (int)pid);
                fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        r = -errno;
        }
        (void)kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        if (r < 0) {
                /* fails closed: no command runs with the guest's capabilities */
                log_error("guest: the user namespace that commands run in: %s", strerror(-r));
                return r;
        }
        /* What root in the guest could do without capabilities over the guest's network
         * namespace (owned by the guest's first user namespace): bind ports below 1024, and
         * ping with ICMP datagram sockets. */
        static const struct { const char *path, *value; } sysctls[] = {
                { "/proc/sys/net/ipv4/ip_unprivileged_port_start", "0\n" },
                { "/proc/sys/net/ipv4/ping_group_range", "0 2147483647\n" },
        };
        for (size_t i = 0; i < ELEMENTSOF(sysctls); i++)
                if ((r = proc_write(sysctls[i].path, sysctls[i].value)) < 0)
                        log_warn("guest: %s: %s", sysctls[i].path, strerror(-r));
        *ret_fd = fd;
        return 0;
}

/* The port the host named `name` (QEMU's virtserialport name=), opened non-blocking. */
static int open_port(const char *name) {
        _cleanup_closedir_ DIR *d = opendir("/sys/class/virtio-ports");
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char p[300], val[64];
                snprintf(p, sizeof p, "/sys/class/virtio-ports/%s/name", de->d_name);
                if (!read_attr(p, val, sizeof val) || strcmp(val, name) != 0)
                        continue;
                snprintf(p, sizeof p, "/dev/%.64s", de->d_name);
                int fd = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
                return fd < 0 ? -errno : fd;
        }
        return -ENOENT;
}

int guest_open_ports(int *ret_init, int *ret_ctl) {
        int r = wait_for("/sys/class/virtio-ports");
        if (r < 0)
                return r;
        int a = -ENOENT, b = -ENOENT;
        struct timespec ts = { 0, 5 * 1000000 };
        /* the ports are announced by the device a little after the driver binds */
        for (int waited = 0; waited < GUEST_DISK_WAIT_MS && (a < 0 || b < 0); waited += 5) {
                if (a < 0)
                        a = open_port(GUEST_PORT_INIT);
                if (b < 0)
                        b = open_port(GUEST_PORT_CTL);
                if (a < 0 || b < 0)
                        nanosleep(&ts, NULL);
        }
        if (a < 0 || b < 0) {
                safe_close(a);
                safe_close(b);
                return a < 0 ? a : b;
        }
        *ret_init = a;
        *ret_ctl = b;
        return 0;
}

static int if_ioctl(int s, unsigned long req, const char *addr) {
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", GUEST_NET_IF);
        struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
        sin->sin_family = AF_INET;
        if (inet_pton(AF_INET, addr, &sin->sin_addr) != 1)
                return -EINVAL;
        return ioctl(s, req, &ifr) < 0 ? -errno : 0;
}

/* /etc/resolv.conf names slirp's DNS, read-only (root inside could otherwise point it
 * elsewhere, which would only change where its own queries go, but the ns driver does
 * the same). Once per boot: a restored VM has the mount already. */
static int resolv_bind(void) {
        static bool done;
        struct stat st;
        if (done || lstat("/etc", &st) < 0 || !S_ISDIR(st.st_mode))
                return 0;
        int fd = open(GUEST_NET_RESOLV_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return -errno;
        ssize_t w = write(fd, GUEST_NET_RESOLV, strlen(GUEST_NET_RESOLV));
        close(fd);
        if (w != (ssize_t)strlen(GUEST_NET_RESOLV))
                return -EIO;
        if (lstat("/etc/resolv.conf", &st) < 0) {
                if (errno != ENOENT)
                        return -errno;
                fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (fd < 0)
                        return -errno;
                close(fd);
        } else if (!S_ISREG(st.st_mode)) {
                log_warn("guest: /etc/resolv.conf is not a file: left as it is");
                return 0;
        }
        if (mount(GUEST_NET_RESOLV_FILE, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, "/etc/resolv.conf", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
                return -errno;
        done = true;
        return 0;
}

int guest_net_up(void) {
        int r = wait_for("/sys/class/net/" GUEST_NET_IF);
        if (r < 0) {
                log_error("guest: no %s (virtio_net module, QEMU's device)", GUEST_NET_IF);
                return r;
        }
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -errno;
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", GUEST_NET_IF);
        if ((r = if_ioctl(s, SIOCSIFADDR, GUEST_NET_ADDR)) == 0 && (r = if_ioctl(s, SIOCSIFNETMASK, GUEST_NET_MASK)) == 0) {
                if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                        r = -errno;
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                if (r == 0 && ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                        r = -errno;
        }
        if (r == 0) {
                struct rtentry rt = { 0 };
                struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gw = (struct sockaddr_in *)&rt.rt_gateway,
                                   *mask = (struct sockaddr_in *)&rt.rt_genmask;
                dst->sin_family = gw->sin_family = mask->sin_family = AF_INET;
                (void)inet_pton(AF_INET, GUEST_NET_GW, &gw->sin_addr);
                rt.rt_flags = RTF_UP | RTF_GATEWAY;
                rt.rt_dev = (char *)GUEST_NET_IF;
                if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
                        r = -errno;
        }
        close(s);
        if (r < 0) {
                log_error("guest: configuring %s: %s", GUEST_NET_IF, strerror(-r));
                return r;
        }
        if ((r = resolv_bind()) < 0)
                log_error("guest: /etc/resolv.conf: %s", strerror(-r));
        return r;
}
