/* waiters.c: how an outcome reaches a client that waits for it. The design and the
 * ordering argument in full are purgatory.c's ("Outcomes"); this file is the code, and
 * each atomic below says which step of that argument it is.
 *
 *   - a freed slot's payload word holds the outcome of its last use (slot_retire_ended,
 *     slots.c) until the slot is reserved again: slot_outcome reads it lock-free;
 *   - the waiter table (contract.h WAIT_* / WK_* / WV_*): a client that waits for a handle
 *     claims an entry in one of the handle's two buckets and publishes the handle in it;
 *     the freer of the slot, after its free, looks in both buckets, writes the outcome into
 *     every entry that waits for that handle and pushes (handle, code) on the entry's
 *     client's outcome ring; the client empties its entry once it knows the outcome;
 *   - the outcome rings and their futex bell (outq_push, outq_wait, outq_ring).
 */
#define _GNU_SOURCE   /* syscall(2), struct timespec under -std=c11 */
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "ring.h"
#include "slots.h"
#include "wheel.h"

/* ---- the table's shape ----------------------------------------------------------------- */
static inline i64 *wait_key(Seg *s, i64 e) {
    return &s->waiters[WAIT_HEADER + (e / WAIT_WAYS) * WAIT_BUCKET_WORDS + e % WAIT_WAYS];
}
static inline i64 *wait_val(Seg *s, i64 e) { return wait_key(s, e) + WAIT_WAYS; }

/* The first entry of each of h's two buckets (distinct: WA_NBUCKETS >= 2). */
static void wait_buckets(Seg *s, i64 h, i64 first[2]) {
    u64 nb = (u64)s->waiters[WA_NBUCKETS], x = (u64)key_hash_end((u64)h);
    u64 a = x & (nb - 1), b = (x >> 32) & (nb - 1);
    if (b == a) b = a ^ 1;
    first[0] = (i64)a * WAIT_WAYS;
    first[1] = (i64)b * WAIT_WAYS;
}

void waiters_format(Seg *s, i64 nbuckets) {
    i64 *w = s->waiters;
    for (i64 i = 0; i < WAIT_HEADER + nbuckets * WAIT_BUCKET_WORDS; i++) w[i] = 0;
    w[WA_NBUCKETS] = nbuckets;
}

/* ---- a waiting client's side (lock-free) -------------------------------------------- */
/* One ask less under way (step 6). Relaxed: the count only has to stay at least the
 * claimed entries, and each decrement follows its own emptying (or failed claim) in this
 * thread, so coherence keeps it after that ask's increment. A client killed between an
 * increment and its decrement leaves the count one high: freers then look in the buckets
 * as they would without the count (slower, never wrong). */
static inline void uncount(Seg *s) {
    __atomic_fetch_sub(&s->waiters[WA_WAITING], 1, __ATOMIC_RELAXED);
}

/* Claim an entry for h in the emptier of its two buckets and publish it; the entry, or -1
 * when both buckets are full. */
