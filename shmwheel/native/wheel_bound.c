/* wheel_bound.c: `BoundWheel`, the native base of WheelCore (shmwheel/wheel/core.py): the
 * wheel array borrowed once, when WheelCore binds it (`_hold`), instead of at every call,
 * so that the per-call `insert` and `cancel` are one C call each (wheel.h's
 * wheel_insert / wheel_cancel), as cheap to call as a list store.
 *
 * The header is checked when the array is bound (wheel_py.c's check: magic, version, and
 * every table inside the buffer); after that only the kernels write it. As before, the
 * node links are trusted: WheelCore is their only writer. Not thread-safe, like WheelCore
 * (its callers serialise access); nothing here releases the GIL.
 */
#include "inproc.h"
#include "pybuf.h"
#include "pytype.h"
#include "pymethods.h"

typedef struct {
    PyObject_HEAD
    I64Buf buf;
    int held;      /* an array is borrowed */
    int writable;  /* ... writable (a read-only one can be attached and verified) */
} BoundWheel;

static PyObject *str_make_room, *str_out_of_range;

static void release(BoundWheel *b) {
    if (b->held) i64buf_release(&b->buf);
    b->held = 0;
}

static PyObject *bw_hold(BoundWheel *self, PyObject *mem) {
    I64Buf nb;
    int writable = i64buf_get(mem, &nb, 1) == 0;
    if (!writable) {
        PyErr_Clear();
        if (i64buf_get(mem, &nb, 0) < 0) return NULL;
    }
    if (!shmwheel_wheel_header_ok(nb.p, nb.n)) {
        i64buf_release(&nb);
        PyErr_SetString(PyExc_ValueError, "_hold(): not a formatted shmwheel wheel array");
        return NULL;
    }
    release(self);
    self->buf = nb;
    self->held = 1;
    self->writable = writable;
    Py_RETURN_NONE;
}

static int bound(BoundWheel *self) {
    if (self->held && self->writable) return 1;
    PyErr_SetString(self->held ? PyExc_TypeError : PyExc_RuntimeError,
                    self->held ? "the wheel array is read-only"
                               : "the wheel core holds no array (_hold was not called)");
    return 0;
}

PyDoc_STRVAR(insert_doc,
"insert(deadline) -> int\n\n"
"Insert one deadline. Returns a handle (>= 0) or ALREADY_DUE (-1) if deadline <= the\n"
"current time (nothing inserted). Raises ValueError beyond the wheel's range; a full\n"
"growable core grows (a fixed one raises Full).");

static PyObject *bw_insert(BoundWheel *self, PyObject *arg) {
    i64 d;
    if (!bound(self) || inproc_i64(arg, &d, "deadline") < 0) return NULL;
    i64 h = wheel_insert(self->buf.p, d);
    if (h == INS_NO_SLOT) { /* WheelCore._make_room grows (re-binding) or raises Full */
        PyObject *one = PyLong_FromLong(1), *r = NULL;
        if (one) r = PyObject_CallMethodOneArg((PyObject *)self, str_make_room, one);
        Py_XDECREF(one);
        if (r == NULL) return NULL;
        Py_DECREF(r);
        if (!bound(self)) return NULL;
        h = wheel_insert(self->buf.p, d);
    }
    if (h == INS_OUT_OF_RANGE) { /* WheelCore._out_of_range raises the ValueError */
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, str_out_of_range, arg);
        Py_XDECREF(r);
        if (r) PyErr_SetString(PyExc_ValueError, "deadline beyond the wheel's range");
        return NULL;
    }
    return PyLong_FromLongLong(h);
}

PyDoc_STRVAR(cancel_doc,
"cancel(handle) -> bool\n\n"
"Unlink and free a pending entry in O(1); False for a stale or unknown handle.");

static PyObject *bw_cancel(BoundWheel *self, PyObject *arg) {
    i64 h;
    if (!bound(self) || inproc_i64(arg, &h, "handle") < 0) return NULL;
    return PyBool_FromLong(wheel_cancel(self->buf.p, h));
}

static PyObject *bw_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    return type->tp_alloc(type, 0); /* WheelCore's __init__ takes its own arguments */
}

static void bw_dealloc(BoundWheel *self) {
    release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef bw_methods[] = {
    METHOD_O("insert", bw_insert, insert_doc),
    METHOD_O("cancel", bw_cancel, cancel_doc),
    METHOD_O("_hold", bw_hold,
        "_hold(mem): borrow `mem` (a formatted int64 wheel array; insert and cancel need it "
        "writable) until the next _hold or the end of the object; the previous one is "
        "released."),
    METHODS_END,
};

PyTypeObject BoundWheelType = NATIVE_TYPE(
    "BoundWheel", BoundWheel, Py_TPFLAGS_BASETYPE,
    "The native base of WheelCore: its array, borrowed once.",
    .tp_new = bw_new, TYPE_BASICS(bw));

int shmwheel_add_bound_wheel_type(PyObject *m) {
    str_make_room = PyUnicode_InternFromString("_make_room");
    str_out_of_range = PyUnicode_InternFromString("_out_of_range");
    if (!str_make_room || !str_out_of_range || PyType_Ready(&BoundWheelType) < 0) return -1;
    Py_INCREF(&BoundWheelType);
    return PyModule_AddObject(m, "BoundWheel", (PyObject *)&BoundWheelType);
}
