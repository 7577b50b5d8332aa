/* The engine on its own: no Python, no Theano.  Built and run by
 * tests/cpu/test_engine_c.py, under the sanitizers when the compiler has them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "test_backend.h"
#include "tq_copy.h"
#include "tq_ring.h"
#include "tq_trace.h"

static int failures, checks;

/* Counted atomically: checks run in several threads. */
#define CHECK(cond)                                                                  \
    do {                                                                             \
        __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);                            \
        if (!(cond)) {                                                               \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The deadline `timeout` seconds from now; < 0 for none. */
static double deadline(double timeout) { return timeout < 0 ? -1.0 : tq_now() + timeout; }

/* One component of up to 8 rows of two int64: (producer, sequence). */
static tq_ring *make_ring(int capacity)
{
    tq_component comp = {8, 2 * sizeof(int64_t)};
    tq_error err;
    tq_ring *ring = tq_ring_create(&comp, 1, capacity, tq_host_backend_create(NULL), &err);
    if (!ring)
        fprintf(stderr, "tq_ring_create: %s\n", err.message);
    return ring;
}

static tq_code put(tq_ring *ring, int64_t producer, int64_t sequence, double timeout)
{
    int slot;
    tq_code code = tq_ring_reserve_put(ring, deadline(timeout), NULL, &slot, NULL);
    if (code != TQ_OK)
        return code;
    if ((code = tq_ring_begin_host_write(ring, slot, NULL)) != TQ_OK)
        return code;
    int64_t *row = tq_ring_write_ptr(ring, slot, 0);
    int64_t rows = 1 + sequence % 8;
    for (int64_t r = 0; r < rows; r++) {
        row[2 * r] = producer;
        row[2 * r + 1] = sequence;
    }
    return tq_ring_commit_put(ring, slot, &rows, NULL);
}

static tq_code get(tq_ring *ring, int64_t *producer, int64_t *sequence, double timeout)
{
    int slot;
    int64_t row[16];
    tq_code code = tq_ring_reserve_get(ring, deadline(timeout), NULL, &slot, NULL);
    if (code != TQ_OK)
        return code;
    CHECK(tq_ring_read_to_host(ring, slot, 0, row, NULL) == TQ_OK);
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
    CHECK(tq_ring_resume(ring) == 1 && tq_ring_state(ring) == TQ_STATE_OPEN); /* nobody saw the end: */
    CHECK(put(ring, 0, 8, 0) == TQ_OK && tq_ring_size(ring) == 2);            /* the run goes on */
    tq_ring_close(ring, 0);
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 7); /* drains */
    CHECK(tq_ring_resume(ring) == 1);               /* still not drained: the end was not seen */
    tq_ring_close(ring, 0);
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 8);
    CHECK(get(ring, &p, &s, 1) == TQ_CLOSED);
    CHECK(tq_ring_resume(ring) == 0 && tq_ring_state(ring) == TQ_STATE_CLOSED); /* a consumer saw the end */
    CHECK(tq_ring_reopen(ring, NULL) == TQ_OK);

    CHECK(put(ring, 0, 9, 0) == TQ_OK);
    tq_ring_close(ring, 1);                                      /* cancel */
    CHECK(tq_ring_size(ring) == 0 && tq_ring_resume(ring) == 0); /* what was cancelled stays so */
    CHECK(get(ring, &p, &s, 1) == TQ_CLOSED);
    CHECK(tq_ring_reopen(ring, NULL) == TQ_OK);

    CHECK(put(ring, 0, 10, 0) == TQ_OK);
    tq_ring_fail(ring, "source broke");
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 10);
    int slot;
    tq_error err;
    CHECK(tq_ring_reserve_get(ring, deadline(1), NULL, &slot, &err) == TQ_FAILED && err.code == TQ_FAILED);
    CHECK(strcmp(err.message, "failed: source broke") == 0);
    CHECK(tq_ring_reopen(ring, NULL) == TQ_OK && tq_ring_state(ring) == TQ_STATE_OPEN);

    /* an abandoned write is skipped and not counted as lost */
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &slot, NULL) == TQ_OK);
    tq_ring_abort_put(ring, slot);
    CHECK(put(ring, 0, 11, 0) == TQ_OK);
    CHECK(get(ring, &p, &s, 0) == TQ_OK && s == 11);
    tq_stats stats;
    tq_ring_stats(ring, &stats);
    /* 8 elements in (one of them cancelled by close), 7 out; the abandoned write is in neither. */
    CHECK(stats.enqueued == 8 && stats.dequeued == 7 && stats.dropped == 1);
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
    tq_error err;
    CHECK(tq_ring_trace_start(ring, 0, &err) == TQ_EINVAL && err.code == TQ_EINVAL);
    CHECK(tq_ring_trace_start(ring, TRACED, NULL) == TQ_OK);
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
                                     TQ_EV_READY,     TQ_EV_DEQUEUED, TQ_EV_CONSUMED};
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
    CHECK(tq_copy_set_threads(0, NULL) == TQ_EINVAL);
    CHECK(tq_copy_set_threads(4, NULL) == TQ_OK && tq_copy_threads() == 4);
    /* A large copy is cut finer than one chunk a thread (a slow thread's remainder goes to the others), never
     * below 256 KiB a chunk, and a small one is not cut. */
    CHECK(tq_copy_chunk_bytes(64u << 20) * 16 <= (64u << 20));
    CHECK(tq_copy_chunk_bytes(2u << 20) == (256u << 10));
    CHECK(tq_copy_chunk_bytes(4095) == 4095);
    size_t sizes[] = {0, 1, 4095, (1u << 20) + 7, (5u << 20) + 13, 9u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int shift = 0; shift < 3; shift++) {
            size_t n = sizes[i];
            unsigned char *src = malloc(n + 16), *dst = malloc(n + 16);
            for (size_t k = 0; k < n + 16; k++)
                src[k] = (unsigned char)(k * 131 + i), dst[k] = 0;
            tq_copy(dst + shift, src + 2 * shift + 1, n);
            CHECK(memcmp(dst + shift, src + 2 * shift + 1, n) == 0);
            CHECK(n + shift + 1 > n + 16 || dst[n + shift] == 0); /* nothing written past the end */
            free(src);
            free(dst);
        }
    }
    CHECK(tq_copy_set_threads(1, NULL) == TQ_OK); /* joins the pool's threads: nothing left for the leak check */
}

