/* tq_ring.c: the ring's bookkeeping (see tq_ring.h).  One mutex guards the
 * state; copies and backend work happen outside it so that producers and
 * consumers only serialise on a few integer updates. */
#include "tq_ring.h"
#include "tq_backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Device copies want aligned sources and destinations; 256 suits both DMA
 * engines and AVX stores. */
#define TQ_ALIGN 256

typedef enum { SLOT_FREE = 0, SLOT_WRITING, SLOT_READY, SLOT_READING, SLOT_DROPPED } slot_state;

struct tq_ring {
    pthread_mutex_t lock;
    pthread_cond_t space; /* a slot may have become FREE, or the state changed */
    pthread_cond_t data;  /* a slot may have become READY, or the state changed */

    int capacity, n_components;
    tq_component *components;
    size_t *offsets;   /* byte offset of each component in a slot */
    size_t slot_bytes;

    unsigned char *slot_state;
    int64_t *rows;     /* capacity x n_components: rows of each component */

    /* Reservation counters; slot = counter % capacity.  head <= tail, and the
     * slots in [head, tail) are WRITING, READY or DROPPED. */
    uint64_t head, tail;
    int ready;

    tq_state state;
    int cancelled;     /* close(cancel=1): writes still in flight are dropped */
    char error[TQ_ERRLEN];

    tq_stats stats;
    tq_backend *backend;
};

/* ---- time ---------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct timespec to_timespec(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits on cond until signalled or the deadline (monotonic seconds, < 0 for
 * none) passes.  Returns 0, or ETIMEDOUT once the deadline has passed. */
static int wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, double deadline)
{
    if (deadline < 0)
        return pthread_cond_wait(cond, lock);
    if (now_s() >= deadline)
        return ETIMEDOUT;
    struct timespec ts = to_timespec(deadline);
    return pthread_cond_timedwait(cond, lock, &ts);
}

static double deadline_after(double timeout_s)
{
    return timeout_s < 0 ? -1.0 : now_s() + timeout_s;
}

void tq_set_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- creation ------------------------------------------------------------ */

static size_t align_up(size_t n) { return (n + TQ_ALIGN - 1) / TQ_ALIGN * TQ_ALIGN; }

static int init_sync(tq_ring *ring)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr))
        return -1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_mutex_init(&ring->lock, NULL);
    if (!rc && pthread_cond_init(&ring->space, &attr)) {
        pthread_mutex_destroy(&ring->lock);
        rc = -1;
    }
    if (!rc && pthread_cond_init(&ring->data, &attr)) {
        pthread_cond_destroy(&ring->space);
        pthread_mutex_destroy(&ring->lock);
        rc = -1;
    }
    pthread_condattr_destroy(&attr);
    return rc ? -1 : 0;
}

static int layout(tq_ring *ring, const tq_component *components, char *err, size_t errlen)
{
    size_t offset = 0;
    for (int c = 0; c < ring->n_components; c++) {
        const tq_component *comp = &components[c];
        if (comp->max_rows < 1) {
            tq_set_error(err, errlen, "component %d: max_rows must be >= 1, got %lld", c,
                      (long long)comp->max_rows);
            return -1;
        }
        if (comp->row_bytes && (size_t)comp->max_rows > (SIZE_MAX / 2) / comp->row_bytes) {
            tq_set_error(err, errlen, "component %d: %lld rows of %zu bytes overflow", c,
                      (long long)comp->max_rows, comp->row_bytes);
            return -1;
        }
        ring->components[c] = *comp;
        ring->offsets[c] = offset;
        offset += align_up((size_t)comp->max_rows * comp->row_bytes);
    }
    ring->slot_bytes = offset ? offset : TQ_ALIGN;
    return 0;
}

