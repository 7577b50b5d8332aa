/* The host gather of rows with a layout (c_code/engine/core/tq_gather.c) without Python: strided, Fortran-order,
 * reversed and 0-stride rows, and rows cast on the way (uint8, int16 -> int32, float16 -> float32, bool ->
 * float64), each gathered row checked element by element against a plain loop, for batches small enough for
 * one thread and large enough to be shared by the copy pool, of one row, and of more rows than one block of
 * the column walk; 2-, 4- and 8-byte elements, every other one up to the last bytes before a page that cannot
 * be read (the gather reads nothing past a row's last element); Fortran-order rows of one type (1- to 8-byte
 * elements, split by columns) on 1, 2, 3 and 16 threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tq_copy.h"
#include "tq_gather.h"

static int failures, checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

/* A shuffled order of n rows, with repeats (a fixed LCG: the same in every run). */
static void some_rows(int64_t *idx, int64_t n, int64_t rows, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        idx[i] = (int64_t)((seed >> 8) % (unsigned)rows);
    }
}

/* Element (r, i, j) of a rows x a x b source of int16 values stored with these strides, as int32. */
static int32_t source_value(int64_t r, int64_t i, int64_t j)
{
    return (int32_t)((r * 131 + i * 7 + j) % 30000 - 15000);
}

/* An integer of one of the types the tests use, read from p. */
static int64_t read_int(const char *p, tq_scalar type)
{
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    switch (type) {
    case TQ_INT8: return memcpy(&i8, p, 1), i8;
    case TQ_INT16: return memcpy(&i16, p, 2), i16;
    case TQ_INT32: return memcpy(&i32, p, 4), i32;
    default: return memcpy(&i64, p, 8), i64;
    }
}

static void write_int(char *p, tq_scalar type, int64_t v)
{
    int8_t i8 = (int8_t)v;
    int16_t i16 = (int16_t)v;
    int32_t i32 = (int32_t)v;
    switch (type) {
    case TQ_INT8: memcpy(p, &i8, 1); break;
    case TQ_INT16: memcpy(p, &i16, 2); break;
    case TQ_INT32: memcpy(p, &i32, 4); break;
    default: memcpy(p, &v, 8);
    }
}

/* Gathers n rows of an rows x a x b source of `from` integers laid out with element strides (sr, si, sj) into
 * `to` integers, each element checked against the source read by a plain loop; 1 when exact. */
static int typed_exact(int64_t rows, int64_t a, int64_t b, ptrdiff_t sr, ptrdiff_t si, ptrdiff_t sj, tq_scalar from,
                       tq_scalar to, int64_t n)
{
    /* The buffer spans every element whatever the signs: base sits in its middle. */
    ptrdiff_t reach = (rows * (sr < 0 ? -sr : sr) + a * (si < 0 ? -si : si) + b * (sj < 0 ? -sj : sj) + 1);
    size_t in_size = tq_scalar_size(from), out_size = tq_scalar_size(to), row_bytes = (size_t)(a * b) * out_size;
    char *buf = calloc((size_t)(2 * reach + 1), in_size), *base = buf + reach * (ptrdiff_t)in_size;
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    char *out = malloc((size_t)n * row_bytes + 1);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < a; i++)
            for (int64_t j = 0; j < b; j++)
                write_int(base + (r * sr + i * si + j * sj) * (ptrdiff_t)in_size, from, source_value(r, i, j));
    some_rows(idx, n, rows, (unsigned)(rows + a * 7 + b));
    ptrdiff_t s = (ptrdiff_t)in_size;
    tq_row_layout layout = {2, {a, b}, {si * s, sj * s}, from, to};
    tq_rows src = {base, sr * s, &layout};
    tq_gather(out, &src, row_bytes, idx, n);
    int exact = 1;
    for (int64_t k = 0; k < n && exact; k++)
        for (int64_t e = 0; e < a * b && exact; e++) {
            int64_t want = read_int(base + (idx[k] * sr + (e / b) * si + (e % b) * sj) * s, from); /* the plain loop */
            int64_t got = read_int(out + (size_t)k * row_bytes + (size_t)e * out_size, to);
            exact = got == want;
            if (!exact)
                fprintf(stderr, "row %lld element %lld: got %lld, want %lld\n", (long long)k, (long long)e,
                        (long long)got, (long long)want);
        }
    free(buf);
    free(idx);
    free(out);
    return exact;
}

