/* E2B's process service (process.Process: docs/e2b.md "Processes"; the wire:
 * docs/e2b-wire.md §3.5-3.6) on space-init's background processes (docs/protocol.md §3.21):
 * Start is a background exec, so that the process outlives its stream as envd's does, and
 * an attach from offset 0 that streams all its output; Connect is an attach from the
 * current end; List is ps; SendInput and CloseStdin are op input; SendSignal a signal to
 * the process group; Update a terminal's resize. A selector by tag is a ps first. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/e2b/e2b.h"
#include "daemon/http.h"
#include "daemon/loop.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/spaced.h"

#define KEEPALIVE "{\"event\":{\"keepalive\":{}}}"
/* Decoded stdin bytes one op input carries (its REQ, base64, stays under PROTO_MAX_JSON);
 * a bigger SendInput goes as several, one after the other. */
#define PROC_INPUT_CHUNK (128u << 10)
#define PROC_PTY_DEFAULT_ROWS 24
#define PROC_PTY_DEFAULT_COLS 80

enum pc_kind { PC_START, PC_CONNECT, PC_LIST, PC_INPUT, PC_CLOSE_STDIN, PC_SIGNAL, PC_UPDATE };

/* One RPC in flight: the connection, the op it waits on, and what comes next. */
struct pcall {
        struct conn *c;
        struct session *s;
        struct op *op;
        enum pc_kind kind;
        bool stream; /* Start, Connect: a server stream, begun at once */
        struct e2b_stream st;
        bool started; /* the start event went out */
        bool pty;
        int64_t pid;  /* 0 until known */
        char tag[PROTO_MAX_TAG + 1];
        struct buf input; /* SendInput: the decoded bytes, sent from input_off on */
        size_t input_off;
        int64_t signal;
        int64_t rows, cols; /* Update; 0: no size */
        struct loop_src timer; /* Connect's Connect-Timeout-Ms */
        bool freed;
};

static void pc_next(struct pcall *pc);

/* ---- the call's life ---- */

static void pc_free_deferred(void *p) {
        struct pcall *pc = p;
        buf_free(&pc->input);
        free(pc);
}

/* The client went or was answered: whatever still runs for it stops (an attach is
 * cancelled; a process never is), freed after the batch. */
static void pc_release(struct pcall *pc) {
        if (pc->freed)
                return;
        pc->freed = true;
        struct op *op = TAKE_PTR(pc->op);
        if (op && !op->done)
                op_client_gone(op);
        e2b_stream_drop(&pc->st);
        if (pc->timer.fd >= 0) {
                loop_del(pc->c->d->loop, &pc->timer);
                pc->timer.fd = safe_close(pc->timer.fd);
        }
        if (loop_defer(pc->c->d->loop, pc_free_deferred, pc) < 0)
                log_warn("e2b process call: cannot defer a free: leaking %zu bytes", sizeof *pc);
}

static void hook_gone(struct conn *c, void *ctx) {
        (void)c;
        pc_release(ctx);
}

static void hook_drained(struct conn *c, void *ctx) {
        struct pcall *pc = ctx;
        if (pc->op && !pc->op->done)
                op_client_drained(pc->op, conn_below_low(c));
}

static const struct conn_hook_ops stream_hook = {
        .gone = hook_gone,
        .done = hook_gone,
        .drained = hook_drained,
        .hangup_is_gone = true,
};

static const struct conn_hook_ops unary_hook = {
        .gone = hook_gone,
        .done = hook_gone,
        .drained = hook_drained,
};

/* The error of the call: an end-stream on a stream, a Connect error otherwise. */
static void pc_error(struct pcall *pc, const char *code, const char *fmt, ...) _printf_(3, 4);
static void pc_error(struct pcall *pc, const char *code, const char *fmt, ...) {
        if (pc->freed)
                return;
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (pc->stream && pc->st.open)
                e2b_stream_end(&pc->st, code, "%s", msg);
        else
                e2b_rpc_error(pc->c, code, "%s", msg);
}

static void pc_reply(struct pcall *pc, const struct buf *body) {
        if (!pc->freed)
                e2b_rpc_reply(pc->c, body);
}

/* The Connect code of one of init's errors ({"error":{"code","errno","message"}}). */
static const char *code_of_init_error(const struct json *e) {
        int64_t err = 0;
        (void)json_get_int(e, "errno", &err);
        switch (err) {
        case ESRCH: case ENOENT: return "not_found";
        case EINVAL: case E2BIG: case ENOTDIR: return "invalid_argument";
        case EAGAIN: case EMFILE: case ENFILE: case ENOMEM: return "resource_exhausted";
        case EPIPE: return "failed_precondition";
        case EPERM: case EACCES: return "permission_denied";
        default: return "internal";
        }
}

