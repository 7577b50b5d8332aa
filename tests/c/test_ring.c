/* The engine on its own: no Python, no Theano.  Built and run by
 * tests/test_engine_c.py, under the sanitizers when the compiler has them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "tq_backend.h"
#include "tq_copy.h"
#include "tq_ring.h"

static int failures, checks;

/* Counted atomically: checks run in several threads. */
#define CHECK(cond)                                                           \
    do {                                                                      \
        __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);                     \
        if (!(cond)) {                                                        \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                     \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* One component of up to 8 rows of two int64: (producer, sequence). */
static tq_ring *make_ring(int capacity)
{
    tq_component comp = {8, 2 * sizeof(int64_t)};
    char err[TQ_ERRLEN];
    tq_ring *ring = tq_ring_create(&comp, 1, capacity, tq_host_backend_create(), err, sizeof err);
    if (!ring)
        fprintf(stderr, "tq_ring_create: %s\n", err);
    return ring;
}

static tq_status put(tq_ring *ring, int64_t producer, int64_t sequence, double timeout)
{
    int slot;
    tq_status st = tq_ring_reserve_put(ring, timeout, &slot);
    if (st != TQ_OK)
        return st;
    if ((st = tq_ring_begin_host_write(ring, slot)) != TQ_OK)
        return st;
    int64_t *row = tq_ring_write_ptr(ring, slot, 0);
    int64_t rows = 1 + sequence % 8;
    for (int64_t r = 0; r < rows; r++) {
        row[2 * r] = producer;
        row[2 * r + 1] = sequence;
    }
    return tq_ring_commit_put(ring, slot, &rows, NULL);
}

static tq_status get(tq_ring *ring, int64_t *producer, int64_t *sequence, double timeout)
{
    int slot;
    tq_status st = tq_ring_reserve_get(ring, timeout, &slot);
    if (st != TQ_OK)
        return st;
    const int64_t *row = tq_ring_read_ptr(ring, slot, 0);
    int64_t rows = tq_ring_rows(ring, slot, 0);
    *producer = row[0];
    *sequence = row[1];
    for (int64_t r = 1; r < rows; r++)
        CHECK(row[2 * r] == *producer && row[2 * r + 1] == *sequence);
    CHECK(rows == 1 + *sequence % 8);
    tq_ring_release_get(ring, slot);
    return TQ_OK;
}

static void test_fifo_and_states(void)
{
    tq_ring *ring = make_ring(3);
    int64_t p, s;
    for (int i = 0; i < 3; i++)
        CHECK(put(ring, 0, i, 0) == TQ_OK);
    CHECK(put(ring, 0, 3, 0.05) == TQ_TIMEOUT); /* full */
    CHECK(tq_ring_size(ring) == 3);
    for (int i = 0; i < 3; i++)
        CHECK(get(ring, &p, &s, 0) == TQ_OK && s == i);
    double started = now();
    CHECK(get(ring, &p, &s, 0.1) == TQ_TIMEOUT);
    CHECK(now() - started >= 0.09);

    CHECK(put(ring, 0, 7, 0) == TQ_OK);
    tq_ring_close(ring, 0);
    CHECK(put(ring, 0, 8, 0) == TQ_CLOSED);
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 7); /* drains */
    CHECK(get(ring, &p, &s, 1) == TQ_CLOSED);
    CHECK(tq_ring_reopen(ring) == TQ_OK);

    CHECK(put(ring, 0, 9, 0) == TQ_OK);
    tq_ring_close(ring, 1); /* cancel */
    CHECK(tq_ring_size(ring) == 0);
    CHECK(get(ring, &p, &s, 1) == TQ_CLOSED);
    CHECK(tq_ring_reopen(ring) == TQ_OK);

    CHECK(put(ring, 0, 10, 0) == TQ_OK);
    tq_ring_fail(ring, "source broke");
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 10);
    CHECK(get(ring, &p, &s, 1) == TQ_FAILED);
    CHECK(strcmp(tq_ring_error(ring), "source broke") == 0);
    CHECK(tq_ring_reopen(ring) == TQ_OK && tq_ring_state(ring) == TQ_STATE_OPEN);

    int slot; /* an abandoned write is skipped and not counted as lost */
    CHECK(tq_ring_reserve_put(ring, 0, &slot) == TQ_OK);
    tq_ring_abort_put(ring, slot);
    CHECK(put(ring, 0, 11, 0) == TQ_OK);
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 11);
    tq_stats stats;
    tq_ring_stats(ring, &stats);
    /* 7 elements in (one of them cancelled by close), 6 out; the abandoned write is in neither. */
    CHECK(stats.enqueued == 7 && stats.dequeued == 6 && stats.dropped == 1);
    tq_ring_destroy(ring);
}

enum { PRODUCERS = 3, CONSUMERS = 2, PER_PRODUCER = 20000 };

typedef struct {
    tq_ring *ring;
    int id;
    int64_t last[PRODUCERS];
    int64_t taken;
} worker;

