/* Template building: copy a directory, extract a tar or run debootstrap into a temporary
 * directory next to the final place, shift ownership into the sandbox id range, then
 * rename into place. Building is rare and slow by nature (debootstrap), so subprocesses
 * (tar, debootstrap) are fine here; the debootstrap result is cached as a tarball. */
#include "runtime/template.h"

#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include "common/fdio.h"
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"

#define PATH_BUF 4096
#define XATTR_LIST_MAX_LEN (64u << 10)
#define XATTR_VALUE_MAX_LEN (64u << 10)
#define LINE_MAX_LEN 1024

bool template_name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > TEMPLATE_MAX_NAME)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
                        return false;
        }
        return true;
}

int template_rootfs_path(const char *data_dir, const char *name, char **ret) {
        if (!data_dir || !*data_dir || !template_name_valid(name))
                return -EINVAL;
        char *p;
        if (asprintf(&p, "%s/templates/%s/rootfs", data_dir, name) < 0)
                return -ENOMEM;
        if (strlen(p) >= PATH_BUF) {
                free(p);
                return -ENAMETOOLONG;
        }
        *ret = p;
        return 0;
}

bool template_exists(const char *data_dir, const char *name) {
        _cleanup_free_ char *p = NULL;
        struct stat st;
        return template_rootfs_path(data_dir, name, &p) == 0 && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

unsigned template_shift_id(unsigned id) {
        if (id < RT_ID_COUNT)
                return id + RT_ID_BASE;
        if (id >= RT_ID_BASE && id - RT_ID_BASE < RT_ID_COUNT)
                return id;
        return RT_ID_BASE + 65534u;
}

/* ---------------- inode set: hardlinks copied once, shifted once ---------------- */

struct inode_ent {
        dev_t dev;
        ino_t ino;
        char *path; /* destination path of the first copy (copy mode) */
};

struct inode_set {
        struct inode_ent *v;
        size_t n, cap; /* cap is a power of two; open addressing */
};

static size_t inode_hash(dev_t d, ino_t i) {
        uint64_t h = ((uint64_t)d * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xc2b2ae3d27d4eb4full);
        return (size_t)(h ^ (h >> 29));
}

static struct inode_ent *inode_find(struct inode_set *s, dev_t d, ino_t i) {
        if (!s->cap)
                return NULL;
        for (size_t k = inode_hash(d, i) & (s->cap - 1);; k = (k + 1) & (s->cap - 1)) {
                struct inode_ent *e = &s->v[k];
                if (!e->path)
                        return NULL;
                if (e->dev == d && e->ino == i)
                        return e;
        }
}

static int inode_add(struct inode_set *s, dev_t d, ino_t i, const char *path) {
        if ((s->n + 1) * 2 > s->cap) {
                size_t ncap = s->cap ? s->cap * 2 : 256;
                struct inode_ent *nv = calloc(ncap, sizeof *nv);
                if (!nv)
                        return -ENOMEM;
                for (size_t k = 0; k < s->cap; k++) {
                        struct inode_ent *e = &s->v[k];
                        if (!e->path)
                                continue;
                        size_t j = inode_hash(e->dev, e->ino) & (ncap - 1);
                        while (nv[j].path)
                                j = (j + 1) & (ncap - 1);
                        nv[j] = *e;
                }
                free(s->v);
                s->v = nv;
                s->cap = ncap;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        size_t k = inode_hash(d, i) & (s->cap - 1);
        while (s->v[k].path)
                k = (k + 1) & (s->cap - 1);
        s->v[k] = (struct inode_ent){ .dev = d, .ino = i, .path = p };
        s->n++;
        return 0;
}

static void inode_set_free(struct inode_set *s) {
        for (size_t k = 0; k < s->cap; k++)
                free(s->v[k].path);
        free(s->v);
        *s = (struct inode_set){ 0 };
}

/* ---------------- metadata: ownership, mode, xattrs, times ---------------- */

#define ACL_EA_VERSION 2
#define ACL_TAG_USER 0x02
#define ACL_TAG_GROUP 0x08

/* POSIX ACLs carry uids/gids of their own; they move with the owners. */
static void shift_acl(char *v, size_t n) {
        if (n < 4 || n % 8 != 4)
                return;
        uint32_t ver;
        memcpy(&ver, v, 4);
        if (ver != ACL_EA_VERSION)
                return;
        for (size_t off = 4; off + 8 <= n; off += 8) {
                uint16_t tag;
                uint32_t id;
                memcpy(&tag, v + off, 2);
                if (tag != ACL_TAG_USER && tag != ACL_TAG_GROUP)
                        continue;
                memcpy(&id, v + off + 4, 4);
                id = template_shift_id(id);
                memcpy(v + off + 4, &id, 4);
        }
}

static bool is_acl(const char *name) {
        return !strcmp(name, "system.posix_acl_access") || !strcmp(name, "system.posix_acl_default");
}

/* File capabilities are not carried over: a v2 capability written by host root would be
 * honoured on the host for a file a sandbox owns, and no_new_privs ignores them inside.
 * overlay's private attributes would confuse the overlay stacked on the template. */
static bool xattr_skipped(const char *name) {
        return !strcmp(name, "security.capability") || !strncmp(name, "trusted.overlay.", 16);
}

/* Copies (src != NULL) or rewrites in place (src == NULL, only ACLs change) the xattrs. */
static int fix_xattrs(const char *src, const char *dst) {
        const char *from = src ? src : dst;
        ssize_t ln = llistxattr(from, NULL, 0);
        if (ln < 0)
                return errno == ENOTSUP ? 0 : -errno;
        if (ln == 0)
                return 0;
        if ((size_t)ln > XATTR_LIST_MAX_LEN)
                return -E2BIG;
        _cleanup_free_ char *names = malloc((size_t)ln);
        _cleanup_free_ char *val = malloc(XATTR_VALUE_MAX_LEN);
        if (!names || !val)
                return -ENOMEM;
        ln = llistxattr(from, names, (size_t)ln);
        if (ln < 0)
                return -errno;
        for (char *nm = names; nm < names + ln; nm += strlen(nm) + 1) {
                if (xattr_skipped(nm)) {
                        if (!src && lremovexattr(dst, nm) < 0 && errno != ENODATA)
                                return -errno;
                        continue;
                }
                if (!src && !is_acl(nm))
                        continue;
                ssize_t vn = lgetxattr(from, nm, val, XATTR_VALUE_MAX_LEN);
                if (vn < 0) {
                        if (errno == ENODATA)
                                continue;
                        return errno == ERANGE ? -E2BIG : -errno;
                }
                if (is_acl(nm))
                        shift_acl(val, (size_t)vn);
                if (lsetxattr(dst, nm, val, (size_t)vn, 0) < 0 && errno != ENOTSUP && errno != EOPNOTSUPP)
                        return -errno;
        }
        return 0;
}

/* chown first: it clears setuid/setgid bits, which chmod then restores. */
static int fix_owner_mode(const char *path, const struct stat *st) {
        if (lchown(path, template_shift_id(st->st_uid), template_shift_id(st->st_gid)) < 0)
                return -errno;
        if (!S_ISLNK(st->st_mode) && chmod(path, st->st_mode & 07777) < 0)
                return -errno;
        return 0;
}

static int set_times(const char *path, const struct stat *st) {
        struct timespec ts[2] = { st->st_atim, st->st_mtim };
        if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        return 0;
}

/* Device nodes are useless in a template (the overlay is mounted nodev and /dev is a
 * tmpfs) and dangerous on the host, so they are dropped; char 0:0 is an overlay
 * whiteout and kept. */
static bool dropped_device(const struct stat *st) {
        if (S_ISBLK(st->st_mode))
                return true;
        return S_ISCHR(st->st_mode) && st->st_rdev != makedev(0, 0);
}

/* ---------------- copy a tree ---------------- */

struct walk {
        struct inode_set links;
        size_t entries;
};

static int copy_file_data(const char *src, const char *dst, mode_t mode) {
        _cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (in < 0)
                return -errno;
        _cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        bool plain = false;
        for (;;) {
                if (!plain) {
                        ssize_t n = copy_file_range(in, NULL, out, NULL, 1u << 30, 0);
                        if (n > 0)
                                continue;
                        if (n == 0)
                                return 0;
                        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
                                return -errno;
                        plain = true;
                }
                char buf[65536];
                ssize_t n = fdio_read(in, buf, sizeof buf);
                if (n <= 0)
                        return (int)n;
                int w = fdio_write_all(out, buf, (size_t)n);
                if (w < 0)
                        return w;
        }
}

static int join(char *buf, size_t n, const char *a, const char *b) {
        return snprintf(buf, n, "%s/%s", a, b) >= (int)n ? -ENAMETOOLONG : 0;
}

static int copy_entry(struct walk *w, const char *src, const char *dst, const struct stat *st, unsigned depth);

static int copy_dir(struct walk *w, const char *src, const char *dst, unsigned depth) {
        if (depth > TEMPLATE_MAX_DEPTH)
                return -ELOOP;
        _cleanup_closedir_ DIR *d = opendir(src);
        if (!d)
                return -errno;
        struct dirent *de;
        char s[PATH_BUF], t[PATH_BUF];
        while ((errno = 0, de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                int r;
                if ((r = join(s, sizeof s, src, de->d_name)) < 0 || (r = join(t, sizeof t, dst, de->d_name)) < 0)
                        return r;
                struct stat st;
                if (lstat(s, &st) < 0)
                        return -errno;
                r = copy_entry(w, s, t, &st, depth + 1);
                if (r < 0)
                        return r;
        }
        return errno ? -errno : 0;
}

static int copy_entry(struct walk *w, const char *src, const char *dst, const struct stat *st, unsigned depth) {
        if (++w->entries > TEMPLATE_MAX_ENTRIES)
                return -E2BIG;
        int r;
        if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
                struct inode_ent *e = inode_find(&w->links, st->st_dev, st->st_ino);
                if (e)
                        return link(e->path, dst) < 0 ? -errno : 0;
        }
        switch (st->st_mode & S_IFMT) {
        case S_IFDIR:
                if (mkdir(dst, 0700) < 0)
                        return -errno;
                r = copy_dir(w, src, dst, depth);
                break;
        case S_IFREG:
                r = copy_file_data(src, dst, st->st_mode);
                break;
        case S_IFLNK: {
                char target[PATH_BUF];
                ssize_t n = readlink(src, target, sizeof target);
                if (n < 0)
                        return -errno;
                if ((size_t)n >= sizeof target)
                        return -ENAMETOOLONG;
                target[n] = 0;
                r = symlink(target, dst) < 0 ? -errno : 0;
                break;
        }
        case S_IFCHR:
        case S_IFBLK:
        case S_IFIFO:
                if (dropped_device(st))
                        return 0;
                r = mknod(dst, st->st_mode, st->st_rdev) < 0 ? -errno : 0;
                break;
        default: /* sockets belong to a running system, not to a template */
                return 0;
        }
        if (r < 0)
                return r;
        if ((r = fix_owner_mode(dst, st)) < 0 || (r = fix_xattrs(src, dst)) < 0 || (r = set_times(dst, st)) < 0)
                return r;
        if (!S_ISDIR(st->st_mode) && st->st_nlink > 1)
                return inode_add(&w->links, st->st_dev, st->st_ino, dst);
        return 0;
}

int template_copy_tree(const char *src, const char *dst) {
        struct stat st;
        if (lstat(src, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
        struct walk w = { 0 };
        int r = copy_entry(&w, src, dst, &st, 0);
        inode_set_free(&w.links);
        return r;
}

/* ---------------- shift a tree in place ---------------- */

static int shift_entry(struct walk *w, const char *path, const struct stat *st, unsigned depth) {
        if (++w->entries > TEMPLATE_MAX_ENTRIES)
                return -E2BIG;
        if (depth > TEMPLATE_MAX_DEPTH)
                return -ELOOP;
        if (dropped_device(st))
                return unlink(path) < 0 ? -errno : 0;
        if (S_ISSOCK(st->st_mode))
                return unlink(path) < 0 ? -errno : 0;
        if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
                if (inode_find(&w->links, st->st_dev, st->st_ino))
                        return 0; /* another name of an inode already shifted */
                int r = inode_add(&w->links, st->st_dev, st->st_ino, path);
                if (r < 0)
                        return r;
        }
        int r;
        if ((r = fix_owner_mode(path, st)) < 0 || (r = fix_xattrs(NULL, path)) < 0)
                return r;
        if (!S_ISDIR(st->st_mode))
                return 0;
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return -errno;
        struct dirent *de;
        char p[PATH_BUF];
        while ((errno = 0, de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if ((r = join(p, sizeof p, path, de->d_name)) < 0)
                        return r;
                struct stat cst;
                if (lstat(p, &cst) < 0)
                        return -errno;
                if (cst.st_dev != st->st_dev)
                        return -EXDEV; /* never walk into a mount */
                r = shift_entry(w, p, &cst, depth + 1);
                if (r < 0)
                        return r;
        }
        return errno ? -errno : 0;
}

int template_shift_tree(const char *dir) {
        struct stat st;
        if (lstat(dir, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
        struct walk w = { 0 };
        int r = shift_entry(&w, dir, &st, 0);
        inode_set_free(&w.links);
        return r;
}

/* ---------------- subprocesses ---------------- */

extern char **environ;

/* Runs argv, feeding each output line (stdout and stderr) to cb; the last line goes into
 * the error message when the command fails. */
static int run_cmd(char *const argv[], template_progress_fn cb, void *ud) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        posix_spawn_file_actions_adddup2(&fa, p[1], 2);
        char *envp[8];
        size_t ne = 0;
        envp[ne++] = (char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        envp[ne++] = (char *)"LANG=C.UTF-8";
        envp[ne++] = (char *)"DEBIAN_FRONTEND=noninteractive";
        static const char *const pass[] = { "http_proxy", "https_proxy", "no_proxy", "TMPDIR" };
        for (size_t i = 0; i < ELEMENTSOF(pass); i++)
                for (char **e = environ; e && *e; e++)
                        if (!strncmp(*e, pass[i], strlen(pass[i])) && (*e)[strlen(pass[i])] == '=')
                                envp[ne++] = *e;
        envp[ne] = NULL;
        pid_t pid;
        int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        if (r != 0) {
                close(p[0]);
                runtime_set_error("template: cannot run %s: %s", argv[0], strerror(r));
                return -r;
        }
        _cleanup_fclose_ FILE *f = fdopen(p[0], "re");
        if (!f) {
                close(p[0]);
                r = -errno;
        }
        char line[LINE_MAX_LEN], last[LINE_MAX_LEN] = "";
        while (f && fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = 0;
                if (!*line)
                        continue;
                snprintf(last, sizeof last, "%s", line);
                if (cb)
                        cb(line, ud);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (r < 0)
                return r;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                runtime_set_error("template: %s failed (%s %d): %s", argv[0],
                                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
                                  last);
                return -EIO;
        }
        return 0;
}

static void progress(template_progress_fn cb, void *ud, const char *fmt, ...) _printf_(3, 4);
static void progress(template_progress_fn cb, void *ud, const char *fmt, ...) {
        if (!cb)
                return;
        char line[LINE_MAX_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        cb(line, ud);
}

static int tar_extract(const char *file, const char *dir, bool zstd, template_progress_fn cb, void *ud) {
        char *argv[16];
        size_t n = 0;
        argv[n++] = (char *)"tar";
        argv[n++] = (char *)"-x";
        if (zstd)
                argv[n++] = (char *)"--zstd";
        argv[n++] = (char *)"--numeric-owner";
        argv[n++] = (char *)"--same-owner";
        argv[n++] = (char *)"--same-permissions";
        argv[n++] = (char *)"--xattrs";
        argv[n++] = (char *)"--xattrs-include=*";
        argv[n++] = (char *)"--acls";
        argv[n++] = (char *)"-f";
        argv[n++] = (char *)file;
        argv[n++] = (char *)"-C";
        argv[n++] = (char *)dir;
        argv[n] = NULL;
        return run_cmd(argv, cb, ud);
}

/* ---------------- debootstrap and its cache ---------------- */

static bool suite_valid(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 32)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
                        return false;
        return s[0] != '-';
}

static bool package_valid(const char *s, size_t n) {
        /* Debian policy: lower case alphanumerics and + - ., at least two, alnum first. */
        if (n < 2 || n > 128 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '+' ||
                      s[i] == '-' || s[i] == '.'))
                        return false;
        return true;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted, de-duplicated, comma-joined package list into out (size TEMPLATE_MAX_PACKAGES_LEN+1). */
static int normalize_packages(const char *packages, char *out, size_t outn) {
        out[0] = 0;
        if (!packages || !*packages)
                return 0;
        if (strlen(packages) > TEMPLATE_MAX_PACKAGES_LEN)
                return -E2BIG;
        char copy[TEMPLATE_MAX_PACKAGES_LEN + 1];
        strcpy(copy, packages);
        char *v[TEMPLATE_MAX_PACKAGES];
        size_t n = 0;
        char *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!package_valid(t, strlen(t)))
                        return -EINVAL;
                if (n == TEMPLATE_MAX_PACKAGES)
                        return -E2BIG;
                v[n++] = t;
        }
        qsort(v, n, sizeof v[0], cmp_str);
        size_t len = 0;
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && !strcmp(v[i], v[i - 1]))
                        continue;
                int w = snprintf(out + len, outn - len, "%s%s", len ? "," : "", v[i]);
                if (w < 0 || (size_t)w >= outn - len)
                        return -E2BIG;
                len += (size_t)w;
        }
        return 0;
}

int template_cache_name(const char *suite, const char *packages, char *buf, size_t n) {
        if (!suite_valid(suite))
                return -EINVAL;
        char pk[TEMPLATE_MAX_PACKAGES_LEN + 1];
        int r = normalize_packages(packages, pk, sizeof pk);
        if (r < 0)
                return r;
        /* FNV-1a over what determines the tree; the variant is part of it so a future
         * non-minbase build does not collide. */
        uint64_t h = 0xcbf29ce484222325ull;
        const char *parts[] = { suite, "\n", "minbase", "\n", pk };
        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                for (const char *s = parts[i]; *s; s++) {
                        h ^= (unsigned char)*s;
                        h *= 0x100000001b3ull;
                }
        if (snprintf(buf, n, "debootstrap-%s-%016" PRIx64 ".tar.zst", suite, h) >= (int)n)
                return -ENOSPC;
        return 0;
}

static const char *cache_dir(void) {
        const char *c = getenv("SPACE_CACHE");
        return c && *c == '/' ? c : TEMPLATE_DEFAULT_CACHE;
}

/* Drops what debootstrap leaves that no sandbox needs (downloaded .debs). */
static void debootstrap_tidy(const char *rootfs) {
        char p[PATH_BUF];
        if (join(p, sizeof p, rootfs, "var/cache/apt/archives") < 0)
                return;
        _cleanup_closedir_ DIR *d = opendir(p);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t l = strlen(de->d_name);
                if (l > 4 && !strcmp(de->d_name + l - 4, ".deb"))
                        unlinkat(dirfd(d), de->d_name, 0);
        }
}

static int build_debootstrap(const struct template_source *src, const char *rootfs, template_progress_fn cb,
                             void *ud) {
        char name[128];
        int r = template_cache_name(src->suite, src->packages, name, sizeof name);
        if (r < 0) {
                runtime_set_error("template: invalid suite or package list");
                return r;
        }
        char cache[PATH_BUF];
        if (snprintf(cache, sizeof cache, "%s/%s", cache_dir(), name) >= (int)sizeof cache)
                return -ENAMETOOLONG;
        if (mkdir(rootfs, 0755) < 0)
                return -errno;
        if (access(cache, R_OK) == 0) {
                progress(cb, ud, "using cached debootstrap %s", cache);
                r = tar_extract(cache, rootfs, true, cb, ud);
                if (r == 0)
                        return 0;
                /* A broken cache entry must not block builds forever. */
                progress(cb, ud, "cache entry unusable (%s), rebuilding", runtime_last_error());
                unlink(cache);
                r = rt_rm_rf(rootfs);
                if (r < 0 || mkdir(rootfs, 0755) < 0)
                        return r < 0 ? r : -errno;
        }

        char pk[TEMPLATE_MAX_PACKAGES_LEN + 1];
        r = normalize_packages(src->packages, pk, sizeof pk);
        if (r < 0)
                return r;
        char include[TEMPLATE_MAX_PACKAGES_LEN + 16];
        snprintf(include, sizeof include, "--include=%s", pk);
        const char *mirror = src->mirror;
        if (!mirror || !*mirror)
                mirror = getenv("SPACE_DEBIAN_MIRROR");
        if (!mirror || !*mirror)
                mirror = TEMPLATE_DEFAULT_MIRROR;
        if (strncmp(mirror, "http://", 7) && strncmp(mirror, "https://", 8) && strncmp(mirror, "file:/", 6)) {
                runtime_set_error("template: mirror must be an http(s):// or file:/ URL");
                return -EINVAL;
        }
        char *argv[8];
        size_t n = 0;
        argv[n++] = (char *)"debootstrap";
        argv[n++] = (char *)"--variant=minbase";
        if (*pk)
                argv[n++] = include;
        argv[n++] = (char *)src->suite;
        argv[n++] = (char *)rootfs;
        argv[n++] = (char *)mirror;
        argv[n] = NULL;
        progress(cb, ud, "running debootstrap --variant=minbase %s %s (%s)", src->suite, mirror,
                 *pk ? pk : "no extra packages");
        r = run_cmd(argv, cb, ud);
        if (r < 0)
                return r;
        debootstrap_tidy(rootfs);

        /* Cache before shifting: the tarball holds the tree as debootstrap made it. */
        r = rt_mkdir_p(cache_dir(), 0755);
        if (r == 0) {
                char tmp[PATH_BUF + 32];
                snprintf(tmp, sizeof tmp, "%s.tmp.%d", cache, (int)getpid());
                char *targv[] = { (char *)"tar", (char *)"-c", (char *)"--zstd", (char *)"--numeric-owner",
                                  (char *)"--xattrs", (char *)"--xattrs-include=*", (char *)"--acls",
                                  (char *)"-f", tmp, (char *)"-C", (char *)rootfs, (char *)".", NULL };
                progress(cb, ud, "caching debootstrap result in %s", cache);
                r = run_cmd(targv, cb, ud);
                if (r == 0 && rename(tmp, cache) < 0)
                        r = -errno;
                if (r < 0)
                        unlink(tmp);
        }
        if (r < 0) /* a cache we cannot write only costs time next build */
                progress(cb, ud, "warning: could not cache debootstrap result: %s", strerror(-r));
        return 0;
}

/* ---------------- the default user ---------------- */

/* Reads the file name in dirfd (not followed, at most TEMPLATE_USER_FILE_MAX bytes) into a
 * NUL-terminated heap buffer, opened for appending in *ret_fd. -ENOENT when absent. */
static int user_file_open(int dirfd, const char *name, char **ret, int *ret_fd) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (st.st_size > TEMPLATE_USER_FILE_MAX)
                return -EFBIG;
        char *b = malloc((size_t)st.st_size + 1);
        if (!b)
                return -ENOMEM;
        ssize_t n = pread(fd, b, (size_t)st.st_size, 0);
        if (n < 0) {
                int r = -errno;
                free(b);
                return r;
        }
        b[n] = '\0';
        *ret = b;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* True when a line of text (name:x:ID:...) has the name, or (id not NULL) field 2 equal
 * to id. */
static bool user_file_has(const char *text, const char *name, const char *id) {
        size_t nl = strlen(name), il = id ? strlen(id) : 0;
        for (const char *p = text; *p;) {
                const char *end = strchrnul(p, '\n');
                if (!strncmp(p, name, nl) && p[nl] == ':')
                        return true;
                const char *c1 = memchr(p, ':', (size_t)(end - p));
                const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
                if (id && c2 && !strncmp(c2 + 1, id, il) && (c2[1 + il] == ':' || c2 + 1 + il == end))
                        return true;
                p = *end ? end + 1 : end;
        }
        return false;
}

/* Appends line to fd, after a newline when text does not end in one. */
static int user_file_append(int fd, const char *text, const char *line) {
        size_t n = strlen(text);
        if (n > 0 && text[n - 1] != '\n' && write(fd, "\n", 1) != 1)
                return -EIO;
        ssize_t w = write(fd, line, strlen(line));
        return w == (ssize_t)strlen(line) ? 0 : w < 0 ? -errno : -EIO;
}

/* Adds line to etc/name unless it names the user (or id, if not NULL) already; an absent
 * file is left absent. */
static int user_file_add(int etcfd, const char *name, const char *id, const char *line) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r = user_file_open(etcfd, name, &text, &fd);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        if (user_file_has(text, TEMPLATE_USER, id))
                return 0;
        return user_file_append(fd, text, line);
}

