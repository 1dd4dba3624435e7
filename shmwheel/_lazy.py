"""Names a package exports but imports from their modules on first use (PEP 562's module
``__getattr__``): the public ``shmwheel`` package, so that ``import shmwheel`` costs almost
nothing, and ``shmwheel.journal``, whose reader imports numpy."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any


def load(
    name: str, package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Any:
    """`package`'s `name`, imported from its module (`where`: name -> a module relative to
    `package`) and kept in `namespace` (the package's globals), so that the next access
    is a plain lookup; AttributeError for a name `where` does not list."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, package), name)
    namespace[name] = value
    return value
