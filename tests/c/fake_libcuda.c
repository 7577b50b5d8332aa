/* A stand-in for libcuda.so.1 with the driver functions theano_queue.probe
 * and the engine's CUDA backend call, on host memory, so that the probe, the
 * CLI's GPU paths and the backend's device gather run (and their resource
 * handling is checked) on a machine without a GPU.  Built as libcuda.so.1 by
 * tests/fake_cuda.py and found through THEANO_QUEUE_LIBCUDA (the probe) or
 * LD_LIBRARY_PATH (the engine).  Copies and kernels run at once, on the
 * calling thread; streams and events order nothing.
 *
 *   FAKE_CUDA_DEVICES=n     devices (default 1; 0 makes cuInit fail with
 *                           CUDA_ERROR_NO_DEVICE, as a driver without a GPU does)
 *   FAKE_CUDA_FAIL=cuName   that call fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_REGISTER_LIMIT=bytes  cuMemHostRegister of more fails with
 *                           CUDA_ERROR_OUT_OF_MEMORY (too large to page-lock)
 *   FAKE_CUDA_REPORT=path   at exit, writes "retained pushed host device streams
 *                           registered modules" still held: all zero when the
 *                           caller released all
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define OK 0
#define ERR_OUT_OF_MEMORY 2
#define ERR_NOT_INITIALIZED 3
#define ERR_INVALID_VALUE 1
#define ERR_NO_DEVICE 100
#define ERR_NOT_SUPPORTED 801
#define ERR_MISALIGNED_ADDRESS 716

static int initialised, retained, pushed, host_allocs, device_allocs, streams, registered, modules, gathers;

/* For tests/c/test_gather.c: ranges registered now, and kernels and batch
 * copies run so far (device gathers). */
int fake_cuda_registered(void) { return registered; }
int fake_cuda_gathers(void) { return gathers; }

static int devices(void)
{
    const char *n = getenv("FAKE_CUDA_DEVICES");
    return n ? atoi(n) : 1;
}

static int failing(const char *name)
{
    const char *fail = getenv("FAKE_CUDA_FAIL");
    return fail && strcmp(fail, name) == 0;
}

#define ENTER(name)                          \
    do {                                     \
        if (!initialised)                    \
            return ERR_NOT_INITIALIZED;      \
        if (failing(name))                   \
            return ERR_OUT_OF_MEMORY;        \
    } while (0)

static void report(void)
{
    const char *path = getenv("FAKE_CUDA_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%d %d %d %d %d %d %d\n", retained, pushed, host_allocs, device_allocs, streams, registered, modules);
        fclose(f);
    }
}

CUresult cuInit(unsigned int flags)
{
    (void)flags;
    if (devices() == 0)
        return ERR_NO_DEVICE;
    if (!initialised)
        atexit(report);
    initialised = 1;
    return OK;
}

CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return OK;
}

CUresult cuGetErrorName(CUresult rc, const char **name)
{
    *name = rc == ERR_NO_DEVICE                ? "CUDA_ERROR_NO_DEVICE"
            : rc == ERR_OUT_OF_MEMORY          ? "CUDA_ERROR_OUT_OF_MEMORY"
            : rc == ERR_MISALIGNED_ADDRESS     ? "CUDA_ERROR_MISALIGNED_ADDRESS"
            : rc == ERR_NOT_SUPPORTED          ? "CUDA_ERROR_NOT_SUPPORTED"
                                               : "CUDA_ERROR_FAKE";
    return OK;
}

CUresult cuGetErrorString(CUresult rc, const char **text)
{
    *text = rc == ERR_NO_DEVICE ? "no CUDA-capable device is detected" : "fake failure";
    return OK;
}

CUresult cuDeviceGetCount(int *count)
{
    ENTER("cuDeviceGetCount");
    *count = devices();
    return OK;
}

