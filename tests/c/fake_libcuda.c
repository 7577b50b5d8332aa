/* A stand-in for libcuda.so.1 with the driver functions theano_queue.probe
 * and the engine's CUDA backend (c_code/tq_cuda.c) call, on host memory, so
 * that the probe, the CLI's GPU paths, the backend's device puts and its
 * device gather run (and their resource handling is checked) on a machine
 * without a GPU.  Built as libcuda.so.1 by tests/fake_cuda.py and found
 * through THEANO_QUEUE_LIBCUDA (the probe) or LD_LIBRARY_PATH (the engine).
 *
 * Work runs at once, in the calling thread: streams and events only count.
 * Contexts are handles: 0x1000 + n is device n's primary context, 0x2000 + n
 * another context on device n.  "Device" memory is host memory that
 * cuPointerGetAttribute knows (its context and device); the kernels of
 * tq_cuda.c (strided copy, gather) are emulated by cuLaunchKernel.
 *
 *   FAKE_CUDA_DEVICES=n     devices (default 1; 0 makes cuInit fail with
 *                           CUDA_ERROR_NO_DEVICE, as a driver without a GPU does)
 *   FAKE_CUDA_FAIL=cuName   that call fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_REGISTER_LIMIT=bytes  cuMemHostRegister of more fails with
 *                           CUDA_ERROR_OUT_OF_MEMORY (too large to page-lock)
 *   FAKE_CUDA_REPORT=path   at exit, writes "retained pushed host device streams
 *                           registered modules" still held: all zero when the
 *                           caller released all
 *   FAKE_CUDA_LOG=path      appends one line per stream-ordering call:
 *                           "record <stream>", "wait <stream>", "copy", "kernel",
 *                           "sync" (cuEventSynchronize), with the copy stream and
 *                           the producers' streams as numbers
 */
#include <stdint.h>
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

/* Each thread's stack of current contexts. */
static __thread void *ctx_stack[64];
static __thread int ctx_depth;

static void *current_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

static int device_of(void *ctx) { return (int)((uintptr_t)ctx & 0xff); }

CUresult cuCtxPushCurrent_v2(void *ctx)
{
    ENTER("cuCtxPushCurrent_v2");
    if (ctx_depth == 64)
        return ERR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    pushed++;
    return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx)
        *ctx = current_ctx();
    if (ctx_depth)
        ctx_depth--;
    pushed--;
    return OK;
}

CUresult cuCtxGetCurrent(void **ctx)
{
    ENTER("cuCtxGetCurrent");
    *ctx = current_ctx();
    return OK;
}

CUresult cuCtxGetDevice(int *device)
{
    ENTER("cuCtxGetDevice");
    *device = current_ctx() ? device_of(current_ctx()) : 0;
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

/* What cuPointerGetAttribute knows: device allocations (with the context
 * current when they were made) and registered host memory (context NULL). */
#define MAX_RANGES 4096
static struct {
    char *start;
    size_t bytes;
    void *ctx;
    int host;
} ranges[MAX_RANGES];

static void add_range(void *start, size_t bytes, void *ctx, int host)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (!ranges[i].start) {
            ranges[i].start = start;
            ranges[i].bytes = bytes;
            ranges[i].ctx = ctx;
            ranges[i].host = host;
            return;
        }
}

static void drop_range(const void *start)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (ranges[i].start == start)
            ranges[i].start = NULL;
}

static int find_range(const char *p)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (ranges[i].start && p >= ranges[i].start && p < ranges[i].start + ranges[i].bytes)
            return i;
    return -1;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    ENTER("cuMemAlloc_v2");
    void *mem = malloc(bytes ? bytes : 1);
    *p = (unsigned long long)(size_t)mem;
    device_allocs += mem != NULL;
    if (mem)
        add_range(mem, bytes ? bytes : 1, current_ctx() ? current_ctx() : (void *)0x1000, 0);
    return mem ? OK : ERR_OUT_OF_MEMORY;
}

CUresult cuMemFree_v2(unsigned long long p)
{
    drop_range((void *)(size_t)p);
    free((void *)(size_t)p);
    device_allocs--;
    return OK;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    ENTER("cuMemHostRegister_v2");
    (void)flags;
    add_range(p, bytes, NULL, 1);
    return OK;
}

