/* Template builds (templates.h): one thread per build, a pipe of fixed-size records back
 * to the loop, and the watcher that hears of them. */
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "common/log.h"
#include "daemon/spaced.h"
#include "daemon/templates.h"
#include "daemon/loop.h"
#include "runtime/runtime.h"

#define TPL_MSG_MAX 1024 /* one progress line; records stay under PIPE_BUF, so writes are atomic */

enum { TPL_REC_PROGRESS, TPL_REC_DONE };

struct tpl_rec {
        struct tpl_job *job;
        int kind;
        int result;
        uint64_t size_bytes;
        char text[TPL_MSG_MAX];
};

struct tpl_job {
        struct daemon *d;
        struct tpl_job *next;
        const struct tpl_watch_ops *ops; /* NULL once the watcher went away */
        void *ctx;
        int wfd;
        pthread_t thread;
        char name[TEMPLATE_MAX_NAME + 1];
        bool base;  /* template_ensure_base */
        struct template_source src;
        char *path, *suite, *packages, *mirror;
        char *data_dir;
        char runtime[META_RUNTIME_MAX + 1]; /* its default runtime, "" = none */
};

/* ---- sizes (cached: a walk of a large tree is not free) ---- */

struct size_cache {
        char name[TEMPLATE_MAX_NAME + 1];
        time_t mtime;
        uint64_t size;
};
static struct size_cache size_cache[64];
static __thread uint64_t walk_total;

static int walk_add(const char *p, const struct stat *st, int flag, struct FTW *f) {
        (void)p, (void)flag, (void)f;
        if (S_ISREG(st->st_mode) || S_ISLNK(st->st_mode))
                walk_total += (uint64_t)st->st_size;
        return 0;
}

static uint64_t tree_size(const char *dir) {
        walk_total = 0;
        (void)nftw(dir, walk_add, 32, FTW_PHYS | FTW_MOUNT);
        return walk_total;
}

int tpl_info(struct daemon *d, const char *name, uint64_t *size, time_t *created) {
        _cleanup_free_ char *root = NULL;
        int r = template_rootfs_path(d->data_dir, name, &root);
        if (r < 0)
                return r;
        struct stat st;
        if (stat(root, &st) < 0)
                return -errno;
        *created = st.st_mtime;
        size_t free_slot = ELEMENTSOF(size_cache);
        for (size_t i = 0; i < ELEMENTSOF(size_cache); i++) {
                if (strcmp(size_cache[i].name, name) == 0) {
                        if (size_cache[i].mtime == st.st_mtime) {
                                *size = size_cache[i].size;
                                return 0;
                        }
                        free_slot = i;
                        break;
                }
                if (!size_cache[i].name[0] && free_slot == ELEMENTSOF(size_cache))
                        free_slot = i;
        }
        *size = tree_size(root);
        if (free_slot == ELEMENTSOF(size_cache))
                free_slot = (size_t)(st.st_mtime % (time_t)ELEMENTSOF(size_cache));
        snprintf(size_cache[free_slot].name, sizeof size_cache[free_slot].name, "%s", name);
        size_cache[free_slot].mtime = st.st_mtime;
        size_cache[free_slot].size = *size;
        return 0;
}

/* ---- builds ---- */

bool tpl_building(struct daemon *d, const char *name) {
        for (struct tpl_job *j = d->jobs; j; j = j->next)
                if (strcmp(j->name, name) == 0)
                        return true;
        return false;
}

void tpl_unwatch(struct tpl_job *j) {
        j->ops = NULL;
        j->ctx = NULL;
}

const char *tpl_job_name(const struct tpl_job *j) { return j->name; }

static void send_rec(struct tpl_job *j, int kind, int result, uint64_t size, const char *text) {
        struct tpl_rec rec = { .job = j, .kind = kind, .result = result, .size_bytes = size };
        snprintf(rec.text, sizeof rec.text, "%s", text ? text : "");
        for (char *p = rec.text; *p; p++)
                if (*p == '\n' || *p == '\r')
                        *p = ' ';
        const char *b = (const char *)&rec;
        size_t left = sizeof rec;
        while (left > 0) {
                ssize_t n = write(j->wfd, b, left);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                b += n;
                left -= (size_t)n;
        }
}

static void on_progress(const char *line, void *userdata) { send_rec(userdata, TPL_REC_PROGRESS, 0, 0, line); }

