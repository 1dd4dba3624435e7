"""The audit of the whole-service crash harness (bench/journal_crash_harness.py): read the
drivers' logs (their format: bench/journal_crash_driver.py) and the journal
(``shmwheel.journal.read``), and check the invariants against them (``analyse``):

1. nothing lost: every accepted one-shot not cancelled runs;
2. a one-shot whose cancel() returned True never runs;
3. never early: no task starts before its deadline;
4. ids preserved: each timer runs under the id (and deadline, or period grid) schedule()
   returned, and ids stay unique across epochs;
5. duplicates only inside the crash window: a run repeats only after its cycle was killed
   with no outcome recorded for it in that cycle's epoch;
6. repeating timers resume across restarts and stop once cancelled;
7. nothing left behind (processes, /dev/shm files);
J. the journal is complete: a scheduled record per accepted timer, a cancelled record per
   True cancel, a fired record per execution, and no reject but a torn tail.

A tag scheduled but not known to be accepted, or a cancel whose result is unknown, is "in
doubt" at the kill: the checks allow either outcome for it (and count them).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from journal_crash_driver import ACCEPTED, EXECUTIONS

if TYPE_CHECKING:
    from journal_crash_harness import Result


# -- reading the logs ----------------------------------------------------------------------
@dataclass
class Logs:
    starts: dict[int, str] = field(default_factory=dict)  # cycle -> service name
    # cycle -> whether the previous cycle's service segment was in /dev/shm as it started
    prev_present: dict[int, int] = field(default_factory=dict)
    intents: dict[str, tuple[int, str]] = field(default_factory=dict)  # tag -> (cycle, kind)
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)  # tag -> record
    by_id: dict[int, str] = field(default_factory=dict)  # id -> tag
    dup_accepted_ids: list[int] = field(default_factory=list)
    # id -> [(cycle, t)]
    cancel_calls: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    # id -> [(res, t, cycle)]
    cancel_results: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    executions: list[dict[str, Any]] = field(default_factory=list)
    torn_lines: int = 0


def read_logs(work: str) -> Logs:
    lg = Logs()
    path = os.path.join(work, ACCEPTED)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                p = line.split()
                try:
                    if not line.endswith("\n"):
                        raise ValueError("torn")
                    if p[0] == "S":
                        lg.starts[int(p[1])] = p[2]
                        lg.prev_present[int(p[1])] = int(p[4])
                    elif p[0] == "I":
                        lg.intents[p[1]] = (int(p[2]), p[3])
                    elif p[0] == "A":
                        tag, hid = p[1], int(p[2])
                        lg.accepted[tag] = {
                            "tag": tag,
                            "id": hid,
                            "deadline_ms": int(p[3]),
                            "kind": p[4],
                            "every": int(p[5]),
                            "cycle": int(p[6]),
                            "t_ns": int(p[7]),
                        }
                        if hid in lg.by_id:
                            lg.dup_accepted_ids.append(hid)
                        lg.by_id[hid] = tag
                    elif p[0] == "C":
                        lg.cancel_calls.setdefault(int(p[1]), []).append((int(p[2]), int(p[3])))
                    elif p[0] == "R":
                        lg.cancel_results.setdefault(int(p[1]), []).append(
                            (int(p[2]), int(p[3]), int(p[4]))
                        )
                    else:
                        raise ValueError(p[0])
                except (ValueError, IndexError):
                    lg.torn_lines += 1
    path = os.path.join(work, EXECUTIONS)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) != 9 or p[0] != "E" or not line.endswith("\n"):
                    lg.torn_lines += 1
                    continue
                lg.executions.append(
                    {
                        "id": int(p[1]),
                        "attempt": int(p[2]),
                        "start_ns": int(p[3]),
                        "deadline_ms": int(p[4]),
                        "fired_ms": int(p[5]),
                        "cycle": int(p[6]),
                        "pid": int(p[7]),
                        "tag": p[8],
                    }
                )
    return lg


# -- the analysis ------------------------------------------------------------------------------
def read_journal(journal: str) -> dict[str, Any]:
    """The journal, read whole through shmwheel.journal: each segment's epoch and service,
    the records per timer id (with the epoch of their segment), and every reject."""
    from shmwheel import journal as J

    by_id: dict[int, list[dict[str, Any]]] = defaultdict(list)
    epochs_of: dict[str, set[int]] = defaultdict(set)
    rejects: list[str] = []
    recovery_segments: list[tuple[str, int, int]] = []  # (service, writer pid, records)
    segments = 0
    records = 0
    for seg in J.read(journal):
        segments += 1
        rejects += [str(r) for r in seg.rejects]
        if seg.header is None:
            continue
        epoch, service = seg.header["epoch"], seg.header["service"]
        epochs_of[service].add(epoch)
        if seg.header["role"] == 3:  # format.ROLES: a recovery (compaction or salvage)
            recovery_segments.append((service, seg.header["pid"], len(seg.records)))
        seg_name = os.path.basename(seg.path)
        for rec in seg.records:
            d = J.as_dict(rec)
            d["epoch"], d["segment"] = epoch, seg_name
            by_id[d["id"]].append(d)
            records += 1
    return {
        "by_id": by_id,
        "epochs_of": epochs_of,
        "rejects": rejects,
        "segments": segments,
        "records": records,
        "recovery_segments": recovery_segments,
    }


def _reject_kind(r: str) -> str:
    reason = r.split(": ", 1)[-1]
    if reason.startswith("torn"):
        return "torn tail"
    return reason.split(";")[0]


def analyse(res: Result, work: str, journal: str, prefix: str) -> None:
    lg = read_logs(work)
    jr = read_journal(journal)
    final_cycle = res.config.cycles + 1
    V: dict[str, list[str]] = defaultdict(list)
    c: dict[str, Any] = {}
    killed_cycles = {ci.cycle for ci in res.cycles}

    # cycle -> epochs of its service (through the segment headers)
    names = dict(lg.starts)
    for ci in res.cycles:
        names.setdefault(ci.cycle, ci.name)
    epochs_of_cycle = {cy: jr["epochs_of"].get(n, set()) for cy, n in names.items()}
    # what became of each killed service's segment: salvaged into the journal (a segment
    # of role "recovery" under its name, written by another process than its own driver,
    # whose recovery segment it would be) by the next start or by another service's start
    # sweeping it, or gone without a salvage
    driver_cycle = {ci.pgid: ci.cycle for ci in res.cycles}
    if res.final_pid:
        driver_cycle[res.final_pid] = final_cycle
    fate: dict[int, str] = {}
    tally: Counter[str] = Counter()
    salvaged_records = 0
    for ci in res.cycles:
        salv = [
            (pid, n) for svc, pid, n in jr["recovery_segments"] if svc == ci.name and pid != ci.pgid
        ]
        at_next = lg.prev_present.get(ci.cycle + 1, -1)
        if salv:
            pid, n = salv[0]
            salvaged_records += n
            if pid in driver_cycle:
                tally["salvaged by a later start of ours"] += 1
                ci.salvage_log = f"salvaged by cycle {driver_cycle[pid]}'s start: {n} records"
            else:
                tally["salvaged by another process's start sweeping it"] += 1
                ci.salvage_log = f"salvaged by another process (pid {pid}) sweeping it: {n} records"
        elif ci.shm_after_kill and at_next == 0:
            tally["gone without a salvage"] += 1
            ci.salvage_log = (
                "NOT salvaged: in /dev/shm after the kill, gone when the next "
                "driver started (another service's start swept it)"
            )
        else:
            tally["no segment to salvage" if not ci.shm_after_kill else "not salvaged"] += 1
            ci.salvage_log = "not salvaged"
        fate[ci.cycle] = (
            f"cycle {ci.cycle}'s segment after the kill: "
            f"{'present' if ci.shm_after_kill else 'absent'}, at the next "
            f"start: { {1: 'present', 0: 'absent'}.get(at_next, '?') }; "
            f"{ci.salvage_log}"
        )
    c["killed services' segments"] = dict(tally)
    c["records salvaged from killed services' memory"] = salvaged_records
    c["segment fate"] = fate

    def jdump(hid: int) -> str:
        recs = jr["by_id"].get(hid, [])
        return (
            "; ".join(
                f"{r['kind']}(epoch {r['epoch']}"
                + "".join(
                    f", {k}={r[k]}"
                    for k in ("run", "deadline_ms", "outcome", "next_deadline_ms", "flags")
                    if k in r
                )
                + ")"
                for r in recs
            )
            or "no journal records"
        )

    def edump(e: dict[str, Any]) -> str:
        return (
            f"cycle {e['cycle']} attempt {e['attempt']} start {e['start_ns'] / 1e6:.3f} ms "
            f"deadline {e['deadline_ms']} fired {e['fired_ms']} pid {e['pid']}"
        )

    # cancels: the first returned result per id; calls with no result are in doubt
    cancel_true: dict[int, tuple[int, int]] = {}  # id -> (t_return, cycle)
    cancel_false: dict[int, tuple[int, int]] = {}
    first_call: dict[int, int] = {}
    for hid, calls in lg.cancel_calls.items():
        first_call[hid] = min(t for _, t in calls)
    for hid, results in lg.cancel_results.items():
        for r, t, cy in results:
            (cancel_true if r else cancel_false).setdefault(hid, (t, cy))
    in_doubt_cancel = {
        hid for hid in lg.cancel_calls if hid not in cancel_true and hid not in cancel_false
    }
    # a True after a False (final phase re-cancelling) is impossible: report if seen
    for hid in set(cancel_true) & set(cancel_false):
        if cancel_true[hid][0] > cancel_false[hid][0]:
            V["4. a cancel returned True after an earlier cancel returned False"].append(
                f"id {hid:#x}"
            )

    execs_by_id: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in lg.executions:
        execs_by_id[e["id"]].append(e)
    for v in execs_by_id.values():
        v.sort(key=lambda e: e["start_ns"])

    acc = lg.accepted
    one = {a["id"]: a for a in acc.values() if a["kind"] == "o"}
    rep = {a["id"]: a for a in acc.values() if a["kind"] == "r"}
    in_doubt_sched = {t for t in lg.intents if t not in acc}

    c["cycles"] = len(res.cycles)
    c["cycles killed while starting"] = sum(ci.startup_kill for ci in res.cycles)
    c["cycles whose service was up at the kill"] = sum(ci.ready for ci in res.cycles)
    c["timers accepted"] = len(acc)
    c["one-shot accepted"] = len(one)
    c["repeating accepted"] = len(rep)
    c["schedules in doubt at a kill (intent, no return logged)"] = len(in_doubt_sched)
    c["cancel True"] = len(cancel_true)
    c["cancel False"] = len(cancel_false)
    c["cancels in doubt at a kill"] = len(in_doubt_cancel)
    cross: Counter[bool] = Counter()
    for hid, results in lg.cancel_results.items():
        a = acc.get(lg.by_id.get(hid, ""))
        if a is not None and results[0][2] != a["cycle"] and results[0][2] != final_cycle:
            cross[bool(results[0][0])] += 1
    c["cancels by id of an earlier cycle's timer (True, False)"] = (cross[True], cross[False])
    c["executions"] = len(lg.executions)
    c["executions in the final phase"] = sum(e["cycle"] == final_cycle for e in lg.executions)
    c["torn log lines"] = lg.torn_lines
    if lg.dup_accepted_ids:
        V["4. an id accepted twice (ids must stay unique across epochs)"] += [
            f"id {h:#x}: tags {[t for t, a in acc.items() if a['id'] == h]}"
            for h in sorted(set(lg.dup_accepted_ids))
        ]

    # 1. nothing lost
    for hid, a in one.items():
        if hid in cancel_true or hid in in_doubt_cancel:
            continue
        if not execs_by_id.get(hid):
            V["1. lost: an accepted one-shot (not cancelled) never ran"].append(
                f"id {hid:#x} tag {a['tag']} cycle {a['cycle']} deadline {a['deadline_ms']} "
                f"cancel={cancel_false.get(hid)}; {fate.get(a['cycle'], '')}; "
                f"journal: {jdump(hid)}"
            )
    # 2. cancelled never runs
    for hid in cancel_true:
        if hid in one and execs_by_id.get(hid):
            V["2. a one-shot whose cancel() returned True ran"].append(
                f"id {hid:#x} tag {one[hid]['tag']} cancelled in cycle {cancel_true[hid][1]} "
                f"at {cancel_true[hid][0] / 1e6:.3f} ms; runs: "
                f"{[edump(e) for e in execs_by_id[hid]]}; journal: {jdump(hid)}"
            )
    # 3. never early
    early_sub_ms = 0
    for e in lg.executions:
        if e["start_ns"] < e["deadline_ms"] * 1_000_000:
            short = e["deadline_ms"] * 1_000_000 - e["start_ns"]
            early_sub_ms += short < 1_000_000
            V["3. a task started before its deadline"].append(
                f"id {e['id']:#x} tag {e['tag']} {short / 1e6:.3f} ms early: {edump(e)}"
            )
    c["early executions (of which < 1 ms early)"] = (
        len(V.get("3. a task started before its deadline", [])),
        early_sub_ms,
    )
    # 4. ids preserved (and deadlines)
    unknown_doubt = 0
    for e in lg.executions:
        a = acc.get(e["tag"])
        if a is None:
            if e["tag"] in in_doubt_sched:
                unknown_doubt += 1
                continue
            V["4. an execution with an id the accepted log does not have"].append(
                f"id {e['id']:#x} tag {e['tag']}: {edump(e)}; journal: {jdump(e['id'])}"
            )
        elif a["id"] != e["id"]:
            V["4. a timer ran under another id than schedule() returned"].append(
                f"tag {e['tag']}: accepted id {a['id']:#x}, ran as {e['id']:#x} ({edump(e)})"
            )
        elif a["kind"] == "o" and e["deadline_ms"] != a["deadline_ms"]:
            V["4. a one-shot ran with another deadline than schedule() returned"].append(
                f"id {e['id']:#x} tag {e['tag']}: accepted {a['deadline_ms']}, ran with "
                f"{e['deadline_ms']} ({edump(e)}); journal: {jdump(e['id'])}"
            )
        elif a["kind"] == "r" and (e["deadline_ms"] - a["deadline_ms"]) % a["every"]:
            V["4. a repeating timer ran off its period's grid"].append(
                f"id {e['id']:#x} tag {e['tag']}: first deadline {a['deadline_ms']} every "
                f"{a['every']}, ran with {e['deadline_ms']} ({edump(e)})"
            )
    c["executions of schedules in doubt (id learnt from the run)"] = unknown_doubt
    # 5. duplicates only in the documented window
    dup_oneshots = 0
    dup_runs: Counter[str] = Counter()
    window_cycles: Counter[int] = Counter()
    dup_list: list[str] = []
    for hid, runs in execs_by_id.items():
        by_attempt: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for e in runs:
            by_attempt[e["attempt"]].append(e)
        if hid in one and len(runs) > 1:
            dup_oneshots += 1
        for attempt, es in by_attempt.items():
            if len(es) < 2:
                continue
            dup_runs["one-shot" if hid in one else "repeating" if hid in rep else "in doubt"] += (
                len(es) - 1
            )
            for i, e in enumerate(es[:-1]):
                nxt = es[i + 1]
                why = []
                if e["cycle"] not in killed_cycles:
                    why.append(f"the earlier run was in cycle {e['cycle']}, not killed")
                if nxt["cycle"] == e["cycle"]:
                    why.append("both runs in one cycle (no restart between them)")
                outs = [
                    r
                    for r in jr["by_id"].get(hid, [])
                    if r["kind"] == "outcome"
                    and r["run"] == attempt
                    and r["epoch"] in epochs_of_cycle.get(e["cycle"], set())
                ]
                if outs:
                    why.append(
                        f"the journal has its outcome from cycle {e['cycle']}'s epoch "
                        f"{sorted(epochs_of_cycle.get(e['cycle'], set()))}"
                    )
                if why:
                    V["5. a timer ran twice outside the crash window"].append(
                        f"id {hid:#x} tag {e['tag']} attempt {attempt}: "
                        f"{'; '.join(why)}; runs: {[edump(x) for x in es]}; journal: "
                        f"{jdump(hid)}"
                    )
                else:
                    window_cycles[e["cycle"]] += 1
                    dup_list.append(
                        f"id {hid:#x} tag {e['tag']} attempt {attempt}: ran in cycle "
                        f"{e['cycle']} (killed; its epoch "
                        f"{sorted(epochs_of_cycle.get(e['cycle'], set()))} has no outcome for "
                        f"this run), again in cycle {nxt['cycle']}; journal: {jdump(hid)}"
                    )
    c["one-shot timers that ran more than once"] = dup_oneshots
    c["duplicate runs (extra executions of one run)"] = dict(dup_runs)
    c["cycles with duplicates inside the window"] = len(window_cycles)
    c["duplicate details"] = dup_list
    # 6. repeating timers resume; a cancelled one stops
    multi = 0
    for hid, a in rep.items():
        cycles_run = {e["cycle"] for e in execs_by_id.get(hid, [])}
        multi += len(cycles_run) > 1
        calls = lg.cancel_calls.get(hid, [])
        if not any(cy != final_cycle for cy, _ in calls) and final_cycle not in cycles_run:
            V["6. a repeating timer never cancelled did not resume in the final phase"].append(
                f"id {hid:#x} tag {a['tag']} cycle {a['cycle']} ran in cycles "
                f"{sorted(cycles_run)}; journal: {jdump(hid)}"
            )
        res_ = cancel_true.get(hid) or cancel_false.get(hid)
        if res_ is None:
            continue
        t_ret, cy = res_
        # a False cancel leaves the run in flight (fired by the reaper before the cancel
        # returned, maybe not yet started by an executor); a True one, none
        in_flight = [
            e["attempt"] for e in execs_by_id.get(hid, []) if e["fired_ms"] * 1_000_000 <= t_ret
        ]
        in_flight += [
            r["run"]
            for r in jr["by_id"].get(hid, [])
            if r["kind"] == "fired" and r["t_us"] * 1000 <= t_ret
        ]
        for e in execs_by_id.get(hid, []):
            if e["start_ns"] <= t_ret:
                continue
            if hid in cancel_true or e["attempt"] > max(in_flight, default=0):
                V["6. a repeating timer ran after its cancel() returned"].append(
                    f"id {hid:#x} tag {a['tag']} cancel={'True' if hid in cancel_true else 'False'}"
                    f" returned at {t_ret / 1e6:.3f} ms in cycle {cy}; later run: {edump(e)}; "
                    f"journal: {jdump(hid)}"
                )
    c["repeating timers that ran in more than one cycle"] = multi
    c["repeating timers' executions"] = sum(len(execs_by_id.get(h, [])) for h in rep)
    if multi == 0:
        V["6. no repeating timer ran in more than one cycle"].append(
            f"{len(rep)} repeating timers accepted"
        )
    # 7. nothing left behind
    if res.leaks.get("processes"):
        V["7. processes left behind"] += res.leaks["processes"]
    if res.leaks.get("shm"):
        V["7. /dev/shm files left behind"] += res.leaks["shm"]
    # the final phase itself
    fin = res.final
    if res.final_rc != 0 or not fin or fin.get("timed_out"):
        V["final phase did not finish cleanly"].append(
            f"rc {res.final_rc}, final.json {fin or 'missing'}"
        )
    elif fin["stats"]["pending"] != 0:
        V["final phase did not finish cleanly"].append(f"pending {fin['stats']['pending']}")

    # the journal's completeness (reported; a miss is also a violation: the journal is
    # write-ahead and salvage records what a dead service's memory knew)
    no_sched = [
        h for h in acc_ids(acc) if not any(r["kind"] == "scheduled" for r in jr["by_id"].get(h, []))
    ]
    no_cancel = [
        h for h in cancel_true if not any(r["kind"] == "cancelled" for r in jr["by_id"].get(h, []))
    ]
    fired = {
        (h, r["run"], r["deadline_ms"])
        for h, rs in jr["by_id"].items()
        for r in rs
        if r["kind"] == "fired"
    }
    no_fired = [e for e in lg.executions if (e["id"], e["attempt"], e["deadline_ms"]) not in fired]
    c["journal: segments, records"] = (jr["segments"], jr["records"])
    c["journal: accepted timers with no scheduled record"] = len(no_sched)
    c["journal: cancel True with no cancelled record"] = len(no_cancel)
    c["journal: executions with no fired record (id, run, deadline)"] = len(no_fired)
    if res.config.keep_hours < 1e5:  # retention deleted what no timer needed: the
        no_sched, no_cancel, no_fired = [], [], []  # journal is not whole by design
        c["journal: completeness"] = "not checked (retention on)"
    for h in no_sched[:20]:
        V["J. an accepted timer has no scheduled record in the journal"].append(
            f"id {h:#x} tag {lg.by_id[h]}; journal: {jdump(h)}"
        )
    for h in no_cancel[:20]:
        V["J. a cancel that returned True has no cancelled record in the journal"].append(
            f"id {h:#x} tag {lg.by_id.get(h)}; journal: {jdump(h)}"
        )
    for e in no_fired[:20]:
        V["J. an execution has no matching fired record in the journal"].append(
            f"id {e['id']:#x} tag {e['tag']}: {edump(e)}; journal: {jdump(e['id'])}"
        )
    kinds = Counter(_reject_kind(r) for r in jr["rejects"])
    c["journal rejects"] = dict(kinds)
    for r in jr["rejects"]:
        if _reject_kind(r) != "torn tail":
            V["J. a journal reject other than a torn tail"].append(r)
    c["journal reject details"] = jr["rejects"]
    res.counts = c
    res.violations = {k: v for k, v in V.items() if v}


def acc_ids(acc: dict[str, dict[str, Any]]) -> list[int]:
    return sorted(a["id"] for a in acc.values())
