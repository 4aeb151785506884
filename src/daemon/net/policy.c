/* A session's network policy as data (policy.h): rule text <-> struct net_rule, the API's
 * JSON <-> struct net_policy, bandwidth units, what a policy says of a name, and the
 * always-closed address ranges. No system calls: the room (net.c) and the resolver act on it. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/json.h"
#include "common/macros.h"
#include "daemon/net/policy.h"

_printf_(3, 4) static int fail(char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

static void rule_clear(struct net_rule *r) {
        free(r->name);
        *r = (struct net_rule){ 0 };
}

static void rules_free(struct net_rule *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                rule_clear(&v[i]);
        free(v);
}

void net_policy_clear(struct net_policy *p) {
        if (!p)
                return;
        rules_free(p->allow, p->n_allow);
        rules_free(p->deny, p->n_deny);
        *p = (struct net_policy){ 0 };
}

static int rules_copy(struct net_rule **dst, const struct net_rule *src, size_t n) {
        *dst = NULL;
        if (n == 0)
                return 0;
        struct net_rule *v = calloc(n, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                v[i] = src[i];
                v[i].name = NULL;
                if (src[i].name && !(v[i].name = strdup(src[i].name))) {
                        rules_free(v, i);
                        return -ENOMEM;
                }
        }
        *dst = v;
        return 0;
}

int net_policy_copy(struct net_policy *dst, const struct net_policy *src) {
        struct net_policy p = { .egress = src->egress, .bandwidth_bps = src->bandwidth_bps };
        if (rules_copy(&p.allow, src->allow, src->n_allow) < 0)
                return -ENOMEM;
        p.n_allow = src->n_allow;
        if (rules_copy(&p.deny, src->deny, src->n_deny) < 0) {
                net_policy_clear(&p);
                return -ENOMEM;
        }
        p.n_deny = src->n_deny;
        *dst = p;
        return 0;
}

/* ---- rules as text ---- */

