/* cgroup v1 and v2 behind one small API. v1 keeps one directory per controller
 * (memory, cpu, pids, freezer); v2 has one directory whose files carry every controller.
 * Control files are written without O_CREAT so a missing knob shows up as -ENOENT. */
#include "runtime/cgroup.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "common/macros.h"
#include "runtime/fsutil.h"

struct rt_cgroup {
        enum rt_cgroup_version version;
        char *dir[RT_CG_CTRL_MAX]; /* v2: every entry is the same directory */
        /* v1 only, for CPU time (metrics): the group in a cpuacct hierarchy apart from cpu's;
         * NULL when cpuacct is co-mounted with cpu (cpuacct.usage is in dir[RT_CG_CPU]) or
         * absent. Optional: a sandbox made without it just reports no CPU time. */
        char *acct_dir;
};

static const char *const v1_names[RT_CG_CTRL_MAX] = {
        [RT_CG_MEMORY] = "memory",
        [RT_CG_CPU] = "cpu",
        [RT_CG_PIDS] = "pids",
        [RT_CG_FREEZER] = "freezer",
};

static const char *root_or_default(const char *root) {
        return root && *root ? root : RT_CGROUP_ROOT;
}

static bool file_exists(const char *path) {
        return access(path, F_OK) == 0;
}

static void sleep_ms(long ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rt_cgroup_detect(const char *root, enum rt_cgroup_version *ret) {
        root = root_or_default(root);
        char p[4096];
        if (snprintf(p, sizeof p, "%s/cgroup.controllers", root) >= (int)sizeof p)
                return -ENAMETOOLONG;
        if (file_exists(p)) {
                *ret = RT_CGROUP_V2;
                return 0;
        }
        snprintf(p, sizeof p, "%s/memory", root);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
                *ret = RT_CGROUP_V1;
                return 0;
        }
        return -ENOTSUP;
}

static bool name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > RT_CGROUP_MAX_NAME || name[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.'))
                        return false;
        }
        return true;
}

struct rt_cgroup *rt_cgroup_free(struct rt_cgroup *cg) {
        if (!cg)
                return NULL;
        for (int i = 0; i < RT_CG_CTRL_MAX; i++)
                free(cg->dir[i]);
        free(cg->acct_dir);
        free(cg);
        return NULL;
}

enum rt_cgroup_version rt_cgroup_get_version(const struct rt_cgroup *cg) {
        return cg->version;
}

/* v1: root/cpuacct is a hierarchy of its own (not cpu's under another name). */
static bool v1_acct_apart(const char *root) {
        char a[4096], c[4096];
        struct stat sa, sc;
        snprintf(a, sizeof a, "%s/cpuacct", root);
        snprintf(c, sizeof c, "%s/cpu", root);
        if (stat(a, &sa) < 0 || !S_ISDIR(sa.st_mode))
                return false;
        return stat(c, &sc) < 0 || sa.st_dev != sc.st_dev || sa.st_ino != sc.st_ino;
}

/* Fills the directory names without touching the filesystem. */
static int cgroup_new(const char *root, const char *name, struct rt_cgroup **ret) {
        if (!name_valid(name))
                return -EINVAL;
        root = root_or_default(root);
        enum rt_cgroup_version v;
        int r = rt_cgroup_detect(root, &v);
        if (r < 0)
                return r;
        struct rt_cgroup *cg = calloc(1, sizeof *cg);
        if (!cg)
                return -ENOMEM;
        cg->version = v;
        for (int i = 0; i < RT_CG_CTRL_MAX; i++) {
                if (v == RT_CGROUP_V1)
                        r = asprintf(&cg->dir[i], "%s/%s/%s/%s", root, v1_names[i], RT_CGROUP_PARENT, name);
                else
                        r = asprintf(&cg->dir[i], "%s/%s/%s", root, RT_CGROUP_PARENT, name);
                if (r < 0) {
                        cg->dir[i] = NULL;
                        rt_cgroup_free(cg);
                        return -ENOMEM;
                }
        }
        if (v == RT_CGROUP_V1 && v1_acct_apart(root) &&
            asprintf(&cg->acct_dir, "%s/cpuacct/%s/%s", root, RT_CGROUP_PARENT, name) < 0) {
                cg->acct_dir = NULL;
                rt_cgroup_free(cg);
                return -ENOMEM;
        }
        *ret = cg;
        return 0;
}