/* ---- the failing backend ---------------------------------------------------- */

/* Two components: 4 rows of one int32, a scalar int64. */
static tq_ring *make_test_ring(int capacity, test_control *control, tq_error *err)
{
    tq_component comps[2] = {{4, sizeof(int32_t)}, {1, sizeof(int64_t)}};
    return tq_ring_create(comps, 2, capacity, test_backend_create(control), err);
}

/* Puts the element (value, value, ...; value) from host memory. */
static tq_code put_value(tq_ring *ring, int32_t value, tq_error *err)
{
    int32_t xs[4] = {value, value, value, value};
    int64_t y = value;
    const void *srcs[2] = {xs, &y};
    int64_t rows[2] = {4, 1};
    int slot;
    tq_code code = tq_ring_reserve_put(ring, 0, NULL, &slot, err);
    return code != TQ_OK ? code : tq_ring_put_from_host(ring, slot, srcs, rows, err);
}

/* Takes an element and returns its value, or -1 (code in *code). */
static int64_t get_value(tq_ring *ring, tq_code *code)
{
    int slot;
    int32_t xs[4] = {0};
    int64_t y = -1;
    *code = tq_ring_reserve_get(ring, 0, NULL, &slot, NULL);
    if (*code != TQ_OK)
        return -1;
    CHECK(tq_ring_read_to_host(ring, slot, 0, xs, NULL) == TQ_OK);
    CHECK(tq_ring_read_to_host(ring, slot, 1, &y, NULL) == TQ_OK);
    CHECK(xs[0] == y && xs[3] == y);
    tq_ring_release_get(ring, slot);
    return y;
}

static uint64_t dropped(tq_ring *ring)
{
    tq_stats stats;
    tq_ring_stats(ring, &stats);
    return stats.dropped;
}

