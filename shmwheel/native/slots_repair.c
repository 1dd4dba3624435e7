/* slots_repair.c: putting the tables right from the slot states, under the segment lock:
 * the reclaim of a dead or closed client's slots and blocks, the rebuild after a lock
 * holder died mid-update (the states are the truth: links, free stacks and block owners
 * are derived from them), and a recovery's install of the journal's pending timers. */
#include "slots.h"

#include "atomics.h"
#include "wheel.h"

i64 slot_reclaim(Seg *s, i64 ring, i64 producer) {
    i64 *mem = s->mem, cap = seg_capacity(s), n = 0;
    s->jnow = jnow_us();
    for (i64 slot = 0; slot < cap; slot++) {
        i64 *w = gs_of(s, slot), gs = gs_load(w);
        /* A reset of this client died holding a slot (any client's): put it back where it
         * came from (a cancel may win it first: CAS; the holder can write nothing more).
         * It keeps the deadline that reset wrote (no caller saw the reset return: either
         * deadline is right), so it is relinked by it and journaled, as the reset's own
         * record would have had it. */
        if (GS_STATE(gs) == ST_RESETTING && GS_AUX(gs) == (ring & GS_AUX_MASK) &&
            slot_move(w, gs, GS_MAKE(GS_GEN(gs), GS_FROM(gs)), TR_UNHOLD) &&
            GS_FROM(gs) == ST_PENDING) {
            slot_relink(s, slot);
            if (s->jb) slot_journal_submit(s, HANDLE_MAKE(GS_GEN(gs), slot), producer, J_FLAG_RESET);
        }
        i64 st = GS_STATE(gs_load(w));
        /* its ring is drained: a SUBMITTED slot was never published, and a CANCELLED one
         * that is not linked lost its cancel record to a full ring */
        int unlinked = *wheel_field(mem, wheel_node(mem, slot), F_PREV) == -1;
        /* relaxed: live clients write their slots' meta words meanwhile (slot_write) */
        int mine = META_FIELD(relaxed_load(side_meta(s, slot)), RING) == ring;
        if (st == ST_COMPLETED && unlinked && mine) {
            /* an operation completed before its submit record, which never came: it ran
             * through its watcher's death, so it is recorded and run */
            if (s->jb)
                slot_journal_submit(s, HANDLE_MAKE(GS_GEN(gs_load(gs_of(s, slot))), slot), producer, 0);
            wheel_link(mem, wheel_node(mem, slot), mem[H_NOW]);
            mem[H_PENDING]++;
            continue;
        }
        if ((st == ST_RESERVED || st == ST_SUBMITTED || (st == ST_CANCELLED && unlinked)) &&
                mine) {
            if (st == ST_CANCELLED) slot_retire_cancelled(s, mem, slot);
            else slot_retire(s, mem, slot, TR_RECLAIM);
            n++;
        }
    }
    for (int c = 0; c < ARENA_CLASSES; c++)
        for (i64 b = 0; b < s->arena[c * A_CLASS_WORDS + A_NBLOCKS]; b++)
            if (relaxed_load(arena_owner(s, c, b)) == OWNER_RING(ring))   /* as meta above */
                arena_release(s, c, b);
    waiters_reclaim(s, ring);   /* the outcomes it waited for (waiters.c) */
    return n;
}

/* For slot_rebuild: a slot-owned block its owner's side record does not name (the slot
 * is free, or names another block) goes back to the free stack. A slot a client is still
 * writing (RESERVED, SUBMITTED: lock-free, producer.c) keeps its block even if its side
 * record does not name it yet: the client names it or releases it. */
static int block_unnamed(Seg *s, int c, i64 b) {
    i64 slot = relaxed_load(arena_owner(s, c, b)) - 1;   /* relaxed: clients write theirs */
    if (slot < 0 || slot >= seg_capacity(s)) return 1;
    i64 st = GS_STATE(gs_load(gs_word(s->mem, wheel_node(s->mem, slot))));
    if (st == ST_FREE || st >= ST_COUNT) return 1;
    /* acquire: pairs with slot_write's release of the meta word */
    i64 meta = __atomic_load_n(side_meta(s, slot), __ATOMIC_ACQUIRE);
    if (!(META_FIELD(meta, FLAGS) & FLAG_ARENA))
        return !(st == ST_RESERVED || st == ST_SUBMITTED);
    return META_FIELD(meta, CLASS) != c || relaxed_load(side_payload(s, slot)) != b;
}

