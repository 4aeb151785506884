/* Unit tests of the metadata store (SQLite backend): every function, the limits, the
 * errors (-ENOENT, -EEXIST, -E2BIG, …) with out-params left alone, migration, reopen,
 * retention, event paging and transactions. Each test gets a fresh file in a temp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "common/macros.h"
#include "meta/meta.h"

struct fx {
        char dir[64];
        char path[128];
        struct meta *m;
};

static void rm_db(struct fx *f) {
        static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
        char p[160];
        for (size_t i = 0; i < ELEMENTSOF(sfx); i++) {
                snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
                unlink(p);
        }
}

static int setup(void **state) {
        struct fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        strcpy(f->dir, "/tmp/meta-test-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof f->path, "%s/meta.db", f->dir);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fx *f = *state;
        f->m = meta_free(f->m);
        rm_db(f);
        rmdir(f->dir);
        free(f);
        return 0;
}

static void reopen(struct fx *f) {
        f->m = meta_free(f->m);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
}

static const char H1[] = "1111111111111111111111111111111111111111111111111111111111111111";
static const char H2[] = "2222222222222222222222222222222222222222222222222222222222222222";
static const char H3[] = "3333333333333333333333333333333333333333333333333333333333333333";

#define SCHEMA_NOW 7 /* the schema this program writes */

static void mk_session(struct meta *m, const char *id, const char *tenant, enum meta_session_state st) {
        struct meta_session s = { .state = st, .snapshot_interval_ms = 30000, .retention_keep = 3 };
        strcpy(s.id, id);
        strcpy(s.tenant, tenant);
        strcpy(s.template_name, "base");
        strcpy(s.runtime, "ns");
        int r = meta_session_create(m, &s);
        if (r < 0)
                fprintf(stderr, "create %s: %s\n", id, meta_last_error(m));
        assert_int_equal(r, 0);
}

static void mk_snap(struct meta *m, const char *id, const char *ses, enum meta_snapshot_reason why, int64_t t,
                    const char *store_hash) {
        struct meta_snapshot s = { .reason = why, .time_ms = t, .bytes_added = 10, .logical_size = 100 };
        strcpy(s.id, id);
        strcpy(s.session_id, ses);
        strcpy(s.store_hash, store_hash);
        strcpy(s.root_hash, H2);
        int r = meta_snapshot_add(m, &s);
        if (r < 0)
                fprintf(stderr, "snapshot %s: %s\n", id, meta_last_error(m));
        assert_int_equal(r, 0);
}

static void test_names(void **state) {
        printf("# state and reason names round-trip; unknown names are -EINVAL\n");
        for (int i = 0; i < _META_SESSION_STATE_MAX; i++) {
                enum meta_session_state s = 99;
                assert_int_equal(meta_session_state_from_name(meta_session_state_name(i), &s), 0);
                assert_int_equal(s, i);
        }
        for (int i = 0; i < _META_SANDBOX_STATE_MAX; i++) {
                enum meta_sandbox_state s = 99;
                assert_int_equal(meta_sandbox_state_from_name(meta_sandbox_state_name(i), &s), 0);
                assert_int_equal(s, i);
        }
        for (int i = 0; i < _META_REASON_MAX; i++) {
                enum meta_snapshot_reason s = 99;
                assert_int_equal(meta_snapshot_reason_from_name(meta_snapshot_reason_name(i), &s), 0);
                assert_int_equal(s, i);
        }
        assert_string_equal(meta_session_state_name(META_SESSION_RECOVERING), "recovering");
        assert_string_equal(meta_sandbox_state_name(META_SANDBOX_DEAD), "dead");
        assert_string_equal(meta_snapshot_reason_name(META_REASON_RESTORE), "restore");
        assert_null(meta_session_state_name(_META_SESSION_STATE_MAX));
        enum meta_session_state s = META_SESSION_PAUSED;
        assert_int_equal(meta_session_state_from_name("sleeping", &s), -EINVAL);
        assert_int_equal(meta_session_state_from_name(NULL, &s), -EINVAL);
        assert_int_equal(s, META_SESSION_PAUSED);
}

static void test_ids_and_hash(void **state) {
        printf("# meta_new_id: prefix_ + 16 hex, different each time; bad prefixes refused\n");
        char a[META_ID_SIZE], b[META_ID_SIZE];
        assert_int_equal(meta_new_id("ses", a), 0);
        assert_int_equal(meta_new_id("ses", b), 0);
        assert_int_equal(strlen(a), 4 + META_ID_RANDOM_HEX);
        assert_memory_equal(a, "ses_", 4);
        for (size_t i = 4; i < strlen(a); i++)
                assert_non_null(strchr("0123456789abcdef", a[i]));
        assert_string_not_equal(a, b);
        assert_true(meta_id_valid("ses", a));
        assert_false(meta_id_valid("snap", a));
        assert_int_equal(meta_new_id("snap", a), 0);
        assert_true(meta_id_valid("snap", a));
        strcpy(b, "unchanged");
        assert_int_equal(meta_new_id("", b), -EINVAL);
        assert_int_equal(meta_new_id("toolongpre", b), -EINVAL);
        assert_int_equal(meta_new_id("Ses", b), -EINVAL);
        assert_int_equal(meta_new_id("s_s", b), -EINVAL);
        assert_string_equal(b, "unchanged");
        assert_false(meta_id_valid("ses", "ses_"));
        assert_false(meta_id_valid("ses", "ses_ABC"));
        assert_false(meta_id_valid("ses", "ses_a/b"));
        assert_false(meta_id_valid("ses", "ses_0123456789abcdef0123456789ab"));
        assert_true(meta_id_valid("ses", "ses_x1"));

        printf("# meta_token_hash is SHA-256 in lowercase hex\n");
        char h[META_HASH_HEX + 1];
        assert_int_equal(meta_token_hash("abc", h), 0);
        assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_true(meta_now_ms() > 1600000000000LL);
}

