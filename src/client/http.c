/* HTTP/1.1 client side of libspace: connect, send one request, parse the answer's head,
 * decode its body (Content-Length, chunked or until close) and hand it on in pieces.
 * The socket is non-blocking; every wait goes through poll() so timeouts hold. */
#include "client/http.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/text.h"

int http_addr_parse(const char *s, struct http_addr *ret) {
        struct http_addr a = { 0 };
        if (!s || !*s)
                return -EINVAL;
        const char *path = NULL;
        if (strncmp(s, "unix:", 5) == 0)
                path = s + 5;
        else if (s[0] == '/' || s[0] == '.')
                path = s;
        if (path) {
                if (!*path)
                        return -EINVAL;
                if (strlen(path) >= sizeof a.path)
                        return -ENAMETOOLONG;
                a.kind = HTTP_ADDR_UNIX;
                strcpy(a.path, path);
                *ret = a;
                return 0;
        }
        if (strncmp(s, "tcp://", 6) == 0)
                s += 6;
        else if (strstr(s, "://"))
                return -EINVAL; /* http://, https://: not spoken here */
        const char *colon;
        const char *host = s;
        size_t hlen;
        if (s[0] == '[') {
                const char *end = strchr(s, ']');
                if (!end || end[1] != ':')
                        return -EINVAL;
                host = s + 1;
                hlen = (size_t)(end - host);
                colon = end + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon || memchr(s, ':', (size_t)(colon - s)))
                        return -EINVAL;
                hlen = (size_t)(colon - s);
        }
        if (hlen == 0 || hlen >= sizeof a.host)
                return -EINVAL;
        const char *port = colon + 1;
        size_t plen = strlen(port);
        if (plen == 0 || plen >= sizeof a.port)
                return -EINVAL;
        for (size_t i = 0; i < plen; i++)
                if (!isdigit((unsigned char)port[i]))
                        return -EINVAL;
        long p = strtol(port, NULL, 10);
        if (p <= 0 || p > 65535)
                return -EINVAL;
        for (size_t i = 0; i < hlen; i++)
                if (isspace((unsigned char)host[i]) || host[i] == '/')
                        return -EINVAL;
        a.kind = HTTP_ADDR_TCP;
        memcpy(a.host, host, hlen);
        memcpy(a.port, port, plen);
        *ret = a;
        return 0;
}

void http_addr_format(const struct http_addr *a, char *out, size_t n) {
        if (n == 0)
                return;
        if (a->kind == HTTP_ADDR_UNIX)
                snprintf(out, n, "unix:%s", a->path);
        else if (strchr(a->host, ':'))
                snprintf(out, n, "tcp://[%s]:%s", a->host, a->port);
        else
                snprintf(out, n, "tcp://%s:%s", a->host, a->port);
}

void http_conn_init(struct http_conn *c, const struct http_addr *addr) {
        *c = (struct http_conn){ .addr = *addr, .fd = -EBADF, .in = BUF_INIT(HTTP_MAX_HEAD + HTTP_READ_SIZE) };
}

void http_conn_close(struct http_conn *c) {
        c->fd = safe_close(c->fd);
        buf_free(&c->in);
        c->reused = false;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd; -ETIMEDOUT after timeout_ms (< 0: forever). */
static int wait_fd(int fd, short events, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = events };
        for (;;) {
                int r = poll(&p, 1, timeout_ms);
                if (r > 0)
                        return 0;
                if (r == 0)
                        return -ETIMEDOUT;
                if (errno != EINTR)
                        return -errno;
        }
}

static int connect_wait(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms) {
        if (connect(fd, sa, len) == 0)
                return 0;
        if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR)
                return -errno;
        int r = wait_fd(fd, POLLOUT, timeout_ms);
        if (r < 0)
                return r;
        int err = 0;
        socklen_t elen = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
                return -errno;
        return err ? -err : 0;
}

