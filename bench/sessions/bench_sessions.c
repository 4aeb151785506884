/* bench-sessions: times the durable-session operations of issue 4 through libspace —
 * pause, resume, fork (count 1 and 10), restore, the freeze of a rolling snapshot after a
 * 1 MiB change, and recovery after the sandbox's init is killed — for workspaces of given
 * sizes, and prints one JSON line with p50/p90 per operation and size. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "../bench.h"
#include "space/space.h"

#define MAX_RUNS 1000
#define MAX_SIZES 8
#define FILE_MB 1                /* the workspace is made of 1 MiB files ... */
#define ROLLING_INTERVAL_MS 1000 /* ... and snapshotted every second when it changed */
#define WAIT_ROLLING_MS 15000    /* longest wait for a rolling snapshot to show up */
#define WAIT_RECOVERY_MS 30000
#define MAX_FILES 200000         /* --files */




struct series {
        const char *op;
        const char *note;
        double v[MAX_RUNS];
        size_t n;
        size_t failures;
};

static void add(struct series *s, double ms) {
        if (s->n < MAX_RUNS)
                s->v[s->n++] = ms;
}

/* files: a workspace of that many small files (--files), else 0 */
static void report(struct series *s, unsigned workspace_mb, unsigned change_mb, unsigned files) {
        printf("{\"bench\":\"sessions\",\"op\":\"%s\",\"workspace_mb\":%u,\"change_mb\":%u", s->op, workspace_mb,
               change_mb);
        if (files)
                printf(",\"workspace_files\":%u", files);
        printf(",\"runs\":%zu,\"failures\":%zu", s->n, s->failures);
        if (s->n > 0) {
                qsort(s->v, s->n, sizeof(double), bench_cmp_double);
                printf(",\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f", bench_pct(s->v, s->n, 50),
                       bench_pct(s->v, s->n, 90), s->v[0], s->v[s->n - 1]);
        }
        if (s->note)
                printf(",\"note\":\"%s\"", s->note);
        printf("}\n");
        fflush(stdout);
}

static space_client *cl;

static const char *err_of(int r) {
        const char *m = space_client_last_error(cl);
        return m && *m ? m : space_strerror(r);
}

static int sh(space_session *s, const char *cmd) {
        struct space_exec_result res;
        int r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT,
                                                         .argv = (const char *const[]){ "sh", "-c", cmd, NULL } },
                           &res);
        if (r == 0 && (!res.exited || res.exit_code != 0))
                r = -ECHILD;
        return r;
}

static int exec_true(space_session *s) { return sh(s, "true"); }

/* The command that rewrites one 1 MiB file of the workspace: the "1 MiB changed". */
static void change_cmd(char *cmd, size_t n, unsigned nfiles, unsigned k) {
        snprintf(cmd, n, "head -c %u /dev/urandom >/root/ws/f%u", FILE_MB << 20, (k % nfiles) + 1);
}

static int change(space_session *s, unsigned nfiles, unsigned k) {
        char cmd[160];
        change_cmd(cmd, sizeof cmd, nfiles, k);
        return sh(s, cmd);
}

/* The newest snapshot of the timeline (by position: the count stays the same once
 * retention drops an old rolling snapshot for each new one). */
static int newest_snapshot(space_session *s, struct space_snapshot_info *ret) {
        struct space_snapshot_info *v = NULL;
        size_t n = 0;
        int r = space_snapshot_list(s, &v, &n);
        if (r < 0)
                return r;
        if (n > 0)
                *ret = v[n - 1];
        else
                *ret = (struct space_snapshot_info){ 0 };
        free(v);
        return 0;
}

/* freeze_ms of snapshot id as its "snapshot" event tells it (spaced may report it there
 * rather than in the snapshot object); *cursor remembers how far the log was read. */
static double freeze_from_events(space_session *s, const char *id, uint64_t *cursor) {
        double found = -1;
        for (int pages = 0; pages < 100 && found < 0; pages++) {
                struct space_event_page p;
                if (space_event_list(s, *cursor, SPACE_MAX_EVENT_PAGE, &p) < 0)
                        return -1;
                for (size_t i = 0; i < p.n; i++) {
                        if (strcmp(p.events[i].kind, "snapshot") != 0)
                                continue;
                        struct json *d = NULL;
                        if (json_parse(p.events[i].data, strlen(p.events[i].data), &d, NULL, 0) < 0)
                                continue;
                        const char *sid = json_get_str(d, "snapshot");
                        const struct json *f = json_get(d, "freeze_ms");
                        if (sid && strcmp(sid, id) == 0 && json_type(f) == JSON_NUMBER)
                                found = json_num(f);
                        json_free(d);
                }
                bool more = p.more && p.n > 0;
                *cursor = p.next;
                space_event_page_free(&p);
                if (!more)
                        break;
        }
        return found;
}