static void test_open_migrate(void **state) {
        struct fx *f = *state;
        printf("# a new file is created 0600 at schema version 7, WAL, and passes the checks\n");
        assert_string_equal(meta_backend_name(f->m), "sqlite");
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        assert_int_equal(meta_check(f->m), 0);
        struct stat st;
        assert_int_equal(stat(f->path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        mk_session(f->m, "ses_a1", "t1", META_SESSION_CREATING);
        char wal[160];
        snprintf(wal, sizeof wal, "%s-wal", f->path);
        assert_int_equal(access(wal, F_OK), 0);
        sqlite3 *raw = NULL;
        sqlite3_stmt *q = NULL;
        assert_int_equal(sqlite3_open(f->path, &raw), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
        sqlite3_finalize(q);
        sqlite3_close(raw);

        printf("# every fd the store holds (database, WAL, shm) is close-on-exec\n");
        DIR *d = opendir("/proc/self/fd");
        assert_non_null(d);
        int checked = 0;
        for (struct dirent *de; (de = readdir(d));) {
                int fd = atoi(de->d_name);
                if (de->d_name[0] == '.' || fd < 3 || fd == dirfd(d))
                        continue;
                char target[256] = "";
                char link[64];
                snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
                if (readlink(link, target, sizeof target - 1) < 0 || strncmp(target, f->dir, strlen(f->dir)) != 0)
                        continue;
                assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
                checked++;
        }
        closedir(d);
        assert_true(checked >= 2);

        printf("# reopening does not migrate again\n");
        reopen(f);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);

        printf("# a file from a newer program is refused with -EPROTO and left alone\n");
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, "INSERT INTO meta_schema VALUES (99, 0)", NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        struct meta *m2 = (struct meta *)0x1;
        assert_int_equal(meta_open(f->path, NULL, &m2), -EPROTO);
        assert_ptr_equal(m2, (struct meta *)0x1);
        printf("# ... and says why, with both versions, where the caller asks (meta_opts.error)\n");
        char why[256] = "stale";
        assert_int_equal(meta_open(f->path, &(struct meta_opts){ META_OPTS_INIT, .error = why, .error_size = sizeof why }, &m2),
                         -EPROTO);
        assert_non_null(strstr(why, "schema version 99 is newer than this program's 7"));
        assert_ptr_equal(m2, (struct meta *)0x1);
        printf("# a version 1 options struct (no error field) still opens\n");
        assert_int_equal(meta_open(f->path, &(struct meta_opts){ .version = 1 }, &m2), -EPROTO);
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, "DELETE FROM meta_schema WHERE version = 99", NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        reopen(f);

        printf("# a file that is not a database is -EBADMSG; postgresql is not built yet\n");
        char junk[160];
        snprintf(junk, sizeof junk, "%s/junk.db", f->dir);
        FILE *j = fopen(junk, "w");
        assert_non_null(j);
        for (int i = 0; i < 100; i++)
                fputs("this is not an SQLite database at all. ", j);
        fclose(j);
        assert_int_equal(meta_open(junk, NULL, &m2), -EBADMSG);
        unlink(junk);
        assert_int_equal(meta_open("postgresql://db/space", NULL, &m2), -EPROTONOSUPPORT);
        assert_int_equal(meta_open("sqlite:", NULL, &m2), -EINVAL);
        char missing[160];
        snprintf(missing, sizeof missing, "%s/no/such/dir.db", f->dir);
        assert_int_equal(meta_open(missing, NULL, &m2), -ENOENT);
        assert_ptr_equal(m2, (struct meta *)0x1);
        char why2[8] = "stale";
        assert_int_equal(meta_open(missing, &(struct meta_opts){ META_OPTS_INIT, .error = why2, .error_size = sizeof why2 }, &m2),
                         -ENOENT);
        assert_true(why2[0] != '\0' && strlen(why2) < sizeof why2); /* cut to the buffer, never past it */
        assert_string_not_equal(why2, "stale");

        printf("# sqlite:PATH names the same file\n");
        char uri[160];
        snprintf(uri, sizeof uri, "sqlite:%s", f->path);
        _cleanup_meta_ struct meta *m3 = NULL;
        assert_int_equal(meta_open(uri, &(struct meta_opts){ META_OPTS_INIT, .busy_timeout_ms = 100 }, &m3), 0);
        struct meta_session s;
        assert_int_equal(meta_session_get(m3, "ses_a1", &s), 0);
        meta_session_clear(&s);
        assert_int_equal(meta_open(uri, &(struct meta_opts){ .version = 77 }, &m2), -EINVAL);
}

/* What each migration added, taken away again: undo[v] takes a file from schema v to
 * v - 1, as the program of schema v - 1 wrote it. */
static const char *const undo[] = {
        [2] = "ALTER TABLE sessions DROP COLUMN disk_bytes;",
        [3] = "DROP INDEX events_session_agent;"
              "ALTER TABLE events DROP COLUMN agent;"
              "ALTER TABLE sessions DROP COLUMN agent_events;"
              "ALTER TABLE sessions DROP COLUMN agent_event_bytes;"
              "ALTER TABLE sessions DROP COLUMN system_events;",
        [4] = "ALTER TABLE sessions DROP COLUMN network_policy;"
              "ALTER TABLE sessions DROP COLUMN ports;",
        [5] = "ALTER TABLE sessions DROP COLUMN timeouts;",
        [6] = "ALTER TABLE sessions DROP COLUMN metadata;",
        [7] = "DROP INDEX snapshots_unreplicated;"
              "ALTER TABLE snapshots DROP COLUMN replicated;",
};

static void downgrade_to(sqlite3 *db, int version) {
        for (int v = SCHEMA_NOW; v > version; v--) {
                char del[64];
                snprintf(del, sizeof del, "DELETE FROM meta_schema WHERE version = %d", v);
                assert_int_equal(sqlite3_exec(db, undo[v], NULL, NULL, NULL), SQLITE_OK);
                assert_int_equal(sqlite3_exec(db, del, NULL, NULL, NULL), SQLITE_OK);
        }
}

/* A file written by the first schema (no disk limits) opens, migrates to 4 and keeps
 * its sessions, which read as having no disk limit. */
static void test_migrate_v1(void **state) {
        struct fx *f = *state;
        printf("# a schema 1 file (before disk limits) migrates to 4; its sessions have no disk limit\n");
        mk_session(f->m, "ses_b1", "t1", META_SESSION_RUNNING);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 1);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        struct meta_session g;
        assert_int_equal(meta_session_get(f->m, "ses_b1", &g), 0);
        assert_int_equal(g.limits.disk_bytes, 0);
        assert_int_equal(g.state, META_SESSION_RUNNING);
        meta_session_clear(&g);
        printf("#   the old session is there, with disk limit 0 (none)\n");
        assert_int_equal(meta_check(f->m), 0);
}

static void test_sessions(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        printf("# create + get keeps every field\n");
        struct meta_session s = {
                .state = META_SESSION_CREATING,
                .limits = { .memory_bytes = 1ull << 33, .cpu_millis = 1500, .pids = 256, .disk_bytes = 3ull << 30 },
                .network = true,
                .env_json = "{\"A\":\"1\",\"B\":\"two\"}",
                .snapshot_interval_ms = 15000,
                .retention_keep = 7,
                .created_ms = 1700000000000,
                .error = "not yet",
        };
        strcpy(s.id, "ses_0000000000000001");
        strcpy(s.tenant, "acme");
        strcpy(s.template_name, "python");
        strcpy(s.runtime, "ns");
        assert_int_equal(meta_token_hash("secret", s.token_hash), 0);
        strcpy(s.sandbox_id, "sbx_ignored");
        assert_int_equal(meta_session_create(m, &s), 0);
        struct meta_session g;
        assert_int_equal(meta_session_get(m, s.id, &g), 0);
        assert_string_equal(g.id, s.id);
        assert_string_equal(g.tenant, "acme");
        assert_int_equal(g.state, META_SESSION_CREATING);
        assert_string_equal(g.template_name, "python");
        assert_string_equal(g.runtime, "ns");
        assert_int_equal(g.limits.memory_bytes, 1ull << 33);
        assert_int_equal(g.limits.cpu_millis, 1500);
        assert_int_equal(g.limits.pids, 256);
        assert_int_equal(g.limits.disk_bytes, 3ull << 30);
        assert_true(g.network);
        assert_string_equal(g.env_json, s.env_json);
        assert_int_equal(g.snapshot_interval_ms, 15000);
        assert_int_equal(g.retention_keep, 7);
        assert_int_equal(g.created_ms, 1700000000000);
        assert_int_equal(g.updated_ms, 1700000000000);
        assert_string_equal(g.sandbox_id, "");
        assert_string_equal(g.parent_session, "");
        assert_string_equal(g.head_snapshot, "");
        assert_string_equal(g.token_hash, s.token_hash);
        assert_string_equal(g.error, "not yet");
        meta_session_clear(&g);

        printf("# duplicate id is -EEXIST; unknown id is -ENOENT with *ret untouched\n");
        assert_int_equal(meta_session_create(m, &s), -EEXIST);
        assert_non_null(strstr(meta_last_error(m), "exists"));
        memset(&g, 0x5a, sizeof g);
        struct meta_session before = g;
        assert_int_equal(meta_session_get(m, "ses_nope", &g), -ENOENT);
        assert_memory_equal(&g, &before, sizeof g);
        assert_non_null(strstr(meta_last_error(m), "ses_nope"));

        printf("# bad fields are -EINVAL; env over 64 KiB is -E2BIG; env must be a JSON object\n");
        struct meta_session bad = s;
        strcpy(bad.id, "sbx_0000000000000009");
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        bad = s;
        strcpy(bad.id, "ses_0000000000000009");
        strcpy(bad.tenant, "a b");
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        bad = s;
        strcpy(bad.id, "ses_0000000000000009");
        bad.runtime[0] = 0;
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        bad = s;
        strcpy(bad.id, "ses_0000000000000009");
        strcpy(bad.token_hash, "XYZ");
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        bad = s;
        strcpy(bad.id, "ses_0000000000000009");
        bad.env_json = "[1,2]";
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        bad.env_json = "{\"a\":";
        assert_int_equal(meta_session_create(m, &bad), -EINVAL);
        _cleanup_free_ char *big = malloc(META_JSON_MAX + 2);
        assert_non_null(big);
        memset(big, ' ', META_JSON_MAX + 1);
        big[0] = '{';
        big[META_JSON_MAX] = '}';
        big[META_JSON_MAX + 1] = 0;
        bad.env_json = big;
        assert_int_equal(meta_session_create(m, &bad), -E2BIG);
        big[META_JSON_MAX - 1] = '}';
        big[META_JSON_MAX] = 0;
        assert_int_equal(meta_session_create(m, &bad), 0); /* exactly the limit is fine */
        assert_int_equal(meta_session_get(m, bad.id, &g), 0);
        assert_int_equal(strlen(g.env_json), META_JSON_MAX);
        meta_session_clear(&g);

        printf("# fork fields must name existing rows\n");
        struct meta_session fk = s;
        strcpy(fk.id, "ses_000000000000000f");
        strcpy(fk.parent_session, "ses_00000000000000ff");
        assert_int_equal(meta_session_create(m, &fk), -ENOENT);
        strcpy(fk.parent_session, s.id);
        strcpy(fk.source_snapshot, "snap_00000000000000ff");
        assert_int_equal(meta_session_create(m, &fk), -ENOENT);
        mk_snap(m, "snap_0000000000000001", s.id, META_REASON_MANUAL, 0, H1);
        strcpy(fk.source_snapshot, "snap_0000000000000001");
        assert_int_equal(meta_session_create(m, &fk), 0);
        assert_int_equal(meta_session_get(m, fk.id, &g), 0);
        assert_string_equal(g.parent_session, s.id);
        assert_string_equal(g.source_snapshot, "snap_0000000000000001");
        meta_session_clear(&g);
}

static void test_session_updates(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_CREATING);
        mk_session(m, "ses_2", "t1", META_SESSION_CREATING);

        printf("# set_state honours from_mask (-EBUSY), terminated is final (-EINVAL)\n");
        assert_int_equal(meta_session_set_state(m, "ses_1", META_STATE_BIT(META_SESSION_CREATING), META_SESSION_RUNNING,
                                                NULL), 0);
        assert_int_equal(meta_session_set_state(m, "ses_1", META_STATE_BIT(META_SESSION_PAUSED), META_SESSION_RUNNING,
                                                NULL), -EBUSY);
        assert_non_null(strstr(meta_last_error(m), "running"));
        assert_int_equal(meta_session_set_state(m, "ses_1", 0, META_SESSION_RECOVERING, "init died"), 0);
        struct meta_session g;
        assert_int_equal(meta_session_get(m, "ses_1", &g), 0);
        assert_int_equal(g.state, META_SESSION_RECOVERING);
        assert_string_equal(g.error, "init died");
        assert_true(g.updated_ms >= g.created_ms);
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_state(m, "ses_nope", 0, META_SESSION_RUNNING, NULL), -ENOENT);
        assert_int_equal(meta_session_set_state(m, "ses_1", 0, _META_SESSION_STATE_MAX, NULL), -EINVAL);
        assert_int_equal(meta_session_set_state(m, "ses_2", 0, META_SESSION_TERMINATED, NULL), 0);
        assert_int_equal(meta_session_set_state(m, "ses_2", 0, META_SESSION_RUNNING, NULL), -EINVAL);
        assert_int_equal(meta_session_set_state(m, "ses_2", 0, META_SESSION_TERMINATED, NULL), 0);

        printf("# an error text longer than META_TEXT_MAX is cut on a character boundary\n");
        char longerr[META_TEXT_MAX + 10];
        memset(longerr, 'e', sizeof longerr - 1);
        longerr[META_TEXT_MAX - 1] = (char)0xc3; /* 'é' straddling the limit */
        longerr[META_TEXT_MAX] = (char)0xa9;
        longerr[sizeof longerr - 1] = 0;
        assert_int_equal(meta_session_set_state(m, "ses_1", 0, META_SESSION_RUNNING, longerr), 0);
        assert_int_equal(meta_session_get(m, "ses_1", &g), 0);
        assert_int_equal(strlen(g.error), META_TEXT_MAX - 1);
        meta_session_clear(&g);

        printf("# set_sandbox, set_token_hash, check_token\n");
        assert_int_equal(meta_session_set_sandbox(m, "ses_1", "sbx_77"), 0);
        assert_int_equal(meta_session_set_sandbox(m, "ses_1", "ses_77"), -EINVAL);
        assert_int_equal(meta_session_set_sandbox(m, "ses_nope", "sbx_77"), -ENOENT);
        assert_int_equal(meta_session_get(m, "ses_1", &g), 0);
        assert_string_equal(g.sandbox_id, "sbx_77");
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_sandbox(m, "ses_1", NULL), 0);
        assert_int_equal(meta_session_get(m, "ses_1", &g), 0);
        assert_string_equal(g.sandbox_id, "");
        meta_session_clear(&g);

        assert_int_equal(meta_session_check_token(m, "ses_1", "tok"), -EACCES); /* none set */
        char h[META_HASH_HEX + 1];
        assert_int_equal(meta_token_hash("tok", h), 0);
        assert_int_equal(meta_session_set_token_hash(m, "ses_1", h), 0);
        assert_int_equal(meta_session_check_token(m, "ses_1", "tok"), 0);
        assert_int_equal(meta_session_check_token(m, "ses_1", "tok2"), -EACCES);
        assert_int_equal(meta_session_check_token(m, "ses_nope", "tok"), -ENOENT);
        assert_int_equal(meta_session_set_token_hash(m, "ses_1", "abc"), -EINVAL);
        assert_int_equal(meta_session_set_token_hash(m, "ses_nope", h), -ENOENT);

        printf("# set_head: own snapshot only (-EXDEV for another session's, -ENOENT unknown)\n");
        mk_snap(m, "snap_1", "ses_1", META_REASON_MANUAL, 1000, H1);
        mk_snap(m, "snap_2", "ses_2", META_REASON_MANUAL, 1000, H2);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_1"), 0);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_2"), -EXDEV);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_nope"), -ENOENT);
        assert_int_equal(meta_session_set_head(m, "ses_nope", "snap_1"), -ENOENT);
        assert_int_equal(meta_session_get(m, "ses_1", &g), 0);
        assert_string_equal(g.head_snapshot, "snap_1");
        meta_session_clear(&g);

        printf("# delete removes the session with its sandboxes, snapshots and events\n");
        struct meta_sandbox b = { .state = META_SANDBOX_RUNNING };
        strcpy(b.id, "sbx_1");
        strcpy(b.session_id, "ses_1");
        strcpy(b.host_id, "host-a");
        strcpy(b.runtime, "ns");
        assert_int_equal(meta_sandbox_create(m, &b), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "lifecycle", "{}", 2, NULL), 0);
        assert_int_equal(meta_session_delete(m, "ses_1"), 0);
        assert_int_equal(meta_session_get(m, "ses_1", &g), -ENOENT);
        struct meta_snapshot sn;
        assert_int_equal(meta_snapshot_get(m, "snap_1", &sn), -ENOENT);
        assert_int_equal(meta_sandbox_get(m, "sbx_1", &b), -ENOENT);
        struct meta_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(m, "ses_1", 0, 10, &ev, &n), -ENOENT);
        assert_int_equal(meta_session_delete(m, "ses_1"), -ENOENT);
        assert_int_equal(meta_check(m), 0);
}

