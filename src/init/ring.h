/* The output ring of a background process: the newest output (stdout and stderr records
 * interleaved in read order) kept for re-attach, addressed by absolute output offsets. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_REC_HDR 5          /* u8 stream | u32 len (LE) */
#define RING_MAX_REC (64u << 10) /* data bytes in one record */

struct ring {
        uint8_t *data;
        size_t cap;       /* allocated; grows up to max */
        size_t max;       /* record headers included */
        size_t tail_phys; /* physical index of the oldest record */
        uint64_t abs_tail; /* ring byte sequence number of the oldest record */
        uint64_t abs_head; /* ... of the next record to be written */
        uint64_t start_off; /* output offset of the oldest record's first byte */
        uint64_t end_off;   /* output offset after the newest byte */
};

/* A reader's position: a record boundary (abs, off) plus bytes of it already consumed. */
struct ring_cursor {
        uint64_t abs;
        uint64_t off;
        uint32_t skip;
};

void ring_init(struct ring *r, size_t max, uint64_t base_off);
void ring_free(struct ring *r);
/* Appends one record (n <= RING_MAX_REC), dropping the oldest records to make room.
 * -ENOMEM leaves the ring unchanged. */
int ring_append(struct ring *r, uint8_t stream, const void *data, size_t n);
/* A cursor at the first kept byte at or after off (clamped to [start_off, end_off]). */
void ring_seek(const struct ring *r, uint64_t off, struct ring_cursor *ret);
/* Offset the cursor stands at. */
static inline uint64_t ring_cursor_off(const struct ring_cursor *c) { return c->off + c->skip; }
/* Copies the rest of the cursor's record, at most max bytes, into out (RING_MAX_REC
 * bytes), advances the cursor (within the record when max cuts it: a stream window).
 * Returns the byte count and sets *stream, 0 at the end or with max 0. A cursor whose data
 * was dropped first jumps to the oldest kept record. */
size_t ring_next(const struct ring *r, struct ring_cursor *c, uint8_t *stream, uint8_t *out, size_t max);
