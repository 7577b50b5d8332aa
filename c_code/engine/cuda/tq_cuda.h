/*
 * tq_cuda: the CUDA backend.  libcuda is loaded with dlopen when the first
 * CUDA ring is made, so the engine builds with gcc alone and runs without a
 * GPU.  Handles are passed as void* / uint64_t so no CUDA header is needed.
 *
 * Per slot: pinned staging (producers write it; every slot's is carved from
 * one shared block, tq_shm.h, page-locked with cuMemHostRegister so that
 * worker processes can map it), device memory (consumers read it), a *filled*
 * event recorded after the data reached the device and a *consumed* event
 * recorded on the consumer's stream after its last read.
 *
 *   host producer   before_write: host-waits on filled (staging free again)
 *                   publish: copy stream waits on consumed, copies host->device,
 *                            records filled                    (no host block)
 *   consumer        take: its stream waits on filled, copies device->device
 *                   into the consumer's buffers, records consumed
 *   device producer put_from_device: its stream waits on consumed, copies
 *                   device->device into the slot, records filled
 */
#ifndef TQ_CUDA_H
#define TQ_CUDA_H

#include "tq_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TQ_OK when libcuda loads and initialises, else TQ_ECUDA and why. */
tq_code tq_cuda_load(tq_error *err);
/* The CUcontext current in the calling thread. */
tq_code tq_cuda_current_context(void **cu_context, tq_error *err);

/* A backend whose slots live in `cu_context`; NULL (err set) on failure.
 * Everything else it does goes through the backend table (tq_backend.h). */
tq_backend *tq_cuda_backend_create(void *cu_context, tq_error *err);

/* The largest batch of an array dataset held in device memory whose gather
 * the consumer queues on its own stream when it takes the batch (into the
 * memory it reads, with no driver call in the producer's thread); larger
 * batches are gathered on the copy stream, beside the step.  Returns the
 * previous value (for benchmarks that compare the two). */
size_t tq_cuda_set_held_in_step_max(size_t bytes);

/* Bytes of device and pinned host memory all CUDA rings hold now. */
void tq_cuda_allocated(uint64_t *device_bytes, uint64_t *pinned_bytes);
/* Free and total memory of the device of cu_context. */
tq_code tq_cuda_mem_info(void *cu_context, size_t *free_bytes, size_t *total_bytes, tq_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TQ_CUDA_H */
