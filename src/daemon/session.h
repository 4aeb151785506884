/* Sessions in memory (session.c): the live sandbox of each, its socket to space-init, and
 * the requests in flight on it ("ops"): framing, request ids, stream windows, stalls, the
 * kill of a foreground command whose client left. What an op's frames mean to its client
 * is the op's handler's (struct op_ops, filled by api_*.c): the core never writes HTTP
 * and knows its client only as an opaque pointer. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/proto.h"
#include "meta/meta.h"
#include "store/store.h"
#include "daemon/layers.h"
#include "daemon/lifetime.h"
#include "daemon/session_rules.h"
#include "daemon/loop.h"
#include "daemon/net/policy.h"

/* Frames queued to one space-init: uploads pause past HIGH and resume below LOW. */
#define SES_OUT_HIGH (1u << 20)
#define SES_OUT_LOW (256u << 10)
#define SES_OUT_MAX (8u << 20)
#define SES_READ_CHUNK (256u << 10)
/* Per-stream flow control (docs/protocol.md §3.14): output bytes of one exec, attach or
 * download that space-init may send before spaced grants more. spaced grants what it has
 * passed on, in steps of a quarter of the window, while the stream's client is under
 * CONN_OUT_HIGH; so a client that reads nothing holds at most CONN_OUT_HIGH + the window
 * and stops only its own stream. A stream starts with SES_STREAM_WINDOW, which NDJSON
 * (up to 6 times the bytes, for control bytes as JSON escapes) and a download keep; an exec
 * or attach in the binary framing (its bytes go out as they are) is widened to
 * SES_STREAM_WINDOW_RAW at once, so that init is rarely waiting for a grant. */
#define SES_STREAM_WINDOW (128u << 10)
#define SES_STREAM_WINDOW_RAW (1u << 20)
#define SES_UPLOAD_FRAME (64u << 10)
/* Streamed stdin (exec?stdin=stream, docs/protocol.md §3.15): bytes sent to init and not
 * acked yet, past which spaced stops reading the client. Under init's INIT_STDIN_HIGH, so
 * init never stops reading its socket for stdin (and so never misses a WINDOW grant). */
#define SES_STDIN_CREDIT (1u << 20)
#define SES_HELLO_TIMEOUT_MS 10000
#define SES_KEY_FILE "init.key"      /* in the sandbox dir (never inside the sandbox), 0600 */
#define SES_RECONNECT_MS 250         /* after a connection that did not prove it is init */
/* A foreground command killed because its client left runs its stream out to the EXIT
 * (output discarded); if a process that escaped the kill keeps its pipes busy past this,
 * the stream is cancelled instead (init keeps the rest in a background ring). */
#define SES_KILL_DRAIN_MS 5000
#define SES_MAX_ENV 256                /* env entries a session or exec may carry */
#define SES_ID_LEN 20                  /* "ses_" + 16 hex */
#define SES_PORTS_MAX 32               /* exposed ports of one session (api_ports.c) */

/* An exposed port (docs/api.md, "Ports"): public, or opened by its own token, kept as
 * meta_token_hash() of it. */
struct ses_port {
        uint16_t port;
        bool public;
        char token_hash[META_HASH_HEX + 1];
};

struct daemon;
struct action;
struct job;
struct op;
struct proto_hdr;
struct runtime_ops;
struct rt_sandbox;
struct metrics_ring;

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
        int64_t created_ms;  /* the same in Unix ms: the order of lists (the E2B API's) */
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
        struct dl_bucket event_bucket;  /* POST .../events: the rate limit (limits.h) */
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
        uint64_t snap_bytes; /* what its snapshots in meta added to the store (bytes_added) */
        bool snap_over;      /* over its snapshot limit: the event was sent */
        struct net_policy net; /* its network policy (net/policy.h; the room reads it) */
        struct ses_port ports[SES_PORTS_MAX]; /* exposed ports, kept as meta's ports_json */
        size_t n_ports;
        char **env;          /* "K=V", NULL-terminated; the defaults of every exec */
        size_t n_env;
        char *metadata;      /* the client's metadata, a JSON object text (daemon/metadata.h; meta's metadata_json); NULL: none */
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
        /* The key given to its init (protocol.md §1); a re-attached init must show it in
         * its HELLO before anything it sends is acted on (proof_pending). */
        uint8_t init_key[PROTO_KEY_LEN];
        bool init_key_set;
        bool key_offer;      /* the runtime's own connection: a key follows its HELLO */
        bool proof_pending;
        uint64_t proof_deadline_ms; /* no proven HELLO by then: the sandbox is lost */
        uint64_t reconnect_at_ms;   /* a refused connection: connect again then */
        unsigned refused;           /* connections refused since the re-attach */
        bool stalled;        /* frame handling stops until a client drains (an init without windows) */
        bool init_window;    /* its HELLO said it honours stream windows (protocol.md §3.14) */
        bool init_tty;       /* ... and that it runs terminals (§3.17, #15) */
        bool init_input;     /* ... and op input, background stdin and tags (§3.21: the E2B API) */
        bool oom_killed;     /* last health seen */
        uint64_t mem_bytes;
        uint32_t n_pids;
        unsigned n_relays;   /* port_relay.h: connections to its ports through init */
        struct ses_lifetime life; /* timeout, idle_timeout, auto_resume (daemon/lifetime.h; meta's timeouts_json) */
        struct metrics_ring *metrics; /* its usage samples (metrics.h); NULL until the first */
        bool freed;
};

