/* tq_py_writer.c: the Ring's in-place writing (Queue.writer): a producer
 * reserves a slot, fills numpy views over its staging, and commits it or gives
 * it up. */
#include "tq_py.h"

/* Commit and abort take only a slot that a producer reserved and has not yet
 * committed: any other would hand a slot that readers may hold to producers. */
static int check_reserved(RingObject *self, const char *who, int slot)
{
    if (!tq_ring_is_reserved_for_writing(self->ring, slot)) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': slot %d is not reserved for writing", who, self->name, slot);
        return -1;
    }
    return 0;
}

/* Writable arrays of full shape over a reserved slot's staging. */
static PyObject *slot_views(RingObject *self, int slot)
{
    PyObject *views = PyTuple_New(self->n);
    for (int c = 0; views && c < self->n; c++) {
        Py_INCREF(self->descrs[c]);
        PyObject *view = PyArray_NewFromDescr(&PyArray_Type, self->descrs[c], self->ndims[c], self->shapes[c], NULL,
                                              tq_ring_write_ptr(self->ring, slot, c), NPY_ARRAY_CARRAY, NULL);
        if (!view || (Py_INCREF(self), PyArray_SetBaseObject((PyArrayObject *)view, (PyObject *)self) < 0)) {
            Py_XDECREF(view);
            Py_CLEAR(views);
            break;
        }
        PyTuple_SET_ITEM(views, c, view);
    }
    return views;
}

/* reserve(timeout) -> (slot, views): writable arrays of full shape over the
 * slot's (pinned, for a GPU queue) staging, to be filled and committed. */
PyObject *Ring_reserve(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", "stop", NULL};
    PyObject *timeout = Py_None, *stop = Py_None;
    const int *flag;
    double t;
    int slot;
    tq_error err;
    tq_code code;
    if (ring_usable(self, "Queue.writer") || !PyArg_ParseTupleAndKeywords(args, kwds, "|OO", kwlist, &timeout, &stop) ||
        parse_timeout(timeout, self->timeout, &t, "Queue.writer", self->name) ||
        stop_flag(self, "Queue.writer", stop, &flag))
        return NULL;
    if (wait_for_slot(self, 1, t, flag, "Queue.writer", &slot))
        return NULL;
    Py_BEGIN_ALLOW_THREADS /* a device backend waits here until the slot's staging is free */
    code = tq_ring_begin_host_write(self->ring, slot, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("Queue.writer", self, &err), NULL;
    PyObject *views = slot_views(self, slot);
    if (!views) {
        tq_ring_abort_put(self->ring, slot);
        return NULL;
    }
    return Py_BuildValue("(iN)", slot, views);
}

/* commit(slot, rows) -> size: publish a slot written in place; rows per component. */
PyObject *Ring_commit(RingObject *self, PyObject *args)
{
    int slot;
    PyObject *rows_obj;
    int64_t rows[TQ_MAX_COMPONENTS];
    tq_error err;
    tq_code code;
    if (ring_usable(self, "Queue.writer") || !PyArg_ParseTuple(args, "iO", &slot, &rows_obj) ||
        check_reserved(self, "Queue.writer", slot))
        return NULL;
    PyObject *seq = PySequence_Fast(rows_obj, "rows must be a sequence, one count per component");
    if (!seq)
        return NULL;
    int bad = PySequence_Fast_GET_SIZE(seq) != self->n;
    for (int c = 0; !bad && c < self->n; c++) {
        rows[c] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, c));
        int64_t max = self->ndims[c] ? self->shapes[c][0] : 1;
        bad = (rows[c] == -1 && PyErr_Occurred()) || rows[c] < 0 || rows[c] > max;
    }
    Py_DECREF(seq);
    if (bad) {
        PyErr_Clear();
        tq_ring_abort_put(self->ring, slot);
        PyErr_Format(PyExc_ValueError,
                     "Queue.writer: queue '%U': rows %R do not fit the components; the element was dropped", self->name,
                     rows_obj);
        return NULL;
    }
    if (check_rows(self, NULL, rows)) { /* the batch's components of a slot written in place agree too */
        tq_ring_abort_put(self->ring, slot);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    code = tq_ring_commit_put(self->ring, slot, rows, &err);
    Py_END_ALLOW_THREADS
    if (code != TQ_OK)
        return raise_error("Queue.writer", self, &err), NULL;
    return PyLong_FromLong(tq_ring_size(self->ring));
}

PyObject *Ring_abort(RingObject *self, PyObject *args)
{
    int slot;
    if (ring_usable(self, "Queue.writer") || !PyArg_ParseTuple(args, "i", &slot) ||
        check_reserved(self, "Queue.writer", slot))
        return NULL;
    tq_ring_abort_put(self->ring, slot);
    Py_RETURN_NONE;
}
