/* fake-init: a process that took space-init's listening socket, for test_init_auth.sh. It
 * listens on PATH (a unix socket) for SECONDS at most and answers every connection as a
 * forged init would: a HELLO (with KEY as its "key" member unless KEY is "-"), then a
 * frame with a bad magic (which makes a daemon that believed the HELLO mark the sandbox
 * dead). It counts what the peer sends it before closing, 300 ms at most. Prints
 * "ready" once listening, and at the end "connections N received N".
 * Usage: fake-init PATH SECONDS KEY */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FAKE_MAX_CONNS 1000

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_u32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

/* One frame as protocol.md §2 lays it out. */
static size_t frame(uint8_t *out, uint32_t magic, uint8_t type, const char *payload) {
        size_t n = strlen(payload);
        put_u32(out, magic);
        out[4] = 1;
        out[5] = type;
        out[6] = out[7] = 0;
        put_u32(out + 8, 0);
        put_u32(out + 12, (uint32_t)n);
        memcpy(out + 16, payload, n);
        return 16 + n;
}

/* What the peer sends within 300 ms, or until it closes. */
static long drain(int fd) {
        long total = 0;
        long long end = now_ms() + 300;
        char buf[4096];
        for (long long left; (left = end - now_ms()) > 0;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, (int)left) <= 0)
                        break;
                ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n <= 0)
                        break;
                total += n;
        }
        return total;
}

int main(int argc, char **argv) {
        if (argc != 4) {
                fprintf(stderr, "usage: fake-init PATH SECONDS KEY\n");
                return 2;
        }
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(argv[1]) >= sizeof sa.sun_path) {
                fprintf(stderr, "fake-init: path too long\n");
                return 2;
        }
        strcpy(sa.sun_path, argv[1]);
        long secs = strtol(argv[2], NULL, 10);
        if (secs <= 0 || secs > 600 || strlen(argv[3]) > 128) {
                fprintf(stderr, "fake-init: SECONDS in 1..600, KEY at most 128 characters\n");
                return 2;
        }
        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 8) < 0) {
                perror("fake-init: listen");
                return 1;
        }
        char hello[512];
        if (strcmp(argv[3], "-") == 0)
                snprintf(hello, sizeof hello, "{\"version\":1,\"pid\":1,\"uptime_ms\":5,\"window\":true}");
        else
                snprintf(hello, sizeof hello, "{\"version\":1,\"pid\":1,\"uptime_ms\":5,\"window\":true,\"key\":\"%s\"}",
                         argv[3]);
        uint8_t out[1024];
        size_t n = frame(out, 0x31435053u, 1, hello);
        n += frame(out + n, 0xdeadbeefu, 3, "{}"); /* not a frame: the forged "protocol error" */
        printf("ready\n");
        fflush(stdout);
        long conns = 0, received = 0;
        long long end = now_ms() + secs * 1000;
        for (long long left; conns < FAKE_MAX_CONNS && (left = end - now_ms()) > 0;) {
                struct pollfd p = { .fd = lfd, .events = POLLIN };
                if (poll(&p, 1, (int)left) <= 0)
                        continue;
                int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                conns++;
                if (send(fd, out, n, MSG_NOSIGNAL) == (ssize_t)n)
                        received += drain(fd);
                close(fd);
        }
        printf("connections %ld received %ld\n", conns, received);
        return 0;
}
