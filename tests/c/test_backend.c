/* The failing test backend (see test_backend.h). */
#include "test_backend.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    tq_backend base;
    test_control *control;
    int capacity;
    size_t slot_bytes;
    char **staging, **device;
    const void *registered;
    size_t registered_bytes;
} test_backend;

static const char *entry_names[N_ENTRIES] = {"alloc_slots",   "before_write", "publish",         "read_to_host",
                                             "register_host", "take",         "put_from_device", "on_arrival"};

/* Counts a call of entry; TQ_EDEVMEM when it is the one to fail. */
static tq_code call(test_backend *b, test_entry entry, tq_error *err)
{
    int n = __atomic_add_fetch(&b->control->calls[entry], 1, __ATOMIC_RELAXED);
    if (n != b->control->fail_on[entry])
        return TQ_OK;
    return tq_set_error(err, TQ_EDEVMEM, "injected failure of %s", entry_names[entry]);
}

static tq_code alloc_slots(tq_backend *self, int capacity, size_t slot_bytes, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    b->staging = calloc((size_t)capacity, sizeof *b->staging);
    b->device = calloc((size_t)capacity, sizeof *b->device);
    if (!b->staging || !b->device)
        return tq_set_error(err, TQ_ENOMEM, "out of host memory");
    b->capacity = capacity;
    b->slot_bytes = slot_bytes;
    for (int i = 0; i < capacity; i++) {
        if (i == capacity / 2 && call(b, AT_ALLOC, err) != TQ_OK)
            return TQ_EDEVMEM; /* half made: destroy frees it */
        b->staging[i] = calloc(1, slot_bytes);
        b->device[i] = calloc(1, slot_bytes);
        if (!b->staging[i] || !b->device[i])
            return tq_set_error(err, TQ_ENOMEM, "out of host memory");
    }
    return TQ_OK;
}

static void *write_ptr(tq_backend *self, int slot) { return ((test_backend *)self)->staging[slot]; }

static tq_code before_write(tq_backend *self, int slot, tq_error *err)
{
    (void)slot;
    return call((test_backend *)self, AT_BEFORE_WRITE, err);
}

static int reads_directly(tq_backend *self, const void *src, size_t bytes)
{
    test_backend *b = (test_backend *)self;
    const char *p = src, *start = b->registered;
    return start && p >= start && p + bytes <= start + b->registered_bytes;
}

/* The "device copy": staging (or registered memory) to the device slot. */
static tq_code publish(tq_backend *self, int slot, const tq_extent *extents, int n_extents, int ahead, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    (void)ahead;
    if (call(b, AT_PUBLISH, err) != TQ_OK)
        return TQ_EDEVMEM;
    for (int i = 0; i < n_extents; i++) {
        const char *src = extents[i].src ? extents[i].src : b->staging[slot] + extents[i].offset;
        b->control->direct_extents += extents[i].src != NULL;
        memcpy(b->device[slot] + extents[i].offset, src, extents[i].bytes);
    }
    return TQ_OK;
}

static tq_code read_to_host(tq_backend *self, int slot, const tq_extent *extent, void *dst, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    if (call(b, AT_READ, err) != TQ_OK)
        return TQ_EDEVMEM;
    memcpy(dst, b->device[slot] + extent->offset, extent->bytes);
    return TQ_OK;
}

static tq_code register_host(tq_backend *self, void *ptr, size_t bytes, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    if (call(b, AT_REGISTER, err) != TQ_OK)
        return TQ_EDEVMEM;
    b->registered = ptr;
    b->registered_bytes = bytes;
    return TQ_OK;
}

static tq_code unregister_host(tq_backend *self, void *ptr, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    if (ptr != b->registered)
        return tq_set_error(err, TQ_EINVAL, "%p was not registered", ptr);
    b->registered = NULL;
    return TQ_OK;
}

/* stream is unused: the copies are done when the call returns. */
static tq_code take(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n, const uint64_t *dsts,
                    tq_error *err)
{
    test_backend *b = (test_backend *)self;
    (void)stream;
    if (call(b, AT_TAKE, err) != TQ_OK)
        return TQ_EDEVMEM;
    for (int i = 0; i < n; i++)
        memcpy((void *)(uintptr_t)dsts[i], b->device[slot] + extents[i].offset, extents[i].bytes);
    return TQ_OK;
}

static tq_code put_from_device(tq_backend *self, int slot, void *stream, const tq_extent *extents, int n,
                               const uint64_t *srcs, tq_error *err)
{
    test_backend *b = (test_backend *)self;
    (void)stream;
    if (call(b, AT_PUT_FROM_DEVICE, err) != TQ_OK)
        return TQ_EDEVMEM;
    for (int i = 0; i < n; i++)
        memcpy(b->device[slot] + extents[i].offset, (const void *)(uintptr_t)srcs[i], extents[i].bytes);
    return TQ_OK;
}

/* The "device copy" is done when publish returns: the data has arrived. */
static tq_code on_arrival(tq_backend *self, int slot, void (*fn)(void *), void *arg, tq_error *err)
{
    (void)slot;
    if (call((test_backend *)self, AT_ON_ARRIVAL, err) != TQ_OK)
        return TQ_EDEVMEM;
    fn(arg);
    return TQ_OK;
}

static void destroy(tq_backend *self)
{
    test_backend *b = (test_backend *)self;
    for (int i = 0; i < b->capacity; i++) {
        free(b->staging[i]);
        free(b->device[i]);
    }
    free(b->staging);
    free(b->device);
    b->control->destroyed++;
    free(b);
}

tq_backend *test_backend_create(test_control *control)
{
    static const tq_backend table = {
        .name = "test",
        .on_device = 1,
        .alloc_slots = alloc_slots,
        .write_ptr = write_ptr,
        .before_write = before_write,
        .reads_directly = reads_directly,
        .publish = publish,
        .read_to_host = read_to_host,
        .register_host = register_host,
        .unregister_host = unregister_host,
        .take = take,
        .put_from_device = put_from_device,
        .destroy = destroy,
        .on_arrival = on_arrival,
    };
    test_backend *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->base = table;
    b->control = control;
    return &b->base;
}
