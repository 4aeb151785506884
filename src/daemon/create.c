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
        dur_relaxed(d, true);
        if (r < 0 || (r = meta_begin(d->meta)) < 0 || (r = meta_session_create(d->meta, &ms)) < 0 ||
            (r = meta_event_append(d->meta, id, "lifecycle", ev.data, ev.len, NULL)) < 0 ||
            (r = meta_commit(d->meta)) < 0) {
                dur_rollback(d);
                dur_relaxed(d, false);
                buf_free(&ev);
                for (size_t i = 0; i < n_env; i++)
                        free(env[i]);
                free(env);
                conn_reply_error(c, 500, "recording the session: %s", dur_merr(d));
                return 0;
        }
        dur_relaxed(d, false);
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