static int conn_open(struct http_conn *c, int timeout_ms) {
        c->fd = safe_close(c->fd);
        buf_reset(&c->in);
        c->reused = false;
        if (c->addr.kind == HTTP_ADDR_UNIX) {
                _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        return -errno;
                struct sockaddr_un sun = { .sun_family = AF_UNIX };
                memcpy(sun.sun_path, c->addr.path, strlen(c->addr.path));
                /* A Unix connect either succeeds, fails, or says EAGAIN when the backlog is
                 * full; in that last case retry for a while rather than fail at once. */
                int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
                for (;;) {
                        if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0)
                                break;
                        if (errno != EAGAIN && errno != EINTR)
                                return -errno;
                        if (now_ms() >= deadline)
                                return -ETIMEDOUT;
                        (void)poll(NULL, 0, 5);
                }
                c->fd = TAKE_FD(fd);
                return 0;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
        struct addrinfo *res = NULL;
        int g = getaddrinfo(c->addr.host, c->addr.port, &hints, &res);
        if (g != 0)
                return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
        int r = -EHOSTUNREACH;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                _cleanup_close_ int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                                ai->ai_protocol);
                if (fd < 0) {
                        r = -errno;
                        continue;
                }
                r = connect_wait(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms);
                if (r < 0)
                        continue;
                int one = 1;
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                c->fd = TAKE_FD(fd);
                break;
        }
        freeaddrinfo(res);
        return r;
}

