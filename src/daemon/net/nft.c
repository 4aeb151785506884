/* The `inet space` table (nft.h), as nft command texts run by libnftables: one buffer is
 * one kernel transaction, so a base rewrite or a slot's new policy is in force all at once
 * (never half a rule set). Names: host ends "sp<slot as 5 hex digits>", chains s<slot>
 * (from the sandbox) and i<slot> (to it), sets d4/d6 (DNS-learned, any port), p4/p6
 * (learned with a port), x4/x6 (learned denied) each followed by the slot. */
#include "daemon/net/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <nftables/libnftables.h>

#include "common/buf.h"
#include "common/macros.h"

#define NFT_CMD_MAX (4u << 20) /* one transaction's text */
#define NFT_SLOT_MAX 0xfffffu  /* 5 hex digits */

struct nft {
        pthread_mutex_t mu;
        struct nft_ctx *ctx;
};

/* A rejected packet: TCP gets a reset (a quick "connection refused"), the rest an ICMP
 * "administratively prohibited": two rules, the first matching TCP. */
static int add_reject_rules(struct buf *t, const char *chain, const char *match) {
        return buf_printf(t,
                          "add rule inet " NFT_TABLE " %s %s meta l4proto tcp reject with tcp reset\n"
                          "add rule inet " NFT_TABLE " %s %s reject with icmpx type admin-prohibited\n",
                          chain, match, chain, match);
}

int nft_new(struct nft **ret, char *err, size_t errlen) {
        struct nft *n = calloc(1, sizeof *n);
        if (!n)
                return -ENOMEM;
        n->ctx = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!n->ctx) {
                free(n);
                snprintf(err, errlen, "nftables: cannot make a context");
                return -ENOMEM;
        }
        nft_ctx_buffer_output(n->ctx);
        nft_ctx_buffer_error(n->ctx);
        pthread_mutex_init(&n->mu, NULL);
        *ret = n;
        return 0;
}

struct nft *nft_free(struct nft *n) {
        if (n) {
                nft_ctx_free(n->ctx);
                pthread_mutex_destroy(&n->mu);
                free(n);
        }
        return NULL;
}

/* Runs cmd under the lock; the library's output, when out is given, is copied there. */
static int run_locked(struct nft *n, const char *cmd, char **out, char *err, size_t errlen) {
        pthread_mutex_lock(&n->mu);
        int r = nft_run_cmd_from_buffer(n->ctx, cmd);
        if (r != 0) {
                const char *e = nft_ctx_get_error_buffer(n->ctx);
                /* the first line is the kernel's or parser's complaint */
                size_t l = e ? strcspn(e, "\n") : 0;
                if (err && errlen)
                        snprintf(err, errlen, "nftables: %.*s", (int)l, l ? e : "command failed");
                r = -EIO;
        } else if (out) {
                const char *o = nft_ctx_get_output_buffer(n->ctx);
                *out = strdup(o ? o : "");
                if (!*out)
                        r = -ENOMEM;
        }
        pthread_mutex_unlock(&n->mu);
        return r;
}

int nft_run(struct nft *n, const char *cmd, char *err, size_t errlen) { return run_locked(n, cmd, NULL, err, errlen); }

bool nft_table_exists(struct nft *n) {
        char e[64];
        return run_locked(n, "list table inet " NFT_TABLE, NULL, e, sizeof e) == 0;
}

static void cidr_text(char *buf, size_t size, int family, const uint8_t *addr, unsigned prefix) {
        char a[INET6_ADDRSTRLEN];
        inet_ntop(family, addr, a, sizeof a);
        snprintf(buf, size, "%s/%u", a, prefix);
}

static const char *ipkw(int family) { return family == AF_INET ? "ip" : "ip6"; }

/* " meta l4proto { tcp, udp } th dport P" or "". */
static void port_text(char *buf, size_t size, uint16_t port) {
        if (port)
                snprintf(buf, size, " meta l4proto { tcp, udp } th dport %u", port);
        else
                buf[0] = '\0';
}

