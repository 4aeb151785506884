/* Ports of sandboxes whose network stack spaced cannot enter (gVisor's netstack, a microVM's
 * guest kernel; runtimes without netns_fd): space-init connects to the port inside
 * (op "connect", docs/protocol.md §3.16) and the bytes travel over the sandbox's init
 * connection. The caller gets one end of a socketpair, which it uses like a socket to the
 * port (ingress pipes take it as their upstream); the relay carries the other end's bytes
 * to init and back, with init's stream window and stdin acks bounding what either side
 * holds, and half-closes passed on. */
#pragma once
#include <stdint.h>

#include "daemon/net/ingress.h"

struct session;
struct port_relay;

/* Connections through init at once, per session. */
#define PORT_RELAYS_PER_SESSION 64u
/* Bytes from the port held for the socketpair before init's window stays shut. */
#define PORT_RELAY_BUF (256u << 10)

/* Asks s's init to connect to port; cb(ctx, fd) runs once, later (never from inside this
 * call): fd >= 0 is the caller's end, or a negative errno (-ECONNREFUSED: nothing listens).
 * -EAGAIN past PORT_RELAYS_PER_SESSION, -EPIPE when the session cannot take requests,
 * -EOPNOTSUPP when its init predates stream windows. */
int port_relay_dial(struct session *s, uint16_t port, ingress_dial_fn cb, void *ctx, struct port_relay **ret);
/* Before the callback: it will not run and the relay goes. Accepts NULL. */
void port_relay_cancel(struct port_relay *pr);
