/* Crash test of the metadata store: a child writes snapshots and events (in multi-call
 * transactions and as single calls) and reports every acknowledged write through a pipe;
 * the parent kill -9s it at random moments, reopens the file, and checks that every
 * acknowledged row is there, the event sequence has no hole, and the file is intact.
 * META_CRASH_ROUNDS (default 25) and META_CRASH_SEED override the defaults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <cmocka.h>

#include "common/macros.h"
#include "meta/meta.h"

#define SESSION "ses_c0ffee"
#define MAX_ACKS 200000

struct ack {
        int64_t seq;   /* event sequence acknowledged */
        char snap[32]; /* snapshot acknowledged with it, "" for a lone event */
};

static struct ack acks[MAX_ACKS];
static size_t n_acks;

static const char HASH[] = "abababababababababababababababababababababababababababababababab";

static _noreturn_ void child_fail(struct meta *m, const char *what, int r) {
        fprintf(stderr, "child: %s: %s (%s)\n", what, strerror(-r), m ? meta_last_error(m) : "");
        _exit(2);
}

/* Writes forever; each line on fd is one acknowledged write: "<seq> <snapshot id or ->". */
static _noreturn_ void child(const char *path, int fd, int round, unsigned seed) {
        struct meta *m = NULL;
        int r = meta_open(path, NULL, &m);
        if (r < 0)
                child_fail(NULL, "open", r);
        struct meta_session s = { .state = META_SESSION_RUNNING, .retention_keep = 5 };
        strcpy(s.id, SESSION);
        strcpy(s.tenant, "crash");
        strcpy(s.runtime, "ns");
        r = meta_session_create(m, &s);
        if (r < 0 && r != -EEXIST)
                child_fail(m, "create session", r);
        static char pad[8192];
        memset(pad, 'p', sizeof pad);
        srand(seed);
        for (int i = 0;; i++) {
                char payload[sizeof pad + 64], snap[32], line[64];
                int plen = snprintf(payload, sizeof payload, "{\"round\":%d,\"i\":%d,\"pad\":\"%.*s\"}", round, i,
                                    rand() % (int)sizeof pad, pad);
                int64_t seq = 0;
                if (i % 3 == 2) {
                        /* a lone event: its own transaction */
                        r = meta_event_append(m, SESSION, "agent", payload, (size_t)plen, &seq);
                        if (r < 0)
                                child_fail(m, "append", r);
                        snprintf(line, sizeof line, "%lld -\n", (long long)seq);
                } else {
                        /* snapshot record + head + event, atomically */
                        snprintf(snap, sizeof snap, "snap_r%di%d", round, i);
                        struct meta_snapshot sn = { .reason = META_REASON_ROLLING, .bytes_added = (uint64_t)i };
                        strcpy(sn.id, snap);
                        strcpy(sn.session_id, SESSION);
                        strcpy(sn.store_hash, HASH);
                        strcpy(sn.root_hash, HASH);
                        if ((r = meta_begin(m)) < 0)
                                child_fail(m, "begin", r);
                        if ((r = meta_snapshot_add(m, &sn)) < 0)
                                child_fail(m, "snapshot", r);
                        if ((r = meta_session_set_head(m, SESSION, snap)) < 0)
                                child_fail(m, "head", r);
                        if ((r = meta_event_append(m, SESSION, "lifecycle", payload, (size_t)plen, &seq)) < 0)
                                child_fail(m, "append", r);
                        if ((r = meta_commit(m)) < 0)
                                child_fail(m, "commit", r);
                        snprintf(line, sizeof line, "%lld %s\n", (long long)seq, snap);
                }
                /* One short write to a pipe is atomic: the parent sees whole lines only. */
                if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
                        _exit(3);
        }
}

static void read_acks(int fd) {
        static char buf[1 << 20];
        size_t len = 0;
        ssize_t k;
        while ((k = read(fd, buf + len, sizeof buf - 1 - len)) > 0) {
                len += (size_t)k;
                assert_true(len < sizeof buf - 1);
        }
        buf[len] = 0;
        char *save = NULL;
        for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                assert_true(n_acks < MAX_ACKS);
                struct ack *a = &acks[n_acks++];
                char snap[32];
                assert_int_equal(sscanf(l, "%lld %31s", (long long *)&a->seq, snap), 2);
                strcpy(a->snap, strcmp(snap, "-") == 0 ? "" : snap);
        }
}

