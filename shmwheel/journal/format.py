"""The journal's on-disk format: segment file names, the file magic, record kinds and the
fields of each (docs/journal.md describes the same, for readers outside Python).

A segment file is the 8-byte magic (``SHWJRNL`` and the format version) followed by
framed records: ``u32 body length | u32 CRC-32C of the body | body`` (little-endian), each
body a msgpack array of fixed arity whose first element is the record's kind. Versions 1
and 2 framed with zlib's CRC-32 (``crc_of`` gives a version's). The first
record of every file is its HEADER. The hot records are encoded by the native core
(shmwheel/native/journal.c); this module encodes the rare ones (headers, recovery) with
msgpack, and both frame through ``_native.JournalBuffer``, so there is one framing.
"""

from __future__ import annotations

import os
import re
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from .. import _native as N
from ..wheel import constants as K

VERSION = 3
# what the reader reads: version 1 has no chain (no prev, END, RETIRED); versions 1 and 2
# frame with CRC-32 (zlib's), 3 with CRC-32C (the CPU's crc32 instruction computes it)
VERSIONS = (1, 2, 3)
MAGIC = b"SHWJRNL" + bytes([VERSION])
MAGIC_PREFIX = MAGIC[:7]
FRAME_BYTES = K.J_FRAME_BYTES
MAX_BODY = K.J_MAX_BODY
SUFFIX = ".shwj"

# record kinds (journal.h)
HEADER, SCHEDULED, CANCELLED, FIRED, OUTCOME = (
    K.J_HEADER,
    K.J_SCHEDULED,
    K.J_CANCELLED,
    K.J_FIRED,
    K.J_OUTCOME,
)
WATCHED, COMPLETED, EXPIRED = K.J_WATCHED, K.J_COMPLETED, K.J_EXPIRED
# the chain's records (version 2; encoded here, never by the native core): a segment ends
# with END (``next``: the file name of its successor, "" when its writer closed it), and a
# writer that deletes segments records their names in RETIRED, synced, before it unlinks
END, RETIRED = 8, 9
CHAIN_KINDS = (END, RETIRED)

#: the fields of each kind, in order, after the kind code itself
FIELDS: dict[int, tuple[str, ...]] = {
    HEADER: (
        "version",
        "role",
        "pid",
        "service",
        "epoch",
        "seq",
        "mono_us",
        "wall_us",
        "boot_id",
        "tasks",
        "next_gen",
        "tick_ms",
        "prev",
    ),
    SCHEDULED: (
        "id",
        "t_us",
        "deadline_ms",
        "task",
        "producer",
        "flags",
        "period_ms",
        "run",
        "blob",
    ),
    CANCELLED: ("id", "t_us"),
    FIRED: ("id", "t_us", "run", "deadline_ms"),
    OUTCOME: ("id", "t_us", "run", "outcome", "duration_us", "next_deadline_ms"),
    WATCHED: ("id", "t_us", "deadline_ms", "required", "keys", "on_complete", "on_expire", "blob"),
    COMPLETED: ("id", "t_us"),
    EXPIRED: ("id", "t_us"),
    END: ("t_us", "next"),
    RETIRED: ("t_us", "names"),
}
KIND_NAMES = {
    HEADER: "header",
    SCHEDULED: "scheduled",
    CANCELLED: "cancelled",
    FIRED: "fired",
    OUTCOME: "outcome",
    WATCHED: "watched",
    COMPLETED: "completed",
    EXPIRED: "expired",
    END: "end",
    RETIRED: "retired",
}
ARITY = {k: 1 + len(f) for k, f in FIELDS.items()}


def scan_column(kind: int, name: str) -> int:
    """The column of field `name` of a record of `kind` in the native scanner's rows
    (journal.h, JOURNAL_SCAN: the integer fields from SCAN_FIELDS on; a blob's offset and
    length are SCAN_BLOB_AT and SCAN_BLOB_LEN)."""
    return K.SCAN_FIELDS + FIELDS[kind].index(name)


HEADER_V1_ARITY = ARITY[HEADER] - 1  # a version 1 header has no prev

# SCHEDULED flags: the slot's own (contract.h) and the journal's
FLAG_KEY = K.FLAG_KEY  # the blob is msgpack [key, payload]
FLAG_REPEAT = K.FLAG_REPEAT  # period_ms > 0: the timer re-arms after each run
FLAG_RECOVERED = K.J_FLAG_RECOVERED  # written by a recovery: the timer was scheduled before
FLAG_RESET = K.J_FLAG_RESET  # written for a reset: deadline_ms is the timer's new deadline

