/* The E2B API's front (e2b.h): which requests are E2B's, who sends them, where they go,
 * and how their errors and streams look on the wire. */
#include "daemon/e2b/e2b.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "common/proto.h"
#include "common/text.h"
#include "daemon/auth.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/spaced.h"
#include "daemon/util.h"

#define E2B_KEY_FILE "e2b.key"
#define RPC_PROCESS "/process.Process/"
#define RPC_FS "/filesystem.Filesystem/"

/* Every E2B route. Patterns as SPACE's (routes.c); the data plane's session comes from the
 * E2b-Sandbox-Id header, not the path. */
static const struct api_route e2b_routes[] = {
        { "POST", "/v2/sandboxes", API_BODY_JSON, e2b_sandbox_create },
        { "POST", "/sandboxes", API_BODY_JSON, e2b_sandbox_create },
        { "GET", "/v2/sandboxes", API_BODY_JSON, e2b_sandbox_list },
        { "GET", "/sandboxes", API_BODY_JSON, e2b_sandbox_list },
        { "POST", "/v2/sandboxes/{id}/connect", API_BODY_JSON, e2b_sandbox_connect },
        { "POST", "/sandboxes/{id}/connect", API_BODY_JSON, e2b_sandbox_connect },
        { "GET", "/sandboxes/{id}", API_BODY_JSON, e2b_sandbox_get },
        { "DELETE", "/sandboxes/{id}", API_BODY_JSON, e2b_sandbox_kill },
        { "POST", "/sandboxes/{id}/timeout", API_BODY_JSON, e2b_sandbox_timeout },
        { "POST", "/sandboxes/{id}/pause", API_BODY_JSON, e2b_sandbox_pause },
        { "POST", "/sandboxes/{id}/resume", API_BODY_JSON, e2b_sandbox_resume },
        { "GET", "/sandboxes/{id}/metrics", API_BODY_JSON, e2b_sandbox_metrics },
        { "POST", "/sandboxes/{id}/snapshots", API_BODY_JSON, e2b_sandbox_snapshot },
        { "POST", "/sandboxes/{id}/fork", API_BODY_JSON, e2b_sandbox_fork },
        { "GET", "/snapshots", API_BODY_JSON, e2b_snapshot_list },
        { "DELETE", "/templates/{id}", API_BODY_JSON, e2b_snapshot_delete },

        { "POST", RPC_PROCESS "Start", API_BODY_JSON, e2b_process_start },
        { "POST", RPC_PROCESS "Connect", API_BODY_JSON, e2b_process_connect },
        { "POST", RPC_PROCESS "List", API_BODY_JSON, e2b_process_list },
        { "POST", RPC_PROCESS "SendInput", API_BODY_JSON, e2b_process_send_input },
        { "POST", RPC_PROCESS "CloseStdin", API_BODY_JSON, e2b_process_close_stdin },
        { "POST", RPC_PROCESS "SendSignal", API_BODY_JSON, e2b_process_send_signal },
        { "POST", RPC_PROCESS "Update", API_BODY_JSON, e2b_process_update },
        { "POST", RPC_FS "Stat", API_BODY_JSON, e2b_fs_stat },
        { "POST", RPC_FS "ListDir", API_BODY_JSON, e2b_fs_list_dir },
        { "POST", RPC_FS "MakeDir", API_BODY_JSON, e2b_fs_make_dir },
        { "POST", RPC_FS "Move", API_BODY_JSON, e2b_fs_move },
        { "POST", RPC_FS "Remove", API_BODY_JSON, e2b_fs_remove },
        { "POST", RPC_FS "WatchDir", API_BODY_JSON, e2b_fs_watch_dir },
        { "GET", "/files", API_BODY_JSON, e2b_files_get },
        { "POST", "/files", API_BODY_STREAM, e2b_files_post },
        { "GET", "/health", API_BODY_JSON, e2b_health },
};

/* The data plane starts here in the table. */
#define FIRST_DATA_ROUTE 16

bool e2b_route_uses_sandbox(const struct api_route *r) {
        return r >= &e2b_routes[FIRST_DATA_ROUTE] && r < &e2b_routes[ELEMENTSOF(e2b_routes)];
}

