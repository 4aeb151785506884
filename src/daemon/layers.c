/* Snapshot layers: made under a lock file (two workers starting forks of one snapshot
 * make it once), published by a rename, stamped with the kernel's boot id because their
 * files are never fsynced (a layer of an earlier boot may be torn and is never used), and
 * kept in the store's live set by a record of their own. */
#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macros.h"
#include "daemon/layers.h"
#include "daemon/util.h"
#include "runtime/fsutil.h"

_Static_assert(LAYERS_ID_MAX == 63, "the sscanf widths in source_one");

#define LAYER_MAGIC "space-layer 1"
#define LAYER_REC "rec"     /* DATA/layers/<root>/rec: magic, record hash, boot id */
#define LAYER_FILES "files"
/* in place of the boot id: a source layer (btrfs snapshot, records fsynced), valid in any boot */
#define LAYER_DURABLE "durable"

static int layer_dir(const char *data_dir, const struct store_hash *root, const char *sub, char **ret) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(root, hex);
        return asprintf(ret, "%s/layers/%s%s%s", data_dir, hex, sub ? "/" : "", sub ? sub : "") < 0 ? -ENOMEM : 0;
}

int layers_files_dir(const char *data_dir, const struct layer_ref *l, char **ret) {
        return layer_dir(data_dir, &l->root, LAYER_FILES, ret);
}

static int fsync_path(const char *path) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        return fd < 0 || fsync(fd) < 0 ? -errno : 0;
}

/* sync: the file's data is on disk before the rename (the caller syncs the directory). */
static int write_atomic(const char *path, const char *text, bool sync) {
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        size_t n = strlen(text);
        if (fd < 0 || write(fd, text, n) != (ssize_t)n || (sync && fsync(fd) < 0) || rename(tmp, path) < 0) {
                int r = errno ? -errno : -EIO;
                (void)unlink(tmp);
                return r;
        }
        return 0;
}

/* Reads a small text file whole; -EBADMSG if it is larger than LAYERS_REF_MAX. */
static int read_small(const char *path, char out[LAYERS_REF_MAX + 1]) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, out, LAYERS_REF_MAX + 1);
        if (n < 0)
                return -errno;
        if (n > LAYERS_REF_MAX)
                return -EBADMSG;
        out[n] = '\0';
        return 0;
}

int layers_ref_write(const char *path, const struct layer_ref *l) {
        if (!l->set)
                return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
        char root[STORE_HEX_LEN + 1], rec[STORE_HEX_LEN + 1], text[LAYERS_REF_MAX];
        store_hash_to_hex(&l->root, root);
        store_hash_to_hex(&l->rec, rec);
        snprintf(text, sizeof text, "%s\n%s\n%s\n", LAYER_MAGIC, root, rec);
        return write_atomic(path, text, false);
}

int layers_ref_read(const char *path, struct layer_ref *ret) {
        char text[LAYERS_REF_MAX + 1], root[STORE_HEX_LEN + 1], rec[STORE_HEX_LEN + 1];
        int r = read_small(path, text);
        if (r < 0)
                return r == -ENOENT ? r : -EBADMSG;
        struct layer_ref l = { .set = true };
        if (sscanf(text, LAYER_MAGIC "\n%64s\n%64s\n", root, rec) != 2 || store_hash_from_hex(root, &l.root) < 0 ||
            store_hash_from_hex(rec, &l.rec) < 0)
                return -EBADMSG;
        *ret = l;
        return 0;
}

/* DATA/layers/.links.<root>: this tree has hard links, it gets no layer (swept with the
 * other leftovers). */
static char *links_mark(const char *data_dir, const struct store_hash *root) {
        char hex[STORE_HEX_LEN + 1], *p = NULL;
        store_hash_to_hex(root, hex);
        return asprintf(&p, "%s/layers/.links.%s", data_dir, hex) < 0 ? NULL : p;
}

/* The layer of root, if one of this boot is there (-EMLINK: the tree has hard links); its record is made again if the store
 * lost it (snap has the same tree). */
