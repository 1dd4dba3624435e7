/* contract.h: the one definition of every shared-memory encoding shmwheel uses.
 *
 * Everything that reads or writes the wheel array, the side table, the payload arena or a
 * ring takes its word indices, shifts and masks from here: the C core directly, Python
 * through the constants the extension exports (shmwheel/segment/contract.py re-exports
 * them with accessor functions). Nobody re-derives a shift or a mask.
 *
 * All words are int64 in host byte order (x86-64 / aarch64 little-endian).
 */
#ifndef SHMWHEEL_CONTRACT_H
#define SHMWHEEL_CONTRACT_H

#include <stdint.h>

typedef int64_t i64;
typedef uint64_t u64;

/* ---- the wheel array: header words ------------------------------------------------- */
#define H_MAGIC 0
#define H_VERSION 1
#define H_CAPACITY 2      /* entry slots */
#define H_LEVELS 3
#define H_WHEEL 4         /* Kafka's wheel_size W */
#define H_SLOTS 5         /* buckets stored per level: 2 W (room to pre-cascade) */
#define H_WORDS 6         /* 64-bit bitmap words per level */
#define H_TICK 7
#define H_NOW 8           /* the wheel's clock; written under the segment lock only */
#define H_FREE 9          /* top of the free-slot stack, -1 when empty */
#define H_PENDING 10      /* entries linked in buckets (PENDING, CANCELLED, COMPLETED) */
#define H_OFF_TICKS 11
#define H_OFF_BEXP 12
#define H_OFF_BITS 13
#define H_OFF_NODES 14
#define H_TOTAL 15
#define H_SENTINELS 16    /* B = levels * slots: nodes [0, B) are bucket sentinels */
#define WHEEL_HEADER_WORDS 32

#define WHEEL_MAGIC 0x53484D5748454C32LL /* "SHMWHEL2" */
#define WHEEL_LAYOUT_VERSION 2

/* ---- a node: one 32-byte record; entry slot s is node B + s -------------------------- */
#define NODE_WORDS 4
#define F_NEXT 0          /* bucket list, or the free stack; -1 when in neither */
#define F_PREV 1          /* bucket list; -1 iff the node is not linked in a bucket */
#define F_DEADLINE 2      /* exact deadline (time units of the wheel) */
#define F_GS 3            /* the state word: generation << 32 | state (see below) */

/* The state word. Its low byte is the slot's state, bits 32..62 its generation. It is
 * the one word of a slot that several processes write concurrently, so it changes only
 * through slot_move (atomics.h), which writes it with the atomic the transition table
 * below names. Bits 8..31 serve reset (slots.c, slot_reset): outside RESETTING, bits
 * 16..31 are the reset sequence, bumped by every reset, so a word read before a reset
 * never equals the word after it (no ABA for whoever decided on the deadline in between);
 * during RESETTING, bits 8..15 are the state the reset took the slot from (PENDING or
 * SUBMITTED) and bits 16..31 the ring of the client holding it. */
#define GS_STATE_MASK 0xFFLL
#define GS_GEN_SHIFT 32
#define GS_GEN_MASK 0x7FFFFFFFLL
#define GS_FROM_SHIFT 8
#define GS_FROM_MASK 0xFFLL
#define GS_AUX_SHIFT 16
#define GS_AUX_MASK 0xFFFFLL
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
#define GS_WITH_FROM(gs, from) \
    (((gs) & ~(GS_FROM_MASK << GS_FROM_SHIFT)) | (((i64)(from) & GS_FROM_MASK) << GS_FROM_SHIFT))

