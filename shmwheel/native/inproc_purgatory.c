/* inproc_purgatory.c: `Watchers`, the native base of the in-process
 * DelayedOperationPurgatory (shmwheel/kafka/purgatory.py): Kafka's watch lists (key ->
 * the operations watching it, in arrival order) and its two entry points,
 * try_complete_else_watch and check_and_complete, with the operation's lock, its
 * try_complete and the timer called from C.
 *
 * What protects the watch lists (with inproc.h's "Ground rules")
 * --------------------------------------------------------------
 * A step on one key's list (watch: find or make the list, append; drop: remove completed
 * operations, forget the key once its list is empty; cancel_for_key: pop the list) must be
 * atomic, or an operation appended to a list that a drop is forgetting is lost (a missed
 * wake-up). For a key of exact type str, int or bytes, hashing and comparing run no Python
 * code, and a step allocates no GC object inside its window (a new list is made before
 * and the lookup repeated), so the GIL makes the step atomic: no lock. A key of any other
 * type may run Python code (__hash__, __eq__) in the middle of a step, so such steps hold
 * `slow`, one mutex per purgatory, for their whole length, and while one does (slow_active)
 * every other step takes `slow` too. Steps never call an operation's code, so `slow` is
 * never held across try_complete or on_complete (a key whose __eq__ or finalizer calls
 * back into the same purgatory would deadlock: don't). Removed operations are released
 * only after the step (they are moved to a list that holds them).
 */
#include "inproc.h"

#include <structmember.h>
#include "pytype.h"
#include "pymethods.h"

typedef struct {
    PyObject_HEAD
    PyObject *by_key;          /* dict: key -> list of operations watching it */
    PyObject *timeout_timer;   /* what `add`s an operation that did not complete at once */
    PyThread_type_lock slow;   /* held across a step on a key whose hash/eq is Python code */
    i64 slow_active;           /* steps holding `slow` (when > 0 every step takes it) */
    i64 watched_total;         /* operations ever watched (Kafka's estimate, with base) */
    i64 estimate_base;
    char timer_enabled;
} Watchers;

static PyObject *str_add;

/* ---- steps on one key's list --------------------------------------------------------- */

static int simple_key(PyObject *k) {
    return PyUnicode_CheckExact(k) || PyLong_CheckExact(k) || PyBytes_CheckExact(k);
}