static enum e2b_plane plane_of_path(const char *path) {
        if (strncmp(path, RPC_PROCESS, strlen(RPC_PROCESS)) == 0 || strncmp(path, RPC_FS, strlen(RPC_FS)) == 0)
                return E2B_RPC;
        if (strcmp(path, "/files") == 0 || strcmp(path, "/health") == 0)
                return E2B_ENVD_REST;
        return E2B_CONTROL;
}

enum e2b_plane e2b_plane_of(const struct conn *c) { return c->req ? plane_of_path(c->req->path) : E2B_CONTROL; }

/* ---------------- the daemon's secret ---------------- */

static int read_secret(int fd, uint8_t out[E2B_SECRET_BYTES]) {
        uint8_t b[E2B_SECRET_BYTES + 1];
        ssize_t n = read(fd, b, sizeof b);
        if (n < 0)
                return -errno;
        if (n != E2B_SECRET_BYTES)
                return -EBADMSG;
        memcpy(out, b, E2B_SECRET_BYTES);
        explicit_bzero(b, sizeof b);
        return 0;
}

/* DATA/e2b.key, made once: every envdAccessToken ever given out depends on it, so it is
 * never replaced; a damaged one stops spaced rather than invalidating them in silence. */
static int load_secret(const char *data_dir, uint8_t out[E2B_SECRET_BYTES]) {
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        if (asprintf(&path, "%s/" E2B_KEY_FILE, data_dir) < 0 || asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                int r = read_secret(fd, out);
                close(fd);
                if (r < 0)
                        log_error("%s: %s (it must hold %d bytes; remove it to make a new one, which "
                                  "invalidates every E2B sandbox's access token)",
                                  path, r == -EBADMSG ? "damaged" : strerror(-r), E2B_SECRET_BYTES);
                return r;
        }
        if (errno != ENOENT) {
                log_error("%s: %m", path);
                return -errno;
        }
        uint8_t k[E2B_SECRET_BYTES];
        if (getrandom(k, sizeof k, 0) != (ssize_t)sizeof k)
                return -EIO;
        (void)unlink(tmp);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int r = fd < 0 ? -errno : 0;
        if (r == 0 && write(fd, k, sizeof k) != (ssize_t)sizeof k)
                r = -EIO;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (fd >= 0)
                close(fd);
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                (void)unlink(tmp);
                log_error("making %s: %s", path, strerror(-r));
                explicit_bzero(k, sizeof k);
                return r;
        }
        memcpy(out, k, sizeof k);
        explicit_bzero(k, sizeof k);
        return 0;
}

int e2b_open(struct daemon *d) {
        struct e2b *e = calloc(1, sizeof *e);
        if (!e)
                return -ENOMEM;
        int r = load_secret(d->data_dir, e->secret);
        if (r < 0) {
                free(e);
                return r;
        }
        d->e2b = e;
        return 0;
}

void e2b_close(struct daemon *d) {
        if (!d->e2b)
                return;
        explicit_bzero(d->e2b->secret, sizeof d->e2b->secret);
        free(d->e2b);
        d->e2b = NULL;
}

static void b64url(const uint8_t *in, size_t n, char *out) {
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        size_t o = 0;
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                             (i + 2 < n ? in[i + 2] : 0);
                out[o++] = a[v >> 18 & 63];
                out[o++] = a[v >> 12 & 63];
                if (i + 1 < n)
                        out[o++] = a[v >> 6 & 63];
                if (i + 2 < n)
                        out[o++] = a[v & 63];
        }
        out[o] = '\0';
}

void e2b_access_token(const struct e2b *e, const char *id, char out[E2B_ACCESS_TOKEN_LEN + 1]) {
        uint8_t mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        static const char label[] = "e2b-access-token:";
        char msg[sizeof label + API_MAX_PARAM_LEN];
        int n = snprintf(msg, sizeof msg, "%s%s", label, id);
        if (n < 0 || (size_t)n >= sizeof msg || !HMAC(EVP_sha256(), e->secret, sizeof e->secret,
                                                      (const uint8_t *)msg, (size_t)n, mac, &len) || len != 32) {
                /* Cannot happen for ids that fit; a token nobody can present is the safe answer. */
                memset(out, '!', E2B_ACCESS_TOKEN_LEN);
                out[E2B_ACCESS_TOKEN_LEN] = '\0';
                return;
        }
        b64url(mac, 32, out);
        explicit_bzero(mac, sizeof mac);
}

