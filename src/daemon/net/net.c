/* The network room (net.h): the slot table, the making of a prepared namespace
 * (netlink.h) and its rules (nft.h), and the restart check. Slot i has the IPv4 /30
 * net4 + 4i (host end .1, sandbox .2) and the IPv6 /64 net6:i:: (host ::1, sandbox ::2). */
#include "daemon/net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/macros.h"
#include "daemon/session.h"
#include "daemon/spaced.h"
#include "daemon/net/netlink.h"
#include "daemon/net/nft.h"
#include "daemon/net/resolver.h"

#define NET_SLOTS_MAX 65536u

struct net_lease {
        unsigned slot;
        char sbx[64];
        char *dir;
        char *resolv;  /* dir/resolv.conf: the sandbox's /etc/resolv.conf */
        int netns_fd;
        uint8_t host4[4], sbx4[4], host6[16], sbx6[16];
};

struct net_room {
        struct net_cfg cfg;
        struct nft *nft;
        pthread_mutex_t mu;
        struct net_lease **slots;
        unsigned n_slots;
        unsigned next; /* where the search for a free slot starts */
        struct resolver *res; /* the sandboxes' DNS (resolver.h), on its own thread */
};

/* ---------------- flags ---------------- */

void net_cfg_init(struct net_cfg *c) {
        *c = (struct net_cfg){ .dns_port = NET_DNS_PORT_DEFAULT };
        (void)net_cfg_net4(c, NET_DEFAULT_NET4, NULL, 0);
        (void)net_cfg_net6(c, NET_DEFAULT_NET6, NULL, 0);
}

void net_cfg_clear(struct net_cfg *c) {
        free(c->op.open);
        c->op.open = NULL;
        c->op.n_open = 0;
}

/* "a.b.c.d/p" or "x::/p" with host bits zero. */
static int cidr_parse(const char *s, int *family, uint8_t addr[16], unsigned *prefix, char *err, size_t errlen) {
        char a[INET6_ADDRSTRLEN + 8];
        const char *slash = s ? strchr(s, '/') : NULL;
        if (!slash || (size_t)(slash - s) >= sizeof a) {
                snprintf(err ? err : (char[1]){ 0 }, err ? errlen : 1, "%s: not a CIDR (address/prefix)", s ? s : "");
                return -EINVAL;
        }
        memcpy(a, s, (size_t)(slash - s));
        a[slash - s] = '\0';
        memset(addr, 0, 16);
        *family = strchr(a, ':') ? AF_INET6 : AF_INET;
        unsigned max = *family == AF_INET ? 32 : 128;
        char *end;
        unsigned long p = strtoul(slash + 1, &end, 10);
        if (inet_pton(*family, a, addr) != 1 || !slash[1] || *end || p > max) {
                if (err)
                        snprintf(err, errlen, "%s: not a CIDR (address/prefix)", s);
                return -EINVAL;
        }
        for (unsigned bit = (unsigned)p; bit < max; bit++)
                if (addr[bit / 8] & (0x80 >> (bit % 8))) {
                        if (err)
                                snprintf(err, errlen, "%s: host bits are set", s);
                        return -EINVAL;
                }
        *prefix = (unsigned)p;
        return 0;
}

/* --sandbox-net4 / --sandbox-net6: a network of family between /minp and /maxp. */
static int sandbox_net(const char *cidr, int family, unsigned minp, unsigned maxp, uint8_t *net, unsigned *prefix,
                       char *err, size_t errlen) {
        int fam;
        uint8_t a[16];
        unsigned p;
        int r = cidr_parse(cidr, &fam, a, &p, err, errlen);
        if (r < 0)
                return r;
        if (fam != family || p < minp || p > maxp) {
                if (err)
                        snprintf(err, errlen, "%s: want an %s network of /%u to /%u", cidr,
                                 family == AF_INET ? "IPv4" : "IPv6", minp, maxp);
                return -EINVAL;
        }
        memcpy(net, a, family == AF_INET ? 4 : 16);
        *prefix = p;
        return 0;
}

