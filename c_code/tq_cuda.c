/* tq_cuda.c: the CUDA backend (see tq_cuda.h).  The driver API is declared
 * here, as far as it is used, and loaded with dlopen. */
#include "tq_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the driver API, as much as we use ------------------------------------------ */

typedef int CUresult;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x1
#define CU_MEMHOSTREGISTER_PORTABLE 0x1

static struct {
    CUresult (*Init)(unsigned int);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemHostRegister)(void *, size_t, unsigned int);
    CUresult (*MemHostUnregister)(void *);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
    CUresult (*EventCreate)(CUevent *, unsigned int);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
} cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[TQ_ERRLEN];

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
static void cuda_error(char *err, size_t errlen, const char *call, CUresult rc)
{
    const char *name = NULL, *text = NULL;
    if (cu.GetErrorName)
        cu.GetErrorName(rc, &name);
    if (cu.GetErrorString)
        cu.GetErrorString(rc, &text);
    tq_set_error(err, errlen, "%s: %s (%s)", call, name ? name : "CUDA_ERROR_UNKNOWN", text ? text : "no description");
}

/* Calls a driver function; on failure formats the error and jumps to fail. */
#define CU(call, args)                                  \
    do {                                                \
        CUresult rc_ = cu.call args;                    \
        if (rc_ != CUDA_SUCCESS) {                      \
            cuda_error(err, errlen, "cu" #call, rc_);   \
            goto fail;                                  \
        }                                               \
    } while (0)

static void load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "the CUDA driver (libcuda.so.1) could not be loaded: %s", dlerror());
        return;
    }
    struct {
        void **slot;
        const char *name;
    } symbols[] = {
        {(void **)&cu.Init, "cuInit"},
        {(void **)&cu.GetErrorName, "cuGetErrorName"},
        {(void **)&cu.GetErrorString, "cuGetErrorString"},
        {(void **)&cu.CtxGetCurrent, "cuCtxGetCurrent"},
        {(void **)&cu.CtxPushCurrent, "cuCtxPushCurrent_v2"},
        {(void **)&cu.CtxPopCurrent, "cuCtxPopCurrent_v2"},
        {(void **)&cu.MemAlloc, "cuMemAlloc_v2"},
        {(void **)&cu.MemFree, "cuMemFree_v2"},
        {(void **)&cu.MemHostAlloc, "cuMemHostAlloc"},
        {(void **)&cu.MemFreeHost, "cuMemFreeHost"},
        {(void **)&cu.MemHostRegister, "cuMemHostRegister_v2"},
        {(void **)&cu.MemHostUnregister, "cuMemHostUnregister"},
        {(void **)&cu.MemGetInfo, "cuMemGetInfo_v2"},
        {(void **)&cu.StreamCreate, "cuStreamCreate"},
        {(void **)&cu.StreamDestroy, "cuStreamDestroy_v2"},
        {(void **)&cu.StreamSynchronize, "cuStreamSynchronize"},
        {(void **)&cu.StreamWaitEvent, "cuStreamWaitEvent"},
        {(void **)&cu.EventCreate, "cuEventCreate"},
        {(void **)&cu.EventDestroy, "cuEventDestroy_v2"},
        {(void **)&cu.EventRecord, "cuEventRecord"},
        {(void **)&cu.EventSynchronize, "cuEventSynchronize"},
        {(void **)&cu.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
        {(void **)&cu.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
        {(void **)&cu.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(lib, symbols[i].name);
        if (!*symbols[i].slot) {
            snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s", symbols[i].name);
            cu.Init = NULL;
            return;
        }
    }
    CUresult rc = cu.Init(0);
    if (rc != CUDA_SUCCESS) {
        cuda_error(load_error, sizeof load_error, "cuInit", rc);
        cu.Init = NULL;
    }
}

int tq_cuda_load(char *err, size_t errlen)
{
    pthread_once(&load_once, load_driver);
    if (!cu.Init) {
        tq_set_error(err, errlen, "%s", load_error);
        return -1;
    }
    return 0;
}

int tq_cuda_context_of_gpuarray(void *gpucontext, void **cu_context, char *err, size_t errlen)
{
    if (tq_cuda_load(err, errlen))
        return -1;
    void *lib = dlopen("libgpuarray.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen("libgpuarray.so", RTLD_NOW | RTLD_NOLOAD);
    void *(*get_extension)(const char *) = lib ? (void *(*)(const char *))dlsym(lib, "gpuarray_get_extension") : NULL;
    void (*enter)(void *) = get_extension ? (void (*)(void *))get_extension("cuda_enter") : NULL;
    void (*leave)(void *) = get_extension ? (void (*)(void *))get_extension("cuda_exit") : NULL;
    if (!enter || !leave) {
        tq_set_error(err, errlen, "libgpuarray is not loaded or has no CUDA extension (is Theano on a GPU?)");
        return -1;
    }
    CUcontext ctx = NULL;
    enter(gpucontext);
    CUresult rc = cu.CtxGetCurrent(&ctx);
    leave(gpucontext);
    if (rc != CUDA_SUCCESS || !ctx) {
        cuda_error(err, errlen, "cuCtxGetCurrent", rc);
        return -1;
    }
    *cu_context = ctx;
    return 0;
}

/* ---- accounting -------------------------------------------------------------- */

static uint64_t device_allocated, pinned_allocated;

static void account(uint64_t *counter, int64_t delta) { __atomic_add_fetch(counter, (uint64_t)delta, __ATOMIC_RELAXED); }

void tq_cuda_allocated(uint64_t *device_bytes, uint64_t *pinned_bytes)
{
    *device_bytes = __atomic_load_n(&device_allocated, __ATOMIC_RELAXED);
    *pinned_bytes = __atomic_load_n(&pinned_allocated, __ATOMIC_RELAXED);
}

/* ---- the backend ------------------------------------------------------------- */

typedef struct {
    void *ptr;
    size_t bytes;
} host_range;

typedef struct {
    tq_backend base;
    CUcontext ctx;
    CUstream copy_stream;
    int capacity;
    size_t slot_bytes;
    int staging_registered; /* base.staging is page-locked */
    void **staging;         /* per slot, in base.staging; swapped by swap_staging */
    CUdeviceptr *device;
    CUevent *filled, *consumed;
    pthread_mutex_t registered_lock;
    host_range *registered;
    int n_registered, registered_cap;
} cuda_backend;

static const char cuda_backend_name[] = "cuda";

int tq_backend_is_cuda(const tq_backend *backend) { return backend && backend->name == cuda_backend_name; }

/* Every driver call runs with the ring's context current, in any thread. */
static int enter(cuda_backend *b, char *err, size_t errlen)
{
    CU(CtxPushCurrent, (b->ctx));
    return 0;
fail:
    return -1;
}

static void leave(void)
{
    CUcontext popped;
    cu.CtxPopCurrent(&popped);
}

static int cuda_alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)self;
    b->staging = calloc((size_t)capacity, sizeof *b->staging);
    b->device = calloc((size_t)capacity, sizeof *b->device);
    b->filled = calloc((size_t)capacity, sizeof *b->filled);
    b->consumed = calloc((size_t)capacity, sizeof *b->consumed);
    if (!b->staging || !b->device || !b->filled || !b->consumed) {
        tq_set_error(err, errlen, "cuda backend: out of host memory");
        return -1;
    }
    b->capacity = capacity;
    b->slot_bytes = slot_bytes;
    if (enter(b, err, errlen))
        return -1;
    /* Non-blocking: libgpuarray's streams synchronise with the legacy default
     * stream, and our copies must not. */
    CU(StreamCreate, (&b->copy_stream, CU_STREAM_NON_BLOCKING));
    /* The staging of every slot lives in one shared block (worker processes
     * map it), page-locked here, in this process only. */
    size_t page = tq_shm_page_size(), stride = (slot_bytes + page - 1) / page * page;
    if (tq_shm_create(&self->staging, stride * (size_t)capacity, err, errlen))
        goto fail;
    CU(MemHostRegister, (self->staging.base, self->staging.bytes, CU_MEMHOSTREGISTER_PORTABLE));
    b->staging_registered = 1;
    account(&pinned_allocated, (int64_t)self->staging.bytes);
    for (int i = 0; i < capacity; i++) {
        b->staging[i] = (char *)self->staging.base + (size_t)i * stride;
        CU(MemAlloc, (&b->device[i], slot_bytes));
        account(&device_allocated, (int64_t)slot_bytes);
        CU(EventCreate, (&b->filled[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
        CU(EventCreate, (&b->consumed[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
    }
    leave();
    return 0;
fail:
    leave();
    return -1; /* the ring destroys the backend, which frees what was made */
}

static void cuda_swap_staging(tq_backend *self, int a, int b)
{
    /* Both slots' staging was waited for (before_write): no copy reads either. */
    cuda_backend *c = (cuda_backend *)self;
    void *t = c->staging[a];
    c->staging[a] = c->staging[b];
    c->staging[b] = t;
}

static void *cuda_write_ptr(tq_backend *self, int slot) { return ((cuda_backend *)self)->staging[slot]; }

static void *cuda_read_ptr(tq_backend *self, int slot) { return (void *)(uintptr_t)((cuda_backend *)self)->device[slot]; }

/* The staging may still feed the copy that the slot's last publish started. */
static int cuda_before_write(tq_backend *self, int slot, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)self;
    if (enter(b, err, errlen))
        return -1;
    CU(EventSynchronize, (b->filled[slot]));
    leave();
    return 0;
fail:
    leave();
    return -1;
}

static int cuda_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)self;
    if (enter(b, err, errlen))
        return -1;
    /* The device slot is overwritten only after its last reader is done: an
     * order on the GPU, not a wait on the host. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n_extents; i++) {
        const void *src = extents[i].src ? extents[i].src : (const char *)b->staging[slot] + extents[i].offset;
        CU(MemcpyHtoDAsync, (b->device[slot] + extents[i].offset, src, extents[i].bytes, b->copy_stream));
    }
    CU(EventRecord, (b->filled[slot], b->copy_stream));
    leave();
    return 0;
fail:
    leave();
    return -1;
}

static int cuda_read_to_host(tq_backend *self, int slot, size_t offset, void *dst, size_t bytes, char *err,
                             size_t errlen)
{
    cuda_backend *b = (cuda_backend *)self;
    if (enter(b, err, errlen))
        return -1;
    CU(StreamWaitEvent, (b->copy_stream, b->filled[slot], 0));
    CU(MemcpyDtoHAsync, (dst, b->device[slot] + offset, bytes, b->copy_stream));
    CU(StreamSynchronize, (b->copy_stream));
    leave();
    return 0;
fail:
    leave();
    return -1;
}

static void cuda_destroy(tq_backend *self)
{
    cuda_backend *b = (cuda_backend *)self;
    char err[TQ_ERRLEN];
    size_t errlen = sizeof err;
    if (b->ctx && enter(b, err, errlen) == 0) {
        /* Nothing may still read or write the memory about to be freed. */
        for (int i = 0; i < b->capacity; i++) {
            if (b->filled && b->filled[i])
                cu.EventSynchronize(b->filled[i]);
            if (b->consumed && b->consumed[i])
                cu.EventSynchronize(b->consumed[i]);
        }
        if (b->copy_stream) {
            cu.StreamSynchronize(b->copy_stream);
            cu.StreamDestroy(b->copy_stream);
        }
        if (b->staging_registered) {
            cu.MemHostUnregister(self->staging.base);
            account(&pinned_allocated, -(int64_t)self->staging.bytes);
        }
        for (int i = 0; i < b->capacity; i++) {
            if (b->device[i]) {
                cu.MemFree(b->device[i]);
                account(&device_allocated, -(int64_t)b->slot_bytes);
            }
            if (b->filled[i])
                cu.EventDestroy(b->filled[i]);
            if (b->consumed[i])
                cu.EventDestroy(b->consumed[i]);
        }
        for (int i = 0; i < b->n_registered; i++)
            cu.MemHostUnregister(b->registered[i].ptr);
        leave();
    }
    tq_shm_destroy(&self->staging);
    pthread_mutex_destroy(&b->registered_lock);
    free(b->registered);
    free(b->staging);
    free(b->device);
    free(b->filled);
    free(b->consumed);
    free(b);
}

tq_backend *tq_cuda_backend_create(void *cu_context, char *err, size_t errlen)
{
    if (tq_cuda_load(err, errlen))
        return NULL;
    if (!cu_context) {
        tq_set_error(err, errlen, "cuda backend: no CUDA context");
        return NULL;
    }
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        tq_set_error(err, errlen, "cuda backend: out of host memory");
        return NULL;
    }
    pthread_mutex_init(&b->registered_lock, NULL);
    b->ctx = (CUcontext)cu_context;
    b->base.name = cuda_backend_name;
    b->base.alloc_slots = cuda_alloc_slots;
    b->base.write_ptr = cuda_write_ptr;
    b->base.read_ptr = cuda_read_ptr;
    b->base.before_write = cuda_before_write;
    b->base.publish = cuda_publish;
    b->base.read_to_host = cuda_read_to_host;
    b->base.swap_staging = cuda_swap_staging;
    b->base.destroy = cuda_destroy;
    return &b->base;
}

/* ---- consumers and device producers --------------------------------------------- */

int tq_cuda_take(tq_backend *backend, int slot, void *stream, int n, const size_t *offsets, const size_t *bytes,
                 const uint64_t *dsts, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)backend;
    CUstream s = (CUstream)stream;
    int ok = 0;
    if (enter(b, err, errlen))
        return -1;
    CU(StreamWaitEvent, (s, b->filled[slot], 0));
    for (int i = 0; i < n; i++)
        if (bytes[i])
            CU(MemcpyDtoDAsync, ((CUdeviceptr)dsts[i], b->device[slot] + offsets[i], bytes[i], s));
    ok = 1;
fail:
    /* Recorded on every path: the slot goes back to the producers either way,
     * and must not be overwritten before what was queued on `s` has read it. */
    if (cu.EventRecord(b->consumed[slot], s) != CUDA_SUCCESS && ok) {
        tq_set_error(err, errlen, "cuEventRecord failed for a consumed event");
        ok = 0;
    }
    leave();
    return ok ? 0 : -1;
}

int tq_cuda_put_from_device(tq_backend *backend, int slot, void *stream, int n, const size_t *offsets,
                            const size_t *bytes, const uint64_t *srcs, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)backend;
    CUstream s = (CUstream)stream;
    if (enter(b, err, errlen))
        return -1;
    CU(StreamWaitEvent, (s, b->consumed[slot], 0));
    for (int i = 0; i < n; i++)
        if (bytes[i])
            CU(MemcpyDtoDAsync, (b->device[slot] + offsets[i], (CUdeviceptr)srcs[i], bytes[i], s));
    CU(EventRecord, (b->filled[slot], s));
    leave();
    return 0;
fail:
    leave();
    return -1;
}

