/* Route handlers for health, sessions, exec and processes (docs/api.md). A handler
 * validates the request, then either answers at once or sends a REQ to the session's
 * space-init and leaves the answer to the frames that come back (session.c). */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
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

void api_reply_init_error(struct conn *c, const struct json *resp, bool exec) {
        const struct json *e = json_get(resp, "error");
        const char *code = json_get_str(e, "code");
        const char *msg = json_get_str(e, "message");
        int64_t err = 0;
        (void)json_get_int(e, "errno", &err);
        int status = util_errno_status((int)err);
        if (exec && status != 400 && status != 409)
                status = 422; /* the command could not be started */
        conn_reply_error(c, status, "%s", msg ? msg : code ? code : "space-init failed");
}

/* Sends one REQ for an op that answers with a single RESP (see OP_SIMPLE). */
int api_simple_req(struct conn *c, struct session *s, const struct buf *req, void (*on_resp)(struct conn *, const struct json *)) {
        struct op *op;
        int r = ses_op_new(s, c, OP_SIMPLE, &op);
        if (r < 0) {
                conn_reply_error(c, 500, "out of memory");
                return r;
        }
        op->on_resp = on_resp;
        r = ses_send_req(s, op->id, req);
        if (r < 0) {
                op_done(op);
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
        }
        return r;
}

static void reply_empty_object(struct conn *c, int status) {
        struct buf b = BUF_INIT(0);
        buf_puts(&b, "{}");
        conn_reply_json(c, status, &b);
        buf_free(&b);
}

void api_resp_ok(struct conn *c, const struct json *resp) {
        (void)resp;
        reply_empty_object(c, 200);
}

