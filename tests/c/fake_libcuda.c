/* A stand-in for libcuda.so.1 with the driver functions theano_queue.tools.probe
 * and the engine's CUDA backend (c_code/engine/cuda/tq_cuda*.c) call, on host memory, so
 * that the probe, the CLI's GPU paths, the backend's device puts and its device
 * gather run (and their resource handling is checked) on a machine without a
 * GPU.  Built as libcuda.so.1 by tests/support/fake_cuda.py (and tests/standin/test_gather_fake.py)
 * and found through THEANO_QUEUE_LIBCUDA or LD_LIBRARY_PATH.
 *
 * Work runs at once, in the calling thread, unless FAKE_CUDA_ASYNC is set:
 * then streams it made run their work later, in order, on threads of their
 * own (fake_libcuda_streams.c).  Contexts are handles: 0x1000 + n is device n's
 * primary context, 0x2000 + n another context on device n.  "Device" memory
 * is host memory that cuPointerGetAttribute knows (its context and device);
 * page-locked host memory (cuMemHostAlloc, cuMemHostRegister) is known as
 * host memory, mapped at its own address.  As the driver does, it refuses a
 * second registration of any byte, and a device-to-host copy into a buffer
 * that starts in registered memory and ends past it (or into memory
 * registered read-only).  A module offers the kernel its image names
 * (c_code/generated/tq_strided_ptx.h's or tq_gather_rows_ptx.h's); cuLaunchKernel runs
 * it on the host.
 *
 *   FAKE_CUDA_DEVICES=n     devices (default 1; 0 makes cuInit fail with
 *                           CUDA_ERROR_NO_DEVICE, as a driver without a GPU does)
 *   FAKE_CUDA_FAIL=cuName   that call fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_REGISTER_LIMIT=bytes  cuMemHostRegister of more fails with
 *                           CUDA_ERROR_OUT_OF_MEMORY (too large to page-lock)
 *   FAKE_CUDA_FREE=bytes    the free device memory cuMemGetInfo reports
 *                           (default 15 GiB of 16)
 *   FAKE_CUDA_REPORT=path   at exit, writes "retained pushed host device streams
 *                           registered modules graphs" still held: all zero when
 *                           the caller released all (tests/support/fake_cuda.py's NOTHING_HELD)
 *   FAKE_CUDA_LOG=path      appends one line per stream-ordering call:
 *                           "record <stream>", "wait <stream>", "upload <stream>"
 *                           (host to device), "copy <stream>" (device to
 *                           device), "peer <stream>", "batch <stream>"
 *                           (cuMemcpyBatchAsync), "kernel <stream>",
 *                           "waitvalue <stream>" and "writevalue <stream>"
 *                           (the stream memory operations), "sync"
 *                           (cuEventSynchronize) and "query" (cuEventQuery);
 *                           streams as numbers, none for the NULL stream
 *   FAKE_CUDA_ASYNC=us      streams made by cuStreamCreate queue their work
 *                           and run it on their own threads, pausing up to
 *                           `us` microseconds before each piece
 *   FAKE_CUDA_NOT_READY=1   cuEventQuery says CUDA_ERROR_NOT_READY (a copy that
 *                           is still running), whatever was recorded
 *   FAKE_CUDA_LOG_THREADS=1 each FAKE_CUDA_LOG line ends with " main" when the
 *                           process's main thread made the call, else " other"
 * fake_cuda_calls("cuName") counts the calls made so far to a function that
 * checks FAKE_CUDA_FAIL, fake_cuda_events() the events held now.
 *
 * Built with -DFAKE_CUDA_BEFORE_12_8 it is a driver older than the batch copy.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int CUresult;
#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OUT_OF_MEMORY 2
#define ERR_NOT_INITIALIZED 3
#define ERR_NO_DEVICE 100
#define ERR_INVALID_PTX 218
#define ERR_INVALID_HANDLE 400
#define ERR_NOT_FOUND 500
#define ERR_HOST_MEMORY_ALREADY_REGISTERED 712
#define ERR_HOST_MEMORY_NOT_REGISTERED 713
#define ERR_MISALIGNED_ADDRESS 716
#define ERR_NOT_SUPPORTED 801

/* What is held now (updated from any thread), and device gathers (batch copies, gather kernels) run so far. */
static int initialised, retained, pushed, host_allocs, device_allocs, streams, registered, modules, gathers, events,
    kernel_gathers, graphs;

