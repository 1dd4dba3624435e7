/* states_py.c: contract.h's slot state machine for Python (shmwheel/segment/states.py
 * builds the state names, the docs' diagram and the tests' checks from these), and the
 * transition trace (states.c) for the hypothesis state machines. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "atomics.h"
#include "pybuf.h"
#include "pymethods.h"

/* SLOT_STATES as ((name, value, meaning), ...) */
static PyObject *states_table(void) {
#define ROW_(name, value, doc) Py_BuildValue("(sis)", #name, value, doc),
    PyObject *rows[] = {SLOT_STATES(ROW_)};
#undef ROW_
    Py_ssize_t n = sizeof rows / sizeof rows[0];
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!t || !rows[i]) { Py_XDECREF(t); t = NULL; Py_XDECREF(rows[i]); continue; }
        PyTuple_SET_ITEM(t, i, rows[i]);
    }
    return t;
}

/* SLOT_TRANSITIONS as ((name, from mask, to mask, generation, actor, lock, atomic,
 * meaning), ...), in TR_ order */
static PyObject *transitions_table(void) {
#define ROW_(name, from, to, gen, actor, lock, atomic, doc) \
    Py_BuildValue("(siiisiis)", #name, from, to, gen, actor, lock, atomic, doc),
    PyObject *rows[TR_COUNT] = {SLOT_TRANSITIONS(ROW_)};
#undef ROW_
    PyObject *t = PyTuple_New(TR_COUNT);
    for (Py_ssize_t i = 0; i < TR_COUNT; i++) {
        if (!t || !rows[i]) { Py_XDECREF(t); t = NULL; Py_XDECREF(rows[i]); continue; }
        PyTuple_SET_ITEM(t, i, rows[i]);
    }
    return t;
}

static PyObject *py_trace_start(PyObject *m, PyObject *arg) {
    long long cap = PyLong_AsLongLong(arg);
    if (cap == -1 && PyErr_Occurred()) return NULL;
    if (cap < 1) return PyErr_Format(PyExc_ValueError, "trace_start(capacity): capacity >= 1");
    if (slot_trace_start(cap) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_trace_stop(PyObject *m, PyObject *unused) {
    slot_trace_stop();
    Py_RETURN_NONE;
}

/* trace_take(wheel) -> [(slot, seen, want, transition), ...]: the moves made since the last
 * take on the state words of the wheel array `wheel` (others are dropped); RuntimeError if
 * any did not fit in the trace. */
static PyObject *py_trace_take(PyObject *m, PyObject *arg) {
    I64Buf b;
    if (!slot_trace_words) return PyErr_Format(PyExc_RuntimeError, "no trace is on");
    if (i64buf_get(arg, &b, 0) < 0) return NULL;
    i64 *rec, lost, n = slot_trace_take(&rec, &lost);
    PyObject *out = PyList_New(0);
    const i64 *mem = b.p, *nodes = mem + mem[H_OFF_NODES], *end = mem + b.n;
    for (i64 i = 0; out && i < n; i++) {
        const i64 *w = (const i64 *)(intptr_t)rec[4 * i];
        if (w < nodes || w >= end || (w - nodes) % NODE_WORDS != F_GS) continue;
        i64 slot = (w - nodes) / NODE_WORDS - mem[H_SENTINELS];
        PyObject *r = Py_BuildValue("(LLLL)", (long long)slot, (long long)rec[4 * i + 1],
                                    (long long)rec[4 * i + 2], (long long)rec[4 * i + 3]);
        if (!r || PyList_Append(out, r) < 0) Py_CLEAR(out);
        Py_XDECREF(r);
    }
    i64buf_release(&b);
    if (out && lost) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_RuntimeError, "the trace lost %lld moves: take more often",
                            (long long)lost);
    }
    return out;
}

static PyObject *py_rule_allows(PyObject *m, PyObject *args) {
    int tr;
    long long seen, want;
    if (!PyArg_ParseTuple(args, "iLL:rule_allows", &tr, &seen, &want)) return NULL;
    return PyBool_FromLong(slot_rule_allows(tr, seen, want));
}

PyMethodDef shmwheel_state_methods[] = {
    METHOD_O("trace_start", py_trace_start,
        "trace_start(capacity): record every slot transition (tests only)"),
    METHOD_NOARGS("trace_stop", py_trace_stop, "trace_stop(): no more recording"),
    METHOD_O("trace_take", py_trace_take,
        "trace_take(wheel) -> [(slot, seen, want, transition)] since the last take"),
    METHOD_VARARGS("rule_allows", py_rule_allows,
        "rule_allows(transition, seen, want) -> bool: the table allows that move"),
    METHODS_END,
};

int shmwheel_add_state_tables(PyObject *m) {
    PyObject *s = states_table(), *t = transitions_table();
    if (!s || !t || PyModule_AddObject(m, "SLOT_STATES", s) < 0) {
        Py_XDECREF(s);
        Py_XDECREF(t);
        return -1;
    }
    if (PyModule_AddObject(m, "SLOT_TRANSITIONS", t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}
