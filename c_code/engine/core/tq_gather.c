/* tq_gather.c: see tq_gather.h.  The rows are cut into chunks of about the
 * pool's chunk size; each chunk copies its runs of consecutive indices, or,
 * for rows with a layout, walks each row's elements (cast on the way).
 * Fortran-order rows of one type are split by columns instead (below). */
#include "tq_gather.h"

#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "tq_copy.h"

/* ---- element loops --------------------------------------------------------------- */

/* Reads n elements `step` bytes apart into n contiguous ones of the slot's type.
 * memcpy for every access: memmaps and views need not be aligned. */
typedef void (*convert_fn)(char *dst, const char *src, int64_t n, ptrdiff_t step);

/* The source types as C types, and how one is read as a number. */
#define READ_PLAIN(v) (v)
#define READ_BOOL(v) ((v) != 0)
#define READ_HALF(v) tq_half_to_float(v)
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
/* The types a loop writes, and how a number read becomes one (float16: rounded to nearest even). */
#define TARGETS(X)            \
    X(TQ_BOOL, unsigned char) \
    X(TQ_FLOAT16, uint16_t)   \
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

/* A run of a row: contiguous sources get a loop of their own (one the compiler can unroll and vectorise). */
#define CONVERT_LOOP(FROM, FROM_T, READ, TO)                                                 \
    static void convert_##FROM##_##TO(char *dst, const char *src, int64_t n, ptrdiff_t step) \
    {                                                                                        \
        FROM_T v;                                                                            \
        TO##_T out;                                                                          \
        if (step == (ptrdiff_t)sizeof v) {                                                   \
            for (int64_t i = 0; i < n; i++) {                                                \
                memcpy(&v, src + (size_t)i * sizeof v, sizeof v);                            \
                out = TO##_OUT(READ(v));                                                     \
                memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);                      \
            }                                                                                \
            return;                                                                          \
        }                                                                                    \
        for (int64_t i = 0; i < n; i++, src += step) {                                       \
            memcpy(&v, src, sizeof v);                                                       \
            out = TO##_OUT(READ(v));                                                         \
            memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);                          \
        }                                                                                    \
    }
/* A column of a block of rows cast (the column walk, below): element k read at src + from[k], written at
 * dst + to[k], the element PREFETCH rows on (or, past the block's end, the next column's) asked for
 * meanwhile: each read is a cache line of its own, which no hardware prefetcher foresees. */
#define PREFETCH 16
#define COLUMN_LOOP(NAME, FROM_T, TO_T, READ, OUT)                                                                     \
    static void NAME(char *dst, const char *src, const ptrdiff_t *from, const size_t *to, int64_t n, const char *next) \
    {                                                                                                                  \
        for (int64_t k = 0; k < n; k++) {                                                                              \
            int64_t ahead = k + PREFETCH;                                                                              \
            if (ahead < n)                                                                                             \
                __builtin_prefetch(src + from[ahead]);                                                                 \
            else if (next && ahead - n < n)                                                                            \
                __builtin_prefetch(next + from[ahead - n]);                                                            \
            FROM_T v;                                                                                                  \
            memcpy(&v, src + from[k], sizeof v);                                                                       \
            TO_T out = OUT(READ(v));                                                                                   \
            memcpy(dst + to[k], &out, sizeof out);                                                                     \
        }                                                                                                              \
    }