/* The same of int16 sources, into int32 or (same) int16. */
static int strided_exact(int64_t rows, int64_t a, int64_t b, ptrdiff_t sr, ptrdiff_t si, ptrdiff_t sj, int same,
                         int64_t n)
{
    return typed_exact(rows, a, b, sr, si, sj, TQ_INT16, same ? TQ_INT16 : TQ_INT32, n);
}

/* Every other 4-byte element of rows x 2 run (a view x[:, ::2]), for runs of 1 to 13 elements, the view's last
 * element the last bytes before a page that cannot be read: the gather reads nothing past it (the four-at-a-time
 * loop stops a group short of a run's end).  Every row taken, the last one among them. */
static void every_other_up_to_a_page_end(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int64_t run = 1; run <= 13; run++) {
        int64_t rows = 9, n = 3 * rows, idx[27];
        size_t bytes = (size_t)(rows * 2 * run - 1) * 4, mapped = (bytes + page - 1) / page * page;
        char *map = mmap(NULL, mapped + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(map != MAP_FAILED && mprotect(map + mapped, page, PROT_NONE) == 0);
        int32_t *wide = (int32_t *)(map + mapped - bytes), out[27 * 13];
        for (int64_t e = 0; e < rows * 2 * run - 1; e++)
            wide[e] = (int32_t)(e * 7919 % 100003);
        for (int64_t k = 0; k < n; k++)
            idx[k] = (k * 5 + 3) % rows;
        tq_row_layout layout = {1, {run}, {8}, TQ_INT32, TQ_INT32};
        tq_rows src = {wide, (ptrdiff_t)(2 * run * 4), &layout};
        tq_gather(out, &src, (size_t)run * 4, idx, n);
        int exact = 1;
        for (int64_t k = 0; k < n; k++)
            for (int64_t j = 0; j < run; j++)
                exact &= out[k * run + j] == wide[idx[k] * 2 * run + 2 * j];
        CHECK(exact);
        munmap(map, mapped + page);
    }
}

/* Rows of one element each (a label array), cast from uint8 and from int16 into int32. */
static void labels(void)
{
    uint8_t u8[300];
    int16_t i16[300];
    int64_t idx[1000];
    int32_t out[1000];
    for (int i = 0; i < 300; i++)
        u8[i] = (uint8_t)(255 - i % 256), i16[i] = (int16_t)(i * 100 - 15000);
    some_rows(idx, 1000, 300, 7);
    tq_row_layout from_u8 = {0, {0}, {0}, TQ_UINT8, TQ_INT32}, from_i16 = {0, {0}, {0}, TQ_INT16, TQ_INT32};
    tq_rows src = {u8, 1, &from_u8};
    tq_gather(out, &src, 4, idx, 1000);
    int exact = 1;
    for (int i = 0; i < 1000; i++)
        exact &= out[i] == u8[idx[i]];
    CHECK(exact);
    src = (tq_rows){i16 + 299, -2, &from_i16}; /* reversed */
    tq_gather(out, &src, 4, idx, 1000);
    exact = 1;
    for (int i = 0; i < 1000; i++)
        exact &= out[i] == i16[299 - idx[i]];
    CHECK(exact);
    src = (tq_rows){i16 + 5, 0, &from_i16}; /* one row repeated: stride 0 */
    tq_gather(out, &src, 4, idx, 1000);
    exact = 1;
    for (int i = 0; i < 1000; i++)
        exact &= out[i] == i16[5];
    CHECK(exact);
}

