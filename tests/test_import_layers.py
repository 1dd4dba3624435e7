"""The whole package's imports point one way (docs/concepts.md, "Layers"): errors and the
native core, wheel, kafka, segment, journal, service, the public ``shmwheel`` package,
then the tools (metrics, cli; bench, pipeline, examples). No module imports a higher layer
and no modules import each other in a circle, however deep their packages (service/jobs
too). Every import counts: at module level, inside a function, under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent / "shmwheel"
RANK = {
    "errors": 0, "_native": 0, "wheel": 1, "kafka": 2, "segment": 3, "journal": 4,
    "service": 5, "": 6, "metrics": 7, "cli": 7, "bench": 8, "pipeline": 8, "examples": 8,
    "__main__": 9,
}  # fmt: skip


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name ("shmwheel.service.jobs.pool")."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["shmwheel", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (a package's __init__ re-exporting its
    own children is not an edge)."""
    known = {**modules(), "shmwheel._native": ROOT / "_native.pyi"}  # the C extension
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        if name == "shmwheel._native":
            edges[name] = set()
            continue
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package[: len(package) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names]  # fmt: skip
            for t in targets:
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if (
                    t
                    and t != name
                    and not (path.name == "__init__.py" and t.startswith(name + "."))
                ):
                    found.add(t)
        edges[name] = found
    return edges


def layer(module: str) -> int:
    parts = module.split(".")
    return RANK[parts[1] if len(parts) > 1 else ""]


def test_it_sees_the_package_whole():
    g = graph()
    assert "shmwheel.service.jobs.manager" in g and "shmwheel.service.jobs.state" in g
    assert "shmwheel.service.jobs.state" in g["shmwheel.service.jobs.manager"]
    assert "shmwheel.wheel.core" in g["shmwheel.service.jobs.timers"]


def test_no_module_imports_a_higher_layer():
    g = graph()
    up = sorted(f"{a} -> {b}" for a, ts in g.items() for b in ts if layer(b) > layer(a))
    assert up == []


def test_no_modules_import_each_other_in_a_circle():
    assert cycles(graph()) == []
