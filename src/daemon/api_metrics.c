/* Usage metrics over HTTP (docs/api.md "Metrics"): GET /v1/sessions/{id}/metrics, a
 * session's samples between ?start= and ?end=; GET /metrics, the daemon's Prometheus text
 * (the local operator only); and the count of every answer by route. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/json.h"
#include "daemon/api.h"
#include "daemon/http.h"
#include "daemon/metrics.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/spaced.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ?key= as Unix ms: def when absent; else 400 with what it must be. */
static int query_time(struct conn *c, const char *key, int64_t def, int64_t *ret) {
        char v[METRICS_TIME_MAX + 1];
        int r = http_query_get(c->req->query, key, v, sizeof v);
        if (r == -ENOENT) {
                *ret = def;
                return 0;
        }
        if (r < 0 || metrics_parse_time(v, ret) < 0) {
                conn_reply_error(c, 400, "query parameter %s must be Unix seconds or an RFC 3339 time (like 2026-12-03T10:00:00Z)",
                                 key);
                return -EINVAL;
        }
        return 0;
}

int api_query_range(struct conn *c, int64_t *ret_from, int64_t *ret_to) {
        int64_t from, to;
        if (query_time(c, "start", INT64_MIN, &from) < 0 || query_time(c, "end", INT64_MAX, &to) < 0)
                return -EINVAL;
        if (from > to) {
                conn_reply_error(c, 400, "start is after end");
                return -EINVAL;
        }
        *ret_from = from;
        *ret_to = to;
        return 0;
}

void api_session_metrics(struct conn *c) {
        int64_t from, to, limit;
        if (api_query_range(c, &from, &to) < 0 ||
            api_query_int(c, "limit", METRICS_RING_MAX, 1, METRICS_RING_MAX, &limit) < 0)
                return;
        struct session *s = api_session(c, false);
        if (!s)
                return;
        struct api_json j;
        api_json_begin(&j);
        metrics_write_session_json(c->d, s, from, to, (size_t)limit, &j.w);
        api_json_reply(c, 200, &j);
}

void api_metrics(struct conn *c) {
        if (!api_admin(c))
                return;
        struct buf b = BUF_INIT(0);
        if (metrics_write_exposition(c->d, &b) < 0)
                conn_reply_error(c, 500, "out of memory");
        else
                conn_reply_typed(c, 200, METRICS_CONTENT_TYPE, &b);
        buf_free(&b);
}

void api_answered(struct conn *c, int status) { metrics_http_answer(c->d->metrics, c->route, status); }
