/* File descriptor helpers (fdio.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "common/fdio.h"

ssize_t fdio_read(int fd, void *buf, size_t n) {
        for (;;) {
                ssize_t k = read(fd, buf, n);
                if (k >= 0 || errno != EINTR)
                        return k < 0 ? -errno : k;
        }
}

int fdio_write_all(int fd, const void *data, size_t n) {
        const char *p = data;
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EAGAIN) {
                        /* A non-blocking fd (inherited so, or handed over so: gVisor gives
                         * runsc exec's host pipes as they are): wait until it takes more. */
                        struct pollfd pw = { .fd = fd, .events = POLLOUT };
                        if (poll(&pw, 1, -1) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

int fdio_fdopendir(int fd, DIR **ret) {
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        *ret = d;
        return 0;
}

int fdio_opendir(int dfd, DIR **ret) {
        int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        int r = fdio_fdopendir(fd, ret);
        if (r == 0)
                rewinddir(*ret);
        return r;
}
