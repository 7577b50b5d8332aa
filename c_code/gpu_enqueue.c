#section init_code
setup_ext_cuda();

#section support_code
#line 6 "gpu_enqueue.c"
/*
 * GpuEnqueue: puts the node's GPU inputs into a GPU queue as one element and
 * outputs the queue's size afterwards.
 *
 * Shapes are checked before a slot is taken.  The copy into the slot runs on
 * Theano's stream after the slot's last reader (its *consumed* event) and is
 * followed by the slot's *filled* event, so a consumer on any stream orders
 * itself after it; the host does not wait for either.
 */

static int tq_gpu_enqueue_from(const char *who, PyObject *token, PyGpuArrayObject **inputs, int n_inputs,
                               PyArrayObject **size_out, PyGpuContextObject *ctx)
{
    PyGpuArrayObject *contiguous[64] = {NULL};
    uint64_t srcs[64];
    int64_t rows[64];
    Py_ssize_t size = -1;
    int slot;
    if (tq_import() < 0)
        return -1;
    PyObject *ring = tq_api->resolve(token, who);
    if (!ring)
        return -1;
    if (!tq_api->on_gpu(ring)) {
        PyErr_Format(PyExc_TypeError, "%s: its queue lives in host memory, not on the GPU", who);
        goto done;
    }
    for (int c = 0; c < n_inputs; c++) {
        intptr_t dims[16];
        int ndim = PyGpuArray_NDIM(inputs[c]);
        for (int d = 0; d < ndim; d++)
            dims[d] = (intptr_t)PyGpuArray_DIMS(inputs[c])[d];
        if (tq_api->check_shape(ring, who, c, ndim, dims) < 0)
            goto done;
        rows[c] = ndim ? dims[0] : 1;
        if (GpuArray_IS_C_CONTIGUOUS(&inputs[c]->ga)) {
            Py_INCREF(inputs[c]);
            contiguous[c] = inputs[c];
        } else if (!(contiguous[c] = pygpu_copy(inputs[c], GA_C_ORDER))) {
            goto done;
        }
        srcs[c] = (uint64_t)(uintptr_t)PyGpuArray_DEV_DATA(contiguous[c]);
    }
    if (tq_api->put_begin(ring, who, &slot) < 0)
        goto done;
    cuda_enter(ctx->ctx);
    for (int c = 0; c < n_inputs; c++)
        cuda_wait(contiguous[c]->ga.data, GPUARRAY_CUDA_WAIT_READ);
    size = tq_api->gpu_put(ring, who, slot, cuda_get_stream(ctx->ctx), srcs, rows);
    for (int c = 0; c < n_inputs; c++)
        cuda_record(contiguous[c]->ga.data, GPUARRAY_CUDA_WAIT_READ);
    cuda_exit(ctx->ctx);
done:
    for (int c = 0; c < n_inputs; c++)
        Py_XDECREF(contiguous[c]);
    Py_DECREF(ring);
    if (size < 0)
        return -1;
    if (!*size_out || PyArray_NDIM(*size_out) != 0 || PyArray_TYPE(*size_out) != NPY_INT64) {
        Py_XDECREF(*size_out);
        *size_out = (PyArrayObject *)PyArray_ZEROS(0, NULL, NPY_INT64, 0);
        if (!*size_out)
            return -1;
    }
    *(npy_int64 *)PyArray_DATA(*size_out) = (npy_int64)size;
    return 0;
}
