/* The E2B-compatible API (docs/e2b.md; the wire as the SDK speaks it: docs/e2b-wire.md).
 * Code written for E2B's SDK runs on SPACE with E2B_API_URL and E2B_SANDBOX_URL pointing at
 * spaced and E2B_API_KEY a SPACE token. An E2B sandbox is a SPACE session: its sandboxID is
 * the session id.
 *
 * Two planes, told apart by their headers before anything else is looked at:
 *  - the control plane (REST/JSON: /v2/sandboxes, /sandboxes/{id}/..., /snapshots), with
 *    the tenant's token in X-API-KEY; errors {"code":<status>,"message":...};
 *  - the data plane ("envd": Connect RPC /process.Process/..., /filesystem.Filesystem/..., and
 *    REST /files, /health), routed by E2b-Sandbox-Id and proven by X-Access-Token: the
 *    sandbox's envdAccessToken, an HMAC of its id under a secret of the daemon's
 *    (DATA/e2b.key), so create and connect give the same one and nothing stores it.
 *
 * core.c routes and authenticates; control.c, process.c and fs.c are the handlers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "daemon/api.h"
#include "daemon/routes.h"

struct conn;
struct daemon;
struct json;
struct session;

/* The envd version we report: semver, the highest the SDK 2.51 tests (every feature it
 * gates on the version is on: docs/e2b-wire.md §3.3). */
#define E2B_ENVD_VERSION "0.6.4"
/* E2b-Sandbox-Port of envd's own traffic. */
#define E2B_ENVD_PORT 49983
/* base64url of an HMAC-SHA256, no padding. */
#define E2B_ACCESS_TOKEN_LEN 43
#define E2B_SECRET_BYTES 32
/* The account commands and files default to (templates have it: docs/api.md "Users"). */
#define E2B_DEFAULT_USER "user"
/* Keepalive-Ping-Interval when the client sends none or a bad one (envd's default), and
 * the range we accept. */
#define E2B_KEEPALIVE_DEFAULT_S 90
#define E2B_KEEPALIVE_MIN_S 1
#define E2B_KEEPALIVE_MAX_S 3600

enum e2b_plane {
        E2B_CONTROL,   /* REST, X-API-KEY */
        E2B_ENVD_REST, /* /files, /health: REST errors like the control plane's */
        E2B_RPC,       /* Connect: errors {"code":"not_found",...}, or an end-stream */
};

/* The daemon's E2B state (d->e2b, NULL with --e2b off). */
struct e2b {
        uint8_t secret[E2B_SECRET_BYTES];
        struct e2b_stream *streams; /* open server streams, for their keepalives */
};

/* Loads DATA/e2b.key (made at the first start: 32 random bytes, mode 0600) into d->e2b. */
int e2b_open(struct daemon *d);
void e2b_close(struct daemon *d);
/* The router's intercept (before SPACE's authentication): true when c is an E2B request,
 * which it then authenticates, routes and dispatches, or answers. */
bool e2b_intercept(struct conn *c);
/* Once a second: keepalives of quiet streams. */
void e2b_tick(struct daemon *d);
/* Part of it (fs.c): watches past their Connect-Timeout-Ms end. */
void e2b_fs_tick(struct daemon *d);
/* Whether r is an E2B route that uses the session's sandbox (the data plane): activity
 * for its idle timeout, and a wake of a paused session with auto_resume (lifetime.h). */
bool e2b_route_uses_sandbox(const struct api_route *r);

/* The envdAccessToken of session id. */
void e2b_access_token(const struct e2b *e, const char *id, char out[E2B_ACCESS_TOKEN_LEN + 1]);

/* The plane of c's request (valid in the handlers). */
enum e2b_plane e2b_plane_of(const struct conn *c);

/* ---- answers ---- */

/* REST error (control plane, /files, /health): status and {"code":status,"message":...}. */
void e2b_reply_error(struct conn *c, int status, const char *fmt, ...) _printf_(3, 4);
/* A Connect error with code ("not_found", "invalid_argument", ...: the status is the code's
 * own); on a stream already begun, its end-stream envelope carries it and the stream ends. */
void e2b_rpc_error(struct conn *c, const char *code, const char *fmt, ...) _printf_(3, 4);
/* The Connect code of one of our HTTP statuses (404 "not_found", 409 "failed_precondition"...). */
const char *e2b_rpc_code_of_status(int status);
/* A successful unary answer: 200, application/json, body (a JSON object; "{}" when NULL). */
void e2b_rpc_reply(struct conn *c, const struct buf *body);

