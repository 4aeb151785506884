/* spaced's resolver for sandboxes (resolver.h): one thread, one epoll set holding the
 * UDP and TCP listeners, the sandboxes' TCP connections and one socket per forwarded
 * query. The client table is shared with the room's thread under one mutex; the hooks
 * are always called with it released. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/macros.h"
#include "daemon/net/dns.h"
#include "daemon/net/resolver.h"

#define RESOLVER_BUCKETS 4096
#define RESOLVER_UDP_BATCH 64          /* datagrams read per wakeup of one listener */
#define RESOLVER_PREFETCH_TICK_MS 1000 /* how often due denied names are looked for */

enum tag { TAG_WAKE, TAG_UDP, TAG_TCP_LISTEN, TAG_CONN, TAG_UPSTREAM };
static uint64_t mktag(enum tag t, size_t i) { return (uint64_t)t << 32 | i; }

struct prefetch {
        char *name;       /* a denied exact name of the policy */
        uint64_t due_ms;  /* when to resolve it (again) */
        uint64_t last_ms; /* when it was last resolved */
        unsigned busy;    /* its queries in flight (A and AAAA) */
};

struct client {
        struct client *next; /* hash chain */
        int family;
        uint8_t addr[16];
        unsigned slot;
        uint64_t gen; /* changes with every resolver_set_client: stale answers are told apart */
        struct net_policy policy;
        uint64_t tokens_milli; /* token bucket, in thousandths of a query */
        uint64_t refill_ms;
        unsigned inflight;
        struct prefetch *pf;
        size_t n_pf;
};

struct conn {
        int fd; /* -EBADF: free */
        int family;
        uint8_t addr[16];
        uint8_t *in; /* 2 + DNS_MSG_MAX */
        size_t in_len;
        uint8_t *out;
        size_t out_len, out_off;
        uint64_t idle_ms; /* closes then */
        bool busy;        /* a query of it is in flight */
        uint32_t events;  /* as registered in epoll */
};

enum origin { ORIGIN_UDP, ORIGIN_TCP, ORIGIN_PREFETCH };
enum upstate { UP_UDP, UP_TCP_CONNECT, UP_TCP_WRITE, UP_TCP_READ };

struct query {
        bool used;
        enum origin origin;
        /* the client it is for */
        int family;
        uint8_t addr[16];
        uint64_t gen;
        unsigned slot;
        uint16_t port; /* the allow rule's */
        /* UDP: where the answer goes and from which local address */
        size_t listen_idx;
        struct sockaddr_storage peer;
        socklen_t peer_len;
        uint8_t local[16];
        int ifindex;
        /* TCP: the connection (or SIZE_MAX once it closed) */
        size_t conn_idx;
        /* prefetch: the denied name */
        char name[DNS_NAME_MAX + 1];
        struct dns_query q;
        /* upstream */
        int fd;
        enum upstate state;
        uint16_t up_id;
        size_t upstream_idx;
        uint64_t deadline_ms, retry_ms;
        uint8_t sendbuf[2 + 512];
        size_t send_len, send_off;
        uint8_t *tcpbuf; /* 2 + DNS_MSG_MAX while reading over TCP */
        size_t tcp_len;
};

struct resolver {
        struct resolver_opts o;
        int epfd, wakefd;
        int udp[RESOLVER_LISTEN_MAX], tcp[RESOLVER_LISTEN_MAX];
        uint16_t port;
        pthread_t thread;
        bool thread_started;

        pthread_mutex_t lock; /* the client table and its contents */
        struct client *buckets[RESOLVER_BUCKETS];
        size_t n_clients;
        uint64_t next_gen;
        bool prefetch_kick; /* a new client: look for due names now */
        bool stop;          /* resolver_close: the thread returns */

        /* the thread's own */
        struct query queries[RESOLVER_INFLIGHT_MAX];
        size_t n_queries, n_prefetch;
        struct conn conns[RESOLVER_TCP_CLIENTS_MAX];
        uint64_t next_prefetch_ms;
        uint8_t buf[DNS_MSG_MAX]; /* a received message */
        uint8_t ans[DNS_MSG_MAX]; /* an answer being built */

        struct resolver_stats stats; /* atomics */
};

#define STAT_INC(r, f) __atomic_add_fetch(&(r)->stats.f, 1, __ATOMIC_RELAXED)

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t addr_len(int family) { return family == AF_INET ? 4 : 16; }

static size_t bucket_of(int family, const uint8_t *addr) {
        uint32_t h = 2166136261u ^ (uint32_t)family;
        for (size_t i = 0; i < addr_len(family); i++)
                h = (h ^ addr[i]) * 16777619u;
        return h % RESOLVER_BUCKETS;
}

/* Under the lock. */
static struct client *client_find(struct resolver *r, int family, const uint8_t *addr) {
        if (family != AF_INET && family != AF_INET6)
                return NULL;
        for (struct client *c = r->buckets[bucket_of(family, addr)]; c; c = c->next)
                if (c->family == family && memcmp(c->addr, addr, addr_len(family)) == 0)
                        return c;
        return NULL;
}

static void client_free(struct client *c) {
        if (!c)
                return;
        net_policy_clear(&c->policy);
        for (size_t i = 0; i < c->n_pf; i++)
                free(c->pf[i].name);
        free(c->pf);
        free(c);
}

static void wake(struct resolver *r) {
        uint64_t one = 1;
        (void)!write(r->wakefd, &one, sizeof one);
}

