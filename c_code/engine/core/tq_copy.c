/* tq_copy.c: the copy pool (see tq_copy.h).  A job is cut into chunks that
 * workers and the caller take from a shared counter until none are left. */
#include "tq_copy.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Below this, one thread is as fast as waking others. */
#define PARALLEL_MIN_BYTES (1u << 20)
/* Chunks are no smaller than this, and otherwise CHUNKS_PER_THREAD per
 * thread: threads that share the memory with a DMA (or with each other's
 * hyperthreads) finish their shares at different times, and with one chunk
 * each the copy waited for the slowest.  Four per thread let the others take
 * over its remainder: 256 MiB batches staged while the previous one uploads
 * took 6.3 to 6.6 ms a batch instead of 7.2 to 8.0 on the H200 machine
 * (doc/bench/notes.rst, "Where a 256 MiB batch's time goes, and finer copy
 * chunks"). */
#define MIN_CHUNK_BYTES (256u << 10)
#define CHUNKS_PER_THREAD 4
/* The default pool: as many threads as cores, up to this many, share a copy
 * (a host copy stops scaling before that; doc/design.rst). */
#define DEFAULT_MAX_THREADS 16
#define MAX_THREADS 256

typedef struct tq_copier tq_copier;

struct tq_copier {
    pthread_mutex_t lock;
    pthread_cond_t work;  /* tickets were posted, or the pool is closing */
    pthread_cond_t done;  /* a worker finished its part of a job */
    pthread_mutex_t busy; /* held by the caller whose job runs */
    pthread_t *workers;
    int n_workers, started, closing;

    /* The job: fn(arg, i) for every chunk i in [0, n_chunks). */
    tq_chunk_fn fn;
    void *arg;
    size_t n_chunks;
    size_t next_chunk; /* taken atomically */
    int tickets;       /* workers still wanted for the job: no more wake than it has chunks for */
    int active;        /* workers that took a ticket and are not done */
};

/* memcpy with streaming (non-temporal) stores: the destination is not read
 * into the cache before it is overwritten, which saves a third of the memory
 * traffic of a large copy, and the copy does not evict the cache. */
void tq_copy_stream(void *dst_, const void *src_, size_t bytes)
{
    char *dst = dst_;
    const char *src = src_;
#ifdef __SSE2__
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes)
        head = bytes;
    memcpy(dst, src, head);
    dst += head, src += head, bytes -= head;
    for (; bytes >= 64; dst += 64, src += 64, bytes -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
    _mm_sfence(); /* streaming stores are weakly ordered: finish them before the copy counts as done */
#endif
    memcpy(dst, src, bytes);
}

static void run_chunks(tq_copier *c)
{
    for (;;) {
        size_t i = __atomic_fetch_add(&c->next_chunk, 1, __ATOMIC_RELAXED);
        if (i >= c->n_chunks)
            return;
        c->fn(c->arg, i);
    }
}

static void *worker(void *arg)
{
    tq_copier *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->closing && c->tickets == 0)
            pthread_cond_wait(&c->work, &c->lock);
        if (c->closing)
            break;
        c->tickets--;
        pthread_mutex_unlock(&c->lock);
        run_chunks(c);
        pthread_mutex_lock(&c->lock);
        if (--c->active == 0)
            pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static tq_copier *copier_create(int threads)
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

static void copier_run(tq_copier *c, size_t n_chunks, tq_chunk_fn fn, void *arg)
{
    if (!c || !c->n_workers || n_chunks < 2 || pthread_mutex_trylock(&c->busy) != 0) {
        for (size_t i = 0; i < n_chunks; i++)
            fn(arg, i);
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->fn = fn;
    c->arg = arg;
    c->n_chunks = n_chunks;
    c->next_chunk = 0;
    /* The caller works too: wake one worker less than there are chunks. */
    c->tickets = c->active = (int)(n_chunks - 1 < (size_t)c->n_workers ? n_chunks - 1 : (size_t)c->n_workers);
    for (int i = 0; i < c->tickets; i++)
        pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);

    run_chunks(c);

    pthread_mutex_lock(&c->lock);
    while (c->active > 0)
        pthread_cond_wait(&c->done, &c->lock);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->busy);
}

