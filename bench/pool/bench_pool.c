/* bench-pool: the cold-start and density figures of issue 5 in one run, as JSON lines.
 * Through spaced's API (libspace): create a session + first `exec true`, sequential and
 * with concurrent clients, warm pool off and on; beside it, in the same run, bubblewrap,
 * gVisor's `runsc do` and the floor (clone3 into new user, pid, mount, net, ipc, uts and
 * cgroup namespaces + exec of true); host memory per idle sandbox; reconnects per second.
 * Runs as root on the daemon's host (it reads /proc and the sandboxes' cgroups). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sched.h>

#include "../bench.h"
#include "common/json.h"
#include "space/space.h"

#define MAX_RUNS 100000
#define MAX_CLIENTS 64
#define MAX_IDLE 4096
#define POOL_WAIT_S 120
#define MAXL(a, b) ((a) > (b) ? (a) : (b))

struct cfg {
        const char *host, *tmpl;
        long runs, conc_runs, clients, pool, idle, runsc_runs, warmup;
        double reconnect_s;
        bool refs;
};

static struct bench_series *series_new(const char *what, size_t cap) {
        struct bench_series *s = bench_series_new(what, cap);
        if (!s) {
                fprintf(stderr, "bench-pool: out of memory\n");
                exit(1);
        }
        return s;
}

static void report(struct bench_series *s, const char *extra) {
        bench_series_report("pool", s, extra);
}

/* ---------------- references ---------------- */

static double run_runsc(void) {
        char *argv[] = { "runsc", "--network=none", "do", "true", NULL };
        return bench_run_argv(argv);
}

/* The floor: one clone3 into every namespace a sandbox gets, exec of true, wait. */
static double run_floor(void) {
        double t0 = bench_now_ms();
        struct clone_args ca = {
                .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                         CLONE_NEWCGROUP,
                .exit_signal = SIGCHLD,
        };
        long pid = syscall(SYS_clone3, &ca, sizeof ca);
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                char *argv[] = { "true", NULL };
                execv("/bin/true", argv);
                _exit(127);
        }
        int st;
        while (waitpid((pid_t)pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        double t1 = bench_now_ms();
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t1 - t0 : -ECHILD;
}

static bool in_path(const char *prog) {
        const char *path = getenv("PATH");
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
        for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", d, prog);
                if (access(p, X_OK) == 0)
                        return true;
        }
        return false;
}

/* ---------------- the daemon ---------------- */


struct pool_state {
        int64_t ready, making, taken, missed, made;
};

static int pool_get(space_client *c, const char *tmpl, struct pool_state *ret) {
        char *text = NULL;
        int r = space_get_json(c, "/v1/pool", &text);
        if (r < 0)
                return r;
        struct json *j = NULL;
        r = json_parse(text, strlen(text), &j, NULL, 0);
        free(text);
        if (r < 0)
                return r;
        struct pool_state p = { 0 };
        (void)json_get_int(j, "taken", &p.taken);
        (void)json_get_int(j, "missed", &p.missed);
        (void)json_get_int(j, "made", &p.made);
        const struct json *ts = json_get(j, "templates");
        for (size_t i = 0; ts && i < json_len(ts); i++) {
                const struct json *t = json_at(ts, i);
                const char *name = json_get_str(t, "template");
                if (name && !strcmp(name, tmpl)) {
                        (void)json_get_int(t, "ready", &p.ready);
                        (void)json_get_int(t, "making", &p.making);
                }
        }
        json_free(j);
        *ret = p;
        return 0;
}

/* Sets the pool and waits until it is full (size 0: at once). */
static int pool_fill(space_client *c, const char *tmpl, long size) {
        int r = space_pool_set(c, tmpl, (unsigned)size, NULL);
        if (r < 0) {
                fprintf(stderr, "bench-pool: setting the pool: %s\n", bench_client_err(c, r));
                return r;
        }
        for (int i = 0; i < POOL_WAIT_S * 10; i++) {
                struct pool_state p;
                if ((r = pool_get(c, tmpl, &p)) < 0)
                        return r;
                if (p.ready >= size)
                        return 0;
                usleep(100000);
        }
        fprintf(stderr, "bench-pool: the pool did not fill to %ld in %d s\n", size, POOL_WAIT_S);
        return -ETIMEDOUT;
}

