/* Our rtnetlink client (netlink.h): requests are built in a fixed buffer, sent with
 * NLM_F_ACK and the kernel's answer read back; a namespace is entered only by short-lived
 * threads, so no thread of the daemon ever changes its namespace for longer than a call. */
#include "daemon/net/netlink.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

#include "common/macros.h"

#define NL_BUF 8192

struct nl {
        int fd;
        uint32_t seq;
};

_printf_(3, 4) static int fail(char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return 0;
}

/* ---------------- threads in another namespace ---------------- */

struct ns_call {
        int netns_fd;
        int (*fn)(void *);
        void *arg;
        int r;
        bool joined;
};

static void *ns_thread(void *p) {
        struct ns_call *c = p;
        if (c->netns_fd >= 0 && setns(c->netns_fd, CLONE_NEWNET) < 0) {
                c->r = -errno;
                return NULL;
        }
        c->joined = true;
        c->r = c->fn(c->arg);
        return NULL;
}

int nl_in_netns(int netns_fd, int (*fn)(void *arg), void *arg, char *err, size_t errlen) {
        struct ns_call c = { .netns_fd = netns_fd, .fn = fn, .arg = arg };
        pthread_t t;
        int r = pthread_create(&t, NULL, ns_thread, &c);
        if (r) {
                fail(err, errlen, "start a thread: %s", strerror(r));
                return -r;
        }
        pthread_join(t, NULL);
        if (!c.joined)
                fail(err, errlen, "join the network namespace: %s", strerror(-c.r));
        return c.r;
}

static int netns_new_fn(void *arg) {
        if (unshare(CLONE_NEWNET) < 0)
                return -errno;
        int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        *(int *)arg = fd;
        return 0;
}

int nl_netns_new(int *ret_fd, char *err, size_t errlen) {
        int fd = -EBADF;
        int r = nl_in_netns(-1, netns_new_fn, &fd, err, errlen);
        if (r < 0) {
                fail(err, errlen, "make a network namespace: %s", strerror(-r));
                return r;
        }
        *ret_fd = fd;
        return 0;
}

struct sysctl_call {
        const char *path, *value;
};

static int sysctl_fn(void *arg) {
        struct sysctl_call *c = arg;
        char p[256];
        if ((size_t)snprintf(p, sizeof p, "/proc/sys/%s", c->path) >= sizeof p)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t n = strlen(c->value);
        ssize_t w = write(fd, c->value, n);
        if (w < 0)
                return -errno;
        return (size_t)w == n ? 0 : -EIO;
}

int nl_sysctl_write(int netns_fd, const char *path, const char *value, char *err, size_t errlen) {
        struct sysctl_call c = { .path = path, .value = value };
        int r = netns_fd < 0 ? sysctl_fn(&c) : nl_in_netns(netns_fd, sysctl_fn, &c, err, errlen);
        if (r < 0)
                fail(err, errlen, "sysctl %s=%s: %s", path, value, strerror(-r));
        return r;
}

/* ---------------- sockets ---------------- */

static int socket_fn(void *arg) {
        int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (fd < 0)
                return -errno;
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
        *(int *)arg = fd;
        return 0;
}

int nl_open(int netns_fd, struct nl **ret, char *err, size_t errlen) {
        struct nl *n = calloc(1, sizeof *n);
        if (!n)
                return -ENOMEM;
        n->fd = -EBADF;
        int r = netns_fd < 0 ? socket_fn(&n->fd) : nl_in_netns(netns_fd, socket_fn, &n->fd, err, errlen);
        if (r < 0) {
                free(n);
                fail(err, errlen, "open a netlink socket: %s", strerror(-r));
                return r;
        }
        *ret = n;
        return 0;
}

struct nl *nl_close(struct nl *n) {
        if (n) {
                safe_close(n->fd);
                free(n);
        }
        return NULL;
}

/* ---------------- messages ---------------- */

struct msg {
        union {
                struct nlmsghdr h;
                uint8_t b[NL_BUF];
        } u;
        bool overflow;
};

static void *msg_put(struct msg *m, size_t len) {
        size_t at = NLMSG_ALIGN(m->u.h.nlmsg_len);
        if (at + NLMSG_ALIGN(len) > sizeof m->u.b) {
                m->overflow = true;
                return NULL;
        }
        m->u.h.nlmsg_len = (uint32_t)(at + len);
        void *p = m->u.b + at;
        memset(p, 0, NLMSG_ALIGN(len));
        return p;
}

