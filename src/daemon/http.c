/* HTTP/1.1 request parsing (incremental, bounded) and response formatting for spaced.
 * The head is collected into a fixed buffer and parsed once complete; bodies are never
 * copied: body events point into the caller's input. */
#include "daemon/http.h"

#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "common/text.h"

static void set_error(struct http_parser *p, struct http_event *ev, int status, const char *msg) {
        p->state = HTTP_S_ERROR;
        p->err_status = status;
        p->err_message = msg;
        *ev = (struct http_event){ .type = HTTP_EV_ERROR, .status = status, .message = msg };
}

void http_parser_init(struct http_parser *p) {
        p->state = HTTP_S_HEAD;
        p->body_limit = HTTP_MAX_UPLOAD;
        p->body_seen = 0;
        p->remaining = 0;
        p->head_len = 0;
        p->line_len = 0;
        p->trailer_total = 0;
        p->err_status = 0;
        p->err_message = NULL;
        memset(&p->req, 0, sizeof p->req);
}

const struct http_request *http_parser_request(const struct http_parser *p) { return &p->req; }

bool http_parser_in_body(const struct http_parser *p) {
        return p->state == HTTP_S_BODY_LENGTH || p->state == HTTP_S_CHUNK_SIZE || p->state == HTTP_S_CHUNK_DATA ||
               p->state == HTTP_S_CHUNK_CRLF || p->state == HTTP_S_TRAILERS;
}

int http_parser_set_body_limit(struct http_parser *p, uint64_t limit) {
        if (p->req.has_length && p->req.content_length > limit)
                return -EFBIG;
        p->body_limit = limit;
        return 0;
}

static bool is_tchar(unsigned char c) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
                return true;
        return strchr("!#$%&'*+-.^_`|~", c) != NULL && c != '\0';
}

int http_pct_decode(const char *in, size_t n, bool plus_is_space, char *out, size_t outsz, size_t *ret_len) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                char c = in[i];
                if (c == '%') {
                        if (i + 2 >= n)
                                return -EINVAL;
                        int hi = text_hex_digit((unsigned char)in[i + 1]), lo = text_hex_digit((unsigned char)in[i + 2]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        c = (char)(hi << 4 | lo);
                        if (c == '\0')
                                return -EINVAL;
                        i += 2;
                } else if (c == '+' && plus_is_space) {
                        c = ' ';
                } else if (c == '\0') {
                        return -EINVAL;
                }
                if (o + 1 >= outsz)
                        return -ENAMETOOLONG;
                out[o++] = c;
        }
        if (outsz == 0)
                return -ENAMETOOLONG;
        out[o] = '\0';
        if (ret_len)
                *ret_len = o;
        return 0;
}

int http_query_get(const char *query, const char *key, char *out, size_t outsz) {
        size_t klen = strlen(key);
        const char *s = query ? query : "";
        while (*s) {
                const char *end = strchr(s, '&');
                size_t n = end ? (size_t)(end - s) : strlen(s);
                const char *eq = memchr(s, '=', n);
                size_t name_len = eq ? (size_t)(eq - s) : n;
                /* Keys are compared after decoding so "p%61th" finds "path". */
                char name[128];
                if (name_len < sizeof name &&
                    http_pct_decode(s, name_len, true, name, sizeof name, NULL) == 0 && strlen(name) == klen &&
                    memcmp(name, key, klen) == 0) {
                        if (!eq)
                                return http_pct_decode("", 0, true, out, outsz, NULL);
                        return http_pct_decode(eq + 1, n - name_len - 1, true, out, outsz, NULL);
                }
                if (!end)
                        break;
                s = end + 1;
        }
        return -ENOENT;
}

const char *http_request_header(const struct http_request *r, const char *name) {
        for (size_t i = 0; i < r->n_headers; i++)
                if (strcasecmp(r->headers[i].name, name) == 0)
                        return r->headers[i].value;
        return NULL;
}

static int parse_u64_dec(const char *s, uint64_t *ret) {
        uint64_t v = 0;
        if (!*s)
                return -EINVAL;
        for (; *s; s++) {
                if (*s < '0' || *s > '9')
                        return -EINVAL;
                if (v > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t)(*s - '0');
        }
        *ret = v;
        return 0;
}

/* Parses the complete head in p->head (head_len bytes, ending in "\r\n\r\n").
 * Returns 0 or an HTTP status for the error, with *msg set. */