enum op_kind {
        OP_EXEC,
        OP_ATTACH,
        OP_READ,
        OP_WRITE,
        OP_SIMPLE, /* one REQ, one RESP: ps, list, stat, mkdir, remove, signal */
        OP_KILL,   /* fire-and-forget signal after a client vanished: its RESP is dropped */
        OP_TCP,    /* a connection init made to a port inside (op connect): STDIN in, STDOUT out */
        OP_WATCH,  /* a file watch (op watch): NDJSON events in STDOUT frames, EXIT when it ends */
};

/* What an op's frames mean to its client: filled by whoever made the op (api_*.c). Each
 * is called only while the op has a client, which is passed apart from the op because
 * the op may be done (op_done forgets its client) by the time its answer is written. */
struct op_ops {
        /* A frame of op, after the core acted on it (got_resp, pid, bytes; the event log;
         * op_done when it ends the request). j: its JSON, for the frame types that carry
         * one. RESP of every kind; STDOUT, STDERR, EXIT of exec and attach; DATA and EXIT
         * of a read. */
        void (*frame)(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                      const struct json *j);
        /* The request ends unanswered (its sandbox died, is paused, the daemon stops): err
         * (-EAGAIN: try again once the session runs) and msg say why. op is done. */
        void (*fail)(struct op *op, void *client, int err, const char *msg);
        /* The client holds more unsent output than a stream may add to: its stream waits. */
        bool (*behind)(struct op *op, void *client);
        /* init's queue has room again (ses_out_full no longer), or init acked streamed
         * stdin: an upload paused for it goes on. NULL: not an upload. */
        void (*room)(struct op *op, void *client);
        /* op is done and forgets client (which stops pointing at op). */
        void (*detach)(struct op *op, void *client);
};

/* The bytes of a stream that may end in an incomplete UTF-8 sequence, carried over. */
struct utf8_carry {
        uint8_t b[4];
        uint8_t n;
};

struct op {
        struct op *next, *prev;
        struct session *ses;
        const struct op_ops *ops; /* NULL for the core's own (OP_KILL) */
        void *client;        /* its handler's client; NULL once it went away */
        uint32_t id;
        enum op_kind kind;
        bool got_resp;
        bool done;           /* finished; freed after the current batch */
        bool background;
        bool stalling;       /* ses->stalled waits for this op's client to catch up */
        int64_t pid;
        uint64_t bytes;      /* uploaded or downloaded so far */
        struct utf8_carry carry[2]; /* the handler's: stdout, stderr split mid-character */
        bool upload_failed;  /* the client sent a bad body: abort */
        /* OP_EXEC with ?stdin=stream: the rest of the request body is the command's stdin.
         * stdin_acks: init acks it (its RESP said so); stdin_inflight: sent, not acked. */
        bool stdin_stream;
        bool stdin_acks;
        bool stdin_ended;
        uint64_t stdin_inflight;
        /* A stream with a window (exec, attach, read; protocol.md §3.14): output bytes init
         * may still send, and bytes passed on to the client but not granted back yet. */
        bool windowed;
        uint32_t window_size; /* granted in all: SES_STREAM_WINDOW, or widened */
        uint32_t window_left;
        uint32_t owed;
        uint64_t drain_deadline_ms; /* OP_EXEC killed for a gone client: cancel after this */
        /* The handler's callback (OP_SIMPLE: how to answer the RESP), cast back by it. */
        void (*handler_fn)(void);
        /* OP_EXEC: for the event log. */
        char *argv_json;
        int64_t started_ms;
};

