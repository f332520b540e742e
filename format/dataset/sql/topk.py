"""Top-k pushdown: `ORDER BY key LIMIT k` over one table, answered by each fragment group
with only the rows that can be among the first k.

DataFusion runs `SELECT id, value FROM t ORDER BY value DESC LIMIT 10` as a sort with a
fetch over the table's scan: every projected column of every row is decoded and handed to
it, to keep ten. It pushes such a limit into its own Parquet scans, not into a Python
dataset. So when a sort with a fetch reads straight from one Quiver table (through
projections and aliases only) and its first key is a column of a number, date, time or
duration type, `format.dataset.sql.pushdown` marks the table with a `TopK`, and each
fragment group's scan (`TopKScan`) reads the key column alone (with the filter the engine
pushed, and the row addresses), keeps the rows that can still be among the first k under a
threshold that tightens as it goes, and takes the projected columns of those rows only. The
engine's sort then runs over at most k rows per group, and gives the answer it gives over
the whole table.

The order is DataFusion's: numbers as they compare, floats in IEEE total order (a NaN with
its sign bit set first, then -inf ... -0.0, 0.0 ... inf, then NaN), nulls first or last as
the query says. Rows tied on the key are interchangeable when it is the only key (SQL leaves
the choice open); when more keys follow, every row tied at the threshold is kept for the
engine to order, and a group whose ties outgrow `MAX_TIES` rows falls back to its full scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.take import gather

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset

# the largest k pushed down: beyond it, taking the rows one by one nears a plain scan's cost
MAX_K = 10_000
# rows tied at the threshold a group keeps at most (when later keys decide among them)
MAX_TIES = 1 << 16
_SIGN = np.uint64(1 << 63)
_MAGNITUDE = np.int64(0x7FFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class TopK:
    """The first `k` rows by `column` (descending or not, nulls first or last) are all a
    query keeps of its one table; `ties`: more sort keys follow, so rows tied on `column`
    at the threshold must all be kept."""

    column: str
    descending: bool
    nulls_first: bool
    k: int
    ties: bool


def top_k_of(sort: Any, source: Any, schema: pa.Schema) -> TopK | None:
    """The `TopK` a logical sort node (`sort`, its variant) over `source` (the node it
    reads) allows for a table of `schema`: a fetch of at most `MAX_K` rows, its first key a
    copy of an orderable column of the scanned table; None otherwise."""
    k = sort.get_fetch_val()
    keys = sort.sort_exprs()
    if k is None or not 0 < k <= MAX_K or not keys:
        return None
    first = keys[0]
    name = scanned_column(source, first.expr())
    if name is None or not _orderable(schema, name):
        return None
    return TopK(name, not first.ascending(), first.nulls_first(), k, len(keys) > 1)


def scanned_column(node: Any, expr: Any) -> str | None:
    """The column of the table scan under `node` that `expr`, a column of `node`'s
    output, is a copy of, through projections and aliases; None if it is anything else."""
    column = expr.to_variant()
    if type(column).__name__ != "Column":
        return None
    relation, name = column.relation(), column.name()
    while True:
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "TableScan":
            table = variant.table_name()
            if relation not in (None, table) or name not in {n for _, n in variant.projection()}:
                return None
            return name
        if kind == "SubqueryAlias":
            if relation not in (None, variant.alias()):
                return None
            relation = None
        elif kind == "Projection":
            source = _projected(variant.projections(), relation, name)
            if source is None:
                return None
            relation, name = source
        else:
            return None
        node = node.inputs()[0]


def _projected(exprs: list[Any], relation: str | None, name: str) -> tuple[str | None, str] | None:
    """The input column a projection's output column (`relation`.`name`) copies."""
    for expr in exprs:
        variant = expr.to_variant()
        kind = type(variant).__name__
        if kind == "Alias":
            inner = variant.expr().to_variant()
            if variant.alias() == name and relation is None:
                if type(inner).__name__ != "Column":
                    return None
                return inner.relation(), inner.name()
        elif kind == "Column" and variant.name() == name:
            if relation in (None, variant.relation()):
                return variant.relation(), name
    return None


