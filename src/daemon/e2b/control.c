/* The E2B API's control plane (docs/e2b.md "Control plane", the wire: docs/e2b-wire.md §2):
 * sandboxes as SPACE sessions. Each handler turns E2B's request into the typed request of
 * SPACE's own lifecycle (durable.h, lifetime.h) and its answer into E2B's JSON; nothing
 * here goes through SPACE's HTTP API. Errors are E2B's {"code","message"}: core.c set
 * c->error_reply, so conn_reply_error and the api_* helpers answer in that dialect. */
#include "daemon/e2b/e2b.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/durable.h"
#include "daemon/http.h"
#include "daemon/lifetime.h"
#include "daemon/metadata.h"
#include "daemon/metrics.h"
#include "daemon/net/policy.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

/* What E2B's schema says when the client gives no timeout. */
#define E2B_TIMEOUT_DEFAULT_S 300
#define E2B_CLIENT_ID "space"
#define E2B_LIST_DEFAULT 100
#define E2B_LIST_MAX 1000
/* A sandbox without a deadline has no endAt in SPACE; E2B's schema requires one. */
#define E2B_END_NEVER "9999-12-31T23:59:59Z"
/* A nextToken as we give it out: "<Unix ms it was made>_<id>". */
#define E2B_CURSOR_MAX 64
#define E2B_QUERY_MAX 256 /* state, template, startedAfter, sandboxID, name */

/* ---------------- the JSON E2B reads ---------------- */

static void w_time_ms(struct json_writer *w, const char *key, int64_t ms) {
        char ts[40];
        dl_rfc3339_ms(ms, ts, sizeof ts);
        json_w_kstr(w, key, ts);
}

/* "Sandbox" (create, connect, resume, each fork): what the SDK needs to reach it. */
static void write_sandbox(struct json_writer *w, struct conn *c, const struct session *s) {
        char tok[E2B_ACCESS_TOKEN_LEN + 1];
        e2b_access_token(c->d->e2b, s->id, tok);
        json_w_obj_begin(w);
        json_w_kstr(w, "sandboxID", s->id);
        json_w_kstr(w, "templateID", s->template);
        json_w_kstr(w, "alias", s->template);
        json_w_kstr(w, "clientID", E2B_CLIENT_ID);
        json_w_kstr(w, "envdVersion", E2B_ENVD_VERSION);
        json_w_kstr(w, "envdAccessToken", tok);
        /* getHost(port) is "PORT-ID.domain": with --ports-domain, SPACE serves exactly those
         * names for exposed ports (docs/e2b.md); without it, null (the SDK's E2B_DOMAIN). */
        json_w_kstr(w, "domain", c->d->ports_domain);
        json_w_kstr(w, "trafficAccessToken", NULL);
        json_w_obj_end(w);
        explicit_bzero(tok, sizeof tok);
}

static const char *e2b_state(const struct session *s) {
        /* creating and recovering sessions are on their way to running */
        return s->state == META_SESSION_PAUSED ? "paused" : "running";
}

static int64_t cpu_count(const struct session *s) {
        if (s->cpus > 0)
                return (int64_t)ceil(s->cpus);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? n : 1;
}

/* The fields of "ListedSandbox"; SandboxDetail adds its own before the end. */
static void write_listed_fields(struct json_writer *w, const struct session *s) {
        json_w_kstr(w, "sandboxID", s->id);
        json_w_kstr(w, "templateID", s->template);
        json_w_kstr(w, "alias", s->template);
        json_w_kstr(w, "clientID", E2B_CLIENT_ID);
        json_w_key(w, "metadata");
        metadata_write_json(w, s->metadata);
        w_time_ms(w, "startedAt", s->created_ms);
        if (s->life.deadline_ms)
                w_time_ms(w, "endAt", s->life.deadline_ms);
        else
                json_w_kstr(w, "endAt", E2B_END_NEVER);
        json_w_kstr(w, "state", e2b_state(s));
        json_w_kint(w, "cpuCount", cpu_count(s));
        json_w_kint(w, "memoryMB", (int64_t)(s->memory >> 20));
        json_w_kint(w, "diskSizeMB", (int64_t)(s->disk >> 20));
        json_w_kstr(w, "envdVersion", E2B_ENVD_VERSION);
        json_w_key(w, "volumeMounts");
        json_w_arr_begin(w);
        json_w_arr_end(w);
}

static void write_rules(struct json_writer *w, const char *key, const struct net_rule *r, size_t n) {
        char t[NET_RULE_TEXT_MAX];
        if (key)
                json_w_key(w, key);
        json_w_arr_begin(w);
        for (size_t i = 0; i < n; i++) {
                net_rule_format(&r[i], t, sizeof t);
                json_w_str(w, t);
        }
        json_w_arr_end(w);
}

