/* HTTP/1.1 request parser and response formatting for spaced. No I/O and no allocation:
 * the caller feeds bytes as they arrive and gets events back (head parsed, body bytes,
 * message end, error with the status to answer), so it can be unit-tested and fuzzed. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"

#define HTTP_MAX_HEAD (16u << 10)        /* request line + headers; over it: 431 */
#define HTTP_MAX_HEADERS 64              /* header fields in one request; over it: 431 */
#define HTTP_MAX_METHOD 16
#define HTTP_MAX_CHUNK_LINE 256          /* "1a2b;ext=…\r\n" of a chunked body; over it: 400 */
#define HTTP_MAX_TRAILERS 4096           /* all trailer lines of a chunked body; over it: 431 */
#define HTTP_MAX_JSON_BODY (1u << 20)    /* JSON request bodies; over it: 413 */
#define HTTP_MAX_UPLOAD (256u << 20)     /* file uploads; over it: 413 */

struct http_header {
        const char *name;
        const char *value; /* leading and trailing blanks stripped */
};

/* A parsed request head. Every pointer points into the parser and stays valid until the
 * parser starts the next request (the next HTTP_EV_HEAD). */
struct http_request {
        const char *method;
        const char *target;  /* raw request-target as sent */
        const char *path;    /* percent-decoded path part of target (no NUL bytes inside) */
        const char *query;   /* raw query after '?', "" if none; decode with http_query_get */
        int version_minor;   /* HTTP/1.<n>: 0 or 1 */
        struct http_header headers[HTTP_MAX_HEADERS];
        size_t n_headers;
        bool chunked;             /* Transfer-Encoding: chunked */
        bool has_length;          /* Content-Length given */
        uint64_t content_length;
        bool keep_alive;          /* from version + Connection */
        bool expect_continue;     /* Expect: 100-continue */
};

enum http_event_type {
        HTTP_EV_NEED_MORE, /* every byte given was consumed; feed more */
        HTTP_EV_HEAD,      /* a request head is complete: see http_parser_request() */
        HTTP_EV_BODY,      /* ev.data/ev.len: body bytes (a slice of the caller's input) */
        HTTP_EV_END,       /* the request (head + body) is complete */
        HTTP_EV_ERROR,     /* ev.status (400, 413, 431) and ev.message; the parser stays failed */
};

struct http_event {
        enum http_event_type type;
        const char *data;
        size_t len;
        int status;
        const char *message;
};

enum http_state {
        HTTP_S_HEAD,
        HTTP_S_BODY_LENGTH,
        HTTP_S_CHUNK_SIZE,
        HTTP_S_CHUNK_DATA,
        HTTP_S_CHUNK_CRLF,
        HTTP_S_TRAILERS,
        HTTP_S_END,   /* the next feed reports HTTP_EV_END */
        HTTP_S_ERROR,
};

struct http_parser {
        enum http_state state;
        uint64_t body_limit;   /* largest body accepted; set per request by the caller */
        uint64_t body_seen;
        uint64_t remaining;    /* of the Content-Length body or of the current chunk */
        size_t head_len;
        size_t line_len;       /* chunk-size line, CRLF after chunk, or trailer bytes */
        size_t trailer_total;
        int err_status;
        const char *err_message;
        struct http_request req;
        char line[HTTP_MAX_CHUNK_LINE];
        char head[HTTP_MAX_HEAD + 1];
        char path[HTTP_MAX_HEAD + 1];
};

/* Resets p for the first request of a connection; body_limit starts at HTTP_MAX_UPLOAD. */
void http_parser_init(struct http_parser *p);
/* Consumes at most len bytes of in and returns how many it used; *ev says what happened.
 * Call again with the rest of the input (possibly 0 bytes: HTTP_EV_END of a request without
 * body needs no input) until it reports HTTP_EV_NEED_MORE. After HTTP_EV_END the parser
 * is ready for the next request on the same connection (keep-alive, pipelining). */
size_t http_parser_feed(struct http_parser *p, const char *in, size_t len, struct http_event *ev);
/* The head of the request being parsed (valid after HTTP_EV_HEAD). */
const struct http_request *http_parser_request(const struct http_parser *p);
/* Lowers or raises the body limit of the current request (call after HTTP_EV_HEAD).
 * -EFBIG if its Content-Length is already over the new limit. */
int http_parser_set_body_limit(struct http_parser *p, uint64_t limit);
/* True while the body of the current request has not been fully read. */
bool http_parser_in_body(const struct http_parser *p);

/* Header value by case-insensitive name; the first one wins; NULL if absent. */
const char *http_request_header(const struct http_request *r, const char *name);
/* Header name of r is a comma-separated list holding tok (case-insensitive); false when absent. */
bool http_header_has_token(const struct http_request *r, const char *name, const char *tok);

/* Percent-decodes n bytes of in into out (size outsz, NUL-terminated). '+' becomes a space
 * when plus_is_space. -EINVAL on a bad escape or an encoded NUL, -ENAMETOOLONG if out is
 * too small. *ret_len (optional) gets the decoded length. */
int http_pct_decode(const char *in, size_t n, bool plus_is_space, char *out, size_t outsz, size_t *ret_len);
/* Finds key in a raw query string ("a=1&b=x%20y") and decodes its value into out.
 * A key without '=' has the value "". -ENOENT if absent, else as http_pct_decode. */
int http_query_get(const char *query, const char *key, char *out, size_t outsz);

/* The reason phrase of a status code ("Not Found"); "Unknown" for codes we never send. */
const char *http_status_reason(int status);
/* The API error code for a status (404 -> "not_found"), per docs/api.md. */
const char *http_status_code_name(int status);

/* Appends a response head. content_length < 0 means a chunked body follows. extra_headers
 * (may be NULL) is inserted as is and must end in "\r\n". */
int http_response_head(struct buf *out, int status, const char *content_type, int64_t content_length,
                       bool keep_alive, const char *extra_headers);
/* Appends one chunk of a chunked body; n == 0 appends the last chunk. */
int http_chunk_append(struct buf *out, const void *data, size_t n);