/* Take `slow` if this step needs it: a Python-level key, or one such step is running. */
static int step_enter(Watchers *w, PyObject *key) {
    if (simple_key(key) && w->slow_active == 0) return 0;
    if (!PyThread_acquire_lock(w->slow, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(w->slow, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    w->slow_active++;
    return 1;
}

static void step_exit(Watchers *w, int held) {
    if (!held) return;
    w->slow_active--;
    PyThread_release_lock(w->slow);
}

/* Append `op` to key's list, making the list if there is none. */
static int watch_step(Watchers *w, PyObject *key, PyObject *op) {
    PyObject *fresh = NULL;
    int rc = -1;
    for (;;) {
        int held = step_enter(w, key);
        PyObject *list = PyDict_GetItemWithError(w->by_key, key); /* borrowed */
        if (list == NULL && !PyErr_Occurred() && fresh != NULL) {
            rc = PyDict_SetItem(w->by_key, key, fresh);
            list = rc < 0 ? NULL : fresh;
        }
        if (list != NULL) rc = PyList_Append(list, op);
        step_exit(w, held);
        if (list != NULL || PyErr_Occurred()) break;
        /* no list: make one outside the step (it may collect), then look again */
        if ((fresh = PyList_New(0)) == NULL) break;
    }
    Py_XDECREF(fresh);
    return rc;
}

/* Remove the completed operations of `list` in place, moving them to `gone`. */
static int compact(PyObject *list, PyObject *gone) {
    PyObject **items = ((PyListObject *)list)->ob_item;
    Py_ssize_t n = PyList_GET_SIZE(list), kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        if (IS_OPERATION(o) && ((Task *)o)->completed) {
            if (PyList_Append(gone, o) < 0) return -1; /* no GC object made: a realloc */
            Py_DECREF(o); /* `gone` holds it: not freed here */
        } else {
            items[kept++] = o;
        }
    }
    Py_SET_SIZE(list, kept);
    return 0;
}

/* Kafka's tryCompleteWatched tail and removeKeyIfEmpty: drop completed operations from
 * `list`, and forget `key` if its list is now empty and still this one. */
static int drop_step(Watchers *w, PyObject *key, PyObject *list, PyObject *gone) {
    int held = step_enter(w, key), rc = compact(list, gone);
    if (rc == 0 && PyList_GET_SIZE(list) == 0) {
        PyObject *now = PyDict_GetItemWithError(w->by_key, key);
        if (now == list) rc = PyDict_DelItem(w->by_key, key);
        else if (now == NULL && PyErr_Occurred()) rc = -1;
    }
    step_exit(w, held);
    return rc;
}

/* A new reference to key's list, or NULL (with or without an error set). */
static PyObject *list_of(Watchers *w, PyObject *key) {
    int held = step_enter(w, key);
    PyObject *list = Py_XNewRef(PyDict_GetItemWithError(w->by_key, key));
    step_exit(w, held);
    return list;
}

/* ---- the entry points ------------------------------------------------------------------ */

static int call_bool(PyObject *op, PyObject *name) {
    PyObject *r = PyObject_CallMethodNoArgs(op, name);
    if (r == NULL) return -1;
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

static PyObject *str_try_complete, *str_acquire, *str_release;

PyDoc_STRVAR(tcew_doc,
"try_complete_else_watch(operation, watch_keys) -> bool\n\n"
"Complete the operation now if it can; otherwise watch it on every key and add it to the\n"
"timer. True iff this call completed it. Under the operation's lock: try_complete, watch\n"
"every key, try_complete again (Kafka's safeTryCompleteOrElse: no missed wake-up).");

static PyObject *w_try_complete_else_watch(Watchers *w, PyObject *const *args,
                                           Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "try_complete_else_watch(operation, watch_keys)");
        return NULL;
    }
    PyObject *op = args[0];
    if (!IS_OPERATION(op))
        return PyErr_Format(PyExc_TypeError, "the operation must be a DelayedOperation, got "
                            "%.100s", Py_TYPE(op)->tp_name);
    Task *t = (Task *)op;
    if (t->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "DelayedOperation.__init__ was not called");
        return NULL;
    }
    PyObject *keys = PySequence_Fast(args[1], "the watch keys must be a sequence");
    if (keys == NULL) return NULL;
    Py_ssize_t nk = PySequence_Fast_GET_SIZE(keys);
    if (nk == 0) {
        Py_DECREF(keys);
        PyErr_SetString(PyExc_ValueError, "the watch key list can't be empty");
        return NULL;
    }
    PyObject *r = PyObject_CallMethodNoArgs(t->lock, str_acquire);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    int done = call_bool(op, str_try_complete);
    if (done == 0) {
        for (Py_ssize_t i = 0; i < nk && done == 0; i++)
            if (watch_step(w, PySequence_Fast_GET_ITEM(keys, i), op) < 0) done = -1;
        if (done == 0) {
            w->watched_total++;
            done = call_bool(op, str_try_complete); /* the last check, still under the lock */
        }
    }
    SavedError e;
    if (done < 0) error_save(&e);
    r = PyObject_CallMethodNoArgs(t->lock, str_release);
    if (done < 0) {
        Py_XDECREF(r);
        PyErr_Clear();
        error_restore(&e);
        goto fail;
    }
    if (r == NULL) goto fail;
    Py_DECREF(r);
    Py_DECREF(keys);
    if (done) Py_RETURN_TRUE;
    if (!t->completed) { /* watched: the timeout too */
        if (w->timer_enabled && w->timeout_timer != NULL) {
            r = PyObject_CallMethodOneArg(w->timeout_timer, str_add, op);
            if (r == NULL) return NULL;
            Py_DECREF(r);
        }
        if (t->completed) inproc_cancel(t); /* completed meanwhile: off the timer */
    }
    Py_RETURN_FALSE;
fail:
    Py_DECREF(keys);
    return NULL;
}

PyDoc_STRVAR(cac_doc,
"check_and_complete(key) -> int\n\n"
"Try to complete every operation watching `key` (each with safe_try_complete); drop the\n"
"completed ones from its list. Returns how many this call completed.");

static PyObject *w_check_and_complete(Watchers *w, PyObject *key) {
    PyObject *list = list_of(w, key);
    if (list == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    PyObject *snap = PyList_GetSlice(list, 0, PyList_GET_SIZE(list)), *gone = NULL;
    long completed = 0;
    if (snap == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(snap); i++) {
        PyObject *op = PyList_GET_ITEM(snap, i);
        if (!IS_OPERATION(op) || ((Task *)op)->completed) continue;
        int r = inproc_safe_try_complete((Task *)op);
        if (r < 0) goto fail;
        completed += r;
    }
    if ((gone = PyList_New(0)) == NULL || drop_step(w, key, list, gone) < 0) goto fail;
    Py_DECREF(gone); /* now the dropped operations may be freed */
    Py_DECREF(snap);
    Py_DECREF(list);
    return PyLong_FromLong(completed);
fail:
    Py_XDECREF(gone);
    Py_XDECREF(snap);
    Py_DECREF(list);
    return NULL;
}

static PyObject *w_cancel_for_key(Watchers *w, PyObject *key) {
    int held = step_enter(w, key);
    PyObject *list = Py_XNewRef(PyDict_GetItemWithError(w->by_key, key));
    int bad = list != NULL && PyDict_DelItem(w->by_key, key) < 0;
    step_exit(w, held);
    if (list == NULL) return PyErr_Occurred() ? NULL : PyList_New(0);
    if (bad) {
        Py_DECREF(list);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *op = PyList_GET_ITEM(list, i);
        if (IS_OPERATION(op)) inproc_cancel((Task *)op);
    }
    return list;
}

static PyObject *w_purge_completed(Watchers *w, PyObject *unused) {
    PyObject *items = PyDict_Items(w->by_key), *gone = PyList_New(0);
    if (items == NULL || gone == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        if (drop_step(w, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1), gone) < 0) goto fail;
    }
    Py_ssize_t purged = PyList_GET_SIZE(gone);
    Py_DECREF(items);
    Py_DECREF(gone);
    return PyLong_FromSsize_t(purged);
fail:
    Py_XDECREF(items);
    Py_XDECREF(gone);
    return NULL;
}