/* Copies the regular files at the top of etc/skel (dotfiles like .bashrc, .profile) into
 * the new home, owned by the user. Best effort: a tree without skel has an empty home. */
static void user_copy_skel(int etcfd, int homefd, unsigned id) {
        _cleanup_close_ int sfd = openat(etcfd, "skel", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return;
        _cleanup_closedir_ DIR *d = fdopendir(sfd);
        if (!d)
                return;
        sfd = -EBADF; /* the DIR owns it */
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
                    st.st_size > TEMPLATE_USER_FILE_MAX)
                        continue;
                _cleanup_close_ int in = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                _cleanup_close_ int out = in < 0 ? -EBADF
                                                 : openat(homefd, de->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                                          st.st_mode & 0777);
                if (out < 0)
                        continue;
                char buf[16384];
                ssize_t n;
                while ((n = read(in, buf, sizeof buf)) > 0)
                        if (write(out, buf, (size_t)n) != n)
                                break;
                (void)!fchown(out, id, id);
        }
}

int template_add_user(const char *rootfs) {
        _cleanup_close_ int rfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return -errno;
        _cleanup_close_ int etcfd = openat(rfd, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (etcfd < 0)
                return errno == ENOENT ? 0 : -errno;
        _cleanup_free_ char *pw = NULL;
        _cleanup_close_ int pwfd = -EBADF;
        int r = user_file_open(etcfd, "passwd", &pw, &pwfd);
        if (r == -ENOENT)
                return 0; /* no /etc/passwd: not a tree users live in */
        if (r < 0)
                return r;
        char id[16];
        snprintf(id, sizeof id, "%u", TEMPLATE_USER_UID);
        if (user_file_has(pw, TEMPLATE_USER, id))
                return 0; /* the tree has its own uid 1000 (or "user") */
        struct stat st;
        const char *shell = fstatat(rfd, "bin/bash", &st, 0) == 0 || fstatat(rfd, "usr/bin/bash", &st, 0) == 0
                                    ? "/bin/bash"
                                    : "/bin/sh";
        char line[256];
        snprintf(line, sizeof line, "%s:x:%u:%u::%s:%s\n", TEMPLATE_USER, TEMPLATE_USER_UID, TEMPLATE_USER_UID,
                 TEMPLATE_USER_HOME, shell);
        if ((r = user_file_append(pwfd, pw, line)) < 0)
                return r;
        snprintf(line, sizeof line, "%s:x:%u:\n", TEMPLATE_USER, TEMPLATE_USER_UID);
        if ((r = user_file_add(etcfd, "group", id, line)) < 0)
                return r;
        /* A locked password ("!"): the user exists to run commands as, not to log in. */
        snprintf(line, sizeof line, "%s:!:%lld:0:99999:7:::\n", TEMPLATE_USER, (long long)(time(NULL) / 86400));
        if ((r = user_file_add(etcfd, "shadow", NULL, line)) < 0)
                return r;
        snprintf(line, sizeof line, "%s:!::\n", TEMPLATE_USER);
        if ((r = user_file_add(etcfd, "gshadow", NULL, line)) < 0)
                return r;

        /* The stored tree is shifted: the user's files belong to RT_ID_BASE + 1000. */
        unsigned sid = template_shift_id(TEMPLATE_USER_UID);
        if (mkdirat(rfd, "home", 0755) == 0) {
                if (fchownat(rfd, "home", RT_ID_BASE, RT_ID_BASE, AT_SYMLINK_NOFOLLOW) < 0)
                        return -errno;
        } else if (errno != EEXIST)
                return -errno;
        _cleanup_close_ int hfd = openat(rfd, "home", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (hfd < 0)
                return -errno;
        if (mkdirat(hfd, "user", 0755) < 0 && errno != EEXIST)
                return -errno;
        _cleanup_close_ int ufd = openat(hfd, "user", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ufd < 0)
                return -errno;
        if (fchown(ufd, sid, sid) < 0 || fchmod(ufd, 0755) < 0)
                return -errno;
        user_copy_skel(etcfd, ufd, sid);
        return 0;
}

/* ---------------- build, list, remove ---------------- */

/* Mount points the sandbox needs, made here so they never land in a session's upper
 * layer (and so never in its snapshots). */
static int add_mount_points(const char *rootfs) {
        static const struct {
                const char *name;
                mode_t mode;
        } dirs[] = { { "proc", 0555 }, { "sys", 0555 }, { "dev", 0755 }, { "tmp", 01777 } };
        char p[PATH_BUF];
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                if (join(p, sizeof p, rootfs, dirs[i].name) < 0)
                        return -ENAMETOOLONG;
                if (mkdir(p, dirs[i].mode) < 0) {
                        if (errno == EEXIST)
                                continue;
                        return -errno;
                }
                if (chown(p, RT_ID_BASE, RT_ID_BASE) < 0 || chmod(p, dirs[i].mode) < 0)
                        return -errno;
        }
        return 0;
}

/* debootstrap leaves no /etc/hosts, so "localhost" would not resolve inside a sandbox
 * (its network is loopback only). Added when the tree has an /etc and no hosts file. */
static int add_etc_hosts(const char *rootfs) {
        static const char hosts[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
        char p[PATH_BUF];
        struct stat st;
        if (join(p, sizeof p, rootfs, "etc") < 0)
                return -ENAMETOOLONG;
        if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
                return 0;
        if (join(p, sizeof p, rootfs, "etc/hosts") < 0)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return errno == EEXIST ? 0 : -errno;
        if (write(fd, hosts, sizeof hosts - 1) != (ssize_t)(sizeof hosts - 1))
                return -EIO;
        if (fchown(fd, RT_ID_BASE, RT_ID_BASE) < 0)
                return -errno;
        return 0;
}

static int write_info(const char *dir, const struct template_source *src) {
        char p[PATH_BUF];
        if (join(p, sizeof p, dir, "info") < 0)
                return -ENAMETOOLONG;
        _cleanup_fclose_ FILE *f = fopen(p, "wxe");
        if (!f)
                return -errno;
        static const char *const kinds[] = { "dir", "tar", "debootstrap" };
        fprintf(f, "source=%s\n", kinds[src->kind]);
        if (src->path)
                fprintf(f, "path=%s\n", src->path);
        if (src->suite)
                fprintf(f, "suite=%s\n", src->suite);
        if (src->packages)
                fprintf(f, "packages=%s\n", src->packages);
        fprintf(f, "created=%lld\n", (long long)time(NULL));
        return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

int template_build(const char *data_dir, const char *name, const struct template_source *src,
                   template_progress_fn cb, void *userdata) {
        runtime_set_error("%s", "");
        if (!template_name_valid(name)) {
                runtime_set_error("template: invalid name (want [a-z0-9][a-z0-9._-]{0,63})");
                return -EINVAL;
        }
        if (!data_dir || data_dir[0] != '/' || !src || (unsigned)src->kind > TEMPLATE_FROM_DEBOOTSTRAP ||
            (src->kind != TEMPLATE_FROM_DEBOOTSTRAP && (!src->path || !*src->path))) {
                runtime_set_error("template: invalid data dir or source");
                return -EINVAL;
        }
        char tdir[PATH_BUF], final[PATH_BUF], tmp[PATH_BUF], rootfs[PATH_BUF];
        if (snprintf(tdir, sizeof tdir, "%s/templates", data_dir) >= (int)sizeof tdir ||
            snprintf(final, sizeof final, "%s/%s", tdir, name) >= (int)sizeof final ||
            snprintf(tmp, sizeof tmp, "%s/.build-%s-XXXXXX", tdir, name) >= (int)sizeof tmp)
                return -ENAMETOOLONG;
        int r = rt_mkdir_p(tdir, 0755);
        if (r < 0) {
                runtime_set_error("template: cannot create %s: %s", tdir, strerror(-r));
                return r;
        }
        if (access(final, F_OK) == 0) {
                runtime_set_error("template: %s exists", name);
                return -EEXIST;
        }
        if (!mkdtemp(tmp))
                return -errno;
        /* The parent of rootfs must be traversable by the sandbox uid (overlay lower). */
        if (chmod(tmp, 0755) < 0) {
                r = -errno;
                goto fail;
        }
        if (join(rootfs, sizeof rootfs, tmp, "rootfs") < 0) {
                r = -ENAMETOOLONG;
                goto fail;
        }

        switch (src->kind) {
        case TEMPLATE_FROM_DIR:
                progress(cb, userdata, "copying %s", src->path);
                r = template_copy_tree(src->path, rootfs);
                if (r < 0)
                        runtime_set_error("template: copy of %s failed: %s", src->path, strerror(-r));
                break;
        case TEMPLATE_FROM_TAR:
                if (mkdir(rootfs, 0755) < 0) {
                        r = -errno;
                        break;
                }
                progress(cb, userdata, "extracting %s", src->path);
                r = tar_extract(src->path, rootfs, false, cb, userdata);
                break;
        case TEMPLATE_FROM_DEBOOTSTRAP:
                r = build_debootstrap(src, rootfs, cb, userdata);
                break;
        }
        /* A copied tree keeps its shifted owners; an unpacked one is shifted here. */
        if (r == 0 && src->kind != TEMPLATE_FROM_DIR) {
                progress(cb, userdata, "shifting ownership by %u", RT_ID_BASE);
                r = template_shift_tree(rootfs);
                if (r < 0)
                        runtime_set_error("template: shifting ownership failed: %s", strerror(-r));
        }
        /* After extraction and the shift, so a tree from an older debootstrap cache gets
         * the user too. */
        if (r == 0 && src->kind == TEMPLATE_FROM_DEBOOTSTRAP) {
                progress(cb, userdata, "adding the user %s (uid %u, %s)", TEMPLATE_USER, TEMPLATE_USER_UID,
                         TEMPLATE_USER_HOME);
                r = template_add_user(rootfs);
                if (r < 0)
                        runtime_set_error("template: adding the user %s failed: %s", TEMPLATE_USER, strerror(-r));
        }
        if (r < 0)
                goto fail;
        if ((r = add_mount_points(rootfs)) < 0 || (r = add_etc_hosts(rootfs)) < 0 ||
            (r = write_info(tmp, src)) < 0) {
                runtime_set_error("template: finishing %s failed: %s", name, strerror(-r));
                goto fail;
        }
        /* Durable before visible: after a crash a template is either whole or absent. */
        {
                _cleanup_close_ int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0)
                        syncfs(fd);
        }
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE) < 0) {
                r = -errno;
                runtime_set_error("template: cannot move %s into place: %s", name, strerror(-r));
                goto fail;
        }
        progress(cb, userdata, "template %s ready", name);
        return 0;
fail:
        if (!*runtime_last_error())
                runtime_set_error("template: build of %s failed: %s", name, strerror(-r));
        rt_rm_rf(tmp);
        return r;
}

