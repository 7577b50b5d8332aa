/* tq_py_functions.c: the module's functions that belong to no type: the
 * copy pool's size, variable-length packing, what GPU queues hold, and the
 * table of them all that tq_py_module.c hands to Python. */
#include "tq_py.h"

#include <limits.h>

#include "tq_copy.h"
#include "tq_cuda.h"
#include "tq_pack.h"

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
    tq_error err;
    void *cu_context = NULL;
    size_t free_bytes = 0, total_bytes = 0;
    if (cu_context_of(gpu_context, &cu_context, &err) != TQ_OK ||
        tq_cuda_mem_info(cu_context, &free_bytes, &total_bytes, &err) != TQ_OK)
        return raise_error("cuda_mem_info", NULL, &err), NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total_bytes);
}

static PyObject *set_copy_threads(PyObject *module, PyObject *arg)
{
    (void)module;
    tq_error err;
    tq_code code;
    if (PyBool_Check(arg) || !PyIndex_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "set_copy_threads: expected an int number of threads >= 1, got %R", arg);
        return NULL;
    }
    long threads = PyLong_AsLong(arg);
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    int n = threads > INT_MAX ? INT_MAX : threads < INT_MIN ? INT_MIN : (int)threads;
    Py_BEGIN_ALLOW_THREADS /* waits for copies in flight, and for the old pool's threads */
    code = tq_copy_set_threads(n, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("set_copy_threads", NULL, &err), NULL;
    Py_RETURN_NONE;
}

static PyObject *copy_threads(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return PyLong_FromLong(tq_copy_threads());
}

/* pack_rows(packed, source, lengths, pad): packed[r, :lengths[r]] = source[r,
 * :lengths[r]] and pad past it, for every row r, over the copy pool with the
 * GIL released.  packed is (n, L, ...) C-contiguous; source (n, W >= L, ...)
 * of the same dtype, contiguous within each row; pad a one-item array of the
 * dtype.  For a variable-length component (theano_queue/core/layout.py), which
 * checked the lengths against L. */
static PyObject *pack_rows(PyObject *module, PyObject *args)
{
    (void)module;
    PyArrayObject *packed, *source, *lengths, *pad;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyArray_Type, &packed, &PyArray_Type, &source, &PyArray_Type, &lengths,
                          &PyArray_Type, &pad))
        return NULL;
    int nd = PyArray_NDIM(packed);
    npy_intp n = nd >= 2 ? PyArray_DIM(packed, 0) : -1;
    int fits = nd >= 2 && PyArray_NDIM(source) == nd && PyArray_ISCARRAY(packed) && PyArray_DIM(source, 0) == n &&
               PyArray_EquivTypes(PyArray_DESCR(packed), PyArray_DESCR(source)) &&
               PyArray_EquivTypes(PyArray_DESCR(packed), PyArray_DESCR(pad)) && PyArray_SIZE(pad) == 1 &&
               PyArray_TYPE(lengths) == NPY_INT64 && PyArray_ISCARRAY_RO(lengths) && PyArray_SIZE(lengths) == n &&
               PyArray_DIM(source, 1) >= PyArray_DIM(packed, 1);
    /* Within a source row, the axes after the first are C-contiguous. */
    npy_intp item = PyArray_ITEMSIZE(packed), step = item;
    for (int d = nd - 1; fits && d >= 1; d--) {
        fits = (d == 1 || PyArray_DIM(source, d) == PyArray_DIM(packed, d)) &&
               (PyArray_DIM(source, d) <= 1 || PyArray_STRIDE(source, d) == step);
        step *= PyArray_DIM(source, d);
    }
    if (!fits) {
        PyErr_SetString(PyExc_ValueError,
                        "pack_rows: expected packed (n, L, ...) C-contiguous, source (n, W >= L, "
                        "...) of its dtype contiguous within rows, int64 lengths (n,), a one-item pad");
        return NULL;
    }
    npy_intp per_length = item; /* bytes of one step along the variable axis */
    for (int d = 2; d < nd; d++)
        per_length *= PyArray_DIM(packed, d);
    const int64_t *length = PyArray_DATA(lengths);
    int64_t *used = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *used);
    if (!used)
        return PyErr_NoMemory();
    for (npy_intp r = 0; r < n; r++) {
        if (length[r] < 0 || length[r] > PyArray_DIM(packed, 1)) {
            PyMem_Free(used);
            return PyErr_Format(PyExc_ValueError, "pack_rows: row %zd has length %lld, outside 0..%zd", (Py_ssize_t)r,
                                (long long)length[r], (Py_ssize_t)PyArray_DIM(packed, 1));
        }
        used[r] = length[r] * per_length;
    }
    tq_pack_job job = {PyArray_DATA(packed),
                       (size_t)(PyArray_DIM(packed, 1) * per_length),
                       PyArray_DATA(source),
                       PyArray_STRIDE(source, 0),
                       used,
                       n,
                       PyArray_DATA(pad),
                       (size_t)item};
    Py_BEGIN_ALLOW_THREADS
    tq_pack_rows(&job);
    Py_END_ALLOW_THREADS
    PyMem_Free(used);
    Py_RETURN_NONE;
}

/* slot_bytes(components) -> the bytes of one slot of a ring of these
 * (name, dtype, shape) components: the slot layout (tq_ring.h, TQ_ALIGN) that
 * theano_queue/core/target.py sizes rings with. */