static void write_detail(struct json_writer *w, struct conn *c, const struct session *s) {
        char tok[E2B_ACCESS_TOKEN_LEN + 1];
        e2b_access_token(c->d->e2b, s->id, tok);
        json_w_obj_begin(w);
        write_listed_fields(w, s);
        json_w_kbool(w, "allowInternetAccess", s->net.egress);
        json_w_kstr(w, "domain", c->d->ports_domain);
        json_w_kstr(w, "envdAccessToken", tok);
        explicit_bzero(tok, sizeof tok);
        /* SPACE's policy in E2B's terms: allow rules are the only destinations (E2B's
         * allowOut over a denyOut of everything), deny rules are denyOut. */
        json_w_key(w, "network");
        json_w_obj_begin(w);
        write_rules(w, "allowOut", s->net.allow, s->net.n_allow);
        json_w_key(w, "denyOut");
        if (!s->net.egress || s->net.n_allow) {
                json_w_arr_begin(w);
                json_w_str(w, "0.0.0.0/0");
                json_w_arr_end(w);
        } else {
                write_rules(w, NULL, s->net.deny, s->net.n_deny);
        }
        json_w_obj_end(w);
        json_w_key(w, "lifecycle");
        json_w_obj_begin(w);
        json_w_kstr(w, "onTimeout", s->life.timeout_action == LT_DELETE ? "kill" : "pause");
        json_w_kbool(w, "autoResume", s->life.auto_resume);
        json_w_obj_end(w);
        json_w_obj_end(w);
}

static void reply_sandbox(struct conn *c, int status, const struct session *s) {
        struct api_json j;
        api_json_begin(&j);
        write_sandbox(&j.w, c, s);
        api_json_reply(c, status, &j);
}

/* ---------------- request members ---------------- */

/* body's key: seconds 1 .. LT_TIMEOUT_MAX_S, def when absent or null. Answers 400. */
static int body_timeout(struct conn *c, const struct json *body, const char *key, int64_t def, int64_t *ret) {
        const struct json *v = json_get(body, key);
        int64_t t = def;
        if (v && json_type(v) != JSON_NULL && (json_int(v, &t) < 0 || t < 1 || t > LT_TIMEOUT_MAX_S)) {
                conn_reply_error(c, 400, "%s must be whole seconds from 1 to %d", key, LT_TIMEOUT_MAX_S);
                return -EINVAL;
        }
        *ret = t;
        return 0;
}

static int body_bool(struct conn *c, const struct json *body, const char *key, bool *ret) {
        const struct json *v = json_get(body, key);
        if (!v || json_type(v) == JSON_NULL)
                return 0;
        if (json_type(v) != JSON_BOOL) {
                conn_reply_error(c, 400, "%s must be true or false", key);
                return -EINVAL;
        }
        *ret = json_is_true(v);
        return 0;
}

/* The deadline moves to now + secs, unless it is later already (connect: "TTL is only
 * extended"); a session without one keeps none, unless it was asleep (a resume: its
 * timeout fired or E2B's pause cleared it). */
static void extend_deadline(struct session *s, int64_t secs, bool woken) {
        int64_t at = meta_now_ms() + secs * 1000;
        if ((!s->life.deadline_ms && !woken) || s->life.deadline_ms >= at)
                return;
        s->life.deadline_ms = at;
        (void)lifetime_save(s);
}

/* ---------------- waiting for the lifecycle ---------------- */

enum e2b_wait_kind { EW_CREATE, EW_RESUME, EW_PAUSE, EW_SNAPSHOT, EW_FORK };

/* A lifecycle request of the E2B API: its answer when done, and what must happen to the
 * session(s) then whether or not the client is still there (a resumed or forked sandbox
 * gets its deadline; a paused one loses it). */
struct e2b_wait {
        struct dur_waiter w;
        struct conn *c; /* NULL once the client left */
        struct daemon *d;
        enum e2b_wait_kind kind;
        char id[SES_ID_LEN + 1];
        int64_t timeout_s;
        int ok_status;
};

static void ew_gone(struct conn *c, void *ctx) {
        (void)c;
        ((struct e2b_wait *)ctx)->c = NULL;
}

static const struct conn_hook_ops ew_hook = { .gone = ew_gone };

/* The sessions a fork made: each gets the deadline asked, the source's timeout action and
 * auto_resume (SPACE's fork copies neither), and its entry in the answer. */