/* The controllers that have a directory of their own: all on v1, one on v2. */
static int ndirs(const struct rt_cgroup *cg) {
        return cg->version == RT_CGROUP_V1 ? RT_CG_CTRL_MAX : 1;
}

int rt_cgroup_host_init(const char *root) {
        root = root_or_default(root);
        enum rt_cgroup_version v;
        int r = rt_cgroup_detect(root, &v);
        if (r < 0)
                return r;
        char p[4096];
        if (v == RT_CGROUP_V1) {
                for (int i = 0; i < RT_CG_CTRL_MAX; i++) {
                        if (snprintf(p, sizeof p, "%s/%s/%s", root, v1_names[i], RT_CGROUP_PARENT) >= (int)sizeof p)
                                return -ENAMETOOLONG;
                        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                                return -errno;
                }
                /* optional (CPU time for metrics): a failure only costs that */
                if (v1_acct_apart(root) && snprintf(p, sizeof p, "%s/cpuacct/%s", root, RT_CGROUP_PARENT) < (int)sizeof p)
                        (void)mkdir(p, 0755);
                return 0;
        }

        /* v2: children of "space" can only use the controllers enabled on the way down. */
        char avail[1024];
        snprintf(p, sizeof p, "%s/cgroup.controllers", root);
        int n = rt_read_file(p, avail, sizeof avail);
        if (n < 0)
                return n;
        char want[64] = "";
        static const char *const ctrls[] = { "memory", "pids", "cpu" };
        for (size_t i = 0; i < ELEMENTSOF(ctrls); i++) {
                bool found = false;
                size_t cl = strlen(ctrls[i]);
                for (const char *s = avail; (s = strstr(s, ctrls[i])); s += cl)
                        if ((s == avail || s[-1] == ' ') && (s[cl] == ' ' || s[cl] == '\n' || s[cl] == 0))
                                found = true;
                if (!found) {
                        if (i < 2) /* memory and pids are not optional; cpu is */
                                return -ENOTSUP;
                        continue;
                }
                strcat(want, *want ? " +" : "+");
                strcat(want, ctrls[i]);
        }
        snprintf(p, sizeof p, "%s/cgroup.subtree_control", root);
        r = rt_write_file(p, want);
        if (r < 0)
                return r;
        snprintf(p, sizeof p, "%s/%s", root, RT_CGROUP_PARENT);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
        snprintf(p, sizeof p, "%s/%s/cgroup.subtree_control", root, RT_CGROUP_PARENT);
        return rt_write_file(p, want);
}

