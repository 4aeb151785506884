/* The seccomp policies, loaded for real in a forked child: refused calls fail with the
 * errno the tables say, argument rules decide as documented, unknown syscalls get ENOSYS,
 * and ordinary work (fork, threads, sockets on loopback) still works. Real programs under
 * the filter are tested in tests/integration/runtime/test_base.c. */
#include "fake.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <linux/sched.h>
#include "runtime/seccomp.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static int failures;

/* r: what the call returned (-1 and errno on failure); want: 0 for "succeeds", else the
 * errno it must fail with. */
static void expect(const char *what, long r, int err, int want) {
        bool ok = want == 0 ? r >= 0 : (r == -1 && err == want);
        if (!ok) {
                printf("#   FAIL %s: returned %ld errno %d (%s), wanted %s\n", what, r, err, strerror(err),
                       want ? strerror(want) : "success");
                failures++;
        }
}

#define EXPECT(want, call)                               \
        do {                                             \
                errno = 0;                               \
                long r_ = (long)(call);                  \
                expect(#call, r_, errno, want);          \
                if (r_ >= 0 && want == 0 && !strncmp(#call, "socket(", 7)) \
                        close((int)r_);                  \
        } while (0)

static void *thread_fn(void *arg) {
        return arg;
}

static int common_checks(void) {
        EXPECT(0, getpid());
        EXPECT(EPERM, syscall(SYS_bpf, 0, NULL, 0));
        EXPECT(EPERM, syscall(SYS_keyctl, 0, 0, 0, 0, 0));
        EXPECT(EPERM, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
        EXPECT(EPERM, syscall(SYS_userfaultfd, 0));
        EXPECT(EPERM, unshare(CLONE_NEWUSER));
        EXPECT(EPERM, syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS));
        EXPECT(ENOSYS, syscall(SYS_io_uring_setup, 1, NULL));
        struct clone_args ca = { .exit_signal = SIGCHLD };
        EXPECT(ENOSYS, syscall(SYS_clone3, &ca, sizeof ca));
        EXPECT(EPERM, mount("none", "/tmp", "tmpfs", 0, NULL));
        EXPECT(EPERM, syscall(SYS_fsopen, "tmpfs", 0));
        EXPECT(EPERM, umount2("/tmp", MNT_DETACH));
        EXPECT(EPERM, syscall(SYS_open_by_handle_at, -1, NULL, 0));
        EXPECT(EPERM, syscall(SYS_init_module, NULL, 0, ""));
        EXPECT(EPERM, syscall(SYS_kexec_load, 0, 0, NULL, 0));
        EXPECT(EPERM, syscall(SYS_clock_settime, CLOCK_REALTIME, NULL));
        EXPECT(EPERM, syscall(SYS_reboot, 0, 0, 0, NULL));
        EXPECT(EPERM, socket(AF_PACKET, SOCK_RAW, 0));
        EXPECT(EPERM, socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
        EXPECT(EPERM, socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6));
        EXPECT(EPERM, socket(AF_INET, SOCK_PACKET, 0));
        /* The upper half of a 32-bit argument cannot carry a refused value past the test. */
        EXPECT(EPERM, syscall(SYS_socket, 0x100000000l | AF_PACKET, SOCK_RAW, 0));
        EXPECT(EPERM, ioctl(0, TIOCSTI, "x"));
        EXPECT(0, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        EXPECT(0, socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));

        /* fork and threads (clone without CLONE_NEWUSER) still work */
        pid_t k = fork();
        if (k == 0)
                _exit(0);
        int st;
        EXPECT(0, k);
        EXPECT(0, waitpid(k, &st, 0));
        pthread_t t;
        EXPECT(0, -pthread_create(&t, NULL, thread_fn, NULL));
        EXPECT(0, -pthread_join(t, NULL));
        return 0;
}

static int allowlist_checks(void) {
        common_checks();
        /* the allow-list's own answers */
        EXPECT(ENOSYS, syscall(SYS_fanotify_mark, -1, 0, 0, -1, NULL)); /* not listed: ENOSYS */
        EXPECT(ENOSYS, syscall(SYS_memfd_secret, 0));
        EXPECT(EAFNOSUPPORT, socket(AF_VSOCK, SOCK_STREAM, 0));
        EXPECT(EAFNOSUPPORT, socket(AF_BLUETOOTH, SOCK_STREAM, 0));
        EXPECT(EAFNOSUPPORT, socket(200, SOCK_STREAM, 0));
        EXPECT(ENOSYS, socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP));
        EXPECT(ENOSYS, socket(AF_INET, SOCK_SEQPACKET, 0));
        EXPECT(0, socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, IPPROTO_UDP));
        EXPECT(0, socket(AF_INET, SOCK_STREAM, IPPROTO_TCP));
        EXPECT(0, socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0));
        /* the kernel drops the upper half of an ioctl request: still refused */
        EXPECT(EPERM, syscall(SYS_ioctl, 0, 0x100000000l | TIOCSTI, "x"));
        int n;
        int sv[2];
        EXPECT(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
        EXPECT(0, ioctl(sv[0], FIONREAD, &n));
        EXPECT(0, personality(0xffffffff));
        EXPECT(0, personality(PER_LINUX | ADDR_NO_RANDOMIZE));
        EXPECT(0, personality(PER_LINUX));
        EXPECT(ENOSYS, personality(PER_LINUX | READ_IMPLIES_EXEC));
        EXPECT(ENOSYS, personality(PER_SVR4));
        EXPECT(0, prctl(PR_SET_NAME, "probe", 0, 0, 0));
        EXPECT(ENOSYS, syscall(1000)); /* past every table */
        return 0;
}

static int run_child(enum rt_seccomp_policy pol, int (*checks)(void)) {
        struct rt_seccomp_prog p = { 0 };
        assert_int_equal(rt_seccomp_build(pol, &p), 0);
        assert_true(p.len > 10 && p.len <= RT_SECCOMP_MAX_INSNS);
        printf("# filter: %zu BPF instructions\n", p.len);
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || rt_seccomp_load(&p) < 0)
                        _exit(90);
                failures = 0;
                checks();
                fflush(stdout);
                _exit(failures > 60 ? 60 : failures);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        rt_seccomp_prog_free(&p);
        assert_null(p.insns);
        assert_true(WIFEXITED(st));
        return WEXITSTATUS(st);
}