static void fork_done(struct e2b_wait *k, struct conn *c, const struct json *res) {
        struct session *src = ses_find(k->d, k->id);
        const struct json *v = json_get(res, "sessions");
        struct api_json j;
        api_json_begin(&j);
        json_w_arr_begin(&j.w);
        for (size_t i = 0; i < json_len(v); i++) {
                const char *id = json_get_str(json_at(v, i), "id");
                struct session *s = id ? ses_find(k->d, id) : NULL;
                if (!s || s->freed)
                        continue;
                s->life.deadline_ms = meta_now_ms() + k->timeout_s * 1000;
                s->life.timeout_action = src ? src->life.timeout_action : LT_DELETE;
                s->life.auto_resume = src && src->life.auto_resume;
                (void)lifetime_save(s);
                if (!c)
                        continue;
                json_w_obj_begin(&j.w);
                json_w_key(&j.w, "sandbox");
                write_sandbox(&j.w, c, s);
                json_w_obj_end(&j.w);
        }
        json_w_arr_end(&j.w);
        if (c)
                api_json_reply(c, 201, &j);
        else
                buf_free(&j.b);
}

static void ew_done(struct dur_waiter *w, int err, const char *msg, const struct buf *result) {
        struct e2b_wait *k = (struct e2b_wait *)w;
        struct conn *c = TAKE_PTR(k->c);
        if (c)
                conn_clear_hook(c, k);
        _cleanup_json_ struct json *res = NULL;
        if (!err && result && result->len &&
            json_parse(result->data, result->len, &res, NULL, 0) < 0) {
                err = -EIO;
                msg = "the lifecycle's answer did not read";
        }
        const char *id = k->kind == EW_CREATE ? json_get_str(res, "id") : k->id;
        struct session *s = !err && id ? ses_find(k->d, id) : NULL;
        if (!err && (!s || s->freed)) {
                err = -ENOENT;
                msg = "the sandbox went away meanwhile";
        }
        /* A resume that found it running already (two connects at once) is a connect. */
        if (err && k->kind == EW_RESUME && (s = ses_find(k->d, k->id)) && !s->freed && ses_usable(s)) {
                err = 0;
                k->ok_status = 200;
        }
        if (err) {
                if (c)
                        conn_reply_error(c, api_status_of(err), "%s", msg);
                free(k);
                return;
        }
        switch (k->kind) {
        case EW_CREATE:
                if (c)
                        reply_sandbox(c, 201, s);
                break;
        case EW_RESUME:
                extend_deadline(s, k->timeout_s, true);
                if (c)
                        reply_sandbox(c, k->ok_status, s);
                break;
        case EW_PAUSE:
                /* A paused E2B sandbox does not expire: connect gives it a deadline again. */
                if (s->life.deadline_ms) {
                        s->life.deadline_ms = 0;
                        (void)lifetime_save(s);
                }
                if (c)
                        conn_reply_empty(c, 204);
                break;
        case EW_SNAPSHOT: {
                const char *snap = json_get_str(res, "id"), *label = json_get_str(res, "label");
                if (!c)
                        break;
                struct api_json j;
                api_json_begin(&j);
                json_w_obj_begin(&j.w);
                json_w_kstr(&j.w, "snapshotID", snap);
                json_w_key(&j.w, "names");
                json_w_arr_begin(&j.w);
                json_w_str(&j.w, label && *label ? label : snap);
                json_w_arr_end(&j.w);
                json_w_obj_end(&j.w);
                api_json_reply(c, 201, &j);
                break;
        }
        case EW_FORK:
                fork_done(k, c, res);
                break;
        }
        free(k);
}

static const struct dur_waiter_ops ew_ops = { .done = ew_done };

static struct dur_waiter *e2b_waiter(struct conn *c, enum e2b_wait_kind kind, const char *id, int64_t timeout_s,
                                     int ok_status) {
        struct e2b_wait *k = calloc(1, sizeof *k);
        if (!k) {
                conn_reply_error(c, 500, "out of memory");
                return NULL;
        }
        k->w.ops = &ew_ops;
        k->c = c;
        k->d = c->d;
        k->kind = kind;
        k->timeout_s = timeout_s;
        k->ok_status = ok_status;
        snprintf(k->id, sizeof k->id, "%s", id ? id : "");
        conn_set_hook(c, &ew_hook, k);
        return &k->w;
}

/* 409/503 now (as SPACE's API) when nothing queued could change the state before a runs. */
static bool state_ok(struct conn *c, struct session *s, enum dl_action a) {
        if (s->act || s->queue)
                return true;
        const char *why;
        int err = dl_action_check(a, s->state, &why);
        if (err) {
                conn_reply_error(c, api_status_of(err), "sandbox %s: %s", s->id, why);
                return false;
        }
        return true;
}

/* ---------------- create ---------------- */

/* A list member of E2B's network ("allowOut", "denyOut"): NULL or an array of strings. */
static int rule_list(struct conn *c, const struct json *net, const char *key, const struct json **ret) {
        const struct json *v = net ? json_get(net, key) : NULL;
        *ret = NULL;
        if (!v || json_type(v) == JSON_NULL)
                return 0;
        if (json_type(v) != JSON_ARRAY || json_len(v) > NET_RULES_MAX) {
                conn_reply_error(c, 400, "network.%s must be an array of at most %d CIDRs or names", key, NET_RULES_MAX);
                return -EINVAL;
        }
        for (size_t i = 0; i < json_len(v); i++)
                if (!json_str(json_at(v, i))) {
                        conn_reply_error(c, 400, "network.%s[%zu] must be a string", key, i);
                        return -EINVAL;
                }
        *ret = json_len(v) ? v : NULL;
        return 0;
}

