/* Disk limits of sandbox writable layers (project quotas on ext4/XFS, qgroups on btrfs)
 * and DATA/vol, the loop-mounted volume that carries them. Everything here runs as host
 * root in the daemon; nothing is reachable from inside a sandbox (overlayfs passes no
 * quota or btrfs ioctl through, and the kernel refuses project id changes from inside a
 * user namespace). See quota.h and docs/security.md. */
#include "runtime/quota.h"

#include <endian.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <linux/quota.h>
#include "common/fdio.h"
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"

#define QUOTA_MAX_DEPTH 256    /* directory nesting the project id walk descends */
#define QUOTA_LOOP_TRIES 16    /* free loop devices raced for before giving up */
#define QUOTA_PATH_MAX 4096
#define QUOTA_NAME_MAX 255     /* a snapshot's name (the ioctls take up to 4039) */

extern char **environ;

static int quotactl_fd(int fd, unsigned cmd, unsigned type, uint32_t id, void *addr) {
        if (syscall(SYS_quotactl_fd, fd, QCMD(cmd, type), id, addr) < 0)
                return -errno;
        return 0;
}

/* ---------------- project quotas (ext4, XFS) ---------------- */

static int set_projid_fd(int fd, uint32_t id, bool dir) {
        struct fsxattr fa;
        if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
                return -errno;
        bool inherit = !dir || (fa.fsx_xflags & FS_XFLAG_PROJINHERIT);
        if (fa.fsx_projid == id && inherit)
                return 0;
        fa.fsx_projid = id;
        if (dir)
                fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
        if (ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0)
                return -errno;
        return 0;
}

/* Gives what an upper dir already holds the project id: the kernel refuses renames of
 * an inode into a PROJINHERIT directory of another project (EXDEV). Directories and
 * regular files only: symlinks and device nodes cannot be opened for the ioctl; they stay
 * in project 0 (a few bytes each, not counted). */
