/* The remote tier's logic (src/store/remote.c) on an in-memory bucket behind struct
 * store_remote_ops: no server, so a failure can be injected at an exact request and an
 * object's age set by hand. Push → pull into an empty store → identical tree (generated
 * with every entry type), with a memory image and with delta chunks (pulled as plain);
 * a push that fails at its Nth upload leaves no record and its known list names only what
 * landed, and a second push sends exactly the rest; damaged objects (a flipped byte, a
 * cut header, another object's body, a bad record) are refused with -EBADMSG and nothing
 * is listed; GC deletes exactly the unmarked objects past the grace, keeps young ones and
 * stops with -EAGAIN before deleting when a live snapshot is nowhere. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>

#include "helpers.h"
#include "store/remote.h"
#include "store/store-internal.h"

/* ---- the in-memory bucket: shared by a remote and its clones ---- */

#define MEM_KEYS 65536

struct mem_obj {
        char *key;
        uint8_t *data;
        size_t n;
        int64_t mtime;
};

struct bucket {
        pthread_mutex_t mu;
        struct mem_obj v[MEM_KEYS];
        size_t n;
        long puts, heads, gets, dels;
        long fail_at_put; /* the put with this number (1-based) and every request after fail; 0 never */
        bool down;
};

struct mem_remote {
        struct store_remote base;
        struct bucket *b;
        char err[128];
};

static struct mem_obj *find(struct bucket *b, const char *key) {
        for (size_t i = 0; i < b->n; i++)
                if (!strcmp(b->v[i].key, key))
                        return &b->v[i];
        return NULL;
}

static int down(struct mem_remote *m) {
        snprintf(m->err, sizeof m->err, "the bucket is down");
        return -ECONNREFUSED;
}

static int m_put(struct store_remote *r, const char *key, const void *data, size_t n) {
        struct mem_remote *m = (struct mem_remote *)r;
        struct bucket *b = m->b;
        pthread_mutex_lock(&b->mu);
        b->puts++;
        if (b->fail_at_put && b->puts >= b->fail_at_put)
                b->down = true;
        if (b->down) {
                pthread_mutex_unlock(&b->mu);
                return down(m);
        }
        struct mem_obj *o = find(b, key);
        if (!o) {
                assert_true(b->n < MEM_KEYS);
                o = &b->v[b->n++];
                o->key = strdup(key);
        } else {
                free(o->data);
        }
        o->data = malloc(n ? n : 1);
        memcpy(o->data, data, n);
        o->n = n;
        o->mtime = (int64_t)time(NULL);
        pthread_mutex_unlock(&b->mu);
        return 0;
}

static int m_get(struct store_remote *r, const char *key, size_t max, void **ret, size_t *ret_n) {
        struct mem_remote *m = (struct mem_remote *)r;
        pthread_mutex_lock(&m->b->mu);
        m->b->gets++;
        struct mem_obj *o = m->b->down ? NULL : find(m->b, key);
        int k = m->b->down ? down(m) : !o ? -ENOENT : o->n > max ? -EFBIG : 0;
        if (k == 0) {
                *ret = malloc(o->n + 1);
                memcpy(*ret, o->data, o->n);
                ((char *)*ret)[o->n] = 0;
                *ret_n = o->n;
        } else if (k == -ENOENT) {
                snprintf(m->err, sizeof m->err, "404");
        }
        pthread_mutex_unlock(&m->b->mu);
        return k;
}

static int m_head(struct store_remote *r, const char *key, uint64_t *size, int64_t *mtime) {
        struct mem_remote *m = (struct mem_remote *)r;
        pthread_mutex_lock(&m->b->mu);
        m->b->heads++;
        struct mem_obj *o = m->b->down ? NULL : find(m->b, key);
        int k = m->b->down ? down(m) : o ? 0 : -ENOENT;
        if (o) {
                *size = o->n;
                *mtime = o->mtime;
        }
        pthread_mutex_unlock(&m->b->mu);
        return k;
}

