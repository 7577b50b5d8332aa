/*
 * tq_module.c: theano_queue._engine, the CPython face of the engine.
 *
 * Ring wraps a tq_ring with what Python needs around it: component names,
 * dtypes and shapes (to validate puts and build arrays), blocking waits that
 * release the GIL and wake for Ctrl-C, and the mapping of engine states to the
 * package's exceptions.  The same functions are exported to the Ops' C code
 * through the _C_API capsule (tq_capi.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <string.h>
#include <time.h>

#include "tq_backend.h"
#define TQ_CAPI_PROVIDER /* defines the table, imports nothing */
#include "tq_capi.h"
#include "tq_ring.h"

/* A blocked wait wakes this often to let Python handle signals (Ctrl-C). */
#define WAIT_SLICE_S 0.05
/* Copies larger than this release the GIL: worth the cost of taking it back. */
#define RELEASE_GIL_BYTES (256 * 1024)

static PyObject *QueueError, *QueueClosed, *QueueTimeout, *FeederError;

typedef struct {
    PyObject_HEAD
    tq_ring *ring;
    PyObject *name;          /* str, for messages */
    int n;                   /* components */
    PyObject *names;         /* tuple of str */
    PyArray_Descr **descrs;  /* n */
    int *ndims;              /* n */
    npy_intp (*shapes)[NPY_MAXDIMS];
    double timeout;          /* default for gets, < 0 for none */
    PyObject *failure;       /* the exception handed to fail(), or NULL */
    PyObject *weakrefs;
} RingObject;

static PyTypeObject RingType;

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- messages ------------------------------------------------------------------ */

/* "(128, 64)", or "(<=128, 64)" with bound_leading. */
static void format_shape(char *buf, size_t len, int ndim, const npy_intp *dims, int bound_leading)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s%lld", d ? ", " : "",
                                 d == 0 && bound_leading ? "<=" : "", (long long)dims[d]);
    if (used < len)
        snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
}

static const char *component_name(RingObject *self, int c)
{
    return PyUnicode_AsUTF8(PyTuple_GET_ITEM(self->names, c));
}

/* Sets the exception that an engine status means for `who`. */
static int raise_status(RingObject *self, tq_status status, const char *who, int producer)
{
    switch (status) {
    case TQ_CLOSED:
        if (producer)
            PyErr_Format(QueueClosed, "%s: queue '%U' is closed", who, self->name);
        else
            PyErr_Format(QueueClosed, "%s: queue '%U' is closed and drained", who, self->name);
        break;
    case TQ_FAILED:
        if (producer) {
            PyErr_Format(QueueClosed, "%s: queue '%U' failed and takes no more elements: %s", who,
                         self->name, tq_ring_error(self->ring));
        } else {
            PyObject *exc = PyObject_CallFunction(FeederError, "N",
                                                  PyUnicode_FromFormat("%s: queue '%U' failed: %s", who, self->name,
                                                                       tq_ring_error(self->ring)));
            if (!exc)
                return -1;
            if (self->failure) {
                Py_INCREF(self->failure);
                PyException_SetCause(exc, self->failure);
            }
            PyErr_SetObject(FeederError, exc);
            Py_DECREF(exc);
        }
        break;
    case TQ_TIMEOUT:
        PyErr_Format(QueueTimeout, "%s: queue '%U' timed out", who, self->name);
        break;
    default:
        PyErr_Format(QueueError, "%s: queue '%U': %s (%s)", who, self->name, tq_ring_error(self->ring),
                     tq_status_name(status));
    }
    return -1;
}

/* ---- blocking waits --------------------------------------------------------------- */

typedef tq_status (*reserve_fn)(tq_ring *, double, int *);

/* Reserves a slot through `reserve`, waiting up to timeout_s (< 0: forever)
 * with the GIL released, waking every WAIT_SLICE_S for signals. */
