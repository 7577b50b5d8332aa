/*
 * tq_copy: host copies, large ones split over a pool of threads: one thread
 * copies host memory far slower than a bus can take it (doc/design.rst).
 * One pool per process, made at the first large copy and made again in a
 * process forked from one that had it: threads do not survive fork().
 * Plain C and pthreads.
 */
#ifndef TQ_COPY_H
#define TQ_COPY_H

#include "tq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies like memcpy and returns when every byte is there.  Large copies are
 * split over the pool; a copy that finds the pool busy runs on the caller. */
void tq_copy(void *dst, const void *src, size_t bytes);
/* Threads that share a large copy, the caller included: 1 to 256. */
tq_code tq_copy_set_threads(int threads, tq_error *err);
int tq_copy_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* TQ_COPY_H */
