/* space-init --relay PATH: copies bytes between stdin/stdout and the unix socket at PATH
 * until either side closes. The gvisor runtime reaches space-init this way: a host socket
 * can't be saved in a gVisor checkpoint, so space-init listens on a socket inside the
 * sandbox and the host runs this relay (through `runsc exec`) for each connection. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/sock.h"
#include "init/init.h"

#define RELAY_BUF (64 * 1024)
#define RELAY_CONNECT_TRIES 1000           /* × 10 ms */
#define RELAY_CONNECT_WAIT_NS 10000000
#define RELAY_ASK_TIMEOUT_MS 10000         /* init busy with another relay's answer: 1 s each */

int init_relay(const char *path) {
        struct sockaddr_un sa;
        if (sock_unix_addr(path, &sa) < 0)
                return 2;
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return 1;
        /* Right after the sandbox started, init may not listen yet. */
        for (int tries = 0; connect(s, (struct sockaddr *)&sa, sizeof sa) < 0; tries++) {
                if ((errno != ENOENT && errno != ECONNREFUSED && errno != EINTR) || tries >= RELAY_CONNECT_TRIES)
                        return 1;
                struct timespec ts = { .tv_nsec = RELAY_CONNECT_WAIT_NS };
                nanosleep(&ts, NULL);
        }
        /* Who we are, for init (peer_is_relay in transport.c): init asks with one byte,
         * we answer with one that carries our credentials, which the kernel checks. */
        char ask = 0;
        struct pollfd pa = { .fd = s, .events = POLLIN };
        if (poll(&pa, 1, RELAY_ASK_TIMEOUT_MS) != 1 || read(s, &ask, 1) != 1 || ask != INIT_RELAY_ASK)
                return 1;
        char hello = INIT_RELAY_HELLO;
        struct ucred uc = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = { .iov_base = &hello, .iov_len = 1 };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_CREDENTIALS;
        c->cmsg_len = CMSG_LEN(sizeof uc);
        memcpy(CMSG_DATA(c), &uc, sizeof uc);
        if (sendmsg(s, &m, MSG_NOSIGNAL) != 1)
                return 1;
        /* Two directions, each with its own buffer, and no write that blocks: init stops
         * reading spaced's frames while its own output is over INIT_OUT_HIGH, so a relay
         * blocked writing to init would never read that output again, and both would
         * wait forever. dir[0]: stdin -> init, dir[1]: init -> stdout. */
        static struct {
                int in, out;
                char buf[RELAY_BUF];
                size_t len, off;
                bool eof;
        } dir[2];
        dir[0].in = 0, dir[0].out = s, dir[1].in = s, dir[1].out = 1;
        int fds[3] = { 0, 1, s };
        for (int i = 0; i < 3; i++) {
                int fl = fcntl(fds[i], F_GETFL);
                if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) < 0)
                        return 1;
        }
        /* A direction ends at EOF once what it read is out, or when a write fails. */
        while (!(dir[0].eof && dir[0].len == 0) && !(dir[1].eof && dir[1].len == 0)) {
                struct pollfd p[4];
                for (int i = 0; i < 2; i++) {
                        p[2 * i] = (struct pollfd){ .fd = dir[i].len == 0 && !dir[i].eof ? dir[i].in : -1,
                                                    .events = POLLIN };
                        p[2 * i + 1] = (struct pollfd){ .fd = dir[i].len > 0 ? dir[i].out : -1, .events = POLLOUT };
                }
                if (poll(p, 4, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return 1;
                }
                for (int i = 0; i < 2; i++) {
                        if (p[2 * i].revents) {
                                ssize_t n = read(dir[i].in, dir[i].buf, sizeof dir[i].buf);
                                if (n > 0)
                                        dir[i].len = (size_t)n, dir[i].off = 0;
                                else if (n == 0 || (errno != EINTR && errno != EAGAIN))
                                        dir[i].eof = true;
                        }
                        if (dir[i].len > 0) {
                                ssize_t n = write(dir[i].out, dir[i].buf + dir[i].off, dir[i].len - dir[i].off);
                                if (n > 0) {
                                        dir[i].off += (size_t)n;
                                        if (dir[i].off == dir[i].len)
                                                dir[i].len = dir[i].off = 0;
                                } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
                                        dir[i].eof = true; /* the other side is gone */
                                        dir[i].len = 0;
                                }
                        }
                }
        }
        /* Either direction ending ends the connection: init sees EOF and keeps running. */
        close(s);
        return 0;
}
