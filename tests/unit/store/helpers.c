/* Test helpers for the store (see helpers.h). */
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

uint64_t rng_next(struct rng *r) {
        uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

uint64_t rng_below(struct rng *r, uint64_t n) { return n ? rng_next(r) % n : 0; }

void rng_fill(struct rng *r, void *buf, size_t n) {
        uint8_t *p = buf;
        while (n >= 8) {
                uint64_t v = rng_next(r);
                memcpy(p, &v, 8);
                p += 8;
                n -= 8;
        }
        while (n--)
                *p++ = (uint8_t)rng_next(r);
}

char *th_tmpdir(const char *tag) {
        const char *base = getenv("TMPDIR");
        char *p;
        if (asprintf(&p, "%s/space-store-test-%s-XXXXXX", base && *base ? base : "/var/tmp", tag) < 0)
                return NULL;
        if (!mkdtemp(p)) {
                free(p);
                return NULL;
        }
        return p;
}

static void rm_rf_at(int dfd, const char *name) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        if (S_ISDIR(st.st_mode)) {
                int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0) {
                        fchmod(fd, 0700);
                        DIR *d = fdopendir(fd);
                        struct dirent *de;
                        while (d && (de = readdir(d)))
                                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                                        rm_rf_at(dirfd(d), de->d_name);
                        if (d)
                                closedir(d);
                        else
                                close(fd);
                }
                unlinkat(dfd, name, AT_REMOVEDIR);
        } else
                unlinkat(dfd, name, 0);
}

void th_rm_rf(const char *path) {
        if (path)
                rm_rf_at(AT_FDCWD, path);
}

int th_write_file(const char *path, struct rng *r, size_t n) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        rng_fill(r, buf, n);
        /* text-like halves so compression has something to do */
        for (size_t i = 0; i < n / 2; i++)
                buf[i] = (uint8_t)("abcdefgh ijklmno\n"[buf[i] % 17]);
        ssize_t k = write(fd, buf, n);
        free(buf);
        close(fd);
        return k == (ssize_t)n ? 0 : -EIO;
}

/* ---- generator ---- */

struct gen {
        struct rng *r;
        const struct gen_opts *o;
        char **files; /* regular files made so far (hard-link sources) */
        size_t nfiles, capfiles;
        char **all;   /* every path, for mtimes at the end (post-order) */
        size_t nall, capall;
};

static void push(char ***v, size_t *n, size_t *cap, const char *p) {
        if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *v = realloc(*v, *cap * sizeof **v);
        }
        (*v)[(*n)++] = strdup(p);
}

static void rand_name(struct rng *r, char *out, size_t idx) {
        static const char *const pre[] = { "a", "file", "Data", "x y", "\xc3\xa9t\xc3\xa9", "-dash", ".hidden", "z\xff" };
        snprintf(out, 64, "%s%zu_%u", pre[rng_below(r, 8)], idx, (unsigned)rng_below(r, 1000));
}

/* user.* only exists on files and directories; other types get trusted.* (root only). */
static int set_some_xattrs(struct gen *g, const char *p, bool symlink) {
        unsigned n = (unsigned)rng_below(g->r, 3);
        for (unsigned i = 0; i < n; i++) {
                char name[64], val[300];
                size_t vl = rng_below(g->r, sizeof val);
                rng_fill(g->r, val, vl);
                if (symlink || (g->o->devices && rng_below(g->r, 3) == 0))
                        snprintf(name, sizeof name, "trusted.t%u", i);
                else
                        snprintf(name, sizeof name, "user.u%u", i);
                if (symlink && !g->o->devices)
                        return 0; /* user.* is not allowed on symlinks */
                if (lsetxattr(p, name, val, vl, 0) < 0)
                        return -errno;
        }
        return 0;
}

