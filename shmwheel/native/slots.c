/* slots.c: the slot state machine's transitions (slots.h says why the rules hold; the
 * table of transitions is contract.h's). The arena is arena.c's; reclaim, rebuild and a
 * recovery's install are slots_repair.c's; the journal's records are slots_journal.c's. */
#define _GNU_SOURCE   /* sched_yield under -std=c11 */
#include "slots.h"

#include <sched.h>
#include <stddef.h>

#include "atomics.h"
#include "wheel.h"

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
            if (slot_move(w, gs, GS_MAKE(gen, ST_CANCELLED), TR_CANCEL)) return CANCEL_WON;
            continue;
        case ST_FIRING:
            if (slot_move(w, gs, GS_MAKE(gen, ST_STOPPING), TR_STOP)) return CANCEL_STOPPED;
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

int slot_reset_hold(Seg *s, i64 h, i64 deadline, i64 ring, i64 *held) {
    i64 slot = slot_of(s, h);
    if (slot < 0) return RESET_LOST;
    i64 *w = gs_of(s, slot), gen = HANDLE_GEN(h);
    for (;;) {
        i64 gs = gs_load(w), st = GS_STATE(gs);
        if (GS_GEN(gs) != gen) return RESET_LOST;   /* ended: the handle is stale */
        if (st == ST_RESETTING) return RESET_BUSY;   /* another reset holds it */
        if (st != ST_PENDING && st != ST_SUBMITTED) return RESET_LOST;
        /* acquire: the meta word its client released with SUBMITTED */
        if (META_FIELD(__atomic_load_n(side_meta(s, slot), __ATOMIC_ACQUIRE), FLAGS) &
            FLAG_OP)
            return RESET_NOT_TIMER;
        /* hold it: from here until the word is put back, the reaper defers it, a cancel
         * still wins it (CANCELLED), another reset waits */
        if (!slot_move(w, gs, GS_MAKE_HOLD(gen, st, ring), TR_HOLD)) continue;
        dl_store(wheel_field(s->mem, wheel_node(s->mem, slot), F_DEADLINE), deadline);
        *held = gs;
        return RESET_WON;
    }
}

int slot_reset_put_back(Seg *s, i64 h, i64 ring, i64 held) {
    i64 *w = gs_of(s, HANDLE_SLOT(h)), gen = HANDLE_GEN(h);
    for (;;) {   /* back where it came from (the coordinator may have linked a SUBMITTED
                    slot meanwhile: then FROM says PENDING), with the next sequence */
        i64 cur = gs_load(w);
        if (GS_GEN(cur) != gen || GS_STATE(cur) != ST_RESETTING ||
            GS_AUX(cur) != (ring & GS_AUX_MASK))
            return RESET_LOST;   /* a cancel won it while it was held */
        /* release (the CAS): whoever acquires the new word sees the deadline */
        if (slot_move(w, cur, GS_MAKE_SEQ(gen, GS_AUX(held) + 1, GS_FROM(cur)), TR_PUT_BACK))
            return RESET_WON;
    }
}

int slot_reset(Seg *s, i64 h, i64 deadline, i64 ring) {
    i64 waited = 0, since = 0, held;
    for (;;) {
        int code = slot_reset_hold(s, h, deadline, ring, &held);
        if (code == RESET_BUSY) {
            if (!reset_wait(&waited, &since)) return RESET_BUSY;
            continue;
        }
        if (code != RESET_WON || slot_reset_put_back(s, h, ring, held) == RESET_WON)
            return code;
        /* a cancel won it while held: decide again (it says LOST) */
    }
}

void slot_retire(Seg *s, i64 *mem, i64 slot, int tr) { slot_retire_ended(s, mem, slot, tr, OC_NONE); }

void slot_retire_ended(Seg *s, i64 *mem, i64 slot, int tr, i64 code) {
    if (s->anchor) anchor_move(s, slot, -1);
    slot_free_payload(s, slot);
    /* the use's outcome, in the payload word a free slot does not use, for late askers
     * (waiters.c, slot_outcome: they acquire the free below, then read it). relaxed: its
     * next client stores its own payload there lock-free once it has reserved the slot */
    relaxed_store(side_payload(s, slot), OUT_MAKE(GS_GEN(gs_load(gs_of(s, slot))), code));
    relaxed_store(side_meta(s, slot), 0);
    wheel_free_slot(mem, slot, tr);
}

