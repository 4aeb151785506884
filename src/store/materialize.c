/* Materialize: recreates a snapshot in an empty directory from its root tree alone. The
 * walk makes the directories and the rare entry types relative to directory fds it made
 * itself; regular files are created, filled and given their metadata by the pool, with
 * openat2(RESOLVE_BENEATH) from the target (names are validated by the decoder: no "/",
 * ".", ".."), so nothing can land outside the target. Creating files is what costs most
 * (the file system's inode allocation), so both cores do it. Directories get their
 * metadata last, once everything inside them exists. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>

#include "common/fdio.h"
#include "store/store-internal.h"

/* Trees are shared by the walk and the file tasks that point into them. */
struct tree_ref {
        struct tree t;
        atomic_int refs;
};

static void tref_put(struct tree_ref *r) {
        if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
                tree_free(&r->t);
                free(r);
        }
}

struct link_ent {
        uint64_t id;
        char *path;
};

/* A directory whose metadata is set once everything inside it exists. */
struct dir_ent {
        struct tree_ref *tr;
        const struct t_entry *e;
        char *path;
        bool strip_opaque;  /* delta: merges with an opaque base directory, which hides enough */
};

struct mat {
        struct store *s;
        const struct store_materialize_opts *o;
        int rootfd;
        atomic_size_t pending;
        atomic_int err;
        pthread_mutex_t mu;
        char errmsg[1024];
        atomic_uint_least64_t bytes_read, bytes_written, files;
        uint64_t entries;
        struct link_ent *links;
        size_t links_n, links_cap;
        struct scache_builder sc;  /* under mu */
        int64_t max_ctime_ns;      /* under mu */
        int64_t last_progress;
        uint64_t op;
        struct dir_ent *dirs;
        size_t dirs_n, dirs_cap;
        uid_t uid;
        gid_t gid;
        mode_t umask;
        bool root_setgid;          /* files made directly in the target may inherit its group */
        bool delta;                /* only what differs from o->base, as an overlayfs upper layer */
        struct store_hash stack[STORE_MAX_DEPTH + 2];
};

static void mat_fail(struct mat *m, int r) {
        int zero = 0;
        pthread_mutex_lock(&m->mu);
        if (atomic_compare_exchange_strong(&m->err, &zero, r))
                snprintf(m->errmsg, sizeof m->errmsg, "%s", store_error_detail());
        pthread_mutex_unlock(&m->mu);
}

static void progress(struct mat *m, bool force) {
        if (!m->o || !m->o->progress)
                return;
        int64_t now = store_now_ns();
        if (!force && now - m->last_progress < 100000000)
                return;
        m->last_progress = now;
        struct store_progress p = { .phase = "write", .entries = m->entries, .bytes = atomic_load(&m->bytes_written) };
        m->o->progress(m->o->userdata, &p);
}

static void record_stat(struct mat *m, const char *path, const struct stat *st) {
        if (m->o && m->o->no_stat_cache)
                return;
        struct scache_rec r = { .ino = (uint64_t)st->st_ino, .ctime_sec = st->st_ctim.tv_sec,
                                .ctime_nsec = (uint32_t)st->st_ctim.tv_nsec, .mtime_sec = st->st_mtim.tv_sec,
                                .mtime_nsec = (uint32_t)st->st_mtim.tv_nsec, .size = (uint64_t)st->st_size };
        int64_t c = st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
        pthread_mutex_lock(&m->mu);
        (void)scache_add(&m->sc, path, &r);
        if (c > m->max_ctime_ns)
                m->max_ctime_ns = c;
        pthread_mutex_unlock(&m->mu);
}

static int set_xattrs(int fd, const char *path, const struct t_entry *e, const char *shown) {
        for (uint32_t i = 0; i < e->nxattr; i++) {
                const struct t_xattr *x = &e->xattrs[i];
                int k = fd >= 0 ? fsetxattr(fd, x->name, x->value, x->vlen, 0) : lsetxattr(path, x->name, x->value, x->vlen, 0);
                if (k < 0)
                        return store_fail(-errno, "%s: cannot set xattr %s: %m", shown, x->name);
        }
        return 0;
}

static struct timespec mtime_of(const struct t_entry *e) {
        return (struct timespec){ .tv_sec = e->mtime_sec, .tv_nsec = e->mtime_nsec };
}

