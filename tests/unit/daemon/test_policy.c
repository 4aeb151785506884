/* Unit tests of a session's network policy as data (src/daemon/net/policy.c): rule text
 * parse/format round trips (IPv4, IPv6, ports, names, wildcards), bad rules and their
 * errors, the JSON form and its limits, bandwidth units, what a policy says of a name,
 * the always-closed address ranges and the operator's check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/json.h"
#include "daemon/net/policy.h"

/* text parses, and formats back to canon */
static void round_trip(const char *text, const char *canon) {
        struct net_rule r = { 0 }, r2 = { 0 };
        char err[512] = "", out[NET_RULE_TEXT_MAX], out2[NET_RULE_TEXT_MAX];
        int k = net_rule_parse(text, &r, err, sizeof err);
        if (k != 0)
                print_error("\"%s\": %d %s\n", text, k, err);
        assert_int_equal(k, 0);
        net_rule_format(&r, out, sizeof out);
        assert_string_equal(out, canon);
        assert_int_equal(net_rule_parse(out, &r2, err, sizeof err), 0);
        net_rule_format(&r2, out2, sizeof out2);
        assert_string_equal(out2, canon);
        assert_int_equal(r.kind, r2.kind);
        assert_int_equal(r.port, r2.port);
        assert_int_equal(r.prefix, r2.prefix);
        assert_memory_equal(r.addr, r2.addr, 16);
        free(r.name);
        free(r2.name);
}

/* text is refused with -EINVAL and an error that contains want */
static void bad_rule(const char *text, const char *want) {
        struct net_rule r = { .port = 7 };
        char err[512] = "";
        assert_int_equal(net_rule_parse(text, &r, err, sizeof err), -EINVAL);
        if (!strstr(err, want))
                print_error("\"%s\": error \"%s\" lacks \"%s\"\n", text, err, want);
        assert_non_null(strstr(err, want));
        assert_int_equal(r.port, 7); /* untouched on failure */
}

static void test_rule_round_trip(void **state) {
        (void)state;
        printf("check: IPv4 addresses and networks, with and without a port\n");
        round_trip("203.0.113.0/24", "203.0.113.0/24");
        round_trip("203.0.113.7", "203.0.113.7");
        round_trip("203.0.113.7/32", "203.0.113.7");
        round_trip("203.0.113.7:443", "203.0.113.7:443");
        round_trip("198.51.100.0/24:8080", "198.51.100.0/24:8080");
        round_trip("0.0.0.0/0", "0.0.0.0/0");
        round_trip("0.0.0.0/0:53", "0.0.0.0/0:53");
        printf("check: IPv6 bare, in brackets, with prefixes and ports; canonical text\n");
        round_trip("2001:db8::/32", "2001:db8::/32");
        round_trip("2001:DB8:0:0::1", "2001:db8::1");
        round_trip("[2001:db8::1]:443", "[2001:db8::1]:443");
        round_trip("[2001:db8::/32]:443", "[2001:db8::/32]:443");
        round_trip("[2001:db8::1]", "2001:db8::1");
        round_trip("::/0", "::/0");
        round_trip("[::]:65535", "[::]:65535");
        printf("check: names exact and wildcard, with ports, case folded, a trailing dot dropped\n");
        round_trip("example.com", "example.com");
        round_trip("Example.COM.", "example.com");
        round_trip("example.com:443", "example.com:443");
        round_trip("*.example.com", "*.example.com");
        round_trip("*.Example.com:8443", "*.example.com:8443");
        round_trip("a_b-c.d1", "a_b-c.d1");
        round_trip("localhost", "localhost");
        round_trip("*.com", "*.com");

        struct net_rule r;
        char err[256];
        assert_int_equal(net_rule_parse("*.example.com:8443", &r, err, sizeof err), 0);
        assert_int_equal(r.kind, NET_RULE_SUFFIX);
        assert_string_equal(r.name, "example.com");
        assert_int_equal(r.port, 8443);
        free(r.name);
        assert_int_equal(net_rule_parse("[2001:db8::/32]:443", &r, err, sizeof err), 0);
        assert_int_equal(r.kind, NET_RULE_CIDR);
        assert_int_equal(r.family, AF_INET6);
        assert_int_equal(r.prefix, 32);
        assert_int_equal(r.port, 443);
        assert_null(r.name);
        assert_int_equal(net_rule_parse("10.0.0.0/8", &r, err, sizeof err), 0);
        assert_int_equal(r.family, AF_INET);
        assert_int_equal(r.prefix, 8);
        assert_int_equal(r.addr[0], 10);
}

