"""What the package's comments and docstrings name exists: every file named ``x.py``,
``x.c`` or ``x.h`` (bare, or as a path such as ``segment/sizes.py``) is a file of the
repository, and every dotted reference to the package's code (``shmwheel.journal.scan``,
``scan.clock_offset_ms``) names a module and a name that exist. A comment that names what
was renamed or removed misleads the next reader; this test is where such a word fails."""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "shmwheel"

FILE_WORD = re.compile(r"(?<![\w/.*-])((?:[\w-]+/)*[\w-]+\.(?:py|c|h|pyi))(?![\w/])")
DOTTED = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")

# Files named as examples of the user's own, not of this repository (each with its reason).
NOT_OURS = {
    "example.py": "the quick start's name for a reader's own program",
    "tasks.py": "a user's task module in examples of TimerService(tasks=...)",
    "myapp/tasks.py": "a user's task module in an example",
    "app.py": "a user's program in an example",
    "pyspark/sql/worker/data_source_pushdown_filters.py": "a file of PySpark, not of ours",
    "linux/prctl.h": "the kernel's header",
}
# Dotted words that are not the package's code, and the placeholders of a pattern.
NOT_OURS_DOTTED = {
    "kafka.utils": "Apache Kafka's Java package, whose TimingWheel the wheel follows",
}
PLACEHOLDERS = {"NAME", "X", "ROLE"}  # shmwheel.NAME: a segment's name, not a module


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return out + [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")]  # new, untracked


C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def words(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, every comment of a C
    source or header."""
    src = path.read_text()
    if path.suffix in (".c", ".h"):
        for m in C_COMMENT.finditer(src):
            yield src.count("\n", 0, m.start()) + 1, m.group(0)
        return
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, documented) and (doc := ast.get_docstring(node, clean=False)):
            yield node.body[0].lineno, doc


def package_names() -> tuple[dict[str, list[set[str]]], set[str]]:
    """Module basename -> the top-level names of each module of that basename; and every
    name defined anywhere in the package (functions, classes, methods, attributes), for
    words such as ``client.schedule`` that name an object's method, not a module's."""
    modules: dict[str, list[set[str]]] = defaultdict(list)
    everywhere: set[str] = set()
    for path in [*PACKAGE.rglob("*.py"), PACKAGE / "_native.pyi"]:
        tree = ast.parse(path.read_text())
        top: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                top.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    top.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                top.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                everywhere.add(node.name)
            elif isinstance(node, ast.Attribute):
                everywhere.add(node.attr)
            elif isinstance(node, ast.Name):
                everywhere.add(node.id)
            elif isinstance(node, ast.arg):
                everywhere.add(node.arg)
        name = path.stem if path.stem != "__init__" else path.parent.name
        modules[name].append(top | {p.stem for p in path.parent.glob("*.py")})
    return modules, everywhere


@functools.cache
def defined(path: Path) -> frozenset[str]:
    """The names a module defines or imports (read from its source), and a package's
    modules."""
    tree = ast.parse(path.read_text())
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name) for a in n.names)
    if path.name == "__init__.py":
        names.update(p.stem for p in path.parent.glob("*.py"))
        names.update(p.name for p in path.parent.iterdir() if (p / "__init__.py").is_file())
    return frozenset(names)


def resolves(dotted: str) -> bool:
    """``shmwheel.a.b.c``: the longest prefix that is a module or package of the tree, and
    the next part a name it defines (nothing is imported)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = PACKAGE.parent.joinpath(*parts[:i])
        for path in (base.with_suffix(".py"), base / "__init__.py", base.with_suffix(".pyi")):
            if path.is_file():
                return i == len(parts) or parts[i] in defined(path)
    return False


def near(path: Path) -> set[str]:
    """The Python files a bare name (``writer.py``) in `path` can mean: those of its own
    top-level package (``shmwheel/journal/**``) and those of shmwheel/ itself; a file of
    another package is named with its package (``journal/writer.py``)."""
    rel = path.relative_to(PACKAGE).parts
    own = PACKAGE / rel[0] if len(rel) > 1 else PACKAGE
    found = {p.name for p in PACKAGE.glob("*.py*")}
    found |= {p.name for p in own.rglob("*.py*")} if own != PACKAGE else set()
    return found


def problems() -> list[str]:
    files = tracked()
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    modules, everywhere = package_names()
    out = []
    sources = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")]
    for path in sorted(sources):
        rel = path.relative_to(REPO)
        for line, text in words(path):
            for name in FILE_WORD.findall(text):
                if name in NOT_OURS:
                    continue
                if "/" in name:  # a file of that name below that directory (at any depth)
                    top, base = name.split("/")[0], name.rsplit("/", 1)[-1]
                    ok = any(
                        (f.startswith(top + "/") or f"/{top}/" in f) and f.endswith("/" + base)
                        for f in files
                    )
                elif name.endswith((".py", ".pyi")):
                    ok = name in near(path)
                else:
                    ok = name in basenames
                if not ok:
                    out.append(f"{rel}:{line}: names {name}, which is no file of the repository")
            for dotted in DOTTED.findall(text):
                head, *rest = dotted.split(".")
                if rest and rest[-1] in ("py", "c", "h", "pyi", "md", "txt", "json", "toml"):
                    continue  # a file name (checked above)
                if set(rest) & PLACEHOLDERS or any(dotted.startswith(w) for w in NOT_OURS_DOTTED):
                    continue
                if head == "shmwheel":
                    if not resolves(dotted):
                        out.append(f"{rel}:{line}: names {dotted}, which does not exist")
                elif head in modules and len(rest) >= 1:
                    attr = rest[0]
                    if not any(attr in top for top in modules[head]) and attr not in everywhere:
                        out.append(f"{rel}:{line}: names {dotted}: no {head} module defines {attr}")
    return out


def test_comments_and_docstrings_name_what_exists():
    found = problems()
    assert not found, "\n".join(found)
