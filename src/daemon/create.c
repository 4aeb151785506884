/* A new session: checked against what this host has (templates, runtimes, the disk
 * volume, the session limit), recorded in meta, and started (start.c). */
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

/* What a create request resolves to on this host. */
struct create_plan {
        char src_snap[META_ID_SIZE];            /* "" : from a template */
        char tpl[META_NAME_MAX + 1];
        const struct runtime_ops *rt;
        uint64_t disk;
};

/* Checks q against this host; on failure answers w and returns <0. */
static int create_check(struct daemon *d, const struct ses_create_req *q, struct dur_waiter **w,
                        struct create_plan *p) {
        if (d->n_sessions >= SPACED_MAX_SESSIONS) {
                dur_answer_error(w, -EBUSY, "too many sessions (%d)", SPACED_MAX_SESSIONS);
                return -EBUSY;
        }
        const struct runtime_ops *rt_from_snap = NULL;
        const char *tpl = q->template ? q->template : TEMPLATE_BASE;
        if (q->snapshot) {
                struct meta_snapshot m;
                struct meta_session ms;
                if (meta_snapshot_get(d->meta, q->snapshot, &m) < 0 || meta_session_get(d->meta, m.session_id, &ms) < 0) {
                        dur_answer_error(w, -ENOENT, "no snapshot %.40s", q->snapshot);
                        return -ENOENT;
                }
                bool visible = auth_tenant_sees(q->tenant, ms.tenant); /* another tenant's: as if missing */
                bool gone = ms.state == META_SESSION_TERMINATED;
                snprintf(p->tpl, sizeof p->tpl, "%s", ms.template_name);
                rt_from_snap = runtime_find(ms.runtime);
                meta_session_clear(&ms);
                if (!visible) {
                        dur_answer_error(w, -ENOENT, "no snapshot %.40s", q->snapshot);
                        return -ENOENT;
                }
                if (gone) {
                        dur_answer_error(w, -ENOENT, "snapshot %s belongs to a deleted session", q->snapshot);
                        return -ENOENT;
                }
                snprintf(p->src_snap, sizeof p->src_snap, "%s", q->snapshot);
                tpl = p->tpl;
                if (!template_name_valid(tpl)) {
                        dur_answer_error(w, -EINVAL, "invalid template name \"%.80s\"", tpl);
                        return -EINVAL;
                }
        }
        if (tpl != p->tpl)
                snprintf(p->tpl, sizeof p->tpl, "%s", tpl);
        if (!template_exists(d->data_dir, p->tpl) || tpl_building(d, p->tpl)) {
                dur_answer_error(w, -ENOENT, "template %s does not exist (build it: space template build %s ...)", p->tpl,
                                 p->tpl);
                return -ENOENT;
        }
        /* The disk limit: the daemon's default, or what was asked within the volume. */
        char why[512];
        int r = disk_check_limit(d, q->disk_given, q->disk, &p->disk, why, sizeof why);
        if (r < 0) {
                dur_answer_error(w, r, "%s", why);
                return r;
        }
        /* The runtime: asked for, else the source snapshot's session's (its memory image
         * is that driver's), else the template's default, else the daemon's. */
        p->rt = rt_from_snap ? rt_from_snap : d->rt;
        char tpl_rt[META_RUNTIME_MAX + 1];
        if (!rt_from_snap && template_runtime_get(d->data_dir, p->tpl, tpl_rt, sizeof tpl_rt) == 0 &&
            !(p->rt = runtime_find(tpl_rt))) {
                dur_answer_error(w, -EBUSY, "template %s names runtime \"%s\", which this spaced does not have", p->tpl,
                                 tpl_rt);
                return -EBUSY;
        }
        if (q->runtime && !(p->rt = runtime_find(q->runtime))) {
                dur_answer_error(w, -EINVAL, "unknown runtime \"%.40s\" (ns, gvisor, microvm)", q->runtime);
                return -EINVAL;
        }
        /* The operator's policy (403) was checked by the API; a runtime without a network
         * cannot have egress. */
        if (q->net.egress && !p->rt->network) {
                dur_answer_error(w, -EOPNOTSUPP,
                                 "creating the sandbox failed: %s: network access is not implemented yet (loopback only)",
                                 p->rt->name);
                return -EOPNOTSUPP;
        }
        return 0;
}

