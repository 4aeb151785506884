/* DNS wire format for spaced's resolver: strict readers for queries and responses and
 * the writers of its answers (dns.h). Every offset is checked against the message before
 * it is read; a name's compression pointers must each go strictly back from where the
 * previous part of the name started, so no message can make a reader loop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/macros.h"
#include "daemon/net/dns.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p) {
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void wr16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
}
static void wr32(uint8_t *p, uint32_t v) {
        wr16(p, (uint16_t)(v >> 16));
        wr16(p + 2, (uint16_t)v);
}
static uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c; }

/* RFC 2181 8: a TTL with the most significant bit set is treated as zero. */
static uint32_t ttl_norm(uint32_t ttl) { return ttl & 0x80000000u ? 0 : ttl; }

int dns_read_name(const uint8_t *msg, size_t len, size_t off, uint8_t *out, size_t *out_len, size_t *next_ret) {
        size_t pos = off, olen = 0, next = 0, limit = off;
        unsigned jumps = 0;
        bool jumped = false;
        for (;;) {
                if (pos >= len)
                        return -EBADMSG;
                uint8_t c = msg[pos];
                if ((c & 0xc0) == 0xc0) {
                        if (pos + 1 >= len)
                                return -EBADMSG;
                        size_t target = (size_t)(c & 0x3f) << 8 | msg[pos + 1];
                        /* only backwards, before the part of the name read so far began:
                         * every jump shrinks limit, so the walk ends */
                        if (target >= limit || target < DNS_HEADER_LEN || ++jumps > DNS_POINTERS_MAX)
                                return -EBADMSG;
                        if (!jumped) {
                                next = pos + 2;
                                jumped = true;
                        }
                        pos = limit = target;
                        continue;
                }
                if (c & 0xc0) /* 0x40 and 0x80: extended and reserved label types */
                        return -EBADMSG;
                if (c == 0) {
                        if (olen + 1 > DNS_WIRE_NAME_MAX)
                                return -EBADMSG;
                        out[olen++] = 0;
                        if (!jumped)
                                next = pos + 1;
                        break;
                }
                /* room for this label and the final root byte */
                if (c > DNS_LABEL_MAX || len - pos - 1 < c || olen + 1 + c + 1 > DNS_WIRE_NAME_MAX)
                        return -EBADMSG;
                memcpy(out + olen, msg + pos, (size_t)c + 1);
                olen += (size_t)c + 1;
                pos += (size_t)c + 1;
        }
        *out_len = olen;
        if (next_ret)
                *next_ret = next;
        return 0;
}

int dns_name_to_text(const uint8_t *wire, size_t wire_len, char *out) {
        size_t i = 0, o = 0;
        while (i < wire_len && wire[i] != 0) {
                uint8_t n = wire[i++];
                if (n > DNS_LABEL_MAX || i + n >= wire_len)
                        return -EBADMSG;
                if (o)
                        out[o++] = '.';
                for (uint8_t k = 0; k < n; k++) {
                        uint8_t c = wire[i++];
                        if (c <= 0x20 || c >= 0x7f || c == '.')
                                return -EBADMSG;
                        out[o++] = (char)lower(c);
                }
                if (o > DNS_NAME_MAX)
                        return -EBADMSG;
        }
        if (i + 1 != wire_len)
                return -EBADMSG;
        out[o] = '\0';
        return 0;
}

int dns_name_from_text(const char *text, uint8_t *out, size_t *out_len) {
        size_t o = 0, tl = strlen(text);
        if (tl && text[tl - 1] == '.')
                tl--;
        if (tl > DNS_NAME_MAX)
                return -EINVAL;
        size_t i = 0;
        while (i < tl) {
                size_t j = i;
                while (j < tl && text[j] != '.')
                        j++;
                size_t n = j - i;
                if (n == 0 || n > DNS_LABEL_MAX)
                        return -EINVAL;
                out[o++] = (uint8_t)n;
                memcpy(out + o, text + i, n);
                o += n;
                i = j + 1;
                if (j == tl - 1 && text[j] == '.') /* "a..": an empty last label */
                        return -EINVAL;
        }
        out[o++] = 0;
        *out_len = o;
        return 0;
}

static bool name_eq(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
        if (alen != blen)
                return false;
        for (size_t i = 0; i < alen; i++)
                if (lower(a[i]) != lower(b[i]))
                        return false;
        return true;
}

