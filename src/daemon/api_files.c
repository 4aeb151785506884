/* Route handlers for the files of a session: download and upload stream as DATA frames
 * (an upload never sits in memory whole: the client is paused while init's queue is
 * full), list/stat/mkdir/remove are single requests. Paths are resolved by space-init
 * inside the sandbox root, which refuses to leave it (docs/protocol.md §3.13). */
#include <string.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/spaced.h"

/* The decoded ?path= of the request; answers 400 itself when missing or bad. */
static int query_path(struct conn *c, const char *key, char *out, size_t outsz) {
        int r = http_query_get(c->req->query, key, out, outsz);
        if (r == -ENOENT)
                conn_reply_error(c, 400, "query parameter %s is required", key);
        else if (r == -ENAMETOOLONG)
                conn_reply_error(c, 400, "%s is longer than %d bytes", key, PROTO_MAX_PATH);
        else if (r < 0)
                conn_reply_error(c, 400, "%s: bad percent-encoding", key);
        else if (!*out) {
                conn_reply_error(c, 400, "%s must not be empty", key);
                r = -EINVAL;
        }
        return r;
}

void api_file_get(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        char path[PROTO_MAX_PATH + 1];
        if (query_path(c, "path", path, sizeof path) < 0)
                return;
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "read");
        json_w_kstr(&w, "path", path);
        json_w_kint(&w, "offset", 0);
        json_w_kint(&w, "length", -1);
        bool windowed = ses_req_window(s, &w);
        json_w_obj_end(&w);
        struct op *op;
        int r = ses_op_new(s, c, OP_READ, &op);
        if (r == 0 && windowed)
                op_window_start(op);
        if (r == 0 && (r = ses_send_req(s, op->id, &req)) < 0)
                op_done(op);
        buf_free(&req);
        if (r < 0)
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
}

static int upload_body(struct conn *c, const char *data, size_t n) {
        struct op *op = c->op;
        if (!op)
                return 0; /* answered already (sandbox died): the rest is dropped */
        struct session *s = op->ses;
        for (size_t off = 0; off < n; off += SES_UPLOAD_FRAME) {
                int r = ses_send(s, PROTO_DATA, op->id, data + off, MIN((size_t)SES_UPLOAD_FRAME, n - off));
                if (r < 0) {
                        op_done(op);
                        conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
                        return 0;
                }
        }
        op->bytes += n;
        /* Init's queue is full: read no more from this client until it drains. */
        if (ses_out_full(s))
                c->in_paused = true;
        return 0;
}

static void upload_end(struct conn *c) {
        struct op *op = c->op;
        if (!op)
                return;
        int r = ses_send(op->ses, PROTO_DATA, op->id, NULL, 0);
        if (r < 0) {
                op_done(op);
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
        }
        /* The RESP {"written":N} answers (session.c). */
}

void api_file_put(struct conn *c) {
        /* Called at the head: the body streams through upload_body. */
        struct session *s = api_session(c, true);
        if (!s)
                return;
        char path[PROTO_MAX_PATH + 1], mode_s[16];
        if (query_path(c, "path", path, sizeof path) < 0)
                return;
        long mode = 0644;
        int r = http_query_get(c->req->query, "mode", mode_s, sizeof mode_s);
        if (r == 0) {
                char *end;
                mode = strtol(mode_s, &end, 8);
                if (!*mode_s || *end || mode < 0 || mode > 07777) {
                        conn_reply_error(c, 400, "mode must be octal, like 0644");
                        return;
                }
        } else if (r != -ENOENT) {
                conn_reply_error(c, 400, "mode must be octal, like 0644");
                return;
        }
        bool parents, append;
        if (api_query_bool(c, "parents", false, &parents) < 0 || api_query_bool(c, "append", false, &append) < 0)
                return;
        const struct http_request *h = c->req;
        /* No body at all writes an empty file. */
        if (h->has_length && h->content_length > HTTP_MAX_UPLOAD) {
                conn_reply_error(c, 413, "upload over %u bytes", HTTP_MAX_UPLOAD);
                return;
        }
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "write");
        json_w_kstr(&w, "path", path);
        json_w_kint(&w, "mode", mode);
        json_w_kbool(&w, "append", append);
        json_w_kbool(&w, "parents", parents);
        json_w_obj_end(&w);
        struct op *op;
        r = ses_op_new(s, c, OP_WRITE, &op);
        if (r == 0 && (r = ses_send_req(s, op->id, &req)) < 0)
                op_done(op);
        buf_free(&req);
        if (r < 0) {
                conn_reply_error(c, r == -EPIPE ? 503 : 500, "sending to space-init: %s", strerror(-r));
                return;
        }
        c->on_body = upload_body;
        c->on_body_end = upload_end;
        conn_continue(c);
}