static const char *init_message(const struct json *resp) {
        const char *m = json_get_str(json_get(resp, "error"), "message");
        return m ? m : "space-init failed";
}

/* ---- ops ---- */

static void pc_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                     const struct json *j);

static void pc_fail(struct op *op, void *client, int err, const char *msg) {
        struct pcall *pc = client;
        (void)op;
        (void)err;
        pc->op = NULL;
        pc_error(pc, "unavailable", "%s", msg);
}

static bool pc_behind(struct op *op, void *client) {
        struct pcall *pc = client;
        (void)op;
        return conn_over_high(pc->c);
}

static void pc_detach(struct op *op, void *client) {
        struct pcall *pc = client;
        if (pc->op == op)
                pc->op = NULL;
}

static const struct op_ops pc_ops = {
        .frame = pc_frame,
        .fail = pc_fail,
        .behind = pc_behind,
        .detach = pc_detach,
};

/* Sends r (freed) as the call's next op of kind; 0, or < 0 with the call answered. */
static int pc_send(struct pcall *pc, enum op_kind kind, struct api_json *r, struct op **ret) {
        if (r->w.depth > 0)
                json_w_obj_end(&r->w);
        if (r->w.err) {
                buf_free(&r->b);
                pc_error(pc, "resource_exhausted", "the request to space-init is over %u bytes", PROTO_MAX_JSON);
                return -E2BIG;
        }
        struct op *op;
        if (ses_op_new(pc->s, kind, &pc_ops, pc, &op) < 0) {
                buf_free(&r->b);
                pc_error(pc, "internal", "out of memory");
                return -ENOMEM;
        }
        pc->op = op;
        if (ret)
                *ret = op;
        if (r->window)
                op_window_start(op);
        int e = ses_send_req(pc->s, op->id, &r->b);
        buf_free(&r->b);
        if (e < 0) {
                op_done(op);
                pc_error(pc, e == -EPIPE ? "unavailable" : "internal", "sending to space-init: %s", strerror(-e));
        }
        return e;
}

/* ---- the request ---- */

/* The request message: a stream's body is one Connect envelope (flags 0, length, JSON), a
 * unary call's is the JSON itself. An object, or the call answered invalid_argument. */
static int pc_body(struct pcall *pc, struct json **ret) {
        const struct conn *c = pc->c;
        const char *data = c->body.data ? c->body.data : "";
        size_t n = c->body.len;
        if (pc->stream) {
                const uint8_t *u = (const uint8_t *)data;
                uint32_t len = n >= 5 ? (uint32_t)u[1] << 24 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 8 | u[4] : 0;
                if (n < 5 || u[0] != 0 || len != n - 5) {
                        pc_error(pc, "invalid_argument", "the body of a streaming call is one uncompressed Connect "
                                                         "envelope (flags 0, 4-byte length, the JSON)");
                        return -EINVAL;
                }
                data += 5;
                n = len;
        }
        char err[128] = "";
        int r = n ? json_parse(data, n, ret, err, sizeof err) : json_parse("{}", 2, ret, NULL, 0);
        if (r < 0 || json_type(*ret) != JSON_OBJECT) {
                if (r == 0)
                        *ret = json_free(*ret);
                pc_error(pc, "invalid_argument", "the request is not a JSON object%s%s", err[0] ? ": " : "", err);
                return -EINVAL;
        }
        return 0;
}

/* A proto3 uint32 in JSON: a number or a string of digits. */
static int json_u32(const struct json *v, int64_t *ret) {
        int64_t x;
        if (json_type(v) == JSON_STRING) {
                const char *s = json_str(v);
                char *end;
                errno = 0;
                long long l = strtoll(s, &end, 10);
                if (!*s || *end || errno)
                        return -EINVAL;
                x = l;
        } else if (json_int(v, &x) < 0) {
                return -EINVAL;
        }
        if (x < 0 || x > UINT32_MAX)
                return -EINVAL;
        *ret = x;
        return 0;
}

