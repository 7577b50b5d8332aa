/* tq_py_schema.c: the one rule's CPython face (the rule itself: c_code/engine/core/tq_scalar.h).  numpy dtypes as
 * the engine's types; what Python's schema asks (casts_safely, values_fit, has_nan, check_array); the array
 * rule of the engine's own put, which calls no Python to decide; and an element's rows, which agree on the
 * leading (batch) axis.  Every refusal is worded by theano_queue/core/schema.py's WORDING (read at the first
 * refusal): one wording, whichever entry the value came through. */
#include "tq_py.h"

#include <math.h>
#include <string.h>

/* ---- dtypes ------------------------------------------------------------------------- */

int scalar_of(PyArray_Descr *d, int any_order)
{
    if ((!any_order && !PyArray_ISNBO(d->byteorder)) || PyDataType_HASFIELDS(d) || PyDataType_HASSUBARRAY(d))
        return -1;
    size_t size = (size_t)PyDataType_ELSIZE(d);
    if (d->type_num == NPY_BOOL)
        return TQ_BOOL;
    if (PyTypeNum_ISINTEGER(d->type_num)) {
        int sign = PyTypeNum_ISSIGNED(d->type_num);
        switch (size) {
        case 1: return sign ? TQ_INT8 : TQ_UINT8;
        case 2: return sign ? TQ_INT16 : TQ_UINT16;
        case 4: return sign ? TQ_INT32 : TQ_UINT32;
        case 8: return sign ? TQ_INT64 : TQ_UINT64;
        default: return -1;
        }
    }
    switch (d->type_num) {
    case NPY_HALF: return TQ_FLOAT16;
    case NPY_FLOAT: return size == 4 ? TQ_FLOAT32 : -1;
    case NPY_DOUBLE: return size == 8 ? TQ_FLOAT64 : -1;
    case NPY_CFLOAT: return size == 8 ? TQ_COMPLEX64 : -1;
    case NPY_CDOUBLE: return size == 16 ? TQ_COMPLEX128 : -1;
    default: return -1;
    }
}

static int is_integer(int type) { return type >= TQ_BOOL && type <= TQ_UINT64; }
static int is_complex(int type) { return type == TQ_COMPLEX64 || type == TQ_COMPLEX128; }

/* ---- wording: theano_queue/core/schema.py's ------------------------------------------------ */

/* WORDING[key] % args (args stolen), or NULL with an exception. */
static PyObject *worded(const char *key, PyObject *args)
{
    static PyObject *wording; /* schema.WORDING, kept for the process's life */
    PyObject *text = NULL;
    if (!args)
        return NULL;
    if (!wording) {
        PyObject *schema = PyImport_ImportModule("theano_queue.core.schema");
        wording = schema ? PyObject_GetAttrString(schema, "WORDING") : NULL;
        Py_XDECREF(schema);
    }
    PyObject *template = wording ? PyDict_GetItemString(wording, key) : NULL;
    if (template)
        text = PyUnicode_Format(template, args);
    else if (wording)
        PyErr_Format(PyExc_KeyError, "theano_queue.core.schema.WORDING has no %s", key);
    Py_DECREF(args);
    return text;
}

/* Raises type(WORDING[key] % args); -1. */
static int refuse(PyObject *type, const char *key, PyObject *args)
{
    PyObject *text = worded(key, args);
    if (text) {
        PyErr_SetObject(type, text);
        Py_DECREF(text);
    }
    return -1;
}

/* "Queue 'q', component 'c'". */
static PyObject *where(PyObject *queue, PyObject *component)
{
    return worded("where", Py_BuildValue("(OO)", queue, component));
}

/* ---- reading elements ------------------------------------------------------------------ */

/* Calls visit(element, type, context) for each element of arr until it returns nonzero (its value is
 * returned) or `limit` elements were seen (0).  -1 with an exception. */
typedef int (*visit_fn)(const char *element, int type, void *context);

