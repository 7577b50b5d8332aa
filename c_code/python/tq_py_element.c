/* tq_py_element.c: elements between Python and the engine: the checks that
 * refuse bad input before a slot is taken, put and get, and the waits. */
#include "tq_py.h"

#include <sched.h>
#include <string.h>

/* A blocked wait wakes this often to let Python handle signals (Ctrl-C). */
#define WAIT_SLICE_S 0.05
/* Reads larger than this release the GIL: worth the cost of taking it back. */
#define RELEASE_GIL_BYTES (256 * 1024)

/* ---- waits ---------------------------------------------------------------------- */

/* Seconds a wait may last, < 0 for no limit: `fallback` for None (a call's
 * None is the ring's timeout; the ring's own None is no limit), no limit for
 * math.inf.  A bad value is refused naming the call (`who`) and the queue. */
int parse_timeout(PyObject *obj, double fallback, double *out, const char *who, PyObject *name)
{
    if (obj == NULL || obj == Py_None) {
        *out = fallback;
        return 0;
    }
    double t = -1.0;
    if (!PyBool_Check(obj) && PyNumber_Check(obj)) {
        t = PyFloat_AsDouble(obj);
        if (t == -1.0 && PyErr_Occurred())
            PyErr_Clear(); /* refused below, with the names */
    }
    if (!(t >= 0)) {
        PyErr_Format(PyBool_Check(obj) || !PyNumber_Check(obj) ? PyExc_TypeError : PyExc_ValueError,
                     "%s: queue '%U': timeout must be None or a number of seconds >= 0 (math.inf: no limit), "
                     "got %R",
                     who, name, obj);
        return -1;
    }
    *out = t == Py_HUGE_VAL ? -1.0 : t;
    return 0;
}

/* Host memory for gpu_context and cu_context None, else the device of a
 * libgpuarray context given as its address (pygpu's GpuContext.ptr), or of a
 * CUcontext given as its handle (front ends without libgpuarray, and the
 * tests' stand-in driver). */
/* Seconds a consumer waits before its Ring's on_stall hook is told (once per
 * wait); < 0: never.  Set by set_stall_warning (theano_queue/tools/stall.py sets
 * its default on import), read with the GIL held. */
static double stall_after_s = -1.0;

double set_stall_after(double seconds)
{
    double was = stall_after_s;
    stall_after_s = seconds;
    return was;
}

/* Tells the Ring's on_stall hook (theano_queue/tools/stall.py's, set by the Queue)
 * that a consumer (or, with `producer`, a put) has waited `waited` seconds.
 * A hook that raises is reported as unraisable: a warning must not end the
 * wait. */
static void report_stall(RingObject *self, double waited, int producer)
{
    if (!self->on_stall)
        return;
    PyObject *hook = self->on_stall, *result;
    Py_INCREF(hook);
    result = PyObject_CallFunction(hook, "dO", waited, producer ? Py_True : Py_False);
    if (result)
        Py_DECREF(result);
    else
        PyErr_WriteUnraisable(hook);
    Py_DECREF(hook);
}

/* ---- the GIL between a producer's thread and the consumer's ------------------------- */

/* Longest a consumer waits, without the GIL, for a producer to take it. */
#define HAND_OVER_MAX_S 0.0002

/* A producer is done with its copies and wants the GIL back (no GIL held). */
static double want_gil(RingObject *self)
{
    __atomic_add_fetch(&self->gil_wanted, 1, __ATOMIC_SEQ_CST);
    return tq_now();
}

/* ... and has it (GIL held): the wait is counted, and a consumer handing it over is told (producer_runs). */
static void took_gil(RingObject *self, double wanted_at)
{
    self->gil_wait_s += tq_now() - wanted_at;
    self->gil_takes++;
    __atomic_add_fetch(&self->producer_runs, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&self->gil_wanted, 1, __ATOMIC_SEQ_CST);
}

/* A producer that gave its element up (put_given) and went back to its source for the next one will want
 * the GIL when the source's own release ends (numpy's copies release it): a consumer hands it over then too.
 * producer_back: the producer is in the ring's code again, so it has the GIL. */
void producer_back(RingObject *self)
{
    __atomic_store_n(&self->producer_in_source, 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&self->producer_runs, 1, __ATOMIC_SEQ_CST);
}

void producer_to_source(RingObject *self, int going)
{
    __atomic_store_n(&self->producer_in_source, going, __ATOMIC_SEQ_CST);
}

