/* wheel.h: the hierarchical timing wheel over one int64 array (layout in contract.h).
 * The theory of operation is at the top of wheel.c. One algorithm serves both storages:
 * the in-process core (shmwheel/wheel/core.py, process memory) and the service (a view of
 * the shared segment, where every call below runs under the segment lock).
 *
 * Node states seen by the wheel: a linked node is PENDING, or CANCELLED when a cancel won
 * it without the lock (the service). Walking a bucket (advance, cascade), the wheel takes a
 * PENDING node with a CAS to FIRING (the reaper's half of the one-winner rule) and hands a
 * CANCELLED node to `retire`, which frees it (and, in the service, its payload).
 */
#ifndef SHMWHEEL_WHEEL_H
#define SHMWHEEL_WHEEL_H

#include "contract.h"

/* Called for a node that is neither PENDING nor FREE which the wheel unlinked while
 * walking a bucket: a CANCELLED one must be freed (return 0); a COMPLETED one (an
 * operation of the service's purgatory) is made FIRING by the callee, which returns 1:
 * advance then hands it out with the fired ones. Cascading calls it for CANCELLED nodes
 * only. NULL means wheel_free_slot (the in-process core has no payloads). */
typedef int (*wheel_retire_fn)(void *ctx, i64 *mem, i64 slot);

/* -- formatting (the header words must be written) -- */
void wheel_reset(i64 *mem);                       /* every bucket empty, every slot free */
void wheel_add_free_slots(i64 *mem, i64 first);   /* push [first, capacity), lowest on top */

/* -- single entries -- */
i64 wheel_insert(i64 *mem, i64 deadline);         /* handle, or INS_* */
int wheel_cancel(i64 *mem, i64 handle);           /* in process: unlink + free a PENDING
                                                     entry of that generation; 1 if done */
i64 wheel_release(i64 *mem, const i64 *slots, i64 n);  /* FIRING slots -> FREE; count */

/* -- the clock -- */
i64 wheel_next_wakeup(i64 *mem);                  /* see wheel.c; NEVER when empty */
i64 wheel_cascade_step(i64 *mem, i64 budget, wheel_retire_fn retire, void *ctx);
/* Advance to `now`, writing the slots that fired (CAS PENDING -> FIRING won) to out[0..cap);
 * with `release` they are freed at once. Returns the count; == cap means call again. */
i64 wheel_advance(i64 *mem, i64 now, i64 *out, i64 cap, int release,
                  wheel_retire_fn retire, void *ctx);

/* -- pieces the slot state machine (slots.c) builds on; caller holds the lock -- */
i64 wheel_pop_free(i64 *mem);                     /* a free slot (gen kept) or -1 */
/* state FREE, gen + 1, onto the stack; tr names why (FINISH, RECLAIM, DROP: contract.h) */
void wheel_free_slot(i64 *mem, i64 slot, int tr);
void wheel_unlink(i64 *mem, i64 node);            /* out of its bucket; prev = next = -1 */
/* link by deadline: an already-due node joins the current level-0 bucket (fired by the
 * next advance); returns the level, or INS_OUT_OF_RANGE (nothing linked) */
i64 wheel_link(i64 *mem, i64 node, i64 deadline);
/* wheel_link at the node's own deadline, which it does not write (a reset may be writing
 * it: atomics.h, dl_load) */
i64 wheel_relink(i64 *mem, i64 node);
i64 wheel_limit(const i64 *mem);                  /* first rounded deadline out of range */

static inline i64 wheel_node(const i64 *mem, i64 slot) { return mem[H_SENTINELS] + slot; }
static inline i64 *wheel_field(i64 *mem, i64 node, int field) {
    return &mem[mem[H_OFF_NODES] + node * NODE_WORDS + field];
}

#endif