static int gen_dir(struct gen *g, const char *dir, unsigned depth) {
        unsigned n = (unsigned)rng_below(g->r, g->o->max_entries + 1);
        if (depth == 0)
                n = g->o->max_entries; /* a full top level, so every round has something */
        for (unsigned i = 0; i < n; i++) {
                char name[64], p[4096];
                rand_name(g->r, name, i);
                snprintf(p, sizeof p, "%s/%s", dir, name);
                unsigned kind = (unsigned)rng_below(g->r, 14);
                int r = 0;
                bool dev = g->o->devices;
                switch (kind) {
                case 0: case 1: case 2: /* small file */
                        r = th_write_file(p, g->r, rng_below(g->r, 5000));
                        if (!r)
                                push(&g->files, &g->nfiles, &g->capfiles, p);
                        break;
                case 3: /* multi-chunk file */
                        r = th_write_file(p, g->r, 100000 + rng_below(g->r, g->o->max_file));
                        if (!r)
                                push(&g->files, &g->nfiles, &g->capfiles, p);
                        break;
                case 4: { /* sparse file */
                        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                        if (fd < 0)
                                return -errno;
                        uint64_t size = (1 + rng_below(g->r, 64)) << 20;
                        if (ftruncate(fd, (off_t)size) < 0)
                                r = -errno;
                        for (int k = 0; k < 3 && !r; k++) {
                                char buf[5000];
                                rng_fill(g->r, buf, sizeof buf);
                                if (pwrite(fd, buf, sizeof buf, (off_t)rng_below(g->r, size - sizeof buf)) < 0)
                                        r = -errno;
                        }
                        close(fd);
                        if (!r)
                                push(&g->files, &g->nfiles, &g->capfiles, p);
                        break;
                }
                case 5: case 6:
                        if (depth >= g->o->max_depth)
                                continue;
                        if (mkdir(p, 0755) < 0)
                                return -errno;
                        r = gen_dir(g, p, depth + 1);
                        if (!r && dev && rng_below(g->r, 4) == 0 && lsetxattr(p, "trusted.overlay.opaque", "y", 1, 0) < 0)
                                r = -errno;
                        break;
                case 7: { /* symlink, possibly dangling or absolute */
                        static const char *const t[] = { "../x", "/etc/passwd", "target", "a/b/c", "..", "/" };
                        if (symlink(t[rng_below(g->r, 6)], p) < 0)
                                return -errno;
                        break;
                }
                case 8: /* hard link */
                        if (!g->nfiles)
                                continue;
                        if (link(g->files[rng_below(g->r, g->nfiles)], p) < 0)
                                return -errno;
                        break;
                case 9:
                        if (mkfifo(p, 0644) < 0)
                                return -errno;
                        break;
                case 10:
                        if (!dev)
                                continue;
                        if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) < 0)
                                return -errno;
                        break;
                case 11: /* overlayfs whiteout */
                        if (!dev)
                                continue;
                        if (mknod(p, S_IFCHR, makedev(0, 0)) < 0)
                                return -errno;
                        break;
                case 12:
                        if (!dev)
                                continue;
                        if (mknod(p, S_IFBLK | 0660, makedev(7, 0)) < 0)
                                return -errno;
                        break;
                case 13:
                        if (mknod(p, S_IFSOCK | 0755, 0) < 0)
                                return -errno;
                        break;
                }
                if (r < 0)
                        return r;
                struct stat st;
                if (lstat(p, &st) < 0)
                        return -errno;
                if (!S_ISLNK(st.st_mode)) {
                                if ((r = set_some_xattrs(g, p, !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) < 0)
                                return r;
                        static const mode_t modes[] = { 0644, 0600, 0755, 04755, 02711, 0444, 01777, 0 };
                        mode_t m = S_ISDIR(st.st_mode) ? (rng_below(g->r, 4) ? 0755 : 01777) : modes[rng_below(g->r, 8)];
                        if (dev && rng_below(g->r, 3) == 0 && lchown(p, (uid_t)rng_below(g->r, 70000), (gid_t)rng_below(g->r, 70000)) < 0)
                                return -errno;
                        if (chmod(p, m) < 0)
                                return -errno;
                } else {
                        if ((r = set_some_xattrs(g, p, true)) < 0)
                                return r;
                        if (dev && rng_below(g->r, 3) == 0 && lchown(p, 1000, 1000) < 0)
                                return -errno;
                }
                push(&g->all, &g->nall, &g->capall, p);
        }
        return 0;
}

static void free_list(char **v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

/* mtimes last, deepest paths first, so creating entries doesn't move them again. */
static void set_mtimes(struct gen *g, const char *root) {
        for (size_t i = g->nall; i-- > 0;) {
                struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
                                          { .tv_sec = 1500000000 + (time_t)rng_below(g->r, 200000000),
                                            .tv_nsec = (long)rng_below(g->r, 1000000000) } };
                utimensat(AT_FDCWD, g->all[i], ts, AT_SYMLINK_NOFOLLOW);
        }
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 1600000000, .tv_nsec = 123456789 } };
        utimensat(AT_FDCWD, root, ts, 0);
}

int th_gen_tree(const char *root, struct rng *r, const struct gen_opts *o) {
        struct gen g = { .r = r, .o = o };
        int k = gen_dir(&g, root, 0);
        /* directories were filled after their own mtime could be set: sort is by creation,
         * parents come before children, so reverse order sets children first */
        if (!k)
                set_mtimes(&g, root);
        free_list(g.files, g.nfiles);
        free_list(g.all, g.nall);
        return k;
}

/* ---- mutation ---- */

static int collect(const char *dir, char ***v, size_t *n, size_t *cap) {
        DIR *d = opendir(dir);
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                push(v, n, cap, p);
                if (de->d_type == DT_DIR)
                        collect(p, v, n, cap);
        }
        closedir(d);
        return 0;
}

