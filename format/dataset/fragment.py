"""Reading one fragment: its data files side by side, minus deleted rows, plus row ids."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.take import take_from_fragment
from quiver.format.errors import CorruptFileError
from quiver.format.file.base import (
    DEFAULT_BATCH_SIZE,
    TOMBSTONE,
    DataFileReader,
    checked_take_indices,
    page_aligned_ranges,
    split_ranges,
)
from quiver.format.file.open import open_data_file
from quiver.format.file.v21.reader import kept_column
from quiver.format.proto import table_pb2
from quiver.format.table.deletion import deletion_file_path, live_mask, read_deletion_file
from quiver.format.table.manifest import storage_version_of_file
from quiver.format.table.rowids import decode_row_ids, decode_row_versions, row_id_sequence_of
from quiver.format.table.schema import LanceField, LanceSchema

ROW_ID = "_rowid"
ROW_ADDRESS = "_rowaddr"


def _leaf_ids(f: LanceField) -> set[int]:
    """Ids of the fields of `f`'s subtree that are stored as columns."""
    if f.is_leaf:
        return {f.id}
    return set().union(*(_leaf_ids(c) for c in f.children))


@dataclass
class _FilePlan:
    """How one data file contributes to a projection."""

    reader: DataFileReader
    fields: list[LanceField]  # pruned top-level fields this file serves
    targets: list[int]  # index of each in the projection