int resolver_set_client(struct resolver *r, int family, const uint8_t *addr, unsigned slot, const struct net_policy *p) {
        if (family != AF_INET && family != AF_INET6)
                return -EINVAL;
        struct client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->family = family;
        memcpy(c->addr, addr, addr_len(family));
        c->slot = slot;
        c->tokens_milli = (uint64_t)RESOLVER_RATE_BURST * 1000u;
        c->refill_ms = now_ms();
        int k = net_policy_copy(&c->policy, p);
        if (k < 0) {
                free(c);
                return k;
        }
        for (size_t i = 0; i < p->n_deny; i++)
                if (p->deny[i].kind == NET_RULE_NAME && p->deny[i].name)
                        c->n_pf++;
        if (c->n_pf) {
                c->pf = calloc(c->n_pf, sizeof *c->pf);
                if (!c->pf) {
                        c->n_pf = 0;
                        client_free(c);
                        return -ENOMEM;
                }
                size_t j = 0;
                for (size_t i = 0; i < p->n_deny; i++)
                        if (p->deny[i].kind == NET_RULE_NAME && p->deny[i].name) {
                                c->pf[j].name = strdup(p->deny[i].name);
                                if (!c->pf[j].name) {
                                        client_free(c);
                                        return -ENOMEM;
                                }
                                j++;
                        }
        }
        pthread_mutex_lock(&r->lock);
        size_t b = bucket_of(family, addr);
        struct client **pp = &r->buckets[b], *old = NULL;
        for (; *pp; pp = &(*pp)->next)
                if ((*pp)->family == family && memcmp((*pp)->addr, addr, addr_len(family)) == 0) {
                        old = *pp;
                        *pp = old->next;
                        r->n_clients--;
                        break;
                }
        if (r->n_clients >= RESOLVER_CLIENTS_MAX) {
                pthread_mutex_unlock(&r->lock);
                client_free(c);
                client_free(old);
                return -E2BIG;
        }
        if (old) { /* the rate limit is the sandbox's, not the policy's: it carries over */
                c->tokens_milli = old->tokens_milli;
                c->refill_ms = old->refill_ms;
        }
        c->gen = ++r->next_gen;
        c->next = r->buckets[b];
        r->buckets[b] = c;
        r->n_clients++;
        r->prefetch_kick |= c->n_pf > 0;
        pthread_mutex_unlock(&r->lock);
        client_free(old);
        wake(r);
        return 0;
}

void resolver_drop_client(struct resolver *r, int family, const uint8_t *addr) {
        if (family != AF_INET && family != AF_INET6)
                return;
        struct client *gone = NULL;
        pthread_mutex_lock(&r->lock);
        for (struct client **pp = &r->buckets[bucket_of(family, addr)]; *pp; pp = &(*pp)->next)
                if ((*pp)->family == family && memcmp((*pp)->addr, addr, addr_len(family)) == 0) {
                        gone = *pp;
                        *pp = gone->next;
                        r->n_clients--;
                        break;
                }
        pthread_mutex_unlock(&r->lock);
        client_free(gone);
}

void resolver_stats(struct resolver *r, struct resolver_stats *ret) {
        ret->queries = __atomic_load_n(&r->stats.queries, __ATOMIC_RELAXED);
        ret->answered = __atomic_load_n(&r->stats.answered, __ATOMIC_RELAXED);
        ret->refused = __atomic_load_n(&r->stats.refused, __ATOMIC_RELAXED);
        ret->dropped = __atomic_load_n(&r->stats.dropped, __ATOMIC_RELAXED);
        ret->rate_limited = __atomic_load_n(&r->stats.rate_limited, __ATOMIC_RELAXED);
        ret->upstream_failures = __atomic_load_n(&r->stats.upstream_failures, __ATOMIC_RELAXED);
}

uint16_t resolver_port(const struct resolver *r) { return r->port; }

/* ---- addresses ---- */

static socklen_t to_sockaddr(int family, const uint8_t *addr, uint16_t port, struct sockaddr_storage *ss) {
        memset(ss, 0, sizeof *ss);
        if (family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *)ss;
                s->sin_family = AF_INET;
                s->sin_port = htons(port);
                memcpy(&s->sin_addr, addr, 4);
                return sizeof *s;
        }
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(port);
        memcpy(&s->sin6_addr, addr, 16);
        return sizeof *s;
}

static int from_sockaddr(const struct sockaddr_storage *ss, int *family, uint8_t addr[16]) {
        if (ss->ss_family == AF_INET) {
                *family = AF_INET;
                memcpy(addr, &((const struct sockaddr_in *)ss)->sin_addr, 4);
                return 0;
        }
        if (ss->ss_family == AF_INET6) {
                *family = AF_INET6;
                memcpy(addr, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
                return 0;
        }
        return -EAFNOSUPPORT;
}

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned prefix) {
        unsigned bytes = prefix / 8, bits = prefix % 8;
        if (memcmp(a, net, bytes) != 0)
                return false;
        if (!bits)
                return true;
        uint8_t mask = (uint8_t)(0xff << (8 - bits));
        return (a[bytes] & mask) == (net[bytes] & mask);
}

/* A deny CIDR rule of p covers addr on every port (a rule with a port leaves the address
 * to the firewall, which drops that port). IPv4-mapped IPv6 counts as its IPv4. */
static bool denied_addr(const struct net_policy *p, int family, const uint8_t *addr) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        for (size_t i = 0; i < p->n_deny; i++) {
                const struct net_rule *d = &p->deny[i];
                if (d->kind != NET_RULE_CIDR || d->port)
                        continue;
                if (d->family == family && prefix_match(addr, d->addr, d->prefix))
                        return true;
                if (d->family == AF_INET && family == AF_INET6 && memcmp(addr, mapped, 12) == 0 &&
                    prefix_match(addr + 12, d->addr, d->prefix))
                        return true;
        }
        return false;
}

static bool deny_name_exact(const struct net_policy *p, const char *name) {
        for (size_t i = 0; i < p->n_deny; i++)
                if (p->deny[i].kind == NET_RULE_NAME && p->deny[i].name && strcmp(p->deny[i].name, name) == 0)
                        return true;
        return false;
}

static uint32_t clamp_u32(uint32_t v, uint32_t lo, uint32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- epoll ---- */

static int ep_add(struct resolver *r, int fd, uint32_t ev, uint64_t tag) {
        struct epoll_event e = { .events = ev, .data.u64 = tag };
        return epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}
static void ep_mod(struct resolver *r, int fd, uint32_t ev, uint64_t tag) {
        struct epoll_event e = { .events = ev, .data.u64 = tag };
        (void)epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &e);
}

/* ---- answering clients ---- */

static void conn_close(struct resolver *r, size_t i);
static void conn_update(struct resolver *r, size_t i);
static void conn_process(struct resolver *r, size_t i, uint64_t now);