def _orderable(schema: pa.Schema, name: str) -> bool:
    """Whether a column's values map to `_scores` (numbers, dates, times, durations)."""
    if name not in schema.names:
        return False
    t = schema.field(name).type
    return (
        pa.types.is_integer(t)
        or (pa.types.is_floating(t) and t != pa.float16())
        or pa.types.is_temporal(t)
        and not pa.types.is_interval(t)
    )


def _native(values: pa.Array) -> tuple[np.ndarray, str]:
    """Non-null key values as numpy compares them: int64 ("int"), uint64 ("uint"), or a
    float's IEEE bits as int64 ("float")."""
    t = values.type
    if pa.types.is_floating(t):
        if t != pa.float64():
            values = values.cast(pa.float64())
        return values.to_numpy(zero_copy_only=False).view(np.int64), "float"
    if pa.types.is_unsigned_integer(t):
        return values.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False), "uint"
    if not pa.types.is_integer(t):  # dates, times, timestamps, durations
        values = values.view(pa.int32() if t.bit_width == 32 else pa.int64())
    return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), "int"


def _scores(native: np.ndarray, kind: str, descending: bool) -> np.ndarray:
    """uint64 scores of `_native` values, smaller first in the query's order."""
    if kind == "uint":
        scores = native
    elif kind == "int":
        scores = native.view(np.uint64) ^ _SIGN
    else:  # IEEE total order as a signed integer: negative floats' magnitude bits flipped
        ordered = native ^ ((native >> 63) & _MAGNITUDE)
        scores = ordered.view(np.uint64) ^ _SIGN
    return ~scores if descending else scores


def _within(native: np.ndarray, kind: str, descending: bool, bound: np.uint64) -> np.ndarray:
    """Positions of the values whose score is at most `bound`, compared in the values' own
    domain where one comparison decides (every number type; floats when the bound is not
    negative), else through their scores."""
    score = np.array([bound], np.uint64)
    if descending:
        score = ~score
    if kind == "uint":
        limit = score
    else:
        limit = (score ^ _SIGN).view(np.int64)
        if kind == "float":
            limit = limit ^ ((limit >> 63) & _MAGNITUDE)  # the bound's own bits
            if limit[0] < 0:  # negative floats order against their bits: no one comparison
                return np.flatnonzero(_scores(native, kind, descending) <= bound)
    return np.flatnonzero(native >= limit[0] if descending else native <= limit[0])


class _TooManyTies(Exception):
    """More rows tie at the threshold than a group keeps."""


