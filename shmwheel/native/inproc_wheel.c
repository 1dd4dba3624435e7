/* inproc_wheel.c: `TaskWheel`, the in-process timer's wheel: wheel.h's array wheel (the
 * service's algorithm and layout) in memory of its own, plus objs[slot], the task each
 * linked slot holds. SystemTimer is a TaskWheel (its `add` is the C method below) and a
 * TimingWheel holds one. Add links the task itself (no entry object); cancel is a slot
 * operation (wheel_cancel, objs[slot] = NULL); `_advance` is the reaper's fire loop: it
 * fires slots in C and hands the due tasks to Python as lists.
 *
 * Why no lock: see inproc.h, "Ground rules". In short, every method runs under the GIL
 * with no Python code, no GC allocation and no freeing DECREF between its first read and
 * its last write of the wheel, the table or a task's binding: what could run Python code
 * (the clock, the hooks `_submit`, `_wake`, `_refuse`, DECREFs, list allocation) runs
 * before or after. The memory is PyMem (not GC-tracked), so growing it collects nothing.
 */
#include "inproc.h"

#include <time.h>

#include "pybuf.h"
#include "pytype.h"
#include "pymethods.h"

#define CHUNK 1024 /* slots fired per wheel_advance call */
#define NO_WAIT INT64_MIN /* wait_target when no thread sleeps on the wheel: no add wakes */

static PyObject *str_submit, *str_wake, *str_refuse;

/* ---- the binding of a task to a slot ------------------------------------------------ */

PyObject *inproc_unlink(Task *t) {
    TaskWheel *w = t->wheel;
    if (w == NULL) return NULL;
    i64 slot = HANDLE_SLOT(t->handle);
    wheel_cancel(w->mem, t->handle); /* PENDING (the invariant): unlinked and freed, O(1) */
    w->objs[slot] = NULL;
    t->wheel = NULL;
    return (PyObject *)t;
}

static int ready(TaskWheel *w) {
    if (w->mem) return 1;
    PyErr_SetString(PyExc_RuntimeError, "TaskWheel.__init__(mem, clock) was not called");
    return 0;
}

/* Double the entry table: the node table is the array's last (inproc_init checks it), so
 * growing appends node records and every other table, handle and link stays put. */
