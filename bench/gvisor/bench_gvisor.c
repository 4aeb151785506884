/* bench-gvisor: issue 7's figures in one run, driving the runtime drivers directly (no
 * daemon), with the daemon's way of storing a checkpoint (store_capture of the checkpoint
 * directory). For a process holding 10, 100 and 500 MB: checkpoint time and bytes stored,
 * the same for a second checkpoint after 1 MB of that memory changed, restore time (create
 * with restore_dir to the first answered exec, the process still there), fork x3 (three
 * restores of one image); and the ns runtime's file-only pause/resume beside it. JSON lines
 * on stdout, ratios against the first checkpoint of the same run. Root; run by hand
 * (docs/performance.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macros.h"
#include "runtime/gvisor/image.h"
#include "../driver.h"

#define BENCH_MAX_MB 4096

static struct bench_env env = { .prog = "bench-gvisor", .tag = "bgv" };
static struct store *st;

static int box_sh(struct bench_box *b, const char *cmd, char *out, size_t outn) {
        int code = -1;
        int r = mvc_sh(b->ops->init_fd(b->sb), cmd, false, out, outn, &code, BENCH_TIMEOUT_MS);
        if (r == 0 && code != 0)
                fprintf(stderr, "bench-gvisor: `%s` exited %d\n", cmd, code);
        return r < 0 ? r : code == 0 ? 0 : -EIO;
}

/* A sandbox of ops; with src_upper, its writable layer starts as a copy of that one and
 * with image, its processes come from that checkpoint. */
static int box_restore(struct bench_box *b, const struct runtime_ops *ops, const char *src_upper, const char *image,
                       uint64_t mem) {
        return bench_box_start(&env, b, ops,
                               &(struct bench_box_spec){ .files = src_upper, .restore_dir = image, .memory = mem });
}

static int box_create(struct bench_box *b, const struct runtime_ops *ops, uint64_t mem) {
        return box_restore(b, ops, NULL, NULL, mem);
}

/* the chunking checkpoint images are stored with (0: content-defined, spaced's for gvisor) */
static uint32_t chunking;

static int store_dir(const char *dir, struct store_op_stats *stats, struct store_hash *ret) {
        *stats = (struct store_op_stats){ 0 };
        struct store_capture_opts o = { .session = "bench", .label = "memory", .reason = STORE_REASON_PAUSE,
                                        .fixed_chunk = chunking, .stats = stats };
        return store_capture(st, dir, NULL, &o, ret);
}

static long long file_size(const char *dir, const char *name) {
        char p[800];
        struct stat s;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        return stat(p, &s) == 0 ? (long long)s.st_size : -1;
}

/* What the driver left in a checkpoint dir (the state file unpacked: head + raw chunks). */
static long long image_size(const char *dir) {
        long long h = file_size(dir, "state.head"), r = file_size(dir, "state.raw");
        return h >= 0 && r >= 0 ? h + r : file_size(dir, "checkpoint.img");
}

/* The process the checkpoints hold: mb MiB of random bytes (the worst case for the
 * image's compression, and what dedup has to work with), and on SIGUSR1 1 MiB of it
 * rewritten with new random bytes. */
#define HOLDER_PY  \
        "import os,signal,time\n"  \
        "b=bytearray(os.urandom(%u<<20))\n"  \
        "def ch(s,f):\n"  \
        "  o=len(b)//2; b[o:o+(1<<20)]=os.urandom(1<<20); open('/tmp/changed','w').write('1')\n"  \
        "signal.signal(signal.SIGUSR1,ch)\n"  \
        "open('/tmp/ready','w').write(str(os.getpid()))\n"  \
        "while True: time.sleep(1)\n"

static int64_t since(int64_t t0) {
        return mvc_now_ms() - t0;
}

