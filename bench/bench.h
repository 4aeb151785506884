/* Helpers the benchmark programs in bench/ that go through libspace share: a monotonic
 * clock in ms, nearest-rank percentiles, a series of timings and its JSON summary line,
 * running a command (bwrap, the reference) and timing it, and the "create a session, run
 * true in it" round trip. Header-only: each bench is one program. */
#pragma once
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/space.h"

static inline double bench_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int bench_cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array of n >= 1 values. */
static inline double bench_pct(const double *v, size_t n, double p) {
        size_t rank = (size_t)ceil(p / 100.0 * (double)n);
        return v[(rank < 1 ? 1 : rank) - 1];
}

/* Timings (ms) of one thing measured, at most cap of them, and how many runs failed. */
struct bench_series {
        char what[160];
        double *v;
        size_t n, cap, failures;
};

/* NULL when out of memory. */
static inline struct bench_series *bench_series_new(const char *what, size_t cap) {
        struct bench_series *s = calloc(1, sizeof *s);
        if (!s)
                return NULL;
        s->v = calloc(cap ? cap : 1, sizeof(double));
        if (!s->v) {
                free(s);
                return NULL;
        }
        snprintf(s->what, sizeof s->what, "%s", what);
        s->cap = cap;
        return s;
}

static inline struct bench_series *bench_series_free(struct bench_series *s) {
        if (s)
                free(s->v);
        free(s);
        return NULL;
}

/* Past cap the timing is dropped: the series were sized for the runs planned. */
static inline void bench_series_add(struct bench_series *s, double v) {
        if (s->n < s->cap)
                s->v[s->n++] = v;
}

/* One JSON line {"bench":bench,"what":...<extra>,"runs":N,"failures":N,"p50_ms":...,
 * "p90_ms","p99_ms","mean_ms","min_ms","max_ms"} (no figures when no run succeeded);
 * extra is ",\"key\":value..." or "". Sorts the timings. */
static inline void bench_series_report(const char *bench, struct bench_series *s, const char *extra) {
        if (s->n == 0) {
                printf("{\"bench\":\"%s\",\"what\":\"%s\"%s,\"runs\":0,\"failures\":%zu}\n", bench, s->what, extra,
                       s->failures);
                fflush(stdout);
                return;
        }
        qsort(s->v, s->n, sizeof(double), bench_cmp_double);
        double sum = 0;
        for (size_t i = 0; i < s->n; i++)
                sum += s->v[i];
        printf("{\"bench\":\"%s\",\"what\":\"%s\"%s,\"runs\":%zu,\"failures\":%zu,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
               "\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f}\n",
               bench, s->what, extra, s->n, s->failures, bench_pct(s->v, s->n, 50), bench_pct(s->v, s->n, 90),
               bench_pct(s->v, s->n, 99), sum / (double)s->n, s->v[0], s->v[s->n - 1]);
        fflush(stdout);
}

/* Runs argv (PATH lookup), waits; its wall time in ms, or a negative errno (-ECHILD when
 * it did not exit 0). */
static inline double bench_run_argv(char *const argv[]) {
        double t0 = bench_now_ms();
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                execvp(argv[0], argv);
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        double t1 = bench_now_ms();
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t1 - t0 : -ECHILD;
}

/* The reference: bubblewrap (the program bwrap) with every namespace unshared, running
 * true; its wall time in ms or a negative errno. */