int net_cfg_net4(struct net_cfg *c, const char *cidr, char *err, size_t errlen) {
        return sandbox_net(cidr, AF_INET, 8, 28, c->net4, &c->prefix4, err, errlen);
}

int net_cfg_net6(struct net_cfg *c, const char *cidr, char *err, size_t errlen) {
        return sandbox_net(cidr, AF_INET6, 16, 48, c->net6, &c->prefix6, err, errlen);
}

int net_cfg_open(struct net_cfg *c, const char *cidr, char *err, size_t errlen) {
        if (c->op.n_open >= NET_OPEN_MAX) {
                if (err)
                        snprintf(err, errlen, "at most %u --egress-open ranges", NET_OPEN_MAX);
                return -E2BIG;
        }
        struct net_rule x = { .kind = NET_RULE_CIDR };
        unsigned p;
        int r = cidr_parse(cidr, &x.family, x.addr, &p, err, errlen);
        if (r < 0)
                return r;
        x.prefix = (uint8_t)p;
        struct net_rule *v = realloc(c->op.open, (c->op.n_open + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        v[c->op.n_open++] = x;
        c->op.open = v;
        return 0;
}

int net_cfg_upstream(struct net_cfg *c, const char *s, char *err, size_t errlen) {
        if (c->n_upstream >= NET_UPSTREAMS_MAX) {
                if (err)
                        snprintf(err, errlen, "at most %u --dns-upstream servers", NET_UPSTREAMS_MAX);
                return -E2BIG;
        }
        struct net_upstream u = { .port = 53 };
        char a[INET6_ADDRSTRLEN + 8];
        const char *port = NULL;
        if (s[0] == '[') { /* [v6]:port */
                const char *close = strchr(s, ']');
                if (!close || (size_t)(close - s - 1) >= sizeof a)
                        goto bad;
                memcpy(a, s + 1, (size_t)(close - s - 1));
                a[close - s - 1] = '\0';
                if (close[1] == ':')
                        port = close + 2;
                else if (close[1])
                        goto bad;
        } else {
                const char *colon = strchr(s, ':');
                bool v6 = colon && strchr(colon + 1, ':');
                size_t l = v6 || !colon ? strlen(s) : (size_t)(colon - s);
                if (l >= sizeof a)
                        goto bad;
                memcpy(a, s, l);
                a[l] = '\0';
                if (!v6 && colon)
                        port = colon + 1;
        }
        u.family = strchr(a, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(u.family, a, u.addr) != 1)
                goto bad;
        if (port) {
                char *end;
                unsigned long p = strtoul(port, &end, 10);
                if (!*port || *end || p == 0 || p > 65535)
                        goto bad;
                u.port = (uint16_t)p;
        }
        c->upstream[c->n_upstream++] = u;
        return 0;
bad:
        if (err)
                snprintf(err, errlen, "%s: want IP or IP:PORT ([IPv6]:PORT)", s);
        return -EINVAL;
}

int net_cfg_dns_port(struct net_cfg *c, const char *s, char *err, size_t errlen) {
        char *end;
        unsigned long p = strtoul(s, &end, 10);
        if (!*s || *end || p == 0 || p > 65535 || p == 53) {
                if (err)
                        snprintf(err, errlen, "%s: want a port 1..65535 other than 53", s);
                return -EINVAL;
        }
        c->dns_port = (uint16_t)p;
        return 0;
}

/* ---------------- addresses of a slot ---------------- */

static void slot_addr4(const struct net_cfg *c, unsigned slot, unsigned host, uint8_t out[4]) {
        uint32_t base = ((uint32_t)c->net4[0] << 24) | ((uint32_t)c->net4[1] << 16) | ((uint32_t)c->net4[2] << 8) | c->net4[3];
        uint32_t v = base + 4 * slot + host;
        out[0] = (uint8_t)(v >> 24);
        out[1] = (uint8_t)(v >> 16);
        out[2] = (uint8_t)(v >> 8);
        out[3] = (uint8_t)v;
}

static void slot_addr6(const struct net_cfg *c, unsigned slot, unsigned host, uint8_t out[16]) {
        memcpy(out, c->net6, 16);
        out[6] = (uint8_t)(slot >> 8);
        out[7] = (uint8_t)slot;
        memset(out + 8, 0, 8);
        out[15] = (uint8_t)host;
}

static void lease_addrs(const struct net_cfg *c, struct net_lease *l) {
        slot_addr4(c, l->slot, 1, l->host4);
        slot_addr4(c, l->slot, 2, l->sbx4);
        slot_addr6(c, l->slot, 1, l->host6);
        slot_addr6(c, l->slot, 2, l->sbx6);
}

void net_lease_addr(const struct net_lease *l, int family, uint8_t *sandbox, uint8_t *host) {
        size_t n = family == AF_INET ? 4 : 16;
        if (sandbox)
                memcpy(sandbox, family == AF_INET ? l->sbx4 : l->sbx6, n);
        if (host)
                memcpy(host, family == AF_INET ? l->host4 : l->host6, n);
}

static void host_name(unsigned slot, char out[16]) { snprintf(out, 16, NET_HOST_PREFIX "%05x", slot); }

/* ---------------- the room ---------------- */

static int base_apply(struct net_room *r, char *err, size_t errlen) {
        size_t n_closed = 0;
        const struct net_rule *closed = net_closed_ranges(&n_closed);
        struct nft_base b = { .dns_port = r->cfg.dns_port, .prefix4 = r->cfg.prefix4, .prefix6 = r->cfg.prefix6,
                              .closed = closed, .n_closed = n_closed, .open = r->cfg.op.open,
                              .n_open = r->cfg.op.n_open };
        memcpy(b.net4, r->cfg.net4, 4);
        memcpy(b.net6, r->cfg.net6, 16);
        return nft_base_apply(r->nft, &b, err, errlen);
}

/* ---------------- the resolver ---------------- */

static void res_allow(void *ctx, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s) {
        int e = net_learn(ctx, slot, family, addr, port, ttl_s, false);
        if (e < 0 && e != -ENOENT)
                log_warn("network: slot %u: learning an answered address failed: %s", slot, strerror(-e));
}

static void res_deny(void *ctx, unsigned slot, int family, const uint8_t *addr, uint32_t ttl_s) {
        int e = net_learn(ctx, slot, family, addr, 0, ttl_s, true);
        if (e < 0 && e != -ENOENT)
                log_warn("network: slot %u: denying a denied name's address failed: %s", slot, strerror(-e));
}

static bool res_closed(void *ctx, int family, const uint8_t *addr) { return net_room_closed(ctx, family, addr); }

/* The nameservers of spaced's own /etc/resolv.conf, when no --dns-upstream was given. */
static size_t upstreams_from_resolv_conf(struct resolver_sockaddr *v, size_t max) {
        _cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
        char line[512];
        size_t n = 0;
        while (f && n < max && fgets(line, sizeof line, f)) {
                char a[INET6_ADDRSTRLEN + 1];
                if (sscanf(line, " nameserver %46s", a) != 1)
                        continue;
                struct resolver_sockaddr u = { .port = 53 };
                if (inet_pton(AF_INET, a, u.addr) == 1)
                        u.family = AF_INET;
                else if (inet_pton(AF_INET6, a, u.addr) == 1)
                        u.family = AF_INET6;
                else
                        continue;
                v[n++] = u;
        }
        return n;
}

static int resolver_start(struct net_room *r, char *err, size_t errlen) {
        struct resolver_opts o = {
                .hooks = { .ctx = r, .allow = res_allow, .deny = res_deny, .closed = res_closed },
                .n_listen = 2,
                .listen = { { .family = AF_INET, .port = r->cfg.dns_port },
                            { .family = AF_INET6, .port = r->cfg.dns_port } },
        };
        for (size_t i = 0; i < r->cfg.n_upstream && i < RESOLVER_UPSTREAM_MAX; i++) {
                o.upstream[i].family = r->cfg.upstream[i].family;
                memcpy(o.upstream[i].addr, r->cfg.upstream[i].addr, 16);
                o.upstream[i].port = r->cfg.upstream[i].port;
                o.n_upstream++;
        }
        if (!o.n_upstream)
                o.n_upstream = upstreams_from_resolv_conf(o.upstream, RESOLVER_UPSTREAM_MAX);
        if (!o.n_upstream) {
                snprintf(err, errlen, "no DNS upstream: give --dns-upstream (/etc/resolv.conf names no nameserver)");
                return -EINVAL;
        }
        int e = resolver_open(&o, &r->res);
        if (e < 0)
                snprintf(err, errlen, "the sandboxes' resolver on port %u: %s", r->cfg.dns_port, strerror(-e));
        return e;
}

/* The resolver's view of a lease: its two addresses follow policy p (NULL: egress off). */
static int lease_resolver_set(struct net_room *r, struct net_lease *l, const struct net_policy *p) {
        if (!r->res)
                return 0;
        static const struct net_policy off = { .egress = false };
        int e = resolver_set_client(r->res, AF_INET, l->sbx4, l->slot, p ? p : &off);
        return e < 0 ? e : resolver_set_client(r->res, AF_INET6, l->sbx6, l->slot, p ? p : &off);
}

int net_open(const struct net_cfg *cfg, struct net_room **ret, char *err, size_t errlen) {
        *ret = NULL;
        if (!cfg->egress)
                return 0;
        struct net_room *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->cfg = *cfg;
        r->cfg.op.open = NULL;
        r->cfg.op.n_open = 0;
        int e = 0;
        if (cfg->op.n_open) {
                r->cfg.op.open = malloc(cfg->op.n_open * sizeof *cfg->op.open);
                if (!r->cfg.op.open) {
                        free(r);
                        return -ENOMEM;
                }
                memcpy(r->cfg.op.open, cfg->op.open, cfg->op.n_open * sizeof *cfg->op.open);
                r->cfg.op.n_open = cfg->op.n_open;
        }
        r->cfg.op.egress_enabled = true;
        pthread_mutex_init(&r->mu, NULL);
        r->n_slots = MIN((1u << (32 - r->cfg.prefix4)) / 4, NET_SLOTS_MAX);
        r->slots = calloc(r->n_slots, sizeof *r->slots);
        if (!r->slots) {
                e = -ENOMEM;
                goto fail;
        }
        if ((e = nl_sysctl_write(-1, "net/ipv4/ip_forward", "1", err, errlen)) < 0 ||
            (e = nl_sysctl_write(-1, "net/ipv6/conf/all/forwarding", "1", err, errlen)) < 0)
                goto fail;
        if ((e = nft_new(&r->nft, err, errlen)) < 0 || (e = base_apply(r, err, errlen)) < 0 ||
            (e = resolver_start(r, err, errlen)) < 0)
                goto fail;
        *ret = r;
        return 0;
fail:
        net_close(r);
        return e;
}

struct net_room *net_close(struct net_room *r) {
        if (!r)
                return NULL;
        r->res = resolver_close(r->res);
        for (unsigned i = 0; r->slots && i < r->n_slots; i++)
                if (r->slots[i]) {
                        safe_close(r->slots[i]->netns_fd);
                        free(r->slots[i]->resolv);
                        free(r->slots[i]->dir);
                        free(r->slots[i]);
                }
        free(r->slots);
        nft_free(r->nft);
        net_cfg_clear(&r->cfg);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
}

const struct net_cfg *net_room_cfg(const struct net_room *r) { return &r->cfg; }

int net_lease_netns_fd(const struct net_lease *l) { return l->netns_fd; }
unsigned net_lease_slot(const struct net_lease *l) { return l->slot; }

/* ---------------- making a slot ---------------- */

/* Inside the new namespace, before its eth0 exists (a new link takes the defaults):
 * no router advertisements, no autoconfiguration, no DAD, no link-local address (the
 * sandbox sends from its own address only); low ports and ping for everyone. */
static const char *const ns_sysctls[][2] = {
        { "net/ipv6/conf/default/accept_ra", "0" },   { "net/ipv6/conf/all/accept_ra", "0" },
        { "net/ipv6/conf/default/autoconf", "0" },    { "net/ipv6/conf/all/autoconf", "0" },
        { "net/ipv6/conf/default/accept_dad", "0" },  { "net/ipv6/conf/all/accept_dad", "0" },
        { "net/ipv6/conf/default/router_solicitations", "0" },
        { "net/ipv6/conf/default/addr_gen_mode", "1" },
        { "net/ipv4/ip_unprivileged_port_start", "0" }, { "net/ipv4/ping_group_range", "0 2147483647" },
};

struct ns_setup {
        char *err;
        size_t errlen;
        struct nl *nl; /* out: a socket in the namespace */
};

static int ns_setup_fn(void *arg) {
        struct ns_setup *s = arg;
        for (size_t i = 0; i < ELEMENTSOF(ns_sysctls); i++) {
                int r = nl_sysctl_write(-1, ns_sysctls[i][0], ns_sysctls[i][1], s->err, s->errlen);
                if (r < 0)
                        return r;
        }
        return nl_open(-1, &s->nl, s->err, s->errlen);
}

static int lease_file_write(const char *dir, unsigned slot) {
        char p[4096], tmp[4096];
        snprintf(p, sizeof p, "%s/" NET_LEASE_FILE, dir);
        snprintf(tmp, sizeof tmp, "%s/." NET_LEASE_FILE ".tmp", dir);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        char b[32];
        int n = snprintf(b, sizeof b, "slot %u\n", slot);
        if (write(fd, b, (size_t)n) != n || fsync(fd) < 0)
                return -EIO;
        if (rename(tmp, p) < 0)
                return -errno;
        return 0;
}

static int lease_file_read(const char *dir, unsigned *slot) {
        char p[4096], b[32] = "";
        snprintf(p, sizeof p, "%s/" NET_LEASE_FILE, dir);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = read(fd, b, sizeof b - 1);
        if (n <= 0)
                return -EIO;
        b[n] = '\0';
        return sscanf(b, "slot %u", slot) == 1 ? 0 : -EINVAL;
}

/* The sandbox's resolver is its host end (any port 53 there goes to spaced's). */
static int resolv_write(struct net_lease *l) {
        char a4[INET_ADDRSTRLEN], a6[INET6_ADDRSTRLEN], tmp[4096];
        inet_ntop(AF_INET, l->host4, a4, sizeof a4);
        inet_ntop(AF_INET6, l->host6, a6, sizeof a6);
        if (asprintf(&l->resolv, "%s/resolv.conf", l->dir) < 0) {
                l->resolv = NULL;
                return -ENOMEM;
        }
        snprintf(tmp, sizeof tmp, "%s/.resolv.conf.tmp", l->dir);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (dprintf(fd, "# spaced's resolver (docs/network.md)\nnameserver %s\nnameserver %s\noptions edns0\n", a4, a6) < 0)
                return -EIO;
        return rename(tmp, l->resolv) < 0 ? -errno : 0;
}

const char *net_lease_resolv_conf(const struct net_lease *l) { return l->resolv; }

static int slot_take(struct net_room *r, struct net_lease *l) {
        pthread_mutex_lock(&r->mu);
        int ret = -ENOSPC;
        for (unsigned k = 0; k < r->n_slots; k++) {
                unsigned i = (r->next + k) % r->n_slots;
                if (!r->slots[i]) {
                        r->slots[i] = l;
                        l->slot = i;
                        r->next = (i + 1) % r->n_slots;
                        ret = 0;
                        break;
                }
        }
        pthread_mutex_unlock(&r->mu);
        return ret;
}

static void slot_put(struct net_room *r, struct net_lease *l) {
        pthread_mutex_lock(&r->mu);
        if (l->slot < r->n_slots && r->slots[l->slot] == l)
                r->slots[l->slot] = NULL;
        pthread_mutex_unlock(&r->mu);
}

static struct nft_slot nft_slot_of(const struct net_room *r, unsigned slot) {
        struct nft_slot s = { .slot = slot };
        slot_addr4(&r->cfg, slot, 2, s.addr4);
        slot_addr6(&r->cfg, slot, 2, s.addr6);
        return s;
}

int net_lease_new(struct net_room *r, const char *sbx, const char *dir, struct net_lease **ret, char *err,
                  size_t errlen) {
        struct net_lease *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->netns_fd = -EBADF;
        snprintf(l->sbx, sizeof l->sbx, "%s", sbx);
        if (!(l->dir = strdup(dir))) {
                free(l);
                return -ENOMEM;
        }
        int e = slot_take(r, l);
        if (e < 0) {
                snprintf(err, errlen, "no free network slot (all %u are taken)", r->n_slots);
                free(l->dir);
                free(l);
                return e;
        }
        char hn[16];
        host_name(l->slot, hn);
        struct nl *host = NULL;
        struct ns_setup ss = { .err = err, .errlen = errlen };
        lease_addrs(&r->cfg, l);
        const uint8_t *h4 = l->host4, *s4 = l->sbx4, *h6 = l->host6, *s6 = l->sbx6;
        /* closed before the link can carry anything */
        struct nft_slot ns = nft_slot_of(r, l->slot);
        if ((e = nft_slot_apply(r->nft, &ns, NULL, err, errlen)) < 0 ||
            (e = nl_netns_new(&l->netns_fd, err, errlen)) < 0 ||
            (e = nl_in_netns(l->netns_fd, ns_setup_fn, &ss, err, errlen)) < 0 ||
            (e = nl_open(-1, &host, err, errlen)) < 0)
                goto fail;
        e = nl_veth_add(host, hn, NET_SANDBOX_IF, l->netns_fd, err, errlen);
        if (e == -EEXIST) { /* left by a crash before the restart check removed it */
                (void)nl_link_del(host, hn, NULL, 0);
                e = nl_veth_add(host, hn, NET_SANDBOX_IF, l->netns_fd, err, errlen);
        }
        char conf[64];
        snprintf(conf, sizeof conf, "net/ipv6/conf/%s/accept_ra", hn);
        if (e < 0 || (e = nl_sysctl_write(-1, conf, "0", err, errlen)) < 0 ||
            (e = nl_addr_add(host, hn, AF_INET, h4, 30, err, errlen)) < 0 ||
            (e = nl_addr_add(host, hn, AF_INET6, h6, 64, err, errlen)) < 0 || (e = nl_link_up(host, hn, err, errlen)) < 0 ||
            (e = nl_link_up(ss.nl, "lo", err, errlen)) < 0 ||
            (e = nl_addr_add(ss.nl, NET_SANDBOX_IF, AF_INET, s4, 30, err, errlen)) < 0 ||
            (e = nl_addr_add(ss.nl, NET_SANDBOX_IF, AF_INET6, s6, 64, err, errlen)) < 0 ||
            (e = nl_link_up(ss.nl, NET_SANDBOX_IF, err, errlen)) < 0 ||
            (e = nl_route_default(ss.nl, AF_INET, h4, NET_SANDBOX_IF, err, errlen)) < 0 ||
            (e = nl_route_default(ss.nl, AF_INET6, h6, NET_SANDBOX_IF, err, errlen)) < 0)
                goto fail;
        if ((e = resolv_write(l)) < 0) {
                snprintf(err, errlen, "write %s/resolv.conf: %s", dir, strerror(-e));
                goto fail;
        }
        if ((e = lease_file_write(dir, l->slot)) < 0) {
                snprintf(err, errlen, "write %s/" NET_LEASE_FILE ": %s", dir, strerror(-e));
                goto fail;
        }
        nl_close(ss.nl);
        nl_close(host);
        *ret = l;
        return 0;
fail:
        if (host)
                (void)nl_link_del(host, hn, NULL, 0);
        nl_close(ss.nl);
        nl_close(host);
        (void)nft_slot_delete(r->nft, l->slot, NULL, 0);
        slot_put(r, l);
        safe_close(l->netns_fd);
        free(l->resolv);
        free(l->dir);
        free(l);
        return e;
}

bool net_lease_recorded(const char *dir) {
        unsigned slot;
        return lease_file_read(dir, &slot) != -ENOENT;
}

int net_lease_adopt(struct net_room *r, const char *sbx, const char *dir, pid_t init_pid, struct net_lease **ret,
                    char *err, size_t errlen) {
        unsigned slot;
        int e = lease_file_read(dir, &slot);
        if (e < 0)
                return e == -ENOENT ? e : (snprintf(err, errlen, "read %s/" NET_LEASE_FILE ": %s", dir, strerror(-e)), e);
        if (slot >= r->n_slots) {
                snprintf(err, errlen, "%s/" NET_LEASE_FILE ": slot %u is outside the sandbox network", dir, slot);
                return -ERANGE;
        }
        struct net_lease *l = calloc(1, sizeof *l);
        if (!l || !(l->dir = strdup(dir))) {
                free(l);
                return -ENOMEM;
        }
        l->slot = slot;
        lease_addrs(&r->cfg, l);
        snprintf(l->sbx, sizeof l->sbx, "%s", sbx);
        char p[64];
        snprintf(p, sizeof p, "/proc/%d/ns/net", (int)init_pid);
        l->netns_fd = open(p, O_RDONLY | O_CLOEXEC);
        if (l->netns_fd < 0) {
                e = -errno;
                snprintf(err, errlen, "open %s: %s", p, strerror(-e));
                free(l->dir);
                free(l);
                return e;
        }
        pthread_mutex_lock(&r->mu);
        if (r->slots[slot]) {
                pthread_mutex_unlock(&r->mu);
                snprintf(err, errlen, "slot %u is held by %s already", slot, r->slots[slot]->sbx);
                safe_close(l->netns_fd);
                free(l->dir);
                free(l);
                return -EEXIST;
        }
        r->slots[slot] = l;
        pthread_mutex_unlock(&r->mu);
        *ret = l;
        return 0;
}

struct net_lease *net_lease_find(struct net_room *r, const char *sbx) {
        struct net_lease *found = NULL;
        pthread_mutex_lock(&r->mu);
        for (unsigned i = 0; i < r->n_slots && !found; i++)
                if (r->slots[i] && strcmp(r->slots[i]->sbx, sbx) == 0)
                        found = r->slots[i];
        pthread_mutex_unlock(&r->mu);
        return found;
}

int net_lease_apply(struct net_room *r, struct net_lease *l, const struct net_policy *p, char *err, size_t errlen) {
        struct nft_slot s = nft_slot_of(r, l->slot);
        /* a policy without a bandwidth of its own gets the operator's maximum */
        struct net_policy eff;
        if (p && !p->bandwidth_bps && r->cfg.op.max_bandwidth_bps) {
                eff = *p;
                eff.bandwidth_bps = r->cfg.op.max_bandwidth_bps;
                p = &eff;
        }
        int e = nft_slot_apply(r->nft, &s, p, err, errlen);
        if (e >= 0 && (e = lease_resolver_set(r, l, p)) < 0)
                snprintf(err, errlen, "the resolver's client table: %s", strerror(-e));
        return e;
}

void net_lease_release(struct net_room *r, struct net_lease *l) {
        if (!l)
                return;
        char hn[16], p[4096];
        host_name(l->slot, hn);
        if (r->res) {
                resolver_drop_client(r->res, AF_INET, l->sbx4);
                resolver_drop_client(r->res, AF_INET6, l->sbx6);
        }
        struct nl *host = NULL;
        if (nl_open(-1, &host, NULL, 0) == 0) {
                (void)nl_link_del(host, hn, NULL, 0);
                nl_close(host);
        }
        (void)nft_slot_delete(r->nft, l->slot, NULL, 0);
        snprintf(p, sizeof p, "%s/" NET_LEASE_FILE, l->dir);
        (void)unlink(p);
        slot_put(r, l);
        safe_close(l->netns_fd);
        free(l->resolv);
        free(l->dir);
        free(l);
}

void net_release_sbx(struct net_room *r, const char *sbx, const char *dir) {
        if (!r)
                return;
        struct net_lease *l = net_lease_find(r, sbx);
        if (l) {
                net_lease_release(r, l);
                return;
        }
        unsigned slot;
        if (!dir || lease_file_read(dir, &slot) < 0 || slot >= r->n_slots)
                return;
        pthread_mutex_lock(&r->mu);
        bool held = r->slots[slot] != NULL;
        pthread_mutex_unlock(&r->mu);
        char p[4096];
        snprintf(p, sizeof p, "%s/" NET_LEASE_FILE, dir);
        (void)unlink(p);
        if (held) /* someone else's now */
                return;
        char hn[16];
        host_name(slot, hn);
        struct nl *host = NULL;
        if (nl_open(-1, &host, NULL, 0) == 0) {
                (void)nl_link_del(host, hn, NULL, 0);
                nl_close(host);
        }
        (void)nft_slot_delete(r->nft, slot, NULL, 0);
}

static bool slot_held(struct net_room *r, unsigned slot) {
        pthread_mutex_lock(&r->mu);
        bool held = slot < r->n_slots && r->slots[slot];
        pthread_mutex_unlock(&r->mu);
        return held;
}

struct orphan_links {
        struct net_room *r;
        struct nl *host;
};

static int orphan_link_fn(const char *name, void *arg) {
        struct orphan_links *o = arg;
        unsigned slot;
        char tail;
        if (strlen(name) != 7 || sscanf(name, NET_HOST_PREFIX "%5x%c", &slot, &tail) != 1)
                return 0;
        if (!slot_held(o->r, slot))
                (void)nl_link_del(o->host, name, NULL, 0);
        return 0;
}

int net_orphans_remove(struct net_room *r, char *err, size_t errlen) {
        unsigned *v = NULL;
        size_t n = 0;
        int e = nft_slot_list(r->nft, &v, &n, err, errlen);
        if (e < 0)
                return e;
        for (size_t i = 0; i < n; i++)
                if (!slot_held(r, v[i]))
                        (void)nft_slot_delete(r->nft, v[i], NULL, 0);
        free(v);
        struct orphan_links o = { .r = r };
        if ((e = nl_open(-1, &o.host, err, errlen)) < 0)
                return e;
        e = nl_link_each(o.host, NET_HOST_PREFIX, orphan_link_fn, &o, err, errlen);
        nl_close(o.host);
        return e;
}

int net_learn(struct net_room *r, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl_s,
              bool deny) {
        if (!slot_held(r, slot))
                return -ENOENT;
        return nft_slot_learn(r->nft, slot, family, addr, port, ttl_s, deny, NULL, 0);
}

static bool in_prefix(const uint8_t *net, unsigned prefix, const uint8_t *addr) {
        for (unsigned bit = 0; bit < prefix; bit++)
                if ((net[bit / 8] ^ addr[bit / 8]) & (0x80 >> (bit % 8)))
                        return false;
        return true;
}

bool net_room_closed(struct net_room *r, int family, const uint8_t *addr) {
        if (family != AF_INET && family != AF_INET6)
                return true;
        if (net_addr_closed(&r->cfg.op, family, addr))
                return true;
        if (family == AF_INET ? in_prefix(r->cfg.net4, r->cfg.prefix4, addr) : in_prefix(r->cfg.net6, r->cfg.prefix6, addr))
                return true;
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) < 0)
                return true; /* unknown: closed stays closed */
        bool host = false;
        for (struct ifaddrs *i = ifs; i && !host; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != family)
                        continue;
                const void *a = family == AF_INET ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                                  : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
                host = memcmp(a, addr, family == AF_INET ? 4 : 16) == 0;
        }
        freeifaddrs(ifs);
        return host;
}

/* ---------------- the daemon's hook ---------------- */

int net_session_apply(struct daemon *d, struct session *s) {
        if (!d->net || !s->sbx_id[0])
                return 0;
        struct net_lease *l = net_lease_find(d->net, s->sbx_id);
        if (!l)
                return 0; /* made with its own loopback-only namespace */
        char err[NET_ERR_MAX];
        int r = net_lease_apply(d->net, l, &s->net, err, sizeof err);
        if (r < 0)
                log_warn("%s: network policy of sandbox %s: %s", s->id, s->sbx_id, err);
        return r;
}
