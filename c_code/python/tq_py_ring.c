/* tq_py_ring.c: the Ring type, theano_queue._engine.Ring: a tq_ring with the
 * component names, dtypes and shapes Python needs around it. */
#include "tq_py.h"

#include <string.h>
#include <unistd.h>

#include "tq_cuda.h"

/* ---- life ------------------------------------------------------------------------ */

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
    *comp = engine_component(self->descrs[c], self->ndims[c], self->shapes[c]);
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
    if (parse_timeout(timeout, -1.0, &self->timeout, "Queue", name))
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
        PyErr_Format(PyExc_ValueError, "Queue '%U': expected 1 to %d components, got %zd", name, TQ_MAX_COMPONENTS, n);
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
    Py_XSETREF(self->batch, default_batch(self));
    if (!self->batch)
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
    int capacity = self->ring ? tq_ring_capacity(self->ring) : 1;
    if (self->ring && self->forks == fork_count) {
        tq_ring *ring = self->ring;
        self->ring = NULL;
        Py_BEGIN_ALLOW_THREADS /* a device backend may wait for its copies, the putter for its last */
        tq_ring_destroy(ring);
        Py_END_ALLOW_THREADS
    }
    release_given(self, capacity); /* the putter read them until destroy stopped it */
    if (self->descrs)
        for (int c = 0; c < self->n; c++)
            Py_XDECREF(self->descrs[c]);
    PyMem_Free(self->descrs);
    PyMem_Free(self->ndims);
    PyMem_Free(self->shapes);
    Py_XDECREF(self->names);
    Py_XDECREF(self->name);
    Py_XDECREF(self->failure);
    Py_XDECREF(self->on_stall);
    Py_XDECREF(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- put and get ------------------------------------------------------------------ */

static PyObject *Ring_put(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"arrays", "timeout", "stop", "op", NULL};
    PyObject *arrays, *timeout = Py_None, *stop = Py_None;
    const char *op = NULL;
    const int *flag;
    double t;
    if (ring_usable(self, "Queue.put") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "O|OOz", kwlist, &arrays, &timeout, &stop, &op) ||
        parse_timeout(timeout, self->timeout, &t, "Queue.put", self->name) || stop_flag(self, "Queue.put", stop, &flag))
        return NULL;
    Py_ssize_t size = put_element(self, op ? op : "Queue.put", op, arrays, t, flag);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* The arguments of put_given and put_device, (<value_name>, timeout=None, stop=None), checked as Queue.put's:
 * the value, the wait in seconds (the ring's timeout by default) and the Stop's flag.  0, or -1 with an
 * exception. */
static int put_arguments(RingObject *self, PyObject *args, PyObject *kwds, const char *value_name, PyObject **value,
                         double *t, const int **flag)
{
    char *kwlist[] = {(char *)value_name, "timeout", "stop", NULL};
    PyObject *timeout = Py_None, *stop = Py_None;
    if (ring_usable(self, "Queue.put") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "O|OO", kwlist, value, &timeout, &stop) ||
        parse_timeout(timeout, self->timeout, t, "Queue.put", self->name) || stop_flag(self, "Queue.put", stop, flag))
        return -1;
    return 0;
}

/* put_given(box, timeout=None, stop=None) -> size: see put_given. */
static PyObject *Ring_put_given(RingObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *box;
    const int *flag;
    double t;
    if (put_arguments(self, args, kwds, "box", &box, &t, &flag))
        return NULL;
    Py_ssize_t size = put_given(self, box, t, flag);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* flush_given(timeout=None): see flush_given (None: no limit). */
static PyObject *Ring_flush_given(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    double t;
    if (ring_usable(self, "Queue.put") || !PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &timeout) ||
        parse_timeout(timeout, -1.0, &t, "Queue.put", self->name) || flush_given(self, t))
        return NULL;
    Py_RETURN_NONE;
}

/* put_device(sources, timeout=None, stop=None) -> size: see put_device_element. */
static PyObject *Ring_put_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *sources;
    const int *flag;
    double t;
    if (put_arguments(self, args, kwds, "sources", &sources, &t, &flag))
        return NULL;
    Py_ssize_t size = put_device_element(self, "Queue.put", sources, t, flag);
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* take_device (copies) and lend_device (lends where a spare is free; lease not NULL): the same arguments,
 * (dsts, stream, timeout=None). */