static int layer_find(const char *data_dir, struct store *st, const struct store_hash *root,
                      const struct store_hash *snap, struct layer_ref *ret) {
        _cleanup_free_ char *recp = NULL;
        char text[LAYERS_REF_MAX + 1], hex[STORE_HEX_LEN + 1], boot[64], want[64];
        int r = layer_dir(data_dir, root, LAYER_REC, &recp);
        if (r < 0)
                return r;
        if ((r = read_small(recp, text)) < 0) {
                _cleanup_free_ char *mark = links_mark(data_dir, root);
                return mark && access(mark, F_OK) == 0 ? -EMLINK : r;
        }
        if ((r = util_boot_id(want)) < 0)
                return r;
        struct layer_ref l = { .set = true, .root = *root };
        if (sscanf(text, LAYER_MAGIC "\n%64s\n%63s\n", hex, boot) != 2 || store_hash_from_hex(hex, &l.rec) < 0)
                return -EBADMSG;
        bool durable = strcmp(boot, LAYER_DURABLE) == 0;
        if (strcmp(boot, want) != 0 && !durable)
                return -ESTALE;
        if (durable) { /* its files are a btrfs snapshot elsewhere: still there? */
                _cleanup_free_ char *files = NULL;
                if ((r = layer_dir(data_dir, root, LAYER_FILES, &files)) < 0)
                        return r;
                if (access(files, F_OK) < 0)
                        return -EBADMSG;
        }
        struct store_snapshot_info info;
        if (store_snapshot_get(st, &l.rec, &info) < 0 || !store_hash_eq(&info.root, root)) {
                if (!snap || (r = store_fork(st, snap, NULL, "layer", &l.rec)) < 0)
                        return r < 0 ? r : -ENOENT;
                /* the lines after the third (a source layer's owner) stay */
                const char *rest = text;
                for (int i = 0; i < 3 && rest; i++)
                        if ((rest = strchr(rest, '\n')))
                                rest++;
                char out[LAYERS_REF_MAX + 1];
                store_hash_to_hex(&l.rec, hex);
                if (snprintf(out, sizeof out, "%s\n%s\n%s\n%s", LAYER_MAGIC, hex, boot, rest ? rest : "") >=
                    (int)sizeof out)
                        return -EBADMSG;
                if ((r = write_atomic(recp, out, durable)) < 0)
                        return r;
        }
        *ret = l;
        return 0;
}

/* Under DATA/layers/.lock (held in *ret_lock): 0 and *ret if the layer of root is there
 * now (another worker made it meanwhile), else -ENOENT with any torn or stale layer of
 * root moved aside (the sweep deletes it; a sandbox of this boot never used it). */
static int layer_lock_find(const char *data_dir, struct store *st, const struct store_hash *root,
                           const struct store_hash *snap, int *ret_lock, struct layer_ref *ret) {
        _cleanup_free_ char *dir = NULL, *lock = NULL, *final = NULL, *stale = NULL;
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(root, hex);
        if (asprintf(&dir, "%s/layers", data_dir) < 0 || asprintf(&lock, "%s/.lock", dir) < 0 ||
            asprintf(&final, "%s/%s", dir, hex) < 0)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        _cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
                return -errno;
        int r = layer_find(data_dir, st, root, snap, ret);
        if (r == -ESTALE || r == -EBADMSG) {
                if (asprintf(&stale, "%s/.stale.%s.%d", dir, hex, getpid()) < 0)
                        return -ENOMEM;
                (void)rt_rm_rf(stale);
                if (rename(final, stale) < 0)
                        return -errno;
                r = -ENOENT;
        }
        if (r == 0 || r == -ENOENT || r == -EMLINK)
                *ret_lock = TAKE_FD(lfd);
        return r;
}

/* Writes tmp/rec and renames tmp into place as the layer of root; its store record is
 * a fork of snap. line3: the boot id, or LAYER_DURABLE; owner: "" or "\n<session> <snap>". */
