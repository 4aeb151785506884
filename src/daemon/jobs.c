/* The lifecycle's worker jobs (docs/sessions.md): the slow steps that run off the loop
 * thread — captures (with the btrfs source snapshot and the memory checkpoint), writable
 * layers filled from a snapshot, store forks, GC, removals, sandbox destroys and creates.
 * A job's work function runs on a worker and touches only the job; its continuation runs
 * on the loop thread and commits to meta. */
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

static void work_rm(struct job *j) {
        int r = j->subvol ? rt_volume_remove(j->dir) : rt_rm_rf(j->dir);
        if (r < 0) {
                j->r = r;
                snprintf(j->err, sizeof j->err, "removing %s: %s", j->dir, strerror(-r));
        }
}

/* A deleted session's sandbox: killed, unmounted, its cgroups and directory removed,
 * off the loop (a pid namespace's teardown and an unmount wait for the kernel for
 * milliseconds, which other sessions' requests would wait for too). */
void dur_work_destroy(struct job *j) {
        if (j->sb && j->rt->destroy(j->sb) < 0) {
                j->r = -EIO;
                snprintf(j->err, sizeof j->err, "destroying sandbox: %s", runtime_last_error());
        }
        j->sb = NULL;
        int r = j->dir ? rt_rm_rf(j->dir) : 0;
        if (r < 0 && r != -ENOENT && j->r == 0) {
                j->r = r;
                snprintf(j->err, sizeof j->err, "removing %s: %s", j->dir, strerror(-r));
        }
}

static void rm_done(struct job *j) {
        if (j->r < 0)
                log_warn("%s", j->err);
}

/* Deletes dir (taken) on a worker; subvol: a read-only btrfs snapshot. */
void dur_rm_submit(struct daemon *d, char *dir, bool subvol) {
        struct job *j = dur_job_new(d, NULL, NULL, JOB_RM, rm_done);
        if (!j) {
                free(dir);
                return;
        }
        j->dir = dir;
        j->subvol = subvol;
        if (wk_submit(d->workers, &j->wj) < 0)
                dur_job_free(j);
}

/* Removes a sandbox directory (its processes and mounts are gone already) off the loop:
 * renamed into the trash at once, deleted by a worker. A large writable layer takes a
 * while to delete, and a pause or restore should not wait for it. The trash is the one
 * of dir's filesystem (X/trash for X/sandboxes/sbx_… or X/parked/ses_…, X = DATA or the
 * quota volume DATA/vol): a rename cannot cross filesystems. */
void dur_trash_dir(struct daemon *d, const char *dir) {
        _cleanup_free_ char *trash = NULL, *dst = NULL;
        const char *base = strrchr(dir, '/');
        base = base ? base + 1 : dir;
        const char *up = base > dir + 1 ? memrchr(dir, '/', (size_t)(base - 1 - dir)) : NULL;
        /* The time makes the name unique: a session's parked layer can go twice while the
         * first is still being deleted. */
        if (!up || asprintf(&trash, "%.*s/trash", (int)(up - dir), dir) < 0 ||
            asprintf(&dst, "%s/%s.%" PRIu64, trash, base, dur_mono_us()) < 0)
                goto now;
        if (mkdir(trash, 0700) < 0 && errno != EEXIST)
                goto now;
        if (rename(dir, dst) < 0)
                goto now;
        dur_rm_submit(d, TAKE_PTR(dst), false); /* if it can't: left in trash, removed at the next start */
        return;
now: {
        int r = rt_rm_rf(dir);
        if (r < 0 && r != -ENOENT)
                log_warn("removing %s: %s", dir, strerror(-r));
}
}

/* Kills what is left of a sandbox nobody holds (a daemon crash, a failed adopt) and
 * removes its directory. */
void dur_reclaim_dir(struct daemon *d, const char *sbx) {
        _cleanup_free_ char *dir = disk_sandbox_dir_find(d, sbx), *run = NULL;
        if (!dir || asprintf(&run, "%s/run", dir) < 0)
                return;
        /* Which driver made it is not always known here (a stray directory): ask each;
         * reclaim is idempotent and cheap when the driver left nothing. */
        const struct runtime_ops *rt;
        for (size_t i = 0; (rt = runtime_nth(i)); i++)
                if (rt->reclaim && rt->reclaim(sbx, run) < 0)
                        log_warn("reclaiming %s (%s): %s", sbx, rt->name, runtime_last_error());
        net_release_sbx(d->net, sbx, dir);
        int r = rt_rm_rf(dir);
        if (r < 0)
                log_warn("removing %s: %s", dir, strerror(-r));
}

