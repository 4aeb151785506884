/* The resolver (src/daemon/net/resolver.c) end to end on loopback: a fake upstream DNS
 * server (UDP and TCP) on 127.0.0.1, the resolver on another port, the test as the
 * sandbox (source 127.0.0.1, 127.0.0.3, 127.0.0.4 set as clients; 127.0.0.2 not).
 * Checks: an allowed name is answered and allow() gets its address, port and clamped
 * TTL before the answer arrives; a deny CIDR and a rebinding (private) address are
 * dropped and never allowed; a denied name is NXDOMAIN and its addresses reach deny();
 * an unlisted name is NXDOMAIN and never asked upstream; HTTPS is empty NOERROR; egress
 * off is REFUSED; an unknown or dropped client gets nothing; a flood is cut to the token
 * bucket; TCP (pipelined queries too) and the upstream's TC -> TCP; UDP truncation; an
 * upstream that never answers gives SERVFAIL within 2 s; the per-client in-flight cap;
 * the TCP idle timeout and connection cap; a silent first upstream is
 * retried on the next; close with queries in flight; IPv6 listeners and clients; and, in
 * a network namespace of the test's own, a wildcard listener answering from the address
 * each query was sent to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/net/dns.h"
#include "daemon/net/policy.h"
#include "daemon/net/resolver.h"

#define SLOT_MAIN 7
#define SLOT_FLOOD 8
#define SLOT_OFF 9

static uint64_t ms_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- a message builder ---- */

struct mb {
        uint8_t b[DNS_MSG_MAX + 2];
        size_t n;
};
static void u8(struct mb *m, unsigned v) { m->b[m->n++] = (uint8_t)v; }
static void u16(struct mb *m, unsigned v) {
        u8(m, v >> 8);
        u8(m, v & 0xff);
}
static void u32(struct mb *m, uint32_t v) {
        u16(m, v >> 16);
        u16(m, v & 0xffff);
}
static void name(struct mb *m, const char *text) {
        while (*text) {
                const char *dot = strchr(text, '.');
                size_t l = dot ? (size_t)(dot - text) : strlen(text);
                u8(m, (unsigned)l);
                memcpy(m->b + m->n, text, l);
                m->n += l;
                text += l + (dot ? 1 : 0);
        }
        u8(m, 0);
}

/* ---- the fake upstream ---- */

struct fake {
        int udp, tcp, stop[2];
        uint16_t port;
        pthread_t th;
        pthread_mutex_t mu;
        unsigned asked_total, asked_unlisted, asked_denied, asked_https, asked_tcp;
};

static void rr(struct mb *m, uint16_t type, uint32_t ttl, const char *ip) {
        u16(m, 0xc00c);
        u16(m, type);
        u16(m, DNS_CLASS_IN);
        u32(m, ttl);
        uint8_t a[16];
        int fam = type == DNS_TYPE_A ? AF_INET : AF_INET6;
        assert_int_equal(inet_pton(fam, ip, a), 1);
        u16(m, fam == AF_INET ? 4 : 16);
        memcpy(m->b + m->n, a, fam == AF_INET ? 4 : 16);
        m->n += fam == AF_INET ? 4 : 16;
}

/* The answer to a query (false: stay silent). Only the question is read back, by hand. */
static bool fake_answer(struct fake *f, const uint8_t *q, size_t qlen, bool tcp, struct mb *m) {
        char nm[300] = "";
        size_t p = 12, o = 0;
        while (p < qlen && q[p] && o < 250) {
                if (o)
                        nm[o++] = '.';
                for (unsigned k = 0; k < q[p]; k++)
                        nm[o++] = (char)(q[p + 1 + k] | 0x20);
                p += 1 + q[p];
        }
        nm[o] = 0;
        p++;
        if (p + 4 > qlen)
                return false;
        unsigned qtype = (unsigned)(q[p] << 8 | q[p + 1]);
        pthread_mutex_lock(&f->mu);
        f->asked_total++;
        f->asked_tcp += tcp;
        if (strcmp(nm, "unlisted.example") == 0)
                f->asked_unlisted++;
        if (strcmp(nm, "denied.example") == 0)
                f->asked_denied++;
        if (qtype == DNS_TYPE_HTTPS)
                f->asked_https++;
        pthread_mutex_unlock(&f->mu);
        if (strcmp(nm, "slow.example") == 0)
                return false;
        m->n = 0;
        memcpy(m->b, q, 2);
        m->n = 2;
        u16(m, DNS_FLAG_QR | DNS_FLAG_RD | DNS_FLAG_RA);
        u16(m, 1);
        size_t an_at = m->n;
        u16(m, 0), u16(m, 0), u16(m, 0);
        memcpy(m->b + m->n, q + 12, p + 4 - 12);
        m->n += p + 4 - 12;
        unsigned an = 0;
        bool a = qtype == DNS_TYPE_A, aaaa = qtype == DNS_TYPE_AAAA;
        if (strcmp(nm, "good.example") == 0) {
                if (a) {
                        rr(m, DNS_TYPE_A, 7200, "203.0.113.5");
                        rr(m, DNS_TYPE_A, 7200, "198.51.100.1"); /* in a deny CIDR */
                        an = 2;
                } else if (aaaa) {
                        rr(m, DNS_TYPE_AAAA, 2, "2001:db8::5");
                        an = 1;
                }
        } else if (strcmp(nm, "a.ok.example") == 0 && a) {
                rr(m, DNS_TYPE_A, 60, "203.0.113.44");
                an = 1;
        } else if (strcmp(nm, "rebind.example") == 0 && a) {
                rr(m, DNS_TYPE_A, 60, "10.0.0.5");
                rr(m, DNS_TYPE_A, 60, "203.0.113.9");
                an = 2;
        } else if (strcmp(nm, "denied.example") == 0) {
                if (a) {
                        rr(m, DNS_TYPE_A, 100, "198.51.100.7");
                        an = 1;
                }
        } else if (strcmp(nm, "big.example") == 0 && a) {
                if (!tcp) {
                        m->b[2] |= DNS_FLAG_TC >> 8; /* does not fit: come back over TCP */
                } else {
                        for (unsigned i = 0; i < 60; i++) {
                                char ip[32];
                                snprintf(ip, sizeof ip, "203.0.113.%u", 100 + i);
                                rr(m, DNS_TYPE_A, 60, ip);
                        }
                        an = 60;
                }
        } else {
                m->b[3] |= DNS_RCODE_NXDOMAIN;
        }
        m->b[an_at] = (uint8_t)(an >> 8);
        m->b[an_at + 1] = (uint8_t)an;
        return true;
}

