/* slot_record.h: the lock-free accesses to a slot's record (its side record, deadline and
 * arena block) made outside the segment lock: a client writing and publishing the record
 * of a RESERVED slot, taking back one it could not publish, and an executor reading the
 * record of a slot the reaper fired. They are Python-free (slot_record.c) so that the
 * ThreadSanitizer harness (tests/tsan/) runs these very functions; producer.c,
 * producer_slow.c and executor.c are their Python faces. The orderings they rely on are
 * atomics.h's; each is named at its access. */
#ifndef SHMWHEEL_SLOT_RECORD_H
#define SHMWHEEL_SLOT_RECORD_H

#include "ring.h"
#include "slots.h"

/* A client: write the record and deadline of its RESERVED slot h, then store SUBMITTED
 * with release (RESERVED -> SUBMITTED, slots.h). */
void slot_write(Seg *s, i64 h, i64 meta, i64 word, i64 deadline);
/* A client: take back a SUBMITTED slot it could not publish (SUBMITTED -> RESERVED, by
 * CAS from the word it published); 0 if a cancel, a completion or a reset moved it first
 * (slot_record.c says what the client does then). */
int slot_unsubmit(Seg *s, i64 h);
/* A client: publish (h, h ^ check) on its ring; 1 if it fit. */
static inline int slot_publish(Ring *r, i64 h, i64 check) {
    i64 rec[PRODUCER_RECORD] = {h, h ^ check};
    return (int)ring_push(r, rec, 1);
}

/* An executor: 1 if h's slot is FIRING or STOPPING with h's generation (the reaper won it
 * and has not settled it), with its deadline in *deadline; else 0 (a garbage record). */
int slot_fired(Seg *s, i64 h, i64 *deadline);

/* What slot_payload found. */
#define PAYLOAD_OK 0          /* bytes/len: the msgpack blob */
#define PAYLOAD_NIL 1         /* a None payload */
#define PAYLOAD_BAD_BLOCK 2   /* the arena block the record names is not the slot's */
#define PAYLOAD_BAD_INLINE 3  /* an inline length out of range */
typedef struct {
    i64 meta;            /* the side record's meta word */
    i64 word;            /* its payload word (the inline bytes point here) */
    i64 cls;             /* the arena class (PAYLOAD_BAD_BLOCK: as the record says) */
    const char *bytes;   /* the blob: in the arena block, or in `word` above */
    i64 len;
    i64 attempt;         /* a repeating timer's run number (1 for any other) */
} SlotPayload;

/* An executor: the payload of a slot it checked with slot_fired. An arena block is read
 * only once its bounds and owner check out. */
int slot_payload(Seg *s, i64 slot, SlotPayload *p);

#endif
