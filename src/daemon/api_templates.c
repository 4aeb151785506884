/* Templates: list, remove, and build. A build (copy, untar or debootstrap) blocks for
 * seconds to minutes, so it runs in a worker thread; the thread reports progress lines
 * and its result as fixed-size records on a pipe that the event loop reads, and the loop
 * streams them to the client as NDJSON. The worker never touches daemon state. */
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "common/log.h"
#include "daemon/api.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define TPL_MSG_MAX 1024 /* one progress line; records stay under PIPE_BUF, so writes are atomic */
#define TPL_MAX_JOBS 8   /* builds at once */
#define TPL_MAX_PATH 4096

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
        struct conn *conn;
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

static int template_info(struct daemon *d, const char *name, uint64_t *size, time_t *created) {
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

static void write_template(struct json_writer *w, const char *data_dir, const char *name, uint64_t size,
                           time_t created) {
        char ts[40], rt[META_RUNTIME_MAX + 1];
        util_rfc3339(created, ts, sizeof ts);
        json_w_obj_begin(w);
        json_w_kstr(w, "name", name);
        /* Sessions made from it run on this unless they ask for another; null: spaced's default. */
        json_w_kstr(w, "runtime", template_runtime_get(data_dir, name, rt, sizeof rt) == 0 ? rt : NULL);
        json_w_key(w, "size_bytes");
        json_w_uint(w, size);
        json_w_kstr(w, "created_at", ts);
        json_w_obj_end(w);
}

void api_template_list(struct conn *c) {
        char **names = NULL;
        int r = template_list(c->d->data_dir, &names);
        if (r < 0) {
                conn_reply_error(c, 500, "listing templates: %s", *runtime_last_error() ? runtime_last_error() : strerror(-r));
                return;
        }
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "templates");
        json_w_arr_begin(&w);
        for (char **n = names; n && *n; n++) {
                uint64_t size = 0;
                time_t created = 0;
                if (tpl_building(c->d, *n) || template_info(c->d, *n, &size, &created) < 0)
                        continue;
                write_template(&w, c->d->data_dir, *n, size, created);
        }
        json_w_arr_end(&w);
        json_w_obj_end(&w);
        template_list_free(names);
        conn_reply_json(c, 200, &b);
        buf_free(&b);
}

void api_template_delete(struct conn *c) {
        if (!api_admin(c))
                return;
        const char *name = api_param(&c->params, "name");
        if (!name || !template_name_valid(name)) {
                conn_reply_error(c, 400, "invalid template name");
                return;
        }
        if (tpl_building(c->d, name)) {
                conn_reply_error(c, 409, "template %s is being built", name);
                return;
        }
        if (!template_exists(c->d->data_dir, name)) {
                conn_reply_error(c, 404, "no template %s", name);
                return;
        }
        if (ses_template_in_use(c->d, name)) {
                conn_reply_error(c, 409, "template %s is used by a session", name);
                return;
        }
        int r = template_remove(c->d->data_dir, name);
        if (r < 0) {
                conn_reply_error(c, r == -ENOENT ? 404 : 500, "removing template %s: %s", name,
                                 *runtime_last_error() ? runtime_last_error() : strerror(-r));
                return;
        }
        log_info("template %s removed", name);
        conn_reply_empty(c, 204);
}

/* ---- builds ---- */

bool tpl_building(struct daemon *d, const char *name) {
        for (struct tpl_job *j = d->jobs; j; j = j->next)
                if (strcmp(j->name, name) == 0)
                        return true;
        return false;
}

void tpl_conn_gone(struct tpl_job *j) {
        /* The build goes on; its result only reaches the log. */
        j->conn = NULL;
}

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