/* Owner, mode, xattrs, times: in this order, since chown clears set-id bits and file
 * capabilities and every change moves ctime. */
static int set_meta_fd(struct mat *m, int fd, const struct t_entry *e, const char *shown) {
        if (!(m->o && m->o->no_owner) && fchown(fd, e->uid, e->gid) < 0)
                return store_fail(-errno, "%s: cannot set the owner: %m", shown);
        if (fchmod(fd, e->mode) < 0)
                return store_fail(-errno, "%s: cannot set the mode: %m", shown);
        int r = set_xattrs(fd, NULL, e, shown);
        if (r < 0)
                return r;
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, mtime_of(e) };
        if (futimens(fd, ts) < 0)
                return store_fail(-errno, "%s: cannot set the mtime: %m", shown);
        return 0;
}

/* ---- file data ---- */

struct file_task {
        struct pool_task task;
        struct mat *m;
        struct tree_ref *tr;
        const struct t_entry *e;
        int fd;        /* -1: the task creates the file */
        bool record;
        bool top;      /* directly in the target directory */
        char path[];
};

static int create_beneath(struct mat *m, const char *path, mode_t mode) {
        struct open_how how = { .flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                .mode = mode,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        int fd = (int)syscall(SYS_openat2, m->rootfd, path, &how, sizeof how);
        if (fd < 0)
                return store_fail(-errno, "%s: cannot create: %m", path);
        return fd;
}

static int write_file(struct mat *m, struct file_task *t) {
        const struct t_entry *e = t->e;
        /* Made with its final permission bits where the umask allows: one fchmod less. */
        mode_t made = 0600;
        bool owner_ok = false;
        if (t->fd < 0) {
                made = (e->mode & 0777) & ~m->umask;
                int fd = create_beneath(m, t->path, made);
                if (fd < 0)
                        return fd;
                t->fd = fd;
                owner_ok = e->uid == m->uid && e->gid == m->gid && !(t->top && m->root_setgid);
        }
        /* Dense files grow with their writes; only a trailing hole needs the size set. */
        uint64_t end = e->nchunks ? e->chunks[e->nchunks - 1].off + e->chunks[e->nchunks - 1].len : 0;
        if (end != e->size && ftruncate(t->fd, (off_t)e->size) < 0)
                return store_fail(-errno, "%s: cannot size the file: %m", t->path);
        for (uint32_t i = 0; i < e->nchunks && !atomic_load(&m->err); i++) {
                const struct t_chunk *c = &e->chunks[i];
                _cleanup_free_ void *data = NULL;
                size_t len;
                uint64_t br = 0;
                int r = obj_read_op(m->s, &c->hash, OBJ_CHUNK, m->op, &data, &len, &br);
                atomic_fetch_add(&m->bytes_read, br);
                if (r < 0) {
                        char msg[1100];
                        snprintf(msg, sizeof msg, "%s (file %s)", store_error_detail(), t->path);
                        return store_fail(r, "%s", msg);
                }
                if (len != c->len)
                        return store_fail(-EBADMSG, "%s: chunk %u holds %zu bytes, the tree says %u", t->path, i, len,
                                          c->len);
                size_t done = 0;
                while (done < len) {
                        ssize_t k = pwrite(t->fd, (char *)data + done, len - done, (off_t)(c->off + done));
                        if (k < 0) {
                                if (errno == EINTR)
                                        continue;
                                return store_fail(-errno, "%s: write error: %m", t->path);
                        }
                        done += (size_t)k;
                }
                atomic_fetch_add(&m->bytes_written, len);
        }
        int r;
        if (owner_ok || (m->o && m->o->no_owner)) {
                /* owner right already: the mode too unless the umask took bits or set-id bits are wanted */
                if (made != e->mode && fchmod(t->fd, e->mode) < 0)
                        return store_fail(-errno, "%s: cannot set the mode: %m", t->path);
                if ((r = set_xattrs(t->fd, NULL, e, t->path)) < 0)
                        return r;
                struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, mtime_of(e) };
                if (futimens(t->fd, ts) < 0)
                        return store_fail(-errno, "%s: cannot set the mtime: %m", t->path);
        } else if ((r = set_meta_fd(m, t->fd, e, t->path)) < 0)
                return r;
        struct stat st;
        if (t->record && fstat(t->fd, &st) == 0)
                record_stat(m, t->path, &st);
        return 0;
}