/* remove answers 204 No Content. */
static void remove_resp(struct conn *c, const struct json *resp) {
        (void)resp;
        conn_reply_empty(c, 204);
}

void api_file_delete(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        char path[PROTO_MAX_PATH + 1];
        bool recursive;
        if (query_path(c, "path", path, sizeof path) < 0 || api_query_bool(c, "recursive", false, &recursive) < 0)
                return;
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "remove");
        json_w_kstr(&w, "path", path);
        json_w_kbool(&w, "recursive", recursive);
        json_w_obj_end(&w);
        (void)api_simple_req(c, s, &req, remove_resp);
        buf_free(&req);
}

static void list_resp(struct conn *c, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "entries");
        const struct json *e = json_get(resp, "entries");
        if (e && json_type(e) == JSON_ARRAY)
                json_w_value(&w, e);
        else {
                json_w_arr_begin(&w);
                json_w_arr_end(&w);
        }
        json_w_kbool(&w, "truncated", json_get_bool(resp, "truncated", false));
        json_w_obj_end(&w);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_file_list(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        char path[PROTO_MAX_PATH + 1], after[PROTO_MAX_PATH + 1] = "";
        int64_t limit;
        if (query_path(c, "path", path, sizeof path) < 0 ||
            api_query_int(c, "limit", 0, 0, PROTO_MAX_LIST, &limit) < 0)
                return;
        int r = http_query_get(c->req->query, "after", after, sizeof after);
        if (r < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "after: bad value");
                return;
        }
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "list");
        json_w_kstr(&w, "path", path);
        json_w_kstr(&w, "after", after);
        json_w_kint(&w, "limit", limit);
        json_w_obj_end(&w);
        (void)api_simple_req(c, s, &req, list_resp);
        buf_free(&req);
}

static void stat_resp(struct conn *c, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_value(&w, resp);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_file_stat(struct conn *c) {
        struct session *s = api_session(c, true);
        if (!s)
                return;
        char path[PROTO_MAX_PATH + 1];
        if (query_path(c, "path", path, sizeof path) < 0)
                return;
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "stat");
        json_w_kstr(&w, "path", path);
        json_w_obj_end(&w);
        (void)api_simple_req(c, s, &req, stat_resp);
        buf_free(&req);
}

void api_file_mkdir(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (api_body_json(c, &body) < 0)
                return;
        struct session *s = api_session(c, true);
        if (!s)
                return;
        const char *path = json_get_str(body, "path");
        if (!path || !*path || strlen(path) > PROTO_MAX_PATH) {
                conn_reply_error(c, 400, "path must be a non-empty string of at most %d bytes", PROTO_MAX_PATH);
                return;
        }
        int64_t mode = 0755;
        const struct json *m = json_get(body, "mode");
        if (m && (json_int(m, &mode) < 0 || mode < 0 || mode > 07777)) {
                conn_reply_error(c, 400, "mode must be an integer (0 to 4095)");
                return;
        }
        struct buf req = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&req);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "op", "mkdir");
        json_w_kstr(&w, "path", path);
        json_w_kbool(&w, "parents", json_get_bool(body, "parents", false));
        json_w_kint(&w, "mode", mode);
        json_w_obj_end(&w);
        (void)api_simple_req(c, s, &req, api_resp_created);
        buf_free(&req);
}
