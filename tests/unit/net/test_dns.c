/* Unit tests of spaced's DNS wire format (src/daemon/net/dns.c): queries and responses
 * read back right (case, EDNS, compression, TTLs), hostile messages refused (pointer
 * loops, forward and self pointers, truncation, counts the data cannot hold, long labels
 * and names, bad rdata, stray OPT records), error replies, and filtered answers: rejected
 * and glue addresses gone, TTLs clamped, names intact after a dropped record that later
 * records pointed into, truncation to 512 bytes with TC, EDNS sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/dns.h"

/* A message written by hand, byte by byte, so hostile ones can be made. */
struct mb {
        uint8_t b[70000];
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
static void raw(struct mb *m, const void *p, size_t n) {
        memcpy(m->b + m->n, p, n);
        m->n += n;
}
/* "a.b.c" uncompressed, ending with the root */
static void name(struct mb *m, const char *text) {
        while (*text) {
                const char *dot = strchr(text, '.');
                size_t l = dot ? (size_t)(dot - text) : strlen(text);
                u8(m, (unsigned)l);
                raw(m, text, l);
                text += l + (dot ? 1 : 0);
        }
        u8(m, 0);
}
static void ptr(struct mb *m, unsigned off) { u16(m, 0xc000 | off); }
static void header(struct mb *m, unsigned id, unsigned flags, unsigned qd, unsigned an, unsigned ns, unsigned ar) {
        m->n = 0;
        u16(m, id);
        u16(m, flags);
        u16(m, qd);
        u16(m, an);
        u16(m, ns);
        u16(m, ar);
}
static void opt(struct mb *m, unsigned udp) {
        u8(m, 0);
        u16(m, DNS_TYPE_OPT);
        u16(m, udp);
        u32(m, 0);
        u16(m, 0);
}
/* an RR whose owner is a pointer to off */
static void rr_a(struct mb *m, unsigned owner, uint32_t ttl, const char *ip) {
        ptr(m, owner);
        u16(m, DNS_TYPE_A);
        u16(m, DNS_CLASS_IN);
        u32(m, ttl);
        u16(m, 4);
        uint8_t a[4];
        assert_int_equal(inet_pton(AF_INET, ip, a), 1);
        raw(m, a, 4);
}
static void rr_aaaa(struct mb *m, unsigned owner, uint32_t ttl, const char *ip) {
        ptr(m, owner);
        u16(m, DNS_TYPE_AAAA);
        u16(m, DNS_CLASS_IN);
        u32(m, ttl);
        u16(m, 16);
        uint8_t a[16];
        assert_int_equal(inet_pton(AF_INET6, ip, a), 1);
        raw(m, a, 16);
}

static void query_msg(struct mb *m, const char *qname, unsigned qtype, int edns) {
        header(m, 0x1234, DNS_FLAG_RD, 1, 0, 0, edns >= 0);
        name(m, qname);
        u16(m, qtype);
        u16(m, DNS_CLASS_IN);
        if (edns >= 0)
                opt(m, (unsigned)edns);
}

static void test_query_ok(void **state) {
        struct mb m;
        struct dns_query q;
        query_msg(&m, "www.Example.COM", DNS_TYPE_A, 4096);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_int_equal(q.id, 0x1234);
        assert_int_equal(q.qtype, DNS_TYPE_A);
        assert_int_equal(q.qclass, DNS_CLASS_IN);
        assert_string_equal(q.name, "www.example.com");
        assert_int_equal(q.qname_len, 17);
        assert_memory_equal(q.qname, "\3www\7Example\3COM", 17); /* case as sent */
        assert_true(q.edns);
        assert_int_equal(q.udp_size, 4096);
        assert_int_equal(dns_udp_limit(&q), DNS_EDNS_UDP_MAX);

        query_msg(&m, "a.b", DNS_TYPE_AAAA, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_false(q.edns);
        assert_int_equal(dns_udp_limit(&q), 512);
        /* EDNS below 512 counts as 512 */
        query_msg(&m, "a.b", DNS_TYPE_AAAA, 100);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_int_equal(dns_udp_limit(&q), 512);
        /* the root */
        query_msg(&m, "", DNS_TYPE_NS, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_string_equal(q.name, "");
}

static void test_query_bad(void **state) {
        struct mb m;
        struct dns_query q;
        /* too short: nothing known */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(m.b, 11, &q), -EBADMSG);
        /* truncated anywhere after the header: refused, id still known */
        for (size_t cut = 12; cut < m.n; cut++) {
                assert_int_equal(dns_parse_query(m.b, cut, &q), -EBADMSG);
                assert_int_equal(q.id, 0x1234);
        }
        /* trailing bytes */
        u8(&m, 0);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* over 64 KiB */
        assert_int_equal(dns_parse_query(m.b, DNS_MSG_MAX + 1, &q), -EMSGSIZE);
        /* a response is no query; another opcode is NOTIMP with the id kept */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[2] |= 0x80;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[2] |= 0x10; /* opcode 2: STATUS */
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EOPNOTSUPP);
        assert_int_equal(q.id, 0x1234);
        assert_int_equal(q.qname_len, 0);
        /* two questions; an answer in a query */
        header(&m, 1, 0, 2, 0, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        name(&m, "c.d");
        u16(&m, 1), u16(&m, 1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* counts the data cannot hold */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[10] = 0xff, m.b[11] = 0xff;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* a pointer to itself, forward, into the header */
        unsigned targets[] = { 12, 14, 40, 2 };
        for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
                header(&m, 1, 0, 1, 0, 0, 0);
                ptr(&m, targets[i]);
                u16(&m, 1), u16(&m, 1);
                name(&m, "padding.example.com.that.is.long");
                assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        }
        /* a label of 64; a name of 256 wire bytes */
        char big[300];
        memset(big, 'a', 64);
        big[64] = 0;
        query_msg(&m, big, DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        memset(big, 0, sizeof big);
        for (int i = 0; i < 4; i++)
                strcat(big, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa."); /* 63 + dot */
        big[strlen(big) - 1] = 0;                                                                   /* 255 chars */
        query_msg(&m, big, DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* 253 characters is the most */
        big[253] = 0;
        query_msg(&m, big, DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_int_equal(strlen(q.name), 253);
        /* a dot or a space inside a label: no text form */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[13] = '.';
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        m.b[13] = ' ';
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* extended label types 0x40, 0x80 */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[12] = 0x41;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        m.b[12] = 0x81;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        /* two OPT records */
        header(&m, 1, 0, 1, 0, 0, 2);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        opt(&m, 1232);
        opt(&m, 1232);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
}

/* A response to "www.example.com" A: a CNAME to cdn.example.net (compressed against
 * itself), two A records, an SOA in authority, glue A and an OPT in additional. */
static void response_msg(struct mb *m) {
        header(m, 0x4321, DNS_FLAG_QR | DNS_FLAG_RD | DNS_FLAG_RA, 1, 4, 1, 2);
        name(m, "www.example.com"); /* at 12; "example.com" at 16 */
        u16(m, DNS_TYPE_A), u16(m, DNS_CLASS_IN);
        ptr(m, 12);
        u16(m, DNS_TYPE_CNAME), u16(m, DNS_CLASS_IN), u32(m, 7200);
        size_t rdl = m->n;
        u16(m, 0);
        size_t cdn = m->n;
        u8(m, 3), raw(m, "cdn", 3), u8(m, 7), raw(m, "example", 7), u8(m, 3), raw(m, "net", 3), u8(m, 0);
        m->b[rdl + 1] = (uint8_t)(m->n - cdn);
        rr_a(m, (unsigned)cdn, 300, "203.0.113.5");
        rr_a(m, (unsigned)cdn, 0x80000010u, "10.0.0.5"); /* top bit set: counts as 0 */
        rr_aaaa(m, (unsigned)cdn, 30, "2001:db8::5");
        /* authority: SOA example.com */
        ptr(m, 16);
        u16(m, DNS_TYPE_SOA), u16(m, DNS_CLASS_IN), u32(m, 900);
        rdl = m->n;
        u16(m, 0);
        size_t s0 = m->n;
        u8(m, 2), raw(m, "ns", 2), ptr(m, 16);
        u8(m, 4), raw(m, "host", 4), ptr(m, 16);
        for (int i = 0; i < 5; i++)
                u32(m, 1000 + i);
        m->b[rdl + 1] = (uint8_t)(m->n - s0);
        /* additional: glue, OPT */
        rr_a(m, (unsigned)s0, 900, "192.0.2.53");
        opt(m, 1232);
}

static void test_response_ok(void **state) {
        struct mb m;
        response_msg(&m);
        struct dns_response r;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        assert_int_equal(r.id, 0x4321);
        assert_int_equal(r.n_answer, 4);
        assert_int_equal(r.n_authority, 1);
        assert_int_equal(r.n_additional, 2);
        assert_int_equal(dns_response_rcode(&r), 0);
        assert_int_equal(dns_response_min_ttl(&r), 0);
        int fam;
        uint8_t a[16];
        assert_int_equal(dns_rr_addr(&r, 0, &fam, a), -EINVAL); /* the CNAME */
        assert_int_equal(dns_rr_addr(&r, 1, &fam, a), 0);
        assert_int_equal(fam, AF_INET);
        assert_memory_equal(a, "\xcb\x00\x71\x05", 4);
        assert_int_equal(dns_rr_addr(&r, 3, &fam, a), 0);
        assert_int_equal(fam, AF_INET6);
        struct mb qm;
        struct dns_query q;
        query_msg(&qm, "WWW.example.com", DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        assert_true(dns_response_matches(&r, &q));
        q.qtype = DNS_TYPE_AAAA;
        assert_false(dns_response_matches(&r, &q));
        dns_response_clear(&r);

        /* an extended rcode in the OPT record */
        m.b[m.n - 6] = 1; /* OPT TTL's top byte: extended rcode 1 -> 16 | low bits */
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        assert_int_equal(dns_response_rcode(&r), 16);
        dns_response_clear(&r);
}

static void test_response_bad(void **state) {
        struct mb m;
        struct dns_response r;
        response_msg(&m);
        for (size_t cut = 0; cut < m.n; cut++)
                assert_int_equal(dns_parse_response(m.b, cut, &r), -EBADMSG);
        m.b[m.n++] = 0;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* no QR */
        response_msg(&m);
        m.b[2] &= 0x7f;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* 65535 answers claimed in a small message: refused before allocating */
        response_msg(&m);
        m.b[6] = m.b[7] = 0xff;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* a loop: a name that ends in a pointer to its own start (backwards from the
         * pointer, but not from where the name began) */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        size_t own = m.n;
        u8(&m, 1), u8(&m, 'x'), ptr(&m, (unsigned)own);
        u16(&m, DNS_TYPE_A), u16(&m, 1), u32(&m, 1), u16(&m, 4), u32(&m, 0x01020304);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* two names pointing at each other: one of the two pointers goes forward */
        header(&m, 1, DNS_FLAG_QR, 1, 2, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        size_t n1 = m.n;
        u8(&m, 1), u8(&m, 'x'), ptr(&m, (unsigned)n1 + 20);
        u16(&m, DNS_TYPE_A), u16(&m, 1), u32(&m, 1), u16(&m, 4), u32(&m, 0x01020304);
        assert_int_equal(m.n, n1 + 18);
        u8(&m, 0), u8(&m, 0); /* padding inside nothing: makes n1+20 the next owner */
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* an owner name pointing forward, to a valid name in its own rdata */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, (unsigned)m.n + 12);
        u16(&m, DNS_TYPE_CNAME), u16(&m, 1), u32(&m, 1), u16(&m, 5);
        name(&m, "c.d");
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        m.b[22] = 12; /* the same, pointing back at the question: fine */
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        dns_response_clear(&r);
        /* A of 5 bytes, AAAA of 4 */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, DNS_TYPE_A), u16(&m, 1), u32(&m, 1), u16(&m, 5), u32(&m, 0), u8(&m, 0);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, DNS_TYPE_AAAA), u16(&m, 1), u32(&m, 1), u16(&m, 4), u32(&m, 0);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* rdlength past the end */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, 16), u16(&m, 1), u32(&m, 1), u16(&m, 200), u32(&m, 0);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* a CNAME whose name runs past its rdata, and one with bytes after the name */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, DNS_TYPE_CNAME), u16(&m, 1), u32(&m, 1), u16(&m, 3);
        u8(&m, 1), u8(&m, 'c'), u8(&m, 1), u8(&m, 'd'), u8(&m, 0);
        m.b[6] = 0, m.b[7] = 1;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, DNS_TYPE_CNAME), u16(&m, 1), u32(&m, 1), u16(&m, 4);
        ptr(&m, 12), u16(&m, 0);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* an OPT in the answer section; two OPTs; an OPT not owned by the root */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        opt(&m, 512);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        header(&m, 1, DNS_FLAG_QR, 1, 0, 0, 2);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        opt(&m, 512);
        opt(&m, 512);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        header(&m, 1, DNS_FLAG_QR, 1, 0, 0, 1);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        ptr(&m, 12), u16(&m, DNS_TYPE_OPT), u16(&m, 512), u32(&m, 0), u16(&m, 0);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* a chain of 65 backward pointers: over DNS_POINTERS_MAX */
        header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
        name(&m, "a.b");
        u16(&m, 1), u16(&m, 1);
        /* rdata of a TXT-like record holding the chain: each pointer points at the previous one */
        ptr(&m, 12), u16(&m, 16), u16(&m, 1), u32(&m, 1), u16(&m, 2 * 66);
        size_t first = m.n;
        ptr(&m, 12);
        for (int i = 1; i < 66; i++)
                ptr(&m, (unsigned)(first + 2 * (i - 1)));
        /* ... then a CNAME whose target is the last pointer */
        m.b[6] = 0, m.b[7] = 2;
        ptr(&m, 12), u16(&m, DNS_TYPE_CNAME), u16(&m, 1), u32(&m, 1), u16(&m, 2);
        ptr(&m, (unsigned)(first + 2 * 65));
        assert_int_equal(dns_parse_response(m.b, m.n, &r), -EBADMSG);
        /* 64 are fine: the CNAME's own and 63 of the chain */
        m.n -= 2;
        ptr(&m, (unsigned)(first + 2 * 62));
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        dns_response_clear(&r);
}

static void test_reply(void **state) {
        struct mb m;
        struct dns_query q;
        uint8_t out[600];
        size_t len;
        query_msg(&m, "Denied.Example", DNS_TYPE_A, 1400);
        m.b[3] |= DNS_FLAG_CD;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_int_equal(dns_build_reply(&q, DNS_RCODE_NXDOMAIN, out, sizeof out, &len), 0);
        struct dns_response r;
        assert_int_equal(dns_parse_response(out, len, &r), 0);
        assert_int_equal(r.id, 0x1234);
        assert_int_equal(dns_response_rcode(&r), DNS_RCODE_NXDOMAIN);
        assert_true(r.flags & DNS_FLAG_RD);
        assert_true(r.flags & DNS_FLAG_CD);
        assert_true(dns_response_matches(&r, &q));
        assert_memory_equal(out + 12, "\6Denied\7Example", 15); /* the question as asked */
        assert_int_equal(r.n_answer, 0);
        assert_int_equal(r.n_additional, 1); /* EDNS asked, EDNS answered */
        dns_response_clear(&r);
        assert_int_equal(dns_build_reply(&q, DNS_RCODE_NXDOMAIN, out, 20, &len), -ENOBUFS);
        /* FORMERR for a query that could not be read: no question */
        query_msg(&m, "a.b", DNS_TYPE_A, -1);
        m.b[5] = 2;
        assert_int_equal(dns_parse_query(m.b, m.n, &q), -EBADMSG);
        assert_int_equal(dns_build_reply(&q, DNS_RCODE_FORMERR, out, sizeof out, &len), 0);
        assert_int_equal(len, 12);
        assert_int_equal(out[3] & 0xf, DNS_RCODE_FORMERR);
        /* the upstream query */
        query_msg(&m, "x.example", DNS_TYPE_AAAA, -1);
        assert_int_equal(dns_parse_query(m.b, m.n, &q), 0);
        assert_int_equal(dns_build_query(&q, 0xbeef, out, sizeof out, &len), 0);
        struct dns_query back;
        assert_int_equal(dns_parse_query(out, len, &back), 0);
        assert_int_equal(back.id, 0xbeef);
        assert_int_equal(back.qtype, DNS_TYPE_AAAA);
        assert_string_equal(back.name, "x.example");
        assert_true(back.flags & DNS_FLAG_RD);
        assert_true(back.edns);
        assert_int_equal(back.udp_size, DNS_EDNS_UDP_MAX);
}

static bool reject_private(void *ctx, int family, const uint8_t *addr, uint32_t ttl) {
        int *calls = ctx;
        (*calls)++;
        return !(family == AF_INET && addr[0] == 10);
}

static void test_filtered(void **state) {
        struct mb m, qm;
        response_msg(&m);
        struct dns_response r;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        struct dns_query q;
        query_msg(&qm, "www.example.com", DNS_TYPE_A, -1);
        qm.b[0] = 0x77; /* a different id from the upstream's */
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        uint8_t out[DNS_MSG_MAX];
        size_t len;
        int calls = 0;
        assert_int_equal(dns_build_filtered(&q, &r, reject_private, &calls, 3600, 512, out, &len), 0);
        assert_int_equal(calls, 3); /* the answer's addresses only, not the glue */
        struct dns_response f;
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_int_equal(f.id, 0x7734);
        assert_false(f.flags & DNS_FLAG_TC);
        assert_true(f.flags & DNS_FLAG_RA);
        assert_int_equal(f.n_answer, 3);    /* CNAME, A 203.0.113.5, AAAA */
        assert_int_equal(f.n_authority, 1); /* SOA */
        assert_int_equal(f.n_additional, 0); /* glue dropped; no EDNS asked: no OPT */
        assert_int_equal(f.rr[0].type, DNS_TYPE_CNAME);
        assert_int_equal(f.rr[0].ttl, 3600); /* 7200 clamped */
        assert_int_equal(f.rr[1].type, DNS_TYPE_A);
        assert_int_equal(f.rr[1].ttl, 300);
        assert_memory_equal(f.msg + f.rr[1].rdata_off, "\xcb\x00\x71\x05", 4);
        assert_int_equal(f.rr[2].type, DNS_TYPE_AAAA);
        assert_int_equal(f.rr[2].ttl, 30);
        /* names survive re-compression: the CNAME target and the SOA's names */
        uint8_t nm[DNS_WIRE_NAME_MAX];
        size_t nl;
        char text[DNS_NAME_MAX + 1];
        assert_int_equal(dns_read_name(f.msg, f.len, f.rr[0].rdata_off, nm, &nl, NULL), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "cdn.example.net");
        assert_int_equal(dns_read_name(f.msg, f.len, f.rr[1].name_off, nm, &nl, NULL), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "cdn.example.net");
        size_t p;
        assert_int_equal(dns_read_name(f.msg, f.len, f.rr[3].rdata_off, nm, &nl, &p), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "ns.example.com");
        assert_int_equal(dns_read_name(f.msg, f.len, p, nm, &nl, &p), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "host.example.com");
        assert_int_equal(p + 20, f.rr[3].rdata_off + f.rr[3].rdlen);
        assert_int_equal(f.rr[3].ttl, 900);
        dns_response_clear(&f);
        /* with EDNS: a fresh OPT, and the TTL clamp at 60 */
        query_msg(&qm, "www.example.com", DNS_TYPE_A, 4096);
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 60, dns_udp_limit(&q), out, &len), 0);
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_int_equal(f.n_answer, 4);
        assert_int_equal(f.n_additional, 1);
        assert_int_equal(f.rr[f.n_rr - 1].type, DNS_TYPE_OPT);
        for (size_t i = 0; i < f.n_rr - 1; i++)
                assert_true(f.rr[i].ttl <= 60);
        dns_response_clear(&f);
        dns_response_clear(&r);
}