/* ---- the slot state machine, as data -------------------------------------------------
 * Every state and every legal transition of a slot's state word is in the two tables
 * below, and nowhere else: the C core makes each transition by naming its row
 * (slot_move(w, seen, want, TR_x), atomics.h); Python reads the same rows from the
 * extension (shmwheel/segment/states.py); the state diagram in docs/concepts.md is
 * generated from them; the hypothesis state machines (tests/test_slot_machine.py) check
 * every transition they observe against them. slots.h says why the rules hold.
 *
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
#define TR_LOCKED 1
#define TR_LOCKFREE 2
#define TR_CAS 1
#define TR_STORE 2
#define TR_GEN_KEEP 0
#define TR_GEN_BUMP 1
#define TR_GEN_SET 2
#define SM(st) (1 << ST_##st)
#define SM_BAD (1 << 15)
#define SM_ANY 0xFFFF

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
 * generation, so a stale handle never matches a reused slot. Handles are >= 0. */
#define HANDLE_SLOT_MASK 0xFFFFFFFFLL
#define HANDLE_MAKE(gen, slot) ((((i64)(gen) & GS_GEN_MASK) << GS_GEN_SHIFT) | (i64)(slot))
#define HANDLE_SLOT(h) ((h) & HANDLE_SLOT_MASK)
#define HANDLE_GEN(h) (((h) >> GS_GEN_SHIFT) & GS_GEN_MASK)

/* Results of the wheel's insert besides a handle (>= 0) */
#define INS_ALREADY_DUE (-1)
#define INS_OUT_OF_RANGE (-2)
#define INS_NO_SLOT (-3)

#define NO_TIME INT64_MIN
#define NEVER INT64_MAX

/* ---- the side table: 2 words per slot (task, payload, owner) ------------------------- */
#define SIDE_WORDS 2
#define S_META 0
#define S_PAYLOAD 1       /* up to 8 inline msgpack bytes, or an arena block index */

/* meta = task | flags << 16 | arena class << 24 | payload length << 32 | ring << 48 */
#define META_TASK_SHIFT 0
#define META_TASK_MASK 0xFFFFLL
#define META_FLAGS_SHIFT 16
#define META_FLAGS_MASK 0xFFLL
#define META_CLASS_SHIFT 24
#define META_CLASS_MASK 0xFFLL
#define META_LEN_SHIFT 32
#define META_LEN_MASK 0xFFFFLL
#define META_RING_SHIFT 48
#define META_RING_MASK 0xFFFFLL
#define META_FIELD(m, F) (((m) >> META_##F##_SHIFT) & META_##F##_MASK)
#define META_MAKE(task, flags, cls, len, ring)                              \
    ((((i64)(task) & META_TASK_MASK) << META_TASK_SHIFT) |                  \
     (((i64)(flags) & META_FLAGS_MASK) << META_FLAGS_SHIFT) |               \
     (((i64)(cls) & META_CLASS_MASK) << META_CLASS_SHIFT) |                 \
     (((i64)(len) & META_LEN_MASK) << META_LEN_SHIFT) |                     \
     (((i64)(ring) & META_RING_MASK) << META_RING_SHIFT))

#define FLAG_KEY 1        /* the blob is msgpack [key, payload] */
#define FLAG_ARENA 2      /* the payload lives in an arena block */
#define FLAG_REPEAT 8     /* the arena block starts with (period, runs): REPEAT_HEADER */
#define FLAG_OP 16        /* an operation (the purgatory): the arena block starts with its
                             OP_HEADER, then msgpack [keys, payload]; the slot's task is its
                             on_expire task */
#define FLAG_COMPLETED 32 /* set by the reaper as it takes a COMPLETED operation: the task
                             is now its on_complete task */
#define TASK_NONE 0xFFFF  /* an operation without an on_complete / on_expire task */
/* An operation's block header: word 0 = required | on_complete << 32 | nkeys << 48;
 * word OPH_COUNT = its count, the amount signalled to it so far (written under the
 * segment lock only; 0 as op_store stores the block) */
#define OP_HEADER 16
#define OPH_COUNT 1
#define OPH_REQUIRED_MASK 0xFFFFFFFFLL
#define OPH_TASK_SHIFT 32
#define OPH_NKEYS_SHIFT 48
#define OPH_MAKE(required, on_complete, nkeys)                                     \
    (((i64)(required) & OPH_REQUIRED_MASK) | (((i64)(on_complete) & 0xFFFFLL) << OPH_TASK_SHIFT) | \
     (((i64)(nkeys) & 0x7FFFLL) << OPH_NKEYS_SHIFT))
