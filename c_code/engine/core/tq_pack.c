/* tq_pack.c: see tq_pack.h.  Rows are cut into chunks of about the pool's
 * chunk size; each chunk copies its rows' used bytes and pads the rest. */
#include "tq_pack.h"

#include <string.h>

#include "tq_copy.h"

typedef struct {
    const tq_pack_job *job;
    int64_t rows_per_chunk;
    int zero_pad; /* a pad value of all zero bytes: memset */
} pack_plan;

static void pad_row(char *to, size_t bytes, const tq_pack_job *job, int zero_pad)
{
    if (zero_pad || job->pad_bytes == 0) {
        memset(to, 0, bytes);
        return;
    }
    /* One item, then doubling copies of what is written: log(bytes) calls. */
    size_t done = bytes < job->pad_bytes ? bytes : job->pad_bytes;
    memcpy(to, job->pad, done);
    while (done < bytes) {
        size_t more = done < bytes - done ? done : bytes - done;
        memcpy(to + done, to, more);
        done += more;
    }
}

static void pack_chunk(void *arg, size_t chunk)
{
    const pack_plan *plan = arg;
    const tq_pack_job *job = plan->job;
    int64_t r = (int64_t)chunk * plan->rows_per_chunk;
    int64_t end = r + plan->rows_per_chunk < job->n ? r + plan->rows_per_chunk : job->n;
    for (; r < end; r++) {
        char *to = (char *)job->dst + (size_t)r * job->dst_row_bytes;
        size_t used = (size_t)job->used[r];
        memcpy(to, (const char *)job->src + r * job->src_stride, used);
        if (used < job->dst_row_bytes)
            pad_row(to + used, job->dst_row_bytes - used, job, plan->zero_pad);
    }
}

static int all_zero(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i])
            return 0;
    return 1;
}

void tq_pack_rows(const tq_pack_job *job)
{
    if (job->n <= 0 || job->dst_row_bytes == 0)
        return;
    size_t total = (size_t)job->n * job->dst_row_bytes, chunk = tq_copy_chunk_bytes(total);
    int64_t per_chunk = (int64_t)(chunk / job->dst_row_bytes);
    pack_plan plan = {job, per_chunk > 0 ? per_chunk : 1, all_zero(job->pad, job->pad_bytes)};
    tq_copy_parallel((size_t)((job->n + plan.rows_per_chunk - 1) / plan.rows_per_chunk), pack_chunk, &plan);
}
