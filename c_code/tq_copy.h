/*
 * tq_copy: memcpy split over a pool of threads.  One thread copies host memory
 * at about 6-12 GB/s; feeding a 55 GB/s bus from ordinary arrays takes several.
 * Plain C and pthreads.
 */
#ifndef TQ_COPY_H
#define TQ_COPY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tq_copier tq_copier;

/* A pool of `threads` workers (the caller of tq_copier_copy helps too, so
 * threads = 0 copies on the caller alone).  NULL when out of memory. */
tq_copier *tq_copier_create(int threads);
/* Copies like memcpy and returns when every byte is there.  Large copies are
 * split over the pool; a copy that finds the pool busy runs on the caller. */
void tq_copier_copy(tq_copier *copier, void *dst, const void *src, size_t bytes);
int tq_copier_threads(const tq_copier *copier);
void tq_copier_destroy(tq_copier *copier);

#ifdef __cplusplus
}
#endif
#endif /* TQ_COPY_H */
