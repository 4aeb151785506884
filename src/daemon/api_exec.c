/* Route handlers for commands and processes (docs/api.md): exec, ps, a process's output,
 * signals. An exec or attach streams as NDJSON events made here from the frames of
 * space-init (the op's handler, proc_ops): start, stdout/stderr, exit or end. */
#include <inttypes.h>
#include <string.h>

#include "common/frame.h"
#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/http.h"
#include "daemon/session.h"
#include "daemon/routes.h"

/* ---- the stream of an exec or attach ---- */

static void event_begin(struct api_json *j, const char *type) {
        api_json_begin(j);
        json_w_obj_begin(&j->w);
        json_w_kstr(&j->w, "type", type);
}

static void event_send(struct conn *c, struct api_json *j) {
        json_w_obj_end(&j->w);
        if (!j->w.err)
                conn_stream_event(c, &j->b);
        buf_free(&j->b);
}

/* stdout/stderr bytes as one NDJSON event; bytes that end mid-character wait for the rest.
 * "data" only for valid UTF-8 without NUL (a JSON parser may refuse \u0000, ours does);
 * anything else goes as "data_b64". */
static void proc_output(struct op *op, struct conn *c, int stream, const uint8_t *data, size_t n, bool flush) {
        if (c->framed) {
                /* binary framing: the bytes as they are, in one chunk with their header */
                if (n > 0)
                        conn_stream_data(c, stream == 0 ? FRAME_STDOUT : FRAME_STDERR, data, n);
                return;
        }
        struct utf8_carry *carry = &op->carry[stream];
        struct buf joined = BUF_INIT(0);
        if (carry->n) {
                if (buf_append(&joined, carry->b, carry->n) < 0 || buf_append(&joined, data, n) < 0) {
                        buf_free(&joined);
                        return;
                }
                carry->n = 0;
                data = (const uint8_t *)joined.data;
                n = joined.len;
        }
        size_t valid = text_utf8_valid_prefix(data, n);
        size_t keep = 0;
        if (!flush && valid < n && n - valid < 4 && text_utf8_incomplete_tail(data + valid, n - valid))
                keep = n - valid;
        size_t send = n - keep;
        if (send > 0) {
                struct api_json j;
                event_begin(&j, stream == 0 ? "stdout" : "stderr");
                if (text_utf8_valid((const char *)data, send)) {
                        json_w_key(&j.w, "data");
                        json_w_strn(&j.w, (const char *)data, send);
                } else {
                        struct buf e = BUF_INIT(0);
                        if (text_b64_encode(&e, data, send) == 0) {
                                json_w_key(&j.w, "data_b64");
                                json_w_strn(&j.w, e.data, e.len);
                        }
                        buf_free(&e);
                }
                event_send(c, &j);
        }
        if (keep) {
                memcpy(carry->b, data + send, keep);
                carry->n = (uint8_t)keep;
        }
        buf_free(&joined);
}

/* EXIT of exec or attach -> the last event, and the end of the response. */
static void proc_exit(struct op *op, struct conn *c, const struct json *exit) {
        for (int i = 0; i < 2; i++)
                if (op->carry[i].n)
                        proc_output(op, c, i, (const uint8_t *)"", 0, true);
        struct api_json j;
        const struct json *err = json_get(exit, "error");
        bool running = json_get_bool(exit, "running", false);
        int64_t v;
        if (err) {
                event_begin(&j, "error");
                json_w_key(&j.w, "error");
                json_w_obj_begin(&j.w);
                json_w_kstr(&j.w, "code", "internal");
                const char *m = json_get_str(err, "message");
                json_w_kstr(&j.w, "message", m ? m : "stream failed");
                json_w_obj_end(&j.w);
        } else if (running) {
                event_begin(&j, "end");
                json_w_kbool(&j.w, "running", true);
        } else {
                event_begin(&j, "exit");
                if (json_get_int(exit, "exit_code", &v) == 0)
                        json_w_kint(&j.w, "exit_code", v);
                if (json_get_int(exit, "signal", &v) == 0)
                        json_w_kint(&j.w, "signal", v);
                if (json_get_bool(exit, "timed_out", false))
                        json_w_kbool(&j.w, "timed_out", true);
        }
        if (op->kind == OP_ATTACH && json_get_int(exit, "offset", &v) == 0)
                json_w_kint(&j.w, "offset", v);
        event_send(c, &j);
        conn_stream_end(c);
}

/* The RESP: an exec started (a background one answers {"pid"} at once) or an attach. */
static void proc_started(struct op *op, struct conn *c, const struct json *resp) {
        if (op->kind == OP_EXEC && op->background) {
                api_reply_kint(c, 201, "pid", op->pid);
                return;
        }
        const char *accept = http_request_header(c->req, "Accept");
        bool framed = accept && text_list_has_token(accept, FRAME_CONTENT_TYPE);
        conn_stream_begin(c, 200, framed ? FRAME_CONTENT_TYPE : "application/x-ndjson");
        if (framed)
                op_window_widen(op, SES_STREAM_WINDOW_RAW); /* no JSON expansion: a wider window */
        struct api_json j;
        if (op->kind == OP_EXEC) {
                event_begin(&j, "start");
                json_w_kint(&j.w, "pid", op->pid);
        } else {
                event_begin(&j, "attach");
                int64_t v = 0;
                (void)json_get_int(resp, "offset", &v);
                json_w_kint(&j.w, "offset", v);
                if (json_get_int(resp, "end", &v) == 0)
                        json_w_kint(&j.w, "end", v);
                json_w_kbool(&j.w, "running", json_get_bool(resp, "running", false));
        }
        event_send(c, &j);
}

