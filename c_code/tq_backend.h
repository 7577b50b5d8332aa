/*
 * tq_backend: where a ring's slots live.  The ring owns the bookkeeping; a
 * backend owns the memory and whatever must happen when a slot changes hands.
 *
 * host (tq_host.c)   one block per slot, carved from one shared block (tq_shm.h);
 *                    producers write it, consumers read it.
 * cuda (tq_cuda.c)   staging per slot that producers write, carved from one
 *                    shared block page-locked with cuMemHostRegister, device
 *                    memory per slot that consumers read, an asynchronous copy
 *                    between the two on a copy stream, and events that order it.
 *
 * Both keep every slot's staging in one shared block (`staging`), so that
 * producers in other processes can map it and write slots in place.
 */
#ifndef TQ_BACKEND_H
#define TQ_BACKEND_H

#include "tq_ring.h"
#include "tq_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tq_backend {
    const char *name;
    /* Allocates `capacity` slots of `slot_bytes`.  0 on success. */
    int (*alloc_slots)(tq_backend *self, int capacity, size_t slot_bytes, char *err, size_t errlen);
    /* Host memory a producer writes slot `slot` into. */
    void *(*write_ptr)(tq_backend *self, int slot);
    /* Memory a consumer reads (host memory for host, a device address for cuda). */
    void *(*read_ptr)(tq_backend *self, int slot);
    /* Called after a producer reserved `slot`, before it writes: waits until
     * the slot's staging memory is no longer in use.  Called without the ring's
     * lock.  0 on success. */
    int (*before_write)(tq_backend *self, int slot, char *err, size_t errlen);
    /* Called when a write is committed: makes the extents visible to readers
     * (cuda: starts the host-to-device copy).  Without the ring's lock. */
    int (*publish)(tq_backend *self, int slot, const tq_extent *extents, int n_extents,
                   char *err, size_t errlen);
    /* Copies bytes at offset of a READING slot into host memory at dst
     * (cuda: waits for the slot's data, then a device-to-host copy). */
    int (*read_to_host)(tq_backend *self, int slot, size_t offset, void *dst, size_t bytes,
                        char *err, size_t errlen);
    void (*destroy)(tq_backend *self);
    /* Exchanges the staging of two slots that are both WRITING (reserved by
     * one producer, before_write done): what was written for one is then
     * published by the other.  Called under the ring's lock. */
    void (*swap_staging)(tq_backend *self, int a, int b);
    /* The shared block that holds every slot's staging, set by alloc_slots. */
    tq_shm staging;
};

/* snprintf into err (when err is not NULL): how backends and the ring report. */
void tq_set_error(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The host backend.  Never fails to create. */
tq_backend *tq_host_backend_create(void);

#ifdef __cplusplus
}
#endif
#endif /* TQ_BACKEND_H */
