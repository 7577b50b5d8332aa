/*
 * tq_cuda_backend.h: the CUDA backend's state and the rooms it is built of,
 * private to its files.  Each file calls only the files listed below it:
 *
 *   tq_cuda.c         the backend proper: slots, publish, take, the table,
 *                     destruction
 *   tq_cuda_device.c  device arrays put from host code, the strided kernel
 *   tq_cuda_rows.c    the device gather of array datasets' rows
 *   tq_cuda_lend.c    a slot's device block lent to its consumer (lend)
 *   tq_cuda_held.c    array datasets held in device memory, gathered there
 *   tq_cuda_kernels.c the kernels' modules (PTX), loaded at first use
 *   tq_cuda_pin.c     page-locked host memory, register_host
 *   tq_cuda_upload.c  host-to-device uploads, now or left to the consumer
 *   tq_cuda_driver.c  the driver binding (tq_cuda_driver.h)
 */
#ifndef TQ_CUDA_BACKEND_H
#define TQ_CUDA_BACKEND_H

#include <pthread.h>

#include "tq_cuda.h"
#include "tq_cuda_driver.h"

/* Host memory this process page-locked and mapped (register_host, or a
 * device gather's source), shared by every ring: see pin_host. */
typedef struct host_pin host_pin;

/* Memory register_host page-locked for this ring, and the use it holds. */
typedef struct {
    void *ptr;
    size_t bytes;
    host_pin *pin;
} host_range;

/* One range a backend gathers rows from: page-locked and mapped (pin, the
 * use of its page-lock), or copied into device memory (held, held_bytes
 * allocated).  The device reads host address p at p + to_device. */
typedef struct {
    char *start, *end;
    host_pin *pin;
    CUdeviceptr held;
    size_t held_bytes;
    long long to_device;
} attachment;

/* The kernels of the backend, one module each (tq_cuda_kernels.c). */
typedef enum { TQ_KERNEL_STRIDED_COPY, TQ_KERNEL_GATHER_ROWS, TQ_KERNELS } tq_kernel;

/* Work a producer left to the consumer of its slot, and the trace's callback
 * for its arrival: a host-to-device copy (publish with elements ahead), or
 * the gather of a small held batch (publish_rows of a held dataset: its row
 * numbers already in the slot's index_host), which the consumer queues on
 * its own stream straight into the memory it reads (tq_cuda_held.c). */
typedef struct {
    int n; /* extents to copy (0 for a gather); -1: nothing left here */
    tq_extent extents[TQ_MAX_COMPONENTS];
    void (*arrived)(void *);
    void *arrived_arg;
    int64_t gather_rows; /* a held batch's rows; -1: an upload */
    int n_parts;
    tq_row_part parts[TQ_MAX_COMPONENTS];
    attachment held[TQ_MAX_COMPONENTS]; /* where each part is held (all are) */
} deferred_upload;

/* What the driver said of one allocation a device put read from: its range,
 * the buffer ID the driver gives no other allocation, and where it lives. */
typedef struct {
    CUdeviceptr start;
    size_t bytes;
    unsigned long long buffer_id;
    tq_device_ptr where;
} known_allocation;

/* Spare device blocks of a ring, for lend: two cover a graph that holds the
 * previous batch while it takes the next, as the host backend's spares do. */
#define TQ_CUDA_SPARES 2

typedef enum { SPARE_UNMADE = 0, SPARE_MADE, SPARE_BROKEN } spare_state;

/* A spare device block and the *consumed* event that goes with it: swapped
 * with a slot's at each lend (tq_cuda_lend.c). */
typedef struct {
    CUdeviceptr block;
    CUevent consumed;
    int state;         /* spare_state (atomic: read by claims without the claim) */
    int lent;          /* 1 while claimed (atomic) */
    CUstream borrower; /* the consumer's stream while lent */
    CUstream freed_on; /* the stream `consumed` was last recorded on, when known */
    int unread;        /* 1 from its making until its first lend: no reader to wait for */
} cuda_spare;

#define TQ_KNOWN_ALLOCATIONS 8 /* allocations whose facts a ring keeps */
#define TQ_SPARE_EVENTS 8      /* events a ring keeps for ordering after producers */

