/* multipart/form-data as POST /files receives it (multipart.h). The body is a preamble,
 * then parts, each after a delimiter "\r\n--BOUNDARY" with its own header block, then
 * "--" after the last delimiter. A boundary has no CR or LF (RFC 2046 bchars), so a
 * partial match of the delimiter can only restart at its first byte: the bytes held back
 * are always a prefix of the delimiter, and are passed on from it when the match fails. */
#include "daemon/e2b/multipart.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

enum { ST_PREAMBLE, ST_AFTER_DELIM, ST_HEADERS, ST_DATA, ST_DONE, ST_ERROR };

static bool bchar(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c && strchr("'()+_,-./:=? ", c) != NULL);
}

int mp_boundary(const char *ct, char out[MP_BOUNDARY_MAX + 1]) {
        static const char type[] = "multipart/form-data";
        if (!ct || strncasecmp(ct, type, sizeof type - 1) != 0)
                return -EINVAL;
        for (const char *p = ct + sizeof type - 1; (p = strchr(p, ';'));) {
                p++;
                while (*p == ' ' || *p == '\t')
                        p++;
                if (strncasecmp(p, "boundary=", 9) != 0)
                        continue;
                p += 9;
                size_t n = 0;
                if (*p == '"') {
                        const char *q = strchr(++p, '"');
                        if (!q)
                                return -EINVAL;
                        n = (size_t)(q - p);
                } else {
                        n = strcspn(p, "; \t");
                }
                if (n < 1 || n > MP_BOUNDARY_MAX || p[n - 1] == ' ')
                        return -EINVAL;
                for (size_t i = 0; i < n; i++)
                        if (!bchar(p[i]))
                                return -EINVAL;
                memcpy(out, p, n);
                out[n] = '\0';
                return 0;
        }
        return -EINVAL;
}

int mp_init(struct mp_parser *p, const char *boundary) {
        size_t n = strlen(boundary);
        memset(p, 0, sizeof *p);
        if (n < 1 || n > MP_BOUNDARY_MAX || strpbrk(boundary, "\r\n"))
                return -EINVAL;
        memcpy(p->delim, "\r\n--", 4);
        memcpy(p->delim + 4, boundary, n);
        p->delim_len = 4 + n;
        /* The first delimiter may open the body: take it as if a CRLF came before. */
        p->match = 2;
        p->state = ST_PREAMBLE;
        return 0;
}

static void fail(struct mp_parser *p, struct mp_event *ev, const char *why) {
        p->state = ST_ERROR;
        p->error = why;
        ev->type = MP_ERROR;
        ev->error = why;
}

/* The value of parameter key in a Content-Disposition (after "form-data"), into out:
 * 1 found, 0 absent, -1 too long or malformed. Quoted values end at the next quote (the
 * WHATWG form encoder escapes quotes as %22, so there are no backslash escapes to undo). */
static int disp_param(const char *v, const char *key, char *out, size_t outsz) {
        size_t kl = strlen(key);
        for (const char *p = v; (p = strchr(p, ';'));) {
                p++;
                while (*p == ' ' || *p == '\t')
                        p++;
                if (strncasecmp(p, key, kl) != 0 || p[kl] != '=')
                        continue;
                p += kl + 1;
                size_t n;
                if (*p == '"') {
                        const char *q = strchr(++p, '"');
                        if (!q)
                                return -1;
                        n = (size_t)(q - p);
                } else {
                        n = strcspn(p, "; \t");
                }
                if (n >= outsz)
                        return -1;
                memcpy(out, p, n);
                out[n] = '\0';
                return 1;
        }
        return 0;
}

/* %22 %0D %0A back to '"', CR, LF (what the form encoder escapes in names); nothing else. */
static void unescape3(char *s) {
        char *o = s;
        for (char *i = s; *i;) {
                if (i[0] == '%' && i[1] && i[2]) {
                        char h[3] = { i[1], i[2], 0 };
                        if (!strcasecmp(h, "22") || !strcasecmp(h, "0D") || !strcasecmp(h, "0A")) {
                                *o++ = !strcasecmp(h, "22") ? '"' : !strcasecmp(h, "0D") ? '\r' : '\n';
                                i += 3;
                                continue;
                        }
                }
                *o++ = *i++;
        }
        *o = '\0';
}

