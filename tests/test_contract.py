"""The shared-memory contract is written once: the rows of contract.h's and journal.h's
lists. These tests fail when a second definition creeps in or the generated stub drifts:

- ``wheel/constants.pyi`` is what ``tests/contract_stub.py`` writes from the rows the
  native core exports (a row added, renamed or moved in C without regenerating fails);
- every exported row is an attribute of ``wheel.constants`` and ``segment.contract``
  with the native value;
- no Python module of the package assigns a literal to a contract name (an alias of the
  one definition, ``FLAG_KEY = K.FLAG_KEY``, is allowed), and no C file ``#define``s one
  outside the lists;
- the Python accessors of the packed words agree with the constants' layout.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
from contract_stub import STUB, stub

from shmwheel import _native as N
from shmwheel.segment import contract as C
from shmwheel.wheel import constants as K

PACKAGE = Path(C.__file__).resolve().parent.parent


def test_stub_is_generated_from_the_lists() -> None:
    assert STUB.read_text() == stub(), "run: python tests/contract_stub.py"


def test_every_row_reaches_python_once() -> None:
    listed = [n for _, names in N.CONTRACT_LISTS for n in names]
    assert len(listed) == len(set(listed)) == len(N.CONTRACT)
    assert tuple(K.LISTS) == tuple(N.CONTRACT_LISTS)
    for name, value in N.CONTRACT.items():
        assert getattr(K, name) == value, name
        assert getattr(C, name) == value, name
    # a few rows whose value the rest of the code relies on by meaning
    assert K.NEVER == 2**63 - 1 and K.NO_TIME == -(2**63)
    assert len(C.STATE_NAMES) == K.ST_COUNT
    assert K.SCAN_FIELDS + K.SCAN_MAX_FIELDS == K.SCAN_BLOB_AT


def _literal(node: ast.expr) -> bool:
    """An expression made of literals only (1 << 15, -3, 0x7FFF, 2**63 - 1)."""
    return all(
        isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
        for n in ast.walk(node)
    )


def python_redefinitions(root: Path) -> list[str]:
    """`path:line name` for every assignment of a literal to a contract name (or to it with
    a leading underscore) in the Python files under `root`."""
    names = set(N.CONTRACT)
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for t in targets:
                elts = t.elts if isinstance(t, ast.Tuple) else [t]
                vals = value.elts if isinstance(value, ast.Tuple) else [value] * len(elts)
                for e, v in zip(elts, vals, strict=False):
                    if isinstance(e, ast.Name) and e.id.lstrip("_") in names and _literal(v):
                        found.append(f"{path.relative_to(root)}:{node.lineno} {e.id}")
    return found


def c_redefinitions(root: Path) -> list[str]:
    """`path:line name` for every ``#define`` or ``static const`` of a contract name in the
    C sources under `root` (the lists make them enum members or static consts in
    CONTRACT_INT / CONTRACT_I64, written nowhere by name)."""
    names = set(N.CONTRACT)
    pattern = re.compile(r"^\s*#\s*define\s+(\w+)\b|static\s+const\s+\w+\s+(\w+)\s*=")
    found = []
    for path in sorted(root.glob("*.[ch]")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            m = pattern.search(line)
            name = m and (m.group(1) or m.group(2))
            if name in names:
                found.append(f"{path.name}:{i} {name}")
    return found


def test_no_python_module_redefines_a_constant() -> None:
    assert python_redefinitions(PACKAGE) == []


def test_no_c_file_redefines_a_constant() -> None:
    assert c_redefinitions(PACKAGE / "native") == []


def test_the_scans_find_a_planted_twin(tmp_path: Path) -> None:
    (tmp_path / "twin.py").write_text("X = 1\n_NEVER = 2**63 - 1\nTASK_NONE, Y = 0xFFFF, 2\n")
    (tmp_path / "twin.h").write_text("#define CACHE_MAX 256\nstatic const i64 NEVER = 1;\n")
    (tmp_path / "alias.py").write_text(
        "from shmwheel.wheel import constants as K\nNEVER = K.NEVER\n"
    )
    assert python_redefinitions(tmp_path) == ["twin.py:2 _NEVER", "twin.py:3 TASK_NONE"]
    assert c_redefinitions(tmp_path) == ["twin.h:1 CACHE_MAX", "twin.h:2 NEVER"]


def test_accessors_pack_and_unpack() -> None:
    gen, slot = 0x1234567, 987654
    h = C.handle_make(gen, slot)
    assert (C.handle_gen(h), C.handle_slot(h)) == (gen, slot)
    gs = C.gs_make(gen, K.ST_PENDING, seq=77)
    assert (C.gs_gen(gs), C.gs_state(gs), C.gs_aux(gs)) == (gen, K.ST_PENDING, 77)
    assert C.gs_handle(gs, slot) == h
    held = C.gs_make_hold(gen, K.ST_SUBMITTED, 4095)
    assert (C.gs_state(held), C.gs_from(held), C.gs_aux(held)) == (
        K.ST_RESETTING,
        K.ST_SUBMITTED,
        4095,
    )
    m = C.meta_make(K.TASK_NONE - 1, K.FLAG_REPEAT, 3, 4000, K.RING_NONE)
    assert (C.meta_task(m), C.meta_flags(m), C.meta_class(m)) == (K.TASK_NONE - 1, K.FLAG_REPEAT, 3)
    assert (C.meta_length(m), C.meta_ring(m)) == (4000, K.RING_NONE)
    arr = C.meta_make(np.arange(5, dtype=np.int64), 0, 0, 0, 0)
    assert list(C.meta_task(arr)) == [0, 1, 2, 3, 4]
    w = C.op_header(K.OP_MAX_AMOUNT, 9, K.OP_MAX_KEYS)
    assert (C.oph_required(w), C.oph_task(w), C.oph_nkeys(w)) == (K.OP_MAX_AMOUNT, 9, K.OP_MAX_KEYS)
    ref = C.block_ref_make(2, 12345)
    assert (C.block_ref_class(ref), C.block_ref_index(ref)) == (2, 12345)
    o = C.out_make(gen, K.OUTCOME_ERROR)
    assert (C.out_gen(o), C.out_code(o)) == (gen, K.OUTCOME_ERROR)
