/* producer.h: the native halves of a Client (Producer, producer.c) and of a TimerHandle
 * (Handle, handle.c), and what each file needs of the other. */
#ifndef SHMWHEEL_PRODUCER_H
#define SHMWHEEL_PRODUCER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>

#include "pybuf.h"
#include "pymethods.h"
#include "ring.h"
#include "slot_record.h"
#include "slots.h"

typedef struct {
    PyObject_HEAD
    Seg seg;
    Ring ring;
    Holds holds;
    i64 *counters;        /* this client's counter row (single writer: this process) */
    i64 *header;          /* the segment header (nheader words) */
    Py_ssize_t nheader;
    i64 w_sleeping, w_stopping;
    i64 w_refuse;           /* header word: nonzero while the journal cannot keep new
                               timers durable (segment/layout.py W_JREFUSE): schedule and watch
                               take the slow path, which raises JournalError */
    i64 ring_index, max_delay_ms, batch;
    i64 instance;           /* the segment's instance word (segment/layout.py, W_INSTANCE), copied
                               at bind: a handle of a client whose word differs belongs to
                               another service, or another run of this one (producer.c) */
    i64 scheduled, cancelled;
    int closed, forked;
    int fast;               /* the native fast paths are on (0: every schedule, reset, watch
                               and check_and_complete takes its Python path) */
    int ncache, nblocks;
    i64 cache[CACHE_MAX];   /* RESERVED handles of this ring */
    i64 blocks[CACHE_MAX];  /* class-0 arena blocks owned by OWNER_RING(ring) */
    PyObject *task_ids;     /* dict: task name -> id */
    PyObject *encode;       /* payload -> bytes: msgpack's Packer.pack (its errors are
                               replaced by the slow path's, which say what to change) */
    PyTypeObject *handle_type;
    /* the purgatory's hot path (watch.c), set by _bind_ops; NULL until then */
    PyObject *tables;       /* the attachment's Tables: its seg has the watch lists */
    PyObject *thread_lock;  /* the segment lock's thread half (shm.Locked) ... */
    int lock_fd;            /* ... and its flock half (-1: a segment in this process) */
    i64 w_dirty, w_reaper_wake_at;   /* header words: the lock's dirty word, the reaper's
                                        wake-up time (ms) */
    PyTypeObject *op_type;  /* the class of the handles watch() returns (Operation) */
} Producer;

typedef struct {
    PyObject_HEAD
    PyObject *client;
    i64 id;
    i64 deadline_ms;
    PyObject *future;   /* its outcome's future, once someone asked (service/caller/outcomes.py), or NULL */
    PyObject *ttl;      /* a lease's ttl in ms (service/caller/lease.py: what beat() resets to), or
                           NULL for any other handle */
} Handle;

extern PyTypeObject ProducerType, HandleType;

/* ---- the Python half: what the native paths call of it -------------------------------
 * A Client is one object of two halves: this native type and the Python class that derives
 * from it (service/caller/client.py). The native paths call the Python half only through the
 * methods below, by name: _native.pyi declares them (ProducerHooks, which mypy checks
 * Client against), N.PRODUCER_HOOKS exports this list, and tests/test_client_interface.py
 * checks the three are one. PRODUCER_HOOKS(X): X(id, method, when it is called) */
#define PRODUCER_HOOKS(X)                                                                   \
    X(SCHEDULE_SLOW, "_schedule_slow", "schedule() beyond the common case, as (task, "      \
      "payload, delay_ms, deadline_ms, key, every_ms)")                                     \
    X(SCHEDULE_CHECKED, "_schedule_checked", "a schedule() whose arguments the native "     \
      "parser does not take, or any while the fast paths are off: as given")                \
    X(RESET_SLOW, "_reset_slow", "reset() beyond a number of ms: as given")                 \
    X(WATCH_SLOW, "_watch_slow", "watch() beyond the common case: as given")                \
    X(CAC_SLOW, "_check_and_complete_slow", "check_and_complete() beyond the common case: " \
      "as given")                                                                           \
    X(RESTOCK, "_restock", "a cache of reserved slots or blocks is empty: refill (lock)")   \
    X(BELL, "_bell", "wake the coordinator")                                                \
    X(WAKE_REAPER, "_wake_reaper", "wake the reaper: an operation completed")               \
    X(CHECK, "_check", "raise why this client cannot be used")                              \
    X(REFUSE_FOREIGN, "_refuse_foreign", "raise the ValueError for a handle of another "    \
      "service instance")                                                                   \
    X(WAIT_PUSH, "_wait_push", "a full ring: publish (h, check) once there is room, or "    \
      "take the slot back and raise Full")                                                  \
    X(WAIT_ROOM, "_wait_room", "a full ring before a reset: wait for room, or raise Full")
