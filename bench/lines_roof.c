/* How fast can a Fortran-order memmap's batch be gathered (issue 26, point 4)?  A shuffled batch of 500 rows
 * of 784 float32 out of 60000 lies in about 365 000 distinct 64-byte lines of a Fortran-order file (a line
 * holds 16 rows' values of one column) against about 25 000 for C-contiguous rows.  For each thread count
 * this prints, one key=value line a measurement, medians over the batches:
 *
 *   overhead  an empty job of the copy pool (tq_copy_parallel), ms: every gather below pays it once;
 *   ceiling   one 4-byte load from each line a real batch touches (its rows sorted, column by column: the
 *             column walk's order; or the same lines shuffled), split evenly over the pool's threads, with
 *             software prefetch at a few distances and hints or none, from the 188 MB file-backed
 *             MAP_SHARED mapping, from anonymous memory of 4 KiB pages (MADV_NOHUGEPAGE) and from anonymous
 *             memory with MADV_HUGEPAGE (what the TLB misses cost): ms a batch and GB/s of lines (gbps_net:
 *             the pool's overhead taken off);
 *   gather    tq_gather (c_code/engine/core/tq_gather.c) through the pool at that thread count
 *             (tq_copy_set_threads) of the C-contiguous rows and of the Fortran mapping (its column walk
 *             split by columns among the threads): ms a batch, its ratio to the C-contiguous gather, and
 *             whether the first batch's bytes (every batch's with check=1) equal rows read by a plain
 *             element loop;
 *
 * then a summary line for each thread count and a final one for the largest: the Fortran gather's ratio
 * to the C-contiguous rows (fortran_ratio), and the ratio the ceiling implies (implied_ratio: the batch's
 * lines x 64 B at the best file ceiling's GB/s, over the C time; huge_implied_ratio: the same at the best
 * ceiling over huge pages).  The measurements take turns (rounds of batches/rounds each), each capped at
 * cap seconds a thread count: 28 measures x 0.15 s x 5 thread counts, about 21 s at most, plus about 3 s
 * to write the file.  Needs ~600 MB of memory and 188 MB of disk for the file (removed at the
 * end unless keep=1).  Build and run from the tree:
 *
 *   gcc -std=gnu11 -O2 -Ic_code/engine/core bench/lines_roof.c c_code/engine/core/tq_gather.c c_code/engine/core/tq_copy.c \
 *       c_code/engine/core/tq_base.c -o /tmp/lines_roof -lpthread
 *   /tmp/lines_roof                       (threads=1,2,4,8,16 and the pool's default, batches=100)
 *   /tmp/lines_roof threads=1,2 batches=10 check=1 file=/tmp/lines_roof.f32 cap=0.15 rounds=4 keep=0
 *
 * The split walk's prefetch (its distance in reads and its hint, 2: prefetcht1, 3: prefetcht0) is chosen
 * at build: add -DSPLIT_AHEAD=128 -DSPLIT_LOCALITY=3 to the gcc line above to measure another.
 *
 * cap: the seconds at most a measurement takes at one thread count (over its rounds).  only=WORD,WORD: the
 * gathers and ceilings whose names contain one of the words (and the C-contiguous gather) only.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tq_base.h"
#include "tq_copy.h"
#include "tq_gather.h"

#define ROWS 60000
#define COLS 784
#define BATCH 500
#define ROW_BYTES (COLS * 4)
#define FILE_BYTES ((size_t)ROWS * ROW_BYTES)
#define LISTS 16 /* batches whose lines the ceiling reads, in turn */
#define MAX_TIMES 10000

static struct {
    int batches, rounds, check, keep;
    double cap;
    const char *file, *only;
    int threads[32], n_threads;
} opt = {100, 4, 0, 0, 0.15, "/tmp/lines_roof.f32", NULL, {0}, 0};

/* ---- the data: element (r, j) is the uint32 r * COLS + j, a finite float's bits ---------------------- */

static uint32_t value(int64_t r, int64_t j) { return (uint32_t)(r * COLS + j); }

