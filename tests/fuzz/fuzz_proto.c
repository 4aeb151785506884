/* Fuzz target: the space-init protocol decoder (src/common/proto.c) as a receiver uses
 * it: bytes arrive in pieces, whole frames are peeked and consumed, JSON payloads are
 * parsed and the members of a request are read. The same code runs in spaced (reading
 * init, which sandboxed code controls) and in space-init (reading spaced).
 * Properties: no crash or leak; a decoded header encodes back to the same 16 bytes, and
 * re-appending a decoded frame gives the same bytes; no frame exceeds its bound; after a
 * framing error the receiver stops, as the protocol says. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/buf.h"
#include "common/json.h"
#include "common/proto.h"
#include "fuzz.h"

/* What a receiver holds at most: one whole frame plus one read's worth. */
#define FUZZ_PROTO_MAX_BUF (PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + 65536)

/* Reads the members of a request the way init's dispatcher does; the values only need to
 * be safe to read. */
static void read_request(const struct json *req) {
        const char *op = json_get_str(req, "op");
        int64_t v;
        (void)json_get_int(req, "timeout_ms", &v);
        (void)json_get_int(req, "pid", &v);
        (void)json_get_int(req, "offset", &v);
        (void)json_get_int(req, "length", &v);
        (void)json_get_int(req, "mode", &v);
        (void)json_get_int(req, "uid", &v);
        (void)json_get_int(req, "gid", &v);
        (void)json_get_int(req, "window", &v);
        (void)json_get_bool(req, "background", false);
        (void)json_get_bool(req, "recursive", false);
        const char *path = json_get_str(req, "path");
        if (path)
                FUZZ_CHECK(strlen(path) < PROTO_MAX_JSON);
        static const char *const lists[] = { "argv", "env" };
        for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
                const struct json *a = json_get(req, lists[l]);
                if (json_type(a) != JSON_ARRAY)
                        continue;
                for (size_t i = 0; i < json_len(a); i++)
                        (void)json_str(json_at(a, i));
        }
        (void)op;
}

static void check_frame(const struct proto_hdr *h, const uint8_t *payload, const uint8_t *raw) {
        FUZZ_CHECK(h->version == PROTO_VERSION && h->flags == 0);
        FUZZ_CHECK(h->type >= PROTO_HELLO && h->type <= PROTO_TYPE_MAX);
        FUZZ_CHECK(h->len <= PROTO_MAX_PAYLOAD);
        FUZZ_CHECK(!proto_type_is_json(h->type) || h->len <= PROTO_MAX_JSON);
        FUZZ_CHECK(strcmp(proto_type_name(h->type), "UNKNOWN") != 0);
        FUZZ_CHECK(h->type != PROTO_CANCEL || h->len == 0);
        if (h->type == PROTO_WINDOW) {
                FUZZ_CHECK(h->len == PROTO_WINDOW_LEN);
                uint8_t again[PROTO_WINDOW_LEN];
                proto_window_encode(proto_window_decode(payload), again);
                FUZZ_CHECK(memcmp(again, payload, PROTO_WINDOW_LEN) == 0);
        }

        uint8_t enc[PROTO_HDR_SIZE];
        proto_hdr_encode(h, enc);
        FUZZ_CHECK(memcmp(enc, raw, PROTO_HDR_SIZE) == 0);

        struct buf again = BUF_INIT(FUZZ_PROTO_MAX_BUF);
        FUZZ_CHECK(proto_frame_append(&again, h->type, h->id, payload, h->len) == 0);
        FUZZ_CHECK(again.len == PROTO_HDR_SIZE + h->len && memcmp(again.data, raw, again.len) == 0);
        buf_free(&again);

        if (proto_type_is_json(h->type)) {
                struct json *j = NULL;
                if (json_parse((const char *)payload, h->len, &j, NULL, 0) == 0) {
                        if (h->type == PROTO_REQ && json_type(j) == JSON_OBJECT)
                                read_request(j);
                        json_free(j);
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        /* The first byte picks the read size (1..256 bytes per read): frames split across
         * reads at every offset must decode the same. */
        size_t step = (size_t)data[0] + 1;
        data++, size--;

        struct buf in = BUF_INIT(FUZZ_PROTO_MAX_BUF);
        size_t off = 0;
        bool closed = false;
        while (off < size && !closed) {
                size_t n = MIN(step, size - off);
                FUZZ_CHECK(buf_append(&in, data + off, n) == 0);
                off += n;
                for (;;) {
                        struct proto_hdr h;
                        const uint8_t *payload = NULL;
                        int r = proto_frame_peek(&in, &h, &payload);
                        if (r == 0)
                                break;
                        if (r < 0) {
                                FUZZ_CHECK(r == -EBADMSG || r == -EPROTONOSUPPORT || r == -EINVAL || r == -EMSGSIZE);
                                struct proto_hdr h2;
                                FUZZ_CHECK(proto_hdr_decode((const uint8_t *)in.data, &h2) == r);
                                closed = true; /* the stream cannot be resynchronised */
                                break;
                        }
                        FUZZ_CHECK(r == 1 && payload == (const uint8_t *)in.data + PROTO_HDR_SIZE);
                        check_frame(&h, payload, (const uint8_t *)in.data);
                        buf_consume(&in, PROTO_HDR_SIZE + h.len);
                }
                /* A receiver never holds more than one frame plus one read. */
                FUZZ_CHECK(in.len <= PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + step);
        }
        buf_free(&in);
        return 0;
}