typedef struct {
    tq_backend base;
    CUcontext ctx;
    CUstream copy_stream;
    int capacity;
    size_t slot_bytes;
    tq_shm staging;         /* every slot's staging, one shared block */
    int staging_registered; /* page-locked with cuMemHostRegister */
    CUdeviceptr *device;
    CUevent *filled, *consumed;
    /* Work left to consumers, per slot; n_deferred counts the uploads and
     * n_left_gathers the held batches, so that a take with none takes no lock. */
    pthread_mutex_t deferred_lock;
    deferred_upload *deferred;
    int n_deferred, n_left_gathers;
    pthread_mutex_t registered_lock;
    host_range *registered;
    int n_registered, registered_cap;
    int device_ordinal;          /* the GPU of ctx */
    pthread_mutex_t module_lock; /* loads each kernel's module once */
    CUmodule modules[TQ_KERNELS];
    CUfunction kernels[TQ_KERNELS];
    /* The device gather (attach_rows).  gather_lock orders the gathers a
     * publish_rows queues against a detach that unpins their memory. */
    pthread_mutex_t gather_lock;
    tq_gather_mechanism gather; /* TQ_GATHER_HOST while nothing is attached */
    attachment *attached;
    int n_attached;
    int on_device[TQ_MAX_COMPONENTS];     /* the components whose rows the device copies */
    CUdeviceptr *batch_dsts, *batch_srcs; /* one batch's copies, built under gather_lock */
    size_t *batch_sizes, batch_cap;
    /* A held dataset's row numbers, index_rows per slot (as many as a slot
     * holds): written on the host (page-locked), copied to the device before
     * a large batch's gather, read by a small batch's kernel where they are
     * (index_mapped: index_host's device address, 0 when the device cannot).
     * A gather on a consumer's stream reads them last (index_on_stream[slot])
     * before index_read[slot]; else before filled[slot]. */
    int64_t *index_host;
    CUdeviceptr index_device, index_mapped;
    int64_t index_rows;
    CUevent *index_read;
    int *index_on_stream;
    /* Device puts (tq_cuda_device.c), under device_lock: events of ctx kept
     * for ordering the copy after a producer's stream, and the facts of the
     * allocations last put from. */
    pthread_mutex_t device_lock;
    CUevent spare_events[TQ_SPARE_EVENTS];
    int n_spare_events;
    known_allocation known[TQ_KNOWN_ALLOCATIONS];
    int next_known;
    cuda_spare spares[TQ_CUDA_SPARES]; /* lend's spare blocks, made at first use */
} cuda_backend;

/* The largest element whose upload a producer leaves to its consumer, and
 * the default bound of a held batch whose gather it leaves so.  The driver
 * calls it saves cost tens of microseconds a step, which matters for small
 * elements (short steps); a larger element's copy takes longer than that on
 * the bus, and its pipeline keeps the producer's own, earliest issue
 * (doc/design.rst, "Small steps"). */
#define TQ_CUDA_LEFT_TO_CONSUMER_MAX ((size_t)2 << 20)

/* Every driver call runs with the ring's context current, in any thread. */
static inline tq_code cuda_enter(cuda_backend *b, tq_error *err) { return cuda_enter_context(b->ctx, err); }

/* ---- tq_cuda_upload.c ---- */
/* Queues the copy of a slot's extents to the device on the copy stream: after
 * the slot's last reader, recorded as filled.  The context is current. */
tq_code cuda_upload(cuda_backend *b, int slot, const tq_extent *extents, int n, tq_error *err);
/* A consumer, before it reads `first`: starts every upload left to it. */
tq_code cuda_start_deferred(cuda_backend *b, int first, tq_error *err);
/* A producer that writes `slot` anew drops the work still left there. */
void cuda_forget_deferred(cuda_backend *b, int slot);
/* Leaves a held batch's gather to the slot's consumer (its row numbers
 * already staged). */
void cuda_leave_gather(cuda_backend *b, int slot, const deferred_upload *gather);
/* Takes the held batch's gather left for `slot` out of the table; 0 when
 * none was.  Its taker holds gather_lock, and says cuda_left_gather_queued
 * once the gather and the slot's event after it are queued, or it failed. */
int cuda_take_left_gather(cuda_backend *b, int slot, deferred_upload *out);
void cuda_left_gather_queued(cuda_backend *b);
/* Calls a trace's arrival callback once `stream` has done what is queued on it now. */
void cuda_arrival_after(deferred_upload *left, CUstream stream, int failed);

/* ---- tq_cuda_pin.c ---- */
/* A use of the page-locked, mapped range [start, end), locked now when no
 * locked range holds it.  A context is current. */
tq_code cuda_pin_host(char *start, char *end, int read_only, host_pin **out, tq_error *err);
/* Gives a use back; the last unlocks.  A context is current. */
void cuda_unpin_host(host_pin *pin);
/* The backend table's register_host, unregister_host, reads_directly. */
tq_code cuda_register_host(tq_backend *self, void *ptr, size_t bytes, tq_error *err);
tq_code cuda_unregister_host(tq_backend *self, void *ptr, tq_error *err);
int cuda_reads_directly(tq_backend *self, const void *ptr, size_t bytes);

/* ---- tq_cuda_rows.c: the backend table's device gather ---- */
tq_code cuda_attach_rows(tq_backend *self, const void *const *ptrs, const size_t *bytes, const size_t *row_bytes,
                         const int *read_only, int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used,
                         tq_error *err);
