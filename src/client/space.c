/* libspace: the public client API (include/space/space.h) over the HTTP client in http.c.
 * Each call builds one request, maps the daemon's JSON error to a negative errno plus the
 * message kept on the client, and turns NDJSON event streams into callbacks. */
#include "space/space.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/text.h"
#include "client/http.h"
#include "common/fdio.h"
#include "common/frame.h"
#include "common/json.h"

#define DEFAULT_TIMEOUT_MS (300 * 1000)
#define MAX_ERROR_BODY (64u << 10) /* an error answer we read for its message */
#define MAX_ID 63

struct space_client {
        struct http_conn conn;
        char host[HTTP_MAX_HOST + 128];
        int timeout_ms;
        char auth_header[SPACE_MAX_API_TOKEN + 32]; /* "Authorization: Bearer …", "" if none */
        int last_status;
        char server_timing[256];
        bool has_code;
        char last_code[64];
        char last_error[1024];
};

struct space_session {
        space_client *c;
        char id[MAX_ID + 1];
        char *json;
        bool has_token;
        char token[SPACE_MAX_TOKEN + 1];
        char token_header[SPACE_MAX_TOKEN + 64]; /* "X-Space-Session-Token: …" */
};

/* ---- errors ---------------------------------------------------------------------- */

static int fail(space_client *c, int err, const char *fmt, ...) _printf_(3, 4);
static int fail(space_client *c, int err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
        va_end(ap);
        c->has_code = false;
        c->last_code[0] = '\0';
        return err;
}

static void clear_error(space_client *c) {
        c->last_error[0] = '\0';
        c->last_code[0] = '\0';
        c->has_code = false;
        c->last_status = 0;
}

static int errno_from_status(int status) {
        switch (status) {
        case 400: return -EINVAL;
        case 401: return -EPERM;
        case 403: return -EACCES;
        case 404: return -ENOENT;
        case 405: return -EOPNOTSUPP;
        case 409: return -EEXIST;
        case 413: case 431: return -E2BIG;
        case 422: return -ENOEXEC;
        case 503: return -EHOSTDOWN;
        case 507: return -ENOSPC;
        default: return -EPROTO;
        }
}

static int errno_from_code(const char *code) {
        static const struct { const char *code; int status; } map[] = {
                { "bad_request", 400 }, { "unauthorized", 401 }, { "forbidden", 403 }, { "not_found", 404 },
                { "method_not_allowed", 405 }, { "conflict", 409 }, { "too_large", 413 },
                { "exec_failed", 422 }, { "unavailable", 503 }, { "no_space", 507 },
        };
        for (size_t i = 0; code && i < ELEMENTSOF(map); i++)
                if (strcmp(code, map[i].code) == 0)
                        return errno_from_status(map[i].status);
        return -EPROTO;
}

/* Takes {"error":{"code","message"}} (or anything else) and records it. */
static void record_api_error(space_client *c, const struct json *err_obj) {
        const char *code = json_get_str(err_obj, "code");
        const char *msg = json_get_str(err_obj, "message");
        snprintf(c->last_code, sizeof c->last_code, "%s", code ? code : "unknown");
        c->has_code = true;
        snprintf(c->last_error, sizeof c->last_error, "%s", msg ? msg : (code ? code : "error"));
}

static int api_error(space_client *c, int status, const struct buf *body) {
        _cleanup_json_ struct json *j = NULL;
        if (body->len > 0 && json_parse(body->data, body->len, &j, NULL, 0) >= 0 &&
            json_type(json_get(j, "error")) == JSON_OBJECT) {
                record_api_error(c, json_get(j, "error"));
                return errno_from_status(status);
        }
        /* Not our JSON: show what there is (a proxy's page, a bare status). */
        int n = 0;
        while ((size_t)n < body->len && n < 200 && body->data[n] != '\n' && body->data[n] != '\r')
                n++;
        snprintf(c->last_code, sizeof c->last_code, "http_%d", status);
        c->has_code = true;
        if (n > 0)
                snprintf(c->last_error, sizeof c->last_error, "HTTP %d: %.*s", status, n, body->data);
        else
                snprintf(c->last_error, sizeof c->last_error, "HTTP %d", status);
        return errno_from_status(status);
}

const char *space_strerror(int err) {
        switch (err) {
        case -EBADMSG: return "malformed answer from spaced";
        case -ENOEXEC: return "command could not be started";
        case -EHOSTDOWN: return "sandbox unavailable";
        default: return strerror(err < 0 ? -err : err);
        }
}

/* ---- client ---------------------------------------------------------------------- */

static int default_host(char *out, size_t n) {
        const char *h = getenv("SPACE_HOST");
        if (h && *h)
                return snprintf(out, n, "%s", h) < (int)n ? 0 : -ENAMETOOLONG;
        const char *d = getenv("SPACE_DATA");
        if (!d || !*d)
                d = "/var/lib/space";
        return snprintf(out, n, "unix:%s/spaced.sock", d) < (int)n ? 0 : -ENAMETOOLONG;
}

/* Printable ASCII without blanks: what can go into a header line as it is. */
static bool api_token_ok(const char *t) {
        size_t n = strlen(t);
        if (n == 0 || n > SPACE_MAX_API_TOKEN)
                return false;
        for (size_t i = 0; i < n; i++)
                if (t[i] <= ' ' || t[i] > '~')
                        return false;
        return true;
}

int space_client_new(space_client **ret, const struct space_client_opts *opts) {
        if (!ret || (opts && (opts->version < 1 || opts->version > SPACE_CLIENT_OPTS_VERSION)))
                return -EINVAL;
        const char *token = opts && opts->version >= 2 ? opts->token : NULL;
        if (!token && (token = getenv("SPACE_TOKEN")) && !*token)
                token = NULL;
        if (token && !api_token_ok(token))
                return -EKEYREJECTED;
        char spec[HTTP_MAX_HOST + 128];
        int r;
        if (opts && opts->host) {
                if (strlen(opts->host) >= sizeof spec)
                        return -ENAMETOOLONG;
                strcpy(spec, opts->host);
        } else if ((r = default_host(spec, sizeof spec)) < 0) {
                return r;
        }
        struct http_addr addr;
        r = http_addr_parse(spec, &addr);
        if (r < 0)
                return r;
        space_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        http_conn_init(&c->conn, &addr);
        http_addr_format(&addr, c->host, sizeof c->host);
        c->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
        if (token)
                snprintf(c->auth_header, sizeof c->auth_header, "Authorization: Bearer %s", token);
        *ret = c;
        return 0;
}

space_client *space_client_free(space_client *c) {
        if (!c)
                return NULL;
        http_conn_close(&c->conn);
        explicit_bzero(c->auth_header, sizeof c->auth_header);
        free(c);
        return NULL;
}

const char *space_client_host(const space_client *c) { return c->host; }
const char *space_client_server_timing(const space_client *c) { return c->server_timing; }
const char *space_client_last_error(const space_client *c) { return c->last_error; }
const char *space_client_last_error_code(const space_client *c) { return c->has_code ? c->last_code : NULL; }
int space_client_last_status(const space_client *c) { return c->last_status; }

/* ---- one request ----------------------------------------------------------------- */

typedef int (*event_fn)(void *ud, const struct json *ev);
typedef int (*frame_fn)(void *ud, uint8_t kind, const char *data, size_t n);

struct call {
        /* inputs */
        const space_session *ses; /* a session's request: sends its token, if any */
        const char *method;
        const char *target;
        const char *content_type;
        const void *body;
        size_t body_len;
        bool body_from_fd;
        int body_fd;
        bool body_stream;   /* body, then body_fd to its EOF, chunked, beside the answer */
        bool stream;        /* no timeout: the answer lasts as long as a command */
        event_fn on_event;  /* NDJSON: one call per line of a 2xx answer */
        /* Asks for the binary framing (common/frame.h): output frames go here, event frames
         * to on_event. An answer in NDJSON (an older spaced) still works. */
        frame_fn on_frame;
        void *ud;
        bool to_fd;         /* raw 2xx body to out_fd */
        int out_fd;
        size_t max;         /* cap of the accumulated 2xx body */
        /* state */
        space_client *c;
        struct buf body_in; /* 2xx body (no on_event/out_fd), or the error answer */
        struct buf line;
        struct buf frames;  /* a frame split across reads */
        uint64_t out_bytes;
        int cb_err;         /* an error raised (and described) by a callback */
};

static int call_line(struct call *k, const char *line, size_t n) {
        while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' '))
                n--;
        if (n == 0)
                return 0;
        _cleanup_json_ struct json *ev = NULL;
        char err[128];
        int r = json_parse(line, n, &ev, err, sizeof err);
        if (r < 0 || json_type(ev) != JSON_OBJECT) {
                k->cb_err = fail(k->c, -EBADMSG, "malformed event from spaced: %s", r < 0 ? err : "not an object");
                return k->cb_err;
        }
        r = k->on_event(k->ud, ev);
        if (r < 0) {
                if (!k->c->last_error[0])
                        fail(k->c, r, "%s", space_strerror(r));
                k->cb_err = r;
        }
        return r;
}

/* One whole frame of a framed answer: events as NDJSON's lines, output to on_frame. */
static int call_frame(struct call *k, uint8_t kind, const char *p, size_t n) {
        if (kind == FRAME_EVENT)
                return call_line(k, p, n);
        if (kind != FRAME_STDOUT && kind != FRAME_STDERR)
                return 0; /* newer kinds: skipped */
        int r = k->on_frame(k->ud, kind, p, n);
        if (r < 0) {
                if (!k->c->last_error[0])
                        fail(k->c, r, "%s", space_strerror(r));
                k->cb_err = r;
        }
        return r;
}

/* Splits a framed answer into frames: whole ones straight from data, a split one kept
 * in k->frames until it is complete. */
