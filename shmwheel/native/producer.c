/* producer.c: a client's hot path. `Producer` is the base of shmwheel's `Client`, `Handle`
 * the base of `TimerHandle`.
 *
 * schedule() in the common case (a registered task, delay_ms as a number, a payload that
 * encodes to at most 64 bytes, no key, no repeat) runs here without the segment lock and
 * without a system call: it takes a RESERVED slot (and, for a payload over 8 bytes, an
 * arena block) from this client's cache, writes the slot's side record and deadline,
 * stores SUBMITTED with release, and publishes (handle, handle ^ CHECK_SUBMIT) on the
 * client's ring with a release store of head. Anything else (and every error) goes to the
 * Python method `_schedule_slow`, which validates and raises what the API promises.
 * The caches are refilled in batches by the Python method `_restock` (segment lock). The
 * Python methods called are the hooks of producer.h (PRODUCER_HOOKS), and only those.
 *
 * cancel() is slot_cancel's compare-and-swap; when it wins it publishes (handle, handle ^
 * CHECK_CANCEL) so the coordinator unlinks and frees the slot within its next drain. A
 * handle is bound to the service instance its client was bound to: one of another service
 * (or of an earlier run of the same name) is refused with ValueError before anything
 * changes (producer_handle_id). A bare int id is taken as given. reset() is reset.c's.
 *
 * Threads: nothing here releases the GIL, so one Client may be shared by the threads of
 * its process; the Python callbacks (_restock, _bell, ...) are made between, never inside,
 * updates of the caches or the ring. With the fast paths off (Producer.fast = 0, service/
 * service/client_base.py's SHMWHEEL_CLIENT_SLOW_PATHS) every schedule goes to Python as given.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#include "atomics.h"
#include "producer.h"
#include "wheel.h"
#include "pytype.h"
#include "pymethods.h"

#define URGENT_MS PRODUCER_URGENT_MS


static PyObject *s_delay_ms, *s_deadline_ms, *s_key, *s_every_ms;

i64 producer_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* time.monotonic_ns() on Linux */
    return (i64)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int producer_bound(Producer *p) {
    if (p->holds.n) return 1;
    PyErr_SetString(PyExc_ValueError, "this client is closed");
    return 0;
}

int producer_due(Producer *p, PyObject *delay, i64 *now_ns, i64 *due) {
    double d;
    if (PyFloat_CheckExact(delay)) d = PyFloat_AS_DOUBLE(delay);
    else if (PyLong_CheckExact(delay)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(delay, &overflow);
        if (overflow) return 0;
        d = (double)v;
    } else return 0;
    if (!(d >= 0 && d < (double)p->max_delay_ms)) return 0;   /* NaN fails too */
    *now_ns = producer_now_ns();
    *due = producer_due_ms(*now_ns, d);
    return 1;
}

/* ---- writing and publishing one slot --------------------------------------------- */
void producer_write_slot(Producer *p, i64 h, i64 meta, i64 word, i64 deadline) {
    slot_write(&p->seg, h, meta, word, deadline);   /* slot_record.c: the orderings */
}

int producer_push(Producer *p, i64 h, i64 check) { return slot_publish(&p->ring, h, check); }

int producer_submit(Producer *p, i64 h, i64 meta, i64 word, i64 deadline) {
    producer_write_slot(p, h, meta, word, deadline);
    if (producer_push(p, h, CHECK_SUBMIT)) {
        relaxed_store(&p->counters[C_SCHEDULED], ++p->scheduled);
        return 0;
    }
    /* ring full: wait for the coordinator (_push counts it once published); -1: it took
     * the slot back and raised Full */
    return producer_wait_push(p, h, CHECK_SUBMIT);
}

/* ---- schedule ------------------------------------------------------------------- */
PyObject *producer_new_handle(Producer *p, PyTypeObject *type, i64 h, i64 deadline) {
    Handle *hd = (Handle *)type->tp_alloc(type, 0);
    if (!hd) return NULL;
    Py_INCREF(p);
    hd->client = (PyObject *)p;
    hd->id = h;
    hd->deadline_ms = deadline;
    return (PyObject *)hd;
}

static PyObject *go_slow(Producer *p, PyObject *task, PyObject *payload, PyObject *delay,
                         PyObject *deadline, PyObject *key, PyObject *every) {
    PyObject *args[6] = {task, payload, delay ? delay : Py_None, deadline ? deadline : Py_None,
                         key ? key : Py_None, every ? every : Py_None};
    return producer_hook(p, HOOK_SCHEDULE_SLOW, args, 6, NULL);
}

