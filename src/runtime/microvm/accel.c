/* Which accelerator the microvm driver uses (docs/runtime-microvm.md, "Accelerator"):
 * SPACE_MICROVM_ACCEL=auto times a tiny guest on /dev/kvm for a few milliseconds and
 * takes KVM only when guest kernel-mode code runs at hardware speed; the verdict is
 * cached per host boot in the guest cache dir, and a KVM boot that fails marks it TCG. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"

/* Guest instructions per second below which KVM is not worth it. Measured here (PVM
 * host, kvm_pvm; per CPU second of the probing thread): guest kernel mode 0.9-1.4 M/s
 * (KVM's instruction emulator), guest user mode 3.6-10 G/s (native). A KVM host with
 * hardware virtualization runs kernel mode natively, in the G/s; TCG runs a guest at a
 * few hundred M/s at best. 100 M/s is ~70x above the emulated rate and >= 30x below the
 * native one, so load on either kind of host cannot move a probe across it. SPACE_MICROVM_KVM_MIN_IPS overrides it (tests).
 * MV_KVM_MIN_IPS (microvm.h) = 100 M/s. */
#define MV_KVM_MIN_IPS_MAX 1000000000000000LL /* the override's limit: 1e15/s */
#define MV_PROBE_LOOPS 4000000u               /* ~2-4 ms at hardware speed */
#define MV_PROBE_RUN_MS 10                    /* each timed KVM_RUN stops after this */
#define MV_PROBE_WINDOWS 4                    /* ... and is tried again this often ... */
#define MV_PROBE_MIN_CPU_NS 2000000           /* ... until it got this much CPU time */
#define MV_PROBE_KILL_MS 3000                 /* the probe child is killed past this */
#define MV_PROBE_MEM 0x8000u                  /* guest memory: code, page tables, data */
#define MV_ACCEL_FILE "accel.json"
#define MV_ACCEL_FILE_MAX 4096u
#define MV_IDENTITY_MAX 512u

/* The probe guest (64-bit, identity-mapped 2 MiB page), at 0x1000:
 *      mov ecx, MV_PROBE_LOOPS
 *   1: mov [0x5000], ecx        a store each iteration: memory, not just registers
 *      dec ecx
 *      jnz 1b
 *      out 0x10, al             exits to us (KVM_EXIT_IO); IOPL 3 lets user mode too */
static const uint8_t probe_code[] = { 0xb9, 0, 0, 0, 0, 0x89, 0x0c, 0x25, 0x00, 0x50, 0x00, 0x00,
                                      0xff, 0xc9, 0x75, 0xf5, 0xe6, 0x10 };
#define PROBE_INSNS_PER_LOOP 3
#define PROBE_CODE 0x1000u
#define PROBE_PML4 0x2000u
#define PROBE_PDPT 0x3000u
#define PROBE_PD 0x4000u
#define PROBE_STACK 0x7000u

enum probe_step { PS_OPEN, PS_API, PS_VM, PS_MEM, PS_VCPU, PS_REGS, PS_RUN, PS_DONE };
static const char *const probe_step_name[] = { "open /dev/kvm", "KVM_GET_API_VERSION", "KVM_CREATE_VM",
                                               "guest memory", "KVM_CREATE_VCPU", "vCPU registers",
                                               "KVM_RUN", "done" };

/* What the child reports: [0] guest kernel mode (CPL0), [1] guest user mode (CPL3). */
struct probe_result {
        int32_t step, err, api;
        uint32_t exit_reason[2];
        int64_t insns[2], cpu_ns[2];
};