static void test_session_lists(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        printf("# list by tenant, by state, paged by after_id; the recovery list\n");
        mk_session(m, "ses_a", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_b", "t2", META_SESSION_PAUSED);
        mk_session(m, "ses_c", "t1", META_SESSION_RECOVERING);
        mk_session(m, "ses_d", "t1", META_SESSION_TERMINATED);
        mk_session(m, "ses_e", "t2", META_SESSION_CREATING);
        struct meta_session *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_session_list(m, NULL, &v, &n), 0);
        assert_int_equal(n, 5);
        assert_string_equal(v[0].id, "ses_a");
        assert_string_equal(v[4].id, "ses_e");
        meta_sessions_free(v, n);
        assert_int_equal(meta_session_list(m, &(struct meta_session_filter){ .tenant = "t1" }, &v, &n), 0);
        assert_int_equal(n, 3);
        meta_sessions_free(v, n);
        assert_int_equal(meta_session_list(m,
                                           &(struct meta_session_filter){
                                                   .tenant = "t1",
                                                   .state_mask = META_STATE_BIT(META_SESSION_TERMINATED) |
                                                                 META_STATE_BIT(META_SESSION_PAUSED) },
                                           &v, &n),
                         0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].id, "ses_d");
        meta_sessions_free(v, n);
        assert_int_equal(meta_session_list(m, &(struct meta_session_filter){ .limit = 2 }, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[1].id, "ses_b");
        meta_sessions_free(v, n);
        assert_int_equal(meta_session_list(m, &(struct meta_session_filter){ .limit = 2, .after_id = "ses_b" }, &v, &n),
                         0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].id, "ses_c");
        assert_string_equal(v[1].id, "ses_d");
        meta_sessions_free(v, n);
        assert_int_equal(meta_session_list(m, &(struct meta_session_filter){ .tenant = "nobody" }, &v, &n), 0);
        assert_int_equal(n, 0);
        assert_null(v);
        assert_int_equal(meta_session_list(m, &(struct meta_session_filter){ .state_mask = 1u << 20 }, &v, &n),
                         -EINVAL);

        assert_int_equal(meta_session_list_recover(m, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].id, "ses_a");
        assert_string_equal(v[1].id, "ses_c");
        meta_sessions_free(v, n);
}