static bool token_equal(const char *a, const char *b) {
        if (strlen(a) != E2B_ACCESS_TOKEN_LEN || strlen(b) != E2B_ACCESS_TOKEN_LEN)
                return false;
        unsigned char diff = 0;
        for (size_t i = 0; i < E2B_ACCESS_TOKEN_LEN; i++)
                diff |= (unsigned char)(a[i] ^ b[i]);
        return diff == 0;
}

/* ---------------- errors ---------------- */

static const struct {
        const char *code;
        int status;
} rpc_codes[] = {
        { "canceled", 499 },         { "unknown", 500 },           { "invalid_argument", 400 },
        { "deadline_exceeded", 504 }, { "not_found", 404 },        { "already_exists", 409 },
        { "permission_denied", 403 }, { "resource_exhausted", 429 }, { "failed_precondition", 400 },
        { "aborted", 409 },           { "out_of_range", 400 },     { "unimplemented", 501 },
        { "internal", 500 },          { "unavailable", 503 },      { "data_loss", 500 },
        { "unauthenticated", 401 },
};

static int rpc_status_of_code(const char *code) {
        for (size_t i = 0; i < ELEMENTSOF(rpc_codes); i++)
                if (strcmp(rpc_codes[i].code, code) == 0)
                        return rpc_codes[i].status;
        return 500;
}

const char *e2b_rpc_code_of_status(int status) {
        switch (status) {
        case 400: return "invalid_argument";
        case 401: return "unauthenticated";
        case 403: return "permission_denied";
        case 404: return "not_found";
        case 405: return "unimplemented";
        case 408: return "deadline_exceeded";
        case 409: return "failed_precondition";
        case 413: case 429: case 507: return "resource_exhausted";
        case 422: return "invalid_argument";
        case 431: return "resource_exhausted";
        case 501: return "unimplemented";
        case 502: case 503: return "unavailable";
        default: return status >= 500 ? "internal" : "unknown";
        }
}

/* A Connect envelope: flags, 4-byte big-endian length, the message. */
static void envelope(struct conn *c, uint8_t flags, const char *json, size_t n) {
        struct buf b = BUF_INIT(0);
        uint8_t h[5] = { flags, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };
        if (buf_append(&b, h, sizeof h) == 0 && buf_append(&b, json, n) == 0)
                conn_stream_chunk(c, b.data, b.len);
        buf_free(&b);
}

/* {"code":code,"message":msg} into b (as Connect's unary errors and end-streams hold it). */
static void rpc_error_json(struct buf *b, const char *code, const char *msg) {
        struct json_writer w = JSON_WRITER_INIT(b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "code", code);
        json_w_kstr(&w, "message", msg);
        json_w_obj_end(&w);
}

static void stream_end_raw(struct conn *c, const char *code, const char *msg) {
        struct buf b = BUF_INIT(0);
        if (code) {
                (void)buf_append(&b, "{\"error\":", 9);
                rpc_error_json(&b, code, msg);
                (void)buf_append(&b, "}", 1);
        } else {
                (void)buf_append(&b, "{}", 2);
        }
        envelope(c, 0x02, b.data ? b.data : "{}", b.len);
        buf_free(&b);
        conn_stream_end(c);
}

static void rpc_error_msg(struct conn *c, const char *code, const char *msg) {
        if (c->closed || c->resp_done)
                return;
        if (c->streaming) {
                /* The 200 is out: the error goes in the end-stream envelope. Any registered
                 * stream of this connection is its handler's to drop. */
                stream_end_raw(c, code, msg);
                return;
        }
        struct buf b = BUF_INIT(0);
        rpc_error_json(&b, code, msg);
        c->error_reply = NULL;
        conn_reply_json(c, rpc_status_of_code(code), &b);
        buf_free(&b);
}

