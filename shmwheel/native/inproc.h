/* inproc.h: the in-process Kafka layer's native core: `Task` (the base of TimerTask and
 * DelayedOperation, inproc_task.c) and `TaskWheel` (the wheel a SystemTimer is, and the
 * one a TimingWheel holds, inproc_wheel.c). A TaskWheel is the array wheel of wheel.h, the
 * same algorithm and layout as the service's, in memory of its own, plus a table of
 * Python objects indexed by slot: objs[s] is the task that slot s holds. No entry object
 * exists per timer; a TimerTaskEntry is made only when a caller asks for one.
 *
 * Ground rules: what protects what
 * ================================
 * 1. The GIL, and nothing else, protects the native state: a TaskWheel's array, its objs
 *    table, its wait target and waiter count, and each task's binding (wheel, handle,
 *    bound, entry) and an operation's completed and pending flags. Every method below
 *    runs while holding the GIL and never lets it go between the first read and the last
 *    write of that state: no Py_BEGIN_ALLOW_THREADS, no call into Python code (a clock,
 *    a hook, a method), no allocation of a GC-tracked object (CPython 3.11 may collect,
 *    and so run finalizers, at any such allocation) and no Py_DECREF that could free an
 *    object (its finalizer could run Python code) inside that window. Python code runs
 *    only before the window (the clock) or after the state is consistent again (hooks,
 *    the deferred DECREFs). So each operation is atomic with respect to every thread: a
 *    threading.Lock around these calls would protect nothing more, and there is none.
 * 2. What the GIL does not give is waiting: SystemTimer's Condition `_cond` is held by
 *    the thread that advances the clock, from `_arm` (next wake-up computed and the wait
 *    target set, in one call) until `_cond.wait` releases it. An `add` whose expiration
 *    is earlier than the target clears it and calls the `_wake` hook, which takes `_cond`
 *    to notify: so either the advancing thread's `_arm` saw the task, or the adder sees
 *    the target and wakes it (no missed wake-up). One lock per wake-up, none per add.
 * 3. The task runner's queue has its own Condition (one acquisition per batch), and a
 *    DelayedOperation's `lock` is the user's (Kafka's), around try_complete.
 * 4. Free-threaded CPython (3.13t): shmwheel._native uses single-phase init and does not
 *    declare Py_mod_gil, so importing it turns the GIL back on: rule 1 holds there too.
 *
 * References: objs[s] owns one reference to its task; a task's `wheel` is borrowed and
 * is non-NULL exactly while that wheel's objs[HANDLE_SLOT(handle)] is the task (so a
 * pending task keeps itself alive, and a wheel that dies unbinds what it holds first).
 */
#ifndef SHMWHEEL_INPROC_H
#define SHMWHEEL_INPROC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wheel.h"

struct TaskWheel;

typedef struct {
    PyObject_HEAD
    i64 delay_ms;
    i64 handle;            /* the wheel handle while pending */
    i64 expiration_ms;     /* of the current binding */
    struct TaskWheel *wheel; /* borrowed: the wheel whose slot holds it, or NULL */
    PyObject *entry;       /* the TimerTaskEntry of the current binding, once asked for */
    PyObject *lock;        /* a DelayedOperation's lock (Kafka's), around try_complete */
    char bound;            /* Kafka's timerTaskEntry != null: added, not cancelled since */
    char completed;        /* a DelayedOperation's completed flag (force_complete's CAS) */
    char try_pending;      /* its tryCompletePending flag (maybe_try_complete) */
} Task;

typedef struct TaskWheel {
    PyObject_HEAD
    i64 *mem;              /* the wheel array (wheel.h), PyMem memory; NULL until __init__ */
    PyObject **objs;       /* objs[slot]: the task a linked slot holds, else NULL */
    PyObject *clock;       /* a callable -> ns, or NULL for CLOCK_MONOTONIC */
    i64 wait_target;       /* ms: an add expiring earlier wakes the advancing thread */
    i64 waiters;           /* threads between _arm and _disarm */
    i64 fired;             /* tasks handed out by _advance */
    char closed;
} TaskWheel;

extern PyTypeObject TaskType, OperationType, TaskWheelType;

#define IS_OPERATION(o) PyObject_TypeCheck((o), &OperationType)

/* inproc_task.c: Kafka's safeTryComplete on an Operation: under its lock, unless already
 * completed, call try_complete(); 1 if it returned true, 0 if not, -1 on an exception
 * (the lock is released either way). Runs Python code. */
int inproc_safe_try_complete(Task *op);
/* inproc_task.c: Kafka's cancel (unbind and unlink); 1 if it was linked. No Python code
 * but the DECREFs at its end. */
int inproc_cancel(Task *t);

/* inproc_wheel.c: take `t` out of its wheel's slot if it is linked there; returns the
 * reference the slot held (the caller DECREFs it once the state is consistent), or NULL
 * when it was not linked. Never calls Python code. */
PyObject *inproc_unlink(Task *t);

/* wheel_py.c: the header describes a wheel whose tables all lie in n words */
int shmwheel_wheel_header_ok(const i64 *m, Py_ssize_t n);

int shmwheel_add_inproc_types(PyObject *m);

/* Hold the pending exception aside while cleaning up (a lock release), then restore it. */
typedef struct {
    PyObject *t, *v, *tb;
} SavedError;
static inline void error_save(SavedError *e) {
#if PY_VERSION_HEX >= 0x030C0000
    e->t = e->tb = NULL;
    e->v = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&e->t, &e->v, &e->tb);
#endif
}
static inline void error_restore(SavedError *e) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(e->v);
#else
    PyErr_Restore(e->t, e->v, e->tb);
#endif
}

/* An int argument as int64: -1 with TypeError or OverflowError set, naming `what`.
 * PyLong_AsLong where long is 64 bits: for an int of more than one 30-bit digit (every
 * handle once its slot has been reused) CPython 3.11's PyLong_AsLongLong takes a slow
 * byte-array path. */
static inline int inproc_i64(PyObject *o, i64 *v, const char *what) {
#if LONG_MAX == INT64_MAX
    long x = PyLong_AsLong(o);
#else
    long long x = PyLong_AsLongLong(o);
#endif
    if (x == -1 && PyErr_Occurred()) {
        int type = PyErr_ExceptionMatches(PyExc_TypeError);
        PyErr_Clear();
        PyErr_Format(type ? PyExc_TypeError : PyExc_OverflowError,
                     type ? "%s must be an int, not %.100s" : "%s does not fit in int64", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *v = x;
    return 0;
}

#endif
