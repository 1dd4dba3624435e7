/* journal_encode.c: the record encoder of journal.h (CRC-32, msgpack in its smallest
 * forms, one framed record per lifecycle event). No Python: the slot state machine calls
 * it under the segment lock, and tests/tsan links it without the interpreter. Its Python
 * face, JournalBuffer, and the scanner are journal.c's. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "journal.h"

/* ---- CRC-32 (IEEE 802.3, reflected 0xEDB88320: zlib.crc32), slicing by 4 ------------ */
static uint32_t crc_table[4][256];

void jcrc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 4; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

uint32_t jcrc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *b = data;
    crc = ~crc;
    while (n >= 4) {   /* four bytes per step: one table per byte position */
        crc ^= (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        crc = crc_table[3][crc & 0xFF] ^ crc_table[2][(crc >> 8) & 0xFF] ^
              crc_table[1][(crc >> 16) & 0xFF] ^ crc_table[0][crc >> 24];
        b += 4;
        n -= 4;
    }
    while (n--) crc = crc_table[0][(crc ^ *b++) & 0xFF] ^ (crc >> 8);
    return ~crc;
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

static inline void put_be(unsigned char *o, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) { o[i] = (unsigned char)v; v >>= 8; }
}

/* worst case of any header: 9 bytes; callers reserve room first */
static inline void mp_int(JBuf *j, i64 v) {
    unsigned char *o = j->p + j->len;
    if (v >= 0) {
        uint64_t u = (uint64_t)v;
        if (u < 0x80) { o[0] = (unsigned char)u; j->len += 1; }
        else if (u <= 0xFF) { o[0] = 0xcc; o[1] = (unsigned char)u; j->len += 2; }
        else if (u <= 0xFFFF) { o[0] = 0xcd; put_be(o + 1, u, 2); j->len += 3; }
        else if (u <= 0xFFFFFFFFu) { o[0] = 0xce; put_be(o + 1, u, 4); j->len += 5; }
        else { o[0] = 0xcf; put_be(o + 1, u, 8); j->len += 9; }
    } else if (v >= -32) { o[0] = (unsigned char)(0xe0 | (v + 32)); j->len += 1; }
    else if (v >= -128) { o[0] = 0xd0; o[1] = (unsigned char)v; j->len += 2; }
    else if (v >= -32768) { o[0] = 0xd1; put_be(o + 1, (uint64_t)v, 2); j->len += 3; }
    else if (v >= -2147483648LL) { o[0] = 0xd2; put_be(o + 1, (uint64_t)v, 4); j->len += 5; }
    else { o[0] = 0xd3; put_be(o + 1, (uint64_t)v, 8); j->len += 9; }
}

static inline void mp_bin(JBuf *j, const void *data, size_t n) {
    unsigned char *o = j->p + j->len;
    if (n <= 0xFF) { o[0] = 0xc4; o[1] = (unsigned char)n; j->len += 2; }
    else if (n <= 0xFFFF) { o[0] = 0xc5; put_be(o + 1, n, 2); j->len += 3; }
    else { o[0] = 0xc6; put_be(o + 1, n, 4); j->len += 5; }
    memcpy(j->p + j->len, data, n);
    j->len += n;
}

/* Open a record of `arity` elements and `extra` bytes beyond its integers; returns the
 * offset of its frame, or (size_t)-1 when out of memory. */
static size_t rec_open(JBuf *j, int arity, size_t extra) {
    if (!jb_room(j, J_FRAME_BYTES + 1 + 9 * (size_t)arity + 5 + extra)) return (size_t)-1;
    size_t at = j->len;
    j->len += J_FRAME_BYTES;
    j->p[j->len++] = (unsigned char)(0x90 | arity);   /* arity <= 15: a fixarray */
    return at;
}

static void rec_close(JBuf *j, size_t at) {
    size_t body = j->len - at - J_FRAME_BYTES;
    uint32_t crc = jcrc32(0, j->p + at + J_FRAME_BYTES, body);
    unsigned char *o = j->p + at;
    for (int i = 0; i < 4; i++) o[i] = (unsigned char)(body >> (8 * i));
    for (int i = 0; i < 4; i++) o[4 + i] = (unsigned char)(crc >> (8 * i));
}

void jrec_scheduled(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 task, i64 producer, i64 flags,
                    i64 period, i64 run, const void *blob, size_t len) {
    size_t at = rec_open(j, 10, len);
    if (at == (size_t)-1) return;
    mp_int(j, J_SCHEDULED); mp_int(j, id); mp_int(j, t_us); mp_int(j, deadline);
    mp_int(j, task); mp_int(j, producer); mp_int(j, flags); mp_int(j, period); mp_int(j, run);
    mp_bin(j, blob, len);
    rec_close(j, at);
}

void jrec_watched(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 required, i64 nkeys,
                  i64 on_complete, i64 on_expire, const void *blob, size_t len) {
    size_t at = rec_open(j, 9, len);
    if (at == (size_t)-1) return;
    mp_int(j, J_WATCHED); mp_int(j, id); mp_int(j, t_us); mp_int(j, deadline);
    mp_int(j, required); mp_int(j, nkeys); mp_int(j, on_complete); mp_int(j, on_expire);
    mp_bin(j, blob, len);
    rec_close(j, at);
}

/* the records of one id and a time: CANCELLED, COMPLETED, EXPIRED */
void jrec_event(JBuf *j, i64 kind, i64 id, i64 t_us) {
    size_t at = rec_open(j, 3, 0);
    if (at == (size_t)-1) return;
    mp_int(j, kind); mp_int(j, id); mp_int(j, t_us);
    rec_close(j, at);
}

void jrec_cancelled(JBuf *j, i64 id, i64 t_us) { jrec_event(j, J_CANCELLED, id, t_us); }

void jrec_fired(JBuf *j, i64 id, i64 t_us, i64 run, i64 deadline) {
    size_t at = rec_open(j, 5, 0);
    if (at == (size_t)-1) return;
    mp_int(j, J_FIRED); mp_int(j, id); mp_int(j, t_us); mp_int(j, run); mp_int(j, deadline);
    rec_close(j, at);
}

void jrec_outcome(JBuf *j, i64 id, i64 t_us, i64 run, i64 outcome, i64 duration_us,
                  i64 next_deadline) {
    size_t at = rec_open(j, 7, 0);
    if (at == (size_t)-1) return;
    mp_int(j, J_OUTCOME); mp_int(j, id); mp_int(j, t_us); mp_int(j, run); mp_int(j, outcome);
    mp_int(j, duration_us); mp_int(j, next_deadline);
    rec_close(j, at);
}

void jrec_raw(JBuf *j, const void *body, size_t len) {
    if (!jb_room(j, J_FRAME_BYTES + len)) return;
    size_t at = j->len;
    j->len += J_FRAME_BYTES;
    memcpy(j->p + j->len, body, len);
    j->len += len;
    rec_close(j, at);
}

