/* Durable sessions (docs/sessions.md): every lifecycle change of a session — create,
 * snapshot, pause, resume, restore, fork, delete, crash recovery, re-attach after a
 * daemon restart — as an action. A session runs one action at a time; the others wait
 * in order. Slow steps (capture, materialize, store forks, GC) run on the worker
 * threads; the loop thread alone writes the metadata store, and a change is committed
 * there before any client hears of it. */
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
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/durlogic.h"
#include "daemon/pool.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/worker.h"
#include "runtime/fsutil.h"
#include "runtime/quota.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define DUR_HOST_ID "local"
#define DUR_CAPTURE_TRIES 3 /* store_capture's -EAGAIN (it raced the GC) is retried */
#define DUR_RESUME_RETRIES 1 /* a resume whose sandbox ended before HELLO starts once more */
/* Source layers (docs/sessions.md "Source layers"): kept per session, newest first ... */
#define DUR_SOURCE_LAYERS_MAX 16
/* ... and none made while the quota volume has less than this share free (percent) */
#define DUR_SOURCE_MIN_FREE_PCT 25
/* A session whose last capture walked more entries than this is frozen only for a btrfs
 * snapshot of its sandbox, and captured from it with the sandbox running (docs/sessions.md
 * "Freezing for a btrfs snapshot only"): a stat walk of this many entries takes about as
 * long as the snapshot (~2 us per entry against 2-17 ms). */
#define DUR_SNAP_CAPTURE_ENTRIES 4000

enum act_kind { ACT_START, ACT_SNAPSHOT, ACT_PAUSE, ACT_RESUME, ACT_RESTORE, ACT_FORK, ACT_DELETE, ACT_RECOVER };
enum start_why { START_CREATE, START_RESUME, START_RESTORE, START_RECOVER, START_FORK, START_ADOPT };

struct fork_group {
        struct conn_waiter w;
        unsigned n, n_done, n_failed;
        char ids[SES_MAX_FORKS][META_ID_SIZE];
        char tokens[SES_MAX_FORKS][DL_TOKEN_LEN + 1];
        bool ok[SES_MAX_FORKS];
        char err[768];                        /* why the first child that failed did */
        char src_session[META_ID_SIZE];       /* the snapshot forked, and its session */
        char src_snap[META_ID_SIZE];
};

struct action {
        struct conn_waiter w;
        struct action *next;
        struct session *s;
        enum act_kind kind;
        enum start_why why;
        enum meta_snapshot_reason reason;     /* ACT_SNAPSHOT */
        char label[SES_LABEL_MAX + 1];
        char snap[META_ID_SIZE];              /* restore / fork / create-from source */
        unsigned count;                       /* fork */
        char token[DL_TOKEN_LEN + 1];         /* create: shown once */
        struct fork_group *group;             /* START_FORK */
        unsigned fork_index;
        bool waiting_hello;
        unsigned start_retries;               /* START_RESUME: fresh starts after a lost sandbox */
        bool internal;                        /* rolling, recovery: nobody waits */
        char lost_sbx[META_ID_SIZE];          /* recovery */
        char lost_reason[META_TEXT_MAX + 1];
        bool lost_on_purpose;                 /* the daemon stopped it (SIGTERM) */
        /* start of a driver with memory snapshots: the head's memory image, copied out */
        bool want_memory;
        bool with_memory;                     /* ACT_SNAPSHOT: checkpoint the processes too */
        struct store_hash memory;
        char memory_err[256];                 /* why it boots from files instead */
        bool damaged;                         /* start: the store found the snapshot damaged */
        /* restore of a running session: the new sandbox's directory, made and filled from
         * the snapshot before anything is committed; start_begin takes it */
        char *ready_dir;
        char ready_sbx[SES_ID_LEN + 1];
        struct layer_ref ready_layer;
};

enum job_kind { JOB_CAPTURE, JOB_LAYER, JOB_FORK, JOB_GC, JOB_RM, JOB_DESTROY, JOB_CREATE };

struct job {
        struct wjob wj;
        struct daemon *d;
        struct session *s;
        struct action *act;
        enum job_kind kind;
        void (*cont)(struct job *j);
        int64_t start_ns;                      /* CLOCK_REALTIME: GC keeps records since */
        /* capture */
        char *dir;
        const struct runtime_ops *rt;
        struct rt_sandbox *sb;                 /* frozen during the capture, if set */
        bool thaw;                             /* false: stays frozen (pause) */
        bool check_dirty;
        int64_t since_ns;
        bool has_parent;
        struct store_hash parent;              /* capture parent, materialize/fork source */
        struct layer_ref layer;                /* capture: the upper dir lies on it; start: the
                                                * candidate, then the one chosen */
        enum layer_how layer_how;
        /* capture of a sandbox dir that is a subvolume of the btrfs volume: a read-only
         * btrfs snapshot of it taken while frozen, which becomes the layer of the
         * snapshot's tree (a source layer: the session lies on no layer), and/or which the
         * capture reads after the thaw (a large upper/) */
        char *src_snap;                        /* where it goes (L/layers/<sbx>.<t>); NULL: none */
        bool src_keep;                         /* as a source layer */
        bool src_capture;                      /* capture from it, thawed */
        bool src_tried, src_taken;             /* one try per capture */
        char snap_id[META_ID_SIZE];            /* the snapshot's id, chosen first: the layer names it */
        struct layer_ref src_layer;            /* the layer published */
        uint64_t src_us, src_sync_us;          /* the snapshot (frozen), the flush before the freeze */
        bool subvol;                           /* rm: a btrfs snapshot (read-only: destroyed, not emptied) */
        char session[META_ID_SIZE];
        char label[SES_LABEL_MAX + 1];
        enum store_reason sreason;
        /* fork */
        unsigned n;
        char sessions[SES_MAX_FORKS][META_ID_SIZE];
        struct store_hash out[SES_MAX_FORKS];
        /* gc */
        struct meta_hash *live;
        size_t n_live;
        struct store_gc_result gc;
        /* create (on d->starter): the spec and the strings it points into */
        struct rt_spec spec;
        char *lower, *upper, *work, *run;
        bool restore_failed;                   /* booted from files after the restore failed */
        uint64_t create_t0_ms;
        /* results */
        int r;
        char err[512];
        bool dirty;
        struct store_hash result;
        struct store_hash root;
        struct store_op_stats stats;
        struct store_op_stats pre_stats;       /* capture: the pass before the freeze */
        int64_t frozen_at_ns;
        uint64_t freeze_t0;
        bool thawed;
        uint64_t freeze_us, capture_us;
        /* memory (drivers with memory_snapshots): capture checkpoints the sandbox into
         * mem_dir and stores that directory as a record of its own (memory_snap), whose
         * hash meta keeps as the snapshot's memory_hash; materialize copies it back */
        bool memory;                           /* capture: checkpoint; materialize: restore it */
        bool has_memory;                       /* the result holds one */
        char *mem_dir;
        struct store_hash memory_snap;
        bool has_mem_parent;                   /* capture: the head's memory image, the parent */
        struct store_hash mem_parent;          /* of memory_snap (changed chunks stored as deltas) */
        struct store_op_stats mem_stats;
        char mem_err[256];                     /* capture: why there is none */
        uint64_t checkpoint_us;
};

static void act_kick(struct session *s);
static void job_work(struct wjob *wj);
static void job_done_cb(struct wjob *wj);
static struct job *job_new(struct daemon *d, struct session *s, struct action *a, enum job_kind kind,
                           void (*cont)(struct job *));
static void job_free(struct job *j);
static void act_done(struct action *a);
static void start_begin(struct action *a);
static void recover_queue(struct session *s, const char *sbx, const char *why, bool on_purpose);
static void memory_event(struct session *s, const char *event, const char *snap, const struct job *j,
                         const char *err);
static void pause_failed(struct action *a, struct job *j, const char *what, const char *err);
static int reclaim_strays(struct daemon *d, const char *root);

/* ---------------- small helpers ---------------- */

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static uint64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

struct conn *waiter_take(struct conn_waiter *w) {
        struct conn *c = w->conn;
        w->conn = NULL;
        if (c && c->waiter == w)
                c->waiter = NULL;
        return c;
}

void waiter_set(struct conn_waiter *w, struct conn *c) {
        w->conn = c;
        if (c)
                c->waiter = w;
}

/* The message of the last failed meta call; kept across the rollback that follows it
 * (a rollback clears meta's own). */
static char rollback_err[256];

static void rollback(struct daemon *d) {
        const char *e = meta_last_error(d->meta);
        if (*e)
                snprintf(rollback_err, sizeof rollback_err, "%s", e);
        (void)meta_rollback(d->meta);
}

static const char *merr(struct daemon *d) {
        const char *e = meta_last_error(d->meta);
        return *e ? e : rollback_err;
}

static enum store_reason store_reason_of(enum meta_snapshot_reason r) {
        switch (r) {
        case META_REASON_ROLLING: return STORE_REASON_ROLLING;
        case META_REASON_PAUSE: return STORE_REASON_PAUSE;
        case META_REASON_FORK:
        case META_REASON_RESTORE: return STORE_REASON_FORK;
        default: return STORE_REASON_MANUAL;
        }
}

/* Around writes that no answer waits on (meta_set_relaxed): a sandbox being started, a
 * command's log entries. They become durable with the next full commit, and a machine
 * crash before it takes the sandbox or the command with them anyway. */
static void relaxed(struct daemon *d, bool on) {
        if (meta_set_relaxed(d->meta, on) < 0)
                log_warn("meta: synchronous mode: %s", merr(d));
}