static int key_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int m_list(struct store_remote *r, const char *prefix,
                  int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime), void *ud) {
        struct mem_remote *m = (struct mem_remote *)r;
        pthread_mutex_lock(&m->b->mu);
        if (m->b->down) {
                pthread_mutex_unlock(&m->b->mu);
                return down(m);
        }
        size_t n = 0;
        char **keys = calloc(m->b->n + 1, sizeof *keys);
        uint64_t *sizes = calloc(m->b->n + 1, sizeof *sizes);
        int64_t *mt = calloc(m->b->n + 1, sizeof *mt);
        /* "key\0" then its index, so the sort keeps the way back to size and mtime */
        for (size_t i = 0; i < m->b->n; i++)
                if (!strncmp(m->b->v[i].key, prefix, strlen(prefix))) {
                        size_t kl = strlen(m->b->v[i].key);
                        keys[n] = malloc(kl + 1 + sizeof i);
                        memcpy(keys[n], m->b->v[i].key, kl + 1);
                        memcpy(keys[n] + kl + 1, &i, sizeof i);
                        n++;
                }
        qsort(keys, n, sizeof *keys, key_cmp);
        for (size_t i = 0; i < n; i++) {
                size_t at;
                memcpy(&at, keys[i] + strlen(keys[i]) + 1, sizeof at);
                sizes[i] = m->b->v[at].n;
                mt[i] = m->b->v[at].mtime;
        }
        pthread_mutex_unlock(&m->b->mu);
        int k = 0;
        for (size_t i = 0; i < n && !k; i++)
                k = fn(ud, keys[i], sizes[i], mt[i]);
        for (size_t i = 0; i < n; i++)
                free(keys[i]);
        free(keys);
        free(sizes);
        free(mt);
        return k;
}

static int m_del(struct store_remote *r, const char *key) {
        struct mem_remote *m = (struct mem_remote *)r;
        pthread_mutex_lock(&m->b->mu);
        m->b->dels++;
        struct mem_obj *o = find(m->b, key);
        if (o) {
                free(o->key);
                free(o->data);
                *o = m->b->v[--m->b->n];
        }
        pthread_mutex_unlock(&m->b->mu);
        return 0;
}

static int m_clone(struct store_remote *r, struct store_remote **ret);
static void m_free(struct store_remote *r) { free(r); }
static const char *m_err(const struct store_remote *r) { return ((const struct mem_remote *)r)->err; }

static const struct store_remote_ops mem_ops = {
        .put = m_put, .get = m_get, .head = m_head, .list = m_list, .del = m_del,
        .clone = m_clone, .free = m_free, .last_error = m_err,
};

static struct store_remote *mem_remote(struct bucket *b) {
        struct mem_remote *m = calloc(1, sizeof *m);
        assert_non_null(m);
        m->base.ops = &mem_ops;
        snprintf(m->base.name, sizeof m->base.name, "mem://%p", (void *)b);
        m->b = b;
        return &m->base;
}

static int m_clone(struct store_remote *r, struct store_remote **ret) {
        *ret = mem_remote(((struct mem_remote *)r)->b);
        return 0;
}

static struct bucket *bucket_new(void) {
        struct bucket *b = calloc(1, sizeof *b);
        assert_non_null(b);
        pthread_mutex_init(&b->mu, NULL);
        return b;
}

static void bucket_free(struct bucket *b) {
        for (size_t i = 0; i < b->n; i++) {
                free(b->v[i].key);
                free(b->v[i].data);
        }
        pthread_mutex_destroy(&b->mu);
        free(b);
}

static size_t count_prefix(struct bucket *b, const char *prefix) {
        size_t n = 0;
        for (size_t i = 0; i < b->n; i++)
                n += !strncmp(b->v[i].key, prefix, strlen(prefix));
        return n;
}

static struct mem_obj *obj_key(struct bucket *b, const char *prefix, const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1], key[128];
        store_hash_to_hex(h, hex);
        snprintf(key, sizeof key, "%s%s", prefix, hex);
        return find(b, key);
}

/* ---- fixtures ---- */

struct fx {
        char *base;
        char src[4096], a[4096], b[4096], out[4096];
        struct store *sa, *sb;
        struct bucket *bk;
        struct store_remote *r;
};

