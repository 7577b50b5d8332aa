/* A stand-in for libnvrtc.so, for tests/c/test_gather.c: its "PTX" is the
 * source it was given, which the stand-in driver (fake_libcuda.c) loads.
 * FAKE_NVRTC_FAIL=1 makes every compile fail with a log. */
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct {
    char *source;
} program;

#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_COMPILATION 6

const char *nvrtcGetErrorString(nvrtcResult rc) { return rc ? "NVRTC_ERROR_COMPILATION" : "NVRTC_SUCCESS"; }

nvrtcResult nvrtcCreateProgram(program **prog, const char *source, const char *name, int n, const char *const *headers,
                               const char *const *names)
{
    (void)name, (void)n, (void)headers, (void)names;
    *prog = malloc(sizeof **prog);
    (*prog)->source = strdup(source);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(program *prog, int n, const char *const *options)
{
    (void)prog, (void)n, (void)options;
    return getenv("FAKE_NVRTC_FAIL") ? NVRTC_ERROR_COMPILATION : NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(program *prog, size_t *size)
{
    *size = strlen(prog->source) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTX(program *prog, char *ptx)
{
    strcpy(ptx, prog->source);
    return NVRTC_SUCCESS;
}

static const char log_text[] = "tq_gather.cu(1): error: fake compile error";

nvrtcResult nvrtcGetProgramLogSize(program *prog, size_t *size)
{
    (void)prog;
    *size = sizeof log_text;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(program *prog, char *log)
{
    (void)prog;
    memcpy(log, log_text, sizeof log_text);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(program **prog)
{
    free((*prog)->source);
    free(*prog);
    *prog = NULL;
    return NVRTC_SUCCESS;
}