void template_list_free(char **list) {
        if (!list)
                return;
        for (char **p = list; *p; p++)
                free(*p);
        free(list);
}

int template_list(const char *data_dir, char ***ret) {
        if (!data_dir || !*data_dir)
                return -EINVAL;
        char tdir[PATH_BUF];
        if (snprintf(tdir, sizeof tdir, "%s/templates", data_dir) >= (int)sizeof tdir)
                return -ENAMETOOLONG;
        size_t n = 0, cap = 16;
        char **v = calloc(cap + 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        _cleanup_closedir_ DIR *d = opendir(tdir);
        if (!d && errno != ENOENT) {
                int r = -errno;
                free(v);
                return r;
        }
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (!template_name_valid(de->d_name) || !template_exists(data_dir, de->d_name))
                        continue;
                if (n == TEMPLATE_MAX_COUNT)
                        break;
                if (n == cap) {
                        char **nv = realloc(v, (cap * 2 + 1) * sizeof *v);
                        if (!nv) {
                                template_list_free(v);
                                return -ENOMEM;
                        }
                        v = nv;
                        cap *= 2;
                }
                if (!(v[n] = strdup(de->d_name))) {
                        template_list_free(v);
                        return -ENOMEM;
                }
                v[++n] = NULL;
        }
        qsort(v, n, sizeof *v, cmp_str);
        *ret = v;
        return 0;
}