/* float16 into float32: normal, subnormal, signed zero, inf and NaN halves; bool into float64. */
static void floats(void)
{
    static const uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x3555};
    static const float want[] = {
        1.0f,     -2.0f,     65504.0f, 5.9604644775390625e-8f, 6.0975551605224609375e-5f, -0.0f,
        INFINITY, -INFINITY, NAN,      0.333251953125f};
    int64_t idx[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    float out[10];
    tq_row_layout layout = {0, {0}, {0}, TQ_FLOAT16, TQ_FLOAT32};
    tq_rows src = {halves, 2, &layout};
    tq_gather(out, &src, 4, idx, 10);
    for (int i = 0; i < 10; i++)
        CHECK(isnan(want[i]) ? isnan(out[i]) : out[i] == want[i] && signbit(out[i]) == signbit(want[i]));
    unsigned char flags[4] = {0, 1, 0, 2};
    double got[4];
    tq_row_layout bools = {1, {2}, {1}, TQ_BOOL, TQ_FLOAT64};
    src = (tq_rows){flags, 2, &bools};
    int64_t two[2] = {1, 0};
    tq_gather(got, &src, 16, two, 2);
    CHECK(got[0] == 0.0 && got[1] == 1.0 && got[2] == 0.0 && got[3] == 1.0);
}

/* Fortran-order rows of one type (the column walk split by columns among the pool's threads, and by rows
 * where the rows are narrow), 1-, 2-, 4- and 8-byte elements, at the pool's thread count. */
static void split_by_columns(void)
{
    static const tq_scalar types[] = {TQ_INT8, TQ_INT16, TQ_INT32, TQ_INT64};
    for (int t = 0; t < 4; t++) {
        tq_scalar type = types[t];
        CHECK(typed_exact(2000, 28, 28, 1, 2000, 56000, type, type, 1000)); /* shared by the pool */
        CHECK(typed_exact(2000, 5, 13, 1, 2000, 10000, type, type, 1000));  /* lines split unevenly, and rows */
        CHECK(typed_exact(300, 4, 7, 1, 300, 1200, type, type, 300));
        CHECK(typed_exact(300, 4, 7, -1, 300, 1200, type, type, 300));      /* rows reversed */
        CHECK(typed_exact(300, 4, 7, 1, -300, -1200, type, type, 300));     /* axes reversed */
        CHECK(typed_exact(300, 4, 7, 1, 1200, -300, type, type, 300));      /* axes swapped, one reversed */
        CHECK(typed_exact(600, 4, 7, 2, 1200, 4800, type, type, 500));      /* every other row */
        CHECK(typed_exact(50, 3, 5, 1, 50, 150, type, type, 1));            /* one row */
        CHECK(typed_exact(70000, 1, 40, 1, 70000, 70000, type, type, 900)); /* a large source */
        CHECK(typed_exact(5000, 1, 3, 1, 5000, 5000, type, type, 20000));   /* narrow rows: split by rows */
        CHECK(typed_exact(5000, 1, 1, -1, 5000, 5000, type, type, 20000));  /* one element a row */
    }
    int64_t idx[20000], labels[3000];
    some_rows(idx, 20000, 3000, 11);
    for (int i = 0; i < 3000; i++)
        labels[i] = (int64_t)i * 1000003 - 7;
    static int64_t out[20000];
    tq_row_layout one = {0, {0}, {0}, TQ_INT64, TQ_INT64};
    tq_rows src = {labels + 2999, -8, &one}; /* labels of one type, reversed */
    tq_gather(out, &src, 8, idx, 20000);
    int exact = 1;
    for (int i = 0; i < 20000; i++)
        exact &= out[i] == labels[2999 - idx[i]];
    CHECK(exact);
}

/* What the engine has loops for: every pair of one type and every safe cast (tq_casts_safely: into float16
 * from bool, int8 and uint8 too), none that loses values, none of the complex types. */
