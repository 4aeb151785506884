/* Usage metrics: the per-session sampler and rings, the daemon's counters and histograms,
 * and their Prometheus text exposition (format 0.0.4). Every read of the sampler is a
 * small sysfs or cgroup file (and the quota volume's usage), so it runs on the loop. */
#include "daemon/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "daemon/disk.h"
#include "daemon/net/net.h"
#include "daemon/routes.h"
#include "daemon/replicate.h"
#include "daemon/session.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/warmpool.h"
#include "meta/meta.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"

/* ---- rings ---- */

struct metrics_ring *metrics_ring_free(struct metrics_ring *r) {
        free(r);
        return NULL;
}

void metrics_ring_push(struct metrics_ring *r, const struct metrics_sample *smp) {
        r->v[r->head] = *smp;
        r->head = (r->head + 1) % METRICS_RING_MAX;
        if (r->n < METRICS_RING_MAX)
                r->n++;
}

const struct metrics_sample *metrics_ring_at(const struct metrics_ring *r, size_t i) {
        size_t first = (r->head + METRICS_RING_MAX - r->n) % METRICS_RING_MAX;
        return &r->v[(first + i) % METRICS_RING_MAX];
}

/* ---- histograms and the exposition writer ---- */

void metrics_hist_observe(struct metrics_hist *h, double v) {
        size_t i = 0;
        while (i < h->n_bounds && v > h->bounds[i])
                i++;
        h->counts[i]++;
        h->sum += v;
        h->count++;
}

void metrics_label_escape(const char *v, char *out, size_t outsz) {
        size_t o = 0;
        if (!outsz)
                return;
        for (; *v && o + 2 < outsz; v++) {
                if (*v == '\\' || *v == '"') {
                        out[o++] = '\\';
                        out[o++] = *v;
                } else if (*v == '\n') {
                        out[o++] = '\\';
                        out[o++] = 'n';
                } else {
                        out[o++] = *v;
                }
        }
        out[o] = '\0';
}

