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
 * B = levels * nbuckets nodes (nbuckets = H_BUCKETS per level); entry slot s is node
 * B + s. A node is linked in a bucket iff its F_PREV != -1: unlinking sets F_PREV and
 * F_NEXT to -1. Free slots form a stack
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
 * belongs, and one still RESETTING in the bucket after the clock's once its walk is over
 * (never back into a bucket the same walk could meet again). The state word and the
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
 * ticked; finding the next expiry costs O(levels * nbuckets / 64) word reads, independent of
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
 * has nbuckets = 2 W buckets, while Kafka's placement rule still uses the W-bucket interval.
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
 * a bucket index is reduced modulo nbuckets, so no arithmetic result can index outside
 * the tables.
 */
/* Hidden: calls from slots.c and the bindings are direct calls, not through the PLT. */
#pragma GCC visibility push(hidden)

#include "wheel.h"

#include "atomics.h"
#include "wheel_lists.h"

/* ---- linking by deadline ---------------------------------------------------------------- */

void wheel_unlink(i64 *mem, i64 node) { unlink_node(mem, NODES(mem), node); }

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

/* ---- the clock ---------------------------------------------------------------------------- */

/* The earliest occupied bucket over all levels: its time, and its level and index through
 * *bk, *bi (level -1 and NEVER when empty). Ties go to the higher level, since a cascade
 * must precede a fire at the same time. With `eligibility`, a higher level's time is the
 * moment its bucket becomes eligible for pre-cascading: one tick of that level before it
 * expires. */
static i64 earliest(i64 *mem, int eligibility, i64 *bk, i64 *bi) {
    i64 best_t = NEVER, best_k = -1, best_i = -1;
    i64 now = mem[H_NOW], nbuckets = mem[H_BUCKETS], levels = mem[H_LEVELS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    const i64 *bexp = mem + mem[H_OFF_BEXP];
    for (i64 k = 0; k < levels; k++) {
        i64 tk = ticks[k];
        i64 c = fdiv(now, tk);
        /* level k holds nothing before (c_k + 1) * tick_k, and higher levels later */
        if (!eligibility && k > 0 && (c + 1) * tk > best_t) break;
        i64 i = first_occupied(mem, k, fmodp(c, nbuckets));
        if (i >= 0) {
            i64 t = bexp[k * nbuckets + i];
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
    wheel_free_slot(mem, slot, TR_FINISH);   /* (in process nothing linked is CANCELLED) */
    return 0;
}

/* Move up to `budget` entries of level-k bucket b into level k - 1, retiring CANCELLED
 * ones instead of moving them. Returns the count handled (moved or retired). */
static i64 cascade_bucket(i64 *mem, i64 k, i64 b, i64 budget, wheel_retire_fn retire,
                          void *ctx) {
    i64 *nd = NODES(mem), nbuckets = mem[H_BUCKETS], tick = mem[H_TICK], nb = mem[H_SENTINELS];
    i64 tk = mem[mem[H_OFF_TICKS] + k], tl = mem[mem[H_OFF_TICKS] + k - 1], done = 0;
    i64 span = fdiv(mem[mem[H_OFF_BEXP] + b], tk);   /* the bucket's virtual id */
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
        } else if (fdiv(r, tk) == span) {   /* within the bucket: one level down, by index */
            i64 v = fdiv(r, tl), idx = fmodp(v, nbuckets);
            link_tail(nd, (k - 1) * nbuckets + idx, node);
            announce(mem, k - 1, idx, v * tl);
        } else if (place(mem, nd, node, r) < 0) {
            /* a reset moved it out of this bucket's span (its record not drained yet): by
             * its deadline, or a bucket's index would join it to another time */
            link_due(mem, nd, node);   /* out of range: cannot be (a reset checks) */
        }
        done++;
    }
    return done;
}

i64 wheel_cascade_step(i64 *mem, i64 budget, wheel_retire_fn retire, void *ctx) {
    i64 done = 0;
    i64 now = mem[H_NOW], nbuckets = mem[H_BUCKETS];
    const i64 *ticks = mem + mem[H_OFF_TICKS];
    for (i64 k = mem[H_LEVELS] - 1; k > 0 && done < budget; k--) {
        i64 tk = ticks[k];
        i64 b = k * nbuckets + fmodp(fdiv(now, tk) + 1, nbuckets); /* virtual id c_k + 1 */
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
    i64 nbuckets = mem[H_BUCKETS], nb = mem[H_SENTINELS], lim = limit_of(mem) - tick;
    i64 *nd = NODES(mem), count = 0;
    /* Nodes met RESETTING (a client's reset holds them) wait on this private list, threaded
     * through F_NEXT, until the walk is over: linked back into any bucket now, one could be
     * met again in this same call (a higher level's bucket expires at or before target, and
     * its cascade places the node by the deadline the reset is writing) and the walk would
     * never end while the reset holds it. */
    i64 held = -1;
    for (;;) {
        i64 k, i;
        i64 t = earliest(mem, 0, &k, &i);
        if (k < 0 || t > target) break;
        i64 b = k * nbuckets + i;
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
            if (count == cap) goto out; /* the clock stays at this bucket's time */
            unlink_node(mem, nd, node);
            i64 slot = node - nb, *gs = gs_word(mem, node), g, d, later = 0;
            do {   /* decide, until the state word confirms the decision */
                g = gs_load(gs);
                if (GS_STATE(g) == ST_RESETTING) later = -1; /* the next tick asks again */
                else if (GS_STATE(g) != ST_PENDING) break;
                else if ((d = dl_load(&DL(nd, node))) > target && d <= lim) /* reset later */
                    later = ceil_to(d, tick);
            } while (!later && !slot_move(gs, g, GS_MAKE(GS_GEN(g), ST_FIRING), TR_FIRE));
            /* one winner: that CAS against a lock-free cancel's (or reset's) CAS of g */
            if (later < 0) {
                NX(nd, node) = held;
                held = node;
                continue;
            }
            if (later) {   /* > target: a cascade places it past target, never back here */
                if (place(mem, nd, node, later) < 0) place(mem, nd, node, target + tick);
                continue;
            }
            mem[H_PENDING]--;
            if (GS_STATE(g) == ST_PENDING) {   /* won */
                if (release) wheel_free_slot(mem, slot, TR_FINISH);
                out[count++] = slot;
            } else if (retire_node(mem, slot, retire, ctx)) {
                /* COMPLETED: the service's hook made it FIRING (its on_complete runs) */
                out[count++] = slot;
            } /* else CANCELLED (before the load, or won the CAS race): freed */
        }
    }
    if (mem[H_NOW] < target) relaxed_store(&mem[H_NOW], target);
out:   /* the held nodes: into the bucket after the clock's (not walked by this call) */
    while (held >= 0) {
        i64 node = held;
        held = NX(nd, node);
        place(mem, nd, node, fdiv(mem[H_NOW], tick) * tick + tick);
    }
    return count;
}

#pragma GCC visibility pop
