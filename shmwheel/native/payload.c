/* payload.c: whether a payload that msgpack encoded can be decoded where it is delivered.
 *
 * The executor decodes a payload with msgpack.unpackb's defaults (executor.c calls
 * segment/payload.py's `unpack`), and so do the journal's reader and recovery: those
 * defaults include strict_map_key, which refuses a map key that is not a str or bytes. The
 * Packer writes such keys without complaint ({1: "a"}, {(1, 2): "a"}, {None: 0}), so a
 * payload holding one was accepted at schedule() and failed later, in the executor. This
 * walker finds such a key in the encoded bytes; every path that accepts a payload refuses
 * it at the call instead: schedule()'s native path (producer.c) and watch()'s (watch.c)
 * send it to the Python path, whose encoders (segment/payload.py, service/caller/purgatory.py)
 * raise TypeError with the reason this returns.
 *
 * The input is a Packer's output, so it is well formed, but the walk still checks every
 * length against the end of the buffer. Nesting is bounded by the Packer (511 levels); the
 * walker gives up past MAX_DEPTH all the same, so its recursion is bounded by itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "producer.h"
#include "pymethods.h"

#define MAX_DEPTH 1024

typedef const unsigned char *Cur;

/* a big-endian unsigned integer of `width` bytes at p (the caller checked the bounds) */
static u64 be(Cur p, int width) {
    u64 v = 0;
    for (int i = 0; i < width; i++) v = v << 8 | p[i];
    return v;
}

/* What a map key's type byte decodes to, for the message (segment/payload.py puts it
 * after "it holds"); NULL for str and bin (bytes), the only kinds strict_map_key lets
 * through. */
static const char *key_kind(unsigned char b) {
    if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb) || (b >= 0xc4 && b <= 0xc6))
        return NULL;
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return "a dict key that is an int";
    if (b == 0xc0) return "a dict key that is None";
    if (b == 0xc2 || b == 0xc3) return "a dict key that is a bool";
    if (b == 0xca || b == 0xcb) return "a dict key that is a float";
    if ((b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd) return "a dict key that is a list or tuple";
    if ((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf) return "a dict key that is a dict";
    return "a dict key that is an ExtType or Timestamp";
}

/* Skip `n` bytes after a header of `hdr` bytes at p; NULL if they run past end. */
static Cur take(Cur p, Cur end, u64 hdr, u64 n) {
    if ((u64)(end - p) < hdr || (u64)(end - p) - hdr < n) return NULL;
    return p + hdr + n;
}

/* One object at p: returns where the next begins, or NULL with *why set (a key that would
 * not decode, or bytes that are not msgpack). A NULL from take() leaves *why as the
 * caller set it, "truncated msgpack". */
static Cur walk(Cur p, Cur end, int depth, const char **why) {
    if (p >= end || depth > MAX_DEPTH) {
        *why = p >= end ? "truncated msgpack" : "nesting deeper than 1024 levels";
        return NULL;
    }
    unsigned char b = *p;
    u64 items = 0, pairs = 0;   /* the containers' counts */
    int hdr = 1;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return p + 1;
    if (b >= 0xa0 && b <= 0xbf) return take(p, end, 1, b & 0x1f);   /* fixstr */
    if (b >= 0x90 && b <= 0x9f) items = b & 0x0f;                    /* fixarray */
    else if (b >= 0x80 && b <= 0x8f) pairs = b & 0x0f;               /* fixmap */
    else switch (b) {
        case 0xc4: case 0xc5: case 0xc6: case 0xd9: case 0xda: case 0xdb: {   /* bin, str */
            int w = (b == 0xc4 || b == 0xd9) ? 1 : (b == 0xc5 || b == 0xda) ? 2 : 4;
            if (!take(p, end, 1, (u64)w)) goto truncated;
            return take(p, end, 1 + (u64)w, be(p + 1, w));
        }
        case 0xc7: case 0xc8: case 0xc9: {   /* ext 8/16/32: length, then the type byte */
            int w = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
            if (!take(p, end, 1, (u64)w)) goto truncated;
            return take(p, end, 2 + (u64)w, be(p + 1, w));
        }
        case 0xca: return take(p, end, 1, 4);                      /* float 32 */
        case 0xcb: return take(p, end, 1, 8);                      /* float 64 */
        case 0xcc: case 0xd0: return take(p, end, 1, 1);           /* (u)int 8 */
        case 0xcd: case 0xd1: return take(p, end, 1, 2);           /* (u)int 16 */
        case 0xce: case 0xd2: return take(p, end, 1, 4);           /* (u)int 32 */
        case 0xcf: case 0xd3: return take(p, end, 1, 8);           /* (u)int 64 */
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:     /* fixext 1..16 */
            return take(p, end, 2, (u64)1 << (b - 0xd4));
        case 0xdc: case 0xdd: case 0xde: case 0xdf: {              /* array, map 16/32 */
            hdr = (b == 0xdc || b == 0xde) ? 3 : 5;
            if (!take(p, end, 1, (u64)hdr - 1)) goto truncated;
            u64 n = be(p + 1, hdr - 1);
            if (b <= 0xdd) items = n;
            else pairs = n;
            break;
        }
        default:   /* 0xc1, never used */
            *why = "a byte that is not msgpack (0xc1)";
            return NULL;
    }
    p += hdr;   /* (its bytes were checked above) */
    /* each item takes at least a byte, so a count beyond the bytes left ends as truncated */
    for (u64 i = 0; i < items && p; i++) p = walk(p, end, depth + 1, why);
    for (u64 i = 0; i < pairs && p; i++) {
        const char *kind = p < end ? key_kind(*p) : NULL;
        if (kind) {
            *why = kind;
            return NULL;
        }
        if ((p = walk(p, end, depth + 1, why))) p = walk(p, end, depth + 1, why);
    }
    return p;
truncated:
    *why = "truncated msgpack";
    return NULL;
}

const char *payload_problem(const char *blob, Py_ssize_t n) {
    const char *why = "truncated msgpack";
    Cur end = (Cur)blob + n, p = walk((Cur)blob, end, 0, &why);
    if (!p) return why;
    return p == end ? NULL : "more than one msgpack object";
}

static PyObject *py_payload_problem(PyObject *module, PyObject *blob) {
    if (!PyBytes_Check(blob))
        return PyErr_Format(PyExc_TypeError, "payload_problem takes bytes, got %s",
                            Py_TYPE(blob)->tp_name);
    const char *why = payload_problem(PyBytes_AS_STRING(blob), PyBytes_GET_SIZE(blob));
    if (!why) Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

PyMethodDef shmwheel_payload_methods[] = {
    METHOD_O("payload_problem", py_payload_problem,
        "payload_problem(blob) -> str | None\n\nWhy a msgpack blob would not decode where it "
        "is delivered (msgpack.unpackb's defaults: strict_map_key), e.g. 'a dict key that is "
        "an int'; None if it would."),
    METHODS_END,
};
