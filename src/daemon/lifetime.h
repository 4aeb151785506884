/* A session's lifecycle timeouts (docs/sessions.md, "Timeouts"): `timeout`, a time at
 * which it is paused or deleted; `idle_timeout`, seconds without activity (a request that
 * uses its sandbox: exec, processes, files, a port's forward or proxy, a terminal) after
 * which it is paused or deleted; `auto_resume`, whether such a request to a paused session
 * resumes it first. Kept in meta as one JSON text (meta_session.timeouts_json); checked on
 * the daemon's one-second tick. The lt_* functions are pure (unit tests reach them). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LT_IDLE_MIN_S 1
#define LT_IDLE_MAX_S (30 * 86400)        /* idle_timeout: 1 s .. 30 days */
#define LT_TIMEOUT_MAX_S (365 * 86400)    /* timeout: at most a year ahead */
/* While a session with an idle_timeout is active, its last activity is written to meta at
 * most this often (and at a clean shutdown): after a crash the idle clock may be this far
 * behind. */
#define LT_SAVE_ACTIVE_MS 30000

enum lt_action { LT_PAUSE, LT_DELETE };

struct ses_lifetime {
        int64_t deadline_ms;          /* Unix ms at which `timeout` fires; 0: none */
        enum lt_action timeout_action;
        int64_t idle_s;               /* idle_timeout in seconds; 0: none */
        enum lt_action idle_action;
        bool auto_resume;
        int64_t active_ms;            /* Unix ms of the last activity (or of the idle_timeout's setting) */
        int64_t saved_active_ms;      /* active_ms as meta has it */
};

struct json;
struct json_writer;
struct conn;
struct session;
struct daemon;

/* "2026-12-03T10:00:00Z", "…T10:00:00.250+02:00" -> Unix ms. -EINVAL if malformed. */
int lt_parse_time(const char *s, int64_t *ret_ms);
/* The members of body that set timeouts ("timeout", "timeout_action", "idle_timeout",
 * "idle_action", "auto_resume") applied to *l at now_ms: absent ones keep their value,
 * null clears a timeout. strict: any other member is an error too (PUT …/timeouts).
 * -EINVAL and why (for a 400) on bad input, *l then unchanged. */
int lt_apply(struct ses_lifetime *l, const struct json *body, int64_t now_ms, bool strict, char *why, size_t why_size);
/* Whether l holds anything to keep. */
bool lt_any(const struct ses_lifetime *l);
/* l as meta's text (malloc'd into *ret; NULL when there is nothing to keep). */
int lt_to_text(const struct ses_lifetime *l, char **ret);
/* meta's text back (NULL: none). -EINVAL if it does not read. */
int lt_from_text(const char *text, struct ses_lifetime *l);
/* {"timeout","timeout_action","idle_timeout","idle_action","auto_resume","last_activity"} */
void lt_write_json(struct json_writer *w, const struct ses_lifetime *l);

/* s was used just now. */
void lifetime_touch(struct session *s);
/* Writes s's timeouts to meta. */
int lifetime_save(struct session *s);
/* A clean shutdown: the last activity of every session with an idle_timeout to meta. */
void lifetime_flush(struct daemon *d);
/* Once a second: fires the timeouts that are due. */
void lifetime_tick(struct daemon *d);
/* Whether s is paused, or being paused, so that a request to it must wait for a resume. */
bool lifetime_asleep(const struct session *s);
/* s is asleep and has auto_resume: queues its resume and holds c (its input paused) until
 * it is done, then runs again(c), or answers the error. False (nothing done) otherwise. */
bool lifetime_wake(struct conn *c, struct session *s, void (*again)(struct conn *c));
/* The router's hold (server.h): a routed request that uses a session's sandbox
 * (api_route_uses_sandbox) counts as activity, and waits for an auto-resume. */
bool lifetime_hold(struct conn *c);