CUresult cuDeviceGet(int *device, int ordinal)
{
    ENTER("cuDeviceGet");
    if (ordinal < 0 || ordinal >= devices())
        return ERR_INVALID_VALUE;
    *device = ordinal;
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, int device)
{
    ENTER("cuDeviceGetName");
    snprintf(name, (size_t)len, "Fake GPU %d", device);
    return OK;
}

CUresult cuDeviceGetPCIBusId(char *bus, int len, int device)
{
    ENTER("cuDeviceGetPCIBusId");
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + device);
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int device)
{
    ENTER("cuDeviceTotalMem_v2");
    (void)device;
    *bytes = (size_t)16 << 30;
    return OK;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device)
{
    ENTER("cuDeviceGetAttribute");
    (void)device;
    *value = attribute == 40 ? 3 : attribute == 75 ? 9 : 0;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int device)
{
    ENTER("cuDevicePrimaryCtxRetain");
    if (device < 0 || device >= devices())
        return ERR_INVALID_VALUE;
    *ctx = (void *)(size_t)(0x1000 + device);
    retained++;
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device)
{
    (void)device;
    retained--;
    return OK;
}

CUresult cuCtxPushCurrent_v2(void *ctx)
{
    ENTER("cuCtxPushCurrent_v2");
    (void)ctx;
    pushed++;
    return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx)
        *ctx = NULL;
    pushed--;
    return OK;
}

CUresult cuCtxGetDevice(int *device)
{
    ENTER("cuCtxGetDevice");
    *device = 0;
    return OK;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    ENTER("cuMemGetInfo_v2");
    *free_bytes = (size_t)15 << 30;
    *total = (size_t)16 << 30;
    return OK;
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    ENTER("cuMemHostAlloc");
    (void)flags;
    *p = malloc(bytes);
    host_allocs += *p != NULL;
    return *p ? OK : ERR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p)
{
    free(p);
    host_allocs--;
    return OK;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    ENTER("cuMemAlloc_v2");
    void *mem = malloc(bytes);
    *p = (unsigned long long)(size_t)mem;
    device_allocs += mem != NULL;
    return mem ? OK : ERR_OUT_OF_MEMORY;
}

CUresult cuMemFree_v2(unsigned long long p)
{
    free((void *)(size_t)p);
    device_allocs--;
    return OK;
}

CUresult cuStreamCreate(void **stream, unsigned int flags)
{
    ENTER("cuStreamCreate");
    (void)flags;
    *stream = malloc(1);
    streams++;
    return OK;
}

CUresult cuStreamDestroy_v2(void *stream)
{
    free(stream);
    streams--;
    return OK;
}

CUresult cuStreamSynchronize(void *stream)
{
    ENTER("cuStreamSynchronize");
    (void)stream;
    return OK;
}

CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyHtoDAsync_v2");
    (void)stream;
    memcpy((void *)(size_t)dst, src, bytes);
    return OK;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyDtoHAsync_v2");
    (void)stream;
    memcpy(dst, (const void *)(size_t)src, bytes);
    return OK;
}

/* ---- what the engine's CUDA backend calls (c_code/tq_cuda.c) ---------------------- */

CUresult cuCtxGetCurrent(void **ctx)
{
    ENTER("cuCtxGetCurrent");
    *ctx = (void *)(size_t)0x1000;
    return OK;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    const char *limit = getenv("FAKE_CUDA_REGISTER_LIMIT");
    ENTER("cuMemHostRegister_v2");
    (void)p;
    (void)flags;
    if (limit && bytes > (size_t)atoll(limit))
        return ERR_OUT_OF_MEMORY;
    registered++;
    return OK;
}

CUresult cuMemHostUnregister(void *p)
{
    (void)p;
    registered--;
    return OK;
}

/* Unified addressing: the device reads host memory at its own address. */
CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *p, unsigned int flags)
{
    ENTER("cuMemHostGetDevicePointer_v2");
    (void)flags;
    *d = (unsigned long long)(size_t)p;
    return OK;
}

