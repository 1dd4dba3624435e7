/* journal.c: `JournalBuffer`, the Python face of journal.h's record encoder (which is
 * journal_encode.c), and the scanner the reader builds on.
 *
 * The coordinator and the reaper attach a JournalBuffer to their `Tables`
 * (Tables.set_journal); the slot state machine then appends a record for each lifecycle
 * event it decides (slots.c: SCHEDULED before a slot is linked, CANCELLED when a
 * cancelled slot is retired, OUTCOME when an outcome is settled; slots_py.c: FIRED when
 * advance wins a slot). Python writes the buffer to its segment file (a JournalBuffer
 * exports the buffer protocol, so os.write takes it without a copy) and clears it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "pytype.h"
#include "pymethods.h"

/* ---- JournalBuffer ------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    JBuf jb;
} JournalBuffer;

JBuf *shmwheel_jbuf_of(PyObject *o);   /* for slots_py.c */
static PyTypeObject JournalBufferType;

JBuf *shmwheel_jbuf_of(PyObject *o) {
    if (!PyObject_TypeCheck(o, &JournalBufferType)) {
        PyErr_SetString(PyExc_TypeError, "expected a JournalBuffer");
        return NULL;
    }
    return &((JournalBuffer *)o)->jb;
}

static void jbo_dealloc(JournalBuffer *b) {
    free(b->jb.p);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static Py_ssize_t jbo_len(JournalBuffer *b) { return (Py_ssize_t)b->jb.len; }

static int jbo_getbuffer(JournalBuffer *b, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a JournalBuffer is read-only");
        return -1;
    }
    static unsigned char empty;
    if (PyBuffer_FillInfo(view, (PyObject *)b, b->jb.p ? b->jb.p : &empty,
                          (Py_ssize_t)b->jb.len, 1, flags) < 0)
        return -1;
    b->jb.exports++;
    return 0;
}

static void jbo_releasebuffer(JournalBuffer *b, Py_buffer *view) { b->jb.exports--; }