static void fx_open(struct fx *f, const char *tag) {
        f->base = th_tmpdir(tag);
        assert_non_null(f->base);
        snprintf(f->src, sizeof f->src, "%s/src", f->base);
        snprintf(f->a, sizeof f->a, "%s/a", f->base);
        snprintf(f->b, sizeof f->b, "%s/b", f->base);
        snprintf(f->out, sizeof f->out, "%s/out", f->base);
        assert_int_equal(mkdir(f->src, 0755), 0);
        assert_int_equal(store_open(f->a, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &f->sa), 0);
        assert_int_equal(store_open(f->b, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &f->sb), 0);
        f->bk = bucket_new();
        f->r = mem_remote(f->bk);
}

static void fx_close(struct fx *f) {
        store_remote_free(f->r);
        bucket_free(f->bk);
        store_free(f->sa);
        store_free(f->sb);
        th_rm_rf(f->base);
        free(f->base);
}

static size_t listed(struct store *s) {
        struct store_hash *v = NULL;
        size_t n = 0;
        assert_int_equal(store_snapshot_list(s, &v, &n), 0);
        free(v);
        return n;
}

static void restore_same(struct store *s, const struct store_hash *h, const char *src, const char *out) {
        th_rm_rf(out);
        assert_int_equal(store_materialize(s, h, out, &(struct store_materialize_opts){ .no_stat_cache = true }), 0);
        char why[512] = "";
        int k = th_compare_trees(src, out, why, sizeof why);
        if (k)
                printf("# %s\n", why);
        assert_int_equal(k, 0);
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
}

/* ---- tests ---- */

static void test_roundtrip(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-rt");
        struct rng rg = { 7 };
        bool root = geteuid() == 0;
        assert_int_equal(th_gen_tree(f.src, &rg, &(struct gen_opts){ .max_depth = 4, .max_entries = 12,
                                                                       .devices = root, .max_file = 600000 }),
                         0);
        struct store_hash h;
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ .session = "ses_a" }, &h), 0);
        struct store_remote_stats st = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &h, &(struct store_remote_opts){ .jobs = 3 }, &st), 0);
        printf("# pushed %llu objects, %llu bytes sent\n", (unsigned long long)st.objects,
               (unsigned long long)st.bytes_sent);
        assert_true(st.objects > 10);
        assert_int_equal(st.objects_sent, st.objects);
        assert_int_equal(count_prefix(f.bk, "objects/"), st.objects - 1);
        assert_int_equal(count_prefix(f.bk, "snapshots/"), 1);
        assert_non_null(obj_key(f.bk, "snapshots/", &h));

        printf("# again: the known list vouches for everything, only the record goes\n");
        long heads = f.bk->heads;
        struct store_remote_stats st2 = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &h, NULL, &st2), 0);
        assert_int_equal(st2.objects_sent, 1);
        assert_int_equal(st2.objects_known, st.objects - 1);
        assert_int_equal(f.bk->heads, heads);

        printf("# pull into an empty store: every object fetched, the tree restored\n");
        struct store_remote_stats pl = { 0 };
        assert_int_equal(store_pull(f.sb, f.r, &h, &(struct store_remote_opts){ .jobs = 5 }, &pl), 0);
        assert_int_equal(pl.objects_fetched, st.objects);
        assert_int_equal(listed(f.sb), 1);
        struct store_snapshot_info ia, ib;
        assert_int_equal(store_snapshot_get(f.sa, &h, &ia), 0);
        assert_int_equal(store_snapshot_get(f.sb, &h, &ib), 0);
        assert_string_equal(ib.session, "ses_a");
        assert_int_equal(ib.files, ia.files);
        if (root)
                restore_same(f.sb, &h, f.src, f.out);
        else
                printf("# not root: the restore comparison (owners, devices) is left to the root run\n");

        printf("# a listed snapshot is not pulled again\n");
        long gets = f.bk->gets;
        assert_int_equal(store_pull(f.sb, f.r, &h, NULL, NULL), 0);
        assert_int_equal(f.bk->gets, gets);

        printf("# a child with a few changes: only its new objects go, and come\n");
        assert_int_equal(th_mutate_tree(f.src, &rg, 3), 0);
        struct store_hash c;
        assert_int_equal(store_capture(f.sa, f.src, &h, &(struct store_capture_opts){ 0 }, &c), 0);
        struct store_op_stats cs = { 0 };
        struct store_hash c2;
        assert_int_equal(store_capture(f.sa, f.src, &c, &(struct store_capture_opts){ .stats = &cs }, &c2), 0);
        struct store_remote_stats sc = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &c, NULL, &sc), 0);
        assert_true(sc.objects_sent < st.objects / 2);
        assert_int_equal(sc.objects_sent + sc.objects_known + sc.objects_found, sc.objects);
        struct store_remote_stats pc = { 0 };
        assert_int_equal(store_pull(f.sb, f.r, &c, NULL, &pc), 0);
        assert_int_equal(pc.objects_fetched, sc.objects_sent);
        if (root)
                restore_same(f.sb, &c, f.src, f.out);
        printf("# a snapshot the bucket lacks: -ENOENT\n");
        assert_int_equal(store_pull(f.sb, f.r, &c2, NULL, NULL), -ENOENT);
        fx_close(&f);
}

