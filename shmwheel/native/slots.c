/* slots.c: the slot state machine of slots.h (read its header comment first). */
#define _GNU_SOURCE   /* sched_yield under -std=c11 */
#include "slots.h"

#include <sched.h>
#include <stddef.h>

#include "atomics.h"
#include "wheel.h"

static inline i64 *gs_of(Seg *s, i64 slot) { return gs_word(s->mem, wheel_node(s->mem, slot)); }

int slot_cancel(Seg *s, i64 h) {
    i64 slot = slot_of(s, h);
    if (slot < 0) return CANCEL_LOST;
    i64 *w = gs_of(s, slot), gen = HANDLE_GEN(h);
    for (;;) {
        i64 gs = gs_load(w);
        if (GS_GEN(gs) != gen) return CANCEL_LOST;   /* freed since: the handle is stale */
        switch (GS_STATE(gs)) {
        case ST_PENDING:
        case ST_SUBMITTED:
        case ST_RESETTING:   /* a reset in flight loses to this cancel: it sees CANCELLED */
            /* the reaper's fire and the coordinator's link CAS this same word: if either
             * moved it first, re-read and decide again */
            if (gs_cas(w, gs, GS_MAKE(gen, ST_CANCELLED))) return CANCEL_WON;
            continue;
        case ST_FIRING:
            if (gs_cas(w, gs, GS_MAKE(gen, ST_STOPPING))) return CANCEL_STOPPED;
            continue;
        default:
            return CANCEL_LOST;
        }
    }
}

/* Another client's reset holds the slot (RESETTING): a few instructions, unless that
 * client was descheduled or stopped. Spin, then yield, for up to RESET_WAIT_US; 0 after. */
#define RESET_WAIT_US 2000000
static int reset_wait(i64 *waited, i64 *since) {
    if (++*waited < 64) return 1;
    if (*waited == 64) *since = jnow_us();
    sched_yield();
    return jnow_us() - *since < RESET_WAIT_US;
}

int slot_reset(Seg *s, i64 h, i64 deadline, i64 ring) {
    i64 slot = slot_of(s, h);
    if (slot < 0) return RESET_LOST;
    i64 *w = gs_of(s, slot), gen = HANDLE_GEN(h), waited = 0, since = 0;
    i64 *dl = wheel_field(s->mem, wheel_node(s->mem, slot), F_DEADLINE);
    for (;;) {
        i64 gs = gs_load(w), st = GS_STATE(gs);
        if (GS_GEN(gs) != gen) return RESET_LOST;   /* ended: the handle is stale */
        if (st == ST_RESETTING) {
            if (!reset_wait(&waited, &since)) return RESET_BUSY;
            continue;
        }
        if (st != ST_PENDING && st != ST_SUBMITTED) return RESET_LOST;
        /* acquire: the meta word its client released with SUBMITTED */
        if (META_FIELD(__atomic_load_n(side_meta(s, slot), __ATOMIC_ACQUIRE), FLAGS) &
            FLAG_OP)
            return RESET_NOT_TIMER;
        /* hold it: from here until the word is put back, the reaper defers it, a cancel
         * still wins it (CANCELLED), another reset waits */
        if (!gs_cas(w, gs, GS_MAKE_HOLD(gen, st, ring))) continue;
        dl_store(dl, deadline);
        for (;;) {   /* put back where it came from (the coordinator may have linked a
                        SUBMITTED slot meanwhile: then FROM says PENDING), next sequence */
            i64 cur = gs_load(w);
            if (GS_GEN(cur) != gen || GS_STATE(cur) != ST_RESETTING ||
                GS_AUX(cur) != (ring & GS_AUX_MASK))
                break;   /* a cancel won it while held: decide again (it says LOST) */
            /* release (the CAS): whoever acquires the new word sees the deadline */
            if (gs_cas(w, cur, GS_MAKE_SEQ(gen, GS_AUX(gs) + 1, GS_FROM(cur))))
                return RESET_WON;
        }
    }
}

/* ---- the arena -------------------------------------------------------------------- */
static i64 arena_pop(Seg *s, int cls, i64 owner) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    i64 b = h[A_FREE];
    if (b < 0) return -1;
    h[A_FREE] = s->arena[h[A_OFF_NEXT] + b];
    s->arena[h[A_OFF_OWNER] + b] = owner;
    return b;
}

void arena_release(Seg *s, int cls, i64 block) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    s->arena[h[A_OFF_OWNER] + block] = OWNER_FREE;
    s->arena[h[A_OFF_NEXT] + block] = h[A_FREE];
    h[A_FREE] = block;
}

i64 arena_alloc(Seg *s, int cls, i64 slot) { return arena_pop(s, cls, OWNER_SLOT(slot)); }