static bool is_all_traffic(const char *r) { return !strcmp(r, "0.0.0.0/0") || !strcmp(r, "::/0"); }

/* allow_internet_access and network (allowOut, denyOut) as SPACE's policy (net/policy.h):
 * E2B's allowOut wins over its denyOut, SPACE's deny rules win over its allow rules, so
 * what maps is: a denyOut of everything with allowOut as the only destinations (allow
 * rules), or denyOut alone (deny rules). allow_internet_access true is the host's default
 * (the SDKs up to 2.50 send it always), false is egress off unless allowOut opens some.
 * The other members of network are not served (docs/e2b.md). Answers the client itself. */
static int create_network(struct conn *c, const struct json *body, struct net_policy *ret) {
        const struct json *aia = json_get(body, "allow_internet_access"), *net = json_get(body, "network");
        if (aia && json_type(aia) != JSON_NULL && json_type(aia) != JSON_BOOL) {
                conn_reply_error(c, 400, "allow_internet_access must be true or false");
                return -EINVAL;
        }
        if (net && json_type(net) != JSON_NULL && json_type(net) != JSON_OBJECT) {
                conn_reply_error(c, 400, "network must be an object");
                return -EINVAL;
        }
        const struct json *allow, *deny;
        if (rule_list(c, net, "allowOut", &allow) < 0 || rule_list(c, net, "denyOut", &deny) < 0)
                return -EINVAL;
        bool deny_all = aia && json_type(aia) == JSON_BOOL && !json_is_true(aia);
        for (size_t i = 0; deny && i < json_len(deny); i++)
                deny_all |= is_all_traffic(json_str(json_at(deny, i)));
        if (!deny_all && !deny)
                return api_network_parse(c, NULL, ret); /* allowOut alone opens nothing more */
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        if (deny_all && !allow) {
                json_w_bool(&w, false);
        } else if (deny_all) {
                json_w_obj_begin(&w);
                json_w_kbool(&w, "egress", true);
                json_w_key(&w, "allow");
                json_w_value(&w, allow);
                json_w_obj_end(&w);
        } else if (allow) {
                buf_free(&b);
                conn_reply_error(c, 400, "network.allowOut with a denyOut other than [\"0.0.0.0/0\"] is not served: "
                                         "SPACE's deny rules win over allow rules (docs/e2b.md)");
                return -EINVAL;
        } else {
                json_w_obj_begin(&w);
                json_w_kbool(&w, "egress", true);
                json_w_key(&w, "deny");
                json_w_value(&w, deny);
                json_w_obj_end(&w);
        }
        _cleanup_json_ struct json *p = NULL;
        int r = w.err ? w.err : json_parse(b.data, b.len, &p, NULL, 0);
        buf_free(&b);
        if (r < 0) {
                conn_reply_error(c, 500, "out of memory");
                return r;
        }
        return api_network_parse(c, p, ret);
}

static void create_req_free(struct ses_create_req *q) {
        util_strv_free(q->env, q->n_env);
        free(q->env_json);
        free(q->metadata_json);
        q->env = NULL;
        q->env_json = q->metadata_json = NULL;
        net_policy_clear(&q->net);
}