/* Destroys s's sandbox (requests on it end with msg, as unavailable), removes its directory and
 * records why in meta (dead: it died unasked; destroyed: on purpose). */
void dur_drop_sandbox(struct session *s, const char *msg, enum meta_sandbox_state st,
                         const char *reason) {
        ses_drop_sandbox(s, msg);
        if (s->sbx_id[0]) {
                if (s->dir)
                        dur_trash_dir(s->d, s->dir);
                if (meta_sandbox_set_state(s->d->meta, s->sbx_id, st, reason) < 0)
                        log_warn("%s: sandbox %s state: %s", s->id, s->sbx_id, dur_merr(s->d));
        }
        free(s->dir);
        s->dir = NULL;
        s->sbx_id[0] = '\0';
}

/* ---------------- jobs ---------------- */

void dur_job_free(struct job *j) {
        if (j->sb && j->kind == JOB_CREATE && j->rt->destroy(j->sb) < 0) /* made, then nobody took it */
                log_warn("%s: destroying an unused sandbox: %s", j->session, runtime_last_error());
        free(j->lower);
        free(j->upper);
        free(j->work);
        free(j->run);
        free(j->dir);
        free(j->mem_dir);
        free(j->src_snap);
        free(j->live);
        free(j);
}

static void job_done_cb(struct wjob *wj) {
        struct job *j = (struct job *)wj;
        if (j->s && j->s->job == j)
                j->s->job = NULL;
        j->cont(j);
        dur_job_free(j);
}

static void job_work(struct wjob *wj);

struct job *dur_job_new(struct daemon *d, struct session *s, struct action *a, enum job_kind kind,
                           void (*cont)(struct job *)) {
        struct job *j = calloc(1, sizeof *j);
        if (!j)
                return NULL;
        j->d = s ? s->d : d;
        j->s = s;
        j->act = a;
        j->kind = kind;
        j->cont = cont;
        j->wj.work = job_work;
        j->wj.done = job_done_cb;
        j->start_ns = dur_now_ns();
        if (s) {
                snprintf(j->session, sizeof j->session, "%s", s->id);
                j->layer = s->layer;
        }
        return j;
}

int dur_job_submit(struct job *j) {
        int r = wk_submit(j->d->workers, &j->wj);
        if (r < 0) {
                dur_job_free(j);
                return r;
        }
        if (j->s)
                j->s->job = j;
        return 0;
}

static void job_set_err(struct job *j, const char *what, int r) {
        const char *detail = store_error_detail();
        snprintf(j->err, sizeof j->err, "%s: %s%s%s", what, strerror(-r), *detail ? ": " : "", detail);
}

/* Whether a store error says a snapshot's data is damaged on disk — an object that does
 * not match its hash, one that is missing, a pack cut short — rather than a passing
 * failure: trying again cannot help, a restore to another snapshot or a repair can. */
bool dur_store_damaged(int r) { return r == -EBADMSG || r == -ENOENT || r == -EIO; }

/* The message for a failed read of snapshot snap by job j: "snapshot S is damaged: …" when
 * it is, else "WHAT S: …". */
void dur_snap_err(char *out, size_t size, const char *what, const char *snap, const struct job *j) {
        if (dur_store_damaged(j->r))
                snprintf(out, size, "snapshot %s is damaged: %s", snap, j->err);
        else
                snprintf(out, size, "%s %s: %s", what, snap, j->err);
}

/* True if dir has no entries: a writable layer that adds nothing to the template. */
static bool dir_empty(const char *dir) {
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return false;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        return false;
        return true;
}

/* Still frozen, everything read: the sandbox dir as a read-only btrfs snapshot, whose
 * upper/ is then exactly what the capture read (nothing in the sandbox ran between). */
