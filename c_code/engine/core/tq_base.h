/*
 * tq_base: the ground floor every other engine file stands on: the engine's
 * limits, its result codes, the one error type, byte extents and the clock.
 * Includes nothing of the engine.
 */
#ifndef TQ_BASE_H
#define TQ_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TQ_MAX_COMPONENTS 64
#define TQ_MAX_CAPACITY 4096
#define TQ_ERRLEN 256

/* What a call came to.  The failure codes are classes: the place that fails
 * chooses one, and a front end maps each to one kind of exception. */
typedef enum {
    TQ_OK = 0,
    TQ_TIMEOUT, /* nothing happened before the deadline */
    TQ_CLOSED,  /* closed (and, for consumers, drained) */
    TQ_FAILED,  /* failed by tq_ring_fail, and drained: the message says why */
    TQ_STOPPED, /* the caller's stop flag was raised while it waited */
    TQ_EINVAL,  /* a bad argument */
    TQ_ESTATE,  /* a call that the queue's state or kind does not allow */
    TQ_ENOMEM,  /* out of host memory (pinned host memory included) */
    TQ_EDEVMEM, /* out of device memory */
    TQ_ECUDA    /* another CUDA failure; the message names the call and the error */
} tq_code;

/* Every engine call that can fail fills one of these (when not NULL). */
typedef struct {
    tq_code code;
    char message[TQ_ERRLEN];
} tq_error;

/* Fills err (when not NULL) with code and a printf-style message; returns code. */
tq_code tq_set_error(tq_error *err, tq_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A byte range of a slot.  src, for publishing: where the bytes are, NULL for
 * the slot's own staging at offset, or host memory the backend can read
 * directly (registered user memory). */
typedef struct {
    size_t offset;
    size_t bytes;
    const void *src;
} tq_extent;

/* Seconds on the monotonic clock: every deadline of the engine and of its
 * callers is a point on this clock. */
double tq_now(void);

#ifdef __cplusplus
}
#endif
#endif /* TQ_BASE_H */
