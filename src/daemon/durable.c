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
#include "daemon/durable.h"
#include "daemon/durable-internal.h"
#include "daemon/replicate.h"
#include "daemon/metrics.h"
#include "daemon/util.h"

/* ---------------- small helpers ---------------- */

int64_t dur_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

uint64_t dur_mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void dur_answer(struct dur_waiter **w, const struct buf *result) {
        struct dur_waiter *t = *w;
        *w = NULL;
        if (t)
                t->ops->done(t, 0, NULL, result);
}

void dur_answer_error(struct dur_waiter **w, int err, const char *fmt, ...) {
        struct dur_waiter *t = *w;
        *w = NULL;
        if (!t)
                return;
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        t->ops->done(t, err, msg, NULL);
}

/* The message of the last failed meta call; kept across the rollback that follows it
 * (a rollback clears meta's own). */
static char rollback_err[256];

void dur_rollback(struct daemon *d) {
        const char *e = meta_last_error(d->meta);
        if (*e)
                snprintf(rollback_err, sizeof rollback_err, "%s", e);
        (void)meta_rollback(d->meta);
}

const char *dur_merr(struct daemon *d) {
        const char *e = meta_last_error(d->meta);
        return *e ? e : rollback_err;
}

enum store_reason dur_store_reason_of(enum meta_snapshot_reason r) {
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
void dur_relaxed(struct daemon *d, bool on) {
        if (meta_set_relaxed(d->meta, on) < 0)
                log_warn("meta: synchronous mode: %s", dur_merr(d));
}

/* freeze_ms < 0: unknown (the timeline; meta keeps no freeze times). */
void dur_snapshot_write_json(struct json_writer *w, const struct meta_snapshot *m, double freeze_ms) {
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
        json_w_kbool(w, "replicated", m->replicated);
        if (freeze_ms >= 0) {
                json_w_key(w, "freeze_ms");
                json_w_double(w, freeze_ms);
        }
        json_w_obj_end(w);
}

void dur_snapshot_json(struct json_writer *w, const struct meta_snapshot *m) { dur_snapshot_write_json(w, m, -1); }

void dur_answer_session(struct dur_waiter **wt, struct session *s, const char *token) {
        dur_answer_session_extra(wt, s, token, NULL);
}

void dur_answer_session_extra(struct dur_waiter **wt, struct session *s, const char *token, const char *extra) {
        if (!*wt)
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
                        buf_puts(&b, "\"");
                        if (extra && *extra) {
                                buf_putc(&b, ',');
                                buf_puts(&b, extra);
                        }
                        buf_puts(&b, "}");
                }
                buf_free(&o);
        }
        dur_answer(wt, &b);
        buf_free(&b);
}

/* ---------------- actions: queue ---------------- */

static void act_kick(struct session *s);

struct action *dur_act_new(struct session *s, enum act_kind kind, struct dur_waiter *w) {
        struct action *a = calloc(1, sizeof *a);
        if (!a) {
                dur_answer_error(&w, -ENOMEM, "out of memory");
                return NULL;
        }
        a->s = s;
        a->kind = kind;
        a->w = w;
        a->asked_ms = util_now_ms();
        a->t_asked_us = dur_mono_us();
        return a;
}

/* What an action that ends counts as in the metrics (its kind may have changed on the way:
 * a resume or recovery ends as a start); -1: nothing (a start after a restart, a fork's
 * child, a recovery that found nothing to do). */
static int act_metric(const struct action *a) {
        switch (a->kind) {
        case ACT_START:
                switch (a->why) {
                case START_CREATE: return METRICS_OP_CREATE;
                case START_RESUME: return METRICS_OP_RESUME;
                case START_RESTORE: return METRICS_OP_RESTORE;
                case START_RECOVER: return METRICS_OP_RECOVER;
                case START_FORK:
                case START_ADOPT: return -1;
                }
                return -1;
        case ACT_SNAPSHOT: return METRICS_OP_SNAPSHOT;
        case ACT_PAUSE: return METRICS_OP_PAUSE;
        case ACT_RESUME: return METRICS_OP_RESUME;
        case ACT_RESTORE: return METRICS_OP_RESTORE;
        case ACT_FORK: return METRICS_OP_FORK;
        case ACT_RECOVER: return a->failed ? METRICS_OP_RECOVER : -1;
        case ACT_DELETE: return -1;
        }
        return -1;
}

