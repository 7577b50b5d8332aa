/* bench/driver_lock.c: what a producer's driver calls cost a small GPU step
 * when the driver serialises the calls of two threads in one context (issue
 * 43.1 and 43.2: the floor under "no launch in the consumer's thread" and
 * "at most two driver calls a batch").  Built and run by bench/driver_lock.py.
 *
 * The *step* thread does what a small training step does on its stream: it
 * waits for the batch's *filled* event (the dequeue), wakes the producer (a
 * dequeue frees a slot), launches LAUNCHES tiny kernels, records *consumed*,
 * and reads 8 bytes back.  The *producer* thread, woken once per step, makes
 * one batch's calls of a pattern on its own stream:
 *
 *   none          nothing (the step alone)
 *   host          a host memcpy of the batch, no driver call (the CPU's share)
 *   record        cuEventRecord (the cheapest call that queues work)
 *   query         cuEventQuery (a call that queues nothing)
 *   sync          cuEventSynchronize of an event long complete (a producer's
 *                 wait for its slot's staging, once the upload is done)
 *   upload        wait consumed, cuMemcpyHtoDAsync, record filled (3 calls:
 *                 an array dataset's producer today)
 *   upload2       cuMemcpyHtoDAsync, record filled (2 calls)
 *   host+upload   host, then upload: an array dataset's producer, its
 *                 gather of the rows into the staging included
 *   gather        wait consumed, a device-to-device kernel, record filled
 *                 (3 calls: a held dataset's producer)
 *   graph-upload  one cuGraphLaunch of upload's three nodes
 *   graph-gather  one cuGraphLaunch of gather's three nodes
 *   graph-upload+sync  graph-upload, then sync (2 calls: an issuer's launch
 *                 and a producer's staging wait, made by one thread here)
 *   deferred      no producer: the step thread makes upload's three calls
 *                 itself before its launches (today's small-batch path)
 *   persistent    no driver call: the producer writes the batch's row
 *                 numbers into mapped host memory for a gather kernel
 *                 launched once (bench/persistent_gather.cu) that fills
 *                 two slots in turn; the step waits for its batch with
 *                 cuStreamWaitValue32 instead of the event, and frees the
 *                 slot with cuStreamWriteValue32 instead of recording one
 *
 * MODE@late wakes the producer after the step's launches instead of before
 * them: its calls then meet the step's thread in its read-back, waiting for
 * the GPU, rather than in its launches.
 *
 * Prints one line per mode and round: mode, round, then medians over the
 * timed steps of the step's period, its thread's time inside its launches
 * and the producer's time inside its calls, in microseconds, and 1 when
 * the producer kept up (had made every batch but the last step's when the
 * steps ended), else 0; or "n/a" and why.  Modes take turns within each round.  The driver is
 * THEANO_QUEUE_LIBCUDA's library (the stand-in of tests/c/fake_libcuda.c in
 * the tests), else libcuda.so.1; its graph functions and stream memory
 * operations are optional.  The device is DRIVER_LOCK_DEVICE's ordinal,
 * else 0; persistent's kernel has DRIVER_LOCK_BLOCKS blocks, else 32.
 *
 *   driver_lock STEPS ROUNDS LAUNCHES BATCH_BYTES MODE[,MODE...]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "persistent_gather_ptx.h" /* mode persistent's kernel */
#include "tq_strided_ptx.h"        /* the engine's strided copy: one kernel both the GPU and the stand-in run */

typedef int CUresult;
typedef void *H;                 /* any driver handle */
typedef unsigned long long DPTR; /* CUdeviceptr */

#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2
#define CU_EVENT_WAIT_EXTERNAL 1
#define CU_EVENT_RECORD_EXTERNAL 1
#define CU_STREAM_CAPTURE_MODE_RELAXED 2
#define CU_MEMHOSTALLOC_DEVICEMAP 2
#define CU_STREAM_WAIT_VALUE_GEQ 0