void slot_retire_cancelled(Seg *s, i64 *mem, i64 slot) {
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
        i64 task = b >= 0 ? OPH_TASK(arena_block(s, c, b)[OH_OPH]) : TASK_NONE;
        relaxed_store(m, META_WITH(META_WITH(*m, TASK, task), FLAGS,
                                   META_FIELD(*m, FLAGS) | FLAG_COMPLETED));
        slot_move(w, gs, GS_MAKE(GS_GEN(gs), ST_FIRING), TR_RUN_COMPLETED);
        return 1;
    }
    slot_retire_cancelled(s, mem, slot);
    s->retired++;
    return 0;
}

/* ---- reserve, link, settle ------------------------------------------------------- */
i64 slot_reserve(Seg *s, i64 ring, i64 *out, i64 n) {
    i64 *mem = s->mem, k = 0;
    while (k < n) {
        i64 slot = wheel_pop_free(mem);
        if (slot < 0) break;
        i64 *w = gs_of(s, slot), seen = gs_load(w), gen = GS_GEN(seen);
        relaxed_store(side_meta(s, slot), META_MAKE(0, 0, 0, 0, ring));
        slot_move(w, seen, GS_MAKE(gen, ST_RESERVED), TR_RESERVE);
        out[k++] = HANDLE_MAKE(gen, slot);
    }
    return k;
}

i64 slot_relink(Seg *s, i64 slot) {
    i64 *mem = s->mem, node = wheel_node(mem, slot);
    if (*wheel_field(mem, node, F_PREV) == -1) return NEVER;
    wheel_unlink(mem, node);
    /* (out of range cannot be: a reset checks its deadline) */
    if (wheel_relink(mem, node) < 0) wheel_link(mem, node, mem[H_NOW]);
    return dl_load(wheel_field(mem, node, F_DEADLINE));
}

