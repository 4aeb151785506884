/* Disk limits of sessions, the daemon's side (docs/security.md "Disk"): the quota volume
 * DATA/vol that spaced mounts at start (runtime/quota.h), where writable layers live with
 * and without it, the "disk" field of a create, and what /v1/health says about it. The
 * kernel enforces the limits; this file only decides where layers go and which limit. */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common/log.h"
#include "daemon/disk.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/session.h"
#include "daemon/layers.h"
#include "runtime/fsutil.h"
#include "runtime/quota.h"
#include "runtime/runtime.h"

/* The volume's default size: half the free space of the data dir's filesystem, at most
 * SPACED_VOLUME_DEFAULT_MAX. The image is sparse: it takes what the layers hold. */
static uint64_t default_volume_size(const char *data_dir) {
        struct statvfs sv;
        if (statvfs(data_dir, &sv) < 0)
                return 0;
        uint64_t free_bytes = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
        return MIN(free_bytes / 2, SPACED_VOLUME_DEFAULT_MAX);
}

static uint64_t volume_bytes(const char *vol) {
        struct statvfs sv;
        if (statvfs(vol, &sv) < 0)
                return 0;
        return (uint64_t)sv.f_blocks * (uint64_t)sv.f_frsize;
}

static void disk_off(struct daemon *d, const char *fmt, ...) _printf_(2, 3);
static void disk_off(struct daemon *d, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->disk_error, sizeof d->disk_error, fmt, ap);
        va_end(ap);
        d->disk_quota = false;
        d->disk_default = 0;
        log_warn("disk limits are off: %s; sessions run without one, a create that asks for one fails",
                 d->disk_error);
}

int disk_setup(struct daemon *d, uint64_t size, bool size_given) {
        free(d->layer_dir);
        d->layer_dir = strdup(d->data_dir);
        if (!d->layer_dir)
                return -ENOMEM;
        if (size_given && size == 0) {
                disk_off(d, "the quota volume is disabled (--disk-volume-size 0)");
                return 0;
        }
        if (!size_given)
                size = default_volume_size(d->data_dir);
        _cleanup_free_ char *vol = NULL, *sbx = NULL;
        int r = rt_volume_prepare(d->data_dir, size, &vol);
        if (r < 0) {
                const char *e = runtime_last_error();
                disk_off(d, "no quota volume in %s/" RT_VOLUME_DIR ": %s", d->data_dir, *e ? e : strerror(-r));
                return 0;
        }
        if (asprintf(&sbx, "%s/sandboxes", vol) < 0)
                return -ENOMEM;
        if ((r = rt_mkdir_p(sbx, 0700)) < 0) {
                disk_off(d, "%s: %s", sbx, strerror(-r));
                (void)rt_volume_teardown(d->data_dir);
                return 0;
        }
        d->volume_size = volume_bytes(vol);
        d->disk_max = MIN(SES_MAX_DISK, d->volume_size);
        if (d->disk_default > d->disk_max)
                d->disk_default = d->disk_max;
        d->disk_quota = true;
        d->disk_error[0] = '\0';
        free(d->layer_dir);
        d->layer_dir = TAKE_PTR(vol);
        log_info("disk limits on: quota volume %s (%" PRIu64 " MiB, sparse), default limit %" PRIu64 " MiB%s",
                 d->layer_dir, d->volume_size >> 20, d->disk_default >> 20, d->disk_default ? "" : " (none)");
        return 0;
}

void disk_teardown(struct daemon *d) {
        if (d->disk_quota) {
                int r = rt_volume_teardown(d->data_dir);
                if (r == -EBUSY)
                        log_info("the quota volume stays mounted: sandboxes left running use it");
                else if (r < 0)
                        log_warn("%s", runtime_last_error());
                d->disk_quota = false;
        }
        free(d->layer_dir);
        d->layer_dir = NULL;
}

char *disk_sandbox_dir(struct daemon *d, const char *sbx) {
        char *p = NULL;
        return asprintf(&p, "%s/sandboxes/%s", d->layer_dir ? d->layer_dir : d->data_dir, sbx) < 0 ? NULL : p;
}

char *disk_sandbox_dir_find(struct daemon *d, const char *sbx) {
        char *p = disk_sandbox_dir(d, sbx);
        struct stat st;
        if (!p || lstat(p, &st) == 0 || !d->layer_dir || !strcmp(d->layer_dir, d->data_dir))
                return p;
        /* Made before this data dir had a volume (or while it could not be mounted). */
        free(p);
        p = NULL;
        return asprintf(&p, "%s/sandboxes/%s", d->data_dir, sbx) < 0 ? NULL : p;
}

int disk_check_limit(struct daemon *d, bool given, uint64_t asked, uint64_t *ret, char *why, size_t why_size) {
        uint64_t disk = d->disk_default;
        if (given) {
                disk = asked;
                if (disk > 0 && !d->disk_quota) {
                        snprintf(why, why_size, "disk limits are not available on this host: %s", d->disk_error);
                        return -ENODEV;
                }
                if (disk == 0 || disk < SES_MIN_DISK || disk > d->disk_max) {
                        snprintf(why, why_size,
                                 "disk must be between %" PRIu64 "M and %" PRIu64 "M (the quota volume's size)",
                                 (uint64_t)(SES_MIN_DISK >> 20), d->disk_max >> 20);
                        return -EINVAL;
                }
        }
        *ret = disk;
        return 0;
}

int disk_usage(struct session *s, uint64_t *ret) {
        if (!s->d->disk_quota || !s->dir)
                return -ENOENT;
        _cleanup_free_ char *upper = NULL;
        if (asprintf(&upper, "%s/upper", s->dir) < 0)
                return -ENOMEM;
        return rt_quota_usage(upper, ret, NULL);
}

void disk_health_json(struct daemon *d, struct json_writer *w) {
        json_w_key(w, "disk_limits");
        json_w_obj_begin(w);
        json_w_kbool(w, "enforced", d->disk_quota);
        json_w_key(w, "default");
        json_w_uint(w, d->disk_default);
        json_w_key(w, "max");
        json_w_uint(w, d->disk_quota ? d->disk_max : 0);
        json_w_key(w, "volume_size");
        json_w_uint(w, d->disk_quota ? d->volume_size : 0);
        if (!d->disk_quota)
                json_w_kstr(w, "error", d->disk_error);
        json_w_obj_end(w);
}