static int each_element(PyArrayObject *arr, int type, npy_intp limit, visit_fn visit, void *context)
{
    if (PyArray_SIZE(arr) == 0)
        return 0;
    NpyIter *iter = NpyIter_New(arr, NPY_ITER_READONLY | NPY_ITER_EXTERNAL_LOOP | NPY_ITER_REFS_OK, NPY_KEEPORDER,
                                NPY_NO_CASTING, NULL);
    if (!iter)
        return -1;
    NpyIter_IterNextFunc *next = NpyIter_GetIterNext(iter, NULL);
    if (!next) {
        NpyIter_Deallocate(iter);
        return -1;
    }
    char **data = NpyIter_GetDataPtrArray(iter);
    npy_intp *step = NpyIter_GetInnerStrideArray(iter), *size = NpyIter_GetInnerLoopSizePtr(iter), seen = 0;
    int result = 0;
    do {
        const char *p = data[0];
        for (npy_intp i = 0; i < *size && !result; i++, p += step[0])
            result = visit(p, type, context);
        seen += *size;
    } while (!result && seen < limit && next(iter));
    NpyIter_Deallocate(iter);
    return result;
}

/* The magnitude of a signed integer, INT64_MIN's included. */
static uint64_t magnitude_of(int64_t s) { return s < 0 ? (uint64_t)(-(s + 1)) + 1u : (uint64_t)s; }

/* Reads an element of T at p (memcpy: an array's elements need not be aligned). */
#define READ(T, p) (memcpy(&v_##T, (p), sizeof(T)), v_##T)

/* An integer element (bool included) as its magnitude and sign. */
static void integer_of(const char *p, int type, uint64_t *magnitude, int *negative)
{
    int8_t v_int8_t;
    int16_t v_int16_t;
    int32_t v_int32_t;
    int64_t v_int64_t, s = 0;
    uint8_t v_uint8_t;
    uint16_t v_uint16_t;
    uint32_t v_uint32_t;
    uint64_t v_uint64_t, u = 0;
    switch (type) {
    case TQ_BOOL: u = READ(uint8_t, p) != 0; break;
    case TQ_INT8: s = READ(int8_t, p); break;
    case TQ_UINT8: u = READ(uint8_t, p); break;
    case TQ_INT16: s = READ(int16_t, p); break;
    case TQ_UINT16: u = READ(uint16_t, p); break;
    case TQ_INT32: s = READ(int32_t, p); break;
    case TQ_UINT32: u = READ(uint32_t, p); break;
    case TQ_INT64: s = READ(int64_t, p); break;
    default: u = READ(uint64_t, p); break;
    }
    *negative = s < 0;
    *magnitude = s ? magnitude_of(s) : u;
}

/* A float element (the real part of a complex one) as a double. */
static double float_of(const char *p, int type)
{
    uint16_t v_uint16_t;
    float v_float;
    double v_double;
    switch (type) {
    case TQ_FLOAT16: return tq_half_to_float(READ(uint16_t, p));
    case TQ_FLOAT32:
    case TQ_COMPLEX64: return READ(float, p);
    default: return READ(double, p);
    }
}

static int visit_nan(const char *p, int type, void *unused)
{
    (void)unused;
    if (is_complex(type))
        return isnan(float_of(p, type)) ||
               isnan(float_of(p + (type == TQ_COMPLEX64 ? sizeof(float) : sizeof(double)), type));
    return isnan(float_of(p, type));
}

/* Elements scanned for a NaN at most: a refusal of a larger array (an array dataset's labels in a memmap)
 * reads no more than this to choose its wording. */
#define NAN_SCAN_MAX ((npy_intp)1 << 26)

/* 1 when arr holds a NaN (among its first NAN_SCAN_MAX elements), 0 when not or it holds no floats, -1. */
static int holds_nan(PyArrayObject *arr)
{
    int type = scalar_of(PyArray_DESCR(arr), 0);
    if (type < TQ_FLOAT16 || type > TQ_COMPLEX128)
        return 0;
    return each_element(arr, type, NAN_SCAN_MAX, visit_nan, NULL);
}

/* Whether an element does NOT keep its value as a `to`: the visit of values_fit. */
static int visit_misfit(const char *p, int type, void *context)
{
    tq_scalar to = *(const tq_scalar *)context;
    if (is_integer(type)) {
        uint64_t magnitude;
        int negative;
        integer_of(p, type, &magnitude, &negative);
        return !tq_integer_fits(magnitude, negative, to);
    }
    if (!(to >= TQ_FLOAT16 && (!is_complex(type) || is_complex(to))))
        return 1; /* no float becomes an integer (numpy's value-based rule), no complex a float */
    size_t part = type == TQ_COMPLEX64 ? sizeof(float) : sizeof(double);
    for (int k = 0; k < (is_complex(type) ? 2 : 1); k++) {
        double v = float_of(p + (size_t)k * part, type);
        if (isfinite(v) && !tq_float_stays_finite(v, to))
            return 1;
    }
    return 0;
}