static void *tpl_worker(void *p) {
        struct tpl_job *j = p;
        int r = j->base ? template_ensure_base(j->data_dir, on_progress, j)
                        : template_build(j->data_dir, j->name, &j->src, on_progress, j);
        uint64_t size = 0;
        char msg[TPL_MSG_MAX] = "";
        if (r < 0) {
                const char *e = runtime_last_error();
                snprintf(msg, sizeof msg, "%s", *e ? e : strerror(-r));
        } else {
                _cleanup_free_ char *root = NULL;
                if (template_rootfs_path(j->data_dir, j->name, &root) == 0)
                        size = tree_size(root);
                if (j->runtime[0] && (r = template_runtime_set(j->data_dir, j->name, j->runtime)) < 0)
                        snprintf(msg, sizeof msg, "recording the default runtime: %s", strerror(-r));
        }
        send_rec(j, TPL_REC_DONE, r, size, msg);
        return NULL;
}

static void job_free(struct tpl_job *j) {
        free(j->path);
        free(j->suite);
        free(j->packages);
        free(j->mirror);
        free(j->data_dir);
        free(j);
}

static void tpl_pipe_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct daemon *d = (struct daemon *)((char *)src - offsetof(struct daemon, tpl_src));
        for (int i = 0; i < 32; i++) {
                struct tpl_rec rec;
                ssize_t n = read(src->fd, &rec, sizeof rec);
                if (n < 0)
                        return;
                if (n != (ssize_t)sizeof rec) {
                        log_error("template worker pipe: short record");
                        return;
                }
                struct tpl_job *j = rec.job;
                if (rec.kind == TPL_REC_PROGRESS) {
                        log_debug("template %s: %s", j->name, rec.text);
                        if (j->ops)
                                j->ops->progress(j->ctx, j, rec.text);
                        continue;
                }
                pthread_join(j->thread, NULL);
                for (struct tpl_job **pp = &d->jobs; *pp; pp = &(*pp)->next)
                        if (*pp == j) {
                                *pp = j->next;
                                break;
                        }
                if (rec.result < 0)
                        log_warn("template %s: build failed: %s", j->name, rec.text);
                else
                        log_info("template %s: built (%llu bytes)", j->name, (unsigned long long)rec.size_bytes);
                if (j->ops)
                        j->ops->done(j->ctx, j, rec.result, rec.text, rec.size_bytes);
                job_free(j);
        }
}

int tpl_init(struct daemon *d) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        /* Only the loop's end is non-blocking: a worker waits when the loop is behind. */
        if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
                int e = -errno;
                close(p[0]);
                close(p[1]);
                return e;
        }
        d->tpl_src.fd = p[0];
        d->tpl_src.cb = tpl_pipe_event;
        d->tpl_wfd = p[1];
        return loop_add(d->loop, &d->tpl_src, EPOLLIN);
}

static char *dup_opt(const char *s) { return s ? strdup(s) : NULL; }

int tpl_build(struct daemon *d, const struct tpl_build_req *q, const struct tpl_watch_ops *ops, void *ctx,
              struct tpl_job **ret, const char **why) {
        *why = "";
        if (tpl_building(d, q->name)) {
                *why = " (being built)";
                return -EEXIST;
        }
        if (template_exists(d->data_dir, q->name))
                return -EEXIST;
        size_t n_jobs = 0;
        for (struct tpl_job *j = d->jobs; j; j = j->next)
                n_jobs++;
        if (n_jobs >= TPL_MAX_JOBS)
                return -EBUSY;
        struct tpl_job *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->d = d;
        j->ops = ops;
        j->ctx = ctx;
        j->wfd = d->tpl_wfd;
        j->base = q->base;
        snprintf(j->name, sizeof j->name, "%s", q->name);
        snprintf(j->runtime, sizeof j->runtime, "%s", q->runtime ? q->runtime : "");
        j->data_dir = strdup(d->data_dir);
        j->path = dup_opt(q->src.path);
        j->suite = dup_opt(q->src.suite);
        j->packages = dup_opt(q->src.packages);
        j->mirror = dup_opt(q->src.mirror);
        j->src = (struct template_source){
                .kind = q->src.kind,
                .path = j->path,
                .suite = j->suite,
                .packages = j->packages,
                .mirror = j->mirror,
        };
        if (!j->data_dir || (q->src.path && !j->path) || (q->src.suite && !j->suite) ||
            (q->src.packages && !j->packages) || (q->src.mirror && !j->mirror)) {
                job_free(j);
                return -ENOMEM;
        }
        int r = pthread_create(&j->thread, NULL, tpl_worker, j);
        if (r != 0) {
                job_free(j);
                *why = strerror(r);
                return -EAGAIN;
        }
        j->next = d->jobs;
        d->jobs = j;
        log_info("template %s: build started", q->name);
        *ret = j;
        return 0;
}
