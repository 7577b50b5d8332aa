/* tq_py_given.c: Ring.put_given and Ring.flush_given, puts of elements their
 * producer gave up, copied later by the ring's putter thread
 * (tq_ring_put_later) so that the producer keeps the GIL.
 *
 * A Feeder over a Python iterable needs the GIL for each element it takes
 * from its source, and a training loop's thread holds the GIL through its
 * steps (Theano's VM does), letting go of it where a dequeue hands it over.
 * A put that gives the GIL up for its copy must take it back after the copy,
 * and numpy's fancy indexing in the source gives it up for its own copy too:
 * two hand-overs an element, where the consumer offers about one a step.
 * An element given up is copied beside the producer and the step: one
 * hand-over an element (doc/design.rst, "The GIL and a Feeder over an
 * iterable").
 *
 * Given up means that nothing but the one-item list it came in holds the
 * element, and nothing but the element holds an array whose bytes the putter
 * reads (no other reference, no view of it, no weak reference, its own data):
 * no one can write those bytes before they are copied.  A small element of a
 * host ring is copied at once, the GIL held.  Anything else, and an element
 * that finds the ring full, is put as Ring.put puts it. */
#include "tq_py.h"

/* A host ring's element this small is copied at once, with the GIL held: its copy costs less than waking
 * the putter's thread (which, on a machine of few cores, waits for one) or than giving the GIL up and
 * taking it back. */
#define INLINE_MAX_BYTES (64 * 1024)

/* An element whose copy the putter has not finished: its checked arrays, held. */
struct given_element {
    uint64_t ticket;
    PyObject *arrays; /* a tuple of the checked components */
};

/* Whether nobody but the box can reach the bytes the putter would read.  The
 * element in the box is a tuple of one value per component, or for a queue of
 * one component a bare array; parts[c] is its value c itself (then held by the
 * element, or the box, and by parts), or a copy the schema made (a cast),
 * held by parts alone. */
static int given_up(PyObject *element, int bare, PyArrayObject *const *parts, int n)
{
    if (!bare && Py_REFCNT(element) != 1)
        return 0;
    for (int c = 0; c < n; c++) {
        PyObject *item = bare ? element : PyTuple_GET_ITEM(element, c), *part = (PyObject *)parts[c];
        if (Py_REFCNT(part) != (part == item ? 2 : 1))
            return 0;
        if (!PyArray_CHKFLAGS(parts[c], NPY_ARRAY_OWNDATA) || PyArray_BASE(parts[c]) != NULL ||
            ((PyArrayObject_fields *)part)->weakreflist != NULL)
            return 0;
    }
    return 1;
}

/* The putter's failure, if one is waiting to be told, as the exception a put would have raised. */
static int raise_putter_failure(RingObject *self, tq_code code, const tq_error *err)
{
    return code == TQ_OK ? 0 : raise_error("Queue.put", self, err);
}

/* Lets go of the elements whose copies the putter has finished. */
static void release_copied(RingObject *self)
{
    if (!self->given_count)
        return;
    uint64_t done = tq_ring_later_done(self->ring);
    int capacity = tq_ring_capacity(self->ring);
    while (self->given_count && self->given[self->given_first].ticket < done) {
        Py_CLEAR(self->given[self->given_first].arrays);
        self->given_first = (self->given_first + 1) % capacity;
        self->given_count--;
    }
}

void release_given(RingObject *self, int capacity)
{
    if (!self->given)
        return;
    for (; self->given_count; self->given_count--) {
        Py_CLEAR(self->given[self->given_first].arrays);
        self->given_first = (self->given_first + 1) % capacity;
    }
    PyMem_Free(self->given);
    self->given = NULL;
}

/* Puts a small element of a host ring at once, without giving the GIL up: 1 when put, 0 when the ring
 * has no free slot now (put it as Ring.put does then), -1 with an exception. */
static int put_at_once(RingObject *self, const void *const *srcs, const int64_t *rows)
{
    tq_error err;
    int slot;
    tq_code code = tq_ring_reserve_put(self->ring, 0.0, NULL, &slot, &err); /* 0.0: now or never */
    if (code == TQ_TIMEOUT)
        return 0;
    if (code == TQ_OK)
        code = tq_ring_put_from_host(self->ring, slot, srcs, rows, &err);
    return code == TQ_OK ? 1 : raise_error("Queue.put", self, &err);
}