/* A server stream (Connect, application/connect+json). The caller owns the struct (in its
 * per-request state); begin registers it for keepalives, end and drop unregister it. */
struct e2b_stream {
        struct e2b_stream *next, *prev;
        struct conn *c;
        struct e2b *e;
        uint64_t last_ms;      /* the last message sent */
        uint64_t interval_ms;  /* from Keepalive-Ping-Interval */
        const char *keepalive; /* the JSON message sent after interval_ms of silence */
        bool open;
};
/* 200 and the head; keepalive (a static string) is sent whenever interval passes in silence. */
void e2b_stream_begin(struct e2b_stream *st, struct conn *c, const char *keepalive);
/* One message (an envelope of flag 0 around json). */
void e2b_stream_msg(struct e2b_stream *st, const char *json, size_t n);
/* The end-stream envelope ({} or {"error":{"code","message"}} when code is not NULL), then the
 * end of the HTTP body. */
void e2b_stream_end(struct e2b_stream *st, const char *code, const char *fmt, ...) _printf_(3, 4);
/* The client went: unregister, send nothing. */
void e2b_stream_drop(struct e2b_stream *st);
/* Connect-Timeout-Ms of the request: 0 when absent; -EINVAL (and a Connect error answered)
 * when malformed. */
int e2b_timeout_ms(struct conn *c, int64_t *ret);

/* ---- requests ---- */

/* The user of a data-plane request: the name of "Authorization: Basic base64(name:)", or
 * E2B_DEFAULT_USER without one; a malformed header or name: a Connect (or REST) 401
 * answered and < 0. username (the /files query) wins when not NULL. */
int e2b_request_user(struct conn *c, const char *username, char out[API_USER_MAX]);
/* path made absolute against home (a user's home: "/root" for root, "/home/<name>"
 * otherwise): "~" and "~/x" expand to it, a relative path is joined to it. -ENAMETOOLONG
 * past PROTO_MAX_PATH. */
int e2b_abs_path(const char *path, const char *home, char *out, size_t outsz);
/* A user's home as E2B has it (docs/e2b.md). */
void e2b_home_of(const char *user, char *out, size_t outsz);

/* proto3 JSON: base64 bytes (standard alphabet, padded) in and out. */
int e2b_b64_decode(const char *in, size_t n, struct buf *out);
void e2b_b64_encode(const void *data, size_t n, struct buf *out);

/* ---- handlers (control.c, process.c, fs.c) ---- */

void e2b_sandbox_create(struct conn *c);   /* POST /v2/sandboxes, POST /sandboxes */
void e2b_sandbox_connect(struct conn *c);  /* POST /v2/sandboxes/{id}/connect, /sandboxes/{id}/connect */
void e2b_sandbox_list(struct conn *c);     /* GET /v2/sandboxes, GET /sandboxes */
void e2b_sandbox_get(struct conn *c);      /* GET /sandboxes/{id} */
void e2b_sandbox_kill(struct conn *c);     /* DELETE /sandboxes/{id} */
void e2b_sandbox_timeout(struct conn *c);  /* POST /sandboxes/{id}/timeout */
void e2b_sandbox_pause(struct conn *c);    /* POST /sandboxes/{id}/pause */
void e2b_sandbox_resume(struct conn *c);   /* POST /sandboxes/{id}/resume (older SDKs) */
void e2b_sandbox_metrics(struct conn *c);  /* GET /sandboxes/{id}/metrics */
void e2b_sandbox_snapshot(struct conn *c); /* POST /sandboxes/{id}/snapshots */
void e2b_sandbox_fork(struct conn *c);     /* POST /sandboxes/{id}/fork */
void e2b_snapshot_list(struct conn *c);    /* GET /snapshots */
void e2b_snapshot_delete(struct conn *c);  /* DELETE /templates/{id} (a snapshot's) */

void e2b_process_start(struct conn *c);
void e2b_process_connect(struct conn *c);
void e2b_process_list(struct conn *c);
void e2b_process_send_input(struct conn *c);
void e2b_process_close_stdin(struct conn *c);
void e2b_process_send_signal(struct conn *c);
void e2b_process_update(struct conn *c);

void e2b_fs_stat(struct conn *c);
void e2b_fs_list_dir(struct conn *c);
void e2b_fs_make_dir(struct conn *c);
void e2b_fs_move(struct conn *c);
void e2b_fs_remove(struct conn *c);
void e2b_fs_watch_dir(struct conn *c);
void e2b_files_get(struct conn *c);  /* GET /files */
void e2b_files_post(struct conn *c); /* POST /files (API_BODY_STREAM) */
void e2b_health(struct conn *c);     /* GET /health */