/* Before each sequential run: the daemon at rest, as a create that comes now and then
 * finds it (the sandbox of the run before destroyed, a pool full again; spaced refills in
 * the quiet after the last request). Polling GET /v1/pool does not hold a refill back.
 * false when the pool did not fill within SETTLE_MAX_MS (counted as "unsettled"). */
#define SETTLE_MS 20
#define SETTLE_MAX_MS 3000
static bool pool_settle(space_client *c, const char *tmpl, long size) {
        bool full = size <= 0;
        usleep(SETTLE_MS * 1000); /* the quiet the refill waits for passes here */
        for (double t0 = bench_now_ms(); !full && bench_now_ms() - t0 < SETTLE_MAX_MS; usleep(2000)) {
                struct pool_state p;
                if (pool_get(c, tmpl, &p) < 0)
                        return false;
                full = p.ready >= size && p.making == 0;
        }
        /* and, as with the pool off, SETTLE_MS after the daemon's last work: what the
         * kernel defers (a destroyed sandbox's network namespace) is done in both modes */
        if (size > 0)
                usleep(SETTLE_MS * 1000);
        return full;
}

static void loadavg(char *out, size_t n) {
        FILE *f = fopen("/proc/loadavg", "re");
        double a = 0, b = 0, c = 0;
        if (f) {
                if (fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
                        a = b = c = 0;
                fclose(f);
        }
        snprintf(out, n, "[%.2f,%.2f,%.2f]", a, b, c);
}

/* ---------------- sequential creates ---------------- */

/* runs creates one after the other; the references (when given) run between them.
 * alive: idle sandboxes that exist meanwhile (for the label). */
static int sequential(space_client *c, const struct cfg *cf, bool pool_on, long runs, long alive, struct bench_series *floor,
                      struct bench_series *bw, struct bench_series *runsc) {
        const char *mode = pool_on ? "on" : "off";
        if (pool_fill(c, cf->tmpl, pool_on ? cf->pool : 0) < 0)
                return -1;
        char what[160];
        snprintf(what, sizeof what, "space: create + exec true");
        struct bench_series *tot = series_new(what, (size_t)runs);
        struct bench_series *cre = series_new("space: create alone (POST /v1/sessions)", (size_t)runs);
        struct bench_series *ex = series_new("space: first exec true alone", (size_t)runs);
        struct bench_series *del = series_new("space: delete (not counted above)", (size_t)runs);
        /* Where the first exec's time goes, and a second exec in the same sandbox beside it:
         * what is left of the first over the second is what being first costs. */
        struct bench_series *ex_start = series_new("space: first exec: request to its start event", (size_t)runs);
        struct bench_series *ex_run = series_new("space: first exec: start event to exit event", (size_t)runs);
        struct bench_series *ex2 = series_new("space: second exec true, same sandbox (not counted above)", (size_t)runs);
        /* Where the create's time goes inside spaced (its answer's Server-Timing). */
        struct bench_series *srv[BENCH_SRV_PHASES];
        for (int k = 0; k < BENCH_SRV_PHASES; k++) {
                char w[96];
                snprintf(w, sizeof w, "space: create in spaced: %s", bench_srv_names[k]);
                srv[k] = series_new(w, (size_t)runs);
        }
        struct pool_state p0 = { 0 }, p1 = { 0 };
        for (long i = 0; i < cf->warmup; i++) {
                double a;
                (void)bench_run_space(c, cf->tmpl, &a, NULL, NULL);
        }
        if (pool_on && pool_fill(c, cf->tmpl, cf->pool) < 0)
                return -1;
        (void)pool_get(c, cf->tmpl, &p0);
        long runsc_every = cf->runsc_runs > 0 ? MAXL(1, runs / cf->runsc_runs) : 0;
        long unsettled = 0;
        for (long i = 0; i < runs; i++) {
                if (!pool_settle(c, cf->tmpl, pool_on ? cf->pool : 0))
                        unsettled++;
                struct bench_space_phases ph;
                int r = bench_run_space_phases(c, cf->tmpl, true, &ph);
                if (r < 0) {
                        tot->failures++;
                        fprintf(stderr, "bench-pool: run %ld (pool %s): %s\n", i, mode, bench_client_err(c, r));
                } else {
                        bench_series_add(tot, ph.total);
                        bench_series_add(cre, ph.create);
                        bench_series_add(ex, ph.total - ph.create);
                        bench_series_add(ex_start, ph.start);
                        bench_series_add(ex_run, ph.run);
                        bench_series_add(ex2, ph.exec2);
                        for (int k = 0; k < BENCH_SRV_PHASES; k++)
                                if (ph.srv[k] >= 0)
                                        bench_series_add(srv[k], ph.srv[k]);
                        bench_series_add(del, ph.del);
                }
                /* The references, interleaved: they see the same load. */
                if (floor && bw) {
                        double t = run_floor();
                        t < 0 ? (void)floor->failures++ : bench_series_add(floor, t);
                        t = bench_run_bwrap("bwrap");
                        t < 0 ? (void)bw->failures++ : bench_series_add(bw, t);
                        if (runsc && runsc_every && i % runsc_every == 0 && runsc->n < runsc->cap) {
                                t = run_runsc();
                                t < 0 ? (void)runsc->failures++ : bench_series_add(runsc, t);
                        }
                }
        }
        (void)pool_get(c, cf->tmpl, &p1);
        char extra[240];
        snprintf(extra, sizeof extra,
                 ",\"pool\":\"%s\",\"pool_size\":%ld,\"clients\":1,\"idle_sandboxes_alive\":%ld,\"taken\":%" PRId64
                 ",\"missed\":%" PRId64 ",\"unsettled\":%ld",
                 mode, pool_on ? cf->pool : 0L, alive, p1.taken - p0.taken, p1.missed - p0.missed, unsettled);
        report(tot, extra);
        report(cre, extra);
        report(ex, extra);
        report(ex_start, extra);
        report(ex_run, extra);
        report(ex2, extra);
        for (int k = 0; k < BENCH_SRV_PHASES; k++) {
                if (srv[k]->n)
                        report(srv[k], extra);
                bench_series_free(srv[k]);
        }
        report(del, extra);
        bench_series_free(ex_start);
        bench_series_free(ex_run);
        bench_series_free(ex2);
        return 0;
}

/* ---------------- concurrent creates ---------------- */

struct worker {
        const struct cfg *cf;
        pthread_t th;
        long runs;
        double *v;
        size_t n, failures;
};

static void *worker_main(void *p) {
        struct worker *w = p;
        space_client *c = NULL;
        if (space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = w->cf->host }) < 0)
                return NULL;
        for (long i = 0; i < w->runs; i++) {
                double a;
                int r = bench_run_space(c, w->cf->tmpl, &a, NULL, NULL);
                if (r < 0)
                        w->failures++;
                else
                        w->v[w->n++] = a;
        }
        space_client_free(c);
        return NULL;
}