static PyObject *next_device_element(RingObject *self, PyObject *args, PyObject *kwds, PyObject **lease)
{
    static char *kwlist[] = {"dsts", "stream", "timeout", NULL};
    PyObject *dsts, *stream, *timeout = Py_None;
    double t;
    if (ring_usable(self, "Queue.get") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OO|O", kwlist, &dsts, &stream, &timeout) ||
        parse_timeout(timeout, self->timeout, &t, "Queue.get", self->name))
        return NULL;
    void *s = PyLong_AsVoidPtr(stream);
    if (!s && PyErr_Occurred())
        return NULL;
    return take_device_element(self, "Queue.get", dsts, s, t, lease);
}

/* take_device(dsts, stream, timeout=None) -> rows per component. */
static PyObject *Ring_take_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    return next_device_element(self, args, kwds, NULL);
}

/* lend_device(dsts, stream, timeout=None) -> (rows, lease or None, addresses):
 * take_device, but the element's block is lent where a spare is free. */
static PyObject *Ring_lend_device(RingObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *lease = NULL;
    return next_device_element(self, args, kwds, &lease);
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
        parse_timeout(timeout, self->timeout, &t, who, self->name))
        return NULL;
    return lend ? take_element(self, who, t) : get_element(self, who, t);
}

static PyObject *Ring_get(RingObject *self, PyObject *args, PyObject *kwds)
{
    return next_element(self, args, kwds, 0);
}

static PyObject *Ring_take(RingObject *self, PyObject *args, PyObject *kwds)
{
    return next_element(self, args, kwds, 1);
}

/* put_rows(sources, indices, batch, first, count, stop=None, room=1) -> batches put. */
static PyObject *Ring_put_rows(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", "indices", "batch", "first", "count", "stop", "room", NULL};
    PyObject *sources, *indices, *stop = Py_None;
    long long batch, first, count;
    int room = 1;
    const int *flag;
    if (ring_usable(self, "Feeder") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OOLLL|Oi", kwlist, &sources, &indices, &batch, &first, &count, &stop,
                                     &room) ||
        stop_flag(self, "Feeder", stop, &flag))
        return NULL;
    if (room < 1) {
        PyErr_Format(PyExc_ValueError, "Feeder: queue '%U': expected room >= 1, got %d", self->name, room);
        return NULL;
    }
    Py_ssize_t done = put_rows(self, "Feeder", sources, indices, batch, first, count, flag, room);
    return done < 0 ? NULL : PyLong_FromSsize_t(done);
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

static PyObject *Ring_resume(RingObject *self, PyObject *unused)
{
    (void)unused;
    return ring_usable(self, "Queue.reopen") ? NULL : PyBool_FromLong(tq_ring_resume(self->ring));
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
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:i,s:i,s:i,s:s,s:s,s:d,s:d}", "enqueued", s.enqueued,
                         "dequeued", s.dequeued, "dropped", s.dropped, "lent", s.lent, "bytes_in", s.bytes_in,
                         "bytes_out", s.bytes_out, "producer_wait_s", s.producer_wait_s, "consumer_wait_s",
                         s.consumer_wait_s, "size", s.size, "capacity", s.capacity, "slots",
                         tq_ring_capacity(self->ring), "state", state_names[s.state], "backend", s.backend,
                         "fill_integral", s.fill_integral, "clock_s", s.clock_s);
}

/* gil_wait() -> (seconds, count): producers' waits for the GIL after their puts' copies, all told. */
static PyObject *Ring_gil_wait(RingObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(dK)", self->gil_wait_s, self->gil_takes);
}

