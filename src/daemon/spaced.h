/* spaced's internal types: the daemon, its HTTP connections, durable sessions (at most one
 * live sandbox each), their lifecycle actions and worker jobs, and the requests in flight
 * between an HTTP client and a sandbox's space-init. Shared by server.c, session.c,
 * durable.c, worker.c, api*.c and main.c; nothing here is a public API. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/json.h"
#include "meta/meta.h"
#include "store/store.h"
#include "daemon/disk.h"
#include "daemon/durable.h"
#include "daemon/http.h"
#include "daemon/layers.h"
#include "daemon/loop.h"
#include "daemon/routes.h"
#include "daemon/templates.h"

#define SPACED_VERSION "0.1.0"

/* Per connection: unparsed input we hold at most (we stop reading past it). */
#define CONN_IN_MAX (64u << 10)
/* Output queued to one client: past HIGH we stop forwarding a sandbox's frames to it until
 * it drains below LOW. MAX is a hard stop that no single append can pass by much. */
#define CONN_OUT_HIGH (256u << 10)
#define CONN_OUT_LOW (64u << 10)
#define CONN_OUT_MAX (8u << 20)
#define SPACED_MAX_CONNS 1024
/* A request that stops arriving half-way (head or body) is answered 408 after this. */
#define CONN_REQUEST_TIMEOUT_MS 60000
/* A keep-alive connection with no request in progress is closed after this: idle clients
 * would otherwise hold the SPACED_MAX_CONNS slots forever. Clients reconnect. */
#define CONN_IDLE_TIMEOUT_MS 120000
/* Frames queued to one space-init: uploads pause past HIGH and resume below LOW. */
#define SES_OUT_HIGH (1u << 20)
#define SES_OUT_LOW (256u << 10)
#define SES_OUT_MAX (8u << 20)
#define SES_READ_CHUNK (64u << 10)
/* Per-stream flow control (docs/protocol.md §3.14): output bytes of one exec, attach or
 * download that space-init may send before spaced grants more. spaced grants what it has
 * passed on, in steps of at least SES_WINDOW_STEP, while the stream's client is under
 * CONN_OUT_HIGH; so a client that reads nothing holds at most CONN_OUT_HIGH + the window
 * (times the JSON expansion, at worst 6 for control bytes) and stops only its own stream. */
#define SES_STREAM_WINDOW (128u << 10)
#define SES_WINDOW_STEP (32u << 10)
#define SES_UPLOAD_FRAME (64u << 10)
#define SES_HELLO_TIMEOUT_MS 10000
/* A foreground command killed because its client left runs its stream out to the EXIT
 * (output discarded); if a process that escaped the kill keeps its pipes busy past this,
 * the stream is cancelled instead (init keeps the rest in a background ring). */