static void test_memory_and_deltas(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-md");
        char file[4200], img[4200];
        snprintf(file, sizeof file, "%s/ram", f.src);
        snprintf(img, sizeof img, "%s/img", f.base);
        struct rng rg = { 9 };
        assert_int_equal(th_write_file(file, &rg, 1u << 20), 0);
        assert_int_equal(th_write_file(img, &rg, 3u << 20), 0);
        int fd = open(img, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        struct store_hash mem, p, c;
        assert_int_equal(store_memory_put(f.sa, fd, 3u << 20, NULL, &mem), 0);
        close(fd);
        struct store_capture_opts co = { .fixed_chunk = 16u << 10 };
        assert_int_equal(store_capture(f.sa, f.src, NULL, &co, &p), 0);
        /* a few words changed in place: delta chunks in the child */
        fd = open(file, O_WRONLY | O_CLOEXEC);
        for (int i = 0; i < 3; i++)
                assert_int_equal(pwrite(fd, "XXXXXXXX", 8, (off_t)i * 200000 + 100), 8);
        close(fd);
        struct store_op_stats cs = { 0 };
        co.stats = &cs;
        co.memory = &mem;
        assert_int_equal(store_capture(f.sa, f.src, &p, &co, &c), 0);
        assert_true(cs.deltas_written >= 3);
        printf("# the child (%llu deltas, a memory image) alone: its deltas go as plain chunks\n",
               (unsigned long long)cs.deltas_written);
        assert_int_equal(store_push(f.sa, f.r, &c, NULL, NULL), 0);
        struct store_remote_stats pl = { 0 };
        assert_int_equal(store_pull(f.sb, f.r, &c, NULL, &pl), 0);
        restore_same(f.sb, &c, f.src, f.out);
        struct store_snapshot_info info;
        assert_int_equal(store_snapshot_get(f.sb, &c, &info), 0);
        assert_true(info.has_memory);
        char back[4200];
        snprintf(back, sizeof back, "%s/img.back", f.base);
        fd = open(back, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(store_memory_get(f.sb, &info.memory, fd), 0);
        close(fd);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", img, back);
        assert_int_equal(system(cmd), 0);
        fx_close(&f);
}

static void test_failure_mid_push(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-fail");
        struct rng rg = { 11 };
        char path[4200];
        for (int i = 0; i < 60; i++) {
                snprintf(path, sizeof path, "%s/f%02d", f.src, i);
                assert_int_equal(th_write_file(path, &rg, 5000 + (size_t)i * 10), 0);
        }
        struct store_hash h;
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ 0 }, &h), 0);
        printf("# the bucket goes down at the 25th upload\n");
        f.bk->fail_at_put = 25;
        struct store_remote_stats st = { 0 };
        int k = store_push(f.sa, f.r, &h, &(struct store_remote_opts){ .jobs = 4 }, &st);
        printf("# %d: %s\n", k, store_error_detail());
        assert_int_equal(k, -ECONNREFUSED);
        assert_non_null(strstr(store_error_detail(), "the bucket is down"));
        assert_null(obj_key(f.bk, "snapshots/", &h));
        assert_int_equal(count_prefix(f.bk, "objects/"), 24);
        assert_int_equal(st.objects_sent, 24);
        printf("# B cannot pull it; back up, a second push sends exactly the rest\n");
        f.bk->down = false;
        f.bk->fail_at_put = 0;
        assert_int_equal(store_pull(f.sb, f.r, &h, NULL, NULL), -ENOENT);
        struct store_remote_stats st2 = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &h, NULL, &st2), 0);
        assert_int_equal(st2.objects_known, 24);
        assert_int_equal(st2.objects_sent, st2.objects - 24);
        assert_int_equal(store_pull(f.sb, f.r, &h, NULL, NULL), 0);
        restore_same(f.sb, &h, f.src, f.out);
        fx_close(&f);
}

