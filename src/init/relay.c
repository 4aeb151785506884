/* space-init --relay PATH: copies bytes between stdin/stdout and the unix socket at PATH
 * until either side closes. The gvisor runtime reaches space-init this way: a host socket
 * can't be saved in a gVisor checkpoint, so space-init listens on a socket inside the
 * sandbox and the host runs this relay (through `runsc exec`) for each connection. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/fdio.h"
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
        static char buf[RELAY_BUF];
        /* in[i] is copied to out[i]; a side that reached EOF stops being polled, and the
         * write half of its destination is shut so the peer sees the EOF too. */
        int in[2] = { 0, s }, out[2] = { s, 1 };
        bool open_in[2] = { true, true };
        while (open_in[0] && open_in[1]) {
                struct pollfd p[2] = { { .fd = in[0], .events = POLLIN }, { .fd = in[1], .events = POLLIN } };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return 1;
                }
                for (int i = 0; i < 2; i++) {
                        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        ssize_t n = read(in[i], buf, sizeof buf);
                        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (n <= 0 || fdio_write_all(out[i], buf, (size_t)n) < 0) /* the other side is gone */
                                open_in[i] = false;
                }
        }
        /* Either direction ending ends the connection: init sees EOF and keeps running. */
        close(s);
        return 0;
}
