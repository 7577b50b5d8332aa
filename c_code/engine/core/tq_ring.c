/* tq_ring.c: the ring's bookkeeping (see tq_ring.h).  One mutex guards the
 * state; copies and backend work happen outside it so that producers and
 * consumers only serialise on a few integer updates. */
#include "tq_ring_state.h"

#include "tq_copy.h"
#include "tq_trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- time ---------------------------------------------------------------- */

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

int tq_ring_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, double deadline)
{
    if (deadline < 0 || deadline > FOREVER_S)
        return pthread_cond_wait(cond, lock);
    if (tq_now() >= deadline)
        return ETIMEDOUT;
    struct timespec ts = to_timespec(deadline);
    return pthread_cond_timedwait(cond, lock, &ts);
}

/* ---- statistics and timeline ------------------------------------------------ */

/* Under the lock, before n_ready changes: adds the time at the old fill. */
void tq_ring_fill_changes(tq_ring *ring)
{
    double now = tq_now();
    ring->stats.fill_integral += ring->n_ready * (now - ring->fill_since);
    ring->fill_since = now;
}

static int64_t trace_asked(tq_ring *ring, int side)
{
    tq_trace *trace = __atomic_load_n(&ring->trace, __ATOMIC_ACQUIRE);
    return trace ? tq_trace_asked(trace, side) : 0;
}

/* ---- creation ------------------------------------------------------------ */

static size_t align_up(size_t n) { return (n + TQ_ALIGN - 1) / TQ_ALIGN * TQ_ALIGN; }

static int init_sync(tq_ring *ring)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr))
        return -1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* tq_now()'s clock */
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

size_t tq_ring_slot_bytes(const tq_component *components, int n_components)
{
    size_t offset = 0;
    for (int c = 0; c < n_components; c++) {
        size_t room = SIZE_MAX / 2 - offset, rows = components[c].max_rows > 0 ? (size_t)components[c].max_rows : 0;
        if (components[c].row_bytes && rows > room / components[c].row_bytes)
            return SIZE_MAX;
        offset += align_up(rows * components[c].row_bytes);
    }
    return offset ? offset : TQ_ALIGN;
}

static tq_code layout(tq_ring *ring, const tq_component *components, tq_error *err)
{
    size_t offset = 0;
    for (int c = 0; c < ring->n_components; c++) {
        const tq_component *comp = &components[c];
        if (comp->max_rows < 1)
            return tq_set_error(err, TQ_EINVAL, "component %d: max_rows must be >= 1, got %lld", c,
                                (long long)comp->max_rows);
        size_t room = SIZE_MAX / 2 - offset;
        if (comp->row_bytes && (size_t)comp->max_rows > room / comp->row_bytes)
            return tq_set_error(err, TQ_EINVAL, "component %d: %lld rows of %zu bytes overflow a slot", c,
                                (long long)comp->max_rows, comp->row_bytes);
        ring->components[c] = *comp;
        ring->offsets[c] = offset;
        offset += align_up((size_t)comp->max_rows * comp->row_bytes);
    }
    ring->slot_bytes = tq_ring_slot_bytes(components, ring->n_components); /* offset, or one boundary */
    return TQ_OK;
}

static void free_ring(tq_ring *ring)
{
    free(ring->components);
    free(ring->offsets);
    free(ring->slot_state);
    free(ring->rows);
    free(ring);
}

