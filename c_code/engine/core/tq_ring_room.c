/* tq_ring_room.c: which slots a ring uses as its depth changes, and when a producer waiting for room looks
 * again; the policy that tq_ring.c's reservations and releases follow, under the ring's lock (see
 * tq_ring_state.h). */
#include "tq_ring_state.h"

/* The slots in use follow the depth (span = depth) where no element changes slot.  Empty, from the first
 * slot on.  Otherwise where the elements in the ring, head to tail, lie in slots o .. o + held - 1 without
 * wrapping past either span: counting from head - o keeps each in its slot.  A ring that is never empty
 * (worker processes hold a slot reserved at all times) still gets there within one turn of its slots. */
void tq_ring_follow_depth(tq_ring *ring)
{
    if (ring->span == ring->depth)
        return;
    if (ring->head == ring->tail) {
        ring->base = ring->tail;
        ring->span = ring->depth;
        return;
    }
    uint64_t first = (uint64_t)tq_slot_of(ring, ring->head), held = ring->tail - ring->head;
    int narrower = ring->span < ring->depth ? ring->span : ring->depth;
    if (first + held <= (uint64_t)narrower) {
        ring->base = ring->head - first;
        ring->span = ring->depth;
    }
}

int tq_ring_has_room(const tq_ring *ring, int room)
{
    for (int k = 0; k < room; k++)
        if (ring->slot_state[tq_slot_of(ring, ring->tail + (uint64_t)k)] != SLOT_FREE)
            return 0;
    return 1;
}

/* Room is asked as a share of the slots, so an auto ring's depth gets the same share. */
int tq_ring_room_of_depth(const tq_ring *ring, int room)
{
    if (ring->depth < ring->capacity)
        room = (int)((int64_t)room * ring->depth / ring->capacity);
    return room < 1 ? 1 : room;
}

/* An average over the last few takes or so. */
void tq_ring_note_take(tq_ring *ring, double now)
{
    if (ring->last_take > 0) {
        double interval = now - ring->last_take;
        ring->take_interval = ring->take_interval > 0 ? 0.875 * ring->take_interval + 0.125 * interval : interval;
    }
    ring->last_take = now;
}

/* A producer waiting for room on a host ring looks again by itself while the consumer takes elements faster
 * than one every ROOM_POLL_PACE_S, instead of being woken by the consumer's release: each wake-up cost the
 * consumer's thread 15 to 20 us of its CPU on a virtual machine, a quarter of a 60 us PyMC step
 * (doc/bench/notes.rst).  Slower consumers are woken as before: there a wake-up is a small share of the step,
 * and looks that land inside a long step took cores from its BLAS threads (a Keras step of 1.5 ms ran 1.08x
 * slower).  It looks again after half the consumer's pace, or half the time since its last take when that is
 * longer (a consumer that paused for an evaluation is not looked at at its old pace), within
 * [ROOM_POLL_MIN_S, ROOM_POLL_MAX_S]; the consumer still wakes it when it is about to run dry
 * (tq_ring_release_get), so a look that comes late costs a wait, never a stall. */
#define ROOM_POLL_PACE_S 400e-6
#define ROOM_POLL_MIN_S 50e-6
#define ROOM_POLL_MAX_S 2e-3

int tq_ring_polls_for_room(const tq_ring *ring, int room)
{
    return room > 1 && !ring->backend->on_device && ring->take_interval > 0 && ring->take_interval < ROOM_POLL_PACE_S;
}

double tq_ring_room_poll_s(const tq_ring *ring, double now)
{
    double idle = now - ring->last_take;
    double poll = (ring->take_interval > idle ? ring->take_interval : idle) / 2;
    return poll < ROOM_POLL_MIN_S ? ROOM_POLL_MIN_S : poll > ROOM_POLL_MAX_S ? ROOM_POLL_MAX_S : poll;
}