/* ProcessSelector {"pid":N} or {"tag":"..."} into pc. */
static int pc_selector(struct pcall *pc, const struct json *body) {
        const struct json *sel = json_get(body, "process");
        const struct json *pid = json_get(sel, "pid"), *tag = json_get(sel, "tag");
        if (json_type(sel) != JSON_OBJECT) {
                pc_error(pc, "invalid_argument", "\"process\" must be a selector {\"pid\":N} or {\"tag\":\"...\"}");
                return -EINVAL;
        }
        if (pid && json_type(pid) != JSON_NULL) {
                if (json_u32(pid, &pc->pid) < 0 || pc->pid <= 0 || pc->pid > INT32_MAX) {
                        pc_error(pc, "invalid_argument", "\"process.pid\" must be a positive integer");
                        return -EINVAL;
                }
                return 0;
        }
        const char *t = json_str(tag);
        if (!t || !*t || strlen(t) > PROTO_MAX_TAG) {
                pc_error(pc, "invalid_argument", "\"process\" needs a pid or a tag of 1 to %d bytes", PROTO_MAX_TAG);
                return -EINVAL;
        }
        snprintf(pc->tag, sizeof pc->tag, "%s", t);
        return 0;
}

/* A new call of c, hooked to it; a stream's head goes out at once (so that every error,
 * whenever it comes, is an end-stream: a non-200 stream loses its message in the SDK). */
static struct pcall *pc_new(struct conn *c, enum pc_kind kind) {
        struct pcall *pc = calloc(1, sizeof *pc);
        if (!pc) {
                e2b_rpc_error(c, "internal", "out of memory");
                return NULL;
        }
        pc->c = c;
        pc->kind = kind;
        pc->stream = kind == PC_START || kind == PC_CONNECT;
        pc->input = BUF_INIT(0);
        pc->timer.fd = -1;
        conn_set_hook(c, pc->stream ? &stream_hook : &unary_hook, pc);
        if (pc->stream)
                /* No keepalive before the start event: the SDK takes any other first
                 * message for a broken stream ("Expected start event"). */
                e2b_stream_begin(&pc->st, c, NULL);
        return pc;
}

/* The session, running, with an init that has what this needs; else the call answered. */
static bool pc_session(struct pcall *pc) {
        pc->s = api_session(pc->c, true);
        if (!pc->s)
                return false;
        if (!pc->s->init_input) {
                pc_error(pc, "unimplemented",
                         "the space-init of session %s is too old for E2B's process service (pause and resume it)",
                         pc->s->id);
                return false;
        }
        return true;
}

/* ---- events ---- */

static void pc_event(struct pcall *pc, struct buf *b) {
        if (!b->data) {
                buf_free(b);
                return;
        }
        e2b_stream_msg(&pc->st, b->data, b->len);
        buf_free(b);
}

static void send_start_event(struct pcall *pc) {
        struct buf b = BUF_INIT(0);
        (void)buf_printf(&b, "{\"event\":{\"start\":{\"pid\":%lld}}}", (long long)pc->pid);
        pc_event(pc, &b);
        pc->started = true;
        pc->st.keepalive = KEEPALIVE;
}

static void send_data_event(struct pcall *pc, uint8_t type, const uint8_t *data, size_t n) {
        if (n == 0)
                return;
        const char *key = pc->pty ? "pty" : type == PROTO_STDERR ? "stderr" : "stdout";
        struct buf b = BUF_INIT(0);
        (void)buf_printf(&b, "{\"event\":{\"data\":{\"%s\":\"", key);
        e2b_b64_encode(data, n, &b);
        (void)buf_puts(&b, "\"}}}");
        pc_event(pc, &b);
}

/* What Go's os.ProcessState.String() says, as envd reports it: "exit status 1",
 * "signal: killed" (glibc's descriptions are Go's with a capital). */
static void exit_status_text(const struct json *exit, char *out, size_t n, int64_t *ret_code, bool *ret_exited) {
        int64_t v;
        if (json_get_int(exit, "signal", &v) == 0) {
                const char *d = v > 0 && v < 65 ? sigdescr_np((int)v) : NULL;
                char low[64];
                snprintf(low, sizeof low, "%s", d ? d : "unknown signal");
                if (low[0] >= 'A' && low[0] <= 'Z')
                        low[0] = (char)(low[0] - 'A' + 'a');
                snprintf(out, n, "signal: %s", low);
                *ret_code = -1;
                *ret_exited = false;
                return;
        }
        v = 0;
        (void)json_get_int(exit, "exit_code", &v);
        snprintf(out, n, "exit status %lld", (long long)v);
        *ret_code = v;
        *ret_exited = true;
}

