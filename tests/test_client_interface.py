"""One Client: its native half calls its Python half only through the hooks it declares,
and the modules of the service import each other without a circle.

- ``PRODUCER_HOOKS`` (producer.h, exported as ``N.PRODUCER_HOOKS``), the ``ProducerHooks``
  Protocol of ``_native.pyi`` and the methods of ``Client`` are one list (mypy checks the
  Protocol against Client: service/caller/client.py), and the C files of the client's native half
  call no method of it by any other way.
- The import graph of the client's modules, ``shmwheel.service.caller``
  (tests/import_graph.py), has no cycle; a planted one is found (the whole package's:
  test_import_layers.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from import_graph import cycles, graph

from shmwheel import _native as N
from shmwheel.service.caller.client import Client

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "shmwheel" / "native"
CLIENT_C = ["producer.c", "producer_slow.c", "reset.c", "watch.c", "handle.c"]


def protocol_members(stub: Path, name: str) -> list[str]:
    """The methods a Protocol class of a stub declares, in order."""
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
    raise AssertionError(f"{name} is not in {stub}")


def test_the_hooks_are_one_list_and_client_has_them():
    declared = protocol_members(ROOT / "shmwheel" / "_native.pyi", "ProducerHooks")
    assert list(N.PRODUCER_HOOKS) == declared
    for name in declared:
        assert callable(getattr(Client, name, None)), f"Client has no {name}"


def test_the_native_half_calls_the_python_half_only_through_its_hooks():
    """Every call of a method of the Producer (`p`) from C goes through producer_hook
    (producer_hooks.c), by a name of PRODUCER_HOOKS: no other method name is interned or
    spelled in a call in the C files of the client's native half."""
    call = re.compile(r"Py\w*Method\w*\(\s*\(PyObject \*\)\s*(p|self|h->client)\b")
    # a private name spelled whole, but not as the name of a method (pymethods.h's METHOD_*)
    # or member defined here
    defined = re.compile(r"\bMETHOD\w*\(\s*\"_\w+\"")
    named = re.compile(r"\"(_[a-z]\w*)\"(?!\s*,\s*T_)")
    for f in CLIENT_C:
        text = defined.sub("METHOD(", (NATIVE / f).read_text())
        assert not call.search(text), f"{f} calls a method of the client directly"
        assert not named.findall(text), f"{f} names a private method: {named.findall(text)}"
    hooks = (NATIVE / "producer_hooks.c").read_text()
    assert hooks.count("VectorcallMethod") == 1  # the one call, by hook_names[hook]


def test_the_client_modules_import_each_other_without_a_circle():
    edges = graph(ROOT / "shmwheel" / "service" / "caller", "shmwheel.service.caller")
    assert "client_base" in edges["batch"] and "client" not in edges["handles"]
    assert cycles(edges) == []


def test_a_planted_circle_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")  # in a function: an edge
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n"
        "from pkg.a import x\n"
    )
    (pkg / "d.py").write_text("if TYPE_CHECKING:\n    from .a import y\n")  # types only
    edges = graph(pkg, "pkg")
    assert edges == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert cycles(edges) == [["a", "b", "c", "a"]]
