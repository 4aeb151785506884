/* Snapshots of a running session: the capture (frozen for as short as the runtime and
 * the filesystem allow), the commit to meta, retention of rolling snapshots, and the
 * snapshot layers and source layers sessions lie on (docs/sessions.md). */
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
#include "daemon/replicate.h"
#include "daemon/metrics.h"

/* Which snapshot layer sandbox sbx's writable layer lies on. -EBADMSG: unknown, so the
 * sandbox can't be captured (nor re-attached). */
int dur_sandbox_layer_load(struct session *s, const char *sbx) {
        _cleanup_free_ char *dir = disk_sandbox_dir_find(s->d, sbx), *ref = NULL;
        s->layer = (struct layer_ref){ 0 };
        if (!dir)
                return 0; /* gone: nothing to capture, nothing to start from */
        if (asprintf(&ref, "%s/layer", dir) < 0)
                return -ENOMEM;
        int r = layers_ref_read(ref, &s->layer);
        return r == -ENOENT ? 0 : r;
}

static void layer_drop(void *userdata, const char *dir) { dur_trash_dir(userdata, dir); }

static void source_snap_drop(void *userdata, const char *dir) {
        char *p = strdup(dir);
        if (p)
                dur_rm_submit(userdata, p, true);
}

/* L/layers: where the btrfs snapshots of source layers are; NULL without the volume. */
static char *source_dir(const struct daemon *d) {
        char *p = NULL;
        if (!d->layer_dir || !strcmp(d->layer_dir, d->data_dir))
                return NULL;
        return asprintf(&p, "%s/layers", d->layer_dir) < 0 ? NULL : p;
}

static int keep_add(struct store_hash **keep, size_t *n, size_t *cap, const struct store_hash *h) {
        if (*n == *cap) {
                struct store_hash *nk = realloc(*keep, 2 * *cap * sizeof *nk);
                if (!nk)
                        return -ENOMEM;
                *keep = nk;
                *cap *= 2;
        }
        (*keep)[(*n)++] = *h;
        return 0;
}

struct source_ent {
        const struct layer_source *l;
        int64_t t; /* its snapshot's time; -1: the snapshot is gone */
};

/* By session, then newest first. */
static int source_cmp(const void *a, const void *b) {
        const struct source_ent *x = a, *y = b;
        int c = strcmp(x->l->session, y->l->session);
        if (c)
                return c;
        if (x->t != y->t)
                return x->t > y->t ? -1 : 1;
        return strcmp(y->l->snap, x->l->snap);
}

/* The roots of the source layers to keep: the snapshot that owns one is still in meta,
 * and is among its session's newest DUR_SOURCE_LAYERS_MAX that own one. */
static int sources_kept(struct daemon *d, struct store_hash **keep, size_t *n, size_t *cap) {
        struct layer_source *v = NULL;
        size_t nv = 0;
        int r = layers_sources(d->data_dir, &v, &nv);
        if (r < 0)
                return r;
        _cleanup_free_ struct source_ent *e = calloc(nv ? nv : 1, sizeof *e);
        if (!e) {
                free(v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < nv; i++) {
                struct meta_snapshot m;
                e[i].l = &v[i];
                e[i].t = meta_snapshot_get(d->meta, v[i].snap, &m) == 0 && !strcmp(m.session_id, v[i].session) ?
                                 m.time_ms :
                                 -1;
        }
        qsort(e, nv, sizeof *e, source_cmp);
        size_t rank = 0;
        for (size_t i = 0; i < nv && r == 0; i++) {
                rank = i > 0 && !strcmp(e[i].l->session, e[i - 1].l->session) ? rank + 1 : 0;
                if (e[i].t >= 0 && rank < DUR_SOURCE_LAYERS_MAX)
                        r = keep_add(keep, n, cap, &e[i].l->root);
        }
        free(v);
        return r;
}

/* Snapshot layers no sandbox, recovery or parked layer lies on any more go (a new start
 * makes them again), but for the source layers still kept; then the btrfs snapshots no
 * layer names. Not while a layer is being chosen, made or adopted. */
void dur_layers_gc(struct daemon *d, bool at_start) {
        size_t n = 0, cap = 16;
        _cleanup_free_ struct store_hash *keep = malloc(cap * sizeof *keep);
        if (!keep)
                return;
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->job && (s->job->kind == JOB_LAYER || s->job->src_keep))
                        return;
                struct layer_ref parked = { 0 };
                _cleanup_free_ char *lref = dur_parked_path(d, s->id, "/layer");
                if (lref)
                        (void)layers_ref_read(lref, &parked);
                const struct layer_ref *refs[] = { &s->layer, &parked };
                for (size_t i = 0; i < ELEMENTSOF(refs); i++)
                        if (refs[i]->set && keep_add(&keep, &n, &cap, &refs[i]->root) < 0)
                                return;
        }
        int r = sources_kept(d, &keep, &n, &cap);
        if (r < 0) {
                log_warn("layers: listing the source layers: %s (none removed)", strerror(-r));
                return;
        }
        layers_sweep(d->data_dir, keep, n, layer_drop, d);
        _cleanup_free_ char *vol = source_dir(d);
        if (vol)
                layers_vol_sweep(d->data_dir, vol, at_start, source_snap_drop, d);
}