tq_ring *tq_ring_create(const tq_component *components, int n_components, int capacity,
                        tq_backend *backend, char *err, size_t errlen)
{
    tq_ring *ring = NULL;
    if (!backend) {
        tq_set_error(err, errlen, "no backend");
        return NULL;
    }
    if (n_components < 1 || n_components > TQ_MAX_COMPONENTS) {
        tq_set_error(err, errlen, "expected 1 to %d components, got %d", TQ_MAX_COMPONENTS, n_components);
        goto fail;
    }
    if (capacity < 1 || capacity > TQ_MAX_CAPACITY) {
        tq_set_error(err, errlen, "expected a capacity of 1 to %d, got %d", TQ_MAX_CAPACITY, capacity);
        goto fail;
    }
    ring = calloc(1, sizeof *ring);
    if (!ring)
        goto nomem;
    ring->capacity = capacity;
    ring->n_components = n_components;
    ring->components = calloc((size_t)n_components, sizeof *ring->components);
    ring->offsets = calloc((size_t)n_components, sizeof *ring->offsets);
    ring->slot_state = calloc((size_t)capacity, 1);
    ring->rows = calloc((size_t)capacity * (size_t)n_components, sizeof *ring->rows);
    if (!ring->components || !ring->offsets || !ring->slot_state || !ring->rows)
        goto nomem;
    if (layout(ring, components, err, errlen))
        goto fail;
    if (backend->alloc_slots(backend, capacity, ring->slot_bytes, err, errlen))
        goto fail;
    if (init_sync(ring)) {
        tq_set_error(err, errlen, "could not create the ring's mutex and condition variables");
        goto fail;
    }
    ring->backend = backend;
    ring->state = TQ_STATE_OPEN;
    ring->stats.capacity = capacity;
    return ring;

nomem:
    tq_set_error(err, errlen, "out of host memory");
fail:
    backend->destroy(backend);
    if (ring) {
        free(ring->components);
        free(ring->offsets);
        free(ring->slot_state);
        free(ring->rows);
        free(ring);
    }
    return NULL;
}

void tq_ring_destroy(tq_ring *ring)
{
    if (!ring)
        return;
    ring->backend->destroy(ring->backend);
    pthread_cond_destroy(&ring->space);
    pthread_cond_destroy(&ring->data);
    pthread_mutex_destroy(&ring->lock);
    free(ring->components);
    free(ring->offsets);
    free(ring->slot_state);
    free(ring->rows);
    free(ring);
}

/* ---- helpers under the lock ------------------------------------------------ */

static int slot_of(const tq_ring *ring, uint64_t counter) { return (int)(counter % (uint64_t)ring->capacity); }

/* Dropped slots at the head belong to nobody: hand them back to producers. */
static void reclaim_dropped_head(tq_ring *ring)
{
    int reclaimed = 0;
    while (ring->head < ring->tail && ring->slot_state[slot_of(ring, ring->head)] == SLOT_DROPPED) {
        ring->slot_state[slot_of(ring, ring->head)] = SLOT_FREE;
        ring->head++;
        reclaimed = 1;
    }
    if (reclaimed)
        pthread_cond_broadcast(&ring->space);
}

static uint64_t element_bytes(const tq_ring *ring, const int64_t *rows)
{
    uint64_t total = 0;
    for (int c = 0; c < ring->n_components; c++)
        total += (uint64_t)rows[c] * ring->components[c].row_bytes;
    return total;
}

/* Gives a reserved write up.  `lost` counts it in stats.dropped: an element
 * that was offered and did not arrive (cancelled, or the backend failed), as
 * opposed to a write its producer abandoned. */
static void drop_slot(tq_ring *ring, int slot, int lost)
{
    ring->slot_state[slot] = SLOT_DROPPED;
    ring->stats.dropped += lost ? 1 : 0;
    reclaim_dropped_head(ring);
    pthread_cond_broadcast(&ring->data);
}

/* ---- producers --------------------------------------------------------------- */

