/* tq_cuda_pin.c: host memory page-locked for the device: one list for the
 * process, and the ranges register_host locked for a ring. */
#include "tq_cuda_backend.h"

#include <stdlib.h>

/* ---- page-locked host memory, shared by every ring of the process ------------------ */

/* The driver page-locks a byte once per process (a second cuMemHostRegister
 * over it fails with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), so every
 * ring's registrations live in one list with a count of users: two queues
 * gathering from one dataset, or a dataset that register_host locked and a
 * Feeder gathers from, lock it once, and it is unlocked when the last lets
 * go.  A range is exactly the bytes asked for, never rounded out to pages:
 * the driver refuses a device-to-host copy into a buffer that starts inside
 * a registered range and ends past it, and the heap buffers next to a
 * dataset (a fresh numpy array that q.get() fills) would be such buffers. */
struct host_pin {
    char *start, *end;
    int users;
    struct host_pin *next;
};

static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static host_pin *pins;

/* A use of [start, end): of the locked range that holds it, else of a range
 * locked and mapped now (read-only for the device when `read_only`: a
 * read-only file mapping can be locked no other way).  TQ_ESTATE when it
 * overlaps a locked range without lying inside it.  A context is current. */
tq_code cuda_pin_host(char *start, char *end, int read_only, host_pin **out, tq_error *err)
{
    tq_code code = TQ_OK;
    host_pin *p;
    pthread_mutex_lock(&pins_lock);
    for (p = pins; p; p = p->next) {
        if (start >= p->start && end <= p->end) {
            p->users++;
            goto done;
        }
        if (start < p->end && p->start < end) {
            code = tq_set_error(err, TQ_ESTATE,
                                "its memory [%p, %p) overlaps memory this process already page-locked, [%p, %p), "
                                "without lying inside it",
                                (void *)start, (void *)end, (void *)p->start, (void *)p->end);
            goto done;
        }
    }
    if (!(p = calloc(1, sizeof *p))) {
        code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the list of page-locked memory");
        goto done;
    }
    unsigned int flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
    CUresult rc =
        tq_cu.MemHostRegister(start, (size_t)(end - start), flags | (read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0));
    if (rc != CUDA_SUCCESS) {
        free(p);
        p = NULL;
        code = cuda_error(err, "cuMemHostRegister", rc);
        goto done;
    }
    *p = (host_pin){start, end, 1, pins};
    pins = p;
done:
    pthread_mutex_unlock(&pins_lock);
    *out = code == TQ_OK ? p : NULL;
    return code;
}

/* Gives a use back; the last unlocks.  A context is current, and nothing
 * queued by this user may still read the memory. */
void cuda_unpin_host(host_pin *pin)
{
    pthread_mutex_lock(&pins_lock);
    if (--pin->users == 0) {
        for (host_pin **at = &pins; *at; at = &(*at)->next)
            if (*at == pin) {
                *at = pin->next;
                break;
            }
        tq_cu.MemHostUnregister(pin->start);
        free(pin);
    }
    pthread_mutex_unlock(&pins_lock);
}

/* ---- registered host memory ------------------------------------------------------- */

static int find_registered(const cuda_backend *b, const void *ptr)
{
    for (int i = 0; i < b->n_registered; i++)
        if (b->registered[i].ptr == ptr)
            return i;
    return -1;
}

tq_code cuda_register_host(tq_backend *self, void *ptr, size_t bytes, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code = TQ_OK;
    host_pin *pin;
    pthread_mutex_lock(&b->registered_lock);
    if (b->n_registered == b->registered_cap) {
        int cap = b->registered_cap ? 2 * b->registered_cap : 4;
        host_range *grown = realloc(b->registered, (size_t)cap * sizeof *grown);
        if (!grown) {
            code = tq_set_error(err, TQ_ENOMEM, "out of host memory for the list of registered memory");
            goto done;
        }
        b->registered = grown;
        b->registered_cap = cap;
    }
    if ((code = cuda_enter(b, err)) != TQ_OK)
        goto done;
    /* Mapped as well (pin_host), so that the device gather can read rows
     * from it; memory a gather already locked is used as it is. */
    if ((code = cuda_pin_host(ptr, (char *)ptr + bytes, 0, &pin, err)) == TQ_OK)
        b->registered[b->n_registered++] = (host_range){ptr, bytes, pin};
    cuda_leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return code;
}

tq_code cuda_unregister_host(tq_backend *self, void *ptr, tq_error *err)
{
    cuda_backend *b = (cuda_backend *)self;
    tq_code code = TQ_OK;
    pthread_mutex_lock(&b->registered_lock);
    int found = find_registered(b, ptr);
    if (found < 0) {
        code = tq_set_error(err, TQ_EINVAL, "%p was not registered with this queue", ptr);
        goto done;
    }
    if ((code = cuda_enter(b, err)) != TQ_OK)
        goto done;
    /* Copies from it may still be in flight.  A gather reading it holds a
     * use of its own: the memory stays locked until that gather ends. */
    CU(StreamSynchronize, (b->copy_stream));
    cuda_unpin_host(b->registered[found].pin);
    b->registered[found] = b->registered[--b->n_registered];
fail:
    cuda_leave();
done:
    pthread_mutex_unlock(&b->registered_lock);
    return code;
}

int cuda_reads_directly(tq_backend *self, const void *ptr, size_t bytes)
{
    cuda_backend *b = (cuda_backend *)self;
    const char *p = ptr;
    int inside = 0;
    pthread_mutex_lock(&b->registered_lock);
    for (int i = 0; i < b->n_registered && !inside; i++) {
        const char *start = b->registered[i].ptr;
        inside = p >= start && p + bytes <= start + b->registered[i].bytes;
    }
    pthread_mutex_unlock(&b->registered_lock);
    return inside;
}