/* The attach's EXIT: the end event, then the end of the stream. */
static void send_end(struct pcall *pc, const struct json *exit) {
        if (json_get(exit, "error")) {
                const char *m = json_get_str(json_get(exit, "error"), "message");
                pc_error(pc, "internal", "the process's output stream failed: %s", m ? m : "?");
                return;
        }
        if (json_get_bool(exit, "running", false)) {
                pc_error(pc, "internal", "the process's output stream ended while it runs");
                return;
        }
        char status[96];
        int64_t code;
        bool exited;
        exit_status_text(exit, status, sizeof status, &code, &exited);
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "event");
        json_w_obj_begin(&w);
        json_w_key(&w, "end");
        json_w_obj_begin(&w);
        json_w_kint(&w, "exitCode", code);
        json_w_kbool(&w, "exited", exited);
        json_w_kstr(&w, "status", status);
        if (code != 0)
                json_w_kstr(&w, "error", status);
        json_w_obj_end(&w);
        json_w_obj_end(&w);
        json_w_obj_end(&w);
        pc_event(pc, &b);
        if (json_get_bool(exit, "timed_out", false))
                /* envd's process context ran out: the call's deadline, as the client sees it */
                e2b_stream_end(&pc->st, "deadline_exceeded", "the process was killed at its Connect-Timeout-Ms");
        else
                e2b_stream_end(&pc->st, NULL, NULL);
}

/* ---- the steps ---- */

/* An attach to pc->pid: Start's from its first byte, Connect's from now on. */
static void send_attach(struct pcall *pc) {
        struct api_json r;
        api_req_begin(&r, "attach");
        json_w_kint(&r.w, "pid", pc->pid);
        json_w_kint(&r.w, "offset", pc->kind == PC_START ? 0 : INT64_MAX);
        json_w_kbool(&r.w, "follow", true);
        /* envd's streams lose nothing: the process waits for a stream that lags (as a
         * terminal does for its screen) rather than the ring dropping what it has not sent */
        json_w_kbool(&r.w, "hold", true);
        api_req_window(&r, pc->s);
        (void)pc_send(pc, OP_ATTACH, &r, NULL);
}

/* ps, to find the running process of pc->tag. */
static void send_ps(struct pcall *pc) {
        struct api_json r;
        api_req_begin(&r, "ps");
        (void)pc_send(pc, OP_SIMPLE, &r, NULL);
}

static void send_input(struct pcall *pc) {
        struct api_json r;
        api_req_begin(&r, "input");
        r.b.max = PROTO_MAX_JSON;
        json_w_kint(&r.w, "pid", pc->pid);
        if (pc->kind == PC_CLOSE_STDIN) {
                json_w_kbool(&r.w, "eof", true);
        } else {
                size_t n = MIN((size_t)PROC_INPUT_CHUNK, pc->input.len - pc->input_off);
                struct buf b64 = BUF_INIT(0);
                e2b_b64_encode(pc->input.data ? pc->input.data + pc->input_off : "", n, &b64);
                json_w_key(&r.w, "data");
                json_w_strn(&r.w, b64.data ? b64.data : "", b64.len);
                buf_free(&b64);
                pc->input_off += n;
        }
        (void)pc_send(pc, OP_SIMPLE, &r, NULL);
}

/* The step after the selector is resolved (pc->pid known). */
static void pc_next(struct pcall *pc) {
        struct api_json r;
        switch (pc->kind) {
        case PC_CONNECT:
                send_attach(pc);
                return;
        case PC_INPUT:
        case PC_CLOSE_STDIN:
                send_input(pc);
                return;
        case PC_SIGNAL:
                api_req_begin(&r, "signal");
                json_w_kint(&r.w, "pid", pc->pid);
                json_w_kint(&r.w, "signal", pc->signal);
                json_w_kbool(&r.w, "group", true);
                (void)pc_send(pc, OP_SIMPLE, &r, NULL);
                return;
        case PC_UPDATE:
                if (pc->rows == 0) {
                        pc_reply(pc, NULL); /* nothing to change */
                        return;
                }
                api_req_begin(&r, "resize");
                json_w_kint(&r.w, "pid", pc->pid);
                json_w_kint(&r.w, "rows", pc->rows);
                json_w_kint(&r.w, "cols", pc->cols);
                (void)pc_send(pc, OP_SIMPLE, &r, NULL);
                return;
        case PC_START:
        case PC_LIST:
                return; /* not selector calls */
        }
}

/* The call's selector: by pid at once, by tag after a ps. */
static void pc_resolve(struct pcall *pc) {
        if (pc->pid > 0)
                pc_next(pc);
        else
                send_ps(pc);
}