void metrics_w_family(struct buf *b, const char *name, const char *type, const char *help) {
        (void)buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void w_value(struct buf *b, double v) {
        if (isinf(v))
                (void)buf_puts(b, v > 0 ? "+Inf" : "-Inf");
        else if (isnan(v))
                (void)buf_puts(b, "NaN");
        else if (v == floor(v) && fabs(v) < 9e15)
                (void)buf_printf(b, "%.0f", v);
        else
                (void)buf_printf(b, "%.9g", v);
}

void metrics_w_sample(struct buf *b, const char *name, const char *labels, double v) {
        if (labels && *labels)
                (void)buf_printf(b, "%s{%s} ", name, labels);
        else
                (void)buf_printf(b, "%s ", name);
        w_value(b, v);
        (void)buf_putc(b, '\n');
}

void metrics_w_hist(struct buf *b, const char *name, const char *labels, const struct metrics_hist *h) {
        const char *sep = labels && *labels ? "," : "";
        uint64_t cum = 0;
        for (size_t i = 0; i <= h->n_bounds; i++) {
                cum += h->counts[i];
                (void)buf_printf(b, "%s_bucket{%s%sle=\"", name, labels ? labels : "", sep);
                w_value(b, i < h->n_bounds ? h->bounds[i] : INFINITY);
                (void)buf_printf(b, "\"} %" PRIu64 "\n", cum);
        }
        char n[128];
        snprintf(n, sizeof n, "%s_sum", name);
        metrics_w_sample(b, n, labels, h->sum);
        snprintf(n, sizeof n, "%s_count", name);
        metrics_w_sample(b, n, labels, (double)h->count);
}

/* ---- time parameters ---- */

static int parse_digits(const char **p, int n, int *ret) {
        int v = 0;
        for (int i = 0; i < n; i++, (*p)++) {
                if (**p < '0' || **p > '9')
                        return -EINVAL;
                v = v * 10 + (**p - '0');
        }
        *ret = v;
        return 0;
}

/* ".123" (up to 9 digits) -> ms; nothing -> 0. */
static int parse_frac(const char **p, int64_t *ret_ms) {
        int64_t ms = 0;
        if (**p != '.') {
                *ret_ms = 0;
                return 0;
        }
        (*p)++;
        int n = 0;
        for (; **p >= '0' && **p <= '9'; (*p)++, n++)
                if (n < 3)
                        ms = ms * 10 + (**p - '0');
        if (n == 0 || n > 9)
                return -EINVAL;
        for (; n < 3; n++)
                ms *= 10;
        *ret_ms = ms;
        return 0;
}

int metrics_parse_time(const char *s, int64_t *ret_ms) {
        if (!s || !*s || strlen(s) > METRICS_TIME_MAX)
                return -EINVAL;
        const char *p = s;
        int64_t frac;
        if (strchr(s, '-') == NULL || strchr(s, 'T') == NULL) {
                /* Unix seconds */
                int64_t sec = 0;
                int n = 0;
                for (; *p >= '0' && *p <= '9'; p++, n++) {
                        if (n >= 12)
                                return -EINVAL;
                        sec = sec * 10 + (*p - '0');
                }
                if (n == 0 || parse_frac(&p, &frac) < 0 || *p)
                        return -EINVAL;
                *ret_ms = sec * 1000 + frac;
                return 0;
        }
        int Y, M, D, h, m, sec, oh = 0, om = 0;
        if (parse_digits(&p, 4, &Y) < 0 || *p++ != '-' || parse_digits(&p, 2, &M) < 0 || *p++ != '-' ||
            parse_digits(&p, 2, &D) < 0 || (*p != 'T' && *p != 't') || !*p++ || parse_digits(&p, 2, &h) < 0 ||
            *p++ != ':' || parse_digits(&p, 2, &m) < 0 || *p++ != ':' || parse_digits(&p, 2, &sec) < 0 ||
            parse_frac(&p, &frac) < 0)
                return -EINVAL;
        int sign = 0;
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                sign = *p++ == '+' ? 1 : -1;
                if (parse_digits(&p, 2, &oh) < 0 || *p++ != ':' || parse_digits(&p, 2, &om) < 0 || oh > 23 || om > 59)
                        return -EINVAL;
        } else {
                return -EINVAL;
        }
        if (*p || Y < 1970 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
                return -EINVAL;
        struct tm tm = { .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = sec };
        time_t t = timegm(&tm);
        if (t == (time_t)-1 || tm.tm_mday != D) /* Feb 30 normalizes to March */
                return -EINVAL;
        t -= sign * (oh * 3600 + om * 60);
        *ret_ms = (int64_t)t * 1000 + frac;
        return 0;
}

/* ---- the daemon's counters ---- */

static const double lat_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 };
static const double bytes_bounds[] = { 4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30,
                                       4.0 * (1 << 30), 16.0 * (1 << 30) };
static const char *const op_names[METRICS_OP_MAX] = {
        [METRICS_OP_CREATE] = "create",   [METRICS_OP_RESUME] = "resume",     [METRICS_OP_FORK] = "fork",
        [METRICS_OP_RECOVER] = "recover", [METRICS_OP_SNAPSHOT] = "snapshot", [METRICS_OP_PAUSE] = "pause",
        [METRICS_OP_RESTORE] = "restore",
};
#define HTTP_CLASSES 5 /* 1xx..5xx */

struct metrics {
        struct daemon *d;
        struct loop_src timer;
        uint64_t interval_ms;
        uint64_t ops[METRICS_OP_MAX][2]; /* [op][ok] */
        struct metrics_hist lat[METRICS_OP_MAX];
        struct metrics_hist snap_bytes;
        uint64_t (*http)[HTTP_CLASSES]; /* [route index, api_n_routes: none][class] */
        uint64_t samples;               /* taken in all */
        uint64_t sample_errors;         /* a session whose health could not be read */
        uint64_t store_bytes;           /* DATA/store/packs, as of the last sampling */
};