#define OPH_REQUIRED(w) ((w) & OPH_REQUIRED_MASK)
#define OPH_TASK(w) (((w) >> OPH_TASK_SHIFT) & 0xFFFFLL)
#define OPH_NKEYS(w) (((w) >> OPH_NKEYS_SHIFT) & 0x7FFFLL)
#define REPEAT_HEADER 16  /* bytes before a repeating timer's payload in its block */
#define INLINE_MAX 8      /* bytes of msgpack stored in the payload word itself */
#define NIL_INLINE 0xC0   /* msgpack nil: the payload word of a None payload */

/* ---- the payload arena: 4 size classes, each a block table and a free stack ---------- */
#define ARENA_CLASSES 4
#define ARENA_CLASS_BYTES(c) (64LL << (2 * (c)))   /* 64, 256, 1024, 4096 */
#define MAX_PAYLOAD ARENA_CLASS_BYTES(ARENA_CLASSES - 1)
#define A_CLASS_WORDS 8   /* header words per class, at the arena's start */
#define A_NBLOCKS 0
#define A_FREE 1          /* top of the class's free stack, -1 when empty */
#define A_OFF_NEXT 2      /* word offset (in the arena) of the class's next-free table */
#define A_OFF_OWNER 3     /* word offset of the owner table: 0 free, slot + 1, or
                             -(ring + 1) for a block in that client's cache */
#define A_DATA 4          /* word offset of the class's blocks in the arena data */
#define A_BLOCK_WORDS 5
#define OWNER_FREE 0
#define OWNER_SLOT(s) ((i64)(s) + 1)
#define OWNER_RING(r) (-(i64)(r) - 1)

/* ---- rings: single producer, single consumer ----------------------------------------- */
#define RING_HEAD 0       /* records ever published: the producer's word */
#define RING_TAIL 8       /* records ever consumed: the consumer's word (own cache line) */
#define RING_HEADER_WORDS 16
/* producer ring: (handle, handle ^ CHECK_SUBMIT) schedules, (handle, handle ^
 * CHECK_CANCEL) asks the coordinator to retire a slot a cancel won, (handle, handle ^
 * CHECK_RESET) to relink (and journal) a timer a reset moved */
#define PRODUCER_RECORD 2
#define CHECK_SUBMIT 0x5A17C0DE3A11F00DLL
#define CHECK_CANCEL 0x2C4BCE1D0F5EA5EDLL
#define CHECK_RESET 0x6B3D91E47C25A0F1LL
/* dispatch ring (reaper -> executor): handle, fired_ns */
#define DISPATCH_RECORD 2
/* result ring (executor -> reaper): handle, outcome, dispatch seq, lateness_us, duration_us */
#define RESULT_RECORD 5

/* what a cancel did (slot_cancel) */
#define CANCEL_LOST 0     /* nothing: fired already, cancelled already, or a stale handle */
#define CANCEL_WON 1      /* PENDING/SUBMITTED -> CANCELLED: the task will never run */
#define CANCEL_STOPPED 2  /* FIRING -> STOPPING: this run goes on, no further runs */

/* what a reset did (slot_reset) */
#define RESET_LOST 0      /* nothing: fired, cancelled, ended, or a stale handle */
#define RESET_WON 1       /* the timer runs at the new deadline, not the old one */
#define RESET_NOT_TIMER 2 /* an operation: its timeout is not moved by reset */
#define RESET_BUSY 3      /* another client's reset held the slot past the wait */

#define OUTCOME_OK 1
#define OUTCOME_ERROR 2
#define OUTCOME_CRASHED 3

