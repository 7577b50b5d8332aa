#section support_code
#line 3 "gpu_dequeue.c"
/*
 * GpuDequeue: takes the next element of a GPU queue into the node's outputs.
 *
 * The host waits only until the element is there to be taken (the engine
 * waits with the GIL released); the GPU ordering is done with events.  Where
 * one of the ring's spare blocks is free, the slot's device block is lent to
 * the graph: Theano's stream waits for the slot's *filled* event and the
 * outputs are views of the block, whose base (a Lease) gives it back when the
 * last of them is gone, ordered on Theano's stream before the block's next
 * writer.  Otherwise the slot is copied into the outputs on Theano's stream,
 * which then records the slot's *consumed* event.
 *
 * A lent output is never written into: the graph, or a caller that kept it,
 * may still read it.  The previous call's lent outputs are dropped, not
 * reused; copied outputs are reused when their shape still fits.
 */

/* The libgpuarray buffers that wrap lent blocks, kept by the node from call
 * to call: making one creates two CUDA events and freeing it destroys them,
 * four driver calls for each output of each step.  A ring lends the same few
 * blocks over and over (its slots' and its spares': hundreds for a ring
 * filled ahead); each address is looked for in TQ_BLOCK_PROBES buckets from
 * its hash's, and one not found takes an empty bucket there or, all taken,
 * the first one's.  A buffer made with cuda_make_buf never frees its block,
 * so one kept past its ring's end only wraps a stale address: it is used
 * again only for a block of the same address and size, which it then wraps
 * correctly. */
#define TQ_BLOCK_BUCKETS 1024
#define TQ_BLOCK_PROBES 8
typedef struct {
    CUdeviceptr addr;
    size_t bytes;
    gpudata *buffer; /* one reference, the node's */
} tq_block_bucket;
typedef struct {
    tq_block_bucket buckets[TQ_BLOCK_BUCKETS];
} tq_block_cache;

static void tq_block_cache_clear(tq_block_cache *cache)
{
    for (int k = 0; k < TQ_BLOCK_BUCKETS; k++)
        if (cache->buckets[k].buffer)
            gpudata_release(cache->buckets[k].buffer);
    memset(cache, 0, sizeof *cache);
}

/* A buffer wrapping [addr, addr + bytes), borrowed from the cache; NULL when
 * libgpuarray could not make one. */
static gpudata *tq_block_buffer(tq_block_cache *cache, gpucontext *ctx, CUdeviceptr addr, size_t bytes)
{
    size_t first = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 54); /* the top 10 bits */
    tq_block_bucket *bucket = NULL;
    for (size_t k = 0; k < TQ_BLOCK_PROBES; k++) {
        tq_block_bucket *at = &cache->buckets[(first + k) % TQ_BLOCK_BUCKETS];
        if (at->buffer && at->addr == addr && at->bytes == bytes)
            return at->buffer;
        if (!bucket && (!at->buffer || at->addr == addr))
            bucket = at; /* empty, or this address's of another size */
    }
    if (!bucket)
        bucket = &cache->buckets[first];
    gpudata *made = cuda_make_buf(ctx, addr, bytes);
    if (!made)
        return NULL;
    if (bucket->buffer)
        gpudata_release(bucket->buffer); /* the views made of it still hold it */
    bucket->addr = addr;
    bucket->bytes = bytes;
    bucket->buffer = made;
    return made;
}

/* Views of the lent block for each output (the Lease their base); -1 with an
 * exception when one cannot be made.  Theano's stream already waits for the
 * element. */
static int tq_gpu_wrap_lent(tq_block_cache *cache, PyObject *ring, int slot, PyObject *lease, const uint64_t *addrs,
                            PyGpuArrayObject ***outputs, const int *typecodes, int n_outputs, PyGpuContextObject *ctx)
{
    for (int c = 0; c < n_outputs; c++) {
        intptr_t dims[NPY_MAXDIMS]; /* element_shape fills at most NPY_MAXDIMS */
        size_t sizes[NPY_MAXDIMS];
        ssize_t strides[NPY_MAXDIMS];
        int ndim = tq_api->element_shape(ring, slot, c, dims);
        size_t bytes = gpuarray_get_elsize(typecodes[c]);
        for (int d = ndim - 1; d >= 0; d--) {
            sizes[d] = (size_t)dims[d];
            strides[d] = (ssize_t)bytes;
            bytes *= sizes[d];
        }
        gpudata *block = tq_block_buffer(cache, ctx->ctx, (CUdeviceptr)addrs[c], bytes);
        if (!block) {
            PyErr_SetString(PyExc_MemoryError, "GpuDequeue: libgpuarray could not wrap a lent device block");
            return -1;
        }
        PyGpuArrayObject *view =
            pygpu_fromgpudata(block, 0, typecodes[c], (unsigned int)ndim, sizes, strides, ctx, 1, lease, Py_None);
        if (!view)
            return -1;
        cuda_record(block, GPUARRAY_CUDA_WAIT_WRITE); /* for streams that order on the buffer */
        Py_XSETREF(*outputs[c], view);
    }
    return 0;
}

