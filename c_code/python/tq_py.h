/*
 * tq_py.h: what the files of the engine's CPython face (theano_queue._engine)
 * share.  Not part of the engine: the engine (tq_ring.h) knows nothing of
 * Python.
 *
 * Each file calls only the files listed below it (arrows point one way):
 *
 *   tq_py_module.c    the module, assembled: its init only
 *   tq_py_functions.c the module's functions that belong to no type
 *   tq_py_capi.c      the table of functions for the Ops (tq_capi.h)
 *   tq_py_ring.c      the Ring type: life, put and get, state, the timeline
 *   tq_py_writer.c    the Ring's in-place writing (reserve, commit, abort)
 *   tq_py_memory.c    the Ring's page-locking, device gather, shared staging
 *   tq_py_stop.c      the Stop type
 *   tq_py_shuffle.c   the Permutation type: an epoch's order made in idle time, off the GIL
 *   tq_py_device.c    device arrays: checked puts, device gets, DLPack
 *   tq_py_rows.c      array datasets' rows: put_rows, each source's layout and cast
 *   tq_py_given.c     elements their producer gave up, copied later by the ring's putter
 *   tq_py_element.c   the waits, element checks, put and get, lending
 *   tq_py_schema.c    the one rule's face: dtypes as the engine's types, the array rule, an element's rows
 *   tq_py_gpuarray.c  the bridges to libgpuarray (pygpu's contexts)
 *   tq_py_errors.c    the exceptions, the one error mapping, ring_usable
 */
#ifndef TQ_PY_H
#define TQ_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
/* numpy's C API table is one symbol shared by the face's files; only
 * tq_py_module.c fills it (import_array). */
#define PY_ARRAY_UNIQUE_SYMBOL tq_py_numpy_api
#ifndef TQ_PY_MODULE
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
/* numpy 2 hides the descriptor's fields behind accessors (the PyTensor venv
 * builds against it); numpy 1.x has none. */
#if NPY_ABI_VERSION < 0x02000000
#define PyDataType_ELSIZE(descr) ((descr)->elsize)
#endif

#include <sys/types.h>

#include "tq_ring.h"

typedef struct {
    PyObject_HEAD
    tq_ring *ring;
    pid_t pid;              /* the process that made it, for messages */
    unsigned long forks;    /* fork_count when it was made */
    PyObject *name;         /* str, for messages */
    int n;                  /* components */
    PyObject *names;        /* tuple of str */
    PyArray_Descr **descrs; /* n */
    int *ndims;             /* n */
    npy_intp (*shapes)[NPY_MAXDIMS];
    double timeout;     /* default for gets, < 0 for none */
    PyObject *failure;  /* the exception handed to fail(), or NULL */
    PyObject *on_stall; /* called with the seconds a consumer has waited, or NULL */
    PyObject *batch;    /* per component, the name its rows are called by where they are the batch's, else None */
    PyObject *weakrefs;
    /* The GIL between a producer's thread and the consumer's (tq_py_element.c): how long producers waited
     * to take it back after their puts (with the GIL held), how many took it back, and how many wait now
     * (atomic: the consumer reads it without the GIL to hand the GIL over). */
    double gil_wait_s;
    unsigned long long gil_takes;
    int gil_wanted;
    /* How often a producer got to run Python (took the GIL back, or entered put_given), and whether one is
     * back in its source after a put_given (atomic: a consumer handing the GIL over reads them without it). */
    unsigned long long producer_runs;
    int producer_in_source;
    unsigned long long hand_overs[2]; /* the consumer's hand-overs: [0] in vain (the producer did not run), [1] taken */
    /* Elements given to put_given that the ring's putter copies later (tq_py_given.c): the checked arrays of
     * each are held here, oldest first, until the putter is past its ticket.  NULL until the first. */
    struct given_element *given;
    int given_first, given_count;
} RingObject;

extern PyTypeObject RingType, StopType, PermutationType, LeaseType, DLPackOwnerType;
/* A method table's entry for a method that takes keywords: CPython calls it as a PyCFunctionWithKeywords, and
 * the cast through void (*)(void) tells the compiler that the change of the function's type is meant. */
#define TQ_KW_METHOD(name, fn, doc)                                                \
    {                                                                              \
        name, (PyCFunction)(void (*)(void))(fn), METH_VARARGS | METH_KEYWORDS, doc \
    }