CUresult cuStreamWaitEvent(void *stream, void *event, unsigned int flags)
{
    ENTER("cuStreamWaitEvent");
    (void)stream, (void)event, (void)flags;
    return OK;
}

CUresult cuEventCreate(void **event, unsigned int flags)
{
    ENTER("cuEventCreate");
    (void)flags;
    *event = malloc(1);
    return OK;
}

CUresult cuEventDestroy_v2(void *event)
{
    free(event);
    return OK;
}

CUresult cuEventRecord(void *event, void *stream)
{
    ENTER("cuEventRecord");
    (void)event, (void)stream;
    return OK;
}

CUresult cuEventSynchronize(void *event)
{
    ENTER("cuEventSynchronize");
    (void)event;
    return OK;
}

CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyDtoDAsync_v2");
    (void)stream;
    memcpy((void *)(size_t)dst, (const void *)(size_t)src, bytes);
    return OK;
}

/* A module is the PTX it was given; a function, the word size of the gather
 * kernel it names (tq_gather_w16 ... tq_gather_w1). */
CUresult cuModuleLoadData(void **module, const void *ptx)
{
    ENTER("cuModuleLoadData");
    if (!strstr(ptx, "tq_gather_w16"))
        return ERR_INVALID_VALUE;
    *module = malloc(1);
    modules++;
    return OK;
}

CUresult cuModuleUnload(void *module)
{
    free(module);
    modules--;
    return OK;
}

static size_t words[] = {16, 8, 4, 2, 1};

CUresult cuModuleGetFunction(void **function, void *module, const char *name)
{
    ENTER("cuModuleGetFunction");
    (void)module;
    for (int i = 0; i < 5; i++) {
        char expected[32];
        snprintf(expected, sizeof expected, "tq_gather_w%zu", words[i]);
        if (strcmp(name, expected) == 0) {
            *function = &words[i];
            return OK;
        }
    }
    return ERR_INVALID_VALUE;
}

/* The gather kernel, on the host: the parameters of c_code/tq_cuda.c's
 * kernel, and every word it reads or writes aligned to its size, as a GPU
 * requires (CUDA_ERROR_MISALIGNED_ADDRESS otherwise). */
CUresult cuLaunchKernel(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params, void **extra)
{
    ENTER("cuLaunchKernel");
    (void)stream, (void)extra, (void)shared;
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return ERR_INVALID_VALUE;
    size_t word = *(size_t *)function;
    char *dst = *(char **)params[0];
    const char *src = *(const char **)params[1];
    long long stride = *(long long *)params[2];
    unsigned long long n_words = *(unsigned long long *)params[3];
    const long long *idx = *(const long long **)params[4];
    long long rows = *(long long *)params[5];
    for (long long r = 0; r < rows; r++) {
        const char *from = src + idx[r] * stride;
        char *to = dst + (size_t)r * n_words * word;
        if ((size_t)from % word || (size_t)to % word)
            return ERR_MISALIGNED_ADDRESS;
        memcpy(to, from, n_words * word);
    }
    gathers++;
    return OK;
}

/* Built with -DFAKE_CUDA_BEFORE_12_8: a driver older than the batch copy. */
#ifndef FAKE_CUDA_BEFORE_12_8
CUresult cuMemcpyBatchAsync_v2(unsigned long long *dsts, unsigned long long *srcs, size_t *sizes, size_t count,
                               void *attrs, size_t *attrs_idxs, size_t n_attrs, void *stream)
{
    ENTER("cuMemcpyBatchAsync_v2");
    (void)stream;
    if (!attrs || n_attrs != 1 || attrs_idxs[0] != 0 || *(int *)attrs != 1 /* in stream order */)
        return ERR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        memcpy((void *)(size_t)dsts[i], (const void *)(size_t)srcs[i], sizes[i]);
    gathers++;
    return OK;
}
#endif