static int concurrent(space_client *c, const struct cfg *cf, bool pool_on) {
        long pool = pool_on ? MAXL(cf->pool, cf->clients) : 0;
        if (pool_fill(c, cf->tmpl, pool) < 0)
                return -1;
        struct pool_state p0 = { 0 }, p1 = { 0 };
        (void)pool_get(c, cf->tmpl, &p0);
        struct worker w[MAX_CLIENTS] = { 0 };
        long per = (cf->conc_runs + cf->clients - 1) / cf->clients;
        struct bench_series *tot = series_new("space: create + exec true", (size_t)(per * cf->clients));
        double t0 = bench_now_ms();
        for (long i = 0; i < cf->clients; i++) {
                w[i] = (struct worker){ .cf = cf, .runs = per, .v = calloc((size_t)per, sizeof(double)) };
                if (!w[i].v || pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
                        fprintf(stderr, "bench-pool: cannot start client %ld\n", i);
                        exit(1);
                }
        }
        for (long i = 0; i < cf->clients; i++) {
                pthread_join(w[i].th, NULL);
                for (size_t k = 0; k < w[i].n; k++)
                        bench_series_add(tot, w[i].v[k]);
                tot->failures += w[i].failures;
                free(w[i].v);
        }
        double secs = (bench_now_ms() - t0) / 1000.0;
        (void)pool_get(c, cf->tmpl, &p1);
        char extra[260];
        snprintf(extra, sizeof extra,
                 ",\"pool\":\"%s\",\"pool_size\":%ld,\"clients\":%ld,\"creates_per_s\":%.1f,\"taken\":%" PRId64
                 ",\"missed\":%" PRId64,
                 pool_on ? "on" : "off", pool, cf->clients, (double)tot->n / secs, p1.taken - p0.taken,
                 p1.missed - p0.missed);
        report(tot, extra);
        return 0;
}

