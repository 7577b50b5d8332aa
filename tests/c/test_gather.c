/* The CUDA backend's device gather (c_code/tq_cuda.c, attach_rows and
 * publish_rows) against the stand-in driver and NVRTC (fake_libcuda.c,
 * fake_libnvrtc.c): every element read back equals the rows numpy would
 * take, for rows of odd sizes and sources that are not aligned; the fallbacks
 * say why; two rings share one dataset's pinned pages.  Run by
 * tests/test_gather_fake.py:
 *
 *   test_gather gather MECHANISM USED   attach with MECHANISM, expect USED
 *   test_gather refused TEXT            attach fails, err names TEXT; puts still right
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tq_cuda.h"
#include "tq_ring.h"

static int failures, checks;

#define CHECK(cond, ...)                                           \
    do {                                                           \
        checks++;                                                  \
        if (!(cond)) {                                             \
            failures++;                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);            \
            printf(__VA_ARGS__);                                   \
            printf("\n");                                          \
        }                                                          \
    } while (0)

static int (*fake_registered)(void), (*fake_gathers)(void);

static tq_gather_mechanism parse(const char *name)
{
    for (int m = TQ_GATHER_HOST; m <= TQ_GATHER_AUTO; m++)
        if (strcmp(name, tq_gather_mechanism_name((tq_gather_mechanism)m)) == 0)
            return (tq_gather_mechanism)m;
    fprintf(stderr, "unknown mechanism %s\n", name);
    exit(2);
}

static tq_ring *cuda_ring(int64_t batch, size_t row_bytes)
{
    tq_error err;
    tq_component comps[2] = {{batch, row_bytes}, {batch, 4}};
    tq_backend *backend = tq_cuda_backend_create((void *)(size_t)0x1000, &err);
    tq_ring *ring = backend ? tq_ring_create(comps, 2, 3, backend, &err) : NULL;
    if (!ring) {
        printf("FAIL: no CUDA ring on the stand-in driver: %s\n", err.message);
        exit(1);
    }
    return ring;
}

/* A shuffled order of n rows (a fixed LCG: the same in every run). */
static void shuffled(int64_t *idx, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int64_t j = (int64_t)(seed % (unsigned)(i + 1)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

/* One pass over n rows of row_bytes (the source starting `skew` bytes into
 * its block) in batches: the arrays are attached with `want` (expecting
 * `expect`, or the failure `refusal` names), every batch is put and read
 * back and must equal the rows it names, and the device must have gathered
 * them exactly when attached. */
static void check_pass(tq_gather_mechanism want, tq_gather_mechanism expect, const char *refusal, size_t row_bytes,
                       size_t skew, int64_t n, int64_t batch, int shuffle)
{
    char what[160];
    snprintf(what, sizeof what, "%s, rows of %zu bytes at +%zu, %lld rows by %lld%s", tq_gather_mechanism_name(want),
             row_bytes, skew, (long long)n, (long long)batch, shuffle ? ", shuffled" : "");
    char *block = malloc((size_t)n * row_bytes + skew + 1), *x = block + skew;
    int32_t *y = malloc((size_t)n * sizeof *y);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    char *got_x = malloc((size_t)batch * row_bytes);
    int32_t *got_y = malloc((size_t)batch * sizeof *got_y);
    tq_error err;
    for (size_t i = 0; i < (size_t)n * row_bytes; i++)
        x[i] = (char)(i * 131 + 7);
    for (int64_t i = 0; i < n; i++)
        y[i] = (int32_t)(i * 7 + 1);
    if (shuffle)
        shuffled(idx, n, (unsigned)n);
    else
        for (int64_t i = 0; i < n; i++)
            idx[i] = i;

    tq_ring *ring = cuda_ring(batch, row_bytes);
    const void *ptrs[2] = {x, y};
    size_t bytes[2] = {(size_t)n * row_bytes, (size_t)n * sizeof *y};
    int read_only[2] = {0, 1};
    tq_gather_mechanism used;
    tq_code code = tq_ring_gather_on_device(ring, ptrs, bytes, read_only, 2, want, &used, &err);
    if (refusal) {
        CHECK(code != TQ_OK && strstr(err.message, refusal), "%s: expected a refusal naming '%s', got %s", what,
              refusal, code == TQ_OK ? "none" : err.message);
        CHECK(used == TQ_GATHER_HOST, "%s: refused, yet used %s", what, tq_gather_mechanism_name(used));
    } else {
        CHECK(code == TQ_OK && used == expect, "%s: used %s (%s)", what, tq_gather_mechanism_name(used),
              code == TQ_OK ? "ok" : err.message);
    }

    tq_rows srcs[2] = {{x, (ptrdiff_t)row_bytes}, {y, 4}};
    int before = fake_gathers();
    for (int64_t lo = 0; lo < n; lo += batch) {
        int64_t rows = lo + batch < n ? batch : n - lo;
        int slot;
        code = tq_ring_reserve_put(ring, -1, NULL, &slot, &err);
        if (code == TQ_OK)
            code = tq_ring_put_rows(ring, slot, srcs, idx + lo, rows, &err);
        CHECK(code == TQ_OK, "%s: put_rows: %s", what, err.message);
        if (code != TQ_OK || tq_ring_reserve_get(ring, -1, NULL, &slot, &err) != TQ_OK)
            break;
        CHECK(tq_ring_rows(ring, slot, 0) == rows, "%s: %lld rows", what, (long long)tq_ring_rows(ring, slot, 0));
        CHECK(tq_ring_read_to_host(ring, slot, 0, got_x, &err) == TQ_OK, "%s: read: %s", what, err.message);
        CHECK(tq_ring_read_to_host(ring, slot, 1, got_y, &err) == TQ_OK, "%s: read: %s", what, err.message);
        tq_ring_release_get(ring, slot);
        int same = 1;
        for (int64_t r = 0; r < rows; r++)
            same &= memcmp(got_x + r * row_bytes, x + idx[lo + r] * row_bytes, row_bytes) == 0 &&
                    got_y[r] == y[idx[lo + r]];
        CHECK(same, "%s: the batch at row %lld differs from the rows it names", what, (long long)lo);
    }
    int gathered = fake_gathers() > before;
    CHECK(gathered == (!refusal && used != TQ_GATHER_HOST), "%s: the device %s", what,
          gathered ? "gathered, but should not have" : "gathered nothing");
    CHECK(tq_ring_gather_on_host(ring, &err) == TQ_OK, "%s: gather_on_host: %s", what, err.message);
    tq_ring_destroy(ring);
    free(block);
    free(y);
    free(idx);
    free(got_x);
    free(got_y);
}

/* Two rings gathering from one dataset page-lock it once; it stays locked
 * until the last lets go, and a ring's own staging is all that is left. */
static void check_shared_pages(tq_gather_mechanism want)
{
    static char data[3 * 4096];
    tq_error err;
    tq_gather_mechanism used;
    const void *ptrs[2] = {data, data + 4096 + 8}; /* two arrays sharing a page */
    size_t bytes[2] = {4096, 2 * 4096 - 8};
    int read_only[2] = {0, 0};
    tq_ring *a = cuda_ring(4, 16), *b = cuda_ring(4, 16);
    int staging = fake_registered();
    CHECK(tq_ring_gather_on_device(a, ptrs, bytes, read_only, 2, want, &used, &err) == TQ_OK, "attach a: %s",
          err.message);
    CHECK(fake_registered() == staging + 1, "the two arrays' pages are locked as one range: %d ranges",
          fake_registered() - staging);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, want, &used, &err) == TQ_OK, "attach b: %s",
          err.message);
    CHECK(fake_registered() == staging + 1, "a second ring locks them again: %d ranges", fake_registered() - staging);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, want, &used, &err) == TQ_ESTATE,
          "attaching twice is refused");
    CHECK(tq_ring_gather_on_host(a, &err) == TQ_OK && fake_registered() == staging + 1,
          "the pages stay locked while ring b gathers from them");
    CHECK(tq_ring_gather_on_host(b, &err) == TQ_OK && fake_registered() == staging, "unlocked after both");
    tq_ring_destroy(a);
    tq_ring_destroy(b);
}