/* The part's header block (p->hdr, ending in the empty line) into name and filename. */
static const char *parse_headers(struct mp_parser *p) {
        p->name[0] = p->filename[0] = '\0';
        p->has_filename = false;
        bool disp = false;
        if (memchr(p->hdr, '\0', p->hdr_len))
                return "a part's headers hold a NUL byte";
        p->hdr[p->hdr_len] = '\0';
        for (char *line = p->hdr, *end; *line; line = end + 2) {
                end = strstr(line, "\r\n");
                if (!end || end == line)
                        break;
                *end = '\0';
                if (strncasecmp(line, "Content-Disposition:", 20) != 0)
                        continue;
                const char *v = line + 20;
                while (*v == ' ' || *v == '\t')
                        v++;
                if (strncasecmp(v, "form-data", 9) != 0)
                        return "a part's Content-Disposition is not form-data";
                int r = disp_param(v, "name", p->name, sizeof p->name);
                if (r < 0)
                        return "a part's name is too long or malformed";
                r = disp_param(v, "filename", p->filename, sizeof p->filename);
                if (r < 0)
                        return "a part's filename is too long (at most 4096 bytes) or malformed";
                p->has_filename = r == 1;
                unescape3(p->name);
                unescape3(p->filename);
                disp = true;
        }
        return disp ? NULL : "a part has no Content-Disposition";
}

void mp_feed(struct mp_parser *p, const char *in, size_t n, size_t *used, struct mp_event *ev) {
        size_t i = 0;
        *ev = (struct mp_event){ .type = MP_NEED_MORE };
        while (i < n) {
                switch (p->state) {
                case ST_PREAMBLE:
                case ST_DATA: {
                        bool data = p->state == ST_DATA;
                        if (p->match > 0) {
                                while (i < n && p->match < p->delim_len && in[i] == p->delim[p->match]) {
                                        p->match++;
                                        i++;
                                }
                                if (p->match == p->delim_len) {
                                        p->match = 0;
                                        p->after = 0;
                                        p->state = ST_AFTER_DELIM;
                                        if (data) {
                                                ev->type = MP_PART_END;
                                                *used = i;
                                                return;
                                        }
                                        continue;
                                }
                                if (i == n)
                                        break; /* the match may go on in the next input */
                                /* Not a delimiter: what was held back is data after all. */
                                size_t held = p->match;
                                p->match = 0;
                                if (data) {
                                        ev->type = MP_DATA;
                                        ev->data = p->delim;
                                        ev->len = held;
                                        *used = i;
                                        return;
                                }
                                continue;
                        }
                        const char *cr = memchr(in + i, '\r', n - i);
                        size_t run = cr ? (size_t)(cr - (in + i)) : n - i;
                        if (run > 0) {
                                size_t start = i;
                                i += run;
                                if (data) {
                                        ev->type = MP_DATA;
                                        ev->data = in + start;
                                        ev->len = run;
                                        *used = i;
                                        return;
                                }
                                continue;
                        }
                        p->match = 1; /* at a CR */
                        i++;
                        continue;
                }
                case ST_AFTER_DELIM: {
                        char c = in[i++];
                        if (p->after == 0 && (c == ' ' || c == '\t'))
                                continue; /* transport padding */
                        if (p->after == 0 && (c == '-' || c == '\r')) {
                                p->after = c;
                                continue;
                        }
                        if (p->after == '-' && c == '-') {
                                p->state = ST_DONE;
                                ev->type = MP_DONE;
                                *used = n; /* the epilogue is ignored */
                                return;
                        }
                        if (p->after == '\r' && c == '\n') {
                                if (++p->parts > MP_PARTS_MAX) {
                                        fail(p, ev, "more than 1000 parts");
                                        *used = i;
                                        return;
                                }
                                p->state = ST_HEADERS;
                                p->hdr_len = 0;
                                continue;
                        }
                        fail(p, ev, "malformed multipart delimiter line");
                        *used = i;
                        return;
                }
                case ST_HEADERS: {
                        char c = in[i++];
                        if (p->hdr_len >= MP_HEADERS_MAX) {
                                fail(p, ev, "a part's headers are over 8192 bytes");
                                *used = i;
                                return;
                        }
                        p->hdr[p->hdr_len++] = c;
                        bool end = (p->hdr_len == 2 && memcmp(p->hdr, "\r\n", 2) == 0) ||
                                   (p->hdr_len >= 4 && memcmp(p->hdr + p->hdr_len - 4, "\r\n\r\n", 4) == 0);
                        if (!end)
                                continue;
                        const char *why = parse_headers(p);
                        if (why) {
                                fail(p, ev, why);
                                *used = i;
                                return;
                        }
                        p->state = ST_DATA;
                        p->match = 0;
                        ev->type = MP_PART_BEGIN;
                        ev->name = p->name;
                        ev->filename = p->has_filename ? p->filename : NULL;
                        *used = i;
                        return;
                }
                case ST_DONE:
                        *used = n;
                        ev->type = MP_NEED_MORE;
                        return;
                default:
                        ev->type = MP_ERROR;
                        ev->error = p->error;
                        *used = 0;
                        return;
                }
        }
        if (p->state == ST_ERROR) {
                ev->type = MP_ERROR;
                ev->error = p->error;
        }
        *used = i;
}

int mp_finish(const struct mp_parser *p) { return p->state == ST_DONE ? 0 : -EINVAL; }