tq_ring *tq_ring_create(const tq_component *components, int n_components, int capacity, tq_backend *backend,
                        tq_error *err)
{
    tq_ring *ring = NULL;
    if (!backend) {
        tq_set_error(err, TQ_EINVAL, "no backend");
        return NULL;
    }
    if (n_components < 1 || n_components > TQ_MAX_COMPONENTS) {
        tq_set_error(err, TQ_EINVAL, "expected 1 to %d components, got %d", TQ_MAX_COMPONENTS, n_components);
        goto fail;
    }
    if (capacity < 1 || capacity > TQ_MAX_CAPACITY) {
        tq_set_error(err, TQ_EINVAL, "expected a capacity of 1 to %d, got %d", TQ_MAX_CAPACITY, capacity);
        goto fail;
    }
    ring = calloc(1, sizeof *ring);
    if (!ring)
        goto nomem;
    ring->capacity = capacity;
    ring->depth = ring->span = capacity;
    ring->n_components = n_components;
    ring->components = calloc((size_t)n_components, sizeof *ring->components);
    ring->offsets = calloc((size_t)n_components, sizeof *ring->offsets);
    ring->slot_state = calloc((size_t)capacity, 1);
    ring->rows = calloc((size_t)capacity * (size_t)n_components, sizeof *ring->rows);
    if (!ring->components || !ring->offsets || !ring->slot_state || !ring->rows)
        goto nomem;
    if (layout(ring, components, err) != TQ_OK)
        goto fail;
    if (backend->alloc_slots(backend, capacity, ring->slot_bytes, err) != TQ_OK)
        goto fail;
    if (init_sync(ring)) {
        tq_set_error(err, TQ_ENOMEM, "could not create the ring's mutex and condition variables");
        goto fail;
    }
    ring->backend = backend;
    ring->state = TQ_STATE_OPEN;
    ring->stats.capacity = capacity;
    ring->stats.backend = backend->name;
    ring->fill_since = tq_now();
    return ring;

nomem:
    tq_set_error(err, TQ_ENOMEM, "out of host memory for the ring's bookkeeping");
fail:
    backend->destroy(backend);
    if (ring)
        free_ring(ring);
    return NULL;
}

void tq_ring_destroy(tq_ring *ring)
{
    if (!ring)
        return;
    if (ring->stop_later)
        ring->stop_later(ring);            /* its last jobs write into the backend's slots */
    ring->backend->destroy(ring->backend); /* waits for device callbacks into the trace */
    tq_trace_destroy(ring->trace_store);
    pthread_cond_destroy(&ring->space);
    pthread_cond_destroy(&ring->data);
    pthread_mutex_destroy(&ring->lock);
    free_ring(ring);
}

/* ---- helpers under the lock ------------------------------------------------ */

/* Dropped slots at the head belong to nobody: hand them back to producers. */
static void reclaim_dropped_head(tq_ring *ring)
{
    int reclaimed = 0;
    while (ring->head < ring->tail && ring->slot_state[tq_slot_of(ring, ring->head)] == SLOT_DROPPED) {
        ring->slot_state[tq_slot_of(ring, ring->head)] = SLOT_FREE;
        ring->head++;
        reclaimed = 1;
    }
    if (reclaimed)
        pthread_cond_broadcast(&ring->space);
}

uint64_t tq_ring_element_bytes(const tq_ring *ring, const int64_t *rows)
{
    uint64_t total = 0;
    for (int c = 0; c < ring->n_components; c++)
        total += (uint64_t)rows[c] * ring->components[c].row_bytes;
    return total;
}

/* Gives a reserved write up.  `lost` counts it in stats.dropped: an element
 * that was offered and did not arrive (cancelled, or the backend failed), as
 * opposed to a write its producer abandoned. */
void tq_ring_drop_slot(tq_ring *ring, int slot, int lost)
{
    ring->slot_state[slot] = SLOT_DROPPED;
    ring->stats.dropped += lost ? 1 : 0;
    reclaim_dropped_head(ring);
    pthread_cond_broadcast(&ring->data);
}

/* ---- waiting for a slot -------------------------------------------------------- */

/* Under the lock: takes the slot a producer writes next.  TQ_TIMEOUT while
 * none is free, and, for a producer that found the ring full and asks for
 * `room` (> 1), until that many are. */
static tq_code try_reserve_put(tq_ring *ring, int *slot, int64_t asked, int room, tq_error *err)
{
    if (ring->state == TQ_STATE_FAILED)
        return tq_set_error(err, TQ_CLOSED, "failed and takes no more elements: %s", ring->error);
    if (ring->state == TQ_STATE_CLOSED)
        return tq_set_error(err, TQ_CLOSED, "closed");
    reclaim_dropped_head(ring);
    tq_ring_follow_depth(ring);
    int s = tq_slot_of(ring, ring->tail);
    uint64_t held = ring->tail - ring->head;
    if (ring->slot_state[s] != SLOT_FREE || held >= (uint64_t)ring->depth) {
        if (room > ring->room_wanted)
            ring->room_wanted = room;
        return TQ_TIMEOUT;
    }
    if (room > 1 && ring->room_wanted > 1) {
        int wanted = tq_ring_room_of_depth(ring, ring->room_wanted < room ? ring->room_wanted : room);
        if (!tq_ring_has_room(ring, wanted) || (uint64_t)ring->depth - held < (uint64_t)wanted)
            return TQ_TIMEOUT;
    }
    ring->room_wanted = 0;
    ring->slot_state[s] = SLOT_WRITING;
    ring->tail++;
    *slot = s;
    TRACE_HOOK(ring, tq_trace_reserved, s, ring->tail - 1, asked);
    return TQ_OK;
}

