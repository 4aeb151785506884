/* conn-flood: the slow-loris client of test_conns.sh. Opens N TCP connections to
 * HOST:PORT (loopback only), sends each an incomplete request head, then one more header
 * line on every open one each INTERVAL_MS, for SECONDS at most. Prints "ready OPENED" once
 * the connections are made, and at the end "opened N closed N answered408 N": how many
 * the server closed, and how many of those it answered 408 first.
 * Usage: conn-flood HOST PORT N SECONDS INTERVAL_MS */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FLOOD_MAX 20000

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A non-blocking connect that waits 2 s at most; -1 on failure. */
static int dial(const struct sockaddr_in *sa) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0 && errno != EINPROGRESS) {
                close(fd);
                return -1;
        }
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int err = 0;
        socklen_t len = sizeof err;
        if (poll(&p, 1, 2000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
                close(fd);
                return -1;
        }
        return fd;
}

int main(int argc, char **argv) {
        if (argc != 6) {
                fprintf(stderr, "usage: conn-flood HOST PORT N SECONDS INTERVAL_MS\n");
                return 2;
        }
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
        int n = atoi(argv[3]), secs = atoi(argv[4]), interval = atoi(argv[5]);
        if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 || (ntohl(sa.sin_addr.s_addr) >> 24) != 127 ||
            n < 1 || n > FLOOD_MAX || secs < 1 || secs > 600 || interval < 10) {
                fprintf(stderr, "conn-flood: a 127.x.y.z address, 1-%d connections, 1-600 s, >= 10 ms\n", FLOOD_MAX);
                return 2;
        }
        struct rlimit rl = { .rlim_cur = (rlim_t)n + 64, .rlim_max = (rlim_t)n + 64 };
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                perror("conn-flood: setrlimit");
                return 1;
        }
        int *fds = calloc((size_t)n, sizeof *fds);
        char *got408 = calloc((size_t)n, 1);
        if (!fds || !got408)
                return 1;
        static const char head[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\n";
        int opened = 0, closed = 0, answered = 0;
        long long end = now_ms() + (long long)secs * 1000;
        for (int i = 0; i < n; i++) {
                fds[i] = now_ms() < end ? dial(&sa) : -1;
                if (fds[i] < 0)
                        continue;
                opened++;
                if (send(fds[i], head, sizeof head - 1, MSG_NOSIGNAL) < 0) {
                        close(fds[i]);
                        fds[i] = -1;
                        closed++;
                }
        }
        printf("ready %d\n", opened);
        fflush(stdout);
        long long next = now_ms();
        while (now_ms() < end && closed < opened) {
                next += interval;
                for (int i = 0; i < n; i++) {
                        if (fds[i] < 0)
                                continue;
                        char buf[512];
                        ssize_t k;
                        while ((k = recv(fds[i], buf, sizeof buf - 1, MSG_DONTWAIT)) > 0) {
                                buf[k] = '\0';
                                if (strstr(buf, "HTTP/1.1 408"))
                                        got408[i] = 1;
                        }
                        bool gone = k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
                        if (!gone && send(fds[i], "X-Dribble: 1\r\n", 14, MSG_NOSIGNAL) < 0)
                                gone = true;
                        if (gone) {
                                answered += got408[i];
                                close(fds[i]);
                                fds[i] = -1;
                                closed++;
                        }
                }
                long long wait = next - now_ms();
                if (wait > 0)
                        poll(NULL, 0, (int)wait);
        }
        for (int i = 0; i < n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        free(fds);
        free(got408);
        printf("opened %d closed %d answered408 %d\n", opened, closed, answered);
        return 0;
}
