"""``shmwheel journal check DIR`` and ``shmwheel journal repair DIR``: judge a journal
directory offline (shmwheel/journal/check.py: per file what is wrong, whether every
writer's chain is complete, what a start would re-arm), and do what a start with
``journal_on_damage="salvage"`` does without starting a service
(shmwheel/journal/recover/repair.py).
Neither needs the audit pipeline (Spark); check writes nothing."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import time
from typing import Any

from .command import add_command
from .observe import CommandError, Refused

log = logging.getLogger("shmwheel.cli")

OK, DAMAGED, NOT_A_JOURNAL = 0, 1, 2

CHECK_EPILOG = """\
examples:
  shmwheel journal check /var/lib/shmwheel/orders
  shmwheel journal check /var/lib/shmwheel/orders --verbose    and every pending timer
  shmwheel journal check /var/lib/shmwheel/orders --json

Exit status: 0 intact (a dead writer's torn tail is the normal crash case, not damage),
1 damaged or incomplete (a start refuses it: `shmwheel journal repair`), 2 not a journal
(no such directory, no segments in it, or not readable) or not safe to read (the
directory or a segment is another user's or writable by others: docs/operating.md, "Trust").
"""

REPAIR_EPILOG = """\
examples:
  shmwheel journal repair /var/lib/shmwheel/orders --dry-run   what it would do
  shmwheel journal repair /var/lib/shmwheel/orders

takes the journal's lock (no service may be running on it), writes every timer and
operation the intact records prove pending into a new segment, synced, then moves each
damaged segment, untouched, to DIR/damaged/. Nothing is deleted. Afterwards the journal
checks clean and a service starts on it. Exit status: 0 repaired (or nothing to repair),
1 it could not be repaired, 2 not a journal, not safe to use (another user's, or
writable by others), held by a running service, or not writable by this user (one line
on stderr).
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``journal`` command (``check`` and ``repair``) to `sub`."""
    p = add_command(
        sub,
        "journal",
        common,
        help="check or repair a journal directory",
        description=(
            "Check a journal directory for damage and missing segments, or repair it "
            "(docs/journal.md, 'Damage')."
        ),
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = add_command(
        actions,
        "check",
        common,
        help="judge a journal: damage, missing segments, what a start would re-arm",
        description=(
            "Read every segment of a journal and say, per file, what is wrong with it, "
            "whether each writer's chain of segments is complete, and how many timers a "
            "start would re-arm. Writes nothing."
        ),
        epilog=CHECK_EPILOG,
    )
    c.add_argument("directory", metavar="DIR", help="the journal directory")
    c.add_argument("--json", action="store_true", help="print a JSON object")
    c.add_argument(
        "--verbose", "-v", action="store_true", help="also list each pending timer and operation"
    )
    c.set_defaults(execute=execute_check, default_log_level="WARNING", usage=c.format_usage)
    r = add_command(
        actions,
        "repair",
        common,
        help="move damaged segments aside, keeping every timer the intact records prove",
        description=(
            "Do what a start with journal_on_damage='salvage' does, without starting a "
            "service: record what the intact records prove pending in a new segment and "
            "move each damaged segment, untouched, to DIR/damaged/."
        ),
        epilog=REPAIR_EPILOG,
    )
    r.add_argument("directory", metavar="DIR", help="the journal directory")
    r.add_argument("--dry-run", "-n", action="store_true", help="only say what it would do")
    r.set_defaults(execute=execute_repair, default_log_level="INFO", usage=r.format_usage)


def _journal(directory: str) -> str | None:
    """Why `directory` is not a journal to read (None: it is one)."""
    if not os.path.isdir(directory):
        return (
            f"{directory} is not a directory"
            if os.path.exists(directory)
            else (f"no such journal directory: {directory}")
        )
    from ..journal import format as F

    try:
        files = F.segment_files(directory)
    except OSError as e:
        return f"cannot read the journal directory {directory}: {e.strerror or e}"
    if not files:
        return f"{directory} holds no journal segments (*.shwj)"
    if not any(os.access(f, os.R_OK) for f in files):
        return f"cannot read the journal segments in {directory} (permission denied)"
    return None


def _refused(directory: str, e: Exception) -> CommandError:
    """The one-line refusal (exit 2, no usage) of a journal command: a directory that is
    not safe to use (UntrustedPath), in use (JournalInUse), or one this user may not
    write (PermissionError)."""
    if isinstance(e, PermissionError):
        where = f": {e.filename}" if e.filename else ""
        return Refused(f"cannot use the journal {directory}: {e.strerror or e}{where}")
    return Refused(str(e))


def execute_check(args: argparse.Namespace) -> int:
    """Print the judgement of a journal; 0 intact, 1 damaged, 2 not a journal (or one
    that is not safe to read: segment/trust.py)."""
    from ..errors import UntrustedPath
    from ..journal.check import inspect
    from ..journal.directory import trusted

    why = _journal(args.directory)
    if why is not None:
        log.error("%s", why)
        return NOT_A_JOURNAL
    try:
        trusted(args.directory)
        insp = inspect(args.directory)
        jobs = _jobs(args.directory)
    except (UntrustedPath, PermissionError) as e:
        raise _refused(args.directory, e) from None
    if args.json:
        json.dump({**report(insp, args.verbose), "jobs": jobs}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(insp, args.verbose)
        bad = jobs["violations"]
        print(f"jobs: {jobs['pending']} a start would re-arm; the ledger's audit: "
              + (f"{len(bad)} violations" if bad else "clean"))  # fmt: skip
        for v in bad:
            print(f"  {v}")
    return DAMAGED if insp.damage else OK


def report(insp: Any, verbose: bool = False) -> dict[str, Any]:
    """A check as a JSON-able object (``shmwheel journal check --json``)."""
    st = insp.state
    out: dict[str, Any] = {
        "directory": insp.directory,
        "status": "damaged" if insp.damage else "intact",
        "epoch": st.epoch,
        "base_epoch": insp.base,
        "segments": [_segment(r) for r in insp.reports],
        "problems": [p.as_dict() for p in insp.problems],
        "pending": {"timers": len(st.pending.ids), "operations": len(st.ops.pending())},
    }
    if verbose:
        out["pending"]["timer_list"] = _timers(st)
        out["pending"]["operation_list"] = _operations(st)
    return out


def _jobs(directory: str) -> dict[str, Any]:
    """The jobs' ledger (service/jobs/ledger/): jobs a start would re-arm, and the
    violations of its rules."""
    from ..service.jobs import ledger
    from ..service.jobs.ledger import audit

    pending, _ = ledger.pending(directory)
    return {"pending": len(pending), "violations": audit.audit(directory)}


def _segment(r: Any) -> dict[str, Any]:
    """One segment of a check (check.SegmentReport) as JSON."""
    h = r.header or {}
    return {
        "file": r.basename,
        "epoch": r.name.epoch,
        "role": r.name.role,
        "pid": r.name.pid,
        "seq": h.get("seq"),
        "version": r.version,
        "service": h.get("service"),
        "prev": r.prev,
        "next": None if r.end is None else r.end["next"],
        "retired": r.retired,
        "bytes": r.size,
        "records": r.records,
        "problems": [p.as_dict() for p in r.problems],
    }


def _timers(st: Any) -> list[dict[str, Any]]:
    p = st.pending
    return [
        {"id": i, "task": p.names[t], "deadline_ms": d, "run": r}
        for i, t, d, r in zip(
            p.ids.tolist(), p.tasks.tolist(), p.deadlines.tolist(), p.runs.tolist(), strict=True
        )
    ]


def _operations(st: Any) -> list[dict[str, Any]]:
    return [
        {"id": h, "deadline_ms": d, "required": req, "on_complete": c, "on_expire": e}
        for h, (d, req, c, e, _) in sorted(st.ops.pending().items())
    ]


def _label(p: Any) -> str:
    """A problem's kind as a segment's line shows it."""
    if p.severity == "damage":
        return "DAMAGED" if p.scope == "file" else "CHAIN BROKEN"
    return "torn tail" if p.severity == "torn" else "warning"


def print_report(insp: Any, verbose: bool) -> None:
    """The check as text: a line per segment (what is wrong with it), the journal's own
    problems, the pending count (and with `verbose` every pending timer)."""
    st, dmg = insp.state, insp.damage
    status = f"DAMAGED ({len(dmg)} problems)" if dmg else "intact"
    print(f"journal {insp.directory}: {status}; {len(insp.reports)} segments, epoch {st.epoch}")
    width = max(len(r.basename) for r in insp.reports)
    for r in insp.reports:
        mine = r.problems
        state = "ok" if not mine else ", ".join(sorted({_label(p) for p in mine}))
        print(f"  {r.basename:<{width}}  {r.records:>8} records {r.size:>11} bytes  {state}")
        for p in mine:
            at = f"at byte {p.offset}: " if p.offset >= 0 else ""
            print(f"      {p.severity}: {at}{p.what}" + (f" ({p.affected})" if p.affected else ""))
    for p in insp.problems:
        if not p.file:
            print(f"  {p.severity}: {p.what} ({p.affected})")
    n_ops = len(st.ops.pending())
    print(
        f"pending: {len(st.pending.ids)} timers and {n_ops} operations "
        f"{'the intact records prove' if dmg else 'a start would re-arm'}"
    )

    if verbose:
        now = time.monotonic() * 1000
        for t in _timers(st):
            print(
                f"  timer {t['id']:#x} {t['task']} run {t['run']} deadline_ms "
                f"{t['deadline_ms']} (in {(t['deadline_ms'] - now) / 1000:.1f} s)"
            )
        for o in _operations(st):
            print(
                f"  operation {o['id']:#x} on_complete {o['on_complete']} on_expire "
                f"{o['on_expire']} deadline_ms {o['deadline_ms']}"
            )
    if dmg:
        print(
            f"a start refuses it: `shmwheel journal repair {insp.directory}` (or start with "
            f"journal_on_damage='salvage') re-arms those and moves the damaged segments to "
            f"{os.path.join(insp.directory, 'damaged')}/"
        )


def _writable(directory: str) -> None:
    """A repair writes a segment in `directory` and moves others within it: a user who may
    not write it is refused (PermissionError) before anything is read, as one that is not
    safe to use is (UntrustedPath: judged first, it says more)."""
    from ..journal.directory import trusted

    trusted(directory)
    if not os.access(
        directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids
    ):
        raise PermissionError(errno.EACCES, "Permission denied (this user may not write it)")


def execute_repair(args: argparse.Namespace) -> int:
    """Repair a journal (or with --dry-run say how); 0 done or nothing to do."""
    from ..errors import UntrustedPath
    from ..journal.directory import JournalInUse
    from ..journal.recover.repair import repair

    why = _journal(args.directory)
    if why is not None:
        log.error("%s", why)
        return NOT_A_JOURNAL
    try:
        if not args.dry_run:
            _writable(args.directory)
        done = repair(args.directory, dry_run=args.dry_run)
    except (JournalInUse, UntrustedPath, PermissionError) as e:
        raise _refused(args.directory, e) from None
    before, st = done.before, done.before.state
    if not before.damage:
        print(f"journal {args.directory}: intact, nothing to repair")
        return OK
    for p in before.damage:
        print(f"damaged: {p}")
    carried = f"{len(st.pending.ids)} timers and {len(st.ops.pending())} operations"
    if args.dry_run:
        for path in before.damaged:
            print(f"would move {os.path.basename(path)} to {args.directory}/damaged/")
        print(f"would record {carried} pending in a new segment of epoch {st.epoch + 1}")
        return OK
    for path in done.moved:
        print(f"moved {os.path.basename(path)} to {os.path.dirname(path)}/")
    print(f"wrote {os.path.basename(done.written)}: {carried} pending")
    after = done.after
    if after is not None and after.damage:
        log.error("journal %s is still damaged after the repair:", args.directory)
        for p in after.damage:
            log.error("  %s", p)
        return DAMAGED
    print(f"journal {args.directory} now checks clean")
    return OK
