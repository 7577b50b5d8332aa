/* tq_py_memory.c: the Ring's methods on memory around it: page-locking a
 * user's arrays, the device gather of array datasets, and the shared staging
 * that worker processes write into. */
#include "tq_py.h"

#include <unistd.h>

#include "tq_cuda.h"

/* ---- page-locked user memory -------------------------------------------------------- */

/* (un)register_host(array): the engine refuses a host queue, with its reason. */
static PyObject *register_array(RingObject *self, PyObject *array, int undo)
{
    const char *who = undo ? "Queue.unregister_host" : "Queue.register_host";
    tq_error err;
    tq_code code;
    if (ring_usable(self, who))
        return NULL;
    if (!PyArray_Check(array) || (!undo && !PyArray_ISCARRAY((PyArrayObject *)array))) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous, writeable numpy array", who);
        return NULL;
    }
    void *data = PyArray_DATA((PyArrayObject *)array);
    size_t bytes = (size_t)PyArray_NBYTES((PyArrayObject *)array);
    Py_BEGIN_ALLOW_THREADS /* page-locking is slow; unregistering waits for copies */
    code =
        undo ? tq_ring_unregister_host(self->ring, data, &err) : tq_ring_register_host(self->ring, data, bytes, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error(who, self, &err), NULL;
    Py_RETURN_NONE;
}

PyObject *Ring_register_host(RingObject *self, PyObject *array) { return register_array(self, array, 0); }

PyObject *Ring_unregister_host(RingObject *self, PyObject *array) { return register_array(self, array, 1); }

/* ---- the device gather of array datasets ------------------------------------------------ */

/* The bytes an array's elements lie in, whatever its strides: [*lo, *lo + *bytes). */
static void array_span(PyArrayObject *arr, char **lo, size_t *bytes)
{
    char *start = PyArray_DATA(arr), *end = start + PyArray_ITEMSIZE(arr);
    if (PyArray_SIZE(arr) == 0) {
        *lo = start;
        *bytes = 0;
        return;
    }
    for (int d = 0; d < PyArray_NDIM(arr); d++) {
        npy_intp reach = (PyArray_DIM(arr, d) - 1) * PyArray_STRIDE(arr, d);
        if (reach < 0)
            start += reach;
        else
            end += reach;
    }
    *lo = start;
    *bytes = (size_t)(end - start);
}

/* gather_on_device(sources, mechanism="auto") -> the mechanism used. */
PyObject *Ring_gather_on_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", "mechanism", NULL};
    const char *who = "Feeder", *wanted = tq_gather_mechanism_name(TQ_GATHER_AUTO);
    PyObject *sources;
    const void *ptrs[TQ_MAX_COMPONENTS];
    size_t bytes[TQ_MAX_COMPONENTS];
    int read_only[TQ_MAX_COMPONENTS], mechanism = -1;
    tq_gather_mechanism used;
    tq_error err;
    tq_code code;
    if (ring_usable(self, who) || !PyArg_ParseTupleAndKeywords(args, kwds, "O|s", kwlist, &sources, &wanted))
        return NULL;
    if ((mechanism = tq_gather_mechanism_of(wanted)) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: queue '%U': expected a gather mechanism of '%s', '%s', '%s' or '%s', got '%s'", who,
                     self->name, tq_gather_mechanism_name(TQ_GATHER_AUTO), tq_gather_mechanism_name(TQ_GATHER_BATCH),
                     tq_gather_mechanism_name(TQ_GATHER_DEVICE), tq_gather_mechanism_name(TQ_GATHER_HOST), wanted);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(sources, "sources must be a sequence of arrays, one per component");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > TQ_MAX_COMPONENTS) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected 1 to %d source arrays, got %zd", who, self->name,
                     TQ_MAX_COMPONENTS, n);
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyArray_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s: queue '%U': expected numpy arrays as sources, got %R", who, self->name,
                         item);
            Py_DECREF(seq);
            return NULL;
        }
        char *lo;
        array_span((PyArrayObject *)item, &lo, &bytes[i]);
        ptrs[i] = lo;
        read_only[i] = !PyArray_ISWRITEABLE((PyArrayObject *)item);
    }
    Py_BEGIN_ALLOW_THREADS /* page-locking or uploading a large dataset takes seconds */
    code = tq_ring_gather_on_device(self->ring, ptrs, bytes, read_only, (int)n, (tq_gather_mechanism)mechanism, &used,
                                    &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(seq);
    if (code != TQ_OK)
        return raise_error(who, self, &err), NULL;
    return PyUnicode_FromString(tq_gather_mechanism_name(used));
}

