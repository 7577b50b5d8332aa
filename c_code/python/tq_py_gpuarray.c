/* tq_py_gpuarray.c: the bridges to libgpuarray (loaded by pygpu whenever
 * Theano runs on a GPU): the CUDA context and the CUstream behind one of its
 * contexts.  Calls only the engine and the errors of the face. */
#include "tq_py.h"

#include <dlfcn.h>

#include "tq_cuda.h"

/* A function of libgpuarray's CUDA extension (cuda_enter, cuda_get_stream,
 * ...), or NULL when libgpuarray is not loaded or lacks it. */
static void *find_extension(const char *name)
{
    void *lib = dlopen("libgpuarray.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen("libgpuarray.so", RTLD_NOW | RTLD_NOLOAD);
    void *(*get_extension)(const char *) = lib ? (void *(*)(const char *))dlsym(lib, "gpuarray_get_extension") : NULL;
    void *fn = get_extension ? get_extension(name) : NULL;
    if (lib)
        dlclose(lib); /* stays loaded: pygpu holds it */
    return fn;
}

/* find_extension, or NULL with QueueError. */
static void *gpuarray_extension(const char *name)
{
    void *fn = find_extension(name);
    if (!fn)
        PyErr_Format(QueueError, "libgpuarray is not loaded or lacks its CUDA extension '%s'", name);
    return fn;
}

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
    void (*enter)(void *) = (void (*)(void *))find_extension("cuda_enter");
    void (*leave)(void *) = (void (*)(void *))find_extension("cuda_exit");
    if (!enter || !leave)
        return tq_set_error(err, TQ_ESTATE, "libgpuarray is not loaded or has no CUDA extension (is Theano on a GPU?)");
    enter(gpucontext);
    code = tq_cuda_current_context(cu_context, err);
    leave(gpucontext);
    return code;
}

static void *address_arg(PyObject *obj, const char *what)
{
    void *p = PyLong_AsVoidPtr(obj);
    if (!p && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must not be NULL", what);
    return p;
}

/* gpu_context_stream(gpu_context_ptr) -> the CUstream of a libgpuarray
 * context (pygpu's GpuContext.ptr), on which Theano computes. */
PyObject *gpu_context_stream(PyObject *module, PyObject *arg)
{
    (void)module;
    /* Looked up once: a device put of pygpu arrays asks it every time, and
     * libgpuarray, once loaded, stays (pygpu holds it). */
    static void *(*get_stream)(void *);
    void *ctx = address_arg(arg, "gpu_context");
    void *(*fn)(void *) = __atomic_load_n(&get_stream, __ATOMIC_ACQUIRE);
    if (ctx && !fn && (fn = (void *(*)(void *))gpuarray_extension("cuda_get_stream")))
        __atomic_store_n(&get_stream, fn, __ATOMIC_RELEASE);
    return ctx && fn ? PyLong_FromVoidPtr(fn(ctx)) : NULL;
}