static const char *daemon_log; /* --daemon-log: last resort for freeze times */

/* "…: snapshot <id> (rolling): … frozen N us, …" in spaced's log: what spaced measured,
 * when the API does not say it. -1 if the line is not (yet) there. */
static double freeze_from_log(const char *id) {
        if (!daemon_log)
                return -1;
        char needle[96];
        snprintf(needle, sizeof needle, "snapshot %s (", id);
        for (int tries = 0; tries < 10; tries++) {
                FILE *f = fopen(daemon_log, "re");
                if (!f)
                        return -1;
                char line[1024];
                double found = -1;
                while (fgets(line, sizeof line, f)) {
                        const char *p = strstr(line, needle), *q;
                        unsigned long long us;
                        if (p && (q = strstr(p, "frozen ")) && sscanf(q, "frozen %llu us", &us) == 1)
                                found = (double)us / 1000.0;
                }
                fclose(f);
                if (found >= 0)
                        return found;
                usleep(20 * 1000); /* the log line may lag the answer */
        }
        return -1;
}

struct rolling {
        uint64_t ev_cursor;
        bool reported, from_log;
};

/* Runs cmd in s, waits for spaced's next rolling snapshot and adds its freeze time and
 * how long it took to show up. */
static int rolling_after(space_session *s, const char *cmd, struct series *freeze, struct series *latency,
                         struct rolling *ro) {
        struct space_snapshot_info before, last;
        if (newest_snapshot(s, &before) < 0 || sh(s, cmd) < 0) {
                freeze->failures++;
                return -1;
        }
        double tc = bench_now_ms();
        bool seen = false;
        while (bench_now_ms() - tc < WAIT_ROLLING_MS) {
                if (newest_snapshot(s, &last) == 0 && strcmp(last.id, before.id) != 0 && strcmp(last.reason, "rolling") == 0) {
                        seen = true;
                        break;
                }
                usleep(20 * 1000);
        }
        if (!seen) {
                freeze->failures++;
                return -1;
        }
        add(latency, bench_now_ms() - tc);
        double fz = last.freeze_ms >= 0 ? last.freeze_ms : freeze_from_events(s, last.id, &ro->ev_cursor);
        if (fz >= 0) {
                ro->reported = true;
                add(freeze, fz);
        } else if ((fz = freeze_from_log(last.id)) >= 0) {
                ro->from_log = true;
                add(freeze, fz);
        }
        return 0;
}

static void rolling_note(struct series *freeze, const struct rolling *ro) {
        if (!ro->reported)
                freeze->note = ro->from_log ? "from spaced's log line (the API reports no freeze_ms)"
                                            : "spaced reported no freeze_ms (try --daemon-log): see snapshot_manual for the whole latency";
}

/* A session of the base template with rolling snapshots, or NULL after saying why. */
static space_session *new_session(void) {
        space_session *s = NULL;
        int r = space_session_new(&s, cl, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = "base",
                                                                         .memory = 1ull << 30,
                                                                         .snapshot_interval_ms = ROLLING_INTERVAL_MS });
        if (r < 0) {
                fprintf(stderr, "bench-sessions: create: %s\n", err_of(r));
                return NULL;
        }
        return s;
}

/* A workspace of n small files (100 per directory) with rolling snapshots: the freeze
 * after one of them is rewritten. What the stat walk of a capture costs shows here. */