/* ---------------- density ---------------- */

static int64_t meminfo_once(const char *key);

/* Median of 7 samples 100 ms apart: other jobs on the host move these figures. */
static int64_t meminfo_kib(const char *key) {
        int64_t v[7];
        for (int i = 0; i < 7; i++) {
                v[i] = meminfo_once(key);
                if (i < 6)
                        usleep(100000);
        }
        for (int i = 1; i < 7; i++)
                for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
                        int64_t t = v[k];
                        v[k] = v[k - 1];
                        v[k - 1] = t;
                }
        return v[3];
}

/* The number after "key:" in a /proc text file (kB figures), -1 if absent. */
static int64_t proc_kib(const char *path, const char *key) {
        FILE *f = fopen(path, "re");
        char line[256];
        int64_t v = -1;
        size_t kl = strlen(key);
        while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, key, kl) && line[kl] == ':') {
                        v = strtoll(line + kl + 1, NULL, 10);
                        break;
                }
        if (f)
                fclose(f);
        return v;
}

static int64_t meminfo_once(const char *key) { return proc_kib("/proc/meminfo", key); }

/* Proportional set size of a process (what it really costs, shared pages split). */
static int64_t pss_kib(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
        int64_t v = proc_kib(path, "Pss");
        return v < 0 ? 0 : v;
}

static int64_t rss_kib(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        int64_t v = proc_kib(path, "VmRSS");
        return v < 0 ? 0 : v;
}




/* PSS of every process in a sandbox's cgroup, and what its memory cgroup is charged. */
static void sandbox_mem(const char *sbx, int64_t *pss, int64_t *charged) {
        /* v1 (pids and memory hierarchies), else v2 (one group). */
        static const char *const dirs[][2] = { { "/sys/fs/cgroup/pids/space/", "/sys/fs/cgroup/memory/space/" },
                                               { "/sys/fs/cgroup/space/", "/sys/fs/cgroup/space/" } };
        static const char *const usage[] = { "memory.usage_in_bytes", "memory.current" };
        char path[256];
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof path, "%s%s/cgroup.procs", dirs[i][0], sbx);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue;
                int pid;
                while (fscanf(f, "%d", &pid) == 1)
                        *pss += pss_kib(pid);
                fclose(f);
                snprintf(path, sizeof path, "%s%s/%s", dirs[i][1], sbx, usage[i]);
                if ((f = fopen(path, "re"))) {
                        long long b = 0;
                        if (fscanf(f, "%lld", &b) == 1)
                                *charged += b / 1024;
                        fclose(f);
                }
                return;
        }
}

