/* Route handlers for health and sessions (docs/api.md), the helpers every handler uses,
 * and the waiters that answer a client later (a lifecycle action, a template build). */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/durable.h"
#include "daemon/metadata.h"
#include "daemon/disk.h"
#include "daemon/routes.h"
#include "daemon/http.h"
#include "daemon/replicate.h"
#include "runtime/runtime.h"

int api_body_json(struct conn *c, struct json **ret) {
        const char *text = c->body.len ? c->body.data : "{}";
        size_t len = c->body.len ? c->body.len : 2;
        char err[160];
        struct json *j = NULL;
        int r = json_parse(text, len, &j, err, sizeof err);
        if (r == -ENOMEM) {
                conn_reply_error(c, 500, "out of memory");
                return r;
        }
        if (r < 0) {
                conn_reply_error(c, r == -E2BIG ? 413 : 400, "malformed JSON body: %s", err);
                return r;
        }
        if (json_type(j) != JSON_OBJECT) {
                json_free(j);
                conn_reply_error(c, 400, "the JSON body must be an object");
                return -EINVAL;
        }
        *ret = j;
        return 0;
}

struct session *api_session(struct conn *c, bool running) {
        const char *id = api_param(&c->params, "id");
        struct session *s = id ? ses_find(c->d, id) : NULL;
        /* Another tenant's session answers exactly like one that does not exist. */
        if (!s || s->freed || s->state == META_SESSION_TERMINATED || !auth_tenant_sees(c->tenant, s->tenant)) {
                conn_reply_error(c, 404, "no session %.40s", id ? id : "");
                return NULL;
        }
        /* A token, when the client sends one, must be the session's (docs/api.md). */
        const char *token = http_request_header(c->req, SES_TOKEN_HEADER);
        if (token && !ses_token_ok(s, token)) {
                conn_reply_error(c, 401, "wrong token for session %s", s->id);
                return NULL;
        }
        if (!running)
                return s;
        const char *why;
        int err = dl_action_check(DL_EXEC, s->state, &why);
        if (err == 0 && !ses_usable(s)) {
                err = -EAGAIN;
                why = s->lost ? "its sandbox died; it is being recovered" : "its sandbox is being replaced";
        }
        if (err) {
                conn_reply_error(c, api_status_of(err), "session %s: %s", s->id, why);
                return NULL;
        }
        return s;
}

struct session *api_session_json(struct conn *c, bool running, struct json **body) {
        return api_body_json(c, body) < 0 ? NULL : api_session(c, running);
}

int api_query_bool(struct conn *c, const char *key, bool def, bool *ret) {
        char v[16];
        int r = http_query_get(c->req->query, key, v, sizeof v);
        if (r == -ENOENT) {
                *ret = def;
                return 0;
        }
        if (r == 0) {
                if (!*v || !strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes")) {
                        *ret = true;
                        return 0;
                }
                if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no")) {
                        *ret = false;
                        return 0;
                }
        }
        conn_reply_error(c, 400, "query parameter %s must be 1 or 0", key);
        return -EINVAL;
}

int api_query_int(struct conn *c, const char *key, int64_t def, int64_t min, int64_t max, int64_t *ret) {
        char v[32];
        int r = http_query_get(c->req->query, key, v, sizeof v);
        if (r == -ENOENT) {
                *ret = def;
                return 0;
        }
        char *end;
        errno = 0;
        long long n = r == 0 ? strtoll(v, &end, 10) : 0;
        if (r < 0 || !*v || *end || errno || n < min || n > max) {
                conn_reply_error(c, 400, "query parameter %s must be an integer in [%" PRId64 ", %" PRId64 "]", key, min, max);
                return -EINVAL;
        }
        *ret = n;
        return 0;
}

int api_body_int(struct conn *c, const struct json *body, const char *key, int64_t def, int64_t min, int64_t max,
                 const char *why, int64_t *ret) {
        const struct json *v = json_get(body, key);
        int64_t n = def;
        if (v && (json_int(v, &n) < 0 || n < min || n > max)) {
                conn_reply_error(c, 400, "%s", why);
                return -EINVAL;
        }
        *ret = n;
        return 0;
}

