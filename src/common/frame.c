/* The API's binary stream framing (frame.h): header encode and whole-frame peek. */
#include "common/frame.h"

#include <errno.h>

void frame_hdr_encode(uint8_t kind, uint32_t len, uint8_t out[FRAME_HDR_SIZE]) {
        out[0] = kind;
        out[1] = (uint8_t)(len >> 24);
        out[2] = (uint8_t)(len >> 16);
        out[3] = (uint8_t)(len >> 8);
        out[4] = (uint8_t)len;
}

int frame_peek(const uint8_t *p, size_t n, uint8_t *kind, uint32_t *len) {
        if (n < FRAME_HDR_SIZE)
                return 0;
        uint32_t l = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | (uint32_t)p[4];
        if (l > FRAME_MAX_PAYLOAD)
                return -EMSGSIZE;
        if (n - FRAME_HDR_SIZE < l)
                return 0;
        *kind = p[0];
        *len = l;
        return 1;
}
