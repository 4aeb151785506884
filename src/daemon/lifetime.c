/* Lifecycle timeouts and auto-resume (daemon/lifetime.h, docs/sessions.md "Timeouts"):
 * their rules and text (pure), the one-second check that fires them through the existing
 * pause and delete actions, the hold that resumes a paused session for a request, and
 * PUT /v1/sessions/{id}/timeouts. */
#include "daemon/lifetime.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/durable-internal.h"
#include "daemon/durable.h"
#include "daemon/http.h"
#include "daemon/net/ingress.h"
#include "daemon/routes.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"

/* ---------------- rules and text (pure) ---------------- */

static int digits(const char **p, int n, int *ret) {
        int v = 0;
        for (int i = 0; i < n; i++, (*p)++) {
                if (!isdigit((unsigned char)**p))
                        return -EINVAL;
                v = v * 10 + (**p - '0');
        }
        *ret = v;
        return 0;
}

int lt_parse_time(const char *s, int64_t *ret_ms) {
        if (!s)
                return -EINVAL;
        const char *p = s;
        int y, mo, d, h, mi, sec, ms = 0;
        if (digits(&p, 4, &y) < 0 || *p++ != '-' || digits(&p, 2, &mo) < 0 || *p++ != '-' ||
            digits(&p, 2, &d) < 0 || (*p != 'T' && *p != 't' && *p != ' ') || (p++, digits(&p, 2, &h)) < 0 ||
            *p++ != ':' || digits(&p, 2, &mi) < 0 || *p++ != ':' || digits(&p, 2, &sec) < 0)
                return -EINVAL;
        if (*p == '.') {
                p++;
                if (!isdigit((unsigned char)*p))
                        return -EINVAL;
                for (int scale = 100; isdigit((unsigned char)*p); p++, scale /= 10)
                        ms += (*p - '0') * scale;
        }
        int off_min = 0;
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                int sign = *p++ == '-' ? -1 : 1, oh, om;
                if (digits(&p, 2, &oh) < 0 || *p++ != ':' || digits(&p, 2, &om) < 0 || oh > 23 || om > 59)
                        return -EINVAL;
                off_min = sign * (oh * 60 + om);
        } else {
                return -EINVAL;
        }
        if (*p || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
                return -EINVAL;
        static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap))
                return -EINVAL;
        struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi,
                         .tm_sec = sec > 59 ? 59 : sec };
        time_t t = timegm(&tm);
        if (t == (time_t)-1 && y != 1969)
                return -EINVAL;
        *ret_ms = ((int64_t)t - (int64_t)off_min * 60) * 1000 + ms;
        return 0;
}

static const char *action_name(enum lt_action a) { return a == LT_DELETE ? "delete" : "pause"; }

static int action_parse(const struct json *v, enum lt_action *ret) {
        const char *n = json_str(v);
        if (n && !strcmp(n, "pause"))
                *ret = LT_PAUSE;
        else if (n && !strcmp(n, "delete"))
                *ret = LT_DELETE;
        else
                return -EINVAL;
        return 0;
}

static const char *const lt_keys[] = { "timeout", "timeout_action", "idle_timeout", "idle_action", "auto_resume" };