static struct msg *msg_new(uint16_t type, uint16_t flags, const void *hdr, size_t hdrlen) {
        struct msg *m = calloc(1, sizeof *m);
        if (!m)
                return NULL;
        m->u.h.nlmsg_len = NLMSG_HDRLEN;
        m->u.h.nlmsg_type = type;
        m->u.h.nlmsg_flags = NLM_F_REQUEST | flags;
        void *p = msg_put(m, hdrlen);
        if (p)
                memcpy(p, hdr, hdrlen);
        return m;
}

static struct rtattr *attr_put(struct msg *m, uint16_t type, const void *data, size_t len) {
        struct rtattr *a = msg_put(m, RTA_LENGTH(len));
        if (!a)
                return NULL;
        a->rta_type = type;
        a->rta_len = (uint16_t)RTA_LENGTH(len);
        if (len)
                memcpy(RTA_DATA(a), data, len);
        return a;
}

static void attr_str(struct msg *m, uint16_t type, const char *s) { attr_put(m, type, s, strlen(s) + 1); }
static void attr_u32(struct msg *m, uint16_t type, uint32_t v) { attr_put(m, type, &v, sizeof v); }

static struct rtattr *nest_begin(struct msg *m, uint16_t type) { return attr_put(m, type, NULL, 0); }
static void nest_end(struct msg *m, struct rtattr *a) {
        if (a)
                a->rta_len = (uint16_t)((uint8_t *)m->u.b + m->u.h.nlmsg_len - (uint8_t *)a);
}

/* Sends m and reads the answer: an ack (0 or the kernel's error, with its extended
 * message in err), or for a dump/get each data message to fn. */
static int nl_talk(struct nl *n, struct msg *m, int (*fn)(const struct nlmsghdr *h, void *arg), void *arg,
                   char *ext, size_t extlen) {
        if (m->overflow)
                return -E2BIG;
        m->u.h.nlmsg_seq = ++n->seq;
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        ssize_t w;
        do
                w = sendto(n->fd, m->u.b, m->u.h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof sa);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return -errno;
        _cleanup_free_ uint8_t *buf = malloc(32768);
        if (!buf)
                return -ENOMEM;
        int result = 1, fn_r = 0;
        while (result > 0) {
                ssize_t got = recv(n->fd, buf, 32768, 0);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0)
                        return -errno;
                if (got == 0)
                        return -EIO;
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)got); h = NLMSG_NEXT(h, got)) {
                        if (h->nlmsg_seq != n->seq)
                                continue;
                        if (h->nlmsg_type == NLMSG_DONE) {
                                result = 0;
                                break;
                        }
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(h);
                                result = e->error;
                                if (e->error < 0 && ext && extlen && (h->nlmsg_flags & NLM_F_ACK_TLVS)) {
                                        /* the attributes follow the echoed request header (capped) */
                                        size_t off = sizeof *e + ((h->nlmsg_flags & NLM_F_CAPPED)
                                                                          ? 0
                                                                          : e->msg.nlmsg_len - NLMSG_HDRLEN);
                                        const uint8_t *p = (const uint8_t *)e + NLMSG_ALIGN(off);
                                        const uint8_t *end = (const uint8_t *)h + h->nlmsg_len;
                                        while (p + sizeof(struct nlattr) <= end) {
                                                const struct nlattr *na = (const void *)p;
                                                if (na->nla_len < sizeof *na || p + na->nla_len > end)
                                                        break;
                                                if ((na->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG)
                                                        snprintf(ext, extlen, "%.*s", (int)(na->nla_len - sizeof *na),
                                                                 (const char *)(na + 1));
                                                p += NLA_ALIGN(na->nla_len);
                                        }
                                }
                                break;
                        }
                        if (fn && fn_r == 0)
                                fn_r = fn(h, arg);
                        if (!(h->nlmsg_flags & NLM_F_MULTI) && !(m->u.h.nlmsg_flags & NLM_F_ACK)) {
                                result = 0;
                                break;
                        }
                }
        }
        return result < 0 ? result : fn_r < 0 ? fn_r : 0;
}

