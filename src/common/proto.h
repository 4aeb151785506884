/* The space-init protocol: how spaced talks to PID 1 inside a sandbox over one stream
 * socket. Framed, versioned, every length bounded. Control messages carry a JSON object;
 * data messages carry raw bytes. See docs/protocol.md for the operations. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"

#define PROTO_MAGIC 0x31435053u /* "SPC1" little-endian on the wire */
#define PROTO_VERSION 1
#define PROTO_HDR_SIZE 16
#define PROTO_MAX_PAYLOAD (1u << 20)   /* one frame's payload */
#define PROTO_MAX_JSON (256u << 10)    /* a control message's JSON */
#define PROTO_MAX_ARGV 4096            /* argv + env entries of one exec */
#define PROTO_MAX_PATH 4096
#define PROTO_BG_RING (1u << 20)       /* output kept per background process for re-attach */
#define PROTO_MAX_BG 256               /* background processes tracked at once */
/* Terminals (exec with "tty", docs/protocol.md §3.17). */
#define PROTO_TTY_RING (64u << 10)     /* recent output of a terminal, replayed on attach */
#define PROTO_MAX_TTY 16               /* running terminals per sandbox */
#define PROTO_MAX_TTY_DIM 1000         /* rows and cols: 1..this */
#define PROTO_MAX_TAG 256              /* bytes of an exec's "tag" (§3.21) */
#define PROTO_MAX_LIST 100000          /* entries one "list" returns */
/* The temporary an upload is written to beside its file (op write, §3.6): watchers of the
 * E2B API hide its events. */
#define PROTO_UPLOAD_TEMP_PREFIX ".space-upload-"
/* Per-stream flow control (docs/protocol.md §3.14): the most output bytes one stream may
 * be granted at once; a REQ's "window" and every WINDOW grant are counted against it. */
#define PROTO_MAX_WINDOW (16u << 20)
#define PROTO_WINDOW_LEN 4             /* a WINDOW frame's payload: u32 LE grant */
#define PROTO_KEY_LEN 32               /* a KEY frame's payload: the sandbox's init key (§1) */

/* Frame header, little-endian:
 *   u32 magic | u8 version | u8 type | u16 flags (0) | u32 id | u32 len | payload[len]
 * id names the request a frame belongs to (chosen by spaced, never 0 except HELLO). */
enum proto_type {
        PROTO_HELLO = 1,  /* init -> spaced, id 0, JSON {"version":1,"pid":N} once on connect */
        PROTO_REQ = 2,    /* spaced -> init, JSON {"op":..., ...} */
        PROTO_RESP = 3,   /* init -> spaced, JSON result or {"error":{"code","errno","message"}} */
        PROTO_STDIN = 4,  /* spaced -> init, raw; len 0 closes the command's stdin */
        PROTO_STDOUT = 5, /* init -> spaced, raw */
        PROTO_STDERR = 6, /* init -> spaced, raw */
        PROTO_EXIT = 7,   /* init -> spaced, JSON {"exit_code":N} or {"signal":N}, plus "timed_out" */
        PROTO_DATA = 8,   /* file contents either way; len 0 ends the stream */
        PROTO_CANCEL = 9, /* spaced -> init, no payload: stop streaming this id (detach; process lives) */
        PROTO_WINDOW = 10, /* spaced -> init, u32 LE: this id may send that many more output bytes */
        PROTO_KEY = 11,   /* spaced -> init, PROTO_KEY_LEN bytes: the key init proves itself with (§1) */
        PROTO_TYPE_MAX = PROTO_KEY,
};

struct proto_hdr {
        uint8_t version;
        uint8_t type;
        uint16_t flags;
        uint32_t id;
        uint32_t len;
};

void proto_hdr_encode(const struct proto_hdr *h, uint8_t out[PROTO_HDR_SIZE]);
/* -EBADMSG bad magic or flags, -EPROTONOSUPPORT other version, -EINVAL unknown type,
 * -EMSGSIZE len over PROTO_MAX_PAYLOAD (or over PROTO_MAX_JSON for JSON-carrying types),
 * a CANCEL with a payload, a WINDOW whose payload is not PROTO_WINDOW_LEN bytes or a KEY
 * whose payload is not PROTO_KEY_LEN bytes. */
int proto_hdr_decode(const uint8_t in[PROTO_HDR_SIZE], struct proto_hdr *ret);

/* Appends one whole frame to out. */
int proto_frame_append(struct buf *out, uint8_t type, uint32_t id, const void *payload, uint32_t len);

/* Takes the next whole frame from the front of in: returns 1 and fills *h and *payload
 * (pointing into in; valid until the caller calls buf_consume(in, PROTO_HDR_SIZE + h->len)),
 * 0 if more bytes are needed, or a negative error from proto_hdr_decode. */
int proto_frame_peek(const struct buf *in, struct proto_hdr *h, const uint8_t **payload);

bool proto_type_is_json(uint8_t type);
/* A WINDOW frame's payload <-> its grant. */
void proto_window_encode(uint32_t grant, uint8_t out[PROTO_WINDOW_LEN]);
uint32_t proto_window_decode(const uint8_t in[PROTO_WINDOW_LEN]);
const char *proto_type_name(uint8_t type);