/* One record's fixed part after its owner name; *pos moves past the rdata. */
static int read_rr(const uint8_t *msg, size_t len, size_t *pos, struct dns_rr *rr) {
        uint8_t name[DNS_WIRE_NAME_MAX];
        size_t nlen, p;
        rr->name_off = *pos;
        if (dns_read_name(msg, len, *pos, name, &nlen, &p) < 0 || len - p < 10)
                return -EBADMSG;
        rr->type = rd16(msg + p);
        rr->class = rd16(msg + p + 2);
        rr->ttl = rd32(msg + p + 4);
        rr->rdlen = rd16(msg + p + 8);
        p += 10;
        if (len - p < rr->rdlen)
                return -EBADMSG;
        rr->rdata_off = p;
        *pos = p + rr->rdlen;
        if (rr->type == DNS_TYPE_OPT && nlen != 1)
                return -EBADMSG;
        return 0;
}

static int header_counts(const uint8_t *msg, size_t len, unsigned c[4]) {
        for (int i = 0; i < 4; i++)
                c[i] = rd16(msg + 4 + 2 * i);
        /* every question takes 5 bytes at least, every record DNS_RR_MIN_LEN: a count the
         * data cannot hold is refused before anything is allocated for it */
        size_t need = (size_t)c[0] * 5 + ((size_t)c[1] + c[2] + c[3]) * DNS_RR_MIN_LEN;
        return need > len - DNS_HEADER_LEN ? -EBADMSG : 0;
}

int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *ret) {
        memset(ret, 0, sizeof *ret);
        if (len > DNS_MSG_MAX)
                return -EMSGSIZE;
        if (len < DNS_HEADER_LEN)
                return -EBADMSG;
        ret->id = rd16(msg);
        ret->flags = rd16(msg + 2);
        if (ret->flags & DNS_FLAG_QR)
                return -EBADMSG;
        if (ret->flags & DNS_FLAG_OPCODE)
                return -EOPNOTSUPP;
        unsigned c[4];
        if (header_counts(msg, len, c) < 0 || c[0] != 1 || c[1] != 0 || c[2] != 0)
                return -EBADMSG;
        struct dns_query q = { .id = ret->id, .flags = ret->flags };
        size_t pos;
        if (dns_read_name(msg, len, DNS_HEADER_LEN, q.qname, &q.qname_len, &pos) < 0 || len - pos < 4 ||
            dns_name_to_text(q.qname, q.qname_len, q.name) < 0)
                return -EBADMSG;
        q.qtype = rd16(msg + pos);
        q.qclass = rd16(msg + pos + 2);
        pos += 4;
        for (unsigned i = 0; i < c[3]; i++) {
                struct dns_rr rr;
                if (read_rr(msg, len, &pos, &rr) < 0)
                        return -EBADMSG;
                if (rr.type == DNS_TYPE_OPT) {
                        if (q.edns)
                                return -EBADMSG;
                        q.edns = true;
                        q.udp_size = MAX(rr.class, (uint16_t)DNS_UDP_MIN);
                }
        }
        if (pos != len)
                return -EBADMSG;
        *ret = q;
        return 0;
}

/* The names inside the rdata of the types that carry them (RFC 1035 3.3, RFC 2782,
 * RFC 6672): fixed bytes before them, how many names, fixed bytes after them. */
static void rdata_layout(uint16_t type, int *fixed_before, int *names, int *fixed_after) {
        *fixed_before = 0, *names = 0, *fixed_after = 0;
        switch (type) {
        case DNS_TYPE_CNAME:
        case DNS_TYPE_NS:
        case DNS_TYPE_PTR:
        case DNS_TYPE_DNAME:
                *names = 1;
                break;
        case DNS_TYPE_MX:
                *fixed_before = 2, *names = 1;
                break;
        case DNS_TYPE_SRV:
                *fixed_before = 6, *names = 1;
                break;
        case DNS_TYPE_SOA:
                *names = 2, *fixed_after = 20;
                break;
        }
}

static int check_rdata(const uint8_t *msg, size_t len, const struct dns_rr *rr) {
        if (rr->class == DNS_CLASS_IN && rr->type == DNS_TYPE_A && rr->rdlen != 4)
                return -EBADMSG;
        if (rr->class == DNS_CLASS_IN && rr->type == DNS_TYPE_AAAA && rr->rdlen != 16)
                return -EBADMSG;
        int before, names, after;
        rdata_layout(rr->type, &before, &names, &after);
        if (!names)
                return 0;
        size_t end = rr->rdata_off + rr->rdlen, p = rr->rdata_off + (size_t)before;
        if (p > end)
                return -EBADMSG;
        for (int i = 0; i < names; i++) {
                uint8_t name[DNS_WIRE_NAME_MAX];
                size_t nlen;
                /* the name must lie inside the rdata (what it points to may be anywhere before) */
                if (dns_read_name(msg, end, p, name, &nlen, &p) < 0)
                        return -EBADMSG;
        }
        return p + (size_t)after == end ? 0 : -EBADMSG;
}

