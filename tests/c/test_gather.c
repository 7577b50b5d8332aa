/* The CUDA backend's device gather (c_code/engine/cuda/tq_cuda_rows.c, attach_rows and
 * publish_rows) against the stand-in driver (fake_libcuda.c): every element
 * read back equals the rows numpy would take, for rows of odd sizes and
 * sources that are not aligned; the device copies exactly the components it
 * should (all under "batch", those with rows of 256 KiB or more under
 * "auto"; under "device" every component is held in device memory and each
 * batch gathered by the kernel, one launch per component); the fallbacks
 * say why; the page-locked ranges are the arrays' exact bytes, shared by
 * the rings of the process and with register_host; held memory is freed.
 * Run by tests/standin/test_gather_fake.py:
 *
 *   test_gather gather MECHANISM USED   attach with MECHANISM, expect USED
 *   test_gather large MECHANISM USED    the same with 256 KiB rows beside 4-byte labels
 *   test_gather refused MECHANISM ROW_BYTES TEXT
 *                                       attach fails, err names TEXT; puts still right
 *   test_gather ranges                  exact ranges, shared ones, register_host's reused
 *   test_gather held_failures           a held dataset's allocation or kernel failing: the
 *                                       error names the call, nothing is left held
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tq_cuda.h"
#include "tq_ring.h"

static int failures, checks;

#define CHECK(cond, ...)                                \
    do {                                                \
        checks++;                                       \
        if (!(cond)) {                                  \
            failures++;                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static int (*fake_registered)(void), (*fake_gathers)(void), (*fake_kernel_gathers)(void), (*fake_device_allocs)(void);
static unsigned long long (*fake_batch_bytes)(void);

/* The rows the backend copies on the device under "auto" are this large or larger. */
#define LARGE_ROW ((size_t)256 * 1024)

