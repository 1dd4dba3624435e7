"""Several journals in one audit (issue 24): which directories, whose segments, and whether
each service's chains are whole.

**Identity.** A row's service is the ``service`` of its segment's header: the name the
service was made with (``TimerService(name=...)``; by default ``s<pid>-<8 hex digits>``,
unique), the same in every epoch of one journal, whatever directory its files sit in.
A timer keeps its id across the epochs of its service (a recovery re-arms it with it), so
the audit keys a timer by (service, id): the journals of different services never mix,
even copied into one directory. The instance that wrote a row is (service, epoch), with
the writer's role and pid; its host is the header's ``boot_id`` (the header names no
host). Two journals made with the same ``name=`` read as one service's: their chains
then fork or double (two first segments of an epoch), a reject, never a silent merge.

**Completeness.** Each service's segments (from every directory given) are judged by the
journal's own rules (docs/journal.md, "The chain"), as ``shmwheel journal check`` judges
a directory: a missing first, middle or last segment, a missing writer's chain, a segment
cut short, a fork. Each file is judged by itself in the Spark task that decodes it
(``segment_report``), the chains of each service on the driver (``completeness``), from
those reports: the journal is read once. Damage of that kind is a reject of the audit
(``Gap``); the decoder's own rejects (a bad CRC, a torn tail) are counted by the Spark
tasks, not again here.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...journal import check, verdict
from ...journal import format as journal_format
from ...journal.chains import analyse
from ...journal.reader import Segment

UNKNOWN = "unknown"  # a segment with no readable header whose service nothing else tells


def is_uri(path: str) -> bool:
    """A path only Hadoop's filesystems reach (read with ``--reader binaryfile``)."""
    return "://" in path and not path.startswith("file://")


def journal_dirs(args: Sequence[str]) -> list[str]:
    """The journal directories named by `args` (paths, shell-style globs, URIs passed
    through as they are), each once, in order. FileNotFoundError (a clear message) for
    a path that does not exist, a glob that matches nothing, a directory without segments;
    ValueError for one segment file name in two directories (the same segment twice)."""
    out: list[str] = []
    seen: set[str] = set()
    for arg in args:
        if is_uri(arg):
            if arg not in seen:
                seen.add(arg)
                out.append(arg)
            continue
        arg = arg.removeprefix("file://")
        if glob.has_magic(arg):
            found = sorted(p for p in glob.glob(arg) if os.path.isdir(p))
            if not found:
                raise FileNotFoundError(f"no journal directory matches {arg!r}")
        else:
            found = [arg]
        for d in found:
            real = os.path.realpath(d)
            if real not in seen:
                seen.add(real)
                out.append(d)
    local = [d for d in out if not is_uri(d)]
    where: dict[str, str] = {}
    for d in local:
        if not os.path.isdir(d):
            raise FileNotFoundError(f"no journal directory at {d!r}")
        files = journal_format.segment_files(d)
        if not files:
            raise FileNotFoundError(f"{d!r} holds no journal segments (*.shwj)")
        for p in files:
            name = os.path.basename(p)
            if name in where:
                raise ValueError(
                    f"segment {name} is in both {where[name]!r} and {d!r}: the same "
                    f"journal given twice (or a copy of it)"
                )
            where[name] = d
    return out


@dataclass
class Service:
    """One service of the audit: its segments and what their headers say."""

    name: str
    segments: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    boot_ids: list[str] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    #: epoch -> when its first segment was begun (wall us: the earliest header's)
    epoch_starts: dict[int, int] = field(default_factory=dict)
    reports: list[check.SegmentReport] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.name,
            "segments": len(self.segments),
            "directories": self.directories,
            "hosts": self.boot_ids or [UNKNOWN],
            "epochs": self.epochs,
        }


@dataclass(frozen=True)
class Gap:
    """A reject of the completeness check: a problem of ``check`` in one service's
    segments (its file, "" for the service's journal as a whole, and what is wrong)."""

    service: str
    file: str
    what: str

    def __str__(self) -> str:
        return f"service {self.service!r}: {self.what}"


