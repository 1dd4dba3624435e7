/* contract.h: the one definition of every shared-memory encoding shmwheel uses.
 *
 * Everything that reads or writes the wheel array, the side table, the payload arena or a
 * ring takes its word indices, shifts and masks from here: the C core directly, Python
 * through the extension's export of the same rows (shmwheel/wheel/constants.py, with the
 * accessor pairs of segment/contract.py). Nobody re-derives a shift or a mask. All words
 * are int64 in host byte order (x86-64 / aarch64 little-endian).
 *
 * How a constant is written: as a row X(NAME, value) of one of the lists below, and
 * nowhere else. Each list becomes C constants here, once: CONTRACT_INT makes its rows the
 * constants of an enum (ints: usable in case labels and array sizes), CONTRACT_I64 makes
 * them static const i64 (a value beyond int: a magic, a 32-bit mask, NO_TIME). The
 * extension exports every row of every list in one loop (module.c, CONTRACT_LISTS), and
 * wheel/constants.py takes them in one loop, typed by wheel/constants.pyi, which is
 * generated from the same rows (tests/contract_stub.py; tests/test_contract.py fails when
 * it drifts). A packed word's fields are read and written by the macros beside its list.
 */
#ifndef SHMWHEEL_CONTRACT_H
#define SHMWHEEL_CONTRACT_H

#include <stdint.h>
#include <string.h>

typedef int64_t i64;
typedef uint64_t u64;

#define CONTRACT_ENUM_(name, value) name = (value),
#define CONTRACT_INT(LIST) enum { LIST(CONTRACT_ENUM_) };
#define CONTRACT_CONST_(name, value) static const i64 name = (value);
#define CONTRACT_I64(LIST) LIST(CONTRACT_CONST_)

/* ---- the wheel array: header words ------------------------------------------------- */
#define WHEEL_HEADER(X)                                                                    \
    X(H_MAGIC, 0)                                                                          \
    X(H_VERSION, 1)                                                                        \
    X(H_CAPACITY, 2)      /* entry slots */                                                \
    X(H_LEVELS, 3)                                                                         \
    X(H_WHEEL, 4)         /* Kafka's wheel_size W */                                       \
    X(H_BUCKETS, 5)       /* buckets stored per level: 2 W (room to pre-cascade) */        \
    X(H_WORDS, 6)         /* 64-bit bitmap words per level */                              \
    X(H_TICK, 7)                                                                           \
    X(H_NOW, 8)           /* the wheel's clock; written under the segment lock only */     \
    X(H_FREE, 9)          /* top of the free-slot stack, -1 when empty */                  \
    X(H_PENDING, 10)      /* entries linked in buckets (PENDING, CANCELLED, COMPLETED) */  \
    X(H_OFF_TICKS, 11)                                                                     \
    X(H_OFF_BEXP, 12)                                                                      \
    X(H_OFF_BITS, 13)                                                                      \
    X(H_OFF_NODES, 14)                                                                     \
    X(H_TOTAL, 15)                                                                         \
    X(H_SENTINELS, 16)    /* B = levels * slots: nodes [0, B) are bucket sentinels */      \
    X(WHEEL_HEADER_WORDS, 32)                                                              \
    X(WHEEL_LAYOUT_VERSION, 2)
CONTRACT_INT(WHEEL_HEADER)

/* ---- a node: one 32-byte record; entry slot s is node B + s -------------------------- */
#define NODE_FIELDS(X)                                                                     \
    X(NODE_WORDS, 4)                                                                       \
    X(F_NEXT, 0)          /* bucket list, or the free stack; -1 when in neither */         \
    X(F_PREV, 1)          /* bucket list; -1 iff the node is not linked in a bucket */     \
    X(F_DEADLINE, 2)      /* exact deadline (time units of the wheel) */                   \
    X(F_GS, 3)            /* the state word: generation << 32 | state (see below) */
CONTRACT_INT(NODE_FIELDS)

/* The state word. Its low byte is the slot's state, bits 32..62 its generation. It is
 * the one word of a slot that several processes write concurrently, so it changes only
 * through slot_move (atomics.h), which writes it with the atomic the transition table
 * below names. Bits 8..31 serve reset (slots.c, slot_reset): outside RESETTING, bits
 * 16..31 are the reset sequence, bumped by every reset, so a word read before a reset
 * never equals the word after it (no ABA for whoever decided on the deadline in between);
 * during RESETTING, bits 8..15 are the state the reset took the slot from (PENDING or
 * SUBMITTED) and bits 16..31 the ring of the client holding it. */
