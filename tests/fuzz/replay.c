/* Replays a fuzz corpus without libFuzzer: feeds every regular file of each directory (or
 * each file) given on the command line to LLVMFuzzerTestOneInput, once. Built with the
 * normal compiler for every target, so `make check` runs each committed corpus (and the
 * sanitizer build runs it under ASan+UBSan). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/macros.h"
#include "fuzz.h"

#define REPLAY_MAX_INPUT (4u << 20) /* larger than any corpus file libFuzzer writes (-max_len) */

static int replay_file(int dfd, const char *name, const char *shown) {
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                fprintf(stderr, "replay: %s: %s\n", shown, strerror(errno));
                return -1;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > REPLAY_MAX_INPUT) {
                fprintf(stderr, "replay: %s: not a regular file of at most %u bytes\n", shown, REPLAY_MAX_INPUT);
                return -1;
        }
        size_t n = (size_t)st.st_size;
        /* An exact-size heap copy so ASan sees any read past the end of the input. */
        _cleanup_free_ uint8_t *data = malloc(n ? n : 1);
        if (!data)
                return -1;
        size_t got = 0;
        while (got < n) {
                ssize_t k = read(fd, data + got, n - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        fprintf(stderr, "replay: %s: short read\n", shown);
                        return -1;
                }
                got += (size_t)k;
        }
        LLVMFuzzerTestOneInput(data, n);
        return 0;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *path, unsigned *count) {
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d) {
                fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
                return -1;
        }
        /* Sorted, so a failure names the same file on every run. */
        char **names = NULL;
        size_t n = 0, cap = 0;
        int ret = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 64;
                        char **nn = realloc(names, cap * sizeof *nn);
                        if (!nn) {
                                ret = -1;
                                break;
                        }
                        names = nn;
                }
                if (!(names[n] = strdup(e->d_name))) {
                        ret = -1;
                        break;
                }
                n++;
        }
        if (ret == 0) {
                qsort(names, n, sizeof *names, cmp_names);
                for (size_t i = 0; i < n; i++) {
                        char shown[4096];
                        snprintf(shown, sizeof shown, "%s/%s", path, names[i]);
                        if (replay_file(dirfd(d), names[i], shown) < 0)
                                ret = -1;
                        else
                                (*count)++;
                }
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return ret;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
                return 2;
        }
        unsigned count = 0;
        int failed = 0;
        for (int i = 1; i < argc; i++) {
                struct stat st;
                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
                        failed = 1;
                } else if (S_ISDIR(st.st_mode)) {
                        if (replay_dir(argv[i], &count) < 0)
                                failed = 1;
                } else if (replay_file(AT_FDCWD, argv[i], argv[i]) < 0) {
                        failed = 1;
                } else {
                        count++;
                }
        }
        printf("replayed %u inputs through %s\n", count, argv[0]);
        /* An empty corpus proves nothing: a target must ship at least one input. */
        if (count == 0) {
                fprintf(stderr, "replay: no inputs\n");
                return 1;
        }
        return failed;
}
