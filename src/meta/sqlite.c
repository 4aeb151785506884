/* The SQLite backend of the metadata store: one database file in WAL mode with
 * synchronous=FULL, so that every commit that returned is on disk (docs/meta.md).
 * Statements are prepared once and cached; every write runs in a transaction of its own
 * or, inside meta_begin, in a savepoint that undoes only the failing call. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
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
};
#define SCHEMA_VERSION ((int)ELEMENTSOF(migrations))

#define SES_COLS                                                                                      \
        "id, tenant, state, template, runtime, memory_bytes, cpu_millis, pids, network, env, "     \
        "snapshot_interval_ms, retention_keep, created_ms, updated_ms, sandbox_id, parent_session, " \
        "source_snapshot, head_snapshot, token_hash, error, disk_bytes"
#define SBX_COLS "id, session_id, host_id, runtime, state, init_pid, created_ms, ended_ms, death_reason"
#define SNAP_COLS                                                                                     \
        "id, session_id, parent_id, store_hash, root_hash, memory_hash, time_ms, reason, label, "  \
        "bytes_added, logical_size, pinned"

enum st_id {
        ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
        ST_SP_T, ST_RELEASE_T, ST_ROLLBACK_T,
        ST_SP_W, ST_RELEASE_W, ST_ROLLBACK_W,
        ST_SCHEMA_VERSION,
        ST_SES_INSERT, ST_SES_GET, ST_SES_LIST, ST_SES_EXISTS, ST_SES_STATE, ST_SES_SET_STATE,
        ST_SES_SET_SANDBOX, ST_SES_SET_TOKEN, ST_SES_SET_HEAD, ST_SES_DELETE, ST_SES_KEEP,
        ST_SES_NEXT_SEQ, ST_SES_LAST_SEQ,
        ST_SBX_INSERT, ST_SBX_GET, ST_SBX_SET_STATE, ST_SBX_SET_PID, ST_SBX_LIST_SES, ST_SBX_LIST_LIVE,
        ST_SNAP_INSERT, ST_SNAP_GET, ST_SNAP_SESSION, ST_SNAP_LIST, ST_SNAP_PIN, ST_SNAP_IS_HEAD,
        ST_SNAP_DELETE, ST_SNAP_EXPIRED, ST_SNAP_HASHES,
        ST_EV_INSERT, ST_EV_LIST,
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
                          "parent_session, source_snapshot, token_hash, error, disk_bytes) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?15, ?16, ?17, ?18)",
        [ST_SES_GET] = "SELECT " SES_COLS " FROM sessions WHERE id = ?1",
        [ST_SES_LIST] = "SELECT " SES_COLS " FROM sessions WHERE (?1 IS NULL OR tenant = ?1) "
                        "AND (?2 IS NULL OR instr(?2, ',' || state || ',') > 0) AND (?3 IS NULL OR id > ?3) "
                        "ORDER BY id LIMIT ?4",
        [ST_SES_EXISTS] = "SELECT 1 FROM sessions WHERE id = ?1",
        [ST_SES_STATE] = "SELECT state FROM sessions WHERE id = ?1",
        [ST_SES_SET_STATE] = "UPDATE sessions SET state = ?2, error = ?3, updated_ms = ?4 WHERE id = ?1",
        [ST_SES_SET_SANDBOX] = "UPDATE sessions SET sandbox_id = ?2, updated_ms = ?3 WHERE id = ?1",
        [ST_SES_SET_TOKEN] = "UPDATE sessions SET token_hash = ?2, updated_ms = ?3 WHERE id = ?1",
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

        [ST_EV_INSERT] = "INSERT INTO events (session_id, seq, time_ms, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
        [ST_EV_LIST] = "SELECT seq, time_ms, kind, payload FROM events WHERE session_id = ?1 AND seq > ?2 "
                       "ORDER BY seq LIMIT ?3",

        [ST_HOST_UPSERT] = "INSERT INTO hosts (id, address, lease_expires_ms, updated_ms) VALUES (?1, ?2, ?3, ?4) "
                           "ON CONFLICT (id) DO UPDATE SET address = excluded.address, "
                           "lease_expires_ms = excluded.lease_expires_ms, updated_ms = excluded.updated_ms",
        [ST_HOST_GET] = "SELECT id, address, lease_expires_ms, updated_ms FROM hosts WHERE id = ?1",
        [ST_HOST_EXPIRED] = "SELECT id, address, lease_expires_ms, updated_ms FROM hosts "
                            "WHERE lease_expires_ms < ?1 ORDER BY id",
        [ST_HOST_DELETE] = "DELETE FROM hosts WHERE id = ?1",

        [ST_TOK_INSERT] = "INSERT INTO tokens (hash, tenant, name, created_ms) VALUES (?1, ?2, ?3, ?4)",
        [ST_TOK_GET] = "SELECT hash, tenant, name, created_ms, revoked_ms FROM tokens WHERE hash = ?1",
        [ST_TOK_REVOKE] = "UPDATE tokens SET revoked_ms = ?2 WHERE hash = ?1 AND revoked_ms = 0",
        [ST_TOK_LIST] = "SELECT hash, tenant, name, created_ms, revoked_ms FROM tokens ORDER BY created_ms, hash",
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

/* Runs a statement that returns no row (or whose rows do not matter). */
static int run(struct meta *m, enum st_id id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, id, &st);
        if (r < 0)
                return r;
        while ((r = step(m, st)) > 0)
                ;
        return r;
}