/* Streamed stdin may go on: init's queue drained, or init acked (or turned out not to). */
static void proc_room(struct op *op, void *client) {
        struct conn *c = client;
        if (c->in_paused && op->stdin_stream && !ses_stdin_full(op))
                conn_resume_input(c);
}

static void proc_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                       const struct json *j) {
        struct conn *c = client;
        switch (h->type) {
        case PROTO_RESP:
                if (api_resp_is_error(j)) {
                        api_reply_init_error(c, j, op->kind == OP_EXEC);
                } else {
                        proc_started(op, c, j);
                        proc_room(op, c); /* an init that does not ack stdin: stop counting */
                }
                return;
        case PROTO_STDOUT:
        case PROTO_STDERR:
                proc_output(op, c, h->type == PROTO_STDOUT ? 0 : 1, payload, h->len, false);
                return;
        case PROTO_EXIT:
                proc_exit(op, c, j);
                return;
        default:
                return;
        }
}

static const struct op_ops proc_ops = {
        .frame = proc_frame,
        .fail = api_op_fail,
        .behind = api_op_behind,
        .room = proc_room,
        .detach = api_op_detach,
};

/* ---- exec ---- */

/* The exec request in c->body; stream: ?stdin=stream, the rest of the body is stdin. */
static void exec_start(struct conn *c, bool stream) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, true, &body);
        if (!s)
                return;
        const struct json *argv = api_body_argv(c, body, "argv");
        if (!argv)
                return;
        char **env = NULL;
        size_t n_env = 0;
        const char *why = "bad env";
        if (ses_parse_env(json_get(body, "env"), &env, &n_env, &why) < 0) {
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
        if (background && (in_text || in_b64 || stream)) {
                why = "a background command takes no stdin";
                goto bad;
        }
        if (stream && (in_text || in_b64)) {
                why = "with stdin=stream, stdin is the body after the JSON line: no stdin or stdin_b64";
                goto bad;
        }
        struct buf in = BUF_INIT(0);
        if (in_b64 && text_b64_decode(&in, in_b64, strlen(in_b64)) < 0) {
                buf_free(&in);
                why = "stdin_b64 is not valid base64";
                goto bad;
        }
        bool has_stdin = in_text || in_b64 || stream;
        char user[API_USER_MAX];
        if (api_body_user(c, body, user) < 0) {
                buf_free(&in);
                for (size_t i = 0; i < n_env; i++)
                        free(env[i]);
                free(env);
                return;
        }

        struct api_json r;
        api_req_begin(&r, "exec");
        r.b.max = PROTO_MAX_JSON;
        json_w_key(&r.w, "argv");
        json_w_value(&r.w, argv);
        api_req_env(&r, s, NULL, env, n_env);
        if (cwd)
                json_w_kstr(&r.w, "cwd", cwd);
        json_w_kint(&r.w, "timeout_ms", timeout_ms);
        json_w_kbool(&r.w, "stdin", has_stdin);
        if (stream)
                json_w_kbool(&r.w, "stdin_acks", true);
        json_w_kbool(&r.w, "background", background);
        api_req_user(&r, user);
        if (!background)
                api_req_window(&r, s);
        json_w_obj_end(&r.w);
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        env = NULL;
        if (r.w.err) {
                buf_free(&r.b);
                buf_free(&in);
                conn_reply_error(c, 413, "the command line and environment are over %u bytes", PROTO_MAX_JSON);
                return;
        }
        struct op *op = api_op_new(c, s, OP_EXEC, &proc_ops);
        if (!op) {
                buf_free(&r.b);
                buf_free(&in);
                return;
        }
        op->background = background;
        op->stdin_stream = stream;
        op->started_ms = meta_now_ms();
        op->argv_json = api_json_text(argv);
        int e = api_op_send(c, op, &r);
        if (e == 0 && has_stdin && !stream) {
                const char *data = in_text ? in_text : in.data;
                size_t len = in_text ? strlen(in_text) : in.len;
                for (size_t off = 0; e == 0 && off < len; off += SES_UPLOAD_FRAME)
                        e = ses_send(s, PROTO_STDIN, op->id, data + off, MIN((size_t)SES_UPLOAD_FRAME, len - off));
                if (e == 0)
                        e = ses_send(s, PROTO_STDIN, op->id, NULL, 0);
                if (e < 0)
                        api_op_send_failed(c, op, e);
        }
        buf_free(&in);
        return;
bad:
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        conn_reply_error(c, 400, "%s", why);
}

