/* Parked sessions: pause (a final snapshot, the sandbox destroyed, its writable layer
 * kept as DATA/parked/<session>) and resume (that layer moved back under a new sandbox, or
 * one made from the head when it is gone). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "common/log.h"
#include "daemon/durable-internal.h"

/* ---------------- parked layers ---------------- */

/* A paused session keeps the directory of its last sandbox (writable layer, overlay work
 * dir) as L/parked/<session>, with L/parked/<session>.rec naming the snapshot it equals:
 * a resume from that snapshot renames it into place instead of materializing the
 * snapshot (O(1), not O(workspace)). L is the layer dir (the quota volume, else DATA):
 * the whole directory moves, not just upper/, because on a btrfs volume it is a
 * subvolume carrying the disk limit and its accounting, and nothing renames out of a
 * subvolume (EXDEV); on ext4 the project id moves with it. The record also names the boot: the layer was never fsynced, so
 * after a host crash only the snapshot is trusted. For the same reason the record needs
 * no fsync either: within one boot the page cache is the truth, and a torn record reads
 * as none. Version 1 records (upper/ alone) read as none. */
#define PARK_MAGIC "space-parked 2"
#define PARK_REC_MAX 512

char *dur_parked_path(struct daemon *d, const char *ses, const char *suffix) {
        char *p = NULL;
        return asprintf(&p, "%s/parked/%s%s", d->layer_dir ? d->layer_dir : d->data_dir, ses, suffix) < 0 ? NULL : p;
}

static int park_record(struct session *s, char *out, size_t size) {
        char hex[STORE_HEX_LEN + 1], boot[64];
        int r = util_boot_id(boot);
        if (r < 0)
                return r;
        store_hash_to_hex(&s->head_hash, hex);
        int n = snprintf(out, size, "%s\n%s\n%s\n%s\n", PARK_MAGIC, s->head, hex, boot);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

/* Removes s's parked layer and record, if any (off the loop: a layer can be large). */
void dur_parked_drop(struct session *s) {
        _cleanup_free_ char *layer = dur_parked_path(s->d, s->id, ""), *rec = dur_parked_path(s->d, s->id, ".rec");
        if (!layer || !rec)
                return;
        if (unlink(rec) < 0 && errno != ENOENT)
                log_warn("%s: removing %s: %s", s->id, rec, strerror(errno));
        struct stat st;
        if (lstat(layer, &st) == 0)
                dur_trash_dir(s->d, layer);
}

/* Pause: keeps s's sandbox directory (its sandbox is destroyed, nothing runs or is
 * mounted there) as the parked layer of the head snapshot, which the capture just took
 * from it while the sandbox was frozen. True if s->dir is parked (gone from where it was).
 * Anything that goes wrong leaves no record: resume then materializes as before. */
static bool park_layer(struct session *s) {
        struct daemon *d = s->d;
        _cleanup_free_ char *dir = NULL, *layer = dur_parked_path(d, s->id, ""), *rec = dur_parked_path(d, s->id, ".rec"),
                            *tmp = dur_parked_path(d, s->id, ".rec.tmp");
        char text[PARK_REC_MAX];
        _cleanup_close_ int fd = -1;
        int r = -ENOMEM;
        bool moved = false;
        if (!layer || !rec || !tmp || asprintf(&dir, "%s/parked", d->layer_dir ? d->layer_dir : d->data_dir) < 0)
                goto fail;
        dur_parked_drop(s);
        /* EXDEV for a sandbox made before the data dir had its volume: it is not kept. */
        if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || !(moved = rename(s->dir, layer) == 0)) {
                r = -errno;
                goto fail;
        }
        int n = park_record(s, text, sizeof text);
        if (n < 0) {
                r = n;
                goto fail;
        }
        errno = 0;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || write(fd, text, (size_t)n) != n || rename(tmp, rec) < 0) {
                r = errno ? -errno : -EIO;
                (void)unlink(tmp);
                goto fail;
        }
        log_debug("%s: parked the writable layer of %s", s->id, s->head);
        return true;
fail:
        log_warn("%s: keeping the writable layer failed (resume will restore the snapshot): %s", s->id,
                 strerror(-r));
        dur_parked_drop(s);
        return moved;
}

/* Resume: moves s's parked sandbox directory to `dir` (which does not exist yet) if its
 * record names s's head snapshot in this boot. True if it did; otherwise the parked
 * layer (if any) is gone and the caller materializes the head. The store's stat cache of
 * the head is keyed by the layer's device and inode, which a rename keeps, so the next
 * capture stays incremental. */