static int bind_str(sqlite3_stmt *st, int i, const char *s) {
        return s && s[0] ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* Binds each argument; the first failure wins. */
#define BIND(m, ...)                                                              \
        ({                                                                        \
                int _rc[] = { __VA_ARGS__ };                                      \
                int _r = 0;                                                       \
                for (size_t _i = 0; _i < ELEMENTSOF(_rc) && _r == 0; _i++)        \
                        if (_rc[_i] != SQLITE_OK)                                 \
                                _r = sq_error((m), _rc[_i], "bind");              \
                _r;                                                               \
        })

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

/* Grows a list by one element, zeroed. */
static void *grow(struct meta *m, void **v, size_t *cap, size_t n, size_t elsz) {
        if (n == *cap) {
                size_t nc = *cap ? *cap * 2 : 16;
                void *p = realloc(*v, nc * elsz);
                if (!p) {
                        meta_error(m, -ENOMEM, "out of memory");
                        return NULL;
                }
                *v = p;
                *cap = nc;
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

/* 0 if a row matches the single ?1 parameter, -ENOENT (with "no such <what>") if none. */
static int exists(struct meta *m, enum st_id id, const char *key, const char *what) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, id, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        return r > 0 ? 0 : meta_error(m, -ENOENT, "no such %s: %s", what, key);
}

/* Runs an UPDATE/DELETE already bound; -ENOENT if it changed no row. */
static int run_changed(struct meta *m, sqlite3_stmt *st, const char *what, const char *key) {
        int r = step(m, st);
        if (r < 0)
                return r;
        if (sqlite3_changes(db_of(m)) == 0)
                return meta_error(m, -ENOENT, "no such %s: %s", what, key);
        return 0;
}

/* ---- sessions ---- */

static int read_session(struct meta *m, sqlite3_stmt *st, struct meta_session *s) {
        *s = (struct meta_session){ 0 };
        char state[16];
        int r = 0;
        r = r ?: col_str(m, st, 0, s->id, sizeof s->id);
        r = r ?: col_str(m, st, 1, s->tenant, sizeof s->tenant);
        r = r ?: col_str(m, st, 2, state, sizeof state);
        r = r ?: col_str(m, st, 3, s->template_name, sizeof s->template_name);
        r = r ?: col_str(m, st, 4, s->runtime, sizeof s->runtime);
        r = r ?: col_str(m, st, 14, s->sandbox_id, sizeof s->sandbox_id);
        r = r ?: col_str(m, st, 15, s->parent_session, sizeof s->parent_session);
        r = r ?: col_str(m, st, 16, s->source_snapshot, sizeof s->source_snapshot);
        r = r ?: col_str(m, st, 17, s->head_snapshot, sizeof s->head_snapshot);
        r = r ?: col_str(m, st, 18, s->token_hash, sizeof s->token_hash);
        if (r < 0)
                return r;
        if (meta_session_state_from_name(state, &s->state) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: session %s has unknown state '%s'", s->id, state);
        s->limits.memory_bytes = (uint64_t)sqlite3_column_int64(st, 5);
        s->limits.cpu_millis = (uint32_t)sqlite3_column_int64(st, 6);
        s->limits.pids = (uint32_t)sqlite3_column_int64(st, 7);
        s->limits.disk_bytes = (uint64_t)sqlite3_column_int64(st, 20);
        s->network = sqlite3_column_int(st, 8) != 0;
        s->snapshot_interval_ms = sqlite3_column_int64(st, 10);
        s->retention_keep = (uint32_t)sqlite3_column_int64(st, 11);
        s->created_ms = sqlite3_column_int64(st, 12);
        s->updated_ms = sqlite3_column_int64(st, 13);
        r = col_dup(m, st, 9, &s->env_json);
        if (r >= 0)
                r = col_dup(m, st, 19, &s->error);
        if (r < 0)
                meta_session_clear(s);
        return r;
}

static int session_create_tx(struct meta *m, const struct meta_session *s, int64_t now) {
        int r;
        if (s->parent_session[0] && (r = exists(m, ST_SES_EXISTS, s->parent_session, "parent session")) < 0)
                return r;
        if (s->source_snapshot[0] && (r = exists(m, ST_SNAP_SESSION, s->source_snapshot, "source snapshot")) < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SES_INSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, s->id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 2, s->tenant, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 3, meta_session_state_name(s->state), -1, SQLITE_STATIC),
                 bind_str(st, 4, s->template_name), sqlite3_bind_text(st, 5, s->runtime, -1, SQLITE_STATIC),
                 sqlite3_bind_int64(st, 6, (int64_t)s->limits.memory_bytes),
                 sqlite3_bind_int64(st, 7, s->limits.cpu_millis), sqlite3_bind_int64(st, 8, s->limits.pids),
                 sqlite3_bind_int(st, 9, s->network), bind_str(st, 10, s->env_json),
                 sqlite3_bind_int64(st, 11, s->snapshot_interval_ms), sqlite3_bind_int64(st, 12, s->retention_keep),
                 sqlite3_bind_int64(st, 13, s->created_ms ? s->created_ms : now),
                 bind_str(st, 14, s->parent_session), bind_str(st, 15, s->source_snapshot),
                 bind_str(st, 16, s->token_hash), bind_str(st, 17, s->error),
                 sqlite3_bind_int64(st, 18, (int64_t)s->limits.disk_bytes));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r == -EEXIST)
                meta_error(m, r, "session %s exists", s->id);
        return r;
}

static int sq_session_create(struct meta *m, const struct meta_session *s, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, session_create_tx(m, s, now));
}

