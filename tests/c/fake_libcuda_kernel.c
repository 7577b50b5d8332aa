/* Part of the stand-in CUDA driver (fake_libcuda.c), included at its end so
 * that the stand-in stays one source on every build line: modules, and the
 * kernels it runs on the host (c_code/engine/cuda/tq_strided.cu's strided copy,
 * c_code/engine/cuda/tq_gather_rows.cu's gather of held rows, and
 * bench/persistent_gather.cu's gather launched once, on a stream of its own
 * thread only). */

/* ---- modules and kernels ----------------------------------------------------------------- */

/* The kernels the stand-in runs; a function handle points at the name. */
static const char strided_copy_name[] = "tq_strided_copy";
static const char gather_rows_name[] = "tq_gather_rows";
static const char persistent_gather_name[] = "tq_persistent_gather";

/* A module: the one kernel its image defines. */
typedef struct {
    const char *defines;
} module;

/* 1 when `image` names `name` as a whole word. */
static int names(const char *image, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = strstr(image, name); at; at = strstr(at + 1, name)) {
        char next = at[len];
        if (!(next == '_' || (next >= '0' && next <= '9') || (next >= 'a' && next <= 'z') ||
              (next >= 'A' && next <= 'Z')))
            return 1;
    }
    return 0;
}

CUresult cuModuleLoadData(void **handle, const void *image)
{
    ENTER("cuModuleLoadData");
    module *m = calloc(1, sizeof *m);
    if (!m)
        return ERR_OUT_OF_MEMORY;
    m->defines = names(image, strided_copy_name)        ? strided_copy_name
                 : names(image, gather_rows_name)       ? gather_rows_name
                 : names(image, persistent_gather_name) ? persistent_gather_name
                                                        : NULL;
    if (!m->defines) {
        free(m);
        return ERR_INVALID_PTX;
    }
    *handle = m;
    COUNT(modules, 1);
    return OK;
}

CUresult cuModuleUnload(void *handle)
{
    free(handle);
    COUNT(modules, -1);
    return OK;
}

CUresult cuModuleGetFunction(void **function, void *handle, const char *name)
{
    ENTER("cuModuleGetFunction");
    const module *m = handle;
    if (strcmp(name, m->defines) != 0)
        return ERR_NOT_FOUND;
    *function = (void *)m->defines;
    return OK;
}

/* The strided-copy kernel (c_code/engine/cuda/tq_strided.cu): its argument, as tq_cuda.c lays it out. */
struct strided_desc {
    long long shape[8], strides[8], n;
    int ndim, unit;
};

static CUresult strided_copy(void **params)
{
    const char *src = *(const char **)params[0];
    char *dst = *(char **)params[1];
    const struct strided_desc *d = params[2];
    for (long long i = 0; i < d->n; i++) {
        long long rest = i, offset = 0;
        for (int k = d->ndim - 1; k >= 0; k--) {
            offset += (rest % d->shape[k]) * d->strides[k];
            rest /= d->shape[k];
        }
        if ((uintptr_t)(src + offset) % (unsigned)d->unit)
            return ERR_MISALIGNED_ADDRESS;
        memcpy(dst + i * d->unit, src + offset, (size_t)d->unit);
    }
    return OK;
}

/* The gather of held rows (c_code/engine/cuda/tq_gather_rows.cu): its argument, as
 * tq_cuda_held.c lays it out; part k is gathered by row k of the grid's blocks. */
#define GATHER_PARTS 8
struct gather_parts {
    unsigned long long src[GATHER_PARTS], dst[GATHER_PARTS];
    long long stride[GATHER_PARTS];
    unsigned long long row_units[GATHER_PARTS], n[GATHER_PARTS];
    int unit[GATHER_PARTS];
};

