/* slots_journal.c: the journal's view of the slot state machine (slots.h, "journal"):
 * the records a transition decides, encoded into the process's JournalBuffer while the
 * caller holds the segment lock. The transitions themselves are slots.c's. */
#include "slots.h"

#include "atomics.h"
#include "wheel.h"

/* The msgpack bytes a slot's side record holds (after a repeating timer's header): a
 * pointer into the side record or the arena, valid while the slot is not freed. */
static const void *slot_blob(Seg *s, i64 slot, size_t *len) {
    i64 meta = *side_meta(s, slot), flags = META_FIELD(meta, FLAGS);
    *len = (size_t)META_FIELD(meta, LEN);
    if (!(flags & FLAG_ARENA)) return *len <= INLINE_MAX ? (const void *)side_payload(s, slot)
                                                         : (*len = 0, NULL);
    int c;
    i64 b = slot_block(s, slot, &c);
    i64 skip = (flags & FLAG_REPEAT) ? REPEAT_HEADER : (flags & FLAG_OP) ? OP_HEADER : 0;
    if (b < 0 || (i64)*len + skip > ARENA_CLASS_BYTES(c)) { *len = 0; return NULL; }
    return (const char *)arena_block(s, c, b) + skip;
}

/* this run's number: a repeating timer counts its runs from 1; a one-shot has run 1 */
static i64 slot_run(Seg *s, i64 slot, i64 *period) {
    i64 *runs = NULL;
    *period = slot_repeat(s, slot, &runs);
    return runs ? *runs : 1;
}

/* The record of a timer's or an operation's submission: SCHEDULED or WATCHED, for handle
 * h of a slot whose blob is readable (else nothing: 0); its anchor moves to s->jseq. */
int slot_journal_submit(Seg *s, i64 h, i64 producer, i64 jflags) {
    i64 slot = HANDLE_SLOT(h), meta = *side_meta(s, slot), flags = META_FIELD(meta, FLAGS);
    i64 deadline = dl_load(wheel_field(s->mem, wheel_node(s->mem, slot), F_DEADLINE));
    size_t len;
    const void *blob = slot_blob(s, slot, &len);
    if (!blob) return 0;
    if (flags & FLAG_OP) {
        int c;
        i64 b = slot_block(s, slot, &c), w = b >= 0 ? arena_block(s, c, b)[OH_OPH] : 0;
        jrec_watched(s->jb, h, s->jnow, deadline, OPH_REQUIRED(w), OPH_NKEYS(w), OPH_TASK(w),
                     META_FIELD(meta, TASK), blob, len);
    } else {
        i64 period, run = slot_run(s, slot, &period);
        jrec_scheduled(s->jb, h, s->jnow, deadline, META_FIELD(meta, TASK), producer,
                       (flags & (FLAG_KEY | FLAG_REPEAT)) | jflags, period, run, blob, len);
    }
    if (s->anchor) anchor_move(s, slot, s->jseq);
    return 1;
}

i64 slot_journal_records(Seg *s, const i64 *recs, i64 n, i64 producer) {
    i64 *mem = s->mem, limit = wheel_limit(mem), tick = mem[H_TICK], k = 0;
    if (!s->jb) return 0;
    s->jnow = jnow_us();
    for (i64 j = 0; j < n; j++) {
        const i64 *r = &recs[PRODUCER_RECORD * j];
        i64 h = r[PR_HANDLE], submit = r[PR_CHECK] == (h ^ CHECK_SUBMIT);
        int reset = r[PR_CHECK] == (h ^ CHECK_RESET);
        if (!submit && !reset && r[PR_CHECK] != (h ^ CHECK_CANCEL)) continue;
        i64 slot = slot_of(s, h);
        if (slot < 0) continue;
        i64 node = wheel_node(mem, slot), gs = gs_load(gs_word(mem, node));
        i64 st = GS_STATE(gs), deadline = dl_load(wheel_field(mem, node, F_DEADLINE));
        if (GS_GEN(gs) != HANDLE_GEN(h)) continue;
        /* a reset: the deadline now in the slot (a later reset's, if one came since: its
         * record follows, so the last record says the last deadline); a RESETTING slot's
         * own reset record follows */
        if (reset) {
            if (st == ST_PENDING || st == ST_SUBMITTED)
                k += slot_journal_submit(s, h, producer, J_FLAG_RESET);
            continue;
        }
        if (st == ST_RESETTING) st = GS_FROM(gs);   /* its submit is recorded as such */
        /* what link_records will refuse (a deadline out of range) is not a timer */
        /* (COMPLETED: an operation a signal completed before it was linked) */
        if (submit && (st == ST_SUBMITTED || st == ST_CANCELLED || st == ST_COMPLETED) &&
                deadline <= limit - tick)
            k += slot_journal_submit(s, h, producer, 0);
        if (st == ST_CANCELLED && !submit) {   /* link_records retires it on this record */
            jrec_cancelled(s->jb, h, s->jnow);
            k++;
        }
    }
    return k;
}

