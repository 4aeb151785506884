/* Unit test of spaced's warm pool (src/daemon/warmpool.c) over a fake runtime: no namespaces,
 * no root. A fake sandbox is a pipe whose read end stands for the init's pidfd (written
 * to = "init died"). Checks: the pool fills to its size on its own thread and the loop
 * links the sandboxes in; takes are oldest first and refill; the wanted limits reach
 * set_limits, and one that fails is destroyed, never handed out; a dead pooled sandbox is
 * skipped; network and other templates go cold; lowering the size and a rebuilt template
 * destroy what is pooled; wpool_free destroys everything; the --pool syntax; a refill waits
 * for the quiet after the last request unless the pool is below half its size (or
 * requests have not paused for 20 x the quiet). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/warmpool.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "runtime/fsutil.h"

struct rt_sandbox {
        char id[64];
        int pfd[2];
        struct rt_limits lim;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int n_live, n_created, n_destroyed;
static bool fail_limits;
#define MAX_FAKE 64
static struct rt_sandbox *fakes[MAX_FAKE]; /* the live ones */

static void registry(struct rt_sandbox *sb, bool add) {
        for (int i = 0; i < MAX_FAKE; i++)
                if (add ? !fakes[i] : fakes[i] == sb) {
                        fakes[i] = add ? sb : NULL;
                        return;
                }
        if (add)
                fail_msg("more than %d fake sandboxes", MAX_FAKE);
}

static int f_create(const struct rt_spec *spec, struct rt_sandbox **ret) {
        struct rt_sandbox *sb = calloc(1, sizeof *sb);
        if (!sb || pipe2(sb->pfd, O_CLOEXEC) < 0)
                return -ENOMEM;
        snprintf(sb->id, sizeof sb->id, "%s", spec->id);
        sb->lim = spec->limits;
        pthread_mutex_lock(&mu);
        n_live++;
        n_created++;
        registry(sb, true);
        pthread_mutex_unlock(&mu);
        *ret = sb;
        return 0;
}

static int f_destroy(struct rt_sandbox *sb) {
        if (!sb)
                return 0;
        pthread_mutex_lock(&mu);
        registry(sb, false);
        n_live--;
        n_destroyed++;
        pthread_mutex_unlock(&mu);
        close(sb->pfd[0]);
        close(sb->pfd[1]);
        free(sb);
        return 0;
}

static int f_pid_fd(struct rt_sandbox *sb) { return sb->pfd[0]; }

static int f_set_limits(struct rt_sandbox *sb, const struct rt_limits *l) {
        if (fail_limits)
                return -EIO;
        sb->lim = *l;
        return 0;
}

static const struct runtime_ops fake_ops = {
        .name = "fake",
        .create = f_create,
        .destroy = f_destroy,
        .pid_fd = f_pid_fd,
        .set_limits = f_set_limits,
};

static struct daemon dm;
static char data[] = "/tmp/space-test-pool.XXXXXX";

static int live(void) {
        pthread_mutex_lock(&mu);
        int n = n_live;
        pthread_mutex_unlock(&mu);
        return n;
}

static int64_t field(struct wpool *p, const char *key) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        wpool_write_json(&w, p);
        struct json *j = NULL;
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        int64_t v = -1;
        if (!strcmp(key, "ready") || !strcmp(key, "making")) {
                const struct json *ts = json_get(j, "templates");
                v = 0;
                if (ts && json_len(ts) > 0)
                        (void)json_get_int(json_at(ts, 0), key, &v);
        } else {
                (void)json_get_int(j, key, &v);
        }
        json_free(j);
        buf_free(&b);
        return v;
}

/* Runs the loop until the pool of base holds n ready, nothing is being made and n_live
 * fake sandboxes exist (pooled + held by the test), 10 s at most. */
