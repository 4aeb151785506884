/* The E2B data plane's files (docs/e2b.md "Files"): filesystem.Filesystem's RPCs, GET and
 * POST /files, GET /health, all done by space-init's file ops (docs/protocol.md §3.5-3.10,
 * §3.17, §3.19, §3.20), which resolve every path inside the sandbox's root. Each request
 * is a struct fsreq: the client of its ops (one at a time: MakeDir and Move take two, an
 * upload one per file) and the hook of its connection, so it learns both when init answers
 * and when the client leaves; it is freed after the batch in which the client was answered
 * or went. */
#include "daemon/e2b/e2b.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <zlib.h>

#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "common/proto.h"
#include "daemon/e2b/multipart.h"
#include "daemon/http.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"

/* ListDir's depth at most (init's INIT_TREE_MAX_DEPTH), and the bytes of its answer: it
 * is built whole (E2B's ListDir has no pages) from init's pages, and must fit a client's
 * output queue (CONN_OUT_MAX) with room to spare: some 20000 entries. */
#define E2B_LIST_MAX_DEPTH 16
#define E2B_LIST_MAX_BYTES (4u << 20)
/* A watch event line from init longer than this is dropped (init's lines are a path and a
 * few words: far below). */
#define E2B_WATCH_LINE_MAX (PROTO_MAX_PATH + 256)
/* gunzipped bytes of one upload at most, as for plain ones. */
#define E2B_UPLOAD_MAX ((uint64_t)HTTP_MAX_UPLOAD)

enum fs_kind {
        FS_STAT,
        FS_LIST,
        FS_MKDIR_STAT, /* MakeDir: what is there first (already_exists, or not a directory) */
        FS_MKDIR,
        FS_MOVE,
        FS_MOVE_STAT, /* Move answers the destination's EntryInfo */
        FS_REMOVE,
        FS_WATCH,
        FS_GET,
        FS_POST,
};

struct fsreq {
        struct conn *c;
        struct op *op; /* the op in flight, NULL between them */
        enum fs_kind kind;
        bool answered;
        char sid[API_MAX_PARAM_LEN];
        char user[API_USER_MAX];
        char path[PROTO_MAX_PATH + 1]; /* absolute, lexically clean: what EntryInfo.path says */
        /* WatchDir */
        struct e2b_stream stream;
        bool include_entry;
        uint64_t deadline_ms; /* Connect-Timeout-Ms from the start; 0: none */
        char root[PROTO_MAX_PATH + 1]; /* the watched directory as init's events name it */
        struct buf line;
        bool line_over; /* the line under way is past E2B_WATCH_LINE_MAX: dropped */
        bool temp_moved; /* the last event: an upload's temporary renamed away */
        /* POST /files */
        bool multipart, gzip, waiting; /* waiting: for the RESP of the file just ended */
        bool zinit, zend;
        z_stream z;
        uint64_t bytes;
        struct buf pending; /* body bytes not parsed yet while waiting */
        struct buf results; /* the JSON array being built */
        unsigned files; /* files written (POST), entries listed (ListDir) */
        int64_t depth;  /* ListDir */
        bool in_file;   /* inside a part that is being written */
        bool parsing;   /* post_body or post_kick is parsing: no re-entry (post_kick) */
        bool have_query_path;
        char query_path[PROTO_MAX_PATH + 1];
        struct mp_parser mp;
};

static void fsreq_free(void *p) {
        struct fsreq *q = p;
        buf_free(&q->line);
        buf_free(&q->pending);
        buf_free(&q->results);
        if (q->zinit)
                inflateEnd(&q->z);
        free(q);
}

/* ---- the connection's hook ---- */

/* The client was answered or went: an op still in flight is of no use to anyone (an
 * upload answered early, a watch at its deadline, the rest of an empty download) and is
 * cancelled. */
static void forget(struct conn *c, struct fsreq *q) {
        struct op *op = TAKE_PTR(q->op);
        if (op)
                op_client_gone(op);
        if (q->kind == FS_WATCH)
                e2b_stream_drop(&q->stream);
        q->c = NULL;
        (void)loop_defer(c->d->loop, fsreq_free, q);
}

static void hook_gone(struct conn *c, void *ctx) { forget(c, ctx); }

static void hook_drained(struct conn *c, void *ctx) {
        struct fsreq *q = ctx;
        if (q->op)
                op_client_drained(q->op, conn_below_low(c));
}

static const struct conn_hook_ops fs_hook = { .gone = hook_gone, .done = hook_gone, .drained = hook_drained };
/* A watch or download whose client hangs up is over. */
static const struct conn_hook_ops fs_stream_hook = {
        .gone = hook_gone, .done = hook_gone, .drained = hook_drained, .hangup_is_gone = true,
};

static struct fsreq *fsreq_new(struct conn *c, enum fs_kind kind) {
        struct fsreq *q = calloc(1, sizeof *q);
        if (!q) {
                conn_reply_error(c, 500, "out of memory");
                return NULL;
        }
        q->c = c;
        q->kind = kind;
        q->line = BUF_INIT(E2B_WATCH_LINE_MAX);
        q->pending = BUF_INIT(0);
        q->results = BUF_INIT(0);
        snprintf(q->sid, sizeof q->sid, "%s", api_param(&c->params, "id") ? api_param(&c->params, "id") : "");
        conn_set_hook(c, kind == FS_WATCH || kind == FS_GET ? &fs_stream_hook : &fs_hook, q);
        return q;
}

/* ---- errors in the request's dialect ---- */

static const char *rpc_code_of_errno(int e) {
        switch (e) {
        case ENOENT: return "not_found";
        case EEXIST: return "already_exists";
        case EACCES: case EPERM: case EROFS: return "permission_denied";
        case ENOSPC: case EDQUOT: case E2BIG: case EMFILE: return "resource_exhausted";
        case EINVAL: case EISDIR: case ENOTDIR: case ENAMETOOLONG: case ELOOP: return "invalid_argument";
        case ENOTEMPTY: case EBUSY: case EXDEV: return "failed_precondition";
        case EAGAIN: return "unavailable";
        default: return "internal";
        }
}

