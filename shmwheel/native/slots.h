/* slots.h: the state machine of one timer slot across processes, in one place.
 *
 *   FREE --reserve (lock)--> RESERVED --client writes its record--> SUBMITTED
 *   SUBMITTED --coordinator links (lock, CAS)--> PENDING
 *   PENDING --reaper fires (lock, CAS)--> FIRING --outcome, one-shot (lock)--> FREE
 *   FIRING --outcome of a repeating timer (lock, CAS)--> PENDING (same handle)
 *   PENDING | SUBMITTED --cancel (no lock, CAS)--> CANCELLED --retire (lock)--> FREE
 *   (a CANCELLED slot whose submit record arrives is linked as it is; its cancel record,
 *   or the reaper's walk, retires it)
 *   FIRING --cancel (no lock, CAS)--> STOPPING --outcome (lock)--> FREE
 *   PENDING --an operation's completion (lock, CAS)--> COMPLETED --reaper (lock)--> FIRING
 *   (an operation: FLAG_OP; its expiry is the reaper's fire; purgatory.c)
 *   RESERVED | SUBMITTED of a dead client --reclaim (lock)--> FREE
 *   SUBMITTED --its client takes back a slot it could not publish (CAS)--> RESERVED
 *   PENDING | SUBMITTED --reset (no lock, CAS)--> RESETTING --reset's CAS--> the same
 *     state, reset sequence + 1 (the new deadline written between the two)
 *   RESETTING (from SUBMITTED) --coordinator links (lock, CAS)--> RESETTING (from PENDING)
 *   RESETTING --cancel (no lock, CAS)--> CANCELLED (the reset then returns LOST)
 *   RESETTING of a dead client's reset --reclaim (lock, CAS)--> the state it came from
 *   SUBMITTED --an operation's completion before its link (lock, CAS)--> COMPLETED
 *
 * The reset rule: the reaper fires a PENDING node only by a CAS from the word it read
 * before it read the deadline, and only if that deadline is due; every reset bumps the
 * word's sequence, so a fire decided on an old deadline fails its CAS and decides again.
 * A RESETTING node the reaper meets waits in the next tick's bucket. A reset never
 * relinks (it has no lock): a later deadline is re-placed by advance when the old bucket
 * expires; the reset's ring record has the coordinator relink it (an earlier deadline
 * must not wait for its old bucket) and journal it (SCHEDULED, J_FLAG_RESET).
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
 * The journal: an attachment with a journal buffer (Seg.jb: the coordinator's, the
 * reaper's) records each lifecycle event where it is decided here: the coordinator
 * records SCHEDULED and CANCELLED ahead of applying its ring's records
 * (slot_journal_records); the reaper records FIRED when advance wins a slot, OUTCOME when
 * an outcome is settled, and CANCELLED when its walk retires a cancelled slot. A crash repair (rebuild) may run in
 * any process, a client's too, so it frees no cancelled slot: it relinks it for one of
 * those two to retire and record.
 *
 * Nothing read from shared memory is trusted: every handle, index and generation is
 * bounds-checked; a record that fails a check is counted and skipped.
 */
#ifndef SHMWHEEL_SLOTS_H
#define SHMWHEEL_SLOTS_H

#include "atomics.h"
#include "contract.h"
#include "journal.h"
#include "wheel.h"