/* Under the lock: takes the element at the head.  TQ_TIMEOUT while none is
 * READY and more may come. */
static tq_code try_reserve_get(tq_ring *ring, int *slot, int64_t asked, tq_error *err)
{
    reclaim_dropped_head(ring);
    if (ring->head < ring->tail) {
        int s = tq_slot_of(ring, ring->head);
        if (ring->slot_state[s] != SLOT_READY)
            return TQ_TIMEOUT; /* its write is still in flight */
        ring->slot_state[s] = SLOT_READING;
        ring->head++;
        tq_ring_fill_changes(ring);
        tq_ring_note_take(ring, ring->fill_since);
        ring->n_ready--;
        *slot = s;
        TRACE_HOOK(ring, tq_trace_dequeued, s, asked);
        return TQ_OK;
    }
    /* Nothing left, not even a write in flight. */
    if (ring->state == TQ_STATE_FAILED) {
        ring->end_seen = 1;
        return tq_set_error(err, TQ_FAILED, "failed: %s", ring->error);
    }
    if (ring->state == TQ_STATE_CLOSED) {
        ring->end_seen = 1;
        return tq_set_error(err, TQ_CLOSED, "closed and drained");
    }
    return TQ_TIMEOUT;
}

static tq_code reserve(tq_ring *ring, int producer, int room, double deadline, const int *stop, int *slot,
                       tq_error *err)
{
    pthread_cond_t *cond = producer ? &ring->space : &ring->data;
    double started = 0;
    tq_code code;
    int64_t asked = trace_asked(ring, !producer);

    pthread_mutex_lock(&ring->lock);
    for (;;) {
        /* Read under the lock that tq_ring_wake takes: a raise followed by a
         * wake is never missed. */
        if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
            code = tq_set_error(err, TQ_STOPPED, "stopped");
            break;
        }
        code = producer ? try_reserve_put(ring, slot, asked, room, err) : try_reserve_get(ring, slot, asked, err);
        if (code != TQ_TIMEOUT)
            break;
        if (!started)
            started = tq_now();
        int plain = producer && room <= 1;
        double until = deadline;
        if (producer && tq_ring_polls_for_room(ring, room)) {
            double now = tq_now();
            double again = now + tq_ring_room_poll_s(ring, now);
            if (deadline < 0 || deadline > again)
                until = again;
        }
        ring->plain_waiters += plain;
        int waited = tq_ring_wait_until(cond, &ring->lock, until);
        ring->plain_waiters -= plain;
        if (waited == ETIMEDOUT && until != deadline)
            continue; /* time to look again, not the caller's deadline */
        if (waited == ETIMEDOUT) {
            code = tq_set_error(err, TQ_TIMEOUT, producer ? "no free slot" : "no element");
            break;
        }
    }
    if (started)
        *(producer ? &ring->stats.producer_wait_s : &ring->stats.consumer_wait_s) += tq_now() - started;
    /* Closed, failed or stopped: the next call of this thread asks anew.  A
     * timeout keeps its first attempt (a wait in slices, or a retry). */
    if (code != TQ_OK && code != TQ_TIMEOUT)
        TRACE_HOOK(ring, tq_trace_gave_up, !producer);
    pthread_mutex_unlock(&ring->lock);
    return code;
}

tq_code tq_ring_reserve_put(tq_ring *ring, double deadline, const int *stop, int *slot, tq_error *err)
{
    return reserve(ring, 1, 1, deadline, stop, slot, err);
}

tq_code tq_ring_reserve_put_room(tq_ring *ring, int room, double deadline, const int *stop, int *slot, tq_error *err)
{
    if (room > ring->capacity)
        room = ring->capacity;
    return reserve(ring, 1, room, deadline, stop, slot, err);
}