static int call_frames(struct call *k, const char *data, size_t n) {
        for (;;) {
                bool kept = k->frames.len > 0;
                const uint8_t *p = (const uint8_t *)(kept ? k->frames.data : data);
                size_t avail = kept ? k->frames.len : n;
                uint8_t kind;
                uint32_t len;
                int r = frame_peek(p, avail, &kind, &len);
                if (r < 0)
                        return (k->cb_err = fail(k->c, -EBADMSG, "frame from spaced over %u bytes", FRAME_MAX_PAYLOAD));
                if (r == 1) {
                        r = call_frame(k, kind, (const char *)p + FRAME_HDR_SIZE, len);
                        if (kept) {
                                buf_reset(&k->frames);
                        } else {
                                data += FRAME_HDR_SIZE + len;
                                n -= FRAME_HDR_SIZE + len;
                        }
                        if (r < 0)
                                return r;
                        continue;
                }
                if (n == 0)
                        return 0;
                /* incomplete: keep it, moving over from data only what it still needs */
                size_t take = n;
                if (kept) {
                        size_t need = FRAME_HDR_SIZE;
                        if (avail >= FRAME_HDR_SIZE)
                                need += (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
                        take = MIN(n, need - avail);
                }
                if (buf_append(&k->frames, data, take) < 0)
                        return (k->cb_err = fail(k->c, -ENOMEM, "out of memory"));
                data += take;
                n -= take;
                if (!kept)
                        return 0;
        }
}

static int call_body(void *ud, const struct http_response *resp, const char *data, size_t n) {
        struct call *k = ud;
        int r;
        if (resp->status < 200 || resp->status >= 300) {
                /* keep what fits of an error answer; the rest is drained, not an error */
                size_t room = MAX_ERROR_BODY - k->body_in.len;
                (void)buf_append(&k->body_in, data, n < room ? n : room);
                return 0;
        }
        if (k->to_fd) {
                r = fdio_write_all(k->out_fd, data, n);
                if (r < 0)
                        return (k->cb_err = fail(k->c, r, "writing the downloaded data: %s", strerror(-r)));
                k->out_bytes += n;
                return 0;
        }
        if (k->on_frame && strcmp(resp->content_type, FRAME_CONTENT_TYPE) == 0)
                return call_frames(k, data, n);
        if (k->on_event) {
                /* split into lines; a line is bounded by SPACE_MAX_EVENT */
                while (n > 0) {
                        const char *nl = memchr(data, '\n', n);
                        size_t take = nl ? (size_t)(nl - data) : n;
                        if (buf_append(&k->line, data, take) < 0)
                                return (k->cb_err = fail(k->c, -E2BIG, "event from spaced over %u bytes", SPACE_MAX_EVENT));
                        if (!nl)
                                return 0;
                        r = call_line(k, k->line.data, k->line.len);
                        buf_reset(&k->line);
                        if (r < 0)
                                return r;
                        data += take + 1;
                        n -= take + 1;
                }
                return 0;
        }
        if (buf_append(&k->body_in, data, n) < 0)
                return (k->cb_err = fail(k->c, -E2BIG, "answer from spaced over %zu bytes", k->max));
        return 0;
}

static int conn_error(space_client *c, int r) {
        switch (r) {
        case -ENOENT:
        case -ECONNREFUSED:
                return fail(c, r, "cannot connect to spaced at %s: %s (is spaced running?)", c->host, strerror(-r));
        case -ETIMEDOUT:
                return fail(c, r, "spaced at %s did not answer in time", c->host);
        case -EBADMSG:
                return fail(c, r, "malformed HTTP answer from spaced at %s", c->host);
        case -ECONNRESET:
        case -EPIPE:
                return fail(c, r, "spaced at %s closed the connection", c->host);
        case -E2BIG:
                return fail(c, r, "answer from spaced at %s is over a size limit", c->host);
        default:
                return fail(c, r, "talking to spaced at %s: %s", c->host, strerror(-r));
        }
}

/* Runs k; on a 2xx answer with no sink, k->body_in holds the body (NUL-terminated).
 * Returns the HTTP status (>= 200) or a negative errno with the message set. */
static int call_run(space_client *c, struct call *k) {
        clear_error(c);
        k->c = c;
        k->body_in = BUF_INIT(k->max ? k->max : SPACE_MAX_RESPONSE);
        k->line = BUF_INIT(SPACE_MAX_EVENT);
        k->frames = BUF_INIT(FRAME_HDR_SIZE + FRAME_MAX_PAYLOAD);
        struct http_request req = {
                .method = k->method,
                .target = k->target,
                .content_type = k->content_type,
                .body = k->body,
                .body_len = k->body_len,
                .body_from_fd = k->body_from_fd,
                .body_fd = k->body_fd,
                .body_stream = k->body_stream,
                .timeout_ms = k->stream ? -1 : c->timeout_ms,
        };
        const char *headers[4] = { NULL, NULL, NULL, NULL };
        size_t nh = 0;
        if (k->on_frame)
                headers[nh++] = "Accept: " FRAME_CONTENT_TYPE ", application/x-ndjson";
        if (c->auth_header[0])
                headers[nh++] = c->auth_header;
        if (k->ses && k->ses->has_token)
                headers[nh++] = k->ses->token_header;
        if (nh)
                req.headers = headers;
        struct http_response resp = { 0 };
        int r = http_do(&c->conn, &req, &resp, call_body, k);
        if (r < 0) {
                if (k->cb_err && r == k->cb_err)
                        return r;
                return conn_error(c, r);
        }
        c->last_status = resp.status;
        memcpy(c->server_timing, resp.server_timing, sizeof c->server_timing);
        if (resp.status < 200 || resp.status >= 300)
                return api_error(c, resp.status, &k->body_in);
        if (k->frames.len > 0)
                return fail(c, -EBADMSG, "the stream from spaced ended inside a frame");
        if (k->on_event && k->line.len > 0) {
                /* a last line without its newline still counts */
                r = call_line(k, k->line.data, k->line.len);
                buf_reset(&k->line);
                if (r < 0)
                        return r;
        }
        if (!buf_cstr(&k->body_in))
                return fail(c, -ENOMEM, "out of memory");
        return resp.status;
}

static void call_done(struct call *k) {
        buf_free(&k->body_in);
        buf_free(&k->line);
        buf_free(&k->frames);
}

/* A JSON answer: parses k->body_in into *ret. */
static int call_json(space_client *c, struct call *k, struct json **ret) {
        int r = call_run(c, k);
        if (r < 0)
                return r;
        char err[128];
        if (json_parse(k->body_in.data, k->body_in.len, ret, err, sizeof err) < 0)
                return fail(c, -EBADMSG, "malformed JSON from spaced: %s", err);
        return r;
}

/* Runs k to its end: on success, *ret_body (when given) takes the answer's text and, when
 * ret is given, the answer must be JSON and *ret gets it parsed. */
static int call_once(space_client *c, struct call *k, struct json **ret, char **ret_body) {
        int r = ret ? call_json(c, k, ret) : call_run(c, k);
        if (r >= 0 && ret_body)
                *ret_body = TAKE_PTR(k->body_in.data);
        call_done(k);
        return r < 0 ? r : 0;
}

/* A JSON request body, for the call initializers below. */
#define JSON_BODY(p, n) .content_type = "application/json", .body = (p), .body_len = (n)

static bool id_ok(const char *id) {
        size_t n = id ? strlen(id) : 0;
        if (n == 0 || n > MAX_ID)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)id[i]) && id[i] != '_' && id[i] != '-' && id[i] != '.')
                        return false;
        return true;
}

/* "/v1/sessions/<id><suffix>" and, when path is given, "?path=<enc>" + extra. */
static int session_target(struct buf *t, const space_session *s, const char *suffix, const char *path, const char *extra) {
        int r = buf_printf(t, "/v1/sessions/%s%s", s->id, suffix ? suffix : "");
        if (r >= 0 && path) {
                r = buf_puts(t, "?path=");
                if (r >= 0)
                        r = http_urlencode(t, path);
        }
        if (r >= 0 && extra)
                r = buf_puts(t, extra);
        if (r >= 0 && !buf_cstr(t))
                r = -ENOMEM;
        return r;
}

static bool path_ok(const char *p) { return p && p[0] && strlen(p) < 4096; }

/* session_target for a call on s; path, when given, must be a valid file path. */
static int session_target_ok(space_session *s, struct buf *t, const char *suffix, const char *path,
                             const char *extra) {
        if (path && !path_ok(path))
                return fail(s->c, -EINVAL, "invalid path");
        int r = session_target(t, s, suffix, path, extra);
        if (r >= 0)
                return 0;
        if (path)
                return fail(s->c, r == -ENOMEM ? r : -ENAMETOOLONG, "path too long");
        return fail(s->c, r, "building the request: %s", strerror(-r));
}

/* A request on the session, as call_once: k (method, body, sinks) to "/v1/sessions/{id}<suffix>",
 * with "?path=<path><extra>" when path is given. */
static int session_call(space_session *s, struct call *k, const char *suffix, const char *path, const char *extra,
                        struct json **ret, char **ret_body) {
        _cleanup_buf_ struct buf t = BUF_INIT(HTTP_MAX_TARGET);
        int r = session_target_ok(s, &t, suffix, path, extra);
        if (r < 0)
                return r;
        k->target = t.data;
        k->ses = s;
        return call_once(s->c, k, ret, ret_body);
}

/* Closes the request object; an encoding error is the call's. */
static int request_end(space_client *c, struct json_writer *w) {
        json_w_obj_end(w);
        return w->err ? fail(c, w->err, "encoding the request: %s", strerror(-w->err)) : 0;
}

/* Ends the request object of w and POSTs it to the session's suffix, as session_call. */
static int session_post(space_session *s, const char *suffix, struct json_writer *w, struct json **ret) {
        int r = request_end(s->c, w);
        if (r < 0)
                return r;
        return session_call(s, &(struct call){ .method = "POST", JSON_BODY(w->b->data, w->b->len) }, suffix, NULL, NULL, ret,
                            NULL);
}

/* ---- small JSON readers ---------------------------------------------------------- */

static void copy_str(char *dst, size_t n, const struct json *obj, const char *key) {
        const char *s = json_get_str(obj, key);
        snprintf(dst, n, "%s", s ? s : "");
}

static int64_t get_i64(const struct json *obj, const char *key, int64_t def) {
        int64_t v;
        return json_get_int(obj, key, &v) >= 0 ? v : def;
}

static uint64_t get_u64(const struct json *obj, const char *key) {
        const struct json *j = json_get(obj, key);
        int64_t v;
        if (j && json_int(j, &v) >= 0)
                return v < 0 ? 0 : (uint64_t)v;
        if (j && json_type(j) == JSON_NUMBER) {
                double d = json_num(j);
                return d > 0 ? (uint64_t)d : 0;
        }
        return 0;
}

/* A mode may come as a number or as an octal string ("0644"). */
static unsigned get_mode(const struct json *obj, const char *key) {
        const struct json *j = json_get(obj, key);
        int64_t v;
        if (j && json_int(j, &v) >= 0)
                return (unsigned)v;
        const char *s = json_str(j);
        return s ? (unsigned)strtoul(s, NULL, 8) : 0;
}

/* A time may come as seconds or as an RFC 3339 string (then copied to str). */
static void get_time(const struct json *obj, const char *key, char *str, size_t n) {
        const struct json *j = json_get(obj, key);
        if (json_type(j) == JSON_STRING)
                snprintf(str, n, "%s", json_str(j));
        else if (j && json_type(j) == JSON_NUMBER)
                snprintf(str, n, "%" PRId64, (int64_t)json_num(j));
        else
                snprintf(str, n, "%s", "");
}

/* The array at key of an answer as n records, each filled by fill: a new array (of one
 * zeroed record when n is 0). what names the answer in the error. */
static int json_records(space_client *c, const struct json *j, const char *key, const char *what, size_t elsz,
                        void (*fill)(const struct json *, void *), void **ret, size_t *ret_n) {
        const struct json *arr = json_get(j, key);
        if (json_type(arr) != JSON_ARRAY)
                return fail(c, -EBADMSG, "%s without a \"%s\" array", what, key);
        size_t n = json_len(arr);
        char *v = calloc(n ? n : 1, elsz);
        if (!v)
                return fail(c, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++)
                fill(json_at(arr, i), v + i * elsz);
        *ret = v;
        *ret_n = n;
        return 0;
}

/* GETs target of the daemon and takes the array at key of its answer, as json_records. */
static int get_records(space_client *c, const char *target, const char *key, const char *what, size_t elsz,
                       void (*fill)(const struct json *, void *), void **ret, size_t *ret_n) {
        _cleanup_json_ struct json *j = NULL;
        int r = call_once(c, &(struct call){ .method = "GET", .target = target }, &j, NULL);
        if (r < 0)
                return r;
        return json_records(c, j, key, what, elsz, fill, ret, ret_n);
}

