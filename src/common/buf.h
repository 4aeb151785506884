/* A growable byte buffer with a hard cap, used for request bodies, JSON output and frames. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/macros.h"

struct buf {
        char *data;
        size_t len;
        size_t cap;
        size_t max; /* 0 = no limit beyond SIZE_MAX; appends past it fail with -E2BIG */
};

#define BUF_INIT(limit) ((struct buf){ .max = (limit) })

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t n);
int buf_putc(struct buf *b, char c);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) _printf_(2, 3);
/* Appends what fd gives until end of file, retrying after EINTR; -E2BIG when that is more
 * than the cap leaves room for (filling it exactly is fine), -errno from read(2). */
int buf_read_fd(struct buf *b, int fd);
/* Drops the first n bytes (consumed input). */
void buf_consume(struct buf *b, size_t n);
/* NUL-terminates without counting the NUL in len; returns data. */
char *buf_cstr(struct buf *b);
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
static inline void buf_freep(struct buf *b) { buf_free(b); }
#define _cleanup_buf_ _cleanup_(buf_freep)
