"""The task registry: what a ``TimerService(tasks=...)`` entry names, and importing it.

Executors import only registered tasks; nothing named in a payload is ever imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
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
    return spec
