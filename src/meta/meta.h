/* The metadata store: sessions, sandboxes, snapshots, event logs, host leases and API
 * tokens (ARCHITECTURE.md §1, §7). One interface; the backend (SQLite now, PostgreSQL for
 * many hosts later) fills the ops table in meta-internal.h. Schema and guarantees: docs/meta.md. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ids are "<prefix>_<16 lowercase hex>" (ses_, sbx_, snap_); a buffer of META_ID_SIZE
 * holds any id this store accepts. */
#define META_ID_SIZE 32u
#define META_ID_PREFIX_MAX 8u
#define META_ID_RANDOM_HEX 16u
#define META_HASH_HEX 64u               /* SHA-256 in lowercase hex */
#define META_NAME_MAX 64u               /* tenant, template, host id, token name */
#define META_RUNTIME_MAX 32u
#define META_KIND_MAX 32u               /* event kind: [a-z0-9_.-] */
#define META_ADDRESS_MAX 255u           /* a host's address */
#define META_LABEL_MAX 256u             /* snapshot label; longer is -E2BIG */
#define META_UNREPLICATED_MAX 4096u     /* rows of one meta_snapshot_unreplicated */
#define META_JSON_MAX (64u << 10)       /* env JSON, event payload; longer is -E2BIG */
#define META_TEXT_MAX 1024u             /* session error, death reason: longer is cut */
#define META_PAGE_MAX 1000u             /* events (and paged lists) per call */
#define META_PAGE_MAX_BYTES (4u << 20)  /* event payload bytes per page (at least one event) */

enum meta_session_state {
        META_SESSION_CREATING,
        META_SESSION_RUNNING,
        META_SESSION_PAUSED,
        META_SESSION_RECOVERING,
        META_SESSION_TERMINATED,
        _META_SESSION_STATE_MAX,
};
#define META_STATE_BIT(s) (1u << (s))

enum meta_sandbox_state {
        META_SANDBOX_STARTING,
        META_SANDBOX_RUNNING,
        META_SANDBOX_DEAD,      /* died without being asked */
        META_SANDBOX_DESTROYED, /* released on purpose (pause, rm) */
        _META_SANDBOX_STATE_MAX,
};

enum meta_snapshot_reason {
        META_REASON_ROLLING,
        META_REASON_PAUSE,
        META_REASON_MANUAL,
        META_REASON_FORK,
        META_REASON_RESTORE,
        _META_REASON_MAX,
};

/* Names as stored and shown ("running", "dead", "rolling"); NULL when out of range.
 * The parsers return -EINVAL for an unknown name and leave *ret untouched. */
const char *meta_session_state_name(enum meta_session_state s);
int meta_session_state_from_name(const char *name, enum meta_session_state *ret);
const char *meta_sandbox_state_name(enum meta_sandbox_state s);
int meta_sandbox_state_from_name(const char *name, enum meta_sandbox_state *ret);
const char *meta_snapshot_reason_name(enum meta_snapshot_reason r);
int meta_snapshot_reason_from_name(const char *name, enum meta_snapshot_reason *ret);

/* In every record below an empty string means "none" (stored as NULL). */
struct meta_limits {
        uint64_t memory_bytes; /* 0 = runtime default */
        uint32_t cpu_millis;   /* 1000 = one CPU; 0 = no limit */
        uint32_t pids;         /* 0 = runtime default */
        uint64_t disk_bytes;   /* writable layer; 0 = no limit (schema 2) */
};