static int64_t ns_of(clockid_t c) {
        struct timespec ts;
        clock_gettime(c, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void probe_alarm(int sig) {
        (void)sig;
}

static int probe_set_mode(int vcpu, bool user) {
        struct kvm_sregs s;
        if (ioctl(vcpu, KVM_GET_SREGS, &s) < 0)
                return -errno;
        uint8_t dpl = user ? 3 : 0;
        struct kvm_segment cs = { .limit = 0xffffffff, .selector = (uint16_t)(8 | dpl), .type = 11, .present = 1,
                                  .dpl = dpl, .s = 1, .l = 1, .g = 1 };
        struct kvm_segment ds = { .limit = 0xffffffff, .selector = (uint16_t)(16 | dpl), .type = 3, .present = 1,
                                  .dpl = dpl, .db = 1, .s = 1, .g = 1 };
        s.cs = cs;
        s.ds = s.es = s.fs = s.gs = s.ss = ds;
        s.cr3 = PROBE_PML4;
        s.cr4 = 0x20;                          /* PAE */
        s.cr0 = 0x80000000u | 0x20 | 0x10 | 1; /* PG NE ET PE */
        s.efer = 0x500;                        /* LMA LME */
        struct kvm_regs g = { .rip = PROBE_CODE, .rsp = PROBE_STACK, .rflags = 0x3002 /* IOPL 3 */ };
        if (ioctl(vcpu, KVM_SET_SREGS, &s) < 0 || ioctl(vcpu, KVM_SET_REGS, &g) < 0)
                return -errno;
        return 0;
}

/* One KVM_RUN of at most MV_PROBE_RUN_MS. SIGALRM stays blocked but for the inside of
 * KVM_RUN (KVM_SET_SIGNAL_MASK), so a timer that fires before KVM_RUN starts still stops
 * it. *cpu_ns: the thread's CPU time in it (guest time and KVM's emulation both count). */
static int probe_window(int vcpu, int64_t *cpu_ns) {
        struct itimerval on = { .it_value = { 0, MV_PROBE_RUN_MS * 1000 } }, off = { 0 };
        int64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
        if (setitimer(ITIMER_REAL, &on, NULL) < 0)
                return -errno;
        int r = ioctl(vcpu, KVM_RUN, 0), e = errno;
        *cpu_ns = ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
        (void)setitimer(ITIMER_REAL, &off, NULL);
        sigset_t alrm;
        sigemptyset(&alrm);
        sigaddset(&alrm, SIGALRM);
        struct timespec zero = { 0, 0 };
        while (sigtimedwait(&alrm, NULL, &zero) == SIGALRM)
                ; /* a late tick must not stop the next window */
        return r < 0 ? -e : 0;
}

/* Runs the loop in one mode: windows until it ends or one window had enough CPU time to
 * measure (a window spent descheduled on a loaded host, or on KVM's first-entry setup,
 * says nothing); the best window's rate counts. */
static int probe_run(int vcpu, struct kvm_run *run, bool user, struct probe_result *res) {
        int i = user ? 1 : 0, r = probe_set_mode(vcpu, user);
        if (r < 0)
                return r;
        uint32_t before = MV_PROBE_LOOPS;
        for (int w = 0; w < MV_PROBE_WINDOWS; w++) {
                int64_t cpu = 0;
                r = probe_window(vcpu, &cpu);
                if (r < 0 && r != -EINTR)
                        return r;
                struct kvm_regs g;
                if (ioctl(vcpu, KVM_GET_REGS, &g) < 0)
                        return -errno;
                res->exit_reason[i] = r < 0 ? KVM_EXIT_INTR : run->exit_reason;
                uint32_t left = (uint32_t)g.rcx;
                int64_t insns = (int64_t)(left <= before ? before - left : 0) * PROBE_INSNS_PER_LOOP;
                before = MIN(left, before);
                /* best rate so far: insns/cpu compared without division */
                if (res->cpu_ns[i] == 0 || (double)insns * (double)MAX(res->cpu_ns[i], 1) >
                                                   (double)res->insns[i] * (double)MAX(cpu, 1)) {
                        res->insns[i] = insns;
                        res->cpu_ns[i] = MAX(cpu, 1);
                }
                if (r == 0 || (insns > 0 && cpu >= MV_PROBE_MIN_CPU_NS))
                        break; /* the loop ended (out: KVM_EXIT_IO, or another exit), or measured */
        }
        return 0;
}

/* The child: only system calls (it is a clone of a multithreaded daemon). */
static void probe_child(int out) {
        struct probe_result res = { .step = PS_OPEN };
        sigset_t alrm;
        sigemptyset(&alrm);
        sigaddset(&alrm, SIGALRM);
        struct sigaction sa = { .sa_handler = probe_alarm };
        (void)sigaction(SIGALRM, &sa, NULL);
        (void)sigprocmask(SIG_BLOCK, &alrm, NULL);
        int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC), vm = -1, vcpu = -1, r = 0;
        uint8_t *mem = MAP_FAILED;
        struct kvm_run *run = MAP_FAILED;
        if (kvm < 0)
                goto fail;
        res.step = PS_API;
        if ((res.api = ioctl(kvm, KVM_GET_API_VERSION, 0)) != KVM_API_VERSION) {
                errno = res.api < 0 ? errno : EPROTONOSUPPORT;
                goto fail;
        }
        res.step = PS_VM;
        if ((vm = ioctl(kvm, KVM_CREATE_VM, 0)) < 0)
                goto fail;
        res.step = PS_MEM;
        mem = mmap(NULL, MV_PROBE_MEM, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
                goto fail;
        uint64_t *pml4 = (uint64_t *)(mem + PROBE_PML4), *pdpt = (uint64_t *)(mem + PROBE_PDPT),
                 *pd = (uint64_t *)(mem + PROBE_PD);
        pml4[0] = PROBE_PDPT | 7; /* present, writable, user */
        pdpt[0] = PROBE_PD | 7;
        pd[0] = 0x80 | 7;         /* a 2 MiB page at 0 */
        memcpy(mem + PROBE_CODE, probe_code, sizeof probe_code);
        uint32_t loops = MV_PROBE_LOOPS;
        memcpy(mem + PROBE_CODE + 1, &loops, sizeof loops);
        struct kvm_userspace_memory_region region = { .memory_size = MV_PROBE_MEM,
                                                      .userspace_addr = (uint64_t)(uintptr_t)mem };
        if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
                goto fail;
        res.step = PS_VCPU;
        int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
        if ((vcpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0 || run_size <= 0)
                goto fail;
        run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
        if (run == MAP_FAILED)
                goto fail;
        res.step = PS_REGS;
        union {
                struct kvm_signal_mask m;
                uint8_t buf[sizeof(struct kvm_signal_mask) + 8];
        } mask = { .m.len = 8 }; /* the kernel's sigset: nothing blocked inside KVM_RUN */
        if (ioctl(vcpu, KVM_SET_SIGNAL_MASK, &mask) < 0)
                goto fail;
        res.step = PS_RUN;
        if ((r = probe_run(vcpu, run, false, &res)) < 0) {
                errno = -r;
                goto fail;
        }
        /* user mode only explains a slow kernel mode: its failure decides nothing */
        if (probe_run(vcpu, run, true, &res) < 0)
                res.insns[1] = 0;
        res.step = PS_DONE;
        errno = 0;
fail:
        res.err = errno;
        (void)!write(out, &res, sizeof res);
        _exit(0);
}

/* Runs the probe in a child process: its timer, signal mask and KVM fds touch nothing
 * of the caller's, and a child stuck anywhere is killed. */
static int probe_spawn(struct probe_result *ret, int64_t *ret_us) {
        int64_t t0 = ns_of(CLOCK_MONOTONIC);
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        _cleanup_close_ int rd = p[0], wr = p[1];
        int pidfd = -1;
        struct clone_args ca = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = 0 };
        pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
        if (pid == 0) {
                /* hold none of the caller's files (locks, sockets) while probing */
                if (wr != 3 && dup2(wr, 3) < 0)
                        _exit(1);
                syscall(SYS_close_range, 4, ~0u, 0);
                probe_child(3);
        }
        if (pid < 0)
                return -errno;
        _cleanup_close_ int pfd = pidfd;
        wr = safe_close(wr);
        struct probe_result res;
        size_t have = 0;
        int r = 0;
        while (have < sizeof res) {
                int64_t left = MV_PROBE_KILL_MS - (ns_of(CLOCK_MONOTONIC) - t0) / 1000000;
                struct pollfd pf = { .fd = rd, .events = POLLIN };
                int k = left > 0 ? poll(&pf, 1, (int)left) : 0;
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        r = k < 0 ? -errno : -ETIMEDOUT;
                        break;
                }
                ssize_t n = read(rd, (char *)&res + have, sizeof res - have);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = n < 0 ? -errno : -EPIPE;
                        break;
                }
                have += (size_t)n;
        }
        (void)syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
        int status;
        (void)rt_pidfd_wait(pfd, true, &status);
        if (r < 0)
                return r;
        *ret = res;
        *ret_us = (ns_of(CLOCK_MONOTONIC) - t0) / 1000;
        return 0;
}

