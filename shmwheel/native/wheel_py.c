/* wheel_py.c: thin Python bindings of the wheel (wheel.h) for the in-process core,
 * shmwheel/wheel/core.py. Each takes the wheel array `mem` as a writable, C-contiguous
 * int64 buffer (a numpy array or a memoryview of one; a memoryview is the cheapest to
 * borrow) and borrows it for the length of the call only.
 *
 * What a caller could get wrong cheaply is checked on every call: argument count and
 * types, the lengths of the output arrays, and the wheel header (magic, layout version,
 * and that every table it describes lies inside the buffer, so a bad header cannot make
 * the kernels index outside it). The node links themselves are trusted: the in-process
 * core is the only writer of its array. None of these take a lock; the caller serialises
 * access to one wheel (WheelCore is not thread-safe). Long batches run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pybuf.h"
#include "wheel.h"
#include "pymethods.h"

/* batches at least this long release the GIL while they run (below it the release costs
 * more than it lets other threads gain) */
#define NOGIL_MIN 1024

/* ---- argument helpers ------------------------------------------------------------------- */

static int nargs_ok(const char *fn, Py_ssize_t nargs, Py_ssize_t want, const char *names) {
    if (nargs == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%s), got %zd", fn, want, names,
                 nargs);
    return 0;
}

/* The pending exception, taken out of the error indicator (a new reference). */
static PyObject *take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

/* Borrow argument `arg` of `fn` as int64 words; -1 with a TypeError naming both. */
static int borrow(PyObject *o, I64Buf *b, int writable, const char *fn, const char *arg) {
    if (i64buf_get(o, b, writable) == 0) return 0;
    PyObject *why = take_exception();
    if (why)
        PyErr_Format(PyExc_TypeError, "%s(): '%s' must be a %sC-contiguous int64 array, got "
                     "%.100s (%S)", fn, arg, writable ? "writable " : "", Py_TYPE(o)->tp_name,
                     why);
    else
        PyErr_Format(PyExc_TypeError, "%s(): '%s' must be a %sC-contiguous int64 array, got "
                     "%.100s", fn, arg, writable ? "writable " : "", Py_TYPE(o)->tp_name);
    Py_XDECREF(why);
    return -1;
}

/* The header describes a wheel of this layout version whose tables all lie inside the n
 * words of the buffer (checked without overflow: every size is first bounded by n). */
static int header_ok(const i64 *m, Py_ssize_t n) {
    if (n < WHEEL_HEADER_WORDS || m[H_MAGIC] != WHEEL_MAGIC ||
        m[H_VERSION] != WHEEL_LAYOUT_VERSION)
        return 0;
    i64 total = m[H_TOTAL], levels = m[H_LEVELS], wheel = m[H_WHEEL], nbuckets = m[H_BUCKETS];
    i64 words = m[H_WORDS], cap = m[H_CAPACITY], nb = m[H_SENTINELS];
    if (total < WHEEL_HEADER_WORDS || total > (i64)n) return 0;
    if (levels < 1 || levels > 64 || wheel < 2 || wheel > total || nbuckets != 2 * wheel ||
        words != (nbuckets + 63) / 64 || m[H_TICK] < 1)
        return 0;
    if (nbuckets > total / levels || nb != levels * nbuckets || cap < 0 || cap > total) return 0;
    if (m[H_FREE] < -1 || m[H_FREE] >= cap) return 0;
#define TABLE_OK(off, len) \
    ((off) >= WHEEL_HEADER_WORDS && (off) <= total && (len) <= total - (off))
    i64 ot = m[H_OFF_TICKS], ob = m[H_OFF_BEXP], obits = m[H_OFF_BITS], on = m[H_OFF_NODES];
    if (!TABLE_OK(ot, levels) || !TABLE_OK(ob, nb) || !TABLE_OK(obits, levels * words))
        return 0;
    if (nb + cap > total / NODE_WORDS || !TABLE_OK(on, (nb + cap) * NODE_WORDS)) return 0;
#undef TABLE_OK
    for (i64 k = 0; k < levels; k++)
        if (m[ot + k] < 1) return 0; /* a divisor */
    /* the top interval fits (wheel.c keeps the clock within it of either end of int64) */
    if (m[ot + levels - 1] > ((i64)1 << 61) / wheel) return 0;
    return 1;
}

int shmwheel_wheel_header_ok(const i64 *m, Py_ssize_t n) { return header_ok(m, n); }

/* Borrow argument 0 as the wheel: writable int64, formatted. */
static int borrow_wheel(PyObject *o, I64Buf *b, const char *fn) {
    if (borrow(o, b, 1, fn, "mem") < 0) return -1;
    if (header_ok(b->p, b->n)) return 0;
    i64buf_release(b);
    PyErr_Format(PyExc_ValueError,
                 "%s(): 'mem' is not a formatted shmwheel wheel array of layout version %d "
                 "(bad magic, version or table sizes)", fn, (int)WHEEL_LAYOUT_VERSION);
    return -1;
}

