/* A stand-in for libcuda.so.1 with the driver functions theano_queue.probe
 * calls, on host memory, so that the probe and the CLI's GPU paths run (and
 * their resource handling is checked) on a machine without a GPU.  Built as
 * libcuda.so.1 by tests/test_cli.py and found through LD_LIBRARY_PATH.
 *
 *   FAKE_CUDA_DEVICES=n     devices (default 1; 0 makes cuInit fail with
 *                           CUDA_ERROR_NO_DEVICE, as a driver without a GPU does)
 *   FAKE_CUDA_FAIL=cuName   that call fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_REPORT=path   at exit, writes "retained pushed host device streams"
 *                           still held: all zero when the caller released all
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

static int initialised, retained, pushed, host_allocs, device_allocs, streams;

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
        fprintf(f, "%d %d %d %d %d\n", retained, pushed, host_allocs, device_allocs, streams);
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
    *name = rc == ERR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : rc == ERR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
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