int nft_base_apply(struct nft *n, const struct nft_base *b, char *err, size_t errlen) {
        _cleanup_(buf_freep) struct buf t = BUF_INIT(NFT_CMD_MAX);
        char n4[64], n6[80];
        cidr_text(n4, sizeof n4, AF_INET, b->net4, b->prefix4);
        cidr_text(n6, sizeof n6, AF_INET6, b->net6, b->prefix6);
        int r = buf_printf(&t,
                "add table inet " NFT_TABLE "\n"
                "add set inet " NFT_TABLE " src4 { type ifname . ipv4_addr; }\n"
                "add set inet " NFT_TABLE " src6 { type ifname . ipv6_addr; }\n"
                "add map inet " NFT_TABLE " out_slots { type ifname : verdict; }\n"
                "add map inet " NFT_TABLE " in_slots { type ifname : verdict; }\n"
                "add chain inet " NFT_TABLE " closed\n"
                "add chain inet " NFT_TABLE " pre_raw { type filter hook prerouting priority raw; policy accept; }\n"
                "add chain inet " NFT_TABLE " pre_nat { type nat hook prerouting priority dstnat; policy accept; }\n"
                "add chain inet " NFT_TABLE " input { type filter hook input priority filter; policy accept; }\n"
                "add chain inet " NFT_TABLE " forward { type filter hook forward priority filter; policy accept; }\n"
                "add chain inet " NFT_TABLE " post_nat { type nat hook postrouting priority srcnat; policy accept; }\n"
                "flush chain inet " NFT_TABLE " closed\n"
                "flush chain inet " NFT_TABLE " pre_raw\n"
                "flush chain inet " NFT_TABLE " pre_nat\n"
                "flush chain inet " NFT_TABLE " input\n"
                "flush chain inet " NFT_TABLE " forward\n"
                "flush chain inet " NFT_TABLE " post_nat\n"
                /* a sandbox sends only from its own addresses (the resolver and the room
                 * know it by them) */
                "add rule inet " NFT_TABLE " pre_raw iifname \"sp*\" iifname . ip saddr != @src4 drop\n"
                "add rule inet " NFT_TABLE " pre_raw iifname \"sp*\" iifname . ip6 saddr != @src6 drop\n"
                "add rule inet " NFT_TABLE " pre_nat iifname \"sp*\" meta l4proto { tcp, udp } th dport 53 redirect to :%u\n"
                "add rule inet " NFT_TABLE " input iifname \"sp*\" ct state established,related accept\n"
                "add rule inet " NFT_TABLE " input iifname \"sp*\" meta l4proto { tcp, udp } th dport %u ct status dnat accept\n"
                "add rule inet " NFT_TABLE " input iifname \"sp*\" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, echo-request } accept\n"
                "add rule inet " NFT_TABLE " input iifname \"sp*\" icmp type echo-request accept\n"
                "add rule inet " NFT_TABLE " input iifname \"sp*\" drop\n"
                "add rule inet " NFT_TABLE " forward iifname \"sp*\" oifname \"sp*\" drop\n"
                "add rule inet " NFT_TABLE " forward oifname \"sp*\" ct state established,related oifname vmap @in_slots\n"
                "add rule inet " NFT_TABLE " forward oifname \"sp*\" drop\n"
                "add rule inet " NFT_TABLE " forward iifname \"sp*\" iifname vmap @out_slots\n"
                "add rule inet " NFT_TABLE " forward iifname \"sp*\" drop\n"
                "add rule inet " NFT_TABLE " post_nat ip saddr %s oifname != \"sp*\" masquerade\n"
                "add rule inet " NFT_TABLE " post_nat ip6 saddr %s oifname != \"sp*\" masquerade\n",
                b->dns_port, b->dns_port, n4, n6);
        /* the sandbox networks stay closed whatever the operator opens */
        char m[100];
        snprintf(m, sizeof m, "ip daddr %s", n4);
        if (r >= 0)
                r = add_reject_rules(&t, "closed", m);
        snprintf(m, sizeof m, "ip6 daddr %s", n6);
        if (r >= 0)
                r = add_reject_rules(&t, "closed", m);
        for (size_t i = 0; r >= 0 && i < b->n_open; i++) {
                const struct net_rule *o = &b->open[i];
                if (o->kind != NET_RULE_CIDR)
                        continue;
                char c[80];
                cidr_text(c, sizeof c, o->family, o->addr, o->prefix);
                r = buf_printf(&t, "add rule inet " NFT_TABLE " closed %s daddr %s return\n", ipkw(o->family), c);
        }
        for (size_t i = 0; r >= 0 && i < b->n_closed; i++) {
                const struct net_rule *o = &b->closed[i];
                if (o->kind != NET_RULE_CIDR)
                        continue;
                char c[80];
                cidr_text(c, sizeof c, o->family, o->addr, o->prefix);
                snprintf(m, sizeof m, "%s daddr %s", ipkw(o->family), c);
                r = add_reject_rules(&t, "closed", m);
        }
        if (r < 0)
                return r;
        return run_locked(n, buf_cstr(&t), NULL, err, errlen);
}