tq_code tq_ring_reserve_get(tq_ring *ring, double deadline, const int *stop, int *slot, tq_error *err)
{
    return reserve(ring, 0, 1, deadline, stop, slot, err);
}

void tq_ring_wake(tq_ring *ring)
{
    pthread_mutex_lock(&ring->lock);
    pthread_cond_broadcast(&ring->space);
    pthread_cond_broadcast(&ring->data);
    pthread_mutex_unlock(&ring->lock);
}

/* The extent of each component of an element, holding rows[c] rows. */
void tq_ring_component_extents(const tq_ring *ring, const int64_t *rows, tq_extent *extents)
{
    for (int c = 0; c < ring->n_components; c++) {
        extents[c].offset = ring->offsets[c];
        extents[c].bytes = (size_t)rows[c] * ring->components[c].row_bytes;
        extents[c].src = NULL;
    }
}

/* ---- consumers --------------------------------------------------------------- */

int64_t tq_ring_rows(const tq_ring *ring, int slot, int component)
{
    return ring->rows[(size_t)slot * ring->n_components + component];
}

size_t tq_ring_bytes(const tq_ring *ring, int slot, int component)
{
    return (size_t)tq_ring_rows(ring, slot, component) * ring->components[component].row_bytes;
}

tq_code tq_ring_read_to_host(tq_ring *ring, int slot, int component, void *dst, tq_error *err)
{
    tq_extent extent = {ring->offsets[component], tq_ring_bytes(ring, slot, component), NULL};
    if (!extent.bytes)
        return TQ_OK;
    return ring->backend->read_to_host(ring->backend, slot, &extent, dst, err);
}

tq_code tq_ring_take_on_device(tq_ring *ring, int slot, void *stream, const uint64_t *dsts, tq_error *err)
{
    tq_backend *b = ring->backend;
    tq_extent extents[TQ_MAX_COMPONENTS];
    if (!b->take)
        return not_on_device(ring, err);
    tq_ring_component_extents(ring, &ring->rows[(size_t)slot * ring->n_components], extents);
    return b->take(b, slot, stream, extents, ring->n_components, dsts, err);
}

void tq_ring_release_get(tq_ring *ring, int slot)
{
    pthread_mutex_lock(&ring->lock);
    ring->slot_state[slot] = SLOT_FREE;
    ring->stats.dequeued++;
    ring->stats.bytes_out += tq_ring_element_bytes(ring, &ring->rows[(size_t)slot * ring->n_components]);
    TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_CONSUMED);
    /* A producer asleep for more room than this is left asleep: waking it
     * would only put it back to sleep, on a core the consumer's step needs.
     * On a host ring it looks again by itself (tq_ring_room.c), and is woken
     * here only when the consumer is about to run dry. */
    int room_waiter_due = 0;
    if (ring->room_wanted > 1) {
        /* The waiter's own test (try_reserve_put): its share of the depth, not of the slots. */
        int room = tq_ring_room_of_depth(ring, ring->room_wanted);
        room_waiter_due =
            tq_ring_has_room(ring, room) && (ring->n_ready <= 1 || !tq_ring_polls_for_room(ring, ring->room_wanted));
    }
    int wake = ring->plain_waiters > 0 || ring->room_wanted <= 1 || room_waiter_due;
    pthread_mutex_unlock(&ring->lock);
    /* After the unlock: the producer it wakes (a feeder waiting for room)
     * does not find the lock still held by the consumer's thread. */
    if (wake)
        pthread_cond_broadcast(&ring->space);
}

tq_code tq_ring_lend(tq_ring *ring, int slot, void *stream, int *lease, void **data, tq_error *err)
{
    tq_backend *b = ring->backend;
    if (!b->lend)
        return tq_set_error(err, TQ_ESTATE, "its backend ('%s') lends no memory", b->name);
    tq_code code = b->lend(b, slot, stream, lease, data, err);
    if (code == TQ_OK) {
        pthread_mutex_lock(&ring->lock);
        ring->stats.lent++;
        pthread_mutex_unlock(&ring->lock);
    }
    return code;
}

void tq_ring_give_back(tq_ring *ring, int lease) { ring->backend->give_back(ring->backend, lease); }

