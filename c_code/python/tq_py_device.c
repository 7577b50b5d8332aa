/* tq_py_device.c: device arrays between Python and a GPU ring.  The checks of
 * a device put (dtype, shape, where the memory lives), made before a slot is
 * taken; the put and the device get; DLPack capsules; and the bridge to
 * libgpuarray's buffers, for pygpu GpuArrays.  theano_queue/core/device_arrays.py turns
 * the protocols (__cuda_array_interface__, __dlpack__, pygpu) into the plain
 * descriptions these functions take. */
#include "tq_py.h"

#include <dlfcn.h>
#include <string.h>

static PyObject *component_label(RingObject *self, int c) { return PyTuple_GET_ITEM(self->names, c); }

/* ---- one source: (ptr, shape, strides or None, dtype, stream or None) ------------------ */

/* Merges a source's axes: axes of length 1 go, and an axis whose stride steps
 * over the whole of the next one joins it.  Outermost first in src.  An
 * empty array keeps no axes (nothing to copy); one item keeps one axis of 1. */
static void merge_axes(int ndim, const npy_intp *dims, const npy_intp *strides, tq_device_src *src, int *too_many)
{
    int64_t shape[NPY_MAXDIMS], step[NPY_MAXDIMS]; /* innermost first */
    int n = 0;
    *too_many = 0;
    src->ndim = 0;
    for (int d = 0; d < ndim; d++)
        if (dims[d] == 0)
            return;
    for (int d = ndim - 1; d >= 0; d--) {
        if (dims[d] == 1)
            continue;
        if (n && strides[d] == shape[n - 1] * step[n - 1]) {
            shape[n - 1] *= dims[d];
        } else {
            shape[n] = dims[d];
            step[n++] = strides[d];
        }
    }
    if (n == 0) { /* one item (a scalar, or every axis of length 1): one contiguous run */
        shape[0] = 1;
        step[n++] = (int64_t)src->itemsize;
    }
    /* The kernel may add one axis of its own (an item of several units). */
    if (n > TQ_DEVICE_MAX_DIMS - 1) {
        *too_many = 1;
        return;
    }
    src->ndim = n;
    for (int k = 0; k < n; k++) {
        src->shape[k] = shape[n - 1 - k];
        src->strides[k] = step[n - 1 - k];
    }
}

static int merged_contiguous(const tq_device_src *src)
{
    return src->ndim == 0 || (src->ndim == 1 && src->strides[0] == (int64_t)src->itemsize);
}

/* Reads a sequence of ndim ints (at most NPY_MAXDIMS); -1 with an exception. */
static int read_ints(PyObject *obj, const char *what, npy_intp *out, int expect)
{
    PyObject *seq = PySequence_Fast(obj, what);
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > NPY_MAXDIMS || (expect >= 0 && n != expect)) {
        PyErr_Format(PyExc_ValueError, "%s: got %zd values", what, n);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return (int)n;
}

/* Where the memory lives, checked against the ring: every refusal names the
 * queue, the component, what was expected and what came. */
static int check_memory(RingObject *self, const char *who, int c, tq_device_src *src, int contiguous)
{
    tq_error err;
    int device;
    if (tq_ring_probe_device(self->ring, src->ptr, &src->where, &device, &err) != TQ_OK)
        return raise_error(who, self, &err);
    switch (src->where.kind) {
    case TQ_MEM_UNKNOWN:
    case TQ_MEM_HOST:
        PyErr_Format(PyExc_ValueError,
                     "Queue '%U', component '%U': expected device memory of GPU %d, got %s at %p; "
                     "put host data as a numpy array",
                     self->name, component_label(self, c), device,
                     src->where.kind == TQ_MEM_HOST ? "page-locked host memory"
                                                    : "an address the CUDA driver does not know",
                     (void *)(uintptr_t)src->ptr);
        return -1;
    default: break;
    }
    if (src->where.device != device) {
        PyErr_Format(PyExc_ValueError,
                     "Queue '%U', component '%U': the array is on GPU %d, the queue on GPU %d; copy it to GPU %d "
                     "first, or put it into a queue on GPU %d",
                     self->name, component_label(self, c), src->where.device, device, device, src->where.device);
        return -1;
    }
    if (!src->where.same_context && !contiguous) {
        PyErr_Format(PyExc_ValueError,
                     "Queue '%U', component '%U': a strided array from another CUDA context on GPU %d than the "
                     "queue's; only contiguous arrays are copied between contexts: make it contiguous, or produce it "
                     "in the device's primary context (pycuda.autoprimaryctx; CuPy and torch use it)",
                     self->name, component_label(self, c), device);
        return -1;
    }
    return 0;
}