static void fill_session_info(const struct json *o, void *ret) {
        struct space_session_info *si = ret;
        *si = (struct space_session_info){ 0 };
        copy_str(si->id, sizeof si->id, o, "id");
        copy_str(si->sandbox_id, sizeof si->sandbox_id, o, "sandbox_id");
        copy_str(si->state, sizeof si->state, o, "state");
        copy_str(si->template_name, sizeof si->template_name, o, "template");
        copy_str(si->runtime, sizeof si->runtime, o, "runtime");
        get_time(o, "created_at", si->created_at, sizeof si->created_at);
        const struct json *lim = json_get(o, "limits");
        si->memory_limit = get_u64(lim, "memory");
        const struct json *cpus = json_get(lim, "cpus");
        si->cpus = json_type(cpus) == JSON_NUMBER ? json_num(cpus) : 0;
        si->pids_limit = get_i64(lim, "pids", 0);
        si->disk_limit = get_u64(lim, "disk");
        si->network = json_get_bool(o, "network", false);
        si->init_pid = (int)get_i64(o, "init_pid", 0);
        const struct json *h = json_get(o, "health");
        si->alive = json_get_bool(h, "alive", false);
        si->oom_killed = json_get_bool(h, "oom_killed", false);
        si->memory_bytes = get_u64(h, "memory_bytes");
        si->pids = get_i64(h, "pids", 0);
        copy_str(si->error, sizeof si->error, o, "error");
        copy_str(si->head_snapshot, sizeof si->head_snapshot, o, "head_snapshot");
        copy_str(si->parent_session, sizeof si->parent_session, o, "parent_session");
        copy_str(si->source_snapshot, sizeof si->source_snapshot, o, "source_snapshot");
        get_time(o, "last_snapshot_at", si->last_snapshot_at, sizeof si->last_snapshot_at);
        si->snapshot_interval_ms = get_u64(o, "snapshot_interval_ms");
        si->retention = (unsigned)get_u64(o, "retention");
        si->recoveries = (unsigned)get_u64(o, "recoveries");
}

/* ---- generic GETs ---------------------------------------------------------------- */

int space_get_json(space_client *c, const char *path, char **ret_json) {
        if (!path || path[0] != '/')
                return fail(c, -EINVAL, "invalid API path");
        return call_once(c, &(struct call){ .method = "GET", .target = path }, NULL, ret_json);
}

int space_health(space_client *c, char **ret_json) { return space_get_json(c, "/v1/health", ret_json); }

int space_pool_set(space_client *c, const char *template_name, unsigned size, char **ret_json) {
        /* The daemon checks the name; this only keeps it one path segment. */
        if (!template_name || !*template_name || strlen(template_name) > 64 || strpbrk(template_name, "/?#% "))
                return fail(c, -EINVAL, "invalid template name");
        char target[96], body[48];
        snprintf(target, sizeof target, "/v1/pool/%s", template_name);
        int n = snprintf(body, sizeof body, "{\"size\":%u}", size);
        return call_once(c, &(struct call){ .method = "PUT", .target = target, JSON_BODY(body, (size_t)n) }, NULL,
                         ret_json);
}

/* ---- sessions -------------------------------------------------------------------- */

static int env_object(struct json_writer *w, const char *const *env) {
        json_w_obj_begin(w);
        size_t n = 0;
        for (; env && env[n]; n++) {
                if (n >= SPACE_MAX_ARGV)
                        return -E2BIG;
                const char *eq = strchr(env[n], '=');
                if (!eq || eq == env[n])
                        return -EINVAL;
                _cleanup_free_ char *k = strndup(env[n], (size_t)(eq - env[n]));
                if (!k)
                        return -ENOMEM;
                json_w_kstr(w, k, eq + 1);
        }
        json_w_obj_end(w);
        return 0;
}

static int session_from_json(space_client *c, const struct json *j, const char *body, space_session **ret) {
        const char *id = json_get_str(j, "id");
        if (!id_ok(id))
                return fail(c, -EBADMSG, "spaced answered without a valid session id");
        space_session *s = calloc(1, sizeof *s);
        if (!s)
                return fail(c, -ENOMEM, "out of memory");
        s->json = strdup(body);
        if (!s->json) {
                free(s);
                return fail(c, -ENOMEM, "out of memory");
        }
        s->c = c;
        strcpy(s->id, id);
        const char *tok = json_get_str(j, "token");
        if (tok && space_session_set_token(s, tok) < 0) {
                space_session_free(s);
                return fail(c, -EBADMSG, "spaced answered with a malformed session token");
        }
        *ret = s;
        return 0;
}

static bool token_ok(const char *t) {
        size_t n = t ? strlen(t) : 0;
        if (n == 0 || n > SPACE_MAX_TOKEN)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)t[i]) && t[i] != '_' && t[i] != '-')
                        return false;
        return true;
}

int space_session_set_token(space_session *s, const char *token) {
        if (!token) {
                s->has_token = false;
                s->token[0] = s->token_header[0] = '\0';
                return 0;
        }
        /* url-safe only: the token goes into a header line as it is */
        if (!token_ok(token))
                return -EINVAL;
        snprintf(s->token, sizeof s->token, "%s", token);
        snprintf(s->token_header, sizeof s->token_header, "X-Space-Session-Token: %s", token);
        s->has_token = true;
        return 0;
}

const char *space_session_token(const space_session *s) { return s->has_token ? s->token : NULL; }

/* Replaces the handle's session object with body (the JSON of j). */
static int session_refresh(space_session *s, const char *body) {
        char *copy = strdup(body);
        if (!copy)
                return fail(s->c, -ENOMEM, "out of memory");
        free(s->json);
        s->json = copy;
        return 0;
}

/* Runs k, whose answer is a session object, into a new handle. */
static int session_answer(space_client *c, struct call *k, space_session **ret) {
        _cleanup_json_ struct json *j = NULL;
        _cleanup_free_ char *text = NULL;
        int r = call_once(c, k, &j, &text);
        if (r < 0)
                return r;
        return session_from_json(c, j, text, ret);
}

int space_session_new(space_session **ret, space_client *c, const struct space_session_opts *o) {
        if (o && (o->version < 1 || o->version > SPACE_SESSION_OPTS_VERSION))
                return fail(c, -EINVAL, "unknown space_session_opts version");
        bool v2 = o && o->version >= 2;
        if (v2 && o->snapshot && !id_ok(o->snapshot))
                return fail(c, -EINVAL, "invalid snapshot id '%s'", o->snapshot);
        _cleanup_buf_ struct buf b = BUF_INIT(1u << 20);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (o && o->template)
                json_w_kstr(&w, "template", o->template);
        if (o && o->version >= 4 && o->runtime)
                json_w_kstr(&w, "runtime", o->runtime);
        if (o && o->memory) {
                json_w_key(&w, "memory");
                json_w_uint(&w, o->memory);
        }
        if (o && o->cpus > 0) {
                json_w_key(&w, "cpus");
                json_w_double(&w, o->cpus);
        }
        if (o && o->pids > 0)
                json_w_kint(&w, "pids", o->pids);
        if (o && o->env) {
                json_w_key(&w, "env");
                int r = env_object(&w, o->env);
                if (r < 0)
                        return fail(c, r, r == -EINVAL ? "environment entries must be K=V" : "too many environment entries");
        }
        if (o && o->version >= 5 && o->network_json) {
                _cleanup_json_ struct json *nj = NULL;
                size_t n = strlen(o->network_json);
                if (n > SPACE_MAX_NETWORK_JSON)
                        return fail(c, -E2BIG, "network policy over %u bytes", SPACE_MAX_NETWORK_JSON);
                if (json_parse(o->network_json, n, &nj, NULL, 0) < 0)
                        return fail(c, -EINVAL, "the network policy is not JSON");
                json_w_key(&w, "network");
                json_w_value(&w, nj);
        } else if (o && o->network)
                json_w_kbool(&w, "network", true);
        if (v2 && o->snapshot)
                json_w_kstr(&w, "snapshot", o->snapshot);
        if (v2 && (o->no_rolling_snapshots || o->snapshot_interval_ms)) {
                json_w_key(&w, "snapshot_interval_ms");
                json_w_uint(&w, o->no_rolling_snapshots ? 0 : o->snapshot_interval_ms);
        }
        if (v2 && o->retention)
                json_w_kint(&w, "retention", o->retention);
        if (o && o->version >= 3 && o->disk) {
                json_w_key(&w, "disk");
                json_w_uint(&w, o->disk);
        }
        if (o && o->version >= 6) {
                if (o->timeout_s < 0 || o->idle_timeout_s < 0)
                        return fail(c, -EINVAL, "a timeout must not be negative");
                if (o->timeout_s)
                        json_w_kint(&w, "timeout", o->timeout_s);
                if (o->timeout_delete)
                        json_w_kstr(&w, "timeout_action", "delete");
                if (o->idle_timeout_s)
                        json_w_kint(&w, "idle_timeout", o->idle_timeout_s);
                if (o->idle_delete)
                        json_w_kstr(&w, "idle_action", "delete");
                if (o->auto_resume)
                        json_w_kbool(&w, "auto_resume", true);
        }
        int r = request_end(c, &w);
        if (r < 0)
                return r;
        return session_answer(c, &(struct call){ .method = "POST", .target = "/v1/sessions", JSON_BODY(b.data, b.len) },
                              ret);
}

int space_session_open(space_session **ret, space_client *c, const char *id) {
        if (!id_ok(id))
                return fail(c, -EINVAL, "invalid session id '%s'", id ? id : "");
        char target[128];
        snprintf(target, sizeof target, "/v1/sessions/%s", id);
        return session_answer(c, &(struct call){ .method = "GET", .target = target }, ret);
}

space_session *space_session_free(space_session *s) {
        if (!s)
                return NULL;
        free(s->json);
        explicit_bzero(s->token, sizeof s->token);
        explicit_bzero(s->token_header, sizeof s->token_header);
        free(s);
        return NULL;
}

void space_session_array_free(space_session **v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                space_session_free(v[i]);
        free(v);
}

int space_session_connect(space_session **ret, space_client *c, const char *id, const char *token) {
        if (!id_ok(id))
                return fail(c, -EINVAL, "invalid session id '%s'", id ? id : "");
        if (!token_ok(token))
                return fail(c, -EINVAL, "invalid session token (want 1..%d characters of A-Z a-z 0-9 _ -)",
                            SPACE_MAX_TOKEN);
        char target[128];
        snprintf(target, sizeof target, "/v1/sessions/%s/connect", id);
        _cleanup_buf_ struct buf b = BUF_INIT(4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "token", token);
        int r = request_end(c, &w);
        if (r < 0)
                return r;
        space_session *s = NULL;
        r = session_answer(c, &(struct call){ .method = "POST", .target = target, JSON_BODY(b.data, b.len) }, &s);
        explicit_bzero(b.data, b.len);
        if (r < 0)
                return r;
        if (strcmp(s->id, id) != 0) {
                space_session_free(s);
                return fail(c, -EBADMSG, "spaced answered for session %s, not %s", s->id, id);
        }
        r = space_session_set_token(s, token);
        if (r < 0) {
                space_session_free(s);
                return fail(c, r, "invalid session token");
        }
        *ret = s;
        return 0;
}

const char *space_session_id(const space_session *s) { return s->id; }
const char *space_session_json(const space_session *s) { return s->json; }

int space_session_inspect(space_session *s, struct space_session_info *ret) {
        _cleanup_json_ struct json *j = NULL;
        _cleanup_free_ char *text = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, NULL, NULL, NULL, &j, &text);
        if (r >= 0)
                r = session_refresh(s, text);
        if (r >= 0 && ret)
                fill_session_info(j, ret);
        return r;
}

