/* purgatory.c: Kafka's DelayedOperationPurgatory across processes, and the outcome
 * notifications that let a client wait for a timer or an operation.
 *
 * Theory of operation
 * -------------------
 * An operation is a timer slot (flag FLAG_OP): its deadline is its timeout, its task its
 * on_expire task, and its arena block starts with OP_HEADER (required amount, on_complete
 * task, key count) before msgpack [keys, payload]. So expiry is a fire, exactly as for a
 * timer: the reaper's advance takes PENDING -> FIRING by CAS. Completion is the other
 * CAS out of PENDING, to COMPLETED, made by whichever client's check_and_complete brings
 * the operation's count to its required amount. A cancel is the third (PENDING ->
 * CANCELLED, lock-free, slots.c). The state word decides: exactly one of completed,
 * expired, cancelled, in whatever processes they race (Kafka's forceComplete).
 *
 * Ground rules: everything here except outcome_watch runs under the segment lock (the
 * watcher's watch, every check_and_complete, the reaper's purge step, a crash repair), so
 * the watch lists, the per-slot counts (opc) and the bucket links are plain words. Only the
 * state word is shared with lock-free writers (a cancel), hence the CAS into COMPLETED. A
 * completed operation is unlinked from its bucket and relinked into the current level-0
 * bucket, still COMPLETED; the reaper's next advance meets it there and makes it FIRING
 * with its on_complete task (slot_retire_hook). Until then nothing else can move it:
 * cancel acts on PENDING, SUBMITTED and FIRING only.
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
 * Outcomes: slot_finish writes the slot's out word (generation, code) before freeing the
 * slot, then reads its notify word. A client that waits for a handle stores the notify
 * word, then reads the state word (outcome_watch). Store-then-load on both sides, with
 * seq_cst between (the client's store and load are seq_cst; the freer's free is a release
 * store followed by a seq_cst fence): by the C11 model at least one side sees the other's
 * store, so either the freer pushes the outcome on the client's outcome ring, or the
 * client sees the slot freed and reads the out word (written before the free, which its
 * acquire load of the state word orders). Both may happen: the client drops duplicates.
 * The client's store is a CAS made only while the slot is still the use it waits for, so
 * a late waiter of an ended use never overwrites the notify word of the next use's waiter.
 */
#define _GNU_SOURCE   /* syscall(2), struct timespec under -std=c11 */
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "ring.h"
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

/* An operation's required amount and on_complete task (its block header); 0 if the slot
 * is not an operation with a block that checks out. */
static int op_header(Seg *s, i64 slot, i64 *required, i64 *on_complete) {
    int c;
    if (!(META_FIELD(*side_meta(s, slot), FLAGS) & FLAG_OP)) return 0;
    i64 b = slot_block(s, slot, &c);
    if (b < 0) return 0;
    i64 w = arena_block(s, c, b)[OH_OPH];
    *required = OPH_REQUIRED(w);
    if (on_complete) *on_complete = OPH_TASK(w);
    return 1;
}

/* the amount signalled so far to this use of the slot */
static inline i64 op_count(Seg *s, i64 slot, i64 gen) {
    i64 c = s->opc[slot];
    return OPC_GEN(c) == gen ? OPC_AMOUNT(c) : 0;
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
    i64 gs = gs_load(gs_word(s->mem, wheel_node(s->mem, slot))), required;
    if (GS_STATE(gs) != ST_PENDING || !s->opc || !op_header(s, slot, &required, NULL)) return 0;
    return op_count(s, slot, GS_GEN(gs)) >= required && complete(s, slot, gs);
}

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

i64 watch_add(Seg *s, i64 h, const i64 *keys, i64 n) {
    i64 *wt = s->watch;
    if (wt[WT_CAPACITY] - wt[WT_USED] < n) watch_purge(s, wt[WT_NBUCKETS]);
    if (wt[WT_CAPACITY] - wt[WT_USED] < n) return -1;
    s->opc[HANDLE_SLOT(h)] = OPC_MAKE(HANDLE_GEN(h), 0);   /* nothing signalled yet */
    for (i64 k = 0; k < n; k++) {
        i64 e = wt[WT_FREE], *E = wt_entry(s, e), *head = wt_head(s, keys[k]);
        wt[WT_FREE] = E[WE_NEXT];
        E[WE_KEY] = keys[k];
        E[WE_HANDLE] = h;
        E[WE_NEXT] = *head;
        *head = e;
        wt[WT_USED]++;
    }
    return n;
}