int rt_cgroup_open(const char *root, const char *name, struct rt_cgroup **ret) {
        struct rt_cgroup *cg = NULL;
        int r = cgroup_new(root, name, &cg);
        if (r < 0)
                return r;
        for (int i = 0; i < ndirs(cg); i++) {
                struct stat st;
                if (stat(cg->dir[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
                        r = errno ? -errno : -ENOTDIR;
                        rt_cgroup_free(cg);
                        return r;
                }
        }
        struct stat st;
        if (cg->acct_dir && (stat(cg->acct_dir, &st) < 0 || !S_ISDIR(st.st_mode)))
        {
                free(cg->acct_dir); /* made without one (an older spaced) */
                cg->acct_dir = NULL;
        }
        *ret = cg;
        return 0;
}

int rt_cgroup_create(const char *root, const char *name, struct rt_cgroup **ret) {
        struct rt_cgroup *cg = NULL;
        int r = cgroup_new(root, name, &cg);
        if (r < 0)
                return r;
        for (int i = 0; i < ndirs(cg); i++) {
                if (mkdir(cg->dir[i], 0755) < 0) {
                        r = -errno;
                        while (--i >= 0)
                                rmdir(cg->dir[i]);
                        rt_cgroup_free(cg);
                        return r;
                }
        }
        if (cg->acct_dir && mkdir(cg->acct_dir, 0755) < 0) {
                free(cg->acct_dir); /* optional: no CPU time then */
                cg->acct_dir = NULL;
        }
        *ret = cg;
        return 0;
}

int rt_cgroup_path(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file, char **ret) {
        if ((unsigned)c >= RT_CG_CTRL_MAX)
                return -EINVAL;
        char *p;
        int r = file ? asprintf(&p, "%s/%s", cg->dir[c], file) : asprintf(&p, "%s", cg->dir[c]);
        if (r < 0)
                return -ENOMEM;
        *ret = p;
        return 0;
}

static int cg_write(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file, const char *val) {
        _cleanup_free_ char *p = NULL;
        int r = rt_cgroup_path(cg, c, file, &p);
        if (r < 0)
                return r;
        return rt_write_file(p, val);
}

static int cg_read(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file, char *buf, size_t size) {
        _cleanup_free_ char *p = NULL;
        int r = rt_cgroup_path(cg, c, file, &p);
        if (r < 0)
                return r;
        return rt_read_file(p, buf, size);
}

static bool cg_has(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file) {
        _cleanup_free_ char *p = NULL;
        return rt_cgroup_path(cg, c, file, &p) == 0 && file_exists(p);
}

static int cg_read_u64(const struct rt_cgroup *cg, enum rt_cgroup_ctrl c, const char *file, uint64_t *ret) {
        char buf[64];
        int n = cg_read(cg, c, file, buf, sizeof buf);
        if (n < 0)
                return n;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || end == buf || (*end && *end != '\n'))
                return -EBADMSG;
        *ret = v;
        return 0;
}

int rt_cgroup_parse_keyed(const char *text, const char *key, uint64_t *ret) {
        size_t kl = strlen(key);
        for (const char *line = text; line && *line;) {
                const char *nl = strchr(line, '\n');
                if (!strncmp(line, key, kl) && line[kl] == ' ') {
                        char *end;
                        errno = 0;
                        unsigned long long v = strtoull(line + kl + 1, &end, 10);
                        if (errno || end == line + kl + 1 || (*end && *end != '\n'))
                                return -EBADMSG;
                        *ret = v;
                        return 0;
                }
                line = nl ? nl + 1 : NULL;
        }
        return -ENOENT;
}

int rt_cgroup_set_memory(struct rt_cgroup *cg, uint64_t bytes) {
        char val[32];
        int r;
        if (cg->version == RT_CGROUP_V2) {
                if (bytes)
                        snprintf(val, sizeof val, "%" PRIu64, bytes);
                else
                        strcpy(val, "max");
                r = cg_write(cg, RT_CG_MEMORY, "memory.max", val);
                if (r < 0)
                        return r;
                /* Swap would let a sandbox exceed its limit invisibly; absent when the
                 * kernel does not account swap. */
                if (bytes && cg_has(cg, RT_CG_MEMORY, "memory.swap.max"))
                        return cg_write(cg, RT_CG_MEMORY, "memory.swap.max", "0");
                return 0;
        }
        if (bytes)
                snprintf(val, sizeof val, "%" PRIu64, bytes);
        else
                strcpy(val, "-1");
        /* memsw must stay >= the memory limit at every step: lift it, set memory, then
         * pin memsw to the same value (memory + swap = memory: no swap). */
        bool memsw = cg_has(cg, RT_CG_MEMORY, "memory.memsw.limit_in_bytes");
        if (memsw) {
                r = cg_write(cg, RT_CG_MEMORY, "memory.memsw.limit_in_bytes", "-1");
                if (r < 0)
                        return r;
        }
        r = cg_write(cg, RT_CG_MEMORY, "memory.limit_in_bytes", val);
        if (r < 0)
                return r;
        if (memsw)
                return cg_write(cg, RT_CG_MEMORY, "memory.memsw.limit_in_bytes", val);
        return 0;
}

int rt_cgroup_set_cpu(struct rt_cgroup *cg, uint32_t millis) {
        if (millis > RT_CGROUP_MAX_CPU_MILLIS || (millis && millis < 10))
                return -ERANGE; /* the kernel's smallest quota is 1 ms per 100 ms */
        uint64_t quota = (uint64_t)millis * RT_CGROUP_CPU_PERIOD_US / 1000;
        char val[64];
        if (cg->version == RT_CGROUP_V2) {
                if (millis)
                        snprintf(val, sizeof val, "%" PRIu64 " %u", quota, RT_CGROUP_CPU_PERIOD_US);
                else
                        snprintf(val, sizeof val, "max %u", RT_CGROUP_CPU_PERIOD_US);
                if (!millis && !cg_has(cg, RT_CG_CPU, "cpu.max"))
                        return 0; /* cpu controller not enabled and nothing to limit */
                return cg_write(cg, RT_CG_CPU, "cpu.max", val);
        }
        snprintf(val, sizeof val, "%u", RT_CGROUP_CPU_PERIOD_US);
        int r = cg_write(cg, RT_CG_CPU, "cpu.cfs_period_us", val);
        if (r < 0)
                return r;
        if (millis)
                snprintf(val, sizeof val, "%" PRIu64, quota);
        else
                strcpy(val, "-1");
        return cg_write(cg, RT_CG_CPU, "cpu.cfs_quota_us", val);
}

int rt_cgroup_set_pids(struct rt_cgroup *cg, uint32_t max) {
        char val[32];
        if (max)
                snprintf(val, sizeof val, "%u", max);
        else
                strcpy(val, "max");
        return cg_write(cg, RT_CG_PIDS, "pids.max", val);
}

int rt_cgroup_attach(struct rt_cgroup *cg, pid_t pid) {
        if (pid <= 0)
                return -EINVAL;
        char val[32];
        snprintf(val, sizeof val, "%d", (int)pid);
        for (int i = 0; i < ndirs(cg); i++) {
                int r = cg_write(cg, (enum rt_cgroup_ctrl)i, "cgroup.procs", val);
                if (r < 0)
                        return r;
        }
        if (cg->acct_dir) {
                char p[4096];
                snprintf(p, sizeof p, "%s/cgroup.procs", cg->acct_dir);
                return rt_write_file(p, val);
        }
        return 0;
}

int rt_cgroup_is_frozen(struct rt_cgroup *cg, bool *ret) {
        char buf[256];
        int n;
        if (cg->version == RT_CGROUP_V1) {
                n = cg_read(cg, RT_CG_FREEZER, "freezer.state", buf, sizeof buf);
                if (n < 0)
                        return n;
                *ret = !strncmp(buf, "FROZEN", 6);
                return 0;
        }
        n = cg_read(cg, RT_CG_FREEZER, "cgroup.events", buf, sizeof buf);
        if (n < 0)
                return n;
        uint64_t v;
        int r = rt_cgroup_parse_keyed(buf, "frozen", &v);
        if (r < 0)
                return r;
        *ret = v != 0;
        return 0;
}

int rt_cgroup_freeze(struct rt_cgroup *cg, bool frozen) {
        int r;
        if (cg->version == RT_CGROUP_V1)
                r = cg_write(cg, RT_CG_FREEZER, "freezer.state", frozen ? "FROZEN" : "THAWED");
        else
                r = cg_write(cg, RT_CG_FREEZER, "cgroup.freeze", frozen ? "1" : "0");
        if (r < 0)
                return r;
        /* Freezing is asynchronous (v1 passes through FREEZING); callers rely on "frozen"
         * meaning no task runs any more, e.g. before capturing a snapshot. */
        int64_t deadline = now_ms() + RT_CGROUP_FREEZE_TIMEOUT_MS;
        for (;;) {
                bool is;
                r = rt_cgroup_is_frozen(cg, &is);
                if (r < 0)
                        return r;
                if (is == frozen)
                        return 0;
                if (now_ms() > deadline)
                        return -ETIMEDOUT;
                sleep_ms(1);
        }
}

int rt_cgroup_oom_kills(struct rt_cgroup *cg, uint64_t *ret) {
        char buf[1024];
        const char *file = cg->version == RT_CGROUP_V1 ? "memory.oom_control" : "memory.events";
        int n = cg_read(cg, RT_CG_MEMORY, file, buf, sizeof buf);
        if (n < 0)
                return n;
        return rt_cgroup_parse_keyed(buf, "oom_kill", ret);
}

int rt_cgroup_memory_current(struct rt_cgroup *cg, uint64_t *ret) {
        return cg_read_u64(cg, RT_CG_MEMORY,
                           cg->version == RT_CGROUP_V1 ? "memory.usage_in_bytes" : "memory.current", ret);
}

int rt_cgroup_cpu_usage_ns(struct rt_cgroup *cg, uint64_t *ret) {
        if (cg->version == RT_CGROUP_V2) {
                char buf[1024];
                uint64_t us;
                int n = cg_read(cg, RT_CG_CPU, "cpu.stat", buf, sizeof buf);
                if (n < 0)
                        return n;
                int r = rt_cgroup_parse_keyed(buf, "usage_usec", &us);
                if (r < 0)
                        return r;
                *ret = us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
                return 0;
        }
        if (!cg->acct_dir)
                return cg_read_u64(cg, RT_CG_CPU, "cpuacct.usage", ret); /* co-mounted */
        char p[4096], buf[64];
        snprintf(p, sizeof p, "%s/cpuacct.usage", cg->acct_dir);
        int n = rt_read_file(p, buf, sizeof buf);
        if (n < 0)
                return n;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || end == buf || (*end && *end != '\n'))
                return -EBADMSG;
        *ret = v;
        return 0;
}