#define SES_KILL_DRAIN_MS 5000
#define SPACED_MAX_SESSIONS 4096
#define SES_MAX_ENV 256                /* env entries a session or exec may carry */
#define SES_ID_LEN 20                  /* "ses_" + 16 hex */
#define SES_DEFAULT_MEMORY (512ull << 20)
#define SES_DEFAULT_PIDS 512u
#define SES_MAX_MEMORY (1ull << 40)
#define SES_MAX_PIDS 1000000u
#define SES_MAX_CPUS 1024.0
/* Disk limit of a session's writable layer (docs/security.md "Disk"). */
#define SES_DEFAULT_DISK (10ull << 30)    /* spaced --disk-default */
#define SES_MIN_DISK (16ull << 20)        /* below this even a package install fails */
#define SES_MAX_DISK (16ull << 40)        /* and never more than the volume */
#define SPACED_VOLUME_DEFAULT_MAX (64ull << 30) /* default volume: min(this, half the free space) */
/* Durable sessions (docs/sessions.md). */
#define SES_DEFAULT_INTERVAL_MS 30000     /* rolling snapshots; 0 = off */
#define SES_MIN_INTERVAL_MS 1000
#define SES_MAX_INTERVAL_MS (7ll * 24 * 3600 * 1000)
#define SES_DEFAULT_RETENTION 10u         /* rolling snapshots kept */
#define SES_MAX_RETENTION 10000u
#define SES_MAX_FORKS 64                  /* sessions one fork request makes */
#define SES_MAX_QUEUED_ACTIONS 64         /* lifecycle requests waiting per session */
#define SES_EVENTS_DEFAULT 100
#define SES_EVENTS_MAX META_PAGE_MAX      /* 1000 */
#define SES_EVENT_DATA_MAX META_JSON_MAX  /* 64 KiB */
#define SES_LABEL_MAX META_LABEL_MAX      /* 256 bytes */
#define SES_TOKEN_BYTES 32                /* random bytes; 43 url-safe base64 chars */
#define SES_TOKEN_LEN 43
#define SES_TOKEN_HEADER "X-Space-Session-Token"
#define SES_RECOVER_RETRY_MS 1000         /* a recovery that failed is tried again after */
#define SPACED_GC_INTERVAL_MS (10 * 60 * 1000)
#define SPACED_SETTLE_MS 5000            /* a restart serves once sessions are back, or after this */
#define SPACED_WORKERS 2                  /* threads for captures, materializations, GC */
#define SPACED_STARTERS 2                 /* threads for sandbox creates */

struct daemon;
struct session;
struct op;
struct tpl_job;
struct action;
struct job;
struct wpool;

/* Something that will answer a client later (a lifecycle action, a fork group): the
 * connection forgets it when it closes or gets its answer, so *conn is never stale. */
struct conn_waiter {
        struct conn *conn;
};

enum conn_state {
        CONN_IDLE,        /* parsing the next request */
        CONN_BODY_JSON,   /* collecting a JSON body for the route */
        CONN_BODY_STREAM, /* passing the body to the handler as it comes (upload) */
        CONN_BODY_DISCARD,/* answered already; dropping the rest of the body */
        CONN_WAIT,        /* the handler answers asynchronously */
        CONN_CLOSING,     /* flush what is queued, then close */
};

struct conn {
        struct loop_src src;
        struct daemon *d;
        struct conn *next, *prev;
        enum conn_state state;
        bool closed;           /* fd closed, waiting for the deferred free */
        bool in_process;       /* inside conn_process(): guards recursion */
        bool peer_closed;      /* read EOF from the client */
        bool rdhup;            /* EPOLLRDHUP seen (EOF will follow) */
        bool in_paused;        /* an upload waits for the sandbox to take data */
        bool keep_alive;
        bool streaming;        /* a chunked response is under way */
        bool resp_done;        /* this request's response is complete */
        bool sandbox_stalled;  /* a sandbox waits for this client to drain */
        bool process_queued;   /* conn_process is deferred to the end of the batch */
        bool tcp;              /* came through --listen: every request needs a bearer token */
        bool admin;            /* the local operator (Unix socket, no token): templates, GC */
        char tenant[META_NAME_MAX + 1]; /* whose sessions this request may see (auth.h) */
        uint64_t last_read_ms;
        uint64_t idle_since_ms; /* when the last response was complete (or the accept) */
        struct buf in;
        size_t in_off;
        struct buf out;
        size_t out_off;
        struct http_parser *parser;
        const struct http_request *req;
        const struct api_route *route;
        struct api_params params;
        struct buf body;
        struct op *op;         /* request in flight to a sandbox, if any */
        struct tpl_job *job;   /* template build streaming to this client, if any */
        struct conn_waiter *waiter; /* lifecycle action that will answer, if any */
        /* CONN_BODY_STREAM: body bytes; returns <0 to fail the request. */
        int (*on_body)(struct conn *c, const char *data, size_t n);
        void (*on_body_end)(struct conn *c);
};

