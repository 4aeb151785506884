/* Fuzz target: spaced's DNS wire format (src/daemon/net/dns.c), the code every packet a
 * sandbox sends to the resolver, and every upstream answer, reaches. The input is read as
 * a query and as a response. Properties: no crash, loop or leak; whatever a reader accepts
 * stays inside its limits; every message the writers make from an accepted one reads back
 * (a reply or upstream query from a query; a filtered answer from a response, for several
 * size limits and keep decisions) with the same id and question, never longer than its
 * limit, with no more records than the original, no address the filter rejected and no
 * glue address, every TTL clamped, and TC only when records were left off. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/net/dns.h"
#include "fuzz.h"

static uint8_t out[DNS_MSG_MAX];

static void check_query(const uint8_t *data, size_t size) {
        struct dns_query q;
        int k = dns_parse_query(data, size, &q);
        FUZZ_CHECK(k == 0 || k == -EBADMSG || k == -EMSGSIZE || k == -EOPNOTSUPP);
        if (k < 0) {
                FUZZ_CHECK(q.qname_len == 0);
                if (size >= DNS_HEADER_LEN && k != -EMSGSIZE) {
                        /* the caller answers FORMERR / NOTIMP with what it knows */
                        size_t len;
                        FUZZ_CHECK(dns_build_reply(&q, DNS_RCODE_FORMERR, out, sizeof out, &len) == 0);
                        FUZZ_CHECK(len == DNS_HEADER_LEN);
                }
                return;
        }
        FUZZ_CHECK(q.qname_len >= 1 && q.qname_len <= DNS_WIRE_NAME_MAX);
        FUZZ_CHECK(strlen(q.name) <= DNS_NAME_MAX);
        for (const char *c = q.name; *c; c++)
                FUZZ_CHECK(*c > ' ' && *c < 0x7f && !(*c >= 'A' && *c <= 'Z'));
        size_t lim = dns_udp_limit(&q);
        FUZZ_CHECK(lim >= DNS_UDP_MIN && lim <= DNS_EDNS_UDP_MAX);
        static const unsigned rcodes[] = { DNS_RCODE_NOERROR, DNS_RCODE_NXDOMAIN, DNS_RCODE_REFUSED, DNS_RCODE_SERVFAIL };
        for (size_t i = 0; i < sizeof rcodes / sizeof rcodes[0]; i++) {
                size_t len;
                FUZZ_CHECK(dns_build_reply(&q, rcodes[i], out, sizeof out, &len) == 0);
                FUZZ_CHECK(len <= DNS_UDP_MIN); /* a question and an OPT always fit */
                struct dns_response r;
                FUZZ_CHECK(dns_parse_response(out, len, &r) == 0);
                FUZZ_CHECK(r.id == q.id && dns_response_matches(&r, &q));
                FUZZ_CHECK(dns_response_rcode(&r) == rcodes[i]);
                FUZZ_CHECK(r.n_answer == 0 && r.n_additional == (q.edns ? 1u : 0u));
                dns_response_clear(&r);
        }
        size_t len;
        FUZZ_CHECK(dns_build_query(&q, 0xabcd, out, sizeof out, &len) == 0);
        struct dns_query back;
        FUZZ_CHECK(dns_parse_query(out, len, &back) == 0);
        FUZZ_CHECK(back.id == 0xabcd && back.qtype == q.qtype && back.qclass == q.qclass);
        FUZZ_CHECK(strcmp(back.name, q.name) == 0);
}

/* Keeps or drops an address by its bytes and a byte of the input: the same address gets
 * the same decision wherever it appears. */
struct keep {
        uint8_t seed;
        unsigned calls;
};
static bool decide(uint8_t seed, int family, const uint8_t *addr) {
        size_t n = family == AF_INET ? 4 : 16;
        uint8_t x = seed;
        for (size_t i = 0; i < n; i++)
                x ^= addr[i];
        return (x & 1) == 0;
}
static bool keep_fn(void *ctx, int family, const uint8_t *addr, uint32_t ttl) {
        struct keep *k = ctx;
        k->calls++;
        return decide(k->seed, family, addr);
}

