/* executor.c: an executor process's batch loop. For each dispatch record, in this order:
 * store `started = seq`, claim the record (a CAS, ring.h: one the reaper took over from us
 * while we were stuck is skipped, unreported), check the slot, decode its payload, run the task (if it raised:
 * log it and write its error record, errlog.c), publish the outcome (handle, outcome, seq,
 * lateness_us, duration_us) on the result ring. After the batch the
 * dispatch ring's tail advances and `started` goes back to -1. A replacement executor on
 * the same rings therefore knows what its predecessor did (shmwheel/service/processes/executor.py,
 * `recover`): outcomes up to the last published seq are done, the `started` record (if
 * unreported) crashed with it, as does any record it claimed and did not report, and
 * the rest are still to run. No task runs twice.
 *
 * A forked copy of the executor (a task that called fork() and returned in the child)
 * ends with _exit(0) as soon as the task returns in it, before it touches anything shared.
 * With a stop word, a batch ends after the record in hand once the word is set.
 *
 * A record whose slot is not FIRING (or STOPPING) with the record's generation is garbage:
 * counted, reported as an error, never run. The payload is decoded only after its side
 * record and arena block check out. The running task's context is kept here and read by
 * shmwheel.context() through fire_context().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "errlog.h"
#include "pybuf.h"
#include "ring.h"
#include "slot_record.h"
#include "slots.h"
#include "pytype.h"
#include "pymethods.h"

#define BATCH 256

typedef struct {
    PyObject_HEAD
    Seg seg;
    Ring dispatch, results;
    Holds holds;
    i64 *started;        /* this executor's X_STARTED word */
    i64 *counters;       /* its counter row (single writer) */
    i64 *hist;           /* its lateness histogram (single writer) */
    i64 *stop;           /* the service's stopping word, or NULL (optional argument) */
    pid_t pid;           /* the process that made this executor: a fork's copy is not it */
    PyObject *tasks;     /* list: task id -> callable */
    PyObject *unpack;    /* bytes -> object (msgpack) */
    PyObject *on_error;  /* (handle, task, exception, run, ERF_*): logs and records it */
    PyObject *on_full;   /* () -> bool: the result ring is full; False to give up */
    PyObject *on_calendar;   /* (handle, deadline, calendar, after): see calendar_run */
    i64 tally[COUNTER_WORDS];
    i64 late[HIST_BUCKETS];
} Executor;

/* the task running now (one per process: executors run one task at a time) */
static struct {
    int active;
    i64 handle, deadline_ms, fired_ns, attempt;
    PyObject *key;
} current;

static i64 now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (i64)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* The payload of a FIRING slot as a new reference (Py_None for a nil payload), its key
 * (new reference or NULL) and run number; NULL with an exception if it does not check. */
static PyObject *decode(Executor *e, i64 slot, PyObject **key, i64 *attempt) {
    SlotPayload pl;
    int found = slot_payload(&e->seg, slot, &pl);   /* slot_record.c: the checks */
    i64 flags = META_FIELD(pl.meta, FLAGS);
    *key = NULL;
    *attempt = pl.attempt;
    if (found == PAYLOAD_NIL) Py_RETURN_NONE;
    if (found == PAYLOAD_BAD_BLOCK)
        return PyErr_Format(PyExc_ValueError, "slot %lld: its arena block does not check "
                            "out (class %lld, block %lld)", (long long)slot,
                            (long long)pl.cls, (long long)pl.word);
    if (found == PAYLOAD_BAD_INLINE)
        return PyErr_Format(PyExc_ValueError, "slot %lld: inline payload length %lld",
                            (long long)slot, (long long)pl.len);
    PyObject *blob = PyBytes_FromStringAndSize(pl.bytes, (Py_ssize_t)pl.len);
    if (!blob) return NULL;
    PyObject *v = PyObject_CallOneArg(e->unpack, blob);
    Py_DECREF(blob);
    if (!v || !(flags & (FLAG_KEY | FLAG_OP))) return v;
    if (!PyList_Check(v) || PyList_GET_SIZE(v) != 2) {   /* [key, payload] or [keys, ..] */
        Py_DECREF(v);
        return PyErr_Format(PyExc_ValueError, "slot %lld: a keyed payload is not a [key, "
                            "payload] pair", (long long)slot);
    }
    *key = Py_NewRef(PyList_GET_ITEM(v, 0));
    PyObject *p = Py_NewRef(PyList_GET_ITEM(v, 1));
    Py_DECREF(v);
    return p;
}

