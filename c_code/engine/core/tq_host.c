/* tq_host.c: the host-memory backend.  One block per slot, carved from one
 * shared block (tq_shm.h) that worker processes can map; the ring's locking is
 * all the ordering host memory needs. */
#include "tq_backend.h"

#include <stdlib.h>
#include <string.h>

#include "tq_copy.h"

typedef struct {
    tq_backend base;
    /* The slots themselves, then TQ_HOST_SPARES spare blocks: staging.slot[i]
     * for i < capacity is slot i's, staging.slot[capacity + k] spare k's. */
    tq_shm staging;
    int capacity;
    int lent[TQ_HOST_SPARES]; /* 1 while spare k's block is a consumer's (atomic) */
} host_backend;

static tq_code host_alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, tq_error *err)
{
    host_backend *b = (host_backend *)self;
    b->capacity = capacity;
    /* The spares lie in the shared block too: once swapped into a slot, worker
     * processes write them like any slot. */
    return tq_shm_create_slots(&b->staging, capacity, TQ_HOST_SPARES, slot_bytes, err);
}

static void *host_slot(tq_backend *self, int slot) { return ((host_backend *)self)->staging.slot[slot]; }

static tq_code host_before_write(tq_backend *self, int slot, tq_error *err)
{
    (void)self, (void)slot, (void)err;
    return TQ_OK;
}

/* Producers wrote the staging, which is the slot: nothing moves. */
static tq_code host_publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, int ahead,
                            tq_error *err)
{
    (void)self, (void)slot, (void)extents, (void)n_extents, (void)ahead, (void)err;
    return TQ_OK;
}

static tq_code host_read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    (void)err;
    tq_copy(dst, (char *)host_slot(self, slot) + extent->offset, extent->bytes);
    return TQ_OK;
}

/* Only the holder of a READING slot calls lend, so the slot's entry is
 * stable; a spare is claimed atomically, so two consumers never share one. */
static tq_code host_lend(tq_backend *self, int slot, void *stream, int *lease, void **data, tq_error *err)
{
    (void)stream; /* host memory: the ring's lock orders everything */
    host_backend *b = (host_backend *)self;
    for (int k = 0; k < TQ_HOST_SPARES; k++) {
        int free_ = 0;
        if (__atomic_compare_exchange_n(&b->lent[k], &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            tq_shm_swap_slots(&b->staging, slot, b->capacity + k);
            *lease = k;
            *data = b->staging.slot[b->capacity + k];
            return TQ_OK;
        }
    }
    return tq_set_error(err, TQ_TIMEOUT, "every spare block is lent");
}

static void host_give_back(tq_backend *self, int lease)
{
    __atomic_store_n(&((host_backend *)self)->lent[lease], 0, __ATOMIC_RELEASE);
}

static const tq_shm *host_shared_staging(tq_backend *self) { return &((host_backend *)self)->staging; }

static void host_swap_staging(tq_backend *self, int a, int b)
{
    tq_shm_swap_slots(&((host_backend *)self)->staging, a, b);
}

static void host_destroy(tq_backend *self)
{
    tq_shm_destroy(&((host_backend *)self)->staging);
    free(self);
}

tq_backend *tq_host_backend_create(tq_error *err)
{
    static const tq_backend host = {
        .name = "host",
        .on_device = 0,
        .alloc_slots = host_alloc_slots,
        .write_ptr = host_slot,
        .before_write = host_before_write,
        .publish = host_publish,
        .read_to_host = host_read_to_host,
        .shared_staging = host_shared_staging,
        .swap_staging = host_swap_staging,
        .destroy = host_destroy,
        .lend = host_lend,
        .give_back = host_give_back,
    };
    host_backend *b = calloc(1, sizeof *b);
    if (!b) {
        tq_set_error(err, TQ_ENOMEM, "out of host memory for the host backend");
        return NULL;
    }
    b->base = host;
    return &b->base;
}