typedef void (*column_fn)(char *dst, const char *src, const ptrdiff_t *from, const size_t *to, int64_t n,
                          const char *next);
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
#define TQ_FLOAT16_T uint16_t
#define TQ_BOOL_OUT(x) ((unsigned char)(x))
#define TQ_INT8_OUT(x) ((int8_t)(x))
#define TQ_UINT8_OUT(x) ((uint8_t)(x))
#define TQ_INT16_OUT(x) ((int16_t)(x))
#define TQ_UINT16_OUT(x) ((uint16_t)(x))
#define TQ_INT32_OUT(x) ((int32_t)(x))
#define TQ_UINT32_OUT(x) ((uint32_t)(x))
#define TQ_INT64_OUT(x) ((int64_t)(x))
#define TQ_UINT64_OUT(x) ((uint64_t)(x))
#define TQ_FLOAT16_OUT(x) tq_float_to_half((float)(x))
#define TQ_FLOAT32_OUT(x) ((float)(x))
#define TQ_FLOAT64_OUT(x) ((double)(x))
#define CAST_COLUMN(FROM, FROM_T, READ, TO) COLUMN_LOOP(column_##FROM##_##TO, FROM_T, TO##_T, READ, TO##_OUT)
#define LOOPS_INTO(TO, TO_T) SOURCES(CONVERT_LOOP, TO) SOURCES(CAST_COLUMN, TO)
TARGETS(LOOPS_INTO)

#define TABLE_ENTRY(FROM, FROM_T, READ, TO) [FROM][TO] = convert_##FROM##_##TO,
#define TABLE_INTO(TO, TO_T) SOURCES(TABLE_ENTRY, TO)
static const convert_fn converters[TQ_N_SCALARS][TQ_N_SCALARS] = {TARGETS(TABLE_INTO)};
#define COLUMN_ENTRY(FROM, FROM_T, READ, TO) [FROM][TO] = column_##FROM##_##TO,
#define COLUMNS_INTO(TO, TO_T) SOURCES(COLUMN_ENTRY, TO)
static const column_fn cast_columns[TQ_N_SCALARS][TQ_N_SCALARS] = {TARGETS(COLUMNS_INTO)};

/* The same type, elements `step` apart: the bytes of each moved as one integer of its size, four at a
 * time (the reads do not wait on each other). */
#define COPY_LOOP(SIZE, T)                                                         \
    static void copy_##SIZE(char *dst, const char *src, int64_t n, ptrdiff_t step) \
    {                                                                              \
        T a, b, c, d;                                                              \
        int64_t i = 0;                                                             \
        for (; i + 4 <= n; i += 4, src += 4 * step, dst += 4 * SIZE) {             \
            memcpy(&a, src, SIZE);                                                 \
            memcpy(&b, src + step, SIZE);                                          \
            memcpy(&c, src + 2 * step, SIZE);                                      \
            memcpy(&d, src + 3 * step, SIZE);                                      \
            memcpy(dst, &a, SIZE);                                                 \
            memcpy(dst + SIZE, &b, SIZE);                                          \
            memcpy(dst + 2 * SIZE, &c, SIZE);                                      \
            memcpy(dst + 3 * SIZE, &d, SIZE);                                      \
        }                                                                          \
        for (; i < n; i++, src += step, dst += SIZE)                               \
            memcpy(dst, src, SIZE);                                                \
    }
COPY_LOOP(1, uint8_t)
COPY_LOOP(2, uint16_t)
COPY_LOOP(8, uint64_t)

/* 4-byte elements (float32, int32) are the common case, every other one (a view x[:, ::2]) the common
 * stride: two loads and a shuffle for four elements.  The loads reach 4 bytes past the group's last
 * element, so only while another element follows it in the run. */
