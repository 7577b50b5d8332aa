/* tq_cuda_driver.c: loading the CUDA driver (tq_cuda_driver.h) and the calls
 * that need no backend: the current context, a device's free memory. */
#include "tq_cuda.h"
#include "tq_cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tq_cu_driver tq_cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[TQ_ERRLEN];

/* Out of memory is out of host memory for the calls that page-lock host
 * memory, out of device memory for the rest. */
static tq_code cuda_error_code(const char *call, CUresult rc)
{
    if (rc != CUDA_ERROR_OUT_OF_MEMORY)
        return TQ_ECUDA;
    return strncmp(call, "cuMemHost", 9) == 0 ? TQ_ENOMEM : TQ_EDEVMEM;
}

tq_code cuda_error(tq_error *err, const char *call, CUresult rc)
{
    const char *name = NULL, *text = NULL;
    if (tq_cu.GetErrorName)
        tq_cu.GetErrorName(rc, &name);
    if (tq_cu.GetErrorString)
        tq_cu.GetErrorString(rc, &text);
    return tq_set_error(err, cuda_error_code(call, rc), "%s: %s (%s)", call, name ? name : "CUDA_ERROR_UNKNOWN",
                        text ? text : "no description");
}

/* THEANO_QUEUE_LIBCUDA names another driver library: the tests' stand-in
 * (tests/c/fake_libcuda.c), as for theano_queue.tools.probe. */
static void load_driver(void)
{
    const char *name = getenv("THEANO_QUEUE_LIBCUDA");
    void *lib = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "the CUDA driver (libcuda.so.1) could not be loaded: %s", dlerror());
        return;
    }
#define TQ_SYMBOL(field, symbol, params) {(void **)&tq_cu.field, #symbol, 1},
#define TQ_OPTIONAL_SYMBOL(field, symbol, params) {(void **)&tq_cu.field, #symbol, 0},
    struct {
        void **slot;
        const char *name;
        int required;
    } symbols[] = {TQ_CUDA_FUNCTIONS(TQ_SYMBOL) TQ_CUDA_OPTIONAL_FUNCTIONS(TQ_OPTIONAL_SYMBOL)};
#undef TQ_OPTIONAL_SYMBOL
#undef TQ_SYMBOL
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(lib, symbols[i].name);
        if (!*symbols[i].slot && symbols[i].required) {
            snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s", symbols[i].name);
            tq_cu.Init = NULL;
            return;
        }
    }
    CUresult rc = tq_cu.Init(0);
    if (rc != CUDA_SUCCESS) {
        tq_error e;
        cuda_error(&e, "cuInit", rc);
        snprintf(load_error, sizeof load_error, "%s", e.message);
        tq_cu.Init = NULL;
    }
}

tq_code tq_cuda_load(tq_error *err)
{
    pthread_once(&load_once, load_driver);
    return tq_cu.Init ? TQ_OK : tq_set_error(err, TQ_ECUDA, "%s", load_error);
}

tq_code tq_cuda_current_context(void **cu_context, tq_error *err)
{
    CUcontext ctx = NULL;
    tq_code code = tq_cuda_load(err);
    if (code != TQ_OK)
        return code;
    CUresult rc = tq_cu.CtxGetCurrent(&ctx);
    if (rc != CUDA_SUCCESS)
        return cuda_error(err, "cuCtxGetCurrent", rc);
    if (!ctx)
        return tq_set_error(err, TQ_EINVAL, "no CUDA context is current in this thread");
    *cu_context = ctx;
    return TQ_OK;
}

__thread int tq_cu_depth;
__thread unsigned long long tq_cu_pushed;

/* ---- what the backend holds ------------------------------------------------------- */

static uint64_t device_allocated, pinned_allocated;

void cuda_count_allocated(int64_t device_delta, int64_t pinned_delta)
{
    __atomic_add_fetch(&device_allocated, (uint64_t)device_delta, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pinned_allocated, (uint64_t)pinned_delta, __ATOMIC_RELAXED);
}

void tq_cuda_allocated(uint64_t *device_bytes, uint64_t *pinned_bytes)
{
    *device_bytes = __atomic_load_n(&device_allocated, __ATOMIC_RELAXED);
    *pinned_bytes = __atomic_load_n(&pinned_allocated, __ATOMIC_RELAXED);
}

tq_code tq_cuda_mem_info(void *cu_context, size_t *free_bytes, size_t *total_bytes, tq_error *err)
{
    tq_code code = tq_cuda_load(err);
    if (code != TQ_OK)
        return code;
    if ((code = cuda_enter_context((CUcontext)cu_context, err)) != TQ_OK)
        return code;
    CUresult rc = tq_cu.MemGetInfo(free_bytes, total_bytes);
    cuda_leave();
    return rc == CUDA_SUCCESS ? TQ_OK : cuda_error(err, "cuMemGetInfo", rc);
}