static void act_free(struct action *a) {
        /* Every path answers before it ends; never leave a client waiting for nothing. */
        dur_answer_error(&a->w, -EIO, "session %s: the request ended without an answer", a->s->id);
        free(a->ready_dir);
        if (a->answer_extra)
                explicit_bzero(a->answer_extra, strlen(a->answer_extra));
        free(a->answer_extra);
        free(a);
}

void dur_act_enqueue(struct session *s, struct action *a, bool front) {
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
                dur_answer_error(&a->w, -EBUSY, "session %s has %d requests waiting already", s->id,
                                 SES_MAX_QUEUED_ACTIONS);
                free(a);
                return false;
        }
        dur_act_enqueue(s, a, false);
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

void dur_act_cancel_queued(struct session *s, int err, const char *msg) {
        struct action *q;
        while ((q = s->queue)) {
                s->queue = q->next;
                s->n_queued--;
                dur_answer_error(&q->w, err, "%s", msg);
                free(q);
        }
}

bool dur_recover_queued(struct session *s) {
        for (struct action *q = s->queue; q; q = q->next)
                if (q->kind == ACT_RECOVER)
                        return true;
        return s->act && s->act->kind == ACT_RECOVER;
}

void dur_act_done(struct action *a) {
        struct session *s = a->s;
        int op = act_metric(a);
        if (op >= 0)
                metrics_op_done(s->d->metrics, (enum metrics_op)op, !a->failed, util_now_ms() - a->asked_ms);
        if (s->act == a)
                s->act = NULL;
        act_free(a);
        if (s->freed)
                return;
        /* The sandbox died while the action ran: recover now. */
        if (s->lost && s->state == META_SESSION_RUNNING && !dur_recover_queued(s))
                dur_recover_queue(s, s->sbx_id, s->error ? s->error : "sandbox lost", false);
        act_kick(s);
}

/* Fails an action (-errno and why, to whoever waits) and ends it. */
void dur_act_fail(struct action *a, int err, const char *fmt, ...) {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        log_warn("%s: %s", a->s->id, msg);
        dur_answer_error(&a->w, err, "%s", msg);
        a->failed = true;
        dur_act_done(a);
}

/* ---------------- recovery ---------------- */

void dur_recover_queue(struct session *s, const char *sbx, const char *why, bool on_purpose) {
        struct action *a = dur_act_new(s, ACT_RECOVER, NULL);
        if (!a)
                return;
        a->internal = true;
        a->lost_on_purpose = on_purpose;
        snprintf(a->lost_sbx, sizeof a->lost_sbx, "%s", sbx ? sbx : "");
        snprintf(a->lost_reason, sizeof a->lost_reason, "%s", why ? why : "");
        dur_act_enqueue(s, a, true);
}