static void udp_reply(struct resolver *r, const struct query *qr, const uint8_t *msg, size_t len) {
        union {
                char buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
                struct cmsghdr align;
        } cm;
        memset(&cm, 0, sizeof cm);
        struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
        struct msghdr mh = { .msg_name = (void *)&qr->peer, .msg_namelen = qr->peer_len, .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cm.buf };
        struct cmsghdr *c = (struct cmsghdr *)cm.buf;
        /* answer from the address the query was sent to: a wildcard listener would let the
         * kernel pick another, and the sandbox's resolver would drop the answer */
        if (qr->family == AF_INET) {
                struct in_pktinfo pi = { .ipi_ifindex = 0 };
                memcpy(&pi.ipi_spec_dst, qr->local, 4);
                c->cmsg_level = IPPROTO_IP;
                c->cmsg_type = IP_PKTINFO;
                c->cmsg_len = CMSG_LEN(sizeof pi);
                memcpy(CMSG_DATA(c), &pi, sizeof pi);
                mh.msg_controllen = CMSG_SPACE(sizeof pi);
        } else {
                struct in6_pktinfo pi = { .ipi6_ifindex = (unsigned)qr->ifindex };
                memcpy(&pi.ipi6_addr, qr->local, 16);
                c->cmsg_level = IPPROTO_IPV6;
                c->cmsg_type = IPV6_PKTINFO;
                c->cmsg_len = CMSG_LEN(sizeof pi);
                memcpy(CMSG_DATA(c), &pi, sizeof pi);
                mh.msg_controllen = CMSG_SPACE(sizeof pi);
        }
        /* counted first: the client may read the counters as soon as the answer is there */
        STAT_INC(r, answered);
        if (sendmsg(r->udp[qr->listen_idx], &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
                __atomic_sub_fetch(&r->stats.answered, 1, __ATOMIC_RELAXED);
                STAT_INC(r, dropped);
        }
}

static void tcp_reply(struct resolver *r, size_t ci, const uint8_t *msg, size_t len) {
        struct conn *c = &r->conns[ci];
        uint8_t *o = malloc(len + 2);
        if (!o) {
                conn_close(r, ci);
                return;
        }
        o[0] = (uint8_t)(len >> 8);
        o[1] = (uint8_t)len;
        memcpy(o + 2, msg, len);
        free(c->out);
        c->out = o;
        c->out_len = len + 2;
        c->out_off = 0;
        STAT_INC(r, answered);
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
                conn_close(r, ci);
                return;
        }
        if (n > 0)
                c->out_off = (size_t)n;
        if (c->out_off == c->out_len) {
                free(c->out);
                c->out = NULL;
                c->out_len = c->out_off = 0;
        }
        conn_update(r, ci);
}

static void reply(struct resolver *r, const struct query *qr, const uint8_t *msg, size_t len) {
        if (qr->origin == ORIGIN_UDP)
                udp_reply(r, qr, msg, len);
        else if (qr->origin == ORIGIN_TCP && qr->conn_idx != SIZE_MAX)
                tcp_reply(r, qr->conn_idx, msg, len);
}

static void reply_code(struct resolver *r, const struct query *qr, unsigned rcode) {
        size_t len;
        if (dns_build_reply(&qr->q, rcode, r->ans, sizeof r->ans, &len) == 0)
                reply(r, qr, r->ans, len);
}

/* ---- forwarding ---- */

static void query_free(struct resolver *r, struct query *qr) {
        if (!qr->used)
                return;
        if (qr->fd >= 0) {
                epoll_ctl(r->epfd, EPOLL_CTL_DEL, qr->fd, NULL);
                qr->fd = safe_close(qr->fd);
        }
        free(qr->tcpbuf);
        qr->tcpbuf = NULL;
        if (qr->origin == ORIGIN_TCP && qr->conn_idx != SIZE_MAX) {
                r->conns[qr->conn_idx].busy = false;
                conn_update(r, qr->conn_idx);
        }
        if (qr->origin == ORIGIN_PREFETCH)
                r->n_prefetch--;
        else {
                pthread_mutex_lock(&r->lock);
                struct client *c = client_find(r, qr->family, qr->addr);
                if (c && c->gen == qr->gen && c->inflight)
                        c->inflight--;
                pthread_mutex_unlock(&r->lock);
        }
        qr->used = false;
        r->n_queries--;
}

static struct query *query_new(struct resolver *r) {
        if (r->n_queries >= RESOLVER_INFLIGHT_MAX)
                return NULL;
        for (size_t i = 0; i < RESOLVER_INFLIGHT_MAX; i++)
                if (!r->queries[i].used) {
                        struct query *qr = &r->queries[i];
                        memset(qr, 0, sizeof *qr);
                        qr->used = true;
                        qr->fd = -EBADF;
                        qr->conn_idx = SIZE_MAX;
                        r->n_queries++;
                        return qr;
                }
        return NULL;
}

static size_t query_idx(struct resolver *r, const struct query *qr) { return (size_t)(qr - r->queries); }

/* One try over UDP at the current upstream; -errno if no socket could be made. */
/* Closes the query's socket to its last try, if any, and makes one of type connected (or
 * connecting, for TCP) to its current upstream: the fd, or -errno. */
static int upstream_socket(struct resolver *r, struct query *qr, int type) {
        if (qr->fd >= 0) {
                epoll_ctl(r->epfd, EPOLL_CTL_DEL, qr->fd, NULL);
                qr->fd = safe_close(qr->fd);
        }
        const struct resolver_sockaddr *u = &r->o.upstream[qr->upstream_idx];
        struct sockaddr_storage ss;
        socklen_t sl = to_sockaddr(u->family, u->addr, u->port ? u->port : 53, &ss);
        _cleanup_close_ int fd = socket(u->family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && !(type == SOCK_STREAM && errno == EINPROGRESS))
                return -errno;
        return TAKE_FD(fd);
}

static int upstream_try_udp(struct resolver *r, struct query *qr, uint64_t now) {
        /* connected: the kernel drops datagrams from anyone but the upstream */
        _cleanup_close_ int fd = upstream_socket(r, qr, SOCK_DGRAM);
        if (fd < 0)
                return fd;
        if (send(fd, qr->sendbuf + 2, qr->send_len, MSG_NOSIGNAL) < 0)
                return -errno;
        int k = ep_add(r, fd, EPOLLIN, mktag(TAG_UPSTREAM, query_idx(r, qr)));
        if (k < 0)
                return k;
        qr->fd = TAKE_FD(fd);
        qr->state = UP_UDP;
        qr->retry_ms = MIN(now + RESOLVER_RETRY_MS, qr->deadline_ms);
        return 0;
}

/* The upstream said TC: the same question over TCP to the same upstream. */
static int upstream_try_tcp(struct resolver *r, struct query *qr) {
        _cleanup_close_ int fd = upstream_socket(r, qr, SOCK_STREAM);
        if (fd < 0)
                return fd;
        qr->tcpbuf = malloc(2 + DNS_MSG_MAX);
        if (!qr->tcpbuf)
                return -ENOMEM;
        qr->tcp_len = 0;
        qr->send_off = 0;
        int k = ep_add(r, fd, EPOLLOUT, mktag(TAG_UPSTREAM, query_idx(r, qr)));
        if (k < 0)
                return k;
        qr->fd = TAKE_FD(fd);
        qr->state = UP_TCP_CONNECT;
        qr->retry_ms = qr->deadline_ms; /* no retry over TCP: the budget decides */
        return 0;
}