int main(int argc, char **argv)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    *(void **)&fake_registered = driver ? dlsym(driver, "fake_cuda_registered") : NULL;
    *(void **)&fake_gathers = driver ? dlsym(driver, "fake_cuda_gathers") : NULL;
    if (!fake_registered || !fake_gathers || argc < 3) {
        printf("usage: test_gather gather MECHANISM USED | refused MECHANISM TEXT, with the stand-in libcuda\n");
        return 2;
    }
    tq_gather_mechanism want = parse(argv[2]);
    if (strcmp(argv[1], "gather") == 0 && argc == 4) {
        tq_gather_mechanism expect = parse(argv[3]);
        /* Row sizes: 1, 3, 5, 17 bytes, MNIST's 784 and CIFAR's 3072 float32s;
         * sources at +0 (aligned), +1, +2, +8 bytes; partial last batches. */
        static const size_t sizes[] = {1, 3, 5, 16, 17, 784 * 4, 3072 * 4};
        static const size_t skews[] = {0, 1, 2, 8};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (size_t j = 0; j < sizeof skews / sizeof skews[0]; j++)
                check_pass(want, expect, NULL, sizes[i], skews[j], 37, 8, 1);
        check_pass(want, expect, NULL, 64, 0, 100, 32, 0); /* in order: runs of consecutive rows */
        check_shared_pages(want);
    } else if (strcmp(argv[1], "refused") == 0 && argc == 4) {
        check_pass(want, TQ_GATHER_HOST, argv[3], 784 * 4, 1, 37, 8, 1);
    } else {
        printf("unknown test %s\n", argv[1]);
        return 2;
    }
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