static void copier_destroy(tq_copier *c)
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

/* ---- the process's pool ------------------------------------------------------ */

/* Copies hold the lock shared; replacing the pool holds it exclusively, so a
 * pool is never destroyed under a copy. */
static pthread_rwlock_t pool_lock = PTHREAD_RWLOCK_INITIALIZER;
static tq_copier *pool;
static int pool_workers = -1; /* -1 until the first large copy picks the default */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In a forked child the pool's threads are gone, and a copy that waited for
 * them would wait forever; the pool's locks may have been held by threads of
 * the parent.  Forget the pool (its memory stays, unused) and start afresh. */
static void forget_pool_in_child(void)
{
    pool = NULL;
    pool_lock = (pthread_rwlock_t)PTHREAD_RWLOCK_INITIALIZER;
}

static void watch_forks(void) { pthread_atfork(NULL, NULL, forget_pool_in_child); }

static int default_workers(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return (int)(cpus < 2 ? 0 : cpus > DEFAULT_MAX_THREADS ? DEFAULT_MAX_THREADS - 1 : cpus - 1);
}

/* The pool, made on first use; called with pool_lock held shared, returns
 * with it held shared. */
static tq_copier *current_pool(void)
{
    if (pool)
        return pool;
    pthread_once(&atfork_once, watch_forks);
    pthread_rwlock_unlock(&pool_lock);
    pthread_rwlock_wrlock(&pool_lock);
    if (!pool) {
        if (pool_workers < 0)
            pool_workers = default_workers();
        pool = copier_create(pool_workers);
    }
    pthread_rwlock_unlock(&pool_lock);
    pthread_rwlock_rdlock(&pool_lock);
    return pool;
}

void tq_copy_parallel(size_t n_chunks, tq_chunk_fn fn, void *arg)
{
    if (n_chunks < 2) {
        if (n_chunks)
            fn(arg, 0);
        return;
    }
    pthread_rwlock_rdlock(&pool_lock);
    copier_run(current_pool(), n_chunks, fn, arg);
    pthread_rwlock_unlock(&pool_lock);
}

size_t tq_copy_chunk_bytes(size_t bytes)
{
    if (bytes < PARALLEL_MIN_BYTES)
        return bytes;
    size_t chunk = (bytes / (CHUNKS_PER_THREAD * (size_t)tq_copy_threads()) + 63) & ~(size_t)63;
    return chunk > MIN_CHUNK_BYTES ? chunk : MIN_CHUNK_BYTES;
}

typedef struct {
    char *dst;
    const char *src;
    size_t bytes, chunk;
} copy_job;

static void copy_chunk(void *arg, size_t i)
{
    copy_job *job = arg;
    size_t offset = i * job->chunk;
    size_t len = job->bytes - offset < job->chunk ? job->bytes - offset : job->chunk;
    tq_copy_stream(job->dst + offset, job->src + offset, len);
}

void tq_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes < PARALLEL_MIN_BYTES) {
        memcpy(dst, src, bytes);
        return;
    }
    copy_job job = {dst, src, bytes, tq_copy_chunk_bytes(bytes)};
    tq_copy_parallel((bytes + job.chunk - 1) / job.chunk, copy_chunk, &job);
}

tq_code tq_copy_set_threads(int threads, tq_error *err)
{
    if (threads < 1 || threads > MAX_THREADS)
        return tq_set_error(err, TQ_EINVAL, "expected 1 to %d threads, got %d", MAX_THREADS, threads);
    pthread_once(&atfork_once, watch_forks);
    pthread_rwlock_wrlock(&pool_lock);
    copier_destroy(pool);
    pool = NULL;                /* the next large copy makes the new one */
    pool_workers = threads - 1; /* the caller of a copy is one of them */
    pthread_rwlock_unlock(&pool_lock);
    return TQ_OK;
}

int tq_copy_threads(void)
{
    pthread_rwlock_rdlock(&pool_lock);
    int workers = pool ? pool->n_workers : pool_workers < 0 ? default_workers() : pool_workers;
    pthread_rwlock_unlock(&pool_lock);
    return workers + 1;
}