static int send_all(int fd, const void *data, size_t n, int timeout_ms) {
        const char *p = data;
        while (n > 0) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -errno;
                        int r = wait_fd(fd, POLLOUT, timeout_ms);
                        if (r < 0)
                                return r;
                        continue;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Sends the body from req->body_fd, starting at file offset start. */
static int send_fd_body(int fd, const struct http_request *req, off_t start) {
        char tmp[64u << 10]; /* on the caller's stack, which may be a small thread's */
        uint64_t left = req->body_len;
        off_t off = start;
        while (left > 0) {
                size_t want = left < sizeof tmp ? (size_t)left : sizeof tmp;
                ssize_t n = pread(req->body_fd, tmp, want, off);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return -EIO; /* the file shrank under us: the length we promised is a lie */
                int r = send_all(fd, tmp, (size_t)n, req->timeout_ms);
                if (r < 0)
                        return r;
                off += n;
                left -= (uint64_t)n;
        }
        return 0;
}

/* Reads what the socket has into c->in. 0 on EOF, > 0 bytes read. */
static int fill(struct http_conn *c, int timeout_ms) {
        int r = buf_reserve(&c->in, HTTP_READ_SIZE);
        if (r < 0)
                return r;
        for (;;) {
                ssize_t n = recv(c->fd, c->in.data + c->in.len, HTTP_READ_SIZE, 0);
                if (n >= 0) {
                        c->in.len += (size_t)n;
                        return (int)n;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                r = wait_fd(c->fd, POLLIN, timeout_ms);
                if (r < 0)
                        return r;
        }
}

static char *find_crlf(const char *p, size_t n) {
        for (size_t i = 0; i + 1 < n; i++)
                if (p[i] == '\r' && p[i + 1] == '\n')
                        return (char *)p + i;
        return NULL;
}

/* Parses the head in c->in (already known to end at head_len, "\r\n\r\n" included). */
static int parse_head(struct http_conn *c, size_t head_len, struct http_response *resp) {
        struct http_response r = { 0 };
        char *p = c->in.data;
        char *end = p + head_len;
        char *eol = find_crlf(p, (size_t)(end - p));
        if (!eol)
                return -EBADMSG;
        int minor;
        if (eol - p < 12 || strncmp(p, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)p[7]) || p[8] != ' ')
                return -EBADMSG;
        minor = p[7] - '0';
        if (!isdigit((unsigned char)p[9]) || !isdigit((unsigned char)p[10]) || !isdigit((unsigned char)p[11]) ||
            (eol - p > 12 && p[12] != ' '))
                return -EBADMSG;
        r.status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
        if (r.status < 100 || r.status > 599)
                return -EBADMSG;
        r.close = minor == 0;
        p = eol + 2;
        while (p < end) {
                eol = find_crlf(p, (size_t)(end - p));
                if (!eol)
                        return -EBADMSG;
                if (eol == p)
                        break; /* the empty line */
                *eol = '\0';
                char *colon = strchr(p, ':');
                if (!colon || colon == p)
                        return -EBADMSG;
                *colon = '\0';
                char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                        v++;
                char *ve = eol;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                        *--ve = '\0';
                if (strcasecmp(p, "Content-Length") == 0) {
                        if (!*v)
                                return -EBADMSG;
                        uint64_t len = 0;
                        for (char *q = v; *q; q++) {
                                if (!isdigit((unsigned char)*q) || len > (UINT64_MAX - 9) / 10)
                                        return -EBADMSG;
                                len = len * 10 + (uint64_t)(*q - '0');
                        }
                        if (r.has_length && r.length != len)
                                return -EBADMSG;
                        r.has_length = true;
                        r.length = len;
                } else if (strcasecmp(p, "Transfer-Encoding") == 0) {
                        if (text_list_has_token(v, "chunked"))
                                r.chunked = true;
                        else if (!text_list_has_token(v, "identity"))
                                return -EBADMSG; /* gzip and friends: we never ask for them */
                } else if (strcasecmp(p, "Connection") == 0) {
                        if (text_list_has_token(v, "close"))
                                r.close = true;
                        else if (text_list_has_token(v, "keep-alive"))
                                r.close = false;
                } else if (strcasecmp(p, "Content-Type") == 0) {
                        snprintf(r.content_type, sizeof r.content_type, "%s", v);
                } else if (strcasecmp(p, "Sec-WebSocket-Accept") == 0) {
                        snprintf(r.ws_accept, sizeof r.ws_accept, "%s", v);
                } else if (strcasecmp(p, "Server-Timing") == 0) {
                        snprintf(r.server_timing, sizeof r.server_timing, "%s", v);
                }
                p = eol + 2;
        }
        if (r.chunked)
                r.has_length = false; /* chunked wins (RFC 9112 6.3) */
        *resp = r;
        return 0;
}

static int read_head(struct http_conn *c, int timeout_ms, struct http_response *resp, bool *got_any) {
        size_t scanned = 0;
        for (;;) {
                if (c->in.len >= 4) {
                        size_t from = scanned > 3 ? scanned - 3 : 0;
                        char *e = memmem(c->in.data + from, c->in.len - from, "\r\n\r\n", 4);
                        if (e) {
                                size_t head_len = (size_t)(e - c->in.data) + 4;
                                if (head_len > HTTP_MAX_HEAD)
                                        return -E2BIG;
                                int r = parse_head(c, head_len, resp);
                                if (r < 0)
                                        return r;
                                buf_consume(&c->in, head_len);
                                if (resp->status >= 100 && resp->status < 200) {
                                        /* interim answer (100 Continue): read the real one */
                                        scanned = 0;
                                        continue;
                                }
                                return 0;
                        }
                        scanned = c->in.len;
                }
                if (c->in.len >= HTTP_MAX_HEAD)
                        return -E2BIG;
                int n = fill(c, timeout_ms);
                if (n < 0)
                        return n;
                if (n == 0)
                        return c->in.len == 0 && !*got_any ? -ECONNRESET : -EBADMSG;
                *got_any = true;
        }
}

static int deliver(struct http_conn *c, const struct http_response *resp, size_t n, http_body_fn fn, void *ud) {
        int r = 0;
        if (fn && n > 0)
                r = fn(ud, resp, c->in.data, n);
        buf_consume(&c->in, n);
        return r;
}

/* fill, where the server closing is an answer cut short. */
static int fill_more(struct http_conn *c, int timeout_ms) {
        int r = fill(c, timeout_ms);
        return r == 0 ? -ECONNRESET : r;
}

/* Reads until c->in starts with a whole line (a chunk size, a trailer); *ret_eol is its CRLF. */
static int read_line(struct http_conn *c, int timeout_ms, char **ret_eol) {
        char *eol;
        while (!(eol = find_crlf(c->in.data, c->in.len))) {
                if (c->in.len > HTTP_MAX_CHUNK_LINE)
                        return -EBADMSG;
                int r = fill_more(c, timeout_ms);
                if (r < 0)
                        return r;
        }
        *ret_eol = eol;
        return 0;
}

/* The next n bytes of the body to fn, as they come. */
static int deliver_n(struct http_conn *c, const struct http_response *resp, uint64_t n, int timeout_ms, http_body_fn fn,
                     void *ud) {
        while (n > 0) {
                int r = c->in.len == 0 ? fill_more(c, timeout_ms) : 0;
                if (r < 0)
                        return r;
                size_t take = c->in.len < n ? c->in.len : (size_t)n;
                r = deliver(c, resp, take, fn, ud);
                if (r < 0)
                        return r;
                n -= take;
        }
        return 0;
}

/* A chunk-size line: the size in hex, perhaps extensions after ';'. */
static int parse_chunk_size(const char *p, const char *eol, uint64_t *ret) {
        uint64_t size = 0;
        if (!isxdigit((unsigned char)*p))
                return -EBADMSG;
        for (; p < eol && isxdigit((unsigned char)*p); p++) {
                if (size > (UINT64_MAX >> 4))
                        return -EBADMSG;
                int d = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
                size = (size << 4) | (uint64_t)d;
        }
        if (p < eol && *p != ';' && *p != ' ' && *p != '\t')
                return -EBADMSG;
        *ret = size;
        return 0;
}

static int read_chunked(struct http_conn *c, const struct http_response *resp, int timeout_ms, http_body_fn fn, void *ud) {
        for (;;) {
                char *eol;
                uint64_t size;
                int r = read_line(c, timeout_ms, &eol);
                if (r >= 0)
                        r = parse_chunk_size(c->in.data, eol, &size);
                if (r < 0)
                        return r;
                buf_consume(&c->in, (size_t)(eol - c->in.data) + 2);
                if (size == 0)
                        break;
                r = deliver_n(c, resp, size, timeout_ms, fn, ud);
                while (r >= 0 && c->in.len < 2)
                        r = fill_more(c, timeout_ms);
                if (r < 0)
                        return r;
                if (c->in.data[0] != '\r' || c->in.data[1] != '\n')
                        return -EBADMSG;
                buf_consume(&c->in, 2);
        }
        /* trailers: lines until an empty one */
        for (;;) {
                char *eol;
                int r = read_line(c, timeout_ms, &eol);
                if (r < 0)
                        return r;
                bool empty = eol == c->in.data;
                buf_consume(&c->in, (size_t)(eol - c->in.data) + 2);
                if (empty)
                        return 0;
        }
}

static int read_body(struct http_conn *c, const struct http_response *resp, int timeout_ms, http_body_fn fn, void *ud) {
        if (resp->status == 204 || resp->status == 304)
                return 0;
        if (resp->chunked)
                return read_chunked(c, resp, timeout_ms, fn, ud);
        if (resp->has_length)
                return deliver_n(c, resp, resp->length, timeout_ms, fn, ud);
        /* Neither: the body runs until the server closes. */
        for (;;) {
                int r = deliver(c, resp, c->in.len, fn, ud);
                if (r < 0)
                        return r;
                r = fill(c, timeout_ms);
                if (r <= 0)
                        return r;
        }
}

static int send_request(struct http_conn *c, const struct http_request *req, off_t fd_start) {
        _cleanup_buf_ struct buf head = BUF_INIT(HTTP_MAX_TARGET + 1024);
        int r = buf_printf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: libspace/1\r\n", req->method,
                           req->target, c->addr.kind == HTTP_ADDR_UNIX ? "localhost" : c->addr.host);
        if (r < 0)
                return r;
        if (req->content_type)
                r = buf_printf(&head, "Content-Type: %s\r\n", req->content_type);
        if (r < 0)
                return r;
        for (size_t i = 0; req->headers && req->headers[i]; i++)
                if ((r = buf_printf(&head, "%s\r\n", req->headers[i])) < 0)
                        return r;
        bool has_body = req->body || req->body_from_fd || strcmp(req->method, "POST") == 0 ||
                        strcmp(req->method, "PUT") == 0;
        if (req->body_stream) {
                /* The head and the body's first chunk (the in-memory part) in one write. */
                if ((r = buf_puts(&head, "Transfer-Encoding: chunked\r\n\r\n")) < 0 ||
                    (req->body_len && ((r = buf_printf(&head, "%zx\r\n", req->body_len)) < 0 ||
                                       (r = buf_append(&head, req->body, req->body_len)) < 0 ||
                                       (r = buf_puts(&head, "\r\n")) < 0)))
                        return r;
                return send_all(c->fd, head.data, head.len, req->timeout_ms);
        }
        if (has_body)
                r = buf_printf(&head, "Content-Length: %zu\r\n", req->body_len);
        if (r < 0)
                return r;
        r = buf_puts(&head, "\r\n");
        if (r < 0)
                return r;
        /* Small bodies go out with the head in one write. */
        if (req->body && req->body_len <= 64 * 1024) {
                r = buf_append(&head, req->body, req->body_len);
                if (r < 0)
                        return r;
                return send_all(c->fd, head.data, head.len, req->timeout_ms);
        }
        r = send_all(c->fd, head.data, head.len, req->timeout_ms);
        if (r < 0)
                return r;
        if (req->body)
                return send_all(c->fd, req->body, req->body_len, req->timeout_ms);
        if (req->body_from_fd)
                return send_fd_body(c->fd, req, fd_start);
        return 0;
}