static int wait_for_slot(RingObject *self, reserve_fn reserve, double timeout_s, const char *who,
                         int producer, int *slot)
{
    /* The common case, an element or a slot already there, keeps the GIL:
     * giving it up costs more than the reservation itself. */
    tq_status status = reserve(self->ring, 0.0, slot);
    if (status != TQ_TIMEOUT)
        return status == TQ_OK ? 0 : raise_status(self, status, who, producer);

    double deadline = timeout_s < 0 ? -1.0 : monotonic_s() + timeout_s;
    for (;;) {
        double slice = WAIT_SLICE_S;
        if (deadline >= 0) {
            double left = deadline - monotonic_s();
            if (left < slice)
                slice = left > 0 ? left : 0;
        }
        Py_BEGIN_ALLOW_THREADS
        status = reserve(self->ring, slice, slot);
        Py_END_ALLOW_THREADS
        if (status == TQ_OK)
            return 0;
        if (status != TQ_TIMEOUT)
            return raise_status(self, status, who, producer);
        if (PyErr_CheckSignals())
            return -1;
        if (deadline >= 0 && monotonic_s() >= deadline) {
            char seconds[32];
            snprintf(seconds, sizeof seconds, "%g", timeout_s);
            PyErr_Format(QueueTimeout, "%s: queue '%U': %s within %s s", who, self->name,
                         producer ? "no free slot" : "no element", seconds);
            return -1;
        }
    }
}

static void copy_bytes(void *dst, const void *src, size_t bytes)
{
    if (bytes >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        memcpy(dst, src, bytes);
        Py_END_ALLOW_THREADS
    } else if (bytes) {
        memcpy(dst, src, bytes);
    }
}

/* ---- put ----------------------------------------------------------------------- */

/* A C-contiguous array for component c that fits its slot, or NULL with a
 * TypeError/ValueError naming the component, what it expects and what came. */
static PyArrayObject *checked_component(RingObject *self, const char *who, int c, PyObject *obj)
{
    PyArray_Descr *want = self->descrs[c];
    PyArrayObject *arr;
    if (PyArray_Check(obj)) {
        if (!PyArray_EquivTypes(PyArray_DESCR((PyArrayObject *)obj), want)) {
            PyErr_Format(PyExc_TypeError, "%s: queue '%U', component '%s': expected dtype %S, got %S", who,
                         self->name, component_name(self, c), (PyObject *)want,
                         (PyObject *)PyArray_DESCR((PyArrayObject *)obj));
            return NULL;
        }
        Py_INCREF(obj);
        arr = (PyArrayObject *)obj;
    } else {
        /* Python numbers and lists take the component's dtype. */
        Py_INCREF(want);
        arr = (PyArrayObject *)PyArray_FromAny(obj, want, 0, 0, NPY_ARRAY_CARRAY, NULL);
        if (!arr)
            return NULL;
    }

    int ndim = self->ndims[c];
    const npy_intp *want_dims = self->shapes[c];
    char want_s[256], got_s[256];
    format_shape(want_s, sizeof want_s, ndim, want_dims, 1);
    format_shape(got_s, sizeof got_s, PyArray_NDIM(arr), PyArray_DIMS(arr), 0);
    if (PyArray_NDIM(arr) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U', component '%s': expected %d dimensions, shape %s; got %d, shape %s",
                     who, self->name, component_name(self, c), ndim, want_s, PyArray_NDIM(arr), got_s);
        goto fail;
    }
    for (int d = 0; d < ndim; d++) {
        npy_intp got = PyArray_DIM(arr, d);
        if (d == 0 ? got > want_dims[0] : got != want_dims[d]) {
            PyErr_Format(PyExc_ValueError, "%s: queue '%U', component '%s': expected shape %s, got %s", who,
                         self->name, component_name(self, c), want_s, got_s);
            goto fail;
        }
    }
    PyArrayObject *contiguous = PyArray_GETCONTIGUOUS(arr);
    Py_DECREF(arr);
    return contiguous;
fail:
    Py_DECREF(arr);
    return NULL;
}

