"""Filling in the text of the bench table (``workloads.toml``): every ``{name}`` and
``{module.NAME}`` from the names the registry gives (``registry.names``) and a workload's
own lists (``each.x``). An entry (a row, a note, a goal, a list's entry) whose text names
a list stands for one entry per value: naming two lists, one per pair of values, the list
named first varying slowest; naming an empty list, none."""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Iterator, Mapping
from typing import Any

_FORMAT = string.Formatter()
_NAME = re.compile(r"\w+")


def _texts(entry: Any) -> Iterator[str]:
    """Every string in `entry` (a string, a list, a table's keys and values)."""
    if isinstance(entry, str):
        yield entry
    elif isinstance(entry, list):
        for x in entry:
            yield from _texts(x)
    elif isinstance(entry, dict):
        for k, v in entry.items():
            yield k
            yield from _texts(v)


def named(entry: Any) -> list[str]:
    """The names `entry`'s fields start with (``{pool[peer]}``: pool), in the order first
    named."""
    found: list[str] = []
    for text in _texts(entry):
        for _, field, _, _ in _FORMAT.parse(text):
            m = _NAME.match(field or "")
            if m and m.group() not in found:
                found.append(m.group())
    return found


def fill(entry: Any, names: Mapping[str, Any]) -> Any:
    """`entry` with every field of its text filled in from `names` (numbers kept)."""
    if isinstance(entry, str):
        return _FORMAT.vformat(entry, (), names)
    if isinstance(entry, list):
        return [fill(x, names) for x in entry]
    if isinstance(entry, dict):
        return {fill(k, names): fill(v, names) for k, v in entry.items()}
    return entry


def expand(entries: list[Any], names: Mapping[str, Any]) -> list[Any]:
    """Each of `entries` filled in once for each combination of the values of the lists
    it names (once if it names none)."""
    out = []
    for entry in entries:
        loops = [n for n in named(entry) if isinstance(names.get(n), list | tuple)]
        for values in itertools.product(*(names[n] for n in loops)):
            out.append(fill(entry, {**names, **dict(zip(loops, values, strict=True))}))
    return out


def with_lists(each: Mapping[str, Any], names: Mapping[str, Any]) -> dict[str, Any]:
    """`names` and a workload's own lists (its ``each`` table), in the order written: a
    list's entries may name the lists before it; a string such as ``"{producers}"`` or
    ``"{lease.QS}"`` is the list it names."""
    out = dict(names)
    for key, value in each.items():
        if isinstance(value, str):
            out[key] = list(_FORMAT.get_field(value.strip("{}"), (), out)[0])
        else:
            out[key] = expand(value, out)
    return out
