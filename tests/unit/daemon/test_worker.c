/* Unit test of spaced's worker pool (src/daemon/worker.c): every submitted job runs once
 * on a worker thread, its done() runs on the calling thread only when dispatched, the
 * pending count follows, and draining waits for all of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "daemon/worker.h"

#define N_JOBS 200

struct tjob {
        struct wjob wj;
        pthread_t worker;
        int work_runs, done_runs;
};

static pthread_t main_thread;

static void t_work(struct wjob *j) {
        struct tjob *t = (struct tjob *)j;
        t->worker = pthread_self();
        t->work_runs++;
        struct timespec d = { 0, 100000 };
        nanosleep(&d, NULL);
}

static void t_done(struct wjob *j) {
        struct tjob *t = (struct tjob *)j;
        assert_true(pthread_equal(pthread_self(), main_thread));
        assert_int_equal(t->work_runs, 1);
        t->done_runs++;
}

static void test_pool(void **state) {
        (void)state;
        main_thread = pthread_self();
        struct workers *w = NULL;
        printf("check: a pool of 0 or too many threads is refused\n");
        assert_int_equal(wk_new(0, &w), -EINVAL);
        assert_int_equal(wk_new(1000, &w), -EINVAL);
        assert_int_equal(wk_new(2, &w), 0);
        static struct tjob jobs[N_JOBS];
        printf("check: %d jobs run once each on worker threads, done() on this thread\n", N_JOBS);
        for (int i = 0; i < N_JOBS; i++) {
                jobs[i] = (struct tjob){ .wj = { .work = t_work, .done = t_done } };
                assert_int_equal(wk_submit(w, &jobs[i].wj), 0);
        }
        assert_int_equal(wk_pending(w), N_JOBS);
        wk_drain(w);
        assert_int_equal(wk_pending(w), 0);
        for (int i = 0; i < N_JOBS; i++) {
                assert_int_equal(jobs[i].work_runs, 1);
                assert_int_equal(jobs[i].done_runs, 1);
                assert_false(pthread_equal(jobs[i].worker, main_thread));
        }
        printf("check: done() runs only when the caller dispatches\n");
        struct tjob one = { .wj = { .work = t_work, .done = t_done } };
        assert_int_equal(wk_submit(w, &one.wj), 0);
        assert_true(wk_fd(w) >= 0);
        for (int i = 0; i < 1000 && one.work_runs == 0; i++) {
                struct timespec d = { 0, 1000000 };
                nanosleep(&d, NULL);
        }
        assert_int_equal(one.done_runs, 0);
        wk_drain(w);
        assert_int_equal(one.done_runs, 1);
        w = wk_free(w);
        assert_null(w);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_pool) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
