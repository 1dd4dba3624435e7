/* purgatory.c: Kafka's DelayedOperationPurgatory across processes (the watch lists, an
 * operation's count, completion, purge); and, in its theory of operation, how an outcome
 * reaches a client that waits for it (the code of that is waiters.c).
 *
 * Theory of operation
 * -------------------
 * An operation is a timer slot (flag FLAG_OP): its deadline is its timeout, its task its
 * on_expire task, and its arena block starts with OP_HEADER (required amount, on_complete
 * task, key count; then its count) before msgpack [keys, payload]. So expiry is a fire,
 * exactly as for a timer: the reaper's advance takes PENDING -> FIRING by CAS. Completion
 * is the other CAS out of PENDING, to COMPLETED, made by whichever client's
 * check_and_complete brings the operation's count to its required amount. A cancel is the
 * third (PENDING -> CANCELLED, lock-free, slots.c). The state word decides: exactly one of
 * completed, expired, cancelled, in whatever processes they race (Kafka's forceComplete).
 *
 * Ground rules: everything here runs under the segment lock (the watcher's watch, every
 * check_and_complete, the reaper's purge step, a crash repair), so the watch lists, the
 * operations' counts and the bucket links are plain words. Only the state word is shared
 * with lock-free writers (a cancel), hence the CAS into COMPLETED. A completed operation
 * is unlinked from its bucket and relinked into the current level-0 bucket, still
 * COMPLETED; the reaper's next advance meets it there and makes it FIRING with its
 * on_complete task (slot_retire_hook). Until then nothing else can move it: cancel acts on
 * PENDING, SUBMITTED and FIRING only.
 *
 * The count: memory for the purgatory only where it is used. An operation's count (the
 * amount signalled to it so far) is word OPH_COUNT of its block header, which only
 * operations have; op_store zeroes it as it stores the block. Each watch entry names its
 * operation's block (WE_BLOCK), so a signal finds the count without the slot's side
 * record, which a RESERVED operation's client is still writing lock-free. A block is its
 * operation's from op_store until the slot is freed (the free returns it), so an entry
 * whose operation is live (op_live: its generation, not ended) names a block that is
 * still the operation's; the owner word is checked all the same.
 *
 * Amounts signalled while the operation is not yet linked are counted. A SUBMITTED
 * operation (published, not yet drained) that reaches its amount is completed at once by
 * CAS and stays unlinked: the coordinator links it into the current bucket when it drains
 * its submit record, after recording it. A RESERVED one (its watcher is still writing it,
 * and will store SUBMITTED without a CAS) is left alone: the coordinator completes it as
 * it links it (op_complete_if_ready). Both sides hold the lock, so no signal is missed.
 *
 * Purge (KAFKA-19763, KAFKA-19389: watch lists that grow with completed operations): an
 * entry is dead once its operation can no longer complete (generation moved on, or state
 * COMPLETED / FIRING / STOPPING / CANCELLED). Dead entries are unlinked wherever a walk
 * meets them: each signal purges the chain it walks, the reaper purges a bounded number of
 * chains per loop, and a watch that finds too few free entries purges everything first.
 * The table is a fixed region, so memory never grows; a full table of live entries is
 * Full, at the API.
 *
 * Outcomes (waiters.c), with nothing per slot beyond its 48 bytes. Most timers are never
 * waited for; the memory for waiting is a table sized by how many handles may be awaited
 * at once, found by handle (the waiter table: contract.h WAIT_*), plus each client's
 * outcome ring. A waiting client claims an entry in one of its handle's two buckets
 * (lock-free: CAS of an empty key), writes its ring into the entry's value and publishes
 * the handle in its key; it empties the entry once it knows the outcome (and the
 * coordinator empties a dead or closed client's entries as it reclaims its ring). The
 * freer of a slot (slot_finish, under the lock) writes the use's outcome into the slot's
 * payload word (a free slot has no payload), frees the slot, then looks in the handle's
 * two buckets: into every entry that waits for that handle it writes the outcome and marks
 * it done, and pushes (handle, code) on that client's outcome ring, ringing its bell (a
 * futex word) if its listener sleeps. The argument, step by step:
 *
 *  1. No lost wake-up: the store-buffering pattern. The client stores its key (seq_cst),
 *     then loads the slot's state word (seq_cst); the freer frees (a release store), then
 *     a seq_cst fence, then loads the keys. By C11's rules for seq_cst fences, one of the
 *     two sees the other: if the freer's load of the client's entry read a value older
 *     than the client's key (empty, claimed, another handle's), the fence precedes that
 *     store in the single total order S, so the client's seq_cst load, after its store in
 *     S, sees the free (a store sequenced before a seq_cst fence is seen by every seq_cst
 *     load after the fence in S). So either the freer finds the entry (the client is told),
 *     or the client sees the slot freed and reads the outcome from it (5). Both may
 *     happen: the client takes the first and drops the other. (The plain build of
 *     tests/tsan catches a freer without the fence on x86-64; ThreadSanitizer does not
 *     model fences.)
 *  2. The client writes its ring into the value before it publishes the key (a seq_cst
 *     store, so a release); the freer loads the key with acquire, so it reads that ring.
 *  3. Entries are reused. A freer that read a key before its client emptied the entry (a
 *     "stray" freer) writes the value by CAS from the value it read: a client that claimed
 *     the entry since stored a fresh value, so the CAS fails, or, the same client storing
 *     the same ring, succeeds with no harm: the value's outcome counts only once the key
 *     is done, and the freer's CAS of the key (from its own handle's key) fails unless the
 *     entry waits for that very handle again, whose outcome it then is. Freers hold the
 *     segment lock, so a stray freer's writes come before the next freer's, never after.
 *  4. Done: the freer's CAS of the key to done is a release, after the value; the client
 *     loads the key with acquire and then reads the value (plainly: nothing writes a done
 *     entry's value until its client empties it; ThreadSanitizer checks this order, tests/
 *     tsan notify). Only then is the record pushed: a full outcome ring drops it (counted)
 *     and the client rechecks its entries, so an outcome that reached an entry is never
 *     lost, whatever the ring.
 *  5. A late ask (after the free, in S): the slot's payload word holds the outcome from
 *     the free until the slot's next client writes its own payload there, after reserving
 *     it. The reader loads the state word (acquire: FREE, a later generation), the payload
 *     word (acquire: slot_write stores it with release), then the state word again:
 *     unchanged, the word was the outcome (its generation is checked too). A freer does
 *     all its work (outcome, free, entries, done) in one hold of the lock, and a slot is
 *     reserved only under the lock, so a reader that finds the slot reserved again (its
 *     state word or its next client's payload, both acquired) also sees a done entry the
 *     freer wrote for it: outcome_state reads the slot first, then the entry.
 *  6. Most timers are never waited for, so a freer first reads a count of the asks under
 *     way (WA_WAITING) and looks in no bucket when it is 0. A client adds 1 (seq_cst)
 *     before it claims an entry, and subtracts 1 after it empties it (or after a claim
 *     that failed; the coordinator does it for a dead client's entry it empties), so the
 *     count is never below the entries claimed. The freer reads the count after its
 *     fence (1). If that read is coherence-ordered before a client's add, the fence
 *     precedes the add in S, so the client's seq_cst load of the state word, after the add
 *     in S, sees the free: the client reads the outcome from the slot (5). If the read
 *     follows the add, the count is 0 only once that client's subtraction came too, i.e.
 *     it emptied its entry and waits no more. A dead client may leave the count high:
 *     freers then look in the buckets, slower, as without it.
 *
 * What a handle learns, so: asked before its use ended (in S), its outcome, always (an
 * entry, or the slot); asked after, the outcome while its slot is still free, and "no
 * longer known" once the slot is reserved again (slots are reused most recently freed
 * first). A full pair of buckets refuses the ask at once (Full at the API): nothing is
 * claimed and nothing waits. The rings are pushed only by freers under the lock, so a
 * ring's head has one writer at a time.
 */
