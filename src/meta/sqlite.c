/* The SQLite backend of the metadata store: one database file in WAL mode with
 * synchronous=FULL, so that every commit that returned is on disk (docs/meta.md).
 * Statements are prepared once and cached; every write runs in a transaction of its own
 * or, inside meta_begin, in a savepoint that undoes only the failing call. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stddef.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include "common/macros.h"
#include "meta/meta-internal.h"

/* Schema migrations: entry i takes the schema from version i to i + 1. Never edit a
 * released entry; append a new one. */
static const char *const migrations[] = {
        /* 1: the first schema */
        "CREATE TABLE sessions ("
        "  id TEXT PRIMARY KEY NOT NULL,"
        "  tenant TEXT NOT NULL,"
        "  state TEXT NOT NULL CHECK (state IN ('creating','running','paused','recovering','terminated')),"
        "  template TEXT,"
        "  runtime TEXT NOT NULL,"
        "  memory_bytes INTEGER NOT NULL DEFAULT 0,"
        "  cpu_millis INTEGER NOT NULL DEFAULT 0,"
        "  pids INTEGER NOT NULL DEFAULT 0,"
        "  network INTEGER NOT NULL DEFAULT 0,"
        "  env TEXT,"
        "  snapshot_interval_ms INTEGER NOT NULL DEFAULT 0,"
        "  retention_keep INTEGER NOT NULL DEFAULT 0,"
        "  created_ms INTEGER NOT NULL,"
        "  updated_ms INTEGER NOT NULL,"
        "  sandbox_id TEXT,"
        "  parent_session TEXT,"
        "  source_snapshot TEXT,"
        "  head_snapshot TEXT REFERENCES snapshots(id),"
        "  token_hash TEXT,"
        "  error TEXT,"
        "  event_seq INTEGER NOT NULL DEFAULT 0"
        ");"
        "CREATE INDEX sessions_tenant ON sessions(tenant);"
        "CREATE INDEX sessions_state ON sessions(state);"
        "CREATE INDEX sessions_head ON sessions(head_snapshot);"
        "CREATE INDEX sessions_source ON sessions(source_snapshot);"
        "CREATE TABLE sandboxes ("
        "  id TEXT PRIMARY KEY NOT NULL,"
        "  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
        "  host_id TEXT NOT NULL,"
        "  runtime TEXT NOT NULL,"
        "  state TEXT NOT NULL CHECK (state IN ('starting','running','dead','destroyed')),"
        "  init_pid INTEGER NOT NULL DEFAULT 0,"
        "  created_ms INTEGER NOT NULL,"
        "  ended_ms INTEGER NOT NULL DEFAULT 0,"
        "  death_reason TEXT"
        ");"
        "CREATE INDEX sandboxes_session ON sandboxes(session_id);"
        "CREATE INDEX sandboxes_host_state ON sandboxes(host_id, state);"
        "CREATE TABLE snapshots ("
        "  id TEXT PRIMARY KEY NOT NULL,"
        "  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
        "  parent_id TEXT,"
        "  store_hash TEXT NOT NULL,"
        "  root_hash TEXT NOT NULL,"
        "  memory_hash TEXT,"
        "  time_ms INTEGER NOT NULL,"
        "  reason TEXT NOT NULL CHECK (reason IN ('rolling','pause','manual','fork','restore')),"
        "  label TEXT,"
        "  bytes_added INTEGER NOT NULL DEFAULT 0,"
        "  logical_size INTEGER NOT NULL DEFAULT 0,"
        "  pinned INTEGER NOT NULL DEFAULT 0"
        ");"
        "CREATE INDEX snapshots_session_time ON snapshots(session_id, time_ms);"
        "CREATE INDEX snapshots_store_hash ON snapshots(store_hash);"
        "CREATE TABLE events ("
        "  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
        "  seq INTEGER NOT NULL,"
        "  time_ms INTEGER NOT NULL,"
        "  kind TEXT NOT NULL,"
        "  payload TEXT NOT NULL,"
        "  UNIQUE (session_id, seq)"
        ");"
        "CREATE TABLE hosts ("
        "  id TEXT PRIMARY KEY NOT NULL,"
        "  address TEXT,"
        "  lease_expires_ms INTEGER NOT NULL,"
        "  updated_ms INTEGER NOT NULL"
        ");"
        "CREATE TABLE tokens ("
        "  hash TEXT PRIMARY KEY NOT NULL,"
        "  tenant TEXT NOT NULL,"
        "  name TEXT,"
        "  created_ms INTEGER NOT NULL,"
        "  revoked_ms INTEGER NOT NULL DEFAULT 0"
        ");"
        "CREATE INDEX tokens_tenant ON tokens(tenant);",
        /* 2: a disk limit on each session's writable layer (0 = none, as every older
         * session had) */
        "ALTER TABLE sessions ADD COLUMN disk_bytes INTEGER NOT NULL DEFAULT 0;",
        /* 3: bounds on the event log (meta_event_bounds): which events a client posted
         * (the kinds the API took: agent, tool_call, note), and per session how many of
         * each and the posted payload bytes, counted for the events already there */
        "ALTER TABLE events ADD COLUMN agent INTEGER NOT NULL DEFAULT 0;"
        "UPDATE events SET agent = 1 WHERE kind IN ('agent', 'tool_call', 'note');"
        "CREATE INDEX events_session_agent ON events(session_id, agent, seq);"
        "ALTER TABLE sessions ADD COLUMN agent_events INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE sessions ADD COLUMN agent_event_bytes INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE sessions ADD COLUMN system_events INTEGER NOT NULL DEFAULT 0;"
        "UPDATE sessions SET"
        "  agent_events = (SELECT count(*) FROM events e WHERE e.session_id = sessions.id AND e.agent = 1),"
        "  agent_event_bytes = (SELECT coalesce(sum(length(CAST(e.payload AS BLOB))), 0) FROM events e"
        "                       WHERE e.session_id = sessions.id AND e.agent = 1),"
        "  system_events = (SELECT count(*) FROM events e WHERE e.session_id = sessions.id AND e.agent = 0);",
        /* 4: a session's network: its egress policy and its exposed ports, each a JSON
         * text the daemon's network room owns (docs/network.md); NULL = as `network` says,
         * no port exposed */
        "ALTER TABLE sessions ADD COLUMN network_policy TEXT;"
        "ALTER TABLE sessions ADD COLUMN ports TEXT;",
        /* 5: a session's lifecycle timeouts (timeout, idle_timeout, their actions,
         * auto_resume, the last activity: docs/sessions.md "Timeouts"), a JSON text the
         * daemon owns; NULL = none */
        "ALTER TABLE sessions ADD COLUMN timeouts TEXT;",
        /* 6: a session's metadata (string keys and values its client gave at create:
         * docs/api.md "metadata"), a JSON object text; NULL = none */
        "ALTER TABLE sessions ADD COLUMN metadata TEXT;",
        /* 7: whether the snapshot is whole in the replication bucket (spaced --s3-*,
         * docs/daemon.md "Replication"); the partial index finds the ones still to push */
        "ALTER TABLE snapshots ADD COLUMN replicated INTEGER NOT NULL DEFAULT 0;"
        "CREATE INDEX snapshots_unreplicated ON snapshots(time_ms) WHERE replicated = 0;",
};
#define SCHEMA_VERSION ((int)ELEMENTSOF(migrations))

#define SES_COLS                                                                                      \
        "id, tenant, state, template, runtime, memory_bytes, cpu_millis, pids, network, env, "     \
        "snapshot_interval_ms, retention_keep, created_ms, updated_ms, sandbox_id, parent_session, " \
        "source_snapshot, head_snapshot, token_hash, error, disk_bytes, network_policy, ports, timeouts, metadata"
#define SBX_COLS "id, session_id, host_id, runtime, state, init_pid, created_ms, ended_ms, death_reason"
#define SNAP_COLS                                                                                     \
        "id, session_id, parent_id, store_hash, root_hash, memory_hash, time_ms, reason, label, "  \
        "bytes_added, logical_size, pinned, replicated"
#define HOST_COLS "id, address, lease_expires_ms, updated_ms"
#define TOK_COLS "hash, tenant, name, created_ms, revoked_ms"

