/* Internals of the microvm driver shared by its files (microvm.c: QEMU, QMP and the
 * ops table; assets.c: initramfs, template image, session disk, file export). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/runtime.h"

#define MV_MAX_PATH 4000
#define MV_DEFAULT_GUEST_DIR "/var/cache/space/guest" /* $SPACE_GUEST_DIR overrides */
#define MV_QEMU_BIN "qemu-system-x86_64"
#define MV_QEMU_UID 99999u /* unprivileged QEMU: nobody else's id */

/* $SPACE_GUEST_DIR or the default. */
const char *mv_guest_dir(void);
/* QEMU runs as MV_QEMU_UID (root, unless SPACE_MICROVM_PRIVILEGED=1). */
bool mv_unprivileged(void);

/* Guest instructions/s of the probe's kernel-mode loop below which KVM is not worth it
 * (accel.c says why this value); SPACE_MICROVM_KVM_MIN_IPS overrides it. */
#define MV_KVM_MIN_IPS 100000000LL
/* accel.c. The probe alone (no cache): a child times a tiny 64-bit guest looping in
 * kernel mode, then in user mode, on /dev/kvm; kvm when kernel mode ran at >= min_ips
 * instructions/s, else tcg with the reason (no /dev/kvm, EACCES, API, rates...). */
int mv_accel_probe(int64_t min_ips, struct rt_accel_info *ret);
/* The verdict for setting (SPACE_MICROVM_ACCEL: NULL, "auto", "kvm", "tcg"; else
 * -EINVAL): auto reads guest_dir/accel.json when it was made on this host boot with this
 * QEMU, guest kernel and threshold (SPACE_MICROVM_KVM_MIN_IPS), else probes and writes it. */
int mv_accel_decide(const char *guest_dir, const char *setting, struct rt_accel_info *ret);
/* A KVM boot failed: the cached verdict becomes tcg with `why`, for this process too. */
int mv_accel_mark_failed(const char *guest_dir, const char *why);
/* Drops this process's memo of the verdict (the file cache stays). */
void mv_accel_forget(void);
/* The group QEMU needs under KVM (/dev/kvm's); -EACCES if an unprivileged QEMU can't. */
int mv_kvm_gid(gid_t *ret);

/* Runs argv (PATH lookup). unshift_ids: inside a user namespace where host ids
 * RT_ID_BASE.. are 0.., as root there. -EIO on a non-zero exit (runtime_last_error
 * says which, with the end of its output). */
int mv_run(char *const argv[], bool unshift_ids, const int *fds, size_t nfds);
/* fds[i] of mv_run is this path in the tool (up to 8). */
#define MV_RUN_FD_BASE 10
#define MV_RUN_FD_PATH(i) ("/proc/self/fd/1" #i) /* i: a literal 0..7, base 10 */
/* newc cpio: /init = init_path, guest_dir/modules/ *.ko under /modules, /dev/console. */
int mv_initramfs(const char *guest_dir, const char *init_path, const char *dst);
/* The template: the last (lowest) of the overlay lower dirs; the ones above it are
 * session files (snapshot layers the daemon stacks over the template). */
const char *mv_template_dir(const char *lower_dirs);
/* Names the ext4 image of the template of lower_dirs (16 hex digits). */
int mv_image_key(const char *lower_dirs, char *buf, size_t n);
/* guest_dir/images/KEY.ext4 of that template, built (mkfs.ext4 -d, ids unshifted) unless
 * cached. */
int mv_template_image(const char *guest_dir, const char *lower_dirs, char **ret);
/* A qcow2 session disk of `mib` MiB at dst: ext4 with upper/ (the layers above the
 * template and upper_dir merged, when they have files, else empty) and work/. */
int mv_session_disk(const char *guest_dir, const char *lower_dirs, const char *upper_dir, const char *run_dir,
                    uint64_t mib, const char *dst);
/* Replaces upper_dir's contents with the upper/ of a (consistent) session disk. */
int mv_export_upper(const char *disk_qcow2, const char *run_dir, const char *upper_dir);
/* Reflink, else a sparse copy. */
int mv_copy_file(const char *src, const char *dst);
