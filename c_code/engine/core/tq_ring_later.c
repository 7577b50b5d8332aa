/* tq_ring_later.c: puts from host memory finished later, on the ring's own
 * putter thread (see tq_ring.h, tq_ring_put_later).
 *
 * A producer that holds a lock its consumer wants (Python's GIL: a training
 * step holds it throughout) pays twice for a copy it waits for: the copy, and
 * the wait to take the lock back once the copy is done, which lasts until the
 * consumer lets go of it.  Handing the reserved slot and its sources to this
 * thread lets the producer go on at once; the copy and the publish happen
 * beside both.  Jobs run in the order they were handed over, one at a time. */
#include "tq_ring_state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int slot;
    const void *srcs[TQ_MAX_COMPONENTS];
    int64_t rows[TQ_MAX_COMPONENTS];
} later_job;

struct tq_later {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job was handed over, or the ring is going */
    pthread_cond_t done; /* a job is done */
    pthread_t thread;
    int closing;
    /* Jobs [finished, handed) wait or run, job t in jobs[t % capacity]: each
     * holds a reserved slot, so there are never more than the ring has. */
    later_job *jobs;
    int capacity;
    uint64_t handed, finished;
    tq_error failure; /* the first failure not yet reported (code TQ_OK: none) */
};

static void *putter(void *arg)
{
    tq_ring *ring = arg;
    tq_later *l = ring->later;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        while (l->finished == l->handed && !l->closing)
            pthread_cond_wait(&l->work, &l->lock);
        if (l->finished == l->handed)
            break; /* closing, and nothing is left to put */
        later_job job = l->jobs[l->finished % (uint64_t)l->capacity];
        pthread_mutex_unlock(&l->lock);
        tq_error err;
        tq_code code = tq_ring_put_from_host(ring, job.slot, job.srcs, job.rows, &err);
        pthread_mutex_lock(&l->lock);
        if (code != TQ_OK && l->failure.code == TQ_OK)
            l->failure = err;
        l->finished++;
        pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

static void later_destroy(tq_later *l);
static void stop_later(tq_ring *ring);

/* The ring's putter, started on first use. */
static tq_later *putter_of(tq_ring *ring, tq_error *err)
{
    if (ring->later)
        return ring->later;
    tq_later *l = calloc(1, sizeof *l);
    later_job *jobs = calloc((size_t)ring->capacity, sizeof *jobs);
    if (!l || !jobs) {
        free(l);
        free(jobs);
        tq_set_error(err, TQ_ENOMEM, "no memory for its putter's %d jobs", ring->capacity);
        return NULL;
    }
    l->jobs = jobs;
    l->capacity = ring->capacity;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    ring->later = l;
    int rc = pthread_create(&l->thread, NULL, putter, ring);
    if (rc != 0) {
        ring->later = NULL;
        later_destroy(l);
        tq_set_error(err, TQ_ENOMEM, "could not start its putter thread: %s", strerror(rc));
        return NULL;
    }
    ring->stop_later = stop_later;
    return l;
}

tq_code tq_ring_put_later(tq_ring *ring, int slot, const void *const *srcs, const int64_t *rows, uint64_t *ticket,
                          tq_error *err)
{
    tq_later *l = putter_of(ring, err);
    if (!l) {
        tq_ring_abort_put(ring, slot);
        return err ? err->code : TQ_ENOMEM;
    }
    pthread_mutex_lock(&l->lock);
    later_job *job = &l->jobs[l->handed % (uint64_t)l->capacity];
    job->slot = slot;
    memcpy(job->srcs, srcs, (size_t)ring->n_components * sizeof *srcs);
    memcpy(job->rows, rows, (size_t)ring->n_components * sizeof *rows);
    *ticket = l->handed++;
    pthread_mutex_unlock(&l->lock);
    pthread_cond_signal(&l->work);
    return TQ_OK;
}

uint64_t tq_ring_later_done(tq_ring *ring)
{
    tq_later *l = ring->later;
    if (!l)
        return 0;
    pthread_mutex_lock(&l->lock);
    uint64_t finished = l->finished;
    pthread_mutex_unlock(&l->lock);
    return finished;
}

tq_code tq_ring_later_failure(tq_ring *ring, tq_error *err)
{
    tq_later *l = ring->later;
    if (!l)
        return TQ_OK;
    pthread_mutex_lock(&l->lock);
    tq_code code = l->failure.code;
    if (code != TQ_OK) {
        if (err)
            *err = l->failure;
        l->failure.code = TQ_OK;
    }
    pthread_mutex_unlock(&l->lock);
    return code;
}

tq_code tq_ring_later_wait(tq_ring *ring, double deadline, tq_error *err)
{
    tq_later *l = ring->later;
    if (!l)
        return TQ_OK;
    tq_code code = TQ_OK;
    pthread_mutex_lock(&l->lock);
    while (l->finished < l->handed) {
        if (deadline >= 0 && tq_now() >= deadline) {
            code = tq_set_error(err, TQ_TIMEOUT, "its putter's copies not done");
            break;
        }
        tq_ring_wait_until(&l->done, &l->lock, deadline);
    }
    pthread_mutex_unlock(&l->lock);
    return code == TQ_OK ? tq_ring_later_failure(ring, err) : code;
}

static void later_destroy(tq_later *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->done);
    free(l->jobs);
    free(l);
}

/* Ends the ring's putter once its jobs are done (tq_ring_destroy, through ring->stop_later), and frees it. */
static void stop_later(tq_ring *ring)
{
    tq_later *l = ring->later;
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->closing = 1;
    pthread_mutex_unlock(&l->lock);
    pthread_cond_signal(&l->work);
    pthread_join(l->thread, NULL); /* after the jobs left: their slots are reserved, and their sources held */
    ring->later = NULL;
    ring->stop_later = NULL;
    later_destroy(l);
}