/* Misaligned units fail as they would on a GPU. */
static CUresult gather_rows(void **params, unsigned int parts)
{
    const struct gather_parts *p = params[0];
    const long long *idx = *(const long long **)params[1];
    if (parts > GATHER_PARTS)
        return ERR_INVALID_VALUE;
    for (unsigned int k = 0; k < parts; k++) {
        const char *src = (const char *)(uintptr_t)p->src[k];
        char *dst = (char *)(uintptr_t)p->dst[k];
        unsigned long long row_units = p->row_units[k], n = p->n[k];
        int unit = p->unit[k];
        if (unit != 1 && unit != 2 && unit != 4 && unit != 8 && unit != 16)
            return ERR_INVALID_VALUE;
        for (unsigned long long i = 0; i < n; i++) {
            const char *from = src + idx[i / row_units] * p->stride[k] + (i % row_units) * (unsigned)unit;
            if ((uintptr_t)from % (unsigned)unit || (uintptr_t)(dst + i * (unsigned)unit) % (unsigned)unit)
                return ERR_MISALIGNED_ADDRESS;
            memcpy(dst + i * (unsigned)unit, from, (size_t)unit);
        }
    }
    COUNT(kernel_gathers, 1);
    return OK;
}

/* The gather launched once (bench/persistent_gather.cu): its argument, and
 * its handshake, one block's way: it waits (polling, as the GPU's does) for
 * each batch to be posted and for the last one in its slot to be consumed,
 * gathers it, and says so in both words.  A negative post ends it, and 20 s
 * without one aborts. */
struct persistent_args {
    unsigned long long slot[2], src, row_units, rows; /* row_units: 16 bytes each */
    unsigned long long host, rows_of, device;         /* host: posted, done; device: go, consumed, done, arrived */
};

static CUresult persistent_gather(void **params)
{
    const struct persistent_args *a = params[0];
    int *host = (int *)(uintptr_t)a->host, *device = (int *)(uintptr_t)a->device;
    for (int k = 1;; k++) {
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int posted;
        while ((posted = __atomic_load_n(&host[0], __ATOMIC_ACQUIRE)) >= 0 &&
               (posted < k || __atomic_load_n(&device[1], __ATOMIC_ACQUIRE) < k - 2)) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec > 20) {
                fprintf(stderr, "fake_libcuda: the persistent gather waited 20 s for batch %d\n", k);
                abort();
            }
            usleep(1);
        }
        if (posted < 0)
            return OK;
        const long long *rows = (const long long *)(uintptr_t)a->rows_of + (unsigned long long)(k % 2) * a->rows;
        size_t row_bytes = (size_t)a->row_units * 16;
        for (unsigned long long r = 0; r < a->rows; r++)
            memcpy((char *)(uintptr_t)a->slot[k % 2] + r * row_bytes,
                   (const char *)(uintptr_t)a->src + rows[r] * row_bytes, row_bytes);
        __atomic_store_n(&device[2], k, __ATOMIC_RELEASE);
        __atomic_store_n(&host[1], k, __ATOMIC_RELEASE);
    }
}

/* The bytes of each parameter of a kernel the stand-in runs; how many it has. */
static int parameter_sizes(const void *function, size_t *sizes)
{
    if (function == (const void *)strided_copy_name) {
        sizes[0] = sizes[1] = sizeof(char *);
        sizes[2] = sizeof(struct strided_desc);
        return 3;
    }
    if (function == (const void *)persistent_gather_name) {
        sizes[0] = sizeof(struct persistent_args);
        return 1;
    }
    sizes[0] = sizeof(struct gather_parts);
    sizes[1] = sizeof(long long *);
    return 2;
}

static CUresult launch(void *function, unsigned int gy, void **params)
{
    if (function == (const void *)persistent_gather_name)
        return persistent_gather(params);
    return function == (const void *)strided_copy_name ? strided_copy(params) : gather_rows(params, gy);
}

CUresult cuLaunchKernel(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params,
                        void **extra)
{
    ENTER("cuLaunchKernel");
    (void)shared, (void)extra;
    if (function != (const void *)strided_copy_name && function != (const void *)gather_rows_name &&
        function != (const void *)persistent_gather_name)
        return ERR_INVALID_HANDLE;
    if (function == (const void *)persistent_gather_name && !queued_stream(stream)) {
        fprintf(stderr, "fake_libcuda: a kernel that never ends by itself runs only with FAKE_CUDA_ASYNC\n");
        return ERR_NOT_SUPPORTED; /* in the caller's thread it would never return */
    }
    if (!gx || !gy || !gz || !bx || !by || !bz || !params)
        return ERR_INVALID_VALUE;
    if (capturing(stream)) {
        graph_call call = {.kind = CALL_KERNEL, .function = function, .gy = gy};
        pack_params(function, params, call.arguments);
        captured(stream, &call);
        return OK;
    }
    log_line("kernel", stream);
    return do_kernel(stream, function, gy, params);
}