static void source_snap_take(struct job *j) {
        if (!j->src_snap || j->src_tried)
                return;
        j->src_tried = true;
        uint64_t t0 = dur_mono_us();
        _cleanup_free_ char *sbx = strndup(j->dir, strlen(j->dir) - strlen("/upper"));
        int r = sbx ? rt_volume_snapshot(sbx, j->src_snap) : -ENOMEM;
        j->src_us = dur_mono_us() - t0;
        if (r < 0)
                log_warn("%s: btrfs snapshot for a source layer: %s (forks will materialize one)", j->session,
                         strerror(-r));
        j->src_taken = r == 0;
}

/* After the capture: the snapshot taken becomes the layer of the captured tree, or goes. */
static void source_snap_adopt(struct job *j, bool captured, const struct store_op_stats *st) {
        if (!j->src_taken)
                return;
        int r = -ECANCELED;
        /* overlayfs (index=off) breaks a lower layer's hard links on copy-up: no layer */
        if (captured && j->src_keep && st->link_groups == 0)
                r = layers_adopt(j->d->data_dir, j->d->store, &j->result, &j->root, j->src_snap, j->session, j->snap_id,
                                 &j->src_layer);
        if (r < 0) {
                if (r != -ECANCELED && r != -EEXIST)
                        log_warn("%s: publishing a source layer: %s", j->session, strerror(-r));
                int rr = rt_volume_remove(j->src_snap);
                if (rr < 0)
                        log_warn("%s: removing %s: %s", j->session, j->src_snap, strerror(-rr));
                j->src_layer = (struct layer_ref){ 0 };
        }
}

/* The store reports "commit" once it has read everything it needs from the directory
 * (docs/store.md): hashing is done, only writing and fsync remain, and those need not
 * keep the sandbox frozen. */
static void capture_progress(void *ud, const struct store_progress *p) {
        struct job *j = ud;
        if (!j->sb || !j->thaw || j->thawed || strcmp(p->phase, "commit") != 0)
                return;
        source_snap_take(j);
        int r = j->rt->thaw(j->sb);
        if (r < 0)
                log_warn("%s: thaw: %s", j->session, runtime_last_error());
        j->thawed = true;
        j->freeze_us = dur_mono_us() - j->freeze_t0;
}

/* Checkpoints j->sb into j->mem_dir and stores that directory; j->has_memory on success,
 * j->mem_err otherwise. The directory is removed either way. */
static void memory_capture(struct job *j) {
        uint64_t t0 = dur_mono_us();
        int r = 0;
        if (mkdir(j->mem_dir, 0700) < 0 && errno != EEXIST) {
                snprintf(j->mem_err, sizeof j->mem_err, "making %s: %s", j->mem_dir, strerror(errno));
                return;
        }
        r = j->rt->checkpoint(j->sb, j->mem_dir, j->thaw);
        j->checkpoint_us = dur_mono_us() - t0;
        if (r < 0) {
                snprintf(j->mem_err, sizeof j->mem_err, "checkpoint: %.200s", runtime_last_error());
                (void)rt_rm_rf(j->mem_dir);
                return;
        }
        /* Images rewritten in place at scattered pages (microvm's RAM and disk): fixed-size
         * chunks, so a dirty page costs one chunk, not a ~128 KiB content-defined one, and
         * with the last image as parent that chunk is stored as its difference. */
        struct store_capture_opts o = { .session = j->session, .label = "memory", .reason = j->sreason,
                                        .fixed_chunk = j->rt->image_in_place ? STORE_FIXED_CHUNK_IMAGE : 0,
                                        .stats = &j->mem_stats };
        r = -EAGAIN;
        for (int i = 0; i < DUR_CAPTURE_TRIES && r == -EAGAIN; i++)
                r = store_capture(j->d->store, j->mem_dir, j->has_mem_parent ? &j->mem_parent : NULL, &o,
                                  &j->memory_snap);
        if (r < 0 && j->has_mem_parent) {
                /* the head's image is only a reference for deltas: without it, store it whole */
                log_warn("%s: storing the memory image against the last one: %s; storing it whole", j->session,
                         strerror(-r));
                r = -EAGAIN;
                for (int i = 0; i < DUR_CAPTURE_TRIES && r == -EAGAIN; i++)
                        r = store_capture(j->d->store, j->mem_dir, NULL, &o, &j->memory_snap);
        }
        if (r < 0)
                snprintf(j->mem_err, sizeof j->mem_err, "storing the memory image: %s", strerror(-r));
        else
                j->has_memory = true;
        int rr = rt_rm_rf(j->mem_dir);
        if (rr < 0)
                log_warn("%s: removing %s: %s", j->session, j->mem_dir, strerror(-rr));
}