int rt_cgroup_memory_limit(struct rt_cgroup *cg, uint64_t *ret) {
        char buf[64];
        if (cg->version == RT_CGROUP_V2) {
                int n = cg_read(cg, RT_CG_MEMORY, "memory.max", buf, sizeof buf);
                if (n < 0)
                        return n;
                if (strncmp(buf, "max", 3) == 0) {
                        *ret = 0;
                        return 0;
                }
        }
        uint64_t v;
        int r = cg_read_u64(cg, RT_CG_MEMORY, cg->version == RT_CGROUP_V1 ? "memory.limit_in_bytes" : "memory.max", &v);
        if (r < 0)
                return r;
        /* v1 says "no limit" with the largest page-aligned signed value */
        *ret = v >= RT_CGROUP_V1_NO_LIMIT ? 0 : v;
        return 0;
}

int rt_cgroup_pids_current(struct rt_cgroup *cg, uint32_t *ret) {
        uint64_t v;
        int r = cg_read_u64(cg, RT_CG_PIDS, "pids.current", &v);
        if (r < 0)
                return r;
        *ret = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        return 0;
}

/* Calls fn for every pid in the freezer group's cgroup.procs (streamed: a group can
 * hold more pids than one read buffer). */
static int for_each_proc(struct rt_cgroup *cg, int (*fn)(pid_t pid, void *ud), void *ud) {
        _cleanup_free_ char *p = NULL;
        int r = rt_cgroup_path(cg, RT_CG_FREEZER, "cgroup.procs", &p);
        if (r < 0)
                return r;
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        if (!f)
                return -errno;
        long pid;
        while (fscanf(f, "%ld", &pid) == 1) {
                if (pid <= 0 || pid > INT32_MAX)
                        return -EBADMSG;
                r = fn((pid_t)pid, ud);
                if (r < 0)
                        return r;
        }
        return ferror(f) ? -EIO : 0;
}