/* Puts one element; returns the queue's size afterwards, or -1. */
static Py_ssize_t put_element(RingObject *self, const char *who, PyObject *arrays, double timeout_s)
{
    PyArrayObject *parts[TQ_MAX_COMPONENTS] = {NULL};
    int64_t rows[TQ_MAX_COMPONENTS];
    Py_ssize_t result = -1;
    int slot;

    PyObject *seq = PySequence_Fast(arrays, "an element is a sequence of arrays, one per component");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != self->n) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *names = sep ? PyUnicode_Join(sep, self->names) : NULL;
        Py_XDECREF(sep);
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected %d components (%U), got %zd", who, self->name,
                     self->n, names ? names : self->name, PySequence_Fast_GET_SIZE(seq));
        Py_XDECREF(names);
        goto done;
    }
    /* Every check before the reservation: bad input costs the queue nothing. */
    for (int c = 0; c < self->n; c++) {
        parts[c] = checked_component(self, who, c, PySequence_Fast_GET_ITEM(seq, c));
        if (!parts[c])
            goto done;
        rows[c] = self->ndims[c] ? PyArray_DIM(parts[c], 0) : 1;
    }
    if (wait_for_slot(self, tq_ring_reserve_put, timeout_s, who, 1, &slot))
        goto done;
    for (int c = 0; c < self->n; c++)
        copy_bytes(tq_ring_write_ptr(self->ring, slot, c), PyArray_DATA(parts[c]), (size_t)PyArray_NBYTES(parts[c]));
    tq_status status = tq_ring_commit_put(self->ring, slot, rows);
    if (status != TQ_OK)
        raise_status(self, status, who, 1);
    else
        result = tq_ring_size(self->ring);
done:
    for (int c = 0; c < self->n; c++)
        Py_XDECREF(parts[c]);
    Py_DECREF(seq);
    return result;
}

/* ---- get ---------------------------------------------------------------------- */

static int element_shape(RingObject *self, int slot, int c, npy_intp *dims)
{
    int ndim = self->ndims[c];
    for (int d = 0; d < ndim; d++)
        dims[d] = self->shapes[c][d];
    if (ndim)
        dims[0] = (npy_intp)tq_ring_rows(self->ring, slot, c);
    return ndim;
}

static size_t element_bytes(RingObject *self, int slot, int c)
{
    return (size_t)tq_ring_rows(self->ring, slot, c) * tq_ring_component(self->ring, c)->row_bytes;
}

/* A tuple of new arrays holding the next element, or NULL. */
static PyObject *get_element(RingObject *self, const char *who, double timeout_s)
{
    int slot;
    if (wait_for_slot(self, tq_ring_reserve_get, timeout_s, who, 0, &slot))
        return NULL;
    PyObject *out = PyTuple_New(self->n);
    for (int c = 0; out && c < self->n; c++) {
        npy_intp dims[NPY_MAXDIMS];
        int ndim = element_shape(self, slot, c, dims);
        Py_INCREF(self->descrs[c]);
        PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, self->descrs[c], ndim, dims, NULL, NULL, 0, NULL);
        if (!arr) {
            Py_CLEAR(out);
            break;
        }
        copy_bytes(PyArray_DATA((PyArrayObject *)arr), tq_ring_read_ptr(self->ring, slot, c),
                   element_bytes(self, slot, c));
        PyTuple_SET_ITEM(out, c, arr);
    }
    tq_ring_release_get(self->ring, slot);
    return out;
}

/* ---- the Ring type ---------------------------------------------------------------- */

static int parse_timeout(PyObject *obj, double *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = -1.0;
        return 0;
    }
    double t = PyFloat_AsDouble(obj);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (t < 0 || t != t) {
        PyErr_Format(PyExc_ValueError, "timeout must be None or a number >= 0, got %R", obj);
        return -1;
    }
    *out = t;
    return 0;
}