static int slot_sets(struct buf *t, unsigned slot) {
        return buf_printf(t,
                          "add set inet " NFT_TABLE " d4%05x { type ipv4_addr; flags timeout; }\n"
                          "add set inet " NFT_TABLE " d6%05x { type ipv6_addr; flags timeout; }\n"
                          "add set inet " NFT_TABLE " p4%05x { type ipv4_addr . inet_service; flags timeout; }\n"
                          "add set inet " NFT_TABLE " p6%05x { type ipv6_addr . inet_service; flags timeout; }\n"
                          "add set inet " NFT_TABLE " x4%05x { type ipv4_addr; flags timeout; }\n"
                          "add set inet " NFT_TABLE " x6%05x { type ipv6_addr; flags timeout; }\n",
                          slot, slot, slot, slot, slot, slot);
}

int nft_slot_apply(struct nft *n, const struct nft_slot *s, const struct net_policy *p, char *err, size_t errlen) {
        if (s->slot > NFT_SLOT_MAX)
                return -ERANGE;
        unsigned sl = s->slot;
        char ch[16], in[16], a4[INET_ADDRSTRLEN], a6[INET6_ADDRSTRLEN];
        snprintf(ch, sizeof ch, "s%05x", sl);
        snprintf(in, sizeof in, "i%05x", sl);
        inet_ntop(AF_INET, s->addr4, a4, sizeof a4);
        inet_ntop(AF_INET6, s->addr6, a6, sizeof a6);
        _cleanup_(buf_freep) struct buf t = BUF_INIT(NFT_CMD_MAX);
        int r = buf_printf(&t,
                           "add chain inet " NFT_TABLE " %s\n"
                           "add chain inet " NFT_TABLE " %s\n"
                           "flush chain inet " NFT_TABLE " %s\n"
                           "flush chain inet " NFT_TABLE " %s\n",
                           ch, in, ch, in);
        if (r >= 0)
                r = slot_sets(&t, sl);
        if (r >= 0)
                r = buf_printf(&t,
                               "flush set inet " NFT_TABLE " d4%05x\nflush set inet " NFT_TABLE " d6%05x\n"
                               "flush set inet " NFT_TABLE " p4%05x\nflush set inet " NFT_TABLE " p6%05x\n"
                               "flush set inet " NFT_TABLE " x4%05x\nflush set inet " NFT_TABLE " x6%05x\n"
                               /* elements are added whole: an "add" of one there already is a no-op */
                               "add element inet " NFT_TABLE " src4 { \"sp%05x\" . %s }\n"
                               "add element inet " NFT_TABLE " src6 { \"sp%05x\" . %s }\n"
                               "add element inet " NFT_TABLE " out_slots { \"sp%05x\" : jump %s }\n"
                               "add element inet " NFT_TABLE " in_slots { \"sp%05x\" : jump %s }\n",
                               sl, sl, sl, sl, sl, sl, sl, a4, sl, a6, sl, ch, sl, in);
        /* bandwidth, each direction: bytes over the rate are dropped (TCP slows down) */
        if (r >= 0 && p && p->bandwidth_bps) {
                uint64_t bytes = p->bandwidth_bps / 8, burst = MAX(bytes / 10, 65536u);
                r = buf_printf(&t,
                               "add rule inet " NFT_TABLE " %s limit rate over %llu bytes/second burst %llu bytes drop\n"
                               "add rule inet " NFT_TABLE " %s limit rate over %llu bytes/second burst %llu bytes drop\n",
                               ch, (unsigned long long)bytes, (unsigned long long)burst, in, (unsigned long long)bytes,
                               (unsigned long long)burst);
        }
        if (r >= 0)
                r = buf_printf(&t, "add rule inet " NFT_TABLE " %s accept\n", in);
        if (r >= 0 && (!p || !p->egress)) {
                r = add_reject_rules(&t, ch, "");
                if (r >= 0)
                        r = run_locked(n, buf_cstr(&t), NULL, err, errlen);
                return r;
        }
        if (r >= 0)
                r = buf_printf(&t,
                               "add rule inet " NFT_TABLE " %s ip daddr @x4%05x drop\n"
                               "add rule inet " NFT_TABLE " %s ip6 daddr @x6%05x drop\n",
                               ch, sl, ch, sl);
        for (size_t i = 0; r >= 0 && i < p->n_deny; i++) {
                const struct net_rule *x = &p->deny[i];
                if (x->kind != NET_RULE_CIDR)
                        continue; /* names: the resolver fills x4/x6 */
                char c[80], pt[64];
                cidr_text(c, sizeof c, x->family, x->addr, x->prefix);
                port_text(pt, sizeof pt, x->port);
                r = buf_printf(&t, "add rule inet " NFT_TABLE " %s %s daddr %s%s drop\n", ch, ipkw(x->family), c, pt);
        }
        if (r >= 0)
                r = buf_printf(&t, "add rule inet " NFT_TABLE " %s jump closed\n", ch);
        if (r >= 0 && p->n_allow == 0)
                r = buf_printf(&t, "add rule inet " NFT_TABLE " %s accept\n", ch);
        for (size_t i = 0; r >= 0 && i < p->n_allow; i++) {
                const struct net_rule *x = &p->allow[i];
                if (x->kind != NET_RULE_CIDR)
                        continue;
                char c[80], pt[64];
                cidr_text(c, sizeof c, x->family, x->addr, x->prefix);
                port_text(pt, sizeof pt, x->port);
                r = buf_printf(&t, "add rule inet " NFT_TABLE " %s %s daddr %s%s accept\n", ch, ipkw(x->family), c, pt);
        }
        if (r >= 0 && p->n_allow)
                r = buf_printf(&t,
                               "add rule inet " NFT_TABLE " %s ip daddr @d4%05x accept\n"
                               "add rule inet " NFT_TABLE " %s ip6 daddr @d6%05x accept\n"
                               "add rule inet " NFT_TABLE " %s meta l4proto { tcp, udp } ip daddr . th dport @p4%05x accept\n"
                               "add rule inet " NFT_TABLE " %s meta l4proto { tcp, udp } ip6 daddr . th dport @p6%05x accept\n",
                               ch, sl, ch, sl, ch, sl, ch, sl);
        if (r >= 0)
                r = add_reject_rules(&t, ch, "");
        if (r < 0)
                return r;
        return run_locked(n, buf_cstr(&t), NULL, err, errlen);
}

