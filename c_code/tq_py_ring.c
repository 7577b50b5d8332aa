/* tq_py_ring.c: the Ring type, theano_queue._engine.Ring: a tq_ring with the
 * component names, dtypes and shapes Python needs around it; and Stop, a flag
 * that ends a producer's wait on one Ring. */
#include "tq_py.h"

#include <string.h>
#include <unistd.h>

#include "tq_cuda.h"

/* ---- life ------------------------------------------------------------------------ */

/* Seconds a wait may last, < 0 for no limit: `fallback` for None (a call's
 * None is the ring's timeout; the ring's own None is no limit), no limit for
 * math.inf. */
static int parse_timeout(PyObject *obj, double fallback, double *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = fallback;
        return 0;
    }
    double t = PyFloat_AsDouble(obj);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (t < 0 || t != t) {
        PyErr_Format(PyExc_ValueError, "timeout must be None or a number >= 0, got %R", obj);
        return -1;
    }
    *out = t == Py_HUGE_VAL ? -1.0 : t;
    return 0;
}

/* Host memory for gpu_context and cu_context None, else the device of a
 * libgpuarray context given as its address (pygpu's GpuContext.ptr), or of a
 * CUcontext given as its handle (front ends without libgpuarray, and the
 * tests' stand-in driver). */
static tq_backend *make_backend(PyObject *gpu_context, PyObject *cu_context_obj, tq_error *err)
{
    void *cu_context = NULL;
    if (cu_context_obj != Py_None) {
        cu_context = PyLong_AsVoidPtr(cu_context_obj);
        if (!cu_context) {
            PyErr_Clear();
            tq_set_error(err, TQ_EINVAL, "cu_context must be a CUcontext handle (a nonzero int)");
            return NULL;
        }
        return tq_cuda_backend_create(cu_context, err);
    }
    if (gpu_context == Py_None)
        return tq_host_backend_create(err);
    if (cu_context_of(gpu_context, &cu_context, err) != TQ_OK)
        return NULL;
    return tq_cuda_backend_create(cu_context, err);
}

/* Reads one (name, dtype, shape) into the Ring's tables and the engine's. */
static int parse_component(RingObject *self, int c, PyObject *spec, tq_component *comp)
{
    PyObject *cname, *dtype, *shape;
    PyArray_Dims dims = {NULL, 0};
    if (!PyArg_ParseTuple(spec, "UOO", &cname, &dtype, &shape))
        return -1;
    Py_INCREF(cname);
    PyTuple_SET_ITEM(self->names, c, cname);
    if (!PyArray_DescrConverter(dtype, &self->descrs[c]) || !PyArray_IntpConverter(shape, &dims))
        return -1;
    self->ndims[c] = dims.len;
    memcpy(self->shapes[c], dims.ptr, (size_t)dims.len * sizeof(npy_intp));
    PyDimMem_FREE(dims.ptr);
    size_t row_bytes = (size_t)PyDataType_ELSIZE(self->descrs[c]);
    for (int d = 1; d < self->ndims[c]; d++)
        row_bytes *= (size_t)self->shapes[c][d];
    comp->row_bytes = row_bytes;
    comp->max_rows = self->ndims[c] ? self->shapes[c][0] : 1;
    return 0;
}