/* The driver's functions; the graph ones are NULL where the driver lacks them. */
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(int *, int);
    CUresult (*DevicePrimaryCtxRetain)(H *, int);
    CUresult (*DevicePrimaryCtxRelease)(int);
    CUresult (*CtxPushCurrent)(H);
    CUresult (*CtxPopCurrent)(H *);
    CUresult (*StreamCreate)(H *, unsigned);
    CUresult (*StreamDestroy)(H);
    CUresult (*StreamSynchronize)(H);
    CUresult (*StreamWaitEvent)(H, H, unsigned);
    CUresult (*EventCreate)(H *, unsigned);
    CUresult (*EventDestroy)(H);
    CUresult (*EventRecord)(H, H);
    CUresult (*EventQuery)(H);
    CUresult (*EventSynchronize)(H);
    CUresult (*MemAlloc)(DPTR *, size_t);
    CUresult (*MemFree)(DPTR);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyHtoDAsync)(DPTR, const void *, size_t, H);
    CUresult (*MemcpyDtoHAsync)(void *, DPTR, size_t, H);
    CUresult (*ModuleLoadData)(H *, const void *);
    CUresult (*ModuleUnload)(H);
    CUresult (*ModuleGetFunction)(H *, H, const char *);
    CUresult (*LaunchKernel)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **,
                             void **);
    CUresult (*EventRecordWithFlags)(H, H, unsigned);
    CUresult (*StreamBeginCapture)(H, int);
    CUresult (*StreamEndCapture)(H, H *);
    CUresult (*GraphInstantiateWithFlags)(H *, H, unsigned long long);
    CUresult (*GraphLaunch)(H, H);
    CUresult (*GraphExecDestroy)(H);
    CUresult (*GraphDestroy)(H);
    CUresult (*MemHostGetDevicePointer)(DPTR *, void *, unsigned);
    CUresult (*StreamWaitValue32)(H, DPTR, unsigned, unsigned);
    CUresult (*StreamWriteValue32)(H, DPTR, unsigned, unsigned);
} cu;

static const struct {
    const char *name;
    size_t offset;
    int optional;
} symbols[] = {
#define SYM(field, name, optional)                      \
    {                                                   \
        name, offsetof(__typeof__(cu), field), optional \
    }
    SYM(Init, "cuInit", 0),
    SYM(DeviceGet, "cuDeviceGet", 0),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 0),
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", 0),
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", 0),
    SYM(StreamCreate, "cuStreamCreate", 0),
    SYM(StreamDestroy, "cuStreamDestroy_v2", 0),
    SYM(StreamSynchronize, "cuStreamSynchronize", 0),
    SYM(StreamWaitEvent, "cuStreamWaitEvent", 0),
    SYM(EventCreate, "cuEventCreate", 0),
    SYM(EventDestroy, "cuEventDestroy_v2", 0),
    SYM(EventRecord, "cuEventRecord", 0),
    SYM(EventQuery, "cuEventQuery", 0),
    SYM(EventSynchronize, "cuEventSynchronize", 0),
    SYM(MemAlloc, "cuMemAlloc_v2", 0),
    SYM(MemFree, "cuMemFree_v2", 0),
    SYM(MemHostAlloc, "cuMemHostAlloc", 0),
    SYM(MemFreeHost, "cuMemFreeHost", 0),
    SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 0),
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 0),
    SYM(ModuleLoadData, "cuModuleLoadData", 0),
    SYM(ModuleUnload, "cuModuleUnload", 0),
    SYM(ModuleGetFunction, "cuModuleGetFunction", 0),
    SYM(LaunchKernel, "cuLaunchKernel", 0),
    SYM(EventRecordWithFlags, "cuEventRecordWithFlags", 1),
    SYM(StreamBeginCapture, "cuStreamBeginCapture_v2", 1),
    SYM(StreamEndCapture, "cuStreamEndCapture", 1),
    SYM(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 1),
    SYM(GraphLaunch, "cuGraphLaunch", 1),
    SYM(GraphExecDestroy, "cuGraphExecDestroy", 1),
    SYM(GraphDestroy, "cuGraphDestroy", 1),
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 1),
    SYM(StreamWaitValue32, "cuStreamWaitValue32_v2", 1),
    SYM(StreamWriteValue32, "cuStreamWriteValue32_v2", 1),
