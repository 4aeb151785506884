/* Helpers shared by the route handlers (api*.c): JSON bodies, query parameters, the
 * session named in the path, requests to space-init and their answers, and the waiters
 * that answer a client later. Each one answers the client itself when it fails, so a
 * handler just returns. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "common/buf.h"
#include "common/json.h"
#include "daemon/session.h"

struct conn;
struct conn_hook_ops;
struct dur_waiter;

/* The HTTP status of a lifecycle error (daemon/durable.h): -EINVAL 400, -ENOENT 404,
 * -EBUSY 409, -EAGAIN 503, anything else 500. */
int api_status_of(int err);
/* A waiter that answers c when the lifecycle is done: ok_status with the result (an empty
 * answer without one), or the error. NULL (c answered 500) when out of memory. */
struct dur_waiter *api_waiter(struct conn *c, int ok_status);

/* The request body as a JSON object ({} when empty). */
int api_body_json(struct conn *c, struct json **ret);
/* True for the local operator; otherwise answers 403 (templates, GC: docs/api.md). */
bool api_admin(struct conn *c);
/* The session of {id}; running: it must be running (404, 409 while starting, 503 dead). */
struct session *api_session(struct conn *c, bool running);
/* Both: the body (api_body_json, into *body: the caller frees it), then the session. */
struct session *api_session_json(struct conn *c, bool running, struct json **body);
int api_query_bool(struct conn *c, const char *key, bool def, bool *ret);
int api_query_int(struct conn *c, const char *key, int64_t def, int64_t min, int64_t max, int64_t *ret);
/* The integer key of a JSON body in [min, max] (def when absent); else answers 400 why. */
int api_body_int(struct conn *c, const struct json *body, const char *key, int64_t def, int64_t min, int64_t max,
                 const char *why, int64_t *ret);
/* ?start= and ?end= of a metrics query (api_metrics.c) as Unix ms, each Unix seconds or
 * RFC 3339 (metrics_parse_time), the whole past and future when absent; else, or with start
 * after end, answers 400. */
int api_query_range(struct conn *c, int64_t *ret_from, int64_t *ret_to);
/* ?metadata= as a filter (metadata_filter_parse, twice as there): the sessions whose
 * metadata holds every pair; none (an empty filter) when absent. Answers 400 itself. */
struct md_filter;
int api_query_metadata(struct conn *c, bool twice, struct md_filter *f);
/* v as JSON text (malloc'd; NULL without memory). */
char *api_json_text(const struct json *v);

/* A JSON document being written: an answer (api_json_reply) or a REQ to space-init
 * (api_req_begin, then api_req_send or api_req_simple). Not to be copied once begun. */
struct api_json {
        struct buf b;
        struct json_writer w;
        bool window; /* a REQ that asked for a stream window (api_req_window) */
};
void api_json_begin(struct api_json *j);
/* Answers status with what j holds, and frees it. */
void api_json_reply(struct conn *c, int status, struct api_json *j);
/* {"key":v} with status. */
void api_reply_kint(struct conn *c, int status, const char *key, int64_t v);
/* 200 {key:[...]}: the array of that key of init's RESP ([] if none); with truncated, the
 * RESP's "truncated" too (a list cut at its limit). */
void api_reply_list(struct conn *c, const struct json *resp, const char *key, bool truncated);

/* {"op":op, ...}: the fields follow through r->w. */
void api_req_begin(struct api_json *r, const char *op);
/* Asks for a stream window when s's init honours them (exec, attach, read). */
void api_req_window(struct api_json *r, struct session *s);
/* A new op of c's on s: its frames go to ops, and c's hook tells it when c goes. NULL
 * (answered 500) without memory. */
struct op *api_op_new(struct conn *c, struct session *s, enum op_kind kind, const struct op_ops *ops);
/* Ends r, frees it, and sends it as op's REQ; on failure op is done and c answered 503/500. */
int api_op_send(struct conn *c, struct op *op, struct api_json *r);
/* Both: the op, or NULL when c was answered. r is freed in every case. */
struct op *api_req_send(struct conn *c, struct session *s, struct api_json *r, enum op_kind kind,
                        const struct op_ops *ops);
/* A failed send of op's frames (r < 0): op is done and c answered 503 (init gone) or 500. */
void api_op_send_failed(struct conn *c, struct op *op, int r);
/* The op c's request waits on (through its hook), if any. */
struct op *api_conn_op(struct conn *c);
/* The op_ops parts every client connection fills the same way. */
void api_op_fail(struct op *op, void *client, int err, const char *msg);
bool api_op_behind(struct op *op, void *client);
void api_op_detach(struct op *op, void *client);

/* Sends req as an OP_SIMPLE; on_resp builds the answer from a successful RESP. */
int api_simple_req(struct conn *c, struct session *s, const struct buf *req,
                   void (*on_resp)(struct conn *, const struct json *));
/* The same for a REQ being written (freed). */
int api_req_simple(struct conn *c, struct session *s, struct api_json *r,
                   void (*on_resp)(struct conn *, const struct json *));
/* on_resp callbacks answering {} with 200 or 201. */
void api_resp_ok(struct conn *c, const struct json *resp);
void api_resp_created(struct conn *c, const struct json *resp);
/* Maps an error RESP of init ({"error":{"code","errno","message"}}) to an HTTP answer. */
void api_reply_init_error(struct conn *c, const struct json *resp, bool exec);
bool api_resp_is_error(const struct json *resp);

/* The "user" of exec and file requests (docs/api.md): a name [a-z_][a-z0-9_-]{0,31} or a
 * uid 0..65535 (digits). out gets it ("" when absent); bad: answers 400, returns < 0. */
#define API_USER_MAX 33
bool api_user_valid(const char *s);
/* The route's {pid}: a positive integer up to INT32_MAX, else a 400 answer and -EINVAL. */
int api_pid_param(struct conn *c, int64_t *ret);
/* body's key: a non-empty array of at most PROTO_MAX_ARGV strings (a command line), else
 * a 400 (413 past the count) naming key, and NULL. */
const struct json *api_body_argv(struct conn *c, const struct json *body, const char *key);
int api_query_user(struct conn *c, char out[API_USER_MAX]);
/* From a JSON body's "user" member: a string as above, or an integer 0..65535. */
int api_body_user(struct conn *c, const struct json *body, char out[API_USER_MAX]);
/* "user":... in a REQ to init when u is not "": a uid as a number, a name as a string. */
void api_req_user(struct api_json *r, const char *u);
/* "env":[...] of an exec REQ: first (NULL for none), s's env, then the request's n "K=V"
 * (ses_parse_env), in that order, so that each overrides what came before. */
void api_req_env(struct api_json *r, const struct session *s, const char *first, char *const *env, size_t n);

/* A session's network policy from the API's JSON (api_network.c): true, false or an
 * object (net/policy.h); NULL or null: the operator's default (spaced --egress-default).
 * Checked against the operator's policy: 400 (bad policy, what and where), 403 (egress
 * off on this host); the client is answered on failure. */
struct net_policy;
int api_network_parse(struct conn *c, const struct json *v, struct net_policy *ret);