static int Ring_init(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "components", "capacity", "timeout", "gpu_context", "cu_context", NULL};
    PyObject *name, *components, *timeout = Py_None, *gpu_context = Py_None, *cu_context = Py_None;
    int capacity, rc = -1;
    tq_component comps[TQ_MAX_COMPONENTS];
    tq_error err;

    if (self->ring) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UOi|OOO", kwlist, &name, &components, &capacity, &timeout,
                                     &gpu_context, &cu_context))
        return -1;
    if (parse_timeout(timeout, -1.0, &self->timeout))
        return -1;
    self->pid = getpid();
    self->forks = fork_count;
    Py_INCREF(name);
    Py_XSETREF(self->name, name);
    PyObject *seq = PySequence_Fast(components, "components must be a sequence of (name, dtype, shape)");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > TQ_MAX_COMPONENTS) {
        PyErr_Format(PyExc_ValueError, "Queue '%U': expected 1 to %d components, got %zd", name,
                     TQ_MAX_COMPONENTS, n);
        goto done;
    }
    self->n = (int)n;
    self->names = PyTuple_New(n);
    self->descrs = PyMem_Calloc((size_t)n, sizeof *self->descrs);
    self->ndims = PyMem_Calloc((size_t)n, sizeof *self->ndims);
    self->shapes = PyMem_Calloc((size_t)n, sizeof *self->shapes);
    if (!self->names || !self->descrs || !self->ndims || !self->shapes) {
        PyErr_NoMemory();
        goto done;
    }
    for (int c = 0; c < self->n; c++)
        if (parse_component(self, c, PySequence_Fast_GET_ITEM(seq, c), &comps[c]))
            goto done;

    tq_backend *backend = make_backend(gpu_context, cu_context, &err);
    if (!backend) {
        raise_error(NULL, self, &err);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS /* a device backend allocates and page-locks */
    self->ring = tq_ring_create(comps, self->n, capacity, backend, &err);
    Py_END_ALLOW_THREADS
    if (!self->ring)
        raise_error(NULL, self, &err);
    else
        rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static void Ring_dealloc(RingObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* In a forked child the ring is the parent's: its locks may be held by
     * threads that do not exist here, and its device memory is not ours.
     * Leave it be. */
    if (self->ring && self->forks == fork_count) {
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

int ring_usable(RingObject *self, const char *who)
{
    if (!self->ring) {
        PyErr_Format(PyExc_RuntimeError, "%s: the Ring is not initialised", who);
        return -1;
    }
    if (self->forks != fork_count) {
        PyErr_Format(QueueError,
                     "%s: queue '%U' was made in another process (%d) and cannot be used in this one (%d), "
                     "a child forked from it; the child must make its own queue",
                     who, self->name, (int)self->pid, (int)getpid());
        return -1;
    }
    return 0;
}

/* ---- Stop ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    RingObject *ring;
    int flag; /* read by waits without the GIL */
} StopObject;

/* ---- put and get ------------------------------------------------------------------ */

/* The flag of a Stop made for this ring (NULL for None), or -1 with TypeError. */
static int stop_flag(RingObject *self, const char *who, PyObject *stop, const int **flag)
{
    *flag = NULL;
    if (stop == Py_None)
        return 0;
    if (!PyObject_TypeCheck(stop, &StopType) || ((StopObject *)stop)->ring != self) {
        PyErr_Format(PyExc_TypeError, "%s: stop must be None or a Stop made for this queue's ring, got %R", who, stop);
        return -1;
    }
    *flag = &((StopObject *)stop)->flag;
    return 0;
}

static PyObject *Ring_put(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"arrays", "timeout", "stop", NULL};
    PyObject *arrays, *timeout = Py_None, *stop = Py_None;
    const int *flag;
    double t;
    if (ring_usable(self, "Queue.put") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "O|OO", kwlist, &arrays, &timeout, &stop) ||
        parse_timeout(timeout, self->timeout, &t) || stop_flag(self, "Queue.put", stop, &flag))
        return NULL;
    Py_ssize_t size = put_element(self, "Queue.put", arrays, t, flag);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* put_device(sources, timeout=None, stop=None) -> size: see put_device_element. */
static PyObject *Ring_put_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", "timeout", "stop", NULL};
    PyObject *sources, *timeout = Py_None, *stop = Py_None;
    const int *flag;
    double t;
    if (ring_usable(self, "Queue.put") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "O|OO", kwlist, &sources, &timeout, &stop) ||
        parse_timeout(timeout, self->timeout, &t) || stop_flag(self, "Queue.put", stop, &flag))
        return NULL;
    Py_ssize_t size = put_device_element(self, "Queue.put", sources, t, flag);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* take_device(dsts, stream, timeout=None) -> rows per component. */
static PyObject *Ring_take_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dsts", "stream", "timeout", NULL};
    PyObject *dsts, *stream, *timeout = Py_None;
    double t;
    if (ring_usable(self, "Queue.get") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OO|O", kwlist, &dsts, &stream, &timeout) ||
        parse_timeout(timeout, self->timeout, &t))
        return NULL;
    void *s = PyLong_AsVoidPtr(stream);
    if (!s && PyErr_Occurred())
        return NULL;
    return take_device_element(self, "Queue.get", dsts, s, t);
}

