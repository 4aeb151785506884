/* spaced's event loop: one epoll set, a source per fd, and frees deferred to the end of
 * an epoll batch so that an event later in the same batch never sees freed memory. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct loop;

struct loop_src {
        int fd;
        uint32_t events;  /* current interest */
        bool registered;
        void (*cb)(struct loop_src *src, uint32_t revents);
};

int loop_new(struct loop **ret);
struct loop *loop_free(struct loop *l);

int loop_add(struct loop *l, struct loop_src *src, uint32_t events);
/* Changes the interest set; no syscall when it is unchanged. */
int loop_mod(struct loop *l, struct loop_src *src, uint32_t events);
/* Removes src (the fd stays open; the caller closes it). Events of src still queued in the
 * current batch are dropped. */
void loop_del(struct loop *l, struct loop_src *src);

/* Runs fn(p) after the current batch of events, in the order queued (outside a batch: at
 * the next loop_run_once or loop_free). Used for frees, so that a pointer taken earlier in
 * the batch stays valid, and for work that must not run inside the caller's stack. */
int loop_defer(struct loop *l, void (*fn)(void *), void *p);

/* Waits up to timeout_ms (-1: forever) and dispatches one batch. -EINTR is not an error. */
int loop_run_once(struct loop *l, int timeout_ms);
