/* tq_host.c: the host-memory backend.  One block per slot, carved from one
 * shared block (tq_shm.h) that worker processes can map; the ring's locking is
 * all the ordering host memory needs. */
#include "tq_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tq_backend base;
    int capacity;
    void **slots;
} host_backend;

static int host_alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, char *err, size_t errlen)
{
    host_backend *b = (host_backend *)self;
    size_t page = tq_shm_page_size(), stride = (slot_bytes + page - 1) / page * page;
    b->slots = calloc((size_t)capacity, sizeof *b->slots);
    if (!b->slots || stride > SIZE_MAX / (size_t)capacity) {
        snprintf(err, errlen, "host backend: out of memory for %d slots of %zu bytes", capacity, slot_bytes);
        return -1;
    }
    b->capacity = capacity;
    if (tq_shm_create(&self->staging, stride * (size_t)capacity, err, errlen))
        return -1;
    for (int i = 0; i < capacity; i++)
        b->slots[i] = (char *)self->staging.base + (size_t)i * stride;
    return 0;
}

static void *host_slot(tq_backend *self, int slot) { return ((host_backend *)self)->slots[slot]; }

static int host_before_write(tq_backend *self, int slot, char *err, size_t errlen)
{
    (void)self, (void)slot, (void)err, (void)errlen;
    return 0;
}

/* Producers wrote the staging, which is the slot; only direct sources move. */
static int host_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, char *err,
                        size_t errlen)
{
    (void)err, (void)errlen;
    char *base = host_slot(self, slot);
    for (int i = 0; i < n_extents; i++)
        if (extents[i].src)
            memcpy(base + extents[i].offset, extents[i].src, extents[i].bytes);
    return 0;
}

static int host_read_to_host(tq_backend *self, int slot, size_t offset, void *dst, size_t bytes, char *err,
                             size_t errlen)
{
    (void)err, (void)errlen;
    memcpy(dst, (char *)host_slot(self, slot) + offset, bytes);
    return 0;
}

static void host_swap_staging(tq_backend *self, int a, int b)
{
    host_backend *h = (host_backend *)self;
    void *t = h->slots[a];
    h->slots[a] = h->slots[b];
    h->slots[b] = t;
}

static void host_destroy(tq_backend *self)
{
    host_backend *b = (host_backend *)self;
    tq_shm_destroy(&self->staging);
    free(b->slots);
    free(b);
}

tq_backend *tq_host_backend_create(void)
{
    host_backend *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->base.name = "host";
    b->base.alloc_slots = host_alloc_slots;
    b->base.write_ptr = host_slot;
    b->base.read_ptr = host_slot;
    b->base.before_write = host_before_write;
    b->base.publish = host_publish;
    b->base.read_to_host = host_read_to_host;
    b->base.swap_staging = host_swap_staging;
    b->base.destroy = host_destroy;
    return &b->base;
}
