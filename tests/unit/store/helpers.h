/* Test helpers for the store: temp dirs, a seeded random tree generator that makes every
 * entry type the store keeps, and a comparison of two directory trees down to xattrs,
 * owners, mtimes, hard-link structure and sparseness. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rng {
        uint64_t s;
};
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);
void rng_fill(struct rng *r, void *buf, size_t n);

/* mkdtemp under $TMPDIR or /var/tmp; returns a malloc'd path. */
char *th_tmpdir(const char *tag);
void th_rm_rf(const char *path);
/* Writes n bytes of seeded data, half compressible, at path (created or truncated). */
int th_write_file(const char *path, struct rng *r, size_t n);

struct gen_opts {
        unsigned max_depth;
        unsigned max_entries;     /* per directory */
        bool devices;             /* needs root: device nodes, whiteouts, owners, trusted.* xattrs */
        size_t max_file;          /* largest dense file */
};
/* Fills the existing empty directory root; returns 0 or -errno. */
int th_gen_tree(const char *root, struct rng *r, const struct gen_opts *o);
/* Random changes: edits, appends, new and removed entries, chmod, xattrs. */
int th_mutate_tree(const char *root, struct rng *r, unsigned changes);

/* 0 if a and b hold the same tree; else -1 with a description in why. */
int th_compare_trees(const char *a, const char *b, char *why, size_t whylen);
