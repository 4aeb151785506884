/* Growable byte buffer; every append checks the buffer's cap so a peer can't grow it forever. */
#include "common/buf.h"
#include "common/fdio.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#define BUF_READ_CHUNK (64 * 1024)

int buf_reserve(struct buf *b, size_t extra) {
        if (extra > SIZE_MAX - b->len - 1)
                return -E2BIG;
        size_t need = b->len + extra + 1; /* room for a NUL */
        if (b->max && b->len + extra > b->max)
                return -E2BIG;
        if (need <= b->cap)
                return 0;
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < need)
                ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
        char *n = realloc(b->data, ncap);
        if (!n)
                return -ENOMEM;
        b->data = n;
        b->cap = ncap;
        return 0;
}

int buf_read_fd(struct buf *b, int fd) {
        for (;;) {
                /* never reserve past the cap: an input that fits exactly must not be refused */
                size_t want = BUF_READ_CHUNK;
                if (b->max && b->max - b->len < want)
                        want = b->max - b->len;
                char probe, *dst = &probe;
                if (want > 0) {
                        int r = buf_reserve(b, want);
                        if (r < 0)
                                return r;
                        dst = b->data + b->len;
                } else {
                        want = 1; /* at the cap: one more byte means too large, EOF means done */
                }
                ssize_t n = fdio_read(fd, dst, want);
                if (n <= 0)
                        return (int)n;
                if (dst == &probe)
                        return -E2BIG;
                b->len += (size_t)n;
        }
}

int buf_append(struct buf *b, const void *data, size_t n) {
        if (n == 0)
                return 0;
        int r = buf_reserve(b, n);
        if (r < 0)
                return r;
        memcpy(b->data + b->len, data, n);
        b->len += n;
        return 0;
}

int buf_putc(struct buf *b, char c) { return buf_append(b, &c, 1); }
int buf_puts(struct buf *b, const char *s) { return buf_append(b, s, strlen(s)); }

int buf_printf(struct buf *b, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -EINVAL;
        int r = buf_reserve(b, (size_t)n);
        if (r < 0)
                return r;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        b->len += (size_t)n;
        return 0;
}

void buf_consume(struct buf *b, size_t n) {
        if (n >= b->len) {
                b->len = 0;
                return;
        }
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
}

char *buf_cstr(struct buf *b) {
        if (buf_reserve(b, 0) < 0)
                return NULL;
        b->data[b->len] = '\0';
        return b->data;
}

void buf_reset(struct buf *b) { b->len = 0; }

void buf_free(struct buf *b) {
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
}