/* ---- registered host memory ------------------------------------------------------- */

int tq_cuda_register_host(tq_backend *backend, void *ptr, size_t bytes, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)backend;
    int rc = -1;
    pthread_mutex_lock(&b->registered_lock);
    if (b->n_registered == b->registered_cap) {
        int cap = b->registered_cap ? 2 * b->registered_cap : 4;
        host_range *grown = realloc(b->registered, (size_t)cap * sizeof *grown);
        if (!grown) {
            tq_set_error(err, errlen, "cuda backend: out of host memory");
            goto done;
        }
        b->registered = grown;
        b->registered_cap = cap;
    }
    if (enter(b, err, errlen))
        goto done;
    CU(MemHostRegister, (ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE));
    b->registered[b->n_registered].ptr = ptr;
    b->registered[b->n_registered].bytes = bytes;
    b->n_registered++;
    rc = 0;
fail:
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return rc;
}

int tq_cuda_unregister_host(tq_backend *backend, void *ptr, char *err, size_t errlen)
{
    cuda_backend *b = (cuda_backend *)backend;
    int rc = -1, found = -1;
    pthread_mutex_lock(&b->registered_lock);
    for (int i = 0; i < b->n_registered; i++)
        if (b->registered[i].ptr == ptr)
            found = i;
    if (found < 0) {
        tq_set_error(err, errlen, "cuda backend: %p was not registered", ptr);
        goto done;
    }
    if (enter(b, err, errlen))
        goto done;
    /* Copies from it may still be in flight. */
    CU(StreamSynchronize, (b->copy_stream));
    CU(MemHostUnregister, (ptr));
    b->registered[found] = b->registered[--b->n_registered];
    rc = 0;
fail:
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return rc;
}