void dns_response_clear(struct dns_response *r) {
        if (!r)
                return;
        free(r->rr);
        memset(r, 0, sizeof *r);
}

int dns_parse_response(const uint8_t *msg, size_t len, struct dns_response *ret) {
        memset(ret, 0, sizeof *ret);
        if (len > DNS_MSG_MAX)
                return -EMSGSIZE;
        if (len < DNS_HEADER_LEN)
                return -EBADMSG;
        struct dns_response r = { .id = rd16(msg), .flags = rd16(msg + 2), .msg = msg, .len = len };
        unsigned c[4];
        if (!(r.flags & DNS_FLAG_QR) || (r.flags & DNS_FLAG_OPCODE) || header_counts(msg, len, c) < 0 || c[0] > 1)
                return -EBADMSG;
        size_t pos = DNS_HEADER_LEN;
        if (c[0] == 1) {
                if (dns_read_name(msg, len, pos, r.qname, &r.qname_len, &pos) < 0 || len - pos < 4)
                        return -EBADMSG;
                r.qtype = rd16(msg + pos);
                r.qclass = rd16(msg + pos + 2);
                r.has_question = true;
                pos += 4;
        }
        r.n_answer = c[1], r.n_authority = c[2], r.n_additional = c[3];
        r.n_rr = r.n_answer + r.n_authority + r.n_additional;
        if (r.n_rr) {
                r.rr = calloc(r.n_rr, sizeof *r.rr);
                if (!r.rr)
                        return -ENOMEM;
        }
        bool opt = false;
        for (size_t i = 0; i < r.n_rr; i++) {
                struct dns_rr *rr = &r.rr[i];
                rr->section = i < r.n_answer ? DNS_SEC_ANSWER
                              : i < r.n_answer + r.n_authority ? DNS_SEC_AUTHORITY
                                                                : DNS_SEC_ADDITIONAL;
                if (read_rr(msg, len, &pos, rr) < 0 || check_rdata(msg, len, rr) < 0)
                        goto bad;
                if (rr->type == DNS_TYPE_OPT) {
                        if (opt || rr->section != DNS_SEC_ADDITIONAL)
                                goto bad;
                        opt = true;
                }
        }
        if (pos != len)
                goto bad;
        *ret = r;
        return 0;
bad:
        free(r.rr);
        return -EBADMSG;
}

int dns_rr_addr(const struct dns_response *r, size_t i, int *family, uint8_t addr[16]) {
        if (i >= r->n_rr)
                return -EINVAL;
        const struct dns_rr *rr = &r->rr[i];
        if (rr->class != DNS_CLASS_IN)
                return -EINVAL;
        if (rr->type == DNS_TYPE_A && rr->rdlen == 4) {
                *family = AF_INET;
                memcpy(addr, r->msg + rr->rdata_off, 4);
                return 0;
        }
        if (rr->type == DNS_TYPE_AAAA && rr->rdlen == 16) {
                *family = AF_INET6;
                memcpy(addr, r->msg + rr->rdata_off, 16);
                return 0;
        }
        return -EINVAL;
}

uint32_t dns_response_min_ttl(const struct dns_response *r) {
        uint32_t m = UINT32_MAX;
        for (size_t i = 0; i < r->n_answer; i++)
                m = MIN(m, ttl_norm(r->rr[i].ttl));
        return m;
}

static const struct dns_rr *find_opt(const struct dns_response *r) {
        for (size_t i = r->n_answer + r->n_authority; i < r->n_rr; i++)
                if (r->rr[i].type == DNS_TYPE_OPT)
                        return &r->rr[i];
        return NULL;
}

unsigned dns_response_rcode(const struct dns_response *r) {
        const struct dns_rr *opt = find_opt(r);
        return (r->flags & DNS_FLAG_RCODE) | (opt ? (opt->ttl >> 24) << 4 : 0);
}

bool dns_response_matches(const struct dns_response *r, const struct dns_query *q) {
        return r->has_question && r->qtype == q->qtype && r->qclass == q->qclass &&
               name_eq(r->qname, r->qname_len, q->qname, q->qname_len);
}

size_t dns_udp_limit(const struct dns_query *q) {
        if (!q->edns)
                return DNS_UDP_MIN;
        return MIN(MAX((size_t)q->udp_size, DNS_UDP_MIN), DNS_EDNS_UDP_MAX);
}