/* Borrow a writable flags array: int64 words or bytes (numpy bool, uint8, int8); the item
 * size in *itemsize. -1 with a TypeError naming the argument. */
static int borrow_flags(PyObject *o, Py_buffer *v, Py_ssize_t *itemsize, const char *fn,
                        const char *arg) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) == 0) {
        const char *f = v->format ? v->format : "B";
        if (*f == '<' || *f == '=' || *f == '@' || *f == '|') f++; /* host order only */
        int ok = f[1] == 0 && ((v->itemsize == 8 && (*f == 'q' || *f == 'l')) ||
                               (v->itemsize == 1 && (*f == '?' || *f == 'B' || *f == 'b')));
        if (ok) {
            *itemsize = v->itemsize;
            return 0;
        }
        PyBuffer_Release(v);
    }
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s(): '%s' must be a writable C-contiguous int64, bool or "
                 "uint8 array, got %.100s", fn, arg, Py_TYPE(o)->tp_name);
    return -1;
}

static int as_i64(PyObject *o, i64 *v, const char *fn, const char *arg) {
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_OverflowError, "%s(): '%s' does not fit in int64", fn, arg);
        } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s(): '%s' must be an integer, not %.100s", fn, arg,
                         Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    *v = (i64)x;
    return 0;
}

/* Release what a binding borrowed (NULL: nothing there; a buffer never borrowed, zeroed,
 * is released as nothing too). */
static void release_all(I64Buf *a, I64Buf *b, I64Buf *c) {
    I64Buf *held[] = {c, b, a};
    for (int i = 0; i < 3; i++)
        if (held[i]) i64buf_release(held[i]);
}

/* A binding fn(mem, arg) -> box(op(mem, arg)) for one int64 argument, named `arg` in
 * errors (`names`: "mem, <arg>", for the count error). */
static PyObject *call_one(PyObject *const *args, Py_ssize_t nargs, const char *fn,
                          const char *names, const char *arg, i64 (*op)(i64 *, i64),
                          PyObject *(*box)(long long)) {
    I64Buf m;
    i64 x = 0;
    if (!nargs_ok(fn, nargs, 2, names) || as_i64(args[1], &x, fn, arg) ||
        borrow_wheel(args[0], &m, fn))
        return NULL;
    i64 r = op(m.p, x);
    i64buf_release(&m);
    return box(r);
}

/* ---- bindings ---------------------------------------------------------------------------- */

PyDoc_STRVAR(reset_doc,
"wheel_reset(mem) -> None\n\n"
"Empty the wheel: every bucket empty, every slot free (generation 0), clock unchanged.\n"
"The header must be written (wheel_layout / WheelCore.format).");