static int delete_session(space_client *c, const char *id, const space_session *s) {
        if (!id_ok(id))
                return fail(c, -EINVAL, "invalid session id '%s'", id ? id : "");
        char target[128];
        snprintf(target, sizeof target, "/v1/sessions/%s", id);
        return call_once(c, &(struct call){ .method = "DELETE", .target = target, .ses = s }, NULL, NULL);
}

int space_session_delete_id(space_client *c, const char *id) { return delete_session(c, id, NULL); }
int space_session_delete(space_session *s) { return delete_session(s->c, s->id, s); }

int space_session_list(space_client *c, struct space_session_info **ret, size_t *ret_n) {
        return get_records(c, "/v1/sessions", "sessions", "session list", sizeof **ret, fill_session_info, (void **)ret,
                           ret_n);
}

/* ---- durable sessions ------------------------------------------------------------ */

static void fill_snapshot(const struct json *o, void *ret) {
        struct space_snapshot_info *si = ret;
        *si = (struct space_snapshot_info){ 0 };
        copy_str(si->id, sizeof si->id, o, "id");
        copy_str(si->session, sizeof si->session, o, "session");
        copy_str(si->parent, sizeof si->parent, o, "parent");
        get_time(o, "created_at", si->created_at, sizeof si->created_at);
        copy_str(si->reason, sizeof si->reason, o, "reason");
        copy_str(si->label, sizeof si->label, o, "label");
        si->bytes_added = get_u64(o, "bytes_added");
        si->logical_size = get_u64(o, "logical_size");
        copy_str(si->root, sizeof si->root, o, "root");
        copy_str(si->store_snapshot, sizeof si->store_snapshot, o, "store_snapshot");
        const struct json *f = json_get(o, "freeze_ms");
        si->freeze_ms = json_type(f) == JSON_NUMBER ? json_num(f) : -1;
        si->memory = json_get_bool(o, "memory", false);
}

/* A lifecycle call whose answer is the session object: refreshes the handle. */
static int lifecycle(space_session *s, const char *suffix, const struct buf *body) {
        _cleanup_json_ struct json *j = NULL;
        _cleanup_free_ char *text = NULL;
        struct call k = { .method = "POST" };
        if (body)
                k = (struct call){ .method = "POST", JSON_BODY(body->data, body->len) };
        int r = session_call(s, &k, suffix, NULL, NULL, &j, &text);
        if (r < 0)
                return r;
        if (json_type(j) != JSON_OBJECT)
                return fail(s->c, -EBADMSG, "spaced answered %s with something other than a session", suffix);
        return session_refresh(s, text);
}

int space_snapshot_create(space_session *s, const char *label, struct space_snapshot_info *ret) {
        return space_snapshot_create_memory(s, label, false, ret);
}

int space_snapshot_create_memory(space_session *s, const char *label, bool memory, struct space_snapshot_info *ret) {
        if (label && strlen(label) > SPACE_MAX_LABEL)
                return fail(s->c, -E2BIG, "label longer than %d bytes", SPACE_MAX_LABEL);
        _cleanup_buf_ struct buf b = BUF_INIT(4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (label)
                json_w_kstr(&w, "label", label);
        if (memory)
                json_w_kbool(&w, "memory", true);
        _cleanup_json_ struct json *j = NULL;
        int r = session_post(s, "/snapshots", &w, &j);
        if (r < 0)
                return r;
        if (!id_ok(json_get_str(j, "id")))
                return fail(s->c, -EBADMSG, "spaced answered the snapshot without a valid id");
        if (ret)
                fill_snapshot(j, ret);
        return 0;
}

int space_snapshot_list(space_session *s, struct space_snapshot_info **ret, size_t *ret_n) {
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, "/snapshots", NULL, NULL, &j, NULL);
        if (r < 0)
                return r;
        return json_records(s->c, j, "snapshots", "snapshot list", sizeof **ret, fill_snapshot, (void **)ret, ret_n);
}

int space_session_get_json(space_session *s, const char *suffix, char **ret_json) {
        if (!suffix || (suffix[0] && suffix[0] != '/' && suffix[0] != '?'))
                return fail(s->c, -EINVAL, "invalid API path");
        _cleanup_json_ struct json *j = NULL; /* the answer must be JSON */
        return session_call(s, &(struct call){ .method = "GET" }, suffix, NULL, NULL, &j, ret_json);
}

int space_session_network_get(space_session *s, char **ret_json) {
        _cleanup_json_ struct json *j = NULL; /* the answer must be JSON */
        return session_call(s, &(struct call){ .method = "GET" }, "/network", NULL, NULL, &j, ret_json);
}

int space_session_network_set(space_session *s, const char *policy_json, char **ret_json) {
        if (!policy_json)
                return fail(s->c, -EINVAL, "no network policy");
        size_t n = strlen(policy_json);
        if (n > SPACE_MAX_NETWORK_JSON)
                return fail(s->c, -E2BIG, "network policy over %u bytes", SPACE_MAX_NETWORK_JSON);
        _cleanup_json_ struct json *pj = NULL;
        if (json_parse(policy_json, n, &pj, NULL, 0) < 0 || json_type(pj) != JSON_OBJECT)
                return fail(s->c, -EINVAL, "the network policy must be a JSON object");
        _cleanup_json_ struct json *j = NULL;
        return session_call(s, &(struct call){ .method = "PUT", JSON_BODY(policy_json, n) }, "/network", NULL, NULL, &j,
                            ret_json);
}

int space_session_timeouts_set(space_session *s, const char *timeouts_json, char **ret_json) {
        if (!timeouts_json)
                return fail(s->c, -EINVAL, "no timeouts");
        size_t n = strlen(timeouts_json);
        if (n > SPACE_MAX_TIMEOUTS_JSON)
                return fail(s->c, -E2BIG, "timeouts over %u bytes", SPACE_MAX_TIMEOUTS_JSON);
        _cleanup_json_ struct json *tj = NULL;
        if (json_parse(timeouts_json, n, &tj, NULL, 0) < 0 || json_type(tj) != JSON_OBJECT)
                return fail(s->c, -EINVAL, "the timeouts must be a JSON object");
        _cleanup_json_ struct json *j = NULL;
        return session_call(s, &(struct call){ .method = "PUT", JSON_BODY(timeouts_json, n) }, "/timeouts", NULL, NULL,
                            &j, ret_json);
}

int space_session_pause(space_session *s) { return lifecycle(s, "/pause", NULL); }
int space_session_resume(space_session *s) { return lifecycle(s, "/resume", NULL); }

int space_session_restore(space_session *s, const char *snap) {
        if (!id_ok(snap))
                return fail(s->c, -EINVAL, "invalid snapshot id '%s'", snap ? snap : "");
        _cleanup_buf_ struct buf b = BUF_INIT(4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "snapshot", snap);
        int r = request_end(s->c, &w);
        return r < 0 ? r : lifecycle(s, "/restore", &b);
}

int space_session_fork(space_session *s, const struct space_fork_opts *o, space_session ***ret, size_t *ret_n) {
        space_client *c = s->c;
        if (o && o->version != SPACE_FORK_OPTS_VERSION)
                return fail(c, -EINVAL, "unknown space_fork_opts version");
        unsigned count = o && o->count ? o->count : 1;
        if (count > SPACE_MAX_FORK)
                return fail(c, -E2BIG, "at most %d sessions per fork", SPACE_MAX_FORK);
        if (o && o->snapshot && !id_ok(o->snapshot))
                return fail(c, -EINVAL, "invalid snapshot id '%s'", o->snapshot);
        _cleanup_buf_ struct buf b = BUF_INIT(4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (o && o->snapshot)
                json_w_kstr(&w, "snapshot", o->snapshot);
        json_w_kint(&w, "count", count);
        _cleanup_json_ struct json *j = NULL;
        int r = session_post(s, "/fork", &w, &j);
        if (r < 0)
                return r;
        const struct json *arr = json_get(j, "sessions");
        if (json_type(arr) != JSON_ARRAY || json_len(arr) == 0 || json_len(arr) > SPACE_MAX_FORK)
                return fail(c, -EBADMSG, "fork answered without a \"sessions\" array of 1..%d", SPACE_MAX_FORK);
        size_t n = json_len(arr);
        space_session **v = calloc(n, sizeof *v);
        if (!v)
                return fail(c, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                /* each handle keeps its own object, re-encoded from the array element */
                _cleanup_buf_ struct buf one = BUF_INIT(SPACE_MAX_RESPONSE);
                struct json_writer ow = JSON_WRITER_INIT(&one);
                json_w_value(&ow, json_at(arr, i));
                r = ow.err ? fail(c, ow.err, "out of memory") : !buf_cstr(&one) ? fail(c, -ENOMEM, "out of memory") : 0;
                if (r >= 0)
                        r = session_from_json(c, json_at(arr, i), one.data, &v[i]);
                if (r < 0) {
                        space_session_array_free(v, i);
                        return r;
                }
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

void space_event_page_free(struct space_event_page *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n; i++)
                free(p->events[i].data);
        free(p->events);
        *p = (struct space_event_page){ 0 };
}

int space_event_list(space_session *s, uint64_t after, unsigned limit, struct space_event_page *ret) {
        space_client *c = s->c;
        if (limit > SPACE_MAX_EVENT_PAGE)
                return fail(c, -E2BIG, "at most %d events per page", SPACE_MAX_EVENT_PAGE);
        char suffix[96];
        int m = snprintf(suffix, sizeof suffix, "/events?after=%" PRIu64, after);
        if (limit)
                snprintf(suffix + m, sizeof suffix - (size_t)m, "&limit=%u", limit);
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, suffix, NULL, NULL, &j, NULL);
        if (r < 0)
                return r;
        const struct json *arr = json_get(j, "events");
        if (json_type(arr) != JSON_ARRAY)
                return fail(c, -EBADMSG, "event page without an \"events\" array");
        struct space_event_page p = { 0 };
        p.n = json_len(arr);
        p.events = calloc(p.n ? p.n : 1, sizeof *p.events);
        if (!p.events)
                return fail(c, -ENOMEM, "out of memory");
        for (size_t i = 0; i < p.n; i++) {
                const struct json *e = json_at(arr, i);
                struct space_event *ev = &p.events[i];
                ev->seq = get_u64(e, "seq");
                get_time(e, "time", ev->time, sizeof ev->time);
                copy_str(ev->kind, sizeof ev->kind, e, "kind");
                struct buf d = BUF_INIT(SPACE_MAX_RESPONSE);
                struct json_writer w = JSON_WRITER_INIT(&d);
                const struct json *data = json_get(e, "data");
                if (data)
                        json_w_value(&w, data);
                else
                        json_w_null(&w);
                if (w.err || !buf_cstr(&d)) {
                        buf_free(&d);
                        p.n = i;
                        space_event_page_free(&p);
                        return fail(c, -ENOMEM, "out of memory");
                }
                ev->data = TAKE_PTR(d.data);
        }
        p.more = json_get_bool(j, "more", false);
        /* Go on after the last event received: whether the daemon's "next" names the last
         * seq sent or the first one to come, this neither skips nor repeats an event. */
        p.next = p.n && p.events[p.n - 1].seq > after ? p.events[p.n - 1].seq : after;
        *ret = p;
        return 0;
}

int space_session_metrics(space_session *s, int64_t start_ms, int64_t end_ms, unsigned limit,
                          struct space_metrics *ret) {
        space_client *c = s->c;
        if (limit > SPACE_MAX_METRICS_SAMPLES)
                return fail(c, -E2BIG, "at most %d samples", SPACE_MAX_METRICS_SAMPLES);
        if (start_ms < 0 || end_ms < 0 || (end_ms && start_ms > end_ms))
                return fail(c, -EINVAL, "bad time window");
        char suffix[160];
        size_t m = (size_t)snprintf(suffix, sizeof suffix, "/metrics?limit=%u", limit ? limit : SPACE_MAX_METRICS_SAMPLES);
        if (start_ms)
                m += (size_t)snprintf(suffix + m, sizeof suffix - m, "&start=%" PRId64 ".%03d", start_ms / 1000,
                                      (int)(start_ms % 1000));
        if (end_ms)
                snprintf(suffix + m, sizeof suffix - m, "&end=%" PRId64 ".%03d", end_ms / 1000, (int)(end_ms % 1000));
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, suffix, NULL, NULL, &j, NULL);
        if (r < 0)
                return r;
        const struct json *arr = json_get(j, "samples");
        if (json_type(arr) != JSON_ARRAY || json_len(arr) > SPACE_MAX_METRICS_SAMPLES)
                return fail(c, -EBADMSG, "metrics without a \"samples\" array of at most %d", SPACE_MAX_METRICS_SAMPLES);
        struct space_metrics out = { .interval_ms = get_i64(j, "interval_ms", 0), .n = json_len(arr) };
        out.samples = calloc(out.n ? out.n : 1, sizeof *out.samples);
        if (!out.samples)
                return fail(c, -ENOMEM, "out of memory");
        for (size_t i = 0; i < out.n; i++) {
                const struct json *e = json_at(arr, i);
                struct space_metrics_sample *x = &out.samples[i];
                x->t_ms = get_i64(e, "t_ms", 0);
                get_time(e, "t", x->t, sizeof x->t);
                x->cpu_ms = get_u64(e, "cpu_ms");
                x->cpu_pct = json_num(json_get(e, "cpu_pct"));
                x->memory_bytes = get_u64(e, "memory_bytes");
                x->memory_limit_bytes = get_u64(e, "memory_limit_bytes");
                x->disk_bytes = get_u64(e, "disk_bytes");
                x->net_rx_bytes = get_u64(e, "net_rx_bytes");
                x->net_tx_bytes = get_u64(e, "net_tx_bytes");
        }
        *ret = out;
        return 0;
}