struct session {
        struct daemon *d;
        struct session *next, *prev;
        char id[SES_ID_LEN + 1];
        char tenant[META_NAME_MAX + 1]; /* its owner: other tenants get 404 for it */
        char sbx_id[SES_ID_LEN + 1]; /* the live sandbox; "" when none */
        char *template;
        char *dir;           /* DATA/sandboxes/<sbx_id>, NULL when no sandbox */
        enum meta_session_state state; /* as committed in meta */
        char *error;         /* why the last sandbox died or a recovery failed */
        time_t created_at;
        /* durable fields (mirrors of meta) */
        int64_t interval_ms;
        uint32_t retention;
        char head[META_ID_SIZE];        /* head snapshot id, "" when none */
        struct store_hash head_hash;    /* its store record: parent of the next capture */
        char parent_session[META_ID_SIZE];
        char source_snapshot[META_ID_SIZE];
        char token_hash[META_HASH_HEX + 1];
        uint32_t recoveries;
        int64_t last_snapshot_ms;       /* 0 = never */
        /* sandbox bookkeeping */
        bool ready;          /* the sandbox said HELLO: requests may go to it */
        bool lost;           /* it died unasked; a recovery is queued */
        bool adopting;       /* re-attaching after a daemon restart */
        int64_t clean_since_ns;   /* the upper dir held exactly head at this time */
        struct layer_ref layer;   /* the snapshot layer below the upper dir (daemon/layers.h) */
        uint64_t last_entries;    /* entries of upper/ the last capture walked (0: none yet) */
        uint64_t next_rolling_ms; /* monotonic ms of the next rolling check */
        unsigned recover_failures;
        uint64_t recover_at_ms;   /* a failed recovery is retried at this time */
        /* lifecycle: one action at a time, the others wait in order */
        struct action *act;
        struct action *queue;
        unsigned n_queued;
        struct job *job;     /* worker job in flight for the current action */
        bool kick_pending;   /* the next action starts after this batch */
        uint64_t memory;
        double cpus;
        uint32_t pids;
        uint64_t disk;       /* writable layer limit in bytes; 0 = none */
        bool network;
        char **env;          /* "K=V", NULL-terminated; the defaults of every exec */
        size_t n_env;
        const struct runtime_ops *rt;
        struct rt_sandbox *sb;
        pid_t init_pid;
        struct loop_src init_src;
        struct loop_src pid_src;
        struct buf in;       /* frames from init not yet handled */
        size_t in_off;
        struct buf out;      /* frames to init not yet written */
        size_t out_off;
        uint32_t next_id;
        struct op *ops;      /* requests in flight */
        uint64_t hello_deadline_ms; /* 0: not waiting for HELLO */
        bool stalled;        /* frame handling stops until a client drains (an init without windows) */
        bool init_window;    /* its HELLO said it honours stream windows (protocol.md §3.14) */
        bool oom_killed;     /* last health seen */
        uint64_t mem_bytes;
        uint32_t n_pids;
        bool freed;
};

enum op_kind {
        OP_EXEC,
        OP_ATTACH,
        OP_READ,
        OP_WRITE,
        OP_SIMPLE, /* one REQ, one RESP: ps, list, stat, mkdir, remove, signal */
        OP_HELLO,  /* POST /v1/sessions waiting for init's HELLO */
        OP_KILL,   /* fire-and-forget signal after a client vanished: its RESP is dropped */
};

/* The bytes of a stream that may end in an incomplete UTF-8 sequence, carried over. */
struct utf8_carry {
        uint8_t b[4];
        uint8_t n;
};