#include <stdint.h>
#include <string.h>

#include "atomics.h"
#include "slots.h"
#include "wheel.h"

/* ---- keys ------------------------------------------------------------------------ */
u64 key_hash_step(u64 h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ULL;   /* FNV-1a */
    return h;
}

i64 key_hash_end(u64 h) {
    h ^= h >> 33;                                  /* murmur3's finaliser, so that every */
    h *= 0xFF51AFD7ED558CCDULL;                    /* bit of the key reaches the bucket  */
    h ^= h >> 33;                                  /* index (low bits)                   */
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return (i64)h;
}

/* ---- the table --------------------------------------------------------------------- */
static inline i64 *wt_head(Seg *s, i64 key) {
    i64 nb = s->watch[WT_NBUCKETS];
    return &s->watch[WT_HEADER + (i64)((u64)key % (u64)nb)];
}
static inline i64 *wt_entry(Seg *s, i64 e) {
    return &s->watch[WT_HEADER + s->watch[WT_NBUCKETS] + e * WE_WORDS];
}

void watch_format(Seg *s, i64 nbuckets, i64 capacity) {
    i64 *wt = s->watch;
    wt[WT_NBUCKETS] = nbuckets;
    wt[WT_CAPACITY] = capacity;
    wt[WT_USED] = 0;
    wt[WT_CURSOR] = 0;
    wt[WT_PURGED] = 0;
    for (i64 b = 0; b < nbuckets; b++) wt[WT_HEADER + b] = -1;
    wt[WT_FREE] = -1;
    for (i64 e = capacity - 1; e >= 0; e--) {   /* entry 0 on top */
        i64 *E = wt_entry(s, e);
        E[WE_HANDLE] = -1;
        E[WE_NEXT] = wt[WT_FREE];
        wt[WT_FREE] = e;
    }
}

