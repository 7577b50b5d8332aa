/* A backend for tests/c/test_ring.c that can be told to fail: each entry of
 * the table fails on the call its control names, so the ring's failure paths
 * (dropped slots, the cleanup of a half-made ring) run under the sanitizers.
 * Host memory stands in for device memory: "device addresses" are pointers. */
#ifndef TEST_BACKEND_H
#define TEST_BACKEND_H

#include "tq_backend.h"

typedef enum {
    AT_ALLOC = 0, /* alloc_slots: fails after allocating half of the slots */
    AT_BEFORE_WRITE,
    AT_PUBLISH,
    AT_READ,
    AT_REGISTER,
    AT_TAKE,
    AT_PUT_FROM_DEVICE,
    AT_ON_ARRIVAL, /* on_arrival: otherwise calls its function at once (the data is there) */
    N_ENTRIES
} test_entry;

typedef struct {
    int fail_on[N_ENTRIES]; /* the call (1, 2, ...) of each entry that fails; 0: none */
    int calls[N_ENTRIES];
    int direct_extents; /* extents published from registered memory, not the staging */
    int destroyed;
} test_control;

/* The failures it reports: TQ_EDEVMEM, "injected failure of <entry>". */
tq_backend *test_backend_create(test_control *control);

#endif /* TEST_BACKEND_H */
