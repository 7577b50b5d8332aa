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

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tq_backend.h"
#include "tq_copy.h"
#include "tq_cuda.h"
#define TQ_CAPI_PROVIDER /* defines the table, imports nothing */
#include "tq_capi.h"
#include "tq_ring.h"

/* A blocked wait wakes this often to let Python handle signals (Ctrl-C). */
#define WAIT_SLICE_S 0.05
/* Copies larger than this release the GIL: worth the cost of taking it back. */
#define RELEASE_GIL_BYTES (256 * 1024)

static PyObject *QueueError, *QueueClosed, *QueueTimeout, *FeederError, *CudaError;

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
    case TQ_EBACKEND:
        PyErr_Format(tq_backend_is_cuda(tq_ring_backend(self->ring)) ? CudaError : QueueError, "%s: queue '%U': %s",
                     who, self->name, tq_ring_error(self->ring));
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

/* The pool that splits large host copies over threads (tq_copy.c). */
static tq_copier *copier;

static void copy_bytes(void *dst, const void *src, size_t bytes)
{
    if (bytes >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        tq_copier_copy(copier, dst, src, bytes);
        Py_END_ALLOW_THREADS
    } else if (bytes) {
        memcpy(dst, src, bytes);
    }
}

/* ---- put ----------------------------------------------------------------------- */

/* 0 when an array of this shape fits component c, else -1 with a ValueError
 * naming the component, what it expects and what came. */
static int check_dims(RingObject *self, const char *who, int c, int ndim, const npy_intp *dims)
{
    int want_ndim = self->ndims[c];
    const npy_intp *want = self->shapes[c];
    int fits = ndim == want_ndim;
    for (int d = 0; fits && d < ndim; d++)
        fits = d == 0 ? dims[0] <= want[0] : dims[d] == want[d];
    if (fits)
        return 0;
    char want_s[256], got_s[256];
    format_shape(want_s, sizeof want_s, want_ndim, want, 1);
    format_shape(got_s, sizeof got_s, ndim, dims, 0);
    if (ndim != want_ndim)
        PyErr_Format(PyExc_ValueError, "%s: queue '%U', component '%s': expected %d dimensions, shape %s; got %d, shape %s",
                     who, self->name, component_name(self, c), want_ndim, want_s, ndim, got_s);
    else
        PyErr_Format(PyExc_ValueError, "%s: queue '%U', component '%s': expected shape %s, got %s", who, self->name,
                     component_name(self, c), want_s, got_s);
    return -1;
}

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

    if (check_dims(self, who, c, PyArray_NDIM(arr), PyArray_DIMS(arr)))
        goto fail;
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
    tq_status status;
    Py_BEGIN_ALLOW_THREADS /* a device backend waits here until the slot's staging is free */
    status = tq_ring_begin_host_write(self->ring, slot);
    Py_END_ALLOW_THREADS
    if (status != TQ_OK) {
        raise_status(self, status, who, 1);
        goto done;
    }
    const void *sources[TQ_MAX_COMPONENTS];
    tq_backend *backend = tq_ring_backend(self->ring);
    for (int c = 0; c < self->n; c++) {
        size_t bytes = (size_t)PyArray_NBYTES(parts[c]);
        /* Page-locked user memory goes over the bus as it is: no staging copy. */
        sources[c] = tq_backend_is_cuda(backend) && tq_cuda_is_registered(backend, PyArray_DATA(parts[c]), bytes)
                         ? PyArray_DATA(parts[c])
                         : NULL;
        if (!sources[c])
            copy_bytes(tq_ring_write_ptr(self->ring, slot, c), PyArray_DATA(parts[c]), bytes);
    }
    Py_BEGIN_ALLOW_THREADS /* a device backend may wait on its own locks */
    status = tq_ring_commit_put(self->ring, slot, rows, sources);
    Py_END_ALLOW_THREADS
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

