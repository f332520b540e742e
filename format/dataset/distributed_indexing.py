"""pylance 14's distributed index builds: segments over some fragments, built apart (by
workers, each on its own fragments) and committed together.

    c = ...  # shared IVF centroids (and PQ codebook), trained once
    a = ds.create_index_uncommitted("v", "IVF_PQ", fragment_ids=[0, 1], ivf_centroids=c, ...)
    b = ds.create_index_uncommitted("v", "IVF_PQ", fragment_ids=[2, 3], ivf_centroids=c, ...)
    ds.commit_existing_index_segments("v_idx", "v", [a, b])  # one CreateIndex, two segments

`create_index_uncommitted` writes a segment's files and returns its record (an `Index`, the
shape of pylance's `lance.dataset.Index`), committing nothing; `merge_existing_index_segments`
writes one segment covering several (a vector index's keeps the first one's model);
`commit_existing_index_segments` commits segments, built by either engine, as the index
`name`, replacing the segments of that name. `LanceOperation.CreateIndex` takes them too.
"""

from __future__ import annotations

import datetime as _dt
import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import any_pb2
from pyroaring import BitMap

from quiver.format.dataset import indexing as _indexing
from quiver.format.dataset import vector_indexing as _vector
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import fragments_of
from quiver.format.dataset.index_segments import index_file_version
from quiver.format.dataset.scan import ROW_ID_FIELD, Scanner
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.index.fts import build as _fts
from quiver.format.index.fts import staging as _staging
from quiver.format.index.scalar.build import check_type
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.indices import IndexEntry, index_entry, indices_of

__all__ = ["DistributedIndexMethods", "Index", "IndexFile", "index_record"]


@dataclass(frozen=True)
class IndexFile:
    """A file of an index segment (pylance's `IndexFile`)."""

    path: str
    size_bytes: int


@dataclass
class Index:
    """An index segment's manifest record, as pylance's `lance.dataset.Index` shows it."""

    uuid: str
    name: str
    fields: list[int]
    dataset_version: int
    fragment_ids: set[int]
    index_version: int
    created_at: _dt.datetime | None
    base_id: int | None
    files: list[IndexFile] | None
    index_details: tuple[str, bytes] | None
    covering_fields: list[int] = field(default_factory=list)

    @classmethod
    def from_pb(cls, pb: table_pb2.IndexMetadata) -> Index:
        entry = index_entry(pb)
        created = (
            _dt.datetime.fromtimestamp(pb.created_at / 1000, _dt.UTC)
            if pb.HasField("created_at")
            else None
        )
        return cls(
            uuid=entry.uuid,
            name=entry.name,
            fields=list(entry.field_ids),
            dataset_version=entry.dataset_version,
            fragment_ids=set(entry.fragment_ids or ()),
            index_version=entry.index_version,
            created_at=created,
            base_id=int(pb.base_id) if pb.HasField("base_id") else None,
            files=[IndexFile(p, s) for p, s in entry.files] or None,
            index_details=(pb.index_details.type_url, bytes(pb.index_details.value))
            if pb.HasField("index_details")
            else None,
        )


def index_record(segment: Any, where: str) -> table_pb2.IndexMetadata:
    """The manifest record of a segment given as an `Index` of either engine (pylance's
    `lance.dataset.Index` has the same attributes)."""
    try:
        pb = table_pb2.IndexMetadata(
            uuid=table_pb2.UUID(uuid=_uuid.UUID(str(segment.uuid)).bytes),
            name=str(segment.name),
            fields=[int(f) for f in segment.fields],
            dataset_version=int(segment.dataset_version),
            fragment_bitmap=BitMap(int(f) for f in segment.fragment_ids).serialize(),
            index_version=int(segment.index_version),
            files=[
                table_pb2.IndexFile(path=str(f.path), size_bytes=int(f.size_bytes))
                for f in segment.files or ()
            ],
        )
        # a segment of no details (a merged INVERTED index) is committed without them, as
        # pylance commits it: readers know it by its files
        if segment.index_details is not None:
            type_url, value = segment.index_details
            pb.index_details.CopyFrom(any_pb2.Any(type_url=str(type_url), value=bytes(value)))
        if segment.created_at is not None:
            pb.created_at = int(segment.created_at.timestamp() * 1000)
        if segment.base_id is not None:
            pb.base_id = int(segment.base_id)
    except (AttributeError, TypeError, ValueError) as e:
        raise InvalidInputError(f"{where}: not an index segment ({e})") from None
    return pb


