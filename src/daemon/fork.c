/* Forks: a snapshot (the head, captured first, or a named one) becomes the first
 * snapshot of N new sessions, each started on its own; a fork group answers once all
 * children ran or failed. A create from a snapshot is a fork of one. */
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

/* ---------------- fork ---------------- */

static void group_reply(struct fork_group *g, struct daemon *d) {
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
                        ses_event(src, "lifecycle", &ev);
                buf_free(&ev);
                dur_answer_error(&g->w, -EIO, "fork failed: %s", g->err[0] ? g->err : "a new session did not start");
                free(g);
                return;
        }
        if (g->w) {
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
                dur_answer(&g->w, &b);
                buf_free(&b);
        }
        free(g);
}

static struct daemon *group_daemon;

void dur_group_child_done(struct fork_group *g, unsigned i, bool ok) {
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
        /* The children have the parent's network policy as it is now. */
        _cleanup_free_ char *net_json = NULL;
        int r = net_policy_to_text(&p->net, &net_json);
        if (r < 0 || (r = meta_begin(d->meta)) < 0)
                return r;
        struct buf ev = BUF_INIT(0);
        for (unsigned i = 0; i < g->n && r >= 0; i++) {
                struct meta_session ms = { .state = META_SESSION_CREATING, .network = p->net.egress,
                                           .network_json = net_json, .env_json = env_json, .snapshot_interval_ms = p->interval_ms,
                                           .retention_keep = p->retention, .metadata_json = p->metadata };
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
                dur_rollback(d);
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
                if (p->metadata && !(cs->metadata = strdup(p->metadata)))
                        return -ENOMEM;
                snprintf(cs->tenant, sizeof cs->tenant, "%s", p->tenant);
                cs->rt = p->rt;
                cs->memory = p->memory;
                cs->cpus = p->cpus;
                cs->pids = p->pids;
                cs->disk = p->disk;
                if ((r = net_policy_copy(&cs->net, &p->net)) < 0)
                        return r;
                cs->interval_ms = p->interval_ms;
                cs->retention = p->retention;
                cs->layer = p->layer; /* a fork of now differs from it by what p changed */
                cs->created_ms = meta_now_ms();
                cs->created_at = (time_t)(cs->created_ms / 1000);
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
                        cs->created_ms = ms.created_ms;
                        meta_session_clear(&ms);
                }
                struct meta_snapshot hm;
                if (cs->head[0] && meta_snapshot_get(d->meta, cs->head, &hm) == 0) {
                        (void)store_hash_from_hex(hm.store_hash, &cs->head_hash);
                        cs->last_snapshot_ms = hm.time_ms;
                }
                struct action *a = dur_act_new(cs, ACT_START, NULL);
                if (!a)
                        return -ENOMEM;
                a->why = START_FORK;
                a->group = g;
                a->fork_index = i;
                dur_act_enqueue(cs, a, false);
        }
        return 0;
}

static void fork_stored(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (j->r < 0) {
                char msg[700];
                dur_snap_err(msg, sizeof msg, "reading", a->snap, j);
                dur_act_fail(a, -EIO, "fork failed: %s", msg);
                return;
        }
        struct meta_snapshot src;
        if (meta_snapshot_get(d->meta, a->snap, &src) < 0) {
                dur_act_fail(a, -ENOENT, "snapshot %s is gone", a->snap);
                return;
        }
        struct fork_group *g = calloc(1, sizeof *g);
        if (!g) {
                dur_act_fail(a, -EIO, "out of memory");
                return;
        }
        g->n = j->n;
        snprintf(g->src_session, sizeof g->src_session, "%s", src.session_id);
        snprintf(g->src_snap, sizeof g->src_snap, "%s", src.id);
        for (unsigned i = 0; i < g->n; i++) {
                snprintf(g->ids[i], sizeof g->ids[i], "%s", j->sessions[i]);
                if (dl_token_new(g->tokens[i]) < 0) {
                        free(g);
                        dur_act_fail(a, -EIO, "no randomness for tokens");
                        return;
                }
        }
        if (fork_record(s, j, &src, g) < 0) {
                free(g);
                dur_act_fail(a, -EIO, "recording the fork failed: %s", dur_merr(d));
                return;
        }
        log_info("%s: forked %s into %u session(s)", s->id, src.id, g->n);
        group_daemon = d;
        g->w = TAKE_PTR(a->w);
        int r = children_start(s, g, &src);
        if (r < 0)
                log_warn("%s: starting fork children: %s", s->id, strerror(-r));
        dur_act_done(a);
}