/* Copies component c of a reserved element into host memory at dst. */
static int read_component(RingObject *self, const char *who, int slot, int c, void *dst)
{
    tq_status status;
    if (!tq_backend_is_cuda(tq_ring_backend(self->ring))) {
        copy_bytes(dst, tq_ring_read_ptr(self->ring, slot, c), element_bytes(self, slot, c));
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    status = tq_ring_read_to_host(self->ring, slot, c, dst);
    Py_END_ALLOW_THREADS
    return status == TQ_OK ? 0 : raise_status(self, status, who, 0);
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
        PyTuple_SET_ITEM(out, c, arr);
        if (read_component(self, "Queue.get", slot, c, PyArray_DATA((PyArrayObject *)arr)))
            Py_CLEAR(out);
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

/* Host memory for gpu_context None, else the device of a libgpuarray context
 * given as its address (pygpu's GpuContext.ptr). */
static tq_backend *make_backend(PyObject *gpu_context, char *err, size_t errlen)
{
    if (gpu_context == Py_None) {
        tq_backend *backend = tq_host_backend_create();
        if (!backend)
            snprintf(err, errlen, "out of host memory");
        return backend;
    }
    void *gpucontext = PyLong_AsVoidPtr(gpu_context), *cu_context = NULL;
    if (!gpucontext) {
        PyErr_Clear();
        snprintf(err, errlen, "gpu_context must be a libgpuarray context's address");
        return NULL;
    }
    if (tq_cuda_context_of_gpuarray(gpucontext, &cu_context, err, errlen))
        return NULL;
    return tq_cuda_backend_create(cu_context, err, errlen);
}

static int Ring_init(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "components", "capacity", "timeout", "gpu_context", NULL};
    PyObject *name, *components, *timeout = Py_None, *gpu_context = Py_None;
    int capacity;
    tq_component comps[TQ_MAX_COMPONENTS];

    if (self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UOi|OO", kwlist, &name, &components, &capacity, &timeout,
                                     &gpu_context))
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
    tq_backend *backend = make_backend(gpu_context, err, sizeof err);
    if (!backend) {
        PyErr_Format(CudaError, "Queue '%U': %s", name, err);
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


/* ---- writing in place --------------------------------------------------------------- */

static int check_slot(RingObject *self, int slot)
{
    if (slot < 0 || slot >= tq_ring_capacity(self->ring)) {
        PyErr_Format(PyExc_ValueError, "queue '%U': no slot %d", self->name, slot);
        return -1;
    }
    return 0;
}

/* reserve(timeout) -> (slot, views): writable arrays of full shape over the
 * slot's (pinned, for a GPU queue) staging, to be filled and committed. */
static PyObject *Ring_reserve(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    double t;
    int slot;
    if (!ready(self) || !PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &timeout) ||
        parse_timeout(timeout, &t))
        return NULL;
    if (wait_for_slot(self, tq_ring_reserve_put, t, "Queue.writer", 1, &slot))
        return NULL;
    tq_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tq_ring_begin_host_write(self->ring, slot);
    Py_END_ALLOW_THREADS
    if (status != TQ_OK)
        return raise_status(self, status, "Queue.writer", 1), NULL;
    PyObject *views = PyTuple_New(self->n);
    for (int c = 0; views && c < self->n; c++) {
        Py_INCREF(self->descrs[c]);
        PyObject *view = PyArray_NewFromDescr(&PyArray_Type, self->descrs[c], self->ndims[c], self->shapes[c], NULL,
                                              tq_ring_write_ptr(self->ring, slot, c),
                                              NPY_ARRAY_CARRAY, NULL);
        if (!view || (Py_INCREF(self), PyArray_SetBaseObject((PyArrayObject *)view, (PyObject *)self) < 0)) {
            Py_XDECREF(view);
            Py_CLEAR(views);
            break;
        }
        PyTuple_SET_ITEM(views, c, view);
    }
    if (!views) {
        tq_ring_abort_put(self->ring, slot);
        return NULL;
    }
    return Py_BuildValue("(iN)", slot, views);
}

/* commit(slot, rows) -> size: publish a slot written in place; rows per component. */
static PyObject *Ring_commit(RingObject *self, PyObject *args)
{
    int slot;
    PyObject *rows_obj;
    int64_t rows[TQ_MAX_COMPONENTS];
    if (!ready(self) || !PyArg_ParseTuple(args, "iO", &slot, &rows_obj) || check_slot(self, slot))
        return NULL;
    PyObject *seq = PySequence_Fast(rows_obj, "rows must be a sequence, one count per component");
    if (!seq)
        return NULL;
    int bad = PySequence_Fast_GET_SIZE(seq) != self->n;
    for (int c = 0; !bad && c < self->n; c++) {
        rows[c] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, c));
        int64_t max = self->ndims[c] ? self->shapes[c][0] : 1;
        bad = (rows[c] == -1 && PyErr_Occurred()) || rows[c] < 0 || rows[c] > max;
    }
    Py_DECREF(seq);
    if (bad) {
        PyErr_Clear();
        tq_ring_abort_put(self->ring, slot);
        PyErr_Format(PyExc_ValueError, "Queue.writer: queue '%U': rows %R do not fit the components; the element was dropped",
                     self->name, rows_obj);
        return NULL;
    }
    tq_status status;
    Py_BEGIN_ALLOW_THREADS
    status = tq_ring_commit_put(self->ring, slot, rows, NULL);
    Py_END_ALLOW_THREADS
    if (status != TQ_OK)
        return raise_status(self, status, "Queue.writer", 1), NULL;
    return PyLong_FromLong(tq_ring_size(self->ring));
}

