/* tq_cuda.c: the CUDA backend (see tq_cuda.h).  The driver API is declared
 * here, as far as it is used, and loaded with dlopen. */
#include "tq_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Host memory this process page-locked and mapped (register_host, or a
 * device gather's source), shared by every ring: see pin_host. */
typedef struct host_pin host_pin;

/* Memory register_host page-locked for this ring, and the use it holds. */
typedef struct {
    void *ptr;
    size_t bytes;
    host_pin *pin;
} host_range;

/* One range a backend gathers rows from, and the use of its page-lock it
 * holds.  The device reads host address p at p + to_device. */
typedef struct {
    char *start, *end;
    host_pin *pin;
    long long to_device;
} attachment;

/* A slot's host-to-device copy that its producer left to the consumer
 * (publish with elements ahead), and the trace's callback for its arrival. */
typedef struct {
    int n; /* extents to copy; -1: nothing left here */
    tq_extent extents[TQ_MAX_COMPONENTS];
    void (*arrived)(void *);
    void *arrived_arg;
} deferred_upload;

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
    /* Uploads left to consumers, per slot; n_deferred counts them, so that a
     * take with none to start takes no lock. */
    pthread_mutex_t deferred_lock;
    deferred_upload *deferred;
    int n_deferred;
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
    int on_device[TQ_MAX_COMPONENTS]; /* the components whose rows the device copies */
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
    b->deferred = calloc((size_t)capacity, sizeof *b->deferred);
    if (!b->device || !b->filled || !b->consumed || !b->deferred)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for the cuda backend's tables");
    for (int i = 0; i < capacity; i++)
        b->deferred[i].n = -1;
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

/* ---- uploads left to the consumer ------------------------------------------------ */

/* Queues the copy of a slot's extents to the device on the copy stream: after
 * the slot's last reader, recorded as filled.  The context is current. */
static tq_code upload(cuda_backend *b, int slot, const tq_extent *extents, int n, tq_error *err)
{
    tq_code code = TQ_OK;
    /* The device slot is overwritten only after its last reader is done: an
     * order on the GPU, not a wait on the host. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n; i++) {
        const void *src = extents[i].src ? extents[i].src : (const char *)b->staging.slot[slot] + extents[i].offset;
        CU(MemcpyHtoDAsync, (b->device[slot] + extents[i].offset, src, extents[i].bytes, b->copy_stream));
    }
    CU(EventRecord, (b->filled[slot], b->copy_stream));
fail:
    return code;
}

/* Takes what was left for `slot` out of the table; 0 when nothing was.  Under
 * deferred_lock. */
static int take_deferred(cuda_backend *b, int slot, deferred_upload *out)
{
    if (b->deferred[slot].n < 0)
        return 0;
    *out = b->deferred[slot];
    b->deferred[slot].n = -1;
    b->deferred[slot].arrived = NULL;
    __atomic_sub_fetch(&b->n_deferred, 1, __ATOMIC_RELAXED);
    return 1;
}

/* A consumer, before it reads `first`: starts every upload left to it, that
 * of `first` first and the others in slot order after it.  The context is
 * current.  A producer left its upload only after the slot's data was
 * written, and before the slot was READY: a consumer that reads a slot sees
 * what was left for it (the ring's lock orders the two). */
static tq_code start_deferred(cuda_backend *b, int first, tq_error *err)
{
    tq_code code = TQ_OK;
    if (!__atomic_load_n(&b->n_deferred, __ATOMIC_RELAXED))
        return TQ_OK;
    pthread_mutex_lock(&b->deferred_lock);
    for (int k = 0; k < b->capacity && code == TQ_OK; k++) {
        int slot = (first + k) % b->capacity;
        deferred_upload left;
        if (!take_deferred(b, slot, &left))
            continue;
        code = upload(b, slot, left.extents, left.n, err);
        if (left.arrived && (code != TQ_OK || cu.LaunchHostFunc(b->copy_stream, left.arrived, left.arrived_arg)))
            left.arrived(left.arrived_arg); /* the trace's mark is freed either way */
    }
    pthread_mutex_unlock(&b->deferred_lock);
    return code;
}

/* A producer that writes `slot` anew: an upload still left there is of an
 * element that was dropped unread, and must not overwrite the new one. */
static void forget_deferred(cuda_backend *b, int slot)
{
    deferred_upload left;
    if (!__atomic_load_n(&b->n_deferred, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&b->deferred_lock);
    int had = take_deferred(b, slot, &left);
    pthread_mutex_unlock(&b->deferred_lock);
    if (had && left.arrived)
        left.arrived(left.arrived_arg);
}

/* The staging may still feed the copy that the slot's last publish started. */
static tq_code cuda_before_write(tq_backend *self, int slot, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    forget_deferred(b, slot);
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(EventSynchronize, (b->filled[slot]));
fail:
    leave();
    return code;
}

/* The largest element whose upload a producer leaves to the consumer.  The
 * driver calls it saves cost tens of microseconds a step, which matters for
 * small elements (short steps); a larger element's copy takes longer than
 * that on the bus, and its pipeline keeps the producer's own, earliest
 * issue (doc/design.rst, "Small steps"). */
#define DEFER_MAX_BYTES (2u << 20)

/* 1 when the element's upload may be left to the consumer: every extent is
 * read from the slot's staging (not from user memory, which its owner may
 * change once the put returns), and it is small. */
static int may_defer(const tq_extent *extents, int n)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (extents[i].src)
            return 0;
        bytes += extents[i].bytes;
    }
    return bytes <= DEFER_MAX_BYTES;
}

