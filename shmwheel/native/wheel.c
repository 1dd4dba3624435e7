/* wheel.c: the hierarchical timing wheel over one flat int64 array (interface: wheel.h;
 * every word index, state and code: contract.h).
 *
 * Theory of operation
 * ===================
 *
 * The wheel is Kafka's (kafka.utils.timer.TimingWheel): level k has wheel_size (W)
 * buckets of width tick_k = tick * W^k; level k spans interval_k = tick_k * W and its tick
 * is the interval of the level below. Every level's current time is the wheel's current
 * time `now` rounded down to that level's tick. An entry with rounded expiration r goes to
 * the lowest level k with r < now_k + interval_k (Kafka's `add`), into the bucket of
 * virtual id v = floor(r / tick_k); the bucket's expiration is v * tick_k and the bucket
 * is *announced* (its occupied bit set) only when that value changes (Kafka's
 * TimerTaskList.setExpiration / DelayQueue.offer rule).
 *
 * Storage
 * -------
 * All state lives in one int64 array `mem` (shmwheel/wheel/core.py, wheel_layout()): the
 * header (H_* in contract.h), per-level tick sizes, per-bucket expiration, per-level
 * occupied bitmaps, and the node table. A node is one 32-byte record (F_NEXT, F_PREV,
 * F_DEADLINE, F_GS = generation << 32 | state), so touching an entry costs one cache line.
 * A bucket is an intrusive circular doubly linked list whose sentinel is one of the first
 * B = levels * slots nodes; entry slot s is node B + s. A node is linked in a bucket iff
 * its F_PREV != -1: unlinking sets F_PREV and F_NEXT to -1. Free slots form a stack
 * threaded through F_NEXT (their F_PREV stays -1). A handle is generation << 32 | slot:
 * the generation is bumped whenever a slot is freed, so a stale handle never touches a
 * reused slot. No Python object exists per entry, so the same bytes can live in process
 * memory or in a shared-memory segment.
 *
 * States
 * ------
 * The wheel sees FREE (on the free stack), PENDING (linked, waiting), FIRING (won by
 * advance: unlinked, handed to the caller) and CANCELLED. In process, wheel_cancel unlinks
 * and frees a PENDING entry at once, so nothing linked is ever CANCELLED. In the service a
 * client cancels without the segment lock by a CAS of the state word PENDING -> CANCELLED
 * and leaves the node linked; the wheel, which always runs under the lock, meets such
 * nodes while walking a bucket and hands them to `retire` (which frees the slot and its
 * payload). The service's purgatory adds COMPLETED: an operation a completion won (a CAS
 * PENDING -> COMPLETED under the lock) and relinked into the current bucket; `retire`
 * makes it FIRING and advance hands it out like a fired one. A client's reset (slots.c)
 * rewrites a linked node's deadline without the lock, holding it RESETTING meanwhile:
 * advance re-reads the deadline of every node it takes, places one now due later where it
 * belongs, and one still RESETTING in the next tick's bucket. The state word and the
 * deadline are the words of a node written without the lock, so they are only accessed
 * through atomics.h; advance takes a PENDING node with a CAS to FIRING from the word it
 * decided on, so a racing cancel, reset and fire have exactly one winner. H_PENDING
 * counts linked nodes, PENDING, CANCELLED, COMPLETED or RESETTING.
 *
 * Next-expiry discovery
 * ---------------------
 * Kafka keeps a DelayQueue of buckets. Here each level has an occupied bitmap (as in
 * Tokio's wheel): the earliest bucket of a level is the first set bit scanning circularly
 * from the level's current bucket, found a 64-bucket word at a time with a
 * count-trailing-zeros (__builtin_ctzll). Empty buckets are never visited and never
 * ticked; finding the next expiry costs O(levels * slots / 64) word reads, independent of
 * how many entries are pending.
 *
 * Never early
 * -----------
 * Deadlines are kept exact; placement uses r = ceil(deadline / tick) * tick. An entry is
 * due only when r <= now and `now` only ever moves to times that have passed, so nothing
 * fires before its deadline; structural lateness is below one tick. (Kafka truncates to
 * the tick and fires up to a tick early.) The one exception is wheel_link of a node whose
 * deadline has already passed (a service re-arm or relink): it joins the current level-0
 * bucket, announced at now, and fires at the next advance.
 *
 * Cascade without a stall
 * -----------------------
 * Kafka flushes a higher-level bucket when its expiration arrives and re-inserts every
 * entry under the timer's write lock, so a big bucket stalls the reaper. Here every level
 * has slots = 2 W buckets, while Kafka's placement rule still uses the W-bucket interval.
 * Level k can therefore hold virtual ids [c_k, c_k + 2W) without aliasing, which is room
 * for the *next* bucket of level k + 1 (virtual id c_{k+1} + 1) a whole tick_{k+1} before
 * it expires. wheel_cascade_step moves entries of those eligible buckets one level down
 * in bounded batches while the clock is otherwise idle (retiring CANCELLED ones instead);
 * wheel_advance forces what is left of a bucket only if its expiration arrives first
 * (overload). Each entry is moved at most levels - 1 times: O(1) expiry work per entry.
 *
 * Invariants (checked by WheelCore.verify in the tests)
 * -----------------------------------------------------
 *  - a bucket of level k >= 1 with virtual id c_k is empty;
 *  - every linked entry sits in the bucket its rounded deadline maps to (an entry linked
 *    already due sits in the level-0 bucket of now; a reset's not yet relinked, in that
 *    of an earlier deadline);
 *  - a bucket's bit is set iff its list is non-empty iff its expiration is set;
 *  - a linked entry is PENDING, CANCELLED, COMPLETED or RESETTING; H_PENDING counts them;
 *  - F_PREV == -1 iff the entry is not linked; the free stack holds exactly the FREE ones.
 *
 * Arithmetic
 * ----------
 * Times may be negative, so divisions are floor divisions (fdiv/fmodp; every divisor is a
 * positive header value). Bitmap words are handled as uint64_t, so no shift touches a
 * sign bit. int64 overflow: the geometry keeps the top interval span = tick * W^levels
 * <= 2^61 (WheelGeometry.spanning; the bindings check it), and every time computed here
 * lies within one span of the clock, so the clock is kept in [INT64_MIN + span,
 * INT64_MAX - span]: WheelCore.format refuses a start outside it and wheel_advance never
 * moves the clock past its top (a `now` beyond is clamped; over 146 million years of
 * milliseconds away). Deadlines are compared with wheel_limit() before they are rounded
 * up, so a deadline near INT64_MAX is refused as out of range instead of overflowing, and
 * wheel_advance ignores a `now` behind the clock before rounding it. Whatever the values,
 * a bucket index is reduced modulo the slots, so no arithmetic result can index outside
 * the tables.
 */
