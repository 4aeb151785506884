/* The network room (docs/network.md): with `spaced --egress on`, every sandbox gets a
 * prepared network namespace owned by the host (root inside a sandbox has no CAP_NET_ADMIN
 * over it), joined to spaced's by a veth pair whose host end is "sp<slot>", and a chain of
 * its own in the `inet space` table (nft.h) holding its policy. A slot is a lease: the
 * room hands it out (net_lease_new), rewrites its rules (net_lease_apply), takes it back
 * (net_lease_release), and after a restart finds it again from the sandbox's directory
 * (net_lease_adopt) and removes what nobody holds (net_orphans_remove). With --egress off
 * there is no room at all: nothing on the host's network changes. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/net/policy.h"

#define NET_DNS_PORT_DEFAULT 53535
#define NET_UPSTREAMS_MAX 8       /* --dns-upstream */
#define NET_OPEN_MAX 64           /* --egress-open */
#define NET_ERR_MAX 512
#define NET_LEASE_FILE "net"      /* in the sandbox dir: the slot, for a restart */
#define NET_DEFAULT_NET4 "10.231.0.0/16"
#define NET_DEFAULT_NET6 "fd53:7061:6365::/48"
#define NET_HOST_PREFIX "sp"      /* host ends: "sp" + 5 hex digits */
#define NET_SANDBOX_IF "eth0"

struct daemon;
struct session;

struct net_upstream {
        int family;
        uint8_t addr[16];
        uint16_t port;
};

/* The operator's flags (spaced --egress ...), parsed by net_cfg_* below. */
struct net_cfg {
        bool egress;                  /* --egress on */
        struct net_operator op;       /* egress_enabled = egress, default_egress, open, max bandwidth */
        uint8_t net4[4];              /* --sandbox-net4 (/8../22) */
        unsigned prefix4;
        uint8_t net6[16];             /* --sandbox-net6 (/16../48) */
        unsigned prefix6;
        uint16_t dns_port;            /* --dns-port */
        struct net_upstream upstream[NET_UPSTREAMS_MAX]; /* --dns-upstream */
        size_t n_upstream;
};

/* The defaults: egress off, the default networks, NET_DNS_PORT_DEFAULT. */
void net_cfg_init(struct net_cfg *c);
/* Frees what c holds (the open ranges). */
void net_cfg_clear(struct net_cfg *c);
/* One flag's value each; -EINVAL (err says why), -E2BIG past a limit. */
int net_cfg_net4(struct net_cfg *c, const char *cidr, char *err, size_t errlen);
int net_cfg_net6(struct net_cfg *c, const char *cidr, char *err, size_t errlen);
int net_cfg_open(struct net_cfg *c, const char *cidr, char *err, size_t errlen);
int net_cfg_upstream(struct net_cfg *c, const char *ip_port, char *err, size_t errlen);
int net_cfg_dns_port(struct net_cfg *c, const char *port, char *err, size_t errlen);

struct net_room;
struct net_lease;

/* cfg->egress off: *ret = NULL and nothing else happens. On: host sysctls (forwarding),
 * the base table. cfg is copied. */
int net_open(const struct net_cfg *cfg, struct net_room **ret, char *err, size_t errlen);
/* Frees the room; the table, the veths and the namespaces of live sandboxes stay (a
 * restarted spaced adopts them). Accepts NULL. */
struct net_room *net_close(struct net_room *r);
const struct net_cfg *net_room_cfg(const struct net_room *r);

/* A new slot for sandbox sbx (its directory dir gets NET_LEASE_FILE): namespace, veth,
 * addresses, routes, sysctls, and a chain with everything closed. Thread-safe. */
int net_lease_new(struct net_room *r, const char *sbx, const char *dir, struct net_lease **ret, char *err,
                  size_t errlen);
/* The lease of a sandbox that outlived the daemon: its slot from dir, its namespace from
 * its init's. Its chain keeps the rules it had until net_lease_apply. -ENOENT: no lease. */
int net_lease_adopt(struct net_room *r, const char *sbx, const char *dir, pid_t init_pid, struct net_lease **ret,
                    char *err, size_t errlen);
/* True if the sandbox directory dir records a lease (made with --egress on). */
bool net_lease_recorded(const char *dir);
/* The lease of sandbox sbx, or NULL. */
struct net_lease *net_lease_find(struct net_room *r, const char *sbx);
/* Its rules for policy p (NULL: everything closed), one transaction; no bandwidth in p:
 * the operator's --bandwidth-max. Thread-safe. */
int net_lease_apply(struct net_room *r, struct net_lease *l, const struct net_policy *p, char *err, size_t errlen);
/* The prepared namespace, for rt_spec.netns_fd; owned by the lease. */
int net_lease_netns_fd(const struct net_lease *l);
unsigned net_lease_slot(const struct net_lease *l);
/* The file for rt_spec.resolv_conf (its nameservers: the host end); owned by the lease. */
const char *net_lease_resolv_conf(const struct net_lease *l);
/* The sandbox's address of family (4 or 16 bytes), and the host end's (its gateway and
 * resolver). */
void net_lease_addr(const struct net_lease *l, int family, uint8_t *sandbox, uint8_t *host);
/* Removes the chain, the veth and NET_LEASE_FILE; frees l. Accepts NULL. Thread-safe. */
void net_lease_release(struct net_room *r, struct net_lease *l);
/* By sandbox id, when the lease is not at hand (reclaim): the lease held, or the one its
 * dir records. */
void net_release_sbx(struct net_room *r, const char *sbx, const char *dir);
/* After every live sandbox was adopted: chains and veths of slots nobody holds go. */
int net_orphans_remove(struct net_room *r, char *err, size_t errlen);
/* For the resolver (any thread): an address slot may reach (deny false) or not. */
int net_learn(struct net_room *r, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s,
              bool deny);

/* For the resolver (any thread): true if an address may never be learned for any slot:
 * closed by the operator's policy (net_addr_closed), in the sandbox networks, or one of
 * the host's own addresses. */
bool net_room_closed(struct net_room *r, int family, const uint8_t *addr);

/* The daemon's hook: s->net changed (PUT /v1/sessions/{id}/network) or its sandbox was
 * taken from the pool or re-attached: puts it in force for s's sandbox, if it has a lease
 * (none: nothing to do; the next start applies it). 0 or -errno (logged); on failure the
 * caller puts the old policy back and calls this again. */
int net_session_apply(struct daemon *d, struct session *s);
