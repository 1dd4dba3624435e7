"""msgpack payloads of service timers: encoded at the API, stored inline in the side
record (up to 8 bytes) or in an arena block, and decoded, after bounds checks, in the
executor. The hard maximum is the largest arena class (4096 encoded bytes)."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from . import slots as SK
from .layout import INLINE_MAX, MAX_PAYLOAD, ServiceMemory

NIL_INLINE = 0xC0  # msgpack nil, the encoding of a None payload


def encode(payload: Any, key: Any = None) -> tuple[bytes, int]:
    """(blob, flags) for a payload and optional key; TypeError / ValueError say what to change."""
    if key is not None and (isinstance(key, bool) or not isinstance(key, (str, bytes, int))):
        raise TypeError(f"key must be str, bytes or int, got {type(key).__name__}")
    try:
        if key is None:
            blob, flags = msgpack.packb(payload), 0
        else:
            blob, flags = msgpack.packb([key, payload]), SK.FLAG_KEY
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"payload must be msgpack-encodable (None, bool, int, float, str, bytes, "
                        f"list, dict of those): {e}") from None
    if len(blob) > MAX_PAYLOAD:
        raise ValueError(f"payload encodes to {len(blob)} bytes; the maximum is {MAX_PAYLOAD}: "
                         f"store large data elsewhere and pass a reference")
    return blob, flags


def size_class(n: int) -> int:
    """The smallest arena class that holds n bytes."""
    for c, size in enumerate(SK.ARENA_CLASSES):
        if n <= size:
            return c
    raise ValueError(f"{n}-byte payload exceeds {MAX_PAYLOAD}")


def inline_word(blob: bytes) -> int:
    return int.from_bytes(blob.ljust(8, b"\0"), "little", signed=True)


def decode(mem: ServiceMemory, slot: int) -> tuple[Any, Any, int]:
    """(payload, key, run number) of a DUE slot; ValueError if its side record is not
    trustworthy."""
    i = slot * SK.SIDE_WORDS
    meta = int(mem.side[i + SK.S_META])
    flags = (meta >> 16) & 0xFF
    length = (meta >> 32) & 0xFFFF
    word = int(mem.side[i + SK.S_PAYLOAD])
    attempt = 1
    if flags & SK.FLAG_ARENA:
        c = (meta >> 24) & 0xFF
        skip = SK.REPEAT_HEADER if flags & SK.FLAG_REPEAT else 0
        if c >= SK.NCLASSES or skip + length > SK.ARENA_CLASSES[c]:
            raise ValueError(f"slot {slot}: payload class {c} / length {length} out of range")
        base = c * SK.A_CLASS_WORDS
        if not 0 <= word < int(mem.arena[base + SK.A_NBLOCKS]) or \
                int(mem.arena[int(mem.arena[base + SK.A_OFF_OWNER]) + word]) != slot + 1:
            raise ValueError(f"slot {slot}: arena block {word} is not this timer's")
        block = mem.arena_block(c, word)
        if skip:
            attempt = int(block[8:16].view(np.int64)[0])
        blob = block[skip : skip + length].tobytes()
    else:
        if not 0 < length <= INLINE_MAX:
            raise ValueError(f"slot {slot}: inline payload length {length} out of range")
        blob = word.to_bytes(8, "little", signed=True)[:length]
    value = msgpack.unpackb(blob)
    if flags & SK.FLAG_KEY:
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"slot {slot}: keyed payload is not a [key, payload] pair")
        return value[1], value[0], attempt
    return value, None, attempt