tq_code cuda_detach_rows(tq_backend *self, tq_error *err);
int cuda_gathers_rows(tq_backend *self, int component, const char *lo, const char *hi);
tq_code cuda_publish_rows(tq_backend *self, int slot, const tq_row_part *parts, int n, const int64_t *idx,
                          int64_t count, tq_error *err);
/* Undoes an attach once the gathers in flight are done (ctx current,
 * gather_lock held). */
tq_code cuda_detach_all(cuda_backend *b, tq_error *err);

/* ---- tq_cuda_lend.c: the backend table's lend and give_back ---- */
tq_code cuda_lend(tq_backend *self, int slot, void *stream, int *lease, void **data, tq_error *err);
void cuda_give_back(tq_backend *self, int lease);
/* Frees the spare blocks once nothing reads them (ctx current, none lent). */
void cuda_spares_release(cuda_backend *b);

/* ---- tq_cuda_held.c: array datasets held in device memory (TQ_GATHER_DEVICE) ---- */
/* Refuses with the sizes when `total` bytes of sources, and every slot's
 * row numbers, do not fit in the device's free memory (ctx current). */
tq_code cuda_held_fits(cuda_backend *b, size_t total, tq_error *err);
/* Copies [start, end) into device memory of the ring's context (ctx current). */
tq_code cuda_hold_range(cuda_backend *b, char *start, char *end, attachment *out, tq_error *err);
/* Frees what cuda_hold_range allocated (ctx current, nothing queued reads it). */
void cuda_release_held(attachment *at);
/* Makes the row numbers' buffers, as many rows a slot as it holds, for
 * sources of these rows' sizes (ctx current, gather_lock held). */
tq_code cuda_held_index_make(cuda_backend *b, const size_t *row_bytes, int n, tq_error *err);
/* Frees the row numbers' buffers (ctx current, nothing queued reads them). */
void cuda_held_index_free(cuda_backend *b);
/* Destroys the events of index_read once done (ctx current, at destroy). */
void cuda_held_events_release(cuda_backend *b);
/* Queues the gather of component rows idx[0..rows) from held memory into
 * the slot on the copy stream, for each part whose held[c] is not NULL, the
 * row numbers first (ctx current, gather_lock held). */
tq_code cuda_gather_held(cuda_backend *b, int slot, const tq_row_part *parts, const attachment *const *held, int n,
                         const int64_t *idx, int64_t rows, tq_error *err);
/* 1 when publish_rows leaves the gather of a batch of every part held to
 * its consumer: a small one (tq_cuda_set_held_in_step_max). */
int cuda_held_left_to_consumer(const tq_row_part *parts, int n, int64_t rows);
/* Leaves that gather to the slot's consumer: the row numbers staged, no
 * driver call (gather_lock held). */
tq_code cuda_leave_held(cuda_backend *b, int slot, const tq_row_part *parts, const attachment *const *held, int n,
                        const int64_t *idx, int64_t rows, tq_error *err);
/* A consumer's take (dsts, one a component) or lend (into `block`, after
 * `block_free` unless NULL) of a slot whose held batch was left to it: the
 * gather queued on its stream, *done set to 1; *done 0 when none was left
 * (ctx not current, gather_lock not held). */
tq_code cuda_gather_for_consumer(cuda_backend *b, int slot, CUstream stream, const uint64_t *dsts, CUdeviceptr block,
                                 CUevent block_free, int *done, tq_error *err);
/* A held batch left to the consumer, gathered into the slot's own device
 * memory on the copy stream and recorded as filled: for readers of the slot
 * itself (read_to_host) and a detach (ctx current; gather_lock held). */
tq_code cuda_gather_left_into_slot(cuda_backend *b, int slot, tq_error *err);

/* ---- tq_cuda_kernels.c ---- */
/* The kernel, its module loaded into the ring's context at first use (ctx current). */
tq_code cuda_kernel(cuda_backend *b, tq_kernel which, CUfunction *fn, tq_error *err);
/* Unloads the modules (ctx current, no launch still queued). */
void cuda_kernels_release(cuda_backend *b);

/* ---- tq_cuda_device.c: the backend table's device-array puts ---- */
/* Destroys the events device puts kept (ctx current, nothing queued waits on them). */
void cuda_device_puts_release(cuda_backend *b);
tq_code cuda_probe_device(tq_backend *self, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err);
tq_code cuda_hold_device(tq_backend *self, int *held, tq_error *err);
void cuda_release_device(tq_backend *self);
tq_code cuda_put_device_arrays(tq_backend *self, int slot, const tq_extent *extents, int n, const tq_device_src *srcs,
                               tq_error *err);

#endif /* TQ_CUDA_BACKEND_H */