int lt_apply(struct ses_lifetime *l, const struct json *body, int64_t now_ms, bool strict, char *why, size_t why_size) {
        struct ses_lifetime n = *l;
        const struct json *v;
        if (strict)
                for (size_t i = 0; i < json_len(body); i++) {
                        const char *k = json_key_at(body, i);
                        bool known = false;
                        for (size_t j = 0; j < ELEMENTSOF(lt_keys) && !known; j++)
                                known = k && !strcmp(k, lt_keys[j]);
                        if (!known) {
                                snprintf(why, why_size, "unknown member \"%.40s\" (timeout, timeout_action, idle_timeout, "
                                         "idle_action, auto_resume)", k ? k : "");
                                return -EINVAL;
                        }
                }
        if ((v = json_get(body, "timeout"))) {
                int64_t secs, at;
                if (json_type(v) == JSON_NULL) {
                        n.deadline_ms = 0;
                } else if (json_type(v) == JSON_NUMBER) {
                        if (json_int(v, &secs) < 0 || secs < 1 || secs > LT_TIMEOUT_MAX_S) {
                                snprintf(why, why_size, "timeout: seconds from now must be an integer from 1 to %d (a year)",
                                         LT_TIMEOUT_MAX_S);
                                return -EINVAL;
                        }
                        n.deadline_ms = now_ms + secs * 1000;
                } else if (json_type(v) == JSON_STRING) {
                        if (lt_parse_time(json_str(v), &at) < 0) {
                                snprintf(why, why_size, "timeout: \"%.60s\" is not an RFC 3339 time "
                                         "(2026-12-03T10:00:00Z)", json_str(v));
                                return -EINVAL;
                        }
                        if (at <= now_ms || at > now_ms + (int64_t)LT_TIMEOUT_MAX_S * 1000) {
                                snprintf(why, why_size, "timeout: %.60s is %s", json_str(v),
                                         at <= now_ms ? "not in the future" : "more than a year ahead");
                                return -EINVAL;
                        }
                        n.deadline_ms = at;
                } else {
                        snprintf(why, why_size, "timeout must be seconds from now, an RFC 3339 time, or null (none)");
                        return -EINVAL;
                }
        }
        if ((v = json_get(body, "idle_timeout"))) {
                int64_t secs;
                if (json_type(v) == JSON_NULL) {
                        n.idle_s = 0;
                } else if (json_int(v, &secs) < 0 || secs < LT_IDLE_MIN_S || secs > LT_IDLE_MAX_S) {
                        snprintf(why, why_size, "idle_timeout must be an integer of seconds from %d to %d (30 days), or null",
                                 LT_IDLE_MIN_S, LT_IDLE_MAX_S);
                        return -EINVAL;
                } else {
                        n.idle_s = secs;
                        n.active_ms = now_ms; /* the idle time counts from its setting at the earliest */
                }
        }
        if ((v = json_get(body, "timeout_action")) && json_type(v) != JSON_NULL &&
            action_parse(v, &n.timeout_action) < 0) {
                snprintf(why, why_size, "timeout_action must be \"pause\" or \"delete\"");
                return -EINVAL;
        }
        if ((v = json_get(body, "idle_action")) && json_type(v) != JSON_NULL && action_parse(v, &n.idle_action) < 0) {
                snprintf(why, why_size, "idle_action must be \"pause\" or \"delete\"");
                return -EINVAL;
        }
        if ((v = json_get(body, "auto_resume")) && json_type(v) != JSON_NULL) {
                if (json_type(v) != JSON_BOOL) {
                        snprintf(why, why_size, "auto_resume must be true or false");
                        return -EINVAL;
                }
                n.auto_resume = json_is_true(v);
        }
        if (!n.active_ms)
                n.active_ms = now_ms;
        *l = n;
        return 0;
}

bool lt_any(const struct ses_lifetime *l) {
        return l->deadline_ms || l->idle_s || l->auto_resume || l->timeout_action != LT_PAUSE ||
               l->idle_action != LT_PAUSE;
}

int lt_to_text(const struct ses_lifetime *l, char **ret) {
        *ret = NULL;
        if (!lt_any(l))
                return 0;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kint(&w, "deadline_ms", l->deadline_ms);
        json_w_kstr(&w, "timeout_action", action_name(l->timeout_action));
        json_w_kint(&w, "idle_timeout_s", l->idle_s);
        json_w_kstr(&w, "idle_action", action_name(l->idle_action));
        json_w_kbool(&w, "auto_resume", l->auto_resume);
        json_w_kint(&w, "active_ms", l->active_ms);
        json_w_obj_end(&w);
        int r = w.err ? w.err : buf_putc(&b, '\0');
        if (r == 0 && !(*ret = strdup(b.data)))
                r = -ENOMEM;
        buf_free(&b);
        return r;
}

int lt_from_text(const char *text, struct ses_lifetime *l) {
        *l = (struct ses_lifetime){ 0 };
        if (!text)
                return 0;
        _cleanup_json_ struct json *j = NULL;
        char err[80];
        if (json_parse(text, strlen(text), &j, err, sizeof err) < 0 || json_type(j) != JSON_OBJECT)
                return -EINVAL;
        struct ses_lifetime n = { 0 };
        const struct json *v;
        if (json_get_int(j, "deadline_ms", &n.deadline_ms) < 0 || json_get_int(j, "idle_timeout_s", &n.idle_s) < 0 ||
            json_get_int(j, "active_ms", &n.active_ms) < 0 || n.deadline_ms < 0 || n.idle_s < 0 ||
            n.idle_s > LT_IDLE_MAX_S)
                return -EINVAL;
        if (((v = json_get(j, "timeout_action")) && action_parse(v, &n.timeout_action) < 0) ||
            ((v = json_get(j, "idle_action")) && action_parse(v, &n.idle_action) < 0))
                return -EINVAL;
        n.auto_resume = json_get_bool(j, "auto_resume", false);
        n.saved_active_ms = n.active_ms;
        *l = n;
        return 0;
}

