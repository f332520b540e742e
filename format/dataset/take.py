"""Taking rows: by position among a version's live rows (`take`), by row id
(`take_rows`, pylance's `_take_rows`) and by position within one fragment (the fragment's
`take`), all gathered the same way: each fragment's rows decoded once, in offset order,
then put in the order asked for, with pylance's projections (lists of columns, nested
paths, row id and system columns, or dicts of SQL projections)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.scan import ROW_ADDRESS_FIELD, ROW_COLUMNS, Scanner
from quiver.format.dataset.system_columns import ROW_OFFSET, SYSTEM_FIELDS
from quiver.format.errors import InvalidInputError
from quiver.format.expr import evaluate_expressions
from quiver.format.numeric import unique_sorted
from quiver.format.table.schema import LanceSchema, path_parts

if TYPE_CHECKING:  # fragments import this module to take their own rows
    from quiver.format.dataset.fragment import LanceFragment

Columns = Sequence[str] | dict[str, str] | None
Indices = Sequence[int] | np.ndarray | pa.Array


def take(
    core: DatasetCore,
    frags: Sequence[LanceFragment],
    indices: Indices,
    columns: Columns = None,
    with_row_id: bool = False,
    with_row_address: bool = False,
) -> pa.Table:
    """Rows by position among the live rows of the version (whose fragments are `frags`),
    in the order given."""
    idx = check_indices(indices, "take indices")
    counts = np.array([f.count_rows() for f in frags], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    total = int(starts[-1])
    if idx.size and idx.max() >= total:
        raise InvalidInputError(
            f"{core.uri} version {core.version}: take index {int(idx.max())} out of range "
            f"for {total} rows"
        )
    which = np.searchsorted(starts, idx, side="right") - 1
    physical = np.empty(len(idx), np.int64)
    for fi in unique_sorted(which):
        sel = which == fi
        physical[sel] = _physical(frags[int(fi)], idx[sel] - starts[fi])
    return gather(core, frags, which, physical, columns, with_row_id, with_row_address)


def take_from_fragment(frag: LanceFragment, indices: Indices, columns: Columns = None) -> pa.Table:
    """Rows of one fragment by position among its live rows, in the order given."""
    idx = check_indices(indices, "take indices")
    live = frag.count_rows()
    if idx.size and idx.max() >= live:
        raise InvalidInputError(
            f"fragment {frag.fragment_id}: take index {int(idx.max())} out of range for its "
            f"{live} live rows"
        )
    which = np.zeros(len(idx), np.int64)
    return gather(frag._core, [frag], which, _physical(frag, idx), columns, False, False)


def take_rows(
    core: DatasetCore,
    frags: Sequence[LanceFragment],
    row_ids: Indices,
    columns: Columns = None,
    with_row_id: bool = False,
    with_row_address: bool = False,
) -> pa.Table:
    """Rows by row id (stable row ids, else row addresses), in the order given; ids of
    deleted or missing rows are left out, as pylance's `_take_rows` does."""
    ids = check_indices(row_ids, "row ids").astype(np.uint64)
    if core.manifest.uses_stable_row_ids:
        which = np.full(len(ids), -1, np.int64)
        physical = np.zeros(len(ids), np.int64)
        for fi, frag in enumerate(frags):
            stored = frag.row_ids
            if stored is None or not len(stored):
                continue
            order = np.argsort(stored, kind="stable")
            offsets = order[np.minimum(np.searchsorted(stored, ids, sorter=order), len(order) - 1)]
            hit = (stored[offsets] == ids) & (which < 0)
            if frag.live_mask is not None:
                hit &= frag.live_mask[offsets]
            which[hit], physical[hit] = fi, offsets[hit]
    else:
        which, physical = _by_address(frags, ids)
    keep = which >= 0
    return gather(core, frags, which[keep], physical[keep], columns, with_row_id, with_row_address)


def take_addresses(
    core: DatasetCore, frags: Sequence[LanceFragment], addresses: Indices, columns: Columns = None
) -> pa.Table:
    """Rows by row address (fragment id << 32 | offset), in the order given, with their
    `_rowaddr`; addresses of deleted or missing rows are left out."""
    addrs = check_indices(addresses, "row addresses").astype(np.uint64)
    which, physical = _by_address(frags, addrs)
    keep = which >= 0
    return gather(core, frags, which[keep], physical[keep], columns, False, True)


def _by_address(frags: Sequence[LanceFragment], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fragment index, physical offset) of each row address; -1 where no live row is."""
    which = np.full(len(ids), -1, np.int64)
    physical = np.zeros(len(ids), np.int64)
    by_id = {f.fragment_id: i for i, f in enumerate(frags)}
    fids = (ids >> np.uint64(32)).astype(np.int64)
    offsets = (ids & np.uint64(0xFFFFFFFF)).astype(np.int64)
    for fid in unique_sorted(fids):
        fi = by_id.get(int(fid))
        if fi is None:
            continue
        sel = np.flatnonzero(fids == fid)
        frag = frags[fi]
        ok = offsets[sel] < frag.physical_rows
        if frag.live_mask is not None:
            ok &= frag.live_mask[np.minimum(offsets[sel], frag.physical_rows - 1)]
        which[sel[ok]], physical[sel[ok]] = fi, offsets[sel[ok]]
    return which, physical


def _physical(frag: LanceFragment, live: np.ndarray) -> np.ndarray:
    """Physical offsets of a fragment's `live`-th live rows."""
    mask = frag.live_mask
    return live if mask is None else np.flatnonzero(mask)[live]