/* The type of objects that only hold something and let it go when freed (Lease, DLPackOwner). */
#define TQ_HOLDER_TYPE(name, object, dealloc, doc)                                                             \
    {                                                                                                          \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "theano_queue._engine." name, .tp_basicsize = sizeof(object), \
                                    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_dealloc = (destructor)(dealloc),       \
                                    .tp_doc = (doc),                                                           \
    }
/* The type of small objects that Python makes with a constructor (Stop, Permutation). */
#define TQ_SMALL_TYPE(name, object, init, dealloc, methods, doc)                                               \
    {                                                                                                          \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "theano_queue._engine." name, .tp_basicsize = sizeof(object), \
                                    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew,               \
                                    .tp_init = (initproc)(init), .tp_dealloc = (destructor)(dealloc),          \
                                    .tp_methods = (methods), .tp_doc = (doc),                                  \
    }
/* How many fork()s led from the process that loaded the module to this one:
 * a Ring made under another count was made in another process.  Cheaper to
 * check on every call than getpid(), which is a system call. */
extern unsigned long fork_count;
extern PyObject *QueueError, *QueueClosed, *QueueTimeout, *FeederError, *CudaError, *Stopped;

/* ---- tq_py_errors.c ---- */
/* Imports the exceptions from theano_queue.core.errors; 0, or -1 with an exception. */
int import_errors(void);
/* Counts fork()s into fork_count from now on; 0, or -1. */
int count_forks(void);
/* Sets the Python exception that err means, its message prefixed by `who`
 * and the queue's name (ring may be NULL; who NULL: the queue's own
 * creation).  Returns -1. */
int raise_error(const char *who, RingObject *ring, const tq_error *err);
/* 0 when the Ring can be used here (made, and in this process), else -1
 * with an exception naming who. */
int ring_usable(RingObject *self, const char *who);

/* ---- tq_py_gpuarray.c ---- */
/* The CUcontext of a libgpuarray context given as its address (pygpu's
 * GpuContext.ptr). */
tq_code cu_context_of(PyObject *gpu_context, void **cu_context, tq_error *err);
/* Module function gpu_context_stream. */
PyObject *gpu_context_stream(PyObject *module, PyObject *arg);

/* ---- tq_py_rows.c ---- */
/* Puts batches first .. first+count-1 of an array dataset: batch b is the
 * rows indices[b*batch : (b+1)*batch] (fewer for the last) of sources, one
 * array per component, each of the component's dtype or of one the rule
 * casts safely into it (cast on the way).  Waits for slots without limit; a
 * raised stop ends it.  The number of batches put (fewer than count when
 * stopped or the indices ran out), or -1 with an exception. */
Py_ssize_t put_rows(RingObject *self, const char *who, PyObject *sources, PyObject *indices, int64_t batch,
                    int64_t first, int64_t count, const int *stop, int room);
/* Ring.gather_paths(sources): per component, how put_rows would
 * read it ("rows", "elements") or None where it cannot. */
PyObject *Ring_gather_paths(RingObject *self, PyObject *args, PyObject *kwds);

/* ---- tq_py_schema.c ---- */
/* The engine's type of a numpy dtype (tq_scalar.h), or -1 for none; any_order: either byte order. */
int scalar_of(PyArray_Descr *d, int any_order);
/* Component c's value as an array the rule (tq_scalar.h) lets into it: a new reference to obj (or to the
 * array of a numpy scalar) when its dtype is c's own or casts safely to it; NULL with TypeError worded by
 * theano_queue/core/schema.py's WORDING otherwise (obj no array: refused).  Nothing is cast here. */
PyArrayObject *rule_array(RingObject *self, int c, PyObject *obj);
/* The batch names of a new ring: every component with an axis, under its own name. */
PyObject *default_batch(RingObject *self);
/* Ring.batch = batch (checked); 0, or -1 with TypeError. */
int set_batch(RingObject *self, PyObject *batch);
/* 0 when the rows of every batch component (self->batch) are one number, else -1 with ValueError naming
 * two components and their rows, prefixed "op: " for an Op (op NULL: none). */
int check_rows(RingObject *self, const char *op, const int64_t *rows);
/* The module's functions of the rule, for Python's schema. */
PyObject *schema_casts_safely(PyObject *module, PyObject *args);
PyObject *schema_values_fit(PyObject *module, PyObject *args);
PyObject *schema_has_nan(PyObject *module, PyObject *array);
PyObject *schema_check_array(PyObject *module, PyObject *args);

