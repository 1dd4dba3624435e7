/* atomics.h: every cross-process memory access of shmwheel that is not protected by the
 * segment lock goes through one of these, so the memory-ordering argument is made once,
 * here, and each call site names which guarantee it relies on.
 *
 * Ground rules (who may touch what, and how):
 *
 *  - Words written under the segment lock (bucket links, bitmaps, H_NOW, H_FREE,
 *    H_PENDING, the arena free stacks) are plain loads and stores: flock() is a system
 *    call, and taking and dropping it orders everything inside it for the next holder.
 *
 *  - A slot's state word (F_GS) is written by several processes without the lock (a
 *    client's cancel or reset, the reaper's fire, the coordinator's link), so it is read
 *    with gs_load (acquire) and written only by slot_move, with the atomic its row of the
 *    transition table names (contract.h): a CAS that wins is acq_rel, a store is release.
 *
 *  - A ring's head is written only by its producer, its tail only by its consumer. The
 *    producer writes a record with plain stores, then publishes with a release store of
 *    head; the consumer loads head with acquire, so every record below it is visible
 *    (C11: the release store synchronizes-with the acquire load that reads it). The
 *    consumer reads the records it consumes, then stores tail with release; the producer
 *    loads tail with acquire before overwriting a slot, so it never overwrites a record
 *    the consumer is still reading. This is correct by the C11 model, not only by x86's
 *    store order.
 *
 *  - Outcomes (purgatory.c has the argument in full, step by step; waiters.c the code): a
 *    freed slot's last outcome is stored (relaxed) in its payload word before the free's
 *    release, and read after an acquire of the state word, then confirmed by re-reading
 *    it (the next client stores its payload with release). A waiting client publishes
 *    its handle in a waiter-table entry (a seq_cst store, after its ring in the entry's
 *    value) and then loads the state word seq_cst, while the freer loads the entries'
 *    keys (acquire) after a seq_cst fence that follows its free: the store-buffering
 *    pattern, so one of the two always sees the other. The freer writes the outcome into
 *    the entry's value by CAS, then marks the key done with a release CAS; the client
 *    acquires the key, reads the value, and empties the entry with a release CAS that the
 *    next claim's CAS acquires. An outcome ring's bell is a 32-bit futex word; its sleep
 *    flag follows the same pattern.
 *
 *  - A word that one side reads without the lock while another writes it, with nothing
 *    ordering the two, is accessed with relaxed atomics on both sides (relaxed_load /
 *    relaxed_store, dl_load / dl_store): a slot's meta word (a client's reset reads any
 *    slot's, while lock holders rewrite it as slots are freed and reused), its deadline
 *    (written by its client and by resets; read by the coordinator on a stale record), an
 *    arena block's owner word (written by a client as it fills a block of its cache; read
 *    by the coordinator reclaiming a dead client's blocks). A decision taken on such a
 *    value is confirmed by a CAS of the state word, or concerns only the reader's own
 *    slots. On x86-64 and aarch64 these are the plain loads and stores the code had; in
 *    the C11 model they make those accesses race-free, which a plain access is not.
 *
 *  - Counters have one writer per word (relaxed stores); readers sum them with relaxed
 *    loads: a snapshot, never a synchronization point.
 *
 *  - A failed task's error record (errlog.c) is a seqlock: its executor, the one writer of
 *    its log, stores the record's sequence word odd, a release fence, the body, then the
 *    sequence word even (release); a reader copies between an acquire load of it and an
 *    acquire fence and a second load, and keeps the copy only if both saw the same even
 *    word. Every word is accessed atomically (relaxed), so a torn copy is a value the
 *    reader rejects, never a data race (the argument in full, with the evictions that
 *    make a repeating timer's newest record trustworthy, is in errlog.c).
 *
 *  - Sleep flags (a consumer announcing it is about to sleep) are read by the waker after a
 *    seq_cst fence (sleep_flag_after_publish). The sleepers are Python loops that set their
 *    flag with a plain store, so a store-load reordering on their side can still hide a
 *    sleep from a waker: a wake-up may be missed. That is why every sleep is bounded (5 ms
 *    for the coordinator, 50 ms for the reaper and executors): a missed wake-up costs at
 *    most one timeout, never a hang.
 *
 * Checked, not assumed: tests/tsan/ plays these protocols between threads under
 * ThreadSanitizer (tests/test_tsan.py); its README says what that shows and what not.
 */
