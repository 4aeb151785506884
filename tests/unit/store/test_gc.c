/* Garbage collection: removes exactly the objects no live snapshot reaches (and the
 * records and leftovers of crashed captures), and is safe while captures and
 * materializations run in other threads. */
#include <dirent.h>
#include <fcntl.h>
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

static void reachable(struct store *s, const struct store_hash *snaps, size_t n, struct hset *out) {
        struct reach rc = { .s = s, .seen = out };
        for (size_t i = 0; i < n; i++)
                assert_int_equal(reach_object(&rc, &snaps[i], "test"), 0);
}

/* Every object some pack on disk holds (a fresh look at packs/). */
static void stored(struct store *s, struct hset *out) {
        struct pack **v;
        size_t n;
        assert_int_equal(packs_snapshot(s, true, &v, &n), 0);
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < v[i]->n; j++)
                        hset_add(out, &v[i]->e[j].hash, 1);
        packs_release(v, n);
}

static size_t count_packs(const char *sdir) {
        char p[4400];
        assert_true(snprintf(p, sizeof p, "%s/packs", sdir) < (int)sizeof p);
        DIR *d = opendir(p);
        assert_non_null(d);
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                n += strstr(de->d_name, ".pack") != NULL;
        closedir(d);
        return n;
}

static bool same_set(const struct hset *a, const struct hset *b) {
        if (a->n != b->n)
                return false;
        for (size_t i = 0; i < a->cap; i++)
                if (a->vals[i] && !hset_get(b, &a->keys[i]))
                        return false;
        return true;
}