/* Hands the element (i + 1, ...; i + 1) to the ring's putter, from static memory that outlives the copy. */
static tq_code put_later_value(tq_ring *ring, int i, uint64_t *ticket, tq_error *err)
{
    static int32_t xs[8][4];
    static int64_t ys[8];
    int64_t rows[2] = {4, 1};
    int slot;
    for (int j = 0; j < 4; j++)
        xs[i][j] = i + 1;
    ys[i] = i + 1;
    const void *srcs[2] = {xs[i], &ys[i]};
    tq_code code = tq_ring_reserve_put(ring, 0, NULL, &slot, err);
    return code != TQ_OK ? code : tq_ring_put_later(ring, slot, srcs, rows, ticket, err);
}

/* Puts handed to the ring's putter land in order; a failure there drops its
 * slot and is told once; destroying the ring finishes the jobs still queued. */
static void test_puts_finished_later(void)
{
    test_control control = {{0}};
    tq_error err;
    tq_code code;
    uint64_t ticket;
    tq_ring *ring = make_test_ring(3, &control, &err);
    CHECK(tq_ring_later_done(ring) == 0 && tq_ring_later_wait(ring, 0, &err) == TQ_OK); /* no putter yet */
    for (int i = 0; i < 3; i++)
        CHECK(put_later_value(ring, i, &ticket, &err) == TQ_OK && ticket == (uint64_t)i);
    CHECK(tq_ring_later_wait(ring, deadline(10), &err) == TQ_OK && tq_ring_later_done(ring) == 3);
    CHECK(get_value(ring, &code) == 1 && get_value(ring, &code) == 2 && get_value(ring, &code) == 3);

    control.fail_on[AT_PUBLISH] = control.calls[AT_PUBLISH] + 1;
    CHECK(put_later_value(ring, 3, &ticket, &err) == TQ_OK && put_later_value(ring, 4, &ticket, &err) == TQ_OK);
    code = tq_ring_later_wait(ring, deadline(10), &err);
    CHECK(code == TQ_EDEVMEM && strcmp(err.message, "injected failure of publish") == 0);
    CHECK(tq_ring_later_wait(ring, 0, &err) == TQ_OK && tq_ring_later_failure(ring, &err) == TQ_OK); /* told once */
    CHECK(dropped(ring) == 1 && get_value(ring, &code) == 5 && get_value(ring, &code) == -1);

    /* Jobs still queued when the ring goes are finished first (the sanitizers watch the slots). */
    CHECK(put_later_value(ring, 5, &ticket, &err) == TQ_OK);
    tq_ring_destroy(ring);
    CHECK(control.destroyed == 1);
}

/* A ring that cannot be made gives its backend back, whatever state it is in. */
static void test_creation_failures_clean_up(void)
{
    test_control control = {{0}};
    tq_error err;
    control.fail_on[AT_ALLOC] = 1;
    CHECK(make_test_ring(4, &control, &err) == NULL);
    CHECK(err.code == TQ_EDEVMEM && strcmp(err.message, "injected failure of alloc_slots") == 0);
    CHECK(control.destroyed == 1);

    CHECK(make_test_ring(0, &control, &err) == NULL && err.code == TQ_EINVAL);
    CHECK(control.destroyed == 2);

    tq_component huge = {INT64_MAX / 2, 1 << 20};
    CHECK(tq_ring_create(&huge, 1, 2, test_backend_create(&control), &err) == NULL && err.code == TQ_EINVAL);
    CHECK(control.destroyed == 3);
    CHECK(tq_ring_create(&huge, 1, 2, NULL, &err) == NULL && err.code == TQ_EINVAL);
}

/* A put the backend fails drops its slot, counts it lost, and leaves the ring
 * working: consumers skip it, in the middle of the ring or at its head. */
