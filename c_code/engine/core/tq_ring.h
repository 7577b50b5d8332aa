/*
 * tq_ring: the queue engine.  A bounded ring of slots, each holding one element
 * (one batch of every component), shared by any number of producer and consumer
 * threads.  Plain C and pthreads: no Python, no Theano, so any front end can
 * drive it.
 *
 * An element's life:     FREE -> WRITING -> READY -> READING -> FREE
 *   tq_ring_reserve_put   takes the slot at the tail (in FIFO order) once FREE
 *   tq_ring_put_from_*    fills and publishes it (or: write in place, commit)
 *   tq_ring_reserve_get   takes the slot at the head once READY
 *   tq_ring_release_get   hands it back to the producers
 * A reserved write that is given up (tq_ring_abort_put), that the backend
 * fails to publish, or that tq_ring_close(cancel=1) cancels becomes DROPPED
 * and is skipped by consumers.
 *
 * Slots are reserved in ring order, so elements come out in the order their
 * producers reserved them, and each exactly once.
 *
 * Calls that can fail return a tq_code and fill `err` (which may be NULL).
 */
#ifndef TQ_RING_H
#define TQ_RING_H

#include "tq_backend.h"
#include "tq_gather.h"
#include "tq_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The slot layout: each component starts on this boundary within a slot, as
 * device copies want aligned sources and destinations (256 suits both DMA
 * engines and AVX stores); a component takes rows x row_bytes rounded up to
 * it, an element of nothing one boundary.  theano_queue._engine exports it
 * (SLOT_ALIGN, slot_bytes) so that Python sizes rings as the engine does. */
#define TQ_ALIGN 256

typedef enum { TQ_STATE_OPEN = 0, TQ_STATE_CLOSED, TQ_STATE_FAILED } tq_state;

/* One component of an element, as the engine sees it: rows of bytes.  A
 * component of shape (n, a, b) has max_rows = n and row_bytes = a*b*itemsize;
 * a scalar has max_rows = 1. */
typedef struct {
    int64_t max_rows;
    size_t row_bytes;
} tq_component;

typedef struct {
    uint64_t enqueued, dequeued, dropped;
    uint64_t lent; /* elements dequeued by lending their memory (tq_ring_lend) */
    uint64_t bytes_in, bytes_out;
    double producer_wait_s, consumer_wait_s;
    /* The integral of size over time (element-seconds) up to clock_s, the
     * monotonic time of the snapshot: the mean fill between two snapshots is
     * the difference of fill_integral over the difference of clock_s. */
    double fill_integral, clock_s;
    int size; /* elements READY now */
    int capacity;
    tq_state state;
    const char *backend; /* the backend's name */
} tq_stats;

typedef struct tq_ring tq_ring;

/* The bytes of one slot holding these components (TQ_ALIGN above), as
 * tq_ring_create lays it out; SIZE_MAX when they overflow a slot. */
size_t tq_ring_slot_bytes(const tq_component *components, int n_components);

/* Creates a ring of `capacity` slots laid out for `components`; takes ownership
 * of `backend` (destroyed with the ring, or here on failure). */
tq_ring *tq_ring_create(const tq_component *components, int n_components, int capacity, tq_backend *backend,
                        tq_error *err);
/* Frees everything.  The caller guarantees no thread is inside another call. */
void tq_ring_destroy(tq_ring *ring);

/* Waits.  `deadline` is a point on tq_now()'s clock: < 0 waits without limit,
 * one already passed does not wait.  `stop` is NULL or a flag: once it is
 * nonzero the call ends with TQ_STOPPED, at once if it was set before
 * tq_ring_wake was called. */

/* Producer side.  A host producer reserves a slot and either hands its arrays
 * to tq_ring_put_from_host (one call: wait for the staging, copy, publish), or
 * writes in place: tq_ring_begin_host_write, tq_ring_write_ptr, commit.  A
 * device producer reserves and calls tq_ring_put_from_device.  Every put
 * that fails drops its slot. */
tq_code tq_ring_reserve_put(tq_ring *ring, double deadline, const int *stop, int *slot, tq_error *err);
/* The same, for a producer that writes several elements in a row (a Feeder):
 * once it found the ring full, it sleeps until `room` slots are free, so that
 * a consumer's every get does not wake it for one element (each wake-up takes
 * a core from the consumer's step on a small machine).  room 1: as
 * tq_ring_reserve_put. */
