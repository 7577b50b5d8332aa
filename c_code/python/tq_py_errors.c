/* tq_py_errors.c: the package's exceptions (theano_queue/core/errors.py) as the
 * engine's face raises them, the one function that turns an engine error into
 * one of them, and the check that a Ring is used in the process that made it.
 * Every other file of the face calls into this one; it calls none of them. */
#include "tq_py.h"

#include <pthread.h>
#include <unistd.h>

PyObject *QueueError, *QueueClosed, *QueueTimeout, *FeederError, *CudaError, *Stopped;
unsigned long fork_count;

static void count_fork(void) { fork_count++; }

int count_forks(void) { return pthread_atfork(NULL, NULL, count_fork) ? -1 : 0; }

/* Each class of engine failure is one kind of exception:
 *   TQ_CLOSED -> QueueClosed      TQ_TIMEOUT -> QueueTimeout
 *   TQ_FAILED -> FeederError, its __cause__ the exception given to fail()
 *   TQ_STOPPED -> Stopped (a Stop was set; the Feeder catches it)
 *   TQ_EINVAL -> ValueError       TQ_ENOMEM -> MemoryError
 *   TQ_EDEVMEM, TQ_ECUDA -> CudaError (the message names the CUDA error:
 *                                      CUDA_ERROR_OUT_OF_MEMORY for the first)
 *   TQ_ESTATE and anything else -> QueueError */
static PyObject *exception_type(tq_code code)
{
    switch (code) {
    case TQ_CLOSED: return QueueClosed;
    case TQ_TIMEOUT: return QueueTimeout;
    case TQ_FAILED: return FeederError;
    case TQ_STOPPED: return Stopped;
    case TQ_EINVAL: return PyExc_ValueError;
    case TQ_ENOMEM: return PyExc_MemoryError;
    case TQ_EDEVMEM:
    case TQ_ECUDA: return CudaError;
    default: return QueueError;
    }
}

int raise_error(const char *who, RingObject *ring, const tq_error *err)
{
    PyObject *type = exception_type(err->code), *message;
    if (!ring)
        message = PyUnicode_FromFormat("%s: %s", who, err->message);
    else if (!who)
        message = PyUnicode_FromFormat("Queue '%U': %s", ring->name, err->message);
    else
        message = PyUnicode_FromFormat("%s: queue '%U': %s", who, ring->name, err->message);
    PyObject *exc = message ? PyObject_CallOneArg(type, message) : NULL;
    Py_XDECREF(message);
    if (!exc)
        return -1;
    if (err->code == TQ_FAILED && ring && ring->failure) {
        Py_INCREF(ring->failure);
        PyException_SetCause(exc, ring->failure);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return -1;
}

int import_errors(void)
{
    PyObject *errors = PyImport_ImportModule("theano_queue.core.errors");
    if (!errors)
        return -1;
    QueueError = PyObject_GetAttrString(errors, "QueueError");
    QueueClosed = PyObject_GetAttrString(errors, "QueueClosed");
    QueueTimeout = PyObject_GetAttrString(errors, "QueueTimeout");
    FeederError = PyObject_GetAttrString(errors, "FeederError");
    CudaError = PyObject_GetAttrString(errors, "CudaError");
    Stopped = PyObject_GetAttrString(errors, "Stopped");
    Py_DECREF(errors);
    return QueueError && QueueClosed && QueueTimeout && FeederError && CudaError && Stopped ? 0 : -1;
}

int ring_usable(RingObject *self, const char *who)
{
    if (!self->ring) {
        PyErr_Format(PyExc_RuntimeError, "%s: the Ring is not initialised", who);
        return -1;
    }
    if (self->forks != fork_count) {
        PyErr_Format(QueueError,
                     "%s: queue '%U' was made in another process (%d) and cannot be used in this one (%d), "
                     "a child forked from it; the child must make its own queue",
                     who, self->name, (int)self->pid, (int)getpid());
        return -1;
    }
    return 0;
}