/* ---- a streamed request body: a thread sends body_fd while the answer is read ---- */

struct body_pump {
        int sock;
        int in_fd;
        int stop[2]; /* written by the reader when the answer is complete */
        int err;     /* the pump's own error (reading in_fd); the peer closing is not one */
        pthread_t thread;
};

/* Waits until fd is ready for ev or the pump is told to stop: 1 ready, 0 stop, -errno. */
static int pump_wait(struct body_pump *p, int fd, short ev) {
        for (;;) {
                struct pollfd pf[2] = { { .fd = fd, .events = ev }, { .fd = p->stop[0], .events = POLLIN } };
                int n = poll(pf, 2, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (pf[1].revents)
                        return 0;
                return 1;
        }
}

static int pump_send(struct body_pump *p, const char *data, size_t n) {
        while (n > 0) {
                ssize_t w = send(p->sock, data, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0 && errno != EAGAIN)
                        return -errno;
                if (w < 0) {
                        int r = pump_wait(p, p->sock, POLLOUT);
                        if (r <= 0)
                                return r < 0 ? r : -ECANCELED;
                        continue;
                }
                data += w;
                n -= (size_t)w;
        }
        return 0;
}

static void *pump_run(void *arg) {
        struct body_pump *p = arg;
        char *chunk = malloc(HTTP_STREAM_CHUNK + 32);
        if (!chunk) {
                p->err = -ENOMEM;
                (void)shutdown(p->sock, SHUT_WR);
                return NULL;
        }
        /* From a pipe (`cat big | space exec -i`), a deeper pipe lets the writer run ahead
         * and each read take more; refused (the per-user pipe limit) it stays as it was. */
        struct stat st;
        if (fstat(p->in_fd, &st) == 0 && S_ISFIFO(st.st_mode) && fcntl(p->in_fd, F_GETPIPE_SZ) < (int)HTTP_STREAM_CHUNK)
                (void)fcntl(p->in_fd, F_SETPIPE_SZ, (int)HTTP_STREAM_CHUNK);
        for (;;) {
                int r = pump_wait(p, p->in_fd, POLLIN);
                if (r <= 0)
                        break; /* the answer is complete: the rest of our input is not wanted */
                /* Room for the size line in front, so one send carries the whole chunk. */
                ssize_t n = read(p->in_fd, chunk + 16, HTTP_STREAM_CHUNK);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0) {
                        /* The command must not take a truncated input for a whole one: the
                         * daemon sees us hang up and ends it. */
                        p->err = -errno;
                        (void)shutdown(p->sock, SHUT_WR);
                        break;
                }
                if (n == 0) {
                        (void)pump_send(p, "0\r\n\r\n", 5);
                        break;
                }
                char line[16];
                int ln = snprintf(line, sizeof line, "%zx\r\n", (size_t)n);
                memcpy(chunk + 16 - ln, line, (size_t)ln);
                memcpy(chunk + 16 + n, "\r\n", 2);
                if (pump_send(p, chunk + 16 - ln, (size_t)ln + (size_t)n + 2) < 0)
                        break; /* the daemon closed: the command ended, or went away */
        }
        free(chunk);
        return NULL;
}