static void run_recover(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (s->state == META_SESSION_PAUSED || s->state == META_SESSION_TERMINATED) {
                dur_act_done(a);
                return;
        }
        if (s->sb && !s->lost && s->ready) {
                dur_act_done(a); /* already running again (a restore got there first) */
                return;
        }
        const char *why = a->lost_reason[0] ? a->lost_reason : "sandbox lost";
        if (!a->lost_sbx[0])
                snprintf(a->lost_sbx, sizeof a->lost_sbx, "%s", s->sbx_id);
        log_warn("%s: recovering from %s (sandbox %s: %s)", s->id, s->head[0] ? s->head : "the template",
                 a->lost_sbx[0] ? a->lost_sbx : "none", why);
        if (s->state != META_SESSION_RECOVERING) {
                if (meta_session_set_state(d->meta, s->id, 0, META_SESSION_RECOVERING, why) < 0)
                        log_warn("%s: state recovering: %s", s->id, dur_merr(d));
                s->state = META_SESSION_RECOVERING;
        }
        if (s->sb || s->dir) {
                dur_drop_sandbox(s, why, a->lost_on_purpose ? META_SANDBOX_DESTROYED : META_SANDBOX_DEAD, why);
        } else if (a->lost_sbx[0]) {
                /* Held by nobody (the daemon restarted): kill whatever is left of it. */
                dur_reclaim_dir(d, a->lost_sbx);
                if (meta_sandbox_set_state(d->meta, a->lost_sbx, a->lost_on_purpose ? META_SANDBOX_DESTROYED
                                                                                     : META_SANDBOX_DEAD, why) < 0 &&
                    a->lost_sbx[0])
                        log_debug("%s: sandbox %s state: %s", s->id, a->lost_sbx, dur_merr(d));
        }
        a->why = START_RECOVER;
        a->kind = ACT_START;
        dur_start_begin(a);
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
                dur_rollback(d);
                goto out;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->out[0];
        (void)meta_snapshot_get(d->meta, m.id, &m);
        s->last_snapshot_ms = m.time_ms;
        repl_kick(d->repl);
        *ret = m;
out:
        buf_free(&ev);
        return r;
}

/* A restore's filled directory that is not going to be used. */
static void ready_drop(struct action *a) {
        if (!a->ready_dir)
                return;
        dur_trash_dir(a->s->d, a->ready_dir);
        free(a->ready_dir);
        a->ready_dir = NULL;
}

/* The store fork is made and, for a running session, the new sandbox's files are in
 * a->ready_dir: only now is anything committed or the old sandbox touched. */
void dur_restore_forked(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                char msg[700];
                dur_snap_err(msg, sizeof msg, "reading", a->snap, j);
                ready_drop(a);
                dur_act_fail(a, -EIO, "restore failed: %s; the session is unchanged", msg);
                return;
        }
        if (a->ready_dir) {
                a->ready_layer = j->layer;
                dur_log_materialized(s, a->snap, j);
        }
        struct meta_snapshot m;
        if (restore_record(s, j, a->snap, &m) < 0) {
                ready_drop(a);
                (void)store_snapshot_forget(s->d->store, &j->out[0]);
                dur_act_fail(a, -EIO, "recording the restore failed: %s", dur_merr(s->d));
                return;
        }
        log_info("%s: restored %s as %s", s->id, a->snap, m.id);
        dur_parked_drop(s); /* the layer of the old head */
        if (s->sb || s->dir) {
                ses_drop_sandbox(s, "the session was restored to another snapshot");
                if (s->dir)
                        dur_trash_dir(s->d, s->dir);
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
        }
        if (s->state == META_SESSION_PAUSED) {
                dur_answer_session(&a->w, s, NULL);
                dur_act_done(a);
                return;
        }
        a->why = START_RESTORE;
        a->kind = ACT_START;
        dur_start_begin(a);
}

/* The snapshot id of a request, checked against meta: 404 unknown or another session's. */
int dur_snapshot_of_session(struct session *s, const char *id, struct meta_snapshot *ret) {
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
        int err = dl_action_check(DL_RESTORE, s->state, &why);
        if (err) {
                dur_act_fail(a, err, "%s", why);
                return;
        }
        struct meta_snapshot m;
        int r = dur_snapshot_of_session(s, a->snap, &m);
        if (r < 0) {
                dur_act_fail(a, -ENOENT, "session %s has no snapshot %s", s->id, a->snap);
                return;
        }
        struct job *j = dur_job_new(NULL, s, a, JOB_FORK, dur_restore_forked);
        if (!j || store_hash_from_hex(m.store_hash, &j->parent) < 0) {
                if (j)
                        dur_job_free(j);
                dur_act_fail(a, -EIO, "snapshot %s has a bad store hash", a->snap);
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
                        dur_job_free(j);
                        dur_act_fail(a, -EIO, "making the sandbox directory: %s", strerror(r < 0 ? -r : ENOMEM));
                        return;
                }
        }
        if ((r = dur_job_submit(j)) < 0) {
                ready_drop(a);
                dur_act_fail(a, -EIO, "starting the restore: %s", strerror(-r));
                return;
        }
}

