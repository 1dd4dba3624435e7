"""The journal-wide rules of ``check`` (docs/journal.md, "The chain" and "Damage"): torn
tails, foreign segments, each writer's chain of segments, the epochs, and the pending set
from the records that count. ``check.inspect`` reads the files and calls ``analyse``.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ..segment import contract as C
from . import format as F
from .scan import SCHED_ID, JournalState, combine
from .verdict import (
    CHAIN,
    DAMAGE,
    START_GRACE_S,
    TORN,
    WARNING,
    WRITERS,
    Inspection,
    Problem,
    SegmentReport,
)


def analyse(insp: Inspection) -> None:
    """Judge the segments together: torn tails, foreign files, the chains, the epochs;
    then work out the pending set from the records that count."""
    reports = insp.reports
    for r in reports:
        r.problems, r.foreign = list(r.frame), False
    extra: list[Problem] = []
    _foreign(reports)
    own = [r for r in reports if not r.foreign]
    started = [
        r.name.epoch
        for r in own
        if r.name.role in WRITERS
        or (  # the last segment of a recovery's compaction, ended (all of it written)
            r.header is not None
            and r.header["seq"] == 0
            and r.end is not None
            and r.end["next"] == ""
            and not r.frame
        )
    ]
    insp.base = base = max(started, default=0)
    _tails(own)
    present = {r.basename for r in reports}
    known = present | {n for r in own for n in r.retired}
    named_prev: dict[str, list[SegmentReport]] = defaultdict(list)
    for r in own:
        sev = DAMAGE if r.name.epoch >= base else WARNING
        prev = r.prev
        if prev:
            named_prev[prev].append(r)
            if prev not in known:
                r.problems.append(
                    Problem(
                        r.path,
                        len(F.MAGIC),
                        f"segment {prev} is missing (named as the one before it)",
                        "the records it held are lost",
                        sev,
                        CHAIN,
                    )
                )
        nxt = None if r.end is None else r.end["next"]
        if nxt and nxt not in known:
            r.problems.append(
                Problem(
                    r.path,
                    r.size,
                    f"segment {nxt} is missing (named by its END as the one after it)",
                    "the records it held are lost",
                    sev,
                    CHAIN,
                )
            )
    for prev, after in named_prev.items():
        if len(after) > 1:
            for r in after:
                r.problems.append(
                    Problem(
                        r.path,
                        len(F.MAGIC),
                        f"{len(after)} segments name {prev} as the one before them",
                        "a chain that forks: a copied or replaced file",
                        DAMAGE if r.name.epoch >= base else WARNING,
                        CHAIN,
                    )
                )
    extra += _epochs(own, base, known)
    insp.problems = [p for r in reports for p in r.problems] + extra
    _state(insp, own)


def _foreign(reports: list[SegmentReport]) -> None:
    """Mark the segments of another service: within an epoch every segment is one
    service's (the recovery of a dead service's memory writes under that service's name
    and epoch); the one most of the epoch's segments name is the journal's."""
    by_epoch: dict[int, list[SegmentReport]] = defaultdict(list)
    for r in reports:
        if r.header is not None:
            by_epoch[r.name.epoch].append(r)
    for epoch, rs in by_epoch.items():
        count = Counter(r.header["service"] for r in rs if r.header is not None)
        if len(count) < 2:
            continue
        (top, n), (_, n2) = count.most_common(2)
        for r in rs:
            assert r.header is not None
            service = r.header["service"]
            if service != top or n == n2:
                r.foreign = True
                r.problems.append(
                    Problem(
                        r.path,
                        len(F.MAGIC),
                        f"a segment of another service ({service!r}; epoch {epoch} of this "
                        f"journal is {top!r}'s)"
                        if n != n2
                        else f"epoch {epoch} mixes services ({', '.join(map(repr, count))})",
                        f"its {r.records} records are not read",
                        DAMAGE,
                    )
                )


def _tails(own: list[SegmentReport]) -> None:
    """A segment without END is the newest of a writer that died (allowed, and so is its
    torn tail), unless its writer went on after it: a newer segment of the same process
    (but for an empty one the process died creating), or, for a recovery's segment, a
    coordinator or reaper segment of its epoch (they start once recovery has ended)."""
    named = {n for r in own for n in (r.prev, r.end and r.end["next"]) if n}
    for r in own:
        if r.end is not None or r.frame or (r.version < 2 and r.torn_at < 0):
            continue
        if r.header is None and r.basename not in named:  # created, never written
            r.problems.append(
                Problem(r.path, 0, "a segment its writer created and died before writing", "", TORN)
            )
            continue
        after = [o for o in own if o.basename > r.basename and _went_on(r, o)]
        if after:
            cut = r.torn_at if r.torn_at >= 0 else r.size
            r.problems.append(
                Problem(
                    r.path,
                    cut,
                    f"cut short at byte {cut} of {r.size} (no END record, yet "
                    f"{after[0].basename} was begun after it)",
                    "the records after it are lost",
                    DAMAGE,
                )
            )
        elif r.torn_at >= 0:
            r.problems.append(
                Problem(
                    r.path,
                    r.torn_at,
                    f"torn tail at byte {r.torn_at} of {r.size}: the newest segment of a "
                    f"writer that died mid-write",
                    f"the {r.size - r.torn_at} bytes after it are not a whole record",
                    TORN,
                )
            )


def _went_on(r: SegmentReport, o: SegmentReport) -> bool:
    """Whether `o`, begun after `r`, shows that the writer of `r` was done with it."""
    if o.name.epoch != r.name.epoch:
        return False
    if (o.name.role, o.name.pid) == (r.name.role, r.name.pid):
        return not (o.header is None and o.torn_at >= 0)  # not one it died creating
    return r.name.role == "recovery" and o.name.role in WRITERS


def _epochs(own: list[SegmentReport], base: int, known: set[str]) -> list[Problem]:
    """Each epoch a start began and no later one superseded has a coordinator and a
    reaper chain, each with one first segment (unless that one was retired). An epoch
    with neither is a start that died before its writers began (or a repair's). A
    coordinator's first segment of an epoch after the first comes after that epoch's
    compaction (a recovery's segment): present, or retired."""
    out: list[Problem] = []
    epochs: dict[int, dict[str, list[SegmentReport]]] = defaultdict(lambda: defaultdict(list))
    for r in own:
        if r.name.epoch >= base and r.name.role in WRITERS:
            epochs[r.name.epoch][r.name.role].append(r)
    recoveries = [
        n for n in map(F.SegmentName.parse, known) if n is not None and n.role == "recovery"
    ]
    for epoch, roles in sorted(epochs.items()):
        if all(r.version == 1 for rs in roles.values() for r in rs):
            continue  # version 1 segments have no chain
        for role in WRITERS:
            rs = roles.get(role, [])
            if not rs:
                other = roles[WRITERS[1 - WRITERS.index(role)]]
                span = (max(r.last_us for r in other) - other[0].name.wall_us) / 1e6
                short = span < START_GRACE_S
                out.append(
                    Problem(
                        "",
                        -1,
                        f"epoch {epoch} has {other[0].name.role} segments but no {role} "
                        f"segment (its chain is missing"
                        + (
                            f"; they span {span:.1f} s: a service killed while starting?)"
                            if short
                            else ")"
                        ),
                        "the timers scheduled in it are lost"
                        if role == "coordinator"
                        else "the outcomes recorded in it are lost: ended timers run again",
                        WARNING if short else DAMAGE,
                        CHAIN,
                    )
                )
                continue
            roots = [r for r in rs if r.prev == ""]
            if len(roots) > 1:
                out.append(
                    Problem(
                        "",
                        -1,
                        f"epoch {epoch} has {len(roots)} first {role} segments "
                        f"({', '.join(r.basename for r in roots)}): one chain is expected",
                        "a segment copied in from elsewhere",
                        DAMAGE,
                        CHAIN,
                    )
                )
            elif roots and role == "coordinator" and epoch > 1:
                root = roots[0].name
                if not any(n.epoch == epoch and n.wall_us < root.wall_us for n in recoveries):
                    out.append(
                        Problem(
                            roots[0].path,
                            -1,
                            f"the compaction segment of epoch {epoch} (a recovery's, begun "
                            f"before this first coordinator segment) is missing",
                            "the timers that start re-armed are lost",
                            DAMAGE,
                            CHAIN,
                        )
                    )
    return out


def _state(insp: Inspection, own: list[SegmentReport]) -> None:
    """The pending set from the records that count: those of the journal's own segments
    of the epochs no later start superseded (the epoch `base` and newer). Every other
    segment still bounds the generations the next epoch starts at."""
    st = JournalState()
    st.segments = len(insp.reports)
    st.records = sum(r.records for r in insp.reports)
    st.rejects = [j for r in insp.reports for j in r.rejects]
    st.epoch = max((r.name.epoch for r in insp.reports), default=0)
    counted = [r.part for r in own if r.part is not None and r.name.epoch >= insp.base]
    max_gen = -1
    for r in insp.reports:
        p = r.part
        if p is None or (not r.foreign and r.name.epoch >= insp.base):
            continue
        max_gen = max(max_gen, p.max_gen, p.ops.max_gen())
        if len(p.sched):
            max_gen = max(max_gen, int(C.handle_gen(p.sched[:, SCHED_ID]).max()))
    combine(counted, st, insp.directory, max_gen)
    insp.state = st