char *api_json_text(const struct json *v) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        char *text = NULL;
        json_w_value(&w, v);
        if (!w.err && buf_putc(&b, '\0') == 0)
                text = strdup(b.data);
        buf_free(&b);
        return text;
}

bool api_admin(struct conn *c) {
        if (c->admin)
                return true;
        conn_reply_error(c, 403, "only the local operator (the Unix socket without a token) may do this");
        return false;
}

/* ---- health ---- */

/* The caller's own sessions: how many others have is none of its business. */
static size_t api_visible_sessions(struct conn *c) {
        size_t n = 0;
        for (struct session *s = c->d->sessions; s; s = s->next)
                n += !s->freed && auth_tenant_sees(c->tenant, s->tenant);
        return n;
}

void api_health(struct conn *c) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "status", "ok");
        json_w_kstr(&w, "version", SPACED_VERSION);
        json_w_kint(&w, "sessions", (int64_t)api_visible_sessions(c));
        json_w_kstr(&w, "runtime", c->d->rt->name);
        disk_health_json(c->d, &w);
        struct repl_status rs;
        repl_status(c->d->repl, &rs);
        json_w_key(&w, "replication");
        json_w_obj_begin(&w);
        json_w_kbool(&w, "enabled", rs.enabled);
        json_w_kuint(&w, "pending", rs.pending);
        json_w_kuint(&w, "failed", rs.failed);
        json_w_obj_end(&w);
        /* decided at startup when microvm is available (a memo read); else probed once */
        struct rt_accel_info ai;
        if (rt_microvm_accel_info(&ai) == 0) {
                json_w_key(&w, "microvm_accel");
                json_w_obj_begin(&w);
                json_w_kstr(&w, "name", ai.name);
                json_w_kstr(&w, "reason", ai.reason);
                if (ai.min_ips > 0) {
                        json_w_kint(&w, "kernel_ips", ai.kernel_ips);
                        json_w_kint(&w, "user_ips", ai.user_ips);
                        json_w_kint(&w, "min_ips", ai.min_ips);
                }
                json_w_obj_end(&w);
        }
        json_w_obj_end(&w);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

/* ---- sessions ---- */

int api_query_metadata(struct conn *c, bool twice, struct md_filter *f) {
        *f = (struct md_filter){ 0 };
        char v[MD_FILTER_MAX + 1], why[160];
        int r = http_query_get(c->req->query, "metadata", v, sizeof v);
        if (r == -ENOENT)
                return 0;
        if (r < 0) {
                conn_reply_error(c, 400, "query parameter metadata: %s",
                                 r == -ENAMETOOLONG ? "over 8192 bytes" : "bad percent-encoding");
                return -EINVAL;
        }
        if ((r = metadata_filter_parse(v, twice, f, why, sizeof why)) < 0) {
                conn_reply_error(c, r == -ENOMEM ? 500 : 400, "%s", r == -ENOMEM ? "out of memory" : why);
                return r;
        }
        return 0;
}

void api_session_list(struct conn *c) {
        struct md_filter f;
        /* ?metadata=k=v[&k2=v2]: the value percent-encoded as a whole, and each key and
         * value in it once more, as URLSearchParams writes them. */
        if (api_query_metadata(c, false, &f) < 0)
                return;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "sessions");
        json_w_arr_begin(&w);
        /* Oldest first: the list is kept newest first. */
        struct session *last = c->d->sessions;
        while (last && last->next)
                last = last->next;
        for (struct session *s = last; s; s = s->prev)
                if (auth_tenant_sees(c->tenant, s->tenant) && metadata_matches(s->metadata, &f))
                        ses_write_json(&w, s);
        json_w_arr_end(&w);
        json_w_obj_end(&w);
        metadata_filter_clear(&f);
        if (w.err)
                conn_reply_error(c, 500, "listing sessions: %s", strerror(-w.err));
        else
                conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_session_get(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        struct api_json j;
        api_json_begin(&j);
        ses_write_json(&j.w, s);
        api_json_reply(c, 200, &j);
}