static void wait_pool(struct wpool *p, int64_t n, int n_live_want) {
        for (int i = 0; i < 1000; i++) {
                (void)loop_run_once(dm.loop, 10);
                if (field(p, "ready") == n && field(p, "making") == 0 && live() == n_live_want)
                        return;
        }
        fail_msg("pool did not settle at %lld ready, %d live (ready %lld, making %lld, live %d)", (long long)n,
                 n_live_want, (long long)field(p, "ready"), (long long)field(p, "making"), live());
}

static void wait_ready(struct wpool *p, int64_t n) { wait_pool(p, n, (int)n); }

static void make_template(void) {
        char p[256];
        snprintf(p, sizeof p, "%s/templates/base/rootfs", data);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
}

static int setup(void **state) {
        (void)state;
        assert_non_null(mkdtemp(data));
        char p[256];
        snprintf(p, sizeof p, "%s/sandboxes", data);
        assert_int_equal(rt_mkdir_p(p, 0700), 0);
        make_template();
        assert_int_equal(loop_new(&dm.loop), 0);
        dm.data_dir = data;
        dm.init_path = "/nonexistent/space-init";
        dm.rt = &fake_ops;
        return 0;
}

static int teardown(void **state) {
        (void)state;
        dm.loop = loop_free(dm.loop);
        (void)rt_rm_rf(data);
        return 0;
}

static const struct wpool_want want_base = {
        .template = "base",
        .limits = { .memory_bytes = 256ull << 20, .cpu_millis = 500, .pids = 100 },
};

static void test_fill_take_refill(void **state) {
        (void)state;
        struct wpool *p = NULL;
        assert_int_equal(wpool_new(&dm, 0, &p), 0);
        printf("check: size 0 makes nothing and every take goes cold\n");
        assert_int_equal(wpool_set(p, "base", 0), 0);
        struct wpool_sandbox got;
        assert_int_equal(wpool_take(p, &want_base, &got), -ENOENT);
        assert_int_equal(live(), 0);

        printf("check: the pool fills to 3 in the background\n");
        assert_int_equal(wpool_set(p, "base", 3), 0);
        wait_ready(p, 3);

        printf("check: a take hands over a sandbox with the wanted limits, in DATA/sandboxes\n");
        char first[WPOOL_ID_SIZE];
        assert_int_equal(wpool_take(p, &want_base, &got), 0);
        memcpy(first, got.id, sizeof first);
        assert_int_equal(got.sb->lim.memory_bytes, 256ull << 20);
        assert_int_equal(got.sb->lim.cpu_millis, 500);
        assert_int_equal(got.sb->lim.pids, 100);
        assert_true(strstr(got.dir, "/sandboxes/sbx_") != NULL);
        assert_true(got.clean_since_ns > 0);
        struct stat st;
        char upper[512];
        snprintf(upper, sizeof upper, "%s/upper", got.dir);
        assert_int_equal(stat(upper, &st), 0);
        assert_int_equal(field(p, "taken"), 1);

        printf("check: it refills to 3 while the taken one stays the caller's\n");
        wait_pool(p, 3, 4); /* 3 pooled + the taken one, still alive */

        printf("check: the taken sandbox is never handed out again\n");
        for (int i = 0; i < 6; i++) {
                struct wpool_sandbox g;
                assert_int_equal(wpool_take(p, &want_base, &g), 0);
                assert_string_not_equal(g.id, first);
                (void)f_destroy(g.sb);
                free(g.dir);
                for (int k = 0; k < 200 && field(p, "ready") < 3; k++)
                        (void)loop_run_once(dm.loop, 10);
        }
        (void)f_destroy(got.sb);
        free(got.dir);
        wait_ready(p, 3);

        printf("check: network and other templates are made cold\n");
        struct wpool_want net = want_base;
        net.network = true;
        assert_int_equal(wpool_take(p, &net, &got), -ENOENT);
        struct wpool_want other = want_base;
        other.template = "other";
        assert_int_equal(wpool_take(p, &other, &got), -ENOENT);
        assert_int_equal(field(p, "ready"), 3);

        printf("check: wpool_free destroys what is pooled\n");
        p = wpool_free(p);
        assert_null(p);
        assert_int_equal(live(), 0);
}

