/* slots.h: the state machine of one timer slot across processes, in one place.
 *
 *   FREE --reserve (lock)--> RESERVED --client writes its record--> SUBMITTED
 *   SUBMITTED --coordinator links (lock, CAS)--> PENDING
 *   PENDING --reaper fires (lock, CAS)--> FIRING --outcome, one-shot (lock)--> FREE
 *   FIRING --outcome of a repeating timer (lock, CAS)--> PENDING (same handle)
 *   PENDING | SUBMITTED --cancel (no lock, CAS)--> CANCELLED --retire (lock)--> FREE
 *   FIRING --cancel (no lock, CAS)--> STOPPING --outcome (lock)--> FREE
 *   RESERVED | SUBMITTED of a dead client --reclaim (lock)--> FREE
 *
 * The one-winner rule: a cancel and a fire both leave PENDING by a compare-and-swap on the
 * slot's state word, so exactly one of them wins, in whatever processes they run; a cancel
 * returns CANCEL_WON iff it won, and then the task never runs (Kafka's forceComplete).
 * Freeing (state FREE, generation + 1) happens only under the segment lock, by the
 * coordinator or the reaper, never by a client: a cancelled slot stays CANCELLED until the
 * coordinator drains the cancel record its client published (or the reaper meets it in a
 * bucket), so the bucket links are only ever changed under the lock.
 *
 * A free under the lock is a plain release store, not a CAS: the only lock-free writer,
 * a cancel, acts on PENDING, SUBMITTED and FIRING; freeing FIRING races at most a cancel
 * turning it into STOPPING, which also ends in FREE, and freeing SUBMITTED happens only
 * for a dead client's slot (a racing cancel that wins is right: the task never runs).
 *
 * Nothing read from shared memory is trusted: every handle, index and generation is
 * bounds-checked; a record that fails a check is counted and skipped.
 */
#ifndef SHMWHEEL_SLOTS_H
#define SHMWHEEL_SLOTS_H

#include "contract.h"

/* One attachment's view of a service's tables (pointers into the segment). */
typedef struct {
    i64 *mem;    /* the wheel array (contract.h header + nodes) */
    i64 *side;   /* SIDE_WORDS per slot */
    i64 *arena;  /* class headers, then each class's next and owner tables */
    i64 *adata;  /* the blocks */
    i64 retired; /* cancelled slots this attachment retired walking the wheel or in a
                    rebuild, not yet added to a counter row (Tables.take_retired) */
} Seg;

static inline i64 seg_capacity(const Seg *s) { return s->mem[H_CAPACITY]; }
static inline i64 *side_meta(Seg *s, i64 slot) { return &s->side[slot * SIDE_WORDS + S_META]; }
static inline i64 *side_payload(Seg *s, i64 slot) {
    return &s->side[slot * SIDE_WORDS + S_PAYLOAD];
}
static inline i64 *arena_owner(Seg *s, int cls, i64 block) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    return &s->arena[h[A_OFF_OWNER] + block];
}
/* words of a block of class cls */
static inline i64 *arena_block(Seg *s, int cls, i64 block) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    return &s->adata[h[A_DATA] + block * h[A_BLOCK_WORDS]];
}

/* -- lock-free, any process -- */
int slot_cancel(Seg *s, i64 handle);          /* CANCEL_WON / CANCEL_STOPPED / CANCEL_LOST */

/* -- under the segment lock -- */
i64 slot_reserve(Seg *s, i64 ring, i64 *out, i64 n);        /* FREE -> RESERVED; count */
i64 arena_reserve(Seg *s, int cls, i64 ring, i64 *out, i64 n); /* blocks for ring's cache */
i64 arena_alloc(Seg *s, int cls, i64 slot);   /* a block owned by slot, or -1 */
void arena_release(Seg *s, int cls, i64 block);
void slot_free_payload(Seg *s, i64 slot);     /* return the slot's block; meta = its ring */
void slot_retire(Seg *s, i64 *mem, i64 slot); /* free payload, then the slot (unlinked) */
/* Apply n producer records of `ring`. res: [0] linked, [1] stale, [2] garbage,
 * [3] earliest deadline linked (min with its input), [4] cancelled slots retired. */
void slot_link_records(Seg *s, const i64 *recs, i64 n, i64 ring, i64 *res);
/* Apply n executor outcomes. res: [0] freed, [1] re-armed. */
void slot_settle(Seg *s, const i64 *results, i64 n, i64 *res);
i64 slot_reclaim(Seg *s, i64 ring);           /* a dead or closed client's slots and blocks */
i64 slot_rebuild(Seg *s);                     /* crash repair: the states are the truth */
/* the wheel's walk met a CANCELLED node (wheel_retire_fn; ctx is a Seg *) */
void slot_retire_hook(void *ctx, i64 *mem, i64 slot);

/* The period of a repeating timer (0 for a one-shot or a bad block reference) and, if
 * runs is not NULL, where its run count lives. */
i64 slot_repeat(Seg *s, i64 slot, i64 **runs);

#endif