static int count_one(pid_t pid, void *ud) {
        (*(unsigned *)ud)++;
        return 0;
}

int rt_cgroup_count_procs(struct rt_cgroup *cg, unsigned *ret) {
        unsigned n = 0;
        int r = for_each_proc(cg, count_one, &n);
        if (r < 0)
                return r;
        *ret = n;
        return 0;
}

static int kill_one(pid_t pid, void *ud) {
        if (kill(pid, SIGKILL) < 0 && errno != ESRCH)
                return -errno;
        return 0;
}

int rt_cgroup_kill_all(struct rt_cgroup *cg) {
        int64_t deadline = now_ms() + RT_CGROUP_KILL_TIMEOUT_MS;
        bool use_kill_file = cg->version == RT_CGROUP_V2 && cg_has(cg, RT_CG_FREEZER, "cgroup.kill");
        for (;;) {
                unsigned n;
                int r = rt_cgroup_count_procs(cg, &n);
                if (r < 0)
                        return r;
                if (n == 0)
                        return 0;
                if (now_ms() > deadline)
                        return -ETIMEDOUT;
                if (use_kill_file) {
                        r = cg_write(cg, RT_CG_FREEZER, "cgroup.kill", "1");
                        if (r < 0)
                                return r;
                } else {
                        /* Frozen tasks cannot fork between our read and our kill; a frozen
                         * task only dies once thawed, hence thaw right after. */
                        r = rt_cgroup_freeze(cg, true);
                        if (r < 0 && r != -ETIMEDOUT)
                                return r;
                        int k = for_each_proc(cg, kill_one, NULL);
                        r = rt_cgroup_freeze(cg, false);
                        if (k < 0)
                                return k;
                        if (r < 0)
                                return r;
                }
                sleep_ms(1);
        }
}

