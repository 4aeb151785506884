/* Unix socket helpers shared by the daemon, space-init and the runtimes. */
#pragma once
#include <sys/socket.h>
#include <sys/un.h>

/* The address of the unix socket at path; -ENAMETOOLONG when it does not fit sun_path. */
int sock_unix_addr(const char *path, struct sockaddr_un *ret);