static void test_backend_failures_drop_slots(void)
{
    test_control control = {{0}};
    tq_error err;
    tq_code code;
    tq_ring *ring = make_test_ring(3, &control, &err);

    control.fail_on[AT_BEFORE_WRITE] = 1;
    CHECK(put_value(ring, 1, &err) == TQ_EDEVMEM && strcmp(err.message, "injected failure of before_write") == 0);
    CHECK(dropped(ring) == 1 && tq_ring_size(ring) == 0);
    control.fail_on[AT_PUBLISH] = 2;
    CHECK(put_value(ring, 2, &err) == TQ_OK);
    CHECK(put_value(ring, 3, &err) == TQ_EDEVMEM); /* dropped behind a READY element */
    CHECK(put_value(ring, 4, &err) == TQ_OK);
    CHECK(dropped(ring) == 2 && tq_ring_size(ring) == 2);
    CHECK(get_value(ring, &code) == 2 && get_value(ring, &code) == 4);
    CHECK(get_value(ring, &code) == -1 && code == TQ_TIMEOUT);

    /* A failed read says so; the slot still goes back. */
    control.fail_on[AT_READ] = control.calls[AT_READ] + 1;
    CHECK(put_value(ring, 5, &err) == TQ_OK);
    int slot;
    int32_t xs[4];
    CHECK(tq_ring_reserve_get(ring, 0, NULL, &slot, &err) == TQ_OK);
    CHECK(tq_ring_read_to_host(ring, slot, 0, xs, &err) == TQ_EDEVMEM);
    tq_ring_release_get(ring, slot);

    /* The device paths: a failed take is reported; a failed device put is dropped. */
    int32_t dev_xs[4] = {6, 6, 6, 6}, out_xs[4];
    int64_t dev_y = 6, out_y, rows[2] = {4, 1};
    uint64_t srcs[2] = {(uint64_t)(uintptr_t)dev_xs, (uint64_t)(uintptr_t)&dev_y};
    uint64_t dsts[2] = {(uint64_t)(uintptr_t)out_xs, (uint64_t)(uintptr_t)&out_y};
    control.fail_on[AT_PUT_FROM_DEVICE] = 1;
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &slot, NULL) == TQ_OK);
    CHECK(tq_ring_put_from_device(ring, slot, NULL, srcs, rows, &err) == TQ_EDEVMEM);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &slot, NULL) == TQ_OK);
    CHECK(tq_ring_put_from_device(ring, slot, NULL, srcs, rows, &err) == TQ_OK);
    control.fail_on[AT_TAKE] = 1;
    CHECK(tq_ring_reserve_get(ring, 0, NULL, &slot, NULL) == TQ_OK);
    CHECK(tq_ring_take_on_device(ring, slot, NULL, dsts, &err) == TQ_EDEVMEM);
    CHECK(tq_ring_take_on_device(ring, slot, NULL, dsts, &err) == TQ_OK && out_xs[3] == 6 && out_y == 6);
    tq_ring_release_get(ring, slot);
    CHECK(dropped(ring) == 3);
    tq_ring_destroy(ring);
    CHECK(control.destroyed == 1);
}

/* Registered memory is published from where it is, the rest from the staging. */
static void test_registered_memory_skips_the_staging(void)
{
    test_control control = {{0}};
    tq_error err;
    tq_code code;
    tq_ring *ring = make_test_ring(2, &control, &err);
    int32_t dataset[16];
    int64_t y = 7;
    for (int i = 0; i < 16; i++)
        dataset[i] = 7;
    control.fail_on[AT_REGISTER] = 1;
    CHECK(tq_ring_register_host(ring, dataset, sizeof dataset, &err) == TQ_EDEVMEM);
    CHECK(tq_ring_register_host(ring, dataset, sizeof dataset, &err) == TQ_OK);
    const void *srcs[2] = {dataset + 8, &y};
    int64_t rows[2] = {4, 1};
    int slot;
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &slot, NULL) == TQ_OK);
    CHECK(tq_ring_put_from_host(ring, slot, srcs, rows, &err) == TQ_OK);
    CHECK(control.direct_extents == 1);
    CHECK(get_value(ring, &code) == 7);
    CHECK(tq_ring_unregister_host(ring, dataset + 1, &err) == TQ_EINVAL);
    CHECK(tq_ring_unregister_host(ring, dataset, &err) == TQ_OK);
    tq_ring_destroy(ring);

    /* The host backend serves none of the device calls. */
    ring = make_ring(2);
    CHECK(tq_ring_register_host(ring, dataset, sizeof dataset, &err) == TQ_ESTATE);
    CHECK(tq_ring_reserve_get(ring, 0, NULL, &slot, NULL) == TQ_TIMEOUT);
    tq_ring_destroy(ring);
}