static void entry_free(Seg *s, i64 e) {
    i64 *E = wt_entry(s, e);
    E[WE_HANDLE] = -1;
    E[WE_NEXT] = s->watch[WT_FREE];
    s->watch[WT_FREE] = e;
    s->watch[WT_USED]--;
}

/* The state word of the operation a handle names if it can still complete (RESERVED,
 * SUBMITTED or PENDING, that generation); else -1. */
static i64 op_live(Seg *s, i64 h) {
    i64 slot = HANDLE_SLOT(h);
    if (h < 0 || slot >= seg_capacity(s)) return -1;
    i64 gs = gs_load(gs_word(s->mem, wheel_node(s->mem, slot)));
    i64 st = GS_STATE(gs);
    if (GS_GEN(gs) != HANDLE_GEN(h)) return -1;
    return (st == ST_RESERVED || st == ST_SUBMITTED || st == ST_PENDING) ? gs : -1;
}

/* ---- an operation's block and count ------------------------------------------------- */
/* The header of the block `where` (class << 32 | block) if it is still slot's; else NULL.
 * relaxed: clients write the owner words of their cached blocks lock-free (slot_write). */
static i64 *op_block(Seg *s, i64 slot, i64 where) {
    i64 c = BLOCK_REF_CLASS(where), b = BLOCK_REF_INDEX(where);
    if (where < 0 || c >= ARENA_CLASSES || b >= s->arena[c * A_CLASS_WORDS + A_NBLOCKS] ||
            relaxed_load(arena_owner(s, (int)c, b)) != OWNER_SLOT(slot))
        return NULL;
    return arena_block(s, (int)c, b);
}

/* Where a linked (or installed) operation's block is, from its side record: class << 32
 * | block, or -1 if the slot is not an operation with a block that checks out. */
static i64 op_where(Seg *s, i64 slot) {
    int c;
    if (!(META_FIELD(relaxed_load(side_meta(s, slot)), FLAGS) & FLAG_OP)) return -1;
    i64 b = slot_block(s, slot, &c);
    return b < 0 ? -1 : BLOCK_REF_MAKE(c, b);
}

/* Complete a PENDING or SUBMITTED operation (state word `gs`): the CAS against a
 * lock-free cancel (and, for SUBMITTED, the coordinator's link). A PENDING one moves into
 * the current bucket for the reaper; a SUBMITTED one stays unlinked until the coordinator
 * drains its submit record, records it (WATCHED) and links it: so the journal never holds
 * an outcome before its operation. 0 if a cancel won. */
static int complete(Seg *s, i64 slot, i64 gs) {
    i64 *mem = s->mem, node = wheel_node(mem, slot);
    if (!slot_move(gs_word(mem, node), gs, GS_MAKE(GS_GEN(gs), ST_COMPLETED), TR_COMPLETE))
        return 0;
    if (GS_STATE(gs) == ST_PENDING) {
        wheel_unlink(mem, node);
        wheel_link(mem, node, mem[H_NOW]);   /* already due: the current level-0 bucket */
    }
    return 1;
}

int op_complete_if_ready(Seg *s, i64 slot) {
    i64 gs = gs_load(gs_word(s->mem, wheel_node(s->mem, slot)));
    if (GS_STATE(gs) != ST_PENDING || !s->watch) return 0;
    i64 *hdr = op_block(s, slot, op_where(s, slot));
    return hdr && hdr[OPH_COUNT] >= OPH_REQUIRED(hdr[OH_OPH]) && complete(s, slot, gs);
}

/* ---- the watch lists ---------------------------------------------------------------- */
/* Unlink the dead entries of one chain; returns how many were freed. */
static i64 purge_chain(Seg *s, i64 *link) {
    i64 e, freed = 0, guard = s->watch[WT_CAPACITY];
    while ((e = *link) >= 0 && guard-- > 0) {
        i64 *E = wt_entry(s, e);
        if (op_live(s, E[WE_HANDLE]) < 0) {
            *link = E[WE_NEXT];
            entry_free(s, e);
            freed++;
        } else {
            link = &E[WE_NEXT];
        }
    }
    return freed;
}

