/* tq_py_shuffle.c: Permutation, theano_queue._engine.Permutation: an epoch's permutation made in idle time,
 * off the GIL (c_code/engine/core/tq_shuffle.h says why), with the draws of numpy's Generator.permutation. */
#include "tq_py.h"

#include <numpy/random/bitgen.h>

#include "tq_shuffle.h"

typedef struct {
    PyObject_HEAD
    PyObject *bit_generator; /* held: its state is the shuffle's */
    PyArrayObject *array;    /* the permutation, made in place */
    tq_shuffle_ahead *ahead; /* NULL once ended */
    unsigned long forks;     /* fork_count when it was made: its thread is this process's only */
} PermutationObject;

/* The words of a numpy BitGenerator (its capsule), or -1 with TypeError. */
static int bits_of(PyObject *bit_generator, tq_bits *bits)
{
    PyObject *capsule = PyObject_GetAttrString(bit_generator, "capsule");
    bitgen_t *bitgen = capsule ? PyCapsule_GetPointer(capsule, "BitGenerator") : NULL;
    Py_XDECREF(capsule);
    if (!bitgen) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "Permutation: expected a numpy BitGenerator (e.g. numpy.random.PCG64), got %R",
                     bit_generator);
        return -1;
    }
    *bits = (tq_bits){bitgen->state, bitgen->next_uint64, bitgen->next_uint32};
    return 0;
}

static int check_length(Py_ssize_t n)
{
    if (n >= 0)
        return 0;
    PyErr_Format(PyExc_ValueError, "Permutation: expected n >= 0, got %zd", n);
    return -1;
}

static int Permutation_init(PermutationObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bit_generator", "n", NULL};
    PyObject *bit_generator;
    Py_ssize_t n;
    tq_bits bits;
    tq_error err;
    if (self->array) {
        PyErr_SetString(PyExc_TypeError, "Permutation: already made");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", kwlist, &bit_generator, &n) || bits_of(bit_generator, &bits) < 0)
        return -1;
    if (check_length(n) < 0)
        return -1;
    npy_intp dims[1] = {n};
    PyArrayObject *array = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64); /* untouched: the thread fills it */
    if (!array)
        return -1;
    if (tq_shuffle_start(PyArray_DATA(array), n, bits, &self->ahead, &err) != TQ_OK) {
        Py_DECREF(array);
        return raise_error("Permutation", NULL, &err);
    }
    Py_INCREF(bit_generator);
    self->bit_generator = bit_generator;
    self->array = array;
    self->forks = fork_count;
    return 0;
}

/* Ends the making and its thread (in the process that started it: a fork has no thread to join). */
static void end(PermutationObject *self)
{
    tq_shuffle_ahead *ahead = self->ahead;
    self->ahead = NULL;
    if (ahead && self->forks == fork_count) {
        Py_BEGIN_ALLOW_THREADS /* joins the thread: at most one chunk of swaps */
        tq_shuffle_free(ahead);
        Py_END_ALLOW_THREADS
    }
}

static void Permutation_dealloc(PermutationObject *self)
{
    end(self);
    Py_XDECREF(self->bit_generator);
    Py_XDECREF(self->array);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 0 when the permutation can still be asked for, else -1 with QueueError. */
static int usable(PermutationObject *self, const char *who)
{
    if (self->ahead && self->forks == fork_count)
        return 0;
    PyErr_Format(QueueError, "Permutation.%s: %s", who,
                 self->ahead ? "made in another process (its thread is that process's)" : "closed");
    return -1;
}

static PyObject *Permutation_result(PermutationObject *self, PyObject *unused)
{
    (void)unused;
    if (usable(self, "result") < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS /* the rest of it, on this thread */
    tq_shuffle_finish(self->ahead);
    Py_END_ALLOW_THREADS
    Py_INCREF(self->array);
    return (PyObject *)self->array;
}

static PyObject *Permutation_done(PermutationObject *self, PyObject *unused)
{
    (void)unused;
    if (usable(self, "done") < 0)
        return NULL;
    return PyBool_FromLong(tq_shuffle_done(self->ahead));
}

/* close(wait=True): wait=False ends the making only where its thread has returned, saying whether it has. */
static PyObject *Permutation_close(PermutationObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"wait", NULL};
    int wait = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &wait))
        return NULL;
    if (!wait && self->ahead && self->forks == fork_count && !tq_shuffle_stop(self->ahead))
        Py_RETURN_FALSE;
    end(self);
    Py_RETURN_TRUE;
}

/* permutation(bit_generator, n) -> numpy.random.Generator(bit_generator).permutation(n) as int64, made on
 * the calling thread without the GIL. */
PyObject *permutation(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *bit_generator;
    Py_ssize_t n;
    tq_bits bits;
    if (!PyArg_ParseTuple(args, "On", &bit_generator, &n) || bits_of(bit_generator, &bits) < 0 || check_length(n) < 0)
        return NULL;
    npy_intp dims[1] = {n};
    PyArrayObject *array = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
    if (!array)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    tq_permute(PyArray_DATA(array), n, bits);
    Py_END_ALLOW_THREADS
    return (PyObject *)array;
}

static PyMethodDef Permutation_methods[] = {
    {"result", (PyCFunction)Permutation_result, METH_NOARGS,
     "result() -> the permutation, an int64 array: what is left of it is made on the calling thread."},
    {"done", (PyCFunction)Permutation_done, METH_NOARGS, "done() -> whether the permutation is complete."},
    TQ_KW_METHOD("close", Permutation_close,
                 "close(wait=True) -> True: ends the making where it stands, and its thread; result() is refused from "
                 "then on.  wait=False ends it only where the thread has returned (else False: it is told to stop, "
                 "and a later close ends it)."),
    {NULL, NULL, 0, NULL},
};

PyTypeObject PermutationType =
    TQ_SMALL_TYPE("Permutation", PermutationObject, Permutation_init, Permutation_dealloc, Permutation_methods,
                  "Permutation(bit_generator, n): numpy.random.Generator(bit_generator).permutation(n) as int64, "
                  "made on a thread of its own in idle time, off the GIL; result() gives it.");