/* A trace on a device backend: FILLED comes from on_arrival after the
 * publish (and stays -1 when on_arrival fails); a device put has no publish
 * of its own, so no COPY_ISSUED or FILLED; a failed publish leaves its element
 * without READY; a closed ring ends a wait, and the next put asks anew. */
static void test_trace_on_a_device_backend(void)
{
    test_control control = {{0}};
    tq_error err;
    tq_code code;
    tq_ring *ring = make_test_ring(4, &control, &err);
    tq_trace_element elements[8];
    int slot;
    CHECK(tq_ring_trace_start(ring, 4, &err) == TQ_OK);
    CHECK(put_value(ring, 1, &err) == TQ_OK);
    control.fail_on[AT_ON_ARRIVAL] = 2;
    CHECK(put_value(ring, 2, &err) == TQ_OK);
    int32_t dev_xs[4] = {3, 3, 3, 3};
    int64_t dev_y = 3, rows[2] = {4, 1};
    uint64_t srcs[2] = {(uint64_t)(uintptr_t)dev_xs, (uint64_t)(uintptr_t)&dev_y};
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &slot, NULL) == TQ_OK);
    CHECK(tq_ring_put_from_device(ring, slot, NULL, srcs, rows, &err) == TQ_OK);
    control.fail_on[AT_PUBLISH] = 3;
    CHECK(put_value(ring, 4, &err) == TQ_EDEVMEM);
    for (int32_t want = 1; want <= 3; want++)
        CHECK(get_value(ring, &code) == want);
    CHECK(tq_ring_trace_stop(ring, elements, 8) == 4);
    for (int i = 0; i < 4; i++)
        CHECK(elements[i].element == (uint64_t)i && elements[i].ns[TQ_EV_RESERVED] >= elements[i].ns[TQ_EV_PUT_BEGIN]);
    CHECK(elements[0].ns[TQ_EV_FILLED] >= elements[0].ns[TQ_EV_COPY_ISSUED] && elements[0].ns[TQ_EV_COPY_ISSUED] > 0);
    CHECK(elements[1].ns[TQ_EV_COPY_ISSUED] > 0 && elements[1].ns[TQ_EV_FILLED] == -1);
    CHECK(elements[2].ns[TQ_EV_PUT_END] > 0 && elements[2].ns[TQ_EV_READY] >= elements[2].ns[TQ_EV_PUT_END]);
    CHECK(elements[2].ns[TQ_EV_COPY_ISSUED] == -1 && elements[2].ns[TQ_EV_FILLED] == -1);
    CHECK(elements[2].ns[TQ_EV_CONSUMED] >= elements[2].ns[TQ_EV_DEQUEUED]);
    CHECK(elements[3].ns[TQ_EV_PUT_END] > 0 && elements[3].ns[TQ_EV_COPY_ISSUED] == -1);
    CHECK(elements[3].ns[TQ_EV_READY] == -1 && elements[3].ns[TQ_EV_DEQUEUED] == -1);

    /* A wait that timed out keeps the thread's first ask (a retry counts from it)... */
    for (int32_t value = 5; value <= 8; value++)
        CHECK(put_value(ring, value, &err) == TQ_OK);
    CHECK(tq_ring_trace_start(ring, 1, &err) == TQ_OK);
    CHECK(put_value(ring, 9, &err) == TQ_TIMEOUT); /* full */
    int64_t timed_out_at = tq_trace_now_ns();
    CHECK(get_value(ring, &code) == 5 && put_value(ring, 9, &err) == TQ_OK);
    CHECK(tq_ring_trace_stop(ring, elements, 8) == 1);
    CHECK(elements[0].ns[TQ_EV_PUT_BEGIN] < timed_out_at && elements[0].ns[TQ_EV_RESERVED] >= timed_out_at);
    /* ...one that found the ring closed forgets it. */
    CHECK(tq_ring_trace_start(ring, 1, &err) == TQ_OK);
    tq_ring_close(ring, 0);
    CHECK(put_value(ring, 10, &err) == TQ_CLOSED);
    int64_t closed_at = tq_trace_now_ns();
    for (int32_t want = 6; want <= 9; want++)
        CHECK(get_value(ring, &code) == want);
    CHECK(tq_ring_reopen(ring, NULL) == TQ_OK && put_value(ring, 10, &err) == TQ_OK);
    CHECK(tq_ring_trace_stop(ring, elements, 8) == 1 && elements[0].ns[TQ_EV_PUT_BEGIN] >= closed_at);
    tq_ring_destroy(ring);
}