static PyObject *py_wheel_reset(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf m;
    if (!nargs_ok("wheel_reset", nargs, 1, "mem") || borrow_wheel(args[0], &m, "wheel_reset"))
        return NULL;
    wheel_reset(m.p);
    i64buf_release(&m);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(add_free_doc,
"wheel_add_free_slots(mem, first) -> None\n\n"
"Push slots [first, capacity) onto the free stack, lowest slot on top (after growing\n"
"the entry table). 0 <= first <= capacity.");

static PyObject *py_wheel_add_free_slots(PyObject *self, PyObject *const *args,
                                         Py_ssize_t nargs) {
    const char *fn = "wheel_add_free_slots";
    I64Buf m;
    i64 first = 0;
    if (!nargs_ok(fn, nargs, 2, "mem, first") || as_i64(args[1], &first, fn, "first"))
        return NULL;
    if (borrow_wheel(args[0], &m, fn)) return NULL;
    if (first < 0 || first > m.p[H_CAPACITY]) {
        PyErr_Format(PyExc_ValueError, "%s(): first = %lld is outside [0, capacity = %lld]",
                     fn, (long long)first, (long long)m.p[H_CAPACITY]);
        i64buf_release(&m);
        return NULL;
    }
    wheel_add_free_slots(m.p, first);
    i64buf_release(&m);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(insert_doc,
"wheel_insert(mem, deadline) -> int\n\n"
"Insert one entry: its handle (>= 0), or INS_ALREADY_DUE (deadline rounded up to the\n"
"tick is <= the clock), INS_OUT_OF_RANGE (beyond the top level) or INS_NO_SLOT (no free\n"
"slot); nothing is inserted in those cases.");

static PyObject *py_wheel_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return call_one(args, nargs, "wheel_insert", "mem, deadline", "deadline", wheel_insert,
                    PyLong_FromLongLong);
}

PyDoc_STRVAR(insert_many_doc,
"wheel_insert_many(mem, deadlines, out) -> int\n\n"
"wheel_insert for each deadlines[i], writing the handle or INS_ALREADY_DUE /\n"
"INS_OUT_OF_RANGE to out[i] (len(out) >= len(deadlines)). Stops at the first entry for\n"
"which no slot is free and returns how many were processed (== len(deadlines) when all\n"
"were); out[i] beyond that count is not written.");

static PyObject *py_wheel_insert_many(PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs) {
    const char *fn = "wheel_insert_many";
    I64Buf m = {0}, d = {0}, o = {0};   /* releasing a buffer never borrowed does nothing */
    PyObject *r = NULL;
    if (!nargs_ok(fn, nargs, 3, "mem, deadlines, out") || borrow_wheel(args[0], &m, fn) ||
        borrow(args[1], &d, 0, fn, "deadlines") || borrow(args[2], &o, 1, fn, "out"))
        goto out;
    if (o.n < d.n) {
        PyErr_Format(PyExc_ValueError, "%s(): 'out' has %zd words, deadlines needs %zd", fn,
                     o.n, d.n);
        goto out;
    }
    i64 n = d.n, i = 0;
    PyThreadState *ts = n >= NOGIL_MIN ? PyEval_SaveThread() : NULL;
    for (; i < n; i++) {
        i64 h = wheel_insert(m.p, d.p[i]);
        if (h == INS_NO_SLOT) break;
        o.p[i] = h;
    }
    if (ts) PyEval_RestoreThread(ts);
    r = PyLong_FromLongLong(i);
out:
    release_all(&m, &d, &o);
    return r;
}

PyDoc_STRVAR(cancel_doc,
"wheel_cancel(mem, handle) -> bool\n\n"
"Unlink and free a PENDING entry of the handle's generation in O(1); False (and nothing\n"
"done) for a stale, fired, unknown, negative or out-of-range handle.");

static i64 cancel_one(i64 *mem, i64 handle) { return wheel_cancel(mem, handle); }
static PyObject *as_bool(long long ok) { return PyBool_FromLong((long)ok); }

static PyObject *py_wheel_cancel(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return call_one(args, nargs, "wheel_cancel", "mem, handle", "handle", cancel_one, as_bool);
}

PyDoc_STRVAR(cancel_many_doc,
"wheel_cancel_many(mem, handles, out) -> int\n\n"
"wheel_cancel for each handles[i]; out[i] = 1 if it cancelled, else 0. `out` is an int64,\n"
"bool or uint8 array with len(out) >= len(handles) (bool is the cheapest: 1 byte each).\n"
"Returns the number cancelled.");

static PyObject *py_wheel_cancel_many(PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs) {
    const char *fn = "wheel_cancel_many";
    I64Buf m = {0}, h = {0};
    Py_buffer o = {0};   /* releasing a buffer never borrowed does nothing */
    Py_ssize_t size = 1;
    PyObject *r = NULL;
    if (!nargs_ok(fn, nargs, 3, "mem, handles, out") || borrow_wheel(args[0], &m, fn) ||
        borrow(args[1], &h, 0, fn, "handles") || borrow_flags(args[2], &o, &size, fn, "out"))
        goto out;
    if (o.len / size < h.n) {
        PyErr_Format(PyExc_ValueError, "%s(): 'out' has %zd items, handles needs %zd", fn,
                     o.len / size, h.n);
        goto out;
    }
    i64 n = h.n, done = 0;
    PyThreadState *ts = n >= NOGIL_MIN ? PyEval_SaveThread() : NULL;
    for (i64 i = 0; i < n; i++) {
        int ok = wheel_cancel(m.p, h.p[i]);
        if (size == 1)   /* a numpy bool is one byte holding 0 or 1 */
            ((unsigned char *)o.buf)[i] = (unsigned char)ok;
        else
            ((i64 *)o.buf)[i] = ok;
        done += ok;
    }
    if (ts) PyEval_RestoreThread(ts);
    r = PyLong_FromLongLong(done);
out:
    PyBuffer_Release(&o);
    release_all(&m, &h, NULL);
    return r;
}

PyDoc_STRVAR(release_doc,
"wheel_release(mem, slots) -> int\n\n"
"Free the slots that wheel_advance emitted with release=False (state FIRING); others\n"
"(out of range, already released) are skipped. Returns the count freed.");

static PyObject *py_wheel_release(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "wheel_release";
    I64Buf m, s;
    if (!nargs_ok(fn, nargs, 2, "mem, slots") || borrow_wheel(args[0], &m, fn)) return NULL;
    if (borrow(args[1], &s, 0, fn, "slots")) {
        i64buf_release(&m);
        return NULL;
    }
    PyThreadState *ts = s.n >= NOGIL_MIN ? PyEval_SaveThread() : NULL;
    i64 n = wheel_release(m.p, s.p, s.n);
    if (ts) PyEval_RestoreThread(ts);
    i64buf_release(&s);
    i64buf_release(&m);
    return PyLong_FromLongLong(n);
}

PyDoc_STRVAR(next_wakeup_doc,
"wheel_next_wakeup(mem) -> int\n\n"
"When the wheel next has work: the expiration of the earliest level-0 bucket, or the\n"
"moment a higher bucket becomes eligible for pre-cascading (one tick of its level before\n"
"it expires), whichever is first. A value <= the clock means work is pending now;\n"
"NEVER (INT64_MAX) when the wheel is empty.");

static PyObject *py_wheel_next_wakeup(PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs) {
    I64Buf m;
    if (!nargs_ok("wheel_next_wakeup", nargs, 1, "mem") ||
        borrow_wheel(args[0], &m, "wheel_next_wakeup"))
        return NULL;
    i64 t = wheel_next_wakeup(m.p);
    i64buf_release(&m);
    return PyLong_FromLongLong(t);
}

PyDoc_STRVAR(cascade_doc,
"wheel_cascade_step(mem, budget) -> int\n\n"
"Pre-cascade up to `budget` entries from each level's next bucket (virtual id c_k + 1)\n"
"into the level below, top level first; a CANCELLED entry met there is retired (freed)\n"
"instead. Returns the entries handled (moved or retired): 0 means no pre-cascade work\n"
"is pending.");

static i64 cascade_step(i64 *mem, i64 budget) {
    PyThreadState *ts = budget >= NOGIL_MIN ? PyEval_SaveThread() : NULL;
    i64 n = wheel_cascade_step(mem, budget, NULL, NULL);
    if (ts) PyEval_RestoreThread(ts);
    return n;
}

static PyObject *py_wheel_cascade_step(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs) {
    return call_one(args, nargs, "wheel_cascade_step", "mem, budget", "budget", cascade_step,
                    PyLong_FromLongLong);
}

PyDoc_STRVAR(advance_doc,
"wheel_advance(mem, now, out, release) -> int\n\n"
"Advance the clock to `now` (rounded down to the tick), writing the slots that came due\n"
"to `out` (int64), in expiration order of their buckets. Their state becomes FIRING; with\n"
"`release` (truthy) they are freed at once. A higher-level bucket whose expiration has\n"
"arrived is cascaded in full first (overload only). CANCELLED entries are retired, not\n"
"written. If `out` fills, the clock stops at the bucket being flushed and the count\n"
"equals len(out): call again to continue. Returns the number of slots written.");

static PyObject *py_wheel_advance(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "wheel_advance";
    I64Buf m, o;
    i64 now = 0;
    if (!nargs_ok(fn, nargs, 4, "mem, now, out, release") || as_i64(args[1], &now, fn, "now"))
        return NULL;
    int release = PyObject_IsTrue(args[3]);
    if (release < 0 || borrow_wheel(args[0], &m, fn)) return NULL;
    if (borrow(args[2], &o, 1, fn, "out")) {
        i64buf_release(&m);
        return NULL;
    }
    PyThreadState *ts = o.n >= NOGIL_MIN ? PyEval_SaveThread() : NULL;
    i64 n = wheel_advance(m.p, now, o.p, o.n, release, NULL, NULL);
    if (ts) PyEval_RestoreThread(ts);
    i64buf_release(&o);
    i64buf_release(&m);
    return PyLong_FromLongLong(n);
}

PyMethodDef shmwheel_wheel_methods[] = {
    METHOD_FAST("wheel_reset", py_wheel_reset, reset_doc),
    METHOD_FAST("wheel_add_free_slots", py_wheel_add_free_slots, add_free_doc),
    METHOD_FAST("wheel_insert", py_wheel_insert, insert_doc),
    METHOD_FAST("wheel_insert_many", py_wheel_insert_many, insert_many_doc),
    METHOD_FAST("wheel_cancel", py_wheel_cancel, cancel_doc),
    METHOD_FAST("wheel_cancel_many", py_wheel_cancel_many, cancel_many_doc),
    METHOD_FAST("wheel_release", py_wheel_release, release_doc),
    METHOD_FAST("wheel_next_wakeup", py_wheel_next_wakeup, next_wakeup_doc),
    METHOD_FAST("wheel_cascade_step", py_wheel_cascade_step, cascade_doc),
    METHOD_FAST("wheel_advance", py_wheel_advance, advance_doc),
    METHODS_END,
};