def segment_report(seg: Segment) -> check.SegmentReport:
    """The journal's own judgement of one segment file by itself (``check._read``: its
    header, END and RETIRED records, its frames' problems, a torn tail, the time of its
    last record), of a segment the caller has decoded already, without the pending-state
    scan recovery needs and the audit does not. The decoding tasks call it on the segment
    they hold (``decode.py``), so the chain rules run on the driver without a second read
    of the journal: judged there by ``check.inspect``, a 10 M-record journal took twice as
    long as decoding it (docs/pipeline.md). journal/check.py has no entry point that takes
    a decoded segment, so its reader and its state scan are replaced for this one call."""
    real_read, real_collect = check.read_segment, check.collect
    check.read_segment = lambda path, limit=-1: seg  # type: ignore[assignment]
    check.collect = lambda *args: None  # type: ignore[assignment]
    try:
        return check._read(seg.path, 0)
    finally:
        check.read_segment, check.collect = real_read, real_collect


def services(reports: Sequence[check.SegmentReport]) -> dict[str, Service]:
    """The segments (their reports, ``segment_report``) grouped by the service their
    headers name. A segment without a readable header goes with the segment of the same
    epoch and process that has one (in its directory), else with its directory's only
    service, else under ``UNKNOWN``."""
    by_dir: dict[str, list[check.SegmentReport]] = {}
    for r in reports:
        by_dir.setdefault(os.path.dirname(r.path), []).append(r)
    by_name: dict[str, Service] = {}
    for d, reps in sorted(by_dir.items()):
        named = {(r.name.epoch, r.name.pid): str(r.header["service"])
                 for r in reps if r.header is not None}  # fmt: skip
        here = set(named.values())
        for r in sorted(reps, key=lambda r: r.basename):
            h = r.header
            if h is not None:
                name = str(h["service"])
            else:
                guess = next(iter(here)) if len(here) == 1 else UNKNOWN
                name = named.get((r.name.epoch, r.name.pid), guess)
            s = by_name.setdefault(name, Service(name))
            s.segments.append(r.path)
            s.reports.append(r)
            if d not in s.directories:
                s.directories.append(d)
            if h is None:
                continue
            if h.get("boot_id") and h["boot_id"] not in s.boot_ids:
                s.boot_ids.append(h["boot_id"])
            e = int(h["epoch"])
            if e not in s.epochs:
                s.epochs.append(e)
            if e not in s.epoch_starts or int(h["wall_us"]) < s.epoch_starts[e]:
                s.epoch_starts[e] = int(h["wall_us"])
    for s in by_name.values():
        s.epochs.sort()
    return by_name


def completeness(groups: dict[str, Service]) -> tuple[list[Gap], list[Gap]]:
    """Each service's segments judged together by the journal's chain rules
    (``chains.analyse``, as ``check.inspect`` judges a directory): (rejects, warnings).
    The rejects are the damage that is not a decoder's reject (those the Spark tasks
    count): a missing segment or writer's chain, a segment cut short, a fork, a renamed
    file; the warnings, check's (gaps in superseded epochs, a start killed early)."""
    rejects: list[Gap] = []
    warnings: list[Gap] = []
    for name, s in sorted(groups.items()):
        if name == UNKNOWN:
            rejects += [
                Gap(name, p, f"{os.path.basename(p)}: no readable header names its service")
                for p in s.segments
            ]
            continue
        insp = check.Inspection(s.directories[0])
        insp.reports = sorted(s.reports, key=lambda r: r.basename)
        analyse(insp)
        decoded = {
            id(p) for r in insp.reports for p in r.frame if "does not match its name" not in p.what
        }
        for p in insp.problems:
            if id(p) in decoded or p.severity == verdict.TORN:
                continue
            gap = Gap(name, os.path.basename(p.file), str(p))
            (rejects if p.severity == check.DAMAGE else warnings).append(gap)
    return rejects, warnings


def local_reports(dirs: Sequence[str]) -> list[check.SegmentReport]:
    """The reports (``segment_report``) of the segments of local journal directories,
    read here in this process (the audit has its Spark tasks make them)."""
    from ...journal.reader import read_segment

    return [segment_report(read_segment(p)) for d in dirs for p in journal_format.segment_files(d)]
