/* Sessions in memory: the live sandbox of each (made through the runtime ops table), its
 * socket to space-init in the event loop, and the requests in flight on it. The lifecycle
 * (create, snapshots, pause, recovery, ...) is durable.c's. Frames from init are routed
 * by request id to their op, and through its handler (struct op_ops, api_*.c) to the
 * client waiting for them: nothing here writes HTTP. Each output stream has a
 * window (docs/protocol.md §3.14): spaced grants space-init more only as the stream's
 * client takes what it got, so a client that reads slowly holds back its own stream and
 * nothing else. With an init that has no windows (one started before them and re-attached),
 * frame handling for the whole sandbox stops until the slow client catches up. */
#include <fcntl.h>
#include <poll.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <ctype.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/session.h"
#include "daemon/auth.h"
#include "daemon/session_rules.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/durable.h"
#include "daemon/disk.h"
#include "daemon/loop.h"
#include "daemon/metadata.h"
#include "daemon/metrics.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

static void ses_process(struct session *s);
static void ses_update_events(struct session *s);
static void ses_resume(struct session *s);
static void ses_resume_later(struct session *s);

/* No sandbox to talk to (none, or it died and waits for its recovery). */
static bool ses_dead(const struct session *s) { return !s->sb || s->lost; }

struct session *ses_find(struct daemon *d, const char *id) {
        for (struct session *s = d->sessions; s; s = s->next)
                if (strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

bool ses_template_in_use(struct daemon *d, const char *name) {
        for (struct session *s = d->sessions; s; s = s->next)
                if (s->state != META_SESSION_TERMINATED && strcmp(s->template, name) == 0)
                        return true;
        return false;
}

bool ses_out_full(const struct session *s) { return s->out.len - s->out_off > SES_OUT_HIGH; }

bool ses_stdin_full(const struct op *op) {
        if (ses_out_full(op->ses))
                return true;
        /* Before the RESP, count as if init acks: an init that does not is told apart then. */
        bool counted = (op->stdin_stream || op->kind == OP_TCP) && (!op->got_resp || op->stdin_acks);
        return counted && op->stdin_inflight >= SES_STDIN_CREDIT;
}

/* ---- frames to init ---- */

static void ses_flush(struct session *s) {
        while (s->out_off < s->out.len && s->init_src.fd >= 0) {
                ssize_t n = send(s->init_src.fd, s->out.data + s->out_off, s->out.len - s->out_off, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        ses_mark_dead(s, "writing to space-init: %s", strerror(errno));
                        return;
                }
                s->out_off += (size_t)n;
        }
        if (s->out_off == s->out.len) {
                buf_reset(&s->out);
                s->out_off = 0;
        } else if (s->out_off > s->out.len / 2) {
                buf_consume(&s->out, s->out_off);
                s->out_off = 0;
        }
        if (s->out.len - s->out_off < SES_OUT_LOW) {
                /* Room again: paused uploads go on. */
                for (struct op *op = s->ops, *next; op; op = next) {
                        next = op->next;
                        if (op->client && op->ops->room)
                                op->ops->room(op, op->client);
                        if (ses_dead(s) || ses_out_full(s))
                                break;
                }
        }
}

int ses_send(struct session *s, uint8_t type, uint32_t id, const void *payload, size_t len) {
        if (ses_dead(s) || s->init_src.fd < 0)
                return -EPIPE;
        if (len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;
        int r = proto_frame_append(&s->out, type, id, payload, (uint32_t)len);
        if (r < 0)
                return r;
        ses_flush(s);
        ses_update_events(s);
        return 0;
}

int ses_send_req(struct session *s, uint32_t id, const struct buf *json) {
        return ses_send(s, PROTO_REQ, id, json->data, json->len);
}

/* ---- stream windows ---- */

bool ses_req_window(const struct session *s, struct json_writer *w) {
        if (!s->init_window)
                return false;
        json_w_kint(w, "window", SES_STREAM_WINDOW);
        return true;
}

void op_window_start(struct op *op) {
        op->windowed = true;
        op->window_size = SES_STREAM_WINDOW;
        op->window_left = SES_STREAM_WINDOW;
        op->owed = 0;
}

void op_window_widen(struct op *op, uint32_t size) {
        if (!op->windowed || op->done || size <= op->window_size)
                return;
        uint8_t p[PROTO_WINDOW_LEN];
        proto_window_encode(size - op->window_size, p);
        op->window_left += size - op->window_size;
        op->window_size = size;
        (void)ses_send(op->ses, PROTO_WINDOW, op->id, p, sizeof p);
}

/* Whether a frame of this type carries output counted against op's window. */
static bool op_output_frame(const struct op *op, const struct proto_hdr *h) {
        switch (op->kind) {
        case OP_EXEC:
        case OP_ATTACH:
        case OP_TCP:
                return h->type == PROTO_STDOUT || h->type == PROTO_STDERR;
        case OP_WATCH:
                return h->type == PROTO_STDOUT;
        case OP_READ:
                return h->type == PROTO_DATA;
        default:
                return false;
        }
}

/* Gives init back the bytes passed on to op's client, unless that client is behind (it
 * gets them when it drains: op_client_drained). Small amounts wait for a step's worth
 * (a quarter of the window: init still has most of it then). */
static void op_window_grant(struct op *op) {
        if (!op->windowed || op->done || op->owed < op->window_size / 4)
                return;
        if (op->client && op->ops->behind(op, op->client))
                return;
        uint8_t p[PROTO_WINDOW_LEN];
        proto_window_encode(op->owed, p);
        op->window_left += op->owed;
        op->owed = 0;
        (void)ses_send(op->ses, PROTO_WINDOW, op->id, p, sizeof p);
}

/* ---- ops ---- */

static uint32_t ses_alloc_id(struct session *s) {
        for (;;) {
                uint32_t id = ++s->next_id;
                if (id == 0)
                        continue;
                bool live = false;
                for (struct op *op = s->ops; op; op = op->next)
                        if (op->id == id)
                                live = true;
                if (!live)
                        return id;
        }
}

int ses_op_new(struct session *s, enum op_kind kind, const struct op_ops *ops, void *client, struct op **ret) {
        struct op *op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        op->ses = s;
        op->ops = ops;
        op->client = client;
        op->kind = kind;
        op->pid = -1;
        op->id = ses_alloc_id(s);
        op->next = s->ops;
        if (s->ops)
                s->ops->prev = op;
        s->ops = op;
        *ret = op;
        return 0;
}

static void op_free_deferred(void *p) {
        struct op *op = p;
        free(op->argv_json);
        free(op);
}

void op_done(struct op *op) {
        /* Callers up the stack may still hold op (a reply can close the client, which ends
         * the op again): mark it, unlink it, and free it after the batch. */
        if (op->done)
                return;
        op->done = true;
        op->stalling = false;
        struct session *s = op->ses;
        if (op->prev)
                op->prev->next = op->next;
        else
                s->ops = op->next;
        if (op->next)
                op->next->prev = op->prev;
        void *client = TAKE_PTR(op->client);
        if (client)
                op->ops->detach(op, client);
        (void)loop_defer(s->d->loop, op_free_deferred, op);
}

static struct op *op_find(struct session *s, uint32_t id) {
        for (struct op *op = s->ops; op; op = op->next)
                if (op->id == id)
                        return op;
        return NULL;
}

/* Kills the process group of a foreground command whose client went away. Its stream
 * runs on to its EXIT with nobody to read it: the rest of the output is discarded (its
 * window granted back at once), the end goes to the event log, and the command does not
 * linger in init as a detached background process. The kill's RESP is dropped. */
static void op_kill_fg(struct op *op) {
        struct session *s = op->ses;
        struct op *k;
        if (ses_op_new(s, OP_KILL, NULL, NULL, &k) == 0) {
                struct buf b = BUF_INIT(0);
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_kstr(&w, "op", "signal");
                json_w_kint(&w, "pid", op->pid);
                json_w_kint(&w, "signal", SIGKILL);
                json_w_kbool(&w, "group", true);
                json_w_obj_end(&w);
                if (ses_send_req(s, k->id, &b) < 0)
                        op_done(k);
                buf_free(&b);
        }
        op->drain_deadline_ms = util_now_ms() + SES_KILL_DRAIN_MS;
        log_info("%s: client of exec pid %" PRId64 " went away: killed its process group", s->id, op->pid);
}

/* What a client's leaving means to op (op_client_gone). */
static void op_abandon(struct op *op) {
        struct session *s = op->ses;
        switch (op->kind) {
        case OP_EXEC:
                if (!op->got_resp || op->background)
                        return; /* decided when the RESP comes */
                if (ses_dead(s)) {
                        op_done(op);
                        return;
                }
                op_kill_fg(op);
                /* Whatever init granted to a slow client and was not passed on yet is
                 * discarded now: open the window so the stream drains to its EXIT. */
                op_window_grant(op);
                return;
        case OP_ATTACH:
        case OP_READ:
        case OP_WRITE:
        case OP_TCP:
        case OP_WATCH:
                if (!ses_dead(s))
                        (void)ses_send(s, PROTO_CANCEL, op->id, NULL, 0);
                op_done(op);
                return;
        case OP_SIMPLE:
        case OP_KILL:
                /* A late RESP for a forgotten id is ignored (docs/protocol.md §2). */
                op_done(op);
                return;
        }
}

void op_client_gone(struct op *op) {
        if (op->done)
                return;
        op->client = NULL;
        bool stalling = op->stalling;
        op->stalling = false;
        struct session *s = op->ses;
        op_abandon(op);
        /* This client was the one its sandbox waited for: without it gone the session
         * would never read space-init again (deferred: we may be in a close path). */
        if (stalling)
                ses_resume_later(s);
}

void op_client_done(struct op *op) { op->client = NULL; }

void op_client_drained(struct op *op, bool caught_up) {
        if (caught_up && op->stalling) {
                op->stalling = false;
                ses_resume(op->ses);
        }
        if (op->windowed)
                op_window_grant(op);
}

/* ---- JSON of a session ---- */

static void ses_refresh_health(struct session *s) {
        if (ses_dead(s))
                return;
        struct rt_health h = { 0 };
        if (s->rt->health(s->sb, &h) == 0) {
                s->oom_killed = s->oom_killed || h.oom_killed;
                s->mem_bytes = h.memory_bytes;
                s->n_pids = h.pids;
        }
}

static void write_id_or_null(struct json_writer *w, const char *key, const char *id) {
        json_w_key(w, key);
        if (id && *id)
                json_w_str(w, id);
        else
                json_w_null(w);
}

uint64_t ses_snapshot_limit(const struct session *s) {
        return dl_snapshot_limit(s->d->snap_factor, s->disk, s->d->disk_default);
}

uint64_t ses_tenant_snapshot_bytes(struct daemon *d, const char *tenant) {
        uint64_t n = 0;
        for (struct session *s = d->sessions; s; s = s->next)
                if (!strcmp(s->tenant, tenant))
                        n = s->snap_bytes > UINT64_MAX - n ? UINT64_MAX : n + s->snap_bytes;
        return n;
}

static void write_snapshot_storage(struct json_writer *w, struct session *s) {
        uint64_t lim = ses_snapshot_limit(s), tenant = ses_tenant_snapshot_bytes(s->d, s->tenant),
                 tlim = s->d->tenant_snap_max;
        json_w_key(w, "snapshot_storage");
        json_w_obj_begin(w);
        json_w_key(w, "bytes");
        json_w_uint(w, s->snap_bytes);
        json_w_key(w, "limit");
        json_w_uint(w, lim);
        json_w_key(w, "tenant_bytes");
        json_w_uint(w, tenant);
        json_w_key(w, "tenant_limit");
        json_w_uint(w, tlim);
        json_w_kbool(w, "over_limit", (lim && s->snap_bytes > lim) || (tlim && tenant > tlim));
        json_w_obj_end(w);
}

void ses_write_json(struct json_writer *w, struct session *s) {
        ses_refresh_health(s);
        char ts[40];
        util_rfc3339(s->created_at, ts, sizeof ts);
        bool has_sb = s->sb && !s->lost;
        json_w_obj_begin(w);
        json_w_kstr(w, "id", s->id);
        json_w_kstr(w, "tenant", s->tenant);
        write_id_or_null(w, "sandbox_id", has_sb ? s->sbx_id : NULL);
        json_w_kstr(w, "state", meta_session_state_name(s->state));
        json_w_kstr(w, "template", s->template);
        json_w_kstr(w, "runtime", s->rt->name);
        json_w_key(w, "capabilities");
        json_w_obj_begin(w);
        json_w_kbool(w, "memory_snapshots", s->rt->memory_snapshots);
        json_w_obj_end(w);
        json_w_kstr(w, "created_at", ts);
        json_w_key(w, "limits");
        json_w_obj_begin(w);
        json_w_key(w, "memory");
        json_w_uint(w, s->memory);
        json_w_key(w, "cpus");
        json_w_double(w, s->cpus);
        json_w_kint(w, "pids", s->pids);
        json_w_key(w, "disk");
        json_w_uint(w, s->disk);
        json_w_obj_end(w);
        json_w_kbool(w, "network", s->net.egress);
        json_w_key(w, "network_policy");
        net_policy_to_json(w, &s->net);
        json_w_kint(w, "snapshot_interval_ms", s->interval_ms);
        json_w_kint(w, "retention", s->retention);
        json_w_key(w, "timeouts");
        lt_write_json(w, &s->life);
        json_w_key(w, "metadata");
        metadata_write_json(w, s->metadata);
        write_snapshot_storage(w, s);
        write_id_or_null(w, "head_snapshot", s->head);
        write_id_or_null(w, "parent_session", s->parent_session);
        write_id_or_null(w, "source_snapshot", s->source_snapshot);
        json_w_kint(w, "recoveries", s->recoveries);
        json_w_key(w, "last_snapshot_at");
        if (s->last_snapshot_ms > 0) {
                util_rfc3339((time_t)(s->last_snapshot_ms / 1000), ts, sizeof ts);
                json_w_str(w, ts);
        } else {
                json_w_null(w);
        }
        json_w_key(w, "init_pid");
        if (has_sb)
                json_w_int(w, s->init_pid);
        else
                json_w_null(w);
        json_w_key(w, "health");
        if (has_sb) {
                json_w_obj_begin(w);
                json_w_kbool(w, "alive", true);
                json_w_kbool(w, "oom_killed", s->oom_killed);
                json_w_key(w, "memory_bytes");
                json_w_uint(w, s->mem_bytes);
                json_w_kint(w, "pids", s->n_pids);
                uint64_t du;
                if (disk_usage(s, &du) == 0) {
                        json_w_key(w, "disk_bytes");
                        json_w_uint(w, du);
                }
                json_w_obj_end(w);
        } else {
                json_w_null(w);
        }
        if (s->error)
                json_w_kstr(w, "error", s->error);
        json_w_obj_end(w);
}

/* ---- failing and tearing down ---- */

/* Every request in flight on s ends with status + msg. */
void ses_fail_ops(struct session *s, const char *msg) {
        while (s->ops) {
                struct op *op = s->ops;
                void *client = op->client;
                op_done(op);
                if (client)
                        op->ops->fail(op, client, -EAGAIN, msg);
        }
}

/* Stops watching init's fds (the sandbox owns and closes them). */
static void ses_unwatch(struct session *s) {
        loop_del(s->d->loop, &s->init_src);
        loop_del(s->d->loop, &s->pid_src);
        s->init_src.fd = -1;
        s->pid_src.fd = -1;
}

void ses_quiesce(struct session *s, const char *msg) {
        s->ready = false;
        s->hello_deadline_ms = 0;
        s->stalled = false; /* the ops that stalled it end now */
        ses_fail_ops(s, msg);
        ses_unwatch(s);
}

void ses_drop_sandbox(struct session *s, const char *msg) {
        struct rt_sandbox *sb = ses_take_sandbox(s, msg);
        if (sb && s->rt->destroy(sb) < 0)
                log_warn("%s: destroying sandbox %s: %s", s->id, s->sbx_id, runtime_last_error());
}

struct rt_sandbox *ses_take_sandbox(struct session *s, const char *msg) {
        ses_quiesce(s, msg);
        /* Every path that takes the sandbox destroys it: its network lease goes first
         * (the sandbox is cut off at once, then killed). */
        if (s->d->net && s->sbx_id[0])
                net_release_sbx(s->d->net, s->sbx_id, s->dir);
        struct rt_sandbox *sb = TAKE_PTR(s->sb);
        s->lost = false;
        s->init_pid = 0;
        buf_reset(&s->in);
        s->in_off = 0;
        buf_reset(&s->out);
        s->out_off = 0;
        return sb;
}

void ses_mark_dead(struct session *s, const char *fmt, ...) {
        if (ses_dead(s))
                return;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        ses_refresh_health(s);
        log_warn("%s: sandbox %s died: %s", s->id, s->sbx_id, msg);
        free(s->error);
        s->error = strdup(msg);
        s->lost = true;
        s->ready = false;
        s->stalled = false; /* the ops that stalled it end below */
        /* No more events from it; the sandbox itself is destroyed by the recovery, which
         * waits for a job that may still use it (a capture). */
        ses_unwatch(s);
        ses_fail_ops(s, msg);
        if (s->d->ses_hooks)
                s->d->ses_hooks->lost(s, msg);
}

static void ses_free_deferred(void *p) {
        struct session *s = p;
        buf_free(&s->in);
        buf_free(&s->out);
        for (size_t i = 0; i < s->n_env; i++)
                free(s->env[i]);
        free(s->env);
        free(s->metadata);
        free(s->template);
        free(s->dir);
        free(s->error);
        net_policy_clear(&s->net);
        metrics_ring_free(s->metrics);
        free(s);
}

void ses_event(struct session *s, const char *kind, const struct buf *payload) {
        struct meta *m = s->d->meta;
        if (meta_set_relaxed(m, true) < 0)
                log_warn("meta: synchronous mode: %s", meta_last_error(m));
        if (meta_event_append(m, s->id, kind, payload->data, payload->len, NULL) < 0)
                log_warn("%s: event %s not recorded: %s", s->id, kind, meta_last_error(m));
        if (meta_set_relaxed(m, false) < 0)
                log_warn("meta: synchronous mode: %s", meta_last_error(m));
}

int ses_alloc(struct daemon *d, const char *id, struct session **ret) {
        if (strlen(id) > SES_ID_LEN)
                return -EINVAL;
        struct session *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->d = d;
        s->rt = d->rt;
        strcpy(s->id, id);
        s->init_src.fd = -1;
        s->pid_src.fd = -1;
        s->in = BUF_INIT(PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + 2 * SES_READ_CHUNK);
        s->out = BUF_INIT(SES_OUT_MAX);
        s->next = d->sessions;
        if (d->sessions)
                d->sessions->prev = s;
        d->sessions = s;
        d->n_sessions++;
        *ret = s;
        return 0;
}

void ses_free(struct session *s) {
        if (s->freed)
                return;
        s->freed = true;
        ses_drop_sandbox(s, "session deleted");
        if (s->prev)
                s->prev->next = s->next;
        else
                s->d->sessions = s->next;
        if (s->next)
                s->next->prev = s->prev;
        s->d->n_sessions--;
        (void)loop_defer(s->d->loop, ses_free_deferred, s);
}

/* ---- frames from init ---- */

static bool resp_is_error(const struct json *resp) { return json_get(resp, "error") != NULL; }

/* {"phase":phase,"argv":[...]: the start of an exec event of the log. */
static void exec_event_begin(struct json_writer *w, const struct op *op, const char *phase) {
        json_w_obj_begin(w);
        json_w_kstr(w, "phase", phase);
        json_w_key(w, "argv");
        if (op->argv_json)
                json_w_raw(w, op->argv_json, strlen(op->argv_json));
        else
                json_w_null(w);
}

static void exec_event_log(struct op *op, struct json_writer *w) {
        json_w_obj_end(w);
        if (!w->err)
                ses_event(op->ses, "exec", w->b);
        buf_free(w->b);
}

/* The event log's record of a command: at its start (exit NULL), and at its end for a
 * foreground one (a background one ends unseen; ps and output tell how). */
static void exec_event(struct op *op, const struct json *exit) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        char ts[40];
        exec_event_begin(&w, op, exit ? "end" : "start");
        json_w_kint(&w, "pid", op->pid);
        dl_rfc3339_ms(op->started_ms, ts, sizeof ts);
        json_w_kstr(&w, "started_at", ts);
        json_w_kbool(&w, "background", op->background);
        if (exit) {
                int64_t v;
                dl_rfc3339_ms(meta_now_ms(), ts, sizeof ts);
                json_w_kstr(&w, "ended_at", ts);
                if (json_get_int(exit, "exit_code", &v) == 0)
                        json_w_kint(&w, "exit_code", v);
                if (json_get_int(exit, "signal", &v) == 0)
                        json_w_kint(&w, "signal", v);
                if (json_get_bool(exit, "timed_out", false))
                        json_w_kbool(&w, "timed_out", true);
                if (json_get(exit, "error"))
                        json_w_kstr(&w, "error", "stream failed");
        }
        exec_event_log(op, &w);
}

/* A command init could not start. */
static void exec_failed_event(struct op *op, const struct json *resp) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        exec_event_begin(&w, op, "failed");
        const char *m = json_get_str(json_get(resp, "error"), "message");
        json_w_kstr(&w, "error", m ? m : "could not start");
        exec_event_log(op, &w);
}

/* Passes a frame on to op's client, if it has one (the one it had before op_done). */
static void op_frame(struct op *op, void *client, const struct proto_hdr *h, const uint8_t *payload,
                     const struct json *j) {
        if (client)
                op->ops->frame(op, client, h, payload, j);
}

/* The RESP to op's REQ: what it changes, then its client's answer. */
static void on_resp(struct op *op, const struct proto_hdr *h, const struct json *resp) {
        void *client = op->client;
        switch (op->kind) {
        case OP_EXEC:
                if (resp_is_error(resp)) {
                        exec_failed_event(op, resp);
                        op_done(op);
                        break;
                }
                op->got_resp = true;
                op->stdin_acks = op->stdin_stream && json_get_bool(resp, "stdin_acks", false);
                (void)json_get_int(resp, "pid", &op->pid);
                exec_event(op, NULL);
                if (op->background) {
                        op_done(op);
                        break;
                }
                if (!client) {
                        op_kill_fg(op); /* the op lives on until the EXIT */
                        return;
                }
                break;
        case OP_ATTACH:
        case OP_READ:
        case OP_WATCH:
                if (resp_is_error(resp))
                        op_done(op);
                else
                        op->got_resp = true;
                break;
        case OP_TCP:
                if (resp_is_error(resp))
                        op_done(op);
                else {
                        op->got_resp = true;
                        op->stdin_acks = json_get_bool(resp, "stdin_acks", false);
                }
                break;
        case OP_WRITE:
        case OP_SIMPLE:
                op_done(op);
                break;
        case OP_KILL:
                op_done(op);
                return;
        }
        op_frame(op, client, h, NULL, resp);
}

/* ---- the init key (protocol.md §1) ---- */

static int key_path(const struct session *s, char **ret) {
        if (!s->dir)
                return -EINVAL;
        return asprintf(ret, "%s/" SES_KEY_FILE, s->dir) < 0 ? -ENOMEM : 0;
}

static void key_hex(const uint8_t key[PROTO_KEY_LEN], char hex[2 * PROTO_KEY_LEN + 1]) {
        for (size_t i = 0; i < PROTO_KEY_LEN; i++)
                snprintf(hex + 2 * i, 3, "%02x", key[i]);
}

static int key_unhex(const char *hex, uint8_t ret[PROTO_KEY_LEN]) {
        if (!hex || strlen(hex) != 2 * PROTO_KEY_LEN)
                return -EINVAL;
        for (size_t i = 0; i < PROTO_KEY_LEN; i++) {
                unsigned v;
                if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1]) ||
                    sscanf(hex + 2 * i, "%2x", &v) != 1)
                        return -EINVAL;
                ret[i] = (uint8_t)v;
        }
        return 0;
}