static int rest_status_of_errno(int e) {
        switch (e) {
        case ENOENT: return 404;
        case EACCES: case EPERM: case EROFS: return 403;
        case ENOSPC: case EDQUOT: return 507;
        case EFBIG: return 413;
        case EMFILE: return 429;
        case EAGAIN: return 503;
        default: return util_errno_status(e) == 500 ? 500 : 400;
        }
}

/* An error RESP of init, answered as E2B would. A bad "user" (one the sandbox's passwd
 * does not name) is envd's 401 "invalid username". */
static void reply_init_error(struct fsreq *q, const struct json *resp) {
        const struct json *e = json_get(resp, "error");
        const char *msg = json_get_str(e, "message");
        int64_t err = 0;
        (void)json_get_int(e, "errno", &err);
        if (!msg)
                msg = "space-init failed";
        bool user = json_get_bool(e, "user", false);
        q->answered = true;
        if (q->kind == FS_WATCH) {
                if (!q->stream.open)
                        e2b_stream_begin(&q->stream, q->c, NULL);
                e2b_stream_end(&q->stream, user ? "unauthenticated" : rpc_code_of_errno((int)err), "%s", msg);
        } else if (e2b_plane_of(q->c) == E2B_RPC)
                e2b_rpc_error(q->c, user ? "unauthenticated" : rpc_code_of_errno((int)err), "%s", msg);
        else
                e2b_reply_error(q->c, user ? 401 : rest_status_of_errno((int)err), "%s", msg);
}

/* The request ends unanswered: the sandbox went, or spaced stops. */
static void reply_fail(struct fsreq *q, int err, const char *msg) {
        q->answered = true;
        if (q->kind == FS_WATCH && q->stream.open) {
                e2b_stream_end(&q->stream, "unavailable", "%s", msg);
                return;
        }
        if (q->kind == FS_GET && q->c->streaming) {
                conn_abort(q->c); /* a download cut short must look so */
                return;
        }
        conn_reply_error(q->c, api_status_of(err), "%s", msg);
}

/* ---- paths and entries ---- */

/* Folds "//", "." and ".." of an absolute path in place, as envd's filepath.Clean does. */
static void path_clean(char *p) {
        char out[PROTO_MAX_PATH + 2];
        size_t o = 0;
        const char *s = p;
        while (*s) {
                while (*s == '/')
                        s++;
                if (!*s)
                        break;
                size_t n = strcspn(s, "/");
                if (n == 1 && s[0] == '.') {
                        /* nothing */
                } else if (n == 2 && s[0] == '.' && s[1] == '.') {
                        while (o > 0 && out[o - 1] != '/')
                                o--;
                        if (o > 0)
                                o--;
                } else if (o + 1 + n < sizeof out) {
                        out[o++] = '/';
                        memcpy(out + o, s, n);
                        o += n;
                }
                s += n;
        }
        if (o == 0)
                out[o++] = '/';
        out[o] = '\0';
        strcpy(p, out);
}

static const char *base_name(const char *path) {
        const char *s = strrchr(path, '/');
        return s && s[1] ? s + 1 : path;
}

/* Go's FileMode.String() of st_mode, as envd's "permissions": type letters (d, L for a
 * symlink, D and c for devices, p, S, u, g, t), '-' when none, then rwxrwxrwx. */
static void permissions(uint32_t m, char out[24]) {
        size_t o = 0;
        if (S_ISDIR(m))
                out[o++] = 'd';
        if (S_ISLNK(m))
                out[o++] = 'L';
        if (S_ISBLK(m) || S_ISCHR(m))
                out[o++] = 'D';
        if (S_ISFIFO(m))
                out[o++] = 'p';
        if (S_ISSOCK(m))
                out[o++] = 'S';
        if (m & S_ISUID)
                out[o++] = 'u';
        if (m & S_ISGID)
                out[o++] = 'g';
        if (S_ISCHR(m))
                out[o++] = 'c';
        if (m & S_ISVTX)
                out[o++] = 't';
        if (o == 0)
                out[o++] = '-';
        static const char rwx[] = "rwxrwxrwx";
        for (int i = 0; i < 9; i++)
                out[o++] = m & (1u << (8 - i)) ? rwx[i] : '-';
        out[o] = '\0';
}

static const char *file_type(const char *t) {
        if (!t)
                return "FILE_TYPE_UNSPECIFIED";
        if (!strcmp(t, "file"))
                return "FILE_TYPE_FILE";
        if (!strcmp(t, "dir"))
                return "FILE_TYPE_DIRECTORY";
        if (!strcmp(t, "symlink"))
                return "FILE_TYPE_SYMLINK";
        return "FILE_TYPE_UNSPECIFIED"; /* the SDK leaves these out of list() */
}

/* EntryInfo (docs/e2b-wire.md §3.7) of init's stat or tree entry e, at path. */
static void write_entry(struct json_writer *w, const struct json *e, const char *path) {
        int64_t size = 0, mode = 0, mtime = 0, uid = 0, gid = 0;
        (void)json_get_int(e, "size", &size);
        (void)json_get_int(e, "mode", &mode);
        (void)json_get_int(e, "mtime", &mtime);
        (void)json_get_int(e, "uid", &uid);
        (void)json_get_int(e, "gid", &gid);
        char num[32], perm[24], when[32];
        json_w_obj_begin(w);
        json_w_kstr(w, "name", base_name(path));
        json_w_kstr(w, "type", file_type(json_get_str(e, "type")));
        json_w_kstr(w, "path", path);
        snprintf(num, sizeof num, "%" PRId64, size); /* int64: a string in proto3 JSON */
        json_w_kstr(w, "size", num);
        json_w_kint(w, "mode", mode & 0777); /* envd: FileMode.Perm() */
        permissions((uint32_t)mode, perm);
        json_w_kstr(w, "permissions", perm);
        /* Names when the sandbox's /etc/passwd and /etc/group have them, else the numbers. */
        const char *owner = json_get_str(e, "owner"), *group = json_get_str(e, "group");
        snprintf(num, sizeof num, "%" PRId64, uid);
        json_w_kstr(w, "owner", owner ? owner : num);
        snprintf(num, sizeof num, "%" PRId64, gid);
        json_w_kstr(w, "group", group ? group : num);
        time_t t = (time_t)mtime;
        struct tm tm;
        if (gmtime_r(&t, &tm) && strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
                json_w_kstr(w, "modifiedTime", when);
        const char *target = json_get_str(e, "target");
        if (target) {
                /* Absolute, as a path the client can use: a relative link is taken from its
                 * directory (lexically: init does not follow links on a caller's behalf). */
                char abs[2 * PROTO_MAX_PATH + 2];
                if (target[0] == '/')
                        snprintf(abs, sizeof abs, "%s", target);
                else
                        snprintf(abs, sizeof abs, "%.*s/%s", (int)(base_name(path) - path), path, target);
                abs[PROTO_MAX_PATH] = '\0';
                path_clean(abs);
                json_w_kstr(w, "symlinkTarget", abs);
        }
        json_w_obj_end(w);
}

/* ---- requests to init ---- */

static void fs_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                     const struct json *j);

