/* client.c: a client's calls, as producer.c, producer_slow.c, reset.c, watch.c and
 * service/caller/client.py make them: the caches are refilled under the lock; a schedule writes
 * and publishes without it; cancel and reset are lock-free CASes followed by a ring
 * record; a watch stores its operation under the lock, then submits like a schedule. */
#include <sched.h>
#include <string.h>

#include "world.h"

void client_init(Client *c, World *w, int ring, int incarnation, u64 seed) {
    memset(c, 0, sizeof *c);
    c->w = w;
    c->ring = ring;
    c->incarnation = incarnation;
    c->seg = w->base;
    c->rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    /* acquire: the coordinator reclaimed the ring's previous client (coordinator.py
     * frees a ring only after that; connect() claims a free one) */
    while (__atomic_load_n(&w->ring_free[ring], __ATOMIC_ACQUIRE) < incarnation - 1)
        sched_yield();
}

/* producer_slow.c, producer_restock_locked */
static void restock(Client *c) {
    lock(c->w);
    c->ncache += (int)slot_reserve(&c->seg, c->ring, &c->cache[c->ncache], CACHE - c->ncache);
    c->nblocks += (int)arena_reserve(&c->seg, 0, c->ring, &c->blocks[c->nblocks],
                                     CACHE - c->nblocks);
    unlock(c->w);
}

i64 client_take(Client *c) {
    if (!c->ncache) restock(c);
    return c->ncache ? c->cache[--c->ncache] : -1;
}

void client_remember(Client *c, i64 h) {
    c->recent[c->nrecent++ % 32] = h;
    ST(&c->w->board[rnd(&c->rng) % 64], h);
}

i64 client_pick(Client *c) {
    if (!c->nrecent) return -1;
    int n = c->nrecent < 32 ? c->nrecent : 32;
    return c->recent[rnd(&c->rng) % (u64)n];
}

static void publish(Client *c, i64 h, i64 check) {   /* producer_push, then _wait_push */
    while (!slot_publish(&c->w->prod[c->ring], h, check)) sched_yield();
}

/* write and publish a RESERVED slot (producer_submit); now and then the ring is "full"
 * for good and the slot is taken back (client.py, _wait_push: _unsubmit, then retire) */
static void submit(Client *c, i64 h, i64 meta, i64 word, i64 deadline) {
    Use *u = use_of(c->w, h);
    slot_write(&c->seg, h, meta, word, deadline);
    jitter(&c->rng);
    if (rnd(&c->rng) % 32 == 0) {
        if (slot_unsubmit(&c->seg, h)) {
            ST(&u->unsubmitted, 1);
            lock(c->w);
            slot_retire(&c->seg, c->seg.mem, HANDLE_SLOT(h), TR_RECLAIM);
            unlock(c->w);
        }   /* else a cancel won it: its cancel record retires it */
        return;
    }
    publish(c, h, CHECK_SUBMIT);
    ST(&u->published, 1);
    client_remember(c, h);
}

i64 client_schedule(Client *c, i64 kind, i64 deadline) {
    i64 h = client_take(c);
    if (h < 0) return -1;
    Use *u = use_of(c->w, h);
    if (!u) {
        fail(c->w, "slot %lld used more than GEN_MAX times", (long long)HANDLE_SLOT(h));
        return -1;
    }
    if (c->nrepeating == 64) kind &= ~K_REPEAT;   /* each is cancelled before it goes */
    if ((kind & (K_ARENA | K_REPEAT)) && !c->nblocks) restock(c);
    if ((kind & (K_ARENA | K_REPEAT)) && !c->nblocks) kind &= ~(K_ARENA | K_REPEAT);
    i64 meta, word;
    if (kind & (K_ARENA | K_REPEAT)) {   /* a class-0 block of the cache */
        i64 b = c->blocks[--c->nblocks], *v = arena_block(&c->seg, 0, b), skip = 0;
        i64 flags = FLAG_ARENA;
        if (kind & K_REPEAT) {   /* REPEAT_HEADER: period, run */
            v[0] = 3 + (i64)(rnd(&c->rng) % 20);
            v[1] = 1;
            skip = REPEAT_HEADER / 8;
            flags |= FLAG_REPEAT;
        }
        for (i64 i = 0; i < ARENA_CLASS_BYTES(0) / 8 - skip; i++) v[skip + i] = payload_word(h, (int)i);
        meta = META_MAKE(1, flags, 0, ARENA_CLASS_BYTES(0) - skip * 8, c->ring);
        word = b;
    } else {
        meta = META_MAKE(1, 0, 0, INLINE_MAX, c->ring);
        word = payload_word(h, 0);
    }
    ST(&u->kind, kind);
    ST(&u->deadline, deadline);
    submit(c, h, meta, word, deadline);
    if ((kind & K_REPEAT) && LD(&u->published) && c->nrepeating < 64)
        c->repeating[c->nrepeating++] = h;
    return h;
}

