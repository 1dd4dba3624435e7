/* errlog.c: the channel that carries a failed task's exception from its executor to the
 * clients (errlog.h, "task error records": the layout). An executor whose task raised
 * writes a record (the handle, a stamp, the run, the task, the exception's type name,
 * message and traceback text) into its own log before it publishes the outcome "error"
 * on its result ring (executor.c calls its logger before ring_push). A client that learns
 * the outcome "error" looks for the timer's record in every executor's log.
 *
 * The ordering argument:
 *
 *  - One writer per log: the executor of that index (a replacement starts after its
 *    predecessor died, as for its rings). ERR_NEXT and ERR_EVICTED are that writer's
 *    words; a record torn by a death leaves ERR_NEXT where it was, and the replacement
 *    rewrites that record. ERR_STAMP is shared: a relaxed fetch-and-add (an atomic
 *    read-modify-write, so no two records get one stamp). Two runs of one repeating
 *    timer are ordered by happens-before (the first run's outcome is published, settled
 *    and re-armed before the second fires), and so are their fetch-and-adds: the later
 *    run's stamp is the larger (C11 coherence of the stamp word).
 *
 *  - A record is a seqlock (Boehm, "Can seqlocks get along with programming language
 *    memory models?", 2012). The writer stores ER_SEQ = 2k + 1 (relaxed), then a release
 *    fence, then the body with relaxed stores, then ER_SEQ = 2k + 2 (release). A reader
 *    loads ER_SEQ (acquire), copies the body with relaxed loads, issues an acquire fence,
 *    and loads ER_SEQ again (relaxed): the copy is one whole record iff both loads saw the
 *    same even value. If any body load read a store of a later write of that position,
 *    the writer's release fence and the reader's acquire fence synchronize, so the odd
 *    ER_SEQ stored before that fence is visible to the second load, which then differs. A
 *    writer killed between the two stores leaves ER_SEQ odd: never read as valid. Every
 *    access is atomic, so there is no data race in the C11 model, whatever the timing.
 *
 *  - Evictions (what makes "the newest record of a repeating timer" sound): before the
 *    writer overwrites a record, it stores that record's stamp in ERR_EVICTED, then a
 *    release fence, then the odd ER_SEQ. A reader that saw any trace of the overwrite (an
 *    ER_SEQ or a body word of the new write) has synchronized with that fence by its
 *    acquire load or its acquire fence, and reads ERR_EVICTED after one more acquire
 *    fence, so it sees that stamp or a later one (a log's stamps only grow). So if the
 *    newest intact record of a timer found has stamp S and every ERR_EVICTED is below S,
 *    no later record of that timer was overwritten before the scan.
 *
 *  - The checksum (err_check) is not needed for any of this: it catches what no protocol
 *    can, a stray write into the region (a hostile neighbour, a bug elsewhere).
 *
 *  - A reader asks only after the outcome reached it, which happens after the executor's
 *    result-ring push (release; the reaper acquires it, settles under the lock, frees the
 *    slot with the outcome in its payload word, writes it into the entries that wait for
 *    it and pushes the outcome ring: waiters.c), so every record of the timer is complete
 *    by then.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "errlog.h"
#include "pybuf.h"
#include "pymethods.h"


static u64 err_check(i64 k, const i64 *rec, i64 text_words) {
    u64 h = 0xcbf29ce484222325ULL ^ (u64)k;   /* FNV-1a over words, then murmur3's */
    for (i64 i = ER_HANDLE; i < ER_CHECK; i++) h = (h ^ (u64)rec[i]) * 0x100000001b3ULL;
    for (i64 i = 0; i < text_words; i++) h = (h ^ (u64)rec[ER_TEXT + i]) * 0x100000001b3ULL;
    h ^= h >> 33;   /* finaliser: every input bit reaches every output bit */
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* words of text a lengths word announces; *ok = 0 if it breaks a limit */
static i64 text_words(i64 lengths, int *ok) {
    i64 lt = lengths & 0xFFFF, lm = (lengths >> 16) & 0xFFFF, lb = (lengths >> 32) & 0xFFFF;
    *ok = (lengths >> 48) == 0 && lt <= ER_TYPE_MAX && lm <= ER_MESSAGE_MAX &&
          lt + lm + lb <= ER_TEXT_BYTES;
    return *ok ? (lt + lm + lb + 7) / 8 : 0;
}

static i64 *log_of(i64 *region, i64 x) {
    return &region[ERR_REGION_HEADER + x * ERR_LOG_WORDS];
}

static i64 *record_at(i64 *log, i64 p) {
    return &log[ERR_HEADER_WORDS + p * ERR_RECORD_WORDS];
}