void metrics_op_done(struct metrics *m, enum metrics_op op, bool ok, uint64_t ms) {
        if (!m || (unsigned)op >= METRICS_OP_MAX)
                return;
        m->ops[op][ok]++;
        metrics_hist_observe(&m->lat[op], (double)ms / 1000.0);
}

void metrics_snapshot_bytes(struct metrics *m, uint64_t bytes) {
        if (m)
                metrics_hist_observe(&m->snap_bytes, (double)bytes);
}

void metrics_http_answer(struct metrics *m, const void *route, int status) {
        if (!m || status < 100 || status > 599)
                return;
        size_t i = api_n_routes;
        if (route) {
                const struct api_route *r = route;
                if (r >= api_routes && r < api_routes + api_n_routes)
                        i = (size_t)(r - api_routes);
        }
        m->http[i][status / 100 - 1]++;
}

uint64_t metrics_interval_ms(const struct metrics *m) { return m ? m->interval_ms : METRICS_INTERVAL_DEFAULT_MS; }

/* ---- the sampler ---- */

/* The host end of the sandbox's veth in netdev (/proc/self/net/dev, spaced's own network
 * namespace, as /sys/class/net is not when sysfs was mounted in another): what the
 * sandbox sends, the host end receives. */
static void read_net(struct session *s, const char *netdev, uint64_t *rx, uint64_t *tx) {
        struct daemon *d = s->d;
        *rx = *tx = 0;
        struct net_lease *l = d->net && netdev ? net_lease_find(d->net, s->sbx_id) : NULL;
        if (!l)
                return;
        char name[24];
        int n = snprintf(name, sizeof name, NET_HOST_PREFIX "%05x:", net_lease_slot(l));
        for (const char *p = netdev; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
                while (*p == ' ')
                        p++;
                if (strncmp(p, name, (size_t)n) != 0)
                        continue;
                /* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ... */
                unsigned long long v[9];
                if (sscanf(p + n, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                           &v[5], &v[6], &v[7], &v[8]) == 9) {
                        *tx = v[0]; /* the host end's rx */
                        *rx = v[8];
                }
                return;
        }
}

static void sample_session(struct metrics *m, struct session *s, const char *netdev, int64_t now_ms) {
        struct rt_health h = { 0 };
        if (s->rt->health(s->sb, &h) < 0) {
                m->sample_errors++;
                return;
        }
        if (!s->metrics) {
                s->metrics = calloc(1, sizeof *s->metrics);
                if (!s->metrics)
                        return;
        }
        struct metrics_ring *r = s->metrics;
        struct metrics_sample smp = { .t_ms = now_ms, .cpu_ns = h.cpu_ns, .memory_bytes = h.memory_bytes,
                                      .memory_limit_bytes = h.memory_limit_bytes };
        if (disk_usage(s, &smp.disk_bytes) < 0)
                smp.disk_bytes = 0;
        read_net(s, netdev, &smp.net_rx_bytes, &smp.net_tx_bytes);
        if (r->n && strcmp(r->sbx, s->sbx_id) == 0) {
                const struct metrics_sample *prev = metrics_ring_at(r, r->n - 1);
                if (now_ms > prev->t_ms && smp.cpu_ns >= prev->cpu_ns)
                        smp.cpu_pct = (double)(smp.cpu_ns - prev->cpu_ns) / 1e6 / (double)(now_ms - prev->t_ms) * 100.0;
        }
        snprintf(r->sbx, sizeof r->sbx, "%s", s->sbx_id);
        metrics_ring_push(r, &smp);
        m->samples++;
}