static void bench_size(const struct runtime_ops *gv, unsigned mb) {
        uint64_t mem = ((uint64_t)mb << 20) * 2 + (256ull << 20);
        struct bench_box b, r1;
        char img1[700], img2[700], py[1024], cmd[1400], out[256];
        snprintf(img1, sizeof img1, "%s/img-%u-1", env.work, mb);
        snprintf(img2, sizeof img2, "%s/img-%u-2", env.work, mb);
        snprintf(py, sizeof py, HOLDER_PY, mb);
        snprintf(cmd, sizeof cmd, "cat >/root/holder.py <<'EOF'\n%sEOF\n"
                                  "python3 /root/holder.py >/dev/null 2>&1 &\n"
                                  "for i in $(seq 600); do [ -e /tmp/ready ] && exit 0; sleep 0.1; done; exit 1",
                 py);
        struct store_op_stats s1, s2;
        struct store_hash h1, h2;
        int64_t t0, ck1 = -1, ck2 = -1, rest = -1, fork3 = -1;
        bool ok = false;
        if (box_create(&b, gv, mem) < 0 || box_sh(&b, cmd, NULL, 0) < 0 || rt_mkdir_p(img1, 0700) < 0 ||
            rt_mkdir_p(img2, 0700) < 0)
                goto out;
        /* first checkpoint: the sandbox stops (what pause does) */
        t0 = mvc_now_ms();
        if (gv->checkpoint(b.sb, img1, false) < 0) {
                fprintf(stderr, "bench-gvisor: checkpoint: %s\n", runtime_last_error());
                goto out;
        }
        ck1 = since(t0);
        long long img1_bytes = image_size(img1);
        int64_t t1 = mvc_now_ms();
        if (store_dir(img1, &s1, &h1) < 0)
                goto out;
        int64_t store1 = since(t1);
        bench_box_destroy(&b, true);
        /* restore: to the first answered exec, with the holder still running. The state
         * file is rebuilt from the stored parts first, timed apart (create would do it). */
        t0 = mvc_now_ms();
        if (gv_image_join(img1) < 0)
                goto out;
        int64_t join = since(t0);
        t0 = mvc_now_ms();
        if (box_restore(&r1, gv, b.upper, img1, mem) < 0 || box_sh(&r1, "kill -0 $(cat /tmp/ready)", NULL, 0) < 0)
                goto out;
        rest = since(t0);
        /* 1 MiB of the holder's memory changes; second checkpoint of the restored sandbox */
        if (box_sh(&r1, "kill -USR1 $(cat /tmp/ready); for i in $(seq 100); do [ -e /tmp/changed ] && exit 0; "
                        "sleep 0.05; done; exit 1",
                   out, sizeof out) < 0)
                goto out;
        t0 = mvc_now_ms();
        if (gv->checkpoint(r1.sb, img2, false) < 0) {
                fprintf(stderr, "bench-gvisor: second checkpoint: %s\n", runtime_last_error());
                goto out;
        }
        ck2 = since(t0);
        long long img2_bytes = image_size(img2);
        t1 = mvc_now_ms();
        if (store_dir(img2, &s2, &h2) < 0)
                goto out;
        int64_t store2 = since(t1);
        bench_box_destroy(&r1, true);
        /* fork x3: three restores of the second image, each answering */
        struct bench_box f[3];
        memset(f, 0, sizeof f);
        t0 = mvc_now_ms();
        ok = true;
        for (int k = 0; k < 3 && ok; k++)
                ok = box_restore(&f[k], gv, r1.upper, img2, mem) == 0 &&
                     box_sh(&f[k], "kill -0 $(cat /tmp/ready)", NULL, 0) == 0;
        if (ok)
                fork3 = since(t0);
        for (int k = 0; k < 3; k++)
                bench_box_destroy(&f[k], false);
        printf("{\"bench\":\"gvisor\",\"process_mb\":%u,\"chunk_bytes\":%u,\"checkpoint_ms\":%lld,\"image_bytes\":%lld,"
               "\"store_ms\":%lld,\"stored_bytes\":%llu,\"join_ms\":%lld,\"restore_ms\":%lld,"
               "\"second_checkpoint_ms\":%lld,\"second_image_bytes\":%lld,\"second_store_ms\":%lld,"
               "\"second_stored_bytes\":%llu,\"second_vs_first_pct\":%.1f,\"fork3_ms\":%lld}\n",
               mb, chunking, (long long)ck1, img1_bytes, (long long)store1,
               (unsigned long long)s1.bytes_written, (long long)join, (long long)rest, (long long)ck2,
               img2_bytes, (long long)store2, (unsigned long long)s2.bytes_written,
               s1.bytes_written ? 100.0 * (double)s2.bytes_written / (double)s1.bytes_written : 0.0,
               (long long)fork3);
        fflush(stdout);
out:
        if (!ok)
                printf("{\"bench\":\"gvisor\",\"process_mb\":%u,\"failed\":true,\"checkpoint_ms\":%lld,"
                       "\"restore_ms\":%lld,\"second_checkpoint_ms\":%lld}\n",
                       mb, (long long)ck1, (long long)rest, (long long)ck2);
        bench_box_destroy(&b, false);
        bench_box_destroy(&r1, false);
        rt_rm_rf(img1);
        rt_rm_rf(img2);
}

/* The ns reference: file-only pause (capture of the writable layer, sandbox destroyed) and
 * resume (a new sandbox on those files, to the first exec), with 1 MB of files written. */