enum st_id {
        ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
        ST_SP_T, ST_RELEASE_T, ST_ROLLBACK_T,
        ST_SP_W, ST_RELEASE_W, ST_ROLLBACK_W,
        ST_SCHEMA_VERSION,
        ST_SES_INSERT, ST_SES_GET, ST_SES_LIST, ST_SES_EXISTS, ST_SES_STATE, ST_SES_SET_STATE,
        ST_SES_SET_SANDBOX, ST_SES_SET_TOKEN, ST_SES_SET_NETWORK, ST_SES_SET_PORTS, ST_SES_SET_TIMEOUTS, ST_SES_SET_HEAD, ST_SES_DELETE, ST_SES_KEEP,
        ST_SES_NEXT_SEQ, ST_SES_LAST_SEQ,
        ST_SBX_INSERT, ST_SBX_GET, ST_SBX_SET_STATE, ST_SBX_SET_PID, ST_SBX_LIST_SES, ST_SBX_LIST_LIVE,
        ST_SNAP_INSERT, ST_SNAP_GET, ST_SNAP_SESSION, ST_SNAP_LIST, ST_SNAP_PIN, ST_SNAP_IS_HEAD,
        ST_SNAP_DELETE, ST_SNAP_EXPIRED, ST_SNAP_HASHES, ST_SNAP_SET_REPL, ST_SNAP_UNREPL, ST_SNAP_UNREPL_COUNT,
        ST_EV_INSERT, ST_EV_LIST, ST_EV_COUNT, ST_EV_OLDEST, ST_EV_DELETE, ST_EV_TENANT_BYTES,
        ST_HOST_UPSERT, ST_HOST_GET, ST_HOST_EXPIRED, ST_HOST_DELETE,
        ST_TOK_INSERT, ST_TOK_GET, ST_TOK_REVOKE, ST_TOK_LIST,
        _ST_MAX,
};

/* One savepoint name per purpose is enough: they nest strictly, and RELEASE/ROLLBACK TO
 * act on the innermost savepoint of that name. t = meta_begin levels, w = one write call. */
static const char *const st_sql[_ST_MAX] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_SP_T] = "SAVEPOINT t",
        [ST_RELEASE_T] = "RELEASE t",
        [ST_ROLLBACK_T] = "ROLLBACK TO t",
        [ST_SP_W] = "SAVEPOINT w",
        [ST_RELEASE_W] = "RELEASE w",
        [ST_ROLLBACK_W] = "ROLLBACK TO w",
        [ST_SCHEMA_VERSION] = "SELECT coalesce(max(version), 0) FROM meta_schema",

        [ST_SES_INSERT] = "INSERT INTO sessions (id, tenant, state, template, runtime, memory_bytes, cpu_millis, "
                          "pids, network, env, snapshot_interval_ms, retention_keep, created_ms, updated_ms, "
                          "parent_session, source_snapshot, token_hash, error, disk_bytes, network_policy, ports, timeouts, metadata) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
        [ST_SES_GET] = "SELECT " SES_COLS " FROM sessions WHERE id = ?1",
        [ST_SES_LIST] = "SELECT " SES_COLS " FROM sessions WHERE (?1 IS NULL OR tenant = ?1) "
                        "AND (?2 IS NULL OR instr(?2, ',' || state || ',') > 0) AND (?3 IS NULL OR id > ?3) "
                        "ORDER BY id LIMIT ?4",
        [ST_SES_EXISTS] = "SELECT 1 FROM sessions WHERE id = ?1",
        [ST_SES_STATE] = "SELECT state FROM sessions WHERE id = ?1",
        [ST_SES_SET_STATE] = "UPDATE sessions SET state = ?2, error = ?3, updated_ms = ?4 WHERE id = ?1",
        [ST_SES_SET_SANDBOX] = "UPDATE sessions SET sandbox_id = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_TOKEN] = "UPDATE sessions SET token_hash = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_NETWORK] = "UPDATE sessions SET network_policy = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_PORTS] = "UPDATE sessions SET ports = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_TIMEOUTS] = "UPDATE sessions SET timeouts = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_HEAD] = "UPDATE sessions SET head_snapshot = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_DELETE] = "DELETE FROM sessions WHERE id = ?1",
        [ST_SES_KEEP] = "SELECT retention_keep FROM sessions WHERE id = ?1",
        [ST_SES_NEXT_SEQ] = "UPDATE sessions SET event_seq = event_seq + 1 WHERE id = ?1 RETURNING event_seq",
        [ST_SES_LAST_SEQ] = "SELECT event_seq FROM sessions WHERE id = ?1",

        [ST_SBX_INSERT] = "INSERT INTO sandboxes (id, session_id, host_id, runtime, state, init_pid, created_ms, "
                          "death_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        [ST_SBX_GET] = "SELECT " SBX_COLS " FROM sandboxes WHERE id = ?1",
        [ST_SBX_SET_STATE] = "UPDATE sandboxes SET state = ?2, death_reason = ?3, ended_ms = CASE WHEN ?2 IN "
                             "('dead', 'destroyed') THEN CASE WHEN ended_ms = 0 THEN ?4 ELSE ended_ms END "
                             "ELSE 0 END WHERE id = ?1",
        [ST_SBX_SET_PID] = "UPDATE sandboxes SET init_pid = ?2 WHERE id = ?1",
        [ST_SBX_LIST_SES] = "SELECT " SBX_COLS " FROM sandboxes WHERE session_id = ?1 ORDER BY created_ms, rowid",
        [ST_SBX_LIST_LIVE] = "SELECT " SBX_COLS " FROM sandboxes WHERE host_id = ?1 AND state IN "
                             "('starting', 'running') ORDER BY created_ms, rowid",

        [ST_SNAP_INSERT] = "INSERT INTO snapshots (id, session_id, parent_id, store_hash, root_hash, memory_hash, "
                           "time_ms, reason, label, bytes_added, logical_size, pinned) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        [ST_SNAP_GET] = "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?1",
        [ST_SNAP_SESSION] = "SELECT session_id FROM snapshots WHERE id = ?1",
        [ST_SNAP_LIST] = "SELECT " SNAP_COLS " FROM snapshots WHERE session_id = ?1 ORDER BY time_ms, rowid",
        [ST_SNAP_PIN] = "UPDATE snapshots SET pinned = ?2 WHERE id = ?1",
        [ST_SNAP_IS_HEAD] = "SELECT id FROM sessions WHERE head_snapshot = ?1 LIMIT 1",
        [ST_SNAP_DELETE] = "DELETE FROM snapshots WHERE id = ?1",
        /* The newest ?2 rolling unpinned snapshots are kept; of the older ones, heads and
         * fork sources are kept too. */
        [ST_SNAP_EXPIRED] = "SELECT x.id FROM (SELECT id, time_ms, rowid AS r FROM snapshots "
                            "WHERE session_id = ?1 AND reason = 'rolling' AND pinned = 0 "
                            "ORDER BY time_ms DESC, rowid DESC LIMIT -1 OFFSET ?2) AS x "
                            "WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE head_snapshot = x.id) "
                            "AND NOT EXISTS (SELECT 1 FROM sessions WHERE source_snapshot = x.id) "
                            "ORDER BY x.time_ms, x.r",
        [ST_SNAP_HASHES] = "SELECT store_hash FROM snapshots UNION SELECT memory_hash FROM snapshots "
                           "WHERE memory_hash IS NOT NULL AND memory_hash != '' ORDER BY 1",
        [ST_SNAP_SET_REPL] = "UPDATE snapshots SET replicated = ?2 WHERE id = ?1",
        [ST_SNAP_UNREPL] = "SELECT " SNAP_COLS " FROM snapshots WHERE replicated = 0 ORDER BY time_ms, rowid LIMIT ?1",
        [ST_SNAP_UNREPL_COUNT] = "SELECT count(*) FROM snapshots WHERE replicated = 0",

        [ST_EV_INSERT] = "INSERT INTO events (session_id, seq, time_ms, kind, payload, agent) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        /* adds to a session's counts (negative: removes); the counts after */
        [ST_EV_COUNT] = "UPDATE sessions SET agent_events = agent_events + ?2, "
                        "agent_event_bytes = agent_event_bytes + ?3, system_events = system_events + ?4 "
                        "WHERE id = ?1 RETURNING agent_events, agent_event_bytes, system_events",
        [ST_EV_OLDEST] = "SELECT seq, length(CAST(payload AS BLOB)) FROM events WHERE session_id = ?1 AND agent = ?2 "
                         "ORDER BY seq LIMIT ?3",
        [ST_EV_DELETE] = "DELETE FROM events WHERE session_id = ?1 AND seq = ?2",
        [ST_EV_TENANT_BYTES] = "SELECT coalesce(sum(agent_event_bytes), 0) FROM sessions "
                               "WHERE tenant = (SELECT tenant FROM sessions WHERE id = ?1)",
        [ST_EV_LIST] = "SELECT seq, time_ms, kind, payload FROM events WHERE session_id = ?1 AND seq > ?2 "
                       "ORDER BY seq LIMIT ?3",

        [ST_HOST_UPSERT] = "INSERT INTO hosts (id, address, lease_expires_ms, updated_ms) VALUES (?1, ?2, ?3, ?4) "
                           "ON CONFLICT (id) DO UPDATE SET address = excluded.address, "
                           "lease_expires_ms = excluded.lease_expires_ms, updated_ms = excluded.updated_ms",
        [ST_HOST_GET] = "SELECT " HOST_COLS " FROM hosts WHERE id = ?1",
        [ST_HOST_EXPIRED] = "SELECT " HOST_COLS " FROM hosts "
                            "WHERE lease_expires_ms < ?1 ORDER BY id",
        [ST_HOST_DELETE] = "DELETE FROM hosts WHERE id = ?1",

        [ST_TOK_INSERT] = "INSERT INTO tokens (hash, tenant, name, created_ms) VALUES (?1, ?2, ?3, ?4)",
        [ST_TOK_GET] = "SELECT " TOK_COLS " FROM tokens WHERE hash = ?1",
        [ST_TOK_REVOKE] = "UPDATE tokens SET revoked_ms = ?2 WHERE hash = ?1 AND revoked_ms = 0",
        [ST_TOK_LIST] = "SELECT " TOK_COLS " FROM tokens ORDER BY created_ms, hash",
};