tq_status tq_ring_reserve_put(tq_ring *ring, double timeout_s, int *slot)
{
    double deadline = deadline_after(timeout_s), started = 0;
    tq_status status = TQ_OK;

    pthread_mutex_lock(&ring->lock);
    for (;;) {
        if (ring->state != TQ_STATE_OPEN) {
            status = ring->state == TQ_STATE_FAILED ? TQ_FAILED : TQ_CLOSED;
            break;
        }
        reclaim_dropped_head(ring);
        int s = slot_of(ring, ring->tail);
        if (ring->slot_state[s] == SLOT_FREE) {
            ring->slot_state[s] = SLOT_WRITING;
            ring->tail++;
            *slot = s;
            break;
        }
        if (!started)
            started = now_s();
        if (wait_until(&ring->space, &ring->lock, deadline) == ETIMEDOUT) {
            status = TQ_TIMEOUT;
            break;
        }
    }
    if (started)
        ring->stats.producer_wait_s += now_s() - started;
    pthread_mutex_unlock(&ring->lock);
    return status;
}

/* Records a backend failure for slot, drops it, and says so. */
static tq_status backend_failed(tq_ring *ring, int slot, const char *err)
{
    pthread_mutex_lock(&ring->lock);
    snprintf(ring->error, sizeof ring->error, "%s", err);
    drop_slot(ring, slot, 1);
    pthread_mutex_unlock(&ring->lock);
    return TQ_EBACKEND;
}

tq_status tq_ring_begin_host_write(tq_ring *ring, int slot)
{
    char err[TQ_ERRLEN] = "";
    if (ring->backend->before_write(ring->backend, slot, err, sizeof err))
        return backend_failed(ring, slot, err);
    return TQ_OK;
}

void *tq_ring_write_ptr(tq_ring *ring, int slot, int component)
{
    return (char *)ring->backend->write_ptr(ring->backend, slot) + ring->offsets[component];
}

/* The byte ranges of a slot that hold data, merged where they touch. */
static int data_extents(const tq_ring *ring, const int64_t *rows, const void *const *sources, tq_extent *extents)
{
    int n = 0;
    for (int c = 0; c < ring->n_components; c++) {
        size_t bytes = (size_t)rows[c] * ring->components[c].row_bytes;
        const void *src = sources ? sources[c] : NULL;
        if (!bytes)
            continue;
        tq_extent *last = n ? &extents[n - 1] : NULL;
        if (last && !src && !last->src && last->offset + last->bytes == ring->offsets[c]) {
            last->bytes += bytes;
        } else {
            extents[n].offset = ring->offsets[c];
            extents[n].bytes = bytes;
            extents[n].src = src;
            n++;
        }
    }
    return n;
}

/* Makes a written slot READY (or drops it when a close cancelled it). */
static tq_status finish_put(tq_ring *ring, int slot, const int64_t *rows)
{
    tq_status status = TQ_OK;
    pthread_mutex_lock(&ring->lock);
    memcpy(&ring->rows[(size_t)slot * ring->n_components], rows, ring->n_components * sizeof *rows);
    if (ring->cancelled) {
        drop_slot(ring, slot, 1);
        status = TQ_CLOSED;
    } else {
        ring->slot_state[slot] = SLOT_READY;
        ring->ready++;
        ring->stats.enqueued++;
        ring->stats.bytes_in += element_bytes(ring, rows);
        pthread_cond_broadcast(&ring->data);
    }
    pthread_mutex_unlock(&ring->lock);
    return status;
}

tq_status tq_ring_commit_put(tq_ring *ring, int slot, const int64_t *rows, const void *const *sources)
{
    tq_extent extents[TQ_MAX_COMPONENTS];
    int n_extents = data_extents(ring, rows, sources, extents);
    char err[TQ_ERRLEN] = "";
    if (ring->backend->publish(ring->backend, slot, extents, n_extents, err, sizeof err))
        return backend_failed(ring, slot, err);
    return finish_put(ring, slot, rows);
}

tq_status tq_ring_commit_put_published(tq_ring *ring, int slot, const int64_t *rows)
{
    return finish_put(ring, slot, rows);
}