static void test_allowlist(void **state) {
        printf("# seccomp allow-list: denied calls EPERM, io_uring/clone3/unknown ENOSYS, raw and\n"
               "# packet sockets EPERM, odd families EAFNOSUPPORT, userns refused, fork/threads fine\n");
        assert_int_equal(run_child(RT_SECCOMP_ALLOWLIST, allowlist_checks), 0);
}

/* Host tools the base template lacks (gcc, make, git, node, strace, gdb), run under the
 * allow-list without namespaces: what the filter alone lets through. Each tool is
 * checked when the host has it. */
static const char host_script[] =
        "set -e\n"
        "cd \"$1\"\n"
        "has() { command -v \"$1\" >/dev/null 2>&1; }\n"
        "if has gcc && has make; then\n"
        "  printf '#include <pthread.h>\\nstatic void *f(void *a) { return a; }\\n"
        "int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\\n' > a.c\n"
        "  printf 'a: a.c\\n\\t$(CC) -O1 -pthread -o a a.c\\n' > Makefile\n"
        "  make -s CC=gcc -j2 && ./a && echo '#   gcc + make ok'\n"
        "fi\n"
        "if has git; then\n"
        "  git init -q r && cd r && echo x > f && git add f &&\n"
        "  git -c user.email=t@example.org -c user.name=t commit -q -m x && git gc -q && git log --oneline | grep -q x\n"
        "  cd .. && git clone -q r r2 && test -f r2/f && echo '#   git ok'\n"
        "fi\n"
        "if has node; then\n"
        "  node -e \"const cp = require('child_process'), net = require('net'), fs = require('fs');\n"
        "    const { Worker } = require('worker_threads');\n"
        "    cp.execSync('true'); fs.writeFileSync('n.txt', 'n'); new Worker('1', { eval: true });\n"
        "    fs.promises.readFile('n.txt').then(() => { const s = net.createServer(c => c.end('hi'));\n"
        "      s.listen(0, '127.0.0.1', () => net.connect(s.address().port, '127.0.0.1')\n"
        "        .on('data', d => { s.close(); process.exit(d == 'hi' ? 0 : 1); })); });\"\n"
        "  echo '#   node ok'\n"
        "fi\n"
        "if has /usr/bin/python3; then\n"
        "  /usr/bin/python3 -c 'import asyncio, multiprocessing as m; asyncio.run(asyncio.sleep(0));"
        " p = m.Pool(2); assert p.map(abs, [-1, -2]) == [1, 2]; p.close()' && echo '#   python3 ok'\n"
        "fi\n"
        "if has strace; then strace -f -o /dev/null true && echo '#   strace ok'; fi\n"
        "if has gdb; then gdb -q -batch -ex run --args /bin/true >/dev/null 2>&1 && echo '#   gdb ok'; fi\n";

static void test_host_programs(void **state) {
        printf("# host tools under the allow-list (no namespaces): gcc+make, git, node, python3, strace, gdb\n");
        struct rt_seccomp_prog p = { 0 };
        assert_int_equal(rt_seccomp_build(RT_SECCOMP_ALLOWLIST, &p), 0);
        char *dir = fake_mkdtemp();
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || rt_seccomp_load(&p) < 0)
                        _exit(90);
                execl("/bin/sh", "sh", "-c", host_script, "sh", dir, (char *)NULL);
                _exit(91);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        rt_seccomp_prog_free(&p);
        rt_rm_rf(dir);
        free(dir);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                printf("# a tool failed under the filter (status 0x%x)\n", st);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_denylist(void **state) {
        printf("# seccomp deny-list: the same denials over a default of allow\n");
        assert_int_equal(run_child(RT_SECCOMP_DENYLIST, common_checks), 0);
}

static void test_bad_policy(void **state) {
        printf("# seccomp: an unknown policy is refused, nothing returned\n");
        struct rt_seccomp_prog p = { 0 };
        assert_int_equal(rt_seccomp_build((enum rt_seccomp_policy)7, &p), -EINVAL);
        assert_null(p.insns);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_allowlist),
                cmocka_unit_test(test_host_programs),
                cmocka_unit_test(test_denylist),
                cmocka_unit_test(test_bad_policy),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