static int sq_session_get(struct meta *m, const char *id, struct meta_session *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SES_GET, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such session: %s", id);
        return read_session(m, st, ret);
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
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SES_LIST, &st);
        if (r < 0)
                return r;
        r = BIND(m, bind_str(st, 1, f->tenant), bind_str(st, 2, states), bind_str(st, 3, f->after_id),
                 sqlite3_bind_int64(st, 4, f->limit ? (int64_t)f->limit : -1));
        if (r < 0)
                return r;
        struct meta_session *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_session *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e) {
                        r = -ENOMEM;
                        break;
                }
                r = read_session(m, st, e);
                if (r < 0)
                        break;
                n++;
        }
        if (r < 0) {
                meta_sessions_free(v, n);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

static int session_set_state_tx(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                                const char *error, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SES_STATE, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such session: %s", id);
        enum meta_session_state cur;
        if (meta_session_state_from_name((const char *)sqlite3_column_text(st, 0), &cur) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: session %s has an unknown state", id);
        stmt_resetp(&st);
        if (cur == META_SESSION_TERMINATED && to != META_SESSION_TERMINATED)
                return meta_error(m, -EINVAL, "session %s is terminated", id);
        if (from_mask && !(from_mask & META_STATE_BIT(cur)))
                return meta_error(m, -EBUSY, "session %s is %s", id, meta_session_state_name(cur));
        _cleanup_stmt_ sqlite3_stmt *up = NULL;
        r = prep(m, ST_SES_SET_STATE, &up);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(up, 1, id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(up, 2, meta_session_state_name(to), -1, SQLITE_STATIC), bind_str(up, 3, error),
                 sqlite3_bind_int64(up, 4, now));
        if (r < 0)
                return r;
        return run_changed(m, up, "session", id);
}

static int sq_session_set_state(struct meta *m, const char *id, unsigned from_mask, enum meta_session_state to,
                                const char *error, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, session_set_state_tx(m, id, from_mask, to, error, now));
}

/* One UPDATE ... WHERE id = ?1 with ?2 = value, ?3 = now. */
static int update_one(struct meta *m, enum st_id sid, const char *id, const char *value, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, sid, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC), bind_str(st, 2, value),
                 sqlite3_bind_int64(st, 3, now));
        if (r < 0)
                return r;
        return run_changed(m, st, "session", id);
}

