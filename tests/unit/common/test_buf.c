/* Unit tests for struct buf: growth, the cap, consume, reading an fd to its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/fdio.h"

static void test_append_and_cstr(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        for (int i = 0; i < 1000; i++)
                assert_int_equal(buf_printf(&b, "%03d", i % 1000), 0);
        assert_int_equal(b.len, 3000);
        assert_memory_equal(buf_cstr(&b) + 2997, "999", 4);
}

static void test_cap_refuses_growth(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(10);
        assert_int_equal(buf_append(&b, "0123456789", 10), 0);
        assert_int_equal(buf_putc(&b, 'x'), -E2BIG);
        assert_int_equal(b.len, 10);
        assert_int_equal(buf_printf(&b, "%s", "y"), -E2BIG);
}

static void test_consume(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(buf_puts(&b, "hello world"), 0);
        buf_consume(&b, 6);
        assert_string_equal(buf_cstr(&b), "world");
        buf_consume(&b, 100);
        assert_int_equal(b.len, 0);
}

struct feeder {
        int fd;
        const char *data;
        size_t n;
};

static void *feed(void *p) {
        struct feeder *f = p;
        (void)fdio_write_all(f->fd, f->data, f->n);
        close(f->fd);
        return NULL;
}

/* buf_read_fd on a pipe another thread writes n bytes of a pattern into. */
static int read_piped(size_t n, size_t max, size_t *ret_len) {
        static char data[400000];
        for (size_t i = 0; i < sizeof data; i++)
                data[i] = (char)(i % 253);
        assert_true(n <= sizeof data);
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        struct feeder f = { .fd = p[1], .data = data, .n = n };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, feed, &f), 0);
        _cleanup_buf_ struct buf b = BUF_INIT(max);
        int r = buf_read_fd(&b, p[0]);
        close(p[0]); /* a writer still blocked gets EPIPE */
        pthread_join(th, NULL);
        if (r == 0)
                assert_memory_equal(b.data, data, b.len);
        *ret_len = b.len;
        return r;
}

static void test_read_fd(void **state) {
        (void)state;
        signal(SIGPIPE, SIG_IGN);
        size_t len = 0;
        printf("checks: buf_read_fd takes an input that fills the cap exactly, or nearly (not a whole read chunk "
               "below it), and refuses one byte more with -E2BIG\n");
        assert_int_equal(read_piped(200000, 200000, &len), 0);
        assert_int_equal(len, 200000);
        assert_int_equal(read_piped(199000, 200000, &len), 0);
        assert_int_equal(len, 199000);
        assert_int_equal(read_piped(3 * 65536, 3 * 65536, &len), 0);
        assert_int_equal(len, 3 * 65536);
        assert_int_equal(read_piped(200001, 200000, &len), -E2BIG);
        printf("checks: without a cap it reads everything; an empty input and a bad fd\n");
        assert_int_equal(read_piped(400000, 0, &len), 0);
        assert_int_equal(len, 400000);
        assert_int_equal(read_piped(0, 10, &len), 0);
        assert_int_equal(len, 0);
        _cleanup_buf_ struct buf b = BUF_INIT(10);
        assert_int_equal(buf_read_fd(&b, -1), -EBADF);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_append_and_cstr),
                cmocka_unit_test(test_cap_refuses_growth),
                cmocka_unit_test(test_consume),
                cmocka_unit_test(test_read_fd),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