#define STATE_WORD(X)                                                                      \
    X(GS_STATE_MASK, 0xFF)                                                                 \
    X(GS_GEN_SHIFT, 32)                                                                    \
    X(GS_GEN_MASK, 0x7FFFFFFF)                                                             \
    X(GS_FROM_SHIFT, 8)                                                                    \
    X(GS_FROM_MASK, 0xFF)                                                                  \
    X(GS_AUX_SHIFT, 16)                                                                    \
    X(GS_AUX_MASK, 0xFFFF)
CONTRACT_INT(STATE_WORD)
#define GS_MAKE(gen, state) ((((i64)(gen) & GS_GEN_MASK) << GS_GEN_SHIFT) | (i64)(state))
#define GS_STATE(gs) ((gs) & GS_STATE_MASK)
#define GS_GEN(gs) (((gs) >> GS_GEN_SHIFT) & GS_GEN_MASK)
#define GS_FROM(gs) (((gs) >> GS_FROM_SHIFT) & GS_FROM_MASK)   /* RESETTING: its origin */
#define GS_AUX(gs) (((gs) >> GS_AUX_SHIFT) & GS_AUX_MASK)      /* reset seq, or holder */
#define GS_MAKE_SEQ(gen, seq, state) \
    (GS_MAKE(gen, state) | (((i64)(seq) & GS_AUX_MASK) << GS_AUX_SHIFT))
#define GS_MAKE_HOLD(gen, from, ring)                                              \
    (GS_MAKE(gen, ST_RESETTING) | (((i64)(from) & GS_FROM_MASK) << GS_FROM_SHIFT) | \
     (((i64)(ring) & GS_AUX_MASK) << GS_AUX_SHIFT))
/* the same word with its origin (RESETTING) replaced */
#define GS_WITH_FROM(gs, from)                                    \
    (((gs) & ~((i64)GS_FROM_MASK << GS_FROM_SHIFT)) |             \
     (((i64)(from) & GS_FROM_MASK) << GS_FROM_SHIFT))

/* ---- the slot state machine, as data -------------------------------------------------
 * Every state and every legal transition of a slot's state word is in the two tables
 * below, and nowhere else: the C core makes each transition by naming its row
 * (slot_move(w, seen, want, TR_x), atomics.h); Python reads the same rows from the
 * extension (shmwheel/segment/states.py); the state diagram in docs/concepts.md is
 * generated from them; the hypothesis state machines (tests/test_slot_machine.py) check
 * every transition they observe against them. slots.h says why the rules hold. Below:
 * SLOT_STATES(X): X(name, value, meaning) */
#define SLOT_STATES(X)                                                                     \
    X(FREE, 0, "on the free stack")                                                        \
    X(PENDING, 1, "linked in a bucket, waiting for its deadline")                          \
    X(FIRING, 2, "won by the reaper: unlinked, dispatched or running")                     \
    X(RESERVED, 3, "in one client's cache: that client alone may write it")                \
    X(SUBMITTED, 4, "written and published on its client's ring, not yet linked")          \
    X(CANCELLED, 5, "won by a cancel: the task never runs; retired soon after")            \
    X(STOPPING, 6, "a run in flight was cancelled: no further runs")                       \
    X(COMPLETED, 7, "an operation won by a completion, linked in the current bucket: the " \
                    "reaper runs its on_complete task")                                    \
    X(RESETTING, 8, "held for a moment by one client's reset, which writes the new "       \
                    "deadline and puts back the state it came from")
#define ST_ENUM_(name, value, doc) ST_##name = value,
enum { SLOT_STATES(ST_ENUM_) ST_COUNT };
#undef ST_ENUM_

/* Who makes a transition, and how it is written:
 *   TR_LOCKED    under the segment lock (the wheel's links change only there);
 *   TR_LOCKFREE  without it, by any process holding the handle (or the slot's client);
 *   TR_CAS       a compare-and-swap from the word the actor read (it may lose: re-read);
 *   TR_STORE     a release store: no lock-free writer acts on the `from` state, or the one
 *                that can (a cancel of FIRING) leads to the same end (slots.h).
 * Generation: KEEP (the same use of the slot), BUMP (+1: every handle of the old use goes
 * stale), SET (formatting: any). SM_BAD stands for a word that is no state at all
 * (>= ST_COUNT): what a crash repair may find in a torn slot. */
#define SLOT_RULES(X)                                                                      \
    X(TR_LOCKED, 1)                                                                        \
    X(TR_LOCKFREE, 2)                                                                      \
    X(TR_CAS, 1)                                                                           \
    X(TR_STORE, 2)                                                                         \
    X(TR_GEN_KEEP, 0)                                                                      \
    X(TR_GEN_BUMP, 1)                                                                      \
    X(TR_GEN_SET, 2)                                                                       \
    X(SM_BAD, 1 << 15)                                                                     \
    X(SM_ANY, 0xFFFF)
CONTRACT_INT(SLOT_RULES)
#define SM(st) (1 << ST_##st)

