/* spaced's worker threads: the slow parts of the session lifecycle (captures, file tree
 * materializations, forks, GC of the snapshot store) run here so that the event loop
 * keeps serving every other session. A job's work() runs on a worker; its done() runs
 * later on the loop thread, which alone touches daemon state and the metadata store. */
#pragma once
#include <stdbool.h>

struct workers;
struct loop;

struct wjob {
        struct wjob *next;
        void (*work)(struct wjob *j);  /* on a worker thread */
        void (*done)(struct wjob *j);  /* on the loop thread, after work() */
};

/* n threads (started at the first submit, so they inherit the caller's signal mask then).
 * Completions are read from the fd wk_fd() returns, by wk_dispatch(). */
int wk_new(unsigned n, struct workers **ret);
/* Waits for queued and running jobs to finish (their done() is not called), joins. */
struct workers *wk_free(struct workers *w);
int wk_fd(struct workers *w);
int wk_submit(struct workers *w, struct wjob *j);
/* Calls done() of every finished job; call when wk_fd() is readable. */
void wk_dispatch(struct workers *w);
/* Jobs submitted and not yet dispatched. */
unsigned wk_pending(struct workers *w);
/* Blocks until every submitted job finished and dispatches them (shutdown). */
void wk_drain(struct workers *w);
