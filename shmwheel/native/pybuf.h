/* pybuf.h: borrowing an int64 array (numpy, memoryview, anything with the buffer
 * protocol) from Python for the length of one call. */
#ifndef SHMWHEEL_PYBUF_H
#define SHMWHEEL_PYBUF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "contract.h"

typedef struct {
    Py_buffer view;
    i64 *p;        /* first word */
    Py_ssize_t n;  /* words */
} I64Buf;

/* Borrow `o` as contiguous int64 words; 0 on success, -1 with TypeError set. */
static inline int i64buf_get(PyObject *o, I64Buf *b, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &b->view, flags) < 0) return -1;
    const char *f = b->view.format;
    if (b->view.itemsize != 8 || !f || !(f[0] == 'q' || f[0] == 'l' ||
            ((f[0] == '<' || f[0] == '=' || f[0] == '@') && (f[1] == 'q' || f[1] == 'l')))) {
        PyBuffer_Release(&b->view);
        PyErr_SetString(PyExc_TypeError, "expected a contiguous int64 array");
        return -1;
    }
    b->p = (i64 *)b->view.buf;
    b->n = b->view.len / 8;
    return 0;
}

static inline void i64buf_release(I64Buf *b) { PyBuffer_Release(&b->view); }

/* The buffers a long-lived native object points into (views of the segment). They are
 * held until close(): the segment's mmap cannot be closed while a view is exported, so
 * every owner of one has a close() that the Python side calls before unmapping. */
#define HOLDS_MAX 12
typedef struct {
    I64Buf b[HOLDS_MAX];
    int n;
} Holds;

/* Hold `o` writable; its words in *p (and their count in *n if not NULL). */
static inline int holds_add(Holds *h, PyObject *o, i64 **p, Py_ssize_t *n) {
    if (h->n == HOLDS_MAX || i64buf_get(o, &h->b[h->n], 1) < 0) return -1;
    *p = h->b[h->n].p;
    if (n) *n = h->b[h->n].n;
    h->n++;
    return 0;
}

static inline void holds_release(Holds *h) {
    while (h->n > 0) i64buf_release(&h->b[--h->n]);
}

#endif