tq_code tq_ring_reserve_put_room(tq_ring *ring, int room, double deadline, const int *stop, int *slot, tq_error *err);
/* srcs: host memory of each component, rows[c] rows each. */
tq_code tq_ring_put_from_host(tq_ring *ring, int slot, const void *const *srcs, const int64_t *rows, tq_error *err);
/* The same, finished later: the ring's putter thread (started on first use)
 * fills the reserved slot from srcs and publishes it, in the order of these
 * calls, while the caller goes on.  srcs must stay as they are until
 * tq_ring_later_done passes *ticket.  A put that fails there drops its slot
 * and is reported by tq_ring_later_wait.  Fails here (the slot given up) only
 * when the thread cannot start. */
tq_code tq_ring_put_later(tq_ring *ring, int slot, const void *const *srcs, const int64_t *rows, uint64_t *ticket,
                          tq_error *err);
/* How many puts handed to tq_ring_put_later are done (published or failed):
 * every ticket below it. */
uint64_t tq_ring_later_done(tq_ring *ring);
/* The first failure of those puts not yet reported (and now reported), else TQ_OK. */
tq_code tq_ring_later_failure(tq_ring *ring, tq_error *err);
/* Waits until every put handed over so far is done; then the first of their
 * failures not yet reported, else TQ_OK (TQ_TIMEOUT when the deadline
 * passed first). */
tq_code tq_ring_later_wait(tq_ring *ring, double deadline, tq_error *err);
tq_code tq_ring_begin_host_write(tq_ring *ring, int slot, tq_error *err);
void *tq_ring_write_ptr(tq_ring *ring, int slot, int component);
tq_code tq_ring_commit_put(tq_ring *ring, int slot, const int64_t *rows, tq_error *err);
/* srcs: device addresses of each component; stream: a CUstream. */
tq_code tq_ring_put_from_device(tq_ring *ring, int slot, void *stream, const uint64_t *srcs, const int64_t *rows,
                                tq_error *err);
/* Device backends: where device address ptr lives (checked by a face before
 * it reserves a slot), and the ring's own GPU in *device. */
tq_code tq_ring_probe_device(tq_ring *ring, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err);
/* A face's device put holds the ring's device entered on its thread from its
 * first probe to the end of tq_ring_put_device_arrays (the driver's context
 * pushed once a put, not once a call); *held says whether to release it. */
tq_code tq_ring_hold_device(tq_ring *ring, int *held, tq_error *err);
void tq_ring_release_device(tq_ring *ring);
/* A host thread's put of arrays in device memory (tq_device_src, one per
 * component, rows[c] rows each; probed): copied on the backend's copy stream
 * after their producers' streams, which then wait for the copy (or the call
 * waits, for a source without a stream).  A failure drops the slot. */
tq_code tq_ring_put_device_arrays(tq_ring *ring, int slot, const tq_device_src *srcs, const int64_t *rows,
                                  tq_error *err);
/* The CUstream tq_ring_put_device_arrays copies on (NULL for a host ring). */
void *tq_ring_copy_stream(tq_ring *ring);
void tq_ring_abort_put(tq_ring *ring, int slot);
/* 1 when slot is reserved by a producer and not yet committed or given up. */
int tq_ring_is_reserved_for_writing(tq_ring *ring, int slot);
/* Puts the rows idx[0..rows) of each component's source array as one element
 * (an array dataset's minibatch): gathers them into the slot, publishes it.
 * srcs[c]: component c's rows (component_row_bytes each); the caller checked
 * every index.  Fails like tq_ring_put_from_host. */
tq_code tq_ring_put_rows(tq_ring *ring, int slot, const tq_rows *srcs, const int64_t *idx, int64_t rows, tq_error *err);

/* Consumer side. */
tq_code tq_ring_reserve_get(tq_ring *ring, double deadline, const int *stop, int *slot, tq_error *err);
int64_t tq_ring_rows(const tq_ring *ring, int slot, int component);
/* Bytes of a component that the element in slot holds. */
size_t tq_ring_bytes(const tq_ring *ring, int slot, int component);
/* Copies a component of a reserved element into host memory, any backend. */
tq_code tq_ring_read_to_host(tq_ring *ring, int slot, int component, void *dst, tq_error *err);
/* Device backends: copies every component to device addresses dsts on a
 * consumer's stream (a CUstream), without a host wait. */
tq_code tq_ring_take_on_device(tq_ring *ring, int slot, void *stream, const uint64_t *dsts, tq_error *err);
void tq_ring_release_get(tq_ring *ring, int slot);
/* Lends a reserved element's memory to the consumer instead of copying it
 * (see tq_backend.h, lend): component c lies at (char *)*data +
 * tq_ring_component_offset(c) (a device address on a device ring, whose
 * consumer's `stream` waits for it there) until tq_ring_give_back(lease).
 * Release the slot as usual afterwards.  TQ_TIMEOUT when nothing is left to
 * lend and TQ_ESTATE for a backend that cannot: copy instead. */