class LanceFragment:
    """One fragment of a dataset version (pylance's `LanceFragment`)."""

    def __init__(self, core: DatasetCore, pb: table_pb2.DataFragment) -> None:
        self._core = core
        self.metadata = pb

    # -- identity and counts ----------------------------------------------------------
    @property
    def fragment_id(self) -> int:
        """The fragment's id, unique within the dataset."""
        return int(self.metadata.id)

    @property
    def physical_rows(self) -> int:
        """Rows stored in the data files, deleted ones included."""
        return int(self.metadata.physical_rows)

    @property
    def num_deletions(self) -> int:
        """Rows of this fragment marked deleted."""
        return int(len(self.deleted_offsets))

    def count_rows(self, filter: str | None = None) -> int:
        """Live rows, optionally only those matching a SQL filter."""
        if filter is None:
            return self.physical_rows - self.num_deletions
        return self.scanner(filter=filter, columns=[]).count_rows()

    def data_files(self) -> list[table_pb2.DataFile]:
        """The fragment's data file entries."""
        return list(self.metadata.files)

    def deletion_file(self) -> table_pb2.DeletionFile | None:
        """The fragment's deletion file entry, if any."""
        return self.metadata.deletion_file if self.metadata.HasField("deletion_file") else None

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, physical_rows={self.physical_rows})"

    # -- deletions and row ids --------------------------------------------------------
    @cached_property
    def deleted_offsets(self) -> np.ndarray:
        """Sorted physical offsets of deleted rows (empty when none)."""
        d = self.deletion_file()
        if d is None:
            return np.empty(0, dtype=np.uint64)
        bitmap = d.file_type == table_pb2.DeletionFile.BITMAP
        path = deletion_file_path(self.fragment_id, d.read_version, d.id, bitmap)
        store, path = self._core.resolve(path, d.base_id if d.HasField("base_id") else None)
        offsets = np.asarray(read_deletion_file(store, path, d.file_type), dtype=np.uint64)
        if len(offsets) and int(offsets[-1]) >= self.physical_rows:
            raise CorruptFileError(
                store.uri_of(path),
                f"deletes offset {int(offsets[-1])} of fragment {self.fragment_id} "
                f"which has {self.physical_rows} rows",
            )
        return offsets

    @cached_property
    def live_mask(self) -> np.ndarray | None:
        """Boolean mask over physical rows (True = live), or None when nothing is deleted."""
        deleted = self.deleted_offsets
        return live_mask(self.physical_rows, deleted) if len(deleted) else None

    @cached_property
    def row_ids(self) -> np.ndarray | None:
        """Stable row ids of every physical row, or None if the dataset has none."""
        data = row_id_sequence_of(
            self.metadata, lambda path: self._core.resolve(path, None, relative_to_root=True)
        )
        if data is None:
            return None
        ids = decode_row_ids(data)
        if len(ids) != self.physical_rows:
            raise CorruptFileError(
                self._core.uri,
                f"fragment {self.fragment_id} has {len(ids)} row ids for {self.physical_rows} rows",
            )
        return ids

    def _version_sequence(self, kind: str) -> np.ndarray | None:
        """The fragment's `kind` ("created_at" / "last_updated_at") version of every
        physical row, or None where the fragment records none."""
        pb = self.metadata
        which = pb.WhichOneof(f"{kind}_version_sequence")
        if which is None:
            return None
        data = getattr(pb, which)
        if which.startswith("external_"):
            store, path = self._core.resolve(data.path, None, relative_to_root=True)
            with store.open(path) as f:
                data = f.read(data.offset, data.size)
        return decode_row_versions(
            data, source=f"fragment {self.fragment_id} {which}", expected_len=self.physical_rows
        )

    @cached_property
    def created_at_versions(self) -> np.ndarray:
        """The version that created each physical row (`_row_created_at_version`); 1 where
        the fragment records none, as pylance reads it."""
        found = self._version_sequence("created_at")
        return np.ones(self.physical_rows, np.uint64) if found is None else found

    @cached_property
    def last_updated_at_versions(self) -> np.ndarray:
        """The version that last changed each physical row (`_row_last_updated_at_version`);
        its created version where the fragment records none."""
        found = self._version_sequence("last_updated_at")
        return self.created_at_versions if found is None else found

    # -- planning ---------------------------------------------------------------------
    def _plan(self, projection: LanceSchema) -> list[_FilePlan]:
        plans: list[_FilePlan] = []
        try:
            for df in self.metadata.files:
                ids = {i for i in df.fields if i != TOMBSTONE}
                pruned, targets = [], []
                for t, f in enumerate(projection.fields):
                    p = f.project_ids(ids)
                    if p is not None:
                        pruned.append(p)
                        targets.append(t)
                if not pruned:
                    continue
                store, path = self._core.resolve(
                    f"data/{df.path}", df.base_id if df.HasField("base_id") else None
                )
                reader = open_data_file(store, path, df)
                plans.append(_FilePlan(reader, pruned, targets))
                if reader.num_rows != self.physical_rows:
                    raise CorruptFileError(
                        store.uri_of(path),
                        f"has {reader.num_rows} rows but fragment {self.fragment_id} "
                        f"has {self.physical_rows}",
                    )
        except BaseException:
            for p in plans:
                p.reader.close()
            raise
        return plans

    def _assemble(
        self,
        projection: LanceSchema,
        plans: list[_FilePlan],
        parts: Sequence[list[pa.Array]],
        n: int,
    ) -> list[pa.Array]:
        """Zip the arrays of each file into one array per projected field."""
        pieces: list[list[tuple[LanceField, pa.Array]]] = [[] for _ in projection.fields]
        for plan, arrays in zip(plans, parts, strict=True):
            for f, t, a in zip(plan.fields, plan.targets, arrays, strict=True):
                pieces[t].append((f, a))
        return [_merge_field(f, pieces[t], n) for t, f in enumerate(projection.fields)]

    @staticmethod
    def _whole_fields(
        projection: LanceSchema, plans: list[_FilePlan]
    ) -> list[tuple[int, int]] | None:
        """(file plan, array) of every projected field when each comes whole from one file
        as it is read (no blob descriptions to make, no struct to stitch): a scan's steps
        then need no `_assemble`. None otherwise."""
        found: dict[int, list[tuple[int, int, LanceField]]] = {}
        for p, plan in enumerate(plans):
            for i, (f, t) in enumerate(zip(plan.fields, plan.targets, strict=True)):
                found.setdefault(t, []).append((p, i, f))
        routes = []
        for t, f in enumerate(projection.fields):
            got = found.get(t, [])
            if len(got) != 1 or any(x.is_blob for x in f.walk()):
                return None
            p, i, pf = got[0]
            if _leaf_ids(pf) != _leaf_ids(f):
                return None
            routes.append((p, i))
        return routes

    def _extra_columns(
        self, offsets: np.ndarray, with_row_id: bool, with_row_address: bool
    ) -> list[pa.Array]:
        extra = []
        if with_row_id:
            ids = self.row_ids
            if ids is None:
                extra.append(pa.array((self.fragment_id << 32) + offsets, pa.uint64()))
            else:
                extra.append(pa.array(ids[offsets.astype(np.int64)], pa.uint64()))
        if with_row_address:
            extra.append(pa.array((self.fragment_id << 32) + offsets, pa.uint64()))
        return extra

    # -- reading ----------------------------------------------------------------------
    def live_ranges(self, batch_size: int, start: int = 0, stop: int | None = None) -> list:
        """Physical row ranges in [start, stop) to read, skipping steps that are all deleted."""
        stop = self.physical_rows if stop is None else stop
        mask = self.live_mask
        if mask is None:
            return [(start, stop)] if stop > start else []
        ranges: list[tuple[int, int]] = []
        for s, e in split_ranges([(start, stop)], batch_size):
            if mask[s:e].any():
                if ranges and ranges[-1][1] == s:
                    ranges[-1] = (ranges[-1][0], e)
                else:
                    ranges.append((s, e))
        return ranges

    def reader(self, projection: LanceSchema) -> FragmentReader:
        """An open reader of `projection` over this fragment's data files; it keeps the files
        and their page indexes open across calls until closed (use it as a context manager)."""
        return FragmentReader(self, projection)

    def read_batches(
        self,
        projection: LanceSchema,
        out_schema: pa.Schema,
        *,
        ranges: Sequence[tuple[int, int]] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        with_row_id: bool = False,
        with_row_address: bool = False,
        keep_deleted: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Stream live rows (every row with `keep_deleted`) of `projection` (plus row id
        columns) over physical ranges."""
        if ranges is None:
            ranges = self.live_ranges(batch_size)
        if not ranges:
            return
        with self.reader(projection) as r:
            yield from r.read(
                out_schema,
                ranges,
                batch_size,
                with_row_id=with_row_id,
                with_row_address=with_row_address,
                keep_deleted=keep_deleted,
            )

    def take_physical(
        self,
        projection: LanceSchema,
        out_schema: pa.Schema,
        offsets: np.ndarray,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.RecordBatch:
        """The rows at sorted unique physical `offsets`, as one batch."""
        kept = self._kept_columns(projection)
        if kept is not None:  # every column decoded already: no file opened
            where = f"fragment {self.fragment_id}"
            idx = checked_take_indices(where, np.asarray(offsets), self.physical_rows)
            arrays = [_take_kept(column, idx) for column in kept]
            arrays += self._extra_columns(idx.astype(np.uint64), with_row_id, with_row_address)
            return _make_batch(arrays, out_schema, len(idx))
        with self.reader(projection) as r:
            return r.take(
                out_schema, offsets, with_row_id=with_row_id, with_row_address=with_row_address
            )

    def _kept_columns(self, projection: LanceSchema) -> list[pa.Array] | None:
        """The whole decoded columns of `projection` when each is a top-level column that
        takes have kept decoded (`format.file.v21.reader.TAKEN_COLUMNS`); None otherwise."""
        files = self._field_files
        kept = []
        for f in projection.fields:
            where = files.get(f.id)
            if where is None or f.children:
                return None
            column = kept_column(where[0], where[1], f)
            if column is None:
                return None
            kept.append(column)
        return kept

    @cached_property
    def _field_files(self) -> dict[int, tuple[str, int]]:
        """Field id -> (name, size) of the 2.1+ data file holding it, as its reader names
        it, for files whose size the manifest records."""
        out: dict[int, tuple[str, int]] = {}
        for df in self.metadata.files:
            version = storage_version_of_file(df.file_major_version, df.file_minor_version)
            if version not in ("2.1", "2.2", "2.3") or not df.file_size_bytes:
                continue
            store, path = self._core.resolve(
                f"data/{df.path}", df.base_id if df.HasField("base_id") else None
            )
            for i in df.fields:
                if i != TOMBSTONE:
                    out[i] = (store.uri_of(path), int(df.file_size_bytes))
        return out

    # -- pylance-style conveniences -----------------------------------------------------
    def take(
        self,
        indices: Sequence[int] | np.ndarray | pa.Array,
        columns: Sequence[str] | dict[str, str] | None = None,
    ) -> pa.Table:
        """Rows by position among this fragment's live rows, in the order given."""
        return take_from_fragment(self, indices, columns)

    def scanner(self, **kwargs: Any) -> Scanner:
        """A scanner over this fragment only (same options as `LanceDataset.scanner`)."""
        return Scanner(self._core, [self], **kwargs)

    def to_table(self, **kwargs: Any) -> pa.Table:
        """This fragment's rows as a table (same options as `LanceDataset.to_table`)."""
        return self.scanner(**kwargs).to_table()

    def to_batches(self, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """This fragment's rows as a stream of batches."""
        return self.scanner(**kwargs).to_batches()


def fragments_of(core: DatasetCore) -> list[LanceFragment]:
    """The fragments of a dataset version."""
    return [LanceFragment(core, pb) for pb in core.manifest.pb.fragments]


_SHARED: weakref.WeakKeyDictionary[DatasetCore, tuple[LanceFragment, ...]] = (
    weakref.WeakKeyDictionary()
)


def shared_fragments(core: DatasetCore) -> tuple[LanceFragment, ...]:
    """The fragments of a dataset version, made once per version and shared by the searches
    of it: what a fragment decodes on first use (its deletion vector, row ids, data file
    names) is then decoded once per version, not once per search (a server answers many
    searches of one version)."""
    found = _SHARED.get(core)
    if found is None:
        found = _SHARED.setdefault(core, tuple(fragments_of(core)))
    return found


def fragment_of(core: DatasetCore, fragment_id: int) -> LanceFragment | None:
    """One fragment of a dataset version by id, or None."""
    for pb in core.manifest.pb.fragments:
        if pb.id == fragment_id:
            return LanceFragment(core, pb)
    return None


class FragmentReader:
    """Reads one projection of a fragment: its data files side by side, minus deleted rows.

    The files stay open (with whatever page indexes their readers cached) until `close`, so
    a scan can read the filter's columns step by step and take the matching rows of the
    other columns at each step without opening or parsing anything twice."""

    def __init__(self, fragment: LanceFragment, projection: LanceSchema) -> None:
        self.fragment = fragment
        self.projection = projection
        self._plans = fragment._plan(projection)

    def __enter__(self) -> FragmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the data files."""
        for p in self._plans:
            p.reader.close()
        self._plans = []

    def page_aligned(
        self, ranges: Sequence[tuple[int, int]], batch_size: int
    ) -> list[tuple[int, int]]:
        """`ranges` cut into steps of up to `batch_size` rows that end at page starts of the
        heaviest columns where one is near, so few steps stitch pages together (a copy):
        pass them to `read` with the same `batch_size`."""
        if all(b - a <= batch_size for a, b in ranges):  # one step each: nothing to choose
            return list(ranges)
        breaks = [b for p in self._plans for b in p.reader.page_breaks(p.fields)]
        return page_aligned_ranges(ranges, batch_size, breaks)

    def read(
        self,
        out_schema: pa.Schema,
        ranges: Sequence[tuple[int, int]],
        batch_size: int,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
        keep_deleted: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Live rows (every row with `keep_deleted`) over sorted physical `ranges`, one batch
        per `split_ranges` step (steps whose rows are all deleted yield empty batches, so
        callers can keep steps aligned)."""
        frag, plans = self.fragment, self._plans
        streams = [p.reader.read(p.fields, ranges, batch_size) for p in plans]
        mask = None if keep_deleted else frag.live_mask
        routes = frag._whole_fields(self.projection, plans)
        try:
            for s, e in split_ranges(ranges, batch_size):
                parts = [next(st) for st in streams]
                if routes is not None:
                    arrays = [parts[p][i] for p, i in routes]
                else:
                    arrays = frag._assemble(self.projection, plans, parts, e - s)
                keep = None if mask is None else mask[s:e]
                n = e - s
                if keep is not None and not keep.all():
                    sel = pa.array(keep)
                    arrays = [a.filter(sel) for a in arrays]
                    n = int(np.count_nonzero(keep))
                if with_row_id or with_row_address:
                    offsets = np.arange(s, e, dtype=np.uint64)
                    if n != e - s:
                        offsets = offsets[keep]
                    arrays += frag._extra_columns(offsets, with_row_id, with_row_address)
                yield _make_batch(arrays, out_schema, n)
                del parts, arrays  # not held while the next step decodes
        finally:
            for st in streams:
                st.close()

    def take(
        self,
        out_schema: pa.Schema,
        offsets: np.ndarray,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.RecordBatch:
        """The rows at sorted, unique physical `offsets`, as one batch."""
        frag, plans = self.fragment, self._plans
        offsets = np.asarray(offsets, dtype=np.uint64)
        parts = [p.reader.take(p.fields, offsets) for p in plans]
        arrays = frag._assemble(self.projection, plans, parts, len(offsets))
        arrays += frag._extra_columns(offsets, with_row_id, with_row_address)
        return _make_batch(arrays, out_schema, len(offsets))


def _take_kept(column: pa.Array, idx: np.ndarray) -> pa.Array:
    """Rows `idx` of a decoded column: numbers without nulls by a numpy index (a search's
    answers are a handful of rows: Arrow's take call costs more than the rows), the rest by
    Arrow's take."""
    kind = column.type
    if not column.null_count and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return pa.array(column.to_numpy(zero_copy_only=True)[idx], type=kind)
    return column.take(pa.array(idx))


def _make_batch(arrays: list[pa.Array], schema: pa.Schema, n: int) -> pa.RecordBatch:
    """A record batch; one with no columns still carries its row count."""
    if arrays:
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.RecordBatch.from_struct_array(pa.StructArray.from_buffers(pa.struct([]), n, [None]))


def _merge_field(f: LanceField, pieces: list[tuple[LanceField, pa.Array]], n: int) -> pa.Array:
    """One array for field `f` from the (pruned field, array) pieces the data files gave
    (blob fields as their descriptions, as scans return them)."""
    dtype = f.arrow_type_of(blob_descriptions=True)
    if not pieces:
        return pa.nulls(n, dtype)
    if (
        len(pieces) == 1
        and f.is_blob
        and _is_binary(pieces[0][1].type)
        and dtype != pieces[0][1].type
    ):
        return _legacy_blob_descriptions(pieces[0][1], dtype)
    if len(pieces) == 1 and _leaf_ids(pieces[0][0]) == _leaf_ids(f):
        return pieces[0][1]
    if f.logical_type != "struct":
        # non-struct fields live whole in one file; take the most complete piece
        best = max(pieces, key=lambda p: len(_leaf_ids(p[0])))
        return best[1] if best[1].type == dtype else pa.nulls(n, dtype)
    children = []
    for child in f.children:
        sub = []
        for pf, arr in pieces:
            for i, pc_ in enumerate(pf.children):
                if pc_.id == child.id:
                    sub.append((pc_, arr.field(i)))
        children.append(_merge_field(child, sub, n))
    return pa.StructArray.from_arrays(
        children, fields=[c.to_arrow() for c in f.children], mask=pieces[0][1].is_null()
    )


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _legacy_blob_descriptions(values: pa.Array, dtype: pa.DataType) -> pa.Array:
    """Descriptions of a blob column that a legacy file stores inline as binary: NULL where
    the value is NULL or empty (as pylance reads them; filters such as IS NULL see that), the
    size of the others, and position 0 (the bytes have no place of their own in the file)."""
    sizes = pc.binary_length(values).cast(pa.uint64())
    missing = pc.fill_null(pc.equal(sizes, 0), True)
    zeros = pa.array(np.zeros(len(values), np.uint64))
    return pa.StructArray.from_arrays(
        [zeros, pc.fill_null(sizes, 0)], fields=list(dtype), mask=missing
    )