int tq_cuda_is_registered(tq_backend *backend, const void *ptr, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)backend;
    const char *p = ptr;
    int inside = 0;
    pthread_mutex_lock(&b->registered_lock);
    for (int i = 0; i < b->n_registered && !inside; i++) {
        const char *start = b->registered[i].ptr;
        inside = p >= start && p + bytes <= start + b->registered[i].bytes;
    }
    pthread_mutex_unlock(&b->registered_lock);
    return inside;
}

int tq_cuda_mem_info(void *cu_context, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen)
{
    if (tq_cuda_load(err, errlen))
        return -1;
    CU(CtxPushCurrent, ((CUcontext)cu_context));
    CUresult rc = cu.MemGetInfo(free_bytes, total_bytes);
    leave();
    if (rc != CUDA_SUCCESS) {
        cuda_error(err, errlen, "cuMemGetInfo", rc);
        return -1;
    }
    return 0;
fail:
    return -1;
}

int tq_cuda_time_h2d(void *cu_context, size_t bytes, int repeats, double *seconds, char *err, size_t errlen)
{
    void *host = NULL;
    CUdeviceptr device = 0;
    CUstream stream = NULL;
    struct timespec t0, t1;
    int rc = -1;
    if (tq_cuda_load(err, errlen))
        return -1;
    if (cu.CtxPushCurrent((CUcontext)cu_context) != CUDA_SUCCESS) {
        tq_set_error(err, errlen, "cuCtxPushCurrent failed");
        return -1;
    }
    CU(MemHostAlloc, (&host, bytes, CU_MEMHOSTALLOC_PORTABLE));
    CU(MemAlloc, (&device, bytes));
    CU(StreamCreate, (&stream, CU_STREAM_NON_BLOCKING));
    memset(host, 1, bytes);
    CU(MemcpyHtoDAsync, (device, host, bytes, stream)); /* warm-up */
    CU(StreamSynchronize, (stream));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < repeats; i++)
        CU(MemcpyHtoDAsync, (device, host, bytes, stream));
    CU(StreamSynchronize, (stream));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *seconds = ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / repeats;
    rc = 0;
fail:
    if (stream)
        cu.StreamDestroy(stream);
    if (device)
        cu.MemFree(device);
    if (host)
        cu.MemFreeHost(host);
    leave();
    return rc;
}