static void fs_fail(struct op *op, void *client, int err, const char *msg) {
        (void)op;
        reply_fail(client, err, msg);
}

static bool fs_behind(struct op *op, void *client) {
        (void)op;
        struct fsreq *q = client;
        return q->c && conn_over_high(q->c);
}

static void post_kick(struct fsreq *q);

static void fs_room(struct op *op, void *client) {
        (void)op;
        post_kick(client);
}

static void fs_detach(struct op *op, void *client) {
        struct fsreq *q = client;
        if (q->op == op)
                q->op = NULL;
}

static const struct op_ops fs_ops = {
        .frame = fs_frame,
        .fail = fs_fail,
        .behind = fs_behind,
        .room = fs_room,
        .detach = fs_detach,
};

/* Sends r (freed) as q's next op on s; false when q's client was answered instead. */
static bool fs_send(struct fsreq *q, struct session *s, enum op_kind kind, struct api_json *r) {
        struct op *op;
        if (ses_op_new(s, kind, &fs_ops, q, &op) < 0) {
                buf_free(&r->b);
                q->answered = true;
                conn_reply_error(q->c, 500, "out of memory");
                return false;
        }
        q->op = op;
        if (api_op_send(q->c, op, r) < 0) {
                q->answered = true;
                return false;
        }
        return true;
}

static void req_user(struct api_json *r, const char *user) { json_w_kstr(&r->w, "user", user); }

/* ---- the RPC requests' bodies ---- */

/* The request message: a unary call's JSON body, or a server stream's one envelope. */
static int rpc_body(struct conn *c, bool stream, struct json **ret) {
        const char *d = c->body.data ? c->body.data : "";
        size_t n = c->body.len;
        if (stream) {
                if (n < 5 || (uint8_t)d[0] != 0) {
                        e2b_rpc_error(c, "invalid_argument", "a server stream's request is one uncompressed envelope");
                        return -EINVAL;
                }
                uint32_t len = (uint32_t)(uint8_t)d[1] << 24 | (uint32_t)(uint8_t)d[2] << 16 |
                               (uint32_t)(uint8_t)d[3] << 8 | (uint8_t)d[4];
                if (len != n - 5) {
                        e2b_rpc_error(c, "invalid_argument", "the request envelope's length is not the body's");
                        return -EINVAL;
                }
                d += 5;
                n -= 5;
        }
        if (n == 0) {
                d = "{}";
                n = 2;
        }
        char err[128] = "";
        int r = json_parse(d, n, ret, err, sizeof err);
        if (r < 0 || json_type(*ret) != JSON_OBJECT) {
                if (r == 0)
                        json_free(*ret);
                *ret = NULL;
                e2b_rpc_error(c, "invalid_argument", "the request is not a JSON object: %s", err[0] ? err : "wrong type");
                return -EINVAL;
        }
        return 0;
}

/* A string member (absent: ""); not a string: invalid_argument answered. */
static int rpc_str(struct conn *c, const struct json *body, const char *key, const char **ret) {
        const struct json *v = json_get(body, key);
        if (!v || json_type(v) == JSON_NULL) {
                *ret = "";
                return 0;
        }
        if (json_type(v) != JSON_STRING) {
                e2b_rpc_error(c, "invalid_argument", "%s must be a string", key);
                return -EINVAL;
        }
        *ret = json_str(v);
        return 0;
}

/* The user and the absolute path of member key: what every filesystem RPC starts with. */
static int rpc_target(struct conn *c, const struct json *body, const char *key, char user[API_USER_MAX],
                      char out[PROTO_MAX_PATH + 1]) {
        const char *p;
        if (rpc_str(c, body, key, &p) < 0 || e2b_request_user(c, NULL, user) < 0)
                return -EINVAL;
        char home[API_USER_MAX + 16];
        e2b_home_of(user, home, sizeof home);
        if (e2b_abs_path(p, home, out, PROTO_MAX_PATH + 1) < 0) {
                e2b_rpc_error(c, "invalid_argument", "%s is longer than %d bytes", key, PROTO_MAX_PATH);
                return -EINVAL;
        }
        path_clean(out);
        return 0;
}

static void stat_req(struct api_json *r, const char *path) {
        api_req_begin(r, "stat");
        json_w_kstr(&r->w, "path", path);
        json_w_kbool(&r->w, "names", true);
}

/* {"entry":EntryInfo} of a stat RESP. */
static void reply_entry(struct fsreq *q, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "entry");
        write_entry(&w, resp, q->path);
        json_w_obj_end(&w);
        q->answered = true;
        e2b_rpc_reply(q->c, &b);
        buf_free(&b);
}

/* ---- unary RPCs ---- */

