/*
 * tq_backend: where a ring's slots live.  The ring owns the bookkeeping; a
 * backend owns the memory and whatever must happen when a slot changes hands.
 * The ring reaches a backend only through this table, and so does everything
 * above the ring.
 *
 * host (tq_host.c)   one block per slot, carved from one shared block (tq_shm.h);
 *                    producers write it, consumers read it or borrow it
 *                    (lend: the slot takes a spare block in its place).
 * cuda (tq_cuda.c)   staging per slot that producers write, carved from one
 *                    shared block page-locked with cuMemHostRegister, device
 *                    memory per slot that consumers read, an asynchronous copy
 *                    between the two on a copy stream, and events that order it.
 *
 * Both keep every slot's staging in one shared block, so that producers in
 * other processes can map it and write slots in place.
 *
 * No entry is called with the ring's lock held.  Entries marked optional may be NULL: the ring then refuses the call
 * with TQ_ESTATE.
 */
#ifndef TQ_BACKEND_H
#define TQ_BACKEND_H

#include "tq_base.h"
#include "tq_gather.h"
#include "tq_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tq_backend tq_backend;

/* Axes a strided device source may have once its contiguous axes are merged. */
#define TQ_DEVICE_MAX_DIMS 8

/* Where a device address lives, as the driver says (tq_backend.probe_device). */
typedef enum { TQ_MEM_UNKNOWN = 0, TQ_MEM_HOST, TQ_MEM_DEVICE, TQ_MEM_MANAGED } tq_mem_kind;

typedef struct {
    tq_mem_kind kind;
    int device;       /* the GPU's ordinal (device and managed memory) */
    void *context;    /* the CUcontext it was allocated in (NULL: none the driver names) */
    int same_context; /* 1 when that is the ring's context (or none is named) */
} tq_device_ptr;

/* One component of an element a producer holds in device memory: element
 * (0, ..., 0) at ptr, shape and byte strides after merging (ndim 0 to
 * TQ_DEVICE_MAX_DIMS, any sign), and how its producer orders its writes:
 *   stream != NULL: they are queued on that CUstream (in `context`; 0x1 and
 *       0x2 are the legacy and per-thread default streams): the copy waits
 *       for it on the GPU, and the stream then waits for the copy to have
 *       read the array (no host wait);
 *   stream == NULL: they are done; the put waits on the host until the copy
 *       has read the array, so that the caller may reuse it at once. */
typedef struct {
    uint64_t ptr;
    int ndim;
    int64_t shape[TQ_DEVICE_MAX_DIMS];
    int64_t strides[TQ_DEVICE_MAX_DIMS];
    size_t itemsize;
    void *stream;
    tq_device_ptr where; /* from probe_device */
} tq_device_src;

struct tq_backend {
    const char *name;
    /* 1 when consumers read device memory (through take), 0 for host memory. */
    int on_device;

