/* producer_hooks.c: where the native half of a Client calls its Python half (the methods
 * PRODUCER_HOOKS lists, producer.h), and the deadline rule both halves share, as Python
 * sees it (due_ms, due_ms_many: service/caller/times.py's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "producer.h"
#include "pymethods.h"

static PyObject *hook_names[HOOK_COUNT];   /* interned at module init */

PyObject *producer_hook(Producer *p, int hook, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *stack[16];
    if (total + 1 > 16) return PyErr_Format(PyExc_TypeError, "too many arguments");
    stack[0] = (PyObject *)p;
    for (Py_ssize_t i = 0; i < total; i++) stack[i + 1] = args[i];
    return PyObject_VectorcallMethod(hook_names[hook], stack, (size_t)(nargs + 1), kwnames);
}

int producer_hook0(Producer *p, int hook) {
    PyObject *r = producer_hook(p, hook, NULL, 0, NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

int producer_restock(Producer *p) { return producer_hook0(p, HOOK_RESTOCK); }
int producer_bell(Producer *p) { return producer_hook0(p, HOOK_BELL); }

int producer_wait_push(Producer *p, i64 h, i64 check) {
    PyObject *args[2] = {PyLong_FromLongLong(h), PyLong_FromLongLong(check)};
    PyObject *r = args[0] && args[1] ? producer_hook(p, HOOK_WAIT_PUSH, args, 2, NULL) : NULL;
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* ---- the deadline rule, for the Python paths ------------------------------------------ */
static PyObject *py_due_ms(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "due_ms(now_ns, delay_ms)");
    long long now = PyLong_AsLongLong(args[0]);
    double d = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(producer_due_ms(now, d));
}

/* due_ms_many(now_ns, delays (float64), out (int64)): out[i] = due_ms(now_ns, delays[i]) */
static PyObject *py_due_ms_many(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer d;
    I64Buf out;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "due_ms_many(now_ns, delays, out)");
    long long now = PyLong_AsLongLong(args[0]);
    if (now == -1 && PyErr_Occurred()) return NULL;
    if (PyObject_GetBuffer(args[1], &d, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (d.itemsize != 8 || !d.format || strcmp(d.format, "d") != 0) {
        PyBuffer_Release(&d);
        return PyErr_Format(PyExc_TypeError, "delays must be a float64 array");
    }
    if (i64buf_get(args[2], &out, 1) < 0) { PyBuffer_Release(&d); return NULL; }
    Py_ssize_t n = d.len / 8;
    if (out.n < n) PyErr_SetString(PyExc_ValueError, "out too short");
    else
        for (Py_ssize_t i = 0; i < n; i++) out.p[i] = producer_due_ms(now, ((double *)d.buf)[i]);
    i64buf_release(&out);
    PyBuffer_Release(&d);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef hook_functions[] = {
    METHOD_FAST("due_ms", py_due_ms,
        "due_ms(now_ns, delay_ms) -> the deadline (ms) of a checked delay from now_ns: the "
        "rule every path of a client uses (producer.h, producer_due_ms)."),
    METHOD_FAST("due_ms_many", py_due_ms_many,
        "due_ms_many(now_ns, delays, out): due_ms of each float64 delay into int64 out."),
    METHODS_END,
};

int producer_hooks_init(PyObject *m) {
    static const char *names[HOOK_COUNT] = {
#define HOOK_NAME_(id, name, doc) name,
        PRODUCER_HOOKS(HOOK_NAME_)
#undef HOOK_NAME_
    };
    PyObject *listed = PyTuple_New(HOOK_COUNT);
    if (!listed) return -1;
    for (int i = 0; i < HOOK_COUNT; i++) {
        if (!(hook_names[i] = PyUnicode_InternFromString(names[i]))) goto fail;
        Py_INCREF(hook_names[i]);
        PyTuple_SET_ITEM(listed, i, hook_names[i]);
    }
    if (PyModule_AddObject(m, "PRODUCER_HOOKS", listed) < 0) goto fail;
    return PyModule_AddFunctions(m, hook_functions);
fail:
    Py_DECREF(listed);
    return -1;
}