static int sq_session_set_field(struct meta *m, const char *id, enum meta_session_field f, const char *value,
                                int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, update_one(m, f == META_FIELD_SANDBOX ? ST_SES_SET_SANDBOX : ST_SES_SET_TOKEN, id, value,
                                   now));
}

static int session_set_head_tx(struct meta *m, const char *id, const char *snap, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SNAP_SESSION, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, snap, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such snapshot: %s", snap);
        const char *owner = (const char *)sqlite3_column_text(st, 0);
        if (!owner || strcmp(owner, id) != 0)
                return meta_error(m, -EXDEV, "snapshot %s belongs to session %s", snap, owner ? owner : "?");
        stmt_resetp(&st);
        return update_one(m, ST_SES_SET_HEAD, id, snap, now);
}

static int sq_session_set_head(struct meta *m, const char *id, const char *snap, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, session_set_head_tx(m, id, snap, now));
}

static int delete_one(struct meta *m, enum st_id sid, const char *key, const char *what) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, sid, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        return run_changed(m, st, what, key);
}

static int sq_session_delete(struct meta *m, const char *id) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, delete_one(m, ST_SES_DELETE, id, "session"));
}

/* ---- sandboxes ---- */

static int read_sandbox(struct meta *m, sqlite3_stmt *st, struct meta_sandbox *b) {
        *b = (struct meta_sandbox){ 0 };
        char state[16];
        int r = 0;
        r = r ?: col_str(m, st, 0, b->id, sizeof b->id);
        r = r ?: col_str(m, st, 1, b->session_id, sizeof b->session_id);
        r = r ?: col_str(m, st, 2, b->host_id, sizeof b->host_id);
        r = r ?: col_str(m, st, 3, b->runtime, sizeof b->runtime);
        r = r ?: col_str(m, st, 4, state, sizeof state);
        r = r ?: col_str(m, st, 8, b->death_reason, sizeof b->death_reason);
        if (r < 0)
                return r;
        if (meta_sandbox_state_from_name(state, &b->state) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: sandbox %s has unknown state '%s'", b->id, state);
        b->init_pid = (int32_t)sqlite3_column_int64(st, 5);
        b->created_ms = sqlite3_column_int64(st, 6);
        b->ended_ms = sqlite3_column_int64(st, 7);
        return 0;
}

static int sandbox_create_tx(struct meta *m, const struct meta_sandbox *b, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, b->session_id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SBX_INSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, b->id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 2, b->session_id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 3, b->host_id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 4, b->runtime, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 5, meta_sandbox_state_name(b->state), -1, SQLITE_STATIC),
                 sqlite3_bind_int64(st, 6, b->init_pid), sqlite3_bind_int64(st, 7, b->created_ms ? b->created_ms : now),
                 bind_str(st, 8, b->death_reason));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r == -EEXIST)
                meta_error(m, r, "sandbox %s exists", b->id);
        return r;
}

static int sq_sandbox_create(struct meta *m, const struct meta_sandbox *b, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, sandbox_create_tx(m, b, now));
}

