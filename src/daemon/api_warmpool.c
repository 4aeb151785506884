/* Route handlers of the warm pool (docs/api.md, "Warm pool"): how many sandboxes each
 * template keeps made ahead, and how the pool has fared. */
#include <errno.h>
#include <string.h>

#include "daemon/api.h"
#include "daemon/warmpool.h"
#include "daemon/spaced.h"
#include "daemon/server.h"
#include "daemon/routes.h"
#include "runtime/template.h"

static void reply_pool(struct conn *c) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        wpool_write_json(&w, c->d->pool);
        if (w.err)
                conn_reply_error(c, 500, "out of memory");
        else
                conn_reply_json(c, 200, &b);
        buf_free(&b);
}

/* Both are the operator's: the pool serves every tenant, and its counters tell of all. */
void api_pool_get(struct conn *c) {
        if (api_admin(c))
                reply_pool(c);
}

void api_pool_set(struct conn *c) {
        const char *name = api_param(&c->params, "template");
        _cleanup_json_ struct json *body = NULL;
        if (!api_admin(c) || api_body_json(c, &body) < 0)
                return;
        int64_t size;
        if (json_get_int(body, "size", &size) < 0 || size < 0 || size > WPOOL_MAX_SIZE) {
                conn_reply_error(c, 400, "size must be an integer between 0 and %d", WPOOL_MAX_SIZE);
                return;
        }
        if (!name || !template_name_valid(name)) {
                conn_reply_error(c, 400, "invalid template name \"%.80s\"", name ? name : "");
                return;
        }
        if (!c->d->pool) {
                conn_reply_error(c, 503, "the daemon is starting");
                return;
        }
        int r = wpool_set(c->d->pool, name, (unsigned)size);
        if (r == -EOPNOTSUPP)
                conn_reply_error(c, 409, "runtime %s has no warm pool", c->d->rt->name);
        else if (r == -E2BIG)
                conn_reply_error(c, 409, "pools for at most %d templates", WPOOL_MAX_TEMPLATES);
        else if (r < 0)
                conn_reply_error(c, 500, "setting the pool: %s", strerror(-r));
        else
                reply_pool(c);
}
