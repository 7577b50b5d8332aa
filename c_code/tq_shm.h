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

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *base;    /* page-aligned; NULL when none */
    size_t bytes;  /* a multiple of the page size */
    int fd;        /* close-on-exec; -1 when the mapping has no descriptor */
} tq_shm;

/* Maps at least `bytes` (rounded up to pages) of zeroed shared memory.
 * 0 on success; -1 with a message in err. */
int tq_shm_create(tq_shm *shm, size_t bytes, char *err, size_t errlen);
/* Unmaps and closes; does nothing on a zeroed or already destroyed tq_shm. */
void tq_shm_destroy(tq_shm *shm);
size_t tq_shm_page_size(void);

#ifdef __cplusplus
}
#endif
#endif /* TQ_SHM_H */
