/*
 * tq_pack: the rows of a padded batch packed to the batch's own extent, for
 * variable-length components (theano_queue/core/layout.py): row r of the result is
 * the first used[r] bytes of source row r, then the pad value repeated to the
 * end of the row.  Shared over the copy pool (tq_copy.h) like any large copy.
 * Plain C; the caller need not hold any lock.
 */
#ifndef TQ_PACK_H
#define TQ_PACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *dst; /* n rows of dst_row_bytes, contiguous */
    size_t dst_row_bytes;
    const void *src; /* row r at src + r * src_stride */
    ptrdiff_t src_stride;
    const int64_t *used; /* bytes of each row to copy, each <= dst_row_bytes */
    int64_t n;
    const void *pad; /* one item of padding, pad_bytes long */
    size_t pad_bytes;
} tq_pack_job;

/* Packs the rows.  The caller checked the sizes; source and destination must
 * not overlap. */
void tq_pack_rows(const tq_pack_job *job);

#ifdef __cplusplus
}
#endif
#endif /* TQ_PACK_H */
