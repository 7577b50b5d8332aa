/*
 * tq_capi.h: what the Ops' C code (compiled by Theano into modules of its own)
 * needs from theano_queue._engine.  The module exports this table in the
 * capsule theano_queue._engine._C_API; an Op calls tq_import() in its
 * module's init code and then tq_api->...  Every function that can fail
 * returns -1 or NULL with a Python exception set whose message starts with
 * `who` (the Op's name).
 */
#ifndef TQ_CAPI_H
#define TQ_CAPI_H

#include <Python.h>
#include <stdint.h>

#include "tq_base.h" /* the engine's limits: TQ_MAX_COMPONENTS */

#define TQ_CAPI_VERSION 7

typedef struct {
    int version;
    /* The Ring a queue token (a weakref) points to: a new reference, or NULL
     * with an exception when the queue was deleted, belongs to another
     * process, or does not have n components (every c below is < n).
     * on_gpu 1: a queue in host memory is refused (TypeError). */
    PyObject *(*resolve)(PyObject *token, const char *who, int n, int on_gpu);

    /* ---- consumers ---- */
    /* Waits (GIL released, Ctrl-C and the queue's timeout honoured) for the
     * next element and reserves its slot.  0, or -1 with QueueClosed,
     * QueueTimeout, FeederError or KeyboardInterrupt set. */
    int (*get_begin)(PyObject *ring, const char *who, int *slot);
    /* The element's shape for component c: returns ndim (at most NPY_MAXDIMS)
     * and fills dims (leading axis = rows actually stored). */
    int (*element_shape)(PyObject *ring, int slot, int c, intptr_t *dims);
    /* Copies component c into host memory (from the device for a GPU queue). */
    int (*copy_to_host)(PyObject *ring, const char *who, int slot, int c, void *dst);
    /* Lends a reserved element's memory (a host queue): views[c] become new
     * arrays over it, kept from producers until the last is freed.  1 when
     * lent, 0 when it cannot be now (copy instead), -1 with an exception.
     * The slot is still to be handed back with get_end. */
    int (*lend)(PyObject *ring, int slot, PyObject **views);
    /* 1 when array is one that lend made (never write into it: a user may hold it). */
    int (*is_lent)(PyObject *array);
    /* Hands the slot back once everything is read from it (or queued to be). */
    void (*get_end)(PyObject *ring, int slot);

    /* ---- producers ---- */
    /* Validates and puts one element given as a sequence of arrays; waits for
     * space like get_begin.  The queue's size after the put, or -1. */
    Py_ssize_t (*put)(PyObject *ring, const char *who, PyObject *arrays);
    /* 0 when an array of this shape fits component c, else -1 with ValueError. */
    int (*check_shape)(PyObject *ring, const char *who, int c, int ndim, const intptr_t *dims);
    /* 0 when the rows of the components (rows[c] each) agree on the batch
     * axis, else -1 with ValueError naming two components, prefixed by who. */
    int (*check_rows)(PyObject *ring, const char *who, const int64_t *rows);
    int (*put_begin)(PyObject *ring, const char *who, int *slot);
    void (*put_abort)(PyObject *ring, int slot);
    /* Makes *out a 0-d int64 array holding size, reusing it when it is one.
     * 0, or -1 with an exception. */
    int (*set_size)(PyObject **out, Py_ssize_t size);

    /* ---- GPU queues (stream: a CUstream current in the caller's context) ---- */
    /* Makes stream wait for the element, copies every component to dsts[c] on
     * it, and records that the slot was read; no host wait.  -1 with CudaError. */
    int (*gpu_take)(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *dsts);
    /* Copies device arrays srcs[c] (rows[c] rows each) into a reserved slot on
     * stream and publishes it.  The size after the put, or -1 (slot dropped). */
    Py_ssize_t (*gpu_put)(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *srcs,
                          const int64_t *rows);
    /* Lends a reserved element's device block instead of copying it: stream
     * waits for the element on the GPU, addrs[c] is where component c lies,
     * and *lease a new Lease that keeps the block from producers until it is
     * freed (make it the base of every array over the block); its give-back
     * orders the block's next writer after what stream holds by then (keep,
     * the stream's owner, is held until that).  1 when lent, 0 when no spare
     * block is free (copy with gpu_take instead), -1 with CudaError.  The
     * slot is still to be handed back with get_end. */
    int (*gpu_lend)(PyObject *ring, const char *who, int slot, void *stream, PyObject *keep, PyObject **lease,
                    uint64_t *addrs);
    /* 1 when obj is a Lease (an array whose base it is must never be written into). */
    int (*is_lease)(PyObject *obj);
    /* Makes the ring's device context current on this thread until
     * release_device (when *held is 1), so that libgpuarray calls made in
     * between find it: libgpuarray enters a context only when no thread has
     * entered it.  -1 with CudaError. */
    int (*hold_device)(PyObject *ring, const char *who, int *held);
    void (*release_device)(PyObject *ring);
} tq_capi_t;

#ifndef TQ_CAPI_PROVIDER
static tq_capi_t *tq_api = NULL;

/* 0 once tq_api is usable, -1 with an exception. */
static int tq_import(void)
{
    if (tq_api)
        return 0;
    tq_capi_t *api = (tq_capi_t *)PyCapsule_Import("theano_queue._engine._C_API", 0);
    if (!api)
        return -1;
    if (api->version != TQ_CAPI_VERSION) {
        PyErr_Format(PyExc_ImportError, "theano_queue: C API version %d, expected %d; rebuild the package",
                     api->version, TQ_CAPI_VERSION);
        return -1;
    }
    tq_api = api;
    return 0;
}
#endif /* TQ_CAPI_PROVIDER */

#endif /* TQ_CAPI_H */
