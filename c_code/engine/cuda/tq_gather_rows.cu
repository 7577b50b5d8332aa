/* tq_gather_rows.cu: the kernel that gathers a batch of an array dataset
 * held in device memory (Feeder(device=True), c_code/engine/cuda/tq_cuda_held.c) into
 * a slot.  Like tq_strided.cu, not compiled when the package builds:
 * scripts/gen_ptx.sh turns it into PTX text (c_code/generated/tq_gather_rows_ptx.h)
 * that the backend loads with cuModuleLoadData.
 *
 * One launch gathers up to TQ_GATHER_PARTS components of the batch, one
 * row of blocks (blockIdx.y) each: a launch costs the host microseconds, as
 * much as a small step's dequeue otherwise takes (doc/bench/notes.rst).
 * Row r of the batch is row idx[r] of the part's source, rows `stride`
 * bytes apart (any sign); idx may be host memory mapped for the device (a
 * small batch's row numbers, read where the host wrote them).  Thread i
 * copies the i-th unit of its part, in C order; a unit is 16, 8, 4, 2 or 1
 * bytes, the widest that divides the source's address, the stride, the
 * row's bytes and the destination (the host chooses it), so loads and
 * stores are aligned and coalesced.  Each thread loads UNROLL units (a
 * grid's width apart) before it stores any: one load in flight per thread
 * leaves the device's memory idle between them.  The unit's row and column
 * come from a 32-bit division when the part has fewer than 2^31 units
 * (always, in practice), a 64-bit one otherwise. */

#define UNROLL 4

struct __align__(16) unit16 { unsigned long long a, b; };

template <typename T, typename I>
__device__ T load_unit(const char *__restrict__ src, long long stride, const long long *__restrict__ idx, I row_units,
                       I i)
{
    I row = i / row_units, col = i - row * row_units;
    return ((const T *)(src + idx[row] * stride))[col];
}

template <typename T, typename I>
__device__ void gather_units(const char *__restrict__ src, long long stride, const long long *__restrict__ idx,
                             T *__restrict__ dst, I row_units, I n)
{
    I step = (I)gridDim.x * blockDim.x, i = (I)blockIdx.x * blockDim.x + threadIdx.x;
    for (; n > (I)(UNROLL - 1) * step && i < n - (I)(UNROLL - 1) * step; i += (I)UNROLL * step) {
        T v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            v[k] = load_unit<T, I>(src, stride, idx, row_units, i + (I)k * step);
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            dst[i + (I)k * step] = v[k];
    }
    for (; i < n; i += step)
        dst[i] = load_unit<T, I>(src, stride, idx, row_units, i);
}

template <typename T>
__device__ void gather_rows(const char *src, long long stride, const long long *idx, char *dst,
                            unsigned long long row_units, unsigned long long n)
{
    if (n <= 0x7fffffffull) /* i + UNROLL * step stays below 2^32 */
        gather_units<T, unsigned int>(src, stride, idx, (T *)dst, (unsigned int)row_units, (unsigned int)n);
    else
        gather_units<T, unsigned long long>(src, stride, idx, (T *)dst, row_units, n);
}

/* The parts of one launch, as tq_cuda_held.c lays them out (its tq_gather_parts). */
#define TQ_GATHER_PARTS 8
struct tq_gather_parts {
    const char *src[TQ_GATHER_PARTS];
    char *dst[TQ_GATHER_PARTS];
    long long stride[TQ_GATHER_PARTS];
    unsigned long long row_units[TQ_GATHER_PARTS], n[TQ_GATHER_PARTS];
    int unit[TQ_GATHER_PARTS];
};

extern "C" __global__ void tq_gather_rows(tq_gather_parts p, const long long *idx)
{
    const int k = blockIdx.y;
    const char *src = p.src[k];
    char *dst = p.dst[k];
    long long stride = p.stride[k];
    unsigned long long row_units = p.row_units[k], n = p.n[k];
    switch (p.unit[k]) {
    case 16: gather_rows<unit16>(src, stride, idx, dst, row_units, n); break;
    case 8: gather_rows<unsigned long long>(src, stride, idx, dst, row_units, n); break;
    case 4: gather_rows<unsigned int>(src, stride, idx, dst, row_units, n); break;
    case 2: gather_rows<unsigned short>(src, stride, idx, dst, row_units, n); break;
    default: gather_rows<unsigned char>(src, stride, idx, dst, row_units, n); break;
    }
}
