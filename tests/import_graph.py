"""The import graph of a package's modules, read from their source (nothing is imported),
and its cycles. An edge a -> b is an import of b by a that runs: at module level or in a
function; an import under ``if TYPE_CHECKING:`` (for the type checker only) is not one.

    python tests/import_graph.py shmwheel/service    # prints its edges and its cycles
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run (every one outside an ``if TYPE_CHECKING:`` body)."""
    out: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    walk(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            walk(child)

    walk(tree)
    return out


def graph(package_dir: str | Path, dotted: str | None = None) -> dict[str, set[str]]:
    """{module: the modules of the same package it imports}, by module name (no dots).
    `dotted` is the package's import name (by default its path, "a/b" -> "a.b")."""
    root = Path(package_dir)
    dotted = dotted or ".".join(root.parts)
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    edges: dict[str, set[str]] = {m: set() for m in modules}

    def inside(name: str) -> list[str]:  # the module of this package an import names
        return [name[len(dotted) + 1 :].split(".")[0]] if name.startswith(dotted + ".") else []

    for m in modules:
        tree = ast.parse((root / f"{m}.py").read_text(), filename=f"{m}.py")
        for node in _imports(tree):
            edges[m].update(t for t in _targets(node, dotted, inside) if t in modules and t != m)
    return edges


def _targets(node: ast.Import | ast.ImportFrom, dotted: str, inside) -> list[str]:  # type: ignore[no-untyped-def]
    """The modules of package `dotted` an import statement imports."""
    if isinstance(node, ast.Import):
        return [t for a in node.names for t in inside(a.name)]
    if node.level:  # relative: from the package `level - 1` above this one
        up = dotted.split(".")[: len(dotted.split(".")) - (node.level - 1)]
        base = ".".join(up + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # from <this package> import a, b; or from <this package>.a import x
    return [a.name for a in node.names] if base == dotted else inside(base)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of the graph, each once (as a path that ends where it starts)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def visit(path: list[str]) -> None:
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt == path[0]:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle from its smallest module
                visit([*path, nxt])

    for start in sorted(edges):
        visit([start])
    return found


if __name__ == "__main__":
    g = graph(sys.argv[1] if len(sys.argv) > 1 else "shmwheel/service")
    for m in sorted(g):
        print(f"{m} -> {', '.join(sorted(g[m])) or '-'}")
    found = cycles(g)
    print("cycles:", "; ".join(" -> ".join(c) for c in found) or "none")
    sys.exit(1 if found else 0)
