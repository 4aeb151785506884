/* Unit tests of the service manager's notifications (src/common/notify.c) and of log lines
 * on the journal (src/common/log.c): no $NOTIFY_SOCKET, a path and an abstract address,
 * the variable taken out of the environment, bad addresses and states, a listener gone;
 * syslog priorities when stderr is $JOURNAL_STREAM, the usual line when it is not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/notify.h"

/* A datagram socket bound to name (a path, or "@abstract"). */
static int listener(const char *name) {
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        size_t n = strlen(name);
        memcpy(a.sun_path, name, n);
        if (name[0] == '@')
                a.sun_path[0] = '\0';
        assert_int_equal(bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                                                                    (name[0] == '/'))),
                         0);
        return fd;
}

static void expect_datagram(int fd, const char *want) {
        char buf[NOTIFY_MAX_STATE + 1];
        ssize_t k = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        assert_true(k >= 0);
        buf[k] = '\0';
        assert_string_equal(buf, want);
}

static void test_none(void **state) {
        (void)state;
        printf("check: without $NOTIFY_SOCKET nothing is opened and a send does nothing\n");
        unsetenv("NOTIFY_SOCKET");
        struct notify n;
        assert_int_equal(notify_open(&n), 0);
        assert_int_equal(n.fd, -1);
        assert_int_equal(notify_send(&n, "READY=1"), 0);
        assert_int_equal(notify_send(NULL, "READY=1"), 0);
        notify_close(&n);
}

static void test_path(void **state) {
        (void)state;
        char dir[] = "/tmp/test_notify.XXXXXX", path[64];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/notify", dir);
        int l = listener(path);
        printf("check: a path: READY=1 and a multi-line state arrive as sent, one datagram each\n");
        setenv("NOTIFY_SOCKET", path, 1);
        struct notify n;
        assert_int_equal(notify_open(&n), 0);
        assert_true(n.fd >= 0);
        printf("check: the variable is gone, so that no child inherits it\n");
        assert_null(getenv("NOTIFY_SOCKET"));
        assert_int_equal(notify_send(&n, "READY=1"), 1);
        expect_datagram(l, "READY=1");
        assert_int_equal(notify_send(&n, "STOPPING=1\nSTATUS=bye"), 1);
        expect_datagram(l, "STOPPING=1\nSTATUS=bye");
        printf("check: an empty state and one over NOTIFY_MAX_STATE are refused, nothing sent\n");
        assert_int_equal(notify_send(&n, ""), -EINVAL);
        char big[NOTIFY_MAX_STATE + 2];
        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        assert_int_equal(notify_send(&n, big), -EINVAL);
        char buf[8];
        assert_int_equal(recv(l, buf, sizeof buf, MSG_DONTWAIT), -1);
        printf("check: once the manager's socket is gone, a send says so\n");
        close(l);
        unlink(path);
        assert_true(notify_send(&n, "READY=1") < 0);
        notify_close(&n);
        assert_int_equal(n.fd, -EBADF);
        assert_int_equal(rmdir(dir), 0);
}

static void test_abstract(void **state) {
        (void)state;
        char name[64];
        snprintf(name, sizeof name, "@space-test-notify-%d", (int)getpid());
        int l = listener(name);
        printf("check: an abstract address (@name) works the same\n");
        setenv("NOTIFY_SOCKET", name, 1);
        struct notify n;
        assert_int_equal(notify_open(&n), 0);
        assert_int_equal(notify_send(&n, "READY=1"), 1);
        expect_datagram(l, "READY=1");
        notify_close(&n);
        close(l);
}

static void test_bad(void **state) {
        (void)state;
        printf("check: a relative name, a bare '@' or '/', one too long: -EINVAL, variable gone\n");
        char longname[200];
        memset(longname, 'a', sizeof longname - 1);
        longname[0] = '/';
        longname[sizeof longname - 1] = '\0';
        const char *bad[] = { "notify", "@", "/", "", longname };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                setenv("NOTIFY_SOCKET", bad[i], 1);
                struct notify n;
                assert_int_equal(notify_open(&n), -EINVAL);
                assert_int_equal(n.fd, -1);
                assert_null(getenv("NOTIFY_SOCKET"));
                assert_int_equal(notify_send(&n, "READY=1"), 0);
        }
}

/* What one log_error writes to stderr with JOURNAL_STREAM set to journal ("" = unset,
 * "match" = stderr's own device and inode). */
static void log_line(const char *journal, char *out, size_t size) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        fflush(stderr);
        int saved = dup(STDERR_FILENO);
        assert_true(saved >= 0);
        assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
        close(p[1]);
        struct stat st;
        assert_int_equal(fstat(STDERR_FILENO, &st), 0);
        char e[64];
        if (strcmp(journal, "match") == 0) {
                snprintf(e, sizeof e, "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
                setenv("JOURNAL_STREAM", e, 1);
        } else if (*journal)
                setenv("JOURNAL_STREAM", journal, 1);
        else
                unsetenv("JOURNAL_STREAM");
        log_set_ident("tester");
        log_error("it broke: %d", 42);
        log_warn("careful");
        log_debug("not shown at the info level");
        assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
        close(saved);
        ssize_t k = read(p[0], out, size - 1);
        assert_true(k > 0);
        out[k] = '\0';
        close(p[0]);
        unsetenv("JOURNAL_STREAM");
        log_set_ident("tester");
}

static void test_journal(void **state) {
        (void)state;
        char out[512];
        log_set_level(LOG_INFO);
        printf("check: on the journal, each line starts with its syslog priority, no time or pid\n");
        log_line("match", out, sizeof out);
        assert_string_equal(out, "<3>error: it broke: 42\n<4>warn: careful\n");
        printf("check: elsewhere (unset, another stream, garbage), the usual line with time, name and pid\n");
        const char *others[] = { "", "1:2", "garbage", "5:6:7" };
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
                log_line(others[i], out, sizeof out);
                char want[64];
                snprintf(want, sizeof want, " tester[%d] error: it broke: 42\n", (int)getpid());
                assert_non_null(strstr(out, want));
                assert_true(out[2] == ':' && out[5] == ':' && out[8] == '.');
                assert_null(strstr(out, "<3>"));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_none), cmocka_unit_test(test_path),    cmocka_unit_test(test_abstract),
                cmocka_unit_test(test_bad),  cmocka_unit_test(test_journal),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
