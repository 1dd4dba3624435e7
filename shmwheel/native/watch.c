/* watch.c: the purgatory's client hot path, Client.watch and Client.check_and_complete
 * (purgatory.c holds the design; this is its calling side), and a key's id.
 *
 * The common call runs here: keys a list or tuple of at most FAST_KEYS str, bytes or int
 * keys; tasks named or None; `required` and `amount` ints; a payload msgpack encodes and
 * the executor can decode (payload.c); the whole block within one arena block. Its keys
 * are encoded and hashed, its block and watch entries written under the segment lock taken
 * here (op_store), and its slot submitted on the client's ring as schedule() submits a
 * timer. Anything else, and every refusal, goes to the Python methods _watch_slow /
 * _check_and_complete_slow (service/caller/purgatory.py) with the arguments as given: they
 * validate and raise what the API promises, so the native path never decides an error.
 * Keys have one encoder, key_encode below: Python's operations.key_id is this file's
 * key_id.
 *
 * The segment lock from C. Its halves are shm.Locked's: the process's thread lock (the
 * threads of one process share the flock, so it cannot exclude them), then flock on the
 * segment's fd (processes), with the dirty word set while held, so that a holder that dies
 * mid-update is repaired by the next. This code never repairs: a dirty word sends the call
 * to the Python path, which does. The thread lock is only tried (acquire(False)): if
 * another thread of this process holds it, blocking on it with the GIL held could
 * deadlock, so the call goes to the Python path, which waits with the GIL released. flock
 * is tried without blocking, then waited for with the GIL released: the thread lock is
 * ours by then, so no thread of this process is waiting on us. Nothing between taking and
 * dropping the lock calls into Python. Ordering: flock is a system call, and taking and
 * dropping it orders the plain words written under it for the next holder (atomics.h's
 * ground rules); the slot's state word is then published as schedule() publishes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <sys/file.h>

#include "atomics.h"
#include "producer.h"
#include "tables.h"

#define FAST_KEYS 16                         /* more keys: the Python path */
#define BLOB_MAX (MAX_PAYLOAD - OP_HEADER)   /* msgpack [keys, payload] in one block */

static PyObject *s_on_complete, *s_on_expire, *s_payload, *s_required, *s_amount;
static PyObject *s_acquire, *s_release;

/* ---- keys ---------------------------------------------------------------------------- */
/* A key's msgpack encoding, msgpack-python's (the smallest form; tests/test_watch_native.py
 * compares it with msgpack.packb): `hdr` is the type byte and length or the integer,
 * `body` the UTF-8 or the bytes (a pointer into the key; none for an int). */
typedef struct {
    unsigned char hdr[9];
    int nhdr;
    const char *body;
    Py_ssize_t nbody;
} KeyEnc;

static int tagged(unsigned char *o, unsigned char tag, u64 v, int width) {
    o[0] = tag;
    for (int i = width; i >= 1; i--, v >>= 8) o[i] = (unsigned char)v;   /* big-endian */
    return 1 + width;
}

static int sized(KeyEnc *k, Py_ssize_t n, unsigned char fix, int fix_max, unsigned char t8) {
    if (fix && n <= fix_max) {
        k->hdr[0] = (unsigned char)(fix | n);
        k->nhdr = 1;
    } else if (n < 256) k->nhdr = tagged(k->hdr, t8, (u64)n, 1);
    else if (n < 65536) k->nhdr = tagged(k->hdr, t8 + 1, (u64)n, 2);
    else if ((u64)n <= 0xFFFFFFFFULL) k->nhdr = tagged(k->hdr, t8 + 2, (u64)n, 4);
    else {
        PyErr_SetString(PyExc_ValueError, "a key longer than 4 GiB");
        return -1;
    }
    return 0;
}

static int int_key(PyObject *key, KeyEnc *k) {
    unsigned char *o = k->hdr;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow > 0) {   /* above INT64_MAX: msgpack's uint 64 up to UINT64_MAX */
        unsigned long long u = PyLong_AsUnsignedLongLong(key);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred())) {
            k->nhdr = tagged(o, 0xcf, u, 8);
            return 0;
        }
        PyErr_Clear();
    }
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "integer key %R does not fit in 64 bits", key);
        return -1;
    }
    if (v >= 0 && v < 128) {   /* positive fixint */
        o[0] = (unsigned char)v;
        k->nhdr = 1;
    } else if (v >= 0) {
        k->nhdr = v < 256 ? tagged(o, 0xcc, (u64)v, 1) : v < 65536 ? tagged(o, 0xcd, (u64)v, 2)
                  : v <= 0xFFFFFFFFLL ? tagged(o, 0xce, (u64)v, 4) : tagged(o, 0xcf, (u64)v, 8);
    } else if (v >= -32) {     /* negative fixint */
        o[0] = (unsigned char)(v & 0xFF);
        k->nhdr = 1;
    } else {
        k->nhdr = v >= -128 ? tagged(o, 0xd0, (u64)v, 1) : v >= -32768 ? tagged(o, 0xd1, (u64)v, 2)
                  : v >= -2147483648LL ? tagged(o, 0xd2, (u64)v, 4) : tagged(o, 0xd3, (u64)v, 8);
    }
    return 0;
}

