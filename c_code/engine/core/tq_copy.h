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
/* memcpy with streaming stores, for large copies: the destination is not read
 * into the cache first. */
void tq_copy_stream(void *dst, const void *src, size_t bytes);
/* Runs fn(arg, i) for every i < n_chunks over the pool's threads and the
 * caller, and returns when all are done (on the caller alone when the pool
 * is busy).  Other work than a plain copy, e.g. gathering rows (tq_gather.h). */
typedef void (*tq_chunk_fn)(void *arg, size_t chunk);
void tq_copy_parallel(size_t n_chunks, tq_chunk_fn fn, void *arg);
/* The bytes each chunk of a job of `bytes` should hold: `bytes` itself (one
 * chunk, on the caller) when it is too small to share. */
size_t tq_copy_chunk_bytes(size_t bytes);
/* Threads that share a large copy, the caller included: 1 to 256. */
tq_code tq_copy_set_threads(int threads, tq_error *err);
int tq_copy_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* TQ_COPY_H */
