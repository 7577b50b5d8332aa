/* bench/persistent_gather.cu: issue 43.2's other producer, a gather kernel
 * launched once that takes each batch's row numbers from host memory mapped
 * for the device, so that its producer makes no driver call at all per batch
 * (bench/driver_lock.c's mode "persistent").  A probe, not part of the
 * package: scripts/gen_ptx.sh turns it into bench/persistent_gather_ptx.h.
 *
 * Batches are numbered from 1.  The handshake's words:
 *   host[0]   posted    the host's last batch, whose row numbers are in
 *                       rows_of[posted % 2]; negative: the kernel returns
 *   host[1]   done      the last batch gathered, for the host
 *   device[0] go        block 0's word to the others: the batch to gather
 *   device[1] consumed  the step's last batch read, written by its stream
 *                       (cuStreamWriteValue32): batch k overwrites slot
 *                       k % 2 only once batch k - 2 is consumed
 *   device[2] done      the last batch gathered: the step's stream waits
 *                       for it (cuStreamWaitValue32)
 *   device[3] arrived   blocks done, counted over all batches
 *   device[4...]        the batch's row numbers, copied by block 0
 * host[] is mapped host memory, device[] device memory.  Only block 0
 * reads across the bus (the posted word, then the row numbers, once): each
 * read there is a transaction of its own, and every block reading them
 * slowed the step in step with the number of blocks (doc/bench/notes.rst).
 * Two slots let batch k + 1's gather overlap step k, as a ring's do.  Every
 * block gathers its share of each batch; the last to finish one publishes
 * it.  Row r of a batch is row rows_of[r] of src; units are 16 bytes, so
 * that few blocks keep enough loads in flight. */

#define MAX_ROWS 1024
enum { GO, CONSUMED, DONE, ARRIVED };

struct __align__(16) unit16 { unsigned long long a, b; };

struct persistent_args {
    unit16 *slot[2];
    const unit16 *src;
    unsigned long long row_units; /* 16-byte units per row */
    unsigned long long rows;      /* per batch, at most MAX_ROWS */
    volatile int *host;
    const volatile long long *rows_of; /* rows_of[2][rows]: mapped host memory */
    volatile int *device;
};

/* Block 0's first thread: batch k once it is posted and its slot is free, or -1 to stop. */
__device__ int next_batch_across_the_bus(const persistent_args &a, int k)
{
    int posted;
    while ((posted = a.host[0]) >= 0 && (posted < k || a.device[CONSUMED] < k - 2))
        __nanosleep(500);
    __threadfence_system(); /* the row numbers are read after the word that posted them */
    return posted < 0 ? -1 : k;
}

/* The other blocks' first threads: block 0's word. */
__device__ int next_batch_on_the_device(const persistent_args &a, int k)
{
    int go;
    while ((go = a.device[GO]) >= 0 && go < k)
        __nanosleep(100);
    __threadfence();
    return go < 0 ? -1 : k;
}

extern "C" __global__ void tq_persistent_gather(persistent_args a)
{
    __shared__ long long rows[MAX_ROWS];
    __shared__ int batch;
    volatile long long *device_rows = (volatile long long *)(a.device + 4);
    for (int k = 1;; k++) {
        if (threadIdx.x == 0)
            batch = blockIdx.x == 0 ? next_batch_across_the_bus(a, k) : next_batch_on_the_device(a, k);
        __syncthreads();
        if (batch < 0) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                a.device[GO] = -1;
            return;
        }
        if (blockIdx.x == 0) { /* the row numbers, across the bus once, for every block */
            const volatile long long *posted_rows = a.rows_of + (unsigned long long)(k % 2) * a.rows;
            for (unsigned int r = threadIdx.x; r < a.rows; r += blockDim.x)
                device_rows[(k % 2) * MAX_ROWS + r] = rows[r] = posted_rows[r];
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0)
                a.device[GO] = k;
        } else {
            for (unsigned int r = threadIdx.x; r < a.rows; r += blockDim.x)
                rows[r] = device_rows[(k % 2) * MAX_ROWS + r];
            __syncthreads();
        }
        unit16 *dst = a.slot[k % 2];
        const unsigned int n = (unsigned int)(a.rows * a.row_units), units = (unsigned int)a.row_units;
        for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            unsigned int row = i / units;
            dst[i] = a.src[rows[row] * units + (i - row * units)];
        }
        __threadfence(); /* this block's share is visible before it is counted */
        __syncthreads();
        if (threadIdx.x == 0 && atomicAdd((unsigned int *)&a.device[ARRIVED], 1u) + 1u == gridDim.x * (unsigned int)k) {
            a.device[DONE] = k;
            __threadfence_system();
            a.host[1] = k;
        }
        __syncthreads(); /* rows[] and batch are rewritten only once every thread is past them */
    }
}
