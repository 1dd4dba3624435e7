/* slots_py.c: Python's face of the slot state machine (`Tables`; the rings' is ring_py.c).
 *
 * `Tables(wheel, side, arena, adata)` holds one attachment's views of a service's tables.
 * Every method must be called with the segment lock held (the
 * Python side's `ServiceMemory.locked()`); none of them releases the GIL, so within one
 * process they are also atomic with respect to other threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "atomics.h"
#include "pybuf.h"
#include "ring.h"
#include "slots.h"
#include "wheel.h"

#include "tables.h"
#include "pytype.h"
#include "pymethods.h"

static int tables_init(Tables *self, PyObject *args, PyObject *kw) {
    PyObject *wheel, *side, *arena, *adata;
    if (!PyArg_ParseTuple(args, "OOOO:Tables", &wheel, &side, &arena, &adata)) return -1;
    holds_release(&self->holds);
    if (holds_add(&self->holds, wheel, &self->seg.mem, NULL) < 0 ||
        holds_add(&self->holds, side, &self->seg.side, NULL) < 0 ||
        holds_add(&self->holds, arena, &self->seg.arena, NULL) < 0 ||
        holds_add(&self->holds, adata, &self->seg.adata, NULL) < 0) {
        holds_release(&self->holds);
        return -1;
    }
    return 0;
}

static void tables_dealloc(Tables *self) {
    holds_release(&self->holds);
    self->seg.jb = NULL;
    Py_CLEAR(self->journal);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int open_or_raise(Tables *t) {
    if (t->holds.n == 0) {
        PyErr_SetString(PyExc_ValueError, "the segment tables are closed");
        return -1;
    }
    return 0;
}


static PyObject *tables_close(Tables *self, PyObject *unused) {
    holds_release(&self->holds);
    Py_RETURN_NONE;
}

int arg_i64(PyObject *o, i64 *v) {
    *v = PyLong_AsLongLong(o);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

int nargs_ok(Py_ssize_t n, Py_ssize_t want, const char *name) {
    if (n == want) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, n);
    return -1;
}

static PyObject *tables_reserve(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 ring;
    I64Buf out;
    OPEN(self);
    NARGS(2, "reserve");
    if (arg_i64(args[0], &ring) < 0 || i64buf_get(args[1], &out, 1) < 0) return NULL;
    i64 n = slot_reserve(&self->seg, ring, out.p, out.n);
    i64buf_release(&out);
    return PyLong_FromLongLong(n);
}

static PyObject *tables_arena_alloc(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 cls, slot;
    OPEN(self);
    NARGS(2, "arena_alloc");
    if (arg_i64(args[0], &cls) < 0 || arg_i64(args[1], &slot) < 0) return NULL;
    if (cls < 0 || cls >= ARENA_CLASSES || slot < 0 || slot >= seg_capacity(&self->seg))
        return PyErr_Format(PyExc_ValueError, "arena_alloc(%lld, %lld): out of range",
                            (long long)cls, (long long)slot);
    return PyLong_FromLongLong(arena_alloc(&self->seg, (int)cls, slot));
}

static PyObject *tables_free_payload(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 slot;
    OPEN(self);
    NARGS(1, "free_payload");
    if (arg_i64(args[0], &slot) < 0) return NULL;
    if (slot < 0 || slot >= seg_capacity(&self->seg))
        return PyErr_Format(PyExc_ValueError, "slot %lld out of range", (long long)slot);
    slot_free_payload(&self->seg, slot);
    Py_RETURN_NONE;
}

static PyObject *tables_retire(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 slot;
    OPEN(self);
    NARGS(1, "retire");
    if (arg_i64(args[0], &slot) < 0) return NULL;
    if (slot < 0 || slot >= seg_capacity(&self->seg))
        return PyErr_Format(PyExc_ValueError, "slot %lld out of range", (long long)slot);
    i64 st = GS_STATE(gs_load(gs_word(self->seg.mem, wheel_node(self->seg.mem, slot))));
    if (st != ST_RESERVED)
        return PyErr_Format(PyExc_ValueError, "retire(%lld): only a RESERVED slot (state %lld)",
                            (long long)slot, (long long)st);
    slot_retire(&self->seg, self->seg.mem, slot, TR_RECLAIM);
    Py_RETURN_NONE;
}

/* link_records(recs, n, ring, res) and settle(results, n, res) */
static PyObject *tables_apply(Tables *self, PyObject *const *args, Py_ssize_t nargs, int link) {
    I64Buf recs, res;
    i64 n, ring = 0;
    OPEN(self);
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "wrong number of arguments");
    if (arg_i64(args[1], &n) < 0 || arg_i64(args[2], &ring) < 0) return NULL;
    if (i64buf_get(args[0], &recs, 0) < 0) return NULL;
    if (i64buf_get(args[3], &res, 1) < 0) { i64buf_release(&recs); return NULL; }
    i64 width = link ? PRODUCER_RECORD : RESULT_RECORD;
    int ok = n >= 0 && n * width <= recs.n &&
             res.n >= (link ? LINK_RESULT_WORDS : SETTLE_RESULT_WORDS);
    if (!ok) PyErr_SetString(PyExc_ValueError, "record count or result array out of range");
    else if (link) slot_link_records(&self->seg, recs.p, n, ring, res.p);
    else slot_settle(&self->seg, recs.p, n, ring /* here: now_ms */, res.p);
    i64buf_release(&recs);
    i64buf_release(&res);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tables_link_records(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    return tables_apply(self, args, nargs, 1);
}

