/* Mount option building and the in-namespace filesystem setup of an ns sandbox. Setup
 * works relative to the working directory (the new root) so that no path of the host
 * appears inside except the device nodes bound from the host's /dev. */
#include "runtime/mount.h"

#include <fcntl.h>
#include <stdbool.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include "common/macros.h"

static bool path_ok(const char *p, bool allow_colon) {
        if (!p || p[0] != '/')
                return false;
        for (const char *s = p; *s; s++)
                if (*s == ',' || *s == '\\' || (*s == ':' && !allow_colon) || (unsigned char)*s < 0x20)
                        return false;
        return true;
}

int rt_mount_overlay_opts(const char *lower, const char *upper, const char *work, char **ret) {
        if (!lower || !*lower || !path_ok(upper, false) || !path_ok(work, false))
                return -EINVAL;
        /* Each layer: absolute, non-empty, no separators of its own. */
        unsigned layers = 0;
        for (const char *s = lower;;) {
                const char *e = strchr(s, ':');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                if (n == 0 || s[0] != '/')
                        return -EINVAL;
                for (size_t i = 0; i < n; i++)
                        if (s[i] == ',' || s[i] == '\\' || (unsigned char)s[i] < 0x20)
                                return -EINVAL;
                if (++layers > RT_MOUNT_MAX_LAYERS)
                        return -E2BIG;
                if (!e)
                        break;
                s = e + 1;
        }
        /* index/metacopy/xino off: the lower layers are shared by many overlays at once and
         * must not depend on the host's overlay module defaults. */
        char *o;
        int n = asprintf(&o, "lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,xino=off",
                         lower, upper, work);
        if (n < 0)
                return -ENOMEM;
        if (n > (int)RT_MOUNT_MAX_OPTS) {
                free(o);
                return -E2BIG;
        }
        *ret = o;
        return 0;
}

int rt_mount_tmpfs_opts(char *buf, size_t n, unsigned mode, uint64_t size, uint64_t nr_inodes) {
        if (size == 0 || mode > 07777)
                return -EINVAL;
        int w;
        if (nr_inodes)
                w = snprintf(buf, n, "mode=%o,size=%" PRIu64 ",nr_inodes=%" PRIu64, mode, size, nr_inodes);
        else
                w = snprintf(buf, n, "mode=%o,size=%" PRIu64, mode, size);
        if (w < 0 || (size_t)w >= n)
                return -ENOSPC;
        return 0;
}

/* Appends to out (size RT_MOUNT_MAX_OPTS + 1) at *o; -E2BIG when it does not fit. */
static int opts_add(char *out, size_t *o, const char *fmt, ...) _printf_(3, 4);
static int opts_add(char *out, size_t *o, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(out + *o, RT_MOUNT_MAX_OPTS + 1 - *o, fmt, ap);
        va_end(ap);
        if (w < 0 || (size_t)w > RT_MOUNT_MAX_OPTS - *o)
                return -E2BIG;
        *o += (size_t)w;
        return 0;
}

int rt_mount_tmpfs_resize(int root_fd, const char *path, uint64_t size) {
        if (size == 0)
                return -EINVAL;
        /* The new mount API reconfigures a superblock by an fd of its root, from any mount
         * namespace: no setns (impossible in a multi-threaded daemon), no helper process.
         * RESOLVE_NO_SYMLINKS: the path is walked in a tree a sandbox may have touched. */
        struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int dir = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof how);
        if (dir < 0)
                return -errno;
        struct statfs sf;
        if (fstatfs(dir, &sf) < 0)
                return -errno;
        if (sf.f_type != TMPFS_MAGIC)
                return -EINVAL;
        _cleanup_close_ int fc = fspick(dir, "", FSPICK_CLOEXEC | FSPICK_EMPTY_PATH | FSPICK_NO_AUTOMOUNT);
        if (fc < 0)
                return -errno;
        char val[32];
        snprintf(val, sizeof val, "%" PRIu64, size);
        if (fsconfig(fc, FSCONFIG_SET_STRING, "size", val, 0) < 0 || fsconfig(fc, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0)
                return -errno;
        return 0;
}

