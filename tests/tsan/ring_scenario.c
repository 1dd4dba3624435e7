/* ring_scenario.c: ring publish/consume (ring.h) between one producer thread and one
 * consumer thread, on a ring small enough to wrap and fill all the time. The producer
 * publishes records (seq, seq * K, checksum) in batches of random size; the consumer peeks
 * up to a random limit, checks every record is the next one and whole, and consumes. */
#include <sched.h>

#include "world.h"

#define RCAP 8
#define RREC 3
#define K 0x1E3779B97F4A7C15LL

typedef struct {
    Ring r;
    i64 n, seed, bad;
} RingArg;

static i64 check_of(i64 seq) { return payload_word(seq, 7) ^ (seq * K); }

static void *ring_producer(void *arg) {
    RingArg *a = arg;
    u64 rng = (u64)a->seed * 13 + 5;
    for (i64 seq = 0; seq < a->n;) {
        i64 k = 1 + (i64)(rnd(&rng) % 5), recs[5 * RREC];
        if (k > a->n - seq) k = a->n - seq;
        for (i64 i = 0; i < k; i++) {
            recs[RREC * i] = seq + i;
            recs[RREC * i + 1] = (seq + i) * K;
            recs[RREC * i + 2] = check_of(seq + i);
        }
        i64 pushed = ring_push(&a->r, recs, k);   /* as many as fit */
        seq += pushed;
        if (!pushed) sched_yield();
        jitter(&rng);
    }
    return NULL;
}

static void *ring_consumer(void *arg) {
    RingArg *a = arg;
    u64 rng = (u64)a->seed * 17 + 3;
    for (i64 next = 0; next < a->n;) {
        i64 out[6 * RREC], seq0, limit = 1 + (i64)(rnd(&rng) % 6);
        i64 n = ring_peek(&a->r, out, limit, &seq0);
        if (n < 0 || seq0 != next) {
            fprintf(stderr, "FAIL: ring: peek gave %lld from %lld, expected from %lld\n",
                    (long long)n, (long long)seq0, (long long)next);
            a->bad++;
            return NULL;
        }
        for (i64 i = 0; i < n; i++) {
            i64 *r = &out[RREC * i], seq = next + i;
            if (r[0] != seq || r[1] != seq * K || r[2] != check_of(seq)) {
                fprintf(stderr, "FAIL: ring: record %lld reads (%lld, %lld, %lld)\n",
                        (long long)seq, (long long)r[0], (long long)r[1], (long long)r[2]);
                a->bad++;
            }
        }
        jitter(&rng);   /* the records are still ours until consumed */
        ring_consume(&a->r, n);
        next += n;
        if (!n) sched_yield();
    }
    return NULL;
}

int run_ring(i64 n, i64 seed) {
    static i64 words[RING_HEADER_WORDS + RCAP * RREC];
    RingArg a = {{words, RCAP, RREC}, n, seed, 0};
    pthread_t p, c;
    pthread_create(&p, NULL, ring_producer, &a);
    pthread_create(&c, NULL, ring_consumer, &a);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    printf("ring: %lld records through a ring of %d; failures %lld\n", (long long)n, RCAP,
           (long long)a.bad);
    return a.bad != 0;
}
