/* bench-microvm: the runtime drivers side by side, driven directly (no daemon): create to
 * first exec (cold boot, and from the template's warm image), pause (checkpoint, VM
 * stopped), resume (restore to first exec), fork x3 from one image, and the bytes a
 * second snapshot adds to a snapshot store after a small change. ns (and gvisor when the
 * table has it) run the steps they support for reference. JSON lines on stdout; says
 * which accelerator QEMU used. Root; run by hand (docs/performance.md). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macros.h"
#include "../driver.h"

#define BENCH_MAX_RUNS 50

static struct bench_env env = { .prog = "bench-microvm", .tag = "bmv" };

/* files: a tree copied into the new upper_dir first (a restore's upper_dir holds the
 * files of the same snapshot, runtime.h); NULL = empty. */
static int box_create_files(struct bench_box *b, const struct runtime_ops *ops, const char *restore_dir,
                            const char *files) {
        return bench_box_start(&env, b, ops,
                               &(struct bench_box_spec){ .files = files, .restore_dir = restore_dir, .shift_owner = true });
}

static int box_create(struct bench_box *b, const struct runtime_ops *ops, const char *restore_dir) {
        return box_create_files(b, ops, restore_dir, NULL);
}

static int box_exec(struct bench_box *b, const char *cmd) {
        int code = -1;
        int r = mvc_sh(b->ops->init_fd(b->sb), cmd, false, NULL, 0, &code, BENCH_TIMEOUT_MS);
        return r < 0 ? r : code == 0 ? 0 : -EIO;
}

/* The accelerator matters to the microvm driver only. */
static const char *accel_of(const char *driver) {
        return strcmp(driver, "microvm") == 0 ? rt_microvm_accel() : "none";
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return x < y ? -1 : x > y;
}

static void report(const char *driver, const char *what, int64_t *ms, size_t n, size_t failures) {
        if (n == 0) {
                printf("{\"bench\":\"microvm\",\"driver\":\"%s\",\"accel\":\"%s\",\"what\":\"%s\",\"runs\":0,"
                       "\"failures\":%zu}\n",
                       driver, accel_of(driver), what, failures);
                return;
        }
        qsort(ms, n, sizeof *ms, cmp_i64);
        printf("{\"bench\":\"microvm\",\"driver\":\"%s\",\"accel\":\"%s\",\"what\":\"%s\",\"runs\":%zu,"
               "\"failures\":%zu,\"p50_ms\":%lld,\"max_ms\":%lld}\n",
               driver, accel_of(driver), what, n, failures, (long long)ms[n / 2], (long long)ms[n - 1]);
        fflush(stdout);
}

/* create (+ restore_dir) -> HELLO -> `true` answered, runs times */
static void bench_create(const struct runtime_ops *ops, const char *what, const char *restore_dir, unsigned runs) {
        int64_t ms[BENCH_MAX_RUNS];
        size_t n = 0, fail = 0;
        for (unsigned i = 0; i < runs; i++) {
                struct bench_box b = { 0 };
                int64_t t0 = mvc_now_ms();
                int r = box_create(&b, ops, restore_dir);
                if (r == 0)
                        r = box_exec(&b, "true");
                if (r == 0)
                        ms[n++] = mvc_now_ms() - t0;
                else
                        fail++;
                bench_box_destroy(&b, false);
        }
        report(ops->name, what, ms, n, fail);
}

#define BENCH_MAX_CHUNKINGS 8
/* the chunkings the second snapshot is stored with, each in a fresh store (0: CDC) */
static uint32_t chunkings[BENCH_MAX_CHUNKINGS] = { 0, STORE_FIXED_CHUNK_IMAGE };
static size_t n_chunkings = 2;
static bool second_only;
static const char *keep_dir;  /* --keep: the second-snapshot images are moved here */
static const char *before_cmd; /* --before: run in the VM before the first checkpoint */

static uint64_t store_dir(struct store *st, const char *dir, const struct store_hash *parent, uint32_t chunk,
                          bool delta, struct store_hash *ret, uint64_t *ret_objects) {
        struct store_op_stats stats = { 0 };
        struct store_capture_opts o = { .session = "bench", .reason = STORE_REASON_MANUAL, .fixed_chunk = chunk,
                                        .no_delta = !delta, .stats = &stats };
        if (store_capture(st, dir, parent, &o, ret) < 0)
                return 0;
        if (ret_objects)
                *ret_objects = stats.objects_written;
        return stats.bytes_written;
}