i64 arena_reserve(Seg *s, int cls, i64 ring, i64 *out, i64 n) {
    i64 k = 0;
    while (k < n) {
        i64 b = arena_pop(s, cls, OWNER_RING(ring));
        if (b < 0) break;
        out[k++] = b;
    }
    return k;
}

/* The block a slot's side record names, if it is really that slot's: its class via *cls;
 * else -1. */
i64 slot_block(Seg *s, i64 slot, int *cls) {
    i64 meta = __atomic_load_n(side_meta(s, slot), __ATOMIC_ACQUIRE);
    if (!(META_FIELD(meta, FLAGS) & FLAG_ARENA)) return -1;
    i64 c = META_FIELD(meta, CLASS), b = *side_payload(s, slot);
    if (c >= ARENA_CLASSES || b < 0 || b >= s->arena[c * A_CLASS_WORDS + A_NBLOCKS]) return -1;
    if (*arena_owner(s, (int)c, b) != OWNER_SLOT(slot)) return -1;
    *cls = (int)c;
    return b;
}

void slot_free_payload(Seg *s, i64 slot) {
    int c;
    i64 b = slot_block(s, slot, &c);
    if (b >= 0) arena_release(s, c, b);
    i64 *m = side_meta(s, slot);   /* a RESERVED slot stays its ring's */
    /* relaxed store, as every write of a meta word: a client's reset reads any slot's
     * meta lock-free (slot_reset), then confirms by CAS (atomics.h) */
    relaxed_store(m, META_MAKE(0, 0, 0, 0, META_FIELD(*m, RING)));
}

void slot_retire(Seg *s, i64 *mem, i64 slot) {
    if (s->anchor) anchor_move(s, slot, -1);
    slot_free_payload(s, slot);
    relaxed_store(side_meta(s, slot), 0);
    wheel_free_slot(mem, slot);
}

/* Retire a CANCELLED slot: its CANCELLED record first (the handle needs the generation
 * that retiring bumps). */
static void retire_cancelled(Seg *s, i64 *mem, i64 slot) {
    if (s->jb) {
        i64 gs = gs_load(gs_word(mem, wheel_node(mem, slot)));
        jrec_cancelled(s->jb, HANDLE_MAKE(GS_GEN(gs), slot), s->jnow);
    }
    slot_finish(s, mem, slot, OC_CANCELLED);
}

int slot_retire_hook(void *ctx, i64 *mem, i64 slot) {
    Seg *s = (Seg *)ctx;
    i64 *w = gs_word(mem, wheel_node(mem, slot)), gs = gs_load(w);
    if (GS_STATE(gs) == ST_COMPLETED) {
        /* an operation a completion won (purgatory.c): it runs its on_complete task now.
         * COMPLETED has no lock-free writer, so a plain release store moves it on. */
        int c;
        i64 b = slot_block(s, slot, &c), *m = side_meta(s, slot);
        i64 task = b >= 0 ? OPH_TASK(arena_block(s, c, b)[0]) : TASK_NONE;
        relaxed_store(m, (*m & ~(META_TASK_MASK << META_TASK_SHIFT) &
                          ~(META_FLAGS_MASK << META_FLAGS_SHIFT)) |
                         ((task & META_TASK_MASK) << META_TASK_SHIFT) |
                         (((META_FIELD(*m, FLAGS) | FLAG_COMPLETED) & META_FLAGS_MASK)
                          << META_FLAGS_SHIFT));
        gs_store(w, GS_MAKE(GS_GEN(gs), ST_FIRING));
        return 1;
    }
    retire_cancelled(s, mem, slot);
    s->retired++;
    return 0;
}

i64 slot_repeat(Seg *s, i64 slot, i64 **runs) {
    i64 meta = *side_meta(s, slot);
    if (!(META_FIELD(meta, FLAGS) & FLAG_REPEAT)) return 0;
    int c;
    i64 b = slot_block(s, slot, &c);
    if (b < 0) return 0;
    i64 *w = arena_block(s, c, b);   /* (period, runs) precede the payload */
    if (runs) *runs = &w[1];
    return w[0] > 0 ? w[0] : 0;
}

/* ---- reserve, link, settle ------------------------------------------------------- */
i64 slot_reserve(Seg *s, i64 ring, i64 *out, i64 n) {
    i64 *mem = s->mem, k = 0;
    while (k < n) {
        i64 slot = wheel_pop_free(mem);
        if (slot < 0) break;
        i64 *w = gs_of(s, slot), gen = GS_GEN(gs_load(w));
        relaxed_store(side_meta(s, slot), META_MAKE(0, 0, 0, 0, ring));
        gs_store(w, GS_MAKE(gen, ST_RESERVED));   /* FREE: no lock-free writer acts on it */
        out[k++] = HANDLE_MAKE(gen, slot);
    }
    return k;
}

