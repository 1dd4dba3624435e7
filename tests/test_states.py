"""The slot state machine as data (contract.h's SLOT_STATES and SLOT_TRANSITIONS, read
through shmwheel.segment.states), with no processes: the docs are generated from it, every
row is made somewhere in the core and nowhere bypassed, the machine has no dead ends, and
the native check of a move agrees with the table. The moves the core really makes are
checked against the table by the hypothesis machines (test_slot_machine.py)."""

from __future__ import annotations

import re
from pathlib import Path

from shmwheel.segment import contract as C
from shmwheel.segment import states as S

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "shmwheel" / "native"


def test_the_docs_diagram_is_the_table() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text()
    block = re.search(r"<!-- states:begin -->\n(.*?)<!-- states:end -->", text, re.S)
    assert block, "docs/concepts.md lost its generated state-machine block"
    assert block.group(1) == S.markdown(), (
        "docs/concepts.md's state machine is not the table's: regenerate it with "
        "`python -m shmwheel.segment.states`"
    )


def _c_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(NATIVE.glob("*.c"))}


def test_every_row_is_made_and_every_write_names_a_row() -> None:
    sources = _c_sources()
    code = "\n".join(sources.values())
    unused = [t.name for t in S.TRANSITIONS if not re.search(rf"\bTR_{t.name}\b", code)]
    assert not unused, f"rows no C code makes: {unused}"
    # the one way to change a state word: no other atomic write builds a state word (its
    # value made by GS_MAKE*, or a raw ST_ state) or writes into gs_word()/gs_of()
    raw = re.compile(r"__atomic_(store_n|compare_exchange_n|exchange_n)\(([^;]*)\)")
    for name, text in sources.items():
        for m in raw.finditer(text):
            call = m.group(2)
            assert not re.search(r"\bGS_MAKE|\bST_[A-Z]|\bgs_word\(|\bgs_of\(", call), (
                f"{name}: {m.group(0)} writes a state word outside slot_move (atomics.h)"
            )
    # and nothing outside atomics.h defines another writer of one
    for name, text in sources.items():
        assert "gs_store" not in text and "gs_cas" not in text, name


def test_every_state_is_reachable_and_can_end() -> None:
    # the life of a slot: every row but FORMAT (a segment's formatting, before any process)
    edges = {
        (a, b)
        for t in S.TRANSITIONS
        if t.name != "FORMAT"
        for a in t.sources
        for b in t.targets
        if a != S.BAD
    }

    def closure(start: str, forward: bool) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            x = todo.pop()
            for a, b in edges:
                nxt = b if forward and a == x else a if not forward and b == x else None
                if nxt and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    states = set(S.NAMES.values())
    assert closure("FREE", forward=True) == states, "a state no slot can reach from FREE"
    assert closure("FREE", forward=False) == states, "a state from which a slot never ends"


def test_the_native_check_follows_the_rows() -> None:
    gen = 7
    for t in S.TRANSITIONS:
        after = {"kept": gen, "+1": gen + 1, "set": 3}[t.generation]
        for a in t.sources:
            if a == S.BAD:
                continue
            for b in t.targets:
                seen, want = C.gs_make(gen, S.VALUES[a]), C.gs_make(after, S.VALUES[b])
                assert S.allows(t.index, seen, want), (t.name, a, b)
                if t.generation != "set":  # the wrong generation is refused
                    assert not S.allows(t.index, seen, C.gs_make(after + 5, S.VALUES[b]))
        for a in set(S.NAMES.values()) - set(t.sources):  # a state it does not leave
            seen = C.gs_make(gen, S.VALUES[a])
            assert not S.allows(t.index, seen, C.gs_make(after, S.VALUES[t.targets[0]])), (
                f"{t.name} allowed from {a}"
            )
    assert S.allows(S.BY_NAME["REPAIR"].index, C.gs_make(2, 77), C.gs_make(2, C.ST_FREE))