int ses_key_give(struct session *s) {
        if (!s->dir)
                return -EINVAL;
        /* Sent after its HELLO says it takes one: an older init (restored from a memory
         * snapshot made before keys) would close the connection at an unknown frame. */
        s->key_offer = true;
        s->proof_pending = false; /* this connection is the one the runtime made for us */
        s->init_key_set = false;
        return 0;
}

/* The first HELLO on the connection a runtime made: a new key for init, on record first. */
static int key_send(struct session *s) {
        _cleanup_free_ char *path = NULL;
        int r = key_path(s, &path);
        if (r < 0)
                return r;
        uint8_t key[PROTO_KEY_LEN];
        if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
                return -EIO;
        char hex[2 * PROTO_KEY_LEN + 2];
        key_hex(key, hex);
        strcat(hex, "\n");
        /* No fsync: the sandbox does not outlive the host, and the file only matters to a
         * daemon that re-attaches a live one. */
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        errno = 0;
        if (fchmod(fd, 0600) < 0 || write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex))
                return errno ? -errno : -EIO;
        r = ses_send(s, PROTO_KEY, 0, key, sizeof key);
        if (r < 0)
                return r;
        memcpy(s->init_key, key, sizeof key);
        s->init_key_set = true;
        return 0;
}

static void key_offer(struct session *s, const struct json *hello) {
        s->key_offer = false;
        if (!json_get_bool(hello, "keys", false)) {
                log_warn("%s: the space-init of sandbox %s takes no key (an older one): a re-attach will not "
                         "ask it for proof", s->id, s->sbx_id);
                return;
        }
        int r = key_send(s);
        if (r < 0)
                ses_mark_dead(s, "giving space-init its key: %s", strerror(-r));
}