/* Passed to dns_build_filtered: the decisions made beforehand, in record order. */
struct keep_ctx {
        const bool *keep;
        size_t n, i;
};
static bool keep_next(void *ctx, int family, const uint8_t *addr, uint32_t ttl) {
        struct keep_ctx *k = ctx;
        return k->i < k->n ? k->keep[k->i++] : false;
}

static void finish_prefetch(struct resolver *r, struct query *qr, const struct dns_response *resp, uint64_t now) {
        uint32_t min_ttl = resp ? dns_response_min_ttl(resp) : 0;
        uint32_t every = clamp_u32(min_ttl == UINT32_MAX ? 0 : min_ttl, RESOLVER_DENY_REFRESH_MIN, RESOLVER_TTL_MAX);
        bool found = false;
        unsigned slot = 0;
        pthread_mutex_lock(&r->lock);
        struct client *c = client_find(r, qr->family, qr->addr);
        if (c && c->gen == qr->gen) {
                found = true;
                slot = c->slot;
                for (size_t i = 0; i < c->n_pf; i++)
                        if (strcmp(c->pf[i].name, qr->name) == 0) {
                                struct prefetch *p = &c->pf[i];
                                p->due_ms = MIN(p->due_ms, now + (uint64_t)every * 1000u);
                                p->last_ms = now;
                                if (p->busy)
                                        p->busy--;
                        }
        }
        pthread_mutex_unlock(&r->lock);
        if (!found || !resp)
                return;
        for (size_t i = 0; i < resp->n_answer; i++) {
                int family;
                uint8_t addr[16];
                if (dns_rr_addr(resp, i, &family, addr) == 0)
                        r->o.hooks.deny(r->o.hooks.ctx, slot, family, addr, every + RESOLVER_DENY_GRACE_S);
        }
}

/* The upstream's answer (NULL: none in time, or unusable) for the query's client. */
static void finish(struct resolver *r, struct query *qr, const struct dns_response *resp, uint64_t now) {
        if (qr->origin == ORIGIN_PREFETCH) {
                finish_prefetch(r, qr, resp, now);
                query_free(r, qr);
                return;
        }
        if (!resp) {
                STAT_INC(r, upstream_failures);
                reply_code(r, qr, DNS_RCODE_SERVFAIL);
                query_free(r, qr);
                return;
        }
        /* every address of the answer section, judged: closed() without the lock, the
         * policy's deny CIDRs under it */
        _cleanup_free_ bool *keep = calloc(resp->n_answer ? resp->n_answer : 1, sizeof *keep);
        _cleanup_free_ uint32_t *ttls = calloc(resp->n_answer ? resp->n_answer : 1, sizeof *ttls);
        _cleanup_free_ uint8_t(*addrs)[16] = calloc(resp->n_answer ? resp->n_answer : 1, 16);
        _cleanup_free_ int *fams = calloc(resp->n_answer ? resp->n_answer : 1, sizeof *fams);
        if (!keep || !ttls || !addrs || !fams) {
                reply_code(r, qr, DNS_RCODE_SERVFAIL);
                query_free(r, qr);
                return;
        }
        size_t n = 0;
        for (size_t i = 0; i < resp->n_answer; i++)
                if (dns_rr_addr(resp, i, &fams[n], addrs[n]) == 0) {
                        uint32_t t = resp->rr[i].ttl;
                        ttls[n] = t & 0x80000000u ? 0 : t;
                        keep[n] = !r->o.hooks.closed(r->o.hooks.ctx, fams[n], addrs[n]);
                        n++;
                }
        bool found = false;
        unsigned slot = 0;
        pthread_mutex_lock(&r->lock);
        struct client *c = client_find(r, qr->family, qr->addr);
        if (c && c->gen == qr->gen) {
                found = true;
                slot = c->slot;
                for (size_t i = 0; i < n; i++)
                        if (keep[i] && denied_addr(&c->policy, fams[i], addrs[i]))
                                keep[i] = false;
        }
        pthread_mutex_unlock(&r->lock);
        if (!found) { /* dropped, or its policy changed meanwhile: it asks again */
                STAT_INC(r, dropped);
                query_free(r, qr);
                return;
        }
        struct keep_ctx kc = { .keep = keep, .n = n };
        size_t max = qr->origin == ORIGIN_UDP ? dns_udp_limit(&qr->q) : DNS_MSG_MAX;
        size_t len;
        if (dns_build_filtered(&qr->q, resp, keep_next, &kc, RESOLVER_TTL_MAX, max, r->ans, &len) < 0) {
                STAT_INC(r, upstream_failures);
                reply_code(r, qr, DNS_RCODE_SERVFAIL);
                query_free(r, qr);
                return;
        }
        /* reachable before the answer leaves, so the first connect already works */
        for (size_t i = 0; i < n; i++)
                if (keep[i])
                        r->o.hooks.allow(r->o.hooks.ctx, slot, fams[i], addrs[i], qr->port,
                                         clamp_u32(ttls[i], RESOLVER_TTL_MIN, RESOLVER_TTL_MAX));
        reply(r, qr, r->ans, len);
        query_free(r, qr);
}

/* A message from the upstream (UDP datagram or whole TCP message). true: query done. */
static bool upstream_message(struct resolver *r, struct query *qr, const uint8_t *msg, size_t len, uint64_t now) {
        struct dns_response resp;
        if (dns_parse_response(msg, len, &resp) < 0)
                return false; /* garbage or a forgery: keep waiting for the real one */
        if (resp.id != qr->up_id || !dns_response_matches(&resp, &qr->q)) {
                dns_response_clear(&resp);
                return false;
        }
        if ((resp.flags & DNS_FLAG_TC) && qr->state == UP_UDP) {
                dns_response_clear(&resp);
                if (upstream_try_tcp(r, qr) < 0)
                        finish(r, qr, NULL, now);
                return qr->used ? false : true;
        }
        finish(r, qr, &resp, now);
        dns_response_clear(&resp);
        return true;
}