struct sq {
        sqlite3 *db;
        sqlite3_stmt *st[_ST_MAX];
};

static sqlite3 *db_of(struct meta *m) {
        return ((struct sq *)m->be)->db;
}

/* SQLite result code → errno, with SQLite's message kept for meta_last_error. */
static int sq_error(struct meta *m, int rc, const char *what) {
        int r;
        switch (rc & 0xff) {
        case SQLITE_CONSTRAINT:
                if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
                        r = -EEXIST;
                else if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
                        r = -ENOENT;
                else
                        r = -EINVAL;
                break;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                r = -EBUSY;
                break;
        case SQLITE_NOMEM:
                r = -ENOMEM;
                break;
        case SQLITE_FULL:
                r = -ENOSPC;
                break;
        case SQLITE_TOOBIG:
                r = -E2BIG;
                break;
        case SQLITE_NOTADB:
                r = -EBADMSG;
                break;
        default:
                r = -EIO;
        }
        sqlite3 *db = m->be ? db_of(m) : NULL;
        return meta_error(m, r, "sqlite: %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

static void stmt_resetp(sqlite3_stmt **st) {
        if (*st) {
                sqlite3_reset(*st);
                sqlite3_clear_bindings(*st);
        }
}
#define _cleanup_stmt_ _cleanup_(stmt_resetp)

static int prep(struct meta *m, enum st_id id, sqlite3_stmt **ret) {
        struct sq *q = m->be;
        if (!q->st[id]) {
                int rc = sqlite3_prepare_v3(q->db, st_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &q->st[id], NULL);
                if (rc != SQLITE_OK)
                        return sq_error(m, rc, "prepare");
        }
        *ret = q->st[id];
        return 0;
}

/* 1 = a row, 0 = done, < 0 = error. */
static int step(struct meta *m, sqlite3_stmt *st) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return sq_error(m, rc, "step");
}

/* One statement parameter, bound to ?1, ?2, … in list order. */
struct param {
        enum { PARAM_TEXT, PARAM_OPT, PARAM_INT } kind;
        const char *s; /* TEXT, OPT */
        int len;       /* TEXT: bytes, -1 = up to the NUL */
        int64_t i;     /* INT */
};
#define P_TEXT(x) { .kind = PARAM_TEXT, .s = (x), .len = -1 }
#define P_TEXTN(x, n) { .kind = PARAM_TEXT, .s = (x), .len = (int)(n) }
#define P_OPT(x) { .kind = PARAM_OPT, .s = (x) } /* "" and NULL are stored as NULL */
#define P_INT(x) { .kind = PARAM_INT, .i = (int64_t)(x) }
/* A parameter list as the (array, count) argument pair the helpers below take. */
#define PARAMS(...) (const struct param[]){ __VA_ARGS__ }, ELEMENTSOF(((const struct param[]){ __VA_ARGS__ }))

static int bind_params(struct meta *m, sqlite3_stmt *st, const struct param *p, size_t n) {
        for (size_t i = 0; i < n; i++) {
                int k = (int)i + 1, rc;
                if (p[i].kind == PARAM_INT)
                        rc = sqlite3_bind_int64(st, k, p[i].i);
                else if (p[i].kind == PARAM_OPT && !(p[i].s && p[i].s[0]))
                        rc = sqlite3_bind_null(st, k);
                else
                        rc = sqlite3_bind_text(st, k, p[i].s, p[i].kind == PARAM_TEXT ? p[i].len : -1, SQLITE_STATIC);
                if (rc != SQLITE_OK)
                        return sq_error(m, rc, "bind");
        }
        return 0;
}

/* Prepares sid with its n parameters bound; on failure nothing stays bound. */
static int prep_bind(struct meta *m, enum st_id sid, const struct param *p, size_t n, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, sid, &st);
        if (r < 0)
                return r;
        r = bind_params(m, st, p, n);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(st);
        return 0;
}

/* Runs a statement that returns no row (or whose rows do not matter). */
static int run_params(struct meta *m, enum st_id sid, const struct param *p, size_t n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep_bind(m, sid, p, n, &st);
        if (r < 0)
                return r;
        while ((r = step(m, st)) > 0)
                ;
        return r;
}

static int run(struct meta *m, enum st_id sid) {
        return run_params(m, sid, NULL, 0);
}

/* Copies a text column into a fixed field; a value that does not fit means the file was
 * written by something else than this code. */
static int col_str(struct meta *m, sqlite3_stmt *st, int i, char *buf, size_t size) {
        const unsigned char *t = sqlite3_column_text(st, i);
        int n = sqlite3_column_bytes(st, i);
        if (!t) {
                buf[0] = 0;
                return 0;
        }
        if ((size_t)n >= size)
                return meta_error(m, -EUCLEAN, "sqlite: column %s holds %d bytes, more than %zu",
                                  sqlite3_column_name(st, i), n, size - 1);
        memcpy(buf, t, (size_t)n);
        buf[n] = 0;
        return 0;
}

static int col_dup(struct meta *m, sqlite3_stmt *st, int i, char **ret) {
        const unsigned char *t = sqlite3_column_text(st, i);
        if (!t) {
                *ret = NULL;
                return 0;
        }
        *ret = strndup((const char *)t, (size_t)sqlite3_column_bytes(st, i));
        return *ret ? 0 : meta_error(m, -ENOMEM, "out of memory");
}

/* Where one result column lands in a record. A table of these, one per column in SELECT
 * order, decodes a record; BY_HAND columns (names of enum values) are left to its reader. */
struct column {
        enum { COL_BY_HAND, COL_TEXT, COL_DUP, COL_INT, COL_BOOL } kind;
        size_t off, size; /* COL_INT: a 4- or 8-byte integer field */
};
#define COLUMN(kind, type, field) { kind, offsetof(type, field), sizeof(((type *)0)->field) }
#define COL_HAND { COL_BY_HAND, 0, 0 }