/* Decimal digits only, value 1..max; no sign, no leading zero. */
static int parse_decimal(const char *s, size_t n, unsigned max, unsigned *ret) {
        if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
                return -EINVAL;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

static bool host_bits_zero(const uint8_t *a, unsigned bytes, unsigned prefix) {
        for (unsigned i = 0; i < bytes; i++) {
                unsigned keep = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
                uint8_t mask = keep ? (uint8_t)(0xff << (8 - keep)) : 0;
                if (a[i] & ~mask)
                        return false;
        }
        return true;
}

static void mask_host_bits(uint8_t *a, unsigned bytes, unsigned prefix) {
        for (unsigned i = 0; i < bytes; i++) {
                unsigned keep = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
                a[i] &= keep ? (uint8_t)(0xff << (8 - keep)) : 0;
        }
}

/* "addr" or "addr/prefix" of one family (s is n bytes, not terminated). 1 if it is one,
 * 0 if it does not look like an address of that family, -EINVAL with err if it looks
 * like one but is wrong. */
static int parse_cidr(const char *text, const char *s, size_t n, int family, struct net_rule *r, char *err,
                      size_t errlen) {
        char a[INET6_ADDRSTRLEN + 8];
        const char *slash = memchr(s, '/', n);
        size_t alen = slash ? (size_t)(slash - s) : n;
        unsigned bits = family == AF_INET ? 32 : 128;
        if (alen == 0 || alen >= sizeof a)
                return 0;
        memcpy(a, s, alen);
        a[alen] = '\0';
        uint8_t addr[16] = { 0 };
        if (inet_pton(family, a, addr) != 1)
                return 0;
        unsigned prefix = bits;
        if (slash) {
                size_t plen = n - alen - 1;
                if (parse_decimal(slash + 1, plen, bits, &prefix) < 0)
                        return fail(err, errlen, "\"%s\": the prefix length must be 0..%u", text, bits);
        }
        if (!host_bits_zero(addr, bits / 8, prefix)) {
                uint8_t net[16];
                char fixed[INET6_ADDRSTRLEN];
                memcpy(net, addr, sizeof net);
                mask_host_bits(net, bits / 8, prefix);
                inet_ntop(family, net, fixed, sizeof fixed);
                return fail(err, errlen, "\"%s\": host bits set after /%u (the network is %s/%u)", text, prefix, fixed,
                            prefix);
        }
        r->kind = NET_RULE_CIDR;
        r->family = family;
        r->prefix = (uint8_t)prefix;
        memcpy(r->addr, addr, sizeof r->addr);
        return 1;
}

/* A DNS name (n bytes at s): letters, digits, '-', '_' and dots; labels of 1..63; at most
 * NET_NAME_MAX; one trailing dot is dropped; lowercased into out. The last label may not
 * be all digits (that is a mistyped IPv4 address, not a name). */
static int parse_name(const char *text, const char *s, size_t n, char *out, char *err, size_t errlen) {
        if (n > 0 && s[n - 1] == '.')
                n--;
        if (n == 0)
                return fail(err, errlen, "\"%s\": empty name", text);
        if (n > NET_NAME_MAX)
                return fail(err, errlen, "\"%s\": a name has at most %d characters", text, NET_NAME_MAX);
        size_t label = 0;
        bool digits_only = true;
        for (size_t i = 0; i <= n; i++) {
                char c = i < n ? s[i] : '.';
                if (c == '.') {
                        if (label == 0)
                                return fail(err, errlen, "\"%s\": empty label in the name", text);
                        if (label > 63)
                                return fail(err, errlen, "\"%s\": a label has at most 63 characters", text);
                        if (i < n) {
                                out[i] = '.';
                                digits_only = true;
                        }
                        label = 0;
                        continue;
                }
                if (c == '*')
                        return fail(err, errlen, "\"%s\": '*' only as \"*.name\" at the start", text);
                if (!isascii((unsigned char)c) ||
                    !(isalnum((unsigned char)c) || c == '-' || c == '_'))
                        return fail(err, errlen,
                                    "\"%s\": not an address or a name (a name has letters, digits, '-', '_' and dots)",
                                    text);
                if (!isdigit((unsigned char)c))
                        digits_only = false;
                out[i] = (char)tolower((unsigned char)c);
                label++;
        }
        if (digits_only)
                return fail(err, errlen, "\"%s\": not a valid IPv4 address", text);
        out[n] = '\0';
        return 0;
}

static int parse_port(const char *text, const char *s, size_t n, uint16_t *port, char *err, size_t errlen) {
        unsigned v;
        if (parse_decimal(s, n, 65535, &v) < 0 || v == 0)
                return fail(err, errlen, "\"%s\": the port must be 1..65535", text);
        *port = (uint16_t)v;
        return 0;
}

int net_rule_parse(const char *text, struct net_rule *ret, char *err, size_t errlen) {
        struct net_rule r = { 0 };
        if (!text || !*text)
                return fail(err, errlen, "empty rule");
        size_t len = strlen(text);
        if (len >= NET_RULE_TEXT_MAX)
                return fail(err, errlen, "a rule has at most %d characters", NET_RULE_TEXT_MAX - 1);
        for (size_t i = 0; i < len; i++)
                if (isspace((unsigned char)text[i]))
                        return fail(err, errlen, "\"%s\": blank inside a rule", text);

        if (text[0] == '[') {
                /* "[v6]", "[v6]:port", "[v6/prefix]:port" */
                const char *close = strchr(text, ']');
                if (!close)
                        return fail(err, errlen, "\"%s\": '[' without ']'", text);
                int k = parse_cidr(text, text + 1, (size_t)(close - text - 1), AF_INET6, &r, err, errlen);
                if (k < 0)
                        return k;
                if (k == 0)
                        return fail(err, errlen, "\"%s\": not an IPv6 address inside [ ]", text);
                if (close[1] == ':') {
                        if (parse_port(text, close + 2, strlen(close + 2), &r.port, err, errlen) < 0)
                                return -EINVAL;
                } else if (close[1])
                        return fail(err, errlen, "\"%s\": after ']' only \":port\"", text);
                *ret = r;
                return 0;
        }

        const char *first_colon = strchr(text, ':'), *last_colon = strrchr(text, ':');
        if (first_colon && first_colon != last_colon) {
                /* two colons or more: a bare IPv6 address or network, which takes no port */
                int k = parse_cidr(text, text, len, AF_INET6, &r, err, errlen);
                if (k < 0)
                        return k;
                if (k == 0)
                        return fail(err, errlen, "\"%s\": not an IPv6 address (with a port: \"[2001:db8::1]:443\")",
                                    text);
                *ret = r;
                return 0;
        }

        size_t hlen = len;
        if (last_colon) {
                hlen = (size_t)(last_colon - text);
                if (parse_port(text, last_colon + 1, len - hlen - 1, &r.port, err, errlen) < 0)
                        return -EINVAL;
        }
        uint16_t port = r.port;
        int k = parse_cidr(text, text, hlen, AF_INET, &r, err, errlen);
        if (k < 0)
                return k;
        if (k > 0) {
                r.port = port;
                *ret = r;
                return 0;
        }
        if (memchr(text, '/', hlen))
                return fail(err, errlen, "\"%s\": not an address/prefix", text);

        const char *name = text;
        r.kind = NET_RULE_NAME;
        if (hlen >= 1 && text[0] == '*') {
                if (hlen < 3 || text[1] != '.')
                        return fail(err, errlen, "\"%s\": a wildcard is \"*.name\"", text);
                r.kind = NET_RULE_SUFFIX;
                name = text + 2;
                hlen -= 2;
        }
        char buf[NET_NAME_MAX + 2];
        if (hlen > NET_NAME_MAX + 1)
                return fail(err, errlen, "\"%s\": a name has at most %d characters", text, NET_NAME_MAX);
        if (parse_name(text, name, hlen, buf, err, errlen) < 0)
                return -EINVAL;
        r.name = strdup(buf);
        if (!r.name)
                return -ENOMEM;
        *ret = r;
        return 0;
}

void net_rule_format(const struct net_rule *r, char *buf, size_t size) {
        char a[INET6_ADDRSTRLEN], p[8] = "", port[8] = "";
        if (r->port)
                snprintf(port, sizeof port, ":%u", (unsigned)r->port);
        switch (r->kind) {
        case NET_RULE_NAME:
                snprintf(buf, size, "%s%s", r->name, port);
                return;
        case NET_RULE_SUFFIX:
                snprintf(buf, size, "*.%s%s", r->name, port);
                return;
        case NET_RULE_CIDR:
                break;
        }
        inet_ntop(r->family, r->addr, a, sizeof a);
        if (r->prefix != (r->family == AF_INET ? 32 : 128))
                snprintf(p, sizeof p, "/%u", (unsigned)r->prefix);
        if (r->family == AF_INET6 && r->port)
                snprintf(buf, size, "[%s%s]%s", a, p, port);
        else
                snprintf(buf, size, "%s%s%s", a, p, port);
}

int net_bandwidth_parse(const char *text, uint64_t *bps) {
        if (!text || !isdigit((unsigned char)text[0]))
                return -EINVAL;
        /* integer and fraction digits exactly, no floating point: "1.5gbit" is 1500000000 */
        uint64_t whole = 0, frac = 0, frac_div = 1;
        const char *s = text;
        for (; isdigit((unsigned char)*s); s++) {
                if (whole > NET_BANDWIDTH_MAX)
                        return -ERANGE;
                whole = whole * 10 + (uint64_t)(*s - '0');
        }
        if (*s == '.') {
                s++;
                if (!isdigit((unsigned char)*s))
                        return -EINVAL;
                for (; isdigit((unsigned char)*s); s++) {
                        if (frac_div >= 1000000000ull)
                                return -EINVAL; /* more than 9 decimals: nobody means that */
                        frac = frac * 10 + (uint64_t)(*s - '0');
                        frac_div *= 10;
                }
        }
        uint64_t mult;
        if (!*s)
                mult = 1;
        else if (!strcasecmp(s, "bit"))
                mult = 1;
        else if (!strcasecmp(s, "kbit"))
                mult = 1000;
        else if (!strcasecmp(s, "mbit"))
                mult = 1000000;
        else if (!strcasecmp(s, "gbit"))
                mult = 1000000000;
        else
                return -EINVAL;
        if (whole > NET_BANDWIDTH_MAX / mult)
                return -ERANGE;
        /* the fraction must come out as whole bits */
        if ((frac * mult) % frac_div)
                return -EINVAL;
        uint64_t v = whole * mult + frac * mult / frac_div;
        if (v < NET_BANDWIDTH_MIN || v > NET_BANDWIDTH_MAX)
                return -ERANGE;
        *bps = v;
        return 0;
}

/* ---- the API's JSON ---- */

static bool rule_equal(const struct net_rule *a, const struct net_rule *b) {
        if (a->kind != b->kind || a->port != b->port)
                return false;
        if (a->kind != NET_RULE_CIDR)
                return !strcmp(a->name, b->name);
        return a->family == b->family && a->prefix == b->prefix && !memcmp(a->addr, b->addr, sizeof a->addr);
}

static int rules_from_json(const struct json *arr, const char *key, bool deny, struct net_rule **ret, size_t *n_ret,
                           char *err, size_t errlen) {
        if (!arr || json_type(arr) == JSON_NULL)
                return 0;
        if (json_type(arr) != JSON_ARRAY)
                return fail(err, errlen, "\"%s\" must be an array of rule strings", key);
        size_t n = json_len(arr);
        if (n > NET_RULES_MAX) {
                fail(err, errlen, "\"%s\" has %zu rules, at most %d", key, n, NET_RULES_MAX);
                return -E2BIG;
        }
        if (n == 0)
                return 0;
        struct net_rule *v = calloc(n, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t k = 0;
        int r = 0;
        for (size_t i = 0; i < n; i++) {
                const char *t = json_str(json_at(arr, i));
                char e[NET_RULE_TEXT_MAX + 128];
                if (!t) {
                        r = fail(err, errlen, "%s[%zu] must be a string", key, i);
                        goto out;
                }
                r = net_rule_parse(t, &v[k], e, sizeof e);
                if (r == -ENOMEM)
                        goto out;
                if (r < 0) {
                        r = fail(err, errlen, "%s[%zu]: %s", key, i, e);
                        goto out;
                }
                if (deny && v[k].kind != NET_RULE_CIDR && v[k].port) {
                        r = fail(err, errlen,
                                 "%s[%zu]: \"%s\": a name in \"deny\" takes no port (the name is refused whole)", key,
                                 i, t);
                        rule_clear(&v[k]);
                        goto out;
                }
                bool dup = false;
                for (size_t j = 0; j < k && !dup; j++)
                        dup = rule_equal(&v[j], &v[k]);
                if (dup)
                        rule_clear(&v[k]); /* the same rule twice: kept once */
                else
                        k++;
        }
out:
        if (r < 0) {
                rules_free(v, k);
                return r;
        }
        *ret = v;
        *n_ret = k;
        return 0;
}

int net_policy_from_json(const struct json *v, struct net_policy *ret, char *err, size_t errlen) {
        struct net_policy p = { 0 };
        int r;
        *ret = (struct net_policy){ 0 };
        if (!v)
                return fail(err, errlen, "missing network policy");
        if (json_type(v) == JSON_BOOL) {
                ret->egress = json_is_true(v);
                return 0;
        }
        if (json_type(v) != JSON_OBJECT)
                return fail(err, errlen,
                            "the network policy is true, false or an object {\"egress\", \"allow\", \"deny\", \"bandwidth\"}");
        for (size_t i = 0; i < json_len(v); i++) {
                const char *k = json_key_at(v, i);
                if (strcmp(k, "egress") && strcmp(k, "allow") && strcmp(k, "deny") && strcmp(k, "bandwidth"))
                        return fail(err, errlen, "unknown network policy field \"%.64s\" (egress, allow, deny, bandwidth)", k);
        }
        const struct json *e = json_get(v, "egress");
        if (e && json_type(e) != JSON_BOOL)
                return fail(err, errlen, "\"egress\" must be true or false");
        p.egress = e ? json_is_true(e) : true;
        r = rules_from_json(json_get(v, "allow"), "allow", false, &p.allow, &p.n_allow, err, errlen);
        if (r < 0)
                goto fail;
        r = rules_from_json(json_get(v, "deny"), "deny", true, &p.deny, &p.n_deny, err, errlen);
        if (r < 0)
                goto fail;
        const struct json *b = json_get(v, "bandwidth");
        if (b && json_type(b) == JSON_STRING) {
                r = net_bandwidth_parse(json_str(b), &p.bandwidth_bps);
                if (r < 0) {
                        r = r == -ERANGE ? fail(err, errlen,
                                                "\"bandwidth\": \"%.40s\" is outside 8kbit..100gbit", json_str(b))
                                         : fail(err, errlen,
                                                "\"bandwidth\": \"%.40s\" is not a rate (\"20mbit\", \"1.5gbit\", \"500kbit\", bits/s)",
                                                json_str(b));
                        goto fail;
                }
        } else if (b && json_type(b) == JSON_NUMBER) {
                int64_t n;
                if (json_int(b, &n) < 0 || n < (int64_t)NET_BANDWIDTH_MIN || n > (int64_t)NET_BANDWIDTH_MAX) {
                        r = fail(err, errlen, "\"bandwidth\" in bits/s must be a whole number in %llu..%llu",
                                 NET_BANDWIDTH_MIN, NET_BANDWIDTH_MAX);
                        goto fail;
                }
                p.bandwidth_bps = (uint64_t)n;
        } else if (b && json_type(b) != JSON_NULL) {
                r = fail(err, errlen, "\"bandwidth\" is a rate like \"20mbit\", bits/s, or null");
                goto fail;
        }
        *ret = p;
        return 0;
fail:
        net_policy_clear(&p);
        return r;
}

static void rules_to_json(struct json_writer *w, const char *key, const struct net_rule *v, size_t n) {
        char t[NET_RULE_TEXT_MAX];
        json_w_key(w, key);
        json_w_arr_begin(w);
        for (size_t i = 0; i < n; i++) {
                net_rule_format(&v[i], t, sizeof t);
                json_w_str(w, t);
        }
        json_w_arr_end(w);
}

void net_policy_to_json(struct json_writer *w, const struct net_policy *p) {
        json_w_obj_begin(w);
        json_w_kbool(w, "egress", p->egress);
        rules_to_json(w, "allow", p->allow, p->n_allow);
        rules_to_json(w, "deny", p->deny, p->n_deny);
        json_w_key(w, "bandwidth");
        if (p->bandwidth_bps)
                json_w_uint(w, p->bandwidth_bps);
        else
                json_w_null(w);
        json_w_obj_end(w);
}

int net_policy_to_text(const struct net_policy *p, char **ret) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        net_policy_to_json(&w, p);
        if (w.err || buf_putc(&b, '\0') < 0) {
                buf_free(&b);
                return -ENOMEM;
        }
        char *t = strdup(b.data);
        buf_free(&b);
        if (!t)
                return -ENOMEM;
        *ret = t;
        return 0;
}

int net_policy_from_text(const char *text, struct net_policy *p, char *err, size_t errlen) {
        *p = (struct net_policy){ 0 };
        _cleanup_json_ struct json *j = NULL;
        int r = text ? json_parse(text, strlen(text), &j, err, errlen) : -EINVAL;
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return fail(err, errlen, "not a JSON network policy");
        return net_policy_from_json(j, p, err, errlen);
}

/* ---- matching ---- */

static bool name_matches(const struct net_rule *r, const char *name, size_t n) {
        if (r->kind == NET_RULE_CIDR)
                return false;
        size_t rn = strlen(r->name);
        if (r->kind == NET_RULE_NAME)
                return n == rn && !strncasecmp(name, r->name, n);
        if (r->kind == NET_RULE_SUFFIX)
                return n > rn + 1 && name[n - rn - 1] == '.' && !strncasecmp(name + n - rn, r->name, rn);
        return false;
}

enum net_verdict net_policy_name(const struct net_policy *p, const char *name, uint16_t *port_ret) {
        if (port_ret)
                *port_ret = 0;
        if (!p->egress || !name)
                return NET_DENY;
        size_t n = strlen(name);
        if (n > 0 && name[n - 1] == '.')
                n--;
        if (n == 0)
                return NET_DENY;
        for (size_t i = 0; i < p->n_deny; i++)
                if (name_matches(&p->deny[i], name, n))
                        return NET_DENY;
        if (p->n_allow == 0)
                return NET_ALLOW;
        bool found = false;
        uint16_t port = 0;
        for (size_t i = 0; i < p->n_allow; i++) {
                if (!name_matches(&p->allow[i], name, n))
                        continue;
                if (!found || p->allow[i].port == 0)
                        port = p->allow[i].port;
                found = true;
        }
        if (!found)
                return NET_UNLISTED;
        if (port_ret)
                *port_ret = port;
        return NET_ALLOW;
}

/* The always-closed IPv4 ranges; each is closed in IPv6 too as IPv4-mapped (::ffff:a.b.c.d)
 * and through the NAT64 well-known prefix (64:ff9b::a.b.c.d, RFC 6052), which a NAT64 on
 * the host's network would translate to the IPv4 address. 255.255.255.255 (broadcast) is
 * inside 240.0.0.0/4. No two ranges overlap, so the firewall can put them in one set. */
#define CLOSED_V4(X)                                                                                            \
        X(0, 0, 0, 0, 8)        /* "this network" */                                                            \
        X(10, 0, 0, 0, 8)       /* private */                                                                   \
        X(100, 64, 0, 0, 10)    /* shared address space (carrier NAT) */                                        \
        X(127, 0, 0, 0, 8)      /* loopback */                                                                  \
        X(169, 254, 0, 0, 16)   /* link-local, the cloud metadata 169.254.169.254 */                            \
        X(172, 16, 0, 0, 12)    /* private */                                                                   \
        X(192, 168, 0, 0, 16)   /* private */                                                                   \
        X(224, 0, 0, 0, 4)      /* multicast */                                                                 \
        X(240, 0, 0, 0, 4)      /* reserved, broadcast */

#define V4_RULE(a, b, c, d, p) { .kind = NET_RULE_CIDR, .family = AF_INET, .prefix = p, .addr = { a, b, c, d } },
#define MAPPED_RULE(a, b, c, d, p) \
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 96 + p, .addr = { [10] = 0xff, 0xff, a, b, c, d } },
#define NAT64_RULE(a, b, c, d, p) \
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 96 + p, .addr = { 0, 0x64, 0xff, 0x9b, [12] = a, b, c, d } },