static void copy_4(char *dst, const char *src, int64_t n, ptrdiff_t step)
{
    int64_t i = 0;
#ifdef __SSE2__
    if (step == 8)
        for (; i + 5 <= n; i += 4, src += 32, dst += 16) {
            __m128 lo = _mm_loadu_ps((const float *)src), hi = _mm_loadu_ps((const float *)(src + 16));
            _mm_storeu_ps((float *)dst, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
        }
#endif
    uint32_t a, b, c, d;
    for (; i + 4 <= n; i += 4, src += 4 * step, dst += 16) {
        memcpy(&a, src, 4);
        memcpy(&b, src + step, 4);
        memcpy(&c, src + 2 * step, 4);
        memcpy(&d, src + 3 * step, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + 4, &b, 4);
        memcpy(dst + 8, &c, 4);
        memcpy(dst + 12, &d, 4);
    }
    for (; i < n; i++, src += step, dst += 4)
        memcpy(dst, src, 4);
}

int tq_gather_converts(tq_scalar from, tq_scalar to)
{
    if ((unsigned)from >= TQ_N_SCALARS || (unsigned)to >= TQ_N_SCALARS)
        return 0;
    if (from == TQ_COMPLEX64 || from == TQ_COMPLEX128 || to == TQ_COMPLEX64 || to == TQ_COMPLEX128)
        return 0;
    return from == to || (tq_casts_safely(from, to) && converters[from][to] != NULL);
}

static convert_fn element_loop(const tq_row_layout *layout)
{
    if (layout->from != layout->to)
        return converters[layout->from][layout->to];
    switch (tq_scalar_size(layout->from)) {
    case 1: return copy_1;
    case 2: return copy_2;
    case 4: return copy_4;
    default: return copy_8;
    }
}

/* ---- the row walk: each row's elements in turn --------------------------------------- */

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
    size_t out_size = tq_scalar_size(layout->to);
    char *to = job->dst + (size_t)r * job->row_bytes;
    const char *base = job->src->base;
    /* A row of one axis whose elements are dense (less than a line apart): the next row's lines asked for
     * while this one is walked (rows lie anywhere: the first lines of each would wait for memory). */
    ptrdiff_t step = layout->ndim == 1 ? layout->strides[0] : 0;
    ptrdiff_t span = step > 0 && step < 64 ? step * (layout->shape[0] - 1) : 0;
    for (; r < end; r++) {
        if (span && r + 1 < end) {
            const char *next = base + job->idx[r + 1] * job->src->stride;
            for (ptrdiff_t at = 0; at < span; at += 64)
                __builtin_prefetch(next + at);
        }
        to = walk_row(to, base + job->idx[r] * job->src->stride, layout, loop, out_size);
    }
}

/* ---- the column walk: one element of every row of a block in turn ------------------- */

/* Rows closer to each other than a row's elements are (a Fortran-order array: rows 4 bytes apart, a
 * row's elements a column apart), with elements a cache line apart or more: a row walk would read
 * each element from a line, and a page, of its own, in no order.  The column walk reads element e of
 * every row of a block, the rows sorted by where they lie, then element e + 1: the reads of a column
 * go forward through it, a few pages for the whole block.  Rows of one element (labels) are one
 * column: one loop for the chunk.  This is the walk of rows cast on the way; rows of one type take the
 * split by columns below. */
#define COLUMN_MIN_STEP 64
#define COLUMN_BLOCK 256

static int walks_columns(const tq_rows *src)
{
    const tq_row_layout *layout = src->layout;
    if (layout->ndim == 0)
        return 1;
    ptrdiff_t step = layout->strides[layout->ndim - 1], rows = src->stride;
    step = step < 0 ? -step : step;
    rows = rows < 0 ? -rows : rows;
    return step >= COLUMN_MIN_STEP && rows < step;
}

typedef struct {
    ptrdiff_t from; /* the row's offset in the source */
    size_t to;      /* and in the block's rows */
} row_place;

static int by_source(const void *a, const void *b)
{
    ptrdiff_t x = ((const row_place *)a)->from, y = ((const row_place *)b)->from;
    return (x > y) - (x < y);
}

/* Moves *offset to the row's next element (C order of its axes); 0 past its last. */
static int next_element(const tq_row_layout *layout, int64_t *at, ptrdiff_t *offset)
{
    for (int d = layout->ndim - 1; d >= 0; d--) {
        *offset += layout->strides[d];
        if (++at[d] < layout->shape[d])
            return 1;
        *offset -= layout->strides[d] * layout->shape[d];
        at[d] = 0;
    }
    return 0;
}