/* Fills rec's fields from the current row; COL_DUP fields it set stay set on failure. */
static int read_columns(struct meta *m, sqlite3_stmt *st, const struct column *c, size_t n, void *rec) {
        for (size_t i = 0; i < n; i++) {
                char *f = (char *)rec + c[i].off;
                int k = (int)i, r = 0;
                switch (c[i].kind) {
                case COL_BY_HAND:
                        break;
                case COL_TEXT:
                        r = col_str(m, st, k, f, c[i].size);
                        break;
                case COL_DUP:
                        r = col_dup(m, st, k, (char **)(void *)f);
                        break;
                case COL_BOOL:
                        *(bool *)(void *)f = sqlite3_column_int64(st, k) != 0;
                        break;
                case COL_INT: {
                        int64_t v = sqlite3_column_int64(st, k);
                        uint32_t v32 = (uint32_t)v; /* the same bits for an int32_t field */
                        if (c[i].size == sizeof v)
                                memcpy(f, &v, sizeof v);
                        else
                                memcpy(f, &v32, sizeof v32);
                        break;
                }
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Grows a list by one element, zeroed. */
static void *grow(struct meta *m, void **v, size_t *cap, size_t n, size_t elsz) {
        if (array_reserve(v, cap, n + 1, elsz, 16) < 0) {
                meta_error(m, -ENOMEM, "out of memory");
                return NULL;
        }
        void *e = (char *)*v + n * elsz;
        memset(e, 0, elsz);
        return e;
}

/* ---- transactions ---- */

/* Enters the transaction of one write call. */
static int w_begin(struct meta *m) {
        if (m->tx_depth == 0)
                return run(m, ST_BEGIN);
        if (sqlite3_get_autocommit(db_of(m)))
                return meta_error(m, -EIO, "sqlite: the open transaction was aborted by an earlier error");
        return run(m, ST_SP_W);
}

/* Leaves it: commits on r >= 0, undoes the call on r < 0 (keeping r and its message). */
static int w_end(struct meta *m, int r) {
        if (r >= 0) {
                int k = run(m, m->tx_depth == 0 ? ST_COMMIT : ST_RELEASE_W);
                if (k >= 0)
                        return r;
                r = k;
        }
        char saved[META_ERR_SIZE];
        memcpy(saved, m->err, sizeof saved);
        if (!sqlite3_get_autocommit(db_of(m))) {
                if (m->tx_depth == 0)
                        (void)run(m, ST_ROLLBACK);
                else if (run(m, ST_ROLLBACK_W) >= 0)
                        (void)run(m, ST_RELEASE_W);
        }
        memcpy(m->err, saved, sizeof saved);
        return r;
}

static int sq_begin(struct meta *m, unsigned depth) {
        if (depth == 1)
                return run(m, ST_BEGIN);
        if (sqlite3_get_autocommit(db_of(m)))
                return meta_error(m, -EIO, "sqlite: the open transaction was aborted by an earlier error");
        return run(m, ST_SP_T);
}

static int sq_commit(struct meta *m, unsigned depth) {
        if (sqlite3_get_autocommit(db_of(m)))
                return meta_error(m, -EIO, "sqlite: the transaction was aborted by an earlier error");
        int r = run(m, depth == 1 ? ST_COMMIT : ST_RELEASE_T);
        if (r < 0 && depth == 1 && !sqlite3_get_autocommit(db_of(m))) {
                char saved[META_ERR_SIZE];
                memcpy(saved, m->err, sizeof saved);
                (void)run(m, ST_ROLLBACK);
                memcpy(m->err, saved, sizeof saved);
        }
        return r;
}

static int exec_sql(struct meta *m, const char *sql, const char *what);

static int sq_set_relaxed(struct meta *m, bool relaxed) {
        /* Only the sync of the WAL changes; FULL is what open set. */
        return exec_sql(m, relaxed ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL", "synchronous");
}

static int sq_rollback(struct meta *m, unsigned depth) {
        if (sqlite3_get_autocommit(db_of(m)))
                return 0; /* SQLite already rolled it back */
        if (depth == 1)
                return run(m, ST_ROLLBACK);
        int r = run(m, ST_ROLLBACK_T);
        if (r < 0)
                return r;
        return run(m, ST_RELEASE_T);
}

/* ---- open, close, schema ---- */

static int exec_sql(struct meta *m, const char *sql, const char *what) {
        char *msg = NULL;
        int rc = sqlite3_exec(db_of(m), sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
                int r = sq_error(m, sqlite3_extended_errcode(db_of(m)), what);
                if (msg)
                        meta_error(m, r, "sqlite: %s: %s", what, msg);
                sqlite3_free(msg);
                return r;
        }
        return 0;
}

/* A one-row, one-column pragma's text answer. */
static int pragma_text(struct meta *m, const char *sql, char *buf, size_t size) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db_of(m), sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sq_error(m, rc, sql);
        int r = step(m, st);
        if (r > 0)
                r = col_str(m, st, 0, buf, size);
        else if (r == 0)
                buf[0] = 0;
        sqlite3_finalize(st);
        return r;
}

static int sq_schema_version(struct meta *m) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SCHEMA_VERSION, &st);
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        return r > 0 ? sqlite3_column_int(st, 0) : 0;
}

static int migrate(struct meta *m) {
        int r = run(m, ST_BEGIN);
        if (r < 0)
                return r;
        r = exec_sql(m, "CREATE TABLE IF NOT EXISTS meta_schema (version INTEGER PRIMARY KEY, "
                        "applied_ms INTEGER NOT NULL)", "schema table");
        int v = r < 0 ? r : sq_schema_version(m);
        if (v < 0)
                r = v;
        else if (v > SCHEMA_VERSION)
                r = meta_error(m, -EPROTO, "sqlite: schema version %d is newer than this program's %d", v,
                               SCHEMA_VERSION);
        for (; r >= 0 && v < SCHEMA_VERSION; v++) {
                char what[32], sql[128];
                snprintf(what, sizeof what, "migration %d", v + 1);
                r = exec_sql(m, migrations[v], what);
                if (r >= 0) {
                        snprintf(sql, sizeof sql, "INSERT INTO meta_schema (version, applied_ms) VALUES (%d, %lld)",
                                 v + 1, (long long)meta_now_ms());
                        r = exec_sql(m, sql, what);
                }
        }
        if (r >= 0)
                r = run(m, ST_COMMIT);
        if (r < 0 && !sqlite3_get_autocommit(db_of(m))) {
                char saved[META_ERR_SIZE];
                memcpy(saved, m->err, sizeof saved);
                (void)run(m, ST_ROLLBACK);
                memcpy(m->err, saved, sizeof saved);
        }
        return r;
}

/* Creates the file ourselves, 0600 (it holds token hashes), and makes its directory entry
 * durable: SQLite syncs the file's contents, not the directory that names it. */
static int create_file(struct meta *m, const char *path) {
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                if (errno == EEXIST)
                        return 0;
                return meta_error(m, -errno, "create %s: %m", path);
        }
        if (fsync(fd) < 0)
                return meta_error(m, -errno, "fsync %s: %m", path);
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        _cleanup_close_ int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0)
                return meta_error(m, -errno, "fsync the directory of %s: %m", path);
        return 0;
}

static void sq_close(struct meta *m) {
        struct sq *q = m->be;
        if (!q)
                return;
        for (size_t i = 0; i < _ST_MAX; i++)
                sqlite3_finalize(q->st[i]);
        sqlite3_close_v2(q->db);
        free(q);
        m->be = NULL;
}