static void converts(void)
{
    CHECK(tq_gather_converts(TQ_UINT8, TQ_INT32) && tq_gather_converts(TQ_FLOAT16, TQ_FLOAT32));
    CHECK(tq_gather_converts(TQ_FLOAT16, TQ_FLOAT16) && tq_gather_converts(TQ_INT64, TQ_FLOAT64));
    CHECK(tq_gather_converts(TQ_UINT8, TQ_FLOAT16) && tq_gather_converts(TQ_BOOL, TQ_FLOAT16));
    CHECK(!tq_gather_converts(TQ_INT16, TQ_FLOAT16) && !tq_gather_converts(TQ_INT64, TQ_INT32));
    CHECK(!tq_gather_converts(TQ_COMPLEX64, TQ_COMPLEX64) && !tq_gather_converts(TQ_N_SCALARS, TQ_INT32));
    for (int from = 0; from < TQ_COMPLEX64; from++)
        for (int to = 0; to < TQ_COMPLEX64; to++)
            CHECK(tq_gather_converts((tq_scalar)from, (tq_scalar)to) ==
                  tq_casts_safely((tq_scalar)from, (tq_scalar)to));
    CHECK(tq_scalar_size(TQ_FLOAT16) == 2 && tq_scalar_size(TQ_UINT64) == 8);
}

int main(void)
{
    labels();
    floats();
    converts();
    /* rows x a x b: C order, Fortran order, a view of every other element, reversed axes, 0 strides. */
    for (int same = 0; same < 2; same++) {
        CHECK(strided_exact(50, 3, 5, 15, 5, 1, same, 40));
        CHECK(strided_exact(50, 3, 5, 1, 50, 150, same, 40));           /* Fortran order */
        CHECK(strided_exact(50, 3, 5, 30, 10, 2, same, 40));            /* every other element */
        CHECK(strided_exact(50, 3, 5, -15, -5, -1, same, 40));          /* reversed on every axis */
        CHECK(strided_exact(50, 3, 5, 5, 0, 1, same, 40));              /* an axis broadcast: stride 0 */
        CHECK(strided_exact(2000, 28, 28, 1, 2000, 56000, same, 3000)); /* large: shared by the copy pool */
        CHECK(strided_exact(50, 3, 5, -1, 50, 150, same, 40));          /* Fortran order, rows reversed */
        CHECK(strided_exact(50, 3, 5, 1, -50, -150, same, 40));         /* Fortran order, axes reversed */
        CHECK(strided_exact(50, 3, 5, 1, 50, 150, same, 1));            /* a batch of one row */
        CHECK(strided_exact(50, 1, 1, 1, 50, 50, same, 7));             /* rows of one element, Fortran-like */
        CHECK(strided_exact(700, 3, 7, 1, 700, 2100, same, 600));       /* more rows than a block of columns */
    }
    /* 4- and 8-byte elements: C order with every other element, Fortran order, reversed; cast into int64. */
    static const tq_scalar pairs[][2] = {{TQ_INT32, TQ_INT32}, {TQ_INT64, TQ_INT64}, {TQ_INT32, TQ_INT64}};
    for (int p = 0; p < 3; p++) {
        tq_scalar from = pairs[p][0], to = pairs[p][1];
        CHECK(typed_exact(50, 3, 9, 54, 18, 2, from, to, 40));      /* every other element, runs of 9 */
        CHECK(typed_exact(50, 2, 4, 16, 8, 2, from, to, 40));       /* every other element, runs of 4 */
        CHECK(typed_exact(50, 3, 5, 1, 50, 150, from, to, 40));     /* Fortran order */
        CHECK(typed_exact(50, 3, 5, -30, -10, -2, from, to, 40));   /* every other element, reversed */
        CHECK(typed_exact(300, 4, 7, 1, 300, 1200, from, to, 300)); /* Fortran order, past one block */
    }
    every_other_up_to_a_page_end();
    tq_error err;
    static const int thread_counts[] = {1, 2, 3, 16};
    for (int t = 0; t < 4; t++) {
        CHECK(tq_copy_set_threads(thread_counts[t], &err) == TQ_OK);
        split_by_columns();
    }
    CHECK(tq_copy_set_threads(1, &err) == TQ_OK);
    CHECK(strided_exact(2000, 28, 28, 1, 2000, 56000, 0, 3000)); /* the same on the caller alone */
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