/* The snapshot layer j's upper dir lies on, for a capture over it; NULL: capture alone. */
static const struct store_hash *capture_base(const struct job *j) {
        return j->layer.set && !(j->rt && j->rt->merged_upper) ? &j->layer.rec : NULL;
}

/* A capture of the running sandbox before the freeze: it reads, hashes, compresses and
 * stores what changed while the sandbox runs on, and leaves a stat cache, so that the
 * frozen capture after it (with it as parent) only stats every entry and reads what
 * changed in between. The record itself is dropped once the frozen one exists. */
static bool precapture(struct job *j, struct store_hash *ret) {
        struct store_op_stats st = { 0 };
        struct store_capture_opts o = { .session = j->session, .label = "before the freeze", .reason = j->sreason,
                                        .stats = &st, .base = capture_base(j) };
        int r = store_capture(j->d->store, j->dir, j->has_parent ? &j->parent : NULL, &o, ret);
        if (r < 0) {
                log_debug("%s: capture before the freeze: %s (the frozen one reads everything)", j->session,
                          strerror(-r));
                return false;
        }
        j->pre_stats = st;
        return true;
}

void dur_work_capture(struct job *j) {
        /* No snapshot yet and nothing written: recovery from the template gives the same.
         * (A live checkpoint is what brings the files to the layer: it can't tell.) */
        bool files_tell = !(j->memory && j->thaw);
        if (files_tell && j->check_dirty && !j->has_parent && dir_empty(j->dir))
                return;
        if (files_tell && j->check_dirty && j->since_ns > 0) {
                bool dirty = true;
                int r = dl_dirty(j->dir, j->since_ns, &dirty);
                if (r < 0)
                        dirty = true; /* can't tell: capture (the store decides what is new) */
                if (!dirty)
                        return;
        }
        j->dirty = true;
        struct store_hash pre;
        bool has_pre = j->sb && j->thaw && !j->memory && !j->src_capture && precapture(j, &pre);
        if (j->src_snap) {
                /* The btrfs snapshot writes the subvolume's dirty data out first: do most
                 * of that now, with the sandbox running, not frozen. */
                uint64_t ts = dur_mono_us();
                _cleanup_close_ int fd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0)
                        (void)syncfs(fd);
                j->src_sync_us = dur_mono_us() - ts;
        }
        uint64_t t0 = dur_mono_us();
        j->freeze_t0 = t0;
        /* A checkpoint stops the sandbox itself, and must find it running (the driver
         * first closes its connection, which a frozen sandbox never sees). */
        if (j->sb && !j->memory) {
                int r = j->rt->freeze(j->sb);
                if (r < 0) {
                        j->r = r;
                        snprintf(j->err, sizeof j->err, "freezing the sandbox: %s", runtime_last_error());
                        (void)j->rt->thaw(j->sb);
                        return;
                }
        }
        /* Memory first: the checkpoint flushes what the file layer must hold to match it,
         * and (without leave_running) stops the sandbox, so the files read next are
         * exactly those of the image. A failed checkpoint costs the image, not the
         * snapshot: the files are still captured. */
        if (j->memory && j->sb)
                memory_capture(j);
        /* Nothing in the sandbox changes from here until the thaw: whatever changes later
         * has a ctime after this (the next change check compares against it). */
        j->frozen_at_ns = dur_now_ns();
        /* A large upper/: frozen only for its btrfs snapshot, captured from that. If the
         * snapshot fails, the capture below runs frozen as usual. */
        const char *from = j->dir;
        _cleanup_free_ char *snap_upper = NULL;
        struct stat live = { 0 };
        if (j->src_capture && j->sb && j->thaw && stat(j->dir, &live) == 0) {
                source_snap_take(j);
                if (j->src_taken && asprintf(&snap_upper, "%s/upper", j->src_snap) >= 0) {
                        int tr = j->rt->thaw(j->sb);
                        if (tr < 0)
                                log_warn("%s: thaw: %s", j->session, runtime_last_error());
                        j->thawed = true;
                        j->freeze_us = dur_mono_us() - t0;
                        from = snap_upper;
                } else {
                        snap_upper = NULL;
                }
        }
        struct store_capture_opts o = {
                .session = j->session,
                .label = j->label[0] ? j->label : NULL,
                .reason = j->sreason,
                .stats = &j->stats,
                .progress = capture_progress,
                .userdata = j,
                .base = capture_base(j),
                .copy_ns = from != j->dir ? j->frozen_at_ns : 0,
                .cache_dev = (uint64_t)live.st_dev,
                .cache_ino = (uint64_t)live.st_ino,
        };
        int r = -EAGAIN;
        uint64_t t1 = dur_mono_us();
        for (int i = 0; i < DUR_CAPTURE_TRIES && r == -EAGAIN; i++) {
                memset(&j->stats, 0, sizeof j->stats);
                r = store_capture(j->d->store, from, has_pre ? &pre : j->has_parent ? &j->parent : NULL, &o,
                                  &j->result);
        }
        uint64_t t2 = dur_mono_us();
        if (has_pre) {
                (void)store_snapshot_forget(j->d->store, &pre);
                /* what this snapshot added to the store: most of it came with the first pass */
                j->stats.objects_written += j->pre_stats.objects_written;
                j->stats.bytes_written += j->pre_stats.bytes_written;
                j->stats.files_read += j->pre_stats.files_read;
                j->stats.bytes_read += j->pre_stats.bytes_read;
        }
        if (j->sb && j->thaw && !j->thawed) {
                if (r == 0)
                        source_snap_take(j);
                int tr = j->rt->thaw(j->sb);
                if (tr < 0)
                        log_warn("%s: thaw: %s", j->session, runtime_last_error());
                j->thawed = true;
                j->freeze_us = dur_mono_us() - t0;
        }
        j->capture_us = t2 - t1;
        if (j->sb && !j->thaw)
                j->freeze_us = dur_mono_us() - t0;
        if (r < 0) {
                source_snap_adopt(j, false, NULL);
                j->r = r;
                job_set_err(j, "capture", r);
                return;
        }
        struct store_snapshot_info info;
        bool rooted = store_snapshot_get(j->d->store, &j->result, &info) == 0;
        if (rooted)
                j->root = info.root;
        source_snap_adopt(j, rooted, &j->stats);
        /* A rolling snapshot that holds exactly its parent's files is not worth a record. */
        if (j->check_dirty && j->has_parent) {
                struct store_snapshot_info pi;
                if (store_snapshot_get(j->d->store, &j->parent, &pi) == 0 && store_hash_eq(&pi.root, &info.root)) {
                        (void)store_snapshot_forget(j->d->store, &j->result);
                        j->dirty = false;
                }
        }
}