void dur_event(struct session *s, const char *kind, const struct buf *payload) {
        relaxed(s->d, true);
        int r = meta_event_append(s->d->meta, s->id, kind, payload->data, payload->len, NULL);
        if (r < 0)
                log_warn("%s: event %s not recorded: %s", s->id, kind, merr(s->d));
        relaxed(s->d, false);
}

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
static void work_destroy(struct job *j) {
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
static void rm_submit(struct daemon *d, char *dir, bool subvol) {
        struct job *j = job_new(d, NULL, NULL, JOB_RM, rm_done);
        if (!j) {
                free(dir);
                return;
        }
        j->dir = dir;
        j->subvol = subvol;
        if (wk_submit(d->workers, &j->wj) < 0)
                job_free(j);
}

/* Removes a sandbox directory (its processes and mounts are gone already) off the loop:
 * renamed into the trash at once, deleted by a worker. A large writable layer takes a
 * while to delete, and a pause or restore should not wait for it. The trash is the one
 * of dir's filesystem (X/trash for X/sandboxes/sbx_… or X/parked/ses_…, X = DATA or the
 * quota volume DATA/vol): a rename cannot cross filesystems. */
static void trash_dir(struct daemon *d, const char *dir) {
        _cleanup_free_ char *trash = NULL, *dst = NULL;
        const char *base = strrchr(dir, '/');
        base = base ? base + 1 : dir;
        const char *up = base > dir + 1 ? memrchr(dir, '/', (size_t)(base - 1 - dir)) : NULL;
        /* The time makes the name unique: a session's parked layer can go twice while the
         * first is still being deleted. */
        if (!up || asprintf(&trash, "%.*s/trash", (int)(up - dir), dir) < 0 ||
            asprintf(&dst, "%s/%s.%" PRIu64, trash, base, mono_us()) < 0)
                goto now;
        if (mkdir(trash, 0700) < 0 && errno != EEXIST)
                goto now;
        if (rename(dir, dst) < 0)
                goto now;
        rm_submit(d, TAKE_PTR(dst), false); /* if it can't: left in trash, removed at the next start */
        return;
now: {
        int r = rt_rm_rf(dir);
        if (r < 0 && r != -ENOENT)
                log_warn("removing %s: %s", dir, strerror(-r));
}
}

/* Kills what is left of a sandbox nobody holds (a daemon crash, a failed adopt) and
 * removes its directory. */
static void reclaim_dir(struct daemon *d, const char *sbx) {
        _cleanup_free_ char *dir = disk_sandbox_dir_find(d, sbx), *run = NULL;
        if (!dir || asprintf(&run, "%s/run", dir) < 0)
                return;
        /* Which driver made it is not always known here (a stray directory): ask each;
         * reclaim is idempotent and cheap when the driver left nothing. */
        const struct runtime_ops *rt;
        for (size_t i = 0; (rt = runtime_nth(i)); i++)
                if (rt->reclaim && rt->reclaim(sbx, run) < 0)
                        log_warn("reclaiming %s (%s): %s", sbx, rt->name, runtime_last_error());
        int r = rt_rm_rf(dir);
        if (r < 0)
                log_warn("removing %s: %s", dir, strerror(-r));
}

/* Destroys s's sandbox (requests on it end with status/msg), removes its directory and
 * records why in meta (dead: it died unasked; destroyed: on purpose). */
static void drop_sandbox(struct session *s, int status, const char *msg, enum meta_sandbox_state st,
                         const char *reason) {
        ses_drop_sandbox(s, status, msg);
        if (s->sbx_id[0]) {
                if (s->dir)
                        trash_dir(s->d, s->dir);
                if (meta_sandbox_set_state(s->d->meta, s->sbx_id, st, reason) < 0)
                        log_warn("%s: sandbox %s state: %s", s->id, s->sbx_id, merr(s->d));
        }
        free(s->dir);
        s->dir = NULL;
        s->sbx_id[0] = '\0';
}

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

static char *parked_path(struct daemon *d, const char *ses, const char *suffix) {
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
static void parked_drop(struct session *s) {
        _cleanup_free_ char *layer = parked_path(s->d, s->id, ""), *rec = parked_path(s->d, s->id, ".rec");
        if (!layer || !rec)
                return;
        if (unlink(rec) < 0 && errno != ENOENT)
                log_warn("%s: removing %s: %s", s->id, rec, strerror(errno));
        struct stat st;
        if (lstat(layer, &st) == 0)
                trash_dir(s->d, layer);
}

/* Pause: keeps s's sandbox directory (its sandbox is destroyed, nothing runs or is
 * mounted there) as the parked layer of the head snapshot, which the capture just took
 * from it while the sandbox was frozen. True if s->dir is parked (gone from where it was).
 * Anything that goes wrong leaves no record: resume then materializes as before. */
static bool park_layer(struct session *s) {
        struct daemon *d = s->d;
        _cleanup_free_ char *dir = NULL, *layer = parked_path(d, s->id, ""), *rec = parked_path(d, s->id, ".rec"),
                            *tmp = parked_path(d, s->id, ".rec.tmp");
        char text[PARK_REC_MAX];
        _cleanup_close_ int fd = -1;
        int r = -ENOMEM;
        bool moved = false;
        if (!layer || !rec || !tmp || asprintf(&dir, "%s/parked", d->layer_dir ? d->layer_dir : d->data_dir) < 0)
                goto fail;
        parked_drop(s);
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
        parked_drop(s);
        return moved;
}

/* Resume: moves s's parked sandbox directory to `dir` (which does not exist yet) if its
 * record names s's head snapshot in this boot. True if it did; otherwise the parked
 * layer (if any) is gone and the caller materializes the head. The store's stat cache of
 * the head is keyed by the layer's device and inode, which a rename keeps, so the next
 * capture stays incremental. */
static bool unpark_layer(struct session *s, const char *dir) {
        _cleanup_free_ char *layer = parked_path(s->d, s->id, ""), *rec = parked_path(s->d, s->id, ".rec");
        char want[PARK_REC_MAX], have[PARK_REC_MAX];
        if (!layer || !rec)
                return false;
        _cleanup_close_ int fd = open(rec, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                if (errno != ENOENT)
                        log_warn("%s: reading %s: %s", s->id, rec, strerror(errno));
                parked_drop(s);
                return false;
        }
        ssize_t n = read(fd, have, sizeof have);
        int wn = park_record(s, want, sizeof want);
        struct stat st;
        if (n < 0 || wn < 0 || n != wn || memcmp(have, want, (size_t)n) != 0) {
                log_info("%s: the parked layer is not of head %s in this boot: restoring the snapshot", s->id, s->head);
                parked_drop(s);
                return false;
        }
        /* it shows the snapshot only over the snapshot layer it lay on, which must be there */
        _cleanup_free_ char *lref = NULL, *files = NULL;
        struct layer_ref l = { 0 };
        int lr = asprintf(&lref, "%s/layer", layer) < 0 ? -ENOMEM : layers_ref_read(lref, &l);
        if ((lr < 0 && lr != -ENOENT) ||
            (l.set && (layers_files_dir(s->d->data_dir, &l, &files) < 0 || access(files, F_OK) < 0))) {
                log_info("%s: the parked layer's snapshot layer is gone: restoring the snapshot", s->id);
                parked_drop(s);
                return false;
        }
        if (lstat(layer, &st) < 0 || !S_ISDIR(st.st_mode) || unlink(rec) < 0 || rename(layer, dir) < 0) {
                log_warn("%s: taking the parked layer: %s; restoring the snapshot", s->id, strerror(errno));
                parked_drop(s);
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
static void parked_sweep(struct daemon *d) {
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

/* Which snapshot layer sandbox sbx's writable layer lies on. -EBADMSG: unknown, so the
 * sandbox can't be captured (nor re-attached). */
static int sandbox_layer_load(struct session *s, const char *sbx) {
        _cleanup_free_ char *dir = disk_sandbox_dir_find(s->d, sbx), *ref = NULL;
        s->layer = (struct layer_ref){ 0 };
        if (!dir)
                return 0; /* gone: nothing to capture, nothing to start from */
        if (asprintf(&ref, "%s/layer", dir) < 0)
                return -ENOMEM;
        int r = layers_ref_read(ref, &s->layer);
        return r == -ENOENT ? 0 : r;
}

static void layer_drop(void *userdata, const char *dir) { trash_dir(userdata, dir); }

static void source_snap_drop(void *userdata, const char *dir) {
        char *p = strdup(dir);
        if (p)
                rm_submit(userdata, p, true);
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
static void layers_gc(struct daemon *d, bool at_start) {
        size_t n = 0, cap = 16;
        _cleanup_free_ struct store_hash *keep = malloc(cap * sizeof *keep);
        if (!keep)
                return;
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->job && (s->job->kind == JOB_LAYER || s->job->src_keep))
                        return;
                struct layer_ref parked = { 0 };
                _cleanup_free_ char *lref = parked_path(d, s->id, "/layer");
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

/* freeze_ms < 0: unknown (the timeline; meta keeps no freeze times). */
static void snapshot_write_json(struct json_writer *w, const struct meta_snapshot *m, double freeze_ms) {
        char ts[40];
        dl_rfc3339_ms(m->time_ms, ts, sizeof ts);
        json_w_obj_begin(w);
        json_w_kstr(w, "id", m->id);
        json_w_kstr(w, "session", m->session_id);
        json_w_key(w, "parent");
        if (m->parent_id[0])
                json_w_str(w, m->parent_id);
        else
                json_w_null(w);
        json_w_kstr(w, "created_at", ts);
        json_w_kstr(w, "reason", meta_snapshot_reason_name(m->reason));
        json_w_key(w, "label");
        if (m->label[0])
                json_w_str(w, m->label);
        else
                json_w_null(w);
        json_w_key(w, "bytes_added");
        json_w_uint(w, m->bytes_added);
        json_w_key(w, "logical_size");
        json_w_uint(w, m->logical_size);
        json_w_kstr(w, "root", m->root_hash);
        json_w_kstr(w, "store_snapshot", m->store_hash);
        json_w_kbool(w, "memory", m->memory_hash[0] != '\0');
        if (freeze_ms >= 0) {
                json_w_key(w, "freeze_ms");
                json_w_double(w, freeze_ms);
        }
        json_w_obj_end(w);
}

void dur_snapshot_json(struct json_writer *w, const struct meta_snapshot *m) { snapshot_write_json(w, m, -1); }

static void reply_session(struct conn *c, int status, struct session *s, const char *token) {
        if (!c)
                return;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        if (!token) {
                ses_write_json(&w, s);
        } else {
                /* The session object plus its token, shown this once. */
                struct buf o = BUF_INIT(0);
                struct json_writer ow = JSON_WRITER_INIT(&o);
                ses_write_json(&ow, s);
                if (o.len >= 2 && !ow.err) {
                        o.len--; /* drop the closing brace */
                        buf_append(&b, o.data, o.len);
                        buf_puts(&b, ",\"token\":\"");
                        buf_puts(&b, token);
                        buf_puts(&b, "\"}");
                }
                buf_free(&o);
        }
        conn_reply_json(c, status, &b);
        buf_free(&b);
}

/* ---------------- actions: queue ---------------- */

static struct action *act_new(struct session *s, enum act_kind kind, struct conn *c) {
        struct action *a = calloc(1, sizeof *a);
        if (!a) {
                if (c)
                        conn_reply_error(c, 500, "out of memory");
                return NULL;
        }
        a->s = s;
        a->kind = kind;
        waiter_set(&a->w, c);
        return a;
}

static void act_free(struct action *a) {
        (void)waiter_take(&a->w);
        free(a->ready_dir);
        free(a);
}

static void act_enqueue(struct session *s, struct action *a, bool front) {
        if (front) {
                a->next = s->queue;
                s->queue = a;
        } else {
                struct action **pp = &s->queue;
                while (*pp)
                        pp = &(*pp)->next;
                a->next = NULL;
                *pp = a;
        }
        s->n_queued++;
        act_kick(s);
}

/* Queues a request's action; 409 when too many wait already. */
static bool act_submit(struct session *s, struct action *a) {
        if (s->n_queued >= SES_MAX_QUEUED_ACTIONS) {
                struct conn *c = waiter_take(&a->w);
                if (c)
                        conn_reply_error(c, 409, "session %s has %d requests waiting already", s->id,
                                         SES_MAX_QUEUED_ACTIONS);
                free(a);
                return false;
        }
        act_enqueue(s, a, false);
        return true;
}

static void act_run(struct action *a);

static void act_kick_deferred(void *p) {
        struct session *s = p;
        s->kick_pending = false;
        if (s->freed || s->act || !s->queue)
                return;
        struct action *a = s->queue;
        s->queue = a->next;
        s->n_queued--;
        a->next = NULL;
        s->act = a;
        act_run(a);
}

/* Runs the next queued action after the current batch: never inside the stack of
 * whoever queued it (often a frame handler of this very session). */
static void act_kick(struct session *s) {
        if (s->freed || s->kick_pending || s->act || !s->queue)
                return;
        if (loop_defer(s->d->loop, act_kick_deferred, s) == 0)
                s->kick_pending = true;
}

static bool recover_queued(struct session *s) {
        for (struct action *q = s->queue; q; q = q->next)
                if (q->kind == ACT_RECOVER)
                        return true;
        return s->act && s->act->kind == ACT_RECOVER;
}

static void act_done(struct action *a) {
        struct session *s = a->s;
        if (s->act == a)
                s->act = NULL;
        act_free(a);
        if (s->freed)
                return;
        /* The sandbox died while the action ran: recover now. */
        if (s->lost && s->state == META_SESSION_RUNNING && !recover_queued(s))
                recover_queue(s, s->sbx_id, s->error ? s->error : "sandbox lost", false);
        act_kick(s);
}

/* Fails an action with an HTTP error to its client (if any) and ends it. */
static void act_fail(struct action *a, int status, const char *fmt, ...) _printf_(3, 4);
static void act_fail(struct action *a, int status, const char *fmt, ...) {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        log_warn("%s: %s", a->s->id, msg);
        struct conn *c = waiter_take(&a->w);
        if (c)
                conn_reply_error(c, status, "%s", msg);
        act_done(a);
}

/* ---------------- jobs ---------------- */

static void job_free(struct job *j) {
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
        job_free(j);
}

static void job_work(struct wjob *wj);

static struct job *job_new(struct daemon *d, struct session *s, struct action *a, enum job_kind kind,
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
        j->start_ns = now_ns();
        if (s) {
                snprintf(j->session, sizeof j->session, "%s", s->id);
                j->layer = s->layer;
        }
        return j;
}

static int job_submit(struct job *j) {
        int r = wk_submit(j->d->workers, &j->wj);
        if (r < 0) {
                job_free(j);
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
static bool store_damaged(int r) { return r == -EBADMSG || r == -ENOENT || r == -EIO; }

/* The message for a failed read of snapshot snap by job j: "snapshot S is damaged: …" when
 * it is, else "WHAT S: …". */
static void snap_err(char *out, size_t size, const char *what, const char *snap, const struct job *j) {
        if (store_damaged(j->r))
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
        uint64_t t0 = mono_us();
        _cleanup_free_ char *sbx = strndup(j->dir, strlen(j->dir) - strlen("/upper"));
        int r = sbx ? rt_volume_snapshot(sbx, j->src_snap) : -ENOMEM;
        j->src_us = mono_us() - t0;
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
        j->freeze_us = mono_us() - j->freeze_t0;
}

/* Checkpoints j->sb into j->mem_dir and stores that directory; j->has_memory on success,
 * j->mem_err otherwise. The directory is removed either way. */
static void memory_capture(struct job *j) {
        uint64_t t0 = mono_us();
        int r = 0;
        if (mkdir(j->mem_dir, 0700) < 0 && errno != EEXIST) {
                snprintf(j->mem_err, sizeof j->mem_err, "making %s: %s", j->mem_dir, strerror(errno));
                return;
        }
        r = j->rt->checkpoint(j->sb, j->mem_dir, j->thaw);
        j->checkpoint_us = mono_us() - t0;
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

static void work_capture(struct job *j) {
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
                uint64_t ts = mono_us();
                _cleanup_close_ int fd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0)
                        (void)syncfs(fd);
                j->src_sync_us = mono_us() - ts;
        }
        uint64_t t0 = mono_us();
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
        j->frozen_at_ns = now_ns();
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
                        j->freeze_us = mono_us() - t0;
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
        uint64_t t1 = mono_us();
        for (int i = 0; i < DUR_CAPTURE_TRIES && r == -EAGAIN; i++) {
                memset(&j->stats, 0, sizeof j->stats);
                r = store_capture(j->d->store, from, has_pre ? &pre : j->has_parent ? &j->parent : NULL, &o,
                                  &j->result);
        }
        uint64_t t2 = mono_us();
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
                j->freeze_us = mono_us() - t0;
        }
        j->capture_us = t2 - t1;
        if (j->sb && !j->thaw)
                j->freeze_us = mono_us() - t0;
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
        uint64_t t0 = mono_us();
        int r = layers_start(j->d->data_dir, j->d->store, &j->parent, &cand, j->dir, &j->stats, &j->layer,
                             &j->layer_how);
        j->capture_us = mono_us() - t0;
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
        uint64_t t0 = mono_us();
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
                j->checkpoint_us = mono_us() - t0 - j->capture_us;
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
        case JOB_CAPTURE: work_capture(j); break;
        case JOB_LAYER: work_layer(j); break;
        case JOB_FORK: work_fork(j); break;
        case JOB_GC: work_gc(j); break;
        case JOB_RM: work_rm(j); break;
        case JOB_DESTROY: work_destroy(j); break;
        }
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
        return asprintf(&p, "%s/%s%s.%" PRIu64, dir, keep ? "" : ".cap.", s->sbx_id, mono_us()) < 0 ? NULL : p;
}

/* Starts a capture of s's upper dir (frozen meanwhile); cont gets the job. */
static int capture_begin(struct action *a, enum meta_snapshot_reason reason, bool thaw, bool check_dirty,
                         void (*cont)(struct job *)) {
        struct session *s = a->s;
        struct job *j = job_new(NULL, s, a, JOB_CAPTURE, cont);
        if (!j)
                return -ENOMEM;
        if (asprintf(&j->dir, "%s/upper", s->dir) < 0) {
                j->dir = NULL;
                job_free(j);
                return -ENOMEM;
        }
        j->rt = s->rt;
        j->sb = s->lost ? NULL : s->sb;
        j->thaw = thaw;
        j->check_dirty = check_dirty;
        j->since_ns = s->clean_since_ns;
        j->has_parent = s->head[0] != '\0';
        j->parent = s->head_hash;
        j->sreason = store_reason_of(reason);
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
                        job_free(j);
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
                        ses_quiesce(s, 503, thaw ? "the session is taking a memory snapshot" : "the session is being paused");
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
        return job_submit(j);
}

static double job_freeze_ms(const struct job *j) { return j->sb ? (double)j->freeze_us / 1000.0 : -1; }

/* Records a captured snapshot in meta: the row, the new head and an event, in one
 * transaction together with whatever `extra` adds (pause: the state). *ret gets the row. */
static int snapshot_commit(struct session *s, struct job *j, enum meta_snapshot_reason reason, const char *label,
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
                log_warn("%s: recording snapshot: %s", s->id, merr(d));
                rollback(d);
                goto out;
        }
        if ((r = meta_commit(d->meta)) < 0) {
                log_warn("%s: committing snapshot: %s", s->id, merr(d));
                rollback(d);
                goto out;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->result;
        s->last_snapshot_ms = meta_now_ms();
        s->last_entries = j->stats.entries;
        if (j->frozen_at_ns)
                s->clean_since_ns = j->frozen_at_ns;
        (void)meta_snapshot_get(d->meta, m.id, &m); /* the stored time */
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

/* Retention: rolling snapshots beyond the session's newest `retention` leave meta first,
 * then the store's list; the next GC frees what only they held. */
static void retention_apply(struct session *s) {
        struct daemon *d = s->d;
        struct meta_id *ids = NULL;
        size_t n = 0;
        if (meta_snapshot_expired(d->meta, s->id, &ids, &n) < 0) {
                log_warn("%s: retention: %s", s->id, merr(d));
                return;
        }
        for (size_t i = 0; i < n; i++) {
                struct meta_snapshot m;
                if (meta_snapshot_get(d->meta, ids[i].s, &m) < 0)
                        continue;
                if (meta_snapshot_delete(d->meta, ids[i].s) < 0) {
                        log_warn("%s: retention: deleting %s: %s", s->id, ids[i].s, merr(d));
                        continue;
                }
                struct store_hash h;
                if (store_hash_from_hex(m.store_hash, &h) == 0)
                        (void)store_snapshot_forget(d->store, &h);
                /* Its memory record may be shared (forks, restores): GC keeps it while any
                 * snapshot in meta names it. */
                if (m.memory_hash[0] && store_hash_from_hex(m.memory_hash, &h) == 0 && !memory_named(d, m.memory_hash))
                        (void)store_snapshot_forget(d->store, &h);
        }
        if (n)
                log_debug("%s: retention dropped %zu rolling snapshot(s)", s->id, n);
        free(ids);
}

/* After the commit of a snapshot that made a source layer: say so, and apply the cap. */
static void source_layer_done(struct session *s, const struct job *j, const char *snap) {
        if (!j->src_layer.set)
                return;
        log_info("%s: source layer of %s from a btrfs snapshot: %" PRIu64 " us of the freeze, %" PRIu64
                 " us flushing before it",
                 s->id, snap, j->src_us, j->src_sync_us);
        layers_gc(s->d, false);
}

static void snapshot_done(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        /* A checkpoint without live_checkpoint stopped the sandbox */
        bool stopped = j->memory && !j->thaw;
        if (j->r < 0) {
                if (stopped) {
                        pause_failed(a, j, "snapshot failed", j->err);
                        return;
                }
                act_fail(a, 500, "snapshot failed: %s", j->err);
                return;
        }
        if (!j->dirty) {
                log_debug("%s: rolling snapshot skipped: nothing changed", s->id);
                act_done(a);
                return;
        }
        struct meta_snapshot m;
        int r = snapshot_commit(s, j, a->reason, a->label, NULL, &m);
        if (r < 0) {
                if (stopped) {
                        pause_failed(a, j, "recording the snapshot failed", merr(s->d));
                        return;
                }
                act_fail(a, 500, "recording the snapshot failed: %s", merr(s->d));
                return;
        }
        if (j->memory)
                memory_event(s, "checkpoint", m.id, j, j->has_memory ? NULL : j->mem_err);
        source_layer_done(s, j, m.id);
        if (stopped) /* a new one continues from the image just stored (a restart on purpose) */
                recover_queue(s, s->sbx_id, "restarted from its memory snapshot", true);
        log_info("%s: snapshot %s (%s): %" PRIu64 " bytes new, %" PRIu64 " files read, frozen %" PRIu64
                 " us%s, capture %" PRIu64 " us",
                 s->id, m.id, meta_snapshot_reason_name(a->reason), j->stats.bytes_written, j->stats.files_read,
                 j->freeze_us, j->src_capture && j->src_taken ? " (for a btrfs snapshot only)" : "", j->capture_us);
        if (a->reason == META_REASON_ROLLING)
                retention_apply(s);
        struct conn *c = waiter_take(&a->w);
        if (c) {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                snapshot_write_json(&w, &m, job_freeze_ms(j));
                conn_reply_json(c, 201, &b);
                buf_free(&b);
        }
        act_done(a);
}

static void run_snapshot(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int st = dl_action_status(DL_SNAPSHOT, s->state, &why);
        if (st == 0 && !ses_usable(s)) {
                st = 503;
                why = "the session has no running sandbox right now";
        }
        if (st) {
                if (a->internal) {
                        act_done(a);
                        return;
                }
                act_fail(a, st, "%s", why);
                return;
        }
        bool rolling = a->reason == META_REASON_ROLLING;
        int r = capture_begin(a, a->reason, true, rolling, snapshot_done);
        if (r < 0)
                act_fail(a, 500, "starting the capture: %s", strerror(-r));
}

/* ---------------- starting a sandbox ---------------- */

static void start_fail(struct action *a, const char *fmt, ...) _printf_(2, 3);

static void start_created(struct action *a);

static void log_materialized(const struct session *s, const char *snap, const struct job *j) {
        static const char *const how[] = { [LAYER_SAME] = "on its layer", [LAYER_DELTA] = "as a difference",
                                           [LAYER_MADE] = "on a new layer", [LAYER_PLAIN] = "whole (hard links)" };
        log_debug("%s: materialized %s %s in %" PRIu64 " us (%" PRIu64 " files written)", s->id, snap, how[j->layer_how],
                  j->capture_us, j->stats.files);
}

static void start_materialized(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                /* The snapshot the client named: a fork's or a create's source, else the head. */
                const char *snap = (a->why == START_FORK || a->why == START_CREATE) && s->source_snapshot[0]
                                           ? s->source_snapshot
                                           : s->head;
                char msg[700];
                snap_err(msg, sizeof msg, "restoring the files of", snap, j);
                a->damaged = store_damaged(j->r);
                start_fail(a, "%s", msg);
                return;
        }
        if (a->want_memory && !j->has_memory) {
                a->want_memory = false;
                snprintf(a->memory_err, sizeof a->memory_err, "%s", j->mem_err);
        }
        if (j->memory)
                log_debug("%s: memory image of %s copied out in %" PRIu64 " us", s->id, s->head, j->checkpoint_us);
        if (j->dir) {
                s->layer = j->layer;
                log_materialized(s, s->head, j);
        }
        start_created(a);
}

static struct rt_limits session_limits(const struct session *s) {
        return (struct rt_limits){ .memory_bytes = s->memory, .cpu_millis = (uint32_t)(s->cpus * 1000 + 0.5),
                                   .pids = s->pids, .disk_bytes = s->disk };
}

static void start_watch(struct action *a);

/* A sandbox from the pool that s holds but meta does not know yet: gone with its dir. */
static void pooled_drop(struct session *s, bool pooled, const char *dir) {
        if (!pooled || !s->sb)
                return;
        if (s->rt->destroy(s->sb) < 0)
                log_warn("%s: destroying a pooled sandbox: %s", s->id, runtime_last_error());
        s->sb = NULL;
        if (dir)
                (void)rt_rm_rf(dir);
}

/* Whether the start of s restores processes: its driver has memory snapshots and its head
 * snapshot a memory image. When it has not, a->memory_err says why, for the event log. */
static void start_memory_plan(struct action *a) {
        struct session *s = a->s;
        a->want_memory = false;
        a->memory_err[0] = '\0';
        if (!s->head[0] || !s->rt->memory_snapshots)
                return;
        struct meta_snapshot m;
        if (meta_snapshot_get(s->d->meta, s->head, &m) < 0 || !m.memory_hash[0] ||
            store_hash_from_hex(m.memory_hash, &a->memory) < 0) {
                snprintf(a->memory_err, sizeof a->memory_err, "snapshot %s has no memory image", s->head);
                return;
        }
        a->want_memory = true;
}

/* A new sandbox for s: its writable layer is the head snapshot (or empty), then it
 * starts and says HELLO (dur_sandbox_ready). With nothing to restore, a warm one from
 * the pool (pool.c) does: its id, directory and empty layer are what the cold path
 * below would have made. */
static void start_begin(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        struct wpool_sandbox ps = { 0 };
        /* The pool holds sandboxes of the daemon's runtime only. */
        bool pooled = !s->head[0] && !s->sb && s->rt == d->rt &&
                      wpool_take(d->pool, &(struct wpool_want){ .template = s->template, .network = s->network,
                                                              .limits = session_limits(s) }, &ps) == 0;
        /* A restore's directory, filled already (restore_forked). */
        bool ready = !pooled && a->ready_dir;
        char sbx[SES_ID_LEN + 1];
        int r = pooled || ready ? 0 : util_random_id("sbx_", sbx, sizeof sbx);
        if (pooled || ready)
                snprintf(sbx, sizeof sbx, "%s", pooled ? ps.id : a->ready_sbx);
        _cleanup_free_ char *upper = NULL, *work = NULL, *run = NULL;
        char *dir = pooled ? ps.dir : ready ? TAKE_PTR(a->ready_dir) : r == 0 ? disk_sandbox_dir(d, sbx) : NULL;
        if (pooled) {
                /* Owned by s from here: start_fail destroys it like any other. */
                s->sb = ps.sb;
                s->clean_since_ns = ps.clean_since_ns;
        }
        if (!dir || asprintf(&upper, "%s/upper", dir) < 0 || asprintf(&work, "%s/work", dir) < 0 ||
            asprintf(&run, "%s/run", dir) < 0) {
                pooled_drop(s, pooled, dir);
                free(dir);
                start_fail(a, "out of memory");
                return;
        }
        bool unparked = !pooled && !ready && a->why == START_RESUME && s->head[0] && unpark_layer(s, dir);
        /* On the quota volume a subvolume of its own: what a disk limit applies to. */
        if (!pooled && ((!unparked && !ready && (r = rt_volume_make_dir(dir, 0700)) < 0) ||
                        (mkdir(work, 0700) < 0 && errno != EEXIST) || mkdir(run, 0700) < 0)) {
                r = r < 0 ? r : -errno;
                (void)rt_rm_rf(dir);
                free(dir);
                start_fail(a, "making the sandbox directory: %s", strerror(-r));
                return;
        }
        struct meta_sandbox mb = { .state = META_SANDBOX_STARTING };
        snprintf(mb.id, sizeof mb.id, "%s", sbx);
        snprintf(mb.session_id, sizeof mb.session_id, "%s", s->id);
        snprintf(mb.host_id, sizeof mb.host_id, DUR_HOST_ID);
        snprintf(mb.runtime, sizeof mb.runtime, "%s", s->rt->name);
        /* Known to meta before it exists: a crash from here on leaves a sandbox that the
         * next start re-attaches or reclaims, never one nobody knows. */
        relaxed(d, true);
        if ((r = meta_begin(d->meta)) < 0 || (r = meta_sandbox_create(d->meta, &mb)) < 0 ||
            (r = meta_session_set_sandbox(d->meta, s->id, sbx)) < 0 || (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                relaxed(d, false);
                pooled_drop(s, pooled, dir);
                (void)rt_rm_rf(dir);
                free(dir);
                start_fail(a, "recording the sandbox: %s", merr(d));
                return;
        }
        relaxed(d, false);
        snprintf(s->sbx_id, sizeof s->sbx_id, "%s", sbx);
        free(s->dir);
        s->dir = dir;
        if (pooled || !s->head[0])
                s->layer = (struct layer_ref){ 0 };
        if (ready)
                s->layer = a->ready_layer;
        if (pooled) {
                log_debug("%s: sandbox %s taken from the pool", s->id, sbx);
                start_watch(a);
                return;
        }
        start_memory_plan(a);
        if (!s->head[0]) {
                if (mkdir(upper, 0755) < 0) {
                        start_fail(a, "making the writable layer: %s", strerror(errno));
                        return;
                }
                start_created(a);
                return;
        }
        if (unparked)
                log_info("%s: resume: reused parked layer of %s", s->id, s->head);
        if ((unparked || ready) && !a->want_memory) {
                start_created(a);
                return;
        }
        struct job *j = job_new(NULL, s, a, JOB_LAYER, start_materialized);
        if (!j || (!unparked && !ready && !(j->dir = strdup(upper))) ||
            (a->want_memory && asprintf(&j->mem_dir, "%s/checkpoint", s->dir) < 0)) {
                if (j)
                        job_free(j);
                start_fail(a, "out of memory");
                return;
        }
        if (a->want_memory) {
                j->memory = true;
                j->memory_snap = a->memory;
        }
        j->parent = s->head_hash;
        r = job_submit(j);
        if (r < 0)
                start_fail(a, "starting the restore: %s", strerror(-r));
}

/* Puts s's snapshot layer (if any) above the template in *lower, and records it beside
 * the writable layer before the sandbox exists: a re-attach must capture over it. */
static int layer_lower(struct session *s, char **lower) {
        _cleanup_free_ char *ref = NULL, *files = NULL;
        if (asprintf(&ref, "%s/layer", s->dir) < 0)
                return -ENOMEM;
        int r = layers_ref_write(ref, &s->layer);
        if (r < 0 || !s->layer.set)
                return r;
        char *both = NULL;
        if ((r = layers_files_dir(s->d->data_dir, &s->layer, &files)) < 0 || asprintf(&both, "%s:%s", files, *lower) < 0)
                return r < 0 ? r : -ENOMEM;
        free(*lower);
        *lower = both;
        return 0;
}

static void start_create_done(struct job *j);

static void start_created(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        _cleanup_free_ char *lower = NULL;
        int r = template_rootfs_path(d->data_dir, s->template, &lower);
        if (r < 0) {
                start_fail(a, "template %s: %s", s->template, strerror(-r));
                return;
        }
        if (!template_exists(d->data_dir, s->template)) {
                start_fail(a, "template %s does not exist any more", s->template);
                return;
        }
        if (s->disk && !d->disk_quota) {
                start_fail(a, "its disk limit (%" PRIu64 " bytes) cannot be enforced on this host: %s", s->disk,
                           d->disk_error);
                return;
        }
        if ((r = layer_lower(s, &lower)) < 0) {
                start_fail(a, "the snapshot layer: %s", strerror(-r));
                return;
        }
        struct job *j = job_new(NULL, s, a, JOB_CREATE, start_create_done);
        if (!j || asprintf(&j->upper, "%s/upper", s->dir) < 0 || asprintf(&j->work, "%s/work", s->dir) < 0 ||
            asprintf(&j->run, "%s/run", s->dir) < 0 ||
            (a->want_memory && asprintf(&j->mem_dir, "%s/checkpoint", s->dir) < 0)) {
                if (j)
                        job_free(j);
                start_fail(a, "out of memory");
                return;
        }
        j->rt = s->rt;
        j->lower = TAKE_PTR(lower);
        j->spec = (struct rt_spec){
                .id = s->sbx_id,
                .lower_dirs = j->lower,
                .upper_dir = j->upper,
                .work_dir = j->work,
                .run_dir = j->run,
                .init_path = d->init_path,
                .limits = session_limits(s),
                .network = s->network,
                .restore_dir = a->want_memory ? j->mem_dir : NULL,
        };
        /* The id is copied: the session's own may change before the job is done. */
        snprintf(j->label, sizeof j->label, "%s", s->sbx_id);
        j->spec.id = j->label;
        j->create_t0_ms = util_now_ms();
        if ((r = wk_submit(d->starter, &j->wj)) < 0) {
                job_free(j);
                start_fail(a, "starting the sandbox: %s", strerror(-r));
                return;
        }
        s->job = j;
}

static void start_create_done(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->restore_failed) {
                snprintf(a->memory_err, sizeof a->memory_err, "%s", j->mem_err);
                log_warn("%s: %s; booted from the files", s->id, a->memory_err);
                a->want_memory = false;
        }
        if (s->rt->memory_snapshots && s->head[0])
                memory_event(s, a->want_memory ? "restored" : "booted", s->head, NULL,
                             a->want_memory ? NULL : a->memory_err);
        if (j->r < 0) {
                start_fail(a, "creating the sandbox failed: %s", j->err);
                return;
        }
        s->sb = TAKE_PTR(j->sb);
        if (a->want_memory)
                log_info("%s: processes of %s restored in %" PRIu64 " ms", s->id, s->head, util_now_ms() - j->create_t0_ms);
        /* The layer holds exactly the head snapshot up to now (create only set the owner
         * of its root): later changes are what the next rolling snapshot looks for. */
        s->clean_since_ns = now_ns();
        log_debug("%s: sandbox %s made in %" PRIu64 " ms", s->id, s->sbx_id, util_now_ms() - j->create_t0_ms);
        start_watch(a);
}

/* s->sb runs: wait for its HELLO. */
static void start_watch(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        int r = ses_watch(s);
        if (r < 0) {
                start_fail(a, "watching the sandbox: %s", strerror(-r));
                return;
        }
        relaxed(d, true);
        if (meta_sandbox_set_pid(d->meta, s->sbx_id, (int32_t)s->init_pid) < 0)
                log_warn("%s: recording init pid: %s", s->id, merr(d));
        relaxed(d, false);
        a->waiting_hello = true;
}

static void group_child_done(struct fork_group *g, unsigned i, bool ok);

static const char *start_event_name(enum start_why why) {
        switch (why) {
        case START_CREATE: return "created";
        case START_RESUME: return "resumed";
        case START_RESTORE: return "restored";
        case START_FORK: return "created";
        case START_ADOPT: return "reattached";
        case START_RECOVER: return "recovered";
        }
        return "started";
}

/* HELLO: the sandbox runs. Commit, then answer. */
static void start_finish(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        a->waiting_hello = false;
        int r;
        unsigned from = META_STATE_BIT(META_SESSION_CREATING) | META_STATE_BIT(META_SESSION_RUNNING) |
                        META_STATE_BIT(META_SESSION_PAUSED) | META_STATE_BIT(META_SESSION_RECOVERING);
        struct buf ev = BUF_INIT(0);
        const char *kind = "lifecycle";
        if (a->why == START_RECOVER)
                r = dl_recovery_json(&ev, a->lost_sbx, a->lost_reason, s->head, s->sbx_id, NULL);
        else
                r = dl_lifecycle_json(&ev, a->lost_on_purpose ? "restarted" : start_event_name(a->why), s->head, NULL);
        if (a->why == START_RECOVER && !a->lost_on_purpose)
                kind = "recovery";
        else if (a->why == START_RECOVER)
                r = (buf_reset(&ev), dl_lifecycle_json(&ev, "restarted", s->head, a->lost_reason));
        if (r < 0 || (r = meta_begin(d->meta)) < 0 ||
            (r = meta_sandbox_set_state(d->meta, s->sbx_id, META_SANDBOX_RUNNING, NULL)) < 0 ||
            (r = meta_session_set_state(d->meta, s->id, from, META_SESSION_RUNNING, NULL)) < 0 ||
            ((a->why != START_CREATE && a->why != START_FORK && a->why != START_RESTORE) &&
             (r = meta_event_append(d->meta, s->id, kind, ev.data, ev.len, NULL)) < 0) ||
            (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                buf_free(&ev);
                start_fail(a, "recording the running sandbox: %s", merr(d));
                return;
        }
        buf_free(&ev);
        s->state = META_SESSION_RUNNING;
        s->adopting = false;
        s->next_rolling_ms = util_now_ms() + (uint64_t)(s->interval_ms > 0 ? s->interval_ms : 0);
        /* the commit above cleared meta's error: why the last start failed, or the sandbox died */
        free(s->error);
        s->error = NULL;
        if (a->why == START_RECOVER) {
                if (!a->lost_on_purpose)
                        s->recoveries++;
                s->recover_failures = 0;
                log_info("%s: %s on sandbox %s from %s", s->id, a->lost_on_purpose ? "restarted" : "recovered",
                         s->sbx_id, s->head[0] ? s->head : "the template");
        } else if (a->why == START_ADOPT) {
                log_info("%s: re-attached sandbox %s (init pid %d)", s->id, s->sbx_id, (int)s->init_pid);
        }
        struct conn *c = waiter_take(&a->w);
        switch (a->why) {
        case START_CREATE:
                reply_session(c, 201, s, a->token);
                break;
        case START_RESUME:
        case START_RESTORE:
                reply_session(c, 200, s, NULL);
                break;
        case START_FORK:
                group_child_done(a->group, a->fork_index, true);
                break;
        default:
                break;
        }
        act_done(a);
}

/* Forgets a session nobody was told about (a create or fork child that failed). */
static void forget_unacknowledged(struct session *s) {
        struct daemon *d = s->d;
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        if (meta_snapshot_list(d->meta, s->id, &v, &n) == 0) {
                for (size_t i = 0; i < n; i++) {
                        struct store_hash h;
                        if (store_hash_from_hex(v[i].store_hash, &h) == 0)
                                (void)store_snapshot_forget(d->store, &h);
                }
                free(v);
        }
        if (meta_session_delete(d->meta, s->id) < 0)
                log_warn("%s: forgetting the failed session: %s", s->id, merr(d));
        s->state = META_SESSION_TERMINATED;
}

/* A resume that did not start: the session stays paused at its head; an event (lifecycle
 * "resume_failed") and its error say why. */
static void resume_failed(struct session *s, const char *msg) {
        struct daemon *d = s->d;
        struct buf ev = BUF_INIT(0);
        int r = dl_lifecycle_json(&ev, "resume_failed", s->head, msg);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 ||
            (r = meta_session_set_state(d->meta, s->id, META_STATE_BIT(META_SESSION_PAUSED), META_SESSION_PAUSED,
                                        msg)) < 0 ||
            (r = meta_event_append(d->meta, s->id, "lifecycle", ev.data, ev.len, NULL)) < 0 ||
            (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                log_warn("%s: recording the failed resume: %s", s->id, merr(d));
        }
        buf_free(&ev);
        free(s->error);
        s->error = strdup(msg);
}

/* A recovery from a damaged head snapshot stops instead of trying again every few seconds:
 * the data does not heal by itself, and starting from what can still be read of it would
 * restore wrong files without a word. The session turns paused — nothing runs, nothing is
 * lost: its timeline, log and record stay — with the reason in its error and in a recovery
 * event without a new sandbox. A resume tries the head again (after a repair); a restore
 * to another snapshot, then a resume, starts from that one (docs/sessions.md, "Damaged
 * snapshots"). */
static int recovery_stopped(struct action *a, const char *msg) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        struct buf ev = BUF_INIT(0);
        int r = dl_recovery_json(&ev, a->lost_sbx, a->lost_reason[0] ? a->lost_reason : "sandbox lost", s->head, NULL,
                                 msg);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 ||
            (r = meta_session_set_state(d->meta, s->id, 0, META_SESSION_PAUSED, msg)) < 0 ||
            (r = meta_event_append(d->meta, s->id, "recovery", ev.data, ev.len, NULL)) < 0 ||
            (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                log_warn("%s: recording the stopped recovery: %s", s->id, merr(d));
                buf_free(&ev);
                return r;
        }
        buf_free(&ev);
        s->state = META_SESSION_PAUSED;
        s->recover_failures = 0;
        free(s->error);
        s->error = strdup(msg);
        log_warn("%s: recovery stopped, the session is paused: %s", s->id, msg);
        return 0;
}

static void start_fail(struct action *a, const char *fmt, ...) {
        struct session *s = a->s;
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        a->waiting_hello = false;
        log_warn("%s: starting a sandbox (%s) failed: %s", s->id, start_event_name(a->why), msg);
        drop_sandbox(s, 503, msg, META_SANDBOX_DEAD, msg);
        (void)meta_session_set_sandbox(s->d->meta, s->id, NULL);
        struct conn *c = waiter_take(&a->w);
        switch (a->why) {
        case START_CREATE:
        case START_FORK:
                forget_unacknowledged(s);
                if (c)
                        conn_reply_error(c, 500, "the session could not start: %s", msg);
                if (a->why == START_FORK) {
                        if (!a->group->err[0])
                                snprintf(a->group->err, sizeof a->group->err, "%s", msg);
                        group_child_done(a->group, a->fork_index, false);
                }
                {
                        /* Nothing may run for it any more. */
                        struct action *q;
                        while ((q = s->queue)) {
                                s->queue = q->next;
                                s->n_queued--;
                                struct conn *qc = waiter_take(&q->w);
                                if (qc)
                                        conn_reply_error(qc, 404, "session %s failed to start", s->id);
                                free(q);
                        }
                }
                act_done(a);
                ses_free(s);
                return;
        case START_RESUME:
                /* Still paused at the same head: the log and the session's error say why. */
                resume_failed(s, msg);
                if (c)
                        conn_reply_error(c, 500, "resume failed: %s", msg);
                act_done(a);
                return;
        case START_RECOVER:
                if (a->damaged && recovery_stopped(a, msg) == 0) {
                        act_done(a);
                        return;
                }
                /* fall through */
        case START_RESTORE:
        case START_ADOPT:
                if (c)
                        conn_reply_error(c, 500, "the new sandbox failed: %s; the session is recovering", msg);
                free(s->error);
                s->error = strdup(msg);
                if (s->state != META_SESSION_PAUSED) {
                        if (meta_session_set_state(s->d->meta, s->id, 0, META_SESSION_RECOVERING, msg) == 0)
                                s->state = META_SESSION_RECOVERING;
                        s->recover_failures++;
                        /* Tried again by dur_tick, a little later each time (at most 30 s). */
                        uint64_t delay = SES_RECOVER_RETRY_MS * (uint64_t)MIN(s->recover_failures, 30u);
                        s->recover_at_ms = util_now_ms() + delay;
                }
                act_done(a);
                return;
        }
}

void dur_sandbox_ready(struct session *s) {
        struct action *a = s->act;
        if (a && a->kind == ACT_START && a->waiting_hello) {
                start_finish(a);
                return;
        }
        log_debug("%s: HELLO with no start waiting for it", s->id);
}

/* A resume whose new sandbox ended before it said HELLO ran nothing for anyone, and the
 * head snapshot (files and memory image) is still in the store: one fresh start from it
 * loses nothing and turns a sandbox lost while starting (seen on a loaded host, the
 * driver's account of it in the log line below) into a resume that works. A second loss
 * fails the resume with its reason; the session stays paused. */
static void start_retry(struct action *a, const char *why) {
        struct session *s = a->s;
        a->start_retries++;
        a->waiting_hello = false;
        log_warn("%s: sandbox %s was lost before it said hello (%s); starting another from %s", s->id, s->sbx_id, why,
                 s->head);
        drop_sandbox(s, 503, why, META_SANDBOX_DEAD, why);
        (void)meta_session_set_sandbox(s->d->meta, s->id, NULL);
        start_begin(a);
}

void dur_sandbox_lost(struct session *s, const char *why) {
        struct action *a = s->act;
        if (a && a->kind == ACT_START && a->waiting_hello) {
                if (a->why == START_RESUME && a->start_retries < DUR_RESUME_RETRIES)
                        start_retry(a, why);
                else
                        start_fail(a, "%s", why);
                return;
        }
        if (!a && s->state == META_SESSION_RUNNING && !recover_queued(s))
                recover_queue(s, s->sbx_id, why, false);
        /* With an action running, act_done() queues the recovery when it ends: the
         * action may hold the sandbox (a capture freezes it). */
}

/* ---------------- recovery ---------------- */

static void recover_queue(struct session *s, const char *sbx, const char *why, bool on_purpose) {
        struct action *a = act_new(s, ACT_RECOVER, NULL);
        if (!a)
                return;
        a->internal = true;
        a->lost_on_purpose = on_purpose;
        snprintf(a->lost_sbx, sizeof a->lost_sbx, "%s", sbx ? sbx : "");
        snprintf(a->lost_reason, sizeof a->lost_reason, "%s", why ? why : "");
        act_enqueue(s, a, true);
}

static void run_recover(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (s->state == META_SESSION_PAUSED || s->state == META_SESSION_TERMINATED) {
                act_done(a);
                return;
        }
        if (s->sb && !s->lost && s->ready) {
                act_done(a); /* already running again (a restore got there first) */
                return;
        }
        const char *why = a->lost_reason[0] ? a->lost_reason : "sandbox lost";
        if (!a->lost_sbx[0])
                snprintf(a->lost_sbx, sizeof a->lost_sbx, "%s", s->sbx_id);
        log_warn("%s: recovering from %s (sandbox %s: %s)", s->id, s->head[0] ? s->head : "the template",
                 a->lost_sbx[0] ? a->lost_sbx : "none", why);
        if (s->state != META_SESSION_RECOVERING) {
                if (meta_session_set_state(d->meta, s->id, 0, META_SESSION_RECOVERING, why) < 0)
                        log_warn("%s: state recovering: %s", s->id, merr(d));
                s->state = META_SESSION_RECOVERING;
        }
        if (s->sb || s->dir) {
                drop_sandbox(s, 503, why, a->lost_on_purpose ? META_SANDBOX_DESTROYED : META_SANDBOX_DEAD, why);
        } else if (a->lost_sbx[0]) {
                /* Held by nobody (the daemon restarted): kill whatever is left of it. */
                reclaim_dir(d, a->lost_sbx);
                if (meta_sandbox_set_state(d->meta, a->lost_sbx, a->lost_on_purpose ? META_SANDBOX_DESTROYED
                                                                                     : META_SANDBOX_DEAD, why) < 0 &&
                    a->lost_sbx[0])
                        log_debug("%s: sandbox %s state: %s", s->id, a->lost_sbx, merr(d));
        }
        a->why = START_RECOVER;
        a->kind = ACT_START;
        start_begin(a);
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
static void memory_event(struct session *s, const char *event, const char *snap, const struct job *j,
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
                dur_event(s, "memory", &b);
        buf_free(&b);
}

/* A capture that checkpointed (or tried to) left the sandbox stopped: if the pause is
 * not going through after all, the session needs a new sandbox. */
static void pause_failed(struct action *a, struct job *j, const char *what, const char *err) {
        struct session *s = a->s;
        if (j->memory) {
                char msg[600];
                snprintf(msg, sizeof msg, "%s: %s", what, err);
                act_fail(a, 500, "%s", msg);
                ses_mark_dead(s, "%s", msg);
                return;
        }
        if (s->sb && !s->lost)
                (void)s->rt->thaw(s->sb);
        act_fail(a, 500, "%s: %s", what, err);
}

static void pause_done(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                pause_failed(a, j, "pause failed", j->err);
                return;
        }
        struct meta_snapshot m;
        int r = snapshot_commit(s, j, META_REASON_PAUSE, a->label, pause_extra, &m);
        if (r < 0) {
                pause_failed(a, j, "recording the pause failed", merr(s->d));
                return;
        }
        if (j->memory) {
                memory_event(s, "checkpoint", m.id, j, j->has_memory ? NULL : j->mem_err);
                if (j->has_memory)
                        log_info("%s: memory of %s: checkpoint + store %" PRIu64 " us, %" PRIu64 " bytes new of %" PRIu64
                                 " (%" PRIu64 " delta chunks)",
                                 s->id, m.id, j->checkpoint_us, j->mem_stats.bytes_written, j->mem_stats.bytes_logical,
                                 j->mem_stats.deltas_written);
                else
                        log_warn("%s: pause %s without memory: %s", s->id, m.id, j->mem_err);
        }
        s->state = META_SESSION_PAUSED;
        uint64_t t0 = mono_us();
        ses_drop_sandbox(s, 503, "the session was paused");
        uint64_t destroy_us = mono_us() - t0;
        /* Only a layer that was frozen from the capture until now equals the snapshot. */
        if (s->dir && !(j->sb && park_layer(s)))
                trash_dir(s->d, s->dir);
        free(s->dir);
        s->dir = NULL;
        s->sbx_id[0] = '\0';
        log_info("%s: paused at %s (capture %" PRIu64 " us, sandbox destroyed in %" PRIu64 " us)", s->id, m.id,
                 j->capture_us, destroy_us);
        reply_session(waiter_take(&a->w), 200, s, NULL);
        act_done(a);
}

static void run_pause(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int st = dl_action_status(DL_PAUSE, s->state, &why);
        if (st == 0 && !s->dir) {
                st = 503;
                why = "the session has no sandbox right now";
        }
        if (st) {
                act_fail(a, st, "%s", why);
                return;
        }
        /* Frozen until destroyed: nothing runs after the final snapshot. */
        int r = capture_begin(a, META_REASON_PAUSE, false, false, pause_done);
        if (r < 0)
                act_fail(a, 500, "starting the capture: %s", strerror(-r));
}

static void run_resume(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int st = dl_action_status(DL_RESUME, s->state, &why);
        if (st) {
                act_fail(a, st, "%s", why);
                return;
        }
        a->why = START_RESUME;
        a->kind = ACT_START;
        start_begin(a);
}

/* ---------------- restore ---------------- */

/* {"event":"restored","snapshot":<the new head record>,"from":<the snapshot restored to>} */
static int restored_json(struct buf *b, const char *snap, const char *from) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "event", "restored");
        json_w_kstr(&w, "snapshot", snap);
        json_w_kstr(&w, "from", from);
        json_w_obj_end(&w);
        return w.err;
}

static int restore_record(struct session *s, struct job *j, const char *src_id, struct meta_snapshot *ret) {
        struct daemon *d = s->d;
        struct meta_snapshot m = { .reason = META_REASON_RESTORE, .logical_size = j->stats.bytes_logical };
        int r = meta_new_id("snap", m.id);
        if (r < 0)
                return r;
        snprintf(m.session_id, sizeof m.session_id, "%s", s->id);
        snprintf(m.parent_id, sizeof m.parent_id, "%s", src_id);
        store_hash_to_hex(&j->out[0], m.store_hash);
        store_hash_to_hex(&j->root, m.root_hash);
        snprintf(m.label, sizeof m.label, "restore of %s", src_id);
        struct meta_snapshot src;
        if (meta_snapshot_get(d->meta, src_id, &src) == 0)
                snprintf(m.memory_hash, sizeof m.memory_hash, "%s", src.memory_hash);
        struct buf ev = BUF_INIT(0);
        bool had_sandbox = s->sbx_id[0] != '\0';
        if ((r = meta_begin(d->meta)) < 0)
                goto out;
        if ((r = meta_snapshot_add(d->meta, &m)) < 0 || (r = meta_session_set_head(d->meta, s->id, m.id)) < 0 ||
            (r = restored_json(&ev, m.id, src_id)) < 0 ||
            (r = meta_event_append(d->meta, s->id, "lifecycle", ev.data, ev.len, NULL)) < 0 ||
            (had_sandbox && ((r = meta_sandbox_set_state(d->meta, s->sbx_id, META_SANDBOX_DESTROYED, "restored")) < 0 ||
                             (r = meta_session_set_sandbox(d->meta, s->id, NULL)) < 0)) ||
            (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                goto out;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->out[0];
        (void)meta_snapshot_get(d->meta, m.id, &m);
        s->last_snapshot_ms = m.time_ms;
        *ret = m;
out:
        buf_free(&ev);
        return r;
}

/* A restore's filled directory that is not going to be used. */
static void ready_drop(struct action *a) {
        if (!a->ready_dir)
                return;
        trash_dir(a->s->d, a->ready_dir);
        free(a->ready_dir);
        a->ready_dir = NULL;
}

/* The store fork is made and, for a running session, the new sandbox's files are in
 * a->ready_dir: only now is anything committed or the old sandbox touched. */
static void restore_forked(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                char msg[700];
                snap_err(msg, sizeof msg, "reading", a->snap, j);
                ready_drop(a);
                act_fail(a, 500, "restore failed: %s; the session is unchanged", msg);
                return;
        }
        if (a->ready_dir) {
                a->ready_layer = j->layer;
                log_materialized(s, a->snap, j);
        }
        struct meta_snapshot m;
        if (restore_record(s, j, a->snap, &m) < 0) {
                ready_drop(a);
                (void)store_snapshot_forget(s->d->store, &j->out[0]);
                act_fail(a, 500, "recording the restore failed: %s", merr(s->d));
                return;
        }
        log_info("%s: restored %s as %s", s->id, a->snap, m.id);
        parked_drop(s); /* the layer of the old head */
        if (s->sb || s->dir) {
                ses_drop_sandbox(s, 503, "the session was restored to another snapshot");
                if (s->dir)
                        trash_dir(s->d, s->dir);
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
        }
        if (s->state == META_SESSION_PAUSED) {
                reply_session(waiter_take(&a->w), 200, s, NULL);
                act_done(a);
                return;
        }
        a->why = START_RESTORE;
        a->kind = ACT_START;
        start_begin(a);
}

/* The snapshot id of a request, checked against meta: 404 unknown or another session's. */
static int snapshot_of_session(struct session *s, const char *id, struct meta_snapshot *ret) {
        if (!meta_id_valid("snap", id))
                return -ENOENT;
        struct meta_snapshot m;
        int r = meta_snapshot_get(s->d->meta, id, &m);
        if (r < 0)
                return r;
        if (strcmp(m.session_id, s->id) != 0)
                return -EXDEV;
        *ret = m;
        return 0;
}

static void run_restore(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int st = dl_action_status(DL_RESTORE, s->state, &why);
        if (st) {
                act_fail(a, st, "%s", why);
                return;
        }
        struct meta_snapshot m;
        int r = snapshot_of_session(s, a->snap, &m);
        if (r < 0) {
                act_fail(a, 404, "session %s has no snapshot %s", s->id, a->snap);
                return;
        }
        struct job *j = job_new(NULL, s, a, JOB_FORK, restore_forked);
        if (!j || store_hash_from_hex(m.store_hash, &j->parent) < 0) {
                if (j)
                        job_free(j);
                act_fail(a, 500, "snapshot %s has a bad store hash", a->snap);
                return;
        }
        j->n = 1;
        snprintf(j->sessions[0], sizeof j->sessions[0], "%s", s->id);
        snprintf(j->label, sizeof j->label, "restore of %s", a->snap);
        /* A running session keeps its sandbox until the new one's files are there (the
         * job makes them): a snapshot that cannot be read changes nothing. A directory
         * meta does not know yet is reclaimed at the next start if spaced dies. */
        if (s->state != META_SESSION_PAUSED) {
                r = util_random_id("sbx_", a->ready_sbx, sizeof a->ready_sbx);
                if (r < 0 || !(a->ready_dir = disk_sandbox_dir(s->d, a->ready_sbx)) ||
                    asprintf(&j->dir, "%s/upper", a->ready_dir) < 0 || (r = rt_volume_make_dir(a->ready_dir, 0700)) < 0) {
                        free(a->ready_dir);
                        a->ready_dir = NULL;
                        job_free(j);
                        act_fail(a, 500, "making the sandbox directory: %s", strerror(r < 0 ? -r : ENOMEM));
                        return;
                }
        }
        if ((r = job_submit(j)) < 0) {
                ready_drop(a);
                act_fail(a, 500, "starting the restore: %s", strerror(-r));
                return;
        }
}

/* ---------------- fork ---------------- */

static void group_reply(struct fork_group *g, struct daemon *d) {
        struct conn *c = waiter_take(&g->w);
        if (g->n_failed) {
                /* All or nothing: the ones that started are removed again, and the log of
                 * the snapshot's session, which says "forked", says that it failed. */
                for (unsigned i = 0; i < g->n; i++) {
                        struct session *cs = g->ok[i] ? ses_find(d, g->ids[i]) : NULL;
                        if (cs)
                                dur_delete(cs, NULL);
                }
                struct session *src = ses_find(d, g->src_session);
                struct buf ev = BUF_INIT(0);
                if (src && dl_lifecycle_json(&ev, "fork_failed", g->src_snap, g->err) == 0)
                        dur_event(src, "lifecycle", &ev);
                buf_free(&ev);
                if (c)
                        conn_reply_error(c, 500, "fork failed: %s", g->err[0] ? g->err : "a new session did not start");
                free(g);
                return;
        }
        if (c) {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_key(&w, "sessions");
                json_w_arr_begin(&w);
                for (unsigned i = 0; i < g->n; i++) {
                        struct session *cs = ses_find(d, g->ids[i]);
                        if (!cs)
                                continue;
                        struct buf o = BUF_INIT(0);
                        struct json_writer ow = JSON_WRITER_INIT(&o);
                        ses_write_json(&ow, cs);
                        if (!ow.err && o.len >= 2) {
                                o.len--;
                                buf_puts(&o, ",\"token\":\"");
                                buf_puts(&o, g->tokens[i]);
                                buf_puts(&o, "\"}");
                                json_w_raw(&w, o.data, o.len);
                        }
                        buf_free(&o);
                }
                json_w_arr_end(&w);
                json_w_obj_end(&w);
                conn_reply_json(c, 201, &b);
                buf_free(&b);
        }
        free(g);
}

static struct daemon *group_daemon;

static void group_child_done(struct fork_group *g, unsigned i, bool ok) {
        g->ok[i] = ok;
        g->n_done++;
        if (!ok)
                g->n_failed++;
        if (g->n_done == g->n)
                group_reply(g, group_daemon);
}

/* Meta rows of the children: session (creating), its first snapshot (the fork record),
 * head, token, events — one transaction with the parent's "forked" event. */
static int fork_record(struct session *p, struct job *j, const struct meta_snapshot *src, struct fork_group *g) {
        struct daemon *d = p->d;
        _cleanup_free_ char *env_json = NULL;
        {
                struct buf e = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&e);
                json_w_obj_begin(&w);
                for (size_t i = 0; i < p->n_env; i++) {
                        const char *eq = strchr(p->env[i], '=');
                        if (!eq)
                                continue;
                        char *k = strndup(p->env[i], (size_t)(eq - p->env[i]));
                        if (k)
                                json_w_kstr(&w, k, eq + 1);
                        free(k);
                }
                json_w_obj_end(&w);
                if (!w.err) {
                        buf_putc(&e, '\0');
                        env_json = strdup(e.data);
                }
                buf_free(&e);
        }
        int r = meta_begin(d->meta);
        if (r < 0)
                return r;
        struct buf ev = BUF_INIT(0);
        for (unsigned i = 0; i < g->n && r >= 0; i++) {
                struct meta_session ms = { .state = META_SESSION_CREATING, .network = p->network,
                                           .env_json = env_json, .snapshot_interval_ms = p->interval_ms,
                                           .retention_keep = p->retention };
                snprintf(ms.id, sizeof ms.id, "%s", g->ids[i]);
                snprintf(ms.tenant, sizeof ms.tenant, "%s", p->tenant);
                snprintf(ms.template_name, sizeof ms.template_name, "%s", p->template);
                snprintf(ms.runtime, sizeof ms.runtime, "%s", p->rt->name);
                ms.limits = (struct meta_limits){ .memory_bytes = p->memory, .cpu_millis = (uint32_t)(p->cpus * 1000 + 0.5),
                                                  .pids = p->pids, .disk_bytes = p->disk };
                snprintf(ms.parent_session, sizeof ms.parent_session, "%s", src->session_id);
                snprintf(ms.source_snapshot, sizeof ms.source_snapshot, "%s", src->id);
                if ((r = meta_token_hash(g->tokens[i], ms.token_hash)) < 0 || (r = meta_session_create(d->meta, &ms)) < 0)
                        break;
                struct meta_snapshot m = { .reason = META_REASON_FORK, .logical_size = src->logical_size };
                if ((r = meta_new_id("snap", m.id)) < 0)
                        break;
                snprintf(m.session_id, sizeof m.session_id, "%s", g->ids[i]);
                snprintf(m.parent_id, sizeof m.parent_id, "%s", src->id);
                store_hash_to_hex(&j->out[i], m.store_hash);
                snprintf(m.root_hash, sizeof m.root_hash, "%s", src->root_hash);
                snprintf(m.memory_hash, sizeof m.memory_hash, "%s", src->memory_hash);
                snprintf(m.label, sizeof m.label, "fork of %s", src->id);
                buf_reset(&ev);
                if ((r = meta_snapshot_add(d->meta, &m)) < 0 || (r = meta_session_set_head(d->meta, g->ids[i], m.id)) < 0 ||
                    (r = dl_lifecycle_json(&ev, "created", m.id, "fork")) < 0 ||
                    (r = meta_event_append(d->meta, g->ids[i], "lifecycle", ev.data, ev.len, NULL)) < 0)
                        break;
        }
        if (r >= 0) {
                struct json_writer w;
                buf_reset(&ev);
                w = JSON_WRITER_INIT(&ev);
                json_w_obj_begin(&w);
                json_w_kstr(&w, "event", "forked");
                json_w_kstr(&w, "snapshot", src->id);
                json_w_key(&w, "sessions");
                json_w_arr_begin(&w);
                for (unsigned i = 0; i < g->n; i++)
                        json_w_str(&w, g->ids[i]);
                json_w_arr_end(&w);
                json_w_obj_end(&w);
                r = w.err;
                /* The source's session gets the event (it may be the parent itself). */
                if (r >= 0)
                        r = meta_event_append(d->meta, src->session_id, "lifecycle", ev.data, ev.len, NULL);
        }
        buf_free(&ev);
        if (r >= 0)
                r = meta_commit(d->meta);
        if (r < 0)
                rollback(d);
        return r;
}

/* Builds the in-memory children of a fork (or a create from a snapshot) and starts each. */
static int children_start(struct session *p, struct fork_group *g, const struct meta_snapshot *src) {
        struct daemon *d = p->d;
        for (unsigned i = 0; i < g->n; i++) {
                struct session *cs;
                int r = ses_alloc(d, g->ids[i], &cs);
                if (r < 0)
                        return r;
                cs->template = strdup(p->template);
                snprintf(cs->tenant, sizeof cs->tenant, "%s", p->tenant);
                cs->rt = p->rt;
                cs->memory = p->memory;
                cs->cpus = p->cpus;
                cs->pids = p->pids;
                cs->disk = p->disk;
                cs->network = p->network;
                cs->interval_ms = p->interval_ms;
                cs->retention = p->retention;
                cs->layer = p->layer; /* a fork of now differs from it by what p changed */
                cs->created_at = time(NULL);
                cs->state = META_SESSION_CREATING;
                snprintf(cs->parent_session, sizeof cs->parent_session, "%s", src->session_id);
                snprintf(cs->source_snapshot, sizeof cs->source_snapshot, "%s", src->id);
                (void)meta_token_hash(g->tokens[i], cs->token_hash);
                if (p->n_env) {
                        cs->env = calloc(p->n_env + 1, sizeof *cs->env);
                        for (size_t k = 0; cs->env && k < p->n_env; k++)
                                if ((cs->env[k] = strdup(p->env[k])))
                                        cs->n_env++;
                }
                struct meta_session ms;
                if (meta_session_get(d->meta, cs->id, &ms) == 0) {
                        snprintf(cs->head, sizeof cs->head, "%s", ms.head_snapshot);
                        cs->created_at = (time_t)(ms.created_ms / 1000);
                        meta_session_clear(&ms);
                }
                struct meta_snapshot hm;
                if (cs->head[0] && meta_snapshot_get(d->meta, cs->head, &hm) == 0) {
                        (void)store_hash_from_hex(hm.store_hash, &cs->head_hash);
                        cs->last_snapshot_ms = hm.time_ms;
                }
                struct action *a = act_new(cs, ACT_START, NULL);
                if (!a)
                        return -ENOMEM;
                a->why = START_FORK;
                a->group = g;
                a->fork_index = i;
                act_enqueue(cs, a, false);
        }
        return 0;
}

static void fork_stored(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (j->r < 0) {
                char msg[700];
                snap_err(msg, sizeof msg, "reading", a->snap, j);
                act_fail(a, 500, "fork failed: %s", msg);
                return;
        }
        struct meta_snapshot src;
        if (meta_snapshot_get(d->meta, a->snap, &src) < 0) {
                act_fail(a, 404, "snapshot %s is gone", a->snap);
                return;
        }
        struct fork_group *g = calloc(1, sizeof *g);
        if (!g) {
                act_fail(a, 500, "out of memory");
                return;
        }
        g->n = j->n;
        snprintf(g->src_session, sizeof g->src_session, "%s", src.session_id);
        snprintf(g->src_snap, sizeof g->src_snap, "%s", src.id);
        for (unsigned i = 0; i < g->n; i++) {
                snprintf(g->ids[i], sizeof g->ids[i], "%s", j->sessions[i]);
                if (dl_token_new(g->tokens[i]) < 0) {
                        free(g);
                        act_fail(a, 500, "no randomness for tokens");
                        return;
                }
        }
        if (fork_record(s, j, &src, g) < 0) {
                free(g);
                act_fail(a, 500, "recording the fork failed: %s", merr(d));
                return;
        }
        log_info("%s: forked %s into %u session(s)", s->id, src.id, g->n);
        group_daemon = d;
        waiter_set(&g->w, waiter_take(&a->w));
        int r = children_start(s, g, &src);
        if (r < 0)
                log_warn("%s: starting fork children: %s", s->id, strerror(-r));
        act_done(a);
}

static void fork_from(struct action *a, const struct meta_snapshot *src) {
        struct session *s = a->s;
        snprintf(a->snap, sizeof a->snap, "%s", src->id);
        struct job *j = job_new(NULL, s, a, JOB_FORK, fork_stored);
        if (!j || store_hash_from_hex(src->store_hash, &j->parent) < 0) {
                if (j)
                        job_free(j);
                act_fail(a, 500, "snapshot %s has a bad store hash", src->id);
                return;
        }
        j->n = a->count;
        for (unsigned i = 0; i < j->n; i++) {
                char id[SES_ID_LEN + 1];
                do
                        (void)util_random_id("ses_", id, sizeof id);
                while (ses_find(s->d, id));
                snprintf(j->sessions[i], sizeof j->sessions[i], "%s", id);
                for (unsigned k = 0; k < i; k++)
                        if (!strcmp(j->sessions[k], id))
                                i--; /* drawn twice: draw again */
        }
        snprintf(j->label, sizeof j->label, "fork of %s", src->id);
        int r = job_submit(j);
        if (r < 0) {
                act_fail(a, 500, "starting the fork: %s", strerror(-r));
                return;
        }
}

static void fork_captured(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                act_fail(a, 500, "snapshot for the fork failed: %s", j->err);
                return;
        }
        struct meta_snapshot m;
        if (snapshot_commit(s, j, META_REASON_FORK, a->label, NULL, &m) < 0) {
                act_fail(a, 500, "recording the snapshot failed: %s", merr(s->d));
                return;
        }
        source_layer_done(s, j, m.id);
        fork_from(a, &m);
}

static void run_fork(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int st = dl_action_status(DL_FORK, s->state, &why);
        if (st) {
                act_fail(a, st, "%s", why);
                return;
        }
        if (a->snap[0]) {
                struct meta_snapshot m;
                if (snapshot_of_session(s, a->snap, &m) < 0) {
                        act_fail(a, 404, "session %s has no snapshot %s", s->id, a->snap);
                        return;
                }
                fork_from(a, &m);
                return;
        }
        /* No snapshot named: now. A running session takes one; a paused one is its head. */
        if (ses_usable(s)) {
                snprintf(a->label, sizeof a->label, "fork source");
                int r = capture_begin(a, META_REASON_FORK, true, false, fork_captured);
                if (r < 0)
                        act_fail(a, 500, "starting the capture: %s", strerror(-r));
                return;
        }
        struct meta_snapshot m;
        if (s->head[0] && meta_snapshot_get(s->d->meta, s->head, &m) == 0) {
                fork_from(a, &m);
                return;
        }
        act_fail(a, s->state == META_SESSION_RECOVERING ? 503 : 409,
                 "session %s has no snapshot to fork from and no running sandbox", s->id);
}

/* ---------------- delete ---------------- */

static void delete_finish(struct action *a) {
        struct session *s = a->s;
        parked_drop(s);
        forget_unacknowledged(s);
        struct conn *c = waiter_take(&a->w);
        if (c)
                conn_reply_empty(c, 204);
        struct action *q;
        while ((q = s->queue)) {
                s->queue = q->next;
                s->n_queued--;
                struct conn *qc = waiter_take(&q->w);
                if (qc)
                        conn_reply_error(qc, 404, "session %s was deleted", s->id);
                free(q);
        }
        act_done(a);
        struct daemon *d = s->d;
        ses_free(s);
        layers_gc(d, false); /* its source layers */
}

static void delete_destroyed(struct job *j) {
        if (j->r < 0)
                log_warn("%s: %s", j->session, j->err);
        delete_finish(j->act);
}

static void run_delete(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (s->state != META_SESSION_TERMINATED) {
                if (meta_session_set_state(d->meta, s->id, 0, META_SESSION_TERMINATED, NULL) < 0 &&
                    meta_session_get(d->meta, s->id, &(struct meta_session){ 0 }) != -ENOENT) {
                        act_fail(a, 500, "recording the deletion failed: %s", merr(d));
                        return;
                }
                s->state = META_SESSION_TERMINATED;
        }
        log_info("%s: deleting (sandbox %s)", s->id, s->sbx_id[0] ? s->sbx_id : "none");
        /* The sandbox goes on the reaper thread; the answer waits for it (a 204 means
         * nothing of it is left). Its directory stays in DATA/sandboxes until then, so a
         * crash meanwhile leaves it to the start-up sweep. */
        struct job *j = s->sb && s->dir ? job_new(NULL, s, a, JOB_DESTROY, delete_destroyed) : NULL;
        if (j && (j->dir = strdup(s->dir))) {
                j->rt = s->rt;
                j->sb = ses_take_sandbox(s, 503, "session deleted");
                if (meta_sandbox_set_state(d->meta, s->sbx_id, META_SANDBOX_DESTROYED, "deleted") < 0)
                        log_warn("%s: sandbox %s state: %s", s->id, s->sbx_id, merr(d));
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
                if (wk_submit(d->reaper, &j->wj) == 0) {
                        s->job = j;
                        return;
                }
                work_destroy(j); /* could not queue it: here, then */
                delete_destroyed(j);
                job_free(j);
                return;
        }
        if (j)
                job_free(j);
        drop_sandbox(s, 503, "session deleted", META_SANDBOX_DESTROYED, "deleted");
        delete_finish(a);
}

/* ---------------- dispatcher ---------------- */

static void run_adopt_wait(struct action *a) {
        /* The sandbox was adopted in dur_load; its HELLO finishes the action. */
        a->waiting_hello = true;
        if (a->s->ready)
                start_finish(a);
}

/* A create from a snapshot: a fork record of it becomes the new session's first
 * snapshot and head, then the sandbox starts from it. */
static void create_forked(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (j->r < 0) {
                char msg[700];
                snap_err(msg, sizeof msg, "reading", a->snap, j);
                start_fail(a, "%s", msg);
                return;
        }
        struct meta_snapshot m = { .reason = META_REASON_FORK, .logical_size = j->stats.bytes_logical };
        int r = meta_new_id("snap", m.id);
        snprintf(m.session_id, sizeof m.session_id, "%s", s->id);
        snprintf(m.parent_id, sizeof m.parent_id, "%s", a->snap);
        store_hash_to_hex(&j->out[0], m.store_hash);
        store_hash_to_hex(&j->root, m.root_hash);
        snprintf(m.label, sizeof m.label, "created from %s", a->snap);
        struct meta_snapshot src;
        if (meta_snapshot_get(d->meta, a->snap, &src) == 0)
                snprintf(m.memory_hash, sizeof m.memory_hash, "%s", src.memory_hash);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 || (r = meta_snapshot_add(d->meta, &m)) < 0 ||
            (r = meta_session_set_head(d->meta, s->id, m.id)) < 0 || (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                start_fail(a, "recording the first snapshot: %s", merr(d));
                return;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->out[0];
        s->last_snapshot_ms = meta_now_ms();
        start_begin(a);
}

static void create_from_snapshot(struct action *a) {
        struct session *s = a->s;
        struct meta_snapshot src;
        struct job *j = NULL;
        if (meta_snapshot_get(s->d->meta, a->snap, &src) < 0 || !(j = job_new(NULL, s, a, JOB_FORK, create_forked)) ||
            store_hash_from_hex(src.store_hash, &j->parent) < 0) {
                if (j)
                        job_free(j);
                start_fail(a, "snapshot %s is gone", a->snap);
                return;
        }
        j->n = 1;
        snprintf(j->sessions[0], sizeof j->sessions[0], "%s", s->id);
        snprintf(j->label, sizeof j->label, "created from %s", a->snap);
        int r = job_submit(j);
        if (r < 0) {
                start_fail(a, "starting the fork: %s", strerror(-r));
                return;
        }
}

static void act_run(struct action *a) {
        switch (a->kind) {
        case ACT_START:
                if (a->why == START_ADOPT)
                        run_adopt_wait(a);
                else if (a->why == START_CREATE && a->snap[0])
                        create_from_snapshot(a);
                else
                        start_begin(a);
                return;
        case ACT_RESUME: run_resume(a); return;
        case ACT_SNAPSHOT: run_snapshot(a); return;
        case ACT_PAUSE: run_pause(a); return;
        case ACT_RESTORE: run_restore(a); return;
        case ACT_FORK: run_fork(a); return;
        case ACT_DELETE: run_delete(a); return;
        case ACT_RECOVER: run_recover(a); return;
        }
}

/* ---------------- API entry points ---------------- */

void dur_snapshot(struct session *s, struct conn *c, const char *label, bool memory) {
        struct action *a = act_new(s, ACT_SNAPSHOT, c);
        if (!a)
                return;
        a->reason = META_REASON_MANUAL;
        a->with_memory = memory;
        snprintf(a->label, sizeof a->label, "%s", label ? label : "");
        act_submit(s, a);
}

void dur_pause(struct session *s, struct conn *c) {
        struct action *a = act_new(s, ACT_PAUSE, c);
        if (a)
                act_submit(s, a);
}

void dur_resume(struct session *s, struct conn *c) {
        struct action *a = act_new(s, ACT_RESUME, c);
        if (a)
                act_submit(s, a);
}

void dur_restore(struct session *s, struct conn *c, const char *snap_id) {
        struct action *a = act_new(s, ACT_RESTORE, c);
        if (!a)
                return;
        snprintf(a->snap, sizeof a->snap, "%s", snap_id);
        act_submit(s, a);
}

void dur_fork(struct session *s, struct conn *c, const char *snap_id, unsigned count) {
        struct action *a = act_new(s, ACT_FORK, c);
        if (!a)
                return;
        snprintf(a->snap, sizeof a->snap, "%s", snap_id ? snap_id : "");
        a->count = count;
        act_submit(s, a);
}

void dur_delete(struct session *s, struct conn *c) {
        for (struct action *q = s->queue; q; q = q->next)
                if (q->kind == ACT_DELETE) {
                        /* Already on its way out. */
                        if (c)
                                conn_reply_empty(c, 204);
                        return;
                }
        struct action *a = act_new(s, ACT_DELETE, c);
        if (!a)
                return;
        /* Past the queue's limit too: a delete must always be possible. */
        act_enqueue(s, a, false);
}

/* ---------------- create ---------------- */

int dur_create(struct daemon *d, struct conn *c, const struct json *body) {
        if (d->n_sessions >= SPACED_MAX_SESSIONS) {
                conn_reply_error(c, 409, "too many sessions (%d)", SPACED_MAX_SESSIONS);
                return 0;
        }
        const struct json *v;
        char src_snap[META_ID_SIZE] = "";
        _cleanup_free_ char *tpl_from_snap = NULL;
        const struct runtime_ops *rt_from_snap = NULL;
        if ((v = json_get(body, "snapshot")) && json_type(v) != JSON_NULL) {
                const char *id = json_str(v);
                struct meta_snapshot m;
                struct meta_session ms;
                if (!id || !meta_id_valid("snap", id) || meta_snapshot_get(d->meta, id, &m) < 0 ||
                    meta_session_get(d->meta, m.session_id, &ms) < 0) {
                        conn_reply_error(c, 404, "no snapshot %.40s", id ? id : "(not a string)");
                        return 0;
                }
                if (!auth_tenant_sees(c->tenant, ms.tenant)) { /* another tenant's: as if missing */
                        meta_session_clear(&ms);
                        conn_reply_error(c, 404, "no snapshot %.40s", id);
                        return 0;
                }
                tpl_from_snap = strdup(ms.template_name);
                rt_from_snap = runtime_find(ms.runtime);
                bool gone = ms.state == META_SESSION_TERMINATED;
                meta_session_clear(&ms);
                if (gone) {
                        conn_reply_error(c, 404, "snapshot %s belongs to a deleted session", id);
                        return 0;
                }
                snprintf(src_snap, sizeof src_snap, "%s", id);
        }
        const char *tpl = tpl_from_snap ? tpl_from_snap : TEMPLATE_BASE;
        if (!tpl_from_snap && (v = json_get(body, "template")) && json_type(v) != JSON_NULL) {
                tpl = json_str(v);
                if (!tpl) {
                        conn_reply_error(c, 400, "template must be a string");
                        return 0;
                }
        }
        if (!template_name_valid(tpl)) {
                conn_reply_error(c, 400, "invalid template name \"%.80s\"", tpl);
                return 0;
        }
        if (!template_exists(d->data_dir, tpl) || tpl_building(d, tpl)) {
                conn_reply_error(c, 404, "template %s does not exist (build it: space template build %s ...)", tpl, tpl);
                return 0;
        }
        uint64_t memory = SES_DEFAULT_MEMORY;
        if ((v = json_get(body, "memory")) && json_type(v) != JSON_NULL) {
                if (util_json_size(v, &memory) < 0) {
                        if (json_type(v) == JSON_STRING)
                                conn_reply_error(c, 400, "memory: bad size \"%.40s\" (use 512M, 1.5G or bytes)", json_str(v));
                        else
                                conn_reply_error(c, 400, "memory must be a size string or a number of bytes");
                        return 0;
                }
                if (memory == 0)
                        memory = SES_DEFAULT_MEMORY;
                if (memory < (8u << 20) || memory > SES_MAX_MEMORY) {
                        conn_reply_error(c, 400, "memory must be between 8M and 1T");
                        return 0;
                }
        }
        double cpus = 0;
        if ((v = json_get(body, "cpus")) && json_type(v) != JSON_NULL) {
                if (json_type(v) != JSON_NUMBER || !(json_num(v) >= 0) || json_num(v) > SES_MAX_CPUS) {
                        conn_reply_error(c, 400, "cpus must be a number between 0 (no limit) and %g", SES_MAX_CPUS);
                        return 0;
                }
                cpus = json_num(v);
                if (cpus > 0 && cpus < 0.01) {
                        conn_reply_error(c, 400, "cpus must be at least 0.01");
                        return 0;
                }
        }
        uint32_t pids = SES_DEFAULT_PIDS;
        if ((v = json_get(body, "pids")) && json_type(v) != JSON_NULL) {
                int64_t p;
                if (json_int(v, &p) < 0 || p < 0 || p > SES_MAX_PIDS) {
                        conn_reply_error(c, 400, "pids must be an integer between 0 (default) and %u", SES_MAX_PIDS);
                        return 0;
                }
                if (p > 0)
                        pids = (uint32_t)p;
        }
        uint64_t disk = 0;
        char why_disk[512];
        int st = disk_parse_limit(d, json_get(body, "disk"), &disk, why_disk, sizeof why_disk);
        if (st) {
                conn_reply_error(c, st, "%s", why_disk);
                return 0;
        }
        /* The runtime: asked for, else the source snapshot's session's (its memory image
         * is that driver's), else the template's default, else the daemon's. */
        const struct runtime_ops *rt = rt_from_snap ? rt_from_snap : d->rt;
        char tpl_rt[META_RUNTIME_MAX + 1];
        if (!rt_from_snap && template_runtime_get(d->data_dir, tpl, tpl_rt, sizeof tpl_rt) == 0 &&
            !(rt = runtime_find(tpl_rt))) {
                conn_reply_error(c, 409, "template %s names runtime \"%s\", which this spaced does not have", tpl, tpl_rt);
                return 0;
        }
        if ((v = json_get(body, "runtime")) && json_type(v) != JSON_NULL) {
                const char *name = json_str(v);
                if (!name || !(rt = runtime_find(name))) {
                        conn_reply_error(c, 400, "unknown runtime \"%.40s\" (ns, gvisor, microvm)", name ? name : "(not a string)");
                        return 0;
                }
        }
        bool network = false;
        if ((v = json_get(body, "network")) && json_type(v) != JSON_NULL) {
                if (json_type(v) != JSON_BOOL) {
                        conn_reply_error(c, 400, "network must be true or false");
                        return 0;
                }
                network = json_is_true(v);
        }
        if (network && (rt == &rt_ns_ops || rt == &rt_gvisor_ops)) {
                conn_reply_error(c, 400, "creating the sandbox failed: %s: network access is not implemented yet (loopback only)",
                                 rt->name);
                return 0;
        }
        int64_t interval = SES_DEFAULT_INTERVAL_MS;
        if ((v = json_get(body, "snapshot_interval_ms")) && json_type(v) != JSON_NULL) {
                if (json_int(v, &interval) < 0 || interval < 0 || interval > SES_MAX_INTERVAL_MS ||
                    (interval > 0 && interval < SES_MIN_INTERVAL_MS)) {
                        conn_reply_error(c, 400, "snapshot_interval_ms must be 0 (off) or between %d and %lld",
                                         SES_MIN_INTERVAL_MS, (long long)SES_MAX_INTERVAL_MS);
                        return 0;
                }
        }
        int64_t retention = SES_DEFAULT_RETENTION;
        if ((v = json_get(body, "retention")) && json_type(v) != JSON_NULL) {
                if (json_int(v, &retention) < 0 || retention < 1 || retention > SES_MAX_RETENTION) {
                        conn_reply_error(c, 400, "retention must be an integer between 1 and %u", SES_MAX_RETENTION);
                        return 0;
                }
        }
        const struct json *envj = json_get(body, "env");
        char **env = NULL;
        size_t n_env = 0;
        const char *why = "bad env";
        int r = ses_parse_env(envj, &env, &n_env, &why);
        if (r < 0) {
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "%s", why);
                return 0;
        }
        _cleanup_free_ char *env_json = NULL;
        if (envj && json_type(envj) == JSON_OBJECT) {
                struct buf e = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&e);
                json_w_value(&w, envj);
                if (!w.err && buf_putc(&e, '\0') == 0)
                        env_json = strdup(e.data);
                buf_free(&e);
        }

        char id[SES_ID_LEN + 1], token[DL_TOKEN_LEN + 1];
        do
                r = util_random_id("ses_", id, sizeof id);
        while (r == 0 && ses_find(d, id));
        if (r == 0)
                r = dl_token_new(token);
        struct meta_session ms = { .state = META_SESSION_CREATING, .network = network,
                                   .env_json = env_json, .snapshot_interval_ms = interval,
                                   .retention_keep = (uint32_t)retention };
        snprintf(ms.id, sizeof ms.id, "%s", id);
        snprintf(ms.tenant, sizeof ms.tenant, "%s", c->tenant);
        snprintf(ms.template_name, sizeof ms.template_name, "%s", tpl);
        snprintf(ms.runtime, sizeof ms.runtime, "%s", rt->name);
        ms.limits = (struct meta_limits){ .memory_bytes = memory, .cpu_millis = (uint32_t)(cpus * 1000 + 0.5), .pids = pids,
                                          .disk_bytes = disk };
        struct buf ev = BUF_INIT(0);
        if (src_snap[0]) {
                struct meta_snapshot m;
                if (meta_snapshot_get(d->meta, src_snap, &m) == 0)
                        snprintf(ms.parent_session, sizeof ms.parent_session, "%s", m.session_id);
                snprintf(ms.source_snapshot, sizeof ms.source_snapshot, "%s", src_snap);
        }
        if (r == 0)
                r = meta_token_hash(token, ms.token_hash);
        if (r == 0)
                r = dl_lifecycle_json(&ev, "created", src_snap, src_snap[0] ? "snapshot" : "template");
        /* Relaxed: the client hears of the session only once it runs (start_finish, a
         * full commit); until then a restart forgets it. */
        relaxed(d, true);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 || (r = meta_session_create(d->meta, &ms)) < 0 ||
            (r = meta_event_append(d->meta, id, "lifecycle", ev.data, ev.len, NULL)) < 0 ||
            (r = meta_commit(d->meta)) < 0) {
                rollback(d);
                relaxed(d, false);
                buf_free(&ev);
                for (size_t i = 0; i < n_env; i++)
                        free(env[i]);
                free(env);
                conn_reply_error(c, 500, "recording the session: %s", merr(d));
                return 0;
        }
        relaxed(d, false);
        buf_free(&ev);
        struct session *s;
        if ((r = ses_alloc(d, id, &s)) < 0) {
                for (size_t i = 0; i < n_env; i++)
                        free(env[i]);
                free(env);
                (void)meta_session_delete(d->meta, id);
                return r;
        }
        s->rt = rt;
        s->env = env;
        s->n_env = n_env;
        s->memory = memory;
        s->cpus = cpus;
        s->pids = pids;
        s->disk = disk;
        s->network = network;
        s->state = META_SESSION_CREATING;
        s->created_at = time(NULL);
        s->template = strdup(tpl);
        s->interval_ms = interval;
        s->retention = (uint32_t)retention;
        snprintf(s->token_hash, sizeof s->token_hash, "%s", ms.token_hash);
        snprintf(s->tenant, sizeof s->tenant, "%s", ms.tenant);
        snprintf(s->parent_session, sizeof s->parent_session, "%s", ms.parent_session);
        snprintf(s->source_snapshot, sizeof s->source_snapshot, "%s", ms.source_snapshot);
        struct action *a = act_new(s, ACT_START, c);
        if (!a || !s->template) {
                free(a);
                (void)meta_session_delete(d->meta, id);
                ses_free(s);
                return -ENOMEM;
        }
        a->why = START_CREATE;
        snprintf(a->token, sizeof a->token, "%s", token);
        snprintf(a->snap, sizeof a->snap, "%s", src_snap);
        act_enqueue(s, a, false);
        return 0;
}