/* ps's RESP for a tag: the newest running process that has it. */
static void on_tag_ps(struct pcall *pc, const struct json *resp) {
        const struct json *procs = json_get(resp, "processes");
        for (size_t i = json_len(procs); i-- > 0;) {
                const struct json *p = json_at(procs, i);
                const char *t = json_get_str(p, "tag");
                int64_t pid;
                if (t && strcmp(t, pc->tag) == 0 && json_get_bool(p, "running", false) &&
                    json_get_int(p, "pid", &pid) == 0) {
                        pc->pid = pid;
                        pc_next(pc);
                        return;
                }
        }
        pc_error(pc, "not_found", "process with tag '%s' not found", pc->tag);
}

/* The request's envs of a ps entry: init keeps the env its exec carried, which begins with
 * the session's own (api sends them first); those are not the request's. */
static bool env_is_session(const struct session *s, const char *e) {
        for (size_t i = 0; i < s->n_env; i++)
                if (strcmp(s->env[i], e) == 0)
                        return true;
        return false;
}

/* ps's RESP -> ListResponse: the running processes (commands and terminals). */
static void on_list_ps(struct pcall *pc, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "processes");
        json_w_arr_begin(&w);
        const struct json *procs = json_get(resp, "processes");
        for (size_t i = 0; i < json_len(procs); i++) {
                const struct json *p = json_at(procs, i);
                const struct json *argv = json_get(p, "argv"), *env = json_get(p, "env");
                int64_t pid;
                if (!json_get_bool(p, "running", false) || json_get_int(p, "pid", &pid) < 0)
                        continue;
                json_w_obj_begin(&w);
                json_w_key(&w, "config");
                json_w_obj_begin(&w);
                const char *cmd = json_str(json_at(argv, 0));
                json_w_kstr(&w, "cmd", cmd ? cmd : "");
                json_w_key(&w, "args");
                json_w_arr_begin(&w);
                for (size_t k = 1; k < json_len(argv); k++)
                        if (json_str(json_at(argv, k)))
                                json_w_str(&w, json_str(json_at(argv, k)));
                json_w_arr_end(&w);
                json_w_key(&w, "envs");
                json_w_obj_begin(&w);
                for (size_t k = 0; k < json_len(env); k++) {
                        const char *e = json_str(json_at(env, k));
                        const char *eq = e ? strchr(e, '=') : NULL;
                        if (!eq || env_is_session(pc->s, e))
                                continue;
                        char key[256];
                        snprintf(key, sizeof key, "%.*s", (int)MIN((size_t)(eq - e), sizeof key - 1), e);
                        json_w_kstr(&w, key, eq + 1);
                }
                json_w_obj_end(&w);
                const char *cwd = json_get_str(p, "cwd");
                if (cwd)
                        json_w_kstr(&w, "cwd", cwd);
                json_w_obj_end(&w);
                json_w_kint(&w, "pid", pid);
                const char *tag = json_get_str(p, "tag");
                if (tag)
                        json_w_kstr(&w, "tag", tag);
                json_w_obj_end(&w);
        }
        json_w_arr_end(&w);
        json_w_obj_end(&w);
        if (w.err) {
                buf_free(&b);
                pc_error(pc, "internal", "out of memory");
                return;
        }
        pc_reply(pc, &b);
        buf_free(&b);
}

/* The exec's RESP (Start): the start event, then the attach that streams the output. */
static void on_exec_resp(struct pcall *pc, const struct json *resp) {
        const struct json *e = json_get(resp, "error");
        if (e) {
                if (json_get_bool(e, "user", false))
                        pc_error(pc, "unauthenticated", "invalid username: %s", init_message(resp));
                else if (json_get_bool(e, "cwd", false))
                        pc_error(pc, "invalid_argument", "%s", init_message(resp));
                else
                        pc_error(pc, code_of_init_error(e), "error starting process: %s", init_message(resp));
                return;
        }
        if (json_get_int(resp, "pid", &pc->pid) < 0 || pc->pid <= 0) {
                pc_error(pc, "internal", "space-init answered the exec without a pid");
                return;
        }
        send_start_event(pc);
        send_attach(pc);
}

static void on_attach_resp(struct pcall *pc, const struct json *resp) {
        const struct json *e = json_get(resp, "error");
        if (e) {
                if (strcmp(code_of_init_error(e), "not_found") == 0)
                        pc_error(pc, "not_found", "process with pid %lld not found", (long long)pc->pid);
                else
                        pc_error(pc, code_of_init_error(e), "%s", init_message(resp));
                return;
        }
        /* Connect learns here whether it is a terminal (its output is "pty" data). */
        pc->pty = json_get_bool(resp, "tty", pc->pty);
        if (pc->kind == PC_CONNECT) {
                /* envd forgets a process when it ends: connecting to it then is not_found. */
                if (!json_get_bool(resp, "running", false)) {
                        pc_error(pc, "not_found", "process with pid %lld not found (it has ended)", (long long)pc->pid);
                        return;
                }
                send_start_event(pc);
        }
}