static void record_lateness(Executor *e, i64 late_us) {
    if (late_us < 1) {
        e->late[0]++;
        if (late_us < 0) e->tally[C_EARLY]++;
        return;
    }
    i64 b = 1 + (i64)(log2((double)late_us) * HIST_PER_OCTAVE);
    e->late[b < HIST_BUCKETS ? b : HIST_BUCKETS - 1]++;
}

/* A calendar timer's run (its key is a dict: shmwheel/service/calendar.py): before the task,
 * on_calendar(h, deadline, calendar, False) says whether it runs (False: a skipped misfire);
 * after it, on_calendar(h, deadline, calendar, True) gives the next fire time's deadline,
 * and the slot's period becomes the distance to it, so that the re-arm when the outcome is
 * settled (slot_settle: deadline + period) lands on it; -1 (or an error: logged by the
 * hook's caller as unraisable) leaves the period, 0 ends the timer. The task's exception,
 * if any, is kept across the second call. */
static PyObject *calendar_call(Executor *e, i64 h, i64 deadline, PyObject *cal, int after) {
    return PyObject_CallFunction(e->on_calendar, "LLOO", (long long)h, (long long)deadline,
                                 cal, after ? Py_True : Py_False);
}

static void calendar_next(Executor *e, i64 h, i64 slot, i64 deadline, PyObject *cal) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = calendar_call(e, h, deadline, cal, 1);
    i64 next = r ? PyLong_AsLongLong(r) : -1;
    if (!r || PyErr_Occurred()) PyErr_WriteUnraisable(e->on_calendar);
    Py_XDECREF(r);
    int c;
    i64 b = slot_block(&e->seg, slot, &c);
    if (b >= 0 && (META_FIELD(*side_meta(&e->seg, slot), FLAGS) & FLAG_REPEAT) &&
            (next == 0 || next > deadline))
        relaxed_store(&arena_block(&e->seg, c, b)[RH_PERIOD], next ? next - deadline : 0);
    PyErr_Restore(type, value, tb);
}

/* Run the task of one checked record; returns the outcome, or -1 for an exception that is
 * not an Exception (SystemExit, KeyboardInterrupt): it propagates and the process ends. */
static int run_one(Executor *e, i64 h, i64 slot, i64 deadline, i64 fired_ns) {
    i64 tid = META_FIELD(*side_meta(&e->seg, slot), TASK), attempt = 0;
    PyObject *key = NULL, *payload = NULL, *r = NULL;
    if (tid == TASK_NONE && (META_FIELD(*side_meta(&e->seg, slot), FLAGS) & FLAG_OP)) {
        r = Py_NewRef(Py_None);   /* an operation without a task for this outcome */
    } else if (tid >= PyList_GET_SIZE(e->tasks)) {
        PyErr_Format(PyExc_ValueError, "slot %lld names task id %lld, which is not "
                     "registered", (long long)slot, (long long)tid);
    } else if ((payload = decode(e, slot, &key, &attempt))) {
        current.active = 1;
        current.handle = h;
        current.deadline_ms = deadline;
        current.fired_ns = fired_ns;
        current.attempt = attempt;
        current.key = key;
        PyObject *go = NULL, *cal = key && PyDict_Check(key) && e->on_calendar != Py_None
                                        ? key : NULL;
        if (cal && (go = calendar_call(e, h, deadline, cal, 0)) && !PyObject_IsTrue(go))
            r = Py_NewRef(Py_None);   /* a misfire skipped */
        else if (!cal || go)
            r = PyObject_CallOneArg(PyList_GET_ITEM(e->tasks, tid), payload);
        /* a task that forked and returned in the child: that copy must not touch a ring,
         * a counter, a slot or the error log; it ends here, at once, whatever the task left */
        if (getpid() != e->pid) _exit(0);
        Py_XDECREF(go);
        if (cal) calendar_next(e, h, slot, deadline, cal);
        current.active = 0;
        current.key = NULL;
        Py_DECREF(payload);
    }
    Py_XDECREF(key);
    if (r) {
        Py_DECREF(r);
        e->tally[C_COMPLETED]++;
        return OUTCOME_OK;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) PyException_SetTraceback(value, tb);
    /* the logger records the error (errlog.c) before the outcome is published (ex_run) */
    i64 erf = (META_FIELD(*side_meta(&e->seg, slot), FLAGS) & FLAG_REPEAT) ? ERF_REPEATING : 0;
    PyObject *lr = PyObject_CallFunction(e->on_error, "LLOLL", (long long)h, (long long)tid,
                                         value, (long long)attempt, (long long)erf);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (!lr) PyErr_Clear();   /* a failing logger must not stop the executor */
    Py_XDECREF(lr);
    e->tally[C_ERRORS]++;
    return OUTCOME_ERROR;
}

