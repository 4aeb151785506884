/* The pure parts of durable sessions (session_rules.h): tokens, the state/request table, the
 * change check of rolling snapshots and event payloads. */
#include "daemon/session_rules.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/macros.h"
#include "daemon/util.h"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int dl_token_new(char out[DL_TOKEN_LEN + 1]) {
        uint8_t raw[DL_TOKEN_BYTES + 1] = { 0 }; /* +1: the last group reads one byte past */
        int r = util_random_bytes(raw, DL_TOKEN_BYTES);
        if (r < 0)
                return r;
        size_t o = 0;
        for (size_t i = 0; i < DL_TOKEN_BYTES; i += 3) {
                uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 |
                             (i + 2 < DL_TOKEN_BYTES ? raw[i + 2] : 0);
                size_t chars = MIN((size_t)4, DL_TOKEN_LEN - o);
                for (size_t k = 0; k < chars; k++)
                        out[o++] = b64url[v >> (18 - 6 * k) & 63];
        }
        out[o] = '\0';
        return 0;
}

bool dl_token_well_formed(const char *t) {
        if (!t || strlen(t) != DL_TOKEN_LEN)
                return false;
        for (const char *c = t; *c; c++)
                if (!strchr(b64url, *c))
                        return false;
        return true;
}

int dl_action_check(enum dl_action a, enum meta_session_state st, const char **why) {
        *why = "";
        if (st == META_SESSION_TERMINATED) {
                *why = "the session is being deleted";
                return a == DL_DELETE || a == DL_EVENTS ? 0 : -EBUSY;
        }
        switch (a) {
        case DL_EVENTS:
        case DL_DELETE:
                return 0;
        case DL_EXEC:
                if (st == META_SESSION_RUNNING)
                        return 0;
                if (st == META_SESSION_PAUSED) {
                        *why = "the session is paused (resume it first)";
                        return -EBUSY;
                }
                if (st == META_SESSION_CREATING) {
                        *why = "the session is still starting";
                        return -EBUSY;
                }
                *why = "the session is recovering from a lost sandbox; try again in a moment";
                return -EAGAIN;
        case DL_SNAPSHOT:
        case DL_PAUSE:
                if (st == META_SESSION_RUNNING || st == META_SESSION_RECOVERING)
                        return 0; /* a recovering one is served once it runs again */
                *why = st == META_SESSION_PAUSED ? "the session is paused" : "the session is still starting";
                return -EBUSY;
        case DL_RESUME:
                if (st == META_SESSION_PAUSED)
                        return 0;
                *why = st == META_SESSION_CREATING ? "the session is still starting" : "the session is not paused";
                return -EBUSY;
        case DL_RESTORE:
        case DL_FORK:
                if (st == META_SESSION_CREATING) {
                        *why = "the session is still starting";
                        return -EBUSY;
                }
                return 0;
        }
        *why = "unknown request";
        return -EBUSY;
}

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec; }

static int dirty_walk(int dfd, int64_t limit, unsigned depth, bool *ret) {
        _cleanup_closedir_ DIR *d = fdopendir(dfd);
        if (!d) {
                int e = -errno;
                close(dfd);
                return e;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno == ENOENT) { /* removed under us: a change */
                                *ret = true;
                                return 0;
                        }
                        return -errno;
                }
                if (ts_ns(&st.st_ctim) >= limit) {
                        *ret = true;
                        return 0;
                }
                if (S_ISDIR(st.st_mode) && depth < DL_DIRTY_MAX_DEPTH) {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0) {
                                if (errno == ENOENT) {
                                        *ret = true;
                                        return 0;
                                }
                                return -errno;
                        }
                        int r = dirty_walk(sub, limit, depth + 1, ret);
                        if (r < 0 || *ret)
                                return r;
                }
        }
        return 0;
}

int dl_dirty(const char *dir, int64_t since_ns, bool *ret) {
        int64_t limit = since_ns - DL_DIRTY_SLACK_NS;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        if (ts_ns(&st.st_ctim) >= limit) {
                close(fd);
                *ret = true;
                return 0;
        }
        bool dirty = false;
        int r = dirty_walk(fd, limit, 0, &dirty);
        if (r < 0)
                return r;
        *ret = dirty;
        return 0;
}

