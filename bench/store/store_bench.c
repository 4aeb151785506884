/* Snapshot store benchmark: one run generates a tree (default ~530 MB: 10,000 small files
 * and 12 large ones), then measures fresh capture, incremental capture after a 1 MiB
 * change, and materialize, beside `tar -c | zstd -1` and `cp -a` of the same tree.
 * Prints one JSON object per line. Not part of `make check`.
 * usage: store_bench [WORKDIR] (default /var/tmp; the tree, store and copies are removed after)
 *        store_bench --generate DIR      only generate the tree into DIR (for profiling)
 *        store_bench --tree DIR [WORKDIR] measure an existing tree (left in place, but the
 *                                         two files the incremental step changes are rewritten)
 * Everything is measured with the tree in the page cache; the store's numbers include its
 * fsyncs (tar and cp do not sync). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"

#define SMALL_FILES 10000
#define LARGE_FILES 12
#define LARGE_SIZE (36u << 20)

static uint64_t rng_state = 12345;
static uint64_t rnd(void) {
        uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Source-code-like text: words from a small vocabulary, so it compresses about 3-4x. */
static void fill_text(char *p, size_t n) {
        static const char *const words[] = { "int ", "return ", "struct ", "if (", ") {\n", "}\n", "for (", "size_t ",
                                             "const ", "char *", "buf", "len", "err", " = ", "0;\n", "NULL", "->",
                                             "store_", "hash", "tree", "static ", "void ", "\t", "        ", "/* ",
                                             " */\n", "data", "count", "++", ", ", "(", ")", ";\n", "==", "!=" };
        size_t i = 0;
        while (i < n) {
                const char *w = words[rnd() % (sizeof words / sizeof *words)];
                size_t l = strlen(w);
                if (l > n - i)
                        l = n - i;
                memcpy(p + i, w, l);
                i += l;
        }
}

static void fill_random(char *p, size_t n) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
                uint64_t v = rnd();
                memcpy(p + i, &v, 8);
        }
}

static int write_all(const char *path, const char *p, size_t n) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        size_t done = 0;
        while (done < n) {
                ssize_t k = write(fd, p + done, n - done);
                if (k <= 0) {
                        close(fd);
                        return -EIO;
                }
                done += (size_t)k;
        }
        close(fd);
        return 0;
}

static uint64_t generate(const char *root) {
        uint64_t total = 0;
        char *buf = malloc(LARGE_SIZE);
        char p[8192];
        mkdir(root, 0755);
        for (int d = 0; d < 100; d++) {
                snprintf(p, sizeof p, "%s/pkg%02d", root, d);
                mkdir(p, 0755);
                for (int s = 0; s < 4; s++) {
                        snprintf(p, sizeof p, "%s/pkg%02d/mod%d", root, d, s);
                        mkdir(p, 0755);
                }
        }
        for (int i = 0; i < SMALL_FILES; i++) {
                size_t n = 1024 + rnd() % 15360;
                fill_text(buf, n);
                snprintf(p, sizeof p, "%s/pkg%02d/mod%d/file%05d.c", root, i % 100, (i / 100) % 4, i);
                write_all(p, buf, n);
                total += n;
        }
        for (int i = 0; i < LARGE_FILES; i++) {
                /* half the large files are incompressible (media, archives), half text-like (logs, data) */
                if (i % 2)
                        fill_random(buf, LARGE_SIZE);
                else
                        fill_text(buf, LARGE_SIZE);
                snprintf(p, sizeof p, "%s/pkg%02d/large%02d.bin", root, i, i);
                write_all(p, buf, LARGE_SIZE);
                total += LARGE_SIZE;
        }
        free(buf);
        sync();
        return total;
}

/* Sum of regular file sizes under dir (for --tree). */
static uint64_t tree_bytes(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return 0;
        uint64_t total = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                char p[8192];
                struct stat st;
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                if (lstat(p, &st) < 0)
                        continue;
                if (S_ISDIR(st.st_mode))
                        total += tree_bytes(p);
                else if (S_ISREG(st.st_mode))
                        total += (uint64_t)st.st_size;
        }
        closedir(d);
        return total;
}

