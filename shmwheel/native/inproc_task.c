/* inproc_task.c: `Task`, the native base of the Kafka layer's TimerTask, and `Operation`,
 * the base of DelayedOperation (shmwheel/kafka/). A task carries its own place in a wheel
 * (wheel, handle), so add, cancel and fire touch no other object: Kafka's TimerTaskEntry
 * exists only when asked for (`_bind_entry`, `_adopt_entry`). The GIL argument that makes
 * every method here atomic without a lock is in inproc.h ("Ground rules"): each method
 * changes the binding with no Python code and no GC allocation in between, and DECREFs
 * what it dropped only after.
 */
#include "inproc.h"

#include <structmember.h>
#include "pytype.h"
#include "pymethods.h"

/* ---- delay_ms: an int, not a bool, that fits in int64 ------------------------------ */

static int delay_from(PyObject *v, i64 *out) {
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "delay_ms must be an int, got %.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    return inproc_i64(v, out, "delay_ms");
}

static PyObject *task_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    /* every field starts zeroed: not bound, not linked; __init__ sets the delay */
    return type->tp_alloc(type, 0);
}

static int task_init(Task *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"delay_ms", NULL};
    PyObject *d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:TimerTask", kwlist, &d)) return -1;
    return delay_from(d, &self->delay_ms);
}

#define TASK_REFS(X) X(entry) X(lock)
GC_REFS(Task, task, TASK_REFS)

static void task_dealloc(Task *self) {
    /* a linked task is owned by its slot, so it cannot be freed while linked */
    PyObject_GC_UnTrack(self);
    task_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Kafka's cancel: unbind (timerTaskEntry = null) and unlink. 1 if it was linked. */
int inproc_cancel(Task *self) {
    PyObject *entry = self->entry, *held = inproc_unlink(self);
    self->entry = NULL;
    self->bound = 0;
    /* consistent: now the references may go */
    Py_XDECREF(held);
    Py_XDECREF(entry);
    return held != NULL;
}

PyDoc_STRVAR(cancel_doc,
"cancel() -> None\n\n"
"Remove the task from its timer if it is still pending (Kafka's TimerTask.cancel). A task\n"
"already handed to the runner still runs.");

static PyObject *task_cancel(Task *self, PyObject *unused) {
    inproc_cancel(self);
    Py_RETURN_NONE;
}

static PyObject *task_cancel_won(Task *self, PyObject *unused) {
    return PyBool_FromLong(inproc_cancel(self));
}

static PyObject *task_unlink(Task *self, PyObject *entry) {
    PyObject *held = self->entry == entry ? inproc_unlink(self) : NULL;
    Py_XDECREF(held);
    return PyBool_FromLong(held != NULL);
}

static PyObject *task_bind_entry(Task *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_bind_entry(entry, expiration_ms)");
        return NULL;
    }
    i64 exp;
    if (inproc_i64(args[1], &exp, "expiration_ms") < 0) return NULL;
    PyObject *held = inproc_unlink(self), *old = self->entry;
    Py_INCREF(args[0]);
    self->entry = args[0];
    self->expiration_ms = exp;
    self->bound = 1;
    Py_XDECREF(held);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *task_adopt_entry(Task *self, PyObject *entry) {
    if (!self->bound) Py_RETURN_NONE;
    if (self->entry == NULL) {
        Py_INCREF(entry);
        self->entry = entry;
    }
    Py_INCREF(self->entry);
    return self->entry;
}

static PyObject *get_delay(Task *self, void *c) { return PyLong_FromLongLong(self->delay_ms); }

static int set_delay(Task *self, PyObject *v, void *c) {
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "delay_ms cannot be deleted");
        return -1;
    }
    return delay_from(v, &self->delay_ms);
}

static PyObject *get_entry(Task *self, void *c) {
    PyObject *e = self->entry ? self->entry : Py_None;
    Py_INCREF(e);
    return e;
}

static PyObject *get_flag(Task *self, void *which) {
    switch ((intptr_t)which) {
    case 0: return PyBool_FromLong(self->bound);
    case 1: return PyBool_FromLong(self->wheel != NULL);
    case 2: return PyBool_FromLong(self->completed);
    default: return PyBool_FromLong(self->try_pending);
    }
}

static PyObject *get_expiration(Task *self, void *c) {
    return PyLong_FromLongLong(self->expiration_ms);
}

static PyMethodDef task_methods[] = {
    METHOD_NOARGS("cancel", task_cancel, cancel_doc),
    METHOD_NOARGS("_cancel", task_cancel_won,
        "_cancel() -> bool: cancel; True iff the task was pending (so it will never run)."),
    METHOD_O("_unlink", task_unlink,
        "_unlink(entry) -> bool: if `entry` is the current binding's, take the task out of its "
        "wheel, keeping the binding (Kafka's TimerTaskEntry.remove)."),
    METHOD_FAST("_bind_entry", task_bind_entry,
        "_bind_entry(entry, expiration_ms): a new binding (Kafka's setTimerTaskEntry): the old "
        "one is unlinked and now counts as cancelled."),
    METHOD_O("_adopt_entry", task_adopt_entry,
        "_adopt_entry(entry) -> the current binding's entry: `entry` if it had none; None if "
        "the task is not bound."),
    METHODS_END,
};

static PyGetSetDef task_getset[] = {
    {"delay_ms", (getter)get_delay, (setter)set_delay, "the delay in ms (an int)", NULL},
    {"_entry", (getter)get_entry, NULL, "the current binding's entry, if one was made", NULL},
    {"_bound", (getter)get_flag, NULL, "added and not cancelled since", (void *)0},
    {"_pending", (getter)get_flag, NULL, "linked in a wheel (will fire)", (void *)1},
    {"_expiration_ms", (getter)get_expiration, NULL, "the current binding's expiration", NULL},
    {NULL},
};

