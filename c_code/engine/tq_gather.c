/* tq_gather.c: see tq_gather.h.  The rows are cut into chunks of about the
 * pool's chunk size; each chunk copies its runs of consecutive indices, or,
 * for rows with a layout, walks each row's elements (cast on the way). */
#include "tq_gather.h"

#include <string.h>

#include "tq_copy.h"

/* ---- element loops --------------------------------------------------------------- */

/* Reads n elements `step` bytes apart into n contiguous ones of the slot's type.
 * memcpy for every access: memmaps and views need not be aligned. */
typedef void (*convert_fn)(char *dst, const char *src, int64_t n, ptrdiff_t step);

/* IEEE half to float: the exponent rebiased, subnormals normalised, inf/NaN kept. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (mant << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    else if (!mant)
        bits = sign;
    else {
        exp = 113;
        while (!(mant & 0x400))
            mant <<= 1, exp--;
        bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The source types as C types, and how one is read as a number. */
#define READ_PLAIN(v) (v)
#define READ_BOOL(v) ((v) != 0)
#define READ_HALF(v) half_to_float(v)
#define SOURCES(X, TO)                       \
    X(TQ_BOOL, unsigned char, READ_BOOL, TO) \
    X(TQ_INT8, int8_t, READ_PLAIN, TO)       \
    X(TQ_UINT8, uint8_t, READ_PLAIN, TO)     \
    X(TQ_INT16, int16_t, READ_PLAIN, TO)     \
    X(TQ_UINT16, uint16_t, READ_PLAIN, TO)   \
    X(TQ_INT32, int32_t, READ_PLAIN, TO)     \
    X(TQ_UINT32, uint32_t, READ_PLAIN, TO)   \
    X(TQ_INT64, int64_t, READ_PLAIN, TO)     \
    X(TQ_UINT64, uint64_t, READ_PLAIN, TO)   \
    X(TQ_FLOAT16, uint16_t, READ_HALF, TO)   \
    X(TQ_FLOAT32, float, READ_PLAIN, TO)     \
    X(TQ_FLOAT64, double, READ_PLAIN, TO)
/* The types a loop writes (float16: none, see tq_gather_converts). */
#define TARGETS(X)            \
    X(TQ_BOOL, unsigned char) \
    X(TQ_INT8, int8_t)        \
    X(TQ_UINT8, uint8_t)      \
    X(TQ_INT16, int16_t)      \
    X(TQ_UINT16, uint16_t)    \
    X(TQ_INT32, int32_t)      \
    X(TQ_UINT32, uint32_t)    \
    X(TQ_INT64, int64_t)      \
    X(TQ_UINT64, uint64_t)    \
    X(TQ_FLOAT32, float)      \
    X(TQ_FLOAT64, double)

#define CONVERT_LOOP(FROM, FROM_T, READ, TO)                                                 \
    static void convert_##FROM##_##TO(char *dst, const char *src, int64_t n, ptrdiff_t step) \
    {                                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                    \
            FROM_T v;                                                                        \
            memcpy(&v, src + i * step, sizeof v);                                            \
            TO##_T out = (TO##_T)READ(v);                                                    \
            memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);                          \
        }                                                                                    \
    }
#define TQ_BOOL_T unsigned char
#define TQ_INT8_T int8_t
#define TQ_UINT8_T uint8_t
#define TQ_INT16_T int16_t
#define TQ_UINT16_T uint16_t
#define TQ_INT32_T int32_t
#define TQ_UINT32_T uint32_t
#define TQ_INT64_T int64_t
#define TQ_UINT64_T uint64_t
#define TQ_FLOAT32_T float
#define TQ_FLOAT64_T double
#define LOOPS_INTO(TO, TO_T) SOURCES(CONVERT_LOOP, TO)
TARGETS(LOOPS_INTO)

#define TABLE_ENTRY(FROM, FROM_T, READ, TO) [FROM][TO] = convert_##FROM##_##TO,
#define TABLE_INTO(TO, TO_T) SOURCES(TABLE_ENTRY, TO)
static const convert_fn converters[TQ_N_SCALARS][TQ_N_SCALARS] = {TARGETS(TABLE_INTO)};

/* The same type, elements apart: one copy per element, of its size. */
#define COPY_LOOP(SIZE)                                                            \
    static void copy_##SIZE(char *dst, const char *src, int64_t n, ptrdiff_t step) \
    {                                                                              \
        for (int64_t i = 0; i < n; i++)                                            \
            memcpy(dst + (size_t)i * SIZE, src + i * step, SIZE);                  \
    }
COPY_LOOP(1)
COPY_LOOP(2)
COPY_LOOP(4)
COPY_LOOP(8)

static const size_t scalar_sizes[TQ_N_SCALARS] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};

size_t tq_scalar_size(tq_scalar type) { return (unsigned)type < TQ_N_SCALARS ? scalar_sizes[type] : 0; }