static void check_response(const uint8_t *data, size_t size) {
        struct dns_response r;
        int k = dns_parse_response(data, size, &r);
        FUZZ_CHECK(k == 0 || k == -EBADMSG || k == -EMSGSIZE || k == -ENOMEM);
        if (k < 0)
                return;
        FUZZ_CHECK(r.n_rr == r.n_answer + r.n_authority + r.n_additional);
        FUZZ_CHECK(r.n_rr <= (size - DNS_HEADER_LEN) / DNS_RR_MIN_LEN);
        for (size_t i = 0; i < r.n_rr; i++) {
                FUZZ_CHECK(r.rr[i].rdata_off + r.rr[i].rdlen <= size);
                int fam;
                uint8_t a[16];
                if (dns_rr_addr(&r, i, &fam, a) == 0)
                        FUZZ_CHECK(r.rr[i].type == (fam == AF_INET ? DNS_TYPE_A : DNS_TYPE_AAAA));
        }
        (void)dns_response_min_ttl(&r);
        (void)dns_response_rcode(&r);
        /* a query asking r's question, as the resolver would hold it */
        struct dns_query q = { .id = 0x5151, .flags = DNS_FLAG_RD, .qtype = r.qtype, .qclass = r.qclass };
        if (!r.has_question || dns_name_to_text(r.qname, r.qname_len, q.name) < 0) {
                dns_response_clear(&r);
                return;
        }
        memcpy(q.qname, r.qname, r.qname_len);
        q.qname_len = r.qname_len;
        static const size_t limits[] = { 512, 700, 1232, DNS_MSG_MAX };
        for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++) {
                q.edns = li % 2 == 1;
                q.udp_size = q.edns ? 1232 : 0;
                struct keep kc = { .seed = size > 13 ? data[size - 1] : 0 };
                uint32_t ttl_max = li == 3 ? 3600 : 30;
                size_t len;
                k = dns_build_filtered(&q, &r, keep_fn, &kc, ttl_max, limits[li], out, &len);
                FUZZ_CHECK(k == 0 || k == -ENOBUFS || k == -ENOMEM);
                if (k < 0)
                        continue;
                FUZZ_CHECK(len <= limits[li]);
                struct dns_response f;
                FUZZ_CHECK(dns_parse_response(out, len, &f) == 0);
                FUZZ_CHECK(f.id == q.id && dns_response_matches(&f, &q));
                FUZZ_CHECK(f.n_answer <= r.n_answer && f.n_authority <= r.n_authority);
                FUZZ_CHECK(f.n_additional <= r.n_additional + (q.edns ? 1u : 0u));
                size_t opts = 0;
                for (size_t i = 0; i < f.n_rr; i++) {
                        if (f.rr[i].type == DNS_TYPE_OPT) {
                                opts++;
                                continue;
                        }
                        FUZZ_CHECK(f.rr[i].ttl <= ttl_max);
                        int fam;
                        uint8_t a[16];
                        if (dns_rr_addr(&f, i, &fam, a) == 0) {
                                FUZZ_CHECK(f.rr[i].section == DNS_SEC_ANSWER); /* glue never passes */
                                FUZZ_CHECK(decide(kc.seed, fam, a));            /* nor a rejected one */
                        }
                }
                FUZZ_CHECK(opts == (q.edns ? 1u : 0u));
                /* TC: only when an answer or authority record was left off */
                if (f.flags & DNS_FLAG_TC)
                        FUZZ_CHECK(f.n_answer + f.n_authority < r.n_answer + r.n_authority);
                dns_response_clear(&f);
        }
        dns_response_clear(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        check_query(data, size);
        check_response(data, size);
        /* the name reader alone, at every offset of a short input */
        if (size <= 512)
                for (size_t off = 0; off < size; off++) {
                        uint8_t name[DNS_WIRE_NAME_MAX];
                        size_t nl, next;
                        if (dns_read_name(data, size, off, name, &nl, &next) == 0) {
                                FUZZ_CHECK(nl >= 1 && nl <= DNS_WIRE_NAME_MAX && name[nl - 1] == 0);
                                FUZZ_CHECK(next > off && next <= size);
                        }
                }
        return 0;
}
