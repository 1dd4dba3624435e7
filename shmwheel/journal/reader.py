"""The one decoder of journal segments: recovery, the tests and the audit pipeline all read
through it.

Nothing is trusted. A segment whose magic is wrong or whose version is unknown is
rejected whole; a record whose frame runs past the end of the file is a torn tail (a
writer killed mid-write) and ends the file; a record whose CRC-32 does not match, or whose
body is not a msgpack array of the right kind and arity, is rejected and skipped (its
length was plausible); a length that cannot be right ends the file. Every reject names
its file and byte offset.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from . import format as F

log = logging.getLogger("shmwheel.journal")

_FRAME = struct.Struct("<II")


@dataclass(frozen=True)
class Reject:
    """A part of a segment file that was not read as a record."""

    file: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file} at byte {self.offset}: {self.reason}"


@dataclass
class Segment:
    """One segment file read whole: its header (a dict) and its records (lists, as in
    format.FIELDS), and what was rejected."""

    path: str
    header: dict[str, Any] | None = None
    records: list[list[Any]] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    size: int = 0


def read_header(path: str) -> dict[str, Any] | None:
    """Just the header of a segment file (None if it has none that checks out)."""
    return read_segment(path, len(F.MAGIC) + F.FRAME_BYTES + F.MAX_BODY).header


def read_segment(path: str, limit: int = -1) -> Segment:
    """Decode one segment file (see the module docstring for what is rejected); with
    `limit`, only its first `limit` bytes."""
    seg = Segment(path)
    with open(path, "rb") as f:
        data = f.read(limit)
    seg.size = len(data)
    if len(data) < len(F.MAGIC) or data[:7] != F.MAGIC_PREFIX:
        if len(data) < len(F.MAGIC) and F.MAGIC_PREFIX.startswith(data[:7]):
            seg.rejects.append(Reject(path, 0, "torn: the file ends inside its magic"))
        else:
            seg.rejects.append(Reject(path, 0, "not a shmwheel journal segment (bad magic)"))
        return seg
    if data[7] != F.VERSION:
        seg.rejects.append(Reject(path, 7, f"unknown format version {data[7]} (this "
                                           f"shmwheel reads version {F.VERSION})"))
        return seg
    records = seg.records
    unpack, crc32, frame = msgpack.unpackb, zlib.crc32, _FRAME.unpack_from
    arity, end, at = F.ARITY, len(data), len(F.MAGIC)
    while at < end:
        if at + F.FRAME_BYTES > end:
            seg.rejects.append(Reject(path, at, "torn: the file ends inside a frame"))
            break
        n, crc = frame(data, at)
        if n == 0 or n > F.MAX_BODY:
            seg.rejects.append(Reject(path, at, f"bad frame length {n}; the rest of the "
                                                f"file ({end - at} bytes) is unreadable"))
            break
        start = at + F.FRAME_BYTES
        if start + n > end:
            seg.rejects.append(Reject(path, at, f"torn: a {n}-byte record with "
                                                f"{end - start} bytes left"))
            break
        body = data[start: start + n]
        at = start + n
        if crc32(body) != crc:
            seg.rejects.append(Reject(path, start - F.FRAME_BYTES, "bad CRC-32"))
            continue
        try:
            rec = unpack(body)
        except Exception as e:
            seg.rejects.append(Reject(path, start - F.FRAME_BYTES, f"bad msgpack body: {e}"))
            continue
        if type(rec) is not list or not rec or arity.get(rec[0]) != len(rec):
            seg.rejects.append(Reject(path, start - F.FRAME_BYTES,
                                      "not a record of a known kind and arity"))
            continue
        if rec[0] == F.HEADER:
            if seg.header is None and not records:
                seg.header = F.as_dict(rec)
                continue
            seg.rejects.append(Reject(path, start - F.FRAME_BYTES, "a second header"))
            continue
        if seg.header is None:
            seg.rejects.append(Reject(path, start - F.FRAME_BYTES,
                                      "a record before the segment's header"))
            continue
        records.append(rec)
    return seg


def read(directory: str | os.PathLike[str]) -> Iterator[Segment]:
    """Every segment of a journal directory, oldest first, decoded."""
    for path in F.segment_files(directory):
        yield read_segment(path)


def records(directory: str | os.PathLike[str],
            rejects: list[Reject] | None = None) -> Iterator[dict[str, Any]]:
    """Every record of a journal as a dict (``kind`` and the fields of format.FIELDS),
    oldest segment first; rejects are appended to `rejects` (or logged)."""
    for seg in read(directory):
        for r in seg.rejects:
            if rejects is not None:
                rejects.append(r)
            else:
                log.warning("journal: %s", r)
        for rec in seg.records:
            yield F.as_dict(rec)