static void bench_files(unsigned n, unsigned runs) {
        struct series freeze = { .op = "rolling_snapshot_freeze" },
                      latency = { .op = "rolling_snapshot_visible", .note = "from the change to the snapshot in the list; includes up to one interval" };
        space_session *s = new_session();
        if (!s)
                return;
        int r;
        fprintf(stderr, "bench-sessions: %s: %u small files\n", space_session_id(s), n);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "i=0; while [ $i -lt %u ]; do d=/root/small/d$((i / 100)); [ -d $d ] || mkdir -p $d; "
                 "echo file $i >$d/f$i; i=$((i+1)); done", n);
        if ((r = sh(s, cmd)) < 0 || (r = space_snapshot_create(s, "bench files base", NULL)) < 0) {
                fprintf(stderr, "bench-sessions: filling the small files: %s\n", err_of(r));
                goto out;
        }
        struct rolling ro = { 0 };
        for (unsigned i = 0; i < runs; i++) {
                unsigned k = (i * 7919u) % n;
                snprintf(cmd, sizeof cmd, "echo changed %u >/root/small/d%u/f%u", i, k / 100, k);
                (void)rolling_after(s, cmd, &freeze, &latency, &ro);
        }
        rolling_note(&freeze, &ro);
        report(&freeze, 0, 0, n);
        report(&latency, 0, 0, n);
out:
        space_session_delete(s);
        space_session_free(s);
}

struct ws_result {
        struct series freeze, roll_latency, snap_manual, pause, resume, resume_exec, fork1, fork1_exec, fork10, restore,
                restore_exec, recovery, recovery_exec;
};

