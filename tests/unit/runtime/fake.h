/* Helpers for the runtime unit tests: temporary trees and small files. */
#pragma once
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/macros.h"
#include "runtime/fsutil.h"

/* snprintf into an array that must not truncate. */
#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)

static inline char *fake_mkdtemp(void) {
        char *p = strdup("/tmp/space-rt-test-XXXXXX");
        assert_non_null(p);
        assert_non_null(mkdtemp(p));
        return p;
}

/* Writes a file under root (parent directories made as needed). */
static inline void fake_put(const char *root, const char *rel, const char *content) {
        char p[4096];
        PJ(p, "%s/%s", root, rel);
        char *slash = strrchr(p, '/');
        *slash = 0;
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        *slash = '/';
        FILE *f = fopen(p, "we");
        assert_non_null(f);
        fputs(content, f);
        fclose(f);
}

/* Reads a file under root into a static buffer ("" + failed assertion if absent). */
static inline const char *fake_get(const char *root, const char *rel) {
        static char buf[4096];
        char p[4096];
        PJ(p, "%s/%s", root, rel);
        int n = rt_read_file(p, buf, sizeof buf);
        assert_true(n >= 0);
        return buf;
}

static inline void fake_mkdir(const char *root, const char *rel) {
        char p[4096];
        PJ(p, "%s/%s", root, rel);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
}

static inline bool fake_exists(const char *root, const char *rel) {
        char p[4096];
        struct stat st;
        PJ(p, "%s/%s", root, rel);
        return lstat(p, &st) == 0;
}