static void bench_ns(const struct runtime_ops *ns) {
        struct bench_box b, c;
        int64_t pause = -1, resume = -1;
        struct store_op_stats s = { 0 };
        struct store_hash h;
        if (box_create(&b, ns, 0) < 0 ||
            box_sh(&b, "head -c 1048576 /dev/urandom >/root/blob && sleep 1000 >/dev/null 2>&1 &", NULL, 0) < 0)
                goto out;
        int64_t t0 = mvc_now_ms();
        if (ns->freeze(b.sb) < 0 || store_dir(b.upper, &s, &h) < 0)
                goto out;
        bench_box_destroy(&b, true);
        pause = since(t0);
        t0 = mvc_now_ms();
        if (box_restore(&c, ns, b.upper, NULL, 0) == 0 && box_sh(&c, "test -s /root/blob", NULL, 0) == 0)
                resume = since(t0);
        bench_box_destroy(&c, false);
        printf("{\"bench\":\"gvisor\",\"reference\":\"ns file-only\",\"pause_ms\":%lld,\"stored_bytes\":%llu,"
               "\"resume_ms\":%lld,\"processes_kept\":false}\n",
               (long long)pause, (unsigned long long)s.bytes_written, (long long)resume);
        fflush(stdout);
out:
        bench_box_destroy(&b, false);
}

int main(int argc, char **argv) {
        unsigned sizes[8] = { 10, 100, 500 }, n_sizes = 3;
        int c;
        static const struct option opts[] = { { "sizes", required_argument, NULL, 's' },
                                              { "chunk", required_argument, NULL, 'c' },
                                              { "help", no_argument, NULL, 'h' },
                                              {} };
        while ((c = getopt_long(argc, argv, "s:c:h", opts, NULL)) >= 0) {
                if (c == 'c') {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 0);
                        if (*end || !bench_chunk_ok(v)) {
                                fprintf(stderr, "bench-gvisor: --chunk: 0 (CDC) or a power of two from %u to %u\n",
                                        STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX);
                                return 2;
                        }
                        chunking = (uint32_t)v;
                } else if (c == 's') {
                        n_sizes = 0;
                        for (char *t = strtok(optarg, ","); t && n_sizes < ELEMENTSOF(sizes); t = strtok(NULL, ",")) {
                                unsigned v = (unsigned)atoi(t);
                                if (v < 1 || v > BENCH_MAX_MB) {
                                        fprintf(stderr, "bench-gvisor: sizes are 1..%d MB\n", BENCH_MAX_MB);
                                        return 2;
                                }
                                sizes[n_sizes++] = v;
                        }
                } else {
                        printf("usage: bench-gvisor [--sizes MB,MB,...] [--chunk BYTES]\n"
                               "  --sizes  process sizes (default 10,100,500)\n"
                               "  --chunk  chunking the images are stored with: 0 = content-defined, else a fixed\n"
                               "           size (power of two, %u..%u); default 0 (what spaced uses\n"
                               "           for gvisor; fixed chunks do not dedup its state file)\n"
                               "  (root; SPACE_TEST_DATA: data dir with the base template, default "
                               "/var/tmp/space-gvisor-bench)\n",
                               STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX);
                        return c == 'h' ? 0 : 2;
                }
        }
        if (geteuid() != 0) {
                fprintf(stderr, "bench-gvisor: needs root\n");
                return 1;
        }
        if (bench_env_init(&env, "/var/tmp/space-gvisor-bench") < 0) {
                fprintf(stderr, "bench-gvisor: base template: %s\n", runtime_last_error());
                return 1;
        }
        const struct runtime_ops *gv = runtime_find("gvisor"), *ns = runtime_find("ns");
        if (!gv || gv->host_init(env.data) < 0 || ns->host_init(env.data) < 0) {
                fprintf(stderr, "bench-gvisor: %s\n", runtime_last_error());
                return 1;
        }
        snprintf(env.work, sizeof env.work, "%s/bench-gvisor-XXXXXX", env.data);
        if (!mkdtemp(env.work))
                return 1;
        char sdir[600];
        snprintf(sdir, sizeof sdir, "%s/store", env.work);
        struct store_opts so = { STORE_OPTS_INIT, .create = true };
        if (store_open(sdir, &so, &st) < 0) {
                fprintf(stderr, "bench-gvisor: store\n");
                return 1;
        }
        bench_ns(ns);
        for (unsigned i = 0; i < n_sizes; i++)
                bench_size(gv, sizes[i]);
        store_free(st);
        rt_rm_rf(env.work);
        return 0;
}
