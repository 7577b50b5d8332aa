/* tq_cuda_device.c: device arrays put from host code (Ring.put_device):
 * where a pointer lives, and the copy into the slot, contiguous or through
 * the strided kernel (tq_strided.cu; tq_cuda_kernels.c loads it). */
#include "tq_cuda_backend.h"

#include <sched.h>
#include <string.h>

/* ---- device arrays put from host code ------------------------------------------------ */

/* The kernel's argument, laid out as tq_strided_desc in tq_strided.cu. */
typedef struct {
    long long shape[TQ_DEVICE_MAX_DIMS];
    long long strides[TQ_DEVICE_MAX_DIMS];
    long long n;
    int ndim;
    int unit;
} strided_desc;

/* ---- the context, entered once a put ----------------------------------------------------- */

/* The ring whose context this thread holds entered across a device put (the
 * face's probes, its wait for a slot and the copy): two driver calls
 * (cuCtxPushCurrent, cuCtxPopCurrent) a put instead of two a call. */
static __thread cuda_backend *held_here;

tq_code cuda_hold_device(tq_backend *self, int *held, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    *held = 0;
    if (held_here) /* a put within a put (a signal handler's): it enters as it goes */
        return TQ_OK;
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    held_here = b;
    *held = 1;
    return TQ_OK;
}

void cuda_release_device(tq_backend *self)
{
    (void)self;
    held_here = NULL;
    cuda_leave();
}

/* Enters the ring's context unless this thread holds it: *entered says
 * whether to leave. */
static tq_code enter_unless_held(cuda_backend *b, int *entered, tq_error *err)
{
    *entered = held_here != b;
    return *entered ? cuda_enter(b, err) : TQ_OK;
}

static void leave_if_entered(int entered)
{
    if (entered)
        cuda_leave();
}

/* ---- where a pointer lives: asked once per allocation ------------------------------------ */

/* The facts of ptr's memory as the driver gave them before the batch query
 * (cuPointerGetAttributes), one attribute a call: for a driver that refuses
 * the batch.  Nothing here is kept (known->bytes stays 0). */
static tq_code ask_one_by_one(cuda_backend *b, uint64_t ptr, known_allocation *known, tq_error *err)
{
    unsigned int memory_type = 0, managed = 0;
    CUcontext owner = NULL;
    int ordinal = -1;
    tq_code code = TQ_OK;
    /* Memory the driver does not know (pageable host memory, a bad address)
     * is refused by the caller: there is nothing to copy from on a GPU. */
    if (tq_cu.PointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptr) != CUDA_SUCCESS)
        return TQ_OK;
    CU(PointerGetAttribute, (&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)ptr));
    CU(PointerGetAttribute, (&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr));
    /* Managed memory has no context of its own to name (the driver may say
     * CUDA_ERROR_INVALID_VALUE): it is then the ring's to read. */
    if (tq_cu.PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)ptr) != CUDA_SUCCESS)
        owner = NULL;
    known->where.kind = managed ? TQ_MEM_MANAGED : memory_type == CU_MEMORYTYPE_DEVICE ? TQ_MEM_DEVICE : TQ_MEM_HOST;
    known->where.device = ordinal;
    known->where.context = owner;
    known->where.same_context = !owner || owner == b->ctx;
fail:
    return code;
}

/* The facts of the allocation holding ptr, in one driver call: where it
 * lives, and its range and buffer ID when it is device or managed memory
 * (worth keeping: known->bytes > 0). */
static tq_code ask_driver(cuda_backend *b, uint64_t ptr, known_allocation *known, tq_error *err)
{
    unsigned int memory_type = 0, managed = 0;
    CUcontext owner = NULL;
    int ordinal = -1;
    int attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_IS_MANAGED,
                        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT,
                        CU_POINTER_ATTRIBUTE_BUFFER_ID,      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                        CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *values[] = {&memory_type, &managed, &ordinal, &owner, &known->buffer_id, &known->start, &known->bytes};
    memset(known, 0, sizeof *known);
    if (tq_cu.PointerGetAttributes(sizeof attributes / sizeof attributes[0], attributes, values, (CUdeviceptr)ptr) !=
        CUDA_SUCCESS) {
        memset(known, 0, sizeof *known);
        return ask_one_by_one(b, ptr, known, err);
    }
    /* Memory the driver does not know reads as type 0 (TQ_MEM_UNKNOWN); a
     * context it does not name (managed memory) as NULL: the ring's to read. */
    known->where.kind = managed                               ? TQ_MEM_MANAGED
                        : memory_type == CU_MEMORYTYPE_DEVICE ? TQ_MEM_DEVICE
                        : memory_type                         ? TQ_MEM_HOST
                                                              : TQ_MEM_UNKNOWN;
    known->where.device = ordinal;
    known->where.context = owner;
    known->where.same_context = !owner || owner == b->ctx;
    int keep = (known->where.kind == TQ_MEM_DEVICE || known->where.kind == TQ_MEM_MANAGED) && known->buffer_id &&
               ptr >= known->start && ptr - known->start < known->bytes;
    if (!keep)
        known->bytes = 0;
    return TQ_OK;
}

