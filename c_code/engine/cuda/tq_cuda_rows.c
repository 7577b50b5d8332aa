/* tq_cuda_rows.c: the device gather (doc/design.rst, "The GPU gather"): an
 * array dataset's sources page-locked and mapped, and each batch's rows
 * copied by the device (cuMemcpyBatchAsync) straight into the slot; or the
 * sources copied into device memory once, and each batch gathered there by
 * a kernel (TQ_GATHER_DEVICE, tq_cuda_held.c). */
#include "tq_cuda_backend.h"

#include <stdlib.h>
#include <string.h>

/* ---- the device gather --------------------------------------------------------------- */

/* Under TQ_GATHER_AUTO the device copies the rows of components whose rows
 * are at least TQ_GATHER_DEVICE_MIN_ROW (tq_gather.h), and the host gathers
 * the rest: a batch copy costs about a microsecond per row, the host gather
 * runs at about the bus's rate, so the device wins for large rows only
 * (doc/design.rst, "The GPU gather"). */

/* Which components the device copies under `want` (TQ_GATHER_BATCH and
 * TQ_GATHER_DEVICE: all, TQ_GATHER_AUTO: those with large rows):
 * on_device[c], and their count. */
static int choose_components(tq_gather_mechanism want, const size_t *bytes, const size_t *row_bytes, int n,
                             int *on_device)
{
    int count = 0;
    for (int c = 0; c < n; c++) {
        on_device[c] = bytes[c] && (want != TQ_GATHER_AUTO || row_bytes[c] >= TQ_GATHER_DEVICE_MIN_ROW);
        count += on_device[c];
    }
    return count;
}