void slot_link_records(Seg *s, const i64 *recs, i64 n, i64 ring, i64 *res) {
    i64 *mem = s->mem, limit = wheel_limit(mem), tick = mem[H_TICK];
    for (i64 j = 0; j < n; j++) {
        const i64 *r = &recs[PRODUCER_RECORD * j];
        i64 h = r[PR_HANDLE], check = r[PR_CHECK];
        int submit = check == (h ^ CHECK_SUBMIT), reset = check == (h ^ CHECK_RESET);
        if (!submit && !reset && check != (h ^ CHECK_CANCEL)) { res[LR_GARBAGE]++; continue; }
        i64 slot = slot_of(s, h);
        if (slot < 0) { res[LR_GARBAGE]++; continue; }
        i64 node = wheel_node(mem, slot), *w = gs_word(mem, node), gen = HANDLE_GEN(h);
    again:;
        i64 gs = gs_load(w);
        if (GS_GEN(gs) != gen) { res[LR_STALE]++; continue; }   /* retired since */
        i64 st = GS_STATE(gs);
        int linked = *wheel_field(mem, node, F_PREV) != -1;
        if (reset) {
            /* a reset moved a PENDING timer: relink it by its deadline now, so that one
             * moved earlier is not held back by its old bucket. RESETTING: another reset
             * is in flight, and its own record follows. */
            if (st == ST_PENDING && linked) {
                i64 d = slot_relink(s, slot);
                if (d < res[LR_EARLIEST]) res[LR_EARLIEST] = d;
            }
            continue;
        }
        if (submit && st == ST_RESETTING && GS_FROM(gs) == ST_SUBMITTED && !linked) {
            /* a reset holds it before its link: link it under the reset's feet (the
             * deadline it writes is re-read by advance and relinked on its record), and
             * say so in the word the reset puts back: FROM becomes PENDING */
            i64 d = dl_load(wheel_field(mem, node, F_DEADLINE));
            if (d > limit - tick ||
                !slot_move(w, gs, GS_WITH_FROM(gs, ST_PENDING), TR_LINK_HELD))
                goto again;   /* out of range cannot be (the reset checked it); else moved */
            wheel_relink(mem, node);
            mem[H_PENDING]++;
            res[LR_LINKED]++;
            if (d < res[LR_EARLIEST]) res[LR_EARLIEST] = d;
            continue;
        }
        if (submit && st == ST_SUBMITTED) {
            if (META_FIELD(*side_meta(s, slot), RING) != ring) { res[LR_GARBAGE]++; continue; }
            /* dl_load: a reset may hold the slot (and write it) from this load's moment */
            i64 deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
            if (deadline > limit - tick) {   /* a client wrote one beyond the wheel's range */
                if (!slot_move(w, gs, GS_MAKE(gen, ST_CANCELLED), TR_REFUSE)) goto again;
                slot_retire(s, mem, slot, TR_FINISH);
                res[LR_GARBAGE]++;
                continue;
            }
            if (!slot_move(w, gs, GS_MAKE(gen, ST_PENDING), TR_LINK)) goto again; /* lost */
            wheel_relink(mem, node);   /* a cancel (or reset) may now win PENDING: fine */
            deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
            mem[H_PENDING]++;
            res[LR_LINKED]++;
            /* an operation whose amounts arrived before its link completes now */
            if (op_complete_if_ready(s, slot)) deadline = mem[H_NOW];
            if (deadline < res[LR_EARLIEST]) res[LR_EARLIEST] = deadline;
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
                slot_retire(s, mem, slot, TR_FINISH);
                res[LR_GARBAGE]++;
                continue;
            }
            wheel_relink(mem, node);
            mem[H_PENDING]++;
            res[LR_LINKED]++;
        } else if (st == ST_COMPLETED && submit && !linked) {
            /* an operation completed before its link (purgatory.c): due now */
            wheel_link(mem, node, mem[H_NOW]);
            mem[H_PENDING]++;
            res[LR_LINKED]++;
            if (mem[H_NOW] < res[LR_EARLIEST]) res[LR_EARLIEST] = mem[H_NOW];
        } else if (st == ST_CANCELLED && !submit) {
            /* its cancel record: unlink, free (slot_journal_records recorded it) */
            if (linked) {
                wheel_unlink(mem, node);
                mem[H_PENDING]--;
            }
            slot_finish(s, mem, slot, OC_CANCELLED);
            res[LR_RETIRED]++;
        } else {
            res[LR_STALE]++;   /* linked already, or its cancel was applied */
        }
    }
}

void slot_settle(Seg *s, const i64 *results, i64 n, i64 now_ms, i64 *res) {
    i64 *mem = s->mem, now = mem[H_NOW] > now_ms ? mem[H_NOW] : now_ms;
    s->jnow = jnow_us();
    for (i64 j = 0; j < n; j++) {
        const i64 *r = &results[RESULT_RECORD * j];
        i64 h = r[RR_HANDLE], outcome = r[RR_OUTCOME];
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
            if (slot_move(w, gs, GS_MAKE(gen, ST_PENDING), TR_REARM)) {   /* else stopped */
                (*runs)++;
                if (wheel_relink(mem, node) >= 0) {   /* d: a reset may rewrite it now */
                    mem[H_PENDING]++;
                    res[SR_REARMED]++;
                    if (s->jb)
                        jrec_outcome(s->jb, h, s->jnow, run, outcome, r[RR_DURATION_US], d);
                    continue;
                }
                /* cannot happen (every < range); a cancel may win it first: the same end */
                slot_move(w, GS_MAKE(gen, ST_PENDING), GS_MAKE(gen, ST_CANCELLED), TR_REFUSE);
            }
        }
        if (s->jb) jrec_outcome(s->jb, h, s->jnow, run, outcome, r[RR_DURATION_US], -1);
        i64 flags = META_FIELD(*side_meta(s, slot), FLAGS);
        slot_finish(s, mem, slot, (outcome & OC_TASK_MASK) |
                                      ((flags & FLAG_COMPLETED) ? OC_COMPLETED
                                       : (flags & FLAG_OP)      ? OC_EXPIRED : 0));
        res[SR_FREED]++;
    }
}