/* Bytes of the store's pack files: one directory listing, no object is read. */
static uint64_t store_bytes(const char *data_dir) {
        char p[4096];
        if (snprintf(p, sizeof p, "%s/store/packs", data_dir) >= (int)sizeof p)
                return 0;
        DIR *dir = opendir(p);
        if (!dir)
                return 0;
        uint64_t sum = 0;
        struct dirent *e;
        while ((e = readdir(dir))) {
                struct stat st;
                if (e->d_name[0] != '.' && fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        sum += (uint64_t)st.st_size;
        }
        closedir(dir);
        return sum;
}

void metrics_sample_all(struct metrics *m) {
        int64_t now = meta_now_ms();
        struct buf netdev = BUF_INIT(METRICS_NETDEV_MAX);
        if (m->d->net) {
                _cleanup_close_ int fd = open("/proc/self/net/dev", O_RDONLY | O_CLOEXEC);
                if (fd < 0 || buf_read_fd(&netdev, fd) < 0 || !buf_cstr(&netdev))
                        buf_reset(&netdev); /* no network bytes this time */
        }
        for (struct session *s = m->d->sessions; s; s = s->next)
                if (!s->freed && ses_usable(s))
                        sample_session(m, s, netdev.len ? netdev.data : NULL, now);
        buf_free(&netdev);
        m->store_bytes = store_bytes(m->d->data_dir);
}

static void timer_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct metrics *m = (struct metrics *)((char *)src - offsetof(struct metrics, timer));
        uint64_t ticks;
        (void)!read(src->fd, &ticks, sizeof ticks);
        metrics_sample_all(m);
}

int metrics_new(struct daemon *d, uint64_t interval_ms, struct metrics **ret) {
        if (interval_ms < METRICS_INTERVAL_MIN_S * 1000ull || interval_ms > METRICS_INTERVAL_MAX_S * 1000ull)
                return -EINVAL;
        struct metrics *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->d = d;
        m->interval_ms = interval_ms;
        m->timer.fd = -1;
        m->http = calloc(api_n_routes + 1, sizeof *m->http);
        if (!m->http) {
                metrics_free(m);
                return -ENOMEM;
        }
        for (size_t i = 0; i < METRICS_OP_MAX; i++) {
                m->lat[i].bounds = lat_bounds;
                m->lat[i].n_bounds = ELEMENTSOF(lat_bounds);
        }
        m->snap_bytes.bounds = bytes_bounds;
        m->snap_bytes.n_bounds = ELEMENTSOF(bytes_bounds);
        m->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        m->timer.cb = timer_event;
        struct timespec iv = { .tv_sec = (time_t)(interval_ms / 1000), .tv_nsec = (long)(interval_ms % 1000) * 1000000 };
        struct itimerspec its = { .it_interval = iv, .it_value = iv };
        if (m->timer.fd < 0 || timerfd_settime(m->timer.fd, 0, &its, NULL) < 0 ||
            loop_add(d->loop, &m->timer, EPOLLIN) < 0) {
                int r = -errno;
                metrics_free(m);
                return r < 0 ? r : -EIO;
        }
        *ret = m;
        return 0;
}

struct metrics *metrics_free(struct metrics *m) {
        if (!m)
                return NULL;
        if (m->timer.registered)
                loop_del(m->d->loop, &m->timer);
        safe_close(m->timer.fd);
        free(m->http);
        free(m);
        return NULL;
}

/* ---- GET /v1/sessions/{id}/metrics ---- */