static void test_sandboxes(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING);
        printf("# sandbox create/get; unknown session -ENOENT; duplicate -EEXIST\n");
        struct meta_sandbox b = { .state = META_SANDBOX_STARTING };
        strcpy(b.id, "sbx_1");
        strcpy(b.session_id, "ses_1");
        strcpy(b.host_id, "host-a");
        strcpy(b.runtime, "ns");
        assert_int_equal(meta_sandbox_create(m, &b), 0);
        assert_int_equal(meta_sandbox_create(m, &b), -EEXIST);
        struct meta_sandbox o = b;
        strcpy(o.id, "sbx_2");
        strcpy(o.session_id, "ses_nope");
        assert_int_equal(meta_sandbox_create(m, &o), -ENOENT);
        strcpy(o.session_id, "ses_1");
        strcpy(o.id, "ses_2");
        assert_int_equal(meta_sandbox_create(m, &o), -EINVAL);
        strcpy(o.id, "sbx_2");
        o.state = META_SANDBOX_RUNNING;
        o.init_pid = 4242;
        assert_int_equal(meta_sandbox_create(m, &o), 0);

        struct meta_sandbox g;
        assert_int_equal(meta_sandbox_get(m, "sbx_1", &g), 0);
        assert_string_equal(g.session_id, "ses_1");
        assert_string_equal(g.host_id, "host-a");
        assert_int_equal(g.state, META_SANDBOX_STARTING);
        assert_true(g.created_ms > 0);
        assert_int_equal(g.ended_ms, 0);
        memset(&g, 0x33, sizeof g);
        o = g;
        assert_int_equal(meta_sandbox_get(m, "sbx_nope", &g), -ENOENT);
        assert_memory_equal(&g, &o, sizeof g);

        printf("# set_pid, set_state running then dead (ended_ms + reason)\n");
        assert_int_equal(meta_sandbox_set_pid(m, "sbx_1", 1234), 0);
        assert_int_equal(meta_sandbox_set_pid(m, "sbx_nope", 1), -ENOENT);
        assert_int_equal(meta_sandbox_set_state(m, "sbx_1", META_SANDBOX_RUNNING, NULL), 0);
        assert_int_equal(meta_sandbox_get(m, "sbx_1", &g), 0);
        assert_int_equal(g.init_pid, 1234);
        assert_int_equal(g.state, META_SANDBOX_RUNNING);

        printf("# list_live(host) has both; after one dies only the other\n");
        struct meta_sandbox *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_sandbox_list_live(m, "host-a", &v, &n), 0);
        assert_int_equal(n, 2);
        free(v);
        assert_int_equal(meta_sandbox_set_state(m, "sbx_1", META_SANDBOX_DEAD, "oom"), 0);
        assert_int_equal(meta_sandbox_get(m, "sbx_1", &g), 0);
        assert_int_equal(g.state, META_SANDBOX_DEAD);
        assert_true(g.ended_ms > 0);
        assert_string_equal(g.death_reason, "oom");
        assert_int_equal(meta_sandbox_set_state(m, "sbx_nope", META_SANDBOX_DEAD, NULL), -ENOENT);
        assert_int_equal(meta_sandbox_list_live(m, "host-a", &v, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].id, "sbx_2");
        assert_int_equal(v[0].init_pid, 4242);
        free(v);
        assert_int_equal(meta_sandbox_list_live(m, "host-b", &v, &n), 0);
        assert_int_equal(n, 0);
        assert_int_equal(meta_sandbox_list_session(m, "ses_1", &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].id, "sbx_1");
        free(v);
        assert_int_equal(meta_sandbox_list_session(m, "ses_nope", &v, &n), -ENOENT);
}

static void test_snapshots(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_2", "t1", META_SESSION_RUNNING);
        printf("# add/get keeps every field; duplicate -EEXIST, unknown session -ENOENT\n");
        struct meta_snapshot s = { .reason = META_REASON_MANUAL, .time_ms = 5000, .bytes_added = 1ull << 40,
                                   .logical_size = 3ull << 40, .pinned = true };
        strcpy(s.id, "snap_b");
        strcpy(s.session_id, "ses_1");
        strcpy(s.parent_id, "snap_gone");
        strcpy(s.store_hash, H1);
        strcpy(s.root_hash, H2);
        strcpy(s.memory_hash, H3);
        strcpy(s.label, "before refactor");
        assert_int_equal(meta_snapshot_add(m, &s), 0);
        assert_int_equal(meta_snapshot_add(m, &s), -EEXIST);
        struct meta_snapshot g;
        assert_int_equal(meta_snapshot_get(m, "snap_b", &g), 0);
        assert_string_equal(g.id, s.id);
        assert_string_equal(g.session_id, s.session_id);
        assert_string_equal(g.parent_id, s.parent_id);
        assert_string_equal(g.store_hash, H1);
        assert_string_equal(g.root_hash, H2);
        assert_string_equal(g.memory_hash, H3);
        assert_string_equal(g.label, s.label);
        assert_int_equal(g.time_ms, 5000);
        assert_int_equal(g.reason, META_REASON_MANUAL);
        assert_int_equal(g.bytes_added, 1ull << 40);
        assert_int_equal(g.logical_size, 3ull << 40);
        assert_true(g.pinned);
        struct meta_snapshot o = s;
        strcpy(o.id, "snap_c");
        strcpy(o.session_id, "ses_nope");
        assert_int_equal(meta_snapshot_add(m, &o), -ENOENT);
        memset(&g, 0x44, sizeof g);
        o = g;
        assert_int_equal(meta_snapshot_get(m, "snap_nope", &g), -ENOENT);
        assert_memory_equal(&g, &o, sizeof g);

        printf("# label over 256 bytes -E2BIG, exactly 256 fine; bad hashes -EINVAL\n");
        o = s;
        strcpy(o.id, "snap_c");
        memset(o.label, 'x', sizeof o.label); /* no terminator inside the array */
        assert_int_equal(meta_snapshot_add(m, &o), -E2BIG);
        o.label[META_LABEL_MAX] = 0;
        assert_int_equal(meta_snapshot_add(m, &o), 0);
        assert_int_equal(meta_snapshot_get(m, "snap_c", &g), 0);
        assert_int_equal(strlen(g.label), META_LABEL_MAX);
        o = s;
        strcpy(o.id, "snap_d");
        strcpy(o.store_hash, "1234");
        assert_int_equal(meta_snapshot_add(m, &o), -EINVAL);
        strcpy(o.store_hash, H1);
        o.root_hash[5] = 'G';
        assert_int_equal(meta_snapshot_add(m, &o), -EINVAL);
        strcpy(o.root_hash, H2);
        o.reason = _META_REASON_MAX;
        assert_int_equal(meta_snapshot_add(m, &o), -EINVAL);

        printf("# the timeline is in time order; set_pinned; delete (head -EBUSY)\n");
        mk_snap(m, "snap_a", "ses_1", META_REASON_ROLLING, 1000, H3);
        mk_snap(m, "snap_z", "ses_1", META_REASON_ROLLING, 9000, H1);
        mk_snap(m, "snap_x", "ses_2", META_REASON_ROLLING, 1, H2);
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_snapshot_list(m, "ses_1", &v, &n), 0);
        assert_int_equal(n, 4);
        assert_string_equal(v[0].id, "snap_a");
        assert_string_equal(v[1].id, "snap_b");
        assert_string_equal(v[2].id, "snap_c");
        assert_string_equal(v[3].id, "snap_z");
        free(v);
        assert_int_equal(meta_snapshot_list(m, "ses_nope", &v, &n), -ENOENT);
        assert_int_equal(meta_snapshot_set_pinned(m, "snap_a", true), 0);
        assert_int_equal(meta_snapshot_get(m, "snap_a", &g), 0);
        assert_true(g.pinned);
        assert_int_equal(meta_snapshot_set_pinned(m, "snap_nope", true), -ENOENT);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_z"), 0);
        assert_int_equal(meta_snapshot_delete(m, "snap_z"), -EBUSY);
        assert_int_equal(meta_snapshot_delete(m, "snap_a"), 0);
        assert_int_equal(meta_snapshot_delete(m, "snap_a"), -ENOENT);

        printf("# live hashes: each store hash and memory hash once, over every session\n");
        struct meta_hash *hv = NULL;
        assert_int_equal(meta_snapshot_live_hashes(m, &hv, &n), 0);
        /* H1 (snap_b, snap_c, snap_z), H2 (snap_x), H3 (snap_b's memory; snap_a, whose store
         * hash it also was, is deleted) */
        assert_int_equal(n, 3);
        assert_string_equal(hv[0].hex, H1);
        assert_string_equal(hv[1].hex, H2);
        assert_string_equal(hv[2].hex, H3);
        free(hv);
}

static void test_retention(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        printf("# retention: rolling beyond the newest 3, never pinned, manual, head or fork source\n");
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING); /* retention_keep = 3 */
        for (int i = 1; i <= 8; i++) {
                char id[32];
                snprintf(id, sizeof id, "snap_r%d", i);
                mk_snap(m, id, "ses_1", META_REASON_ROLLING, 1000 * i, H1);
        }
        mk_snap(m, "snap_m", "ses_1", META_REASON_MANUAL, 1500, H2);
        mk_snap(m, "snap_p", "ses_1", META_REASON_PAUSE, 2500, H2);
        assert_int_equal(meta_snapshot_set_pinned(m, "snap_r2", true), 0);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_r3"), 0);
        struct meta_session fork = { .state = META_SESSION_RUNNING, .retention_keep = 3 };
        strcpy(fork.id, "ses_f");
        strcpy(fork.tenant, "t1");
        strcpy(fork.runtime, "ns");
        strcpy(fork.parent_session, "ses_1");
        strcpy(fork.source_snapshot, "snap_r4");
        assert_int_equal(meta_session_create(m, &fork), 0);

        struct meta_id *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_snapshot_expired(m, "ses_1", &v, &n), 0);
        /* unpinned rolling newest first: r8 r7 r6 kept; r5 r4 r3 r1 older; r4 fork source, r3 head */
        assert_int_equal(n, 2);
        assert_string_equal(v[0].s, "snap_r1");
        assert_string_equal(v[1].s, "snap_r5");
        free(v);
        v = (struct meta_id *)0x1;
        assert_int_equal(meta_snapshot_expired(m, "ses_nope", &v, &n), -ENOENT);
        assert_ptr_equal(v, (struct meta_id *)0x1);
        assert_int_equal(meta_snapshot_expired(m, "ses_f", &v, &n), 0);
        assert_int_equal(n, 0);
}

