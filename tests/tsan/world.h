/* world.h: one service segment in process memory, and threads standing in for its
 * processes (the ThreadSanitizer harness of the native core; README.md here says why).
 *
 * The segment is laid out as segment/layout.py lays out a service's (the wheel array, the
 * side table, the arena, the purgatory's words, the outcome rings) and formatted by the
 * core's own functions (wheel_reset, watch_format, slot_rebuild). A pthread mutex stands
 * in for the segment lock wherever the service holds it; everything a client, an executor
 * or a freer does without the lock is the core's real lock-free code (slots.c,
 * slot_record.c, purgatory.c, ring.h). Each role has its own Seg, as each process has its
 * own attachment.
 *
 * The ledger: what every use of a slot (a handle) went through, for the scenarios'
 * functional checks. Its words are touched with relaxed atomics only, which create no
 * happens-before edge for ThreadSanitizer: the harness's bookkeeping must never order
 * what the code under test fails to order. It is read for the checks after the threads
 * are joined.
 */
#ifndef SHMWHEEL_TSAN_WORLD_H
#define SHMWHEEL_TSAN_WORLD_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

#include "ring.h"
#include "slot_record.h"
#include "slots.h"
#include "wheel.h"

#define MAX_CLIENTS 4
#define CAPACITY 384       /* slots: small, so slots and blocks are reused all the time */
#define GEN_MAX 8192       /* ledger entries per slot: uses of one slot in a run (the plain
                              repair run reuses a few slots over 2048 times) */
#define RING_CAP 16        /* producer, dispatch and result rings: often full */
#define OUTQ_CAP 8192      /* the service's is 1024 (segment/sizes.py, OUTQ_CAPACITY) */
#define WATCH_CAP 96
#define WAIT_BUCKETS 8     /* waiter table: 64 entries, fewer than its clients ask for */
#define WAITS 48           /* handles a client waits for at once (World.waits) */
#define BATCH 8            /* records a role takes per lock hold */
#define CACHE 12           /* a client's reserved slots / blocks per restock */

/* relaxed atomics for the harness's own words */
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

/* ---- the ledger: one entry per use of a slot ------------------------------------------ */
typedef struct {
    i64 deadline;        /* as scheduled */
    i64 kind;            /* K_* below, | K_* flags */
    i64 published;       /* its submit record went on the ring */
    i64 cancel_won, cancel_stopped, unsubmitted;
    i64 runs;            /* executor runs */
    i64 ran_deadline, ran_at, ran_flags;
    i64 resets_won, reset_last;   /* by its owner: the last deadline a reset won */
    i64 resets_other;    /* won by the hostile client (the check is then membership) */
    i64 reset_notimer;
    i64 watched;         /* outcome_watch: W_* below */
    i64 watch_out;       /* W_ENDED: the outcome it read then (0: no longer known) */
    i64 entry;           /* W_LIVE: its waiter entry + 1; 0 once its listener released it */
    i64 entry_out;       /* what the listener found in that entry (0: not done) */
    i64 slot_out;        /* and in the freed slot, as outcome_state read it (0: gone) */
    i64 notified, notified_code;   /* records on its client's outcome ring */
    i64 op_key, op_required, op_base;   /* an operation: its key, required amount, and the
                                           key's signals before its watch (World.signals) */
} Use;
#define W_LIVE 1         /* asked while its use was not over: it waits in an entry */
#define W_ENDED 2        /* asked after its use ended: nothing to wait for */
#define W_REFUSED 3      /* asked while live, but its buckets were full */
#define K_TIMER 1
#define K_ARENA 2
#define K_REPEAT 4
#define K_OP 8

