/* Template routes: list, remove, and build. A build runs on a thread of its own
 * (templates.c); its progress and result stream to the client as NDJSON events. */
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "common/log.h"
#include "daemon/api.h"
#include "daemon/spaced.h"
#include "daemon/templates.h"
#include "daemon/util.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/routes.h"
#include "daemon/http.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define TPL_MAX_PATH 4096

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
                if (tpl_building(c->d, *n) || tpl_info(c->d, *n, &size, &created) < 0)
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

/* ---- a build streaming to its client ---- */

static void build_gone(struct conn *c, void *ctx) {
        (void)c;
        tpl_unwatch(ctx);
}

/* A client that hangs up on the build's stream has left; the build goes on (tpl_unwatch). */
static const struct conn_hook_ops build_hook = { .gone = build_gone, .hangup_is_gone = true };

static void build_event(struct conn *c, const struct buf *b) { conn_stream_event(c, b); }

static void build_progress(void *ctx, struct tpl_job *j, const char *line) {
        (void)j;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "type", "progress");
        json_w_kstr(&w, "message", line);
        json_w_obj_end(&w);
        build_event(ctx, &b);
        buf_free(&b);
}

static void build_done(void *ctx, struct tpl_job *j, int err, const char *msg, uint64_t size) {
        struct conn *c = ctx;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (err < 0) {
                int status = err == -EEXIST ? 409 : err == -EINVAL || err == -ENOENT ? 400 : 500;
                json_w_kstr(&w, "type", "error");
                json_w_key(&w, "error");
                json_w_obj_begin(&w);
                json_w_kstr(&w, "code", http_status_code_name(status));
                json_w_kstr(&w, "message", msg);
                json_w_obj_end(&w);
        } else {
                json_w_kstr(&w, "type", "done");
                json_w_key(&w, "template");
                write_template(&w, c->d->data_dir, tpl_job_name(j), size, time(NULL));
        }
        json_w_obj_end(&w);
        conn_clear_hook(c, j);
        build_event(c, &b);
        conn_stream_end(c);
        buf_free(&b);
}

static const struct tpl_watch_ops build_watch_ops = { .progress = build_progress, .done = build_done };

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
        struct tpl_build_req q = {
                .name = name,
                .base = base,
                .runtime = rt_name,
                .src = { .kind = from_dir ? TEMPLATE_FROM_DIR : from_tar ? TEMPLATE_FROM_TAR : TEMPLATE_FROM_DEBOOTSTRAP,
                         .path = from_dir ? from_dir : from_tar,
                         .suite = suite,
                         .packages = pk.len ? buf_cstr(&pk) : NULL,
                         .mirror = mirror },
        };
        struct tpl_job *j;
        const char *why;
        int r = tpl_build(d, &q, &build_watch_ops, c, &j, &why);
        buf_free(&pk);
        if (r == -EEXIST) {
                conn_reply_error(c, 409, "template %s exists%s", name, why);
                return;
        }
        if (r == -EBUSY) {
                conn_reply_error(c, 409, "%d template builds are running; try later", TPL_MAX_JOBS);
                return;
        }
        if (r == -EAGAIN) {
                conn_reply_error(c, 500, "starting the build: %s", why);
                return;
        }
        if (r < 0) {
                conn_reply_error(c, 500, "out of memory");
                return;
        }
        conn_set_hook(c, &build_hook, j);
        conn_stream_begin(c, 200, "application/x-ndjson");
}