static PyObject *Ring_get_copy_stream(RingObject *self, void *unused)
{
    (void)unused;
    if (ring_usable(self, "Ring.copy_stream"))
        return NULL;
    void *s = tq_ring_copy_stream(self->ring);
    return s ? PyLong_FromVoidPtr(s) : Py_NewRef(Py_None);
}

/* get (copies) and take (lends where the ring can): the same arguments. */
static PyObject *next_element(RingObject *self, PyObject *args, PyObject *kwds, int lend)
{
    static char *kwlist[] = {"timeout", NULL};
    const char *who = lend ? "Dequeue" : "Queue.get";
    PyObject *timeout = Py_None;
    double t;
    if (ring_usable(self, who) || !PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &timeout) ||
        parse_timeout(timeout, self->timeout, &t))
        return NULL;
    return lend ? take_element(self, who, t) : get_element(self, who, t);
}

static PyObject *Ring_get(RingObject *self, PyObject *args, PyObject *kwds) { return next_element(self, args, kwds, 0); }

static PyObject *Ring_take(RingObject *self, PyObject *args, PyObject *kwds) { return next_element(self, args, kwds, 1); }

/* put_rows(sources, indices, batch, first, count, stop=None) -> batches put. */
static PyObject *Ring_put_rows(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", "indices", "batch", "first", "count", "stop", NULL};
    PyObject *sources, *indices, *stop = Py_None;
    long long batch, first, count;
    const int *flag;
    if (ring_usable(self, "Feeder") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OOLLL|O", kwlist, &sources, &indices, &batch, &first, &count, &stop) ||
        stop_flag(self, "Feeder", stop, &flag))
        return NULL;
    Py_ssize_t done = put_rows(self, "Feeder", sources, indices, batch, first, count, flag);
    return done < 0 ? NULL : PyLong_FromSsize_t(done);
}

/* ---- writing in place --------------------------------------------------------------- */

/* Commit and abort take only a slot that a producer reserved and has not yet
 * committed: any other would hand a slot that readers may hold to producers. */
static int check_reserved(RingObject *self, const char *who, int slot)
{
    if (!tq_ring_is_reserved_for_writing(self->ring, slot)) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': slot %d is not reserved for writing", who, self->name, slot);
        return -1;
    }
    return 0;
}

/* Writable arrays of full shape over a reserved slot's staging. */
static PyObject *slot_views(RingObject *self, int slot)
{
    PyObject *views = PyTuple_New(self->n);
    for (int c = 0; views && c < self->n; c++) {
        Py_INCREF(self->descrs[c]);
        PyObject *view = PyArray_NewFromDescr(&PyArray_Type, self->descrs[c], self->ndims[c], self->shapes[c], NULL,
                                              tq_ring_write_ptr(self->ring, slot, c), NPY_ARRAY_CARRAY, NULL);
        if (!view || (Py_INCREF(self), PyArray_SetBaseObject((PyArrayObject *)view, (PyObject *)self) < 0)) {
            Py_XDECREF(view);
            Py_CLEAR(views);
            break;
        }
        PyTuple_SET_ITEM(views, c, view);
    }
    return views;
}

/* reserve(timeout) -> (slot, views): writable arrays of full shape over the
 * slot's (pinned, for a GPU queue) staging, to be filled and committed. */