/* 1 with what the ring keeps of the allocation holding ptr, if it keeps any. */
static int recall(cuda_backend *b, uint64_t ptr, known_allocation *out)
{
    int found = 0;
    pthread_mutex_lock(&b->device_lock);
    for (int i = 0; i < TQ_KNOWN_ALLOCATIONS && !found; i++) {
        const known_allocation *k = &b->known[i];
        if ((found = k->bytes && ptr >= k->start && ptr - k->start < k->bytes))
            *out = *k;
    }
    pthread_mutex_unlock(&b->device_lock);
    return found;
}

/* Keeps an allocation's facts in place of any kept range it overlaps (an
 * allocation freed since), else of the oldest. */
static void remember(cuda_backend *b, const known_allocation *known)
{
    int at = -1;
    pthread_mutex_lock(&b->device_lock);
    for (int i = 0; i < TQ_KNOWN_ALLOCATIONS; i++) {
        known_allocation *k = &b->known[i];
        if (k->bytes && k->start < known->start + known->bytes && known->start < k->start + k->bytes) {
            k->bytes = 0;
            at = at < 0 ? i : at;
        }
    }
    if (at < 0) {
        at = b->next_known;
        b->next_known = (at + 1) % TQ_KNOWN_ALLOCATIONS;
    }
    b->known[at] = *known;
    pthread_mutex_unlock(&b->device_lock);
}

/* A kept allocation is checked by its buffer ID alone, which the driver never
 * gives twice: an address freed and allocated again is asked afresh. */
tq_code cuda_probe_device(tq_backend *self, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    known_allocation known;
    unsigned long long buffer_id = 0;
    int entered;
    tq_code code;
    *device = b->device_ordinal;
    if ((code = enter_unless_held(b, &entered, err)) != TQ_OK)
        return code;
    if (!recall(b, ptr, &known) ||
        tq_cu.PointerGetAttribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) != CUDA_SUCCESS ||
        buffer_id != known.buffer_id) {
        if ((code = ask_driver(b, ptr, &known, err)) == TQ_OK && known.bytes)
            remember(b, &known);
    }
    *out = known.where;
    leave_if_entered(entered);
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

/* Copies one component on stream `on`: a memcpy for a contiguous source
 * (cuMemcpyPeerAsync from another context of the same GPU), the kernel for
 * any other layout (the face refuses those from another context). */
static tq_code copy_component(cuda_backend *b, CUstream on, CUdeviceptr dst, const tq_device_src *src, size_t bytes,
                              tq_error *err)
{
    tq_code code = TQ_OK;
    if (src_contiguous(src)) {
        if (src->where.same_context)
            CU(MemcpyDtoDAsync, (dst, (CUdeviceptr)src->ptr, bytes, on));
        else
            CU(MemcpyPeerAsync, (dst, b->ctx, (CUdeviceptr)src->ptr, (CUcontext)src->where.context, bytes, on));
        return TQ_OK;
    }
    CUfunction fn;
    if ((code = cuda_kernel(b, TQ_KERNEL_STRIDED_COPY, &fn, err)) != TQ_OK)
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
    CU(LaunchKernel, (fn, (unsigned int)(blocks < 4096 ? blocks : 4096), 1, 1, 256, 1, 1, 0, on, params, NULL));
fail:
    return code;
}

/* ---- ordering the copy with its producers ------------------------------------------------ */

/* An event of the ring's context, from its pool when one is spare.  A wait
 * queued on an event is not moved by a later record of it (the driver's
 * rule), so an event goes back once its wait is queued: the pool holds as
 * many as producers ever put at once, and a steady put makes none. */