bool dur_unpark_layer(struct session *s, const char *dir) {
        _cleanup_free_ char *layer = dur_parked_path(s->d, s->id, ""), *rec = dur_parked_path(s->d, s->id, ".rec");
        char want[PARK_REC_MAX], have[PARK_REC_MAX];
        if (!layer || !rec)
                return false;
        _cleanup_close_ int fd = open(rec, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                if (errno != ENOENT)
                        log_warn("%s: reading %s: %s", s->id, rec, strerror(errno));
                dur_parked_drop(s);
                return false;
        }
        ssize_t n = read(fd, have, sizeof have);
        int wn = park_record(s, want, sizeof want);
        struct stat st;
        if (n < 0 || wn < 0 || n != wn || memcmp(have, want, (size_t)n) != 0) {
                log_info("%s: the parked layer is not of head %s in this boot: restoring the snapshot", s->id, s->head);
                dur_parked_drop(s);
                return false;
        }
        /* it shows the snapshot only over the snapshot layer it lay on, which must be there */
        _cleanup_free_ char *lref = NULL, *files = NULL;
        struct layer_ref l = { 0 };
        int lr = asprintf(&lref, "%s/layer", layer) < 0 ? -ENOMEM : layers_ref_read(lref, &l);
        if ((lr < 0 && lr != -ENOENT) ||
            (l.set && (layers_files_dir(s->d->data_dir, &l, &files) < 0 || access(files, F_OK) < 0))) {
                log_info("%s: the parked layer's snapshot layer is gone: restoring the snapshot", s->id);
                dur_parked_drop(s);
                return false;
        }
        if (lstat(layer, &st) < 0 || !S_ISDIR(st.st_mode) || unlink(rec) < 0 || rename(layer, dir) < 0) {
                log_warn("%s: taking the parked layer: %s; restoring the snapshot", s->id, strerror(errno));
                dur_parked_drop(s);
                return false;
        }
        s->layer = l;
        /* The old sandbox's run dir (its stale socket, the rootfs mount point) goes. */
        _cleanup_free_ char *run = NULL;
        if (asprintf(&run, "%s/run", dir) >= 0)
                (void)rt_rm_rf(run);
        return true;
}

/* At start: parked layers of sessions that are not paused any more (a crash between the
 * state change and the removal) go. */
void dur_parked_sweep(struct daemon *d) {
        _cleanup_free_ char *dir = NULL, *legacy = NULL;
        /* Layers parked outside the volume by a spaced without it: of the old format. */
        if (d->layer_dir && strcmp(d->layer_dir, d->data_dir) && asprintf(&legacy, "%s/parked", d->data_dir) >= 0)
                (void)rt_rm_rf(legacy);
        if (asprintf(&dir, "%s/parked", d->layer_dir ? d->layer_dir : d->data_dir) < 0)
                return;
        _cleanup_closedir_ DIR *dp = opendir(dir);
        struct dirent *de;
        while (dp && (de = readdir(dp))) {
                if (de->d_name[0] == '.')
                        continue;
                size_t len = strcspn(de->d_name, ".");
                const char *suffix = de->d_name + len;
                bool keep = false;
                for (struct session *s = d->sessions; s && !keep; s = s->next)
                        keep = s->state == META_SESSION_PAUSED && strlen(s->id) == len &&
                               !strncmp(s->id, de->d_name, len) && (!*suffix || !strcmp(suffix, ".rec"));
                if (!keep) {
                        int r = rt_rm_rf_at(dirfd(dp), de->d_name);
                        if (r < 0 && r != -ENOENT)
                                log_warn("removing %s/%s: %s", dir, de->d_name, strerror(-r));
                }
        }
}

/* ---------------- pause / resume ---------------- */

static int pause_extra(struct session *s, const char *snap_id) {
        struct daemon *d = s->d;
        int r;
        struct buf b = BUF_INIT(0);
        if ((r = meta_session_set_state(d->meta, s->id, META_STATE_BIT(META_SESSION_RUNNING), META_SESSION_PAUSED,
                                        NULL)) < 0 ||
            (r = meta_sandbox_set_state(d->meta, s->sbx_id, META_SANDBOX_DESTROYED, "paused")) < 0 ||
            (r = meta_session_set_sandbox(d->meta, s->id, NULL)) < 0 ||
            (r = dl_lifecycle_json(&b, "paused", snap_id, NULL)) < 0 ||
            (r = meta_event_append(d->meta, s->id, "lifecycle", b.data, b.len, NULL)) < 0) {
                buf_free(&b);
                return r;
        }
        buf_free(&b);
        return 0;
}

