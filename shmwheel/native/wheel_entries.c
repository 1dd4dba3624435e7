/* wheel_entries.c: the wheel's entry table (layout in contract.h, theory at the top of
 * wheel.c): the free stack of slots and the single-entry operations of the in-process core
 * (insert, cancel, release). The service's slot state machine (slots.c) builds on the free
 * stack too. */
#pragma GCC visibility push(hidden)

#include "wheel.h"

#include "atomics.h"
#include "wheel_lists.h"

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

/* tr: FINISH, RECLAIM or DROP (contract.h): why this use of the slot ends */
static inline void free_slot(i64 *mem, i64 slot, int tr) {
    i64 *nd = NODES(mem), node = wheel_node(mem, slot), *gs = gs_word(mem, node);
    /* generation + 1 (wrapping within GS_GEN_MASK): every old handle is now stale */
    i64 seen = gs_load(gs);
    PV(nd, node) = -1;
    NX(nd, node) = mem[H_FREE];
    slot_move(gs, seen, GS_MAKE(GS_GEN(seen) + 1, ST_FREE), tr);
    mem[H_FREE] = slot;
}

void wheel_free_slot(i64 *mem, i64 slot, int tr) { free_slot(mem, slot, tr); }

void wheel_add_free_slots(i64 *mem, i64 first) {
    i64 *nd = NODES(mem), nb = mem[H_SENTINELS];
    for (i64 s = mem[H_CAPACITY] - 1; s >= first; s--) {
        i64 node = nb + s;
        NX(nd, node) = mem[H_FREE];
        PV(nd, node) = -1;
        DL(nd, node) = 0;
        i64 *gs = gs_word(mem, node);
        slot_move(gs, gs_load(gs), GS_MAKE(0, ST_FREE), TR_FORMAT);
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
    i64 seen = gs_load(gs), gen = GS_GEN(seen); /* kept: the free bumped it */
    DL(nd, node) = deadline;
    slot_move(gs, seen, GS_MAKE(gen, ST_PENDING), TR_ARM); /* after the deadline: release */
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
    free_slot(mem, slot, TR_DROP);
    return 1;
}

i64 wheel_release(i64 *mem, const i64 *slots, i64 n) {
    i64 cap = mem[H_CAPACITY], nb = mem[H_SENTINELS], freed = 0;
    for (i64 i = 0; i < n; i++) {
        i64 s = slots[i];
        if (s < 0 || s >= cap) continue;
        if (GS_STATE(gs_load(gs_word(mem, nb + s))) != ST_FIRING) continue; /* not twice */
        free_slot(mem, s, TR_FINISH);
        freed++;
    }
    return freed;
}

#pragma GCC visibility pop
