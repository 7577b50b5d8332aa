/* tq_cuda_held.c: array datasets held in device memory (TQ_GATHER_DEVICE,
 * Feeder(device=True)).  tq_cuda_rows.c attaches the sources' byte ranges
 * here: each is copied once into memory of the ring's context, and each
 * batch is gathered from there into the slot by one kernel per component
 * (tq_gather_rows.cu), on the copy stream, after the batch's row numbers.
 * Nothing crosses the bus per batch but 8 bytes a row. */
#include "tq_cuda_backend.h"

#include <stdlib.h>
#include <string.h>

/* The device copy keeps the host range's address modulo this, so a row
 * aligned on the host is aligned on the device as well (the kernel's unit). */
#define HELD_ALIGN 256

/* Bytes copied up per call: bounds the driver's pageable staging per call. */
#define UPLOAD_CHUNK ((size_t)64 << 20)

static double gib(size_t bytes) { return (double)bytes / (double)(1ull << 30); }

tq_code cuda_held_fits(cuda_backend *b, size_t total, tq_error *err)
{
    size_t free_bytes = 0, all = 0;
    tq_code code = TQ_OK;
    (void)b;
    CU(MemGetInfo, (&free_bytes, &all));
    if (total > free_bytes)
        return tq_set_error(err, TQ_ENOMEM,
                            "the array dataset takes %.3g GiB of device memory (with its row numbers) and the GPU "
                            "has %.3g GiB free of %.3g GiB",
                            gib(total), gib(free_bytes), gib(all));
fail:
    return code;
}

tq_code cuda_hold_range(cuda_backend *b, char *start, char *end, attachment *out, tq_error *err)
{
    size_t bytes = (size_t)(end - start), lead = (uintptr_t)start % HELD_ALIGN;
    CUdeviceptr held = 0;
    tq_code code = TQ_OK;
    CU(MemAlloc, (&held, bytes + lead + !bytes));
    for (size_t done = 0; done < bytes; done += UPLOAD_CHUNK) {
        size_t chunk = bytes - done < UPLOAD_CHUNK ? bytes - done : UPLOAD_CHUNK;
        CU(MemcpyHtoDAsync, (held + lead + done, start + done, chunk, b->copy_stream));
    }
    CU(StreamSynchronize, (b->copy_stream)); /* the caller may change its arrays once attached */
    cuda_count_allocated((int64_t)(bytes + lead + !bytes), 0);
    *out = (attachment){
        start, end, NULL, held, bytes + lead + !bytes, (long long)(held + lead - (CUdeviceptr)(uintptr_t)start)};
    return TQ_OK;
fail:
    if (held)
        tq_cu.MemFree(held);
    return code;
}

void cuda_release_held(attachment *at)
{
    if (!at->held)
        return;
    tq_cu.MemFree(at->held);
    cuda_count_allocated(-(int64_t)at->held_bytes, 0);
    at->held = 0;
    at->held_bytes = 0;
}

static tq_code held_index_alloc(cuda_backend *b, int64_t rows, tq_error *err)
{
    size_t bytes = (size_t)b->capacity * (size_t)(rows > 0 ? rows : 1) * sizeof(int64_t);
    int registered = 0;
    tq_code code = TQ_OK;
    /* Page-locked, so that the copy of a batch's row numbers is asynchronous. */
    void *host = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!host)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory for the row numbers (%zu bytes)", bytes);
    CU(MemHostRegister, (host, bytes, CU_MEMHOSTREGISTER_PORTABLE));
    registered = 1;
    CU(MemAlloc, (&b->index_device, bytes));
    b->index_host = host;
    b->index_rows = rows > 0 ? rows : 1;
    cuda_count_allocated((int64_t)bytes, (int64_t)bytes);
    return TQ_OK;
fail:
    if (registered)
        tq_cu.MemHostUnregister(host);
    free(host);
    b->index_device = 0;
    return code;
}

