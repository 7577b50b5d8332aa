/* tq_gather.c: see tq_gather.h.  The rows are cut into chunks of about the
 * pool's chunk size; each chunk copies its runs of consecutive indices. */
#include "tq_gather.h"

#include <string.h>

#include "tq_copy.h"

typedef struct {
    char *dst;
    const tq_rows *src;
    size_t row_bytes;
    const int64_t *idx;
    int64_t n, rows_per_chunk;
    int streaming; /* a large gather: streaming stores keep it out of the cache */
} gather_job;

static void gather_chunk(void *arg, size_t chunk)
{
    const gather_job *job = arg;
    const char *base = job->src->base;
    ptrdiff_t stride = job->src->stride;
    /* Consecutive rows are one block only when the source is row-contiguous. */
    int merge = stride == (ptrdiff_t)job->row_bytes;
    int64_t r = (int64_t)chunk * job->rows_per_chunk;
    int64_t end = r + job->rows_per_chunk < job->n ? r + job->rows_per_chunk : job->n;
    while (r < end) {
        int64_t first = job->idx[r], run = 1;
        while (merge && r + run < end && job->idx[r + run] == first + run)
            run++;
        char *to = job->dst + (size_t)r * job->row_bytes;
        const char *from = base + first * stride;
        size_t bytes = (size_t)run * job->row_bytes;
        if (job->streaming)
            tq_copy_stream(to, from, bytes);
        else
            memcpy(to, from, bytes);
        r += run;
    }
}

void tq_gather(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n)
{
    if (n <= 0 || !row_bytes)
        return;
    size_t total = (size_t)n * row_bytes, chunk = tq_copy_chunk_bytes(total);
    int64_t per_chunk = (int64_t)(chunk / row_bytes);
    gather_job job = {dst, src, row_bytes, idx, n, per_chunk > 0 ? per_chunk : 1, chunk < total};
    tq_copy_parallel((size_t)((n + job.rows_per_chunk - 1) / job.rows_per_chunk), gather_chunk, &job);
}

const char *tq_gather_mechanism_name(tq_gather_mechanism mechanism)
{
    switch (mechanism) {
    case TQ_GATHER_HOST: return "host";
    case TQ_GATHER_BATCH: return "batch";
    case TQ_GATHER_DEVICE: return "device";
    default: return "auto";
    }
}

void tq_rows_span(const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, const char **lo, const char **hi)
{
    int64_t first = idx[0], last = idx[0];
    for (int64_t r = 1; r < n; r++) {
        first = idx[r] < first ? idx[r] : first;
        last = idx[r] > last ? idx[r] : last;
    }
    /* A negative stride (a reversed view) puts the last row lowest. */
    const char *a = (const char *)src->base + first * src->stride, *b = (const char *)src->base + last * src->stride;
    *lo = a < b ? a : b;
    *hi = (a < b ? b : a) + row_bytes;
}