#define COUNT(counter, delta) __atomic_add_fetch(&(counter), (delta), __ATOMIC_RELAXED)

/* For tests/c/test_gather.c: ranges registered now, and batch copies run
 * so far (device gathers). */
int fake_cuda_registered(void) { return __atomic_load_n(&registered, __ATOMIC_RELAXED); }
int fake_cuda_gathers(void) { return __atomic_load_n(&gathers, __ATOMIC_RELAXED); }
int fake_cuda_events(void) { return __atomic_load_n(&events, __ATOMIC_RELAXED); }
int fake_cuda_kernel_gathers(void) { return __atomic_load_n(&kernel_gathers, __ATOMIC_RELAXED); }
/* Device allocations held now (cuMemAlloc less cuMemFree). */
int fake_cuda_device_allocs(void) { return __atomic_load_n(&device_allocs, __ATOMIC_RELAXED); }
/* Bytes the batch copies moved so far. */
static unsigned long long batch_bytes;
unsigned long long fake_cuda_batch_bytes(void) { return __atomic_load_n(&batch_bytes, __ATOMIC_RELAXED); }

static int devices(void)
{
    const char *n = getenv("FAKE_CUDA_DEVICES");
    return n ? atoi(n) : 1;
}

/* Calls so far by function name, for tests that count a path's driver calls. */
static struct {
    const char *name;
    int count;
} calls[64];
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;

int fake_cuda_calls(const char *name)
{
    int count = 0;
    pthread_mutex_lock(&calls_lock);
    for (int i = 0; i < 64 && calls[i].name; i++)
        count = strcmp(calls[i].name, name) == 0 ? calls[i].count : count;
    pthread_mutex_unlock(&calls_lock);
    return count;
}

/* Counts the call; 1 when FAKE_CUDA_FAIL names it. */
static int failing(const char *name)
{
    const char *fail = getenv("FAKE_CUDA_FAIL");
    pthread_mutex_lock(&calls_lock);
    int i = 0;
    while (i < 63 && calls[i].name && strcmp(calls[i].name, name))
        i++;
    calls[i].name = name;
    calls[i].count++;
    pthread_mutex_unlock(&calls_lock);
    return fail && strcmp(fail, name) == 0;
}

#define ENTER(name)                     \
    do {                                \
        if (!initialised)               \
            return ERR_NOT_INITIALIZED; \
        if (failing(name))              \
            return ERR_OUT_OF_MEMORY;   \
    } while (0)

static void report(void)
{
    const char *path = getenv("FAKE_CUDA_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%d %d %d %d %d %d %d %d\n", retained, pushed, host_allocs, device_allocs, streams, registered,
                modules, graphs);
        fclose(f);
    }
}

static void log_line(const char *what, const void *stream)
{
    const char *path = getenv("FAKE_CUDA_LOG");
    const char *who = !getenv("FAKE_CUDA_LOG_THREADS") ? "" : syscall(SYS_gettid) == getpid() ? " main" : " other";
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        if (stream)
            fprintf(f, "%s %llu%s\n", what, (unsigned long long)(uintptr_t)stream, who);
        else
            fprintf(f, "%s%s\n", what, who);
        fclose(f);
    }
}

/* ---- the driver, its errors and its devices ------------------------------------------ */

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

/* Any other code (CUDA_ERROR_INVALID_VALUE among them) is CUDA_ERROR_FAKE,
 * which tests/standin/test_probe.py expects of a bad device ordinal. */