static int parse_source(RingObject *self, const char *who, int c, PyObject *desc, tq_device_src *src, int64_t *rows)
{
    PyObject *shape_obj, *strides_obj, *dtype_obj, *stream_obj;
    unsigned long long ptr;
    PyArray_Descr *have = NULL;
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS], as_rows[NPY_MAXDIMS];
    int too_many, lead = 1; /* the leading axes that make the component's rows */
    if (!PyArg_ParseTuple(desc, "KOOOO|i", &ptr, &shape_obj, &strides_obj, &dtype_obj, &stream_obj, &lead))
        return -1;
    if (!PyArray_DescrConverter(dtype_obj, &have))
        return -1;
    if (!PyArray_EquivTypes(have, self->descrs[c])) {
        PyErr_Format(PyExc_TypeError,
                     "Queue '%U', component '%U': expected dtype %S, got a device array of %S (device arrays "
                     "are not converted: cast it on the GPU)",
                     self->name, component_label(self, c), (PyObject *)self->descrs[c], (PyObject *)have);
        Py_DECREF(have);
        return -1;
    }
    memset(src, 0, sizeof *src);
    src->itemsize = (size_t)PyDataType_ELSIZE(have);
    Py_DECREF(have);
    int ndim = read_ints(shape_obj, "a device array's shape", dims, -1);
    if (ndim < 0)
        return -1;
    if (lead < 1 || lead > (ndim > 1 ? ndim : 1)) {
        PyErr_Format(PyExc_ValueError, "%s: %d leading axes of a device array of %d make no rows", who, lead, ndim);
        return -1;
    }
    /* The component sees the leading axes as one (a variable-length
     * component's packed rows, theano_queue/core/layout.py); the copy sees them all. */
    int row_ndim = ndim ? ndim - lead + 1 : 0;
    as_rows[0] = 1;
    for (int d = 0; d < ndim; d++) {
        if (d < lead)
            as_rows[0] *= dims[d];
        else
            as_rows[d - lead + 1] = dims[d];
    }
    if (check_dims(self, c, row_ndim, ndim ? as_rows : dims))
        return -1;
    if (strides_obj == Py_None) { /* C order */
        npy_intp step = (npy_intp)src->itemsize;
        for (int d = ndim - 1; d >= 0; d--) {
            strides[d] = step;
            step *= dims[d];
        }
    } else if (read_ints(strides_obj, "a device array's strides", strides, ndim) < 0) {
        return -1;
    }
    *rows = ndim ? as_rows[0] : 1;
    src->ptr = ptr;
    merge_axes(ndim, dims, strides, src, &too_many);
    if (too_many) {
        PyErr_Format(PyExc_ValueError,
                     "Queue '%U', component '%U': a device array whose strides leave more than %d axes apart; "
                     "make it contiguous first",
                     self->name, component_label(self, c), TQ_DEVICE_MAX_DIMS - 1);
        return -1;
    }
    if (stream_obj != Py_None) {
        unsigned long long handle = PyLong_AsUnsignedLongLong(stream_obj);
        if (handle == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (handle == 0) {
            PyErr_Format(PyExc_ValueError,
                         "Queue '%U', component '%U': stream 0 is ambiguous (the CUDA Array Interface forbids "
                         "it); give 1 for the legacy default stream, 2 for the per-thread one",
                         self->name, component_label(self, c));
            return -1;
        }
        src->stream = (void *)(uintptr_t)handle;
    }
    if (src->ndim == 0) /* nothing to copy, nothing to check */
        return 0;
    return check_memory(self, who, c, src, merged_contiguous(src));
}