/* Makes j->dir, an absent or empty writable layer, show snapshot j->parent over a
 * snapshot layer (layers.c): O(1) when the layer of its tree exists, O(difference) over
 * the session's previous layer (j->layer, then the one chosen). */
static int fill_upper(struct job *j) {
        struct layer_ref cand = j->layer;
        uint64_t t0 = dur_mono_us();
        int r = layers_start(j->d->data_dir, j->d->store, &j->parent, &cand, j->dir, &j->stats, &j->layer,
                             &j->layer_how);
        j->capture_us = dur_mono_us() - t0;
        if (r < 0) {
                j->r = r;
                job_set_err(j, "materialize", r);
        }
        return r;
}

/* The new sandbox's writable layer (fill_upper). With j->memory, also copies the head's
 * memory image (drivers with memory snapshots) out to j->mem_dir; without j->dir, only
 * that (a resume on its parked layer, a restore whose layer is filled already). */
static void work_layer(struct job *j) {
        uint64_t t0 = dur_mono_us();
        if (j->dir && fill_upper(j) < 0)
                return;
        if (j->memory) {
                /* The image is only what the driver reads back: owners do not matter. */
                struct store_materialize_opts o = { .stats = &j->mem_stats, .no_stat_cache = true };
                (void)rt_rm_rf(j->mem_dir);
                int r = store_materialize(j->d->store, &j->memory_snap, j->mem_dir, &o);
                if (r < 0) {
                        const char *detail = store_error_detail();
                        snprintf(j->mem_err, sizeof j->mem_err, "reading the memory image: %s%s%.100s", strerror(-r),
                                 *detail ? ": " : "", detail);
                        (void)rt_rm_rf(j->mem_dir);
                } else {
                        j->has_memory = true;
                }
                j->checkpoint_us = dur_mono_us() - t0 - j->capture_us;
        }
}