static PyObject *tables_settle(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    return tables_apply(self, args, nargs, 0);
}

static PyObject *tables_reclaim(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 ring, producer;
    OPEN(self);
    NARGS(2, "reclaim");
    if (arg_i64(args[0], &ring) < 0 || arg_i64(args[1], &producer) < 0) return NULL;
    return PyLong_FromLongLong(slot_reclaim(&self->seg, ring, producer));
}

/* _reset_hold(h, deadline, ring) -> (code, held) and _reset_put_back(h, ring, held) ->
 * code: a client's reset in two steps (slots.h), for the tests that play other steps
 * between them. Lock-free, like the reset they split. */
static PyObject *tables_reset_hold(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h, deadline, ring, held = 0;
    OPEN(self);
    NARGS(3, "_reset_hold");
    if (arg_i64(args[0], &h) < 0 || arg_i64(args[1], &deadline) < 0 ||
        arg_i64(args[2], &ring) < 0)
        return NULL;
    int code = slot_reset_hold(&self->seg, h, deadline, ring, &held);
    return Py_BuildValue("(iL)", code, (long long)held);
}

static PyObject *tables_reset_put_back(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 h, ring, held;
    OPEN(self);
    NARGS(3, "_reset_put_back");
    if (arg_i64(args[0], &h) < 0 || arg_i64(args[1], &ring) < 0 || arg_i64(args[2], &held) < 0)
        return NULL;
    if (slot_of(&self->seg, h) < 0) return PyErr_Format(PyExc_ValueError, "no such slot");
    return PyLong_FromLong(slot_reset_put_back(&self->seg, h, ring, held));
}

/* format(gen): every slot FREE at generation gen (a recovery, before any process) */
static PyObject *tables_format(Tables *self, PyObject *arg) {
    i64 gen;
    OPEN(self);
    if (arg_i64(arg, &gen) < 0) return NULL;
    if (gen < 0 || gen > GS_GEN_MASK)
        return PyErr_Format(PyExc_ValueError, "format(): generation %lld out of range",
                            (long long)gen);
    slot_format(&self->seg, gen);
    Py_RETURN_NONE;
}

/* install(handles, deadlines, metas, words): the journal's pending timers (slots.h) */
static PyObject *tables_install(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf b[4];
    int got = 0;
    i64 done = -2;
    OPEN(self);
    NARGS(4, "install");
    for (; got < 4; got++)
        if (i64buf_get(args[got], &b[got], 0) < 0) break;
    if (got == 4) {
        if (b[1].n != b[0].n || b[2].n != b[0].n || b[3].n != b[0].n)
            PyErr_SetString(PyExc_ValueError, "install(): arrays of different lengths");
        else
            done = slot_install(&self->seg, b[0].p, b[1].p, b[2].p, b[3].p, b[0].n);
    }
    while (got > 0) i64buf_release(&b[--got]);
    if (done == -2) return NULL;
    if (done < 0)
        return PyErr_Format(PyExc_ValueError, "install(): a handle names a slot out of range "
                            "or taken");
    Py_RETURN_NONE;
}