#define HOOK_ENUM_(id, name, doc) HOOK_##id,
enum { PRODUCER_HOOKS(HOOK_ENUM_) HOOK_COUNT };
#undef HOOK_ENUM_

/* producer_hooks.c: p.<hook>(*args), the arguments as a vectorcall takes them (nargs
 * positional, then the values of kwnames); the result, or NULL with the error set */
PyObject *producer_hook(Producer *p, int hook, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames);
int producer_hook0(Producer *p, int hook);       /* p.<hook>(); -1 if it raised */
int producer_restock(Producer *p);               /* _restock: refill the caches */
int producer_bell(Producer *p);                  /* _bell: wake the coordinator */
int producer_wait_push(Producer *p, i64 h, i64 check);   /* _wait_push; -1 if it raised */
int producer_hooks_init(PyObject *m);            /* the names; N.PRODUCER_HOOKS, due_ms */

/* The one deadline rule of a client: a delay (ms, checked: finite, in [0, max_delay)) from
 * the monotonic clock's `now_ns` is due at now_ns plus the delay rounded up to the ns,
 * rounded up to the ms, so that a timer never fires before its delay. schedule, reset and
 * watch's timeout use it here (producer_due); their Python paths through N.due_ms and
 * N.due_ms_many (service/caller/times.py), which are this function. */
static inline i64 producer_due_ms(i64 now_ns, double delay_ms) {
    i64 at = now_ns + (i64)ceil(delay_ms * 1e6);   /* >= 0: the monotonic clock */
    /* rounded up. (Not -((-at) / 1000000): C's division truncates towards zero, so that is
     * the floor, up to a ms before the delay; Python's // floors, where it is the ceiling.
     * The fast paths rounded down so until the two were run side by side.) */
    return at / 1000000 + (at % 1000000 > 0);
}

/* producer.c, for watch.c and reset.c */
PyObject *producer_cancel(PyObject *producer, PyObject *handle);   /* Producer.cancel */
i64 producer_now_ns(void);                                        /* CLOCK_MONOTONIC */
/* a delay given as an int or float in [0, max_delay_ms): now and its deadline (ms,
 * producer_due_ms); 0 for anything else (the slow path raises what the API says) */
int producer_due(Producer *p, PyObject *delay, i64 *now_ns, i64 *due);
int producer_ready(Producer *p);    /* open, bound, not forked, the service not stopping */
int producer_accepting(Producer *p);   /* producer_ready, and new timers not refused */
int producer_usable(Producer *p);  /* producer_ready, or 0 with the API's exception set */
/* write a RESERVED slot's record and deadline, then store SUBMITTED (release) */
void producer_write_slot(Producer *p, i64 h, i64 meta, i64 word, i64 deadline);
int producer_push(Producer *p, i64 h, i64 check);   /* 1 if it fit on the ring */
/* write_slot, then publish it (waiting on a full ring) and count it: 0, or -1 with Full
 * raised (the slot taken back) */
int producer_submit(Producer *p, i64 h, i64 meta, i64 word, i64 deadline);
PyObject *producer_new_handle(Producer *p, PyTypeObject *type, i64 h, i64 deadline);

/* payload.c: why a Packer's blob would not decode in the executor (a map key that is not
 * a str or bin: msgpack's strict_map_key), or NULL if it would */
const char *payload_problem(const char *blob, Py_ssize_t n);

/* producer_slow.c: the private methods the Python slow paths build on */
int producer_bound(Producer *p);   /* 0 with ValueError set if the client is closed */
PyObject *producer_restock_locked(Producer *p, PyObject *unused);
PyObject *producer_take(Producer *p, PyObject *unused);
PyObject *producer_give_back(Producer *p, PyObject *arg);
PyObject *producer_submit_one(Producer *p, PyObject *args);
PyObject *producer_write_many(Producer *p, PyObject *const *args, Py_ssize_t nargs);
PyObject *producer_publish(Producer *p, PyObject *const *args, Py_ssize_t nargs);
PyObject *producer_unsubmit(Producer *p, PyObject *arg);
PyObject *producer_push_one(Producer *p, PyObject *args);
PyObject *producer_release(Producer *p, PyObject *unused);