static int layer_publish(const char *data_dir, struct store *st, const struct store_hash *snap,
                         const struct store_hash *root, const char *tmp, const char *line3, const char *owner,
                         bool sync, struct layer_ref *ret) {
        _cleanup_free_ char *recp = NULL, *final = NULL;
        char hex[STORE_HEX_LEN + 1], rhex[STORE_HEX_LEN + 1], text[LAYERS_REF_MAX];
        store_hash_to_hex(root, hex);
        if (asprintf(&recp, "%s/" LAYER_REC, tmp) < 0 || asprintf(&final, "%s/layers/%s", data_dir, hex) < 0)
                return -ENOMEM;
        struct layer_ref l = { .set = true, .root = *root };
        int r = store_fork(st, snap, NULL, "layer", &l.rec);
        if (r < 0)
                return r;
        store_hash_to_hex(&l.rec, rhex);
        if (snprintf(text, sizeof text, "%s\n%s\n%s\n%s%s", LAYER_MAGIC, rhex, line3, owner,
                     *owner ? "\n" : "") >= (int)sizeof text)
                return -ENAMETOOLONG;
        if ((r = write_atomic(recp, text, sync)) < 0 || (sync && (r = fsync_path(tmp)) < 0))
                return r;
        if (rename(tmp, final) < 0)
                return -errno;
        if (sync) {
                _cleanup_free_ char *dir = NULL;
                if (asprintf(&dir, "%s/layers", data_dir) < 0)
                        return -ENOMEM;
                if ((r = fsync_path(dir)) < 0)
                        return r;
        }
        *ret = l;
        return 0;
}

/* Materializes snap as the layer of its tree, under DATA/layers/.lock. */
static int layer_make(const char *data_dir, struct store *st, const struct store_hash *snap,
                      const struct store_hash *root, struct layer_ref *ret) {
        _cleanup_free_ char *tmp = NULL, *files = NULL;
        _cleanup_close_ int lfd = -EBADF;
        char hex[STORE_HEX_LEN + 1], boot[64];
        store_hash_to_hex(root, hex);
        if (asprintf(&tmp, "%s/layers/.tmp.%s", data_dir, hex) < 0 || asprintf(&files, "%s/" LAYER_FILES, tmp) < 0)
                return -ENOMEM;
        int r = layer_lock_find(data_dir, st, root, snap, &lfd, ret);
        if (r != -ENOENT)
                return r; /* 0: another worker made it meanwhile */
        if ((r = util_boot_id(boot)) < 0)
                return r;
        (void)rt_rm_rf(tmp);
        if (mkdir(tmp, 0700) < 0)
                return -errno;
        struct store_op_stats ms = { 0 };
        if ((r = store_materialize(st, snap, files,
                                   &(struct store_materialize_opts){ .no_stat_cache = true, .stats = &ms })) < 0)
                goto fail;
        if (ms.link_groups) {
                _cleanup_free_ char *mark = links_mark(data_dir, root);
                if (mark)
                        (void)write_atomic(mark, "hard links\n", false);
                r = -EMLINK;
                goto fail;
        }
        if ((r = layer_publish(data_dir, st, snap, root, tmp, boot, "", false, ret)) < 0)
                goto fail;
        return 0;
fail:
        (void)rt_rm_rf(tmp);
        return r;
}

int layers_adopt(const char *data_dir, struct store *st, const struct store_hash *snap,
                 const struct store_hash *root, const char *snap_dir, const char *session, const char *snap_id,
                 struct layer_ref *ret) {
        _cleanup_free_ char *tmp = NULL, *files = NULL, *target = NULL, *owner = NULL;
        _cleanup_close_ int lfd = -EBADF;
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(root, hex);
        if (asprintf(&tmp, "%s/layers/.tmp.%s", data_dir, hex) < 0 || asprintf(&files, "%s/" LAYER_FILES, tmp) < 0 ||
            asprintf(&target, "%s/upper", snap_dir) < 0 || asprintf(&owner, "%s %s", session, snap_id) < 0)
                return -ENOMEM;
        struct layer_ref l;
        int r = layer_lock_find(data_dir, st, root, snap, &lfd, &l);
        if (r == 0 || r == -EMLINK)
                return -EEXIST;
        if (r != -ENOENT)
                return r;
        (void)rt_rm_rf(tmp);
        if (mkdir(tmp, 0700) < 0)
                return -errno;
        if (symlink(target, files) < 0) {
                r = -errno;
                goto fail;
        }
        if ((r = layer_publish(data_dir, st, snap, root, tmp, LAYER_DURABLE, owner, true, ret)) < 0)
                goto fail;
        return 0;
fail:
        (void)rt_rm_rf(tmp);
        return r;
}