/* ---------------- snapshots ---------------- */

/* Where a btrfs snapshot of s's sandbox dir goes, if it can have one (docs/sessions.md
 * "Source layers" and "Freezing for a btrfs snapshot only"): its sandbox dir is a
 * subvolume of the quota volume, its upper/ is not the driver's merged view, and, for
 * one to keep as a source layer, the volume has room. */
static char *sandbox_snap_path(struct session *s, bool keep) {
        struct daemon *d = s->d;
        if (s->rt->merged_upper || !s->dir || rt_volume_is_subvol(s->dir) != 1)
                return NULL;
        _cleanup_free_ char *dir = source_dir(d);
        struct statvfs sv;
        if (!dir)
                return NULL;
        if (keep && (statvfs(d->layer_dir, &sv) < 0 || sv.f_blocks == 0 ||
                     sv.f_bavail * 100 / sv.f_blocks < DUR_SOURCE_MIN_FREE_PCT)) {
                log_info("%s: the quota volume is short of space: no source layer", s->id);
                return NULL;
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return NULL;
        /* one only read by the capture is named apart (".cap."): the sweep leaves those
         * to the job that made them, but at start */
        char *p = NULL;
        return asprintf(&p, "%s/%s%s.%" PRIu64, dir, keep ? "" : ".cap.", s->sbx_id, dur_mono_us()) < 0 ? NULL : p;
}

/* Starts a capture of s's upper dir (frozen meanwhile); cont gets the job. */
int dur_capture_begin(struct action *a, enum meta_snapshot_reason reason, bool thaw, bool check_dirty,
                         void (*cont)(struct job *)) {
        struct session *s = a->s;
        struct job *j = dur_job_new(NULL, s, a, JOB_CAPTURE, cont);
        if (!j)
                return -ENOMEM;
        if (asprintf(&j->dir, "%s/upper", s->dir) < 0) {
                j->dir = NULL;
                dur_job_free(j);
                return -ENOMEM;
        }
        j->rt = s->rt;
        j->sb = s->lost ? NULL : s->sb;
        j->thaw = thaw;
        j->check_dirty = check_dirty;
        j->since_ns = s->clean_since_ns;
        j->has_parent = s->head[0] != '\0';
        j->parent = s->head_hash;
        j->sreason = dur_store_reason_of(reason);
        snprintf(j->label, sizeof j->label, "%s", a->label);
        /* Memory goes with pause, with a snapshot that asks for it, and with every
         * snapshot of a driver whose checkpoint lets the sandbox go on (live_checkpoint:
         * docs/runtime-microvm.md). Otherwise (docs/runtime-gvisor.md: a checkpoint that
         * lets the sandbox go on is not reliable in the runsc we have) the sandbox stops
         * and snapshot_done restarts it from the image; it is checkpointed in a worker:
         * stop listening to it here first, its socket and pid go away. */
        bool live = thaw && s->rt->live_checkpoint;
        if ((!thaw || a->with_memory || live) && j->sb && s->rt->memory_snapshots && s->rt->checkpoint) {
                if (!live)
                        j->thaw = false;
                if (asprintf(&j->mem_dir, "%s/checkpoint", s->dir) < 0) {
                        j->mem_dir = NULL;
                        dur_job_free(j);
                        return -ENOMEM;
                }
                j->memory = true;
                /* the head's image as parent: an in-place image's changed chunks are then
                 * stored as deltas to it (docs/store.md) */
                struct meta_snapshot hm;
                j->has_mem_parent = s->rt->image_in_place && s->head[0] &&
                                    meta_snapshot_get(s->d->meta, s->head, &hm) == 0 && hm.memory_hash[0] &&
                                    store_hash_from_hex(hm.memory_hash, &j->mem_parent) == 0;
                if (!live)
                        ses_quiesce(s, thaw ? "the session is taking a memory snapshot" : "the session is being paused");
        }
        if (j->thaw && !j->memory && j->sb) {
                j->src_keep = (reason == META_REASON_MANUAL || reason == META_REASON_FORK) && !s->layer.set;
                j->src_capture = s->last_entries > DUR_SNAP_CAPTURE_ENTRIES;
                if (j->src_keep || j->src_capture)
                        j->src_snap = sandbox_snap_path(s, j->src_keep);
                if (!j->src_snap && j->src_keep && j->src_capture) /* no room to keep one */
                        j->src_snap = sandbox_snap_path(s, j->src_keep = false);
                if (j->src_keep && meta_new_id("snap", j->snap_id) < 0)
                        j->src_keep = false;
                if (!j->src_snap)
                        j->src_keep = j->src_capture = false;
        }
        return dur_job_submit(j);
}

static double job_freeze_ms(const struct job *j) { return j->sb ? (double)j->freeze_us / 1000.0 : -1; }

/* Records a captured snapshot in meta: the row, the new head and an event, in one
 * transaction together with whatever `extra` adds (pause: the state). *ret gets the row. */
int dur_snapshot_commit(struct session *s, struct job *j, enum meta_snapshot_reason reason, const char *label,
                           int (*extra)(struct session *s, const char *snap_id), struct meta_snapshot *ret) {
        struct daemon *d = s->d;
        struct meta_snapshot m = { .reason = reason, .bytes_added = j->stats.bytes_written,
                                   .logical_size = j->stats.bytes_logical };
        /* the id a source layer names, if one was made */
        int r = j->snap_id[0] ? (snprintf(m.id, sizeof m.id, "%s", j->snap_id), 0) : meta_new_id("snap", m.id);
        if (r < 0)
                return r;
        snprintf(m.session_id, sizeof m.session_id, "%s", s->id);
        snprintf(m.parent_id, sizeof m.parent_id, "%s", s->head);
        store_hash_to_hex(&j->result, m.store_hash);
        store_hash_to_hex(&j->root, m.root_hash);
        if (j->has_memory) {
                store_hash_to_hex(&j->memory_snap, m.memory_hash);
                m.bytes_added += j->mem_stats.bytes_written;
        }
        snprintf(m.label, sizeof m.label, "%s", label ? label : "");
        struct buf ev = BUF_INIT(0);
        if ((r = meta_begin(d->meta)) < 0)
                goto out;
        if ((r = meta_snapshot_add(d->meta, &m)) < 0 || (r = meta_session_set_head(d->meta, s->id, m.id)) < 0 ||
            (r = dl_snapshot_event_json(&ev, m.id, meta_snapshot_reason_name(reason), m.bytes_added, label,
                                        job_freeze_ms(j))) < 0 ||
            (r = meta_event_append(d->meta, s->id, "snapshot", ev.data, ev.len, NULL)) < 0 ||
            (extra && (r = extra(s, m.id)) < 0)) {
                log_warn("%s: recording snapshot: %s", s->id, dur_merr(d));
                dur_rollback(d);
                goto out;
        }
        if ((r = meta_commit(d->meta)) < 0) {
                log_warn("%s: committing snapshot: %s", s->id, dur_merr(d));
                dur_rollback(d);
                goto out;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->result;
        s->snap_bytes = m.bytes_added > UINT64_MAX - s->snap_bytes ? UINT64_MAX : s->snap_bytes + m.bytes_added;
        metrics_snapshot_bytes(s->d->metrics, m.bytes_added);
        s->last_snapshot_ms = meta_now_ms();
        s->last_entries = j->stats.entries;
        if (j->frozen_at_ns)
                s->clean_since_ns = j->frozen_at_ns;
        (void)meta_snapshot_get(d->meta, m.id, &m); /* the stored time */
        repl_kick(d->repl);
        if (ret)
                *ret = m;
out:
        buf_free(&ev);
        return r;
}

/* Whether a snapshot in meta still names this memory record. */
static bool memory_named(struct daemon *d, const char *hex) {
        struct meta_hash *v = NULL;
        size_t n = 0;
        if (meta_snapshot_live_hashes(d->meta, &v, &n) < 0)
                return true; /* can't tell: keep it */
        bool named = false;
        for (size_t i = 0; i < n && !named; i++)
                named = strcmp(v[i].hex, hex) == 0;
        free(v);
        return named;
}

/* Removes snapshot m from meta, then its records from the store's list; the next GC frees
 * what only it held. */
static int snapshot_drop(struct session *s, const struct meta_snapshot *m) {
        struct daemon *d = s->d;
        int r = meta_snapshot_delete(d->meta, m->id);
        if (r < 0)
                return r;
        struct store_hash h;
        if (store_hash_from_hex(m->store_hash, &h) == 0)
                (void)store_snapshot_forget(d->store, &h);
        /* Its memory record may be shared (forks, restores): GC keeps it while any
         * snapshot in meta names it. */
        if (m->memory_hash[0] && store_hash_from_hex(m->memory_hash, &h) == 0 && !memory_named(d, m->memory_hash))
                (void)store_snapshot_forget(d->store, &h);
        return 0;
}

/* Retention: rolling snapshots beyond the session's newest `retention` go. */
static void retention_apply(struct session *s) {
        struct daemon *d = s->d;
        struct meta_id *ids = NULL;
        size_t n = 0;
        if (meta_snapshot_expired(d->meta, s->id, &ids, &n) < 0) {
                log_warn("%s: retention: %s", s->id, dur_merr(d));
                return;
        }
        for (size_t i = 0; i < n; i++) {
                struct meta_snapshot m;
                if (meta_snapshot_get(d->meta, ids[i].s, &m) < 0)
                        continue;
                if (snapshot_drop(s, &m) < 0)
                        log_warn("%s: retention: deleting %s: %s", s->id, ids[i].s, dur_merr(d));
        }
        if (n) {
                log_debug("%s: retention dropped %zu rolling snapshot(s)", s->id, n);
                (void)dur_snap_usage_load(s);
        }
        free(ids);
}

/* ---------------- snapshot storage limits ---------------- */

/* What a session's snapshots hold is what each added to the store when it was made
 * (bytes_added: its new chunks and records, its memory image's too), summed over those
 * still in meta (docs/security.md "Snapshot storage"). */
int dur_snap_usage_load(struct session *s) {
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        int r = meta_snapshot_list(s->d->meta, s->id, &v, &n);
        if (r < 0)
                return r;
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
                sum = v[i].bytes_added > UINT64_MAX - sum ? UINT64_MAX : sum + v[i].bytes_added;
        free(v);
        s->snap_bytes = sum;
        return 0;
}

static bool fork_source(struct daemon *d, const char *snap) {
        for (struct session *o = d->sessions; o; o = o->next)
                if (!strcmp(o->source_snapshot, snap))
                        return true;
        return false;
}

/* The rolling snapshots of s that may go to make room, oldest first: never the head, a
 * pinned one or one a session was forked from. */
static int droppable(struct session *s, struct meta_snapshot **ret, size_t *ret_n) {
        struct meta_snapshot *v = NULL;
        size_t n = 0, k = 0;
        int r = meta_snapshot_list(s->d->meta, s->id, &v, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++)
                if (v[i].reason == META_REASON_ROLLING && !v[i].pinned && strcmp(v[i].id, s->head) &&
                    !fork_source(s->d, v[i].id))
                        v[k++] = v[i];
        *ret = v;
        *ret_n = k;
        return 0;
}

/* Whether `add` more bytes fit s's limit and its tenant's once `freed` of s's are gone. */
static bool limits_fit(struct session *s, uint64_t add, uint64_t freed) {
        uint64_t used = s->snap_bytes, tenant = ses_tenant_snapshot_bytes(s->d, s->tenant);
        freed = freed < used ? freed : used;
        return dl_snapshot_fits(used - freed, add, ses_snapshot_limit(s)) &&
               dl_snapshot_fits(tenant - freed, add, s->d->tenant_snap_max);
}

/* Makes room for `add` more bytes by dropping s's oldest droppable rolling snapshots, as
 * few as it takes; with all_or_nothing none goes unless that makes it fit. Returns whether
 * it fits. A failure to list keeps everything and says it fits only if it already did. */
static bool make_room(struct session *s, uint64_t add, bool all_or_nothing) {
        if (limits_fit(s, add, 0))
                return true;
        struct meta_snapshot *v = NULL;
        size_t n = 0, k = 0;
        if (droppable(s, &v, &n) < 0) {
                log_warn("%s: snapshot limit: listing snapshots: %s", s->id, dur_merr(s->d));
                return false;
        }
        uint64_t freed = 0;
        while (k < n && !limits_fit(s, add, freed))
                freed += v[k++].bytes_added;
        bool fits = limits_fit(s, add, freed);
        if (all_or_nothing && !fits)
                k = 0;
        size_t dropped = 0;
        for (size_t i = 0; i < k; i++) {
                if (snapshot_drop(s, &v[i]) < 0)
                        log_warn("%s: snapshot limit: deleting %s: %s", s->id, v[i].id, dur_merr(s->d));
                else
                        dropped++;
        }
        free(v);
        if (dropped) {
                log_info("%s: snapshot limit: dropped %zu older rolling snapshot(s) to make room", s->id, dropped);
                (void)dur_snap_usage_load(s);
                fits = limits_fit(s, add, 0);
        }
        return fits;
}

/* Whether any snapshot at all could still fit once the droppable ones went: what a manual
 * snapshot asks before it captures anything. */
static bool room_possible(struct session *s) {
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        if (limits_fit(s, 1, 0))
                return true;
        if (droppable(s, &v, &n) < 0)
                return true; /* can't tell: the capture's own check decides */
        uint64_t freed = 0;
        for (size_t i = 0; i < n; i++)
                freed += v[i].bytes_added;
        free(v);
        return limits_fit(s, 1, freed);
}

/* Why s has no room for `add` more bytes (0: for any), for the client. */
static void no_room_msg(struct session *s, uint64_t add, char *out, size_t size) {
        uint64_t lim = ses_snapshot_limit(s), tenant = ses_tenant_snapshot_bytes(s->d, s->tenant);
        char more[96] = "no snapshot fits";
        if (add)
                snprintf(more, sizeof more, "this snapshot would add %" PRIu64 " more", add);
        if (!dl_snapshot_fits(s->snap_bytes, add ? add : 1, lim))
                snprintf(out, size,
                         "snapshot storage of session %s is full: its snapshots hold %" PRIu64 " bytes of its limit of %" PRIu64
                         " (spaced --snapshot-bytes-factor %u times its disk limit) and %s, even without its older "
                         "rolling snapshots",
                         s->id, s->snap_bytes, lim, s->d->snap_factor, more);
        else
                snprintf(out, size,
                         "snapshot storage of tenant %s is full: its sessions' snapshots hold %" PRIu64
                         " bytes of its limit of %" PRIu64 " (spaced --tenant-snapshot-bytes) and %s",
                         s->tenant, tenant, s->d->tenant_snap_max, more);
}

/* After a snapshot that is never refused (rolling, pause, fork, a checkpoint that stopped
 * the sandbox): older rolling ones make room; if that is not enough the session stays
 * over its limit, with one snapshot_limit event each time it goes over (docs/security.md
 * "Snapshot storage"). */
void dur_snap_limit_apply(struct session *s, const char *snap) {
        if (make_room(s, 0, false)) {
                s->snap_over = false;
                return;
        }
        if (s->snap_over)
                return;
        s->snap_over = true;
        uint64_t lim = ses_snapshot_limit(s), tenant = ses_tenant_snapshot_bytes(s->d, s->tenant);
        log_warn("%s: over its snapshot limit after %s: %" PRIu64 " bytes of %" PRIu64 " (tenant %s: %" PRIu64 " of %" PRIu64
                 "); manual snapshots are refused until there is room",
                 s->id, snap, s->snap_bytes, lim, s->tenant, tenant, s->d->tenant_snap_max);
        struct buf ev = BUF_INIT(0);
        if (dl_snapshot_limit_json(&ev, snap, s->snap_bytes, lim, tenant, s->d->tenant_snap_max) < 0 ||
            meta_event_append(s->d->meta, s->id, "snapshot_limit", ev.data, ev.len, NULL) < 0)
                log_warn("%s: recording the snapshot_limit event: %s", s->id, dur_merr(s->d));
        buf_free(&ev);
}

/* A manual capture that did not fit: its records leave the store's list (the next GC
 * frees them) and a source layer it made goes. */
static void capture_refuse(struct session *s, struct job *j) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&j->result, hex);
        if (!memory_named(s->d, hex))
                (void)store_snapshot_forget(s->d->store, &j->result);
        if (j->has_memory) {
                store_hash_to_hex(&j->memory_snap, hex);
                if (!memory_named(s->d, hex))
                        (void)store_snapshot_forget(s->d->store, &j->memory_snap);
        }
        if (j->src_layer.set)
                dur_layers_gc(s->d, false);
}

