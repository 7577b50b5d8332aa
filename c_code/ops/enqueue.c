#section support_code
#line 3 "enqueue.c"
/*
 * Enqueue: puts the node's inputs into a queue as one element and outputs the
 * queue's size afterwards.  The engine validates the element (naming the
 * component that does not fit, and the Op where the components' rows
 * differ) before it takes a slot, and waits for a free slot with the GIL
 * released.
 */

static int tq_enqueue_from(const char *who, PyObject *token, PyArrayObject **inputs, int n_inputs,
                           PyArrayObject **size_out)
{
    PyObject *ring = tq_api->resolve(token, who, n_inputs, 0);
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
    return size < 0 ? -1 : tq_api->set_size((PyObject **)size_out, size);
}

#section init_code
if (tq_import() < 0)
    return NULL;