static int pump_start(struct body_pump *p, int sock, int in_fd) {
        *p = (struct body_pump){ .sock = sock, .in_fd = in_fd };
        if (pipe2(p->stop, O_CLOEXEC) < 0)
                return -errno;
        int r = pthread_create(&p->thread, NULL, pump_run, p);
        if (r != 0) {
                close(p->stop[0]);
                close(p->stop[1]);
                return -r;
        }
        return 0;
}

/* Stops the pump (if still sending) and waits for it; its error, if it had one. */
static int pump_stop(struct body_pump *p) {
        (void)!write(p->stop[1], "x", 1);
        pthread_join(p->thread, NULL);
        close(p->stop[0]);
        close(p->stop[1]);
        return p->err;
}

/* http_do for a body_stream request: a fresh connection (the body can't be sent twice). */
static int do_streaming(struct http_conn *c, const struct http_request *req, struct http_response *ret_resp,
                        http_body_fn on_body, void *userdata) {
        c->fd = safe_close(c->fd);
        c->reused = false;
        int r = conn_open(c, req->timeout_ms);
        if (r < 0)
                return r;
        buf_reset(&c->in);
        struct http_response resp = { 0 };
        bool got_any = false;
        r = send_request(c, req, 0);
        struct body_pump pump;
        bool pumping = false;
        if (r >= 0) {
                r = pump_start(&pump, c->fd, req->body_fd);
                pumping = r >= 0;
        }
        if (r >= 0)
                r = read_head(c, req->timeout_ms, &resp, &got_any);
        if (r >= 0)
                r = read_body(c, &resp, req->timeout_ms, on_body, userdata);
        /* The daemon closes after a streamed body whatever happens: no reuse. */
        if (pumping) {
                int e = pump_stop(&pump);
                if (r >= 0 && e < 0)
                        r = e;
        }
        c->fd = safe_close(c->fd);
        if (r < 0)
                return r;
        if (ret_resp)
                *ret_resp = resp;
        return 0;
}