static PyObject *slot_bytes(PyObject *module, PyObject *components)
{
    (void)module;
    PyObject *seq = PySequence_Fast(components, "slot_bytes: expected a sequence of (name, dtype, shape)");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    tq_component *comps = PyMem_Calloc((size_t)(n ? n : 1), sizeof *comps);
    PyObject *result = NULL;
    if (!comps) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < n; c++) {
        PyObject *name, *dtype, *shape;
        PyArray_Descr *descr = NULL;
        PyArray_Dims dims = {NULL, 0};
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, c), "OOO", &name, &dtype, &shape) ||
            !PyArray_DescrConverter(dtype, &descr) || !PyArray_IntpConverter(shape, &dims)) {
            Py_XDECREF(descr);
            goto done;
        }
        comps[c] = engine_component(descr, dims.len, dims.ptr);
        Py_DECREF(descr);
        PyDimMem_FREE(dims.ptr);
    }
    size_t bytes = tq_ring_slot_bytes(comps, (int)n);
    result = bytes == SIZE_MAX ? PyErr_Format(PyExc_OverflowError, "slot_bytes: the components overflow a slot")
                               : PyLong_FromSize_t(bytes);
done:
    PyMem_Free(comps);
    Py_DECREF(seq);
    return result;
}

/* set_stall_warning(seconds) -> the previous setting: a consumer that waits
 * this long calls its Ring's on_stall hook once (None: never). */
static PyObject *set_stall_warning(PyObject *module, PyObject *arg)
{
    (void)module;
    double seconds = -1.0;
    if (arg != Py_None) {
        seconds = PyFloat_AsDouble(arg);
        if (seconds == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(seconds >= 0)) {
            PyErr_Format(PyExc_ValueError, "set_stall_warning: expected seconds >= 0 or None, got %R", arg);
            return NULL;
        }
    }
    double was = set_stall_after(seconds);
    if (was < 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(was);
}

/* A switch set from arg's truth: the previous setting, or NULL with an exception. */
static PyObject *switched(PyObject *arg, int (*set)(int))
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    return PyBool_FromLong(set(on));
}

/* set_gil_hand_over(on) -> the previous setting (for benchmarks that compare both). */
static PyObject *gil_hand_over(PyObject *module, PyObject *arg)
{
    (void)module;
    return switched(arg, set_gil_hand_over);
}

/* set_device_lending(on) -> the previous setting (for benchmarks that compare lending with copying). */
static PyObject *device_lending(PyObject *module, PyObject *arg)
{
    (void)module;
    return switched(arg, set_device_lending);
}

/* set_held_gather_in_step(max_bytes) -> the previous bound (for benchmarks that compare the two gathers). */
static PyObject *held_gather_in_step(PyObject *module, PyObject *arg)
{
    (void)module;
    unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
    if (bytes == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(tq_cuda_set_held_in_step_max((size_t)bytes));
}

PyMethodDef engine_functions[] = {
    {"casts_safely", schema_casts_safely, METH_VARARGS,
     "casts_safely(from_dtype, to_dtype) -> whether every value of one is a value of the other (the rule's table, "
     "numpy's safe casting)."},
    {"values_fit", schema_values_fit, METH_VARARGS,
     "values_fit(array, dtype) -> whether each value keeps its value in dtype: integers (Python ints in an object "
     "array too) exactly, floats without overflow; no float becomes an integer."},
    {"has_nan", schema_has_nan, METH_O, "has_nan(array) -> whether a float array holds a NaN."},
    {"check_array", schema_check_array, METH_VARARGS,
     "check_array(array, dtype, queue_name, component_name): the array rule (its own dtype, or one that casts "
     "safely); TypeError in the schema's wording otherwise."},
    {"set_held_gather_in_step", held_gather_in_step, METH_O,
     "set_held_gather_in_step(max_bytes) -> previous: a held dataset's batches up to this size are gathered by "
     "the dequeue on its own stream, larger ones by the Feeder on the copy stream."},
    {"set_device_lending", device_lending, METH_O,
     "set_device_lending(on) -> previous: a GPU dequeue lends the slot's device block where a spare is free."},
    {"set_gil_hand_over", gil_hand_over, METH_O,
     "set_gil_hand_over(on) -> previous: a dequeue hands the GIL to a producer waiting for it after its put."},
    {"set_stall_warning", set_stall_warning, METH_O,
     "set_stall_warning(seconds or None) -> previous: a dequeue waiting this long calls Ring.on_stall once."},
    {"permutation", permutation, METH_VARARGS,
     "permutation(bit_generator, n) -> numpy.random.Generator(bit_generator).permutation(n) as int64, made "
     "without the GIL (the draws of Permutation, on the calling thread)."},
    {"slot_bytes", slot_bytes, METH_O,
     "slot_bytes(components) -> bytes of one slot of (name, dtype, shape) components, as the engine lays it out."},
    {"pack_rows", pack_rows, METH_VARARGS,
     "pack_rows(packed, source, lengths, pad): each row's first lengths[r] items along axis 1, then pad."},
    {"set_copy_threads", set_copy_threads, METH_O,
     "set_copy_threads(n): threads that share each large host copy (puts, host dequeues)."},
    {"copy_threads", copy_threads, METH_NOARGS, "copy_threads() -> threads that share each large host copy."},
    {"cuda_allocated", cuda_allocated, METH_NOARGS,
     "cuda_allocated() -> {'device': bytes, 'pinned': bytes} held by all GPU queues now."},
    {"cuda_mem_info", cuda_mem_info, METH_O,
     "cuda_mem_info(gpu_context_ptr) -> (free, total) bytes of that context's device."},
    {"dlpack_source", dlpack_source, METH_O,
     "dlpack_source(capsule) -> (owner, ptr, shape, byte strides or None, typestr, device_type, device_id)."},
    {"gpu_context_stream", gpu_context_stream, METH_O,
     "gpu_context_stream(gpu_context_ptr) -> the CUstream a libgpuarray context computes on."},
    {NULL, NULL, 0, NULL},
};