/* Store forks of j->parent; with j->dir (a restore of a running session), also the new
 * sandbox's writable layer from it: if the snapshot cannot be read, nothing is left. */
static void work_fork(struct job *j) {
        for (unsigned i = 0; i < j->n; i++) {
                int r = store_fork(j->d->store, &j->parent, j->sessions[i], j->label[0] ? j->label : NULL, &j->out[i]);
                if (r < 0) {
                        j->r = r;
                        job_set_err(j, "fork", r);
                        return;
                }
        }
        if (j->dir && fill_upper(j) < 0) {
                (void)store_snapshot_forget(j->d->store, &j->out[0]);
                return;
        }
        struct store_snapshot_info info;
        if (store_snapshot_get(j->d->store, &j->parent, &info) == 0) {
                j->root = info.root;
                j->stats.bytes_logical = info.bytes_logical;
        }
}

static void work_gc(struct job *j) {
        struct store_hash *live = calloc(j->n_live ? j->n_live : 1, sizeof *live);
        if (!live) {
                j->r = -ENOMEM;
                return;
        }
        size_t n = 0;
        for (size_t i = 0; i < j->n_live; i++)
                if (store_hash_from_hex(j->live[i].hex, &live[n]) == 0)
                        n++;
        /* the snapshot layers' records: a capture over a layer reads its trees */
        struct store_hash *lv = NULL;
        size_t n_lv = 0;
        int r = layers_live(j->d->data_dir, &lv, &n_lv);
        if (r == 0 && n_lv) {
                struct store_hash *all = realloc(live, (n + n_lv) * sizeof *all);
                if (!all)
                        r = -ENOMEM;
                else {
                        live = all;
                        memcpy(live + n, lv, n_lv * sizeof *lv);
                        n += n_lv;
                }
        }
        free(lv);
        if (r < 0) {
                free(live);
                j->r = r;
                job_set_err(j, "gc: listing the snapshot layers", r);
                return;
        }
        struct store_gc_opts o = { .keep_since_ns = j->since_ns };
        r = store_gc(j->d->store, live, n, &o, &j->gc);
        free(live);
        if (r < 0) {
                j->r = r;
                job_set_err(j, "gc", r);
        }
}

/* The runtime's create, on a starter thread. A failed restore of processes boots from
 * the files of the same snapshot instead (they are in the upper dir already). */
static void work_create(struct job *j) {
        j->r = j->rt->create(&j->spec, &j->sb);
        if (j->r < 0 && j->spec.restore_dir) {
                snprintf(j->mem_err, sizeof j->mem_err, "restoring the processes failed: %.150s",
                         runtime_last_error());
                j->restore_failed = true;
                j->spec.restore_dir = NULL;
                j->r = j->rt->create(&j->spec, &j->sb);
        }
        if (j->r < 0) {
                j->sb = NULL;
                const char *e = runtime_last_error();
                snprintf(j->err, sizeof j->err, "%s", *e ? e : strerror(-j->r));
        }
        if (j->mem_dir) {
                int rr = rt_rm_rf(j->mem_dir);
                if (rr < 0 && rr != -ENOENT)
                        log_warn("%s: removing %s: %s", j->session, j->mem_dir, strerror(-rr));
        }
}

static void job_work(struct wjob *wj) {
        struct job *j = (struct job *)wj;
        switch (j->kind) {
        case JOB_CREATE: work_create(j); break;
        case JOB_CAPTURE: dur_work_capture(j); break;
        case JOB_LAYER: work_layer(j); break;
        case JOB_FORK: work_fork(j); break;
        case JOB_GC: work_gc(j); break;
        case JOB_RM: work_rm(j); break;
        case JOB_DESTROY: dur_work_destroy(j); break;
        }
}
