/* ring.h: single-producer / single-consumer rings of fixed-size int64 records.
 *
 * Layout (contract.h): word RING_HEAD = records ever published (the producer's word),
 * word RING_TAIL = records ever consumed (the consumer's word, its own cache line), then
 * `capacity` (a power of two) records of `record` words. The ordering argument is in
 * atomics.h: records are written, then head is stored with release; head is loaded with
 * acquire, records read, then tail stored with release; tail is loaded with acquire
 * before a slot is reused. A ring never trusts its peer: a head more than `capacity`
 * ahead of tail (or behind it) is reported as corrupt, never followed.
 */
#ifndef SHMWHEEL_RING_H
#define SHMWHEEL_RING_H

#include "atomics.h"

typedef struct {
    i64 *w;        /* the ring's words */
    i64 cap;       /* records */
    i64 record;    /* words per record */
} Ring;

static inline i64 *ring_rec(const Ring *r, i64 seq) {
    return &r->w[RING_HEADER_WORDS + (seq & (r->cap - 1)) * r->record];
}

/* Producer: free room (0 if the consumer left the tail in a state that makes no sense). */
static inline i64 ring_room(const Ring *r, i64 head) {
    i64 used = head - ring_load_acquire(&r->w[RING_TAIL]);
    return (used < 0 || used > r->cap) ? 0 : r->cap - used;
}

/* Producer: publish n records of recs (n * record words); returns how many fit. */
static inline i64 ring_push(Ring *r, const i64 *recs, i64 n) {
    i64 head = relaxed_load(&r->w[RING_HEAD]);   /* our own word */
    i64 room = ring_room(r, head);
    if (n > room) n = room;
    for (i64 i = 0; i < n; i++) {
        i64 *d = ring_rec(r, head + i);
        for (i64 k = 0; k < r->record; k++) d[k] = recs[i * r->record + k];
    }
    if (n) ring_store_release(&r->w[RING_HEAD], head + n);
    return n;
}

/* Consumer: records published and not consumed; -1 if head is corrupt. */
static inline i64 ring_avail(const Ring *r, i64 *tail_out) {
    i64 tail = relaxed_load(&r->w[RING_TAIL]);   /* our own word */
    i64 n = ring_load_acquire(&r->w[RING_HEAD]) - tail;
    *tail_out = tail;
    return (n < 0 || n > r->cap) ? -1 : n;
}

/* Consumer: copy up to `limit` records into out without consuming; returns the count and
 * the first record's sequence number in *seq0 (-1 when the head is corrupt). */
static inline i64 ring_peek(const Ring *r, i64 *out, i64 limit, i64 *seq0) {
    i64 tail, n = ring_avail(r, &tail);
    *seq0 = tail;
    if (n < 0) return -1;
    if (n > limit) n = limit;
    for (i64 i = 0; i < n; i++) {
        const i64 *s = ring_rec(r, tail + i);
        for (i64 k = 0; k < r->record; k++) out[i * r->record + k] = s[k];
    }
    return n;
}

/* ---- a dispatch ring's claims (contract.h, DR_CLAIM_*) --------------------------------
 * A dispatch record is run by exactly one executor: its ring's own, which claims it just
 * before running it, or, when the reaper judged that executor stuck
 * (service/processes/reaper.py), whichever executor the reaper hands it to after taking it. Both claims are one CAS of
 * the record's DR_FIRED_NS word from its unclaimed value (top two bits 0) to the value
 * with DR_CLAIM_RUN or DR_CLAIM_TAKEN set, so of a racing executor and reaper exactly one
 * wins and the loser leaves the record alone. The word is read with acquire and changed
 * only by these CASes (acq_rel) while the record is between tail and head; the reaper
 * writes a slot's record again only after tail passed it (ring_room), and the executor
 * moves tail only past records that are claimed, so a claim is never overwritten early. */
static inline i64 dispatch_claim_of(i64 word) { return (i64)((uint64_t)word >> DR_CLAIM_SHIFT); }
static inline i64 dispatch_fired_ns(i64 word) {
    return word & (((i64)1 << DR_CLAIM_SHIFT) - 1);
}

/* Claim record `seq` for `who` (DR_CLAIM_RUN or DR_CLAIM_TAKEN); 1 if this call won it,
 * 0 if it was claimed already (by anyone, this caller included). */
static inline int dispatch_claim(const Ring *r, i64 seq, i64 who) {
    i64 *w = &ring_rec(r, seq)[DR_FIRED_NS];
    i64 seen = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    if (dispatch_claim_of(seen)) return 0;
    return __atomic_compare_exchange_n(w, &seen, seen | (who << DR_CLAIM_SHIFT), 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Producer (the reaper), taking records over from its stuck consumer: claims them with
 * DR_CLAIM_TAKEN from seq `from` on, in order, up to `limit`, and stops at the first it
 * cannot claim (the executor woke and claimed it: it is running again). Their handles go
 * to out; returns how many (0 when the tail makes no sense). */
static inline i64 dispatch_take(const Ring *r, i64 from, i64 *out, i64 limit) {
    i64 tail = ring_load_acquire(&r->w[RING_TAIL]);   /* the executor's word */
    i64 head = relaxed_load(&r->w[RING_HEAD]);        /* the caller's own (the producer) */
    if (head - tail < 0 || head - tail > r->cap) return 0;   /* corrupt: take nothing */
    if (from < tail) from = tail;
    i64 n = 0;
    for (i64 seq = from; seq < head && n < limit; seq++) {
        if (!dispatch_claim(r, seq, DR_CLAIM_TAKEN)) break;
        out[n++] = ring_rec(r, seq)[DR_HANDLE];
    }
    return n;
}

/* Consumer: done with n records (their slots may be reused). */
static inline void ring_consume(Ring *r, i64 n) {
    ring_store_release(&r->w[RING_TAIL], relaxed_load(&r->w[RING_TAIL]) + n);
}

#endif
