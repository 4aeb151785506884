/* The binary stream framing of the API (docs/api.md, "Binary streams"): what an exec or
 * attach answers instead of NDJSON when the client sends Accept: application/vnd.space.stream.
 * Frames of [u8 kind][u32 big-endian length][length bytes]: output bytes as they are, and
 * control events as the same JSON objects NDJSON carries. Meant for every byte stream with
 * control events (terminals and the E2B API's process streams will use it too). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define FRAME_CONTENT_TYPE "application/vnd.space.stream"
#define FRAME_HDR_SIZE 5
/* The largest payload a reader must take; a writer never sends more in one frame. */
#define FRAME_MAX_PAYLOAD (4u << 20)

enum frame_kind {
        FRAME_STDOUT = 1, /* raw bytes */
        FRAME_STDERR = 2, /* raw bytes */
        FRAME_EVENT = 16, /* one JSON object: {"type":"start"|"attach"|"exit"|"end"|"error",...} */
};

void frame_hdr_encode(uint8_t kind, uint32_t len, uint8_t out[FRAME_HDR_SIZE]);
/* The header at the front of p (n bytes): 1 and *kind, *len when the whole frame is there,
 * 0 when more bytes are needed, -EMSGSIZE for a length over FRAME_MAX_PAYLOAD. Kinds a
 * reader does not know are for it to skip. */
int frame_peek(const uint8_t *p, size_t n, uint8_t *kind, uint32_t *len);