static PyObject *Ring_reserve(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", "stop", NULL};
    PyObject *timeout = Py_None, *stop = Py_None;
    const int *flag;
    double t;
    int slot;
    tq_error err;
    tq_code code;
    if (ring_usable(self, "Queue.writer") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "|OO", kwlist, &timeout, &stop) ||
        parse_timeout(timeout, self->timeout, &t) || stop_flag(self, "Queue.writer", stop, &flag))
        return NULL;
    if (wait_for_slot(self, 1, t, flag, "Queue.writer", &slot))
        return NULL;
    Py_BEGIN_ALLOW_THREADS /* a device backend waits here until the slot's staging is free */
    code = tq_ring_begin_host_write(self->ring, slot, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("Queue.writer", self, &err), NULL;
    PyObject *views = slot_views(self, slot);
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
    tq_error err;
    tq_code code;
    if (ring_usable(self, "Queue.writer") || !PyArg_ParseTuple(args, "iO", &slot, &rows_obj) ||
        check_reserved(self, "Queue.writer", slot))
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
    Py_BEGIN_ALLOW_THREADS
    code = tq_ring_commit_put(self->ring, slot, rows, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("Queue.writer", self, &err), NULL;
    return PyLong_FromLong(tq_ring_size(self->ring));
}

static PyObject *Ring_abort(RingObject *self, PyObject *args)
{
    int slot;
    if (ring_usable(self, "Queue.writer") || !PyArg_ParseTuple(args, "i", &slot) ||
        check_reserved(self, "Queue.writer", slot))
        return NULL;
    tq_ring_abort_put(self->ring, slot);
    Py_RETURN_NONE;
}

/* ---- state ------------------------------------------------------------------------ */

static PyObject *Ring_close(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"cancel_pending", NULL};
    int cancel = 0;
    if (ring_usable(self, "Queue.close") || !PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &cancel))
        return NULL;
    tq_ring_close(self->ring, cancel);
    Py_RETURN_NONE;
}

static PyObject *Ring_fail(RingObject *self, PyObject *exc)
{
    if (ring_usable(self, "Queue.fail"))
        return NULL;
    if (!PyExceptionInstance_Check(exc)) {
        PyErr_Format(PyExc_TypeError, "Queue.fail: expected an exception instance, got %R", exc);
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
    tq_error err;
    if (ring_usable(self, "Queue.reopen"))
        return NULL;
    if (tq_ring_reopen(self->ring, &err) != TQ_OK)
        return raise_error("Queue.reopen", self, &err), NULL;
    Py_CLEAR(self->failure);
    Py_RETURN_NONE;
}

static PyObject *Ring_size(RingObject *self, PyObject *unused)
{
    (void)unused;
    return ring_usable(self, "Queue.size") ? NULL : PyLong_FromLong(tq_ring_size(self->ring));
}

static PyObject *Ring_stats(RingObject *self, PyObject *unused)
{
    (void)unused;
    static const char *state_names[] = {"open", "closed", "failed"};
    tq_stats s;
    if (ring_usable(self, "Queue.stats"))
        return NULL;
    tq_ring_stats(self->ring, &s);
    /* fill_integral: element-seconds up to clock_s, the time.monotonic() of the snapshot. */
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:i,s:i,s:s,s:s,s:d,s:d}", "enqueued", s.enqueued, "dequeued",
                         s.dequeued, "dropped", s.dropped, "lent", s.lent, "bytes_in", s.bytes_in, "bytes_out", s.bytes_out,
                         "producer_wait_s", s.producer_wait_s, "consumer_wait_s", s.consumer_wait_s, "size", s.size,
                         "capacity", s.capacity, "state", state_names[s.state], "backend", s.backend,
                         "fill_integral", s.fill_integral, "clock_s", s.clock_s);
}

static PyObject *Ring_get_closed(RingObject *self, void *unused)
{
    (void)unused;
    return ring_usable(self, "Queue.closed") ? NULL : PyBool_FromLong(tq_ring_state(self->ring) != TQ_STATE_OPEN);
}

static PyObject *Ring_get_capacity(RingObject *self, void *unused)
{
    (void)unused;
    return ring_usable(self, "Queue.capacity") ? NULL : PyLong_FromLong(tq_ring_capacity(self->ring));
}

static PyObject *Ring_get_timeout(RingObject *self, void *unused)
{
    (void)unused;
    return self->timeout < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(self->timeout);
}

static int Ring_set_timeout(RingObject *self, PyObject *value, void *unused)
{
    (void)unused;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "the timeout cannot be deleted; set it to None for no limit");
        return -1;
    }
    return parse_timeout(value, -1.0, &self->timeout);
}

/* ---- timeline (tq_trace.h) ------------------------------------------------------------ */

