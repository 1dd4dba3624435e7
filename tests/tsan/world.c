/* world.c: the segment, the ledger, and the service's roles as threads (world.h). */
#include "world.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the segment --------------------------------------------------------------------- */
#define TICK 1
#define WHEEL 16
#define LEVELS 3
static const i64 arena_blocks[ARENA_CLASSES] = {160, 32, 8, 4};

static i64 carve(i64 *at, i64 n) {   /* a region of n words, on a cache line */
    i64 off = (*at + 7) / 8 * 8;
    *at = off + n;
    return off;
}

static i64 ring_words(i64 cap, i64 record) { return RING_HEADER_WORDS + cap * record; }

void world_init(World *w, int nclients, int nexec, i64 seed) {
    memset(w, 0, sizeof *w);
    w->nclients = nclients;
    w->nexec = nexec;
    w->seed = seed;
    i64 per_level = 2 * WHEEL, bwords = (per_level + 63) / 64, sent = LEVELS * per_level;
    i64 wheel_words = WHEEL_HEADER_WORDS + LEVELS + sent + LEVELS * bwords +
                      (sent + CAPACITY) * NODE_WORDS;
    i64 meta_words = ARENA_CLASSES * A_CLASS_WORDS, data_words = 0;
    for (int c = 0; c < ARENA_CLASSES; c++) {
        meta_words += 2 * arena_blocks[c];
        data_words += arena_blocks[c] * ARENA_CLASS_BYTES(c) / 8;
    }
    i64 nbuckets = 16, at = 0;
    i64 o_wheel = carve(&at, wheel_words), o_side = carve(&at, CAPACITY * SIDE_WORDS);
    i64 o_ameta = carve(&at, meta_words), o_adata = carve(&at, data_words);
    i64 o_anchor = carve(&at, (CAPACITY + 1) / 2), o_live = carve(&at, JOURNAL_WINDOW);
    i64 o_watch = carve(&at, WT_HEADER + nbuckets + WATCH_CAP * WE_WORDS);
    i64 o_outq = carve(&at, MAX_CLIENTS * ring_words(OUTQ_CAP, OUTQ_RECORD));
    i64 o_wait = carve(&at, WAIT_HEADER + WAIT_BUCKETS * WAIT_BUCKET_WORDS);
    i64 o_prod = carve(&at, MAX_CLIENTS * ring_words(RING_CAP, PRODUCER_RECORD));
    i64 o_disp = carve(&at, 2 * ring_words(RING_CAP, DISPATCH_RECORD));
    i64 o_res = carve(&at, 2 * ring_words(RING_CAP, RESULT_RECORD));
    w->words = aligned_alloc(64, (size_t)(at + 8) * 8);
    memset(w->words, 0, (size_t)(at + 8) * 8);

    /* the wheel array: core.py's _write_header and WheelCore.format */
    i64 *mem = w->words + o_wheel;
    mem[H_MAGIC] = WHEEL_MAGIC;
    mem[H_VERSION] = WHEEL_LAYOUT_VERSION;
    mem[H_CAPACITY] = CAPACITY;
    mem[H_LEVELS] = LEVELS;
    mem[H_WHEEL] = WHEEL;
    mem[H_BUCKETS] = per_level;
    mem[H_WORDS] = bwords;
    mem[H_TICK] = TICK;
    mem[H_OFF_TICKS] = WHEEL_HEADER_WORDS;
    mem[H_OFF_BEXP] = WHEEL_HEADER_WORDS + LEVELS;
    mem[H_OFF_BITS] = mem[H_OFF_BEXP] + sent;
    mem[H_OFF_NODES] = mem[H_OFF_BITS] + LEVELS * bwords;
    mem[H_TOTAL] = wheel_words;
    mem[H_SENTINELS] = sent;
    for (i64 k = 0, t = TICK; k < LEVELS; k++, t *= WHEEL) mem[WHEEL_HEADER_WORDS + k] = t;
    mem[H_NOW] = 1000;
    wheel_reset(mem);

    Seg *s = &w->base;
    s->mem = mem;
    s->side = w->words + o_side;
    s->arena = w->words + o_ameta;
    s->adata = w->words + o_adata;
    /* the arena's class headers: layout.py's ServiceMemory.create */
    for (i64 c = 0, next = ARENA_CLASSES * A_CLASS_WORDS, data = 0; c < ARENA_CLASSES; c++) {
        i64 *h = &s->arena[c * A_CLASS_WORDS];
        h[A_NBLOCKS] = arena_blocks[c];
        h[A_OFF_NEXT] = next;
        h[A_OFF_OWNER] = next + arena_blocks[c];
        h[A_DATA] = data / 8;
        h[A_BLOCK_WORDS] = ARENA_CLASS_BYTES(c) / 8;
        data += arena_blocks[c] * ARENA_CLASS_BYTES(c);
        next += 2 * arena_blocks[c];
    }
    s->anchor = (int32_t *)(w->words + o_anchor);
    for (i64 i = 0; i < CAPACITY; i++) s->anchor[i] = -1;
    s->live = w->words + o_live;
    s->watch = w->words + o_watch;
    s->waiters = w->words + o_wait;
    s->waiters_words = WAIT_HEADER + WAIT_BUCKETS * WAIT_BUCKET_WORDS;
    s->outq = w->words + o_outq;
    s->outq_cap = OUTQ_CAP;
    s->nrings = MAX_CLIENTS;
    watch_format(s, nbuckets, WATCH_CAP);
    waiters_format(s, WAIT_BUCKETS);
    slot_rebuild(s);   /* every slot and block free, the stacks threaded */
    for (int r = 0; r < MAX_CLIENTS; r++)
        w->prod[r] = (Ring){w->words + o_prod + r * ring_words(RING_CAP, PRODUCER_RECORD),
                            RING_CAP, PRODUCER_RECORD};
    for (int e = 0; e < 2; e++) {
        w->dispatch[e] = (Ring){w->words + o_disp + e * ring_words(RING_CAP, DISPATCH_RECORD),
                                RING_CAP, DISPATCH_RECORD};
        w->results[e] = (Ring){w->words + o_res + e * ring_words(RING_CAP, RESULT_RECORD),
                               RING_CAP, RESULT_RECORD};
    }
    w->ledger = calloc((size_t)CAPACITY * GEN_MAX, sizeof(Use));
    w->vnow = mem[H_NOW];
    pthread_mutex_init(&w->lock, NULL);
    jcrc_init();
}