/* Every acknowledged row is there; events run 1..last with no hole; the head exists. */
static void verify(const char *path, size_t *ret_events) {
        _cleanup_meta_ struct meta *m = NULL;
        int r = meta_open(path, NULL, &m);
        if (r < 0)
                fprintf(stderr, "reopen: %s\n", meta_last_error(m));
        assert_int_equal(r, 0);
        assert_int_equal(meta_check(m), 0);
        if (n_acks == 0) {
                *ret_events = 0;
                return;
        }
        int64_t last = 0;
        assert_int_equal(meta_event_last_seq(m, SESSION, &last), 0);
        _cleanup_free_ uint8_t *seen = calloc((size_t)last + 1, 1);
        assert_non_null(seen);
        int64_t after = 0;
        for (;;) {
                struct meta_event *ev = NULL;
                size_t n = 0;
                assert_int_equal(meta_event_list(m, SESSION, after, 0, &ev, &n), 0);
                for (size_t i = 0; i < n; i++) {
                        assert_int_equal(ev[i].seq, after + 1); /* no hole */
                        after = ev[i].seq;
                        seen[after] = 1;
                }
                meta_events_free(ev, n);
                if (n == 0)
                        break;
        }
        assert_int_equal(after, last);
        for (size_t i = 0; i < n_acks; i++) {
                if (acks[i].seq > last || !seen[acks[i].seq]) {
                        fprintf(stderr, "acknowledged event %lld is missing (last %lld)\n", (long long)acks[i].seq,
                                (long long)last);
                        fail();
                }
                if (acks[i].snap[0]) {
                        struct meta_snapshot sn;
                        r = meta_snapshot_get(m, acks[i].snap, &sn);
                        if (r < 0)
                                fprintf(stderr, "acknowledged snapshot %s is missing\n", acks[i].snap);
                        assert_int_equal(r, 0);
                }
        }
        struct meta_session s;
        assert_int_equal(meta_session_get(m, SESSION, &s), 0);
        struct meta_snapshot head;
        assert_int_equal(meta_snapshot_get(m, s.head_snapshot, &head), 0);
        meta_session_clear(&s);
        *ret_events = (size_t)last;
}

static void test_crash_loop(void **state) {
        const char *e = getenv("META_CRASH_ROUNDS");
        int rounds = e ? atoi(e) : 25;
        e = getenv("META_CRASH_SEED");
        unsigned seed = e ? (unsigned)strtoul(e, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
        printf("# %d rounds of kill -9 at a random moment, seed %u (META_CRASH_SEED to replay)\n", rounds, seed);
        srand(seed);

        char dir[] = "/tmp/meta-crash-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[128];
        snprintf(path, sizeof path, "%s/meta.db", dir);

        int killed_mid = 0;
        for (int round = 0; round < rounds; round++) {
                int p[2];
                assert_int_equal(pipe2(p, O_CLOEXEC), 0);
                unsigned child_seed = (unsigned)rand();
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        close(p[0]);
                        child(path, p[1], round, child_seed);
                }
                close(p[1]);
                /* 0-5 ms after the fork hits open and migration. The later rounds aim at the
                 * write loop: they wait until the child acknowledged its first write (the
                 * pipe is readable; poll reads nothing) and kill 0-150 ms after that, so a
                 * loaded machine, where the child's start alone takes longer, still kills
                 * mid-write. */
                long us = round < 3 ? rand() % 5000 : rand() % 150000;
                if (round >= 3) {
                        struct pollfd pf = { .fd = p[0], .events = POLLIN };
                        assert_int_equal(poll(&pf, 1, 30000), 1); /* the child writes within 30 s */
                }
                usleep((useconds_t)us);
                assert_int_equal(kill(pid, SIGKILL), 0);
                int st = 0;
                assert_int_equal(waitpid(pid, &st, 0), pid);
                if (!WIFSIGNALED(st)) {
                        fprintf(stderr, "child exited by itself with %d\n", WEXITSTATUS(st));
                        fail();
                }
                size_t before = n_acks;
                read_acks(p[0]);
                close(p[0]);
                if (n_acks > before)
                        killed_mid++;
                size_t events = 0;
                verify(path, &events);
                printf("# round %d: killed after %ld us, %zu writes acknowledged, %zu events in the log, "
                       "all acknowledged rows present, integrity ok\n",
                       round, us, n_acks - before, events);
        }
        assert_true(rounds < 20 || killed_mid >= rounds / 2); /* most kills landed in the write loop */
        printf("# %zu acknowledged writes over %d rounds, none lost\n", n_acks, rounds);

        static const char *const sfx[] = { "", "-wal", "-shm" };
        for (size_t i = 0; i < ELEMENTSOF(sfx); i++) {
                char f[160];
                snprintf(f, sizeof f, "%s%s", path, sfx[i]);
                unlink(f);
        }
        rmdir(dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_crash_loop),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