def _entries(core: DatasetCore, segments: Any, what: str) -> list[IndexEntry]:
    where = f"{core.uri}: {what}"
    if isinstance(segments, (str, bytes)) or not hasattr(segments, "__iter__"):
        raise InvalidInputError(f"{where}: segments must be a list of index segments")
    entries = [index_entry(index_record(s, where)) for s in segments]
    if not entries:
        raise InvalidInputError(f"{where}: no segments given")
    if len({e.uuid for e in entries}) != len(entries):
        raise InvalidInputError(f"{where}: a segment is given twice")
    if len({(e.field_ids, e.details_type) for e in entries}) != 1:
        raise InvalidInputError(f"{where}: the segments index different columns or types")
    if entries[0].details_type.endswith("MinHashLshIndexDetails"):
        if len({bytes(e.details) for e in entries}) != 1:  # signatures would not compare
            raise InvalidInputError(f"{where}: MinHash segments need identical parameters")
    return entries


def merge_segments(core: DatasetCore, segments: Any) -> Index:
    """One segment covering the fragments of `segments` (not committed), written again over
    their live rows; a vector index's with the first segment's model."""
    entries = _entries(core, segments, "merge_existing_index_segments")
    first = entries[0]
    kind = _indexing.segment_kind(first)
    if kind is None:
        raise UnsupportedFeatureError(
            f"{core.uri}: Quiver cannot merge segments of {first.details_type}"
        )
    covers = set().union(*(e.fragment_ids or () for e in entries))
    by_id = {int(f.fragment_id): f for f in fragments_of(core)}
    fragments = [by_id[i] for i in sorted(covers) if i in by_id]
    names = core.lance_schema.column_paths()
    column = names.get(first.field_ids[0])
    if column is None:
        raise UnsupportedFeatureError(f"{core.uri}: segments of a nested field cannot be merged")
    new_uuid = _uuid.uuid4()
    if kind == _indexing.VECTOR:
        live = sum(f.count_rows() for f in fragments)
        params, model = _vector.segment_model(core, first, column, live)
        segment, _ = _vector.build_vector_segment(
            core, params, column, first.field_ids[0], first.name, new_uuid, fragments,
            core.version, covers, model=model,
        )  # fmt: skip
    else:
        params = _indexing.segment_params(core, kind, first)
        segment, _ = _indexing.build_segment(
            core, kind, first.field_ids[0], column, first.name, new_uuid, fragments,
            core.version, covers, params,
        )  # fmt: skip
    return Index.from_pb(segment)


def commit_segments(core: DatasetCore, index_name: str, column: str, segments: Any) -> DatasetCore:
    """Commit `segments` as the index `index_name` of `column` (one CreateIndex, replacing
    the segments of that name), as pylance's `commit_existing_index_segments`."""
    entries = _entries(core, segments, "commit_existing_index_segments")
    if not isinstance(index_name, str) or not index_name:
        raise InvalidInputError(f"{core.uri}: an index name must be a non-empty string")
    column = core.lance_schema.canonical_column(column)
    field_id = core.lance_schema.field_at(column, dataset=core.uri).id
    if entries[0].field_ids != (field_id,):
        raise InvalidInputError(
            f"{core.uri}: the segments index field {list(entries[0].field_ids)}, not "
            f"{column!r} ({field_id})"
        )
    current = {int(f.fragment_id) for f in fragments_of(core)}
    for e in entries:
        stray = sorted((e.fragment_ids or set()) - current)
        if stray:
            raise InvalidInputError(
                f"{core.uri}: segment {e.uuid} covers fragment {stray[0]}, which version "
                f"{core.version} does not have"
            )
    existing = [e for e in indices_of(core.manifest) if e.name == index_name]
    if any(e.field_ids != (field_id,) for e in existing):
        raise InvalidInputError(
            f"{core.uri}: index name {index_name!r} already exists with different fields"
        )
    new = []
    for e in entries:
        pb = table_pb2.IndexMetadata()
        pb.CopyFrom(e.pb)
        pb.name = index_name
        new.append(pb)
    body = transaction_pb2.Transaction.CreateIndex(
        new_indices=new, removed_indices=[e.pb for e in existing]
    )
    return _indexing.commit_index_body(core, body)


