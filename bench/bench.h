/* Helpers every benchmark program in bench/ shares: a monotonic clock in ms, nearest-rank
 * percentiles, running a command and timing it, and the "create a session, run true in
 * it" round trip through libspace. Header-only: each bench is one program. */
#pragma once
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
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

/* One session from tmpl + `exec true` until its exit (*total, and *create for the create
 * alone), then its delete, timed apart (*del). create and del may be NULL. */
static inline int bench_run_space(space_client *c, const char *tmpl, double *total, double *create, double *del) {
        static const char *const argv[] = { "true", NULL };
        double t0 = bench_now_ms();
        space_session *s = NULL;
        int r = space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = tmpl });
        if (r < 0)
                return r;
        double tc = bench_now_ms();
        struct space_exec_result res;
        r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv }, &res);
        double t1 = bench_now_ms();
        if (r >= 0 && (!res.exited || res.exit_code != 0 || res.signal))
                r = -ECHILD;
        int d = space_session_delete(s);
        double t2 = bench_now_ms();
        space_session_free(s);
        if (r < 0 || d < 0)
                return r < 0 ? r : d;
        *total = t1 - t0;
        if (create)
                *create = tc - t0;
        if (del)
                *del = t2 - t1;
        return 0;
}
