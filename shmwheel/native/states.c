/* states.c: the slot transition table of contract.h as an array (SLOT_RULES, read by
 * slot_move in atomics.h), the check of one move against it, and the trace the tests turn
 * on to watch every move the core makes. No Python here: the ThreadSanitizer harness
 * links it as it is. */
#include <stdlib.h>

#include "atomics.h"

#define RULE_(name, from, to, gen, actor, lock, atomic, doc) \
    [TR_##name] = {(unsigned short)(from), (unsigned short)(to), gen, lock, atomic},
const SlotRule SLOT_RULES[TR_COUNT] = {SLOT_TRANSITIONS(RULE_)};
#undef RULE_

/* the mask bit of a word's state (SM_BAD for a word that is no state) */
static unsigned state_bit(i64 gs) {
    i64 st = GS_STATE(gs);
    return st < ST_COUNT ? 1u << st : SM_BAD;
}

int slot_rule_allows(int tr, i64 seen, i64 want) {
    if (tr < 0 || tr >= TR_COUNT) return 0;
    const SlotRule *r = &SLOT_RULES[tr];
    if (!(r->from & state_bit(seen)) || !(r->to & state_bit(want))) return 0;
    i64 g0 = GS_GEN(seen), g1 = GS_GEN(want);
    switch (r->gen) {
    case TR_GEN_KEEP: return g1 == g0;
    case TR_GEN_BUMP: return g1 == ((g0 + 1) & GS_GEN_MASK);
    default: return 1;
    }
}

/* ---- the trace ------------------------------------------------------------------------
 * One process-wide buffer of (word address, seen, want, transition) records, on only
 * while a test wants it (states_py.c: trace_start / trace_take). The index is claimed with
 * an atomic add, so threads may share it; records past the capacity are counted, not
 * written. */
i64 *volatile slot_trace_words = NULL;   /* 4 words a record */
static i64 trace_cap, trace_len, trace_lost;

void slot_trace_add(const i64 *w, i64 seen, i64 want, int tr) {
    i64 *buf = slot_trace_words;
    if (!buf) return;
    i64 i = __atomic_fetch_add(&trace_len, 1, __ATOMIC_RELAXED);
    if (i >= trace_cap) {
        __atomic_fetch_add(&trace_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    buf[4 * i] = (i64)(intptr_t)w;
    buf[4 * i + 1] = seen;
    buf[4 * i + 2] = want;
    buf[4 * i + 3] = tr;
}

int slot_trace_start(i64 capacity) {
    i64 *buf = calloc((size_t)capacity, 4 * sizeof(i64));
    if (!buf) return -1;
    slot_trace_stop();
    trace_cap = capacity;
    trace_len = trace_lost = 0;
    slot_trace_words = buf;
    return 0;
}

void slot_trace_stop(void) {
    i64 *buf = slot_trace_words;
    slot_trace_words = NULL;
    free(buf);
}

i64 slot_trace_take(i64 **records, i64 *lost) {
    i64 n = __atomic_exchange_n(&trace_len, 0, __ATOMIC_RELAXED);
    *lost = __atomic_exchange_n(&trace_lost, 0, __ATOMIC_RELAXED);
    *records = slot_trace_words;
    return n < trace_cap ? n : trace_cap;
}