struct meta_session {
        char id[META_ID_SIZE];
        char tenant[META_NAME_MAX + 1];
        enum meta_session_state state;
        char template_name[META_NAME_MAX + 1];
        char runtime[META_RUNTIME_MAX + 1];
        struct meta_limits limits;
        bool network;
        char *env_json;                      /* a JSON object; NULL = {} */
        int64_t snapshot_interval_ms;
        uint32_t retention_keep;             /* rolling snapshots kept */
        int64_t created_ms;                  /* Unix time in ms; 0 at create = now */
        int64_t updated_ms;
        char sandbox_id[META_ID_SIZE];       /* the live sandbox */
        char parent_session[META_ID_SIZE];   /* fork: the session it came from */
        char source_snapshot[META_ID_SIZE];  /* fork: the snapshot it started from */
        char head_snapshot[META_ID_SIZE];    /* what a resume or a recovery starts from */
        char token_hash[META_HASH_HEX + 1];  /* meta_token_hash() of the session token */
        char *error;                         /* why it failed, or NULL */
        /* schema 4: the network room's JSON texts (docs/network.md); NULL = none */
        char *network_json;                  /* the egress policy; NULL = as `network` says */
        char *ports_json;                    /* the exposed ports; NULL = none */
        /* schema 5: the lifecycle timeouts, a JSON text of the daemon's (daemon/lifetime.h) */
        char *timeouts_json;                 /* NULL = none */
        /* schema 6: the client's metadata, a JSON object of strings (set at create) */
        char *metadata_json;                 /* NULL = none */
};
/* Frees env_json, error, network_json, ports_json, timeouts_json and metadata_json (not s
 * itself). */
void meta_session_clear(struct meta_session *s);
void meta_sessions_free(struct meta_session *v, size_t n);

struct meta_sandbox {
        char id[META_ID_SIZE];
        char session_id[META_ID_SIZE];
        char host_id[META_NAME_MAX + 1];
        char runtime[META_RUNTIME_MAX + 1];
        enum meta_sandbox_state state;
        int32_t init_pid;                    /* 0 = not known */
        int64_t created_ms;                  /* 0 at create = now */
        int64_t ended_ms;                    /* 0 while starting or running */
        char death_reason[META_TEXT_MAX + 1];
};

struct meta_snapshot {
        char id[META_ID_SIZE];
        char session_id[META_ID_SIZE];
        char parent_id[META_ID_SIZE];        /* may name one retention has removed since */
        char store_hash[META_HASH_HEX + 1];  /* the snapshot record in the store */
        char root_hash[META_HASH_HEX + 1];
        char memory_hash[META_HASH_HEX + 1]; /* "" when the runtime has no memory image */
        int64_t time_ms;                     /* 0 at add = now */
        enum meta_snapshot_reason reason;
        char label[META_LABEL_MAX + 1];
        uint64_t bytes_added;
        uint64_t logical_size;
        bool pinned;                         /* retention never removes it */
        bool replicated;                     /* whole in the replication bucket (ignored at add) */
};

struct meta_event {
        int64_t seq;       /* 1, 2, 3, … per session; never reused */
        int64_t time_ms;
        char kind[META_KIND_MAX + 1];
        char *payload;     /* JSON text, NUL-terminated */
        size_t payload_len;
};
void meta_events_free(struct meta_event *v, size_t n);

struct meta_host {
        char id[META_NAME_MAX + 1];
        char address[META_ADDRESS_MAX + 1];
        int64_t lease_expires_ms;
        int64_t updated_ms;
};

struct meta_token {
        char hash[META_HASH_HEX + 1];
        char tenant[META_NAME_MAX + 1];
        char name[META_NAME_MAX + 1];
        int64_t created_ms;
        int64_t revoked_ms; /* 0 = valid */
};

/* One id of a list (retention candidates). */
struct meta_id {
        char s[META_ID_SIZE];
};
struct meta_hash {
        char hex[META_HASH_HEX + 1];
};

struct meta;

#define META_OPTS_VERSION 2 /* 2 added error; version 1 structs are still accepted */
struct meta_opts {
        unsigned version;        /* META_OPTS_VERSION */
        unsigned busy_timeout_ms; /* wait this long for another writer; 0 = 5000 */
        /* Where a failed meta_open says why, for humans (a failed open has no handle to
         * ask meta_last_error); may be NULL. */
        char *error;
        size_t error_size;
};
#define META_OPTS_INIT .version = META_OPTS_VERSION