static int sq_open(struct meta *m, const char *path, const struct meta_opts *o) {
        int r = create_file(m, path);
        if (r < 0)
                return r;
        struct sq *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        m->be = q;
        int rc = sqlite3_open_v2(path, &q->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
        if (rc != SQLITE_OK) {
                r = q->db ? sq_error(m, rc, "open") : meta_error(m, -ENOMEM, "sqlite: open: out of memory");
                sq_close(m);
                return r;
        }
        sqlite3_extended_result_codes(q->db, 1);
        sqlite3_busy_timeout(q->db, o && o->busy_timeout_ms ? (int)MIN(o->busy_timeout_ms, (unsigned)INT32_MAX)
                                                            : 5000);
        char mode[16];
        r = pragma_text(m, "PRAGMA journal_mode=WAL", mode, sizeof mode);
        if (r >= 0 && strcmp(mode, "wal") != 0)
                r = meta_error(m, -EIO, "sqlite: journal_mode is %s, not wal", mode);
        if (r >= 0)
                r = exec_sql(m, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; "
                                "PRAGMA journal_size_limit=67108864", "pragmas");
        char fk[8];
        if (r >= 0)
                r = pragma_text(m, "PRAGMA foreign_keys", fk, sizeof fk);
        if (r >= 0 && strcmp(fk, "1") != 0)
                r = meta_error(m, -EIO, "sqlite: this SQLite cannot enforce foreign keys");
        if (r >= 0)
                r = migrate(m);
        if (r < 0) {
                sq_close(m);
                return r;
        }
        return 0;
}

static int sq_check(struct meta *m) {
        char res[META_ERR_SIZE];
        int r = pragma_text(m, "PRAGMA integrity_check(1)", res, sizeof res);
        if (r < 0)
                return r;
        if (strcmp(res, "ok") != 0)
                return meta_error(m, -EUCLEAN, "sqlite: integrity_check: %s", res);
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db_of(m), "PRAGMA foreign_key_check", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sq_error(m, rc, "foreign_key_check");
        r = step(m, st);
        if (r > 0)
                r = meta_error(m, -EUCLEAN, "sqlite: foreign_key_check: table %s row %lld refers to a missing %s",
                               (const char *)sqlite3_column_text(st, 0), (long long)sqlite3_column_int64(st, 1),
                               (const char *)sqlite3_column_text(st, 2));
        sqlite3_finalize(st);
        return r;
}

/* ---- helpers shared by several ops ---- */

/* Runs one write call (an expression) in the transaction w_begin opens and w_end closes. */
#define WRITE(m, call)                                  \
        ({                                              \
                int _w = w_begin(m);                    \
                _w < 0 ? _w : w_end((m), (call));       \
        })

/* Runs sid with key as ?1 up to its first row: 1, with *ret on that row, or 0 when there is
 * none. */
static int fetch_row(struct meta *m, enum st_id sid, const char *key, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep_bind(m, sid, PARAMS(P_TEXT(key)), &st);
        if (r < 0)
                return r;
        r = step(m, st);
        if (r <= 0)
                return r;
        *ret = TAKE_PTR(st);
        return 1;
}

/* The same, but no row is -ENOENT ("no such <what>: <key>"). */
static int fetch_one(struct meta *m, enum st_id sid, const char *key, const char *what, sqlite3_stmt **ret) {
        int r = fetch_row(m, sid, key, ret);
        return r == 0 ? meta_error(m, -ENOENT, "no such %s: %s", what, key) : r;
}

/* 0 if a row matches the single ?1 parameter, -ENOENT (with "no such <what>") if none. */
static int exists(struct meta *m, enum st_id id, const char *key, const char *what) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        return MIN(fetch_one(m, id, key, what, &st), 0);
}

/* Runs an UPDATE or DELETE; -ENOENT ("no such <what>: <key>") if it changed no row. */
static int change(struct meta *m, enum st_id sid, const char *what, const char *key, const struct param *p,
                  size_t n) {
        int r = run_params(m, sid, p, n);
        if (r < 0)
                return r;
        if (sqlite3_changes(db_of(m)) == 0)
                return meta_error(m, -ENOENT, "no such %s: %s", what, key);
        return 0;
}

/* Runs an INSERT; -EEXIST ("<what> <key> exists") when the key is taken. key may be NULL. */
static int insert(struct meta *m, enum st_id sid, const char *what, const char *key, const struct param *p,
                  size_t n) {
        int r = run_params(m, sid, p, n);
        if (r == -EEXIST && key)
                meta_error(m, r, "%s %s exists", what, key);
        else if (r == -EEXIST)
                meta_error(m, r, "%s exists", what);
        return r;
}

static int delete_one(struct meta *m, enum st_id sid, const char *key, const char *what) {
        return change(m, sid, what, key, PARAMS(P_TEXT(key)));
}

/* Decodes the one row whose key is ?1 into *ret; -ENOENT ("no such <what>: <key>") if none. */
static int get_one(struct meta *m, enum st_id sid, const char *key, const char *what,
                   int (*decode)(struct meta *, sqlite3_stmt *, void *), void *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = fetch_one(m, sid, key, what, &st);
        return r < 0 ? r : decode(m, st, ret);
}

/* Runs sid and decodes every row into a new array of elsz-byte records. On failure,
 * free_all (NULL: free) releases the records read so far and the array. */