/* The event that says what became of a checkpoint (drivers with memory snapshots). */
void dur_memory_event(struct session *s, const char *event, const char *snap, const struct job *j,
                         const char *err) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "event", event);
        json_w_kstr(&w, "snapshot", snap);
        json_w_kstr(&w, "runtime", s->rt->name);
        json_w_kbool(&w, "memory", err == NULL);
        if (err)
                json_w_kstr(&w, "reason", err);
        if (j) {
                json_w_key(&w, "ms");
                json_w_double(&w, (double)j->checkpoint_us / 1000.0);
                json_w_key(&w, "bytes_added");
                json_w_uint(&w, j->mem_stats.bytes_written);
                json_w_key(&w, "bytes_logical");
                json_w_uint(&w, j->mem_stats.bytes_logical);
                json_w_key(&w, "deltas");
                json_w_uint(&w, j->mem_stats.deltas_written);
        }
        json_w_obj_end(&w);
        if (!w.err)
                ses_event(s, "memory", &b);
        buf_free(&b);
}

/* A capture that checkpointed (or tried to) left the sandbox stopped: if the pause is
 * not going through after all, the session needs a new sandbox. */
void dur_pause_failed(struct action *a, struct job *j, const char *what, const char *err) {
        struct session *s = a->s;
        if (j->memory) {
                char msg[600];
                snprintf(msg, sizeof msg, "%s: %s", what, err);
                dur_act_fail(a, -EIO, "%s", msg);
                ses_mark_dead(s, "%s", msg);
                return;
        }
        if (s->sb && !s->lost)
                (void)s->rt->thaw(s->sb);
        dur_act_fail(a, -EIO, "%s: %s", what, err);
}

static void pause_done(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                dur_snapshot_failed_event(s, META_REASON_PAUSE, j->err);
                dur_pause_failed(a, j, "pause failed", j->err);
                return;
        }
        struct meta_snapshot m;
        int r = dur_snapshot_commit(s, j, META_REASON_PAUSE, a->label, pause_extra, &m);
        if (r < 0) {
                dur_pause_failed(a, j, "recording the pause failed", dur_merr(s->d));
                return;
        }
        dur_snap_limit_apply(s, m.id);
        if (j->memory) {
                dur_memory_event(s, "checkpoint", m.id, j, j->has_memory ? NULL : j->mem_err);
                if (j->has_memory)
                        log_info("%s: memory of %s: checkpoint + store %" PRIu64 " us, %" PRIu64 " bytes new of %" PRIu64
                                 " (%" PRIu64 " delta chunks)",
                                 s->id, m.id, j->checkpoint_us, j->mem_stats.bytes_written, j->mem_stats.bytes_logical,
                                 j->mem_stats.deltas_written);
                else
                        log_warn("%s: pause %s without memory: %s", s->id, m.id, j->mem_err);
        }
        s->state = META_SESSION_PAUSED;
        uint64_t t0 = dur_mono_us();
        ses_drop_sandbox(s, "the session was paused");
        uint64_t destroy_us = dur_mono_us() - t0;
        /* Only a layer that was frozen from the capture until now equals the snapshot. */
        if (s->dir && !(j->sb && park_layer(s)))
                dur_trash_dir(s->d, s->dir);
        free(s->dir);
        s->dir = NULL;
        s->sbx_id[0] = '\0';
        log_info("%s: paused at %s (capture %" PRIu64 " us, sandbox destroyed in %" PRIu64 " us)", s->id, m.id,
                 j->capture_us, destroy_us);
        dur_answer_session(&a->w, s, NULL);
        dur_act_done(a);
}

void dur_run_pause(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int err = dl_action_check(DL_PAUSE, s->state, &why);
        if (err == 0 && !s->dir) {
                err = -EAGAIN;
                why = "the session has no sandbox right now";
        }
        if (err) {
                dur_act_fail(a, err, "%s", why);
                return;
        }
        /* Frozen until destroyed: nothing runs after the final snapshot. */
        int r = dur_capture_begin(a, META_REASON_PAUSE, false, false, pause_done);
        if (r < 0)
                dur_act_fail(a, -EIO, "starting the capture: %s", strerror(-r));
}

void dur_run_resume(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int err = dl_action_check(DL_RESUME, s->state, &why);
        if (err) {
                dur_act_fail(a, err, "%s", why);
                return;
        }
        a->why = START_RESUME;
        a->kind = ACT_START;
        dur_start_begin(a);
}