/* SLOT_TRANSITIONS(X): X(name, from (a mask of states), to (a mask), generation, actor,
 * lock, atomic, what it means) */
#define SLOT_TRANSITIONS(X)                                                                 \
    X(FORMAT, SM_ANY, SM(FREE), TR_GEN_SET, "the segment's creator, before any process "    \
      "attaches", TR_LOCKED, TR_STORE, "every slot free, at the generation a recovery chose") \
    X(RESERVE, SM(FREE), SM(RESERVED), TR_GEN_KEEP, "a client's restock", TR_LOCKED,        \
      TR_STORE, "off the free stack into one client's cache")                               \
    X(PUBLISH, SM(RESERVED), SM(SUBMITTED), TR_GEN_KEEP, "its client", TR_LOCKFREE,         \
      TR_STORE, "record and deadline written; then published on its ring")                  \
    X(TAKE_BACK, SM(SUBMITTED), SM(RESERVED), TR_GEN_KEEP, "its client", TR_LOCKFREE,       \
      TR_CAS, "its ring stayed full: the client takes the slot back")                       \
    X(LINK, SM(SUBMITTED), SM(PENDING), TR_GEN_KEEP, "the coordinator", TR_LOCKED, TR_CAS,  \
      "linked in the bucket of its deadline")                                               \
    X(ARM, SM(FREE), SM(PENDING), TR_GEN_KEEP, "the in-process wheel's insert, a "          \
      "recovery's install", TR_LOCKED, TR_STORE, "a timer linked in one step")              \
    X(FIRE, SM(PENDING), SM(FIRING), TR_GEN_KEEP, "the reaper's advance", TR_LOCKED,        \
      TR_CAS, "its deadline came")                                                          \
    X(REARM, SM(FIRING), SM(PENDING), TR_GEN_KEEP, "the reaper's settle", TR_LOCKED,        \
      TR_CAS, "a repeating timer's run ended: linked for its next run")                     \
    X(CANCEL, SM(PENDING) | SM(SUBMITTED) | SM(RESETTING), SM(CANCELLED), TR_GEN_KEEP,      \
      "any client", TR_LOCKFREE, TR_CAS, "cancel() won: the task never runs")               \
    X(STOP, SM(FIRING), SM(STOPPING), TR_GEN_KEEP, "any client", TR_LOCKFREE, TR_CAS,       \
      "cancel() of a run in flight: no further runs")                                       \
    X(REFUSE, SM(SUBMITTED) | SM(PENDING) | SM(COMPLETED) | SM(RESETTING), SM(CANCELLED),   \
      TR_GEN_KEEP,                                                                          \
      "the coordinator, the reaper, a crash repair", TR_LOCKED, TR_CAS,                     \
      "a deadline beyond the wheel's range: never a timer")                                 \
    X(COMPLETE, SM(PENDING) | SM(SUBMITTED), SM(COMPLETED), TR_GEN_KEEP,                    \
      "any client's check_and_complete", TR_LOCKED, TR_CAS,                                 \
      "an operation's amounts reached its required amount")                                 \
    X(RUN_COMPLETED, SM(COMPLETED), SM(FIRING), TR_GEN_KEEP, "the reaper's advance",        \
      TR_LOCKED, TR_STORE, "the completed operation's on_complete task runs")               \
    X(HOLD, SM(PENDING) | SM(SUBMITTED), SM(RESETTING), TR_GEN_KEEP, "any client's reset",  \
      TR_LOCKFREE, TR_CAS, "a reset takes the slot to write its new deadline")              \
    X(PUT_BACK, SM(RESETTING), SM(PENDING) | SM(SUBMITTED), TR_GEN_KEEP, "the reset "       \
      "holding it", TR_LOCKFREE, TR_CAS, "new deadline written: back where it came from, "  \
      "reset sequence + 1")                                                                 \
    X(LINK_HELD, SM(RESETTING), SM(RESETTING), TR_GEN_KEEP, "the coordinator", TR_LOCKED,   \
      TR_CAS, "linked under a reset's feet: its origin becomes PENDING")                    \
    X(UNHOLD, SM(RESETTING), SM(PENDING) | SM(SUBMITTED), TR_GEN_KEEP, "the reclaim of a "  \
      "dead client", TR_LOCKED, TR_CAS, "a reset that died holding the slot: put back")     \
    X(FINISH, SM(FIRING) | SM(STOPPING) | SM(CANCELLED), SM(FREE), TR_GEN_BUMP,             \
      "the coordinator, the reaper", TR_LOCKED, TR_STORE, "its use ended: freed")           \
    X(RECLAIM, SM(RESERVED) | SM(SUBMITTED), SM(FREE), TR_GEN_BUMP, "the reclaim of a "    \
      "dead or closed client, or its client giving one back", TR_LOCKED, TR_STORE,          \
      "never linked: freed")                                                                \
    X(DROP, SM(PENDING), SM(FREE), TR_GEN_BUMP, "the in-process wheel's cancel",            \
      TR_LOCKED, TR_STORE, "unlinked and freed at once (no lock-free writer in process)")   \
    X(REPAIR, SM(FREE) | SM_BAD, SM(FREE), TR_GEN_KEEP, "a crash repair", TR_LOCKED,        \
      TR_STORE, "a word that is no state (torn): free")