static void test_events(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_2", "t1", META_SESSION_RUNNING);
        printf("# append gives 1, 2, 3 … per session; payload and kind kept\n");
        int64_t seq = -1;
        const char *p = "{\"cmd\":\"ls\",\"exit\":0}";
        assert_int_equal(meta_event_append(m, "ses_1", "exec", p, strlen(p), &seq), 0);
        assert_int_equal(seq, 1);
        assert_int_equal(meta_event_append(m, "ses_2", "lifecycle", "{}", 2, &seq), 0);
        assert_int_equal(seq, 1);
        assert_int_equal(meta_begin(m), 0);
        for (int i = 2; i <= 1500; i++) {
                char buf[64];
                int k = snprintf(buf, sizeof buf, "{\"i\":%d}", i);
                assert_int_equal(meta_event_append(m, "ses_1", "agent", buf, (size_t)k, &seq), 0);
                assert_int_equal(seq, i);
        }
        assert_int_equal(meta_commit(m), 0);
        assert_int_equal(meta_event_last_seq(m, "ses_1", &seq), 0);
        assert_int_equal(seq, 1500);

        printf("# paging: after_seq + limit; limit 0 or over 1000 gives 1000\n");
        struct meta_event *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(m, "ses_1", 0, 10, &v, &n), 0);
        assert_int_equal(n, 10);
        assert_int_equal(v[0].seq, 1);
        assert_string_equal(v[0].kind, "exec");
        assert_string_equal(v[0].payload, p);
        assert_int_equal(v[0].payload_len, strlen(p));
        assert_true(v[0].time_ms > 0);
        assert_int_equal(v[9].seq, 10);
        meta_events_free(v, n);
        assert_int_equal(meta_event_list(m, "ses_1", 10, 5, &v, &n), 0);
        assert_int_equal(n, 5);
        assert_int_equal(v[0].seq, 11);
        assert_string_equal(v[0].payload, "{\"i\":11}");
        meta_events_free(v, n);
        assert_int_equal(meta_event_list(m, "ses_1", 0, 0, &v, &n), 0);
        assert_int_equal(n, META_PAGE_MAX);
        meta_events_free(v, n);
        assert_int_equal(meta_event_list(m, "ses_1", 1000, 5000, &v, &n), 0);
        assert_int_equal(n, 500);
        assert_int_equal(v[499].seq, 1500);
        meta_events_free(v, n);
        assert_int_equal(meta_event_list(m, "ses_1", 1500, 10, &v, &n), 0);
        assert_int_equal(n, 0);
        meta_events_free(v, n);

        printf("# errors: unknown session -ENOENT, bad kind / not JSON -EINVAL, over 64 KiB -E2BIG\n");
        seq = -7;
        assert_int_equal(meta_event_append(m, "ses_nope", "exec", "{}", 2, &seq), -ENOENT);
        assert_int_equal(meta_event_append(m, "ses_1", "Exec", "{}", 2, &seq), -EINVAL);
        assert_int_equal(meta_event_append(m, "ses_1", "", "{}", 2, &seq), -EINVAL);
        assert_int_equal(meta_event_append(m, "ses_1", "exec", "{nope", 5, &seq), -EINVAL);
        assert_int_equal(meta_event_append(m, "ses_1", "exec", "{}\0x", 4, &seq), -EINVAL);
        assert_int_equal(seq, -7);
        v = (struct meta_event *)0x1;
        assert_int_equal(meta_event_list(m, "ses_nope", 0, 10, &v, &n), -ENOENT);
        assert_ptr_equal(v, (struct meta_event *)0x1);
        assert_int_equal(meta_event_last_seq(m, "ses_nope", &seq), -ENOENT);
        assert_int_equal(seq, -7);

        _cleanup_free_ char *big = malloc(META_JSON_MAX + 1);
        assert_non_null(big);
        memset(big, 'a', META_JSON_MAX + 1);
        big[0] = '"';
        big[META_JSON_MAX] = '"';
        assert_int_equal(meta_event_append(m, "ses_2", "agent", big, META_JSON_MAX + 1, &seq), -E2BIG);
        assert_non_null(strstr(meta_last_error(m), "limit"));
        big[META_JSON_MAX - 1] = '"';
        printf("# a page holds about 4 MiB of payload at most (always at least one event)\n");
        assert_int_equal(meta_begin(m), 0);
        for (int i = 0; i < 70; i++)
                assert_int_equal(meta_event_append(m, "ses_2", "agent", big, META_JSON_MAX, &seq), 0);
        assert_int_equal(meta_commit(m), 0);
        assert_int_equal(seq, 71);
        assert_int_equal(meta_event_list(m, "ses_2", 1, 1000, &v, &n), 0);
        assert_int_equal(n, META_PAGE_MAX_BYTES / META_JSON_MAX);
        assert_int_equal(v[0].payload_len, META_JSON_MAX);
        assert_int_equal(v[n - 1].seq, 1 + (int64_t)n);
        int64_t next = v[n - 1].seq;
        meta_events_free(v, n);
        assert_int_equal(meta_event_list(m, "ses_2", next, 1000, &v, &n), 0);
        assert_int_equal(n, 71 - next);
        meta_events_free(v, n);
}

/* Schema 3 (before the network room's texts): sessions read as having none, and the
 * texts a session gets are kept, changed and cleared. */
static void test_migrate_v3_network(void **state) {
        struct fx *f = *state;
        printf("# a schema 3 file migrates to 4; its sessions have no network policy and no ports\n");
        mk_session(f->m, "ses_d1", "t1", META_SESSION_RUNNING);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 3);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        struct meta_session g;
        assert_int_equal(meta_session_get(f->m, "ses_d1", &g), 0);
        assert_null(g.network_json);
        assert_null(g.ports_json);
        meta_session_clear(&g);
        printf("#   a policy and ports set on it read back, and clear again\n");
        assert_int_equal(meta_session_set_network(f->m, "ses_d1", "{\"egress\":true}"), 0);
        assert_int_equal(meta_session_set_ports(f->m, "ses_d1", "[8000]"), 0);
        assert_int_equal(meta_session_get(f->m, "ses_d1", &g), 0);
        assert_string_equal(g.network_json, "{\"egress\":true}");
        assert_string_equal(g.ports_json, "[8000]");
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_network(f->m, "ses_d1", ""), 0);
        assert_int_equal(meta_session_get(f->m, "ses_d1", &g), 0);
        assert_null(g.network_json);
        assert_string_equal(g.ports_json, "[8000]");
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_ports(f->m, "ses_nope", "[1]"), -ENOENT);
        _cleanup_free_ char *big = malloc((256u << 10) + 2);
        memset(big, 'x', (256u << 10) + 1);
        big[(256u << 10) + 1] = 0;
        assert_int_equal(meta_session_set_network(f->m, "ses_d1", big), -E2BIG);
        printf("#   and a new session is created with them\n");
        struct meta_session s = { .state = META_SESSION_CREATING, .network_json = "{\"egress\":false}",
                                  .ports_json = "[3000]" };
        strcpy(s.id, "ses_d2");
        strcpy(s.tenant, "t1");
        strcpy(s.runtime, "ns");
        assert_int_equal(meta_session_create(f->m, &s), 0);
        assert_int_equal(meta_session_get(f->m, "ses_d2", &g), 0);
        assert_string_equal(g.network_json, "{\"egress\":false}");
        assert_string_equal(g.ports_json, "[3000]");
        meta_session_clear(&g);
        assert_int_equal(meta_check(f->m), 0);
}

/* Schema 4 (before the lifecycle timeouts): sessions read as having none; the text a
 * session gets is kept, changed and cleared, and a new session is created with one. */
static void test_migrate_v4_timeouts(void **state) {
        struct fx *f = *state;
        printf("# a schema 4 file migrates to 5; its sessions have no timeouts\n");
        mk_session(f->m, "ses_e1", "t1", META_SESSION_PAUSED);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 4);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        struct meta_session g;
        assert_int_equal(meta_session_get(f->m, "ses_e1", &g), 0);
        assert_null(g.timeouts_json);
        meta_session_clear(&g);
        printf("#   timeouts set on it read back, and clear again\n");
        assert_int_equal(meta_session_set_timeouts(f->m, "ses_e1", "{\"idle_timeout_s\":60}"), 0);
        assert_int_equal(meta_session_get(f->m, "ses_e1", &g), 0);
        assert_string_equal(g.timeouts_json, "{\"idle_timeout_s\":60}");
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_timeouts(f->m, "ses_e1", NULL), 0);
        assert_int_equal(meta_session_get(f->m, "ses_e1", &g), 0);
        assert_null(g.timeouts_json);
        meta_session_clear(&g);
        assert_int_equal(meta_session_set_timeouts(f->m, "ses_nope", "{}"), -ENOENT);
        printf("#   and a new session is created with them\n");
        struct meta_session s = { .state = META_SESSION_CREATING, .timeouts_json = "{\"auto_resume\":true}" };
        strcpy(s.id, "ses_e2");
        strcpy(s.tenant, "t1");
        strcpy(s.runtime, "ns");
        assert_int_equal(meta_session_create(f->m, &s), 0);
        assert_int_equal(meta_session_get(f->m, "ses_e2", &g), 0);
        assert_string_equal(g.timeouts_json, "{\"auto_resume\":true}");
        meta_session_clear(&g);
        assert_int_equal(meta_check(f->m), 0);
}

