/* Route handlers for the files of a session: download and upload stream as DATA frames
 * (an upload never sits in memory whole: the client is paused while init's queue is
 * full), a watch streams init's NDJSON events, list/stat/mkdir/remove are single requests. Paths are resolved by space-init
 * inside the sandbox root, which refuses to leave it (docs/protocol.md §3.13). */
#include <string.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/api.h"
#include "daemon/spaced.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/http.h"

/* ---- download and upload: the frames of their ops ---- */

static void read_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                       const struct json *j) {
        struct conn *c = client;
        switch (h->type) {
        case PROTO_RESP:
                if (api_resp_is_error(j))
                        api_reply_init_error(c, j, false);
                else
                        conn_stream_begin(c, 200, "application/octet-stream");
                return;
        case PROTO_DATA:
                if (h->len == 0)
                        conn_stream_end(c);
                else
                        conn_stream_chunk(c, payload, h->len);
                return;
        case PROTO_EXIT:
                conn_abort(c); /* failed midway: the download must not look complete */
                return;
        default:
                return;
        }
}

/* A download under way cannot change its status line: it ends truncated. */
static void read_fail(struct op *op, void *client, int err, const char *msg) {
        struct conn *c = client;
        if (c->streaming)
                conn_abort(c);
        else
                api_op_fail(op, client, err, msg);
}

static const struct op_ops read_ops = {
        .frame = read_frame,
        .fail = read_fail,
        .behind = api_op_behind,
        .detach = api_op_detach,
};

static void write_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                        const struct json *j) {
        (void)op;
        (void)payload;
        if (h->type != PROTO_RESP)
                return;
        if (api_resp_is_error(j)) {
                api_reply_init_error(client, j, false);
                return;
        }
        int64_t n = 0;
        (void)json_get_int(j, "written", &n);
        api_reply_kint(client, 201, "written", n);
}

/* init took queued data: the client's paused upload goes on. */
static void write_room(struct op *op, void *client) {
        struct conn *c = client;
        (void)op;
        if (c->in_paused)
                conn_resume_input(c);
}

static const struct op_ops write_ops = {
        .frame = write_frame,
        .fail = api_op_fail,
        .behind = api_op_behind,
        .room = write_room,
        .detach = api_op_detach,
};

/* ---- watch: init's NDJSON events passed on as they are ---- */

/* op->carry[0].n: the bytes passed on so far end inside a line (init may cut a line where
 * its window ended), so a last event of spaced's own must start a new line. */
static void watch_line_end(struct op *op, struct conn *c) {
        if (op->carry[0].n) {
                conn_stream_chunk(c, "\n", 1);
                op->carry[0].n = 0;
        }
}

static void watch_end_event(struct conn *c, const char *reason, const char *msg) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (msg) {
                json_w_kstr(&w, "type", "error");
                json_w_key(&w, "error");
                json_w_obj_begin(&w);
                json_w_kstr(&w, "code", "internal");
                json_w_kstr(&w, "message", msg);
                json_w_obj_end(&w);
        } else {
                json_w_kstr(&w, "type", "end");
                json_w_kstr(&w, "reason", reason);
        }
        json_w_obj_end(&w);
        if (!w.err)
                conn_stream_event(c, &b);
        buf_free(&b);
        conn_stream_end(c);
}

static void watch_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                        const struct json *j) {
        struct conn *c = client;
        switch (h->type) {
        case PROTO_RESP:
                if (!api_resp_is_error(j)) {
                        conn_stream_begin(c, 200, "application/x-ndjson");
                        return;
                }
                const char *code = json_get_str(json_get(j, "error"), "code");
                if (code && !strcmp(code, "EMFILE")) {
                        const char *m = json_get_str(json_get(j, "error"), "message");
                        conn_reply_error(c, 409, "%s", m ? m : "too many watches in this session");
                } else if (code && !strcmp(code, "ENOSPC")) {
                        const char *m = json_get_str(json_get(j, "error"), "message");
                        conn_reply_error(c, 400, "%s", m ? m : "too many directories to watch");
                } else
                        api_reply_init_error(c, j, false);
                return;
        case PROTO_STDOUT:
                if (h->len == 0)
                        return;
                conn_stream_chunk(c, payload, h->len);
                op->carry[0].n = payload[h->len - 1] != '\n';
                return;
        case PROTO_EXIT: {
                watch_line_end(op, c);
                const struct json *err = json_get(j, "error");
                const char *reason = json_get_str(j, "reason");
                if (err) {
                        const char *m = json_get_str(err, "message");
                        watch_end_event(c, NULL, m ? m : "the watch failed");
                } else
                        watch_end_event(c, reason ? reason : "ended", NULL);
                return;
        }
        default:
                return;
        }
}

/* The sandbox went (paused, died, deleted) or spaced stops: a stream under way ends with
 * an error event, as an exec's does. */
static void watch_fail(struct op *op, void *client, int err, const char *msg) {
        struct conn *c = client;
        if (c->streaming)
                watch_line_end(op, c);
        api_op_fail(op, client, err, msg);
}

static const struct op_ops watch_ops = {
        .frame = watch_frame,
        .fail = watch_fail,
        .behind = api_op_behind,
        .detach = api_op_detach,
};

/* ---- handlers ---- */

/* {"op":op,"path":path, ...}: every file request names its path first. */
static void file_req(struct api_json *r, const char *op, const char *path) {
        api_req_begin(r, op);
        json_w_kstr(&r->w, "path", path);
}

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

/* The running session of {id} and the request's ?path=; NULL when c was answered. */
static struct session *file_target(struct conn *c, char path[PROTO_MAX_PATH + 1]) {
        struct session *s = api_session(c, true);
        return s && query_path(c, "path", path, PROTO_MAX_PATH + 1) >= 0 ? s : NULL;
}