i64 slot_journal_pending(Seg *s, const i64 *handles, i64 n, i64 flags) {
    i64 *mem = s->mem, k = 0;
    if (!s->jb) return 0;
    s->jnow = jnow_us();
    for (i64 j = 0; j < n; j++) {
        i64 h = handles[j], slot = slot_of(s, h);
        if (slot < 0) continue;
        i64 node = wheel_node(mem, slot), gs = gs_load(gs_word(mem, node));
        if (GS_GEN(gs) != HANDLE_GEN(h) || GS_STATE(gs) != ST_PENDING) continue;
        k += slot_journal_submit(s, h, 0, flags);
    }
    return k;
}

i64 slot_journal_carry(Seg *s, i64 from) {
    i64 *mem = s->mem, cap = seg_capacity(s), k = 0;
    if (!s->jb || !s->anchor || from == s->jseq) return 0;
    s->jnow = jnow_us();
    for (i64 slot = 0; slot < cap; slot++) {
        if (s->anchor[slot] != from) continue;
        i64 node = wheel_node(mem, slot), gs = gs_load(gs_word(mem, node));
        i64 st = GS_STATE(gs);
        int live = st == ST_PENDING || st == ST_FIRING || st == ST_COMPLETED;
        if (!live || !slot_journal_submit(s, HANDLE_MAKE(GS_GEN(gs), slot), 0, J_FLAG_RECOVERED)) {
            anchor_move(s, slot, -1);   /* cancelled, stopping, unreadable: nothing to carry */
            continue;
        }
        k++;
    }
    return k;
}

void slot_journal_fired(Seg *s, i64 h) {
    i64 slot = HANDLE_SLOT(h), flags = META_FIELD(*side_meta(s, slot), FLAGS);
    if (flags & FLAG_OP) {   /* an operation: which of the two won */
        jrec_event(s->jb, (flags & FLAG_COMPLETED) ? J_COMPLETED : J_EXPIRED, h, s->jnow);
        return;
    }
    i64 period, run = slot_run(s, slot, &period);
    jrec_fired(s->jb, h, s->jnow, run, *wheel_field(s->mem, wheel_node(s->mem, slot),
                                                     F_DEADLINE));
}

i64 slot_journal_settled(Seg *s, const i64 *results, i64 n) {
    i64 *mem = s->mem, k = 0;
    if (!s->jb) return 0;
    s->jnow = jnow_us();
    for (i64 j = 0; j < n; j++) {
        const i64 *r = &results[RESULT_RECORD * j];
        i64 h = r[RR_HANDLE], outcome = r[RR_OUTCOME], took = r[RR_DURATION_US];
        i64 slot = slot_of(s, h);
        if (slot < 0) continue;
        i64 node = wheel_node(mem, slot), gs = gs_load(gs_word(mem, node));
        i64 st = GS_STATE(gs);
        if (GS_GEN(gs) != HANDLE_GEN(h)) {   /* settled and freed: its run is gone */
            jrec_outcome(s->jb, h, s->jnow, 0, outcome, took, -1);
            k++;
        } else if (st == ST_PENDING || st == ST_CANCELLED) {   /* settled and re-armed */
            i64 period, run = slot_run(s, slot, &period);
            jrec_outcome(s->jb, h, s->jnow, run - 1, outcome, took,
                         dl_load(wheel_field(mem, node, F_DEADLINE)));   /* a reset's */
            k++;
        }
    }
    return k;
}
