/* tq_cuda.c: the CUDA backend (see tq_cuda.h).  The driver API is declared
 * here, as far as it is used, and loaded with dlopen. */
#include "tq_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tq_nvrtc.h"

/* ---- the driver API, as much as we use ------------------------------------------ */

typedef int CUresult;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
/* CUmemcpyAttributes (CUDA 12.8+): how one group of a batch's copies reads. */
typedef struct {
    int srcAccessOrder;
    struct {
        int type, id;
    } srcLocHint, dstLocHint;
    unsigned int flags;
} CUmemcpyAttributes;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
/* cuPointerGetAttribute's attributes, and the memory types it reports */
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x2
#define CU_MEMHOSTREGISTER_READ_ONLY 0x8
#define CU_MEMHOSTALLOC_PORTABLE 0x1
#define CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1

/* Every driver function we call, written once: the struct of pointers and the
 * dlsym table below are both generated from it.  X(field, symbol, parameters):
 * `symbol` is the versioned name the driver exports for the API we mean. */
#define TQ_CUDA_FUNCTIONS(X)                                         \
    X(Init, cuInit, (unsigned int))                                  \
    X(GetErrorName, cuGetErrorName, (CUresult, const char **))       \
    X(GetErrorString, cuGetErrorString, (CUresult, const char **))   \
    X(CtxGetCurrent, cuCtxGetCurrent, (CUcontext *))                 \
    X(CtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext))              \
    X(CtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext *))              \
    X(CtxGetDevice, cuCtxGetDevice, (CUdevice *))                    \
    X(PointerGetAttribute, cuPointerGetAttribute, (void *, int, CUdeviceptr)) \
    X(MemAlloc, cuMemAlloc_v2, (CUdeviceptr *, size_t))              \
    X(MemFree, cuMemFree_v2, (CUdeviceptr))                          \
    X(MemHostRegister, cuMemHostRegister_v2, (void *, size_t, unsigned int)) \
    X(MemHostUnregister, cuMemHostUnregister, (void *))              \
    X(MemGetInfo, cuMemGetInfo_v2, (size_t *, size_t *))             \
    X(StreamCreate, cuStreamCreate, (CUstream *, unsigned int))      \
    X(StreamDestroy, cuStreamDestroy_v2, (CUstream))                 \
    X(StreamSynchronize, cuStreamSynchronize, (CUstream))            \
    X(StreamWaitEvent, cuStreamWaitEvent, (CUstream, CUevent, unsigned int)) \
    X(EventCreate, cuEventCreate, (CUevent *, unsigned int))         \
    X(EventDestroy, cuEventDestroy_v2, (CUevent))                    \
    X(EventRecord, cuEventRecord, (CUevent, CUstream))               \
    X(EventSynchronize, cuEventSynchronize, (CUevent))               \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream)) \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream)) \
    X(MemcpyPeerAsync, cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream)) \
    X(ModuleLoadData, cuModuleLoadData, (CUmodule *, const void *))  \
    X(ModuleGetFunction, cuModuleGetFunction, (CUfunction *, CUmodule, const char *)) \
    X(ModuleUnload, cuModuleUnload, (CUmodule))                      \
    X(LaunchKernel, cuLaunchKernel, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, \
                                     unsigned int, unsigned int, unsigned int, CUstream, void **, void **))

/* The same for functions the backend works without: a driver that lacks one
 * still loads, its pointer stays NULL, and what needs it checks.  Only traces
 * use cuLaunchHostFunc (on_arrival, FILLED). */
#define TQ_CUDA_OPTIONAL_FUNCTIONS(X) \
    X(LaunchHostFunc, cuLaunchHostFunc, (CUstream, void (*)(void *), void *)) \
    TQ_CUDA_GATHER_FUNCTIONS(X)

/* The device gather's (doc/design.rst, "The GPU gather"): a driver without
 * them gathers on the host.  cuMemcpyBatchAsync_v2 is CUDA 13's; the
 * unversioned name is CUDA 12.8's, with one more parameter (failIdx). */
#define TQ_CUDA_GATHER_FUNCTIONS(X)                                                              \
    X(MemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, (CUdeviceptr *, void *, unsigned int)) \
    X(MemHostAlloc, cuMemHostAlloc, (void **, size_t, unsigned int))                             \
    X(MemFreeHost, cuMemFreeHost, (void *))                                                      \
    X(MemcpyBatchAsync, cuMemcpyBatchAsync_v2,                                                   \
      (CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, CUstream)) \
    X(MemcpyBatchAsync12, cuMemcpyBatchAsync,                                                    \
      (CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, size_t *, CUstream))

#define TQ_DECLARE(field, symbol, params) CUresult(*field) params;
static struct {
    TQ_CUDA_FUNCTIONS(TQ_DECLARE)
    TQ_CUDA_OPTIONAL_FUNCTIONS(TQ_DECLARE)
} cu;
#undef TQ_DECLARE

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[TQ_ERRLEN];

/* Out of memory is out of host memory for the calls that page-lock host
 * memory, out of device memory for the rest. */
static tq_code cuda_error_code(const char *call, CUresult rc)
{
    if (rc != CUDA_ERROR_OUT_OF_MEMORY)
        return TQ_ECUDA;
    return strncmp(call, "cuMemHost", 9) == 0 ? TQ_ENOMEM : TQ_EDEVMEM;
}

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
static tq_code cuda_error(tq_error *err, const char *call, CUresult rc)
{
    const char *name = NULL, *text = NULL;
    if (cu.GetErrorName)
        cu.GetErrorName(rc, &name);
    if (cu.GetErrorString)
        cu.GetErrorString(rc, &text);
    return tq_set_error(err, cuda_error_code(call, rc), "%s: %s (%s)", call, name ? name : "CUDA_ERROR_UNKNOWN",
                        text ? text : "no description");
}

/* Calls a driver function; on failure sets `code` and err, and jumps to fail. */
#define CU(call, args)                              \
    do {                                            \
        CUresult rc_ = cu.call args;                \
        if (rc_ != CUDA_SUCCESS) {                  \
            code = cuda_error(err, "cu" #call, rc_); \
            goto fail;                              \
        }                                           \
    } while (0)

/* THEANO_QUEUE_LIBCUDA names another driver library: the tests' stand-in
 * (tests/c/fake_libcuda.c), as for theano_queue.probe. */
static void load_driver(void)
{
    const char *name = getenv("THEANO_QUEUE_LIBCUDA");
    void *lib = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "the CUDA driver (libcuda.so.1) could not be loaded: %s", dlerror());
        return;
    }
