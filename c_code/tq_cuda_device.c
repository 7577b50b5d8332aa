/* tq_cuda_device.c: device arrays put from host code (Ring.put_device):
 * where a pointer lives, and the copy into the slot, contiguous or through
 * the strided kernel (tq_strided.cu, its PTX in tq_strided_ptx.h). */
#include "tq_cuda_backend.h"

#include <string.h>

/* ---- device arrays put from host code ------------------------------------------------ */

#include "tq_strided_ptx.h"

/* The kernel's argument, laid out as tq_strided_desc in tq_strided.tq_cu. */
typedef struct {
    long long shape[TQ_DEVICE_MAX_DIMS];
    long long strides[TQ_DEVICE_MAX_DIMS];
    long long n;
    int ndim;
    int unit;
} strided_desc;

tq_code cuda_probe_device(tq_backend *self, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    unsigned int memory_type = 0, managed = 0;
    CUcontext owner = NULL;
    int ordinal = -1;
    tq_code code;
    *device = b->device_ordinal;
    memset(out, 0, sizeof *out);
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    /* Memory the driver does not know (pageable host memory, a bad address)
     * is refused by the caller: there is nothing to copy from on a GPU. */
    if (tq_cu.PointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptr) != CUDA_SUCCESS) {
        out->kind = TQ_MEM_UNKNOWN;
        goto fail;
    }
    CU(PointerGetAttribute, (&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)ptr));
    CU(PointerGetAttribute, (&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr));
    /* Managed memory has no context of its own to name (the driver may say
     * CUDA_ERROR_INVALID_VALUE): it is then the ring's to read. */
    if (tq_cu.PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)ptr) != CUDA_SUCCESS)
        owner = NULL;
    out->kind = managed ? TQ_MEM_MANAGED : memory_type == CU_MEMORYTYPE_DEVICE ? TQ_MEM_DEVICE : TQ_MEM_HOST;
    out->device = ordinal;
    out->context = owner;
    out->same_context = !owner || owner == b->ctx;
fail:
    cuda_leave();
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
            CU(MemcpyPeerAsync,
               (dst, b->ctx, (CUdeviceptr)src->ptr, (CUcontext)src->where.context, bytes, b->copy_stream));
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
    CU(LaunchKernel,
       (fn, (unsigned int)(blocks < 4096 ? blocks : 4096), 1, 1, 256, 1, 1, 0, b->copy_stream, params, NULL));
fail:
    return code;
}

/* Runs `stream` (of `context`, NULL for the ring's) against an event: with
 * record, the copy stream waits for what is queued on `stream` now; without,
 * `stream` waits for the slot's filled event.  Events are recorded in the
 * stream's own context, as the driver requires. */
static tq_code order_with_producer(cuda_backend *b, void *context, CUstream stream, int slot, int record, tq_error *err)
{
    CUcontext ctx = context ? (CUcontext)context : b->ctx;
    CUevent event = NULL;
    CUresult rc;
    tq_code code = TQ_OK;
    if ((rc = tq_cu.CtxPushCurrent(ctx)) != CUDA_SUCCESS)
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
        tq_cu.EventDestroy(event); /* freed once the wait is done */
    cuda_leave();
    return code;
}

tq_code cuda_put_device_arrays(tq_backend *self, int slot, const tq_extent *extents, int n, const tq_device_src *srcs,
                               tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    int host_wait = 0, recorded = 0;
    CUresult rc;
    tq_code code;
    cuda_forget_deferred(b, slot);
    if ((code = cuda_enter(b, err)) != TQ_OK)
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
        if (extents[i].bytes &&
            (code = copy_component(b, b->device[slot] + extents[i].offset, &srcs[i], extents[i].bytes, err)) != TQ_OK)
            goto fail;
fail:
    /* Recorded on every path once anything may be queued: a slot dropped
     * here is written again only after the record. */
    rc = tq_cu.EventRecord(b->filled[slot], b->copy_stream);
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
        rc = tq_cu.EventSynchronize(b->filled[slot]);
        if (rc != CUDA_SUCCESS && code == TQ_OK)
            code = cuda_error(err, "cuEventSynchronize", rc);
    }
    cuda_leave();
    return code;
}