static PyObject *Ring_trace_start(RingObject *self, PyObject *arg)
{
    tq_error err;
    long long n = PyLong_AsLongLong(arg);
    if (ring_usable(self, "Queue.trace") || (n == -1 && PyErr_Occurred()))
        return NULL;
    if (tq_ring_trace_start(self->ring, n, &err) != TQ_OK)
        return raise_error("Queue.trace", self, &err), NULL;
    Py_RETURN_NONE;
}

/* One traced element as (element, slot, (ns per event kind, -1 for none)). */
static PyObject *traced_element(const tq_trace_element *e)
{
    PyObject *times = PyTuple_New(TQ_EV_COUNT);
    for (int k = 0; times && k < TQ_EV_COUNT; k++) {
        PyObject *t = PyLong_FromLongLong(e->ns[k]);
        if (!t)
            Py_CLEAR(times);
        else
            PyTuple_SET_ITEM(times, k, t);
    }
    return times ? Py_BuildValue("(KiN)", (unsigned long long)e->element, e->slot, times) : NULL;
}

static PyObject *Ring_trace_stop(RingObject *self, PyObject *unused)
{
    (void)unused;
    if (ring_usable(self, "Queue.trace"))
        return NULL;
    int n = tq_ring_trace_stop(self->ring, NULL, 0), got = 0;
    tq_trace_element *elements = n ? PyMem_Calloc((size_t)n, sizeof *elements) : NULL;
    if (n && !elements)
        return PyErr_NoMemory();
    if (n)
        got = tq_ring_trace_stop(self->ring, elements, n); /* stopped already: the same n */
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < got && i < n; i++) {
        PyObject *item = traced_element(&elements[i]);
        if (!item || PyList_Append(out, item))
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    PyMem_Free(elements);
    return out;
}

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
    code = undo ? tq_ring_unregister_host(self->ring, data, &err) : tq_ring_register_host(self->ring, data, bytes, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error(who, self, &err), NULL;
    Py_RETURN_NONE;
}

static PyObject *Ring_register_host(RingObject *self, PyObject *array) { return register_array(self, array, 0); }

static PyObject *Ring_unregister_host(RingObject *self, PyObject *array) { return register_array(self, array, 1); }

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
static PyObject *Ring_gather_on_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", "mechanism", NULL};
    static const char *const names[] = {"host", "batch", "auto"}; /* tq_gather_mechanism's order */
    const char *who = "Feeder", *wanted = "auto";
    PyObject *sources;
    const void *ptrs[TQ_MAX_COMPONENTS];
    size_t bytes[TQ_MAX_COMPONENTS];
    int read_only[TQ_MAX_COMPONENTS], mechanism = -1;
    tq_gather_mechanism used;
    tq_error err;
    tq_code code;
    if (ring_usable(self, who) || !PyArg_ParseTupleAndKeywords(args, kwds, "O|s", kwlist, &sources, &wanted))
        return NULL;
    for (int m = 0; m < 3; m++)
        if (strcmp(wanted, names[m]) == 0)
            mechanism = m;
    if (mechanism < 0) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected a gather mechanism of 'auto', 'batch' or 'host', "
                     "got '%s'", who, self->name, wanted);
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
    Py_BEGIN_ALLOW_THREADS /* page-locking a large dataset takes seconds */
    code = tq_ring_gather_on_device(self->ring, ptrs, bytes, read_only, (int)n, (tq_gather_mechanism)mechanism, &used,
                                    &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(seq);
    if (code != TQ_OK)
        return raise_error(who, self, &err), NULL;
    return PyUnicode_FromString(tq_gather_mechanism_name(used));
}

static PyObject *Ring_gather_on_host(RingObject *self, PyObject *unused)
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

/* staging_fd() -> a new descriptor (close-on-exec, the caller's to close) of
 * the block that holds every slot's staging. */
static PyObject *Ring_staging_fd(RingObject *self, PyObject *unused)
{
    (void)unused;
    tq_shm shm;
    tq_error err;
    int fd;
    if (ring_usable(self, "Ring.staging_fd"))
        return NULL;
    if (tq_ring_staging(self->ring, &shm, &err) != TQ_OK || tq_shm_dup_fd(&shm, &fd, &err) != TQ_OK)
        return raise_error("Ring.staging_fd", self, &err), NULL;
    return PyLong_FromLong(fd);
}