def take_in_order(table: pa.Table, positions: pa.Array) -> pa.Table:
    """`table.take(positions)`, but dictionary columns whose chunks have different dictionaries are
    decoded, taken and re-encoded (Arrow can't unify dictionaries holding nulls), as pylance
    returns them."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type) and _several_dictionaries(column):
            values = column.cast(field.type.value_type).take(positions)
            column = values.dictionary_encode().cast(field.type)
        else:
            column = column.take(positions)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _pruned_projection(
    schema: LanceSchema, columns: Sequence[str]
) -> tuple[LanceSchema, list[str]]:
    """The top-level columns `columns` name (directly or by a path into a struct), each
    pruned to what was named, in order of first mention; and the output column names
    (row id columns included)."""
    keep: dict[str, set[int] | None] = {}  # top-level column -> ids kept (None: all)
    names: list[str] = []
    for c in columns:
        top, wanted = c, None
        if c not in schema.names and c not in ROW_COLUMNS and c not in SYSTEM_FIELDS:
            top, *path = path_parts(c)  # checked by the scanner: it parses
            field = schema.field(top)
            for part in path:
                field = next(ch for ch in field.children if ch.name == part)
            wanted = {g.id for g in field.walk()}
        if top not in names:
            names.append(top)
        if top not in schema.names:
            continue  # a row id column: not read from the data files
        kept = keep.get(top, set())
        keep[top] = None if wanted is None or kept is None else kept | wanted
    fields = [
        schema.field(top) if ids is None else schema.field(top).project_ids(ids)
        for top, ids in keep.items()
    ]
    return LanceSchema(fields, schema.metadata), names


def column_at(table: pa.Table, column: str) -> pa.ChunkedArray:
    """The values of `column` in a table read with its `path_projection`: a top-level
    column, or a field nested in structs named by its path (null under a null parent)."""
    if column in table.column_names:
        return table.column(column)
    top, *path = path_parts(column)
    values = table.column(top)
    for name in path:
        values = pc.struct_field(values, name)
    return values


def check_indices(values: Sequence[int] | np.ndarray | pa.Array, what: str) -> np.ndarray:
    """Non-negative integer positions or ids as int64 (InvalidInputError otherwise)."""
    idx = np.asarray(values.to_numpy() if isinstance(values, pa.Array) else values)
    if idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0):
        raise InvalidInputError(f"{what} must be non-negative integers")
    return idx.astype(np.int64, copy=False)


def gather(
    core: DatasetCore,
    frags: Sequence[LanceFragment],
    which: np.ndarray,
    physical: np.ndarray,
    columns: Sequence[str] | dict[str, str] | None,
    with_row_id: bool,
    with_row_address: bool,
) -> pa.Table:
    """The rows at (fragment position `which`, physical offset) pairs, in that order, with
    the projection pylance's take gives (`columns` a list, or a dict of SQL projections):
    row id and system columns included (`_rowoffset` never null there, as in pylance)."""
    # the scanner's plan: projection, row id columns (asked for or named in `columns`)
    scanner = Scanner(
        core, frags, columns=columns, with_row_id=with_row_id, with_row_address=with_row_address
    )
    schema = scanner.projected_schema
    projection, read_schema = scanner._projection, scanner._schema
    with_row_id, with_row_address = scanner._with_row_id, scanner._with_row_address
    if scanner._paths:
        # as pylance: a nested field named by path comes back inside its top-level
        # column, pruned to the fields asked for (in schema order)
        projection, names = _pruned_projection(core.lance_schema, columns or [])
        base = projection.to_arrow(blob_descriptions=True)
        extra = [f for f in scanner._schema if f.name in ROW_COLUMNS]
        read_schema = pa.schema(list(base) + extra, metadata=base.metadata)
        schema = pa.schema(
            [SYSTEM_FIELDS[n] if n in SYSTEM_FIELDS else read_schema.field(n) for n in names],
            metadata=base.metadata,
        )
    if ROW_OFFSET in schema.names:
        at = schema.get_field_index(ROW_OFFSET)
        schema = schema.set(at, schema.field(at).with_nullable(False))
    pieces: list[pa.RecordBatch] = []
    order: list[np.ndarray] = []
    for fi in unique_sorted(which):
        sel = np.flatnonzero(which == fi)
        uniq, inverse = np.unique(physical[sel], return_inverse=True)
        batch = frags[int(fi)].take_physical(
            projection,
            read_schema,
            uniq.astype(np.uint64),
            with_row_id=with_row_id,
            with_row_address=with_row_address,
        )
        pieces.append(batch.take(pa.array(inverse)))
        order.append(sel)
    if not pieces:
        if scanner._transforms is not None:
            return scanner.projected_schema.empty_table()
        return schema.empty_table()
    table = pa.Table.from_batches(pieces, schema=read_schema)
    positions = np.empty(len(which), dtype=np.int64)
    positions[np.concatenate(order)] = np.arange(len(which))
    table = take_in_order(table, pa.array(positions))
    if scanner._system:
        addresses = table.column(ROW_ADDRESS_FIELD.name).to_numpy()
        arrays = scanner._system_columns.arrays(addresses, scanner._system)
        for name, array in zip(scanner._system, arrays, strict=True):
            table = table.append_column(name, array)
    if scanner._transforms is not None:
        return pa.Table.from_batches([evaluate_expressions(table, scanner._transforms)])
    return pa.Table.from_arrays([table.column(n) for n in schema.names], schema=schema)


def _several_dictionaries(column: pa.ChunkedArray) -> bool:
    """Whether the chunks of a dictionary column have different dictionaries."""
    first = column.chunks[0].dictionary if column.num_chunks else None
    return any(not c.dictionary.equals(first) for c in column.chunks[1:])