static PyObject *prod_schedule(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    PyObject *task = nargs > 0 ? args[0] : NULL, *payload = nargs > 1 ? args[1] : Py_None;
    PyObject *delay = NULL, *deadline = NULL, *key = NULL, *every = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs < 1 || nargs > 2 || !p->fast) goto unusual;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (k == s_delay_ms) delay = v;
        else if (k == s_deadline_ms) deadline = v;
        else if (k == s_key) key = v;
        else if (k == s_every_ms) every = v;
        else goto unusual;   /* a non-interned or unknown name, payload= ...: Python decides */
    }
    if (!delay || (deadline && deadline != Py_None) || (key && key != Py_None) ||
            (every && every != Py_None) || !PyUnicode_CheckExact(task))
        goto slow;
    if (!producer_accepting(p)) goto slow;
    PyObject *tid_obj = PyDict_GetItemWithError(p->task_ids, task);
    if (!tid_obj) {
        if (PyErr_Occurred()) return NULL;
        goto slow;
    }
    i64 tid = PyLong_AsLongLong(tid_obj), now_ns, due;
    if (!producer_due(p, delay, &now_ns, &due)) goto slow;

    i64 meta, word, block = -1;
    PyObject *blob = NULL;
    if (payload == Py_None) {
        meta = META_MAKE(tid, 0, 0, 1, p->ring_index);
        word = NIL_INLINE;
    } else {
        blob = PyObject_CallOneArg(p->encode, payload);
        if (!blob || !PyBytes_Check(blob)) {   /* the slow path raises the API's error */
            Py_XDECREF(blob);
            PyErr_Clear();
            goto slow;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(blob);
        const char *bytes = PyBytes_AS_STRING(blob);
        if (payload_problem(bytes, len)) {   /* the executor could not decode it: the slow
                                               path refuses it (segment/payload.py) */
            Py_DECREF(blob);
            goto slow;
        }
        if (len <= INLINE_MAX) {
            u64 v = 0;
            memcpy(&v, bytes, (size_t)len);   /* little-endian, as segment/contract.py packs it */
            meta = META_MAKE(tid, 0, 0, len, p->ring_index);
            word = (i64)v;
        } else if (len <= ARENA_CLASS_BYTES(0)) {
            if (!p->nblocks && producer_restock(p) < 0) { Py_DECREF(blob); return NULL; }
            if (!p->nblocks) { Py_DECREF(blob); goto slow; }
            block = p->blocks[--p->nblocks];
            memcpy(arena_block(&p->seg, 0, block), bytes, (size_t)len);
            meta = META_MAKE(tid, FLAG_ARENA, 0, len, p->ring_index);
            word = block;
        } else {
            Py_DECREF(blob);
            goto slow;
        }
        Py_DECREF(blob);
    }
    if (!p->ncache && (producer_restock(p) < 0 || !p->ncache)) {
        /* give the block back; if other threads refilled the cache meanwhile and there is
         * no room, it stays owned by this ring, and the coordinator frees it at close */
        if (block >= 0 && p->nblocks < CACHE_MAX) p->blocks[p->nblocks++] = block;
        if (PyErr_Occurred()) return NULL;
        goto slow;   /* no free slot: Python raises Full */
    }
    i64 h = p->cache[--p->ncache];
    if (producer_submit(p, h, meta, word, due) < 0) return NULL;
    if (due - now_ns / 1000000 < URGENT_MS ||
            ring_room(&p->ring, relaxed_load(&p->ring.w[RING_HEAD])) < p->ring.cap * 3 / 4) {
        if (sleep_flag_after_publish(&p->header[p->w_sleeping]) &&
                producer_bell(p) < 0)
            return NULL;
    }
    return producer_new_handle(p, p->handle_type, h, due);

unusual:
    /* argument shapes only Python can judge (it raises the TypeError): pass them as given */
    return producer_hook(p, HOOK_SCHEDULE_CHECKED, args, nargs, kwnames);
slow:
    return go_slow(p, task, payload, delay, deadline, key, every);
}

/* ---- cancel --------------------------------------------------------------------- */
/* The id to cancel. A handle must be of this client's service instance: its client is p
 * (a pointer compare: the common case, handle.cancel() and client.cancel(handle)), or
 * another client bound to the same segment instance (the instance words they copied at
 * bind are equal). Anything else is refused, with the message of Client._refuse_foreign
 * (it names both services), before any slot is touched: the same id in another service
 * is another timer. A bare int is taken as given (which service an id belongs to is the
 * caller's business). */