static tq_gather_mechanism parse(const char *name)
{
    for (int m = TQ_GATHER_HOST; m <= TQ_GATHER_DEVICE; m++)
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

/* Puts rows idx[lo..lo+rows) of x (rows of row_bytes) and y as one element,
 * reads it back into got_x and got_y, and says whether it equals them. */
static int put_and_check(tq_ring *ring, const char *x, const int32_t *y, size_t row_bytes, const int64_t *idx,
                         int64_t rows, char *got_x, int32_t *got_y, const char *what)
{
    tq_rows srcs[2] = {{x, (ptrdiff_t)row_bytes}, {y, 4}};
    tq_error err;
    int slot, same = 1;
    tq_code code = tq_ring_reserve_put(ring, -1, NULL, &slot, &err);
    if (code == TQ_OK)
        code = tq_ring_put_rows(ring, slot, srcs, idx, rows, &err);
    CHECK(code == TQ_OK, "%s: put_rows: %s", what, err.message);
    if (code != TQ_OK || tq_ring_reserve_get(ring, -1, NULL, &slot, &err) != TQ_OK)
        return 0;
    CHECK(tq_ring_rows(ring, slot, 0) == rows, "%s: %lld rows", what, (long long)tq_ring_rows(ring, slot, 0));
    CHECK(tq_ring_read_to_host(ring, slot, 0, got_x, &err) == TQ_OK, "%s: read: %s", what, err.message);
    CHECK(tq_ring_read_to_host(ring, slot, 1, got_y, &err) == TQ_OK, "%s: read: %s", what, err.message);
    tq_ring_release_get(ring, slot);
    for (int64_t r = 0; r < rows; r++)
        same &= memcmp(got_x + r * row_bytes, x + idx[r] * row_bytes, row_bytes) == 0 && got_y[r] == y[idx[r]];
    CHECK(same, "%s: the element differs from the rows it names", what);
    return same;
}

/* One pass over n rows of row_bytes (the source starting `skew` bytes into
 * its block) in batches: the arrays are attached with `want` (expecting
 * `expect`, or the failure `refusal` names), every batch is put and read
 * back and must equal the rows it names, and the device must have copied
 * exactly the components it chose: all under batch, large rows under auto. */
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
    int staging = fake_registered(), slots = fake_device_allocs();
    const void *ptrs[2] = {x, y};
    size_t bytes[2] = {(size_t)n * row_bytes, (size_t)n * sizeof *y};
    int read_only[2] = {0, 1};
    tq_gather_mechanism used;
    tq_code code = tq_ring_gather_on_device(ring, ptrs, bytes, read_only, 2, want, &used, &err);
    if (refusal) {
        CHECK(code != TQ_OK && strstr(err.message, refusal), "%s: expected a refusal naming '%s', got %s", what,
              refusal, code == TQ_OK ? "none" : err.message);
        CHECK(used == TQ_GATHER_HOST, "%s: refused, yet used %s", what, tq_gather_mechanism_name(used));
        CHECK(fake_registered() == staging, "%s: a refused attach left %d ranges locked", what,
              fake_registered() - staging);
        CHECK(fake_device_allocs() == slots, "%s: a refused attach left %d device allocations", what,
              fake_device_allocs() - slots);
    } else {
        CHECK(code == TQ_OK && used == expect, "%s: used %s (%s)", what, tq_gather_mechanism_name(used),
              code == TQ_OK ? "ok" : err.message);
    }
    /* Which components the device copies, and so how many ranges are locked. */
    int device = !refusal && used == TQ_GATHER_BATCH;
    int x_on_device = device && (want == TQ_GATHER_BATCH || row_bytes >= LARGE_ROW);
    int y_on_device = device && want == TQ_GATHER_BATCH;
    /* Held in device memory: x and y, one allocation each, and the slots' row
     * numbers (one buffer page-locked, one on the device) made at the attach. */
    int held = !refusal && used == TQ_GATHER_DEVICE;
    CHECK(fake_registered() == staging + x_on_device + y_on_device + held, "%s: %d ranges locked, expected %d", what,
          fake_registered() - staging, x_on_device + y_on_device + held);
    CHECK(fake_device_allocs() == slots + 3 * held, "%s: %d device allocations, expected %d", what,
          fake_device_allocs() - slots, 3 * held);

    unsigned long long copied = fake_batch_bytes(), expected = 0;
    int kernels = fake_kernel_gathers(), expected_kernels = 0;
    for (int64_t lo = 0; lo < n; lo += batch) {
        int64_t rows = lo + batch < n ? batch : n - lo;
        if (!put_and_check(ring, x, y, row_bytes, idx + lo, rows, got_x, got_y, what))
            break;
        expected += (unsigned long long)rows * (x_on_device * row_bytes + y_on_device * sizeof *y);
        expected_kernels += held; /* one kernel gathers both components */
    }
    copied = fake_batch_bytes() - copied;
    CHECK(copied == expected, "%s: the device copied %llu bytes, expected %llu", what, copied, expected);
    CHECK(fake_kernel_gathers() - kernels == expected_kernels, "%s: %d gather kernels, expected %d", what,
          fake_kernel_gathers() - kernels, expected_kernels);
    CHECK(tq_ring_gather_on_host(ring, &err) == TQ_OK, "%s: gather_on_host: %s", what, err.message);
    CHECK(fake_registered() == staging, "%s: %d ranges still locked after gather_on_host", what,
          fake_registered() - staging);
    CHECK(fake_device_allocs() == slots, "%s: %d device allocations left after gather_on_host", what,
          fake_device_allocs() - slots);
    tq_ring_destroy(ring);
    free(block);
    free(y);
    free(idx);
    free(got_x);
    free(got_y);
}

/* A block of `pages` pages, page-aligned, its bytes numbered. */
static char *page_block(int pages)
{
    long page = sysconf(_SC_PAGESIZE);
    char *block = aligned_alloc((size_t)page, (size_t)(pages * page));
    for (long i = 0; i < pages * page; i++)
        block[i] = (char)(i * 29 + 3);
    return block;
}

/* The dataset's memory is locked exactly: a buffer next to it (on its page,
 * running past the page's end, as a fresh numpy array that q.get() fills
 * may) still takes device-to-host copies.  Locked rounded out to pages, the
 * stand-in refuses them as the driver does (CUDA_ERROR_INVALID_VALUE). */