static void *produce(void *arg)
{
    worker *w = arg;
    for (int64_t i = 0; i < PER_PRODUCER; i++)
        CHECK(put(w->ring, w->id, i, -1) == TQ_OK);
    return NULL;
}

static void *consume(void *arg)
{
    worker *w = arg;
    int64_t p, s;
    for (int i = 0; i < PRODUCERS; i++)
        w->last[i] = -1;
    while (get(w->ring, &p, &s, -1) == TQ_OK) {
        CHECK(p >= 0 && p < PRODUCERS && s > w->last[p]); /* each consumer sees each producer in order */
        w->last[p] = s;
        w->taken++;
    }
    return NULL;
}

static void test_threads_exactly_once(void)
{
    tq_ring *ring = make_ring(4);
    pthread_t producers[PRODUCERS], consumers[CONSUMERS];
    worker pw[PRODUCERS], cw[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) {
        cw[i] = (worker){ring, i, {0}, 0};
        pthread_create(&consumers[i], NULL, consume, &cw[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pw[i] = (worker){ring, i, {0}, 0};
        pthread_create(&producers[i], NULL, produce, &pw[i]);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(producers[i], NULL);
    tq_ring_close(ring, 0);
    int64_t taken = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(consumers[i], NULL);
        taken += cw[i].taken;
    }
    CHECK(taken == (int64_t)PRODUCERS * PER_PRODUCER);
    tq_stats stats;
    tq_ring_stats(ring, &stats);
    CHECK(stats.enqueued == (uint64_t)taken && stats.dequeued == (uint64_t)taken && stats.bytes_in == stats.bytes_out);
    tq_ring_destroy(ring);
}

static void test_copier(void)
{
    tq_copier *copier = tq_copier_create(3);
    size_t sizes[] = {0, 1, 4095, (1u << 20) + 7, (5u << 20) + 13, 9u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int shift = 0; shift < 3; shift++) {
            size_t n = sizes[i];
            unsigned char *src = malloc(n + 16), *dst = malloc(n + 16);
            for (size_t k = 0; k < n + 16; k++)
                src[k] = (unsigned char)(k * 131 + i), dst[k] = 0;
            tq_copier_copy(copier, dst + shift, src + 2 * shift + 1, n);
            CHECK(memcmp(dst + shift, src + 2 * shift + 1, n) == 0);
            CHECK(n + shift + 1 > n + 16 || dst[n + shift] == 0); /* nothing written past the end */
            free(src);
            free(dst);
        }
    }
    tq_copier_destroy(copier);
}

/* Every slot's staging lies in one shared block that another process can map
 * (a memfd here); swapping two reserved slots' staging publishes what was
 * written for one through the other. */
static void test_shared_staging_and_swap(void)
{
    tq_ring *ring = make_ring(3);
    int fd, a, b, got;
    void *base;
    size_t bytes;
    tq_ring_staging(ring, &fd, &base, &bytes);
    CHECK(fd >= 0 && base != NULL && bytes >= 3 * 8 * 2 * sizeof(int64_t));
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && (size_t)st.st_size == bytes);
    /* Another mapping of the descriptor sees what the ring's producer writes. */
    int64_t *other = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(other != MAP_FAILED);
    CHECK(tq_ring_reserve_put(ring, 0, &a) == TQ_OK && tq_ring_begin_host_write(ring, a) == TQ_OK);
    CHECK(tq_ring_reserve_put(ring, 0, &b) == TQ_OK && tq_ring_begin_host_write(ring, b) == TQ_OK);
    size_t off_a = tq_ring_staging_offset(ring, a), off_b = tq_ring_staging_offset(ring, b);
    CHECK(off_a != off_b && off_a + 8 * 2 * sizeof(int64_t) <= bytes && off_b + 8 * 2 * sizeof(int64_t) <= bytes);
    CHECK((char *)tq_ring_write_ptr(ring, b, 0) == (char *)base + off_b);
    /* "Another process" writes b's staging; it is published through a. */
    other[off_b / sizeof(int64_t)] = 42;
    CHECK(tq_ring_swap_staging(ring, a, b) == TQ_OK);
    CHECK(tq_ring_staging_offset(ring, a) == off_b && tq_ring_staging_offset(ring, b) == off_a);
    int64_t one = 1;
    CHECK(tq_ring_commit_put(ring, a, &one, NULL) == TQ_OK);
    CHECK(tq_ring_swap_staging(ring, a, b) == TQ_EINVAL); /* a is no longer being written */
    CHECK(tq_ring_reserve_get(ring, 0, &got) == TQ_OK && got == a);
    CHECK(*(const int64_t *)tq_ring_read_ptr(ring, got, 0) == 42);
    tq_ring_release_get(ring, got);
    tq_ring_abort_put(ring, b);
    munmap(other, bytes);
    tq_ring_destroy(ring);
}

int main(void)
{
    test_fifo_and_states();
    test_threads_exactly_once();
    test_copier();
    test_shared_staging_and_swap();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
