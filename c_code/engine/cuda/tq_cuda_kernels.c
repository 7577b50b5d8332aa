/* tq_cuda_kernels.c: the CUDA backend's kernels.  Each is PTX text made by
 * scripts/gen_ptx.sh from its .cu file, so that gcc alone builds the
 * package; its module is loaded into the ring's context at the first launch
 * that needs it, and unloaded with the ring. */
#include "tq_cuda_backend.h"

#include "tq_gather_rows_ptx.h"
#include "tq_strided_ptx.h"

static const struct {
    const char *ptx, *name;
} kernel_sources[TQ_KERNELS] = {
    [TQ_KERNEL_STRIDED_COPY] = {tq_strided_ptx, "tq_strided_copy"},
    [TQ_KERNEL_GATHER_ROWS] = {tq_gather_rows_ptx, "tq_gather_rows"},
};

tq_code cuda_kernel(cuda_backend *b, tq_kernel which, CUfunction *fn, tq_error *err)
{
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->module_lock);
    if (!b->modules[which]) {
        CUmodule module = NULL;
        CU(ModuleLoadData, (&module, kernel_sources[which].ptx));
        b->modules[which] = module;
        CU(ModuleGetFunction, (&b->kernels[which], module, kernel_sources[which].name));
    }
fail:
    *fn = b->kernels[which];
    if (code == TQ_OK && !*fn)
        code = tq_set_error(err, TQ_ECUDA, "the kernel %s did not load", kernel_sources[which].name);
    pthread_mutex_unlock(&b->module_lock);
    return code;
}

void cuda_kernels_release(cuda_backend *b)
{
    for (int k = 0; k < TQ_KERNELS; k++) {
        if (b->modules[k])
            tq_cu.ModuleUnload(b->modules[k]);
        b->modules[k] = NULL;
        b->kernels[k] = NULL;
    }
}