/* Parses the body and finds the running session; NULL when c was answered. */
static struct session *rpc_begin(struct conn *c, bool stream, struct json **body) {
        if (rpc_body(c, stream, body) < 0)
                return NULL;
        struct session *s = api_session(c, true);
        if (!s) {
                json_free(*body);
                *body = NULL;
        }
        return s;
}

void e2b_fs_stat(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        struct session *s = rpc_begin(c, false, &body);
        if (!s || rpc_target(c, body, "path", user, path) < 0)
                return;
        struct fsreq *q = fsreq_new(c, FS_STAT);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        struct api_json r;
        stat_req(&r, path);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

static void tree_req(struct fsreq *q, struct session *s, const char *after) {
        struct api_json r;
        api_req_begin(&r, "tree");
        json_w_kstr(&r.w, "path", q->path);
        json_w_kint(&r.w, "depth", q->depth);
        json_w_kbool(&r.w, "names", true);
        if (after)
                json_w_kstr(&r.w, "after", after);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

void e2b_fs_list_dir(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        struct session *s = rpc_begin(c, false, &body);
        if (!s || rpc_target(c, body, "path", user, path) < 0)
                return;
        int64_t depth = 1;
        const struct json *d = json_get(body, "depth");
        if (d && json_type(d) != JSON_NULL && (json_int(d, &depth) < 0 || depth < 0)) {
                e2b_rpc_error(c, "invalid_argument", "depth must be an integer >= 0");
                return;
        }
        if (depth == 0)
                depth = 1; /* proto3's default: the SDK sends none for 1 */
        if (depth > E2B_LIST_MAX_DEPTH) {
                e2b_rpc_error(c, "invalid_argument", "depth is at most %d here", E2B_LIST_MAX_DEPTH);
                return;
        }
        struct fsreq *q = fsreq_new(c, FS_LIST);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        q->depth = depth;
        q->results = BUF_INIT(E2B_LIST_MAX_BYTES);
        (void)buf_puts(&q->results, "{\"entries\":[");
        tree_req(q, s, NULL);
}

/* A page of init's tree into the answer (EntryInfos with absolute paths); the next page
 * is asked for after the last entry of a cut one (protocol.md §3.20). */
static void list_page(struct fsreq *q, struct session *s, const struct json *resp) {
        const struct json *entries = json_get(resp, "entries");
        /* A writer per page: it separates the page's entries, the comma before a page's
         * first one is ours. */
        struct json_writer w = JSON_WRITER_INIT(&q->results);
        bool first = true;
        char path[2 * PROTO_MAX_PATH + 2];
        const char *last = NULL;
        for (size_t i = 0; i < json_len(entries); i++) {
                const struct json *e = json_at(entries, i);
                const char *rel = json_get_str(e, "path");
                if (!rel)
                        continue;
                snprintf(path, sizeof path, "%s%s%s", q->path, strcmp(q->path, "/") ? "/" : "", rel);
                if (first && q->files)
                        (void)buf_append(&q->results, ",", 1);
                first = false;
                q->files++;
                write_entry(&w, e, path);
                last = rel;
        }
        if (w.err || q->results.len >= q->results.max - 2) {
                q->answered = true;
                return e2b_rpc_error(q->c, "resource_exhausted",
                                     "%s: more than %u bytes of entries to depth %d: list a smaller depth or a deeper "
                                     "directory", q->path, E2B_LIST_MAX_BYTES, (int)q->depth);
        }
        if (json_get_bool(resp, "truncated", false) && last)
                return tree_req(q, s, last);
        (void)buf_append(&q->results, "]}", 2);
        q->answered = true;
        e2b_rpc_reply(q->c, &q->results);
}

void e2b_fs_make_dir(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        struct session *s = rpc_begin(c, false, &body);
        if (!s || rpc_target(c, body, "path", user, path) < 0)
                return;
        struct fsreq *q = fsreq_new(c, FS_MKDIR_STAT);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        snprintf(q->user, sizeof q->user, "%s", user);
        struct api_json r;
        stat_req(&r, path);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

/* MakeDir after its stat: envd's answers for what is there, else mkdir -p as the user. */
static void make_dir_next(struct fsreq *q, struct session *s, const struct json *resp) {
        const struct json *e = json_get(resp, "error");
        if (!e) {
                const char *t = json_get_str(resp, "type");
                q->answered = true;
                if (t && !strcmp(t, "dir"))
                        e2b_rpc_error(q->c, "already_exists", "directory '%s' already exists", q->path);
                else
                        e2b_rpc_error(q->c, "invalid_argument", "path '%s' exists and is not a directory", q->path);
                return;
        }
        int64_t err = 0;
        (void)json_get_int(e, "errno", &err);
        if (err != ENOENT)
                return reply_init_error(q, resp);
        q->kind = FS_MKDIR;
        struct api_json r;
        api_req_begin(&r, "mkdir");
        json_w_kstr(&r.w, "path", q->path);
        json_w_kbool(&r.w, "parents", true);
        json_w_kint(&r.w, "mode", 0755);
        req_user(&r, q->user);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

void e2b_fs_move(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], from[PROTO_MAX_PATH + 1], to[PROTO_MAX_PATH + 1];
        struct session *s = rpc_begin(c, false, &body);
        if (!s || rpc_target(c, body, "source", user, from) < 0 || rpc_target(c, body, "destination", user, to) < 0)
                return;
        struct fsreq *q = fsreq_new(c, FS_MOVE);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", to);
        /* envd makes the destination's parents, as the user. */
        struct api_json r;
        api_req_begin(&r, "rename");
        json_w_kstr(&r.w, "from", from);
        json_w_kstr(&r.w, "to", to);
        json_w_kbool(&r.w, "parents", true);
        req_user(&r, user);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

void e2b_fs_remove(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        struct session *s = rpc_begin(c, false, &body);
        if (!s || rpc_target(c, body, "path", user, path) < 0)
                return;
        struct fsreq *q = fsreq_new(c, FS_REMOVE);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        /* envd's os.RemoveAll: recursive, and a missing path is no error (fs_frame). */
        struct api_json r;
        api_req_begin(&r, "remove");
        json_w_kstr(&r.w, "path", path);
        json_w_kbool(&r.w, "recursive", true);
        (void)fs_send(q, s, OP_SIMPLE, &r);
}

/* ---- WatchDir ---- */

static const char *event_type(const char *t) {
        if (!strcmp(t, "create") || !strcmp(t, "rename_to"))
                return "EVENT_TYPE_CREATE"; /* fsnotify's: a name moved in is created */
        if (!strcmp(t, "write"))
                return "EVENT_TYPE_WRITE";
        if (!strcmp(t, "remove"))
                return "EVENT_TYPE_REMOVE";
        if (!strcmp(t, "rename_from"))
                return "EVENT_TYPE_RENAME";
        if (!strcmp(t, "chmod"))
                return "EVENT_TYPE_CHMOD";
        return NULL; /* overflow: E2B has no such event */
}

/* A watch's keepalive; e2b_fs_tick knows the streams of watches by this very pointer. */
static const char watch_keepalive[] = "{\"keepalive\":{}}";

/* Connect-Timeout-Ms is the watch's lifetime, as envd's: at the deadline the stream ends
 * with deadline_exceeded (the SDK's onExit gets a TimeoutError). */
void e2b_fs_tick(struct daemon *d) {
        if (!d->e2b)
                return;
        uint64_t now = util_now_ms();
        for (struct e2b_stream *st = d->e2b->streams, *next; st; st = next) {
                next = st->next;
                if (st->keepalive != watch_keepalive)
                        continue;
                struct fsreq *q = (struct fsreq *)((char *)st - offsetof(struct fsreq, stream));
                if (!q->deadline_ms || now < q->deadline_ms || q->answered)
                        continue;
                q->answered = true;
                /* Ending it unregisters st (and maybe frees nothing yet: the free is deferred). */
                e2b_stream_end(st, "deadline_exceeded", "the watch reached its Connect-Timeout-Ms");
        }
}

/* One WatchDirResponse: event type et of the entry name (relative to the watch), with
 * st, space-init's stat of it (NULL: it is gone). */
static void watch_send(struct fsreq *q, const char *name, const char *et, const struct json *st) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "filesystem");
        json_w_obj_begin(&w);
        json_w_kstr(&w, "name", name);
        json_w_kstr(&w, "type", et);
        /* As envd: the entry of what is there when the event is read; none for what went. */
        if (q->include_entry && st) {
                char abs[2 * PROTO_MAX_PATH + 2];
                snprintf(abs, sizeof abs, "%s%s%s", q->path, *name ? "/" : "", name);
                abs[PROTO_MAX_PATH] = '\0';
                json_w_key(&w, "entry");
                write_entry(&w, st, abs);
        }
        json_w_obj_end(&w);
        json_w_obj_end(&w);
        if (!w.err)
                e2b_stream_msg(&q->stream, b.data, b.len);
        buf_free(&b);
}

/* One NDJSON line of init's watch as WatchDirResponses. */
static void watch_line(struct fsreq *q, const char *line, size_t n) {
        _cleanup_json_ struct json *ev = NULL;
        if (json_parse(line, n, &ev, NULL, 0) < 0)
                return;
        const char *t = json_get_str(ev, "type"), *path = json_get_str(ev, "path");
        const char *et = t ? event_type(t) : NULL;
        if (!et || !path)
                return;
        /* An upload is written to a temporary beside its file and renamed over it at the
         * end (protocol.md §3.6): the temporary's events are space-init's, not the
         * client's, and its rename onto the file is what envd, which writes in place,
         * shows as the file's create and write. */
        bool temp = !strncmp(base_name(path), PROTO_UPLOAD_TEMP_PREFIX, strlen(PROTO_UPLOAD_TEMP_PREFIX));
        bool after_temp = q->temp_moved;
        q->temp_moved = temp && !strcmp(t, "rename_from");
        if (temp)
                return;
        /* name: relative to the watched directory (envd's filepath.Rel). */
        size_t rl = strlen(q->root);
        const char *name = path;
        if (!strcmp(q->root, "/"))
                name = path + 1;
        else if (!strncmp(path, q->root, rl) && path[rl] == '/')
                name = path + rl + 1;
        else if (!strcmp(path, q->root))
                name = "";
        const struct json *st = json_get(ev, "stat");
        watch_send(q, name, et, st);
        if (after_temp && !strcmp(t, "rename_to"))
                watch_send(q, name, "EVENT_TYPE_WRITE", st);
}

static void watch_data(struct fsreq *q, const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (p[i] != '\n') {
                        if (!q->line_over && buf_append(&q->line, &p[i], 1) < 0)
                                q->line_over = true;
                        continue;
                }
                if (!q->line_over && q->line.len)
                        watch_line(q, q->line.data, q->line.len);
                buf_reset(&q->line);
                q->line_over = false;
        }
}

void e2b_fs_watch_dir(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        int64_t timeout;
        struct session *s = rpc_begin(c, true, &body);
        if (!s || rpc_target(c, body, "path", user, path) < 0 || e2b_timeout_ms(c, &timeout) < 0)
                return;
        struct fsreq *q = fsreq_new(c, FS_WATCH);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        q->deadline_ms = timeout > 0 ? util_now_ms() + (uint64_t)timeout : 0;
        q->include_entry = json_get_bool(body, "includeEntry", false);
        struct api_json r;
        api_req_begin(&r, "watch");
        json_w_kstr(&r.w, "path", path);
        json_w_kbool(&r.w, "recursive", json_get_bool(body, "recursive", false));
        if (q->include_entry)
                json_w_kbool(&r.w, "stat", true);
        api_req_window(&r, s);
        (void)fs_send(q, s, OP_WATCH, &r);
}

static void watch_frame(struct fsreq *q, const struct proto_hdr *h, const uint8_t *payload, const struct json *j) {
        switch (h->type) {
        case PROTO_RESP:
                if (api_resp_is_error(j))
                        return reply_init_error(q, j);
                snprintf(q->root, sizeof q->root, "%s", json_get_str(j, "path") ? json_get_str(j, "path") : q->path);
                e2b_stream_begin(&q->stream, q->c, watch_keepalive);
                e2b_stream_msg(&q->stream, "{\"start\":{}}", strlen("{\"start\":{}}"));
                return;
        case PROTO_STDOUT:
                watch_data(q, payload, h->len);
                return;
        case PROTO_EXIT: {
                q->answered = true;
                const struct json *err = json_get(j, "error");
                if (err)
                        e2b_stream_end(&q->stream, "internal", "%s",
                                       json_get_str(err, "message") ? json_get_str(err, "message") : "the watch failed");
                else /* the directory itself went: the stream ends */
                        e2b_stream_end(&q->stream, NULL, NULL);
                return;
        }
        default:
                return;
        }
}

/* ---- GET /files ---- */

/* The decoded query value key into out: 1 present, 0 absent; < 0 answered 400. */
static int query_opt(struct conn *c, const char *key, char *out, size_t outsz) {
        int r = http_query_get(c->req->query, key, out, outsz);
        if (r == -ENOENT) {
                out[0] = '\0';
                return 0;
        }
        if (r < 0) {
                e2b_reply_error(c, 400, "%s: %s", key, r == -ENAMETOOLONG ? "too long" : "bad percent-encoding");
                return r;
        }
        return 1;
}

/* The user (?username=, else the default) and the absolute path of ?path= (have_path 0:
 * none given). < 0: answered. */
static int files_target(struct conn *c, char user[API_USER_MAX], char path[PROTO_MAX_PATH + 1], int *have_path) {
        char name[API_USER_MAX + 8], raw[PROTO_MAX_PATH + 1];
        int r = query_opt(c, "username", name, sizeof name);
        if (r < 0 || e2b_request_user(c, r ? name : NULL, user) < 0)
                return -EINVAL;
        int hp = query_opt(c, "path", raw, sizeof raw);
        if (hp < 0)
                return hp;
        char home[API_USER_MAX + 16];
        e2b_home_of(user, home, sizeof home);
        if (hp && e2b_abs_path(raw, home, path, PROTO_MAX_PATH + 1) < 0) {
                e2b_reply_error(c, 400, "path is longer than %d bytes", PROTO_MAX_PATH);
                return -ENAMETOOLONG;
        }
        if (hp)
                path_clean(path);
        *have_path = hp && raw[0];
        return 0;
}

void e2b_files_get(struct conn *c) {
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        int have_path;
        struct session *s = api_session(c, true);
        if (!s || files_target(c, user, path, &have_path) < 0)
                return;
        if (!have_path)
                return e2b_reply_error(c, 400, "the path query parameter is required");
        struct fsreq *q = fsreq_new(c, FS_GET);
        if (!q)
                return;
        snprintf(q->path, sizeof q->path, "%s", path);
        struct api_json r;
        api_req_begin(&r, "read");
        json_w_kstr(&r.w, "path", path);
        json_w_kint(&r.w, "offset", 0);
        json_w_kint(&r.w, "length", -1);
        api_req_window(&r, s);
        (void)fs_send(q, s, OP_READ, &r);
}

static void get_frame(struct fsreq *q, const struct proto_hdr *h, const uint8_t *payload, const struct json *j) {
        struct conn *c = q->c;
        int64_t size = -1;
        switch (h->type) {
        case PROTO_RESP:
                if (api_resp_is_error(j))
                        return reply_init_error(q, j);
                (void)json_get_int(j, "size", &size);
                if (size == 0) {
                        /* The SDK reads an empty file from Content-Length: 0 only. */
                        struct buf empty = BUF_INIT(0);
                        q->answered = true;
                        conn_reply_typed(c, 200, "application/octet-stream", &empty);
                        return;
                }
                conn_stream_begin(c, 200, "application/octet-stream");
                return;
        case PROTO_DATA:
                if (h->len == 0) {
                        q->answered = true;
                        conn_stream_end(c);
                } else
                        conn_stream_chunk(c, payload, h->len);
                return;
        case PROTO_EXIT:
                q->answered = true;
                conn_abort(c); /* failed midway */
                return;
        default:
                return;
        }
}

/* ---- POST /files ---- */

static void post_reply_results(struct fsreq *q) {
        q->answered = true;
        if (q->files == 0)
                return e2b_reply_error(q->c, 400, "no file in the request: a multipart part named \"file\" with a filename, "
                                                   "or ?path= with an application/octet-stream body");
        (void)buf_append(&q->results, "]", 1);
        conn_reply_json(q->c, 200, &q->results);
}

/* A write op for the file at path (absolute): init makes its parents and gives what it
 * makes to the user, and replaces the file at the end (protocol.md §3.6). */
static int post_file_begin(struct fsreq *q, const char *path) {
        struct session *s = ses_find(q->c->d, q->sid);
        if (!s || !ses_usable(s)) {
                reply_fail(q, -EAGAIN, "the sandbox is not running");
                return -EAGAIN;
        }
        snprintf(q->path, sizeof q->path, "%s", path);
        struct api_json r;
        api_req_begin(&r, "write");
        json_w_kstr(&r.w, "path", path);
        json_w_kint(&r.w, "mode", 0644);
        json_w_kbool(&r.w, "parents", true);
        req_user(&r, q->user);
        if (!fs_send(q, s, OP_WRITE, &r))
                return -EIO;
        q->in_file = true;
        return 0;
}

static int post_send(struct fsreq *q, const void *data, size_t n) {
        if (!q->op)
                return -EPIPE;
        for (size_t off = 0; off < n; off += SES_UPLOAD_FRAME) {
                int r = ses_send(q->op->ses, PROTO_DATA, q->op->id, (const char *)data + off,
                                 MIN((size_t)SES_UPLOAD_FRAME, n - off));
                if (r < 0) {
                        api_op_send_failed(q->c, q->op, r);
                        q->answered = true;
                        return r;
                }
        }
        return 0;
}

/* The file's last byte went: its RESP says how it ended; the body waits for it. */
static int post_file_end(struct fsreq *q) {
        q->in_file = false;
        if (!q->op)
                return -EPIPE;
        int r = ses_send(q->op->ses, PROTO_DATA, q->op->id, NULL, 0);
        if (r < 0) {
                api_op_send_failed(q->c, q->op, r);
                q->answered = true;
                return r;
        }
        q->waiting = true;
        return 0;
}

/* Parses body bytes from the multipart parser; returns how many it took (it stops after
 * the end of a file, whose RESP must come first), or < 0 when answered. */
static ssize_t post_multipart(struct fsreq *q, const char *data, size_t n) {
        size_t off = 0;
        while (off < n && !q->waiting && !q->answered) {
                size_t used;
                struct mp_event ev;
                mp_feed(&q->mp, data + off, n - off, &used, &ev);
                off += used;
                switch (ev.type) {
                case MP_NEED_MORE:
                case MP_DONE:
                        break;
                case MP_ERROR:
                        q->answered = true;
                        e2b_reply_error(q->c, 400, "multipart body: %s", ev.error);
                        return -EINVAL;
                case MP_PART_BEGIN: {
                        if (strcmp(ev.name, "file") != 0)
                                break; /* envd ignores other fields */
                        const char *target = q->have_query_path ? q->query_path : ev.filename;
                        if (!target || !*target) {
                                q->answered = true;
                                e2b_reply_error(q->c, 400, "a part named \"file\" without a filename (its path)");
                                return -EINVAL;
                        }
                        char home[API_USER_MAX + 16], path[PROTO_MAX_PATH + 1];
                        e2b_home_of(q->user, home, sizeof home);
                        if (e2b_abs_path(target, home, path, sizeof path) < 0) {
                                q->answered = true;
                                e2b_reply_error(q->c, 400, "a filename is longer than %d bytes", PROTO_MAX_PATH);
                                return -EINVAL;
                        }
                        path_clean(path);
                        /* Two parts for one file: which one wins would be an accident. */
                        struct buf needle = BUF_INIT(0);
                        struct json_writer nw = JSON_WRITER_INIT(&needle);
                        json_w_kstr(&nw, "path", path);
                        bool dup = needle.data && q->results.data &&
                                   memmem(q->results.data, q->results.len, needle.data, needle.len);
                        buf_free(&needle);
                        if (dup) {
                                q->answered = true;
                                e2b_reply_error(q->c, 400, "two parts write %s", path);
                                return -EINVAL;
                        }
                        if (post_file_begin(q, path) < 0)
                                return -EIO;
                        break;
                }
                case MP_DATA:
                        if (q->in_file) {
                                q->bytes += ev.len;
                                if (post_send(q, ev.data, ev.len) < 0)
                                        return -EIO;
                        }
                        break;
                case MP_PART_END:
                        if (q->in_file && post_file_end(q) < 0)
                                return -EIO;
                        break;
                }
        }
        return (ssize_t)off;
}

/* An octet-stream body's bytes, gunzipped when it came with Content-Encoding: gzip. */
static int post_octet(struct fsreq *q, const char *data, size_t n) {
        if (!q->gzip) {
                q->bytes += n;
                return post_send(q, data, n);
        }
        if (q->zend)
                return 0; /* after the gzip member: ignored, as gunzip does with trailing garbage */
        static uint8_t out[64 << 10];
        q->z.next_in = (Bytef *)data;
        q->z.avail_in = (uInt)n;
        while (q->z.avail_in > 0 && !q->zend) {
                q->z.next_out = out;
                q->z.avail_out = sizeof out;
                int zr = inflate(&q->z, Z_NO_FLUSH);
                if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
                        q->answered = true;
                        e2b_reply_error(q->c, 400, "the gzip body is corrupt: %s", q->z.msg ? q->z.msg : "inflate failed");
                        return -EINVAL;
                }
                size_t got = sizeof out - q->z.avail_out;
                q->bytes += got;
                if (q->bytes > E2B_UPLOAD_MAX) {
                        q->answered = true;
                        e2b_reply_error(q->c, 413, "the upload is over %" PRIu64 " bytes unzipped", E2B_UPLOAD_MAX);
                        return -EFBIG;
                }
                if (got && post_send(q, out, got) < 0)
                        return -EIO;
                q->zend = zr == Z_STREAM_END;
                if (zr == Z_BUF_ERROR && got == 0)
                        break;
        }
        return 0;
}

