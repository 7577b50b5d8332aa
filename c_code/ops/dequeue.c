#section support_code
#line 3 "dequeue.c"
/*
 * Dequeue: takes the next element of a queue into the node's outputs.
 *
 * The wait happens in the engine with the GIL released.  A host queue lends
 * the element's memory: the outputs are views of it, and the queue gets it
 * back when the last of them is freed (doc/design.rst, "The CPU hand-off").
 * Otherwise (a GPU queue read on the host, or every spare block lent) the
 * element is copied, into the outputs' arrays of the previous call when their
 * shapes still fit and they are ours.
 */

/* A C-contiguous array of the given shape and type: *out itself when it
 * already is one, else a new one.  0, or -1 with an exception. */
static int tq_fit_output(PyArrayObject **out, int ndim, const npy_intp *dims, int typenum)
{
    PyArrayObject *have = *out;
    /* A lent array is never written: the caller of the function may hold it. */
    if (have && !tq_api->is_lent((PyObject *)have) && PyArray_NDIM(have) == ndim && PyArray_TYPE(have) == typenum &&
        PyArray_ISCARRAY(have) && PyArray_CompareLists(PyArray_DIMS(have), dims, ndim))
        return 0;
    Py_XDECREF(have);
    *out = (PyArrayObject *)PyArray_SimpleNew(ndim, (npy_intp *)dims, typenum);
    return *out ? 0 : -1;
}

/* Lets `module`.name_the_call(exc) add to the pending exception which call
 * reached the queue (PyTensor's Dequeue: "reached by pm.fit").  Best effort:
 * whatever fails here leaves the original exception as it was. */
static inline void tq_name_the_call(const char *module)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *namer = value ? PyImport_ImportModule(module) : NULL;
    PyObject *named = namer ? PyObject_CallMethod(namer, "name_the_call", "O", value) : NULL;
    Py_XDECREF(namer);
    Py_XDECREF(named);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

static int tq_dequeue_into(const char *who, PyObject *token, PyArrayObject ***outputs, const int *typenums,
                           int n_outputs)
{
    PyObject *ring = tq_api->resolve(token, who, n_outputs, 0);
    if (!ring)
        return -1;
    int slot, rc = 0;
    /* Last call's lent outputs first: when nothing else holds them, their
     * block goes back to the queue before this call asks for another. */
    for (int c = 0; c < n_outputs; c++)
        if (*outputs[c] && tq_api->is_lent((PyObject *)*outputs[c]))
            Py_CLEAR(*outputs[c]);
    if (tq_api->get_begin(ring, who, &slot) < 0) {
        Py_DECREF(ring);
        return -1;
    }
    PyObject *views[TQ_MAX_COMPONENTS];
    int lent = tq_api->lend(ring, slot, views);
    for (int c = 0; lent == 1 && c < n_outputs; c++) {
        Py_XDECREF(*outputs[c]);
        *outputs[c] = (PyArrayObject *)views[c];
    }
    rc = lent < 0 ? -1 : 0;
    for (int c = 0; lent == 0 && c < n_outputs && rc == 0; c++) {
        npy_intp dims[NPY_MAXDIMS]; /* element_shape fills at most NPY_MAXDIMS */
        int ndim = tq_api->element_shape(ring, slot, c, (intptr_t *)dims);
        rc = tq_fit_output(outputs[c], ndim, dims, typenums[c]);
        if (rc == 0)
            rc = tq_api->copy_to_host(ring, who, slot, c, PyArray_DATA(*outputs[c]));
    }
    tq_api->get_end(ring, slot);
    Py_DECREF(ring);
    return rc;
}

#section init_code
if (tq_import() < 0)
    return NULL;
