/* tq_py_module.c: the module theano_queue._engine: its init and functions,
 * the package's exceptions, the one function that turns an engine error into
 * one of them, and the bridge from a libgpuarray context to its CUDA context. */
#define TQ_PY_MODULE /* the file that imports numpy's C API */
#include "tq_py.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#include "tq_copy.h"
#include "tq_pack.h"
#include "tq_cuda.h"

PyObject *QueueError, *QueueClosed, *QueueTimeout, *FeederError, *CudaError, *Stopped;
unsigned long fork_count;

static void count_fork(void) { fork_count++; }

/* ---- errors ------------------------------------------------------------------------ */

/* Each class of engine failure is one kind of exception:
 *   TQ_CLOSED -> QueueClosed      TQ_TIMEOUT -> QueueTimeout
 *   TQ_FAILED -> FeederError, its __cause__ the exception given to fail()
 *   TQ_STOPPED -> Stopped (a Stop was set; the Feeder catches it)
 *   TQ_EINVAL -> ValueError       TQ_ENOMEM -> MemoryError
 *   TQ_EDEVMEM, TQ_ECUDA -> CudaError (the message names the CUDA error:
 *                                      CUDA_ERROR_OUT_OF_MEMORY for the first)
 *   TQ_ESTATE and anything else -> QueueError */
static PyObject *exception_type(tq_code code)
{
    switch (code) {
    case TQ_CLOSED: return QueueClosed;
    case TQ_TIMEOUT: return QueueTimeout;
    case TQ_FAILED: return FeederError;
    case TQ_STOPPED: return Stopped;
    case TQ_EINVAL: return PyExc_ValueError;
    case TQ_ENOMEM: return PyExc_MemoryError;
    case TQ_EDEVMEM:
    case TQ_ECUDA: return CudaError;
    default: return QueueError;
    }
}

int raise_error(const char *who, RingObject *ring, const tq_error *err)
{
    PyObject *type = exception_type(err->code), *message;
    if (!ring)
        message = PyUnicode_FromFormat("%s: %s", who, err->message);
    else if (!who)
        message = PyUnicode_FromFormat("Queue '%U': %s", ring->name, err->message);
    else
        message = PyUnicode_FromFormat("%s: queue '%U': %s", who, ring->name, err->message);
    PyObject *exc = message ? PyObject_CallOneArg(type, message) : NULL;
    Py_XDECREF(message);
    if (!exc)
        return -1;
    if (err->code == TQ_FAILED && ring && ring->failure) {
        Py_INCREF(ring->failure);
        PyException_SetCause(exc, ring->failure);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return -1;
}

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
    Stopped = PyObject_GetAttrString(errors, "Stopped");
    Py_DECREF(errors);
    return QueueError && QueueClosed && QueueTimeout && FeederError && CudaError && Stopped ? 0 : -1;
}

/* ---- the libgpuarray bridge ----------------------------------------------------------- */

/* libgpuarray leaves no CUDA context current outside its cuda_enter and
 * cuda_exit, so the driver is asked between the two. */
tq_code cu_context_of(PyObject *gpu_context, void **cu_context, tq_error *err)
{
    void *gpucontext = PyLong_AsVoidPtr(gpu_context);
    if (!gpucontext) {
        PyErr_Clear();
        return tq_set_error(err, TQ_EINVAL, "gpu_context must be a libgpuarray context's address");
    }
    tq_code code = tq_cuda_load(err); /* first: without a driver, that is what to say */
    if (code != TQ_OK)
        return code;
    void *lib = dlopen("libgpuarray.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen("libgpuarray.so", RTLD_NOW | RTLD_NOLOAD);
    void *(*get_extension)(const char *) = lib ? (void *(*)(const char *))dlsym(lib, "gpuarray_get_extension") : NULL;
    void (*enter)(void *) = get_extension ? (void (*)(void *))get_extension("cuda_enter") : NULL;
    void (*leave)(void *) = get_extension ? (void (*)(void *))get_extension("cuda_exit") : NULL;
    if (!enter || !leave) {
        code = tq_set_error(err, TQ_ESTATE, "libgpuarray is not loaded or has no CUDA extension (is Theano on a GPU?)");
    } else {
        enter(gpucontext);
        code = tq_cuda_current_context(cu_context, err);
        leave(gpucontext);
    }
    if (lib)
        dlclose(lib); /* libgpuarray stays loaded: pygpu holds it */
    return code;
}

/* ---- functions ---------------------------------------------------------------------- */

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
 * dtype.  For a variable-length component (theano_queue/layout.py), which
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
        PyErr_SetString(PyExc_ValueError, "pack_rows: expected packed (n, L, ...) C-contiguous, source (n, W >= L, "
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
    tq_pack_job job = {PyArray_DATA(packed), (size_t)(PyArray_DIM(packed, 1) * per_length), PyArray_DATA(source),
                       PyArray_STRIDE(source, 0), used, n, PyArray_DATA(pad), (size_t)item};
    Py_BEGIN_ALLOW_THREADS
    tq_pack_rows(&job);
    Py_END_ALLOW_THREADS
    PyMem_Free(used);
    Py_RETURN_NONE;
}

static PyMethodDef engine_functions[] = {
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

/* ---- the module ----------------------------------------------------------------------- */

/* TRACE_EVENTS: the names of a trace's event kinds, in the order of its times. */
static PyObject *trace_events(void)
{
    PyObject *events = PyTuple_New(TQ_EV_COUNT);
    for (int k = 0; events && k < TQ_EV_COUNT; k++) {
        PyObject *name = PyUnicode_FromString(tq_event_name((tq_event)k));
        if (!name)
            Py_CLEAR(events);
        else
            PyTuple_SET_ITEM(events, k, name);
    }
    return events;
}

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "theano_queue._engine",
    "The queue engine (c_code/tq_ring.c) and its Python face.", -1, engine_functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    import_array();
    if (pthread_atfork(NULL, NULL, count_fork)) {
        PyErr_SetString(PyExc_ImportError, "theano_queue._engine: pthread_atfork failed");
        return NULL;
    }
    if (import_errors() || PyType_Ready(&RingType) < 0 || PyType_Ready(&StopType) < 0 || PyType_Ready(&LeaseType) < 0 ||
        PyType_Ready(&DLPackOwnerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    PyObject *api = capi_capsule();
    if (PyModule_AddType(m, &RingType) < 0 || PyModule_AddType(m, &StopType) < 0 || !api ||
        PyModule_AddObject(m, "_C_API", api) < 0 || PyModule_AddIntConstant(m, "MAX_COMPONENTS", TQ_MAX_COMPONENTS) ||
        PyModule_AddIntConstant(m, "MAX_CAPACITY", TQ_MAX_CAPACITY)) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *events = trace_events();
    if (!events || PyModule_AddObject(m, "TRACE_EVENTS", events) < 0) {
        Py_XDECREF(events);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