/* What the second image's file `name` alone adds to a fresh store holding the first's. */
static uint64_t file_share(const char *d1, const char *d2, const char *name, uint32_t chunk, bool delta) {
        char m1[720], m2[720], f[800], t[800], sdir[720];
        snprintf(m1, sizeof m1, "%s-only", d1);
        snprintf(m2, sizeof m2, "%s-only", d2);
        snprintf(sdir, sizeof sdir, "%s-only-store", d1);
        uint64_t second = 0;
        bool ok = rt_mkdir_p(m1, 0755) == 0 && rt_mkdir_p(m2, 0755) == 0;
        snprintf(f, sizeof f, "%s/%s", d1, name);
        snprintf(t, sizeof t, "%s/%s", m1, name);
        ok = ok && (access(f, F_OK) != 0 || link(f, t) == 0);
        snprintf(f, sizeof f, "%s/%s", d2, name);
        snprintf(t, sizeof t, "%s/%s", m2, name);
        ok = ok && (access(f, F_OK) != 0 || link(f, t) == 0);
        struct store *st = NULL;
        struct store_opts so = { STORE_OPTS_INIT, .create = true };
        if (ok && store_open(sdir, &so, &st) == 0) {
                struct store_hash g1, g2;
                (void)store_dir(st, m1, NULL, chunk, delta, &g1, NULL);
                second = store_dir(st, m2, &g1, chunk, delta, &g2, NULL);
                store_free(st);
        }
        rt_rm_rf(m1);
        rt_rm_rf(m2);
        rt_rm_rf(sdir);
        return second;
}

struct ram_diff {
        uint64_t pages;          /* 4 KiB pages of the RAM file that differ */
        uint64_t pages_zero;     /* of those, all zero in the second image */
        uint64_t windows;        /* chunk-sized windows holding a differing page */
        uint64_t data_windows;   /* chunk-sized windows of the second file holding data (its chunk list) */
};

/* Where the RAM files of two images differ, page by page (holes read as zeros). */
static int ram_compare(const char *d1, const char *d2, uint32_t chunk, struct ram_diff *ret) {
        char p1[720], p2[720];
        snprintf(p1, sizeof p1, "%s/ram", d1);
        snprintf(p2, sizeof p2, "%s/ram", d2);
        _cleanup_close_ int a = open(p1, O_RDONLY | O_CLOEXEC), b = open(p2, O_RDONLY | O_CLOEXEC);
        struct stat sa, sb;
        if (a < 0 || b < 0 || fstat(a, &sa) < 0 || fstat(b, &sb) < 0)
                return -errno;
        struct ram_diff r = { 0 };
        static uint8_t x[4096], y[4096], zero[4096];
        uint64_t size = (uint64_t)MAX(sa.st_size, sb.st_size), last_window = UINT64_MAX, last_data = UINT64_MAX;
        for (uint64_t off = 0; off < size; off += sizeof x) {
                ssize_t k1 = pread(a, x, sizeof x, (off_t)off), k2 = pread(b, y, sizeof y, (off_t)off);
                if (k1 < 0 || k2 < 0)
                        return -errno;
                memset(x + k1, 0, sizeof x - (size_t)k1);
                memset(y + k2, 0, sizeof y - (size_t)k2);
                uint64_t w = off / chunk;
                if (memcmp(y, zero, sizeof y) && w != last_data) {
                        r.data_windows++;
                        last_data = w;
                }
                if (!memcmp(x, y, sizeof x))
                        continue;
                r.pages++;
                r.pages_zero += !memcmp(y, zero, sizeof y);
                if (w != last_window) {
                        r.windows++;
                        last_window = w;
                }
        }
        *ret = r;
        return 0;
}

/* checkpoint, change, checkpoint: what the second adds to a store holding the first, for
 * each chunking, and which of the image's files it comes from */