int nft_slot_delete(struct nft *n, unsigned slot, char *err, size_t errlen) {
        if (slot > NFT_SLOT_MAX)
                return -ERANGE;
        /* "add" first makes every part exist, so that the deletes cannot fail on a part
         * that a crash left out: the whole is one transaction either way. */
        _cleanup_(buf_freep) struct buf t = BUF_INIT(NFT_CMD_MAX);
        int r = buf_printf(&t,
                           "add chain inet " NFT_TABLE " s%05x\nadd chain inet " NFT_TABLE " i%05x\n"
                           "add element inet " NFT_TABLE " out_slots { \"sp%05x\" : jump s%05x }\n"
                           "add element inet " NFT_TABLE " in_slots { \"sp%05x\" : jump i%05x }\n",
                           slot, slot, slot, slot, slot, slot);
        if (r >= 0)
                r = slot_sets(&t, slot);
        if (r >= 0)
                r = buf_printf(&t,
                               "delete element inet " NFT_TABLE " out_slots { \"sp%05x\" }\n"
                               "delete element inet " NFT_TABLE " in_slots { \"sp%05x\" }\n"
                               "delete chain inet " NFT_TABLE " s%05x\ndelete chain inet " NFT_TABLE " i%05x\n"
                               "delete set inet " NFT_TABLE " d4%05x\ndelete set inet " NFT_TABLE " d6%05x\n"
                               "delete set inet " NFT_TABLE " p4%05x\ndelete set inet " NFT_TABLE " p6%05x\n"
                               "delete set inet " NFT_TABLE " x4%05x\ndelete set inet " NFT_TABLE " x6%05x\n",
                               slot, slot, slot, slot, slot, slot, slot, slot, slot, slot);
        if (r < 0)
                return r;
        r = run_locked(n, buf_cstr(&t), NULL, err, errlen);
        if (r < 0)
                return r;
        /* the anti-spoof elements: which address a crashed slot had is not known here */
        _cleanup_(buf_freep) struct buf d = BUF_INIT(NFT_CMD_MAX);
        char key[16];
        snprintf(key, sizeof key, "\"sp%05x\" . ", slot);
        for (int v = 4; v <= 6; v += 2) {
                _cleanup_free_ char *out = NULL;
                char cmd[64];
                snprintf(cmd, sizeof cmd, "list set inet " NFT_TABLE " src%d", v);
                if (run_locked(n, cmd, &out, NULL, 0) < 0)
                        continue;
                for (const char *q = out; r >= 0 && (q = strstr(q, key)); q += strlen(key)) {
                        const char *a = q + strlen(key);
                        size_t l = strspn(a, "0123456789abcdefABCDEF.:");
                        bool v6 = memchr(a, ':', l) != NULL;
                        r = buf_printf(&d, "delete element inet " NFT_TABLE " %s { %s%.*s }\n", v6 ? "src6" : "src4", key,
                                       (int)l, a);
                }
        }
        if (r >= 0 && d.len)
                r = run_locked(n, buf_cstr(&d), NULL, err, errlen);
        return r;
}

