/* A small fixed pool of threads taking jobs from one queue; finished jobs go back to the
 * loop thread through a pipe carrying their pointers (8 bytes: atomic under PIPE_BUF). */
#include "daemon/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/macros.h"

#define WK_MAX_THREADS 16

struct workers {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct wjob *head, *tail;
        unsigned n, started;
        pthread_t threads[WK_MAX_THREADS];
        bool stop;
        unsigned pending; /* loop thread only */
        int rfd, wfd;
};

static void *wk_main(void *p) {
        struct workers *w = p;
        for (;;) {
                pthread_mutex_lock(&w->lock);
                while (!w->head && !w->stop)
                        pthread_cond_wait(&w->cond, &w->lock);
                struct wjob *j = w->head;
                if (!j) {
                        pthread_mutex_unlock(&w->lock);
                        return NULL;
                }
                w->head = j->next;
                if (!w->head)
                        w->tail = NULL;
                pthread_mutex_unlock(&w->lock);
                j->work(j);
                uintptr_t v = (uintptr_t)j;
                ssize_t n;
                do
                        n = write(w->wfd, &v, sizeof v);
                while (n < 0 && errno == EINTR);
                /* A full pipe blocks this worker until the loop reads: fine. */
        }
}

int wk_new(unsigned n, struct workers **ret) {
        if (n == 0 || n > WK_MAX_THREADS)
                return -EINVAL;
        struct workers *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                free(w);
                return -errno;
        }
        (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
        w->rfd = p[0];
        w->wfd = p[1];
        w->n = n;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        *ret = w;
        return 0;
}

int wk_fd(struct workers *w) { return w->rfd; }
unsigned wk_pending(struct workers *w) { return w ? w->pending : 0; }

int wk_submit(struct workers *w, struct wjob *j) {
        pthread_mutex_lock(&w->lock);
        while (w->started < w->n) {
                if (pthread_create(&w->threads[w->started], NULL, wk_main, w) != 0) {
                        if (w->started == 0) {
                                pthread_mutex_unlock(&w->lock);
                                return -EAGAIN;
                        }
                        break;
                }
                w->started++;
        }
        j->next = NULL;
        if (w->tail)
                w->tail->next = j;
        else
                w->head = j;
        w->tail = j;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
        w->pending++;
        return 0;
}

void wk_dispatch(struct workers *w) {
        uintptr_t v[64];
        for (;;) {
                ssize_t n = read(w->rfd, v, sizeof v);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return;
                for (size_t i = 0; i < (size_t)n / sizeof v[0]; i++) {
                        struct wjob *j = (struct wjob *)v[i];
                        w->pending--;
                        j->done(j);
                }
        }
}

void wk_drain(struct workers *w) {
        while (w && w->pending > 0) {
                struct pollfd p = { .fd = w->rfd, .events = POLLIN };
                (void)poll(&p, 1, 1000);
                wk_dispatch(w);
        }
}

struct workers *wk_free(struct workers *w) {
        if (!w)
                return NULL;
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        /* Workers finish what is queued first (wk_main takes jobs until none is left). */
        for (unsigned i = 0; i < w->started; i++)
                pthread_join(w->threads[i], NULL);
        close(w->rfd);
        close(w->wfd);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
        return NULL;
}