static void fork_from(struct action *a, const struct meta_snapshot *src) {
        struct session *s = a->s;
        snprintf(a->snap, sizeof a->snap, "%s", src->id);
        struct job *j = dur_job_new(NULL, s, a, JOB_FORK, fork_stored);
        if (!j || store_hash_from_hex(src->store_hash, &j->parent) < 0) {
                if (j)
                        dur_job_free(j);
                dur_act_fail(a, -EIO, "snapshot %s has a bad store hash", src->id);
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
        int r = dur_job_submit(j);
        if (r < 0) {
                dur_act_fail(a, -EIO, "starting the fork: %s", strerror(-r));
                return;
        }
}

static void fork_captured(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        if (j->r < 0) {
                dur_act_fail(a, -EIO, "snapshot for the fork failed: %s", j->err);
                return;
        }
        struct meta_snapshot m;
        if (dur_snapshot_commit(s, j, META_REASON_FORK, a->label, NULL, &m) < 0) {
                dur_act_fail(a, -EIO, "recording the snapshot failed: %s", dur_merr(s->d));
                return;
        }
        dur_source_layer_done(s, j, m.id);
        dur_snap_limit_apply(s, m.id);
        fork_from(a, &m);
}

void dur_run_fork(struct action *a) {
        struct session *s = a->s;
        const char *why;
        int err = dl_action_check(DL_FORK, s->state, &why);
        if (err) {
                dur_act_fail(a, err, "%s", why);
                return;
        }
        if (a->snap[0]) {
                struct meta_snapshot m;
                if (dur_snapshot_of_session(s, a->snap, &m) < 0) {
                        dur_act_fail(a, -ENOENT, "session %s has no snapshot %s", s->id, a->snap);
                        return;
                }
                fork_from(a, &m);
                return;
        }
        /* No snapshot named: now. A running session takes one; a paused one is its head. */
        if (ses_usable(s)) {
                snprintf(a->label, sizeof a->label, "fork source");
                int r = dur_capture_begin(a, META_REASON_FORK, true, false, fork_captured);
                if (r < 0)
                        dur_act_fail(a, -EIO, "starting the capture: %s", strerror(-r));
                return;
        }
        struct meta_snapshot m;
        if (s->head[0] && meta_snapshot_get(s->d->meta, s->head, &m) == 0) {
                fork_from(a, &m);
                return;
        }
        dur_act_fail(a, s->state == META_SESSION_RECOVERING ? -EAGAIN : -EBUSY,
                 "session %s has no snapshot to fork from and no running sandbox", s->id);
}

/* A create from a snapshot: a fork record of it becomes the new session's first
 * snapshot and head, then the sandbox starts from it. */
static void create_forked(struct job *j) {
        struct action *a = j->act;
        struct session *s = a->s;
        struct daemon *d = s->d;
        if (j->r < 0) {
                char msg[700];
                dur_snap_err(msg, sizeof msg, "reading", a->snap, j);
                dur_start_fail(a, "%s", msg);
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
                dur_rollback(d);
                dur_start_fail(a, "recording the first snapshot: %s", dur_merr(d));
                return;
        }
        snprintf(s->head, sizeof s->head, "%s", m.id);
        s->head_hash = j->out[0];
        s->last_snapshot_ms = meta_now_ms();
        repl_kick(d->repl);
        dur_start_begin(a);
}

void dur_create_from_snapshot(struct action *a) {
        struct session *s = a->s;
        struct meta_snapshot src;
        struct job *j = NULL;
        if (meta_snapshot_get(s->d->meta, a->snap, &src) < 0 || !(j = dur_job_new(NULL, s, a, JOB_FORK, create_forked)) ||
            store_hash_from_hex(src.store_hash, &j->parent) < 0) {
                if (j)
                        dur_job_free(j);
                dur_start_fail(a, "snapshot %s is gone", a->snap);
                return;
        }
        j->n = 1;
        snprintf(j->sessions[0], sizeof j->sessions[0], "%s", s->id);
        snprintf(j->label, sizeof j->label, "created from %s", a->snap);
        int r = dur_job_submit(j);
        if (r < 0) {
                dur_start_fail(a, "starting the fork: %s", strerror(-r));
                return;
        }
}