static void gather_chunk_columns(const gather_job *job, int64_t r, int64_t end)
{
    const tq_row_layout *layout = job->src->layout;
    const char *base = job->src->base;
    column_fn loop = cast_columns[layout->from][layout->to];
    size_t out_size = tq_scalar_size(layout->to);
    row_place places[COLUMN_BLOCK];
    ptrdiff_t from[COLUMN_BLOCK];
    size_t to[COLUMN_BLOCK];
    for (; r < end; r += COLUMN_BLOCK) {
        int64_t m = end - r < COLUMN_BLOCK ? end - r : COLUMN_BLOCK;
        for (int64_t k = 0; k < m; k++)
            places[k] = (row_place){job->idx[r + k] * job->src->stride, (size_t)k * job->row_bytes};
        if (layout->ndim) /* a column of single elements needs no order: each is a row's whole */
            qsort(places, (size_t)m, sizeof *places, by_source);
        for (int64_t k = 0; k < m; k++)
            from[k] = places[k].from, to[k] = places[k].to;
        char *dst = job->dst + (size_t)r * job->row_bytes;
        int64_t at[TQ_ROW_MAX_DIMS] = {0};
        ptrdiff_t offset = 0;
        for (int more = 1; more; dst += out_size) {
            const char *column = base + offset;
            more = next_element(layout, at, &offset);
            loop(dst, column, from, to, m, more ? base + offset : NULL);
        }
    }
}

/* ---- the column walk split by columns: rows of one type ----------------------------- */

/* The batch's rows in its own order, every row's elements split among the threads in ranges of whole
 * 64-byte lines of a batch row (where the batch's rows start on a line, no two threads write one),
 * each range walked column by column over all the rows.  A thread then reads its own columns only:
 * fewer pages (and TLB entries) a thread than a split by rows, whose every thread reads every column.
 * No sort: a sort of the whole batch would run on one thread before the split, and with reads asked
 * for this far ahead their order matters little.  The prefetch runs SPLIT_AHEAD reads ahead on a
 * cursor of its own, across columns, into L2 (prefetcht1: each line is read once, and L1 is too small
 * to hold what is on its way).  Few elements and many rows (labels, narrow rows): the rows are split
 * as well.  bench/lines_roof.c measures it against the C-contiguous gather, and other prefetch distances
 * and hints (-DSPLIT_AHEAD=, -DSPLIT_LOCALITY= at build) against these, the best on the H200's host. */
#ifndef SPLIT_AHEAD
#define SPLIT_AHEAD 64
#endif
#ifndef SPLIT_LOCALITY
#define SPLIT_LOCALITY 2 /* prefetcht1 */
#endif

typedef void (*split_fn)(char *dst, const char *base, const tq_row_layout *layout, int64_t *at, ptrdiff_t offset,
                         int64_t columns, const int64_t *idx, ptrdiff_t stride, int64_t m, size_t row_bytes);

/* `columns` elements of rows idx[0..m), from the element at `at` (its offset in a row `offset`). */
#define SPLIT_LOOP(SIZE, T)                                                                                           \
    static void split_##SIZE(char *dst, const char *base, const tq_row_layout *layout, int64_t *at, ptrdiff_t offset, \
                             int64_t columns, const int64_t *idx, ptrdiff_t stride, int64_t m, size_t row_bytes)      \
    {                                                                                                                 \
        int64_t ahead_at[TQ_ROW_MAX_DIMS], ahead_k = 0, ahead_c = 0;                                                  \
        ptrdiff_t ahead_offset = offset;                                                                              \
        memcpy(ahead_at, at, sizeof ahead_at);                                                                        \
        for (int i = 0; i < SPLIT_AHEAD && ahead_c < columns; i++)                                                    \
            if (++ahead_k == m)                                                                                       \
                ahead_k = 0, ahead_c++, next_element(layout, ahead_at, &ahead_offset);                                \
        for (int64_t c = 0; c < columns; c++, dst += SIZE) {                                                          \
            const char *column = base + offset;                                                                       \
            char *out = dst;                                                                                          \
            for (int64_t k = 0; k < m; k++, out += row_bytes) {                                                       \
                if (ahead_c < columns) {                                                                              \
                    __builtin_prefetch(base + ahead_offset + idx[ahead_k] * stride, 0, SPLIT_LOCALITY);               \
                    if (++ahead_k == m)                                                                               \
                        ahead_k = 0, ahead_c++, next_element(layout, ahead_at, &ahead_offset);                        \
                }                                                                                                     \
                T v;                                                                                                  \
                memcpy(&v, column + idx[k] * stride, SIZE);                                                           \
                memcpy(out, &v, SIZE);                                                                                \
            }                                                                                                         \
            next_element(layout, at, &offset);                                                                        \
        }                                                                                                             \
    }