/* Runs m, frees it and turns a failure into "what: why (kernel's message)". */
static int run(struct nl *n, struct msg *m, int (*fn)(const struct nlmsghdr *, void *), void *arg, char *err,
               size_t errlen, const char *what) {
        if (!m)
                return -ENOMEM;
        char ext[160] = "";
        int r = nl_talk(n, m, fn, arg, ext, sizeof ext);
        free(m);
        if (r < 0)
                fail(err, errlen, "%s: %s%s%s%s", what, strerror(-r), ext[0] ? " (" : "", ext, ext[0] ? ")" : "");
        return r;
}

static bool name_ok(const char *name) { return name && name[0] && strlen(name) < IFNAMSIZ && !strchr(name, '/'); }

/* ---------------- links ---------------- */

int nl_veth_add(struct nl *n, const char *name, const char *peer, int peer_netns_fd, char *err, size_t errlen) {
        if (!name_ok(name) || !name_ok(peer))
                return fail(err, errlen, "veth: bad interface name"), -EINVAL;
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
        struct msg *m = msg_new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_str(m, IFLA_IFNAME, name);
        struct rtattr *info = nest_begin(m, IFLA_LINKINFO);
        attr_str(m, IFLA_INFO_KIND, "veth");
        struct rtattr *data = nest_begin(m, IFLA_INFO_DATA);
        struct rtattr *pe = nest_begin(m, VETH_INFO_PEER);
        struct ifinfomsg pifi = { .ifi_family = AF_UNSPEC };
        void *p = msg_put(m, sizeof pifi);
        if (p)
                memcpy(p, &pifi, sizeof pifi);
        attr_str(m, IFLA_IFNAME, peer);
        if (peer_netns_fd >= 0)
                attr_u32(m, IFLA_NET_NS_FD, (uint32_t)peer_netns_fd);
        nest_end(m, pe);
        nest_end(m, data);
        nest_end(m, info);
        char what[80];
        snprintf(what, sizeof what, "add veth %s (peer %s)", name, peer);
        return run(n, m, NULL, NULL, err, errlen, what);
}

