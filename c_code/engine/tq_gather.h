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

/* The element types a gather reads and writes.  Which casts between them a
 * queue allows is its schema's rule (theano_queue/layout.py), not the
 * engine's: the engine only has a loop for each pair it can convert. */
typedef enum {
    TQ_BOOL = 0,
    TQ_INT8,
    TQ_UINT8,
    TQ_INT16,
    TQ_UINT16,
    TQ_INT32,
    TQ_UINT32,
    TQ_INT64,
    TQ_UINT64,
    TQ_FLOAT16,
    TQ_FLOAT32,
    TQ_FLOAT64,
    TQ_N_SCALARS
} tq_scalar;

/* Bytes of one element. */
size_t tq_scalar_size(tq_scalar type);
/* Whether the gather has a loop reading `from` into `to` (to == from always;
 * no loop writes float16: no integer or float casts safely into it but int8,
 * uint8 and bool, which no model keeps as float16). */
int tq_gather_converts(tq_scalar from, tq_scalar to);

/* Axes of a row the gather walks at most (more: the caller's slower path). */
#define TQ_ROW_MAX_DIMS 16

/* How a row's elements lie in the source and what they are, for rows that
 * are not the slot's bytes as they stand: strided or Fortran-order rows, or
 * rows of another element type cast on the way.  Axes of one element and
 * axes that continue the next are best merged by the caller (fewer, longer
 * runs); a row of one element has ndim 0. */
typedef struct {
    int ndim;
    int64_t shape[TQ_ROW_MAX_DIMS];
    ptrdiff_t strides[TQ_ROW_MAX_DIMS]; /* in bytes, of any sign, 0 included */
    tq_scalar from, to;                 /* the source's element type and the slot's */
} tq_row_layout;

/* Rows of a source array: row i starts at base + i * stride (any sign).
 * layout NULL: row i is row_bytes contiguous bytes, already as the slot
 * holds them (the fast path: runs of consecutive rows are one copy). */
typedef struct {
    const void *base;
    ptrdiff_t stride;
    const tq_row_layout *layout;
} tq_rows;

/* dst row r = src row idx[r] for r < n, row_bytes bytes each in dst (the
 * slot's dtype: elements cast by src->layout where it has one).  The caller
 * checked every index and that the layout's pair converts. */
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

/* The bytes that rows idx[0..n) of src cover: [*lo, *hi).  n >= 1; src
 * without a layout (a device reads plain rows only). */
void tq_rows_span(const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, const char **lo,
                  const char **hi);

#ifdef __cplusplus
}
#endif
#endif /* TQ_GATHER_H */