/* Whether consumers hand the GIL over (set_gil_hand_over; on by default). */
static int hand_over_enabled = 1;

int set_gil_hand_over(int on)
{
    int was = hand_over_enabled;
    hand_over_enabled = on;
    return was;
}

/* A consumer about to take the ring's last element (GIL held) while a producer waits for the GIL after
 * its put, or is back in its source after a put_given: the consumer gives the GIL up until the producer
 * has run (HAND_OVER_MAX_S at most), then waits its turn.  Otherwise the producer would get the GIL only
 * when the consumer next blocks on an empty ring (and the step would then wait for the producer's Python
 * and its copy) or when the interpreter's switch interval (5 ms) forces a drop: a producer behind a
 * consumer that holds the GIL through its steps (Theano's VM does) keeps up this way, its copy
 * overlapping the step.  With more elements ready the producer is ahead: it takes the GIL when the
 * consumer's thread releases it (a GPU step's read-back). */
static void hand_gil_over(RingObject *self)
{
    int wanted = __atomic_load_n(&self->gil_wanted, __ATOMIC_SEQ_CST) > 0 ||
                 __atomic_load_n(&self->producer_in_source, __ATOMIC_SEQ_CST);
    if (!wanted || tq_ring_size(self->ring) > 1)
        return;
    unsigned long long seen = __atomic_load_n(&self->producer_runs, __ATOMIC_SEQ_CST);
    int ran;
    Py_BEGIN_ALLOW_THREADS
    double until = tq_now() + HAND_OVER_MAX_S;
    while (!(ran = __atomic_load_n(&self->producer_runs, __ATOMIC_SEQ_CST) != seen) && tq_now() < until)
        sched_yield();
    Py_END_ALLOW_THREADS
    self->hand_overs[ran]++;
}

/* The one wait of the face: reserves `count` slots in turn (a producer's
 * with producer, else a consumer's), each then filled by fill when given,
 * giving the GIL up once for all of them and again only every WAIT_SLICE_S
 * of waiting, to run Ctrl-C, honour the deadline and report a stalled
 * consumer.  A producer woken by a consumer writes at once: taking the GIL
 * back between the reservation and the copy would make it wait for the
 * consumer's thread, which holds the GIL through a whole training step, and
 * hand the GIL over twice per element.  *done: the slots reserved (and
 * filled); *slot: the last one.  0, or -1 with an exception (Stopped when
 * stop was raised). */
static int sliced_wait(RingObject *self, int producer, int room, double timeout_s, const int *stop, const char *who,
                       fill_fn fill, void *job, int64_t count, int64_t *done, int *slot)
{
    tq_error err;
    tq_code code = TQ_OK;
    int reserved = 0;
    double start = tq_now(), deadline = timeout_s < 0 ? -1.0 : start + timeout_s;
    /* A consumer's long wait is reported, and so is a put without a stop flag:
     * the user's own (a Feeder's puts, which have one, wait for the model). */
    double report_at = (!producer || !stop) && stall_after_s >= 0 ? start + stall_after_s : -1.0;
    *done = 0;
    while (*done < count) {
        double slice_end = tq_now() + WAIT_SLICE_S;
        if (deadline >= 0 && deadline < slice_end)
            slice_end = deadline;
        double wanted_at = 0.0;
        Py_BEGIN_ALLOW_THREADS
        for (; *done < count; ++*done) {
            reserved = 0;
            code = producer ? tq_ring_reserve_put_room(self->ring, room, slice_end, stop, slot, &err)
                            : tq_ring_reserve_get(self->ring, slice_end, stop, slot, &err);
            if (code != TQ_OK)
                break;
            reserved = 1;
            if (fill && (code = fill(self->ring, *slot, job, *done, &err)) != TQ_OK)
                break;
        }
        if (producer)
            wanted_at = want_gil(self);
        Py_END_ALLOW_THREADS
        if (producer)
            took_gil(self, wanted_at);
        if (code != TQ_OK && (reserved || code != TQ_TIMEOUT))
            return raise_error(who, self, &err);
        if (*done == count)
            break;
        if (PyErr_CheckSignals())
            return -1;
        double now = tq_now();
        if (deadline >= 0 && now >= deadline) {
            tq_set_error(&err, TQ_TIMEOUT, "%s within %g s", producer ? "no free slot" : "no element", timeout_s);
            return raise_error(who, self, &err);
        }
        if (report_at >= 0 && now >= report_at) {
            report_at = -1.0;
            report_stall(self, now - start, producer);
        }
    }
    return 0;
}