static tq_code batch_copy_ready(tq_error *err)
{
    if (!tq_cu.MemcpyBatchAsync && !tq_cu.MemcpyBatchAsync12)
        return tq_set_error(err, TQ_ESTATE, "the CUDA driver lacks cuMemcpyBatchAsync (CUDA 12.8+)");
    if (!tq_cu.MemHostGetDevicePointer)
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

/* Attaches one source range (ctx current, gather_lock held): copied into
 * device memory for TQ_GATHER_DEVICE, else page-locked and mapped. */
static tq_code attach_range(cuda_backend *b, tq_gather_mechanism mechanism, const source_range *range, tq_error *err)
{
    CUdeviceptr device = 0;
    host_pin *pin;
    tq_code code;
    if (mechanism == TQ_GATHER_DEVICE) {
        if ((code = cuda_hold_range(b, range->start, range->end, &b->attached[b->n_attached], err)) == TQ_OK)
            b->n_attached++;
        return code;
    }
    if ((code = cuda_pin_host(range->start, range->end, range->read_only, &pin, err)) != TQ_OK)
        return code;
    CU(MemHostGetDevicePointer, (&device, range->start, 0));
    b->attached[b->n_attached++] =
        (attachment){range->start, range->end, pin, 0, 0, (long long)(device - (CUdeviceptr)(uintptr_t)range->start)};
    return TQ_OK;
fail:
    cuda_unpin_host(pin);
    return code;
}

/* Gives back every attached range (ctx current, gather_lock held): nothing
 * queued on the copy stream may still read them. */
static void release_attachments(cuda_backend *b)
{
    for (int i = 0; i < b->n_attached; i++) {
        if (b->attached[i].held)
            cuda_release_held(&b->attached[i]);
        else
            cuda_unpin_host(b->attached[i].pin);
    }
    cuda_held_index_free(b);
    b->n_attached = 0;
    free(b->attached);
    b->attached = NULL;
    b->gather = TQ_GATHER_HOST;
    memset(b->on_device, 0, sizeof b->on_device);
}

/* Undoes the attach once the gathers in flight are done (ctx current,
 * gather_lock held). */
tq_code cuda_detach_all(cuda_backend *b, tq_error *err)
{
    tq_code code = TQ_OK;
    if (b->gather == TQ_GATHER_HOST && !b->n_attached)
        return TQ_OK;
    /* Held batches left to consumers read the held memory too: gathered into
     * their slots now, and the gathers consumers queued are waited for. */
    for (int slot = 0; slot < b->capacity; slot++) {
        tq_code gathered = cuda_gather_left_into_slot(b, slot, err);
        code = code == TQ_OK ? gathered : code;
        if (b->index_on_stream && b->index_on_stream[slot])
            tq_cu.EventSynchronize(b->index_read[slot]);
    }
    CUresult rc = tq_cu.StreamSynchronize(b->copy_stream);
    if (rc != CUDA_SUCCESS && code == TQ_OK)
        code = cuda_error(err, "cuStreamSynchronize", rc);
    release_attachments(b);
    return code;
}

tq_code cuda_attach_rows(tq_backend *self, const void *const *ptrs, const size_t *bytes, const size_t *row_bytes,
                         const int *read_only, int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used,
                         tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    source_range ranges[TQ_MAX_COMPONENTS];
    int chosen[TQ_MAX_COMPONENTS];
    tq_code code = TQ_OK;
    *used = TQ_GATHER_HOST;
    if (n < 1 || n > TQ_MAX_COMPONENTS)
        return tq_set_error(err, TQ_EINVAL, "expected 1 to %d source ranges, got %d", TQ_MAX_COMPONENTS, n);
    if (mechanism != TQ_GATHER_BATCH && mechanism != TQ_GATHER_AUTO && mechanism != TQ_GATHER_DEVICE)
        return tq_set_error(err, TQ_EINVAL, "expected the gather mechanism 'batch', 'auto' or 'device', got '%s'",
                            tq_gather_mechanism_name(mechanism));
    pthread_mutex_lock(&b->gather_lock);
    if (b->gather != TQ_GATHER_HOST) {
        code = tq_set_error(err, TQ_ESTATE, "the device already gathers rows for another source of this queue");
        goto unlock;
    }
    /* Small rows only: the host gathers them all, and nothing is locked. */
    if (!choose_components(mechanism, bytes, row_bytes, n, chosen))
        goto unlock;
    if (mechanism != TQ_GATHER_DEVICE && (code = batch_copy_ready(err)) != TQ_OK)
        goto unlock;
    int m = source_ranges(ptrs, bytes, read_only, chosen, n, ranges);
    if (!(b->attached = calloc((size_t)m, sizeof *b->attached))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the gather's sources");
        goto unlock;
    }
    if ((code = cuda_enter(b, err)) != TQ_OK) {
        release_attachments(b);
        goto unlock;
    }
    if (mechanism == TQ_GATHER_DEVICE) {
        size_t total = 0;
        for (int i = 0; i < m; i++)
            total += (size_t)(ranges[i].end - ranges[i].start);
        code = cuda_held_fits(b, total, err);
    }
    for (int i = 0; i < m && code == TQ_OK; i++)
        code = attach_range(b, mechanism, &ranges[i], err);
    if (code == TQ_OK && mechanism == TQ_GATHER_DEVICE)
        code = cuda_held_index_make(b, row_bytes, n, err);
    if (code == TQ_OK) {
        memcpy(b->on_device, chosen, (size_t)n * sizeof *chosen);
        b->gather = *used = mechanism == TQ_GATHER_DEVICE ? TQ_GATHER_DEVICE : TQ_GATHER_BATCH;
    } else {
        release_attachments(b); /* a failed attach leaves nothing locked */
    }
    cuda_leave();
unlock:
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}

tq_code cuda_detach_rows(tq_backend *self, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    pthread_mutex_lock(&b->gather_lock);
    if ((code = cuda_enter(b, err)) == TQ_OK) {
        code = cuda_detach_all(b, err);
        cuda_leave();
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

int cuda_gathers_rows(tq_backend *self, int component, const char *lo, const char *hi)
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
    if (tq_cu.MemcpyBatchAsync)
        CU(MemcpyBatchAsync, (b->batch_dsts, b->batch_srcs, b->batch_sizes, count, &attrs, &first, 1, b->copy_stream));
    else
        CU(MemcpyBatchAsync12,
           (b->batch_dsts, b->batch_srcs, b->batch_sizes, count, &attrs, &first, 1, &fail_at, b->copy_stream));
fail:
    return code;
}

tq_code cuda_publish_rows(tq_backend *self, int slot, const tq_row_part *parts, int n, const int64_t *idx, int64_t rows,
                          tq_error *err)
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
    /* A small batch, every part held: its consumer queues the gather on its
     * own stream when it takes the batch, so that this thread makes no
     * driver call beside the step's own (doc/design.rst, "Small steps"). */
    if (b->gather == TQ_GATHER_DEVICE && on_device == n && cuda_held_left_to_consumer(parts, n, rows)) {
        code = cuda_leave_held(b, slot, parts, at, n, idx, rows, err);
        goto unlock;
    }
    if ((code = cuda_enter(b, err)) != TQ_OK)
        goto unlock;
    /* As publish: the slot is overwritten only after its last reader. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    if (on_device && b->gather == TQ_GATHER_DEVICE) {
        if ((code = cuda_gather_held(b, slot, parts, at, n, idx, rows, err)) != TQ_OK)
            goto fail;
        on_device = 0; /* nothing left for the batch copy */
    }
    if (on_device && (code = batch_room(b, (size_t)rows * (size_t)on_device, err)) != TQ_OK)
        goto fail;
    for (int c = 0; c < n; c++) {
        size_t bytes = (size_t)rows * parts[c].row_bytes;
        if (!bytes || (at[c] && b->gather == TQ_GATHER_DEVICE))
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
    cuda_leave();
unlock:
    pthread_mutex_unlock(&b->gather_lock);
    return code;
}