/* ---------------- delete ---------------- */

static void delete_finish(struct action *a) {
        struct session *s = a->s;
        dur_parked_drop(s);
        dur_forget_unacknowledged(s);
        dur_answer(&a->w, NULL);
        char msg[80];
        snprintf(msg, sizeof msg, "session %s was deleted", s->id);
        dur_act_cancel_queued(s, -ENOENT, msg);
        dur_act_done(a);
        struct daemon *d = s->d;
        ses_free(s);
        dur_layers_gc(d, false); /* its source layers */
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
                        dur_act_fail(a, -EIO, "recording the deletion failed: %s", dur_merr(d));
                        return;
                }
                s->state = META_SESSION_TERMINATED;
        }
        log_info("%s: deleting (sandbox %s)", s->id, s->sbx_id[0] ? s->sbx_id : "none");
        /* The sandbox goes on the reaper thread; the answer waits for it (a 204 means
         * nothing of it is left). Its directory stays in DATA/sandboxes until then, so a
         * crash meanwhile leaves it to the start-up sweep. */
        struct job *j = s->sb && s->dir ? dur_job_new(NULL, s, a, JOB_DESTROY, delete_destroyed) : NULL;
        if (j && (j->dir = strdup(s->dir))) {
                j->rt = s->rt;
                j->sb = ses_take_sandbox(s, "session deleted");
                if (meta_sandbox_set_state(d->meta, s->sbx_id, META_SANDBOX_DESTROYED, "deleted") < 0)
                        log_warn("%s: sandbox %s state: %s", s->id, s->sbx_id, dur_merr(d));
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
                if (wk_submit(d->reaper, &j->wj) == 0) {
                        s->job = j;
                        return;
                }
                dur_work_destroy(j); /* could not queue it: here, then */
                delete_destroyed(j);
                dur_job_free(j);
                return;
        }
        if (j)
                dur_job_free(j);
        dur_drop_sandbox(s, "session deleted", META_SANDBOX_DESTROYED, "deleted");
        delete_finish(a);
}

/* ---------------- dispatcher ---------------- */

static void run_adopt_wait(struct action *a) {
        /* The sandbox was adopted in dur_load; its HELLO finishes the action. */
        a->waiting_hello = true;
        if (a->s->ready)
                dur_start_finish(a);
}

static void act_run(struct action *a) {
        switch (a->kind) {
        case ACT_START:
                if (a->why == START_ADOPT)
                        run_adopt_wait(a);
                else if (a->why == START_CREATE && a->snap[0])
                        dur_create_from_snapshot(a);
                else
                        dur_start_begin(a);
                return;
        case ACT_RESUME: dur_run_resume(a); return;
        case ACT_SNAPSHOT: dur_run_snapshot(a); return;
        case ACT_PAUSE: dur_run_pause(a); return;
        case ACT_RESTORE: run_restore(a); return;
        case ACT_FORK: dur_run_fork(a); return;
        case ACT_DELETE: run_delete(a); return;
        case ACT_RECOVER: run_recover(a); return;
        }
}

/* ---------------- API entry points ---------------- */

void dur_snapshot(struct session *s, const char *label, bool memory, struct dur_waiter *w) {
        struct action *a = dur_act_new(s, ACT_SNAPSHOT, w);
        if (!a)
                return;
        a->reason = META_REASON_MANUAL;
        a->with_memory = memory;
        snprintf(a->label, sizeof a->label, "%s", label ? label : "");
        act_submit(s, a);
}

void dur_pause(struct session *s, struct dur_waiter *w) {
        struct action *a = dur_act_new(s, ACT_PAUSE, w);
        if (a)
                act_submit(s, a);
}