/* The owner name of a dropped record, which a kept record pointed into, is written out
 * again for the kept one. */
static bool reject_first(void *ctx, int family, const uint8_t *addr, uint32_t ttl) { return addr[3] != 1; }

static void test_filtered_pointer_into_dropped(void **state) {
        struct mb m, qm;
        header(&m, 9, DNS_FLAG_QR, 1, 2, 0, 0);
        name(&m, "q.example");
        u16(&m, 1), u16(&m, 1);
        size_t owner = m.n;
        name(&m, "host.other.org"); /* written out in the dropped record */
        u16(&m, DNS_TYPE_A), u16(&m, 1), u32(&m, 60), u16(&m, 4), u32(&m, 0xcb007101);
        rr_a(&m, (unsigned)owner + 5, 60, "203.0.113.2"); /* "other.org", inside the dropped one */
        /* a CNAME whose target points there too */
        ptr(&m, 12), u16(&m, DNS_TYPE_CNAME), u16(&m, 1), u32(&m, 60), u16(&m, 6);
        u8(&m, 3), u8(&m, 'w'), u8(&m, 'w'), u8(&m, 'w'), ptr(&m, (unsigned)owner + 5);
        m.b[7] = 3;
        struct dns_response r;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        query_msg(&qm, "q.example", DNS_TYPE_A, -1);
        struct dns_query q;
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        uint8_t out[1024];
        size_t len;
        assert_int_equal(dns_build_filtered(&q, &r, reject_first, NULL, 3600, 512, out, &len), 0);
        struct dns_response f;
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_int_equal(f.n_answer, 2);
        uint8_t nm[DNS_WIRE_NAME_MAX];
        size_t nl;
        char text[DNS_NAME_MAX + 1];
        assert_int_equal(dns_read_name(f.msg, f.len, f.rr[0].name_off, nm, &nl, NULL), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "other.org");
        assert_int_equal(f.rr[1].type, DNS_TYPE_CNAME);
        assert_int_equal(dns_read_name(f.msg, f.len, f.rr[1].rdata_off, nm, &nl, NULL), 0);
        assert_int_equal(dns_name_to_text(nm, nl, text), 0);
        assert_string_equal(text, "www.other.org");
        dns_response_clear(&f);
        dns_response_clear(&r);
}