/* A unary op's RESP: errors in E2B's words, the next chunk, or {}. */
static void on_unary_resp(struct pcall *pc, const struct json *resp) {
        const struct json *e = json_get(resp, "error");
        if (e) {
                const char *code = code_of_init_error(e);
                if (strcmp(code, "not_found") == 0)
                        pc_error(pc, code, "process with pid %lld not found", (long long)pc->pid);
                else if (strcmp(code, "failed_precondition") == 0)
                        pc_error(pc, code, "stdin not enabled or closed: %s", init_message(resp));
                else
                        pc_error(pc, code, "%s", init_message(resp));
                return;
        }
        if (pc->kind == PC_INPUT && pc->input_off < pc->input.len) {
                send_input(pc);
                return;
        }
        pc_reply(pc, NULL);
}

static void pc_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                     const struct json *j) {
        struct pcall *pc = client;
        if (pc->freed)
                return;
        switch (h->type) {
        case PROTO_RESP:
                if (op->kind == OP_EXEC)
                        on_exec_resp(pc, j);
                else if (op->kind == OP_ATTACH)
                        on_attach_resp(pc, j);
                else if (pc->pid <= 0 && pc->kind != PC_LIST)
                        json_get(j, "error") ? pc_error(pc, "internal", "%s", init_message(j)) : on_tag_ps(pc, j);
                else if (pc->kind == PC_LIST)
                        json_get(j, "error") ? pc_error(pc, "internal", "%s", init_message(j)) : on_list_ps(pc, j);
                else
                        on_unary_resp(pc, j);
                return;
        case PROTO_STDOUT:
        case PROTO_STDERR:
                if (op->kind == OP_ATTACH && pc->started)
                        send_data_event(pc, h->type, payload, h->len);
                return;
        case PROTO_EXIT:
                if (op->kind != OP_ATTACH)
                        return;
                /* The op ends with this frame: it needs nothing more from us. */
                op_client_done(op);
                pc->op = NULL;
                if (pc->started)
                        send_end(pc, j);
                else
                        pc_error(pc, "not_found", "process with pid %lld not found (it has ended)", (long long)pc->pid);
                return;
        default:
                return;
        }
}

/* ---- Connect's deadline ---- */

static void timer_cb(struct loop_src *src, uint32_t revents) {
        struct pcall *pc = (struct pcall *)((char *)src - offsetof(struct pcall, timer));
        (void)revents;
        /* Once: a level-triggered timerfd left armed would fire on every loop. */
        loop_del(pc->c->d->loop, &pc->timer);
        pc->timer.fd = safe_close(pc->timer.fd);
        /* Only the stream ends: the process keeps the deadline its Start gave it. */
        pc_error(pc, "deadline_exceeded", "Connect-Timeout-Ms passed");
}

static int pc_arm_timer(struct pcall *pc, int64_t ms) {
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct itimerspec its = { .it_value = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 } };
        if (timerfd_settime(fd, 0, &its, NULL) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        pc->timer = (struct loop_src){ .fd = fd, .cb = timer_cb };
        int r = loop_add(pc->c->d->loop, &pc->timer, EPOLLIN);
        if (r < 0)
                pc->timer.fd = safe_close(fd);
        return r;
}

/* ---- handlers ---- */