static void publish_counts(Executor *e) {
    for (int k = 0; k < COUNTER_WORDS; k++)
        if (e->tally[k]) { counter_add(&e->counters[k], e->tally[k]); e->tally[k] = 0; }
    for (int b = 0; b < HIST_BUCKETS; b++)
        if (e->late[b]) { counter_add(&e->hist[b], e->late[b]); e->late[b] = 0; }
}

/* run() -> records handled (0 when the dispatch ring is empty) */
static PyObject *ex_run(Executor *e, PyObject *unused) {
    if (!e->holds.n) return PyErr_Format(PyExc_ValueError, "executor is closed");
    i64 seq0, n = ring_avail(&e->dispatch, &seq0);
    if (n <= 0) return PyLong_FromLongLong(n);
    if (n > BATCH) n = BATCH;
    for (i64 i = 0; i < n; i++) {
        i64 seq = seq0 + i;
        const i64 *d = ring_rec(&e->dispatch, seq);
        i64 h = d[DR_HANDLE];   /* written before head's release, never changed after */
        i64 slot = HANDLE_SLOT(h), outcome = OUTCOME_ERROR, late_us = 0, duration_us = 0;
        relaxed_store(e->started, seq);
        /* stopping: the runs done are reported, the records from this one on stay on the
         * ring, never started (a start on the journal re-arms them). The fence orders the
         * store above before the load: a reaper that saw the stop and then `started` at -1
         * (service/reaper.py, _await_executors) knows no run of this batch will start. */
        if (e->stop) {
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (relaxed_load(e->stop)) { n = i; break; }
        }
        /* the claim (ring.h): a record the reaper took from us while we were stuck runs on
         * another executor, which reports it; we skip it and report nothing */
        if (!dispatch_claim(&e->dispatch, seq, DR_CLAIM_RUN)) continue;
        i64 fired_ns = dispatch_fired_ns(__atomic_load_n(&d[DR_FIRED_NS], __ATOMIC_RELAXED));
        i64 deadline;
        if (slot_fired(&e->seg, h, &deadline)) {
            late_us = now_us() - deadline * 1000;
            record_lateness(e, late_us);
            i64 t0 = now_us();
            int o = run_one(e, h, slot, deadline, fired_ns);
            if (o < 0) { publish_counts(e); return NULL; }
            outcome = o;
            duration_us = now_us() - t0;
        } else {
            e->tally[C_GARBAGE]++;
        }
        i64 rec[RESULT_RECORD];
        rec[RR_HANDLE] = h;
        rec[RR_OUTCOME] = outcome;
        rec[RR_SEQ] = seq;
        rec[RR_LATENESS_US] = late_us;
        rec[RR_DURATION_US] = duration_us;
        while (!ring_push(&e->results, rec, 1)) {
            PyObject *r = PyObject_CallNoArgs(e->on_full);
            int go_on = r && PyObject_IsTrue(r) == 1;
            Py_XDECREF(r);
            if (!go_on) { publish_counts(e); return r ? PyLong_FromLongLong(-1) : NULL; }
        }
    }
    ring_consume(&e->dispatch, n);
    relaxed_store(e->started, -1);
    publish_counts(e);
    return PyLong_FromLongLong(n);
}

static PyObject *ex_close(Executor *e, PyObject *unused) {
    holds_release(&e->holds);
    Py_RETURN_NONE;
}