static void bench_second_snapshot(const struct runtime_ops *ops, const char *label, const char *change) {
        struct bench_box b = { 0 };
        char d1[700], d2[700], sdir[700];
        snprintf(d1, sizeof d1, "%s/dedup-%s-1", env.work, label);
        snprintf(d2, sizeof d2, "%s/dedup-%s-2", env.work, label);
        if (box_create(&b, ops, NULL) < 0 || rt_mkdir_p(d1, 0755) < 0 || rt_mkdir_p(d2, 0755) < 0)
                goto out;
        if ((before_cmd && box_exec(&b, before_cmd) < 0) || ops->checkpoint(b.sb, d1, true) < 0 ||
            box_exec(&b, change) < 0 || ops->checkpoint(b.sb, d2, false) < 0) {
                fprintf(stderr, "bench-microvm: %s: %s\n", label, runtime_last_error());
                goto out;
        }
        /* data bytes of the memory files (holes of a sparse RAM file not counted) */
        long long mem = 0;
        static const char *const names[] = { "memory", "ram" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                struct stat m;
                char mp[720];
                snprintf(mp, sizeof mp, "%s/%s", d1, names[i]);
                if (stat(mp, &m) == 0)
                        mem += (long long)m.st_blocks * 512;
        }
        /* deltas apply to fixed chunks only: CDC once, fixed sizes with and without */
        for (size_t k2 = 0; k2 < 2 * n_chunkings; k2++) {
                uint32_t chunk = chunkings[k2 / 2];
                bool delta = k2 % 2 == 0;
                if (chunk == 0 && delta)
                        continue;
                snprintf(sdir, sizeof sdir, "%s/store-%s-%u", env.work, label, chunk);
                struct store *st = NULL;
                struct store_opts so = { STORE_OPTS_INIT, .create = true };
                if (store_open(sdir, &so, &st) < 0)
                        continue;
                struct store_hash h1, h2;
                uint64_t o1 = 0, o2 = 0;
                uint64_t first = store_dir(st, d1, NULL, chunk, delta, &h1, &o1),
                         second = store_dir(st, d2, &h1, chunk, delta, &h2, &o2);
                store_free(st);
                rt_rm_rf(sdir);
                /* the second snapshot's bytes by file: the device-state stream, the RAM file
                 * and the disk overlay; the rest is the image's small files */
                uint64_t state = file_share(d1, d2, "memory", chunk, delta),
                         ram = file_share(d1, d2, "ram", chunk, delta),
                         disk = file_share(d1, d2, "disk.qcow2", chunk, delta);
                struct ram_diff rd = { 0 };
                (void)ram_compare(d1, d2, chunk ? chunk : STORE_CHUNK_AVG, &rd);
                printf("{\"bench\":\"microvm\",\"driver\":\"%s\",\"accel\":\"%s\",\"what\":\"second snapshot\","
                       "\"change\":\"%s\",\"before\":\"%s\",\"chunking\":\"%s\",\"chunk_bytes\":%u,\"deltas\":%s,\"memory_image_data_bytes\":%lld,"
                       "\"first_stored_bytes\":%llu,\"first_objects\":%llu,\"second_stored_bytes\":%llu,"
                       "\"second_objects\":%llu,\"second_state_bytes\":%llu,\"second_ram_bytes\":%llu,"
                       "\"second_disk_bytes\":%llu,\"second_memory_bytes\":%llu,\"ram_pages_changed\":%llu,"
                       "\"ram_pages_changed_to_zero\":%llu,\"ram_chunks_changed\":%llu,\"ram_chunks\":%llu,"
                       "\"ratio_pct\":%.2f}\n",
                       ops->name, accel_of(ops->name), label, before_cmd ? before_cmd : "", chunk ? "fixed" : "cdc", chunk,
                       delta ? "true" : "false", mem,
                       (unsigned long long)first, (unsigned long long)o1, (unsigned long long)second,
                       (unsigned long long)o2, (unsigned long long)state, (unsigned long long)ram,
                       (unsigned long long)disk, (unsigned long long)(state + ram), (unsigned long long)rd.pages,
                       (unsigned long long)rd.pages_zero, (unsigned long long)rd.windows,
                       (unsigned long long)rd.data_windows, first ? 100.0 * (double)second / (double)first : 0.0);
                fflush(stdout);
        }
out:
        bench_box_destroy(&b, false);
        if (keep_dir) {
                char k1[700], k2[700];
                snprintf(k1, sizeof k1, "%s/%s-1", keep_dir, label);
                snprintf(k2, sizeof k2, "%s/%s-2", keep_dir, label);
                rt_rm_rf(k1);
                rt_rm_rf(k2);
                if (rt_mkdir_p(keep_dir, 0755) < 0 || rename(d1, k1) < 0 || rename(d2, k2) < 0)
                        fprintf(stderr, "bench-microvm: --keep %s: %m\n", keep_dir);
        }
        rt_rm_rf(d1);
        rt_rm_rf(d2);
}