static void file_run(struct pool_task *pt) {
        struct file_task *t = (struct file_task *)pt;
        struct mat *m = t->m;
        if (!atomic_load(&m->err)) {
                int r = write_file(m, t);
                if (r < 0)
                        mat_fail(m, r);
        }
        atomic_fetch_add(&m->files, 1);
        if (t->fd >= 0)
                close(t->fd);
        tref_put(t->tr);
        free(t);
        atomic_fetch_sub(&m->pending, 1);
        pool_notify(m->s->pool);
}

/* ---- the walk ---- */

static const char *link_find(struct mat *m, uint64_t id) {
        for (size_t i = 0; i < m->links_n; i++) /* link groups are few */
                if (m->links[i].id == id)
                        return m->links[i].path;
        return NULL;
}

static int link_add(struct mat *m, uint64_t id, const char *path) {
        if (ARRAY_RESERVE(m->links, m->links_cap, m->links_n + 1, 16) < 0)
                return -ENOMEM;
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        m->links[m->links_n++] = (struct link_ent){ id, p };
        return 0;
}

static int make_link(struct mat *m, const char *first, int dfd, const char *name, const char *shown) {
        struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, m->rootfd, first, &how, sizeof how);
        if (fd < 0)
                return store_fail(-errno, "%s: cannot find %s to link to: %m", shown, first);
        if (linkat(fd, "", dfd, name, AT_EMPTY_PATH) == 0)
                return 0;
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) < 0)
                return store_fail(-errno, "%s: cannot create the hard link: %m", shown);
        return 0;
}

static int mat_dir(struct mat *m, const struct store_hash *tree, int dfd, const char *path, unsigned depth);

/* A directory's metadata is set once its files exist (finish_dirs). */
static int dir_later(struct mat *m, struct tree_ref *tr, const struct t_entry *e, char **path, bool strip_opaque) {
        if (ARRAY_RESERVE(m->dirs, m->dirs_cap, m->dirs_n + 1, 64) < 0)
                return -ENOMEM;
        atomic_fetch_add(&tr->refs, 1);
        m->dirs[m->dirs_n++] = (struct dir_ent){ .tr = tr, .e = e, .path = TAKE_PTR(*path), .strip_opaque = strip_opaque };
        return 0;
}

