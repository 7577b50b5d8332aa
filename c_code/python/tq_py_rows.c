/* tq_py_rows.c: an array dataset's sources as the engine's gather reads them
 * (tq_gather.h): each component's rows, with a layout where they are not
 * the slot's bytes as they stand (strided, Fortran-order, or of a dtype the
 * rule, c_code/engine/core/tq_scalar.h, casts safely into the component's), and
 * put_rows, which gathers batches of them without the GIL. */
#include "tq_py.h"

#include <string.h>

/* The axes of a row of arr (its axes after the first), with axes of one
 * element dropped and each axis merged into the one before it where the two
 * are one run: a C-contiguous row becomes one axis.  0, or -1 when the row
 * has more axes than the gather walks. */
static int row_axes(PyArrayObject *arr, tq_row_layout *layout)
{
    int m = 0;
    for (int d = 1; d < PyArray_NDIM(arr); d++) {
        npy_intp n = PyArray_DIM(arr, d), step = PyArray_STRIDE(arr, d);
        if (n == 1)
            continue;
        if (m && layout->strides[m - 1] == n * step) {
            layout->shape[m - 1] *= n;
            layout->strides[m - 1] = step;
            continue;
        }
        if (m == TQ_ROW_MAX_DIMS)
            return -1;
        layout->shape[m] = n;
        layout->strides[m++] = step;
    }
    layout->ndim = m;
    return 0;
}

static const char *name_of(RingObject *self, int c) { return PyUnicode_AsUTF8(PyTuple_GET_ITEM(self->names, c)); }

/* Component c's rows in src: an array whose shape is the component's but for
 * its leading axis (n rows), of the component's dtype or of one the rule lets
 * in (rule_array: cast on the way) and the gather converts; rows laid out
 * anyhow.  *layout is filled and rows->layout points to it where the rows are
 * not the slot's bytes as they stand.  0, or -1 with TypeError/ValueError
 * naming the component. */
static int source_rows(RingObject *self, const char *who, int c, PyObject *src, npy_intp n, tq_rows *rows,
                       tq_row_layout *layout)
{
    PyArrayObject *arr = (PyArrayObject *)src;
    PyArray_Descr *want = self->descrs[c];
    if (!PyArray_Check(src)) {
        PyErr_Format(PyExc_TypeError, "%s: queue '%U', component '%s': expected an array of dtype %S, got %R", who,
                     self->name, name_of(self, c), (PyObject *)want, src);
        return -1;
    }
    int same = PyArray_EquivTypes(PyArray_DESCR(arr), want);
    if (!same) {
        PyArrayObject *allowed = rule_array(self, c, src);
        if (!allowed)
            return -1;
        Py_DECREF(allowed);
    }
    int ndim = PyArray_NDIM(arr), fits = self->ndims[c] >= 1 && ndim == self->ndims[c] && PyArray_DIM(arr, 0) == n;
    for (int d = 1; fits && d < ndim; d++)
        fits = PyArray_DIM(arr, d) == self->shapes[c][d];
    if (!fits) {
        PyErr_Format(PyExc_ValueError,
                     "%s: queue '%U', component '%s': expected %zd rows shaped like the component without its batch "
                     "axis",
                     who, self->name, name_of(self, c), (Py_ssize_t)n);
        return -1;
    }
    int from = scalar_of(PyArray_DESCR(arr), 0), to = scalar_of(want, 0);
    rows->base = PyArray_DATA(arr);
    rows->stride = PyArray_STRIDE(arr, 0);
    rows->layout = NULL;
    int walk = row_axes(arr, layout) == 0 && from >= 0 && to >= 0 && tq_gather_converts(from, to);
    layout->from = (tq_scalar)from;
    layout->to = (tq_scalar)to;
    /* The fast path: each row one run of the slot's bytes. */
    if (same && (layout->ndim == 0 || (layout->ndim == 1 && layout->strides[0] == PyArray_ITEMSIZE(arr))))
        return 0;
    if (!walk) {
        PyErr_Format(PyExc_TypeError, "%s: queue '%U', component '%s': the engine's gather cannot read %S rows into %S",
                     who, self->name, name_of(self, c), (PyObject *)PyArray_DESCR(arr), (PyObject *)want);
        return -1;
    }
    rows->layout = layout;
    return 0;
}

