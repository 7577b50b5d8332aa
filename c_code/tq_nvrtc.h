/*
 * tq_nvrtc: CUDA C source to PTX at run time with NVRTC, which every CUDA
 * installation ships.  libnvrtc is loaded with dlopen for the compile and
 * closed again, so the engine builds with gcc alone, runs without CUDA, and
 * holds NVRTC's large library only while it compiles.
 *
 * The library is the one THEANO_QUEUE_LIBNVRTC names, else the first of
 * libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12 found on the loader's path or
 * in /usr/local/cuda/lib64.
 */
#ifndef TQ_NVRTC_H
#define TQ_NVRTC_H

#include "tq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compiles `source` (named `name` in NVRTC's messages) to PTX: *ptx is a
 * NUL-terminated string the caller frees.  TQ_ESTATE when NVRTC cannot be
 * loaded, TQ_ECUDA when it fails (err holds the start of its log). */
tq_code tq_nvrtc_compile(const char *source, const char *name, char **ptx, tq_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TQ_NVRTC_H */
