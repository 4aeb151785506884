/* DNS wire format (RFC 1035) for spaced's resolver (resolver.c): parse a sandbox's query
 * and an upstream's response with strict bounds, and build the answers the resolver
 * sends (an error or empty answer to a query; a filtered, TTL-clamped copy of an upstream
 * answer). Pure data: no sockets, no allocation but a response's record table. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_MSG_MAX 65535u      /* a whole message (TCP's 2-byte length) */
#define DNS_UDP_MIN 512u        /* a UDP answer without EDNS (RFC 1035 4.2.1) */
#define DNS_EDNS_UDP_MAX 1232u  /* the largest UDP answer we send, whatever EDNS asks */
#define DNS_HEADER_LEN 12u
#define DNS_LABEL_MAX 63u
#define DNS_WIRE_NAME_MAX 255u  /* a name in wire form: labels with their lengths + root */
#define DNS_NAME_MAX 253u       /* the same name as text, without the trailing dot */
#define DNS_POINTERS_MAX 64u    /* compression pointers followed in one name */
#define DNS_RR_MIN_LEN 11u      /* root name (1) + type, class, TTL, rdlength (10) */

enum {
        DNS_TYPE_A = 1,
        DNS_TYPE_NS = 2,
        DNS_TYPE_CNAME = 5,
        DNS_TYPE_SOA = 6,
        DNS_TYPE_PTR = 12,
        DNS_TYPE_MX = 15,
        DNS_TYPE_AAAA = 28,
        DNS_TYPE_SRV = 33,
        DNS_TYPE_DNAME = 39,
        DNS_TYPE_OPT = 41,
        DNS_TYPE_SVCB = 64,
        DNS_TYPE_HTTPS = 65,
        DNS_TYPE_IXFR = 251,
        DNS_TYPE_AXFR = 252,
};
enum { DNS_CLASS_IN = 1 };
enum {
        DNS_RCODE_NOERROR = 0,
        DNS_RCODE_FORMERR = 1,
        DNS_RCODE_SERVFAIL = 2,
        DNS_RCODE_NXDOMAIN = 3,
        DNS_RCODE_NOTIMP = 4,
        DNS_RCODE_REFUSED = 5,
};
/* Header flag bits (the 16-bit word after the ID). */
#define DNS_FLAG_QR 0x8000u
#define DNS_FLAG_OPCODE 0x7800u
#define DNS_FLAG_AA 0x0400u
#define DNS_FLAG_TC 0x0200u
#define DNS_FLAG_RD 0x0100u
#define DNS_FLAG_RA 0x0080u
#define DNS_FLAG_AD 0x0020u
#define DNS_FLAG_CD 0x0010u
#define DNS_FLAG_RCODE 0x000fu

enum dns_section { DNS_SEC_ANSWER, DNS_SEC_AUTHORITY, DNS_SEC_ADDITIONAL };

/* A query: one question (and at most an OPT record). */
struct dns_query {
        uint16_t id;
        uint16_t flags;                       /* as received (RD, CD, opcode) */
        uint16_t qtype, qclass;
        uint8_t qname[DNS_WIRE_NAME_MAX];     /* wire form, uncompressed, case as sent */
        size_t qname_len;
        char name[DNS_NAME_MAX + 1];          /* text: lowercase, no trailing dot; "" = root */
        bool edns;                            /* an OPT record came with it */
        uint16_t udp_size;                    /* EDNS payload size asked (0 without EDNS) */
};

/* Reads a query. -EMSGSIZE over DNS_MSG_MAX; -EBADMSG when malformed (not a query, not
 * exactly one question, a bad name, counts the data does not hold, trailing bytes, a name
 * that is not printable ASCII without dots inside labels); -EOPNOTSUPP for an opcode other
 * than QUERY. Whenever len >= DNS_HEADER_LEN, ret->id and ret->flags are set even on
 * failure, so the caller can answer FORMERR or NOTIMP (dns_build_reply). */
int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *ret);

/* One resource record of a parsed response; offsets into the message. */
struct dns_rr {
        uint8_t section;        /* enum dns_section */
        uint16_t type, class;
        uint32_t ttl;           /* as sent; an OPT record's TTL is its flags, not a time */
        size_t name_off;        /* the owner name (maybe compressed) */
        size_t rdata_off;
        uint16_t rdlen;
};

struct dns_response {
        uint16_t id, flags;
        uint16_t qtype, qclass;
        uint8_t qname[DNS_WIRE_NAME_MAX];
        size_t qname_len;
        bool has_question;                    /* qdcount 1 (0 is allowed for errors) */
        struct dns_rr *rr;                    /* n_rr records, answers first */
        size_t n_rr, n_answer, n_authority, n_additional;
        const uint8_t *msg;                   /* the caller's buffer, not copied */
        size_t len;
};