int wait_for_slot(RingObject *self, int producer, double timeout_s, const int *stop, const char *who, int *slot)
{
    tq_error err;
    int64_t done;
    if (!producer && hand_over_enabled)
        hand_gil_over(self);
    /* The common case, an element or a slot already there, keeps the GIL:
     * giving it up costs more than the reservation itself.  A deadline of 0
     * has passed: no wait. */
    tq_code code = (producer ? tq_ring_reserve_put : tq_ring_reserve_get)(self->ring, 0.0, stop, slot, &err);
    if (code != TQ_TIMEOUT)
        return code == TQ_OK ? 0 : raise_error(who, self, &err);
    return sliced_wait(self, producer, 1, timeout_s, stop, who, NULL, NULL, 1, &done, slot);
}

int produce(RingObject *self, int room, double timeout_s, const int *stop, const char *who, fill_fn fill, void *job,
            int64_t count, int64_t *done)
{
    int slot;
    return sliced_wait(self, 1, room, timeout_s, stop, who, fill, job, count, done, &slot);
}

/* ---- checks ----------------------------------------------------------------------- */

tq_component engine_component(const PyArray_Descr *descr, int ndim, const npy_intp *shape)
{
    size_t row_bytes = (size_t)PyDataType_ELSIZE(descr);
    for (int d = 1; d < ndim; d++)
        row_bytes *= (size_t)shape[d];
    return (tq_component){ndim ? shape[0] : 1, row_bytes};
}

/* "(128, 64)", or "(<=128, 64)" with bound_leading. */
static void format_shape(char *buf, size_t len, int ndim, const npy_intp *dims, int bound_leading)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s%lld", d ? ", " : "", d == 0 && bound_leading ? "<=" : "",
                                 (long long)dims[d]);
    if (used < len)
        snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
}

static const char *component_name(RingObject *self, int c)
{
    return PyUnicode_AsUTF8(PyTuple_GET_ITEM(self->names, c));
}

int check_dims(RingObject *self, int c, int ndim, const npy_intp *dims)
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
    /* Worded as theano_queue/core/schema.py's shape_error words a batch's: the queue and the component, not the
     * entry, so that a batch is refused alike by q.put, a Feeder, a graph's Enqueue and a device put. */
    if (ndim != want_ndim)
        PyErr_Format(PyExc_ValueError, "Queue '%U', component '%s': expected %d dimensions, shape %s; got %d, shape %s",
                     self->name, component_name(self, c), want_ndim, want_s, ndim, got_s);
    else
        PyErr_Format(PyExc_ValueError, "Queue '%U', component '%s': expected shape %s, got %s", self->name,
                     component_name(self, c), want_s, got_s);
    return -1;
}

/* A C-contiguous array of component c's dtype that fits its slot, or NULL
 * with an exception naming the component, what it expects and what came.
 * An array of the exact dtype is the fast path; any other is the rule's to
 * let in or refuse (rule_array, c_code/engine/core/tq_scalar.h: no Python is
 * asked), and is cast by the copy below where it is let in. */
PyArrayObject *checked_component(RingObject *self, int c, PyObject *obj)
{
    PyArray_Descr *want = self->descrs[c];
    PyArrayObject *arr;
    if (PyArray_Check(obj) && PyArray_EquivTypes(PyArray_DESCR((PyArrayObject *)obj), want)) {
        Py_INCREF(obj);
        arr = (PyArrayObject *)obj;
    } else if (!(arr = rule_array(self, c, obj))) {
        return NULL;
    }
    if (check_dims(self, c, PyArray_NDIM(arr), PyArray_DIMS(arr))) {
        Py_DECREF(arr);
        return NULL;
    }
    Py_INCREF(want);
    PyArrayObject *fitting = (PyArrayObject *)PyArray_FromArray(arr, want, NPY_ARRAY_C_CONTIGUOUS);
    Py_DECREF(arr);
    return fitting;
}

/* ---- put ----------------------------------------------------------------------- */

typedef struct {
    const void *const *srcs;
    const int64_t *rows;
} element_job;

/* Copies an element's arrays into the slot (or names them, for memory the
 * device reads directly) and publishes it. */
static tq_code put_from_host(tq_ring *ring, int slot, void *job, int64_t index, tq_error *err)
{
    element_job *e = job;
    (void)index;
    return tq_ring_put_from_host(ring, slot, e->srcs, e->rows, err);
}

