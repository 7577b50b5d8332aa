/*
 * tq_trace: a timeline of what happens to each element of a ring, for a
 * bounded number of elements.  The ring calls one hook per event; a ring that
 * is not being traced pays one NULL test per hook.
 *
 * Elements are numbered by the ring's reservation counter (the order their
 * producers reserved them, which is also the order they come out).  A trace
 * records elements first .. first + n - 1: the next n elements reserved after
 * it was started.  Each element gets one timestamp per event kind (ns on
 * tq_now()'s clock, CLOCK_MONOTONIC), -1 where the event did not happen (yet).
 *
 * What each timestamp means:
 *   PUT_BEGIN    a producer first asked for a slot for this element (a put that
 *                waited in slices, or was retried after a timeout, counts from
 *                its first attempt in that thread)
 *   RESERVED     it got the slot: PUT_BEGIN..RESERVED is the wait for room
 *   PUT_END      it committed: the element's bytes are in the slot (or named)
 *   COPY_ISSUED  the backend published it (cuda: host-to-device copy enqueued
 *                on the copy stream; host: nothing to do).  A put from device
 *                memory has none, nor FILLED: its copy is queued on the
 *                producer's own stream before PUT_END
 *   READY        consumers can take it
 *   FILLED       cuda only: the copy has reached the device, as seen by a host
 *                function the driver runs after it on the copy stream (an upper
 *                bound: another producer's copy may be queued in between)
 *   GET_BEGIN    the consumer that took it first asked for an element
 *   DEQUEUED     that consumer took it: GET_BEGIN..DEQUEUED is the wait for input
 *   CONSUMED     the consumer gave the slot back (host: read; cuda: its reads
 *                are queued on the consumer's stream)
 * Causal order per element: PUT_BEGIN <= RESERVED <= PUT_END <= COPY_ISSUED
 * <= READY <= DEQUEUED <= CONSUMED; COPY_ISSUED <= FILLED; GET_BEGIN <= DEQUEUED.
 */
#ifndef TQ_TRACE_H
#define TQ_TRACE_H

#include <stdint.h>

#include "tq_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most elements one trace records. */
#define TQ_MAX_TRACE 10000000

typedef enum {
    TQ_EV_PUT_BEGIN = 0,
    TQ_EV_RESERVED,
    TQ_EV_PUT_END,
    TQ_EV_COPY_ISSUED,
    TQ_EV_READY,
    TQ_EV_FILLED,
    TQ_EV_GET_BEGIN,
    TQ_EV_DEQUEUED,
    TQ_EV_CONSUMED,
    TQ_EV_COUNT
} tq_event;

typedef struct tq_trace tq_trace;

/* One traced element: its number, slot and timestamps (ns, -1 for none). */
typedef struct {
    uint64_t element;
    int slot;
    int64_t ns[TQ_EV_COUNT];
} tq_trace_element;

int64_t tq_trace_now_ns(void);
const char *tq_event_name(tq_event kind);

/* A trace store for a ring of `capacity` slots; NULL when out of memory. */
tq_trace *tq_trace_create(int capacity);
/* Frees it.  Nothing may still call into it (device callbacks included). */
void tq_trace_destroy(tq_trace *trace);
/* Starts recording elements first .. first + n - 1, forgetting what was
 * recorded before.  -1 when out of memory. */
int tq_trace_start(tq_trace *trace, uint64_t first, int n);
/* Stops recording; copies up to max elements into out and returns how many
 * there were (elements with no event at all are left out). */
int tq_trace_stop(tq_trace *trace, tq_trace_element *out, int max);

/* ---- hooks (the ring calls them; see tq_ring.c) ---- */
/* When a producer (side 0) or consumer (side 1) asks: the time of its first
 * attempt, kept per thread until it gets a slot or gives up. */
int64_t tq_trace_asked(tq_trace *trace, int side);
void tq_trace_gave_up(tq_trace *trace, int side);
/* A producer reserved `slot` for element `element`, having asked at `asked`. */
void tq_trace_reserved(tq_trace *trace, int slot, uint64_t element, int64_t asked);
/* A consumer took `slot`, having asked at `asked`. */
void tq_trace_dequeued(tq_trace *trace, int slot, int64_t asked);
/* Records event `kind` for the element in `slot` now. */
void tq_trace_hit(tq_trace *trace, int slot, tq_event kind);
/* After the backend published `slot`: COPY_ISSUED now, and FILLED when the
 * backend says the data arrived (backends with an on_arrival method). */
void tq_trace_published(tq_trace *trace, tq_backend *backend, int slot);

#ifdef __cplusplus
}
#endif
#endif /* TQ_TRACE_H */
