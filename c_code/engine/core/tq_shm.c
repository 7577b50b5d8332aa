/* tq_shm.c: shared staging memory (see tq_shm.h). */
#define _GNU_SOURCE
#include "tq_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

static size_t page_size(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

/* bytes rounded up to whole pages; 0 when that overflows. */
static size_t page_round(size_t bytes)
{
    size_t page = page_size();
    if (bytes > SIZE_MAX - page)
        return 0;
    return (bytes + page - 1) / page * page;
}

/* memfd_create through syscall(): older glibc has no wrapper. */
static int open_memfd(void)
{
#ifdef SYS_memfd_create
    return (int)syscall(SYS_memfd_create, "theano_queue-staging", MFD_CLOEXEC);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* A POSIX shared-memory object, unlinked at once so that no name outlives us. */
static int open_unlinked_shm(void)
{
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int attempt = 0; attempt < 16; attempt++) {
        char name[96];
        snprintf(name, sizeof name, "/theano_queue-%ld-%u-%ld", (long)getpid(),
                 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED), (long)ts.tv_nsec);
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            shm_unlink(name);
            fcntl(fd, F_SETFD, FD_CLOEXEC);
            return fd;
        }
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* Maps `bytes` (a multiple of the page size) of zeroed shared memory. */
static tq_code map_block(tq_shm *shm, size_t bytes, tq_error *err)
{
    int fd = open_memfd();
    if (fd < 0)
        fd = open_unlinked_shm();
    void *base;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)bytes) != 0) {
            int e = errno;
            close(fd);
            return tq_set_error(err, TQ_ENOMEM, "could not size a shared block of %zu bytes: %s", bytes, strerror(e));
        }
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
        /* Neither memfd nor POSIX shared memory: fork()ed children still share it. */
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (base == MAP_FAILED) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return tq_set_error(err, TQ_ENOMEM, "could not map a shared block of %zu bytes: %s", bytes, strerror(e));
    }
    shm->base = base;
    shm->bytes = bytes;
    shm->fd = fd;
    return TQ_OK;
}

tq_code tq_shm_create_slots(tq_shm *shm, int capacity, int spares, size_t slot_bytes, tq_error *err)
{
    tq_error why;
    int slots = capacity + spares;
    size_t stride = page_round(slot_bytes);
    memset(shm, 0, sizeof *shm);
    shm->fd = -1;
    if (capacity < 1 || spares < 0 || !stride || stride > SIZE_MAX / (size_t)slots)
        tq_set_error(&why, TQ_ENOMEM, "more bytes than memory has");
    else if (!(shm->slot = calloc((size_t)slots, sizeof *shm->slot)))
        tq_set_error(&why, TQ_ENOMEM, "no room for their table");
    else if (map_block(shm, stride * (size_t)slots, &why) == TQ_OK) {
        shm->n_slots = slots;
        for (int i = 0; i < slots; i++)
            shm->slot[i] = (char *)shm->base + (size_t)i * stride;
        return TQ_OK;
    }
    free(shm->slot);
    shm->slot = NULL;
    if (spares)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for %d slots and %d spare blocks of %zu bytes (%s)",
                            capacity, spares, slot_bytes, why.message);
    return tq_set_error(err, TQ_ENOMEM, "out of host memory for %d slots of %zu bytes of staging (%s)", capacity,
                        slot_bytes, why.message);
}

void tq_shm_swap_slots(tq_shm *shm, int a, int b)
{
    void *t = shm->slot[a];
    shm->slot[a] = shm->slot[b];
    shm->slot[b] = t;
}

void tq_shm_destroy(tq_shm *shm)
{
    if (!shm->base) /* a zeroed struct has fd 0, which is not ours */
        return;
    munmap(shm->base, shm->bytes);
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm->slot);
    memset(shm, 0, sizeof *shm);
    shm->fd = -1;
}

tq_code tq_shm_dup_fd(const tq_shm *shm, int *fd, tq_error *err)
{
    if (!shm->base || shm->fd < 0)
        return tq_set_error(err, TQ_ESTATE,
                            "its staging has no file descriptor (this system has neither memfd_create nor POSIX "
                            "shared memory); only fork()ed processes share it");
    *fd = fcntl(shm->fd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0)
        return tq_set_error(err, TQ_ESTATE, "could not duplicate the staging's descriptor: %s", strerror(errno));
    return TQ_OK;
}