class _Best:
    """The rows of one group that can still be among the first k: values by score, and
    null rows (which all tie)."""

    def __init__(self, top_k: TopK) -> None:
        self.top_k = top_k
        self.scores = np.empty(0, np.uint64)
        self.rows = np.empty(0, np.uint64)
        self.nulls = np.empty(0, np.uint64)
        self.threshold: np.uint64 | None = None  # the k-th best score kept, once k are

    def add(self, keys: pa.Array, rows: np.ndarray | int) -> None:
        """Consider a step's rows: their keys and addresses (an array, or the first
        address of consecutive rows)."""
        if keys.null_count:
            valid = keys.is_valid().to_numpy(zero_copy_only=False)
            rows = _addresses(rows, len(keys))
            self._add_nulls(rows[~valid])
            keys, rows = keys.filter(pa.array(valid)), rows[valid]
        wanted = self._wanted()
        if wanted <= 0 or not len(keys):
            return
        native, kind = _native(keys)
        descending = self.top_k.descending
        bound = self.threshold
        if bound is None and len(native) > 64 * wanted:
            # a bound from a sample: its `wanted`-th best is no better than the step's
            sample = _scores(native[:: len(native) // (32 * wanted)], kind, descending)
            bound = np.partition(sample, wanted - 1)[wanted - 1]
        if bound is None:
            keep = np.arange(len(native))
        else:
            keep = _within(native, kind, descending, bound)
        scores = _scores(native[keep], kind, descending)
        if isinstance(rows, int):
            rows = np.uint64(rows) + keep.astype(np.uint64)
        else:
            rows = rows[keep]
        self.scores = np.concatenate([self.scores, scores])
        self.rows = np.concatenate([self.rows, rows])
        self._prune(wanted)

    def _wanted(self) -> int:
        """How many value rows can still be among the first k (nulls first take places)."""
        if self.top_k.nulls_first:
            return self.top_k.k - len(self.nulls)
        return self.top_k.k

    def _add_nulls(self, rows: np.ndarray) -> None:
        top_k = self.top_k
        if not len(rows) or (not top_k.nulls_first and len(self.scores) >= top_k.k):
            return  # nulls last: no room left before them
        self.nulls = np.concatenate([self.nulls, rows])
        if not top_k.ties:
            self.nulls = self.nulls[: top_k.k]  # all tie: any k of them
        elif len(self.nulls) > MAX_TIES:
            raise _TooManyTies
        if top_k.nulls_first and len(self.nulls) >= top_k.k:
            self.scores = self.rows = np.empty(0, np.uint64)  # nulls fill every place

    def _prune(self, wanted: int) -> None:
        if len(self.scores) < wanted:
            return
        kth = np.partition(self.scores, wanted - 1)[wanted - 1]
        keep = self.scores <= kth
        if not self.top_k.ties:
            ties = np.flatnonzero(self.scores == kth)
            surplus = int(keep.sum()) - wanted
            if surplus > 0:
                keep[ties[len(ties) - surplus :]] = False
        elif int(keep.sum()) > wanted + MAX_TIES:
            raise _TooManyTies
        self.scores, self.rows = self.scores[keep], self.rows[keep]
        self.threshold = kth
        if not self.top_k.nulls_first:
            self.nulls = np.empty(0, np.uint64)  # k values come before any null

    def addresses(self) -> np.ndarray:
        return np.sort(np.concatenate([self.rows, self.nulls]))


def _addresses(rows: np.ndarray | int, n: int) -> np.ndarray:
    if isinstance(rows, int):
        return np.arange(rows, rows + n, dtype=np.uint64)
    return rows


class TopKScan:
    """One fragment group's rows that can be among a `TopK`'s first k (see the module
    doc); `fallback` streams the group's full scan when ties outgrow `MAX_TIES`."""

    def __init__(
        self,
        ds: LanceDataset,
        fragments: Sequence[LanceFragment],
        columns: Sequence[str] | None,
        filter: pc.Expression | None,
        step_bytes: int,
        top_k: TopK,
        fallback: Callable[[], Iterator[pa.RecordBatch]],
    ) -> None:
        self._ds = ds
        self._fragments = list(fragments)
        self._columns = list(columns) if columns is not None else None
        self._filter = filter
        self._step_bytes = step_bytes
        self._top_k = top_k
        self._fallback = fallback
        self._projected = Scanner(ds.core, self._fragments, columns=self._columns).projected_schema

    @property
    def projected_schema(self) -> pa.Schema:
        return self._projected

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        best = _Best(self._top_k)
        try:
            for fragment in self._fragments:
                self._consider(fragment, best)
        except _TooManyTies:
            yield from self._fallback()
            return
        yield from self._take(best.addresses())

    def _consider(self, fragment: LanceFragment, best: _Best) -> None:
        """Hand a fragment's keys to `best`, with their rows' addresses (counted, not read,
        where every row of the fragment comes in order: no filter, no deletions)."""
        counted = self._filter is None and fragment.live_mask is None
        keys = Scanner(
            self._ds.core,
            [fragment],
            columns=[self._top_k.column],
            filter=self._filter,
            with_row_address=not counted,
            fragment_readahead=1,
        )
        address = fragment.fragment_id << 32
        for step in keys.to_step_batches(self._step_bytes):
            if counted:
                best.add(step.column(0), address)
                address += step.num_rows
            else:
                best.add(step.column(0), step.column(1).to_numpy().astype(np.uint64))

    def _take(self, addresses: np.ndarray) -> Iterator[pa.RecordBatch]:
        if not len(addresses):
            return
        ids = np.array([f.fragment_id for f in self._fragments], dtype=np.int64)
        order = np.argsort(ids)
        wanted = (addresses >> np.uint64(32)).astype(np.int64)
        which = order[np.searchsorted(ids[order], wanted)]
        physical = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
        table = gather(self._ds.core, self._fragments, which, physical, self._columns, False, False)
        yield from table.to_batches()