#undef SYM
};

static void die(const char *what, CUresult rc)
{
    fprintf(stderr, "driver_lock: %s failed (CUresult %d)\n", what, rc);
    exit(1);
}

/* Calls the driver; any failure ends the program (a benchmark has no error to recover from). */
#define CHECK(call)            \
    do {                       \
        CUresult rc_ = (call); \
        if (rc_ != 0)          \
            die(#call, rc_);   \
    } while (0)

static void load_driver(void)
{
    const char *path = getenv("THEANO_QUEUE_LIBCUDA");
    void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "driver_lock: cannot load the CUDA driver: %s\n", dlerror());
        exit(1);
    }
    for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++) {
        void *fn = dlsym(lib, symbols[i].name);
        if (!fn && !symbols[i].optional) {
            fprintf(stderr, "driver_lock: the driver lacks %s\n", symbols[i].name);
            exit(1);
        }
        memcpy((char *)&cu + symbols[i].offset, &fn, sizeof fn);
    }
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* ---- the work --------------------------------------------------------------------------- */

/* The kernel's argument (c_code/engine/cuda/tq_strided.cu): a 1-D copy of n 4-byte units. */
struct strided_desc {
    long long shape[8], strides[8], n;
    int ndim, unit;
};

static struct {
    int device;
    H ctx, module, kernel;
    H step_stream, copy_stream, filled, consumed, staged;       /* staged: recorded once, complete */
    DPTR small_src, small_dst, block, block2, block3, readback; /* block3: persistent's second slot */
    void *pinned, *host_a, *host_b;
    size_t batch_bytes;
    int launches;
    H graph_upload, graph_gather; /* executable graphs, or NULL */
    const char *graph_why;        /* why there are none */
    /* Mode persistent's kernel, its mailbox (mapped host memory: the two
     * words of bench/persistent_gather.cu's host[], then rows[2][ROWS]) and
     * its words in device memory (its device[]). */
    H persistent_module, persistent_kernel;
    volatile int *box;
    volatile long long *rows_of;
    DPTR box_d, words;
    const char *persistent_why; /* why the mode cannot run, or NULL */
} w;

static void launch_copy(DPTR dst, DPTR src, size_t bytes, H stream)
{
    struct strided_desc d = {.shape = {(long long)(bytes / 4)}, .strides = {4}, .n = (long long)(bytes / 4)};
    d.ndim = 1;
    d.unit = 4;
    void *params[] = {&src, &dst, &d};
    unsigned blocks = (unsigned)((d.n + 255) / 256);
    CHECK(cu.LaunchKernel(w.kernel, blocks > 1024 ? 1024 : blocks, 1, 1, 256, 1, 1, 0, stream, params, NULL));
}

/* One batch's calls of a pattern on `stream`: each returns after queueing. */
static void queue_upload(H stream, int wait)
{
    if (wait)
        CHECK(cu.StreamWaitEvent(stream, w.consumed, 0));
    CHECK(cu.MemcpyHtoDAsync(w.block, w.pinned, w.batch_bytes, stream));
    CHECK(cu.EventRecord(w.filled, stream));
}

static void queue_gather(H stream)
{
    CHECK(cu.StreamWaitEvent(stream, w.consumed, 0));
    launch_copy(w.block, w.block2, w.batch_bytes, stream);
    CHECK(cu.EventRecord(w.filled, stream));
}

/* A graph of one batch's three nodes, captured on the copy stream; its
 * events are the same two (recorded and waited for outside it as well). */
