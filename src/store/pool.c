/* A small thread pool shared by every operation on one store handle. Two queues: hi for
 * tasks that never block (hash, compress, write one chunk), lo for tasks that may wait for
 * the memory budget (read a file). A thread that waits runs queued tasks instead of
 * sleeping, which keeps both cores busy and rules out waiting on a task nobody runs. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "store/store-internal.h"

#define POOL_BUDGET (96u << 20) /* bytes of file data queued in tasks at once */

struct pool {
        pthread_mutex_t mu;
        pthread_cond_t work;
        pthread_cond_t progress;
        struct pool_task *hi_head, *hi_tail, *lo_head, *lo_tail;
        bool stop;
        unsigned n;
        pthread_t *threads;
        size_t budget_used;
};

static struct pool_task *pop(struct pool *p, bool hi_only) {
        struct pool_task *t = p->hi_head;
        if (t) {
                p->hi_head = t->next;
                if (!p->hi_head)
                        p->hi_tail = NULL;
                return t;
        }
        if (hi_only)
                return NULL;
        t = p->lo_head;
        if (t) {
                p->lo_head = t->next;
                if (!p->lo_head)
                        p->lo_tail = NULL;
        }
        return t;
}

static void *worker(void *arg) {
        struct pool *p = arg;
        pthread_mutex_lock(&p->mu);
        for (;;) {
                struct pool_task *t = pop(p, false);
                if (!t) {
                        if (p->stop)
                                break;
                        pthread_cond_wait(&p->work, &p->mu);
                        continue;
                }
                pthread_mutex_unlock(&p->mu);
                t->fn(t);
                pthread_mutex_lock(&p->mu);
        }
        pthread_mutex_unlock(&p->mu);
        return NULL;
}

int pool_new(unsigned threads, struct pool **ret) {
        struct pool *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->work, NULL);
        pthread_cond_init(&p->progress, NULL);
        p->threads = calloc(threads ? threads : 1, sizeof *p->threads);
        if (!p->threads) {
                pool_free(p);
                return -ENOMEM;
        }
        for (unsigned i = 0; i < threads; i++) {
                int r = pthread_create(&p->threads[i], NULL, worker, p);
                if (r != 0) {
                        pool_free(p);
                        return -r;
                }
                p->n++;
        }
        *ret = p;
        return 0;
}

struct pool *pool_free(struct pool *p) {
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->mu);
        for (unsigned i = 0; i < p->n; i++)
                pthread_join(p->threads[i], NULL);
        free(p->threads);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->progress);
        free(p);
        return NULL;
}

unsigned pool_threads(const struct pool *p) { return p->n; }

void pool_submit(struct pool *p, struct pool_task *t, bool hi) {
        t->next = NULL;
        pthread_mutex_lock(&p->mu);
        struct pool_task **head = hi ? &p->hi_head : &p->lo_head, **tail = hi ? &p->hi_tail : &p->lo_tail;
        if (*tail)
                (*tail)->next = t;
        else
                *head = t;
        *tail = t;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->mu);
}

void pool_submit_first(struct pool *p, struct pool_task *t) {
        pthread_mutex_lock(&p->mu);
        t->next = p->lo_head;
        p->lo_head = t;
        if (!p->lo_tail)
                p->lo_tail = t;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->mu);
}

void pool_notify(struct pool *p) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->progress);
        pthread_mutex_unlock(&p->mu);
}

bool pool_wait(struct pool *p, atomic_size_t *pending, unsigned timeout_ms) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (deadline.tv_nsec >= 1000000000) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(pending) > 0) {
                struct pool_task *t = pop(p, false);
                if (t) {
                        pthread_mutex_unlock(&p->mu);
                        t->fn(t);
                        pthread_mutex_lock(&p->mu);
                        continue;
                }
                if (!timeout_ms)
                        pthread_cond_wait(&p->progress, &p->mu);
                else if (pthread_cond_timedwait(&p->progress, &p->mu, &deadline) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&p->mu);
        return atomic_load(pending) == 0;
}

void pool_budget_take(struct pool *p, size_t n) {
        pthread_mutex_lock(&p->mu);
        while (p->budget_used > 0 && p->budget_used + n > POOL_BUDGET) {
                struct pool_task *t = pop(p, true);
                if (!t) {
                        pthread_cond_wait(&p->progress, &p->mu);
                        continue;
                }
                pthread_mutex_unlock(&p->mu);
                t->fn(t);
                pthread_mutex_lock(&p->mu);
        }
        p->budget_used += n;
        pthread_mutex_unlock(&p->mu);
}

void pool_budget_give(struct pool *p, size_t n) {
        pthread_mutex_lock(&p->mu);
        p->budget_used -= n;
        pthread_cond_broadcast(&p->progress);
        pthread_mutex_unlock(&p->mu);
}
