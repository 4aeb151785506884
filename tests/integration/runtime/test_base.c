/* The default template end to end: template_ensure_base builds "base" (debootstrap
 * bookworm minbase + python3; from the host cache after the first run on a machine),
 * then a sandbox made from it runs python3 and sees a Debian root it owns. Then real
 * programs under the seccomp allow-list (bash, python3 with threads, subprocess,
 * multiprocessing, sockets, asyncio, venv; apt-get, git if present) and a probe that
 * calls every syscall the filter must refuse. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
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
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)

static char data[256];
/* A sandbox a failed assertion left alive; destroyed by the group teardown. */
static struct rt_sandbox *live;

static void progress(const char *line, void *ud) {
        int *n = ud;
        /* debootstrap is chatty: show the first lines and every 50th */
        if ((*n)++ < 5 || *n % 50 == 0)
                printf("#   %s\n", line);
}

static int read_full(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 60000) <= 0)
                        return -ETIMEDOUT;
                ssize_t k = read(fd, (char *)buf + got, n - got);
                if (k <= 0)
                        return -EIO;
                got += (size_t)k;
        }
        return 0;
}

static const char *run_ok(int fd, const char *cmd) {
        static char out[65536];
        uint32_t n = (uint32_t)strlen(cmd), len;
        int32_t st;
        assert_int_equal(write(fd, &n, 4), 4);
        assert_int_equal(write(fd, cmd, n), (ssize_t)n);
        assert_int_equal(read_full(fd, &st, 4), 0);
        assert_int_equal(read_full(fd, &len, 4), 0);
        assert_true(len < sizeof out);
        assert_int_equal(read_full(fd, out, len), 0);
        out[len] = 0;
        if (st != 0)
                printf("# '%s' -> status 0x%x: %s\n", cmd, st, out);
        assert_int_equal(st, 0);
        out[strcspn(out, "\n")] = 0;
        return out;
}

/* Runs cmd; returns its wait status and its output (static buffer) in *out. */
static int run_cmd(int fd, const char *cmd, const char **out) {
        static char buf[65536];
        uint32_t n = (uint32_t)strlen(cmd), len;
        int32_t st;
        assert_int_equal(write(fd, &n, 4), 4);
        assert_int_equal(write(fd, cmd, n), (ssize_t)n);
        assert_int_equal(read_full(fd, &st, 4), 0);
        assert_int_equal(read_full(fd, &len, 4), 0);
        assert_true(len < sizeof buf);
        assert_int_equal(read_full(fd, buf, len), 0);
        buf[len] = 0;
        *out = buf;
        return st;
}

