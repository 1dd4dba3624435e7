/* claim_scenario.c: a dispatch ring's claims (ring.h, dispatch_claim and dispatch_take)
 * between its executor and the reaper taking records over from it while it is stuck
 * (service/processes/reaper.py, take_over). The reaper thread publishes records (handle =
 * seq) on a ring small enough to wrap and fill all the time and, now and then, takes the
 * records behind the one the executor says it runs (its `started` word + 1 on), handing
 * each to "another executor" (it counts the run itself). The executor thread runs batches as
 * executor.c does: store `started`, claim the record (DR_CLAIM_RUN), run it if the claim
 * won, else skip it; consume the batch. It stalls in a "task" now and then, so takes land
 * while it is stuck, as it wakes, and as it claims. Checked: every record ran exactly once
 * (by its executor or after a take, never both, never neither), and each taken handle is
 * the record's own. */
#include <sched.h>
#include <stdlib.h>

#include "world.h"

#define CCAP 16
#define CBATCH 6

typedef struct {
    Ring r;
    i64 n, seed, started;   /* started: the executor's word (X_STARTED), -1 between batches */
    i64 *runs;              /* per record: runs seen (relaxed atomics: bookkeeping only) */
    i64 ran, taken, bad;
} ClaimArg;

static void ran_once(ClaimArg *a, i64 h) {
    if (h < 0 || h >= a->n) {
        fprintf(stderr, "FAIL: claim: handle %lld is no record's\n", (long long)h);
        __atomic_fetch_add(&a->bad, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&a->runs[h], 1, __ATOMIC_RELAXED);
}

static void stall(u64 *rng) {   /* a task: mostly short, sometimes long enough to be "stuck" */
    u64 r = rnd(rng) % 16;
    if (r == 0)
        for (int i = 0; i < 4; i++) sched_yield();
    else if (r < 4)
        for (volatile int i = 0; i < (int)r * 200; i++) {}
}

static void *claim_executor(void *arg) {
    ClaimArg *a = arg;
    u64 rng = (u64)a->seed * 19 + 7;
    for (i64 done = 0; done < a->n;) {
        i64 tail, n = ring_avail(&a->r, &tail);
        if (n < 0) {
            fprintf(stderr, "FAIL: claim: corrupt head at tail %lld\n", (long long)tail);
            __atomic_fetch_add(&a->bad, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        if (n > CBATCH) n = CBATCH;
        for (i64 i = 0; i < n; i++) {
            i64 seq = tail + i;
            relaxed_store(&a->started, seq);
            if (!dispatch_claim(&a->r, seq, DR_CLAIM_RUN)) continue;   /* taken: skipped */
            i64 h = ring_rec(&a->r, seq)[DR_HANDLE];
            if (h != seq) {
                fprintf(stderr, "FAIL: claim: record %lld holds handle %lld\n",
                        (long long)seq, (long long)h);
                __atomic_fetch_add(&a->bad, 1, __ATOMIC_RELAXED);
            }
            ran_once(a, h);
            a->ran++;
            stall(&rng);
        }
        ring_consume(&a->r, n);
        relaxed_store(&a->started, -1);
        done += n;
        if (!n) sched_yield();
    }
    return NULL;
}

static void *claim_reaper(void *arg) {
    ClaimArg *a = arg;
    u64 rng = (u64)a->seed * 23 + 11;
    for (i64 seq = 0; seq < a->n;) {
        i64 k = 1 + (i64)(rnd(&rng) % 5), recs[5 * DISPATCH_RECORD];
        if (k > a->n - seq) k = a->n - seq;
        for (i64 i = 0; i < k; i++) {
            recs[DISPATCH_RECORD * i + DR_HANDLE] = seq + i;
            recs[DISPATCH_RECORD * i + DR_FIRED_NS] = 1000 * (seq + i) + 1;   /* unclaimed */
        }
        i64 pushed = ring_push(&a->r, recs, k);
        seq += pushed;
        jitter(&rng);
        if (rnd(&rng) % 3 == 0) {   /* judged stuck: take what waits behind its record */
            i64 s = relaxed_load(&a->started), out[CCAP];
            if (s < 0) continue;
            i64 t = dispatch_take(&a->r, s + 1, out, 1 + (i64)(rnd(&rng) % CCAP));
            for (i64 i = 0; i < t; i++) ran_once(a, out[i]);   /* run by another executor */
            a->taken += t;
        }
        if (!pushed) sched_yield();
    }
    return NULL;
}

int run_claim(i64 n, i64 seed) {
    static i64 words[RING_HEADER_WORDS + CCAP * DISPATCH_RECORD];
    i64 *runs = calloc((size_t)n, sizeof *runs);
    ClaimArg a = {{words, CCAP, DISPATCH_RECORD}, n, seed, -1, runs, 0, 0, 0};
    pthread_t e, r;
    pthread_create(&e, NULL, claim_executor, &a);
    pthread_create(&r, NULL, claim_reaper, &a);
    pthread_join(r, NULL);
    pthread_join(e, NULL);
    i64 twice = 0, never = 0;
    for (i64 h = 0; h < n; h++) {
        if (runs[h] > 1 && twice++ < 5)
            fprintf(stderr, "FAIL: claim: record %lld ran %lld times\n", (long long)h,
                    (long long)runs[h]);
        if (runs[h] == 0 && never++ < 5)
            fprintf(stderr, "FAIL: claim: record %lld never ran\n", (long long)h);
    }
    free(runs);
    printf("claim: %lld records, %lld ran by their executor, %lld taken; ran twice %lld, "
           "never %lld; failures %lld\n",
           (long long)n, (long long)a.ran, (long long)a.taken, (long long)twice,
           (long long)never, (long long)(a.bad + twice + never));
    return a.bad + twice + never != 0;
}