int layers_start(const char *data_dir, struct store *st, const struct store_hash *snap, const struct layer_ref *cand,
                 const char *upper, struct store_op_stats *stats, struct layer_ref *ret, enum layer_how *ret_how) {
        struct store_snapshot_info info;
        int r = store_snapshot_get(st, snap, &info);
        if (r < 0)
                return r;
        struct layer_ref l = { 0 };
        enum layer_how how = LAYER_SAME;
        r = layer_find(data_dir, st, &info.root, snap, &l);
        if (r < 0 && r != -EMLINK && cand && cand->set) {
                struct layer_ref c = { 0 };
                /* the candidate must still be there, of this boot, with its record */
                if (layer_find(data_dir, st, &cand->root, NULL, &c) == 0 && store_hash_eq(&c.rec, &cand->rec)) {
                        r = store_materialize(st, snap, upper,
                                              &(struct store_materialize_opts){ .base = &c.rec, .stats = stats });
                        if (r == 0) {
                                *ret = c;
                                *ret_how = LAYER_DELTA;
                                return 0;
                        }
                        (void)rt_rm_rf(upper); /* partial: start again on a layer of its own */
                }
        }
        if (!l.set && r != -EMLINK) {
                r = layer_make(data_dir, st, snap, &info.root, &l);
                if (r < 0 && r != -EMLINK)
                        return r;
                how = LAYER_MADE;
        }
        if (r == -EMLINK) {
                r = store_materialize(st, snap, upper, &(struct store_materialize_opts){ .stats = stats });
                if (r < 0)
                        return r;
                *ret = (struct layer_ref){ 0 };
                *ret_how = LAYER_PLAIN;
                return 0;
        }
        /* The same tree: nothing to write but the root's metadata. No stat cache: it would
         * hold the root alone, and saving one waits out the file system's timestamp
         * granularity (~20 ms) on the path of every fork. */
        r = store_materialize(st, snap, upper,
                              &(struct store_materialize_opts){ .base = &l.rec, .stats = stats, .no_stat_cache = true });
        if (r < 0)
                return r;
        *ret = l;
        *ret_how = how;
        return 0;
}

/* Calls fn with the root and the text of every layer's record (unreadable ones skipped);
 * stops at fn's first error. */
static int layers_each(const char *data_dir, int (*fn)(void *ud, const struct store_hash *root, const char *rec),
                       void *ud) {
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/layers", data_dir) < 0)
                return -ENOMEM;
        _cleanup_closedir_ DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                struct store_hash root;
                if (de->d_name[0] == '.' || store_hash_from_hex(de->d_name, &root) < 0)
                        continue;
                _cleanup_free_ char *recp = NULL;
                char text[LAYERS_REF_MAX + 1];
                if (layer_dir(data_dir, &root, LAYER_REC, &recp) < 0 || read_small(recp, text) < 0)
                        continue;
                int r = fn(ud, &root, text);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Grows *v (of *n, room for *cap) by one element of size sz; NULL without memory. */
static void *grow(void **v, size_t *n, size_t *cap, size_t sz) {
        if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 16;
                void *nv = realloc(*v, nc * sz);
                if (!nv)
                        return NULL;
                *v = nv;
                *cap = nc;
        }
        return (char *)*v + (*n)++ * sz;
}

struct live_acc {
        struct store_hash *v;
        size_t n, cap;
};