static H capture(int gather)
{
    H graph = NULL, exec = NULL;
    CHECK(cu.StreamBeginCapture(w.copy_stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cu.StreamWaitEvent(w.copy_stream, w.consumed, CU_EVENT_WAIT_EXTERNAL));
    if (gather)
        launch_copy(w.block, w.block2, w.batch_bytes, w.copy_stream);
    else
        CHECK(cu.MemcpyHtoDAsync(w.block, w.pinned, w.batch_bytes, w.copy_stream));
    CHECK(cu.EventRecordWithFlags(w.filled, w.copy_stream, CU_EVENT_RECORD_EXTERNAL));
    CHECK(cu.StreamEndCapture(w.copy_stream, &graph));
    CHECK(cu.GraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cu.GraphDestroy(graph));
    return exec;
}

/* ---- mode persistent: a gather kernel launched once, fed through mapped memory ----------- */

#define ROWS 256                      /* rows a batch, of batch_bytes / ROWS bytes, in 16-byte units */
#define PERSISTENT_BLOCKS 32          /* the kernel's blocks (DRIVER_LOCK_BLOCKS), which keep their SMs */
#define PERSISTENT_THREADS 256        /* each block's threads */
#define KERNEL_MAX_ROWS 1024          /* persistent_gather.cu's MAX_ROWS: its device[]'s copies of the rows */
enum { POSTED, GATHERED };            /* the words of mapped host memory (persistent_gather.cu's host[]) */
enum { GO, CONSUMED, DONE, ARRIVED }; /* those of device memory (its device[]) */
static const double GIVE_UP_US = 5e6; /* the kernel answers within this, or the run ends */

/* The source row of batch k's row r: each batch its own order. */
static long long row_of(int k, int r) { return (long long)((r * 7 + k * 13) % ROWS); }

/* Waits (spinning: a producer of this kind makes no driver call) until the kernel has gathered batch k. */
static void wait_gathered(int k)
{
    double t0 = now_us();
    while (w.box[GATHERED] < k)
        if (now_us() - t0 > GIVE_UP_US) {
            fprintf(stderr, "driver_lock: the persistent kernel gathered batch %d of %d in 5 s\n", w.box[GATHERED], k);
            exit(1);
        }
}

/* Posts batch k's row numbers: into the half of the mailbox that batch k - 2 used, once it is gathered
 * (batch k - 1 is, as a rule, by the time the step that wakes the producer runs). */
static void persistent_post(int k)
{
    wait_gathered(k - 2);
    volatile long long *rows = w.rows_of + (size_t)(k % 2) * ROWS;
    for (int r = 0; r < ROWS; r++)
        rows[r] = row_of(k, r);
    __atomic_store_n(&w.box[POSTED], k, __ATOMIC_RELEASE);
}

/* Launches the kernel on the copy stream, batch 1 posted. */
static void persistent_start(void)
{
    static const int zeros[4];
    w.box[POSTED] = w.box[GATHERED] = 0;
    CHECK(cu.MemcpyHtoDAsync(w.words, zeros, sizeof zeros, w.copy_stream));
    struct {
        DPTR slot[2], src;
        unsigned long long row_units, rows;
        DPTR host, rows_of, device;
    } args = {{w.block, w.block3}, w.block2, w.batch_bytes / ROWS / 16, ROWS, w.box_d, w.box_d + 16, w.words};
    void *params[] = {&args};
    const char *blocks = getenv("DRIVER_LOCK_BLOCKS");
    CHECK(cu.LaunchKernel(w.persistent_kernel, blocks ? (unsigned)atoi(blocks) : PERSISTENT_BLOCKS, 1, 1,
                          PERSISTENT_THREADS, 1, 1, 0, w.copy_stream, params, NULL));
    persistent_post(1);
}

/* Once batch `last` is gathered: checks its rows, and stops the kernel. */
static void persistent_stop(int last)
{
    wait_gathered(last);
    size_t row_units = w.batch_bytes / ROWS / 4;
    unsigned *got = w.host_a;
    CHECK(cu.MemcpyDtoHAsync(got, last % 2 ? w.block3 : w.block, w.batch_bytes, w.step_stream));
    CHECK(cu.StreamSynchronize(w.step_stream));
    __atomic_store_n(&w.box[POSTED], -1, __ATOMIC_RELEASE);
    CHECK(cu.StreamSynchronize(w.copy_stream));
    for (size_t i = 0; i < w.batch_bytes / 4; i++) {
        size_t row = i / row_units;
        if (got[i] != (unsigned)(row_of(last, (int)row) * row_units + i % row_units)) {
            fprintf(stderr, "driver_lock: the persistent kernel gathered row %zu of batch %d wrong\n", row, last);
            exit(1);
        }
    }
}

/* Loads the kernel and maps its mailbox, or says why mode persistent cannot run. */
static void persistent_setup(void)
{
    if (!cu.StreamWaitValue32 || !cu.StreamWriteValue32 || !cu.MemHostGetDevicePointer) {
        w.persistent_why = "the driver lacks stream memory operations";
        return;
    }
    if (w.batch_bytes % (ROWS * 16)) {
        w.persistent_why = "the batch is not 256 rows of 16-byte units";
        return;
    }
    void *box;
    CHECK(cu.MemHostAlloc(&box, 16 + 2 * ROWS * sizeof(long long), CU_MEMHOSTALLOC_DEVICEMAP));
    w.box = box;
    w.rows_of = (volatile long long *)((char *)box + 16);
    CHECK(cu.MemHostGetDevicePointer(&w.box_d, box, 0));
    CHECK(cu.MemAlloc(&w.words, 4 * sizeof(int) + 2 * KERNEL_MAX_ROWS * sizeof(long long)));
    CHECK(cu.MemAlloc(&w.block3, w.batch_bytes));
    CHECK(cu.ModuleLoadData(&w.persistent_module, persistent_gather_ptx));
    CHECK(cu.ModuleGetFunction(&w.persistent_kernel, w.persistent_module, "tq_persistent_gather"));
}

static void persistent_teardown(void)
{
    if (w.persistent_why)
        return;
    CHECK(cu.ModuleUnload(w.persistent_module));
    CHECK(cu.MemFree(w.words));
    CHECK(cu.MemFree(w.block3));
    CHECK(cu.MemFreeHost((void *)w.box));
}

static void setup(int launches, size_t batch_bytes)
{
    const char *ordinal = getenv("DRIVER_LOCK_DEVICE");
    load_driver();
    CHECK(cu.Init(0));
    CHECK(cu.DeviceGet(&w.device, ordinal ? atoi(ordinal) : 0));
    CHECK(cu.DevicePrimaryCtxRetain(&w.ctx, w.device));
    CHECK(cu.CtxPushCurrent(w.ctx));
    w.launches = launches;
    w.batch_bytes = batch_bytes;
    CHECK(cu.ModuleLoadData(&w.module, tq_strided_ptx));
    CHECK(cu.ModuleGetFunction(&w.kernel, w.module, "tq_strided_copy"));
    CHECK(cu.StreamCreate(&w.step_stream, CU_STREAM_NON_BLOCKING));
    CHECK(cu.StreamCreate(&w.copy_stream, CU_STREAM_NON_BLOCKING));
    CHECK(cu.EventCreate(&w.filled, CU_EVENT_DISABLE_TIMING));
    CHECK(cu.EventCreate(&w.consumed, CU_EVENT_DISABLE_TIMING));
    CHECK(cu.EventCreate(&w.staged, CU_EVENT_DISABLE_TIMING));
    CHECK(cu.MemAlloc(&w.small_src, 4096));
    CHECK(cu.MemAlloc(&w.small_dst, 4096));
    CHECK(cu.MemAlloc(&w.readback, 8));
    CHECK(cu.MemAlloc(&w.block, batch_bytes));
    CHECK(cu.MemAlloc(&w.block2, batch_bytes));
    CHECK(cu.MemHostAlloc(&w.pinned, batch_bytes, 0));
    for (size_t i = 0; i < batch_bytes / 4; i++)
        ((unsigned *)w.pinned)[i] = (unsigned)i; /* block2's units: each its own number, for persistent's check */
    w.host_a = calloc(1, batch_bytes);
    w.host_b = calloc(1, batch_bytes);
    if (!w.host_a || !w.host_b)
        die("calloc", 2);
    /* Initialised device memory: the stand-in's kernel reads it as host memory. */
    CHECK(cu.MemcpyHtoDAsync(w.small_src, w.pinned, 4096, w.step_stream));
    CHECK(cu.MemcpyHtoDAsync(w.block2, w.pinned, batch_bytes, w.step_stream));
    CHECK(cu.EventRecord(w.staged, w.step_stream));
    CHECK(cu.StreamSynchronize(w.step_stream));
    if (!cu.GraphLaunch || !cu.StreamBeginCapture || !cu.StreamEndCapture || !cu.GraphInstantiateWithFlags ||
        !cu.EventRecordWithFlags) {
        w.graph_why = "the driver lacks the graph functions";
    } else {
        w.graph_upload = capture(0);
        w.graph_gather = capture(1);
    }
    persistent_setup();
    CHECK(cu.CtxPopCurrent(&w.ctx));
}

static void teardown(void)
{
    CHECK(cu.CtxPushCurrent(w.ctx));
    CHECK(cu.StreamSynchronize(w.copy_stream));
    CHECK(cu.StreamSynchronize(w.step_stream));
    if (w.graph_upload)
        CHECK(cu.GraphExecDestroy(w.graph_upload));
    if (w.graph_gather)
        CHECK(cu.GraphExecDestroy(w.graph_gather));
    persistent_teardown();
    CHECK(cu.EventDestroy(w.filled));
    CHECK(cu.EventDestroy(w.consumed));
    CHECK(cu.EventDestroy(w.staged));
    CHECK(cu.StreamDestroy(w.step_stream));
    CHECK(cu.StreamDestroy(w.copy_stream));
    DPTR blocks[] = {w.small_src, w.small_dst, w.readback, w.block, w.block2};
    for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
        CHECK(cu.MemFree(blocks[i]));
    CHECK(cu.MemFreeHost(w.pinned));
    CHECK(cu.ModuleUnload(w.module));
    CHECK(cu.CtxPopCurrent(&w.ctx));
    CHECK(cu.DevicePrimaryCtxRelease(w.device));
    free(w.host_a);
    free(w.host_b);
}

/* ---- the two threads -------------------------------------------------------------------- */

enum mode {
    NONE,
    HOST,
    RECORD,
    QUERY,
    SYNC,
    UPLOAD,
    UPLOAD2,
    HOST_UPLOAD,
    GATHER,
    GRAPH_UPLOAD,
    GRAPH_GATHER,
    GRAPH_UPLOAD_SYNC,
    DEFERRED,
    PERSISTENT,
    MODES
};
static const char *mode_names[MODES] = {"none",     "host",         "record",       "query",
                                        "sync",     "upload",       "upload2",      "host+upload",
                                        "gather",   "graph-upload", "graph-gather", "graph-upload+sync",
                                        "deferred", "persistent"};

/* A mode, and whether its producer is woken after the step's launches. */
typedef struct {
    enum mode mode;
    int late;
} run;

static struct {
    sem_t wake;
    enum mode mode;
    int wakes;       /* batches to make: one per step, warm-up included */
    double *call_us; /* per batch: the producer's time inside its calls */
    int batches;     /* made so far (atomic) */
} producer;

/* Makes batch `batch`'s calls of the mode on the copy stream (0: the first
 * woken for); the time they took. */
static double produce(enum mode mode, int batch)
{
    double t0 = now_us();
    switch (mode) {
    case HOST: memcpy(w.host_a, w.host_b, w.batch_bytes); break;
    case RECORD: CHECK(cu.EventRecord(w.filled, w.copy_stream)); break;
    case QUERY: cu.EventQuery(w.filled); break; /* CUDA_SUCCESS or CUDA_ERROR_NOT_READY: both answers */
    case SYNC: CHECK(cu.EventSynchronize(w.staged)); break;
    case UPLOAD: queue_upload(w.copy_stream, 1); break;
    case UPLOAD2: queue_upload(w.copy_stream, 0); break;
    case HOST_UPLOAD:
        memcpy(w.host_a, w.host_b, w.batch_bytes);
        queue_upload(w.copy_stream, 1);
        break;
    case GATHER: queue_gather(w.copy_stream); break;
    case GRAPH_UPLOAD: CHECK(cu.GraphLaunch(w.graph_upload, w.copy_stream)); break;
    case GRAPH_GATHER: CHECK(cu.GraphLaunch(w.graph_gather, w.copy_stream)); break;
    case GRAPH_UPLOAD_SYNC:
        CHECK(cu.GraphLaunch(w.graph_upload, w.copy_stream));
        CHECK(cu.EventSynchronize(w.staged));
        break;
    case PERSISTENT: persistent_post(batch + 2); break; /* batch 1 was posted before the steps */
    default: break;
    }
    return now_us() - t0;
}

static void *producer_main(void *unused)
{
    (void)unused;
    CHECK(cu.CtxPushCurrent(w.ctx));
    for (int batch = 0; batch < producer.wakes; batch++) {
        sem_wait(&producer.wake);
        producer.call_us[batch] = produce(producer.mode, batch);
        __atomic_store_n(&producer.batches, batch + 1, __ATOMIC_RELEASE);
    }
    H ctx;
    CHECK(cu.CtxPopCurrent(&ctx));
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n)
{
    if (n <= 0)
        return NAN; /* a producer that made no batch after the warm-up */
    qsort(values, (size_t)n, sizeof *values, by_value);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/* Runs `steps` steps (after as many warm-up steps) with the producer of
 * `how`; prints the medians. */
static void run_mode(run how, int round, int steps)
{
    enum mode mode = how.mode;
    const char *late = how.late ? "@late" : "";
    if ((mode == GRAPH_UPLOAD || mode == GRAPH_GATHER || mode == GRAPH_UPLOAD_SYNC) && w.graph_why) {
        printf("%s%s %d n/a %s\n", mode_names[mode], late, round, w.graph_why);
        return;
    }
    if (mode == PERSISTENT && w.persistent_why) {
        printf("%s%s %d n/a %s\n", mode_names[mode], late, round, w.persistent_why);
        return;
    }
    double *period = calloc((size_t)steps, sizeof *period), *launch = calloc((size_t)steps, sizeof *launch);
    double *call = calloc(2 * (size_t)steps, sizeof *call), readback;
    if (!period || !launch || !call)
        die("calloc", 2);
    pthread_t thread;
    int has_producer = mode != NONE && mode != DEFERRED;
    producer.mode = mode;
    producer.wakes = 2 * steps;
    producer.batches = 0;
    producer.call_us = call;
    sem_init(&producer.wake, 0, 0);
    if (has_producer && pthread_create(&thread, NULL, producer_main, NULL))
        die("pthread_create", 2);
    CHECK(cu.CtxPushCurrent(w.ctx));
    if (mode == PERSISTENT)
        persistent_start();
    int deferred_batches = 0;
    double started = now_us();
    for (int s = -steps; s < steps; s++) { /* negative: warm-up */
        if (mode == DEFERRED) {
            double t0 = now_us();
            queue_upload(w.copy_stream, 1);
            if (s >= 0)
                call[deferred_batches++] = now_us() - t0;
        }
        unsigned batch = (unsigned)(s + steps + 1); /* persistent's numbering: from 1 */
        if (mode == PERSISTENT)
            CHECK(cu.StreamWaitValue32(w.step_stream, w.words + 4 * DONE, batch, CU_STREAM_WAIT_VALUE_GEQ));
        else
            CHECK(cu.StreamWaitEvent(w.step_stream, w.filled, 0));
        if (has_producer && !how.late)
            sem_post(&producer.wake);
        double in_launches = 0;
        for (int k = 0; k < w.launches; k++) {
            double t0 = now_us();
            launch_copy(w.small_dst, w.small_src, 4096, w.step_stream);
            in_launches += now_us() - t0;
        }
        if (has_producer && how.late)
            sem_post(&producer.wake);
        if (mode == PERSISTENT)
            CHECK(cu.StreamWriteValue32(w.step_stream, w.words + 4 * CONSUMED, batch, 0));
        else
            CHECK(cu.EventRecord(w.consumed, w.step_stream));
        CHECK(cu.MemcpyDtoHAsync(&readback, w.readback, 8, w.step_stream));
        CHECK(cu.StreamSynchronize(w.step_stream));
        double t = now_us();
        if (s >= 0) {
            period[s] = t - started;
            launch[s] = in_launches;
        }
        started = t;
    }
    /* Batches the producer made while the steps ran: it keeps up when it
     * made all but the last step's, which it may still be making. */
    int made = __atomic_load_n(&producer.batches, __ATOMIC_ACQUIRE);
    if (has_producer)
        pthread_join(thread, NULL); /* it makes the rest */
    if (mode == PERSISTENT)
        persistent_stop(2 * steps + 1);
    sem_destroy(&producer.wake);
    CHECK(cu.StreamSynchronize(w.copy_stream));
    H ctx;
    CHECK(cu.CtxPopCurrent(&ctx));
    /* The calls of the batches after the warm-up's. */
    double *timed_calls = mode == DEFERRED ? call : call + steps;
    int batches = mode == DEFERRED ? deferred_batches : has_producer ? steps : 0;
    int kept_up = !has_producer || made >= 2 * steps - 1;
    printf("%s%s %d %.3f %.3f %.3f %d\n", mode_names[mode], late, round, median(period, steps), median(launch, steps),
           median(timed_calls, batches), kept_up);
    fflush(stdout);
    free(period);
    free(launch);
    free(call);
}

/* The modes `list` names, up to `most`; most + 1 when it names more. */
static int parse_modes(const char *list, run *out, int most)
{
    int n = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (n == most) {
            n++;
            break;
        }
        char *at = strchr(name, '@');
        int late = at && strcmp(at, "@late") == 0, m = 0;
        if (late)
            *at = '\0';
        while (m < MODES && strcmp(name, mode_names[m]))
            m++;
        if (m == MODES || (at && !late) || (late && (m == NONE || m == DEFERRED))) {
            fprintf(stderr, "driver_lock: no mode %s%s\n", name, late ? "@late" : "");
            exit(2);
        }
        out[n++] = (run){(enum mode)m, late};
    }
    free(copy);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s STEPS ROUNDS LAUNCHES BATCH_BYTES MODE[,MODE...]\n", argv[0]);
        return 2;
    }
    int steps = atoi(argv[1]), rounds = atoi(argv[2]), launches = atoi(argv[3]);
    long long batch = atoll(argv[4]);
    run modes[64];
    int n_modes = parse_modes(argv[5], modes, 64);
    if (steps < 1 || rounds < 1 || launches < 1 || batch < 4096 || batch % 4 || n_modes < 1 || n_modes > 64) {
        fprintf(stderr, "driver_lock: expected STEPS, ROUNDS, LAUNCHES >= 1, BATCH_BYTES >= 4096 (a multiple of "
                        "4) and up to 64 modes\n");
        return 2;
    }
    setup(launches, (size_t)batch);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n_modes; i++)
            run_mode(modes[i], r, steps);
    teardown();
    return 0;
}