CUresult cuMemHostUnregister(void *p)
{
    drop_range(p);
    return OK;
}

/* attributes: 1 context, 2 memory type, 8 is managed, 9 device ordinal */
CUresult cuPointerGetAttribute(void *out, int attribute, unsigned long long ptr)
{
    ENTER("cuPointerGetAttribute");
    int i = find_range((const char *)(size_t)ptr);
    if (i < 0)
        return ERR_INVALID_VALUE; /* as the driver says of pageable host memory */
    switch (attribute) {
    case 1: *(void **)out = ranges[i].ctx; return ranges[i].host ? ERR_INVALID_VALUE : OK;
    case 2: *(unsigned int *)out = ranges[i].host ? 1 : 2; return OK;
    case 8: *(unsigned int *)out = 0; return OK;
    case 9: *(int *)out = ranges[i].host ? 0 : device_of(ranges[i].ctx); return OK;
    default: return ERR_INVALID_VALUE;
    }
}

static void log_line(const char *what, const void *stream)
{
    const char *path = getenv("FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        if (stream)
            fprintf(f, "%s %llu\n", what, (unsigned long long)(uintptr_t)stream);
        else
            fprintf(f, "%s\n", what);
        fclose(f);
    }
}

CUresult cuStreamWaitEvent(void *stream, void *event, unsigned int flags)
{
    ENTER("cuStreamWaitEvent");
    (void)event, (void)flags;
    log_line("wait", stream);
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
    (void)event;
    log_line("record", stream);
    return OK;
}

CUresult cuEventSynchronize(void *event)
{
    ENTER("cuEventSynchronize");
    (void)event;
    log_line("sync", NULL);
    return OK;
}

CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyDtoDAsync_v2");
    log_line("copy", stream);
    memcpy((void *)(size_t)dst, (const void *)(size_t)src, bytes);
    return OK;
}

CUresult cuMemcpyPeerAsync(unsigned long long dst, void *dst_ctx, unsigned long long src, void *src_ctx, size_t bytes,
                           void *stream)
{
    ENTER("cuMemcpyPeerAsync");
    (void)dst_ctx, (void)src_ctx;
    log_line("peer", stream);
    memcpy((void *)(size_t)dst, (const void *)(size_t)src, bytes);
    return OK;
}

/* ---- the strided-copy kernel (c_code/tq_strided.cu), emulated ---- */

struct strided_desc {
    long long shape[8], strides[8], n;
    int ndim, unit;
};

CUresult cuModuleLoadData(void **module, const void *image)
{
    ENTER("cuModuleLoadData");
    if (!strstr((const char *)image, ".entry tq_strided_copy"))
        return ERR_INVALID_VALUE;
    *module = malloc(1);
    return OK;
}

CUresult cuModuleGetFunction(void **fn, void *module, const char *name)
{
    ENTER("cuModuleGetFunction");
    if (strcmp(name, "tq_strided_copy"))
        return ERR_INVALID_VALUE;
    *fn = module;
    return OK;
}

CUresult cuModuleUnload(void *module)
{
    free(module);
    return OK;
}

CUresult cuLaunchKernel(void *fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, void *stream, void **params, void **extra)
{
    ENTER("cuLaunchKernel");
    (void)fn, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)extra;
    const char *src = *(const char **)params[0];
    char *dst = *(char **)params[1];
    const struct strided_desc *d = params[2];
    log_line("kernel", stream);
    for (long long i = 0; i < d->n; i++) {
        long long rest = i, offset = 0;
        for (int k = d->ndim - 1; k >= 0; k--) {
            offset += (rest % d->shape[k]) * d->strides[k];
            rest /= d->shape[k];
        }
        if ((uintptr_t)(src + offset) % (unsigned)d->unit)
            return 716; /* CUDA_ERROR_MISALIGNED_ADDRESS */
        memcpy(dst + i * d->unit, src + offset, (size_t)d->unit);
    }
    return OK;
}

CUresult cuStreamCreate(void **stream, unsigned int flags)
{
    ENTER("cuStreamCreate");
    (void)flags;
    *stream = malloc(16); /* never 0x1 or 0x2, the default streams' handles */
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
