/* Unit tests of fdio: fdio_write_all (a write larger than a pipe holds, interrupted by a
 * timer signal again and again (short writes, EINTR), arrives whole and in order; a closed
 * reader gives -EPIPE; a bad fd its errno), fdio_read through EINTR, and the directory
 * streams of fdio_opendir and fdio_fdopendir. */
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
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
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


struct late_writer {
        int fd;
        unsigned delay_us;
};

static void *write_late(void *p) {
        struct late_writer *w = p;
        usleep(w->delay_us);
        ssize_t n = write(w->fd, "hello", 5);
        return (void *)(intptr_t)n;
}

static void test_read_through_eintr(void **state) {
        (void)state;
        printf("checks: fdio_read blocked on an empty pipe while a 1 ms timer (no SA_RESTART) fires "
               "returns the 5 bytes written 30 ms later; then 0 at EOF; -EBADF on a closed fd\n");
        sigset_t alrm, old;
        sigemptyset(&alrm);
        sigaddset(&alrm, SIGALRM);
        struct sigaction sa = { .sa_handler = on_alarm };
        assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        struct late_writer w = { .fd = p[1], .delay_us = 30000 };
        pthread_t th;
        assert_int_equal(pthread_sigmask(SIG_BLOCK, &alrm, &old), 0);
        assert_int_equal(pthread_create(&th, NULL, write_late, &w), 0);
        assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
        alarms = 0;
        struct itimerval it = { .it_interval = { 0, 1000 }, .it_value = { 0, 1000 } };
        assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
        char buf[16];
        ssize_t n = fdio_read(p[0], buf, sizeof buf);
        struct itimerval off = { 0 };
        setitimer(ITIMER_REAL, &off, NULL);
        void *wr;
        pthread_join(th, &wr);
        assert_int_equal((intptr_t)wr, 5);
        printf("the read was interrupted by %d timer signals\n", (int)alarms);
        assert_true(alarms > 0);
        assert_int_equal(n, 5);
        assert_memory_equal(buf, "hello", 5);
        close(p[1]);
        assert_int_equal(fdio_read(p[0], buf, sizeof buf), 0);
        close(p[0]);
        assert_int_equal(fdio_read(p[0], buf, sizeof buf), -EBADF);
}

static size_t count_entries(DIR *d) {
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        return n;
}

static void test_opendir(void **state) {
        (void)state;
        printf("checks: fdio_opendir lists a directory from its start even after another stream over "
               "the same fd read it all, its fd is close-on-exec and not the caller's, the caller's fd "
               "survives closedir; a file gives -ENOTDIR, a closed fd -EBADF; fdio_fdopendir owns its "
               "fd and closes it when it fails\n");
        char dir[] = "/tmp/test_fdio.XXXXXX";
        assert_non_null(mkdtemp(dir));
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dfd >= 0);
        for (int i = 0; i < 40; i++) {
                char name[16];
                snprintf(name, sizeof name, "f%02d", i);
                int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                assert_true(fd >= 0);
                close(fd);
        }
        DIR *a;
        assert_int_equal(fdio_opendir(dfd, &a), 0);
        assert_int_equal(count_entries(a), 40); /* moves the offset the fds share to the end */
        closedir(a);
        DIR *b = NULL;
        assert_int_equal(fdio_opendir(dfd, &b), 0);
        assert_non_null(b);
        assert_int_not_equal(dirfd(b), dfd);
        assert_true(fcntl(dirfd(b), F_GETFD) & FD_CLOEXEC);
        assert_int_equal(count_entries(b), 40);
        closedir(b);
        assert_true(fcntl(dfd, F_GETFD) >= 0);

        int ffd = openat(dfd, "f00", O_RDONLY | O_CLOEXEC);
        assert_true(ffd >= 0);
        DIR *untouched = (DIR *)&untouched;
        assert_int_equal(fdio_opendir(ffd, &untouched), -ENOTDIR);
        assert_ptr_equal(untouched, (DIR *)&untouched);
        assert_int_equal(fdio_fdopendir(ffd, &untouched), -ENOTDIR);
        assert_int_equal(fcntl(ffd, F_GETFD), -1); /* closed by the failure */
        assert_int_equal(errno, EBADF);
        assert_int_equal(fdio_opendir(ffd, &untouched), -EBADF);

        int own = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(own >= 0);
        DIR *c;
        assert_int_equal(fdio_fdopendir(own, &c), 0);
        assert_int_equal(dirfd(c), own);
        assert_int_equal(count_entries(c), 40);
        closedir(c);

        for (int i = 0; i < 40; i++) {
                char name[16];
                snprintf(name, sizeof name, "f%02d", i);
                assert_int_equal(unlinkat(dfd, name, 0), 0);
        }
        close(dfd);
        assert_int_equal(rmdir(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_large_write_arrives_whole),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_read_through_eintr),
                cmocka_unit_test(test_opendir),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
