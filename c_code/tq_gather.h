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

#ifdef __cplusplus
}
#endif
#endif /* TQ_GATHER_H */