static double now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int run_sh(const char *cmd) {
        int st = system(cmd);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t file_size(const char *p) {
        struct stat st;
        return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void line(const char *op, double ms, uint64_t bytes_in, uint64_t bytes_out, const char *extra) {
        printf("{\"bench\":\"store\",\"op\":\"%s\",\"ms\":%.1f,\"mb_per_s\":%.1f,\"bytes_in\":%" PRIu64
               ",\"bytes_out\":%" PRIu64 "%s%s}\n",
               op, ms, ms > 0 ? (double)bytes_in / 1e6 / (ms / 1e3) : 0, bytes_in, bytes_out, extra ? "," : "",
               extra ? extra : "");
        fflush(stdout);
}

int main(int argc, char **argv) {
        const char *tree = NULL;
        if (argc == 3 && !strcmp(argv[1], "--generate")) {
                uint64_t n = generate(argv[2]);
                fprintf(stderr, "store_bench: generated %.0f MB in %s\n", (double)n / 1e6, argv[2]);
                return 0;
        }
        if (argc >= 3 && !strcmp(argv[1], "--tree")) {
                tree = argv[2];
                argc -= 2;
                argv += 2;
        }
        const char *work = argc > 1 ? argv[1] : "/var/tmp";
        char base[4096], src[4200], sdir[4200], out[4200], cp[4200], tarf[4200], cmd[16384];
        snprintf(base, sizeof base, "%s/space-store-bench-XXXXXX", work);
        if (!mkdtemp(base)) {
                fprintf(stderr, "store_bench: cannot create a work dir in %s: %s\n", work, strerror(errno));
                return 1;
        }
        if (tree)
                snprintf(src, sizeof src, "%s", tree);
        else
                snprintf(src, sizeof src, "%s/tree", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(out, sizeof out, "%s/restored", base);
        snprintf(cp, sizeof cp, "%s/cp", base);
        snprintf(tarf, sizeof tarf, "%s/tree.tar.zst", base);
        int rc = 1;

        double t = now_ms();
        uint64_t total = tree ? tree_bytes(src) : generate(src);
        if (!tree)
                fprintf(stderr, "store_bench: generated %.0f MB in %.1f s\n", (double)total / 1e6, (now_ms() - t) / 1e3);

        /* references, measured in this run on the same (page-cached) tree */
        snprintf(cmd, sizeof cmd, "tar -C '%s' -cf - . | zstd -1 -q -o '%s'", src, tarf);
        t = now_ms();
        if (run_sh(cmd) != 0)
                goto out;
        double tar_ms = now_ms() - t;
        uint64_t tar_size = file_size(tarf);
        line("tar_zstd1", tar_ms, total, tar_size, NULL);

        snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", src, cp);
        t = now_ms();
        if (run_sh(cmd) != 0)
                goto out;
        double cp_ms = now_ms() - t;
        line("cp_a", cp_ms, total, total, NULL);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", cp);
        run_sh(cmd);

        struct store *s;
        /* STORE_BENCH_LEVEL=N: compare zstd levels (0 = the store's default) */
        const char *lv = getenv("STORE_BENCH_LEVEL");
        int level = lv ? atoi(lv) : 0;
        if (store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true, .compression_level = level }, &s) < 0) {
                fprintf(stderr, "store_bench: %s\n", store_error_detail());
                goto out;
        }
        struct store_op_stats st = { 0 };
        struct store_hash h1, h2;
        t = now_ms();
        if (store_capture(s, src, NULL, &(struct store_capture_opts){ .stats = &st }, &h1) < 0) {
                fprintf(stderr, "store_bench: capture: %s\n", store_error_detail());
                goto out_store;
        }
        double cap_ms = now_ms() - t, inc_ms = 0, inc_big_ms = 0;
        struct store_stats ss;
        store_stats(s, &ss);
        line("capture_fresh", cap_ms, total, ss.bytes_stored, NULL);

        /* Two kinds of 1 MiB change: a 1 MiB file rewritten (the file is read again whole: 1 MiB),
         * and 1 MiB overwritten in the middle of a 36 MiB file (read again whole: 36 MiB). */
        char p[4300];
        char *mb = malloc(1 << 20);
        fill_random(mb, 1 << 20);
        snprintf(p, sizeof p, "%s/pkg07/config.bin", src);
        if (write_all(p, mb, 1 << 20) < 0)
                goto out_store;
        struct store_hash h0 = h1;
        usleep(30000);
        if (store_capture(s, src, &h0, NULL, &h1) < 0) /* the baseline that holds the 1 MiB file */
                goto out_store;
        struct store_hash hs[2];
        for (int variant = 0; variant < 2; variant++) {
                fill_random(mb, 1 << 20);
                if (variant == 0) {
                        if (write_all(p, mb, 1 << 20) < 0)
                                goto out_store;
                } else {
                        char q[4300];
                        snprintf(q, sizeof q, "%s/pkg03/large03.bin", src);
                        int fd = open(q, O_WRONLY | O_CLOEXEC);
                        if (fd < 0 || pwrite(fd, mb, 1 << 20, LARGE_SIZE / 2) != 1 << 20)
                                goto out_store;
                        close(fd);
                }
                usleep(30000);
                struct store_op_stats st2 = { 0 };
                t = now_ms();
                if (store_capture(s, src, variant ? &hs[0] : &h1, &(struct store_capture_opts){ .stats = &st2 }, &hs[variant]) < 0) {
                        fprintf(stderr, "store_bench: capture: %s\n", store_error_detail());
                        goto out_store;
                }
                double ms = now_ms() - t;
                if (variant == 0)
                        inc_ms = ms;
                else
                        inc_big_ms = ms;
                char extra[256];
                snprintf(extra, sizeof extra,
                         "\"bytes_read\":%" PRIu64 ",\"files_read\":%" PRIu64 ",\"objects_written\":%" PRIu64, st2.bytes_read,
                         st2.files_read, st2.objects_written);
                line(variant ? "capture_incremental_1mb_in_36mb_file" : "capture_incremental_1mb_file", ms, 1 << 20,
                     st2.bytes_written, extra);
        }
        free(mb);
        h2 = hs[1];

        t = now_ms();
        if (store_materialize(s, &h2, out, NULL) < 0) {
                fprintf(stderr, "store_bench: materialize: %s\n", store_error_detail());
                goto out_store;
        }
        double mat_ms = now_ms() - t;
        line("materialize", mat_ms, total, total, NULL);

        snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' >/dev/null", src, out);
        bool same = run_sh(cmd) == 0;
        printf("{\"bench\":\"store\",\"op\":\"summary\",\"tree_bytes\":%" PRIu64 ",\"files\":%d"
               ",\"capture_speed_vs_tar_zstd1\":%.2f,\"stored_size_vs_tar_zstd1\":%.3f"
               ",\"incremental_ms\":%.1f,\"incremental_in_large_file_ms\":%.1f,\"materialize_speed_vs_cp_a\":%.2f"
               ",\"restored_equal\":%s"
               ",\"targets_met\":{\"capture_at_least_tar_speed\":%s,\"size_at_most_tar\":%s,\"incremental_under_50ms\":%s"
               ",\"materialize_at_least_half_cp\":%s}}\n",
               total, SMALL_FILES + LARGE_FILES, tar_ms / cap_ms, (double)ss.bytes_stored / (double)tar_size, inc_ms,
               inc_big_ms, cp_ms / mat_ms, same ? "true" : "false", cap_ms <= tar_ms ? "true" : "false",
               ss.bytes_stored <= tar_size ? "true" : "false", inc_ms < 50 ? "true" : "false",
               cp_ms / mat_ms >= 0.5 ? "true" : "false");
        rc = same ? 0 : 1;
out_store:
        store_free(s);
out:
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        run_sh(cmd);
        return rc;
}
