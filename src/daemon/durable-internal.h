/* The lifecycle's rooms (durable.c and the files beside it) share these: the action of a
 * session, the worker job, a fork group, and the functions one room calls in another. Not
 * for anything outside the lifecycle. */
#pragma once
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
#include "daemon/auth.h"
#include "daemon/disk.h"
#include "daemon/durable.h"
#include "daemon/layers.h"
#include "daemon/session.h"
#include "daemon/templates.h"
#include "daemon/session_rules.h"
#include "daemon/warmpool.h"
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
        struct dur_waiter *w;                 /* who waits for the answer; NULL: nobody */
        unsigned n, n_done, n_failed;
        char ids[SES_MAX_FORKS][META_ID_SIZE];
        char tokens[SES_MAX_FORKS][DL_TOKEN_LEN + 1];
        bool ok[SES_MAX_FORKS];
        char err[768];                        /* why the first child that failed did */
        char src_session[META_ID_SIZE];       /* the snapshot forked, and its session */
        char src_snap[META_ID_SIZE];
};

struct action {
        struct dur_waiter *w;                 /* who waits for the answer; NULL: nobody */
        struct action *next;
        struct session *s;
        enum act_kind kind;
        enum start_why why;
        enum meta_snapshot_reason reason;     /* ACT_SNAPSHOT */
        char label[SES_LABEL_MAX + 1];
        char snap[META_ID_SIZE];              /* restore / fork / create-from source */
        unsigned count;                       /* fork */
        char token[DL_TOKEN_LEN + 1];         /* create: shown once */
        char *answer_extra;                   /* create: members added to the answer (ports' tokens) */
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
        /* metrics (metrics.h): when it was asked for, and whether it failed */
        uint64_t asked_ms;
        /* where a start's time goes (dur_mono_us; 0: not reached): asked, its sandbox
         * begun, made or taken, and its HELLO; the create's answer says (Server-Timing) */
        uint64_t t_asked_us, t_begin_us, t_sandbox_us, t_hello_us;
        bool pooled;
        bool failed;
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




/* durable.c */
int64_t dur_now_ns(void);
uint64_t dur_mono_us(void);
void dur_rollback(struct daemon *d);
const char *dur_merr(struct daemon *d);
enum store_reason dur_store_reason_of(enum meta_snapshot_reason r);
void dur_relaxed(struct daemon *d, bool on);
void dur_snapshot_write_json(struct json_writer *w, const struct meta_snapshot *m, double freeze_ms);
/* The session object (plus its token, shown once at create) as the answer to *w. */
void dur_answer_session(struct dur_waiter **w, struct session *s, const char *token);
/* The same with more members ("k":v,…) after the token (NULL: none). */
void dur_answer_session_extra(struct dur_waiter **w, struct session *s, const char *token, const char *extra);
struct action *dur_act_new(struct session *s, enum act_kind kind, struct dur_waiter *w);
void dur_act_enqueue(struct session *s, struct action *a, bool front);
bool dur_recover_queued(struct session *s);
void dur_act_done(struct action *a);
/* Answers every action queued behind the current one with err and msg, and drops them. */
void dur_act_cancel_queued(struct session *s, int err, const char *msg);
void dur_act_fail(struct action *a, int err, const char *fmt, ...) _printf_(3, 4);
void dur_recover_queue(struct session *s, const char *sbx, const char *why, bool on_purpose);
void dur_restore_forked(struct job *j);
int dur_snapshot_of_session(struct session *s, const char *id, struct meta_snapshot *ret);

/* fork.c */
void dur_group_child_done(struct fork_group *g, unsigned i, bool ok);
void dur_run_fork(struct action *a);
void dur_create_from_snapshot(struct action *a);

/* jobs.c */
void dur_work_destroy(struct job *j);
void dur_rm_submit(struct daemon *d, char *dir, bool subvol);
void dur_trash_dir(struct daemon *d, const char *dir);
void dur_reclaim_dir(struct daemon *d, const char *sbx);
void dur_drop_sandbox(struct session *s, const char *msg, enum meta_sandbox_state st,
                         const char *reason);
void dur_job_free(struct job *j);
struct job *dur_job_new(struct daemon *d, struct session *s, struct action *a, enum job_kind kind,
                           void (*cont)(struct job *));
int dur_job_submit(struct job *j);
bool dur_store_damaged(int r);
void dur_snap_err(char *out, size_t size, const char *what, const char *snap, const struct job *j);
void dur_work_capture(struct job *j);

/* park.c */
char *dur_parked_path(struct daemon *d, const char *ses, const char *suffix);
void dur_parked_drop(struct session *s);
bool dur_unpark_layer(struct session *s, const char *dir);
void dur_parked_sweep(struct daemon *d);
void dur_memory_event(struct session *s, const char *event, const char *snap, const struct job *j,
                         const char *err);
void dur_pause_failed(struct action *a, struct job *j, const char *what, const char *err);
/* Records a snapshot_failed event: a failed capture (rolling ones have no caller to tell). */
void dur_snapshot_failed_event(struct session *s, enum meta_snapshot_reason reason, const char *err);
void dur_run_pause(struct action *a);
void dur_run_resume(struct action *a);

/* snapshot.c */
int dur_sandbox_layer_load(struct session *s, const char *sbx);
void dur_layers_gc(struct daemon *d, bool at_start);
int dur_capture_begin(struct action *a, enum meta_snapshot_reason reason, bool thaw, bool check_dirty,
                         void (*cont)(struct job *));
int dur_snapshot_commit(struct session *s, struct job *j, enum meta_snapshot_reason reason, const char *label,
                           int (*extra)(struct session *s, const char *snap_id), struct meta_snapshot *ret);
void dur_source_layer_done(struct session *s, const struct job *j, const char *snap);
void dur_run_snapshot(struct action *a);
/* Snapshot storage limits (docs/security.md "Snapshot storage"): s->snap_bytes from meta;
 * after a snapshot that is never refused, older rolling ones make room, else an event. */
int dur_snap_usage_load(struct session *s);
void dur_snap_limit_apply(struct session *s, const char *snap);

/* start.c */
/* What the lifecycle does when a sandbox says HELLO or dies (d->ses_hooks). */
extern const struct ses_hooks dur_ses_hooks;
void dur_log_materialized(const struct session *s, const char *snap, const struct job *j);
void dur_start_begin(struct action *a);
void dur_start_finish(struct action *a);
void dur_forget_unacknowledged(struct session *s);
void dur_start_fail(struct action *a, const char *fmt, ...) _printf_(2, 3);