static tq_code take_event(cuda_backend *b, CUevent *event, tq_error *err)
{
    pthread_mutex_lock(&b->device_lock);
    *event = b->n_spare_events ? b->spare_events[--b->n_spare_events] : NULL;
    pthread_mutex_unlock(&b->device_lock);
    CUresult rc = *event ? CUDA_SUCCESS : tq_cu.EventCreate(event, CU_EVENT_DISABLE_TIMING);
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuEventCreate", rc);
}

static void give_event(cuda_backend *b, CUevent event)
{
    pthread_mutex_lock(&b->device_lock);
    int kept = b->n_spare_events < TQ_SPARE_EVENTS;
    if (kept)
        b->spare_events[b->n_spare_events++] = event;
    pthread_mutex_unlock(&b->device_lock);
    if (!kept)
        tq_cu.EventDestroy(event);
}

void cuda_device_puts_release(cuda_backend *b)
{
    for (int i = 0; i < b->n_spare_events; i++)
        tq_cu.EventDestroy(b->spare_events[i]);
    b->n_spare_events = 0;
}

/* The context a source's stream belongs to: its memory's, else the ring's. */
static CUcontext stream_context(cuda_backend *b, const tq_device_src *src)
{
    return src->where.context ? (CUcontext)src->where.context : b->ctx;
}

/* The copy stream waits for what is queued on the source's stream now.  The
 * event is recorded in the stream's own context, as the driver requires: a
 * pooled one in the ring's (current here), else one made for this put and
 * destroyed (the ring keeps nothing of a context it does not own). */
static tq_code copy_after_producer(cuda_backend *b, const tq_device_src *src, tq_error *err)
{
    CUcontext ctx = stream_context(b, src);
    int own = ctx == b->ctx;
    CUevent event = NULL;
    tq_code code = TQ_OK;
    if (!own && (code = cuda_enter_context(ctx, err)) != TQ_OK)
        return code;
    if (own && (code = take_event(b, &event, err)) != TQ_OK)
        goto fail;
    if (!own)
        CU(EventCreate, (&event, CU_EVENT_DISABLE_TIMING));
    CU(EventRecord, (event, (CUstream)src->stream));
    CU(StreamWaitEvent, (b->copy_stream, event, 0)); /* an event of another context is fine here */
fail:
    if (event && own)
        give_event(b, event);
    else if (event)
        tq_cu.EventDestroy(event); /* freed once the wait is done */
    if (!own)
        cuda_leave();
    return code;
}

/* The source's stream waits for the slot's copy (its filled event). */
static tq_code producer_after_copy(cuda_backend *b, const tq_device_src *src, int slot, tq_error *err)
{
    CUcontext ctx = stream_context(b, src);
    tq_code code;
    if (ctx != b->ctx && (code = cuda_enter_context(ctx, err)) != TQ_OK)
        return code;
    CUresult rc = tq_cu.StreamWaitEvent((CUstream)src->stream, b->filled[slot], 0);
    if (ctx != b->ctx)
        cuda_leave();
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuStreamWaitEvent", rc);
}

/* 1 when source i is ordered through its stream, and no earlier source read
 * is ordered through the same one: each stream is ordered once a put. */
static int orders_its_stream(const tq_extent *extents, const tq_device_src *srcs, int i)
{
    if (!srcs[i].stream || !extents[i].bytes)
        return 0;
    for (int j = 0; j < i; j++)
        if (extents[j].bytes && srcs[j].stream == srcs[i].stream && srcs[j].where.context == srcs[i].where.context)
            return 0;
    return 1;
}

/* The stream of every source read, when they share one of the ring's
 * context; NULL otherwise. */
static CUstream one_own_stream(cuda_backend *b, const tq_extent *extents, const tq_device_src *srcs, int n)
{
    CUstream on = NULL;
    for (int i = 0; i < n; i++) {
        if (!extents[i].bytes)
            continue;
        if (!srcs[i].stream || stream_context(b, &srcs[i]) != b->ctx || (on && (CUstream)srcs[i].stream != on))
            return NULL;
        on = (CUstream)srcs[i].stream;
    }
    return on;
}

/* Sources whose writes are all queued on one stream of the ring's context
 * are copied on that stream, after the slot's last reader, as GpuEnqueue's
 * are: the copy follows their writes and their next writes follow the copy
 * without an event between two streams (three driver calls a put fewer). */
