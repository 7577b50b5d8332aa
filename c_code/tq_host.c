/* tq_host.c: the host-memory backend.  One aligned block per slot; the ring's
 * locking is all the ordering host memory needs. */
#include "tq_backend.h"

#include <stdlib.h>
#include <string.h>

#include "tq_copy.h"

typedef struct {
    tq_backend base;
    int capacity;
    void **slots;
} host_backend;

static tq_code host_alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, tq_error *err)
{
    host_backend *b = (host_backend *)self;
    b->slots = calloc((size_t)capacity, sizeof *b->slots);
    if (!b->slots)
        goto nomem;
    b->capacity = capacity;
    for (int i = 0; i < capacity; i++)
        if (posix_memalign(&b->slots[i], 256, slot_bytes))
            goto nomem;
    return TQ_OK;
nomem:
    return tq_set_error(err, TQ_ENOMEM, "out of host memory for %d slots of %zu bytes", capacity, slot_bytes);
}

static void *host_slot(tq_backend *self, int slot) { return ((host_backend *)self)->slots[slot]; }

static tq_code host_before_write(tq_backend *self, int slot, tq_error *err)
{
    (void)self, (void)slot, (void)err;
    return TQ_OK;
}

/* Producers wrote the staging, which is the slot: nothing moves. */
static tq_code host_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, tq_error *err)
{
    (void)self, (void)slot, (void)extents, (void)n_extents, (void)err;
    return TQ_OK;
}

static tq_code host_read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    (void)err;
    tq_copy(dst, (char *)host_slot(self, slot) + extent->offset, extent->bytes);
    return TQ_OK;
}

static void host_destroy(tq_backend *self)
{
    host_backend *b = (host_backend *)self;
    if (b->slots)
        for (int i = 0; i < b->capacity; i++)
            free(b->slots[i]);
    free(b->slots);
    free(b);
}

tq_backend *tq_host_backend_create(tq_error *err)
{
    static const tq_backend host = {
        .name = "host", .on_device = 0,
        .alloc_slots = host_alloc_slots, .write_ptr = host_slot, .before_write = host_before_write,
        .publish = host_publish, .read_to_host = host_read_to_host, .destroy = host_destroy,
    };
    host_backend *b = calloc(1, sizeof *b);
    if (!b) {
        tq_set_error(err, TQ_ENOMEM, "out of host memory for the host backend");
        return NULL;
    }
    b->base = host;
    return &b->base;
}
