/* spaced --limit NAME=VALUE: the table of settable limits (limits.h), their ranges and
 * their help text. The rooms that enforce them (server.c, api_sessions.c, meta) read the
 * values from struct spaced_limits. */
#include "daemon/limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/macros.h"
#include "daemon/util.h"

enum lim_unit { LIM_COUNT, LIM_BYTES, LIM_MS };

static const struct limit_def {
        const char *name;
        size_t off;
        enum lim_unit unit;
        uint64_t min, max;
        const char *what;
} defs[] = {
        { "request-head-ms", offsetof(struct spaced_limits, head_ms), LIM_MS, 100, 600000,
          "ms a whole request head may take, from the accept or its first byte" },
        { "tcp-conns", offsetof(struct spaced_limits, tcp_conns), LIM_COUNT, 1, 65536, "TCP connections at once" },
        { "unix-conns", offsetof(struct spaced_limits, unix_conns), LIM_COUNT, 1, 65536,
          "Unix-socket connections at once: slots no TCP client takes" },
        { "strangers", offsetof(struct spaced_limits, strangers), LIM_COUNT, 1, 65536,
          "TCP connections with no authenticated request (full: the oldest goes)" },
        { "conns-per-peer", offsetof(struct spaced_limits, per_peer), LIM_COUNT, 1, 65536,
          "TCP connections per IPv4 address or IPv6 /64" },
        { "events", offsetof(struct spaced_limits, events), LIM_COUNT, 1, 100000000,
          "agent events kept per session (the oldest are trimmed)" },
        { "event-bytes", offsetof(struct spaced_limits, event_bytes), LIM_BYTES, 64 << 10, 1ull << 40,
          "agent event bytes kept per session (the oldest are trimmed)" },
        { "tenant-event-bytes", offsetof(struct spaced_limits, tenant_event_bytes), LIM_BYTES, 64 << 10, 1ull << 50,
          "agent event bytes of a tenant's sessions together (past it: 507)" },
        { "system-events", offsetof(struct spaced_limits, system_events), LIM_COUNT, 100, 100000000,
          "spaced's own events kept per session (the oldest are trimmed)" },
        { "event-rate", offsetof(struct spaced_limits, event_rate), LIM_COUNT, 1, 1000000,
          "agent events a session may post per second (past the burst: 429)" },
        { "event-burst", offsetof(struct spaced_limits, event_burst), LIM_COUNT, 1, 1000000,
          "agent events a session may post at once before the rate applies" },
};

/* A plain decimal number: digits only, no sign, no unit. */
static int parse_count(const char *s, uint64_t *ret) {
        if (*s < '0' || *s > '9')
                return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

static uint64_t *field(struct spaced_limits *l, const struct limit_def *def) {
        return (uint64_t *)((char *)l + def->off);
}

int limits_set_arg(struct spaced_limits *l, const char *arg, char *why, size_t whysz) {
        const char *eq = strchr(arg, '=');
        if (!eq) {
                snprintf(why, whysz, "expected NAME=VALUE, got '%.64s'", arg);
                return -EINVAL;
        }
        size_t n = (size_t)(eq - arg);
        for (size_t i = 0; i < ELEMENTSOF(defs); i++) {
                const struct limit_def *def = &defs[i];
                if (strlen(def->name) != n || strncmp(def->name, arg, n) != 0)
                        continue;
                uint64_t v = 0;
                int r = def->unit == LIM_BYTES ? util_parse_size(eq + 1, &v) : parse_count(eq + 1, &v);
                if (r < 0 || v < def->min || v > def->max) {
                        snprintf(why, whysz, "%s must be %s from %llu to %llu, not '%.32s'", def->name,
                                 def->unit == LIM_BYTES ? "a size" : "a number", (unsigned long long)def->min,
                                 (unsigned long long)def->max, eq + 1);
                        return -EINVAL;
                }
                *field(l, def) = v;
                return 0;
        }
        snprintf(why, whysz, "no limit named '%.*s' (spaced --help lists them)", (int)MIN(n, (size_t)64), arg);
        return -EINVAL;
}

int limits_check(const struct spaced_limits *l, char *why, size_t whysz) {
        if (l->strangers > l->tcp_conns) {
                snprintf(why, whysz, "strangers (%llu) is more than tcp-conns (%llu)",
                         (unsigned long long)l->strangers, (unsigned long long)l->tcp_conns);
                return -EINVAL;
        }
        return 0;
}

void limits_usage(FILE *f) {
        struct spaced_limits d = SPACED_LIMITS_INIT;
        for (size_t i = 0; i < ELEMENTSOF(defs); i++) {
                const struct limit_def *def = &defs[i];
                unsigned long long v = (unsigned long long)*field(&d, def);
                fprintf(f, "      %s=%s (default %llu)\n          %s\n", def->name,
                        def->unit == LIM_BYTES ? "SIZE" : "N", v, def->what);
        }
}
