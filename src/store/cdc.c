/* Content-defined chunking with a gear rolling hash and normalized cut masks (the FastCDC
 * idea): cut points depend only on nearby bytes, so an insert in the middle of a file
 * moves the chunk boundaries near it and leaves the rest of the chunks unchanged. The gear
 * table and masks are part of the on-disk format: changing them changes every hash. Also
 * fixed-size cuts, the option for images changed in place (store_capture_opts.fixed_chunk). */
#include <errno.h>
#include <pthread.h>

#include "store/store-internal.h"

/* 19 and 15 mask bits around the 17 bits of the 128 KiB average: harder to cut before the
 * average, easier after, which narrows the size spread. High bits, because with a left
 * shift they mix the most recent 64 bytes. */
#define MASK_HARD (((UINT64_C(1) << 19) - 1) << (64 - 19))
#define MASK_EASY (((UINT64_C(1) << 15) - 1) << (64 - 15))

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

/* SplitMix64 from a fixed seed: a well-mixed table that any build reproduces. */
static void gear_init(void) {
        uint64_t x = UINT64_C(0x5350414345636463); /* "SPACEcdc" */
        for (int i = 0; i < 256; i++) {
                x += UINT64_C(0x9e3779b97f4a7c15);
                uint64_t z = x;
                z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
                z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
                gear[i] = z ^ (z >> 31);
        }
}

size_t cdc_cut(const uint8_t *data, size_t len, bool eof) {
        pthread_once(&gear_once, gear_init);
        if (!eof && len < STORE_CHUNK_MAX)
                return 0; /* the caller must give us a full window unless the data ends */
        size_t n = MIN(len, (size_t)STORE_CHUNK_MAX);
        if (n <= STORE_CHUNK_MIN)
                return n;
        size_t normal = MIN(n, (size_t)STORE_CHUNK_AVG);
        uint64_t fp = 0;
        size_t i = STORE_CHUNK_MIN;
        for (; i < normal; i++) {
                fp = (fp << 1) + gear[data[i]];
                if (!(fp & MASK_HARD))
                        return i + 1;
        }
        for (; i < n; i++) {
                fp = (fp << 1) + gear[data[i]];
                if (!(fp & MASK_EASY))
                        return i + 1;
        }
        return n;
}

/* Fixed-size chunking, for images rewritten in place (VM RAM): cuts at absolute file
 * offsets, so a region that starts after a hole stays aligned with the same file's pages
 * in the next capture. */
size_t fixed_cut(uint64_t pos, size_t len, uint32_t size) {
        size_t to_edge = size - (size_t)(pos & (size - 1));
        return MIN(len, to_edge);
}

int fixed_chunk_check(uint32_t size) {
        if (size == 0)
                return 0;
        if (size < STORE_FIXED_CHUNK_MIN || size > STORE_FIXED_CHUNK_MAX || (size & (size - 1)))
                return -EINVAL;
        return 0;
}