static int sq_sandbox_get(struct meta *m, const char *id, struct meta_sandbox *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SBX_GET, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such sandbox: %s", id);
        return read_sandbox(m, st, ret);
}

static int sandbox_set_state_tx(struct meta *m, const char *id, enum meta_sandbox_state s, const char *reason,
                                int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SBX_SET_STATE, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 2, meta_sandbox_state_name(s), -1, SQLITE_STATIC), bind_str(st, 3, reason),
                 sqlite3_bind_int64(st, 4, now));
        if (r < 0)
                return r;
        return run_changed(m, st, "sandbox", id);
}

static int sq_sandbox_set_state(struct meta *m, const char *id, enum meta_sandbox_state s, const char *reason,
                                int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, sandbox_set_state_tx(m, id, s, reason, now));
}

static int sandbox_set_pid_tx(struct meta *m, const char *id, int32_t pid) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SBX_SET_PID, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC), sqlite3_bind_int64(st, 2, pid));
        if (r < 0)
                return r;
        return run_changed(m, st, "sandbox", id);
}

static int sq_sandbox_set_pid(struct meta *m, const char *id, int32_t pid) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, sandbox_set_pid_tx(m, id, pid));
}

static int sq_sandbox_list(struct meta *m, const char *session_id, const char *host_id, struct meta_sandbox **ret,
                           size_t *ret_n) {
        int r;
        if (session_id && (r = exists(m, ST_SES_EXISTS, session_id, "session")) < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, session_id ? ST_SBX_LIST_SES : ST_SBX_LIST_LIVE, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id ? session_id : host_id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_sandbox *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_sandbox *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = read_sandbox(m, st, e);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

/* ---- snapshots ---- */

static int read_snapshot(struct meta *m, sqlite3_stmt *st, struct meta_snapshot *s) {
        *s = (struct meta_snapshot){ 0 };
        char reason[16];
        int r = 0;
        r = r ?: col_str(m, st, 0, s->id, sizeof s->id);
        r = r ?: col_str(m, st, 1, s->session_id, sizeof s->session_id);
        r = r ?: col_str(m, st, 2, s->parent_id, sizeof s->parent_id);
        r = r ?: col_str(m, st, 3, s->store_hash, sizeof s->store_hash);
        r = r ?: col_str(m, st, 4, s->root_hash, sizeof s->root_hash);
        r = r ?: col_str(m, st, 5, s->memory_hash, sizeof s->memory_hash);
        r = r ?: col_str(m, st, 7, reason, sizeof reason);
        r = r ?: col_str(m, st, 8, s->label, sizeof s->label);
        if (r < 0)
                return r;
        if (meta_snapshot_reason_from_name(reason, &s->reason) < 0)
                return meta_error(m, -EUCLEAN, "sqlite: snapshot %s has unknown reason '%s'", s->id, reason);
        s->time_ms = sqlite3_column_int64(st, 6);
        s->bytes_added = (uint64_t)sqlite3_column_int64(st, 9);
        s->logical_size = (uint64_t)sqlite3_column_int64(st, 10);
        s->pinned = sqlite3_column_int(st, 11) != 0;
        return 0;
}

static int snapshot_add_tx(struct meta *m, const struct meta_snapshot *s, int64_t now) {
        int r = exists(m, ST_SES_EXISTS, s->session_id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SNAP_INSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, s->id, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 2, s->session_id, -1, SQLITE_STATIC), bind_str(st, 3, s->parent_id),
                 sqlite3_bind_text(st, 4, s->store_hash, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 5, s->root_hash, -1, SQLITE_STATIC), bind_str(st, 6, s->memory_hash),
                 sqlite3_bind_int64(st, 7, s->time_ms ? s->time_ms : now),
                 sqlite3_bind_text(st, 8, meta_snapshot_reason_name(s->reason), -1, SQLITE_STATIC),
                 bind_str(st, 9, s->label), sqlite3_bind_int64(st, 10, (int64_t)s->bytes_added),
                 sqlite3_bind_int64(st, 11, (int64_t)s->logical_size), sqlite3_bind_int(st, 12, s->pinned));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r == -EEXIST)
                meta_error(m, r, "snapshot %s exists", s->id);
        return r;
}