static int mat_entry(struct mat *m, struct tree_ref *tr, const struct t_entry *e, int dfd, const char *dpath,
                     unsigned depth) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s%s%s", dpath, *dpath ? "/" : "", e->name) < 0)
                return -ENOMEM;
        m->entries++;
        char proc[64 + STORE_MAX_NAME];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d/%s", dfd, e->name);
        switch (e->type) {
        case T_REG: {
                if (e->link && m->delta)
                        return store_fail(-EMLINK, "%s: a hard link differs from the base: the layer can't hold its group",
                                          path);
                if (e->link) {
                        const char *first = link_find(m, e->link);
                        if (first)
                                return make_link(m, first, dfd, e->name, path);
                        int r = link_add(m, e->link, path);
                        if (r < 0)
                                return r;
                }
                /* The first name of a hard-link group is made now: the others link to it. */
                int fd = -1;
                if (e->link) {
                        fd = openat(dfd, e->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                        if (fd < 0)
                                return store_fail(-errno, "%s: cannot create: %m", path);
                }
                size_t pl = strlen(path);
                struct file_task *t = malloc(sizeof *t + pl + 1);
                if (!t) {
                        if (fd >= 0)
                                close(fd);
                        return -ENOMEM;
                }
                *t = (struct file_task){ .task.fn = file_run, .m = m, .tr = tr, .e = e, .fd = fd, .record = !e->link,
                                         .top = !*dpath };
                memcpy(t->path, path, pl + 1);
                atomic_fetch_add(&tr->refs, 1);
                atomic_fetch_add(&m->pending, 1);
                pool_submit(m->s->pool, &t->task, false);
                return 0;
        }
        case T_DIR: {
                if (depth + 1 > STORE_MAX_DEPTH)
                        return store_fail(-ELOOP, "%s: nested deeper than %u directories", path, STORE_MAX_DEPTH);
                if (mkdirat(dfd, e->name, 0700) < 0)
                        return store_fail(-errno, "%s: cannot create the directory: %m", path);
                _cleanup_close_ int cfd = openat(dfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cfd < 0)
                        return store_fail(-errno, "%s: cannot open the directory: %m", path);
                int r = mat_dir(m, &e->tree, cfd, path, depth + 1);
                if (r < 0)
                        return r;
                /* its files may still be in the making: metadata at the end */
                return dir_later(m, tr, e, &path, false);
        }
        case T_LNK:
                if (symlinkat(e->target, dfd, e->name) < 0)
                        return store_fail(-errno, "%s: cannot create the symlink: %m", path);
                break;
        case T_CHR:
        case T_BLK:
        case T_FIFO:
        case T_SOCK: {
                mode_t type = e->type == T_CHR ? S_IFCHR : e->type == T_BLK ? S_IFBLK : e->type == T_FIFO ? S_IFIFO : S_IFSOCK;
                dev_t dev = (e->type == T_CHR || e->type == T_BLK) ? makedev(e->major, e->minor) : 0;
                if (mknodat(dfd, e->name, type | 0600, dev) < 0)
                        return store_fail(-errno, "%s: cannot create the %s: %m", path,
                                          e->type == T_FIFO ? "fifo" : e->type == T_SOCK ? "socket" : "device node");
                break;
        }
        default:
                return store_fail(-EBADMSG, "%s: unknown entry type", path);
        }
        /* Everything but files and directories: metadata by name, never following. */
        if (!(m->o && m->o->no_owner) && fchownat(dfd, e->name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
                return store_fail(-errno, "%s: cannot set the owner: %m", path);
        if (e->type != T_LNK && fchmodat(dfd, e->name, e->mode, AT_SYMLINK_NOFOLLOW) < 0)
                return store_fail(-errno, "%s: cannot set the mode: %m", path);
        int r = set_xattrs(-1, proc, e, path);
        if (r < 0)
                return r;
        struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, mtime_of(e) };
        if (utimensat(dfd, e->name, ts, AT_SYMLINK_NOFOLLOW) < 0)
                return store_fail(-errno, "%s: cannot set the mtime: %m", path);
        struct stat st;
        if (fstatat(dfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                record_stat(m, path, &st);
        return 0;
}

static int mat_dir(struct mat *m, const struct store_hash *tree, int dfd, const char *path, unsigned depth) {
        for (unsigned i = 0; i < depth; i++)
                if (store_hash_eq(&m->stack[i], tree)) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(tree, hex);
                        return store_fail(-ELOOP, "tree %s refers to itself (at %s)", hex, *path ? path : ".");
                }
        m->stack[depth] = *tree;
        struct tree_ref *tr = calloc(1, sizeof *tr);
        if (!tr)
                return -ENOMEM;
        atomic_init(&tr->refs, 1);
        uint64_t br = 0;
        int r = tree_load_op(m->s, tree, m->op, &tr->t, &br);
        atomic_fetch_add(&m->bytes_read, br);
        if (r < 0) {
                free(tr);
                if (*path) {
                        char msg[1100];
                        snprintf(msg, sizeof msg, "%s (directory %s)", store_error_detail(), path);
                        return store_fail(r, "%s", msg);
                }
                return r;
        }
        for (size_t i = 0; i < tr->t.n && r == 0; i++) {
                r = mat_entry(m, tr, &tr->t.e[i], dfd, path, depth);
                progress(m, false);
                if (atomic_load(&m->err))
                        break;
        }
        tref_put(tr);
        return r;
}

/* The difference of tree ts (the snapshot) from tb (the base) as an overlayfs upper
 * directory in dfd: both walked in name order, equal subtrees skipped unloaded. */
static int mat_delta(struct mat *m, const struct store_hash *ts, const struct store_hash *tb, int dfd,
                     const char *path, unsigned depth) {
        if (store_hash_eq(ts, tb))
                return 0;
        if (depth > STORE_MAX_DEPTH)
                return store_fail(-ELOOP, "%s: trees nested deeper than %u", *path ? path : ".", STORE_MAX_DEPTH);
        struct tree_ref *tr = calloc(1, sizeof *tr);
        if (!tr)
                return -ENOMEM;
        atomic_init(&tr->refs, 1);
        struct tree b = { 0 };
        uint64_t br = 0;
        int r = tree_load_op(m->s, ts, m->op, &tr->t, &br);
        if (r == 0)
                r = tree_load_op(m->s, tb, m->op, &b, &br);
        atomic_fetch_add(&m->bytes_read, br);
        size_t i = 0, j = 0;
        while (r == 0 && (i < tr->t.n || j < b.n) && !atomic_load(&m->err)) {
                int k = i >= tr->t.n ? 1 : j >= b.n ? -1 : strcmp(tr->t.e[i].name, b.e[j].name);
                const struct t_entry *es = k <= 0 ? &tr->t.e[i] : NULL, *eb = k >= 0 ? &b.e[j] : NULL;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s%s%s", path, *path ? "/" : "", (es ? es : eb)->name) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (k <= 0)
                        i++;
                if (k >= 0)
                        j++;
                if (!es) {
                        /* A name of the base that snap lacks shows the template's entry of
                         * that name, if it has one, which a whiteout would hide: the
                         * template is not known here. (A capture over the base never drops
                         * a name: removals are whiteouts, so its descendants get here.) */
                        r = store_fail(-EXDEV, "%s: in the base but not in the snapshot", p);
                        break;
                }
                if (eb && es->type == T_DIR && eb->type == T_DIR && ovl_opaque(es) == ovl_opaque(eb)) {
                        if (tree_entry_same(es, eb) && store_hash_eq(&es->tree, &eb->tree))
                                continue;
                        /* merges with the base's directory: made here, filled with what differs */
                        if (mkdirat(dfd, es->name, 0700) < 0) {
                                r = store_fail(-errno, "%s: cannot create the directory: %m", p);
                                break;
                        }
                        m->entries++;
                        _cleanup_close_ int cfd = openat(dfd, es->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (cfd < 0) {
                                r = store_fail(-errno, "%s: cannot open the directory: %m", p);
                                break;
                        }
                        r = mat_delta(m, &es->tree, &eb->tree, cfd, p, depth + 1);
                        if (r == 0)
                                r = dir_later(m, tr, es, &p, ovl_opaque(es));
                        continue;
                }
                if (eb && es->type != T_DIR && tree_entry_same(es, eb))
                        continue;
                if (eb && ovl_opaque(eb) && !ovl_opaque(es)) {
                        r = store_fail(-EXDEV, "%s: an opaque directory of the base is not opaque any more", p);
                        break;
                }
                if (eb && es->type == T_DIR && !ovl_opaque(es)) {
                        r = store_fail(-EXDEV, "%s: a directory over a non-directory of the base must be opaque", p);
                        break;
                }
                /* new, or replacing the base's entry (a non-directory, or an opaque
                 * directory, which hides the base's): made whole */
                r = mat_entry(m, tr, es, dfd, path, depth);
                progress(m, false);
        }
        tree_free(&b);
        tref_put(tr);
        return r;
}

static int target_prepare(const char *dir, int *ret) {
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return store_fail(-errno, "cannot create %s: %m", dir);
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return store_fail(-errno, errno == ENOTDIR || errno == ELOOP ? "%s is not a directory" : "cannot open %s: %m",
                                  dir);
        DIR *d;
        int r = fdio_opendir(fd, &d);
        if (r < 0) {
                close(fd);
                return r;
        }
        struct dirent *de;
        bool empty = true;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                        empty = false;
                        break;
                }
        closedir(d);
        if (!empty) {
                close(fd);
                return store_fail(-ENOTEMPTY, "%s is not empty: materialize needs an empty or new directory", dir);
        }
        *ret = fd;
        return 0;
}

/* Directory metadata, deepest first (the walk recorded them in post-order), each opened
 * again beneath the target. */
static int finish_dirs(struct mat *m) {
        for (size_t i = 0; i < m->dirs_n; i++) {
                const struct dir_ent *d = &m->dirs[i];
                struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
                _cleanup_close_ int fd = (int)syscall(SYS_openat2, m->rootfd, d->path, &how, sizeof how);
                if (fd < 0)
                        return store_fail(-errno, "%s: cannot open the directory: %m", d->path);
                int r = set_meta_fd(m, fd, d->e, d->path);
                if (r < 0)
                        return r;
                /* an opaque mark here would hide the base's directory: its own mark does */
                if (d->strip_opaque && fremovexattr(fd, OVL_OPAQUE_XATTR) < 0 && errno != ENODATA)
                        return store_fail(-errno, "%s: cannot remove the opaque mark: %m", d->path);
                struct stat st;
                if (fstat(fd, &st) == 0)
                        record_stat(m, d->path, &st);
        }
        return 0;
}

/* The umask, which openat applies to the modes we create files with. */
static mode_t current_umask(void) {
        _cleanup_fclose_ FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        unsigned u = 077; /* unknown: assume the strictest, fchmod fixes it */
        while (f && fgets(line, sizeof line, f))
                if (sscanf(line, "Umask: %o", &u) == 1)
                        break;
        return (mode_t)(u & 0777);
}

int store_materialize(struct store *s, const struct store_hash *snap, const char *dir,
                      const struct store_materialize_opts *o) {
        struct store_materialize_opts def = { 0 };
        if (!o)
                o = &def;
        struct mat m = { .s = s, .o = o, .rootfd = -EBADF, .sc = { .b = BUF_INIT(0) }, .op = store_op_id() };
        pthread_mutex_init(&m.mu, NULL);
        struct txn *pin = NULL;
        struct snap_record rec = { 0 }, brec = { 0 };
        struct store_hash pins[2] = { *snap };
        if (o->base)
                pins[1] = *o->base;
        int r = txn_begin(s, pins, o->base ? 2 : 1, &pin);
        if (r < 0)
                goto out;
        r = snap_load(s, snap, &rec);
        if (r < 0)
                goto out;
        if (o->base) {
                r = snap_load(s, o->base, &brec);
                if (r < 0)
                        goto out;
                if (ovl_opaque(&rec.root) != ovl_opaque(&brec.root)) {
                        r = store_fail(-EXDEV, "the root's opaque mark differs from the base's");
                        goto out;
                }
                m.delta = true;
        }
        r = target_prepare(dir, &m.rootfd);
        if (r < 0)
                goto out;
        struct stat rst;
        if (fstat(m.rootfd, &rst) < 0) {
                r = store_fail(-errno, "%s: %m", dir);
                goto out;
        }
        m.root_setgid = rst.st_mode & S_ISGID;
        m.uid = geteuid();
        m.gid = getegid();
        m.umask = current_umask();
        r = m.delta ? mat_delta(&m, &rec.root.tree, &brec.root.tree, m.rootfd, "", 0)
                    : mat_dir(&m, &rec.root.tree, m.rootfd, "", 0);
        if (r < 0)
                mat_fail(&m, r);
        while (!pool_wait(s->pool, &m.pending, 100))
                progress(&m, false);
        r = atomic_load(&m.err);
        if (r < 0) {
                store_set_detail(m.errmsg);
                goto out;
        }
        r = finish_dirs(&m);
        if (r < 0)
                goto out;
        r = set_meta_fd(&m, m.rootfd, &rec.root, dir);
        if (r < 0)
                goto out;
        struct stat rst2;
        if (fstat(m.rootfd, &rst2) == 0)
                record_stat(&m, "", &rst2); /* the root too: its names are the next capture's to reuse */
        progress(&m, true);
        if (!o->no_stat_cache) {
                struct stat st;
                if (fstat(m.rootfd, &st) == 0) {
                        /* Return only once the clock has passed every ctime we produced, so a
                         * later change can't reuse a timestamp the cache holds. */
                        for (int i = 0; i < 10 && store_now_ns() < m.max_ctime_ns + 20000000LL; i++)
                                nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
                        (void)scache_save(s, snap, (uint64_t)st.st_dev, (uint64_t)st.st_ino, &m.sc);
                }
        }
out:
        pool_wait(s->pool, &m.pending, 0);
        store_op_end(s, m.op);
        if (o->stats) {
                o->stats->entries += m.entries;
                o->stats->files += atomic_load(&m.files);
                o->stats->bytes_read += atomic_load(&m.bytes_read);
                o->stats->bytes_logical += atomic_load(&m.bytes_written);
                o->stats->link_groups += m.links_n;
        }
        for (size_t i = 0; i < m.links_n; i++)
                free(m.links[i].path);
        free(m.links);
        for (size_t i = 0; i < m.dirs_n; i++) {
                free(m.dirs[i].path);
                tref_put(m.dirs[i].tr);
        }
        free(m.dirs);
        buf_free(&m.sc.b);
        snap_record_free(&rec);
        snap_record_free(&brec);
        txn_free(pin);
        safe_close(m.rootfd);
        pthread_mutex_destroy(&m.mu);
        return r;
}
