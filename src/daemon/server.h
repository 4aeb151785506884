/* spaced's HTTP transport (server.c): listening sockets, one struct conn per client, the
 * request parser, bounded output, and the answers. It knows nothing above it: requests go
 * through the router it is given, and what a request leaves in flight (a request to a
 * sandbox, a lifecycle action, a template build) learns of its client through the
 * connection's one hook. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "meta/meta.h"
#include "daemon/http.h"
#include "daemon/loop.h"
#include "daemon/routes.h"

/* Per connection: unparsed input we hold at most (we stop reading past it). */
#define CONN_IN_MAX (64u << 10)
/* Output queued to one client: past HIGH we stop forwarding a sandbox's frames to it until
 * it drains below LOW. MAX is a hard stop that no single append can pass by much. */
#define CONN_OUT_HIGH (256u << 10)
#define CONN_OUT_LOW (64u << 10)
#define CONN_OUT_MAX (8u << 20)
/* Connection slots, the request-head deadline, strangers and per-peer caps: limits.h
 * (spaced --limit). */
/* A request body that stops arriving half-way is answered 408 after this. */
#define CONN_REQUEST_TIMEOUT_MS 60000
#define CONN_LINGER_MS 2000
#define CONN_LINGER_MAX (64u << 20) /* bytes dropped in CONN_LINGER before closing anyway */
/* A keep-alive connection with no request in progress is closed after this: idle clients
 * would otherwise hold the connection slots forever. Clients reconnect. */
#define CONN_IDLE_TIMEOUT_MS 120000
/* How long the listeners rest when accept has no fd to give (EMFILE): the waiting clients
 * stay queued in the backlog and the loop does not spin on a listener it cannot serve. */
#define SRV_ACCEPT_BACKOFF_MS 100u

struct daemon;
struct conn;

/* What server.c dispatches to (the API layer's route table: routes.c, api_router). */
struct srv_router {
        /* 0 and *ret, *params on a match; -ENOENT (404) or -EOPNOTSUPP (405). */
        int (*match)(const char *method, const char *path, const struct api_route **ret, struct api_params *params);
        /* "GET, DELETE": the methods that serve path, for the Allow header of a 405. */
        void (*allowed)(const char *path, char *out, size_t outsz);
        /* Called with every request head before it is authenticated or routed: true when
         * it took the request (a proxied one: api_ports.c), which it then answers or takes
         * the connection over with conn_detach. NULL: none. */
        bool (*intercept)(struct conn *c);
        /* Called with a routed request head before its route runs: true when it holds the
         * request (a paused session is resumed for it first: daemon/lifetime.h), which it
         * then answers or runs with conn_dispatch. NULL: none. */
        bool (*hold)(struct conn *c);
        /* Every answer's status as its head is written (metrics); NULL: none. */
        void (*answered)(struct conn *c, int status);
};

/* Whoever answers a request after its handler returned (a request to a sandbox, a waiting
 * lifecycle action, a template build) hooks the connection, and so learns when the client
 * leaves. A connection has one request in flight, so one hook. The hook is cleared before
 * any of these runs: a callback may set a new one. */
struct conn_hook_ops {
        /* The client is gone: the connection closed, or the request was abandoned (a
         * malformed body). */
        void (*gone)(struct conn *c, void *ctx);
        /* The response is complete; what runs on does so without the client. NULL: gone. */
        void (*done)(struct conn *c, void *ctx);
        /* The client took queued output (a write on EPOLLOUT); conn_over_high and
         * conn_below_low say how much is left. NULL: nothing to do. */
        void (*drained)(struct conn *c, void *ctx);
        /* A client that shuts down its sending side has left (a stream it waits for is
         * cancelled, docs/api.md), rather than just finished sending. */
        bool hangup_is_gone;
};

enum conn_state {
        CONN_IDLE,        /* parsing the next request */
        CONN_BODY_JSON,   /* collecting a JSON body for the route */
        CONN_BODY_STREAM, /* passing the body to the handler as it comes (upload) */
        CONN_BODY_DISCARD,/* answered already; dropping the rest of the body */
        CONN_WAIT,        /* the handler answers asynchronously */
        CONN_CLOSING,     /* flush what is queued, then close */
        CONN_LINGER,      /* answered and shut down for writing, with the request unread: the
                           * rest is read and dropped until EOF or CONN_LINGER_MS, so that the
                           * kernel does not answer it with a reset that can cut off the tail
                           * of the answer (a TCP client's exec whose command left stdin unread) */
};