struct session *ses_find(struct daemon *d, const char *id);
void ses_write_json(struct json_writer *w, struct session *s);
/* s's limit on snapshot bytes (0 = none); what tenant's sessions' snapshots hold. */
uint64_t ses_snapshot_limit(const struct session *s);
uint64_t ses_tenant_snapshot_bytes(struct daemon *d, const char *tenant);
/* A session object in memory, linked into d (fields zero, fds -1). */
int ses_alloc(struct daemon *d, const char *id, struct session **ret);
/* What the room above (the lifecycle) hears of a session's sandbox; set once in
 * d->ses_hooks before any sandbox runs. */
struct ses_hooks {
        void (*ready)(struct session *s);                 /* HELLO came */
        void (*lost)(struct session *s, const char *why); /* it died unasked */
};
/* Appends an event (JSON payload) to s's log, relaxed (no answer waits on it: it becomes
 * durable with the next full commit); logs failures. */
void ses_event(struct session *s, const char *kind, const struct buf *payload);
/* Unlinks and frees s after the batch (its sandbox must be gone, no job in flight). */
void ses_free(struct session *s);
/* The sandbox died or misbehaved: requests on it end with 503 and a recovery follows. */
void ses_mark_dead(struct session *s, const char *fmt, ...) _printf_(2, 3);
/* Watches the new sandbox s->sb (init socket, pidfd) and waits for HELLO. */
int ses_watch(struct session *s);
/* A new sandbox s->sb, watched: once its HELLO says init takes a key ("keys"), makes one,
 * keeps it in s->dir (SES_KEY_FILE, for a restarted daemon) and sends it to init on the
 * connection the runtime made (which only the daemon holds). */
int ses_key_give(struct session *s);
/* A re-attached sandbox, watched: its HELLO must carry the key kept in s->dir. 0 and
 * proof required, -ENOENT if none is on record (a sandbox of an older daemon), other
 * -errno if it cannot be read. */
int ses_key_require(struct session *s);
/* Stops watching s->sb (kept, not destroyed: a worker is about to checkpoint it, which
 * takes its socket and pid away); requests in flight end with status/msg. */
void ses_quiesce(struct session *s, const char *msg);
/* Stops watching, destroys s->sb (if any); requests in flight end with status/msg. */
void ses_drop_sandbox(struct session *s, const char *msg);
/* The same, but hands the sandbox (still running, unwatched) to the caller to destroy. */
struct rt_sandbox *ses_take_sandbox(struct session *s, const char *msg);
/* Requests in flight end with status + msg. */
void ses_fail_ops(struct session *s, const char *msg);
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
/* A new request to init whose frames go to ops with client (both NULL: nobody's). */
int ses_op_new(struct session *s, enum op_kind kind, const struct op_ops *ops, void *client, struct op **ret);
/* Queues one frame to init. */
int ses_send(struct session *s, uint8_t type, uint32_t id, const void *payload, size_t len);
int ses_send_req(struct session *s, uint32_t id, const struct buf *json);
/* Adds "window" to a streaming REQ being written when s's init honours windows; returns
 * whether it did, and then op_window_start must be called on the request's op. */
bool ses_req_window(const struct session *s, struct json_writer *w);
void op_window_start(struct op *op);
/* Grows op's window to size (no smaller): a stream of raw bytes (SES_STREAM_WINDOW_RAW). */
void op_window_widen(struct op *op, uint32_t size);
void op_done(struct op *op);
/* The client of op went away: a foreground command is killed, a stream cancelled. */
void op_client_gone(struct op *op);
/* op's request was answered: op runs on to its end (if it has not ended) without it. */
void op_client_done(struct op *op);
/* op's client took output: a stream's window opens again; a sandbox that held its frames
 * for it reads on once it caught_up (is below its low-water mark). */
void op_client_drained(struct op *op, bool caught_up);
/* Whether init's queue is full: uploads wait (op_ops.room tells when they may go on). */
bool ses_out_full(const struct session *s);
/* Whether op's streamed stdin must wait: init's queue is full, or its credit is used up. */
bool ses_stdin_full(const struct op *op);
