/* Helpers the benchmarks that drive the runtime drivers directly, without spaced, share
 * (bench-gvisor, bench-microvm): the data dir with the base template, and a box: one
 * sandbox of a driver, its dirs under a scratch dir, up to its init's HELLO.
 * Header-only: each bench is one program, built with SPACE_INIT_PATH defined. */
#pragma once
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"
#include "store/store.h"
#include "mvclient.h"

#define BENCH_TIMEOUT_MS 180000

/* Where a driver bench works; main fills it once. */
struct bench_env {
        const char *prog;    /* "bench-gvisor": the start of its messages */
        const char *tag;     /* boxes are named sbx_<tag><pid>_<n> */
        char data[400];      /* holds templates/base */
        char work[512];      /* scratch dir the boxes live in */
        char init_path[512];
        unsigned seq;
};

/* The data dir: $SPACE_TEST_DATA, else def; made with the base template if missing. */
static inline int bench_env_init(struct bench_env *env, const char *def) {
        const char *d = getenv("SPACE_TEST_DATA");
        snprintf(env->data, sizeof env->data, "%s", d ? d : def);
        snprintf(env->init_path, sizeof env->init_path, "%s", SPACE_INIT_PATH);
        int r = rt_mkdir_p(env->data, 0755);
        return r < 0 ? r : template_ensure_base(env->data, NULL, NULL);
}

/* 0 (content-defined chunks) or a fixed chunk size the store takes. */
static inline bool bench_chunk_ok(unsigned long v) {
        return v == 0 || (v >= STORE_FIXED_CHUNK_MIN && v <= STORE_FIXED_CHUNK_MAX && !(v & (v - 1)));
}

/* A tree copied with owners, modes and times (cp -a keeps the shifted ids of an upper dir). */
static inline int bench_copy_tree(const char *from, const char *to) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "cp -a '%s/.' '%s/'", from, to);
        return system(cmd) == 0 ? 0 : -EIO;
}

struct bench_box {
        const struct runtime_ops *ops;
        struct rt_sandbox *sb;
        char id[64], dir[600], upper[640], run[640], wd[640];
};

/* What a box starts from besides the base template. */
struct bench_box_spec {
        const char *files;       /* a tree copied into its new upper dir, or NULL */
        const char *restore_dir; /* a checkpoint its processes come back from, or NULL */
        uint64_t memory;         /* limit in bytes, 0 = none */
        bool shift_owner;        /* upper dir owned by RT_ID_BASE, as ns keeps it (the VM exports it so too) */
};

/* A sandbox of ops in a new dir under env->work; returns once its init said HELLO. A
 * failed driver create is reported on stderr with the driver's message. */
static inline int bench_box_start(struct bench_env *env, struct bench_box *b, const struct runtime_ops *ops,
                                  const struct bench_box_spec *spec) {
        *b = (struct bench_box){ .ops = ops };
        snprintf(b->id, sizeof b->id, "sbx_%s%d_%u", env->tag, (int)getpid(), env->seq++);
        snprintf(b->dir, sizeof b->dir, "%s/%s", env->work, b->id);
        snprintf(b->upper, sizeof b->upper, "%s/upper", b->dir);
        snprintf(b->wd, sizeof b->wd, "%s/work", b->dir);
        snprintf(b->run, sizeof b->run, "%s/run", b->dir);
        if (rt_mkdir_p(b->upper, 0755) < 0 || rt_mkdir_p(b->wd, 0700) < 0 || rt_mkdir_p(b->run, 0700) < 0)
                return -EIO;
        if (spec->shift_owner && chown(b->upper, RT_ID_BASE, RT_ID_BASE) < 0)
                return -errno;
        if (spec->files && bench_copy_tree(spec->files, b->upper) < 0)
                return -EIO;
        char lower[600];
        snprintf(lower, sizeof lower, "%s/templates/base/rootfs", env->data);
        struct rt_spec s = { .id = b->id, .lower_dirs = lower, .upper_dir = b->upper, .work_dir = b->wd,
                             .run_dir = b->run, .init_path = env->init_path, .restore_dir = spec->restore_dir,
                             .limits = { .memory_bytes = spec->memory } };
        int r = ops->create(&s, &b->sb);
        if (r < 0) {
                fprintf(stderr, "%s: %s create: %s\n", env->prog, ops->name, runtime_last_error());
                b->sb = NULL;
                return r;
        }
        return mvc_hello(ops->init_fd(b->sb), BENCH_TIMEOUT_MS);
}

/* Destroys the sandbox; keep_files leaves its dir (the files a restore starts from). */
static inline void bench_box_destroy(struct bench_box *b, bool keep_files) {
        if (b->sb)
                b->ops->destroy(b->sb);
        b->sb = NULL;
        if (!keep_files && b->dir[0])
                rt_rm_rf(b->dir);
}