static int select_rows(struct meta *m, enum st_id sid, const struct param *p, size_t np, size_t elsz,
                       int (*decode)(struct meta *, sqlite3_stmt *, void *), void (*free_all)(void *, size_t),
                       void **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep_bind(m, sid, p, np, &st);
        if (r < 0)
                return r;
        void *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                void *e = grow(m, &v, &cap, n, elsz);
                if (!e) {
                        r = -ENOMEM;
                        break;
                }
                r = decode(m, st, e);
                if (r < 0)
                        break;
                n++;
        }
        if (r < 0) {
                if (free_all)
                        free_all(v, n);
                else
                        free(v);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- sessions ---- */

/* In SES_COLS order. */
static const struct column session_cols[] = {
        COLUMN(COL_TEXT, struct meta_session, id),
        COLUMN(COL_TEXT, struct meta_session, tenant),
        COL_HAND, /* state */
        COLUMN(COL_TEXT, struct meta_session, template_name),
        COLUMN(COL_TEXT, struct meta_session, runtime),
        COLUMN(COL_INT, struct meta_session, limits.memory_bytes),
        COLUMN(COL_INT, struct meta_session, limits.cpu_millis),
        COLUMN(COL_INT, struct meta_session, limits.pids),
        COLUMN(COL_BOOL, struct meta_session, network),
        COLUMN(COL_DUP, struct meta_session, env_json),
        COLUMN(COL_INT, struct meta_session, snapshot_interval_ms),
        COLUMN(COL_INT, struct meta_session, retention_keep),
        COLUMN(COL_INT, struct meta_session, created_ms),
        COLUMN(COL_INT, struct meta_session, updated_ms),
        COLUMN(COL_TEXT, struct meta_session, sandbox_id),
        COLUMN(COL_TEXT, struct meta_session, parent_session),
        COLUMN(COL_TEXT, struct meta_session, source_snapshot),
        COLUMN(COL_TEXT, struct meta_session, head_snapshot),
        COLUMN(COL_TEXT, struct meta_session, token_hash),
        COLUMN(COL_DUP, struct meta_session, error),
        COLUMN(COL_INT, struct meta_session, limits.disk_bytes),
        COLUMN(COL_DUP, struct meta_session, network_json),
        COLUMN(COL_DUP, struct meta_session, ports_json),
        COLUMN(COL_DUP, struct meta_session, timeouts_json),
        COLUMN(COL_DUP, struct meta_session, metadata_json),
};

static int read_session(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_session *s = ret;
        *s = (struct meta_session){ 0 };
        char state[16];
        int r = read_columns(m, st, session_cols, ELEMENTSOF(session_cols), s);
        r = r ?: col_str(m, st, 2, state, sizeof state);
        if (r >= 0 && meta_session_state_from_name(state, &s->state) < 0)
                r = meta_error(m, -EUCLEAN, "sqlite: session %s has unknown state '%s'", s->id, state);
        if (r < 0)
                meta_session_clear(s);
        return r;
}

static void sessions_free(void *v, size_t n) {
        meta_sessions_free(v, n);
}

static int session_create_tx(struct meta *m, const struct meta_session *s, int64_t now) {
        int r;
        if (s->parent_session[0] && (r = exists(m, ST_SES_EXISTS, s->parent_session, "parent session")) < 0)
                return r;
        if (s->source_snapshot[0] && (r = exists(m, ST_SNAP_SESSION, s->source_snapshot, "source snapshot")) < 0)
                return r;
        return insert(m, ST_SES_INSERT, "session", s->id,
                      PARAMS(P_TEXT(s->id), P_TEXT(s->tenant), P_TEXT(meta_session_state_name(s->state)),
                             P_OPT(s->template_name), P_TEXT(s->runtime), P_INT(s->limits.memory_bytes),
                             P_INT(s->limits.cpu_millis), P_INT(s->limits.pids), P_INT(s->network),
                             P_OPT(s->env_json), P_INT(s->snapshot_interval_ms), P_INT(s->retention_keep),
                             P_INT(s->created_ms ? s->created_ms : now), P_OPT(s->parent_session),
                             P_OPT(s->source_snapshot), P_OPT(s->token_hash), P_OPT(s->error),
                             P_INT(s->limits.disk_bytes), P_OPT(s->network_json), P_OPT(s->ports_json),
                             P_OPT(s->timeouts_json), P_OPT(s->metadata_json)));
}

static int sq_session_create(struct meta *m, const struct meta_session *s, int64_t now) {
        return WRITE(m, session_create_tx(m, s, now));
}

static int sq_session_get(struct meta *m, const char *id, struct meta_session *ret) {
        return get_one(m, ST_SES_GET, id, "session", read_session, ret);
}

static int sq_session_list(struct meta *m, const struct meta_session_filter *f, struct meta_session **ret,
                           size_t *ret_n) {
        char states[128] = "";
        if (f->state_mask) {
                size_t o = 0;
                states[o++] = ',';
                for (unsigned i = 0; i < _META_SESSION_STATE_MAX; i++)
                        if (f->state_mask & META_STATE_BIT(i))
                                o += (size_t)snprintf(states + o, sizeof states - o, "%s,",
                                                      meta_session_state_name(i));
        }
        return select_rows(m, ST_SES_LIST,
                           PARAMS(P_OPT(f->tenant), P_OPT(states), P_OPT(f->after_id),
                                  P_INT(f->limit ? (int64_t)f->limit : -1)),
                           sizeof **ret, read_session, sessions_free, (void **)ret, ret_n);
}

static int session_set_state_tx(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                                const char *error, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = fetch_one(m, ST_SES_STATE, id, "session", &st);
        if (r < 0)
                return r;
        enum meta_session_state cur;
        if (meta_session_state_from_name((const char *)sqlite3_column_text(st, 0), &cur) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: session %s has an unknown state", id);
        stmt_resetp(&st);
        if (cur == META_SESSION_TERMINATED && to != META_SESSION_TERMINATED)
                return meta_error(m, -EINVAL, "session %s is terminated", id);
        if (from_mask && !(from_mask & META_STATE_BIT(cur)))
                return meta_error(m, -EBUSY, "session %s is %s", id, meta_session_state_name(cur));
        return change(m, ST_SES_SET_STATE, "session", id,
                      PARAMS(P_TEXT(id), P_TEXT(meta_session_state_name(to)), P_OPT(error), P_INT(now)));
}

static int sq_session_set_state(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                                const char *error, int64_t now) {
        return WRITE(m, session_set_state_tx(m, id, from_mask, to, error, now));
}

/* One UPDATE ... WHERE id = ?1 with ?2 = value, ?3 = now. */
static int update_one(struct meta *m, enum st_id sid, const char *id, const char *value, int64_t now) {
        return change(m, sid, "session", id, PARAMS(P_TEXT(id), P_OPT(value), P_INT(now)));
}

static int sq_session_set_field(struct meta *m, const char *id, enum meta_session_field f, const char *value,
                                int64_t now) {
        static const enum st_id st[] = {
                [META_FIELD_SANDBOX] = ST_SES_SET_SANDBOX,
                [META_FIELD_TOKEN_HASH] = ST_SES_SET_TOKEN,
                [META_FIELD_NETWORK] = ST_SES_SET_NETWORK,
                [META_FIELD_PORTS] = ST_SES_SET_PORTS,
                [META_FIELD_TIMEOUTS] = ST_SES_SET_TIMEOUTS,
        };
        return WRITE(m, update_one(m, st[f], id, value, now));
}

static int session_set_head_tx(struct meta *m, const char *id, const char *snap, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = fetch_one(m, ST_SNAP_SESSION, snap, "snapshot", &st);
        if (r < 0)
                return r;
        const char *owner = (const char *)sqlite3_column_text(st, 0);
        if (!owner || strcmp(owner, id) != 0)
                return meta_error(m, -EXDEV, "snapshot %s belongs to session %s", snap, owner ? owner : "?");
        stmt_resetp(&st);
        return update_one(m, ST_SES_SET_HEAD, id, snap, now);
}

static int sq_session_set_head(struct meta *m, const char *id, const char *snap, int64_t now) {
        return WRITE(m, session_set_head_tx(m, id, snap, now));
}

static int sq_session_delete(struct meta *m, const char *id) {
        return WRITE(m, delete_one(m, ST_SES_DELETE, id, "session"));
}

/* ---- sandboxes ---- */

/* In SBX_COLS order. */
static const struct column sandbox_cols[] = {
        COLUMN(COL_TEXT, struct meta_sandbox, id),
        COLUMN(COL_TEXT, struct meta_sandbox, session_id),
        COLUMN(COL_TEXT, struct meta_sandbox, host_id),
        COLUMN(COL_TEXT, struct meta_sandbox, runtime),
        COL_HAND, /* state */
        COLUMN(COL_INT, struct meta_sandbox, init_pid),
        COLUMN(COL_INT, struct meta_sandbox, created_ms),
        COLUMN(COL_INT, struct meta_sandbox, ended_ms),
        COLUMN(COL_TEXT, struct meta_sandbox, death_reason),
};

static int read_sandbox(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_sandbox *b = ret;
        *b = (struct meta_sandbox){ 0 };
        char state[16];
        int r = read_columns(m, st, sandbox_cols, ELEMENTSOF(sandbox_cols), b);
        r = r ?: col_str(m, st, 4, state, sizeof state);
        if (r < 0)
                return r;
        if (meta_sandbox_state_from_name(state, &b->state) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: sandbox %s has unknown state '%s'", b->id, state);
        return 0;
}

static int sandbox_create_tx(struct meta *m, const struct meta_sandbox *b, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, b->session_id, "session");
        if (r < 0)
                return r;
        return insert(m, ST_SBX_INSERT, "sandbox", b->id,
                      PARAMS(P_TEXT(b->id), P_TEXT(b->session_id), P_TEXT(b->host_id), P_TEXT(b->runtime),
                             P_TEXT(meta_sandbox_state_name(b->state)), P_INT(b->init_pid),
                             P_INT(b->created_ms ? b->created_ms : now), P_OPT(b->death_reason)));
}

static int sq_sandbox_create(struct meta *m, const struct meta_sandbox *b, int64_t now) {
        return WRITE(m, sandbox_create_tx(m, b, now));
}

static int sq_sandbox_get(struct meta *m, const char *id, struct meta_sandbox *ret) {
        return get_one(m, ST_SBX_GET, id, "sandbox", read_sandbox, ret);
}

static int sq_sandbox_set_state(struct meta *m, const char *id, enum meta_sandbox_state s, const char *reason,
                                int64_t now) {
        return WRITE(m, change(m, ST_SBX_SET_STATE, "sandbox", id,
                               PARAMS(P_TEXT(id), P_TEXT(meta_sandbox_state_name(s)), P_OPT(reason), P_INT(now))));
}

static int sq_sandbox_set_pid(struct meta *m, const char *id, int32_t pid) {
        return WRITE(m, change(m, ST_SBX_SET_PID, "sandbox", id, PARAMS(P_TEXT(id), P_INT(pid))));
}

static int sq_sandbox_list(struct meta *m, const char *session_id, const char *host_id, struct meta_sandbox **ret,
                           size_t *ret_n) {
        int r;
        if (session_id && (r = exists(m, ST_SES_EXISTS, session_id, "session")) < 0)
                return r;
        return select_rows(m, session_id ? ST_SBX_LIST_SES : ST_SBX_LIST_LIVE,
                           PARAMS(P_TEXT(session_id ? session_id : host_id)), sizeof **ret, read_sandbox, NULL,
                           (void **)ret, ret_n);
}

/* ---- snapshots ---- */

/* In SNAP_COLS order. */
static const struct column snapshot_cols[] = {
        COLUMN(COL_TEXT, struct meta_snapshot, id),
        COLUMN(COL_TEXT, struct meta_snapshot, session_id),
        COLUMN(COL_TEXT, struct meta_snapshot, parent_id),
        COLUMN(COL_TEXT, struct meta_snapshot, store_hash),
        COLUMN(COL_TEXT, struct meta_snapshot, root_hash),
        COLUMN(COL_TEXT, struct meta_snapshot, memory_hash),
        COLUMN(COL_INT, struct meta_snapshot, time_ms),
        COL_HAND, /* reason */
        COLUMN(COL_TEXT, struct meta_snapshot, label),
        COLUMN(COL_INT, struct meta_snapshot, bytes_added),
        COLUMN(COL_INT, struct meta_snapshot, logical_size),
        COLUMN(COL_BOOL, struct meta_snapshot, pinned),
        COLUMN(COL_BOOL, struct meta_snapshot, replicated),
};

static int read_snapshot(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_snapshot *s = ret;
        *s = (struct meta_snapshot){ 0 };
        char reason[16];
        int r = read_columns(m, st, snapshot_cols, ELEMENTSOF(snapshot_cols), s);
        r = r ?: col_str(m, st, 7, reason, sizeof reason);
        if (r < 0)
                return r;
        if (meta_snapshot_reason_from_name(reason, &s->reason) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: snapshot %s has unknown reason '%s'", s->id, reason);
        return 0;
}

static int snapshot_add_tx(struct meta *m, const struct meta_snapshot *s, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, s->session_id, "session");
        if (r < 0)
                return r;
        return insert(m, ST_SNAP_INSERT, "snapshot", s->id,
                      PARAMS(P_TEXT(s->id), P_TEXT(s->session_id), P_OPT(s->parent_id), P_TEXT(s->store_hash),
                             P_TEXT(s->root_hash), P_OPT(s->memory_hash), P_INT(s->time_ms ? s->time_ms : now),
                             P_TEXT(meta_snapshot_reason_name(s->reason)), P_OPT(s->label),
                             P_INT(s->bytes_added), P_INT(s->logical_size), P_INT(s->pinned)));
}

static int sq_snapshot_add(struct meta *m, const struct meta_snapshot *s, int64_t now) {
        return WRITE(m, snapshot_add_tx(m, s, now));
}

static int sq_snapshot_get(struct meta *m, const char *id, struct meta_snapshot *ret) {
        return get_one(m, ST_SNAP_GET, id, "snapshot", read_snapshot, ret);
}

static int sq_snapshot_list(struct meta *m, const char *session_id, struct meta_snapshot **ret, size_t *ret_n) {
        int r = exists(m, ST_SES_EXISTS, session_id, "session");
        if (r < 0)
                return r;
        return select_rows(m, ST_SNAP_LIST, PARAMS(P_TEXT(session_id)), sizeof **ret, read_snapshot, NULL,
                           (void **)ret, ret_n);
}

static int sq_snapshot_set_pinned(struct meta *m, const char *id, bool pinned) {
        return WRITE(m, change(m, ST_SNAP_PIN, "snapshot", id, PARAMS(P_TEXT(id), P_INT(pinned))));
}

static int snapshot_delete_tx(struct meta *m, const char *id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = fetch_row(m, ST_SNAP_IS_HEAD, id, &st);
        if (r < 0)
                return r;
        if (r > 0)
                return meta_error(m, -EBUSY, "snapshot %s is the head of session %s", id,
                                  (const char *)sqlite3_column_text(st, 0));
        return delete_one(m, ST_SNAP_DELETE, id, "snapshot");
}

static int sq_snapshot_delete(struct meta *m, const char *id) {
        return WRITE(m, snapshot_delete_tx(m, id));
}

static int sq_snapshot_set_replicated(struct meta *m, const char *id, bool replicated) {
        return WRITE(m, change(m, ST_SNAP_SET_REPL, "snapshot", id, PARAMS(P_TEXT(id), P_INT(replicated))));
}

static int sq_snapshot_unreplicated(struct meta *m, unsigned limit, struct meta_snapshot **ret, size_t *ret_n) {
        return select_rows(m, ST_SNAP_UNREPL, PARAMS(P_INT(limit)), sizeof **ret, read_snapshot, NULL, (void **)ret,
                           ret_n);
}

static int sq_snapshot_count_unreplicated(struct meta *m, uint64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep_bind(m, ST_SNAP_UNREPL_COUNT, NULL, 0, &st);
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -EIO, "sqlite: count(*) gave no row");
        *ret = (uint64_t)sqlite3_column_int64(st, 0);
        return 0;
}

static int read_id(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_id *e = ret;
        return col_str(m, st, 0, e->s, sizeof e->s);
}

static int sq_snapshot_expired(struct meta *m, const char *session_id, struct meta_id **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *k = NULL;
        int r = fetch_one(m, ST_SES_KEEP, session_id, "session", &k);
        if (r < 0)
                return r;
        int64_t keep = sqlite3_column_int64(k, 0);
        stmt_resetp(&k);
        return select_rows(m, ST_SNAP_EXPIRED, PARAMS(P_TEXT(session_id), P_INT(keep)), sizeof **ret, read_id,
                           NULL, (void **)ret, ret_n);
}

static int read_hash(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_hash *e = ret;
        return col_str(m, st, 0, e->hex, sizeof e->hex);
}

static int sq_snapshot_live_hashes(struct meta *m, struct meta_hash **ret, size_t *ret_n) {
        return select_rows(m, ST_SNAP_HASHES, NULL, 0, sizeof **ret, read_hash, NULL, (void **)ret, ret_n);
}

/* ---- events ---- */

/* The session's counts after adding d_agent events of d_bytes and d_system events. */
struct ev_counts {
        int64_t agent, bytes, system;
};

static int event_count(struct meta *m, const char *session_id, int64_t d_agent, int64_t d_bytes, int64_t d_system,
                       struct ev_counts *ret) {
        _cleanup_stmt_ sqlite3_stmt *q = NULL;
        int r = prep_bind(m, ST_EV_COUNT, PARAMS(P_TEXT(session_id), P_INT(d_agent), P_INT(d_bytes), P_INT(d_system)),
                          &q);
        if (r < 0)
                return r;
        if ((r = step(m, q)) <= 0)
                return r < 0 ? r : meta_error(m, -ENOENT, "no such session: %s", session_id);
        *ret = (struct ev_counts){ sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2) };
        while ((r = step(m, q)) > 0)
                ;
        return r;
}

