/* Seccomp policy of ns sandboxes. One table lists syscalls with an action; the deny-list
 * policy allows everything else, the future allow-list policy will refuse everything
 * else, so switching is a change of default plus moving entries, not a rewrite. */
#include "runtime/seccomp.h"

#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include "common/macros.h"

enum rule_kind {
        RULE_ALWAYS,    /* the syscall, whatever its arguments */
        RULE_ARG_MASK,  /* only when (arg[idx] & mask) == mask */
        RULE_ARG_EQ32,  /* only when (u32)arg[idx] == value */
};

struct rule {
        const char *name;
        int err; /* errno returned to the caller */
        enum rule_kind kind;
        unsigned idx;
        uint64_t val;
};

/* Denied in the deny-list policy. ENOSYS where callers are expected to fall back
 * (io_uring users fall back to epoll, glibc falls back from clone3 to clone); EPERM
 * elsewhere.
 * ptrace stays allowed: the pid namespace confines it to the sandbox's own processes and
 * agents use strace and gdb. */
static const struct rule deny_rules[] = {
        /* kernel images, modules, kernel-wide state */
        { "kexec_load", EPERM, RULE_ALWAYS, 0, 0 },
        { "kexec_file_load", EPERM, RULE_ALWAYS, 0, 0 },
        { "init_module", EPERM, RULE_ALWAYS, 0, 0 },
        { "finit_module", EPERM, RULE_ALWAYS, 0, 0 },
        { "delete_module", EPERM, RULE_ALWAYS, 0, 0 },
        { "create_module", EPERM, RULE_ALWAYS, 0, 0 },
        { "reboot", EPERM, RULE_ALWAYS, 0, 0 },
        { "swapon", EPERM, RULE_ALWAYS, 0, 0 },
        { "swapoff", EPERM, RULE_ALWAYS, 0, 0 },
        { "acct", EPERM, RULE_ALWAYS, 0, 0 },
        { "settimeofday", EPERM, RULE_ALWAYS, 0, 0 },
        { "clock_settime", EPERM, RULE_ALWAYS, 0, 0 },
        { "clock_adjtime", EPERM, RULE_ALWAYS, 0, 0 },
        { "adjtimex", EPERM, RULE_ALWAYS, 0, 0 },
        { "syslog", EPERM, RULE_ALWAYS, 0, 0 },
        { "quotactl", EPERM, RULE_ALWAYS, 0, 0 },
        { "quotactl_fd", EPERM, RULE_ALWAYS, 0, 0 },
        { "lookup_dcookie", EPERM, RULE_ALWAYS, 0, 0 },
        { "nfsservctl", EPERM, RULE_ALWAYS, 0, 0 },
        { "uselib", EPERM, RULE_ALWAYS, 0, 0 },
        { "ustat", EPERM, RULE_ALWAYS, 0, 0 },
        { "sysfs", EPERM, RULE_ALWAYS, 0, 0 },
        { "_sysctl", EPERM, RULE_ALWAYS, 0, 0 },
        { "iopl", EPERM, RULE_ALWAYS, 0, 0 },
        { "ioperm", EPERM, RULE_ALWAYS, 0, 0 },
        { "vhangup", EPERM, RULE_ALWAYS, 0, 0 },
        /* large kernel attack surface reachable without privilege */
        { "bpf", EPERM, RULE_ALWAYS, 0, 0 },
        { "perf_event_open", EPERM, RULE_ALWAYS, 0, 0 },
        { "userfaultfd", EPERM, RULE_ALWAYS, 0, 0 },
        { "keyctl", EPERM, RULE_ALWAYS, 0, 0 },
        { "add_key", EPERM, RULE_ALWAYS, 0, 0 },
        { "request_key", EPERM, RULE_ALWAYS, 0, 0 },
        { "io_uring_setup", ENOSYS, RULE_ALWAYS, 0, 0 },
        { "io_uring_enter", ENOSYS, RULE_ALWAYS, 0, 0 },
        { "io_uring_register", ENOSYS, RULE_ALWAYS, 0, 0 },
        { "fanotify_init", EPERM, RULE_ALWAYS, 0, 0 },
        { "open_by_handle_at", EPERM, RULE_ALWAYS, 0, 0 },
        { "name_to_handle_at", EPERM, RULE_ALWAYS, 0, 0 },
        { "mbind", EPERM, RULE_ALWAYS, 0, 0 },
        { "migrate_pages", EPERM, RULE_ALWAYS, 0, 0 },
        { "move_pages", EPERM, RULE_ALWAYS, 0, 0 },
        { "set_mempolicy", EPERM, RULE_ALWAYS, 0, 0 },
        /* mounts: the capability set already forbids them; this also closes the new mount
         * API and filesystem contexts to probing */
        { "mount", EPERM, RULE_ALWAYS, 0, 0 },
        { "umount2", EPERM, RULE_ALWAYS, 0, 0 },
        { "pivot_root", EPERM, RULE_ALWAYS, 0, 0 },
        { "fsopen", EPERM, RULE_ALWAYS, 0, 0 },
        { "fsconfig", EPERM, RULE_ALWAYS, 0, 0 },
        { "fsmount", EPERM, RULE_ALWAYS, 0, 0 },
        { "fspick", EPERM, RULE_ALWAYS, 0, 0 },
        { "move_mount", EPERM, RULE_ALWAYS, 0, 0 },
        { "open_tree", EPERM, RULE_ALWAYS, 0, 0 },
        { "mount_setattr", EPERM, RULE_ALWAYS, 0, 0 },
        /* a nested user namespace would hand full capabilities back */
        { "setns", EPERM, RULE_ALWAYS, 0, 0 },
        { "unshare", EPERM, RULE_ARG_MASK, 0, CLONE_NEWUSER },
        { "clone", EPERM, RULE_ARG_MASK, 0, CLONE_NEWUSER },
        { "clone3", ENOSYS, RULE_ALWAYS, 0, 0 }, /* flags sit behind a pointer */
        /* typing into another process's terminal */
        { "ioctl", EPERM, RULE_ARG_EQ32, 1, TIOCSTI },
        { "ioctl", EPERM, RULE_ARG_EQ32, 1, TIOCLINUX },
};

