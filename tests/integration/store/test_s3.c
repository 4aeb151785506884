/* store.s3_client: the S3 client (src/store/s3.h) against the private Swift of
 * tests/s3/s3-server (s3api + tempauth on loopback): bucket, put/get/head/delete of a
 * buffer and of a 64 MiB file, a list paged two keys at a time, a missing key, a wrong
 * secret, an object over the caller's limit, and the server going away during use and
 * coming back: a call while it is down fails within its bound, one that retries across
 * its return succeeds, and nothing stored before is lost. Usage: test_s3 S3_SERVER_SCRIPT */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "store/s3.h"

static const char *script;
static char dir[64], endpoint[128];
static bool started;

/* `s3-server CMD DIR` (start, stop, stop-proxy, start-proxy): its exit status. */
static int server(const char *cmd) {
        char line[512];
        snprintf(line, sizeof line, "sh %s %s %s", script, cmd, dir);
        int st = system(line);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* n bytes of a xorshift stream (seed) to path. */
static void write_random(const char *path, uint64_t seed, size_t n) {
        static uint64_t chunk[1 << 17];
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        for (size_t done = 0; done < n;) {
                for (size_t i = 0; i < sizeof chunk / sizeof chunk[0]; i++) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        chunk[i] = seed;
                }
                size_t want = n - done < sizeof chunk ? n - done : sizeof chunk;
                assert_int_equal(write(fd, chunk, want), (ssize_t)want);
                done += want;
        }
        close(fd);
}

/* The two files hold the same bytes. */
static bool same_file(const char *a, const char *b) {
        static char x[1 << 20], y[1 << 20];
        int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
        assert_true(fa >= 0 && fb >= 0);
        bool same = true;
        for (;;) {
                ssize_t na = read(fa, x, sizeof x), nb = read(fb, y, sizeof y);
                if (na != nb || na < 0 || memcmp(x, y, (size_t)na) != 0) {
                        same = false;
                        break;
                }
                if (na == 0)
                        break;
        }
        close(fa);
        close(fb);
        return same;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct s3 *client(const char *secret, int retries) {
        struct s3 *s = NULL;
        struct s3_config c = { .endpoint = endpoint, .region = "us-east-1", .access_key = "test:tester",
                               .secret_key = secret, .bucket = "space-test", .timeout_ms = 10000, .retries = retries };
        assert_int_equal(s3_new(&c, &s), 0);
        return s;
}

static int setup(void **state) {
        (void)state;
        snprintf(dir, sizeof dir, "/tmp/space-s3c.%d", (int)getpid());
        char cmd[512], line[512] = "";
        snprintf(cmd, sizeof cmd, "sh %s start %s", script, dir);
        FILE *f = popen(cmd, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof line, f) && !strstr(line, "endpoint="))
                ;
        int st = pclose(f);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
                printf("# SKIP: swift is not installed\n");
                exit(77);
        }
        const char *e = strstr(line, "endpoint=");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !e) {
                printf("# the S3 server did not start (exit %d)\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
                (void)server("stop");
                return -1;
        }
        started = true;
        sscanf(e, "endpoint=%127s", endpoint);
        printf("# S3 server at %s\n", endpoint);
        /* the proxy answers before the account server takes requests: up to 15 s */
        struct s3 *s = client("testing", 0);
        int r = -1;
        for (int64_t end = now_ms() + 15000; (r = s3_bucket_create(s)) < 0 && now_ms() < end;)
                usleep(300000);
        if (r < 0)
                printf("# bucket: %s\n", s3_last_error(s));
        s3_free(s);
        return r < 0 ? -1 : 0;
}

static int teardown(void **state) {
        (void)state;
        if (started)
                (void)server("stop");
        return 0;
}