static void big_response(struct mb *m, unsigned n) {
        header(m, 5, DNS_FLAG_QR | DNS_FLAG_RA, 1, n, 0, 0);
        name(m, "big.example");
        u16(m, 1), u16(m, 1);
        for (unsigned i = 0; i < n; i++) {
                ptr(m, 12);
                u16(m, DNS_TYPE_A), u16(m, DNS_CLASS_IN), u32(m, 60), u16(m, 4);
                u8(m, 203), u8(m, 0), u8(m, i >> 8), u8(m, i & 0xff);
        }
}

static void test_truncation(void **state) {
        struct mb m, qm;
        big_response(&m, 60); /* 29 + 60 * 16 = 989 bytes */
        struct dns_response r;
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        struct dns_query q;
        uint8_t out[DNS_MSG_MAX];
        size_t len;
        struct dns_response f;
        /* no EDNS: 512 at most, whole records, TC */
        query_msg(&qm, "big.example", DNS_TYPE_A, -1);
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 3600, dns_udp_limit(&q), out, &len), 0);
        assert_true(len <= 512);
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_true(f.flags & DNS_FLAG_TC);
        assert_int_equal(f.n_answer, (512 - 29) / 16);
        dns_response_clear(&f);
        /* EDNS 1232: all fit, the OPT too */
        query_msg(&qm, "big.example", DNS_TYPE_A, 1232);
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 3600, dns_udp_limit(&q), out, &len), 0);
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_false(f.flags & DNS_FLAG_TC);
        assert_int_equal(f.n_answer, 60);
        assert_int_equal(f.n_additional, 1);
        dns_response_clear(&f);
        /* EDNS 600: truncated, the OPT still there */
        query_msg(&qm, "big.example", DNS_TYPE_A, 600);
        assert_int_equal(dns_parse_query(qm.b, qm.n, &q), 0);
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 3600, dns_udp_limit(&q), out, &len), 0);
        assert_true(len <= 600);
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_true(f.flags & DNS_FLAG_TC);
        assert_int_equal(f.n_additional, 1);
        dns_response_clear(&f);
        /* not even the question fits */
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 3600, 20, out, &len), -ENOBUFS);
        dns_response_clear(&r);
        /* a TCP-sized answer: 4000 records */
        big_response(&m, 4000);
        assert_int_equal(dns_parse_response(m.b, m.n, &r), 0);
        assert_int_equal(dns_build_filtered(&q, &r, NULL, NULL, 3600, DNS_MSG_MAX, out, &len), 0);
        assert_int_equal(dns_parse_response(out, len, &f), 0);
        assert_int_equal(f.n_answer, 4000);
        dns_response_clear(&f);
        dns_response_clear(&r);
}