static void rest_error_msg(struct conn *c, int status, const char *msg) {
        if (c->closed || c->resp_done)
                return;
        if (c->streaming) {
                /* A download cut short must look so. */
                conn_abort(c);
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "code", status);
        json_w_kstr(&w, "message", msg);
        json_w_obj_end(&w);
        c->error_reply = NULL;
        conn_reply_json(c, status, &b);
        buf_free(&b);
}

/* c->error_reply: what SPACE's own helpers (api_session, api_body_json, ...) answer, in
 * the request's dialect. */
static void error_hook(struct conn *c, int status, const char *msg) {
        if (e2b_plane_of(c) == E2B_RPC)
                rpc_error_msg(c, e2b_rpc_code_of_status(status), msg);
        else
                rest_error_msg(c, status, msg);
}

void e2b_reply_error(struct conn *c, int status, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        rest_error_msg(c, status, msg);
}

void e2b_rpc_error(struct conn *c, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        rpc_error_msg(c, code, msg);
}

void e2b_rpc_reply(struct conn *c, const struct buf *body) {
        struct buf empty = BUF_INIT(0);
        if (!body || !body->len) {
                (void)buf_append(&empty, "{}", 2);
                body = &empty;
        }
        conn_reply_json(c, 200, body);
        buf_free(&empty);
}

/* The answer a data-plane request gets for a sandbox that is not there: what E2B's own
 * proxy answers (the SDK turns it into "sandbox not found / timed out" errors). */
static void reply_no_sandbox(struct conn *c) {
        static const char body[] = "{\"code\":502,\"message\":\"The sandbox was not found\"}";
        struct buf b = BUF_INIT(0);
        (void)buf_append(&b, body, sizeof body - 1);
        c->error_reply = NULL;
        conn_reply_json(c, 502, &b);
        buf_free(&b);
}

/* ---------------- streams ---------------- */

static int64_t keepalive_s(const struct conn *c) {
        const char *h = http_request_header(c->req, "Keepalive-Ping-Interval");
        char *end;
        long v = h ? strtol(h, &end, 10) : 0;
        if (!h || end == h || *end || v < E2B_KEEPALIVE_MIN_S || v > E2B_KEEPALIVE_MAX_S)
                return E2B_KEEPALIVE_DEFAULT_S;
        return v;
}

void e2b_stream_begin(struct e2b_stream *st, struct conn *c, const char *keepalive) {
        struct e2b *e = c->d->e2b;
        *st = (struct e2b_stream){ .c = c, .e = e, .keepalive = keepalive, .open = true,
                                   .interval_ms = (uint64_t)keepalive_s(c) * 1000, .last_ms = util_now_ms() };
        st->next = e->streams;
        if (e->streams)
                e->streams->prev = st;
        e->streams = st;
        conn_stream_begin(c, 200, "application/connect+json");
}

static void stream_unlink(struct e2b_stream *st) {
        if (!st->open)
                return;
        st->open = false;
        if (st->prev)
                st->prev->next = st->next;
        else
                st->e->streams = st->next;
        if (st->next)
                st->next->prev = st->prev;
        st->next = st->prev = NULL;
}

void e2b_stream_msg(struct e2b_stream *st, const char *json, size_t n) {
        if (!st->open || st->c->closed)
                return;
        envelope(st->c, 0x00, json, n);
        st->last_ms = util_now_ms();
}

void e2b_stream_end(struct e2b_stream *st, const char *code, const char *fmt, ...) {
        if (!st->open)
                return;
        stream_unlink(st);
        if (st->c->closed || st->c->resp_done)
                return;
        char msg[1024] = "";
        if (fmt) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(msg, sizeof msg, fmt, ap);
                va_end(ap);
        }
        stream_end_raw(st->c, code, msg);
}

void e2b_stream_drop(struct e2b_stream *st) { stream_unlink(st); }

void e2b_tick(struct daemon *d) {
        if (!d->e2b)
                return;
        e2b_fs_tick(d);
        uint64_t now = util_now_ms();
        for (struct e2b_stream *st = d->e2b->streams; st; st = st->next)
                if (st->keepalive && now - st->last_ms >= st->interval_ms && !st->c->closed &&
                    !conn_over_high(st->c))
                        e2b_stream_msg(st, st->keepalive, strlen(st->keepalive));
}