/* NewSandbox / NewSandboxV2 (docs/e2b-wire.md §2.2) as SPACE's create. */
static int create_parse(struct conn *c, const struct json *body, struct ses_create_req *q) {
        *q = (struct ses_create_req){ .memory = SES_DEFAULT_MEMORY, .pids = SES_DEFAULT_PIDS,
                                      .interval_ms = SES_DEFAULT_INTERVAL_MS, .retention = SES_DEFAULT_RETENTION };
        snprintf(q->tenant, sizeof q->tenant, "%s", c->tenant);
        const struct json *v = json_get(body, "templateID");
        const char *t = TEMPLATE_BASE;
        if (v && json_type(v) != JSON_NULL && !(t = json_str(v))) {
                conn_reply_error(c, 400, "templateID must be a string");
                return -EINVAL;
        }
        /* A snapshot of createSnapshot is a template to E2B: Sandbox.create(snapshotId). */
        if (meta_id_valid("snap", t))
                q->snapshot = t;
        else if (template_name_valid(t))
                q->template = t;
        else {
                conn_reply_error(c, 400, "templateID \"%.80s\" is neither a template name nor a snapshot id", t);
                return -EINVAL;
        }
        int64_t timeout;
        bool auto_pause = false, auto_resume = false;
        if (body_timeout(c, body, "timeout", E2B_TIMEOUT_DEFAULT_S, &timeout) < 0 ||
            body_bool(c, body, "autoPause", &auto_pause) < 0)
                return -EINVAL;
        const struct json *ar = json_get(body, "autoResume");
        if (ar && json_type(ar) != JSON_NULL) {
                if (json_type(ar) != JSON_OBJECT) {
                        conn_reply_error(c, 400, "autoResume must be an object {\"enabled\":bool}");
                        return -EINVAL;
                }
                if (body_bool(c, ar, "enabled", &auto_resume) < 0)
                        return -EINVAL;
        }
        int64_t now = meta_now_ms();
        q->life = (struct ses_lifetime){ .deadline_ms = now + timeout * 1000,
                                         .timeout_action = auto_pause ? LT_PAUSE : LT_DELETE,
                                         .auto_resume = auto_resume, .active_ms = now };
        const struct json *env = json_get(body, "envVars");
        if (env && json_type(env) == JSON_NULL)
                env = NULL;
        const char *why = "bad envVars";
        int r = ses_parse_env(env, &q->env, &q->n_env, &why);
        if (r < 0) {
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "envVars: %s", why);
                return r;
        }
        if (env && !(q->env_json = api_json_text(env))) {
                create_req_free(q);
                conn_reply_error(c, 500, "out of memory");
                return -ENOMEM;
        }
        char why_md[160];
        if ((r = metadata_parse(json_get(body, "metadata"), &q->metadata_json, why_md, sizeof why_md)) < 0) {
                create_req_free(q);
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "%s", r == -ENOMEM ? "out of memory" : why_md);
                return r;
        }
        if ((r = create_network(c, body, &q->net)) < 0) {
                create_req_free(q);
                return r;
        }
        return 0;
}

void e2b_sandbox_create(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (api_body_json(c, &body) < 0)
                return;
        struct ses_create_req q;
        if (create_parse(c, body, &q) < 0)
                return;
        struct dur_waiter *w = e2b_waiter(c, EW_CREATE, NULL, 0, 201);
        if (!w) {
                create_req_free(&q);
                return;
        }
        /* It answers once space-init said hello, as SPACE's create (dur_create). */
        dur_create(c->d, &q, w);
        create_req_free(&q); /* what dur_create did not take */
}

/* ---------------- connect, resume, pause, kill, timeout, info ---------------- */

void e2b_sandbox_connect(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        int64_t timeout;
        if (!s || body_timeout(c, body, "timeout", E2B_TIMEOUT_DEFAULT_S, &timeout) < 0)
                return;
        if (lifetime_asleep(s)) {
                struct dur_waiter *w = e2b_waiter(c, EW_RESUME, s->id, timeout, 201);
                if (w)
                        dur_resume(s, w);
                return;
        }
        extend_deadline(s, timeout, false);
        reply_sandbox(c, 200, s);
}

void e2b_sandbox_resume(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        int64_t timeout;
        if (!s || body_timeout(c, body, "timeout", E2B_TIMEOUT_DEFAULT_S, &timeout) < 0)
                return;
        if (!lifetime_asleep(s)) {
                conn_reply_error(c, 409, "sandbox %s is already running", s->id);
                return;
        }
        struct dur_waiter *w = e2b_waiter(c, EW_RESUME, s->id, timeout, 201);
        if (w)
                dur_resume(s, w);
}

void e2b_sandbox_pause(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        /* The SDK tells "already paused" by the body's code 409 (pause() -> false). */
        if (lifetime_asleep(s)) {
                conn_reply_error(c, 409, "sandbox %s is already paused", s->id);
                return;
        }
        struct dur_waiter *w;
        if (state_ok(c, s, DL_PAUSE) && (w = e2b_waiter(c, EW_PAUSE, s->id, 0, 204)))
                dur_pause(s, w);
}

void e2b_sandbox_kill(struct conn *c) {
        struct session *s = api_session(c, false);
        struct dur_waiter *w;
        if (s && (w = api_waiter(c, 204)))
                dur_delete(s, w);
}

void e2b_sandbox_timeout(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        if (!json_get(body, "timeout")) {
                conn_reply_error(c, 400, "timeout (seconds from now) is required");
                return;
        }
        int64_t timeout;
        if (body_timeout(c, body, "timeout", 0, &timeout) < 0)
                return;
        struct ses_lifetime old = s->life;
        s->life.deadline_ms = meta_now_ms() + timeout * 1000; /* may shorten it: setTimeout's rule */
        if (lifetime_save(s) < 0) {
                s->life = old;
                conn_reply_error(c, 500, "recording the timeout: %s", meta_last_error(c->d->meta));
                return;
        }
        conn_reply_empty(c, 204);
}

void e2b_sandbox_get(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        struct api_json j;
        api_json_begin(&j);
        write_detail(&j.w, c, s);
        api_json_reply(c, 200, &j);
}