int rt_mount_overlay(const char *target, const char *opts) {
        /* overlayfs shows its layer paths in /proc/<pid>/mountinfo exactly as given, and the
         * sandbox reads its own mountinfo: host paths there would tell code inside where the
         * daemon's data dir is. So every layer is opened here and named by its fd instead
         * ("/proc/self/fd/N"; the kernel resolves it at mount time), and only those names
         * are shown. opts comes from rt_mount_overlay_opts: its paths hold no ',' and only
         * lowerdir's holds ':'. */
        static const char *const keys[] = { "lowerdir=", "upperdir=", "workdir=" };
        int fds[RT_MOUNT_MAX_LAYERS + 2];
        size_t nfd = 0, o = 0;
        char out[RT_MOUNT_MAX_OPTS + 1] = "";
        int r = 0;
        for (const char *s = opts; *s && r == 0;) {
                const char *end = strchr(s, ',');
                size_t n = end ? (size_t)(end - s) : strlen(s);
                size_t k = 0;
                while (k < ELEMENTSOF(keys) && strncmp(s, keys[k], strlen(keys[k])))
                        k++;
                if (k == ELEMENTSOF(keys)) {
                        r = opts_add(out, &o, "%s%.*s", o ? "," : "", (int)n, s);
                } else {
                        size_t kl = strlen(keys[k]);
                        r = opts_add(out, &o, "%s%s", o ? "," : "", keys[k]);
                        for (const char *p = s + kl; r == 0 && p < s + n;) {
                                const char *colon = memchr(p, ':', (size_t)(s + n - p));
                                size_t pl = colon ? (size_t)(colon - p) : (size_t)(s + n - p);
                                char path[PATH_MAX];
                                if (pl == 0 || pl >= sizeof path || nfd >= ELEMENTSOF(fds)) {
                                        r = -EINVAL;
                                        break;
                                }
                                memcpy(path, p, pl);
                                path[pl] = '\0';
                                int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
                                if (fd < 0) {
                                        r = -errno;
                                        break;
                                }
                                fds[nfd++] = fd;
                                r = opts_add(out, &o, "%s/proc/self/fd/%d", p == s + kl ? "" : ":", fd);
                                p += pl + (colon ? 1 : 0);
                        }
                }
                s += n + (end ? 1 : 0);
        }
        if (r == 0 && mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, out) < 0)
                r = -errno;
        for (size_t i = 0; i < nfd; i++)
                safe_close(fds[i]);
        return r;
}

/* ---- child side: no allocation below this line ---- */

#define FAIL(s)                    \
        do {                       \
                *step = (s);       \
                return -errno;     \
        } while (0)

static int ensure_dir(const char *p, mode_t mode) {
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -1;
        return 0;
}

static int ensure_file(const char *p) {
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0)
                return -1;
        close(fd);
        return 0;
}

static int ro_remount(const char *p, unsigned long extra) {
        return mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | extra, NULL);
}

/* Device nodes bound from the host: a mknod'd node on a filesystem mounted inside a user
 * namespace would not open (SB_I_NODEV). */
static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

static const struct {
        const char *target, *link;
} dev_links[] = {
        { "dev/fd", "/proc/self/fd" },
        { "dev/stdin", "/proc/self/fd/0" },
        { "dev/stdout", "/proc/self/fd/1" },
        { "dev/stderr", "/proc/self/fd/2" },
        { "dev/ptmx", "pts/ptmx" },
};

/* Files that reveal or touch host kernel state: hidden behind /dev/null. */
static const char *const proc_null[] = {
        "proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug",
        "proc/latency_stats", "proc/kmsg", "proc/config.gz",
};
/* Directories hidden behind an empty read-only tmpfs. */
static const char *const proc_empty[] = { "proc/acpi", "proc/scsi", "proc/asound" };
/* The host kernel's identity in sysfs: its build id (notes), the crash dump's symbol
 * table (vmcoreinfo), its type information (btf), the machine's firmware tables. */
static const char *const sys_null[] = { "sys/kernel/notes", "sys/kernel/vmcoreinfo" };
static const char *const sys_empty[] = { "sys/kernel/btf", "sys/firmware" };
/* Kept readable (programs read sysctls) but never writable. */
static const char *const proc_ro[] = { "proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus", "proc/fs" };

