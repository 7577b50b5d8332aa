#section support_code
#line 3 "gpu_enqueue.c"
/*
 * GpuEnqueue: puts the node's GPU inputs into a GPU queue as one element and
 * outputs the queue's size afterwards.
 *
 * Shapes, and the rows of the components against each other, are checked
 * before a slot is taken.  The copy into the slot runs on
 * Theano's stream after the slot's last reader (its *consumed* event) and is
 * followed by the slot's *filled* event, so a consumer on any stream orders
 * itself after it; the host does not wait for either.
 */

/* The input's dims for the engine's shape check, or -1 with an exception
 * when it has more than numpy's NPY_MAXDIMS (no component has). */
static int tq_gpu_input_dims(const char *who, PyGpuArrayObject *input, intptr_t *dims)
{
    int ndim = (int)PyGpuArray_NDIM(input);
    if (ndim > NPY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError, "%s: an input of %d dimensions; a component has at most %d", who, ndim,
                     NPY_MAXDIMS);
        return -1;
    }
    for (int d = 0; d < ndim; d++)
        dims[d] = (intptr_t)PyGpuArray_DIMS(input)[d];
    return ndim;
}

static int tq_gpu_enqueue_from(const char *who, PyObject *token, PyGpuArrayObject **inputs, int n_inputs,
                               PyArrayObject **size_out, PyGpuContextObject *ctx)
{
    /* resolve refuses n_inputs other than the queue's, at most TQ_MAX_COMPONENTS */
    PyGpuArrayObject *contiguous[TQ_MAX_COMPONENTS] = {NULL};
    uint64_t srcs[TQ_MAX_COMPONENTS];
    int64_t rows[TQ_MAX_COMPONENTS];
    Py_ssize_t size = -1;
    int slot;
    PyObject *ring = tq_api->resolve(token, who, n_inputs, 1);
    if (!ring)
        return -1;
    for (int c = 0; c < n_inputs; c++) {
        intptr_t dims[NPY_MAXDIMS];
        int ndim = tq_gpu_input_dims(who, inputs[c], dims);
        if (ndim < 0 || tq_api->check_shape(ring, who, c, ndim, dims) < 0)
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
    if (tq_api->check_rows(ring, who, rows) < 0 || tq_api->put_begin(ring, who, &slot) < 0)
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
    return size < 0 ? -1 : tq_api->set_size((PyObject **)size_out, size);
}

#section init_code
setup_ext_cuda();
if (tq_import() < 0)
    return NULL;
