/* Mount helpers for the ns runtime: option strings (built in the parent, unit-tested) and
 * the steps that build a sandbox's filesystem view from inside its new mount namespace.
 * The child-side steps allocate nothing: they run between clone and exec. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define RT_MOUNT_MAX_OPTS 4095       /* mount(2) copies at most one page of options */
#define RT_MOUNT_MAX_LAYERS 128      /* lower layers of one overlay */
#define RT_MOUNT_DEV_SIZE (256u << 10)
#define RT_MOUNT_SHM_SIZE (64ull << 20)
/* Inode bounds of the sandbox's tmpfs mounts: without one, tmpfs allows half the host's
 * RAM pages worth of inodes, and a file bomb in /tmp would cost kernel memory (charged to
 * the sandbox, but slowly and opaquely) long before the size limit says no. */
#define RT_MOUNT_TMP_INODES (1ull << 20)
#define RT_MOUNT_SHM_INODES (64ull << 10)
#define RT_MOUNT_DEV_INODES 64

/* "lowerdir=A:B,upperdir=U,workdir=W,index=off,metacopy=off,xino=off". lower is the
 * ':'-separated list, top first. Paths must be absolute and may not contain ',' ':' or
 * '\\' (overlayfs would need escapes we don't want to get wrong): -EINVAL. Over
 * RT_MOUNT_MAX_OPTS: -E2BIG. */
int rt_mount_overlay_opts(const char *lower, const char *upper, const char *work, char **ret);
/* "mode=MODE,size=SIZE[,nr_inodes=N]" into buf; -ENOSPC if it does not fit. size 0 is
 * refused (-EINVAL): for tmpfs it would mean "no limit". */
int rt_mount_tmpfs_opts(char *buf, size_t n, unsigned mode, uint64_t size, uint64_t nr_inodes);

/* Changes the size of the tmpfs mounted at path (relative to root_fd, which may be another
 * mount namespace's root: /proc/PID/root) in place, keeping its other options and files.
 * Must be the root of a tmpfs mount (-EINVAL otherwise); a symlink on the way is refused. */
int rt_mount_tmpfs_resize(int root_fd, const char *path, uint64_t size);

/* Mounts the overlay at target on the host (MS_NOSUID|MS_NODEV). */
int rt_mount_overlay(const char *target, const char *opts);

struct rt_mount_cfg {
        const char *tmp_opts; /* tmpfs options of /tmp */
        const char *shm_opts; /* tmpfs options of /dev/shm */
        const char *dev_opts; /* tmpfs options of /dev */
};

/* Child side. The working directory is the new root (a mount point of its own). Mounts
 * /proc, /sys, /dev (+pts, shm, device binds), /tmp and masks sensitive /proc entries.
 * On failure *step names what failed. */
int rt_mount_setup_root(const struct rt_mount_cfg *cfg, const char **step);
/* Child side: pivot_root into the working directory and detach the old root. */
int rt_mount_pivot(const char **step);