static void *fake_thread(void *arg) {
        struct fake *f = arg;
        static struct mb out; /* one fake at a time */
        uint8_t in[DNS_MSG_MAX + 2];
        for (;;) {
                struct pollfd p[3] = { { f->udp, POLLIN, 0 }, { f->tcp, POLLIN, 0 }, { f->stop[0], POLLIN, 0 } };
                if (poll(p, 3, -1) < 0)
                        continue;
                if (p[2].revents)
                        return NULL;
                if (p[0].revents) {
                        struct sockaddr_storage ss;
                        socklen_t sl = sizeof ss;
                        ssize_t n = recvfrom(f->udp, in, sizeof in, 0, (struct sockaddr *)&ss, &sl);
                        if (n > 0 && fake_answer(f, in, (size_t)n, false, &out))
                                sendto(f->udp, out.b, out.n, 0, (struct sockaddr *)&ss, sl);
                }
                if (p[1].revents) {
                        int c = accept(f->tcp, NULL, NULL);
                        if (c < 0)
                                continue;
                        struct timeval tv = { .tv_sec = 2 };
                        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                        size_t have = 0;
                        while (have < 2 || have < 2 + (size_t)(in[0] << 8 | in[1])) {
                                ssize_t n = recv(c, in + have, sizeof in - have, 0);
                                if (n <= 0)
                                        break;
                                have += (size_t)n;
                        }
                        if (have >= 2 && fake_answer(f, in + 2, have - 2, true, &out)) {
                                uint8_t l[2] = { (uint8_t)(out.n >> 8), (uint8_t)out.n };
                                send(c, l, 2, MSG_NOSIGNAL);
                                send(c, out.b, out.n, MSG_NOSIGNAL);
                        }
                        close(c);
                }
        }
}

static int bind_lo(int type, const char *ip, uint16_t port) {
        int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
        inet_pton(AF_INET, ip, &sa.sin_addr);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        return fd;
}

static uint16_t port_of(int fd) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
        return ntohs(sa.sin_port);
}

static void fake_start(struct fake *f) {
        memset(f, 0, sizeof *f);
        pthread_mutex_init(&f->mu, NULL);
        f->udp = bind_lo(SOCK_DGRAM, "127.0.0.1", 0);
        f->port = port_of(f->udp);
        f->tcp = bind_lo(SOCK_STREAM, "127.0.0.1", f->port);
        assert_int_equal(listen(f->tcp, 16), 0);
        assert_int_equal(pipe(f->stop), 0);
        assert_int_equal(pthread_create(&f->th, NULL, fake_thread, f), 0);
}

static void fake_stop(struct fake *f) {
        close(f->stop[1]);
        pthread_join(f->th, NULL);
        close(f->stop[0]);
        close(f->udp);
        close(f->tcp);
        pthread_mutex_destroy(&f->mu);
}

static unsigned fake_count(struct fake *f, unsigned *field) {
        pthread_mutex_lock(&f->mu);
        unsigned v = *field;
        pthread_mutex_unlock(&f->mu);
        return v;
}

/* ---- the hooks: every call recorded ---- */

struct call {
        char kind; /* 'a' allow, 'd' deny */
        unsigned slot;
        int family;
        uint8_t addr[16];
        uint16_t port;
        uint32_t ttl;
};
static pthread_mutex_t calls_mu = PTHREAD_MUTEX_INITIALIZER;
static struct call calls[4096];
static size_t n_calls;

