/* bench/step_floor.c: the driver calls of bench/step_floor.py's floors, made
 * by one C call a step, as the engine makes them: the floor then pays the
 * calls, not ctypes' conversions around each; and the host copy an array
 * dataset's producer makes beside the step, by a thread of its own.  Built
 * by step_floor.py (gcc), loaded with ctypes; the driver is the library its
 * path names. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <string.h>

typedef int CUresult;
typedef void *H;                 /* any driver handle */
typedef unsigned long long DPTR; /* CUdeviceptr */

enum { FLOOR_UPLOAD = 1, FLOOR_QUERY = 2, FLOOR_WAIT = 4, FLOOR_COPY = 8 };
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

/* ---- the host copy beside the step ---------------------------------------------------- */

/* A thread that, woken once a step, copies the dataset's next batch into
 * the next of `n_slots` slots of host memory, batch after batch, as an array
 * dataset's producer gathers a Feeder's batches into the ring's staging (in
 * order without shuffle; one thread below the copy pool's 1 MiB).  The
 * slots are the registered memory the floor's uploads read: a producer
 * writes memory that the GPU then reads, not one buffer that stays in its
 * core's cache.  Each wake is one copy; stopping it first makes every copy
 * asked for. */
static struct {
    pthread_t thread;
    sem_t wake;
    int running;
    const char *dataset;
    char *slots;
    size_t batch_bytes, batches, next, n_slots, slot_bytes;
    unsigned long asked, done; /* copies asked for (by the step's thread) and made (by the copier) */
} copier;

static void *copier_main(void *unused)
{
    (void)unused;
    for (;;) {
        while (sem_wait(&copier.wake) && errno == EINTR)
            ;
        unsigned long done = copier.done;
        if (done == __atomic_load_n(&copier.asked, __ATOMIC_ACQUIRE))
            return NULL; /* a wake with nothing asked: floor_copier_stop's */
        char *into = copier.slots + (done % copier.n_slots) * copier.slot_bytes;
        memcpy(into, copier.dataset + copier.next * copier.batch_bytes, copier.batch_bytes);
        copier.next = (copier.next + 1) % copier.batches;
        __atomic_store_n(&copier.done, done + 1, __ATOMIC_RELEASE);
    }
}

/* Starts the copier of `batches` batches of `batch_bytes` each from
 * `dataset` into `n_slots` slots `slot_bytes` apart from `slots`, in turn:
 * 0, or -1 when one runs already or cannot start. */
int floor_copier_start(const void *dataset, size_t batch_bytes, size_t batches, void *slots, size_t n_slots,
                       size_t slot_bytes)
{
    if (copier.running || !batches || !n_slots || batch_bytes > slot_bytes || sem_init(&copier.wake, 0, 0))
        return -1;
    copier.dataset = dataset;
    copier.slots = slots;
    copier.n_slots = n_slots;
    copier.slot_bytes = slot_bytes;
    copier.batch_bytes = batch_bytes;
    copier.batches = batches;
    copier.next = copier.asked = copier.done = 0;
    if (pthread_create(&copier.thread, NULL, copier_main, NULL)) {
        sem_destroy(&copier.wake);
        return -1;
    }
    copier.running = 1;
    return 0;
}

/* The copies made so far. */
unsigned long floor_copier_made(void) { return __atomic_load_n(&copier.done, __ATOMIC_ACQUIRE); }

/* Once every copy asked for is made, stops the copier; how many it made. */
unsigned long floor_copier_stop(void)
{
    if (!copier.running)
        return 0;
    sem_post(&copier.wake);
    pthread_join(copier.thread, NULL);
    sem_destroy(&copier.wake);
    copier.running = 0;
    return copier.done;
}

/* ---- the calls ------------------------------------------------------------------------------ */

/* The calls of one step, in ctx: with FLOOR_COPY, first wakes the copier
 * (-1 when none runs); with FLOOR_UPLOAD, the n components'
 * copies from `src` + `src_offset` (a slot of the ring that a copier fills)
 * on `copy` after the last reader (consumed) and recorded as filled;
 * with FLOOR_QUERY, whether filled is done; with FLOOR_WAIT, `compute`
 * ordered after filled; always, consumed recorded on `compute`.  The
 * calls' error codes or-ed: 0 when every call succeeded. */
int floor_calls(H ctx, H compute, H copy, H filled, H consumed, int n, const DPTR *dst, void *const *src,
                const size_t *bytes, size_t src_offset, int what)
{
    if (what & FLOOR_COPY) {
        if (!copier.running)
            return -1;
        __atomic_add_fetch(&copier.asked, 1, __ATOMIC_RELEASE);
        sem_post(&copier.wake);
    }
    CUresult rc = PushCurrent(ctx);
    if (what & FLOOR_UPLOAD) {
        rc |= StreamWaitEvent(copy, consumed, 0);
        for (int i = 0; i < n; i++)
            rc |= MemcpyHtoDAsync(dst[i], (const char *)src[i] + src_offset, bytes[i], copy);
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