static int add_rule(scmp_filter_ctx ctx, const struct rule *r, uint32_t action) {
        int nr = seccomp_syscall_resolve_name(r->name);
        if (nr == __NR_SCMP_ERROR)
                return 0; /* not a syscall on this architecture */
        switch (r->kind) {
        case RULE_ALWAYS:
                return seccomp_rule_add(ctx, action, nr, 0);
        case RULE_ARG_MASK:
                return seccomp_rule_add(ctx, action, nr, 1, SCMP_CMP(r->idx, SCMP_CMP_MASKED_EQ, r->val, r->val));
        case RULE_ARG_EQ32:
                return seccomp_rule_add(ctx, action, nr, 1,
                                        SCMP_CMP(r->idx, SCMP_CMP_MASKED_EQ, 0xffffffffu, r->val));
        }
        return -EINVAL;
}

int rt_seccomp_build(enum rt_seccomp_policy policy, struct rt_seccomp_prog *ret) {
        if (policy != RT_SECCOMP_DENYLIST)
                return -ENOTSUP;
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return -ENOMEM;
        int r;
        /* Other ABIs (i386 via int 0x80, x32) are refused outright rather than filtered:
         * the table names native syscalls only. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
        if (r < 0)
                goto out;
        for (size_t i = 0; i < ELEMENTSOF(deny_rules); i++) {
                r = add_rule(ctx, &deny_rules[i], SCMP_ACT_ERRNO((uint32_t)deny_rules[i].err));
                if (r < 0)
                        goto out;
        }

        int mfd = memfd_create("space-seccomp", MFD_CLOEXEC);
        if (mfd < 0) {
                r = -errno;
                goto out;
        }
        r = seccomp_export_bpf(ctx, mfd);
        struct stat st;
        if (r == 0 && fstat(mfd, &st) < 0)
                r = -errno;
        if (r == 0) {
                size_t len = (size_t)st.st_size / sizeof(struct sock_filter);
                if (len == 0 || len > RT_SECCOMP_MAX_INSNS) {
                        r = -E2BIG;
                } else {
                        struct sock_filter *insns = malloc(len * sizeof *insns);
                        if (!insns)
                                r = -ENOMEM;
                        else if (pread(mfd, insns, len * sizeof *insns, 0) != (ssize_t)(len * sizeof *insns)) {
                                free(insns);
                                r = -EIO;
                        } else {
                                ret->insns = insns;
                                ret->len = len;
                        }
                }
        }
        close(mfd);
out:
        seccomp_release(ctx);
        return r;
}

void rt_seccomp_prog_free(struct rt_seccomp_prog *p) {
        if (!p)
                return;
        free(p->insns);
        p->insns = NULL;
        p->len = 0;
}

int rt_seccomp_load(const struct rt_seccomp_prog *p) {
        struct sock_fprog fprog = { .len = (unsigned short)p->len, .filter = p->insns };
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) < 0)
                return -errno;
        return 0;
}
