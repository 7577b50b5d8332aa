/* tq_cuda_lend.c: the CUDA backend lends a slot's device block to its
 * consumer instead of copying it (tq_backend.h, lend and give_back).
 *
 * A ring keeps TQ_CUDA_SPARES spare device blocks, each made at its first
 * lend.  To lend slot s, the consumer's stream waits for s's *filled* event;
 * s then takes a free spare's block and *consumed* event in exchange for its
 * own, and can go back to the producers at once.  The block that holds the
 * element is the consumer's until give_back, which records the block's
 * *consumed* event on the consumer's stream: whoever writes the block next
 * (once it is a slot's again) waits for that event on the GPU, as every
 * writer of a slot waits for the slot's *consumed* event.  No host wait.
 *
 * A held batch left to the consumer (tq_cuda_held.c) is gathered straight
 * into a free spare on the consumer's stream instead: the slot keeps its
 * block, and the spare goes back as any other.
 *
 * A spare that cannot be made is not tried again: the consumer copies. */
#include "tq_cuda_backend.h"

#include <stdlib.h>

/* Claims a free spare (atomically: two consumers never share one). */
static int claim_spare(cuda_backend *b)
{
    for (int k = 0; k < TQ_CUDA_SPARES; k++) {
        int free_ = 0;
        if (__atomic_load_n(&b->spares[k].state, __ATOMIC_RELAXED) == SPARE_BROKEN)
            continue;
        if (__atomic_compare_exchange_n(&b->spares[k].lent, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return k;
    }
    return -1;
}

static void unclaim_spare(cuda_backend *b, int k) { __atomic_store_n(&b->spares[k].lent, 0, __ATOMIC_RELEASE); }

/* Makes spare k's block and event at its first lend (ctx current, k
 * claimed); a spare that cannot be made is marked broken and never tried
 * again, so that a device short of memory costs one failed allocation. */
static int make_spare(cuda_backend *b, int k)
{
    cuda_spare *s = &b->spares[k];
    if (s->state == SPARE_MADE)
        return 1;
    if (tq_cu.MemAlloc(&s->block, b->slot_bytes) != CUDA_SUCCESS) {
        s->block = 0;
        __atomic_store_n(&s->state, SPARE_BROKEN, __ATOMIC_RELAXED);
        return 0;
    }
    cuda_count_allocated((int64_t)b->slot_bytes, 0);
    if (tq_cu.EventCreate(&s->consumed, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) {
        tq_cu.MemFree(s->block);
        cuda_count_allocated(-(int64_t)b->slot_bytes, 0);
        s->block = 0;
        s->consumed = NULL;
        __atomic_store_n(&s->state, SPARE_BROKEN, __ATOMIC_RELAXED);
        return 0;
    }
    s->state = SPARE_MADE;
    s->unread = 1;
    return 1;
}

/* Only the holder of a READING slot calls lend: the slot's block and events
 * are stable, and no producer reads them until the slot is released. */
tq_code cuda_lend(tq_backend *self, int slot, void *stream, int *lease, void **data, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code;
    if (!stream)
        return tq_set_error(err, TQ_ESTATE, "a device block is lent only to a consumer on a stream");
    int k = claim_spare(b);
    if (k < 0)
        return tq_set_error(err, TQ_TIMEOUT, "every spare device block is lent");
    if ((code = cuda_enter(b, err)) != TQ_OK) {
        unclaim_spare(b, k);
        return code;
    }
    if (!make_spare(b, k)) {
        code = tq_set_error(err, TQ_TIMEOUT, "no device memory for a spare block");
        goto fail;
    }
    cuda_spare *s = &b->spares[k];
    /* A held batch left to this consumer is gathered straight into the spare,
     * on its stream, after the spare's last reader (an order the stream
     * keeps itself when that reader was on it): the slot keeps its block. */
    int gathered;
    CUevent block_free = s->unread || s->freed_on == (CUstream)stream ? NULL : s->consumed;
    if ((code = cuda_gather_for_consumer(b, slot, (CUstream)stream, NULL, s->block, block_free, &gathered, err)) !=
        TQ_OK)
        goto fail;
    if (gathered) {
        s->unread = 0;
        s->borrower = (CUstream)stream;
        *lease = k;
        *data = (void *)(uintptr_t)s->block;
        cuda_leave();
        return TQ_OK;
    }
    /* An upload left to this consumer is queued first, on the copy stream,
     * and recorded as filled: the wait below covers it. */
    if ((code = cuda_start_deferred(b, slot, err)) != TQ_OK)
        goto fail;
    CU(StreamWaitEvent, ((CUstream)stream, b->filled[slot], 0));
    CUdeviceptr block = b->device[slot];
    CUevent consumed = b->consumed[slot];
    b->device[slot] = s->block;
    b->consumed[slot] = s->consumed;
    s->block = block;
    s->consumed = consumed;
    s->freed_on = NULL; /* a slot's event: recorded on any stream */
    s->unread = 0;
    s->borrower = (CUstream)stream;
    *lease = k;
    *data = (void *)(uintptr_t)block;
    cuda_leave();
    return TQ_OK;
fail:
    cuda_leave();
    unclaim_spare(b, k);
    return code;
}

/* Everything that reads the block was queued on the borrower's stream
 * before its last array went: one record orders the next writer after it.
 * Should the record fail, the host waits for the stream instead; should
 * that fail too, the block is never lent again (freed at destroy). */
void cuda_give_back(tq_backend *self, int lease)
{
    cuda_backend *b = (cuda_backend *)self;
    cuda_spare *s = &b->spares[lease];
    int ordered = 0;
    if (cuda_enter(b, NULL) == TQ_OK) {
        ordered = tq_cu.EventRecord(s->consumed, s->borrower) == CUDA_SUCCESS ||
                  tq_cu.StreamSynchronize(s->borrower) == CUDA_SUCCESS;
        cuda_leave();
    }
    s->freed_on = ordered ? s->borrower : NULL;
    s->borrower = NULL;
    if (!ordered) {
        __atomic_store_n(&s->state, SPARE_BROKEN, __ATOMIC_RELAXED);
        return; /* stays claimed: nobody writes it again */
    }
    unclaim_spare(b, lease);
}

/* Frees the spares (ctx current): their blocks once their last reader is
 * done.  A Lease keeps its ring alive, so none is lent now. */
void cuda_spares_release(cuda_backend *b)
{
    for (int k = 0; k < TQ_CUDA_SPARES; k++) {
        cuda_spare *s = &b->spares[k];
        if (s->consumed) {
            tq_cu.EventSynchronize(s->consumed);
            tq_cu.EventDestroy(s->consumed);
        }
        if (s->block) {
            tq_cu.MemFree(s->block);
            cuda_count_allocated(-(int64_t)b->slot_bytes, 0);
        }
        s->block = 0;
        s->consumed = NULL;
    }
}