/* ---- tq_py_given.c ---- */
/* Puts box's one element (box: a list of one) and empties box; when nothing else can reach the
 * element's arrays the ring's putter copies them after this returns.  The queue's size after it, or -1
 * with an exception (the element then stays in box; a failure of an earlier given put is raised here). */
Py_ssize_t put_given(RingObject *self, PyObject *box, double timeout_s, const int *stop);
/* Waits (timeout_s < 0: no limit) until every given element is in the ring, lets go of them, and the
 * producer has left its source; 0, or -1 with the first of their failures not yet raised. */
int flush_given(RingObject *self, double timeout_s);
/* Lets go of every element held for the putter (after tq_ring_destroy stopped it), of a ring of capacity. */
void release_given(RingObject *self, int capacity);

/* ---- tq_py_element.c ---- */
/* Seconds a consumer's wait lasts before its Ring's on_stall hook is called
 * (once per wait; < 0: never); returns the setting it replaces. */
double set_stall_after(double seconds);
/* Whether a consumer hands the GIL to a producer waiting for it; returns the previous setting. */
int set_gil_hand_over(int on);
/* Seconds a wait may last, < 0 for no limit, from a Python timeout (None:
 * `fallback`); 0, or -1 with an exception. */
int parse_timeout(PyObject *obj, double fallback, double *out, const char *who, PyObject *name);
/* Reserves a slot for a producer or a consumer, waiting up to timeout_s
 * seconds (< 0: no limit) with the GIL released, and waking for Ctrl-C.
 * 0, or -1 with an exception.  stop: NULL or a Stop's flag. */
int wait_for_slot(RingObject *self, int producer, double timeout_s, const int *stop, const char *who, int *slot);
/* What a producer does with each slot it reserved, without the GIL: write
 * it and publish it (the engine's put calls).  `index` counts the slots of
 * one wait from 0. */
typedef tq_code (*fill_fn)(tq_ring *ring, int slot, void *job, int64_t index, tq_error *err);
/* Reserves and fills `count` slots in turn, waiting as wait_for_slot does
 * (and, once it found the ring full, for `room` free slots:
 * tq_ring_reserve_put_room); *done is the number of slots published.  0, or
 * -1 with an exception. */
int produce(RingObject *self, int room, double timeout_s, const int *stop, const char *who, fill_fn fill, void *job,
            int64_t count, int64_t *done);
/* The engine's view of a component of this dtype and shape: rows of bytes
 * (a scalar is one row). */
tq_component engine_component(const PyArray_Descr *descr, int ndim, const npy_intp *shape);
/* 0 when an array of this shape fits component c, else -1 with ValueError
 * naming the queue and the component (the same from every entry). */
int check_dims(RingObject *self, int c, int ndim, const npy_intp *dims);
/* Component c of an element as the engine takes it: a new reference to a C-contiguous array of its
 * dtype that fits its slot (obj itself where it is one; cast where the rule allows), or NULL with an
 * exception naming the component. */
PyArrayObject *checked_component(RingObject *self, int c, PyObject *obj);
/* Checks an element (a sequence of one value per component) before anything is reserved: parts[c] gets
 * checked_component's array, srcs[c] its data and rows[c] its rows, which must agree (check_rows; op: the
 * Op that puts it, or NULL).  0, or -1 with an exception (parts then all NULL). */
int check_element(RingObject *self, const char *op, PyObject *arrays, PyArrayObject **parts, const void **srcs,
                  int64_t *rows);
void release_parts(PyArrayObject **parts, int n);
/* Puts a checked element: waits for a slot as wait_for_slot does, copies it in and publishes it.  The
 * queue's size after it, or -1 with an exception. */
Py_ssize_t put_checked(RingObject *self, const char *who, const void *const *srcs, const int64_t *rows,
                       double timeout_s, const int *stop);
/* The hand-over's signals from a producer (see hand_gil_over): it is in the ring's code, with the GIL
 * (producer_back); it goes back to its source, or leaves it (producer_to_source). */
void producer_back(RingObject *self);
void producer_to_source(RingObject *self, int going);
/* Validates and puts one element (op: the Op that puts it, named by a refusal of its rows; NULL for none);
 * the queue's size after it, or -1. */