static void upstream_event(struct resolver *r, struct query *qr, uint32_t ev, uint64_t now) {
        if (qr->state == UP_UDP) {
                for (int i = 0; i < 8 && qr->used && qr->state == UP_UDP; i++) {
                        ssize_t n = recv(qr->fd, r->buf, sizeof r->buf, MSG_DONTWAIT);
                        if (n < 0)
                                return; /* EAGAIN, or ICMP unreachable: the retry timer moves on */
                        if (upstream_message(r, qr, r->buf, (size_t)n, now))
                                return;
                }
                return;
        }
        if (ev & (EPOLLERR | EPOLLHUP) && qr->state != UP_TCP_READ) {
                finish(r, qr, NULL, now);
                return;
        }
        if (qr->state == UP_TCP_CONNECT) {
                int err = 0;
                socklen_t el = sizeof err;
                if (getsockopt(qr->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
                        finish(r, qr, NULL, now);
                        return;
                }
                qr->state = UP_TCP_WRITE;
                qr->sendbuf[0] = (uint8_t)(qr->send_len >> 8);
                qr->sendbuf[1] = (uint8_t)qr->send_len;
                qr->send_off = 0;
        }
        if (qr->state == UP_TCP_WRITE) {
                ssize_t n = send(qr->fd, qr->sendbuf + qr->send_off, qr->send_len + 2 - qr->send_off, MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN) {
                        finish(r, qr, NULL, now);
                        return;
                }
                if (n > 0)
                        qr->send_off += (size_t)n;
                if (qr->send_off == qr->send_len + 2) {
                        qr->state = UP_TCP_READ;
                        ep_mod(r, qr->fd, EPOLLIN, mktag(TAG_UPSTREAM, query_idx(r, qr)));
                }
                return;
        }
        /* UP_TCP_READ */
        size_t want = qr->tcp_len < 2 ? 2 : 2 + ((size_t)qr->tcpbuf[0] << 8 | qr->tcpbuf[1]);
        ssize_t n = recv(qr->fd, qr->tcpbuf + qr->tcp_len, want - qr->tcp_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                finish(r, qr, NULL, now);
                return;
        }
        if (n < 0)
                return;
        qr->tcp_len += (size_t)n;
        if (qr->tcp_len < 2)
                return;
        want = 2 + ((size_t)qr->tcpbuf[0] << 8 | qr->tcpbuf[1]);
        if (qr->tcp_len < want)
                return;
        if (!upstream_message(r, qr, qr->tcpbuf + 2, want - 2, now))
                if (qr->used)
                        finish(r, qr, NULL, now); /* one answer per connection: a bad one fails */
}

/* Sends qr's question upstream. Returns false (qr freed, client told SERVFAIL) on failure. */
static bool forward(struct resolver *r, struct query *qr, uint64_t now) {
        uint16_t id;
        if (getrandom(&id, sizeof id, 0) != sizeof id)
                id = (uint16_t)now;
        qr->up_id = id;
        if (dns_build_query(&qr->q, id, qr->sendbuf + 2, sizeof qr->sendbuf - 2, &qr->send_len) < 0) {
                finish(r, qr, NULL, now);
                return false;
        }
        qr->deadline_ms = now + (r->o.query_ms ? r->o.query_ms : RESOLVER_QUERY_MS);
        qr->upstream_idx = id % r->o.n_upstream;
        for (size_t t = 0; t < r->o.n_upstream; t++) {
                if (upstream_try_udp(r, qr, now) == 0)
                        return true;
                qr->upstream_idx = (qr->upstream_idx + 1) % r->o.n_upstream;
        }
        finish(r, qr, NULL, now);
        return false;
}

static void query_timers(struct resolver *r, uint64_t now) {
        for (size_t i = 0; i < RESOLVER_INFLIGHT_MAX; i++) {
                struct query *qr = &r->queries[i];
                if (!qr->used)
                        continue;
                if (now >= qr->deadline_ms) {
                        finish(r, qr, NULL, now);
                        continue;
                }
                if (qr->state == UP_UDP && now >= qr->retry_ms) {
                        bool sent = false;
                        for (size_t t = 0; t < r->o.n_upstream && !sent; t++) {
                                qr->upstream_idx = (qr->upstream_idx + 1) % r->o.n_upstream;
                                sent = upstream_try_udp(r, qr, now) == 0;
                        }
                        if (!sent)
                                finish(r, qr, NULL, now);
                }
        }
}

/* ---- denied names, resolved for the deny sets ---- */

static void prefetch_start(struct resolver *r, const struct client *c, const char *name, uint16_t qtype, uint64_t now) {
        struct query *qr = query_new(r);
        if (!qr)
                return;
        qr->origin = ORIGIN_PREFETCH;
        qr->family = c->family;
        memcpy(qr->addr, c->addr, 16);
        qr->gen = c->gen;
        qr->slot = c->slot;
        snprintf(qr->name, sizeof qr->name, "%s", name);
        qr->q.qtype = qtype;
        qr->q.qclass = DNS_CLASS_IN;
        qr->q.flags = DNS_FLAG_RD;
        r->n_prefetch++;
        if (dns_name_from_text(name, qr->q.qname, &qr->q.qname_len) < 0) {
                finish(r, qr, NULL, now);
                return;
        }
        snprintf(qr->q.name, sizeof qr->q.name, "%s", name);
        forward(r, qr, now);
}

/* The due names are collected under the lock and started after it (finish() of a query
 * that fails at once takes the lock). */
struct pf_job {
        struct client snap; /* family, addr, gen, slot */
        char name[DNS_NAME_MAX + 1];
};

static void prefetch_tick(struct resolver *r, uint64_t now) {
        /* names to start: two queries each (A, AAAA), within the prefetch budget, and never
         * more than a quarter of the free table (the rest is the sandboxes') */
        size_t room = RESOLVER_PREFETCH_INFLIGHT_MAX > r->n_prefetch ? (RESOLVER_PREFETCH_INFLIGHT_MAX - r->n_prefetch) / 2 : 0;
        room = MIN(room, (RESOLVER_INFLIGHT_MAX - r->n_queries) / 4);
        if (!room)
                return;
        _cleanup_free_ struct pf_job *jobs = calloc(room, sizeof *jobs);
        if (!jobs)
                return;
        size_t n = 0;
        pthread_mutex_lock(&r->lock);
        r->prefetch_kick = false;
        for (size_t b = 0; b < RESOLVER_BUCKETS && n < room; b++)
                for (struct client *c = r->buckets[b]; c && n < room; c = c->next)
                        for (size_t i = 0; i < c->n_pf && n < room; i++) {
                                struct prefetch *p = &c->pf[i];
                                if (p->busy || p->due_ms > now)
                                        continue;
                                p->busy = 2;
                                p->due_ms = UINT64_MAX;
                                jobs[n].snap.family = c->family;
                                memcpy(jobs[n].snap.addr, c->addr, 16);
                                jobs[n].snap.gen = c->gen;
                                jobs[n].snap.slot = c->slot;
                                snprintf(jobs[n].name, sizeof jobs[n].name, "%s", p->name);
                                n++;
                        }
        pthread_mutex_unlock(&r->lock);
        for (size_t i = 0; i < n; i++) {
                prefetch_start(r, &jobs[i].snap, jobs[i].name, DNS_TYPE_A, now);
                prefetch_start(r, &jobs[i].snap, jobs[i].name, DNS_TYPE_AAAA, now);
        }
}

/* ---- queries from sandboxes ---- */

struct source {
        enum origin origin;
        int family;
        uint8_t addr[16];
        size_t listen_idx; /* UDP */
        struct sockaddr_storage peer;
        socklen_t peer_len;
        uint8_t local[16];
        int ifindex;
        size_t conn_idx; /* TCP */
};

static void handle_query(struct resolver *r, const struct source *src, const uint8_t *msg, size_t len, uint64_t now) {
        STAT_INC(r, queries);
        struct query tmp = { .origin = src->origin, .family = src->family, .listen_idx = src->listen_idx,
                             .peer = src->peer, .peer_len = src->peer_len, .ifindex = src->ifindex,
                             .conn_idx = src->conn_idx };
        memcpy(tmp.addr, src->addr, 16);
        memcpy(tmp.local, src->local, 16);

        pthread_mutex_lock(&r->lock);
        struct client *c = client_find(r, src->family, src->addr);
        if (!c) {
                pthread_mutex_unlock(&r->lock);
                STAT_INC(r, dropped);
                if (src->origin == ORIGIN_TCP)
                        conn_close(r, src->conn_idx);
                return;
        }
        uint64_t cap = (uint64_t)RESOLVER_RATE_BURST * 1000u;
        if (now > c->refill_ms) {
                c->tokens_milli = MIN(cap, c->tokens_milli + (now - c->refill_ms) * RESOLVER_RATE_PER_S);
                c->refill_ms = now;
        }
        if (c->tokens_milli < 1000) {
                pthread_mutex_unlock(&r->lock);
                STAT_INC(r, dropped);
                STAT_INC(r, rate_limited);
                return;
        }
        c->tokens_milli -= 1000;
        tmp.gen = c->gen;
        tmp.slot = c->slot;

        int k = dns_parse_query(msg, len, &tmp.q);
        unsigned rcode = DNS_RCODE_NOERROR;
        bool local = true, refused = false;
        if (k == -EBADMSG && len >= DNS_HEADER_LEN && !(tmp.q.flags & DNS_FLAG_QR))
                rcode = DNS_RCODE_FORMERR;
        else if (k == -EOPNOTSUPP)
                rcode = DNS_RCODE_NOTIMP;
        else if (k < 0) {
                pthread_mutex_unlock(&r->lock);
                STAT_INC(r, dropped);
                return;
        } else if (!c->policy.egress) {
                rcode = DNS_RCODE_REFUSED, refused = true;
        } else {
                enum net_verdict v = net_policy_name(&c->policy, tmp.q.name, &tmp.port);
                if (v != NET_ALLOW) {
                        rcode = DNS_RCODE_NXDOMAIN, refused = true;
                        /* its addresses go to the deny set (soon, if not lately) */
                        if (v == NET_DENY && deny_name_exact(&c->policy, tmp.q.name))
                                for (size_t i = 0; i < c->n_pf; i++)
                                        if (strcmp(c->pf[i].name, tmp.q.name) == 0 && !c->pf[i].busy &&
                                            now >= c->pf[i].last_ms + RESOLVER_DENY_AGAIN_MS &&
                                            c->pf[i].due_ms > now) {
                                                c->pf[i].due_ms = now;
                                                r->prefetch_kick = true;
                                        }
                } else if (tmp.q.qclass != DNS_CLASS_IN || tmp.q.qtype == DNS_TYPE_AXFR ||
                           tmp.q.qtype == DNS_TYPE_IXFR) {
                        rcode = DNS_RCODE_REFUSED, refused = true;
                } else if (tmp.q.qtype == DNS_TYPE_HTTPS || tmp.q.qtype == DNS_TYPE_SVCB) {
                        /* their address hints would reach the sandbox unvetted */
                        rcode = DNS_RCODE_NOERROR;
                } else if (c->inflight >= RESOLVER_CLIENT_INFLIGHT_MAX || r->n_queries >= RESOLVER_INFLIGHT_MAX) {
                        pthread_mutex_unlock(&r->lock);
                        STAT_INC(r, dropped);
                        return;
                } else {
                        local = false;
                        c->inflight++;
                }
        }
        pthread_mutex_unlock(&r->lock);

        if (local) {
                if (refused)
                        STAT_INC(r, refused);
                reply_code(r, &tmp, rcode);
                return;
        }
        struct query *qr = query_new(r); /* cannot fail: checked above on this thread */
        if (!qr) {
                STAT_INC(r, dropped);
                return;
        }
        int fd = qr->fd;
        *qr = tmp;
        qr->used = true;
        qr->fd = fd;
        if (qr->origin == ORIGIN_TCP)
                r->conns[qr->conn_idx].busy = true;
        forward(r, qr, now);
}

static void udp_event(struct resolver *r, size_t li, uint64_t now) {
        for (int b = 0; b < RESOLVER_UDP_BATCH; b++) {
                union {
                        char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(struct in_pktinfo))];
                        struct cmsghdr align;
                } cm;
                struct source src = { .origin = ORIGIN_UDP, .listen_idx = li, .conn_idx = SIZE_MAX };
                struct iovec iov = { .iov_base = r->buf, .iov_len = sizeof r->buf };
                struct msghdr mh = { .msg_name = &src.peer, .msg_namelen = sizeof src.peer, .msg_iov = &iov,
                                     .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
                ssize_t n = recvmsg(r->udp[li], &mh, MSG_DONTWAIT);
                if (n < 0)
                        return;
                src.peer_len = mh.msg_namelen;
                if (from_sockaddr(&src.peer, &src.family, src.addr) < 0 || (mh.msg_flags & MSG_TRUNC))
                        continue;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
                                struct in_pktinfo pi;
                                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                                memcpy(src.local, &pi.ipi_addr, 4);
                        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
                                struct in6_pktinfo pi;
                                memcpy(&pi, CMSG_DATA(c), sizeof pi);
                                memcpy(src.local, &pi.ipi6_addr, 16);
                                src.ifindex = (int)pi.ipi6_ifindex;
                        }
                }
                handle_query(r, &src, r->buf, (size_t)n, now);
        }
}