static void check_neighbours_take_copies(void)
{
    long page = sysconf(_SC_PAGESIZE);
    char *block = page_block(3), *x = block + 64, *got_x = block + page - 32;
    int32_t *y = (int32_t *)(block + 512), *got_y = (int32_t *)(block + page + 256);
    int64_t idx[4] = {3, 0, 15, 7};
    tq_error err;
    tq_gather_mechanism used;
    tq_ring *ring = cuda_ring(4, 16);
    int staging = fake_registered();
    const void *ptrs[2] = {x, y};
    size_t bytes[2] = {16 * 16, 16 * 4};
    int read_only[2] = {0, 0};
    CHECK(tq_ring_gather_on_device(ring, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK &&
              used == TQ_GATHER_BATCH,
          "attach: %s", err.message);
    CHECK(fake_registered() == staging + 2, "two arrays on one page are locked as two exact ranges: %d",
          fake_registered() - staging);
    put_and_check(ring, x, y, 16, idx, 4, got_x, got_y, "read into a buffer straddling the dataset's page");
    CHECK(tq_ring_gather_on_host(ring, &err) == TQ_OK && fake_registered() == staging, "detach: %s", err.message);
    tq_ring_destroy(ring);
    free(block);
}

/* Two rings gathering from one dataset lock each range once, and it stays
 * locked until the last lets go; views that overlap are locked as one. */
static void check_shared_ranges(void)
{
    char *block = page_block(3);
    const void *ptrs[2] = {block, block + 4096 + 8};
    size_t bytes[2] = {4096, 2 * 4096 - 8};
    int read_only[2] = {0, 0};
    tq_error err;
    tq_gather_mechanism used;
    tq_ring *a = cuda_ring(4, 16), *b = cuda_ring(4, 16);
    int staging = fake_registered();
    CHECK(tq_ring_gather_on_device(a, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK, "attach a: %s",
          err.message);
    CHECK(fake_registered() == staging + 2, "two arrays, two ranges: %d", fake_registered() - staging);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK, "attach b: %s",
          err.message);
    CHECK(fake_registered() == staging + 2, "a second ring locks them again: %d ranges", fake_registered() - staging);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_ESTATE,
          "attaching twice is refused");
    CHECK(tq_ring_gather_on_host(a, &err) == TQ_OK && fake_registered() == staging + 2,
          "the ranges stay locked while ring b gathers from them");
    CHECK(tq_ring_gather_on_host(b, &err) == TQ_OK && fake_registered() == staging, "unlocked after both");

    /* Two views of one array that overlap: one range, their union. */
    const void *views[2] = {block + 100, block + 2000};
    size_t view_bytes[2] = {4000, 3000};
    CHECK(tq_ring_gather_on_device(a, views, view_bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK,
          "attach overlapping views: %s", err.message);
    CHECK(fake_registered() == staging + 1, "overlapping views are locked as one range: %d",
          fake_registered() - staging);
    CHECK(tq_ring_gather_on_host(a, &err) == TQ_OK && fake_registered() == staging, "unlocked");
    tq_ring_destroy(a);
    tq_ring_destroy(b);
    free(block);
}

/* Memory register_host locked, on this ring or another, is used as it is;
 * and memory a gather locked is what register_host uses.  Either way it is
 * unlocked when the last user lets go. */
static void check_register_host_is_shared(void)
{
    char *block = page_block(2), *x = block + 40;
    int32_t *y = (int32_t *)(block + 4096 + 100), got_y[4];
    char got_x[4 * 16];
    int64_t idx[4] = {1, 9, 4, 4};
    const void *ptrs[2] = {x, y};
    size_t bytes[2] = {16 * 16, 16 * 4};
    int read_only[2] = {0, 0};
    tq_error err;
    tq_gather_mechanism used;
    tq_ring *a = cuda_ring(4, 16), *b = cuda_ring(4, 16);
    int staging = fake_registered();

    CHECK(tq_ring_register_host(a, x, bytes[0], &err) == TQ_OK, "register_host: %s", err.message);
    CHECK(tq_ring_gather_on_device(a, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK,
          "a gather over memory register_host locked on the same ring: %s", err.message);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK,
          "a gather over memory register_host locked on another ring: %s", err.message);
    CHECK(fake_registered() == staging + 2, "x locked once, y once: %d ranges", fake_registered() - staging);
    put_and_check(b, x, y, 16, idx, 4, got_x, got_y, "gathered from register_host's memory");
    CHECK(tq_ring_unregister_host(a, x, &err) == TQ_OK, "unregister_host: %s", err.message);
    CHECK(fake_registered() == staging + 2, "x stays locked while gathers read it");
    put_and_check(b, x, y, 16, idx, 4, got_x, got_y, "gathered after unregister_host");
    CHECK(tq_ring_gather_on_host(a, &err) == TQ_OK && tq_ring_gather_on_host(b, &err) == TQ_OK, "detach");
    CHECK(fake_registered() == staging, "all unlocked: %d ranges left", fake_registered() - staging);

    /* The other order: a gather first, then register_host of the same array. */
    CHECK(tq_ring_gather_on_device(a, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_OK, "attach");
    CHECK(tq_ring_register_host(b, x, bytes[0], &err) == TQ_OK, "register_host over a gather's memory: %s",
          err.message);
    CHECK(fake_registered() == staging + 2, "x is not locked twice: %d ranges", fake_registered() - staging);
    CHECK(tq_ring_gather_on_host(a, &err) == TQ_OK && fake_registered() == staging + 1,
          "x stays locked for register_host");
    CHECK(tq_ring_unregister_host(b, x, &err) == TQ_OK && fake_registered() == staging, "unlocked at last");

    /* Memory that overlaps a locked range without lying inside it is refused, naming both. */
    CHECK(tq_ring_register_host(a, x + 16, 32, &err) == TQ_OK, "register_host of some rows: %s", err.message);
    CHECK(tq_ring_gather_on_device(b, ptrs, bytes, read_only, 2, TQ_GATHER_BATCH, &used, &err) == TQ_ESTATE &&
              strstr(err.message, "overlaps memory this process already page-locked") && used == TQ_GATHER_HOST,
          "a partial overlap: %s", err.message);
    CHECK(fake_registered() == staging + 1, "a refused attach locks nothing: %d", fake_registered() - staging);
    CHECK(tq_ring_unregister_host(a, x + 16, &err) == TQ_OK && fake_registered() == staging, "unlocked");
    tq_ring_destroy(a);
    tq_ring_destroy(b);
    free(block);
}

/* A held dataset whose device allocation fails holds nothing and leaves the
 * host gather; a gather kernel that fails to launch fails that put, naming
 * the call, and the next put (the kernel back) arrives whole.  Either way
 * gather_on_host and the ring give every allocation back. */
static void check_held_failures(void)
{
    enum { N = 20, BATCH = 4 };
    float x[N * 3];
    int32_t y[N], got_y[BATCH];
    float got_x[BATCH * 3];
    int64_t idx[BATCH] = {7, 2, 19, 2};
    for (int i = 0; i < N * 3; i++)
        x[i] = (float)i;
    for (int i = 0; i < N; i++)
        y[i] = 100 + i;
    const void *ptrs[2] = {x, y};
    size_t bytes[2] = {sizeof x, sizeof y};
    int read_only[2] = {0, 0};
    tq_gather_mechanism used;
    tq_error err;
    tq_ring *ring = cuda_ring(BATCH, 3 * sizeof(float));
    int slots = fake_device_allocs(), staging = fake_registered();

    setenv("FAKE_CUDA_FAIL", "cuMemAlloc_v2", 1);
    tq_code code = tq_ring_gather_on_device(ring, ptrs, bytes, read_only, 2, TQ_GATHER_DEVICE, &used, &err);
    unsetenv("FAKE_CUDA_FAIL");
    CHECK(code != TQ_OK && strstr(err.message, "cuMemAlloc") && used == TQ_GATHER_HOST,
          "a failed allocation is refused naming it: %s", code == TQ_OK ? "accepted" : err.message);
    CHECK(fake_device_allocs() == slots, "a refused attach holds %d allocations", fake_device_allocs() - slots);
    put_and_check(ring, (const char *)x, y, 3 * sizeof(float), idx, BATCH, (char *)got_x, got_y,
                  "gathered on the host after a refused attach");

    CHECK(tq_ring_gather_on_device(ring, ptrs, bytes, read_only, 2, TQ_GATHER_DEVICE, &used, &err) == TQ_OK &&
              used == TQ_GATHER_DEVICE,
          "attach: %s", err.message);
    put_and_check(ring, (const char *)x, y, 3 * sizeof(float), idx, 2, (char *)got_x, got_y, "a first, short batch");
    tq_rows srcs[2] = {{x, 3 * sizeof(float)}, {y, 4}};
    int slot;
    /* A batch the producer gathers on the copy stream (none is left to the consumer). */
    size_t in_step = tq_cuda_set_held_in_step_max(0);
    setenv("FAKE_CUDA_FAIL", "cuLaunchKernel", 1);
    code = tq_ring_reserve_put(ring, -1, NULL, &slot, &err);
    if (code == TQ_OK)
        code = tq_ring_put_rows(ring, slot, srcs, idx, BATCH, &err);
    unsetenv("FAKE_CUDA_FAIL");
    CHECK(code != TQ_OK && strstr(err.message, "cuLaunchKernel"), "a failed launch fails the put, naming it: %s",
          code == TQ_OK ? "put" : err.message);
    CHECK(tq_ring_size(ring) == 0, "the failed put left %d elements", tq_ring_size(ring));
    put_and_check(ring, (const char *)x, y, 3 * sizeof(float), idx, BATCH, (char *)got_x, got_y,
                  "gathered on the device after a failed launch");
    tq_cuda_set_held_in_step_max(in_step);
    /* A batch left to the consumer: the put makes no driver call; the read that
     * gathers it fails, naming the call, and the next element arrives whole. */
    code = tq_ring_reserve_put(ring, -1, NULL, &slot, &err);
    if (code == TQ_OK)
        code = tq_ring_put_rows(ring, slot, srcs, idx, BATCH, &err);
    CHECK(code == TQ_OK, "a put left to the consumer: %s", err.message);
    setenv("FAKE_CUDA_FAIL", "cuLaunchKernel", 1);
    if (code == TQ_OK && tq_ring_reserve_get(ring, -1, NULL, &slot, &err) == TQ_OK) {
        code = tq_ring_read_to_host(ring, slot, 0, got_x, &err);
        CHECK(code != TQ_OK && strstr(err.message, "cuLaunchKernel"), "a failed launch fails the read, naming it: %s",
              code == TQ_OK ? "read" : err.message);
        tq_ring_release_get(ring, slot);
    }
    unsetenv("FAKE_CUDA_FAIL");
    put_and_check(ring, (const char *)x, y, 3 * sizeof(float), idx, BATCH, (char *)got_x, got_y,
                  "gathered by the consumer after a failed launch");
    CHECK(tq_ring_gather_on_host(ring, &err) == TQ_OK, "detach: %s", err.message);
    CHECK(fake_device_allocs() == slots && fake_registered() == staging, "left held: %d allocations, %d ranges",
          fake_device_allocs() - slots, fake_registered() - staging);
    tq_ring_destroy(ring);
}

int main(int argc, char **argv)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    *(void **)&fake_registered = driver ? dlsym(driver, "fake_cuda_registered") : NULL;
    *(void **)&fake_gathers = driver ? dlsym(driver, "fake_cuda_gathers") : NULL;
    *(void **)&fake_batch_bytes = driver ? dlsym(driver, "fake_cuda_batch_bytes") : NULL;
    *(void **)&fake_kernel_gathers = driver ? dlsym(driver, "fake_cuda_kernel_gathers") : NULL;
    *(void **)&fake_device_allocs = driver ? dlsym(driver, "fake_cuda_device_allocs") : NULL;
    if (!fake_registered || !fake_gathers || !fake_batch_bytes || !fake_kernel_gathers || !fake_device_allocs ||
        argc < 2) {
        printf("usage: test_gather gather|large MECHANISM USED | refused MECHANISM ROW_BYTES TEXT | ranges, "
               "with the stand-in libcuda\n");
        return 2;
    }
    if (strcmp(argv[1], "gather") == 0 && argc == 4) {
        tq_gather_mechanism want = parse(argv[2]), expect = parse(argv[3]);
        /* Row sizes: 1, 3, 5, 17 bytes, MNIST's 784 and CIFAR's 3072 float32s;
         * sources at +0 (aligned), +1, +2, +8 bytes; partial last batches. */
        static const size_t sizes[] = {1, 3, 5, 16, 17, 784 * 4, 3072 * 4};
        static const size_t skews[] = {0, 1, 2, 8};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (size_t j = 0; j < sizeof skews / sizeof skews[0]; j++)
                check_pass(want, expect, NULL, sizes[i], skews[j], 37, 8, 1);
        check_pass(want, expect, NULL, 64, 0, 100, 32, 0); /* in order: runs of consecutive rows */
    } else if (strcmp(argv[1], "large") == 0 && argc == 4) {
        tq_gather_mechanism want = parse(argv[2]), expect = parse(argv[3]);
        check_pass(want, expect, NULL, LARGE_ROW, 1, 11, 4, 1);
        check_pass(want, expect, NULL, LARGE_ROW + 4, 0, 9, 4, 0);
    } else if (strcmp(argv[1], "refused") == 0 && argc == 5) {
        check_pass(parse(argv[2]), TQ_GATHER_HOST, argv[4], (size_t)atol(argv[3]), 1, 37, 8, 1);
    } else if (strcmp(argv[1], "held_failures") == 0) {
        check_held_failures();
    } else if (strcmp(argv[1], "ranges") == 0) {
        check_neighbours_take_copies();
        check_shared_ranges();
        check_register_host_is_shared();
    } else {
        printf("unknown test %s\n", argv[1]);
        return 2;
    }
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
