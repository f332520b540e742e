"""Backfills ("data evolution"): values of new or existing columns for the rows a dataset
already has, written beside its data files (none is rewritten), one version each.

- `add_columns_udf`: new columns computed by a Python function of each batch of rows
  (pylance's `add_columns(func, read_columns)`, also `lance.batch_udf` functions);
- `merge_columns`: new columns joined on a key (pylance's `LanceDataset.merge`): every
  row takes the values of the source row whose `right_on` equals its `left_on` (the last
  such row; NULL when none);
- `add_columns_by_address`: new columns given per row address (a source holding
  `_rowaddr`, as a Spark job computes them from a read of `_rowaddr`); rows the source
  does not name are NULL;
- `update_columns_by_address`: new values of existing columns per row address, the
  other rows keeping theirs. Each touched fragment gets one new data file holding those
  columns for all its rows, the old files' copies become tombstones (field id -2), and one
  `Update` in mode REWRITE_COLUMNS (fields_modified the columns' ids) commits them, as
  pylance's column-rewriting merge_insert does; row addresses do not change, and indices
  on those columns stop covering the touched fragments.

The first three commit a `Merge` of every fragment, each with one new data file of the
new columns, aligned with its physical rows (deleted rows hold NULL, or zero where NULL
is not allowed), as pylance's add_columns does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.evolution import (
    TOMBSTONE,
    FileSet,
    commit_body,
    filler_row,
    new_fields,
    read_live,
    to_physical,
    write_new_columns,
)
from quiver.format.dataset.fragment import LanceFragment, fragments_of
from quiver.format.dataset.row_changes import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    run_with_retries,
)
from quiver.format.dataset.write import conform_batch, to_reader
from quiver.format.errors import (
    ColumnNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from quiver.format.file.base import DEFAULT_BATCH_SIZE
from quiver.format.proto import table_pb2, transaction_pb2

__all__ = [
    "ROW_ADDRESS",
    "names_rows",
    "add_columns_by_address",
    "add_columns_udf",
    "merge_columns",
    "update_columns_by_address",
]

ROW_ADDRESS = "_rowaddr"
_LOW32 = np.uint64(0xFFFFFFFF)


# ------------------------------------------------------------------------- a function


def _udf_batch(out: Any, where: str) -> pa.RecordBatch:
    if isinstance(out, pa.Table):
        out = out.combine_chunks().to_batches()
        out = out[0] if len(out) == 1 else pa.concat_batches(out)
    if isinstance(out, pa.RecordBatch):
        return out
    try:
        import pandas as pd

        if isinstance(out, pd.DataFrame):
            return pa.RecordBatch.from_pandas(out, preserve_index=False)
    except ImportError:
        pass
    raise InvalidInputError(
        f"{where}: the add_columns function must return a RecordBatch (or a table), not "
        f"{type(out).__name__}"
    )


def add_columns_udf(
    core: DatasetCore,
    func: Callable[[pa.RecordBatch], Any],
    read_columns: Sequence[str] | None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> DatasetCore:
    """New columns computed by `func` from each batch of live rows (of `read_columns`,
    default every column). Their schema is `func.output_schema` when it has one (as
    `lance.batch_udf` gives), else that of the first batch it returns."""
    where = f"{core.uri}: add_columns"
    names = list(read_columns) if read_columns is not None else list(core.schema.names)
    for n in names:
        if n not in core.schema.names:
            raise ColumnNotFoundError(f"{where}: read column {n!r} is not in the dataset")
    projection = core.lance_schema.project(names, dataset=core.uri)
    frags = fragments_of(core)
    declared = getattr(func, "output_schema", None)
    first: list[pa.RecordBatch] = []
    if isinstance(declared, pa.Schema):
        target = declared
    else:
        for frag in frags:
            for _keep, batch in read_live(frag, projection, batch_size):
                if batch.num_rows:
                    first.append(_udf_batch(func(batch), where))
                    break
            if first:
                break
        if not first:
            raise InvalidInputError(
                f"{where}: the dataset has no rows to learn the new columns from"
            )
        target = first[0].schema
    new = new_fields(core, target)
    arrow = new.to_arrow()
    filler = filler_row(arrow)

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        for keep, batch in read_live(frag, projection, batch_size):
            live = batch.num_rows
            if not live:
                out = filler.slice(0, 0)
            elif first:
                out = first.pop()  # the first batch, already computed for the schema
            else:
                out = _udf_batch(func(batch), where)
            if out.num_rows != live:
                raise InvalidInputError(
                    f"{where}: the function returned {out.num_rows} rows for a batch of {live}"
                )
            yield to_physical(conform_batch(out, arrow, core.uri), keep, filler)

    return write_new_columns(core, new, per_fragment)


# ------------------------------------------------------------------------- a key join


def merge_columns(
    core: DatasetCore,
    data: Any,
    left_on: str,
    right_on: str | None = None,
    *,
    schema: pa.Schema | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> DatasetCore:
    """The source's other columns joined to every row on `left_on` = `right_on`."""
    right_on = right_on or left_on
    where = f"{core.uri}: merge"
    if left_on not in core.schema.names:
        raise ColumnNotFoundError(f"{where}: left_on {left_on!r} is not a column of the dataset")
    source = to_reader(data, schema).read_all()
    if right_on not in source.column_names:
        raise ColumnNotFoundError(f"{where}: right_on {right_on!r} is not a column of the data")
    for n in source.column_names:
        if n != right_on and n in core.schema.names:
            raise InvalidInputError(f"{where}: Column {n} exists in both sides of the dataset")
    values = source.drop_columns([right_on])
    new = new_fields(core, values.schema)
    arrow = new.to_arrow()
    filler = filler_row(arrow)
    key_type = core.schema.field(left_on).type
    try:
        keys = source.column(right_on).cast(key_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(
            f"{where}: right_on {right_on!r} does not fit {key_type}: {e}"
        ) from None
    # the last source row of a key wins, as in pylance
    numbered = pa.table({"k": keys, "__row": pa.array(np.arange(source.num_rows))})
    last = numbered.group_by("k").aggregate([("__row", "max")])
    lookup = pa.table({"k": last.column("k"), "__row": last.column("__row_max")})
    values = pa.Table.from_batches(values.to_batches(), schema=values.schema).combine_chunks()
    with_null = pa.concat_tables([values, pa.Table.from_batches([filler_row(arrow)])])
    projection = core.lance_schema.project([left_on], dataset=core.uri)

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        for keep, batch in read_live(frag, projection, batch_size):
            left = pa.table({"k": batch.column(0), "__pos": pa.array(np.arange(batch.num_rows))})
            joined = left.join(lookup, "k", join_type="inner", use_threads=False)
            pick = np.full(batch.num_rows, values.num_rows, dtype=np.int64)  # NULL row
            pick[joined.column("__pos").to_numpy()] = joined.column("__row").to_numpy()
            taken = with_null.take(pa.array(pick)).combine_chunks()
            out = taken.to_batches()[0] if taken.num_rows else filler.slice(0, 0)
            yield to_physical(conform_batch(out, arrow, core.uri), keep, filler)

    return write_new_columns(core, new, per_fragment)


# ------------------------------------------------------------------------- row addresses


def names_rows(data: Any) -> bool:
    """Whether Arrow data holds a `_rowaddr` column (a backfill by row address)."""
    schema = getattr(data, "schema", None)
    return isinstance(schema, pa.Schema) and ROW_ADDRESS in schema.names


class AddressedRows:
    """A source of rows keyed by `_rowaddr`, sorted, every address a live row of `core`."""

    def __init__(self, core: DatasetCore, data: Any, schema: pa.Schema | None, what: str):
        table = to_reader(data, schema).read_all()
        where = f"{core.uri}: {what}"
        if ROW_ADDRESS not in table.column_names:
            raise InvalidInputError(f"{where} needs a {ROW_ADDRESS} column naming each row")
        addr_col = table.column(ROW_ADDRESS)
        if addr_col.null_count:
            raise InvalidInputError(f"{where}: {ROW_ADDRESS} holds NULL")
        try:
            addr = addr_col.cast(pa.uint64()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InvalidInputError(
                f"{where}: {ROW_ADDRESS} must hold row addresses (integers), not {addr_col.type}"
            ) from None
        values = table.drop_columns([ROW_ADDRESS])
        # sources often come sorted (a task's rows in scan order): then one pass checks both
        if len(addr) > 1 and not bool(np.all(addr[1:] > addr[:-1])):
            order = np.argsort(addr, kind="stable")
            addr = addr[order]
            values = values.take(pa.array(order))
            twice = np.flatnonzero(addr[1:] == addr[:-1])
            if len(twice):
                raise InvalidInputError(
                    f"{where}: {ROW_ADDRESS} {int(addr[twice[0]])} appears twice"
                )
        self.values = values  # sliced per fragment: no need to join its chunks
        self.addresses = addr
        self.frags = {f.fragment_id: f for f in fragments_of(core)}
        frag_ids = addr >> np.uint64(32)
        starts = np.flatnonzero(np.r_[True, frag_ids[1:] != frag_ids[:-1]]) if len(addr) else []
        bounds = list(starts) + [len(addr)]
        self.spans: dict[int, tuple[int, int]] = {}
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            fid = int(frag_ids[a])
            frag = self.frags.get(fid)
            offsets = addr[a:b] & _LOW32
            bad = None
            if frag is None:
                bad = addr[a]
            elif offsets[-1] >= np.uint64(frag.physical_rows):  # sorted: the last is largest
                bad = addr[a + int(np.argmax(offsets >= np.uint64(frag.physical_rows)))]
            elif frag.num_deletions:
                gone = np.flatnonzero(np.isin(offsets, frag.deleted_offsets.astype(np.uint64)))
                if len(gone):
                    bad = addr[a + gone[0]]
            if bad is not None:
                raise InvalidInputError(
                    f"{where}: {ROW_ADDRESS} {int(bad)} is not a live row of version "
                    f"{core.version} (fragment {int(bad) >> 32}, row {int(bad) & 0xFFFFFFFF})"
                )
            self.spans[fid] = (a, b)

    def pick(self, frag: LanceFragment) -> tuple[np.ndarray, pa.Table]:
        """The source's offsets in `frag` and their rows (none when it names no row)."""
        a, b = self.spans.get(frag.fragment_id, (0, 0))
        return (self.addresses[a:b] & _LOW32).astype(np.int64), self.values.slice(a, b - a)


def _physical(
    n: int,
    offsets: np.ndarray,
    rows: pa.Table,
    arrow: pa.Schema,
    uri: str,
    base: tuple[np.ndarray, pa.Table] | None = None,
) -> Iterator[pa.RecordBatch]:
    """`n` physical rows of `arrow`'s columns, in steps of the default batch size: `rows`
    at `offsets`, `base`'s rows at its offsets (the live rows' current values), the filler
    row (NULL, or zero where NULL is not allowed) everywhere else."""
    rows = rows.select(arrow.names).cast(arrow)
    if base is None and len(offsets) == n:  # every physical row named (sorted, unique)
        for batch in rows.to_batches(max_chunksize=DEFAULT_BATCH_SIZE):
            yield conform_batch(batch, arrow, uri)
        return
    filler = pa.Table.from_batches([filler_row(arrow)])
    kept_at, kept = base if base is not None else (np.empty(0, np.int64), filler.slice(0, 0))
    pick = np.full(n, kept.num_rows, dtype=np.int64)  # the filler, after the kept rows
    pick[kept_at] = np.arange(kept.num_rows)
    pick[offsets] = kept.num_rows + 1 + np.arange(len(offsets))
    both = pa.concat_tables([kept, filler, rows]).combine_chunks()
    for s in range(0, n, DEFAULT_BATCH_SIZE):
        piece = both.take(pa.array(pick[s : s + DEFAULT_BATCH_SIZE]))
        for batch in piece.to_batches():
            yield conform_batch(batch, arrow, uri)


def add_columns_by_address(
    core: DatasetCore,
    data: Any,
    *,
    schema: pa.Schema | None = None,
    properties: dict[str, str] | None = None,
) -> DatasetCore:
    """New columns valued per row address; rows the source does not name are NULL.
    `properties` go into the transaction (an idempotency key, say)."""
    rows = AddressedRows(core, data, schema, "add_columns by row address")
    new = new_fields(core, rows.values.schema)
    arrow = new.to_arrow()
    for f in arrow:
        if not f.nullable and len(rows.addresses) != sum(
            fr.physical_rows - fr.num_deletions for fr in rows.frags.values()
        ):
            raise SchemaMismatchError(
                f"{core.uri}: new column {f.name!r} is not nullable, but the source does not "
                "give a value for every row"
            )

    def per_fragment(frag: LanceFragment) -> Iterator[pa.RecordBatch]:
        offsets, values = rows.pick(frag)
        try:
            values = values.cast(arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(f"{core.uri}: the new columns' values: {e}") from None
        return _physical(frag.physical_rows, offsets, values, arrow, core.uri)

    return write_new_columns(core, new, per_fragment, properties=properties)


def update_columns_by_address(
    core: DatasetCore,
    data: Any,
    *,
    schema: pa.Schema | None = None,
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT.total_seconds(),
    properties: dict[str, str] | None = None,
) -> tuple[DatasetCore, dict[str, int]]:
    """New values of existing columns per row address (see the module's description);
    returns the new version and `{"num_rows_updated": n}`. A concurrent commit that makes
    it retryable has it planned again on the newest version, whose rows must still be
    at those addresses."""
    table = to_reader(data, schema).read_all()
    return run_with_retries(
        core,
        lambda c: plan_column_update(
            c, AddressedRows(c, table, None, "update_columns"), properties
        ),
        conflict_retries,
        retry_timeout,
    )


class ColumnChange:
    """An in-place column rewrite planned and written: its `Update` (REWRITE_COLUMNS)."""

    def __init__(
        self,
        core: DatasetCore,
        body: transaction_pb2.Transaction.Update,
        files: FileSet,
        stats: dict[str, int],
        properties: dict[str, str] | None = None,
    ) -> None:
        self.core, self.body, self.files, self.stats = core, body, files, stats
        self.properties = properties

    def commit(self) -> DatasetCore:
        try:
            return commit_body(self.core, "update", self.body, self.files, self.properties)
        except BaseException:
            self.files.remove()
            raise

    def discard(self) -> None:
        self.files.remove()


def plan_column_update(
    core: DatasetCore, rows: AddressedRows, properties: dict[str, str] | None = None
) -> ColumnChange:
    """Write the new column files of an in-place column update (`rows`' columns at their
    addresses); commit the change it returns."""
    where = f"{core.uri}: update_columns"
    names = rows.values.column_names
    if not names:
        raise InvalidInputError(f"{where} needs at least one column besides {ROW_ADDRESS}")
    for n in names:
        if n not in core.schema.names:
            raise ColumnNotFoundError(f"{where}: column {n!r} is not in the dataset")
    if core.data_storage_version == "0.1":
        raise UnsupportedFeatureError(
            f"{where}: legacy (0.1) datasets cannot have columns rewritten in place"
        )
    names = [n for n in core.schema.names if n in names]  # the file's columns in schema order
    projection = core.lance_schema.project(names, dataset=core.uri)
    arrow = projection.to_arrow()
    try:  # checked whole before any file is written
        values = rows.values.select(names).cast(arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(f"{where}: the new values do not fit the columns: {e}") from None
    for f in arrow:
        if not f.nullable and values.column(f.name).null_count:
            raise SchemaMismatchError(f"{where}: column {f.name!r} is not nullable")
    modified = [f.id for f in projection.walk()]
    replaced = set(modified)
    files = FileSet(core, projection)
    updated: list[table_pb2.DataFragment] = []
    try:
        for fid in sorted(rows.spans):
            frag = rows.frags[fid]
            offsets, new_values = rows.pick(frag)
            n = frag.physical_rows
            live = frag.live_mask
            live_at = np.arange(n) if live is None else np.flatnonzero(live)
            current = pa.Table.from_batches(
                list(frag.read_batches(projection, arrow, batch_size=n)), schema=arrow
            )
            batches = _physical(
                n, offsets, new_values.select(names), arrow, core.uri, (live_at, current)
            )
            new_file = files.write(frag, batches)
            pb = table_pb2.DataFragment()
            pb.CopyFrom(frag.metadata)
            for df in pb.files:
                df.fields[:] = [TOMBSTONE if i in replaced else i for i in df.fields]
            kept_files = [df for df in pb.files if any(i != TOMBSTONE for i in df.fields)]
            del pb.files[:]
            pb.files.extend(kept_files)
            pb.files.append(new_file)
            updated.append(pb)
    except BaseException:
        files.remove()
        raise
    body = transaction_pb2.Transaction.Update(
        updated_fragments=updated,
        fields_modified=modified,
        update_mode=transaction_pb2.Transaction.REWRITE_COLUMNS,
    )
    stats = {"num_rows_updated": len(rows.addresses)}
    return ColumnChange(core, body, files, stats, properties)
