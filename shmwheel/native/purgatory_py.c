/* purgatory_py.c: Python's face of purgatory.c and waiters.c: the `Tables` methods of the
 * watch lists and of the outcomes (the waiter table), and module functions (a key's id,
 * the outcome ring's wait and bell). The watch lists' methods are called with the segment
 * lock held; the outcomes' (outcome_watch, outcome_state, waiter_release) take no lock. */
#include "producer.h"
#include "tables.h"
#include "pymethods.h"

#include <string.h>

PyObject *tables_set_purgatory(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    OPEN(self);
    NARGS(5, "set_purgatory");
    if (self->seg.watch) return PyErr_Format(PyExc_ValueError, "the purgatory is set already");
    i64 *wt, *wa, *oq, cap, nrings;
    Py_ssize_t n_wt, n_wa, n_oq;
    if (arg_i64(args[3], &cap) < 0 || arg_i64(args[4], &nrings) < 0) return NULL;
    if (holds_add(&self->holds, args[0], &wt, &n_wt) < 0 ||
        holds_add(&self->holds, args[1], &wa, &n_wa) < 0 ||
        holds_add(&self->holds, args[2], &oq, &n_oq) < 0)
        return NULL;
    if (n_wt < WT_HEADER || n_wa < WAIT_HEADER || cap < 2 || (cap & (cap - 1)) ||
            nrings < 0 || nrings > 0xFFFF ||
            n_oq < nrings * (RING_HEADER_WORDS + cap * OUTQ_RECORD))
        return PyErr_Format(PyExc_ValueError, "set_purgatory: the regions are too short");
    self->seg.watch = wt;
    self->seg.waiters = wa;
    self->seg.waiters_words = n_wa;
    self->seg.outq = oq;
    self->seg.outq_cap = cap;
    self->seg.nrings = nrings;
    Py_RETURN_NONE;
}

static int purgatory_or_raise(Tables *t) {
    if (open_or_raise(t) < 0) return -1;
    if (t->seg.watch) return 0;
    PyErr_SetString(PyExc_ValueError, "set_purgatory() first");
    return -1;
}
#define PURGATORY(t) if (purgatory_or_raise(t) < 0) return NULL

PyObject *tables_watch_format(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 nb, cap;
    PURGATORY(self);
    NARGS(2, "watch_format");
    if (arg_i64(args[0], &nb) < 0 || arg_i64(args[1], &cap) < 0) return NULL;
    if (nb < 1 || cap < 0) return PyErr_Format(PyExc_ValueError, "watch_format: bad sizes");
    watch_format(&self->seg, nb, cap);
    Py_RETURN_NONE;
}

PyObject *tables_watch_add(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h;
    I64Buf keys;
    PURGATORY(self);
    NARGS(2, "watch_add");
    if (arg_i64(args[0], &h) < 0 || i64buf_get(args[1], &keys, 0) < 0) return NULL;
    i64 r = -3;
    if (h < 0 || HANDLE_SLOT(h) >= seg_capacity(&self->seg))
        PyErr_SetString(PyExc_ValueError, "watch_add: not a handle of this service");
    else if ((r = watch_add(&self->seg, h, keys.p, keys.n)) == -2)
        PyErr_SetString(PyExc_ValueError, "watch_add: the handle names no operation's block");
    i64buf_release(&keys);
    return r < -1 ? NULL : PyLong_FromLongLong(r);
}

/* op_store(handle, data, key ids) -> arena class << 32 | block, or -1 when the watch lists
 * are full, -2 when the arena has no block: an operation's block (data = its OP_HEADER and
 * blob) and its watch entries, in one call under the lock. On -2 the entries are already
 * in: retiring the slot leaves them dead for the next purge. */
PyObject *tables_op_store(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h;
    Py_buffer data;
    PURGATORY(self);
    NARGS(3, "op_store");
    if (arg_i64(args[0], &h) < 0) return NULL;
    if (h < 0 || HANDLE_SLOT(h) >= seg_capacity(&self->seg))
        return PyErr_Format(PyExc_ValueError, "op_store: not a handle of this service");
    PyObject *keys = PySequence_Fast(args[2], "op_store: key ids must be a sequence");
    if (!keys) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    i64 ids[64], *kp = n <= 64 ? ids : PyMem_Malloc(sizeof(i64) * (size_t)n);
    if (!kp) { Py_DECREF(keys); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < n; i++)
        if (arg_i64(PySequence_Fast_GET_ITEM(keys, i), &kp[i]) < 0) {
            if (kp != ids) PyMem_Free(kp);
            Py_DECREF(keys);
            return NULL;
        }
    Py_DECREF(keys);
    if (PyObject_GetBuffer(args[1], &data, PyBUF_SIMPLE) < 0) {
        if (kp != ids) PyMem_Free(kp);
        return NULL;
    }
    i64 r;
    if (data.len > MAX_PAYLOAD) {
        PyErr_SetString(PyExc_ValueError, "op_store: data larger than an arena block");
        r = -3;
    } else {
        r = op_store(&self->seg, h, data.buf, data.len, kp, n);
    }
    PyBuffer_Release(&data);
    if (kp != ids) PyMem_Free(kp);
    return r == -3 ? NULL : PyLong_FromLongLong(r);
}