void metrics_write_session_json(struct daemon *d, struct session *s, int64_t from_ms, int64_t to_ms, size_t limit,
                                struct json_writer *w) {
        json_w_obj_begin(w);
        json_w_kint(w, "interval_ms", (int64_t)metrics_interval_ms(d->metrics));
        json_w_key(w, "samples");
        json_w_arr_begin(w);
        const struct metrics_ring *r = s->metrics;
        size_t in = 0, skip;
        for (size_t i = 0; r && i < r->n; i++) {
                const struct metrics_sample *x = metrics_ring_at(r, i);
                in += x->t_ms >= from_ms && x->t_ms <= to_ms;
        }
        skip = in > limit ? in - limit : 0; /* the newest limit */
        for (size_t i = 0; r && i < r->n; i++) {
                const struct metrics_sample *x = metrics_ring_at(r, i);
                if (x->t_ms < from_ms || x->t_ms > to_ms)
                        continue;
                if (skip) {
                        skip--;
                        continue;
                }
                char ts[40];
                dl_rfc3339_ms(x->t_ms, ts, sizeof ts);
                json_w_obj_begin(w);
                json_w_kstr(w, "t", ts);
                json_w_kint(w, "t_ms", x->t_ms);
                json_w_kuint(w, "cpu_ms", x->cpu_ns / 1000000);
                json_w_key(w, "cpu_pct");
                json_w_double(w, round(x->cpu_pct * 10) / 10);
                json_w_kuint(w, "memory_bytes", x->memory_bytes);
                json_w_kuint(w, "memory_limit_bytes", x->memory_limit_bytes);
                json_w_kuint(w, "disk_bytes", x->disk_bytes);
                json_w_kuint(w, "net_rx_bytes", x->net_rx_bytes);
                json_w_kuint(w, "net_tx_bytes", x->net_tx_bytes);
                json_w_obj_end(w);
        }
        json_w_arr_end(w);
        json_w_obj_end(w);
}

/* ---- GET /metrics ---- */

static void w_sessions(struct daemon *d, struct buf *b) {
        metrics_w_family(b, "space_sessions", "gauge", "Sessions by state and runtime.");
        const struct runtime_ops *rt;
        for (size_t k = 0; (rt = runtime_nth(k)); k++)
                for (int st = 0; st < _META_SESSION_STATE_MAX; st++) {
                        size_t n = 0;
                        for (struct session *s = d->sessions; s; s = s->next)
                                n += !s->freed && s->state == (enum meta_session_state)st && s->rt == rt;
                        char l[128];
                        snprintf(l, sizeof l, "state=\"%s\",runtime=\"%s\"",
                                 meta_session_state_name((enum meta_session_state)st), rt->name);
                        metrics_w_sample(b, "space_sessions", l, (double)n);
                }
}

struct pool_ctx {
        struct buf *b;
        const char *name;
        int which;
};

static void w_pool_level(const struct wpool_level *lv, void *ud) {
        struct pool_ctx *p = ud;
        char esc[128], l[160];
        metrics_label_escape(lv->template, esc, sizeof esc);
        snprintf(l, sizeof l, "template=\"%s\"", esc);
        metrics_w_sample(p->b, p->name, l, p->which == 0 ? lv->ready : p->which == 1 ? lv->size : lv->making);
}

