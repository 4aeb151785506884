/* Unit tests of fdio_write_all: a write larger than a pipe holds, interrupted by a timer
 * signal again and again (short writes, EINTR), arrives whole and in order; a closed reader
 * gives -EPIPE; a bad fd its errno. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/fdio.h"

#define BIG (1u << 20) /* 16 times a default pipe's 64 KiB */

struct reader {
        int fd;
        unsigned char *got;
        size_t len;
};

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
        (void)sig;
        alarms++;
}

/* Reads in small pieces, slowly, so the writer blocks often and the timer cuts its writes. */
static void *read_all(void *p) {
        struct reader *r = p;
        for (;;) {
                usleep(200);
                ssize_t n = read(r->fd, r->got + r->len, BIG + 1 - r->len < 4096 ? BIG + 1 - r->len : 4096);
                if (n <= 0)
                        return NULL;
                r->len += (size_t)n;
        }
}

static void test_large_write_arrives_whole(void **state) {
        (void)state;
        printf("checks: 1 MiB through a pipe read 4 KiB at a time, the writer interrupted by a 1 ms timer "
               "(no SA_RESTART), arrives complete and in order\n");
        /* the signal goes to the process; block it in the reader so the writer takes it */
        sigset_t alrm, old;
        sigemptyset(&alrm);
        sigaddset(&alrm, SIGALRM);
        struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART: write returns short or EINTR */
        assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        unsigned char *data = malloc(BIG);
        assert_non_null(data);
        for (size_t i = 0; i < BIG; i++)
                data[i] = (unsigned char)(i * 7 + i / 251);
        struct reader r = { .fd = p[0], .got = malloc(BIG + 1) };
        assert_non_null(r.got);
        pthread_t th;
        assert_int_equal(pthread_sigmask(SIG_BLOCK, &alrm, &old), 0);
        assert_int_equal(pthread_create(&th, NULL, read_all, &r), 0);
        assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
        struct itimerval it = { .it_interval = { 0, 1000 }, .it_value = { 0, 1000 } };
        assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
        int r0 = fdio_write_all(p[1], data, BIG);
        struct itimerval off = { 0 };
        setitimer(ITIMER_REAL, &off, NULL);
        assert_int_equal(r0, 0);
        printf("the write was interrupted by %d timer signals\n", (int)alarms);
        assert_true(alarms > 0);
        close(p[1]);
        pthread_join(th, NULL);
        close(p[0]);
        assert_int_equal(r.len, BIG);
        assert_memory_equal(r.got, data, BIG);
        free(r.got);
        free(data);
}

static void test_errors(void **state) {
        (void)state;
        printf("checks: a pipe without a reader gives -EPIPE; a closed fd gives -EBADF; 0 bytes is 0\n");
        signal(SIGPIPE, SIG_IGN);
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        close(p[0]);
        assert_int_equal(fdio_write_all(p[1], "x", 1), -EPIPE);
        assert_int_equal(fdio_write_all(p[1], "", 0), 0);
        close(p[1]);
        assert_int_equal(fdio_write_all(p[1], "x", 1), -EBADF);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_large_write_arrives_whole),
                cmocka_unit_test(test_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
