/* netbench: the client side of bench-network, static so that the same binary runs on the
 * host and inside a sandbox of any template.
 *   netbench get ADDR PORT PATH [SECS]
 *                                 one HTTP/1.0 GET (stopped after SECS s if given);
 *                                 prints {"bytes":N,"seconds":S}
 *   netbench conns ADDR PORT SECS connect + close in a loop for SECS seconds (at most
 *                                 1,000,000); prints {"connects":N,"failed":N,"seconds":S}
 * ADDR is a numeric IPv4 or IPv6 address. Exit 1 on a failed GET, 2 on bad usage. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int dial(const char *addr, int port) {
        struct sockaddr_storage ss = { 0 };
        socklen_t len;
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t)port);
                len = sizeof *a4;
        } else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                len = sizeof *a6;
        } else {
                errno = EINVAL;
                return -1;
        }
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        struct timeval tv = { .tv_sec = 5 };
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
        }
        return fd;
}

static int get(const char *addr, int port, const char *path, double secs) {
        double t0 = now();
        int fd = dial(addr, port);
        if (fd < 0) {
                fprintf(stderr, "netbench: connect %s:%d: %s\n", addr, port, strerror(errno));
                return 1;
        }
        char req[1024];
        int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
        if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) {
                fprintf(stderr, "netbench: send the request: %s\n", strerror(errno));
                return 1;
        }
        static char buf[1 << 18];
        long long bytes = 0;
        for (;;) {
                ssize_t r = read(fd, buf, sizeof buf);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        fprintf(stderr, "netbench: read: %s\n", strerror(errno));
                        return 1;
                }
                if (r == 0)
                        break;
                bytes += r;
                if (secs > 0 && now() - t0 >= secs)
                        break;
        }
        close(fd);
        printf("{\"bytes\":%lld,\"seconds\":%.6f}\n", bytes, now() - t0);
        return 0;
}

static int conns(const char *addr, int port, double secs) {
        double t0 = now(), end = t0 + secs;
        long ok = 0, failed = 0;
        while (now() < end && ok + failed < 1000000) {
                int fd = dial(addr, port);
                if (fd < 0) {
                        failed++;
                        continue;
                }
                /* a reset close: no TIME_WAIT pile-up on a long run */
                struct linger l = { .l_onoff = 1, .l_linger = 0 };
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
                close(fd);
                ok++;
        }
        printf("{\"connects\":%ld,\"failed\":%ld,\"seconds\":%.6f}\n", ok, failed, now() - t0);
        return 0;
}

int main(int argc, char **argv) {
        if ((argc == 5 || (argc == 6 && atof(argv[5]) > 0 && atof(argv[5]) <= 600)) && !strcmp(argv[1], "get"))
                return get(argv[2], atoi(argv[3]), argv[4], argc == 6 ? atof(argv[5]) : 0);
        if (argc == 5 && !strcmp(argv[1], "conns") && atof(argv[4]) > 0 && atof(argv[4]) <= 600)
                return conns(argv[2], atoi(argv[3]), atof(argv[4]));
        fprintf(stderr, "usage: netbench get ADDR PORT PATH [SECONDS] | netbench conns ADDR PORT SECONDS (0 < SECONDS <= 600)\n");
        return 2;
}
