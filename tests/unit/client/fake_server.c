/* The scripted HTTP server of libspace's unit tests (see fake_server.h). */
#include "fake_server.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool read_request(int fd, bool head_only, char **ret, size_t *ret_len) {
        size_t cap = 4096, len = 0;
        char *b = malloc(cap + 1);
        size_t need = 0; /* total bytes once the head is known */
        size_t head = 0;
        bool chunked = false;
        for (;;) {
                if (need && len >= need)
                        break;
                if (chunked && strstr(b + head, "\r\n0\r\n\r\n"))
                        break; /* a chunked body's last chunk (good enough for these tests) */
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 10000) <= 0)
                        goto fail;
                if (len == cap) {
                        if (cap >= FAKE_MAX_REQ)
                                goto fail;
                        cap *= 2;
                        b = realloc(b, cap + 1);
                }
                ssize_t n = read(fd, b + len, cap - len);
                if (n <= 0)
                        goto fail;
                len += (size_t)n;
                b[len] = '\0';
                if (!need) {
                        char *e = strstr(b, "\r\n\r\n");
                        if (e) {
                                head = (size_t)(e - b) + 4;
                                size_t body = 0;
                                char *te = strcasestr(b, "\r\nTransfer-Encoding: chunked");
                                chunked = te && te < e && !head_only;
                                /* the chunk lines start with a CRLF of their own: look from the head's */
                                head -= 2;
                                char *cl = strcasestr(b, "\r\nContent-Length:");
                                if (cl && cl < e)
                                        body = strtoul(cl + 17, NULL, 10);
                                need = head_only ? len : chunked ? 0 : head + 2 + body;
                        }
                }
        }
        b[len] = '\0';
        *ret = b;
        *ret_len = len;
        return true;
fail:
        free(b);
        return false;
}

static void *serve(void *arg) {
        struct fake_server *f = arg;
        int cfd = -1;
        while (f->served < f->nreplies) {
                if (cfd < 0) {
                        struct pollfd p = { .fd = f->lfd, .events = POLLIN };
                        if (poll(&p, 1, 10000) <= 0)
                                break;
                        cfd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
                        if (cfd < 0)
                                break;
                        f->connections++;
                }
                char *req;
                size_t rlen;
                if (!read_request(cfd, f->replies[f->served].after_head, &req, &rlen)) {
                        /* the client closed (or sent junk): wait for the next connection */
                        close(cfd);
                        cfd = -1;
                        continue;
                }
                size_t i = f->served++;
                f->requests[i] = req;
                f->request_lens[i] = rlen;
                const struct fake_reply *r = &f->replies[i];
                if (r->delay_ms)
                        poll(NULL, 0, r->delay_ms);
                if (r->raw) {
                        size_t n = r->raw_len ? r->raw_len : strlen(r->raw);
                        const char *p = r->raw;
                        while (n > 0) {
                                ssize_t w = send(cfd, p, n, MSG_NOSIGNAL);
                                if (w <= 0)
                                        break;
                                p += w;
                                n -= (size_t)w;
                        }
                }
                if (r->close_after || r->after_head) {
                        close(cfd);
                        cfd = -1;
                }
        }
        if (cfd >= 0) {
                /* let the client finish reading before the close */
                shutdown(cfd, SHUT_WR);
                char tmp[256];
                struct pollfd p = { .fd = cfd, .events = POLLIN };
                while (poll(&p, 1, 2000) > 0 && read(cfd, tmp, sizeof tmp) > 0)
                        ;
                close(cfd);
        }
        return NULL;
}

void fake_start(struct fake_server *f) {
        snprintf(f->dir, sizeof f->dir, "/tmp/space-fake-XXXXXX");
        if (!mkdtemp(f->dir))
                abort();
        snprintf(f->path, sizeof f->path, "%s/s.sock", f->dir);
        snprintf(f->host, sizeof f->host, "unix:%s", f->path);
        f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sun = { .sun_family = AF_UNIX };
        strcpy(sun.sun_path, f->path);
        if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sun, sizeof sun) < 0 || listen(f->lfd, 16) < 0)
                abort();
        if (pthread_create(&f->thread, NULL, serve, f) != 0)
                abort();
}

void fake_stop(struct fake_server *f) {
        pthread_join(f->thread, NULL);
        close(f->lfd);
        unlink(f->path);
        rmdir(f->dir);
}

void fake_free(struct fake_server *f) {
        for (size_t i = 0; i < FAKE_MAX; i++) {
                free(f->requests[i]);
                free(f->owned[i]);
        }
}

void fake_reply_take(struct fake_server *f, size_t i, char *raw, size_t raw_len) {
        if (i >= FAKE_MAX || !raw)
                abort();
        free(f->owned[i]);
        f->owned[i] = raw;
        f->replies[i].raw = raw;
        f->replies[i].raw_len = raw_len;
}

void fake_reply_json(struct fake_server *f, size_t i, const char *status, const char *body) {
        char *s;
        if (asprintf(&s, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", status,
                     strlen(body), body) < 0)
                abort();
        fake_reply_take(f, i, s, 0);
}

void fake_reply_chunked(struct fake_server *f, size_t i, const char *status, ...) {
        size_t cap = 1 << 16, len = 0;
        char *s = malloc(cap);
        if (!s)
                abort();
        len += (size_t)snprintf(s, cap, "HTTP/1.1 %s\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n",
                                status);
        va_list ap;
        va_start(ap, status);
        const char *c;
        while ((c = va_arg(ap, const char *))) {
                if (len + strlen(c) + 32 >= cap)
                        abort();
                len += (size_t)snprintf(s + len, cap - len, "%zx\r\n%s\r\n", strlen(c), c);
        }
        va_end(ap);
        snprintf(s + len, cap - len, "0\r\n\r\n");
        fake_reply_take(f, i, s, 0);
}

const char *fake_request_body(const struct fake_server *f, size_t i) {
        const char *e = i < FAKE_MAX && f->requests[i] ? strstr(f->requests[i], "\r\n\r\n") : NULL;
        return e ? e + 4 : NULL;
}
