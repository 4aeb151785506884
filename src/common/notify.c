/* The service manager's notification socket (notify.h). */
#include "common/notify.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/macros.h"

int notify_open(struct notify *n) {
        *n = (struct notify){ .fd = -1 };
        const char *e = getenv("NOTIFY_SOCKET");
        if (!e)
                return 0;
        size_t len = strlen(e);
        int r = 0;
        if ((e[0] != '/' && e[0] != '@') || len < 2 || len >= sizeof n->addr.sun_path)
                r = -EINVAL;
        else {
                n->addr.sun_family = AF_UNIX;
                memcpy(n->addr.sun_path, e, len);
                if (e[0] == '@')
                        n->addr.sun_path[0] = '\0'; /* abstract: no NUL after the name */
                n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (e[0] == '/'));
                n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                if (n->fd < 0)
                        r = -errno;
        }
        unsetenv("NOTIFY_SOCKET");
        return r;
}

int notify_send(const struct notify *n, const char *state) {
        if (!n || n->fd < 0)
                return 0;
        size_t len = strlen(state);
        if (len == 0 || len > NOTIFY_MAX_STATE)
                return -EINVAL;
        ssize_t k;
        do
                k = sendto(n->fd, state, len, MSG_NOSIGNAL, (const struct sockaddr *)&n->addr, n->addr_len);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        return (size_t)k == len ? 1 : -EIO;
}

void notify_close(struct notify *n) {
        n->fd = safe_close(n->fd);
}