/* ---- TCP from sandboxes ---- */

static void conn_close(struct resolver *r, size_t i) {
        struct conn *c = &r->conns[i];
        if (c->fd < 0)
                return;
        epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->fd = safe_close(c->fd);
        free(c->in);
        free(c->out);
        c->in = c->out = NULL;
        /* its query in flight answers nobody */
        for (size_t q = 0; q < RESOLVER_INFLIGHT_MAX; q++)
                if (r->queries[q].used && r->queries[q].origin == ORIGIN_TCP && r->queries[q].conn_idx == i)
                        r->queries[q].conn_idx = SIZE_MAX;
        c->busy = false;
}

/* Reads only when nothing is in flight or being written: one query at a time. */
static void conn_update(struct resolver *r, size_t i) {
        struct conn *c = &r->conns[i];
        if (c->fd < 0)
                return;
        uint32_t ev = c->out ? EPOLLOUT : c->busy ? 0 : EPOLLIN;
        if (ev != c->events) {
                ep_mod(r, c->fd, ev, mktag(TAG_CONN, i));
                c->events = ev;
        }
}

static uint64_t tcp_idle(const struct resolver *r) { return r->o.tcp_idle_ms ? r->o.tcp_idle_ms : RESOLVER_TCP_IDLE_MS; }