Py_ssize_t put_device_element(RingObject *self, const char *who, PyObject *sources, double timeout_s, const int *stop)
{
    tq_device_src srcs[TQ_MAX_COMPONENTS];
    int64_t rows[TQ_MAX_COMPONENTS];
    Py_ssize_t result = -1;
    int slot, held = 0;
    if (!tq_ring_on_device(self->ring)) {
        PyErr_Format(QueueError,
                     "Queue '%U' lives in host memory; put device arrays into a GPU queue, or "
                     "copy them to the host first",
                     self->name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(sources, "device sources must be a sequence, one per component");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != self->n) {
        PyErr_Format(PyExc_ValueError, "Queue '%U': expected %d components, got %zd", self->name, self->n,
                     PySequence_Fast_GET_SIZE(seq));
        goto done;
    }
    /* The device stays entered on this thread until the copy is queued. */
    tq_error err;
    tq_code code;
    if ((code = tq_ring_hold_device(self->ring, &held, &err)) != TQ_OK) {
        raise_error(who, self, &err);
        goto done;
    }
    /* Every check before the reservation: bad input costs the queue nothing. */
    for (int c = 0; c < self->n; c++)
        if (parse_source(self, who, c, PySequence_Fast_GET_ITEM(seq, c), &srcs[c], &rows[c]))
            goto done;
    if (check_rows(self, NULL, rows))
        goto done;
    if (wait_for_slot(self, 1, timeout_s, stop, who, &slot))
        goto done;
    Py_BEGIN_ALLOW_THREADS /* may wait for the copy (a source without a stream) */
    code = tq_ring_put_device_arrays(self->ring, slot, srcs, rows, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        raise_error(who, self, &err);
    else
        result = tq_ring_size(self->ring);
done:
    if (held)
        tq_ring_release_device(self->ring);
    Py_DECREF(seq);
    return result;
}

PyObject *take_device_element(RingObject *self, const char *who, PyObject *dsts, void *stream, double timeout_s,
                              PyObject **lease)
{
    uint64_t addrs[TQ_MAX_COMPONENTS];
    int slot;
    tq_error err;
    if (!tq_ring_on_device(self->ring)) {
        PyErr_Format(QueueError, "%s: queue '%U' lives in host memory; device=True is for GPU queues", who, self->name);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(dsts, "destinations must be a sequence of device addresses");
    if (!seq)
        return NULL;
    int bad = PySequence_Fast_GET_SIZE(seq) != self->n;
    for (int c = 0; !bad && c < self->n; c++) {
        addrs[c] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, c));
        bad = addrs[c] == (uint64_t)-1 && PyErr_Occurred();
    }
    Py_DECREF(seq);
    if (bad) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected %d device addresses", who, self->name, self->n);
        return NULL;
    }
    if (wait_for_slot(self, 0, timeout_s, NULL, who, &slot))
        return NULL;
    PyObject *rows = PyTuple_New(self->n);
    for (int c = 0; rows && c < self->n; c++) {
        PyObject *r = PyLong_FromLongLong(tq_ring_rows(self->ring, slot, c));
        if (!r)
            Py_CLEAR(rows);
        else
            PyTuple_SET_ITEM(rows, c, r);
    }
    /* Lent where a spare is free (addrs then say where the element is);
     * else copied on the consumer's stream after the slot's data.  The slot
     * goes back to the producers at once, overwritten only after the copy. */
    int lent = lease && rows ? lend_device_block(self, who, slot, stream, NULL, lease, addrs) : 0;
    tq_code code = lent ? TQ_OK : tq_ring_take_on_device(self->ring, slot, stream, addrs, &err);
    if (lent < 0)
        Py_CLEAR(rows);
    tq_ring_release_get(self->ring, slot);
    if (code != TQ_OK) {
        Py_XDECREF(rows);
        return raise_error(who, self, &err), NULL;
    }
    if (!lease || !rows)
        return rows;
    /* lend_device's answer: (rows, the Lease or None, where each component is) */
    PyObject *where = PyTuple_New(self->n);
    for (int c = 0; where && c < self->n; c++) {
        PyObject *a = PyLong_FromUnsignedLongLong(addrs[c]);
        if (!a)
            Py_CLEAR(where);
        else
            PyTuple_SET_ITEM(where, c, a);
    }
    PyObject *out = where ? Py_BuildValue("(NON)", rows, lent ? *lease : Py_None, where) : NULL;
    if (lent)
        Py_CLEAR(*lease);
    if (!where)
        Py_DECREF(rows);
    return out;
}