/* spaced's pid: the peer of a connection to its Unix socket (0 over TCP). */
static pid_t daemon_pid(space_client *c) {
        const char *h = space_client_host(c);
        if (strncmp(h, "unix:", 5) != 0)
                return 0;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(h + 5) >= sizeof sa.sun_path)
                return 0;
        strcpy(sa.sun_path, h + 5);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct ucred cr = { 0 };
        socklen_t l = sizeof cr;
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
                cr.pid = 0;
        if (fd >= 0)
                close(fd);
        return cr.pid;
}

static void settle(void) {
        sync();
        sleep(3);
}

static int density(space_client *c, const struct cfg *cf) {
        if (pool_fill(c, cf->tmpl, 0) < 0)
                return -1;
        pid_t dpid = daemon_pid(c);
        space_session **v = calloc((size_t)cf->idle, sizeof *v);
        if (!v)
                return -1;
        static const char *const kern[] = { "Slab", "KernelStack", "PageTables", "Shmem" };
        int64_t k0[4], k1[4];
        settle();
        for (int i = 0; i < 4; i++)
                k0[i] = meminfo_kib(kern[i]);
        int64_t avail0 = meminfo_kib("MemAvailable"), rss0 = dpid ? rss_kib(dpid) : 0;
        long made = 0;
        for (long i = 0; i < cf->idle; i++) {
                int r = space_session_new(&v[i], c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT,
                                                                              .template = cf->tmpl,
                                                                              .no_rolling_snapshots = true });
                if (r < 0) {
                        fprintf(stderr, "bench-pool: idle session %ld: %s\n", i, bench_client_err(c, r));
                        v[i] = NULL;
                        break;
                }
                made++;
        }
        settle();
        int64_t avail1 = meminfo_kib("MemAvailable"), rss1 = dpid ? rss_kib(dpid) : 0;
        for (int i = 0; i < 4; i++)
                k1[i] = meminfo_kib(kern[i]);
        int64_t pss = 0, charged = 0;
        for (long i = 0; i < made; i++) {
                struct space_session_info si;
                if (space_session_inspect(v[i], &si) == 0)
                        sandbox_mem(si.sandbox_id, &pss, &charged);
        }
        /* Many sandboxes alive: every new mount namespace copies the host's mount table,
         * which now holds one more overlay per sandbox. */
        long runs = cf->runs < 100 ? cf->runs : 100;
        (void)sequential(c, cf, false, runs, made, NULL, NULL, NULL);
        (void)sequential(c, cf, true, runs, made, NULL, NULL, NULL);
        (void)pool_fill(c, cf->tmpl, 0);
        for (long i = 0; i < made; i++) {
                (void)space_session_delete(v[i]);
                space_session_free(v[i]);
        }
        free(v);
        settle();
        int64_t avail2 = meminfo_kib("MemAvailable");
        if (made == 0)
                return -1;
        double n = (double)made, used = (double)(avail0 - avail1);
        /* Beyond the processes: the kernel's objects (slab: namespaces, mounts, cgroups,
         * sockets, inodes; kernel stacks; page tables), tmpfs pages, and the daemon's own
         * growth. MemAvailable counts reclaimable slab as available, so its drop alone
         * understates them: it is printed as a cross-check. */
        double kobj = (double)((k1[0] - k0[0]) + (k1[1] - k0[1]) + (k1[2] - k0[2]));
        double beyond = kobj + (double)(k1[3] - k0[3]) + (double)(rss1 - rss0);
        printf("{\"bench\":\"pool\",\"what\":\"idle sandboxes: host memory per sandbox\",\"sandboxes\":%ld,"
               "\"memavailable_drop_per_sandbox_kib\":%.0f,\"processes_pss_per_sandbox_kib\":%.0f,"
               "\"beyond_processes_per_sandbox_kib\":%.0f,\"beyond_is\":\"slab+kernel stacks+page tables+shmem+daemon rss\","
               "\"kernel_slab_stack_pagetables_per_sandbox_kib\":%.0f,\"slab_per_sandbox_kib\":%.0f,"
               "\"shmem_per_sandbox_kib\":%.0f,\"cgroup_charged_per_sandbox_kib\":%.0f,"
               "\"daemon_rss_per_sandbox_kib\":%.0f,\"memavailable_back_after_delete_kib\":%" PRId64 ","
               "\"note\":\"MemAvailable is host-wide: other jobs move it; the return after the deletes shows by "
               "how much\"}\n",
               made, used / n, (double)pss / n, beyond / n, kobj / n, (double)(k1[0] - k0[0]) / n,
               (double)(k1[3] - k0[3]) / n, (double)charged / n, (double)(rss1 - rss0) / n, avail2 - avail1);
        fflush(stdout);
        return 0;
}