static inline double bench_run_bwrap(const char *bwrap) {
        char *argv[] = { (char *)bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true", NULL };
        return bench_run_argv(argv);
}

/* The library's message for a failed call, or the errno text when it has none. */
static inline const char *bench_client_err(space_client *c, int r) {
        const char *e = space_client_last_error(c);
        return *e ? e : strerror(-r);
}

/* One session from tmpl + `exec true` until its exit (*total, and *create for the create
 * alone), then its delete, timed apart (*del). create and del may be NULL. */
/* The sessions' "network" (a policy as JSON text, api.md "Network"); NULL: the daemon's
 * default. A program sets it before its runs (bench-pool --egress). */
static const char *bench_network_json;

/* Where the time of one bench_run_space_phases goes, in ms. */
struct bench_space_phases {
        double total;  /* create + first exec until its exit event */
        double create; /* POST /v1/sessions until the answer */
        double start;  /* first exec: the request until its start event (the process runs) */
        double run;    /* ... its start event until its exit event */
        double exec2;  /* a second exec true in the same sandbox (second), else 0 */
        double del;    /* the DELETE, not in total */
        /* The create inside spaced, from its answer's Server-Timing (-1: not sent):
         * session, sandbox (taken from the pool or made), hello, commit, total. */
        double srv[5];
        bool srv_pooled;
};

#define BENCH_SRV_PHASES 5
static const char *const bench_srv_names[BENCH_SRV_PHASES] = { "session", "sandbox", "hello", "commit", "total" };

/* "name;dur=1.2;desc=..., name2;dur=..." -> the dur of each of bench_srv_names. */
static inline void bench_server_timing(const char *h, double out[BENCH_SRV_PHASES], bool *pooled) {
        for (int i = 0; i < BENCH_SRV_PHASES; i++) {
                out[i] = -1;
                size_t n = strlen(bench_srv_names[i]);
                for (const char *p = h; (p = strstr(p, bench_srv_names[i])); p += n)
                        if ((p == h || p[-1] == ' ' || p[-1] == ',') && !strncmp(p + n, ";dur=", 5)) {
                                out[i] = strtod(p + n + 5, NULL);
                                break;
                        }
        }
        *pooled = strstr(h, "desc=\"pool\"") != NULL;
}

static inline void bench_on_start(void *ud, int pid) {
        (void)pid;
        *(double *)ud = bench_now_ms();
}

static inline int bench_exec_true(space_session *s, double *started) {
        static const char *const argv[] = { "true", NULL };
        struct space_exec_result res;
        int r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv,
                                                          .on_start = started ? bench_on_start : NULL,
                                                          .userdata = started }, &res);
        if (r >= 0 && (!res.exited || res.exit_code != 0 || res.signal))
                r = -ECHILD;
        return r;
}

/* Create a session, run true in it (and, with second, true again), delete it. */
static inline int bench_run_space_phases(space_client *c, const char *tmpl, bool second, struct bench_space_phases *ret) {
        double t0 = bench_now_ms();
        space_session *s = NULL;
        int r = space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = tmpl,
                                                                        .network_json = bench_network_json });
        if (r < 0)
                return r;
        double tc = bench_now_ms(), ts = tc;
        double srv[BENCH_SRV_PHASES];
        bool pooled;
        bench_server_timing(space_client_server_timing(c), srv, &pooled);
        r = bench_exec_true(s, &ts);
        double t1 = bench_now_ms(), t2 = t1;
        if (r >= 0 && second) {
                r = bench_exec_true(s, NULL);
                t2 = bench_now_ms();
        }
        int d = space_session_delete(s);
        double t3 = bench_now_ms();
        space_session_free(s);
        if (r < 0 || d < 0)
                return r < 0 ? r : d;
        *ret = (struct bench_space_phases){ .total = t1 - t0, .create = tc - t0, .start = ts - tc, .run = t1 - ts,
                                            .exec2 = second ? t2 - t1 : 0, .del = t3 - t2, .srv_pooled = pooled };
        memcpy(ret->srv, srv, sizeof srv);
        return 0;
}

static inline int bench_run_space(space_client *c, const char *tmpl, double *total, double *create, double *del) {
        struct bench_space_phases p;
        int r = bench_run_space_phases(c, tmpl, false, &p);
        if (r < 0)
                return r;
        *total = p.total;
        if (create)
                *create = p.create;
        if (del)
                *del = p.del;
        return 0;
}
