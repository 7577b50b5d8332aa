/*
 * tq_cuda: the CUDA backend.  libcuda is loaded with dlopen when the first
 * CUDA ring is made, so the engine builds with gcc alone and runs without a
 * GPU.  Handles are passed as void* / uint64_t so no CUDA header is needed.
 *
 * Per slot: pinned staging (producers write it; every slot's is carved from one
 * shared block, tq_shm.h, page-locked with cuMemHostRegister so that worker
 * processes can map it), device memory (consumers read it), a *filled* event recorded after the data reached the device and a
 * *consumed* event recorded on the consumer's stream after its last read.
 *
 *   host producer   before_write: host-waits on filled (staging free again)
 *                   publish: copy stream waits on consumed, copies host->device,
 *                            records filled                    (no host block)
 *   consumer        tq_cuda_take: its stream waits on filled, copies
 *                   device->device into the consumer's buffers, records consumed
 *   device producer tq_cuda_put_from_device: its stream waits on consumed,
 *                   copies device->device into the slot, records filled
 */
#ifndef TQ_CUDA_H
#define TQ_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tq_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when libcuda loads and initialises, else -1 and why. */
int tq_cuda_load(char *err, size_t errlen);

/* The CUcontext current in libgpuarray's context `gpucontext` (a pygpu
 * GpuContext's .ptr): found through libgpuarray's cuda_enter/cuda_exit. */
int tq_cuda_context_of_gpuarray(void *gpucontext, void **cu_context, char *err, size_t errlen);

/* A backend whose slots live in `cu_context`; NULL with a message on failure. */
tq_backend *tq_cuda_backend_create(void *cu_context, char *err, size_t errlen);
int tq_backend_is_cuda(const tq_backend *backend);

/* Consumer: make `stream` wait for slot's data, copy n byte ranges of the slot
 * (offsets, bytes) to device addresses dsts on it, and record *consumed*. */
int tq_cuda_take(tq_backend *backend, int slot, void *stream, int n, const size_t *offsets, const size_t *bytes,
                 const uint64_t *dsts, char *err, size_t errlen);

/* Device producer: make `stream` wait until the slot's last reader is done,
 * copy n ranges from device addresses srcs into the slot, record *filled*. */
int tq_cuda_put_from_device(tq_backend *backend, int slot, void *stream, int n, const size_t *offsets,
                            const size_t *bytes, const uint64_t *srcs, char *err, size_t errlen);

/* Page-locks host memory so that puts from it go straight over the bus. */
int tq_cuda_register_host(tq_backend *backend, void *ptr, size_t bytes, char *err, size_t errlen);
int tq_cuda_unregister_host(tq_backend *backend, void *ptr, char *err, size_t errlen);
/* 1 when [ptr, ptr + bytes) lies in memory registered with this backend. */
int tq_cuda_is_registered(tq_backend *backend, const void *ptr, size_t bytes);

/* Bytes of device and pinned host memory all CUDA rings hold now. */
void tq_cuda_allocated(uint64_t *device_bytes, uint64_t *pinned_bytes);
/* Free and total memory of the device of cu_context. */
int tq_cuda_mem_info(void *cu_context, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);

/* The physical limit, for benchmarks: seconds per cuMemcpyHtoDAsync of
 * `bytes` from pinned memory on a non-blocking stream, mean of `repeats`. */
int tq_cuda_time_h2d(void *cu_context, size_t bytes, int repeats, double *seconds, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* TQ_CUDA_H */