/* hand_overs() -> (taken, in vain): the consumers' hand-overs of the GIL, all told. */
static PyObject *Ring_hand_overs(RingObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(KK)", self->hand_overs[1], self->hand_overs[0]);
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

static PyObject *Ring_get_depth(RingObject *self, void *unused)
{
    (void)unused;
    return ring_usable(self, "Queue.capacity") ? NULL : PyLong_FromLong(tq_ring_depth(self->ring));
}

static int Ring_set_depth(RingObject *self, PyObject *value, void *unused)
{
    (void)unused;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "Ring.depth cannot be deleted");
        return -1;
    }
    long depth = PyLong_AsLong(value);
    if (depth == -1 && PyErr_Occurred())
        return -1;
    if (ring_usable(self, "Queue.capacity"))
        return -1;
    if (depth < 1 || depth > tq_ring_capacity(self->ring)) {
        PyErr_Format(PyExc_ValueError, "Ring.depth: expected 1 to %d (the slots), got %ld",
                     tq_ring_capacity(self->ring), depth);
        return -1;
    }
    tq_ring_set_depth(self->ring, (int)depth);
    return 0;
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
    return parse_timeout(value, -1.0, &self->timeout, "Queue.timeout", self->name);
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

/* ---- the type ------------------------------------------------------------------------ */

static PyMethodDef Ring_methods[] = {
    TQ_KW_METHOD(
        "put", Ring_put,
        "put(arrays, timeout=None, stop=None, op=None) -> size: validate and put one element, waiting for a free slot\n"
        "(timeout None: the ring's; math.inf: no limit) until stop (a Stop) is set; op: the Op that puts it, named\n"
        "by its refusals."),
    TQ_KW_METHOD(
        "put_given", Ring_put_given,
        "put_given(box, timeout=None, stop=None) -> size: put box's one element (a list of one) and empty box;\n"
        "when nothing else holds the element and its arrays, the ring's putter thread copies them after this\n"
        "returns, and the caller keeps the GIL (flush_given waits for those copies)."),
    TQ_KW_METHOD("flush_given", Ring_flush_given,
                 "flush_given(timeout=None): wait until every element given to put_given is in the ring; raises the\n"
                 "first failure among them."),
    TQ_KW_METHOD("put_device", Ring_put_device,
                 "put_device(sources, timeout=None, stop=None) -> size: put one element of device arrays, each\n"
                 "(ptr, shape, strides or None, dtype, stream or None), copied device to device on the copy stream."),
    TQ_KW_METHOD(
        "take_device", Ring_take_device,
        "take_device(dsts, stream, timeout=None) -> rows: copy the next element into device addresses on a stream."),
    TQ_KW_METHOD(
        "lend_device", Ring_lend_device,
        "lend_device(dsts, stream, timeout=None) -> (rows, lease, addresses): the next element's device block,\n"
        "lent until lease is freed (stream waits for it); with no spare free, copied to dsts (lease None)."),
    TQ_KW_METHOD("get", Ring_get, "get(timeout=None) -> tuple of arrays: take the next element, waiting for one."),
    TQ_KW_METHOD(
        "put_rows", Ring_put_rows,
        "put_rows(sources, indices, batch, first, count, stop=None, room=1) -> batches put: an array "
        "dataset's batches first.., each the rows indices[b*batch:(b+1)*batch] of every source, gathered natively "
        "without the GIL, rows of any strides, cast where the rule lets a source's dtype in; room: once the ring is "
        "full, wait until that many slots are free before the next batch."),
    TQ_KW_METHOD("gather_paths", Ring_gather_paths,
                 "gather_paths(sources) -> per component 'rows' (copied as they are), 'elements' (walked, or "
                 "cast, element by element) or None (put_rows cannot read them)."),
    TQ_KW_METHOD(
        "take", Ring_take,
        "take(timeout=None) -> tuple of arrays: like get, but lent from the slot where the ring can (a host ring)."),
    TQ_KW_METHOD("close", Ring_close,
                 "close(cancel_pending=False): no more puts; consumers drain what is left (or nothing)."),
    {"fail", (PyCFunction)Ring_fail, METH_O, "fail(exc): consumers get FeederError (cause: exc) once drained."},
    {"reopen", (PyCFunction)Ring_reopen, METH_NOARGS, "reopen(): open a closed, drained ring again."},
    {"resume", (PyCFunction)Ring_resume, METH_NOARGS,
     "resume() -> bool: open a closed ring again, keeping its elements, if no consumer was told it is closed and\n"
     "drained since the close (nor was it cancelled or failed)."},
    {"size", (PyCFunction)Ring_size, METH_NOARGS, "size() -> elements ready to be taken."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "stats() -> dict of counters."},
    {"gil_wait", (PyCFunction)Ring_gil_wait, METH_NOARGS,
     "gil_wait() -> (seconds, count): producers' waits to take the GIL back after their puts' copies."},
    {"hand_overs", (PyCFunction)Ring_hand_overs, METH_NOARGS,
     "hand_overs() -> (taken, in vain): consumers' hand-overs of the GIL to a producer, and those in which it "
     "did not run."},
    TQ_KW_METHOD("reserve", Ring_reserve,
                 "reserve(timeout=None, stop=None) -> (slot, views): writable views over a free slot's staging."),
    {"commit", (PyCFunction)Ring_commit, METH_VARARGS, "commit(slot, rows) -> size: publish a reserved slot."},
    {"abort", (PyCFunction)Ring_abort, METH_VARARGS, "abort(slot): give a reserved slot up."},
    {"register_host", (PyCFunction)Ring_register_host, METH_O,
     "register_host(array): page-lock it; puts of its slices then skip the staging copy."},
    {"unregister_host", (PyCFunction)Ring_unregister_host, METH_O, "unregister_host(array): undo register_host."},
    TQ_KW_METHOD(
        "gather_on_device", Ring_gather_on_device,
        "gather_on_device(sources, mechanism='auto') -> 'batch', 'device' or 'host': a device ring gathers "
        "put_rows' rows from these arrays itself (page-locked and mapped here; 'device': copied into device memory "
        "here, gathered there by a kernel); raises why it cannot."),
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

static PyObject *Ring_get_on_stall(RingObject *self, void *unused)
{
    (void)unused;
    PyObject *hook = self->on_stall ? self->on_stall : Py_None;
    Py_INCREF(hook);
    return hook;
}

static int Ring_set_on_stall(RingObject *self, PyObject *value, void *unused)
{
    (void)unused;
    if (value && value != Py_None && !PyCallable_Check(value)) {
        PyErr_Format(PyExc_TypeError, "Ring.on_stall: expected a callable or None, got %R", value);
        return -1;
    }
    Py_XINCREF(value == Py_None ? NULL : value);
    Py_XSETREF(self->on_stall, value == Py_None ? NULL : value);
    return 0;
}

static PyObject *Ring_get_batch(RingObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->batch ? self->batch : Py_None);
}