static void bench_snapshots(const struct runtime_ops *ops, unsigned runs) {
        /* pause = checkpoint with the VM stopped; resume = restore to first exec */
        int64_t pause_ms[BENCH_MAX_RUNS], resume_ms[BENCH_MAX_RUNS], fork_ms[BENCH_MAX_RUNS];
        size_t np = 0, nr = 0, nf = 0, fail = 0;
        for (unsigned i = 0; i < runs && !second_only; i++) {
                struct bench_box b = { 0 }, c = { 0 };
                char img[700], files[700];
                snprintf(img, sizeof img, "%s/img-%u", env.work, i);
                snprintf(files, sizeof files, "%s/files-%u", env.work, i);
                if (box_create(&b, ops, NULL) < 0 || box_exec(&b, "sleep 1000 & echo x > /root/x") < 0 ||
                    rt_mkdir_p(img, 0755) < 0) {
                        fail++;
                        bench_box_destroy(&b, false);
                        continue;
                }
                int64_t t0 = mvc_now_ms();
                if (ops->checkpoint(b.sb, img, false) < 0) {
                        fprintf(stderr, "bench-microvm: checkpoint: %s\n", runtime_last_error());
                        fail++;
                        bench_box_destroy(&b, false);
                        continue;
                }
                pause_ms[np++] = mvc_now_ms() - t0;
                if (rt_mkdir_p(files, 0755) < 0 || bench_copy_tree(b.upper, files) < 0)
                        fail++;
                bench_box_destroy(&b, false);
                t0 = mvc_now_ms();
                if (box_create_files(&c, ops, img, files) == 0 && box_exec(&c, "test -e /root/x") == 0)
                        resume_ms[nr++] = mvc_now_ms() - t0;
                else
                        fail++;
                bench_box_destroy(&c, false);
                /* fork x3: three independent VMs from the same image, all answering */
                struct bench_box f[3] = { 0 };
                t0 = mvc_now_ms();
                bool ok = true;
                for (int k = 0; k < 3 && ok; k++)
                        ok = box_create_files(&f[k], ops, img, files) == 0 && box_exec(&f[k], "true") == 0;
                if (ok)
                        fork_ms[nf++] = mvc_now_ms() - t0;
                else
                        fail++;
                for (int k = 0; k < 3; k++)
                        bench_box_destroy(&f[k], false);
                rt_rm_rf(img);
                rt_rm_rf(files);
        }
        if (!second_only) {
                report(ops->name, "pause (checkpoint, VM stopped)", pause_ms, np, fail);
                report(ops->name, "resume (restore to first exec)", resume_ms, nr, fail);
                report(ops->name, "fork x3 (three restores to first exec)", fork_ms, nf, fail);
        }
        if (!ops->live_checkpoint) { /* two images of one running sandbox need leave_running */
                printf("{\"bench\":\"microvm\",\"driver\":\"%s\",\"what\":\"second snapshot\",\"skipped\":"
                       "\"no live checkpoint\"}\n",
                       ops->name);
                return;
        }
        bench_second_snapshot(ops, "none", "true");
        bench_second_snapshot(ops, "1MiB-text", "yes 'a line of text for the benchmark' | head -c 1048576 > /root/t");
        bench_second_snapshot(ops, "1MiB-random", "head -c 1048576 /dev/urandom > /root/r");
        /* a program the guest never ran: its pages come into the page cache */
        bench_second_snapshot(ops, "python3-first-run", "python3 -c pass");
}

static void bench_freeze(const struct runtime_ops *ops, unsigned runs) {
        int64_t f[BENCH_MAX_RUNS], t[BENCH_MAX_RUNS];
        size_t n = 0, fail = 0;
        struct bench_box b = { 0 };
        if (box_create(&b, ops, NULL) == 0)
                for (unsigned i = 0; i < runs; i++) {
                        int64_t t0 = mvc_now_ms();
                        if (ops->freeze(b.sb) < 0) {
                                fail++;
                                continue;
                        }
                        int64_t t1 = mvc_now_ms();
                        if (ops->thaw(b.sb) < 0 || box_exec(&b, "true") < 0) {
                                fail++;
                                continue;
                        }
                        f[n] = t1 - t0;
                        t[n++] = mvc_now_ms() - t1;
                }
        else
                fail++;
        bench_box_destroy(&b, false);
        report(ops->name, "freeze", f, n, fail);
        report(ops->name, "thaw to first exec", t, n, fail);
}

/* "0,16384,65536": chunkings for the second-snapshot measurement (0: CDC) */
static int parse_chunkings(const char *arg) {
        _cleanup_free_ char *copy = strdup(arg);
        if (!copy)
                return -ENOMEM;
        size_t n = 0;
        char *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char *end;
                unsigned long v = strtoul(tok, &end, 0);
                if (*end || n == BENCH_MAX_CHUNKINGS || !bench_chunk_ok(v))
                        return -EINVAL;
                chunkings[n++] = (uint32_t)v;
        }
        if (n == 0)
                return -EINVAL;
        n_chunkings = n;
        return 0;
}

