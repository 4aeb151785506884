/* Route handlers of the durable-session API (docs/api.md, "Lifecycle"): snapshots and
 * the timeline, pause, resume, restore, fork, the event log, connect (token check) and
 * GC. They validate the request and answer bad input at once (with nothing changed);
 * the work itself is a queued action of durable.c, which answers when it is done. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/api.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/ports.h"
#include "daemon/session.h"
#include "daemon/durable.h"
#include "daemon/metadata.h"
#include "daemon/disk.h"
#include "daemon/routes.h"
#include "daemon/http.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

int api_status_of(int err) {
        switch (-err) {
        case EINVAL: case EOPNOTSUPP: case E2BIG: return 400;
        case ENOENT: return 404;
        case EBUSY: case EEXIST: return 409;
        case EAGAIN: case ENODEV: return 503;
        case EDQUOT: return 507;
        default: return 500;
        }
}

/* A lifecycle request's answer to its HTTP client, if the client is still there: the
 * waiter hooks the connection, which tells it when the client leaves. */
struct api_wait {
        struct dur_waiter w;
        struct conn *c;        /* NULL once the client left */
        int ok_status;
};

static void api_wait_gone(struct conn *c, void *ctx) {
        (void)c;
        ((struct api_wait *)ctx)->c = NULL;
}

static const struct conn_hook_ops api_wait_hook = { .gone = api_wait_gone };

static void api_wait_done(struct dur_waiter *w, int err, const char *msg, const struct buf *result) {
        struct api_wait *aw = (struct api_wait *)w;
        struct conn *c = TAKE_PTR(aw->c);
        if (c)
                conn_clear_hook(c, aw);
        if (c) {
                if (err)
                        conn_reply_error(c, api_status_of(err), "%s", msg);
                else if (result && aw->w.timing[0]) {
                        char h[DUR_TIMING_MAX + 32];
                        snprintf(h, sizeof h, "Server-Timing: %s\r\n", aw->w.timing);
                        conn_reply_json_headers(c, aw->ok_status, result, h);
                } else if (result)
                        conn_reply_json(c, aw->ok_status, result);
                else
                        conn_reply_empty(c, aw->ok_status);
        }
        free(aw);
}

static const struct dur_waiter_ops api_wait_ops = { .done = api_wait_done };

struct dur_waiter *api_waiter(struct conn *c, int ok_status) {
        struct api_wait *aw = calloc(1, sizeof *aw);
        if (!aw) {
                conn_reply_error(c, 500, "out of memory");
                return NULL;
        }
        aw->w.ops = &api_wait_ops;
        aw->ok_status = ok_status;
        aw->c = c;
        conn_set_hook(c, &api_wait_hook, aw);
        return &aw->w;
}

/* 409/503 now when nothing is queued that could change the state before it runs. */
static bool state_ok_now(struct conn *c, struct session *s, enum dl_action a) {
        if (s->act || s->queue)
                return true; /* checked again when its turn comes */
        const char *why;
        int err = dl_action_check(a, s->state, &why);
        if (err) {
                conn_reply_error(c, api_status_of(err), "session %s: %s", s->id, why);
                return false;
        }
        return true;
}

/* ---- create ---- */

/* The fields of a create body that the request alone decides (types and ranges); what
 * depends on the host is dur_create's to check. Answers 400 itself. */