/* ---------------- reconnects ---------------- */

struct rc_worker {
        const struct cfg *cf;
        const char *id, *token;
        pthread_t th;
        bool with_exec;
        double until;
        struct bench_series *s;
};

static void *rc_main(void *p) {
        struct rc_worker *w = p;
        static const char *const argv[] = { "true", NULL };
        space_client *c = NULL;
        if (space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = w->cf->host }) < 0)
                return NULL;
        while (bench_now_ms() < w->until) {
                double t0 = bench_now_ms();
                space_session *s = NULL;
                int r = space_session_connect(&s, c, w->id, w->token);
                struct space_exec_result res;
                if (r >= 0 && w->with_exec)
                        r = space_exec(s, &(struct space_exec_opts){ SPACE_EXEC_OPTS_INIT, .argv = argv }, &res);
                space_session_free(s);
                if (r < 0)
                        w->s->failures++;
                else
                        bench_series_add(w->s, bench_now_ms() - t0);
        }
        space_client_free(c);
        return NULL;
}

struct spawn_worker {
        pthread_t th;
        double until;
        long n;
};

static void *spawn_main(void *p) {
        struct spawn_worker *w = p;
        char *argv[] = { "true", NULL };
        while (bench_now_ms() < w->until)
                if (bench_run_argv(argv) >= 0)
                        w->n++;
        return NULL;
}

/* The floor under "exec true" per second: fork + exec of true + wait on the host itself,
 * no sandbox, no daemon. */
static void spawn_floor(const struct cfg *cf, long nc) {
        struct spawn_worker w[MAX_CLIENTS] = { 0 };
        double t0 = bench_now_ms();
        for (long i = 0; i < nc; i++) {
                w[i].until = t0 + cf->reconnect_s * 1000;
                pthread_create(&w[i].th, NULL, spawn_main, &w[i]);
        }
        long n = 0;
        for (long i = 0; i < nc; i++) {
                pthread_join(w[i].th, NULL);
                n += w[i].n;
        }
        printf("{\"bench\":\"pool\",\"what\":\"floor: fork + exec true + wait on the host\",\"clients\":%ld,"
               "\"per_s\":%.0f}\n",
               nc, (double)n / ((bench_now_ms() - t0) / 1000.0));
        fflush(stdout);
}