int nl_link_move(struct nl *n, const char *name, int netns_fd, char *err, size_t errlen) {
        if (!name_ok(name))
                return fail(err, errlen, "move link: bad interface name"), -EINVAL;
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
        struct msg *m = msg_new(RTM_NEWLINK, NLM_F_ACK, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_str(m, IFLA_IFNAME, name);
        attr_u32(m, IFLA_NET_NS_FD, (uint32_t)netns_fd);
        char what[64];
        snprintf(what, sizeof what, "move link %s", name);
        return run(n, m, NULL, NULL, err, errlen, what);
}

static int index_fn(const struct nlmsghdr *h, void *arg) {
        if (h->nlmsg_type != RTM_NEWLINK)
                return 0;
        const struct ifinfomsg *ifi = NLMSG_DATA(h);
        *(int *)arg = ifi->ifi_index;
        return 0;
}

int nl_link_index(struct nl *n, const char *name, int *ret, char *err, size_t errlen) {
        if (!name_ok(name))
                return fail(err, errlen, "link index: bad interface name"), -EINVAL;
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
        struct msg *m = msg_new(RTM_GETLINK, 0, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_str(m, IFLA_IFNAME, name);
        attr_u32(m, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
        int idx = 0;
        char what[64];
        snprintf(what, sizeof what, "find link %s", name);
        int r = run(n, m, index_fn, &idx, err, errlen, what);
        if (r < 0)
                return r;
        if (idx <= 0)
                return fail(err, errlen, "%s: no such link", what), -ENODEV;
        *ret = idx;
        return 0;
}

int nl_link_up(struct nl *n, const char *name, char *err, size_t errlen) {
        if (!name_ok(name))
                return fail(err, errlen, "link up: bad interface name"), -EINVAL;
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
        struct msg *m = msg_new(RTM_NEWLINK, NLM_F_ACK, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_str(m, IFLA_IFNAME, name);
        char what[64];
        snprintf(what, sizeof what, "set link %s up", name);
        return run(n, m, NULL, NULL, err, errlen, what);
}

int nl_link_del(struct nl *n, const char *name, char *err, size_t errlen) {
        if (!name_ok(name))
                return fail(err, errlen, "delete link: bad interface name"), -EINVAL;
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
        struct msg *m = msg_new(RTM_DELLINK, NLM_F_ACK, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_str(m, IFLA_IFNAME, name);
        char what[64];
        snprintf(what, sizeof what, "delete link %s", name);
        return run(n, m, NULL, NULL, err, errlen, what);
}

struct each {
        const char *prefix;
        char (*names)[IFNAMSIZ];
        size_t n, cap;
};

static int each_fn(const struct nlmsghdr *h, void *arg) {
        struct each *e = arg;
        if (h->nlmsg_type != RTM_NEWLINK)
                return 0;
        const struct ifinfomsg *ifi = NLMSG_DATA(h);
        int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *ifi));
        for (const struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                if (a->rta_type != IFLA_IFNAME)
                        continue;
                const char *name = RTA_DATA(a);
                size_t l = strnlen(name, RTA_PAYLOAD(a));
                if (l >= IFNAMSIZ || strncmp(name, e->prefix, strlen(e->prefix)) != 0)
                        return 0;
                if (e->n == e->cap) {
                        size_t cap = e->cap ? e->cap * 2 : 16;
                        void *v = realloc(e->names, cap * sizeof *e->names);
                        if (!v)
                                return -ENOMEM;
                        e->names = v;
                        e->cap = cap;
                }
                memcpy(e->names[e->n], name, l);
                e->names[e->n++][l] = '\0';
        }
        return 0;
}

int nl_link_each(struct nl *n, const char *prefix, int (*fn)(const char *name, void *arg), void *arg, char *err,
                 size_t errlen) {
        struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
        struct msg *m = msg_new(RTM_GETLINK, NLM_F_DUMP, &ifi, sizeof ifi);
        if (!m)
                return -ENOMEM;
        attr_u32(m, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
        struct each e = { .prefix = prefix };
        /* collected first: fn may talk on the same socket */
        int r = run(n, m, each_fn, &e, err, errlen, "list links");
        for (size_t i = 0; r == 0 && i < e.n; i++)
                r = fn(e.names[i], arg);
        free(e.names);
        return r;
}

/* ---------------- addresses and routes ---------------- */

static size_t alen(int family) { return family == AF_INET ? 4 : family == AF_INET6 ? 16 : 0; }

int nl_addr_add(struct nl *n, const char *ifname, int family, const uint8_t *addr, unsigned prefix, char *err,
                size_t errlen) {
        size_t l = alen(family);
        if (!l || prefix > l * 8)
                return fail(err, errlen, "add address: bad family or prefix"), -EINVAL;
        int idx;
        int r = nl_link_index(n, ifname, &idx, err, errlen);
        if (r < 0)
                return r;
        struct ifaddrmsg ifa = { .ifa_family = (uint8_t)family, .ifa_prefixlen = (uint8_t)prefix,
                                 .ifa_flags = family == AF_INET6 ? IFA_F_NODAD : 0, .ifa_index = (uint32_t)idx };
        struct msg *m = msg_new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK, &ifa, sizeof ifa);
        if (!m)
                return -ENOMEM;
        attr_put(m, IFA_LOCAL, addr, l);
        attr_put(m, IFA_ADDRESS, addr, l);
        if (family == AF_INET6)
                attr_u32(m, IFA_FLAGS, IFA_F_NODAD);
        char what[64];
        snprintf(what, sizeof what, "add address to %s", ifname);
        return run(n, m, NULL, NULL, err, errlen, what);
}

int nl_route_default(struct nl *n, int family, const uint8_t *gw, const char *ifname, char *err, size_t errlen) {
        size_t l = alen(family);
        if (!l)
                return fail(err, errlen, "default route: bad family"), -EINVAL;
        int idx;
        int r = nl_link_index(n, ifname, &idx, err, errlen);
        if (r < 0)
                return r;
        struct rtmsg rt = { .rtm_family = (uint8_t)family, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_STATIC,
                            .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST };
        struct msg *m = msg_new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK, &rt, sizeof rt);
        if (!m)
                return -ENOMEM;
        attr_put(m, RTA_GATEWAY, gw, l);
        attr_u32(m, RTA_OIF, (uint32_t)idx);
        return run(n, m, NULL, NULL, err, errlen, family == AF_INET ? "add IPv4 default route" : "add IPv6 default route");
}