static PyObject *jbo_check(JournalBuffer *b, PyObject *unused) {
    /* raise if a batch ran out of memory: its records are incomplete */
    if (b->jb.failed) {
        b->jb.failed = 0;
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *jbo_clear(JournalBuffer *b, PyObject *unused) {
    if (b->jb.exports) return PyErr_Format(PyExc_BufferError, "the buffer is being read");
    b->jb.len = 0;
    b->jb.failed = 0;
    Py_RETURN_NONE;
}

static PyObject *jbo_append(JournalBuffer *b, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    if (v.len > J_MAX_BODY) {
        PyBuffer_Release(&v);
        return PyErr_Format(PyExc_ValueError, "a journal record body is at most %d bytes",
                            J_MAX_BODY);
    }
    jrec_raw(&b->jb, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return jbo_check(b, NULL);
}

static PyMethodDef jbo_methods[] = {
    METHOD_O("append", jbo_append,
        "append(body): frame one msgpack-encoded record body (length, CRC-32C) and add it."),
    METHOD_NOARGS("clear", jbo_clear, "Forget the records (after writing them)."),
    METHOD_NOARGS("check", jbo_check,
        "Raise MemoryError if records were dropped for want of memory since the last clear()."),
    METHODS_END,
};

static PySequenceMethods jbo_seq = {.sq_length = (lenfunc)jbo_len};
static PyBufferProcs jbo_buffer = {
    .bf_getbuffer = (getbufferproc)jbo_getbuffer,
    .bf_releasebuffer = (releasebufferproc)jbo_releasebuffer,
};

static PyTypeObject JournalBufferType = NATIVE_TYPE(
    "JournalBuffer", JournalBuffer, 0,
    "JournalBuffer(): framed journal records waiting for one write(2) (journal.h); supports "
    "the buffer protocol.",
    .tp_new = PyType_GenericNew, TYPE_BASICS(jbo), .tp_as_sequence = &jbo_seq,
    .tp_as_buffer = &jbo_buffer);

static PyObject *py_crc32(PyObject *m, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = jcrc32(0, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

/* journal_crc32c(data, portable=False): the table form when `portable` is true */
static PyObject *py_crc32c(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "journal_crc32c(data, portable=False)");
    int portable = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (portable < 0) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = (portable ? jcrc32c_portable : jcrc32c)(0, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32c_hardware(PyObject *m, PyObject *unused) {
    return PyBool_FromLong(jcrc32c_hardware());
}

/* ---- scanning: the reader's fast path ------------------------------------------------ */
/* A msgpack integer at *p (< end) into *v; 0 if it is not one (or does not fit an i64). */
static int mp_get_int(const unsigned char **p, const unsigned char *end, i64 *v) {
    const unsigned char *q = *p;
    unsigned c = *q++;
    int n = 0, sign = 0;
    if (c < 0x80) { *v = c; *p = q; return 1; }
    if (c >= 0xe0) { *v = (i64)(signed char)c; *p = q; return 1; }
    switch (c) {
    case 0xcc: n = 1; break; case 0xcd: n = 2; break; case 0xce: n = 4; break;
    case 0xcf: n = 8; break;
    case 0xd0: n = 1; sign = 1; break; case 0xd1: n = 2; sign = 1; break;
    case 0xd2: n = 4; sign = 1; break; case 0xd3: n = 8; sign = 1; break;
    default: return 0;
    }
    if (q + n > end) return 0;
    uint64_t u = 0;
    for (int i = 0; i < n; i++) u = u << 8 | q[i];
    if (sign && n < 8 && (u >> (8 * n - 1))) u |= ~0ULL << (8 * n);   /* sign-extend */
    if (!sign && n == 8 && u > (uint64_t)INT64_MAX) return 0;
    *v = (i64)u;
    *p = q + n;
    return 1;
}

/* A msgpack bin at *p: its offset from `base` and length. */
static int mp_get_bin(const unsigned char **p, const unsigned char *end,
                      const unsigned char *base, i64 *off, i64 *len) {
    const unsigned char *q = *p;
    unsigned c = *q++;
    int n = c == 0xc4 ? 1 : c == 0xc5 ? 2 : c == 0xc6 ? 4 : 0;
    if (!n || q + n > end) return 0;
    uint64_t u = 0;
    for (int i = 0; i < n; i++) u = u << 8 | q[i];
    q += n;
    if (u > (uint64_t)(end - q)) return 0;
    *off = q - base;
    *len = (i64)u;
    *p = q + u;
    return 1;
}

/* The arity (after the kind) of the kinds decoded here and whether the last is a bin;
 * 0 for the kind the Python reader decodes (header). */
static int native_arity(i64 kind, int *bin_last) {
    *bin_last = kind == J_SCHEDULED || kind == J_WATCHED;
    switch (kind) {
    case J_SCHEDULED: return 9;
    case J_WATCHED: return 8;
    case J_CANCELLED: case J_COMPLETED: case J_EXPIRED: return 2;
    case J_FIRED: return 4;
    case J_OUTCOME: return 6;
    default: return 0;
    }
}

/* journal_scan(data, start, out, version) -> (rows, next offset, end): frames from
 * `start` of a segment of format `version` (its CRC: CRC-32C from 3, else CRC-32), one
 * row of SCAN_WORDS per frame in out (journal.h, JOURNAL_SCAN: offset, status, kind, up
 * to SCAN_MAX_FIELDS integer fields, the blob's offset and length, and the blob as a
 * little-endian word when it has at most 8 bytes: the payload word); `end` says why the
 * scan stopped (SCAN_END_*). */
static PyObject *py_scan(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "journal_scan(data, start, out, version)");
    Py_buffer d, o;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start < 0 && PyErr_Occurred()) return NULL;
    long version = PyLong_AsLong(args[3]);
    if (version == -1 && PyErr_Occurred()) return NULL;
    uint32_t (*crc_of)(uint32_t, const void *, size_t) = version >= 3 ? jcrc32c : jcrc32;
    if (PyObject_GetBuffer(args[0], &d, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &o, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&d);
        return NULL;
    }
    const unsigned char *base = d.buf;
    i64 *out = o.buf, cap = o.len / (8 * SCAN_WORDS), rows = 0;
    Py_ssize_t at = start;
    int reason = SCAN_END_CLEAN;
    while (at < d.len) {
        if (rows == cap) { reason = SCAN_END_FULL; break; }
        if (at + J_FRAME_BYTES > d.len) { reason = SCAN_END_TORN_FRAME; break; }
        const unsigned char *f = base + at;
        uint32_t n = f[0] | f[1] << 8 | f[2] << 16 | (uint32_t)f[3] << 24;
        uint32_t crc = f[4] | f[5] << 8 | f[6] << 16 | (uint32_t)f[7] << 24;
        if (n == 0 || n > J_MAX_BODY) { reason = SCAN_END_BAD_LENGTH; break; }
        if (at + J_FRAME_BYTES + (Py_ssize_t)n > d.len) { reason = SCAN_END_TORN_BODY; break; }
        const unsigned char *b = f + J_FRAME_BYTES, *bend = b + n, *p = b;
        i64 *row = &out[rows++ * SCAN_WORDS];
        memset(row, 0, 8 * SCAN_WORDS);
        row[SCAN_OFFSET] = at;
        at += J_FRAME_BYTES + n;
        if (crc_of(0, b, n) != crc) { row[SCAN_STATUS] = SCAN_BAD_CRC; continue; }
        row[SCAN_STATUS] = SCAN_UNDECODED;   /* unless decoded below */
        int bin_last, arity = (*p & 0xf0) == 0x90 ? (*p & 0x0f) - 1 : -1;
        p++;
        i64 kind;
        if (arity < 1 || !mp_get_int(&p, bend, &kind)) continue;
        row[SCAN_KIND] = kind;
        if (native_arity(kind, &bin_last) != arity) continue;
        int ints = arity - bin_last, ok = 1;
        i64 *field = &row[SCAN_FIELDS], *at_ = &row[SCAN_BLOB_AT], *len = &row[SCAN_BLOB_LEN];
        for (int k = 0; k < ints && ok; k++) ok = p < bend && mp_get_int(&p, bend, &field[k]);
        if (ok && bin_last) ok = p < bend && mp_get_bin(&p, bend, base, at_, len);
        if (ok && bin_last && *len <= 8) {   /* a blob that fits a payload word */
            uint64_t w = 0;
            for (i64 i = *len - 1; i >= 0; i--) w = w << 8 | base[*at_ + i];
            row[SCAN_WORD] = (i64)w;
        }
        if (ok && p == bend) row[SCAN_STATUS] = SCAN_DECODED;
    }
    PyBuffer_Release(&o);
    PyBuffer_Release(&d);
    return Py_BuildValue("(LnI)", (long long)rows, at, reason);
}

static PyMethodDef journal_functions[] = {
    METHOD_FAST("journal_scan", py_scan,
        "journal_scan(data, start, out, version) -> (rows, next offset, end reason): the "
        "frames of a segment of that format version as rows of SCAN_WORDS int64 (journal.h, "
        "JOURNAL_SCAN)."),
    METHOD_O("journal_crc32", py_crc32,
        "journal_crc32(data) -> the CRC-32 format versions 1 and 2 framed records with "
        "(= zlib.crc32)."),
    METHOD_FAST("journal_crc32c", py_crc32c,
        "journal_crc32c(data, portable=False) -> the CRC-32C (Castagnoli) version 3 frames "
        "records with; `portable`: computed by the table form, not the CPU's instruction."),
    METHOD_NOARGS("journal_crc32c_hardware", py_crc32c_hardware,
        "journal_crc32c_hardware() -> True iff journal_crc32c uses the CPU's crc32 "
        "instruction (SSE4.2)."),
    METHODS_END,
};

int shmwheel_add_journal_type(PyObject *m) {
    jcrc_init();
    if (PyType_Ready(&JournalBufferType) < 0) return -1;
    Py_INCREF(&JournalBufferType);
    if (PyModule_AddObject(m, "JournalBuffer", (PyObject *)&JournalBufferType) < 0) return -1;
    return PyModule_AddFunctions(m, journal_functions);
}
