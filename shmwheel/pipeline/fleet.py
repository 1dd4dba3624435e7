"""Several journals in one audit (issue 24): which directories, whose segments, and whether
each service's chains are whole — on the driver, before Spark.

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
journal's own rules, ``shmwheel.journal.check.inspect`` (docs/journal.md, "The
chain"): a missing first, middle or last segment, a missing writer's chain, a segment cut
short, a fork. Damage of that kind is a reject of the audit (``Gap``); the decoder's own
rejects (a bad CRC, a torn tail) are counted by the Spark tasks, not again here.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..journal import check
from ..journal import format as F
from ..journal.reader import read_header

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
        files = F.segment_files(d)
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


def services(dirs: Sequence[str]) -> dict[str, Service]:
    """The local directories' segments grouped by the service their headers name. A
    segment without a readable header goes with the segment of the same epoch and
    process that has one (in its directory), else with the directory's only service,
    else under ``UNKNOWN``."""
    by_name: dict[str, Service] = {}
    for d in dirs:
        if is_uri(d):
            continue
        headers = {p: read_header(p) for p in F.segment_files(d)}
        named: dict[tuple[int, int], str] = {}
        for p, h in headers.items():
            if h is not None:
                n = F.SegmentName.parse(os.path.basename(p))
                assert n is not None
                named[(n.epoch, n.pid)] = h["service"]
        here = set(named.values())
        for p, h in headers.items():
            if h is not None:
                name = str(h["service"])
            else:
                n = F.SegmentName.parse(os.path.basename(p))
                assert n is not None
                name = named.get((n.epoch, n.pid), next(iter(here)) if len(here) == 1 else UNKNOWN)
            s = by_name.setdefault(name, Service(name))
            s.segments.append(p)
            if d not in s.directories:
                s.directories.append(d)
            if h is not None:
                if h.get("boot_id") and h["boot_id"] not in s.boot_ids:
                    s.boot_ids.append(h["boot_id"])
                if h["epoch"] not in s.epochs:
                    s.epochs.append(int(h["epoch"]))
    for s in by_name.values():
        s.epochs.sort()
    return by_name


def completeness(groups: dict[str, Service]) -> tuple[list[Gap], list[Gap]]:
    """Each service's segments judged by ``check.inspect``: (rejects, warnings).
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
        insp = check.inspect(s.directories[0], s.segments)
        decoded = {
            id(p) for r in insp.reports for p in r.frame if "does not match its name" not in p.what
        }
        for p in insp.problems:
            if id(p) in decoded or p.severity == check.TORN:
                continue
            gap = Gap(name, os.path.basename(p.file), str(p))
            (rejects if p.severity == check.DAMAGE else warnings).append(gap)
    return rejects, warnings
