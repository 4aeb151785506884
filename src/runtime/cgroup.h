/* cgroup helpers for the ns runtime: one sandbox = one group per controller on cgroup v1
 * (memory, cpu, pids, freezer) or one group on v2, both under a "space" parent. The
 * hierarchy root is a parameter so that unit tests run against a fake directory. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define RT_CGROUP_ROOT "/sys/fs/cgroup"
#define RT_CGROUP_PARENT "space"
#define RT_CGROUP_MAX_NAME 64          /* a group name is a sandbox id */
#define RT_CGROUP_CPU_PERIOD_US 100000u
#define RT_CGROUP_MAX_CPU_MILLIS (1024u * 1000u)
#define RT_CGROUP_FREEZE_TIMEOUT_MS 2000
#define RT_CGROUP_KILL_TIMEOUT_MS 5000
/* v1's memory.limit_in_bytes at or above this means no limit (the kernel writes
 * PAGE_COUNTER_MAX pages, 0x7ffffffffffff000 with 4 KiB pages). */
#define RT_CGROUP_V1_NO_LIMIT (1ull << 62)

enum rt_cgroup_version { RT_CGROUP_V1 = 1, RT_CGROUP_V2 = 2 };
enum rt_cgroup_ctrl { RT_CG_MEMORY, RT_CG_CPU, RT_CG_PIDS, RT_CG_FREEZER, RT_CG_CTRL_MAX };

struct rt_cgroup;

/* v2 when root itself is a cgroup2 mount (root/cgroup.controllers), v1 when root holds a
 * memory hierarchy; a hybrid host (v1 controllers + an empty "unified" tree) is v1.
 * root NULL = RT_CGROUP_ROOT. -ENOTSUP when neither. */
int rt_cgroup_detect(const char *root, enum rt_cgroup_version *ret);
/* Creates the parent group(s) and, on v2, enables memory/cpu/pids for the children.
 * Idempotent. */
int rt_cgroup_host_init(const char *root);
/* Makes the sandbox's group(s); -EEXIST if one exists already. Nothing is left on failure. */
int rt_cgroup_create(const char *root, const char *name, struct rt_cgroup **ret);
/* Refers to existing group(s) (cleanup after a daemon restart; tests on a fake tree). */
int rt_cgroup_open(const char *root, const char *name, struct rt_cgroup **ret);
struct rt_cgroup *rt_cgroup_free(struct rt_cgroup *cg);
static inline void rt_cgroup_freep(struct rt_cgroup **cg) { *cg = rt_cgroup_free(*cg); }

enum rt_cgroup_version rt_cgroup_get_version(const struct rt_cgroup *cg);
/* Path of file (NULL = the directory) in the group that carries controller c. */
int rt_cgroup_path(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file, char **ret);

/* Limit setters. bytes/millis/max 0 = no limit. Memory also forbids swap (memsw on v1
 * when the kernel accounts swap, memory.swap.max on v2). */
int rt_cgroup_set_memory(struct rt_cgroup *cg, uint64_t bytes);
int rt_cgroup_set_cpu(struct rt_cgroup *cg, uint32_t millis);
int rt_cgroup_set_pids(struct rt_cgroup *cg, uint32_t max);

int rt_cgroup_attach(struct rt_cgroup *cg, pid_t pid);
/* Returns once the kernel says the group is (un)frozen, -ETIMEDOUT otherwise. */
int rt_cgroup_freeze(struct rt_cgroup *cg, bool frozen);
int rt_cgroup_is_frozen(struct rt_cgroup *cg, bool *ret);

int rt_cgroup_oom_kills(struct rt_cgroup *cg, uint64_t *ret);
int rt_cgroup_memory_current(struct rt_cgroup *cg, uint64_t *ret);
int rt_cgroup_pids_current(struct rt_cgroup *cg, uint32_t *ret);
/* CPU time the group used, in ns: cpu.stat usage_usec on v2, cpuacct.usage on v1 (the
 * sandbox's cpuacct group, or cpu's when cpuacct is co-mounted with it). -ENOENT when v1
 * has no cpuacct group for it. */
int rt_cgroup_cpu_usage_ns(struct rt_cgroup *cg, uint64_t *ret);
/* The memory limit in bytes, 0 for none (memory.max "max"; v1's huge "unlimited"). */
int rt_cgroup_memory_limit(struct rt_cgroup *cg, uint64_t *ret);
/* Number of processes in the group (cgroup.procs lines). */
int rt_cgroup_count_procs(struct rt_cgroup *cg, unsigned *ret);

/* SIGKILLs every process (cgroup.kill on v2 when present, else freeze + kill + thaw) and
 * waits until the group is empty. */
int rt_cgroup_kill_all(struct rt_cgroup *cg);
/* rmdir of the group(s); retries while the kernel still releases dying tasks. */
int rt_cgroup_remove(struct rt_cgroup *cg);
/* For a sandbox whose handle was lost: thaws, kills every task and removes the group(s)
 * named `name`; 0 when there were none. Returns the first error. */
int rt_cgroup_reclaim(const char *root, const char *name);
/* The usage a driver's health() reports: OOM kills (what callers act on; a missing file,
 * e.g. the group already gone, is not an error), memory and tasks (informative). */
int rt_cgroup_usage(struct rt_cgroup *cg, bool *oom_killed, uint64_t *memory_bytes, uint32_t *pids);

/* "key value" line parser for memory.events, memory.oom_control, cgroup.events. */
int rt_cgroup_parse_keyed(const char *text, const char *key, uint64_t *ret);