CUresult cuGetErrorName(CUresult rc, const char **name)
{
    *name = rc == ERR_NO_DEVICE                        ? "CUDA_ERROR_NO_DEVICE"
            : rc == ERR_OUT_OF_MEMORY                  ? "CUDA_ERROR_OUT_OF_MEMORY"
            : rc == ERR_INVALID_PTX                    ? "CUDA_ERROR_INVALID_PTX"
            : rc == ERR_INVALID_HANDLE                 ? "CUDA_ERROR_INVALID_HANDLE"
            : rc == ERR_NOT_FOUND                      ? "CUDA_ERROR_NOT_FOUND"
            : rc == ERR_HOST_MEMORY_ALREADY_REGISTERED ? "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
            : rc == ERR_HOST_MEMORY_NOT_REGISTERED     ? "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
            : rc == ERR_MISALIGNED_ADDRESS             ? "CUDA_ERROR_MISALIGNED_ADDRESS"
            : rc == ERR_NOT_SUPPORTED                  ? "CUDA_ERROR_NOT_SUPPORTED"
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

/* ---- contexts ------------------------------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(void **ctx, int device)
{
    ENTER("cuDevicePrimaryCtxRetain");
    if (device < 0 || device >= devices())
        return ERR_INVALID_VALUE;
    *ctx = (void *)(size_t)(0x1000 + device);
    COUNT(retained, 1);
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device)
{
    (void)device;
    COUNT(retained, -1);
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
    COUNT(pushed, 1);
    return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx)
        *ctx = current_ctx();
    if (ctx_depth)
        ctx_depth--;
    COUNT(pushed, -1);
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

/* Streams and events: work runs at once, or later on the streams' own threads (FAKE_CUDA_ASYNC). */
#include "fake_libcuda_streams.c"

/* ---- memory ---------------------------------------------------------------------------- */

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    ENTER("cuMemGetInfo_v2");
    const char *free_env = getenv("FAKE_CUDA_FREE");
    *free_bytes = free_env ? (size_t)strtoull(free_env, NULL, 10) : (size_t)15 << 30;
    *total = (size_t)16 << 30;
    return OK;
}

/* What the driver knows of memory: device allocations (with the context
 * current when they were made), page-locked allocations and registered host
 * ranges (host, context NULL). */
#define MAX_RANGES 4096
enum range_kind { DEVICE_MEMORY = 1, PINNED_ALLOCATION, REGISTERED_HOST };
static struct {
    char *start;
    size_t bytes;
    void *ctx;
    enum range_kind kind;
    int read_only;         /* registered with CU_MEMHOSTREGISTER_READ_ONLY */
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: never the same twice */
} ranges[MAX_RANGES];
static unsigned long long last_id;
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;

/* Called with ranges_lock held. */
static int add_range(void *start, size_t bytes, void *ctx, enum range_kind kind)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (!ranges[i].start) {
            ranges[i].start = start;
            ranges[i].bytes = bytes;
            ranges[i].ctx = ctx;
            ranges[i].kind = kind;
            ranges[i].read_only = 0;
            ranges[i].id = ++last_id;
            return 1;
        }
    return 0;
}

/* The range starting at `start` of that kind (-1 if none); ranges_lock held. */
static int range_at(const void *start, enum range_kind kind)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (ranges[i].start == start && ranges[i].kind == kind)
            return i;
    return -1;
}

/* The range holding p, device memory first (the stand-in's "device" memory
 * is host memory, which a caller could register too); ranges_lock held. */
static int find_range(const char *p)
{
    int host = -1;
    for (int i = 0; i < MAX_RANGES; i++)
        if (ranges[i].start && p >= ranges[i].start && p < ranges[i].start + ranges[i].bytes) {
            if (ranges[i].kind == DEVICE_MEMORY)
                return i;
            host = host < 0 ? i : host;
        }
    return host;
}

/* 1 when [p, p + bytes) overlaps registered host memory, as the driver
 * refuses to register twice; ranges_lock held. */
static int overlaps_registered(const char *p, size_t bytes)
{
    for (int i = 0; i < MAX_RANGES; i++)
        if (ranges[i].start && ranges[i].kind == REGISTERED_HOST && p < ranges[i].start + ranges[i].bytes &&
            ranges[i].start < p + bytes)
            return 1;
    return 0;
}

static CUresult track(void *start, size_t bytes, void *ctx, enum range_kind kind)
{
    pthread_mutex_lock(&ranges_lock);
    int added = add_range(start, bytes, ctx, kind);
    pthread_mutex_unlock(&ranges_lock);
    return added ? OK : ERR_OUT_OF_MEMORY;
}

