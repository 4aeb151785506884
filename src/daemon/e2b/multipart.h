/* A streaming multipart/form-data parser (RFC 7578) for POST /files: bytes in, one event
 * out per call, no I/O and no allocation, so an upload never sits in memory whole and the
 * parser can be fed anything (tests/unit/daemon/test_multipart.c). The caller stops
 * feeding whenever it must wait (a part's file is being finished) and goes on later with
 * the bytes it has not fed yet. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RFC 2046: a boundary is 1..70 characters. */
#define MP_BOUNDARY_MAX 70
/* The header block of one part; more is an error. */
#define MP_HEADERS_MAX 8192
/* A part's name and filename (a path: PROTO_MAX_PATH). */
#define MP_NAME_MAX 256
#define MP_FILENAME_MAX 4096
/* Parts of one body (files of one writeFiles); more is an error. */
#define MP_PARTS_MAX 1000

enum mp_event_type {
        MP_NEED_MORE,  /* all the input was used: feed more (or mp_finish at its end) */
        MP_PART_BEGIN, /* ev.name, ev.filename (NULL when the part has none) */
        MP_DATA,       /* ev.data, ev.len: bytes of the current part */
        MP_PART_END,
        MP_DONE,       /* the closing delimiter: whatever follows is ignored */
        MP_ERROR,      /* ev.error says what; the parser stays in error */
};

struct mp_event {
        enum mp_event_type type;
        const char *data;
        size_t len;
        const char *name, *filename;
        const char *error;
};

struct mp_parser {
        int state;
        char delim[4 + MP_BOUNDARY_MAX + 1]; /* "\r\n--" boundary */
        size_t delim_len;
        size_t match; /* bytes of delim matched and not yet passed on */
        int after;    /* after a delimiter: the bytes of "--" or "\r\n" seen */
        char hdr[MP_HEADERS_MAX + 1];
        size_t hdr_len;
        unsigned parts;
        char name[MP_NAME_MAX + 1];
        char filename[MP_FILENAME_MAX + 1];
        bool has_filename;
        const char *error;
};

/* The boundary parameter of a multipart/form-data Content-Type into out; -EINVAL when the
 * type is another or the boundary is missing or malformed. */
int mp_boundary(const char *content_type, char out[MP_BOUNDARY_MAX + 1]);
int mp_init(struct mp_parser *p, const char *boundary);
/* Parses from in[0..n): *used bytes were taken and ev says what they made. Pointers in ev
 * are valid until the next call. */
void mp_feed(struct mp_parser *p, const char *in, size_t n, size_t *used, struct mp_event *ev);
/* The input ended: 0 after MP_DONE, else -EINVAL (a truncated body). */
int mp_finish(const struct mp_parser *p);