/* An output message under construction, with name compression over what it holds. */
#define DNS_COMPRESS_MAX 128
struct writer {
        uint8_t *out;
        size_t cap, pos;
        bool full;
        size_t n_sfx;
        struct {
                uint16_t off;   /* where the suffix starts in out */
                uint8_t len;    /* its wire length */
                uint8_t name[DNS_WIRE_NAME_MAX];
        } sfx[DNS_COMPRESS_MAX];
};

static void put(struct writer *w, const void *p, size_t n) {
        if (w->full || w->cap - w->pos < n) {
                w->full = true;
                return;
        }
        memcpy(w->out + w->pos, p, n);
        w->pos += n;
}
static void put16(struct writer *w, uint16_t v) {
        uint8_t b[2];
        wr16(b, v);
        put(w, b, 2);
}
static void put32(struct writer *w, uint32_t v) {
        uint8_t b[4];
        wr32(b, v);
        put(w, b, 4);
}

/* Writes an uncompressed wire name, compressed against the names already written when
 * compress says so (and then offered to later names). */
static void put_name(struct writer *w, const uint8_t *name, size_t nlen, bool compress) {
        size_t i = 0;
        while (name[i] != 0) {
                if (compress)
                        for (size_t k = 0; k < w->n_sfx; k++)
                                if (name_eq(w->sfx[k].name, w->sfx[k].len, name + i, nlen - i)) {
                                        put16(w, (uint16_t)(0xc000u | w->sfx[k].off));
                                        return;
                                }
                if (compress && w->n_sfx < DNS_COMPRESS_MAX && w->pos < 0x4000 && !w->full) {
                        w->sfx[w->n_sfx].off = (uint16_t)w->pos;
                        w->sfx[w->n_sfx].len = (uint8_t)(nlen - i);
                        memcpy(w->sfx[w->n_sfx].name, name + i, nlen - i);
                        w->n_sfx++;
                }
                put(w, name + i, (size_t)name[i] + 1);
                i += (size_t)name[i] + 1;
        }
        put(w, "", 1);
}

static void put_header(struct writer *w, uint16_t id, uint16_t flags, uint16_t qd) {
        put16(w, id);
        put16(w, flags);
        put16(w, qd);
        put16(w, 0);
        put16(w, 0);
        put16(w, 0);
}

static void put_opt(struct writer *w, uint16_t udp, uint32_t ttl) {
        put(w, "", 1);
        put16(w, DNS_TYPE_OPT);
        put16(w, udp);
        put32(w, ttl);
        put16(w, 0);
}

int dns_build_query(const struct dns_query *q, uint16_t id, uint8_t *out, size_t size, size_t *len_ret) {
        struct writer w = { .out = out, .cap = size };
        put_header(&w, id, (uint16_t)(DNS_FLAG_RD | (q->flags & DNS_FLAG_CD)), 1);
        put_name(&w, q->qname, q->qname_len, false);
        put16(&w, q->qtype);
        put16(&w, q->qclass);
        put_opt(&w, DNS_EDNS_UDP_MAX, 0);
        if (w.full)
                return -ENOBUFS;
        wr16(out + 10, 1); /* arcount: the OPT */
        *len_ret = w.pos;
        return 0;
}

int dns_build_reply(const struct dns_query *q, unsigned rcode, uint8_t *out, size_t size, size_t *len_ret) {
        struct writer w = { .out = out, .cap = size };
        uint16_t flags = (uint16_t)(DNS_FLAG_QR | DNS_FLAG_RA | (q->flags & (DNS_FLAG_OPCODE | DNS_FLAG_RD | DNS_FLAG_CD)) |
                                    (rcode & DNS_FLAG_RCODE));
        bool question = q->qname_len > 0;
        put_header(&w, q->id, flags, question);
        if (question) {
                put_name(&w, q->qname, q->qname_len, false);
                put16(&w, q->qtype);
                put16(&w, q->qclass);
        }
        if (q->edns)
                put_opt(&w, DNS_EDNS_UDP_MAX, 0);
        if (w.full)
                return -ENOBUFS;
        wr16(out + 10, q->edns);
        *len_ret = w.pos;
        return 0;
}

