"""The task registry: what a ``TimerService(tasks=...)`` entry names, and importing it;
and the import path of the service processes.

Executors import only registered tasks; nothing named in a payload is ever imported.
Service processes import from the embedding process's ``sys.path`` as it was at
``start()``, with each entry made absolute, less ``''``: that entry (what ``python -c`` and
the REPL put first) means the working directory, wherever it is, and a module another user
plants in a shared working directory must never run in a service process. A task module
that the embedding process finds only there is refused when the service is made.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

_script_modules: dict[str, ModuleType] = {}


def resolve(spec: str) -> Callable[[Any], Any]:
    """The function a registry entry names: "package.module:function" or
    "/path/to/file.py:function" (how a task defined in a script's __main__ is recorded)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"task spec {spec!r} must be 'module:function'")
    if module_name.endswith(".py"):
        module = _script_modules.get(module_name)
        if module is None:  # loaded once, so the tasks of one script share its globals
            loader_spec = importlib.util.spec_from_file_location("__shmwheel_main__", module_name)
            if loader_spec is None or loader_spec.loader is None:
                raise ImportError(f"cannot load {module_name}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
            _script_modules[module_name] = module
    else:
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"task spec {spec!r} names a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def task_spec(name: str, task: str | Callable[..., Any]) -> str:
    """The "module:function" an executor imports for a registry entry; refuses what an
    executor could not import (lambdas, nested functions, non-callables)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"task names must be non-empty strings, got {name!r}")
    if isinstance(task, str):
        spec = task
    elif callable(task):
        qual = getattr(task, "__qualname__", "")
        module = getattr(task, "__module__", None)
        if not module or "<" in qual:
            raise ValueError(
                f"task {name!r}: {task!r} is not a module-level function; executors "
                f"import tasks by name, so define it at module level"
            )
        if module == "__main__":
            main_file = getattr(sys.modules["__main__"], "__file__", None)
            if not main_file:
                raise ValueError(
                    f"task {name!r} is defined in an interactive __main__; move it into a module"
                )
            module = str(Path(main_file).resolve())
        spec = f"{module}:{qual}"
    else:
        raise TypeError(
            f"task {name!r} must be 'module:function' or a function, got {type(task).__name__}"
        )
    try:
        resolve(spec)
    except Exception as e:
        raise ValueError(f"task {name!r}: cannot import {spec!r}: {e}") from None
    _check_reachable(name, spec)
    return spec


def service_path(path: Iterable[object] | None = None) -> list[str]:
    """The import path of the service processes (module doc): `path` (default sys.path)
    with '' dropped, every other entry made absolute, duplicates dropped."""
    out: list[str] = []
    for entry in sys.path if path is None else path:
        if not isinstance(entry, (str, os.PathLike)):
            continue
        text = os.fsdecode(entry)
        if not text:
            continue  # the working directory, wherever it is: never searched
        absolute = os.path.abspath(text)
        if absolute not in out:
            out.append(absolute)
    return out


def _found(top: str, path: list[str]) -> bool:
    """Whether a process importing from `path` finds the top-level module `top`: on the
    path itself, or through a finder that does not search sys.path (an editable install's,
    the built-in and frozen modules)."""
    if importlib.machinery.PathFinder.find_spec(top, path) is not None:
        return True
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            if finder.find_spec(top, None) is not None:
                return True
        except Exception:
            continue
    return False


def _check_reachable(name: str, spec: str) -> None:
    """Refuse a task module the embedding process finds only through '' on its path (the
    working directory), which service processes do not search (module doc)."""
    module = spec.partition(":")[0]
    if module.endswith(".py") or "" not in sys.path:
        return  # a script's tasks are loaded by file; without '' the paths are the same
    top = module.split(".")[0]
    if _found(top, service_path()):
        return
    raise ValueError(
        f"task {name!r}: module {top!r} is found only in the working directory "
        f"{os.getcwd()} ('' on sys.path), which service processes do not search (a module "
        f"another user put there would run in them); put its directory on the path on "
        f"purpose: sys.path.insert(0, {os.getcwd()!r}) before creating the service, or "
        f"PYTHONPATH={os.getcwd()}"
    )