    /* Allocates `capacity` slots of `slot_bytes`. */
    tq_code (*alloc_slots)(tq_backend *self, int capacity, size_t slot_bytes, tq_error *err);
    /* Host memory a producer writes slot `slot` into (its staging). */
    void *(*write_ptr)(tq_backend *self, int slot);
    /* After a producer reserved `slot`, before it writes: waits until the
     * slot's staging is no longer read by a copy in flight. */
    tq_code (*before_write)(tq_backend *self, int slot, tq_error *err);
    /* Optional.  1 when [src, src + bytes) is host memory that publish can
     * read as it is (registered memory): a put then skips the staging. */
    int (*reads_directly)(tq_backend *self, const void *src, size_t bytes);
    /* Makes the extents of a written slot visible to readers (cuda: starts
     * the host-to-device copy).  `ahead` counts the elements ready before
     * this one: a consumer takes one of them first, so a device backend may
     * leave this slot's copy to that consumer's take (or read_to_host),
     * which then starts every copy left to it before its own.  A producer
     * then makes no driver call while a training step makes its own (the
     * driver serialises the two threads' calls: doc/design.rst, "Small
     * steps"). */
    tq_code (*publish)(tq_backend *self, int slot, const tq_extent *extents, int n_extents, int ahead, tq_error *err);
    /* Copies extent of a READING slot into host memory at dst (cuda: waits
     * for the slot's data, then copies device-to-host). */
    tq_code (*read_to_host)(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err);
    /* Optional.  Page-locks user memory so that reads_directly accepts it;
     * unregister waits for the copies that may still read it. */
    tq_code (*register_host)(tq_backend *self, void *ptr, size_t bytes, tq_error *err);
    tq_code (*unregister_host)(tq_backend *self, void *ptr, tq_error *err);
    /* Optional.  A consumer on a device stream (a CUstream): makes `stream`
     * wait for the slot's data, copies extents[i] to device address dsts[i]
     * on it, and records that the slot was read.  No host wait. */
    tq_code (*take)(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n, const uint64_t *dsts,
                    tq_error *err);
    /* Optional.  A producer on a device stream: makes `stream` wait until the
     * slot's last reader is done, copies device addresses srcs[i] into
     * extents[i] of the slot on it, and records that the slot is filled. */
    tq_code (*put_from_device)(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                               const uint64_t *srcs, tq_error *err);
    /* Optional.  Where device address ptr lives; the ring's own GPU in *device. */
    tq_code (*probe_device)(tq_backend *self, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err);
    /* Optional.  Keeps the device entered on the calling thread, across a
     * whole device put (probes, the wait for a slot, put_device_arrays),
     * until release_device: they then enter it no more.  *held is 0 when the
     * thread already holds a device (nothing to release). */
    tq_code (*hold_device)(tq_backend *self, int *held, tq_error *err);
    void (*release_device)(tq_backend *self);
    /* Optional.  A host thread's put of device arrays (see tq_device_src):
     * copies srcs[i] into extents[i] of the slot on the backend's copy
     * stream, ordered after each producer's stream and after the slot's last
     * reader, records that the slot is filled, and orders the producers'
     * streams (or the host) after the copy. */
    tq_code (*put_device_arrays)(tq_backend *self, int slot, const tq_extent *extents, int n, const tq_device_src *srcs,
                                 tq_error *err);
    /* Optional.  The CUstream put_device_arrays copies on, for producers that
     * order themselves before it (DLPack's __dlpack__(stream=...)). */
    void *(*copy_stream)(tq_backend *self);
    /* Optional.  The shared block that holds every slot's staging, for
     * producers in other processes: write_ptr(slot) lies inside it. */
    const tq_shm *(*shared_staging)(tq_backend *self);
    /* Optional.  Exchanges the staging of two slots that one producer holds
     * reserved, both past before_write: what was written for one is then
     * published by the other. */
    void (*swap_staging)(tq_backend *self, int a, int b);
    /* Frees everything, whatever state alloc_slots left it in. */
    void (*destroy)(tq_backend *self);
    /* Optional (NULL where publish is synchronous; a trace then records no
     * FILLED, and nothing is refused): calls fn(arg) from another thread once
     * the data last published for `slot` has arrived.  Only traces use it
     * (tq_trace.h, FILLED). */
    tq_code (*on_arrival)(tq_backend *self, int slot, void (*fn)(void *), void *arg, tq_error *err);
    /* Optional.  Lends the data of a READING slot to its consumer: the slot
     * takes a free spare block as its own, and the block that holds the
     * element is the consumer's at *data (host memory, or a device address
     * for a device backend) until give_back(*lease).  TQ_TIMEOUT when every
     * spare is lent: the consumer copies instead.  The slot can then be
     * released at once: producers never wait for what a consumer holds.
     * A device backend needs the consumer's stream (a CUstream; NULL is
     * refused with TQ_ESTATE): it waits for the slot's data on the GPU, and
     * give_back orders the block's next writer after what was queued on it
     * by then.  A host backend ignores it. */
    tq_code (*lend)(tq_backend *self, int slot, void *stream, int *lease, void **data, tq_error *err);
    void (*give_back)(tq_backend *self, int lease);

    /* Optional (device backends that gather an array dataset's rows
     * themselves, doc/design.rst "The GPU gather").  attach_rows makes the
     * host ranges [ptrs[c], ptrs[c] + bytes[c]) of component c (rows of
     * row_bytes[c]; read_only[c] for memory that cannot be written) sources
     * the device reads rows from (page-locked and mapped) by `mechanism`
     * (TQ_GATHER_AUTO: the backend chooses per component, and may choose
     * none); *used says which (TQ_GATHER_HOST when the device copies no
     * component).  On failure nothing is left attached and err says why: the
     * rows are then gathered on the host.  detach_rows waits for the gathers
     * in flight and undoes every attach. */
    tq_code (*attach_rows)(tq_backend *self, const void *const *ptrs, const size_t *bytes, const size_t *row_bytes,
                           const int *read_only, int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used,
                           tq_error *err);
    tq_code (*detach_rows)(tq_backend *self, tq_error *err);
    /* Optional.  1 when the device copies component c's rows [lo, hi). */
    int (*gathers_rows)(tq_backend *self, int component, const char *lo, const char *hi);
    /* Optional.  publish for an element of n components, each the rows
     * idx[0..rows) of parts[c].src: those gathers_rows names are copied by
     * the device into the slot on the copy stream, the others on the host
     * into the staging first.  Ordered as publish's copies; called after
     * before_write. */
    tq_code (*publish_rows)(tq_backend *self, int slot, const tq_row_part *parts, int n, const int64_t *idx,
                            int64_t rows, tq_error *err);
};

/* Spare blocks of a host ring, for lend: two cover a consumer that holds the
 * previous element while it takes the next (`out = f()` in a loop). */
#define TQ_HOST_SPARES 2

/* The host backend; NULL (err set) when out of memory. */
tq_backend *tq_host_backend_create(tq_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TQ_BACKEND_H */
