/* tq_nvrtc.c: see tq_nvrtc.h.  NVRTC's API is declared here, as far as it is
 * used. */
#include "tq_nvrtc.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_SUCCESS 0

/* X(field, symbol, return type, parameters), as tq_cuda.c lists the driver. */
#define TQ_NVRTC_FUNCTIONS(X)                                                                                      \
    X(GetErrorString, nvrtcGetErrorString, const char *, (nvrtcResult))                                            \
    X(CreateProgram, nvrtcCreateProgram, nvrtcResult,                                                              \
      (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *))                \
    X(CompileProgram, nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *))                  \
    X(GetPTXSize, nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram, size_t *))                                          \
    X(GetPTX, nvrtcGetPTX, nvrtcResult, (nvrtcProgram, char *))                                                    \
    X(GetProgramLogSize, nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *))                            \
    X(GetProgramLog, nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *))                                      \
    X(DestroyProgram, nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *))

#define TQ_DECLARE(field, symbol, ret, params) ret(*field) params;
typedef struct {
    TQ_NVRTC_FUNCTIONS(TQ_DECLARE)
} nvrtc_api;
#undef TQ_DECLARE

static void *open_library(void)
{
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                        "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                                        "/usr/local/cuda/lib64/libnvrtc.so.12"};
    const char *chosen = getenv("THEANO_QUEUE_LIBNVRTC");
    if (chosen && *chosen)
        return dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
    }
    return NULL;
}

static tq_code nvrtc_error(const nvrtc_api *api, tq_error *err, const char *call, nvrtcResult rc)
{
    const char *text = api->GetErrorString ? api->GetErrorString(rc) : NULL;
    return tq_set_error(err, TQ_ECUDA, "%s: %s", call, text ? text : "NVRTC error");
}

/* NVRTC's log, for a compile that failed: its first line says what. */
static tq_code compile_failed(const nvrtc_api *api, nvrtcProgram prog, const char *name, tq_error *err)
{
    size_t size = 0;
    char *log = NULL;
    if (api->GetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size && (log = malloc(size + 1))) {
        if (api->GetProgramLog(prog, log) != NVRTC_SUCCESS)
            log[0] = 0;
        log[size] = 0;
    }
    tq_code code = tq_set_error(err, TQ_ECUDA, "NVRTC could not compile %s: %s", name, log && log[0] ? log : "no log");
    free(log);
    return code;
}

static tq_code compile(const nvrtc_api *api, const char *source, const char *name, char **ptx, tq_error *err)
{
    nvrtcProgram prog = NULL;
    size_t size = 0;
    nvrtcResult rc = api->CreateProgram(&prog, source, name, 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS)
        return nvrtc_error(api, err, "nvrtcCreateProgram", rc);
    tq_code code = TQ_OK;
    if (api->CompileProgram(prog, 0, NULL) != NVRTC_SUCCESS) {
        code = compile_failed(api, prog, name, err);
    } else if ((rc = api->GetPTXSize(prog, &size)) != NVRTC_SUCCESS) {
        code = nvrtc_error(api, err, "nvrtcGetPTXSize", rc);
    } else if (!(*ptx = calloc(1, size + 1))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the PTX of %s", name);
    } else if ((rc = api->GetPTX(prog, *ptx)) != NVRTC_SUCCESS) {
        free(*ptx);
        *ptx = NULL;
        code = nvrtc_error(api, err, "nvrtcGetPTX", rc);
    }
    api->DestroyProgram(&prog);
    return code;
}

tq_code tq_nvrtc_compile(const char *source, const char *name, char **ptx, tq_error *err)
{
    nvrtc_api api;
    *ptx = NULL;
    void *lib = open_library();
    if (!lib)
        return tq_set_error(err, TQ_ESTATE, "NVRTC (libnvrtc.so) could not be loaded: %s", dlerror());
#define TQ_SYMBOL(field, symbol, ret, params) *(void **)&api.field = dlsym(lib, #symbol);
    TQ_NVRTC_FUNCTIONS(TQ_SYMBOL)
#undef TQ_SYMBOL
#define TQ_MISSING(field, symbol, ret, params) !api.field ? #symbol:
    const char *missing = TQ_NVRTC_FUNCTIONS(TQ_MISSING) NULL;
#undef TQ_MISSING
    tq_code code = missing ? tq_set_error(err, TQ_ESTATE, "the NVRTC library lacks %s", missing)
                           : compile(&api, source, name, ptx, err);
    dlclose(lib);
    return code;
}