/* Flips, cuts or swaps the stored body of key in b. */
static void test_corrupt(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-bad");
        struct rng rg = { 13 };
        char path[4200];
        for (int i = 0; i < 4; i++) {
                snprintf(path, sizeof path, "%s/f%d", f.src, i);
                assert_int_equal(th_write_file(path, &rg, 20000), 0);
        }
        struct store_hash h;
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ 0 }, &h), 0);
        assert_int_equal(store_push(f.sa, f.r, &h, NULL, NULL), 0);
        /* the first file's chunk: a file under 32 KiB is one chunk, named by its bytes */
        snprintf(path, sizeof path, "%s/f0", f.src);
        uint8_t data[20000];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_int_equal(read(fd, data, sizeof data), (ssize_t)sizeof data);
        close(fd);
        struct store_hash ch, other;
        store_sha256(data, sizeof data, &ch);
        snprintf(path, sizeof path, "%s/f1", f.src);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_int_equal(read(fd, data, sizeof data), (ssize_t)sizeof data);
        close(fd);
        store_sha256(data, sizeof data, &other);
        struct mem_obj *o = obj_key(f.bk, "objects/", &ch), *oo = obj_key(f.bk, "objects/", &other);
        assert_non_null(o);
        assert_non_null(oo);
        uint8_t *saved = malloc(o->n);
        size_t saved_n = o->n;
        memcpy(saved, o->data, o->n);
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&ch, hex);

        for (int round = 0; round < 5; round++) {
                o = obj_key(f.bk, "objects/", &ch);
                memcpy(o->data, saved, saved_n);
                o->n = saved_n;
                const char *what = "";
                switch (round) {
                case 0: what = "a flipped byte in the payload"; o->data[o->n / 2] ^= 0x40; break;
                case 1: what = "the header cut"; o->n = 7; break;
                case 2: what = "another version"; o->data[4] = 9; break;
                case 3: what = "the length field off by one"; put_le32(o->data + 8, get_le32(o->data + 8) + 1); break;
                case 4:
                        what = "another object's whole (valid) body";
                        free(o->data);
                        o->data = malloc(oo->n);
                        memcpy(o->data, oo->data, oo->n);
                        o->n = oo->n;
                        break;
                }
                int k = store_pull(f.sb, f.r, &h, &(struct store_remote_opts){ .jobs = 2 }, NULL);
                printf("# %s: %d, %s\n", what, k, store_error_detail());
                assert_int_equal(k, -EBADMSG);
                assert_non_null(strstr(store_error_detail(), hex));
                assert_int_equal(listed(f.sb), 0);
                struct store_stats ss;
                assert_int_equal(store_stats(f.sb, &ss), 0);
                assert_int_equal(ss.objects, 0);
        }
        printf("# a record that does not decode, or is another's\n");
        o = obj_key(f.bk, "objects/", &ch);
        free(o->data);
        o->data = saved;
        o->n = saved_n;
        struct mem_obj *rec = obj_key(f.bk, "snapshots/", &h);
        rec->data[rec->n - 1] ^= 1;
        assert_int_equal(store_pull(f.sb, f.r, &h, NULL, NULL), -EBADMSG);
        rec->data[rec->n - 1] ^= 1;
        assert_int_equal(store_pull(f.sb, f.r, &h, NULL, NULL), 0);
        restore_same(f.sb, &h, f.src, f.out);
        fx_close(&f);
}

static void age_all(struct bucket *b, int64_t secs) {
        for (size_t i = 0; i < b->n; i++)
                b->v[i].mtime -= secs;
}

/* What time passing does to the known list too: its entries are never younger than the
 * objects' uploads. */