static int runtime_file(const char *data_dir, const char *name, char *buf, size_t size) {
        if (!data_dir || !*data_dir || !template_name_valid(name))
                return -EINVAL;
        if (snprintf(buf, size, "%s/templates/%s/runtime", data_dir, name) >= (int)size)
                return -ENAMETOOLONG;
        return 0;
}

int template_runtime_get(const char *data_dir, const char *name, char *buf, size_t size) {
        char path[PATH_BUF], v[64];
        int r = runtime_file(data_dir, name, path, sizeof path);
        if (r < 0)
                return r;
        int n = rt_read_file(path, v, sizeof v);
        if (n < 0)
                return n;
        v[strcspn(v, "\n")] = '\0';
        if (!*v)
                return -ENOENT;
        if (strlen(v) >= size)
                return -ENAMETOOLONG;
        memcpy(buf, v, strlen(v) + 1);
        return 0;
}

int template_runtime_set(const char *data_dir, const char *name, const char *runtime) {
        char path[PATH_BUF], tmp[PATH_BUF + 8], line[64];
        int r = runtime_file(data_dir, name, path, sizeof path);
        if (r < 0)
                return r;
        if (!runtime || !*runtime)
                return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
        if (strlen(runtime) >= sizeof line - 1 || strchr(runtime, '\n'))
                return -EINVAL;
        snprintf(line, sizeof line, "%s\n", runtime);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        size_t len = strlen(line);
        if (write(fd, line, len) != (ssize_t)len) {
                r = errno ? -errno : -EIO;
                (void)unlink(tmp);
                return r;
        }
        if (rename(tmp, path) < 0) {
                r = -errno;
                (void)unlink(tmp);
                return r;
        }
        return 0;
}

