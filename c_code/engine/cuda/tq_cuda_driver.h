/*
 * tq_cuda_driver.h: the CUDA driver API as far as the CUDA backend uses it
 * (tq_cuda*.c), bound at run time with dlopen so that the engine builds with
 * gcc alone.  The list of functions is written once (TQ_CUDA_FUNCTIONS): the
 * table of pointers and the dlsym list are generated from it, and
 * theano_queue/tools/probe.py's ctypes binding is checked against it
 * (tests/standin/test_probe.py).  Private to the backend's files.
 */
#ifndef TQ_CUDA_DRIVER_H
#define TQ_CUDA_DRIVER_H

#include "tq_base.h"

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
#define CUDA_ERROR_NOT_READY 600
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
/* cuPointerGetAttribute's attributes, and the memory types it reports */
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x2
#define CU_MEMHOSTREGISTER_READ_ONLY 0x8
#define CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1

/* Every driver function we call, written once: the struct of pointers and the
 * dlsym table below are both generated from it.  X(field, symbol, parameters):
 * `symbol` is the versioned name the driver exports for the API we mean. */
#define TQ_CUDA_FUNCTIONS(X)                                                                                         \
    X(Init, cuInit, (unsigned int))                                                                                  \
    X(GetErrorName, cuGetErrorName, (CUresult, const char **))                                                       \
    X(GetErrorString, cuGetErrorString, (CUresult, const char **))                                                   \
    X(CtxGetCurrent, cuCtxGetCurrent, (CUcontext *))                                                                 \
    X(CtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext))                                                              \
    X(CtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext *))                                                              \
    X(CtxGetDevice, cuCtxGetDevice, (CUdevice *))                                                                    \
    X(PointerGetAttribute, cuPointerGetAttribute, (void *, int, CUdeviceptr))                                        \
    X(PointerGetAttributes, cuPointerGetAttributes, (unsigned int, int *, void **, CUdeviceptr))                     \
    X(MemAlloc, cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                              \
    X(MemFree, cuMemFree_v2, (CUdeviceptr))                                                                          \
    X(MemHostRegister, cuMemHostRegister_v2, (void *, size_t, unsigned int))                                         \
    X(MemHostUnregister, cuMemHostUnregister, (void *))                                                              \
    X(MemGetInfo, cuMemGetInfo_v2, (size_t *, size_t *))                                                             \
    X(StreamCreate, cuStreamCreate, (CUstream *, unsigned int))                                                      \
    X(StreamDestroy, cuStreamDestroy_v2, (CUstream))                                                                 \
    X(StreamSynchronize, cuStreamSynchronize, (CUstream))                                                            \
    X(StreamWaitEvent, cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                                         \
    X(EventCreate, cuEventCreate, (CUevent *, unsigned int))                                                         \
    X(EventDestroy, cuEventDestroy_v2, (CUevent))                                                                    \
    X(EventRecord, cuEventRecord, (CUevent, CUstream))                                                               \
    X(EventSynchronize, cuEventSynchronize, (CUevent))                                                               \
    X(EventQuery, cuEventQuery, (CUevent))                                                                           \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))                          \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                           \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))                                \
    X(MemcpyPeerAsync, cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))        \
    X(ModuleLoadData, cuModuleLoadData, (CUmodule *, const void *))                                                  \
    X(ModuleGetFunction, cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                                \
    X(ModuleUnload, cuModuleUnload, (CUmodule))                                                                      \
    X(LaunchKernel, cuLaunchKernel,                                                                                  \
      (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, \
       CUstream, void **, void **))

/* The same for functions the backend works without: a driver that lacks one
 * still loads, its pointer stays NULL, and what needs it checks.  Only traces
 * use cuLaunchHostFunc (on_arrival, FILLED). */
#define TQ_CUDA_OPTIONAL_FUNCTIONS(X)                                         \
    X(LaunchHostFunc, cuLaunchHostFunc, (CUstream, void (*)(void *), void *)) \
    TQ_CUDA_GATHER_FUNCTIONS(X)

/* The device gather's (doc/design.rst, "The GPU gather"): a driver without
 * them gathers on the host.  cuMemcpyBatchAsync_v2 is CUDA 13's; the
 * unversioned name is CUDA 12.8's, with one more parameter (failIdx). */
#define TQ_CUDA_GATHER_FUNCTIONS(X)                                                                       \
    X(MemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, (CUdeviceptr *, void *, unsigned int))       \
    X(MemcpyBatchAsync, cuMemcpyBatchAsync_v2,                                                            \
      (CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, CUstream)) \
    X(MemcpyBatchAsync12, cuMemcpyBatchAsync,                                                             \
      (CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t, size_t *, CUstream))

#define TQ_DECLARE(field, symbol, params) CUresult(*field) params;
typedef struct {
    TQ_CUDA_FUNCTIONS(TQ_DECLARE)
    TQ_CUDA_OPTIONAL_FUNCTIONS(TQ_DECLARE)
} tq_cu_driver;
#undef TQ_DECLARE

/* The driver's functions, loaded by tq_cuda_load (tq_cuda.h). */
extern tq_cu_driver tq_cu;

/* Counts device and page-locked memory the backend allocated (positive) or
 * freed (negative): what tq_cuda_allocated reports. */
void cuda_count_allocated(int64_t device_delta, int64_t pinned_delta);

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)": sets err, returns
 * its code (TQ_ENOMEM or TQ_EDEVMEM for out of memory, else TQ_ECUDA). */
tq_code cuda_error(tq_error *err, const char *call, CUresult rc);

/* Calls a driver function; on failure sets `code` and err, and jumps to fail. */
#define CU(call, args)                               \
    do {                                             \
        CUresult rc_ = tq_cu.call args;              \
        if (rc_ != CUDA_SUCCESS) {                   \
            code = cuda_error(err, "cu" #call, rc_); \
            goto fail;                               \
        }                                            \
    } while (0)

/* This thread's depth of cuda_enter_context calls not yet left, and at each
 * of the first 64 depths whether that call pushed its context.  A context
 * already current is not pushed again: a push and its pop cost the driver
 * microseconds, several a small step when nested (doc/design.rst, the GpuDequeue's steps). */
#define TQ_CU_TRACKED_DEPTH 64
extern __thread int tq_cu_depth;
extern __thread unsigned long long tq_cu_pushed;

/* Makes ctx current on this thread until the matching cuda_leave. */
static inline tq_code cuda_enter_context(CUcontext ctx, tq_error *err)
{
    CUcontext current = NULL;
    int depth = tq_cu_depth;
    int push = depth >= TQ_CU_TRACKED_DEPTH || tq_cu.CtxGetCurrent(&current) != CUDA_SUCCESS || current != ctx;
    if (push) {
        CUresult rc = tq_cu.CtxPushCurrent(ctx);
        if (rc != CUDA_SUCCESS)
            return cuda_error(err, "cuCtxPushCurrent", rc);
    }
    if (depth < TQ_CU_TRACKED_DEPTH) {
        unsigned long long bit = 1ull << depth;
        tq_cu_pushed = push ? tq_cu_pushed | bit : tq_cu_pushed & ~bit;
    }
    tq_cu_depth = depth + 1;
    return TQ_OK;
}

/* Leaves the last cuda_enter_context: pops its context if it pushed it. */
static inline void cuda_leave(void)
{
    int depth = --tq_cu_depth;
    if (depth >= TQ_CU_TRACKED_DEPTH || (tq_cu_pushed >> depth) & 1) {
        CUcontext popped;
        tq_cu.CtxPopCurrent(&popped);
    }
}

#endif /* TQ_CUDA_DRIVER_H */