static void record(char kind, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl) {
        pthread_mutex_lock(&calls_mu);
        if (n_calls < sizeof calls / sizeof calls[0]) {
                struct call *c = &calls[n_calls++];
                *c = (struct call){ .kind = kind, .slot = slot, .family = family, .port = port, .ttl = ttl };
                memcpy(c->addr, addr, family == AF_INET ? 4 : 16);
        }
        pthread_mutex_unlock(&calls_mu);
}
static void h_allow(void *ctx, unsigned slot, int family, const uint8_t *addr, uint16_t port, uint32_t ttl) {
        record('a', slot, family, addr, port, ttl);
}
static void h_deny(void *ctx, unsigned slot, int family, const uint8_t *addr, uint32_t ttl) {
        record('d', slot, family, addr, 0, ttl);
}
static bool h_closed(void *ctx, int family, const uint8_t *addr) { return net_addr_closed(NULL, family, addr); }

/* The call of that kind for ip (NULL if none). */
static bool find_call(char kind, const char *ip, struct call *ret) {
        uint8_t a[16] = { 0 };
        int fam = strchr(ip, ':') ? AF_INET6 : AF_INET;
        assert_int_equal(inet_pton(fam, ip, a), 1);
        bool found = false;
        pthread_mutex_lock(&calls_mu);
        for (size_t i = 0; i < n_calls && !found; i++)
                if (calls[i].kind == kind && calls[i].family == fam && memcmp(calls[i].addr, a, fam == AF_INET ? 4 : 16) == 0) {
                        found = true;
                        if (ret)
                                *ret = calls[i];
                }
        pthread_mutex_unlock(&calls_mu);
        return found;
}

/* ---- the world of one test ---- */

struct world {
        struct fake fake;
        int blackhole; /* an upstream that never answers */
        struct resolver *res;
        struct net_policy pol;
};

static void rules(struct net_rule **v, size_t *n, const char *const *text) {
        size_t k = 0;
        while (text[k])
                k++;
        *v = calloc(k ? k : 1, sizeof **v);
        assert_non_null(*v);
        for (size_t i = 0; i < k; i++) {
                char err[200];
                assert_int_equal(net_rule_parse(text[i], &(*v)[i], err, sizeof err), 0);
        }
        *n = k;
}

static void set_client(struct world *w, const char *ip, unsigned slot, const struct net_policy *p) {
        uint8_t a[4];
        inet_pton(AF_INET, ip, a);
        assert_int_equal(resolver_set_client(w->res, AF_INET, a, slot, p), 0);
}

static int world_open(struct world *w, bool with_blackhole) {
        memset(w, 0, sizeof *w);
        pthread_mutex_lock(&calls_mu);
        n_calls = 0;
        pthread_mutex_unlock(&calls_mu);
        fake_start(&w->fake);
        w->blackhole = bind_lo(SOCK_DGRAM, "127.0.0.1", 0);
        struct resolver_opts o = {
                .n_listen = 1,
                .hooks = { .allow = h_allow, .deny = h_deny, .closed = h_closed },
                .tcp_idle_ms = 400,
        };
        o.listen[0].family = AF_INET;
        inet_pton(AF_INET, "127.0.0.1", o.listen[0].addr);
        size_t u = 0;
        if (with_blackhole) {
                o.upstream[u].family = AF_INET;
                inet_pton(AF_INET, "127.0.0.1", o.upstream[u].addr);
                o.upstream[u++].port = port_of(w->blackhole);
        }
        o.upstream[u].family = AF_INET;
        inet_pton(AF_INET, "127.0.0.1", o.upstream[u].addr);
        o.upstream[u++].port = w->fake.port;
        o.n_upstream = u;
        assert_int_equal(resolver_open(&o, &w->res), 0);
        assert_true(resolver_port(w->res) != 0);

        static const char *const allow[] = { "good.example", "rebind.example", "big.example", "slow.example",
                                             "*.ok.example:443", NULL };
        static const char *const deny[] = { "denied.example", "198.51.100.0/24", NULL };
        w->pol.egress = true;
        rules(&w->pol.allow, &w->pol.n_allow, allow);
        rules(&w->pol.deny, &w->pol.n_deny, deny);
        set_client(w, "127.0.0.1", SLOT_MAIN, &w->pol);
        set_client(w, "127.0.0.3", SLOT_FLOOD, &w->pol);
        struct net_policy off = { .egress = false };
        set_client(w, "127.0.0.4", SLOT_OFF, &off);
        return 0;
}

static int setup(void **state) {
        struct world *w = calloc(1, sizeof *w);
        world_open(w, false);
        *state = w;
        return 0;
}
static int setup_retry(void **state) {
        struct world *w = calloc(1, sizeof *w);
        world_open(w, true);
        *state = w;
        return 0;
}
static int teardown(void **state) {
        struct world *w = *state;
        w->res = resolver_close(w->res);
        assert_null(w->res);
        fake_stop(&w->fake);
        close(w->blackhole);
        net_policy_clear(&w->pol);
        free(w);
        return 0;
}

/* ---- the test's sandbox side ---- */

static int client(const struct world *w, const char *src, int type) {
        int fd = bind_lo(type, src, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(resolver_port(w->res)) };
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        return fd;
}

static void query(struct mb *m, const char *qname, unsigned qtype, uint16_t id, bool edns) {
        m->n = 0;
        u16(m, id);
        u16(m, DNS_FLAG_RD);
        u16(m, 1), u16(m, 0), u16(m, 0), u16(m, edns);
        name(m, qname);
        u16(m, qtype);
        u16(m, DNS_CLASS_IN);
        if (edns) {
                u8(m, 0), u16(m, DNS_TYPE_OPT), u16(m, 1232), u32(m, 0), u16(m, 0);
        }
}