static int live_one(void *ud, const struct store_hash *root, const char *text) {
        (void)root;
        struct live_acc *a = ud;
        char hex[STORE_HEX_LEN + 1];
        struct store_hash rec;
        if (sscanf(text, LAYER_MAGIC "\n%64s\n", hex) != 1 || store_hash_from_hex(hex, &rec) < 0)
                return 0;
        struct store_hash *slot = grow((void **)&a->v, &a->n, &a->cap, sizeof *slot);
        if (!slot)
                return -ENOMEM;
        *slot = rec;
        return 0;
}

int layers_live(const char *data_dir, struct store_hash **ret, size_t *ret_n) {
        struct live_acc a = { 0 };
        int r = layers_each(data_dir, live_one, &a);
        if (r < 0) {
                free(a.v);
                return r;
        }
        *ret = a.v;
        *ret_n = a.n;
        return 0;
}

struct source_acc {
        struct layer_source *v;
        size_t n, cap;
};

static int source_one(void *ud, const struct store_hash *root, const char *text) {
        struct source_acc *a = ud;
        char ses[LAYERS_ID_MAX + 1], snap[LAYERS_ID_MAX + 1];
        /* %63s: LAYERS_ID_MAX */
        if (sscanf(text, LAYER_MAGIC "\n%*64s\n" LAYER_DURABLE "\n%63s %63s\n", ses, snap) != 2)
                return 0;
        struct layer_source *slot = grow((void **)&a->v, &a->n, &a->cap, sizeof *slot);
        if (!slot)
                return -ENOMEM;
        *slot = (struct layer_source){ .root = *root };
        snprintf(slot->session, sizeof slot->session, "%s", ses);
        snprintf(slot->snap, sizeof slot->snap, "%s", snap);
        return 0;
}

int layers_sources(const char *data_dir, struct layer_source **ret, size_t *ret_n) {
        struct source_acc a = { 0 };
        int r = layers_each(data_dir, source_one, &a);
        if (r < 0) {
                free(a.v);
                return r;
        }
        *ret = a.v;
        *ret_n = a.n;
        return 0;
}

void layers_vol_sweep(const char *data_dir, const char *vol_layers, bool leftovers,
                      void (*drop)(void *userdata, const char *dir), void *userdata) {
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/layers", data_dir) < 0)
                return;
        /* the snapshots that layers' files links name */
        char **used = NULL;
        size_t n = 0, cap = 0;
        _cleanup_closedir_ DIR *d = opendir(dir), *v = NULL;
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_free_ char *files = NULL;
                char target[PATH_MAX];
                if (asprintf(&files, "%s/%s/" LAYER_FILES, dir, de->d_name) < 0)
                        goto out;
                ssize_t k = readlink(files, target, sizeof target - 1);
                if (k <= 0)
                        continue;
                target[k] = '\0';
                char *slash = strrchr(target, '/'); /* <snapshot>/upper */
                if (slash)
                        *slash = '\0';
                char **slot = grow((void **)&used, &n, &cap, sizeof *slot);
                if (!slot || !(*slot = strdup(target))) {
                        if (slot)
                                n--;
                        goto out; /* can't tell what is used: drop nothing */
                }
        }
        v = opendir(vol_layers);
        while (v && (de = readdir(v))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || (de->d_name[0] == '.' && !leftovers))
                        continue;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", vol_layers, de->d_name) < 0)
                        break;
                bool kept = false;
                for (size_t i = 0; i < n && !kept; i++)
                        kept = !strcmp(used[i], p);
                if (!kept)
                        drop(userdata, p);
        }
out:
        for (size_t i = 0; i < n; i++)
                free(used[i]);
        free(used);
}

void layers_sweep(const char *data_dir, const struct store_hash *keep, size_t n_keep,
                  void (*drop)(void *userdata, const char *dir), void *userdata) {
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/layers", data_dir) < 0)
                return;
        _cleanup_closedir_ DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, ".lock"))
                        continue;
                struct store_hash root;
                bool kept = false;
                if (de->d_name[0] != '.' && store_hash_from_hex(de->d_name, &root) == 0)
                        for (size_t i = 0; i < n_keep && !kept; i++)
                                kept = store_hash_eq(&keep[i], &root);
                if (kept)
                        continue;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", dir, de->d_name) >= 0)
                        drop(userdata, p);
        }
}