/* ---- DLPack ---------------------------------------------------------------------------- */

/* The DLPack structs (dlpack.h, v0.8), as far as a consumer reads them. */
typedef struct {
    int32_t device_type, device_id;
} dl_device;

typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: C order */
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed_tensor {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_tensor *self);
} dl_managed_tensor;

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_COMPLEX = 5, DL_BOOL = 6 };

/* Holds a consumed DLPack tensor; its producer's deleter runs when this goes. */
typedef struct {
    PyObject_HEAD
    dl_managed_tensor *tensor;
} DLPackOwnerObject;

static void DLPackOwner_dealloc(DLPackOwnerObject *self)
{
    if (self->tensor && self->tensor->deleter)
        self->tensor->deleter(self->tensor);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject DLPackOwnerType = TQ_HOLDER_TYPE("DLPackOwner", DLPackOwnerObject, DLPackOwner_dealloc,
                                              "A DLPack tensor taken from its capsule: its memory stays valid "
                                              "while this lives.");

/* numpy's typestr of a DLPack dtype, or NULL with TypeError. */
static PyObject *dl_typestr(dl_dtype t)
{
    const char *kind = t.code == DL_INT       ? "i"
                       : t.code == DL_UINT    ? "u"
                       : t.code == DL_FLOAT   ? "f"
                       : t.code == DL_COMPLEX ? "c"
                       : t.code == DL_BOOL    ? "b"
                                              : NULL;
    if (!kind || t.lanes != 1 || t.bits % 8 || !t.bits) {
        PyErr_Format(PyExc_TypeError,
                     "a DLPack tensor of dtype code %d, %d bits, %d lanes has no numpy dtype (bfloat16 and vector "
                     "types are not taken)",
                     t.code, t.bits, t.lanes);
        return NULL;
    }
    return t.code == DL_BOOL ? PyUnicode_FromString("|b1") : PyUnicode_FromFormat("%s%d", kind, t.bits / 8);
}

/* dlpack_source(capsule) -> (owner, ptr, shape, strides in bytes or None,
 * typestr, device_type, device_id): takes the tensor out of a "dltensor"
 * capsule (which is renamed "used_dltensor", as the protocol asks). */
PyObject *dlpack_source(PyObject *module, PyObject *capsule)
{
    (void)module;
    if (!PyCapsule_IsValid(capsule, "dltensor")) {
        PyErr_SetString(PyExc_TypeError, "expected a DLPack capsule named 'dltensor' (one not consumed yet)");
        return NULL;
    }
    dl_managed_tensor *managed = PyCapsule_GetPointer(capsule, "dltensor");
    if (!managed)
        return NULL;
    dl_tensor *t = &managed->dl_tensor;
    PyObject *typestr = dl_typestr(t->dtype);
    if (!typestr)
        return NULL;
    PyObject *shape = PyTuple_New(t->ndim), *strides = t->strides ? PyTuple_New(t->ndim) : Py_NewRef(Py_None);
    for (int d = 0; shape && strides && d < t->ndim; d++) {
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
        if (t->strides)
            PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(t->strides[d] * (t->dtype.bits / 8)));
    }
    DLPackOwnerObject *owner = shape && strides ? PyObject_New(DLPackOwnerObject, &DLPackOwnerType) : NULL;
    if (!owner || PyErr_Occurred() || PyCapsule_SetName(capsule, "used_dltensor")) {
        if (owner)
            owner->tensor = NULL;
        Py_XDECREF(owner);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_DECREF(typestr);
        return NULL;
    }
    owner->tensor = managed;
    return Py_BuildValue("(NKNNNii)", owner, (unsigned long long)((uintptr_t)t->data + t->byte_offset), shape, strides,
                         typestr, (int)t->device.device_type, (int)t->device.device_id);
}