int check_element(RingObject *self, const char *op, PyObject *arrays, PyArrayObject **parts, const void **srcs,
                  int64_t *rows)
{
    for (int c = 0; c < self->n; c++)
        parts[c] = NULL;
    PyObject *seq = PySequence_Fast(arrays, "an element is a sequence of arrays, one per component");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != self->n) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *names = sep ? PyUnicode_Join(sep, self->names) : NULL;
        Py_XDECREF(sep);
        PyErr_Format(PyExc_ValueError, "Queue '%U': expected %d components (%U), got %zd", self->name, self->n,
                     names ? names : self->name, PySequence_Fast_GET_SIZE(seq));
        Py_XDECREF(names);
        Py_DECREF(seq);
        return -1;
    }
    for (int c = 0; c < self->n; c++) {
        parts[c] = checked_component(self, c, PySequence_Fast_GET_ITEM(seq, c));
        if (!parts[c]) {
            Py_DECREF(seq);
            release_parts(parts, self->n);
            return -1;
        }
        rows[c] = self->ndims[c] ? PyArray_DIM(parts[c], 0) : 1;
        srcs[c] = PyArray_DATA(parts[c]);
    }
    Py_DECREF(seq);
    if (check_rows(self, op, rows)) {
        release_parts(parts, self->n);
        return -1;
    }
    return 0;
}

void release_parts(PyArrayObject **parts, int n)
{
    for (int c = 0; c < n; c++)
        Py_CLEAR(parts[c]);
}

Py_ssize_t put_checked(RingObject *self, const char *who, const void *const *srcs, const int64_t *rows,
                       double timeout_s, const int *stop)
{
    element_job job = {srcs, rows};
    int64_t put;
    if (produce(self, 1, timeout_s, stop, who, put_from_host, &job, 1, &put))
        return -1;
    return tq_ring_size(self->ring);
}

Py_ssize_t put_element(RingObject *self, const char *who, const char *op, PyObject *arrays, double timeout_s,
                       const int *stop)
{
    PyArrayObject *parts[TQ_MAX_COMPONENTS];
    const void *srcs[TQ_MAX_COMPONENTS];
    int64_t rows[TQ_MAX_COMPONENTS];
    /* Every check before the reservation: bad input costs the queue nothing. */
    if (check_element(self, op, arrays, parts, srcs, rows))
        return -1;
    Py_ssize_t size = put_checked(self, who, srcs, rows, timeout_s, stop);
    release_parts(parts, self->n);
    return size;
}

/* ---- get ---------------------------------------------------------------------- */

int element_shape(RingObject *self, int slot, int c, npy_intp *dims)
{
    int ndim = self->ndims[c];
    for (int d = 0; d < ndim; d++)
        dims[d] = self->shapes[c][d];
    if (ndim)
        dims[0] = (npy_intp)tq_ring_rows(self->ring, slot, c);
    return ndim;
}

int read_component(RingObject *self, const char *who, int slot, int c, void *dst)
{
    tq_error err;
    /* A device read waits for its copy; a large host read is a large copy. */
    int release = tq_ring_on_device(self->ring) || tq_ring_bytes(self->ring, slot, c) >= RELEASE_GIL_BYTES;
    PyThreadState *state = release ? PyEval_SaveThread() : NULL;
    tq_code code = tq_ring_read_to_host(self->ring, slot, c, dst, &err);
    if (state)
        PyEval_RestoreThread(state);
    return code == TQ_OK ? 0 : raise_error(who, self, &err);
}

static PyObject *element_copy(RingObject *self, const char *who, int slot);

/* ---- lending ------------------------------------------------------------------- */

/* The base object of lent arrays: holds one lent block, and gives it back to
 * the ring when the last array over it is gone.  A device block's give-back
 * records an event on its consumer's stream: `keep` (the stream's owner, a
 * GPU context) outlives the give-back. */
typedef struct {
    PyObject_HEAD
    RingObject *ring;
    int lease;
    PyObject *keep;
} LeaseObject;