/* ---------------- GC ---------------- */

static void gc_done(struct job *j) {
        struct daemon *d = j->d;
        d->gc_running = false;
        d->next_gc_ms = util_now_ms() + SPACED_GC_INTERVAL_MS;
        if (j->r < 0)
                log_warn("gc failed: %s", j->err);
        else
                log_info("gc: %" PRIu64 " objects (%" PRIu64 " bytes) removed, %" PRIu64 " kept, %" PRIu64
                         " records removed",
                         j->gc.objects_removed, j->gc.bytes_removed, j->gc.objects_kept, j->gc.snapshots_removed);
        for (size_t i = 0; i < d->n_gc_waiters; i++) {
                struct conn *c = waiter_take(d->gc_waiters[i]);
                free(d->gc_waiters[i]);
                if (!c)
                        continue;
                if (j->r < 0) {
                        conn_reply_error(c, 500, "gc failed: %s", j->err);
                        continue;
                }
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_key(&w, "objects_removed");
                json_w_uint(&w, j->gc.objects_removed);
                json_w_key(&w, "bytes_freed");
                json_w_uint(&w, j->gc.bytes_removed);
                json_w_key(&w, "objects_kept");
                json_w_uint(&w, j->gc.objects_kept);
                json_w_obj_end(&w);
                conn_reply_json(c, 200, &b);
                buf_free(&b);
        }
        d->n_gc_waiters = 0;
}