/* A whole message buffered: handle it and keep what follows. */
static void conn_process(struct resolver *r, size_t i, uint64_t now) {
        struct conn *c = &r->conns[i];
        while (c->fd >= 0 && !c->busy && !c->out && c->in_len >= 2) {
                size_t mlen = (size_t)c->in[0] << 8 | c->in[1];
                if (c->in_len < 2 + mlen)
                        break;
                struct source src = { .origin = ORIGIN_TCP, .family = c->family, .conn_idx = i };
                memcpy(src.addr, c->addr, 16);
                /* the message is copied out first: handling it may close the connection */
                memcpy(r->buf, c->in + 2, mlen);
                memmove(c->in, c->in + 2 + mlen, c->in_len - 2 - mlen);
                c->in_len -= 2 + mlen;
                c->idle_ms = now + tcp_idle(r);
                handle_query(r, &src, r->buf, mlen, now);
        }
        conn_update(r, i);
}

static void conn_event(struct resolver *r, size_t i, uint32_t ev, uint64_t now) {
        struct conn *c = &r->conns[i];
        if (c->fd < 0)
                return;
        if (ev & EPOLLOUT && c->out) {
                ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        conn_close(r, i);
                        return;
                }
                if (n > 0)
                        c->out_off += (size_t)n;
                if (c->out_off == c->out_len) {
                        free(c->out);
                        c->out = NULL;
                        c->out_len = c->out_off = 0;
                }
                conn_process(r, i, now);
                return;
        }
        if (ev & (EPOLLERR | EPOLLHUP) && !(ev & EPOLLIN)) {
                conn_close(r, i);
                return;
        }
        if (ev & EPOLLIN) {
                ssize_t n = recv(c->fd, c->in + c->in_len, 2 + DNS_MSG_MAX - c->in_len, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                        conn_close(r, i);
                        return;
                }
                if (n > 0)
                        c->in_len += (size_t)n;
                conn_process(r, i, now);
        }
}

