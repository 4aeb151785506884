/* Helpers shared by the route handlers (api*.c): JSON bodies, query parameters, the
 * session named in the path, and single-RESP requests to space-init. Each one answers
 * the client itself when it fails, so a handler just returns. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "common/json.h"

struct conn;
struct session;
struct op;
struct buf;
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
int api_query_bool(struct conn *c, const char *key, bool def, bool *ret);
int api_query_int(struct conn *c, const char *key, int64_t def, int64_t min, int64_t max, int64_t *ret);
/* Sends req as an OP_SIMPLE; on_resp builds the answer from a successful RESP. */
int api_simple_req(struct conn *c, struct session *s, const struct buf *req,
                   void (*on_resp)(struct conn *, const struct json *));
/* on_resp callbacks answering {} with 200 or 201. */
void api_resp_ok(struct conn *c, const struct json *resp);
void api_resp_created(struct conn *c, const struct json *resp);
