"""The slot state machine, as Python sees it: contract.h's two tables (``SLOT_STATES``,
``SLOT_TRANSITIONS``), read from the native extension, never written again here.

From them come the state names (``contract.STATE_NAMES``), the check of an observed move
(``allows``), and the state diagram of docs/concepts.md (``markdown``): run
``python -m shmwheel.segment.states`` to print it; tests/test_states.py fails when the
docs drift from the table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .. import _native as native
from ..wheel import constants

#: state value -> name, and name -> value
NAMES: dict[int, str] = {value: name for name, value, _ in native.SLOT_STATES}
VALUES: dict[str, int] = {name: value for value, name in NAMES.items()}
MEANINGS: dict[str, str] = {name: doc for name, _, doc in native.SLOT_STATES}
BAD = "(torn)"  # a word whose state is no state (SM_BAD)

_GEN = {constants.TR_GEN_KEEP: "kept", constants.TR_GEN_BUMP: "+1", constants.TR_GEN_SET: "set"}


def _states(mask: int) -> tuple[str, ...]:
    names = tuple(NAMES[v] for v in sorted(NAMES) if mask & (1 << v))
    return names + ((BAD,) if mask & constants.SM_BAD else ())


@dataclass(frozen=True)
class Transition:
    """One row of contract.h's SLOT_TRANSITIONS."""

    index: int  # TR_<name>: what slot_move and the trace name it by
    name: str
    sources: tuple[str, ...]  # the states it leaves
    targets: tuple[str, ...]  # the states it may enter
    generation: str  # "kept", "+1" or "set"
    actor: str
    locked: bool  # under the segment lock (else lock-free)
    cas: bool  # a compare-and-swap (else a release store)
    meaning: str


TRANSITIONS: tuple[Transition, ...] = tuple(
    Transition(
        i,
        name,
        _states(frm),
        _states(to),
        _GEN[gen],
        actor,
        lock == constants.TR_LOCKED,
        atomic == constants.TR_CAS,
        doc,
    )
    for i, (name, frm, to, gen, actor, lock, atomic, doc) in enumerate(native.SLOT_TRANSITIONS)
)
BY_NAME: dict[str, Transition] = {t.name: t for t in TRANSITIONS}


def allows(tr: int, seen: int, want: int) -> bool:
    """Whether transition `tr` may move a state word from `seen` to `want` (states and
    generation): the native core's own check, on the same table."""
    return bool(native.rule_allows(tr, seen, want))


def markdown() -> str:
    """The state machine for docs/concepts.md: a table of the states, a Mermaid diagram and
    a table of the transitions, all generated from contract.h's tables."""
    out = ["| state | meaning |", "|---|---|"]
    out += [f"| `{name}` | {MEANINGS[name]} |" for name in NAMES.values()]
    out += ["", "```mermaid", "stateDiagram-v2"]
    for t in TRANSITIONS:
        if len(t.sources) > len(NAMES):  # FORMAT: any word, before any process attaches
            continue
        for a in t.sources:
            for b in t.targets:
                if a != BAD:
                    out.append(f"    {a} --> {b}: {t.name}")
    out += ["```", ""]
    out += [
        "| transition | from | to | generation | by | lock | written with | meaning |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in TRANSITIONS:
        src = "any" if len(t.sources) > len(NAMES) else ", ".join(t.sources)
        out.append(
            f"| `{t.name}` | {src} | {', '.join(t.targets)} | {t.generation} | {t.actor} | "
            f"{'held' if t.locked else 'none'} | {'CAS' if t.cas else 'release store'} | "
            f"{t.meaning} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