static int post_body(struct conn *c, const char *data, size_t n) {
        struct fsreq *q = conn_hook_ctx(c, &fs_hook);
        if (!q || q->answered)
                return 0; /* answered already: the rest is dropped */
        q->parsing = true;
        ssize_t used = q->multipart ? post_multipart(q, data, n) : post_octet(q, data, n) < 0 ? -1 : (ssize_t)n;
        q->parsing = false;
        if (used < 0 || q->answered)
                return 0;
        if (q->multipart) {
                /* Waiting for a file's RESP: the rest waits too (a slice of the input). */
                if ((size_t)used < n && buf_append(&q->pending, data + used, n - (size_t)used) < 0) {
                        q->answered = true;
                        e2b_reply_error(q->c, 500, "out of memory");
                        return 0;
                }
        }
        if (q->waiting || (q->op && ses_out_full(q->op->ses)))
                c->in_paused = true;
        return 0;
}

/* A file's RESP came, or init's queue has room: the body goes on. */
static void post_kick(struct fsreq *q) {
        /* Not while the body is being parsed: sending a file's bytes can find room in
         * init's queue and call back here, and resuming the input then would parse the
         * rest of the body under the parse in progress. */
        if (!q->c || q->answered || q->waiting || q->parsing)
                return;
        if (q->pending.len) {
                struct buf rest = q->pending;
                q->pending = BUF_INIT(0);
                q->parsing = true;
                ssize_t used = post_multipart(q, rest.data, rest.len);
                q->parsing = false;
                if (used >= 0 && (size_t)used < rest.len)
                        (void)buf_append(&q->pending, rest.data + used, rest.len - (size_t)used);
                buf_free(&rest);
                if (used < 0 || !q->c || q->answered || q->waiting)
                        return;
        }
        if (q->op && ses_out_full(q->op->ses))
                return;
        if (q->c->in_paused)
                conn_resume_input(q->c);
}