SPLIT_LOOP(1, uint8_t)
SPLIT_LOOP(2, uint16_t)
SPLIT_LOOP(4, uint32_t)
SPLIT_LOOP(8, uint64_t)

typedef struct {
    char *dst;
    const tq_rows *src;
    size_t row_bytes;
    const int64_t *idx;
    int64_t n, elements, per_line;     /* elements of a row, and of a 64-byte line of a batch row */
    size_t lines, by_columns, by_rows; /* lines of a batch row; chunks: by_columns x by_rows */
    split_fn loop;
} split_job;

/* Chunk c: the line range c % by_columns of the row range c / by_columns. */
static void split_chunk(void *arg, size_t chunk)
{
    const split_job *job = arg;
    const tq_row_layout *layout = job->src->layout;
    size_t c = chunk % job->by_columns, r = chunk / job->by_columns;
    int64_t e0 = (int64_t)(c * job->lines / job->by_columns) * job->per_line;
    int64_t e1 = (int64_t)((c + 1) * job->lines / job->by_columns) * job->per_line;
    int64_t r0 = (int64_t)(r * (size_t)job->n / job->by_rows), r1 = (int64_t)((r + 1) * (size_t)job->n / job->by_rows);
    e1 = e1 < job->elements ? e1 : job->elements;
    int64_t at[TQ_ROW_MAX_DIMS] = {0}, rest = e0;
    ptrdiff_t offset = 0;
    for (int d = layout->ndim - 1; d >= 0; d--) {
        at[d] = rest % layout->shape[d];
        rest /= layout->shape[d];
        offset += at[d] * layout->strides[d];
    }
    size_t size = tq_scalar_size(layout->from);
    job->loop(job->dst + (size_t)r0 * job->row_bytes + (size_t)e0 * size, job->src->base, layout, at, offset, e1 - e0,
              job->idx + r0, job->src->stride, r1 - r0, job->row_bytes);
}

/* Over `chunks` chunks at most: as many line ranges as there are lines, the rest by rows. */
static void gather_split(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n, size_t chunks)
{
    static const split_fn loops[9] = {[1] = split_1, [2] = split_2, [4] = split_4, [8] = split_8};
    const tq_row_layout *layout = src->layout;
    size_t size = tq_scalar_size(layout->from);
    split_job job = {dst, src, row_bytes, idx, n, 1, (int64_t)(64 / size), 0, 0, 0, loops[size]};
    for (int d = 0; d < layout->ndim; d++)
        job.elements *= layout->shape[d];
    job.lines = (size_t)((job.elements + job.per_line - 1) / job.per_line);
    job.by_columns = chunks < job.lines ? chunks : job.lines;
    job.by_rows = chunks / job.by_columns < (size_t)n ? chunks / job.by_columns : (size_t)n;
    tq_copy_parallel(job.by_columns * job.by_rows, split_chunk, &job);
}

/* Shuffled rows lie anywhere, and the hardware prefetcher follows a row only once it is inside it: a
 * small row's copy would wait for memory from its first line on.  The lines of a row a few rows ahead
 * (about PREFETCH_AHEAD_BYTES ahead, 2 to 16 rows) are asked for while this one is copied, so that
 * several rows' lines are on their way at once.  Rows over PREFETCH_MAX_BYTES are long enough for the
 * hardware's own prefetch to pay off.  The figures: doc/benchmarks.rst, scenario 26. */
#define PREFETCH_AHEAD_BYTES 4096
#define PREFETCH_MAX_BYTES 4096

static int64_t prefetch_rows(size_t row_bytes)
{
    size_t rows = PREFETCH_AHEAD_BYTES / row_bytes;
    return rows < 2 ? 2 : rows > 16 ? 16 : (int64_t)rows;
}

