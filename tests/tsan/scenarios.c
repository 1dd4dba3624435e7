/* scenarios.c: the protocols the harness plays, and their functional checks.
 *
 *   tsan_harness SCENARIO N SEED
 *
 * runs one scenario with N operations per client thread (README.md lists them) and exits
 * 0 if every check held, 1 if one failed (each failure is printed); ThreadSanitizer,
 * built in, reports a data race on its own and exits with TSAN_OPTIONS' exitcode.
 */
#include "world.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    World *w;
    int ring;
    i64 n;
    void (*body)(Client *c, i64 n);
} ClientArg;

static i64 soon(Client *c, i64 span) { return LD(&c->w->vnow) + (i64)(rnd(&c->rng) % (u64)span); }

/* ---- what the client threads do --------------------------------------------------------- */
static void body_schedule(Client *c, i64 n) {   /* schedule vs link vs fire */
    for (i64 i = 0; i < n; i++) {
        client_schedule(c, K_TIMER | (rnd(&c->rng) % 2 ? K_ARENA : 0), soon(c, 60));
        jitter(&c->rng);
    }
}

static void body_cancel(Client *c, i64 n) {   /* cancel vs fire, and vs a repeat's re-arm */
    for (i64 i = 0; i < n; i++) {
        u64 r = rnd(&c->rng);
        i64 kind = K_TIMER | (r % 2 ? K_ARENA : 0) | (r % 8 == 0 ? K_REPEAT : 0);
        i64 h = client_schedule(c, kind, soon(c, 40)), gs, out;
        /* a client that asks and goes before it learns: the reclaim of its ring empties
         * its waiter entries (checked at the end: every entry empty) */
        if (h >= 0 && r % 16 == 5) outcome_watch(&c->seg, h, c->ring, &gs, &out);
        if (r % 3 == 0) client_cancel(c, client_pick(c), 1);
        jitter(&c->rng);
    }
}

static void body_reset(Client *c, i64 n) {   /* reset vs fire, vs cancel */
    for (i64 i = 0; i < n; i++) {
        u64 r = rnd(&c->rng);
        client_schedule(c, K_TIMER | (r % 2 ? K_ARENA : 0), soon(c, 40));
        if (r % 2 == 0) client_reset(c, client_pick(c), soon(c, 60), 1);
        if (r % 7 == 0) client_cancel(c, client_pick(c), 1);
        jitter(&c->rng);
    }
}

static void body_hostile(Client *c, i64 n) {   /* another client's handles */
    for (i64 i = 0; i < 3 * n; i++) {
        i64 h = LD(&c->w->board[rnd(&c->rng) % 64]);
        u64 r = rnd(&c->rng);
        if (!h) continue;
        if (r % 3 == 0) client_cancel(c, h, 0);
        else client_reset(c, h, soon(c, 60), 0);
        jitter(&c->rng);
    }
}

static void body_canceller(Client *c, i64 n) {
    for (i64 i = 0; i < 3 * n; i++) {
        i64 h = LD(&c->w->board[rnd(&c->rng) % 64]);
        if (h) client_cancel(c, h, 0);
        jitter(&c->rng);
    }
}

/* resets only, of operations only: they never win (RESET_NOT_TIMER), so this client
 * publishes nothing and takes no lock: nothing it does orders its reads before the writes
 * of others, and ThreadSanitizer sees every unordered pair */
static void body_lurker(Client *c, i64 n) {
    for (i64 i = 0; i < 3 * n; i++) {
        i64 h = LD(&c->w->board[rnd(&c->rng) % 64]);
        if (h) client_reset(c, h, soon(c, 60), 0);
        jitter(&c->rng);
    }
}

static void body_watch(Client *c, i64 n) {   /* operations: watch vs signal vs expiry */
    for (i64 i = 0; i < n; i++) {
        u64 r = rnd(&c->rng);
        client_watch(c, (i64)(r % 8), 1 + (i64)(r >> 8) % 3, soon(c, 50));
        jitter(&c->rng);
    }
}