static int create_req_parse(struct conn *c, const struct json *body, struct ses_create_req *q) {
        *q = (struct ses_create_req){ .memory = SES_DEFAULT_MEMORY, .pids = SES_DEFAULT_PIDS,
                                      .interval_ms = SES_DEFAULT_INTERVAL_MS, .retention = SES_DEFAULT_RETENTION };
        snprintf(q->tenant, sizeof q->tenant, "%s", c->tenant);
        const struct json *v;
        if ((v = json_get(body, "snapshot")) && json_type(v) != JSON_NULL) {
                q->snapshot = json_str(v);
                if (!q->snapshot || !meta_id_valid("snap", q->snapshot)) {
                        conn_reply_error(c, 404, "no snapshot %.40s", q->snapshot ? q->snapshot : "(not a string)");
                        return -ENOENT;
                }
        }
        /* With a snapshot, the template is the snapshot's: a "template" field is ignored. */
        if (!q->snapshot && (v = json_get(body, "template")) && json_type(v) != JSON_NULL) {
                q->template = json_str(v);
                if (!q->template) {
                        conn_reply_error(c, 400, "template must be a string");
                        return -EINVAL;
                }
                if (!template_name_valid(q->template)) {
                        conn_reply_error(c, 400, "invalid template name \"%.80s\"", q->template);
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "memory")) && json_type(v) != JSON_NULL) {
                if (util_json_size(v, &q->memory) < 0) {
                        if (json_type(v) == JSON_STRING)
                                conn_reply_error(c, 400, "memory: bad size \"%.40s\" (use 512M, 1.5G or bytes)", json_str(v));
                        else
                                conn_reply_error(c, 400, "memory must be a size string or a number of bytes");
                        return -EINVAL;
                }
                if (q->memory == 0)
                        q->memory = SES_DEFAULT_MEMORY;
                if (q->memory < (8u << 20) || q->memory > SES_MAX_MEMORY) {
                        conn_reply_error(c, 400, "memory must be between 8M and 1T");
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "cpus")) && json_type(v) != JSON_NULL) {
                if (json_type(v) != JSON_NUMBER || !(json_num(v) >= 0) || json_num(v) > SES_MAX_CPUS) {
                        conn_reply_error(c, 400, "cpus must be a number between 0 (no limit) and %g", SES_MAX_CPUS);
                        return -EINVAL;
                }
                q->cpus = json_num(v);
                if (q->cpus > 0 && q->cpus < 0.01) {
                        conn_reply_error(c, 400, "cpus must be at least 0.01");
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "pids")) && json_type(v) != JSON_NULL) {
                int64_t p;
                if (json_int(v, &p) < 0 || p < 0 || p > SES_MAX_PIDS) {
                        conn_reply_error(c, 400, "pids must be an integer between 0 (default) and %u", SES_MAX_PIDS);
                        return -EINVAL;
                }
                if (p > 0)
                        q->pids = (uint32_t)p;
        }
        if ((v = json_get(body, "disk")) && json_type(v) != JSON_NULL) {
                if (util_json_size(v, &q->disk) < 0) {
                        conn_reply_error(c, 400, "disk must be a size (\"2G\", \"512M\") or a number of bytes");
                        return -EINVAL;
                }
                q->disk_given = true;
        }
        if ((v = json_get(body, "runtime")) && json_type(v) != JSON_NULL) {
                q->runtime = json_str(v);
                if (!q->runtime) {
                        conn_reply_error(c, 400, "unknown runtime \"(not a string)\" (ns, gvisor, microvm)");
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "snapshot_interval_ms")) && json_type(v) != JSON_NULL) {
                if (json_int(v, &q->interval_ms) < 0 || q->interval_ms < 0 || q->interval_ms > SES_MAX_INTERVAL_MS ||
                    (q->interval_ms > 0 && q->interval_ms < SES_MIN_INTERVAL_MS)) {
                        conn_reply_error(c, 400, "snapshot_interval_ms must be 0 (off) or between %d and %lld",
                                         SES_MIN_INTERVAL_MS, (long long)SES_MAX_INTERVAL_MS);
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "retention")) && json_type(v) != JSON_NULL) {
                int64_t keep;
                if (json_int(v, &keep) < 0 || keep < 1 || keep > SES_MAX_RETENTION) {
                        conn_reply_error(c, 400, "retention must be an integer between 1 and %u", SES_MAX_RETENTION);
                        return -EINVAL;
                }
                q->retention = (uint32_t)keep;
        }
        char why_lt[256];
        if (lt_apply(&q->life, body, meta_now_ms(), false, why_lt, sizeof why_lt) < 0) {
                conn_reply_error(c, 400, "%s", why_lt);
                return -EINVAL;
        }
        if (ports_parse(c, json_get(body, "ports"), &q->ports) < 0)
                return -EINVAL;
        const struct json *envj = json_get(body, "env");
        const char *why = "bad env";
        int r = ses_parse_env(envj, &q->env, &q->n_env, &why);
        if (r < 0) {
                q->ports = ports_req_free(q->ports);
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "%s", why);
                return r;
        }
        if (envj && json_type(envj) == JSON_OBJECT) {
                struct buf e = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&e);
                json_w_value(&w, envj);
                if (!w.err && buf_putc(&e, '\0') == 0)
                        q->env_json = strdup(e.data);
                buf_free(&e);
        }
        char why_md[160];
        if ((r = metadata_parse(json_get(body, "metadata"), &q->metadata_json, why_md, sizeof why_md)) < 0) {
                util_strv_free(q->env, q->n_env);
                free(q->env_json);
                q->env = NULL;
                q->env_json = NULL;
                q->ports = ports_req_free(q->ports);
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "%s", r == -ENOMEM ? "out of memory" : why_md);
                return r;
        }
        /* Last, as it is the other part that allocates: true, false or a policy object
         * (net/policy.h); none: the operator's --egress-default. */
        if ((r = api_network_parse(c, json_get(body, "network"), &q->net)) < 0) {
                util_strv_free(q->env, q->n_env);
                free(q->env_json);
                free(q->metadata_json);
                q->env = NULL;
                q->env_json = NULL;
                q->metadata_json = NULL;
                q->ports = ports_req_free(q->ports);
                return r;
        }
        return 0;
}