PyObject *tables_watch_signal(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 key, amount;
    PURGATORY(self);
    NARGS(2, "watch_signal");
    if (arg_i64(args[0], &key) < 0 || arg_i64(args[1], &amount) < 0) return NULL;
    if (amount < 1) return PyErr_Format(PyExc_ValueError, "watch_signal: amount < 1");
    return PyLong_FromLongLong(watch_signal(&self->seg, key, amount));
}

PyObject *tables_watch_purge(Tables *self, PyObject *arg) {
    i64 budget;
    PURGATORY(self);
    if (arg_i64(arg, &budget) < 0) return NULL;
    return PyLong_FromLongLong(watch_purge(&self->seg, budget));
}

PyObject *tables_waiters_format(Tables *self, PyObject *arg) {
    i64 nb;
    PURGATORY(self);
    if (arg_i64(arg, &nb) < 0) return NULL;
    if (nb < 2 || (nb & (nb - 1)) || WAIT_HEADER + nb * WAIT_BUCKET_WORDS > self->seg.waiters_words)
        return PyErr_Format(PyExc_ValueError, "waiters_format: %lld buckets do not fit",
                            (long long)nb);
    waiters_format(&self->seg, nb);
    Py_RETURN_NONE;
}

/* a handle of this service, and an entry of its waiter table (or -1): 0, or -1 raised */
static int outcome_args(Tables *t, i64 h, i64 e) {
    if (h < 0 || HANDLE_SLOT(h) >= seg_capacity(&t->seg) || e < -1 ||
            e >= t->seg.waiters[WA_NBUCKETS] * WAIT_WAYS) {
        PyErr_SetString(PyExc_ValueError, "not a handle of this service, or a bad entry");
        return -1;
    }
    return 0;
}

PyObject *tables_outcome_watch(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h, ring, gs, out;
    PURGATORY(self);
    NARGS(2, "outcome_watch");
    if (arg_i64(args[0], &h) < 0 || arg_i64(args[1], &ring) < 0 || outcome_args(self, h, -1) < 0)
        return NULL;
    if (ring >= self->seg.nrings) return PyErr_Format(PyExc_ValueError, "outcome_watch: bad ring");
    i64 e = outcome_watch(&self->seg, h, ring, &gs, &out);
    return Py_BuildValue("(LLL)", (long long)gs, (long long)out, (long long)e);
}

PyObject *tables_outcome_state(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h, e, gs, out;
    PURGATORY(self);
    NARGS(2, "outcome_state");
    if (arg_i64(args[0], &h) < 0 || arg_i64(args[1], &e) < 0 || outcome_args(self, h, e) < 0)
        return NULL;
    outcome_state(&self->seg, h, e, &gs, &out);
    return Py_BuildValue("(LL)", (long long)gs, (long long)out);
}

PyObject *tables_waiter_release(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h, e;
    PURGATORY(self);
    NARGS(2, "waiter_release");
    if (arg_i64(args[0], &h) < 0 || arg_i64(args[1], &e) < 0 || outcome_args(self, h, e) < 0)
        return NULL;
    if (e >= 0) waiter_release(&self->seg, e, h);
    Py_RETURN_NONE;
}

/* ---- module functions ----------------------------------------------------------------- */
/* outq_wait(ring words, timeout_s) -> whether records were waiting (else it slept) */
static PyObject *py_outq_wait(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf w;
    NARGS(2, "outq_wait");
    double t = PyFloat_AsDouble(args[1]);
    if (t == -1.0 && PyErr_Occurred()) return NULL;
    if (i64buf_get(args[0], &w, 1) < 0) return NULL;
    if (w.n < RING_HEADER_WORDS) {
        i64buf_release(&w);
        return PyErr_Format(PyExc_ValueError, "outq_wait: not a ring");
    }
    int more;
    Py_BEGIN_ALLOW_THREADS
    more = outq_wait(w.p, t);
    Py_END_ALLOW_THREADS
    i64buf_release(&w);
    return PyBool_FromLong(more);
}

/* outq_ring(ring words): wake the ring's listener (its client is closing) */
static PyObject *py_outq_ring(PyObject *m, PyObject *arg) {
    I64Buf w;
    if (i64buf_get(arg, &w, 1) < 0) return NULL;
    if (w.n >= RING_HEADER_WORDS) outq_ring(w.p);
    i64buf_release(&w);
    Py_RETURN_NONE;
}

PyMethodDef shmwheel_purgatory_methods[] = {
    METHOD_O("outq_ring", py_outq_ring,
        "outq_ring(ring words): ring the bell of an outcome ring (wakes its listener)."),
    METHOD_O("key_id", shmwheel_key_id,
        "key_id(key) -> the 64-bit id of a str, bytes or int key in the watch lists (a hash "
        "of its msgpack encoding; TypeError / ValueError for what cannot be a key)."),
    METHOD_FAST("outq_wait", py_outq_wait,
        "outq_wait(ring words, timeout_s) -> True if outcomes were waiting, else after "
        "sleeping until a freer rang the bell or the timeout passed (GIL released)."),
    METHODS_END,
};
