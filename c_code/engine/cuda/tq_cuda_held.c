/* tq_cuda_held.c: array datasets held in device memory (TQ_GATHER_DEVICE,
 * Feeder(device=True)).  tq_cuda_rows.c attaches the sources' byte ranges
 * here: each is copied once into memory of the ring's context, and each
 * batch is gathered from there into the slot by one kernel for up to
 * TQ_GATHER_PARTS components (tq_gather_rows.cu), on the copy stream, after
 * the batch's row numbers; a small batch left to its consumer is gathered on
 * the consumer's stream, its row numbers read where the host wrote them.
 * Nothing crosses the bus per batch but 8 bytes a row. */
#include "tq_cuda_backend.h"

#include <stdlib.h>
#include <string.h>

/* The device copy keeps the host range's address modulo this, so a row
 * aligned on the host is aligned on the device as well (the kernel's unit). */
#define HELD_ALIGN 256

/* Bytes copied up per call: bounds the driver's pageable staging per call. */
#define UPLOAD_CHUNK ((size_t)64 << 20)

static double gib(size_t bytes) { return (double)bytes / (double)(1ull << 30); }

tq_code cuda_held_fits(cuda_backend *b, size_t total, tq_error *err)
{
    size_t free_bytes = 0, all = 0;
    tq_code code = TQ_OK;
    (void)b;
    CU(MemGetInfo, (&free_bytes, &all));
    if (total > free_bytes)
        return tq_set_error(err, TQ_ENOMEM,
                            "the array dataset takes %.3g GiB of device memory (with its row numbers) and the GPU "
                            "has %.3g GiB free of %.3g GiB",
                            gib(total), gib(free_bytes), gib(all));
fail:
    return code;
}

tq_code cuda_hold_range(cuda_backend *b, char *start, char *end, attachment *out, tq_error *err)
{
    size_t bytes = (size_t)(end - start), lead = (uintptr_t)start % HELD_ALIGN;
    CUdeviceptr held = 0;
    tq_code code = TQ_OK;
    CU(MemAlloc, (&held, bytes + lead + !bytes));
    for (size_t done = 0; done < bytes; done += UPLOAD_CHUNK) {
        size_t chunk = bytes - done < UPLOAD_CHUNK ? bytes - done : UPLOAD_CHUNK;
        CU(MemcpyHtoDAsync, (held + lead + done, start + done, chunk, b->copy_stream));
    }
    CU(StreamSynchronize, (b->copy_stream)); /* the caller may change its arrays once attached */
    cuda_count_allocated((int64_t)(bytes + lead + !bytes), 0);
    *out = (attachment){
        start, end, NULL, held, bytes + lead + !bytes, (long long)(held + lead - (CUdeviceptr)(uintptr_t)start)};
    return TQ_OK;
fail:
    if (held)
        tq_cu.MemFree(held);
    return code;
}

void cuda_release_held(attachment *at)
{
    if (!at->held)
        return;
    tq_cu.MemFree(at->held);
    cuda_count_allocated(-(int64_t)at->held_bytes, 0);
    at->held = 0;
    at->held_bytes = 0;
}

/* The largest batch whose gather a producer leaves to the consumer's stream
 * (tq_cuda_set_held_in_step_max). */
static size_t held_in_step_max = TQ_CUDA_LEFT_TO_CONSUMER_MAX;

size_t tq_cuda_set_held_in_step_max(size_t bytes)
{
    return __atomic_exchange_n(&held_in_step_max, bytes, __ATOMIC_RELAXED);
}

/* The events after each slot's last read of its row numbers on a consumer's
 * stream: made at the first attach, kept until the backend is destroyed (a
 * producer's before_write reads them without the gather_lock). */