static void test_objects(void **state) {
        (void)state;
        struct s3 *s = client("testing", -1);
        assert_int_equal(s3_bucket_create(s), 0); /* again: ours already */
        static const char text[] = "hello from the store";
        assert_int_equal(s3_put(s, "objects/ab/hello", text, sizeof text - 1), 0);
        void *got = NULL;
        size_t n = 0;
        assert_int_equal(s3_get(s, "objects/ab/hello", 1024, &got, &n), 0);
        assert_int_equal(n, sizeof text - 1);
        assert_memory_equal(got, text, n);
        free(got);
        uint64_t size = 0;
        assert_int_equal(s3_head(s, "objects/ab/hello", &size), 0);
        assert_int_equal(size, sizeof text - 1);

        printf("# a key with characters that need encoding\n");
        assert_int_equal(s3_put(s, "odd key/+&=?#%.txt", "x", 1), 0);
        assert_int_equal(s3_head(s, "odd key/+&=?#%.txt", &size), 0);
        assert_int_equal(size, 1);

        printf("# an empty object\n");
        assert_int_equal(s3_put(s, "empty", NULL, 0), 0);
        assert_int_equal(s3_get(s, "empty", 16, &got, &n), 0);
        assert_int_equal(n, 0);
        free(got);

        printf("# over the caller's limit: -EFBIG; a missing key: -ENOENT\n");
        assert_int_equal(s3_get(s, "objects/ab/hello", 4, &got, &n), -EFBIG);
        assert_int_equal(s3_get(s, "objects/none", 1024, &got, &n), -ENOENT);
        assert_int_equal(s3_head(s, "objects/none", &size), -ENOENT);
        printf("# %s\n", s3_last_error(s));

        printf("# bad keys are refused before a request\n");
        assert_int_equal(s3_put(s, "", "x", 1), -EINVAL);
        assert_int_equal(s3_put(s, "/lead", "x", 1), -EINVAL);
        assert_int_equal(s3_put(s, "a\nb", "x", 1), -EINVAL);
        char longkey[S3_KEY_MAX + 2];
        memset(longkey, 'k', sizeof longkey - 1);
        longkey[sizeof longkey - 1] = '\0';
        assert_int_equal(s3_put(s, longkey, "x", 1), -EINVAL);

        printf("# delete, then it is gone; deleting it again is fine\n");
        assert_int_equal(s3_delete(s, "objects/ab/hello"), 0);
        assert_int_equal(s3_head(s, "objects/ab/hello", &size), -ENOENT);
        assert_int_equal(s3_delete(s, "objects/ab/hello"), 0);
        s3_free(s);
}

