/* The syscall filter of ns sandboxes. Built once with libseccomp in the parent and
 * exported as a classic BPF program so that the child between clone and exec only has to
 * load it (one prctl, no allocation). */
#pragma once
#include <stddef.h>
#include <linux/filter.h>

/* Deny-list now; the security issue switches the default to an allow-list. Both are the
 * same rule table read with a different default action (see seccomp.c). */
enum rt_seccomp_policy { RT_SECCOMP_DENYLIST, RT_SECCOMP_ALLOWLIST };

#define RT_SECCOMP_MAX_INSNS 4096 /* BPF_MAXINSNS: the kernel refuses longer programs */

struct rt_seccomp_prog {
        struct sock_filter *insns;
        size_t len;
};

/* -ENOTSUP for a policy not implemented yet. */
int rt_seccomp_build(enum rt_seccomp_policy policy, struct rt_seccomp_prog *ret);
void rt_seccomp_prog_free(struct rt_seccomp_prog *p);
/* Child side: needs no_new_privs set (or CAP_SYS_ADMIN). */
int rt_seccomp_load(const struct rt_seccomp_prog *p);