struct op {
        struct op *next, *prev;
        struct session *ses;
        struct conn *conn;   /* NULL once the client went away */
        uint32_t id;
        enum op_kind kind;
        bool got_resp;
        bool done;           /* finished; freed after the current batch */
        bool background;
        int64_t pid;
        uint64_t bytes;      /* uploaded or downloaded so far */
        struct utf8_carry carry[2]; /* stdout, stderr */
        bool upload_failed;  /* the client sent a bad body: abort */
        /* A stream with a window (exec, attach, read; protocol.md §3.14): output bytes init
         * may still send, and bytes passed on to the client but not granted back yet. */
        bool windowed;
        uint32_t window_left;
        uint32_t owed;
        uint64_t drain_deadline_ms; /* OP_EXEC killed for a gone client: cancel after this */
        /* OP_SIMPLE: turns the RESP JSON into the HTTP answer. */
        void (*on_resp)(struct conn *c, const struct json *resp);
        /* OP_EXEC: for the event log. */
        char *argv_json;
        int64_t started_ms;
};

struct daemon {
        struct loop *loop;
        char *data_dir;
        char *sock_path;
        char *init_path;
        const struct runtime_ops *rt;
        struct loop_src unix_src;
        struct loop_src tcp_src;
        struct loop_src sig_src;
        struct loop_src timer_src;
        struct loop_src tpl_src;  /* read end of the template workers' pipe */
        int tpl_wfd;
        struct conn *conns;
        size_t n_conns;
        struct session *sessions;
        size_t n_sessions;
        struct tpl_job *jobs;
        uint64_t request_timeout_ms; /* 0: CONN_REQUEST_TIMEOUT_MS */
        uint64_t idle_timeout_ms;    /* 0: CONN_IDLE_TIMEOUT_MS */
        /* Writable layers live under layer_dir: DATA/vol (the quota volume) when disk
         * limits can be enforced, else DATA itself, as before the volume existed. */
        char *layer_dir;
        bool disk_quota;          /* the volume is mounted: disk limits work */
        char disk_error[256];     /* why they don't, for logs, /v1/health and 503s */
        uint64_t disk_default;    /* limit of a session that asks none; 0 = none */
        uint64_t disk_max;        /* the largest a session may ask */
        uint64_t volume_size;
        bool stopping;
        /* durability */
        struct meta *meta;        /* used by the loop thread only */
        struct store *store;      /* shared with the workers (thread-safe) */
        struct workers *workers;
        struct loop_src job_src;  /* completions from the workers */
        struct workers *reaper;   /* one thread that destroys deleted sessions' sandboxes */
        struct loop_src reaper_src;
        struct workers *starter;  /* threads that run the runtime's create (runsc and QEMU
                                   * take seconds: never on the loop thread) */
        struct loop_src starter_src;
        uint64_t next_gc_ms;
        bool gc_running;
        struct dur_waiter *gc_waiters[16];
        size_t n_gc_waiters;
        struct wpool *pool;        /* warm pool (pool.h); NULL until the sessions are loaded */
};

/* server.c */
int srv_listen_unix(struct daemon *d, const char *path);
int srv_listen_tcp(struct daemon *d, const char *hostport);
void srv_close_all(struct daemon *d);
/* Serves HTTP on a connected, non-blocking fd (taken over on success). */
int srv_conn_new(struct daemon *d, int fd);
/* {"error":{"code":"<from status>","message":msg}} */
void srv_error_body(struct buf *b, int status, const char *msg);
/* Once a second: times out requests that stopped arriving half-way. */
void srv_tick(struct daemon *d);
/* Answers: a complete JSON response, an error ({"error":{code,message}}), or an empty 204. */
void conn_reply_json(struct conn *c, int status, const struct buf *body);
void conn_reply_error(struct conn *c, int status, const char *fmt, ...) _printf_(3, 4);
void conn_reply_empty(struct conn *c, int status);
/* Chunked streams: the head, then raw chunks or one JSON line per event, then the end. */
void conn_stream_begin(struct conn *c, int status, const char *content_type);
void conn_stream_chunk(struct conn *c, const void *data, size_t n);
void conn_stream_event(struct conn *c, const struct buf *json_line);
void conn_stream_end(struct conn *c);
/* Drops the connection without ending the response (a truncated download must look so). */
void conn_abort(struct conn *c);
/* Resumes parsing an upload paused with c->in_paused. */
void conn_resume_input(struct conn *c);
/* Sends "100 Continue" when the client waits for it. */
void conn_continue(struct conn *c);
bool conn_over_high(const struct conn *c);