/* One attachment's view of a service's tables (pointers into the segment). */
typedef struct {
    i64 *mem;    /* the wheel array (contract.h header + nodes) */
    i64 *side;   /* SIDE_WORDS per slot */
    i64 *arena;  /* class headers, then each class's next and owner tables */
    i64 *adata;  /* the blocks */
    i64 retired; /* cancelled slots this attachment retired walking the wheel, not yet
                    added to a counter row (Tables.take_retired) */
    JBuf *jb;    /* the journal's buffer of this process (coordinator, reaper), or NULL:
                    then the transitions below record their events in it */
    i64 jnow;    /* the time (monotonic us) the events of the current call carry */
    /* The journal's retention (set by Tables.set_anchors; NULL without a journal). Both
     * are in the segment and written only under the lock. */
    int32_t *anchor; /* per slot: the coordinator segment (its seq) holding the slot's
                        live SCHEDULED record, -1 when none */
    i64 *live;       /* JOURNAL_WINDOW counters: slots anchored in segment seq, at seq %
                        JOURNAL_WINDOW; a segment with none is no longer needed */
    i64 jseq;        /* the segment this attachment's SCHEDULED records go to */
    /* The purgatory and the outcomes (set by Tables.set_purgatory; NULL before). All are
     * in the segment. Nothing of them is per slot: an operation's count is in its arena
     * block, a slot's last outcome in its payload word while it is free (purgatory.c). */
    i64 *watch;      /* the watch lists (contract.h WT_* / WE_*); under the lock */
    i64 *waiters;    /* the waiter table (contract.h WAIT_* / WK_* / WV_*; waiters.c) */
    i64 waiters_words;   /* the region's length (checked by Tables.waiters_format) */
    i64 *outq;       /* nrings outcome rings of outq_cap OUTQ_RECORD records, back to back */
    i64 outq_cap, nrings;
    i64 expired;     /* operations this attachment's advance took at their timeout, not yet
                        added to a counter row (Tables.take_expired) */
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
/* Move a PENDING or SUBMITTED timer's deadline (a client's `ring`): RESET_WON iff it will
 * run at `deadline` (checked in range by the caller) and not at its old one; the caller
 * then publishes (h, h ^ CHECK_RESET). RESET_LOST, RESET_NOT_TIMER, RESET_BUSY. */
int slot_reset(Seg *s, i64 handle, i64 deadline, i64 ring);
/* slot_reset's two halves (tests interleave other steps between them): hold the slot
 * RESETTING and write the deadline (RESET_WON with the word it held in *held; RESET_BUSY
 * at once if another reset holds it), then put it back (RESET_WON, or RESET_LOST if a
 * cancel won it meanwhile) */
int slot_reset_hold(Seg *s, i64 handle, i64 deadline, i64 ring, i64 *held);
int slot_reset_put_back(Seg *s, i64 handle, i64 ring, i64 held);
/* The outcomes (waiters.c; purgatory.c has the ordering argument). outcome_watch: a
 * client (its ring >= 0) that asks about handle h claims a waiter entry for it; *gs is the
 * slot's state word, *out h's outcome (OUT_MAKE) if it ended and is still known, else 0.
 * Returns the entry while h's use is not over (the client empties it once it knows the
 * outcome: waiter_release), -1 when there is nothing to wait for (ended, or ring < 0),
 * -2 when h's buckets are full (nothing claimed). outcome_state reads the same for a
 * handle the client waits for in entry e (or e = -1). slot_outcome: h's outcome from its
 * free slot's payload word, or 0. */
i64 outcome_watch(Seg *s, i64 h, i64 ring, i64 *gs, i64 *out);
void outcome_state(Seg *s, i64 h, i64 e, i64 *gs, i64 *out);
void waiter_release(Seg *s, i64 e, i64 h);
i64 slot_outcome(Seg *s, i64 h);
i64 waiter_outcome(Seg *s, i64 e, i64 h);     /* what h's freer wrote in entry e, or 0 */
/* The listener of an outcome ring (its words): announce the sleep, and wait on the bell
 * up to timeout_s unless records are waiting; returns whether they were. */
int outq_wait(i64 *words, double timeout_s);
void outq_ring(i64 *words);                   /* wake that listener */

/* -- under the segment lock -- */
i64 slot_reserve(Seg *s, i64 ring, i64 *out, i64 n);        /* FREE -> RESERVED; count */
i64 arena_reserve(Seg *s, int cls, i64 ring, i64 *out, i64 n); /* blocks for ring's cache */
i64 arena_alloc(Seg *s, int cls, i64 slot);   /* a block owned by slot, or -1 */
void arena_release(Seg *s, int cls, i64 block);
void slot_free_payload(Seg *s, i64 slot);     /* return the slot's block; meta = its ring */
i64 slot_block(Seg *s, i64 slot, int *cls);   /* the slot's own arena block, or -1 */
/* A linked slot whose deadline a reset moved: into the bucket of that deadline; returns
 * it (NEVER for a slot not linked, which is left alone) */
i64 slot_relink(Seg *s, i64 slot);
/* free payload, then the slot (unlinked); tr: FINISH or RECLAIM (contract.h).
 * slot_retire_ended leaves outcome `code` (OC_*) in the freed slot's payload word for late
 * askers (waiters.c); slot_retire leaves OC_NONE. */
void slot_retire(Seg *s, i64 *mem, i64 slot, int tr);
void slot_retire_ended(Seg *s, i64 *mem, i64 slot, int tr, i64 code);
/* The coordinator's write-ahead records for n producer records, before link_records
 * applies them: SCHEDULED for a submit record whose slot is still SUBMITTED (or
 * CANCELLED) with its generation, CANCELLED for a cancel record whose slot is CANCELLED
 * (link_records retires a cancelled slot only on its cancel record, which exists only
 * once the cancel has won, so the record is never missed). The caller writes them to its file before
 * linking, so the journal holds every timer before it can fire and every cancel before
 * its slot is freed. A coordinator that re-reads its ring after a crash may record an
 * event twice: readers take the records of an id as one. Returns the count. */
i64 slot_journal_records(Seg *s, const i64 *recs, i64 n, i64 producer);
/* After a reaper restart, the OUTCOME records of result records its predecessor settled
 * but did not get to write (it writes before consuming, so they are still in the ring):
 * a freed slot's run is no longer known and is recorded as 0. Returns the count. */
i64 slot_journal_settled(Seg *s, const i64 *results, i64 n);
/* SCHEDULED or WATCHED for handle h, its anchor moved to s->jseq: 1, or 0 if its blob is
 * unreadable (slots_journal.c; slots.c's reclaim uses it too) */
int slot_journal_submit(Seg *s, i64 h, i64 producer, i64 jflags);
/* SCHEDULED records (with `flags` added: J_FLAG_RECOVERED) for PENDING slots: what a
 * recovery re-armed, so that older segments are no longer needed. Returns the count. */
i64 slot_journal_pending(Seg *s, const i64 *handles, i64 n, i64 flags);
/* Retention: re-record (SCHEDULED, J_FLAG_RECOVERED) the PENDING and FIRING slots
 * anchored in segment `from` into segment s->jseq and move their anchors, so that `from`
 * holds nothing live; cancelled slots anchored there just drop their anchor (a cancelled
 * timer needs no record to stay cancelled). Returns the records written. */
i64 slot_journal_carry(Seg *s, i64 from);
/* A FIRED record for a slot advance just won (FIRING, generation stable). */
void slot_journal_fired(Seg *s, i64 handle);
/* Apply n producer records of `ring`; res: LINK_RESULT_WORDS counts (contract.h, LR_*:
 * linked, stale, garbage, the earliest deadline linked (min with its input), cancelled
 * slots retired). */
void slot_link_records(Seg *s, const i64 *recs, i64 n, i64 ring, i64 *res);
/* Apply n executor outcomes (with an OUTCOME record each); res: SETTLE_RESULT_WORDS
 * counts (SR_FREED, SR_REARMED). now_ms: the caller's monotonic clock (the wheel's may
 * lag it by a sleep): a repeating timer's next deadline is the first of its grid after
 * the later of the two, so periods that passed during its run are skipped. */
void slot_settle(Seg *s, const i64 *results, i64 n, i64 now_ms, i64 *res);
/* a dead or closed client's slots and blocks; `producer` is its pid (the ring table's
 * RT_PID), the producer field of what the reclaim journals */
i64 slot_reclaim(Seg *s, i64 ring, i64 producer);
i64 slot_rebuild(Seg *s);                     /* crash repair: the states are the truth;
                                                 cancelled slots are relinked, not freed */
/* A recovery, before any process attaches (slots_repair.c): every slot FREE at generation
 * gen (FORMAT); then each pending timer of the journal into its own slot, at its own
 * generation (FORMAT, then ARM): meta, payload word and deadline written before the state.
 * The caller then rebuilds (links them, threads the free stacks around them). install
 * returns -1 (nothing more written) at a handle whose slot is out of range or taken. */
void slot_format(Seg *s, i64 gen);
i64 slot_install(Seg *s, const i64 *handles, const i64 *deadlines, const i64 *metas,
                 const i64 *words, i64 n);
/* the wheel's walk met a CANCELLED node (freed: 0) or a COMPLETED one (made FIRING with
 * its on_complete task: 1); wheel_retire_fn, ctx is a Seg * */
int slot_retire_hook(void *ctx, i64 *mem, i64 slot);
/* Free a slot whose use ended with outcome `code` (OC_* of contract.h): the outcome in
 * its payload word, then the free, then the clients that wait for it (waiters.c). */
void slot_finish(Seg *s, i64 *mem, i64 slot, i64 code);

/* ---- the purgatory (purgatory.c), all under the segment lock -------------------------- */
/* a key's 64-bit id in the watch lists: FNV-1a over its msgpack bytes, fed in pieces
 * from KEY_HASH_START (key_hash_step), then mixed (key_hash_end) */
#define KEY_HASH_START 0xCBF29CE484222325ULL
u64 key_hash_step(u64 h, const void *p, size_t n);
i64 key_hash_end(u64 h);
void watch_format(Seg *s, i64 nbuckets, i64 capacity);
/* Watch the operation `h` (installed by a recovery: its side record names its block) on
 * n keys. All or none: -1 when the table has too few free entries even after a full
 * purge, -2 when h names no operation's block. */
i64 watch_add(Seg *s, i64 h, const i64 *keys, i64 n);
/* An operation's block (data: OP_HEADER then msgpack [keys, payload], len <= MAX_PAYLOAD;
 * its count starts at 0) and its watch entries, for the RESERVED handle h: class << 32 |
 * block; -1 when the watch lists are full, -2 when the arena has no block (nothing is
 * stored then: the caller retires the slot). */
i64 op_store(Seg *s, i64 h, const void *data, i64 len, const i64 *keys, i64 n);
/* Add `amount` to every live operation watching `key`; complete those reaching their
 * required amount (CAS PENDING -> COMPLETED, relinked into the current bucket). Entries of
 * finished operations met on the way are purged. Returns the operations completed. */
i64 watch_signal(Seg *s, i64 key, i64 amount);
i64 watch_purge(Seg *s, i64 budget);          /* purge step over budget buckets; freed */
void watch_rebuild(Seg *s);                   /* crash repair: chains from the entries */
void waiters_format(Seg *s, i64 nbuckets);     /* an empty waiter table (a new segment) */
void waiters_reclaim(Seg *s, i64 ring);        /* a dead or closed client's entries */
/* The coordinator linked operation `slot` (PENDING): complete it now if amounts signalled
 * before the link reach its required amount. 1 if it did. */
int op_complete_if_ready(Seg *s, i64 slot);

/* The period of a repeating timer (0 for a one-shot or a bad block reference) and, if
 * runs is not NULL, where its run count lives. */
i64 slot_repeat(Seg *s, i64 slot, i64 **runs);

/* ---- helpers of the slots*.c files and arena.c (not for other callers) ------------- */
static inline i64 *gs_of(Seg *s, i64 slot) { return gs_word(s->mem, wheel_node(s->mem, slot)); }
/* Retire a CANCELLED slot: its CANCELLED record first (the handle needs the generation
 * that retiring bumps), then slot_finish. */
void slot_retire_cancelled(Seg *s, i64 *mem, i64 slot);
/* A slot index a handle names, if in range; else -1. */
static inline i64 slot_of(const Seg *s, i64 h) {
    i64 slot = HANDLE_SLOT(h);
    return (h < 0 || slot >= seg_capacity(s)) ? -1 : slot;
}

/* move the slot's anchor to segment `seq` (-1: none), keeping the live counts */
static inline void anchor_move(Seg *s, i64 slot, i64 seq) {
    i64 a = s->anchor[slot];
    if (a == seq) return;
    if (a >= 0) s->live[a % JOURNAL_WINDOW]--;
    if (seq >= 0) s->live[seq % JOURNAL_WINDOW]++;
    s->anchor[slot] = (int32_t)seq;
}

#endif