static void body_signal(Client *c, i64 n) {   /* check_and_complete, and cancels */
    for (i64 i = 0; i < 3 * n; i++) {
        u64 r = rnd(&c->rng);
        lock(c->w);   /* watch.c, producer_check_and_complete */
        ST(&c->w->signals[r % 8], LD(&c->w->signals[r % 8]) + 1);   /* counted first */
        watch_signal(&c->seg, (i64)(r % 8), 1);
        unlock(c->w);
        i64 h = LD(&c->w->board[(r >> 8) % 64]);
        if (h && r % 5 == 0) client_cancel(c, h, 0);
        jitter(&c->rng);
    }
}

static void body_notify(Client *c, i64 n) {   /* outcome_watch vs slot_finish */
    for (i64 i = 0; i < n; i++) {
        u64 r = rnd(&c->rng);
        i64 h = client_schedule(c, K_TIMER, soon(c, 8));
        if (h >= 0 && r % 2) client_outcome_watch(c, h);
        if (r % 4 == 0) client_cancel(c, client_pick(c), 1);
        if (r % 3 == 0) client_outcome_watch(c, client_pick(c));
        jitter(&c->rng);
    }
    /* as a Python client's close(): it goes once its listener resolved what it waits for
     * (a client that goes first has its entries emptied by the reclaim: body_cancel), or
     * after 10 s: a waiter never told is then reported lost, not a hang */
    i64 until = jnow_us() + 10000000;
    for (int i = 0; i < WAITS; i++)
        while (LD(&c->w->waits[c->ring][i]) && jnow_us() < until) sched_yield();
}

static void *client_main(void *arg) {
    ClientArg *a = arg;
    Client c;
    for (int k = 1; k <= a->w->incarnations[a->ring]; k++) {
        client_init(&c, a->w, a->ring, k, (u64)a->w->seed * 11 + (u64)a->ring * 101 + (u64)k);
        a->body(&c, a->n / a->w->incarnations[a->ring]);
        client_finish(&c);
    }
    return NULL;
}

/* The outcome listener of one client (outcomes.py, _listen): sleep on the bell, drain. */
typedef struct { World *w; int ring; } ListenArg;
static void *listener_main(void *arg) {
    ListenArg *a = arg;
    Client c;
    memset(&c, 0, sizeof c);
    c.w = a->w;
    c.ring = a->ring;
    c.seg = a->w->base;
    i64 *words = c.seg.outq + a->ring * (RING_HEADER_WORDS + c.seg.outq_cap * OUTQ_RECORD);
    while (!__atomic_load_n(&a->w->reaper_done, __ATOMIC_ACQUIRE)) {
        outq_wait(words, 0.002);
        while (client_drain_outq(&c)) {}
        client_check_waits(&c, 0);
    }
    while (client_drain_outq(&c)) {}
    client_check_waits(&c, 1);
    if (relaxed_load(&words[OUTQ_DROPPED]))
        fail(a->w, "outcome ring %d dropped records", a->ring);
    return NULL;
}

/* ---- the checks, once every thread has ended ------------------------------------------ */
/* What a client that asked about a handle learned: asked live, its entry was done with the
 * outcome and its ring told it once (no lost wake-up); asked late, the freed slot's word
 * was right or the slot was reused (gone). counts[5]: asked; [6]: waited in an entry. */
static void check_outcome(World *w, i64 h, Use *u, i64 code, i64 *counts) {
    i64 gen = HANDLE_GEN(h), want = OUT_MAKE(gen, code);
    counts[5]++;
    if (u->watched == W_REFUSED) {
        w->refused++;
    } else if (u->watched == W_ENDED) {
        if (!u->watch_out) w->gone_notify++;   /* its slot was reserved again by then */
        else if (u->watch_out != want && !(u->unsubmitted && OUT_CODE(u->watch_out) == OC_NONE))
            fail(w, "%#llx: asked late, read outcome %#llx", (long long)h, (long long)u->watch_out);
    } else if (u->entry) {
        fail(w, "%#llx: waited for, never resolved", (long long)h);
    } else {
        counts[6]++;
        if (u->entry_out != want) {
            fail(w, "%#llx: waited for, entry says %#llx (slot %#llx): a lost outcome",
                 (long long)h, (long long)u->entry_out, (long long)u->slot_out);
            w->lost_notify++;
        }
        if (u->slot_out && u->slot_out != want)
            fail(w, "%#llx: its freed slot says %#llx", (long long)h, (long long)u->slot_out);
        if (u->notified != 1 || u->notified_code != code)
            fail(w, "%#llx: its ring told it %lld times (code %lld): a lost wake-up",
                 (long long)h, (long long)u->notified, (long long)u->notified_code);
    }
}


