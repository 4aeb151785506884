/* spaced's limits on what clients hold and write (docs/security.md "Hostile tenants"):
 * connection slots and the request-head deadline, and the bounds of the event log. Each
 * has a default here and can be set with `spaced --limit NAME=VALUE` (or `limit = NAME=VALUE`
 * in the configuration file). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LIM_HEAD_MS 10000u               /* a request head, from its first byte (or the accept) */
#define LIM_TCP_CONNS 1024u              /* TCP connections at once */
#define LIM_UNIX_CONNS 256u              /* Unix-socket (operator) connections: slots of their own */
#define LIM_STRANGERS 128u               /* TCP connections with no authenticated request yet */
#define LIM_PER_PEER 64u                 /* TCP connections per IPv4 address or IPv6 /64 */
#define LIM_EVENTS 10000u                /* agent events kept per session (oldest trimmed) */
#define LIM_EVENT_BYTES (16ull << 20)    /* agent event payload bytes kept per session */
#define LIM_TENANT_EVENT_BYTES (1ull << 30) /* agent event payload bytes per tenant: past it, 507 */
#define LIM_SYSTEM_EVENTS 10000u         /* spaced's own events kept per session (oldest trimmed) */
#define LIM_EVENT_RATE 50u               /* agent events per second per session, sustained */
#define LIM_EVENT_BURST 200u             /* ... and at once; past it, 429 with Retry-After */

struct spaced_limits {
        uint64_t head_ms;
        uint64_t tcp_conns;
        uint64_t unix_conns;
        uint64_t strangers;
        uint64_t per_peer;
        uint64_t events;
        uint64_t event_bytes;
        uint64_t tenant_event_bytes;
        uint64_t system_events;
        uint64_t event_rate;
        uint64_t event_burst;
};

#define SPACED_LIMITS_INIT                                                                          \
        {                                                                                           \
                .head_ms = LIM_HEAD_MS, .tcp_conns = LIM_TCP_CONNS, .unix_conns = LIM_UNIX_CONNS,   \
                .strangers = LIM_STRANGERS, .per_peer = LIM_PER_PEER, .events = LIM_EVENTS,         \
                .event_bytes = LIM_EVENT_BYTES, .tenant_event_bytes = LIM_TENANT_EVENT_BYTES,       \
                .system_events = LIM_SYSTEM_EVENTS, .event_rate = LIM_EVENT_RATE,                   \
                .event_burst = LIM_EVENT_BURST,                                                     \
        }

/* "NAME=VALUE" into l: 0, or -EINVAL with why (an unknown name, a value out of its range). */
int limits_set_arg(struct spaced_limits *l, const char *arg, char *why, size_t whysz);
/* After every --limit: -EINVAL with why when two limits contradict each other. */
int limits_check(const struct spaced_limits *l, char *why, size_t whysz);
/* The names, ranges and defaults, for spaced --help. */
void limits_usage(FILE *f);
