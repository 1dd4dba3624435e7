/* arena.c: the payload arena (contract.h's ARENA_* and A_*): four size classes, each a
 * block table with a free stack and an owner table, all under the segment lock; and the
 * readers of a slot's own block (its payload, a repeating timer's header). */
#include "slots.h"

#include "atomics.h"

static i64 arena_pop(Seg *s, int cls, i64 owner) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    i64 b = h[A_FREE];
    if (b < 0) return -1;
    h[A_FREE] = s->arena[h[A_OFF_NEXT] + b];
    s->arena[h[A_OFF_OWNER] + b] = owner;
    return b;
}

void arena_release(Seg *s, int cls, i64 block) {
    i64 *h = &s->arena[cls * A_CLASS_WORDS];
    s->arena[h[A_OFF_OWNER] + block] = OWNER_FREE;
    s->arena[h[A_OFF_NEXT] + block] = h[A_FREE];
    h[A_FREE] = block;
}

i64 arena_alloc(Seg *s, int cls, i64 slot) { return arena_pop(s, cls, OWNER_SLOT(slot)); }

i64 arena_reserve(Seg *s, int cls, i64 ring, i64 *out, i64 n) {
    i64 k = 0;
    while (k < n) {
        i64 b = arena_pop(s, cls, OWNER_RING(ring));
        if (b < 0) break;
        out[k++] = b;
    }
    return k;
}

/* The block a slot's side record names, if it is really that slot's: its class via *cls;
 * else -1. */
i64 slot_block(Seg *s, i64 slot, int *cls) {
    i64 meta = __atomic_load_n(side_meta(s, slot), __ATOMIC_ACQUIRE);
    if (!(META_FIELD(meta, FLAGS) & FLAG_ARENA)) return -1;
    i64 c = META_FIELD(meta, CLASS), b = *side_payload(s, slot);
    if (c >= ARENA_CLASSES || b < 0 || b >= s->arena[c * A_CLASS_WORDS + A_NBLOCKS]) return -1;
    if (*arena_owner(s, (int)c, b) != OWNER_SLOT(slot)) return -1;
    *cls = (int)c;
    return b;
}

void slot_free_payload(Seg *s, i64 slot) {
    int c;
    i64 b = slot_block(s, slot, &c);
    if (b >= 0) arena_release(s, c, b);
    i64 *m = side_meta(s, slot);   /* a RESERVED slot stays its ring's */
    /* relaxed store, as every write of a meta word: a client's reset reads any slot's
     * meta lock-free (slot_reset), then confirms by CAS (atomics.h) */
    relaxed_store(m, META_MAKE(0, 0, 0, 0, META_FIELD(*m, RING)));
}

i64 slot_repeat(Seg *s, i64 slot, i64 **runs) {
    i64 meta = *side_meta(s, slot);
    if (!(META_FIELD(meta, FLAGS) & FLAG_REPEAT)) return 0;
    int c;
    i64 b = slot_block(s, slot, &c);
    if (b < 0) return 0;
    i64 *w = arena_block(s, c, b);   /* (period, runs) precede the payload */
    if (runs) *runs = &w[RH_RUNS];
    return w[RH_PERIOD] > 0 ? w[RH_PERIOD] : 0;
}