/* After the commit of a snapshot that made a source layer: say so, and apply the cap. */
void dur_source_layer_done(struct session *s, const struct job *j, const char *snap) {
        if (!j->src_layer.set)
                return;
        log_info("%s: source layer of %s from a btrfs snapshot: %" PRIu64 " us of the freeze, %" PRIu64
                 " us flushing before it",
                 s->id, snap, j->src_us, j->src_sync_us);
        dur_layers_gc(s->d, false);
}

void dur_snapshot_failed_event(struct session *s, enum meta_snapshot_reason reason, const char *err) {
        struct buf b = BUF_INIT(0);
        if (dl_snapshot_failed_json(&b, meta_snapshot_reason_name(reason), err) == 0)
                ses_event(s, "snapshot_failed", &b);
        buf_free(&b);
}

static void snapshot_done(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        /* A checkpoint without live_checkpoint stopped the sandbox */
        bool stopped = j->memory && !j->thaw;
        if (j->r < 0) {
                dur_snapshot_failed_event(s, a->reason, j->err);
                if (stopped) {
                        dur_pause_failed(a, j, "snapshot failed", j->err);
                        return;
                }
                dur_act_fail(a, -EIO, "snapshot failed: %s", j->err);
                return;
        }
        if (!j->dirty) {
                log_debug("%s: rolling snapshot skipped: nothing changed", s->id);
                dur_act_done(a);
                return;
        }
        uint64_t add = j->stats.bytes_written + (j->has_memory ? j->mem_stats.bytes_written : 0);
        if (a->reason == META_REASON_MANUAL && !stopped && !make_room(s, add, true)) {
                char msg[512];
                no_room_msg(s, add, msg, sizeof msg);
                capture_refuse(s, j);
                log_info("%s: manual snapshot refused: %s", s->id, msg);
                dur_act_fail(a, -EDQUOT, "%s", msg);
                return;
        }
        struct meta_snapshot m;
        int r = dur_snapshot_commit(s, j, a->reason, a->label, NULL, &m);
        if (r < 0) {
                if (stopped) {
                        dur_pause_failed(a, j, "recording the snapshot failed", dur_merr(s->d));
                        return;
                }
                dur_act_fail(a, -EIO, "recording the snapshot failed: %s", dur_merr(s->d));
                return;
        }
        if (j->memory)
                dur_memory_event(s, "checkpoint", m.id, j, j->has_memory ? NULL : j->mem_err);
        dur_source_layer_done(s, j, m.id);
        if (stopped) /* a new one continues from the image just stored (a restart on purpose) */
                dur_recover_queue(s, s->sbx_id, "restarted from its memory snapshot", true);
        log_info("%s: snapshot %s (%s): %" PRIu64 " bytes new, %" PRIu64 " files read, frozen %" PRIu64
                 " us%s, capture %" PRIu64 " us",
                 s->id, m.id, meta_snapshot_reason_name(a->reason), j->stats.bytes_written, j->stats.files_read,
                 j->freeze_us, j->src_capture && j->src_taken ? " (for a btrfs snapshot only)" : "", j->capture_us);
        if (a->reason == META_REASON_ROLLING)
                retention_apply(s);
        if (a->reason != META_REASON_MANUAL || stopped)
                dur_snap_limit_apply(s, m.id);
        if (a->w) {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                dur_snapshot_write_json(&w, &m, job_freeze_ms(j));
                dur_answer(&a->w, &b);
                buf_free(&b);
        }
        dur_act_done(a);
}

void dur_run_snapshot(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int err = dl_action_check(DL_SNAPSHOT, s->state, &why);
        if (err == 0 && !ses_usable(s)) {
                err = -EAGAIN;
                why = "the session has no running sandbox right now";
        }
        if (err) {
                if (a->internal) {
                        dur_act_done(a);
                        return;
                }
                dur_act_fail(a, err, "%s", why);
                return;
        }
        if (a->reason == META_REASON_MANUAL && !room_possible(s)) {
                char msg[512];
                no_room_msg(s, 0, msg, sizeof msg);
                dur_act_fail(a, -EDQUOT, "%s", msg);
                return;
        }
        bool rolling = a->reason == META_REASON_ROLLING;
        int r = dur_capture_begin(a, a->reason, true, rolling, snapshot_done);
        if (r < 0)
                dur_act_fail(a, -EIO, "starting the capture: %s", strerror(-r));
}