static int Ring_set_batch(RingObject *self, PyObject *value, void *unused)
{
    (void)unused;
    return set_batch(self, value);
}

static PyGetSetDef Ring_getset[] = {
    {"batch", (getter)Ring_get_batch, (setter)Ring_set_batch,
     "Per component, the name its rows are called by where they are the batch's (every such component's rows "
     "agree in an element), or None where its leading axis is its own; by default every component with an axis.",
     NULL},
    {"on_stall", (getter)Ring_get_on_stall, (setter)Ring_set_on_stall,
     "None, or a callable given the seconds waited and whether it is a put (True) or a consumer's wait (False), "
     "once a wait passes set_stall_warning's time.",
     NULL},
    {"closed", (getter)Ring_get_closed, NULL, "True once closed or failed.", NULL},
    {"capacity", (getter)Ring_get_capacity, NULL, "Number of slots.", NULL},
    {"depth", (getter)Ring_get_depth, (setter)Ring_set_depth,
     "The most elements written or ready at once, 1 to capacity (capacity unless set): Queue(capacity=\"auto\") "
     "tunes it.",
     NULL},
    {"copy_stream", (getter)Ring_get_copy_stream, NULL,
     "The CUstream device puts copy on (an int), None for a host ring.", NULL},
    {"timeout", (getter)Ring_get_timeout, (setter)Ring_set_timeout,
     "Seconds a wait lasts when its call gives no timeout; None for no limit.", NULL},
    {"staging_bytes", (getter)Ring_get_staging_bytes, NULL, "Size of the shared staging block (see staging_fd).", NULL},
    {"component_offsets", (getter)Ring_get_component_offsets, NULL,
     "Byte offset of each component within a slot's staging.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "theano_queue._engine.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(name, components, capacity, timeout=None, gpu_context=None, cu_context=None): the engine's ring of "
              "slots.",
    .tp_weaklistoffset = offsetof(RingObject, weakrefs),
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
    .tp_init = (initproc)Ring_init,
    .tp_new = PyType_GenericNew,
};