/* Without ?stdin=stream the body is the JSON request, collected as a JSON route's is. */
static int exec_json_body(struct conn *c, const char *data, size_t n) {
        if (buf_append(&c->body, data, n) < 0)
                conn_reply_error(c, 413, "request body over %u bytes", HTTP_MAX_JSON_BODY);
        return 0;
}

static void exec_json_end(struct conn *c) { exec_start(c, false); }

/* Streamed stdin to init, as STDIN frames; the client waits while init is behind. */
static void exec_stdin_send(struct conn *c, struct op *op, const char *data, size_t n) {
        if (op->stdin_ended)
                return;
        for (size_t off = 0; off < n; off += SES_UPLOAD_FRAME) {
                size_t len = MIN((size_t)SES_UPLOAD_FRAME, n - off);
                int r = ses_send(op->ses, PROTO_STDIN, op->id, data + off, len);
                if (r < 0) {
                        api_op_send_failed(c, op, r);
                        return;
                }
                op->stdin_inflight += len;
        }
        if (ses_stdin_full(op))
                c->in_paused = true;
}

/* ?stdin=stream: the body is the exec request as one JSON line, then the command's stdin
 * to the body's end (docs/api.md). */
static int exec_stream_body(struct conn *c, const char *data, size_t n) {
        if (c->resp_done)
                return 0; /* refused, or the command ended: the rest goes nowhere */
        struct op *op = api_conn_op(c);
        if (!op) {
                const char *nl = memchr(data, '\n', n);
                size_t take = nl ? (size_t)(nl - data) : n;
                if (buf_append(&c->body, data, take) < 0) {
                        conn_reply_error(c, 413, "the exec request's JSON line is over %u bytes", HTTP_MAX_JSON_BODY);
                        return 0;
                }
                if (!nl)
                        return 0;
                exec_start(c, true);
                op = api_conn_op(c);
                if (!op || c->resp_done)
                        return 0;
                data = nl + 1;
                n -= take + 1;
        }
        exec_stdin_send(c, op, data, n);
        return 0;
}

static void exec_stream_end(struct conn *c) {
        if (c->resp_done)
                return;
        struct op *op = api_conn_op(c);
        if (!op) {
                exec_start(c, true); /* the JSON line without its newline: empty stdin */
                if (c->resp_done || !(op = api_conn_op(c)))
                        return;
        }
        if (op->stdin_ended)
                return;
        int r = ses_send(op->ses, PROTO_STDIN, op->id, NULL, 0);
        op->stdin_ended = true;
        if (r < 0)
                api_op_send_failed(c, op, r);
}

void api_exec(struct conn *c) {
        /* Called at the head: the body comes through exec_*_body. */
        char v[16];
        int r = http_query_get(c->req->query, "stdin", v, sizeof v);
        bool stream = r == 0 && strcmp(v, "stream") == 0;
        if (r != -ENOENT && !stream) {
                conn_reply_error(c, 400, "query parameter stdin must be \"stream\"");
                return;
        }
        /* A JSON body is bounded as a JSON route's; a streamed stdin is not (its reader,
         * the command, bounds what spaced holds of it: SES_STDIN_CREDIT). */
        if (http_parser_set_body_limit(c->parser, stream ? UINT64_MAX : HTTP_MAX_JSON_BODY) < 0) {
                conn_reply_error(c, 413, "request body over %u bytes", HTTP_MAX_JSON_BODY);
                return;
        }
        c->on_body = stream ? exec_stream_body : exec_json_body;
        c->on_body_end = stream ? exec_stream_end : exec_json_end;
        conn_continue(c);
}

/* ---- processes ---- */

static void ps_resp(struct conn *c, const struct json *resp) { api_reply_list(c, resp, "processes", false); }

void api_process_list(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        struct api_json r;
        api_req_begin(&r, "ps");
        (void)api_req_simple(c, s, &r, ps_resp);
}


void api_process_output(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        int64_t pid, offset;
        bool follow;
        if (api_pid_param(c, &pid) < 0 || api_query_int(c, "offset", 0, 0, INT64_MAX, &offset) < 0 ||
            api_query_bool(c, "follow", false, &follow) < 0)
                return;
        struct api_json r;
        api_req_begin(&r, "attach");
        json_w_kint(&r.w, "pid", pid);
        json_w_kint(&r.w, "offset", offset);
        json_w_kbool(&r.w, "follow", follow);
        api_req_window(&r, s);
        (void)api_req_send(c, s, &r, OP_ATTACH, &proc_ops);
}

void api_process_signal(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, true, &body);
        if (!s)
                return;
        int64_t pid, sig;
        if (api_pid_param(c, &pid) < 0 ||
            api_body_int(c, body, "signal", 15, 1, 64, "signal must be an integer from 1 to 64", &sig) < 0)
                return;
        struct api_json r;
        api_req_begin(&r, "signal");
        json_w_kint(&r.w, "pid", pid);
        json_w_kint(&r.w, "signal", sig);
        json_w_kbool(&r.w, "group", json_get_bool(body, "group", true));
        (void)api_req_simple(c, s, &r, api_resp_ok);
}