void api_session_delete(struct conn *c) {
        struct session *s = api_session(c, false);
        struct dur_waiter *w;
        if (s && (w = api_waiter(c, 204)))
                dur_delete(s, w);
}

/* ---- "user" (exec and file requests) ---- */

bool api_user_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= API_USER_MAX)
                return false;
        if (s[0] >= '0' && s[0] <= '9') {
                if (n > 5)
                        return false;
                for (const char *p = s; *p; p++)
                        if (*p < '0' || *p > '9')
                                return false;
                return atol(s) <= 65535;
        }
        if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
                return false;
        for (const char *p = s + 1; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
                        return false;
        return true;
}

static const char user_why[] = "user must be a name ([a-z_][a-z0-9_-]{0,31}) or a uid (0 to 65535)";

int api_query_user(struct conn *c, char out[API_USER_MAX]) {
        int r = http_query_get(c->req->query, "user", out, API_USER_MAX);
        if (r == -ENOENT) {
                out[0] = '\0';
                return 0;
        }
        if (r < 0 || !api_user_valid(out)) {
                conn_reply_error(c, 400, "%s", user_why);
                return -EINVAL;
        }
        return 0;
}

int api_body_user(struct conn *c, const struct json *body, char out[API_USER_MAX]) {
        const struct json *v = json_get(body, "user");
        out[0] = '\0';
        if (!v || json_type(v) == JSON_NULL)
                return 0;
        int64_t n;
        const char *s = json_str(v);
        if (json_type(v) == JSON_NUMBER && json_int(v, &n) == 0 && n >= 0 && n <= 65535) {
                snprintf(out, API_USER_MAX, "%lld", (long long)n);
                return 0;
        }
        if (s && strlen(s) < API_USER_MAX && api_user_valid(s)) {
                strcpy(out, s);
                return 0;
        }
        conn_reply_error(c, 400, "%s", user_why);
        return -EINVAL;
}

void api_req_user(struct api_json *r, const char *u) {
        if (!*u)
                return;
        if (u[0] >= '0' && u[0] <= '9')
                json_w_kint(&r->w, "user", atol(u));
        else
                json_w_kstr(&r->w, "user", u);
}

void api_req_env(struct api_json *r, const struct session *s, const char *first, char *const *env, size_t n) {
        json_w_key(&r->w, "env");
        json_w_arr_begin(&r->w);
        if (first)
                json_w_str(&r->w, first);
        for (size_t i = 0; i < s->n_env; i++)
                json_w_str(&r->w, s->env[i]);
        for (size_t i = 0; i < n; i++)
                json_w_str(&r->w, env[i]);
        json_w_arr_end(&r->w);
}

int api_pid_param(struct conn *c, int64_t *ret) {
        const char *p = api_param(&c->params, "pid");
        char *end;
        errno = 0;
        long long v = p ? strtoll(p, &end, 10) : 0;
        if (!p || !*p || *end || errno || v <= 0 || v > INT32_MAX) {
                conn_reply_error(c, 400, "pid must be a positive integer");
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

const struct json *api_body_argv(struct conn *c, const struct json *body, const char *key) {
        const struct json *v = json_get(body, key);
        if (!v || json_type(v) != JSON_ARRAY || json_len(v) == 0) {
                conn_reply_error(c, 400, "%s must be a non-empty array of strings", key);
                return NULL;
        }
        if (json_len(v) > PROTO_MAX_ARGV) {
                conn_reply_error(c, 413, "%s has more than %d entries", key, PROTO_MAX_ARGV);
                return NULL;
        }
        for (size_t i = 0; i < json_len(v); i++)
                if (!json_str(json_at(v, i))) {
                        conn_reply_error(c, 400, "%s must be a non-empty array of strings", key);
                        return NULL;
                }
        return v;
}
