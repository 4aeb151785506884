/* Readiness and status for a service manager: systemd's notification protocol (one
 * datagram of "KEY=value" lines to the Unix socket $NOTIFY_SOCKET), written here so that
 * spaced needs no libsystemd. Without $NOTIFY_SOCKET every call does nothing. */
#pragma once
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#define NOTIFY_MAX_STATE 4096 /* bytes of one notification */

struct notify {
        int fd;                  /* -1: no service manager listens */
        struct sockaddr_un addr;
        socklen_t addr_len;
};

/* Takes $NOTIFY_SOCKET out of the environment, so that no program spaced starts (runsc,
 * QEMU, debootstrap) speaks for it, and opens a datagram socket for it: a path, or an
 * abstract name written "@name". n->fd is -1 when the variable is unset; -EINVAL for an
 * address that is neither (n->fd -1 too). Call before any thread starts. */
int notify_open(struct notify *n);
/* Sends state ("READY=1", "STOPPING=1", "STATUS=…", several joined by '\n'): 1 when sent,
 * 0 without a service manager, a negative errno when the send failed. */
int notify_send(const struct notify *n, const char *state);
void notify_close(struct notify *n);
