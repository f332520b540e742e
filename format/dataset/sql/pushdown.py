"""What a planned statement lets Quiver's scans do for DataFusion beyond columns and
filters, read off its optimized logical plan.

DataFusion hands a Python dataset the columns and filters it pushes down, and nothing
else: a `LIMIT` it pushes into a table scan (`TableScan ... fetch=10`) and the fetch of a
sort (`ORDER BY ... LIMIT k`) stay in its own operators, over every row the scan hands
them. When the statement scans exactly one table, `push_down` marks that table's
`QuiverTable`s with both, and each fragment group's scan stops after the fetch
(`QuiverTable.limit`) or hands over only the rows that can be among the first k
(`QuiverTable.top_k`, `format.dataset.sql.topk`). DataFusion's operators still run above
them, so the answer is the one it gives over every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quiver.format.dataset.sql.topk import top_k_of


class _Opaque(Exception):
    """A plan node DataFusion's Python bindings cannot show (one calling a Python UDF)."""


def _variant(node: Any) -> Any:
    return _readable(node.to_variant)


def _readable(read: Any, *args: Any) -> Any:
    """`read(*args)`; _Opaque when DataFusion's bindings cannot convert what it reads."""
    try:
        return read(*args)
    except Exception as e:  # DataFusion raises plain Exceptions
        if "to a Python object is not implemented" in str(e):
            raise _Opaque(str(e)) from None
        raise


def push_down(plan: Any, tables: Sequence[Any]) -> None:
    """Mark `tables` (every Quiver table the statement resolved) with the limit and the
    top-k the optimized logical `plan` allows, when it scans exactly one table (nothing
    when a node of the plan cannot be read, such as one calling the spatial functions)."""
    try:
        _push_down(plan, tables)
    except _Opaque:
        for table in tables:
            table.limit, table.top_k = None, None


def _push_down(plan: Any, tables: Sequence[Any]) -> None:
    scans = _scans(plan)
    if len(scans) != 1 or not tables:
        return
    fetch = _variant(scans[0]).fetch()
    if fetch is not None and fetch >= 0:
        for table in tables:
            table.limit = int(fetch)
    sort = _sort(plan)
    if sort is None:
        return
    variant, source = sort
    for table in tables:
        top_k = _readable(top_k_of, variant, source, table.schema)
        if top_k is None:
            return
    for table in tables:
        table.top_k = top_k


def _scans(plan: Any) -> list[Any]:
    pending, scans = [plan], []
    while pending:
        node = pending.pop()
        if type(_variant(node)).__name__ == "TableScan":
            scans.append(node)
        pending.extend(node.inputs())
    return scans


def _sort(plan: Any) -> tuple[Any, Any] | None:
    """The first sort below `plan` along single-input nodes: (its variant, its input)."""
    node = plan
    while type(variant := _variant(node)).__name__ != "Sort":
        inputs = node.inputs()
        if len(inputs) != 1 or type(variant).__name__ == "TableScan":
            return None
        node = inputs[0]
    return variant, node.inputs()[0]
