/* Helpers of spaced that need no daemon state; see util.h. */
#include "daemon/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/macros.h"
#include "daemon/spaced.h"
#include "meta/meta.h"
#include "common/json.h"

int util_random_bytes(void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t k = getrandom((uint8_t *)buf + got, n - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)k;
        }
        return 0;
}

int util_random_id(const char *prefix, char *out, size_t outsz) {
        uint8_t raw[8];
        int r = util_random_bytes(raw, sizeof raw);
        if (r < 0)
                return r;
        int n = snprintf(out, outsz, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, raw[0], raw[1], raw[2], raw[3],
                         raw[4], raw[5], raw[6], raw[7]);
        return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

bool util_id_valid(const char *id, const char *prefix) {
        size_t pl = strlen(prefix);
        if (strncmp(id, prefix, pl) != 0 || strlen(id) != pl + 16)
                return false;
        for (const char *c = id + pl; *c; c++)
                if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
                        return false;
        return true;
}

int util_parse_size(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v >= 0) || isinf(v))
                return -EINVAL;
        uint64_t mul = 1;
        if (*end) {
                switch (*end) {
                case 'k': case 'K': mul = 1ull << 10; break;
                case 'm': case 'M': mul = 1ull << 20; break;
                case 'g': case 'G': mul = 1ull << 30; break;
                case 't': case 'T': mul = 1ull << 40; break;
                case 'b': case 'B': mul = 1; break;
                default: return -EINVAL;
                }
                end++;
                if (mul > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "i") == 0))
                        end += strlen(end);
                if (*end)
                        return -EINVAL;
        }
        double b = v * (double)mul;
        if (b >= 18446744073709549568.0)
                return -ERANGE;
        *ret = (uint64_t)b;
        return 0;
}

int util_json_size(const struct json *v, uint64_t *ret) {
        int64_t n;
        if (json_type(v) == JSON_STRING)
                return util_parse_size(json_str(v), ret);
        if (json_int(v, &n) < 0 || n < 0)
                return -EINVAL;
        *ret = (uint64_t)n;
        return 0;
}

void util_rfc3339(time_t t, char *out, size_t outsz) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(out, outsz, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void util_strv_free(char **v, size_t n) {
        if (!v)
                return;
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

uint64_t util_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int util_errno_status(int err) {
        switch (err) {
        case ENOENT: case ESRCH: return 404;
        case EEXIST: case ENOTEMPTY: case EBUSY: case EAGAIN: case ETXTBSY: return 409;
        case EACCES: case EPERM: case EROFS: return 403;
        case EFBIG: case EMSGSIZE: return 413;
        case ENOSPC: case EDQUOT: return 507;
        case EINVAL: case EISDIR: case ENOTDIR: case ENAMETOOLONG: case ELOOP: case EXDEV:
        case EOPNOTSUPP: case ERANGE: case E2BIG:
                return 400;
        default: return 500;
        }
}

int util_boot_id(char out[64]) {
        _cleanup_close_ int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, out, 63);
        if (n <= 0)
                return n < 0 ? -errno : -EIO;
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0';
        return 0;
}

int util_meta_open(const char *path, struct meta **ret, char *why, size_t why_size) {
        char err[512];
        int r = meta_open(path, &(struct meta_opts){ META_OPTS_INIT, .error = err, .error_size = sizeof err }, ret);
        if (r == -EPROTO)
                snprintf(why, why_size, "%s: %s: a newer spaced than %s wrote it; use a newer spaced (nothing in it "
                         "was changed)", path, err, SPACED_VERSION);
        else if (r < 0)
                snprintf(why, why_size, "%s: %s", path, err[0] ? err : strerror(-r));
        return r;
}