/* fail(): producers are refused at once; writes in flight still land;
 * consumers drain, then get the message; reopen waits for the drain. */
static void test_failed_state(void)
{
    test_control control = {{0}};
    tq_error err;
    tq_code code;
    tq_ring *ring = make_test_ring(3, &control, &err);
    int in_flight;
    CHECK(put_value(ring, 1, &err) == TQ_OK);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &in_flight, NULL) == TQ_OK);
    tq_ring_fail(ring, "ValueError: bad record");
    CHECK(put_value(ring, 2, &err) == TQ_CLOSED);
    CHECK(strcmp(err.message, "failed and takes no more elements: ValueError: bad record") == 0);
    CHECK(tq_ring_reopen(ring, &err) == TQ_ESTATE);
    int32_t xs[4] = {3, 3, 3, 3};
    int64_t y = 3, rows[2] = {4, 1};
    const void *srcs[2] = {xs, &y};
    CHECK(tq_ring_put_from_host(ring, in_flight, srcs, rows, &err) == TQ_OK);
    CHECK(get_value(ring, &code) == 1 && get_value(ring, &code) == 3);
    CHECK(get_value(ring, &code) == -1 && code == TQ_FAILED);
    int slot;
    CHECK(tq_ring_reserve_get(ring, 0, NULL, &slot, &err) == TQ_FAILED);
    CHECK(strcmp(err.message, "failed: ValueError: bad record") == 0);
    CHECK(tq_ring_reopen(ring, &err) == TQ_OK && put_value(ring, 4, &err) == TQ_OK);

    /* close(cancel) drops a write still in flight at its commit. */
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &in_flight, NULL) == TQ_OK);
    tq_ring_close(ring, 1);
    CHECK(tq_ring_put_from_host(ring, in_flight, srcs, rows, &err) == TQ_CLOSED);
    CHECK(dropped(ring) == 2 && get_value(ring, &code) == -1 && code == TQ_CLOSED);
    CHECK(tq_ring_reopen(ring, &err) == TQ_OK);

    /* Destroyed with an element READY and a write reserved: nothing leaks. */
    CHECK(put_value(ring, 5, &err) == TQ_OK);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &in_flight, NULL) == TQ_OK);
    tq_ring_destroy(ring);
    CHECK(control.destroyed == 1);
}

typedef struct {
    tq_ring *ring;
    int stop;
    tq_code code;
    double waited;
} stopper;

static void *wait_for_space(void *arg)
{
    stopper *w = arg;
    int slot;
    double started = now();
    w->code = tq_ring_reserve_put(w->ring, -1, &w->stop, &slot, NULL);
    w->waited = now() - started;
    return NULL;
}

/* A stop flag ends a wait without limit as soon as the ring is woken. */
static void test_stop_flag_ends_a_wait(void)
{
    tq_ring *ring = make_ring(1);
    stopper w = {ring, 0, TQ_OK, 0};
    pthread_t thread;
    CHECK(put(ring, 0, 0, 0) == TQ_OK); /* full */
    pthread_create(&thread, NULL, wait_for_space, &w);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    tq_ring_wake(ring);
    pthread_join(thread, NULL);
    CHECK(w.code == TQ_STOPPED && w.waited < 5);
    int slot; /* a raised flag refuses before it reserves */
    CHECK(tq_ring_reserve_get(ring, -1, &w.stop, &slot, NULL) == TQ_STOPPED);
    tq_ring_destroy(ring);
}

/* Every slot's staging lies in one shared block that another process can map
 * (a memfd here); swapping two reserved slots' staging publishes what was
 * written for one through the other.  A backend without shared staging (the
 * test backend) is refused. */