/* Schema 5 (before session metadata): sessions read as having none; a new session keeps
 * its metadata, and one that is not a JSON object is refused. */
static void test_migrate_v5_metadata(void **state) {
        struct fx *f = *state;
        printf("# a schema 5 file migrates to 6; its sessions have no metadata\n");
        mk_session(f->m, "ses_f1", "t1", META_SESSION_RUNNING);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 5);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        struct meta_session g;
        assert_int_equal(meta_session_get(f->m, "ses_f1", &g), 0);
        assert_null(g.metadata_json);
        meta_session_clear(&g);
        printf("#   a new session is created with metadata, which reads back\n");
        struct meta_session s = { .state = META_SESSION_CREATING, .metadata_json = "{\"a\":\"b c\"}" };
        strcpy(s.id, "ses_f2");
        strcpy(s.tenant, "t1");
        strcpy(s.runtime, "ns");
        assert_int_equal(meta_session_create(f->m, &s), 0);
        assert_int_equal(meta_session_get(f->m, "ses_f2", &g), 0);
        assert_string_equal(g.metadata_json, "{\"a\":\"b c\"}");
        meta_session_clear(&g);
        printf("#   metadata that is not a JSON object is refused\n");
        strcpy(s.id, "ses_f3");
        s.metadata_json = "[1]";
        assert_int_equal(meta_session_create(f->m, &s), -EINVAL);
        assert_int_equal(meta_session_get(f->m, "ses_f3", &g), -ENOENT);
        assert_int_equal(meta_check(f->m), 0);
}

/* Replication: snapshots are added unreplicated (whatever the caller's field says), the
 * list of unreplicated ones spans sessions oldest first within its limit, set_replicated
 * takes one off it and back, and the count follows. */
static void test_replicated(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_2", "t1", META_SESSION_RUNNING);
        printf("# new snapshots are unreplicated; the list is oldest first over every session\n");
        struct meta_snapshot s = { .reason = META_REASON_MANUAL, .time_ms = 3000, .replicated = true };
        strcpy(s.id, "snap_r3");
        strcpy(s.session_id, "ses_1");
        strcpy(s.store_hash, H1);
        strcpy(s.root_hash, H2);
        assert_int_equal(meta_snapshot_add(m, &s), 0);
        mk_snap(m, "snap_r1", "ses_2", META_REASON_ROLLING, 1000, H2);
        mk_snap(m, "snap_r2", "ses_1", META_REASON_PAUSE, 2000, H3);
        struct meta_snapshot g;
        assert_int_equal(meta_snapshot_get(m, "snap_r3", &g), 0);
        assert_false(g.replicated);
        uint64_t cnt = 99;
        assert_int_equal(meta_snapshot_count_unreplicated(m, &cnt), 0);
        assert_int_equal(cnt, 3);
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_snapshot_unreplicated(m, 10, &v, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(v[0].id, "snap_r1");
        assert_string_equal(v[1].id, "snap_r2");
        assert_string_equal(v[2].id, "snap_r3");
        assert_string_equal(v[2].store_hash, H1);
        free(v);
        printf("# the limit bounds the list; 0 or past META_UNREPLICATED_MAX is -EINVAL\n");
        assert_int_equal(meta_snapshot_unreplicated(m, 2, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[1].id, "snap_r2");
        free(v);
        v = (void *)&g;
        n = 77;
        assert_int_equal(meta_snapshot_unreplicated(m, 0, &v, &n), -EINVAL);
        assert_int_equal(meta_snapshot_unreplicated(m, META_UNREPLICATED_MAX + 1, &v, &n), -EINVAL);
        assert_ptr_equal(v, &g);
        assert_int_equal(n, 77);
        printf("# set_replicated takes one off the list, and back; unknown -ENOENT\n");
        assert_int_equal(meta_snapshot_set_replicated(m, "snap_r2", true), 0);
        assert_int_equal(meta_snapshot_get(m, "snap_r2", &g), 0);
        assert_true(g.replicated);
        assert_int_equal(meta_snapshot_unreplicated(m, 10, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].id, "snap_r1");
        assert_string_equal(v[1].id, "snap_r3");
        free(v);
        assert_int_equal(meta_snapshot_count_unreplicated(m, &cnt), 0);
        assert_int_equal(cnt, 2);
        assert_int_equal(meta_snapshot_list(m, "ses_1", &v, &n), 0);
        assert_int_equal(n, 2);
        assert_true(v[0].replicated);  /* snap_r2 at 2000 */
        assert_false(v[1].replicated); /* snap_r3 */
        free(v);
        assert_int_equal(meta_snapshot_set_replicated(m, "snap_nope", true), -ENOENT);
        assert_int_equal(meta_snapshot_set_replicated(m, "snap_r2", false), 0);
        assert_int_equal(meta_snapshot_count_unreplicated(m, &cnt), 0);
        assert_int_equal(cnt, 3);
        printf("# a deleted snapshot leaves the list\n");
        assert_int_equal(meta_snapshot_delete(m, "snap_r1"), 0);
        assert_int_equal(meta_snapshot_unreplicated(m, 10, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].id, "snap_r2");
        free(v);
        assert_int_equal(meta_check(f->m), 0);
}

/* A schema 6 file (before replication): its snapshots read as unreplicated, and the list
 * of unreplicated ones has them all. */
static void test_migrate_v6_replicated(void **state) {
        struct fx *f = *state;
        printf("# a schema 6 file migrates to 7; its snapshots are unreplicated\n");
        mk_session(f->m, "ses_g1", "t1", META_SESSION_RUNNING);
        mk_snap(f->m, "snap_g1", "ses_g1", META_REASON_ROLLING, 1000, H1);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 6);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        struct meta_snapshot g;
        assert_int_equal(meta_snapshot_get(f->m, "snap_g1", &g), 0);
        assert_false(g.replicated);
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_snapshot_unreplicated(f->m, 5, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].id, "snap_g1");
        free(v);
        assert_int_equal(meta_check(f->m), 0);
}

/* Schema 2 (before the event bounds): the events already there are counted, the posted
 * kinds as posted, and the bounds apply to them from the first post on. */
