/* Starting a sandbox for a session: for a create, resume, restore, recovery, fork child
 * or adopt. The writable layer comes from the head snapshot (or the pool, or is empty), the
 * runtime's create runs on a starter thread, then HELLO finishes the start: committed,
 * then answered. A failed start says why in the session's events and leaves the session
 * where it can be tried again. Recovery of a lost sandbox is here too. */
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

/* ---------------- starting a sandbox ---------------- */


static void start_created(struct action *a);

void dur_log_materialized(const struct session *s, const char *snap, const struct job *j) {
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
                dur_snap_err(msg, sizeof msg, "restoring the files of", snap, j);
                a->damaged = dur_store_damaged(j->r);
                dur_start_fail(a, "%s", msg);
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
                dur_log_materialized(s, s->head, j);
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
 * starts and says HELLO (sandbox_ready). With nothing to restore, a warm one from
 * the pool (pool.c) does: its id, directory and empty layer are what the cold path
 * below would have made. */
void dur_start_begin(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        struct wpool_sandbox ps = { 0 };
        a->t_begin_us = dur_mono_us();
        /* The pool holds sandboxes of the daemon's runtime only. */
        bool pooled = !s->head[0] && !s->sb && s->rt == d->rt &&
                      wpool_take(d->pool, &(struct wpool_want){ .template = s->template, .network = s->net.egress,
                                                              .limits = session_limits(s) }, &ps) == 0;
        /* A restore's directory, filled already (dur_restore_forked). */
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
                dur_start_fail(a, "out of memory");
                return;
        }
        bool unparked = !pooled && !ready && a->why == START_RESUME && s->head[0] && dur_unpark_layer(s, dir);
        /* On the quota volume a subvolume of its own: what a disk limit applies to. */
        if (!pooled && ((!unparked && !ready && (r = rt_volume_make_dir(dir, 0700)) < 0) ||
                        (mkdir(work, 0700) < 0 && errno != EEXIST) || mkdir(run, 0700) < 0)) {
                r = r < 0 ? r : -errno;
                (void)rt_rm_rf(dir);
                free(dir);
                dur_start_fail(a, "making the sandbox directory: %s", strerror(-r));
                return;
        }
        struct meta_sandbox mb = { .state = META_SANDBOX_STARTING };
        snprintf(mb.id, sizeof mb.id, "%s", sbx);
        snprintf(mb.session_id, sizeof mb.session_id, "%s", s->id);
        snprintf(mb.host_id, sizeof mb.host_id, DUR_HOST_ID);
        snprintf(mb.runtime, sizeof mb.runtime, "%s", s->rt->name);
        /* Known to meta before it exists: a crash from here on leaves a sandbox that the
         * next start re-attaches or reclaims, never one nobody knows. */
        dur_relaxed(d, true);
        if ((r = meta_begin(d->meta)) < 0 || (r = meta_sandbox_create(d->meta, &mb)) < 0 ||
            (r = meta_session_set_sandbox(d->meta, s->id, sbx)) < 0 || (r = meta_commit(d->meta)) < 0) {
                dur_rollback(d);
                dur_relaxed(d, false);
                pooled_drop(s, pooled, dir);
                (void)rt_rm_rf(dir);
                free(dir);
                dur_start_fail(a, "recording the sandbox: %s", dur_merr(d));
                return;
        }
        dur_relaxed(d, false);
        snprintf(s->sbx_id, sizeof s->sbx_id, "%s", sbx);
        free(s->dir);
        s->dir = dir;
        if (pooled || !s->head[0])
                s->layer = (struct layer_ref){ 0 };
        if (ready)
                s->layer = a->ready_layer;
        if (pooled) {
                a->t_sandbox_us = dur_mono_us();
                a->pooled = true;
                log_debug("%s: sandbox %s taken from the pool", s->id, sbx);
                /* its lease was closed: the taker's policy before anything of it runs */
                if (net_session_apply(d, s) < 0) {
                        dur_start_fail(a, "applying its network policy failed (see spaced's log)");
                        return;
                }
                start_watch(a);
                return;
        }
        start_memory_plan(a);
        if (!s->head[0]) {
                if (mkdir(upper, 0755) < 0) {
                        dur_start_fail(a, "making the writable layer: %s", strerror(errno));
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
        struct job *j = dur_job_new(NULL, s, a, JOB_LAYER, start_materialized);
        if (!j || (!unparked && !ready && !(j->dir = strdup(upper))) ||
            (a->want_memory && asprintf(&j->mem_dir, "%s/checkpoint", s->dir) < 0)) {
                if (j)
                        dur_job_free(j);
                dur_start_fail(a, "out of memory");
                return;
        }
        if (a->want_memory) {
                j->memory = true;
                j->memory_snap = a->memory;
        }
        j->parent = s->head_hash;
        r = dur_job_submit(j);
        if (r < 0)
                dur_start_fail(a, "starting the restore: %s", strerror(-r));
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
                dur_start_fail(a, "template %s: %s", s->template, strerror(-r));
                return;
        }
        if (!template_exists(d->data_dir, s->template)) {
                dur_start_fail(a, "template %s does not exist any more", s->template);
                return;
        }
        if (s->disk && !d->disk_quota) {
                dur_start_fail(a, "its disk limit (%" PRIu64 " bytes) cannot be enforced on this host: %s", s->disk,
                           d->disk_error);
                return;
        }
        if ((r = layer_lower(s, &lower)) < 0) {
                dur_start_fail(a, "the snapshot layer: %s", strerror(-r));
                return;
        }
        struct job *j = dur_job_new(NULL, s, a, JOB_CREATE, start_create_done);
        if (!j || asprintf(&j->upper, "%s/upper", s->dir) < 0 || asprintf(&j->work, "%s/work", s->dir) < 0 ||
            asprintf(&j->run, "%s/run", s->dir) < 0 ||
            (a->want_memory && asprintf(&j->mem_dir, "%s/checkpoint", s->dir) < 0)) {
                if (j)
                        dur_job_free(j);
                dur_start_fail(a, "out of memory");
                return;
        }
        /* With the network room: a prepared netns, its rules in place before the sandbox's
         * first process runs. */
        struct net_lease *lease = NULL;
        if (d->net && s->rt->network) {
                char err[NET_ERR_MAX] = "";
                lease = net_lease_find(d->net, s->sbx_id);
                if (!lease && (r = net_lease_new(d->net, s->sbx_id, s->dir, &lease, err, sizeof err)) < 0) {
                        dur_job_free(j);
                        dur_start_fail(a, "preparing its network: %s", err);
                        return;
                }
                if ((r = net_lease_apply(d->net, lease, &s->net, err, sizeof err)) < 0) {
                        dur_job_free(j);
                        dur_start_fail(a, "applying its network policy: %s", err);
                        return;
                }
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
                .network = lease != NULL,
                .netns_fd = lease ? net_lease_netns_fd(lease) : -1,
                .resolv_conf = lease ? net_lease_resolv_conf(lease) : NULL,
                .restore_dir = a->want_memory ? j->mem_dir : NULL,
        };
        /* The id is copied: the session's own may change before the job is done. */
        snprintf(j->label, sizeof j->label, "%s", s->sbx_id);
        j->spec.id = j->label;
        j->create_t0_ms = util_now_ms();
        if ((r = wk_submit(d->starter, &j->wj)) < 0) {
                dur_job_free(j);
                dur_start_fail(a, "starting the sandbox: %s", strerror(-r));
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
                dur_memory_event(s, a->want_memory ? "restored" : "booted", s->head, NULL,
                             a->want_memory ? NULL : a->memory_err);
        if (j->r < 0) {
                dur_start_fail(a, "creating the sandbox failed: %s", j->err);
                return;
        }
        s->sb = TAKE_PTR(j->sb);
        a->t_sandbox_us = dur_mono_us();
        if (a->want_memory)
                log_info("%s: processes of %s restored in %" PRIu64 " ms", s->id, s->head, util_now_ms() - j->create_t0_ms);
        /* The layer holds exactly the head snapshot up to now (create only set the owner
         * of its root): later changes are what the next rolling snapshot looks for. */
        s->clean_since_ns = dur_now_ns();
        log_debug("%s: sandbox %s made in %" PRIu64 " ms", s->id, s->sbx_id, util_now_ms() - j->create_t0_ms);
        start_watch(a);
}

/* s->sb runs: wait for its HELLO. */
static void start_watch(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        int r = ses_watch(s);
        if (r < 0) {
                dur_start_fail(a, "watching the sandbox: %s", strerror(-r));
                return;
        }
        r = ses_key_give(s);
        if (r < 0) {
                dur_start_fail(a, "giving space-init its key: %s", strerror(-r));
                return;
        }
        dur_relaxed(d, true);
        if (meta_sandbox_set_pid(d->meta, s->sbx_id, (int32_t)s->init_pid) < 0)
                log_warn("%s: recording init pid: %s", s->id, dur_merr(d));
        dur_relaxed(d, false);
        a->waiting_hello = true;
}


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
/* Server-Timing of a create's answer (W3C Server Timing): session (its record checked and
 * committed, until its start begins), sandbox (taken from the pool, or
 * made: desc says which), hello (until its init said HELLO), commit (the running state
 * made durable), total. Milliseconds. */
static void start_timing(const struct action *a, char *out, size_t n) {
        uint64_t now = dur_mono_us();
        if (!a->t_begin_us || !a->t_sandbox_us || !a->t_hello_us) {
                *out = '\0';
                return;
        }
        snprintf(out, n,
                 "session;dur=%.3f, sandbox;dur=%.3f;desc=\"%s\", hello;dur=%.3f, commit;dur=%.3f, total;dur=%.3f",
                 (double)(a->t_begin_us - a->t_asked_us) / 1000, (double)(a->t_sandbox_us - a->t_begin_us) / 1000,
                 a->pooled ? "pool" : "made", (double)(a->t_hello_us - a->t_sandbox_us) / 1000,
                 (double)(now - a->t_hello_us) / 1000, (double)(now - a->t_asked_us) / 1000);
}

void dur_start_finish(struct action *a) {
        struct session *s = a->s;
        struct daemon *d = s->d;
        a->waiting_hello = false;
        a->t_hello_us = dur_mono_us();
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
                dur_rollback(d);
                buf_free(&ev);
                dur_start_fail(a, "recording the running sandbox: %s", dur_merr(d));
                return;
        }
        buf_free(&ev);
        s->state = META_SESSION_RUNNING;
        s->adopting = false;
        if (a->why != START_ADOPT)
                lifetime_touch(s); /* idle from its start; an adopted one keeps its record */
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
        switch (a->why) {
        case START_CREATE:
                if (a->w)
                        start_timing(a, a->w->timing, sizeof a->w->timing);
                dur_answer_session_extra(&a->w, s, a->token, a->answer_extra);
                break;
        case START_RESUME:
        case START_RESTORE:
                dur_answer_session(&a->w, s, NULL);
                break;
        case START_FORK:
                dur_group_child_done(a->group, a->fork_index, true);
                break;
        default:
                break;
        }
        dur_act_done(a);
}

/* Forgets a session nobody was told about (a create or fork child that failed). */
void dur_forget_unacknowledged(struct session *s) {
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
                log_warn("%s: forgetting the failed session: %s", s->id, dur_merr(d));
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
                dur_rollback(d);
                log_warn("%s: recording the failed resume: %s", s->id, dur_merr(d));
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
                dur_rollback(d);
                log_warn("%s: recording the stopped recovery: %s", s->id, dur_merr(d));
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

void dur_start_fail(struct action *a, const char *fmt, ...) {
        struct session *s = a->s;
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        a->waiting_hello = false;
        a->failed = true; /* metrics */
        log_warn("%s: starting a sandbox (%s) failed: %s", s->id, start_event_name(a->why), msg);
        dur_drop_sandbox(s, msg, META_SANDBOX_DEAD, msg);
        (void)meta_session_set_sandbox(s->d->meta, s->id, NULL);
        switch (a->why) {
        case START_CREATE:
        case START_FORK:
                dur_forget_unacknowledged(s);
                dur_answer_error(&a->w, -EIO, "the session could not start: %s", msg);
                if (a->why == START_FORK) {
                        if (!a->group->err[0])
                                snprintf(a->group->err, sizeof a->group->err, "%s", msg);
                        dur_group_child_done(a->group, a->fork_index, false);
                }
                {
                        /* Nothing may run for it any more. */
                        char why[80];
                        snprintf(why, sizeof why, "session %s failed to start", s->id);
                        dur_act_cancel_queued(s, -ENOENT, why);
                }
                dur_act_done(a);
                ses_free(s);
                return;
        case START_RESUME:
                /* Still paused at the same head: the log and the session's error say why. */
                resume_failed(s, msg);
                dur_answer_error(&a->w, -EIO, "resume failed: %s", msg);
                dur_act_done(a);
                return;
        case START_RECOVER:
                if (a->damaged && recovery_stopped(a, msg) == 0) {
                        dur_act_done(a);
                        return;
                }
                /* fall through */
        case START_RESTORE:
        case START_ADOPT:
                dur_answer_error(&a->w, -EIO, "the new sandbox failed: %s; the session is recovering", msg);
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
                dur_act_done(a);
                return;
        }
}

static void sandbox_ready(struct session *s) {
        struct action *a = s->act;
        if (a && a->kind == ACT_START && a->waiting_hello) {
                dur_start_finish(a);
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
        dur_drop_sandbox(s, why, META_SANDBOX_DEAD, why);
        (void)meta_session_set_sandbox(s->d->meta, s->id, NULL);
        dur_start_begin(a);
}

static void sandbox_lost(struct session *s, const char *why) {
        struct action *a = s->act;
        if (a && a->kind == ACT_START && a->waiting_hello) {
                if (a->why == START_RESUME && a->start_retries < DUR_RESUME_RETRIES)
                        start_retry(a, why);
                else
                        dur_start_fail(a, "%s", why);
                return;
        }
        if (!a && s->state == META_SESSION_RUNNING && !dur_recover_queued(s))
                dur_recover_queue(s, s->sbx_id, why, false);
        /* With an action running, dur_act_done() queues the recovery when it ends: the
         * action may hold the sandbox (a capture freezes it). */
}

const struct ses_hooks dur_ses_hooks = { .ready = sandbox_ready, .lost = sandbox_lost };
