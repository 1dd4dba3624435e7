/* handle.c: `Handle`, the native half of a TimerHandle: its id and deadline, and a
 * cancel() that goes straight to its client's compare-and-swap (producer.c); and a lease's
 * beat (service/caller/lease.py), its client's reset to the ttl the handle keeps. */
#include "producer.h"

#include <math.h>

#include <structmember.h>
#include "pytype.h"
#include "pymethods.h"

/* ---- Handle --------------------------------------------------------------------- */
static PyObject *handle_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *client;
    long long id, deadline;
    static char *names[] = {"client", "id", "deadline_ms", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLL", names, &client, &id, &deadline))
        return NULL;
    Handle *h = (Handle *)type->tp_alloc(type, 0);
    if (!h) return NULL;
    Py_INCREF(client);
    h->client = client;
    h->id = id;
    h->deadline_ms = deadline;
    return (PyObject *)h;
}

static PyObject *handle_cancel(Handle *h, PyObject *unused) {
    if (!PyObject_TypeCheck(h->client, &ProducerType))
        return PyObject_CallMethod(h->client, "cancel", "O", (PyObject *)h);
    return producer_cancel(h->client, (PyObject *)h);
}

/* reset(delay_ms=None, *, deadline_ms=None, at=None): its client's reset, this handle
 * first */
static PyObject *handle_reset(Handle *h, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *stack[8];
    if (total + 1 > 8) return PyErr_Format(PyExc_TypeError, "reset(): too many arguments");
    stack[0] = (PyObject *)h;
    for (Py_ssize_t i = 0; i < total; i++) stack[i + 1] = args[i];
    if (!PyObject_TypeCheck(h->client, &ProducerType))
        return PyErr_Format(PyExc_TypeError, "this handle has no client to reset it");
    return producer_reset((Producer *)h->client, stack, nargs + 1, kwnames);
}

/* _lease_beat(ttl_ms=None): a lease's beat (service/caller/lease.py, Lease.beat): its client's
 * reset to ttl_ms, by default the lease's own ttl, without a Python frame. A ttl given must
 * be a finite number > 0 (reset checks the rest: its range, as delay_ms) */
static PyObject *handle_lease_beat(Handle *h, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (total > 1 ||
        (kwnames && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "ttl_ms")))
        return PyErr_Format(PyExc_TypeError, "beat() takes one optional argument, ttl_ms");
    PyObject *ttl = total == 1 && args[0] != Py_None ? args[0] : h->ttl;
    if (!ttl) return PyErr_Format(PyExc_TypeError, "this handle is not a lease");
    if (ttl != h->ttl) {
        if (PyBool_Check(ttl) || !(PyLong_Check(ttl) || PyFloat_Check(ttl)))
            return PyErr_Format(PyExc_TypeError, "ttl_ms must be a number of milliseconds, "
                                "got %s", Py_TYPE(ttl)->tp_name);
        double v = PyFloat_AsDouble(ttl);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        if (!(v > 0) || isinf(v))
            return PyErr_Format(PyExc_ValueError, "ttl_ms must be finite and > 0, got %R", ttl);
    }
    if (!PyObject_TypeCheck(h->client, &ProducerType))
        return PyErr_Format(PyExc_TypeError, "this handle has no client to reset it");
    PyObject *stack[2] = {(PyObject *)h, ttl};
    return producer_reset((Producer *)h->client, stack, 2, NULL);
}

/* Not the type: this static type's instances hold no reference to it, and a Python
 * subclass's instances are counted once, by the interpreter's subtype_traverse
 * (tests/test_native_gc.py). */
#define HANDLE_REFS(X) X(client) X(future) X(ttl)
GC_REFS(Handle, handle, HANDLE_REFS)

static void handle_dealloc(Handle *h) {
    PyObject_GC_UnTrack(h);
    handle_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyMethodDef handle_methods[] = {
    METHOD_NOARGS("cancel", handle_cancel,
        "cancel() -> bool\n\nTrue iff the timer will never run (see Client.cancel)."),
    METHOD_FAST_KW("reset", handle_reset,
        "reset(delay_ms=None, *, deadline_ms=None, at=None) -> bool\n\nMove this timer's "
        "deadline (see Client.reset); deadline_ms follows it."),
    METHOD_FAST_KW("_lease_beat", handle_lease_beat,
        "beat(ttl_ms=None) -> bool\n\nRenew the lease: its deadline becomes ttl_ms (None: the "
        "lease's ttl) from now. True iff renewed; False once it expired (its timer fired) or "
        "was released. ShmwheelError if the client is closed or the service stopping, as "
        "reset()."),
    METHODS_END,
};

static PyMemberDef handle_members[] = {
    {"id", T_LONGLONG, offsetof(Handle, id), READONLY,
     "The timer's id: generation << 32 | slot, unique while the service lives."},
    {"deadline_ms", T_LONGLONG, offsetof(Handle, deadline_ms), READONLY,
     "The deadline, in monotonic milliseconds (as of the schedule, or of this process's "
     "last reset of it)."},
    {"_client", T_OBJECT, offsetof(Handle, client), READONLY, NULL},
    {"_future", T_OBJECT, offsetof(Handle, future), 0, NULL},
    {"_ttl", T_OBJECT, offsetof(Handle, ttl), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject HandleType = NATIVE_TYPE(
    "Handle", Handle, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    "Handle(client, id, deadline_ms): the native half of a TimerHandle.",
    .tp_new = handle_new, TYPE_BASICS(handle), TYPE_GC(handle), .tp_members = handle_members);

