/* tq_ring_put.c: the ring's put side (see tq_ring.h): the extents a put
 * writes, publishing a written slot, puts from host memory, gathered rows
 * and device arrays, and giving a reserved slot up. */
#include "tq_ring_state.h"

#include <string.h>

#include "tq_copy.h"

/* ---- producers --------------------------------------------------------------- */

/* Drops a slot whose backend work failed and passes the failure on. */
static tq_code put_failed(tq_ring *ring, int slot, tq_code code)
{
    pthread_mutex_lock(&ring->lock);
    tq_ring_drop_slot(ring, slot, 1);
    pthread_mutex_unlock(&ring->lock);
    return code;
}

tq_code tq_ring_begin_host_write(tq_ring *ring, int slot, tq_error *err)
{
    tq_code code = ring->backend->before_write(ring->backend, slot, err);
    return code == TQ_OK ? TQ_OK : put_failed(ring, slot, code);
}

void *tq_ring_write_ptr(tq_ring *ring, int slot, int component)
{
    return (char *)ring->backend->write_ptr(ring->backend, slot) + ring->offsets[component];
}

/* The byte ranges of a slot that hold data, merged where they touch. */
static int data_extents(const tq_ring *ring, const int64_t *rows, const void *const *direct, tq_extent *extents)
{
    tq_extent parts[TQ_MAX_COMPONENTS];
    int n = 0;
    tq_ring_component_extents(ring, rows, parts);
    for (int c = 0; c < ring->n_components; c++) {
        const void *src = direct ? direct[c] : NULL;
        tq_extent *last = n ? &extents[n - 1] : NULL;
        if (!parts[c].bytes)
            continue;
        if (last && !src && !last->src && last->offset + last->bytes == parts[c].offset) {
            last->bytes += parts[c].bytes;
        } else {
            extents[n] = parts[c];
            extents[n++].src = src;
        }
    }
    return n;
}

/* Makes a written and published slot READY (or drops it when a close
 * cancelled it). */
static tq_code finish_put(tq_ring *ring, int slot, const int64_t *rows, tq_error *err)
{
    tq_code code = TQ_OK;
    pthread_mutex_lock(&ring->lock);
    memcpy(&ring->rows[(size_t)slot * ring->n_components], rows, ring->n_components * sizeof *rows);
    if (ring->cancelled) {
        tq_ring_drop_slot(ring, slot, 1);
        code = tq_set_error(err, TQ_CLOSED, "closed, and what was being put was cancelled");
    } else {
        ring->slot_state[slot] = SLOT_READY;
        tq_ring_fill_changes(ring);
        ring->n_ready++;
        ring->stats.enqueued++;
        ring->stats.bytes_in += tq_ring_element_bytes(ring, rows);
        TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_READY);
    }
    pthread_mutex_unlock(&ring->lock);
    /* After the unlock: a woken consumer does not find the lock still held. */
    if (code == TQ_OK)
        pthread_cond_broadcast(&ring->data);
    return code;
}

/* Publishes a written slot; direct[c], when not NULL, is where component c
 * is read from instead of the staging. */
static tq_code publish(tq_ring *ring, int slot, const int64_t *rows, const void *const *direct, tq_error *err)
{
    tq_extent extents[TQ_MAX_COMPONENTS];
    int n_extents = data_extents(ring, rows, direct, extents);
    TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_PUT_END);
    tq_code code = ring->backend->publish(ring->backend, slot, extents, n_extents, tq_ring_size(ring), err);
    if (code != TQ_OK)
        return put_failed(ring, slot, code);
    TRACE_HOOK(ring, tq_trace_published, ring->backend, slot);
    return finish_put(ring, slot, rows, err);
}

tq_code tq_ring_commit_put(tq_ring *ring, int slot, const int64_t *rows, tq_error *err)
{
    return publish(ring, slot, rows, NULL, err);
}

tq_code tq_ring_put_from_host(tq_ring *ring, int slot, const void *const *srcs, const int64_t *rows, tq_error *err)
{
    tq_backend *b = ring->backend;
    const void *direct[TQ_MAX_COMPONENTS];
    tq_code code = tq_ring_begin_host_write(ring, slot, err);
    if (code != TQ_OK)
        return code;
    for (int c = 0; c < ring->n_components; c++) {
        size_t bytes = (size_t)rows[c] * ring->components[c].row_bytes;
        direct[c] = bytes && b->reads_directly && b->reads_directly(b, srcs[c], bytes) ? srcs[c] : NULL;
        if (!direct[c])
            tq_copy(tq_ring_write_ptr(ring, slot, c), srcs[c], bytes);
    }
    return publish(ring, slot, rows, direct, err);
}

/* Whether the backend gathers this element's rows itself: it does when it
 * has attached the memory of any of its components (tq_ring_gather_on_device);
 * publish_rows then gathers the others on the host. */