/* ---- registered host memory ------------------------------------------------- */

tq_code tq_ring_register_host(tq_ring *ring, void *ptr, size_t bytes, tq_error *err)
{
    tq_backend *b = ring->backend;
    return b->register_host ? b->register_host(b, ptr, bytes, err) : not_on_device(ring, err);
}

tq_code tq_ring_unregister_host(tq_ring *ring, void *ptr, tq_error *err)
{
    tq_backend *b = ring->backend;
    return b->unregister_host ? b->unregister_host(b, ptr, err) : not_on_device(ring, err);
}

/* ---- the device gather --------------------------------------------------------- */

tq_code tq_ring_gather_on_device(tq_ring *ring, const void *const *ptrs, const size_t *bytes, const int *read_only,
                                 int n, tq_gather_mechanism mechanism, tq_gather_mechanism *used, tq_error *err)
{
    tq_backend *b = ring->backend;
    *used = TQ_GATHER_HOST;
    if (!b->attach_rows)
        return tq_set_error(err, TQ_ESTATE, "its backend ('%s') gathers rows on the host only", b->name);
    if (mechanism == TQ_GATHER_HOST)
        return TQ_OK;
    if (n != ring->n_components)
        return tq_set_error(err, TQ_EINVAL, "expected one source array per component (%d), got %d", ring->n_components,
                            n);
    size_t row_bytes[TQ_MAX_COMPONENTS];
    for (int c = 0; c < n; c++)
        row_bytes[c] = ring->components[c].row_bytes;
    return b->attach_rows(b, ptrs, bytes, row_bytes, read_only, n, mechanism, used, err);
}

tq_code tq_ring_gather_on_host(tq_ring *ring, tq_error *err)
{
    tq_backend *b = ring->backend;
    return b->detach_rows ? b->detach_rows(b, err) : TQ_OK;
}

/* ---- shared staging ------------------------------------------------------------ */

/* The refusal of a call that only backends with shared staging serve. */
static tq_code no_shared_staging(const tq_ring *ring, tq_error *err)
{
    return tq_set_error(err, TQ_ESTATE, "its backend ('%s') keeps no shared staging", ring->backend->name);
}

tq_code tq_ring_staging(tq_ring *ring, tq_shm *out, tq_error *err)
{
    tq_backend *b = ring->backend;
    if (!b->shared_staging)
        return no_shared_staging(ring, err);
    *out = *b->shared_staging(b);
    return TQ_OK;
}

tq_code tq_ring_staging_offset(tq_ring *ring, int slot, size_t *offset, tq_error *err)
{
    tq_backend *b = ring->backend;
    if (!b->shared_staging)
        return no_shared_staging(ring, err);
    if (slot < 0 || slot >= ring->capacity)
        return tq_set_error(err, TQ_EINVAL, "no slot %d", slot);
    *offset = (size_t)((char *)b->write_ptr(b, slot) - (char *)b->shared_staging(b)->base);
    return TQ_OK;
}

size_t tq_ring_component_offset(const tq_ring *ring, int component) { return ring->offsets[component]; }

tq_code tq_ring_swap_staging(tq_ring *ring, int a, int b, tq_error *err)
{
    tq_backend *backend = ring->backend;
    if (!backend->swap_staging)
        return no_shared_staging(ring, err);
    if (a < 0 || b < 0 || a >= ring->capacity || b >= ring->capacity)
        return tq_set_error(err, TQ_EINVAL, "swap_staging(%d, %d): no such slot", a, b);
    pthread_mutex_lock(&ring->lock);
    int writing = ring->slot_state[a] == SLOT_WRITING && ring->slot_state[b] == SLOT_WRITING;
    pthread_mutex_unlock(&ring->lock);
    if (!writing)
        return tq_set_error(err, TQ_EINVAL, "swap_staging(%d, %d): both slots must be reserved and not yet committed",
                            a, b);
    /* Outside the lock, as every backend entry: both slots are the caller's. */
    if (a != b)
        backend->swap_staging(backend, a, b);
    return TQ_OK;
}

/* ---- state ----------------------------------------------------------------- */

