/* Frame codec of the space-init protocol: header encode/decode with every bound checked,
 * and whole-frame append/peek on struct buf. Shared by spaced and the static space-init. */
#include "common/proto.h"

#include <errno.h>
#include <string.h>

static void put_u32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void proto_hdr_encode(const struct proto_hdr *h, uint8_t out[PROTO_HDR_SIZE]) {
        put_u32(out, PROTO_MAGIC);
        out[4] = h->version;
        out[5] = h->type;
        out[6] = (uint8_t)h->flags;
        out[7] = (uint8_t)(h->flags >> 8);
        put_u32(out + 8, h->id);
        put_u32(out + 12, h->len);
}

bool proto_type_is_json(uint8_t type) {
        return type == PROTO_HELLO || type == PROTO_REQ || type == PROTO_RESP || type == PROTO_EXIT;
}

int proto_hdr_decode(const uint8_t in[PROTO_HDR_SIZE], struct proto_hdr *ret) {
        if (get_u32(in) != PROTO_MAGIC)
                return -EBADMSG;
        uint16_t flags = (uint16_t)(in[6] | in[7] << 8);
        if (flags != 0)
                return -EBADMSG;
        if (in[4] != PROTO_VERSION)
                return -EPROTONOSUPPORT;
        uint8_t type = in[5];
        if (type < PROTO_HELLO || type > PROTO_TYPE_MAX)
                return -EINVAL;
        uint32_t len = get_u32(in + 12);
        if (len > PROTO_MAX_PAYLOAD || (proto_type_is_json(type) && len > PROTO_MAX_JSON))
                return -EMSGSIZE;
        if ((type == PROTO_CANCEL && len != 0) || (type == PROTO_WINDOW && len != PROTO_WINDOW_LEN) ||
            (type == PROTO_KEY && len != PROTO_KEY_LEN))
                return -EMSGSIZE;
        *ret = (struct proto_hdr){
                .version = in[4],
                .type = type,
                .flags = flags,
                .id = get_u32(in + 8),
                .len = len,
        };
        return 0;
}

void proto_window_encode(uint32_t grant, uint8_t out[PROTO_WINDOW_LEN]) { put_u32(out, grant); }

uint32_t proto_window_decode(const uint8_t in[PROTO_WINDOW_LEN]) { return get_u32(in); }

int proto_frame_append(struct buf *out, uint8_t type, uint32_t id, const void *payload, uint32_t len) {
        if (type < PROTO_HELLO || type > PROTO_TYPE_MAX)
                return -EINVAL;
        if (len > PROTO_MAX_PAYLOAD || (proto_type_is_json(type) && len > PROTO_MAX_JSON))
                return -EMSGSIZE;
        if ((type == PROTO_CANCEL && len != 0) || (type == PROTO_WINDOW && len != PROTO_WINDOW_LEN) ||
            (type == PROTO_KEY && len != PROTO_KEY_LEN))
                return -EMSGSIZE; /* what the receiver's decoder would refuse */
        if (len > 0 && !payload)
                return -EINVAL;
        uint8_t hdr[PROTO_HDR_SIZE];
        proto_hdr_encode(&(struct proto_hdr){ .version = PROTO_VERSION, .type = type, .id = id, .len = len }, hdr);
        /* Reserve once so a frame is appended whole or not at all. */
        int r = buf_reserve(out, PROTO_HDR_SIZE + (size_t)len);
        if (r < 0)
                return r;
        r = buf_append(out, hdr, sizeof hdr);
        if (r < 0)
                return r;
        return buf_append(out, payload, len);
}

int proto_frame_peek(const struct buf *in, struct proto_hdr *h, const uint8_t **payload) {
        if (in->len < PROTO_HDR_SIZE)
                return 0;
        struct proto_hdr hdr;
        int r = proto_hdr_decode((const uint8_t *)in->data, &hdr);
        if (r < 0)
                return r;
        if (in->len - PROTO_HDR_SIZE < hdr.len)
                return 0;
        *h = hdr;
        *payload = (const uint8_t *)in->data + PROTO_HDR_SIZE;
        return 1;
}

const char *proto_type_name(uint8_t type) {
        static const char *const names[] = {
                [PROTO_HELLO] = "HELLO", [PROTO_REQ] = "REQ",       [PROTO_RESP] = "RESP",
                [PROTO_STDIN] = "STDIN", [PROTO_STDOUT] = "STDOUT", [PROTO_STDERR] = "STDERR",
                [PROTO_EXIT] = "EXIT",   [PROTO_DATA] = "DATA",     [PROTO_CANCEL] = "CANCEL",
                [PROTO_WINDOW] = "WINDOW", [PROTO_KEY] = "KEY",
        };
        if (type < ELEMENTSOF(names) && names[type])
                return names[type];
        return "UNKNOWN";
}
