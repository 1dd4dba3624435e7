"""The lower layers point one way (docs/concepts.md): errors and the native core, then wheel,
kafka, segment, journal, service. No module of wheel/, kafka/, segment/ or journal/ imports
a higher layer, and inside segment/ and journal/ no modules import each other in a circle.
Every import counts: at module level, inside a function, and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent / "shmwheel"
RANK = {"errors": 0, "_native": 0, "wheel": 1, "kafka": 2, "segment": 3, "journal": 4, "service": 5}


def imported(path: Path, package: str) -> set[str]:
    """Every module name `path` (a module of shmwheel.`package`) imports, made absolute:
    for ``from X import a`` both X and X.a (a may be a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = ["shmwheel", package][: 2 - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def every_import_graph(package: str) -> dict[str, set[str]]:
    modules = {p.stem for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    prefix = f"shmwheel.{package}."
    return {
        m: {
            t[len(prefix) :]
            for t in imported(ROOT / package / f"{m}.py", package)
            if t.startswith(prefix) and t[len(prefix) :] in modules - {m}
        }
        for m in modules
    }


def test_the_lower_layers_never_import_a_higher_one():
    up = []
    for package in ("wheel", "kafka", "segment", "journal"):
        for path in sorted((ROOT / package).glob("*.py")):
            for target in imported(path, package):
                parts = target.split(".")
                layer = parts[1] if len(parts) > 1 and parts[0] == "shmwheel" else ""
                if RANK.get(layer, -1) > RANK[package]:
                    up.append(f"{package}/{path.name} imports {target}")
    assert up == []


def test_segment_and_journal_modules_import_each_other_without_a_circle():
    segment, journal = every_import_graph("segment"), every_import_graph("journal")
    assert "layout" in segment["census"] and "check" in journal["recovery"]  # it sees them
    assert cycles(segment) == [] and cycles(journal) == []