static int parse_head(struct http_parser *p, const char **msg) {
        struct http_request *r = &p->req;
        char *s = p->head, *end = p->head + p->head_len;
        memset(r, 0, sizeof *r);

        /* Request line: method SP target SP HTTP/1.x CRLF */
        char *eol = memmem(s, (size_t)(end - s), "\r\n", 2);
        *eol = '\0';
        char *sp1 = strchr(s, ' ');
        if (!sp1 || sp1 == s) {
                *msg = "malformed request line";
                return 400;
        }
        *sp1 = '\0';
        if ((size_t)(sp1 - s) >= HTTP_MAX_METHOD) {
                *msg = "method too long";
                return 400;
        }
        for (char *c = s; *c; c++)
                if (!is_tchar((unsigned char)*c)) {
                        *msg = "malformed method";
                        return 400;
                }
        r->method = s;
        char *target = sp1 + 1;
        char *sp2 = strchr(target, ' ');
        if (!sp2 || sp2 == target) {
                *msg = "malformed request line";
                return 400;
        }
        *sp2 = '\0';
        for (char *c = target; *c; c++)
                if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
                        *msg = "malformed request target";
                        return 400;
                }
        if (target[0] != '/') {
                *msg = "request target must be an absolute path";
                return 400;
        }
        const char *ver = sp2 + 1;
        if (strcmp(ver, "HTTP/1.1") == 0)
                r->version_minor = 1;
        else if (strcmp(ver, "HTTP/1.0") == 0)
                r->version_minor = 0;
        else {
                *msg = "unsupported HTTP version";
                return 400;
        }
        r->target = target;
        char *q = strchr(target, '?');
        /* The query stays raw in the head buffer; the path is decoded into p->path. The target
         * string itself must stay whole, so split it by copying the path part. */
        size_t path_len = q ? (size_t)(q - target) : strlen(target);
        r->query = q ? q + 1 : "";
        if (memchr(target, '#', strlen(target))) {
                *msg = "fragment in request target";
                return 400;
        }
        if (http_pct_decode(target, path_len, false, p->path, sizeof p->path, NULL) < 0) {
                *msg = "bad percent-encoding in path";
                return 400;
        }
        r->path = p->path;

        /* Header fields. */
        s = eol + 2;
        const char *cl = NULL, *te = NULL, *conn = NULL;
        while (s < end) {
                eol = memmem(s, (size_t)(end - s), "\r\n", 2);
                if (eol == s)
                        break; /* the empty line */
                *eol = '\0';
                if (*s == ' ' || *s == '\t') {
                        *msg = "obsolete header line folding";
                        return 400;
                }
                char *colon = strchr(s, ':');
                if (!colon || colon == s) {
                        *msg = "malformed header field";
                        return 400;
                }
                *colon = '\0';
                for (char *c = s; *c; c++)
                        if (!is_tchar((unsigned char)*c)) {
                                *msg = "malformed header name";
                                return 400;
                        }
                char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                        v++;
                char *ve = v + strlen(v);
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                        *--ve = '\0';
                for (char *c = v; *c; c++)
                        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
                                *msg = "control character in header value";
                                return 400;
                        }
                if (r->n_headers >= HTTP_MAX_HEADERS) {
                        *msg = "too many header fields";
                        return 431;
                }
                r->headers[r->n_headers++] = (struct http_header){ .name = s, .value = v };
                if (strcasecmp(s, "Content-Length") == 0) {
                        if (cl && strcmp(cl, v) != 0) {
                                *msg = "conflicting Content-Length";
                                return 400;
                        }
                        cl = v;
                } else if (strcasecmp(s, "Transfer-Encoding") == 0) {
                        if (te) {
                                *msg = "repeated Transfer-Encoding";
                                return 400;
                        }
                        te = v;
                } else if (strcasecmp(s, "Connection") == 0) {
                        conn = v;
                } else if (strcasecmp(s, "Expect") == 0) {
                        if (strcasecmp(v, "100-continue") != 0) {
                                *msg = "unsupported Expect";
                                return 417;
                        }
                        r->expect_continue = r->version_minor >= 1;
                }
                s = eol + 2;
        }

        if (cl && te) {
                *msg = "both Content-Length and Transfer-Encoding";
                return 400;
        }
        if (te) {
                if (strcasecmp(te, "chunked") != 0) {
                        *msg = "unsupported Transfer-Encoding (only chunked)";
                        return 400;
                }
                if (r->version_minor == 0) {
                        *msg = "chunked body in HTTP/1.0";
                        return 400;
                }
                r->chunked = true;
        }
        if (cl) {
                int e = parse_u64_dec(cl, &r->content_length);
                if (e == -ERANGE) {
                        *msg = "body too large";
                        return 413;
                }
                if (e < 0) {
                        *msg = "malformed Content-Length";
                        return 400;
                }
                r->has_length = true;
        }
        if (r->version_minor >= 1)
                r->keep_alive = !(conn && text_list_has_token(conn, "close"));
        else
                r->keep_alive = conn && text_list_has_token(conn, "keep-alive");
        return 0;
}