struct conn {
        struct loop_src src;
        struct daemon *d;
        struct conn *next, *prev;
        enum conn_state state;
        bool closed;           /* fd closed, waiting for the deferred free */
        bool in_flight;        /* counted in daemon.n_in_flight: its request not answered yet */
        bool in_process;       /* inside conn_process(): guards recursion */
        bool peer_closed;      /* read EOF from the client */
        bool rdhup;            /* EPOLLRDHUP seen (EOF will follow) */
        bool in_paused;        /* an upload waits for the sandbox to take data */
        bool keep_alive;
        bool streaming;        /* a chunked response is under way */
        bool framed;           /* ... in the binary framing (common/frame.h), not NDJSON */
        bool resp_done;        /* this request's response is complete */
        bool process_queued;   /* conn_process is deferred to the end of the batch */
        bool tcp;              /* came through --listen: every request needs a bearer token */
        bool admin;            /* the local operator (Unix socket, no token): templates, GC */
        bool stranger;         /* TCP, and no request of it authenticated yet */
        uint8_t peer[16];      /* TCP: the client's IPv6 /64 or IPv4 address (v4-mapped) */
        uint64_t head_since_ms; /* a request head is due since (accept, its first byte); 0: none */
        bool linger;           /* closing with the request's body unread: CONN_LINGER first */
        uint64_t linger_until_ms;
        uint64_t lingered;     /* bytes dropped in CONN_LINGER */
        char tenant[META_NAME_MAX + 1]; /* whose sessions this request may see (auth.h) */
        uint64_t last_read_ms;
        uint64_t idle_since_ms; /* when the last response was complete (or the accept) */
        struct buf in;
        size_t in_off;
        struct buf out;
        size_t out_off;
        struct http_parser *parser;
        const struct http_request *req;
        const struct api_route *route;
        struct api_params params;
        struct buf body;
        const struct conn_hook_ops *hook; /* what answers this request later, if anything */
        void *hook_ctx;
        /* Answers this request's errors in another API's dialect (the E2B API); NULL:
         * SPACE's own ({"error":{...}}). Reset with every request head. */
        void (*error_reply)(struct conn *c, int status, const char *msg);
        /* CONN_BODY_STREAM: body bytes; returns <0 to fail the request. */
        int (*on_body)(struct conn *c, const char *data, size_t n);
        void (*on_body_end)(struct conn *c);
};

/* Listens on the Unix socket path (mode 0600) and dispatches every request through router. */
int srv_serve_unix(struct daemon *d, const struct srv_router *router, const char *path);
/* Listens on host:port too (after srv_serve_unix: the same router). */
int srv_listen_tcp(struct daemon *d, const char *hostport);
/* A second TCP listener, the E2B API's own port (spaced --e2b-listen): the same router,
 * the same rules (every request carries a token). */
int srv_listen_tcp_e2b(struct daemon *d, const char *hostport);
/* A request another layer authenticated (the E2B API's keys): c no longer counts against
 * the strangers' slots. */
void conn_authenticated(struct conn *c);
void srv_close_all(struct daemon *d);
/* Serves HTTP on a connected, non-blocking fd (taken over on success) through d->router. */
int srv_conn_new(struct daemon *d, int fd);
/* {"error":{"code":"<from status>","message":msg}} */
void srv_error_body(struct buf *b, int status, const char *msg);
/* Once a second: times out request heads past their deadline and bodies that stopped
 * arriving half-way. */
void srv_tick(struct daemon *d);

/* Hooks c (replacing any hook it has); conn_clear_hook unhooks it if ctx is its hook's. */
void conn_set_hook(struct conn *c, const struct conn_hook_ops *ops, void *ctx);
void conn_clear_hook(struct conn *c, const void *ctx);
/* The hook's ctx when c is hooked by ops, else NULL. */
void *conn_hook_ctx(const struct conn *c, const struct conn_hook_ops *ops);

/* Answers: a complete JSON response, an error ({"error":{code,message}}), or an empty 204. */
void conn_reply_json(struct conn *c, int status, const struct buf *body);
/* The same with header lines (each ending in "\r\n"): a paged list's cursor. */
void conn_reply_json_headers(struct conn *c, int status, const struct buf *body, const char *extra_headers);
void conn_reply_error(struct conn *c, int status, const char *fmt, ...) _printf_(3, 4);
void conn_reply_empty(struct conn *c, int status);
/* A complete answer of another type (GET /metrics: Prometheus text), body as it is. */
void conn_reply_typed(struct conn *c, int status, const char *content_type, const struct buf *body);
/* An empty answer with header lines (each ending in "\r\n"): a redirect, a cookie. */
void conn_reply_headers(struct conn *c, int status, const char *extra_headers);
/* An error with "Retry-After: retry_s" (at least 1): a 429 or 503 the client may retry. */
void conn_reply_retry(struct conn *c, int status, unsigned retry_s, const char *fmt, ...) _printf_(4, 5);
/* Chunked streams: the head, then raw chunks or one JSON line per event, then the end. A
 * stream begun as FRAME_CONTENT_TYPE carries each event as a FRAME_EVENT frame, and
 * output as conn_stream_data's frames. */
void conn_stream_begin(struct conn *c, int status, const char *content_type);
void conn_stream_chunk(struct conn *c, const void *data, size_t n);
void conn_stream_event(struct conn *c, const struct buf *json_line);
void conn_stream_data(struct conn *c, uint8_t kind, const void *data, size_t n);
void conn_stream_end(struct conn *c);
/* Drops the connection without ending the response (a truncated download must look so). */
void conn_abort(struct conn *c);
/* The connection leaves HTTP (a proxied request, an upgrade): its socket is returned and
 * c is closed without it. Output still queued is moved to *ret_out and input not yet
 * parsed (the current request's body onwards) to *ret_in, both unlimited buffers the
 * caller frees. -EBADF if c is closed already. */
int conn_detach(struct conn *c, struct buf *ret_out, struct buf *ret_in);
/* Runs the route of c's request head (held by the router's hold): a streaming route's
 * handler now, a JSON route's once its body is in (after conn_resume_input, if held). */
void conn_dispatch(struct conn *c);
/* Parses what c holds now (a held request's body, once its route runs). */
void conn_process_input(struct conn *c);
/* Resumes parsing an upload paused with c->in_paused. */
void conn_resume_input(struct conn *c);
/* Sends "100 Continue" when the client waits for it. */
void conn_continue(struct conn *c);
/* Queued output over CONN_OUT_HIGH (the client is behind), under CONN_OUT_LOW (caught up). */
bool conn_over_high(const struct conn *c);
bool conn_below_low(const struct conn *c);
