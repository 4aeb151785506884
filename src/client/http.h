/* A small HTTP/1.1 client for libspace: one connection (Unix socket or TCP) reused across
 * requests (keep-alive), Content-Length and chunked bodies, every size bounded, timeouts
 * through poll(). Internal to libspace; not part of the public API. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>
#include "common/buf.h"

#define HTTP_MAX_HEAD (64u << 10)     /* status line + headers of one answer */
#define HTTP_MAX_CHUNK_LINE 1024      /* "size;ext\r\n" line of a chunked body */
#define HTTP_MAX_HOST 256
#define HTTP_MAX_TARGET 8192          /* path + query of one request */
#define HTTP_READ_SIZE (256u << 10)
#define HTTP_STREAM_CHUNK (256u << 10) /* one chunk of a streamed request body */

enum http_addr_kind { HTTP_ADDR_UNIX = 1, HTTP_ADDR_TCP = 2 };

struct http_addr {
        enum http_addr_kind kind;
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* unix */
        char host[HTTP_MAX_HOST];                               /* tcp, without brackets */
        char port[8];
};

/* "unix:/p", "/p" or "./p" (a path), "tcp://host:port", "host:port", "[v6]:port".
 * -EINVAL when it is none of these, -ENAMETOOLONG for a socket path too long. */
int http_addr_parse(const char *s, struct http_addr *ret);
/* "unix:/p" or "tcp://host:port" into out (always NUL-terminated). */
void http_addr_format(const struct http_addr *a, char *out, size_t n);

struct http_conn {
        struct http_addr addr;
        int fd;         /* -EBADF when not connected */
        struct buf in;  /* bytes read but not yet consumed */
        bool reused;    /* fd already carried a complete exchange */
};

void http_conn_init(struct http_conn *c, const struct http_addr *addr);
void http_conn_close(struct http_conn *c);

struct http_request {
        const char *method;
        const char *target;        /* "/v1/sessions?x=y", already encoded */
        const char *content_type;  /* NULL: none */
        const void *body;          /* in memory, or ... */
        size_t body_len;
        bool body_from_fd;         /* ... or from body_fd: body_len bytes from its offset */
        int body_fd;
        /* ... or body (if any) and then body_fd read to its EOF, sent chunked while the
         * answer is read (full duplex: a thread writes; never resent on a new connection). */
        bool body_stream;
        int timeout_ms;            /* per wait; < 0 = no limit */
        /* Extra header lines, "Name: value" each, NULL-terminated; may be NULL. The
         * caller guarantees they hold no CR or LF. */
        const char *const *headers;
};

struct http_response {
        int status;
        bool chunked;
        bool has_length;
        uint64_t length;
        bool close;               /* the server won't keep the connection */
        char content_type[128];
        char ws_accept[64];       /* Sec-WebSocket-Accept of an upgrade (a terminal), "" if none */
        char server_timing[256];  /* Server-Timing (spaced: where a create's time went), "" if none */
};

/* Receives the decoded body piece by piece; a negative return stops the exchange (the
 * connection is then closed) and is returned by http_do. */
typedef int (*http_body_fn)(void *userdata, const struct http_response *resp, const char *data, size_t n);

/* Sends the request and reads the whole answer. A reused connection the server has closed
 * meanwhile is reopened and the request sent again, once, if nothing of an answer came.
 * Errors: the connect/IO errno, -ETIMEDOUT, -EBADMSG (malformed answer), -E2BIG (head
 * over HTTP_MAX_HEAD), -ECONNRESET (closed mid-answer), or on_body's own error. */
int http_do(struct http_conn *c, const struct http_request *req, struct http_response *resp,
            http_body_fn on_body, void *userdata);

/* An upgraded connection (port-forward): a new connection to addr (never c's own), req
 * sent with its headers (which must ask for the upgrade) and no body, and the answer's
 * head read byte by byte, so that nothing after it is taken from the socket. 101: 0 and
 * *ret_fd, the connected socket (non-blocking, close-on-exec), now raw bytes both ways.
 * Another status: 0, *ret_fd -1, and up to max_body bytes of its body in *ret_body. */
int http_upgrade(const struct http_addr *addr, const struct http_request *req, struct http_response *ret_resp,
                 struct buf *ret_body, size_t max_body, int *ret_fd);

/* Percent-encodes s for use in a query value or path segment. */
int http_urlencode(struct buf *b, const char *s);