void tq_ring_abort_put(tq_ring *ring, int slot)
{
    pthread_mutex_lock(&ring->lock);
    drop_slot(ring, slot, 0);
    pthread_mutex_unlock(&ring->lock);
}

/* ---- consumers --------------------------------------------------------------- */

tq_status tq_ring_reserve_get(tq_ring *ring, double timeout_s, int *slot)
{
    double deadline = deadline_after(timeout_s), started = 0;
    tq_status status = TQ_OK;

    pthread_mutex_lock(&ring->lock);
    for (;;) {
        reclaim_dropped_head(ring);
        if (ring->head < ring->tail) {
            int s = slot_of(ring, ring->head);
            if (ring->slot_state[s] == SLOT_READY) {
                ring->slot_state[s] = SLOT_READING;
                ring->head++;
                ring->ready--;
                *slot = s;
                break;
            }
        } else if (ring->state != TQ_STATE_OPEN) {
            /* Closed and nothing left, not even a write in flight. */
            status = ring->state == TQ_STATE_FAILED ? TQ_FAILED : TQ_CLOSED;
            break;
        }
        if (!started)
            started = now_s();
        if (wait_until(&ring->data, &ring->lock, deadline) == ETIMEDOUT) {
            status = TQ_TIMEOUT;
            break;
        }
    }
    if (started)
        ring->stats.consumer_wait_s += now_s() - started;
    pthread_mutex_unlock(&ring->lock);
    return status;
}

int64_t tq_ring_rows(const tq_ring *ring, int slot, int component)
{
    return ring->rows[(size_t)slot * ring->n_components + component];
}

const void *tq_ring_read_ptr(tq_ring *ring, int slot, int component)
{
    return (const char *)ring->backend->read_ptr(ring->backend, slot) + ring->offsets[component];
}

tq_status tq_ring_read_to_host(tq_ring *ring, int slot, int component, void *dst)
{
    size_t bytes = (size_t)tq_ring_rows(ring, slot, component) * ring->components[component].row_bytes;
    char err[TQ_ERRLEN] = "";
    if (!bytes)
        return TQ_OK;
    if (ring->backend->read_to_host(ring->backend, slot, ring->offsets[component], dst, bytes, err, sizeof err)) {
        pthread_mutex_lock(&ring->lock);
        snprintf(ring->error, sizeof ring->error, "%s", err);
        pthread_mutex_unlock(&ring->lock);
        return TQ_EBACKEND;
    }
    return TQ_OK;
}

void tq_ring_release_get(tq_ring *ring, int slot)
{
    pthread_mutex_lock(&ring->lock);
    ring->slot_state[slot] = SLOT_FREE;
    ring->stats.dequeued++;
    ring->stats.bytes_out += element_bytes(ring, &ring->rows[(size_t)slot * ring->n_components]);
    pthread_cond_broadcast(&ring->space);
    pthread_mutex_unlock(&ring->lock);
}

/* ---- state ----------------------------------------------------------------- */

static void drop_ready(tq_ring *ring)
{
    for (uint64_t i = ring->head; i < ring->tail; i++) {
        int s = slot_of(ring, i);
        if (ring->slot_state[s] == SLOT_READY) {
            ring->slot_state[s] = SLOT_DROPPED;
            ring->ready--;
            ring->stats.dropped++;
        }
    }
    reclaim_dropped_head(ring);
}

void tq_ring_close(tq_ring *ring, int cancel)
{
    pthread_mutex_lock(&ring->lock);
    if (ring->state == TQ_STATE_OPEN)
        ring->state = TQ_STATE_CLOSED;
    if (cancel) {
        ring->cancelled = 1;
        drop_ready(ring);
    }
    pthread_cond_broadcast(&ring->space);
    pthread_cond_broadcast(&ring->data);
    pthread_mutex_unlock(&ring->lock);
}

