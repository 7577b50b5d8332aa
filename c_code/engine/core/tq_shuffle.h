/*
 * tq_shuffle: an epoch's permutation made off the caller's thread, at the
 * lowest priority, with the draws of numpy's Generator.shuffle.
 *
 * A shuffled epoch of 200,000 rows costs numpy 2.7 ms.  Made beside a
 * training step on two cores it took the core that the Feeder's thread was
 * woken for, and a Python thread made for it waited for the GIL that the
 * step holds (doc/bench/notes.rst, "The next epoch's order, off the GIL").
 * Here a thread of its own, with no GIL, shuffles in idle time only
 * (SCHED_IDLE); whoever needs the order before it is done finishes it on
 * its own thread, so that it never waits on a starved one.
 *
 * The draws are numpy's for Generator.shuffle of a 1-D array, so that the
 * same bit generator gives the same order (tests/cpu/test_shuffle.py holds
 * the two equal): for i from n - 1 down to 1, j uniform in [0, i] by masked
 * rejection (i's bits masked off the generator's 32-bit words while i fits
 * in 32 bits, off its 64-bit words above), then items i and j swap.
 * Plain C and pthreads.
 */
#ifndef TQ_SHUFFLE_H
#define TQ_SHUFFLE_H

#include "tq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A bit generator's words: numpy's bitgen_t as its capsule gives it.  Used
 * by one shuffle at a time. */
typedef struct {
    void *state;
    uint64_t (*next64)(void *state);
    uint32_t (*next32)(void *state);
} tq_bits;

/* Makes data[0 .. n) a permutation of 0 .. n - 1 on the calling thread. */
void tq_permute(int64_t *data, int64_t n, tq_bits bits);

/* A permutation of 0 .. n - 1 in the making, on a thread of its own. */
typedef struct tq_shuffle_ahead tq_shuffle_ahead;

/* Starts making data[0 .. n) (which must outlive it) a permutation of 0 .. n - 1 on a new thread: filled
 * in order, then shuffled. */
tq_code tq_shuffle_start(int64_t *data, int64_t n, tq_bits bits, tq_shuffle_ahead **out, tq_error *err);
/* Whether the permutation is complete; never waits. */
int tq_shuffle_done(tq_shuffle_ahead *ahead);
/* Completes it: the rest on the calling thread, where the background one has not got to it (after the
 * chunk that one may be in the middle of: the caller that must not wait on a starved thread asks done()
 * first, and makes the order itself with tq_permute where it is not). */
void tq_shuffle_finish(tq_shuffle_ahead *ahead);
/* Tells the thread to stop where it stands (data is then in no useful order); whether it has returned, so
 * that tq_shuffle_free will not wait for it.  A thread that runs in idle time on a machine with none may
 * take long to get to its next look. */
int tq_shuffle_stop(tq_shuffle_ahead *ahead);
/* Ends it where it stands (data is then in no useful order), joins its thread and frees it.  NULL is
 * allowed. */
void tq_shuffle_free(tq_shuffle_ahead *ahead);

#ifdef __cplusplus
}
#endif
#endif /* TQ_SHUFFLE_H */
