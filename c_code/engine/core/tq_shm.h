/*
 * tq_shm: one block of host memory that other processes can map, for the
 * slots' staging.  Worker processes of a Feeder write samples straight into
 * the slots: they map the block through its file descriptor.
 *
 * The block is a memfd (Linux >= 3.17): anonymous, so nothing is left in
 * /dev/shm when a process is killed.  Without memfd_create it is a POSIX
 * shared-memory object unlinked as soon as it is made (/dev/shm holds its
 * name for microseconds); without that, an anonymous shared mapping with no
 * descriptor (fd = -1: children made by fork() still share it).
 * Plain C; no Python, no CUDA.
 */
#ifndef TQ_SHM_H
#define TQ_SHM_H

#include "tq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *base;   /* page-aligned; NULL when none */
    size_t bytes; /* a multiple of the page size */
    int fd;       /* close-on-exec; -1 when the mapping has no descriptor */
    int n_slots;
    void **slot; /* slot i's staging, page-aligned inside the block */
} tq_shm;

/* Maps one zeroed block for `capacity` slots and `spares` spare blocks (slot
 * entries capacity.. after them) of `slot_bytes`, each starting on a page.
 * TQ_ENOMEM (err set) when it cannot. */
tq_code tq_shm_create_slots(tq_shm *shm, int capacity, int spares, size_t slot_bytes, tq_error *err);
/* Exchanges the staging of slots a and b. */
void tq_shm_swap_slots(tq_shm *shm, int a, int b);
/* Unmaps and closes; does nothing on a zeroed or already destroyed tq_shm. */
void tq_shm_destroy(tq_shm *shm);
/* A new close-on-exec descriptor of the block, the caller's to close.
 * TQ_ESTATE (err set) when the block has none or none can be made. */
tq_code tq_shm_dup_fd(const tq_shm *shm, int *fd, tq_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TQ_SHM_H */