Py_ssize_t put_element(RingObject *self, const char *who, const char *op, PyObject *arrays, double timeout_s,
                       const int *stop);
/* The shape of component c of a reserved element: ndim, dims filled. */
int element_shape(RingObject *self, int slot, int c, npy_intp *dims);
/* Copies component c of a reserved element into host memory at dst. */
int read_component(RingObject *self, const char *who, int slot, int c, void *dst);
/* A tuple of new arrays holding the next element, or NULL. */
PyObject *get_element(RingObject *self, const char *who, double timeout_s);
/* Lends a reserved element to the caller: fills views with n new arrays over
 * its memory, whose base (a Lease) gives the memory back to the ring when the
 * last of them is gone.  1 when lent (release the slot then), 0 when the
 * ring cannot lend now (copy instead), -1 with an exception. */
int lend_element(RingObject *self, int slot, PyObject **views);
/* 1 when array is one lend_element made. */
int is_lent(PyObject *array);
/* Lends a reserved element of a device ring to a consumer on `stream`: *lease
 * becomes a new Lease (which holds `keep`, the stream's owner, until it is
 * freed and the block given back), addrs[c] the device address of component
 * c.  1 when lent, 0 when no spare is free (copy instead), -1 with an exception
 * whose message starts with `who`. */
int lend_device_block(RingObject *self, const char *who, int slot, void *stream, PyObject *keep, PyObject **lease,
                      uint64_t *addrs);
/* Whether device rings lend at all (for benchmarks that compare lending with copying); the previous setting. */
int set_device_lending(int on);
/* 1 when obj is a Lease. */
int is_lease(PyObject *obj);
/* Like get_element, but the arrays are lent when the ring can lend. */
PyObject *take_element(RingObject *self, const char *who, double timeout_s);

/* ---- tq_py_device.c ---- */
/* Checks and puts one element of device arrays: sources holds one
 * (ptr, shape, strides or None, dtype, stream or None) per component.  The
 * queue's size after it, or -1. */
Py_ssize_t put_device_element(RingObject *self, const char *who, PyObject *sources, double timeout_s, const int *stop);
/* Takes the next element into device addresses dsts (full-size buffers) on
 * a consumer's CUstream: a tuple of its rows per component, or NULL. */
PyObject *take_device_element(RingObject *self, const char *who, PyObject *dsts, void *stream, double timeout_s,
                              PyObject **lease);
/* Module function dlpack_source. */
PyObject *dlpack_source(PyObject *module, PyObject *capsule);

/* ---- tq_py_shuffle.c ---- */
/* Module function permutation(bit_generator, n). */
PyObject *permutation(PyObject *module, PyObject *args);

/* ---- tq_py_stop.c ---- */
/* The flag of a Stop made for this ring (NULL for None), or -1 with TypeError. */
int stop_flag(RingObject *self, const char *who, PyObject *stop, const int **flag);

/* ---- tq_py_memory.c: methods of the Ring ---- */
PyObject *Ring_register_host(RingObject *self, PyObject *array);
PyObject *Ring_unregister_host(RingObject *self, PyObject *array);
PyObject *Ring_gather_on_device(RingObject *self, PyObject *args, PyObject *kwds);
PyObject *Ring_gather_on_host(RingObject *self, PyObject *unused);
PyObject *Ring_staging_fd(RingObject *self, PyObject *unused);
PyObject *Ring_slot_offset(RingObject *self, PyObject *arg);
PyObject *Ring_swap_staging(RingObject *self, PyObject *args);
PyObject *Ring_get_staging_bytes(RingObject *self, void *unused);
PyObject *Ring_get_component_offsets(RingObject *self, void *unused);

/* ---- tq_py_writer.c: methods of the Ring ---- */
PyObject *Ring_reserve(RingObject *self, PyObject *args, PyObject *kwds);
PyObject *Ring_commit(RingObject *self, PyObject *args);
PyObject *Ring_abort(RingObject *self, PyObject *args);

/* ---- tq_py_capi.c ---- */
/* A new capsule holding the Ops' table of functions. */
PyObject *capi_capsule(void);

/* ---- tq_py_functions.c ---- */
/* The module's functions, for its definition. */
extern PyMethodDef engine_functions[];

#endif /* TQ_PY_H */