/* A Python int beyond 64 bits, or any item, in an object array: 1 when it does not keep its value as a `to`. */
static int object_misfits(PyObject *item, tq_scalar to)
{
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "values_fit: expected Python ints in an object array, got %R", item);
        return -1;
    }
    int overflow;
    long long s = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (!overflow)
        return !tq_integer_fits(magnitude_of(s), s < 0, to);
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(item);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
            return !tq_integer_fits(u, 0, to);
        PyErr_Clear();
    }
    if (to < TQ_FLOAT16) /* past 64 bits: no integer type holds it */
        return 1;
    double d = PyLong_AsDouble(item);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 1;
    }
    if (!tq_float_stays_finite(d, to) || ((to == TQ_FLOAT32 || to == TQ_COMPLEX64) && (double)(float)d != d))
        return 1;
    PyObject *back = PyFloat_FromDouble(d);
    int same = back ? PyObject_RichCompareBool(back, item, Py_EQ) : -1; /* exact: Python compares int and float */
    Py_XDECREF(back);
    return same < 0 ? -1 : !same;
}

/* ---- the module's functions (Python's schema asks these) -------------------------------------- */

static int descr_arg(PyObject *obj, PyArray_Descr **out) { return PyArray_DescrConverter(obj, out); }

PyObject *schema_casts_safely(PyObject *module, PyObject *args)
{
    (void)module;
    PyArray_Descr *from = NULL, *to = NULL;
    if (!PyArg_ParseTuple(args, "O&O&:casts_safely", descr_arg, &from, descr_arg, &to)) {
        Py_XDECREF(from);
        return NULL;
    }
    int a = scalar_of(from, 1), b = scalar_of(to, 1);
    int safe = a >= 0 && b >= 0 && tq_casts_safely((tq_scalar)a, (tq_scalar)b);
    Py_DECREF(from);
    Py_DECREF(to);
    return PyBool_FromLong(safe);
}

PyObject *schema_values_fit(PyObject *module, PyObject *args)
{
    (void)module;
    PyArrayObject *values;
    PyArray_Descr *want = NULL;
    if (!PyArg_ParseTuple(args, "O!O&:values_fit", &PyArray_Type, &values, descr_arg, &want))
        return NULL;
    int to = scalar_of(want, 1);
    if (to < 0)
        PyErr_Format(PyExc_TypeError, "values_fit: no component has dtype %R", (PyObject *)want);
    Py_DECREF(want);
    if (to < 0)
        return NULL;
    tq_scalar target = (tq_scalar)to;
    int misfit = 0;
    if (PyArray_TYPE(values) == NPY_OBJECT) {
        PyObject *flat = PyArray_Ravel(values, NPY_CORDER);
        PyObject *list = flat ? PySequence_List(flat) : NULL;
        Py_XDECREF(flat);
        if (!list)
            return NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list) && !misfit; i++)
            misfit = object_misfits(PyList_GET_ITEM(list, i), target);
        Py_DECREF(list);
    } else {
        int type = scalar_of(PyArray_DESCR(values), 0);
        if (type < 0)
            return PyErr_Format(PyExc_TypeError, "values_fit: expected numbers, got %R",
                                (PyObject *)PyArray_DESCR(values)),
                   NULL;
        misfit = each_element(values, type, NPY_MAX_INTP, visit_misfit, &target);
    }
    return misfit < 0 ? NULL : PyBool_FromLong(!misfit);
}

PyObject *schema_has_nan(PyObject *module, PyObject *array)
{
    (void)module;
    if (!PyArray_Check(array))
        return PyErr_Format(PyExc_TypeError, "has_nan: expected a numpy array, got %R", array), NULL;
    int found = holds_nan((PyArrayObject *)array);
    return found < 0 ? NULL : PyBool_FromLong(found);
}

/* ---- the array rule -------------------------------------------------------------------- */