/* Copies the element into the outputs on Theano's stream. */
static int tq_gpu_copy_out(const char *who, PyObject *ring, int slot, PyGpuArrayObject ***outputs, const int *typecodes,
                           int n_outputs, PyGpuContextObject *ctx)
{
    uint64_t dsts[TQ_MAX_COMPONENTS]; /* resolve refuses n_outputs other than the queue's, at most this */
    for (int c = 0; c < n_outputs; c++) {
        intptr_t dims[NPY_MAXDIMS];
        size_t sizes[NPY_MAXDIMS];
        int ndim = tq_api->element_shape(ring, slot, c, dims);
        for (int d = 0; d < ndim; d++)
            sizes[d] = (size_t)dims[d];
        if (*outputs[c] && !GpuArray_IS_C_CONTIGUOUS(&(*outputs[c])->ga))
            Py_CLEAR(*outputs[c]);
        if (theano_prep_output(outputs[c], ndim, sizes, typecodes[c], GA_C_ORDER, ctx) != 0)
            return -1;
        dsts[c] = (uint64_t)(uintptr_t)PyGpuArray_DEV_DATA(*outputs[c]);
    }
    for (int c = 0; c < n_outputs; c++)
        cuda_wait((*outputs[c])->ga.data, GPUARRAY_CUDA_WAIT_WRITE);
    int rc = tq_api->gpu_take(ring, who, slot, cuda_get_stream(ctx->ctx), dsts);
    for (int c = 0; c < n_outputs; c++)
        cuda_record((*outputs[c])->ga.data, GPUARRAY_CUDA_WAIT_WRITE);
    return rc;
}

static int tq_gpu_dequeue_into(tq_block_cache *cache, const char *who, PyObject *token, PyGpuArrayObject ***outputs,
                               const int *typecodes, int n_outputs, PyGpuContextObject *ctx)
{
    uint64_t addrs[TQ_MAX_COMPONENTS];
    PyObject *lease = NULL;
    int slot, rc;
    PyObject *ring = tq_api->resolve(token, who, n_outputs, 1);
    if (!ring)
        return -1;
    if (tq_api->get_begin(ring, who, &slot) < 0) {
        Py_DECREF(ring);
        return -1;
    }
    /* libgpuarray's context entered first, then the ring's held: the hold
     * pushes a context only where the entry made none current.  libgpuarray
     * counts entries once per context, for every thread: on a thread other
     * than the one that entered it first, cuda_enter pushes nothing. */
    cuda_enter(ctx->ctx);
    int held = 0;
    rc = tq_api->hold_device(ring, who, &held);
    if (rc == 0) {
        /* Theano hands back what this node output last time.  A lent view is
         * dropped, never written into: its block goes back to the ring once
         * nobody else holds it (in the context held now), and is then free
         * to lend again. */
        for (int c = 0; c < n_outputs; c++)
            if (*outputs[c] && tq_api->is_lease((*outputs[c])->base))
                Py_CLEAR(*outputs[c]);
        rc = tq_api->gpu_lend(ring, who, slot, cuda_get_stream(ctx->ctx), (PyObject *)ctx, &lease, addrs);
        if (rc == 1)
            rc = tq_gpu_wrap_lent(cache, ring, slot, lease, addrs, outputs, typecodes, n_outputs, ctx);
        else if (rc == 0)
            rc = tq_gpu_copy_out(who, ring, slot, outputs, typecodes, n_outputs, ctx);
        if (held)
            tq_api->release_device(ring);
    }
    cuda_exit(ctx->ctx);
    Py_XDECREF(lease); /* the views hold it */
    tq_api->get_end(ring, slot);
    Py_DECREF(ring);
    return rc;
}

#section init_code
setup_ext_cuda();
if (tq_import() < 0)
    return NULL;
