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




struct series {
        const char *what;
        double *v;
        size_t n;
        size_t failures;
};

static void report(struct series *s, const char *extra) {
        if (s->n == 0) {
                printf("{\"bench\":\"create\",\"what\":\"%s\",\"runs\":0,\"failures\":%zu}\n", s->what, s->failures);
                return;
        }
        qsort(s->v, s->n, sizeof(double), bench_cmp_double);
        double sum = 0;
        for (size_t i = 0; i < s->n; i++)
                sum += s->v[i];
        printf("{\"bench\":\"create\",\"what\":\"%s\",%s\"runs\":%zu,\"failures\":%zu,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
               "\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f}\n",
               s->what, extra, s->n, s->failures, bench_pct(s->v, s->n, 50), bench_pct(s->v, s->n, 90), bench_pct(s->v, s->n, 99),
               sum / (double)s->n, s->v[0], s->v[s->n - 1]);
}

/* One bwrap run; returns its wall time or a negative errno. */
static double run_bwrap(const char *bwrap) {
        char *argv[] = { (char *)bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true", NULL };
        return bench_run_argv(argv);
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
        struct series sp = { .what = "space: create + exec true", .v = calloc((size_t)runs, sizeof(double)) };
        struct series cre = { .what = "space: create alone (POST /v1/sessions)", .v = calloc((size_t)runs, sizeof(double)) };
        struct series ex = { .what = "space: exec true alone", .v = calloc((size_t)runs, sizeof(double)) };
        struct series del = { .what = "space: delete", .v = calloc((size_t)runs, sizeof(double)) };
        struct series bw = { .what = "bwrap --unshare-all --die-with-parent --ro-bind / / true",
                             .v = calloc((size_t)runs, sizeof(double)) };
        if (!sp.v || !cre.v || !ex.v || !del.v || !bw.v)
                return 1;
        for (long i = 0; i < warmup; i++) {
                double a, b, d;
                if ((r = bench_run_space(cl, tmpl, &a, &b, &d)) < 0) {
                        fprintf(stderr, "bench-create: warm-up run failed: %s\n",
                                *space_client_last_error(cl) ? space_client_last_error(cl) : strerror(-r));
                        return 1;
                }
                if (bwrap && run_bwrap(bwrap) < 0) {
                        fprintf(stderr, "bench-create: '%s' failed; run with --no-bwrap to skip it\n", bwrap);
                        return 1;
                }
        }
        for (long i = 0; i < runs; i++) {
                double a, b, d;
                r = bench_run_space(cl, tmpl, &a, &b, &d);
                if (r < 0) {
                        sp.failures++;
                        fprintf(stderr, "bench-create: run %ld: %s\n", i,
                                *space_client_last_error(cl) ? space_client_last_error(cl) : strerror(-r));
                } else {
                        sp.v[sp.n++] = a;
                        cre.v[cre.n++] = b;
                        ex.v[ex.n++] = a - b;
                        del.v[del.n++] = d;
                }
                if (bwrap) {
                        double t = run_bwrap(bwrap);
                        if (t < 0)
                                bw.failures++;
                        else
                                bw.v[bw.n++] = t;
                }
        }
        char extra[160];
        snprintf(extra, sizeof extra, "\"template\":\"%s\",\"host\":\"%s\",", tmpl, space_client_host(cl));
        report(&sp, extra);
        report(&cre, extra);
        report(&ex, extra);
        report(&del, extra);
        if (bwrap) {
                report(&bw, "");
                if (sp.n && bw.n)
                        printf("{\"bench\":\"create\",\"what\":\"ratio space/bwrap\",\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f}\n",
                               bench_pct(sp.v, sp.n, 50) / bench_pct(bw.v, bw.n, 50), bench_pct(sp.v, sp.n, 90) / bench_pct(bw.v, bw.n, 90),
                               bench_pct(sp.v, sp.n, 99) / bench_pct(bw.v, bw.n, 99));
        }
        free(sp.v);
        free(cre.v);
        free(ex.v);
        free(del.v);
        free(bw.v);
        space_client_free(cl);
        return sp.failures || bw.failures ? 1 : 0;
}