PyObject *Ring_gather_on_host(RingObject *self, PyObject *unused)
{
    (void)unused;
    tq_error err;
    tq_code code;
    if (ring_usable(self, "Feeder"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS /* waits for the gathers in flight */
    code = tq_ring_gather_on_host(self->ring, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("Feeder", self, &err), NULL;
    Py_RETURN_NONE;
}

/* ---- shared staging, for worker processes ----------------------------------------------- */

/* The block that holds every slot's staging, into *shm: 0, or -1 with an exception naming who. */
static int staging_of(RingObject *self, const char *who, tq_shm *shm)
{
    tq_error err;
    if (ring_usable(self, who))
        return -1;
    if (tq_ring_staging(self->ring, shm, &err) != TQ_OK)
        return raise_error(who, self, &err);
    return 0;
}

/* staging_fd() -> a new descriptor (close-on-exec, the caller's to close) of
 * the block that holds every slot's staging. */
PyObject *Ring_staging_fd(RingObject *self, PyObject *unused)
{
    (void)unused;
    tq_shm shm;
    tq_error err;
    int fd;
    if (staging_of(self, "Ring.staging_fd", &shm))
        return NULL;
    if (tq_shm_dup_fd(&shm, &fd, &err) != TQ_OK)
        return raise_error("Ring.staging_fd", self, &err), NULL;
    return PyLong_FromLong(fd);
}

PyObject *Ring_slot_offset(RingObject *self, PyObject *arg)
{
    tq_error err;
    size_t offset;
    if (ring_usable(self, "Ring.slot_offset"))
        return NULL;
    /* _PyLong_AsInt is private (gone in Python 3.13): a long, range-checked here. */
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot < INT_MIN || slot > INT_MAX)
        return PyErr_Format(PyExc_OverflowError, "Ring.slot_offset: no slot %ld", slot);
    if (tq_ring_staging_offset(self->ring, (int)slot, &offset, &err) != TQ_OK)
        return raise_error("Ring.slot_offset", self, &err), NULL;
    return PyLong_FromSize_t(offset);
}

PyObject *Ring_swap_staging(RingObject *self, PyObject *args)
{
    tq_error err;
    int a, b;
    if (ring_usable(self, "Ring.swap_staging") || !PyArg_ParseTuple(args, "ii", &a, &b))
        return NULL;
    if (tq_ring_swap_staging(self->ring, a, b, &err) != TQ_OK)
        return raise_error("Ring.swap_staging", self, &err), NULL;
    Py_RETURN_NONE;
}

PyObject *Ring_get_staging_bytes(RingObject *self, void *unused)
{
    (void)unused;
    tq_shm shm;
    return staging_of(self, "Ring.staging_bytes", &shm) ? NULL : PyLong_FromSize_t(shm.bytes);
}

PyObject *Ring_get_component_offsets(RingObject *self, void *unused)
{
    (void)unused;
    if (ring_usable(self, "Ring.component_offsets"))
        return NULL;
    PyObject *out = PyTuple_New(self->n);
    for (int c = 0; out && c < self->n; c++) {
        PyObject *offset = PyLong_FromSize_t(tq_ring_component_offset(self->ring, c));
        if (!offset)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, c, offset);
    }
    return out;
}