static int reconnects(space_client *c, const struct cfg *cf) {
        space_session *s = NULL;
        int r = space_session_new(&s, c, &(struct space_session_opts){ SPACE_SESSION_OPTS_INIT, .template = cf->tmpl,
                                                                       .no_rolling_snapshots = true });
        if (r < 0) {
                fprintf(stderr, "bench-pool: reconnect session: %s\n", bench_client_err(c, r));
                return r;
        }
        const long clients[] = { 1, cf->clients };
        for (int e = 1; e >= 0; e--) {
                for (size_t k = 0; k < 2; k++) {
                        long nc = clients[k];
                        struct rc_worker w[MAX_CLIENTS];
                        size_t cap = (size_t)(cf->reconnect_s * 50000) + 16;
                        struct bench_series *all = series_new(e ? "reconnect: connect by id + token, then exec true"
                                                          : "reconnect: connect by id + token alone",
                                                        cap);
                        double t0 = bench_now_ms(), until = t0 + cf->reconnect_s * 1000;
                        for (long i = 0; i < nc; i++) {
                                w[i] = (struct rc_worker){ .cf = cf, .id = space_session_id(s), .token = space_session_token(s),
                                                           .with_exec = e, .until = until,
                                                           .s = series_new("", cap / (size_t)nc + 16) };
                                pthread_create(&w[i].th, NULL, rc_main, &w[i]);
                        }
                        for (long i = 0; i < nc; i++) {
                                pthread_join(w[i].th, NULL);
                                for (size_t j = 0; j < w[i].s->n; j++)
                                        bench_series_add(all, w[i].s->v[j]);
                                all->failures += w[i].s->failures;
                                bench_series_free(w[i].s);
                        }
                        double secs = (bench_now_ms() - t0) / 1000.0;
                        char extra[120];
                        snprintf(extra, sizeof extra, ",\"clients\":%ld,\"per_s\":%.0f", nc, (double)all->n / secs);
                        report(all, extra);
                        bench_series_free(all);
                }
        }
        (void)space_session_delete(s);
        space_session_free(s);
        spawn_floor(cf, 1);
        spawn_floor(cf, cf->clients);
        return 0;
}

/* ---------------- main ---------------- */

static void usage(FILE *f) {
        fputs("Usage: bench-pool [OPTIONS]\n"
              "\n"
              "The cold-start and density figures of issue 5 in one run, as JSON lines, through\n"
              "spaced's API ($SPACE_HOST): create + first exec true sequentially (pool off, then\n"
              "on) and with concurrent clients (off, on); interleaved references bwrap, runsc do\n"
              "(skipped if absent) and the floor (clone3 into all namespaces + exec true); host\n"
              "memory per idle sandbox; reconnects per second. Root, on the daemon's host. It\n"
              "changes the daemon's pool of the template and sets it to 0 at the end.\n"
              "\n"
              "  --runs N            sequential runs per pool mode (default 500)\n"
              "  --warmup N          unmeasured runs first (default 5)\n"
              "  --clients N         concurrent clients (default 8)\n"
              "  --concurrent-runs N creates per concurrent phase, all clients (default 512)\n"
              "  --pool N            pool size when on (default 8; at least --clients when concurrent)\n"
              "  --idle N            idle sandboxes for the memory figure (default 200; 0 = skip)\n"
              "  --reconnect-seconds S  per reconnect series (default 3; 0 = skip)\n"
              "  --runsc-runs N      runsc do runs, spread over the sequential runs (default 50)\n"
              "  --no-refs           no reference runs\n"
              "  --template NAME     (default base)\n"
              "  --egress            sessions with egress on (\"network\": {\"egress\": true}); the\n"
              "                      daemon must run with --egress on, in a network namespace of\n"
              "                      its own (docs/network.md)\n"
              "  --host ADDR         daemon address (default $SPACE_HOST)\n",
              f);
}

static long num(const char *opt, const char *s, long lo, long hi) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end || end == s || v < lo || v > hi) {
                fprintf(stderr, "bench-pool: %s must be between %ld and %ld\n", opt, lo, hi);
                exit(2);
        }
        return v;
}