void space_metrics_free(struct space_metrics *m) {
        if (!m)
                return;
        free(m->samples);
        m->samples = NULL;
        m->n = 0;
}

int space_event_append(space_session *s, const char *kind, const char *data_json, uint64_t *ret_seq) {
        space_client *c = s->c;
        if (!kind || !*kind || strlen(kind) > 64)
                return fail(c, -EINVAL, "invalid event kind");
        size_t dn = data_json ? strlen(data_json) : 0;
        if (dn > SPACE_MAX_EVENT_DATA)
                return fail(c, -E2BIG, "event data larger than %u bytes", SPACE_MAX_EVENT_DATA);
        _cleanup_json_ struct json *data = NULL;
        char err[128];
        if (data_json && json_parse(data_json, dn, &data, err, sizeof err) < 0)
                return fail(c, -EINVAL, "event data is not JSON: %s", err);
        _cleanup_buf_ struct buf b = BUF_INIT(SPACE_MAX_EVENT_DATA + 4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "kind", kind);
        json_w_key(&w, "data");
        if (data)
                json_w_value(&w, data);
        else
                json_w_raw(&w, "{}", 2);
        _cleanup_json_ struct json *j = NULL;
        int r = session_post(s, "/events", &w, &j);
        if (r < 0)
                return r;
        if (ret_seq)
                *ret_seq = get_u64(j, "seq");
        return 0;
}

int space_gc(space_client *c, struct space_gc_result *ret) {
        _cleanup_json_ struct json *j = NULL;
        int r = call_once(c, &(struct call){ .method = "POST", .target = "/v1/gc", JSON_BODY("{}", 2) }, &j, NULL);
        if (r < 0)
                return r;
        if (ret)
                *ret = (struct space_gc_result){ .objects_removed = get_u64(j, "objects_removed"),
                                                 .bytes_freed = get_u64(j, "bytes_freed") };
        return 0;
}

/* ---- exec and attach ------------------------------------------------------------- */

struct exec_state {
        space_client *c;
        space_output_fn on_output;
        space_start_fn on_start;
        void *ud;
        struct space_exec_result res;
        struct buf tmp;
};

static int output_event(struct exec_state *st, const struct json *ev, enum space_stream which) {
        const char *data = json_get_str(ev, "data");
        if (data) {
                if (st->on_output)
                        return st->on_output(st->ud, which, data, strlen(data));
                return 0;
        }
        const char *b64 = json_get_str(ev, "data_b64");
        if (!b64)
                return 0;
        buf_reset(&st->tmp);
        int r = text_b64_decode(&st->tmp, b64, strlen(b64));
        if (r < 0)
                return fail(st->c, -EBADMSG, "bad base64 in an output event");
        if (st->on_output && st->tmp.len > 0)
                return st->on_output(st->ud, which, st->tmp.data, st->tmp.len);
        return 0;
}

/* Output in the binary framing: the bytes as they came. */
static int exec_frame(void *ud, uint8_t kind, const char *data, size_t n) {
        struct exec_state *st = ud;
        if (!st->on_output || n == 0)
                return 0;
        return st->on_output(st->ud, kind == FRAME_STDOUT ? SPACE_STDOUT : SPACE_STDERR, data, n);
}

static int exec_event(void *ud, const struct json *ev) {
        struct exec_state *st = ud;
        const char *type = json_get_str(ev, "type");
        if (!type)
                return 0;
        if (strcmp(type, "stdout") == 0)
                return output_event(st, ev, SPACE_STDOUT);
        if (strcmp(type, "stderr") == 0)
                return output_event(st, ev, SPACE_STDERR);
        if (strcmp(type, "start") == 0) {
                st->res.pid = (int)get_i64(ev, "pid", 0);
                if (st->on_start)
                        st->on_start(st->ud, st->res.pid);
                return 0;
        }
        if (strcmp(type, "attach") == 0) {
                st->res.offset = get_u64(ev, "offset");
                st->res.next_offset = st->res.offset;
                st->res.running = json_get_bool(ev, "running", false);
                return 0;
        }
        if (strcmp(type, "end") == 0) {
                /* attach without follow, process still running */
                st->res.running = json_get_bool(ev, "running", st->res.running);
                if (json_get(ev, "offset"))
                        st->res.next_offset = get_u64(ev, "offset");
                return 0;
        }
        if (strcmp(type, "exit") == 0) {
                st->res.exited = true;
                st->res.running = false;
                st->res.exit_code = (int)get_i64(ev, "exit_code", -1);
                st->res.signal = (int)get_i64(ev, "signal", 0);
                st->res.timed_out = json_get_bool(ev, "timed_out", false);
                if (st->res.signal > 0 && !json_get(ev, "exit_code"))
                        st->res.exit_code = -1;
                if (json_get(ev, "offset"))
                        st->res.next_offset = get_u64(ev, "offset");
                return 0;
        }
        if (strcmp(type, "error") == 0) {
                const struct json *e = json_get(ev, "error");
                record_api_error(st->c, e ? e : ev);
                return errno_from_code(st->c->last_code);
        }
        return 0; /* newer event types: ignored */
}

/* A sandbox user as the API takes it (docs/api.md): [a-z_][a-z0-9_-]{0,31} or digits; the
 * daemon checks the rest (the uid's range, that the sandbox knows the name). */
static bool user_ok(const char *u) {
        size_t n = strlen(u);
        if (n == 0 || n > 32)
                return false;
        for (const char *p = u; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || (*p == '-' && p != u)))
                        return false;
        return true;
}

int space_exec(space_session *s, const struct space_exec_opts *o, struct space_exec_result *ret) {
        space_client *c = s->c;
        if (!o || o->version < 1 || o->version > SPACE_EXEC_OPTS_VERSION)
                return fail(c, -EINVAL, "missing or unknown space_exec_opts version");
        bool stdin_stream = o->version >= 2 && o->stdin_stream;
        if (stdin_stream && (o->stdin_data || o->background))
                return fail(c, -EINVAL, "stdin_stream goes with neither stdin_data nor background");
        if (stdin_stream && o->stdin_fd < 0)
                return fail(c, -EBADF, "stdin_stream without a stdin_fd");
        if (!o->argv || !o->argv[0] || !o->argv[0][0])
                return fail(c, -EINVAL, "no command given");
        if (o->stdin_len > SPACE_MAX_STDIN)
                return fail(c, -E2BIG, "stdin is larger than %u bytes", SPACE_MAX_STDIN);
        _cleanup_buf_ struct buf b = BUF_INIT(1u << 20);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "argv");
        json_w_arr_begin(&w);
        for (size_t i = 0; o->argv[i]; i++) {
                if (i >= SPACE_MAX_ARGV)
                        return fail(c, -E2BIG, "more than %d arguments", SPACE_MAX_ARGV);
                json_w_str(&w, o->argv[i]);
        }
        json_w_arr_end(&w);
        if (o->env) {
                json_w_key(&w, "env");
                int r = env_object(&w, o->env);
                if (r < 0)
                        return fail(c, r, r == -EINVAL ? "environment entries must be K=V" : "too many environment entries");
        }
        if (o->cwd)
                json_w_kstr(&w, "cwd", o->cwd);
        if (o->timeout_ms) {
                json_w_key(&w, "timeout_ms");
                json_w_uint(&w, o->timeout_ms);
        }
        if (o->stdin_data) {
                if (text_utf8_valid(o->stdin_data, o->stdin_len)) {
                        json_w_key(&w, "stdin");
                        json_w_strn(&w, o->stdin_data, o->stdin_len);
                } else {
                        _cleanup_buf_ struct buf e = BUF_INIT(0);
                        int r = text_b64_encode(&e, o->stdin_data, o->stdin_len);
                        if (r < 0)
                                return fail(c, r, "encoding stdin: %s", strerror(-r));
                        json_w_key(&w, "stdin_b64");
                        json_w_strn(&w, e.data ? e.data : "", e.len);
                }
        }
        if (o->background)
                json_w_kbool(&w, "background", true);
        if (o->version >= 3 && o->user) {
                if (!user_ok(o->user))
                        return fail(c, -EINVAL, "invalid user (a name or a uid)");
                json_w_kstr(&w, "user", o->user);
        }
        json_w_obj_end(&w);
        if (w.err)
                return fail(c, w.err, w.err == -E2BIG ? "the exec request is over 1 MiB" : "encoding the request: %s",
                            strerror(-w.err));

        _cleanup_buf_ struct buf t = BUF_INIT(HTTP_MAX_TARGET);
        int r = session_target_ok(s, &t, "/exec", NULL, stdin_stream ? "?stdin=stream" : NULL);
        if (r < 0)
                return r;
        /* stdin=stream: the JSON request is the body's first line, stdin the rest. */
        if (stdin_stream && (r = buf_putc(&b, '\n')) < 0)
                return fail(c, r, "encoding the request: %s", strerror(-r));
        struct exec_state st = { .c = c, .on_output = o->on_output, .on_start = o->on_start, .ud = o->userdata,
                                 .tmp = BUF_INIT(SPACE_MAX_EVENT) };
        struct call k = { .method = "POST", .target = t.data, .ses = s, JSON_BODY(b.data, b.len),
                          .stream = !o->background, .body_stream = stdin_stream,
                          .body_fd = stdin_stream ? o->stdin_fd : -1 };
        if (stdin_stream)
                k.content_type = "application/octet-stream"; /* a JSON line, then raw bytes */
        _cleanup_json_ struct json *j = NULL;
        if (o->background) {
                r = call_json(c, &k, &j);
                if (r >= 0) {
                        st.res.pid = (int)get_i64(j, "pid", 0);
                        if (st.res.pid <= 0)
                                r = fail(c, -EBADMSG, "background exec answered without a pid");
                        else
                                st.res.running = true;
                }
        } else {
                k.on_event = exec_event;
                k.on_frame = exec_frame;
                k.ud = &st;
                r = call_run(c, &k);
                if (r >= 0 && !st.res.exited)
                        r = fail(c, -ECONNRESET, "the output stream ended before the command's exit");
        }
        call_done(&k);
        buf_free(&st.tmp);
        if (r < 0)
                return r;
        if (ret)
                *ret = st.res;
        return 0;
}

