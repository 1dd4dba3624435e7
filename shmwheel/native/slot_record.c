/* slot_record.c: the lock-free accesses to a slot's record (slot_record.h). */
#include "slot_record.h"

#include "atomics.h"
#include "wheel.h"

void slot_write(Seg *s, i64 h, i64 meta, i64 word, i64 deadline) {
    i64 slot = HANDLE_SLOT(h), *mem = s->mem, node = wheel_node(mem, slot);
    /* release: a late asker of the slot's last outcome that reads this word sees our
     * reservation when it re-reads the state word (waiters.c, slot_outcome); crash repair
     * reads it meanwhile too */
    __atomic_store_n(side_payload(s, slot), word, __ATOMIC_RELEASE);
    /* release: crash repair (slots.c, slot_rebuild) that reads meta sees the word */
    __atomic_store_n(side_meta(s, slot), meta, __ATOMIC_RELEASE);
    /* relaxed atomics: the coordinator reads every owner word reclaiming a dead client's
     * blocks (slot_reclaim), and a slot's deadline on a stale record, while live clients
     * write theirs; the release below is still what publishes both */
    if (META_FIELD(meta, FLAGS) & FLAG_ARENA)
        relaxed_store(arena_owner(s, (int)META_FIELD(meta, CLASS), word), OWNER_SLOT(slot));
    dl_store(wheel_field(mem, node, F_DEADLINE), deadline);
    /* RESERVED is ours alone; release: the coordinator that acquires SUBMITTED (through
     * the ring's head, then the state word) sees the record and deadline above */
    slot_move(gs_word(mem, node), GS_MAKE(HANDLE_GEN(h), ST_RESERVED),
              GS_MAKE(HANDLE_GEN(h), ST_SUBMITTED), TR_PUBLISH);
}

int slot_unsubmit(Seg *s, i64 h) {
    /* Only the word as its client published it: a cancel (CANCELLED), a completion
     * (COMPLETED) or a reset (RESETTING, then SUBMITTED with the next reset sequence) that
     * moved it first has decided it, and the client publishes it after all (Client
     * ._wait_push): a reset that returned True must see its timer run. */
    i64 *w = gs_word(s->mem, wheel_node(s->mem, HANDLE_SLOT(h)));
    i64 published = GS_MAKE(HANDLE_GEN(h), ST_SUBMITTED);
    return slot_move(w, published, GS_MAKE(HANDLE_GEN(h), ST_RESERVED), TR_TAKE_BACK);
}

int slot_fired(Seg *s, i64 h, i64 *deadline) {
    i64 *mem = s->mem, slot = HANDLE_SLOT(h);
    if (h < 0 || slot >= mem[H_CAPACITY]) return 0;
    /* acquire: the reaper's CAS to FIRING (which acquired the record its client released
     * with SUBMITTED) reached us through the dispatch ring; this load confirms the slot is
     * still that use */
    i64 gs = gs_load(gs_word(mem, wheel_node(mem, slot)));
    if (GS_GEN(gs) != HANDLE_GEN(h) || (GS_STATE(gs) != ST_FIRING && GS_STATE(gs) != ST_STOPPING))
        return 0;
    /* FIRING: no reset writes it (a reset acts on PENDING and SUBMITTED only) */
    *deadline = *wheel_field(mem, wheel_node(mem, slot), F_DEADLINE);
    return 1;
}

int slot_payload(Seg *s, i64 slot, SlotPayload *p) {
    i64 meta = p->meta = *side_meta(s, slot), word = p->word = *side_payload(s, slot);
    i64 flags = META_FIELD(meta, FLAGS), len = p->len = META_FIELD(meta, LEN);
    p->attempt = 1;
    p->cls = -1;
    p->bytes = NULL;
    if (!(flags & (FLAG_ARENA | FLAG_KEY)) && len == 1 && word == NIL_INLINE) return PAYLOAD_NIL;
    if (flags & FLAG_ARENA) {
        i64 c = p->cls = META_FIELD(meta, CLASS);
        i64 skip = (flags & FLAG_REPEAT) ? REPEAT_HEADER : (flags & FLAG_OP) ? OP_HEADER : 0;
        if (c >= ARENA_CLASSES || skip + len > ARENA_CLASS_BYTES(c) || word < 0 ||
                word >= s->arena[c * A_CLASS_WORDS + A_NBLOCKS] ||
                *arena_owner(s, (int)c, word) != OWNER_SLOT(slot))
            return PAYLOAD_BAD_BLOCK;
        i64 *w = arena_block(s, (int)c, word);
        if (flags & FLAG_REPEAT) p->attempt = w[RH_RUNS];
        p->bytes = (const char *)w + skip;
        return PAYLOAD_OK;
    }
    if (len < 1 || len > INLINE_MAX) return PAYLOAD_BAD_INLINE;
    p->bytes = (const char *)&p->word;
    return PAYLOAD_OK;
}