/* Hidden: calls from slots.c and the bindings are direct calls, not through the PLT. */
#pragma GCC visibility push(hidden)

#include "wheel.h"

#include "atomics.h"

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
    i64 i = scan(bm, start, mem[H_SLOTS]);
    if (i < 0) i = scan(bm, 0, start);
    return i;
}

/* Kafka's setExpiration: set bucket (level, idx)'s expiration; mark it occupied if that
 * changed. */
static inline void announce(i64 *mem, i64 level, i64 idx, i64 expiration) {
    i64 *e = &mem[mem[H_OFF_BEXP] + level * mem[H_SLOTS] + idx];
    if (*e != expiration) {
        *e = expiration;
        level_bits(mem, level)[idx >> 6] |= 1ULL << (idx & 63);
    }
}

/* An emptied bucket: expiration unset, occupied bit cleared (keeps bit <=> non-empty). */
static inline void retire_bucket(i64 *mem, i64 b) {
    i64 slots = mem[H_SLOTS];
    i64 level = b / slots, idx = b - level * slots;
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

void wheel_unlink(i64 *mem, i64 node) { unlink_node(mem, NODES(mem), node); }

static inline i64 link_due(i64 *mem, i64 *nd, i64 node) {
    i64 now = mem[H_NOW], idx = fmodp(fdiv(now, mem[H_TICK]), mem[H_SLOTS]);
    link_tail(nd, idx, node);
    announce(mem, 0, idx, now);
    return 0;   /* its level: never a bucket behind the clock (earliest() finds it late) */
}

/* Kafka's add for a rounded expiration r > now: link into the lowest level that spans it.
 * Returns the level, or INS_OUT_OF_RANGE beyond the top level's interval. */
static inline i64 place(i64 *mem, i64 *nd, i64 node, i64 r) {
    i64 now = mem[H_NOW], wheel = mem[H_WHEEL], slots = mem[H_SLOTS];
    i64 levels = mem[H_LEVELS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    for (i64 k = 0; k < levels; k++) {
        i64 tk = ticks[k];
        if (r < fdiv(now, tk) * tk + tk * wheel) {
            i64 v = fdiv(r, tk);
            i64 idx = fmodp(v, slots);
            link_tail(nd, k * slots + idx, node);
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

i64 wheel_limit(const i64 *mem) { return limit_of(mem); }

i64 wheel_link(i64 *mem, i64 node, i64 deadline) {
    if (deadline > limit_of(mem) - mem[H_TICK]) return INS_OUT_OF_RANGE;
    dl_store(&DL(NODES(mem), node), deadline); /* the cascade re-reads it */
    return wheel_relink(mem, node);
}

i64 wheel_relink(i64 *mem, i64 node) {
    i64 tick = mem[H_TICK], *nd = NODES(mem), deadline = dl_load(&DL(nd, node));
    /* ceil(deadline) >= limit iff deadline > limit - tick (limit is a multiple of tick);
     * checked before rounding, so rounding cannot overflow */
    if (deadline > limit_of(mem) - tick) return INS_OUT_OF_RANGE;
    i64 r = ceil_to(deadline, tick);   /* already due: fired by the next advance */
    return r <= mem[H_NOW] ? link_due(mem, nd, node) : place(mem, nd, node, r);
}

/* ---- the free stack ------------------------------------------------------------------- */

static inline i64 pop_free(i64 *mem) {
    i64 slot = mem[H_FREE];
    if (slot < 0) return -1;
    i64 *nd = NODES(mem), node = wheel_node(mem, slot);
    mem[H_FREE] = NX(nd, node);
    NX(nd, node) = -1; /* in neither a bucket nor the stack */
    return slot;
}

i64 wheel_pop_free(i64 *mem) { return pop_free(mem); }

static inline void free_slot(i64 *mem, i64 slot) {
    i64 *nd = NODES(mem), node = wheel_node(mem, slot), *gs = gs_word(mem, node);
    /* generation + 1 (wrapping within GS_GEN_MASK): every old handle is now stale */
    i64 gen = GS_GEN(gs_load(gs)) + 1;
    PV(nd, node) = -1;
    NX(nd, node) = mem[H_FREE];
    gs_store(gs, GS_MAKE(gen, ST_FREE));
    mem[H_FREE] = slot;
}

void wheel_free_slot(i64 *mem, i64 slot) { free_slot(mem, slot); }

void wheel_add_free_slots(i64 *mem, i64 first) {
    i64 *nd = NODES(mem), nb = mem[H_SENTINELS];
    for (i64 s = mem[H_CAPACITY] - 1; s >= first; s--) {
        i64 node = nb + s;
        NX(nd, node) = mem[H_FREE];
        PV(nd, node) = -1;
        DL(nd, node) = 0;
        gs_store(gs_word(mem, node), GS_MAKE(0, ST_FREE));
        mem[H_FREE] = s;
    }
}

void wheel_reset(i64 *mem) {
    i64 *nd = NODES(mem);
    i64 nb = mem[H_SENTINELS];
    i64 *bexp = mem + mem[H_OFF_BEXP];
    for (i64 b = 0; b < nb; b++) {
        NX(nd, b) = b;
        PV(nd, b) = b;
        bexp[b] = NO_TIME;
    }
    i64 *bits = mem + mem[H_OFF_BITS];
    for (i64 w = 0; w < mem[H_LEVELS] * mem[H_WORDS]; w++) bits[w] = 0;
    mem[H_FREE] = -1;
    mem[H_PENDING] = 0;
    wheel_add_free_slots(mem, 0);
}

/* ---- single entries --------------------------------------------------------------------- */

i64 wheel_insert(i64 *mem, i64 deadline) {
    i64 tick = mem[H_TICK];
    /* out of range is checked first, before rounding (no overflow); no deadline is both
     * out of range and already due, since limit - tick > now */
    if (deadline > limit_of(mem) - tick) return INS_OUT_OF_RANGE;
    i64 r = ceil_to(deadline, tick);
    if (r <= mem[H_NOW]) return INS_ALREADY_DUE;
    i64 slot = pop_free(mem);
    if (slot < 0) return INS_NO_SLOT;
    i64 *nd = NODES(mem);
    i64 node = wheel_node(mem, slot);
    i64 *gs = gs_word(mem, node);
    i64 gen = GS_GEN(gs_load(gs)); /* kept: the free that put it on the stack bumped it */
    DL(nd, node) = deadline;
    gs_store(gs, GS_MAKE(gen, ST_PENDING)); /* after the deadline: release publishes it */
    place(mem, nd, node, r);
    mem[H_PENDING]++;
    return HANDLE_MAKE(gen, slot);
}

int wheel_cancel(i64 *mem, i64 handle) {
    if (handle < 0) return 0;
    i64 slot = HANDLE_SLOT(handle);
    if (slot >= mem[H_CAPACITY]) return 0;
    i64 node = wheel_node(mem, slot);
    i64 gs = gs_load(gs_word(mem, node));
    if (GS_GEN(gs) != HANDLE_GEN(handle) || GS_STATE(gs) != ST_PENDING) return 0;
    unlink_node(mem, NODES(mem), node);
    mem[H_PENDING]--;
    free_slot(mem, slot);
    return 1;
}

i64 wheel_release(i64 *mem, const i64 *slots, i64 n) {
    i64 cap = mem[H_CAPACITY], nb = mem[H_SENTINELS], freed = 0;
    for (i64 i = 0; i < n; i++) {
        i64 s = slots[i];
        if (s < 0 || s >= cap) continue;
        if (GS_STATE(gs_load(gs_word(mem, nb + s))) != ST_FIRING) continue; /* not twice */
        free_slot(mem, s);
        freed++;
    }
    return freed;
}

/* ---- the clock ---------------------------------------------------------------------------- */

/* The earliest occupied bucket over all levels: its time, and its level and index through
 * *bk, *bi (level -1 and NEVER when empty). Ties go to the higher level, since a cascade
 * must precede a fire at the same time. With `eligibility`, a higher level's time is the
 * moment its bucket becomes eligible for pre-cascading: one tick of that level before it
 * expires. */
static i64 earliest(i64 *mem, int eligibility, i64 *bk, i64 *bi) {
    i64 best_t = NEVER, best_k = -1, best_i = -1;
    i64 now = mem[H_NOW], slots = mem[H_SLOTS], levels = mem[H_LEVELS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    const i64 *bexp = mem + mem[H_OFF_BEXP];
    for (i64 k = 0; k < levels; k++) {
        i64 tk = ticks[k];
        i64 c = fdiv(now, tk);
        /* level k holds nothing before (c_k + 1) * tick_k, and higher levels later */
        if (!eligibility && k > 0 && (c + 1) * tk > best_t) break;
        i64 i = first_occupied(mem, k, fmodp(c, slots));
        if (i >= 0) {
            i64 t = bexp[k * slots + i];
            if (eligibility && k > 0) t -= tk;
            if (t <= best_t) {
                best_t = t;
                best_k = k;
                best_i = i;
            }
        }
    }
    *bk = best_k;
    *bi = best_i;
    return best_t;
}

i64 wheel_next_wakeup(i64 *mem) {
    i64 k, i;
    return earliest(mem, 1, &k, &i);
}

static inline int retire_node(i64 *mem, i64 slot, wheel_retire_fn retire, void *ctx) {
    if (retire) return retire(ctx, mem, slot);
    free_slot(mem, slot);
    return 0;
}

/* Move up to `budget` entries of level-k bucket b into level k - 1, retiring CANCELLED
 * ones instead of moving them. Returns the count handled (moved or retired). */
static i64 cascade_bucket(i64 *mem, i64 k, i64 b, i64 budget, wheel_retire_fn retire,
                          void *ctx) {
    i64 *nd = NODES(mem), slots = mem[H_SLOTS], tick = mem[H_TICK], nb = mem[H_SENTINELS];
    i64 tl = mem[mem[H_OFF_TICKS] + k - 1], done = 0;
    while (done < budget) {
        i64 node = NX(nd, b), r;
        if (node == b) break;
        unlink_node(mem, nd, node);
        /* CANCELLED stays CANCELLED (only a lock holder moves it on), so one load decides;
         * a PENDING node a cancel wins after this load is retired by a later walk */
        if (GS_STATE(gs_load(gs_word(mem, node))) == ST_CANCELLED) {
            mem[H_PENDING]--;
            retire_node(mem, node - nb, retire, ctx);
        } else if ((r = ceil_to(dl_load(&DL(nd, node)), tick)) <= mem[H_NOW]) {
            link_due(mem, nd, node);   /* a reset made it due (tests/tsan: reset scenario) */
        } else {
            i64 v = fdiv(r, tl), idx = fmodp(v, slots);
            link_tail(nd, (k - 1) * slots + idx, node);
            announce(mem, k - 1, idx, v * tl);
        }
        done++;
    }
    return done;
}

i64 wheel_cascade_step(i64 *mem, i64 budget, wheel_retire_fn retire, void *ctx) {
    i64 done = 0;
    i64 now = mem[H_NOW], slots = mem[H_SLOTS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    for (i64 k = mem[H_LEVELS] - 1; k > 0 && done < budget; k--) {
        i64 tk = ticks[k];
        i64 b = k * slots + fmodp(fdiv(now, tk) + 1, slots); /* virtual id c_k + 1 */
        done += cascade_bucket(mem, k, b, budget - done, retire, ctx);
    }
    return done;
}

i64 wheel_advance(i64 *mem, i64 now, i64 *out, i64 cap, int release,
                  wheel_retire_fn retire, void *ctx) {
    i64 top = NEVER - top_span(mem);
    if (now > top) now = top; /* the clock's range (see Arithmetic above) */
    /* every bucket expires at or after the clock, so a `now` behind it finds nothing (and
     * is not rounded: no overflow near INT64_MIN) */
    if (now < mem[H_NOW]) return 0;
    i64 tick = mem[H_TICK];
    i64 target = now - fmodp(now, tick); /* >= H_NOW, a multiple of tick */
    i64 slots = mem[H_SLOTS], nb = mem[H_SENTINELS], lim = limit_of(mem) - tick;
    i64 *nd = NODES(mem), count = 0;
    for (;;) {
        i64 k, i;
        i64 t = earliest(mem, 0, &k, &i);
        if (k < 0 || t > target) break;
        i64 b = k * slots + i;
        if (k > 0) { /* overload: a bucket expired before cascade_step emptied it */
            i64 floor_t = t - mem[mem[H_OFF_TICKS] + k];
            if (mem[H_NOW] < floor_t) relaxed_store(&mem[H_NOW], floor_t);
            cascade_bucket(mem, k, b, NEVER, retire, ctx);
            continue;
        }
        if (mem[H_NOW] < t) relaxed_store(&mem[H_NOW], t);
        for (;;) {
            i64 node = NX(nd, b);
            if (node == b) break;
            if (count == cap) return count; /* the clock stays at this bucket's time */
            unlink_node(mem, nd, node);
            i64 slot = node - nb, *gs = gs_word(mem, node), g, d, later = 0;
            do {   /* decide, until the state word confirms the decision */
                g = gs_load(gs);
                if (GS_STATE(g) == ST_RESETTING) later = target + tick; /* ask next tick */
                else if (GS_STATE(g) != ST_PENDING) break;
                else if ((d = dl_load(&DL(nd, node))) > target && d <= lim) /* reset later */
                    later = ceil_to(d, tick);
            } while (!later && !gs_cas(gs, g, GS_MAKE(GS_GEN(g), ST_FIRING)));
            /* one winner: that CAS against a lock-free cancel's (or reset's) CAS of g */
            if (later) {
                if (place(mem, nd, node, later) < 0) place(mem, nd, node, target + tick);
                continue;
            }
            mem[H_PENDING]--;
            if (GS_STATE(g) == ST_PENDING) {   /* won */
                if (release) free_slot(mem, slot);
                out[count++] = slot;
            } else if (retire_node(mem, slot, retire, ctx)) {
                /* COMPLETED: the service's hook made it FIRING (its on_complete runs) */
                out[count++] = slot;
            } /* else CANCELLED (before the load, or won the CAS race): freed */
        }
    }
    if (mem[H_NOW] < target) relaxed_store(&mem[H_NOW], target);
    return count;
}

#pragma GCC visibility pop