int th_mutate_tree(const char *root, struct rng *r, unsigned changes) {
        char **v = NULL;
        size_t n = 0, cap = 0;
        collect(root, &v, &n, &cap);
        for (unsigned c = 0; c < changes; c++) {
                if (!n) {
                        char p[4096];
                        snprintf(p, sizeof p, "%s/new%u", root, c);
                        th_write_file(p, r, 100);
                        continue;
                }
                const char *p = v[rng_below(r, n)];
                struct stat st;
                if (lstat(p, &st) < 0)
                        continue;
                switch (rng_below(r, 6)) {
                case 0:
                        if (S_ISREG(st.st_mode)) {
                                int fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
                                if (fd >= 0) {
                                        (void)!write(fd, "appended", 8);
                                        close(fd);
                                }
                        }
                        break;
                case 1:
                        if (S_ISREG(st.st_mode) && st.st_size > 10) {
                                int fd = open(p, O_WRONLY | O_CLOEXEC);
                                if (fd >= 0) {
                                        (void)!pwrite(fd, "X", 1, (off_t)rng_below(r, (uint64_t)st.st_size));
                                        close(fd);
                                }
                        }
                        break;
                case 2:
                        if (!S_ISLNK(st.st_mode))
                                chmod(p, 0640);
                        break;
                case 3:
                        if (!S_ISLNK(st.st_mode))
                                lsetxattr(p, "user.changed", "1", 1, 0);
                        break;
                case 4: {
                        char q[4200];
                        snprintf(q, sizeof q, "%s.new%u", S_ISDIR(st.st_mode) ? p : root, c);
                        if (S_ISDIR(st.st_mode) && access(p, W_OK) == 0 && (st.st_mode & 0200))
                                th_write_file(q, r, rng_below(r, 200000));
                        else {
                                snprintf(q, sizeof q, "%s/new%u", root, c);
                                th_write_file(q, r, rng_below(r, 200000));
                        }
                        break;
                }
                case 5:
                        if (!S_ISDIR(st.st_mode))
                                unlink(p);
                        break;
                }
        }
        free_list(v, n);
        return 0;
}

/* ---- comparison ---- */

struct cmp {
        char *why;
        size_t whylen;
        uint64_t (*map)[2]; /* inode in a -> inode in b, for hard links */
        size_t nmap, capmap;
};

static int mismatch(struct cmp *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int mismatch(struct cmp *c, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->whylen, fmt, ap);
        va_end(ap);
        return -1;
}

static int cmp_strp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int xattr_list(const char *p, char ***names, size_t *n) {
        char buf[65536];
        ssize_t k = llistxattr(p, buf, sizeof buf);
        if (k < 0)
                return -errno;
        *n = 0;
        *names = NULL;
        for (ssize_t i = 0; i < k; i += (ssize_t)strlen(buf + i) + 1) {
                *names = realloc(*names, (*n + 1) * sizeof **names);
                (*names)[(*n)++] = strdup(buf + i);
        }
        return 0;
}

static int cmp_xattrs(struct cmp *c, const char *a, const char *b) {
        char **na, **nb;
        size_t la, lb;
        if (xattr_list(a, &na, &la) < 0 || xattr_list(b, &nb, &lb) < 0)
                return mismatch(c, "%s: cannot list xattrs", a);
        if (la)
                qsort(na, la, sizeof *na, cmp_strp);
        if (lb)
                qsort(nb, lb, sizeof *nb, cmp_strp);
        int r = 0;
        if (la != lb)
                r = mismatch(c, "%s: %zu xattrs vs %zu", a, la, lb);
        for (size_t i = 0; !r && i < la; i++) {
                char va[65536], vb[65536];
                if (strcmp(na[i], nb[i])) {
                        r = mismatch(c, "%s: xattr %s vs %s", a, na[i], nb[i]);
                        break;
                }
                ssize_t ka = lgetxattr(a, na[i], va, sizeof va), kb = lgetxattr(b, nb[i], vb, sizeof vb);
                if (ka != kb || (ka > 0 && memcmp(va, vb, (size_t)ka)))
                        r = mismatch(c, "%s: xattr %s differs", a, na[i]);
        }
        free_list(na, la);
        free_list(nb, lb);
        return r;
}

static int cmp_content(struct cmp *c, const char *a, const char *b) {
        int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
        int r = 0;
        if (fa < 0 || fb < 0)
                r = mismatch(c, "%s: cannot open for comparison", a);
        static __thread char ba[1 << 16], bb[1 << 16];
        while (!r) {
                ssize_t ka = read(fa, ba, sizeof ba), kb = read(fb, bb, sizeof bb);
                if (ka != kb || (ka > 0 && memcmp(ba, bb, (size_t)ka)))
                        r = mismatch(c, "%s: content differs", a);
                if (ka <= 0)
                        break;
        }
        if (fa >= 0)
                close(fa);
        if (fb >= 0)
                close(fb);
        return r;
}