static i64 waiter_claim(Seg *s, i64 h, i64 ring) {
    i64 first[2], free_in[2] = {0, 0};
    /* seq_cst: counted before anything is claimed (step 6), so a count never falls below
     * the entries claimed; undone below when nothing is, or when the entry is emptied */
    __atomic_fetch_add(&s->waiters[WA_WAITING], 1, __ATOMIC_SEQ_CST);
    wait_buckets(s, h, first);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < WAIT_WAYS; k++)
            free_in[b] += relaxed_load(wait_key(s, first[b] + k)) == WK_EMPTY;
    int pick = free_in[1] > free_in[0];
    for (int t = 0; t < 2; t++, pick ^= 1) {
        for (int k = 0; k < WAIT_WAYS; k++) {
            i64 e = first[pick] + k, want = WK_EMPTY;
            /* the claim: only an empty key, by CAS (other clients claim lock-free too);
             * it acquires the emptying of the entry's last client (waiter_release) */
            if (!__atomic_compare_exchange_n(wait_key(s, e), &want, WK_CLAIMED(ring), 0,
                                             __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
                continue;
            /* relaxed: a stray freer may CAS it meanwhile (purgatory.c, step 3); the key's
             * store below publishes it */
            relaxed_store(wait_val(s, e), WV_MAKE(0, 0, ring));
            /* seq_cst: the client's half of the store-buffering pattern (step 1): this
             * store, then the state word's seq_cst load in outcome_state */
            __atomic_store_n(wait_key(s, e), WK_OF(h), __ATOMIC_SEQ_CST);
            return e;
        }
    }
    __atomic_fetch_add(&s->waiters[WA_REFUSED], 1, __ATOMIC_RELAXED);
    uncount(s);
    return -1;
}

void waiter_release(Seg *s, i64 e, i64 h) {
    i64 *k = wait_key(s, e), seen = relaxed_load(k);
    /* only our own entry, waiting or done (a freer may make it done meanwhile: again).
     * release: our reads of its value come before the next claim's writes (the claim's
     * CAS acquires; found by tests/tsan, notify) */
    while ((seen & ~WK_DONE) == WK_OF(h)) {
        if (__atomic_compare_exchange_n(k, &seen, WK_EMPTY, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
            uncount(s);   /* emptied: after, so the count stays at least the claims */
            return;
        }
    }
}

i64 waiter_outcome(Seg *s, i64 e, i64 h) {
    /* acquire: pairs with the freer's release CAS to done (step 4), so the value it wrote
     * before is visible; a plain read then: no one writes a done entry's value until its
     * client empties it (ThreadSanitizer checks this order: tests/tsan, notify) */
    if (__atomic_load_n(wait_key(s, e), __ATOMIC_ACQUIRE) != (WK_OF(h) | WK_DONE)) return 0;
    i64 v = *wait_val(s, e);
    return WV_GEN(v) == HANDLE_GEN(h) ? OUT_MAKE(HANDLE_GEN(h), WV_CODE(v)) : 0;
}

i64 slot_outcome(Seg *s, i64 h) {
    i64 slot = HANDLE_SLOT(h), *w = gs_of(s, slot);
    /* acquire: the free's release store, so the outcome written before it is visible */
    i64 gs = gs_load(w);
    if (GS_STATE(gs) != ST_FREE || GS_GEN(gs) == HANDLE_GEN(h)) return 0;
    /* acquire: if this reads the payload of the slot's next client (a release store,
     * slot_write), the state word re-read below sees that client's reservation (step 5) */
    i64 v = __atomic_load_n(side_payload(s, slot), __ATOMIC_ACQUIRE);
    if (relaxed_load(w) != gs || OUT_GEN(v) != HANDLE_GEN(h)) return 0;
    return v;
}

void outcome_state(Seg *s, i64 h, i64 e, i64 *gs, i64 *out) {
    /* seq_cst: the load of the store-buffering pattern (step 1) */
    *gs = __atomic_load_n(gs_of(s, HANDLE_SLOT(h)), __ATOMIC_SEQ_CST);
    *out = 0;
    if (GS_GEN(*gs) == HANDLE_GEN(h)) return;   /* this use is not over */
    /* the slot first, then the entry: if the slot was reserved again since, what that
     * reservation published makes a freer's done entry visible (step 5) */
    *out = slot_outcome(s, h);
    if (!*out && e >= 0) *out = waiter_outcome(s, e, h);
}

i64 outcome_watch(Seg *s, i64 h, i64 ring, i64 *gs, i64 *out) {
    i64 e = ring >= 0 ? waiter_claim(s, h, ring) : -1;
    outcome_state(s, h, e, gs, out);
    if (GS_GEN(*gs) == HANDLE_GEN(h)) return ring >= 0 && e < 0 ? -2 : e;
    if (e >= 0) waiter_release(s, e, h);   /* ended: nothing to wait for */
    return -1;
}

/* ---- the freer's side (under the segment lock) -------------------------------------- */
static void outq_push(Seg *s, i64 ring, i64 h, i64 code) {
    if (!s->outq || ring < 0 || ring >= s->nrings) return;
    Ring r = {s->outq + ring * (RING_HEADER_WORDS + s->outq_cap * OUTQ_RECORD), s->outq_cap,
              OUTQ_RECORD};
    i64 rec[OUTQ_RECORD];
    rec[OQ_HANDLE] = h;
    rec[OQ_CODE] = code;
    /* ring_push treats head as its own word: the freers all hold the segment lock */
    if (!ring_push(&r, rec, 1))   /* the client finds the outcome in its entry instead */
        relaxed_store(&r.w[OUTQ_DROPPED], relaxed_load(&r.w[OUTQ_DROPPED]) + 1);
    /* the listener's side: SLEEPING = 1 (seq_cst), then it re-reads head before waiting on
     * the bell; ours: head published, then SLEEPING read after a seq_cst fence. One of the
     * two sees the other, so a listener never sleeps through a record. */
    if (sleep_flag_after_publish(&r.w[OUTQ_SLEEPING])) outq_ring(r.w);
}

/* Every entry that waits for h gets the outcome, then its client a record. */
static void waiters_notify(Seg *s, i64 h, i64 code) {
    i64 first[2];
    wait_buckets(s, h, first);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < WAIT_WAYS; k++) {
            i64 e = first[b] + k, *kw = wait_key(s, e), *vw = wait_val(s, e);
            /* acquire: the client's value (its ring), stored before it published h (step 2) */
            if (__atomic_load_n(kw, __ATOMIC_ACQUIRE) != WK_OF(h)) continue;
            i64 v = relaxed_load(vw), want = WK_OF(h) | WK_DONE;
            /* a CAS, not a store: the entry may have been emptied and claimed again since
             * the key was read, and its new client's ring must stay (step 3) */
            if (!__atomic_compare_exchange_n(vw, &v, WV_MAKE(HANDLE_GEN(h), code, WV_RING(v)), 0,
                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                continue;
            i64 seen = WK_OF(h);
            /* release: the value above before done (step 4); fails if the client emptied
             * it meanwhile (it knows the outcome then) */
            if (__atomic_compare_exchange_n(kw, &seen, want, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                outq_push(s, WV_RING(v), h, code);
        }
}

void slot_finish(Seg *s, i64 *mem, i64 slot, i64 code) {
    i64 gen = GS_GEN(gs_load(gs_word(mem, wheel_node(mem, slot))));
    /* the outcome into the payload word, then the free: a release store of the state word */
    slot_retire_ended(s, mem, slot, TR_FINISH, code);
    if (!s->waiters) return;
    /* seq_cst: the freer's half of the store-buffering pattern (step 1): the free, then
     * the count's and the keys' loads */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* relaxed, after the fence: 0 means no ask is under way that could miss the free
     * (step 6); most frees are of timers nobody waits for, and skip the two buckets */
    if (relaxed_load(&s->waiters[WA_WAITING]) == 0) return;
    waiters_notify(s, HANDLE_MAKE(gen, slot), code);
}

void waiters_reclaim(Seg *s, i64 ring) {
    if (!s->waiters) return;
    i64 n = s->waiters[WA_NBUCKETS] * WAIT_WAYS;
    for (i64 e = 0; e < n; e++) {
        i64 *kw = wait_key(s, e), k = relaxed_load(kw);
        /* a dead or closed client's entries: claimed (its ring is in the key) or published
         * (its ring is in the value, which freers keep); only that client wrote them, and
         * the freers hold the lock we hold */
        if (k == WK_EMPTY) continue;
        int mine = WK_IS_CLAIMED(k) ? WK_CLAIMED_RING(k) == ring
                                    : WV_RING(relaxed_load(wait_val(s, e))) == ring;
        if (mine && __atomic_compare_exchange_n(kw, &k, WK_EMPTY, 0, __ATOMIC_RELAXED,
                                                __ATOMIC_RELAXED))
            uncount(s);   /* its client will not: it counted the entry before claiming it */
    }
}

/* ---- the outcome ring's bell ------------------------------------------------------- */
void outq_ring(i64 *words) {
    int32_t *bell = (int32_t *)&words[OUTQ_BELL];
    __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);   /* a waiter on the old value returns */
    syscall(SYS_futex, bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
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
