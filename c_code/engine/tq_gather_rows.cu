/* tq_gather_rows.cu: the kernel that gathers a batch of an array dataset
 * held in device memory (Feeder(device=True), c_code/engine/tq_cuda_held.c) into
 * a slot.  Like tq_strided.cu, not compiled when the package builds:
 * scripts/gen_ptx.sh turns it into PTX text (c_code/generated/tq_gather_rows_ptx.h)
 * that the backend loads with cuModuleLoadData.
 *
 * Row r of the batch is row idx[r] of the source, rows `stride` bytes apart
 * (any sign).  Thread i copies the i-th unit of the batch, in C order; a
 * unit is 16, 8, 4, 2 or 1 bytes, the widest that divides the source's
 * address, the stride, the row's bytes and the destination (the host
 * chooses it), so loads and stores are aligned and coalesced.  The unit's
 * row and column come from a 32-bit division when the batch has fewer than
 * 2^32 units (always, in practice), a 64-bit one otherwise. */

struct __align__(16) unit16 { unsigned long long a, b; };

template <typename T, typename I>
__device__ void gather_units(const char *src, long long stride, const long long *idx, T *dst, I row_units, I n)
{
    I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I row = i / row_units, col = i - row * row_units;
        dst[i] = ((const T *)(src + idx[row] * stride))[col];
    }
}

template <typename T>
__device__ void gather_rows(const char *src, long long stride, const long long *idx, char *dst,
                            unsigned long long row_units, unsigned long long n)
{
    if (n <= 0xffffffffull)
        gather_units<T, unsigned int>(src, stride, idx, (T *)dst, (unsigned int)row_units, (unsigned int)n);
    else
        gather_units<T, unsigned long long>(src, stride, idx, (T *)dst, row_units, n);
}

extern "C" __global__ void tq_gather_rows(const char *src, long long stride, const long long *idx, char *dst,
                                          unsigned long long row_units, unsigned long long n, int unit)
{
    switch (unit) {
    case 16: gather_rows<unit16>(src, stride, idx, dst, row_units, n); break;
    case 8: gather_rows<unsigned long long>(src, stride, idx, dst, row_units, n); break;
    case 4: gather_rows<unsigned int>(src, stride, idx, dst, row_units, n); break;
    case 2: gather_rows<unsigned short>(src, stride, idx, dst, row_units, n); break;
    default: gather_rows<unsigned char>(src, stride, idx, dst, row_units, n); break;
    }
}