static void bench_workspace(unsigned mb, unsigned runs, unsigned fork10_runs, struct ws_result *w) {
        *w = (struct ws_result){
                .freeze = { .op = "rolling_snapshot_freeze" },
                .roll_latency = { .op = "rolling_snapshot_visible", .note = "from the change to the snapshot in the list; includes up to one interval" },
                .snap_manual = { .op = "snapshot_manual" },
                .pause = { .op = "pause" },
                .resume = { .op = "resume" },
                .resume_exec = { .op = "resume_then_exec_true" },
                .fork1 = { .op = "fork_count_1" },
                .fork1_exec = { .op = "fork_count_1_then_exec_true" },
                .fork10 = { .op = "fork_count_10" },
                .restore = { .op = "restore" },
                .restore_exec = { .op = "restore_then_exec_true" },
                .recovery = { .op = "recovery", .note = "kill -9 of init until running with a new init" },
                .recovery_exec = { .op = "recovery_then_exec_true" },
        };
        unsigned nfiles = mb / FILE_MB;
        space_session *s = new_session();
        if (!s)
                return;
        int r;
        fprintf(stderr, "bench-sessions: %s: filling %u MiB (%u files of %u MiB)\n", space_session_id(s), mb, nfiles, FILE_MB);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "mkdir -p /root/ws && i=1; while [ $i -le %u ]; do head -c %u /dev/urandom >/root/ws/f$i; i=$((i+1)); done",
                 nfiles, FILE_MB << 20);
        double t0 = bench_now_ms();
        if ((r = sh(s, cmd)) < 0) {
                fprintf(stderr, "bench-sessions: filling the workspace: %s\n", err_of(r));
                goto out;
        }
        struct space_snapshot_info base;
        if ((r = space_snapshot_create(s, "bench base", &base)) < 0) {
                fprintf(stderr, "bench-sessions: first snapshot: %s\n", err_of(r));
                goto out;
        }
        fprintf(stderr, "bench-sessions: filled and snapshotted in %.0f ms (%s, %" PRIu64 " bytes added)\n", bench_now_ms() - t0,
                base.id, base.bytes_added);

        /* rolling snapshots: change 1 MiB, wait for the daemon's own snapshot */
        struct rolling ro = { 0 };
        for (unsigned i = 0; i < runs; i++) {
                change_cmd(cmd, sizeof cmd, nfiles, i);
                if (rolling_after(s, cmd, &w->freeze, &w->roll_latency, &ro) < 0)
                        continue;
                /* a manual snapshot right after, while the next rolling one is an interval away */
                if (change(s, nfiles, i + 7) < 0) {
                        w->snap_manual.failures++;
                        continue;
                }
                double a = bench_now_ms();
                r = space_snapshot_create(s, NULL, NULL);
                if (r < 0)
                        w->snap_manual.failures++;
                else
                        add(&w->snap_manual, bench_now_ms() - a);
        }
        rolling_note(&w->freeze, &ro);

        /* pause / resume */
        for (unsigned i = 0; i < runs; i++) {
                if (change(s, nfiles, i) < 0) {
                        w->pause.failures++;
                        continue;
                }
                double a = bench_now_ms();
                if ((r = space_session_pause(s)) < 0) {
                        fprintf(stderr, "bench-sessions: pause: %s\n", err_of(r));
                        w->pause.failures++;
                        continue;
                }
                double b = bench_now_ms();
                add(&w->pause, b - a);
                if ((r = space_session_resume(s)) < 0) {
                        fprintf(stderr, "bench-sessions: resume: %s\n", err_of(r));
                        w->resume.failures++;
                        break;
                }
                double c = bench_now_ms();
                add(&w->resume, c - b);
                if (exec_true(s) == 0)
                        add(&w->resume_exec, bench_now_ms() - b);
                else
                        w->resume_exec.failures++;
        }

        /* fork 1 and fork 10 from the base snapshot */
        for (unsigned i = 0; i < runs; i++) {
                for (unsigned count = 1; count <= (i < fork10_runs ? 10u : 1u); count += 9) {
                        space_session **v = NULL;
                        size_t n = 0;
                        double a = bench_now_ms();
                        r = space_session_fork(s, &(struct space_fork_opts){ SPACE_FORK_OPTS_INIT, .snapshot = base.id, .count = count },
                                               &v, &n);
                        double b = bench_now_ms();
                        struct series *se = count == 1 ? &w->fork1 : &w->fork10;
                        if (r < 0 || n != count) {
                                fprintf(stderr, "bench-sessions: fork %u: %s\n", count, r < 0 ? err_of(r) : "wrong count");
                                se->failures++;
                        } else {
                                add(se, b - a);
                                if (count == 1) {
                                        if (exec_true(v[0]) == 0)
                                                add(&w->fork1_exec, bench_now_ms() - a);
                                        else
                                                w->fork1_exec.failures++;
                                }
                        }
                        for (size_t k = 0; k < n; k++)
                                space_session_delete(v[k]);
                        space_session_array_free(v, n);
                }
        }

        /* restore, alternating between the base and the newest snapshot */
        /* a manual one: retention never drops it in the middle of the loop */
        struct space_snapshot_info newest;
        if (change(s, nfiles, 3) == 0 && space_snapshot_create(s, "bench restore target", &newest) == 0) {
                for (unsigned i = 0; i < runs; i++) {
                        double a = bench_now_ms();
                        r = space_session_restore(s, i % 2 ? newest.id : base.id);
                        double b = bench_now_ms();
                        if (r < 0) {
                                fprintf(stderr, "bench-sessions: restore: %s\n", err_of(r));
                                w->restore.failures++;
                                continue;
                        }
                        add(&w->restore, b - a);
                        if (exec_true(s) == 0)
                                add(&w->restore_exec, bench_now_ms() - a);
                        else
                                w->restore_exec.failures++;
                }
        }

        /* recovery: kill -9 the sandbox's init from the host, wait for a new one */
        for (unsigned i = 0; i < runs; i++) {
                struct space_session_info si;
                if (space_session_inspect(s, &si) < 0 || si.init_pid <= 1 || strcmp(si.state, "running") != 0) {
                        w->recovery.failures++;
                        continue;
                }
                int old = si.init_pid;
                double a = bench_now_ms();
                if (kill(old, SIGKILL) < 0) {
                        fprintf(stderr, "bench-sessions: kill %d: %s (run as root on the daemon's host)\n", old, strerror(errno));
                        w->recovery.failures++;
                        break;
                }
                bool back = false;
                while (bench_now_ms() - a < WAIT_RECOVERY_MS) {
                        if (space_session_inspect(s, &si) == 0 && strcmp(si.state, "running") == 0 && si.init_pid > 1 &&
                            si.init_pid != old) {
                                back = true;
                                break;
                        }
                        usleep(2 * 1000);
                }
                if (!back) {
                        w->recovery.failures++;
                        continue;
                }
                add(&w->recovery, bench_now_ms() - a);
                if (exec_true(s) == 0)
                        add(&w->recovery_exec, bench_now_ms() - a);
                else
                        w->recovery_exec.failures++;
        }
out:
        space_session_delete(s);
        space_session_free(s);
}