int ses_key_require(struct session *s) {
        _cleanup_free_ char *path = NULL;
        int r = key_path(s, &path);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
                return -ENOENT;
        /* From here on, failing closed: no HELLO can prove itself without a key. */
        s->key_offer = false;
        s->init_key_set = false;
        s->proof_pending = true;
        s->refused = 0;
        s->proof_deadline_ms = s->hello_deadline_ms ? s->hello_deadline_ms : util_now_ms() + SES_HELLO_TIMEOUT_MS;
        if (fd < 0)
                return -errno;
        char hex[2 * PROTO_KEY_LEN + 2];
        ssize_t n = read(fd, hex, sizeof hex);
        if (n < 0)
                return -errno;
        if (n != (ssize_t)sizeof hex - 1 || hex[n - 1] != '\n')
                return -EBADMSG;
        hex[n - 1] = '\0';
        if (key_unhex(hex, s->init_key) < 0)
                return -EBADMSG;
        s->init_key_set = true;
        return 0;
}

/* Constant time: how much of a guess matched must not show. */
static bool key_shown(const struct session *s, const struct json *hello) {
        uint8_t k[PROTO_KEY_LEN];
        if (!s->init_key_set || !hello || key_unhex(json_get_str(hello, "key"), k) < 0)
                return false;
        unsigned char diff = 0;
        for (size_t i = 0; i < PROTO_KEY_LEN; i++)
                diff |= (unsigned char)(k[i] ^ s->init_key[i]);
        return diff == 0;
}

