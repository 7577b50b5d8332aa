/* tq_shm.c: shared staging memory (see tq_shm.h). */
#define _GNU_SOURCE
#include "tq_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

size_t tq_shm_page_size(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
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

int tq_shm_create(tq_shm *shm, size_t bytes, char *err, size_t errlen)
{
    size_t page = tq_shm_page_size();
    memset(shm, 0, sizeof *shm);
    shm->fd = -1;
    if (bytes == 0)
        bytes = page;
    if (bytes > SIZE_MAX - page) {
        snprintf(err, errlen, "shared staging: %zu bytes is too large", bytes);
        return -1;
    }
    bytes = (bytes + page - 1) / page * page;

    int fd = open_memfd();
    if (fd < 0)
        fd = open_unlinked_shm();
    void *base;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)bytes) != 0) {
            snprintf(err, errlen, "shared staging: could not size %zu bytes: %s", bytes, strerror(errno));
            close(fd);
            return -1;
        }
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
        /* Neither memfd nor POSIX shared memory: fork()ed children still share it. */
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "shared staging: could not map %zu bytes: %s", bytes, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    shm->base = base;
    shm->bytes = bytes;
    shm->fd = fd;
    return 0;
}

void tq_shm_destroy(tq_shm *shm)
{
    if (!shm->base) /* a zeroed struct has fd 0, which is not ours */
        return;
    munmap(shm->base, shm->bytes);
    if (shm->fd >= 0)
        close(shm->fd);
    shm->base = NULL;
    shm->bytes = 0;
    shm->fd = -1;
}
