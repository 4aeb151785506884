/* Fuzz target: the multipart/form-data parser of POST /files (src/daemon/e2b/multipart.c),
 * which every upload body of the E2B API reaches. The first byte picks a piece size; the
 * rest is a body under the boundary "B", fed whole and in pieces of that size, and is also
 * read as a Content-Type. Properties: no crash, loop or leak; a call never takes more than
 * it was given; a part's name and filename stay within their limits; and the cut makes no
 * difference: the same parts, names, bytes and end either way. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/e2b/multipart.h"
#include "fuzz.h"

/* What one parse saw: a digest of every event, so two parses can be compared. */
struct seen {
        uint64_t hash;
        unsigned parts;
        size_t data;
        int end; /* 0 still open, 1 done, 2 error */
};

static void mix(struct seen *s, const void *p, size_t n) {
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++)
                s->hash = (s->hash ^ b[i]) * 1099511628211u;
}

static void parse(const uint8_t *body, size_t n, size_t step, struct seen *s) {
        struct mp_parser p;
        memset(s, 0, sizeof *s);
        s->hash = 1469598103934665603u;
        FUZZ_CHECK(mp_init(&p, "B") == 0);
        size_t off = 0;
        unsigned calls = 0;
        while (s->end == 0) {
                size_t len = n - off < step ? n - off : step;
                size_t used;
                struct mp_event ev;
                mp_feed(&p, (const char *)body + off, len, &used, &ev);
                FUZZ_CHECK(used <= len);
                FUZZ_CHECK(++calls < 4 * n + 16); /* progress: every call takes a byte or says why not */
                off += used;
                switch (ev.type) {
                case MP_NEED_MORE:
                        FUZZ_CHECK(used == len);
                        if (off == n) {
                                s->end = mp_finish(&p) == 0 ? 1 : 0;
                                goto out;
                        }
                        break;
                case MP_PART_BEGIN:
                        FUZZ_CHECK(strlen(ev.name) <= MP_NAME_MAX);
                        FUZZ_CHECK(!ev.filename || strlen(ev.filename) <= MP_FILENAME_MAX);
                        s->parts++;
                        mix(s, "B", 1);
                        mix(s, ev.name, strlen(ev.name) + 1);
                        if (ev.filename)
                                mix(s, ev.filename, strlen(ev.filename) + 1);
                        break;
                case MP_DATA:
                        FUZZ_CHECK(ev.len > 0);
                        s->data += ev.len;
                        mix(s, ev.data, ev.len); /* the cut splits runs: the bytes hash the same */
                        break;
                case MP_PART_END:
                        mix(s, "E", 1);
                        break;
                case MP_DONE:
                        s->end = 1;
                        break;
                case MP_ERROR:
                        FUZZ_CHECK(ev.error != NULL);
                        s->end = 2;
                        break;
                }
        }
out:
        FUZZ_CHECK(s->parts <= MP_PARTS_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        size_t step = 1 + data[0] % 64;
        struct seen whole, cut;
        parse(data + 1, size - 1, size, &whole);
        parse(data + 1, size - 1, step, &cut);
        FUZZ_CHECK(whole.end == cut.end && whole.parts == cut.parts);
        FUZZ_CHECK(whole.hash == cut.hash && whole.data == cut.data);

        char *ct = malloc(size);
        if (!ct)
                return 0;
        memcpy(ct, data + 1, size - 1);
        ct[size - 1] = '\0';
        char b[MP_BOUNDARY_MAX + 1];
        if (mp_boundary(ct, b) == 0) {
                FUZZ_CHECK(strlen(b) >= 1 && strlen(b) <= MP_BOUNDARY_MAX);
                FUZZ_CHECK(!strpbrk(b, "\r\n\""));
                struct mp_parser p;
                FUZZ_CHECK(mp_init(&p, b) == 0);
        }
        free(ct);
        return 0;
}