/* 1 when a range of that kind started at `start` (and is forgotten now). */
static int untrack(const void *start, enum range_kind kind)
{
    pthread_mutex_lock(&ranges_lock);
    int i = range_at(start, kind);
    if (i >= 0)
        ranges[i].start = NULL;
    pthread_mutex_unlock(&ranges_lock);
    return i >= 0;
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    ENTER("cuMemHostAlloc");
    (void)flags;
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return ERR_OUT_OF_MEMORY;
    if (track(*p, bytes ? bytes : 1, NULL, PINNED_ALLOCATION) != OK) {
        free(*p);
        return ERR_OUT_OF_MEMORY;
    }
    COUNT(host_allocs, 1);
    return OK;
}

CUresult cuMemFreeHost(void *p)
{
    if (!p)
        return OK;
    synchronize_streams(NULL); /* no queued copy may still read it */
    if (!untrack(p, PINNED_ALLOCATION))
        return ERR_INVALID_VALUE;
    free(p);
    COUNT(host_allocs, -1);
    return OK;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    ENTER("cuMemAlloc_v2");
    void *mem = malloc(bytes ? bytes : 1);
    if (!mem)
        return ERR_OUT_OF_MEMORY;
    if (track(mem, bytes ? bytes : 1, current_ctx() ? current_ctx() : (void *)0x1000, DEVICE_MEMORY) != OK) {
        free(mem);
        return ERR_OUT_OF_MEMORY;
    }
    *p = (unsigned long long)(uintptr_t)mem;
    COUNT(device_allocs, 1);
    return OK;
}

CUresult cuMemFree_v2(unsigned long long p)
{
    if (!p)
        return OK;
    synchronize_streams(NULL);
    if (!untrack((void *)(uintptr_t)p, DEVICE_MEMORY))
        return ERR_INVALID_VALUE;
    free((void *)(uintptr_t)p);
    COUNT(device_allocs, -1);
    return OK;
}

/* flags: 0x1 portable, 0x2 device map, 0x4 I/O memory, 0x8 read-only */
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    const char *limit = getenv("FAKE_CUDA_REGISTER_LIMIT");
    CUresult rc = OK;
    ENTER("cuMemHostRegister_v2");
    if (!p || !bytes || (flags & ~0xfu))
        return ERR_INVALID_VALUE;
    if (limit && bytes > (size_t)atoll(limit))
        return ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ranges_lock);
    if (overlaps_registered(p, bytes))
        rc = ERR_HOST_MEMORY_ALREADY_REGISTERED;
    else if (!add_range(p, bytes, NULL, REGISTERED_HOST))
        rc = ERR_OUT_OF_MEMORY;
    else
        ranges[range_at(p, REGISTERED_HOST)].read_only = (flags & 0x8) != 0;
    pthread_mutex_unlock(&ranges_lock);
    if (rc == OK)
        COUNT(registered, 1);
    return rc;
}

CUresult cuMemHostUnregister(void *p)
{
    synchronize_streams(NULL);
    if (!untrack(p, REGISTERED_HOST))
        return ERR_HOST_MEMORY_NOT_REGISTERED;
    COUNT(registered, -1);
    return OK;
}

/* Unified addressing: the device reads page-locked host memory at its own
 * address; other host memory it cannot reach. */
CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *p, unsigned int flags)
{
    ENTER("cuMemHostGetDevicePointer_v2");
    pthread_mutex_lock(&ranges_lock);
    int i = find_range(p);
    int host = i >= 0 && ranges[i].kind != DEVICE_MEMORY;
    pthread_mutex_unlock(&ranges_lock);
    if (flags || !host)
        return ERR_INVALID_VALUE;
    *d = (unsigned long long)(uintptr_t)p;
    return OK;
}

/* One attribute of the memory at ptr: 1 context, 2 memory type, 7 buffer ID,
 * 8 is managed, 9 device ordinal, 11 range start, 12 range size. */