int producer_handle_id(Producer *p, PyObject *o, i64 *h, const char *what) {
    if (PyObject_TypeCheck(o, &HandleType)) {
        PyObject *owner = ((Handle *)o)->client;
        if (owner != (PyObject *)p && !(owner && PyObject_TypeCheck(owner, &ProducerType) &&
                                        ((Producer *)owner)->instance == p->instance)) {
            PyObject *r = producer_hook(p, HOOK_REFUSE_FOREIGN, &o, 1, NULL);
            Py_XDECREF(r);   /* it raises; if it did not, still refuse */
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a handle of another service");
            return -1;
        }
        *h = ((Handle *)o)->id;
        return 0;
    }
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        *h = PyLong_AsLongLong(o);
        if (*h == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            *h = -1;   /* out of range for any handle: cancels nothing */
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() takes a TimerHandle or its id, got %s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
}

static int cancel_one(Producer *p, i64 h) {
    int code = slot_cancel(&p->seg, h);
    if (code != CANCEL_WON) return code;
    relaxed_store(&p->counters[C_CANCELLED], ++p->cancelled);
    if (!producer_push(p, h, CHECK_CANCEL)) {
        /* ring full: the slot stays CANCELLED until the record gets through (or the
         * reaper meets it); the cancel itself is decided already */
        if (producer_wait_push(p, h, CHECK_CANCEL) < 0) return -1;
    }
    return code;
}

int producer_ready(Producer *p) {
    return !p->closed && !p->forked && p->holds.n && !relaxed_load(&p->header[p->w_stopping]);
}

/* W_JREFUSE is written by the supervisor and only read here, relaxed: a schedule that
 * races the gate closing is accepted, as one just before it would have been (the writers
 * hold its records like any other through the fault) */
int producer_accepting(Producer *p) {
    return producer_ready(p) && !relaxed_load(&p->header[p->w_refuse]);
}

int producer_usable(Producer *p) {
    if (producer_ready(p)) return 1;
    PyObject *r = producer_hook(p, HOOK_CHECK, NULL, 0, NULL);   /* raises */
    Py_XDECREF(r);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "this client is closed");
    return 0;
}

PyObject *producer_cancel(PyObject *self, PyObject *arg) {
    Producer *p = (Producer *)self;
    i64 h;
    if (!producer_usable(p) || producer_handle_id(p, arg, &h, "cancel") < 0) return NULL;
    int code = cancel_one(p, h);
    if (code < 0) return NULL;
    return PyBool_FromLong(code == CANCEL_WON);
}

static PyObject *prod_cancel_many(Producer *p, PyObject *const *args, Py_ssize_t nargs) {
    I64Buf ids, out;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "_cancel_many(ids, out)");
    if (!producer_usable(p) || i64buf_get(args[0], &ids, 0) < 0) return NULL;
    if (i64buf_get(args[1], &out, 1) < 0) { i64buf_release(&ids); return NULL; }
    i64 won = 0;
    if (out.n < ids.n) { PyErr_SetString(PyExc_ValueError, "out too short"); won = -1; }
    for (Py_ssize_t i = 0; won >= 0 && i < ids.n; i++) {
        int code = cancel_one(p, ids.p[i]);
        if (code < 0) won = -1;
        else {
            out.p[i] = code;
            won += code == CANCEL_WON;
        }
    }
    i64buf_release(&ids);
    i64buf_release(&out);
    return won < 0 ? NULL : PyLong_FromLongLong(won);
}

/* ---- binding (the primitives the Python slow paths build on: producer_slow.c) ---- */
static PyObject *prod_bind(Producer *p, PyObject *args) {
    PyObject *wheel, *side, *arena, *adata, *ring, *counters, *header, *task_ids, *encode;
    PyObject *htype;
    long long ring_index, w_sleeping, w_stopping, max_delay, batch, instance, w_refuse;
    int fast;
    if (!PyArg_ParseTuple(args, "OOOOOOOLLLLLO!OO!LLp:_bind", &wheel, &side, &arena, &adata,
                          &ring, &counters, &header, &ring_index, &w_sleeping, &w_stopping,
                          &max_delay, &batch, &PyDict_Type, &task_ids, &encode, &PyType_Type,
                          &htype, &instance, &w_refuse, &fast))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)htype, &HandleType))
        return PyErr_Format(PyExc_TypeError, "handle type must derive from Handle");
    Py_ssize_t nring, ncount;
    holds_release(&p->holds);
    if (holds_add(&p->holds, wheel, &p->seg.mem, NULL) < 0 ||
        holds_add(&p->holds, side, &p->seg.side, NULL) < 0 ||
        holds_add(&p->holds, arena, &p->seg.arena, NULL) < 0 ||
        holds_add(&p->holds, adata, &p->seg.adata, NULL) < 0 ||
        holds_add(&p->holds, ring, &p->ring.w, &nring) < 0 ||
        holds_add(&p->holds, counters, &p->counters, &ncount) < 0 ||
        holds_add(&p->holds, header, &p->header, &p->nheader) < 0) {
        holds_release(&p->holds);
        return NULL;
    }
    p->ring.record = PRODUCER_RECORD;
    p->ring.cap = (nring - RING_HEADER_WORDS) / PRODUCER_RECORD;
    if (ncount < COUNTER_WORDS || p->ring.cap < 2 || (p->ring.cap & (p->ring.cap - 1))) {
        holds_release(&p->holds);
        return PyErr_Format(PyExc_ValueError, "bad ring or counter row");
    }
    p->ring_index = ring_index;
    p->w_sleeping = w_sleeping;
    p->w_stopping = w_stopping;
    p->max_delay_ms = max_delay;
    p->instance = instance;
    p->w_refuse = w_refuse;
    p->fast = fast;
    p->batch = batch < 1 ? 1 : batch > CACHE_MAX ? CACHE_MAX : batch;
    p->scheduled = relaxed_load(&p->counters[C_SCHEDULED]);
    p->cancelled = relaxed_load(&p->counters[C_CANCELLED]);
    p->ncache = p->nblocks = 0;
    Py_INCREF(task_ids);
    Py_XSETREF(p->task_ids, task_ids);
    Py_INCREF(encode);
    Py_XSETREF(p->encode, encode);
    Py_INCREF(htype);
    Py_XSETREF(p->handle_type, (PyTypeObject *)htype);
    Py_RETURN_NONE;
}