void dur_gc(struct daemon *d, struct conn *c) {
        if (c) {
                if (d->n_gc_waiters >= ELEMENTSOF(d->gc_waiters)) {
                        conn_reply_error(c, 409, "too many gc requests waiting");
                        return;
                }
                struct conn_waiter *w = calloc(1, sizeof *w);
                if (!w) {
                        conn_reply_error(c, 500, "out of memory");
                        return;
                }
                waiter_set(w, c);
                d->gc_waiters[d->n_gc_waiters++] = w;
        }
        if (d->gc_running)
                return; /* answered when the running one ends */
        layers_gc(d, false);
        /* Records a worker committed to the store but the loop has not put into meta yet
         * must survive: keep everything committed since the oldest such job started. The
         * time is taken before the live set is read (docs/store.md, GC contract). */
        int64_t keep = now_ns();
        for (struct session *s = d->sessions; s; s = s->next)
                if (s->job && s->job->start_ns < keep)
                        keep = s->job->start_ns;
        struct job *j = job_new(d, NULL, NULL, JOB_GC, gc_done);
        if (!j) {
                log_warn("gc: out of memory");
                return;
        }
        j->since_ns = keep;
        if (meta_snapshot_live_hashes(d->meta, &j->live, &j->n_live) < 0) {
                log_warn("gc: reading the live set: %s", merr(d));
                j->r = -EIO;
                snprintf(j->err, sizeof j->err, "reading the live set: %.200s", merr(d));
                d->gc_running = true;
                gc_done(j);
                job_free(j);
                return;
        }
        d->gc_running = true;
        if (wk_submit(d->workers, &j->wj) < 0) {
                j->r = -EAGAIN;
                snprintf(j->err, sizeof j->err, "no worker thread");
                gc_done(j);
                job_free(j);
        }
}