void tq_ring_fail(tq_ring *ring, const char *message)
{
    pthread_mutex_lock(&ring->lock);
    ring->state = TQ_STATE_FAILED;
    snprintf(ring->error, sizeof ring->error, "%s", message ? message : "failed");
    pthread_cond_broadcast(&ring->space);
    pthread_cond_broadcast(&ring->data);
    pthread_mutex_unlock(&ring->lock);
}

tq_status tq_ring_reopen(tq_ring *ring)
{
    tq_status status = TQ_OK;
    pthread_mutex_lock(&ring->lock);
    reclaim_dropped_head(ring);
    if (ring->state != TQ_STATE_OPEN) {
        if (ring->head < ring->tail) {
            status = TQ_EINVAL;
        } else {
            ring->state = TQ_STATE_OPEN;
            ring->cancelled = 0;
            ring->error[0] = '\0';
        }
    }
    pthread_mutex_unlock(&ring->lock);
    return status;
}

tq_state tq_ring_state(tq_ring *ring)
{
    pthread_mutex_lock(&ring->lock);
    tq_state state = ring->state;
    pthread_mutex_unlock(&ring->lock);
    return state;
}

int tq_ring_size(tq_ring *ring)
{
    pthread_mutex_lock(&ring->lock);
    int size = ring->ready;
    pthread_mutex_unlock(&ring->lock);
    return size;
}

void tq_ring_stats(tq_ring *ring, tq_stats *out)
{
    pthread_mutex_lock(&ring->lock);
    *out = ring->stats;
    out->size = ring->ready;
    out->state = ring->state;
    pthread_mutex_unlock(&ring->lock);
}

const char *tq_ring_error(tq_ring *ring) { return ring->error; }
int tq_ring_capacity(const tq_ring *ring) { return ring->capacity; }
int tq_ring_n_components(const tq_ring *ring) { return ring->n_components; }
const tq_component *tq_ring_component(const tq_ring *ring, int c) { return &ring->components[c]; }
size_t tq_ring_component_offset(const tq_ring *ring, int c) { return ring->offsets[c]; }
size_t tq_ring_slot_bytes(const tq_ring *ring) { return ring->slot_bytes; }
tq_backend *tq_ring_backend(tq_ring *ring) { return ring->backend; }

void tq_ring_staging(tq_ring *ring, int *fd, void **base, size_t *bytes)
{
    *fd = ring->backend->staging.fd;
    *base = ring->backend->staging.base;
    *bytes = ring->backend->staging.bytes;
}

size_t tq_ring_staging_offset(tq_ring *ring, int slot)
{
    pthread_mutex_lock(&ring->lock); /* swap_staging moves it */
    size_t offset = (size_t)((char *)ring->backend->write_ptr(ring->backend, slot) -
                             (char *)ring->backend->staging.base);
    pthread_mutex_unlock(&ring->lock);
    return offset;
}

tq_status tq_ring_swap_staging(tq_ring *ring, int a, int b)
{
    tq_status status = TQ_OK;
    pthread_mutex_lock(&ring->lock);
    if (a < 0 || b < 0 || a >= ring->capacity || b >= ring->capacity || !ring->backend->swap_staging ||
        ring->slot_state[a] != SLOT_WRITING || ring->slot_state[b] != SLOT_WRITING) {
        status = TQ_EINVAL;
    } else if (a != b) {
        ring->backend->swap_staging(ring->backend, a, b);
    }
    pthread_mutex_unlock(&ring->lock);
    return status;
}

const char *tq_status_name(tq_status status)
{
    switch (status) {
    case TQ_OK: return "TQ_OK";
    case TQ_TIMEOUT: return "TQ_TIMEOUT";
    case TQ_CLOSED: return "TQ_CLOSED";
    case TQ_FAILED: return "TQ_FAILED";
    case TQ_EINVAL: return "TQ_EINVAL";
    case TQ_ENOMEM: return "TQ_ENOMEM";
    case TQ_EBACKEND: return "TQ_EBACKEND";
    }
    return "TQ_UNKNOWN";
}