/* What came on the connection is not (provably) from the sandbox's init: a process that
 * holds init's socket. Nothing of it is acted on, and it doesn't make the sandbox dead:
 * the connection is closed and made again a little later, until the proof deadline. */
static void ses_refuse(struct session *s, const char *why) {
        s->refused++;
        log_warn("%s: refused a connection to sandbox %s that did not prove it is its space-init: %s", s->id,
                 s->sbx_id, why);
        free(s->error);
        if (asprintf(&s->error, "refused a connection that did not prove it is space-init: %s", why) < 0)
                s->error = NULL;
        uint64_t deadline = s->proof_deadline_ms;
        ses_quiesce(s, "space-init is being re-attached");
        buf_reset(&s->in);
        s->in_off = 0;
        buf_reset(&s->out);
        s->out_off = 0;
        s->proof_deadline_ms = deadline;
        s->reconnect_at_ms = util_now_ms() + SES_RECONNECT_MS;
}

static void ses_reconnect(struct session *s, uint64_t now) {
        if (now > s->proof_deadline_ms) {
                s->reconnect_at_ms = 0;
                s->proof_pending = false;
                ses_mark_dead(s, "no space-init proved itself within %d ms of the re-attach (%u connection(s) refused)",
                              SES_HELLO_TIMEOUT_MS, s->refused);
                return;
        }
        s->reconnect_at_ms = now + SES_RECONNECT_MS;
        int r = s->rt->reconnect ? s->rt->reconnect(s->sb) : -EOPNOTSUPP;
        if (r < 0) {
                log_debug("%s: connecting again to sandbox %s: %s", s->id, s->sbx_id, strerror(-r));
                return;
        }
        r = ses_watch(s);
        if (r < 0) {
                log_debug("%s: watching sandbox %s again: %s", s->id, s->sbx_id, strerror(-r));
                return;
        }
        s->reconnect_at_ms = 0;
}

