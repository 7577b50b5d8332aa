/*
 * tq_ring_state.h: the ring's state, private to the two files that keep it:
 * tq_ring.c (creation, reservations, consumers, the state machine),
 * tq_ring_room.c (the slots in use as the depth changes, and when a producer
 * waiting for room looks again), tq_ring_put.c (the put side: extents,
 * publish, gathered and device puts) and tq_ring_later.c (puts finished on
 * the ring's putter thread), which call the helpers below and nothing else
 * of tq_ring.c.
 */
#ifndef TQ_RING_STATE_H
#define TQ_RING_STATE_H

#include <pthread.h>

#include "tq_ring.h"
#include "tq_trace.h"

/* Deadlines beyond this many seconds of the clock are no deadline: a
 * timespec could not hold them. */
#define FOREVER_S 1e12

typedef struct tq_later tq_later;

typedef enum { SLOT_FREE = 0, SLOT_WRITING, SLOT_READY, SLOT_READING, SLOT_DROPPED } slot_state;

struct tq_ring {
    pthread_mutex_t lock;
    pthread_cond_t space; /* a slot may have become FREE, the state changed, or a wake */
    pthread_cond_t data;  /* a slot may have become READY, the state changed, or a wake */

    int capacity, n_components;
    /* The most elements written or ready at once (tail - head), 1 to
     * capacity: Queue(capacity="auto") allocates its budget's slots and
     * tunes this limit, so a ring never reallocates under its producers. */
    int depth;
    /* The slots in use: counter c lives in slot (c - base) % span.  span
     * follows depth whenever no element in the ring would change slot (it is
     * empty, or its elements lie unwrapped below both spans:
     * tq_ring_follow_depth in tq_ring_room.c), so that a shallow ring touches only its first slots (pages
     * never written stay out of memory). */
    uint64_t base;
    int span;
    tq_component *components;
    size_t *offsets; /* byte offset of each component in a slot */
    size_t slot_bytes;

    unsigned char *slot_state;
    int64_t *rows; /* capacity x n_components: rows of each component */

    /* Reservation counters; slot = counter % capacity.  head <= tail, and the
     * slots in [head, tail) are WRITING, READY or DROPPED. */
    uint64_t head, tail;
    int n_ready;
    /* Producers asleep on `space`: room_wanted, the most free slots one that
     * asked for room (tq_ring_reserve_put_room) waits for (0: none does);
     * plain_waiters, how many others wait for any free slot. */
    int room_wanted, plain_waiters;
    /* The consumer's pace: when it last took an element and the mean time
     * between two takes (0 until two were taken).  A producer waiting for
     * room on a host ring looks again at that pace instead of being woken
     * by every take (tq_ring_room.c). */
    double last_take, take_interval;

    tq_state state;
    int cancelled;         /* close(cancel=1): writes still in flight are dropped */
    int end_seen;          /* a consumer was told "closed and drained" since the last close: tq_ring_resume refuses */
    char error[TQ_ERRLEN]; /* the message given to tq_ring_fail */

    tq_stats stats;
    double fill_since; /* when n_ready last changed; stats.fill_integral counts up to it */
    tq_backend *backend;
    tq_trace *trace_store; /* made by the first trace, freed with the ring */
    tq_trace *trace;       /* == trace_store while recording, else NULL (atomic) */
    tq_later *later;       /* the putter of tq_ring_put_later, made on first use (tq_ring_later.c) */
    /* Set with `later`: ends the putter once its jobs are done, and frees it.  A pointer, so that
     * tq_ring_destroy calls tq_ring_later.c, which sits above tq_ring.c, without naming it. */
    void (*stop_later)(tq_ring *ring);
};

/* The trace being recorded, or NULL: the only cost of tracing when it is off. */
#define TRACE_HOOK(ring, hook, ...)                                           \
    do {                                                                      \
        tq_trace *trace_ = __atomic_load_n(&(ring)->trace, __ATOMIC_ACQUIRE); \
        if (trace_)                                                           \
            hook(trace_, __VA_ARGS__);                                        \
    } while (0)

/* Waits on cond (its lock held) until signalled or the deadline (see
 * tq_ring.h) passes.  Returns 0, or ETIMEDOUT once the deadline has passed. */
int tq_ring_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, double deadline);

/* Under the lock, before n_ready changes: adds the time at the old fill. */
void tq_ring_fill_changes(tq_ring *ring);
/* Under the lock: gives a reserved write up (`lost`: counted in
 * stats.dropped). */
void tq_ring_drop_slot(tq_ring *ring, int slot, int lost);
/* The extent of each component of an element, holding rows[c] rows. */
void tq_ring_component_extents(const tq_ring *ring, const int64_t *rows, tq_extent *extents);
/* Bytes of an element of these rows per component. */
uint64_t tq_ring_element_bytes(const tq_ring *ring, const int64_t *rows);

/* Under the lock: the slot of reservation counter `counter`. */
static inline int tq_slot_of(const tq_ring *ring, uint64_t counter)
{
    return (int)((counter - ring->base) % (uint64_t)ring->span);
}

/* tq_ring_room.c, each under the lock.  The slots in use follow the depth
 * where no element in the ring would change slot. */
void tq_ring_follow_depth(tq_ring *ring);
/* Whether the next `room` slots at the tail are all FREE. */
int tq_ring_has_room(const tq_ring *ring, int room);
/* The free slots a producer asking for `room` waits for at the ring's depth. */
int tq_ring_room_of_depth(const tq_ring *ring, int room);
/* At each take: the consumer's pace (last_take, take_interval). */
void tq_ring_note_take(tq_ring *ring, double now);
/* Whether a producer waiting for `room` looks again by itself rather than
 * being woken by the consumer's release, and after how long. */
int tq_ring_polls_for_room(const tq_ring *ring, int room);
double tq_ring_room_poll_s(const tq_ring *ring, double now);

/* The refusal of a call that only device backends serve. */
static inline tq_code not_on_device(const tq_ring *ring, tq_error *err)
{
    return tq_set_error(err, TQ_ESTATE, "lives in host memory (backend '%s'); only a device queue does this",
                        ring->backend->name);
}

#endif /* TQ_RING_STATE_H */