static PyObject *tables_rebuild(Tables *self, PyObject *unused) {
    OPEN(self);
    return PyLong_FromLongLong(slot_rebuild(&self->seg));
}

/* advance(now, out): fire what is due, writing handles (not slots) to out */
static PyObject *tables_advance(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 now;
    I64Buf out;
    OPEN(self);
    NARGS(2, "advance");
    if (arg_i64(args[0], &now) < 0 || i64buf_get(args[1], &out, 1) < 0) return NULL;
    i64 *mem = self->seg.mem;
    self->seg.jnow = jnow_us();
    i64 n = wheel_advance(mem, now, out.p, out.n, 0, slot_retire_hook, &self->seg);
    for (i64 i = 0; i < n; i++) {   /* our CAS made it FIRING: its generation is stable */
        out.p[i] = HANDLE_MAKE(GS_GEN(gs_load(gs_word(mem, wheel_node(mem, out.p[i])))),
                               out.p[i]);
        i64 flags = META_FIELD(*side_meta(&self->seg, HANDLE_SLOT(out.p[i])), FLAGS);
        if ((flags & FLAG_OP) && !(flags & FLAG_COMPLETED)) self->seg.expired++;
        if (self->seg.jb) slot_journal_fired(&self->seg, out.p[i]);
    }
    i64buf_release(&out);
    return PyLong_FromLongLong(n);
}

/* set_journal(buffer or None): where this attachment records lifecycle events */
static PyObject *tables_set_journal(Tables *self, PyObject *arg) {
    JBuf *jb = NULL;
    if (arg != Py_None && !(jb = shmwheel_jbuf_of(arg))) return NULL;
    Py_XINCREF(arg == Py_None ? NULL : arg);
    Py_CLEAR(self->journal);
    self->journal = arg == Py_None ? NULL : arg;
    self->seg.jb = jb;
    Py_RETURN_NONE;
}

/* journal_fired(handles) -> records written: the FIRED record of each FIRING handle (an
 * operation's COMPLETED or EXPIRED), as advance writes it. For the timers a dead reaper won
 * and did not record (service/reaper.py, recover); the caller holds the segment lock, as advance. */
static PyObject *tables_journal_fired(Tables *self, PyObject *arg) {
    I64Buf hs;
    OPEN(self);
    if (i64buf_get(arg, &hs, 0) < 0) return NULL;
    i64 k = 0;
    self->seg.jnow = jnow_us();
    for (i64 i = 0; i < hs.n; i++)
        if (slot_of(&self->seg, hs.p[i]) < 0) {
            i64buf_release(&hs);
            return PyErr_Format(PyExc_ValueError, "journal_fired: handle %#llx out of range",
                                (unsigned long long)hs.p[i]);
        }
    if (self->seg.jb)
        for (; k < hs.n; k++) slot_journal_fired(&self->seg, hs.p[k]);
    i64buf_release(&hs);
    return PyLong_FromLongLong(k);
}

/* journal_records(recs, n, producer) / journal_settled(results, n): records written */
static PyObject *tables_journal(Tables *self, PyObject *const *args, Py_ssize_t nargs,
                                int producer_records) {
    I64Buf recs;
    i64 n, producer = 0, width = producer_records ? PRODUCER_RECORD : RESULT_RECORD;
    OPEN(self);
    if (nargs != (producer_records ? 3 : 2))
        return PyErr_Format(PyExc_TypeError, "wrong number of arguments");
    if (arg_i64(args[1], &n) < 0 || (producer_records && arg_i64(args[2], &producer) < 0))
        return NULL;
    if (i64buf_get(args[0], &recs, 0) < 0) return NULL;
    i64 k = -1;
    if (n < 0 || n * width > recs.n)
        PyErr_SetString(PyExc_ValueError, "record count out of range");
    else if (producer_records)
        k = slot_journal_records(&self->seg, recs.p, n, producer);
    else
        k = slot_journal_settled(&self->seg, recs.p, n);
    i64buf_release(&recs);
    return k < 0 ? NULL : PyLong_FromLongLong(k);
}

static PyObject *tables_journal_records(Tables *self, PyObject *const *args, Py_ssize_t n) {
    return tables_journal(self, args, n, 1);
}