void lt_write_json(struct json_writer *w, const struct ses_lifetime *l) {
        char ts[40];
        json_w_obj_begin(w);
        json_w_key(w, "timeout");
        if (l->deadline_ms) {
                dl_rfc3339_ms(l->deadline_ms, ts, sizeof ts);
                json_w_str(w, ts);
        } else
                json_w_null(w);
        json_w_kstr(w, "timeout_action", action_name(l->timeout_action));
        json_w_key(w, "idle_timeout");
        if (l->idle_s)
                json_w_int(w, l->idle_s);
        else
                json_w_null(w);
        json_w_kstr(w, "idle_action", action_name(l->idle_action));
        json_w_kbool(w, "auto_resume", l->auto_resume);
        json_w_key(w, "last_activity");
        if (l->active_ms) {
                dl_rfc3339_ms(l->active_ms, ts, sizeof ts);
                json_w_str(w, ts);
        } else
                json_w_null(w);
        json_w_obj_end(w);
}

/* ---------------- the daemon's side ---------------- */

void lifetime_touch(struct session *s) { s->life.active_ms = meta_now_ms(); }

int lifetime_save(struct session *s) {
        _cleanup_free_ char *text = NULL;
        int r = lt_to_text(&s->life, &text);
        if (r == 0)
                r = meta_session_set_timeouts(s->d->meta, s->id, text);
        if (r < 0) {
                log_warn("%s: recording its timeouts: %s", s->id, r == -ENOMEM ? "out of memory" : meta_last_error(s->d->meta));
                return r;
        }
        s->life.saved_active_ms = s->life.active_ms;
        return 0;
}

void lifetime_flush(struct daemon *d) {
        for (struct session *s = d->sessions; s; s = s->next)
                if (!s->freed && s->state != META_SESSION_TERMINATED && s->life.idle_s &&
                    s->life.active_ms != s->life.saved_active_ms)
                        (void)lifetime_save(s);
}

/* Something of s's is in use right now: a request to its sandbox with its client still
 * there (a foreground exec, a download), a connection to one of its ports. */
static bool in_use(struct session *s) {
        if (s->n_relays || (s->d->ingress && ingress_count(s->d->ingress, s->id) > 0))
                return true;
        for (struct op *op = s->ops; op; op = op->next)
                if (op->client && !op->done)
                        return true;
        return false;
}

bool lifetime_asleep(const struct session *s) {
        if (s->state == META_SESSION_PAUSED)
                return true;
        if (s->act && s->act->kind == ACT_PAUSE)
                return true;
        for (const struct action *q = s->queue; q; q = q->next)
                if (q->kind == ACT_PAUSE)
                        return true;
        return false;
}

/* kind ("timeout", "idle_timeout") fired on s: on its record, then the action. */
static void fire(struct session *s, const char *kind, enum lt_action action, int64_t now) {
        struct ses_lifetime *l = &s->life;
        char ts[40];
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "action", action_name(action));
        json_w_kstr(&w, "state", meta_session_state_name(s->state));
        if (!strcmp(kind, "timeout")) {
                dl_rfc3339_ms(l->deadline_ms, ts, sizeof ts);
                json_w_kstr(&w, "timeout", ts);
                l->deadline_ms = 0; /* it fired: a resumed session runs on without it */
        } else {
                json_w_kint(&w, "idle_timeout", l->idle_s);
                dl_rfc3339_ms(l->active_ms, ts, sizeof ts);
                json_w_kstr(&w, "last_activity", ts);
                l->active_ms = now; /* counts again from here (from its resume, once paused) */
        }
        json_w_obj_end(&w);
        log_info("%s: %s fired: %s", s->id, kind, action_name(action));
        if (!w.err)
                ses_event(s, kind, &b);
        buf_free(&b);
        (void)lifetime_save(s);
        if (action == LT_DELETE)
                dur_delete(s, NULL);
        else if (s->state != META_SESSION_PAUSED && !lifetime_asleep(s))
                dur_pause(s, NULL);
}

