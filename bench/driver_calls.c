/* bench/driver_calls.c: a stand-in libcuda that counts and times the driver
 * calls of a process, for bench/driver_calls.py.  It is loaded as the engine's
 * driver (THEANO_QUEUE_LIBCUDA) and, named libcuda.so first on
 * LD_LIBRARY_PATH, as libgpuarray's; it links the real driver, so that the
 * functions it does not wrap resolve there.  Each wrapped call adds its count
 * and wall time to one of two tallies: the thread that last called
 * driver_calls_reset (the step's), or any other (the Feeder's, the copy
 * pool's). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *P;
typedef unsigned long long D;

#define MAX_FUNCTIONS 32
static const char *names[MAX_FUNCTIONS];
static unsigned long long counts[2][MAX_FUNCTIONS], nanoseconds[2][MAX_FUNCTIONS];
static pthread_t stepper;
static int have_stepper;

static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The real driver's function `name` (REAL_LIBCUDA: its path, set by the runner). */
static void *real(const char *name)
{
    static void *lib;
    if (!lib) {
        const char *path = getenv("REAL_LIBCUDA");
        lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    }
    return lib ? dlsym(lib, name) : NULL;
}

static void tally(int id, const char *name, uint64_t took)
{
    int other = !(have_stepper && pthread_equal(pthread_self(), stepper));
    names[id] = name;
    __atomic_add_fetch(&counts[other][id], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&nanoseconds[other][id], took, __ATOMIC_RELAXED);
}

#define WRAP(id, name, params, args)                                 \
    CUresult name params                                             \
    {                                                                \
        static CUresult(*fn) params;                                 \
        if (!fn)                                                     \
            fn = (CUresult(*) params)real(#name);                    \
        if (!fn)                                                     \
            return 999; /* CUDA_ERROR_UNKNOWN */                     \
        uint64_t began = now();                                      \
        CUresult rc = fn args;                                       \
        tally(id, #name, now() - began);                             \
        return rc;                                                   \
    }

WRAP(0, cuCtxPushCurrent_v2, (P c), (c))
WRAP(1, cuCtxPopCurrent_v2, (P * c), (c))
WRAP(2, cuCtxGetCurrent, (P * c), (c))
WRAP(3, cuEventCreate, (P * e, unsigned f), (e, f))
WRAP(4, cuEventDestroy_v2, (P e), (e))
WRAP(5, cuEventRecord, (P e, P s), (e, s))
WRAP(6, cuEventQuery, (P e), (e))
WRAP(7, cuEventSynchronize, (P e), (e))
WRAP(8, cuStreamWaitEvent, (P s, P e, unsigned f), (s, e, f))
WRAP(9, cuStreamSynchronize, (P s), (s))
WRAP(10, cuLaunchKernel,
     (P f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, P s,
      void **params, void **extra),
     (f, gx, gy, gz, bx, by, bz, shared, s, params, extra))
WRAP(11, cuMemcpyHtoDAsync_v2, (D dst, const void *src, size_t n, P s), (dst, src, n, s))
WRAP(12, cuMemcpyDtoDAsync_v2, (D dst, D src, size_t n, P s), (dst, src, n, s))
WRAP(13, cuMemcpyDtoHAsync_v2, (void *dst, D src, size_t n, P s), (dst, src, n, s))
WRAP(14, cuMemAlloc_v2, (D * d, size_t n), (d, n))
WRAP(15, cuMemFree_v2, (D d), (d))
WRAP(16, cuMemsetD8Async, (D d, unsigned char v, size_t n, P s), (d, v, n, s))

/* Zeroes the tallies; the calling thread is the step's from now on. */
void driver_calls_reset(void)
{
    memset(counts, 0, sizeof counts);
    memset(nanoseconds, 0, sizeof nanoseconds);
    stepper = pthread_self();
    have_stepper = 1;
}

/* One line per function and thread kind called since the reset: calls and
 * microseconds, each divided by `per` (the steps). */
int driver_calls_report(char *out, int size, double per)
{
    int used = 0;
    for (int other = 0; other < 2; other++)
        for (int id = 0; id < MAX_FUNCTIONS; id++)
            if (counts[other][id] && used < size - 128)
                used += snprintf(out + used, (size_t)(size - used), "  %-6s %-22s %6.2f calls %8.2f us\n",
                                 other ? "other" : "step", names[id], (double)counts[other][id] / per,
                                 (double)nanoseconds[other][id] / 1e3 / per);
    return used;
}