void slot_link_records(Seg *s, const i64 *recs, i64 n, i64 ring, i64 *res) {
    i64 *mem = s->mem, limit = wheel_limit(mem), tick = mem[H_TICK];
    for (i64 j = 0; j < n; j++) {
        i64 h = recs[2 * j], check = recs[2 * j + 1];
        int submit = check == (h ^ CHECK_SUBMIT), reset = check == (h ^ CHECK_RESET);
        if (!submit && !reset && check != (h ^ CHECK_CANCEL)) { res[2]++; continue; }
        i64 slot = slot_of(s, h);
        if (slot < 0) { res[2]++; continue; }
        i64 node = wheel_node(mem, slot), *w = gs_word(mem, node), gen = HANDLE_GEN(h);
    again:;
        i64 gs = gs_load(w);
        if (GS_GEN(gs) != gen) { res[1]++; continue; }   /* retired since */
        i64 st = GS_STATE(gs);
        int linked = *wheel_field(mem, node, F_PREV) != -1;
        if (reset) {
            /* a reset moved a PENDING timer: relink it by its deadline now, so that one
             * moved earlier is not held back by its old bucket. RESETTING: another reset
             * is in flight, and its own record follows. */
            if (st == ST_PENDING && linked) {
                wheel_unlink(mem, node);
                if (wheel_relink(mem, node) < 0) wheel_link(mem, node, mem[H_NOW]);
                i64 d = dl_load(wheel_field(mem, node, F_DEADLINE));
                if (d < res[3]) res[3] = d;
            }
            continue;
        }
        if (submit && st == ST_RESETTING && GS_FROM(gs) == ST_SUBMITTED && !linked) {
            /* a reset holds it before its link: link it under the reset's feet (the
             * deadline it writes is re-read by advance and relinked on its record), and
             * say so in the word the reset puts back: FROM becomes PENDING */
            i64 d = dl_load(wheel_field(mem, node, F_DEADLINE));
            if (d > limit - tick || !gs_cas(w, gs, (gs & ~(GS_FROM_MASK << GS_FROM_SHIFT)) |
                                                       ((i64)ST_PENDING << GS_FROM_SHIFT)))
                goto again;   /* out of range cannot be (the reset checked it); else moved */
            wheel_relink(mem, node);
            mem[H_PENDING]++;
            res[0]++;
            if (d < res[3]) res[3] = d;
            continue;
        }
        if (submit && st == ST_SUBMITTED) {
            if (META_FIELD(*side_meta(s, slot), RING) != ring) { res[2]++; continue; }
            /* dl_load: a reset may hold the slot (and write it) from this load's moment */
            i64 deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
            if (deadline > limit - tick) {   /* a client wrote one beyond the wheel's range */
                if (!gs_cas(w, gs, GS_MAKE(gen, ST_CANCELLED))) goto again;
                slot_retire(s, mem, slot);
                res[2]++;
                continue;
            }
            if (!gs_cas(w, gs, GS_MAKE(gen, ST_PENDING))) goto again;  /* a cancel won */
            wheel_relink(mem, node);   /* a cancel (or reset) may now win PENDING: fine */
            deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
            mem[H_PENDING]++;
            res[0]++;
            /* an operation whose amounts arrived before its link completes now */
            if (op_complete_if_ready(s, slot)) deadline = mem[H_NOW];
            if (deadline < res[3]) res[3] = deadline;
        } else if (st == ST_CANCELLED && submit && !linked) {
            /* A cancel won it before it was linked: link it as it is. The cancel record
             * that follows on the same ring retires it, and that is where the journal
             * records the cancel: the cancel may have won after slot_journal_records
             * looked at this submit record, so the submit record cannot tell whether it
             * was recorded. (A cancel record lost to a full ring: the reaper retires it
             * when it meets it in its bucket.) dl_load: a reset that held it before the
             * cancel won may still be writing it. */
            i64 deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
            if (deadline > limit - tick) {   /* never a timer: see the SUBMITTED case */
                slot_retire(s, mem, slot);
                res[2]++;
                continue;
            }
            wheel_relink(mem, node);
            mem[H_PENDING]++;
            res[0]++;
        } else if (st == ST_COMPLETED && submit && !linked) {
            /* an operation completed before its link (purgatory.c): due now */
            wheel_link(mem, node, mem[H_NOW]);
            mem[H_PENDING]++;
            res[0]++;
            if (mem[H_NOW] < res[3]) res[3] = mem[H_NOW];
        } else if (st == ST_CANCELLED && !submit) {
            /* its cancel record: unlink, free (slot_journal_records recorded it) */
            if (linked) {
                wheel_unlink(mem, node);
                mem[H_PENDING]--;
            }
            slot_finish(s, mem, slot, OC_CANCELLED);
            res[4]++;
        } else {
            res[1]++;   /* linked already, or its cancel was applied */
        }
    }
}