/* Opens the store named by uri: "sqlite:PATH", or a plain PATH (SQLite), creating the
 * file and migrating its schema to the current version. "postgresql://…" is
 * -EPROTONOSUPPORT for now. -EPROTO if the file has a newer schema than this code (it is
 * left as it was). o may be NULL. */
int meta_open(const char *uri, const struct meta_opts *o, struct meta **ret);
/* Rolls back an open transaction and closes. Accepts NULL; returns NULL. */
struct meta *meta_free(struct meta *m);
static inline void meta_freep(struct meta **m) { *m = meta_free(*m); }
#define _cleanup_meta_ __attribute__((cleanup(meta_freep)))

/* What the last failing call on m did wrong, for humans ("" when none). Valid until the
 * next call on m. A handle is used by one thread at a time; threads open their own. */
const char *meta_last_error(struct meta *m);
/* "sqlite", later "postgresql". */
const char *meta_backend_name(struct meta *m);
/* The schema version of the open store. */
int meta_schema_version(struct meta *m);
/* Runs the backend's consistency checks (SQLite: integrity_check, foreign_key_check).
 * 0 when clean, -EUCLEAN with the first problem in meta_last_error otherwise. */
int meta_check(struct meta *m);

/* Every write below is atomic and durable when it returns 0. Between meta_begin and
 * meta_commit, writes become durable together at the commit, or not at all (rollback,
 * meta_free, crash). Transactions nest (the inner ones are savepoints); a failing call
 * inside one undoes only itself, the transaction stays open. meta_commit/meta_rollback
 * without a transaction: -EINVAL. */
int meta_begin(struct meta *m);
int meta_commit(struct meta *m);
int meta_rollback(struct meta *m);
/* Relaxed (until set back): a commit survives a crash of the process but may be lost in
 * one of the machine until the next commit made while not relaxed, which makes it durable
 * too (SQLite: synchronous=NORMAL in WAL mode; the WAL keeps commits in order). For
 * records nobody has been told about yet, which a machine crash makes moot anyway (a
 * sandbox being started), so the request path pays one disk sync, not one per step. */
int meta_set_relaxed(struct meta *m, bool relaxed);

/* prefix ("ses", "sbx", "snap"; [a-z]{1,8}) + '_' + 16 hex digits from getrandom(). */
int meta_new_id(const char *prefix, char buf[META_ID_SIZE]);
/* True if id is prefix + '_' + 1..24 of [0-9a-z]. */
bool meta_id_valid(const char *prefix, const char *id);
/* SHA-256 of a secret token in lowercase hex: what is stored instead of the token. */
int meta_token_hash(const char *token, char out[META_HASH_HEX + 1]);
/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t meta_now_ms(void);

/* ---- sessions ---- */

/* Stores a new session. Ignored: sandbox_id, head_snapshot, updated_ms (set them later).
 * parent_session and source_snapshot, when given, must exist (-ENOENT). -EEXIST for a
 * used id, -E2BIG for env_json or metadata_json over META_JSON_MAX, -EINVAL for bad fields
 * (metadata_json not a JSON object). */
int meta_session_create(struct meta *m, const struct meta_session *s);
/* Fills *ret (free with meta_session_clear). -ENOENT if unknown. */
int meta_session_get(struct meta *m, const char *id, struct meta_session *ret);

struct meta_session_filter {
        const char *tenant;   /* NULL = every tenant */
        unsigned state_mask;  /* META_STATE_BIT()s; 0 = every state */
        const char *after_id; /* paging: ids greater than this one; NULL = from the start */
        unsigned limit;       /* 0 = no limit (daemon use); else at most META_PAGE_MAX */
};
/* Sessions matching f (NULL = all), in id order. *ret is NULL when none; free with
 * meta_sessions_free. */
int meta_session_list(struct meta *m, const struct meta_session_filter *f, struct meta_session **ret,
                      size_t *ret_n);
/* The sessions a daemon must re-attach or recover after a start: running, recovering. */
int meta_session_list_recover(struct meta *m, struct meta_session **ret, size_t *ret_n);