static int projid_walk(int dfd, uint32_t id, dev_t dev, unsigned depth) {
        if (depth > QUOTA_MAX_DEPTH)
                return -ELOOP;
        _cleanup_closedir_ DIR *d = NULL;
        int r = fdio_opendir(dfd, &d);
        if (r < 0)
                return r;
        struct dirent *de;
        while ((errno = 0, de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return -errno;
                if (st.st_dev != dev || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
                        continue;
                _cleanup_close_ int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
                                                O_NONBLOCK | (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
                if (fd < 0)
                        return -errno;
                r = set_projid_fd(fd, id, S_ISDIR(st.st_mode));
                if (r == 0 && S_ISDIR(st.st_mode))
                        r = projid_walk(fd, id, dev, depth + 1);
                if (r < 0)
                        return r;
        }
        return errno ? -errno : 0;
}

static int project_enforced(int fd) {
        struct fs_quota_stat qs = { 0 };
        int r = quotactl_fd(fd, Q_XGETQSTAT, PRJQUOTA, 0, &qs);
        if (r < 0)
                return r;
        return (qs.qs_flags & FS_QUOTA_PDQ_ENFD) ? 0 : -ESRCH;
}

/* The project of a writable layer: the id it has, else the upper dir's inode number,
 * unique on its filesystem while the dir exists (and a restarted sandbox finds it again). */
static int pick_projid(int fd, uint32_t *ret) {
        struct fsxattr fa;
        if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
                return -errno;
        if (fa.fsx_projid != 0) {
                *ret = fa.fsx_projid;
                return 0;
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_ino == 0 || st.st_ino >= UINT32_MAX)
                return -EOVERFLOW;
        *ret = (uint32_t)st.st_ino;
        return 0;
}

static int project_apply(int ufd, int wfd, const char *upper, uint64_t bytes, uint64_t inodes) {
        int r = project_enforced(ufd);
        if (r < 0) {
                runtime_set_error("quota: %s: the filesystem enforces no project quota (%s); use a volume from "
                                  "rt_volume_prepare or mount ext4/XFS with prjquota",
                                  upper, strerror(-r));
                return -EOPNOTSUPP;
        }
        uint32_t id = 0;
        r = pick_projid(ufd, &id);
        if (r < 0) {
                runtime_set_error("quota: %s: no project id: %s", upper, strerror(-r));
                return r;
        }
        struct fsxattr fa;
        bool walk = ioctl(ufd, FS_IOC_FSGETXATTR, &fa) == 0 &&
                    (fa.fsx_projid != id || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT));
        struct stat st;
        if (fstat(ufd, &st) < 0)
                return -errno;
        if ((r = set_projid_fd(ufd, id, true)) < 0 || (r = set_projid_fd(wfd, id, true)) < 0 ||
            (walk && (r = projid_walk(ufd, id, st.st_dev, 0)) < 0) || (r = projid_walk(wfd, id, st.st_dev, 0)) < 0) {
                runtime_set_error("quota: %s: set project id %" PRIu32 ": %s", upper, id, strerror(-r));
                return r;
        }
        struct if_dqblk dq = {
                .dqb_bhardlimit = (bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE,
                .dqb_ihardlimit = inodes,
                .dqb_valid = QIF_LIMITS,
        };
        r = quotactl_fd(ufd, Q_SETQUOTA, PRJQUOTA, id, &dq);
        if (r < 0) {
                runtime_set_error("quota: %s: set limits of project %" PRIu32 ": %s", upper, id, strerror(-r));
                return r;
        }
        return 0;
}

/* ---------------- btrfs qgroups ---------------- */

static int btrfs_subvol_id(int fd, uint64_t *ret) {
        struct btrfs_ioctl_ino_lookup_args a = { .treeid = 0, .objectid = BTRFS_FIRST_FREE_OBJECTID };
        if (ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0)
                return -errno;
        *ret = a.treeid;
        return 0;
}

static int btrfs_apply(int ufd, int wfd, const char *upper, uint64_t bytes, uint64_t inodes) {
        if (bytes == 0) {
                runtime_set_error("quota: %s: btrfs cannot limit inodes alone (each inode's metadata counts "
                                  "against a byte limit instead)", upper);
                return -EOPNOTSUPP;
        }
        uint64_t us = 0, ws = 0;
        int r;
        if ((r = btrfs_subvol_id(ufd, &us)) < 0 || (r = btrfs_subvol_id(wfd, &ws)) < 0) {
                runtime_set_error("quota: %s: btrfs subvolume lookup: %s", upper, strerror(-r));
                return r;
        }
        if (us != ws || us == BTRFS_FS_TREE_OBJECTID) {
                runtime_set_error("quota: %s: upper and work dirs must sit in one subvolume of their own "
                                  "(rt_volume_make_dir), not the top level",
                                  upper);
                return -EINVAL;
        }
        struct btrfs_ioctl_qgroup_limit_args a = {
                .qgroupid = us, /* level 0: the subvolume's own qgroup */
                .lim = { .flags = BTRFS_QGROUP_LIMIT_MAX_RFER, .max_rfer = bytes },
        };
        if (ioctl(ufd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0) {
                r = -errno;
                if (r == -ENOTCONN) {
                        runtime_set_error("quota: %s: btrfs quotas are off on this filesystem", upper);
                        return -EOPNOTSUPP;
                }
                runtime_set_error("quota: %s: btrfs qgroup limit: %s", upper, strerror(-r));
                return r;
        }
        return 0;
}

/* Referenced bytes of a subvolume's qgroup, from the quota tree. */
static int btrfs_usage(int fd, uint64_t *ret) {
        uint64_t id = 0;
        int r = btrfs_subvol_id(fd, &id);
        if (r < 0)
                return r;
        struct btrfs_ioctl_search_args sa = { 0 };
        struct btrfs_ioctl_search_key *k = &sa.key;
        k->tree_id = BTRFS_QUOTA_TREE_OBJECTID;
        k->min_objectid = k->max_objectid = 0;
        k->min_type = k->max_type = BTRFS_QGROUP_INFO_KEY;
        k->min_offset = k->max_offset = id;
        k->max_transid = UINT64_MAX;
        k->nr_items = 1;
        if (ioctl(fd, BTRFS_IOC_TREE_SEARCH, &sa) < 0)
                return errno == ENOENT ? -EOPNOTSUPP : -errno;
        if (k->nr_items < 1)
                return -ENOENT;
        struct btrfs_ioctl_search_header sh;
        memcpy(&sh, sa.buf, sizeof sh);
        struct btrfs_qgroup_info_item info;
        if (sh.len < sizeof info)
                return -EIO;
        memcpy(&info, sa.buf + sizeof sh, sizeof info);
        *ret = le64toh(info.rfer);
        return 0;
}

/* ---------------- the common entry points ---------------- */

static int open_dir(const char *p) {
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int rt_quota_apply(const char *upper_dir, const char *work_dir, uint64_t bytes, uint64_t inodes) {
        if (bytes == 0 && inodes == 0)
                return 0;
        if (!upper_dir || !work_dir) {
                runtime_set_error("quota: upper and work dirs needed");
                return -EINVAL;
        }
        if ((bytes && bytes < RT_QUOTA_MIN_BYTES) || (inodes && inodes < RT_QUOTA_MIN_INODES)) {
                runtime_set_error("quota: limits too small (bytes >= %llu, inodes >= %u)",
                                  (unsigned long long)RT_QUOTA_MIN_BYTES, RT_QUOTA_MIN_INODES);
                return -ERANGE;
        }
        _cleanup_close_ int ufd = open_dir(upper_dir);
        _cleanup_close_ int wfd = open_dir(work_dir);
        if (ufd < 0 || wfd < 0) {
                int r = ufd < 0 ? ufd : wfd;
                runtime_set_error("quota: open %s: %s", ufd < 0 ? upper_dir : work_dir, strerror(-r));
                return r;
        }
        struct statfs sf;
        if (fstatfs(ufd, &sf) < 0)
                return -errno;
        if (sf.f_type == BTRFS_SUPER_MAGIC)
                return btrfs_apply(ufd, wfd, upper_dir, bytes, inodes);
        return project_apply(ufd, wfd, upper_dir, bytes, inodes);
}

int rt_quota_usage(const char *upper_dir, uint64_t *ret_bytes, uint64_t *ret_inodes) {
        _cleanup_close_ int fd = open_dir(upper_dir);
        if (fd < 0)
                return fd;
        struct statfs sf;
        if (fstatfs(fd, &sf) < 0)
                return -errno;
        uint64_t bytes = 0, inodes = 0;
        int r;
        if (sf.f_type == BTRFS_SUPER_MAGIC) {
                r = btrfs_usage(fd, &bytes);
        } else {
                struct fsxattr fa;
                if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
                        return -errno;
                if (fa.fsx_projid == 0)
                        return -ENOENT;
                struct if_dqblk dq = { 0 };
                r = quotactl_fd(fd, Q_GETQUOTA, PRJQUOTA, fa.fsx_projid, &dq);
                bytes = dq.dqb_curspace;
                inodes = dq.dqb_curinodes;
        }
        if (r < 0)
                return r;
        *ret_bytes = bytes;
        if (ret_inodes)
                *ret_inodes = inodes;
        return 0;
}

/* ---------------- the volume ---------------- */

static int run_quiet(char *const argv[]) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        pid_t pid;
        int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0) {
                runtime_set_error("volume: cannot run %s: %s", argv[0], strerror(r));
                return -r;
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                runtime_set_error("volume: %s failed (status 0x%x)", argv[0], st);
                return -EIO;
        }
        return 0;
}

/* Attaches the image to a free loop device with autoclear: the device goes away by
 * itself once the filesystem on it is unmounted (or at once if nothing mounts it). */
int rt_loop_attach(int img_fd, char *dev, size_t n, int *ret_fd) {
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return -errno;
        for (int i = 0; i < QUOTA_LOOP_TRIES; i++) {
                int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (nr < 0)
                        return -errno;
                snprintf(dev, n, "/dev/loop%d", nr);
                _cleanup_close_ int lfd = open(dev, O_RDWR | O_CLOEXEC);
                if (lfd < 0)
                        return -errno;
                struct loop_config cfg = { .fd = (uint32_t)img_fd };
                cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
                        *ret_fd = TAKE_FD(lfd);
                        return 0;
                }
                if (errno != EBUSY) /* EBUSY: another process took it between the calls */
                        return -errno;
        }
        return -EBUSY;
}

/* The loop device the image is still attached to, if any: after an unmount here the
 * filesystem lives on while a mount namespace made when it was mounted (a sandbox's, an
 * overlay on it) holds a copy, and its autoclear device with it. Mounting that device
 * again gives that same filesystem; attaching a second device would mount the image twice,
 * two filesystems writing one image. 0 and *ret_fd, or -ENOENT. */
static int loop_of_image(int img_fd, char *dev, size_t n, int *ret_fd) {
        struct stat img;
        if (fstat(img_fd, &img) < 0)
                return -errno;
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        if (!d)
                return -ENOENT;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (strncmp(e->d_name, "loop", 4) || !e->d_name[4])
                        continue;
                snprintf(dev, n, "/dev/%.40s", e->d_name);
                _cleanup_close_ int lfd = open(dev, O_RDWR | O_CLOEXEC);
                struct loop_info64 li;
                if (lfd < 0 || ioctl(lfd, LOOP_GET_STATUS64, &li) < 0) /* ENXIO: unbound */
                        continue;
                if (li.lo_device == (uint64_t)img.st_dev && li.lo_inode == (uint64_t)img.st_ino) {
                        *ret_fd = TAKE_FD(lfd);
                        return 0;
                }
        }
        return -ENOENT;
}

enum vol_fs { VOL_NONE, VOL_EXT4, VOL_BTRFS };

/* What the image holds, from the superblock magics. */
static enum vol_fs image_fs(int fd) {
        uint8_t b[8];
        if (pread(fd, b, 2, 1024 + 56) == 2 && b[0] == 0x53 && b[1] == 0xef)
                return VOL_EXT4;
        if (pread(fd, b, 8, 0x10040) == 8 && !memcmp(b, "_BHRfS_M", 8))
                return VOL_BTRFS;
        return VOL_NONE;
}

static int mount_image(int img_fd, const char *vol, enum vol_fs fs) {
        char dev[64];
        _cleanup_close_ int lfd = -EBADF;
        int r = loop_of_image(img_fd, dev, sizeof dev, &lfd);
        if (r < 0)
                r = rt_loop_attach(img_fd, dev, sizeof dev, &lfd);
        if (r < 0) {
                runtime_set_error("volume: attach a loop device: %s", strerror(-r));
                return r;
        }
        if (fs == VOL_EXT4)
                r = mount(dev, vol, "ext4", MS_NOSUID | MS_NODEV, "prjquota");
        else
                r = mount(dev, vol, "btrfs", MS_NOSUID | MS_NODEV, NULL);
        if (r < 0) {
                r = -errno;
                runtime_set_error("volume: mount %s on %s: %s", dev, vol, strerror(-r));
                return r;
        }
        if (fs == VOL_BTRFS) {
                _cleanup_close_ int vfd = open_dir(vol);
                struct btrfs_ioctl_quota_ctl_args q = { .cmd = BTRFS_QUOTA_CTL_ENABLE };
                if (vfd < 0 || ioctl(vfd, BTRFS_IOC_QUOTA_CTL, &q) < 0) {
                        r = vfd < 0 ? vfd : -errno;
                        umount2(vol, 0);
                        runtime_set_error("volume: enable btrfs quotas on %s: %s", vol, strerror(-r));
                        return r;
                }
        }
        return 0;
}

/* ".." is looked up from the directory's fd, so no "path/.." is built: a path near
 * QUOTA_PATH_MAX would not fit one and would stat a truncated name. */
static bool is_mountpoint(const char *path) {
        _cleanup_close_ int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct stat a, b;
        return fd >= 0 && fstat(fd, &a) == 0 && fstatat(fd, "..", &b, 0) == 0 && a.st_dev != b.st_dev;
}

int rt_volume_prepare(const char *data_dir, uint64_t size, char **ret_path) {
        if (!data_dir || data_dir[0] != '/' || strlen(data_dir) > QUOTA_PATH_MAX - 16) {
                runtime_set_error("volume: data dir must be an absolute path");
                return -EINVAL;
        }
        _cleanup_free_ char *vol = NULL, *img = NULL;
        if (asprintf(&vol, "%s/" RT_VOLUME_DIR, data_dir) < 0 || asprintf(&img, "%s/" RT_VOLUME_IMAGE, data_dir) < 0)
                return -ENOMEM;
        if (mkdir(vol, 0700) < 0 && errno != EEXIST) {
                runtime_set_error("volume: mkdir %s: %s", vol, strerror(errno));
                return -errno;
        }
        if (!is_mountpoint(vol)) {
                _cleanup_close_ int fd = open(img, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                enum vol_fs fs = VOL_NONE;
                if (fd >= 0)
                        fs = image_fs(fd);
                else if (errno != ENOENT)
                        return -errno;
                int r;
                if (fs == VOL_NONE) {
                        if (size < RT_VOLUME_MIN_SIZE) {
                                runtime_set_error("volume: size must be at least %llu bytes",
                                                  (unsigned long long)RT_VOLUME_MIN_SIZE);
                                return -ERANGE;
                        }
                        fd = safe_close(fd);
                        fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                        if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
                                runtime_set_error("volume: create %s: %s", img, strerror(errno));
                                return -errno;
                        }
                        /* ext4 with project quotas where the kernel has quota formats
                         * (CONFIG_QFMT_V2); a mount that refuses prjquota means it does not. */
                        char *ext4[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "quota,project", "-E",
                                         "quotatype=prjquota", img, NULL };
                        r = run_quiet(ext4);
                        if (r < 0)
                                return r;
                        if (mount_image(fd, vol, VOL_EXT4) == 0)
                                goto done;
                        char *btrfs[] = { "mkfs.btrfs", "-q", "-f", img, NULL };
                        r = run_quiet(btrfs);
                        if (r < 0)
                                return r;
                        fs = VOL_BTRFS;
                }
                r = mount_image(fd, vol, fs);
                if (r < 0)
                        return r;
        }
done:
        if (ret_path)
                *ret_path = TAKE_PTR(vol);
        return 0;
}

int rt_volume_teardown(const char *data_dir) {
        char vol[QUOTA_PATH_MAX + 8];
        if (!data_dir || snprintf(vol, sizeof vol, "%s/" RT_VOLUME_DIR, data_dir) >= (int)sizeof vol)
                return -EINVAL;
        if (!is_mountpoint(vol))
                return 0;
        if (umount2(vol, UMOUNT_NOFOLLOW) < 0) {
                runtime_set_error("volume: unmount %s: %s", vol, strerror(errno));
                return -errno;
        }
        return 0;
}

int rt_volume_make_dir(const char *path, unsigned mode) {
        if (!path || path[0] != '/' || strlen(path) >= QUOTA_PATH_MAX)
                return -EINVAL;
        char parent[QUOTA_PATH_MAX];
        snprintf(parent, sizeof parent, "%s", path);
        char *slash = strrchr(parent, '/');
        const char *name = path + (slash - parent) + 1;
        if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
                return -EINVAL;
        if (slash == parent)
                slash[1] = 0;
        else
                *slash = 0;
        _cleanup_close_ int pfd = open_dir(parent);
        if (pfd < 0)
                return pfd;
        struct statfs sf;
        if (fstatfs(pfd, &sf) < 0)
                return -errno;
        if (sf.f_type == BTRFS_SUPER_MAGIC) {
                struct btrfs_ioctl_vol_args a = { 0 };
                if (strlen(name) > BTRFS_PATH_NAME_MAX)
                        return -ENAMETOOLONG;
                strcpy(a.name, name);
                if (ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0)
                        return -errno;
        } else if (mkdirat(pfd, name, mode) < 0) {
                return -errno;
        }
        if (fchmodat(pfd, name, mode, 0) < 0)
                return -errno;
        return 0;
}

/* ---------------- read-only snapshots of sandbox dirs ---------------- */

/* Splits path into its parent (opened) and its last component. */
static int open_parent(const char *path, int *ret_fd, const char **ret_name) {
        if (!path || path[0] != '/' || strlen(path) >= QUOTA_PATH_MAX)
                return -EINVAL;
        const char *slash = strrchr(path, '/');
        const char *name = slash + 1;
        if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || strlen(name) > QUOTA_NAME_MAX)
                return -EINVAL;
        char parent[QUOTA_PATH_MAX];
        snprintf(parent, sizeof parent, "%.*s", slash == path ? 1 : (int)(slash - path), path);
        int fd = open_dir(parent);
        if (fd < 0)
                return fd;
        *ret_fd = fd;
        *ret_name = name;
        return 0;
}