static void Lease_dealloc(LeaseObject *self)
{
    /* A forked child's ring is the parent's (see Ring_dealloc): leave it. */
    if (self->ring && self->ring->ring && self->ring->forks == fork_count)
        tq_ring_give_back(self->ring->ring, self->lease);
    Py_XDECREF(self->ring);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject LeaseType = TQ_HOLDER_TYPE("Lease", LeaseObject, Lease_dealloc,
                                        "The memory of a dequeued element lent to its consumer; given back to "
                                        "the queue when freed.");

/* Lends slot's block: the Lease that gives it back, and the block's address;
 * NULL without an exception when nothing can be lent now, with one (its
 * message starting with `who`) when the backend failed. */
static LeaseObject *new_lease(RingObject *self, const char *who, int slot, void *stream, PyObject *keep, void **data)
{
    tq_error err;
    int lease;
    tq_code code = tq_ring_lend(self->ring, slot, stream, &lease, data, &err);
    if (code == TQ_TIMEOUT || code == TQ_ESTATE)
        return NULL; /* nothing to lend, or a backend that cannot: the caller copies */
    if (code != TQ_OK) {
        raise_error(who, self, &err); /* a device backend's driver call: the element may be lost */
        return NULL;
    }
    LeaseObject *owner = PyObject_New(LeaseObject, &LeaseType);
    if (!owner) {
        tq_ring_give_back(self->ring, lease);
        return NULL;
    }
    Py_INCREF(self);
    owner->ring = self;
    owner->lease = lease;
    owner->keep = Py_XNewRef(keep);
    return owner;
}

/* Whether device rings lend (set_device_lending; on by default). */
static int device_lending = 1;

int set_device_lending(int on)
{
    int was = device_lending;
    device_lending = on;
    return was;
}

int lend_device_block(RingObject *self, const char *who, int slot, void *stream, PyObject *keep, PyObject **lease,
                      uint64_t *addrs)
{
    void *data;
    if (!device_lending)
        return 0;
    LeaseObject *owner = new_lease(self, who, slot, stream, keep, &data);
    if (!owner)
        return PyErr_Occurred() ? -1 : 0;
    for (int c = 0; c < self->n; c++)
        addrs[c] = (uint64_t)(uintptr_t)data + tq_ring_component_offset(self->ring, c);
    *lease = (PyObject *)owner;
    return 1;
}

int is_lease(PyObject *obj) { return obj && Py_TYPE(obj) == &LeaseType; }

int lend_element(RingObject *self, int slot, PyObject **views)
{
    void *data;
    LeaseObject *owner = new_lease(self, "Dequeue", slot, NULL, NULL, &data);
    if (!owner)
        return PyErr_Occurred() ? -1 : 0;
    int c = 0;
    for (; c < self->n; c++) {
        npy_intp dims[NPY_MAXDIMS];
        int ndim = element_shape(self, slot, c, dims);
        Py_INCREF(self->descrs[c]);
        views[c] = PyArray_NewFromDescr(&PyArray_Type, self->descrs[c], ndim, dims, NULL,
                                        (char *)data + tq_ring_component_offset(self->ring, c), NPY_ARRAY_CARRAY, NULL);
        if (!views[c] || (Py_INCREF(owner), PyArray_SetBaseObject((PyArrayObject *)views[c], (PyObject *)owner) < 0)) {
            Py_CLEAR(views[c]);
            break;
        }
    }
    Py_DECREF(owner); /* the views hold it now; without any, this gives the block back */
    if (c == self->n)
        return 1;
    while (c-- > 0)
        Py_CLEAR(views[c]);
    return -1;
}

int is_lent(PyObject *array) { return PyArray_Check(array) && is_lease(PyArray_BASE((PyArrayObject *)array)); }

PyObject *take_element(RingObject *self, const char *who, double timeout_s)
{
    PyObject *views[TQ_MAX_COMPONENTS];
    int slot;
    if (wait_for_slot(self, 0, timeout_s, NULL, who, &slot))
        return NULL;
    int lent = lend_element(self, slot, views);
    if (lent == 0)
        return element_copy(self, who, slot);
    tq_ring_release_get(self->ring, slot);
    if (lent < 0)
        return NULL;
    PyObject *out = PyTuple_New(self->n);
    for (int c = 0; c < self->n; c++) {
        if (out)
            PyTuple_SET_ITEM(out, c, views[c]);
        else
            Py_DECREF(views[c]);
    }
    return out;
}

PyObject *get_element(RingObject *self, const char *who, double timeout_s)
{
    int slot;
    if (wait_for_slot(self, 0, timeout_s, NULL, who, &slot))
        return NULL;
    return element_copy(self, who, slot);
}

/* New arrays holding a copy of the reserved element in slot, which it releases. */
static PyObject *element_copy(RingObject *self, const char *who, int slot)
{
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
        if (read_component(self, who, slot, c, PyArray_DATA((PyArrayObject *)arr)))
            Py_CLEAR(out);
    }
    tq_ring_release_get(self->ring, slot);
    return out;
}
