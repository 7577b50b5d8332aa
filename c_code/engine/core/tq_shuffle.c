/* tq_shuffle.c: an epoch's permutation, on a thread at the lowest priority (see tq_shuffle.h). */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "tq_shuffle.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

/* Swaps (or items filled, 16 times as many) the background thread makes between looks at whether another
 * thread wants the rest: about 50 us. */
#define CHUNK 4096

/* Uniform in [0, i]: i's bits masked off the generator's words until one is not above i. */
static uint64_t uniform_to(tq_bits *bits, uint64_t i)
{
    uint64_t mask = i, j;
    for (int shift = 1; shift < 64; shift *= 2)
        mask |= mask >> shift;
    if (i <= UINT32_MAX) {
        do
            j = bits->next32(bits->state) & mask;
        while (j > i);
    } else {
        do
            j = bits->next64(bits->state) & mask;
        while (j > i);
    }
    return j;
}

/* Fisher-Yates from i = top down to i = end + 1; returns end. */
static int64_t shuffle_down(int64_t *data, int64_t top, int64_t end, tq_bits *bits)
{
    for (int64_t i = top; i > end; i--) {
        int64_t j = (int64_t)uniform_to(bits, (uint64_t)i), item = data[j];
        data[j] = data[i];
        data[i] = item;
    }
    return end;
}

void tq_permute(int64_t *data, int64_t n, tq_bits bits)
{
    for (int64_t i = 0; i < n; i++)
        data[i] = i;
    if (n > 1)
        shuffle_down(data, n - 1, 0, &bits);
}

struct tq_shuffle_ahead {
    int64_t *data, n;
    tq_bits bits;
    int64_t filled;       /* data[0 .. filled) holds 0 .. filled - 1 (under work); the swaps begin at n */
    int64_t next;         /* the next i to swap (under work); 0 once complete */
    int wanted;           /* a finisher or tq_shuffle_free wants the work: the thread stops (atomic) */
    int complete;         /* whether the permutation is complete (atomic: done() takes no lock) */
    int ended;            /* whether the thread has returned (atomic): joining it no longer waits */
    pthread_mutex_t work; /* held by whoever works on it, one chunk at a time for the thread */
    pthread_t thread;
};

/* One chunk of the work, under work: up to `steps` items filled, else up to `steps` swaps.  Whether any
 * is left. */
static int work_on(tq_shuffle_ahead *ahead, int64_t steps)
{
    if (ahead->filled < ahead->n) {
        int64_t end = ahead->n - ahead->filled > steps ? ahead->filled + steps : ahead->n;
        for (int64_t i = ahead->filled; i < end; i++)
            ahead->data[i] = i;
        ahead->filled = end;
        return 1;
    }
    if (ahead->next > 0) {
        int64_t end = ahead->next > steps ? ahead->next - steps : 0;
        ahead->next = shuffle_down(ahead->data, ahead->next, end, &ahead->bits);
    }
    if (ahead->next > 0)
        return 1;
    __atomic_store_n(&ahead->complete, 1, __ATOMIC_RELEASE);
    return 0;
}

/* The thread runs only where no other wants the core.  Were it refused, it would run at the usual
 * priority: the order comes all the same. */
static void in_idle_time(void)
{
#ifdef SCHED_IDLE
    struct sched_param none = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
#endif
}

/* A chunk at a time, so that whoever wants the rest waits for one chunk at most. */
static void *shuffle_thread(void *arg)
{
    tq_shuffle_ahead *ahead = arg;
    in_idle_time();
    for (;;) {
        pthread_mutex_lock(&ahead->work);
        int go_on = !__atomic_load_n(&ahead->wanted, __ATOMIC_ACQUIRE) &&
                    work_on(ahead, ahead->filled < ahead->n ? 16 * CHUNK : CHUNK);
        pthread_mutex_unlock(&ahead->work);
        if (!go_on) {
            __atomic_store_n(&ahead->ended, 1, __ATOMIC_RELEASE);
            return NULL;
        }
    }
}

tq_code tq_shuffle_start(int64_t *data, int64_t n, tq_bits bits, tq_shuffle_ahead **out, tq_error *err)
{
    tq_shuffle_ahead *ahead = calloc(1, sizeof(*ahead));
    if (!ahead)
        return tq_set_error(err, TQ_ENOMEM, "no memory for a permutation");
    ahead->data = data;
    ahead->n = n;
    ahead->bits = bits;
    ahead->next = n > 1 ? n - 1 : 0;
    pthread_mutex_init(&ahead->work, NULL);
    int rc = pthread_create(&ahead->thread, NULL, shuffle_thread, ahead);
    if (rc) {
        pthread_mutex_destroy(&ahead->work);
        free(ahead);
        return tq_set_error(err, TQ_ENOMEM, "could not start a permutation's thread (error %d)", rc);
    }
    *out = ahead;
    return TQ_OK;
}

int tq_shuffle_done(tq_shuffle_ahead *ahead) { return __atomic_load_n(&ahead->complete, __ATOMIC_ACQUIRE); }

void tq_shuffle_finish(tq_shuffle_ahead *ahead)
{
    __atomic_store_n(&ahead->wanted, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&ahead->work);
    while (work_on(ahead, INT64_MAX))
        ;
    pthread_mutex_unlock(&ahead->work);
}

int tq_shuffle_stop(tq_shuffle_ahead *ahead)
{
    __atomic_store_n(&ahead->wanted, 1, __ATOMIC_RELEASE);
    return __atomic_load_n(&ahead->ended, __ATOMIC_ACQUIRE);
}

void tq_shuffle_free(tq_shuffle_ahead *ahead)
{
    if (!ahead)
        return;
    tq_shuffle_stop(ahead);
    pthread_join(ahead->thread, NULL);
    pthread_mutex_destroy(&ahead->work);
    free(ahead);
}
