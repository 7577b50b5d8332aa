#section support_code
#line 3 "gpu_dequeue.c"
/*
 * GpuDequeue: takes the next element of a GPU queue into the node's outputs.
 *
 * The host waits only until the element's copy has been issued (the engine
 * does that with the GIL released); the GPU ordering is done with events:
 * Theano's stream waits for the slot's *filled* event, copies the slot into
 * the outputs, and records the slot's *consumed* event.  Outputs from the
 * previous call are reused when their shape still fits.
 */

static int tq_gpu_dequeue_into(const char *who, PyObject *token, PyGpuArrayObject ***outputs, const int *typecodes,
                               int n_outputs, PyGpuContextObject *ctx)
{
    uint64_t dsts[TQ_MAX_COMPONENTS]; /* resolve refuses n_outputs other than the queue's, at most this */
    int slot, rc = 0;
    PyObject *ring = tq_api->resolve(token, who, n_outputs, 1);
    if (!ring)
        return -1;
    if (tq_api->get_begin(ring, who, &slot) < 0) {
        Py_DECREF(ring);
        return -1;
    }
    for (int c = 0; c < n_outputs && rc == 0; c++) {
        intptr_t dims[NPY_MAXDIMS]; /* element_shape fills at most NPY_MAXDIMS */
        size_t sizes[NPY_MAXDIMS];
        int ndim = tq_api->element_shape(ring, slot, c, dims);
        for (int d = 0; d < ndim; d++)
            sizes[d] = (size_t)dims[d];
        if (*outputs[c] && !GpuArray_IS_C_CONTIGUOUS(&(*outputs[c])->ga))
            Py_CLEAR(*outputs[c]);
        if (theano_prep_output(outputs[c], ndim, sizes, typecodes[c], GA_C_ORDER, ctx) != 0)
            rc = -1;
        else
            dsts[c] = (uint64_t)(uintptr_t)PyGpuArray_DEV_DATA(*outputs[c]);
    }
    if (rc == 0) {
        cuda_enter(ctx->ctx);
        for (int c = 0; c < n_outputs; c++)
            cuda_wait((*outputs[c])->ga.data, GPUARRAY_CUDA_WAIT_WRITE);
        rc = tq_api->gpu_take(ring, who, slot, cuda_get_stream(ctx->ctx), dsts);
        for (int c = 0; c < n_outputs; c++)
            cuda_record((*outputs[c])->ga.data, GPUARRAY_CUDA_WAIT_WRITE);
        cuda_exit(ctx->ctx);
    }
    tq_api->get_end(ring, slot);
    Py_DECREF(ring);
    return rc;
}

#section init_code
setup_ext_cuda();
if (tq_import() < 0)
    return NULL;
