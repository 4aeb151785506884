/* ws-probe: a WebSocket client for the terminal tests (test_terminals.sh), written apart
 * from libspace's so that the server is checked against an independent reading of RFC
 * 6455, and able to misbehave on purpose. Connects to spaced's Unix socket, upgrades PATH
 * and runs the steps given, each an argument:
 *   send:BYTES      a masked binary frame      text:STR    a masked text frame
 *   wait:NEEDLE     output until it holds NEEDLE (after the previous match)
 *   ping:DATA       a ping; the pong must carry DATA (output meanwhile is kept)
 *   unmasked        an unmasked binary frame   big         a header claiming 2 MiB
 *   expect-close:C  reads until a close frame with code C (output kept)
 *   expect-exit:N   reads until {"type":"exit","exit_code":N}, then a close 1000
 *   close           sends close 1000 and expects it echoed
 *   quit            closes the socket without a close frame
 *   sleep:MS        waits MS milliseconds
 *   dump            prints the output so far, between lines "--- output" and "--- end"
 * Exit status 0 when all passed, 1 on a failed step (said on stderr), 2 when the upgrade
 * was refused (its status line and body on stdout). Every wait is bounded (10 s). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int fd = -1;
static char out[1 << 22];
static size_t out_len, out_mark;
static uint8_t in[1 << 21];
static size_t in_len;

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "ws-probe: ");
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n--- output so far:\n%.*s\n", (int)out_len, out);
        exit(1);
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put(const void *p, size_t n) {
        const char *c = p;
        while (n > 0) {
                ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        die("send: %s", strerror(errno));
                c += w;
                n -= (size_t)w;
        }
}

static void frame(uint8_t op, const void *p, size_t n, bool masked) {
        uint8_t h[14], m[4] = { 0x12, 0x34, 0x56, 0x78 };
        size_t hl = 2;
        if (getrandom(m, 4, 0) != 4)
                die("getrandom: %s", strerror(errno));
        h[0] = 0x80 | op;
        if (n < 126)
                h[1] = (uint8_t)n;
        else {
                h[1] = 126;
                h[2] = (uint8_t)(n >> 8);
                h[3] = (uint8_t)n;
                hl = 4;
        }
        if (masked) {
                h[1] |= 0x80;
                memcpy(h + hl, m, 4);
                hl += 4;
        }
        uint8_t *b = malloc(hl + n);
        memcpy(b, h, hl);
        for (size_t i = 0; i < n; i++)
                b[hl + i] = ((const uint8_t *)p)[i] ^ (masked ? m[i & 3] : 0);
        put(b, hl + n);
        free(b);
}

/* The next server frame (not masked) into *op, payload at *p; dies after 10 s. */
static size_t next_frame(uint8_t *op, uint8_t **p) {
        int64_t end = now_ms() + 10000;
        for (;;) {
                if (in_len >= 2) {
                        if (in[1] & 0x80)
                                die("%s", "a server frame is masked");
                        size_t len = in[1] & 0x7F, hl = 2;
                        if (len == 126 && in_len >= 4) {
                                len = (size_t)in[2] << 8 | in[3];
                                hl = 4;
                        } else if (len == 127 && in_len >= 10) {
                                len = 0;
                                for (int i = 0; i < 8; i++)
                                        len = len << 8 | in[2 + i];
                                hl = 10;
                        } else if (len >= 126)
                                hl = 0;
                        if (hl && in_len >= hl + len) {
                                *op = in[0] & 0x0F;
                                static uint8_t pl[1 << 21];
                                memcpy(pl, in + hl, len);
                                memmove(in, in + hl + len, in_len - hl - len);
                                in_len -= hl + len;
                                *p = pl;
                                return len;
                        }
                }
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int left = (int)(end - now_ms());
                if (left <= 0 || poll(&pfd, 1, left) <= 0)
                        die("%s", "timeout waiting for a frame");
                ssize_t n = recv(fd, in + in_len, sizeof in - in_len, 0);
                if (n <= 0)
                        die("%s", "the server closed the connection");
                in_len += (size_t)n;
        }
}

/* Takes frames until one that is not binary output; returns it. */
static size_t next_control(uint8_t *op, uint8_t **p) {
        for (;;) {
                size_t n = next_frame(op, p);
                if (*op != 0x2)
                        return n;
                if (out_len + n > sizeof out - 1)
                        die("%s", "too much output");
                memcpy(out + out_len, *p, n);
                out_len += n;
                out[out_len] = 0;
        }
}

/* One frame; binary output is appended to out. */
static size_t next_any(uint8_t *op, uint8_t **p) {
        size_t n = next_frame(op, p);
        if (*op == 0x2) {
                if (out_len + n > sizeof out - 1)
                        die("%s", "too much output");
                memcpy(out + out_len, *p, n);
                out_len += n;
                out[out_len] = 0;
        }
        return n;
}