/* Sends a query over UDP and waits for the answer with its id: its length, or 0. */
static size_t ask_udp(int fd, const char *qname, unsigned qtype, uint16_t id, uint8_t *ans, int wait_ms) {
        struct mb m;
        query(&m, qname, qtype, id, false);
        assert_int_equal(send(fd, m.b, m.n, 0), (ssize_t)m.n);
        uint64_t end = ms_now() + (uint64_t)wait_ms;
        for (;;) {
                uint64_t now = ms_now();
                if (now >= end)
                        return 0;
                struct pollfd p = { fd, POLLIN, 0 };
                if (poll(&p, 1, (int)(end - now)) <= 0)
                        return 0;
                ssize_t n = recv(fd, ans, DNS_MSG_MAX, 0);
                if (n >= 12 && (ans[0] << 8 | ans[1]) == id)
                        return (size_t)n;
        }
}

static bool has_addr(const struct dns_response *r, const char *ip, uint32_t *ttl) {
        uint8_t a[16];
        int fam = strchr(ip, ':') ? AF_INET6 : AF_INET;
        inet_pton(fam, ip, a);
        for (size_t i = 0; i < r->n_answer; i++) {
                int f;
                uint8_t x[16];
                if (dns_rr_addr(r, i, &f, x) == 0 && f == fam && memcmp(x, a, fam == AF_INET ? 4 : 16) == 0) {
                        if (ttl)
                                *ttl = r->rr[i].ttl;
                        return true;
                }
        }
        return false;
}

/* ---- tests ---- */