static const struct net_rule closed_ranges[] = {
        CLOSED_V4(V4_RULE)
        /* ::/96: the unspecified ::, loopback ::1 and the deprecated IPv4-compatible ::a.b.c.d
         * (all of it: nothing legitimate is reached there) */
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 96 },
        CLOSED_V4(MAPPED_RULE)
        CLOSED_V4(NAT64_RULE)
        /* fc00::/7 unique local (with the metadata address fd00:ec2::254) */
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 7, .addr = { 0xfc } },
        /* fe80::/10 link-local */
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 10, .addr = { 0xfe, 0x80 } },
        /* ff00::/8 multicast */
        { .kind = NET_RULE_CIDR, .family = AF_INET6, .prefix = 8, .addr = { 0xff } },
};

const struct net_rule *net_closed_ranges(size_t *n) {
        *n = ELEMENTSOF(closed_ranges);
        return closed_ranges;
}

static bool cidr_contains(const struct net_rule *r, int family, const uint8_t *addr) {
        if (r->kind != NET_RULE_CIDR || r->family != family)
                return false;
        unsigned full = r->prefix / 8, rest = r->prefix % 8;
        if (memcmp(r->addr, addr, full))
                return false;
        if (rest == 0)
                return true;
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return (r->addr[full] & mask) == (addr[full] & mask);
}

