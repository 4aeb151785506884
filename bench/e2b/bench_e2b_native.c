/* bench-e2b-native: the libspace half of bench-e2b. Times rounds of "create a session, run
 * the command E2B's commands.run('true') becomes (/bin/bash -l -c true as user) until it
 * returns" (the delete timed apart), then that exec alone, again and again in one session;
 * prints p50/p90/p99 of each as JSON lines (bench.h). The same work the SDK's rounds do,
 * so their ratio is what the E2B layer adds. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench.h"
#include "space/space.h"

#define MAX_RUNS 10000
#define MAX_SECONDS 3600

static const char *const e2b_true[] = { "/bin/bash", "-l", "-c", "true", NULL };

static int exec_true(space_session *s) {
        struct space_exec_result res;
        int r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = e2b_true, .user = "user" }, &res);
        if (r >= 0 && (!res.exited || res.exit_code != 0 || res.signal))
                r = -ECHILD;
        return r;
}

static void usage(FILE *f) {
        fputs("Usage: bench-e2b-native [--runs N] [--exec-runs N] [--max-seconds S] [--host ADDR] [--template NAME]\n"
              "\n"
              "Times N rounds of 'create a session + exec /bin/bash -l -c true as user' through\n"
              "libspace (delete apart), then the exec alone N times in one session, each half\n"
              "stopping early after S seconds; prints JSON lines. Defaults: 20 runs, 60 s, the\n"
              "daemon from $SPACE_HOST, template base. bench-e2b runs it beside the SDK.\n",
              f);
}

static long number(const char *arg, long lo, long hi, const char *what) {
        char *end;
        long v = strtol(arg, &end, 10);
        if (*end || v < lo || v > hi) {
                fprintf(stderr, "bench-e2b-native: %s between %ld and %ld\n", what, lo, hi);
                exit(2);
        }
        return v;
}

int main(int argc, char **argv) {
        static const struct option lopts[] = {
                { "runs", required_argument, NULL, 'n' },        { "exec-runs", required_argument, NULL, 'e' },
                { "max-seconds", required_argument, NULL, 's' }, { "host", required_argument, NULL, 'H' },
                { "template", required_argument, NULL, 't' },    { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        long runs = 20, exec_runs = -1, max_s = 60;
        const char *host = NULL, *tmpl = "base";
        int c;
        while ((c = getopt_long(argc, argv, "n:h", lopts, NULL)) != -1) {
                switch (c) {
                case 'n': runs = number(optarg, 1, MAX_RUNS, "--runs"); break;
                case 'e': exec_runs = number(optarg, 1, MAX_RUNS, "--exec-runs"); break;
                case 's': max_s = number(optarg, 1, MAX_SECONDS, "--max-seconds"); break;
                case 'H': host = optarg; break;
                case 't': tmpl = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        if (exec_runs < 0)
                exec_runs = runs;
        space_client *cl = NULL;
        int r = space_client_new(&cl, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = host });
        if (r < 0) {
                fprintf(stderr, "bench-e2b-native: bad daemon address: %s\n", strerror(-r));
                return 1;
        }
        struct bench_series *round = bench_series_new("libspace: create + exec bash -l -c true as user", (size_t)runs);
        struct bench_series *del = bench_series_new("libspace: delete", (size_t)runs);
        struct bench_series *ex = bench_series_new("libspace: exec bash -l -c true as user, alone", (size_t)exec_runs);
        if (!round || !del || !ex)
                return 1;

        double stop = bench_now_ms() + (double)max_s * 1e3;
        for (long i = 0; i < runs && bench_now_ms() < stop; i++) {
                double t0 = bench_now_ms();
                space_session *s = NULL;
                r = space_session_new(&s, cl, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = tmpl });
                if (r >= 0)
                        r = exec_true(s);
                double t1 = bench_now_ms();
                int d = s ? space_session_delete(s) : 0;
                double t2 = bench_now_ms();
                space_session_free(s);
                if (r < 0 || d < 0) {
                        round->failures++;
                        fprintf(stderr, "bench-e2b-native: round %ld: %s\n", i, bench_client_err(cl, r < 0 ? r : d));
                        continue;
                }
                bench_series_add(round, t1 - t0);
                bench_series_add(del, t2 - t1);
        }

        space_session *s = NULL;
        r = space_session_new(&s, cl, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = tmpl });
        if (r < 0) {
                fprintf(stderr, "bench-e2b-native: create for the exec runs: %s\n", bench_client_err(cl, r));
                ex->failures++;
        } else {
                /* the first exec of a session is not what "alone" measures */
                (void)exec_true(s);
                stop = bench_now_ms() + (double)max_s * 1e3;
                for (long i = 0; i < exec_runs && bench_now_ms() < stop; i++) {
                        double t0 = bench_now_ms();
                        r = exec_true(s);
                        if (r < 0) {
                                ex->failures++;
                                fprintf(stderr, "bench-e2b-native: exec %ld: %s\n", i, bench_client_err(cl, r));
                        } else {
                                bench_series_add(ex, bench_now_ms() - t0);
                        }
                }
                space_session_delete(s);
                space_session_free(s);
        }

        char extra[160];
        snprintf(extra, sizeof extra, ",\"template\":\"%s\"", tmpl);
        bench_series_report("e2b", round, extra);
        bench_series_report("e2b", del, extra);
        bench_series_report("e2b", ex, extra);
        int failed = round->failures || ex->failures;
        bench_series_free(round);
        bench_series_free(del);
        bench_series_free(ex);
        space_client_free(cl);
        return failed ? 1 : 0;
}