static void expect_close(int code) {
        uint8_t op, *p;
        for (;;) {
                size_t n = next_control(&op, &p);
                if (op != 0x8)
                        continue;
                int got = n >= 2 ? p[0] << 8 | p[1] : 1005;
                if (got != code) {
                        char m[64];
                        snprintf(m, sizeof m, "%d, wanted %d", got, code);
                        die("close code %s", m);
                }
                printf("close %d: %.*s\n", got, n > 2 ? (int)n - 2 : 0, n > 2 ? (char *)p + 2 : "");
                return;
        }
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: ws-probe SOCKET PATH [STEP...]\n");
                return 2;
        }
        setvbuf(stdout, NULL, _IOLBF, 0); /* a test may read the file while we run */
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[1]);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                die("connect: %s", strerror(errno));
        const char *key = "dGhlIHNhbXBsZSBub25jZQ=="; /* RFC 6455's example key */
        char req[1024];
        int n = snprintf(req, sizeof req,
                         "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                         argv[2], key);
        put(req, (size_t)n);
        /* the head, byte by byte so that no frame is taken with it */
        char head[8192];
        size_t hl = 0;
        while (hl < sizeof head - 1 && !(hl >= 4 && !memcmp(head + hl - 4, "\r\n\r\n", 4))) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                if (poll(&pfd, 1, 10000) <= 0 || recv(fd, head + hl, 1, 0) != 1)
                        die("%s", "no answer to the upgrade");
                hl++;
        }
        head[hl] = 0;
        if (strncmp(head, "HTTP/1.1 101 ", 13) != 0) {
                char body[4096];
                ssize_t bn = recv(fd, body, sizeof body - 1, MSG_DONTWAIT);
                usleep(100000);
                if (bn <= 0)
                        bn = recv(fd, body, sizeof body - 1, MSG_DONTWAIT);
                printf("%.*s\n%.*s\n", (int)strcspn(head, "\r"), head, bn > 0 ? (int)bn : 0, body);
                return 2;
        }
        /* RFC 6455 §1.3: this key's accept is s3pPLMBiTxaQ9kYGzzhZRbK+xOo= */
        if (!strstr(head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"))
                die("wrong or missing Sec-WebSocket-Accept in: %s", head);
        printf("upgraded\n");
        for (int i = 3; i < argc; i++) {
                const char *s = argv[i];
                uint8_t op, *p;
                if (!strncmp(s, "send:", 5))
                        frame(0x2, s + 5, strlen(s + 5), true);
                else if (!strncmp(s, "text:", 5))
                        frame(0x1, s + 5, strlen(s + 5), true);
                else if (!strncmp(s, "wait:", 5)) {
                        const char *hit;
                        while (!(hit = memmem(out + out_mark, out_len - out_mark, s + 5, strlen(s + 5)))) {
                                size_t cn = next_any(&op, &p);
                                if (op == 0x8)
                                        die("closed (%d %.*s) while waiting for \"%s\"", cn >= 2 ? p[0] << 8 | p[1] : 0,
                                            cn > 2 ? (int)cn - 2 : 0, cn > 2 ? (char *)p + 2 : "", s + 5);
                                if (op == 0x1)
                                        printf("text %.*s\n", (int)cn, (char *)p);
                        }
                        out_mark = (size_t)(hit - out) + strlen(s + 5);
                        printf("saw %s\n", s + 5);
                } else if (!strncmp(s, "ping:", 5)) {
                        frame(0x9, s + 5, strlen(s + 5), true);
                        size_t cn = next_control(&op, &p);
                        if (op != 0xA || cn != strlen(s + 5) || memcmp(p, s + 5, cn))
                                die("no pong with \"%s\"", s + 5);
                        printf("pong %s\n", s + 5);
                } else if (!strcmp(s, "dump"))
                        printf("--- output\n%.*s\n--- end\n", (int)out_len, out);
                else if (!strncmp(s, "sleep:", 6))
                        usleep((useconds_t)atoi(s + 6) * 1000);
                else if (!strcmp(s, "unmasked"))
                        frame(0x2, "x", 1, false);
                else if (!strcmp(s, "big")) {
                        uint8_t h[14] = { 0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0x20, 0, 0, 1, 2, 3, 4 };
                        put(h, sizeof h);
                } else if (!strncmp(s, "expect-close:", 13))
                        expect_close(atoi(s + 13));
                else if (!strncmp(s, "expect-exit:", 12)) {
                        size_t cn = next_control(&op, &p);
                        char want[64];
                        snprintf(want, sizeof want, "\"exit_code\":%d", atoi(s + 12));
                        if (op != 0x1 || !memmem(p, cn, "\"type\":\"exit\"", 13) || !memmem(p, cn, want, strlen(want)))
                                die("no exit frame with %s", want);
                        printf("exit %.*s\n", (int)cn, (char *)p);
                        expect_close(1000);
                } else if (!strcmp(s, "close")) {
                        frame(0x8, "\x03\xe8", 2, true);
                        expect_close(1000);
                } else if (!strcmp(s, "quit")) {
                        close(fd);
                        fd = -1;
                        break;
                } else
                        die("unknown step %s", s);
        }
        return 0;
}