void api_session_create(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (api_body_json(c, &body) < 0)
                return;
        struct ses_create_req q;
        if (create_req_parse(c, body, &q) < 0)
                return;
        struct dur_waiter *w = api_waiter(c, 201);
        if (!w) {
                util_strv_free(q.env, q.n_env);
                free(q.env_json);
                free(q.metadata_json);
                ports_req_free(q.ports);
                net_policy_clear(&q.net);
                return;
        }
        dur_create(c->d, &q, w);
}

void api_snapshot_create(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const struct json *v = json_get(body, "label");
        const char *label = NULL;
        if (v && json_type(v) != JSON_NULL) {
                label = json_str(v);
                if (!label) {
                        conn_reply_error(c, 400, "label must be a string");
                        return;
                }
                if (strlen(label) > SES_LABEL_MAX) {
                        conn_reply_error(c, 400, "label is over %u bytes", SES_LABEL_MAX);
                        return;
                }
        }
        bool memory = false;
        if ((v = json_get(body, "memory")) && json_type(v) != JSON_NULL) {
                if (json_type(v) != JSON_BOOL) {
                        conn_reply_error(c, 400, "memory must be true or false");
                        return;
                }
                memory = json_is_true(v);
                if (memory && !s->rt->memory_snapshots) {
                        conn_reply_error(c, 400, "runtime %s has no memory snapshots (gvisor, microvm do)", s->rt->name);
                        return;
                }
        }
        if (!state_ok_now(c, s, DL_SNAPSHOT))
                return;
        struct dur_waiter *w = api_waiter(c, 201);
        if (w)
                dur_snapshot(s, label, memory, w);
}