int space_attach(space_session *s, int pid, const struct space_attach_opts *o, struct space_exec_result *ret) {
        space_client *c = s->c;
        if (o && o->version != SPACE_ATTACH_OPTS_VERSION)
                return fail(c, -EINVAL, "unknown space_attach_opts version");
        if (pid <= 0)
                return fail(c, -EINVAL, "invalid pid %d", pid);
        char extra[96];
        snprintf(extra, sizeof extra, "/processes/%d/output?offset=%" PRIu64 "&follow=%d", pid, o ? o->offset : 0,
                 o && o->follow ? 1 : 0);
        struct exec_state st = { .c = c, .on_output = o ? o->on_output : NULL, .ud = o ? o->userdata : NULL,
                                 .tmp = BUF_INIT(SPACE_MAX_EVENT) };
        st.res.pid = pid;
        int r = session_call(s, &(struct call){ .method = "GET", .stream = true, .on_event = exec_event,
                                                       .on_frame = exec_frame, .ud = &st },
                             extra, NULL, NULL, NULL, NULL);
        buf_free(&st.tmp);
        if (r < 0)
                return r;
        if (ret)
                *ret = st.res;
        return 0;
}

int space_signal(space_session *s, int pid, int sig) {
        space_client *c = s->c;
        if (pid <= 0 || sig <= 0 || sig > 64)
                return fail(c, -EINVAL, "invalid pid or signal");
        char extra[64], body[32];
        snprintf(extra, sizeof extra, "/processes/%d/signal", pid);
        int n = snprintf(body, sizeof body, "{\"signal\":%d}", sig);
        return session_call(s, &(struct call){ .method = "POST", JSON_BODY(body, (size_t)n) }, extra, NULL, NULL, NULL,
                            NULL);
}

void space_process_list_free(struct space_process *p, size_t n) {
        for (size_t i = 0; p && i < n; i++) {
                for (char **a = p[i].argv; a && *a; a++)
                        free(*a);
                free(p[i].argv);
        }
        free(p);
}

int space_process_list(space_session *s, struct space_process **ret, size_t *ret_n) {
        space_client *c = s->c;
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, "/processes", NULL, NULL, &j, NULL);
        if (r < 0)
                return r;
        const struct json *arr = json_get(j, "processes");
        if (json_type(arr) != JSON_ARRAY)
                return fail(c, -EBADMSG, "process list without a \"processes\" array");
        size_t n = json_len(arr);
        struct space_process *v = calloc(n ? n : 1, sizeof *v);
        if (!v)
                return fail(c, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                const struct json *p = json_at(arr, i);
                v[i].pid = (int)get_i64(p, "pid", 0);
                v[i].running = json_get_bool(p, "running", false);
                int64_t ec;
                if (json_get_int(p, "exit_code", &ec) >= 0) {
                        v[i].has_exit_code = true;
                        v[i].exit_code = (int)ec;
                }
                v[i].signal = (int)get_i64(p, "signal", 0);
                v[i].timed_out = json_get_bool(p, "timed_out", false);
                v[i].started_ms = get_i64(p, "started_ms", 0);
                v[i].output_bytes = get_u64(p, "output_bytes");
                const struct json *argv = json_get(p, "argv");
                size_t an = json_type(argv) == JSON_ARRAY ? json_len(argv) : 0;
                v[i].argv = calloc(an + 1, sizeof(char *));
                if (!v[i].argv) {
                        space_process_list_free(v, n);
                        return fail(c, -ENOMEM, "out of memory");
                }
                for (size_t a = 0; a < an; a++) {
                        const char *str = json_str(json_at(argv, a));
                        v[i].argv[a] = strdup(str ? str : "");
                        if (!v[i].argv[a]) {
                                space_process_list_free(v, n);
                                return fail(c, -ENOMEM, "out of memory");
                        }
                }
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- files ----------------------------------------------------------------------- */

static int upload(space_session *s, const char *path, const void *data, size_t len, int fd, unsigned mode,
                  bool parents, const char *user, uint64_t *ret_written) {
        space_client *c = s->c;
        char extra[96];
        if (user && !user_ok(user))
                return fail(c, -EINVAL, "invalid user (a name or a uid)");
        snprintf(extra, sizeof extra, "&mode=%04o%s%s%s", mode ? mode & 07777 : 0644, parents ? "&parents=1" : "",
                 user ? "&user=" : "", user ? user : "");
        _cleanup_buf_ struct buf t = BUF_INIT(HTTP_MAX_TARGET);
        int r = session_target_ok(s, &t, "/files", path, extra);
        if (r < 0)
                return r;
        struct call k = { .method = "PUT", .target = t.data, .ses = s, .content_type = "application/octet-stream",
                          .body = data ? data : (fd < 0 ? "" : NULL), .body_len = len, .body_from_fd = fd >= 0, .body_fd = fd };
        _cleanup_json_ struct json *j = NULL;
        r = call_run(c, &k);
        if (r >= 0 && ret_written) {
                *ret_written = len;
                if (k.body_in.len > 0 && json_parse(k.body_in.data, k.body_in.len, &j, NULL, 0) >= 0 &&
                    json_get(j, "written"))
                        *ret_written = get_u64(j, "written");
        }
        call_done(&k);
        return r < 0 ? r : 0;
}

int space_file_write_as(space_session *s, const char *path, const void *data, size_t len, unsigned mode, bool parents,
                        const char *user) {
        if (len > SPACE_MAX_UPLOAD)
                return fail(s->c, -E2BIG, "file larger than %llu bytes", (unsigned long long)SPACE_MAX_UPLOAD);
        return upload(s, path, data ? data : "", len, -1, mode, parents, user, NULL);
}

int space_file_write(space_session *s, const char *path, const void *data, size_t len, unsigned mode, bool parents) {
        return space_file_write_as(s, path, data, len, mode, parents, NULL);
}

int space_file_upload_fd(space_session *s, const char *path, int fd, unsigned mode, bool parents, uint64_t *ret_written) {
        return space_file_upload_fd_as(s, path, fd, mode, parents, NULL, ret_written);
}

int space_file_upload_fd_as(space_session *s, const char *path, int fd, unsigned mode, bool parents, const char *user,
                            uint64_t *ret_written) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail(s->c, -errno, "stat of the source: %s", strerror(errno));
        if (S_ISREG(st.st_mode)) {
                off_t pos = lseek(fd, 0, SEEK_CUR);
                if (pos < 0)
                        return fail(s->c, -errno, "seek on the source: %s", strerror(errno));
                uint64_t len = st.st_size > pos ? (uint64_t)(st.st_size - pos) : 0;
                if (len > SPACE_MAX_UPLOAD)
                        return fail(s->c, -E2BIG, "file larger than %llu bytes", (unsigned long long)SPACE_MAX_UPLOAD);
                return upload(s, path, NULL, (size_t)len, fd, mode, parents, user, ret_written);
        }
        /* pipes and the like: no size up front, so read it all (bounded) first */
        _cleanup_buf_ struct buf b = BUF_INIT(SPACE_MAX_UPLOAD);
        int r = buf_read_fd(&b, fd);
        if (r == -E2BIG)
                return fail(s->c, r, "input larger than the upload limit");
        if (r == -ENOMEM)
                return fail(s->c, r, "out of memory");
        if (r < 0)
                return fail(s->c, r, "reading the source: %s", strerror(-r));
        return upload(s, path, b.data ? b.data : "", b.len, -1, mode, parents, user, ret_written);
}

int space_file_read(space_session *s, const char *path, size_t max, char **ret, size_t *ret_len) {
        _cleanup_buf_ struct buf t = BUF_INIT(HTTP_MAX_TARGET);
        int r = session_target_ok(s, &t, "/files", path, NULL);
        if (r < 0)
                return r;
        /* not session_call: the length of the (binary) answer is wanted too */
        struct call k = { .method = "GET", .target = t.data, .ses = s, .max = max ? max : SPACE_MAX_RESPONSE };
        r = call_run(s->c, &k);
        if (r >= 0) {
                *ret_len = k.body_in.len;
                *ret = TAKE_PTR(k.body_in.data);
        }
        call_done(&k);
        return r < 0 ? r : 0;
}

int space_file_download_fd(space_session *s, const char *path, int fd, uint64_t *ret_bytes) {
        /* a big file may take a while, but each read is still bounded by the timeout */
        struct call k = { .method = "GET", .to_fd = true, .out_fd = fd };
        int r = session_call(s, &k, "/files", path, NULL, NULL, NULL);
        if (r >= 0 && ret_bytes)
                *ret_bytes = k.out_bytes;
        return r;
}

int space_file_remove(space_session *s, const char *path, bool recursive) {
        return session_call(s, &(struct call){ .method = "DELETE" }, "/files", path, recursive ? "&recursive=1" : NULL,
                            NULL, NULL);
}

int space_file_mkdir(space_session *s, const char *path, bool parents) {
        return space_file_mkdir_as(s, path, parents, NULL);
}

int space_file_mkdir_as(space_session *s, const char *path, bool parents, const char *user) {
        if (!path_ok(path))
                return fail(s->c, -EINVAL, "invalid path");
        if (user && !user_ok(user))
                return fail(s->c, -EINVAL, "invalid user (a name or a uid)");
        _cleanup_buf_ struct buf b = BUF_INIT(16384);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "path", path);
        json_w_kbool(&w, "parents", parents);
        if (user)
                json_w_kstr(&w, "user", user);
        return session_post(s, "/files/mkdir", &w, NULL);
}

static void fill_stat(const struct json *o, struct space_stat *st) {
        *st = (struct space_stat){ 0 };
        copy_str(st->type, sizeof st->type, o, "type");
        st->size = get_u64(o, "size");
        st->mode = get_mode(o, "mode");
        st->uid = (unsigned)get_i64(o, "uid", 0);
        st->gid = (unsigned)get_i64(o, "gid", 0);
        st->mtime = get_i64(o, "mtime", 0);
}

int space_file_stat(space_session *s, const char *path, struct space_stat *ret) {
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, "/files/stat", path, NULL, &j, NULL);
        if (r < 0)
                return r;
        fill_stat(j, ret);
        return 0;
}

struct watch_state {
        space_client *c;
        space_watch_fn fn;
        void *ud;
        bool stopped; /* fn asked to stop */
        bool ended;   /* the end event came */
        char *reason;
        size_t reason_len;
};

