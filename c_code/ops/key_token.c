#section support_code
#line 3 "key_token.c"
/*
 * PyTensor's queue token: a 0-d int64 array holding a key into
 * theano_queue.graph.base's registry of rings.  A plain array, so that the Numba
 * and JAX backends (which pass shared variables to one compiled function as
 * arguments) can carry it; the C linker pays one dict lookup per node run.
 *
 * Guarded: PyTensor's ExternalCOp gives each Op its files' support code as
 * one text, so a function with a Dequeue and an Enqueue holds this twice.
 */
#ifndef TQ_KEY_TOKEN
#define TQ_KEY_TOKEN
static PyObject *tq_lookup_by_key = NULL; /* theano_queue.graph.base.lookup */

/* The ring the token names: a new reference, or NULL with an exception that
 * starts with `who` (QueueError when its queue was deleted). */
static PyObject *tq_ring_by_key(const char *who, PyArrayObject *token)
{
    if (PyArray_NDIM(token) != 0 || PyArray_TYPE(token) != NPY_INT64) {
        PyErr_Format(PyExc_TypeError, "%s: expected a queue token (a 0-d int64 key), got a %d-d array", who,
                     PyArray_NDIM(token));
        return NULL;
    }
    if (!tq_lookup_by_key) {
        PyObject *graph = PyImport_ImportModule("theano_queue.graph.base");
        tq_lookup_by_key = graph ? PyObject_GetAttrString(graph, "lookup") : NULL;
        Py_XDECREF(graph);
        if (!tq_lookup_by_key)
            return NULL;
    }
    long long key = *(npy_int64 *)PyArray_DATA(token);
    return PyObject_CallFunction(tq_lookup_by_key, "Ls", key, who);
}

#endif /* TQ_KEY_TOKEN */