static CUresult pointer_attribute(void *out, int attribute, unsigned long long ptr)
{
    pthread_mutex_lock(&ranges_lock);
    int i = find_range((const char *)(uintptr_t)ptr);
    int host = i >= 0 && ranges[i].kind != DEVICE_MEMORY;
    void *ctx = i >= 0 ? ranges[i].ctx : NULL;
    unsigned long long id = i >= 0 ? ranges[i].id : 0;
    char *start = i >= 0 ? ranges[i].start : NULL;
    size_t bytes = i >= 0 ? ranges[i].bytes : 0;
    pthread_mutex_unlock(&ranges_lock);
    if (i < 0)
        return ERR_INVALID_VALUE; /* as the driver says of pageable host memory */
    switch (attribute) {
    case 1: *(void **)out = ctx; return host ? ERR_INVALID_VALUE : OK;
    case 2: *(unsigned int *)out = host ? 1 : 2; return OK;
    case 7: *(unsigned long long *)out = id; return OK;
    case 8: *(unsigned int *)out = 0; return OK;
    case 9: *(int *)out = host ? 0 : device_of(ctx); return OK;
    case 11: *(unsigned long long *)out = (unsigned long long)(uintptr_t)start; return OK;
    case 12: *(size_t *)out = bytes; return OK;
    default: return ERR_INVALID_VALUE;
    }
}

CUresult cuPointerGetAttribute(void *out, int attribute, unsigned long long ptr)
{
    ENTER("cuPointerGetAttribute");
    return pointer_attribute(out, attribute, ptr);
}

/* As the driver: memory it does not know, or an attribute that does not
 * apply, reads as zero, and the call succeeds. */
CUresult cuPointerGetAttributes(unsigned int n, int *attributes, void **data, unsigned long long ptr)
{
    ENTER("cuPointerGetAttributes");
    for (unsigned int k = 0; k < n; k++) {
        size_t size = attributes[k] == 7 || attributes[k] == 11 || attributes[k] == 12 ? 8
                      : attributes[k] == 1                                             ? sizeof(void *)
                                                                                       : 4;
        if (pointer_attribute(data[k], attributes[k], ptr) != OK)
            memset(data[k], 0, size);
    }
    return OK;
}

/* ---- copies ------------------------------------------------------------------------------- */

/* 1 when the driver would refuse [p, p + bytes) as a copy's host
 * destination: it starts in page-locked memory and ends past it, or the
 * memory is registered read-only (CUDA_ERROR_INVALID_VALUE, as seen on an
 * H200 when registered ranges were rounded out to whole pages). */
static int bad_host_destination(const char *p, size_t bytes)
{
    int bad = 0;
    pthread_mutex_lock(&ranges_lock);
    for (int i = 0; i < MAX_RANGES && !bad; i++)
        if (ranges[i].start && ranges[i].kind != DEVICE_MEMORY && p >= ranges[i].start &&
            p < ranges[i].start + ranges[i].bytes)
            bad = p + bytes > ranges[i].start + ranges[i].bytes || ranges[i].read_only;
    pthread_mutex_unlock(&ranges_lock);
    return bad;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyDtoHAsync_v2");
    if (bad_host_destination(dst, bytes))
        return ERR_INVALID_VALUE;
    do_copy(stream, dst, (const void *)(uintptr_t)src, bytes);
    return OK;
}

CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyDtoDAsync_v2");
    log_line("copy", stream);
    do_copy(stream, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return OK;
}

CUresult cuMemcpyPeerAsync(unsigned long long dst, void *dst_ctx, unsigned long long src, void *src_ctx, size_t bytes,
                           void *stream)
{
    ENTER("cuMemcpyPeerAsync");
    (void)dst_ctx, (void)src_ctx;
    log_line("peer", stream);
    do_copy(stream, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return OK;
}

#ifndef FAKE_CUDA_BEFORE_12_8
/* CUDA 13's batch copy; the backend asks for one attribute, stream order, for all. */
CUresult cuMemcpyBatchAsync_v2(unsigned long long *dsts, unsigned long long *srcs, size_t *sizes, size_t count,
                               void *attrs, size_t *attrs_idxs, size_t n_attrs, void *stream)
{
    ENTER("cuMemcpyBatchAsync_v2");
    if (!attrs || n_attrs != 1 || attrs_idxs[0] != 0 || *(int *)attrs != 1 /* in stream order */)
        return ERR_INVALID_VALUE;
    log_line("batch", stream);
    for (size_t i = 0; i < count; i++) {
        do_copy(stream, (void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
        COUNT(batch_bytes, sizes[i]);
    }
    COUNT(gathers, 1);
    return OK;
}
#endif

/* Stream capture, graphs and the calls a capture records, in their own file;
 * then the kernels' modules and launches. */
#include "fake_libcuda_graph.c"
#include "fake_libcuda_kernel.c"