static int sq_snapshot_add(struct meta *m, const struct meta_snapshot *s, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, snapshot_add_tx(m, s, now));
}

static int sq_snapshot_get(struct meta *m, const char *id, struct meta_snapshot *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SNAP_GET, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such snapshot: %s", id);
        return read_snapshot(m, st, ret);
}

static int sq_snapshot_list(struct meta *m, const char *session_id, struct meta_snapshot **ret, size_t *ret_n) {
        int r = exists(m, ST_SES_EXISTS, session_id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SNAP_LIST, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_snapshot *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_snapshot *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = read_snapshot(m, st, e);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static int snapshot_set_pinned_tx(struct meta *m, const char *id, bool pinned) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SNAP_PIN, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC), sqlite3_bind_int(st, 2, pinned));
        if (r < 0)
                return r;
        return run_changed(m, st, "snapshot", id);
}

static int sq_snapshot_set_pinned(struct meta *m, const char *id, bool pinned) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, snapshot_set_pinned_tx(m, id, pinned));
}

static int snapshot_delete_tx(struct meta *m, const char *id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SNAP_IS_HEAD, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r > 0)
                return meta_error(m, -EBUSY, "snapshot %s is the head of session %s", id,
                                  (const char *)sqlite3_column_text(st, 0));
        stmt_resetp(&st);
        return delete_one(m, ST_SNAP_DELETE, id, "snapshot");
}

static int sq_snapshot_delete(struct meta *m, const char *id) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, snapshot_delete_tx(m, id));
}

static int sq_snapshot_expired(struct meta *m, const char *session_id, struct meta_id **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *k = NULL;
        int r = prep(m, ST_SES_KEEP, &k);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(k, 1, session_id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, k);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such session: %s", session_id);
        int64_t keep = sqlite3_column_int64(k, 0);
        stmt_resetp(&k);

        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_SNAP_EXPIRED, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC), sqlite3_bind_int64(st, 2, keep));
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_id *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_id *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = col_str(m, st, 0, e->s, sizeof e->s);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static int sq_snapshot_live_hashes(struct meta *m, struct meta_hash **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_SNAP_HASHES, &st);
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_hash *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_hash *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = col_str(m, st, 0, e->hex, sizeof e->hex);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

/* ---- events ---- */

static int event_append_tx(struct meta *m, const char *session_id, const char *kind, const char *payload,
                           size_t len, int64_t now, int64_t *ret_seq) {
        _cleanup_stmt_ sqlite3_stmt *q = NULL;
        int r = prep(m, ST_SES_NEXT_SEQ, &q);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(q, 1, session_id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, q);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such session: %s", session_id);
        int64_t seq = sqlite3_column_int64(q, 0);
        while ((r = step(m, q)) > 0)
                ;
        if (r < 0)
                return r;
        stmt_resetp(&q);

        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_EV_INSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC), sqlite3_bind_int64(st, 2, seq),
                 sqlite3_bind_int64(st, 3, now), sqlite3_bind_text(st, 4, kind, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 5, payload, (int)len, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        *ret_seq = seq;
        return 0;
}

static int sq_event_append(struct meta *m, const char *session_id, const char *kind, const char *payload,
                           size_t len, int64_t now, int64_t *ret_seq) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, event_append_tx(m, session_id, kind, payload, len, now, ret_seq));
}

static int sq_event_list(struct meta *m, const char *session_id, int64_t after_seq, unsigned limit,
                         size_t max_bytes, struct meta_event **ret, size_t *ret_n) {
        int r = exists(m, ST_SES_EXISTS, session_id, "session");
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        r = prep(m, ST_EV_LIST, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC), sqlite3_bind_int64(st, 2, after_seq),
                 sqlite3_bind_int64(st, 3, limit));
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
                e->seq = sqlite3_column_int64(st, 0);
                e->time_ms = sqlite3_column_int64(st, 1);
                r = col_str(m, st, 2, e->kind, sizeof e->kind);
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
        int r = prep(m, ST_SES_LAST_SEQ, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such session: %s", session_id);
        *ret = sqlite3_column_int64(st, 0);
        return 0;
}