static int ex_init(Executor *e, PyObject *args, PyObject *kw) {
    PyObject *o[9], *stop = NULL;
    if (e->holds.n) {
        PyErr_SetString(PyExc_RuntimeError, "Executor is initialised already");
        return -1;
    }
    e->on_calendar = Py_None;   /* optional: without it a calendar's task runs, no re-arm */
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO!OOO|OO:Executor", &o[0], &o[1], &o[2], &o[3],
                          &o[4], &o[5], &o[6], &o[7], &o[8], &PyList_Type, &e->tasks,
                          &e->unpack, &e->on_error, &e->on_full, &stop, &e->on_calendar))
        return -1;
    Py_INCREF(e->tasks);
    Py_INCREF(e->unpack);
    Py_INCREF(e->on_error);
    Py_INCREF(e->on_full);
    Py_INCREF(e->on_calendar);
    Py_ssize_t nd, nr, nc, nh;
    i64 *started_row;
    if (holds_add(&e->holds, o[0], &e->seg.mem, NULL) < 0 ||
        holds_add(&e->holds, o[1], &e->seg.side, NULL) < 0 ||
        holds_add(&e->holds, o[2], &e->seg.arena, NULL) < 0 ||
        holds_add(&e->holds, o[3], &e->seg.adata, NULL) < 0 ||
        holds_add(&e->holds, o[4], &e->dispatch.w, &nd) < 0 ||
        holds_add(&e->holds, o[5], &e->results.w, &nr) < 0 ||
        holds_add(&e->holds, o[6], &started_row, NULL) < 0 ||
        holds_add(&e->holds, o[7], &e->counters, &nc) < 0 ||
        holds_add(&e->holds, o[8], &e->hist, &nh) < 0 ||
        (stop && stop != Py_None && holds_add(&e->holds, stop, &e->stop, NULL) < 0))
        return -1;
    e->pid = getpid();
    e->started = started_row;   /* the caller passes a view starting at X_STARTED */
    e->dispatch.record = DISPATCH_RECORD;
    e->dispatch.cap = (nd - RING_HEADER_WORDS) / DISPATCH_RECORD;
    e->results.record = RESULT_RECORD;
    e->results.cap = (nr - RING_HEADER_WORDS) / RESULT_RECORD;
    if (nc < COUNTER_WORDS || nh < HIST_BUCKETS || e->dispatch.cap < 2 || e->results.cap < 2) {
        PyErr_SetString(PyExc_ValueError, "Executor: a counter row, histogram or ring too short");
        return -1;
    }
    return 0;
}

static void ex_dealloc(Executor *e) {
    holds_release(&e->holds);
    Py_CLEAR(e->tasks);
    Py_CLEAR(e->unpack);
    Py_CLEAR(e->on_error);
    Py_CLEAR(e->on_full);
    Py_CLEAR(e->on_calendar);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMethodDef ex_methods[] = {
    METHOD_NOARGS("run", ex_run,
        "run() -> records handled from the dispatch ring (0 when empty; -1 if on_full gave "
        "up). Tasks run in this thread; outcomes are published one by one."),
    METHOD_NOARGS("close", ex_close, "Release the segment views."),
    METHODS_END,
};

static PyTypeObject ExecutorType = NATIVE_TYPE(
    "Executor", Executor, 0,
    "Executor(wheel, side, arena, adata, dispatch, results, started, counters, hist, tasks, "
    "unpack, on_error, on_full[, stop[, on_calendar]]): an executor's batch loop "
    "(executor.c); with `stop` (a one-word view, or None) it takes no further record of a "
    "batch once that word is set; `on_calendar` re-arms calendar timers (service/calendar.py).",
    .tp_new = PyType_GenericNew, .tp_init = (initproc)ex_init, TYPE_BASICS(ex));

static PyObject *fire_context(PyObject *m, PyObject *unused) {
    if (!current.active) Py_RETURN_NONE;
    return Py_BuildValue("(LOLLL)", (long long)current.handle,
                         current.key ? current.key : Py_None, (long long)current.deadline_ms,
                         (long long)(current.fired_ns / 1000000), (long long)current.attempt);
}

static PyMethodDef ctx_methods[] = {
    METHOD_NOARGS("fire_context", fire_context,
        "fire_context() -> (id, key, deadline_ms, fired_ms, attempt) of the running task, or "
        "None outside one."),
    METHODS_END,
};

int shmwheel_add_errlog(PyObject *m);   /* errlog.c: the failed tasks' records */

int shmwheel_add_executor_type(PyObject *m) {
    if (PyType_Ready(&ExecutorType) < 0) return -1;
    if (shmwheel_add_errlog(m) < 0) return -1;
    Py_INCREF(&ExecutorType);
    if (PyModule_AddObject(m, "Executor", (PyObject *)&ExecutorType) < 0) return -1;
    return PyModule_AddFunctions(m, ctx_methods);
}
