/* Disk limits of a sandbox's writable layer, and the volume that makes them possible: a
 * full disk inside a sandbox must be an error inside (EDQUOT, or ENOSPC on XFS), never
 * the host's disk filling up. Two kernel mechanisms, chosen by the filesystem holding the
 * upper dir (see docs/security.md "Disk"):
 *  - ext4 / XFS project quotas: the upper and work dirs get a project id of their own
 *    (FS_XFLAG_PROJINHERIT) with block and inode hard limits (quotactl);
 *  - btrfs qgroups, for kernels built without CONFIG_QFMT_V2 / XFS_QUOTA: the upper and
 *    work dirs live in a subvolume of their own (rt_volume_make_dir) whose qgroup gets
 *    a byte limit; btrfs has no inode count limit, every inode's metadata counts against
 *    the bytes instead. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define RT_VOLUME_DIR "vol"              /* DATA/vol: the mounted volume */
#define RT_VOLUME_IMAGE "vol.img"        /* DATA/vol.img: its sparse backing file */
#define RT_VOLUME_MIN_SIZE (128ull << 20) /* mkfs.btrfs wants ~114 MiB */
#define RT_QUOTA_MIN_BYTES (1ull << 20)   /* below this a limit is surely a mistake */
#define RT_QUOTA_MIN_INODES 16

/* Applies the limits (0 = none) to the writable layer made of upper_dir and work_dir
 * (same filesystem; on btrfs the same subvolume, which must not be the top level).
 * Idempotent; a sandbox created again for the same upper dir keeps its accounting.
 * -EOPNOTSUPP when the filesystem cannot enforce them (no project quota, quotas off,
 * btrfs asked for an inode limit only), -EINVAL for a bad layout or too small limits;
 * runtime_last_error() says which. Nothing to do (0) when both limits are 0. */
int rt_quota_apply(const char *upper_dir, const char *work_dir, uint64_t bytes, uint64_t inodes);

/* Usage counted against the limits of upper_dir's project or subvolume; inodes is 0 where
 * the filesystem does not count them (btrfs). */
int rt_quota_usage(const char *upper_dir, uint64_t *ret_bytes, uint64_t *ret_inodes);

/* Prepares DATA/vol, a quota-capable filesystem for sandbox dirs: a sparse image
 * DATA/vol.img of `size` bytes (made on first use; an existing one is reused whatever
 * `size` says), loop-attached with autoclear and mounted nosuid,nodev. The filesystem is
 * ext4 with project quotas where the kernel supports them, else btrfs with quotas on.
 * Runs mkfs as a subprocess the first time (daemon start-up, not a hot path). Idempotent:
 * 0 at once when DATA/vol is mounted already. *ret_path (optional) = DATA/vol. */
int rt_volume_prepare(const char *data_dir, uint64_t size, char **ret_path);
/* Unmounts DATA/vol (the loop device then detaches by itself); the image stays. 0 when
 * nothing was mounted. -EBUSY while sandboxes still use it. */
int rt_volume_teardown(const char *data_dir);
/* Makes the directory that holds one sandbox's upper and work dirs: a btrfs subvolume
 * on btrfs (so it can carry a qgroup limit), a plain directory elsewhere. Remove it with
 * rt_rm_rf (an empty subvolume is removed like a directory). */
int rt_volume_make_dir(const char *path, unsigned mode);

/* 1 if dir is the root of a btrfs subvolume (what rt_volume_make_dir makes on btrfs),
 * 0 if not. */
int rt_volume_is_subvol(const char *dir);
/* A read-only btrfs snapshot of the subvolume src at dst (absolute, on the same
 * filesystem, not there yet). The kernel writes src's dirty data out first and commits
 * the transaction: once this returns, the snapshot is on disk as src was at the call.
 * -ENOTTY (or another errno) where src is not a btrfs subvolume. */
int rt_volume_snapshot(const char *src, const char *dst);
/* Deletes the subvolume path (a snapshot of rt_volume_snapshot: read-only, so rt_rm_rf
 * can't); its space is freed in the background. 0 if it is not there. */
int rt_volume_remove(const char *path);
/* Attaches the open image to a free loop device (autoclear: it goes away once nothing
 * mounts it); dev gets its path, *ret_fd an fd on it to close after the mount. */
int rt_loop_attach(int img_fd, char *dev, size_t n, int *ret_fd);