static void test_big_file(void **state) {
        (void)state;
        struct s3 *s = client("testing", -1);
        char src[128], dst[128];
        snprintf(src, sizeof src, "%s.src", dir);
        snprintf(dst, sizeof dst, "%s.dst", dir);
        write_random(src, (uint64_t)getpid() | 1, 64u << 20);
        int in = open(src, O_RDONLY | O_CLOEXEC);
        assert_true(in >= 0);
        int64_t t0 = now_ms();
        assert_int_equal(s3_put_fd(s, "packs/big", in), 0);
        printf("# 64 MiB up in %lld ms\n", (long long)(now_ms() - t0));
        close(in);
        uint64_t size = 0;
        assert_int_equal(s3_head(s, "packs/big", &size), 0);
        assert_int_equal(size, 64u << 20);
        int out = open(dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(out >= 0);
        uint64_t n = 0;
        t0 = now_ms();
        assert_int_equal(s3_get_fd(s, "packs/big", out, &n), 0);
        printf("# 64 MiB down in %lld ms\n", (long long)(now_ms() - t0));
        close(out);
        assert_int_equal(n, 64u << 20);
        assert_true(same_file(src, dst));
        printf("# a pipe is not a regular file\n");
        int p[2];
        assert_int_equal(pipe(p), 0);
        assert_int_equal(s3_put_fd(s, "packs/pipe", p[0]), -EINVAL);
        close(p[0]);
        close(p[1]);
        unlink(src);
        unlink(dst);
        assert_int_equal(s3_delete(s, "packs/big"), 0);
        s3_free(s);
}

struct seen {
        char keys[16][64];
        uint64_t sizes[16];
        int64_t mtimes[16];
        int n;
};

static int collect(const char *key, uint64_t size, int64_t mtime, void *ud) {
        struct seen *v = ud;
        if (v->n >= 16)
                return 99;
        snprintf(v->keys[v->n], sizeof v->keys[0], "%s", key);
        v->mtimes[v->n] = mtime;
        v->sizes[v->n++] = size;
        return 0;
}

static void test_list(void **state) {
        (void)state;
        struct s3 *s = client("testing", -1);
        int64_t before = (int64_t)time(NULL);
        for (int i = 0; i < 5; i++) {
                char k[32], v[16];
                snprintf(k, sizeof k, "list/k%d", i);
                snprintf(v, sizeof v, "%.*s", i + 1, "abcdefgh");
                assert_int_equal(s3_put(s, k, v, strlen(v)), 0);
        }
        assert_int_equal(s3_put(s, "listx/other", "o", 1), 0);
        printf("# five keys under list/, two a page: three pages, continuation tokens\n");
        struct seen v = { 0 };
        assert_int_equal(s3_list(s, "list/", 2, collect, &v), 0);
        assert_int_equal(v.n, 5);
        for (int i = 0; i < 5; i++) {
                char k[32];
                snprintf(k, sizeof k, "list/k%d", i);
                assert_string_equal(v.keys[i], k);
                assert_int_equal(v.sizes[i], (uint64_t)i + 1);
                /* LastModified: the server's clock, the same machine here (whole seconds) */
                assert_true(v.mtimes[i] >= before - 2 && v.mtimes[i] <= (int64_t)time(NULL) + 2);
        }
        printf("# HEAD's Last-Modified agrees with the list's\n");
        uint64_t hsize = 0;
        int64_t hmtime = 0;
        assert_int_equal(s3_head_mtime(s, "list/k4", &hsize, &hmtime), 0);
        assert_int_equal(hsize, 5);
        assert_true(hmtime >= v.mtimes[4] - 1 && hmtime <= v.mtimes[4] + 1);
        printf("# a callback that stops the walk\n");
        struct seen w = { .n = 16 };
        assert_int_equal(s3_list(s, "list/", 2, collect, &w), 99);
        assert_int_equal(s3_list(s, "list/", S3_LIST_PAGE_MAX + 1, collect, &w), -EINVAL);
        struct seen none = { 0 };
        assert_int_equal(s3_list(s, "nothing-here/", 0, collect, &none), 0);
        assert_int_equal(none.n, 0);
        s3_free(s);
}

static void test_credentials(void **state) {
        (void)state;
        struct s3 *s = client("not-the-secret", 0);
        assert_int_equal(s3_put(s, "objects/x", "x", 1), -EACCES);
        printf("# %s\n", s3_last_error(s));
        s3_free(s);
        struct s3 *bad = NULL;
        struct s3_config c = { .endpoint = "ftp://x", .region = "us-east-1", .access_key = "a", .secret_key = "b",
                               .bucket = "space-test", .retries = -1 };
        assert_int_equal(s3_new(&c, &bad), -EINVAL);
        c.endpoint = endpoint;
        c.bucket = "Upper_Case";
        assert_int_equal(s3_new(&c, &bad), -EINVAL);
        c.bucket = "space-test";
        c.retries = (int)S3_RETRIES_MAX + 1;
        assert_int_equal(s3_new(&c, &bad), -EINVAL);
}

static void test_down_and_back(void **state) {
        (void)state;
        struct s3 *s = client("testing", -1);
        assert_int_equal(s3_put(s, "keep/before", "stored before", 13), 0);
        assert_int_equal(server("stop-proxy"), 0);
        printf("# the server is down: a call without retries fails at once\n");
        struct s3 *once = client("testing", 0);
        int64_t t0 = now_ms();
        assert_int_equal(s3_put(once, "keep/during", "x", 1), -ECONNREFUSED);
        assert_true(now_ms() - t0 < 5000);
        printf("# %s (%lld ms)\n", s3_last_error(once), (long long)(now_ms() - t0));
        s3_free(once);
        printf("# with retries, a put made while it is down lands once it is back\n");
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                usleep(500000);
                _exit(server("start-proxy"));
        }
        struct s3 *patient = client("testing", 10); /* ~13 s of backoff in all */
        t0 = now_ms();
        int r = s3_put(patient, "keep/during", "made while down", 15);
        printf("# put across the restart: %d after %lld ms%s%s\n", r, (long long)(now_ms() - t0), r ? ": " : "",
               r ? s3_last_error(patient) : "");
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_int_equal(r, 0);
        void *got = NULL;
        size_t n = 0;
        assert_int_equal(s3_get(patient, "keep/during", 64, &got, &n), 0);
        assert_int_equal(n, 15);
        assert_memory_equal(got, "made while down", 15);
        free(got);
        printf("# and what was stored before is still there\n");
        assert_int_equal(s3_get(patient, "keep/before", 64, &got, &n), 0);
        assert_int_equal(n, 13);
        assert_memory_equal(got, "stored before", 13);
        free(got);
        s3_free(patient);
        s3_free(s);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: %s S3_SERVER_SCRIPT\n", argv[0]);
                return 2;
        }
        script = argv[1];
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_objects),     cmocka_unit_test(test_big_file),
                cmocka_unit_test(test_list),        cmocka_unit_test(test_credentials),
                cmocka_unit_test(test_down_and_back),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