/* ---------------- periodic work ---------------- */

void dur_tick(struct daemon *d) {
        uint64_t now = util_now_ms();
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->freed || s->act || s->queue)
                        continue;
                if (s->state == META_SESSION_RUNNING && ses_usable(s) && s->interval_ms > 0 &&
                    now >= s->next_rolling_ms) {
                        s->next_rolling_ms = now + (uint64_t)s->interval_ms;
                        struct action *a = act_new(s, ACT_SNAPSHOT, NULL);
                        if (a) {
                                a->reason = META_REASON_ROLLING;
                                a->internal = true;
                                act_enqueue(s, a, false);
                        }
                } else if (s->state == META_SESSION_RECOVERING && !s->sb && s->recover_at_ms && now >= s->recover_at_ms) {
                        s->recover_at_ms = 0;
                        recover_queue(s, NULL, s->error ? s->error : "retrying the recovery", false);
                }
        }
        if (d->next_gc_ms && now >= d->next_gc_ms && !d->gc_running)
                dur_gc(d, NULL);
}

/* ---------------- open, load, shutdown ---------------- */

static void job_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, job_src));
        wk_dispatch(d->workers);
}

static void starter_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, starter_src));
        wk_dispatch(d->starter);
}

static void reaper_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, reaper_src));
        wk_dispatch(d->reaper);
}

