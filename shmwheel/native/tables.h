/* tables.h: the `Tables` object (one attachment's view of a service's tables) shared by
 * slots_py.c, which defines the type, and purgatory_py.c, which adds the purgatory's and
 * the outcomes' methods to it. */
#ifndef SHMWHEEL_TABLES_H
#define SHMWHEEL_TABLES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pybuf.h"
#include "pymethods.h"
#include "slots.h"

typedef struct {
    PyObject_HEAD
    Seg seg;
    Holds holds;
    PyObject *journal;   /* the JournalBuffer seg.jb points into, or NULL */
} Tables;

JBuf *shmwheel_jbuf_of(PyObject *o);   /* journal.c */
extern PyTypeObject TablesType;        /* slots_py.c */

/* argument helpers (slots_py.c) */
int arg_i64(PyObject *o, i64 *v);
int nargs_ok(Py_ssize_t n, Py_ssize_t want, const char *name);
int open_or_raise(Tables *t);
#define NARGS(want, name) if (nargs_ok(nargs, want, name) < 0) return NULL
#define OPEN(t) if (open_or_raise(t) < 0) return NULL

/* purgatory_py.c */
PyObject *tables_set_purgatory(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_watch_format(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_watch_add(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_watch_signal(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_op_store(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_watch_purge(Tables *self, PyObject *arg);
PyObject *tables_waiters_format(Tables *self, PyObject *arg);
PyObject *tables_outcome_watch(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_outcome_state(Tables *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *tables_waiter_release(Tables *self, PyObject *const *args, Py_ssize_t nargs);

#define TABLES_PURGATORY_METHODS                                                          \
    METHOD_FAST("set_purgatory", tables_set_purgatory,                                    \
        "set_purgatory(watch, waiters, outq, outq_cap, nrings): the purgatory's and the " \
        "outcomes' regions."),                                                            \
    METHOD_FAST("watch_format", tables_watch_format,                                      \
        "watch_format(nbuckets, capacity): empty watch lists (a new segment)."),          \
    METHOD_FAST("watch_add", tables_watch_add,                                            \
        "watch_add(handle, keys) -> len(keys), or -1 when the table is full (lock held; " \
        "an installed operation: its side record names its block)."),                     \
    METHOD_FAST("watch_signal", tables_watch_signal,                                      \
        "watch_signal(key, amount) -> operations completed (lock held)."),                \
    METHOD_FAST("op_store", tables_op_store,                                              \
        "op_store(handle, data, key ids) -> class << 32 | block; -1 watch lists full, "   \
        "-2 arena full (lock held)."),                                                    \
    METHOD_O("watch_purge", tables_watch_purge,                                           \
        "watch_purge(budget) -> dead entries freed in budget chains (lock held)."),       \
    METHOD_O("waiters_format", tables_waiters_format,                                     \
        "waiters_format(nbuckets): an empty waiter table (a new segment)."),              \
    METHOD_FAST("outcome_watch", tables_outcome_watch,                                    \
        "outcome_watch(handle, ring) -> (state word, outcome, entry): the outcome "       \
        "(OUT_MAKE) if the handle's use ended and it is still known, else 0; ring >= 0 "  \
        "claims a waiter entry, returned while the use is not over (-1: nothing to wait " \
        "for; -2: the handle's buckets are full). No lock."),                             \
    METHOD_FAST("outcome_state", tables_outcome_state,                                    \
        "outcome_state(handle, entry) -> (state word, outcome) of a handle waited for "   \
        "in entry (or -1). No lock."),                                                    \
    METHOD_FAST("waiter_release", tables_waiter_release,                                  \
        "waiter_release(handle, entry): empty this client's entry for handle. No lock."),

#endif
