/* Unit test of spaced's ingress (src/daemon/net/ingress.c) on socketpairs and loopback,
 * in the test's own network namespace (no root): a raw pipe carries the first bytes and
 * then both directions, half-closes passed on, and ends when both sides did; a client
 * that writes while the upstream reads nothing is stopped after a bounded amount; an
 * HTTP pipe ends after the upstream's answer; ingress_close ends an owner's pipes;
 * ingress_socket comes back to our namespace even when setns fails; a dial reports a
 * connected socket, or -ECONNREFUSED when nothing listens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "daemon/loop.h"
#include "daemon/net/ingress.h"

struct env {
        struct loop *l;
        struct ingress *ig;
};

static int setup(void **state) {
        static struct env e;
        assert_int_equal(loop_new(&e.l), 0);
        assert_int_equal(ingress_new(e.l, &e.ig), 0);
        *state = &e;
        return 0;
}

static int teardown(void **state) {
        struct env *e = *state;
        e->ig = ingress_free(e->ig);
        e->l = loop_free(e->l);
        return 0;
}

static void spin(struct env *e, int rounds) {
        for (int i = 0; i < rounds; i++)
                (void)loop_run_once(e->l, 10);
}

static void pair(int sv[2]) { assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0); }

/* Reads what fd has within a few loop rounds into out (NUL-terminated); -1 at EOF first. */
static ssize_t take(struct env *e, int fd, char *out, size_t n) {
        size_t got = 0;
        for (int i = 0; i < 50 && got < n - 1; i++) {
                spin(e, 1);
                ssize_t r = recv(fd, out + got, n - 1 - got, MSG_DONTWAIT);
                if (r == 0)
                        return got ? (ssize_t)got : -1;
                if (r > 0)
                        got += (size_t)r;
        }
        out[got] = '\0';
        return (ssize_t)got;
}

static void test_raw_pipe(void **state) {
        struct env *e = *state;
        int a[2], b[2];
        pair(a);
        pair(b);
        struct buf tc = BUF_INIT(0), tu = BUF_INIT(0);
        assert_int_equal(buf_puts(&tc, "101 "), 0);
        assert_int_equal(buf_puts(&tu, "HEAD "), 0);
        assert_int_equal(ingress_pipe_new(e->ig, INGRESS_PIPE_RAW, "ses_a", 80, a[1], &tc, b[1], &tu), 0);
        assert_int_equal(ingress_count(e->ig, "ses_a"), 1);
        char buf[256];
        assert_true(take(e, b[0], buf, sizeof buf) > 0);
        assert_string_equal(buf, "HEAD ");
        assert_true(take(e, a[0], buf, sizeof buf) > 0);
        assert_string_equal(buf, "101 ");
        assert_int_equal(send(a[0], "ping", 4, 0), 4);
        assert_true(take(e, b[0], buf, sizeof buf) > 0);
        assert_string_equal(buf, "ping");
        /* the client's EOF reaches the upstream; the upstream still answers after it */
        shutdown(a[0], SHUT_WR);
        assert_int_equal(take(e, b[0], buf, sizeof buf), -1);
        assert_int_equal(ingress_count(e->ig, "ses_a"), 1);
        assert_int_equal(send(b[0], "pong", 4, 0), 4);
        assert_true(take(e, a[0], buf, sizeof buf) > 0);
        assert_string_equal(buf, "pong");
        shutdown(b[0], SHUT_WR);
        assert_int_equal(take(e, a[0], buf, sizeof buf), -1);
        spin(e, 3);
        assert_int_equal(ingress_count(e->ig, "ses_a"), 0);
        close(a[0]);
        close(b[0]);
        buf_free(&tc);
        buf_free(&tu);
}

static void test_backpressure(void **state) {
        struct env *e = *state;
        int a[2], b[2];
        pair(a);
        pair(b);
        assert_int_equal(ingress_pipe_new(e->ig, INGRESS_PIPE_RAW, "ses_b", 80, a[1], NULL, b[1], NULL), 0);
        /* the upstream reads nothing: what the client may write stays bounded */
        static char chunk[64u << 10];
        size_t sent = 0;
        for (int i = 0; i < 2000; i++) {
                ssize_t n = send(a[0], chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n > 0)
                        sent += (size_t)n;
                spin(e, 1);
                if (n < 0 && i > 50)
                        break;
        }
        /* the pipe's buffer plus what the kernel holds in two socket pairs */
        assert_true(sent < INGRESS_PIPE_BUF + (8u << 20));
        assert_true(sent >= INGRESS_PIPE_BUF);
        /* draining the upstream lets everything through */
        size_t got = 0;
        for (int i = 0; i < 2000 && got < sent; i++) {
                ssize_t n = recv(b[0], chunk, sizeof chunk, MSG_DONTWAIT);
                if (n > 0)
                        got += (size_t)n;
                spin(e, 1);
        }
        assert_int_equal(got, sent);
        ingress_close(e->ig, "ses_b", 0);
        assert_int_equal(ingress_count(e->ig, "ses_b"), 0);
        close(a[0]);
        close(b[0]);
}