i64 slot_rebuild(Seg *s) {
    i64 *mem = s->mem, cap = seg_capacity(s), nb = mem[H_SENTINELS], relinked = 0;
    /* empty buckets and bitmaps, an empty free stack */
    for (i64 b = 0; b < nb; b++) {
        *wheel_field(mem, b, F_NEXT) = b;
        *wheel_field(mem, b, F_PREV) = b;
        mem[mem[H_OFF_BEXP] + b] = NO_TIME;
    }
    for (i64 i = 0; i < mem[H_LEVELS] * mem[H_WORDS]; i++) mem[mem[H_OFF_BITS] + i] = 0;
    mem[H_FREE] = -1;
    mem[H_PENDING] = 0;
    /* Blocks: those in a client's cache stay its; a block is its slot's if the slot's
     * side record names it, else free. An owner word is written only where it changes
     * (here in the slot loop, and in block_unnamed's pass after it): executors check a
     * block's owner without the lock (executor.c), so the block of a live timer must
     * never read as free, even for the moment a rebuild takes (resetting every owner
     * first and re-owning after made a burst of timers fail that check: bench/chaos.py). */
    for (i64 slot = cap - 1; slot >= 0; slot--) {
        i64 node = wheel_node(mem, slot), *w = gs_word(mem, node), gs = gs_load(w);
        i64 st = GS_STATE(gs);
        *wheel_field(mem, node, F_PREV) = -1;
        *wheel_field(mem, node, F_NEXT) = -1;
        if (st == ST_FREE || st >= ST_COUNT) {
            slot_move(w, gs, GS_MAKE(GS_GEN(gs), ST_FREE), TR_REPAIR);
            relaxed_store(side_meta(s, slot), 0);
            *wheel_field(mem, node, F_NEXT) = mem[H_FREE];
            mem[H_FREE] = slot;
            continue;
        }
        i64 meta = relaxed_load(side_meta(s, slot));   /* a live client may write it */
        if (META_FIELD(meta, FLAGS) & FLAG_ARENA) {
            i64 c = META_FIELD(meta, CLASS), b = relaxed_load(side_payload(s, slot));
            if (c < ARENA_CLASSES && b >= 0 && b < s->arena[c * A_CLASS_WORDS + A_NBLOCKS] &&
                relaxed_load(arena_owner(s, (int)c, b)) != OWNER_SLOT(slot))
                relaxed_store(arena_owner(s, (int)c, b), OWNER_SLOT(slot));
        }
        /* A cancelled slot is relinked too, not freed here: whoever repairs may be a
         * client, and the one who frees a cancelled slot records it in the journal. The
         * coordinator frees it when it drains its cancel record, or the reaper when it
         * meets it in its bucket. */
        if (st == ST_PENDING || st == ST_CANCELLED || st == ST_COMPLETED ||
            (st == ST_RESETTING && GS_FROM(gs) == ST_PENDING)) {
            if (wheel_relink(mem, node) >= 0) {
                mem[H_PENDING]++;
                relinked++;
            } else {   /* a deadline no client could have had accepted: drop it */
                while (GS_STATE(gs) != ST_CANCELLED &&   /* (unless a cancel won it) */
                       !slot_move(w, gs, GS_MAKE(GS_GEN(gs), ST_CANCELLED), TR_REFUSE))
                    gs = gs_load(w);
                slot_retire(s, mem, slot, TR_FINISH);
            }
        }
    }
    for (int c = 0; c < ARENA_CLASSES; c++) {
        i64 *h = &s->arena[c * A_CLASS_WORDS];
        h[A_FREE] = -1;
        for (i64 b = h[A_NBLOCKS] - 1; b >= 0; b--) {
            if (relaxed_load(arena_owner(s, c, b)) > 0 && block_unnamed(s, c, b))
                relaxed_store(arena_owner(s, c, b), OWNER_FREE);
            if (relaxed_load(arena_owner(s, c, b)) == OWNER_FREE) {
                s->arena[h[A_OFF_NEXT] + b] = h[A_FREE];
                h[A_FREE] = b;
            }
        }
    }
    if (s->watch) watch_rebuild(s);   /* its chains may be half-updated too */
    return relinked;
}

void slot_format(Seg *s, i64 gen) {
    for (i64 slot = 0; slot < seg_capacity(s); slot++) {
        i64 *w = gs_of(s, slot);
        slot_move(w, gs_load(w), GS_MAKE(gen, ST_FREE), TR_FORMAT);
    }
}

i64 slot_install(Seg *s, const i64 *handles, const i64 *deadlines, const i64 *metas,
                 const i64 *words, i64 n) {
    i64 *mem = s->mem;
    for (i64 i = 0; i < n; i++) {
        i64 h = handles[i], slot = slot_of(s, h), gen = HANDLE_GEN(h);
        if (slot < 0) return -1;
        i64 *w = gs_of(s, slot), seen = gs_load(w);
        if (GS_STATE(seen) != ST_FREE) return -1;   /* two timers of the journal in one slot */
        *side_meta(s, slot) = metas[i];
        *side_payload(s, slot) = words[i];
        dl_store(wheel_field(mem, wheel_node(mem, slot), F_DEADLINE), deadlines[i]);
        slot_move(w, seen, GS_MAKE(gen, ST_FREE), TR_FORMAT);
        slot_move(w, GS_MAKE(gen, ST_FREE), GS_MAKE(gen, ST_PENDING), TR_ARM);
    }
    return n;
}