void lifetime_tick(struct daemon *d) {
        int64_t now = meta_now_ms();
        for (struct session *s = d->sessions; s; s = s->next) {
                struct ses_lifetime *l = &s->life;
                if (s->freed || s->state == META_SESSION_TERMINATED || (!l->deadline_ms && !l->idle_s))
                        continue;
                bool running = s->state == META_SESSION_RUNNING && ses_usable(s);
                if (running && in_use(s))
                        l->active_ms = now;
                /* A pause waits for a recovery (or a start) to end; a delete does not. */
                bool settled = s->state == META_SESSION_RUNNING || s->state == META_SESSION_PAUSED;
                if (l->deadline_ms && now >= l->deadline_ms && s->state != META_SESSION_CREATING &&
                    (settled || l->timeout_action == LT_DELETE)) {
                        fire(s, "timeout", l->timeout_action, now);
                        continue;
                }
                if (l->idle_s && running && !s->act && !s->queue && now - l->active_ms >= l->idle_s * 1000) {
                        fire(s, "idle_timeout", l->idle_action, now);
                        continue;
                }
                if (l->idle_s && l->active_ms - l->saved_active_ms >= LT_SAVE_ACTIVE_MS)
                        (void)lifetime_save(s);
        }
}

/* ---------------- auto-resume ---------------- */

struct lt_wake {
        struct dur_waiter w;
        struct conn *c; /* NULL once the client left */
        char id[SES_ID_LEN + 1];
        void (*again)(struct conn *c);
};

static void wake_gone(struct conn *c, void *ctx) {
        (void)c;
        ((struct lt_wake *)ctx)->c = NULL;
}

static const struct conn_hook_ops wake_hook = { .gone = wake_gone };

static void wake_done(struct dur_waiter *w, int err, const char *msg, const struct buf *result) {
        (void)result;
        struct lt_wake *k = (struct lt_wake *)w;
        struct conn *c = TAKE_PTR(k->c);
        if (c) {
                conn_clear_hook(c, k);
                struct session *s = ses_find(c->d, k->id);
                /* The resume may have failed because another request's got there first. */
                if (s && !s->freed && ses_usable(s)) {
                        lifetime_touch(s);
                        /* Input flows again before the route runs: a handler's request to
                         * init may resume a paused upload at once (op_ops.room). */
                        c->state = CONN_IDLE; /* where its request head left it */
                        c->in_paused = false;
                        k->again(c);
                        conn_process_input(c);
                } else {
                        c->in_paused = false;
                        c->state = CONN_BODY_DISCARD;
                        conn_reply_error(c, err ? api_status_of(err) : 503, "session %s: resuming it for this request: %s",
                                         k->id, err ? msg : "it is not running");
                }
        }
        free(k);
}

static const struct dur_waiter_ops wake_ops = { .done = wake_done };

bool lifetime_wake(struct conn *c, struct session *s, void (*again)(struct conn *c)) {
        if (!s->life.auto_resume || !lifetime_asleep(s))
                return false;
        struct lt_wake *k = calloc(1, sizeof *k);
        if (!k)
                return false; /* answered as without auto_resume */
        k->w.ops = &wake_ops;
        k->c = c;
        k->again = again;
        snprintf(k->id, sizeof k->id, "%s", s->id);
        /* The body stays unread and the head's deadline off until the session runs. */
        c->in_paused = true;
        c->state = CONN_WAIT;
        conn_set_hook(c, &wake_hook, k);
        log_info("%s: resuming for %s %s (auto_resume)", s->id, c->req->method, c->req->path);
        dur_resume(s, &k->w);
        return true;
}

bool lifetime_hold(struct conn *c) {
        if (!api_route_uses_sandbox(c->route))
                return false;
        const char *id = api_param(&c->params, "id");
        struct session *s = id ? ses_find(c->d, id) : NULL;
        /* Whatever is wrong with the request, its handler says (404, 401). */
        if (!s || s->freed || s->state == META_SESSION_TERMINATED || !auth_tenant_sees(c->tenant, s->tenant))
                return false;
        const char *token = http_request_header(c->req, SES_TOKEN_HEADER);
        if (token && !ses_token_ok(s, token))
                return false;
        lifetime_touch(s);
        return lifetime_wake(c, s, conn_dispatch);
}

/* ---------------- PUT /v1/sessions/{id}/timeouts ---------------- */

void api_session_timeouts_put(struct conn *c) {
        _cleanup_json_ struct json *body = NULL;
        struct session *s = api_session_json(c, false, &body);
        if (!s)
                return;
        struct ses_lifetime old = s->life;
        char why[256];
        if (lt_apply(&s->life, body, meta_now_ms(), true, why, sizeof why) < 0) {
                conn_reply_error(c, 400, "%s", why);
                return;
        }
        if (lifetime_save(s) < 0) {
                s->life = old;
                conn_reply_error(c, 500, "recording the timeouts: %s", meta_last_error(c->d->meta));
                return;
        }
        struct api_json j;
        api_json_begin(&j);
        lt_write_json(&j.w, &s->life);
        api_json_reply(c, 200, &j);
}