/* ---- hosts ---- */

static int read_host(struct meta *m, sqlite3_stmt *st, struct meta_host *h) {
        *h = (struct meta_host){ 0 };
        int r = col_str(m, st, 0, h->id, sizeof h->id);
        r = r ?: col_str(m, st, 1, h->address, sizeof h->address);
        h->lease_expires_ms = sqlite3_column_int64(st, 2);
        h->updated_ms = sqlite3_column_int64(st, 3);
        return r;
}

static int host_renew_tx(struct meta *m, const char *id, const char *address, int64_t expires, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_HOST_UPSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC), bind_str(st, 2, address),
                 sqlite3_bind_int64(st, 3, expires), sqlite3_bind_int64(st, 4, now));
        if (r < 0)
                return r;
        return step(m, st);
}

static int sq_host_renew(struct meta *m, const char *id, const char *address, int64_t expires, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, host_renew_tx(m, id, address, expires, now));
}

static int sq_host_get(struct meta *m, const char *id, struct meta_host *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_HOST_GET, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such host: %s", id);
        return read_host(m, st, ret);
}

static int sq_host_list_expired(struct meta *m, int64_t now_ms, struct meta_host **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_HOST_EXPIRED, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_int64(st, 1, now_ms));
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_host *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_host *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = read_host(m, st, e);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static int sq_host_delete(struct meta *m, const char *id) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, delete_one(m, ST_HOST_DELETE, id, "host"));
}

/* ---- tokens ---- */

static int token_create_tx(struct meta *m, const char *hash, const char *tenant, const char *name, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_TOK_INSERT, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC),
                 sqlite3_bind_text(st, 2, tenant, -1, SQLITE_STATIC), bind_str(st, 3, name),
                 sqlite3_bind_int64(st, 4, now));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r == -EEXIST)
                meta_error(m, r, "token exists");
        return r;
}

static int sq_token_create(struct meta *m, const char *hash, const char *tenant, const char *name, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, token_create_tx(m, hash, tenant, name, now));
}

static int read_token(struct meta *m, sqlite3_stmt *st, struct meta_token *ret) {
        struct meta_token t = { 0 };
        int r = col_str(m, st, 0, t.hash, sizeof t.hash);
        r = r ?: col_str(m, st, 1, t.tenant, sizeof t.tenant);
        r = r ?: col_str(m, st, 2, t.name, sizeof t.name);
        if (r < 0)
                return r;
        t.created_ms = sqlite3_column_int64(st, 3);
        t.revoked_ms = sqlite3_column_int64(st, 4);
        *ret = t;
        return 0;
}

static int sq_token_get(struct meta *m, const char *hash, struct meta_token *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_TOK_GET, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0)
                return r;
        if (r == 0)
                return meta_error(m, -ENOENT, "no such token");
        return read_token(m, st, ret);
}

static int sq_token_list(struct meta *m, struct meta_token **ret, size_t *ret_n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_TOK_LIST, &st);
        if (r < 0)
                return r;
        _cleanup_free_ struct meta_token *v = NULL;
        size_t n = 0, cap = 0;
        while ((r = step(m, st)) > 0) {
                struct meta_token *e = grow(m, (void **)&v, &cap, n, sizeof *v);
                if (!e)
                        return -ENOMEM;
                r = read_token(m, st, e);
                if (r < 0)
                        return r;
                n++;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static int token_revoke_tx(struct meta *m, const char *hash, int64_t now) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prep(m, ST_TOK_REVOKE, &st);
        if (r < 0)
                return r;
        r = BIND(m, sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC), sqlite3_bind_int64(st, 2, now));
        if (r < 0)
                return r;
        r = step(m, st);
        if (r < 0 || sqlite3_changes(db_of(m)) > 0)
                return r;
        struct meta_token t;
        return sq_token_get(m, hash, &t); /* 0 when it was revoked before, -ENOENT when unknown */
}

static int sq_token_revoke(struct meta *m, const char *hash, int64_t now) {
        int r = w_begin(m);
        if (r < 0)
                return r;
        return w_end(m, token_revoke_tx(m, hash, now));
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