static PyObject *Ring_slot_offset(RingObject *self, PyObject *arg)
{
    tq_error err;
    size_t offset;
    if (ring_usable(self, "Ring.slot_offset"))
        return NULL;
    /* _PyLong_AsInt is private (gone in Python 3.13): a long, range-checked by the ring. */
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot < INT_MIN || slot > INT_MAX)
        return PyErr_Format(PyExc_OverflowError, "Ring.slot_offset: no slot %ld", slot);
    if (tq_ring_staging_offset(self->ring, (int)slot, &offset, &err) != TQ_OK)
        return raise_error("Ring.slot_offset", self, &err), NULL;
    return PyLong_FromSize_t(offset);
}

static PyObject *Ring_swap_staging(RingObject *self, PyObject *args)
{
    tq_error err;
    int a, b;
    if (ring_usable(self, "Ring.swap_staging") || !PyArg_ParseTuple(args, "ii", &a, &b))
        return NULL;
    if (tq_ring_swap_staging(self->ring, a, b, &err) != TQ_OK)
        return raise_error("Ring.swap_staging", self, &err), NULL;
    Py_RETURN_NONE;
}

static PyObject *Ring_get_staging_bytes(RingObject *self, void *unused)
{
    (void)unused;
    tq_shm shm;
    tq_error err;
    if (ring_usable(self, "Ring.staging_bytes"))
        return NULL;
    if (tq_ring_staging(self->ring, &shm, &err) != TQ_OK)
        return raise_error("Ring.staging_bytes", self, &err), NULL;
    return PyLong_FromSize_t(shm.bytes);
}

static PyObject *Ring_get_component_offsets(RingObject *self, void *unused)
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

/* ---- the type ------------------------------------------------------------------------ */

