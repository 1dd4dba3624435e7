/* journal_encode.c: the record encoder of journal.h (CRC-32C, msgpack in its smallest
 * forms, one framed record per lifecycle event). No Python: the slot state machine calls
 * it under the segment lock, and tests/tsan links it without the interpreter. Its Python
 * face, JournalBuffer, and the scanner are journal.c's. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "journal.h"

/* ---- CRCs ---------------------------------------------------------------------------
 * Frames of format version 3 carry CRC-32C (Castagnoli, reflected 0x82F63B78: the SSE4.2
 * `crc32` instruction's); versions 1 and 2 carried CRC-32 (IEEE 802.3, reflected
 * 0xEDB88320: zlib.crc32), which the scanner still checks in their files. Both have a
 * portable table form (slicing by 4); CRC-32C uses the instruction when the CPU has it
 * (checked once, in jcrc_init), three to six times faster on a record's 30-40 bytes. */
static uint32_t crc_table[4][256], crc32c_table[4][256];

static void crc_tables(uint32_t t[4][256], uint32_t poly) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? poly ^ (c >> 1) : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 4; k++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
}

static uint32_t crc_sliced(uint32_t t[4][256], uint32_t crc, const void *data, size_t n) {
    const unsigned char *b = data;
    crc = ~crc;
    while (n >= 4) {   /* four bytes per step: one table per byte position */
        crc ^= (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        crc = t[3][crc & 0xFF] ^ t[2][(crc >> 8) & 0xFF] ^ t[1][(crc >> 16) & 0xFF] ^
              t[0][crc >> 24];
        b += 4;
        n -= 4;
    }
    while (n--) crc = t[0][(crc ^ *b++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t jcrc32(uint32_t crc, const void *data, size_t n) {
    return crc_sliced(crc_table, crc, data, n);
}

uint32_t jcrc32c_portable(uint32_t crc, const void *data, size_t n) {
    return crc_sliced(crc32c_table, crc, data, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define JCRC_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                           size_t n) {
    const unsigned char *b = data;
    uint64_t c = (uint32_t)~crc;
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);   /* x86 is little-endian, as the CRC's byte order wants */
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    if (n & 4) {
        uint32_t w;
        memcpy(&w, b, 4);
        c32 = _mm_crc32_u32(c32, w);
        b += 4;
    }
    if (n & 2) {
        uint16_t w;
        memcpy(&w, b, 2);
        c32 = _mm_crc32_u16(c32, w);
        b += 2;
    }
    if (n & 1) c32 = _mm_crc32_u8(c32, *b);
    return ~c32;
}
#else
#define JCRC_HW 0
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n) {
    return jcrc32c_portable(crc, data, n);
}
#endif

static int have_hw;

void jcrc_init(void) {
    crc_tables(crc_table, 0xEDB88320u);
    crc_tables(crc32c_table, 0x82F63B78u);
#if JCRC_HW
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

int jcrc32c_hardware(void) { return have_hw; }

uint32_t jcrc32c(uint32_t crc, const void *data, size_t n) {
    return have_hw ? crc32c_hw(crc, data, n) : jcrc32c_portable(crc, data, n);
}

i64 jnow_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (i64)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* ---- msgpack, smallest forms --------------------------------------------------------- */
static int jb_room(JBuf *j, size_t n) {
    if (j->failed) return 0;
    if (j->len + n <= j->cap) return 1;
    size_t cap = j->cap ? j->cap : 1 << 16;
    while (cap < j->len + n) cap *= 2;
    unsigned char *p = j->exports ? NULL : realloc(j->p, cap);
    if (!p) { j->failed = 1; return 0; }
    j->p = p;
    j->cap = cap;
    return 1;
}

/* big-endian (msgpack's) and little-endian (the frame's) integers of 2, 4 or 8 bytes: on a
 * little-endian host one store each (a record's bytes are mostly these) */
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline void put_be(unsigned char *o, uint64_t v, int bytes) {
    if (bytes == 8) { v = __builtin_bswap64(v); memcpy(o, &v, 8); }
    else if (bytes == 4) { uint32_t w = __builtin_bswap32((uint32_t)v); memcpy(o, &w, 4); }
    else { uint16_t w = __builtin_bswap16((uint16_t)v); memcpy(o, &w, 2); }
}

static inline void put_le32(unsigned char *o, uint32_t v) { memcpy(o, &v, 4); }
#else
static inline void put_be(unsigned char *o, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) { o[i] = (unsigned char)v; v >>= 8; }
}

static inline void put_le32(unsigned char *o, uint32_t v) {
    for (int i = 0; i < 4; i++) o[i] = (unsigned char)(v >> (8 * i));
}
#endif

/* The encoders write through a local pointer and return the byte after what they wrote:
 * the buffer's length is stored once per record (rec_close). Stores through a char
 * pointer may alias anything, so a length kept in the JBuf would be reloaded and stored
 * at every field. Worst case of any header: 9 bytes; callers reserve room first. */
static inline unsigned char *mp_int(unsigned char *o, i64 v) {
    if (v >= 0) {
        uint64_t u = (uint64_t)v;
        if (u < 0x80) { o[0] = (unsigned char)u; return o + 1; }
        if (u <= 0xFF) { o[0] = 0xcc; o[1] = (unsigned char)u; return o + 2; }
        if (u <= 0xFFFF) { o[0] = 0xcd; put_be(o + 1, u, 2); return o + 3; }
        if (u <= 0xFFFFFFFFu) { o[0] = 0xce; put_be(o + 1, u, 4); return o + 5; }
        o[0] = 0xcf; put_be(o + 1, u, 8); return o + 9;
    }
    if (v >= -32) { o[0] = (unsigned char)(0xe0 | (v + 32)); return o + 1; }
    if (v >= -128) { o[0] = 0xd0; o[1] = (unsigned char)v; return o + 2; }
    if (v >= -32768) { o[0] = 0xd1; put_be(o + 1, (uint64_t)v, 2); return o + 3; }
    if (v >= -2147483648LL) { o[0] = 0xd2; put_be(o + 1, (uint64_t)v, 4); return o + 5; }
    o[0] = 0xd3; put_be(o + 1, (uint64_t)v, 8); return o + 9;
}

static inline unsigned char *mp_bin(unsigned char *o, const void *data, size_t n) {
    if (n <= 0xFF) { o[0] = 0xc4; o[1] = (unsigned char)n; o += 2; }
    else if (n <= 0xFFFF) { o[0] = 0xc5; put_be(o + 1, n, 2); o += 3; }
    else { o[0] = 0xc6; put_be(o + 1, n, 4); o += 5; }
    memcpy(o, data, n);
    return o + n;
}

/* Open a record of `arity` elements and `extra` bytes beyond its integers at the end of
 * the buffer: where its second element goes (after the frame and the array's header),
 * or NULL when out of memory. */
static unsigned char *rec_open(JBuf *j, int arity, size_t extra) {
    if (!jb_room(j, J_FRAME_BYTES + 1 + 9 * (size_t)arity + 5 + extra)) return NULL;
    unsigned char *o = j->p + j->len + J_FRAME_BYTES;
    *o = (unsigned char)(0x90 | arity);   /* arity <= 15: a fixarray */
    return o + 1;
}

/* Close the record opened at the buffer's end, whose body ends at `end`: its frame. */
static void rec_close(JBuf *j, unsigned char *end) {
    unsigned char *o = j->p + j->len;
    size_t body = (size_t)(end - o) - J_FRAME_BYTES;
    uint32_t crc = jcrc32c(0, o + J_FRAME_BYTES, body);
    put_le32(o, (uint32_t)body);
    put_le32(o + 4, crc);
    j->len = (size_t)(end - j->p);
}

void jrec_scheduled(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 task, i64 producer, i64 flags,
                    i64 period, i64 run, const void *blob, size_t len) {
    unsigned char *o = rec_open(j, 10, len);
    if (!o) return;
    o = mp_int(o, J_SCHEDULED); o = mp_int(o, id); o = mp_int(o, t_us);
    o = mp_int(o, deadline); o = mp_int(o, task); o = mp_int(o, producer);
    o = mp_int(o, flags); o = mp_int(o, period); o = mp_int(o, run);
    rec_close(j, mp_bin(o, blob, len));
}

void jrec_watched(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 required, i64 nkeys,
                  i64 on_complete, i64 on_expire, const void *blob, size_t len) {
    unsigned char *o = rec_open(j, 9, len);
    if (!o) return;
    o = mp_int(o, J_WATCHED); o = mp_int(o, id); o = mp_int(o, t_us);
    o = mp_int(o, deadline); o = mp_int(o, required); o = mp_int(o, nkeys);
    o = mp_int(o, on_complete); o = mp_int(o, on_expire);
    rec_close(j, mp_bin(o, blob, len));
}

/* the records of one id and a time: CANCELLED, COMPLETED, EXPIRED */
void jrec_event(JBuf *j, i64 kind, i64 id, i64 t_us) {
    unsigned char *o = rec_open(j, 3, 0);
    if (!o) return;
    o = mp_int(o, kind); o = mp_int(o, id);
    rec_close(j, mp_int(o, t_us));
}

void jrec_cancelled(JBuf *j, i64 id, i64 t_us) { jrec_event(j, J_CANCELLED, id, t_us); }

void jrec_fired(JBuf *j, i64 id, i64 t_us, i64 run, i64 deadline) {
    unsigned char *o = rec_open(j, 5, 0);
    if (!o) return;
    o = mp_int(o, J_FIRED); o = mp_int(o, id); o = mp_int(o, t_us); o = mp_int(o, run);
    rec_close(j, mp_int(o, deadline));
}

void jrec_outcome(JBuf *j, i64 id, i64 t_us, i64 run, i64 outcome, i64 duration_us,
                  i64 next_deadline) {
    unsigned char *o = rec_open(j, 7, 0);
    if (!o) return;
    o = mp_int(o, J_OUTCOME); o = mp_int(o, id); o = mp_int(o, t_us); o = mp_int(o, run);
    o = mp_int(o, outcome); o = mp_int(o, duration_us);
    rec_close(j, mp_int(o, next_deadline));
}

void jrec_raw(JBuf *j, const void *body, size_t len) {
    if (!jb_room(j, J_FRAME_BYTES + len)) return;
    unsigned char *o = j->p + j->len + J_FRAME_BYTES;
    memcpy(o, body, len);
    rec_close(j, o + len);
}
