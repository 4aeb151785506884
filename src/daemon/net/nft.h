/* The network room's firewall (docs/network.md, "Firewall"): ONE nftables table `inet
 * space` in spaced's network namespace, written through libnftables. Base chains (anti-spoof,
 * DNS redirect, input, forward, masquerade, the closed ranges) are made once by
 * nft_base_apply; each slot has its chains s<slot> (outbound) and i<slot> (inbound) and its
 * sets, rewritten whole by one transaction per policy (nft_slot_apply). Thread-safe: one
 * lock around the library's context (the resolver adds learned addresses from its thread). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/net/policy.h"

#define NFT_TABLE "space"
#define NFT_ERR_MAX 512
#define NFT_LEARN_TTL_MIN 5u      /* seconds: a DNS-learned address stays at least this long */
#define NFT_LEARN_TTL_MAX 3600u   /* and at most this long */

struct nft;

/* What the base chains need to know. */
struct nft_base {
        uint16_t dns_port;          /* the resolver's port on the host ends */
        uint8_t net4[4];            /* the sandbox networks */
        unsigned prefix4;
        uint8_t net6[16];
        unsigned prefix6;
        const struct net_rule *closed; /* net_closed_ranges() */
        size_t n_closed;
        const struct net_rule *open;   /* the operator's --egress-open */
        size_t n_open;
};

/* One slot: its host end "sp<slot>" and the sandbox's own addresses (anti-spoof). */
struct nft_slot {
        unsigned slot;
        uint8_t addr4[4];
        uint8_t addr6[16];
};

int nft_new(struct nft **ret, char *err, size_t errlen);
struct nft *nft_free(struct nft *n);

/* Makes the table and its base chains, or rewrites them in place, in one transaction:
 * slots' chains and sets (a daemon restart finds them) stay as they are. */
int nft_base_apply(struct nft *n, const struct nft_base *b, char *err, size_t errlen);
/* Makes or rewrites the chains, sets and map entries of one slot for policy p (NULL:
 * everything closed), in one transaction: in force when it returns. */
int nft_slot_apply(struct nft *n, const struct nft_slot *s, const struct net_policy *p, char *err, size_t errlen);
/* Removes everything of slot (idempotent). */
int nft_slot_delete(struct nft *n, unsigned slot, char *err, size_t errlen);
/* A DNS-learned address for slot: allowed (deny false; port 0 = every port) or denied
 * (deny true), for ttl_s seconds clamped to NFT_LEARN_TTL_MIN..MAX. */
int nft_slot_learn(struct nft *n, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s,
                   bool deny, char *err, size_t errlen);
/* The slots that have chains in the table (for a restart's orphan check); *ret malloc'd. */
int nft_slot_list(struct nft *n, unsigned **ret, size_t *n_ret, char *err, size_t errlen);
/* True if the table exists (tests, diagnostics). */
bool nft_table_exists(struct nft *n);
/* Runs a command text as one transaction (tests and the room's own use). */
int nft_run(struct nft *n, const char *cmd, char *err, size_t errlen);