PyTypeObject TaskType = NATIVE_TYPE(
    "Task", Task, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    "The native base of TimerTask: a delay and the task's place in a wheel.",
    .tp_new = task_new, .tp_init = (initproc)task_init, TYPE_BASICS(task), TYPE_GC(task),
    .tp_getset = task_getset);

/* ---- Operation: DelayedOperation's lock and completion flags ------------------------ */

static PyObject *str_on_complete, *str_try_complete, *str_acquire, *str_release, *new_lock;

static int op_init(Task *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"delay_ms", "lock", NULL};
    PyObject *d, *lock = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:DelayedOperation", kwlist, &d, &lock) ||
        delay_from(d, &self->delay_ms) < 0)
        return -1;
    /* Kafka's default: a lock of its own (threading.Lock, made by _thread.allocate_lock) */
    lock = lock == Py_None ? PyObject_CallNoArgs(new_lock) : Py_NewRef(lock);
    if (lock == NULL) return -1;
    Py_XSETREF(self->lock, lock);
    return 0;
}

static int call_lock(Task *op, PyObject *name) {
    PyObject *r = PyObject_CallMethodNoArgs(op->lock, name);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

int inproc_safe_try_complete(Task *op) {
    if (op->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "DelayedOperation.__init__ was not called");
        return -1;
    }
    if (call_lock(op, str_acquire) < 0) return -1;
    int done = 0;
    if (!op->completed) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)op, str_try_complete);
        done = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
    }
    SavedError e;
    if (done < 0) error_save(&e); /* release the lock, then raise what try_complete raised */
    int bad = call_lock(op, str_release);
    if (done < 0) {
        if (bad) PyErr_Clear();
        error_restore(&e);
        return -1;
    }
    return bad ? -1 : done;
}

static PyObject *op_safe_try_complete(Task *self, PyObject *unused) {
    int r = inproc_safe_try_complete(self);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

PyDoc_STRVAR(force_complete_doc,
"force_complete() -> bool\n\n"
"Complete now: cancel the timeout and run on_complete. True only for the one caller that\n"
"completed it (a compare-and-set: the flag is tested and set with no Python code between).");

static PyObject *op_force_complete(Task *self, PyObject *unused) {
    if (self->completed) Py_RETURN_FALSE;
    self->completed = 1; /* the one winner: nothing ran between the test and the set */
    inproc_cancel(self);
    PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, str_on_complete);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    Py_RETURN_TRUE;
}

static PyObject *op_pending_swap(Task *self, PyObject *v) {
    int nv = PyObject_IsTrue(v);
    if (nv < 0) return NULL;
    int old = self->try_pending; /* getAndSet: no Python code between the read and write */
    self->try_pending = (char)nv;
    return PyBool_FromLong(old);
}

static PyMethodDef op_methods[] = {
    METHOD_NOARGS("force_complete", op_force_complete, force_complete_doc),
    METHOD_O("_pending_swap", op_pending_swap,
        "_pending_swap(v) -> old: set tryCompletePending to v, return what it was."),
    METHOD_NOARGS("safe_try_complete", op_safe_try_complete,
        "safe_try_complete() -> bool\n\ntry_complete under the operation's lock, unless already "
        "completed (Kafka since KAFKA-8334)."),
    METHODS_END,
};

static PyObject *op_get_lock(Task *self, void *c) {
    PyObject *l = self->lock ? self->lock : Py_None;
    return Py_NewRef(l);
}

static int op_set_lock(Task *self, PyObject *v, void *c) {
    if (v == NULL || v == Py_None) {
        PyErr_SetString(PyExc_TypeError, "a DelayedOperation's lock cannot be removed");
        return -1;
    }
    Py_XSETREF(self->lock, Py_NewRef(v));
    return 0;
}

static PyGetSetDef op_getset[] = {
    {"is_completed", (getter)get_flag, NULL, "True once force_complete has won.", (void *)2},
    {"_try_pending", (getter)get_flag, NULL, "Kafka's tryCompletePending", (void *)3},
    {"lock", (getter)op_get_lock, (setter)op_set_lock,
     "The operation's lock (Kafka's): taken around try_complete and by expiry.", NULL},
    {NULL},
};

PyTypeObject OperationType = NATIVE_TYPE(
    "Operation", Task, Py_TPFLAGS_BASETYPE, /* GC and the rest: from Task */
    "The native base of DelayedOperation: a Task with its completion flags.",
    .tp_init = (initproc)op_init, .tp_methods = op_methods, .tp_getset = op_getset);

int shmwheel_add_task_types(PyObject *m) {
    str_on_complete = PyUnicode_InternFromString("on_complete");
    str_try_complete = PyUnicode_InternFromString("try_complete");
    str_acquire = PyUnicode_InternFromString("acquire");
    str_release = PyUnicode_InternFromString("release");
    PyObject *thread = PyImport_ImportModule("_thread");
    if (thread) {
        new_lock = PyObject_GetAttrString(thread, "allocate_lock");
        Py_DECREF(thread);
    }
    if (!str_on_complete || !str_try_complete || !str_acquire || !str_release || !new_lock)
        return -1;
    OperationType.tp_base = &TaskType;
    if (PyType_Ready(&TaskType) < 0 || PyType_Ready(&OperationType) < 0) return -1;
    Py_INCREF(&TaskType);
    if (PyModule_AddObject(m, "Task", (PyObject *)&TaskType) < 0) return -1;
    Py_INCREF(&OperationType);
    if (PyModule_AddObject(m, "Operation", (PyObject *)&OperationType) < 0) return -1;
    return 0;
}