int tq_gather_converts(tq_scalar from, tq_scalar to)
{
    if ((unsigned)from >= TQ_N_SCALARS || (unsigned)to >= TQ_N_SCALARS)
        return 0;
    return from == to || converters[from][to] != NULL;
}

static convert_fn element_loop(const tq_row_layout *layout)
{
    if (layout->from != layout->to)
        return converters[layout->from][layout->to];
    switch (scalar_sizes[layout->from]) {
    case 1: return copy_1;
    case 2: return copy_2;
    case 4: return copy_4;
    default: return copy_8;
    }
}

/* One row: every run along the last axis through `loop` (a memcpy where the
 * run is the slot's bytes already), the other axes counted like an
 * odometer.  Returns dst past the row. */
static char *walk_row(char *dst, const char *row, const tq_row_layout *layout, convert_fn loop, size_t out_size)
{
    int inner = layout->ndim - 1;
    if (inner < 0) { /* a row of one element */
        loop(dst, row, 1, 0);
        return dst + out_size;
    }
    int64_t at[TQ_ROW_MAX_DIMS] = {0}, run = layout->shape[inner];
    ptrdiff_t step = layout->strides[inner];
    int contiguous = layout->from == layout->to && step == (ptrdiff_t)out_size;
    for (;;) {
        if (contiguous)
            memcpy(dst, row, (size_t)run * out_size);
        else
            loop(dst, row, run, step);
        dst += (size_t)run * out_size;
        int d = inner - 1;
        for (; d >= 0; d--) {
            row += layout->strides[d];
            if (++at[d] < layout->shape[d])
                break;
            row -= layout->strides[d] * layout->shape[d];
            at[d] = 0;
        }
        if (d < 0)
            return dst;
    }
}

typedef struct {
    char *dst;
    const tq_rows *src;
    size_t row_bytes;
    const int64_t *idx;
    int64_t n, rows_per_chunk;
    int streaming; /* a large gather: streaming stores keep it out of the cache */
} gather_job;

/* The rows of one chunk, each walked element by element. */
static void gather_chunk_walked(const gather_job *job, int64_t r, int64_t end)
{
    const tq_row_layout *layout = job->src->layout;
    convert_fn loop = element_loop(layout);
    size_t out_size = scalar_sizes[layout->to];
    char *to = job->dst + (size_t)r * job->row_bytes;
    for (; r < end; r++)
        to = walk_row(to, (const char *)job->src->base + job->idx[r] * job->src->stride, layout, loop, out_size);
}

static void gather_chunk(void *arg, size_t chunk)
{
    const gather_job *job = arg;
    if (job->src->layout) {
        int64_t r = (int64_t)chunk * job->rows_per_chunk;
        gather_chunk_walked(job, r, r + job->rows_per_chunk < job->n ? r + job->rows_per_chunk : job->n);
        return;
    }
    const char *base = job->src->base;
    ptrdiff_t stride = job->src->stride;
    /* Consecutive rows are one block only when the source is row-contiguous. */
    int merge = stride == (ptrdiff_t)job->row_bytes;
    int64_t r = (int64_t)chunk * job->rows_per_chunk;
    int64_t end = r + job->rows_per_chunk < job->n ? r + job->rows_per_chunk : job->n;
    while (r < end) {
        int64_t first = job->idx[r], run = 1;
        while (merge && r + run < end && job->idx[r + run] == first + run)
            run++;
        char *to = job->dst + (size_t)r * job->row_bytes;
        const char *from = base + first * stride;
        size_t bytes = (size_t)run * job->row_bytes;
        if (job->streaming)
            tq_copy_stream(to, from, bytes);
        else
            memcpy(to, from, bytes);
        r += run;
    }
}

void tq_gather(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n)
{
    if (n <= 0 || !row_bytes)
        return;
    size_t total = (size_t)n * row_bytes, chunk = tq_copy_chunk_bytes(total);
    int64_t per_chunk = (int64_t)(chunk / row_bytes);
    gather_job job = {dst, src, row_bytes, idx, n, per_chunk > 0 ? per_chunk : 1, chunk < total};
    tq_copy_parallel((size_t)((n + job.rows_per_chunk - 1) / job.rows_per_chunk), gather_chunk, &job);
}

const char *tq_gather_mechanism_name(tq_gather_mechanism mechanism)
{
    switch (mechanism) {
    case TQ_GATHER_HOST: return "host";
    case TQ_GATHER_BATCH: return "batch";
    case TQ_GATHER_DEVICE: return "device";
    default: return "auto";
    }
}

void tq_rows_span(const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, const char **lo, const char **hi)
{
    int64_t first = idx[0], last = idx[0];
    for (int64_t r = 1; r < n; r++) {
        first = idx[r] < first ? idx[r] : first;
        last = idx[r] > last ? idx[r] : last;
    }
    /* A negative stride (a reversed view) puts the last row lowest. */
    const char *a = (const char *)src->base + first * src->stride, *b = (const char *)src->base + last * src->stride;
    *lo = a < b ? a : b;
    *hi = (a < b ? b : a) + row_bytes;
}