int dur_open(struct daemon *d) {
        _cleanup_free_ char *mpath = NULL, *spath = NULL;
        if (asprintf(&mpath, "%s/meta.db", d->data_dir) < 0 || asprintf(&spath, "%s/store", d->data_dir) < 0)
                return -ENOMEM;
        int r = meta_open(mpath, NULL, &d->meta);
        if (r < 0) {
                log_error("metadata store %s: %s", mpath, strerror(-r));
                return r;
        }
        r = store_open(spath, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &d->store);
        if (r < 0) {
                log_error("snapshot store %s: %s %s", spath, strerror(-r), store_error_detail());
                return r;
        }
        r = wk_new(SPACED_WORKERS, &d->workers);
        if (r < 0)
                return r;
        d->job_src.fd = wk_fd(d->workers);
        d->job_src.cb = job_event;
        r = loop_add(d->loop, &d->job_src, EPOLLIN);
        if (r < 0)
                return r;
        if ((r = wk_new(1, &d->reaper)) < 0)
                return r;
        d->reaper_src.fd = wk_fd(d->reaper);
        d->reaper_src.cb = reaper_event;
        if ((r = loop_add(d->loop, &d->reaper_src, EPOLLIN)) < 0)
                return r;
        if ((r = wk_new(SPACED_STARTERS, &d->starter)) < 0)
                return r;
        d->starter_src.fd = wk_fd(d->starter);
        d->starter_src.cb = starter_event;
        if ((r = loop_add(d->loop, &d->starter_src, EPOLLIN)) < 0)
                return r;
        d->next_gc_ms = util_now_ms() + SPACED_GC_INTERVAL_MS;
        return 0;
}