static int grow(TaskWheel *w) {
    i64 *m = w->mem, cap = m[H_CAPACITY];
    i64 ncap = cap < 32 ? 64 : 2 * cap;
    if (ncap > HANDLE_SLOT_MASK) {
        PyErr_SetString(PyExc_MemoryError, "the timer holds 2**32 - 1 tasks: no handle left");
        return -1;
    }
    i64 total = m[H_OFF_NODES] + (m[H_SENTINELS] + ncap) * NODE_WORDS;
    i64 *nm = PyMem_Realloc(m, (size_t)total * sizeof(i64));
    if (nm == NULL) goto nomem;
    w->mem = nm; /* still the old wheel (header unchanged), in a larger block */
    PyObject **no = PyMem_Realloc(w->objs, (size_t)ncap * sizeof(PyObject *));
    if (no == NULL) goto nomem;
    memset(no + cap, 0, (size_t)(ncap - cap) * sizeof(PyObject *));
    w->objs = no;
    nm[H_CAPACITY] = ncap;
    nm[H_TOTAL] = total;
    wheel_add_free_slots(nm, cap);
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* Refuse what add/_link cannot link, before anything changes: 0 if `exp` is in range. */
static int in_range(TaskWheel *w, i64 exp) {
    i64 *m = w->mem;
    if (exp <= wheel_limit(m) - m[H_TICK]) return 0;
    PyErr_Format(PyExc_ValueError, "expiration %lld ms is beyond the wheel's range (must be "
                 "< %lld)", (long long)exp, (long long)(wheel_limit(m) - m[H_TICK] + 1));
    return -1;
}

/* Link `t` at `exp` (in range, a slot free), moving it if it was linked anywhere.
 * Returns the reference to DECREF once consistent (NULL if none), and *linked. */
static PyObject *link_task(TaskWheel *w, Task *t, i64 exp, int *linked) {
    PyObject *held = inproc_unlink(t); /* a task added again moves (Kafka) */
    i64 h = wheel_insert(w->mem, exp);
    *linked = h >= 0;
    if (h < 0) return held; /* INS_ALREADY_DUE: range and room were checked */
    if (held == NULL) Py_INCREF(t); /* the slot's reference (no free: t is alive) */
    held = NULL;
    w->objs[HANDLE_SLOT(h)] = (PyObject *)t;
    t->wheel = w;
    t->handle = h;
    return NULL;
}

static i64 ceil_ms(i64 ns) { return ns / 1000000 + (ns % 1000000 > 0); }

static int clock_ms(TaskWheel *w, i64 *out) {
    if (w->clock == NULL) { /* time.monotonic_ns() on Linux, without the call */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *out = ceil_ms((i64)ts.tv_sec * 1000000000 + ts.tv_nsec);
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(w->clock);
    if (r == NULL) return -1;
    long long ns = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (ns == -1 && PyErr_Occurred()) return -1;
    *out = ceil_ms(ns);
    return 0;
}

static PyObject *call_hook(TaskWheel *w, PyObject *name, PyObject *arg) {
    return arg ? PyObject_CallMethodOneArg((PyObject *)w, name, arg)
               : PyObject_CallMethodNoArgs((PyObject *)w, name);
}

PyDoc_STRVAR(add_doc,
"add(task) -> None\n\n"
"Schedule `task` to run task.delay_ms from now: its expiration is the clock's nanosecond\n"
"deadline rounded up to the ms, so it never runs early. An already expired task is handed\n"
"to the runner at once; adding a task again reschedules it (its old binding is\n"
"cancelled). Thread-safe; raises ShmwheelError once the timer is shut down, ValueError\n"
"beyond the wheel's range.");

static PyObject *tw_add(TaskWheel *w, PyObject *arg) {
    if (!ready(w)) return NULL;
    if (!PyObject_TypeCheck(arg, &TaskType))
        return PyErr_Format(PyExc_TypeError, "add() takes a TimerTask, got %.100s",
                            Py_TYPE(arg)->tp_name);
    if (w->closed) {
        PyObject *r = call_hook(w, str_refuse, NULL);
        Py_XDECREF(r);
        if (r) PyErr_SetString(PyExc_RuntimeError, "the timer is shut down");
        return NULL;
    }
    Task *t = (Task *)arg;
    i64 now, exp;
    if (clock_ms(w, &now) < 0) return NULL; /* Python code, before the window */
    if (__builtin_add_overflow(now, t->delay_ms, &exp)) exp = t->delay_ms < 0 ? INT64_MIN : NEVER;
    /* ---- the window (inproc.h, rule 1): no Python code until `consistent` */
    if (in_range(w, exp) < 0) return NULL;
    if (w->mem[H_FREE] < 0 && grow(w) < 0) return NULL;
    PyObject *entry = t->entry;
    t->entry = NULL; /* a new binding: the entry of the old one now counts as cancelled */
    t->bound = 1;
    t->expiration_ms = exp;
    int linked, wake = 0;
    PyObject *held = link_task(w, t, exp, &linked);
    if (linked && exp < w->wait_target) {
        w->wait_target = NO_WAIT; /* one wake-up per sleep; the woken re-arm */
        wake = 1;
    }
    /* ---- consistent */
    Py_XDECREF(held);
    Py_XDECREF(entry);
    if (!linked) { /* already expired: to the runner now (Kafka) */
        PyObject *one = PyList_New(1);
        if (one == NULL) return NULL;
        Py_INCREF(t);
        PyList_SET_ITEM(one, 0, (PyObject *)t);
        PyObject *r = call_hook(w, str_submit, one);
        Py_DECREF(one);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    } else if (wake) {
        PyObject *r = call_hook(w, str_wake, NULL);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject *tw_link(TaskWheel *w, PyObject *const *args, Py_ssize_t nargs) {
    if (!ready(w)) return NULL;
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &TaskType)) {
        PyErr_SetString(PyExc_TypeError, "_link(task, expiration_ms): a TimerTask and an int");
        return NULL;
    }
    i64 exp;
    if (inproc_i64(args[1], &exp, "expiration_ms") < 0 || in_range(w, exp) < 0) return NULL;
    if (w->mem[H_FREE] < 0 && grow(w) < 0) return NULL;
    int linked;
    PyObject *held = link_task(w, (Task *)args[0], exp, &linked);
    Py_XDECREF(held);
    return PyBool_FromLong(linked);
}

PyDoc_STRVAR(advance_doc,
"_advance(now_ms) -> list\n\n"
"The reaper's fire loop: move the clock to now_ms and return the tasks that came due, in\n"
"expiration order of their buckets (FIFO within one), each unlinked (no longer pending).");

static PyObject *tw_advance(TaskWheel *w, PyObject *arg) {
    i64 now, slots[CHUNK];
    if (!ready(w) || inproc_i64(arg, &now, "now_ms") < 0) return NULL;
    PyObject *result = NULL;
    for (;;) {
        i64 pending = w->mem[H_PENDING];
        i64 cap = pending < 1 ? 1 : pending < CHUNK ? pending : CHUNK;
        PyObject *chunk = PyList_New((Py_ssize_t)cap); /* may collect: before the window */
        if (chunk == NULL) {
            Py_XDECREF(result);
            return NULL;
        }
        /* ---- the window: fire in C, move each task's reference from its slot to the list */
        i64 n = wheel_advance(w->mem, now, slots, cap, 1, NULL, NULL), j = 0;
        for (i64 i = 0; i < n; i++) {
            PyObject *o = w->objs[slots[i]];
            w->objs[slots[i]] = NULL;
            if (o == NULL) continue; /* cannot happen: a linked slot holds its task */
            ((Task *)o)->wheel = NULL;
            PyList_SET_ITEM(chunk, j++, o);
        }
        Py_SET_SIZE(chunk, j);
        w->fired += j;
        /* ---- consistent */
        if (result == NULL) {
            result = chunk;
        } else {
            Py_ssize_t len = PyList_GET_SIZE(result);
            int bad = PyList_SetSlice(result, len, len, chunk);
            Py_DECREF(chunk);
            if (bad) {
                Py_DECREF(result);
                return NULL;
            }
        }
        if (n < cap) return result;
    }
}

static PyObject *tw_cascade(TaskWheel *w, PyObject *arg) {
    i64 budget;
    if (!ready(w) || inproc_i64(arg, &budget, "budget") < 0) return NULL;
    return PyLong_FromLongLong(wheel_cascade_step(w->mem, budget, NULL, NULL));
}

static PyObject *wakeup_or_none(i64 t) {
    if (t == NEVER) Py_RETURN_NONE;
    return PyLong_FromLongLong(t);
}

static PyObject *tw_next_wakeup(TaskWheel *w, PyObject *unused) {
    if (!ready(w)) return NULL;
    return wakeup_or_none(wheel_next_wakeup(w->mem));
}

static PyObject *tw_arm(TaskWheel *w, PyObject *unused) {
    if (!ready(w)) return NULL;
    i64 wake = wheel_next_wakeup(w->mem); /* and the target set, in one step (rule 2) */
    w->waiters++;
    if (w->wait_target == NO_WAIT || wake < w->wait_target) w->wait_target = wake;
    return wakeup_or_none(wake);
}

static PyObject *tw_disarm(TaskWheel *w, PyObject *unused) {
    if (w->waiters > 0 && --w->waiters == 0) w->wait_target = NO_WAIT;
    Py_RETURN_NONE;
}

static PyObject *tw_close(TaskWheel *w, PyObject *unused) {
    w->closed = 1;
    Py_RETURN_NONE;
}

static PyObject *tw_snapshot(TaskWheel *w, PyObject *unused) {
    if (!ready(w)) return NULL;
    return PyBytes_FromStringAndSize((const char *)w->mem,
                                     (Py_ssize_t)(w->mem[H_TOTAL] * (i64)sizeof(i64)));
}

static PyObject *tw_word(TaskWheel *w, void *which) {
    if (!ready(w)) return NULL;
    return PyLong_FromLongLong(w->mem[(intptr_t)which]);
}

static PyObject *tw_get_closed(TaskWheel *w, void *c) { return PyBool_FromLong(w->closed); }
static PyObject *tw_get_fired(TaskWheel *w, void *c) { return PyLong_FromLongLong(w->fired); }

/* ---- life cycle ------------------------------------------------------------------------ */

static PyObject *tw_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    TaskWheel *w = (TaskWheel *)type->tp_alloc(type, 0); /* subclasses take any arguments */
    if (w) w->wait_target = NO_WAIT;
    return (PyObject *)w;
}

static int tw_init(TaskWheel *w, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"mem", "clock", NULL};
    PyObject *src, *clock = Py_None;
    I64Buf b;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:TaskWheel", kwlist, &src, &clock)) return -1;
    if (w->mem) {
        PyErr_SetString(PyExc_RuntimeError, "TaskWheel.__init__ called twice");
        return -1;
    }
    if (clock != Py_None && !PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_TypeError, "clock must be a callable returning ns, or None");
        return -1;
    }
    if (i64buf_get(src, &b, 0) < 0) return -1;
    const i64 *m = b.p;
    int ok = shmwheel_wheel_header_ok(m, b.n) && m[H_PENDING] == 0 &&
             m[H_TOTAL] == m[H_OFF_NODES] + (m[H_SENTINELS] + m[H_CAPACITY]) * NODE_WORDS;
    if (!ok) {
        i64buf_release(&b);
        PyErr_SetString(PyExc_ValueError, "TaskWheel needs an empty formatted wheel array whose "
                        "node table comes last (WheelCore.format)");
        return -1;
    }
    size_t words = (size_t)m[H_TOTAL], cap = (size_t)m[H_CAPACITY];
    w->mem = PyMem_Malloc(words * sizeof(i64));
    w->objs = PyMem_Calloc(cap ? cap : 1, sizeof(PyObject *));
    if (w->mem == NULL || w->objs == NULL) {
        i64buf_release(&b);
        PyMem_Free(w->mem);
        PyMem_Free(w->objs);
        w->mem = NULL;
        w->objs = NULL;
        PyErr_NoMemory();
        return -1;
    }
    memcpy(w->mem, m, words * sizeof(i64));
    i64buf_release(&b);
    if (clock != Py_None) {
        Py_INCREF(clock);
        w->clock = clock;
    }
    return 0;
}