static void test_shared_staging_and_swap(void)
{
    tq_ring *ring = make_ring(3);
    tq_shm shm;
    tq_error err;
    int a, b, got;
    size_t off_a, off_b;
    CHECK(tq_ring_staging(ring, &shm, &err) == TQ_OK);
    CHECK(shm.fd >= 0 && shm.base != NULL && shm.bytes >= 3 * 8 * 2 * sizeof(int64_t));
    struct stat st;
    CHECK(fstat(shm.fd, &st) == 0 && (size_t)st.st_size == shm.bytes);
    /* Another mapping of the descriptor sees what the ring's producer writes. */
    int64_t *other = mmap(NULL, shm.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, shm.fd, 0);
    CHECK(other != MAP_FAILED);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &a, NULL) == TQ_OK && tq_ring_begin_host_write(ring, a, NULL) == TQ_OK);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &b, NULL) == TQ_OK && tq_ring_begin_host_write(ring, b, NULL) == TQ_OK);
    CHECK(tq_ring_staging_offset(ring, a, &off_a, NULL) == TQ_OK);
    CHECK(tq_ring_staging_offset(ring, b, &off_b, NULL) == TQ_OK);
    CHECK(off_a != off_b && off_a + 16 * sizeof(int64_t) <= shm.bytes && off_b + 16 * sizeof(int64_t) <= shm.bytes);
    CHECK((char *)tq_ring_write_ptr(ring, b, 0) == (char *)shm.base + off_b + tq_ring_component_offset(ring, 0));
    CHECK(tq_ring_staging_offset(ring, 3, &off_a, &err) == TQ_EINVAL);
    /* "Another process" writes b's staging; it is published through a. */
    other[off_b / sizeof(int64_t)] = 42;
    CHECK(tq_ring_swap_staging(ring, a, b, &err) == TQ_OK);
    size_t now_a, now_b;
    CHECK(tq_ring_staging_offset(ring, a, &now_a, NULL) == TQ_OK);
    CHECK(tq_ring_staging_offset(ring, b, &now_b, NULL) == TQ_OK);
    CHECK(now_a == off_b && now_b == off_a);
    int64_t one = 1;
    CHECK(tq_ring_commit_put(ring, a, &one, NULL) == TQ_OK);
    CHECK(tq_ring_swap_staging(ring, a, b, &err) == TQ_EINVAL); /* a is no longer being written */
    CHECK(tq_ring_swap_staging(ring, b, -1, &err) == TQ_EINVAL);
    CHECK(tq_ring_reserve_get(ring, 0, NULL, &got, NULL) == TQ_OK && got == a);
    int64_t row[2];
    CHECK(tq_ring_read_to_host(ring, got, 0, row, NULL) == TQ_OK && row[0] == 42);
    tq_ring_release_get(ring, got);
    tq_ring_abort_put(ring, b);
    munmap(other, shm.bytes);
    tq_ring_destroy(ring);

    test_control control = {{0}};
    ring = make_test_ring(2, &control, &err);
    CHECK(tq_ring_staging(ring, &shm, &err) == TQ_ESTATE && strstr(err.message, "no shared staging"));
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &a, NULL) == TQ_OK);
    CHECK(tq_ring_reserve_put(ring, 0, NULL, &b, NULL) == TQ_OK);
    CHECK(tq_ring_staging_offset(ring, a, &off_a, &err) == TQ_ESTATE);
    CHECK(tq_ring_swap_staging(ring, a, b, &err) == TQ_ESTATE);
    tq_ring_abort_put(ring, a);
    tq_ring_abort_put(ring, b);
    tq_ring_destroy(ring);
}

int main(void)
{
    test_fifo_and_states();
    test_threads_exactly_once();
    test_trace_and_fill();
    test_trace_on_a_device_backend();
    test_copier();
    test_creation_failures_clean_up();
    test_backend_failures_drop_slots();
    test_puts_finished_later();
    test_registered_memory_skips_the_staging();
    test_failed_state();
    test_stop_flag_ends_a_wait();
    test_shared_staging_and_swap();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