static void test_bad_sandboxes_never_handed_out(void **state) {
        (void)state;
        struct wpool *p = NULL;
        assert_int_equal(wpool_new(&dm, 0, &p), 0);
        assert_int_equal(wpool_set(p, "base", 2), 0);
        wait_ready(p, 2);

        printf("check: set_limits failing destroys the sandbox and the take goes cold\n");
        fail_limits = true;
        int destroyed0 = n_destroyed;
        struct wpool_sandbox got;
        assert_int_equal(wpool_take(p, &want_base, &got), -ENOENT);
        fail_limits = false;
        for (int k = 0; k < 300 && n_destroyed < destroyed0 + 2; k++)
                (void)loop_run_once(dm.loop, 10);
        assert_int_equal(n_destroyed, destroyed0 + 2);
        wait_ready(p, 2);

        printf("check: pooled sandboxes whose init died are destroyed, not handed out\n");
        pthread_mutex_lock(&mu);
        for (int i = 0; i < MAX_FAKE; i++)
                if (fakes[i])
                        assert_int_equal(write(fakes[i]->pfd[1], "x", 1), 1);
        pthread_mutex_unlock(&mu);
        int64_t died0 = field(p, "died");
        assert_int_equal(wpool_take(p, &want_base, &got), -ENOENT); /* before the loop saw it */
        assert_int_equal(field(p, "died") - died0, 2);
        wait_ready(p, 2); /* replaced by two live ones */
        assert_int_equal(wpool_take(p, &want_base, &got), 0);
        char buf[1];
        assert_int_equal(read(got.sb->pfd[0], buf, 0), 0);
        (void)f_destroy(got.sb);
        free(got.dir);
        p = wpool_free(p);
        assert_int_equal(live(), 0);
}

static void test_shrink_and_template_change(void **state) {
        (void)state;
        struct wpool *p = NULL;
        assert_int_equal(wpool_new(&dm, 0, &p), 0);
        assert_int_equal(wpool_set(p, "base", 4), 0);
        wait_ready(p, 4);
        printf("check: lowering the size destroys the extra ones\n");
        assert_int_equal(wpool_set(p, "base", 1), 0);
        wait_ready(p, 1);

        printf("check: a rebuilt template (another rootfs) empties the pool, which refills\n");
        char a[256], b[256];
        snprintf(a, sizeof a, "%s/templates/base", data);
        snprintf(b, sizeof b, "%s/templates/base.old", data);
        assert_int_equal(rename(a, b), 0);
        make_template();
        int created0 = n_created;
        wpool_tick(p);
        wait_ready(p, 1);
        assert_true(n_created > created0);
        struct wpool_sandbox got;
        assert_int_equal(wpool_take(p, &want_base, &got), 0);
        (void)f_destroy(got.sb);
        free(got.dir);
        (void)rt_rm_rf(b);

        printf("check: a template that is gone empties the pool and takes go cold\n");
        wait_ready(p, 1);
        assert_int_equal(rt_rm_rf(a), 0);
        assert_int_equal(wpool_take(p, &want_base, &got), -ENOENT);
        for (int k = 0; k < 300 && live() > 0; k++)
                (void)loop_run_once(dm.loop, 10);
        assert_int_equal(live(), 0);
        make_template();
        p = wpool_free(p);
        assert_int_equal(live(), 0);
}

/* Runs the loop for ms while requests keep coming (daemon.request_ms kept at now). */
static void busy_for(int ms) {
        uint64_t end = util_now_ms() + (uint64_t)ms;
        while (util_now_ms() < end) {
                dm.request_ms = util_now_ms();
                (void)loop_run_once(dm.loop, 5);
        }
}

static void take_one(struct wpool *p) {
        struct wpool_sandbox got;
        assert_int_equal(wpool_take(p, &want_base, &got), 0);
        (void)f_destroy(got.sb);
        free(got.dir);
}

