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

#include "tq_scalar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the gather has a loop reading `from` into `to`: to == from, and
 * every pair that casts safely (tq_casts_safely) but for the complex types,
 * which it does not read. */
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

#define TQ_GATHER_MECHANISMS 4
/* Under TQ_GATHER_AUTO a device backend copies rows of this many bytes or more itself (the GPU's batch copy),
 * the host the rest. */
#define TQ_GATHER_DEVICE_MIN_ROW ((size_t)256 * 1024)

/* "host", "batch", "auto", "device": the one spelling of each (Python reads them: _engine.GATHER_MECHANISMS). */
const char *tq_gather_mechanism_name(tq_gather_mechanism mechanism);
/* The mechanism a name spells, or -1 for none. */
int tq_gather_mechanism_of(const char *name);

/* The bytes that rows idx[0..n) of src cover: [*lo, *hi).  n >= 1; src
 * without a layout (a device reads plain rows only). */
void tq_rows_span(const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, const char **lo,
                  const char **hi);

#ifdef __cplusplus
}
#endif
#endif /* TQ_GATHER_H */
