/* The epoll loop behind spaced. Level-triggered: a source that leaves bytes unread is
 * called again, so no handler needs to drain its fd completely. */
#include "daemon/loop.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "common/macros.h"

#define LOOP_BATCH 64

struct deferred {
        void (*fn)(void *);
        void *p;
};

struct loop {
        int epfd;
        bool in_batch;
        struct epoll_event evs[LOOP_BATCH];
        int n_evs;
        struct deferred *defer;
        size_t n_defer, cap_defer;
};

int loop_new(struct loop **ret) {
        struct loop *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd < 0) {
                int e = -errno;
                free(l);
                return e;
        }
        *ret = l;
        return 0;
}

static void run_deferred(struct loop *l) {
        /* In queue order, so "process c" queued before "free c" runs first. A deferred
         * function may defer more; they run in the same pass. */
        bool was = l->in_batch;
        l->in_batch = true;
        for (size_t i = 0; i < l->n_defer; i++) {
                struct deferred d = l->defer[i];
                d.fn(d.p);
        }
        l->n_defer = 0;
        l->in_batch = was;
}

struct loop *loop_free(struct loop *l) {
        if (!l)
                return NULL;
        run_deferred(l);
        safe_close(l->epfd);
        free(l->defer);
        free(l);
        return NULL;
}

int loop_add(struct loop *l, struct loop_src *src, uint32_t events) {
        struct epoll_event ev = { .events = events, .data.ptr = src };
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0)
                return -errno;
        src->events = events;
        src->registered = true;
        return 0;
}

int loop_mod(struct loop *l, struct loop_src *src, uint32_t events) {
        if (!src->registered)
                return -EINVAL;
        if (src->events == events)
                return 0;
        struct epoll_event ev = { .events = events, .data.ptr = src };
        if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0)
                return -errno;
        src->events = events;
        return 0;
}

void loop_del(struct loop *l, struct loop_src *src) {
        if (!src->registered)
                return;
        (void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, src->fd, NULL);
        src->registered = false;
        /* Forget queued events of src in this batch: its owner may be freed after it. */
        if (l->in_batch)
                for (int i = 0; i < l->n_evs; i++)
                        if (l->evs[i].data.ptr == src)
                                l->evs[i].data.ptr = NULL;
}

int loop_defer(struct loop *l, void (*fn)(void *), void *p) {
        if (l->n_defer == l->cap_defer) {
                size_t ncap = l->cap_defer ? l->cap_defer * 2 : 16;
                struct deferred *n = realloc(l->defer, ncap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                l->defer = n;
                l->cap_defer = ncap;
        }
        l->defer[l->n_defer++] = (struct deferred){ fn, p };
        return 0;
}

int loop_run_once(struct loop *l, int timeout_ms) {
        /* Work deferred outside a batch (at start-up or shutdown) runs first. */
        run_deferred(l);
        int n = epoll_wait(l->epfd, l->evs, LOOP_BATCH, timeout_ms);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        l->n_evs = n;
        l->in_batch = true;
        for (int i = 0; i < n; i++) {
                struct loop_src *src = l->evs[i].data.ptr;
                if (src)
                        src->cb(src, l->evs[i].events);
        }
        l->n_evs = 0;
        run_deferred(l);
        l->in_batch = false;
        return 0;
}