void api_resp_created(struct conn *c, const struct json *resp) {
        (void)resp;
        reply_empty_object(c, 201);
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

void api_session_list(struct conn *c) {
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
                if (auth_tenant_sees(c->tenant, s->tenant))
                        ses_write_json(&w, s);
        json_w_arr_end(&w);
        json_w_obj_end(&w);
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
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        ses_write_json(&w, s);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_session_delete(struct conn *c) {
        struct session *s = api_session(c, false);
        struct dur_waiter *w;
        if (s && (w = api_waiter(c, 204)))
                dur_delete(s, w);
}

/* ---- exec ---- */

void api_exec(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (api_body_json(c, &body) < 0)
                return;
        struct session *s = api_session(c, true);
        if (!s)
                return;
        const struct json *argv = json_get(body, "argv");
        if (!argv || json_type(argv) != JSON_ARRAY || json_len(argv) == 0) {
                conn_reply_error(c, 400, "argv must be a non-empty array of strings");
                return;
        }
        if (json_len(argv) > PROTO_MAX_ARGV) {
                conn_reply_error(c, 413, "argv has more than %d entries", PROTO_MAX_ARGV);
                return;
        }
        for (size_t i = 0; i < json_len(argv); i++)
                if (!json_str(json_at(argv, i))) {
                        conn_reply_error(c, 400, "argv must be a non-empty array of strings");
                        return;
                }
        char **env = NULL;
        size_t n_env = 0;
        const char *why = "bad env";
        int r = ses_parse_env(json_get(body, "env"), &env, &n_env, &why);
        if (r < 0) {
                conn_reply_error(c, 400, "%s", why);
                return;
        }
        const struct json *v;
        const char *cwd = NULL;
        if ((v = json_get(body, "cwd")) && json_type(v) != JSON_NULL && !(cwd = json_str(v))) {
                why = "cwd must be a string";
                goto bad;
        }
        if (cwd && strlen(cwd) > PROTO_MAX_PATH) {
                why = "cwd too long";
                goto bad;
        }
        int64_t timeout_ms = 0;
        if ((v = json_get(body, "timeout_ms")) && json_type(v) != JSON_NULL &&
            (json_int(v, &timeout_ms) < 0 || timeout_ms < 0 || timeout_ms > INT32_MAX)) {
                why = "timeout_ms must be a non-negative integer";
                goto bad;
        }
        bool background = json_get_bool(body, "background", false);
        if ((v = json_get(body, "background")) && json_type(v) != JSON_BOOL && json_type(v) != JSON_NULL) {
                why = "background must be true or false";
                goto bad;
        }
        const char *in_text = NULL, *in_b64 = NULL;
        if ((v = json_get(body, "stdin")) && json_type(v) != JSON_NULL && !(in_text = json_str(v))) {
                why = "stdin must be a string";
                goto bad;
        }
        if ((v = json_get(body, "stdin_b64")) && json_type(v) != JSON_NULL && !(in_b64 = json_str(v))) {
                why = "stdin_b64 must be a base64 string";
                goto bad;
        }
        if (in_text && in_b64) {
                why = "give stdin or stdin_b64, not both";
                goto bad;
        }
        if (background && (in_text || in_b64)) {
                why = "a background command takes no stdin";
                goto bad;
        }
        struct buf in = BUF_INIT(0);
        if (in_b64 && text_b64_decode(&in, in_b64, strlen(in_b64)) < 0) {
                buf_free(&in);
                why = "stdin_b64 is not valid base64";
                goto bad;
        }
        bool has_stdin = in_text || in_b64;

        struct buf req = BUF_INIT(PROTO_MAX_JSON);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "exec");
        json_w_key(&w, "argv");
        json_w_value(&w, argv);
        json_w_key(&w, "env");
        json_w_arr_begin(&w);
        for (size_t i = 0; i < s->n_env; i++)
                json_w_str(&w, s->env[i]);
        for (size_t i = 0; i < n_env; i++)
                json_w_str(&w, env[i]);
        json_w_arr_end(&w);
        if (cwd)
                json_w_kstr(&w, "cwd", cwd);
        json_w_kint(&w, "timeout_ms", timeout_ms);
        json_w_kbool(&w, "stdin", has_stdin);
        json_w_kbool(&w, "background", background);
        bool windowed = !background && ses_req_window(s, &w);
        json_w_obj_end(&w);
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        env = NULL;
        if (w.err) {
                buf_free(&req);
                buf_free(&in);
                conn_reply_error(c, 413, "the command line and environment are over %u bytes", PROTO_MAX_JSON);
                return;
        }
        struct op *op;
        r = ses_op_new(s, c, OP_EXEC, &op);
        if (r < 0) {
                buf_free(&req);
                buf_free(&in);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        op->background = background;
        if (windowed)
                op_window_start(op);
        op->started_ms = meta_now_ms();
        {
                struct buf ab = BUF_INIT(0);
                struct json_writer aw = JSON_WRITER_INIT(&ab);
                json_w_value(&aw, argv);
                if (!aw.err && buf_putc(&ab, '\0') == 0)
                        op->argv_json = strdup(ab.data);
                buf_free(&ab);
        }
        r = ses_send_req(s, op->id, &req);
        buf_free(&req);
        if (r == 0 && has_stdin) {
                const char *data = in_text ? in_text : in.data;
                size_t len = in_text ? strlen(in_text) : in.len;
                for (size_t off = 0; r == 0 && off < len; off += SES_UPLOAD_FRAME)
                        r = ses_send(s, PROTO_STDIN, op->id, data + off, MIN((size_t)SES_UPLOAD_FRAME, len - off));
                if (r == 0)
                        r = ses_send(s, PROTO_STDIN, op->id, NULL, 0);
        }
        buf_free(&in);
        if (r < 0) {
                op_done(op);
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
        }
        return;
bad:
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        conn_reply_error(c, 400, "%s", why);
}

/* ---- processes ---- */

static void ps_resp(struct conn *c, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "processes");
        const struct json *p = json_get(resp, "processes");
        if (p && json_type(p) == JSON_ARRAY)
                json_w_value(&w, p);
        else {
                json_w_arr_begin(&w);
                json_w_arr_end(&w);
        }
        json_w_obj_end(&w);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_process_list(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        struct buf req = BUF_INIT(0);
        buf_puts(&req, "{\"op\":\"ps\"}");
        (void)api_simple_req(c, s, &req, ps_resp);
        buf_free(&req);
}

static int pid_param(struct conn *c, int64_t *ret) {
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

void api_process_output(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        int64_t pid, offset;
        bool follow;
        if (pid_param(c, &pid) < 0 || api_query_int(c, "offset", 0, 0, INT64_MAX, &offset) < 0 ||
            api_query_bool(c, "follow", false, &follow) < 0)
                return;
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "attach");
        json_w_kint(&w, "pid", pid);
        json_w_kint(&w, "offset", offset);
        json_w_kbool(&w, "follow", follow);
        bool windowed = ses_req_window(s, &w);
        json_w_obj_end(&w);
        struct op *op;
        int r = ses_op_new(s, c, OP_ATTACH, &op);
        if (r == 0 && windowed)
                op_window_start(op);
        if (r == 0 && (r = ses_send_req(s, op->id, &req)) < 0)
                op_done(op);
        buf_free(&req);
        if (r < 0)
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
}

void api_process_signal(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (api_body_json(c, &body) < 0)
                return;
        struct session *s = api_session(c, true);
        if (!s)
                return;
        int64_t pid, sig = 15;
        if (pid_param(c, &pid) < 0)
                return;
        const struct json *v = json_get(body, "signal");
        if (v && (json_int(v, &sig) < 0 || sig < 1 || sig > 64)) {
                conn_reply_error(c, 400, "signal must be an integer from 1 to 64");
                return;
        }
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "signal");
        json_w_kint(&w, "pid", pid);
        json_w_kint(&w, "signal", sig);
        json_w_kbool(&w, "group", json_get_bool(body, "group", true));
        json_w_obj_end(&w);
        (void)api_simple_req(c, s, &req, api_resp_ok);
        buf_free(&req);
}