static void post_body_end(struct conn *c) {
        struct fsreq *q = conn_hook_ctx(c, &fs_hook);
        if (!q || q->answered)
                return;
        if (q->multipart) {
                if (mp_finish(&q->mp) < 0) {
                        q->answered = true;
                        return e2b_reply_error(c, 400, "the multipart body ends before its closing delimiter");
                }
                return post_reply_results(q);
        }
        if (q->gzip && !q->zend) {
                q->answered = true;
                return e2b_reply_error(c, 400, "the gzip body ends early");
        }
        (void)post_file_end(q); /* its RESP answers */
}

/* One written file's RESP: its entry in the answer, then the body goes on. */
static void post_written(struct fsreq *q, const struct json *j) {
        q->waiting = false;
        if (api_resp_is_error(j))
                return reply_init_error(q, j);
        struct json_writer w = JSON_WRITER_INIT(&q->results);
        if (q->files++ == 0)
                (void)buf_append(&q->results, "[", 1);
        else
                (void)buf_append(&q->results, ",", 1);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "name", base_name(q->path));
        json_w_kstr(&w, "type", "file");
        json_w_kstr(&w, "path", q->path);
        json_w_obj_end(&w);
        if (!q->multipart)
                return post_reply_results(q);
        post_kick(q);
}

