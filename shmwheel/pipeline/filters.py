"""The filters the ``shmwheel-journal`` data source takes from Spark (``pushFilters``):
which it accepts, how it applies them to a segment's rows, and which segments they rule
out before a byte of them is decoded.

Theory of operation. Spark hands a Python data source the conjuncts of a query's WHERE
clause that are simple comparisons of one column with literals (``pyspark.sql.datasource``
``EqualTo``, ``In``, ``GreaterThan``, ..., ``Not`` of them). A filter the source accepts
is not evaluated again by Spark, so an accepted filter must select exactly the rows SQL
would: each is translated to a ``Pred`` (a plain tuple, picklable) and evaluated with
pyarrow's compute functions, whose nulls behave as SQL's (a comparison with null is null,
and null is not true). Every filter on a column of the table is accepted (``accept``);
the rows of a segment are filtered before the columns the query reads are built.

Whole segments are skipped where their header proves that no row can match
(``SegmentFacts``):

- the columns every row of a segment shares (``file``, ``epoch``, ``role``,
  ``writer_pid``, ``service``, ``boot_id``: ``events.per_file``): the filter is evaluated
  on those values once, and a segment for which it is not true is skipped;
- the times ``t_us`` and ``wall_us``: a coordinator's or reaper's segment that has a
  successor (the segment whose header names it as ``prev``, of the same boot) holds no
  record stamped after the successor's header was made (a writer stamps its records,
  writes them, and only then begins the next segment: ``journal/write/writer.py``,
  ``flush`` then ``_rotate``). So ``t_us >= X`` (or ``>``, ``=``, ``IN``) skips the
  segments whose successor began before X: a time range skips what ended before it.
  Nothing bounds a segment's first record from below (a writer records events it
  learned of earlier), so ``t_us < X`` skips nothing; a writer's newest segment, a
  recovery's and one without a readable header are always read.
- ``kind`` is in every segment: it filters rows only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import events as E

#: a predicate: (op, column, value); ("not", child) negates one
Pred = tuple[Any, ...]

_BINARY = {
    "EqualTo": "eq",
    "EqualNullSafe": "eqns",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "In": "in",
    "StringStartsWith": "starts",
    "StringEndsWith": "ends",
    "StringContains": "contains",
}
_UNARY = {"IsNull": "null", "IsNotNull": "notnull"}
_STRING_OPS = ("starts", "ends", "contains")
_TYPES = {c[0]: c[1] for c in E.COLUMNS}
#: the columns that bound a segment's records from above by its successor's header
TIMES = ("t_us", "wall_us")
#: the writers whose segments' times are bounded so (a recovery copies older records)
_TIMED_ROLES = ("coordinator", "reaper")


def from_spark(f: Any) -> Pred | None:
    """The predicate of a ``pyspark.sql.datasource.Filter``, or None if it is not one the
    source evaluates (a nested column, a column it does not have, a literal of another
    type than the column's)."""
    name = type(f).__name__
    if name == "Not":
        child = from_spark(f.child)
        return None if child is None else ("not", child)
    op = _BINARY.get(name) or _UNARY.get(name)
    path: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if op is None or len(path) != 1 or path[0] not in _TYPES:
        return None
    column = path[0]
    if op in _UNARY.values():
        return (op, column, None)
    value = f.value
    values = tuple(value) if op == "in" else (value,)
    if not values or not all(_fits(v, _TYPES[column], op) for v in values):
        return None
    return (op, column, values if op == "in" else value)


def _fits(v: Any, typ: pa.DataType, op: str) -> bool:
    if v is None:
        return op == "eqns"
    if pa.types.is_string(typ):
        return isinstance(v, str)
    return op not in _STRING_OPS and isinstance(v, int) and not isinstance(v, bool)


def accept(filters: Iterable[Any]) -> tuple[list[Pred], list[Any]]:
    """(the predicates of the filters the source evaluates, the filters it leaves to
    Spark), as ``DataSourceReader.pushFilters`` splits them."""
    taken: list[Pred] = []
    left: list[Any] = []
    for f in filters:
        p = from_spark(f)
        if p is None:
            left.append(f)
        else:
            taken.append(p)
    return taken, left


def columns_of(preds: Sequence[Pred]) -> list[str]:
    """The columns the predicates read, in the table's order."""
    used: set[str] = set()
    for p in preds:
        while p[0] == "not":
            p = p[1]
        used.add(p[1])
    return [c for c in E.NAMES if c in used]


def evaluate(table: pa.Table | pa.RecordBatch, p: Pred) -> pa.Array:
    """The predicate over the rows of `table` (its columns as ``events.COLUMNS``): true,
    false or null per row, as SQL evaluates it."""
    if p[0] == "not":
        return pc.invert(evaluate(table, p[1]))
    op, column, value = p
    col = table.column(column)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if op == "null":
        return pc.is_null(col)
    if op == "notnull":
        return pc.is_valid(col)
    if op == "eqns":
        if value is None:
            return pc.is_null(col)
        return pc.fill_null(pc.equal(col, pa.scalar(value, col.type)), False)
    if op == "in":
        hit = pc.is_in(col, value_set=pa.array(list(value), col.type))
        return pc.if_else(pc.is_valid(col), hit, pa.scalar(None, pa.bool_()))
    if op in _STRING_OPS:
        fn = {"starts": pc.starts_with, "ends": pc.ends_with, "contains": pc.match_substring}
        return fn[op](col, pattern=value)
    compare = {"eq": pc.equal, "gt": pc.greater, "ge": pc.greater_equal, "lt": pc.less,
               "le": pc.less_equal}[op]  # fmt: skip
    return compare(col, pa.scalar(value, col.type))


def mask(table: pa.Table | pa.RecordBatch, preds: Sequence[Pred]) -> np.ndarray:
    """The rows for which every predicate is true (a null is not true)."""
    keep = np.ones(table.num_rows, bool)
    for p in preds:
        got = pc.fill_null(evaluate(table, p), False)
        keep &= np.asarray(got.to_numpy(zero_copy_only=False), bool)
    return keep


@dataclass(frozen=True)
class SegmentFacts:
    """What a segment's header (and its successor's) tells of all its rows: the values
    of the per-file columns, and bounds of its times (None: unbounded)."""

    per_file: dict[str, object]
    t_us_max: int | None = None
    wall_us_max: int | None = None

    @classmethod
    def of(
        cls, path: str, header: dict[str, Any] | None, successor: dict[str, Any] | None
    ) -> SegmentFacts:
        """The facts of the segment at `path` with `header`, given the header of its one
        successor (None: it has none, or several, or its header is unreadable)."""
        per_file = E.per_file(path, header)
        if header is None or successor is None:
            return cls(per_file)
        if per_file["role"] not in _TIMED_ROLES or successor.get("boot_id") != header.get(
            "boot_id"
        ):
            return cls(per_file)
        top = int(successor["mono_us"])
        return cls(per_file, top, top - int(header["mono_us"]) + int(header["wall_us"]))

    def excludes(self, preds: Sequence[Pred]) -> str | None:
        """The column of a predicate no row of the segment can satisfy, or None."""
        for p in preds:
            cols = columns_of([p])
            if all(c in self.per_file for c in cols):
                if not _true_of_values(self.per_file, p):
                    return cols[0]
            elif p[0] != "not" and p[1] in TIMES:
                top = self.t_us_max if p[1] == "t_us" else self.wall_us_max
                if top is not None and _above(p, top):
                    return str(p[1])
        return None


def _true_of_values(values: dict[str, object], p: Pred) -> bool:
    """Whether `p` is true of one row holding `values`."""
    row = pa.table({c: pa.array([values[c]], _TYPES[c]) for c in values})
    return bool(mask(row, [p])[0])


def _above(p: Pred, top: int) -> bool:
    """Whether no value <= `top` satisfies `p` (a lower bound the values cannot reach)."""
    op, _, value = p
    if op == "gt":
        return bool(top <= value)
    if op in ("ge", "eq") or (op == "eqns" and value is not None):
        return bool(top < value)
    if op == "in":
        return bool(top < min(value))
    return False


def describe(preds: Sequence[Pred]) -> str:
    """The predicates as SQL-like text (for logs and errors)."""
    names = {"eq": "=", "eqns": "<=>", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}

    def one(p: Pred) -> str:
        if p[0] == "not":
            return f"NOT ({one(p[1])})"
        op, c, v = p
        if op in names:
            return f"{c} {names[op]} {v!r}"
        if op == "in":
            return f"{c} IN ({', '.join(map(repr, v))})"
        if op in ("null", "notnull"):
            return f"{c} IS {'NOT ' if op == 'notnull' else ''}NULL"
        return f"{c} {op} {v!r}"

    return " AND ".join(one(p) for p in preds) or "true"