/* Every source's rows (n of each, n from the first); -1 with an exception. */
static int all_sources(RingObject *self, const char *who, PyObject *seq, npy_intp *n, tq_rows *rows,
                       tq_row_layout *layouts)
{
    if (PySequence_Fast_GET_SIZE(seq) != self->n) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected %d sources, one per component, got %zd", who,
                     self->name, self->n, PySequence_Fast_GET_SIZE(seq));
        return -1;
    }
    PyObject *head = PySequence_Fast_GET_ITEM(seq, 0);
    *n = PyArray_Check(head) && PyArray_NDIM((PyArrayObject *)head) ? PyArray_DIM((PyArrayObject *)head, 0) : 0;
    for (int c = 0; c < self->n; c++)
        if (source_rows(self, who, c, PySequence_Fast_GET_ITEM(seq, c), *n, &rows[c], &layouts[c]))
            return -1;
    return 0;
}

typedef struct {
    const tq_rows *sources;
    const int64_t *indices;
    int64_t n_indices, batch, first;
} rows_job;

/* Gathers batch first + index of an array dataset into the slot and publishes it. */
static tq_code put_batch(tq_ring *ring, int slot, void *job, int64_t index, tq_error *err)
{
    rows_job *r = job;
    int64_t lo = (r->first + index) * r->batch, hi = lo + r->batch < r->n_indices ? lo + r->batch : r->n_indices;
    return tq_ring_put_rows(ring, slot, r->sources, r->indices + lo, hi - lo, err);
}

Py_ssize_t put_rows(RingObject *self, const char *who, PyObject *sources, PyObject *indices, int64_t batch,
                    int64_t first, int64_t count, const int *stop, int room)
{
    tq_rows rows[TQ_MAX_COMPONENTS];
    tq_row_layout layouts[TQ_MAX_COMPONENTS];
    npy_intp n;
    PyObject *seq = PySequence_Fast(sources, "sources must be a sequence of arrays, one per component");
    if (!seq)
        return -1;
    Py_ssize_t done = -1;
    PyArrayObject *idx = NULL;
    if (batch < 1 || first < 0 || count < 0) {
        PyErr_Format(PyExc_ValueError, "%s: queue '%U': expected batch >= 1, first and count >= 0", who, self->name);
        goto done;
    }
    if (all_sources(self, who, seq, &n, rows, layouts))
        goto done;
    idx = (PyArrayObject *)PyArray_FROMANY(indices, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY_RO);
    if (!idx)
        goto done;
    const int64_t *ix = PyArray_DATA(idx);
    int64_t n_idx = PyArray_DIM(idx, 0);
    /* Every index once, here: the gather itself trusts them. */
    for (int64_t i = 0; i < n_idx; i++)
        if (ix[i] < 0 || ix[i] >= n) {
            PyErr_Format(PyExc_IndexError, "%s: queue '%U': row index %lld is outside the sources' %zd rows", who,
                         self->name, (long long)ix[i], (Py_ssize_t)n);
            goto done;
        }
    /* Batches past the indices' end are not asked for. */
    int64_t available = (n_idx + batch - 1) / batch - first, put;
    int64_t wanted = count < available ? count : (available > 0 ? available : 0);
    rows_job job = {rows, ix, n_idx, batch, first};
    int rc = produce(self, room, -1.0, stop, who, put_batch, &job, wanted, &put);
    /* Stopped: say how many went in; anything else is an error. */
    if (rc == 0 || PyErr_ExceptionMatches(Stopped)) {
        PyErr_Clear();
        done = (Py_ssize_t)put;
    }
done:
    Py_XDECREF(idx);
    Py_DECREF(seq);
    return done;
}

PyObject *Ring_gather_paths(RingObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sources", NULL};
    PyObject *sources;
    tq_rows rows;
    tq_row_layout layout;
    if (ring_usable(self, "Feeder") || !PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &sources))
        return NULL;
    PyObject *seq = PySequence_Fast(sources, "sources must be a sequence of arrays, one per component");
    if (!seq)
        return NULL;
    PyObject *out = NULL;
    if (PySequence_Fast_GET_SIZE(seq) != self->n) {
        PyErr_Format(PyExc_ValueError, "Feeder: queue '%U': expected %d sources, one per component, got %zd",
                     self->name, self->n, PySequence_Fast_GET_SIZE(seq));
        goto done;
    }
    PyObject *head = PySequence_Fast_GET_ITEM(seq, 0);
    npy_intp n = PyArray_Check(head) && PyArray_NDIM((PyArrayObject *)head) ? PyArray_DIM((PyArrayObject *)head, 0) : 0;
    out = PyTuple_New(self->n);
    for (int c = 0; out && c < self->n; c++) {
        PyObject *path;
        if (source_rows(self, "Feeder", c, PySequence_Fast_GET_ITEM(seq, c), n, &rows, &layout) == 0)
            path = PyUnicode_FromString(rows.layout ? "elements" : "rows");
        else if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError))
            PyErr_Clear(), path = Py_NewRef(Py_None);
        else
            path = NULL;
        if (!path)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, c, path);
    }
done:
    Py_DECREF(seq);
    return out;
}