/* ---------------- list ---------------- */

/* A session (or a snapshot) in the order of a paged list: by time, then id. */
struct e2b_item {
        int64_t t;
        const char *id;
        void *p;
};

static int item_cmp(const void *a, const void *b) {
        const struct e2b_item *x = a, *y = b;
        if (x->t != y->t)
                return x->t < y->t ? -1 : 1;
        return strcmp(x->id, y->id);
}

/* ?nextToken= as given out by page_reply: true and *ret when present. Answers 400. */
static int query_cursor(struct conn *c, struct e2b_item *ret, char id[META_ID_SIZE], bool *present) {
        char v[E2B_CURSOR_MAX + 1];
        *present = false;
        int r = http_query_get(c->req->query, "nextToken", v, sizeof v);
        if (r == -ENOENT || (r == 0 && !*v))
                return 0;
        char *end = NULL;
        long long t = r == 0 ? strtoll(v, &end, 10) : 0;
        if (r < 0 || end == v || *end != '_' || strlen(end + 1) >= META_ID_SIZE || !end[1]) {
                conn_reply_error(c, 400, "nextToken is not one this server gave out");
                return -EINVAL;
        }
        snprintf(id, META_ID_SIZE, "%s", end + 1);
        *ret = (struct e2b_item){ .t = t, .id = id };
        *present = true;
        return 0;
}

/* items sorted (order asc or desc), the page after the cursor, limit long: into *first,
 * *n; *more when items are left after it. */
static int page_of(struct conn *c, struct e2b_item *items, size_t n_items, bool desc, size_t limit, size_t *first,
                   size_t *n, bool *more) {
        qsort(items, n_items, sizeof *items, item_cmp);
        if (desc)
                for (size_t i = 0; i < n_items / 2; i++) {
                        struct e2b_item t = items[i];
                        items[i] = items[n_items - 1 - i];
                        items[n_items - 1 - i] = t;
                }
        struct e2b_item cur;
        char cur_id[META_ID_SIZE];
        bool has_cur;
        if (query_cursor(c, &cur, cur_id, &has_cur) < 0)
                return -EINVAL;
        size_t i = 0;
        /* The items after the cursor in this order: a deleted one does not lose the place. */
        while (has_cur && i < n_items && (desc ? item_cmp(&items[i], &cur) >= 0 : item_cmp(&items[i], &cur) <= 0))
                i++;
        *first = i;
        *n = n_items - i < limit ? n_items - i : limit;
        *more = i + *n < n_items;
        return 0;
}

/* 200 with the array in b; X-Next-Token when a page follows (never on the last page: the
 * SDK would keep asking). */
static void page_reply(struct conn *c, const struct buf *b, bool more, const struct e2b_item *last) {
        char hdr[E2B_CURSOR_MAX + 40] = "";
        if (more && last)
                snprintf(hdr, sizeof hdr, "X-Next-Token: %" PRId64 "_%s\r\n", last->t, last->id);
        conn_reply_json_headers(c, 200, b, hdr[0] ? hdr : NULL);
}

static int query_order(struct conn *c, bool *desc) {
        char v[16];
        int r = http_query_get(c->req->query, "order", v, sizeof v);
        *desc = true; /* E2B's default: newest first */
        if (r == -ENOENT)
                return 0;
        if (r == 0 && (!strcasecmp(v, "asc") || !strcasecmp(v, "desc"))) {
                *desc = !strcasecmp(v, "desc");
                return 0;
        }
        conn_reply_error(c, 400, "order must be asc or desc");
        return -EINVAL;
}

/* ?state=running,paused: which E2B states to list (absent: both). */
static int query_states(struct conn *c, bool *running, bool *paused) {
        char v[E2B_QUERY_MAX];
        int r = http_query_get(c->req->query, "state", v, sizeof v);
        *running = *paused = true;
        if (r == -ENOENT)
                return 0;
        *running = *paused = false;
        char *save = NULL;
        for (char *t = r == 0 ? strtok_r(v, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save)) {
                if (!strcmp(t, "running"))
                        *running = true;
                else if (!strcmp(t, "paused"))
                        *paused = true;
                else {
                        r = -EINVAL;
                        break;
                }
        }
        if (r < 0 || (!*running && !*paused)) {
                conn_reply_error(c, 400, "state must be a comma list of running and paused");
                return -EINVAL;
        }
        return 0;
}

static bool visible(struct conn *c, const struct session *s) {
        return !s->freed && s->state != META_SESSION_TERMINATED && auth_tenant_sees(c->tenant, s->tenant);
}

