/* ring_py.c: Python's face of the rings (ring.h): push, peek, consume and count records
 * of any ring of the segment, for the coordinator, reaper, executors and tests. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "atomics.h"
#include "pybuf.h"
#include "ring.h"

#include "tables.h"
#include "pymethods.h"

static int ring_from(PyObject *o, i64 record, I64Buf *b, Ring *r) {
    if (i64buf_get(o, b, 1) < 0) return -1;
    i64 cap = record > 0 ? (b->n - RING_HEADER_WORDS) / record : 0;
    if (record < 1 || cap < 2 || (cap & (cap - 1))) {
        i64buf_release(b);
        PyErr_SetString(PyExc_ValueError, "not a ring of that record size");
        return -1;
    }
    r->w = b->p;
    r->cap = cap;
    r->record = record;
    return 0;
}

static PyObject *py_ring_push(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf rb, recs;
    Ring r;
    i64 record, n;
    NARGS(4, "ring_push");
    if (arg_i64(args[1], &record) < 0 || arg_i64(args[3], &n) < 0) return NULL;
    if (ring_from(args[0], record, &rb, &r) < 0) return NULL;
    if (i64buf_get(args[2], &recs, 0) < 0) { i64buf_release(&rb); return NULL; }
    i64 done = -1;
    if (n < 0 || n * record > recs.n) PyErr_SetString(PyExc_ValueError, "n out of range");
    else done = ring_push(&r, recs.p, n);
    i64buf_release(&recs);
    i64buf_release(&rb);
    return done < 0 ? NULL : PyLong_FromLongLong(done);
}

static PyObject *py_ring_peek(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf rb, out;
    Ring r;
    i64 record, limit, seq0;
    NARGS(4, "ring_peek");
    if (arg_i64(args[1], &record) < 0 || arg_i64(args[3], &limit) < 0) return NULL;
    if (ring_from(args[0], record, &rb, &r) < 0) return NULL;
    if (i64buf_get(args[2], &out, 1) < 0) { i64buf_release(&rb); return NULL; }
    if (limit > out.n / record) limit = out.n / record;
    i64 n = ring_peek(&r, out.p, limit, &seq0);
    i64buf_release(&out);
    i64buf_release(&rb);
    return Py_BuildValue("(LL)", (long long)seq0, (long long)n);
}

static PyObject *py_ring_consume(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf rb;
    Ring r;
    i64 record, n, tail;
    NARGS(3, "ring_consume");
    if (arg_i64(args[1], &record) < 0 || arg_i64(args[2], &n) < 0) return NULL;
    if (ring_from(args[0], record, &rb, &r) < 0) return NULL;
    i64 avail = ring_avail(&r, &tail);
    if (n < 0 || (avail >= 0 && n > avail)) n = -1;   /* never past head */
    else if (avail < 0) ring_store_release(&r.w[RING_TAIL], ring_load_acquire(&r.w[RING_HEAD]));
    else ring_consume(&r, n);
    i64buf_release(&rb);
    if (n < 0) return PyErr_Format(PyExc_ValueError, "cannot consume past the head");
    Py_RETURN_NONE;
}

static PyObject *py_ring_pending(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf rb;
    Ring r;
    i64 record, tail;
    NARGS(2, "ring_pending");
    if (arg_i64(args[1], &record) < 0) return NULL;
    if (ring_from(args[0], record, &rb, &r) < 0) return NULL;
    i64 n = ring_avail(&r, &tail);
    i64buf_release(&rb);
    return PyLong_FromLongLong(n);
}

/* The reaper (the dispatch ring's producer) takes records over from a stuck executor
 * (ring.h, dispatch_take). */
static PyObject *py_dispatch_take(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf rb, out;
    Ring r;
    i64 from;
    NARGS(3, "dispatch_take");
    if (arg_i64(args[1], &from) < 0) return NULL;
    if (ring_from(args[0], DISPATCH_RECORD, &rb, &r) < 0) return NULL;
    if (i64buf_get(args[2], &out, 1) < 0) { i64buf_release(&rb); return NULL; }
    i64 taken = dispatch_take(&r, from, out.p, out.n);
    i64buf_release(&out);
    i64buf_release(&rb);
    return PyLong_FromLongLong(taken);
}

/* word_or / word_and(words, index, bits) -> the word before: one atomic read-modify-write
 * of a shared word that more than one process updates bit by bit (the header's W_READY:
 * the coordinator and the reaper each set their bit while starting at the same moment; a
 * plain read-then-write lost one of the two). */
static PyObject *word_update(PyObject *const *args, Py_ssize_t nargs, int or, const char *name) {
    I64Buf w;
    i64 index, bits;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "%s takes 3 arguments", name);
    if (arg_i64(args[1], &index) < 0 || arg_i64(args[2], &bits) < 0) return NULL;
    if (i64buf_get(args[0], &w, 1) < 0) return NULL;
    if (index < 0 || index >= w.n) {
        i64buf_release(&w);
        return PyErr_Format(PyExc_IndexError, "%s: word %lld of %lld", name, (long long)index,
                            (long long)w.n);
    }
    i64 old = or ? __atomic_fetch_or(&w.p[index], bits, __ATOMIC_SEQ_CST)
                 : __atomic_fetch_and(&w.p[index], bits, __ATOMIC_SEQ_CST);
    i64buf_release(&w);
    return PyLong_FromLongLong(old);
}

static PyObject *py_word_or(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return word_update(args, nargs, 1, "word_or");
}

static PyObject *py_word_and(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return word_update(args, nargs, 0, "word_and");
}

PyMethodDef shmwheel_slot_methods[] = {
    METHOD_FAST("dispatch_take", py_dispatch_take,
        "dispatch_take(ring, from_seq, out) -> records the reaper claimed from a stuck "
        "executor's dispatch ring (from from_seq on, stopping at the first claimed already); "
        "their handles are in out[:n]."),
    METHOD_FAST("ring_push", py_ring_push,
        "ring_push(ring, record, recs, n) -> records published (as many of n as fit)."),
    METHOD_FAST("ring_peek", py_ring_peek,
        "ring_peek(ring, record, out, limit) -> (first seq, count); count -1: corrupt head."),
    METHOD_FAST("ring_consume", py_ring_consume,
        "ring_consume(ring, record, n): done with n records; with a corrupt head, skip to it."),
    METHOD_FAST("ring_pending", py_ring_pending,
        "ring_pending(ring, record) -> records published, not consumed; -1 if corrupt."),
    METHOD_FAST("word_or", py_word_or,
        "word_or(words, index, bits) -> the word before words[index] |= bits, atomically."),
    METHOD_FAST("word_and", py_word_and,
        "word_and(words, index, mask) -> the word before words[index] &= mask, atomically."),
    METHODS_END,
};

