/* The engine on its own: no Python, no Theano.  Built and run by
 * tests/test_engine_c.py, under the sanitizers when the compiler has them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tq_backend.h"
#include "tq_copy.h"
#include "tq_ring.h"
#include "tq_trace.h"

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

/* A trace taken while three producers and two consumers run: every traced
 * element has all its host events, in causal order; the mean fill is sane. */
static void test_trace_and_fill(void)
{
    enum { TRACED = 500 };
    tq_ring *ring = make_ring(4);
    pthread_t producers[PRODUCERS], consumers[CONSUMERS];
    worker pw[PRODUCERS], cw[CONSUMERS];
    tq_stats before, after;
    tq_ring_stats(ring, &before);
    CHECK(tq_ring_trace_start(ring, TRACED) == 0);
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
    for (int i = 0; i < CONSUMERS; i++)
        pthread_join(consumers[i], NULL);
    tq_ring_stats(ring, &after);
    double mean_fill = (after.fill_integral - before.fill_integral) / (after.clock_s - before.clock_s);
    CHECK(mean_fill >= 0 && mean_fill <= 4);

    static tq_trace_element elements[TRACED];
    CHECK(tq_ring_trace_stop(ring, elements, TRACED) == TRACED);
    static const tq_event chain[] = {TQ_EV_PUT_BEGIN, TQ_EV_RESERVED, TQ_EV_PUT_END, TQ_EV_COPY_ISSUED,
                                     TQ_EV_READY, TQ_EV_DEQUEUED, TQ_EV_CONSUMED};
    for (int i = 0; i < TRACED; i++) {
        CHECK(elements[i].element == (uint64_t)i && elements[i].slot == i % 4);
        CHECK(elements[i].ns[TQ_EV_FILLED] == -1); /* host backend */
        CHECK(elements[i].ns[TQ_EV_GET_BEGIN] > 0 && elements[i].ns[TQ_EV_GET_BEGIN] <= elements[i].ns[TQ_EV_DEQUEUED]);
        for (size_t k = 0; k < sizeof chain / sizeof chain[0]; k++)
            CHECK(elements[i].ns[chain[k]] > 0 && (k == 0 || elements[i].ns[chain[k - 1]] <= elements[i].ns[chain[k]]));
    }
    CHECK(tq_ring_trace_stop(ring, elements, TRACED) == TRACED); /* stopping twice keeps the record */
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

int main(void)
{
    test_fifo_and_states();
    test_threads_exactly_once();
    test_trace_and_fill();
    test_copier();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