static bool opened(const struct net_operator *op, int family, const uint8_t *addr) {
        if (!op)
                return false;
        for (size_t i = 0; i < op->n_open; i++)
                if (cidr_contains(&op->open[i], family, addr))
                        return true;
        return false;
}

bool net_addr_closed(const struct net_operator *op, int family, const uint8_t *addr) {
        if (family != AF_INET && family != AF_INET6)
                return true;
        bool in = false;
        for (size_t i = 0; i < ELEMENTSOF(closed_ranges) && !in; i++)
                in = cidr_contains(&closed_ranges[i], family, addr);
        if (!in)
                return false;
        if (opened(op, family, addr))
                return false;
        /* an IPv4 range the operator opened opens its mapped and NAT64 forms too */
        static const uint8_t mapped[12] = { [10] = 0xff, 0xff }, nat64[12] = { 0, 0x64, 0xff, 0x9b };
        if (family == AF_INET6 && (!memcmp(addr, mapped, 12) || !memcmp(addr, nat64, 12)))
                return !opened(op, AF_INET, addr + 12);
        return true;
}

int net_policy_check(const struct net_policy *p, const struct net_operator *op, char *err, size_t errlen) {
        if (p->egress && !op->egress_enabled) {
                if (err && errlen)
                        snprintf(err, errlen, "egress is off on this host (spaced --egress on)");
                return -EPERM;
        }
        if (op->max_bandwidth_bps && p->bandwidth_bps > op->max_bandwidth_bps) {
                if (err && errlen)
                        snprintf(err, errlen, "bandwidth %" PRIu64 " bit/s is over this host's limit of %" PRIu64
                                              " bit/s (spaced --bandwidth-max)",
                                 p->bandwidth_bps, op->max_bandwidth_bps);
                return -ERANGE;
        }
        return 0;
}