static int tw_traverse(TaskWheel *w, visitproc visit, void *arg) {
    Py_VISIT(w->clock);
    if (w->mem)
        for (i64 s = 0, cap = w->mem[H_CAPACITY]; s < cap; s++) Py_VISIT(w->objs[s]);
    return 0;
}

static int tw_clear(TaskWheel *w) {
    Py_CLEAR(w->clock);
    if (w->mem)
        for (i64 s = 0; s < w->mem[H_CAPACITY]; s++) {
            Task *t = (Task *)w->objs[s];
            if (t == NULL) continue;
            /* each task is unlinked before its DECREF: whatever that runs finds the wheel
             * consistent (the other slots still hold theirs) */
            w->objs[s] = NULL;
            if (t->wheel == w) {
                wheel_cancel(w->mem, t->handle);
                t->wheel = NULL;
            }
            Py_DECREF(t);
        }
    return 0;
}

static void tw_dealloc(TaskWheel *w) {
    PyObject_GC_UnTrack(w);
    tw_clear(w);
    PyMem_Free(w->mem);
    PyMem_Free(w->objs);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef tw_methods[] = {
    METHOD_O("add", tw_add, add_doc),
    METHOD_FAST("_link", tw_link,
        "_link(task, expiration_ms) -> bool: link at that expiration (TimingWheel.add); False "
        "if already expired (then the task is not linked)."),
    METHOD_O("_advance", tw_advance, advance_doc),
    METHOD_O("_cascade", tw_cascade,
        "_cascade(budget) -> int: one bounded pre-cascade step (wheel_cascade_step)."),
    METHOD_NOARGS("_next_wakeup", tw_next_wakeup,
        "_next_wakeup() -> int | None: when the wheel next has work; None when empty."),
    METHOD_NOARGS("_arm", tw_arm,
        "_arm() -> int | None: _next_wakeup(), and an add expiring before it now calls _wake()."),
    METHOD_NOARGS("_disarm", tw_disarm, "_disarm(): undo one _arm()."),
    METHOD_NOARGS("_close", tw_close, "_close(): add now calls _refuse()."),
    METHOD_NOARGS("_snapshot", tw_snapshot,
        "_snapshot() -> bytes: a copy of the wheel array (for WheelCore.attach(...).verify())."),
    METHODS_END,
};

static PyGetSetDef tw_getset[] = {
    {"size", (getter)tw_word, NULL, "Tasks pending in the wheel.", (void *)H_PENDING},
    {"current_time_ms", (getter)tw_word, NULL, "The wheel's clock (ms).", (void *)H_NOW},
    {"_capacity", (getter)tw_word, NULL, "Slots in the entry table.", (void *)H_CAPACITY},
    {"closed", (getter)tw_get_closed, NULL, "True once shut down.", NULL},
    {"_fired", (getter)tw_get_fired, NULL, "Tasks handed out by _advance.", NULL},
    {NULL},
};

PyTypeObject TaskWheelType = NATIVE_TYPE(
    "TaskWheel", TaskWheel, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    "The in-process timer's wheel: wheel.h's array plus the task of each slot.",
    .tp_new = tw_new, .tp_init = (initproc)tw_init, TYPE_BASICS(tw), TYPE_GC(tw),
    .tp_getset = tw_getset);

int shmwheel_add_task_types(PyObject *m);        /* inproc_task.c */
int shmwheel_add_bound_wheel_type(PyObject *m);  /* wheel_bound.c */
int shmwheel_add_watchers_type(PyObject *m);     /* inproc_purgatory.c */

int shmwheel_add_inproc_types(PyObject *m) {
    str_submit = PyUnicode_InternFromString("_submit");
    str_wake = PyUnicode_InternFromString("_wake");
    str_refuse = PyUnicode_InternFromString("_refuse");
    if (!str_submit || !str_wake || !str_refuse) return -1;
    if (shmwheel_add_task_types(m) < 0 || shmwheel_add_bound_wheel_type(m) < 0 ||
        shmwheel_add_watchers_type(m) < 0)
        return -1;
    if (PyType_Ready(&TaskWheelType) < 0) return -1;
    Py_INCREF(&TaskWheelType);
    return PyModule_AddObject(m, "TaskWheel", (PyObject *)&TaskWheelType);
}