#define TQ_SYMBOL(field, symbol, params) {(void **)&cu.field, #symbol, 1},
#define TQ_OPTIONAL_SYMBOL(field, symbol, params) {(void **)&cu.field, #symbol, 0},
    struct {
        void **slot;
        const char *name;
        int required;
    } symbols[] = {TQ_CUDA_FUNCTIONS(TQ_SYMBOL) TQ_CUDA_OPTIONAL_FUNCTIONS(TQ_OPTIONAL_SYMBOL)};
#undef TQ_OPTIONAL_SYMBOL
#undef TQ_SYMBOL
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(lib, symbols[i].name);
        if (!*symbols[i].slot && symbols[i].required) {
            snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s", symbols[i].name);
            cu.Init = NULL;
            return;
        }
    }
    CUresult rc = cu.Init(0);
    if (rc != CUDA_SUCCESS) {
        tq_error e;
        cuda_error(&e, "cuInit", rc);
        snprintf(load_error, sizeof load_error, "%s", e.message);
        cu.Init = NULL;
    }
}

tq_code tq_cuda_load(tq_error *err)
{
    pthread_once(&load_once, load_driver);
    return cu.Init ? TQ_OK : tq_set_error(err, TQ_ECUDA, "%s", load_error);
}

tq_code tq_cuda_current_context(void **cu_context, tq_error *err)
{
    CUcontext ctx = NULL;
    tq_code code = tq_cuda_load(err);
    if (code != TQ_OK)
        return code;
    CUresult rc = cu.CtxGetCurrent(&ctx);
    if (rc != CUDA_SUCCESS)
        return cuda_error(err, "cuCtxGetCurrent", rc);
    if (!ctx)
        return tq_set_error(err, TQ_EINVAL, "no CUDA context is current in this thread");
    *cu_context = ctx;
    return TQ_OK;
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

/* Host memory the device gathers rows from: pages of this process, page-locked
 * and mapped once however many rings gather from them (two queues fed from
 * one dataset), and unregistered when the last lets go. */
typedef struct pinned_pages {
    char *start, *end;
    int users;
    struct pinned_pages *next;
} pinned_pages;

/* One range a backend gathers from: pages it holds a use of (owner), or
 * memory register_host page-locked (owner NULL).  The device reads host
 * address p at p + to_device. */
typedef struct {
    char *start, *end;
    pinned_pages *owner;
    long long to_device;
} attachment;

/* A slot's batch of row indices: pinned on the host, copied to the device
 * for the kernel.  Free again once the slot's *filled* event has fired. */
typedef struct {
    int64_t *host;
    CUdeviceptr device;
    int64_t capacity;
} slot_indices;

/* The kernel comes in one version per word size: 16, 8, 4, 2, 1 bytes. */
#define TQ_GATHER_WORDS 5

typedef struct {
    tq_backend base;
    CUcontext ctx;
    CUstream copy_stream;
    int capacity;
    size_t slot_bytes;
    tq_shm staging;         /* every slot's staging, one shared block */
    int staging_registered; /* page-locked with cuMemHostRegister */
    CUdeviceptr *device;
    CUevent *filled, *consumed;
    pthread_mutex_t registered_lock;
    host_range *registered;
    int n_registered, registered_cap;
    int device_ordinal;          /* the GPU of ctx */
    pthread_mutex_t module_lock; /* loads the strided-copy kernel once */
    CUmodule strided_module;
    CUfunction strided_copy;
    /* The device gather (attach_rows).  gather_lock orders the gathers a
     * publish_rows queues against a detach that unpins their memory. */
    pthread_mutex_t gather_lock;
    tq_gather_mechanism gather; /* TQ_GATHER_HOST while nothing is attached */
    attachment *attached;
    int n_attached;
    CUmodule module;            /* the kernels, loaded at the first attach that wants them */
    CUfunction kernels[TQ_GATHER_WORDS];
    slot_indices *indices;      /* capacity of them */
    CUdeviceptr *batch_dsts, *batch_srcs; /* one batch's copies, built under gather_lock */
    size_t *batch_sizes, batch_cap;
} cuda_backend;

/* Every driver call runs with the ring's context current, in any thread. */
static tq_code enter(cuda_backend *b, tq_error *err)
{
    CUresult rc = cu.CtxPushCurrent(b->ctx);
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuCtxPushCurrent", rc);
}

static void leave(void)
{
    CUcontext popped;
    cu.CtxPopCurrent(&popped);
}

static tq_code cuda_alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    b->device = calloc((size_t)capacity, sizeof *b->device);
    b->filled = calloc((size_t)capacity, sizeof *b->filled);
    b->consumed = calloc((size_t)capacity, sizeof *b->consumed);
    if (!b->device || !b->filled || !b->consumed)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for the cuda backend's tables");
    b->capacity = capacity;
    b->slot_bytes = slot_bytes;
    /* The staging of every slot lives in one shared block that worker
     * processes map; it is page-locked here, in this process only. */
    if ((code = tq_shm_create_slots(&b->staging, capacity, 0, slot_bytes, err)) != TQ_OK)
        return code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    /* Non-blocking: libgpuarray's streams synchronise with the legacy default
     * stream, and our copies must not. */
    CU(StreamCreate, (&b->copy_stream, CU_STREAM_NON_BLOCKING));
    CU(CtxGetDevice, (&b->device_ordinal));
    CU(MemHostRegister, (b->staging.base, b->staging.bytes, CU_MEMHOSTREGISTER_PORTABLE));
    b->staging_registered = 1;
    account(&pinned_allocated, (int64_t)b->staging.bytes);
    for (int i = 0; i < capacity; i++) {
        CU(MemAlloc, (&b->device[i], slot_bytes));
        account(&device_allocated, (int64_t)slot_bytes);
        CU(EventCreate, (&b->filled[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
        CU(EventCreate, (&b->consumed[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
    }
fail: /* on failure the ring destroys the backend, which frees what was made */
    leave();
    return code;
}

static void *cuda_write_ptr(tq_backend *self, int slot) { return ((cuda_backend *)self)->staging.slot[slot]; }

static const tq_shm *cuda_shared_staging(tq_backend *self) { return &((cuda_backend *)self)->staging; }

/* Both slots' staging was waited for (before_write): no copy reads either,
 * and the next copy from each is ordered by the event of the slot that
 * holds it then. */
static void cuda_swap_staging(tq_backend *self, int a, int b)
{
    tq_shm_swap_slots(&((cuda_backend *)self)->staging, a, b);
}

/* The staging may still feed the copy that the slot's last publish started. */
static tq_code cuda_before_write(tq_backend *self, int slot, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(EventSynchronize, (b->filled[slot]));
fail:
    leave();
    return code;
}

static tq_code cuda_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    /* The device slot is overwritten only after its last reader is done: an
     * order on the GPU, not a wait on the host. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n_extents; i++) {
        const void *src = extents[i].src ? extents[i].src : (const char *)b->staging.slot[slot] + extents[i].offset;
        CU(MemcpyHtoDAsync, (b->device[slot] + extents[i].offset, src, extents[i].bytes, b->copy_stream));
    }
    CU(EventRecord, (b->filled[slot], b->copy_stream));
fail:
    leave();
    return code;
}

static tq_code cuda_read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(StreamWaitEvent, (b->copy_stream, b->filled[slot], 0));
    CU(MemcpyDtoHAsync, (dst, b->device[slot] + extent->offset, extent->bytes, b->copy_stream));
    CU(StreamSynchronize, (b->copy_stream));
fail:
    leave();
    return code;
}

/* ---- consumers and device producers --------------------------------------------- */

/* Copies n extents between the slot's device memory and device addresses on
 * a caller's stream, ordered by the slot's events: a consumer (into_slot 0)
 * waits for *filled* and records *consumed*; a device producer (into_slot 1)
 * waits for *consumed* and records *filled*.  No host wait. */
static tq_code copy_on_stream(cuda_backend *b, int slot, CUstream s, const tq_extent *extents, int n,
                              const uint64_t *addrs, int into_slot, tq_error *err)
{
    CUevent before = into_slot ? b->consumed[slot] : b->filled[slot];
    CUevent after = into_slot ? b->filled[slot] : b->consumed[slot];
    CUresult rc;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(StreamWaitEvent, (s, before, 0));
    for (int i = 0; i < n; i++) {
        CUdeviceptr in_slot = b->device[slot] + extents[i].offset, other = (CUdeviceptr)addrs[i];
        if (extents[i].bytes)
            CU(MemcpyDtoDAsync, (into_slot ? in_slot : other, into_slot ? other : in_slot, extents[i].bytes, s));
    }
fail:
    /* Recorded on every path: a slot read goes back to the producers either
     * way and must not be overwritten before what was queued on `s` has read
     * it; a slot written and dropped is written again only after the record. */
    rc = cu.EventRecord(after, s);
    if (rc != CUDA_SUCCESS && code == TQ_OK)
        code = cuda_error(err, "cuEventRecord", rc);
    leave();
    return code;
}

static tq_code cuda_take(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                         const uint64_t *dsts, tq_error *err)
{
    return copy_on_stream((cuda_backend *)self, slot, (CUstream)stream, extents, n, dsts, 0, err);
}

static tq_code cuda_put_from_device(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                                    const uint64_t *srcs, tq_error *err)
{
    return copy_on_stream((cuda_backend *)self, slot, (CUstream)stream, extents, n, srcs, 1, err);
}

/* ---- device arrays put from host code ------------------------------------------------ */

#include "tq_strided_ptx.h"

/* The kernel's argument, laid out as tq_strided_desc in tq_strided.cu. */
typedef struct {
    long long shape[TQ_DEVICE_MAX_DIMS];
    long long strides[TQ_DEVICE_MAX_DIMS];
    long long n;
    int ndim;
    int unit;
} strided_desc;

static tq_code cuda_probe_device(tq_backend *self, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    unsigned int memory_type = 0, managed = 0;
    CUcontext owner = NULL;
    int ordinal = -1;
    tq_code code;
    *device = b->device_ordinal;
    memset(out, 0, sizeof *out);
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    /* Memory the driver does not know (pageable host memory, a bad address)
     * is refused by the caller: there is nothing to copy from on a GPU. */
    if (cu.PointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptr) != CUDA_SUCCESS) {
        out->kind = TQ_MEM_UNKNOWN;
        goto fail;
    }
    CU(PointerGetAttribute, (&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)ptr));
    CU(PointerGetAttribute, (&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr));
    /* Managed memory has no context of its own to name (the driver may say
     * CUDA_ERROR_INVALID_VALUE): it is then the ring's to read. */
    if (cu.PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)ptr) != CUDA_SUCCESS)
        owner = NULL;
    out->kind = managed ? TQ_MEM_MANAGED : memory_type == CU_MEMORYTYPE_DEVICE ? TQ_MEM_DEVICE : TQ_MEM_HOST;
    out->device = ordinal;
    out->context = owner;
    out->same_context = !owner || owner == b->ctx;
fail:
    leave();
    return code;
}

/* The strided-copy kernel, loaded into the ring's context at the first put
 * that needs it.  Called with the context current. */
static tq_code strided_kernel(cuda_backend *b, CUfunction *fn, tq_error *err)
{
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->module_lock);
    if (!b->strided_module) {
        CUmodule module = NULL;
        CU(ModuleLoadData, (&module, tq_strided_ptx));
        b->strided_module = module;
        CU(ModuleGetFunction, (&b->strided_copy, b->strided_module, "tq_strided_copy"));
    }
fail:
    *fn = b->strided_copy;
    if (code == TQ_OK && !*fn)
        code = tq_set_error(err, TQ_ECUDA, "the strided-copy kernel did not load");
    pthread_mutex_unlock(&b->module_lock);
    return code;
}

/* The widest unit (8, 4, 2 or 1 bytes) that divides the source's address,
 * itemsize and every stride: the kernel's loads are then aligned. */
static int copy_unit(const tq_device_src *src)
{
    uint64_t bits = src->ptr | src->itemsize;
    for (int d = 0; d < src->ndim; d++)
        bits |= (uint64_t)(src->strides[d] < 0 ? -src->strides[d] : src->strides[d]);
    return bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : bits % 2 == 0 ? 2 : 1;
}

/* 1 when the source's bytes lie back to back in C order from ptr. */
static int src_contiguous(const tq_device_src *src)
{
    int64_t step = (int64_t)src->itemsize;
    for (int d = src->ndim - 1; d >= 0; d--) {
        if (src->shape[d] != 1 && src->strides[d] != step)
            return 0;
        step *= src->shape[d];
    }
    return 1;
}

/* Copies one component on the copy stream: a memcpy for a contiguous source
 * (cuMemcpyPeerAsync from another context of the same GPU), the kernel for
 * any other layout (the face refuses those from another context). */
static tq_code copy_component(cuda_backend *b, CUdeviceptr dst, const tq_device_src *src, size_t bytes, tq_error *err)
{
    tq_code code = TQ_OK;
    if (src_contiguous(src)) {
        if (src->where.same_context)
            CU(MemcpyDtoDAsync, (dst, (CUdeviceptr)src->ptr, bytes, b->copy_stream));
        else
            CU(MemcpyPeerAsync, (dst, b->ctx, (CUdeviceptr)src->ptr, (CUcontext)src->where.context, bytes,
                                 b->copy_stream));
        return TQ_OK;
    }
    CUfunction fn;
    if ((code = strided_kernel(b, &fn, err)) != TQ_OK)
        return code;
    strided_desc desc = {.unit = copy_unit(src)};
    int64_t units_per_item = (int64_t)src->itemsize / desc.unit;
    desc.ndim = src->ndim + (units_per_item > 1); /* an item of several units is one more axis */
    desc.n = 1;
    for (int d = 0; d < src->ndim; d++) {
        desc.shape[d] = src->shape[d];
        desc.strides[d] = src->strides[d];
        desc.n *= src->shape[d];
    }
    if (units_per_item > 1) {
        desc.shape[src->ndim] = units_per_item;
        desc.strides[src->ndim] = desc.unit;
        desc.n *= units_per_item;
    }
    if (desc.ndim > TQ_DEVICE_MAX_DIMS)
        return tq_set_error(err, TQ_EINVAL, "a strided device array with more than %d axes that cannot be merged",
                            TQ_DEVICE_MAX_DIMS - 1);
    const char *from = (const char *)(uintptr_t)src->ptr;
    char *to = (char *)(uintptr_t)dst;
    void *params[] = {&from, &to, &desc};
    long long blocks = (desc.n + 255) / 256;
    CU(LaunchKernel, (fn, (unsigned int)(blocks < 4096 ? blocks : 4096), 1, 1, 256, 1, 1, 0, b->copy_stream, params,
                      NULL));
fail:
    return code;
}

/* Runs `stream` (of `context`, NULL for the ring's) against an event: with
 * record, the copy stream waits for what is queued on `stream` now; without,
 * `stream` waits for the slot's filled event.  Events are recorded in the
 * stream's own context, as the driver requires. */
static tq_code order_with_producer(cuda_backend *b, void *context, CUstream stream, int slot, int record,
                                   tq_error *err)
{
    CUcontext ctx = context ? (CUcontext)context : b->ctx;
    CUevent event = NULL;
    CUresult rc;
    tq_code code = TQ_OK;
    if ((rc = cu.CtxPushCurrent(ctx)) != CUDA_SUCCESS)
        return cuda_error(err, "cuCtxPushCurrent", rc);
    if (record) {
        CU(EventCreate, (&event, CU_EVENT_DISABLE_TIMING));
        CU(EventRecord, (event, stream));
        CU(StreamWaitEvent, (b->copy_stream, event, 0)); /* an event of another context is fine here */
    } else {
        CU(StreamWaitEvent, (stream, b->filled[slot], 0));
    }
fail:
    if (event)
        cu.EventDestroy(event); /* freed once the wait is done */
    leave();
    return code;
}

static tq_code cuda_put_device_arrays(tq_backend *self, int slot, const tq_extent *extents, int n,
                                      const tq_device_src *srcs, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    int host_wait = 0, recorded = 0;
    CUresult rc;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    for (int i = 0; i < n; i++) {
        if (srcs[i].stream) {
            if ((code = order_with_producer(b, srcs[i].where.context, (CUstream)srcs[i].stream, slot, 1, err)) != TQ_OK)
                goto fail;
        } else {
            host_wait = 1;
        }
    }
    /* The device slot is overwritten only after its last reader is done. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n; i++)
        if (extents[i].bytes && (code = copy_component(b, b->device[slot] + extents[i].offset, &srcs[i],
                                                       extents[i].bytes, err)) != TQ_OK)
            goto fail;
fail:
    /* Recorded on every path once anything may be queued: a slot dropped
     * here is written again only after the record. */
    rc = cu.EventRecord(b->filled[slot], b->copy_stream);
    recorded = rc == CUDA_SUCCESS;
    if (!recorded && code == TQ_OK)
        code = cuda_error(err, "cuEventRecord", rc);
    /* The producers may overwrite or free their arrays only once the copy has
     * read them: their streams wait for it on the GPU; a producer without a
     * stream is this thread, which waits here.  On failure too: a copy may
     * have been queued before the call that failed. */
    for (int i = 0; recorded && i < n; i++) {
        if (!srcs[i].stream)
            continue;
        tq_code ordered = order_with_producer(b, srcs[i].where.context, (CUstream)srcs[i].stream, slot, 0, err);
        if (ordered != TQ_OK) {
            host_wait = 1; /* the next best: the array is read before we return */
            if (code == TQ_OK)
                code = ordered;
        }
    }
    if (recorded && (host_wait || code != TQ_OK)) {
        rc = cu.EventSynchronize(b->filled[slot]);
        if (rc != CUDA_SUCCESS && code == TQ_OK)
            code = cuda_error(err, "cuEventSynchronize", rc);
    }
    leave();
    return code;
}

static void *cuda_copy_stream(tq_backend *self) { return ((cuda_backend *)self)->copy_stream; }

/* Runs fn(arg) on a driver thread once the copy stream has done what is
 * queued on it now, the slot's last copy included. */
static tq_code cuda_on_arrival(tq_backend *self, int slot, void (*fn)(void *), void *arg, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    (void)slot;
    if (!cu.LaunchHostFunc)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuLaunchHostFunc");
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(LaunchHostFunc, (b->copy_stream, fn, arg));
fail:
    leave();
    return code;
}

/* ---- registered host memory ------------------------------------------------------- */

static int find_registered(const cuda_backend *b, const void *ptr)
{
    for (int i = 0; i < b->n_registered; i++)
        if (b->registered[i].ptr == ptr)
            return i;
    return -1;
}

static tq_code cuda_register_host(tq_backend *self, void *ptr, size_t bytes, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->registered_lock);
    if (b->n_registered == b->registered_cap) {
        int cap = b->registered_cap ? 2 * b->registered_cap : 4;
        host_range *grown = realloc(b->registered, (size_t)cap * sizeof *grown);
        if (!grown) {
            code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the list of registered memory");
            goto done;
        }
        b->registered = grown;
        b->registered_cap = cap;
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto done;
    /* Mapped as well, so that the device gather can read rows from it. */
    CU(MemHostRegister, (ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    b->registered[b->n_registered++] = (host_range){ptr, bytes};
fail:
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return code;
}

/* Gathers from attachments inside [start, end) end (gather_lock held). */
static void forget_attachments_in(cuda_backend *b, const char *start, const char *end)
{
    for (int i = 0; i < b->n_attached;)
        if (!b->attached[i].owner && b->attached[i].start >= start && b->attached[i].end <= end)
            b->attached[i] = b->attached[--b->n_attached];
        else
            i++;
}

static tq_code cuda_unregister_host(tq_backend *self, void *ptr, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->gather_lock); /* always before registered_lock */
    pthread_mutex_lock(&b->registered_lock);
    int found = find_registered(b, ptr);
    if (found < 0) {
        code = tq_set_error(err, TQ_EINVAL, "%p was not registered with this queue", ptr);
        goto done;
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto done;
    /* Copies and gathers from it may still be in flight; later puts of its
     * rows are gathered on the host. */
    CU(StreamSynchronize, (b->copy_stream));
    forget_attachments_in(b, ptr, (char *)ptr + b->registered[found].bytes);
    CU(MemHostUnregister, (ptr));
    b->registered[found] = b->registered[--b->n_registered];
fail:
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

static int cuda_reads_directly(tq_backend *self, const void *ptr, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)self;
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

/* ---- the device gather --------------------------------------------------------------- */

/* The kernel: block row r of the grid (and every gridDim.x-th after it)
 * copies row idx[r] of the source to row r of the slot, its threads (and
 * gridDim.y blocks) taking the row's words in turn.  One version per word
 * size: the caller picks the widest that every row's address, the stride and
 * the row size are multiples of, so that rows that are not 16-byte aligned
 * (a view offset by a byte, odd row sizes) are copied exactly too. */
static const char gather_source[] =
    "struct alignas(16) tq_w16 { unsigned long long lo, hi; };\n"
    "#define TQ_GATHER(name, word)                                                              \\\n"
    "extern \"C\" __global__ void name(word *dst, const char *src, long long stride,             \\\n"
    "                                  unsigned long long words, const long long *idx,            \\\n"
    "                                  long long rows)                                            \\\n"
    "{                                                                                            \\\n"
    "    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {                               \\\n"
    "        const word *from = (const word *)(src + idx[r] * stride);                            \\\n"
    "        word *to = dst + (unsigned long long)r * words;                                      \\\n"
    "        for (unsigned long long w = (unsigned long long)blockIdx.y * blockDim.x + threadIdx.x;  \\\n"
    "             w < words; w += (unsigned long long)gridDim.y * blockDim.x)                     \\\n"
    "            to[w] = from[w];                                                                 \\\n"
    "    }                                                                                        \\\n"
    "}\n"
    "TQ_GATHER(tq_gather_w16, tq_w16)\n"
    "TQ_GATHER(tq_gather_w8, unsigned long long)\n"
    "TQ_GATHER(tq_gather_w4, unsigned int)\n"
    "TQ_GATHER(tq_gather_w2, unsigned short)\n"
    "TQ_GATHER(tq_gather_w1, unsigned char)\n";

static const char *const kernel_names[TQ_GATHER_WORDS] = {"tq_gather_w16", "tq_gather_w8", "tq_gather_w4",
                                                          "tq_gather_w2", "tq_gather_w1"};
#define TQ_GATHER_THREADS 256
/* Blocks that share one row: enough for large rows to keep many reads over
 * the bus in flight. */
#define TQ_GATHER_BLOCKS_PER_ROW 64

/* NVRTC runs once per process; its PTX (or why there is none) is kept. */
static pthread_mutex_t ptx_lock = PTHREAD_MUTEX_INITIALIZER;
static char *gather_ptx;
static tq_error ptx_error;
static int ptx_tried;

static tq_code gather_kernel_ptx(const char **ptx, tq_error *err)
{
    pthread_mutex_lock(&ptx_lock);
    if (!ptx_tried) {
        ptx_tried = 1;
        tq_nvrtc_compile(gather_source, "tq_gather.cu", &gather_ptx, &ptx_error);
    }
    pthread_mutex_unlock(&ptx_lock);
    *ptx = gather_ptx;
    if (gather_ptx)
        return TQ_OK;
    if (err)
        *err = ptx_error;
    return ptx_error.code;
}

/* Loads the kernels into the ring's context (once). */
static tq_code load_kernels(cuda_backend *b, tq_error *err)
{
    const char *ptx;
    tq_code code;
    if (b->module)
        return TQ_OK;
    if (!cu.ModuleLoadData || !cu.ModuleGetFunction || !cu.LaunchKernel || !cu.MemHostAlloc || !cu.MemFreeHost)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuModuleLoadData or cuLaunchKernel");
    if ((code = gather_kernel_ptx(&ptx, err)) != TQ_OK)
        return code;
    CU(ModuleLoadData, (&b->module, ptx));
    for (int i = 0; i < TQ_GATHER_WORDS; i++)
        CU(ModuleGetFunction, (&b->kernels[i], b->module, kernel_names[i]));
    return TQ_OK;
fail:
    if (b->module)
        cu.ModuleUnload(b->module);
    b->module = NULL;
    return code;
}

static tq_code ready_mechanism(cuda_backend *b, tq_gather_mechanism want, tq_gather_mechanism *used, tq_error *err)
{
    /* The choice point: TQ_GATHER_AUTO takes the first of these that this
     * machine has, in the order the H200's measurement put them in
     * (doc/design.rst, "The GPU gather"). */
    static const tq_gather_mechanism preferred[] = {TQ_GATHER_KERNEL, TQ_GATHER_BATCH};
    tq_error why[2];
    tq_code code = TQ_ESTATE;
    for (int i = 0; i < 2; i++) {
        tq_gather_mechanism m = preferred[i];
        if (want != TQ_GATHER_AUTO && want != m)
            continue;
        if (m == TQ_GATHER_KERNEL)
            code = load_kernels(b, &why[i]);
        else if (!cu.MemcpyBatchAsync && !cu.MemcpyBatchAsync12)
            code = tq_set_error(&why[i], TQ_ESTATE, "the CUDA driver lacks cuMemcpyBatchAsync (CUDA 12.8+)");
        else
            code = TQ_OK;
        if (code == TQ_OK) {
            *used = m;
            return TQ_OK;
        }
        if (want != TQ_GATHER_AUTO)
            return tq_set_error(err, code, "%s", why[i].message);
    }
    return tq_set_error(err, code, "%s; and %s", why[0].message, why[1].message);
}

/* ---- pinned pages, shared by every ring of the process ---- */

static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static pinned_pages *pinned_list;

/* A use of the pages [start, end): page-locked and mapped now if no ring
 * holds them yet.  TQ_ESTATE when they overlap pages pinned for other
 * memory. */
static tq_code use_pages(char *start, char *end, int read_only, pinned_pages **out, tq_error *err)
{
    tq_code code = TQ_OK;
    pinned_pages *p;
    pthread_mutex_lock(&pinned_lock);
    for (p = pinned_list; p; p = p->next) {
        if (start >= p->start && end <= p->end) {
            p->users++;
            goto done;
        }
        if (start < p->end && p->start < end) {
            code = tq_set_error(err, TQ_ESTATE, "its memory overlaps other memory page-locked for a gather");
            goto done;
        }
    }
    if (!(p = calloc(1, sizeof *p))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the list of pinned pages");
        goto done;
    }
    /* Never CU_MEMHOSTREGISTER_READ_ONLY, even for a read-only dataset: the
     * whole pages are registered, and the memory that shares the first and
     * last page (a numpy array that a device-to-host copy fills, say) must
     * stay writable by the GPU. */
    (void)read_only;
    unsigned int flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
    CUresult rc = cu.MemHostRegister(start, (size_t)(end - start), flags);
    if (rc != CUDA_SUCCESS) {
        free(p);
        p = NULL;
        code = cuda_error(err, "cuMemHostRegister", rc);
        goto done;
    }
    *p = (pinned_pages){start, end, 1, pinned_list};
    pinned_list = p;
done:
    pthread_mutex_unlock(&pinned_lock);
    *out = p;
    return code;
}

static void stop_using_pages(pinned_pages *pages)
{
    pthread_mutex_lock(&pinned_lock);
    if (--pages->users == 0) {
        for (pinned_pages **at = &pinned_list; *at; at = &(*at)->next)
            if (*at == pages) {
                *at = pages->next;
                break;
            }
        cu.MemHostUnregister(pages->start);
        free(pages);
    }
    pthread_mutex_unlock(&pinned_lock);
}

/* ---- attach and detach ---- */

/* Memory that register_host page-locked and that holds [start, end). */
static int inside_registered(cuda_backend *b, const char *start, const char *end)
{
    int inside = 0;
    pthread_mutex_lock(&b->registered_lock);
    for (int i = 0; i < b->n_registered && !inside; i++) {
        const char *r = b->registered[i].ptr;
        inside = start >= r && end <= r + b->registered[i].bytes;
    }
    pthread_mutex_unlock(&b->registered_lock);
    return inside;
}

/* Attaches the pages [start, end) (ctx current, gather_lock held). */
static tq_code attach_range(cuda_backend *b, char *start, char *end, int read_only, tq_error *err)
{
    attachment *a = &b->attached[b->n_attached];
    CUdeviceptr device = 0;
    tq_code code = TQ_OK;
    *a = (attachment){start, end, NULL, 0};
    if (!inside_registered(b, start, end) && (code = use_pages(start, end, read_only, &a->owner, err)) != TQ_OK)
        return code;
    CU(MemHostGetDevicePointer, (&device, start, 0));
    a->to_device = (long long)(device - (CUdeviceptr)(uintptr_t)start);
    b->n_attached++;
    return TQ_OK;
fail:
    if (a->owner)
        stop_using_pages(a->owner);
    return code;
}

static void free_indices(cuda_backend *b)
{
    for (int i = 0; b->indices && i < b->capacity; i++) {
        if (b->indices[i].host)
            cu.MemFreeHost(b->indices[i].host);
        if (b->indices[i].device)
            cu.MemFree(b->indices[i].device);
        b->indices[i] = (slot_indices){NULL, 0, 0};
    }
}

/* Undoes every attach (ctx current, gather_lock held): nothing queued on the
 * copy stream may still read the memory. */
static tq_code detach_all(cuda_backend *b, tq_error *err)
{
    tq_code code = TQ_OK;
    if (b->gather == TQ_GATHER_HOST && !b->n_attached)
        return TQ_OK;
    CUresult rc = cu.StreamSynchronize(b->copy_stream);
    if (rc != CUDA_SUCCESS)
        code = cuda_error(err, "cuStreamSynchronize", rc);
    for (int i = 0; i < b->n_attached; i++)
        if (b->attached[i].owner)
            stop_using_pages(b->attached[i].owner);
    b->n_attached = 0;
    b->gather = TQ_GATHER_HOST;
    free_indices(b);
    return code;
}

typedef struct {
    char *start, *end;
    int read_only;
} page_range;

static int by_start(const void *x, const void *y)
{
    const page_range *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* The pages of the sources, sorted, and merged where they share a page (the
 * rows of one dataset's arrays often do): each merged range is pinned once. */
static int page_ranges(const void *const *ptrs, const size_t *bytes, const int *read_only, int n, page_range *out)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!bytes[i])
            continue;
        uintptr_t lo = (uintptr_t)ptrs[i] & ~(page - 1), hi = ((uintptr_t)ptrs[i] + bytes[i] + page - 1) & ~(page - 1);
        out[m++] = (page_range){(char *)lo, (char *)hi, read_only[i]};
    }
    qsort(out, (size_t)m, sizeof *out, by_start);
    int merged = 0;
    for (int i = 0; i < m; i++) {
        page_range *last = merged ? &out[merged - 1] : NULL;
        if (last && out[i].start < last->end) {
            last->end = out[i].end > last->end ? out[i].end : last->end;
            last->read_only |= out[i].read_only;
        } else {
            out[merged++] = out[i];
        }
    }
    return merged;
}

static tq_code cuda_attach_rows(tq_backend *self, const void *const *ptrs, const size_t *bytes, const int *read_only,
                                int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    page_range ranges[TQ_MAX_COMPONENTS];
    tq_code code;
    *used = TQ_GATHER_HOST;
    if (n < 1 || n > TQ_MAX_COMPONENTS)
        return tq_set_error(err, TQ_EINVAL, "expected 1 to %d source ranges, got %d", TQ_MAX_COMPONENTS, n);
    if (!cu.MemHostGetDevicePointer)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuMemHostGetDevicePointer");
    pthread_mutex_lock(&b->gather_lock);
    if (b->gather != TQ_GATHER_HOST) {
        code = tq_set_error(err, TQ_ESTATE, "the device already gathers rows for another source of this queue");
        goto unlock;
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto unlock;
    tq_gather_mechanism chosen = TQ_GATHER_HOST;
    if ((code = ready_mechanism(b, mechanism, &chosen, err)) != TQ_OK)
        goto out;
    if (!b->indices && !(b->indices = calloc((size_t)b->capacity, sizeof *b->indices))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the gather's index buffers");
        goto out;
    }
    int m = page_ranges(ptrs, bytes, read_only, n, ranges);
    if (!(b->attached = calloc((size_t)(m ? m : 1), sizeof *b->attached))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the gather's sources");
        goto out;
    }
    for (int i = 0; i < m && code == TQ_OK; i++)
        code = attach_range(b, ranges[i].start, ranges[i].end, ranges[i].read_only, err);
    if (code != TQ_OK) {
        detach_all(b, NULL);
        free(b->attached);
        b->attached = NULL;
        goto out;
    }
    b->gather = *used = chosen;
out:
    leave();
unlock:
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

static tq_code cuda_detach_rows(tq_backend *self, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    pthread_mutex_lock(&b->gather_lock);
    if ((code = enter(b, err)) == TQ_OK) {
        code = detach_all(b, err);
        leave();
    }
    free(b->attached);
    b->attached = NULL;
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

/* The attachment holding [lo, hi), or NULL (gather_lock held). */
static const attachment *attached_at(const cuda_backend *b, const char *lo, const char *hi)
{
    for (int i = 0; i < b->n_attached; i++)
        if (lo >= b->attached[i].start && hi <= b->attached[i].end)
            return &b->attached[i];
    return NULL;
}

static int cuda_gathers_rows(tq_backend *self, const char *lo, const char *hi)
{
    cuda_backend *b = (cuda_backend *)self;
    pthread_mutex_lock(&b->gather_lock);
    int yes = b->gather != TQ_GATHER_HOST && attached_at(b, lo, hi) != NULL;
    pthread_mutex_unlock(&b->gather_lock);
    return yes;
}

/* The slot's indices on the device, copied there on the copy stream (ctx
 * current).  Its buffers are free: before_write waited for the slot's last
 * *filled*, which follows every read of them. */
static tq_code stage_indices(cuda_backend *b, int slot, const int64_t *idx, int64_t rows, tq_error *err)
{
    slot_indices *s = &b->indices[slot];
    tq_code code = TQ_OK;
    if (s->capacity < rows) {
        if (s->host)
            cu.MemFreeHost(s->host);
        if (s->device)
            cu.MemFree(s->device);
        *s = (slot_indices){NULL, 0, 0};
        CU(MemHostAlloc, ((void **)&s->host, (size_t)rows * sizeof *idx, CU_MEMHOSTALLOC_PORTABLE));
        CU(MemAlloc, (&s->device, (size_t)rows * sizeof *idx));
        s->capacity = rows;
    }
    memcpy(s->host, idx, (size_t)rows * sizeof *idx);
    CU(MemcpyHtoDAsync, (s->device, s->host, (size_t)rows * sizeof *idx, b->copy_stream));
fail:
    return code;
}

/* The widest word that every row's source and destination address and the
 * row size are multiples of. */
static int word_bytes(uintptr_t src, ptrdiff_t stride, size_t row_bytes, CUdeviceptr dst)
{
    uintptr_t all = src | (uintptr_t)stride | (uintptr_t)row_bytes | (uintptr_t)dst;
    int word = 16;
    while (word > 1 && (all & (uintptr_t)(word - 1)))
        word /= 2;
    return word;
}

static tq_code launch_gather(cuda_backend *b, int slot, const tq_row_part *part, const attachment *at,
                             int64_t rows, tq_error *err)
{
    CUdeviceptr dst = b->device[slot] + part->offset;
    const char *src = (const char *)part->src.base + at->to_device;
    long long stride = part->src.stride, n = rows;
    int word = word_bytes((uintptr_t)src, part->src.stride, part->row_bytes, dst), which = 0;
    while ((16 >> which) != word)
        which++;
    unsigned long long words = part->row_bytes / (size_t)word;
    CUdeviceptr idx = b->indices[slot].device;
    unsigned long long per_row = (words + TQ_GATHER_THREADS - 1) / TQ_GATHER_THREADS;
    unsigned int grid_y = per_row > TQ_GATHER_BLOCKS_PER_ROW ? TQ_GATHER_BLOCKS_PER_ROW : (unsigned int)per_row;
    unsigned int grid_x = rows > 65535 ? 65535 : (unsigned int)rows;
    void *params[] = {&dst, &src, &stride, &words, &idx, &n};
    tq_code code = TQ_OK;
    CU(LaunchKernel, (b->kernels[which], grid_x, grid_y ? grid_y : 1, 1, TQ_GATHER_THREADS, 1, 1, 0, b->copy_stream,
                      params, NULL));
fail:
    return code;
}

/* Room for `count` copies in one batch (gather_lock held). */
static tq_code batch_room(cuda_backend *b, size_t count, tq_error *err)
{
    if (count <= b->batch_cap)
        return TQ_OK;
    CUdeviceptr *dsts = realloc(b->batch_dsts, count * sizeof *dsts);
    if (dsts)
        b->batch_dsts = dsts;
    CUdeviceptr *srcs = realloc(b->batch_srcs, count * sizeof *srcs);
    if (srcs)
        b->batch_srcs = srcs;
    size_t *sizes = realloc(b->batch_sizes, count * sizeof *sizes);
    if (sizes)
        b->batch_sizes = sizes;
    if (!dsts || !srcs || !sizes)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for a batch of %zu copies", count);
    b->batch_cap = count;
    return TQ_OK;
}

/* Appends one copy per run of consecutive indices (rows are one block only
 * when the source is row-contiguous). */
static size_t add_copies(cuda_backend *b, size_t count, int slot, const tq_row_part *part, const attachment *at,
                         const int64_t *idx, int64_t rows)
{
    int merge = part->src.stride == (ptrdiff_t)part->row_bytes;
    for (int64_t r = 0; r < rows;) {
        int64_t run = 1;
        while (merge && r + run < rows && idx[r + run] == idx[r] + run)
            run++;
        b->batch_dsts[count] = b->device[slot] + part->offset + (size_t)r * part->row_bytes;
        b->batch_srcs[count] = (CUdeviceptr)(uintptr_t)((const char *)part->src.base + idx[r] * part->src.stride) +
                               (CUdeviceptr)at->to_device;
        b->batch_sizes[count++] = (size_t)run * part->row_bytes;
        r += run;
    }
    return count;
}

static tq_code launch_batch(cuda_backend *b, size_t count, tq_error *err)
{
    /* One group of attributes for every copy: read in stream order, after
     * the copy stream's wait for *consumed*. */
    CUmemcpyAttributes attrs;
    size_t first = 0, fail_at = 0;
    tq_code code = TQ_OK;
    memset(&attrs, 0, sizeof attrs);
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    if (!count)
        return TQ_OK;
    if (cu.MemcpyBatchAsync)
        CU(MemcpyBatchAsync, (b->batch_dsts, b->batch_srcs, b->batch_sizes, count, &attrs, &first, 1, b->copy_stream));
    else
        CU(MemcpyBatchAsync12, (b->batch_dsts, b->batch_srcs, b->batch_sizes, count, &attrs, &first, 1, &fail_at,
                                b->copy_stream));
fail:
    return code;
}

static tq_code cuda_publish_rows(tq_backend *self, int slot, const tq_row_part *parts, int n, const int64_t *idx,
                                 int64_t rows, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    const attachment *at[TQ_MAX_COMPONENTS];
    int on_device = 0;
    size_t copies = 0;
    tq_code code;
    pthread_mutex_lock(&b->gather_lock);
    /* Which components the device gathers: the rest (memory not attached,
     * or attached no more) are gathered on the host into the staging. */
    for (int c = 0; c < n; c++) {
        const char *lo, *hi;
        tq_rows_span(&parts[c].src, parts[c].row_bytes, idx, rows, &lo, &hi);
        at[c] = b->gather != TQ_GATHER_HOST && rows > 0 ? attached_at(b, lo, hi) : NULL;
        on_device += at[c] != NULL;
        if (!at[c])
            tq_gather((char *)b->staging.slot[slot] + parts[c].offset, &parts[c].src, parts[c].row_bytes, idx, rows);
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto unlock;
    /* As publish: the slot is overwritten only after its last reader. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    if (on_device && b->gather == TQ_GATHER_KERNEL && (code = stage_indices(b, slot, idx, rows, err)) != TQ_OK)
        goto fail;
    if (on_device && b->gather == TQ_GATHER_BATCH && (code = batch_room(b, (size_t)rows * (size_t)n, err)) != TQ_OK)
        goto fail;
    for (int c = 0; c < n; c++) {
        size_t bytes = (size_t)rows * parts[c].row_bytes;
        if (!bytes)
            continue;
        if (!at[c])
            CU(MemcpyHtoDAsync, (b->device[slot] + parts[c].offset, (char *)b->staging.slot[slot] + parts[c].offset,
                                 bytes, b->copy_stream));
        else if (b->gather == TQ_GATHER_KERNEL)
            code = launch_gather(b, slot, &parts[c], at[c], rows, err);
        else
            copies = add_copies(b, copies, slot, &parts[c], at[c], idx, rows);
        if (code != TQ_OK)
            goto fail;
    }
    if ((code = launch_batch(b, copies, err)) != TQ_OK)
        goto fail;
    CU(EventRecord, (b->filled[slot], b->copy_stream));
fail:
    leave();
unlock:
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

/* ---- creation and destruction ------------------------------------------------------ */

static void cuda_destroy(tq_backend *self)
{
    cuda_backend *b = (cuda_backend *)self;
    if (b->ctx && enter(b, NULL) == TQ_OK) {
        /* Nothing may still read or write the memory about to be freed. */
        for (int i = 0; i < b->capacity; i++) {
            if (b->filled[i])
                cu.EventSynchronize(b->filled[i]);
            if (b->consumed[i])
                cu.EventSynchronize(b->consumed[i]);
        }
        if (b->copy_stream) {
            detach_all(b, NULL); /* waits for the gathers that read the sources */
            free_indices(b);
            cu.StreamSynchronize(b->copy_stream);
            cu.StreamDestroy(b->copy_stream);
        }
        if (b->staging_registered) {
            cu.MemHostUnregister(b->staging.base);
            account(&pinned_allocated, -(int64_t)b->staging.bytes);
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
        if (b->strided_module)
            cu.ModuleUnload(b->strided_module);
        for (int i = 0; i < b->n_registered; i++)
            cu.MemHostUnregister(b->registered[i].ptr);
        if (b->module)
            cu.ModuleUnload(b->module);
        leave();
    }
    free(b->attached);
    free(b->indices);
    free(b->batch_dsts);
    free(b->batch_srcs);
    free(b->batch_sizes);
    pthread_mutex_destroy(&b->gather_lock);
    tq_shm_destroy(&b->staging);
    pthread_mutex_destroy(&b->registered_lock);
    pthread_mutex_destroy(&b->module_lock);
    free(b->registered);
    free(b->device);
    free(b->filled);
    free(b->consumed);
    free(b);
}

tq_backend *tq_cuda_backend_create(void *cu_context, tq_error *err)
{
    static const tq_backend cuda = {
        .name = "cuda", .on_device = 1,
        .alloc_slots = cuda_alloc_slots, .write_ptr = cuda_write_ptr, .before_write = cuda_before_write,
        .reads_directly = cuda_reads_directly, .publish = cuda_publish, .read_to_host = cuda_read_to_host,
        .register_host = cuda_register_host, .unregister_host = cuda_unregister_host,
        .take = cuda_take, .put_from_device = cuda_put_from_device, .shared_staging = cuda_shared_staging,
        .swap_staging = cuda_swap_staging, .on_arrival = cuda_on_arrival, .destroy = cuda_destroy,
        .probe_device = cuda_probe_device, .put_device_arrays = cuda_put_device_arrays,
        .copy_stream = cuda_copy_stream,
        .attach_rows = cuda_attach_rows, .detach_rows = cuda_detach_rows, .gathers_rows = cuda_gathers_rows,
        .publish_rows = cuda_publish_rows,
    };
    if (tq_cuda_load(err) != TQ_OK)
        return NULL;
    if (!cu_context) {
        tq_set_error(err, TQ_EINVAL, "no CUDA context");
        return NULL;
    }
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        tq_set_error(err, TQ_ENOMEM, "out of host memory for the cuda backend");
        return NULL;
    }
    pthread_mutex_init(&b->registered_lock, NULL);
    pthread_mutex_init(&b->module_lock, NULL);
    pthread_mutex_init(&b->gather_lock, NULL);
    b->base = cuda;
    b->ctx = (CUcontext)cu_context;
    return &b->base;
}

tq_code tq_cuda_mem_info(void *cu_context, size_t *free_bytes, size_t *total_bytes, tq_error *err)
{
    tq_code code = tq_cuda_load(err);
    if (code != TQ_OK)
        return code;
    CUresult rc = cu.CtxPushCurrent((CUcontext)cu_context);
    if (rc != CUDA_SUCCESS)
        return cuda_error(err, "cuCtxPushCurrent", rc);
    rc = cu.MemGetInfo(free_bytes, total_bytes);
    leave();
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuMemGetInfo", rc);
}