static uint64_t rng = 88172645463325252ull;
static uint64_t next_random(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* Shuffled batches: a permutation of the rows, reshuffled every epoch (120 batches). */
static int64_t perm[ROWS];
static int64_t perm_at = ROWS;

static const int64_t *next_batch(void)
{
    if (perm_at + BATCH > ROWS) {
        for (int64_t i = ROWS - 1; i > 0; i--) {
            int64_t j = (int64_t)(next_random() % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        perm_at = 0;
    }
    perm_at += BATCH;
    return perm + perm_at - BATCH;
}

static int by_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    if (n <= 0)
        return 0;
    qsort(t, (size_t)n, sizeof *t, by_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* The huge pages (kB) the mapping that starts at `at` has, from /proc/self/smaps; -1 if unknown. */
static long huge_kb(const void *at)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512], perms[8];
    unsigned long lo, hi;
    long kb = -1, v;
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
            if (inside)
                break;
            inside = lo == (unsigned long)at;
            kb = inside ? 0 : -1;
        } else if (inside &&
                   (sscanf(line, "AnonHugePages: %ld", &v) == 1 || sscanf(line, "FilePmdMapped: %ld", &v) == 1 ||
                    sscanf(line, "ShmemPmdMapped: %ld", &v) == 1))
            kb += v;
    }
    fclose(f);
    return kb;
}

static void read_text(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");
    out[0] = 0;
    if (f && fgets(out, (int)size, f))
        out[strcspn(out, "\n")] = 0;
    if (f)
        fclose(f);
    for (char *p = out; *p; p++)
        if (*p == ' ')
            *p = ',';
}

/* ---- the ceiling: one load from each line of a list, split over the pool's threads -------------------- */

typedef struct {
    const uint32_t *base;  /* element offsets below are into this */
    const uint32_t *lines; /* element offsets: one per line */
    size_t n, n_chunks;
    int ahead, hint;
    uint32_t sink[256 * 16];
} lines_job;

#define READ_LINES(NAME, LOCALITY)                                                      \
    static uint32_t NAME(const uint32_t *base, const uint32_t *at, size_t n, int ahead) \
    {                                                                                   \
        uint32_t acc = 0;                                                               \
        size_t i = 0;                                                                   \
        for (; i + (size_t)ahead < n; i++) {                                            \
            __builtin_prefetch(base + at[i + (size_t)ahead], 0, LOCALITY);              \
            acc += base[at[i]];                                                         \
        }                                                                               \
        for (; i < n; i++)                                                              \
            acc += base[at[i]];                                                         \
        return acc;                                                                     \
    }
READ_LINES(read_t0, 3)
READ_LINES(read_t1, 2)
READ_LINES(read_t2, 1)
READ_LINES(read_nta, 0)

static uint32_t read_plain(const uint32_t *base, const uint32_t *at, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += base[at[i]];
    return acc;
}

static void lines_chunk(void *arg, size_t c)
{
    lines_job *job = arg;
    size_t lo = c * job->n / job->n_chunks, hi = (c + 1) * job->n / job->n_chunks;
    const uint32_t *at = job->lines + lo;
    uint32_t acc;
    if (!job->ahead)
        acc = read_plain(job->base, at, hi - lo);
    else if (job->hint == 0)
        acc = read_t0(job->base, at, hi - lo, job->ahead);
    else if (job->hint == 1)
        acc = read_t1(job->base, at, hi - lo, job->ahead);
    else if (job->hint == 2)
        acc = read_t2(job->base, at, hi - lo, job->ahead);
    else
        acc = read_nta(job->base, at, hi - lo, job->ahead);
    job->sink[(c % 256) * 16] += acc;
}

static void nothing(void *arg, size_t c) { (void)arg, (void)c; }

/* The lines of LISTS batches of a Fortran-order ROWS x COLS float32 array, as element offsets: the rows
 * sorted, column by column, the first row of the batch in each line; and the same lines shuffled. */
static uint32_t *sorted_lines[LISTS], *shuffled_lines[LISTS];
static size_t n_lines[LISTS];