/* StartRequest {process:{cmd,args,envs,cwd}, pty?:{size:{cols,rows}}, tag?, stdin?}. */
void e2b_process_start(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_START);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc))
                return;
        struct session *s = pc->s;
        char user[API_USER_MAX], home[PROTO_MAX_PATH], cwd[PROTO_MAX_PATH + 1];
        int64_t timeout_ms;
        if (e2b_request_user(c, NULL, user) < 0 || e2b_timeout_ms(c, &timeout_ms) < 0)
                return;
        const struct json *proc = json_get(body, "process");
        const char *cmd = json_get_str(proc, "cmd");
        const struct json *args = json_get(proc, "args"), *jcwd = json_get(proc, "cwd");
        if (json_type(proc) != JSON_OBJECT || !cmd || !*cmd)
                return pc_error(pc, "invalid_argument", "\"process.cmd\" must be a non-empty string");
        if (args && json_type(args) != JSON_NULL && json_type(args) != JSON_ARRAY)
                return pc_error(pc, "invalid_argument", "\"process.args\" must be an array of strings");
        if (json_len(args) + 1 + s->n_env + SES_MAX_ENV > PROTO_MAX_ARGV)
                return pc_error(pc, "resource_exhausted", "over %d arguments", PROTO_MAX_ARGV - 1 - SES_MAX_ENV);
        for (size_t i = 0; i < json_len(args); i++)
                if (!json_str(json_at(args, i)))
                        return pc_error(pc, "invalid_argument", "\"process.args\" must be an array of strings");
        const char *cwd_in = jcwd && json_type(jcwd) != JSON_NULL ? json_str(jcwd) : NULL;
        if (jcwd && json_type(jcwd) != JSON_NULL && !cwd_in)
                return pc_error(pc, "invalid_argument", "\"process.cwd\" must be a string");
        e2b_home_of(user, home, sizeof home);
        if (cwd_in && e2b_abs_path(cwd_in, home, cwd, sizeof cwd) < 0)
                return pc_error(pc, "invalid_argument", "\"process.cwd\" is over %d bytes", PROTO_MAX_PATH);
        const struct json *jtag = json_get(body, "tag");
        const char *tag = jtag && json_type(jtag) != JSON_NULL ? json_str(jtag) : NULL;
        if ((jtag && json_type(jtag) != JSON_NULL && !tag) || (tag && strlen(tag) > PROTO_MAX_TAG))
                return pc_error(pc, "invalid_argument", "\"tag\" must be a string of at most %d bytes", PROTO_MAX_TAG);
        const struct json *jpty = json_get(body, "pty");
        pc->pty = jpty && json_type(jpty) != JSON_NULL;
        int64_t rows = PROC_PTY_DEFAULT_ROWS, cols = PROC_PTY_DEFAULT_COLS;
        if (pc->pty) {
                const struct json *size = json_get(jpty, "size");
                if (json_type(jpty) != JSON_OBJECT || (size && json_type(size) != JSON_OBJECT) ||
                    (json_get(size, "rows") && json_u32(json_get(size, "rows"), &rows) < 0) ||
                    (json_get(size, "cols") && json_u32(json_get(size, "cols"), &cols) < 0) || rows < 1 ||
                    rows > PROTO_MAX_TTY_DIM || cols < 1 || cols > PROTO_MAX_TTY_DIM)
                        return pc_error(pc, "invalid_argument", "\"pty.size\" must be {\"cols\",\"rows\"} of 1 to %d",
                                        PROTO_MAX_TTY_DIM);
        }
        /* envd keeps stdin open when the field is absent (older SDKs always had it). */
        const struct json *jstdin = json_get(body, "stdin");
        if (jstdin && json_type(jstdin) != JSON_NULL && json_type(jstdin) != JSON_BOOL)
                return pc_error(pc, "invalid_argument", "\"stdin\" must be true or false");
        bool want_stdin = !pc->pty && (!jstdin || json_type(jstdin) == JSON_NULL || json_is_true(jstdin));
        char **env = NULL;
        size_t n_env = 0;
        const char *why = "bad envs";
        const struct json *envs = json_get(proc, "envs");
        if (envs && json_type(envs) != JSON_NULL && ses_parse_env(envs, &env, &n_env, &why) < 0)
                return pc_error(pc, "invalid_argument", "process.envs: %s", why);

        struct api_json r;
        api_req_begin(&r, "exec");
        r.b.max = PROTO_MAX_JSON;
        json_w_key(&r.w, "argv");
        json_w_arr_begin(&r.w);
        json_w_str(&r.w, cmd);
        for (size_t i = 0; i < json_len(args); i++)
                json_w_str(&r.w, json_str(json_at(args, i)));
        json_w_arr_end(&r.w);
        api_req_env(&r, s, NULL, env, n_env);
        for (size_t i = 0; i < n_env; i++)
                free(env[i]);
        free(env);
        /* Without a cwd init starts it in the user's home from /etc/passwd (E2B's default). */
        if (cwd_in)
                json_w_kstr(&r.w, "cwd", cwd);
        /* envd kills the process at the call's deadline, not when the stream closes. */
        json_w_kint(&r.w, "timeout_ms", timeout_ms);
        json_w_kbool(&r.w, "stdin", want_stdin);
        json_w_kbool(&r.w, "background", true);
        api_req_user(&r, user);
        if (tag && *tag)
                json_w_kstr(&r.w, "tag", tag);
        if (pc->pty) {
                json_w_key(&r.w, "tty");
                json_w_obj_begin(&r.w);
                json_w_kint(&r.w, "rows", rows);
                json_w_kint(&r.w, "cols", cols);
                json_w_obj_end(&r.w);
        }
        struct op *op;
        struct buf argv_text = BUF_INIT(0);
        struct json_writer aw = JSON_WRITER_INIT(&argv_text);
        json_w_arr_begin(&aw);
        json_w_str(&aw, cmd);
        for (size_t i = 0; i < json_len(args); i++)
                json_w_str(&aw, json_str(json_at(args, i)));
        json_w_arr_end(&aw);
        if (pc_send(pc, OP_EXEC, &r, &op) < 0 || op->done) {
                buf_free(&argv_text);
                return;
        }
        /* For the event log, as SPACE's own exec has it. */
        op->background = true;
        op->started_ms = meta_now_ms();
        if (!aw.err && buf_append(&argv_text, "", 1) == 0)
                op->argv_json = TAKE_PTR(argv_text.data);
        buf_free(&argv_text);
}