static int64_t rate_of(const struct probe_result *res, int i) {
        int64_t ns = MAX(res->cpu_ns[i], 1000);
        return (int64_t)((double)res->insns[i] * 1e9 / (double)ns);
}

/* "1.4M", "10G": instructions per second for people. */
static void fmt_rate(int64_t ips, char *buf, size_t n) {
        if (ips >= 1000000000)
                snprintf(buf, n, "%.3gG", (double)ips / 1e9);
        else if (ips >= 1000000)
                snprintf(buf, n, "%.3gM", (double)ips / 1e6);
        else if (ips >= 1000)
                snprintf(buf, n, "%.3gk", (double)ips / 1e3);
        else
                snprintf(buf, n, "%lld", (long long)ips);
}

int mv_accel_probe(int64_t min_ips, struct rt_accel_info *ret) {
        struct rt_accel_info ai = { .name = "tcg", .min_ips = min_ips };
        struct probe_result res = { 0 };
        int64_t us = 0;
        int r = probe_spawn(&res, &us);
        if (r == 0 && (res.step < PS_OPEN || res.step > PS_DONE))
                r = -EPROTO;
        if (r < 0) {
                snprintf(ai.reason, sizeof ai.reason, "the KVM probe did not finish within %d ms (%s)",
                         MV_PROBE_KILL_MS, strerror(-r));
                *ret = ai;
                return 0;
        }
        ai.probe_us = us;
        if (res.step == PS_OPEN && res.err == ENOENT)
                snprintf(ai.reason, sizeof ai.reason, "no /dev/kvm (no hardware virtualization)");
        else if (res.step == PS_OPEN)
                snprintf(ai.reason, sizeof ai.reason, "/dev/kvm: %s", strerror(res.err));
        else if (res.step == PS_API)
                snprintf(ai.reason, sizeof ai.reason, "KVM API version %d, not %d", res.api, KVM_API_VERSION);
        else if (res.step < PS_DONE)
                snprintf(ai.reason, sizeof ai.reason, "the KVM probe failed at %s: %s",
                         probe_step_name[res.step], strerror(res.err));
        else if (res.exit_reason[0] != KVM_EXIT_IO && res.exit_reason[0] != KVM_EXIT_INTR)
                snprintf(ai.reason, sizeof ai.reason, "the KVM probe guest stopped with exit reason %u",
                         res.exit_reason[0]);
        if (res.step < PS_DONE || ai.reason[0]) {
                *ret = ai;
                return 0;
        }
        ai.kernel_ips = rate_of(&res, 0);
        ai.user_ips = rate_of(&res, 1);
        char k[32], u[32], t[32];
        fmt_rate(ai.kernel_ips, k, sizeof k);
        fmt_rate(ai.user_ips, u, sizeof u);
        fmt_rate(min_ips, t, sizeof t);
        if (ai.kernel_ips >= min_ips) {
                snprintf(ai.name, sizeof ai.name, "kvm");
                snprintf(ai.reason, sizeof ai.reason,
                         "KVM ran guest kernel-mode code at %s instructions/s (threshold %s/s; user mode %s/s)", k, t, u);
        } else {
                struct stat st;
                bool pvm = stat("/sys/module/kvm_pvm", &st) == 0;
                bool user_fast = ai.user_ips >= min_ips;
                snprintf(ai.reason, sizeof ai.reason,
                         "KVM ran guest kernel-mode code at %s instructions/s, below the threshold of %s/s "
                         "(user mode: %s/s)%s%s",
                         k, t, u, user_fast ? ": guest kernel mode goes through KVM's instruction emulator" : "",
                         user_fast && pvm ? " (PVM: kvm_pvm is loaded)" : "");
        }
        *ret = ai;
        return 0;
}