/* Hands a checked element to the putter, holding its arrays; 1 when handed over, 0 when the ring has no
 * free slot now (put it at once then), -1 with an exception. */
static int hand_to_putter(RingObject *self, PyArrayObject **parts, const void *const *srcs, const int64_t *rows)
{
    int capacity = tq_ring_capacity(self->ring), slot;
    tq_error err;
    if (!self->given && !(self->given = PyMem_Calloc((size_t)capacity, sizeof *self->given))) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *held = PyTuple_New(self->n);
    if (!held)
        return -1;
    tq_code code = tq_ring_reserve_put(self->ring, 0.0, NULL, &slot, &err); /* 0.0: now or never */
    if (code == TQ_TIMEOUT) {
        Py_DECREF(held);
        return 0;
    }
    uint64_t ticket;
    if (code == TQ_OK)
        code = tq_ring_put_later(self->ring, slot, srcs, rows, &ticket, &err);
    if (code != TQ_OK) {
        Py_DECREF(held);
        return raise_error("Queue.put", self, &err);
    }
    for (int c = 0; c < self->n; c++) {
        PyTuple_SET_ITEM(held, c, (PyObject *)parts[c]); /* the references move to the tuple */
        parts[c] = NULL;
    }
    /* At most capacity are held: each holds a reserved slot until the putter is past it. */
    self->given[(self->given_first + self->given_count) % capacity] = (struct given_element){ticket, held};
    self->given_count++;
    return 1;
}

Py_ssize_t put_given(RingObject *self, PyObject *box, double timeout_s, const int *stop)
{
    PyArrayObject *parts[TQ_MAX_COMPONENTS];
    const void *srcs[TQ_MAX_COMPONENTS];
    int64_t rows[TQ_MAX_COMPONENTS];
    tq_error err;
    if (!PyList_CheckExact(box) || PyList_GET_SIZE(box) != 1) {
        PyErr_Format(PyExc_TypeError, "Ring.put_given: expected a list holding one element, got %R", box);
        return -1;
    }
    producer_back(self);
    release_copied(self);
    if (raise_putter_failure(self, tq_ring_later_failure(self->ring, &err), &err))
        return -1;
    PyObject *element = PyList_GET_ITEM(box, 0); /* borrowed: the box holds it until it is put */
    int bare = self->n == 1 && PyArray_Check(element);
    PyObject *values = bare ? PyTuple_Pack(1, element) : Py_NewRef(element);
    int checked = values ? check_element(self, NULL, values, parts, srcs, rows) : -1;
    Py_XDECREF(values);
    if (checked)
        return -1;
    size_t bytes = 0;
    for (int c = 0; c < self->n; c++)
        bytes += (size_t)PyArray_NBYTES(parts[c]);
    int handed = 0;
    if (!tq_ring_on_device(self->ring) && bytes <= INLINE_MAX_BYTES)
        handed = put_at_once(self, srcs, rows);
    else if ((bare || (PyTuple_CheckExact(element) && PyTuple_GET_SIZE(element) == self->n)) &&
             given_up(element, bare, parts, self->n))
        handed = hand_to_putter(self, parts, srcs, rows);
    Py_ssize_t size = handed ? (handed > 0 ? tq_ring_size(self->ring) : -1)
                             : put_checked(self, "Queue.put", srcs, rows, timeout_s, stop);
    release_parts(parts, self->n);
    if (size < 0 || PyList_SetSlice(box, 0, 1, NULL))
        return -1;
    producer_to_source(self, 1);
    return size;
}

int flush_given(RingObject *self, double timeout_s)
{
    tq_error err;
    tq_code code;
    producer_to_source(self, 0);
    Py_BEGIN_ALLOW_THREADS
    code = tq_ring_later_wait(self->ring, timeout_s < 0 ? -1.0 : tq_now() + timeout_s, &err);
    Py_END_ALLOW_THREADS
    release_copied(self);
    return raise_putter_failure(self, code, &err);
}
