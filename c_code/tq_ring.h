/*
 * tq_ring: the queue engine.  A bounded ring of slots, each holding one element
 * (one batch of every component), shared by any number of producer and consumer
 * threads.  Plain C and pthreads: no Python, no Theano, so any front end can
 * drive it.
 *
 * An element's life:     FREE -> WRITING -> READY -> READING -> FREE
 *   tq_ring_reserve_put   takes the slot at the tail (in FIFO order) once FREE
 *   tq_ring_commit_put    publishes it (the backend may start a device copy)
 *   tq_ring_reserve_get   takes the slot at the head once READY
 *   tq_ring_release_get   hands it back to the producers
 * A reserved write that is given up (tq_ring_abort_put) or cancelled by
 * tq_ring_close(cancel=1) becomes DROPPED and is skipped by consumers.
 *
 * Slots are reserved in ring order, so elements come out in the order their
 * producers reserved them, and each exactly once.
 */
#ifndef TQ_RING_H
#define TQ_RING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TQ_MAX_COMPONENTS 64
#define TQ_MAX_CAPACITY 4096
#define TQ_ERRLEN 256

typedef enum {
    TQ_OK = 0,
    TQ_TIMEOUT,   /* nothing happened before the deadline */
    TQ_CLOSED,    /* closed (and, for consumers, drained) */
    TQ_FAILED,    /* a producer reported a failure (and the queue is drained) */
    TQ_EINVAL,    /* a call that makes no sense in the current state */
    TQ_ENOMEM,    /* an allocation failed */
    TQ_EBACKEND   /* the memory backend failed; tq_ring_error() says why */
} tq_status;

typedef enum { TQ_STATE_OPEN = 0, TQ_STATE_CLOSED, TQ_STATE_FAILED } tq_state;

/* One component of an element, as the engine sees it: rows of bytes.  A
 * component of shape (n, a, b) has max_rows = n and row_bytes = a*b*itemsize;
 * a scalar has max_rows = 1. */
typedef struct {
    int64_t max_rows;
    size_t row_bytes;
} tq_component;

/* A byte range of a slot that holds data, handed to backends to publish.
 * src is where the bytes are: NULL for the slot's own staging at offset, or
 * host memory the backend can copy from directly (pinned user memory). */
typedef struct {
    size_t offset;
    size_t bytes;
    const void *src;
} tq_extent;

typedef struct {
    uint64_t enqueued, dequeued, dropped;
    uint64_t bytes_in, bytes_out;
    double producer_wait_s, consumer_wait_s;
    int size;      /* elements READY now */
    int capacity;
    tq_state state;
} tq_stats;

typedef struct tq_backend tq_backend;
typedef struct tq_ring tq_ring;

/* Creates a ring of `capacity` slots laid out for `components`; takes ownership
 * of `backend` (destroyed with the ring, or here on failure).  On failure
 * returns NULL with a message in err. */
tq_ring *tq_ring_create(const tq_component *components, int n_components, int capacity,
                        tq_backend *backend, char *err, size_t errlen);
/* Frees everything.  The caller guarantees no thread is inside another call. */
void tq_ring_destroy(tq_ring *ring);

/* Producer side.  timeout_s < 0 waits without limit.
 *
 * A host producer reserves, calls tq_ring_begin_host_write (the slot's
 * staging may still be read by a copy in flight), writes through
 * tq_ring_write_ptr and commits; `sources` (NULL, or one entry per component,
 * NULL entries meaning "in the staging") lets components come straight from
 * other host memory.  A device producer writes the slot's device memory itself,
 * orders it with the backend, and commits with tq_ring_commit_put_published. */
tq_status tq_ring_reserve_put(tq_ring *ring, double timeout_s, int *slot);
tq_status tq_ring_begin_host_write(tq_ring *ring, int slot);
void *tq_ring_write_ptr(tq_ring *ring, int slot, int component);
tq_status tq_ring_commit_put(tq_ring *ring, int slot, const int64_t *rows, const void *const *sources);
tq_status tq_ring_commit_put_published(tq_ring *ring, int slot, const int64_t *rows);
void tq_ring_abort_put(tq_ring *ring, int slot);

/* Consumer side. */
tq_status tq_ring_reserve_get(tq_ring *ring, double timeout_s, int *slot);
int64_t tq_ring_rows(const tq_ring *ring, int slot, int component);
/* Where a consumer reads: host memory (host backend) or a device address (cuda). */
const void *tq_ring_read_ptr(tq_ring *ring, int slot, int component);
/* Copies a component of a reserved element into host memory, any backend. */
tq_status tq_ring_read_to_host(tq_ring *ring, int slot, int component, void *dst);
void tq_ring_release_get(tq_ring *ring, int slot);

/* Closing: producers get TQ_CLOSED at once; consumers drain what is READY (or,
 * with cancel, nothing) and then get TQ_CLOSED.  Writes in flight complete
 * (or, with cancel, are dropped). */
void tq_ring_close(tq_ring *ring, int cancel);
/* Like close, but consumers get TQ_FAILED once drained; message is kept. */
void tq_ring_fail(tq_ring *ring, const char *message);
/* Opens a closed or failed ring again; TQ_EINVAL while elements are left. */
tq_status tq_ring_reopen(tq_ring *ring);

tq_state tq_ring_state(tq_ring *ring);
int tq_ring_size(tq_ring *ring);
int tq_ring_capacity(const tq_ring *ring);
int tq_ring_n_components(const tq_ring *ring);
const tq_component *tq_ring_component(const tq_ring *ring, int component);
size_t tq_ring_component_offset(const tq_ring *ring, int component);
size_t tq_ring_slot_bytes(const tq_ring *ring);
void tq_ring_stats(tq_ring *ring, tq_stats *out);
/* The failure message (TQ_FAILED) or the backend's last error (TQ_EBACKEND). */
const char *tq_ring_error(tq_ring *ring);
tq_backend *tq_ring_backend(tq_ring *ring);

/* Shared staging, for producers in other processes.  Every slot's staging
 * lies in one block that they map through its descriptor (fd -1: none, fork()
 * only).  A slot's staging starts at tq_ring_staging_offset bytes into it
 * (its component c at tq_ring_component_offset(c) further). */
void tq_ring_staging(tq_ring *ring, int *fd, void **base, size_t *bytes);
size_t tq_ring_staging_offset(tq_ring *ring, int slot);
/* Exchanges the staging of two slots the caller holds reserved (both
 * WRITING, begin_host_write done), so that what was written for b is
 * committed through a: a producer filling several slots at once can publish
 * whichever is done first in the earliest slot.  TQ_EINVAL unless both are
 * WRITING. */
tq_status tq_ring_swap_staging(tq_ring *ring, int a, int b);

const char *tq_status_name(tq_status status);

#ifdef __cplusplus
}
#endif
#endif /* TQ_RING_H */