void dur_resume(struct session *s, struct dur_waiter *w) {
        struct action *a = dur_act_new(s, ACT_RESUME, w);
        if (a)
                act_submit(s, a);
}

void dur_restore(struct session *s, const char *snap_id, struct dur_waiter *w) {
        struct action *a = dur_act_new(s, ACT_RESTORE, w);
        if (!a)
                return;
        snprintf(a->snap, sizeof a->snap, "%s", snap_id);
        act_submit(s, a);
}

void dur_fork(struct session *s, const char *snap_id, unsigned count, struct dur_waiter *w) {
        struct action *a = dur_act_new(s, ACT_FORK, w);
        if (!a)
                return;
        snprintf(a->snap, sizeof a->snap, "%s", snap_id ? snap_id : "");
        a->count = count;
        act_submit(s, a);
}

void dur_delete(struct session *s, struct dur_waiter *w) {
        for (struct action *q = s->queue; q; q = q->next)
                if (q->kind == ACT_DELETE) {
                        dur_answer(&w, NULL); /* already on its way out */
                        return;
                }
        struct action *a = dur_act_new(s, ACT_DELETE, w);
        if (!a)
                return;
        /* Past the queue's limit too: a delete must always be possible. */
        dur_act_enqueue(s, a, false);
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
        for (size_t i = 0; i < d->n_gc_waiters; i++) {
                if (j->r < 0)
                        dur_answer_error(&d->gc_waiters[i], -EIO, "gc failed: %s", j->err);
                else
                        dur_answer(&d->gc_waiters[i], &b);
        }
        buf_free(&b);
        d->n_gc_waiters = 0;
}

void dur_gc(struct daemon *d, struct dur_waiter *w) {
        if (w) {
                if (d->n_gc_waiters >= ELEMENTSOF(d->gc_waiters)) {
                        dur_answer_error(&w, -EBUSY, "too many gc requests waiting");
                        return;
                }
                d->gc_waiters[d->n_gc_waiters++] = w;
        }
        if (d->gc_running)
                return; /* answered when the running one ends */
        dur_layers_gc(d, false);
        /* Records a worker committed to the store but the loop has not put into meta yet
         * must survive: keep everything committed since the oldest such job started. The
         * time is taken before the live set is read (docs/store.md, GC contract). */
        int64_t keep = dur_now_ns();
        for (struct session *s = d->sessions; s; s = s->next)
                if (s->job && s->job->start_ns < keep)
                        keep = s->job->start_ns;
        struct job *j = dur_job_new(d, NULL, NULL, JOB_GC, gc_done);
        if (!j) {
                log_warn("gc: out of memory");
                return;
        }
        j->since_ns = keep;
        if (meta_snapshot_live_hashes(d->meta, &j->live, &j->n_live) < 0) {
                log_warn("gc: reading the live set: %s", dur_merr(d));
                j->r = -EIO;
                snprintf(j->err, sizeof j->err, "reading the live set: %.200s", dur_merr(d));
                d->gc_running = true;
                gc_done(j);
                dur_job_free(j);
                return;
        }
        d->gc_running = true;
        if (wk_submit(d->workers, &j->wj) < 0) {
                j->r = -EAGAIN;
                snprintf(j->err, sizeof j->err, "no worker thread");
                gc_done(j);
                dur_job_free(j);
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
                        struct action *a = dur_act_new(s, ACT_SNAPSHOT, NULL);
                        if (a) {
                                a->reason = META_REASON_ROLLING;
                                a->internal = true;
                                dur_act_enqueue(s, a, false);
                        }
                } else if (s->state == META_SESSION_RECOVERING && !s->sb && s->recover_at_ms && now >= s->recover_at_ms) {
                        s->recover_at_ms = 0;
                        dur_recover_queue(s, NULL, s->error ? s->error : "retrying the recovery", false);
                }
        }
        if (d->next_gc_ms && now >= d->next_gc_ms && !d->gc_running)
                dur_gc(d, NULL);
}
