"""The one decoder of journal segments: recovery, the tests and the audit pipeline all read
through it.

Nothing is trusted. A segment whose magic is wrong or whose version is unknown is
rejected whole; a record whose frame runs past the end of the file is a torn tail (a
writer killed mid-write) and ends the file; a record whose checksum (CRC-32C; CRC-32 in
versions 1 and 2) does not match, or whose
body is not a msgpack array of the right kind and arity, is rejected and skipped (its
length was plausible); a length that cannot be right ends the file. Every reject names
its file and byte offset.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from .. import _native as N
from ..wheel import constants as K
from . import format as F

log = logging.getLogger("shmwheel.journal")


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
    """One segment file read whole: its header (a dict), its records and what was
    rejected. ``rows`` is the columnar form the native scanner gives (``SCAN_WORDS``
    int64 per record, journal.h's JOURNAL_SCAN: frame offset, status, kind, up to 8
    integer fields, blob offset and length in ``data``, the blob as a payload word if it
    has at most 8 bytes; ``format.scan_column`` names a field's column); ``records`` the
    same as lists (format.FIELDS), built on first use."""

    path: str
    header: dict[str, Any] | None = None
    rejects: list[Reject] = field(default_factory=list)
    end: dict[str, Any] | None = None  # its END record: the chain goes on at end["next"]
    retired: list[str] = field(default_factory=list)  # names its RETIRED records list
    size: int = 0
    data: bytes = b""
    rows: np.ndarray = field(default_factory=lambda: np.empty((0, K.SCAN_WORDS), np.int64))
    decoded: dict[int, list[Any]] = field(default_factory=dict)  # by frame offset
    _records: list[list[Any]] | None = None

    @property
    def records(self) -> list[list[Any]]:
        if self._records is None:
            out, data = [], self.data
            at, length, first = K.SCAN_BLOB_AT, K.SCAN_BLOB_LEN, K.SCAN_FIELDS
            for row in self.rows.tolist():
                rec = self.decoded.get(row[K.SCAN_OFFSET])
                if rec is None:
                    kind = row[K.SCAN_KIND]
                    n = len(F.FIELDS[kind])
                    if kind in _BLOB_LAST:
                        blob = data[row[at] : row[at] + row[length]]
                        rec = [kind, *row[first : first + n - 1], blob]
                    else:
                        rec = [kind, *row[first : first + n]]
                out.append(rec)
            self._records = out
        return self._records


_CRC_NAME = {False: "CRC-32", True: "CRC-32C"}  # what frames carry, by version >= 3
_ROW_GUESS_BYTES = 24  # a journal's records average about 28 bytes with their frame
_END = {  # why the scanner stopped short (journal.h's SCAN_END_*)
    K.SCAN_END_TORN_FRAME: "torn: the file ends inside a frame",
    K.SCAN_END_TORN_BODY: "torn: the file ends inside a record",
    K.SCAN_END_BAD_LENGTH: "bad frame length; the rest of the file is unreadable",
}


def read_header(path: str) -> dict[str, Any] | None:
    """Just the header of a segment file (None if it has none that checks out)."""
    return read_segment(path, len(F.MAGIC) + F.FRAME_BYTES + F.MAX_BODY).header


def read_segment(path: str, limit: int = -1) -> Segment:
    """Decode one segment file (see the module docstring for what is rejected); with
    `limit`, only its first `limit` bytes. The frames are checked and the frequent kinds
    decoded by the native scanner (journal.c), the rest by msgpack here."""
    with open(path, "rb") as f:
        data = f.read(limit)
    return parse_segment(path, data)


def parse_segment(path: str, data: bytes) -> Segment:
    """Decode a segment's bytes already in memory (read from `path`, which names it in
    rejects): the same checks as read_segment. The audit pipeline's binaryFile reader
    gives file contents this way."""
    seg = Segment(path)
    seg.size, seg.data = len(data), data
    if len(data) < len(F.MAGIC) or data[:7] != F.MAGIC_PREFIX:
        if len(data) < len(F.MAGIC) and F.MAGIC_PREFIX.startswith(data[:7]):
            seg.rejects.append(Reject(path, 0, "torn: the file ends inside its magic"))
        else:
            seg.rejects.append(Reject(path, 0, "not a shmwheel journal segment (bad magic)"))
        return seg
    if data[7] not in F.VERSIONS:
        seg.rejects.append(
            Reject(
                path,
                7,
                f"unknown format version {data[7]} (this shmwheel reads versions "
                f"{', '.join(map(str, F.VERSIONS))})",
            )
        )
        return seg
    # the scanner writes straight into one array (a row slice is C-contiguous), sized for
    # records of the usual length and doubled if they are shorter: no copy per block
    # (a 64 MiB segment's rows are about 280 MB; each copy of them cost a tenth of a
    # second or more, most of it the kernel handing out fresh pages)
    out = np.empty((max(16, len(data) // _ROW_GUESS_BYTES), K.SCAN_WORDS), np.int64)
    count, at = 0, len(F.MAGIC)
    while True:
        if count == len(out):
            out = np.concatenate([out, np.empty_like(out)])
        n, at, end = N.journal_scan(data, at, out[count:], data[7])
        count += n
        if end != K.SCAN_END_FULL:
            break
    rows = out[:count]
    status = rows[:, K.SCAN_STATUS]
    keep = status == K.SCAN_DECODED
    for i in np.flatnonzero(~keep).tolist():
        off, bad = int(rows[i, K.SCAN_OFFSET]), int(status[i]) == K.SCAN_BAD_CRC
        rec = None if bad else _decode(data, off, seg)
        if bad:
            seg.rejects.append(Reject(path, off, f"bad {_CRC_NAME[data[7] >= 3]}"))
        elif rec is not None:
            if rec[0] == F.HEADER:
                if seg.header is None and i == 0:
                    seg.header = F.as_dict(rec)
                else:
                    seg.rejects.append(Reject(path, off, "a second header"))
                continue
            if rec[0] in F.CHAIN_KINDS:  # the chain's records are not lifecycle records
                _chain(seg, rec, off, i == count - 1)
                continue
            seg.decoded[off] = rec
            keep[i] = True
    if end in _END:
        seg.rejects.append(Reject(path, at, _END[end]))
    elif count == 0:  # its magic and nothing more
        seg.rejects.append(Reject(path, at, "torn: the file ends before its header"))
    # the usual case, a view: at most row 0 (the header) is not a record row
    if count:
        rows = rows[0 if keep[0] else 1 :] if keep[1:].all() else rows[keep]
    if seg.header is None and len(rows):
        seg.rejects.append(
            Reject(
                path,
                int(rows[0, K.SCAN_OFFSET]),
                f"{len(rows)} records before the segment's header (none read)",
            )
        )
        rows = rows[:0]
    seg.rows = rows
    return seg


def frame_after(data: bytes, start: int) -> int | None:
    """The offset of the first whole frame (a plausible length, its checksum right) that
    begins after `start` in a segment's `data`, or None: a torn tail has none after its
    cut; a bad length word in the middle of a file has the rest of the file's frames
    after it."""
    n = len(data) - start - 1 - F.FRAME_BYTES
    if n <= 0:
        return None
    crc_of = F.crc_of(data[7])
    b = np.frombuffer(data, np.uint8, offset=start + 1).astype(np.uint32)
    lens = b[:n] | b[1 : n + 1] << 8 | b[2 : n + 2] << 16 | b[3 : n + 3] << 24
    pos = np.arange(n, dtype=np.int64) + start + 1
    ok = (lens > 0) & (lens <= F.MAX_BODY) & (pos + F.FRAME_BYTES + lens <= len(data))
    for p in pos[ok][:100_000].tolist():
        length, crc = int.from_bytes(data[p : p + 4], "little"), data[p + 4 : p + 8]
        body = data[p + F.FRAME_BYTES : p + F.FRAME_BYTES + length]
        if crc_of(body).to_bytes(4, "little") == crc:
            return int(p)
    return None


def _chain(seg: Segment, rec: list[Any], off: int, last: bool) -> None:
    """An END (only as the segment's last record) or RETIRED record, kept on `seg`."""
    if rec[0] == F.RETIRED:
        names = rec[2]
        if type(names) is list and all(type(n) is str for n in names):
            seg.retired.extend(names)
        else:
            seg.rejects.append(Reject(seg.path, off, "a retired record without file names"))
    elif not last or seg.end is not None or type(rec[2]) is not str:
        seg.rejects.append(Reject(seg.path, off, "an end record that is not the last record"))
    else:
        seg.end = F.as_dict(rec)


def _decode(data: bytes, off: int, seg: Segment) -> list[Any] | None:
    """A record the scanner left to Python (a header, a purgatory record, or a body it
    did not understand), or None with a reject."""
    n = int.from_bytes(data[off : off + 4], "little")
    try:
        rec = msgpack.unpackb(data[off + F.FRAME_BYTES : off + F.FRAME_BYTES + n])
    except Exception as e:  # noqa: BLE001 (msgpack raises several kinds on garbage)
        seg.rejects.append(Reject(seg.path, off, f"bad msgpack body: {e}"))
        return None
    known = type(rec) is list and bool(rec) and type(rec[0]) is int
    arity_ok = known and F.ARITY.get(rec[0]) == len(rec)
    if known and rec[0] == F.HEADER and len(rec) == F.HEADER_V1_ARITY:
        arity_ok = seg.data[7] == 1  # a version 1 header has no prev
    if not arity_ok or rec[0] in _NATIVE:  # a native kind the scanner could not decode
        seg.rejects.append(Reject(seg.path, off, "not a record of a known kind and arity"))
        return None
    out: list[Any] = rec
    return out


_BLOB_LAST = (F.SCHEDULED, F.WATCHED)  # kinds whose last field is the blob (journal.c)
_NATIVE = {F.SCHEDULED, F.CANCELLED, F.FIRED, F.OUTCOME, F.COMPLETED, F.EXPIRED}


def read(directory: str | os.PathLike[str]) -> Iterator[Segment]:
    """Every segment of a journal directory, oldest first, decoded."""
    for path in F.segment_files(directory):
        yield read_segment(path)


def records(
    directory: str | os.PathLike[str], rejects: list[Reject] | None = None
) -> Iterator[dict[str, Any]]:
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