void world_free(World *w) {
    pthread_mutex_destroy(&w->lock);
    free(w->ledger);
    free(w->words);
}

Use *use_of(World *w, i64 h) {
    i64 slot = HANDLE_SLOT(h), gen = HANDLE_GEN(h);
    if (h < 0 || slot >= CAPACITY || gen >= GEN_MAX) return NULL;
    return &w->ledger[slot * GEN_MAX + gen];
}

void fail(World *w, const char *fmt, ...) {
    if (ADD(&w->failures, 1) >= 20) return;   /* the first few say enough */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

u64 rnd(u64 *s) {   /* xorshift64* */
    u64 x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void jitter(u64 *s) {
    u64 r = rnd(s) % 64;
    if (r == 0) sched_yield();
    else if (r < 8)
        for (volatile int i = 0; i < (int)r * 40; i++) {}
}

/* ---- the coordinator (service/processes/coordinator.py: drain, tend_rings) ---------------------- */
static i64 drain(World *w, Seg *cs, int r) {
    i64 recs[BATCH * PRODUCER_RECORD], res[5] = {0, 0, 0, INT64_MAX, 0}, seq0;
    i64 n = ring_peek(&w->prod[r], recs, BATCH, &seq0);
    if (n < 0) fail(w, "ring %d: corrupt head", r);
    if (n <= 0) return 0;
    lock(w);   /* write-ahead: the records, before they are applied */
    slot_journal_records(cs, recs, n, r);
    unlock(w);
    cs->jb->len = 0;   /* "written to its file" */
    lock(w);
    slot_link_records(cs, recs, n, r, res);
    unlock(w);
    ring_consume(&w->prod[r], n);
    if (res[2]) fail(w, "ring %d: %lld garbage records", r, (long long)res[2]);
    return n;
}

/* a writer process's attachment: the tables, and its own journal buffer */
static Seg writer_seg(World *w, JBuf *jb) {
    Seg s = w->base;
    *jb = (JBuf){0};
    s.jb = jb;
    return s;
}

void *coordinator_main(void *arg) {
    World *w = arg;
    JBuf jb;
    Seg cs = writer_seg(w, &jb);
    u64 rng = (u64)w->seed * 3 + 1;
    for (;;) {
        i64 total = 0;
        int all = 1;
        for (int r = 0; r < w->nclients; r++) total += drain(w, &cs, r);
        for (int r = 0; r < w->nclients; r++) {
            /* acquire: the client is gone (its process is dead), so its ring is final */
            int gone = __atomic_load_n(&w->client_gone[r], __ATOMIC_ACQUIRE);
            if (gone > LD(&w->ring_free[r])) {
                while (drain(w, &cs, r)) {}
                lock(w);
                slot_reclaim(&cs, r, 1000 + r);   /* (a pid: what it journals names it) */
                unlock(w);
                jb.len = 0;
                /* release: the ring's next client starts after this */
                __atomic_store_n(&w->ring_free[r], gone, __ATOMIC_RELEASE);
            }
            all &= LD(&w->ring_free[r]) == w->incarnations[r];
        }
        if (all && !total) break;
        if (!total) jitter(&rng);
    }
    free(jb.p);
    __atomic_store_n(&w->coord_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- the reaper (service/processes/reaper.py: fire, dispatch, settle) -------------------------- */
static i64 settle(World *w, Seg *rs) {
    i64 total = 0;
    for (int e = 0; e < w->nexec; e++) {
        i64 buf[BATCH * RESULT_RECORD], res[2] = {0, 0}, seq0;
        i64 n = ring_peek(&w->results[e], buf, BATCH, &seq0);
        if (n < 0) fail(w, "result ring %d: corrupt head", e);
        if (n <= 0) continue;
        lock(w);
        slot_settle(rs, buf, n, 0, res);   /* the wheel's clock is the harness's */
        unlock(w);
        rs->jb->len = 0;
        ring_consume(&w->results[e], n);
        total += n;
    }
    return total;
}

void *reaper_main(void *arg) {
    World *w = arg;
    JBuf jb;
    Seg rs = writer_seg(w, &jb);
    i64 backlog[CAPACITY], nback = 0, inflight = 0, out[BATCH], *mem = rs.mem;
    int next_exec = 0;
    u64 rng = (u64)w->seed * 5 + 2;
    for (;;) {
        /* the coordinator's done before the count of linked timers below: read the other
         * way round, a link made between the two would be missed */
        int coord_done = __atomic_load_n(&w->coord_done, __ATOMIC_ACQUIRE);
        i64 now = LD(&w->vnow), n;
        lock(w);
        /* slots_py.c, tables_advance: advance, then each won slot's handle and record */
        rs.jnow = jnow_us();
        n = wheel_advance(mem, now, out, BATCH, 0, slot_retire_hook, &rs);
        for (i64 i = 0; i < n; i++) {
            out[i] = HANDLE_MAKE(GS_GEN(gs_load(gs_word(mem, wheel_node(mem, out[i])))), out[i]);
            slot_journal_fired(&rs, out[i]);
        }
        unlock(w);
        jb.len = 0;
        for (i64 i = 0; i < n; i++) backlog[nback++] = out[i];
        for (int tries = 0; nback && tries < w->nexec; tries++) {   /* dispatch */
            Ring *d = &w->dispatch[next_exec];
            next_exec = (next_exec + 1) % w->nexec;
            i64 recs[BATCH * DISPATCH_RECORD], k = nback < BATCH ? nback : BATCH;
            for (i64 i = 0; i < k; i++) {
                recs[2 * i] = backlog[i];
                recs[2 * i + 1] = now;   /* the time it fired at */
            }
            i64 pushed = ring_push(d, recs, k);
            memmove(backlog, backlog + pushed, (size_t)(nback - pushed) * 8);
            nback -= pushed;
            inflight += pushed;
        }
        lock(w);
        if (w->repair && rnd(&rng) % 64 == 0) {   /* layout.py, ServiceMemory._repair */
            slot_rebuild(&rs);
            w->repairs++;   /* the reaper's alone until it is joined */
        }
        wheel_cascade_step(mem, 4, slot_retire_hook, &rs);
        watch_purge(&rs, 2);
        rs.retired = rs.expired = 0;
        i64 pending = mem[H_PENDING];
        unlock(w);
        jb.len = 0;
        inflight -= settle(w, &rs);
        if (n < BATCH) ST(&w->vnow, now + 1);   /* this tick is done: time moves on */
        if (coord_done && !pending && !nback && !inflight) break;
        jitter(&rng);
    }
    free(jb.p);
    __atomic_store_n(&w->reaper_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- an executor (executor.c: ex_run, decode) ------------------------------------------- */
static void check_payload(World *w, i64 h, const SlotPayload *p, int found) {
    i64 flags = META_FIELD(p->meta, FLAGS), words = p->len / 8;
    if (found != PAYLOAD_OK) {
        fail(w, "%#llx: its payload does not check out (%d)", (long long)h, found);
        return;
    }
    const i64 *v = (const i64 *)p->bytes;
    if (!(flags & FLAG_ARENA)) words = 1;
    for (i64 i = 0; i < words; i++)
        if (v[i] != payload_word(h, (int)i)) {
            fail(w, "%#llx: payload word %lld is %#llx, not this timer's", (long long)h,
                 (long long)i, (long long)v[i]);
            return;
        }
}

void *executor_main(void *arg) {
    ExecArg *a = arg;
    World *w = a->w;
    Seg es = w->base;
    Ring *d = &w->dispatch[a->index], *r = &w->results[a->index];
    u64 rng = (u64)w->seed * 7 + (u64)a->index;
    for (;;) {
        int done = __atomic_load_n(&w->reaper_done, __ATOMIC_ACQUIRE);   /* before the peek */
        i64 buf[BATCH * DISPATCH_RECORD], seq0, n = ring_peek(d, buf, BATCH, &seq0);
        if (n < 0) fail(w, "dispatch ring: corrupt head");
        if (n <= 0) {
            if (done) break;
            jitter(&rng);
            continue;
        }
        for (i64 i = 0; i < n; i++) {
            i64 h = buf[2 * i], fired_at = buf[2 * i + 1], deadline;
            if (slot_fired(&es, h, &deadline)) {
                Use *u = use_of(w, h);
                SlotPayload p;
                int found = slot_payload(&es, HANDLE_SLOT(h), &p);
                check_payload(w, h, &p, found);
                if (deadline > fired_at)
                    fail(w, "%#llx: fired at %lld, before its deadline %lld", (long long)h,
                         (long long)fired_at, (long long)deadline);
                /* an operation completed only once its key had its required signals
                 * since its watch: its count (in its block) started at 0 */
                if ((META_FIELD(p.meta, FLAGS) & FLAG_COMPLETED) &&
                    LD(&w->signals[LD(&u->op_key)]) - LD(&u->op_base) < LD(&u->op_required))
                    fail(w, "%#llx: completed with %lld of %lld signals", (long long)h,
                         (long long)(LD(&w->signals[LD(&u->op_key)]) - LD(&u->op_base)),
                         (long long)LD(&u->op_required));
                ADD(&u->runs, 1);
                ST(&u->ran_deadline, deadline);
                ST(&u->ran_at, fired_at);
                ST(&u->ran_flags, META_FIELD(p.meta, FLAGS));
            } else {
                fail(w, "%#llx: dispatched, but its slot is not FIRING", (long long)h);
            }
            jitter(&rng);
            i64 rec[RESULT_RECORD] = {h, OUTCOME_OK, seq0 + i, 0, 0};
            while (!ring_push(r, rec, 1)) sched_yield();
        }
        ring_consume(d, n);
    }
    return NULL;
}
