/* tq_py_module.c: the module theano_queue._engine, assembled: the types
 * (tq_py_ring.c, tq_py_stop.c, tq_py_shuffle.c, tq_py_element.c,
 * tq_py_device.c), the functions
 * (tq_py_functions.c), the Ops' table (tq_py_capi.c) and the exceptions
 * (tq_py_errors.c).  Nothing calls into this file. */
#define TQ_PY_MODULE /* the file that imports numpy's C API */
#include "tq_py.h"

/* ---- the module ----------------------------------------------------------------------- */

/* A tuple of the n names name_of(0) .. name_of(n - 1): a new reference, or NULL with an exception. */
static PyObject *names(int n, const char *(*name_of)(int))
{
    PyObject *all = PyTuple_New(n);
    for (int k = 0; all && k < n; k++) {
        PyObject *name = PyUnicode_FromString(name_of(k));
        if (!name)
            Py_CLEAR(all);
        else
            PyTuple_SET_ITEM(all, k, name);
    }
    return all;
}

static const char *event_name(int k) { return tq_event_name((tq_event)k); }
static const char *mechanism_name(int k) { return tq_gather_mechanism_name((tq_gather_mechanism)k); }

/* TRACE_EVENTS: the names of a trace's event kinds, in the order of its times. */
static PyObject *trace_events(void) { return names(TQ_EV_COUNT, event_name); }

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT,
    "theano_queue._engine",
    "The queue engine (c_code/engine/core/tq_ring.c) and its Python face.",
    -1,
    engine_functions,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The gather's mechanism names in tq_gather_mechanism's order (GATHER_MECHANISMS), the held one
 * (GATHER_HELD), and the row size from which the GPU copies rows itself (GATHER_DEVICE_MIN_ROW): the
 * engine's, which Python reads rather than keeps a copy of.  0, or -1 with an exception. */
static int add_gather_names(PyObject *m)
{
    PyObject *mechanisms = names(TQ_GATHER_MECHANISMS, mechanism_name);
    if (!mechanisms || PyModule_AddObject(m, "GATHER_MECHANISMS", mechanisms) < 0) {
        Py_XDECREF(mechanisms);
        return -1;
    }
    if (PyModule_AddStringConstant(m, "GATHER_HELD", tq_gather_mechanism_name(TQ_GATHER_DEVICE)) < 0)
        return -1;
    PyObject *bytes = PyLong_FromSize_t(TQ_GATHER_DEVICE_MIN_ROW);
    if (!bytes || PyModule_AddObject(m, "GATHER_DEVICE_MIN_ROW", bytes) < 0) {
        Py_XDECREF(bytes);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__engine(void)
{
    import_array();
    if (count_forks()) {
        PyErr_SetString(PyExc_ImportError, "theano_queue._engine: pthread_atfork failed");
        return NULL;
    }
    if (import_errors() || PyType_Ready(&RingType) < 0 || PyType_Ready(&StopType) < 0 ||
        PyType_Ready(&PermutationType) < 0 || PyType_Ready(&LeaseType) < 0 || PyType_Ready(&DLPackOwnerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    PyObject *api = capi_capsule();
    if (PyModule_AddType(m, &RingType) < 0 || PyModule_AddType(m, &StopType) < 0 ||
        PyModule_AddType(m, &PermutationType) < 0 || !api || PyModule_AddObject(m, "_C_API", api) < 0 ||
        PyModule_AddIntConstant(m, "MAX_COMPONENTS", TQ_MAX_COMPONENTS) ||
        PyModule_AddIntConstant(m, "MAX_CAPACITY", TQ_MAX_CAPACITY) ||
        PyModule_AddIntConstant(m, "SLOT_ALIGN", TQ_ALIGN)) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *events = trace_events();
    if (!events || PyModule_AddObject(m, "TRACE_EVENTS", events) < 0) {
        Py_XDECREF(events);
        Py_DECREF(m);
        return NULL;
    }
    if (add_gather_names(m)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