int rt_volume_is_subvol(const char *dir) {
        _cleanup_close_ int fd = open_dir(dir);
        if (fd < 0)
                return fd;
        struct statfs sf;
        struct stat st;
        if (fstatfs(fd, &sf) < 0 || fstat(fd, &st) < 0)
                return -errno;
        return sf.f_type == BTRFS_SUPER_MAGIC && st.st_ino == BTRFS_FIRST_FREE_OBJECTID;
}

int rt_volume_snapshot(const char *src, const char *dst) {
        _cleanup_close_ int sfd = open_dir(src);
        if (sfd < 0)
                return sfd;
        _cleanup_close_ int pfd = -EBADF;
        const char *name = NULL;
        int r = open_parent(dst, &pfd, &name);
        if (r < 0)
                return r;
        struct btrfs_ioctl_vol_args_v2 a = { .fd = sfd, .flags = BTRFS_SUBVOL_RDONLY };
        strcpy(a.name, name);
        if (ioctl(pfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0)
                return -errno;
        return 0;
}

int rt_volume_remove(const char *path) {
        _cleanup_close_ int pfd = -EBADF;
        const char *name = NULL;
        int r = open_parent(path, &pfd, &name);
        if (r < 0)
                return r;
        struct btrfs_ioctl_vol_args a = { 0 };
        strcpy(a.name, name);
        if (ioctl(pfd, BTRFS_IOC_SNAP_DESTROY, &a) < 0)
                return errno == ENOENT ? 0 : -errno;
        return 0;
}