# OUTCOME codes (contract.h)
OUTCOMES = {K.OUTCOME_OK: "ok", K.OUTCOME_ERROR: "error", K.OUTCOME_CRASHED: "crashed"}

# writer roles
ROLES = {1: "coordinator", 2: "reaper", 3: "recovery"}
ROLE_CODES = {name: code for code, name in ROLES.items()}

_NAME = re.compile(r"^(\d{6})-(\d{16})-([a-z]+)-(\d+)\.shwj$")


@dataclass(frozen=True)
class SegmentName:
    """What a segment file's name says: ``EPOCH-WALLUS-ROLE-PID.shwj``. Names sort by
    creation: by the service run (epoch), then by the wall clock in microseconds."""

    epoch: int
    wall_us: int
    role: str
    pid: int

    def filename(self) -> str:
        return f"{self.epoch:06d}-{self.wall_us:016d}-{self.role}-{self.pid}{SUFFIX}"

    @classmethod
    def parse(cls, filename: str) -> SegmentName | None:
        m = _NAME.match(filename)
        if not m:
            return None
        return cls(int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))


def segment_files(directory: str | os.PathLike[str]) -> list[str]:
    """The journal's segment files, oldest first (full paths)."""
    names = [n for n in os.listdir(directory) if SegmentName.parse(n) is not None]
    return [os.path.join(directory, n) for n in sorted(names)]


def body(kind: int, *fields: Any) -> bytes:
    """A record body (the rare kinds; the native core writes the frequent ones)."""
    if len(fields) != len(FIELDS[kind]):
        raise ValueError(
            f"a {KIND_NAMES[kind]} record has {len(FIELDS[kind])} fields "
            f"({', '.join(FIELDS[kind])}), got {len(fields)}"
        )
    blob: bytes = msgpack.packb([kind, *fields])  # msgpack ships no type hints
    return blob


def crc_of(version: int) -> Callable[[bytes], int]:
    """The checksum of the frames of format `version`: CRC-32C from version 3, else
    CRC-32 (zlib's)."""
    return N.journal_crc32c if version >= 3 else N.journal_crc32


def frame(body_: bytes, version: int = VERSION) -> bytes:
    """One record framed (length, checksum, body): by the native framing in this version,
    or as `version` framed it (the jobs' ledger keeps version 2's)."""
    if version >= 3:
        buf = N.JournalBuffer()
        buf.append(body_)
        return bytes(memoryview(buf))
    if len(body_) > MAX_BODY:
        raise ValueError(f"a journal record body is at most {MAX_BODY} bytes")
    return struct.pack("<II", len(body_), zlib.crc32(body_)) + body_


def intact_prefix(data: bytes, version: int = VERSION) -> int:
    """How many bytes of `data`, frames of format `version` from its start, are whole
    records whose checksum checks out (the rest is cut or damaged)."""
    at, crc_fn = 0, crc_of(version)
    while at + FRAME_BYTES <= len(data):
        n = int.from_bytes(data[at : at + 4], "little")
        crc = int.from_bytes(data[at + 4 : at + 8], "little")
        end = at + FRAME_BYTES + n
        if n == 0 or n > MAX_BODY or end > len(data):
            break
        if crc_fn(data[at + FRAME_BYTES : end]) != crc:
            break
        at = end
    return at


def as_dict(record: list[Any]) -> dict[str, Any]:
    """A decoded record as {"kind": name, field: value, ...} (a version 1 header gets
    ``prev`` None: its chain is unknown)."""
    kind = record[0]
    d: dict[str, Any] = {"kind": KIND_NAMES[kind]}
    if kind == HEADER and len(record) == HEADER_V1_ARITY:
        record = [*record, None]
    d.update(zip(FIELDS[kind], record[1:], strict=True))
    return d


def clock_pair_us() -> tuple[int, int]:
    """(monotonic, wall clock) now, in microseconds, read as one instant: the wall clock
    between two monotonic reads, the tightest of three tries. Two plain reads one after
    the other are skewed by whatever runs between them (a preemption of milliseconds on
    a loaded machine), and the recovery on another boot maps every deadline by their
    difference, so a skew would move deadlines (earlier, too)."""
    best = (1 << 62, 0, 0)
    for _ in range(3):
        m0 = time.monotonic_ns()
        w = time.time_ns()
        m1 = time.monotonic_ns()
        if m1 - m0 < best[0]:
            best = (m1 - m0, (m0 + m1) // 2, w)
    return best[1] // 1000, best[2] // 1000


def boot_id() -> str:
    """This boot of the machine: monotonic times of different boots cannot be compared."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
