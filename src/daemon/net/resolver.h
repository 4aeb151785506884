/* spaced's DNS resolver for sandboxes (docs/network.md "DNS"): answers only the names a
 * sandbox's policy allows, forwards those to the upstream servers, and tells the network
 * room which addresses each answer makes reachable. It runs on a thread of its own.
 *
 * How the room (net.c) uses it:
 *  - at daemon start with egress on: resolver_open() with the listen addresses (0.0.0.0
 *    and :: on --dns-port; nft redirects every sandbox's port 53 there), the upstreams
 *    (--dns-upstream, else /etc/resolv.conf's nameservers) and the hooks below;
 *  - when a slot is leased or its policy changes: resolver_set_client(res, family, addr,
 *    slot, &session->net) for the sandbox's v4 and its v6 address (the policy is copied;
 *    the caller keeps its own); at release: resolver_drop_client() for both;
 *  - the hooks run on the resolver's thread, never under its lock (they may take the
 *    room's): allow() adds addr (. port) to the slot's DNS-learned set with timeout ttl_s
 *    and must be done when it returns (the answer leaves only after it); deny() adds addr
 *    to the slot's deny set for ttl_s; closed() says whether an address must never be
 *    reachable (net_addr_closed, plus the host's own addresses and the sandbox networks);
 *  - /metrics: resolver_stats();
 *  - at daemon stop: resolver_close().
 * Sources are trusted because the firewall drops spoofed ones (anti-spoof in prerouting):
 * a query from an address that is not a client is dropped unanswered. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/net/policy.h"

#define RESOLVER_LISTEN_MAX 4          /* listen addresses (each UDP + TCP) */
#define RESOLVER_UPSTREAM_MAX 8        /* upstream servers */
#define RESOLVER_QUERY_MS 2000         /* a forwarded query's whole budget: then SERVFAIL */
#define RESOLVER_RETRY_MS 700          /* a UDP try without answer: the next upstream */
#define RESOLVER_INFLIGHT_MAX 256      /* forwarded queries in flight, all clients */
#define RESOLVER_CLIENT_INFLIGHT_MAX 32 /* ... of one client (more are dropped) */
#define RESOLVER_PREFETCH_INFLIGHT_MAX 32 /* denied-name resolutions in flight */
#define RESOLVER_RATE_PER_S 50         /* a client's token bucket: queries per second */
#define RESOLVER_RATE_BURST 100        /* ... and its depth */
#define RESOLVER_TCP_CLIENTS_MAX 64    /* open TCP connections from sandboxes */
#define RESOLVER_TCP_IDLE_MS 10000     /* a TCP connection with no query for this long closes */
#define RESOLVER_TTL_MIN 5             /* allow() timeouts: clamp(TTL, MIN, MAX) seconds */
#define RESOLVER_TTL_MAX 3600
#define RESOLVER_DENY_REFRESH_MIN 30   /* a denied name is re-resolved after max(TTL, this) s */
#define RESOLVER_DENY_GRACE_S 30       /* deny() timeouts outlast the next re-resolution by this */
#define RESOLVER_DENY_AGAIN_MS 5000    /* a denied name queried is re-resolved, at most this often */
#define RESOLVER_CLIENTS_MAX 65536     /* clients in the table */

struct resolver;

struct resolver_hooks {
        void *ctx;
        /* addr (4 or 16 bytes, network order) answered for an allowed name: reachable on
         * port (0 = every port: the allow rule's) for ttl_s seconds. */
        void (*allow)(void *ctx, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s);
        /* addr is an address of a name the slot's policy denies: unreachable for ttl_s. */
        void (*deny)(void *ctx, unsigned slot, int family, const uint8_t *addr, uint32_t ttl_s);
        /* true: addr must never be reachable from a sandbox (the answer drops it). */
        bool (*closed)(void *ctx, int family, const uint8_t *addr);
};

struct resolver_sockaddr {
        int family;       /* AF_INET or AF_INET6 */
        uint8_t addr[16]; /* network order */
        uint16_t port;    /* host order */
};

struct resolver_opts {
        /* where to listen (UDP and TCP on each); port 0: one free port, the same for all
         * (resolver_port tells which) */
        struct resolver_sockaddr listen[RESOLVER_LISTEN_MAX];
        size_t n_listen;
        struct resolver_sockaddr upstream[RESOLVER_UPSTREAM_MAX]; /* port 0 means 53 */
        size_t n_upstream;
        struct resolver_hooks hooks; /* allow, deny and closed are required */
        unsigned query_ms;           /* 0: RESOLVER_QUERY_MS */
        unsigned tcp_idle_ms;        /* 0: RESOLVER_TCP_IDLE_MS */
};

struct resolver_stats {
        uint64_t queries;           /* messages received (UDP datagrams, TCP messages) */
        uint64_t answered;          /* answers sent, whatever their rcode */
        uint64_t refused;           /* answered NXDOMAIN by policy, or REFUSED */
        uint64_t dropped;           /* not answered: unknown source, malformed, over a limit */
        uint64_t rate_limited;      /* of dropped: over the client's token bucket */
        uint64_t upstream_failures; /* forwarded queries answered SERVFAIL (timeout, bad answer) */
};

/* Binds every listen address and starts the thread. -EINVAL (no listen address, no
 * upstream, a hook missing, counts over the maxima), or the socket error (-EADDRINUSE...). */
int resolver_open(const struct resolver_opts *o, struct resolver **ret);
/* Stops the thread (joined), closes every socket, frees. Accepts NULL; returns NULL. */
struct resolver *resolver_close(struct resolver *r);
/* The port the listeners are bound to. */
uint16_t resolver_port(const struct resolver *r);

/* Queries from addr are the slot's and follow policy p (copied under the lock; an
 * existing entry for addr is replaced and takes effect for the next query). Denied
 * exact names of p are resolved right away and again when their TTL runs out, so their
 * addresses reach deny(). -EINVAL (family), -ENOMEM, -E2BIG over RESOLVER_CLIENTS_MAX. */
int resolver_set_client(struct resolver *r, int family, const uint8_t *addr, unsigned slot, const struct net_policy *p);
/* addr is no client any more (its queries in flight are answered no more). */
void resolver_drop_client(struct resolver *r, int family, const uint8_t *addr);

void resolver_stats(struct resolver *r, struct resolver_stats *ret);
