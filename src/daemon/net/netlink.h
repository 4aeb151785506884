/* A small rtnetlink client of our own (raw NETLINK_ROUTE sockets) for the network room
 * (net.c): network namespaces, veth pairs, links up and down, addresses, default routes,
 * per-namespace sysctls. Every call returns 0 or a negative errno; err (when given) then
 * says what failed, for people. No global state: every call is thread-safe. */
#pragma once
#include <stdint.h>
#include <stddef.h>

#define NL_ERR_MAX 256

/* A rtnetlink socket bound in one network namespace. */
struct nl;

/* A socket in the namespace of netns_fd (-1: the caller's). The socket stays in that
 * namespace whatever thread uses it later. */
int nl_open(int netns_fd, struct nl **ret, char *err, size_t errlen);
struct nl *nl_close(struct nl *n);

/* A new, empty network namespace (lo down), as an O_CLOEXEC fd: made by a short-lived
 * thread that unshares, so the caller's own namespace never changes. */
int nl_netns_new(int *ret_fd, char *err, size_t errlen);
/* Runs fn(arg) on a short-lived thread that joined netns_fd first; fn's return value. */
int nl_in_netns(int netns_fd, int (*fn)(void *arg), void *arg, char *err, size_t errlen);
/* Writes value to /proc/sys/<path> ("net/ipv4/ip_forward") in netns_fd (-1: the caller's). */
int nl_sysctl_write(int netns_fd, const char *path, const char *value, char *err, size_t errlen);

/* A veth pair: name in n's namespace, peer named peer in the namespace of peer_netns_fd
 * (made there directly, never visible in n's). -EEXIST if name exists. */
int nl_veth_add(struct nl *n, const char *name, const char *peer, int peer_netns_fd, char *err, size_t errlen);
/* Moves a link into another namespace. */
int nl_link_move(struct nl *n, const char *name, int netns_fd, char *err, size_t errlen);
/* Interface index of name (-ENODEV if none). */
int nl_link_index(struct nl *n, const char *name, int *ret, char *err, size_t errlen);
int nl_link_up(struct nl *n, const char *name, char *err, size_t errlen);
/* Deletes a link (a veth takes its peer with it). -ENODEV if none. */
int nl_link_del(struct nl *n, const char *name, char *err, size_t errlen);
/* Calls fn for every link whose name starts with prefix; stops at fn's first non-zero. */
int nl_link_each(struct nl *n, const char *prefix, int (*fn)(const char *name, void *arg), void *arg, char *err,
                 size_t errlen);
/* addr: 4 or 16 bytes in network order. IPv6 addresses go on without DAD (nodad). */
int nl_addr_add(struct nl *n, const char *ifname, int family, const uint8_t *addr, unsigned prefix, char *err,
                size_t errlen);
/* Default route of family via gw on ifname. */
int nl_route_default(struct nl *n, int family, const uint8_t *gw, const char *ifname, char *err, size_t errlen);