int http_do(struct http_conn *c, const struct http_request *req, struct http_response *ret_resp,
            http_body_fn on_body, void *userdata) {
        if (!req->method || !req->target || req->target[0] != '/' || strlen(req->target) >= HTTP_MAX_TARGET ||
            strpbrk(req->target, " \r\n"))
                return -EINVAL;
        if (req->body_stream)
                return do_streaming(c, req, ret_resp, on_body, userdata);
        off_t fd_start = 0;
        if (req->body_from_fd) {
                fd_start = lseek(req->body_fd, 0, SEEK_CUR);
                if (fd_start < 0)
                        return -errno;
        }
        struct http_response resp = { 0 };
        int r;
        for (int attempt = 0;; attempt++) {
                if (c->fd < 0) {
                        r = conn_open(c, req->timeout_ms);
                        if (r < 0)
                                return r;
                }
                bool reused = c->reused;
                bool got_any = false;
                /* A stale leftover would be mistaken for the answer. */
                buf_reset(&c->in);
                r = send_request(c, req, fd_start);
                if (r == -EPIPE || r == -ECONNRESET) {
                        /* The server may have answered (413, say) and closed before taking
                         * the whole body: that answer is worth more than EPIPE. */
                        int h = read_head(c, 1000, &resp, &got_any);
                        if (h >= 0) {
                                resp.close = true;
                                r = 0;
                                break;
                        }
                }
                if (r >= 0)
                        r = read_head(c, req->timeout_ms, &resp, &got_any);
                if (r >= 0)
                        break;
                c->fd = safe_close(c->fd);
                c->reused = false;
                /* The server may close an idle kept-alive connection just as we send on it;
                 * nothing was answered, so sending again is safe. */
                if (reused && attempt == 0 && !got_any && (r == -EPIPE || r == -ECONNRESET))
                        continue;
                return r;
        }
        r = read_body(c, &resp, req->timeout_ms, on_body, userdata);
        if (r < 0 || resp.close || (!resp.chunked && !resp.has_length && resp.status != 204 && resp.status != 304)) {
                c->fd = safe_close(c->fd);
                c->reused = false;
        } else {
                c->reused = true;
        }
        if (r < 0)
                return r;
        if (ret_resp)
                *ret_resp = resp;
        return 0;
}