/* Moves session id to state `to` if its current state is in from_mask (0 = any state);
 * -EBUSY if it is not, -EINVAL if it is terminated (final). error: the session's error
 * text (NULL clears it; cut at META_TEXT_MAX). */
int meta_session_set_state(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                           const char *error);
/* sandbox_id NULL or "" clears it. */
int meta_session_set_sandbox(struct meta *m, const char *id, const char *sandbox_id);
/* snapshot_id must be a snapshot of this session: -ENOENT unknown, -EXDEV another's. */
int meta_session_set_head(struct meta *m, const char *id, const char *snapshot_id);
/* The session's network_json / ports_json (NULL or "" clears). -ENOENT if unknown. */
int meta_session_set_network(struct meta *m, const char *id, const char *json);
int meta_session_set_ports(struct meta *m, const char *id, const char *json);
/* The session's timeouts_json (NULL or "" clears). -ENOENT if unknown. */
int meta_session_set_timeouts(struct meta *m, const char *id, const char *json);
/* hash: META_HASH_HEX hex digits, or NULL/"" to clear. */
int meta_session_set_token_hash(struct meta *m, const char *id, const char *hash);
/* 0 if token hashes to the session's token hash (constant-time compare); -EACCES if not
 * or the session has none; -ENOENT if unknown. */
int meta_session_check_token(struct meta *m, const char *id, const char *token);
/* Removes the session with its sandboxes, snapshots and events. Forks keep their
 * parent_session/source_snapshot text. -ENOENT if unknown. */
int meta_session_delete(struct meta *m, const char *id);

/* ---- sandboxes ---- */

/* -ENOENT if the session is unknown, -EEXIST for a used id. ended_ms is ignored. */
int meta_sandbox_create(struct meta *m, const struct meta_sandbox *b);
int meta_sandbox_get(struct meta *m, const char *id, struct meta_sandbox *ret);
/* Sets the state; dead/destroyed also set ended_ms (now) and death_reason (NULL = none). */
int meta_sandbox_set_state(struct meta *m, const char *id, enum meta_sandbox_state st, const char *reason);
int meta_sandbox_set_pid(struct meta *m, const char *id, int32_t pid);
/* A session's sandboxes, oldest first. Free *ret with free(). */
int meta_sandbox_list_session(struct meta *m, const char *session_id, struct meta_sandbox **ret,
                              size_t *ret_n);
/* Starting or running sandboxes on host_id: what a restarted daemon must re-attach or reclaim. */
int meta_sandbox_list_live(struct meta *m, const char *host_id, struct meta_sandbox **ret, size_t *ret_n);

/* ---- snapshots ---- */

/* -ENOENT if the session is unknown, -EEXIST for a used id, -E2BIG for a label over
 * META_LABEL_MAX, -EINVAL for a malformed hash. parent_id is not checked. */
int meta_snapshot_add(struct meta *m, const struct meta_snapshot *s);
int meta_snapshot_get(struct meta *m, const char *id, struct meta_snapshot *ret);
/* The timeline: a session's snapshots, oldest first (time, then insertion). Free *ret. */
int meta_snapshot_list(struct meta *m, const char *session_id, struct meta_snapshot **ret, size_t *ret_n);
int meta_snapshot_set_pinned(struct meta *m, const char *id, bool pinned);
/* -EBUSY if it is a session's head snapshot. */
int meta_snapshot_delete(struct meta *m, const char *id);
/* Retention: the session's rolling, unpinned snapshots older than its newest
 * retention_keep such ones, leaving out any that is a head or a fork source. Oldest
 * first. Free *ret. */
int meta_snapshot_expired(struct meta *m, const char *session_id, struct meta_id **ret, size_t *ret_n);
/* Every distinct store_hash and memory_hash (a store record of its own: the driver's
 * checkpoint directory) of every snapshot: the live set for store_gc. Free *ret. */
int meta_snapshot_live_hashes(struct meta *m, struct meta_hash **ret, size_t *ret_n);
/* Replication (spaced --s3-endpoint, docs/daemon.md "Replication"): a snapshot is added
 * unreplicated; set_replicated records that it is whole in the bucket (-ENOENT unknown). */
