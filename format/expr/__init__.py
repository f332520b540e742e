"""pylance-style SQL filter strings -> `pyarrow.compute.Expression`.

    compiled = compile_filter("x > 5 AND s LIKE 'a%' AND id IN (1, 2)", table.schema)
    table.filter(compiled.expression)          # or apply_filter(batch, compiled)

Parsing is sqlglot's (in pylance's dialect: backtick identifiers, double-quoted strings);
typing and semantics follow pylance 14 / DataFusion: literals are converted to the column
type they are compared with (or rejected), NULL comparisons are NULL, float comparisons
use total order (NaN = NaN and above every number, see `floats`) and rows whose predicate
is NULL are dropped. Where pylance would fail on a zero integer divisor or an out-of-range
integer CAST in a row, a filter sees NULL instead; a value expression fails, as pylance's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import FilterBindError, FilterSyntaxError, InvalidInputError
from quiver.format.expr.arrow_expr import expression_to_sql
from quiver.format.expr.bind import Binder
from quiver.format.expr.parse import describe_filter, parse_filter
from quiver.format.expr.plan import Plan, evaluate, evaluate_column, project
from quiver.format.expr.types import TypeRuleError
from quiver.format.expr.values import (
    CompiledExpression,
    compile_expression,
    describe_data_error,
    evaluate_expressions,
)

__all__ = [
    "CompiledExpression",
    "CompiledFilter",
    "apply_filter",
    "compile_expression",
    "compile_filter",
    "evaluate_expressions",
    "evaluate_filter",
    "expression_to_sql",
    "matching_rows",
]

_Data = TypeVar("_Data", pa.Table, pa.RecordBatch)


@dataclass(frozen=True)
class CompiledFilter:
    """A filter bound to a schema: the Arrow expression and the top-level columns it reads."""

    expression: pc.Expression
    columns: list[str] = field(default_factory=list)
    sql: str = ""
    # how to evaluate it: `expression` alone, or in stages where a term could fail
    plan: Plan | None = None
    # operations that fail on an arithmetic overflow, as pylance's do (named when one does)
    checked: tuple[str, ...] = ()


# Filters up to this long are compiled once per (filter, schema, dataset): a server plans
# and streams each endpoint of a read with the same filter, and compiling costs ~0.7 ms.
_CACHED_FILTER_CHARS = 4096


def compile_filter(sql: str, schema: pa.Schema, *, dataset: str | None = None) -> CompiledFilter:
    """Compile a pylance SQL filter against `schema`; raises FilterSyntaxError/FilterBindError."""
    if isinstance(sql, str) and len(sql) <= _CACHED_FILTER_CHARS:
        try:
            hash(schema)
        except TypeError:  # an extension type (a blob column) need not be hashable
            return _compile(sql, schema, dataset)
        return _compile_cached(sql, schema, dataset)
    return _compile(sql, schema, dataset)


@lru_cache(maxsize=256)
def _compile_cached(sql: str, schema: pa.Schema, dataset: str | None) -> CompiledFilter:
    return _compile(sql, schema, dataset)


def _compile(sql: str, schema: pa.Schema, dataset: str | None) -> CompiledFilter:
    node = parse_filter(sql, dataset=dataset)
    binder = Binder(sql, schema, dataset)
    try:
        bound = binder.bind_root(node)
    except (FilterSyntaxError, FilterBindError):
        raise
    except RecursionError:
        raise FilterSyntaxError(
            f"{describe_filter(sql, dataset)} is too deeply nested to compile"
        ) from None
    except (TypeRuleError, pa.ArrowException, TypeError, ValueError, KeyError) as e:
        raise FilterBindError(f"{describe_filter(sql, dataset)}: {e}") from None
    except (AttributeError, IndexError) as e:  # a syntax tree shape the binder does not know
        raise FilterSyntaxError(
            f"{describe_filter(sql, dataset)}: unsupported construct ({type(e).__name__}: {e})"
        ) from None
    columns = [name for name in schema.names if name in binder.columns]
    return CompiledFilter(
        expression=bound.expression(),
        columns=columns,
        sql=sql,
        plan=bound.plan,
        checked=tuple(dict.fromkeys(binder.checked_ops)),
    )


def apply_filter(data: _Data, compiled: CompiledFilter, keep: list[str] | None = None) -> _Data:
    """Keep the rows of a table or batch where the filter is TRUE (NULL and FALSE drop);
    with `keep`, only those columns are kept (and filtered: a column the filter reads but
    the caller drops is not copied, and with no column kept only the count is taken).

    Errors that only show when evaluating (a string that does not parse in a CAST, a NaN
    compared with a decimal) become InvalidInputError naming the filter.
    """
    try:
        mask = evaluate_filter(data, compiled)
        if keep is not None:
            data = data.select(keep)
            if not keep:  # rows without columns: only how many match
                if isinstance(mask, pa.ChunkedArray):
                    mask = mask.combine_chunks()
                return data.slice(0, mask.true_count)
        return data.filter(mask)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise _failed(compiled, e) from None


def matching_rows(data: _Data, compiled: CompiledFilter) -> tuple[_Data, np.ndarray]:
    """`apply_filter`, and the positions in `data` of the rows it keeps (int64), for
    callers that locate the matches elsewhere (a late-materialising scan)."""
    try:
        mask = evaluate_filter(data, compiled)
        positions = true_positions(mask)
        if len(positions) == 0:
            return data.slice(0, 0), positions
        return data.filter(mask), positions
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise _failed(compiled, e) from None


def true_positions(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The positions (int64, ascending) of a boolean array's TRUE values; NULL is not TRUE.

    Read off the bitmap with numpy: a step where the filter keeps nothing costs a popcount,
    one keeping a few rows a scan of its bytes (Arrow's `indices_nonzero` visits every row,
    as long as the comparison that made the mask)."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    n = len(mask)
    if mask.null_count:
        mask = pc.fill_null(mask, False)
    count = mask.true_count
    if count == 0:
        return np.empty(0, np.int64)
    if count == n:
        return np.arange(n, dtype=np.int64)
    first = mask.offset
    data = np.frombuffer(mask.buffers()[1], np.uint8)[first // 8 : (first + n + 7) // 8]
    if count * 16 < n:  # sparse: unpack only the bytes that hold a TRUE
        nz = np.flatnonzero(data)
        bits = np.unpackbits(data[nz, None], axis=1, bitorder="little").view(np.bool_)
        pos = (nz[:, None] * 8 + np.arange(8))[bits]
    else:
        pos = np.flatnonzero(np.unpackbits(data, bitorder="little"))
    pos = pos.astype(np.int64, copy=False) - first % 8
    # bits before the array's offset and past its end are not the array's
    return pos[(pos >= 0) & (pos < n)]


def _failed(compiled: CompiledFilter, e: pa.ArrowException) -> InvalidInputError:
    return InvalidInputError(
        f"{describe_filter(compiled.sql, None)} failed on the data: "
        f"{describe_data_error(e, compiled.checked)}"
    )


def evaluate_filter(data: pa.Table | pa.RecordBatch, compiled: CompiledFilter) -> pa.Array:
    """The filter's boolean value for every row (one array), each AND / OR term that could
    fail evaluated only on the rows the terms before it leave undecided, as pylance does."""
    if compiled.plan is None:
        return project(data, compiled.expression)
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    return evaluate(compiled.plan, table)


def filter_mask(data: pa.Table | pa.RecordBatch, expression: pc.Expression) -> pa.Array:
    """The boolean value of `expression` for every row, computed in the calling thread (a
    chunked array for a table)."""
    mask = evaluate_column(data, expression)
    if isinstance(data, pa.Table):
        return mask
    return mask.chunk(0) if mask.num_chunks == 1 else mask.combine_chunks()