static void on_hello(struct session *s, const struct json *hello) {
        if (s->proof_pending) {
                if (!key_shown(s, hello)) {
                        ses_refuse(s, json_get_str(hello, "key") ? "its HELLO has the wrong key" : "its HELLO has no key");
                        return;
                }
                s->proof_pending = false;
                s->proof_deadline_ms = 0;
                if (s->refused)
                        log_info("%s: sandbox %s's space-init proved itself after %u refused connection(s)", s->id,
                                 s->sbx_id, s->refused);
        }
        int64_t version = 0;
        if (json_get_int(hello, "version", &version) < 0 || version != PROTO_VERSION) {
                ses_mark_dead(s, "space-init speaks protocol version %" PRId64 ", spaced %d", version, PROTO_VERSION);
                return;
        }
        if (s->hello_deadline_ms == 0)
                return; /* not waiting for one */
        if (s->key_offer) {
                key_offer(s, hello);
                if (ses_dead(s))
                        return;
        }
        /* Per connection: a re-attached sandbox may run an init from before windows. */
        s->init_window = json_get_bool(hello, "window", false);
        s->init_tty = json_get_bool(hello, "tty", false);
        s->init_input = json_get_bool(hello, "input", false);
        s->hello_deadline_ms = 0;
        s->ready = true;
        log_info("%s: sandbox %s ready (template %s, init pid %d)", s->id, s->sbx_id, s->template, (int)s->init_pid);
        if (s->d->ses_hooks)
                s->d->ses_hooks->ready(s);
}

