/* tq_strided.cu: the one kernel of the CUDA backend, for device-array puts
 * whose layout a memcpy cannot read (any strides, negative ones included).
 * Not compiled when the package builds: scripts/gen_ptx.sh turns it
 * into PTX text (c_code/generated/tq_strided_ptx.h) that the backend loads with
 * cuModuleLoadData, so gcc alone builds the package.
 *
 * Thread i copies the i-th unit (in C order) of a strided source into a
 * contiguous destination.  A unit is 1, 2, 4 or 8 bytes, the widest that
 * divides the source's address, strides and itemsize (the host chooses it):
 * aligned loads without knowing the dtype. */
#define TQ_STRIDED_MAX_DIMS 8

struct tq_strided_desc {
    long long shape[TQ_STRIDED_MAX_DIMS];   /* in units; the innermost last */
    long long strides[TQ_STRIDED_MAX_DIMS]; /* in bytes, any sign */
    long long n;                            /* units in all */
    int ndim;
    int unit; /* bytes: 1, 2, 4 or 8 */
};

template <typename T> __device__ void copy_units(const char *src, T *dst, const tq_strided_desc &d)
{
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.n; i += step) {
        long long rest = i, offset = 0;
        for (int k = d.ndim - 1; k >= 0; k--) {
            offset += (rest % d.shape[k]) * d.strides[k];
            rest /= d.shape[k];
        }
        dst[i] = *(const T *)(src + offset);
    }
}

extern "C" __global__ void tq_strided_copy(const char *src, char *dst, tq_strided_desc d)
{
    switch (d.unit) {
    case 8: copy_units(src, (unsigned long long *)dst, d); break;
    case 4: copy_units(src, (unsigned int *)dst, d); break;
    case 2: copy_units(src, (unsigned short *)dst, d); break;
    default: copy_units(src, (unsigned char *)dst, d); break;
    }
}