static PyObject *tables_journal_settled(Tables *self, PyObject *const *args, Py_ssize_t n) {
    return tables_journal(self, args, n, 0);
}

/* set_anchors(anchors, live): the retention's tables (int64 views of the segment: the
 * anchors are int32 per slot, packed two to a word) */
static PyObject *tables_set_anchors(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    OPEN(self);
    NARGS(2, "set_anchors");
    if (self->seg.anchor) return PyErr_Format(PyExc_ValueError, "anchors are set already");
    i64 *a, *l;
    Py_ssize_t na, nl;
    if (holds_add(&self->holds, args[0], &a, &na) < 0) return NULL;
    if (holds_add(&self->holds, args[1], &l, &nl) < 0) return NULL;
    if (na * 2 < seg_capacity(&self->seg) || nl < JOURNAL_WINDOW)
        return PyErr_Format(PyExc_ValueError, "set_anchors: the tables are too short");
    self->seg.anchor = (int32_t *)a;
    self->seg.live = l;
    Py_RETURN_NONE;
}

/* set_segment(seq): where this attachment's SCHEDULED records go */
static PyObject *tables_set_segment(Tables *self, PyObject *arg) {
    i64 seq;
    if (arg_i64(arg, &seq) < 0) return NULL;
    if (seq < 0 || seq > INT32_MAX) return PyErr_Format(PyExc_ValueError, "bad segment seq");
    self->seg.jseq = seq;
    Py_RETURN_NONE;
}

/* journal_carry(from) -> records written (slots.h) */
static PyObject *tables_journal_carry(Tables *self, PyObject *arg) {
    i64 from;
    OPEN(self);
    if (arg_i64(arg, &from) < 0) return NULL;
    return PyLong_FromLongLong(slot_journal_carry(&self->seg, from));
}

/* journal_pending(handles, flags) -> SCHEDULED records written */
static PyObject *tables_journal_pending(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf hs;
    i64 flags;
    OPEN(self);
    NARGS(2, "journal_pending");
    if (arg_i64(args[1], &flags) < 0 || i64buf_get(args[0], &hs, 0) < 0) return NULL;
    i64 k = slot_journal_pending(&self->seg, hs.p, hs.n, flags);
    i64buf_release(&hs);
    return PyLong_FromLongLong(k);
}

static PyObject *tables_cascade_step(Tables *self, PyObject *const *args, Py_ssize_t nargs) {
    i64 budget;
    OPEN(self);
    NARGS(1, "cascade_step");
    if (arg_i64(args[0], &budget) < 0) return NULL;
    self->seg.jnow = jnow_us();   /* for the CANCELLED records of what it retires */
    return PyLong_FromLongLong(
        wheel_cascade_step(self->seg.mem, budget, slot_retire_hook, &self->seg));
}

static PyObject *tables_take_retired(Tables *self, PyObject *unused) {
    i64 n = self->seg.retired;
    self->seg.retired = 0;
    return PyLong_FromLongLong(n);
}

static PyObject *tables_take_expired(Tables *self, PyObject *unused) {
    i64 n = self->seg.expired;
    self->seg.expired = 0;
    return PyLong_FromLongLong(n);
}

static PyObject *tables_next_wakeup(Tables *self, PyObject *unused) {
    OPEN(self);
    return PyLong_FromLongLong(wheel_next_wakeup(self->seg.mem));
}