static void dispatch(struct session *s, const struct proto_hdr *h, const uint8_t *payload) {
        _cleanup_json_ struct json *j = NULL;
        if (s->proof_pending && h->type != PROTO_HELLO) {
                ses_refuse(s, "its first frame is not a HELLO");
                return;
        }
        if (proto_type_is_json(h->type)) {
                char err[128];
                int r = json_parse((const char *)payload, h->len, &j, err, sizeof err);
                if (r < 0 && s->proof_pending) {
                        ses_refuse(s, "its HELLO is not JSON");
                        return;
                }
                if (r < 0) {
                        ses_mark_dead(s, "space-init sent bad JSON in a %s frame: %s", proto_type_name(h->type), err);
                        return;
                }
        }
        if (h->type == PROTO_HELLO) {
                on_hello(s, j);
                return;
        }
        struct op *op = op_find(s, h->id);
        if (!op)
                return; /* a stream we cancelled: its last frames cross our CANCEL */
        void *client = op->client;
        switch (h->type) {
        case PROTO_RESP:
                on_resp(op, h, j);
                return;
        case PROTO_STDOUT:
        case PROTO_STDERR:
                if (op->kind == OP_EXEC || op->kind == OP_ATTACH || op->kind == OP_TCP ||
                    (op->kind == OP_WATCH && h->type == PROTO_STDOUT))
                        op_frame(op, client, h, payload, j);
                return;
        case PROTO_EXIT:
                if (op->kind == OP_EXEC && !op->background)
                        exec_event(op, j);
                if (op->kind == OP_READ) {
                        /* A read that failed midway: the download must not look complete. */
                        if (client)
                                log_warn("%s: read failed midway", s->id);
                        op_done(op);
                }
                /* exec, attach: the last event ends the response; the op ends with it */
                if (op->kind == OP_EXEC || op->kind == OP_ATTACH || op->kind == OP_READ || op->kind == OP_TCP ||
                    op->kind == OP_WATCH)
                        op_frame(op, client, h, payload, j);
                op_done(op);
                return;
        case PROTO_WINDOW:
                /* init acks streamed stdin (protocol.md §3.15); only where it was asked to */
                if ((op->kind != OP_EXEC && op->kind != OP_TCP) || !op->stdin_acks) {
                        ses_mark_dead(s, "space-init sent an unexpected %s frame", proto_type_name(h->type));
                        return;
                }
                op->stdin_inflight -= MIN((uint64_t)proto_window_decode(payload), op->stdin_inflight);
                if (client && op->ops->room)
                        op->ops->room(op, client);
                return;
        case PROTO_DATA:
                if (op->kind != OP_READ)
                        return;
                if (h->len == 0)
                        op_done(op);
                else
                        op->bytes += h->len;
                op_frame(op, client, h, payload, j);
                return;
        default:
                ses_mark_dead(s, "space-init sent an unexpected %s frame", proto_type_name(h->type));
                return;
        }
}

