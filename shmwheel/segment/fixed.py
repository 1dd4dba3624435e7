"""The words of a service segment that ``ServiceMemory.create`` writes once and the native
tables then trust as sizes and offsets, outside the segment header (``layout.read_config``
checks the header's): the wheel's header, the arena's class table, and the sizes of the
watch and waiter tables; and ``check_sizes``, which refuses a recorded config that no
service has (a negative size).

``arena_classes`` is the class table create writes; ``check`` compares every such word
with what the segment's config makes it, at every open (``ServiceMemory.attach``), so a
damaged word is a ``LayoutError`` naming it there, never an out-of-bounds access in the
native code later. This module takes plain values, not a ``ServiceConfig``, so that
``layout`` can import it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import LayoutError
from ..wheel import core as wheel_core
from . import contract

# the class-table words create fixes (the others, A_FREE, change as blocks come and go)
ARENA_FIXED = (
    contract.A_NBLOCKS,
    contract.A_OFF_NEXT,
    contract.A_OFF_OWNER,
    contract.A_DATA,
    contract.A_BLOCK_WORDS,
)


def check_sizes(config: dict[str, object]) -> None:
    """ValueError naming the first field of a recorded config (its ``asdict``) that holds a
    negative number, which no service's config has."""
    for field, value in config.items():
        items = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(x, (int, float)) and x < 0 for x in items):
            raise ValueError(f"its {field} is {value!r}")


def arena_classes(blocks: Sequence[int]) -> np.ndarray:
    """The arena's class table for `blocks` blocks of each class, as create writes it:
    (ARENA_CLASSES, A_CLASS_WORDS) words, each class's next and owner arrays after the
    table and its blocks after the previous class's."""
    table = np.zeros((contract.ARENA_CLASSES, contract.A_CLASS_WORDS), np.int64)
    at, data = contract.ARENA_CLASSES * contract.A_CLASS_WORDS, 0
    for c, n in enumerate(blocks):
        row = table[c]
        row[contract.A_NBLOCKS] = n
        row[contract.A_OFF_NEXT] = at
        row[contract.A_OFF_OWNER] = at + n
        row[contract.A_DATA] = data // 8
        row[contract.A_BLOCK_WORDS] = contract.ARENA_CLASS_BYTES[c] // 8
        data += n * contract.ARENA_CLASS_BYTES[c]
        at += 2 * n
    return table


def check(
    name: str,
    wheel: np.ndarray,
    geometry: wheel_core.WheelGeometry,
    arena: np.ndarray,
    blocks: Sequence[int],
    watch: np.ndarray,
    watch_sizes: tuple[int, int],
    waiters: np.ndarray,
    waiter_buckets: int,
) -> None:
    """LayoutError unless every fixed word of segment `name` is what its config makes it:
    the wheel header for `geometry`, the arena class table for `blocks`, the watch table's
    (buckets, capacity) `watch_sizes` and the waiter table's `waiter_buckets`."""
    g = geometry
    if len(wheel) < contract.WHEEL_HEADER_WORDS or [
        int(wheel[h])
        for h in (contract.H_TICK, contract.H_WHEEL, contract.H_LEVELS, contract.H_CAPACITY)
    ] != [g.tick, g.wheel_size, g.levels, g.capacity]:
        raise LayoutError(
            f"segment {name} is damaged: its wheel header's sizes are not its config's {g}"
        )
    try:  # the sizes are the config's now: the rest of the header is checked against them
        wheel_core.read_geometry(wheel)
    except LayoutError as e:
        raise LayoutError(f"segment {name} is damaged: {e}") from e
    n = contract.ARENA_CLASSES * contract.A_CLASS_WORDS
    if len(arena) < n:
        raise LayoutError(f"segment {name} is damaged: its arena table is cut short")
    have = arena[:n].reshape(contract.ARENA_CLASSES, contract.A_CLASS_WORDS)[:, ARENA_FIXED]
    want = arena_classes(blocks)[:, ARENA_FIXED]
    if not np.array_equal(have, want):
        raise LayoutError(
            f"segment {name} is damaged: its arena class table is {have.tolist()}, its "
            f"config makes it {want.tolist()}"
        )
    sizes = (int(watch[contract.WT_NBUCKETS]), int(watch[contract.WT_CAPACITY]))
    if sizes != tuple(watch_sizes):
        raise LayoutError(
            f"segment {name} is damaged: its watch table has (buckets, capacity) {sizes}, "
            f"its config makes them {tuple(watch_sizes)}"
        )
    if int(waiters[contract.WA_NBUCKETS]) != waiter_buckets:
        raise LayoutError(
            f"segment {name} is damaged: its waiter table has {int(waiters[contract.WA_NBUCKETS])} "
            f"buckets, its config makes it {waiter_buckets}"
        )