static void usage(FILE *f) {
        fputs("Usage: bench-sessions [--runs N] [--fork10-runs N] [--sizes MB,MB,...] [--files N]\n"
              "                      [--host ADDR] [--daemon-log FILE]\n"
              "\n"
              "For each workspace size (default 100,1024 MiB, made of 1 MiB files of random\n"
              "bytes) creates a session with rolling snapshots every second and times, N times\n"
              "each (default 10): the freeze of a rolling snapshot after 1 MiB changed (as\n"
              "spaced reports it), a manual snapshot, pause, resume, fork with count 1 and 10,\n"
              "restore, and recovery after kill -9 of the sandbox's init (so it must run as\n"
              "root on the daemon's host). Prints one JSON line per operation and size with\n"
              "p50/p90 in ms; progress goes to stderr. fork with count 10 materializes ten\n"
              "copies of the workspace, so it runs --fork10-runs times (default: --runs).\n"
              "The freeze time is read from the snapshot object, else from its 'snapshot'\n"
              "event, else (with --daemon-log) from spaced's log line for it.\n"
              "--files N: a workspace of N small files (100 per directory) instead, or after\n"
              "the sizes if --sizes is given too: the freeze of a rolling snapshot after one\n"
              "of them is rewritten, N times (--runs).\n",
              f);
}

/* optarg as a whole number in lo..hi, or false after saying so. */
static bool opt_range(const char *name, long lo, long hi, unsigned *ret) {
        char *end;
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (end == optarg || *end || errno || v < lo || v > hi) {
                fprintf(stderr, "bench-sessions: %s between %ld and %ld\n", name, lo, hi);
                return false;
        }
        *ret = (unsigned)v;
        return true;
}

int main(int argc, char **argv) {
        static const struct option lopts[] = {
                { "runs", required_argument, NULL, 'n' }, { "sizes", required_argument, NULL, 's' },
                { "host", required_argument, NULL, 'H' }, { "help", no_argument, NULL, 'h' },
                { "daemon-log", required_argument, NULL, 'L' }, { "fork10-runs", required_argument, NULL, 'F' },
                { "files", required_argument, NULL, 'f' }, { 0 },
        };
        long fork10_runs = -1;
        unsigned runs = 10, sizes[MAX_SIZES] = { 100, 1024 }, nsizes = 2, files = 0;
        bool sizes_given = false;
        const char *host = NULL;
        int c;
        while ((c = getopt_long(argc, argv, "n:h", lopts, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'n':
                        if (!opt_range("--runs", 1, MAX_RUNS, &runs))
                                return 2;
                        break;
                case 's': {
                        nsizes = 0;
                        sizes_given = true;
                        for (char *p = optarg; *p;) {
                                long v = strtol(p, &end, 10);
                                if (end == p || v < FILE_MB || v > 64 * 1024 || nsizes >= MAX_SIZES || (*end && *end != ',')) {
                                        fprintf(stderr, "bench-sessions: --sizes is up to %d sizes in MiB, %d..65536\n",
                                                MAX_SIZES, FILE_MB);
                                        return 2;
                                }
                                sizes[nsizes++] = (unsigned)v;
                                p = *end ? end + 1 : end;
                        }
                        if (nsizes == 0) {
                                fprintf(stderr, "bench-sessions: --sizes needs at least one size\n");
                                return 2;
                        }
                        break;
                }
                case 'f':
                        if (!opt_range("--files", 100, MAX_FILES, &files))
                                return 2;
                        break;
                case 'H': host = optarg; break;
                case 'L': daemon_log = optarg; break;
                case 'F': {
                        unsigned v;
                        if (!opt_range("--fork10-runs", 0, MAX_RUNS, &v))
                                return 2;
                        fork10_runs = v;
                        break;
                }
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        int r = space_client_new(&cl, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = host });
        if (r < 0) {
                fprintf(stderr, "bench-sessions: bad daemon address: %s\n", strerror(-r));
                return 1;
        }
        static struct ws_result w;
        if (files && !sizes_given)
                nsizes = 0;
        for (unsigned i = 0; i < nsizes; i++) {
                bench_workspace(sizes[i], runs, fork10_runs < 0 ? runs : (unsigned)fork10_runs, &w);
                struct series *all[] = { &w.freeze, &w.roll_latency, &w.snap_manual, &w.pause, &w.resume, &w.resume_exec,
                                         &w.fork1, &w.fork1_exec, &w.fork10, &w.restore, &w.restore_exec, &w.recovery,
                                         &w.recovery_exec };
                for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
                        report(all[k], sizes[i], FILE_MB, 0);
        }
        if (files)
                bench_files(files, runs);
        struct space_gc_result g;
        if (space_gc(cl, &g) == 0)
                fprintf(stderr, "bench-sessions: gc removed %" PRIu64 " objects (%" PRIu64 " bytes)\n", g.objects_removed,
                        g.bytes_freed);
        space_client_free(cl);
        return 0;
}
