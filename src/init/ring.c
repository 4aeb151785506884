/* Output ring of background processes. Records carry their stream so a re-attached client
 * gets stdout and stderr apart, in the order they were produced. Memory grows with the
 * output up to the ring's max, so a quiet process costs almost nothing. */
#include "init/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ring_init(struct ring *r, size_t max, uint64_t base_off) {
        *r = (struct ring){ .max = max, .start_off = base_off, .end_off = base_off };
}

void ring_free(struct ring *r) {
        free(r->data);
        r->data = NULL;
        r->cap = 0;
}

static size_t used(const struct ring *r) { return (size_t)(r->abs_head - r->abs_tail); }

static size_t phys(const struct ring *r, uint64_t abs) {
        return (size_t)((r->tail_phys + (abs - r->abs_tail)) % r->cap);
}

static void copy_in(struct ring *r, size_t p, const uint8_t *src, size_t n) {
        size_t first = (n < r->cap - p ? n : r->cap - p);
        memcpy(r->data + p, src, first);
        memcpy(r->data, src + first, n - first);
}

static void copy_out(const struct ring *r, size_t p, uint8_t *dst, size_t n) {
        size_t first = r->cap - p < n ? r->cap - p : n;
        memcpy(dst, r->data + p, first);
        memcpy(dst + first, r->data, n - first);
}

static uint32_t rec_len(const struct ring *r, uint64_t abs, uint8_t *stream) {
        uint8_t h[RING_REC_HDR];
        copy_out(r, phys(r, abs), h, sizeof h);
        if (stream)
                *stream = h[0];
        return (uint32_t)h[1] | (uint32_t)h[2] << 8 | (uint32_t)h[3] << 16 | (uint32_t)h[4] << 24;
}

/* Reallocates to ncap, laying the records out from index 0 again. */
static int grow(struct ring *r, size_t ncap) {
        uint8_t *n = malloc(ncap);
        if (!n)
                return -ENOMEM;
        size_t u = used(r);
        if (u)
                copy_out(r, r->tail_phys, n, u);
        free(r->data);
        r->data = n;
        r->cap = ncap;
        r->tail_phys = 0;
        return 0;
}

int ring_append(struct ring *r, uint8_t stream, const void *data, size_t n) {
        size_t rec = RING_REC_HDR + n;
        if (n == 0)
                return 0;
        if (n > RING_MAX_REC || rec > r->max)
                return -EMSGSIZE;
        if (r->cap - used(r) < rec && r->cap < r->max) {
                size_t ncap = r->cap ? r->cap : 4096;
                while (ncap < used(r) + rec)
                        ncap *= 2;
                if (ncap > r->max)
                        ncap = r->max;
                int e = grow(r, ncap);
                if (e < 0)
                        return e;
        }
        while (r->cap - used(r) < rec) {
                uint32_t l = rec_len(r, r->abs_tail, NULL);
                size_t adv = RING_REC_HDR + l;
                r->tail_phys = (r->tail_phys + adv) % r->cap;
                r->abs_tail += adv;
                r->start_off += l;
        }
        uint8_t h[RING_REC_HDR] = { stream, (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
        copy_in(r, phys(r, r->abs_head), h, sizeof h);
        copy_in(r, phys(r, r->abs_head + RING_REC_HDR), data, n);
        r->abs_head += rec;
        r->end_off += n;
        return 0;
}

void ring_seek(const struct ring *r, uint64_t off, struct ring_cursor *ret) {
        struct ring_cursor c = { .abs = r->abs_tail, .off = r->start_off };
        if (off >= r->end_off) {
                *ret = (struct ring_cursor){ .abs = r->abs_head, .off = r->end_off };
                return;
        }
        while (c.abs < r->abs_head) {
                uint32_t l = rec_len(r, c.abs, NULL);
                if (off < c.off + l) {
                        if (off > c.off)
                                c.skip = (uint32_t)(off - c.off);
                        break;
                }
                c.abs += RING_REC_HDR + l;
                c.off += l;
        }
        *ret = c;
}

size_t ring_next(const struct ring *r, struct ring_cursor *c, uint8_t *stream, uint8_t *out, size_t max) {
        if (c->abs < r->abs_tail)
                *c = (struct ring_cursor){ .abs = r->abs_tail, .off = r->start_off };
        if (c->abs >= r->abs_head || max == 0)
                return 0;
        uint32_t l = rec_len(r, c->abs, stream);
        size_t n = l - c->skip;
        if (n > max) {
                copy_out(r, phys(r, c->abs + RING_REC_HDR + c->skip), out, max);
                c->skip += (uint32_t)max;
                return max;
        }
        copy_out(r, phys(r, c->abs + RING_REC_HDR + c->skip), out, n);
        c->abs += RING_REC_HDR + l;
        c->off += l;
        c->skip = 0;
        return n;
}