static void test_quiet_refill(void **state) {
        (void)state;
        struct wpool *p = NULL;
        assert_int_equal(wpool_new(&dm, 300, &p), 0);
        dm.request_ms = 0;
        assert_int_equal(wpool_set(p, "base", 4), 0);
        wait_ready(p, 4);

        printf("check: above half its size, nothing is made while requests keep coming\n");
        int created0 = n_created;
        dm.request_ms = util_now_ms();
        take_one(p);
        busy_for(400);
        assert_int_equal(n_created, created0);
        assert_int_equal(field(p, "ready"), 3);
        assert_int_equal(field(p, "making"), 0);

        printf("check: ... and the one missing is made in the quiet after them\n");
        uint64_t quiet_from = util_now_ms();
        wait_ready(p, 4);
        assert_true(util_now_ms() - quiet_from >= 250); /* not before the quiet (300 ms, less the loop's steps) */
        assert_int_equal(n_created, created0 + 1);

        printf("check: below half its size the pool refills at once, busy or not, up to half\n");
        created0 = n_created;
        dm.request_ms = util_now_ms();
        for (int i = 0; i < 4; i++)
                take_one(p);
        busy_for(400);
        assert_int_equal(field(p, "ready"), 2);
        assert_int_equal(n_created, created0 + 2);
        printf("check: ... and the rest once it is quiet\n");
        wait_ready(p, 4);
        assert_int_equal(n_created, created0 + 4);

        printf("check: requests that never pause hold a refill back 20 x the quiet at most\n");
        p = wpool_free(p);
        assert_int_equal(wpool_new(&dm, 20, &p), 0);
        dm.request_ms = 0;
        assert_int_equal(wpool_set(p, "base", 4), 0);
        wait_ready(p, 4);
        created0 = n_created;
        dm.request_ms = util_now_ms();
        take_one(p);
        busy_for(150); /* under 20 x 20 ms */
        assert_int_equal(n_created, created0);
        busy_for(600);
        assert_int_equal(n_created, created0 + 1);
        wait_ready(p, 4);

        printf("check: with --pool-quiet 0 a take is replaced at once\n");
        p = wpool_free(p);
        assert_int_equal(wpool_new(&dm, 0, &p), 0);
        assert_int_equal(wpool_set(p, "base", 4), 0);
        wait_ready(p, 4);
        created0 = n_created;
        dm.request_ms = util_now_ms();
        take_one(p);
        for (int k = 0; k < 300 && n_created == created0; k++)
                (void)loop_run_once(dm.loop, 1);
        assert_int_equal(n_created, created0 + 1);
        wait_ready(p, 4);
        p = wpool_free(p);
        assert_int_equal(live(), 0);
}

static void test_args(void **state) {
        (void)state;
        printf("check: --pool TEMPLATE=N syntax and limits\n");
        assert_int_equal(wpool_set_arg(NULL, "base=3"), 0);
        assert_int_equal(wpool_set_arg(NULL, "base=0"), 0);
        assert_int_equal(wpool_set_arg(NULL, "py.3-x=256"), 0);
        const char *bad[] = { "base", "=3", "base=", "base=-1", "base=257", "base=3x", "Base=1", "../x=1", "a/b=1" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(wpool_set_arg(NULL, bad[i]), -EINVAL);
        struct wpool *p = NULL;
        assert_int_equal(wpool_new(&dm, 0, &p), 0);
        assert_int_equal(wpool_set(p, "base", WPOOL_MAX_SIZE + 1), -EINVAL);
        assert_int_equal(wpool_set(p, "no/slash", 1), -EINVAL);
        p = wpool_free(p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_args),
                cmocka_unit_test(test_fill_take_refill),
                cmocka_unit_test(test_bad_sandboxes_never_handed_out),
                cmocka_unit_test(test_shrink_and_template_change),
                cmocka_unit_test(test_quiet_refill),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