static void make_lines(void)
{
    int64_t rows[BATCH];
    for (int b = 0; b < LISTS; b++) {
        memcpy(rows, next_batch(), sizeof rows);
        qsort(rows, BATCH, sizeof *rows, by_int64);
        uint32_t *list = malloc((size_t)BATCH * COLS * sizeof *list);
        size_t n = 0;
        for (int64_t j = 0; j < COLS; j++)
            for (int k = 0; k < BATCH; k++)
                if (k == 0 || rows[k] / 16 != rows[k - 1] / 16)
                    list[n++] = (uint32_t)(j * ROWS + rows[k]);
        uint32_t *mixed = malloc(n * sizeof *mixed);
        memcpy(mixed, list, n * sizeof *mixed);
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)(next_random() % (i + 1));
            uint32_t t = mixed[i];
            mixed[i] = mixed[j], mixed[j] = t;
        }
        sorted_lines[b] = list, shuffled_lines[b] = mixed, n_lines[b] = n;
    }
}

/* ---- what is measured ---------------------------------------------------------------------------- */

enum { OVERHEAD, CEILING, GATHER };
enum { MEM_FILE, MEM_ANON4K, MEM_ANONHUGE };
static const char *memory_names[] = {"file", "anon4k", "anonhuge"};
static const char *hint_names[] = {"t0", "t1", "t2", "nta"};

typedef struct {
    int what;
    char name[64];
    /* CEILING */
    int memory, shuffled, ahead, hint;
    /* GATHER: fortran 0 the C-contiguous rows, 1 the Fortran mapping */
    int fortran;
    /* results at one thread count */
    double times[MAX_TIMES];
    int n_times, exact, checked;
    double spent;
} measure;

#define MAX_MEASURES 32
static measure measures[MAX_MEASURES];
static int n_measures;

static measure *add(int what, const char *name)
{
    measure *m = &measures[n_measures++];
    m->what = what;
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

static void add_ceiling(int memory, int shuffled, int ahead, int hint)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s_%s%.0d%s%s", memory_names[memory], shuffled ? "shuffled" : "sorted",
             ahead ? "pf" : "nopf", ahead, ahead ? "_" : "", ahead ? hint_names[hint] : "");
    measure *m = add(CEILING, name);
    m->memory = memory, m->shuffled = shuffled, m->ahead = ahead, m->hint = hint;
}

static void make_measures(void)
{
    add(OVERHEAD, "pool_empty_job");
    /* The file: no prefetch; prefetcht0 at a few distances; prefetcht1 (into L2) further; t2 and nta. */
    add_ceiling(MEM_FILE, 0, 0, 0);
    for (int d = 8; d <= 64; d *= 2)
        add_ceiling(MEM_FILE, 0, d, 0);
    for (int d = 16; d <= 256; d *= 2)
        add_ceiling(MEM_FILE, 0, d, 1);
    add_ceiling(MEM_FILE, 0, 64, 2);
    add_ceiling(MEM_FILE, 0, 64, 3);
    add_ceiling(MEM_FILE, 1, 0, 0);
    add_ceiling(MEM_FILE, 1, 32, 0);
    add_ceiling(MEM_FILE, 1, 128, 1);
    for (int mem = MEM_ANON4K; mem <= MEM_ANONHUGE; mem++) {
        add_ceiling(mem, 0, 0, 0);
        add_ceiling(mem, 0, 32, 0);
        add_ceiling(mem, 0, 64, 1);
        add_ceiling(mem, 0, 128, 1);
        add_ceiling(mem, 1, 128, 1);
    }
    add(GATHER, "c_contiguous");
    add(GATHER, "fortran")->fortran = 1;
}

static const uint32_t *file_map, *c_rows, *anon4k;
static char *slots;
static double mean_lines, c_lines;

/* dst holds rows idx of the Fortran mapping: checked element by element, and against the C rows. */
static int exact_rows(const char *dst, const int64_t *idx)
{
    for (int k = 0; k < BATCH; k++) {
        const char *row = dst + (size_t)k * ROW_BYTES;
        for (int64_t j = 0; j < COLS; j++) {
            uint32_t got;
            memcpy(&got, row + j * 4, 4);
            if (got != file_map[j * ROWS + idx[k]] || got != value(idx[k], j))
                return 0;
        }
        if (memcmp(row, c_rows + idx[k] * COLS, ROW_BYTES))
            return 0;
    }
    return 1;
}