/* ---- the world -------------------------------------------------------------------------- */
typedef struct {
    i64 *words;                 /* the segment */
    Seg base;                   /* the tables, as every attachment sees them */
    pthread_mutex_t lock;       /* the segment lock */
    int nclients, nexec;
    Ring prod[MAX_CLIENTS], dispatch[2], results[2];
    Use *ledger;                /* CAPACITY * GEN_MAX */
    i64 vnow;                   /* the clock clients read (relaxed); the reaper moves it */
    /* A ring's clients come one after another (incarnation 1, 2, ...): the scenario sets
     * how many before the threads start. A client that is gone stores its number in
     * client_gone (release: a process's death orders its writes before whoever sees it
     * dead); the coordinator drains and reclaims its ring, then stores the number in
     * ring_free (release), which the ring's next client waits for. */
    int incarnations[MAX_CLIENTS], client_gone[MAX_CLIENTS], ring_free[MAX_CLIENTS];
    int coord_done, reaper_done;
    int repair;                 /* the reaper now and then repairs (slot_rebuild), as the
                                   next holder of a lock whose holder died mid-update */
    i64 failures;               /* functional checks that failed (printed as they fail) */
    i64 lost_notify, gone_notify, refused, unsubmit_completed, unsubmit_reset, repairs;
    i64 waits[MAX_CLIENTS][WAITS];   /* handles + 1 each client waits for (relaxed), for its
                                        listener, which empties their entries */
    i64 signals[8];             /* check_and_complete calls per key (under the lock) */
    i64 board[64];              /* handles lately published by any client (relaxed): what
                                   a hostile client cancels and resets */
    i64 seed;
} World;

/* A client: its Seg and ring, its caches (refilled under the lock, as _restock). */
typedef struct {
    World *w;
    int ring;
    Seg seg;
    i64 cache[CACHE], blocks[CACHE];
    int ncache, nblocks;
    u64 rng;
    i64 recent[32];             /* handles it published lately (for cancel, reset, watch) */
    int nrecent;
    i64 repeating[64];          /* its repeating timers: cancelled before it goes */
    int nrepeating;
    int incarnation;
} Client;

void world_init(World *w, int nclients, int nexec, i64 seed);
void world_free(World *w);
Use *use_of(World *w, i64 h);
void fail(World *w, const char *fmt, ...);

static inline void lock(World *w) { pthread_mutex_lock(&w->lock); }
static inline void unlock(World *w) { pthread_mutex_unlock(&w->lock); }

/* randomness and interleaving */
u64 rnd(u64 *s);
void jitter(u64 *s);          /* now and then yield or spin a little */

/* ---- the service's roles (each a thread's loop body; service/ does the same) ------ */
void *coordinator_main(void *w);
void *reaper_main(void *w);
void *executor_main(void *arg);   /* arg: an ExecArg */
typedef struct { World *w; int index; } ExecArg;

/* ---- a client's calls -------------------------------------------------------------- */
/* the ring's next client: waits until the coordinator reclaimed the ring's last one */
void client_init(Client *c, World *w, int ring, int incarnation, u64 seed);
/* a RESERVED handle from the cache (restocked under the lock); -1 if none is free */
i64 client_take(Client *c);
/* schedule a timer (kind K_TIMER | K_ARENA? | K_REPEAT?) due at deadline: write, SUBMITTED,
 * publish; returns its handle, or -1 if no slot was free */
i64 client_schedule(Client *c, i64 kind, i64 deadline);
/* watch an operation on `key` (op_store under the lock, then as a schedule) */
i64 client_watch(Client *c, i64 key, i64 required, i64 deadline);
void client_cancel(Client *c, i64 h, int own);
void client_reset(Client *c, i64 h, i64 deadline, int own);
void client_outcome_watch(Client *c, i64 h);
void client_remember(Client *c, i64 h);
i64 client_pick(Client *c);         /* a handle it published lately, or -1 */
void client_finish(Client *c);      /* gone: the coordinator reclaims its ring */
int client_drain_outq(Client *c);   /* the outcome listener: records taken */
/* the listener's look at its client's waits: resolve those whose use ended (final: every
 * freer is done, so an entry not done then is a lost outcome) */
void client_check_waits(Client *c, int final);

/* the payload a handle's timer carries: a word of its own, or a block of them */
static inline i64 payload_word(i64 h, int i) {
    u64 x = (u64)h * 0x9E3779B97F4A7C15ULL + (u64)i * 0xBF58476D1CE4E5B9ULL;
    return (i64)((x ^ (x >> 31)) & 0x7FFFFFFFFFFFFFFFULL);
}

#endif
