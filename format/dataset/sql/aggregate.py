"""pylance's `substrait_aggregate`: a Substrait plan's AggregateRel run over a scan's rows.

    plan = ScannerBuilder(ds).filter("x > 1").substrait_aggregate(plan_bytes).to_scanner()
    table = plan.to_table()

The plan's root (a RelRoot's input, or a bare Rel) must be an AggregateRel, as pylance
requires, and its input is ignored. The aggregate's field references index the columns of
the scan's rows whatever the scan projects: the dataset's columns, then a search's
`_distance` or `_score`. The scan's filter, fragments and search decide the rows; its
limit and offset are refused, as pylance refuses them.

The aggregate's input becomes a read of only the columns it references (each reference
renumbered): for a plain scan a `QuiverTable` whose view holds those columns and the
filter's rows, which the engine reads through Quiver's scans, a partition per core; for a
search (a few rows) or a scan of deleted rows, its answers. DataFusion consumes the plan.
The root's names, when it has them, name the group keys then the measures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.sql.query import PARTITIONS, SqlQuery, engine_context, first_line
from quiver.format.dataset.sql.table import QuiverTable, View
from quiver.format.errors import InvalidInputError

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset
    from quiver.format.dataset.fragment import LanceFragment

# the aggregate's input in the engine (its name never reaches the results' column names)
TABLE = "lance_scan"


class AggregateScan:
    """The rows of a scan, aggregated by a Substrait plan: pylance's scanner with
    `substrait_aggregate`. `source(columns)` plans the scan of those columns (all with
    None); `view` is how a plain scan's table shows the dataset (its filter as `where`), of
    its `fragments` (None: all)."""

    def __init__(
        self,
        ds: LanceDataset,
        plan: bytes,
        source: Callable[[list[str] | None], Any],
        view: View,
        fragments: list[LanceFragment] | None = None,
    ) -> None:
        body, aggregate, names = _aggregate_of(ds.uri, plan)
        whole = source(None)
        base = ds.schema.names if isinstance(whole, Scanner) else whole.projected_schema.names
        needed = _renumber(ds.uri, aggregate, base)
        context = engine_context()
        scan = source(needed)
        table = None
        if isinstance(scan, Scanner):  # streamed through the engine's partitions
            view = replace(view, columns=tuple(needed))
            table = QuiverTable(ds, TABLE, PARTITIONS, view=view, fragments=fragments)
            context.register_dataset(TABLE, table)
        else:  # a search's answers, or deleted rows too: what it yields, in memory
            rows = scan.to_table()
            context.register_record_batches(TABLE, [rows.select(needed).to_batches()])
        self._scan = scan
        try:
            aggregate["input"] = _read_of(context)
            from datafusion.substrait import Consumer, Plan

            root: dict[str, Any] = {"input": {"aggregate": aggregate}}
            if names:
                root["names"] = names
            keep = ("extensionUris", "extensionUrns", "extensions", "version")
            body = {"relations": [{"root": root}], **{k: body[k] for k in keep if k in body}}
            logical = Consumer.from_substrait_plan(context, Plan.from_json(json.dumps(body)))
            frame = context.create_dataframe_from_logical_plan(logical)
            if not names:  # the engine's names, without the input's table
                for name in frame.schema().names:
                    if f"{TABLE}." in name:
                        frame = frame.with_column_renamed(name, name.replace(f"{TABLE}.", ""))
            schema = frame.schema()
        except InvalidInputError:
            raise
        except Exception as e:  # DataFusion raises plain Exceptions
            raise InvalidInputError(f"{ds.uri}: substrait_aggregate: {first_line(e)}") from None
        self._frame = frame
        self._query = SqlQuery(ds.uri, "substrait_aggregate", frame, schema, None, None, table)

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the aggregate's results."""
        return self._query.schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The aggregate's results, computed as they are read."""
        return iter(self._query.to_stream_reader())

    def to_reader(self) -> pa.RecordBatchReader:
        return self._query.to_stream_reader()

    def to_table(self) -> pa.Table:
        return self._query.to_stream_reader().read_all()

    def count_rows(self) -> int:
        """The rows the aggregate reads (pylance's answer for a scanner with one)."""
        return self._scan.count_rows()

    def explain_plan(self, verbose: bool = False) -> str:
        """The engine's plan of the aggregate, over Quiver's scan of its input."""
        plan = self._frame.execution_plan().display_indent()
        return f"SubstraitAggregate\n{plan}\n{self._scan.explain_plan(verbose)}"


def _aggregate_of(uri: str, plan: bytes) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """A serialized plan as JSON, the AggregateRel at its root and the root's names."""
    if not isinstance(plan, bytes | bytearray | memoryview):
        raise InvalidInputError(
            f"{uri}: substrait_aggregate takes a serialized Substrait plan, not "
            f"{type(plan).__name__}"
        )
    body = _plan_json(uri, bytes(plan))
    relations = body.get("relations") or []
    if not relations:
        raise InvalidInputError(f"{uri}: substrait_aggregate: the Substrait plan has no relations")
    first = relations[0]
    root = first.get("root")
    rel = root.get("input") if isinstance(root, dict) else first.get("rel")
    kind = next(iter(rel), None) if isinstance(rel, dict) else None
    if kind != "aggregate":
        raise InvalidInputError(
            f"{uri}: substrait_aggregate needs an AggregateRel at the plan's root, "
            f"not {'a ' + kind + ' relation' if kind else 'nothing'}"
        )
    names = list(root.get("names", [])) if isinstance(root, dict) else []
    return body, rel["aggregate"], names


def _plan_json(uri: str, plan: bytes) -> dict[str, Any]:
    from datafusion.substrait import Serde

    try:
        return json.loads(Serde.deserialize_bytes(plan).to_json())
    except Exception:  # noqa: BLE001 - protobuf's errors, whatever they are
        raise InvalidInputError(
            f"{uri}: substrait_aggregate: the bytes are not a Substrait plan"
        ) from None


def _references(node: Any) -> Iterator[dict[str, Any]]:
    """The `structField` of every reference to a column of the input in `node`."""
    if isinstance(node, dict):
        selection = node.get("selection")
        if isinstance(selection, dict) and "rootReference" in selection:
            field = selection.get("directReference", {}).get("structField")
            if isinstance(field, dict):
                yield field
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)


def _renumber(uri: str, aggregate: dict[str, Any], base: list[str]) -> list[str]:
    """The columns of `base` the aggregate reads, in order; its references renumbered to
    index them."""
    aggregate.pop("input", None)
    fields = list(_references(aggregate))
    used = sorted({int(f.get("field", 0)) for f in fields})
    if used and (used[0] < 0 or used[-1] >= len(base)):
        bad = used[-1] if used[-1] >= len(base) else used[0]
        raise InvalidInputError(
            f"{uri}: substrait_aggregate refers to field {bad}; the scan's rows have "
            f"{len(base)} columns ({', '.join(base)})"
        )
    at = {old: new for new, old in enumerate(used)}
    for f in fields:
        f["field"] = at[int(f.get("field", 0))]
    return [base[i] for i in used]


def _read_of(context: Any) -> dict[str, Any]:
    """The Substrait read of the engine's input table, as DataFusion writes it."""
    from datafusion.substrait import Producer

    plan = Producer.to_substrait_plan(
        context.sql(f'SELECT * FROM "{TABLE}"').logical_plan(), context
    )
    rel = json.loads(plan.to_json())["relations"][0]["root"]["input"]
    while "read" not in rel:
        rel = next(iter(rel.values()))["input"]
    return rel
