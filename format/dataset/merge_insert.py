"""`merge_insert`: upserts, insert-if-not-exists, conditional updates, matched deletes and
"replace a range" merges of source rows into a dataset, as pylance 14's
`LanceDataset.merge_insert(on)` builder does, committed as one `Update` transaction.

The plan (`plan_merge`):
1. the source is read once into memory (a retry plans the merge again on the newest
   version, as pylance keeps a copy of its input), its columns cast to the dataset's types;
2. one streaming scan of the target's key columns (and the columns a by-source delete's
   filter reads) joins them to the source keys with Arrow's hash join: matched pairs
   (target row address, source row) and, for `when_not_matched_by_source_delete`, target
   rows no source row matches. Only the key columns are read, never the whole table;
   NULL keys match nothing, so a source row with a NULL key is inserted;
3. two source rows matching one target row is an error (pylance's ambiguity rule);
   target rows sharing a key are each matched;
4. matched target rows are updated (the whole row rewritten: the source's values, and for
   a partial-schema source the target's for the other columns; an update condition over
   `source.` and `target.` columns chooses which), deleted or refused; unmatched source
   rows are inserted (NULL in the columns a partial source lacks);
5. the new fragment files hold the updated rows then the inserted ones; with stable row
   ids updated rows keep their row ids and creation versions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.backfill import (
    ROW_ADDRESS,
    AddressedRows,
    ColumnChange,
    plan_column_update,
)
from quiver.format.dataset.blob_writes import fits_blob_v2, is_blob_v2, to_blob_v2
from quiver.format.dataset.blobs import carried_references, with_blob_values
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import fragments_of
from quiver.format.dataset.row_changes import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    PlannedChange,
    RowChange,
    change_transaction,
    check_retry_options,
    run_with_retries,
    write_rows,
)
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.write import to_reader
from quiver.format.errors import (
    ColumnNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from quiver.format.expr import compile_filter, evaluate_filter
from quiver.format.table.indices import indices_of
from quiver.format.table.key_filter import inserted_keys_filter, key_hashes
from quiver.format.table.schema import LanceSchema

__all__ = ["MergeInsertBuilder", "MergeParams", "plan_merge", "primary_key"]

_ADDR = "__quiver_rowaddr"
_SRC = "__quiver_source_row"
# target key rows joined per hash join (the source's hash table is built once per batch)
_JOIN_BATCH_ROWS = 1 << 20
WRITE_MODES = ("auto", "rewrite_rows", "rewrite_columns")


@dataclass(frozen=True)
class MergeParams:
    """What a merge does: its keys and clauses (pylance's builder state)."""

    on: tuple[str, ...]
    when_matched: str = "nothing"  # "nothing" | "update" | "delete" | "fail"
    matched_condition: str | None = None
    insert: bool = False
    delete_by_source: bool = False
    by_source_filter: str | None = None


def primary_key(schema: LanceSchema) -> tuple[str, ...]:
    """The unenforced primary key's column names, ordered as the table spec orders them
    (explicit positions first, then field id); () when the dataset declares none."""
    fields = [f for f in schema.walk() if f.unenforced_primary_key]
    fields.sort(
        key=lambda f: (
            f.unenforced_primary_key_position == 0,
            f.unenforced_primary_key_position,
            f.id,
        )
    )
    by_id = {f.id: f for f in schema.walk()}

    def path(f: Any) -> str:
        names = [f.name]
        while f.parent_id >= 0:
            f = by_id[f.parent_id]
            names.append(f.name)
        return ".".join(reversed(names))

    return tuple(path(f) for f in fields)


def _field_id(schema: LanceSchema, path: str) -> int:
    fields = schema.fields
    found = None
    for part in path.split("."):
        found = next(f for f in fields if f.name == part)
        fields = found.children
    assert found is not None
    return found.id


def _keys(core: DatasetCore, on: str | Sequence[str] | None) -> tuple[str, ...]:
    if on is None:
        keys = primary_key(core.lance_schema)
        if not keys:
            raise InvalidInputError(
                f"{core.uri}: merge_insert needs join keys: pass `on`, or declare an "
                "unenforced primary key on the dataset"
            )
    else:
        keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidInputError(f"{core.uri}: merge_insert's `on` must name columns, not {on!r}")
    if len(set(keys)) != len(keys):
        raise InvalidInputError(f"{core.uri}: merge_insert's `on` names a column twice: {on!r}")
    nested = [k for k in keys if "." in k and k not in core.schema.names]
    if nested:
        raise UnsupportedFeatureError(
            f"{core.uri}: merge_insert on a key nested in a struct ({nested[0]!r}) is not "
            "supported yet"
        )
    for k in keys:
        if k not in core.schema.names:
            raise ColumnNotFoundError(
                f"{core.uri}: merge_insert key {k!r} is not a column of the dataset "
                f"(columns: {', '.join(core.schema.names)})"
            )
    return keys


def _source_table(core: DatasetCore, data: Any, schema: pa.Schema | None) -> pa.Table:
    """The source rows in the dataset's column types (a subset of its columns allowed)."""
    table = to_reader(data, schema).read_all()
    target = core.schema
    columns = []
    fields = []
    for name, col in zip(table.column_names, table.columns, strict=True):
        if name not in target.names:
            raise SchemaMismatchError(
                f"{core.uri}: merge_insert source column {name!r} is not in the dataset "
                f"(columns: {', '.join(target.names)})"
            )
        f = target.field(name)
        if is_blob_v2(f) and not col.type.equals(f.type) and fits_blob_v2(col.type, f):
            col = to_blob_v2(col, f, core.uri)
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaMismatchError(
                    f"{core.uri}: merge_insert source column {name!r} ({col.type}) does "
                    f"not fit the dataset's {f.type}: {e}"
                ) from None
        columns.append(col)
        fields.append(f)
    if len(set(table.column_names)) != len(table.column_names):
        raise SchemaMismatchError(f"{core.uri}: merge_insert source names a column twice")
    return pa.Table.from_arrays(columns, schema=pa.schema(fields)).combine_chunks()


def _check_clauses(core: DatasetCore, params: MergeParams, source: pa.Table) -> None:
    for k in params.on:
        if k not in source.column_names:
            raise SchemaMismatchError(
                f"{core.uri}: merge_insert key {k!r} is not a column of the source"
            )
    partial = set(source.column_names) != set(core.schema.names)
    if params.delete_by_source and partial:
        raise SchemaMismatchError(
            f"{core.uri}: when_not_matched_by_source_delete needs a source with every "
            "column of the dataset"
        )
    if params.insert and partial:
        for f in core.schema:
            if f.name not in source.column_names and not f.nullable:
                raise SchemaMismatchError(
                    f"{core.uri}: the source lacks column {f.name!r}, which is not "
                    "nullable, so its rows cannot be inserted"
                )


def _describe_key(source: pa.Table, keys: Sequence[str], row: int) -> str:
    parts = []
    for k in keys:
        value = source.column(k)[row].as_py()
        parts.append(f"{k} = {value!r}" if isinstance(value, str) else f"{k} = {value}")
    return " AND ".join(parts)


def _join(
    core: DatasetCore, params: MergeParams, source: pa.Table
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matched (target address, source row) pairs sorted by address, and the addresses
    of target rows no source row matches (when the merge deletes by source)."""
    keys = list(params.on)
    # the source's own buffers (from a Flight upload, say) may be unaligned for Acero
    everything = pa.array(np.arange(source.num_rows))
    right = pa.table({k: source.column(k).take(everything) for k in keys})
    right = right.append_column(_SRC, everything)
    by_source = None
    columns = list(keys)
    if params.delete_by_source and params.by_source_filter is not None:
        by_source = compile_filter(params.by_source_filter, core.schema, dataset=core.uri)
        columns += [c for c in by_source.columns if c not in columns]
    scanner = Scanner(
        core,
        fragments_of(core),
        columns=columns,
        with_row_address=True,
        batch_size=_JOIN_BATCH_ROWS,
    )
    addrs, srcs, unmatched = [], [], []
    for batch in scanner.to_batches():
        if not batch.num_rows:
            continue
        left = pa.Table.from_batches([batch]).rename_columns(
            [_ADDR if n == "_rowaddr" else n for n in batch.schema.names]
        )
        if source.num_rows:
            pairs = left.select([*keys, _ADDR]).join(
                right, keys=keys, join_type="inner", use_threads=False
            )
            addrs.append(pairs.column(_ADDR).to_numpy())
            srcs.append(pairs.column(_SRC).to_numpy())
        if params.delete_by_source:
            alone = (
                left.join(right, keys=keys, join_type="left anti", use_threads=False)
                if source.num_rows
                else left
            )
            if by_source is not None and alone.num_rows:
                alone = alone.filter(evaluate_filter(alone, by_source))
            unmatched.append(alone.column(_ADDR).to_numpy())
    addr = np.concatenate(addrs).astype(np.uint64) if addrs else np.empty(0, np.uint64)
    src = np.concatenate(srcs).astype(np.int64) if srcs else np.empty(0, np.int64)
    order = np.argsort(addr, kind="stable")
    addr, src = addr[order], src[order]
    twice = np.flatnonzero(addr[1:] == addr[:-1])
    if len(twice):
        raise InvalidInputError(
            f"{core.uri}: Ambiguous merge inserts are prohibited: multiple source rows "
            f"match the same target row on ({_describe_key(source, keys, int(src[twice[0]]))})"
        )
    gone = np.concatenate(unmatched).astype(np.uint64) if unmatched else np.empty(0, np.uint64)
    return addr, src, gone


def _target_rows(core: DatasetCore, addresses: np.ndarray, *, with_row_id: bool) -> pa.Table:
    """The target rows at sorted unique `addresses`, every column (and `_rowid`), blob
    columns holding their values (external references kept as references)."""
    projection = core.lance_schema
    out = core.projected_arrow(tuple(projection.names))  # blob columns: descriptions
    if with_row_id:
        out = out.append(pa.field("_rowid", pa.uint64()))
    frags = {f.fragment_id: f for f in fragments_of(core)}
    pieces = []
    frag_of = addresses >> np.uint64(32)
    bounds = np.flatnonzero(np.diff(frag_of)) + 1
    for piece in np.split(addresses, bounds) if len(addresses) else []:
        frag = frags[int(piece[0] >> np.uint64(32))]
        offsets = (piece & np.uint64(0xFFFFFFFF)).astype(np.int64)
        pieces.append(frag.take_physical(projection, out, offsets, with_row_id=with_row_id))
    rows = pa.Table.from_batches(pieces, schema=out) if pieces else out.empty_table()
    return with_blob_values(core, rows, addresses)


def _in_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with every column of `schema`: its own, NULL for the ones it lacks."""
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _conditioned(
    core: DatasetCore, condition: str, target: pa.Table, source: pa.Table
) -> np.ndarray:
    """Which matched pairs satisfy an update condition over `source.` / `target.` columns."""
    both = pa.table(
        {
            "target": pa.StructArray.from_arrays(
                [c.combine_chunks() for c in target.columns], fields=list(target.schema)
            )
            if target.num_columns
            else pa.nulls(target.num_rows, pa.struct([])),
            "source": pa.StructArray.from_arrays(
                [c.combine_chunks() for c in source.columns], fields=list(source.schema)
            ),
        }
    )
    compiled = compile_filter(condition, both.schema, dataset=core.uri)
    mask = evaluate_filter(both, compiled)
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def plan_merge(core: DatasetCore, params: MergeParams, source: pa.Table) -> RowChange:
    """The change a merge makes to `core` (see the module's description)."""
    if params.when_matched in ("nothing", "fail") and not (
        params.insert or params.delete_by_source
    ):
        raise InvalidInputError(
            f"{core.uri}: the merge_insert is not configured to change the data in any "
            "way: add when_matched_update_all, when_matched_delete, "
            "when_not_matched_insert_all or when_not_matched_by_source_delete"
        )
    _check_clauses(core, params, source)
    schema = core.schema
    stable = core.manifest.uses_stable_row_ids
    addr, src, by_source = _join(core, params, source)
    change = RowChange(core)
    # pylance's delete-only merge names the top-level fields, its other merges all fields
    delete_only = params.when_matched == "delete" and not params.insert
    delete_only = delete_only and not params.delete_by_source
    schema_ids = core.lance_schema
    change.preserving = [f.id for f in schema_ids.fields] if delete_only else schema_ids.field_ids()
    updated = deleted = 0
    carried: list[np.ndarray] = []
    pieces: list[pa.Table] = []
    external = None  # the references of target rows a partial source carries over
    if len(addr) and params.when_matched == "fail":
        raise InvalidInputError(
            f"{core.uri}: merge_insert found source rows matching existing rows (first on "
            f"{_describe_key(source, params.on, int(src[0]))}) and when_matched_fail is set"
        )
    if len(addr) and params.when_matched == "delete":
        change.delete_addresses(addr)
        deleted += len(addr)
    if len(addr) and params.when_matched == "update":
        partial = set(source.column_names) != set(schema.names)
        need_target = partial or stable or params.matched_condition is not None
        rows = source.take(pa.array(src))
        target = _target_rows(core, addr, with_row_id=stable) if need_target else None
        if params.matched_condition is not None:
            assert target is not None
            keep = _conditioned(core, params.matched_condition, target.select(schema.names), rows)
            rows, target = rows.filter(pa.array(keep)), target.filter(pa.array(keep))
            addr = addr[keep]
        if partial:
            assert target is not None
            external = carried_references(core, target)
            rows = pa.Table.from_arrays(
                [
                    rows.column(f.name) if f.name in rows.column_names else target.column(f.name)
                    for f in schema
                ],
                schema=schema,
            )
        if stable:
            assert target is not None
            carried.append(target.column("_rowid").to_numpy())
        pieces.append(_in_schema(rows, schema))
        change.delete_addresses(addr)
        updated = len(addr)
    inserted = 0
    if params.insert:
        # every source row sharing a matched key is in a pair (else the merge was
        # ambiguous), so the unmatched rows are those in no pair
        matched = np.zeros(source.num_rows, dtype=bool)
        matched[src] = True
        fresh = source.filter(pa.array(~matched))
        pieces.append(_in_schema(fresh, schema))
        inserted = fresh.num_rows
        keys = primary_key(core.lance_schema)
        if keys and set(keys) == set(params.on):
            # a merge on the primary key records the keys it inserted (as pylance does)
            ids = [_field_id(core.lance_schema, k) for k in keys]
            change.inserted_rows = inserted_keys_filter(ids, key_hashes(fresh.select(keys)))
    if len(by_source):
        change.delete_addresses(by_source)
        deleted += len(by_source)
    batches = [b for t in pieces for b in t.to_batches()]
    batches = [pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches]
    write_rows(
        change, iter(batches), carried_row_ids=carried if stable else None, external=external
    )
    change.stats = {
        "num_inserted_rows": inserted,
        "num_updated_rows": updated,
        "num_deleted_rows": deleted,
    }
    return change


def _rewrites_columns(core: DatasetCore, params: MergeParams, source: pa.Table, mode: str) -> bool:
    """Whether a merge rewrites columns in place (see `MergeInsertBuilder.write_mode`);
    refuses "rewrite_columns" for a merge it cannot express, with pylance's reasons."""
    if mode == "rewrite_rows":
        return False
    names = set(core.schema.names)
    why = None
    if params.insert:
        why = "inserting unmatched source rows adds rows, which patching cannot do"
    elif params.delete_by_source:
        why = "deleting target rows no source row matches removes rows, which patching cannot do"
    elif params.when_matched != "update":
        why = "when_matched must update rather than delete or do nothing"
    elif set(source.column_names) >= names:
        why = "the source covers every dataset column, so there is nothing to skip"
    elif not set(source.column_names) - set(params.on):
        why = "the source carries no column besides the join key"
    if mode == "rewrite_columns":
        if why is not None:
            raise InvalidInputError(
                f"{core.uri}: write_mode rewrite_columns cannot express this merge_insert: "
                f"{why}; use auto or rewrite_rows"
            )
        return True
    if why is not None:
        return False
    keys = {core.lance_schema.field(k).id for k in params.on if k in names}
    return any(
        set(i.field_ids) & keys and not i.details_type.endswith("VectorIndexDetails")
        for i in indices_of(core.manifest)
    )


def plan_column_merge(core: DatasetCore, params: MergeParams, source: pa.Table) -> ColumnChange:
    """An update-only merge of a partial source as an in-place rewrite of its columns."""
    addr, src, _ = _join(core, params, source)
    rows = source.take(pa.array(src))
    if params.matched_condition is not None and len(addr):
        target = _target_rows(core, addr, with_row_id=False).select(core.schema.names)
        keep = _conditioned(core, params.matched_condition, target, rows)
        rows, addr = rows.filter(pa.array(keep)), addr[keep]
    values = rows.drop_columns(list(params.on))
    values = values.append_column(ROW_ADDRESS, pa.array(addr, pa.uint64()))
    change = plan_column_update(core, AddressedRows(core, values, None, "merge_insert"))
    change.stats = {
        "num_inserted_rows": 0,
        "num_updated_rows": len(addr),
        "num_deleted_rows": 0,
    }
    return change


def plan_any(
    core: DatasetCore,
    params: MergeParams,
    source: pa.Table,
    mode: str,
    properties: dict[str, str] | None = None,
) -> PlannedChange:
    """The merge planned in the write mode it takes on `core`, its transaction carrying
    `properties`."""
    _check_clauses(core, params, source)
    if _rewrites_columns(core, params, source, mode):
        change: Any = plan_column_merge(core, params, source)
    else:
        change = plan_merge(core, params, source)
    change.properties = dict(properties or {})
    return change


@dataclass
class Transaction:
    """A merge planned and written but not committed (pylance's `Transaction`): commit it
    with `format.dataset.commit(uri, transaction)`."""

    read_version: int
    operation: Any  # the `lance.table.Transaction` message
    uuid: str


class MergeInsertBuilder:
    """pylance's `MergeInsertBuilder`: the clauses of a merge, then `execute(data)`."""

    def __init__(self, dataset: Any, on: str | Sequence[str] | None) -> None:
        self._dataset = dataset
        self._params = MergeParams(on=_keys(dataset.core, on))
        self._retries: int = DEFAULT_CONFLICT_RETRIES
        self._timeout: dt.timedelta = DEFAULT_RETRY_TIMEOUT
        self._use_index = True
        self._write_mode = "auto"
        self._properties: dict[str, str] = {}

    def _set(self, **changes: Any) -> MergeInsertBuilder:
        self._params = replace(self._params, **changes)
        return self

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Rows whose key matches are updated with the source's values (only where the
        SQL `condition` over `source.` and `target.` columns holds, when given)."""
        if condition is not None and (not isinstance(condition, str) or not condition.strip()):
            raise InvalidInputError(
                f"when_matched_update_all's condition must be SQL: {condition!r}"
            )
        return self._set(when_matched="update", matched_condition=condition)

    def when_matched_delete(self) -> MergeInsertBuilder:
        """Target rows whose key matches a source row are deleted."""
        return self._set(when_matched="delete", matched_condition=None)

    def when_matched_fail(self) -> MergeInsertBuilder:
        """The merge fails, committing nothing, if any source row matches a target row."""
        return self._set(when_matched="fail", matched_condition=None)

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Source rows matching no target row are inserted."""
        return self._set(insert=True)

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        """Target rows no source row matches are deleted (only those matching the SQL
        filter `expr`, when given)."""
        if expr is not None and (not isinstance(expr, str) or not expr.strip()):
            raise InvalidInputError(f"when_not_matched_by_source_delete takes SQL: {expr!r}")
        return self._set(delete_by_source=True, by_source_filter=expr)

    def conflict_retries(self, max_retries: int) -> MergeInsertBuilder:
        """How many times a merge that lost a race is planned again (default 10)."""
        self._retries, _ = check_retry_options(max_retries, self._timeout)
        return self

    def retry_timeout(self, timeout: dt.timedelta) -> MergeInsertBuilder:
        """How long retries may go on (default 30 s)."""
        check_retry_options(self._retries, timeout)
        self._timeout = timeout
        return self

    def use_index(self, use_index: bool) -> MergeInsertBuilder:
        """Accepted for pylance's API: the join always scans the key columns."""
        self._use_index = bool(use_index)
        return self

    def write_mode(self, mode: str) -> MergeInsertBuilder:
        """ "auto" or "rewrite_rows" (updated rows are rewritten whole, into new
        fragments); "rewrite_columns" is not supported yet."""
        if mode not in WRITE_MODES:
            raise InvalidInputError(f"write_mode must be one of {', '.join(WRITE_MODES)}: {mode!r}")
        self._write_mode = mode
        return self

    def transaction_properties(self, properties: dict[str, str]) -> MergeInsertBuilder:
        """Properties recorded in the merge's transaction (Quiver's; a server records a
        job's idempotency key so that a retried commit never merges twice)."""
        self._properties = {str(k): str(v) for k, v in properties.items()}
        return self

    def execute(self, data: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge and commit it as one new version; returns pylance's counts
        (`num_inserted_rows`, `num_updated_rows`, `num_deleted_rows`)."""
        ds = self._dataset
        source = _source_table(ds.core, data, schema)
        params, mode, props = self._params, self._write_mode, self._properties
        core, stats = run_with_retries(
            ds.core,
            lambda c: plan_any(c, params, source, mode, props),
            self._retries,
            self._timeout.total_seconds(),
        )
        ds._advance(core)
        return stats

    def execute_uncommitted(
        self, data: Any, *, schema: pa.Schema | None = None
    ) -> tuple[Transaction, dict[str, int]]:
        """Plan and write the merge without committing: its transaction (commit it with
        `format.dataset.commit`) and counts. Its deletion files are written too."""
        ds = self._dataset
        source = _source_table(ds.core, data, schema)
        if _rewrites_columns(ds.core, self._params, source, self._write_mode):
            raise UnsupportedFeatureError(
                "execute_uncommitted rewrites whole rows only: use write_mode('rewrite_rows')"
            )
        change = plan_merge(ds.core, self._params, source)
        txn, _ = change_transaction(change)
        return Transaction(int(txn.read_version), txn, txn.uuid), change.stats
