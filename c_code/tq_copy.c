/* tq_copy.c: the copy pool (see tq_copy.h).  A job is cut into chunks that
 * workers and the caller take from a shared counter until none are left. */
#include "tq_copy.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Below this, one thread is as fast as waking others. */
#define PARALLEL_MIN_BYTES (4u << 20)
#define CHUNK_BYTES (1u << 20)

struct tq_copier {
    pthread_mutex_t lock;
    pthread_cond_t work;     /* a job was posted, or the pool is closing */
    pthread_cond_t done;     /* a worker finished its part of a job */
    pthread_mutex_t busy;    /* held by the caller whose job runs */
    pthread_t *workers;
    int n_workers, started, closing;

    /* The job: chunks [0, n_chunks) of src -> dst. */
    char *dst;
    const char *src;
    size_t bytes, n_chunks;
    size_t next_chunk;       /* taken atomically */
    uint64_t generation;     /* bumps with every job */
    int active;              /* workers still inside the job */
};

static void copy_chunks(tq_copier *c)
{
    for (;;) {
        size_t i = __atomic_fetch_add(&c->next_chunk, 1, __ATOMIC_RELAXED);
        if (i >= c->n_chunks)
            return;
        size_t offset = i * CHUNK_BYTES;
        size_t len = c->bytes - offset < CHUNK_BYTES ? c->bytes - offset : CHUNK_BYTES;
        memcpy(c->dst + offset, c->src + offset, len);
    }
}

static void *worker(void *arg)
{
    tq_copier *c = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->closing && c->generation == seen)
            pthread_cond_wait(&c->work, &c->lock);
        if (c->closing)
            break;
        seen = c->generation;
        pthread_mutex_unlock(&c->lock);
        copy_chunks(c);
        pthread_mutex_lock(&c->lock);
        if (--c->active == 0)
            pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

tq_copier *tq_copier_create(int threads)
{
    tq_copier *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->busy, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    c->workers = threads > 0 ? calloc((size_t)threads, sizeof *c->workers) : NULL;
    for (int i = 0; c->workers && i < threads; i++)
        if (pthread_create(&c->workers[i], NULL, worker, c) == 0)
            c->started++;
    c->n_workers = c->started;
    return c;
}

int tq_copier_threads(const tq_copier *c) { return c ? c->n_workers : 0; }

void tq_copier_copy(tq_copier *c, void *dst, const void *src, size_t bytes)
{
    if (!c || !c->n_workers || bytes < PARALLEL_MIN_BYTES || pthread_mutex_trylock(&c->busy) != 0) {
        memcpy(dst, src, bytes);
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->dst = dst;
    c->src = src;
    c->bytes = bytes;
    c->n_chunks = (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    c->next_chunk = 0;
    c->active = c->n_workers;
    c->generation++;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->lock);

    copy_chunks(c);

    pthread_mutex_lock(&c->lock);
    while (c->active > 0)
        pthread_cond_wait(&c->done, &c->lock);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->busy);
}

void tq_copier_destroy(tq_copier *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->closing = 1;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < c->started; i++)
        pthread_join(c->workers[i], NULL);
    free(c->workers);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->busy);
    free(c);
}