static void ses_process(struct session *s) {
        /* Frames are handled in place; s->in is not touched until the loop ends, so payload
         * pointers stay valid through the handlers (which never read from init). */
        while (!s->freed && !ses_dead(s) && !s->stalled) {
                struct proto_hdr h;
                const uint8_t *payload;
                struct buf view = { .data = s->in.data + s->in_off, .len = s->in.len - s->in_off };
                int r = view.len ? proto_frame_peek(&view, &h, &payload) : 0;
                if (r == 0)
                        break;
                if (r < 0 && s->proof_pending) {
                        ses_refuse(s, "a framing error before its HELLO");
                        break;
                }
                if (r < 0) {
                        ses_mark_dead(s, "protocol error from space-init: %s", strerror(-r));
                        return;
                }
                if (s->proof_pending && h.type != PROTO_HELLO) {
                        ses_refuse(s, "its first frame is not a HELLO");
                        break;
                }
                struct op *op = h.type == PROTO_HELLO ? NULL : op_find(s, h.id);
                bool output = op && op_output_frame(op, &h);
                if (output && op->windowed) {
                        if (h.len > op->window_left) {
                                ses_mark_dead(s, "space-init overran the window of stream %u (%u bytes, %u granted)",
                                              h.id, h.len, op->window_left);
                                return;
                        }
                        op->window_left -= h.len;
                        op->owed += h.len;
                } else if (output && op->client && op->ops->behind(op, op->client)) {
                        /* An init without windows, and a client that reads slower than the
                         * command writes: hold this frame and stop reading init until the
                         * client drains (op_client_drained). */
                        s->stalled = true;
                        op->stalling = true;
                        break;
                }
                s->in_off += PROTO_HDR_SIZE + h.len;
                dispatch(s, &h, payload);
                /* Freed only after the batch: op is still valid here, maybe done. */
                if (output && op->windowed && !s->freed && !ses_dead(s))
                        op_window_grant(op);
        }
        if (s->freed)
                return;
        if (s->in_off) {
                buf_consume(&s->in, s->in_off);
                s->in_off = 0;
        }
        if (!ses_dead(s))
                ses_update_events(s);
}

static void ses_resume(struct session *s) {
        if (!s->stalled || s->freed)
                return;
        s->stalled = false;
        ses_process(s);
}

static void ses_resume_deferred(void *p) { ses_resume(p); }

static void ses_resume_later(struct session *s) {
        /* Frees are deferred too and run in queue order, so a session not yet freed now
         * outlives this callback. */
        if (!s->freed)
                (void)loop_defer(s->d->loop, ses_resume_deferred, s);
}

static void ses_update_events(struct session *s) {
        if (ses_dead(s) || s->init_src.fd < 0 || s->freed)
                return;
        uint32_t ev = 0;
        if (!s->stalled && s->in.len < PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + SES_READ_CHUNK)
                ev |= EPOLLIN;
        if (s->out_off < s->out.len)
                ev |= EPOLLOUT;
        (void)loop_mod(s->d->loop, &s->init_src, ev);
}

/* Marks s dead with the best reason known: init's wait status if it has ended. */
static void ses_init_gone(struct session *s, const char *fallback) {
        struct rt_health h = { 0 };
        /* Its socket closes while init is still exiting: give the exit a moment to show
         * in the pidfd so the reason says how it ended. Rare, and bounded. */
        if (s->pid_src.fd >= 0) {
                struct pollfd p = { .fd = s->pid_src.fd, .events = POLLIN };
                (void)poll(&p, 1, 200);
        }
        if (s->sb && s->rt->health(s->sb, &h) == 0 && !h.alive) {
                int st = h.init_status;
                s->oom_killed = s->oom_killed || h.oom_killed;
                if (h.status_unknown)
                        ses_mark_dead(s, "space-init's sandbox ended: %s%s", h.detail,
                                      h.oom_killed ? " (the memory limit was reached)" : "");
                else if (WIFSIGNALED(st))
                        ses_mark_dead(s, "space-init was killed by signal %d%s", WTERMSIG(st),
                                      WTERMSIG(st) == SIGKILL && h.oom_killed ? " (the memory limit was reached)" : "");
                else
                        ses_mark_dead(s, "space-init exited with status %d", WEXITSTATUS(st));
                return;
        }
        ses_mark_dead(s, "%s", fallback);
}

static void init_event(struct loop_src *src, uint32_t revents) {
        struct session *s = (struct session *)((char *)src - offsetof(struct session, init_src));
        if (revents & EPOLLOUT)
                ses_flush(s);
        if (ses_dead(s))
                return;
        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (s->stalled || buf_reserve(&s->in, SES_READ_CHUNK) < 0) {
                        /* No room (a slow client holds frames): only a hang-up matters now. */
                        if (revents & (EPOLLHUP | EPOLLERR))
                                ses_init_gone(s, "space-init closed its connection");
                        return;
                }
                ssize_t n = recv(s->init_src.fd, s->in.data + s->in.len, SES_READ_CHUNK, 0);
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        if (s->proof_pending)
                                ses_refuse(s, strerror(errno));
                        else
                                ses_mark_dead(s, "reading from space-init: %s", strerror(errno));
                        return;
                }
                if (n == 0) {
                        ses_process(s);
                        if (!s->freed && !ses_dead(s) && s->proof_pending && s->init_src.fd >= 0)
                                ses_refuse(s, "it closed the connection before its HELLO");
                        else if (!s->freed && !ses_dead(s) && s->init_src.fd >= 0)
                                ses_init_gone(s, "space-init closed its connection");
                        return;
                }
                if (n > 0)
                        s->in.len += (size_t)n;
                ses_process(s);
        }
        if (!s->freed && !ses_dead(s))
                ses_update_events(s);
}