static PyMethodDef tables_methods[] = {
    METHOD_NOARGS("close", tables_close, "Release the views (before unmapping)."),
    METHOD_FAST("reserve", tables_reserve,
        "reserve(ring, out) -> count of FREE slots made RESERVED for `ring` (handles in out)."),
    METHOD_FAST("arena_alloc", tables_arena_alloc,
        "arena_alloc(cls, slot) -> a block of class cls owned by slot, or -1."),
    METHOD_FAST("free_payload", tables_free_payload,
        "free_payload(slot): return the slot's arena block (an aborted schedule)."),
    METHOD_FAST("retire", tables_retire,
        "retire(slot): free a RESERVED slot and its payload (a schedule given up)."),
    METHOD_FAST("link_records", tables_link_records,
        "link_records(recs, n, ring, res): apply n producer records (see slots.h)."),
    METHOD_FAST("settle", tables_settle,
        "settle(results, n, now_ms, res): apply n executor outcomes; now_ms: the caller's "
        "monotonic clock, for repeating timers' next deadlines (see slots.h)."),
    METHOD_FAST("reclaim", tables_reclaim,
        "reclaim(ring, pid) -> slots freed of a dead or closed client (and its cached blocks); "
        "pid, its process, is the producer of what it journals."),
    METHOD_FAST("_reset_hold", tables_reset_hold,
        "_reset_hold(h, deadline, ring) -> (code, held): a reset's first half (tests)."),
    METHOD_FAST("_reset_put_back", tables_reset_put_back,
        "_reset_put_back(h, ring, held) -> code: a reset's second half (tests)."),
    METHOD_O("format", tables_format,
        "format(gen): every slot FREE at generation gen (a recovery, before any process)."),
    METHOD_FAST("install", tables_install,
        "install(handles, deadlines, metas, words): pending timers into their slots (FORMAT, "
        "ARM); then rebuild(). ValueError at a slot out of range or taken."),
    METHOD_NOARGS("rebuild", tables_rebuild,
        "rebuild() -> entries relinked: crash repair from the slot states."),
    METHOD_FAST("advance", tables_advance,
        "advance(now, out) -> count of handles fired (PENDING -> FIRING won) into out."),
    METHOD_O("set_journal", tables_set_journal,
        "set_journal(buffer or None): record the lifecycle events this attachment decides "
        "in a JournalBuffer (the coordinator's and the reaper's)."),
    METHOD_FAST("journal_records", tables_journal_records,
        "journal_records(recs, n, producer) -> records written ahead of link_records for n "
        "producer records (slots.h)."),
    METHOD_O("journal_fired", tables_journal_fired,
        "journal_fired(handles) -> FIRED records written for these FIRING handles (under the "
        "lock)."),
    METHOD_FAST("journal_settled", tables_journal_settled,
        "journal_settled(results, n) -> OUTCOME records of results a previous reaper settled "
        "but did not record (slots.h)."),
    METHOD_FAST("journal_pending", tables_journal_pending,
        "journal_pending(handles, flags) -> SCHEDULED records (with flags added) for the "
        "PENDING slots among handles."),
    METHOD_FAST("set_anchors", tables_set_anchors,
        "set_anchors(anchors, live): the journal retention's tables (slots.h)."),
    METHOD_O("set_segment", tables_set_segment,
        "set_segment(seq): the coordinator segment this attachment's SCHEDULED records go to."),
    METHOD_O("journal_carry", tables_journal_carry,
        "journal_carry(from) -> records re-written into the current segment for the live "
        "slots anchored in segment `from` (slots.h)."),
    METHOD_FAST("cascade_step", tables_cascade_step,
        "cascade_step(budget) -> entries moved one level down."),
    METHOD_NOARGS("take_retired", tables_take_retired,
        "take_retired() -> cancelled slots retired by advance, cascade_step or rebuild since "
        "the last call (for the caller's counter row)."),
    METHOD_NOARGS("take_expired", tables_take_expired,
        "take_expired() -> operations advance took at their timeout since the last call."),
    METHOD_NOARGS("next_wakeup", tables_next_wakeup,
        "next_wakeup() -> when the wheel next has work (NEVER when empty)."),
    TABLES_PURGATORY_METHODS
    METHODS_END,
};

PyTypeObject TablesType = NATIVE_TYPE(
    "Tables", Tables, 0,
    "Tables(wheel, side, arena, adata): one attachment's view of a service's tables and the "
    "slot state machine over them (see slots.h).",
    .tp_new = PyType_GenericNew, .tp_init = (initproc)tables_init, TYPE_BASICS(tables));

int shmwheel_add_client_types(PyObject *m);
int shmwheel_add_executor_type(PyObject *m);

int shmwheel_add_types(PyObject *m) {
    if (PyType_Ready(&TablesType) < 0) return -1;
    Py_INCREF(&TablesType);
    if (PyModule_AddObject(m, "Tables", (PyObject *)&TablesType) < 0) return -1;
    if (shmwheel_add_client_types(m) < 0) return -1;
    return shmwheel_add_executor_type(m);
}
