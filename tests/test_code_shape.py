"""The tools are as lean as the product (issue 32): in ``shmwheel/bench`` and
``shmwheel/pipeline`` no function or method is longer than 60 lines (decorators and
docstring included) and nothing is imported from ``tests/`` (no folder over 15 modules:
tests/test_import_layers.py, for the whole package). Parsed with ast: nothing is imported
or run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [ROOT / "shmwheel" / "bench", ROOT / "shmwheel" / "pipeline"]
MAX_FUNCTION_LINES = 60


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method of the file at `path` longer than `limit` lines, as
    "file:line name (n lines)"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > limit:
                found.append(f"{_shown(path)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_tools_functions_are_short():
    found = [f for tool in TOOLS for path in sorted(tool.rglob("*.py"))
             for f in long_functions(path)]  # fmt: skip
    assert not found, "functions over 60 lines:\n" + "\n".join(found)


def test_tools_import_nothing_from_tests():
    """No import in the tools names ``tests`` or a module that lives in tests/ (the
    bench's crash loop once imported its harness from there)."""
    test_modules = {p.stem for p in (ROOT / "tests").glob("*.py")} | {"tests"}
    found = []
    for tool in TOOLS:
        for path in sorted(tool.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                found += [f"{_shown(path)}:{node.lineno} imports {n}"
                          for n in names if n.split(".")[0] in test_modules]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_checks_see_what_they_check(tmp_path):
    """The length check finds a planted function just over the limit and passes one at
    it (its decorator counted)."""
    body = "\n".join(f"    x{i} = {i}" for i in range(58))
    (tmp_path / "at.py").write_text(f'def f():\n    """doc"""\n{body}\n')  # 60 lines
    (tmp_path / "over.py").write_text(f'@staticmethod\ndef g():\n    """doc"""\n{body}\n')
    at, over = long_functions(tmp_path / "at.py", 60), long_functions(tmp_path / "over.py", 60)
    assert at == [] and len(over) == 1 and "g (61 lines)" in over[0]