#define PRODUCER_SLOW_METHODS                                                             \
    METHOD_NOARGS("_restock_locked", producer_restock_locked, NULL),                      \
    METHOD_NOARGS("_take", producer_take, NULL),                                          \
    METHOD_O("_give_back", producer_give_back, NULL),                                     \
    METHOD_VARARGS("_submit", producer_submit_one, NULL),                                 \
    METHOD_FAST("_write_many", producer_write_many, NULL),                                \
    METHOD_FAST("_publish", producer_publish, NULL),                                      \
    METHOD_O("_unsubmit", producer_unsubmit, NULL),                                       \
    METHOD_VARARGS("_push", producer_push_one, NULL),                                     \
    METHOD_NOARGS("_release", producer_release, NULL),

/* reset.c: Producer.reset and ._reset_to */
int producer_reset_init(void);
PyObject *producer_reset(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);
PyObject *producer_reset_to(Producer *p, PyObject *args);
/* the id a cancel or reset (`what`) of p acts on: a handle of p's service instance, or an
 * int (producer.c); -1 with the API's exception set */
int producer_handle_id(Producer *p, PyObject *o, i64 *h, const char *what);
#define PRODUCER_URGENT_MS 20   /* a deadline nearer than this wakes a sleeping coordinator */
#define RESET_DOC                                                                          \
    "reset(handle, delay_ms=None, *, deadline_ms=None, at=None) -> bool\n\nMove a pending " \
    "timer's deadline, earlier or later, in one step: same id, no second slot. True iff "    \
    "the timer will run at the new deadline and not at the old one; False if it fired, "     \
    "was cancelled or ended first (a racing fire, cancel or reset has exactly one "          \
    "winner). A repeating timer's next run moves; a run in flight is not reset (False). "    \
    "TypeError for an operation."
#define PRODUCER_RESET_METHODS                                                            \
    METHOD_FAST_KW("reset", producer_reset, RESET_DOC),                                   \
    METHOD_VARARGS("_reset_to", producer_reset_to, NULL),

/* watch.c: Producer.watch, .check_and_complete and ._bind_ops, and the module's key_id */
int producer_ops_init(void);
PyObject *producer_watch(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);
PyObject *producer_check_and_complete(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames);
PyObject *producer_bind_ops(Producer *p, PyObject *const *args, Py_ssize_t nargs);
PyObject *shmwheel_key_id(PyObject *module, PyObject *key);

#define PRODUCER_OPS_METHODS                                                              \
    METHOD_FAST_KW("watch", producer_watch, WATCH_DOC),                                   \
    METHOD_FAST_KW("check_and_complete", producer_check_and_complete,                     \
        CHECK_AND_COMPLETE_DOC),                                                          \
    METHOD_FAST("_bind_ops", producer_bind_ops, NULL),

#define WATCH_DOC                                                                          \
    "watch(keys, timeout_ms, *, on_complete=None, on_expire=None, payload=None, "          \
    "required=1) -> Operation\n\nWatch a delayed operation on `keys` (Kafka's "            \
    "tryCompleteElseWatch across processes). It completes once check_and_complete calls "  \
    "on its keys, from any process, have added up to `required`; or it expires "           \
    "`timeout_ms` from now. Exactly one of the two happens, and then the task named "      \
    "`on_complete` or `on_expire` (None: no task) runs once in the executor pool with "    \
    "`payload`; context().key is the list of keys. A key named twice counts once. "        \
    "Refused with ValueError / TypeError: no keys, an unknown task, `required` < 1, a bad " \
    "timeout, a payload msgpack cannot encode or too large; Full when the service or its " \
    "watch lists (watch_capacity) are full."
#define CHECK_AND_COMPLETE_DOC                                                             \
    "check_and_complete(key, amount=1) -> int\n\nAdd `amount` to every live operation "    \
    "watching `key` (once per operation, however many of its keys this is) and complete "  \
    "those that reach their `required` amount; returns how many this call completed "      \
    "(Kafka's checkAndComplete)."

#endif