static void test_exact(void **state) {
        (void)state;
        printf("checking gc removes exactly the objects the live snapshots do not reach\n");
        char *base = th_tmpdir("gc");
        char sdir[4200], src[4200], p[4400];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(src, sizeof src, "%s/src", base);
        mkdir(src, 0755);
        struct rng r = { 9 };
        snprintf(p, sizeof p, "%s/keep", src);
        th_write_file(p, &r, 700000);
        snprintf(p, sizeof p, "%s/v", src);
        th_write_file(p, &r, 300000);
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash a, b, c;
        assert_int_equal(store_capture(s, src, NULL, NULL, &a), 0);
        th_write_file(p, &r, 300000);
        assert_int_equal(store_capture(s, src, &a, NULL, &b), 0);
        th_write_file(p, &r, 300000);
        assert_int_equal(store_capture(s, src, &b, NULL, &c), 0);

        /* a crashed capture's leftovers: an unlocked tmp dir with a half-written object */
        char tmp[4300];
        snprintf(tmp, sizeof tmp, "%s/tmp/deadbeefdeadbeef", sdir);
        mkdir(tmp, 0700);
        snprintf(p, sizeof p, "%s/partial", tmp);
        close(open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
        /* and the half-written pack it left (a kill -9 tears a pack only under its temp name) */
        char tpack[4300];
        snprintf(tpack, sizeof tpack, "%s/packs/.t-deadbeefdeadbeef-0.pack", sdir);
        int tfd = open(tpack, O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
        assert_true(tfd >= 0);
        assert_int_equal(write(tfd, "SPPK\1\0\0\0 torn", 13), 13);
        close(tfd);
        size_t packs_before = count_packs(sdir);

        usleep(60000); /* records newer than the call (less its clock slack) would be kept */
        struct hset before = { 0 }, want = { 0 }, after = { 0 };
        stored(s, &before);
        struct store_hash live[2] = { a, c };
        reachable(s, live, 2, &want);
        assert_true(want.n < before.n);

        struct store_gc_result gr;
        assert_int_equal(store_gc(s, live, 2, &(struct store_gc_opts){ .dry_run = true }, &gr), 0);
        assert_int_equal(gr.objects_removed, before.n - want.n);
        hset_free(&after);
        stored(s, &after);
        assert_int_equal(after.n, before.n);

        assert_int_equal(store_gc(s, live, 2, NULL, &gr), 0);
        printf("  removed %llu objects, kept %llu, %llu records, %llu temp dirs\n",
               (unsigned long long)gr.objects_removed, (unsigned long long)gr.objects_kept,
               (unsigned long long)gr.snapshots_removed, (unsigned long long)gr.temp_removed);
        assert_int_equal(gr.objects_removed, before.n - want.n);
        assert_int_equal(gr.snapshots_removed, 1);
        assert_int_equal(gr.temp_removed, 2);
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(access(tpack, F_OK), -1);
        printf("  %zu packs before, %zu after (packs with garbage are rewritten)\n", packs_before, count_packs(sdir));
        hset_free(&after);
        stored(s, &after);
        assert_true(same_set(&after, &want));

        /* b is gone from the list and the store; a and c still restore */
        struct store_hash *list;
        size_t n;
        assert_int_equal(store_snapshot_list(s, &list, &n), 0);
        assert_int_equal(n, 2);
        free(list);
        struct store_snapshot_info info;
        assert_int_equal(store_snapshot_get(s, &b, &info), -ENOENT);
        snprintf(p, sizeof p, "%s/out", base);
        assert_int_equal(store_materialize(s, &a, p, NULL), 0);
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        assert_int_equal(vr.unreachable, 0);

        /* a live set naming a snapshot that is not there collects nothing */
        struct store_hash bogus;
        memset(bogus.b, 3, sizeof bogus.b);
        assert_int_equal(store_gc(s, &bogus, 1, NULL, &gr), -ENOENT);
        printf("  %s\n", store_error_detail());
        hset_free(&after);
        stored(s, &after);
        assert_true(same_set(&after, &want));

        hset_free(&before);
        hset_free(&want);
        hset_free(&after);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

struct race {
        struct store *s;
        char base[4200], src[4200];
        atomic_bool stop;
        unsigned gcs;
};

static void *gc_loop(void *arg) {
        struct race *x = arg;
        while (!atomic_load(&x->stop)) {
                struct store_hash *live;
                size_t n;
                int64_t t0 = store_now_ns();
                if (store_snapshot_list(x->s, &live, &n) < 0)
                        break;
                struct store_gc_result gr;
                int r = store_gc(x->s, live, n, &(struct store_gc_opts){ .keep_since_ns = t0 }, &gr);
                free(live);
                if (r < 0 && r != -ENOENT) /* ENOENT: a listed record vanished between list and gc */
                        fail_msg("gc: %s", store_error_detail());
                x->gcs++;
        }
        return NULL;
}

static void test_concurrent(void **state) {
        (void)state;
        printf("checking captures and restores stay whole while gc runs in a loop beside them\n");
        struct race x = { 0 };
        char *base = th_tmpdir("gcrace");
        snprintf(x.base, sizeof x.base, "%s", base);
        snprintf(x.src, sizeof x.src, "%s/src", base);
        mkdir(x.src, 0755);
        char sdir[4300], p[4300];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &x.s), 0);
        struct rng r = { 11 };
        for (int i = 0; i < 20; i++) {
                snprintf(p, sizeof p, "%s/f%d", x.src, i);
                th_write_file(p, &r, 50000 + rng_below(&r, 300000));
        }
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, gc_loop, &x), 0);
        struct store_hash prev = { 0 };
        bool have_prev = false;
        unsigned retries = 0;
        for (int round = 0; round < 25; round++) {
                /* flip between two versions so captures reuse objects that became garbage */
                struct rng v = { (uint64_t)(round % 2) + 100 };
                snprintf(p, sizeof p, "%s/f0", x.src); /* v0, v1, v0: the last-but-one is garbage */
                th_write_file(p, &v, 200000);
                struct store_hash h;
                int k;
                while ((k = store_capture(x.s, x.src, have_prev ? &prev : NULL, NULL, &h)) == -EAGAIN)
                        retries++;
                if (k < 0)
                        fail_msg("capture: %s", store_error_detail());
                if (have_prev)
                        assert_int_equal(store_snapshot_forget(x.s, &prev), 0);
                char out[4400];
                snprintf(out, sizeof out, "%s/out%d", base, round);
                if (store_materialize(x.s, &h, out, NULL) < 0)
                        fail_msg("restore of a fresh snapshot during gc: %s", store_error_detail());
                char why[2048];
                if (th_compare_trees(x.src, out, why, sizeof why))
                        fail_msg("round %d: %s", round, why);
                th_rm_rf(out);
                prev = h;
                have_prev = true;
        }
        atomic_store(&x.stop, true);
        pthread_join(th, NULL);
        printf("  %u gc runs beside 25 captures, %u captures retried\n", x.gcs, retries);
        assert_true(x.gcs > 0);
        struct store_verify_result vr;
        assert_int_equal(store_verify(x.s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        store_free(x.s);
        th_rm_rf(base);
        free(base);
}

static void test_merge(void **state) {
        (void)state;
        printf("checking gc merges the small packs incremental captures leave, keeping every object\n");
        char *base = th_tmpdir("gcmerge");
        char sdir[4200], src[4200], p[4400];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(src, sizeof src, "%s/src", base);
        mkdir(src, 0755);
        struct rng r = { 21 };
        for (int i = 0; i < 10; i++) {
                snprintf(p, sizeof p, "%s/f%d", src, i);
                th_write_file(p, &r, 20000 + rng_below(&r, 200000));
        }
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash snaps[24];
        for (int i = 0; i < 24; i++) {
                snprintf(p, sizeof p, "%s/f%d", src, i % 10);
                th_write_file(p, &r, 1000 + rng_below(&r, 100000));
                assert_int_equal(store_capture(s, src, i ? &snaps[i - 1] : NULL, NULL, &snaps[i]), 0);
        }
        size_t before = count_packs(sdir);
        struct hset want = { 0 }, got = { 0 };
        stored(s, &want);
        usleep(60000);
        struct store_gc_result gr;
        assert_int_equal(store_gc(s, snaps, 24, NULL, &gr), 0);
        size_t after = count_packs(sdir);
        printf("  %zu packs before, %zu after; %llu objects kept, %llu removed\n", before, after,
               (unsigned long long)gr.objects_kept, (unsigned long long)gr.objects_removed);
        assert_true(before >= 24);
        assert_true(after <= 2);
        assert_int_equal(gr.objects_removed, 0);
        stored(s, &got);
        assert_true(same_set(&got, &want));
        for (int i = 0; i < 24; i += 7) {
                snprintf(p, sizeof p, "%s/out%d", base, i);
                assert_int_equal(store_materialize(s, &snaps[i], p, NULL), 0);
                th_rm_rf(p);
        }
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);

        printf("checking gc of objects that share compressed blocks with live ones (partial blocks rewritten)\n");
        /* keep only every third snapshot: many shared small blocks lose some objects */
        struct store_hash keep[8];
        for (int i = 0; i < 8; i++)
                keep[i] = snaps[i * 3];
        struct hset reach_want = { 0 };
        reachable(s, keep, 8, &reach_want);
        usleep(60000);
        assert_int_equal(store_gc(s, keep, 8, NULL, &gr), 0);
        printf("  %llu objects removed, %llu kept\n", (unsigned long long)gr.objects_removed,
               (unsigned long long)gr.objects_kept);
        hset_free(&got);
        stored(s, &got);
        assert_true(same_set(&got, &reach_want));
        for (int i = 0; i < 8; i++) {
                snprintf(p, sizeof p, "%s/keep%d", base, i);
                assert_int_equal(store_materialize(s, &keep[i], p, NULL), 0);
                th_rm_rf(p);
        }
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        assert_int_equal(vr.unreachable, 0);
        hset_free(&want);
        hset_free(&got);
        hset_free(&reach_want);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_exact),
                cmocka_unit_test(test_merge),
                cmocka_unit_test(test_concurrent),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