static void test_names(void **state) {
        uint8_t w[DNS_WIRE_NAME_MAX];
        size_t wl;
        char t[DNS_NAME_MAX + 1];
        assert_int_equal(dns_name_from_text("Example.COM.", w, &wl), 0);
        assert_int_equal(wl, 13);
        assert_int_equal(dns_name_to_text(w, wl, t), 0);
        assert_string_equal(t, "example.com");
        assert_int_equal(dns_name_from_text("", w, &wl), 0);
        assert_int_equal(wl, 1);
        assert_int_equal(dns_name_from_text("a..b", w, &wl), -EINVAL);
        assert_int_equal(dns_name_from_text(".a", w, &wl), -EINVAL);
        assert_int_equal(dns_name_from_text("a..", w, &wl), -EINVAL);
        char big[300];
        memset(big, 'a', 64);
        big[64] = 0;
        assert_int_equal(dns_name_from_text(big, w, &wl), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_query_ok),
                cmocka_unit_test(test_query_bad),
                cmocka_unit_test(test_response_ok),
                cmocka_unit_test(test_response_bad),
                cmocka_unit_test(test_reply),
                cmocka_unit_test(test_filtered),
                cmocka_unit_test(test_filtered_pointer_into_dropped),
                cmocka_unit_test(test_truncation),
                cmocka_unit_test(test_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