static void test_allowed(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        struct dns_response r;
        uint32_t ttl;
        struct call c;

        size_t n = ask_udp(fd, "Good.Example", DNS_TYPE_A, 101, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NOERROR);
        assert_true(has_addr(&r, "203.0.113.5", &ttl));
        assert_int_equal(ttl, RESOLVER_TTL_MAX); /* 7200 rewritten */
        assert_false(has_addr(&r, "198.51.100.1", NULL)); /* deny CIDR */
        assert_int_equal(r.n_answer, 1);
        assert_memory_equal(ans + 12, "\4Good\7Example", 14); /* the question as asked */
        dns_response_clear(&r);
        /* allow() was called before the answer left */
        assert_true(find_call('a', "203.0.113.5", &c));
        assert_int_equal(c.slot, SLOT_MAIN);
        assert_int_equal(c.port, 0);
        assert_int_equal(c.ttl, RESOLVER_TTL_MAX);
        assert_false(find_call('a', "198.51.100.1", NULL));

        /* AAAA with TTL 2: answered 2, allowed for the 5 s minimum */
        n = ask_udp(fd, "good.example", DNS_TYPE_AAAA, 102, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_true(has_addr(&r, "2001:db8::5", &ttl));
        assert_int_equal(ttl, 2);
        dns_response_clear(&r);
        assert_true(find_call('a', "2001:db8::5", &c));
        assert_int_equal(c.ttl, RESOLVER_TTL_MIN);

        /* a wildcard rule with a port: the port goes to allow() */
        n = ask_udp(fd, "a.ok.example", DNS_TYPE_A, 103, ans, 2000);
        assert_true(n > 0);
        assert_true(find_call('a', "203.0.113.44", &c));
        assert_int_equal(c.port, 443);
        assert_int_equal(c.ttl, 60);

        /* HTTPS: empty NOERROR, never forwarded */
        n = ask_udp(fd, "good.example", DNS_TYPE_HTTPS, 104, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NOERROR);
        assert_int_equal(r.n_answer, 0);
        dns_response_clear(&r);
        assert_int_equal(fake_count(&w->fake, &w->fake.asked_https), 0);

        struct resolver_stats st;
        resolver_stats(w->res, &st);
        assert_int_equal(st.queries, 4);
        assert_int_equal(st.answered, 4);
        assert_int_equal(st.upstream_failures, 0);
        close(fd);
}

static void test_rebinding(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        struct dns_response r;
        size_t n = ask_udp(fd, "rebind.example", DNS_TYPE_A, 201, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_false(has_addr(&r, "10.0.0.5", NULL));
        assert_true(has_addr(&r, "203.0.113.9", NULL));
        assert_int_equal(r.n_answer, 1);
        dns_response_clear(&r);
        assert_false(find_call('a', "10.0.0.5", NULL));
        assert_true(find_call('a', "203.0.113.9", NULL));
        close(fd);
}

static void test_denied_unlisted(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        struct dns_response r;
        size_t n = ask_udp(fd, "denied.example", DNS_TYPE_A, 301, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NXDOMAIN);
        assert_int_equal(r.n_answer, 0);
        dns_response_clear(&r);
        /* resolved by spaced anyway (at set_client): its address is in the slot's deny set */
        struct call c;
        bool found = false;
        for (int i = 0; i < 100 && !found; i++) {
                found = find_call('d', "198.51.100.7", &c);
                if (!found)
                        usleep(20000);
        }
        assert_true(found);
        assert_true(c.slot == SLOT_MAIN || c.slot == SLOT_FLOOD);
        assert_int_equal(c.ttl, 100 + RESOLVER_DENY_GRACE_S);
        assert_false(find_call('a', "198.51.100.7", NULL));
        assert_true(fake_count(&w->fake, &w->fake.asked_denied) >= 1);

        n = ask_udp(fd, "unlisted.example", DNS_TYPE_A, 302, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NXDOMAIN);
        dns_response_clear(&r);
        assert_int_equal(fake_count(&w->fake, &w->fake.asked_unlisted), 0);

        /* egress off: REFUSED */
        int off = client(w, "127.0.0.4", SOCK_DGRAM);
        n = ask_udp(off, "good.example", DNS_TYPE_A, 303, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(ans[3] & 0xf, DNS_RCODE_REFUSED);

        struct resolver_stats st;
        resolver_stats(w->res, &st);
        assert_int_equal(st.refused, 3);
        close(off);
        close(fd);
}

/* A denied name queried again, once RESOLVER_DENY_AGAIN_MS after its last resolution,
 * is resolved again right away (not only when its TTL runs out). */
static void test_denied_requery(void **state) {
        struct world *w = *state;
        unsigned seen = 0;
        for (int i = 0; i < 100 && (seen = fake_count(&w->fake, &w->fake.asked_denied)) < 4; i++)
                usleep(20000);
        assert_int_equal(seen, 4); /* A and AAAA, for each of the two clients with the policy */
        usleep((RESOLVER_DENY_AGAIN_MS + 200) * 1000);
        assert_int_equal(fake_count(&w->fake, &w->fake.asked_denied), 4); /* its TTL is 100 s */
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        assert_true(ask_udp(fd, "denied.example", DNS_TYPE_A, 350, ans, 2000) > 0);
        assert_int_equal(ans[3] & 0xf, DNS_RCODE_NXDOMAIN);
        for (int i = 0; i < 100 && (seen = fake_count(&w->fake, &w->fake.asked_denied)) < 6; i++)
                usleep(20000);
        assert_int_equal(seen, 6); /* this client's A and AAAA again */
        close(fd);
}

static void test_unknown_client(void **state) {
        struct world *w = *state;
        static uint8_t ans[DNS_MSG_MAX];
        int fd = client(w, "127.0.0.2", SOCK_DGRAM);
        assert_int_equal(ask_udp(fd, "good.example", DNS_TYPE_A, 401, ans, 300), 0);
        struct resolver_stats st;
        resolver_stats(w->res, &st);
        assert_int_equal(st.dropped, 1);
        assert_int_equal(st.answered, 0);
        close(fd);
        /* over TCP: closed without an answer */
        fd = client(w, "127.0.0.2", SOCK_STREAM);
        struct mb m;
        query(&m, "good.example", DNS_TYPE_A, 402, false);
        uint8_t l[2] = { (uint8_t)(m.n >> 8), (uint8_t)m.n };
        send(fd, l, 2, MSG_NOSIGNAL);
        send(fd, m.b, m.n, MSG_NOSIGNAL);
        struct pollfd p = { fd, POLLIN, 0 };
        assert_int_equal(poll(&p, 1, 2000), 1);
        assert_true(recv(fd, ans, 100, 0) <= 0);
        close(fd);
        /* a client dropped by the room is unknown again */
        fd = client(w, "127.0.0.1", SOCK_DGRAM);
        assert_true(ask_udp(fd, "good.example", DNS_TYPE_HTTPS, 403, ans, 2000) > 0);
        uint8_t a[4];
        inet_pton(AF_INET, "127.0.0.1", a);
        resolver_drop_client(w->res, AF_INET, a);
        assert_int_equal(ask_udp(fd, "good.example", DNS_TYPE_HTTPS, 404, ans, 300), 0);
        close(fd);
        assert_int_equal(fake_count(&w->fake, &w->fake.asked_total) - fake_count(&w->fake, &w->fake.asked_denied), 0);
}

static void test_flood(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.3", SOCK_DGRAM);
        int big = 1 << 20;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        struct resolver_stats before, after;
        resolver_stats(w->res, &before);
        uint64_t t0 = ms_now();
        struct mb m;
        /* 250 in bursts of 25, 2 ms apart: far over 50/s, within the sockets' buffers */
        for (int i = 0; i < 250; i++) {
                query(&m, "good.example", DNS_TYPE_HTTPS, (uint16_t)(1000 + i), false);
                assert_int_equal(send(fd, m.b, m.n, 0), (ssize_t)m.n);
                if (i % 25 == 24)
                        usleep(2000);
        }
        uint64_t sent_ms = ms_now() - t0;
        unsigned got = 0;
        static uint8_t ans[DNS_MSG_MAX];
        struct pollfd p = { fd, POLLIN, 0 };
        while (poll(&p, 1, 500) == 1 && recv(fd, ans, sizeof ans, 0) > 0)
                got++;
        resolver_stats(w->res, &after);
        uint64_t received = after.queries - before.queries;
        uint64_t limited = after.rate_limited - before.rate_limited;
        print_message("flood: sent 250 in %llu ms, resolver got %llu, answered %u, rate-limited %llu\n",
                      (unsigned long long)sent_ms, (unsigned long long)received, got, (unsigned long long)limited);
        /* the burst, and at most 50/s more over the time it took */
        assert_true(got >= RESOLVER_RATE_BURST - 5);
        assert_true(got <= RESOLVER_RATE_BURST + RESOLVER_RATE_PER_S * (sent_ms + 600) / 1000 + 2);
        assert_true(limited >= 100);
        assert_int_equal(limited + got, received);
        /* another client is not affected */
        int other = client(w, "127.0.0.1", SOCK_DGRAM);
        assert_true(ask_udp(other, "good.example", DNS_TYPE_HTTPS, 7, ans, 2000) > 0);
        close(other);
        close(fd);
}

static size_t tcp_read_answer(int fd, uint8_t *ans) {
        size_t have = 0;
        while (have < 2 || have < 2 + (size_t)(ans[0] << 8 | ans[1])) {
                struct pollfd p = { fd, POLLIN, 0 };
                if (poll(&p, 1, 3000) != 1)
                        return 0;
                size_t want = have < 2 ? 2 - have : 2 + (size_t)(ans[0] << 8 | ans[1]) - have;
                ssize_t n = recv(fd, ans + have, want, 0);
                if (n <= 0)
                        return 0;
                have += (size_t)n;
        }
        return have - 2;
}

static void test_tcp(void **state) {
        struct world *w = *state;
        static uint8_t ans[DNS_MSG_MAX + 2];
        struct dns_response r;
        /* UDP: the upstream says TC, the resolver asks it over TCP, the client gets the 512
         * bytes that fit and TC */
        int ufd = client(w, "127.0.0.1", SOCK_DGRAM);
        size_t n = ask_udp(ufd, "big.example", DNS_TYPE_A, 501, ans, 2000);
        assert_true(n > 0 && n <= 512);
        assert_int_equal(dns_parse_response(ans, n, &r), 0);
        assert_true(r.flags & DNS_FLAG_TC);
        assert_true(r.n_answer > 0 && r.n_answer < 60);
        dns_response_clear(&r);
        assert_true(fake_count(&w->fake, &w->fake.asked_tcp) >= 1);
        close(ufd);

        /* TCP: all 60, and two queries in one write answered in order */
        int fd = client(w, "127.0.0.1", SOCK_STREAM);
        struct mb m, two;
        two.n = 0;
        query(&m, "big.example", DNS_TYPE_A, 502, false);
        two.b[two.n++] = (uint8_t)(m.n >> 8), two.b[two.n++] = (uint8_t)m.n;
        memcpy(two.b + two.n, m.b, m.n), two.n += m.n;
        query(&m, "unlisted.example", DNS_TYPE_A, 503, true);
        two.b[two.n++] = (uint8_t)(m.n >> 8), two.b[two.n++] = (uint8_t)m.n;
        memcpy(two.b + two.n, m.b, m.n), two.n += m.n;
        assert_int_equal(send(fd, two.b, two.n, MSG_NOSIGNAL), (ssize_t)two.n);
        n = tcp_read_answer(fd, ans);
        assert_true(n > 512);
        assert_int_equal(dns_parse_response(ans + 2, n, &r), 0);
        assert_int_equal(r.id, 502);
        assert_false(r.flags & DNS_FLAG_TC);
        assert_int_equal(r.n_answer, 60);
        dns_response_clear(&r);
        assert_true(find_call('a', "203.0.113.159", NULL));
        n = tcp_read_answer(fd, ans);
        assert_true(n > 0);
        assert_int_equal(dns_parse_response(ans + 2, n, &r), 0);
        assert_int_equal(r.id, 503);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NXDOMAIN);
        assert_int_equal(r.n_additional, 1); /* it asked with EDNS */
        dns_response_clear(&r);
        /* a length over what follows, then the connection closes: nothing breaks */
        uint8_t bad[3] = { 0xff, 0xff, 0 };
        send(fd, bad, sizeof bad, MSG_NOSIGNAL);
        close(fd);
        ufd = client(w, "127.0.0.1", SOCK_DGRAM);
        assert_true(ask_udp(ufd, "good.example", DNS_TYPE_HTTPS, 504, ans, 2000) > 0);
        close(ufd);
}

/* An idle connection closes after tcp_idle_ms; past RESOLVER_TCP_CLIENTS_MAX a new one is
 * closed at once while the others stay. */
static void test_tcp_limits(void **state) {
        struct world *w = *state;
        uint8_t b[16];
        uint64_t t0 = ms_now();
        int fd = client(w, "127.0.0.1", SOCK_STREAM);
        struct pollfd p = { fd, POLLIN, 0 };
        assert_int_equal(poll(&p, 1, 3000), 1);
        assert_int_equal(recv(fd, b, sizeof b, 0), 0);
        uint64_t took = ms_now() - t0;
        assert_true(took >= 350 && took < 2000);
        close(fd);

        int fds[RESOLVER_TCP_CLIENTS_MAX];
        for (int i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                fds[i] = client(w, "127.0.0.1", SOCK_STREAM);
        usleep(50000); /* all accepted */
        int extra = client(w, "127.0.0.1", SOCK_STREAM);
        p.fd = extra;
        assert_int_equal(poll(&p, 1, 300), 1);
        assert_int_equal(recv(extra, b, sizeof b, 0), 0);
        close(extra);
        /* the first ones are still open (their idle time is not over) */
        p.fd = fds[0];
        assert_int_equal(poll(&p, 1, 0), 0);
        for (int i = 0; i < RESOLVER_TCP_CLIENTS_MAX; i++)
                close(fds[i]);
}

/* At most RESOLVER_CLIENT_INFLIGHT_MAX forwarded queries of one client at a time: more
 * are dropped (its resolver asks again), and the others' queries still go through. */
static void test_inflight_cap(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        struct mb m;
        struct resolver_stats before, after;
        resolver_stats(w->res, &before);
        for (int i = 0; i < RESOLVER_CLIENT_INFLIGHT_MAX + 8; i++) {
                query(&m, "slow.example", DNS_TYPE_A, (uint16_t)(1100 + i), false);
                assert_int_equal(send(fd, m.b, m.n, 0), (ssize_t)m.n);
        }
        usleep(300000);
        resolver_stats(w->res, &after);
        assert_int_equal(after.dropped - before.dropped, 8);
        assert_int_equal(after.rate_limited - before.rate_limited, 0);
        static uint8_t ans[DNS_MSG_MAX];
        int other = client(w, "127.0.0.3", SOCK_DGRAM);
        assert_true(ask_udp(other, "rebind.example", DNS_TYPE_A, 1200, ans, 2000) > 0);
        close(other);
        close(fd);
}

static void test_timeout(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        uint64_t t0 = ms_now();
        size_t n = ask_udp(fd, "slow.example", DNS_TYPE_A, 601, ans, 4000);
        uint64_t took = ms_now() - t0;
        print_message("SERVFAIL after %llu ms\n", (unsigned long long)took);
        assert_true(n > 0);
        assert_int_equal(ans[3] & 0xf, DNS_RCODE_SERVFAIL);
        assert_true(took >= RESOLVER_QUERY_MS - 100 && took <= RESOLVER_QUERY_MS + 400);
        struct resolver_stats st;
        resolver_stats(w->res, &st);
        assert_int_equal(st.upstream_failures, 1);
        /* tried more than once (the retry after RESOLVER_RETRY_MS) */
        assert_true(fake_count(&w->fake, &w->fake.asked_total) - fake_count(&w->fake, &w->fake.asked_denied) >= 2);
        /* queries still in flight at close: teardown closes with these pending */
        struct mb m;
        for (int i = 0; i < 5; i++) {
                query(&m, "slow.example", DNS_TYPE_A, (uint16_t)(610 + i), false);
                send(fd, m.b, m.n, 0);
        }
        int tfd = client(w, "127.0.0.1", SOCK_STREAM);
        uint8_t l[2] = { (uint8_t)(m.n >> 8), (uint8_t)m.n };
        send(tfd, l, 2, MSG_NOSIGNAL);
        send(tfd, m.b, m.n, MSG_NOSIGNAL);
        usleep(100000);
        close(tfd);
        close(fd);
}

static void test_retry(void **state) {
        struct world *w = *state;
        int fd = client(w, "127.0.0.1", SOCK_DGRAM);
        static uint8_t ans[DNS_MSG_MAX];
        /* the first upstream never answers: each query that starts there moves on */
        for (int i = 0; i < 6; i++) {
                uint64_t t0 = ms_now();
                size_t n = ask_udp(fd, "good.example", DNS_TYPE_A, (uint16_t)(700 + i), ans, 2500);
                assert_true(n > 0);
                assert_int_equal(ans[3] & 0xf, DNS_RCODE_NOERROR);
                assert_true(ms_now() - t0 < RESOLVER_RETRY_MS + 500);
        }
        assert_int_equal(fake_count(&w->fake, &w->fake.asked_total) - fake_count(&w->fake, &w->fake.asked_denied), 6);
        close(fd);
}

/* ---- IPv6, and a wildcard listener ---- */

/* A resolver listening on the given addresses (one port), with one upstream that is never
 * asked (the queries here are answered locally). */
static struct resolver *open_local(const struct resolver_sockaddr *l, size_t n) {
        struct resolver_opts o = { .n_listen = n, .n_upstream = 1,
                                   .hooks = { .allow = h_allow, .deny = h_deny, .closed = h_closed } };
        memcpy(o.listen, l, n * sizeof *l);
        o.upstream[0].family = AF_INET;
        inet_pton(AF_INET, "127.0.0.1", o.upstream[0].addr);
        o.upstream[0].port = 9; /* discard: nothing is forwarded here */
        struct resolver *r = NULL;
        return resolver_open(&o, &r) == 0 ? r : NULL;
}

/* A UDP client from src to dst:port (either family); -1 when it cannot be made. */
static int client_any(int family, const char *src, const char *dst, uint16_t port) {
        int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        struct sockaddr_storage ss = { 0 }, ds = { 0 };
        socklen_t sl;
        if (family == AF_INET) {
                struct sockaddr_in *a = (struct sockaddr_in *)&ss, *b = (struct sockaddr_in *)&ds;
                a->sin_family = b->sin_family = AF_INET;
                inet_pton(AF_INET, src, &a->sin_addr);
                inet_pton(AF_INET, dst, &b->sin_addr);
                b->sin_port = htons(port);
                sl = sizeof *a;
        } else {
                struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss, *b = (struct sockaddr_in6 *)&ds;
                a->sin6_family = b->sin6_family = AF_INET6;
                inet_pton(AF_INET6, src, &a->sin6_addr);
                inet_pton(AF_INET6, dst, &b->sin6_addr);
                b->sin6_port = htons(port);
                sl = sizeof *a;
        }
        if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || connect(fd, (struct sockaddr *)&ds, sl) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static void test_ipv6(void **state) {
        struct resolver_sockaddr l[2] = { { .family = AF_INET }, { .family = AF_INET6 } };
        inet_pton(AF_INET, "127.0.0.1", l[0].addr);
        inet_pton(AF_INET6, "::1", l[1].addr);
        struct resolver *r = open_local(l, 2);
        assert_non_null(r);
        struct net_policy p = { .egress = true };
        uint8_t a6[16];
        inet_pton(AF_INET6, "::1", a6);
        int fd = client_any(AF_INET6, "::1", "::1", resolver_port(r));
        if (fd < 0) {
                resolver_close(r);
                skip(); /* no IPv6 on this host's loopback */
        }
        static uint8_t ans[DNS_MSG_MAX];
        /* not a client yet: dropped */
        assert_int_equal(ask_udp(fd, "v6.example", DNS_TYPE_HTTPS, 801, ans, 300), 0);
        assert_int_equal(resolver_set_client(r, AF_INET6, a6, 11, &p), 0);
        size_t n = ask_udp(fd, "v6.example", DNS_TYPE_HTTPS, 802, ans, 2000);
        assert_true(n > 0);
        assert_int_equal(ans[3] & 0xf, DNS_RCODE_NOERROR);
        /* the IPv4 listener on the same port answers IPv4 clients */
        uint8_t a4[4];
        inet_pton(AF_INET, "127.0.0.1", a4);
        assert_int_equal(resolver_set_client(r, AF_INET, a4, 12, &p), 0);
        int fd4 = client_any(AF_INET, "127.0.0.1", "127.0.0.1", resolver_port(r));
        assert_true(fd4 >= 0);
        assert_true(ask_udp(fd4, "v4.example", DNS_TYPE_HTTPS, 803, ans, 2000) > 0);
        close(fd4);
        close(fd);
        resolver_close(r);
}

static int lo_up(void) {
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
        int k = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 ? 0 : -1;
        ifr.ifr_flags |= IFF_UP;
        if (k == 0 && ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                k = -1;
        if (s >= 0)
                close(s);
        return k;
}

/* In the child, inside its own network namespace: 0 passed, 1 failed, 77 skipped. */
static int wildcard_child(void) {
        if (unshare(CLONE_NEWNET) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
                return 77;
        if (lo_up() < 0)
                return 77;
        struct resolver_sockaddr l[2] = { { .family = AF_INET }, { .family = AF_INET6 } }; /* 0.0.0.0, :: */
        struct resolver *r = open_local(l, 2);
        if (!r)
                return 1;
        struct net_policy p = { .egress = true };
        uint8_t a4[4];
        inet_pton(AF_INET, "127.0.0.1", a4);
        if (resolver_set_client(r, AF_INET, a4, 1, &p) < 0)
                return 1;
        /* sent to 127.0.0.9: the answer must come from 127.0.0.9 (the connected client
         * takes nothing else), not from the address the kernel would pick (127.0.0.1) */
        int fd = client_any(AF_INET, "127.0.0.1", "127.0.0.9", resolver_port(r));
        static uint8_t ans[DNS_MSG_MAX];
        int rc = fd >= 0 && ask_udp(fd, "w.example", DNS_TYPE_HTTPS, 901, ans, 2000) > 0 ? 0 : 1;
        if (fd >= 0)
                close(fd);
        uint8_t a6[16];
        inet_pton(AF_INET6, "::1", a6);
        if (rc == 0 && resolver_set_client(r, AF_INET6, a6, 1, &p) == 0) {
                fd = client_any(AF_INET6, "::1", "::1", resolver_port(r));
                if (fd >= 0) {
                        rc = ask_udp(fd, "w.example", DNS_TYPE_HTTPS, 902, ans, 2000) > 0 ? 0 : 1;
                        close(fd);
                }
        }
        resolver_close(r);
        return rc;
}

static void test_wildcard_netns(void **state) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(wildcard_child());
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) == 77)
                skip(); /* no network namespace for us here */
        assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_allowed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rebinding, setup, teardown),
                cmocka_unit_test_setup_teardown(test_denied_unlisted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_denied_requery, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unknown_client, setup, teardown),
                cmocka_unit_test_setup_teardown(test_flood, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tcp, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tcp_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_inflight_cap, setup, teardown),
                cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
                cmocka_unit_test_setup_teardown(test_retry, setup_retry, teardown),
                cmocka_unit_test(test_ipv6),
                cmocka_unit_test(test_wildcard_netns),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