i64 client_watch(Client *c, i64 key, i64 required, i64 deadline) {
    i64 h = client_take(c);
    if (h < 0) return -1;
    Use *u = use_of(c->w, h);
    if (!u) return -1;
    /* the count word is left non-zero, as a careless caller might: op_store zeroes it */
    i64 data[ARENA_CLASS_BYTES(0) / 8] = {OPH_MAKE(required, TASK_NONE, 1), 1 << 20};
    for (i64 i = 0; i < ARENA_CLASS_BYTES(0) / 8 - 2; i++) data[2 + i] = payload_word(h, (int)i);
    lock(c->w);   /* watch.c, producer_watch */
    i64 where = op_store(&c->seg, h, data, sizeof data, &key, 1);
    if (where < 0) slot_retire(&c->seg, c->seg.mem, HANDLE_SLOT(h), TR_RECLAIM);
    ST(&u->op_key, key);   /* the signals so far, under the lock the signallers hold */
    ST(&u->op_required, required);
    ST(&u->op_base, LD(&c->w->signals[key]));
    unlock(c->w);
    if (where < 0) return -1;   /* the watch lists are full */
    ST(&u->kind, K_OP);
    ST(&u->deadline, deadline);
    submit(c, h, META_MAKE(2, FLAG_OP | FLAG_ARENA, where >> 32, sizeof data - OP_HEADER, c->ring),
           where & 0xFFFFFFFFLL, deadline);
    return h;
}

void client_cancel(Client *c, i64 h, int own) {
    Use *u = use_of(c->w, h);
    int code = slot_cancel(&c->seg, h);
    if (!u) return;
    if (code == CANCEL_WON) {
        ADD(&u->cancel_won, 1);
        publish(c, h, CHECK_CANCEL);
    } else if (code == CANCEL_STOPPED) {
        ADD(&u->cancel_stopped, 1);
    }
}

void client_reset(Client *c, i64 h, i64 deadline, int own) {
    Use *u = use_of(c->w, h);
    int code = slot_reset(&c->seg, h, deadline, c->ring);
    if (!u) return;
    if (code == RESET_WON) {
        if (own) {
            ADD(&u->resets_won, 1);
            ST(&u->reset_last, deadline);
        } else {
            ADD(&u->resets_other, 1);
        }
        publish(c, h, CHECK_RESET);
    } else if (code == RESET_NOT_TIMER) {
        ADD(&u->reset_notimer, 1);
    } else if (code == RESET_BUSY) {
        fail(c->w, "%#llx: a reset was held off for 2 s", (long long)h);
    }
}

/* Client.future (service/caller/outcomes.py): ask, and wait in an entry while the use is live */
void client_outcome_watch(Client *c, i64 h) {
    Use *u = use_of(c->w, h);
    i64 gs, out, *slot = NULL;
    if (!u || LD(&u->watched)) return;
    for (int i = 0; i < WAITS && !slot; i++)
        if (!LD(&c->w->waits[c->ring][i])) slot = &c->w->waits[c->ring][i];
    if (!slot) return;   /* this client waits for enough already */
    i64 e = outcome_watch(&c->seg, h, c->ring, &gs, &out);
    if (e == -2) {
        ST(&u->watched, W_REFUSED);
        return;
    }
    if (e < 0) {   /* ended: what the slot still says (or 0) */
        ST(&u->watch_out, out);
        ST(&u->watched, W_ENDED);
        return;
    }
    ST(&u->entry, e + 1);
    ST(&u->watched, W_LIVE);
    ST(slot, h + 1);   /* the listener takes it from here */
}

int client_drain_outq(Client *c) {
    Seg *s = &c->seg;
    Ring r = {s->outq + c->ring * (RING_HEADER_WORDS + s->outq_cap * OUTQ_RECORD), s->outq_cap,
              OUTQ_RECORD};
    i64 buf[BATCH * OUTQ_RECORD], seq0, n = ring_peek(&r, buf, BATCH, &seq0);
    if (n < 0) fail(c->w, "outcome ring %d: corrupt head", c->ring);
    if (n <= 0) return 0;
    for (i64 i = 0; i < n; i++) {
        Use *u = use_of(c->w, buf[2 * i]);
        if (!u) continue;
        ADD(&u->notified, 1);
        ST(&u->notified_code, buf[2 * i + 1]);
    }
    ring_consume(&r, n);
    return (int)n;
}

/* Outcomes._recheck: a waited-for handle whose use ended is resolved from its entry (done
 * by its freer) or its slot, and its entry emptied */
void client_check_waits(Client *c, int final) {
    for (int i = 0; i < WAITS; i++) {
        i64 h = LD(&c->w->waits[c->ring][i]) - 1, gs, out;
        Use *u = h >= 0 ? use_of(c->w, h) : NULL;
        if (!u) continue;
        i64 e = LD(&u->entry) - 1;
        outcome_state(&c->seg, h, e, &gs, &out);
        if (GS_GEN(gs) == HANDLE_GEN(h)) continue;   /* not over */
        i64 done = waiter_outcome(&c->seg, e, h);
        /* its freer holds the lock from the free to done: not there yet, unless final */
        if (!done && out && OUT_CODE(out) != OC_NONE && !final) continue;
        ST(&u->entry_out, done);
        ST(&u->slot_out, out);
        waiter_release(&c->seg, e, h);
        ST(&u->entry, 0);
        ST(&c->w->waits[c->ring][i], 0);
    }
}

void client_finish(Client *c) {
    for (int i = 0; i < c->nrepeating; i++) client_cancel(c, c->repeating[i], 1);
    /* release: whoever sees this client gone sees everything it wrote */
    __atomic_store_n(&c->w->client_gone[c->ring], c->incarnation, __ATOMIC_RELEASE);
}
