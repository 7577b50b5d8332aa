/* The host gather alone (c_code/engine/core/tq_gather.c), this tree's against another's, in one process: a
 * shuffled batch of 500 rows of 784 float32 out of 60000, C-contiguous, a Fortran-order file mapping and
 * every other element of rows twice as wide (x[:, ::2]); the two gathers take turns, each on rows of its
 * own (neither finds the other's in the cache), into three slots in turn.  Beside them, the roof of the
 * Fortran rows: one float read from each of as many random lines of the file as a batch touches, the
 * line prefetched 16 reads ahead.  Scenario 26 (doc/benchmarks.rst); build and run from this tree:
 *
 *   OTHER=/path/to/other/tree
 *   gcc -std=gnu11 -O2 -Ic_code/engine/core -c $OTHER/c_code/engine/core/tq_gather.c -o /tmp/other_gather.o \
 *       -Dtq_gather=other_gather -Dtq_scalar_size=other_size -Dtq_gather_converts=other_converts \
 *       -Dtq_gather_mechanism_name=other_name -Dtq_rows_span=other_span
 *   gcc -std=gnu11 -O2 -Ic_code/engine/core bench/gather_ab.c /tmp/other_gather.o c_code/engine/core/tq_gather.c \
 *       c_code/engine/core/tq_copy.c c_code/engine/core/tq_base.c -o /tmp/gather_ab -lpthread
 *   /tmp/gather_ab [BATCHES [THREADS [FILE]]]     (defaults 100, the pool's default, /tmp/gather_ab.f32)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tq_copy.h"
#include "tq_gather.h"

void other_gather(void *dst, const tq_rows *src, size_t row_bytes, const int64_t *idx, int64_t n);

#define ROWS 60000
#define ROW 784
#define BATCH 500

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, by_value);
    return t[n / 2];
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 100;
    tq_error err;
    if (argc > 2 && tq_copy_set_threads(atoi(argv[2]), &err) != TQ_OK)
        return fprintf(stderr, "%s\n", err.message), 2;
    const char *path = argc > 3 ? argv[3] : "/tmp/gather_ab.f32";
    size_t bytes = (size_t)ROWS * ROW * 4;
    float *c = malloc(bytes), *wide = malloc(2 * bytes), *slots = malloc(3 * (size_t)BATCH * ROW * 4);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (!c || !wide || !slots || fd < 0 || ftruncate(fd, (off_t)bytes))
        return perror("gather_ab"), 2;
    float *f = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t j = 0; j < ROW; j++)
            c[r * ROW + j] = f[j * ROWS + r] = wide[r * 2 * ROW + 2 * j] = (float)((r * ROW + j) % 9973);
    /* Read only, as np.memmap(..., "r") maps it. */
    msync(f, bytes, MS_SYNC);
    munmap(f, bytes);
    f = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    int64_t *idx = malloc(2 * (size_t)batches * BATCH * sizeof *idx);
    unsigned seed = 1;
    for (int64_t i = 0; i < 2 * (int64_t)batches * BATCH; i++)
        seed = seed * 1103515245u + 12345u, idx[i] = (int64_t)(seed >> 4) % ROWS;
    tq_row_layout fortran = {1, {ROW}, {ROWS * 4}, TQ_FLOAT32, TQ_FLOAT32};
    tq_row_layout every_other = {1, {ROW}, {8}, TQ_FLOAT32, TQ_FLOAT32};
    tq_rows sources[3] = {{c, ROW * 4, NULL}, {f, 4, &fortran}, {wide, ROW * 8, &every_other}};
    const char *names[3] = {"C-contiguous", "Fortran mapping", "every other"};
    double *mine = malloc((size_t)batches * sizeof *mine), *other = malloc((size_t)batches * sizeof *other);
    printf("%d threads, %d batches of %d rows of %d float32; median ms a batch\n", tq_copy_threads(), batches, BATCH,
           ROW);
    for (int k = 0; k < 3; k++) {
        int exact = 1;
        for (int b = 0; b < batches; b++)
            for (int turn = 0; turn < 2; turn++) {
                int here = (turn + b) % 2, at = 2 * b + turn;
                const int64_t *rows = idx + (size_t)at * BATCH;
                char *slot = (char *)slots + (size_t)(at % 3) * BATCH * ROW * 4;
                double began = now();
                (here ? tq_gather : other_gather)(slot, &sources[k], ROW * 4, rows, BATCH);
                (here ? mine : other)[b] = now() - began;
                for (int r = 0; r < BATCH && b == 0; r++)
                    exact &= memcmp(slot + (size_t)r * ROW * 4, c + rows[r] * ROW, ROW * 4) == 0;
            }
        double m = median(mine, batches), o = median(other, batches);
        printf("%-16s this tree %7.3f  other %7.3f  this/other %.2f%s\n", names[k], 1e3 * m, 1e3 * o, m / o,
               exact ? "" : "  NOT EXACT");
    }
    /* The roof: as many random lines of the file as a Fortran batch touches, one read each. */
    int64_t lines = (int64_t)BATCH * ROW, *at = malloc((size_t)lines * sizeof *at);
    float *out = malloc((size_t)lines * sizeof *out);
    for (int64_t i = 0; i < lines; i++)
        seed = seed * 1103515245u + 12345u, at[i] = (int64_t)(seed >> 2) % ((int64_t)ROWS * ROW / 16) * 16;
    for (int b = 0; b < 5; b++) {
        double began = now();
        for (int64_t i = 0; i < lines; i++) {
            if (i + 16 < lines)
                __builtin_prefetch(f + at[i + 16]);
            out[i] = f[at[i]];
        }
        mine[b] = now() - began;
        began = now();
        memcpy(wide, c, bytes);
        other[b] = now() - began;
    }
    double roof = median(mine, 5), copy = median(other, 5);
    printf("one thread: %lld random lines of the file %.3f ms (%.2f GB/s of lines); memcpy %.2f GB/s\n",
           (long long)lines, 1e3 * roof, (double)lines * 64 / roof / 1e9, (double)bytes / copy / 1e9);
    return 0;
}
