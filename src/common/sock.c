/* Unix socket helpers (sock.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "common/sock.h"

int sock_unix_addr(const char *path, struct sockaddr_un *ret) {
        size_t n = strlen(path);
        if (n >= sizeof ret->sun_path)
                return -ENAMETOOLONG;
        *ret = (struct sockaddr_un){ .sun_family = AF_UNIX };
        memcpy(ret->sun_path, path, n + 1);
        return 0;
}