/* 0, or -1 with TypeError / ValueError / UnicodeEncodeError set: not a key */
static int key_encode(PyObject *key, KeyEnc *k) {
    k->body = NULL;
    k->nbody = 0;
    if (PyUnicode_Check(key)) {
        if (!(k->body = PyUnicode_AsUTF8AndSize(key, &k->nbody))) return -1;
        return sized(k, k->nbody, 0xa0, 31, 0xd9);   /* fixstr, str 8/16/32 */
    }
    if (PyBytes_Check(key)) {
        k->body = PyBytes_AS_STRING(key);
        k->nbody = PyBytes_GET_SIZE(key);
        return sized(k, k->nbody, 0, 0, 0xc4);       /* bin 8/16/32 */
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) return int_key(key, k);
    PyObject *name = PyType_GetName(Py_TYPE(key));
    if (name) {
        PyErr_Format(PyExc_TypeError, "a key must be a str, bytes or int, got %U", name);
        Py_DECREF(name);
    }
    return -1;
}

static i64 key_hash(const KeyEnc *k) {
    u64 h = key_hash_step(KEY_HASH_START, k->hdr, (size_t)k->nhdr);
    return key_hash_end(key_hash_step(h, k->body, (size_t)k->nbody));
}

PyObject *shmwheel_key_id(PyObject *module, PyObject *key) {
    KeyEnc k;
    if (key_encode(key, &k) < 0) return NULL;
    return PyLong_FromLongLong(key_hash(&k));
}

/* ---- the segment lock (see the header) ----------------------------------------------- */
/* 1: held; 0: not available without a risk (another thread holds it, or it is dirty):
 * take the Python path; -1: an error is set. */
static int seglock_take(Producer *p) {
    PyObject *r = PyObject_CallMethodOneArg(p->thread_lock, s_acquire, Py_False);
    if (!r) return -1;
    int got = r == Py_True;
    Py_DECREF(r);
    if (!got) return 0;
    if (p->lock_fd >= 0 && flock(p->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int rc = -1, err = errno;
        if (err == EWOULDBLOCK) {
            Py_BEGIN_ALLOW_THREADS
            do rc = flock(p->lock_fd, LOCK_EX); while (rc < 0 && (err = errno) == EINTR);
            Py_END_ALLOW_THREADS
        }
        if (rc < 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            Py_XDECREF(PyObject_CallMethodNoArgs(p->thread_lock, s_release));
            return -1;
        }
    }
    if (p->header[p->w_dirty]) {   /* a holder died mid-update: Python repairs */
        if (p->lock_fd >= 0) flock(p->lock_fd, LOCK_UN);
        Py_XDECREF(PyObject_CallMethodNoArgs(p->thread_lock, s_release));
        return 0;
    }
    p->header[p->w_dirty] = 1;
    return 1;
}

static void seglock_drop(Producer *p) {
    p->header[p->w_dirty] = 0;
    if (p->lock_fd >= 0) flock(p->lock_fd, LOCK_UN);
    /* releasing a lock this thread holds cannot fail */
    Py_XDECREF(PyObject_CallMethodNoArgs(p->thread_lock, s_release));
}

static Seg *ops_seg(Producer *p) { return &((Tables *)p->tables)->seg; }

static int fast_ok(Producer *p) {
    return p->fast && p->tables && ((Tables *)p->tables)->seg.watch && producer_ready(p);
}

/* an int in [1, OP_MAX_AMOUNT], else 0 */
static i64 amount_of(PyObject *o) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    return (!overflow && v >= 1 && v <= OP_MAX_AMOUNT) ? v : 0;
}

/* a task's id, TASK_NONE for None; -1 if the Python path must judge it */
static i64 task_of(Producer *p, PyObject *name) {
    if (name == Py_None) return TASK_NONE;
    if (!PyUnicode_CheckExact(name)) return -1;
    PyObject *tid = PyDict_GetItemWithError(p->task_ids, name);
    return tid ? PyLong_AsLongLong(tid) : -1;
}

/* ---- watch ---------------------------------------------------------------------------- */
/* The keys, deduplicated, into kb as msgpack (from kb[0]); their ids, deduplicated, into
 * ids. Returns the count of distinct keys (its ids in *nids), 0 if not the common case. */