static tq_code index_read_events(cuda_backend *b, tq_error *err)
{
    tq_code code = TQ_OK;
    if (b->index_read)
        return TQ_OK;
    CUevent *events = calloc((size_t)b->capacity, sizeof *events);
    int *on_stream = calloc((size_t)b->capacity, sizeof *on_stream);
    int made = 0;
    if (!events || !on_stream) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the row numbers' events");
        goto fail;
    }
    for (; made < b->capacity; made++)
        CU(EventCreate, (&events[made], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
    b->index_read = events;
    b->index_on_stream = on_stream;
    return TQ_OK;
fail:
    while (made > 0)
        tq_cu.EventDestroy(events[--made]);
    free(events);
    free(on_stream);
    return code;
}

void cuda_held_events_release(cuda_backend *b)
{
    for (int i = 0; b->index_read && i < b->capacity; i++) {
        tq_cu.EventSynchronize(b->index_read[i]);
        tq_cu.EventDestroy(b->index_read[i]);
    }
    free(b->index_read);
    free(b->index_on_stream);
    b->index_read = NULL;
    b->index_on_stream = NULL;
}

tq_code cuda_held_index_make(cuda_backend *b, const size_t *row_bytes, int n, tq_error *err)
{
    size_t all_row_bytes = 0;
    for (int c = 0; c < n; c++)
        all_row_bytes += row_bytes[c];
    /* Every component of an array dataset has a batch's rows: no slot holds more. */
    int64_t rows = all_row_bytes && b->slot_bytes >= all_row_bytes ? (int64_t)(b->slot_bytes / all_row_bytes) : 1;
    size_t bytes = (size_t)b->capacity * (size_t)rows * sizeof(int64_t);
    int registered = 0;
    tq_code code;
    if ((code = index_read_events(b, err)) != TQ_OK)
        return code;
    /* Page-locked, so that the copy of a batch's row numbers is asynchronous,
     * and mapped, so that a small batch's kernel reads them without one. */
    void *host = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!host)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for the row numbers (%zu bytes)", bytes);
    CU(MemHostRegister, (host, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    registered = 1;
    CU(MemAlloc, (&b->index_device, bytes));
    if (!tq_cu.MemHostGetDevicePointer || tq_cu.MemHostGetDevicePointer(&b->index_mapped, host, 0) != CUDA_SUCCESS)
        b->index_mapped = 0; /* uploaded before each gather instead */
    b->index_host = host;
    b->index_rows = rows;
    cuda_count_allocated((int64_t)bytes, (int64_t)bytes);
    return TQ_OK;
fail:
    if (registered)
        tq_cu.MemHostUnregister(host);
    free(host);
    b->index_device = 0;
    b->index_mapped = 0;
    return code;
}

void cuda_held_index_free(cuda_backend *b)
{
    if (!b->index_host)
        return;
    size_t bytes = (size_t)b->capacity * (size_t)b->index_rows * sizeof(int64_t);
    tq_cu.MemHostUnregister(b->index_host);
    free(b->index_host);
    tq_cu.MemFree(b->index_device);
    cuda_count_allocated(-(int64_t)bytes, -(int64_t)bytes);
    b->index_host = NULL;
    b->index_device = 0;
    b->index_mapped = 0;
    b->index_rows = 0;
}

/* The widest unit (16, 8, 4, 2 or 1 bytes) dividing every address and size
 * the kernel steps by. */
static int gather_unit(CUdeviceptr src, long long stride, size_t row_bytes, CUdeviceptr dst)
{
    uint64_t bits = (uint64_t)src | (uint64_t)(stride < 0 ? -stride : stride) | row_bytes | (uint64_t)dst;
    for (int unit = 16; unit > 1; unit /= 2)
        if (bits % (uint64_t)unit == 0)
            return unit;
    return 1;
}

/* The kernel's argument (tq_gather_rows.cu's struct tq_gather_parts): the
 * parts one launch gathers, one row of blocks each. */
#define TQ_GATHER_PARTS 8
typedef struct {
    CUdeviceptr src[TQ_GATHER_PARTS], dst[TQ_GATHER_PARTS];
    long long stride[TQ_GATHER_PARTS];
    unsigned long long row_units[TQ_GATHER_PARTS], n[TQ_GATHER_PARTS];
    int unit[TQ_GATHER_PARTS];
} tq_gather_parts;

/* Adds rows idx[0..rows) of part's held source into dst to the launch's parts. */
static void add_part(tq_gather_parts *p, int k, CUdeviceptr dst, const tq_row_part *part, const attachment *at,
                     int64_t rows)
{
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)part->src.base + (CUdeviceptr)at->to_device;
    long long stride = (long long)part->src.stride;
    int unit = gather_unit(src, stride, part->row_bytes, dst);
    p->src[k] = src;
    p->dst[k] = dst;
    p->stride[k] = stride;
    p->unit[k] = unit;
    p->row_units[k] = part->row_bytes / (size_t)unit;
    p->n[k] = p->row_units[k] * (unsigned long long)rows;
}

/* One kernel on `stream` for the first `count` parts of p. */
static tq_code launch_gather(CUfunction fn, CUstream stream, tq_gather_parts *p, int count, CUdeviceptr idx,
                             tq_error *err)
{
    tq_code code = TQ_OK;
    unsigned long long most = 0;
    for (int k = 0; k < count; k++)
        most = p->n[k] > most ? p->n[k] : most;
    unsigned long long blocks = (most + 255) / 256;
    void *params[] = {p, &idx};
    if (!most)
        return TQ_OK;
    /* A grid of at most 8192 blocks of 256 threads a part covers the H200's
     * SMs many times over; larger batches loop inside the kernel. */
    CU(LaunchKernel,
       (fn, (unsigned int)(blocks < 8192 ? blocks : 8192), (unsigned int)count, 1, 256, 1, 1, 0, stream, params, NULL));
fail:
    return code;
}

/* Queues on `stream` the gather of every held part, part c into dsts[c] or,
 * without dsts, into block at the part's offset, TQ_GATHER_PARTS parts a
 * kernel (ctx current).  The kernels read the slot's row numbers where the
 * host staged them when `mapped` and the device can (a small batch's:
 * a copy up would cost the consumer's thread a driver call), else after
 * their upload on `stream`. */
static tq_code gather_staged(cuda_backend *b, int slot, CUstream stream, const tq_row_part *parts,
                             const attachment *const *held, int n, int64_t rows, const uint64_t *dsts,
                             CUdeviceptr block, int mapped, tq_error *err)
{
    CUfunction fn;
    tq_code code;
    tq_gather_parts launch;
    int count = 0;
    if ((code = cuda_kernel(b, TQ_KERNEL_GATHER_ROWS, &fn, err)) != TQ_OK)
        return code;
    size_t offset = (size_t)slot * (size_t)b->index_rows * sizeof(int64_t);
    int64_t *host = b->index_host + (size_t)slot * (size_t)b->index_rows;
    CUdeviceptr idx = b->index_device + (CUdeviceptr)offset;
    if (mapped && b->index_mapped)
        idx = b->index_mapped + (CUdeviceptr)offset;
    else
        CU(MemcpyHtoDAsync, (idx, host, (size_t)rows * sizeof *host, stream));
    for (int c = 0; c < n && code == TQ_OK; c++) {
        if (!held[c])
            continue;
        add_part(&launch, count++, dsts ? (CUdeviceptr)dsts[c] : block + parts[c].offset, &parts[c], held[c], rows);
        if (count == TQ_GATHER_PARTS) {
            code = launch_gather(fn, stream, &launch, count, idx, err);
            count = 0;
        }
    }
    if (code == TQ_OK && count)
        code = launch_gather(fn, stream, &launch, count, idx, err);
fail:
    return code;
}

/* The slot's row numbers were last read before the event its producer
 * waited for (before_write: filled, or index_read after a consumer's gather). */
static tq_code stage_index(cuda_backend *b, int slot, const int64_t *idx, int64_t rows, tq_error *err)
{
    if (!b->index_host || rows > b->index_rows)
        return tq_set_error(err, TQ_EINVAL, "a batch of %lld rows, more than a slot holds (%lld)", (long long)rows,
                            (long long)b->index_rows);
    memcpy(b->index_host + (size_t)slot * (size_t)b->index_rows, idx, (size_t)rows * sizeof *idx);
    return TQ_OK;
}

int cuda_held_left_to_consumer(const tq_row_part *parts, int n, int64_t rows)
{
    size_t bytes = 0;
    for (int c = 0; c < n; c++)
        bytes += (size_t)rows * parts[c].row_bytes;
    return bytes <= __atomic_load_n(&held_in_step_max, __ATOMIC_RELAXED);
}

tq_code cuda_gather_held(cuda_backend *b, int slot, const tq_row_part *parts, const attachment *const *held, int n,
                         const int64_t *idx, int64_t rows, tq_error *err)
{
    tq_code code = stage_index(b, slot, idx, rows, err);
    return code == TQ_OK ? gather_staged(b, slot, b->copy_stream, parts, held, n, rows, NULL, b->device[slot], 0, err)
                         : code;
}

tq_code cuda_leave_held(cuda_backend *b, int slot, const tq_row_part *parts, const attachment *const *held, int n,
                        const int64_t *idx, int64_t rows, tq_error *err)
{
    deferred_upload gather = {.gather_rows = rows, .n_parts = n};
    tq_code code = stage_index(b, slot, idx, rows, err);
    if (code != TQ_OK)
        return code;
    for (int c = 0; c < n; c++) {
        gather.parts[c] = parts[c];
        gather.held[c] = *held[c];
    }
    cuda_leave_gather(b, slot, &gather);
    return TQ_OK;
}

/* The gather's parts and where each is held, as gather_staged takes them. */
static void left_parts(const deferred_upload *left, const attachment **held)
{
    for (int c = 0; c < left->n_parts; c++)
        held[c] = &left->held[c];
}

tq_code cuda_gather_for_consumer(cuda_backend *b, int slot, CUstream stream, const uint64_t *dsts, CUdeviceptr block,
                                 CUevent block_free, int *done, tq_error *err)
{
    const attachment *held[TQ_MAX_COMPONENTS];
    deferred_upload left;
    tq_code code = TQ_OK;
    *done = 0;
    if (!__atomic_load_n(&b->n_left_gathers, __ATOMIC_ACQUIRE))
        return TQ_OK;
    /* Under gather_lock: a detach does not free the held memory between the
     * take of the gather and its launch. */
    pthread_mutex_lock(&b->gather_lock);
    if (!cuda_take_left_gather(b, slot, &left)) {
        pthread_mutex_unlock(&b->gather_lock);
        return TQ_OK;
    }
    *done = 1;
    left_parts(&left, held);
    if ((code = cuda_enter(b, err)) != TQ_OK)
        goto unlock;
    if (block_free)
        CU(StreamWaitEvent, (stream, block_free, 0));
    code = gather_staged(b, slot, stream, left.parts, held, left.n_parts, left.gather_rows, dsts, block, 1, err);
fail:
    /* Recorded on every path: the producer rewrites the row numbers only
     * after what was queued has read them. */
    if (tq_cu.EventRecord(b->index_read[slot], stream) == CUDA_SUCCESS)
        b->index_on_stream[slot] = 1;
    else
        tq_cu.StreamSynchronize(stream);
    cuda_arrival_after(&left, stream, code != TQ_OK);
    cuda_leave();
unlock:
    cuda_left_gather_queued(b);
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

tq_code cuda_gather_left_into_slot(cuda_backend *b, int slot, tq_error *err)
{
    const attachment *held[TQ_MAX_COMPONENTS];
    deferred_upload left;
    tq_code code = TQ_OK;
    if (!cuda_take_left_gather(b, slot, &left))
        return TQ_OK;
    left_parts(&left, held);
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    code = gather_staged(b, slot, b->copy_stream, left.parts, held, left.n_parts, left.gather_rows, NULL,
                         b->device[slot], 1, err);
    if (code == TQ_OK)
        CU(EventRecord, (b->filled[slot], b->copy_stream));
fail:
    if (code != TQ_OK)
        tq_cu.StreamSynchronize(b->copy_stream); /* nothing queued reads the row numbers once the slot is dropped */
    cuda_arrival_after(&left, b->copy_stream, code != TQ_OK);
    cuda_left_gather_queued(b);
    return code;
}