int template_remove(const char *data_dir, const char *name) {
        if (!data_dir || !*data_dir || !template_name_valid(name))
                return -EINVAL;
        char final[PATH_BUF], tmp[PATH_BUF];
        if (snprintf(final, sizeof final, "%s/templates/%s", data_dir, name) >= (int)sizeof final ||
            snprintf(tmp, sizeof tmp, "%s/templates/.rm-%s-XXXXXX", data_dir, name) >= (int)sizeof tmp)
                return -ENAMETOOLONG;
        /* Renamed away first so the name disappears at once and a new build may reuse it. */
        if (!mkdtemp(tmp))
                return -errno;
        if (renameat2(AT_FDCWD, final, AT_FDCWD, tmp, RENAME_EXCHANGE) < 0) {
                int r = -errno;
                rmdir(tmp);
                return r;
        }
        rmdir(final); /* the empty directory mkdtemp made, now under the old name */
        return rt_rm_rf(tmp);
}

int template_ensure_base(const char *data_dir, template_progress_fn cb, void *userdata) {
        if (template_exists(data_dir, TEMPLATE_BASE))
                return 0;
        struct template_source src = {
                .kind = TEMPLATE_FROM_DEBOOTSTRAP,
                .suite = TEMPLATE_BASE_SUITE,
                .packages = TEMPLATE_BASE_PACKAGES,
        };
        int r = template_build(data_dir, TEMPLATE_BASE, &src, cb, userdata);
        if (r == -EEXIST) /* built meanwhile by someone else */
                return 0;
        return r;
}