void e2b_files_post(struct conn *c) {
        /* Called at the head: the body streams through post_body. */
        char user[API_USER_MAX], path[PROTO_MAX_PATH + 1];
        int have_path;
        struct session *s = api_session(c, true);
        if (!s || files_target(c, user, path, &have_path) < 0)
                return;
        const char *ct = http_request_header(c->req, "Content-Type");
        const char *ce = http_request_header(c->req, "Content-Encoding");
        char boundary[MP_BOUNDARY_MAX + 1];
        bool multipart = ct && !strncasecmp(ct, "multipart/", 10);
        if (multipart && mp_boundary(ct, boundary) < 0)
                return e2b_reply_error(c, 400, "a multipart/form-data Content-Type with a valid boundary is required");
        bool gzip = ce && !strcasecmp(ce, "gzip");
        if (ce && strcasecmp(ce, "identity") && !gzip)
                return e2b_reply_error(c, 400, "Content-Encoding %.32s is not supported (gzip is)", ce);
        if (gzip && multipart)
                return e2b_reply_error(c, 400, "a gzip body is taken as application/octet-stream only");
        if (!multipart && !have_path)
                return e2b_reply_error(c, 400, "the path query parameter is required for an application/octet-stream body");
        if (c->req->has_length && c->req->content_length > HTTP_MAX_UPLOAD)
                return e2b_reply_error(c, 413, "upload over %u bytes", HTTP_MAX_UPLOAD);
        struct fsreq *q = fsreq_new(c, FS_POST);
        if (!q)
                return;
        snprintf(q->user, sizeof q->user, "%s", user);
        q->multipart = multipart;
        q->gzip = gzip;
        q->have_query_path = have_path;
        snprintf(q->query_path, sizeof q->query_path, "%s", path);
        if (gzip) {
                if (inflateInit2(&q->z, 16 + MAX_WBITS) != Z_OK) {
                        q->answered = true;
                        return e2b_reply_error(c, 500, "zlib: cannot start inflating");
                }
                q->zinit = true;
        }
        if (multipart)
                (void)mp_init(&q->mp, boundary);
        else if (post_file_begin(q, path) < 0)
                return;
        c->on_body = post_body;
        c->on_body_end = post_body_end;
        conn_continue(c);
}