int nft_slot_learn(struct nft *n, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s,
                   bool deny, char *err, size_t errlen) {
        if (slot > NFT_SLOT_MAX || (family != AF_INET && family != AF_INET6))
                return -EINVAL;
        uint32_t ttl = MIN(MAX(ttl_s, NFT_LEARN_TTL_MIN), NFT_LEARN_TTL_MAX);
        char a[INET6_ADDRSTRLEN], el[96], set[16];
        inet_ntop(family, addr, a, sizeof a);
        char v = family == AF_INET ? '4' : '6';
        if (deny || !port) {
                snprintf(set, sizeof set, "%c%c%05x", deny ? 'x' : 'd', v, slot);
                snprintf(el, sizeof el, "%s", a);
        } else {
                snprintf(set, sizeof set, "p%c%05x", v, slot);
                snprintf(el, sizeof el, "%s . %u", a, port);
        }
        /* add (a no-op if there), delete, add: the element comes back with a fresh timeout,
         * in one transaction (this kernel does not refresh a timeout on a second add) */
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "add element inet " NFT_TABLE " %s { %s timeout %us }\n"
                 "delete element inet " NFT_TABLE " %s { %s }\n"
                 "add element inet " NFT_TABLE " %s { %s timeout %us }\n",
                 set, el, ttl, set, el, set, el, ttl);
        return run_locked(n, cmd, NULL, err, errlen);
}

int nft_slot_list(struct nft *n, unsigned **ret, size_t *n_ret, char *err, size_t errlen) {
        _cleanup_free_ char *out = NULL;
        int r = run_locked(n, "list table inet " NFT_TABLE, &out, err, errlen);
        if (r < 0)
                return r;
        unsigned *v = NULL;
        size_t cnt = 0, cap = 0;
        for (const char *q = out; (q = strstr(q, "chain ")); q += 6) {
                unsigned slot;
                char c, tail;
                if (sscanf(q + 6, "%c%5x%c", &c, &slot, &tail) != 3 || (c != 's' && c != 'i') || tail != ' ')
                        continue;
                bool seen = false;
                for (size_t i = 0; i < cnt; i++)
                        seen |= v[i] == slot;
                if (seen)
                        continue;
                if (cnt == cap) {
                        cap = cap ? cap * 2 : 16;
                        unsigned *nv = realloc(v, cap * sizeof *v);
                        if (!nv) {
                                free(v);
                                return -ENOMEM;
                        }
                        v = nv;
                }
                v[cnt++] = slot;
        }
        *ret = v;
        *n_ret = cnt;
        return 0;
}