static void check_use(World *w, i64 h, Use *u, i64 *counts) {
    i64 kind = u->kind, runs = u->runs, cw = u->cancel_won;
    if (!kind) return;
    counts[0]++;
    if (u->unsubmitted) {
        if (runs || cw) fail(w, "%#llx: taken back, yet ran %lld / cancelled", (long long)h, (long long)runs);
        return;
    }
    if (!u->published && !cw) {
        /* slot_unsubmit fails for a SUBMITTED slot something else moved: a completion
         * (an operation: it runs once its client's ring is reclaimed) or a reset's hold
         * (it is retired then, never run, though that reset won). Both are known (README):
         * counted, and checked to be what they are; anything else is a lost timer. */
        if ((kind & K_OP) && runs == 1 && (u->ran_flags & FLAG_COMPLETED)) w->unsubmit_completed++;
        else if (u->resets_other && !runs) w->unsubmit_reset++;
        else fail(w, "%#llx: neither published, taken back nor cancelled (lost)", (long long)h);
        return;
    }
    if (cw > 1 || cw + u->cancel_stopped > 1)
        fail(w, "%#llx: %lld cancels won, %lld stopped", (long long)h, (long long)cw,
             (long long)u->cancel_stopped);
    if (!(kind & K_REPEAT) && runs + cw != 1)
        fail(w, "%#llx: ran %lld times, cancel won %lld: not exactly one outcome", (long long)h,
             (long long)runs, (long long)cw);
    if ((kind & K_REPEAT) && !cw && !u->cancel_stopped)
        fail(w, "%#llx: a repeating timer that was never cancelled ended", (long long)h);
    counts[1] += runs > 0;
    counts[2] += cw;
    if (kind & K_OP) {
        if (u->resets_won + u->resets_other) fail(w, "%#llx: an operation reset", (long long)h);
        if (runs && !(u->ran_flags & FLAG_OP)) fail(w, "%#llx: an operation ran as a timer", (long long)h);
        counts[4] += runs && (u->ran_flags & FLAG_COMPLETED);
    }
    if (runs && !(kind & (K_REPEAT | K_OP)) && !u->resets_other) {
        i64 want = u->resets_won ? u->reset_last : u->deadline;
        if (u->ran_deadline != want)
            fail(w, "%#llx: ran with deadline %lld, not %lld (%lld resets won)", (long long)h,
                 (long long)u->ran_deadline, (long long)want, (long long)u->resets_won);
    }
    counts[3] += u->resets_won + u->resets_other;
    if (u->notified > 1) fail(w, "%#llx: notified %lld times", (long long)h, (long long)u->notified);
    if (u->watched) {
        i64 kind_bits = !(kind & K_OP) ? 0 : (u->ran_flags & FLAG_COMPLETED) ? OC_COMPLETED : OC_EXPIRED;
        check_outcome(w, h, u, runs ? OUTCOME_OK | kind_bits : OC_CANCELLED, counts);
    }
}