static void test_migrate_v2(void **state) {
        struct fx *f = *state;
        printf("# a schema 2 file migrates to 4, counting the events it has: 3 posted, 2 of spaced's\n");
        mk_session(f->m, "ses_c1", "t1", META_SESSION_RUNNING);
        f->m = meta_free(f->m);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
        downgrade_to(db, 2);
        assert_int_equal(sqlite3_exec(db, "INSERT INTO events VALUES ('ses_c1', 1, 0, 'lifecycle', '{}');"
                                          "INSERT INTO events VALUES ('ses_c1', 2, 0, 'agent', '\"aaaa\"');"
                                          "INSERT INTO events VALUES ('ses_c1', 3, 0, 'note', '\"bbbb\"');"
                                          "INSERT INTO events VALUES ('ses_c1', 4, 0, 'exec', '{}');"
                                          "INSERT INTO events VALUES ('ses_c1', 5, 0, 'tool_call', '\"cccc\"');"
                                          "UPDATE sessions SET event_seq = 5", NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
        assert_int_equal(meta_open(f->path, NULL, &f->m), 0);
        assert_int_equal(meta_schema_version(f->m), SCHEMA_NOW);
        assert_int_equal(meta_check(f->m), 0);
        printf("#   with 2 posted events kept, one post removes the two oldest posted (seq 2, 3), not spaced's\n");
        meta_set_event_bounds(f->m, &(struct meta_event_bounds){ .agent_events = 2 });
        int64_t seq = 0;
        assert_int_equal(meta_event_post(f->m, "ses_c1", "agent", "1", 1, &seq), 0);
        assert_int_equal(seq, 6);
        struct meta_event *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(f->m, "ses_c1", 0, 100, &v, &n), 0);
        assert_int_equal(n, 4);
        int64_t want[] = { 1, 4, 5, 6 };
        for (size_t i = 0; i < n; i++)
                assert_int_equal(v[i].seq, want[i]);
        meta_events_free(v, n);
}

static size_t event_count_of(struct meta *m, const char *id, int64_t *first) {
        struct meta_event *v = NULL;
        size_t n = 0, total = 0;
        int64_t after = 0;
        *first = 0;
        for (int pages = 0; pages < 100; pages++) {
                assert_int_equal(meta_event_list(m, id, after, 1000, &v, &n), 0);
                if (n && !*first)
                        *first = v[0].seq;
                total += n;
                after = n ? v[n - 1].seq : after;
                meta_events_free(v, n);
                if (n == 0)
                        break;
        }
        return total;
}

static void test_event_bounds(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        mk_session(m, "ses_1", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_2", "t1", META_SESSION_RUNNING);
        mk_session(m, "ses_3", "t2", META_SESSION_RUNNING);
        meta_set_event_bounds(m, &(struct meta_event_bounds){
                .agent_events = 10, .agent_bytes = 100, .tenant_bytes = 150, .system_events = 5 });
        int64_t seq = 0, first = 0;
        printf("# posts past agent_events remove the oldest posted events: 25 posted, 10 kept\n");
        assert_int_equal(meta_event_append(m, "ses_1", "lifecycle", "{}", 2, &seq), 0);
        for (int i = 0; i < 25; i++)
                assert_int_equal(meta_event_post(m, "ses_1", "agent", "1", 1, &seq), 0);
        assert_int_equal(seq, 26);
        assert_int_equal(event_count_of(m, "ses_1", &first), 11);
        printf("#   spaced's own event (seq 1) is kept, the posted ones are 17..26\n");
        assert_int_equal(first, 1);
        struct meta_event *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(m, "ses_1", 1, 1, &v, &n), 0);
        assert_int_equal(v[0].seq, 17);
        meta_events_free(v, n);

        printf("# posts past agent_bytes remove the oldest too: 100 bytes kept of 30-byte posts\n");
        const char *p30 = "\"0123456789012345678901234567\""; /* 30 bytes */
        assert_int_equal(strlen(p30), 30);
        for (int i = 0; i < 6; i++)
                assert_int_equal(meta_event_post(m, "ses_2", "note", p30, 30, &seq), 0);
        assert_int_equal(event_count_of(m, "ses_2", &first), 3);
        printf("# one post over agent_bytes alone is -E2BIG, nothing written\n");
        char big[128];
        memset(big, 'x', sizeof big);
        big[0] = big[120] = '"';
        assert_int_equal(meta_event_post(m, "ses_2", "note", big, 121, &seq), -E2BIG);
        assert_int_equal(event_count_of(m, "ses_2", &first), 3);

        printf("# the tenant's sessions together: past tenant_bytes (150) a post is -EDQUOT, nothing written\n");
        /* t1 holds 10 (ses_1) + 90 (ses_2); ses_1 may grow to 100 bytes, past 150 in all */
        int r = 0, ok = 0;
        for (int i = 0; i < 100 && r == 0; i++) {
                r = meta_event_post(m, "ses_1", "agent", p30, 30, &seq);
                ok += r == 0;
        }
        assert_int_equal(r, -EDQUOT);
        assert_true(ok >= 1);
        assert_non_null(strstr(meta_last_error(m), "most is 150"));
        int64_t last = 0;
        assert_int_equal(meta_event_last_seq(m, "ses_1", &last), 0);
        assert_int_equal(last, seq);
        printf("#   another tenant is not held back by t1's bytes\n");
        assert_int_equal(meta_event_post(m, "ses_3", "agent", p30, 30, &seq), 0);

        printf("# spaced's own events are bounded apart (system_events 5); posts never remove them\n");
        for (int i = 0; i < 12; i++)
                assert_int_equal(meta_event_append(m, "ses_3", "lifecycle", "{}", 2, &seq), 0);
        assert_int_equal(event_count_of(m, "ses_3", &first), 6);
        assert_int_equal(meta_event_list(m, "ses_3", 0, 1, &v, &n), 0);
        assert_string_equal(v[0].kind, "agent"); /* the posted one, older than all of them */
        meta_events_free(v, n);

        printf("# deleting a session frees its tenant's bytes\n");
        assert_int_equal(meta_session_delete(m, "ses_2"), 0);
        assert_int_equal(meta_event_post(m, "ses_1", "agent", p30, 30, &seq), 0);
        assert_int_equal(meta_check(m), 0);
}

static void test_hosts_tokens(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        printf("# host leases: renew creates then updates; expired list; delete\n");
        assert_int_equal(meta_host_renew(m, "host-a", "10.0.0.1:7000", 5000), 0);
        assert_int_equal(meta_host_renew(m, "host-b", NULL, 9000), 0);
        assert_int_equal(meta_host_renew(m, "host-a", "10.0.0.1:7001", 7000), 0);
        struct meta_host h;
        assert_int_equal(meta_host_get(m, "host-a", &h), 0);
        assert_string_equal(h.address, "10.0.0.1:7001");
        assert_int_equal(h.lease_expires_ms, 7000);
        assert_true(h.updated_ms > 0);
        memset(&h, 0x11, sizeof h);
        struct meta_host o = h;
        assert_int_equal(meta_host_get(m, "host-z", &h), -ENOENT);
        assert_memory_equal(&h, &o, sizeof h);
        struct meta_host *v = NULL;
        size_t n = 0;
        assert_int_equal(meta_host_list_expired(m, 8000, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].id, "host-a");
        free(v);
        assert_int_equal(meta_host_list_expired(m, 10000, &v, &n), 0);
        assert_int_equal(n, 2);
        free(v);
        assert_int_equal(meta_host_renew(m, "bad host", NULL, 1), -EINVAL);
        char addr[META_ADDRESS_MAX + 2];
        memset(addr, 'a', sizeof addr - 1);
        addr[sizeof addr - 1] = 0;
        assert_int_equal(meta_host_renew(m, "host-c", addr, 1), -E2BIG);
        assert_int_equal(meta_host_delete(m, "host-a"), 0);
        assert_int_equal(meta_host_delete(m, "host-a"), -ENOENT);

        printf("# API tokens: create by hash, lookup, revoke (then -EKEYREVOKED), duplicates -EEXIST\n");
        char th[META_HASH_HEX + 1];
        assert_int_equal(meta_token_hash("tok-123", th), 0);
        assert_int_equal(meta_token_create(m, th, "acme", "ci"), 0);
        assert_int_equal(meta_token_create(m, th, "acme", "ci"), -EEXIST);
        assert_int_equal(meta_token_create(m, "tok-123", "acme", NULL), -EINVAL); /* never the token itself */
        assert_int_equal(meta_token_create(m, H1, "", NULL), -EINVAL);
        struct meta_token t;
        assert_int_equal(meta_token_lookup(m, th, &t), 0);
        assert_string_equal(t.tenant, "acme");
        assert_string_equal(t.name, "ci");
        assert_string_equal(t.hash, th);
        assert_int_equal(t.revoked_ms, 0);
        memset(&t, 0x22, sizeof t);
        struct meta_token ot = t;
        assert_int_equal(meta_token_lookup(m, H1, &t), -ENOENT);
        assert_int_equal(meta_token_revoke(m, th), 0);
        assert_int_equal(meta_token_lookup(m, th, &t), -EKEYREVOKED);
        assert_memory_equal(&t, &ot, sizeof t);
        assert_int_equal(meta_token_revoke(m, th), 0);
        assert_int_equal(meta_token_revoke(m, H1), -ENOENT);
}

static void test_reopen(void **state) {
        struct fx *f = *state;
        printf("# everything written is there after close and reopen\n");
        mk_session(f->m, "ses_1", "t1", META_SESSION_RUNNING);
        mk_snap(f->m, "snap_1", "ses_1", META_REASON_PAUSE, 100, H1);
        assert_int_equal(meta_session_set_head(f->m, "ses_1", "snap_1"), 0);
        assert_int_equal(meta_session_set_state(f->m, "ses_1", 0, META_SESSION_PAUSED, NULL), 0);
        assert_int_equal(meta_event_append(f->m, "ses_1", "lifecycle", "{\"to\":\"paused\"}", 15, NULL), 0);
        struct meta_sandbox b = { .state = META_SANDBOX_DESTROYED };
        strcpy(b.id, "sbx_1");
        strcpy(b.session_id, "ses_1");
        strcpy(b.host_id, "h");
        strcpy(b.runtime, "ns");
        assert_int_equal(meta_sandbox_create(f->m, &b), 0);
        assert_int_equal(meta_host_renew(f->m, "h", NULL, 42), 0);
        assert_int_equal(meta_token_create(f->m, H3, "t1", NULL), 0);
        reopen(f);
        struct meta_session s;
        assert_int_equal(meta_session_get(f->m, "ses_1", &s), 0);
        assert_int_equal(s.state, META_SESSION_PAUSED);
        assert_string_equal(s.head_snapshot, "snap_1");
        meta_session_clear(&s);
        struct meta_snapshot sn;
        assert_int_equal(meta_snapshot_get(f->m, "snap_1", &sn), 0);
        assert_int_equal(sn.reason, META_REASON_PAUSE);
        struct meta_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(f->m, "ses_1", 0, 10, &ev, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(ev[0].payload, "{\"to\":\"paused\"}");
        meta_events_free(ev, n);
        assert_int_equal(meta_sandbox_get(f->m, "sbx_1", &b), 0);
        struct meta_host h;
        assert_int_equal(meta_host_get(f->m, "h", &h), 0);
        assert_int_equal(h.lease_expires_ms, 42);
        struct meta_token t;
        assert_int_equal(meta_token_lookup(f->m, H3, &t), 0);
        printf("# the next event continues the sequence\n");
        int64_t seq = 0;
        assert_int_equal(meta_event_append(f->m, "ses_1", "lifecycle", "{}", 2, &seq), 0);
        assert_int_equal(seq, 2);
        assert_int_equal(meta_check(f->m), 0);
}

static void test_relaxed(void **state) {
        struct fx *f = *state;
        printf("# relaxed commits (no fsync) are still atomic and survive the handle's end\n");
        mk_session(f->m, "ses_1", "t1", META_SESSION_CREATING);
        assert_int_equal(meta_set_relaxed(f->m, true), 0);
        assert_int_equal(meta_event_append(f->m, "ses_1", "exec", "{\"n\":1}", 7, NULL), 0);
        assert_int_equal(meta_begin(f->m), 0);
        assert_int_equal(meta_event_append(f->m, "ses_1", "exec", "{\"n\":2}", 7, NULL), 0);
        assert_int_equal(meta_session_set_state(f->m, "ses_1", 0, META_SESSION_RUNNING, NULL), 0);
        assert_int_equal(meta_rollback(f->m), 0);
        assert_int_equal(meta_set_relaxed(f->m, false), 0);
        printf("# a rolled back relaxed transaction left nothing; the relaxed append is there\n");
        reopen(f);
        struct meta_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(f->m, "ses_1", 0, 10, &ev, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(ev[0].payload, "{\"n\":1}");
        meta_events_free(ev, n);
        struct meta_session s;
        assert_int_equal(meta_session_get(f->m, "ses_1", &s), 0);
        assert_int_equal(s.state, META_SESSION_CREATING);
        meta_session_clear(&s);
        printf("# relaxed, then a full commit after it: both there, in order\n");
        assert_int_equal(meta_set_relaxed(f->m, true), 0);
        assert_int_equal(meta_event_append(f->m, "ses_1", "exec", "{\"n\":3}", 7, NULL), 0);
        assert_int_equal(meta_set_relaxed(f->m, false), 0);
        assert_int_equal(meta_session_set_state(f->m, "ses_1", 0, META_SESSION_RUNNING, NULL), 0);
        reopen(f);
        assert_int_equal(meta_event_list(f->m, "ses_1", 0, 10, &ev, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ev[1].payload, "{\"n\":3}");
        meta_events_free(ev, n);
        assert_int_equal(meta_session_get(f->m, "ses_1", &s), 0);
        assert_int_equal(s.state, META_SESSION_RUNNING);
        meta_session_clear(&s);
        assert_int_equal(meta_check(f->m), 0);
}

static void count_all(struct meta *m, size_t *sessions, size_t *snaps, int64_t *last_seq) {
        struct meta_session *v = NULL;
        assert_int_equal(meta_session_list(m, NULL, &v, sessions), 0);
        meta_sessions_free(v, *sessions);
        struct meta_hash *h = NULL;
        assert_int_equal(meta_snapshot_live_hashes(m, &h, snaps), 0);
        free(h);
        *last_seq = 0;
        (void)meta_event_last_seq(m, "ses_1", last_seq);
}

static void test_transactions(void **state) {
        struct fx *f = *state;
        struct meta *m = f->m;
        size_t ns, nsn;
        int64_t seq;
        printf("# a rolled-back transaction leaves nothing\n");
        assert_int_equal(meta_begin(m), 0);
        mk_session(m, "ses_1", "t1", META_SESSION_CREATING);
        mk_snap(m, "snap_1", "ses_1", META_REASON_FORK, 1, H1);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_1"), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "lifecycle", "{}", 2, NULL), 0);
        assert_int_equal(meta_rollback(m), 0);
        count_all(m, &ns, &nsn, &seq);
        assert_int_equal(ns, 0);
        assert_int_equal(nsn, 0);
        assert_int_equal(seq, 0);

        printf("# a committed one keeps all of it; a failing call inside undoes only itself\n");
        assert_int_equal(meta_begin(m), 0);
        mk_session(m, "ses_1", "t1", META_SESSION_CREATING);
        mk_snap(m, "snap_1", "ses_1", META_REASON_FORK, 1, H1);
        assert_int_equal(meta_event_append(m, "ses_nope", "lifecycle", "{}", 2, NULL), -ENOENT);
        struct meta_snapshot dup = { .reason = META_REASON_FORK };
        strcpy(dup.id, "snap_1");
        strcpy(dup.session_id, "ses_1");
        strcpy(dup.store_hash, H2);
        strcpy(dup.root_hash, H2);
        assert_int_equal(meta_snapshot_add(m, &dup), -EEXIST);
        assert_int_equal(meta_session_set_head(m, "ses_1", "snap_1"), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "lifecycle", "{}", 2, NULL), 0);
        assert_int_equal(meta_commit(m), 0);
        reopen(f);
        m = f->m;
        count_all(m, &ns, &nsn, &seq);
        assert_int_equal(ns, 1);
        assert_int_equal(nsn, 1);
        assert_int_equal(seq, 1);

        printf("# nested: the inner rollback drops only the inner writes\n");
        assert_int_equal(meta_begin(m), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "a", "1", 1, NULL), 0);
        assert_int_equal(meta_begin(m), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "b", "2", 1, NULL), 0);
        mk_session(m, "ses_2", "t1", META_SESSION_CREATING);
        assert_int_equal(meta_rollback(m), 0);
        assert_int_equal(meta_begin(m), 0);
        assert_int_equal(meta_event_append(m, "ses_1", "c", "3", 1, NULL), 0);
        assert_int_equal(meta_commit(m), 0);
        assert_int_equal(meta_commit(m), 0);
        struct meta_event *ev = NULL;
        size_t n = 0;
        assert_int_equal(meta_event_list(m, "ses_1", 1, 10, &ev, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ev[0].kind, "a");
        assert_string_equal(ev[1].kind, "c");
        assert_int_equal(ev[1].seq, 3); /* b's 3 went with the rollback, unacknowledged */
        meta_events_free(ev, n);
        count_all(m, &ns, &nsn, &seq);
        assert_int_equal(ns, 1);

        printf("# commit/rollback without a transaction -EINVAL; meta_free rolls back an open one\n");
        assert_int_equal(meta_commit(m), -EINVAL);
        assert_int_equal(meta_rollback(m), -EINVAL);
        assert_int_equal(meta_begin(m), 0);
        mk_session(m, "ses_3", "t1", META_SESSION_CREATING);
        reopen(f);
        m = f->m;
        struct meta_session s;
        assert_int_equal(meta_session_get(m, "ses_3", &s), -ENOENT);
}

static void test_two_handles(void **state) {
        struct fx *f = *state;
        printf("# a second handle on the same file sees committed writes, not open transactions\n");
        _cleanup_meta_ struct meta *m2 = NULL;
        assert_int_equal(meta_open(f->path, &(struct meta_opts){ META_OPTS_INIT, .busy_timeout_ms = 50 }, &m2), 0);
        mk_session(f->m, "ses_1", "t1", META_SESSION_RUNNING);
        struct meta_session s;
        assert_int_equal(meta_session_get(m2, "ses_1", &s), 0);
        meta_session_clear(&s);
        assert_int_equal(meta_begin(f->m), 0);
        mk_session(f->m, "ses_2", "t1", META_SESSION_RUNNING);
        assert_int_equal(meta_session_get(m2, "ses_2", &s), -ENOENT);
        printf("# while one handle writes, the other's write waits, then fails with -EBUSY\n");
        assert_int_equal(meta_event_append(m2, "ses_1", "x", "1", 1, NULL), -EBUSY);
        assert_int_equal(meta_commit(f->m), 0);
        assert_int_equal(meta_session_get(m2, "ses_2", &s), 0);
        meta_session_clear(&s);
        assert_int_equal(meta_event_append(m2, "ses_1", "x", "1", 1, NULL), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_ids_and_hash),
                cmocka_unit_test_setup_teardown(test_open_migrate, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v1, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_session_updates, setup, teardown),
                cmocka_unit_test_setup_teardown(test_session_lists, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sandboxes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_snapshots, setup, teardown),
                cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
                cmocka_unit_test_setup_teardown(test_events, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v2, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v3_network, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v4_timeouts, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v5_metadata, setup, teardown),
                cmocka_unit_test_setup_teardown(test_event_bounds, setup, teardown),
                cmocka_unit_test_setup_teardown(test_hosts_tokens, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
                cmocka_unit_test_setup_teardown(test_relaxed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_two_handles, setup, teardown),
                cmocka_unit_test_setup_teardown(test_replicated, setup, teardown),
                cmocka_unit_test_setup_teardown(test_migrate_v6_replicated, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