static PyObject *Ring_abort(RingObject *self, PyObject *args)
{
    int slot;
    if (!ready(self) || !PyArg_ParseTuple(args, "i", &slot) || check_slot(self, slot))
        return NULL;
    tq_ring_abort_put(self->ring, slot);
    Py_RETURN_NONE;
}

/* ---- page-locked user memory -------------------------------------------------------- */

static tq_backend *cuda_backend_or_raise(RingObject *self, const char *who)
{
    tq_backend *backend = tq_ring_backend(self->ring);
    if (!tq_backend_is_cuda(backend)) {
        PyErr_Format(QueueError, "%s: queue '%U' lives in host memory; only GPU queues copy from registered memory",
                     who, self->name);
        return NULL;
    }
    return backend;
}

static PyObject *Ring_register_host(RingObject *self, PyObject *array)
{
    char err[TQ_ERRLEN] = "";
    tq_backend *backend = ready(self) ? cuda_backend_or_raise(self, "Queue.register_host") : NULL;
    if (!backend)
        return NULL;
    if (!PyArray_Check(array) || !PyArray_ISCARRAY((PyArrayObject *)array)) {
        PyErr_SetString(PyExc_TypeError, "Queue.register_host: expected a C-contiguous, writeable numpy array");
        return NULL;
    }
    int rc;
    void *data = PyArray_DATA((PyArrayObject *)array);
    size_t bytes = (size_t)PyArray_NBYTES((PyArrayObject *)array);
    Py_BEGIN_ALLOW_THREADS
    rc = tq_cuda_register_host(backend, data, bytes, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_Format(CudaError, "Queue.register_host: queue '%U': %s", self->name, err);
    Py_RETURN_NONE;
}

static PyObject *Ring_unregister_host(RingObject *self, PyObject *array)
{
    char err[TQ_ERRLEN] = "";
    tq_backend *backend = ready(self) ? cuda_backend_or_raise(self, "Queue.unregister_host") : NULL;
    if (!backend)
        return NULL;
    if (!PyArray_Check(array)) {
        PyErr_SetString(PyExc_TypeError, "Queue.unregister_host: expected a numpy array");
        return NULL;
    }
    int rc;
    void *data = PyArray_DATA((PyArrayObject *)array);
    Py_BEGIN_ALLOW_THREADS
    rc = tq_cuda_unregister_host(backend, data, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_Format(CudaError, "Queue.unregister_host: queue '%U': %s", self->name, err);
    Py_RETURN_NONE;
}

/* ---- shared staging, for worker processes ------------------------------------------- */

/* staging_fd() -> a new descriptor (close-on-exec, the caller's to close) of
 * the block that holds every slot's staging. */
static PyObject *Ring_staging_fd(RingObject *self, PyObject *unused)
{
    (void)unused;
    int fd;
    void *base;
    size_t bytes;
    if (!ready(self))
        return NULL;
    tq_ring_staging(self->ring, &fd, &base, &bytes);
    if (fd < 0)
        return PyErr_Format(QueueError,
                            "queue '%U': its staging has no file descriptor (this system has neither memfd_create "
                            "nor POSIX shared memory); only fork()ed processes share it",
                            self->name);
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(dup);
}

static PyObject *Ring_slot_offset(RingObject *self, PyObject *arg)
{
    int slot = _PyLong_AsInt(arg);
    if (!ready(self) || (slot == -1 && PyErr_Occurred()) || check_slot(self, slot))
        return NULL;
    return PyLong_FromSize_t(tq_ring_staging_offset(self->ring, slot));
}

static PyObject *Ring_swap_staging(RingObject *self, PyObject *args)
{
    int a, b;
    if (!ready(self) || !PyArg_ParseTuple(args, "ii", &a, &b) || check_slot(self, a) || check_slot(self, b))
        return NULL;
    if (tq_ring_swap_staging(self->ring, a, b) != TQ_OK)
        return PyErr_Format(QueueError, "queue '%U': swap_staging(%d, %d): both slots must be reserved and not yet "
                            "committed", self->name, a, b);
    Py_RETURN_NONE;
}

static PyObject *Ring_get_staging_bytes(RingObject *self, void *unused)
{
    (void)unused;
    int fd;
    void *base;
    size_t bytes;
    if (!ready(self))
        return NULL;
    tq_ring_staging(self->ring, &fd, &base, &bytes);
    return PyLong_FromSize_t(bytes);
}

static PyObject *Ring_get_component_offsets(RingObject *self, void *unused)
{
    (void)unused;
    if (!ready(self))
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

static PyObject *Ring_get_on_gpu(RingObject *self, void *unused)
{
    (void)unused;
    return ready(self) ? PyBool_FromLong(tq_backend_is_cuda(tq_ring_backend(self->ring))) : NULL;
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
    {"reserve", (PyCFunction)(void (*)(void))Ring_reserve, METH_VARARGS | METH_KEYWORDS,
     "reserve(timeout=None) -> (slot, views): writable views over a free slot's staging."},
    {"commit", (PyCFunction)Ring_commit, METH_VARARGS, "commit(slot, rows) -> size: publish a reserved slot."},
    {"abort", (PyCFunction)Ring_abort, METH_VARARGS, "abort(slot): give a reserved slot up."},
    {"register_host", (PyCFunction)Ring_register_host, METH_O,
     "register_host(array): page-lock it; puts of its slices then skip the staging copy."},
    {"unregister_host", (PyCFunction)Ring_unregister_host, METH_O, "unregister_host(array): undo register_host."},
    {"staging_fd", (PyCFunction)Ring_staging_fd, METH_NOARGS,
     "staging_fd() -> fd: a new descriptor of the shared block holding every slot's staging (caller closes it)."},
    {"slot_offset", (PyCFunction)Ring_slot_offset, METH_O,
     "slot_offset(slot) -> bytes from the start of the shared staging to the slot's staging."},
    {"swap_staging", (PyCFunction)Ring_swap_staging, METH_VARARGS,
     "swap_staging(a, b): exchange the staging of two reserved, uncommitted slots."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"closed", (getter)Ring_get_closed, NULL, "True once closed or failed.", NULL},
    {"capacity", (getter)Ring_get_capacity, NULL, "Number of slots.", NULL},
    {"on_gpu", (getter)Ring_get_on_gpu, NULL, "True when the slots live on a GPU.", NULL},
    {"timeout", (getter)Ring_get_timeout, (setter)Ring_set_timeout, "Default get timeout in seconds.", NULL},
    {"staging_bytes", (getter)Ring_get_staging_bytes, NULL, "Size of the shared staging block (see staging_fd).",
     NULL},
    {"component_offsets", (getter)Ring_get_component_offsets, NULL,
     "Byte offset of each component within a slot's staging.", NULL},
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

static int capi_copy_to_host(PyObject *ring, const char *who, int slot, int c, void *dst)
{
    return read_component((RingObject *)ring, who, slot, c, dst);
}

static int capi_on_gpu(PyObject *ring) { return tq_backend_is_cuda(tq_ring_backend(((RingObject *)ring)->ring)); }

/* Offsets and byte counts of an element's components in its slot. */
static void element_extents(RingObject *self, const int64_t *rows, size_t *offsets, size_t *bytes)
{
    for (int c = 0; c < self->n; c++) {
        offsets[c] = tq_ring_component_offset(self->ring, c);
        bytes[c] = (size_t)rows[c] * tq_ring_component(self->ring, c)->row_bytes;
    }
}

static int capi_gpu_take(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *dsts)
{
    RingObject *self = (RingObject *)ring;
    int64_t rows[TQ_MAX_COMPONENTS];
    size_t offsets[TQ_MAX_COMPONENTS], bytes[TQ_MAX_COMPONENTS];
    char err[TQ_ERRLEN] = "";
    for (int c = 0; c < self->n; c++)
        rows[c] = tq_ring_rows(self->ring, slot, c);
    element_extents(self, rows, offsets, bytes);
    if (tq_cuda_take(tq_ring_backend(self->ring), slot, stream, self->n, offsets, bytes, dsts, err, sizeof err)) {
        PyErr_Format(CudaError, "%s: queue '%U': %s", who, self->name, err);
        return -1;
    }
    return 0;
}

static int capi_check_shape(PyObject *ring, const char *who, int c, int ndim, const intptr_t *dims)
{
    return check_dims((RingObject *)ring, who, c, ndim, (const npy_intp *)dims);
}

static int capi_put_begin(PyObject *ring, const char *who, int *slot)
{
    RingObject *self = (RingObject *)ring;
    return wait_for_slot(self, tq_ring_reserve_put, self->timeout, who, 1, slot);
}

static Py_ssize_t capi_gpu_put(PyObject *ring, const char *who, int slot, void *stream, const uint64_t *srcs,
                               const int64_t *rows)
{
    RingObject *self = (RingObject *)ring;
    size_t offsets[TQ_MAX_COMPONENTS], bytes[TQ_MAX_COMPONENTS];
    char err[TQ_ERRLEN] = "";
    element_extents(self, rows, offsets, bytes);
    if (tq_cuda_put_from_device(tq_ring_backend(self->ring), slot, stream, self->n, offsets, bytes, srcs, err,
                                sizeof err)) {
        tq_ring_abort_put(self->ring, slot);
        PyErr_Format(CudaError, "%s: queue '%U': %s", who, self->name, err);
        return -1;
    }
    tq_status status = tq_ring_commit_put_published(self->ring, slot, rows);
    if (status != TQ_OK)
        return raise_status(self, status, who, 1);
    return tq_ring_size(self->ring);
}

static void capi_put_abort(PyObject *ring, int slot) { tq_ring_abort_put(((RingObject *)ring)->ring, slot); }

static tq_capi_t capi = {
    .version = TQ_CAPI_VERSION,
    .resolve = capi_resolve,
    .get_begin = capi_get_begin,
    .element_shape = capi_element_shape,
    .element_bytes = capi_element_bytes,
    .copy_to_host = capi_copy_to_host,
    .get_end = capi_get_end,
    .put = capi_put,
    .on_gpu = capi_on_gpu,
    .gpu_take = capi_gpu_take,
    .check_shape = capi_check_shape,
    .put_begin = capi_put_begin,
    .gpu_put = capi_gpu_put,
    .put_abort = capi_put_abort,
};

/* ---- module ------------------------------------------------------------------ */

static PyObject *cuda_allocated(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    uint64_t device, pinned;
    tq_cuda_allocated(&device, &pinned);
    return Py_BuildValue("{s:K,s:K}", "device", device, "pinned", pinned);
}

static PyObject *cuda_mem_info(PyObject *module, PyObject *gpu_context)
{
    (void)module;
    char err[TQ_ERRLEN] = "";
    void *cu_context = NULL;
    size_t free_bytes = 0, total_bytes = 0;
    void *gpucontext = PyLong_AsVoidPtr(gpu_context);
    if (!gpucontext)
        return NULL;
    if (tq_cuda_context_of_gpuarray(gpucontext, &cu_context, err, sizeof err) ||
        tq_cuda_mem_info(cu_context, &free_bytes, &total_bytes, err, sizeof err))
        return PyErr_Format(CudaError, "cuda_mem_info: %s", err);
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total_bytes);
}

static PyObject *set_copy_threads(PyObject *module, PyObject *arg)
{
    (void)module;
    long threads = PyLong_AsLong(arg);
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    if (threads < 1 || threads > 256) {
        PyErr_Format(PyExc_ValueError, "set_copy_threads: expected 1 to 256 threads, got %ld", threads);
        return NULL;
    }
    tq_copier *fresh = tq_copier_create((int)threads - 1); /* the caller is one of them */
    if (!fresh)
        return PyErr_NoMemory();
    tq_copier *old = copier;
    copier = fresh;
    Py_BEGIN_ALLOW_THREADS
    tq_copier_destroy(old);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *copy_threads(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return PyLong_FromLong(tq_copier_threads(copier) + 1);
}

static PyObject *cuda_h2d_seconds(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *gpu_context;
    Py_ssize_t bytes;
    int repeats, rc;
    double seconds = 0;
    char err[TQ_ERRLEN] = "";
    void *cu_context = NULL;
    if (!PyArg_ParseTuple(args, "Oni", &gpu_context, &bytes, &repeats))
        return NULL;
    void *gpucontext = PyLong_AsVoidPtr(gpu_context);
    if (!gpucontext)
        return NULL;
    if (bytes < 1 || repeats < 1) {
        PyErr_SetString(PyExc_ValueError, "cuda_h2d_seconds: bytes and repeats must be >= 1");
        return NULL;
    }
    if (tq_cuda_context_of_gpuarray(gpucontext, &cu_context, err, sizeof err))
        return PyErr_Format(CudaError, "cuda_h2d_seconds: %s", err);
    Py_BEGIN_ALLOW_THREADS
    rc = tq_cuda_time_h2d(cu_context, (size_t)bytes, repeats, &seconds, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_Format(CudaError, "cuda_h2d_seconds: %s", err);
    return PyFloat_FromDouble(seconds);
}

static PyMethodDef engine_functions[] = {
    {"cuda_h2d_seconds", cuda_h2d_seconds, METH_VARARGS,
     "cuda_h2d_seconds(gpu_context_ptr, bytes, repeats) -> seconds per pinned host-to-device copy."},
    {"set_copy_threads", set_copy_threads, METH_O,
     "set_copy_threads(n): threads that share each large host copy (puts, host dequeues)."},
    {"copy_threads", copy_threads, METH_NOARGS, "copy_threads() -> threads that share each large host copy."},
    {"cuda_allocated", cuda_allocated, METH_NOARGS,
     "cuda_allocated() -> {'device': bytes, 'pinned': bytes} held by all GPU queues now."},
    {"cuda_mem_info", cuda_mem_info, METH_O,
     "cuda_mem_info(gpu_context_ptr) -> (free, total) bytes of that context's device."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "theano_queue._engine",
    "The queue engine (c_code/tq_ring.c) and its Python face.", -1, engine_functions, NULL, NULL, NULL, NULL,
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
    CudaError = PyObject_GetAttrString(errors, "CudaError");
    Py_DECREF(errors);
    return QueueError && QueueClosed && QueueTimeout && FeederError && CudaError ? 0 : -1;
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
    /* As many threads as cores, up to 16, share a large copy: on the H200
     * machine (16 cores) a copy into pinned staging scales to 16 threads
     * (49 GB/s) before host memory saturates. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    copier = tq_copier_create((int)(cpus < 2 ? 0 : cpus > 16 ? 15 : cpus - 1));
    PyModule_AddIntConstant(m, "MAX_COMPONENTS", TQ_MAX_COMPONENTS);
    PyModule_AddIntConstant(m, "MAX_CAPACITY", TQ_MAX_CAPACITY);
    return m;
}