void dur_create(struct daemon *d, struct ses_create_req *q, struct dur_waiter *w) {
        uint64_t t0_us = dur_mono_us();
        char **env = TAKE_PTR(q->env);
        size_t n_env = q->n_env;
        _cleanup_free_ char *env_json = TAKE_PTR(q->env_json);
        _cleanup_free_ char *metadata_json = TAKE_PTR(q->metadata_json);
        _cleanup_(ports_req_freep) struct ports_req *ports = TAKE_PTR(q->ports);
        _cleanup_free_ char *ports_json = ports ? ports_req_meta_json(ports) : NULL;
        _cleanup_free_ char *net_json = NULL;
        struct net_policy net = q->net;
        q->net = (struct net_policy){ 0 };
        struct create_plan p = { 0 };
        if (create_check(d, q, &w, &p) < 0) {
                util_strv_free(env, n_env);
                net_policy_clear(&net);
                return;
        }
        if (ports && !ports_json) {
                dur_answer_error(&w, -ENOMEM, "creating the session: %s", strerror(ENOMEM));
                util_strv_free(env, n_env);
                return;
        }
        char id[SES_ID_LEN + 1], token[DL_TOKEN_LEN + 1];
        int r;
        do
                r = util_random_id("ses_", id, sizeof id);
        while (r == 0 && ses_find(d, id));
        if (r == 0)
                r = dl_token_new(token);
        if (r == 0)
                r = net_policy_to_text(&net, &net_json);
        _cleanup_free_ char *timeouts_json = NULL;
        if (r == 0)
                r = lt_to_text(&q->life, &timeouts_json);
        struct meta_session ms = { .state = META_SESSION_CREATING, .network = net.egress, .network_json = net_json,
                                   .env_json = env_json, .ports_json = ports_json, .snapshot_interval_ms = q->interval_ms,
                                   .retention_keep = q->retention, .timeouts_json = timeouts_json,
                                   .metadata_json = metadata_json };
        snprintf(ms.id, sizeof ms.id, "%s", id);
        snprintf(ms.tenant, sizeof ms.tenant, "%s", q->tenant);
        snprintf(ms.template_name, sizeof ms.template_name, "%s", p.tpl);
        snprintf(ms.runtime, sizeof ms.runtime, "%s", p.rt->name);
        ms.limits = (struct meta_limits){ .memory_bytes = q->memory, .cpu_millis = (uint32_t)(q->cpus * 1000 + 0.5),
                                          .pids = q->pids, .disk_bytes = p.disk };
        struct buf ev = BUF_INIT(0);
        if (p.src_snap[0]) {
                struct meta_snapshot m;
                if (meta_snapshot_get(d->meta, p.src_snap, &m) == 0)
                        snprintf(ms.parent_session, sizeof ms.parent_session, "%s", m.session_id);
                snprintf(ms.source_snapshot, sizeof ms.source_snapshot, "%s", p.src_snap);
        }
        if (r == 0)
                r = meta_token_hash(token, ms.token_hash);
        if (r == 0)
                r = dl_lifecycle_json(&ev, "created", p.src_snap, p.src_snap[0] ? "snapshot" : "template");
        /* Relaxed: the client hears of the session only once it runs (dur_start_finish, a
         * full commit); until then a restart forgets it. */
        dur_relaxed(d, true);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 || (r = meta_session_create(d->meta, &ms)) < 0 ||
            (r = meta_event_append(d->meta, id, "lifecycle", ev.data, ev.len, NULL)) < 0 ||
            (r = meta_commit(d->meta)) < 0) {
                dur_rollback(d);
                dur_relaxed(d, false);
                buf_free(&ev);
                util_strv_free(env, n_env);
                net_policy_clear(&net);
                dur_answer_error(&w, -EIO, "recording the session: %s", dur_merr(d));
                return;
        }
        dur_relaxed(d, false);
        buf_free(&ev);
        struct session *s;
        if ((r = ses_alloc(d, id, &s)) < 0) {
                util_strv_free(env, n_env);
                net_policy_clear(&net);
                (void)meta_session_delete(d->meta, id);
                dur_answer_error(&w, r, "creating the session: %s", strerror(-r));
                return;
        }
        s->rt = p.rt;
        s->env = env;
        s->n_env = n_env;
        s->memory = q->memory;
        s->cpus = q->cpus;
        s->pids = q->pids;
        s->disk = p.disk;
        s->net = net; /* s owns it now */
        s->state = META_SESSION_CREATING;
        s->created_ms = meta_now_ms();
        s->created_at = (time_t)(s->created_ms / 1000);
        s->template = strdup(p.tpl);
        s->interval_ms = q->interval_ms;
        s->retention = q->retention;
        s->life = q->life;
        s->metadata = TAKE_PTR(metadata_json);
        s->life.saved_active_ms = s->life.active_ms;
        snprintf(s->token_hash, sizeof s->token_hash, "%s", ms.token_hash);
        snprintf(s->tenant, sizeof s->tenant, "%s", ms.tenant);
        snprintf(s->parent_session, sizeof s->parent_session, "%s", ms.parent_session);
        snprintf(s->source_snapshot, sizeof s->source_snapshot, "%s", ms.source_snapshot);
        if (ports_load(s, ports_json) < 0)
                log_warn("%s: its ports did not parse back", s->id);
        struct action *a = s->template ? dur_act_new(s, ACT_START, TAKE_PTR(w)) : NULL;
        if (!a) {
                (void)meta_session_delete(d->meta, id);
                ses_free(s);
                dur_answer_error(&w, -ENOMEM, "creating the session: %s", strerror(ENOMEM));
                return;
        }
        a->why = START_CREATE;
        a->t_asked_us = t0_us; /* the session's own record counts as the create's */
        snprintf(a->token, sizeof a->token, "%s", token);
        if (ports && !(a->answer_extra = ports_req_answer(ports, s)))
                log_warn("%s: its ports' tokens could not be written into the answer", s->id);
        snprintf(a->snap, sizeof a->snap, "%s", p.src_snap);
        dur_act_enqueue(s, a, false);
}
