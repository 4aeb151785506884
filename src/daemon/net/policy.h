/* A session's network policy (docs/network.md): egress off, or on with allow and deny
 * rules by CIDR (IPv4, IPv6, optional port) and by name (exact, or "*.example.com": any
 * name below example.com), and a bandwidth limit; and the operator's policy around it.
 * Pure data: parsing, checking, matching and JSON, no system calls. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json;
struct json_writer;

#define NET_RULES_MAX 256        /* allow or deny rules of one policy */
#define NET_NAME_MAX 253         /* a DNS name, without the trailing dot */
#define NET_RULE_TEXT_MAX 300    /* one rule as text: "[v6/128]:65535", "*.name:port" */
#define NET_BANDWIDTH_MIN 8000ull          /* bits/s: 1 kB/s */
#define NET_BANDWIDTH_MAX 100000000000ull  /* bits/s: 100 Gbit/s */

enum net_rule_kind {
        NET_RULE_CIDR,   /* family, addr, prefix */
        NET_RULE_NAME,   /* name exactly */
        NET_RULE_SUFFIX, /* any name ending in "." + name (not name itself) */
};

struct net_rule {
        enum net_rule_kind kind;
        int family;        /* AF_INET or AF_INET6 (CIDR only) */
        uint8_t prefix;    /* CIDR only: 0..32 or 0..128 */
        uint16_t port;     /* 0: every port */
        uint8_t addr[16];  /* CIDR only: network order, host bits zero (4 bytes used for v4) */
        char *name;        /* names only: lowercase ASCII, no trailing dot; SUFFIX without "*." */
};

struct net_policy {
        bool egress;            /* false: nothing leaves the sandbox (rules kept, unused) */
        /* No allow rule: every destination the operator's policy lets through. Allow
         * rules: only those (CIDRs as they are, names through the resolver). Deny wins. */
        struct net_rule *allow, *deny;
        size_t n_allow, n_deny;
        uint64_t bandwidth_bps; /* bits/s, each direction; 0: no limit */
};

/* The operator's side (spaced's flags, docs/network.md "Operator settings"). */
struct net_operator {
        bool egress_enabled;     /* --egress on: sessions may have egress at all */
        bool default_egress;     /* --egress-default on: a session that says nothing gets it */
        /* --egress-open CIDR (repeatable): ranges of the always-closed list (host, private,
         * link-local, metadata; net_addr_closed) the operator opens for every session */
        struct net_rule *open;
        size_t n_open;
        uint64_t max_bandwidth_bps; /* --bandwidth-max; 0: none. A session asking more: 400 */
};

/* Frees what p holds (not p); p is then { 0 }. Accepts NULL. */
void net_policy_clear(struct net_policy *p);
/* A deep copy. -ENOMEM. */
int net_policy_copy(struct net_policy *dst, const struct net_policy *src);

/* From the API's JSON: false/true (egress off, or on with no rules) or an object
 * { "egress": bool, "allow": [rule text...], "deny": [...], "bandwidth": "20mbit" | bits/s }.
 * Missing "egress" in an object means true. A name rule in "deny" takes no port (the
 * resolver refuses the name whole); the same rule twice is kept once. -EINVAL (err says what and where) or -E2BIG
 * (over NET_RULES_MAX). p is { 0 } on failure. */
int net_policy_from_json(const struct json *v, struct net_policy *p, char *err, size_t errlen);
/* The object form, always complete: {"egress":…,"allow":[…],"deny":[…],"bandwidth":bits|null}.
 * net_policy_from_json of it gives the same policy. */
void net_policy_to_json(struct json_writer *w, const struct net_policy *p);

/* The same as text (malloc'd, NUL-terminated), as meta keeps it (meta_session.network_json).
 * -ENOMEM. */
int net_policy_to_text(const struct net_policy *p, char **ret);
/* net_policy_from_json of a text. -EINVAL (not JSON, or not a policy; err says why). */
int net_policy_from_text(const char *text, struct net_policy *p, char *err, size_t errlen);

/* One rule from text: "203.0.113.0/24", "203.0.113.7", "203.0.113.7:443", "2001:db8::/32",
 * "[2001:db8::1]:443", "[2001:db8::/32]:443", "example.com", "example.com:443",
 * "*.example.com", "*.example.com:8443". Names: letters, digits, '-', '_' and dots, labels
 * of 1..63, at most NET_NAME_MAX; case folded. -EINVAL with err. */
int net_rule_parse(const char *text, struct net_rule *r, char *err, size_t errlen);
/* The canonical text of r (what net_rule_parse reads back to r); size >= NET_RULE_TEXT_MAX. */
void net_rule_format(const struct net_rule *r, char *buf, size_t size);
/* "20mbit", "1.5gbit", "500kbit", "64000bit", or digits alone (bits/s). Units k/m/g are
 * powers of 1000. -EINVAL, -ERANGE outside NET_BANDWIDTH_MIN..MAX. */
int net_bandwidth_parse(const char *text, uint64_t *bps);

/* What the policy says of a name the sandbox asked the resolver for (lowercase, no
 * trailing dot): NET_DENY if a deny name rule matches it (deny wins), NET_ALLOW if an
 * allow name rule matches it or the policy has no allow rule, NET_UNLISTED otherwise
 * (allow rules exist, none matches: the resolver answers NXDOMAIN). Egress off: NET_DENY.
 * port_ret (may be NULL): the matching allow rule's port (0 = any; if several match, 0
 * wins over a port). */
enum net_verdict { NET_DENY, NET_ALLOW, NET_UNLISTED };
enum net_verdict net_policy_name(const struct net_policy *p, const char *name, uint16_t *port_ret);

/* True if the address is one the operator's policy always keeps closed (every session,
 * whatever it asks) unless an open range covers it: loopback, "this network", link-local
 * (169.254/16, fe80::/10, including 169.254.169.254), the metadata fd00:ec2::254, private
 * (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), multicast, broadcast, reserved
 * (240/4), IPv4-mapped (::ffff:0:0/96) and NAT64 (64:ff9b::/96) IPv6 of any of those, and
 * all of ::/96 (::, ::1 and the deprecated IPv4-compatible addresses). The host's own addresses and the
 * sandbox networks are closed by the room too (net.c), not by this list. */
bool net_addr_closed(const struct net_operator *op, int family, const uint8_t *addr);
/* The closed ranges as rules (for the firewall), in a static table. */
const struct net_rule *net_closed_ranges(size_t *n);

/* A session policy checked against the operator's: -EPERM when egress is asked and the
 * operator has it off, -ERANGE over max_bandwidth_bps; err says which. A policy without a
 * bandwidth of its own (0) passes: the room limits it to max_bandwidth_bps. */
int net_policy_check(const struct net_policy *p, const struct net_operator *op, char *err, size_t errlen);