static int Ring_init(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "components", "capacity", "timeout", NULL};
    PyObject *name, *components, *timeout = Py_None;
    int capacity;
    tq_component comps[TQ_MAX_COMPONENTS];

    if (self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UOi|O", kwlist, &name, &components, &capacity, &timeout))
        return -1;
    if (parse_timeout(timeout, &self->timeout))
        return -1;
    PyObject *seq = PySequence_Fast(components, "components must be a sequence of (name, dtype, shape)");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > TQ_MAX_COMPONENTS) {
        PyErr_Format(PyExc_ValueError, "Queue '%U': expected 1 to %d components, got %zd", name,
                     TQ_MAX_COMPONENTS, n);
        goto fail;
    }
    self->n = (int)n;
    self->names = PyTuple_New(n);
    self->descrs = PyMem_Calloc((size_t)n, sizeof *self->descrs);
    self->ndims = PyMem_Calloc((size_t)n, sizeof *self->ndims);
    self->shapes = PyMem_Calloc((size_t)n, sizeof *self->shapes);
    if (!self->names || !self->descrs || !self->ndims || !self->shapes) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t c = 0; c < n; c++) {
        PyObject *cname, *dtype, *shape;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, c), "UOO", &cname, &dtype, &shape))
            goto fail;
        Py_INCREF(cname);
        PyTuple_SET_ITEM(self->names, c, cname);
        if (!PyArray_DescrConverter(dtype, &self->descrs[c]))
            goto fail;
        PyArray_Dims dims = {NULL, 0};
        if (!PyArray_IntpConverter(shape, &dims))
            goto fail;
        self->ndims[c] = dims.len;
        memcpy(self->shapes[c], dims.ptr, (size_t)dims.len * sizeof(npy_intp));
        PyDimMem_FREE(dims.ptr);
        size_t row_bytes = (size_t)self->descrs[c]->elsize;
        for (int d = 1; d < self->ndims[c]; d++)
            row_bytes *= (size_t)self->shapes[c][d];
        comps[c].row_bytes = row_bytes;
        comps[c].max_rows = self->ndims[c] ? self->shapes[c][0] : 1;
    }
    Py_INCREF(name);
    self->name = name;

    char err[TQ_ERRLEN] = "";
    tq_backend *backend = tq_host_backend_create();
    if (!backend) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    self->ring = tq_ring_create(comps, self->n, capacity, backend, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (!self->ring) {
        PyErr_Format(PyExc_ValueError, "Queue '%U': %s", name, err);
        goto fail;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

static void Ring_dealloc(RingObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->ring) {
        tq_ring *ring = self->ring;
        self->ring = NULL;
        Py_BEGIN_ALLOW_THREADS /* a device backend may wait for its copies */
        tq_ring_destroy(ring);
        Py_END_ALLOW_THREADS
    }
    if (self->descrs)
        for (int c = 0; c < self->n; c++)
            Py_XDECREF(self->descrs[c]);
    PyMem_Free(self->descrs);
    PyMem_Free(self->ndims);
    PyMem_Free(self->shapes);
    Py_XDECREF(self->names);
    Py_XDECREF(self->name);
    Py_XDECREF(self->failure);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(RingObject *self)
{
    if (!self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is not initialised");
        return 0;
    }
    return 1;
}

static PyObject *Ring_put(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"arrays", "timeout", NULL};
    PyObject *arrays, *timeout = Py_None;
    double t;
    if (!ready(self) || !PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &arrays, &timeout) ||
        parse_timeout(timeout, &t))
        return NULL;
    Py_ssize_t size = put_element(self, "Queue.put", arrays, t);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

static PyObject *Ring_get(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    double t;
    if (!ready(self) || !PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &timeout))
        return NULL;
    if (timeout == NULL)
        t = self->timeout;
    else if (parse_timeout(timeout, &t))
        return NULL;
    return get_element(self, "Queue.get", t);
}

static PyObject *Ring_close(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cancel_pending", NULL};
    int cancel = 0;
    if (!ready(self) || !PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &cancel))
        return NULL;
    tq_ring_close(self->ring, cancel);
    Py_RETURN_NONE;
}