int e2b_timeout_ms(struct conn *c, int64_t *ret) {
        const char *h = http_request_header(c->req, "Connect-Timeout-Ms");
        *ret = 0;
        if (!h)
                return 0;
        char *end;
        errno = 0;
        long long v = strtoll(h, &end, 10);
        /* Connect: at most 10 digits, positive. */
        if (end == h || *end || errno || v <= 0 || strlen(h) > 10) {
                e2b_rpc_error(c, "invalid_argument", "bad Connect-Timeout-Ms: %.20s", h);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

/* ---------------- requests ---------------- */

int e2b_b64_decode(const char *in, size_t n, struct buf *out) {
        /* proto3 JSON takes both alphabets, padded or not: normalise, then decode. */
        struct buf t = BUF_INIT(0);
        for (size_t i = 0; i < n; i++) {
                char ch = in[i] == '-' ? '+' : in[i] == '_' ? '/' : in[i];
                if (buf_append(&t, &ch, 1) < 0) {
                        buf_free(&t);
                        return -ENOMEM;
                }
        }
        while (t.len % 4)
                if (buf_append(&t, "=", 1) < 0) {
                        buf_free(&t);
                        return -ENOMEM;
                }
        int r = text_b64_decode(out, t.data ? t.data : "", t.len);
        buf_free(&t);
        return r;
}

void e2b_b64_encode(const void *data, size_t n, struct buf *out) { (void)text_b64_encode(out, data, n); }

int e2b_request_user(struct conn *c, const char *username, char out[API_USER_MAX]) {
        const char *name = username;
        char dec[API_USER_MAX + 8];
        if (!name || !*name) {
                const char *h = http_request_header(c->req, "Authorization");
                name = E2B_DEFAULT_USER;
                if (h) {
                        static const char scheme[] = "Basic ";
                        struct buf b = BUF_INIT(256);
                        int r = strncasecmp(h, scheme, sizeof scheme - 1) == 0
                                        ? e2b_b64_decode(h + sizeof scheme - 1, strlen(h + sizeof scheme - 1), &b)
                                        : -EINVAL;
                        char *colon = r == 0 && b.len < sizeof dec ? memchr(b.data, ':', b.len) : NULL;
                        if (colon) {
                                memcpy(dec, b.data, (size_t)(colon - b.data));
                                dec[colon - b.data] = '\0';
                                name = dec;
                        }
                        buf_free(&b);
                        if (!colon) {
                                if (e2b_plane_of(c) == E2B_RPC)
                                        e2b_rpc_error(c, "unauthenticated", "bad Authorization: Basic base64(user:) expected");
                                else
                                        e2b_reply_error(c, 401, "bad Authorization: Basic base64(user:) expected");
                                return -EINVAL;
                        }
                }
        }
        if (!api_user_valid(name)) {
                if (e2b_plane_of(c) == E2B_RPC)
                        e2b_rpc_error(c, "unauthenticated", "invalid username '%.40s'", name);
                else
                        e2b_reply_error(c, 401, "invalid username '%.40s'", name);
                return -EINVAL;
        }
        /* api_user_valid bounds it to API_USER_MAX - 1 bytes */
        memcpy(out, name, strnlen(name, API_USER_MAX - 1));
        out[strnlen(name, API_USER_MAX - 1)] = '\0';
        return 0;
}

void e2b_home_of(const char *user, char *out, size_t outsz) {
        if (strcmp(user, "root") == 0 || strcmp(user, "0") == 0)
                snprintf(out, outsz, "/root");
        else
                snprintf(out, outsz, "/home/%s", user);
}

int e2b_abs_path(const char *path, const char *home, char *out, size_t outsz) {
        int n;
        if (!path || !*path || strcmp(path, "~") == 0)
                n = snprintf(out, outsz, "%s", home);
        else if (path[0] == '/')
                n = snprintf(out, outsz, "%s", path);
        else if (path[0] == '~' && path[1] == '/')
                n = snprintf(out, outsz, "%s/%s", home, path + 2);
        else
                n = snprintf(out, outsz, "%s/%s", home, path);
        if (n < 0 || (size_t)n >= outsz || (size_t)n > PROTO_MAX_PATH)
                return -ENAMETOOLONG;
        return 0;
}

/* ---------------- routing ---------------- */

static int match(const char *method, const char *path, const struct api_route **ret, struct api_params *params) {
        bool seen = false;
        for (size_t i = 0; i < ELEMENTSOF(e2b_routes); i++) {
                if (!api_path_matches(e2b_routes[i].pattern, path, NULL))
                        continue;
                seen = true;
                if (strcmp(e2b_routes[i].method, method) != 0)
                        continue;
                api_path_matches(e2b_routes[i].pattern, path, params);
                *ret = &e2b_routes[i];
                return 0;
        }
        return seen ? -EOPNOTSUPP : -ENOENT;
}

/* The data plane: X-Access-Token must be the sandbox's; then the request is its tenant's. */
static bool auth_data(struct conn *c, const char *sid) {
        const char *tok = http_request_header(c->req, "X-Access-Token");
        if (!tok) {
                error_hook(c, 401, "X-Access-Token is required (the envdAccessToken of create or connect)");
                return false;
        }
        char want[E2B_ACCESS_TOKEN_LEN + 1];
        if (strlen(sid) >= API_MAX_PARAM_LEN) {
                error_hook(c, 401, "wrong X-Access-Token for this sandbox");
                return false;
        }
        e2b_access_token(c->d->e2b, sid, want);
        bool ok = token_equal(tok, want);
        explicit_bzero(want, sizeof want);
        if (!ok) {
                error_hook(c, 401, "wrong X-Access-Token for this sandbox");
                return false;
        }
        struct session *s = ses_find(c->d, sid);
        if (!s || s->freed || s->state == META_SESSION_TERMINATED) {
                reply_no_sandbox(c);
                return false;
        }
        const char *port = http_request_header(c->req, "E2b-Sandbox-Port");
        if (port && strtol(port, NULL, 10) != E2B_ENVD_PORT) {
                error_hook(c, 502, "E2b-Sandbox-Port other than 49983 is not served here: reach a sandbox's "
                                   "own port through SPACE's exposed ports (docs/e2b.md)");
                return false;
        }
        snprintf(c->tenant, sizeof c->tenant, "%s", s->tenant);
        c->params = (struct api_params){ .n = 1, .names = { "id}" } };
        snprintf(c->params.values[0], sizeof c->params.values[0], "%s", sid);
        return true;
}

/* The control plane: X-API-KEY is a tenant's token (either form, auth.h). */
static bool auth_control(struct conn *c, const char *key) {
        struct meta_token t;
        int r = strlen(key) <= AUTH_HEADER_MAX ? auth_verify(c->d->meta, key, &t) : -EACCES;
        if (r == -EACCES) {
                error_hook(c, 401, "the API key is unknown, revoked or malformed");
                return false;
        }
        if (r < 0) {
                log_warn("checking an API key: %s", meta_last_error(c->d->meta));
                error_hook(c, 500, "checking the API key failed");
                return false;
        }
        snprintf(c->tenant, sizeof c->tenant, "%s", t.tenant);
        return true;
}

bool e2b_intercept(struct conn *c) {
        if (!c->d->e2b)
                return false;
        const char *sid = http_request_header(c->req, "E2b-Sandbox-Id");
        const char *key = http_request_header(c->req, "X-API-KEY");
        if (!sid && !key)
                return false;
        c->error_reply = error_hook;
        c->admin = false;
        c->tenant[0] = '\0';
        c->route = NULL;
        /* What goes wrong before a handler runs leaves the body unread and dropped. */
        c->state = CONN_BODY_DISCARD;
        if (sid ? !auth_data(c, sid) : !auth_control(c, key))
                return true;
        conn_authenticated(c);
        struct api_params params = { 0 };
        int r = match(c->req->method, c->req->path, &c->route, &params);
        if (r < 0) {
                c->route = NULL;
                if (e2b_plane_of(c) == E2B_RPC)
                        e2b_rpc_error(c, "unimplemented", "%s is not served", c->req->path);
                else
                        error_hook(c, r == -ENOENT ? 404 : 405, r == -ENOENT ? "no such route" : "method not allowed");
                return true;
        }
        if (!sid)
                c->params = params;
        if (c->d->router->hold && c->d->router->hold(c))
                return true;
        conn_dispatch(c);
        return true;
}