static void test_rule_bad(void **state) {
        (void)state;
        printf("check: bad rules are refused with an error naming the rule and the fault\n");
        bad_rule("", "empty rule");
        bad_rule("203.0.113.7/24", "host bits set");
        bad_rule("203.0.113.7/24", "203.0.113.0/24");
        bad_rule("2001:db8::1/32", "host bits set");
        bad_rule("203.0.113.0/33", "prefix length must be 0..32");
        bad_rule("2001:db8::/129", "prefix length must be 0..128");
        bad_rule("203.0.113.0/", "prefix length");
        bad_rule("203.0.113.0/024", "prefix length");
        bad_rule("203.0.113.0/-1", "prefix length");
        bad_rule("203.0.113.7:0", "port must be 1..65535");
        bad_rule("203.0.113.7:65536", "port must be 1..65535");
        bad_rule("203.0.113.7:", "port must be 1..65535");
        bad_rule("203.0.113.7:+1", "port must be 1..65535");
        bad_rule("example.com:http", "port must be 1..65535");
        bad_rule("[2001:db8::1]:0", "port must be 1..65535");
        bad_rule("[2001:db8::1", "'[' without ']'");
        bad_rule("[example.com]:80", "not an IPv6 address inside");
        bad_rule("[2001:db8::1]x", "after ']' only");
        bad_rule("2001:db8::zz", "not an IPv6 address");
        bad_rule("256.1.1.1", "not a valid IPv4 address");
        bad_rule("1.2.3", "not a valid IPv4 address");
        bad_rule("example.com/24", "not an address/prefix");
        bad_rule("exa mple.com", "blank inside");
        bad_rule("exa!mple.com", "not an address or a name");
        bad_rule("bücher.de", "not an address or a name");
        bad_rule("a..b", "empty label");
        bad_rule(".example.com", "empty label");
        bad_rule("*", "wildcard is \"*.name\"");
        bad_rule("*example.com", "wildcard is \"*.name\"");
        bad_rule("a.*.com", "'*' only as");
        bad_rule("*.*.com", "'*' only as");
        bad_rule(":80", "empty name");

        printf("check: name bounds: labels of 63, names of %d\n", NET_NAME_MAX);
        char name[NET_RULE_TEXT_MAX + 10];
        memset(name, 'a', 63);
        strcpy(name + 63, ".com");
        round_trip(name, name);
        memset(name, 'a', 64);
        strcpy(name + 64, ".com");
        bad_rule(name, "at most 63");
        /* 4 labels of 63 and one of 1: 4*64 - 1 + 2 = 257 > 253; 3*64 + 61 = 253 exactly */
        memset(name, 0, sizeof name);
        for (int i = 0; i < 3; i++) {
                memset(name + 64 * i, 'b', 63);
                name[64 * i + 63] = '.';
        }
        memset(name + 192, 'c', 61);
        assert_int_equal(strlen(name), NET_NAME_MAX);
        round_trip(name, name);
        name[253] = 'c';
        bad_rule(name, "at most 253");
        printf("check: a rule of %d characters or more is refused before parsing\n", NET_RULE_TEXT_MAX);
        memset(name, 'd', sizeof name - 1);
        name[sizeof name - 1] = '\0';
        bad_rule(name, "at most 299 characters");
}