static void age_known(const char *store_dir, int64_t secs) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "%s/remote", store_dir);
        DIR *d = opendir(cmd);
        assert_non_null(d);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strstr(de->d_name, ".known"))
                        continue;
                char path[8400];
                snprintf(path, sizeof path, "%s/%s", cmd, de->d_name);
                int fd = open(path, O_RDWR | O_CLOEXEC);
                assert_true(fd >= 0);
                uint8_t e[40];
                for (off_t off = 0; pread(fd, e, sizeof e, off) == (ssize_t)sizeof e; off += 40) {
                        put_le64(e + 32, get_le64(e + 32) - (uint64_t)secs);
                        assert_int_equal(pwrite(fd, e, sizeof e, off), (ssize_t)sizeof e);
                }
                close(fd);
        }
        closedir(d);
}

struct push_job {
        struct store *s;
        struct store_remote *r;
        struct store_hash h;
        int k;
};

static void *push_thread(void *p) {
        struct push_job *j = p;
        j->k = store_push(j->s, j->r, &j->h, &(struct store_remote_opts){ .jobs = 3 }, NULL);
        return NULL;
}

static void test_gc(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-gc");
        struct rng rg = { 17 };
        char path[4200];
        /* x1: common + only1; x2: common + only2 (from A); y: common + onlyy (from B) */
        snprintf(path, sizeof path, "%s/common", f.src);
        assert_int_equal(th_write_file(path, &rg, 20000), 0);
        snprintf(path, sizeof path, "%s/only", f.src);
        assert_int_equal(th_write_file(path, &rg, 20000), 0);
        struct store_hash x1, x2, y;
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ 0 }, &x1), 0);
        assert_int_equal(th_write_file(path, &rg, 20000), 0);
        assert_int_equal(store_capture(f.sa, f.src, &x1, &(struct store_capture_opts){ 0 }, &x2), 0);
        assert_int_equal(th_write_file(path, &rg, 20000), 0);
        assert_int_equal(store_capture(f.sb, f.src, NULL, &(struct store_capture_opts){ 0 }, &y), 0);
        unsigned grace = 100;
        struct store_remote_opts ro = { .grace_s = grace };
        assert_int_equal(store_push(f.sa, f.r, &x1, &ro, NULL), 0);
        assert_int_equal(store_push(f.sa, f.r, &x2, &ro, NULL), 0);
        assert_int_equal(store_push(f.sb, f.r, &y, &ro, NULL), 0);
        /* 3 roots + common + 3 "only" chunks */
        assert_int_equal(count_prefix(f.bk, "objects/"), 7);

        printf("# young: nothing goes\n");
        struct store_remote_gc_result res;
        struct store_remote_gc_opts go = { STORE_REMOTE_GC_OPTS_INIT, .grace_s = grace };
        assert_int_equal(store_remote_gc(f.sa, f.r, &x2, 1, &go, &res), 0);
        assert_int_equal(res.objects_deleted, 0);
        assert_int_equal(res.objects_kept, 3); /* x2: its root, common, its chunk */
        assert_int_equal(res.objects_young, 4); /* x1's and y's root and chunk */
        assert_int_equal(res.snapshots_young, 2);
        struct store_hash live[2] = { x2, y };
        assert_int_equal(store_remote_gc(f.sa, f.r, live, 2, &go, &res), 0);
        assert_int_equal(res.objects_deleted, 0);
        assert_int_equal(res.objects_young, 2);
        assert_int_equal(res.snapshots_young, 1);

        printf("# past the grace: exactly x1's root and chunk and its record go\n");
        age_all(f.bk, grace + 5);
        age_known(f.a, grace + 5);
        assert_int_equal(store_remote_gc(f.sa, f.r, live, 2, &(struct store_remote_gc_opts){
                                                 STORE_REMOTE_GC_OPTS_INIT, .grace_s = grace, .dry_run = true },
                                         &res),
                         0);
        assert_int_equal(res.objects_deleted, 2);
        assert_int_equal(count_prefix(f.bk, "objects/"), 7);
        assert_int_equal(store_remote_gc(f.sa, f.r, live, 2, &go, &res), 0);
        assert_int_equal(res.objects_deleted, 2);
        assert_int_equal(res.snapshots_deleted, 1);
        assert_int_equal(res.objects_kept, 5);
        assert_int_equal(count_prefix(f.bk, "objects/"), 5);
        assert_null(obj_key(f.bk, "snapshots/", &x1));
        struct store_snapshot_info i1;
        assert_int_equal(store_snapshot_get(f.sa, &x1, &i1), 0);
        assert_null(obj_key(f.bk, "objects/", &i1.root));
        printf("# what B's y needs stays although A has no copy: a third store pulls both\n");
        struct store *sc;
        char cdir[4200];
        snprintf(cdir, sizeof cdir, "%s/c", f.base);
        assert_int_equal(store_open(cdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &sc), 0);
        assert_int_equal(store_pull(sc, f.r, &y, NULL, NULL), 0);
        assert_int_equal(store_pull(sc, f.r, &x2, NULL, NULL), 0);
        struct store_verify_result vr;
        assert_int_equal(store_verify(sc, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        store_free(sc);

        printf("# a live snapshot in neither place: -EAGAIN, nothing deleted\n");
        struct store_hash ghost;
        memset(&ghost, 0x5a, sizeof ghost);
        struct store_hash live3[3] = { x2, ghost, y };
        age_all(f.bk, grace + 5);
        size_t before = f.bk->n;
        long dels = f.bk->dels;
        assert_int_equal(store_remote_gc(f.sa, f.r, live3, 3, &go, &res), -EAGAIN);
        assert_non_null(strstr(store_error_detail(), "nothing deleted"));
        assert_int_equal(f.bk->n, before);
        assert_int_equal(f.bk->dels, dels);
        printf("# a live set taken more than half the grace ago: stops before deleting\n");
        assert_int_equal(store_remote_gc(f.sa, f.r, NULL, 0, &(struct store_remote_gc_opts){
                                                 STORE_REMOTE_GC_OPTS_INIT, .grace_s = grace,
                                                 .live_since_ns = store_now_ns() - (int64_t)grace * 1000000000LL },
                                         &res),
                         -ETIMEDOUT);
        assert_int_equal(f.bk->dels, dels);
        printf("# a key that is not ours is left alone\n");
        assert_int_equal(f.r->ops->put(f.r, "objects/not-a-hash", "x", 1), 0);
        age_all(f.bk, grace + 5);
        assert_int_equal(store_remote_gc(f.sa, f.r, live, 2, &go, &res), 0);
        assert_int_equal(res.foreign, 1);
        assert_int_equal(res.objects_deleted, 0);

        printf("# A's known list vouches for x1's deleted objects no more: a push of the same content sends them\n");
        struct store_hash x1again;
        assert_int_equal(store_fork(f.sa, &x1, NULL, NULL, &x1again), 0);
        struct store_remote_stats st = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &x1again, &ro, &st), 0);
        assert_int_equal(st.objects_known, 0);
        assert_int_equal(st.objects_sent, st.objects); /* the shared chunk too: it was old */
        printf("# a GC whose live set predates that push (x1again not in it) keeps what it reuses:\n"
               "# the push renewed every object older than half the grace\n");
        assert_int_equal(store_remote_gc(f.sa, f.r, live, 2, &go, &res), 0);
        assert_int_equal(res.objects_deleted, 0);
        assert_int_equal(res.snapshots_deleted, 0);
        assert_int_equal(store_pull(f.sb, f.r, &x1again, NULL, NULL), 0);

        printf("# two stores pushing the same content at once: both whole\n");
        struct store_hash ya, yb;
        snprintf(path, sizeof path, "%s/both", f.src);
        assert_int_equal(th_write_file(path, &rg, 300000), 0);
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ 0 }, &ya), 0);
        assert_int_equal(store_capture(f.sb, f.src, NULL, &(struct store_capture_opts){ 0 }, &yb), 0);
        struct push_job ja = { f.sa, f.r, ya, 1 }, jb = { f.sb, NULL, yb, 1 };
        assert_int_equal(f.r->ops->clone(f.r, &jb.r), 0);
        pthread_t ta, tb;
        assert_int_equal(pthread_create(&ta, NULL, push_thread, &ja), 0);
        assert_int_equal(pthread_create(&tb, NULL, push_thread, &jb), 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_int_equal(ja.k, 0);
        assert_int_equal(jb.k, 0);
        store_remote_free(jb.r);
        struct store *sd;
        char ddir[4200];
        snprintf(ddir, sizeof ddir, "%s/d", f.base);
        assert_int_equal(store_open(ddir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &sd), 0);
        assert_int_equal(store_pull(sd, f.r, &ya, NULL, NULL), 0);
        assert_int_equal(store_pull(sd, f.r, &yb, NULL, NULL), 0);
        assert_int_equal(store_verify(sd, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        store_free(sd);
        fx_close(&f);
}

static void test_listing(void **state) {
        (void)state;
        struct fx f;
        fx_open(&f, "remote-list");
        struct rng rg = { 19 };
        char path[4200];
        for (int i = 0; i < 100; i++) {
                snprintf(path, sizeof path, "%s/f%03d", f.src, i);
                assert_int_equal(th_write_file(path, &rg, 3000 + (size_t)i), 0);
        }
        struct store_hash a, b, c;
        assert_int_equal(store_capture(f.sa, f.src, NULL, &(struct store_capture_opts){ 0 }, &a), 0);
        printf("# 101 objects unknown: one LIST instead of 101 HEADs\n");
        struct store_remote_stats st = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &a, NULL, &st), 0);
        assert_int_equal(f.bk->heads, 0);
        assert_int_equal(st.objects_sent, st.objects);
        printf("# another store with the same files: the listing finds them, only its record goes\n");
        assert_int_equal(store_capture(f.sb, f.src, NULL, &(struct store_capture_opts){ 0 }, &b), 0);
        struct store_remote_stats sb = { 0 };
        assert_int_equal(store_push(f.sb, f.r, &b, NULL, &sb), 0);
        assert_int_equal(f.bk->heads, 0);
        assert_int_equal(sb.objects_found, sb.objects - 1);
        assert_int_equal(sb.objects_sent, 1);
        printf("# once they are older than half the grace, a third store uploads them again\n");
        age_all(f.bk, STORE_REMOTE_GRACE_DEFAULT / 2 + 10);
        struct store *sc;
        char cdir[4200];
        snprintf(cdir, sizeof cdir, "%s/c", f.base);
        assert_int_equal(store_open(cdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &sc), 0);
        assert_int_equal(store_capture(sc, f.src, NULL, &(struct store_capture_opts){ 0 }, &c), 0);
        struct store_remote_stats scs = { 0 };
        assert_int_equal(store_push(sc, f.r, &c, NULL, &scs), 0);
        assert_int_equal(scs.objects_found, 0);
        assert_int_equal(scs.objects_sent, scs.objects);
        store_free(sc);
        assert_int_equal(store_pull(f.sb, f.r, &a, NULL, NULL), 0);

        printf("# a bucket too large to list for 66 objects (33,000 keys): HEAD each instead\n");
        for (int i = 0; i < 66; i++) {
                snprintf(path, sizeof path, "%s/g%03d", f.src, i);
                assert_int_equal(th_write_file(path, &rg, 2000 + (size_t)i), 0);
        }
        struct store_hash d;
        assert_int_equal(store_capture(f.sa, f.src, &a, &(struct store_capture_opts){ 0 }, &d), 0);
        size_t unknown = 66 + 1; /* the new files and the root tree */
        for (size_t i = 0; f.bk->n < unknown * 500 + 10; i++) {
                struct mem_obj *o = &f.bk->v[f.bk->n++];
                char key[128];
                snprintf(key, sizeof key, "objects/%064zx", i);
                o->key = strdup(key);
                o->data = malloc(1);
                o->n = 1;
                o->mtime = (int64_t)time(NULL);
        }
        long heads = f.bk->heads;
        struct store_remote_stats sd = { 0 };
        assert_int_equal(store_push(f.sa, f.r, &d, NULL, &sd), 0);
        printf("# %ld HEADs, %llu sent\n", f.bk->heads - heads, (unsigned long long)sd.objects_sent);
        assert_int_equal(f.bk->heads - heads, (long)unknown);
        assert_int_equal(sd.objects_sent, unknown + 1);
        fx_close(&f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_memory_and_deltas),
                cmocka_unit_test(test_failure_mid_push), cmocka_unit_test(test_corrupt),
                cmocka_unit_test(test_gc),        cmocka_unit_test(test_listing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