static int cmp_entry(struct cmp *c, const char *a, const char *b, bool root);

static int list_sorted(const char *dir, char ***v, size_t *n) {
        size_t cap = 0;
        *v = NULL;
        *n = 0;
        DIR *d = opendir(dir);
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        push(v, n, &cap, de->d_name);
        closedir(d);
        if (*n)
                qsort(*v, *n, sizeof **v, cmp_strp);
        return 0;
}

static int cmp_entry(struct cmp *c, const char *a, const char *b, bool root) {
        struct stat sa, sb;
        if (lstat(a, &sa) < 0)
                return mismatch(c, "%s: %s", a, strerror(errno));
        if (lstat(b, &sb) < 0)
                return mismatch(c, "%s missing in the copy (%s)", a, strerror(errno));
        if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
                return mismatch(c, "%s: type differs", a);
        if (!S_ISLNK(sa.st_mode) && (sa.st_mode & 07777) != (sb.st_mode & 07777))
                return mismatch(c, "%s: mode %o vs %o", a, sa.st_mode & 07777, sb.st_mode & 07777);
        if (sa.st_uid != sb.st_uid || sa.st_gid != sb.st_gid)
                return mismatch(c, "%s: owner %u:%u vs %u:%u", a, sa.st_uid, sa.st_gid, sb.st_uid, sb.st_gid);
        if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec || sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
                return mismatch(c, "%s: mtime differs", a);
        if (cmp_xattrs(c, a, b))
                return -1;
        if (S_ISREG(sa.st_mode)) {
                if (sa.st_size != sb.st_size)
                        return mismatch(c, "%s: size %lld vs %lld", a, (long long)sa.st_size, (long long)sb.st_size);
                if (sb.st_blocks > sa.st_blocks + 64)
                        return mismatch(c, "%s: copy inflated (%lld blocks vs %lld)", a, (long long)sb.st_blocks,
                                        (long long)sa.st_blocks);
                if ((sa.st_nlink > 1) != (sb.st_nlink > 1))
                        return mismatch(c, "%s: hard link count %lu vs %lu", a, (unsigned long)sa.st_nlink,
                                        (unsigned long)sb.st_nlink);
                if (sa.st_nlink > 1) {
                        for (size_t i = 0; i < c->nmap; i++) {
                                if ((c->map[i][0] == sa.st_ino) != (c->map[i][1] == sb.st_ino))
                                        return mismatch(c, "%s: hard link structure differs", a);
                        }
                        if (c->nmap == c->capmap) {
                                c->capmap = c->capmap ? c->capmap * 2 : 16;
                                c->map = realloc(c->map, c->capmap * sizeof *c->map);
                        }
                        c->map[c->nmap][0] = sa.st_ino;
                        c->map[c->nmap][1] = sb.st_ino;
                        c->nmap++;
                }
                return cmp_content(c, a, b);
        }
        if (S_ISLNK(sa.st_mode)) {
                char ta[4096], tb[4096];
                ssize_t ka = readlink(a, ta, sizeof ta), kb = readlink(b, tb, sizeof tb);
                if (ka != kb || ka < 0 || memcmp(ta, tb, (size_t)ka))
                        return mismatch(c, "%s: symlink target differs", a);
                return 0;
        }
        if (S_ISCHR(sa.st_mode) || S_ISBLK(sa.st_mode)) {
                if (sa.st_rdev != sb.st_rdev)
                        return mismatch(c, "%s: device numbers differ", a);
                return 0;
        }
        if (!S_ISDIR(sa.st_mode))
                return 0;
        char **la, **lb;
        size_t na, nb;
        if (list_sorted(a, &la, &na) < 0 || list_sorted(b, &lb, &nb) < 0)
                return mismatch(c, "%s: cannot list", a);
        int r = 0;
        if (na != nb)
                r = mismatch(c, "%s: %zu entries vs %zu", a, na, nb);
        for (size_t i = 0; !r && i < na; i++) {
                if (strcmp(la[i], lb[i])) {
                        r = mismatch(c, "%s: entry %s vs %s", a, la[i], lb[i]);
                        break;
                }
                char pa[4096], pb[4096];
                snprintf(pa, sizeof pa, "%s/%s", a, la[i]);
                snprintf(pb, sizeof pb, "%s/%s", b, lb[i]);
                r = cmp_entry(c, pa, pb, false);
        }
        free_list(la, na);
        free_list(lb, nb);
        (void)root;
        return r;
}

int th_compare_trees(const char *a, const char *b, char *why, size_t whylen) {
        struct cmp c = { .why = why, .whylen = whylen };
        why[0] = 0;
        int r = cmp_entry(&c, a, b, true);
        free(c.map);
        return r;
}
