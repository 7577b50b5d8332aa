#section support_code
#line 3 "enqueue.c"
/*
 * Enqueue: puts the node's inputs into a queue as one element and outputs the
 * queue's size afterwards.  The engine validates the element (naming the
 * component that does not fit) before it takes a slot, and waits for a free
 * slot with the GIL released.
 */

static int tq_enqueue_from(const char *who, PyObject *token, PyArrayObject **inputs, int n_inputs,
                           PyArrayObject **size_out)
{
    if (tq_import() < 0)
        return -1;
    PyObject *ring = tq_api->resolve(token, who);
    if (!ring)
        return -1;
    PyObject *element = PyTuple_New(n_inputs);
    Py_ssize_t size = -1;
    if (element) {
        for (int c = 0; c < n_inputs; c++) {
            Py_INCREF(inputs[c]);
            PyTuple_SET_ITEM(element, c, (PyObject *)inputs[c]);
        }
        size = tq_api->put(ring, who, element);
        Py_DECREF(element);
    }
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