static void test_base(void **state) {
        printf("# base template: ensure (debootstrap or cache), python3 runs as root inside\n");
        int lines = 0;
        time_t t0 = time(NULL);
        int r = template_ensure_base(data, progress, &lines);
        if (r < 0)
                printf("# ensure_base: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        printf("# base ready in %lds\n", (long)(time(NULL) - t0));
        assert_true(template_exists(data, TEMPLATE_BASE));
        assert_int_equal(template_ensure_base(data, NULL, NULL), 0); /* second call: nothing to do */

        char lower[512], up[512], work[512], run[512];
        PJ(lower, "%s/templates/base/rootfs", data);
        PJ(up, "%s/sbx/upper", data);
        PJ(work, "%s/sbx/work", data);
        PJ(run, "%s/sbx/run", data);
        assert_int_equal(rt_mkdir_p(up, 0755), 0);
        assert_int_equal(rt_mkdir_p(work, 0700), 0);
        assert_int_equal(rt_mkdir_p(run, 0700), 0);
        char id[64];
        PJ(id, "sbx_base%d", (int)getpid());
        struct rt_spec s = { .id = id, .lower_dirs = lower, .upper_dir = up, .work_dir = work,
                             .run_dir = run, .init_path = TEST_INIT_PATH };
        const struct runtime_ops *ops = runtime_find("ns");
        struct rt_sandbox *sb = NULL;
        r = ops->create(&s, &sb);
        if (r < 0)
                printf("# create: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        int fd = ops->init_fd(sb);
        assert_string_equal(run_ok(fd, "python3 -c 'print(6*7)'"), "42");
        assert_string_equal(run_ok(fd, "grep VERSION_CODENAME /etc/os-release"), "VERSION_CODENAME=bookworm");
        assert_string_equal(run_ok(fd, "stat -c %u:%g /usr/bin/python3 /etc | sort -u"), "0:0");
        assert_string_equal(run_ok(fd, "whoami"), "root");
        /* #15: the unprivileged user, added after the cache was unpacked */
        assert_string_equal(run_ok(fd, "grep ^user: /etc/passwd"), "user:x:1000:1000::/home/user:/bin/bash");
        assert_string_equal(run_ok(fd, "grep ^user: /etc/group"), "user:x:1000:");
        assert_string_equal(run_ok(fd, "grep -c '^user:!:' /etc/shadow"), "1");
        assert_string_equal(run_ok(fd, "stat -c '%U %u:%g %a' /home/user"), "user 1000:1000 755");
        run_ok(fd, "echo data > /root/file && python3 -c 'print(open(\"/root/file\").read())'");
        assert_int_equal(ops->destroy(sb), 0);
        char p[600];
        PJ(p, "%s/root/file", up);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
}

/* Writes a file into a sandbox's upper dir, owned by root inside. */
static void put_upper(const char *upper, const char *name, const void *bytes, size_t n, mode_t mode) {
        char p[700];
        PJ(p, "%s/%s", upper, name);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, bytes, n), (ssize_t)n);
        assert_int_equal(fchown(fd, RT_ID_BASE, RT_ID_BASE), 0);
        assert_int_equal(fchmod(fd, mode), 0);
        close(fd);
}