/* ---- GET /health ---- */

void e2b_health(struct conn *c) {
        struct session *s = api_session(c, false);
        if (!s)
                return;
        const char *why;
        if (dl_action_check(DL_EXEC, s->state, &why) == 0 && ses_usable(s))
                conn_reply_empty(c, 204);
        else
                e2b_reply_error(c, 502, "The sandbox is not running");
}

/* ---- init's frames ---- */

static void fs_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                     const struct json *j) {
        struct fsreq *q = client;
        if (!q->c || q->answered)
                return;
        switch (q->kind) {
        case FS_WATCH:
                return watch_frame(q, h, payload, j);
        case FS_GET:
                return get_frame(q, h, payload, j);
        case FS_POST:
                if (h->type == PROTO_RESP)
                        post_written(q, j);
                return;
        default:
                break;
        }
        if (h->type != PROTO_RESP)
                return;
        int64_t err = 0;
        (void)json_get_int(json_get(j, "error"), "errno", &err);
        switch (q->kind) {
        case FS_MKDIR_STAT:
                return make_dir_next(q, op->ses, j);
        case FS_REMOVE:
                if (api_resp_is_error(j) && err != ENOENT)
                        return reply_init_error(q, j);
                q->answered = true;
                return e2b_rpc_reply(q->c, NULL);
        default:
                break;
        }
        if (api_resp_is_error(j))
                return reply_init_error(q, j);
        switch (q->kind) {
        case FS_STAT:
        case FS_MOVE_STAT:
                return reply_entry(q, j);
        case FS_LIST:
                return list_page(q, op->ses, j);
        case FS_MKDIR: {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_key(&w, "entry");
                json_w_obj_begin(&w);
                json_w_kstr(&w, "name", base_name(q->path));
                json_w_kstr(&w, "type", "FILE_TYPE_DIRECTORY");
                json_w_kstr(&w, "path", q->path);
                json_w_obj_end(&w);
                json_w_obj_end(&w);
                q->answered = true;
                e2b_rpc_reply(q->c, &b);
                buf_free(&b);
                return;
        }
        case FS_MOVE: {
                q->kind = FS_MOVE_STAT;
                struct api_json r;
                stat_req(&r, q->path);
                (void)fs_send(q, op->ses, OP_SIMPLE, &r);
                return;
        }
        default:
                return;
        }
}