static void tcp_accept(struct resolver *r, size_t li, uint64_t now) {
        for (;;) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                _cleanup_close_ int fd = accept4(r->tcp[li], (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return;
                int family;
                uint8_t addr[16] = { 0 };
                if (from_sockaddr(&ss, &family, addr) < 0)
                        continue;
                pthread_mutex_lock(&r->lock);
                bool known = client_find(r, family, addr) != NULL;
                pthread_mutex_unlock(&r->lock);
                if (!known) {
                        STAT_INC(r, dropped);
                        continue;
                }
                size_t i = 0;
                while (i < RESOLVER_TCP_CLIENTS_MAX && r->conns[i].fd >= 0)
                        i++;
                if (i == RESOLVER_TCP_CLIENTS_MAX) {
                        STAT_INC(r, dropped);
                        continue; /* full: closed; the sandbox's resolver retries */
                }
                struct conn *c = &r->conns[i];
                *c = (struct conn){ .fd = -EBADF, .family = family, .idle_ms = now + tcp_idle(r) };
                memcpy(c->addr, addr, 16);
                c->in = malloc(2 + DNS_MSG_MAX);
                if (!c->in)
                        continue;
                if (ep_add(r, fd, EPOLLIN, mktag(TAG_CONN, i)) < 0) {
                        free(c->in);
                        c->in = NULL;
                        continue;
                }
                c->events = EPOLLIN;
                c->fd = TAKE_FD(fd);
        }
}

static void conn_timers(struct resolver *r, uint64_t now) {
        for (size_t i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                if (r->conns[i].fd >= 0 && !r->conns[i].busy && now >= r->conns[i].idle_ms)
                        conn_close(r, i);
}

/* ---- the thread ---- */

static int next_timeout(struct resolver *r, uint64_t now) {
        uint64_t next = r->next_prefetch_ms;
        for (size_t i = 0; i < RESOLVER_INFLIGHT_MAX; i++)
                if (r->queries[i].used)
                        next = MIN(next, MIN(r->queries[i].retry_ms, r->queries[i].deadline_ms));
        for (size_t i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                if (r->conns[i].fd >= 0 && !r->conns[i].busy)
                        next = MIN(next, r->conns[i].idle_ms);
        return next <= now ? 0 : (int)MIN(next - now, (uint64_t)60000);
}

static void *resolver_thread(void *arg) {
        struct resolver *r = arg;
        struct epoll_event evs[64];
        r->next_prefetch_ms = now_ms();
        for (;;) {
                int n = epoll_wait(r->epfd, evs, ELEMENTSOF(evs), next_timeout(r, now_ms()));
                if (n < 0 && errno != EINTR)
                        break;
                uint64_t now = now_ms();
                for (int e = 0; e < n; e++) {
                        enum tag t = (enum tag)(evs[e].data.u64 >> 32);
                        size_t i = (size_t)(evs[e].data.u64 & 0xffffffffu);
                        switch (t) {
                        case TAG_WAKE: {
                                uint64_t v;
                                (void)!read(r->wakefd, &v, sizeof v);
                                break;
                        }
                        case TAG_UDP:
                                udp_event(r, i, now);
                                break;
                        case TAG_TCP_LISTEN:
                                tcp_accept(r, i, now);
                                break;
                        case TAG_CONN:
                                conn_event(r, i, evs[e].events, now);
                                break;
                        case TAG_UPSTREAM:
                                if (r->queries[i].used && r->queries[i].fd >= 0)
                                        upstream_event(r, &r->queries[i], evs[e].events, now);
                                break;
                        }
                }
                pthread_mutex_lock(&r->lock);
                bool stop = r->stop, kick = r->prefetch_kick;
                pthread_mutex_unlock(&r->lock);
                if (stop)
                        return NULL;
                query_timers(r, now);
                conn_timers(r, now);
                /* connections whose query just finished may hold the next one already */
                for (size_t i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                        if (r->conns[i].fd >= 0 && !r->conns[i].busy && !r->conns[i].out && r->conns[i].in_len >= 2)
                                conn_process(r, i, now);
                if (kick || now >= r->next_prefetch_ms) {
                        prefetch_tick(r, now);
                        r->next_prefetch_ms = now + RESOLVER_PREFETCH_TICK_MS;
                }
        }
        return NULL;
}

/* ---- open / close ---- */

static int bind_one(int family, int type, const uint8_t *addr, uint16_t port, int *ret) {
        _cleanup_close_ int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
                return -errno;
        if (type == SOCK_STREAM && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                return -errno;
        if (type == SOCK_DGRAM) {
                int k = family == AF_INET ? setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one)
                                          : setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
                if (k < 0)
                        return -errno;
        }
        struct sockaddr_storage ss;
        socklen_t sl = to_sockaddr(family, addr, port, &ss);
        if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
                return -errno;
        if (type == SOCK_STREAM && listen(fd, 64) < 0)
                return -errno;
        *ret = TAKE_FD(fd);
        return 0;
}

static void close_listeners(struct resolver *r) {
        for (size_t i = 0; i < RESOLVER_LISTEN_MAX; i++) {
                r->udp[i] = safe_close(r->udp[i]);
                r->tcp[i] = safe_close(r->tcp[i]);
        }
}

/* Every listener on one port; with port 0 the first bind picks it, and a later bind that
 * finds it taken starts over with another. */
static int bind_all(struct resolver *r) {
        int k = 0;
        for (int attempt = 0; attempt < 16; attempt++) {
                uint16_t port = r->o.listen[0].port;
                for (size_t i = 0; i < r->o.n_listen; i++) {
                        const struct resolver_sockaddr *l = &r->o.listen[i];
                        k = bind_one(l->family, SOCK_DGRAM, l->addr, port, &r->udp[i]);
                        if (k < 0)
                                break;
                        if (port == 0) {
                                struct sockaddr_storage ss;
                                socklen_t sl = sizeof ss;
                                if (getsockname(r->udp[i], (struct sockaddr *)&ss, &sl) < 0) {
                                        k = -errno;
                                        break;
                                }
                                port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                                     : ((struct sockaddr_in6 *)&ss)->sin6_port);
                        }
                        k = bind_one(l->family, SOCK_STREAM, l->addr, port, &r->tcp[i]);
                        if (k < 0)
                                break;
                }
                if (k == 0) {
                        r->port = port;
                        return 0;
                }
                close_listeners(r);
                if (k != -EADDRINUSE || r->o.listen[0].port != 0)
                        return k;
        }
        return k;
}

int resolver_open(const struct resolver_opts *o, struct resolver **ret) {
        if (!o->n_listen || o->n_listen > RESOLVER_LISTEN_MAX || !o->n_upstream || o->n_upstream > RESOLVER_UPSTREAM_MAX ||
            !o->hooks.allow || !o->hooks.deny || !o->hooks.closed)
                return -EINVAL;
        for (size_t i = 0; i < o->n_listen; i++)
                if (o->listen[i].family != AF_INET && o->listen[i].family != AF_INET6)
                        return -EINVAL;
        for (size_t i = 0; i < o->n_upstream; i++)
                if (o->upstream[i].family != AF_INET && o->upstream[i].family != AF_INET6)
                        return -EINVAL;
        struct resolver *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->o = *o;
        r->epfd = r->wakefd = -EBADF;
        for (size_t i = 0; i < RESOLVER_LISTEN_MAX; i++)
                r->udp[i] = r->tcp[i] = -EBADF;
        for (size_t i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                r->conns[i].fd = -EBADF;
        for (size_t i = 0; i < RESOLVER_INFLIGHT_MAX; i++)
                r->queries[i].fd = -EBADF;
        pthread_mutex_init(&r->lock, NULL);
        int k = bind_all(r);
        if (k < 0)
                goto fail;
        r->epfd = epoll_create1(EPOLL_CLOEXEC);
        r->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (r->epfd < 0 || r->wakefd < 0) {
                k = -errno;
                goto fail;
        }
        if ((k = ep_add(r, r->wakefd, EPOLLIN, mktag(TAG_WAKE, 0))) < 0)
                goto fail;
        for (size_t i = 0; i < o->n_listen; i++)
                if ((k = ep_add(r, r->udp[i], EPOLLIN, mktag(TAG_UDP, i))) < 0 ||
                    (k = ep_add(r, r->tcp[i], EPOLLIN, mktag(TAG_TCP_LISTEN, i))) < 0)
                        goto fail;
        k = -pthread_create(&r->thread, NULL, resolver_thread, r);
        if (k < 0)
                goto fail;
        r->thread_started = true;
        *ret = r;
        return 0;
fail:
        resolver_close(r);
        return k;
}

struct resolver *resolver_close(struct resolver *r) {
        if (!r)
                return NULL;
        if (r->thread_started) {
                pthread_mutex_lock(&r->lock);
                r->stop = true;
                pthread_mutex_unlock(&r->lock);
                wake(r);
                pthread_join(r->thread, NULL);
        }
        for (size_t i = 0; i < RESOLVER_INFLIGHT_MAX; i++)
                if (r->queries[i].used) {
                        r->queries[i].fd = safe_close(r->queries[i].fd);
                        free(r->queries[i].tcpbuf);
                }
        for (size_t i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                if (r->conns[i].fd >= 0) {
                        r->conns[i].fd = safe_close(r->conns[i].fd);
                        free(r->conns[i].in);
                        free(r->conns[i].out);
                }
        close_listeners(r);
        r->epfd = safe_close(r->epfd);
        r->wakefd = safe_close(r->wakefd);
        for (size_t b = 0; b < RESOLVER_BUCKETS; b++)
                while (r->buckets[b]) {
                        struct client *c = r->buckets[b];
                        r->buckets[b] = c->next;
                        client_free(c);
                }
        pthread_mutex_destroy(&r->lock);
        free(r);
        return NULL;
}
