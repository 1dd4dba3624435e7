"""The whole package's imports point one way (docs/concepts.md, "Layers"): errors and the
native core, wheel, kafka, segment, journal, service, the public ``shmwheel`` package,
then the tools (metrics, cli; bench, pipeline, examples). No module imports a higher layer
and no modules import each other in a circle, however deep their packages (service/jobs
too). Every import counts: at module level, inside a function, under TYPE_CHECKING. Inside
service/ and journal/, each room imports only the rooms its rule allows; no package folder
holds more than 15 modules and no package file is over 500 lines; one module reads a
file's owner."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent / "shmwheel"
RANK = {
    "errors": 0, "_native": 0, "_lazy": 0, "wheel": 1, "kafka": 2, "segment": 3, "journal": 4,
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


# The rooms of service/ and journal/ (docs/concepts.md, "Layers"): a room may import the
# rooms listed here and its package's shared modules (those at the package's top), never
# another room. The shared modules import no room.
ROOMS = {
    "shmwheel.service": {
        "caller": {"jobs"},  # the caller's process: the clients and their handles
        "supervisor": {"caller", "jobs"},  # TimerService, in the caller's process too
        "processes": {"jobs"},  # the service's own processes (only jobs.worker, forked)
        "jobs": set(),  # the job pool and its workers
    },
    "shmwheel.journal": {
        "write": set(),  # the write path of a running service
        "recover": {"write"},  # recovery, salvage, repair: they write segments too
    },
}


def room(module: str) -> tuple[str, str] | None:
    """(package, room) of a module of service/ or journal/; room "" for a shared module."""
    for package, rooms in ROOMS.items():
        if module == package or module.startswith(package + "."):
            head = module[len(package) + 1 :].split(".")[0]
            return package, head if head in rooms else ""
    return None


def room_breaches(g: dict[str, set[str]]) -> list[str]:
    out = []
    for a, targets in g.items():
        ra = room(a)
        for b in targets:
            rb = room(b)
            if ra is None or rb is None or ra[0] != rb[0] or ra[1] == rb[1] or rb[1] == "":
                continue  # another package, the same room, or a shared module
            allowed = ROOMS[ra[0]][ra[1]] if ra[1] else set()
            if rb[1] not in allowed:
                out.append(f"{a} -> {b}")
    return sorted(out)


def test_rooms_import_only_what_their_rule_allows():
    g = graph()
    assert room("shmwheel.service.caller.client") == ("shmwheel.service", "caller")
    assert room("shmwheel.service.tasks") == ("shmwheel.service", "")
    assert "shmwheel.service.caller.client" in g["shmwheel.service.supervisor.supervisor"]
    assert room_breaches(g) == []


def test_a_planted_import_across_rooms_is_caught():
    g = graph()
    g["shmwheel.service.processes.executor"].add("shmwheel.service.caller.client")
    g["shmwheel.service.caller.client"].add("shmwheel.service.supervisor.watchdog")
    g["shmwheel.service.tasks"].add("shmwheel.service.caller.handles")
    g["shmwheel.journal.write.writer"].add("shmwheel.journal.recover.recovery")
    assert room_breaches(g) == [
        "shmwheel.journal.write.writer -> shmwheel.journal.recover.recovery",
        "shmwheel.service.caller.client -> shmwheel.service.supervisor.watchdog",
        "shmwheel.service.processes.executor -> shmwheel.service.caller.client",
        "shmwheel.service.tasks -> shmwheel.service.caller.handles",
    ]


def test_no_package_folder_holds_more_than_15_modules():
    crowded = {}
    for init in ROOT.rglob("__init__.py"):
        folder = init.parent
        n = len(list(folder.glob("*.py")))  # __init__.py counts
        if n > 15:
            crowded[str(folder.relative_to(ROOT.parent))] = n
    assert crowded == {}


def test_no_package_file_is_over_500_lines():
    long = {}
    for path in ROOT.rglob("*"):
        if path.suffix in (".py", ".pyi", ".c", ".h") and "build" not in path.parts:
            n = len(path.read_text().splitlines())
            if n > 500:
                long[str(path.relative_to(ROOT.parent))] = n
    assert long == {}


def test_one_module_reads_a_files_owner():
    """Only segment/trust.py reads ``st_uid``: whether a path, a directory or a segment
    belongs to this user is decided there and nowhere else (the CLI, salvage, the census,
    shm, the journal directory's claim and the JVM archive all call it)."""
    readers = sorted(
        str(path.relative_to(ROOT.parent))
        for path in ROOT.rglob("*")
        if path.suffix in (".py", ".c", ".h") and "st_uid" in path.read_text()
    )
    assert readers == ["shmwheel/segment/trust.py"]