static void check_world(World *w, const char *name) {
    i64 counts[7] = {0}, *mem = w->base.mem, free_slots = 0;
    for (i64 slot = 0; slot < CAPACITY; slot++) {   /* its uses: up to its generation now */
        i64 last = GS_GEN(*gs_word(mem, wheel_node(mem, slot)));
        for (i64 gen = 0; gen <= last && gen < GEN_MAX; gen++)
            check_use(w, HANDLE_MAKE(gen, slot), &w->ledger[slot * GEN_MAX + gen], counts);
    }
    /* nothing lost: every slot and every block is free again */
    for (i64 s = mem[H_FREE]; s >= 0 && free_slots <= CAPACITY; free_slots++)
        s = *wheel_field(mem, wheel_node(mem, s), F_NEXT);
    if (free_slots != CAPACITY || mem[H_PENDING])
        fail(w, "%lld of %d slots free, %lld linked at the end", (long long)free_slots, CAPACITY,
             (long long)mem[H_PENDING]);
    for (int c = 0; c < ARENA_CLASSES; c++) {
        i64 *h = &w->base.arena[c * A_CLASS_WORDS], k = 0;
        for (i64 b = h[A_FREE]; b >= 0 && k <= h[A_NBLOCKS]; k++) b = w->base.arena[h[A_OFF_NEXT] + b];
        if (k != h[A_NBLOCKS]) fail(w, "arena class %d: %lld of %lld blocks free", c, (long long)k, (long long)h[A_NBLOCKS]);
    }
    for (i64 e = 0; e < WAIT_BUCKETS * WAIT_WAYS; e++) {   /* every waiter entry emptied */
        i64 k = w->base.waiters[WAIT_HEADER + (e / WAIT_WAYS) * WAIT_BUCKET_WORDS + e % WAIT_WAYS];
        if (k != WK_EMPTY) fail(w, "waiter entry %lld left as %#llx", (long long)e, (long long)k);
    }
    printf("%s: %lld uses, %lld ran, %lld cancelled, %lld resets won, %lld completed, "
           "%lld watched (%lld waited in an entry, %lld refused, %lld outcomes gone by then); "
           "not taken back: %lld completed, %lld reset; %lld repairs; failures %lld\n",
           name, (long long)counts[0], (long long)counts[1], (long long)counts[2],
           (long long)counts[3], (long long)counts[4], (long long)counts[5],
           (long long)counts[6], (long long)w->refused, (long long)w->gone_notify,
           (long long)w->unsubmit_completed, (long long)w->unsubmit_reset,
           (long long)w->repairs, (long long)w->failures);
}

/* ---- running a service scenario ----------------------------------------------------------- */
typedef struct {
    const char *name;
    int nclients, nexec, listeners, repair;
    void (*bodies[MAX_CLIENTS])(Client *, i64);
    int incarnations[MAX_CLIENTS];
} Scenario;

static const Scenario scenarios[] = {
    {"schedule", 2, 1, 0, 0, {body_schedule, body_schedule}, {1, 1}},
    {"cancel", 3, 2, 0, 0, {body_cancel, body_cancel, body_canceller}, {1, 1, 1}},
    {"reset", 3, 1, 0, 0, {body_reset, body_reset, body_hostile}, {1, 1, 1}},
    {"arena", 3, 2, 0, 0, {body_cancel, body_schedule, body_cancel}, {3, 2, 4}},
    {"watch", 4, 1, 0, 0, {body_watch, body_watch, body_signal, body_lurker}, {1, 1, 1, 1}},
    {"notify", 2, 1, 1, 0, {body_notify, body_notify}, {1, 1}},
    {"repair", 4, 1, 0, 1, {body_cancel, body_reset, body_hostile, body_watch}, {1, 2, 1, 1}},
};

/* A scenario that has not ended after `limit` seconds is stuck: say where, and stop
 * (exit 3). Its look at the segment races the stuck threads on purpose, so it asks
 * ThreadSanitizer, if built in, to ignore its reads. */