/* One record of r copied into w, names rewritten; false if it did not fit (w rolled back). */
static bool copy_rr(struct writer *w, const struct dns_response *r, const struct dns_rr *rr, uint32_t ttl_max) {
        size_t start = w->pos, n_sfx = w->n_sfx;
        uint8_t name[DNS_WIRE_NAME_MAX];
        size_t nlen, p;
        if (dns_read_name(r->msg, r->len, rr->name_off, name, &nlen, NULL) < 0)
                goto undo; /* parse checked it: cannot happen */
        put_name(w, name, nlen, true);
        put16(w, rr->type);
        put16(w, rr->class);
        uint32_t ttl = ttl_norm(rr->ttl);
        put32(w, ttl_max ? MIN(ttl, ttl_max) : ttl);
        size_t rdlen_at = w->pos;
        put16(w, 0);
        int before, names, after;
        rdata_layout(rr->type, &before, &names, &after);
        const uint8_t *rd = r->msg + rr->rdata_off;
        if (!names) {
                put(w, rd, rr->rdlen);
        } else {
                /* RFC 3597: only RFC 1035's types may be compressed; SRV and DNAME not */
                bool compress = rr->type != DNS_TYPE_SRV && rr->type != DNS_TYPE_DNAME;
                put(w, rd, (size_t)before);
                p = rr->rdata_off + (size_t)before;
                for (int i = 0; i < names; i++) {
                        if (dns_read_name(r->msg, rr->rdata_off + rr->rdlen, p, name, &nlen, &p) < 0)
                                goto undo;
                        put_name(w, name, nlen, compress);
                }
                put(w, r->msg + p, (size_t)after);
        }
        size_t rdlen = w->pos - rdlen_at - 2;
        if (w->full || rdlen > UINT16_MAX)
                goto undo;
        wr16(w->out + rdlen_at, (uint16_t)rdlen);
        return true;
undo:
        w->pos = start;
        w->n_sfx = n_sfx;
        w->full = false;
        return false;
}

int dns_build_filtered(const struct dns_query *q, const struct dns_response *r, dns_keep_fn keep, void *ctx,
                       uint32_t ttl_max, size_t max_len, uint8_t *out, size_t *len_ret) {
        if (max_len > DNS_MSG_MAX)
                max_len = DNS_MSG_MAX;
        unsigned rcode = dns_response_rcode(r);
        const struct dns_rr *ropt = find_opt(r);
        if (rcode > 15 && !q->edns)
                rcode = DNS_RCODE_SERVFAIL; /* an extended rcode the client cannot be told */
        struct writer *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        /* room kept for the OPT record that ends an EDNS answer */
        size_t opt_len = q->edns ? DNS_RR_MIN_LEN : 0;
        if (max_len < opt_len) {
                free(w);
                return -ENOBUFS;
        }
        w->out = out;
        w->cap = max_len - opt_len;
        uint16_t flags = (uint16_t)(DNS_FLAG_QR | (q->flags & (DNS_FLAG_OPCODE | DNS_FLAG_RD | DNS_FLAG_CD)) |
                                    (r->flags & (DNS_FLAG_AA | DNS_FLAG_RA)) | (rcode & DNS_FLAG_RCODE));
        put_header(w, q->id, flags, 1);
        put_name(w, q->qname, q->qname_len, true);
        put16(w, q->qtype);
        put16(w, q->qclass);
        if (w->full) {
                free(w);
                return -ENOBUFS;
        }
        uint16_t count[3] = { 0 };
        bool truncated = false;
        for (size_t i = 0; i < r->n_rr; i++) {
                const struct dns_rr *rr = &r->rr[i];
                int family;
                uint8_t addr[16];
                bool is_addr = dns_rr_addr(r, i, &family, addr) == 0;
                if (rr->type == DNS_TYPE_OPT)
                        continue;
                if (is_addr && rr->section != DNS_SEC_ANSWER)
                        continue;
                if (is_addr && keep && !keep(ctx, family, addr, ttl_norm(rr->ttl)))
                        continue;
                if (!copy_rr(w, r, rr, ttl_max)) {
                        truncated = rr->section != DNS_SEC_ADDITIONAL;
                        break;
                }
                count[rr->section]++;
        }
        w->cap = max_len;
        if (q->edns)
                put_opt(w, DNS_EDNS_UDP_MAX, ropt ? ropt->ttl & 0xff000000u : 0);
        if (w->full) { /* cannot happen: the room was kept */
                free(w);
                return -ENOBUFS;
        }
        if (truncated)
                flags |= DNS_FLAG_TC;
        wr16(out + 2, flags);
        wr16(out + 6, count[DNS_SEC_ANSWER]);
        wr16(out + 8, count[DNS_SEC_AUTHORITY]);
        wr16(out + 10, (uint16_t)(count[DNS_SEC_ADDITIONAL] + q->edns));
        *len_ret = w->pos;
        free(w);
        return 0;
}