void api_snapshot_list(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        if (meta_snapshot_list(c->d->meta, s->id, &v, &n) < 0) {
                conn_reply_error(c, 500, "reading the timeline: %s", meta_last_error(c->d->meta));
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "snapshots");
        json_w_arr_begin(&w);
        for (size_t i = 0; i < n; i++)
                dur_snapshot_json(&w, &v[i]);
        json_w_arr_end(&w);
        json_w_kstr(&w, "head", s->head[0] ? s->head : NULL);
        json_w_obj_end(&w);
        free(v);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_session_pause(struct conn *c) {
        struct session *s = api_session(c, false);
        struct dur_waiter *w;
        if (s && state_ok_now(c, s, DL_PAUSE) && (w = api_waiter(c, 200)))
                dur_pause(s, w);
}

void api_session_resume(struct conn *c) {
        struct session *s = api_session(c, false);
        struct dur_waiter *w;
        if (s && state_ok_now(c, s, DL_RESUME) && (w = api_waiter(c, 200)))
                dur_resume(s, w);
}

/* A snapshot id from the body that must belong to s: 404 otherwise, nothing changed. */
static int body_snapshot(struct conn *c, struct session *s, const struct json *body, bool required, const char **ret) {
        const struct json *v = json_get(body, "snapshot");
        if (!v || json_type(v) == JSON_NULL) {
                if (required) {
                        conn_reply_error(c, 400, "snapshot (a snap_… id) is required");
                        return -EINVAL;
                }
                *ret = NULL;
                return 0;
        }
        const char *id = json_str(v);
        if (!id) {
                conn_reply_error(c, 400, "snapshot must be a snap_… id");
                return -EINVAL;
        }
        struct meta_snapshot m;
        if (!meta_id_valid("snap", id) || meta_snapshot_get(c->d->meta, id, &m) < 0 || strcmp(m.session_id, s->id) != 0) {
                conn_reply_error(c, 404, "session %s has no snapshot %.40s", s->id, id);
                return -ENOENT;
        }
        *ret = id;
        return 0;
}

void api_session_restore(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const char *snap;
        if (body_snapshot(c, s, body, true, &snap) < 0 || !state_ok_now(c, s, DL_RESTORE))
                return;
        struct dur_waiter *w = api_waiter(c, 200);
        if (w)
                dur_restore(s, snap, w);
}

void api_session_fork(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const char *snap;
        if (body_snapshot(c, s, body, false, &snap) < 0)
                return;
        int64_t count = 1;
        const struct json *v = json_get(body, "count");
        if (v && json_type(v) != JSON_NULL && (json_int(v, &count) < 0 || count < 1 || count > SES_MAX_FORKS)) {
                conn_reply_error(c, 400, "count must be an integer from 1 to %d", SES_MAX_FORKS);
                return;
        }
        if (c->d->n_sessions + (size_t)count > SPACED_MAX_SESSIONS) {
                conn_reply_error(c, 409, "too many sessions (%d)", SPACED_MAX_SESSIONS);
                return;
        }
        if (!state_ok_now(c, s, DL_FORK))
                return;
        struct dur_waiter *w = api_waiter(c, 201);
        if (w)
                dur_fork(s, snap, (unsigned)count, w);
}

void api_events_list(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        int64_t after, limit;
        if (api_query_int(c, "after", 0, 0, INT64_MAX, &after) < 0 ||
            api_query_int(c, "limit", SES_EVENTS_DEFAULT, 1, SES_EVENTS_MAX, &limit) < 0)
                return;
        struct meta_event *v = NULL;
        size_t n = 0;
        int64_t last = 0;
        if (meta_event_list(c->d->meta, s->id, after, (unsigned)limit, &v, &n) < 0 ||
            meta_event_last_seq(c->d->meta, s->id, &last) < 0) {
                conn_reply_error(c, 500, "reading the event log: %s", meta_last_error(c->d->meta));
                meta_events_free(v, n);
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        int64_t next = after;
        json_w_obj_begin(&w);
        json_w_key(&w, "events");
        json_w_arr_begin(&w);
        for (size_t i = 0; i < n; i++) {
                char ts[40];
                dl_rfc3339_ms(v[i].time_ms, ts, sizeof ts);
                json_w_obj_begin(&w);
                json_w_kint(&w, "seq", v[i].seq);
                json_w_kstr(&w, "time", ts);
                json_w_kstr(&w, "kind", v[i].kind);
                json_w_key(&w, "data");
                json_w_raw(&w, v[i].payload, v[i].payload_len);
                json_w_obj_end(&w);
                next = v[i].seq;
        }
        json_w_arr_end(&w);
        json_w_kint(&w, "next", next);
        json_w_kbool(&w, "more", last > next);
        json_w_obj_end(&w);
        meta_events_free(v, n);
        if (w.err)
                conn_reply_error(c, 500, "event page: %s", strerror(-w.err));
        else
                conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_events_append(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const struct spaced_limits *l = &c->d->limits;
        unsigned retry_s = 1;
        if (!dl_bucket_take(&s->event_bucket, util_now_ms(), l->event_rate ? l->event_rate : LIM_EVENT_RATE,
                            l->event_burst ? l->event_burst : LIM_EVENT_BURST, &retry_s)) {
                conn_reply_retry(c, 429, retry_s, "over %llu events a second (burst %llu) for this session",
                                 (unsigned long long)(l->event_rate ? l->event_rate : LIM_EVENT_RATE),
                                 (unsigned long long)(l->event_burst ? l->event_burst : LIM_EVENT_BURST));
                return;
        }
        const char *kind = json_get_str(body, "kind");
        if (!dl_agent_kind(kind)) {
                conn_reply_error(c, 400, "kind must be agent, tool_call or note");
                return;
        }
        const struct json *data = json_get(body, "data");
        struct buf d = BUF_INIT(SES_EVENT_DATA_MAX);
        struct json_writer w = JSON_WRITER_INIT(&d);
        if (data)
                json_w_value(&w, data);
        else
                json_w_null(&w);
        if (w.err) {
                buf_free(&d);
                conn_reply_error(c, 413, "data is over %u bytes", SES_EVENT_DATA_MAX);
                return;
        }
        int64_t seq = 0;
        int r = meta_event_post(c->d->meta, s->id, kind, d.data, d.len, &seq);
        buf_free(&d);
        if (r < 0) {
                conn_reply_error(c, r == -E2BIG ? 413 : r == -EDQUOT ? 507 : 500, "appending the event: %s",
                                 meta_last_error(c->d->meta));
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer bw = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&bw);
        json_w_kint(&bw, "seq", seq);
        json_w_obj_end(&bw);
        conn_reply_json(c, 201, &b);
        buf_free(&b);
}

/* connect: the session + its processes (from space-init when a sandbox runs). */
static void connect_resp(struct conn *c, const struct json *resp) {
        const char *id = api_param(&c->params, "id");
        struct session *s = id ? ses_find(c->d, id) : NULL;
        if (!s) {
                conn_reply_error(c, 404, "session %s went away", id ? id : "");
                return;
        }
        struct buf o = BUF_INIT(0), b = BUF_INIT(0);
        struct json_writer ow = JSON_WRITER_INIT(&o);
        ses_write_json(&ow, s);
        if (!ow.err && o.len >= 2) {
                o.len--;
                buf_append(&b, o.data, o.len);
                buf_puts(&b, ",\"processes\":");
                const struct json *p = resp ? json_get(resp, "processes") : NULL;
                struct json_writer w = JSON_WRITER_INIT(&b);
                if (p && json_type(p) == JSON_ARRAY)
                        json_w_value(&w, p);
                else
                        buf_puts(&b, "[]");
                buf_puts(&b, "}");
        }
        buf_free(&o);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_session_connect(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const char *token = json_get_str(body, "token");
        if (!token) {
                const char *h = http_request_header(c->req, SES_TOKEN_HEADER);
                token = h;
        }
        if (!token || !ses_token_ok(s, token)) {
                conn_reply_error(c, 401, "wrong or missing token for session %s", s->id);
                return;
        }
        if (!ses_usable(s)) {
                connect_resp(c, NULL);
                return;
        }
        struct buf req = BUF_INIT(0);
        buf_puts(&req, "{\"op\":\"ps\"}");
        (void)api_simple_req(c, s, &req, connect_resp);
        buf_free(&req);
}

void api_gc(struct conn *c) {
        struct dur_waiter *w;
        if (api_admin(c) && (w = api_waiter(c, 200)))
                dur_gc(c->d, w);
}