static int encode_keys(PyObject *keys, unsigned char *kb, Py_ssize_t *kn, i64 *ids, int *nids) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys), at = 0, off[FAST_KEYS], len[FAST_KEYS];
    PyObject **items = PySequence_Fast_ITEMS(keys);
    int unique = 0;
    *nids = 0;
    if (n < 1 || n > FAST_KEYS) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        KeyEnc k;
        if (key_encode(items[i], &k) < 0) {
            PyErr_Clear();
            return 0;
        }
        Py_ssize_t size = k.nhdr + k.nbody;
        if (at + size > BLOB_MAX) return 0;
        memcpy(kb + at, k.hdr, (size_t)k.nhdr);
        if (k.nbody) memcpy(kb + at + k.nhdr, k.body, (size_t)k.nbody);
        int seen = 0;   /* equal keys have equal encodings (str, bytes and int only) */
        for (int u = 0; u < unique && !seen; u++)
            seen = len[u] == size && !memcmp(kb + off[u], kb + at, (size_t)size);
        if (seen) continue;
        off[unique] = at;
        len[unique++] = size;
        at += size;
        i64 id = key_hash(&k);
        for (int j = 0; j < *nids; j++) seen |= ids[j] == id;
        if (!seen) ids[(*nids)++] = id;   /* two keys with one id count once */
    }
    *kn = at;
    return unique;
}

PyObject *producer_watch(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    PyObject *on_complete = Py_None, *on_expire = Py_None, *payload = Py_None;
    PyObject *required = NULL, *blob = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    /* a new operation, like a new timer, is refused while the journal cannot keep it */
    if (nargs != 2 || !fast_ok(p) || !producer_accepting(p)) goto slow;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (k == s_on_complete) on_complete = v;
        else if (k == s_on_expire) on_expire = v;
        else if (k == s_payload) payload = v;
        else if (k == s_required) required = v;
        else goto slow;
    }
    PyObject *keys = args[0];
    if (!PyList_CheckExact(keys) && !PyTuple_CheckExact(keys)) goto slow;
    i64 need = required ? amount_of(required) : 1;
    i64 done_task = task_of(p, on_complete), expire_task = task_of(p, on_expire);
    i64 now_ns, due;
    if (done_task < 0 || expire_task < 0) {
        if (PyErr_Occurred()) return NULL;
        goto slow;
    }
    if (!need || !producer_due(p, args[1], &now_ns, &due)) goto slow;

    /* the block: OP_HEADER, then msgpack [keys, payload] */
    unsigned char data[MAX_PAYLOAD], kb[BLOB_MAX];
    i64 ids[FAST_KEYS];
    int nids;
    Py_ssize_t kn;
    int nkeys = encode_keys(keys, kb, &kn, ids, &nids);
    if (!nkeys) goto slow;
    unsigned char *o = data + OP_HEADER;
    *o++ = 0x92;                                            /* fixarray of 2 */
    if (nkeys < 16) *o++ = (unsigned char)(0x90 | nkeys);  /* fixarray of the keys */
    else o += tagged(o, 0xdc, (u64)nkeys, 2);               /* array 16 */
    const char *pb = "\xc0";                                /* nil */
    Py_ssize_t pn = 1;
    if (payload != Py_None) {
        if (!(blob = PyObject_CallOneArg(p->encode, payload)) || !PyBytes_Check(blob) ||
                payload_problem(PyBytes_AS_STRING(blob), PyBytes_GET_SIZE(blob))) {
            Py_XDECREF(blob);
            PyErr_Clear();   /* the Python path raises the API's error (for a payload the
                                executor could not decode too: payload.c) */
            goto slow;
        }
        pb = PyBytes_AS_STRING(blob);
        pn = PyBytes_GET_SIZE(blob);
    }
    Py_ssize_t blob_len = (o - data - OP_HEADER) + kn + pn;
    if (blob_len > BLOB_MAX) {
        Py_XDECREF(blob);
        goto slow;
    }
    memcpy(o, kb, (size_t)kn);
    memcpy(o + kn, pb, (size_t)pn);
    Py_XDECREF(blob);
    op_block_header(data, need, done_task, nkeys);

    /* a slot (refilled under the Python lock, before this takes it), then the lock */
    if (!p->ncache && (producer_restock(p) < 0 || !p->ncache)) {
        if (PyErr_Occurred()) return NULL;
        goto slow;   /* no free slot: the Python path waits, then raises Full */
    }
    int got = seglock_take(p);
    if (got < 0) return NULL;
    if (!got || !p->ncache) {   /* (other threads may have emptied the cache meanwhile) */
        if (got) seglock_drop(p);
        goto slow;
    }
    i64 h = p->cache[--p->ncache];
    Seg *s = ops_seg(p);
    i64 where = op_store(s, h, data, OP_HEADER + blob_len, ids, nids);
    if (where < 0) slot_retire(s, s->mem, HANDLE_SLOT(h), TR_RECLAIM);   /* RESERVED, ours;
        op_store stored nothing */
    seglock_drop(p);
    if (where < 0) goto slow;   /* the Python path tries again, and raises Full */

    i64 meta = META_MAKE(expire_task, FLAG_OP | FLAG_ARENA, BLOCK_REF_CLASS(where), blob_len,
                         p->ring_index);
    if (producer_submit(p, h, meta, BLOCK_REF_INDEX(where), due) < 0) return NULL;
    relaxed_store(&p->counters[C_OPS_WATCHED], relaxed_load(&p->counters[C_OPS_WATCHED]) + 1);
    /* a sleeping coordinator links the operation only when it wakes: a signal that
     * completes it meanwhile would wait for that (seq_cst fence, as for a schedule) */
    if (sleep_flag_after_publish(&p->header[p->w_sleeping]) && producer_bell(p) < 0)
        return NULL;
    return producer_new_handle(p, p->op_type, h, due);