static void copy_to_upper(const char *upper, const char *name, const char *src) {
        int fd = open(src, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        char *b = malloc((size_t)st.st_size);
        assert_non_null(b);
        assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
        close(fd);
        put_upper(upper, name, b, (size_t)st.st_size, 0755);
        free(b);
}

/* What python3 must be able to do under the filter; prints "python ok" at the end. */
static const char py_check[] =
        "import asyncio, multiprocessing, os, socket, subprocess, sys, tempfile, threading\n"
        "def sq(x):\n"
        "    return x * x\n"
        "async def echo_server():\n"
        "    async def handle(r, w):\n"
        "        w.write(await r.readline()); await w.drain(); w.close()\n"
        "    srv = await asyncio.start_server(handle, '127.0.0.1', 0)\n"
        "    port = srv.sockets[0].getsockname()[1]\n"
        "    r, w = await asyncio.open_connection('127.0.0.1', port)\n"
        "    w.write(b'ping\\n'); await w.drain()\n"
        "    line = await r.readline(); w.close(); srv.close()\n"
        "    p = await asyncio.create_subprocess_exec('echo', 'async', stdout=asyncio.subprocess.PIPE)\n"
        "    out, _ = await p.communicate()\n"
        "    await asyncio.sleep(0.01)\n"
        "    return line, out\n"
        "if __name__ == '__main__':\n"
        "    res = []\n"
        "    ts = [threading.Thread(target=lambda i=i: res.append(i * i)) for i in range(8)]\n"
        "    [t.start() for t in ts]; [t.join() for t in ts]\n"
        "    assert sorted(res) == [i * i for i in range(8)], res\n"
        "    print('threads ok')\n"
        "    out = subprocess.run(['sh', '-c', 'echo sub'], capture_output=True, text=True, check=True).stdout\n"
        "    assert out == 'sub\\n', out\n"
        "    print('subprocess ok')\n"
        "    for method in ('fork', 'spawn', 'forkserver'):\n"
        "        with multiprocessing.get_context(method).Pool(2) as p:\n"
        "            assert p.map(sq, range(10)) == [x * x for x in range(10)]\n"
        "        print('multiprocessing', method, 'ok')\n"
        "    q = multiprocessing.Queue(); q.put(7); assert q.get() == 7\n"
        "    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "    c = socket.create_connection(s.getsockname()); a, _ = s.accept()\n"
        "    c.sendall(b'hello'); assert a.recv(5) == b'hello'\n"
        "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0))\n"
        "    u.sendto(b'dgram', u.getsockname()); assert u.recv(5) == b'dgram'\n"
        "    print('loopback sockets ok')\n"
        "    assert asyncio.run(echo_server()) == (b'ping\\n', b'async\\n')\n"
        "    print('asyncio ok')\n"
        "    with tempfile.TemporaryDirectory() as d:\n"
        "        open(os.path.join(d, 'f'), 'w').write('x'); os.rename(os.path.join(d, 'f'), os.path.join(d, 'g'))\n"
        "    os.statvfs('/'); socket.getaddrinfo('127.0.0.1', 80); socket.if_nameindex()\n"
        "    assert socket.gethostbyname('localhost') == '127.0.0.1'\n"
        "    print('python ok')\n";

/* errno each probe line must show; 0 = the call must succeed. */
static const struct {
        const char *name;
        int err;
} probe_expect[] = {
        { "bpf", EPERM }, { "perf_event_open", EPERM }, { "keyctl", EPERM }, { "add_key", EPERM },
        { "request_key", EPERM }, { "userfaultfd", EPERM }, { "io_uring_setup", ENOSYS },
        { "io_uring_enter", ENOSYS }, { "io_uring_register", ENOSYS }, { "kexec_load", EPERM },
        { "kexec_file_load", EPERM }, { "init_module", EPERM }, { "finit_module", EPERM },
        { "delete_module", EPERM }, { "mount", EPERM }, { "mount_bind", EPERM }, { "umount2", EPERM },
        { "pivot_root", EPERM }, { "fsopen", EPERM }, { "fspick", EPERM }, { "fsmount", EPERM },
        { "move_mount", EPERM }, { "open_tree", EPERM }, { "mount_setattr", EPERM },
        { "open_by_handle_at", EPERM }, { "swapon", EPERM }, { "swapoff", EPERM }, { "reboot", EPERM },
        { "acct", EPERM }, { "clock_settime", EPERM }, { "settimeofday", EPERM }, { "adjtimex", EPERM },
        { "setns", EPERM }, { "unshare_newuser", EPERM }, { "clone_newuser", EPERM }, { "clone3", ENOSYS },
        { "socket_packet", EPERM }, { "socket_packet_dgram", EPERM }, { "socket_raw4", EPERM },
        { "socket_raw6", EPERM }, { "socket_vsock", EAFNOSUPPORT }, { "ioctl_tiocsti", EPERM },
        { "modify_ldt", EPERM }, { "ok_socket_tcp", 0 }, { "ok_getpid", 0 },
};

static void check_probe(const char *out) {
        size_t seen = 0;
        for (size_t i = 0; i < ELEMENTSOF(probe_expect); i++) {
                char key[80];
                PJ(key, "%s ", probe_expect[i].name);
                const char *l = out;
                /* whole-line match: the name at a line start */
                while ((l = strstr(l, key)) && l != out && l[-1] != '\n')
                        l++;
                if (!l) {
                        printf("#   probe printed no line for %s\n", probe_expect[i].name);
                        fail();
                }
                int e = atoi(l + strlen(key));
                printf("#   %-20s errno %-3d %s\n", probe_expect[i].name, e, e ? strerror(e) : "(succeeded)");
                if (e != probe_expect[i].err)
                        printf("#   ^ wanted %d (%s)\n", probe_expect[i].err, strerror(probe_expect[i].err));
                assert_int_equal(e, probe_expect[i].err);
                seen++;
        }
        printf("# probe: %zu calls checked\n", seen);
}

static void test_programs(void **state) {
        printf("# real programs under the seccomp allow-list in a base sandbox; the probe's refused calls\n");
        if (!template_exists(data, TEMPLATE_BASE))
                skip();
        char lower[512], up[512], work[512], run[512];
        PJ(lower, "%s/templates/base/rootfs", data);
        PJ(up, "%s/sbx2/upper", data);
        PJ(work, "%s/sbx2/work", data);
        PJ(run, "%s/sbx2/run", data);
        assert_int_equal(rt_mkdir_p(up, 0755), 0);
        assert_int_equal(rt_mkdir_p(work, 0700), 0);
        assert_int_equal(rt_mkdir_p(run, 0700), 0);
        put_upper(up, "check.py", py_check, strlen(py_check), 0644);
        copy_to_upper(up, "space-probe", PROBE_PATH);
        char id[64];
        PJ(id, "sbx_prog%d", (int)getpid());
        struct rt_spec s = { .id = id, .lower_dirs = lower, .upper_dir = up, .work_dir = work,
                             .run_dir = run, .init_path = TEST_INIT_PATH,
                             .limits = { .memory_bytes = 1ull << 30 } };
        const struct runtime_ops *ops = runtime_find("ns");
        struct rt_sandbox *sb = NULL;
        int r = ops->create(&s, &sb);
        if (r < 0)
                printf("# create: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        live = sb;
        int fd = ops->init_fd(sb);

        static const struct {
                const char *what, *cmd, *want; /* want: a substring of the output */
        } cases[] = {
                { "bash", "bash -c 'set -e; a=(1 2 3); x=$(echo sub); [[ $x == sub ]]; "
                          "cat <(echo procsub); coproc cat; echo ${#a[@]} $((6*7))'", "3 42" },
                { "python3", "cd / && python3 /check.py 2>&1", "python ok" },
                { "python3 -m venv", "python3 -m venv --without-pip /tmp/venv && "
                                     "/tmp/venv/bin/python -c 'import sys; print(sys.prefix)'", "/tmp/venv" },
                { "apt-get", "apt-get --version | head -1", "apt " },
                { "dpkg", "dpkg --version | head -1", "dpkg" },
                { "git (if present)", "if command -v git >/dev/null; then git --version; else echo 'git absent'; fi", "git" },
                { "coreutils", "df -P / >/dev/null && ls -la / | wc -l && sort </etc/os-release | head -1 && "
                               "find /etc -maxdepth 1 -name os-release", "/etc/os-release" },
                { "RLIMIT_CORE is 0", "ulimit -c; ulimit -H -c", "0\n0" },
                { "RLIMIT_NOFILE", "ulimit -n", "4096" },
                { "/tmp and /dev/shm inode limits", "df -i /tmp /dev/shm | awk 'NR>1{print $2}' | tr '\\n' ' '",
                  "1048576 65536" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *out;
                int st = run_cmd(fd, cases[i].cmd, &out);
                bool ok = st == 0 && strstr(out, cases[i].want);
                printf("# %-32s %s\n", cases[i].what, ok ? "ok" : "FAILED");
                if (!ok)
                        printf("#   '%s' -> status 0x%x:\n%s\n", cases[i].cmd, st, out);
                assert_true(ok);
        }
        const char *out;
        assert_int_equal(run_cmd(fd, "/space-probe", &out), 0);
        check_probe(out);
        live = NULL;
        assert_int_equal(ops->destroy(sb), 0);
}

static int setup(void **state) {
        if (geteuid() != 0) {
                printf("# skipped: needs root\n");
                exit(77);
        }
        PJ(data, "/tmp/space-rt-base-XXXXXX");
        assert_non_null(mkdtemp(data));
        return 0;
}

static int teardown(void **state) {
        if (live && runtime_find("ns")->destroy(live) < 0)
                printf("# leftover sandbox could not be destroyed: %s\n", runtime_last_error());
        rt_rm_rf(data);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_base),
                cmocka_unit_test(test_programs),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
