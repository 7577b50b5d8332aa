/*
 * tq_gather: copies rows of a host array, picked by an index array, into one
 * contiguous block: a shuffled minibatch of an array dataset gathered into a
 * slot's staging.  Runs of consecutive indices are copied as one block; a
 * large gather is shared among the copy pool's threads (tq_copy.h).
 * Plain C; the caller need not hold any lock.
 */
#ifndef TQ_GATHER_H
#define TQ_GATHER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of a source array: row i is row_bytes contiguous bytes at base + i * stride. */
typedef struct {
    const void *base;
    ptrdiff_t stride;
} tq_rows;

/* dst row r = src row idx[r] for r < n.  The caller checked every index. */
void tq_gather(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n);

/* One component of an element whose rows a device backend gathers itself
 * (tq_backend.h, publish_rows): its rows in the source, and where they go. */
typedef struct {
    tq_rows src;
    size_t row_bytes;
    size_t offset; /* of the component within the slot */
} tq_row_part;

/* Who gathers an array dataset's rows on a device ring (tq_ring_gather_on_device). */
typedef enum {
    TQ_GATHER_HOST = 0, /* the copy pool's threads, into the pinned staging; the DMA follows */
    TQ_GATHER_BATCH,    /* cuMemcpyBatchAsync on the copy stream: one copy per run of consecutive rows */
    TQ_GATHER_AUTO,     /* the backend's choice per component (doc/design.rst, "The GPU gather") */
    TQ_GATHER_DEVICE    /* every component copied into device memory once, each batch gathered there by a kernel */
} tq_gather_mechanism;

/* "host", "batch", "auto", "device". */
const char *tq_gather_mechanism_name(tq_gather_mechanism mechanism);

/* The bytes that rows idx[0..n) of src cover: [*lo, *hi).  n >= 1. */
void tq_rows_span(const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, const char **lo,
                  const char **hi);

#ifdef __cplusplus
}
#endif
#endif /* TQ_GATHER_H */