/* Collects head bytes; returns bytes consumed and sets *done once "\r\n\r\n" was seen. */
static size_t feed_head(struct http_parser *p, const char *in, size_t len, bool *done, int *status) {
        size_t i = 0;
        *done = false;
        *status = 0;
        /* Empty lines before a request line are ignored (RFC 9112 §2.2): they are what a
         * client leaves after a body it miscounted by a CRLF. */
        while (p->head_len == 0 && i < len && (in[i] == '\r' || in[i] == '\n'))
                i++;
        while (i < len) {
                if (p->head_len >= HTTP_MAX_HEAD) {
                        *status = 431;
                        return i;
                }
                char c = in[i++];
                if (c == '\0') {
                        *status = 400;
                        return i;
                }
                p->head[p->head_len++] = c;
                if (c == '\n') {
                        /* A bare LF is not a line end we accept: it would let a request mean
                         * different things to us and to a proxy in front of us. */
                        if (p->head_len < 2 || p->head[p->head_len - 2] != '\r') {
                                *status = 400;
                                return i;
                        }
                        if (p->head_len >= 4 && memcmp(p->head + p->head_len - 4, "\r\n\r\n", 4) == 0) {
                                p->head[p->head_len] = '\0';
                                *done = true;
                                return i;
                        }
                }
        }
        return i;
}

size_t http_parser_feed(struct http_parser *p, const char *in, size_t len, struct http_event *ev) {
        size_t used = 0;
        *ev = (struct http_event){ .type = HTTP_EV_NEED_MORE };

        for (;;) {
                switch (p->state) {
                case HTTP_S_ERROR:
                        *ev = (struct http_event){ .type = HTTP_EV_ERROR, .status = p->err_status, .message = p->err_message };
                        return used;

                case HTTP_S_END:
                        /* Ready the parser for the next request on this connection. */
                        p->state = HTTP_S_HEAD;
                        p->head_len = 0;
                        p->body_limit = HTTP_MAX_UPLOAD;
                        ev->type = HTTP_EV_END;
                        return used;

                case HTTP_S_HEAD: {
                        if (used == len)
                                return used;
                        bool done;
                        int st;
                        used += feed_head(p, in + used, len - used, &done, &st);
                        if (st) {
                                set_error(p, ev, st, st == 431 ? "request head too large" : "malformed request head");
                                return used;
                        }
                        if (!done)
                                return used;
                        const char *msg = NULL;
                        st = parse_head(p, &msg);
                        if (st) {
                                set_error(p, ev, st, msg);
                                return used;
                        }
                        p->body_seen = 0;
                        p->line_len = 0;
                        p->trailer_total = 0;
                        if (p->req.chunked)
                                p->state = HTTP_S_CHUNK_SIZE;
                        else if (p->req.has_length && p->req.content_length > 0) {
                                p->remaining = p->req.content_length;
                                p->state = HTTP_S_BODY_LENGTH;
                        } else
                                p->state = HTTP_S_END;
                        ev->type = HTTP_EV_HEAD;
                        return used;
                }

                case HTTP_S_BODY_LENGTH: {
                        if (p->req.content_length > p->body_limit) {
                                set_error(p, ev, 413, "request body too large");
                                return used;
                        }
                        if (used == len)
                                return used;
                        size_t n = (size_t)MIN((uint64_t)(len - used), p->remaining);
                        p->remaining -= n;
                        p->body_seen += n;
                        if (p->remaining == 0)
                                p->state = HTTP_S_END;
                        *ev = (struct http_event){ .type = HTTP_EV_BODY, .data = in + used, .len = n };
                        return used + n;
                }

                case HTTP_S_CHUNK_SIZE: {
                        if (used == len)
                                return used;
                        char c = in[used++];
                        if (p->line_len >= sizeof p->line - 1) {
                                set_error(p, ev, 400, "chunk size line too long");
                                return used;
                        }
                        p->line[p->line_len++] = c;
                        if (c != '\n')
                                continue;
                        if (p->line_len < 2 || p->line[p->line_len - 2] != '\r') {
                                set_error(p, ev, 400, "malformed chunk size line");
                                return used;
                        }
                        p->line[p->line_len - 2] = '\0';
                        uint64_t size = 0;
                        size_t k = 0;
                        for (; p->line[k] && p->line[k] != ';' && p->line[k] != ' ' && p->line[k] != '\t'; k++) {
                                int h = text_hex_digit((unsigned char)p->line[k]);
                                if (h < 0 || k >= 16) {
                                        set_error(p, ev, 400, "malformed chunk size");
                                        return used;
                                }
                                size = size << 4 | (uint64_t)h;
                        }
                        if (k == 0) {
                                set_error(p, ev, 400, "malformed chunk size");
                                return used;
                        }
                        p->line_len = 0;
                        if (size == 0) {
                                p->state = HTTP_S_TRAILERS;
                                continue;
                        }
                        if (size > p->body_limit || p->body_seen > p->body_limit - size) {
                                set_error(p, ev, 413, "request body too large");
                                return used;
                        }
                        p->remaining = size;
                        p->state = HTTP_S_CHUNK_DATA;
                        continue;
                }

                case HTTP_S_CHUNK_DATA: {
                        if (used == len)
                                return used;
                        size_t n = (size_t)MIN((uint64_t)(len - used), p->remaining);
                        p->remaining -= n;
                        p->body_seen += n;
                        if (p->remaining == 0) {
                                p->state = HTTP_S_CHUNK_CRLF;
                                p->line_len = 0;
                        }
                        *ev = (struct http_event){ .type = HTTP_EV_BODY, .data = in + used, .len = n };
                        return used + n;
                }

                case HTTP_S_CHUNK_CRLF: {
                        if (used == len)
                                return used;
                        char c = in[used++];
                        if (c != "\r\n"[p->line_len]) {
                                set_error(p, ev, 400, "missing CRLF after chunk data");
                                return used;
                        }
                        if (++p->line_len == 2) {
                                p->line_len = 0;
                                p->state = HTTP_S_CHUNK_SIZE;
                        }
                        continue;
                }

                case HTTP_S_TRAILERS: {
                        /* Trailer fields are read and dropped; only their size matters. line
                         * counts the bytes of the current line, line[0..1] its last two bytes. */
                        if (used == len)
                                return used;
                        char c = in[used++];
                        if (++p->trailer_total > HTTP_MAX_TRAILERS) {
                                set_error(p, ev, 431, "chunked trailers too large");
                                return used;
                        }
                        p->line[0] = p->line[1];
                        p->line[1] = c;
                        p->line_len++;
                        if (c != '\n')
                                continue;
                        if (p->line_len < 2 || p->line[0] != '\r') {
                                set_error(p, ev, 400, "malformed trailer line");
                                return used;
                        }
                        if (p->line_len == 2) {
                                p->state = HTTP_S_END;
                                p->line_len = 0;
                                continue;
                        }
                        p->line_len = 0;
                        continue;
                }
                }
        }
}