int main(int argc, char **argv) {
        unsigned runs = 3;
        const char *only_driver = NULL;
        int c;
        static const struct option opts[] = { { "runs", required_argument, NULL, 'n' },
                                              { "chunk", required_argument, NULL, 'c' },
                                              { "driver", required_argument, NULL, 'd' },
                                              { "second-only", no_argument, NULL, 's' },
                                              { "keep", required_argument, NULL, 'k' },
                                              { "before", required_argument, NULL, 'b' },
                                              { "help", no_argument, NULL, 'h' },
                                              {} };
        while ((c = getopt_long(argc, argv, "n:c:d:sk:b:h", opts, NULL)) >= 0) {
                if (c == 'n') {
                        runs = (unsigned)atoi(optarg);
                        if (runs < 1 || runs > BENCH_MAX_RUNS) {
                                fprintf(stderr, "bench-microvm: --runs 1..%d\n", BENCH_MAX_RUNS);
                                return 2;
                        }
                } else if (c == 'c') {
                        if (parse_chunkings(optarg) < 0) {
                                fprintf(stderr,
                                        "bench-microvm: --chunk: up to %d comma-separated sizes, each 0 (CDC) or a "
                                        "power of two from %u to %u\n",
                                        BENCH_MAX_CHUNKINGS, STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX);
                                return 2;
                        }
                } else if (c == 'd') {
                        only_driver = optarg;
                } else if (c == 's') {
                        second_only = true;
                } else if (c == 'k') {
                        keep_dir = optarg;
                } else if (c == 'b') {
                        before_cmd = optarg;
                } else {
                        printf("usage: bench-microvm [--runs N] [--driver ns|gvisor|microvm] [--second-only]\n"
                               "                     [--chunk SIZES] [--keep DIR] [--before CMD]\n"
                               "  --driver       run one driver only (default: all the table has)\n"
                               "  --second-only  only the second-snapshot measurement (no timings)\n"
                               "  --chunk        comma-separated chunkings the second snapshot is stored with,\n"
                               "                 each in a fresh store: 0 = content-defined, else a fixed size\n"
                               "                 (power of two, %u..%u); default 0,%u (spaced uses %u for microvm)\n"
                               "  --before       run CMD (sh -c) in the VM before the first of the two\n"
                               "                 checkpoints (e.g. 'true': the shell's pages are then cached)\n"
                               "  --keep         keep the two images of each second-snapshot change in\n"
                               "                 DIR/CHANGE-1 and DIR/CHANGE-2 (same file system as /var/tmp)\n"
                               "  (root; SPACE_TEST_DATA: data dir with the base template, default\n"
                               "   /var/tmp/space-microvm-test)\n",
                               STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX, STORE_FIXED_CHUNK_IMAGE, STORE_FIXED_CHUNK_IMAGE);
                        return c == 'h' ? 0 : 2;
                }
        }
        if (geteuid() != 0) {
                fprintf(stderr, "bench-microvm: needs root\n");
                return 1;
        }
        if (bench_env_init(&env, "/var/tmp/space-microvm-test") < 0) {
                fprintf(stderr, "bench-microvm: base template: %s\n", runtime_last_error());
                return 1;
        }
        snprintf(env.work, sizeof env.work, "/var/tmp/space-bench-mv-XXXXXX");
        if (!mkdtemp(env.work))
                return 1;
        static const char *const names[] = { "ns", "gvisor", "microvm" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                const struct runtime_ops *ops = runtime_find(names[i]);
                if (!ops || (only_driver && strcmp(only_driver, names[i])))
                        continue;
                if (ops->host_init && ops->host_init(env.data) < 0) {
                        fprintf(stderr, "bench-microvm: %s: %s\n", names[i], runtime_last_error());
                        continue;
                }
                if (second_only) {
                        /* the timings are skipped */
                } else if (strcmp(names[i], "microvm") == 0) {
                        setenv("SPACE_MICROVM_WARM", "0", 1);
                        bench_create(ops, "cold boot to first exec", NULL, runs);
                        unsetenv("SPACE_MICROVM_WARM");
                        /* the first warm create makes the warm image if missing */
                        bench_create(ops, "warm image made (if missing)", NULL, 1);
                        bench_create(ops, "create from warm image to first exec", NULL, runs);
                } else
                        bench_create(ops, "create to first exec", NULL, runs);
                if (!second_only)
                        bench_freeze(ops, runs);
                if (ops->memory_snapshots && ops->checkpoint)
                        bench_snapshots(ops, runs);
        }
        rt_rm_rf(env.work);
        return 0;
}