static int collect_body(void *ud, const struct http_response *resp, const char *data, size_t n) {
        (void)resp;
        struct buf *b = ud;
        size_t room = b->max > b->len ? b->max - b->len : 0;
        (void)buf_append(b, data, n < room ? n : room);
        return 0;
}

int http_upgrade(const struct http_addr *addr, const struct http_request *req, struct http_response *ret_resp,
                 struct buf *ret_body, size_t max_body, int *ret_fd) {
        if (!req->method || !req->target || req->target[0] != '/' || strlen(req->target) >= HTTP_MAX_TARGET ||
            strpbrk(req->target, " \r\n"))
                return -EINVAL;
        struct http_conn c;
        http_conn_init(&c, addr);
        int r = conn_open(&c, req->timeout_ms);
        if (r >= 0)
                r = send_request(&c, req, 0);
        /* The head, one byte at a time: the bytes after it are the port's. */
        while (r >= 0) {
                if (c.in.len >= 4 && memcmp(c.in.data + c.in.len - 4, "\r\n\r\n", 4) == 0)
                        break;
                if (c.in.len >= HTTP_MAX_HEAD) {
                        r = -E2BIG;
                        break;
                }
                if ((r = buf_reserve(&c.in, 1)) < 0)
                        break;
                ssize_t n = recv(c.fd, c.in.data + c.in.len, 1, 0);
                if (n == 1) {
                        c.in.len++;
                        continue;
                }
                if (n == 0) {
                        r = c.in.len ? -EBADMSG : -ECONNRESET;
                        break;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN) {
                        r = -errno;
                        break;
                }
                r = wait_fd(c.fd, POLLIN, req->timeout_ms);
        }
        struct http_response resp = { 0 };
        if (r >= 0)
                r = parse_head(&c, c.in.len, &resp);
        if (r >= 0 && resp.status == 101) {
                *ret_resp = resp;
                *ret_fd = TAKE_FD(c.fd);
                http_conn_close(&c);
                return 0;
        }
        if (r >= 0) {
                buf_reset(&c.in);
                *ret_body = BUF_INIT(max_body);
                (void)read_body(&c, &resp, req->timeout_ms, collect_body, ret_body);
                *ret_resp = resp;
                *ret_fd = -1;
        }
        http_conn_close(&c);
        return r < 0 ? r : 0;
}

int http_urlencode(struct buf *b, const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                int r;
                if (isalnum(*p) || strchr("-._~/", *p))
                        r = buf_putc(b, (char)*p);
                else
                        r = buf_printf(b, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
                if (r < 0)
                        return r;
        }
        return 0;
}