static PyObject *Ring_fail(RingObject *self, PyObject *exc)
{
    if (!ready(self))
        return NULL;
    if (!PyExceptionInstance_Check(exc)) {
        PyErr_Format(PyExc_TypeError, "Ring.fail takes an exception instance, got %R", exc);
        return NULL;
    }
    PyObject *text = PyUnicode_FromFormat("%s: %S", Py_TYPE(exc)->tp_name, exc);
    if (!text)
        return NULL;
    Py_INCREF(exc);
    Py_XSETREF(self->failure, exc);
    tq_ring_fail(self->ring, PyUnicode_AsUTF8(text));
    Py_DECREF(text);
    Py_RETURN_NONE;
}

static PyObject *Ring_reopen(RingObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    if (tq_ring_reopen(self->ring) != TQ_OK) {
        PyErr_Format(QueueError,
                     "Queue.reopen: queue '%U' still holds %d element(s); drain it, or close it with "
                     "cancel_pending=True, first",
                     self->name, tq_ring_size(self->ring));
        return NULL;
    }
    Py_CLEAR(self->failure);
    Py_RETURN_NONE;
}

static PyObject *Ring_size(RingObject *self, PyObject *unused)
{
    (void)unused;
    return ready(self) ? PyLong_FromLong(tq_ring_size(self->ring)) : NULL;
}

static PyObject *Ring_stats(RingObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    tq_stats s;
    tq_ring_stats(self->ring, &s);
    static const char *state_names[] = {"open", "closed", "failed"};
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:i,s:i,s:s,s:s}", "enqueued", s.enqueued, "dequeued",
                         s.dequeued, "dropped", s.dropped, "bytes", s.bytes_in, "bytes_in", s.bytes_in, "bytes_out",
                         s.bytes_out, "producer_wait_s", s.producer_wait_s, "consumer_wait_s", s.consumer_wait_s,
                         "size", s.size, "capacity", s.capacity, "state", state_names[s.state], "backend",
                         tq_ring_backend(self->ring)->name);
}

static PyObject *Ring_get_closed(RingObject *self, void *unused)
{
    (void)unused;
    return ready(self) ? PyBool_FromLong(tq_ring_state(self->ring) != TQ_STATE_OPEN) : NULL;
}

static PyObject *Ring_get_capacity(RingObject *self, void *unused)
{
    (void)unused;
    return ready(self) ? PyLong_FromLong(tq_ring_capacity(self->ring)) : NULL;
}

static PyObject *Ring_get_timeout(RingObject *self, void *unused)
{
    (void)unused;
    return self->timeout < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(self->timeout);
}

static int Ring_set_timeout(RingObject *self, PyObject *value, void *unused)
{
    (void)unused;
    return parse_timeout(value, &self->timeout);
}

