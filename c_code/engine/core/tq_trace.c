/* tq_trace.c: the per-element timeline (see tq_trace.h).  One mutex guards the
 * table; it is taken only while a trace is being recorded (the ring does not
 * call in otherwise), after the ring's own lock where both are held. */
#include "tq_trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct tq_trace {
    pthread_mutex_t lock;
    int active;
    int capacity;
    uint64_t *slot_element; /* capacity: the element each slot was last reserved for */
    uint64_t first;
    int n, allocated;
    tq_trace_element *elements; /* n: elements first .. first + n - 1 */
};

/* A FILLED event waiting for a device callback. */
typedef struct {
    tq_trace *trace;
    uint64_t element;
} pending_mark;

#define NO_ELEMENT UINT64_MAX

/* The first attempt of the current put (side 0) or get (side 1) of this thread. */
static __thread struct {
    const tq_trace *trace;
    int64_t ns;
} asked_at[2];

/* tq_now()'s clock, the engine's one clock, in ns (it never goes back). */
int64_t tq_trace_now_ns(void) { return (int64_t)(tq_now() * 1e9); }

const char *tq_event_name(tq_event kind)
{
    static const char *names[TQ_EV_COUNT] = {"put_begin", "reserved",  "put_end",  "copy_issued", "ready",
                                             "filled",    "get_begin", "dequeued", "consumed"};
    return kind >= 0 && kind < TQ_EV_COUNT ? names[kind] : "unknown";
}

tq_trace *tq_trace_create(int capacity)
{
    tq_trace *trace = calloc(1, sizeof *trace);
    if (!trace)
        return NULL;
    trace->slot_element = malloc((size_t)capacity * sizeof *trace->slot_element);
    if (!trace->slot_element || pthread_mutex_init(&trace->lock, NULL)) {
        free(trace->slot_element);
        free(trace);
        return NULL;
    }
    for (int i = 0; i < capacity; i++)
        trace->slot_element[i] = NO_ELEMENT;
    trace->capacity = capacity;
    return trace;
}

void tq_trace_destroy(tq_trace *trace)
{
    if (!trace)
        return;
    pthread_mutex_destroy(&trace->lock);
    free(trace->slot_element);
    free(trace->elements);
    free(trace);
}

int tq_trace_start(tq_trace *trace, uint64_t first, int n)
{
    int rc = 0;
    pthread_mutex_lock(&trace->lock);
    if (n > trace->allocated) {
        tq_trace_element *grown = realloc(trace->elements, (size_t)n * sizeof *grown);
        if (!grown) {
            rc = -1;
            goto done;
        }
        trace->elements = grown;
        trace->allocated = n;
    }
    for (int i = 0; i < n; i++) {
        trace->elements[i].element = first + (uint64_t)i;
        trace->elements[i].slot = -1;
        for (int k = 0; k < TQ_EV_COUNT; k++)
            trace->elements[i].ns[k] = -1;
    }
    trace->first = first;
    trace->n = n;
    trace->active = 1;
done:
    pthread_mutex_unlock(&trace->lock);
    return rc;
}

int tq_trace_stop(tq_trace *trace, tq_trace_element *out, int max)
{
    int count = 0;
    pthread_mutex_lock(&trace->lock);
    trace->active = 0;
    for (int i = 0; i < trace->n; i++) {
        int any = 0;
        for (int k = 0; k < TQ_EV_COUNT; k++)
            any |= trace->elements[i].ns[k] >= 0;
        if (!any)
            continue;
        if (count < max)
            out[count] = trace->elements[i];
        count++;
    }
    pthread_mutex_unlock(&trace->lock);
    return count;
}

/* The element's record while recording it, else NULL.  Under the lock. */
static tq_trace_element *record_of(tq_trace *trace, uint64_t element)
{
    if (!trace->active || element == NO_ELEMENT || element < trace->first ||
        element - trace->first >= (uint64_t)trace->n)
        return NULL;
    return &trace->elements[element - trace->first];
}

static void record(tq_trace *trace, uint64_t element, tq_event kind, int64_t ns)
{
    pthread_mutex_lock(&trace->lock);
    tq_trace_element *e = record_of(trace, element);
    if (e && e->ns[kind] < 0)
        e->ns[kind] = ns;
    pthread_mutex_unlock(&trace->lock);
}

static uint64_t element_in(tq_trace *trace, int slot)
{
    pthread_mutex_lock(&trace->lock);
    uint64_t element = slot >= 0 && slot < trace->capacity ? trace->slot_element[slot] : NO_ELEMENT;
    pthread_mutex_unlock(&trace->lock);
    return element;
}

int64_t tq_trace_asked(tq_trace *trace, int side)
{
    if (asked_at[side].trace != trace || asked_at[side].ns <= 0) {
        asked_at[side].trace = trace;
        asked_at[side].ns = tq_trace_now_ns();
    }
    return asked_at[side].ns;
}

void tq_trace_gave_up(tq_trace *trace, int side)
{
    (void)trace;
    asked_at[side].ns = 0;
}

/* The time this thread first asked, or now when it asked before the trace started. */
static int64_t take_asked(tq_trace *trace, int side, int64_t asked, int64_t now)
{
    asked_at[side].ns = 0;
    return asked > 0 && asked_at[side].trace == trace ? asked : now;
}

void tq_trace_reserved(tq_trace *trace, int slot, uint64_t element, int64_t asked)
{
    int64_t now = tq_trace_now_ns();
    asked = take_asked(trace, 0, asked, now);
    pthread_mutex_lock(&trace->lock);
    if (slot >= 0 && slot < trace->capacity)
        trace->slot_element[slot] = element;
    tq_trace_element *e = record_of(trace, element);
    if (e) {
        e->slot = slot;
        e->ns[TQ_EV_PUT_BEGIN] = asked;
        e->ns[TQ_EV_RESERVED] = now;
    }
    pthread_mutex_unlock(&trace->lock);
}

void tq_trace_dequeued(tq_trace *trace, int slot, int64_t asked)
{
    int64_t now = tq_trace_now_ns();
    asked = take_asked(trace, 1, asked, now);
    pthread_mutex_lock(&trace->lock);
    tq_trace_element *e = slot >= 0 && slot < trace->capacity ? record_of(trace, trace->slot_element[slot]) : NULL;
    if (e) {
        e->ns[TQ_EV_GET_BEGIN] = asked;
        e->ns[TQ_EV_DEQUEUED] = now;
    }
    pthread_mutex_unlock(&trace->lock);
}

void tq_trace_hit(tq_trace *trace, int slot, tq_event kind)
{
    record(trace, element_in(trace, slot), kind, tq_trace_now_ns());
}

static void fire_mark(void *arg)
{
    pending_mark *mark = arg;
    record(mark->trace, mark->element, TQ_EV_FILLED, tq_trace_now_ns());
    free(mark);
}

void tq_trace_published(tq_trace *trace, tq_backend *backend, int slot)
{
    uint64_t element = element_in(trace, slot);
    record(trace, element, TQ_EV_COPY_ISSUED, tq_trace_now_ns());
    if (!backend->on_arrival)
        return;
    pending_mark *mark = malloc(sizeof *mark);
    if (!mark)
        return;
    mark->trace = trace;
    mark->element = element;
    /* The callback runs on a driver thread; the ring frees the trace only after
     * the backend, whose destruction waits for its streams. */
    if (backend->on_arrival(backend, slot, fire_mark, mark, NULL) != TQ_OK)
        free(mark); /* FILLED stays unknown (-1) */
}