void cuda_held_index_free(cuda_backend *b)
{
    if (!b->index_host)
        return;
    size_t bytes = (size_t)b->capacity * (size_t)b->index_rows * sizeof(int64_t);
    tq_cu.MemHostUnregister(b->index_host);
    free(b->index_host);
    tq_cu.MemFree(b->index_device);
    cuda_count_allocated(-(int64_t)bytes, -(int64_t)bytes);
    b->index_host = NULL;
    b->index_device = 0;
    b->index_rows = 0;
}

/* Room for the row numbers of `rows`-row batches (ctx current, gather_lock
 * held): made at the first gather, and remade larger (after the gathers in
 * flight, which read the old) when a batch outgrows it. */
static tq_code held_index_room(cuda_backend *b, int64_t rows, tq_error *err)
{
    tq_code code = TQ_OK;
    if (b->index_host && rows <= b->index_rows)
        return TQ_OK;
    if (b->index_host) {
        CU(StreamSynchronize, (b->copy_stream));
        cuda_held_index_free(b);
    }
    code = held_index_alloc(b, rows, err);
fail:
    return code;
}

/* The widest unit (16, 8, 4, 2 or 1 bytes) dividing every address and size
 * the kernel steps by. */
static int gather_unit(CUdeviceptr src, long long stride, size_t row_bytes, CUdeviceptr dst)
{
    uint64_t bits = (uint64_t)src | (uint64_t)(stride < 0 ? -stride : stride) | row_bytes | (uint64_t)dst;
    for (int unit = 16; unit > 1; unit /= 2)
        if (bits % (uint64_t)unit == 0)
            return unit;
    return 1;
}

/* One kernel: rows idx[0..rows) of part's held source into the slot. */
static tq_code launch_gather(cuda_backend *b, CUfunction fn, int slot, const tq_row_part *part, const attachment *at,
                             CUdeviceptr idx, int64_t rows, tq_error *err)
{
    tq_code code = TQ_OK;
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)part->src.base + (CUdeviceptr)at->to_device;
    CUdeviceptr dst = b->device[slot] + part->offset;
    long long stride = (long long)part->src.stride;
    int unit = gather_unit(src, stride, part->row_bytes, dst);
    unsigned long long row_units = part->row_bytes / (size_t)unit, n = row_units * (unsigned long long)rows;
    unsigned long long blocks = (n + 255) / 256;
    void *params[] = {&src, &stride, &idx, &dst, &row_units, &n, &unit};
    if (!n)
        return TQ_OK;
    /* A grid of at most 8192 blocks of 256 threads covers the H200's SMs
     * many times over; larger batches loop inside the kernel. */
    CU(LaunchKernel,
       (fn, (unsigned int)(blocks < 8192 ? blocks : 8192), 1, 1, 256, 1, 1, 0, b->copy_stream, params, NULL));
fail:
    return code;
}

tq_code cuda_gather_held(cuda_backend *b, int slot, const tq_row_part *parts, const attachment *const *held, int n,
                         const int64_t *idx, int64_t rows, tq_error *err)
{
    CUfunction fn;
    tq_code code;
    if ((code = held_index_room(b, rows, err)) != TQ_OK ||
        (code = cuda_kernel(b, TQ_KERNEL_GATHER_ROWS, &fn, err)) != TQ_OK)
        return code;
    /* The slot's row numbers were last read by its previous gather, which
     * its producer waited for (before_write: the slot's filled event). */
    int64_t *host = b->index_host + (size_t)slot * (size_t)b->index_rows;
    CUdeviceptr device = b->index_device + (CUdeviceptr)((size_t)slot * (size_t)b->index_rows * sizeof(int64_t));
    memcpy(host, idx, (size_t)rows * sizeof *idx);
    CU(MemcpyHtoDAsync, (device, host, (size_t)rows * sizeof *idx, b->copy_stream));
    for (int c = 0; c < n && code == TQ_OK; c++)
        if (held[c])
            code = launch_gather(b, fn, slot, &parts[c], held[c], device, rows, err);
fail:
    return code;
}
