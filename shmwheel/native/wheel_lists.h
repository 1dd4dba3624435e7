/* wheel_lists.h: the pieces of the wheel's array that wheel.c (the clock) and
 * wheel_entries.c (the free stack, single entries) share: arithmetic, node fields, the
 * bitmaps and bucket expirations, the bucket lists, and placement by deadline. Private to
 * those two files; the theory of operation is at the top of wheel.c. */
#ifndef SHMWHEEL_WHEEL_LISTS_H
#define SHMWHEEL_WHEEL_LISTS_H

#include "atomics.h"
#include "wheel.h"

/* ---- arithmetic (b > 0 always: ticks and slot counts from the header) ---------------- */

static inline i64 fdiv(i64 a, i64 b) {
    i64 q = a / b;
    return q - (a % b < 0);
}

static inline i64 fmodp(i64 a, i64 b) {
    i64 m = a % b;
    return m < 0 ? m + b : m;
}

/* x rounded up to a multiple of t; needs x <= INT64_MAX - t + 1 (callers check x against
 * wheel_limit first). x + (t - m), not x - m + t: no overflow near INT64_MIN either. */
static inline i64 ceil_to(i64 x, i64 t) {
    i64 m = fmodp(x, t);
    return m ? x + (t - m) : x;
}

/* ---- node fields: nd = mem + mem[H_OFF_NODES], loaded once per call ------------------ */

#define NODES(mem) ((mem) + (mem)[H_OFF_NODES])
#define NX(nd, n) ((nd)[(n) * NODE_WORDS + F_NEXT])
#define PV(nd, n) ((nd)[(n) * NODE_WORDS + F_PREV])
#define DL(nd, n) ((nd)[(n) * NODE_WORDS + F_DEADLINE])

/* ---- bitmaps and bucket expirations --------------------------------------------------- */

static inline u64 *level_bits(i64 *mem, i64 level) {
    /* i64 and u64 may alias each other (signed/unsigned variants of one type) */
    return (u64 *)(mem + mem[H_OFF_BITS] + level * mem[H_WORDS]);
}

/* First set bit in [lo, hi) of a bitmap, or -1. 0 <= lo, hi <= bits in the map. */
static i64 scan(const u64 *bm, i64 lo, i64 hi) {
    if (lo >= hi) return -1;
    i64 w = lo >> 6;
    i64 wend = (hi - 1) >> 6;
    u64 x = bm[w] & (~0ULL << (lo & 63));
    for (;;) {
        if (w == wend) {
            int r = (int)(hi & 63);
            if (r != 0) x &= (1ULL << r) - 1;
            return x ? w * 64 + __builtin_ctzll(x) : -1;
        }
        if (x) return w * 64 + __builtin_ctzll(x);
        x = bm[++w];
    }
}

/* First occupied bucket index of `level` circularly from `start`, or -1. */
static inline i64 first_occupied(i64 *mem, i64 level, i64 start) {
    const u64 *bm = level_bits(mem, level);
    i64 i = scan(bm, start, mem[H_BUCKETS]);
    if (i < 0) i = scan(bm, 0, start);
    return i;
}

/* Kafka's setExpiration: set bucket (level, idx)'s expiration; mark it occupied if that
 * changed. */
static inline void announce(i64 *mem, i64 level, i64 idx, i64 expiration) {
    i64 *e = &mem[mem[H_OFF_BEXP] + level * mem[H_BUCKETS] + idx];
    if (*e != expiration) {
        *e = expiration;
        level_bits(mem, level)[idx >> 6] |= 1ULL << (idx & 63);
    }
}

/* An emptied bucket: expiration unset, occupied bit cleared (keeps bit <=> non-empty). */
static inline void retire_bucket(i64 *mem, i64 b) {
    i64 nbuckets = mem[H_BUCKETS];
    i64 level = b / nbuckets, idx = b - level * nbuckets;
    mem[mem[H_OFF_BEXP] + b] = NO_TIME;
    level_bits(mem, level)[idx >> 6] &= ~(1ULL << (idx & 63));
}

/* ---- lists ------------------------------------------------------------------------------ */

/* Append node at the tail of bucket b's circular list (FIFO within a bucket). */
static inline void link_tail(i64 *nd, i64 b, i64 node) {
    i64 tail = PV(nd, b);
    PV(nd, node) = tail;
    NX(nd, node) = b;
    NX(nd, tail) = node;
    PV(nd, b) = node;
}

static inline void unlink_node(i64 *mem, i64 *nd, i64 node) {
    i64 p = PV(nd, node), n = NX(nd, node);
    NX(nd, p) = n;
    PV(nd, n) = p;
    PV(nd, node) = -1; /* "linked iff prev != -1" */
    NX(nd, node) = -1;
    if (p == n && p < mem[H_SENTINELS]) retire_bucket(mem, p); /* only the sentinel left */
}

static inline i64 link_due(i64 *mem, i64 *nd, i64 node) {
    i64 now = mem[H_NOW], idx = fmodp(fdiv(now, mem[H_TICK]), mem[H_BUCKETS]);
    link_tail(nd, idx, node);
    announce(mem, 0, idx, now);
    return 0;   /* its level: never a bucket behind the clock (earliest() finds it late) */
}

/* Kafka's add for a rounded expiration r > now: link into the lowest level that spans it.
 * Returns the level, or INS_OUT_OF_RANGE beyond the top level's interval. */
static inline i64 place(i64 *mem, i64 *nd, i64 node, i64 r) {
    i64 now = mem[H_NOW], wheel = mem[H_WHEEL], nbuckets = mem[H_BUCKETS];
    i64 levels = mem[H_LEVELS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    for (i64 k = 0; k < levels; k++) {
        i64 tk = ticks[k];
        if (r < fdiv(now, tk) * tk + tk * wheel) {
            i64 v = fdiv(r, tk);
            i64 idx = fmodp(v, nbuckets);
            link_tail(nd, k * nbuckets + idx, node);
            announce(mem, k, idx, v * tk);
            return k;
        }
    }
    return INS_OUT_OF_RANGE;
}

/* the top level's interval: the clock's distance from either end of int64 */
static inline i64 top_span(const i64 *mem) {
    return mem[mem[H_OFF_TICKS] + mem[H_LEVELS] - 1] * mem[H_WHEEL];
}

static inline i64 limit_of(const i64 *mem) {
    i64 ttop = mem[mem[H_OFF_TICKS] + mem[H_LEVELS] - 1];
    return fdiv(mem[H_NOW], ttop) * ttop + ttop * mem[H_WHEEL];
}

#endif