const char *http_status_reason(int status) {
        switch (status) {
        case 100: return "Continue";
        case 101: return "Switching Protocols";
        case 200: return "OK";
        case 201: return "Created";
        case 204: return "No Content";
        case 307: return "Temporary Redirect";
        case 308: return "Permanent Redirect";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 415: return "Unsupported Media Type";
        case 417: return "Expectation Failed";
        case 422: return "Unprocessable Content";
        case 426: return "Upgrade Required";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 507: return "Insufficient Storage";
        default: return "Unknown";
        }
}

const char *http_status_code_name(int status) {
        switch (status) {
        case 400: case 411: case 417: return "bad_request";
        case 408: return "timeout";
        case 401: return "unauthorized";
        case 403: return "forbidden";
        case 404: return "not_found";
        case 405: return "method_not_allowed";
        case 409: return "conflict";
        case 413: case 431: return "too_large";
        case 422: return "exec_failed";
        case 429: return "rate_limited";
        case 502: return "bad_gateway";
        case 503: return "unavailable";
        case 507: return "no_space";
        default: return status >= 400 && status < 500 ? "bad_request" : "internal";
        }
}

int http_response_head(struct buf *out, int status, const char *content_type, int64_t content_length,
                       bool keep_alive, const char *extra_headers) {
        int r = buf_printf(out, "HTTP/1.1 %d %s\r\nServer: spaced\r\n", status, http_status_reason(status));
        if (r < 0)
                return r;
        if (content_type && (r = buf_printf(out, "Content-Type: %s\r\n", content_type)) < 0)
                return r;
        if (content_length >= 0) {
                /* 204 and 1xx carry no body and no Content-Length. */
                if (status != 204 && status >= 200)
                        r = buf_printf(out, "Content-Length: %" PRId64 "\r\n", content_length);
        } else
                r = buf_puts(out, "Transfer-Encoding: chunked\r\n");
        if (r < 0)
                return r;
        if (!keep_alive && (r = buf_puts(out, "Connection: close\r\n")) < 0)
                return r;
        if (extra_headers && (r = buf_puts(out, extra_headers)) < 0)
                return r;
        return buf_puts(out, "\r\n");
}

int http_chunk_append(struct buf *out, const void *data, size_t n) {
        if (n == 0)
                return buf_puts(out, "0\r\n\r\n");
        int r = buf_reserve(out, n + 24);
        if (r < 0)
                return r;
        r = buf_printf(out, "%zx\r\n", n);
        if (r < 0)
                return r;
        r = buf_append(out, data, n);
        if (r < 0)
                return r;
        return buf_puts(out, "\r\n");
}

bool http_header_has_token(const struct http_request *r, const char *name, const char *tok) {
        const char *v = http_request_header(r, name);
        return v && text_list_has_token(v, tok);
}