static PyMethodDef Ring_methods[] = {
    {"put", (PyCFunction)(void (*)(void))Ring_put, METH_VARARGS | METH_KEYWORDS,
     "put(arrays, timeout=None) -> size: validate and put one element, waiting for a free slot."},
    {"get", (PyCFunction)(void (*)(void))Ring_get, METH_VARARGS | METH_KEYWORDS,
     "get(timeout=<ring's>) -> tuple of arrays: take the next element, waiting for one."},
    {"close", (PyCFunction)(void (*)(void))Ring_close, METH_VARARGS | METH_KEYWORDS,
     "close(cancel_pending=False): no more puts; consumers drain what is left (or nothing)."},
    {"fail", (PyCFunction)Ring_fail, METH_O, "fail(exc): consumers get FeederError (cause: exc) once drained."},
    {"reopen", (PyCFunction)Ring_reopen, METH_NOARGS, "reopen(): open a closed, drained ring again."},
    {"size", (PyCFunction)Ring_size, METH_NOARGS, "size() -> elements ready to be taken."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> dict of counters."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"closed", (getter)Ring_get_closed, NULL, "True once closed or failed.", NULL},
    {"capacity", (getter)Ring_get_capacity, NULL, "Number of slots.", NULL},
    {"timeout", (getter)Ring_get_timeout, (setter)Ring_set_timeout, "Default get timeout in seconds.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "theano_queue._engine.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(name, components, capacity, timeout=None): the engine's ring of slots.",
    .tp_weaklistoffset = offsetof(RingObject, weakrefs),
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
    .tp_init = (initproc)Ring_init,
    .tp_new = PyType_GenericNew,
};

/* ---- C API for the Ops ------------------------------------------------------------- */

static PyObject *capi_resolve(PyObject *token, const char *who)
{
    PyObject *ring = PyWeakref_Check(token) ? PyWeakref_GetObject(token) : token;
    if (ring == Py_None) {
        PyErr_Format(QueueError,
                     "%s: its queue was deleted while a compiled function still uses it; keep the Queue "
                     "alive as long as the functions that dequeue from it or enqueue into it",
                     who);
        return NULL;
    }
    if (!PyObject_TypeCheck(ring, &RingType) || !((RingObject *)ring)->ring) {
        PyErr_Format(PyExc_TypeError, "%s: expected a queue token, got %R", who, ring);
        return NULL;
    }
    Py_INCREF(ring);
    return ring;
}

static int capi_get_begin(PyObject *ring, const char *who, int *slot)
{
    RingObject *self = (RingObject *)ring;
    return wait_for_slot(self, tq_ring_reserve_get, self->timeout, who, 0, slot);
}

static int capi_element_shape(PyObject *ring, int slot, int c, intptr_t *dims)
{
    return element_shape((RingObject *)ring, slot, c, (npy_intp *)dims);
}

static const void *capi_read_ptr(PyObject *ring, int slot, int c)
{
    return tq_ring_read_ptr(((RingObject *)ring)->ring, slot, c);
}

static size_t capi_element_bytes(PyObject *ring, int slot, int c)
{
    return element_bytes((RingObject *)ring, slot, c);
}

static void capi_get_end(PyObject *ring, int slot) { tq_ring_release_get(((RingObject *)ring)->ring, slot); }

static Py_ssize_t capi_put(PyObject *ring, const char *who, PyObject *arrays)
{
    RingObject *self = (RingObject *)ring;
    return put_element(self, who, arrays, self->timeout);
}

static void *capi_engine(PyObject *ring) { return ((RingObject *)ring)->ring; }

static tq_capi_t capi = {
    TQ_CAPI_VERSION, capi_resolve,  capi_get_begin, capi_element_shape, capi_read_ptr,
    capi_element_bytes, capi_get_end, capi_put, capi_engine,
};

/* ---- module ------------------------------------------------------------------ */

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "theano_queue._engine",
    "The queue engine (c_code/tq_ring.c) and its Python face.", -1, NULL, NULL, NULL, NULL, NULL,
};

static int import_errors(void)
{
    PyObject *errors = PyImport_ImportModule("theano_queue.errors");
    if (!errors)
        return -1;
    QueueError = PyObject_GetAttrString(errors, "QueueError");
    QueueClosed = PyObject_GetAttrString(errors, "QueueClosed");
    QueueTimeout = PyObject_GetAttrString(errors, "QueueTimeout");
    FeederError = PyObject_GetAttrString(errors, "FeederError");
    Py_DECREF(errors);
    return QueueError && QueueClosed && QueueTimeout && FeederError ? 0 : -1;
}

PyMODINIT_FUNC PyInit__engine(void)
{
    import_array();
    if (import_errors() || PyType_Ready(&RingType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    Py_INCREF(&RingType);
    PyObject *api = PyCapsule_New(&capi, "theano_queue._engine._C_API", NULL);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0 || !api ||
        PyModule_AddObject(m, "_C_API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_COMPONENTS", TQ_MAX_COMPONENTS);
    PyModule_AddIntConstant(m, "MAX_CAPACITY", TQ_MAX_CAPACITY);
    return m;
}