void slot_settle(Seg *s, const i64 *results, i64 n, i64 *res) {
    i64 *mem = s->mem, now = mem[H_NOW];
    s->jnow = jnow_us();
    for (i64 j = 0; j < n; j++) {
        const i64 *r = &results[RESULT_RECORD * j];
        i64 h = r[0], outcome = r[1];
        i64 slot = slot_of(s, h);
        if (slot < 0) continue;
        i64 node = wheel_node(mem, slot), *w = gs_word(mem, node), gen = HANDLE_GEN(h);
        i64 gs = gs_load(w);
        if (GS_GEN(gs) != gen) continue;   /* settled already: outcomes are idempotent */
        i64 st = GS_STATE(gs);
        if (st != ST_FIRING && st != ST_STOPPING) continue;
        i64 *runs = NULL, every = slot_repeat(s, slot, &runs), run = runs ? *runs : 1;
        if (st == ST_FIRING && every > 0 && outcome != OUTCOME_CRASHED) {
            i64 d = *wheel_field(mem, node, F_DEADLINE) + every;
            if (d <= now) d += ((now - d) / every + 1) * every;
            *wheel_field(mem, node, F_DEADLINE) = d;
            if (gs_cas(w, gs, GS_MAKE(gen, ST_PENDING))) {   /* else a cancel stopped it */
                (*runs)++;
                if (wheel_relink(mem, node) >= 0) {   /* d: a reset may rewrite it now */
                    mem[H_PENDING]++;
                    res[1]++;
                    if (s->jb) jrec_outcome(s->jb, h, s->jnow, run, outcome, r[4], d);
                    continue;
                }
                gs_store(w, GS_MAKE(gen, ST_CANCELLED));   /* cannot happen: every < range */
            }
        }
        if (s->jb) jrec_outcome(s->jb, h, s->jnow, run, outcome, r[4], -1);
        i64 flags = META_FIELD(*side_meta(s, slot), FLAGS);
        slot_finish(s, mem, slot, (outcome & OC_TASK_MASK) |
                                      ((flags & FLAG_COMPLETED) ? OC_COMPLETED
                                       : (flags & FLAG_OP)      ? OC_EXPIRED : 0));
        res[0]++;
    }
}

i64 slot_reclaim(Seg *s, i64 ring) {
    i64 *mem = s->mem, cap = seg_capacity(s), n = 0;
    s->jnow = jnow_us();
    for (i64 slot = 0; slot < cap; slot++) {
        i64 *w = gs_of(s, slot), gs = gs_load(w);
        /* a reset of this client died holding a slot (any client's): put it back as it
         * was (a cancel may win it first: CAS). Safe: the holder can write nothing more */
        if (GS_STATE(gs) == ST_RESETTING && GS_AUX(gs) == (ring & GS_AUX_MASK))
            gs_cas(w, gs, GS_MAKE(GS_GEN(gs), GS_FROM(gs)));
        i64 st = GS_STATE(gs_load(w));
        /* its ring is drained: a SUBMITTED slot was never published, and a CANCELLED one
         * that is not linked lost its cancel record to a full ring */
        int unlinked = *wheel_field(mem, wheel_node(mem, slot), F_PREV) == -1;
        /* relaxed: live clients write their slots' meta words meanwhile (slot_write) */
        int mine = META_FIELD(relaxed_load(side_meta(s, slot)), RING) == ring;
        if (st == ST_COMPLETED && unlinked && mine) {
            /* an operation completed before its submit record, which never came: it ran
             * through its watcher's death, so it is recorded and run */
            if (s->jb) slot_journal_submit(s, HANDLE_MAKE(GS_GEN(gs_load(gs_of(s, slot))), slot), ring, 0);
            wheel_link(mem, wheel_node(mem, slot), mem[H_NOW]);
            mem[H_PENDING]++;
            continue;
        }
        if ((st == ST_RESERVED || st == ST_SUBMITTED || (st == ST_CANCELLED && unlinked)) &&
                mine) {
            if (st == ST_CANCELLED) retire_cancelled(s, mem, slot);
            else slot_retire(s, mem, slot);
            n++;
        }
    }
    for (int c = 0; c < ARENA_CLASSES; c++)
        for (i64 b = 0; b < s->arena[c * A_CLASS_WORDS + A_NBLOCKS]; b++)
            if (relaxed_load(arena_owner(s, c, b)) == OWNER_RING(ring))   /* as meta above */
                arena_release(s, c, b);
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
            gs_store(w, GS_MAKE(GS_GEN(gs), ST_FREE));
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
                gs_store(w, GS_MAKE(GS_GEN(gs), ST_CANCELLED));
                slot_retire(s, mem, slot);
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