/* ---- outcomes as a waiting client sees them (purgatory.c; waiters.c) ---------------
 * An outcome: generation << 32 | code; code = OUTCOME_* or OC_CANCELLED, | OC_COMPLETED or
 * OC_EXPIRED for an operation; OC_NONE for a use that ended without one (a dead client's
 * slot reclaimed, a deadline refused). A FREE slot's payload word (S_PAYLOAD) holds the
 * outcome of its last use, written by the freer before the free, until the slot is
 * reserved again (then its next client writes its own payload there). */
#define OC_NONE 0
#define OC_CANCELLED 4
#define OC_TASK_MASK 0xF
#define OC_COMPLETED 0x10
#define OC_EXPIRED 0x20
#define OUT_MAKE(gen, code) ((((i64)(gen) & GS_GEN_MASK) << GS_GEN_SHIFT) | (i64)(code))
#define OUT_GEN(w) (((w) >> GS_GEN_SHIFT) & GS_GEN_MASK)
#define OUT_CODE(w) ((w) & 0xFFLL)
/* outcome ring (freer -> waiting client): handle, code; its header's spare words: */
#define OUTQ_RECORD 2
#define OUTQ_DROPPED 2    /* records that did not fit (the client rechecks its waiters) */
#define OUTQ_SLEEPING 3   /* the client's listener is waiting on OUTQ_BELL */
#define OUTQ_BELL 4       /* a 32-bit futex word: bumped after a push to a sleeper */

/* ---- the purgatory's watch lists (the "watch" region; all under the segment lock) ----
 * A hash table of chains: header words, then WT_BUCKETS(n) chain heads (-1: empty), then
 * entries of WE_WORDS: key hash, operation handle, next entry (-1: end). Free entries
 * form a stack through WE_NEXT with WE_HANDLE = -1. */
#define WT_HEADER 8
#define WT_NBUCKETS 0
#define WT_CAPACITY 1
#define WT_FREE 2
#define WT_USED 3
#define WT_CURSOR 4       /* the next bucket the reaper's purge step looks at */
#define WT_PURGED 5       /* entries of finished operations purged, ever */
#define WE_WORDS 4
#define WE_KEY 0
#define WE_HANDLE 1
#define WE_NEXT 2
#define WE_BLOCK 3        /* the operation's arena block: class << 32 | block (op_store) */

/* ---- the waiter table (the "waiters" region; waiters.c) -------------------------------
 * Who waits for which handle's outcome, found by handle: WAIT_HEADER words, then
 * WA_NBUCKETS (a power of two) buckets; a bucket is WAIT_WAYS key words (one cache line),
 * then WAIT_WAYS value words. A handle's entries are in one of its two buckets. An entry
 * belongs to the client that claimed it (lock-free, by CAS of an empty key) until that
 * client empties it again; the freer of the handle's slot only reads the key and, once,
 * writes the outcome (value, then WK_DONE). A zeroed region is an empty table. */
#define WAIT_HEADER 8
#define WA_NBUCKETS 0
#define WA_REFUSED 1      /* asks refused: both buckets full (an atomic add, any client) */
#define WAIT_WAYS 8
#define WAIT_BUCKET_WORDS (2 * WAIT_WAYS)
#define WK_EMPTY 0LL
#define WK_OF(h) ((i64)(h) + 1)          /* a client waits for handle h (h >= 0) */
#define WK_DONE INT64_MIN                /* | WK_OF(h): h's outcome is in the value */
/* claimed by the client of `ring`, which is writing the value (-2 - ring: no handle with
 * a slot below 2^31 gives such a key, waiting or done) */
#define WK_CLAIMED(ring) (-2 - (i64)(ring))
#define WK_IS_CLAIMED(k) ((k) <= -2 && (k) >= -2 - 0xFFFFLL)
#define WK_CLAIMED_RING(k) (-2 - (k))
/* value: ring + 1 (bits 0..15) of the waiting client; once done, the outcome's code
 * (bits 16..23) and the handle's generation (bits 32..62) */
#define WV_MAKE(gen, code, ring) \
    (OUT_MAKE(gen, ((i64)(code) & 0xFFLL) << 16) | (((i64)(ring) + 1) & 0xFFFFLL))