static tq_code copy_on_producer_stream(cuda_backend *b, CUstream on, int slot, const tq_extent *extents, int n,
                                       const tq_device_src *srcs, tq_error *err)
{
    CUresult rc;
    tq_code code = TQ_OK;
    CU(StreamWaitEvent, (on, b->consumed[slot], 0));
    for (int i = 0; i < n; i++)
        if (extents[i].bytes && (code = copy_component(b, on, b->device[slot] + extents[i].offset, &srcs[i],
                                                       extents[i].bytes, err)) != TQ_OK)
            goto fail;
fail:
    /* Recorded on every path, as below; a failed put's copies are done before
     * its slot is dropped. */
    rc = tq_cu.EventRecord(b->filled[slot], on);
    if (rc != CUDA_SUCCESS && code == TQ_OK)
        code = cuda_error(err, "cuEventRecord", rc);
    if (rc == CUDA_SUCCESS && code != TQ_OK)
        tq_cu.EventSynchronize(b->filled[slot]);
    return code;
}

/* How long a producer without a stream polls for its copy before it blocks:
 * a slot's events are blocking-sync (the consumer's waits must not spin), and
 * waking from one costs tens of microseconds, more than a device copy of a
 * few MiB takes.  The copy's time at 1 TB/s (half the H200's device copy
 * rate), plus what queueing it takes. */
#define HOST_WAIT_POLL_S 50e-6
#define HOST_WAIT_POLL_BYTES_PER_S 1e12

/* The host waits until the slot's copy is done: polled for as long as the
 * copy of `bytes` should take, then blocked on the event. */
static tq_code wait_for_copy(cuda_backend *b, int slot, size_t bytes, tq_error *err)
{
    double until = tq_now() + HOST_WAIT_POLL_S + (double)bytes / HOST_WAIT_POLL_BYTES_PER_S;
    CUresult rc;
    while ((rc = tq_cu.EventQuery(b->filled[slot])) == CUDA_ERROR_NOT_READY && tq_now() < until)
        sched_yield();
    if (rc == CUDA_SUCCESS)
        return TQ_OK;
    if (rc != CUDA_ERROR_NOT_READY) {
        tq_cu.EventSynchronize(b->filled[slot]); /* the array is read before the failed put returns */
        return cuda_error(err, "cuEventQuery", rc);
    }
    rc = tq_cu.EventSynchronize(b->filled[slot]);
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuEventSynchronize", rc);
}

tq_code cuda_put_device_arrays(tq_backend *self, int slot, const tq_extent *extents, int n, const tq_device_src *srcs,
                               tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    int host_wait = 0, recorded = 0, entered;
    CUresult rc;
    tq_code code;
    cuda_forget_deferred(b, slot);
    if ((code = enter_unless_held(b, &entered, err)) != TQ_OK)
        return code;
    CUstream producer = one_own_stream(b, extents, srcs, n);
    if (producer) {
        code = copy_on_producer_stream(b, producer, slot, extents, n, srcs, err);
        leave_if_entered(entered);
        return code;
    }
    /* Otherwise on the copy stream, ordered after and before each producer. */
    for (int i = 0; i < n; i++) {
        if (!extents[i].bytes)
            continue; /* nothing is read: nothing to order, nothing to wait for */
        if (!srcs[i].stream)
            host_wait = 1;
        else if (orders_its_stream(extents, srcs, i) && (code = copy_after_producer(b, &srcs[i], err)) != TQ_OK)
            goto fail;
    }
    /* The device slot is overwritten only after its last reader is done. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n; i++)
        if (extents[i].bytes && (code = copy_component(b, b->copy_stream, b->device[slot] + extents[i].offset, &srcs[i],
                                                       extents[i].bytes, err)) != TQ_OK)
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
        if (!orders_its_stream(extents, srcs, i))
            continue;
        tq_code ordered = producer_after_copy(b, &srcs[i], slot, err);
        if (ordered != TQ_OK) {
            host_wait = 1; /* the next best: the array is read before we return */
            if (code == TQ_OK)
                code = ordered;
        }
    }
    if (recorded && code == TQ_OK && host_wait) {
        size_t bytes = 0;
        for (int i = 0; i < n; i++)
            bytes += extents[i].bytes;
        code = wait_for_copy(b, slot, bytes, err);
    } else if (recorded && code != TQ_OK) {
        tq_cu.EventSynchronize(b->filled[slot]); /* what was queued is done before the slot is dropped */
    }
    leave_if_entered(entered);
    return code;
}