i64 watch_purge(Seg *s, i64 budget) {
    i64 nb = s->watch[WT_NBUCKETS], freed = 0;
    if (budget > nb) budget = nb;
    for (i64 i = 0; i < budget; i++) {
        i64 b = s->watch[WT_CURSOR];
        freed += purge_chain(s, &s->watch[WT_HEADER + b]);
        s->watch[WT_CURSOR] = (b + 1) % nb;
    }
    s->watch[WT_PURGED] += freed;
    return freed;
}

/* Room for n entries, after a full purge if need be. */
static int watch_room(Seg *s, i64 n) {
    i64 *wt = s->watch;
    if (wt[WT_CAPACITY] - wt[WT_USED] < n) watch_purge(s, wt[WT_NBUCKETS]);
    return wt[WT_CAPACITY] - wt[WT_USED] >= n;
}

/* Entries for operation h (its block at `where`) on n keys; the caller made room. */
static void watch_link(Seg *s, i64 h, i64 where, const i64 *keys, i64 n) {
    i64 *wt = s->watch;
    for (i64 k = 0; k < n; k++) {
        i64 e = wt[WT_FREE], *E = wt_entry(s, e), *head = wt_head(s, keys[k]);
        wt[WT_FREE] = E[WE_NEXT];
        E[WE_KEY] = keys[k];
        E[WE_HANDLE] = h;
        E[WE_BLOCK] = where;
        E[WE_NEXT] = *head;
        *head = e;
        wt[WT_USED]++;
    }
}

i64 watch_add(Seg *s, i64 h, const i64 *keys, i64 n) {
    i64 where = op_where(s, HANDLE_SLOT(h));
    if (where < 0) return -2;
    if (!watch_room(s, n)) return -1;
    watch_link(s, h, where, keys, n);
    return n;
}

i64 op_store(Seg *s, i64 h, const void *data, i64 len, const i64 *keys, i64 n) {
    i64 slot = HANDLE_SLOT(h);
    if (!watch_room(s, n)) return -1;
    for (int c = 0; c < ARENA_CLASSES; c++) {   /* the smallest class with a free block */
        if (len > ARENA_CLASS_BYTES(c)) continue;
        i64 b = arena_alloc(s, c, slot);
        if (b < 0) continue;
        i64 *hdr = arena_block(s, c, b), where = BLOCK_REF_MAKE(c, b);
        memcpy(hdr, data, (size_t)len);
        hdr[OPH_COUNT] = 0;   /* nothing signalled yet, whatever the caller wrote */
        watch_link(s, h, where, keys, n);
        return where;
    }
    return -2;
}

i64 watch_signal(Seg *s, i64 key, i64 amount) {
    i64 *link = wt_head(s, key), e, done = 0, freed = 0, guard = s->watch[WT_CAPACITY];
    while ((e = *link) >= 0 && guard-- > 0) {
        i64 *E = wt_entry(s, e), h = E[WE_HANDLE], gs = op_live(s, h);
        if (gs < 0) {   /* its operation finished: purge the entry */
            *link = E[WE_NEXT];
            entry_free(s, e);
            freed++;
            continue;
        }
        link = &E[WE_NEXT];
        if (E[WE_KEY] != key) continue;   /* another key in the same chain */
        i64 slot = HANDLE_SLOT(h), *hdr = op_block(s, slot, E[WE_BLOCK]);
        if (!hdr) continue;   /* cannot be: a live operation's entry names its block */
        i64 count = hdr[OPH_COUNT] + amount;
        if (count > OP_MAX_AMOUNT) count = OP_MAX_AMOUNT;
        hdr[OPH_COUNT] = count;
        i64 st = GS_STATE(gs);
        if ((st == ST_PENDING || st == ST_SUBMITTED) && count >= OPH_REQUIRED(hdr[OH_OPH]) &&
                complete(s, slot, gs))
            done++;
    }
    s->watch[WT_PURGED] += freed;
    return done;
}

void watch_rebuild(Seg *s) {
    i64 *wt = s->watch, nb = wt[WT_NBUCKETS], cap = wt[WT_CAPACITY];
    for (i64 b = 0; b < nb; b++) wt[WT_HEADER + b] = -1;
    wt[WT_FREE] = -1;
    wt[WT_USED] = 0;
    for (i64 e = cap - 1; e >= 0; e--) {
        i64 *E = wt_entry(s, e);
        if (op_live(s, E[WE_HANDLE]) >= 0) {
            i64 *head = wt_head(s, E[WE_KEY]);
            E[WE_NEXT] = *head;
            *head = e;
            wt[WT_USED]++;
        } else {
            E[WE_HANDLE] = -1;
            E[WE_NEXT] = wt[WT_FREE];
            wt[WT_FREE] = e;
        }
    }
}