#define TR_ENUM_(name, ...) TR_##name,
enum { SLOT_TRANSITIONS(TR_ENUM_) TR_COUNT };
#undef TR_ENUM_

/* A handle names one use of a slot: generation << 32 | slot. Freeing a slot bumps its
 * generation, so a stale handle never matches a reused slot. Handles are >= 0. Beside it:
 * the wheel insert's results other than a handle, and the two times that are no deadline. */
#define HANDLES(X)                                                                         \
    X(INS_ALREADY_DUE, -1)                                                                 \
    X(INS_OUT_OF_RANGE, -2)                                                                \
    X(INS_NO_SLOT, -3)
CONTRACT_INT(HANDLES)
#define WIDE_WORDS(X)                                                                      \
    X(WHEEL_MAGIC, 0x53484D5748454C32LL)   /* "SHMWHEL2" */                                \
    X(HANDLE_SLOT_MASK, 0xFFFFFFFFLL)                                                      \
    X(NO_TIME, INT64_MIN)                                                                  \
    X(NEVER, INT64_MAX)                                                                    \
    X(OP_MAX_AMOUNT, 0xFFFFFFFFLL)   /* an operation's count saturates here (OPH) */       \
    X(MAX_CAPACITY, 1LL << 31)       /* slots of a service (a slot + 1 is an owner word) */ \
    /* the check words of a producer record (below) */                                    \
    X(CHECK_SUBMIT, 0x5A17C0DE3A11F00DLL)                                                  \
    X(CHECK_CANCEL, 0x2C4BCE1D0F5EA5EDLL)                                                  \
    X(CHECK_RESET, 0x6B3D91E47C25A0F1LL)
CONTRACT_I64(WIDE_WORDS)
#define HANDLE_MAKE(gen, slot) ((((i64)(gen) & GS_GEN_MASK) << GS_GEN_SHIFT) | (i64)(slot))
#define HANDLE_SLOT(h) ((h) & HANDLE_SLOT_MASK)
#define HANDLE_GEN(h) (((h) >> GS_GEN_SHIFT) & GS_GEN_MASK)

/* ---- limits: what the encodings above and below leave room for ---------------------- */
#define LIMITS(X)                                                                          \
    X(MAX_TASKS, 0xFFFF)     /* task ids 0 .. MAX_TASKS - 1 (META's TASK: TASK_NONE) */    \
    X(MAX_CLIENTS, 4096)     /* client rings (META's RING, GS_AUX) */                      \
    X(RING_NONE, 0x7FFF)     /* the ring of a timer no client owns: a recovery's */        \
    X(OP_MAX_KEYS, 0x7FFF)   /* keys of one operation (OPH's field) */                     \
    X(CACHE_MAX, 256)        /* reserved slots (and blocks) a client caches */
CONTRACT_INT(LIMITS)

/* ---- the side table: 2 words per slot (task, payload, owner) ------------------------- */
/* meta = task | flags << 16 | arena class << 24 | payload length << 32 | ring << 48 */
#define SIDE_RECORD(X)                                                                     \
    X(SIDE_WORDS, 2)                                                                       \
    X(S_META, 0)                                                                           \
    X(S_PAYLOAD, 1)       /* up to 8 inline msgpack bytes, or an arena block index */      \
    X(META_TASK_SHIFT, 0)                                                                  \
    X(META_TASK_MASK, 0xFFFF)                                                              \
    X(META_FLAGS_SHIFT, 16)                                                                \
    X(META_FLAGS_MASK, 0xFF)                                                               \
    X(META_CLASS_SHIFT, 24)                                                                \
    X(META_CLASS_MASK, 0xFF)                                                               \
    X(META_LEN_SHIFT, 32)                                                                  \
    X(META_LEN_MASK, 0xFFFF)                                                               \
    X(META_RING_SHIFT, 48)                                                                 \
    X(META_RING_MASK, 0xFFFF)
