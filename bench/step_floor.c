/* bench/step_floor.c: the driver calls of bench/step_floor.py's floors, made
 * by one C call a step, as the engine makes them: the floor then pays the
 * calls, not ctypes' conversions around each.  Built by step_floor.py (gcc),
 * loaded with ctypes; the driver is the library its path names. */
#include <dlfcn.h>
#include <stddef.h>

typedef int CUresult;
typedef void *H;                 /* any driver handle */
typedef unsigned long long DPTR; /* CUdeviceptr */

enum { FLOOR_UPLOAD = 1, FLOOR_QUERY = 2, FLOOR_WAIT = 4 };
#define CUDA_ERROR_NOT_READY 600

static CUresult (*PushCurrent)(H);
static CUresult (*PopCurrent)(H *);
static CUresult (*StreamWaitEvent)(H, H, unsigned);
static CUresult (*EventRecord)(H, H);
static CUresult (*EventQuery)(H);
static CUresult (*MemcpyHtoDAsync)(DPTR, const void *, size_t, H);

/* 0 once every function is found in `libcuda`, else -1. */
int floor_load(const char *libcuda)
{
    void *lib = dlopen(libcuda, RTLD_NOW);
    if (!lib)
        return -1;
    PushCurrent = (CUresult(*)(H))dlsym(lib, "cuCtxPushCurrent_v2");
    PopCurrent = (CUresult(*)(H *))dlsym(lib, "cuCtxPopCurrent_v2");
    StreamWaitEvent = (CUresult(*)(H, H, unsigned))dlsym(lib, "cuStreamWaitEvent");
    EventRecord = (CUresult(*)(H, H))dlsym(lib, "cuEventRecord");
    EventQuery = (CUresult(*)(H))dlsym(lib, "cuEventQuery");
    MemcpyHtoDAsync = (CUresult(*)(DPTR, const void *, size_t, H))dlsym(lib, "cuMemcpyHtoDAsync_v2");
    return PushCurrent && PopCurrent && StreamWaitEvent && EventRecord && EventQuery && MemcpyHtoDAsync ? 0 : -1;
}

/* The calls of one step, in ctx: with FLOOR_UPLOAD, the n components'
 * copies on `copy` after the last reader (consumed) and recorded as filled;
 * with FLOOR_QUERY, whether filled is done; with FLOOR_WAIT, `compute`
 * ordered after filled; always, consumed recorded on `compute`.  The
 * calls' error codes or-ed: 0 when every call succeeded. */
int floor_calls(H ctx, H compute, H copy, H filled, H consumed, int n, const DPTR *dst, void *const *src,
                const size_t *bytes, int what)
{
    CUresult rc = PushCurrent(ctx);
    if (what & FLOOR_UPLOAD) {
        rc |= StreamWaitEvent(copy, consumed, 0);
        for (int i = 0; i < n; i++)
            rc |= MemcpyHtoDAsync(dst[i], src[i], bytes[i], copy);
        rc |= EventRecord(filled, copy);
    }
    if (what & FLOOR_QUERY) {
        CUresult done = EventQuery(filled);
        if (done != CUDA_ERROR_NOT_READY)
            rc |= done;
    }
    if (what & FLOOR_WAIT)
        rc |= StreamWaitEvent(compute, filled, 0);
    rc |= EventRecord(consumed, compute);
    H popped;
    rc |= PopCurrent(&popped);
    return rc;
}
