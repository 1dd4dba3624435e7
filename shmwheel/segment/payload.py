"""msgpack payloads of service timers, encoded at the API boundary.

A payload (and its key, if any) is encoded here once, with the API's errors; the blob is
stored inline in the side record (up to ``INLINE_MAX`` bytes) or in an arena block of the
smallest class that holds it, and decoded, after its side record checks out, by the
executor's native loop. The hard maximum is the largest arena class.

What is accepted is what the executor can decode: it decodes with ``unpack`` below,
msgpack's defaults, whose ``strict_map_key`` refuses a map key that is not a str or bytes
(the journal's reader decodes the same way). msgpack's Packer writes such keys, so every
blob is checked (``decodable``, natively: shmwheel/native/payload.c) and a dict with an
int, tuple, None, ... key at any depth is refused at the call with TypeError, rather than
accepted and failed in the executor.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .. import _native as N
from . import contract as C

_pack = msgpack.Packer().pack  # one reusable packer: packb builds a new one per call
fast_pack = msgpack.Packer().pack  # the native schedule path's own (it checks the size)


def _refuse(e: Exception) -> TypeError:
    return TypeError(
        f"payload must be msgpack-encodable (None, bool, int, float, str, bytes, "
        f"list, dict of those): {e}"
    )


def decodable(blob: bytes) -> bytes:
    """`blob` if the executor can decode it, else the API's TypeError (a map key that is
    not a str or bytes)."""
    why = N.payload_problem(blob)
    if why is not None:
        raise TypeError(
            f"payload holds {why}: dict keys must be str or bytes, at any depth (the "
            f"executor decodes payloads with msgpack's strict_map_key)"
        )
    return blob


def _check_size(blob: bytes) -> bytes:
    if len(blob) > C.MAX_PAYLOAD:
        raise ValueError(
            f"payload encodes to {len(blob)} bytes; the maximum is "
            f"{C.MAX_PAYLOAD}: store large data elsewhere and pass a reference"
        )
    return blob


def encode_payload(payload: Any) -> bytes:
    """The msgpack blob of a payload, or the API's TypeError / ValueError."""
    try:
        blob = _pack(payload)
    except (TypeError, ValueError, OverflowError) as e:
        raise _refuse(e) from None
    return _check_size(decodable(blob))


def encode(payload: Any, key: Any = None) -> tuple[bytes, int]:
    """(blob, flags) for a payload and optional key; TypeError / ValueError say what to
    change."""
    if key is None:
        return encode_payload(payload), 0
    if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
        raise TypeError(f"key must be str, bytes or int, got {type(key).__name__}")
    try:
        blob = _pack([key, payload])
    except (TypeError, ValueError, OverflowError) as e:
        raise _refuse(e) from None
    return _check_size(decodable(blob)), C.FLAG_KEY


def encode_lease(payload: Any, holder: str | None) -> tuple[bytes, int]:
    """(blob, flags) of a lease's timer (Client.lease): keyed by the list [holder], which
    no key of schedule() can be (those are str, bytes or int), so the running task's
    context tells a lease's holder apart from a key (service/processes/context.py)."""
    if holder is not None and not isinstance(holder, str):
        raise TypeError(f"holder must be a str or None, got {type(holder).__name__}")
    try:
        blob = _pack([[holder], payload])
    except (TypeError, ValueError, OverflowError) as e:
        raise _refuse(e) from None
    return _check_size(decodable(blob)), C.FLAG_KEY


def encode_calendar(payload: Any, spec: dict[str, Any]) -> tuple[bytes, int]:
    """(blob, flags) of a calendar timer (Client.schedule(cron=...)): keyed by its
    calendar, a dict (service/calendar.py), which no key of schedule() can be."""
    try:
        blob = _pack([spec, payload])
    except (TypeError, ValueError, OverflowError) as e:
        raise _refuse(e) from None
    return _check_size(decodable(blob)), C.FLAG_KEY


def size_class(n: int) -> int:
    """The smallest arena class that holds n bytes."""
    for c, size in enumerate(C.ARENA_CLASS_BYTES):
        if n <= size:
            return c
    raise ValueError(f"{n}-byte payload exceeds {C.MAX_PAYLOAD}")


unpack = msgpack.unpackb