int rt_cgroup_remove(struct rt_cgroup *cg) {
        int64_t deadline = now_ms() + RT_CGROUP_KILL_TIMEOUT_MS;
        int ret = 0;
        for (int i = 0; i < ndirs(cg); i++) {
                for (;;) {
                        if (rmdir(cg->dir[i]) == 0 || errno == ENOENT)
                                break;
                        if (errno != EBUSY || now_ms() > deadline) {
                                if (ret == 0)
                                        ret = -errno;
                                break;
                        }
                        sleep_ms(1);
                }
        }
        /* its tasks are gone from the other hierarchies by now; never an error (optional) */
        while (cg->acct_dir && rmdir(cg->acct_dir) < 0 && errno == EBUSY && now_ms() <= deadline)
                sleep_ms(1);
        return ret;
}

int rt_cgroup_reclaim(const char *root, const char *name) {
        struct rt_cgroup *cg = NULL;
        int r = rt_cgroup_open(root, name, &cg);
        if (r < 0)
                return r == -ENOENT ? 0 : r;
        /* Thawed first: frozen tasks never die. */
        int ret = rt_cgroup_freeze(cg, false);
        r = rt_cgroup_kill_all(cg);
        if (r < 0 && ret == 0)
                ret = r;
        r = rt_cgroup_remove(cg);
        if (r < 0 && ret == 0)
                ret = r;
        rt_cgroup_free(cg);
        return ret;
}

int rt_cgroup_usage(struct rt_cgroup *cg, bool *oom_killed, uint64_t *memory_bytes, uint32_t *pids) {
        uint64_t oom = 0;
        int r = rt_cgroup_oom_kills(cg, &oom);
        if (r < 0 && r != -ENOENT)
                return r;
        *oom_killed = oom > 0;
        (void)rt_cgroup_memory_current(cg, memory_bytes);
        (void)rt_cgroup_pids_current(cg, pids);
        return 0;
}