#define WATCH_STOP (-ECANCELED) /* fn's "stop": the stream is cut, the call returns 0 */

static int watch_event(void *ud, const struct json *ev) {
        struct watch_state *st = ud;
        const char *type = json_get_str(ev, "type");
        if (!type)
                return fail(st->c, -EBADMSG, "a watch event without a type");
        if (!strcmp(type, "end")) {
                st->ended = true;
                const char *why = json_get_str(ev, "reason");
                if (st->reason && st->reason_len)
                        snprintf(st->reason, st->reason_len, "%s", why ? why : "");
                return 0;
        }
        if (!strcmp(type, "error")) {
                const char *m = json_get_str(json_get(ev, "error"), "message");
                return fail(st->c, -ECONNRESET, "the watch ended: %s", m ? m : "an error in the session");
        }
        const char *path = json_get_str(ev, "path");
        struct space_watch_event e = {
                .type = type,
                .path = path ? path : "",
                .dir = json_get_bool(ev, "dir", false),
                .reason = json_get_str(ev, "reason"),
        };
        int r = st->fn(st->ud, &e);
        if (r > 0) {
                st->stopped = true;
                return WATCH_STOP;
        }
        return r;
}

int space_file_watch(space_session *s, const char *path, bool recursive, space_watch_fn fn, void *userdata,
                     char *ret_reason, size_t reason_len) {
        if (!fn)
                return fail(s->c, -EINVAL, "no callback for the watch's events");
        if (ret_reason && reason_len)
                ret_reason[0] = 0;
        struct watch_state st = { .c = s->c, .fn = fn, .ud = userdata, .reason = ret_reason, .reason_len = reason_len };
        int r = session_call(s, &(struct call){ .method = "GET", .stream = true, .on_event = watch_event, .ud = &st },
                             "/files/watch", path, recursive ? NULL : "&recursive=false", NULL, NULL);
        if (st.stopped && r == WATCH_STOP) {
                clear_error(s->c);
                return 0;
        }
        if (r == 0 && !st.ended)
                return fail(s->c, -ECONNRESET, "the watch stream ended without its last event");
        return r;
}

int space_file_list(space_session *s, const char *path, struct space_dirent **ret, size_t *ret_n) {
        space_client *c = s->c;
        if (!path_ok(path))
                return fail(c, -EINVAL, "invalid path");
        struct space_dirent *v = NULL;
        size_t n = 0, cap = 0;
        char after[256] = "";
        int r;
        /* The daemon pages big directories: ask again after the last name until it says
         * the listing is complete. */
        for (;;) {
                _cleanup_buf_ struct buf extra = BUF_INIT(HTTP_MAX_TARGET);
                if (after[0]) {
                        r = buf_puts(&extra, "&after=");
                        if (r >= 0)
                                r = http_urlencode(&extra, after);
                        if (r < 0 || !buf_cstr(&extra)) {
                                free(v);
                                return fail(c, -ENOMEM, "out of memory");
                        }
                }
                _cleanup_json_ struct json *j = NULL;
                r = session_call(s, &(struct call){ .method = "GET" }, "/files/list", path, extra.data, &j, NULL);
                if (r < 0) {
                        free(v);
                        return r;
                }
                const struct json *arr = json_get(j, "entries");
                if (json_type(arr) != JSON_ARRAY) {
                        free(v);
                        return fail(c, -EBADMSG, "listing without an \"entries\" array");
                }
                size_t m = json_len(arr);
                if (m > SPACE_MAX_LIST - n) {
                        free(v);
                        return fail(c, -E2BIG, "%s has more than %d entries", path, SPACE_MAX_LIST);
                }
                if (n + m > cap) {
                        size_t ncap = MAX(n + m, cap * 2);
                        struct space_dirent *nv = realloc(v, (ncap ? ncap : 1) * sizeof *nv);
                        if (!nv) {
                                free(v);
                                return fail(c, -ENOMEM, "out of memory");
                        }
                        v = nv;
                        cap = ncap;
                }
                for (size_t i = 0; i < m; i++) {
                        const struct json *e = json_at(arr, i);
                        memset(&v[n], 0, sizeof v[n]);
                        copy_str(v[n].name, sizeof v[n].name, e, "name");
                        fill_stat(e, &v[n].st);
                        n++;
                }
                if (!json_get_bool(j, "truncated", false) || m == 0)
                        break;
                snprintf(after, sizeof after, "%s", v[n - 1].name);
        }
        if (!v && !(v = calloc(1, sizeof *v)))
                return fail(c, -ENOMEM, "out of memory");
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- templates ------------------------------------------------------------------- */

static bool name_ok(const char *n) { return id_ok(n); }

static void fill_template(const struct json *o, void *ret) {
        struct space_template_info *t = ret;
        *t = (struct space_template_info){ 0 };
        copy_str(t->name, sizeof t->name, o, "name");
        t->size_bytes = get_u64(o, "size_bytes");
        get_time(o, "created_at", t->created_at, sizeof t->created_at);
}

int space_template_list(space_client *c, struct space_template_info **ret, size_t *ret_n) {
        return get_records(c, "/v1/templates", "templates", "template list", sizeof **ret, fill_template, (void **)ret,
                           ret_n);
}

struct build_state {
        space_client *c;
        space_progress_fn on_progress;
        void *ud;
        bool done;
        struct space_template_info info;
};

static int build_event(void *ud, const struct json *ev) {
        struct build_state *st = ud;
        const char *type = json_get_str(ev, "type");
        if (!type)
                return 0;
        if (strcmp(type, "progress") == 0) {
                const char *m = json_get_str(ev, "message");
                if (st->on_progress && m)
                        st->on_progress(st->ud, m);
        } else if (strcmp(type, "done") == 0) {
                st->done = true;
                fill_template(json_get(ev, "template"), &st->info);
        } else if (strcmp(type, "error") == 0) {
                const struct json *e = json_get(ev, "error");
                record_api_error(st->c, e ? e : ev);
                return errno_from_code(st->c->last_code);
        }
        return 0;
}

int space_template_build(space_client *c, const struct space_template_build_opts *o, struct space_template_info *ret) {
        if (!o || o->version < 1 || o->version > SPACE_TEMPLATE_BUILD_OPTS_VERSION)
                return fail(c, -EINVAL, "missing or unknown space_template_build_opts version");
        const char *runtime = o->version >= 2 ? o->runtime : NULL;
        if (!name_ok(o->name))
                return fail(c, -EINVAL, "invalid template name '%s'", o->name ? o->name : "");
        int sources = !!o->from_dir + !!o->from_tar + !!o->debootstrap_suite;
        if (sources > 1)
                return fail(c, -EINVAL, "give at most one of a directory, a tar file or a debootstrap suite");
        if ((o->packages || o->mirror) && !o->debootstrap_suite)
                return fail(c, -EINVAL, "packages and mirror go with a debootstrap suite");
        _cleanup_buf_ struct buf b = BUF_INIT(1u << 20);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "name", o->name);
        if (runtime)
                json_w_kstr(&w, "runtime", runtime);
        if (o->from_dir)
                json_w_kstr(&w, "from_dir", o->from_dir);
        if (o->from_tar)
                json_w_kstr(&w, "from_tar", o->from_tar);
        if (o->debootstrap_suite) {
                json_w_key(&w, "debootstrap");
                json_w_obj_begin(&w);
                json_w_kstr(&w, "suite", o->debootstrap_suite);
                json_w_key(&w, "packages");
                json_w_arr_begin(&w);
                for (size_t i = 0; o->packages && o->packages[i]; i++)
                        json_w_str(&w, o->packages[i]);
                json_w_arr_end(&w);
                if (o->mirror)
                        json_w_kstr(&w, "mirror", o->mirror);
                json_w_obj_end(&w);
        }
        int r = request_end(c, &w);
        if (r < 0)
                return r;
        struct build_state st = { .c = c, .on_progress = o->on_progress, .ud = o->userdata };
        r = call_once(c, &(struct call){ .method = "POST", .target = "/v1/templates", JSON_BODY(b.data, b.len),
                                         .stream = true, .on_event = build_event, .ud = &st },
                      NULL, NULL);
        if (r < 0)
                return r;
        if (!st.done)
                return fail(c, -ECONNRESET, "the build stream ended without a result");
        if (ret)
                *ret = st.info;
        return 0;
}

int space_template_delete(space_client *c, const char *name) {
        if (!name_ok(name))
                return fail(c, -EINVAL, "invalid template name '%s'", name ? name : "");
        char target[192];
        snprintf(target, sizeof target, "/v1/templates/%s", name);
        return call_once(c, &(struct call){ .method = "DELETE", .target = target }, NULL, NULL);
}

/* ---- exposed ports --------------------------------------------------------------- */

static void fill_port(const struct json *o, void *ret) {
        struct space_port_info *p = ret;
        *p = (struct space_port_info){ 0 };
        p->port = (unsigned)get_i64(o, "port", 0);
        p->public = json_get_bool(o, "public", false);
        copy_str(p->url, sizeof p->url, o, "url");
        copy_str(p->path, sizeof p->path, o, "path");
        copy_str(p->token, sizeof p->token, o, "token");
}

int space_port_expose(space_session *s, unsigned port, bool public, struct space_port_info *ret) {
        if (port < 1 || port > 65535)
                return fail(s->c, -EINVAL, "port must be between 1 and 65535");
        _cleanup_buf_ struct buf b = BUF_INIT(4096);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "port", port);
        json_w_kbool(&w, "public", public);
        _cleanup_json_ struct json *j = NULL;
        int r = session_post(s, "/ports", &w, &j);
        if (r < 0)
                return r;
        if (json_type(j) != JSON_OBJECT)
                return fail(s->c, -EBADMSG, "malformed port from spaced");
        if (ret)
                fill_port(j, ret);
        return 0;
}

int space_port_list(space_session *s, struct space_port_info **ret, size_t *ret_n) {
        _cleanup_json_ struct json *j = NULL;
        int r = session_call(s, &(struct call){ .method = "GET" }, "/ports", NULL, NULL, &j, NULL);
        if (r < 0)
                return r;
        return json_records(s->c, j, "ports", "port list", sizeof **ret, fill_port, (void **)ret, ret_n);
}

int space_port_unexpose(space_session *s, unsigned port) {
        if (port < 1 || port > 65535)
                return fail(s->c, -EINVAL, "port must be between 1 and 65535");
        char suffix[32];
        snprintf(suffix, sizeof suffix, "/ports/%u", port);
        return session_call(s, &(struct call){ .method = "DELETE" }, suffix, NULL, NULL, NULL, NULL);
}

int space_port_forward(space_session *s, unsigned port, int *ret_fd) {
        space_client *c = s->c;
        if (port < 1 || port > 65535)
                return fail(c, -EINVAL, "port must be between 1 and 65535");
        clear_error(c);
        char target[128];
        snprintf(target, sizeof target, "/v1/sessions/%s/ports/%u/forward", s->id, port);
        const char *headers[5] = { "Connection: Upgrade", "Upgrade: space-tcp", NULL, NULL, NULL };
        size_t nh = 2;
        if (c->auth_header[0])
                headers[nh++] = c->auth_header;
        if (s->has_token)
                headers[nh++] = s->token_header;
        struct http_request req = { .method = "GET", .target = target, .timeout_ms = c->timeout_ms, .headers = headers };
        struct http_response resp = { 0 };
        _cleanup_buf_ struct buf body = BUF_INIT(0);
        int fd = -1;
        int r = http_upgrade(&c->conn.addr, &req, &resp, &body, MAX_ERROR_BODY, &fd);
        if (r < 0)
                return conn_error(c, r);
        c->last_status = resp.status;
        if (fd < 0)
                return api_error(c, resp.status ? resp.status : 500, &body);
        *ret_fd = fd;
        return 0;
}