void e2b_sandbox_list(struct conn *c) {
        bool running, paused, desc;
        int64_t limit, after = INT64_MIN;
        char tpl[E2B_QUERY_MAX] = "", ts[E2B_QUERY_MAX];
        struct md_filter f;
        if (query_states(c, &running, &paused) < 0 || query_order(c, &desc) < 0 ||
            api_query_int(c, "limit", E2B_LIST_DEFAULT, 1, E2B_LIST_MAX, &limit) < 0)
                return;
        int r = http_query_get(c->req->query, "template", tpl, sizeof tpl);
        if (r < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "template: a template name is expected");
                return;
        }
        r = http_query_get(c->req->query, "startedAfter", ts, sizeof ts);
        if (r == 0 && lt_parse_time(ts, &after) < 0)
                r = -EINVAL;
        if (r < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "startedAfter must be an RFC 3339 time (2026-12-03T10:00:00Z)");
                return;
        }
        /* The SDK's metadata filter (docs/e2b-wire.md §2.4): decoded once by the query
         * parser, twice more by the filter's. */
        if (api_query_metadata(c, true, &f) < 0)
                return;
        struct e2b_item *items = calloc(c->d->n_sessions + 1, sizeof *items);
        if (!items) {
                metadata_filter_clear(&f);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        size_t n_items = 0;
        for (struct session *s = c->d->sessions; s && n_items < c->d->n_sessions + 1; s = s->next) {
                bool is_paused = s->state == META_SESSION_PAUSED;
                if (!visible(c, s) || (is_paused ? !paused : !running) || (tpl[0] && strcmp(tpl, s->template)) ||
                    s->created_ms < after || !metadata_matches(s->metadata, &f))
                        continue;
                items[n_items++] = (struct e2b_item){ .t = s->created_ms, .id = s->id, .p = s };
        }
        metadata_filter_clear(&f);
        size_t first, n;
        bool more;
        if (page_of(c, items, n_items, desc, (size_t)limit, &first, &n, &more) < 0) {
                free(items);
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_arr_begin(&w);
        for (size_t i = first; i < first + n; i++) {
                json_w_obj_begin(&w);
                write_listed_fields(&w, items[i].p);
                json_w_obj_end(&w);
        }
        json_w_arr_end(&w);
        if (w.err)
                conn_reply_error(c, 500, "listing sandboxes: %s", strerror(-w.err));
        else
                page_reply(c, &b, more, n ? &items[first + n - 1] : NULL);
        buf_free(&b);
        free(items);
}

/* ---------------- metrics ---------------- */

void e2b_sandbox_metrics(struct conn *c) {
        int64_t from, to;
        if (api_query_range(c, &from, &to) < 0)
                return;
        struct session *s = api_session(c, false);
        if (!s)
                return;
        int64_t cpus = cpu_count(s);
        struct api_json j;
        api_json_begin(&j);
        json_w_arr_begin(&j.w);
        for (size_t i = 0; s->metrics && i < s->metrics->n; i++) {
                const struct metrics_sample *m = metrics_ring_at(s->metrics, i);
                if (m->t_ms < from || m->t_ms > to)
                        continue;
                char ts[40];
                util_rfc3339((time_t)(m->t_ms / 1000), ts, sizeof ts);
                json_w_obj_begin(&j.w);
                json_w_kstr(&j.w, "timestamp", ts);
                json_w_kint(&j.w, "timestampUnix", m->t_ms / 1000);
                /* SPACE's is of one CPU, E2B's of all the sandbox has */
                json_w_key(&j.w, "cpuUsedPct");
                json_w_double(&j.w, m->cpu_pct / (double)cpus);
                json_w_kint(&j.w, "cpuCount", cpus);
                json_w_kuint(&j.w, "memUsed", m->memory_bytes);
                json_w_kuint(&j.w, "memTotal", m->memory_limit_bytes ? m->memory_limit_bytes : s->memory);
                json_w_kint(&j.w, "memCache", 0);
                json_w_kuint(&j.w, "diskUsed", m->disk_bytes);
                json_w_kuint(&j.w, "diskTotal", s->disk);
                json_w_obj_end(&j.w);
        }
        json_w_arr_end(&j.w);
        api_json_reply(c, 200, &j);
}

/* ---------------- snapshots and fork ---------------- */

void e2b_sandbox_snapshot(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        const struct json *v = json_get(body, "name");
        const char *name = NULL;
        if (v && json_type(v) != JSON_NULL) {
                name = json_str(v);
                if (!name || !*name || strlen(name) > SES_LABEL_MAX) {
                        conn_reply_error(c, 400, "name must be a string of 1 to %u bytes", SES_LABEL_MAX);
                        return;
                }
        }
        struct dur_waiter *w;
        if (state_ok(c, s, DL_SNAPSHOT) && (w = e2b_waiter(c, EW_SNAPSHOT, s->id, 0, 201)))
                dur_snapshot(s, name, false, w);
}

void e2b_sandbox_fork(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        int64_t count, timeout;
        if (api_body_int(c, body, "count", 1, 1, SES_MAX_FORKS, "count must be an integer from 1 to 64", &count) < 0 ||
            body_timeout(c, body, "timeout", E2B_TIMEOUT_DEFAULT_S, &timeout) < 0)
                return;
        if (c->d->n_sessions + (size_t)count > SPACED_MAX_SESSIONS) {
                conn_reply_error(c, 409, "too many sandboxes (%d)", SPACED_MAX_SESSIONS);
                return;
        }
        struct dur_waiter *w;
        /* A fork of now: a running session is snapshotted first, a paused one forks its head. */
        if (state_ok(c, s, DL_FORK) && (w = e2b_waiter(c, EW_FORK, s->id, timeout, 201)))
                dur_fork(s, NULL, (unsigned)count, w);
}

/* The snapshots E2B calls snapshots: those made on purpose (createSnapshot, SPACE's
 * POST …/snapshots), not the rolling, pause and fork ones of SPACE's timeline. */
void e2b_snapshot_list(struct conn *c) {
        char sid[E2B_QUERY_MAX] = "", name[SES_LABEL_MAX + 1] = "";
        bool desc;
        int64_t limit;
        int r = http_query_get(c->req->query, "sandboxID", sid, sizeof sid);
        if (r < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "sandboxID: a sandbox id is expected");
                return;
        }
        if ((r = http_query_get(c->req->query, "name", name, sizeof name)) < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "name: at most %u bytes", SES_LABEL_MAX);
                return;
        }
        if (query_order(c, &desc) < 0 || api_query_int(c, "limit", E2B_LIST_DEFAULT, 1, E2B_LIST_MAX, &limit) < 0)
                return;
        struct session *one = NULL;
        if (sid[0] && (!(one = ses_find(c->d, sid)) || !visible(c, one))) {
                conn_reply_error(c, 404, "no sandbox %.40s", sid);
                return;
        }
        struct meta_snapshot *all = NULL;
        size_t n_all = 0;
        for (struct session *s = one ? one : c->d->sessions; s; s = one ? NULL : s->next) {
                if (!visible(c, s))
                        continue;
                struct meta_snapshot *v = NULL;
                size_t n = 0;
                if (meta_snapshot_list(c->d->meta, s->id, &v, &n) < 0) {
                        free(all);
                        conn_reply_error(c, 500, "reading the snapshots of %s: %s", s->id, meta_last_error(c->d->meta));
                        return;
                }
                struct meta_snapshot *grown = n ? realloc(all, (n_all + n) * sizeof *all) : all;
                if (n && !grown) {
                        free(v);
                        free(all);
                        conn_reply_error(c, 500, "out of memory");
                        return;
                }
                all = grown;
                for (size_t i = 0; i < n; i++)
                        if (v[i].reason == META_REASON_MANUAL && (!name[0] || !strcmp(name, v[i].label)))
                                all[n_all++] = v[i];
                free(v);
        }
        struct e2b_item *items = calloc(n_all + 1, sizeof *items);
        if (!items) {
                free(all);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        for (size_t i = 0; i < n_all; i++)
                items[i] = (struct e2b_item){ .t = all[i].time_ms, .id = all[i].id, .p = &all[i] };
        size_t first, n;
        bool more;
        if (page_of(c, items, n_all, desc, (size_t)limit, &first, &n, &more) == 0) {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_arr_begin(&w);
                for (size_t i = first; i < first + n; i++) {
                        const struct meta_snapshot *m = items[i].p;
                        json_w_obj_begin(&w);
                        json_w_kstr(&w, "snapshotID", m->id);
                        json_w_key(&w, "names");
                        json_w_arr_begin(&w);
                        json_w_str(&w, m->label[0] ? m->label : m->id);
                        json_w_arr_end(&w);
                        json_w_obj_end(&w);
                }
                json_w_arr_end(&w);
                if (w.err)
                        conn_reply_error(c, 500, "listing snapshots: %s", strerror(-w.err));
                else
                        page_reply(c, &b, more, n ? &items[first + n - 1] : NULL);
                buf_free(&b);
        }
        free(items);
        free(all);
}

/* SPACE keeps a session's snapshots for as long as the session (its timeline, forks made
 * from them, retention) and has no request that deletes one: a snapshot of the caller's is
 * 501, not a pretended success; anything else is 404 (the SDK's false). */
void e2b_snapshot_delete(struct conn *c) {
        const char *id = api_param(&c->params, "id");
        struct meta_snapshot m;
        struct session *s = NULL;
        if (id && meta_id_valid("snap", id) && meta_snapshot_get(c->d->meta, id, &m) == 0)
                s = ses_find(c->d, m.session_id);
        if (!s || !visible(c, s)) {
                conn_reply_error(c, 404, "no snapshot %.40s", id ? id : "");
                return;
        }
        conn_reply_error(c, 501, "deleting a snapshot is not supported: it goes with its sandbox (docs/e2b.md)");
}