slow:
    return producer_hook(p, HOOK_WATCH_SLOW, args, nargs, kwnames);
}

/* ---- check_and_complete --------------------------------------------------------------- */
PyObject *producer_check_and_complete(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *amount = nargs == 2 ? args[1] : NULL;
    KeyEnc k;
    if (nargs < 1 || nargs + nkw > 2 || !fast_ok(p)) goto slow;
    if (nkw) {
        if (PyTuple_GET_ITEM(kwnames, 0) != s_amount) goto slow;
        amount = args[1];
    }
    i64 a = amount ? amount_of(amount) : 1;
    if (!a) goto slow;
    if (key_encode(args[0], &k) < 0) {
        PyErr_Clear();
        goto slow;
    }
    int got = seglock_take(p);
    if (got < 0) return NULL;
    if (!got) goto slow;
    i64 done = watch_signal(ops_seg(p), key_hash(&k), a);
    seglock_drop(p);
    if (done) {
        relaxed_store(&p->counters[C_OPS_COMPLETED],
                      relaxed_load(&p->counters[C_OPS_COMPLETED]) + done);
        /* they are due now: wake the reaper if it sleeps past its hot step (reaper.py) */
        if (relaxed_load(&p->header[p->w_reaper_wake_at]) > producer_now_ns() / 1000000 + 1 &&
                producer_hook0(p, HOOK_WAKE_REAPER) < 0)
            return NULL;
    }
    return PyLong_FromLongLong(done);

slow:
    return producer_hook(p, HOOK_CAC_SLOW, args, nargs, kwnames);
}

/* _bind_ops(tables, lock_fd, thread_lock, w_dirty, w_reaper_wake_at, op_type) */
PyObject *producer_bind_ops(Producer *p, PyObject *const *args, Py_ssize_t nargs) {
    long long fd, w_dirty, w_wake;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "_bind_ops takes 6 arguments");
    if (!PyObject_TypeCheck(args[0], &TablesType) || !((Tables *)args[0])->seg.watch)
        return PyErr_Format(PyExc_TypeError, "_bind_ops: tables with the purgatory set");
    if (!PyType_Check(args[5]) || !PyType_IsSubtype((PyTypeObject *)args[5], &HandleType))
        return PyErr_Format(PyExc_TypeError, "_bind_ops: the operation type must derive "
                            "from Handle");
    if ((fd = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((w_dirty = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred()) return NULL;
    if ((w_wake = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) return NULL;
    if (!p->holds.n || w_dirty < 0 || w_dirty >= p->nheader || w_wake < 0 || w_wake >= p->nheader)
        return PyErr_Format(PyExc_ValueError, "_bind_ops: _bind first; header words in range");
    Py_INCREF(args[0]);
    Py_XSETREF(p->tables, args[0]);
    Py_INCREF(args[2]);
    Py_XSETREF(p->thread_lock, args[2]);
    Py_INCREF(args[5]);
    Py_XSETREF(p->op_type, (PyTypeObject *)args[5]);
    p->lock_fd = (int)fd;
    p->w_dirty = w_dirty;
    p->w_reaper_wake_at = w_wake;
    Py_RETURN_NONE;
}

int producer_ops_init(void) {
    struct { PyObject **s; const char *v; } names[] = {
        {&s_on_complete, "on_complete"}, {&s_on_expire, "on_expire"},
        {&s_payload, "payload"}, {&s_required, "required"}, {&s_amount, "amount"},
        {&s_acquire, "acquire"}, {&s_release, "release"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].s = PyUnicode_InternFromString(names[i].v))) return -1;
    return 0;
}