/* With elements ahead of this one, the consumer starts the upload when it
 * takes the first of them: it is then still queued ahead of its reader, and
 * this thread makes no driver call while the consumer's step makes its own. */
static tq_code cuda_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, int ahead,
                            tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if (ahead > 0 && may_defer(extents, n_extents)) {
        pthread_mutex_lock(&b->deferred_lock);
        deferred_upload *left = &b->deferred[slot];
        memcpy(left->extents, extents, (size_t)n_extents * sizeof *extents);
        left->n = n_extents;
        left->arrived = NULL;
        __atomic_add_fetch(&b->n_deferred, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&b->deferred_lock);
        return TQ_OK;
    }
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    code = upload(b, slot, extents, n_extents, err);
    leave();
    return code;
}

static tq_code cuda_read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    if ((code = start_deferred(b, slot, err)) != TQ_OK)
        goto fail;
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
    if (into_slot)
        forget_deferred(b, slot);
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    if (!into_slot && (code = start_deferred(b, slot, err)) != TQ_OK)
        goto fail;
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
    forget_deferred(b, slot);
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    for (int i = 0; i < n; i++) {
        if (!extents[i].bytes)
            continue; /* nothing is read: nothing to order, nothing to wait for */
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
        if (!srcs[i].stream || !extents[i].bytes)
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
 * queued on it now, the slot's last copy included; for an upload left to the
 * consumer, once that is done (or at once, should it be dropped unread). */
static tq_code cuda_on_arrival(tq_backend *self, int slot, void (*fn)(void *), void *arg, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if (!cu.LaunchHostFunc)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuLaunchHostFunc");
    pthread_mutex_lock(&b->deferred_lock);
    int left = b->deferred[slot].n >= 0;
    if (left) {
        b->deferred[slot].arrived = fn;
        b->deferred[slot].arrived_arg = arg;
    }
    pthread_mutex_unlock(&b->deferred_lock);
    if (left)
        return TQ_OK;
    if ((code = enter(b, err)) != TQ_OK)
        return code;
    CU(LaunchHostFunc, (b->copy_stream, fn, arg));
fail:
    leave();
    return code;
}

/* ---- page-locked host memory, shared by every ring of the process ------------------ */

/* The driver page-locks a byte once per process (a second cuMemHostRegister
 * over it fails with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), so every
 * ring's registrations live in one list with a count of users: two queues
 * gathering from one dataset, or a dataset that register_host locked and a
 * Feeder gathers from, lock it once, and it is unlocked when the last lets
 * go.  A range is exactly the bytes asked for, never rounded out to pages:
 * the driver refuses a device-to-host copy into a buffer that starts inside
 * a registered range and ends past it, and the heap buffers next to a
 * dataset (a fresh numpy array that q.get() fills) would be such buffers. */
struct host_pin {
    char *start, *end;
    int users;
    struct host_pin *next;
};

static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static host_pin *pins;

/* A use of [start, end): of the locked range that holds it, else of a range
 * locked and mapped now (read-only for the device when `read_only`: a
 * read-only file mapping can be locked no other way).  TQ_ESTATE when it
 * overlaps a locked range without lying inside it.  A context is current. */
static tq_code pin_host(char *start, char *end, int read_only, host_pin **out, tq_error *err)
{
    tq_code code = TQ_OK;
    host_pin *p;
    pthread_mutex_lock(&pins_lock);
    for (p = pins; p; p = p->next) {
        if (start >= p->start && end <= p->end) {
            p->users++;
            goto done;
        }
        if (start < p->end && p->start < end) {
            code = tq_set_error(err, TQ_ESTATE,
                                "its memory [%p, %p) overlaps memory this process already page-locked, [%p, %p), "
                                "without lying inside it",
                                (void *)start, (void *)end, (void *)p->start, (void *)p->end);
            goto done;
        }
    }
    if (!(p = calloc(1, sizeof *p))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the list of page-locked memory");
        goto done;
    }
    unsigned int flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
    CUresult rc = cu.MemHostRegister(start, (size_t)(end - start), flags | (read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0));
    if (rc != CUDA_SUCCESS) {
        free(p);
        p = NULL;
        code = cuda_error(err, "cuMemHostRegister", rc);
        goto done;
    }
    *p = (host_pin){start, end, 1, pins};
    pins = p;
done:
    pthread_mutex_unlock(&pins_lock);
    *out = code == TQ_OK ? p : NULL;
    return code;
}

/* Gives a use back; the last unlocks.  A context is current, and nothing
 * queued by this user may still read the memory. */
static void unpin_host(host_pin *pin)
{
    pthread_mutex_lock(&pins_lock);
    if (--pin->users == 0) {
        for (host_pin **at = &pins; *at; at = &(*at)->next)
            if (*at == pin) {
                *at = pin->next;
                break;
            }
        cu.MemHostUnregister(pin->start);
        free(pin);
    }
    pthread_mutex_unlock(&pins_lock);
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
    host_pin *pin;
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
    /* Mapped as well (pin_host), so that the device gather can read rows
     * from it; memory a gather already locked is used as it is. */
    if ((code = pin_host(ptr, (char *)ptr + bytes, 0, &pin, err)) == TQ_OK)
        b->registered[b->n_registered++] = (host_range){ptr, bytes, pin};
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return code;
}

static tq_code cuda_unregister_host(tq_backend *self, void *ptr, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->registered_lock);
    int found = find_registered(b, ptr);
    if (found < 0) {
        code = tq_set_error(err, TQ_EINVAL, "%p was not registered with this queue", ptr);
        goto done;
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto done;
    /* Copies from it may still be in flight.  A gather reading it holds a
     * use of its own: the memory stays locked until that gather ends. */
    CU(StreamSynchronize, (b->copy_stream));
    unpin_host(b->registered[found].pin);
    b->registered[found] = b->registered[--b->n_registered];
fail:
    leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
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

/* Under TQ_GATHER_AUTO the device copies the rows of components whose rows
 * are at least this large, and the host gathers the rest: a batch copy costs
 * about a microsecond per row, the host gather runs at about the bus's rate,
 * so the device wins for large rows only (doc/design.rst, "The GPU gather"). */
#define TQ_GATHER_DEVICE_MIN_ROW ((size_t)256 * 1024)

/* Which components the device copies under `want` (TQ_GATHER_BATCH: all,
 * TQ_GATHER_AUTO: those with large rows): on_device[c], and their count. */
static int choose_components(tq_gather_mechanism want, const size_t *bytes, const size_t *row_bytes, int n,
                             int *on_device)
{
    int count = 0;
    for (int c = 0; c < n; c++) {
        on_device[c] = bytes[c] && (want == TQ_GATHER_BATCH || row_bytes[c] >= TQ_GATHER_DEVICE_MIN_ROW);
        count += on_device[c];
    }
    return count;
}

static tq_code batch_copy_ready(tq_error *err)
{
    if (!cu.MemcpyBatchAsync && !cu.MemcpyBatchAsync12)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuMemcpyBatchAsync (CUDA 12.8+)");
    if (!cu.MemHostGetDevicePointer)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuMemHostGetDevicePointer");
    return TQ_OK;
}

typedef struct {
    char *start, *end;
    int read_only;
} source_range;

static int by_start(const void *x, const void *y)
{
    const source_range *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* The exact bytes of the chosen sources, sorted, and merged only where they
 * overlap (views of one array): each merged range is locked once.  A range
 * with a read-only part is locked read-only: the device only reads it. */
static int source_ranges(const void *const *ptrs, const size_t *bytes, const int *read_only, const int *chosen, int n,
                         source_range *out)
{
    int m = 0, merged = 0;
    for (int c = 0; c < n; c++)
        if (chosen[c])
            out[m++] = (source_range){(char *)ptrs[c], (char *)ptrs[c] + bytes[c], read_only[c]};
    qsort(out, (size_t)m, sizeof *out, by_start);
    for (int i = 0; i < m; i++) {
        source_range *last = merged ? &out[merged - 1] : NULL;
        if (last && out[i].start < last->end) {
            last->end = out[i].end > last->end ? out[i].end : last->end;
            last->read_only |= out[i].read_only;
        } else {
            out[merged++] = out[i];
        }
    }
    return merged;
}

/* Attaches one source range (ctx current, gather_lock held). */
static tq_code attach_range(cuda_backend *b, const source_range *range, tq_error *err)
{
    CUdeviceptr device = 0;
    host_pin *pin;
    tq_code code = pin_host(range->start, range->end, range->read_only, &pin, err);
    if (code != TQ_OK)
        return code;
    CU(MemHostGetDevicePointer, (&device, range->start, 0));
    b->attached[b->n_attached++] =
        (attachment){range->start, range->end, pin, (long long)(device - (CUdeviceptr)(uintptr_t)range->start)};
    return TQ_OK;
fail:
    unpin_host(pin);
    return code;
}

/* Gives back every attached range (ctx current, gather_lock held): nothing
 * queued on the copy stream may still read them. */
static void release_attachments(cuda_backend *b)
{
    for (int i = 0; i < b->n_attached; i++)
        unpin_host(b->attached[i].pin);
    b->n_attached = 0;
    free(b->attached);
    b->attached = NULL;
    b->gather = TQ_GATHER_HOST;
    memset(b->on_device, 0, sizeof b->on_device);
}

/* Undoes the attach once the gathers in flight are done (ctx current,
 * gather_lock held). */
static tq_code detach_all(cuda_backend *b, tq_error *err)
{
    tq_code code = TQ_OK;
    if (b->gather == TQ_GATHER_HOST && !b->n_attached)
        return TQ_OK;
    CUresult rc = cu.StreamSynchronize(b->copy_stream);
    if (rc != CUDA_SUCCESS)
        code = cuda_error(err, "cuStreamSynchronize", rc);
    release_attachments(b);
    return code;
}

static tq_code cuda_attach_rows(tq_backend *self, const void *const *ptrs, const size_t *bytes,
                                const size_t *row_bytes, const int *read_only, int n, tq_gather_mechanism mechanism,
                                tq_gather_mechanism *used, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    source_range ranges[TQ_MAX_COMPONENTS];
    int chosen[TQ_MAX_COMPONENTS];
    tq_code code = TQ_OK;
    *used = TQ_GATHER_HOST;
    if (n < 1 || n > TQ_MAX_COMPONENTS)
        return tq_set_error(err, TQ_EINVAL, "expected 1 to %d source ranges, got %d", TQ_MAX_COMPONENTS, n);
    if (mechanism != TQ_GATHER_BATCH && mechanism != TQ_GATHER_AUTO)
        return tq_set_error(err, TQ_EINVAL, "expected the gather mechanism 'batch' or 'auto', got '%s'",
                            tq_gather_mechanism_name(mechanism));
    pthread_mutex_lock(&b->gather_lock);
    if (b->gather != TQ_GATHER_HOST) {
        code = tq_set_error(err, TQ_ESTATE, "the device already gathers rows for another source of this queue");
        goto unlock;
    }
    /* Small rows only: the host gathers them all, and nothing is locked. */
    if (!choose_components(mechanism, bytes, row_bytes, n, chosen))
        goto unlock;
    if ((code = batch_copy_ready(err)) != TQ_OK)
        goto unlock;
    int m = source_ranges(ptrs, bytes, read_only, chosen, n, ranges);
    if (!(b->attached = calloc((size_t)m, sizeof *b->attached))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the gather's sources");
        goto unlock;
    }
    if ((code = enter(b, err)) != TQ_OK) {
        release_attachments(b);
        goto unlock;
    }
    for (int i = 0; i < m && code == TQ_OK; i++)
        code = attach_range(b, &ranges[i], err);
    if (code == TQ_OK) {
        memcpy(b->on_device, chosen, (size_t)n * sizeof *chosen);
        b->gather = *used = TQ_GATHER_BATCH;
    } else {
        release_attachments(b); /* a failed attach leaves nothing locked */
    }
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

/* Where the device copies component c's rows [lo, hi) from, or NULL: the
 * host gathers them (gather_lock held). */
static const attachment *device_source(const cuda_backend *b, int c, const char *lo, const char *hi)
{
    return b->gather != TQ_GATHER_HOST && c < TQ_MAX_COMPONENTS && b->on_device[c] ? attached_at(b, lo, hi) : NULL;
}

static int cuda_gathers_rows(tq_backend *self, int component, const char *lo, const char *hi)
{
    cuda_backend *b = (cuda_backend *)self;
    pthread_mutex_lock(&b->gather_lock);
    int yes = device_source(b, component, lo, hi) != NULL;
    pthread_mutex_unlock(&b->gather_lock);
    return yes;
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
    /* Which components the device copies: the rest (small rows under auto,
     * memory not attached) are gathered on the host into the staging. */
    for (int c = 0; c < n; c++) {
        const char *lo, *hi;
        at[c] = NULL;
        if (rows > 0) {
            tq_rows_span(&parts[c].src, parts[c].row_bytes, idx, rows, &lo, &hi);
            at[c] = device_source(b, c, lo, hi);
        }
        on_device += at[c] != NULL;
        if (!at[c])
            tq_gather((char *)b->staging.slot[slot] + parts[c].offset, &parts[c].src, parts[c].row_bytes, idx, rows);
    }
    if ((code = enter(b, err)) != TQ_OK)
        goto unlock;
    /* As publish: the slot is overwritten only after its last reader. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    if (on_device && (code = batch_room(b, (size_t)rows * (size_t)on_device, err)) != TQ_OK)
        goto fail;
    for (int c = 0; c < n; c++) {
        size_t bytes = (size_t)rows * parts[c].row_bytes;
        if (!bytes)
            continue;
        if (at[c])
            copies = add_copies(b, copies, slot, &parts[c], at[c], idx, rows);
        else
            CU(MemcpyHtoDAsync, (b->device[slot] + parts[c].offset, (char *)b->staging.slot[slot] + parts[c].offset,
                                 bytes, b->copy_stream));
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
    for (int i = 0; b->deferred && i < b->capacity; i++)
        forget_deferred(b, i); /* a trace's marks are freed */
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
            unpin_host(b->registered[i].pin);
        leave();
    }
    free(b->attached);
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
    free(b->deferred);
    pthread_mutex_destroy(&b->deferred_lock);
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
    pthread_mutex_init(&b->deferred_lock, NULL);
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
