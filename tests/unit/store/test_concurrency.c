/* Several captures and materializations at once: four threads on one store handle and a
 * second handle on the same directory (as a second process would), all correct. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store-internal.h"

#define WORKERS 4
#define ROUNDS 3

struct worker {
        struct store *s;
        char base[4200];
        int id;
        int failed;
        char why[2048];
};

static void *run(void *arg) {
        struct worker *w = arg;
        char src[4300], out[4400];
        snprintf(src, sizeof src, "%s/src%d", w->base, w->id);
        mkdir(src, 0755);
        struct rng r = { (uint64_t)w->id * 1000 + 1 };
        struct gen_opts go = { .max_depth = 3, .max_entries = 14, .devices = geteuid() == 0, .max_file = 800000 };
        if (th_gen_tree(src, &r, &go) < 0) {
                w->failed = 1;
                snprintf(w->why, sizeof w->why, "generating the tree failed");
                return NULL;
        }
        struct store_hash prev;
        for (int i = 0; i < ROUNDS && !w->failed; i++) {
                struct store_hash h;
                if (store_capture(w->s, src, i ? &prev : NULL, NULL, &h) < 0) {
                        w->failed = 1;
                        snprintf(w->why, sizeof w->why, "capture: %s", store_error_detail());
                        break;
                }
                snprintf(out, sizeof out, "%s/out%d-%d", w->base, w->id, i);
                if (store_materialize(w->s, &h, out, NULL) < 0) {
                        w->failed = 1;
                        snprintf(w->why, sizeof w->why, "materialize: %s", store_error_detail());
                        break;
                }
                if (th_compare_trees(src, out, w->why, sizeof w->why)) {
                        w->failed = 1;
                        break;
                }
                th_rm_rf(out);
                th_mutate_tree(src, &r, 4);
                prev = h;
        }
        return NULL;
}

static void test_parallel(void **state) {
        (void)state;
        printf("checking %d threads on one handle and one on a second handle capture and restore at once\n",
               WORKERS);
        char *base = th_tmpdir("conc");
        char sdir[4300];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        struct store *s1, *s2;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true, .threads = 2 }, &s1), 0);
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .threads = 1 }, &s2), 0);
        struct worker w[WORKERS + 1];
        pthread_t th[WORKERS + 1];
        for (int i = 0; i <= WORKERS; i++) {
                w[i] = (struct worker){ .s = i == WORKERS ? s2 : s1, .id = i };
                snprintf(w[i].base, sizeof w[i].base, "%s", base);
                assert_int_equal(pthread_create(&th[i], NULL, run, &w[i]), 0);
        }
        for (int i = 0; i <= WORKERS; i++) {
                pthread_join(th[i], NULL);
                if (w[i].failed)
                        fail_msg("worker %d: %s", i, w[i].why);
        }
        struct store_hash *list;
        size_t n;
        assert_int_equal(store_snapshot_list(s1, &list, &n), 0);
        assert_int_equal(n, (WORKERS + 1) * ROUNDS);
        free(list);
        struct store_verify_result vr;
        assert_int_equal(store_verify(s2, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        printf("  %zu snapshots, %llu objects verified\n", n, (unsigned long long)vr.objects_checked);
        store_free(s1);
        store_free(s2);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_parallel) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