/* errlog_write(region, executor, handle, run, task, flags, type, message, traceback) -> k */
static PyObject *py_errlog_write(PyObject *m, PyObject *args) {
    PyObject *ro;
    long long x, h, run, task, flags;
    const char *t, *msg, *tb;
    Py_ssize_t lt, lm, lb;
    if (!PyArg_ParseTuple(args, "OLLLLLy#y#y#:errlog_write", &ro, &x, &h, &run, &task, &flags,
                          &t, &lt, &msg, &lm, &tb, &lb))
        return NULL;
    if (lt > ER_TYPE_MAX || lm > ER_MESSAGE_MAX || lt + lm + lb > ER_TEXT_BYTES)
        return PyErr_Format(PyExc_ValueError, "errlog_write: texts over their limits "
                            "(type %zd > %d, message %zd > %d, or all %zd > %d bytes)", lt,
                            ER_TYPE_MAX, lm, ER_MESSAGE_MAX, lt + lm + lb, ER_TEXT_BYTES);
    I64Buf region;
    if (i64buf_get(ro, &region, 1) < 0) return NULL;
    if (x < 0 || ERR_REGION_HEADER + (x + 1) * ERR_LOG_WORDS > region.n) {
        i64buf_release(&region);
        return PyErr_Format(PyExc_ValueError, "errlog_write: no log %lld in a region of %zd "
                            "words", x, region.n);
    }
    i64 body[ERR_RECORD_WORDS];
    memset(body, 0, sizeof body);
    body[ER_HANDLE] = h;
    body[ER_RUN] = run;
    body[ER_TASK] = task;
    body[ER_FLAGS] = flags;
    body[ER_LENGTHS] = (i64)lt | (i64)lm << 16 | (i64)lb << 32;
    char *text = (char *)&body[ER_TEXT];
    memcpy(text, t, (size_t)lt);
    memcpy(text + lt, msg, (size_t)lm);
    memcpy(text + lt + lm, tb, (size_t)lb);
    int ok;
    i64 nw = ER_TEXT + text_words(body[ER_LENGTHS], &ok);
    i64 *log = log_of(region.p, x);
    /* ERR_NEXT: this writer's own word (relaxed: nobody else stores it) */
    i64 k = __atomic_load_n(&log[ERR_NEXT], __ATOMIC_RELAXED);
    i64 *rec = record_at(log, k % ERR_RECORDS);
    if (k >= ERR_RECORDS)   /* the record k - ERR_RECORDS goes: its stamp, our own store */
        __atomic_store_n(&log[ERR_EVICTED], __atomic_load_n(&rec[ER_STAMP], __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
    /* relaxed: the read-modify-write alone makes each stamp unique (see the header) */
    body[ER_STAMP] = __atomic_add_fetch(&region.p[ERR_STAMP], 1, __ATOMIC_RELAXED);
    body[ER_CHECK] = (i64)err_check(k, body, nw - ER_TEXT);
    /* release fence: whoever sees the odd ER_SEQ (or anything after it) sees ERR_EVICTED */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&rec[ER_SEQ], 2 * k + 1, __ATOMIC_RELAXED);
    /* release fence: a reader whose copy saw any body store below sees the odd ER_SEQ in
     * its second load (the fence-fence argument in the header) */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (i64 i = ER_HANDLE; i < nw; i++) __atomic_store_n(&rec[i], body[i], __ATOMIC_RELAXED);
    /* release: the whole body is visible to whoever acquires 2k + 2 */
    __atomic_store_n(&rec[ER_SEQ], 2 * k + 2, __ATOMIC_RELEASE);
    __atomic_store_n(&log[ERR_NEXT], k + 1, __ATOMIC_RELAXED);
    i64buf_release(&region);
    return PyLong_FromLongLong(k);
}

/* Copy the record at `rec` into `copy` if it is a whole record of handle h: returns its
 * number k, or -1 (empty, being written, another timer's, or overwritten while read).
 * *ok: its lengths and checksum check out. */
static i64 read_record(const i64 *rec, i64 h, i64 *copy, int *ok) {
    /* acquire: if even, the body stores of that write are visible */
    i64 s0 = __atomic_load_n(&rec[ER_SEQ], __ATOMIC_ACQUIRE), nw = ER_TEXT;
    *ok = 0;
    if (s0 <= 0 || (s0 & 1) || __atomic_load_n(&rec[ER_HANDLE], __ATOMIC_RELAXED) != h)
        return -1;
    for (i64 i = ER_HANDLE; i < ER_TEXT; i++) copy[i] = __atomic_load_n(&rec[i], __ATOMIC_RELAXED);
    int fits;
    nw += text_words(copy[ER_LENGTHS], &fits);   /* garbage if torn: bounded, then checked */
    for (i64 i = ER_TEXT; i < nw; i++) copy[i] = __atomic_load_n(&rec[i], __ATOMIC_RELAXED);
    /* acquire fence, then the second load: unchanged iff no later write touched the copy */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&rec[ER_SEQ], __ATOMIC_RELAXED) != s0) return -1;
    i64 k = s0 / 2 - 1;
    *ok = fits && copy[ER_HANDLE] == h && (u64)copy[ER_CHECK] == err_check(k, copy, nw - ER_TEXT);
    return k;
}

