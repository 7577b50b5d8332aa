/* Part of the stand-in CUDA driver (fake_libcuda.c), included before its
 * memory: its streams and events, whose work runs at once or, when
 * FAKE_CUDA_ASYNC=us is set, later, in order, on a thread of each stream's
 * own, as the GPU does.
 *
 * Without it, work runs at once in the calling thread, and ordering by
 * streams and events is never tested: a copy that reads a staging before a
 * producer overwrites it, or a reader that waits for the wrong event, still
 * sees the right bytes.  With it, each stream made by cuStreamCreate queues
 * its copies, kernels, waits and records, and its thread does them in
 * order, after a random pause of up to `us` microseconds each, so that
 * missing orderings show as wrong bytes (or, under the sanitizers, as races).
 * Memory is read when the copy runs, not when it is queued.
 *
 * An event counts its records: a record takes the next number when it is
 * queued, and the event reaches it when the record runs; a wait (of a stream,
 * or cuEventSynchronize on the host) waits for the number the event had when
 * the wait was made, as the driver's does.  Streams the stand-in did not
 * make (a caller's, such as the tests' 99, and the NULL stream) stay
 * synchronous: their work runs at once, their waits block the caller.
 * cuMemFree, cuMemFreeHost, cuMemHostUnregister and cuEventDestroy first
 * wait until every stream is idle, as they may not free what queued work
 * still uses.  A host wait that lasts more than 20 s aborts: a deadlock.
 *
 * The stream memory operations (cuStreamWaitValue32_v2, GEQ only, and
 * cuStreamWriteValue32_v2) wait for and write a word as the stream reaches
 * them; a kernel that never ends by itself (fake_libcuda_kernel.c's
 * persistent gather) runs only on a stream of its own thread.  Built with
 * -DFAKE_CUDA_NO_MEMOPS, the stand-in lacks the memory operations. */

#include <time.h>
#include <unistd.h>

#define KERNEL_ARGUMENT_BYTES 1024

typedef struct {
    unsigned long long recorded, done; /* the last record queued, and the last one run */
} fake_event;

typedef enum { OP_COPY, OP_KERNEL, OP_WAIT, OP_RECORD, OP_WAIT_VALUE, OP_WRITE_VALUE, OP_STOP } op_kind;

typedef struct op {
    struct op *next;
    op_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    fake_event *event;
    unsigned long long number; /* an event's record; a memory operation's value */
    void *function;
    unsigned int gy;
    unsigned char arguments[KERNEL_ARGUMENT_BYTES]; /* a kernel's parameters, one after the other */
} op;

typedef struct fake_stream {
    struct fake_stream *next_stream; /* every stream made, for the frees that wait for all */
    op *head, *tail;                 /* its queue; the head stays until it has run */
    pthread_t thread;
    int running; /* 1 when it has a thread (FAKE_CUDA_ASYNC) */
    unsigned int seed;
} fake_stream;

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t async_changed = PTHREAD_COND_INITIALIZER; /* an op ran, an event was reached */
static fake_stream *all_streams;

/* The longest pause before each op, in microseconds; 0 when streams are synchronous. */
static int async_pause_us(void)
{
    const char *us = getenv("FAKE_CUDA_ASYNC");
    return us ? atoi(us) : 0;
}

static CUresult launch(void *function, unsigned int gy, void **params);
static int parameter_sizes(const void *function, size_t *sizes);

/* Where each parameter lies in packed arguments: 16-byte aligned, one after the other. */
static int unpack_params(const void *function, unsigned char *arguments, void **params)
{
    size_t sizes[4], at = 0;
    int n = parameter_sizes(function, sizes);
    for (int i = 0; i < n; i++) {
        params[i] = arguments + at;
        at += (sizes[i] + 15) / 16 * 16;
    }
    return n;
}

/* Packs a launch's parameters as they are now, as the driver keeps them. */
static void pack_params(const void *function, void **params, unsigned char *arguments)
{
    void *where[4];
    size_t sizes[4];
    int n = unpack_params(function, arguments, where);
    parameter_sizes(function, sizes);
    for (int i = 0; i < n; i++)
        memcpy(where[i], params[i], sizes[i]);
}

/* Blocks until the event reaches `number` (async_lock held); aborts after 20 s. */
static void reach(fake_event *e, unsigned long long number)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    while (e->done < number)
        if (pthread_cond_timedwait(&async_changed, &async_lock, &until)) {
            fprintf(stderr, "fake_libcuda: waited 20 s for an event: a deadlock\n");
            abort();
        }
}

/* Until (int32_t)(*word - value) >= 0, the driver's GEQ; aborts after 20 s.  The word is written by
 * other threads without any lock (a kernel, the host), so the wait polls. */
static void reach_value(const unsigned int *word, unsigned int value)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while ((int)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) < 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 20) {
            fprintf(stderr, "fake_libcuda: waited 20 s for a word to reach %u: a deadlock\n", value);
            abort();
        }
        usleep(1);
    }
}

