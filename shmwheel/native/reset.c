/* reset.c: a client's reset (Client.reset, TimerHandle.reset): move a pending timer's
 * deadline in one step, same id, no second slot.
 *
 * The transition is slot_reset's (slots.c): a CAS holds the slot RESETTING, the new
 * deadline is written, a CAS puts the state back with the reset sequence bumped; a racing
 * fire, cancel or other reset has exactly one winner against it (slots.h, "the reset
 * rule"). It needs no lock and no system call. Once it has won, the client publishes
 * (handle, handle ^ CHECK_RESET) on its ring: the coordinator relinks the timer by its new
 * deadline (so an earlier one is not held back by its old bucket) and journals it
 * (SCHEDULED with J_FLAG_RESET). The record is not what decides the reset, but it must
 * follow every reset that wins (or the journal would hold the old deadline): so room on
 * the ring is made before the reset is tried (Full, and nothing changed, if none comes).
 *
 * The common call, reset(target, delay) with a number of ms, runs here; anything else
 * (deadline_ms=, at=, and every error) goes to the Python method `_reset_slow`, which
 * checks the arguments and comes back through `_reset_to(target, deadline_ms)`.
 */
#include "producer.h"

#include "atomics.h"

static PyObject *s_delay_ms_kw;

/* the deadline checked by the caller (in the wheel's range): True iff the reset won */
static PyObject *reset_to(Producer *p, PyObject *target, i64 deadline, i64 now_ns) {
    i64 h;
    if (!producer_usable(p) || producer_handle_id(p, target, &h, "reset") < 0) return NULL;
    /* A reset that wins must publish its record (the coordinator relinks and journals
     * it): room first. From the check to the push the GIL is held, so no other thread of
     * this process takes it; the coordinator only makes more. */
    while (ring_room(&p->ring, relaxed_load(&p->ring.w[RING_HEAD])) < 1) {
        if (producer_hook0(p, HOOK_WAIT_ROOM) < 0) return NULL;   /* Full: nothing changed */
    }
    int code = slot_reset(&p->seg, h, deadline, p->ring_index);
    if (code == RESET_NOT_TIMER)
        return PyErr_Format(PyExc_TypeError,
                            "reset() moves a timer's deadline; %#llx is an operation, whose "
                            "timeout stays as watch() set it", (long long)h);
    if (code == RESET_BUSY)
        return PyErr_Format(PyExc_TimeoutError,
                            "timer %#llx: another process's reset has held it for 2 s (a "
                            "process stopped in the middle of a reset?); nothing changed",
                            (long long)h);
    if (code != RESET_WON) Py_RETURN_FALSE;
    counter_add(&p->counters[C_RESETS], 1);   /* this client's row: one writer (the GIL) */
    if (PyObject_TypeCheck(target, &HandleType)) ((Handle *)target)->deadline_ms = deadline;
    if (!producer_push(p, h, CHECK_RESET))   /* cannot be: room was made above */
        return PyErr_Format(PyExc_SystemError, "reset: no room for its record");
    /* an earlier deadline must be relinked before it is due: wake a sleeping coordinator */
    if (deadline - now_ns / 1000000 < PRODUCER_URGENT_MS &&
        sleep_flag_after_publish(&p->header[p->w_sleeping]) && producer_bell(p) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

PyObject *producer_reset(Producer *p, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    i64 now_ns, due;
    PyObject *delay = NULL;
    if (nargs == 2 && !kwnames) delay = args[1];
    else if (nargs == 1 && kwnames && PyTuple_GET_SIZE(kwnames) == 1 &&
             PyTuple_GET_ITEM(kwnames, 0) == s_delay_ms_kw)
        delay = args[1];
    /* (refused while the service stops or its journal refuses: the slow path says why) */
    if (delay && p->fast && producer_accepting(p) && producer_due(p, delay, &now_ns, &due))
        return reset_to(p, args[0], due, now_ns);
    return producer_hook(p, HOOK_RESET_SLOW, args, nargs, kwnames);
}

PyObject *producer_reset_to(Producer *p, PyObject *args) {
    PyObject *target;
    long long deadline;
    if (!PyArg_ParseTuple(args, "OL:_reset_to", &target, &deadline)) return NULL;
    return reset_to(p, target, deadline, producer_now_ns());
}

int producer_reset_init(void) {
    s_delay_ms_kw = PyUnicode_InternFromString("delay_ms");
    return s_delay_ms_kw ? 0 : -1;
}