static void test_http_pipe(void **state) {
        struct env *e = *state;
        int a[2], b[2];
        pair(a);
        pair(b);
        assert_int_equal(ingress_pipe_new(e->ig, INGRESS_PIPE_HTTP, "ses_c", 80, a[1], NULL, b[1], NULL), 0);
        assert_int_equal(send(b[0], "HTTP/1.1 200 OK\r\n\r\nbody", 23, 0), 23);
        close(b[0]); /* the answer ends with the upstream's close */
        char buf[256];
        assert_true(take(e, a[0], buf, sizeof buf) > 0);
        assert_string_equal(buf, "HTTP/1.1 200 OK\r\n\r\nbody");
        assert_int_equal(take(e, a[0], buf, sizeof buf), -1);
        close(a[0]);
        spin(e, 3);
        assert_int_equal(ingress_count(e->ig, "ses_c"), 0);
}

static void test_close_owner(void **state) {
        struct env *e = *state;
        int a[2], b[2], c[2], d[2];
        pair(a), pair(b), pair(c), pair(d);
        assert_int_equal(ingress_pipe_new(e->ig, INGRESS_PIPE_RAW, "ses_d", 80, a[1], NULL, b[1], NULL), 0);
        assert_int_equal(ingress_pipe_new(e->ig, INGRESS_PIPE_RAW, "ses_d", 81, c[1], NULL, d[1], NULL), 0);
        ingress_close(e->ig, "ses_d", 81);
        assert_int_equal(ingress_count(e->ig, "ses_d"), 1);
        char buf[16];
        assert_int_equal(take(e, c[0], buf, sizeof buf), -1); /* its client sees the end */
        ingress_close(e->ig, "ses_d", 0);
        assert_int_equal(ingress_count(e->ig, "ses_d"), 0);
        close(a[0]), close(b[0]), close(c[0]), close(d[0]);
        spin(e, 1);
}

static ino_t netns_ino(void) {
        struct stat st;
        assert_int_equal(stat("/proc/thread-self/ns/net", &st), 0);
        return st.st_ino;
}

static void test_socket(void **state) {
        struct env *e = *state;
        ino_t before = netns_ino();
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        int fd = -1;
        /* not a namespace: refused, and the thread never left its own */
        assert_true(ingress_socket(e->ig, p[0], AF_INET, &fd) < 0);
        assert_int_equal(fd, -1);
        assert_true(netns_ino() == before);
        close(p[0]);
        close(p[1]);
        /* our own namespace (setns into it needs CAP_SYS_ADMIN; without it, refused alike) */
        int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        int r = ingress_socket(e->ig, self, AF_INET, &fd);
        assert_true(r == 0 || r == -EPERM);
        if (r == 0)
                close(fd);
        assert_true(netns_ino() == before);
        close(self);
}

struct dialled {
        bool done;
        int fd;
};

static void on_dial(void *ctx, int fd) {
        struct dialled *d = ctx;
        d->done = true;
        d->fd = fd;
}

static void test_dial(void **state) {
        struct env *e = *state;
        if (geteuid() != 0)
                skip(); /* setns needs CAP_SYS_ADMIN */
        int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof sa;
        assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
        assert_int_equal(listen(l, 4), 0);
        assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
        uint16_t port = ntohs(sa.sin_port);
        struct dialled d = { 0 };
        struct ingress_dial *dl;
        assert_int_equal(ingress_dial(e->ig, self, port, "ses_e", on_dial, &d, &dl), 0);
        assert_false(d.done); /* never from inside ingress_dial */
        for (int i = 0; i < 50 && !d.done; i++)
                spin(e, 1);
        assert_true(d.done);
        assert_true(d.fd >= 0);
        close(d.fd);
        close(l); /* nothing listens now (v4 nor v6) */
        d = (struct dialled){ 0 };
        assert_int_equal(ingress_dial(e->ig, self, port, "ses_e", on_dial, &d, &dl), 0);
        for (int i = 0; i < 50 && !d.done; i++)
                spin(e, 1);
        assert_true(d.done);
        assert_true(d.fd == -ECONNREFUSED || d.fd == -EADDRNOTAVAIL || d.fd == -ENETUNREACH);
        /* a cancelled dial never calls back */
        d = (struct dialled){ 0 };
        assert_int_equal(ingress_dial(e->ig, self, port, "ses_e", on_dial, &d, &dl), 0);
        ingress_dial_cancel(dl);
        spin(e, 5);
        assert_false(d.done);
        assert_int_equal(ingress_count(e->ig, "ses_e"), 0);
        close(self);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_raw_pipe),    cmocka_unit_test(test_backpressure),
                cmocka_unit_test(test_http_pipe),   cmocka_unit_test(test_close_owner),
                cmocka_unit_test(test_socket),      cmocka_unit_test(test_dial),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