void api_file_get(struct conn *c) {
        char path[PROTO_MAX_PATH + 1];
        struct session *s = file_target(c, path);
        if (!s)
                return;
        struct api_json r;
        file_req(&r, "read", path);
        json_w_kint(&r.w, "offset", 0);
        json_w_kint(&r.w, "length", -1);
        api_req_window(&r, s);
        (void)api_req_send(c, s, &r, OP_READ, &read_ops);
}

static int upload_body(struct conn *c, const char *data, size_t n) {
        struct op *op = api_conn_op(c);
        if (!op)
                return 0; /* answered already (sandbox died): the rest is dropped */
        struct session *s = op->ses;
        for (size_t off = 0; off < n; off += SES_UPLOAD_FRAME) {
                int r = ses_send(s, PROTO_DATA, op->id, data + off, MIN((size_t)SES_UPLOAD_FRAME, n - off));
                if (r < 0) {
                        api_op_send_failed(c, op, r);
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
        struct op *op = api_conn_op(c);
        if (!op)
                return;
        int r = ses_send(op->ses, PROTO_DATA, op->id, NULL, 0);
        if (r < 0)
                api_op_send_failed(c, op, r);
        /* The RESP {"written":N} answers (write_frame). */
}

void api_file_put(struct conn *c) {
        /* Called at the head: the body streams through upload_body. */
        char path[PROTO_MAX_PATH + 1], mode_s[16];
        struct session *s = file_target(c, path);
        if (!s)
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
        char user[API_USER_MAX];
        if (api_query_bool(c, "parents", false, &parents) < 0 || api_query_bool(c, "append", false, &append) < 0 ||
            api_query_user(c, user) < 0)
                return;
        const struct http_request *h = c->req;
        /* No body at all writes an empty file. */
        if (h->has_length && h->content_length > HTTP_MAX_UPLOAD) {
                conn_reply_error(c, 413, "upload over %u bytes", HTTP_MAX_UPLOAD);
                return;
        }
        struct api_json req;
        file_req(&req, "write", path);
        json_w_kint(&req.w, "mode", mode);
        json_w_kbool(&req.w, "append", append);
        json_w_kbool(&req.w, "parents", parents);
        api_req_user(&req, user);
        if (!api_req_send(c, s, &req, OP_WRITE, &write_ops))
                return;
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
        char path[PROTO_MAX_PATH + 1];
        bool recursive;
        struct session *s = file_target(c, path);
        if (!s || api_query_bool(c, "recursive", false, &recursive) < 0)
                return;
        struct api_json r;
        file_req(&r, "remove", path);
        json_w_kbool(&r.w, "recursive", recursive);
        (void)api_req_simple(c, s, &r, remove_resp);
}

static void list_resp(struct conn *c, const struct json *resp) { api_reply_list(c, resp, "entries", true); }

void api_file_list(struct conn *c) {
        char path[PROTO_MAX_PATH + 1], after[PROTO_MAX_PATH + 1] = "";
        int64_t limit;
        struct session *s = file_target(c, path);
        if (!s || api_query_int(c, "limit", 0, 0, PROTO_MAX_LIST, &limit) < 0)
                return;
        int r = http_query_get(c->req->query, "after", after, sizeof after);
        if (r < 0 && r != -ENOENT) {
                conn_reply_error(c, 400, "after: bad value");
                return;
        }
        struct api_json req;
        file_req(&req, "list", path);
        json_w_kstr(&req.w, "after", after);
        json_w_kint(&req.w, "limit", limit);
        (void)api_req_simple(c, s, &req, list_resp);
}

static void stat_resp(struct conn *c, const struct json *resp) {
        struct api_json j;
        api_json_begin(&j);
        json_w_value(&j.w, resp);
        api_json_reply(c, 200, &j);
}

void api_file_stat(struct conn *c) {
        char path[PROTO_MAX_PATH + 1];
        struct session *s = file_target(c, path);
        if (!s)
                return;
        struct api_json r;
        file_req(&r, "stat", path);
        (void)api_req_simple(c, s, &r, stat_resp);
}

void api_file_mkdir(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, true, &body);
        if (!s)
                return;
        const char *path = json_get_str(body, "path");
        if (!path || !*path || strlen(path) > PROTO_MAX_PATH) {
                conn_reply_error(c, 400, "path must be a non-empty string of at most %d bytes", PROTO_MAX_PATH);
                return;
        }
        int64_t mode;
        if (api_body_int(c, body, "mode", 0755, 0, 07777, "mode must be an integer (0 to 4095)", &mode) < 0)
                return;
        /* "user" in the body, or ?user= like the other file routes (the body wins). */
        char user[API_USER_MAX];
        if (api_body_user(c, body, user) < 0 || (!*user && api_query_user(c, user) < 0))
                return;
        struct api_json r;
        file_req(&r, "mkdir", path);
        json_w_kbool(&r.w, "parents", json_get_bool(body, "parents", false));
        json_w_kint(&r.w, "mode", mode);
        api_req_user(&r, user);
        (void)api_req_simple(c, s, &r, api_resp_created);
}

void api_file_watch(struct conn *c) {
        char path[PROTO_MAX_PATH + 1];
        bool recursive;
        struct session *s = file_target(c, path);
        if (!s || api_query_bool(c, "recursive", true, &recursive) < 0)
                return;
        struct api_json r;
        file_req(&r, "watch", path);
        json_w_kbool(&r.w, "recursive", recursive);
        api_req_window(&r, s);
        (void)api_req_send(c, s, &r, OP_WATCH, &watch_ops);
}
