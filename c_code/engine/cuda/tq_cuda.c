/* tq_cuda.c: the CUDA backend proper (see tq_cuda.h): its slots, the
 * producer's publish, the consumer's take, its table and its destruction;
 * the rooms it is built of are listed in tq_cuda_backend.h. */
#include "tq_cuda_backend.h"

#include <stdlib.h>
#include <string.h>

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
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    /* Non-blocking: libgpuarray's streams synchronise with the legacy default
     * stream, and our copies must not. */
    CU(StreamCreate, (&b->copy_stream, CU_STREAM_NON_BLOCKING));
    CU(CtxGetDevice, (&b->device_ordinal));
    CU(MemHostRegister, (b->staging.base, b->staging.bytes, CU_MEMHOSTREGISTER_PORTABLE));
    b->staging_registered = 1;
    cuda_count_allocated(0, (int64_t)b->staging.bytes);
    for (int i = 0; i < capacity; i++) {
        CU(MemAlloc, (&b->device[i], slot_bytes));
        cuda_count_allocated((int64_t)slot_bytes, 0);
        CU(EventCreate, (&b->filled[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
        CU(EventCreate, (&b->consumed[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
    }
fail: /* on failure the ring destroys the backend, which frees what was made */
    cuda_leave();
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

/* The staging may still feed the copy that the slot's last publish started,
 * and its row numbers the gather its consumer queued (index_read): the
 * slot's copy-stream work before that was waited for when it was written. */
static tq_code cuda_before_write(tq_backend *self, int slot, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    cuda_forget_deferred(b, slot);
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    if (b->index_on_stream && b->index_on_stream[slot]) {
        CU(EventSynchronize, (b->index_read[slot]));
        b->index_on_stream[slot] = 0;
    } else {
        CU(EventSynchronize, (b->filled[slot]));
    }
fail:
    cuda_leave();
    return code;
}

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
    return bytes <= TQ_CUDA_LEFT_TO_CONSUMER_MAX;
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
        left->gather_rows = -1;
        left->arrived = NULL;
        __atomic_add_fetch(&b->n_deferred, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&b->deferred_lock);
        return TQ_OK;
    }
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    code = cuda_upload(b, slot, extents, n_extents, err);
    cuda_leave();
    return code;
}

/* A held batch left to the consumer is gathered into the slot itself for a
 * reader of the slot's memory (ctx current). */
static tq_code gather_left_into_slot(cuda_backend *b, int slot, tq_error *err)
{
    if (!__atomic_load_n(&b->n_left_gathers, __ATOMIC_ACQUIRE))
        return TQ_OK;
    pthread_mutex_lock(&b->gather_lock);
    tq_code code = cuda_gather_left_into_slot(b, slot, err);
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

static tq_code cuda_read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    if ((code = gather_left_into_slot(b, slot, err)) != TQ_OK || (code = cuda_start_deferred(b, slot, err)) != TQ_OK)
        goto fail;
    CU(StreamWaitEvent, (b->copy_stream, b->filled[slot], 0));
    CU(MemcpyDtoHAsync, (dst, b->device[slot] + extent->offset, extent->bytes, b->copy_stream));
    CU(StreamSynchronize, (b->copy_stream));
fail:
    cuda_leave();
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
        cuda_forget_deferred(b, slot);
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    if (!into_slot && (code = cuda_start_deferred(b, slot, err)) != TQ_OK)
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
    rc = tq_cu.EventRecord(after, s);
    if (rc != CUDA_SUCCESS && code == TQ_OK)
        code = cuda_error(err, "cuEventRecord", rc);
    cuda_leave();
    return code;
}

/* A held batch left to the consumer is gathered straight into dsts on its
 * stream; anything else is copied out of the slot. */
static tq_code cuda_take(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                         const uint64_t *dsts, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    int gathered;
    tq_code code = cuda_gather_for_consumer(b, slot, (CUstream)stream, dsts, 0, NULL, &gathered, err);
    if (code != TQ_OK || gathered)
        return code;
    return copy_on_stream(b, slot, (CUstream)stream, extents, n, dsts, 0, err);
}

static tq_code cuda_put_from_device(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                                    const uint64_t *srcs, tq_error *err)
{
    return copy_on_stream((cuda_backend *)self, slot, (CUstream)stream, extents, n, srcs, 1, err);
}

static void *cuda_copy_stream(tq_backend *self) { return ((cuda_backend *)self)->copy_stream; }

/* Runs fn(arg) on a driver thread once the copy stream has done what is
 * queued on it now, the slot's last copy included; for an upload left to the
 * consumer, once that is done (or at once, should it be dropped unread). */
static tq_code cuda_on_arrival(tq_backend *self, int slot, void (*fn)(void *), void *arg, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if (!tq_cu.LaunchHostFunc)
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
    if ((code = cuda_enter(b, err)) != TQ_OK)
        return code;
    CU(LaunchHostFunc, (b->copy_stream, fn, arg));
fail:
    cuda_leave();
    return code;
}

/* ---- creation and destruction ------------------------------------------------------ */

static void cuda_destroy(tq_backend *self)
{
    cuda_backend *b = (cuda_backend *)self;
    for (int i = 0; b->deferred && i < b->capacity; i++)
        cuda_forget_deferred(b, i); /* a trace's marks are freed */
    if (b->ctx && cuda_enter(b, NULL) == TQ_OK) {
        /* Nothing may still read or write the memory about to be freed. */
        for (int i = 0; i < b->capacity; i++) {
            if (b->filled[i])
                tq_cu.EventSynchronize(b->filled[i]);
            if (b->consumed[i])
                tq_cu.EventSynchronize(b->consumed[i]);
        }
        if (b->copy_stream) {
            cuda_detach_all(b, NULL); /* waits for the gathers that read the sources */
            tq_cu.StreamSynchronize(b->copy_stream);
            tq_cu.StreamDestroy(b->copy_stream);
        }
        cuda_spares_release(b);
        cuda_held_events_release(b);
        if (b->staging_registered) {
            tq_cu.MemHostUnregister(b->staging.base);
            cuda_count_allocated(0, -(int64_t)b->staging.bytes);
        }
        for (int i = 0; i < b->capacity; i++) {
            if (b->device[i]) {
                tq_cu.MemFree(b->device[i]);
                cuda_count_allocated(-(int64_t)b->slot_bytes, 0);
            }
            if (b->filled[i])
                tq_cu.EventDestroy(b->filled[i]);
            if (b->consumed[i])
                tq_cu.EventDestroy(b->consumed[i]);
        }
        cuda_device_puts_release(b); /* after the stream: no wait still queued on them */
        cuda_kernels_release(b);
        for (int i = 0; i < b->n_registered; i++)
            cuda_unpin_host(b->registered[i].pin);
        cuda_leave();
    }
    free(b->attached);
    free(b->batch_dsts);
    free(b->batch_srcs);
    free(b->batch_sizes);
    pthread_mutex_destroy(&b->gather_lock);
    tq_shm_destroy(&b->staging);
    pthread_mutex_destroy(&b->registered_lock);
    pthread_mutex_destroy(&b->module_lock);
    pthread_mutex_destroy(&b->device_lock);
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
        .name = "cuda",
        .on_device = 1,
        .alloc_slots = cuda_alloc_slots,
        .write_ptr = cuda_write_ptr,
        .before_write = cuda_before_write,
        .reads_directly = cuda_reads_directly,
        .publish = cuda_publish,
        .read_to_host = cuda_read_to_host,
        .register_host = cuda_register_host,
        .unregister_host = cuda_unregister_host,
        .take = cuda_take,
        .put_from_device = cuda_put_from_device,
        .shared_staging = cuda_shared_staging,
        .swap_staging = cuda_swap_staging,
        .on_arrival = cuda_on_arrival,
        .destroy = cuda_destroy,
        .probe_device = cuda_probe_device,
        .hold_device = cuda_hold_device,
        .release_device = cuda_release_device,
        .put_device_arrays = cuda_put_device_arrays,
        .copy_stream = cuda_copy_stream,
        .attach_rows = cuda_attach_rows,
        .detach_rows = cuda_detach_rows,
        .gathers_rows = cuda_gathers_rows,
        .publish_rows = cuda_publish_rows,
        .lend = cuda_lend,
        .give_back = cuda_give_back,
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
    pthread_mutex_init(&b->device_lock, NULL);
    b->base = cuda;
    b->ctx = (CUcontext)cu_context;
    return &b->base;
}