static int list_at;

/* One batch of measure m: its time in seconds. */
static double run_one(measure *m, int batch_no)
{
    static lines_job job;
    double began, took;
    if (m->what == OVERHEAD) {
        size_t threads = (size_t)tq_copy_threads();
        began = tq_now();
        tq_copy_parallel(threads, nothing, NULL);
        return tq_now() - began;
    }
    if (m->what == CEILING) {
        int b = list_at++ % LISTS;
        job.base = m->memory == MEM_FILE ? file_map : m->memory == MEM_ANON4K ? anon4k : c_rows;
        job.lines = m->shuffled ? shuffled_lines[b] : sorted_lines[b];
        job.n = n_lines[b];
        job.n_chunks = (size_t)tq_copy_threads();
        job.ahead = m->ahead, job.hint = m->hint;
        began = tq_now();
        tq_copy_parallel(job.n_chunks, lines_chunk, &job);
        return tq_now() - began;
    }
    const int64_t *idx = next_batch();
    char *slot = slots + (size_t)(batch_no % 3) * BATCH * ROW_BYTES;
    static tq_row_layout fortran = {1, {COLS}, {ROWS * 4}, TQ_FLOAT32, TQ_FLOAT32};
    tq_rows c_src = {c_rows, ROW_BYTES, NULL}, f_src = {file_map, 4, &fortran};
    began = tq_now();
    tq_gather(slot, m->fortran ? &f_src : &c_src, ROW_BYTES, idx, BATCH);
    took = tq_now() - began;
    if (!m->checked || opt.check) { /* a slot holds another batch's rows, or 0xff bytes, before */
        m->exact &= exact_rows(slot, idx);
        m->checked = 1;
    }
    return took;
}

static int selected(const measure *m)
{
    if (!opt.only || m->what == OVERHEAD || !strcmp(m->name, "c_contiguous"))
        return 1;
    for (const char *w = opt.only; *w; w += strcspn(w, ",") + (w[strcspn(w, ",")] == ',')) {
        char word[64];
        size_t len = strcspn(w, ",");
        snprintf(word, sizeof word, "%.*s", (int)(len < 63 ? len : 63), w);
        if (len && strstr(m->name, word))
            return 1;
    }
    return 0;
}

static double ms_of(const char *name)
{
    for (int i = 0; i < n_measures; i++)
        if (!strcmp(measures[i].name, name))
            return 1e3 * median(measures[i].times, measures[i].n_times);
    return 0;
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (!strncmp(a, "batches=", 8))
            opt.batches = atoi(a + 8);
        else if (!strncmp(a, "rounds=", 7))
            opt.rounds = atoi(a + 7);
        else if (!strncmp(a, "check=", 6))
            opt.check = atoi(a + 6);
        else if (!strncmp(a, "keep=", 5))
            opt.keep = atoi(a + 5);
        else if (!strncmp(a, "cap=", 4))
            opt.cap = atof(a + 4);
        else if (!strncmp(a, "file=", 5))
            opt.file = a + 5;
        else if (!strncmp(a, "only=", 5))
            opt.only = a + 5;
        else if (!strncmp(a, "threads=", 8)) {
            opt.n_threads = 0;
            for (char *p = a + 8; *p && opt.n_threads < 31; p += *p == ',')
                opt.threads[opt.n_threads++] = (int)strtol(p, &p, 10);
        } else {
            fprintf(stderr, "unknown argument %s (see the header of bench/lines_roof.c)\n", a);
            exit(2);
        }
    }
    if (opt.batches < 1 || opt.batches > MAX_TIMES || opt.rounds < 1)
        fprintf(stderr, "batches 1 to %d, rounds >= 1\n", MAX_TIMES), exit(2);
    if (!opt.n_threads) {
        int list[] = {1, 2, 4, 8, 16};
        memcpy(opt.threads, list, sizeof list);
        opt.n_threads = 5;
    }
}

static int by_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void *mapped(size_t bytes, int advice)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        perror("lines_roof: mmap"), exit(2);
    madvise(p, bytes, advice);
    return p;
}