def stage_inverted(
    core: DatasetCore,
    column: str,
    fragment_ids: Any,
    index_uuid: str | None,
    options: dict[str, Any],
) -> None:
    """Stage the INVERTED partition of `fragment_ids` for the index `index_uuid` (pylance's
    `create_scalar_index(..., fragment_ids=, index_uuid=)`; see `index.fts.staging`)."""
    column = core.lance_schema.canonical_column(column)
    params = _fts.index_params(options, core.uri)
    if hasattr(fragment_ids, "__iter__") and not isinstance(fragment_ids, str | bytes):
        fragment_ids = list(fragment_ids)  # read twice: checked, then the first one named
    fragments, _ = _indexing._chosen(core, fragment_ids)
    if not fragments:
        raise InvalidInputError(f"{core.uri}: fragment_ids is empty")
    field = _indexing._indexed_field(core, column)
    check_type("INVERTED", column, core.lance_schema.project([column]).to_arrow().field(0).type)
    uuid = str(_uuid.UUID(str(index_uuid))) if index_uuid is not None else str(_uuid.uuid4())
    table = Scanner(core, fragments, columns=[field.name], with_row_id=True).to_table()
    _staging.stage_partition(
        core.store,
        f"_indices/{uuid}",
        _staging.staged_id(fragment_ids),
        table.column(0).combine_chunks(),
        table.column(ROW_ID_FIELD.name).to_numpy(),
        params,
        index_file_version(core),
    )


class DistributedIndexMethods:
    """The distributed-build methods of `LanceDataset` (see the module)."""

    _core: DatasetCore
    _advance: Callable[[DatasetCore], None]

    def merge_index_metadata(
        self,
        index_uuid: str,
        index_type: str,
        batch_readhead: int | None = None,
        progress_callback: Any = None,
    ) -> None:
        """Merge the INVERTED partitions staged for `index_uuid` into the index's files,
        committing nothing (pylance's `merge_index_metadata`; commit the index with
        `LanceOperation.CreateIndex`). Other index types build their segments with
        `create_index_uncommitted`."""
        core = self._core
        if str(index_type).upper() not in ("INVERTED", "FTS"):
            raise InvalidInputError(
                f"{core.uri}: merge_index_metadata merges staged INVERTED partitions; "
                f"{str(index_type).upper()} segments are built with create_index_uncommitted "
                "and merged with merge_existing_index_segments"
            )
        try:
            uuid = str(_uuid.UUID(str(index_uuid)))
        except ValueError:
            raise InvalidInputError(
                f"{core.uri}: index_uuid {index_uuid!r} is not a UUID"
            ) from None
        _staging.merge_staged(core.store, f"_indices/{uuid}", index_file_version(core))

    def create_index_uncommitted(
        self, column: str, index_type: str, name: str | None = None, **kwargs: Any
    ) -> Index:
        """Build an index segment over `fragment_ids` (every fragment when None) and write
        its files, committing nothing (pylance's `create_index_uncommitted`; `create_index`'s
        and `create_scalar_index`'s parameters, `replace` False by default); its record."""
        unknown = sorted(set(kwargs) - _UNCOMMITTED_OPTIONS)
        if unknown:
            raise InvalidInputError(
                f"{self._core.uri}: create_index_uncommitted has no option {', '.join(unknown)}"
            )
        built = _indexing.build_index(self._core, column, index_type, name, **kwargs)
        return Index.from_pb(built.segment)

    def merge_existing_index_segments(self, segments: Any) -> Index:
        """One segment covering `segments`, written and not committed (pylance's
        `merge_existing_index_segments`)."""
        return merge_segments(self._core, segments)

    def commit_existing_index_segments(self, index_name: str, column: str, segments: Any) -> Any:
        """Commit built segments as the index `index_name` of `column`, as the next version
        (pylance's `commit_existing_index_segments`); this dataset, moved to it."""
        self._advance(commit_segments(self._core, index_name, column, segments))
        return self


_UNCOMMITTED_OPTIONS = {
    "metric",
    "replace",
    "num_partitions",
    "ivf_centroids",
    "pq_codebook",
    "num_sub_vectors",
    "index_uuid",
    "train",
    "fragment_ids",
    "target_partition_size",
    *_indexing.VECTOR_OPTIONS,
}