static void test_bandwidth(void **state) {
        (void)state;
        uint64_t b = 7;
        printf("check: bandwidth units are powers of 1000, fractions exact, case ignored\n");
        assert_int_equal(net_bandwidth_parse("20mbit", &b), 0);
        assert_int_equal(b, 20000000);
        assert_int_equal(net_bandwidth_parse("1.5gbit", &b), 0);
        assert_int_equal(b, 1500000000);
        assert_int_equal(net_bandwidth_parse("500kbit", &b), 0);
        assert_int_equal(b, 500000);
        assert_int_equal(net_bandwidth_parse("64000bit", &b), 0);
        assert_int_equal(b, 64000);
        assert_int_equal(net_bandwidth_parse("64000", &b), 0);
        assert_int_equal(b, 64000);
        assert_int_equal(net_bandwidth_parse("2.25Mbit", &b), 0);
        assert_int_equal(b, 2250000);
        assert_int_equal(net_bandwidth_parse("8kbit", &b), 0);
        assert_int_equal(b, NET_BANDWIDTH_MIN);
        assert_int_equal(net_bandwidth_parse("100gbit", &b), 0);
        assert_int_equal(b, NET_BANDWIDTH_MAX);
        printf("check: outside %llu..%llu bit/s is -ERANGE; other text -EINVAL, *bps untouched\n",
               NET_BANDWIDTH_MIN, NET_BANDWIDTH_MAX);
        b = 7;
        assert_int_equal(net_bandwidth_parse("7999", &b), -ERANGE);
        assert_int_equal(net_bandwidth_parse("100.001gbit", &b), -ERANGE);
        assert_int_equal(net_bandwidth_parse("101gbit", &b), -ERANGE);
        assert_int_equal(net_bandwidth_parse("99999999999999999999999999", &b), -ERANGE);
        assert_int_equal(net_bandwidth_parse("0", &b), -ERANGE);
        assert_int_equal(net_bandwidth_parse("", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("mbit", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("20 mbit", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("20mb", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("20mbps", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("-20mbit", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("1.mbit", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse("10000.5", &b), -EINVAL); /* half a bit */
        assert_int_equal(net_bandwidth_parse("1.0000000001gbit", &b), -EINVAL);
        assert_int_equal(net_bandwidth_parse(NULL, &b), -EINVAL);
        assert_int_equal(b, 7);
}

/* JSON text -> policy; returns the error code and fills err */
static int parse_text(const char *text, struct net_policy *p, char *err, size_t errlen) {
        _cleanup_json_ struct json *j = NULL;
        assert_int_equal(json_parse(text, strlen(text), &j, NULL, 0), 0);
        return net_policy_from_json(j, p, err, errlen);
}

static char *to_text(const struct net_policy *p) {
        struct buf b = { 0 };
        struct json_writer w = JSON_WRITER_INIT(&b);
        net_policy_to_json(&w, p);
        assert_int_equal(w.err, 0);
        char *s = strndup((const char *)b.data, b.len);
        buf_free(&b);
        return s;
}

static void json_round_trip(const char *in, const char *want) {
        struct net_policy p = { 0 }, q = { 0 };
        char err[512] = "";
        int k = parse_text(in, &p, err, sizeof err);
        if (k)
                print_error("%s: %s\n", in, err);
        assert_int_equal(k, 0);
        char *s = to_text(&p);
        assert_string_equal(s, want);
        assert_int_equal(parse_text(s, &q, err, sizeof err), 0);
        char *s2 = to_text(&q);
        assert_string_equal(s2, want);
        struct net_policy c = { 0 };
        assert_int_equal(net_policy_copy(&c, &q), 0);
        char *s3 = to_text(&c);
        assert_string_equal(s3, want);
        free(s);
        free(s2);
        free(s3);
        net_policy_clear(&p);
        net_policy_clear(&q);
        net_policy_clear(&c);
        assert_null(c.allow);
        assert_int_equal(c.n_allow, 0);
}

static void bad_json(const char *in, int code, const char *want) {
        struct net_policy p = { .egress = true, .n_allow = 3 };
        char err[512] = "";
        int k = parse_text(in, &p, err, sizeof err);
        if (k != code)
                print_error("%s: %d, not %d\n", in, k, code);
        assert_int_equal(k, code);
        if (!strstr(err, want))
                print_error("%s: error \"%s\" lacks \"%s\"\n", in, err, want);
        assert_non_null(strstr(err, want));
        assert_false(p.egress);
        assert_int_equal(p.n_allow, 0);
        assert_null(p.allow);
}

static void test_json(void **state) {
        (void)state;
        printf("check: true/false and objects give the complete object form, which reads back the same\n");
        json_round_trip("false", "{\"egress\":false,\"allow\":[],\"deny\":[],\"bandwidth\":null}");
        json_round_trip("true", "{\"egress\":true,\"allow\":[],\"deny\":[],\"bandwidth\":null}");
        json_round_trip("{}", "{\"egress\":true,\"allow\":[],\"deny\":[],\"bandwidth\":null}");
        json_round_trip("{\"egress\":false,\"allow\":[\"example.com\"]}",
                        "{\"egress\":false,\"allow\":[\"example.com\"],\"deny\":[],\"bandwidth\":null}");
        json_round_trip("{\"allow\":[\"*.PyPI.org\",\"203.0.113.0/24\",\"[2001:db8::1]:443\"],"
                        "\"deny\":[\"evil.example.com\",\"198.51.100.7:25\"],\"bandwidth\":\"20mbit\"}",
                        "{\"egress\":true,\"allow\":[\"*.pypi.org\",\"203.0.113.0/24\",\"[2001:db8::1]:443\"],"
                        "\"deny\":[\"evil.example.com\",\"198.51.100.7:25\"],\"bandwidth\":20000000}");
        json_round_trip("{\"bandwidth\":64000,\"allow\":null,\"deny\":null}",
                        "{\"egress\":true,\"allow\":[],\"deny\":[],\"bandwidth\":64000}");
        json_round_trip("{\"bandwidth\":null}", "{\"egress\":true,\"allow\":[],\"deny\":[],\"bandwidth\":null}");
        printf("check: the same rule twice is kept once\n");
        json_round_trip("{\"allow\":[\"example.com\",\"EXAMPLE.com.\",\"10.0.0.0/8\",\"10.0.0.0/8\"]}",
                        "{\"egress\":true,\"allow\":[\"example.com\",\"10.0.0.0/8\"],\"deny\":[],\"bandwidth\":null}");

        printf("check: bad JSON policies are refused with an error saying where\n");
        bad_json("1", -EINVAL, "true, false or an object");
        bad_json("\"on\"", -EINVAL, "true, false or an object");
        bad_json("[]", -EINVAL, "true, false or an object");
        bad_json("{\"egres\":true}", -EINVAL, "unknown network policy field \"egres\"");
        bad_json("{\"egress\":1}", -EINVAL, "\"egress\" must be true or false");
        bad_json("{\"allow\":\"example.com\"}", -EINVAL, "\"allow\" must be an array");
        bad_json("{\"allow\":[\"ok.com\",5]}", -EINVAL, "allow[1] must be a string");
        bad_json("{\"allow\":[\"ok.com\",\"a..b\"]}", -EINVAL, "allow[1]: \"a..b\": empty label");
        bad_json("{\"deny\":[\"203.0.113.7/24\"]}", -EINVAL, "deny[0]: \"203.0.113.7/24\": host bits set");
        bad_json("{\"deny\":[\"example.com:443\"]}", -EINVAL, "takes no port");
        bad_json("{\"bandwidth\":\"fast\"}", -EINVAL, "\"fast\" is not a rate");
        bad_json("{\"bandwidth\":\"1bit\"}", -EINVAL, "outside 8kbit..100gbit");
        bad_json("{\"bandwidth\":0}", -EINVAL, "whole number");
        bad_json("{\"bandwidth\":64000.5}", -EINVAL, "whole number");
        bad_json("{\"bandwidth\":1000000000000000}", -EINVAL, "whole number");
        bad_json("{\"bandwidth\":true}", -EINVAL, "\"bandwidth\" is a rate");

        printf("check: the text form (meta's network_json) reads back the same; bad text is -EINVAL\n");
        {
                struct net_policy p = { 0 }, q = { 0 };
                char err[256], *t = NULL, *t2 = NULL;
                assert_int_equal(parse_text("{\"allow\":[\"[2001:db8::/32]:443\"],\"bandwidth\":\"1mbit\"}", &p, err,
                                            sizeof err),
                                 0);
                assert_int_equal(net_policy_to_text(&p, &t), 0);
                assert_string_equal(t, "{\"egress\":true,\"allow\":[\"[2001:db8::/32]:443\"],\"deny\":[],\"bandwidth\":1000000}");
                assert_int_equal(net_policy_from_text(t, &q, err, sizeof err), 0);
                assert_int_equal(net_policy_to_text(&q, &t2), 0);
                assert_string_equal(t, t2);
                free(t);
                free(t2);
                net_policy_clear(&p);
                net_policy_clear(&q);
                assert_int_equal(net_policy_from_text("{\"egress\":", &q, err, sizeof err), -EINVAL);
                assert_int_equal(net_policy_from_text(NULL, &q, err, sizeof err), -EINVAL);
                assert_int_equal(net_policy_from_text("{\"deny\":[\"x..y\"]}", &q, err, sizeof err), -EINVAL);
                assert_non_null(strstr(err, "deny[0]"));
                assert_false(q.egress);
        }

        printf("check: %d rules per list pass, one more is -E2BIG\n", NET_RULES_MAX);
        struct buf b = { 0 };
        for (int n = NET_RULES_MAX; n <= NET_RULES_MAX + 1; n++) {
                b.len = 0;
                struct json_writer w = JSON_WRITER_INIT(&b);
                json_w_obj_begin(&w);
                json_w_key(&w, "deny");
                json_w_arr_begin(&w);
                for (int i = 0; i < n; i++) {
                        char t[32];
                        snprintf(t, sizeof t, "h%d.example.com", i);
                        json_w_str(&w, t);
                }
                json_w_arr_end(&w);
                json_w_obj_end(&w);
                assert_int_equal(w.err, 0);
                char *s = strndup((const char *)b.data, b.len);
                struct net_policy p = { 0 };
                char err[256] = "";
                if (n == NET_RULES_MAX) {
                        assert_int_equal(parse_text(s, &p, err, sizeof err), 0);
                        assert_int_equal(p.n_deny, NET_RULES_MAX);
                        net_policy_clear(&p);
                } else {
                        assert_int_equal(parse_text(s, &p, err, sizeof err), -E2BIG);
                        assert_non_null(strstr(err, "at most 256"));
                }
                free(s);
        }
        buf_free(&b);
        net_policy_clear(NULL);
}

static struct net_policy policy_of(const char *text) {
        struct net_policy p;
        char err[256];
        assert_int_equal(parse_text(text, &p, err, sizeof err), 0);
        return p;
}

static void test_name(void **state) {
        (void)state;
        uint16_t port = 99;
        printf("check: egress off denies every name\n");
        struct net_policy p = policy_of("{\"egress\":false,\"allow\":[\"example.com\"]}");
        assert_int_equal(net_policy_name(&p, "example.com", &port), NET_DENY);
        assert_int_equal(port, 0);
        net_policy_clear(&p);

        printf("check: no allow rule: every name but the denied ones\n");
        p = policy_of("{\"deny\":[\"evil.com\",\"*.ads.example\"]}");
        assert_int_equal(net_policy_name(&p, "example.com", &port), NET_ALLOW);
        assert_int_equal(net_policy_name(&p, "evil.com", NULL), NET_DENY);
        assert_int_equal(net_policy_name(&p, "evil.com.", NULL), NET_DENY);
        assert_int_equal(net_policy_name(&p, "EVIL.com", NULL), NET_DENY);
        assert_int_equal(net_policy_name(&p, "notevil.com", NULL), NET_ALLOW);
        assert_int_equal(net_policy_name(&p, "www.evil.com", NULL), NET_ALLOW); /* exact rule only */
        assert_int_equal(net_policy_name(&p, "x.ads.example", NULL), NET_DENY);
        assert_int_equal(net_policy_name(&p, "a.b.ads.example", NULL), NET_DENY);
        assert_int_equal(net_policy_name(&p, "ads.example", NULL), NET_ALLOW); /* "*." is below only */
        assert_int_equal(net_policy_name(&p, "xads.example", NULL), NET_ALLOW);
        assert_int_equal(net_policy_name(&p, "", NULL), NET_DENY);
        net_policy_clear(&p);

        printf("check: allow rules: listed names allowed, others unlisted, deny wins; ports reported\n");
        p = policy_of("{\"allow\":[\"*.example.com\",\"api.example.com:443\",\"pypi.org:443\",\"pypi.org\","
                      "\"files.org:8443\",\"203.0.113.0/24\"],"
                      "\"deny\":[\"bad.example.com\"]}");
        assert_int_equal(net_policy_name(&p, "www.example.com", &port), NET_ALLOW);
        assert_int_equal(port, 0);
        port = 99;
        assert_int_equal(net_policy_name(&p, "api.example.com", &port), NET_ALLOW);
        assert_int_equal(port, 0); /* the wildcard with every port wins over :443 */
        assert_int_equal(net_policy_name(&p, "pypi.org", &port), NET_ALLOW);
        assert_int_equal(port, 0);
        assert_int_equal(net_policy_name(&p, "files.org", &port), NET_ALLOW);
        assert_int_equal(port, 8443);
        assert_int_equal(net_policy_name(&p, "example.com", &port), NET_UNLISTED);
        assert_int_equal(port, 0);
        assert_int_equal(net_policy_name(&p, "other.org", NULL), NET_UNLISTED);
        assert_int_equal(net_policy_name(&p, "bad.example.com", NULL), NET_DENY);
        net_policy_clear(&p);

        printf("check: only CIDR allow rules: every name is unlisted\n");
        p = policy_of("{\"allow\":[\"203.0.113.0/24\"]}");
        assert_int_equal(net_policy_name(&p, "example.com", NULL), NET_UNLISTED);
        net_policy_clear(&p);
}

static bool closed(const struct net_operator *op, const char *text) {
        uint8_t a[16];
        int family = strchr(text, ':') ? AF_INET6 : AF_INET;
        assert_int_equal(inet_pton(family, text, a), 1);
        return net_addr_closed(op, family, a);
}

static void test_closed(void **state) {
        (void)state;
        const struct net_operator none = { 0 };
        printf("check: each always-closed IPv4 range, at its edges\n");
        const char *v4_closed[] = { "0.0.0.0", "0.255.255.255", "10.0.0.1", "10.255.255.255", "100.64.0.0",
                                    "100.127.255.255", "127.0.0.1", "127.255.255.254", "169.254.169.254",
                                    "169.254.0.1", "172.16.0.1", "172.31.255.255", "192.168.0.1",
                                    "192.168.255.255", "224.0.0.1", "239.255.255.255", "240.0.0.1",
                                    "255.255.255.255" };
        for (size_t i = 0; i < sizeof v4_closed / sizeof *v4_closed; i++) {
                if (!closed(&none, v4_closed[i]))
                        print_error("%s should be closed\n", v4_closed[i]);
                assert_true(closed(&none, v4_closed[i]));
        }
        const char *v4_open[] = { "1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
                                  "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0",
                                  "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0",
                                  "203.0.113.7", "198.51.100.1", "192.0.2.1", "223.255.255.255", "8.8.8.8" };
        for (size_t i = 0; i < sizeof v4_open / sizeof *v4_open; i++) {
                if (closed(&none, v4_open[i]))
                        print_error("%s should be open\n", v4_open[i]);
                assert_false(closed(&none, v4_open[i]));
        }
        printf("check: each always-closed IPv6 range; v4-mapped, v4-compatible and NAT64 forms\n");
        const char *v6_closed[] = { "::", "::1", "fe80::1", "febf:ffff::1", "fc00::1", "fd00:ec2::254",
                                    "fdff::1", "ff02::1", "ff0e::1", "::ffff:10.0.0.1", "::ffff:127.0.0.1",
                                    "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::10.0.0.1", "::8.8.8.8",
                                    "64:ff9b::10.1.2.3", "64:ff9b::169.254.169.254", "::ffff:255.255.255.255" };
        for (size_t i = 0; i < sizeof v6_closed / sizeof *v6_closed; i++) {
                if (!closed(&none, v6_closed[i]))
                        print_error("%s should be closed\n", v6_closed[i]);
                assert_true(closed(&none, v6_closed[i]));
        }
        const char *v6_open[] = { "2001:db8::1", "2606:4700::1111", "fec0::1", "fbff::1", "::ffff:203.0.113.7",
                                  "64:ff9b::203.0.113.7", "::1:0:0:1", "fe00::1" };
        for (size_t i = 0; i < sizeof v6_open / sizeof *v6_open; i++) {
                if (closed(&none, v6_open[i]))
                        print_error("%s should be open\n", v6_open[i]);
                assert_false(closed(&none, v6_open[i]));
        }
        assert_true(closed(NULL, "10.0.0.1"));
        uint8_t z[16] = { 0 };
        assert_true(net_addr_closed(&none, AF_UNIX, z));

        printf("check: the operator's open ranges open what they cover, mapped forms included\n");
        struct net_rule open[2];
        char err[256];
        assert_int_equal(net_rule_parse("10.1.0.0/16", &open[0], err, sizeof err), 0);
        assert_int_equal(net_rule_parse("fd00:ec2::/32", &open[1], err, sizeof err), 0);
        const struct net_operator op = { .open = open, .n_open = 2 };
        assert_false(closed(&op, "10.1.2.3"));
        assert_true(closed(&op, "10.2.0.1"));
        assert_false(closed(&op, "::ffff:10.1.2.3"));
        assert_false(closed(&op, "64:ff9b::10.1.2.3"));
        assert_true(closed(&op, "::ffff:10.2.0.1"));
        assert_false(closed(&op, "fd00:ec2::254"));
        assert_true(closed(&op, "fd00:ec3::254"));
        assert_true(closed(&op, "169.254.169.254"));

        printf("check: the closed table is what net_addr_closed uses, with no overlaps\n");
        size_t n;
        const struct net_rule *t = net_closed_ranges(&n);
        assert_true(n >= 30);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(t[i].kind, NET_RULE_CIDR);
                assert_true(net_addr_closed(&none, t[i].family, t[i].addr));
                char s[NET_RULE_TEXT_MAX];
                struct net_rule back;
                net_rule_format(&t[i], s, sizeof s);
                assert_int_equal(net_rule_parse(s, &back, err, sizeof err), 0); /* host bits zero */
                for (size_t j = 0; j < n; j++) {
                        if (i == j || t[i].family != t[j].family)
                                continue;
                        /* j's network address inside i, with i no longer than j: overlap */
                        unsigned bytes = t[i].family == AF_INET ? 4 : 16;
                        uint8_t a[16] = { 0 };
                        memcpy(a, t[j].addr, bytes);
                        bool in = true;
                        for (unsigned b = 0; b < t[i].prefix; b++) {
                                unsigned m = 0x80u >> (b % 8);
                                if ((a[b / 8] & m) != (t[i].addr[b / 8] & m))
                                        in = false;
                        }
                        if (in)
                                print_error("%s overlaps another closed range\n", s);
                        assert_false(in);
                }
        }
}

static void test_check(void **state) {
        (void)state;
        char err[256] = "";
        struct net_policy on = { .egress = true }, off = { .egress = false, .bandwidth_bps = 64000 };
        const struct net_operator host_off = { 0 };
        printf("check: egress asked on a host with egress off is -EPERM with the operator's flag named\n");
        assert_int_equal(net_policy_check(&on, &host_off, err, sizeof err), -EPERM);
        assert_string_equal(err, "egress is off on this host (spaced --egress on)");
        assert_int_equal(net_policy_check(&off, &host_off, err, sizeof err), 0);
        const struct net_operator host_on = { .egress_enabled = true, .max_bandwidth_bps = 1000000 };
        assert_int_equal(net_policy_check(&on, &host_on, err, sizeof err), 0);
        printf("check: bandwidth over the operator's maximum is -ERANGE\n");
        on.bandwidth_bps = 1000001;
        assert_int_equal(net_policy_check(&on, &host_on, err, sizeof err), -ERANGE);
        assert_non_null(strstr(err, "--bandwidth-max"));
        on.bandwidth_bps = 1000000;
        assert_int_equal(net_policy_check(&on, &host_on, err, sizeof err), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rule_round_trip), cmocka_unit_test(test_rule_bad),
                cmocka_unit_test(test_bandwidth),       cmocka_unit_test(test_json),
                cmocka_unit_test(test_name),            cmocka_unit_test(test_closed),
                cmocka_unit_test(test_check),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