static void drop_ready(tq_ring *ring)
{
    for (uint64_t i = ring->head; i < ring->tail; i++) {
        int s = tq_slot_of(ring, i);
        if (ring->slot_state[s] == SLOT_READY) {
            ring->slot_state[s] = SLOT_DROPPED;
            tq_ring_fill_changes(ring);
            ring->n_ready--;
            ring->stats.dropped++;
        }
    }
    reclaim_dropped_head(ring);
}

void tq_ring_close(tq_ring *ring, int cancel)
{
    pthread_mutex_lock(&ring->lock);
    if (ring->state == TQ_STATE_OPEN) {
        ring->state = TQ_STATE_CLOSED;
        ring->end_seen = 0;
    }
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

tq_code tq_ring_reopen(tq_ring *ring, tq_error *err)
{
    tq_code code = TQ_OK;
    pthread_mutex_lock(&ring->lock);
    reclaim_dropped_head(ring);
    if (ring->state != TQ_STATE_OPEN) {
        if (ring->head < ring->tail) {
            code =
                tq_set_error(err, TQ_ESTATE, "still holds %d element(s); drain it, or close it cancelling them, first",
                             ring->n_ready);
        } else {
            ring->state = TQ_STATE_OPEN;
            ring->cancelled = 0;
            ring->end_seen = 0;
            ring->error[0] = '\0';
        }
    }
    pthread_mutex_unlock(&ring->lock);
    return code;
}

int tq_ring_resume(tq_ring *ring)
{
    pthread_mutex_lock(&ring->lock);
    int resumed = ring->state == TQ_STATE_CLOSED && !ring->cancelled && !ring->end_seen;
    if (resumed)
        ring->state = TQ_STATE_OPEN;
    pthread_mutex_unlock(&ring->lock);
    return resumed;
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
    int size = ring->n_ready;
    pthread_mutex_unlock(&ring->lock);
    return size;
}

void tq_ring_stats(tq_ring *ring, tq_stats *out)
{
    pthread_mutex_lock(&ring->lock);
    tq_ring_fill_changes(ring);
    *out = ring->stats;
    out->clock_s = ring->fill_since;
    out->size = ring->n_ready;
    out->state = ring->state;
    pthread_mutex_unlock(&ring->lock);
}

int tq_ring_capacity(const tq_ring *ring) { return ring->capacity; }

int tq_ring_depth(tq_ring *ring)
{
    pthread_mutex_lock(&ring->lock);
    int depth = ring->depth;
    pthread_mutex_unlock(&ring->lock);
    return depth;
}

int tq_ring_set_depth(tq_ring *ring, int depth)
{
    if (depth < 1)
        depth = 1;
    if (depth > ring->capacity)
        depth = ring->capacity;
    pthread_mutex_lock(&ring->lock);
    ring->depth = depth;
    ring->stats.capacity = depth;
    pthread_cond_broadcast(&ring->space); /* a producer held by the old limit may go on */
    pthread_mutex_unlock(&ring->lock);
    return depth;
}
int tq_ring_on_device(const tq_ring *ring) { return ring->backend->on_device; }

/* ---- timeline ----------------------------------------------------------------- */

tq_code tq_ring_trace_start(tq_ring *ring, int64_t n, tq_error *err)
{
    tq_code code = TQ_OK;
    if (n < 1 || n > TQ_MAX_TRACE)
        return tq_set_error(err, TQ_EINVAL, "steps must be 1 to %d, got %lld", TQ_MAX_TRACE, (long long)n);
    pthread_mutex_lock(&ring->lock);
    if (!ring->trace_store)
        ring->trace_store = tq_trace_create(ring->capacity);
    /* From the next reservation on: the elements of this trace are complete. */
    if (!ring->trace_store || tq_trace_start(ring->trace_store, ring->tail, (int)n))
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for a trace of %lld elements", (long long)n);
    else
        __atomic_store_n(&ring->trace, ring->trace_store, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ring->lock);
    return code;
}

int tq_ring_trace_stop(tq_ring *ring, tq_trace_element *out, int max)
{
    pthread_mutex_lock(&ring->lock);
    __atomic_store_n(&ring->trace, NULL, __ATOMIC_RELEASE);
    tq_trace *store = ring->trace_store;
    pthread_mutex_unlock(&ring->lock);
    return store ? tq_trace_stop(store, out, max) : 0;
}