static void job_event_line(struct tpl_job *j, const struct buf *b) {
        if (j->conn)
                conn_stream_event(j->conn, b);
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
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                if (rec.kind == TPL_REC_PROGRESS) {
                        log_debug("template %s: %s", j->name, rec.text);
                        json_w_obj_begin(&w);
                        json_w_kstr(&w, "type", "progress");
                        json_w_kstr(&w, "message", rec.text);
                        json_w_obj_end(&w);
                        job_event_line(j, &b);
                        buf_free(&b);
                        continue;
                }
                pthread_join(j->thread, NULL);
                for (struct tpl_job **pp = &d->jobs; *pp; pp = &(*pp)->next)
                        if (*pp == j) {
                                *pp = j->next;
                                break;
                        }
                json_w_obj_begin(&w);
                if (rec.result < 0) {
                        log_warn("template %s: build failed: %s", j->name, rec.text);
                        int status = rec.result == -EEXIST ? 409 : rec.result == -EINVAL || rec.result == -ENOENT ? 400 : 500;
                        json_w_kstr(&w, "type", "error");
                        json_w_key(&w, "error");
                        json_w_obj_begin(&w);
                        json_w_kstr(&w, "code", http_status_code_name(status));
                        json_w_kstr(&w, "message", rec.text);
                        json_w_obj_end(&w);
                } else {
                        log_info("template %s: built (%llu bytes)", j->name, (unsigned long long)rec.size_bytes);
                        json_w_kstr(&w, "type", "done");
                        json_w_key(&w, "template");
                        write_template(&w, j->data_dir, j->name, rec.size_bytes, time(NULL));
                }
                json_w_obj_end(&w);
                if (j->conn) {
                        struct conn *c = j->conn;
                        c->job = NULL;
                        conn_stream_event(c, &b);
                        conn_stream_end(c);
                }
                buf_free(&b);
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

void api_template_build(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        if (!api_admin(c) || api_body_json(c, &body) < 0)
                return;
        struct daemon *d = c->d;
        const char *name = json_get_str(body, "name");
        if (!name || !template_name_valid(name)) {
                conn_reply_error(c, 400, "name must match [a-z0-9][a-z0-9._-]{0,63}");
                return;
        }
        const struct json *rtv = json_get(body, "runtime");
        const char *rt_name = rtv && json_type(rtv) != JSON_NULL ? json_str(rtv) : NULL;
        if (rtv && json_type(rtv) != JSON_NULL && (!rt_name || !runtime_find(rt_name))) {
                conn_reply_error(c, 400, "unknown runtime \"%.40s\" (ns, gvisor, microvm)", rt_name ? rt_name : "(not a string)");
                return;
        }
        const char *from_dir = json_get_str(body, "from_dir"), *from_tar = json_get_str(body, "from_tar");
        const struct json *deb = json_get(body, "debootstrap");
        int n_src = !!from_dir + !!from_tar + !!deb;
        if (n_src > 1) {
                conn_reply_error(c, 400, "give one of from_dir, from_tar, debootstrap");
                return;
        }
        bool base = n_src == 0;
        if (base && strcmp(name, TEMPLATE_BASE) != 0) {
                conn_reply_error(c, 400, "give one of from_dir, from_tar, debootstrap (only \"%s\" has a default)", TEMPLATE_BASE);
                return;
        }
        if ((from_dir && (!*from_dir || strlen(from_dir) > TPL_MAX_PATH)) ||
            (from_tar && (!*from_tar || strlen(from_tar) > TPL_MAX_PATH))) {
                conn_reply_error(c, 400, "bad source path");
                return;
        }
        const char *suite = NULL, *mirror = NULL;
        struct buf pk = BUF_INIT(TEMPLATE_MAX_PACKAGES_LEN);
        if (deb) {
                if (json_type(deb) != JSON_OBJECT || !(suite = json_get_str(deb, "suite")) || !*suite) {
                        conn_reply_error(c, 400, "debootstrap must be {\"suite\":\"bookworm\",\"packages\":[...]}");
                        return;
                }
                mirror = json_get_str(deb, "mirror");
                const struct json *pkgs = json_get(deb, "packages");
                if (pkgs && json_type(pkgs) != JSON_ARRAY) {
                        conn_reply_error(c, 400, "debootstrap.packages must be an array of strings");
                        return;
                }
                if (json_len(pkgs) > TEMPLATE_MAX_PACKAGES) {
                        conn_reply_error(c, 413, "more than %d packages", TEMPLATE_MAX_PACKAGES);
                        return;
                }
                for (size_t i = 0; i < json_len(pkgs); i++) {
                        const char *p = json_str(json_at(pkgs, i));
                        if (!p || !*p || strchr(p, ',')) {
                                buf_free(&pk);
                                conn_reply_error(c, 400, "debootstrap.packages must be package names");
                                return;
                        }
                        if ((i && buf_putc(&pk, ',') < 0) || buf_puts(&pk, p) < 0) {
                                buf_free(&pk);
                                conn_reply_error(c, 413, "package list over %d bytes", TEMPLATE_MAX_PACKAGES_LEN);
                                return;
                        }
                }
        }
        if (tpl_building(d, name) || template_exists(d->data_dir, name)) {
                buf_free(&pk);
                conn_reply_error(c, 409, "template %s exists%s", name, tpl_building(d, name) ? " (being built)" : "");
                return;
        }
        size_t n_jobs = 0;
        for (struct tpl_job *j = d->jobs; j; j = j->next)
                n_jobs++;
        if (n_jobs >= TPL_MAX_JOBS) {
                buf_free(&pk);
                conn_reply_error(c, 409, "%d template builds are running; try later", TPL_MAX_JOBS);
                return;
        }
        struct tpl_job *j = calloc(1, sizeof *j);
        if (!j) {
                buf_free(&pk);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        j->d = d;
        j->wfd = d->tpl_wfd;
        j->base = base;
        snprintf(j->name, sizeof j->name, "%s", name);
        snprintf(j->runtime, sizeof j->runtime, "%s", rt_name ? rt_name : "");
        j->data_dir = strdup(d->data_dir);
        j->path = dup_opt(from_dir ? from_dir : from_tar);
        j->suite = dup_opt(suite);
        j->packages = pk.len ? strdup(buf_cstr(&pk)) : NULL;
        j->mirror = dup_opt(mirror);
        buf_free(&pk);
        j->src = (struct template_source){
                .kind = from_dir ? TEMPLATE_FROM_DIR : from_tar ? TEMPLATE_FROM_TAR : TEMPLATE_FROM_DEBOOTSTRAP,
                .path = j->path,
                .suite = j->suite,
                .packages = j->packages,
                .mirror = j->mirror,
        };
        if (!j->data_dir || ((from_dir || from_tar) && !j->path) || (suite && !j->suite)) {
                job_free(j);
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        int r = pthread_create(&j->thread, NULL, tpl_worker, j);
        if (r != 0) {
                job_free(j);
                conn_reply_error(c, 500, "starting the build: %s", strerror(r));
                return;
        }
        j->next = d->jobs;
        d->jobs = j;
        j->conn = c;
        c->job = j;
        log_info("template %s: build started", name);
        conn_stream_begin(c, 200, "application/x-ndjson");
}