int metrics_write_exposition(struct daemon *d, struct buf *b) {
        struct metrics *m = d->metrics;
        w_sessions(d, b);
        if (m) {
                metrics_w_family(b, "space_session_operations_total", "counter",
                                 "Lifecycle operations finished, by operation and result.");
                for (size_t i = 0; i < METRICS_OP_MAX; i++)
                        for (int ok = 1; ok >= 0; ok--) {
                                char l[64];
                                snprintf(l, sizeof l, "op=\"%s\",result=\"%s\"", op_names[i], ok ? "ok" : "error");
                                metrics_w_sample(b, "space_session_operations_total", l, (double)m->ops[i][ok]);
                        }
                metrics_w_family(b, "space_session_operation_duration_seconds", "histogram",
                                 "Time from request to answer of lifecycle operations.");
                for (size_t i = 0; i < METRICS_OP_MAX; i++) {
                        char l[32];
                        snprintf(l, sizeof l, "op=\"%s\"", op_names[i]);
                        metrics_w_hist(b, "space_session_operation_duration_seconds", l, &m->lat[i]);
                }
                metrics_w_family(b, "space_snapshot_bytes", "histogram",
                                 "Bytes each snapshot added to the store.");
                metrics_w_hist(b, "space_snapshot_bytes", "", &m->snap_bytes);
                metrics_w_family(b, "space_http_responses_total", "counter",
                                 "HTTP answers by route and status class (route \"none\": no route matched).");
                for (size_t i = 0; i <= api_n_routes; i++)
                        for (int c = 1; c < HTTP_CLASSES; c++) {
                                if (!m->http[i][c])
                                        continue;
                                char l[256];
                                if (i < api_n_routes)
                                        snprintf(l, sizeof l, "method=\"%s\",route=\"%s\",code=\"%dxx\"",
                                                 api_routes[i].method, api_routes[i].pattern, c + 1);
                                else
                                        snprintf(l, sizeof l, "method=\"\",route=\"none\",code=\"%dxx\"", c + 1);
                                metrics_w_sample(b, "space_http_responses_total", l, (double)m->http[i][c]);
                        }
                metrics_w_family(b, "space_metrics_samples_total", "counter",
                                 "Usage samples taken of running sessions.");
                metrics_w_sample(b, "space_metrics_samples_total", "", (double)m->samples);
                metrics_w_family(b, "space_metrics_sample_errors_total", "counter",
                                 "Samplings that could not read a session's usage.");
                metrics_w_sample(b, "space_metrics_sample_errors_total", "", (double)m->sample_errors);
        }
        metrics_w_family(b, "space_store_bytes", "gauge", "Bytes of the snapshot store's pack files.");
        metrics_w_sample(b, "space_store_bytes", "", (double)(m ? m->store_bytes : store_bytes(d->data_dir)));
        if (d->repl) { /* spaced --s3-endpoint (replicate.h) */
                struct repl_status rs;
                repl_status(d->repl, &rs);
                metrics_w_family(b, "space_replication_pending", "gauge", "Snapshots not yet whole in the replication bucket.");
                metrics_w_sample(b, "space_replication_pending", "", (double)rs.pending);
                metrics_w_family(b, "space_replication_failed", "gauge", "Of those, the ones whose last push failed.");
                metrics_w_sample(b, "space_replication_failed", "", (double)rs.failed);
                metrics_w_family(b, "space_replication_pushed_total", "counter", "Snapshots replicated.");
                metrics_w_sample(b, "space_replication_pushed_total", "", (double)rs.pushed);
        }
        static const char *const pool_fams[][2] = {
                { "space_pool_ready", "Warm pool sandboxes ready, by template." },
                { "space_pool_target", "Warm pool size asked, by template." },
                { "space_pool_making", "Warm pool sandboxes being made, by template." },
        };
        for (int k = 0; k < 3; k++) {
                metrics_w_family(b, pool_fams[k][0], "gauge", pool_fams[k][1]);
                struct pool_ctx p = { .b = b, .name = pool_fams[k][0], .which = k };
                wpool_each_level(d->pool, w_pool_level, &p);
        }
        struct wpool_counts pc;
        wpool_get_counts(d->pool, &pc);
        metrics_w_family(b, "space_pool_sandboxes_total", "counter",
                         "Warm pool sandboxes by what happened to them.");
        const struct {
                const char *ev;
                uint64_t v;
        } pe[] = { { "made", pc.made },     { "taken", pc.taken }, { "missed", pc.missed },
                   { "failed", pc.failed }, { "died", pc.died },   { "discarded", pc.discarded } };
        for (size_t i = 0; i < ELEMENTSOF(pe); i++) {
                char l[32];
                snprintf(l, sizeof l, "event=\"%s\"", pe[i].ev);
                metrics_w_sample(b, "space_pool_sandboxes_total", l, (double)pe[i].v);
        }
        return b->len ? 0 : -ENOMEM;
}
