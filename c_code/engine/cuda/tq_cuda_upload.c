/* tq_cuda_upload.c: a slot's host-to-device upload, queued at once or left
 * to the consumer that takes an element ahead of it (tq_cuda.c, publish). */
#include "tq_cuda_backend.h"

/* Queues the copy of a slot's extents to the device on the copy stream: after
 * the slot's last reader, recorded as filled.  The context is current. */
tq_code cuda_upload(cuda_backend *b, int slot, const tq_extent *extents, int n, tq_error *err)
{
    tq_code code = TQ_OK;
    /* The device slot is overwritten only after its last reader is done: an
     * order on the GPU, not a wait on the host. */
    CU(StreamWaitEvent, (b->copy_stream, b->consumed[slot], 0));
    for (int i = 0; i < n; i++) {
        const void *src = extents[i].src ? extents[i].src : (const char *)b->staging.slot[slot] + extents[i].offset;
        CU(MemcpyHtoDAsync, (b->device[slot] + extents[i].offset, src, extents[i].bytes, b->copy_stream));
    }
    CU(EventRecord, (b->filled[slot], b->copy_stream));
fail:
    return code;
}

/* Takes what was left for `slot` out of the table: an upload (gather 0) or a
 * held batch's gather (1), or either (-1); 0 when nothing of that kind was.
 * What is taken stays counted (n_deferred, n_left_gathers) until its taker
 * has queued it (left_queued): a consumer that finds nothing counted waits
 * for the slot's events, which the taker records first, under the lock it
 * took it with.  Under deferred_lock. */
static int take_deferred(cuda_backend *b, int slot, int gather, deferred_upload *out)
{
    deferred_upload *left = &b->deferred[slot];
    if (left->n < 0 || (gather >= 0 && (left->gather_rows >= 0) != gather))
        return 0;
    *out = *left;
    left->n = -1;
    left->arrived = NULL;
    return 1;
}

/* What take_deferred took is queued (or dropped, or failed). */
static void left_queued(cuda_backend *b, const deferred_upload *left)
{
    __atomic_sub_fetch(left->gather_rows >= 0 ? &b->n_left_gathers : &b->n_deferred, 1, __ATOMIC_RELEASE);
}

void cuda_arrival_after(deferred_upload *left, CUstream stream, int failed)
{
    if (left->arrived && (failed || tq_cu.LaunchHostFunc(stream, left->arrived, left->arrived_arg)))
        left->arrived(left->arrived_arg); /* the trace's mark is freed either way */
}

/* A consumer, before it reads `first`: starts every upload left to it, that
 * of `first` first and the others in slot order after it.  The context is
 * current.  A producer left its upload only after the slot's data was
 * written, and before the slot was READY: a consumer that reads a slot sees
 * what was left for it (the ring's lock orders the two).  Held batches' gathers
 * stay left: each is queued by its own slot's consumer.
 *
 * An upload that fails is its own element's failure.  That of `first` is
 * reported (its element is dropped); another's goes back to the table, and
 * the rest wait, so that the take of that element queues it again and says
 * what fails: dropped from the table, its element would be read as whatever
 * the slot held before, and this take would raise for an element whose own
 * copy had landed. */
tq_code cuda_start_deferred(cuda_backend *b, int first, tq_error *err)
{
    tq_code code = TQ_OK;
    if (!__atomic_load_n(&b->n_deferred, __ATOMIC_ACQUIRE))
        return TQ_OK;
    pthread_mutex_lock(&b->deferred_lock);
    for (int k = 0; k < b->capacity; k++) {
        int slot = (first + k) % b->capacity;
        deferred_upload left;
        if (!take_deferred(b, slot, 0, &left))
            continue;
        code = cuda_upload(b, slot, left.extents, left.n, err);
        if (code != TQ_OK && slot != first) {
            b->deferred[slot] = left; /* still counted: nobody said it was queued */
            code = TQ_OK;             /* its own take's to report */
            break;
        }
        left_queued(b, &left);
        cuda_arrival_after(&left, b->copy_stream, code != TQ_OK);
        if (code != TQ_OK)
            break;
    }
    pthread_mutex_unlock(&b->deferred_lock);
    return code;
}

/* A producer that writes `slot` anew: work still left there is of an element
 * that was dropped unread, and must not overwrite the new one. */
void cuda_forget_deferred(cuda_backend *b, int slot)
{
    deferred_upload left;
    if (!__atomic_load_n(&b->n_deferred, __ATOMIC_RELAXED) && !__atomic_load_n(&b->n_left_gathers, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&b->deferred_lock);
    int had = take_deferred(b, slot, -1, &left);
    pthread_mutex_unlock(&b->deferred_lock);
    if (had)
        left_queued(b, &left); /* dropped unread: nothing to queue */
    if (had && left.arrived)
        left.arrived(left.arrived_arg);
}

void cuda_leave_gather(cuda_backend *b, int slot, const deferred_upload *gather)
{
    pthread_mutex_lock(&b->deferred_lock);
    b->deferred[slot] = *gather;
    b->deferred[slot].n = 0;
    b->deferred[slot].arrived = NULL;
    __atomic_add_fetch(&b->n_left_gathers, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->deferred_lock);
}

void cuda_left_gather_queued(cuda_backend *b) { __atomic_sub_fetch(&b->n_left_gathers, 1, __ATOMIC_RELEASE); }

int cuda_take_left_gather(cuda_backend *b, int slot, deferred_upload *out)
{
    if (!__atomic_load_n(&b->n_left_gathers, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&b->deferred_lock);
    int had = take_deferred(b, slot, 1, out);
    pthread_mutex_unlock(&b->deferred_lock);
    return had;
}