/* session.c */
struct session *ses_find(struct daemon *d, const char *id);
void ses_write_json(struct json_writer *w, struct session *s);
/* A session object in memory, linked into d (fields zero, fds -1). */
int ses_alloc(struct daemon *d, const char *id, struct session **ret);
/* Unlinks and frees s after the batch (its sandbox must be gone, no job in flight). */
void ses_free(struct session *s);
/* The sandbox died or misbehaved: requests on it end with 503 and a recovery follows. */
void ses_mark_dead(struct session *s, const char *fmt, ...) _printf_(2, 3);
/* Watches the new sandbox s->sb (init socket, pidfd) and waits for HELLO. */
int ses_watch(struct session *s);
/* Stops watching s->sb (kept, not destroyed: a worker is about to checkpoint it, which
 * takes its socket and pid away); requests in flight end with status/msg. */
void ses_quiesce(struct session *s, int status, const char *msg);
/* Stops watching, destroys s->sb (if any); requests in flight end with status/msg. */
void ses_drop_sandbox(struct session *s, int status, const char *msg);
/* The same, but hands the sandbox (still running, unwatched) to the caller to destroy. */
struct rt_sandbox *ses_take_sandbox(struct session *s, int status, const char *msg);
/* Requests in flight end with status + msg. */
void ses_fail_ops(struct session *s, int status, const char *msg);
/* Forgets s's sandbox without stopping it (it outlives the daemon, re-attached later). */
void ses_unwatch_keep(struct session *s);
/* The token matches the session's stored hash (constant-time compare). */
bool ses_token_ok(const struct session *s, const char *token);
bool ses_template_in_use(struct daemon *d, const char *name);
void ses_tick(struct daemon *d);
/* Whether requests may go to the sandbox now. */
static inline bool ses_usable(const struct session *s) {
        return s->state == META_SESSION_RUNNING && s->sb && s->ready && !s->lost;
}
/* {"K":"V"} -> NULL-terminated "K=V" strings; *why says what was wrong. */
int ses_parse_env(const struct json *obj, char ***ret, size_t *ret_n, const char **why);
/* A new request to init; the op is linked to c (which may be NULL). */
int ses_op_new(struct session *s, struct conn *c, enum op_kind kind, struct op **ret);
/* Queues one frame to init. */
int ses_send(struct session *s, uint8_t type, uint32_t id, const void *payload, size_t len);
int ses_send_req(struct session *s, uint32_t id, const struct buf *json);
/* Adds "window" to a streaming REQ being written when s's init honours windows; returns
 * whether it did, and then op_window_start must be called on the request's op. */
bool ses_req_window(const struct session *s, struct json_writer *w);
void op_window_start(struct op *op);
/* op's client drained: grant init what was passed on (from conn_flush). */
void op_window_drained(struct op *op);
void op_done(struct op *op);
/* The client of op went away (connection closed). */
void op_conn_gone(struct op *op);
/* A client that stalled a sandbox has drained. */
void ses_resume(struct session *s);
/* ses_resume after the current batch of events (safe from inside a close path). */
void ses_resume_later(struct session *s);
/* The sandbox took queued data: resumes uploads. */
bool ses_out_full(const struct session *s);

/* api.c */
/* Maps an error RESP of init ({"error":{"code","errno","message"}}) to an HTTP answer. */
void api_reply_init_error(struct conn *c, const struct json *resp, bool exec);
bool api_resp_is_error(const struct json *resp);

/* templates.c (until server.c has its connection hook) */
void tpl_conn_gone(struct tpl_job *j);