/* ConnectRequest {process: selector}. */
void e2b_process_connect(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_CONNECT);
        _cleanup_json_ struct json *body = NULL;
        int64_t timeout_ms;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc) || pc_selector(pc, body) < 0 ||
            e2b_timeout_ms(c, &timeout_ms) < 0)
                return;
        if (timeout_ms > 0 && pc_arm_timer(pc, timeout_ms) < 0)
                return pc_error(pc, "internal", "cannot arm the deadline: %m");
        pc_resolve(pc);
}

void e2b_process_list(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_LIST);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc))
                return;
        send_ps(pc);
}

/* SendInputRequest {process: selector, input: {stdin|pty: base64}}. */
void e2b_process_send_input(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_INPUT);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc) || pc_selector(pc, body) < 0)
                return;
        const struct json *in = json_get(body, "input");
        const struct json *v = json_get(in, "stdin");
        if (!v || json_type(v) == JSON_NULL)
                v = json_get(in, "pty");
        const char *data = json_str(v);
        if (json_type(in) != JSON_OBJECT || !data)
                return pc_error(pc, "invalid_argument", "\"input\" must be {\"stdin\":base64} or {\"pty\":base64}");
        if (e2b_b64_decode(data, strlen(data), &pc->input) < 0)
                return pc_error(pc, "invalid_argument", "\"input\" is not valid base64");
        pc_resolve(pc);
}

void e2b_process_close_stdin(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_CLOSE_STDIN);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc) || pc_selector(pc, body) < 0)
                return;
        pc_resolve(pc);
}

/* SendSignalRequest {process: selector, signal: "SIGNAL_SIGKILL"|"SIGNAL_SIGTERM"|9|15}. */
void e2b_process_send_signal(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_SIGNAL);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc) || pc_selector(pc, body) < 0)
                return;
        const struct json *v = json_get(body, "signal");
        const char *name = json_str(v);
        int64_t n = 0;
        if (name && strcmp(name, "SIGNAL_SIGKILL") == 0)
                n = 9;
        else if (name && strcmp(name, "SIGNAL_SIGTERM") == 0)
                n = 15;
        else if (v)
                (void)json_u32(v, &n); /* proto3 JSON: an enum may come as its number */
        if (n != 9 && n != 15)
                return pc_error(pc, "invalid_argument", "\"signal\" must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        pc->signal = n;
        pc_resolve(pc);
}

/* UpdateRequest {process: selector, pty?: {size: {cols, rows}}}. */
void e2b_process_update(struct conn *c) {
        struct pcall *pc = pc_new(c, PC_UPDATE);
        _cleanup_json_ struct json *body = NULL;
        if (!pc || pc_body(pc, &body) < 0 || !pc_session(pc) || pc_selector(pc, body) < 0)
                return;
        const struct json *pty = json_get(body, "pty");
        if (pty && json_type(pty) != JSON_NULL) {
                const struct json *size = json_get(pty, "size");
                if (json_type(pty) != JSON_OBJECT || json_type(size) != JSON_OBJECT ||
                    json_u32(json_get(size, "rows"), &pc->rows) < 0 || json_u32(json_get(size, "cols"), &pc->cols) < 0 ||
                    pc->rows < 1 || pc->rows > PROTO_MAX_TTY_DIM || pc->cols < 1 || pc->cols > PROTO_MAX_TTY_DIM)
                        return pc_error(pc, "invalid_argument", "\"pty.size\" must be {\"cols\",\"rows\"} of 1 to %d",
                                        PROTO_MAX_TTY_DIM);
        }
        pc_resolve(pc);
}
