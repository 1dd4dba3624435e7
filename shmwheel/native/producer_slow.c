/* producer_slow.c: the primitives the Python slow paths of a Client build on (the
 * private methods _take, _submit, _publish, ... of Producer; service/caller/client.py and
 * service/caller/batch.py call them). The hot paths are producer.c's and watch.c's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "atomics.h"
#include "producer.h"
#include "wheel.h"

/* caller holds the segment lock */
PyObject *producer_restock_locked(Producer *p, PyObject *unused) {
    if (!producer_bound(p)) return NULL;
    i64 want = p->batch - p->ncache;
    if (want > 0) p->ncache += (int)slot_reserve(&p->seg, p->ring_index, &p->cache[p->ncache], want);
    want = p->batch - p->nblocks;
    if (want > 0)
        p->nblocks += (int)arena_reserve(&p->seg, 0, p->ring_index, &p->blocks[p->nblocks], want);
    return Py_BuildValue("(ii)", p->ncache, p->nblocks);
}

PyObject *producer_take(Producer *p, PyObject *unused) {
    if (!producer_bound(p)) return NULL;
    if (!p->ncache && producer_restock(p) < 0) return NULL;
    return PyLong_FromLongLong(p->ncache ? p->cache[--p->ncache] : -1);
}

PyObject *producer_give_back(Producer *p, PyObject *arg) {
    i64 h = PyLong_AsLongLong(arg);
    if (h == -1 && PyErr_Occurred()) return NULL;
    if (p->ncache == CACHE_MAX) Py_RETURN_FALSE;   /* the caller frees it instead */
    p->cache[p->ncache++] = h;
    Py_RETURN_TRUE;
}

/* _submit(h, meta, word, deadline) -> published: write the record, SUBMITTED, push */
PyObject *producer_submit_one(Producer *p, PyObject *args) {
    long long h, meta, word, deadline;
    if (!PyArg_ParseTuple(args, "LLLL:_submit", &h, &meta, &word, &deadline)) return NULL;
    if (!producer_bound(p)) return NULL;
    producer_write_slot(p, h, meta, word, deadline);
    int ok = producer_push(p, h, CHECK_SUBMIT);
    if (ok) relaxed_store(&p->counters[C_SCHEDULED], ++p->scheduled);
    return PyBool_FromLong(ok);
}

/* _write_many(handles, metas, words, deadlines): records of a batch, all SUBMITTED */
PyObject *producer_write_many(Producer *p, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf b[4];
    int got = 0;
    PyObject *ret = NULL;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "_write_many takes 4 arrays");
    if (!producer_bound(p)) return NULL;
    for (; got < 4; got++)
        if (i64buf_get(args[got], &b[got], 0) < 0) goto done;
    if (b[1].n < b[0].n || b[2].n < b[0].n || b[3].n < b[0].n) {
        PyErr_SetString(PyExc_ValueError, "arrays of different lengths");
        goto done;
    }
    for (Py_ssize_t i = 0; i < b[0].n; i++) producer_write_slot(p, b[0].p[i], b[1].p[i], b[2].p[i], b[3].p[i]);
    ret = Py_None;
    Py_INCREF(ret);
done:
    while (got > 0) i64buf_release(&b[--got]);
    return ret;
}

/* _publish(handles, check) -> how many of them (from the first) fit on the ring */
PyObject *producer_publish(Producer *p, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf hs;
    i64 check;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "_publish(handles, check)");
    if (!producer_bound(p) || i64buf_get(args[0], &hs, 0) < 0) return NULL;
    check = PyLong_AsLongLong(args[1]);
    if (check == -1 && PyErr_Occurred()) { i64buf_release(&hs); return NULL; }
    i64 done = 0, recs[PRODUCER_RECORD * 64];
    while (done < hs.n) {
        i64 k = hs.n - done < 64 ? hs.n - done : 64;
        for (i64 i = 0; i < k; i++) {
            recs[PRODUCER_RECORD * i + PR_HANDLE] = hs.p[done + i];
            recs[PRODUCER_RECORD * i + PR_CHECK] = hs.p[done + i] ^ check;
        }
        i64 pushed = ring_push(&p->ring, recs, k);
        done += pushed;
        if (pushed < k) break;
    }
    if (check == CHECK_SUBMIT) {
        p->scheduled += done;
        relaxed_store(&p->counters[C_SCHEDULED], p->scheduled);
    }
    i64buf_release(&hs);
    return PyLong_FromLongLong(done);
}

/* _unsubmit(h) -> True if a written but unpublished slot is RESERVED again (ours); False
 * if a cancel won it meanwhile (its cancel record retires it) */
PyObject *producer_unsubmit(Producer *p, PyObject *arg) {
    i64 h = PyLong_AsLongLong(arg);
    if ((h == -1 && PyErr_Occurred()) || !producer_bound(p)) return NULL;
    return PyBool_FromLong(slot_unsubmit(&p->seg, h));
}

/* _push(h, check) -> published (a schedule record is counted once it is) */
PyObject *producer_push_one(Producer *p, PyObject *args) {
    long long h, check;
    if (!PyArg_ParseTuple(args, "LL:_push", &h, &check) || !producer_bound(p)) return NULL;
    int ok = producer_push(p, h, check);
    if (ok && check == CHECK_SUBMIT) relaxed_store(&p->counters[C_SCHEDULED], ++p->scheduled);
    return PyBool_FromLong(ok);
}

PyObject *producer_release(Producer *p, PyObject *unused) {
    holds_release(&p->holds);
    p->ncache = p->nblocks = 0;
    Py_RETURN_NONE;
}