int meta_snapshot_set_replicated(struct meta *m, const char *id, bool replicated);
/* At most limit (1..META_UNREPLICATED_MAX) snapshots not replicated, of every session,
 * oldest first. Free *ret. */
int meta_snapshot_unreplicated(struct meta *m, unsigned limit, struct meta_snapshot **ret, size_t *ret_n);
/* How many snapshots are not replicated. */
int meta_snapshot_count_unreplicated(struct meta *m, uint64_t *ret);

/* ---- events ---- */

/* How much of the event log this handle keeps (docs/meta.md "Event log bounds"); a zero
 * field is no bound. Agent events (meta_event_post) and the program's own (meta_event_append)
 * are bounded apart: posts never push out the program's events. */
struct meta_event_bounds {
        uint64_t agent_events;  /* posted events kept per session: the oldest go */
        uint64_t agent_bytes;   /* their payload bytes kept per session: the oldest go */
        uint64_t tenant_bytes;  /* posted payload bytes of all a tenant's sessions: past it -EDQUOT */
        uint64_t system_events; /* appended events kept per session: the oldest go */
};
void meta_set_event_bounds(struct meta *m, const struct meta_event_bounds *b);

/* Appends the program's own event (lifecycle, exec, ...) to the session's log; *ret_seq
 * (may be NULL) gets its sequence number. payload: JSON text of len bytes (-EINVAL if not
 * JSON, -E2BIG over META_JSON_MAX); kind: [a-z0-9_.-]{1,META_KIND_MAX}. -ENOENT if the
 * session is unknown. The session's oldest such events past system_events are removed. */
int meta_event_append(struct meta *m, const char *session_id, const char *kind, const char *payload,
                      size_t len, int64_t *ret_seq);
/* Appends an event a client posted, as meta_event_append, within the bounds: the session's
 * oldest posted events are removed while it keeps more than agent_events or agent_bytes
 * (-E2BIG when this one alone is over agent_bytes), and -EDQUOT, nothing written, when the
 * tenant's sessions would then keep more than tenant_bytes of posted payload. */
int meta_event_post(struct meta *m, const char *session_id, const char *kind, const char *payload,
                    size_t len, int64_t *ret_seq);
/* Events with seq > after_seq, oldest first, at most limit (0 or over META_PAGE_MAX:
 * META_PAGE_MAX) and about META_PAGE_MAX_BYTES of payload. -ENOENT if the session is
 * unknown. Free with meta_events_free. */
int meta_event_list(struct meta *m, const char *session_id, int64_t after_seq, unsigned limit,
                    struct meta_event **ret, size_t *ret_n);
/* The session's newest sequence number (0 when its log is empty). */
int meta_event_last_seq(struct meta *m, const char *session_id, int64_t *ret);

/* ---- hosts (many-host leases) ---- */

/* Creates or renews host_id's lease until expires_ms. */
int meta_host_renew(struct meta *m, const char *host_id, const char *address, int64_t expires_ms);
int meta_host_get(struct meta *m, const char *host_id, struct meta_host *ret);
/* Hosts whose lease expired before now_ms. Free *ret. */
int meta_host_list_expired(struct meta *m, int64_t now_ms, struct meta_host **ret, size_t *ret_n);
int meta_host_delete(struct meta *m, const char *host_id);

/* ---- API tokens ---- */

/* Stores a token by its hash (meta_token_hash) for tenant. -EEXIST if known. */
int meta_token_create(struct meta *m, const char *hash, const char *tenant, const char *name);
/* -ENOENT unknown, -EKEYREVOKED revoked (*ret untouched in both cases). */
int meta_token_lookup(struct meta *m, const char *hash, struct meta_token *ret);
/* -ENOENT unknown; revoking twice is 0. */
int meta_token_revoke(struct meta *m, const char *hash);
/* Every token, revoked ones too, oldest first. *ret is NULL when none; free with free(). */
int meta_token_list(struct meta *m, struct meta_token **ret, size_t *ret_n);