static int device_gathers(tq_ring *ring, const tq_rows *srcs, const int64_t *idx, int64_t rows)
{
    tq_backend *b = ring->backend;
    if (!b->gathers_rows || !b->publish_rows || rows < 1)
        return 0;
    for (int c = 0; c < ring->n_components; c++)
        if (srcs[c].layout) /* walked or cast rows: the host's gather only */
            return 0;
    for (int c = 0; c < ring->n_components; c++) {
        const char *lo, *hi;
        tq_rows_span(&srcs[c], ring->components[c].row_bytes, idx, rows, &lo, &hi);
        if (b->gathers_rows(b, c, lo, hi))
            return 1;
    }
    return 0;
}

static tq_code publish_gathered(tq_ring *ring, int slot, const tq_rows *srcs, const int64_t *idx, int64_t rows,
                                tq_error *err)
{
    tq_row_part parts[TQ_MAX_COMPONENTS];
    int64_t counts[TQ_MAX_COMPONENTS];
    for (int c = 0; c < ring->n_components; c++) {
        parts[c] = (tq_row_part){srcs[c], ring->components[c].row_bytes, ring->offsets[c]};
        counts[c] = rows;
    }
    TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_PUT_END);
    tq_code code = ring->backend->publish_rows(ring->backend, slot, parts, ring->n_components, idx, rows, err);
    if (code != TQ_OK)
        return put_failed(ring, slot, code);
    TRACE_HOOK(ring, tq_trace_published, ring->backend, slot);
    return finish_put(ring, slot, counts, err);
}

/* An array dataset's rows: gathered by the device from attached memory where
 * the backend can (publish_rows), else by the copy pool into the slot's
 * staging (pinned shared staging on a GPU), and the DMA follows. */
tq_code tq_ring_put_rows(tq_ring *ring, int slot, const tq_rows *srcs, const int64_t *idx, int64_t rows, tq_error *err)
{
    int64_t counts[TQ_MAX_COMPONENTS];
    tq_code code = tq_ring_begin_host_write(ring, slot, err);
    if (code != TQ_OK)
        return code;
    if (device_gathers(ring, srcs, idx, rows))
        return publish_gathered(ring, slot, srcs, idx, rows, err);
    for (int c = 0; c < ring->n_components; c++) {
        tq_gather(tq_ring_write_ptr(ring, slot, c), &srcs[c], ring->components[c].row_bytes, idx, rows);
        counts[c] = rows;
    }
    return publish(ring, slot, counts, NULL, err);
}

tq_code tq_ring_put_from_device(tq_ring *ring, int slot, void *stream, const uint64_t *srcs, const int64_t *rows,
                                tq_error *err)
{
    tq_backend *b = ring->backend;
    tq_extent extents[TQ_MAX_COMPONENTS];
    tq_ring_component_extents(ring, rows, extents);
    tq_code code = b->put_from_device ? b->put_from_device(b, slot, stream, extents, ring->n_components, srcs, err)
                                      : not_on_device(ring, err);
    if (code != TQ_OK)
        return put_failed(ring, slot, code);
    /* The copy is queued on the producer's stream: its end is PUT_END. */
    TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_PUT_END);
    return finish_put(ring, slot, rows, err);
}

tq_code tq_ring_probe_device(tq_ring *ring, uint64_t ptr, tq_device_ptr *out, int *device, tq_error *err)
{
    tq_backend *b = ring->backend;
    return b->probe_device ? b->probe_device(b, ptr, out, device, err) : not_on_device(ring, err);
}

tq_code tq_ring_hold_device(tq_ring *ring, int *held, tq_error *err)
{
    tq_backend *b = ring->backend;
    *held = 0;
    return b->hold_device ? b->hold_device(b, held, err) : TQ_OK;
}

void tq_ring_release_device(tq_ring *ring)
{
    tq_backend *b = ring->backend;
    if (b->release_device)
        b->release_device(b);
}

void *tq_ring_copy_stream(tq_ring *ring)
{
    tq_backend *b = ring->backend;
    return b->copy_stream ? b->copy_stream(b) : NULL;
}

tq_code tq_ring_put_device_arrays(tq_ring *ring, int slot, const tq_device_src *srcs, const int64_t *rows,
                                  tq_error *err)
{
    tq_backend *b = ring->backend;
    tq_extent extents[TQ_MAX_COMPONENTS];
    tq_ring_component_extents(ring, rows, extents);
    tq_code code = b->put_device_arrays ? b->put_device_arrays(b, slot, extents, ring->n_components, srcs, err)
                                        : not_on_device(ring, err);
    if (code != TQ_OK)
        return put_failed(ring, slot, code);
    TRACE_HOOK(ring, tq_trace_hit, slot, TQ_EV_PUT_END);
    return finish_put(ring, slot, rows, err);
}

void tq_ring_abort_put(tq_ring *ring, int slot)
{
    pthread_mutex_lock(&ring->lock);
    if (ring->slot_state[slot] == SLOT_WRITING) /* never a slot that readers may hold */
        tq_ring_drop_slot(ring, slot, 0);
    pthread_mutex_unlock(&ring->lock);
}

int tq_ring_is_reserved_for_writing(tq_ring *ring, int slot)
{
    if (slot < 0 || slot >= ring->capacity)
        return 0;
    pthread_mutex_lock(&ring->lock);
    int writing = ring->slot_state[slot] == SLOT_WRITING;
    pthread_mutex_unlock(&ring->lock);
    return writing;
}