/* Not the type: this static type's instances hold no reference to it, and a Python
 * subclass's instances are counted once, by the interpreter's subtype_traverse
 * (tests/test_native_gc.py). */
#define PROD_REFS(X) X(task_ids) X(encode) X(handle_type) X(tables) X(thread_lock) X(op_type)
GC_REFS(Producer, prod, PROD_REFS)

static void prod_dealloc(Producer *p) {
    PyObject_GC_UnTrack(p);
    holds_release(&p->holds);
    prod_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMethodDef prod_methods[] = {
    METHOD_FAST_KW("schedule", prod_schedule,
        "schedule(task, payload=None, *, delay_ms=None, deadline_ms=None, key=None, "
        "every_ms=None) -> TimerHandle\n\nRun task(payload) in an executor at or after the "
        "deadline (exactly one of delay_ms, deadline_ms: absolute monotonic ms); with "
        "every_ms again every period until cancelled. Raises ValueError / TypeError for a bad "
        "argument and Full when the service or the ring has no room."),
    METHOD_O("cancel", producer_cancel,
        "cancel(handle) -> bool\n\nTrue iff the timer will never run (a compare-and-swap on "
        "its slot: a racing fire and this cancel have exactly one winner). For a repeating "
        "timer with a run in flight: False, and it will not run again. `handle` is a "
        "TimerHandle or Operation of this service (ValueError for one of another service, "
        "or of an earlier run of this name: nothing is cancelled), or an int id."),
    METHOD_FAST("_cancel_many", prod_cancel_many, NULL),
    PRODUCER_OPS_METHODS
    PRODUCER_RESET_METHODS
    METHOD_VARARGS("_bind", prod_bind, NULL),
    PRODUCER_SLOW_METHODS
    METHODS_END,
};

static PyMemberDef prod_members[] = {
    {"_closed", T_BOOL, offsetof(Producer, closed), 0, NULL},
    {"_forked", T_BOOL, offsetof(Producer, forked), 0, NULL},
    {"_fast_paths", T_BOOL, offsetof(Producer, fast), READONLY,
     "True unless the native fast paths are off (SHMWHEEL_CLIENT_SLOW_PATHS=1)."},
    {"_instance", T_LONGLONG, offsetof(Producer, instance), READONLY,
     "The instance word of the segment this client was bound to (0 before)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject ProducerType = NATIVE_TYPE(
    "Producer", Producer, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    "The native half of a Client: its caches, its ring and the hot paths.",
    .tp_new = PyType_GenericNew, TYPE_BASICS(prod), TYPE_GC(prod), .tp_members = prod_members);

int shmwheel_add_client_types(PyObject *m) {
    struct { PyObject **s; const char *v; } names[] = {
        {&s_delay_ms, "delay_ms"}, {&s_deadline_ms, "deadline_ms"}, {&s_key, "key"},
        {&s_every_ms, "every_ms"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].s = PyUnicode_InternFromString(names[i].v))) return -1;
    if (producer_hooks_init(m) < 0 || producer_ops_init() < 0 || producer_reset_init() < 0)
        return -1;
    if (PyType_Ready(&ProducerType) < 0 || PyType_Ready(&HandleType) < 0) return -1;
    Py_INCREF(&ProducerType);
    if (PyModule_AddObject(m, "Producer", (PyObject *)&ProducerType) < 0) return -1;
    Py_INCREF(&HandleType);
    return PyModule_AddObject(m, "Handle", (PyObject *)&HandleType);
}
