/* tq_py_stop.c: Stop, theano_queue._engine.Stop: a flag that ends a
 * producer's wait on one Ring (a Feeder's way to end its puts at once). */
#include "tq_py.h"

typedef struct {
    PyObject_HEAD
    RingObject *ring;
    int flag; /* read by waits without the GIL */
} StopObject;

/* The flag of a Stop made for this ring (NULL for None), or -1 with TypeError. */
int stop_flag(RingObject *self, const char *who, PyObject *stop, const int **flag)
{
    *flag = NULL;
    if (stop == Py_None)
        return 0;
    if (!PyObject_TypeCheck(stop, &StopType) || ((StopObject *)stop)->ring != self) {
        PyErr_Format(PyExc_TypeError, "%s: stop must be None or a Stop made for this queue's ring, got %R", who, stop);
        return -1;
    }
    *flag = &((StopObject *)stop)->flag;
    return 0;
}

static int Stop_init(StopObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ring", NULL};
    RingObject *ring;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &RingType, &ring))
        return -1;
    Py_INCREF(ring);
    Py_XSETREF(self->ring, ring);
    __atomic_store_n(&self->flag, 0, __ATOMIC_RELEASE);
    return 0;
}

static void Stop_dealloc(StopObject *self)
{
    Py_XDECREF(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The flag first, then the wake: a wait reads the flag under the lock that
 * the wake takes, so it either sees the flag or is woken to see it. */
static PyObject *Stop_set(StopObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->ring || ring_usable(self->ring, "Stop.set"))
        return NULL;
    __atomic_store_n(&self->flag, 1, __ATOMIC_RELEASE);
    tq_ring_wake(self->ring->ring);
    Py_RETURN_NONE;
}

static PyObject *Stop_is_set(StopObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(__atomic_load_n(&self->flag, __ATOMIC_ACQUIRE));
}

static PyMethodDef Stop_methods[] = {
    {"set", (PyCFunction)Stop_set, METH_NOARGS, "set(): end the waits given this Stop, at once."},
    {"is_set", (PyCFunction)Stop_is_set, METH_NOARGS, "is_set() -> True once set."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject StopType = TQ_SMALL_TYPE("Stop", StopObject, Stop_init, Stop_dealloc, Stop_methods,
                                      "Stop(ring): a flag for Ring.put and Ring.reserve; set() ends their wait with "
                                      "Stopped.");