typedef struct { World *w; double limit; int done; } Watchdog;
__attribute__((weak)) void AnnotateIgnoreReadsBegin(const char *file, int line);
__attribute__((weak)) void AnnotateIgnoreReadsEnd(const char *file, int line);
static void *watchdog_main(void *arg) {
    Watchdog *d = arg;
    for (double t = 0; t < d->limit; t += 0.05) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        if (__atomic_load_n(&d->done, __ATOMIC_ACQUIRE)) return NULL;
    }
    World *w = d->w;
    i64 *mem = w->base.mem;
    fprintf(stderr, "STUCK after %.0f s\n", d->limit);
    if (AnnotateIgnoreReadsBegin) AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    fprintf(stderr, "  clock %lld (wheel %lld), %lld linked, coordinator done %d, reaper "
            "done %d\n", (long long)LD(&w->vnow), (long long)LD(&mem[H_NOW]),
            (long long)LD(&mem[H_PENDING]), LD(&w->coord_done), LD(&w->reaper_done));
    for (int r = 0; r < w->nclients; r++)
        fprintf(stderr, "  ring %d: head %lld tail %lld, gone %d, free %d\n", r,
                (long long)LD(&w->prod[r].w[RING_HEAD]), (long long)LD(&w->prod[r].w[RING_TAIL]),
                LD(&w->client_gone[r]), LD(&w->ring_free[r]));
    for (i64 s = 0, shown = 0; s < CAPACITY && shown < 20; s++) {
        i64 node = wheel_node(mem, s), gs = LD(gs_word(mem, node));
        if (GS_STATE(gs) == ST_FREE || GS_STATE(gs) == ST_RESERVED) continue;
        shown++;
        fprintf(stderr, "  slot %lld: state %lld (from %lld, aux %lld) gen %lld, deadline %lld, "
                "prev %lld\n", (long long)s, (long long)GS_STATE(gs), (long long)GS_FROM(gs),
                (long long)GS_AUX(gs), (long long)GS_GEN(gs),
                (long long)LD(wheel_field(mem, node, F_DEADLINE)),
                (long long)LD(wheel_field(mem, node, F_PREV)));
    }
    if (AnnotateIgnoreReadsEnd) AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    if (getenv("TSAN_HARNESS_HOLD")) sleep(600);   /* time to attach a debugger */
    _exit(3);
}

static int run_service(const Scenario *sc, i64 n, i64 seed) {
    World *w = malloc(sizeof *w);
    world_init(w, sc->nclients, sc->nexec, seed);
    w->repair = sc->repair;
    pthread_t coord, reaper, ex[2], cl[MAX_CLIENTS], li[MAX_CLIENTS];
    ClientArg ca[MAX_CLIENTS];
    ExecArg ea[2];
    ListenArg la[MAX_CLIENTS];
    for (int r = 0; r < sc->nclients; r++) {
        w->incarnations[r] = sc->incarnations[r];
        ca[r] = (ClientArg){w, r, n, sc->bodies[r]};
        la[r] = (ListenArg){w, r};
    }
    const char *limit = getenv("TSAN_HARNESS_LIMIT_S");
    Watchdog dog = {w, limit ? atof(limit) : 120, 0};
    pthread_t dog_thread;
    pthread_create(&dog_thread, NULL, watchdog_main, &dog);
    pthread_create(&coord, NULL, coordinator_main, w);
    pthread_create(&reaper, NULL, reaper_main, w);
    for (int e = 0; e < sc->nexec; e++) {
        ea[e] = (ExecArg){w, e};
        pthread_create(&ex[e], NULL, executor_main, &ea[e]);
    }
    for (int r = 0; r < sc->nclients; r++) {
        pthread_create(&cl[r], NULL, client_main, &ca[r]);
        if (sc->listeners) pthread_create(&li[r], NULL, listener_main, &la[r]);
    }
    for (int r = 0; r < sc->nclients; r++) {
        pthread_join(cl[r], NULL);
        if (sc->listeners) pthread_join(li[r], NULL);
    }
    pthread_join(coord, NULL);
    pthread_join(reaper, NULL);
    for (int e = 0; e < sc->nexec; e++) pthread_join(ex[e], NULL);
    __atomic_store_n(&dog.done, 1, __ATOMIC_RELEASE);
    pthread_join(dog_thread, NULL);
    check_world(w, sc->name);
    int failed = w->failures != 0;
    world_free(w);
    free(w);
    return failed;
}

int run_ring(i64 n, i64 seed);   /* ring_scenario.c */
int run_claim(i64 n, i64 seed);  /* claim_scenario.c */

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SCENARIO N SEED\n", argv[0]);
        return 2;
    }
    i64 n = atoll(argv[2]), seed = atoll(argv[3]);
    if (!strcmp(argv[1], "ring")) return run_ring(n, seed);
    if (!strcmp(argv[1], "claim")) return run_claim(n, seed);
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (!strcmp(argv[1], scenarios[i].name)) return run_service(&scenarios[i], n, seed);
    fprintf(stderr, "no scenario %s\n", argv[1]);
    return 2;
}
