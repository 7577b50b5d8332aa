/* Part of the stand-in CUDA driver (fake_libcuda.c), included at its end:
 * stream capture and graphs, and the calls a capture records instead of
 * doing (an event wait or record, a host-to-device copy, a kernel launch).
 *
 * A stream captures between cuStreamBeginCapture_v2 and cuStreamEndCapture,
 * one at a time.  As in the driver, a wait for an event, or a record of one,
 * made outside the capture must say so (CU_EVENT_WAIT_EXTERNAL,
 * CU_EVENT_RECORD_EXTERNAL: cuEventRecordWithFlags), else the capture fails
 * (CUDA_ERROR_STREAM_CAPTURE_ISOLATION).  A graph is its list of calls; its
 * launch logs "graph <stream>" and does them in order, a kernel with the
 * arguments it was captured with.  Graphs and executable graphs held count
 * in the report.  Built with -DFAKE_CUDA_NO_GRAPHS it is a driver without
 * graphs (before CUDA 11.4). */

#define ERR_STREAM_CAPTURE_ISOLATION 905
#define ERR_STREAM_CAPTURE_INVALIDATED 901
#define GRAPH_CALLS 80

typedef enum { CALL_WAIT, CALL_RECORD, CALL_UPLOAD, CALL_KERNEL } call_kind;

typedef struct {
    call_kind kind;
    void *event; /* a wait's or record's */
    unsigned long long dst;
    const void *src;
    size_t bytes;
    void *function;
    unsigned int gy;
    unsigned char arguments[KERNEL_ARGUMENT_BYTES]; /* a kernel's parameters, one after the other */
} graph_call;

typedef struct {
    int n, invalid;
    graph_call calls[GRAPH_CALLS];
} fake_graph;

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static void *capture_stream;
static fake_graph *capture;

/* Records call in the capture of `stream`: 1 when it did (the caller does
 * nothing more), 0 when the stream is not capturing. */
static int captured(void *stream, const graph_call *call)
{
    pthread_mutex_lock(&capture_lock);
    int capturing = stream && stream == capture_stream;
    if (capturing) {
        if (capture->n < GRAPH_CALLS)
            capture->calls[capture->n++] = *call;
        else
            capture->invalid = 1;
    }
    pthread_mutex_unlock(&capture_lock);
    return capturing;
}

static int capturing(void *stream)
{
    pthread_mutex_lock(&capture_lock);
    int yes = stream && stream == capture_stream;
    pthread_mutex_unlock(&capture_lock);
    return yes;
}

#ifndef FAKE_CUDA_NO_GRAPHS
CUresult cuStreamBeginCapture_v2(void *stream, int mode)
{
    ENTER("cuStreamBeginCapture_v2");
    (void)mode;
    fake_graph *g = calloc(1, sizeof *g);
    if (!g)
        return ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&capture_lock);
    int busy = capture_stream != NULL;
    if (!busy) {
        capture_stream = stream;
        capture = g;
    }
    pthread_mutex_unlock(&capture_lock);
    if (busy)
        free(g);
    return busy ? ERR_INVALID_VALUE : OK;
}

CUresult cuStreamEndCapture(void *stream, void **graph)
{
    ENTER("cuStreamEndCapture");
    pthread_mutex_lock(&capture_lock);
    int mine = stream && stream == capture_stream;
    fake_graph *g = mine ? capture : NULL;
    if (mine) {
        capture_stream = NULL;
        capture = NULL;
    }
    pthread_mutex_unlock(&capture_lock);
    if (!mine)
        return ERR_INVALID_VALUE;
    if (g->invalid) {
        free(g);
        *graph = NULL;
        return ERR_STREAM_CAPTURE_INVALIDATED;
    }
    *graph = g;
    COUNT(graphs, 1);
    return OK;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
    ENTER("cuGraphInstantiateWithFlags");
    (void)flags;
    fake_graph *copy = malloc(sizeof *copy);
    if (!copy)
        return ERR_OUT_OF_MEMORY;
    *copy = *(fake_graph *)graph;
    *exec = copy;
    COUNT(graphs, 1);
    return OK;
}

CUresult cuGraphDestroy(void *graph)
{
    free(graph);
    COUNT(graphs, -1);
    return OK;
}

CUresult cuGraphExecDestroy(void *exec)
{
    free(exec);
    COUNT(graphs, -1);
    return OK;
}

/* Does the graph's calls on `stream` (queued there, as the stream's own
 * calls are): its waits for the events' records made before the launch, as
 * the driver's event wait nodes do. */
CUresult cuGraphLaunch(void *exec, void *stream)
{
    ENTER("cuGraphLaunch");
    graph_call *calls = ((fake_graph *)exec)->calls;
    log_line("graph", stream);
    for (int i = 0; i < ((fake_graph *)exec)->n; i++) {
        if (calls[i].kind == CALL_WAIT) {
            do_wait(stream, calls[i].event);
        } else if (calls[i].kind == CALL_RECORD) {
            do_record(stream, calls[i].event);
        } else if (calls[i].kind == CALL_UPLOAD) {
            do_copy(stream, (void *)(uintptr_t)calls[i].dst, calls[i].src, calls[i].bytes);
        } else {
            void *params[4];
            unpack_params(calls[i].function, calls[i].arguments, params);
            CUresult rc = do_kernel(stream, calls[i].function, calls[i].gy, params);
            if (rc != OK)
                return rc;
        }
    }
    return OK;
}

#endif

/* ---- the calls a capture records ------------------------------------------------------- */

CUresult cuStreamWaitEvent(void *stream, void *event, unsigned int flags)
{
    ENTER("cuStreamWaitEvent");
    if (capturing(stream) && !(flags & 1 /* CU_EVENT_WAIT_EXTERNAL */))
        return ERR_STREAM_CAPTURE_ISOLATION;
    if (captured(stream, &(graph_call){.kind = CALL_WAIT, .event = event}))
        return OK;
    log_line("wait", stream);
    do_wait(stream, event);
    return OK;
}

#ifndef FAKE_CUDA_NO_GRAPHS
CUresult cuEventRecordWithFlags(void *event, void *stream, unsigned int flags)
{
    ENTER("cuEventRecordWithFlags");
    if (capturing(stream) && !(flags & 1 /* CU_EVENT_RECORD_EXTERNAL */))
        return ERR_STREAM_CAPTURE_ISOLATION;
    if (captured(stream, &(graph_call){.kind = CALL_RECORD, .event = event}))
        return OK;
    log_line("record", stream);
    do_record(stream, event);
    return OK;
}
#endif

CUresult cuEventRecord(void *event, void *stream)
{
    ENTER("cuEventRecord");
    if (capturing(stream))
        return ERR_STREAM_CAPTURE_ISOLATION; /* a record the graph makes is an external one */
    log_line("record", stream);
    do_record(stream, event);
    return OK;
}

CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream)
{
    ENTER("cuMemcpyHtoDAsync_v2");
    if (captured(stream, &(graph_call){.kind = CALL_UPLOAD, .dst = dst, .src = src, .bytes = bytes}))
        return OK;
    log_line("upload", stream);
    do_copy(stream, (void *)(uintptr_t)dst, src, bytes);
    return OK;
}