static bool ev_over(const struct meta_event_bounds *b, bool agent, const struct ev_counts *c) {
        if (!agent)
                return b->system_events && (uint64_t)c->system > b->system_events;
        return (b->agent_events && (uint64_t)c->agent > b->agent_events) ||
               (b->agent_bytes && (uint64_t)c->bytes > b->agent_bytes);
}

#define EV_TRIM_BATCH 64

/* Removes the session's oldest events of its kind (posted or not) while it is over its
 * bounds, never keep_seq (the one just added). */
static int event_trim(struct meta *m, const char *session_id, bool agent, int64_t keep_seq, struct ev_counts *c) {
        const struct meta_event_bounds *b = &m->ev_bounds;
        while (ev_over(b, agent, c)) {
                int64_t seqs[EV_TRIM_BATCH], lens[EV_TRIM_BATCH];
                size_t n = 0;
                _cleanup_stmt_ sqlite3_stmt *q = NULL;
                int r = prep_bind(m, ST_EV_OLDEST, PARAMS(P_TEXT(session_id), P_INT(agent), P_INT(EV_TRIM_BATCH)), &q);
                if (r < 0)
                        return r;
                while (n < EV_TRIM_BATCH && (r = step(m, q)) > 0) {
                        seqs[n] = sqlite3_column_int64(q, 0);
                        lens[n++] = sqlite3_column_int64(q, 1);
                }
                if (r < 0)
                        return r;
                stmt_resetp(&q);
                int64_t d_n = 0, d_bytes = 0;
                for (size_t i = 0; i < n && seqs[i] != keep_seq; i++) {
                        r = run_params(m, ST_EV_DELETE, PARAMS(P_TEXT(session_id), P_INT(seqs[i])));
                        if (r < 0)
                                return r;
                        d_n++;
                        d_bytes += agent ? lens[i] : 0;
                        struct ev_counts after = { c->agent - (agent ? d_n : 0), c->bytes - d_bytes,
                                                   c->system - (agent ? 0 : d_n) };
                        if (!ev_over(b, agent, &after))
                                break;
                }
                if (d_n == 0)
                        return 0; /* nothing older left to remove */
                r = event_count(m, session_id, agent ? -d_n : 0, -d_bytes, agent ? 0 : -d_n, c);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int event_append_tx(struct meta *m, const char *session_id, const char *kind, const char *payload,
                           size_t len, bool agent, int64_t now, int64_t *ret_seq) {
        _cleanup_stmt_ sqlite3_stmt *q = NULL;
        int r = fetch_one(m, ST_SES_NEXT_SEQ, session_id, "session", &q);
        if (r < 0)
                return r;
        int64_t seq = sqlite3_column_int64(q, 0);
        while ((r = step(m, q)) > 0)
                ;
        if (r < 0)
                return r;
        stmt_resetp(&q);

        r = run_params(m, ST_EV_INSERT,
                       PARAMS(P_TEXT(session_id), P_INT(seq), P_INT(now), P_TEXT(kind), P_TEXTN(payload, len),
                              P_INT(agent)));
        if (r < 0)
                return r;
        struct ev_counts c;
        r = event_count(m, session_id, agent ? 1 : 0, agent ? (int64_t)len : 0, agent ? 0 : 1, &c);
        if (r >= 0)
                r = event_trim(m, session_id, agent, seq, &c);
        if (r < 0)
                return r;
        if (agent && m->ev_bounds.tenant_bytes) {
                r = fetch_one(m, ST_EV_TENANT_BYTES, session_id, "session", &q);
                if (r < 0)
                        return r;
                uint64_t total = (uint64_t)sqlite3_column_int64(q, 0);
                stmt_resetp(&q);
                if (total > m->ev_bounds.tenant_bytes)
                        return meta_error(m, -EDQUOT, "the tenant's sessions hold %llu bytes of events, the most is %llu",
                                          (unsigned long long)(total - len), (unsigned long long)m->ev_bounds.tenant_bytes);
        }
        *ret_seq = seq;
        return 0;
}

static int sq_event_append(struct meta *m, const char *session_id, const char *kind, const char *payload,
                           size_t len, bool agent, int64_t now, int64_t *ret_seq) {
        return WRITE(m, event_append_tx(m, session_id, kind, payload, len, agent, now, ret_seq));
}

/* seq, time_ms, kind, payload; the payload is read by hand (its length, NOT NULL). */
static const struct column event_cols[] = {
        COLUMN(COL_INT, struct meta_event, seq),
        COLUMN(COL_INT, struct meta_event, time_ms),
        COLUMN(COL_TEXT, struct meta_event, kind),
        COL_HAND,
};

static int sq_event_list(struct meta *m, const char *session_id, int64_t after_seq, unsigned limit,
                         size_t max_bytes, struct meta_event **ret, size_t *ret_n) {
        int r = exists(m, ST_SES_EXISTS, session_id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep_bind(m, ST_EV_LIST, PARAMS(P_TEXT(session_id), P_INT(after_seq), P_INT(limit)), &st);
        if (r < 0)
                return r;
        struct meta_event *v = NULL;
        size_t n = 0, cap = 0, bytes = 0;
        while ((r = step(m, st)) > 0) {
                size_t len = (size_t)sqlite3_column_bytes(st, 3);
                if (n > 0 && bytes + len > max_bytes)
                        break;
                struct meta_event *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e) {
                        r = -ENOMEM;
                        break;
                }
                r = read_columns(m, st, event_cols, ELEMENTSOF(event_cols), e);
                if (r >= 0)
                        r = col_dup(m, st, 3, &e->payload);
                if (r >= 0 && !e->payload)
                        r = meta_error(m, -EUCLEAN, "sqlite: event %lld has no payload", (long long)e->seq);
                if (r < 0) {
                        free(e->payload);
                        break;
                }
                e->payload_len = len;
                bytes += len;
                n++;
        }
        if (r < 0) {
                meta_events_free(v, n);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

static int sq_event_last_seq(struct meta *m, const char *session_id, int64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = fetch_one(m, ST_SES_LAST_SEQ, session_id, "session", &st);
        if (r < 0)
                return r;
        *ret = sqlite3_column_int64(st, 0);
        return 0;
}

/* ---- hosts ---- */

/* In HOST_COLS order. */
static const struct column host_cols[] = {
        COLUMN(COL_TEXT, struct meta_host, id),
        COLUMN(COL_TEXT, struct meta_host, address),
        COLUMN(COL_INT, struct meta_host, lease_expires_ms),
        COLUMN(COL_INT, struct meta_host, updated_ms),
};

static int read_host(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_host *h = ret;
        *h = (struct meta_host){ 0 };
        return read_columns(m, st, host_cols, ELEMENTSOF(host_cols), h);
}

static int sq_host_renew(struct meta *m, const char *id, const char *address, int64_t expires, int64_t now) {
        return WRITE(m, run_params(m, ST_HOST_UPSERT, PARAMS(P_TEXT(id), P_OPT(address), P_INT(expires), P_INT(now))));
}

static int sq_host_get(struct meta *m, const char *id, struct meta_host *ret) {
        return get_one(m, ST_HOST_GET, id, "host", read_host, ret);
}

static int sq_host_list_expired(struct meta *m, int64_t now_ms, struct meta_host **ret, size_t *ret_n) {
        return select_rows(m, ST_HOST_EXPIRED, PARAMS(P_INT(now_ms)), sizeof **ret, read_host, NULL, (void **)ret,
                           ret_n);
}

static int sq_host_delete(struct meta *m, const char *id) {
        return WRITE(m, delete_one(m, ST_HOST_DELETE, id, "host"));
}

/* ---- tokens ---- */

static int sq_token_create(struct meta *m, const char *hash, const char *tenant, const char *name, int64_t now) {
        return WRITE(m, insert(m, ST_TOK_INSERT, "token", NULL,
                               PARAMS(P_TEXT(hash), P_TEXT(tenant), P_OPT(name), P_INT(now))));
}

/* In TOK_COLS order. */
static const struct column token_cols[] = {
        COLUMN(COL_TEXT, struct meta_token, hash),
        COLUMN(COL_TEXT, struct meta_token, tenant),
        COLUMN(COL_TEXT, struct meta_token, name),
        COLUMN(COL_INT, struct meta_token, created_ms),
        COLUMN(COL_INT, struct meta_token, revoked_ms),
};

static int read_token(struct meta *m, sqlite3_stmt *st, void *ret) {
        struct meta_token t = { 0 };
        int r = read_columns(m, st, token_cols, ELEMENTSOF(token_cols), &t);
        if (r < 0)
                return r;
        *(struct meta_token *)ret = t;
        return 0;
}

static int sq_token_get(struct meta *m, const char *hash, struct meta_token *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = fetch_row(m, ST_TOK_GET, hash, &st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such token");
        return read_token(m, st, ret);
}

static int sq_token_list(struct meta *m, struct meta_token **ret, size_t *ret_n) {
        return select_rows(m, ST_TOK_LIST, NULL, 0, sizeof **ret, read_token, NULL, (void **)ret, ret_n);
}

static int token_revoke_tx(struct meta *m, const char *hash, int64_t now) {
        int r = run_params(m, ST_TOK_REVOKE, PARAMS(P_TEXT(hash), P_INT(now)));
        if (r < 0 || sqlite3_changes(db_of(m)) > 0)
                return r;
        struct meta_token t;
        return sq_token_get(m, hash, &t); /* 0 when it was revoked before, -ENOENT when unknown */
}

static int sq_token_revoke(struct meta *m, const char *hash, int64_t now) {
        return WRITE(m, token_revoke_tx(m, hash, now));
}

const struct meta_backend_ops meta_sqlite_ops = {
        .name = "sqlite",
        .open = sq_open,
        .close = sq_close,
        .schema_version = sq_schema_version,
        .check = sq_check,
        .begin = sq_begin,
        .commit = sq_commit,
        .set_relaxed = sq_set_relaxed,
        .rollback = sq_rollback,
        .session_create = sq_session_create,
        .session_get = sq_session_get,
        .session_list = sq_session_list,
        .session_set_state = sq_session_set_state,
        .session_set_field = sq_session_set_field,
        .session_set_head = sq_session_set_head,
        .session_delete = sq_session_delete,
        .sandbox_create = sq_sandbox_create,
        .sandbox_get = sq_sandbox_get,
        .sandbox_set_state = sq_sandbox_set_state,
        .sandbox_set_pid = sq_sandbox_set_pid,
        .sandbox_list = sq_sandbox_list,
        .snapshot_add = sq_snapshot_add,
        .snapshot_get = sq_snapshot_get,
        .snapshot_list = sq_snapshot_list,
        .snapshot_set_pinned = sq_snapshot_set_pinned,
        .snapshot_delete = sq_snapshot_delete,
        .snapshot_expired = sq_snapshot_expired,
        .snapshot_live_hashes = sq_snapshot_live_hashes,
        .snapshot_set_replicated = sq_snapshot_set_replicated,
        .snapshot_unreplicated = sq_snapshot_unreplicated,
        .snapshot_count_unreplicated = sq_snapshot_count_unreplicated,
        .event_append = sq_event_append,
        .event_list = sq_event_list,
        .event_last_seq = sq_event_last_seq,
        .host_renew = sq_host_renew,
        .host_get = sq_host_get,
        .host_list_expired = sq_host_list_expired,
        .host_delete = sq_host_delete,
        .token_create = sq_token_create,
        .token_get = sq_token_get,
        .token_revoke = sq_token_revoke,
        .token_list = sq_token_list,
};
