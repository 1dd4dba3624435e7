"""A word of the segment that several processes update bit by bit (the header's W_READY:
the coordinator and the reaper set their bits as they finish starting, at the same moment)
takes each update whole: ``word_or`` / ``word_and`` are one atomic read-modify-write. With a
plain ``words[i] |= bit`` one process's bit was now and then lost, and ``start()`` waited
its 60 s for a reaper that was running (about 1 journaled start in 300 on two cores)."""

from __future__ import annotations

import mmap
import multiprocessing

import numpy as np

from shmwheel import _native as N

ROUNDS = 20_000


def _flip(buf: mmap.mmap, bit: int, lost: multiprocessing.Value) -> None:
    words = np.frombuffer(buf, np.int64)
    missed = 0
    for _ in range(ROUNDS):
        N.word_or(words, 0, bit)
        if not words[0] & bit:
            missed += 1
        N.word_and(words, 0, ~bit)
        if words[0] & bit:
            missed += 1
    with lost.get_lock():
        lost.value += missed


def test_bits_set_and_cleared_by_several_processes_at_once_are_never_lost():
    buf = mmap.mmap(-1, 64)  # shared with the forked children
    ctx = multiprocessing.get_context("fork")
    lost = ctx.Value("q", 0)
    procs = [ctx.Process(target=_flip, args=(buf, 1 << i, lost)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    assert lost.value == 0
    assert np.frombuffer(buf, np.int64)[0] == 0
