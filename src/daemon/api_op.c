/* The API side of a request to a sandbox's space-init: the op (session.h) that carries
 * it, the connection hook that tells the op when its client goes, drains or is answered,
 * the REQ being written and sent, and the answer of a single-RESP request. The handlers
 * of streams fill their own op_ops (api_exec.c, api_files.c). */
#include <string.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/session.h"

/* ---- the connection's hook ---- */

static void op_hook_gone(struct conn *c, void *ctx) {
        (void)c;
        op_client_gone(ctx);
}

static void op_hook_done(struct conn *c, void *ctx) {
        struct op *op = ctx;
        (void)c;
        if (op->kind == OP_WRITE)
                op_client_gone(op); /* answered before the upload ended: abort it */
        else
                op_client_done(op);
}

static void op_hook_drained(struct conn *c, void *ctx) { op_client_drained(ctx, conn_below_low(c)); }

static const struct conn_hook_ops op_hook = {
        .gone = op_hook_gone,
        .done = op_hook_done,
        .drained = op_hook_drained,
};

/* Exec, attach, download, watch: a client that hangs up while it waits for one has left. */
static const struct conn_hook_ops op_stream_hook = {
        .gone = op_hook_gone,
        .done = op_hook_done,
        .drained = op_hook_drained,
        .hangup_is_gone = true,
};

struct op *api_conn_op(struct conn *c) {
        struct op *op = conn_hook_ctx(c, &op_hook);
        return op ? op : conn_hook_ctx(c, &op_stream_hook);
}

void api_op_fail(struct op *op, void *client, int err, const char *msg) {
        (void)op;
        conn_reply_error(client, api_status_of(err), "%s", msg);
}

bool api_op_behind(struct op *op, void *client) {
        (void)op;
        return conn_over_high(client);
}

void api_op_detach(struct op *op, void *client) { conn_clear_hook(client, op); }

/* ---- JSON being written ---- */

void api_json_begin(struct api_json *j) {
        j->b = BUF_INIT(0);
        j->w = JSON_WRITER_INIT(&j->b);
        j->window = false;
}

void api_json_reply(struct conn *c, int status, struct api_json *j) {
        conn_reply_json(c, status, &j->b);
        buf_free(&j->b);
}

void api_reply_list(struct conn *c, const struct json *resp, const char *key, bool truncated) {
        struct api_json j;
        api_json_begin(&j);
        json_w_obj_begin(&j.w);
        json_w_key(&j.w, key);
        const struct json *a = json_get(resp, key);
        if (a && json_type(a) == JSON_ARRAY) {
                json_w_value(&j.w, a);
        } else {
                json_w_arr_begin(&j.w);
                json_w_arr_end(&j.w);
        }
        if (truncated)
                json_w_kbool(&j.w, "truncated", json_get_bool(resp, "truncated", false));
        json_w_obj_end(&j.w);
        api_json_reply(c, 200, &j);
}

void api_reply_kint(struct conn *c, int status, const char *key, int64_t v) {
        struct api_json j;
        api_json_begin(&j);
        json_w_obj_begin(&j.w);
        json_w_kint(&j.w, key, v);
        json_w_obj_end(&j.w);
        api_json_reply(c, status, &j);
}

/* ---- requests to space-init ---- */

void api_req_begin(struct api_json *r, const char *op) {
        api_json_begin(r);
        json_w_obj_begin(&r->w);
        json_w_kstr(&r->w, "op", op);
}

void api_req_window(struct api_json *r, struct session *s) { r->window = ses_req_window(s, &r->w); }

struct op *api_op_new(struct conn *c, struct session *s, enum op_kind kind, const struct op_ops *ops) {
        struct op *op;
        if (ses_op_new(s, kind, ops, c, &op) < 0) {
                conn_reply_error(c, 500, "out of memory");
                return NULL;
        }
        bool stream = kind == OP_EXEC || kind == OP_ATTACH || kind == OP_READ || kind == OP_WATCH;
        conn_set_hook(c, stream ? &op_stream_hook : &op_hook, op);
        return op;
}

void api_op_send_failed(struct conn *c, struct op *op, int r) {
        op_done(op);
        conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
}

int api_op_send(struct conn *c, struct op *op, struct api_json *r) {
        if (r->w.depth > 0)
                json_w_obj_end(&r->w);
        if (r->window)
                op_window_start(op);
        int e = ses_send_req(op->ses, op->id, &r->b);
        buf_free(&r->b);
        if (e < 0)
                api_op_send_failed(c, op, e);
        return e;
}

struct op *api_req_send(struct conn *c, struct session *s, struct api_json *r, enum op_kind kind,
                        const struct op_ops *ops) {
        struct op *op = api_op_new(c, s, kind, ops);
        if (!op) {
                buf_free(&r->b);
                return NULL;
        }
        return api_op_send(c, op, r) < 0 ? NULL : op;
}

/* ---- single-RESP requests ---- */

typedef void (*resp_fn)(struct conn *, const struct json *);

static void simple_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                         const struct json *j) {
        (void)h;
        (void)payload;
        resp_fn on_resp = (resp_fn)op->handler_fn;
        if (api_resp_is_error(j))
                api_reply_init_error(client, j, false);
        else if (on_resp)
                on_resp(client, j);
}

static const struct op_ops simple_ops = {
        .frame = simple_frame,
        .fail = api_op_fail,
        .behind = api_op_behind,
        .detach = api_op_detach,
};

int api_simple_req(struct conn *c, struct session *s, const struct buf *req, resp_fn on_resp) {
        struct op *op = api_op_new(c, s, OP_SIMPLE, &simple_ops);
        if (!op)
                return -ENOMEM;
        op->handler_fn = (void (*)(void))on_resp;
        int r = ses_send_req(s, op->id, req);
        if (r < 0)
                api_op_send_failed(c, op, r);
        return r;
}

int api_req_simple(struct conn *c, struct session *s, struct api_json *r, resp_fn on_resp) {
        json_w_obj_end(&r->w);
        int e = api_simple_req(c, s, &r->b, on_resp);
        buf_free(&r->b);
        return e;
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

bool api_resp_is_error(const struct json *resp) { return json_get(resp, "error") != NULL; }

void api_reply_init_error(struct conn *c, const struct json *resp, bool exec) {
        const struct json *e = json_get(resp, "error");
        const char *code = json_get_str(e, "code");
        const char *msg = json_get_str(e, "message");
        int64_t err = 0;
        (void)json_get_int(e, "errno", &err);
        int status = util_errno_status((int)err);
        if (exec && status != 400 && status != 409)
                status = 422; /* the command could not be started */
        if (json_get_bool(e, "user", false))
                status = 400; /* a "user" the sandbox's /etc/passwd does not name */
        conn_reply_error(c, status, "%s", msg ? msg : code ? code : "space-init failed");
}
