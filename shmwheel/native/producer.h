/* producer.h: the native halves of a Client (Producer, producer.c) and of a TimerHandle
 * (Handle, handle.c), and what each file needs of the other. */
#ifndef SHMWHEEL_PRODUCER_H
#define SHMWHEEL_PRODUCER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pybuf.h"
#include "ring.h"
#include "slots.h"

#define CACHE_MAX 256

typedef struct {
    PyObject_HEAD
    Seg seg;
    Ring ring;
    Holds holds;
    i64 *counters;        /* this client's counter row (single writer: this process) */
    i64 *header;          /* the segment header */
    i64 w_sleeping, w_stopping;
    i64 ring_index, max_delay_ms, batch;
    i64 scheduled, cancelled;
    int closed, forked;
    int ncache, nblocks;
    i64 cache[CACHE_MAX];   /* RESERVED handles of this ring */
    i64 blocks[CACHE_MAX];  /* class-0 arena blocks owned by OWNER_RING(ring) */
    PyObject *task_ids;     /* dict: task name -> id */
    PyObject *encode;       /* payload -> bytes: msgpack's Packer.pack (its errors are
                               replaced by the slow path's, which say what to change) */
    PyTypeObject *handle_type;
} Producer;

typedef struct {
    PyObject_HEAD
    PyObject *client;
    i64 id;
    i64 deadline_ms;
    PyObject *future;   /* its outcome's future, once someone asked (outcomes.py), or NULL */
} Handle;

extern PyTypeObject ProducerType, HandleType;

/* Producer.cancel(handle_or_id) (producer.c) */
PyObject *producer_cancel(PyObject *producer, PyObject *handle);

#endif