tq_code tq_ring_lend(tq_ring *ring, int slot, void *stream, int *lease, void **data, tq_error *err);
void tq_ring_give_back(tq_ring *ring, int lease);

/* Closing: producers get TQ_CLOSED at once; consumers drain what is READY (or,
 * with cancel, nothing) and then get TQ_CLOSED.  Writes in flight complete
 * (or, with cancel, are dropped). */
void tq_ring_close(tq_ring *ring, int cancel);
/* Like close, but consumers get TQ_FAILED with message once drained. */
void tq_ring_fail(tq_ring *ring, const char *message);
/* Opens a closed or failed ring again; TQ_ESTATE while elements are left. */
tq_code tq_ring_reopen(tq_ring *ring, tq_error *err);
/* Opens a closed ring again, keeping what it holds, if no consumer has been
 * told it is closed and drained since it was closed (nor was it cancelled or
 * failed): the run goes on as if never closed.  1 when it did, else 0. */
int tq_ring_resume(tq_ring *ring);
/* Wakes every waiter to look at its stop flag again. */
void tq_ring_wake(tq_ring *ring);

/* Device backends: page-locks host memory so that puts from it skip the
 * staging; unregistering waits for copies that may still read it. */
tq_code tq_ring_register_host(tq_ring *ring, void *ptr, size_t bytes, tq_error *err);
tq_code tq_ring_unregister_host(tq_ring *ring, void *ptr, tq_error *err);

/* Device rings: the device copies the rows of tq_ring_put_rows itself
 * where they lie in the host ranges [ptrs[c], ptrs[c] + bytes[c]) (an array
 * dataset's arrays, one per component, in component order; read_only[c] for
 * memory that cannot be written), which are page-locked and mapped for it,
 * by `mechanism` (TQ_GATHER_AUTO: the backend chooses per component, by row
 * size); *used says which (TQ_GATHER_HOST, and TQ_OK, when it chose none).
 * On failure (a driver without cuMemcpyBatchAsync, memory that cannot be
 * page-locked) nothing is attached, *used is TQ_GATHER_HOST and err says
 * why: put_rows gathers on the host as before.  TQ_ESTATE for a host ring.
 * tq_ring_gather_on_host waits for the gathers in flight and undoes it. */
tq_code tq_ring_gather_on_device(tq_ring *ring, const void *const *ptrs, const size_t *bytes, const int *read_only,
                                 int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used, tq_error *err);
tq_code tq_ring_gather_on_host(tq_ring *ring, tq_error *err);

/* Shared staging, for producers in other processes.  Every slot's staging
 * lies in one block that they map through its descriptor (see tq_shm.h); a
 * slot's staging starts tq_ring_staging_offset bytes into it, and its
 * component c tq_ring_component_offset(c) further.  TQ_ESTATE for a backend
 * without shared staging. */
tq_code tq_ring_staging(tq_ring *ring, tq_shm *out, tq_error *err);
tq_code tq_ring_staging_offset(tq_ring *ring, int slot, size_t *offset, tq_error *err);
size_t tq_ring_component_offset(const tq_ring *ring, int component);
/* Exchanges the staging of two slots the caller holds reserved (both
 * WRITING, tq_ring_begin_host_write done), so that what was written for b is
 * committed through a: a producer filling several slots at once publishes
 * whichever is done first in the earliest slot.  TQ_EINVAL unless both are
 * WRITING; TQ_ESTATE for a backend that cannot.  A slot's staging moves only
 * here, so only its holder sees it move. */
tq_code tq_ring_swap_staging(tq_ring *ring, int a, int b, tq_error *err);

tq_state tq_ring_state(tq_ring *ring);
int tq_ring_size(tq_ring *ring);
int tq_ring_capacity(const tq_ring *ring);
/* The usable depth: the most elements written or ready at once (1 to the
 * capacity, which it is at creation).  Lowering it takes no element back:
 * producers wait until the consumers bring the ring under it.  Returns the
 * depth set (clamped).  stats.capacity reports the depth. */
int tq_ring_depth(tq_ring *ring);
int tq_ring_set_depth(tq_ring *ring, int depth);
int tq_ring_on_device(const tq_ring *ring);
void tq_ring_stats(tq_ring *ring, tq_stats *out);

/* Timeline (tq_trace.h): record the next n elements reserved (1 to
 * TQ_MAX_TRACE).  Stopping returns how many elements were seen and copies up
 * to max of them into out. */
tq_code tq_ring_trace_start(tq_ring *ring, int64_t n, tq_error *err);
int tq_ring_trace_stop(tq_ring *ring, tq_trace_element *out, int max);

#ifdef __cplusplus
}
#endif
#endif /* TQ_RING_H */
