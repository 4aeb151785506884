/* Ingress (docs/network.md, "Exposed ports"): how spaced reaches a port inside a sandbox
 * and carries bytes to it. A socket is made inside the sandbox's network namespace (so the
 * sandbox needs no route, and egress may be off), connected to 127.0.0.1:PORT, then
 * [::1]:PORT; a pipe then carries bytes both ways between it and a client's socket, with
 * bounded buffers, half-closes passed on, and idle timeouts. It knows nothing of HTTP:
 * api_ports.c decides what goes through and writes the first bytes. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "daemon/loop.h"

/* Pipes (and dials in progress) of the whole daemon, and of one owner (a session). */
#define INGRESS_PIPES_MAX 512u
#define INGRESS_PIPES_PER_OWNER 64u
/* Bytes held for one direction of a pipe: reading the other side stops past it, so a slow
 * reader holds up only its own pipe, never spaced's memory (a pipe holds at most about
 * twice this, plus what the connection had queued when it became a pipe). */
#define INGRESS_PIPE_BUF (256u << 10)
/* A port that takes this long to accept is answered as not listening. */
#define INGRESS_CONNECT_MS 5000u
/* A pipe through which nothing passed for this long is closed. */
#define INGRESS_IDLE_MS (10u * 60u * 1000u)
/* After the sandbox's answer ended (an HTTP pipe), what the client still sends is read
 * and dropped for this long, so that closing never resets the answer's tail. */
#define INGRESS_LINGER_MS 2000u
#define INGRESS_OWNER_MAX 32u

struct ingress;
struct ingress_dial;

int ingress_new(struct loop *l, struct ingress **ret);
/* Closes every pipe and cancels every dial. Accepts NULL; returns NULL. */
struct ingress *ingress_free(struct ingress *ig);

/* A non-blocking, close-on-exec TCP socket of family (AF_INET, AF_INET6) that belongs to
 * the network namespace netns_fd. The calling thread enters it for the socket() call
 * only: when this returns, with success or not, the thread is in spaced's own namespace
 * again (if even that fails, spaced aborts: nothing it does after would be safe). */
int ingress_socket(struct ingress *ig, int netns_fd, int family, int *ret);

/* Called once per dial (never from inside ingress_dial): fd >= 0 is a connected socket,
 * now the callee's; a negative errno says why nothing answered (-ECONNREFUSED: nothing
 * listens on the port; -ETIMEDOUT; -EMFILE, ...). */
typedef void (*ingress_dial_fn)(void *ctx, int fd_or_err);
/* Starts connecting to port in netns_fd (duplicated: the caller may close its fd). The dial
 * counts against owner's pipes. -EAGAIN when the pipe limits are reached. */
int ingress_dial(struct ingress *ig, int netns_fd, uint16_t port, const char *owner, ingress_dial_fn cb, void *ctx,
                 struct ingress_dial **ret);
/* The callback will not run; the dial is freed. Accepts NULL. */
void ingress_dial_cancel(struct ingress_dial *dl);

enum ingress_pipe_mode {
        INGRESS_PIPE_RAW,  /* both ways until both ended (Upgrade, port-forward) */
        INGRESS_PIPE_HTTP, /* ends once the upstream's answer ended and reached the client */
};

/* Joins client and upstream (both taken, closed on failure too): to_client goes to the
 * client first, to_upstream to the upstream (both emptied). owner and port label it for
 * ingress_close and the per-owner limit. */
int ingress_pipe_new(struct ingress *ig, enum ingress_pipe_mode mode, const char *owner, uint16_t port, int client,
                     struct buf *to_client, int upstream, struct buf *to_upstream);
/* Pipes and dials of owner (port 0: any port). */
size_t ingress_count(const struct ingress *ig, const char *owner);
/* Closes owner's pipes (port 0: all of them): a port no longer exposed, a session gone. */
void ingress_close(struct ingress *ig, const char *owner, uint16_t port);
/* Once a second: idle pipes, dials past INGRESS_CONNECT_MS, lingering pipes. */
void ingress_tick(struct ingress *ig);
