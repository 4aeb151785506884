/* Small helpers every component uses: cleanup attributes, TAKE_PTR/TAKE_FD, array size.
 * Header-only so that the static space-init links nothing it does not need. */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dirent.h>

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _must_check_ __attribute__((warn_unused_result))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_closedir_ _cleanup_(closedirp)

/* Hand ownership out of a cleanup variable. */
#define TAKE_PTR(p)                          \
        ({                                   \
                __typeof__(p) _tp_ = (p);    \
                (p) = NULL;                  \
                _tp_;                        \
        })
#define TAKE_FD(fd)                          \
        ({                                   \
                int _tf_ = (fd);             \
                (fd) = -EBADF;               \
                _tf_;                        \
        })

/* Close-and-reset that returns -EBADF so it can be assigned: fd = safe_close(fd); */
static inline int safe_close(int fd) {
        if (fd >= 0)
                closep(&fd);
        return -EBADF;
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Room for need elements of elem bytes in the array *p of capacity *cap, doubling from
 * first. -ENOMEM, with *p and *cap as they were, when memory or size_t runs out. */
static inline int array_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
        if (need <= *cap)
                return 0;
        size_t nc = *cap ? *cap : first;
        while (nc < need) {
                if (nc > SIZE_MAX / 2)
                        return -ENOMEM;
                nc *= 2;
        }
        if (nc > SIZE_MAX / elem)
                return -ENOMEM;
        void *n = realloc(*p, nc * elem);
        if (!n)
                return -ENOMEM;
        *p = n;
        *cap = nc;
        return 0;
}
/* The same for a typed array variable: ARRAY_RESERVE(v, cap, n + 1, 16). */
#define ARRAY_RESERVE(p, cap, need, first)                                                      \
        ({                                                                                      \
                void *_ar_ = (p);                                                               \
                int _ar_r_ = array_reserve(&_ar_, &(cap), (need), sizeof *(p), (first));        \
                (p) = _ar_;                                                                     \
                _ar_r_;                                                                         \
        })