static void run_op(op *o)
{
    if (o->kind == OP_WAIT_VALUE) {
        reach_value(o->dst, (unsigned int)o->number);
    } else if (o->kind == OP_WRITE_VALUE) {
        __atomic_store_n((unsigned int *)o->dst, (unsigned int)o->number, __ATOMIC_RELEASE);
    } else if (o->kind == OP_COPY) {
        memcpy(o->dst, o->src, o->bytes);
    } else if (o->kind == OP_KERNEL) {
        void *params[4];
        unpack_params(o->function, o->arguments, params);
        launch(o->function, o->gy, params); /* a failure is the kernel's to count; none is reported here */
    }
}

static void *stream_main(void *arg)
{
    fake_stream *s = arg;
    pthread_mutex_lock(&async_lock);
    for (;;) {
        while (!s->head)
            pthread_cond_wait(&async_changed, &async_lock);
        op *o = s->head;
        if (o->kind == OP_STOP)
            break;
        pthread_mutex_unlock(&async_lock);
        int pause = async_pause_us();
        if (pause > 0)
            usleep((useconds_t)(rand_r(&s->seed) % (unsigned)pause));
        pthread_mutex_lock(&async_lock);
        if (o->kind == OP_WAIT)
            reach(o->event, o->number);
        pthread_mutex_unlock(&async_lock);
        run_op(o);
        pthread_mutex_lock(&async_lock);
        if (o->kind == OP_RECORD && o->event->done < o->number)
            o->event->done = o->number;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        free(o);
        pthread_cond_broadcast(&async_changed);
    }
    free(s->head);
    s->head = s->tail = NULL;
    pthread_cond_broadcast(&async_changed);
    pthread_mutex_unlock(&async_lock);
    return NULL;
}

/* The stream behind a handle when its work is queued; NULL for a synchronous one. */
static fake_stream *queued_stream(void *handle)
{
    fake_stream *found = NULL;
    pthread_mutex_lock(&async_lock);
    for (fake_stream *s = all_streams; s && !found; s = s->next_stream)
        if (s == handle && s->running)
            found = s;
    pthread_mutex_unlock(&async_lock);
    return found;
}

static void enqueue(fake_stream *s, op *o)
{
    pthread_mutex_lock(&async_lock);
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&async_changed);
    pthread_mutex_unlock(&async_lock);
}

static op *new_op(op_kind kind)
{
    op *o = calloc(1, sizeof *o);
    if (!o) {
        fprintf(stderr, "fake_libcuda: out of memory for an op\n");
        abort();
    }
    o->kind = kind;
    return o;
}

/* ---- what the driver calls do, on either kind of stream ------------------------------- */

static void do_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    fake_stream *s = queued_stream(stream);
    if (!s) {
        memcpy(dst, src, bytes);
        return;
    }
    op *o = new_op(OP_COPY);
    o->dst = dst;
    o->src = src;
    o->bytes = bytes;
    enqueue(s, o);
}

static CUresult do_kernel(void *stream, void *function, unsigned int gy, void **params)
{
    fake_stream *s = queued_stream(stream);
    if (!s)
        return launch(function, gy, params);
    op *o = new_op(OP_KERNEL);
    o->function = function;
    o->gy = gy;
    pack_params(function, params, o->arguments);
    enqueue(s, o);
    return OK;
}

static void do_record(void *stream, fake_event *e)
{
    fake_stream *s = queued_stream(stream);
    pthread_mutex_lock(&async_lock);
    unsigned long long number = ++e->recorded;
    if (!s && e->done < number) {
        e->done = number;
        pthread_cond_broadcast(&async_changed);
    }
    pthread_mutex_unlock(&async_lock);
    if (s) {
        op *o = new_op(OP_RECORD);
        o->event = e;
        o->number = number;
        enqueue(s, o);
    }
}

static void do_wait(void *stream, fake_event *e)
{
    fake_stream *s = queued_stream(stream);
    pthread_mutex_lock(&async_lock);
    unsigned long long number = e->recorded;
    if (!s)
        reach(e, number);
    pthread_mutex_unlock(&async_lock);
    if (s) {
        op *o = new_op(OP_WAIT);
        o->event = e;
        o->number = number;
        enqueue(s, o);
    }
}

static void synchronize_event(fake_event *e)
{
    pthread_mutex_lock(&async_lock);
    reach(e, e->recorded);
    pthread_mutex_unlock(&async_lock);
}

static int event_reached(fake_event *e)
{
    pthread_mutex_lock(&async_lock);
    int reached = e->done >= e->recorded;
    pthread_mutex_unlock(&async_lock);
    return reached;
}