/* ---------------- the verdict, cached per host boot ---------------- */

static int64_t min_ips_setting(int64_t *ret) {
        const char *e = getenv("SPACE_MICROVM_KVM_MIN_IPS");
        if (!e || !e[0]) {
                *ret = MV_KVM_MIN_IPS;
                return 0;
        }
        char *end;
        errno = 0;
        long long v = strtoll(e, &end, 10);
        if (errno || *end || v < 1 || v > MV_KVM_MIN_IPS_MAX) {
                runtime_set_error("microvm: SPACE_MICROVM_KVM_MIN_IPS=%.40s: expected 1..%lld instructions/s", e,
                                  MV_KVM_MIN_IPS_MAX);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

/* What a verdict holds for: this boot of this host kernel (its KVM), this QEMU binary, this
 * guest kernel (a KVM boot of it may have failed), this threshold. */
static void identity(const char *guest_dir, int64_t min_ips, char *buf, size_t n) {
        char boot[64] = "";
        int k = rt_read_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
        boot[k > 0 ? strcspn(boot, "\n") : 0] = 0;
        struct utsname u;
        if (uname(&u) < 0)
                memset(&u, 0, sizeof u);
        struct stat q = { 0 }, g = { 0 };
        const char *path = getenv("PATH");
        char p[MV_MAX_PATH];
        /* the QEMU that execvp would find */
        for (const char *d = path && path[0] ? path : "/usr/bin:/bin"; d && *d;) {
                size_t len = strcspn(d, ":");
                snprintf(p, sizeof p, "%.*s/%s", (int)MIN(len, 3000), d, MV_QEMU_BIN);
                if (stat(p, &q) == 0)
                        break;
                memset(&q, 0, sizeof q);
                d = d[len] ? d + len + 1 : NULL;
        }
        snprintf(p, sizeof p, "%s/vmlinux", guest_dir);
        (void)stat(p, &g);
        snprintf(buf, n, "boot=%s kernel=%.65s %.65s qemu=%llx:%llx:%lld:%lld vmlinux=%lld:%lld min_ips=%lld", boot,
                 u.release, u.version, (unsigned long long)q.st_dev, (unsigned long long)q.st_ino,
                 (long long)q.st_size, (long long)q.st_mtim.tv_sec, (long long)g.st_size,
                 (long long)g.st_mtim.tv_sec, (long long)min_ips);
}

static int cache_read(const char *guest_dir, const char *ident, struct rt_accel_info *ret) {
        char p[MV_MAX_PATH + 32], text[MV_ACCEL_FILE_MAX];
        snprintf(p, sizeof p, "%s/%s", guest_dir, MV_ACCEL_FILE);
        int n = rt_read_file(p, text, sizeof text);
        if (n < 0)
                return n;
        _cleanup_json_ struct json *j = NULL;
        if (json_parse(text, (size_t)n, &j, NULL, 0) < 0)
                return -EINVAL;
        const char *id = json_get_str(j, "identity"), *name = json_get_str(j, "accel"),
                   *why = json_get_str(j, "reason");
        struct rt_accel_info ai = { .cached = true };
        if (!id || strcmp(id, ident) != 0 || !name || (strcmp(name, "kvm") && strcmp(name, "tcg")) || !why ||
            json_get_int(j, "kernel_ips", &ai.kernel_ips) < 0 || json_get_int(j, "user_ips", &ai.user_ips) < 0 ||
            json_get_int(j, "min_ips", &ai.min_ips) < 0)
                return -ESTALE;
        snprintf(ai.name, sizeof ai.name, "%s", name);
        snprintf(ai.reason, sizeof ai.reason, "%s", why);
        *ret = ai;
        return 0;
}

/* Atomically (a temporary file renamed over): concurrent daemons read whole verdicts. */
static int cache_write(const char *guest_dir, const char *ident, const struct rt_accel_info *ai) {
        struct stat st;
        if (stat(guest_dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return -ENOENT; /* no guest assets here: nothing to cache beside */
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "identity", ident);
        json_w_kstr(&w, "accel", ai->name);
        json_w_kstr(&w, "reason", ai->reason);
        json_w_kint(&w, "kernel_ips", ai->kernel_ips);
        json_w_kint(&w, "user_ips", ai->user_ips);
        json_w_kint(&w, "min_ips", ai->min_ips);
        json_w_obj_end(&w);
        char p[MV_MAX_PATH + 32], tmp[MV_MAX_PATH + 64];
        snprintf(p, sizeof p, "%s/%s", guest_dir, MV_ACCEL_FILE);
        snprintf(tmp, sizeof tmp, "%s.tmp%ld", p, (long)syscall(SYS_gettid)); /* per thread */
        int r = w.err;
        _cleanup_close_ int fd = r == 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -EBADF;
        if (r == 0 && fd < 0)
                r = -errno;
        if (r == 0 && (write(fd, b.data, b.len) != (ssize_t)b.len || write(fd, "\n", 1) != 1))
                r = -EIO;
        if (r == 0 && rename(tmp, p) < 0)
                r = -errno;
        if (r < 0 && fd >= 0)
                (void)unlink(tmp);
        buf_free(&b);
        return r;
}

/* The threshold in force and the cache identity it is part of. */
static int cache_ident(const char *guest_dir, int64_t *ret_min_ips, char ident[MV_IDENTITY_MAX]) {
        int r = min_ips_setting(ret_min_ips);
        if (r < 0)
                return r;
        identity(guest_dir, *ret_min_ips, ident, MV_IDENTITY_MAX);
        return 0;
}

int mv_accel_decide(const char *guest_dir, const char *setting, struct rt_accel_info *ret) {
        struct rt_accel_info ai = { 0 };
        if (setting && (strcmp(setting, "kvm") == 0 || strcmp(setting, "tcg") == 0)) {
                snprintf(ai.name, sizeof ai.name, "%s", setting);
                snprintf(ai.reason, sizeof ai.reason, "SPACE_MICROVM_ACCEL=%s", setting);
                *ret = ai;
                return 0;
        }
        if (setting && setting[0] && strcmp(setting, "auto") != 0) {
                runtime_set_error("microvm: SPACE_MICROVM_ACCEL=%.40s: expected auto, kvm or tcg", setting);
                return -EINVAL;
        }
        int64_t min_ips;
        char ident[MV_IDENTITY_MAX];
        int r = cache_ident(guest_dir, &min_ips, ident);
        if (r < 0)
                return r;
        if (cache_read(guest_dir, ident, &ai) < 0) {
                if ((r = mv_accel_probe(min_ips, &ai)) < 0)
                        return r;
                (void)cache_write(guest_dir, ident, &ai); /* no cache: the next daemon probes again */
        }
        *ret = ai;
        return 0;
}

int mv_accel_mark_failed(const char *guest_dir, const char *why) {
        int64_t min_ips;
        char ident[MV_IDENTITY_MAX];
        int r = cache_ident(guest_dir, &min_ips, ident);
        if (r < 0)
                return r;
        struct rt_accel_info ai = { .name = "tcg", .min_ips = min_ips }, old;
        if (cache_read(guest_dir, ident, &old) == 0) {
                ai.kernel_ips = old.kernel_ips;
                ai.user_ips = old.user_ips;
        }
        snprintf(ai.reason, sizeof ai.reason, "%s", why);
        r = cache_write(guest_dir, ident, &ai);
        mv_accel_forget();
        return r;
}

/* ---------------- per process ---------------- */

/* The verdict for the settings it was made under: the environment can change between
 * calls (tests), the file cache outlives the process. */
static struct {
        pthread_mutex_t lock;
        bool valid;
        char key[MV_MAX_PATH + 128];
        struct rt_accel_info info;
} memo = { .lock = PTHREAD_MUTEX_INITIALIZER };

void mv_accel_forget(void) {
        pthread_mutex_lock(&memo.lock);
        memo.valid = false;
        pthread_mutex_unlock(&memo.lock);
}

int rt_microvm_accel_info(struct rt_accel_info *ret) {
        const char *setting = getenv("SPACE_MICROVM_ACCEL"), *g = mv_guest_dir(),
                   *min = getenv("SPACE_MICROVM_KVM_MIN_IPS");
        char key[sizeof memo.key];
        snprintf(key, sizeof key, "%.20s|%.20s|%d|%s", setting ? setting : "", min ? min : "", mv_unprivileged(), g);
        pthread_mutex_lock(&memo.lock);
        int r = 0;
        if (!memo.valid || strcmp(memo.key, key) != 0) {
                struct rt_accel_info ai;
                r = mv_accel_decide(g, setting, &ai);
                gid_t gid;
                if (r == 0 && strcmp(ai.name, "kvm") == 0 && mv_kvm_gid(&gid) < 0) {
                        /* QEMU runs as MV_QEMU_UID: it must be able to open /dev/kvm */
                        snprintf(ai.name, sizeof ai.name, "tcg");
                        snprintf(ai.reason, sizeof ai.reason,
                                 "KVM would do, but /dev/kvm is open to root only and QEMU runs unprivileged "
                                 "(give /dev/kvm group rw, e.g. group kvm, or set SPACE_MICROVM_PRIVILEGED=1)");
                }
                if (r == 0) {
                        memo.info = ai;
                        snprintf(memo.key, sizeof memo.key, "%s", key);
                        memo.valid = true;
                }
        }
        if (r == 0)
                *ret = memo.info;
        pthread_mutex_unlock(&memo.lock);
        return r;
}

const char *rt_microvm_accel(void) {
        struct rt_accel_info ai;
        if (rt_microvm_accel_info(&ai) < 0)
                return "invalid";
        return strcmp(ai.name, "kvm") == 0 ? "kvm" : "tcg";
}

/* The group QEMU runs with under KVM: /dev/kvm's, when the group may read and write it
 * (Debian: root:kvm 0660); MV_QEMU_UID's own when QEMU keeps root. -EACCES when an
 * unprivileged QEMU could not open it. */
int mv_kvm_gid(gid_t *ret) {
        if (!mv_unprivileged()) {
                *ret = MV_QEMU_UID;
                return 0;
        }
        struct stat st;
        if (stat("/dev/kvm", &st) < 0)
                return -errno;
        if (st.st_gid == 0 || (st.st_mode & 0060) != 0060)
                return -EACCES;
        *ret = st.st_gid;
        return 0;
}
