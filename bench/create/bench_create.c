/* bench-create: times "create a sandbox and run `true` in it until it returns" through
 * libspace, interleaved run by run with `bwrap --unshare-all --die-with-parent --ro-bind
 * / / true`, and prints p50/p90/p99 of each and their ratio as JSON lines. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bench.h"
#include "space/space.h"

#define MAX_RUNS 100000

/* A series without runs has no template or host in its line. */
static void report(struct bench_series *s, const char *extra) {
        bench_series_report("create", s, s->n ? extra : "");
}

static void usage(FILE *f) {
        fputs("Usage: bench-create [--runs N] [--warmup N] [--host ADDR] [--template NAME] [--bwrap PATH] [--no-bwrap]\n"
              "\n"
              "Times 'create a sandbox and run true in it until it returns' through spaced's API,\n"
              "interleaved with 'bwrap --unshare-all --die-with-parent --ro-bind / / true', and\n"
              "prints p50/p90/p99 (ms) of each and the ratio as JSON lines. Defaults: 200 runs,\n"
              "5 warm-up runs of each, the daemon from $SPACE_HOST, template base.\n",
              f);
}

int main(int argc, char **argv) {
        static const struct option lopts[] = {
                { "runs", required_argument, NULL, 'n' },   { "warmup", required_argument, NULL, 'w' },
                { "host", required_argument, NULL, 'H' },   { "template", required_argument, NULL, 't' },
                { "bwrap", required_argument, NULL, 'b' },  { "no-bwrap", no_argument, NULL, 'B' },
                { "help", no_argument, NULL, 'h' },         { 0 },
        };
        long runs = 200, warmup = 5;
        const char *host = NULL, *tmpl = "base", *bwrap = "bwrap";
        int c;
        while ((c = getopt_long(argc, argv, "n:h", lopts, NULL)) != -1) {
                char *end;
                switch (c) {
                case 'n':
                        runs = strtol(optarg, &end, 10);
                        if (*end || runs < 1 || runs > MAX_RUNS) {
                                fprintf(stderr, "bench-create: --runs between 1 and %d\n", MAX_RUNS);
                                return 2;
                        }
                        break;
                case 'w':
                        warmup = strtol(optarg, &end, 10);
                        if (*end || warmup < 0 || warmup > 1000) {
                                fprintf(stderr, "bench-create: --warmup between 0 and 1000\n");
                                return 2;
                        }
                        break;
                case 'H': host = optarg; break;
                case 't': tmpl = optarg; break;
                case 'b': bwrap = optarg; break;
                case 'B': bwrap = NULL; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        space_client *cl = NULL;
        int r = space_client_new(&cl, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = host });
        if (r < 0) {
                fprintf(stderr, "bench-create: bad daemon address: %s\n", strerror(-r));
                return 1;
        }
        struct bench_series *sp = bench_series_new("space: create + exec true", (size_t)runs);
        struct bench_series *cre = bench_series_new("space: create alone (POST /v1/sessions)", (size_t)runs);
        struct bench_series *ex = bench_series_new("space: exec true alone", (size_t)runs);
        struct bench_series *del = bench_series_new("space: delete", (size_t)runs);
        struct bench_series *bw = bench_series_new("bwrap --unshare-all --die-with-parent --ro-bind / / true", (size_t)runs);
        if (!sp || !cre || !ex || !del || !bw)
                return 1;
        for (long i = 0; i < warmup; i++) {
                double a, b, d;
                if ((r = bench_run_space(cl, tmpl, &a, &b, &d)) < 0) {
                        fprintf(stderr, "bench-create: warm-up run failed: %s\n", bench_client_err(cl, r));
                        return 1;
                }
                if (bwrap && bench_run_bwrap(bwrap) < 0) {
                        fprintf(stderr, "bench-create: '%s' failed; run with --no-bwrap to skip it\n", bwrap);
                        return 1;
                }
        }
        for (long i = 0; i < runs; i++) {
                double a, b, d;
                r = bench_run_space(cl, tmpl, &a, &b, &d);
                if (r < 0) {
                        sp->failures++;
                        fprintf(stderr, "bench-create: run %ld: %s\n", i, bench_client_err(cl, r));
                } else {
                        bench_series_add(sp, a);
                        bench_series_add(cre, b);
                        bench_series_add(ex, a - b);
                        bench_series_add(del, d);
                }
                if (bwrap) {
                        double t = bench_run_bwrap(bwrap);
                        if (t < 0)
                                bw->failures++;
                        else
                                bench_series_add(bw, t);
                }
        }
        char extra[160];
        snprintf(extra, sizeof extra, ",\"template\":\"%s\",\"host\":\"%s\"", tmpl, space_client_host(cl));
        report(sp, extra);
        report(cre, extra);
        report(ex, extra);
        report(del, extra);
        if (bwrap) {
                report(bw, "");
                if (sp->n && bw->n)
                        printf("{\"bench\":\"create\",\"what\":\"ratio space/bwrap\",\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f}\n",
                               bench_pct(sp->v, sp->n, 50) / bench_pct(bw->v, bw->n, 50),
                               bench_pct(sp->v, sp->n, 90) / bench_pct(bw->v, bw->n, 90),
                               bench_pct(sp->v, sp->n, 99) / bench_pct(bw->v, bw->n, 99));
        }
        int failed = sp->failures || bw->failures;
        bench_series_free(sp);
        bench_series_free(cre);
        bench_series_free(ex);
        bench_series_free(del);
        bench_series_free(bw);
        space_client_free(cl);
        return failed ? 1 : 0;
}