CONTRACT_INT(SIDE_RECORD)
#define META_FIELD(m, F) (((m) >> META_##F##_SHIFT) & META_##F##_MASK)
#define META_MAKE(task, flags, cls, len, ring)                              \
    ((((i64)(task) & META_TASK_MASK) << META_TASK_SHIFT) |                  \
     (((i64)(flags) & META_FLAGS_MASK) << META_FLAGS_SHIFT) |               \
     (((i64)(cls) & META_CLASS_MASK) << META_CLASS_SHIFT) |                 \
     (((i64)(len) & META_LEN_MASK) << META_LEN_SHIFT) |                     \
     (((i64)(ring) & META_RING_MASK) << META_RING_SHIFT))
/* the same meta word with field F (TASK, FLAGS, ...) set to v */
#define META_WITH(m, F, v)                                              \
    (((m) & ~((i64)META_##F##_MASK << META_##F##_SHIFT)) |              \
     (((i64)(v) & META_##F##_MASK) << META_##F##_SHIFT))

/* What a side record's flags say, and the blocks that start with a header: a repeating
 * timer's (period, runs: REPEAT_HEADER bytes), an operation's (OP_HEADER bytes: the OPH
 * word, its count), each built in one place (op_block_header below; Python's in
 * segment/contract.py, repeat_header and op_header_bytes). */
#define PAYLOADS(X)                                                                        \
    X(FLAG_KEY, 1)        /* the blob is msgpack [key, payload] */                         \
    X(FLAG_ARENA, 2)      /* the payload lives in an arena block */                        \
    X(FLAG_REPEAT, 8)     /* the arena block starts with (period, runs): REPEAT_HEADER */  \
    X(FLAG_OP, 16)        /* an operation (the purgatory): its block starts with its     */ \
                          /* OP_HEADER, then msgpack [keys, payload]; the slot's task is */ \
                          /* its on_expire task */                                         \
    X(FLAG_COMPLETED, 32) /* set by the reaper as it takes a COMPLETED operation: the    */ \
                          /* task is now its on_complete task */                           \
    X(TASK_NONE, 0xFFFF)  /* an operation without an on_complete / on_expire task */       \
    X(REPEAT_HEADER, 16)  /* bytes before a repeating timer's payload in its block: */    \
    X(RH_PERIOD, 0)       /* its words: the period (ms), */                                \
    X(RH_RUNS, 1)         /* the run it is on, from 1 */                                   \
    X(OP_HEADER, 16)      /* bytes before an operation's [keys, payload] in its block: */  \
    X(OH_OPH, 0)          /* its words: OPH, */                                            \
    X(OPH_COUNT, 1)       /* then its count: the amount signalled to it so far        */ \
                          /* (under the segment lock only; 0 as op_store stores it)    */ \
    X(OPH_TASK_SHIFT, 32) /* OPH = required | on_complete << 32 | nkeys << 48 */           \
    X(OPH_NKEYS_SHIFT, 48)                                                                 \
    X(INLINE_MAX, 8)      /* bytes of msgpack stored in the payload word itself */         \
    X(NIL_INLINE, 0xC0)   /* msgpack nil: the payload word of a None payload */
CONTRACT_INT(PAYLOADS)
#define OPH_MAKE(required, on_complete, nkeys)                           \
    (((i64)(required) & OP_MAX_AMOUNT) |                                 \
     (((i64)(on_complete) & META_TASK_MASK) << OPH_TASK_SHIFT) |         \
     (((i64)(nkeys) & OP_MAX_KEYS) << OPH_NKEYS_SHIFT))
#define OPH_REQUIRED(w) ((w) & OP_MAX_AMOUNT)
#define OPH_TASK(w) (((w) >> OPH_TASK_SHIFT) & META_TASK_MASK)
#define OPH_NKEYS(w) (((w) >> OPH_NKEYS_SHIFT) & OP_MAX_KEYS)
/* An operation's block header, written (the C side builds it here only; Python in
 * segment/contract.py, op_header_bytes) */
static inline void op_block_header(void *block, i64 required, i64 on_complete, i64 nkeys) {
    i64 w[OP_HEADER / 8] = {0};
    w[OH_OPH] = OPH_MAKE(required, on_complete, nkeys);
    memcpy(block, w, sizeof w);   /* (block: any bytes, aligned or not) */
}

/* ---- the payload arena: 4 size classes, each a block table and a free stack ---------- */
#define ARENA(X)                                                                           \
    X(ARENA_CLASSES, 4)                                                                    \
    X(MAX_PAYLOAD, 64 << (2 * (ARENA_CLASSES - 1)))   /* the largest block: 4096 bytes */  \
    X(A_CLASS_WORDS, 8)   /* header words per class, at the arena's start */               \
    X(A_NBLOCKS, 0)                                                                        \
    X(A_FREE, 1)          /* top of the class's free stack, -1 when empty */               \
    X(A_OFF_NEXT, 2)      /* word offset (in the arena) of the class's next-free table */  \
    X(A_OFF_OWNER, 3)     /* word offset of the owner table: 0 free, slot + 1, or      */  \
                          /* -(ring + 1) for a block in that client's cache */            \
    X(A_DATA, 4)          /* word offset of the class's blocks in the arena data */        \
    X(A_BLOCK_WORDS, 5)                                                                    \
    X(OWNER_FREE, 0)                                                                       \
    X(BLOCK_REF_SHIFT, 32)   /* a block named in one word: class << 32 | index */
CONTRACT_INT(ARENA)
#define ARENA_CLASS_BYTES(c) (64LL << (2 * (c)))   /* 64, 256, 1024, 4096 */
_Static_assert(ARENA_CLASS_BYTES(ARENA_CLASSES - 1) == MAX_PAYLOAD, "MAX_PAYLOAD");
#define OWNER_SLOT(s) ((i64)(s) + 1)
#define OWNER_RING(r) (-(i64)(r) - 1)
/* A block named by its class and index in one word (what op_store returns) */
#define BLOCK_REF_MAKE(cls, block) (((i64)(cls) << BLOCK_REF_SHIFT) | (i64)(block))
#define BLOCK_REF_CLASS(r) ((r) >> BLOCK_REF_SHIFT)
#define BLOCK_REF_INDEX(r) ((r) & (((i64)1 << BLOCK_REF_SHIFT) - 1))

/* ---- rings: single producer, single consumer, and their records ---------------------- */
#define RINGS(X)                                                                           \
    X(RING_HEAD, 0)       /* records ever published: the producer's word */                \
    X(RING_TAIL, 8)       /* records ever consumed: the consumer's word (own cache line) */ \
    X(RING_HEADER_WORDS, 16)                                                               \
    /* producer ring (client -> coordinator): handle, handle ^ CHECK_SUBMIT schedules,  */ \
    /* ^ CHECK_CANCEL asks the coordinator to retire a slot a cancel won, ^ CHECK_RESET */ \
    /* to relink (and journal) a timer a reset moved */                                   \
    X(PRODUCER_RECORD, 2)                                                                  \
    X(PR_HANDLE, 0)                                                                        \
    X(PR_CHECK, 1)                                                                         \
    /* dispatch ring (reaper -> executor); DR_FIRED_NS's top bits: who claimed it (ring.h) */ \
    X(DISPATCH_RECORD, 2)                                                                  \
    X(DR_HANDLE, 0)                                                                        \
    X(DR_FIRED_NS, 1)                                                                      \
    X(DR_CLAIM_SHIFT, 62)                                                                  \
    X(DR_CLAIM_RUN, 1)    /* its executor claimed it: it runs (or ran, or crashed) there */ \
    X(DR_CLAIM_TAKEN, 2)  /* the reaper took it from a stuck executor: runs elsewhere */   \
    /* result ring (executor -> reaper) */                                                \
    X(RESULT_RECORD, 5)                                                                    \
    X(RR_HANDLE, 0)                                                                        \
    X(RR_OUTCOME, 1)      /* OUTCOME_* */                                                  \
    X(RR_SEQ, 2)          /* its dispatch record's sequence number */                      \
    X(RR_LATENESS_US, 3)                                                                   \
    X(RR_DURATION_US, 4)                                                                   \
    /* outcome ring (freer -> waiting client), and its header's spare words */            \
    X(OUTQ_RECORD, 2)                                                                      \
    X(OQ_HANDLE, 0)                                                                        \
    X(OQ_CODE, 1)                                                                          \
    X(OUTQ_DROPPED, 2)    /* records that did not fit (the client rechecks its waiters) */ \
    X(OUTQ_SLEEPING, 3)   /* the client's listener is waiting on OUTQ_BELL */              \
    X(OUTQ_BELL, 4)       /* a 32-bit futex word: bumped after a push to a sleeper */
CONTRACT_INT(RINGS)

/* ---- what a call did: its return codes and result arrays ----------------------------- */
#define RESULTS(X)                                                                         \
    /* what a cancel did (slot_cancel) */                                                 \
    X(CANCEL_LOST, 0)     /* nothing: fired already, cancelled already, or stale */        \
    X(CANCEL_WON, 1)      /* PENDING/SUBMITTED -> CANCELLED: the task will never run */    \
    X(CANCEL_STOPPED, 2)  /* FIRING -> STOPPING: this run goes on, no further runs */      \
    /* what a reset did (slot_reset) */                                                   \
    X(RESET_LOST, 0)      /* nothing: fired, cancelled, ended, or a stale handle */        \
    X(RESET_WON, 1)       /* the timer runs at the new deadline, not the old one */        \
    X(RESET_NOT_TIMER, 2) /* an operation: its timeout is not moved by reset */            \
    X(RESET_BUSY, 3)      /* another client's reset held the slot past the wait */         \
    /* how a run ended (an executor's result record) */                                   \
    X(OUTCOME_OK, 1)                                                                       \
    X(OUTCOME_ERROR, 2)                                                                    \
    X(OUTCOME_CRASHED, 3)                                                                  \
    /* link_records' result array (slot_link_records) */                                  \
    X(LINK_RESULT_WORDS, 5)                                                                \
    X(LR_LINKED, 0)                                                                        \
    X(LR_STALE, 1)        /* retired since, linked already, or its cancel applied */       \
    X(LR_GARBAGE, 2)      /* not a record of this ring's client */                         \
    X(LR_EARLIEST, 3)     /* the earliest deadline linked (min with its input) */          \
    X(LR_RETIRED, 4)      /* cancelled slots retired */                                    \
    /* settle's result array (slot_settle) */                                             \
    X(SETTLE_RESULT_WORDS, 2)                                                              \
    X(SR_FREED, 0)                                                                         \
    X(SR_REARMED, 1)
CONTRACT_INT(RESULTS)

/* ---- outcomes as a waiting client sees them (purgatory.c; waiters.c) ---------------
 * An outcome: generation << 32 | code; code = OUTCOME_* or OC_CANCELLED, | OC_COMPLETED or
 * OC_EXPIRED for an operation; OC_NONE for a use that ended without one (a dead client's
 * slot reclaimed, a deadline refused). A FREE slot's payload word (S_PAYLOAD) holds the
 * outcome of its last use, written by the freer before the free, until the slot is
 * reserved again (then its next client writes its own payload there). The outcome ring's
 * records and header words are in RINGS (OUTQ_*, OQ_*). */
#define OUTCOME_CODES(X)                                                                   \
    X(OC_NONE, 0)                                                                          \
    X(OC_CANCELLED, 4)                                                                     \
    X(OC_TASK_MASK, 0xF)                                                                   \
    X(OC_COMPLETED, 0x10)                                                                  \
    X(OC_EXPIRED, 0x20)                                                                    \
    X(OUT_CODE_MASK, 0xFF)
CONTRACT_INT(OUTCOME_CODES)
#define OUT_MAKE(gen, code) ((((i64)(gen) & GS_GEN_MASK) << GS_GEN_SHIFT) | (i64)(code))
#define OUT_GEN(w) (((w) >> GS_GEN_SHIFT) & GS_GEN_MASK)
#define OUT_CODE(w) ((w) & OUT_CODE_MASK)

/* ---- the purgatory's watch lists (the "watch" region; all under the segment lock) ----
 * A hash table of chains: header words, then WT_BUCKETS(n) chain heads (-1: empty), then
 * entries of WE_WORDS: key hash, operation handle, next entry (-1: end). Free entries
 * form a stack through WE_NEXT with WE_HANDLE = -1. */
#define WATCH_LISTS(X)                                                                     \
    X(WT_HEADER, 8)                                                                        \
    X(WT_NBUCKETS, 0)                                                                      \
    X(WT_CAPACITY, 1)                                                                      \
    X(WT_FREE, 2)                                                                          \
    X(WT_USED, 3)                                                                          \
    X(WT_CURSOR, 4)       /* the next bucket the reaper's purge step looks at */           \
    X(WT_PURGED, 5)       /* entries of finished operations purged, ever */                \
    X(WE_WORDS, 4)                                                                         \
    X(WE_KEY, 0)                                                                           \
    X(WE_HANDLE, 1)                                                                        \
    X(WE_NEXT, 2)                                                                          \
    X(WE_BLOCK, 3)        /* the operation's arena block: class << 32 | block (op_store) */
CONTRACT_INT(WATCH_LISTS)

/* ---- the waiter table (the "waiters" region; waiters.c) -------------------------------
 * Who waits for which handle's outcome, found by handle: WAIT_HEADER words, then
 * WA_NBUCKETS (a power of two) buckets; a bucket is WAIT_WAYS key words (one cache line),
 * then WAIT_WAYS value words. A handle's entries are in one of its two buckets. An entry
 * belongs to the client that claimed it (lock-free, by CAS of an empty key) until that
 * client empties it again; the freer of the handle's slot only reads the key and, once,
 * writes the outcome (value, then WK_DONE). A zeroed region is an empty table.
 * A key: WK_EMPTY, WK_OF(h) (a client waits for handle h >= 0), WK_DONE | WK_OF(h) (h's
 * outcome is in the value), or WK_CLAIMED(ring) = WK_CLAIMED_BASE - ring (the client of
 * `ring` is writing the value; no handle with a slot below 2^31 gives such a key). A
 * value: ring + 1 of the waiting client (WV_RING); once done, also the outcome's code
 * (WV_CODE) and the handle's generation (bits 32..62, as OUT_GEN). */
#define WAITERS(X)                                                                         \
    X(WAIT_HEADER, 8)                                                                      \
    X(WA_NBUCKETS, 0)                                                                      \
    X(WA_REFUSED, 1)      /* asks refused: both buckets full (an atomic add, any client) */ \
    X(WA_WAITING, 2)      /* asks under way: at least the entries claimed (seq_cst adds) */ \
    X(WAIT_WAYS, 8)                                                                        \
    X(WAIT_BUCKET_WORDS, 2 * WAIT_WAYS)                                                    \
    X(WK_EMPTY, 0)                                                                         \
    X(WK_CLAIMED_BASE, -2)                                                                 \
    X(WV_RING_MASK, 0xFFFF)                                                                \
    X(WV_CODE_SHIFT, 16)                                                                   \
    X(WV_CODE_MASK, 0xFF)
CONTRACT_INT(WAITERS)
#define WAITER_WORDS(X) X(WK_DONE, INT64_MIN)
CONTRACT_I64(WAITER_WORDS)
#define WK_OF(h) ((i64)(h) + 1)
#define WK_CLAIMED(ring) ((i64)WK_CLAIMED_BASE - (i64)(ring))
#define WK_IS_CLAIMED(k) ((k) <= WK_CLAIMED_BASE && (k) >= WK_CLAIMED_BASE - (i64)WV_RING_MASK)
#define WK_CLAIMED_RING(k) ((i64)WK_CLAIMED_BASE - (k))
#define WV_MAKE(gen, code, ring)                                              \
    (OUT_MAKE(gen, ((i64)(code) & WV_CODE_MASK) << WV_CODE_SHIFT) |           \
     (((i64)(ring) + 1) & WV_RING_MASK))
#define WV_RING(v) (((v) & WV_RING_MASK) - 1)
#define WV_CODE(v) (((v) >> WV_CODE_SHIFT) & WV_CODE_MASK)
#define WV_GEN(v) OUT_GEN(v)

/* ---- per-writer counter rows (COUNTER_WORDS words; every word has one writer) -------- */
#define COUNTERS(X)                                                                        \
    X(COUNTER_WORDS, 24)                                                                   \
    X(C_SCHEDULED, 0)                                                                      \
    X(C_FIRED, 1)                                                                          \
    X(C_CANCELLED, 2)     /* cancels won (counted by the cancelling client) */             \
    X(C_COMPLETED, 3)                                                                      \
    X(C_ERRORS, 4)                                                                         \
    X(C_CRASHED, 5)                                                                        \
    X(C_GARBAGE, 6)                                                                        \
    X(C_STALE, 7)                                                                          \
    X(C_REARMED, 8)                                                                        \
    X(C_EARLY, 9)                                                                          \
    X(C_LINKED, 10)                                                                        \
    X(C_FREED, 11)                                                                         \
    X(C_RETIRED, 12)      /* cancelled slots unlinked and freed */                         \
    X(C_JOURNAL_BYTES, 13) /* bytes this writer wrote to its journal files */              \
    X(C_JOURNAL_SYNCS, 14) /* fdatasync calls on them */                                   \
    X(C_OPS_COMPLETED, 15) /* operations this writer's completions won */                  \
    X(C_OPS_WATCHED, 16)  /* operations this client watched */                             \
    X(C_OPS_EXPIRED, 17)  /* operations the reaper took at their timeout */                \
    X(C_RESETS, 18)       /* resets won (counted by the resetting client) */              \
    X(C_TAKEN_OVER, 19)   /* dispatch records the reaper took from stuck executors */
CONTRACT_INT(COUNTERS)

/* ---- the journal's retention, and the lateness histogram: bucket 0 is < 1 us; i >= 1
 * covers [2^((i-1)/8), 2^(i/8)) us ------------------------------------------------------ */
#define WINDOWS(X)                                                                         \
    X(JOURNAL_WINDOW, 4096)   /* coordinator segments a service can have open at once */   \
    X(HIST_BUCKETS, 256)                                                                   \
    X(HIST_PER_OCTAVE, 8)
CONTRACT_INT(WINDOWS)

/* Every list above, for the extension's export (module.c) and Python */
#define CONTRACT_LISTS(L)                                                                  \
    L(WHEEL_HEADER) L(NODE_FIELDS) L(STATE_WORD) L(SLOT_RULES) L(HANDLES) L(WIDE_WORDS)    \
    L(LIMITS) L(SIDE_RECORD) L(PAYLOADS) L(ARENA) L(RINGS) L(RESULTS) L(OUTCOME_CODES)     \
    L(WATCH_LISTS) L(WAITERS) L(WAITER_WORDS) L(COUNTERS) L(WINDOWS)

#endif