i64 op_store(Seg *s, i64 h, const void *data, i64 len, const i64 *keys, i64 n) {
    i64 slot = HANDLE_SLOT(h);
    if (watch_add(s, h, keys, n) < 0) return -1;
    for (int c = 0; c < ARENA_CLASSES; c++) {   /* the smallest class with a free block */
        if (len > ARENA_CLASS_BYTES(c)) continue;
        i64 b = arena_alloc(s, c, slot);
        if (b < 0) continue;
        memcpy(arena_block(s, c, b), data, (size_t)len);
        return BLOCK_REF_MAKE(c, b);
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
        i64 slot = HANDLE_SLOT(h), gen = HANDLE_GEN(h), required;
        i64 count = op_count(s, slot, gen) + amount;
        if (count > OP_MAX_AMOUNT) count = OP_MAX_AMOUNT;
        s->opc[slot] = OPC_MAKE(gen, count);
        i64 st = GS_STATE(gs);
        if ((st == ST_PENDING || st == ST_SUBMITTED) && op_header(s, slot, &required, NULL) &&
                count >= required && complete(s, slot, gs))
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

/* ---- outcomes ---------------------------------------------------------------------- */
static void outq_push(Seg *s, i64 ring, i64 h, i64 code) {
    if (!s->outq || ring < 0 || ring >= s->nrings) return;
    Ring r = {s->outq + ring * (RING_HEADER_WORDS + s->outq_cap * OUTQ_RECORD), s->outq_cap,
              OUTQ_RECORD};
    i64 rec[OUTQ_RECORD];
    rec[OQ_HANDLE] = h;
    rec[OQ_CODE] = code;
    /* ring_push treats head as its own word: the freers all hold the segment lock */
    if (!ring_push(&r, rec, 1))
        relaxed_store(&r.w[OUTQ_DROPPED], relaxed_load(&r.w[OUTQ_DROPPED]) + 1);
    /* the listener's side: SLEEPING = 1 (seq_cst), then it re-reads head before waiting on
     * the bell; ours: head published, then SLEEPING read after a seq_cst fence. One of the
     * two sees the other, so a listener never sleeps through a record. */
    if (sleep_flag_after_publish(&r.w[OUTQ_SLEEPING])) outq_ring(r.w);
}

void outq_ring(i64 *words) {
    int32_t *bell = (int32_t *)&words[OUTQ_BELL];
    __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);   /* a waiter on the old value returns */
    syscall(SYS_futex, bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void slot_finish(Seg *s, i64 *mem, i64 slot, i64 code) {
    i64 gen = GS_GEN(gs_load(gs_word(mem, wheel_node(mem, slot))));
    /* release: a client that sees the slot freed (acquire) sees this word */
    if (s->out) __atomic_store_n(&s->out[slot], OUT_MAKE(gen, code), __ATOMIC_RELEASE);
    slot_retire(s, mem, slot, TR_FINISH);   /* the free: a release store of the state word */
    if (!s->notify) return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* the free before the notify word's load */
    i64 nt = __atomic_load_n(&s->notify[slot], __ATOMIC_RELAXED);
    if (nt && NT_GEN(nt) == gen) outq_push(s, NT_RING(nt), HANDLE_MAKE(gen, slot), code);
}

void outcome_watch(Seg *s, i64 h, i64 ring, i64 *gs, i64 *out) {
    i64 slot = HANDLE_SLOT(h), gen = HANDLE_GEN(h);
    i64 *w = gs_word(s->mem, wheel_node(s->mem, slot)), *nt = &s->notify[slot];
    if (ring >= 0) {
        /* Store only while the slot is still this use, and by CAS: a waiter of an ended
         * use must not overwrite the notify word of the slot's next use (its waiter would
         * not be told; tests/tsan's notify scenario found that). A value read from a
         * later use's waiter synchronizes with it, so the generation check after it sees
         * the free that preceded it, and we stop. seq_cst CAS, then seq_cst load: see the
         * header comment. */
        i64 cur = __atomic_load_n(nt, __ATOMIC_SEQ_CST), want = NT_MAKE(gen, ring);
        while (GS_GEN(__atomic_load_n(w, __ATOMIC_SEQ_CST)) == gen &&
               !__atomic_compare_exchange_n(nt, &cur, want, 0, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST)) {}
    }
    *gs = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    *out = __atomic_load_n(&s->out[slot], __ATOMIC_ACQUIRE);
}

int outq_wait(i64 *words, double timeout_s) {
    int32_t *bell = (int32_t *)&words[OUTQ_BELL];
    __atomic_store_n(&words[OUTQ_SLEEPING], 1, __ATOMIC_SEQ_CST);
    int32_t v = __atomic_load_n(bell, __ATOMIC_SEQ_CST);
    int more = __atomic_load_n(&words[RING_HEAD], __ATOMIC_SEQ_CST) !=
               __atomic_load_n(&words[RING_TAIL], __ATOMIC_RELAXED);
    if (!more && timeout_s > 0) {
        struct timespec ts = {(time_t)timeout_s,
                              (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
        syscall(SYS_futex, bell, FUTEX_WAIT, v, &ts, NULL, 0);
    }
    __atomic_store_n(&words[OUTQ_SLEEPING], 0, __ATOMIC_RELAXED);
    return more;
}