void dl_rfc3339_ms(int64_t ms, char *out, size_t outsz) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        char base[32];
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, outsz, "%s.%03dZ", base, (int)(ms % 1000));
}

static void kid(struct json_writer *w, const char *k, const char *v) {
        json_w_key(w, k);
        if (v && *v)
                json_w_str(w, v);
        else
                json_w_null(w);
}

int dl_lifecycle_json(struct buf *b, const char *ev, const char *snap, const char *reason) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "event", ev);
        kid(&w, "snapshot", snap);
        if (reason && *reason)
                json_w_kstr(&w, "reason", reason);
        json_w_obj_end(&w);
        return w.err;
}

int dl_recovery_json(struct buf *b, const char *lost, const char *reason, const char *from, const char *new_sbx,
                     const char *error) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        kid(&w, "lost_sandbox", lost);
        json_w_kstr(&w, "reason", reason ? reason : "");
        kid(&w, "from_snapshot", from);
        kid(&w, "new_sandbox", new_sbx);
        if (error)
                json_w_kstr(&w, "error", error);
        json_w_obj_end(&w);
        return w.err;
}

int dl_snapshot_event_json(struct buf *b, const char *snap, const char *reason, uint64_t bytes_added,
                           const char *label, double freeze_ms) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "snapshot", snap);
        json_w_kstr(&w, "reason", reason);
        json_w_key(&w, "bytes_added");
        json_w_uint(&w, bytes_added);
        kid(&w, "label", label);
        if (freeze_ms >= 0) {
                json_w_key(&w, "freeze_ms");
                json_w_double(&w, freeze_ms);
        }
        json_w_obj_end(&w);
        return w.err;
}

int dl_snapshot_failed_json(struct buf *b, const char *reason, const char *error) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "reason", reason);
        json_w_kstr(&w, "error", error ? error : "");
        json_w_obj_end(&w);
        return w.err;
}

bool dl_agent_kind(const char *kind) {
        return kind && (!strcmp(kind, "agent") || !strcmp(kind, "tool_call") || !strcmp(kind, "note"));
}

bool dl_bucket_take(struct dl_bucket *b, uint64_t now_ms, uint64_t rate, uint64_t burst, unsigned *retry_s) {
        if (!b->at_ms || now_ms < b->at_ms)
                b->tokens = (double)burst;
        else
                b->tokens += (double)(now_ms - b->at_ms) * (double)rate / 1000.0;
        if (b->tokens > (double)burst)
                b->tokens = (double)burst;
        b->at_ms = now_ms ? now_ms : 1;
        if (b->tokens >= 1.0) {
                b->tokens -= 1.0;
                return true;
        }
        double wait = (1.0 - b->tokens) / (double)rate;
        unsigned s = (unsigned)wait;
        *retry_s = s + ((double)s < wait ? 1 : 0);
        if (*retry_s < 1)
                *retry_s = 1;
        return false;
}

uint64_t dl_snapshot_limit(unsigned factor, uint64_t disk, uint64_t disk_default) {
        uint64_t base = disk ? disk : disk_default;
        if (!factor || !base)
                return 0;
        return base > UINT64_MAX / factor ? UINT64_MAX : base * factor;
}

bool dl_snapshot_fits(uint64_t used, uint64_t add, uint64_t limit) {
        return !limit || (used <= limit && add <= limit - used);
}

int dl_snapshot_limit_json(struct buf *b, const char *snap, uint64_t bytes, uint64_t limit, uint64_t tenant_bytes,
                           uint64_t tenant_limit) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        kid(&w, "snapshot", snap);
        json_w_key(&w, "bytes");
        json_w_uint(&w, bytes);
        json_w_key(&w, "limit");
        json_w_uint(&w, limit);
        json_w_key(&w, "tenant_bytes");
        json_w_uint(&w, tenant_bytes);
        json_w_key(&w, "tenant_limit");
        json_w_uint(&w, tenant_limit);
        json_w_obj_end(&w);
        return w.err;
}