/* errlog_find(region, handle) -> (verdict, executor, record, ...):
 *   FOUND: (.., run, task, flags, type, message, traceback), the texts as bytes;
 *   STALE: (.., run, the largest evicted stamp, the record's stamp);
 *   DAMAGED: (executor, record) of the record that does not check out; MISSING: (-1, -1). */
static PyObject *py_errlog_find(PyObject *m, PyObject *args) {
    PyObject *ro;
    long long h;
    if (!PyArg_ParseTuple(args, "OL:errlog_find", &ro, &h)) return NULL;
    I64Buf region;
    if (i64buf_get(ro, &region, 0) < 0) return NULL;
    i64 logs = (region.n - ERR_REGION_HEADER) / ERR_LOG_WORDS;
    i64 best[ERR_RECORD_WORDS], copy[ERR_RECORD_WORDS];
    i64 bx = -1, bk = -1, dx = -1, dk = -1;
    for (i64 x = 0; x < logs; x++) {
        i64 *log = log_of(region.p, x);
        for (i64 p = 0; p < ERR_RECORDS; p++) {
            int ok;
            i64 k = read_record(record_at(log, p), h, copy, &ok);
            if (k < 0) continue;
            if (!ok) {
                dx = x, dk = k;
            } else if (bk < 0 || copy[ER_STAMP] > best[ER_STAMP]) {
                memcpy(best, copy, sizeof copy);
                bx = x, bk = k;
            }
        }
    }
    /* acquire fence: the evictions behind every trace of an overwrite the scan saw */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    i64 evicted = 0;
    for (i64 x = 0; x < logs; x++) {
        i64 e = __atomic_load_n(&log_of(region.p, x)[ERR_EVICTED], __ATOMIC_RELAXED);
        if (e > evicted) evicted = e;
    }
    PyObject *r;
    int repeating = bk >= 0 && (best[ER_FLAGS] & ERF_REPEATING);
    if (bk >= 0 && (!repeating || (dk < 0 && evicted < best[ER_STAMP]))) {
        i64 lt = best[ER_LENGTHS] & 0xFFFF, lm = (best[ER_LENGTHS] >> 16) & 0xFFFF;
        i64 lb = (best[ER_LENGTHS] >> 32) & 0xFFFF;
        const char *text = (const char *)&best[ER_TEXT];
        r = Py_BuildValue("(iLLLLLy#y#y#)", ERRLOG_FOUND, (long long)bx, (long long)bk,
                          (long long)best[ER_RUN], (long long)best[ER_TASK],
                          (long long)best[ER_FLAGS], text, (Py_ssize_t)lt, text + lt,
                          (Py_ssize_t)lm, text + lt + lm, (Py_ssize_t)lb);
    } else if (dk >= 0) {   /* no record, or a repeating timer's that a damaged one may follow */
        r = Py_BuildValue("(iLL)", ERRLOG_DAMAGED, (long long)dx, (long long)dk);
    } else if (bk >= 0) {
        r = Py_BuildValue("(iLLLLL)", ERRLOG_STALE, (long long)bx, (long long)bk,
                          (long long)best[ER_RUN], (long long)evicted, (long long)best[ER_STAMP]);
    } else {
        r = Py_BuildValue("(iLL)", ERRLOG_MISSING, -1LL, -1LL);
    }
    i64buf_release(&region);
    return r;
}

static PyMethodDef errlog_methods[] = {
    METHOD_VARARGS("errlog_write", py_errlog_write,
        "errlog_write(region, executor, handle, run, task, flags, type, message, traceback) "
        "-> record number: an executor records a failed task (errlog.c); the texts are bytes "
        "within contract.h's ER_* limits."),
    METHOD_VARARGS("errlog_find", py_errlog_find,
        "errlog_find(region, handle) -> (verdict, executor, record, ...): the newest whole "
        "record of a timer in every log, checked (the ERRLOG_* verdicts, errlog.h)."),
    METHODS_END,
};

/* errlog_write / errlog_find (called from executor.c's shmwheel_add_executor_type); the
 * constants of errlog.h's ERROR_LOGS reach Python with every other list (module.c) */
int shmwheel_add_errlog(PyObject *m) {
    if (PyModule_AddFunctions(m, errlog_methods) < 0) return -1;
    return 0;
}