void dur_close(struct daemon *d) {
        if (d->starter) {
                wk_drain(d->starter);
                loop_del(d->loop, &d->starter_src);
                d->starter = wk_free(d->starter);
        }
        if (d->reaper) {
                wk_drain(d->reaper);
                loop_del(d->loop, &d->reaper_src);
                d->reaper = wk_free(d->reaper);
        }
        if (d->workers) {
                wk_drain(d->workers);
                loop_del(d->loop, &d->job_src);
                d->workers = wk_free(d->workers);
        }
        d->store = store_free(d->store);
        d->meta = meta_free(d->meta);
}

static int env_from_text(const char *text, char ***ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        if (!text || !*text)
                return 0;
        _cleanup_json_ struct json *j = NULL;
        if (json_parse(text, strlen(text), &j, NULL, 0) < 0)
                return -EINVAL;
        const char *why;
        return ses_parse_env(j, ret, ret_n, &why);
}

/* A session of meta back in memory, without a sandbox. */
static int load_session(struct daemon *d, const struct meta_session *ms, struct session **ret) {
        struct session *s;
        int r = ses_alloc(d, ms->id, &s);
        if (r < 0)
                return r;
        s->template = strdup(ms->template_name);
        if (ms->runtime[0]) {
                s->rt = runtime_find(ms->runtime);
                if (!s->rt) {
                        log_warn("%s: unknown runtime %s; using %s", ms->id, ms->runtime, d->rt->name);
                        s->rt = d->rt;
                }
        }
        s->memory = ms->limits.memory_bytes ? ms->limits.memory_bytes : SES_DEFAULT_MEMORY;
        s->cpus = ms->limits.cpu_millis / 1000.0;
        s->pids = ms->limits.pids ? ms->limits.pids : SES_DEFAULT_PIDS;
        s->disk = ms->limits.disk_bytes;
        s->network = ms->network;
        s->state = ms->state;
        s->created_at = (time_t)(ms->created_ms / 1000);
        s->interval_ms = ms->snapshot_interval_ms;
        s->retention = ms->retention_keep;
        snprintf(s->head, sizeof s->head, "%s", ms->head_snapshot);
        snprintf(s->parent_session, sizeof s->parent_session, "%s", ms->parent_session);
        snprintf(s->source_snapshot, sizeof s->source_snapshot, "%s", ms->source_snapshot);
        snprintf(s->token_hash, sizeof s->token_hash, "%s", ms->token_hash);
        snprintf(s->tenant, sizeof s->tenant, "%s", ms->tenant);
        if (ms->error)
                s->error = strdup(ms->error);
        if (env_from_text(ms->env_json, &s->env, &s->n_env) < 0)
                log_warn("%s: stored env unreadable; starting without it", s->id);
        if (s->head[0]) {
                struct meta_snapshot m;
                if (meta_snapshot_get(d->meta, s->head, &m) == 0 && store_hash_from_hex(m.store_hash, &s->head_hash) == 0)
                        s->last_snapshot_ms = m.time_ms;
                else {
                        log_warn("%s: head snapshot %s unreadable; recovering from the template", s->id, s->head);
                        s->head[0] = '\0';
                }
        }
        struct meta_sandbox *sbs = NULL;
        size_t n = 0;
        if (meta_sandbox_list_session(d->meta, s->id, &sbs, &n) == 0) {
                for (size_t i = 0; i < n; i++)
                        if (sbs[i].state == META_SANDBOX_DEAD)
                                s->recoveries++;
                free(sbs);
        }
        if (!s->template) {
                ses_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

/* Re-attaches the sandbox meta names for s, if it still runs. */
static int adopt_sandbox(struct session *s, const char *sbx) {
        struct daemon *d = s->d;
        if (!s->rt->adopt)
                return -EOPNOTSUPP;
        if (strlen(sbx) > SES_ID_LEN)
                return -EINVAL;
        struct meta_sandbox mb;
        int r = meta_sandbox_get(d->meta, sbx, &mb);
        if (r < 0)
                return r;
        if (mb.init_pid <= 0)
                return -ESRCH;
        _cleanup_free_ char *dir = disk_sandbox_dir_find(d, sbx), *run = NULL, *upper = NULL;
        if (!dir || asprintf(&run, "%s/run", dir) < 0 || asprintf(&upper, "%s/upper", dir) < 0)
                return -ENOMEM;
        struct rt_spec spec = { .id = sbx, .run_dir = run, .upper_dir = upper };
        r = s->rt->adopt(&spec, (pid_t)mb.init_pid, &s->sb);
        if (r < 0) {
                s->sb = NULL;
                return r;
        }
        memcpy(s->sbx_id, sbx, strlen(sbx) + 1); /* checked on entry */
        s->dir = TAKE_PTR(dir);
        /* A daemon killed during a capture leaves the sandbox frozen. */
        if (s->rt->thaw(s->sb) < 0)
                log_warn("%s: thawing adopted sandbox %s: %s", s->id, sbx, runtime_last_error());
        r = ses_watch(s);
        if (r < 0) {
                ses_drop_sandbox(s, 503, "adopt failed");
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
                return r;
        }
        s->adopting = true;
        /* Unknown what changed while nobody watched: the next rolling check captures. */
        s->clean_since_ns = 0;
        return 0;
}

int dur_load(struct daemon *d) {
        struct meta_session *v = NULL;
        size_t n = 0;
        int r = meta_session_list(d->meta, NULL, &v, &n);
        if (r < 0) {
                log_error("reading sessions: %s", merr(d));
                return r;
        }
        unsigned adopted = 0, recovering = 0, paused = 0, dropped = 0;
        for (size_t i = 0; i < n; i++) {
                const struct meta_session *ms = &v[i];
                if (ms->state == META_SESSION_TERMINATED || ms->state == META_SESSION_CREATING) {
                        /* Deleted, or never acknowledged as created: finish removing it. */
                        if (ms->sandbox_id[0])
                                reclaim_dir(d, ms->sandbox_id);
                        struct session *s;
                        if (load_session(d, ms, &s) == 0) {
                                forget_unacknowledged(s);
                                ses_free(s);
                        }
                        dropped++;
                        continue;
                }
                struct session *s;
                if ((r = load_session(d, ms, &s)) < 0) {
                        log_error("%s: cannot load: %s", ms->id, strerror(-r));
                        continue;
                }
                if (ms->state == META_SESSION_PAUSED) {
                        paused++;
                        continue;
                }
                /* running or recovering */
                if (ms->sandbox_id[0] && (r = sandbox_layer_load(s, ms->sandbox_id)) < 0)
                        log_warn("%s: which snapshot layer sandbox %s lies on is unknown (%s): recovering it", s->id,
                                 ms->sandbox_id, strerror(-r));
                if (ms->sandbox_id[0] && r == 0 && (r = adopt_sandbox(s, ms->sandbox_id)) == 0) {
                        struct action *a = act_new(s, ACT_START, NULL);
                        if (a) {
                                a->why = START_ADOPT;
                                a->internal = true;
                                act_enqueue(s, a, false);
                        }
                        adopted++;
                        continue;
                }
                struct meta_sandbox mb = { 0 };
                bool on_purpose = ms->sandbox_id[0] == '\0' ||
                                  (meta_sandbox_get(d->meta, ms->sandbox_id, &mb) == 0 && mb.state == META_SANDBOX_DESTROYED);
                char why[256];
                if (ms->sandbox_id[0])
                        snprintf(why, sizeof why, "sandbox %s did not survive the daemon restart (%s)", ms->sandbox_id,
                                 r == -ESRCH ? "its init is gone" : strerror(-r));
                else
                        snprintf(why, sizeof why, "the daemon stopped the sandbox");
                recover_queue(s, ms->sandbox_id, why, on_purpose && !ms->sandbox_id[0]);
                recovering++;
        }
        meta_sessions_free(v, n);

        parked_sweep(d);
        layers_gc(d, true);

        /* Directories a crash left in the trash, and sandboxes on disk that no session
         * holds now: in DATA and, with the quota volume, on it. */
        unsigned reclaimed = 0;
        const char *roots[] = { d->data_dir, d->layer_dir && strcmp(d->layer_dir, d->data_dir) ? d->layer_dir : NULL };
        for (size_t i = 0; i < ELEMENTSOF(roots) && roots[i]; i++) {
                _cleanup_free_ char *trash = NULL;
                if (asprintf(&trash, "%s/trash", roots[i]) >= 0)
                        (void)rt_rm_rf(trash);
                int r2 = reclaim_strays(d, roots[i]);
                if (r2 < 0)
                        return r2;
                reclaimed += (unsigned)r2;
        }
        log_info("sessions: %u re-attached, %u to recover, %u paused, %u unfinished removed, %u stray sandbox(es) reclaimed",
                 adopted, recovering, paused, dropped, reclaimed);
        return 0;
}

/* Removes the sandboxes under root/sandboxes that no session holds: what a crash left
 * behind. Returns how many. */
static int reclaim_strays(struct daemon *d, const char *root) {
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/sandboxes", root) < 0)
                return -ENOMEM;
        _cleanup_closedir_ DIR *dp = opendir(dir);
        int reclaimed = 0;
        struct dirent *de;
        while (dp && (de = readdir(dp))) {
                if (de->d_name[0] == '.')
                        continue;
                bool held = false;
                for (struct session *s = d->sessions; s && !held; s = s->next) {
                        if (!strcmp(s->sbx_id, de->d_name))
                                held = true;
                        for (struct action *q = s->queue; q && !held; q = q->next)
                                if (q->kind == ACT_RECOVER && !strcmp(q->lost_sbx, de->d_name))
                                        held = true; /* the recovery reclaims it, and logs it */
                }
                if (held)
                        continue;
                reclaim_dir(d, de->d_name);
                reclaimed++;
        }
        return reclaimed;
}

static bool settling(struct daemon *d) {
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->freed)
                        continue;
                if (s->kick_pending || (s->act && (s->act->kind == ACT_START || s->act->kind == ACT_RECOVER)))
                        return true;
                for (struct action *q = s->queue; q; q = q->next)
                        if (q->kind == ACT_START || q->kind == ACT_RECOVER)
                                return true;
        }
        return false;
}

