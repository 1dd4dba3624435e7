"""The test suite's own import rule: no module of tests/ imports a test module (test_*.py)
or conftest.py. What test modules share lives in tests/helpers.py (waiting, services, what
the task modules share) or in a library module named for what it holds (slot_machine.py,
bench_tables.py, journaled_jobs.py, ...); helpers.py is imported as ``helpers``, never as
``tests.helpers`` (a second copy of the module would hold a second KEPT set)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an import statement names, at any depth."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            out.append((node.lineno, node.module))
            if node.module == "tests":  # from tests import test_x
                out += [(node.lineno, f"tests.{a.name}") for a in node.names]
    return out


def breaches(source: str) -> list[str]:
    """What `source` imports against the rule, as 'line: name'."""
    bad = []
    for line, name in _imported(ast.parse(source)):
        last = name.removeprefix("tests.")
        if last.split(".")[0].startswith("test_") or last == "conftest" or name == "tests.helpers":
            bad.append(f"{line}: {name}")
    return bad


def test_no_module_of_tests_imports_a_test_module_or_conftest():
    found = {p.name: b for p in sorted(TESTS.glob("*.py")) if (b := breaches(p.read_text()))}
    assert found == {}, f"import from helpers.py or a named library module instead: {found}"


def test_the_rule_sees_each_form():
    for source in (
        "from test_service import TASKS",
        "import test_service",
        "from tests.test_job_journal import sigkill_and_recover",
        "from tests import test_service",
        "def f():\n    from conftest import MINE",
        "from tests.helpers import wait_for",
    ):
        assert breaches(source), source
    for source in (
        "from helpers import wait_for",
        "from tests import ops_tasks",
        "import race_tasks",
        "from shmwheel.service.caller import client",
    ):
        assert not breaches(source), source