/* Reads a response (QR set). Every record is checked: names (compression pointers only
 * backwards, at most DNS_POINTERS_MAX, labels <= 63, names <= 255 bytes), A rdata of 4
 * bytes and AAAA of 16, the names inside CNAME/NS/PTR/DNAME/MX/SOA/SRV rdata, at most
 * one OPT (in the additional section, owned by the root), counts the data holds, no
 * trailing bytes. -EMSGSIZE, -EBADMSG, -ENOMEM. ret is zeroed on failure; on success
 * dns_response_clear frees it. msg must outlive ret. */
int dns_parse_response(const uint8_t *msg, size_t len, struct dns_response *ret);
void dns_response_clear(struct dns_response *r);

/* The address of an A (AF_INET, 4 bytes) or AAAA (AF_INET6, 16 bytes) record of class
 * IN; -EINVAL for any other record. */
int dns_rr_addr(const struct dns_response *r, size_t i, int *family, uint8_t addr[16]);
/* The smallest TTL of the answer section's records (RFC 2181: a TTL with the top bit set
 * counts as 0); UINT32_MAX when there is none. */
uint32_t dns_response_min_ttl(const struct dns_response *r);
/* The rcode, with EDNS's extended bits when an OPT record carries them. */
unsigned dns_response_rcode(const struct dns_response *r);
/* True if the response's question is q's (type, class, name case-insensitively). */
bool dns_response_matches(const struct dns_response *r, const struct dns_query *q);

/* The largest answer a UDP client of q takes: 512 bytes, or its EDNS size up to
 * DNS_EDNS_UDP_MAX. */
size_t dns_udp_limit(const struct dns_query *q);

/* A query for q's question with the given id (RD and CD as q had them, an OPT record
 * announcing DNS_EDNS_UDP_MAX). -ENOBUFS when size is too small. */
int dns_build_query(const struct dns_query *q, uint16_t id, uint8_t *out, size_t size, size_t *len_ret);

/* An answer to q with no records: the rcode (NXDOMAIN, REFUSED, SERVFAIL, NOERROR for an
 * empty answer, FORMERR/NOTIMP), q's question when it has one (qname_len > 0), an OPT
 * record when q had EDNS. -ENOBUFS. */
int dns_build_reply(const struct dns_query *q, unsigned rcode, uint8_t *out, size_t size, size_t *len_ret);

/* What dns_build_filtered asks of each A/AAAA record of the answer section: true keeps
 * it. ttl is the record's TTL (RFC 2181 applied). */
typedef bool (*dns_keep_fn)(void *ctx, int family, const uint8_t *addr, uint32_t ttl);

/* The answer to q made from the upstream's response r: q's id and question, r's rcode and
 * AA/RA bits, the answer and authority records of r except the A/AAAA answers keep()
 * rejects, A/AAAA records of the authority and additional sections dropped (glue nobody
 * vetted), other additional records kept, r's OPT replaced by a fresh one when q had
 * EDNS (none otherwise), every TTL rewritten to at most ttl_max. Names are written
 * decompressed and then compressed anew, so dropping a record never breaks a pointer.
 * When the answer exceeds max_len (dns_udp_limit for UDP, DNS_MSG_MAX for TCP), whole
 * records are left off from the end and, if an answer or authority record had to go, TC
 * is set. out holds max_len bytes. -ENOBUFS when not even the header and question fit; -EBADMSG if r is not one
 * dns_parse_response accepted. */
int dns_build_filtered(const struct dns_query *q, const struct dns_response *r, dns_keep_fn keep, void *ctx,
                       uint32_t ttl_max, size_t max_len, uint8_t *out, size_t *len_ret);

/* The wire name at off in msg, decompressed into out (DNS_WIRE_NAME_MAX bytes); *next_ret
 * (may be NULL) is where the name ends in msg (after its first pointer, if any). -EBADMSG. */
int dns_read_name(const uint8_t *msg, size_t len, size_t off, uint8_t *out, size_t *out_len, size_t *next_ret);
/* A wire name as text, lowercase, no trailing dot ("" for the root). -EBADMSG when a label
 * holds a dot or a byte outside printable ASCII. out holds DNS_NAME_MAX + 1. */
int dns_name_to_text(const uint8_t *wire, size_t wire_len, char *out);
/* Text ("www.example.com", a trailing dot allowed) to wire form. -EINVAL. */
int dns_name_from_text(const char *text, uint8_t *out, size_t *out_len);