static void pid_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct session *s = (struct session *)((char *)src - offsetof(struct session, pid_src));
        /* Frames init sent before it died are still worth delivering. */
        if (s->init_src.fd >= 0) {
                for (int i = 0; i < 64 && !ses_dead(s) && !s->stalled && !s->freed; i++) {
                        if (buf_reserve(&s->in, SES_READ_CHUNK) < 0)
                                break;
                        ssize_t n = recv(s->init_src.fd, s->in.data + s->in.len, SES_READ_CHUNK, MSG_DONTWAIT);
                        if (n <= 0)
                                break;
                        s->in.len += (size_t)n;
                        ses_process(s);
                }
        }
        if (ses_dead(s) || s->freed)
                return;
        ses_init_gone(s, "space-init ended");
}

void ses_tick(struct daemon *d) {
        uint64_t now = util_now_ms();
        for (struct session *s = d->sessions, *next; s; s = next) {
                next = s->next;
                if (s->reconnect_at_ms && now >= s->reconnect_at_ms && !ses_dead(s))
                        ses_reconnect(s, now);
                if (s->hello_deadline_ms && now > s->hello_deadline_ms && !ses_dead(s))
                        ses_mark_dead(s, "space-init did not say hello within %d ms", SES_HELLO_TIMEOUT_MS);
                if (ses_dead(s))
                        continue;
                for (struct op *op = s->ops, *onext; op; op = onext) {
                        onext = op->next;
                        if (op->drain_deadline_ms && now > op->drain_deadline_ms && !op->client) {
                                log_info("%s: killed exec pid %" PRId64 " still streams after %d ms: cancelled",
                                         s->id, op->pid, SES_KILL_DRAIN_MS);
                                (void)ses_send(s, PROTO_CANCEL, op->id, NULL, 0);
                                op_done(op);
                                if (ses_dead(s))
                                        break;
                        }
                }
        }
}

/* ---- create ---- */

static int env_from_json(const struct json *obj, char ***ret, size_t *ret_n, const char **why) {
        if (!obj) {
                *ret = NULL;
                *ret_n = 0;
                return 0;
        }
        if (json_type(obj) != JSON_OBJECT) {
                *why = "env must be an object of strings";
                return -EINVAL;
        }
        size_t n = json_len(obj);
        if (n > SES_MAX_ENV) {
                *why = "too many env entries";
                return -E2BIG;
        }
        char **env = calloc(n + 1, sizeof *env);
        if (!env)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const char *k = json_key_at(obj, i);
                const char *v = json_str(json_at(obj, i));
                if (!v || !*k || strchr(k, '=') || strlen(k) + strlen(v) > PROTO_MAX_PATH * 8) {
                        *why = "env: keys must be non-empty without '=', values strings";
                        for (size_t k2 = 0; k2 < i; k2++)
                                free(env[k2]);
                        free(env);
                        return -EINVAL;
                }
                if (asprintf(&env[i], "%s=%s", k, v) < 0) {
                        for (size_t k2 = 0; k2 < i; k2++)
                                free(env[k2]);
                        free(env);
                        return -ENOMEM;
                }
        }
        *ret = env;
        *ret_n = n;
        return 0;
}

int ses_parse_env(const struct json *obj, char ***ret, size_t *ret_n, const char **why) {
        return env_from_json(obj, ret, ret_n, why);
}

bool ses_token_ok(const struct session *s, const char *token) {
        char h[META_HASH_HEX + 1];
        if (!dl_token_well_formed(token) || !s->token_hash[0] || meta_token_hash(token, h) < 0)
                return false;
        /* Constant time: how much of a guess matched must not show in the answer time. */
        return auth_hash_equal(h, s->token_hash);
}

void ses_unwatch_keep(struct session *s) {
        ses_unwatch(s);
        if (s->sb) {
                if (s->rt->release)
                        s->rt->release(s->sb);
                s->sb = NULL; /* without release: the handle leaks, the sandbox lives */
        }
        s->ready = false;
        s->sbx_id[0] = '\0';
        free(s->dir);
        s->dir = NULL;
}

int ses_watch(struct session *s) {
        struct daemon *d = s->d;
        s->init_pid = s->rt->init_pid(s->sb);
        int ifd = s->rt->init_fd(s->sb), pfd = s->rt->pid_fd(s->sb);
        /* The socket is the sandbox's; we only need it non-blocking for the loop. */
        int fl = fcntl(ifd, F_GETFL);
        if (fl < 0 || fcntl(ifd, F_SETFL, fl | O_NONBLOCK) < 0)
                return -errno;
        s->lost = false;
        s->ready = false;
        s->oom_killed = false;
        s->init_src.fd = ifd;
        s->init_src.cb = init_event;
        s->pid_src.fd = pfd;
        s->pid_src.cb = pid_event;
        int r;
        if ((r = loop_add(d->loop, &s->init_src, EPOLLIN)) < 0 || (r = loop_add(d->loop, &s->pid_src, EPOLLIN)) < 0) {
                ses_unwatch(s);
                return r;
        }
        s->hello_deadline_ms = util_now_ms() + SES_HELLO_TIMEOUT_MS;
        /* HELLO may already be in the socket; the loop will see it. */
        return 0;
}