static int setup_dev(const struct rt_mount_cfg *cfg, const char **step) {
        if (ensure_dir("dev", 0755) < 0)
                FAIL("mkdir /dev");
        if (mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, cfg->dev_opts) < 0)
                FAIL("mount /dev tmpfs");
        for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
                char src[32], dst[32];
                snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
                snprintf(dst, sizeof dst, "dev/%s", dev_nodes[i]);
                if (ensure_file(dst) < 0)
                        FAIL("create /dev node");
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        FAIL("bind /dev node");
        }
        if (ensure_dir("dev/pts", 0755) < 0)
                FAIL("mkdir /dev/pts");
        /* gid 5 = tty in Debian; a new instance so ptys are private to the sandbox. */
        if (mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620,gid=5") < 0)
                FAIL("mount devpts");
        if (ensure_dir("dev/shm", 01777) < 0)
                FAIL("mkdir /dev/shm");
        if (mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, cfg->shm_opts) < 0)
                FAIL("mount /dev/shm");
        for (size_t i = 0; i < ELEMENTSOF(dev_links); i++)
                if (symlink(dev_links[i].link, dev_links[i].target) < 0 && errno != EEXIST)
                        FAIL("symlink in /dev");
        return 0;
}

static int mask_null(const char *path) {
        return mount("dev/null", path, NULL, MS_BIND, NULL) < 0 && errno != ENOENT ? -errno : 0;
}

static int mask_empty(const char *path) {
        return mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=1") < 0 &&
                               errno != ENOENT
                       ? -errno
                       : 0;
}

static int mask_proc(const char **step) {
        for (size_t i = 0; i < ELEMENTSOF(proc_null); i++)
                if (mask_null(proc_null[i]) < 0)
                        FAIL("mask /proc file");
        for (size_t i = 0; i < ELEMENTSOF(proc_empty); i++)
                if (mask_empty(proc_empty[i]) < 0)
                        FAIL("mask /proc dir");
        for (size_t i = 0; i < ELEMENTSOF(sys_null); i++)
                if (mask_null(sys_null[i]) < 0)
                        FAIL("mask /sys file");
        for (size_t i = 0; i < ELEMENTSOF(sys_empty); i++)
                if (mask_empty(sys_empty[i]) < 0)
                        FAIL("mask /sys dir");
        for (size_t i = 0; i < ELEMENTSOF(proc_ro); i++) {
                if (mount(proc_ro[i], proc_ro[i], NULL, MS_BIND | MS_REC, NULL) < 0) {
                        if (errno == ENOENT)
                                continue;
                        FAIL("bind /proc read-only");
                }
                if (ro_remount(proc_ro[i], MS_NOSUID | MS_NODEV | MS_NOEXEC) < 0)
                        FAIL("remount /proc part read-only");
        }
        return 0;
}

int rt_mount_setup_root(const struct rt_mount_cfg *cfg, const char **step) {
        if (ensure_dir("proc", 0555) < 0)
                FAIL("mkdir /proc");
        if (mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                FAIL("mount /proc");

        if (ensure_dir("sys", 0555) < 0)
                FAIL("mkdir /sys");
        /* sysfs needs a fully visible sysfs in the parent namespace; where the host hides
         * parts of it an empty read-only tmpfs stands in. */
        if (mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 &&
            mount("tmpfs", "sys", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,nr_inodes=1") < 0)
                FAIL("mount /sys");

        int r = setup_dev(cfg, step);
        if (r < 0)
                return r;

        if (ensure_dir("tmp", 01777) < 0)
                FAIL("mkdir /tmp");
        if (mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, cfg->tmp_opts) < 0)
                FAIL("mount /tmp");

        return mask_proc(step);
}

int rt_mount_pivot(const char **step) {
        /* pivot_root(".", ".") stacks the old root on top of the new one; detaching "."
         * then drops the whole host tree from this namespace. */
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                FAIL("pivot_root");
        if (umount2(".", MNT_DETACH) < 0)
                FAIL("detach old root");
        if (chdir("/") < 0)
                FAIL("chdir /");
        return 0;
}