/* ---- terminals ------------------------------------------------------------------- */

#define TERM_WS_MAX_FRAME (1u << 20) /* a frame from spaced: its output comes in frames of 64 KiB */

struct space_terminal {
        int fd;
        struct buf in;
        bool closed; /* a close frame came, or the connection ended */
        struct space_terminal_exit exit;
};

int space_terminal_start(space_session *s, const struct space_terminal_opts *o, int *ret_pid) {
        space_client *c = s->c;
        if (!o || o->version != SPACE_TERMINAL_OPTS_VERSION || !o->argv || !o->argv[0])
                return fail(c, -EINVAL, "a terminal needs options of this version and a command");
        if (o->rows > SPACE_TERMINAL_MAX_DIM || o->cols > SPACE_TERMINAL_MAX_DIM)
                return fail(c, -EINVAL, "rows and cols must be from 1 to %d", SPACE_TERMINAL_MAX_DIM);
        _cleanup_buf_ struct buf b = BUF_INIT(1u << 20);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "cmd");
        json_w_arr_begin(&w);
        for (size_t i = 0; o->argv[i]; i++)
                json_w_str(&w, o->argv[i]);
        json_w_arr_end(&w);
        if (o->env) {
                json_w_key(&w, "env");
                int r = env_object(&w, o->env);
                if (r < 0)
                        return fail(c, r, "env entries must be K=V");
        }
        if (o->cwd)
                json_w_kstr(&w, "cwd", o->cwd);
        if (o->user)
                json_w_kstr(&w, "user", o->user);
        json_w_kint(&w, "rows", o->rows ? o->rows : 24);
        json_w_kint(&w, "cols", o->cols ? o->cols : 80);
        _cleanup_json_ struct json *j = NULL;
        int r = session_post(s, "/terminals", &w, &j);
        if (r < 0)
                return r;
        int64_t pid = get_i64(j, "pid", 0);
        if (pid <= 0 || pid > INT32_MAX)
                return fail(c, -EBADMSG, "spaced answered a terminal without a pid");
        *ret_pid = (int)pid;
        return 0;
}

/* One masked frame (a client's must be, RFC 6455 §5.3), written whole. */
static int term_send_frame(space_terminal *t, uint8_t opcode, const void *data, size_t n) {
        uint8_t h[14], mask[4];
        size_t hl = 2;
        if (getrandom(mask, sizeof mask, 0) != (ssize_t)sizeof mask)
                return -errno;
        h[0] = 0x80 | opcode;
        if (n < 126)
                h[1] = 0x80 | (uint8_t)n;
        else if (n <= 0xFFFF) {
                h[1] = 0x80 | 126;
                h[2] = (uint8_t)(n >> 8);
                h[3] = (uint8_t)n;
                hl = 4;
        } else {
                h[1] = 0x80 | 127;
                for (int i = 0; i < 8; i++)
                        h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
                hl = 10;
        }
        memcpy(h + hl, mask, 4);
        hl += 4;
        _cleanup_buf_ struct buf f = BUF_INIT(0);
        if (buf_append(&f, h, hl) < 0 || buf_reserve(&f, n) < 0)
                return -ENOMEM;
        const uint8_t *p = data;
        for (size_t i = 0; i < n; i++)
                f.data[f.len++] = (char)(p[i] ^ mask[i & 3]);
        size_t off = 0;
        while (off < f.len) {
                ssize_t w = send(t->fd, f.data + off, f.len - off, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0 && errno == EAGAIN) {
                        struct pollfd pfd = { .fd = t->fd, .events = POLLOUT };
                        (void)poll(&pfd, 1, 1000);
                        continue;
                }
                if (w < 0)
                        return -errno;
                off += (size_t)w;
        }
        return 0;
}

int space_terminal_connect(space_session *s, int pid, space_terminal **ret) {
        space_client *c = s->c;
        if (pid <= 0)
                return fail(c, -EINVAL, "pid must be positive");
        clear_error(c);
        uint8_t raw[16];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
                return fail(c, -errno, "getrandom: %s", strerror(errno));
        _cleanup_buf_ struct buf key = BUF_INIT(64);
        if (text_b64_encode(&key, raw, sizeof raw) < 0 || buf_append(&key, "", 1) < 0)
                return fail(c, -ENOMEM, "out of memory");
        char key_header[64], target[128];
        snprintf(key_header, sizeof key_header, "Sec-WebSocket-Key: %s", key.data);
        snprintf(target, sizeof target, "/v1/sessions/%s/terminals/%d", s->id, pid);
        const char *headers[7] = { "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", key_header };
        size_t nh = 4;
        if (c->auth_header[0])
                headers[nh++] = c->auth_header;
        if (s->has_token)
                headers[nh++] = s->token_header;
        struct http_request req = { .method = "GET", .target = target, .timeout_ms = c->timeout_ms, .headers = headers };
        struct http_response resp = { 0 };
        _cleanup_buf_ struct buf body = BUF_INIT(0);
        int fd = -1;
        int r = http_upgrade(&c->conn.addr, &req, &resp, &body, MAX_ERROR_BODY, &fd);
        if (r < 0)
                return conn_error(c, r);
        c->last_status = resp.status;
        if (fd < 0)
                return api_error(c, resp.status ? resp.status : 500, &body);
        /* The answer must prove it read our key (RFC 6455 §4.1): base64(SHA-1(key + GUID)). */
        char cat[64];
        unsigned char md[SHA_DIGEST_LENGTH];
        snprintf(cat, sizeof cat, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key.data);
        SHA1((const unsigned char *)cat, strlen(cat), md);
        _cleanup_buf_ struct buf want = BUF_INIT(64);
        if (text_b64_encode(&want, md, sizeof md) < 0 || buf_append(&want, "", 1) < 0 ||
            strcmp(want.data, resp.ws_accept) != 0) {
                close(fd);
                return fail(c, -EBADMSG, "spaced's WebSocket answer has a wrong Sec-WebSocket-Accept");
        }
        space_terminal *t = calloc(1, sizeof *t);
        if (!t) {
                close(fd);
                return fail(c, -ENOMEM, "out of memory");
        }
        t->fd = fd;
        t->in = BUF_INIT(TERM_WS_MAX_FRAME + 64);
        *ret = t;
        return 0;
}

int space_terminal_fd(const space_terminal *t) { return t->fd; }

int space_terminal_write(space_terminal *t, const void *data, size_t n) {
        for (size_t off = 0; off < n; off += 65536) {
                int r = term_send_frame(t, 0x2, (const uint8_t *)data + off, MIN((size_t)65536, n - off));
                if (r < 0)
                        return r;
        }
        return 0;
}

int space_terminal_resize(space_terminal *t, unsigned rows, unsigned cols) {
        if (rows < 1 || cols < 1 || rows > SPACE_TERMINAL_MAX_DIM || cols > SPACE_TERMINAL_MAX_DIM)
                return -EINVAL;
        char m[96];
        int n = snprintf(m, sizeof m, "{\"type\":\"resize\",\"rows\":%u,\"cols\":%u}", rows, cols);
        return term_send_frame(t, 0x1, m, (size_t)n);
}

/* One whole frame from t->in: > 0 its length with *op, *p, *n; 0 more needed; < 0 bad. */
static ssize_t term_frame(space_terminal *t, uint8_t *op, const uint8_t **p, size_t *n) {
        const uint8_t *d = (const uint8_t *)t->in.data;
        size_t have = t->in.len, hl = 2;
        if (have < 2)
                return 0;
        if ((d[1] & 0x80) || (d[0] & 0x70))
                return -EBADMSG; /* a server's frames are not masked; no extensions */
        uint64_t len = d[1] & 0x7F;
        if (len == 126) {
                if (have < 4)
                        return 0;
                len = (uint64_t)d[2] << 8 | d[3];
                hl = 4;
        } else if (len == 127) {
                if (have < 10)
                        return 0;
                len = 0;
                for (int i = 0; i < 8; i++)
                        len = len << 8 | d[2 + i];
                hl = 10;
        }
        if (len > TERM_WS_MAX_FRAME)
                return -EMSGSIZE;
        if (have - hl < len)
                return 0;
        *op = d[0] & 0x0F;
        *p = d + hl;
        *n = (size_t)len;
        return (ssize_t)(hl + len);
}

int space_terminal_read(space_terminal *t, space_output_fn on_output, void *userdata, struct space_terminal_exit *ret) {
        for (;;) {
                if (!t->closed && buf_reserve(&t->in, 65536) == 0) {
                        ssize_t got = recv(t->fd, t->in.data + t->in.len, MIN((size_t)65536, t->in.max - t->in.len),
                                           MSG_DONTWAIT);
                        if (got == 0)
                                t->closed = true;
                        else if (got > 0)
                                t->in.len += (size_t)got;
                        else if (errno != EAGAIN && errno != EINTR)
                                t->closed = true;
                }
                bool progress = false;
                for (;;) {
                        uint8_t op;
                        const uint8_t *p;
                        size_t n;
                        ssize_t fl = term_frame(t, &op, &p, &n);
                        if (fl < 0) {
                                t->closed = true;
                                buf_reset(&t->in);
                                break;
                        }
                        if (fl == 0)
                                break;
                        progress = true;
                        if (op == 0x2 || op == 0x0) {
                                if (on_output && n > 0) {
                                        int r = on_output(userdata, SPACE_STDOUT, p, n);
                                        if (r < 0) {
                                                buf_consume(&t->in, (size_t)fl);
                                                return r;
                                        }
                                }
                        } else if (op == 0x1) {
                                _cleanup_json_ struct json *j = NULL;
                                const char *type;
                                if (json_parse((const char *)p, n, &j, NULL, 0) >= 0 && (type = json_get_str(j, "type")) &&
                                    strcmp(type, "exit") == 0) {
                                        t->exit.exited = true;
                                        t->exit.exit_code = (int)get_i64(j, "exit_code", 0);
                                        t->exit.signal = (int)get_i64(j, "signal", 0);
                                }
                        } else if (op == 0x9) {
                                uint8_t ping[125];
                                size_t pn = MIN(n, sizeof ping);
                                memcpy(ping, p, pn);
                                buf_consume(&t->in, (size_t)fl);
                                (void)term_send_frame(t, 0xA, ping, pn);
                                continue;
                        } else if (op == 0x8) {
                                if (!t->closed)
                                        (void)term_send_frame(t, 0x8, p, MIN(n, (size_t)2));
                                t->closed = true;
                        }
                        buf_consume(&t->in, (size_t)fl);
                        if (t->closed)
                                break;
                }
                if (t->closed) {
                        if (ret)
                                *ret = t->exit;
                        return 1;
                }
                if (!progress) {
                        struct pollfd pfd = { .fd = t->fd, .events = POLLIN };
                        if (poll(&pfd, 1, 0) <= 0)
                                return 0;
                }
        }
}

void space_terminal_close(space_terminal *t) {
        if (!t)
                return;
        if (!t->closed)
                (void)term_send_frame(t, 0x8, "\x03\xe8", 2);
        close(t->fd);
        buf_free(&t->in);
        free(t);
}