int main(int argc, char **argv) {
        static const struct option lopts[] = {
                { "runs", required_argument, NULL, 'n' },        { "warmup", required_argument, NULL, 'w' },
                { "clients", required_argument, NULL, 'c' },     { "concurrent-runs", required_argument, NULL, 'C' },
                { "pool", required_argument, NULL, 'p' },        { "idle", required_argument, NULL, 'i' },
                { "reconnect-seconds", required_argument, NULL, 'r' }, { "runsc-runs", required_argument, NULL, 'R' },
                { "no-refs", no_argument, NULL, 'N' },           { "template", required_argument, NULL, 't' },
                { "host", required_argument, NULL, 'H' },        { "help", no_argument, NULL, 'h' },
                { "egress", no_argument, NULL, 'E' },
                { 0 },
        };
        struct cfg cf = { .tmpl = "base", .runs = 500, .warmup = 5, .clients = 8, .conc_runs = 512, .pool = 8,
                          .idle = 200, .reconnect_s = 3, .runsc_runs = 50, .refs = true };
        int o;
        while ((o = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
                switch (o) {
                case 'n': cf.runs = num("--runs", optarg, 1, MAX_RUNS); break;
                case 'w': cf.warmup = num("--warmup", optarg, 0, 1000); break;
                case 'c': cf.clients = num("--clients", optarg, 1, MAX_CLIENTS); break;
                case 'C': cf.conc_runs = num("--concurrent-runs", optarg, 0, MAX_RUNS); break;
                case 'p': cf.pool = num("--pool", optarg, 1, 256); break;
                case 'i': cf.idle = num("--idle", optarg, 0, MAX_IDLE); break;
                case 'r': cf.reconnect_s = (double)num("--reconnect-seconds", optarg, 0, 600); break;
                case 'R': cf.runsc_runs = num("--runsc-runs", optarg, 0, MAX_RUNS); break;
                case 'N': cf.refs = false; break;
                case 't': cf.tmpl = optarg; break;
                case 'H': cf.host = optarg; break;
                case 'E': bench_network_json = "{\"egress\":true}"; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        space_client *c = NULL;
        if (space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = cf.host }) < 0) {
                fprintf(stderr, "bench-pool: bad daemon address\n");
                return 2;
        }
        char la[64];
        loadavg(la, sizeof la);
        int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
        printf("{\"bench\":\"pool\",\"what\":\"start\",\"host\":\"%s\",\"template\":\"%s\",\"egress\":%s,\"cpus\":%d,\"loadavg\":%s}\n",
               space_client_host(c), cf.tmpl, bench_network_json ? "true" : "false", ncpu, la);
        fflush(stdout);
        bool have_runsc = cf.refs && cf.runsc_runs > 0 && in_path("runsc");
        if (cf.refs && !in_path("bwrap")) {
                fprintf(stderr, "bench-pool: bwrap not found; --no-refs to run without references\n");
                return 2;
        }
        struct bench_series *floor = series_new("floor: clone3 into user+pid+mount+net+ipc+uts+cgroup namespaces + exec true",
                                          (size_t)cf.runs * 2);
        struct bench_series *bw = series_new("bwrap --unshare-all --die-with-parent true", (size_t)cf.runs * 2);
        struct bench_series *rs = have_runsc ? series_new("runsc --network=none do true", (size_t)cf.runsc_runs) : NULL;
        int ret = 0;
        struct bench_series *f = cf.refs ? floor : NULL, *b = cf.refs ? bw : NULL;
        if (sequential(c, &cf, false, cf.runs, 0, f, b, rs) < 0 || sequential(c, &cf, true, cf.runs, 0, f, b, NULL) < 0)
                ret = 1;
        if (cf.refs) {
                report(floor, "");
                report(bw, "");
                if (rs)
                        report(rs, "");
                else
                        printf("{\"bench\":\"pool\",\"what\":\"runsc --network=none do true\",\"skipped\":\"%s\"}\n",
                               cf.runsc_runs ? "runsc not found" : "--runsc-runs 0");
        }
        if (cf.conc_runs && (concurrent(c, &cf, false) < 0 || concurrent(c, &cf, true) < 0))
                ret = 1;
        if (cf.idle && density(c, &cf) < 0)
                ret = 1;
        if (cf.reconnect_s > 0 && reconnects(c, &cf) < 0)
                ret = 1;
        (void)space_pool_set(c, cf.tmpl, 0, NULL);
        loadavg(la, sizeof la);
        printf("{\"bench\":\"pool\",\"what\":\"end\",\"loadavg\":%s}\n", la);
        space_client_free(c);
        return ret;
}