static PyMethodDef Ring_methods[] = {
    {"put", (PyCFunction)(void (*)(void))Ring_put, METH_VARARGS | METH_KEYWORDS,
     "put(arrays, timeout=None, stop=None) -> size: validate and put one element, waiting for a free slot\n"
     "(timeout None: the ring's; math.inf: no limit) until stop (a Stop) is set."},
    {"put_device", (PyCFunction)(void (*)(void))Ring_put_device, METH_VARARGS | METH_KEYWORDS,
     "put_device(sources, timeout=None, stop=None) -> size: put one element of device arrays, each\n"
     "(ptr, shape, strides or None, dtype, stream or None), copied device to device on the copy stream."},
    {"take_device", (PyCFunction)(void (*)(void))Ring_take_device, METH_VARARGS | METH_KEYWORDS,
     "take_device(dsts, stream, timeout=None) -> rows: copy the next element into device addresses on a stream."},
    {"get", (PyCFunction)(void (*)(void))Ring_get, METH_VARARGS | METH_KEYWORDS,
     "get(timeout=None) -> tuple of arrays: take the next element, waiting for one."},
    {"put_rows", (PyCFunction)(void (*)(void))Ring_put_rows, METH_VARARGS | METH_KEYWORDS,
     "put_rows(sources, indices, batch, first, count, stop=None) -> batches put: an array dataset's batches "
     "first.., each the rows indices[b*batch:(b+1)*batch] of every source, gathered natively without the GIL."},
    {"take", (PyCFunction)(void (*)(void))Ring_take, METH_VARARGS | METH_KEYWORDS,
     "take(timeout=None) -> tuple of arrays: like get, but lent from the slot where the ring can (a host ring)."},
    {"close", (PyCFunction)(void (*)(void))Ring_close, METH_VARARGS | METH_KEYWORDS,
     "close(cancel_pending=False): no more puts; consumers drain what is left (or nothing)."},
    {"fail", (PyCFunction)Ring_fail, METH_O, "fail(exc): consumers get FeederError (cause: exc) once drained."},
    {"reopen", (PyCFunction)Ring_reopen, METH_NOARGS, "reopen(): open a closed, drained ring again."},
    {"size", (PyCFunction)Ring_size, METH_NOARGS, "size() -> elements ready to be taken."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> dict of counters."},
    {"reserve", (PyCFunction)(void (*)(void))Ring_reserve, METH_VARARGS | METH_KEYWORDS,
     "reserve(timeout=None, stop=None) -> (slot, views): writable views over a free slot's staging."},
    {"commit", (PyCFunction)Ring_commit, METH_VARARGS, "commit(slot, rows) -> size: publish a reserved slot."},
    {"abort", (PyCFunction)Ring_abort, METH_VARARGS, "abort(slot): give a reserved slot up."},
    {"register_host", (PyCFunction)Ring_register_host, METH_O,
     "register_host(array): page-lock it; puts of its slices then skip the staging copy."},
    {"unregister_host", (PyCFunction)Ring_unregister_host, METH_O, "unregister_host(array): undo register_host."},
    {"gather_on_device", (PyCFunction)(void (*)(void))Ring_gather_on_device, METH_VARARGS | METH_KEYWORDS,
     "gather_on_device(sources, mechanism='auto') -> 'batch' or 'host': a device ring gathers put_rows' "
     "rows from these arrays itself (page-locked and mapped here); raises why it cannot."},
    {"gather_on_host", (PyCFunction)Ring_gather_on_host, METH_NOARGS,
     "gather_on_host(): undo gather_on_device, once the gathers in flight are done."},
    {"trace_start", (PyCFunction)Ring_trace_start, METH_O,
     "trace_start(n): record the timeline of the next n elements reserved (see TRACE_EVENTS)."},
    {"trace_stop", (PyCFunction)Ring_trace_stop, METH_NOARGS,
     "trace_stop() -> [(element, slot, (ns per TRACE_EVENTS kind, -1 for none))]: stop recording."},
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
    {"copy_stream", (getter)Ring_get_copy_stream, NULL,
     "The CUstream device puts copy on (an int), None for a host ring.", NULL},
    {"timeout", (getter)Ring_get_timeout, (setter)Ring_set_timeout,
     "Seconds a wait lasts when its call gives no timeout; None for no limit.", NULL},
    {"staging_bytes", (getter)Ring_get_staging_bytes, NULL, "Size of the shared staging block (see staging_fd).",
     NULL},
    {"component_offsets", (getter)Ring_get_component_offsets, NULL,
     "Byte offset of each component within a slot's staging.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "theano_queue._engine.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(name, components, capacity, timeout=None, gpu_context=None, cu_context=None): the engine's ring of slots.",
    .tp_weaklistoffset = offsetof(RingObject, weakrefs),
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
    .tp_init = (initproc)Ring_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the Stop type --------------------------------------------------------------------- */

static int Stop_init(StopObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ring", NULL};
    RingObject *ring;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &RingType, &ring))
        return -1;
    Py_INCREF(ring);
    Py_XSETREF(self->ring, ring);
    __atomic_store_n(&self->flag, 0, __ATOMIC_RELEASE);
    return 0;
}

static void Stop_dealloc(StopObject *self)
{
    Py_XDECREF(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The flag first, then the wake: a wait reads the flag under the lock that
 * the wake takes, so it either sees the flag or is woken to see it. */
static PyObject *Stop_set(StopObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->ring || ring_usable(self->ring, "Stop.set"))
        return NULL;
    __atomic_store_n(&self->flag, 1, __ATOMIC_RELEASE);
    tq_ring_wake(self->ring->ring);
    Py_RETURN_NONE;
}

static PyObject *Stop_is_set(StopObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(__atomic_load_n(&self->flag, __ATOMIC_ACQUIRE));
}

static PyMethodDef Stop_methods[] = {
    {"set", (PyCFunction)Stop_set, METH_NOARGS, "set(): end the waits given this Stop, at once."},
    {"is_set", (PyCFunction)Stop_is_set, METH_NOARGS, "is_set() -> True once set."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject StopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "theano_queue._engine.Stop", .tp_basicsize = sizeof(StopObject),
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew, .tp_init = (initproc)Stop_init,
    .tp_dealloc = (destructor)Stop_dealloc, .tp_methods = Stop_methods,
    .tp_doc = "Stop(ring): a flag for Ring.put and Ring.reserve; set() ends their wait with Stopped.",
};