static PyObject *w_watched(Watchers *w, PyObject *unused) {
    Py_ssize_t pos = 0, total = 0;
    PyObject *k, *v;
    while (PyDict_Next(w->by_key, &pos, &k, &v)) total += PyList_GET_SIZE(v);
    return PyLong_FromSsize_t(total);
}

static PyObject *w_estimate(Watchers *w, PyObject *unused) {
    return PyLong_FromLongLong(w->watched_total - w->estimate_base);
}

static PyObject *w_purge_due(Watchers *w, PyObject *const *args, Py_ssize_t nargs) {
    i64 delayed, interval;
    if (nargs != 2 || inproc_i64(args[0], &delayed, "delayed") < 0 ||
        inproc_i64(args[1], &interval, "purge_interval") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_purge_due(delayed, interval)");
        return NULL;
    }
    /* Kafka: if estimated - delayed > purgeInterval, estimated.getAndSet(delayed), purge */
    i64 estimated = w->watched_total - w->estimate_base;
    if (estimated - delayed <= interval) Py_RETURN_FALSE;
    w->estimate_base += estimated - delayed;
    Py_RETURN_TRUE;
}

/* ---- the type ---------------------------------------------------------------------------- */

static PyObject *w_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Watchers *w = (Watchers *)type->tp_alloc(type, 0); /* the subclass takes any arguments */
    if (w == NULL) return NULL;
    w->by_key = PyDict_New();
    w->slow = PyThread_allocate_lock();
    w->timer_enabled = 1;
    if (w->by_key == NULL || w->slow == NULL) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    return (PyObject *)w;
}

#define WATCHERS_REFS(X) X(by_key) X(timeout_timer)
GC_REFS(Watchers, w, WATCHERS_REFS)

static void w_dealloc(Watchers *w) {
    PyObject_GC_UnTrack(w);
    w_clear(w);
    if (w->slow) PyThread_free_lock(w->slow);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef w_methods[] = {
    METHOD_FAST("try_complete_else_watch", w_try_complete_else_watch, tcew_doc),
    METHOD_O("check_and_complete", w_check_and_complete, cac_doc),
    METHOD_O("cancel_for_key", w_cancel_for_key,
        "cancel_for_key(key) -> list\n\nStop watching `key`: cancel the timeout of each operation "
        "watching it and return them (they are not completed; other keys may still watch them)."),
    METHOD_NOARGS("purge_completed", w_purge_completed,
        "purge_completed() -> int\n\nRemove completed operations from every watch list; returns "
        "how many."),
    METHOD_NOARGS("watched", w_watched,
        "watched() -> int\n\nOperations in watch lists, counted once per key (Kafka's "
        "PurgatorySize)."),
    METHOD_NOARGS("_estimate", w_estimate, "_estimate() -> int: Kafka's estimatedTotalOperations."),
    METHOD_FAST("_purge_due", w_purge_due,
        "_purge_due(delayed, interval) -> bool: whether to purge now (the estimate is reset)."),
    METHODS_END,
};

static PyMemberDef w_members[] = {
    {"timeout_timer", T_OBJECT, offsetof(Watchers, timeout_timer), 0,
     "The timer operations wait on for their timeout."},
    {"timer_enabled", T_BOOL, offsetof(Watchers, timer_enabled), 0,
     "Whether watched operations are added to the timer."},
    {NULL},
};

PyTypeObject WatchersType = NATIVE_TYPE(
    "Watchers", Watchers, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    "The native base of DelayedOperationPurgatory: watch lists and entry points.",
    .tp_new = w_new, TYPE_BASICS(w), TYPE_GC(w), .tp_members = w_members);

int shmwheel_add_watchers_type(PyObject *m) {
    str_add = PyUnicode_InternFromString("add");
    str_try_complete = PyUnicode_InternFromString("try_complete");
    str_acquire = PyUnicode_InternFromString("acquire");
    str_release = PyUnicode_InternFromString("release");
    if (!str_add || !str_try_complete || !str_acquire || !str_release) return -1;
    if (PyType_Ready(&WatchersType) < 0) return -1;
    Py_INCREF(&WatchersType);
    return PyModule_AddObject(m, "Watchers", (PyObject *)&WatchersType);
}