#ifndef SHMWHEEL_ATOMICS_H
#define SHMWHEEL_ATOMICS_H

#include <stddef.h>

#include "contract.h"

/* the state word of node `node` */
static inline i64 *gs_word(i64 *mem, i64 node) {
    return &mem[mem[H_OFF_NODES] + node * NODE_WORDS + F_GS];
}

static inline i64 gs_load(const i64 *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }

/* ---- the one way a slot's state changes ----------------------------------------------
 * slot_move(w, seen, want, tr) makes transition `tr` of contract.h's SLOT_TRANSITIONS:
 * from `seen` (the word the caller read; under the lock, the word it knows) to `want`,
 * written with the row's atomic: a CAS (returns whether it won; the loser re-reads and
 * decides again) or a release store (returns 1). Every write of a state word in the core
 * goes through here, so the table is the whole machine. In a SHMWHEEL_DEBUG build a move
 * the row does not allow aborts; with a trace on (slot_trace_start, states.c: the
 * hypothesis state machines) every move made is recorded for the tests to check. */
typedef struct {
    unsigned short from, to; /* masks of states (SM_BAD: a word that is no state) */
    unsigned char gen, lock, atomic;
} SlotRule;
extern const SlotRule SLOT_RULES[TR_COUNT];
extern i64 *volatile slot_trace_words;  /* NULL unless a trace is on */
void slot_trace_add(const i64 *w, i64 seen, i64 want, int tr);
int slot_rule_allows(int tr, i64 seen, i64 want);   /* 1 iff row tr allows seen -> want */
/* states.c: the trace (one process, off by default). take: the records since the last
 * take (4 words each: word address, seen, want, tr) and how many did not fit. */
int slot_trace_start(i64 capacity);
void slot_trace_stop(void);
i64 slot_trace_take(i64 **records, i64 *lost);

static inline int slot_move(i64 *w, i64 seen, i64 want, int tr) {
#ifdef SHMWHEEL_DEBUG
    if (!slot_rule_allows(tr, seen, want)) __builtin_trap();
#endif
    int won = 1;
    if (SLOT_RULES[tr].atomic == TR_CAS)
        /* acq_rel: acquire, so the winner sees what the previous owner wrote before it
         * released the state (the record, the deadline); release, so the next owner sees
         * what the winner wrote before its CAS */
        won = __atomic_compare_exchange_n(w, &seen, want, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE);
    else   /* release: the record written before it is visible to whoever acquires it */
        __atomic_store_n(w, want, __ATOMIC_RELEASE);
    if (__builtin_expect(slot_trace_words != NULL, 0) && won) slot_trace_add(w, seen, want, tr);
    return won;
}

/* A node's deadline (F_DEADLINE). Written by a client while its slot is RESERVED (then
 * published by the release of SUBMITTED), by a lock holder, and by a client's reset while
 * it holds the slot RESETTING (slots.c, slot_reset: the reset's closing CAS releases it).
 * A lock holder may read it while a reset writes it, so both sides use relaxed atomics
 * (one word, never torn); every decision that depends on it is then confirmed by a CAS
 * of the state word, whose reset sequence changes with every reset. */
static inline i64 dl_load(const i64 *w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }
static inline void dl_store(i64 *w, i64 v) { __atomic_store_n(w, v, __ATOMIC_RELAXED); }

static inline i64 ring_load_acquire(const i64 *w) {
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
static inline void ring_store_release(i64 *w, i64 v) {
    __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

static inline i64 relaxed_load(const i64 *w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }
static inline void relaxed_store(i64 *w, i64 v) { __atomic_store_n(w, v, __ATOMIC_RELAXED); }
/* a single-writer counter: load and store, no read-modify-write needed */
static inline void counter_add(i64 *w, i64 n) {
    __atomic_store_n(w, __atomic_load_n(w, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* the waker's side of the sleep-flag handshake */
static inline i64 sleep_flag_after_publish(const i64 *flag) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return __atomic_load_n(flag, __ATOMIC_RELAXED);
}

#endif
