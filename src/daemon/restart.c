/* The lifecycle across daemon restarts: opening meta, the store and the worker threads;
 * loading every session of meta back into memory (re-attaching sandboxes that outlived the
 * daemon, recovering the ones that did not); settling before serving; the SIGTERM
 * shutdown that takes a final snapshot of every changed session. */
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
#include "daemon/ports.h"

static int reclaim_strays(struct daemon *d, const char *root);

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
        d->ses_hooks = &dur_ses_hooks;
        _cleanup_free_ char *mpath = NULL, *spath = NULL;
        if (asprintf(&mpath, "%s/meta.db", d->data_dir) < 0 || asprintf(&spath, "%s/store", d->data_dir) < 0)
                return -ENOMEM;
        char why[1024];
        int r = util_meta_open(mpath, &d->meta, why, sizeof why);
        if (r < 0) {
                log_error("metadata store %s", why);
                return r;
        }
        /* zero limits (a daemon a test made): the defaults */
        const struct spaced_limits *l = &d->limits;
        meta_set_event_bounds(d->meta, &(struct meta_event_bounds){
                .agent_events = l->events ? l->events : LIM_EVENTS,
                .agent_bytes = l->event_bytes ? l->event_bytes : LIM_EVENT_BYTES,
                .tenant_bytes = l->tenant_event_bytes ? l->tenant_event_bytes : LIM_TENANT_EVENT_BYTES,
                .system_events = l->system_events ? l->system_events : LIM_SYSTEM_EVENTS,
        });
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
        /* The policy as stored; none (a session of before schema 4): `network` alone. A text
         * that does not read back leaves egress off (closed stays closed). */
        if (ms->network_json) {
                char err[512];
                int k = net_policy_from_text(ms->network_json, &s->net, err, sizeof err);
                if (k < 0)
                        log_warn("%s: stored network policy unreadable (%s); egress off", ms->id,
                                 k == -ENOMEM ? "out of memory" : err);
        } else
                s->net.egress = ms->network;
        if (s->net.egress && !d->net_op.egress_enabled)
                log_warn("%s: its network policy has egress, which this spaced has off: loopback only "
                         "(spaced --egress on)", ms->id);
        s->state = ms->state;
        s->created_at = (time_t)(ms->created_ms / 1000);
        s->created_ms = ms->created_ms;
        s->interval_ms = ms->snapshot_interval_ms;
        s->retention = ms->retention_keep;
        snprintf(s->head, sizeof s->head, "%s", ms->head_snapshot);
        snprintf(s->parent_session, sizeof s->parent_session, "%s", ms->parent_session);
        snprintf(s->source_snapshot, sizeof s->source_snapshot, "%s", ms->source_snapshot);
        snprintf(s->token_hash, sizeof s->token_hash, "%s", ms->token_hash);
        snprintf(s->tenant, sizeof s->tenant, "%s", ms->tenant);
        if (ms->error)
                s->error = strdup(ms->error);
        if (ms->metadata_json)
                s->metadata = strdup(ms->metadata_json);
        if (ports_load(s, ms->ports_json) < 0)
                log_warn("%s: stored ports unreadable; none are exposed", s->id);
        if (lt_from_text(ms->timeouts_json, &s->life) < 0)
                log_warn("%s: stored timeouts unreadable; it has none", s->id);
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
        if (dur_snap_usage_load(s) < 0)
                log_warn("%s: its snapshots' sizes are unreadable: %s", s->id, dur_merr(d));
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
        /* Made with --egress on, now off: nobody would keep its rules (a PUT would change
         * nothing), so it is not taken back; the recovery starts one with loopback only. */
        if (!d->net && net_lease_recorded(dir))
                return -ENOTCONN;
        struct rt_spec spec = { .id = sbx, .run_dir = run, .upper_dir = upper };
        r = s->rt->adopt(&spec, (pid_t)mb.init_pid, &s->sb);
        if (r < 0) {
                s->sb = NULL;
                return r;
        }
        memcpy(s->sbx_id, sbx, strlen(sbx) + 1); /* checked on entry */
        s->dir = TAKE_PTR(dir);
        /* Its network lease (none: made with --egress off, its own loopback netns). The
         * chain kept its rules while nobody watched; the session's policy again. */
        if (d->net) {
                struct net_lease *l = NULL;
                char err[NET_ERR_MAX] = "";
                int k = net_lease_adopt(d->net, sbx, s->dir, (pid_t)mb.init_pid, &l, err, sizeof err);
                if (k < 0 && k != -ENOENT)
                        log_warn("%s: sandbox %s's network lease: %s", s->id, sbx, err);
                else if (k == 0)
                        (void)net_session_apply(d, s);
        }
        /* A daemon killed during a capture leaves the sandbox frozen. */
        if (s->rt->thaw(s->sb) < 0)
                log_warn("%s: thawing adopted sandbox %s: %s", s->id, sbx, runtime_last_error());
        r = ses_watch(s);
        if (r < 0) {
                ses_drop_sandbox(s, "adopt failed");
                free(s->dir);
                s->dir = NULL;
                s->sbx_id[0] = '\0';
                return r;
        }
        r = ses_key_require(s);
        if (r == -ENOENT)
                /* Made by a daemon from before init keys: upgrading must not kill running
                 * sessions, so its init is taken on trust, as before (security.md). */
                log_warn("%s: sandbox %s has no init key on record (made by an older spaced): re-attached "
                         "without proof", s->id, sbx);
        else if (r < 0)
                /* Unreadable: an init that cannot prove itself is refused, until the
                 * proof deadline makes the sandbox lost. */
                log_warn("%s: sandbox %s's init key: %s; no connection can prove itself", s->id, sbx,
                         strerror(-r));
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
                log_error("reading sessions: %s", dur_merr(d));
                return r;
        }
        unsigned adopted = 0, recovering = 0, paused = 0, dropped = 0;
        for (size_t i = 0; i < n; i++) {
                const struct meta_session *ms = &v[i];
                if (ms->state == META_SESSION_TERMINATED || ms->state == META_SESSION_CREATING) {
                        /* Deleted, or never acknowledged as created: finish removing it. */
                        if (ms->sandbox_id[0])
                                dur_reclaim_dir(d, ms->sandbox_id);
                        struct session *s;
                        if (load_session(d, ms, &s) == 0) {
                                dur_forget_unacknowledged(s);
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
                if (ms->sandbox_id[0] && (r = dur_sandbox_layer_load(s, ms->sandbox_id)) < 0)
                        log_warn("%s: which snapshot layer sandbox %s lies on is unknown (%s): recovering it", s->id,
                                 ms->sandbox_id, strerror(-r));
                if (ms->sandbox_id[0] && r == 0 && (r = adopt_sandbox(s, ms->sandbox_id)) == 0) {
                        struct action *a = dur_act_new(s, ACT_START, NULL);
                        if (a) {
                                a->why = START_ADOPT;
                                a->internal = true;
                                dur_act_enqueue(s, a, false);
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
                                 r == -ESRCH      ? "its init is gone"
                                 : r == -ENOTCONN ? "it was made with --egress on, which is off now"
                                                  : strerror(-r));
                else
                        snprintf(why, sizeof why, "the daemon stopped the sandbox");
                dur_recover_queue(s, ms->sandbox_id, why, on_purpose && !ms->sandbox_id[0]);
                recovering++;
        }
        meta_sessions_free(v, n);

        dur_parked_sweep(d);
        dur_layers_gc(d, true);

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
        /* Every lease still held is adopted now: chains and veths of the others go. */
        if (d->net) {
                char err[NET_ERR_MAX] = "";
                if (net_orphans_remove(d->net, err, sizeof err) < 0)
                        log_warn("network: removing what dead sandboxes left: %s", err);
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
                dur_reclaim_dir(d, de->d_name);
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
        lifetime_flush(d);
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
                        struct job *j = dur_job_new(NULL, s, &a, JOB_CAPTURE, NULL);
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
                                        ses_quiesce(s, "the daemon is shutting down");
                                }
                                dur_work_capture(j);
                                if (j->memory)
                                        log_info("%s: memory at shutdown: %s", s->id,
                                                 j->has_memory ? "checkpointed" : j->mem_err);
                                struct meta_snapshot m;
                                if (j->r < 0 || (j->dirty && dur_snapshot_commit(s, j, META_REASON_ROLLING, "spaced stopped",
                                                                             NULL, &m) < 0)) {
                                        log_warn("%s: final snapshot failed (%s): its sandbox is left running", s->id,
                                                 j->r < 0 ? j->err : dur_merr(d));
                                        (void)s->rt->thaw(s->sb);
                                        ok = false;
                                } else if (j->dirty) {
                                        dur_snap_limit_apply(s, m.id); /* a rolling one: older ones make room */
                                }
                        } else {
                                ok = false;
                        }
                        if (j)
                                dur_job_free(j);
                } else {
                        /* Starting, re-attaching or recovering: left as it is; the next start
                         * re-attaches or reclaims it. */
                        ok = false;
                }
                if (!ok) {
                        ses_fail_ops(s, "the daemon is shutting down");
                        ses_unwatch_keep(s);
                        kept++;
                        continue;
                }
                if (meta_session_set_sandbox(d->meta, s->id, NULL) < 0)
                        log_warn("%s: %s", s->id, dur_merr(d));
                dur_drop_sandbox(s, "the daemon is shutting down", META_SANDBOX_DESTROYED, "spaced stopped");
                stopped++;
        }
        if (stopped || kept)
                log_info("shutdown: %u sandbox(es) snapshotted and stopped, %u left running for the next start", stopped,
                         kept);
        /* Actions that did not get to run: their clients hear it; the next start resumes
         * whatever meta says (a create not acknowledged is removed then). */
        for (struct session *s = d->sessions; s; s = s->next) {
                dur_act_cancel_queued(s, -EAGAIN, "the daemon is shutting down");
                if (s->act) {
                        dur_answer_error(&s->act->w, -EAGAIN, "the daemon is shutting down");
                        free(s->act);
                        s->act = NULL;
                }
        }
}
