/* tq_py_capi.c: the table of functions that the Ops' C code (compiled by
 * Theano into modules of its own) calls, exported in the capsule
 * theano_queue._engine._C_API (see tq_capi.h). */
#include "tq_py.h"

#define TQ_CAPI_PROVIDER /* defines the table, imports nothing */
#include "tq_capi.h"

static PyObject *capi_resolve(PyObject *token, const char *who, int n, int on_gpu)
{
    PyObject *ring = PyWeakref_Check(token) ? PyWeakref_GetObject(token) : token;
    if (ring == Py_None) {
        PyErr_Format(QueueError,
                     "%s: its queue was deleted while a compiled function still uses it; keep the Queue "
                     "alive as long as the functions that dequeue from it or enqueue into it",
                     who);
        return NULL;
    }
    if (!PyObject_TypeCheck(ring, &RingType)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a queue token, got %R", who, ring);
        return NULL;
    }
    if (ring_usable((RingObject *)ring, who))
        return NULL;
    RingObject *self = (RingObject *)ring;
    if (n != self->n) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U' has %d components, the node %d", who, self->name, self->n, n);
        return NULL;
    }
    if (on_gpu && !tq_ring_on_device(self->ring)) {
        PyErr_Format(PyExc_TypeError, "%s: queue '%U' lives in host memory, not on the GPU", who, self->name);
        return NULL;
    }
    Py_INCREF(ring);
    return ring;
}

static int capi_get_begin(PyObject *ring, const char *who, int *slot)
{
    RingObject *self = (RingObject *)ring;
    return wait_for_slot(self, 0, self->timeout, NULL, who, slot);
}

static int capi_element_shape(PyObject *ring, int slot, int c, intptr_t *dims)
{
    return element_shape((RingObject *)ring, slot, c, (npy_intp *)dims);
}

static int capi_lend(PyObject *ring, int slot, PyObject **views)
{
    return lend_element((RingObject *)ring, slot, views);
}

static void capi_get_end(PyObject *ring, int slot) { tq_ring_release_get(((RingObject *)ring)->ring, slot); }

static Py_ssize_t capi_put(PyObject *ring, const char *who, PyObject *arrays)
{
    RingObject *self = (RingObject *)ring;
    return put_element(self, who, who, arrays, self->timeout, NULL);
}

static int capi_copy_to_host(PyObject *ring, const char *who, int slot, int c, void *dst)
{
    return read_component((RingObject *)ring, who, slot, c, dst);
}

static int capi_gpu_take(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *dsts)
{
    RingObject *self = (RingObject *)ring;
    tq_error err;
    if (tq_ring_take_on_device(self->ring, slot, stream, dsts, &err) != TQ_OK)
        return raise_error(who, self, &err);
    return 0;
}

static int capi_gpu_lend(PyObject *ring, const char *who, int slot, void *stream, PyObject *keep, PyObject **lease,
                         uint64_t *addrs)
{
    return lend_device_block((RingObject *)ring, who, slot, stream, keep, lease, addrs);
}

/* The ring's device context current on this thread until release_device,
 * whatever libgpuarray's own count of entries says (it is one count per
 * context, shared by every thread).  *held: whether to release. */
static int capi_hold_device(PyObject *ring, const char *who, int *held)
{
    RingObject *self = (RingObject *)ring;
    tq_error err;
    if (tq_ring_hold_device(self->ring, held, &err) != TQ_OK)
        return raise_error(who, self, &err);
    return 0;
}

static void capi_release_device(PyObject *ring) { tq_ring_release_device(((RingObject *)ring)->ring); }

static int capi_check_shape(PyObject *ring, const char *who, int c, int ndim, const intptr_t *dims)
{
    (void)who; /* a shape is refused in one wording, whichever entry asks (check_dims) */
    return check_dims((RingObject *)ring, c, ndim, (const npy_intp *)dims);
}

static int capi_check_rows(PyObject *ring, const char *who, const int64_t *rows)
{
    return check_rows((RingObject *)ring, who, rows);
}

static int capi_put_begin(PyObject *ring, const char *who, int *slot)
{
    RingObject *self = (RingObject *)ring;
    return wait_for_slot(self, 1, self->timeout, NULL, who, slot);
}

static Py_ssize_t capi_gpu_put(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *srcs,
                               const int64_t *rows)
{
    RingObject *self = (RingObject *)ring;
    tq_error err;
    if (tq_ring_put_from_device(self->ring, slot, stream, srcs, rows, &err) != TQ_OK)
        return raise_error(who, self, &err);
    return tq_ring_size(self->ring);
}

static void capi_put_abort(PyObject *ring, int slot) { tq_ring_abort_put(((RingObject *)ring)->ring, slot); }

static int capi_set_size(PyObject **out, Py_ssize_t size)
{
    PyArrayObject *have = (PyArrayObject *)*out;
    if (!have || !PyArray_Check(have) || PyArray_NDIM(have) != 0 || PyArray_TYPE(have) != NPY_INT64 ||
        !PyArray_ISWRITEABLE(have)) {
        Py_XDECREF(*out);
        *out = PyArray_ZEROS(0, NULL, NPY_INT64, 0);
        if (!*out)
            return -1;
    }
    *(npy_int64 *)PyArray_DATA((PyArrayObject *)*out) = (npy_int64)size;
    return 0;
}

static tq_capi_t capi = {
    .version = TQ_CAPI_VERSION,
    .resolve = capi_resolve,
    /* consumers */
    .get_begin = capi_get_begin,
    .element_shape = capi_element_shape,
    .copy_to_host = capi_copy_to_host,
    .get_end = capi_get_end,
    .lend = capi_lend,
    .is_lent = is_lent,
    /* producers */
    .put = capi_put,
    .check_shape = capi_check_shape,
    .check_rows = capi_check_rows,
    .put_begin = capi_put_begin,
    .put_abort = capi_put_abort,
    .set_size = capi_set_size,
    /* GPU queues */
    .gpu_take = capi_gpu_take,
    .gpu_put = capi_gpu_put,
    .gpu_lend = capi_gpu_lend,
    .is_lease = is_lease,
    .hold_device = capi_hold_device,
    .release_device = capi_release_device,
};

PyObject *capi_capsule(void) { return PyCapsule_New(&capi, "theano_queue._engine._C_API", NULL); }