/* Blocks until `only` (or, NULL, every stream) has run all it was given. */
static void synchronize_streams(fake_stream *only)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&async_lock);
    for (;;) {
        int busy = 0;
        for (fake_stream *s = all_streams; s && !busy; s = s->next_stream)
            busy = (!only || s == only) && s->head != NULL;
        if (!busy)
            break;
        if (pthread_cond_timedwait(&async_changed, &async_lock, &until)) {
            fprintf(stderr, "fake_libcuda: waited 20 s for a stream: a deadlock\n");
            abort();
        }
    }
    pthread_mutex_unlock(&async_lock);
}

static fake_stream *make_stream(void)
{
    fake_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->seed = (unsigned int)(uintptr_t)s;
    s->running = async_pause_us() > 0 && pthread_create(&s->thread, NULL, stream_main, s) == 0;
    pthread_mutex_lock(&async_lock);
    s->next_stream = all_streams;
    all_streams = s;
    pthread_mutex_unlock(&async_lock);
    return s;
}

/* Its queued work is done first. */
static void destroy_stream(fake_stream *s)
{
    if (s->running) {
        enqueue(s, new_op(OP_STOP));
        pthread_join(s->thread, NULL);
    }
    pthread_mutex_lock(&async_lock);
    for (fake_stream **at = &all_streams; *at; at = &(*at)->next_stream)
        if (*at == s) {
            *at = s->next_stream;
            break;
        }
    pthread_mutex_unlock(&async_lock);
    free(s);
}

/* ---- streams and events ---------------------------------------------------------------- */
/* cuStreamWaitEvent and the records, which a capture records instead, are fake_libcuda_graph.c's. */

CUresult cuStreamCreate(void **stream, unsigned int flags)
{
    ENTER("cuStreamCreate");
    (void)flags;
    *stream = make_stream(); /* never 0x1 or 0x2, the default streams' handles */
    if (!*stream)
        return ERR_OUT_OF_MEMORY;
    COUNT(streams, 1);
    return OK;
}

CUresult cuStreamDestroy_v2(void *stream)
{
    destroy_stream(stream);
    COUNT(streams, -1);
    return OK;
}

CUresult cuStreamSynchronize(void *stream)
{
    ENTER("cuStreamSynchronize");
    fake_stream *s = queued_stream(stream);
    if (s)
        synchronize_streams(s);
    return OK;
}

CUresult cuEventCreate(void **event, unsigned int flags)
{
    ENTER("cuEventCreate");
    (void)flags;
    *event = calloc(1, sizeof(fake_event));
    if (!*event)
        return ERR_OUT_OF_MEMORY;
    COUNT(events, 1);
    return OK;
}

CUresult cuEventDestroy_v2(void *event)
{
    synchronize_streams(NULL); /* no queued record or wait may still name it */
    free(event);
    COUNT(events, -1);
    return OK;
}

CUresult cuEventSynchronize(void *event)
{
    ENTER("cuEventSynchronize");
    log_line("sync", NULL);
    synchronize_event(event);
    return OK;
}

#ifndef FAKE_CUDA_NO_MEMOPS
/* A stream memory operation: a wait for the word (OP_WAIT_VALUE) or a write of it. */
static void do_value(void *stream, op_kind kind, unsigned int *word, unsigned int value)
{
    fake_stream *s = queued_stream(stream);
    if (!s) {
        op now = {.kind = kind, .dst = word, .number = value};
        run_op(&now);
        return;
    }
    op *o = new_op(kind);
    o->dst = word;
    o->number = value;
    enqueue(s, o);
}

CUresult cuStreamWaitValue32_v2(void *stream, unsigned long long address, unsigned int value, unsigned int flags)
{
    ENTER("cuStreamWaitValue32_v2");
    if (flags != 0 /* CU_STREAM_WAIT_VALUE_GEQ, the one the stand-in knows */ || address % 4)
        return ERR_INVALID_VALUE;
    log_line("waitvalue", stream);
    do_value(stream, OP_WAIT_VALUE, (unsigned int *)(uintptr_t)address, value);
    return OK;
}

CUresult cuStreamWriteValue32_v2(void *stream, unsigned long long address, unsigned int value, unsigned int flags)
{
    ENTER("cuStreamWriteValue32_v2");
    if (flags != 0 || address % 4)
        return ERR_INVALID_VALUE;
    log_line("writevalue", stream);
    do_value(stream, OP_WRITE_VALUE, (unsigned int *)(uintptr_t)address, value);
    return OK;
}

#endif

/* An event is ready once its last record ran (at once, without
 * FAKE_CUDA_ASYNC); never with FAKE_CUDA_NOT_READY (a copy that takes
 * longer than any poll). */
CUresult cuEventQuery(void *event)
{
    ENTER("cuEventQuery");
    log_line("query", NULL);
    return getenv("FAKE_CUDA_NOT_READY") || !event_reached(event) ? 600 /* CUDA_ERROR_NOT_READY */ : OK;
}
