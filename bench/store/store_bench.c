/* Snapshot store benchmark: one run generates a tree (~541 MB: 10,000 small files and 12
 * large ones), then measures fresh capture, incremental capture after a 1 MiB change, and
 * materialize, beside `tar -c | zstd -1` and `cp -a` of the same tree, alternating.
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
        if (tree) /* the changes below must not repeat what an earlier run wrote into this tree */
                rng_state += (uint64_t)time(NULL) * 1000003u;
        if (!tree)
                fprintf(stderr, "store_bench: generated %.0f MB in %.1f s\n", (double)total / 1e6, (now_ms() - t) / 1e3);
        /* STORE_BENCH_ROUNDS=N (default 2): each timed step runs N times, alternating with
         * its reference, and the best time of each counts. The machine this runs on is
         * shared and noisy, and on journal-less ext4 creating files right after deleting
         * many costs far more (ext4 skips recently deleted inodes): alternating gives
         * cp -a and materialize the same conditions. Every timed step starts after a sync,
         * so no step pays for the previous one's writeback. */
        const char *rv = getenv("STORE_BENCH_ROUNDS");
        int rounds = rv && atoi(rv) > 0 ? atoi(rv) : 2;
        /* STORE_BENCH_LEVEL=N: compare zstd levels (0 = the store's default) */
        const char *lv = getenv("STORE_BENCH_LEVEL");
        int level = lv ? atoi(lv) : 0;
        struct store_opts so = { STORE_OPTS_INIT, .create = true, .compression_level = level };
        struct store *s = NULL;
        double tar_ms = 1e18, cap_ms = 1e18, cp_ms = 1e18, mat_ms = 1e18;
        uint64_t tar_size = 0, stored = 0;
        struct store_hash h1, h2;
        bool same = true;

        for (int r = 0; r < rounds; r++) {
                snprintf(cmd, sizeof cmd, "rm -f '%s'; tar -C '%s' -cf - . | zstd -1 -q -o '%s'", tarf, src, tarf);
                sync();
                t = now_ms();
                if (run_sh(cmd) != 0)
                        goto out;
                double ms = now_ms() - t;
                tar_ms = ms < tar_ms ? ms : tar_ms;
                tar_size = file_size(tarf);
                line("tar_zstd1", ms, total, tar_size, NULL);

                /* a fresh store each round; the first one is kept for the steps below */
                char sd[4300];
                snprintf(sd, sizeof sd, "%s.%d", sdir, r);
                struct store *x;
                if (store_open(sd, &so, &x) < 0) {
                        fprintf(stderr, "store_bench: %s\n", store_error_detail());
                        goto out;
                }
                sync();
                struct store_hash hr;
                t = now_ms();
                if (store_capture(x, src, NULL, NULL, &hr) < 0) {
                        fprintf(stderr, "store_bench: capture: %s\n", store_error_detail());
                        store_free(x);
                        goto out;
                }
                ms = now_ms() - t;
                cap_ms = ms < cap_ms ? ms : cap_ms;
                struct store_stats ss;
                store_stats(x, &ss);
                stored = ss.bytes_stored;
                line("capture_fresh", ms, total, ss.bytes_stored, NULL);
                if (r == 0) {
                        s = x;
                        h1 = hr;
                } else {
                        store_free(x);
                        snprintf(cmd, sizeof cmd, "rm -rf '%s'", sd);
                        run_sh(cmd);
                }
        }

        /* Two kinds of 1 MiB change: a 1 MiB file rewritten (the file is read again whole: 1 MiB),
         * and 1 MiB overwritten in the middle of a 36 MiB file (read again whole: 36 MiB). Three
         * of each; the median counts. */
        char p[4300];
        char *mb = malloc(1 << 20);
        fill_random(mb, 1 << 20);
        snprintf(p, sizeof p, "%s/pkg07/config.bin", src);
        if (write_all(p, mb, 1 << 20) < 0)
                goto out_store;
        struct store_hash prev = h1;
        usleep(30000);
        if (store_capture(s, src, &prev, NULL, &prev) < 0) { /* the baseline that holds the 1 MiB file */
                fprintf(stderr, "store_bench: capture: %s\n", store_error_detail());
                goto out_store;
        }
        double inc[2][3];
        for (int k = 0; k < 3; k++)
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
                        sync();
                        struct store_op_stats st2 = { 0 };
                        t = now_ms();
                        if (store_capture(s, src, &prev, &(struct store_capture_opts){ .stats = &st2 }, &prev) < 0) {
                                fprintf(stderr, "store_bench: capture: %s\n", store_error_detail());
                                goto out_store;
                        }
                        double ms = now_ms() - t;
                        inc[variant][k] = ms;
                        char extra[256];
                        snprintf(extra, sizeof extra,
                                 "\"bytes_read\":%" PRIu64 ",\"files_read\":%" PRIu64 ",\"objects_written\":%" PRIu64,
                                 st2.bytes_read, st2.files_read, st2.objects_written);
                        line(variant ? "capture_incremental_1mb_in_36mb_file" : "capture_incremental_1mb_file", ms, 1 << 20,
                             st2.bytes_written, extra);
                }
        free(mb);
        h2 = prev;
        for (int v = 0; v < 2; v++) /* sort three: the middle one is the median */
                for (int i = 0; i < 2; i++)
                        for (int j = 0; j < 2 - i; j++)
                                if (inc[v][j] > inc[v][j + 1]) {
                                        double x = inc[v][j];
                                        inc[v][j] = inc[v][j + 1];
                                        inc[v][j + 1] = x;
                                }
        double inc_ms = inc[0][1], inc_big_ms = inc[1][1];

        for (int r = 0; r < rounds; r++) {
                for (int step = 0; step < 2; step++) {
                        bool do_cp = (step == 0) == (r % 2 == 0); /* cp first in even rounds */
                        sync();
                        t = now_ms();
                        if (do_cp) {
                                snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", src, cp);
                                if (run_sh(cmd) != 0)
                                        goto out_store;
                        } else if (store_materialize(s, &h2, out, NULL) < 0) {
                                fprintf(stderr, "store_bench: materialize: %s\n", store_error_detail());
                                goto out_store;
                        }
                        double ms = now_ms() - t;
                        if (do_cp)
                                cp_ms = ms < cp_ms ? ms : cp_ms;
                        else
                                mat_ms = ms < mat_ms ? ms : mat_ms;
                        line(do_cp ? "cp_a" : "materialize", ms, total, total, NULL);
                }
                if (r == 0) {
                        snprintf(cmd, sizeof cmd, "diff -r --no-dereference '%s' '%s' >/dev/null", src, out);
                        same = run_sh(cmd) == 0;
                }
                snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", cp, out);
                run_sh(cmd);
        }

        double load = 0;
        FILE *lf = fopen("/proc/loadavg", "re");
        if (lf) {
                if (fscanf(lf, "%lf", &load) != 1)
                        load = 0;
                fclose(lf);
        }
        printf("{\"bench\":\"store\",\"op\":\"summary\",\"tree_bytes\":%" PRIu64 ",\"files\":%d,\"rounds\":%d"
               ",\"loadavg\":%.2f,\"tar_zstd1_ms\":%.1f,\"capture_fresh_ms\":%.1f,\"cp_a_ms\":%.1f,\"materialize_ms\":%.1f"
               ",\"capture_speed_vs_tar_zstd1\":%.2f,\"stored_size_vs_tar_zstd1\":%.3f"
               ",\"incremental_ms\":%.1f,\"incremental_in_large_file_ms\":%.1f,\"materialize_speed_vs_cp_a\":%.2f"
               ",\"restored_equal\":%s"
               ",\"targets_met\":{\"capture_at_least_tar_speed\":%s,\"size_at_most_tar\":%s,\"incremental_under_50ms\":%s"
               ",\"materialize_at_least_half_cp\":%s}}\n",
               total, SMALL_FILES + LARGE_FILES, rounds, load, tar_ms, cap_ms, cp_ms, mat_ms, tar_ms / cap_ms,
               (double)stored / (double)tar_size, inc_ms, inc_big_ms, cp_ms / mat_ms, same ? "true" : "false",
               cap_ms <= tar_ms ? "true" : "false", stored <= tar_size ? "true" : "false", inc_ms < 50 ? "true" : "false",
               cp_ms / mat_ms >= 0.5 ? "true" : "false");
        rc = same ? 0 : 1;
out_store:
        store_free(s);
out:
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        run_sh(cmd);
        return rc;
}