/* The best (fastest) measure of a kind whose name starts with `prefix`. */
static const measure *best_of(int what, const char *prefix)
{
    const measure *best = NULL;
    double best_ms = 0;
    for (int i = 0; i < n_measures; i++) {
        const measure *m = &measures[i];
        if (m->what != what || !m->n_times || strncmp(m->name, prefix, strlen(prefix)))
            continue;
        double ms = ms_of(m->name);
        if (!best || ms < best_ms)
            best = m, best_ms = ms;
    }
    return best;
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    make_measures();
    int default_threads = tq_copy_threads(), have = 0, n = 0;
    for (int i = 0; i < opt.n_threads; i++)
        have |= opt.threads[i] == default_threads;
    if (!have)
        opt.threads[opt.n_threads++] = default_threads;
    qsort(opt.threads, (size_t)opt.n_threads, sizeof *opt.threads, by_int);
    for (int i = 0; i < opt.n_threads; i++)
        if (opt.threads[i] >= 1 && (n == 0 || opt.threads[i] != opt.threads[n - 1]))
            opt.threads[n++] = opt.threads[i];
    opt.n_threads = n;

    /* The Fortran-order file, written column by column, mapped read-only as np.memmap(..., "r") maps it. */
    int fd = open(opt.file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    uint32_t *column = malloc(ROWS * sizeof *column);
    if (fd < 0 || !column)
        return perror(opt.file), 2;
    for (int64_t j = 0; j < COLS; j++) {
        for (int64_t r = 0; r < ROWS; r++)
            column[r] = value(r, j);
        if (write(fd, column, ROWS * sizeof *column) != (ssize_t)(ROWS * sizeof *column))
            return perror(opt.file), 2;
    }
    free(column);
    file_map = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (file_map == MAP_FAILED)
        return perror("lines_roof: mmap of the file"), 2;
    /* The C-contiguous rows as numpy allocates a large array (it asks for huge pages); their bytes serve
     * the ceiling over huge pages as well (read at the Fortran file's offsets). */
    uint32_t *c = mapped(FILE_BYTES, MADV_HUGEPAGE), *a4 = mapped(FILE_BYTES, MADV_NOHUGEPAGE);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t j = 0; j < COLS; j++)
            c[r * COLS + j] = value(r, j);
    memcpy(a4, c, FILE_BYTES);
    c_rows = c, anon4k = a4;
    slots = malloc(3 * (size_t)BATCH * ROW_BYTES);
    if (!slots)
        return perror("lines_roof"), 2;
    memset(slots, 0xff, 3 * (size_t)BATCH * ROW_BYTES);
    for (int64_t r = 0; r < ROWS; r++)
        perm[r] = r;
    make_lines();
    for (int b = 0; b < LISTS; b++)
        mean_lines += (double)n_lines[b] / LISTS;
    /* A C-contiguous row's lines: 3136 bytes from a line-aligned base, 49 lines each. */
    c_lines = (double)BATCH * ((ROW_BYTES + 63) / 64);

    char thp[128], shmem[128];
    read_text("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
    read_text("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem, sizeof shmem);
    printf("config rows=%d cols=%d batch=%d file=%s batches=%d rounds=%d cap_s=%g check=%d measures=%d cpus=%ld "
           "default_threads=%d thp=%s shmem_thp=%s\n",
           ROWS, COLS, BATCH, opt.file, opt.batches, opt.rounds, opt.cap, opt.check, n_measures,
           sysconf(_SC_NPROCESSORS_ONLN), default_threads, thp, shmem);
    printf("memory file_huge_kb=%ld anonhuge_huge_kb=%ld anon4k_huge_kb=%ld\n", huge_kb(file_map), huge_kb(c_rows),
           huge_kb(anon4k));
    printf("lines fortran_per_batch=%.0f c_per_batch=%.0f ratio=%.2f fortran_mb=%.2f c_mb=%.2f\n", mean_lines, c_lines,
           mean_lines / c_lines, mean_lines * 64 / 1e6, c_lines * 64 / 1e6);
    fflush(stdout);

    double began_all = tq_now();
    char final[1024] = "";
    for (int ti = 0; ti < opt.n_threads; ti++) {
        int threads = opt.threads[ti];
        tq_error err;
        if (tq_copy_set_threads(threads, &err) != TQ_OK)
            return fprintf(stderr, "lines_roof: %s\n", err.message), 2;
        for (int i = 0; i < n_measures; i++) {
            measure *m = &measures[i];
            m->n_times = 0, m->exact = 1, m->checked = 0, m->spent = 0;
            if (selected(m))
                run_one(m, 0); /* a warm-up: the pool made, the code and the lists' pages in */
        }
        int per_round = (opt.batches + opt.rounds - 1) / opt.rounds;
        for (int round = 0; round < opt.rounds; round++)
            for (int i = 0; i < n_measures; i++) {
                measure *m = &measures[i];
                double budget = opt.cap * (round + 1) / opt.rounds;
                for (int k = 0; selected(m) && k < per_round && m->n_times < opt.batches && m->spent < budget; k++) {
                    double t0 = tq_now();
                    m->times[m->n_times] = run_one(m, m->n_times + 1);
                    m->n_times++;
                    m->spent += tq_now() - t0;
                }
            }
        double overhead = ms_of("pool_empty_job"), c_ms = ms_of("c_contiguous");
        const char *is_default = threads == default_threads ? " default=1" : "";
        for (int i = 0; i < n_measures; i++) {
            measure *m = &measures[i];
            if (!m->n_times)
                continue;
            double ms = ms_of(m->name);
            if (m->what == OVERHEAD)
                printf("overhead threads=%d%s name=%s ms=%.4f batches=%d\n", threads, is_default, m->name, ms,
                       m->n_times);
            else if (m->what == CEILING)
                printf("ceiling threads=%d%s name=%s memory=%s order=%s prefetch=%d hint=%s lines=%.0f ms=%.4f "
                       "gbps=%.2f gbps_net=%.2f batches=%d\n",
                       threads, is_default, m->name, memory_names[m->memory], m->shuffled ? "shuffled" : "sorted",
                       m->ahead, m->ahead ? hint_names[m->hint] : "none", mean_lines, ms, mean_lines * 64 / ms / 1e6,
                       ms > overhead ? mean_lines * 64 / (ms - overhead) / 1e6 : 0.0, m->n_times);
            else
                printf("gather threads=%d%s name=%s ms=%.4f ratio_c=%.3f exact=%d batches=%d\n", threads, is_default,
                       m->name, ms, c_ms > 0 ? ms / c_ms : 0.0, m->exact, m->n_times);
        }
        const measure *roof = best_of(CEILING, "file"), *huge = best_of(CEILING, "anonhuge");
        double f_ms = ms_of("fortran");
        double roof_gbps = roof ? mean_lines * 64 / ms_of(roof->name) / 1e6 : 0;
        double huge_gbps = huge ? mean_lines * 64 / ms_of(huge->name) / 1e6 : 0;
        double implied = roof_gbps > 0 ? mean_lines * 64 / roof_gbps / 1e6 : 0;
        double implied_huge = huge_gbps > 0 ? mean_lines * 64 / huge_gbps / 1e6 : 0;
        snprintf(final, sizeof final,
                 "threads=%d%s c_ms=%.4f fortran_ms=%.4f fortran_ratio=%.3f ceiling=%s ceiling_gbps=%.2f "
                 "implied_ms=%.4f implied_ratio=%.3f huge_ceiling=%s huge_gbps=%.2f huge_implied_ratio=%.3f",
                 threads, is_default, c_ms, f_ms, c_ms > 0 ? f_ms / c_ms : 0.0, roof ? roof->name : "none", roof_gbps,
                 implied, c_ms > 0 ? implied / c_ms : 0.0, huge ? huge->name : "none", huge_gbps,
                 c_ms > 0 ? implied_huge / c_ms : 0.0);
        printf("summary %s\n", final);
        fflush(stdout);
    }
    printf("final %s elapsed_s=%.1f\n", final, tq_now() - began_all);
    printf("# At the largest thread count: the Fortran gather above is fortran_ratio x the C-contiguous gather; "
           "reading the batch's lines at the best ceiling's rate would take implied_ratio x (target: 1.5).\n");
    if (!opt.keep)
        unlink(opt.file);
    return 0;
}