#define WV_RING(v) (((v) & 0xFFFFLL) - 1)
#define WV_CODE(v) (((v) >> 16) & 0xFFLL)
#define WV_GEN(v) OUT_GEN(v)

/* ---- per-writer counter rows (COUNTER_WORDS words; every word has one writer) -------- */
#define COUNTER_WORDS 24
#define C_SCHEDULED 0
#define C_FIRED 1
#define C_CANCELLED 2     /* cancels won (counted by the cancelling client) */
#define C_COMPLETED 3
#define C_ERRORS 4
#define C_CRASHED 5
#define C_GARBAGE 6
#define C_STALE 7
#define C_REARMED 8
#define C_EARLY 9
#define C_LINKED 10
#define C_FREED 11
#define C_RETIRED 12      /* cancelled slots unlinked and freed */
#define C_JOURNAL_BYTES 13 /* bytes this writer wrote to its journal files */
#define C_JOURNAL_SYNCS 14 /* fdatasync calls on them */
#define C_OPS_COMPLETED 15 /* operations this writer's completions won */
#define C_OPS_WATCHED 16  /* operations this client watched */
#define C_OPS_EXPIRED 17  /* operations the reaper took at their timeout */
#define C_RESETS 18       /* resets won (counted by the resetting client) */

/* ---- the journal's retention: live-timer counters per coordinator segment ------------ */
#define JOURNAL_WINDOW 4096   /* segments a service can have open at once */

/* ---- lateness histogram: bucket 0 is < 1 us; i >= 1 covers [2^((i-1)/8), 2^(i/8)) us -- */
#define HIST_BUCKETS 256
#define HIST_PER_OCTAVE 8

/* ---- task error records (the "errors" region; errlog.c owns it) ---------------------
 * ERR_REGION_HEADER words (ERR_STAMP: the stamps drawn so far, every executor's
 * fetch-and-add), then a log per executor: ERR_HEADER_WORDS words (ERR_NEXT: records it
 * ever wrote; ERR_EVICTED: the stamp of the newest record it has overwritten; both its
 * single writer's), then ERR_RECORDS records of ERR_RECORD_WORDS. Record k is at position
 * k % ERR_RECORDS: the newest ERR_RECORDS failures of each executor are kept. A record:
 * ER_SEQ is 2k + 1 while record k is written and 2k + 2 once it is complete (0: never
 * written); the failed timer's handle; its stamp (larger for every later record, whatever
 * the executor); its run number (1 for a one-shot); its task id; ER_FLAGS (ERF_REPEATING:
 * a repeating timer's run); the byte lengths of its texts (type | message << 16 |
 * traceback << 32); a checksum of those words and the texts (errlog.c, err_check); the
 * texts, UTF-8, back to back from ER_TEXT (the exception's type name at most ER_TYPE_MAX
 * bytes, its message ER_MESSAGE_MAX, all three ER_TEXT_BYTES). */
#define ERR_REGION_HEADER 8
#define ERR_STAMP 0
#define ERR_RECORDS 64
#define ERR_RECORD_WORDS 512      /* 4 KiB */
#define ERR_HEADER_WORDS 8
#define ERR_NEXT 0
#define ERR_EVICTED 1
#define ERR_LOG_WORDS (ERR_HEADER_WORDS + ERR_RECORDS * ERR_RECORD_WORDS)
#define ER_SEQ 0
#define ER_HANDLE 1
#define ER_STAMP 2
#define ER_RUN 3
#define ER_TASK 4
#define ER_FLAGS 5
#define ER_LENGTHS 6
#define ER_CHECK 7
#define ER_TEXT 8
#define ER_TEXT_BYTES ((ERR_RECORD_WORDS - ER_TEXT) * 8)   /* 4032 */
#define ER_TYPE_MAX 256
#define ER_MESSAGE_MAX 1024
#define ERF_REPEATING 1

#endif
