#section support_code
#line 3 "thread_guard.c"
/*
 * The Dequeues' guard against a compiled function called from two threads:
 * a Theano function keeps its values in one storage of its own, so two
 * threads calling it at once would lose elements.  One guard per node (a
 * struct member).  A call from a second thread is warned about once; a call
 * that comes while another thread's call waits for its element is refused
 * with a QueueError before it takes anything, so no element is lost.
 *
 * Guarded: a function with several Dequeues puts this section in once per Op.
 */
#ifndef TQ_THREAD_GUARD
#define TQ_THREAD_GUARD

typedef struct {
    unsigned long caller; /* the thread of the last call; 0 before the first */
    int waiting;          /* a call waits for its element */
    int warned;           /* a second thread was warned about */
} tq_thread_guard;

/* Before the node's call: 0, or -1 with an exception (`refused` as a
 * QueueError, or the warning `warned` turned into an error). */
static int tq_guard_enter(tq_thread_guard *guard, const char *refused, const char *warned)
{
    const unsigned long me = PyThread_get_thread_ident();
    if (guard->waiting) {
        PyObject *errors = PyImport_ImportModule("theano_queue.core.errors");
        PyObject *error = errors ? PyObject_GetAttrString(errors, "QueueError") : NULL;
        if (error)
            PyErr_SetString(error, refused);
        Py_XDECREF(error);
        Py_XDECREF(errors);
        return -1;
    }
    if (guard->caller != 0 && guard->caller != me && !guard->warned) {
        guard->warned = 1;
        if (PyErr_WarnEx(PyExc_RuntimeWarning, warned, 1) < 0)
            return -1;
    }
    guard->caller = me;
    guard->waiting = 1;
    return 0;
}

/* After the node's call, whatever it returned. */
static void tq_guard_leave(tq_thread_guard *guard) { guard->waiting = 0; }

#endif /* TQ_THREAD_GUARD */