/* 0 when an array of arr's dtype goes into a component of dtype `want` (its own, or one that casts safely),
 * else -1 with TypeError worded by WORDING: "nan" for floats holding NaN into an integer, else "unsafe". */
static int array_rule(PyArrayObject *arr, PyArray_Descr *want, PyObject *queue, PyObject *component)
{
    PyArray_Descr *have = PyArray_DESCR(arr);
    if (PyArray_EquivTypes(have, want))
        return 0;
    int from = scalar_of(have, 1), to = scalar_of(want, 1);
    if (from >= 0 && to >= 0 && tq_casts_safely((tq_scalar)from, (tq_scalar)to))
        return 0;
    int nan = to >= 0 && is_integer(to) ? holds_nan(arr) : 0;
    if (nan < 0)
        return -1;
    PyObject *at = where(queue, component);
    if (!at)
        return -1;
    if (nan)
        return refuse(PyExc_TypeError, "nan", Py_BuildValue("(NOOO)", at, want, have, have));
    return refuse(PyExc_TypeError, "unsafe", Py_BuildValue("(NOOOO)", at, want, have, want, have));
}

PyObject *schema_check_array(PyObject *module, PyObject *args)
{
    (void)module;
    PyArrayObject *arr;
    PyArray_Descr *want = NULL;
    PyObject *queue, *component;
    if (!PyArg_ParseTuple(args, "O!O&UU:check_array", &PyArray_Type, &arr, descr_arg, &want, &queue, &component))
        return NULL;
    int rc = array_rule(arr, want, queue, component);
    Py_DECREF(want);
    if (rc)
        return NULL;
    Py_RETURN_NONE;
}

PyArrayObject *rule_array(RingObject *self, int c, PyObject *obj)
{
    PyArrayObject *arr;
    if (PyArray_Check(obj))
        arr = (PyArrayObject *)Py_NewRef(obj);
    else if (PyArray_IsScalar(obj, Generic))
        arr = (PyArrayObject *)PyArray_FromScalar(obj, NULL);
    else
        return PyErr_Format(PyExc_TypeError, "Queue '%U', component '%U': expected an array of dtype %S, got %R",
                            self->name, PyTuple_GET_ITEM(self->names, c), (PyObject *)self->descrs[c], obj),
               NULL;
    if (arr && array_rule(arr, self->descrs[c], self->name, PyTuple_GET_ITEM(self->names, c))) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* ---- an element's rows ------------------------------------------------------------------- */

PyObject *default_batch(RingObject *self)
{
    PyObject *batch = PyTuple_New(self->n);
    for (int c = 0; batch && c < self->n; c++)
        PyTuple_SET_ITEM(batch, c, Py_NewRef(self->ndims[c] ? PyTuple_GET_ITEM(self->names, c) : Py_None));
    return batch;
}

int set_batch(RingObject *self, PyObject *batch)
{
    int good = batch && PyTuple_Check(batch) && PyTuple_GET_SIZE(batch) == self->n;
    for (int c = 0; good && c < self->n; c++) {
        PyObject *name = PyTuple_GET_ITEM(batch, c);
        good = name == Py_None || (PyUnicode_Check(name) && self->ndims[c]);
    }
    if (!good) {
        PyErr_Format(PyExc_TypeError,
                     "Ring.batch: expected a tuple of %d, each a component's name (its rows are the batch's) or "
                     "None (its leading axis is its own), got %R",
                     self->n, batch);
        return -1;
    }
    Py_XSETREF(self->batch, Py_NewRef(batch));
    return 0;
}

int check_rows(RingObject *self, const char *op, const int64_t *rows)
{
    int first = -1;
    for (int c = 0; c < self->n; c++) {
        PyObject *name = PyTuple_GET_ITEM(self->batch, c);
        if (name == Py_None)
            continue;
        if (first < 0)
            first = c;
        else if (rows[c] != rows[first])
            return refuse(PyExc_ValueError, "rows",
                          Py_BuildValue("(NOOLOL)", op ? PyUnicode_FromFormat("%s: ", op) : PyUnicode_New(0, 0),
                                        self->name, PyTuple_GET_ITEM(self->batch, first), (long long)rows[first], name,
                                        (long long)rows[c]));
    }
    return 0;
}
