/* The engine's packing of variable-length rows (c_code/engine/core/tq_pack.c) without Python: every row's used bytes,
 * then the pad value to the end of the row, for zero and non-zero pads, pads of several bytes, rows empty, partly and
 * wholly used, a source with a stride of its own, and batches large enough to be shared by the copy pool.  Each
 * result is checked byte by byte against a plain loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tq_copy.h"
#include "tq_pack.h"

static int failures, checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

/* What tq_pack_rows must produce, the obvious way. */
static void reference(const tq_pack_job *job, unsigned char *out)
{
    for (int64_t r = 0; r < job->n; r++) {
        unsigned char *row = out + (size_t)r * job->dst_row_bytes;
        memcpy(row, (const unsigned char *)job->src + r * job->src_stride, (size_t)job->used[r]);
        for (size_t b = (size_t)job->used[r]; b < job->dst_row_bytes; b++)
            row[b] =
                job->pad_bytes ? ((const unsigned char *)job->pad)[(b - (size_t)job->used[r]) % job->pad_bytes] : 0;
    }
}

/* Packs n rows of row_bytes (from a source `extra` bytes wider per row) with this pad; 1 when exact. */
static int packs_exactly(int64_t n, size_t row_bytes, size_t extra, const void *pad, size_t pad_bytes, unsigned seed)
{
    size_t stride = row_bytes + extra;
    unsigned char *src = malloc((size_t)n * stride + 1), *got = malloc((size_t)n * row_bytes + 1),
                  *want = malloc((size_t)n * row_bytes + 1);
    int64_t *used = malloc(sizeof *used * (size_t)(n ? n : 1));
    srand(seed);
    for (size_t i = 0; i < (size_t)n * stride; i++)
        src[i] = (unsigned char)rand();
    for (int64_t r = 0; r < n; r++) {
        /* Whole items only, as layout.py asks: empty rows, full rows and everything between. */
        size_t items = row_bytes / (pad_bytes ? pad_bytes : 1);
        size_t take = r % 5 == 0 ? 0 : r % 5 == 1 ? items : (size_t)rand() % (items + 1);
        used[r] = (int64_t)(take * (pad_bytes ? pad_bytes : 1));
    }
    memset(got, 0xAB, (size_t)n * row_bytes + 1); /* the byte past the end must stay as it was */
    tq_pack_job job = {got, row_bytes, src, (ptrdiff_t)stride, used, n, pad, pad_bytes};
    tq_pack_rows(&job);
    reference(&job, want);
    int exact = memcmp(got, want, (size_t)n * row_bytes) == 0 && got[(size_t)n * row_bytes] == 0xAB;
    free(src);
    free(got);
    free(want);
    free(used);
    return exact;
}

static void test_pads(void)
{
    const float minus_one = -1.0f;
    const double zero = 0.0;
    const unsigned char seven = 7;
    CHECK(packs_exactly(10, 64, 0, &zero, sizeof zero, 1));            /* an all-zero pad: memset */
    CHECK(packs_exactly(10, 64, 0, &minus_one, sizeof minus_one, 2));  /* a pad of four bytes, repeated */
    CHECK(packs_exactly(10, 63, 0, &seven, 1, 3));                     /* one byte, an odd row */
    CHECK(packs_exactly(10, 60, 36, &minus_one, sizeof minus_one, 4)); /* a wider source row */
    CHECK(packs_exactly(1, 4, 0, &minus_one, sizeof minus_one, 5));
    CHECK(packs_exactly(0, 64, 0, &minus_one, sizeof minus_one, 6)); /* nothing to pack */
}

static void test_large_batches_over_the_pool(void)
{
    const float minus_one = -1.0f;
    tq_error err;
    for (int threads = 1; threads <= 4; threads += 3) {
        CHECK(tq_copy_set_threads(threads, &err) == TQ_OK);
        /* 3000 rows of 2 KiB: several of the pool's chunks, and a last one shorter. */
        CHECK(packs_exactly(3000, 2048, 512, &minus_one, sizeof minus_one, 10 + (unsigned)threads));
        CHECK(packs_exactly(2999, 2052, 0, &minus_one, sizeof minus_one, 20 + (unsigned)threads));
    }
    CHECK(tq_copy_set_threads(1, &err) == TQ_OK);
}

int main(void)
{
    test_pads();
    test_large_batches_over_the_pool();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