void dur_settle(struct daemon *d, int timeout_ms) {
        uint64_t end = util_now_ms() + (uint64_t)timeout_ms;
        while (settling(d) && util_now_ms() < end)
                (void)loop_run_once(d->loop, 50);
}

/* SIGTERM: sessions stay durable, the host is left clean. Every running session that
 * changed since its last snapshot gets one (rolling), then its sandbox is destroyed; the
 * next start recovers it from that snapshot ("restarted" in its log). A session whose
 * snapshot fails keeps its sandbox, which the next start re-attaches. */
void dur_shutdown(struct daemon *d) {
        /* Actions in progress finish their store work first (answers to clients that are
         * still connected go out with the loop's last run). */
        wk_drain(d->starter); /* sandboxes being made are made (and re-attached next start) */
        wk_drain(d->workers);
        wk_drain(d->reaper); /* deletes under way finish and answer */
        unsigned kept = 0, stopped = 0;
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->freed || !s->sb)
                        continue;
                bool ok = true;
                if (ses_usable(s)) {
                        struct action a = { .s = s, .kind = ACT_SNAPSHOT, .reason = META_REASON_ROLLING };
                        struct job *j = job_new(NULL, s, &a, JOB_CAPTURE, NULL);
                        if (j && asprintf(&j->dir, "%s/upper", s->dir) >= 0) {
                                j->rt = s->rt;
                                j->sb = s->sb;
                                j->thaw = false;
                                j->check_dirty = true;
                                j->since_ns = s->clean_since_ns;
                                j->has_parent = s->head[0] != '\0';
                                j->parent = s->head_hash;
                                j->sreason = STORE_REASON_ROLLING;
                                /* A runtime with memory snapshots keeps the processes across
                                 * the restart: checkpointed like a pause, whatever changed. */
                                if (s->rt->memory_snapshots && s->rt->checkpoint &&
                                    asprintf(&j->mem_dir, "%s/checkpoint", s->dir) >= 0) {
                                        j->memory = true;
                                        j->check_dirty = false;
                                        ses_quiesce(s, 503, "the daemon is shutting down");
                                }
                                work_capture(j);
                                if (j->memory)
                                        log_info("%s: memory at shutdown: %s", s->id,
                                                 j->has_memory ? "checkpointed" : j->mem_err);
                                if (j->r < 0 || (j->dirty && snapshot_commit(s, j, META_REASON_ROLLING, "spaced stopped",
                                                                             NULL, NULL) < 0)) {
                                        log_warn("%s: final snapshot failed (%s): its sandbox is left running", s->id,
                                                 j->r < 0 ? j->err : merr(d));
                                        (void)s->rt->thaw(s->sb);
                                        ok = false;
                                }
                        } else {
                                ok = false;
                        }
                        if (j)
                                job_free(j);
                } else {
                        /* Starting, re-attaching or recovering: left as it is; the next start
                         * re-attaches or reclaims it. */
                        ok = false;
                }
                if (!ok) {
                        ses_fail_ops(s, 503, "the daemon is shutting down");
                        ses_unwatch_keep(s);
                        kept++;
                        continue;
                }
                if (meta_session_set_sandbox(d->meta, s->id, NULL) < 0)
                        log_warn("%s: %s", s->id, merr(d));
                drop_sandbox(s, 503, "the daemon is shutting down", META_SANDBOX_DESTROYED, "spaced stopped");
                stopped++;
        }
        if (stopped || kept)
                log_info("shutdown: %u sandbox(es) snapshotted and stopped, %u left running for the next start", stopped,
                         kept);
        /* Actions that did not get to run: their clients hear it; the next start resumes
         * whatever meta says (a create not acknowledged is removed then). */
        for (struct session *s = d->sessions; s; s = s->next) {
                struct action *q;
                while ((q = s->queue)) {
                        s->queue = q->next;
                        s->n_queued--;
                        struct conn *c = waiter_take(&q->w);
                        if (c)
                                conn_reply_error(c, 503, "the daemon is shutting down");
                        free(q);
                }
                if (s->act) {
                        struct conn *c = waiter_take(&s->act->w);
                        if (c)
                                conn_reply_error(c, 503, "the daemon is shutting down");
                        free(s->act);
                        s->act = NULL;
                }
        }
}