static void prefetch_row(const char *row, size_t bytes)
{
    for (size_t at = 0; at < bytes; at += 64)
        __builtin_prefetch(row + at);
    __builtin_prefetch(row + bytes - 1); /* a row that straddles one more line than its size suggests */
}

static void gather_chunk(void *arg, size_t chunk)
{
    const gather_job *job = arg;
    if (job->src->layout) {
        int64_t r = (int64_t)chunk * job->rows_per_chunk;
        int64_t end = r + job->rows_per_chunk < job->n ? r + job->rows_per_chunk : job->n;
        if (walks_columns(job->src))
            gather_chunk_columns(job, r, end);
        else
            gather_chunk_walked(job, r, end);
        return;
    }
    const char *base = job->src->base;
    ptrdiff_t stride = job->src->stride;
    /* Consecutive rows are one block only when the source is row-contiguous. */
    int merge = stride == (ptrdiff_t)job->row_bytes;
    int64_t r = (int64_t)chunk * job->rows_per_chunk;
    int64_t end = r + job->rows_per_chunk < job->n ? r + job->rows_per_chunk : job->n;
    size_t ahead_bytes = job->row_bytes <= PREFETCH_MAX_BYTES ? job->row_bytes : 0;
    int64_t ahead = ahead_bytes ? prefetch_rows(job->row_bytes) : 0;
    for (int64_t k = r; k < r + ahead && k < end; k++)
        prefetch_row(base + job->idx[k] * stride, ahead_bytes);
    while (r < end) {
        if (ahead && r + ahead < end)
            prefetch_row(base + job->idx[r + ahead] * stride, ahead_bytes);
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

/* The bytes of memory one row costs to read: a row's bytes, or, for a walked row, the lines its elements
 * lie in (a line each where they are a line apart or more, the span of each run where they are closer):
 * a Fortran-order row reads 16 times the bytes it writes, and is shared among the pool's threads as a
 * copy of that many bytes would be.  At least row_bytes. */
static size_t row_cost(const tq_rows *src, size_t row_bytes)
{
    const tq_row_layout *layout = src->layout;
    if (!layout)
        return row_bytes;
    if (layout->ndim == 0)
        return 64;
    int inner = layout->ndim - 1;
    ptrdiff_t step = layout->strides[inner] < 0 ? -layout->strides[inner] : layout->strides[inner];
    size_t cost = (size_t)layout->shape[inner] * (size_t)(step >= 64 ? 64 : step);
    for (int d = 0; d < inner; d++)
        cost *= (size_t)layout->shape[d];
    return cost > row_bytes ? cost : row_bytes;
}

void tq_gather(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n)
{
    if (n <= 0 || !row_bytes)
        return;
    size_t cost = row_cost(src, row_bytes), total = (size_t)n * cost, chunk = tq_copy_chunk_bytes(total);
    const tq_row_layout *layout = src->layout;
    if (layout && layout->from == layout->to && walks_columns(src)) {
        gather_split(dst, src, row_bytes, idx, n, (total + chunk - 1) / chunk);
        return;
    }
    int64_t per_chunk = (int64_t)(chunk / cost);
    gather_job job = {dst, src, row_bytes, idx, n, per_chunk > 0 ? per_chunk : 1, chunk < total};
    tq_copy_parallel((size_t)((n + job.rows_per_chunk - 1) / job.rows_per_chunk), gather_chunk, &job);
}

static const char *const mechanism_names[TQ_GATHER_MECHANISMS] = {
    [TQ_GATHER_HOST] = "host", [TQ_GATHER_BATCH] = "batch", [TQ_GATHER_AUTO] = "auto", [TQ_GATHER_DEVICE] = "device"};

const char *tq_gather_mechanism_name(tq_gather_mechanism mechanism)
{
    return (unsigned)mechanism < TQ_GATHER_MECHANISMS ? mechanism_names[mechanism] : mechanism_names[TQ_GATHER_AUTO];
}

int tq_gather_mechanism_of(const char *name)
{
    for (int m = 0; m < TQ_GATHER_MECHANISMS; m++)
        if (strcmp(name, mechanism_names[m]) == 0)
            return m;
    return -1;
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
