"""Building and dropping indices, committed as pylance 14 commits them (a CreateIndex).

`create_scalar_index` scans one column's live values and row ids, writes a BTREE or BITMAP
(`index.scalar.build`) into `_indices/<uuid>/` and commits one CreateIndex transaction: the
new index (its field, the version it was built from, the fragments it covers, its details,
version 0, its files and their sizes) and, when it replaces one, the segments of the same
name in `removed_indices`. `drop_index` commits a CreateIndex that only removes. pylance opens
and uses these indices as its own; Quiver's readers prune with them (`index.pruning`).
"""

from __future__ import annotations

import dataclasses
import uuid as _uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset import vector_indexing as _vector
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment, fragments_of
from quiver.format.dataset.index_segments import (
    carried_as_of_now,
    index_file_version,
    segment_record,
)
from quiver.format.dataset.scan import ROW_ADDRESS_FIELD, ROW_ID_FIELD, Scanner
from quiver.format.errors import (
    IndexNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from quiver.format.index.fts import build as _fts
from quiver.format.index.fts.build import INVERTED_DETAILS
from quiver.format.index.scalar import bitmap as _bitmap
from quiver.format.index.scalar import btree as _btree
from quiver.format.index.scalar import minhash as _minhash
from quiver.format.index.scalar import rtree as _rtree
from quiver.format.index.scalar.bloom import (
    BLOOM_DETAILS,
    BLOOM_FILE,
    build_bloomfilter,
    check_bloom_type,
)
from quiver.format.index.scalar.build import (
    BITMAP_DETAILS,
    BTREE_DETAILS,
    LABEL_LIST_DETAILS,
    build_bitmap,
    build_btree,
    build_label_list,
    check_type,
)
from quiver.format.index.scalar.ngram import NGRAM_DETAILS, POSTINGS_FILE, build_ngram
from quiver.format.index.scalar.remap import discard
from quiver.format.index.scalar.zonemap import (
    ZONEMAP_DETAILS,
    ZONEMAP_FILE,
    build_zonemap,
    zonemap_details,
)
from quiver.format.index.vector.build import VECTOR_DETAILS, VECTOR_INDEX_TYPES
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.commit import commit_transaction
from quiver.format.table.indices import IndexEntry, indices_of
from quiver.format.table.transaction import ManifestContext, new_transaction

# create_index's options beyond its named parameters (pylance's keyword arguments)
VECTOR_OPTIONS = (
    "num_bits",
    "sample_rate",
    "max_iters",
    "m",
    "ef_construction",
    "max_level",
    "rabitq_model",
    "seed",
    "progress",
)

__all__ = [
    "SCALAR_INDEX_TYPES",
    "VECTOR_INDEX_TYPES",
    "VECTOR_OPTIONS",
    "create_index",
    "create_scalar_index",
    "drop_index",
    "optimize_indices",
]

# what pylance 14 accepts as a scalar index type; the ones Quiver builds have a builder
SCALAR_INDEX_TYPES = (
    "BTREE",
    "BITMAP",
    "NGRAM",
    "ZONEMAP",
    "LABEL_LIST",
    "INVERTED",
    "FTS",
    "BLOOMFILTER",
    "RTREE",
    "MINHASHLSH",
)
VECTOR = "VECTOR"  # optimize_indices' kind for every IVF index
_BUILDERS: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    # INVERTED takes its analyzer's parameters: built in build_segment
    "INVERTED": (None, INVERTED_DETAILS, _fts.files_of(64)),
    "BTREE": (build_btree, BTREE_DETAILS, (_btree.DATA_FILE, _btree.LOOKUP_FILE)),
    "BITMAP": (build_bitmap, BITMAP_DETAILS, (_bitmap.LOOKUP_FILE,)),
    "ZONEMAP": (build_zonemap, ZONEMAP_DETAILS, (ZONEMAP_FILE,)),
    "BLOOMFILTER": (build_bloomfilter, BLOOM_DETAILS, (BLOOM_FILE,)),
    "LABEL_LIST": (build_label_list, LABEL_LIST_DETAILS, (_bitmap.LOOKUP_FILE,)),
    "NGRAM": (build_ngram, NGRAM_DETAILS, (POSTINGS_FILE,)),
    # MINHASHLSH takes its MinHashParams: built in build_segment
    "MINHASHLSH": (None, _minhash.MINHASH_DETAILS, _minhash.FILES),
    # RTREE takes the column's GeoArrow encoding: built in build_segment
    "RTREE": (None, _rtree.DETAILS, _rtree.FILES),
}


def _default_name(existing: list[IndexEntry], column: str, field_id: int, details: str) -> str:
    """pylance's name for an unnamed index: the first of `{column}_idx`, `{column}_idx_2`,
    `_3`... that is free, or that names an index of the same type on the same column (which
    the new one then replaces)."""
    by_name: dict[str, list[IndexEntry]] = {}
    for e in existing:
        by_name.setdefault(e.name, []).append(e)
    n = 1
    while True:
        name = f"{column}_idx" if n == 1 else f"{column}_idx_{n}"
        taken = by_name.get(name)
        if not taken or all(
            e.field_ids == (field_id,) and e.details_type == details for e in taken
        ):
            return name
        n += 1


def _name_and_uuid(
    core: DatasetCore,
    column: str,
    field_id: int,
    details: str,
    name: str | None,
    replace: bool,
    index_uuid: str | None,
) -> tuple[str, list[IndexEntry], _uuid.UUID]:
    """The new index's name (pylance's default when None), the segments it replaces, and its
    uuid; refused as pylance refuses a name taken by another column or, without `replace`,
    by any index."""
    existing = indices_of(core.manifest)
    if name is None:
        name = _default_name(existing, column, field_id, details)
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{core.uri}: an index name must be a non-empty string")
    same_name = [e for e in existing if e.name == name]
    if same_name and any(e.field_ids != (field_id,) for e in same_name):
        raise InvalidInputError(
            f"{core.uri}: index name {name!r} already exists with different fields, please "
            "specify a different name"
        )
    if same_name and not replace:
        raise InvalidInputError(
            f"{core.uri}: index name {name!r} already exists, please specify a different name "
            "or use replace=True"
        )
    try:
        new_uuid = _uuid.UUID(index_uuid) if index_uuid is not None else _uuid.uuid4()
    except (TypeError, ValueError):
        raise InvalidInputError(f"{core.uri}: index_uuid {index_uuid!r} is not a UUID") from None
    return name, same_name, new_uuid


def _indexed_field(core: DatasetCore, column: object) -> Any:
    """The field an index is built on: a column, or a field nested in structs by its path
    (`meta.lang`); refused: a column that is not a name."""
    if not isinstance(column, str):
        raise InvalidInputError(f"{core.uri}: the column to index must be a name, not {column!r}")
    return core.lance_schema.field_at(column, dataset=core.uri)


def commit_index_body(
    core: DatasetCore,
    body: transaction_pb2.Transaction.CreateIndex,
) -> DatasetCore:
    txn = new_transaction(core.version, "create_index", body)
    result = commit_transaction(
        core.store, txn, ctx=ManifestContext(load_version=core.load_version)
    )
    return DatasetCore(core.store, result.manifest, core.storage_options)


def create_scalar_index(
    core: DatasetCore,
    column: str,
    index_type: str,
    name: str | None = None,
    *,
    replace: bool = True,
    train: bool = True,
    fragment_ids: object = None,
    index_uuid: str | None = None,
    **options: Any,
) -> DatasetCore:
    """Build a BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM or INVERTED index of
    `column` over every live row of this version (none with `train=False`: an empty index
    that `optimize_indices` fills) and commit it as the next version (pylance's
    `create_scalar_index`; INVERTED takes its tokenizer `options`, NGRAM and BLOOMFILTER
    ignore any, as pylance does); the new version."""
    _whole(core, index_type, fragment_ids)
    built = build_scalar_index(
        core, column, index_type, name, replace=replace, train=train, index_uuid=index_uuid,
        **options,
    )  # fmt: skip
    return commit_built(core, built)


def build_scalar_index(
    core: DatasetCore,
    column: str,
    index_type: str,
    name: str | None = None,
    *,
    replace: bool = True,
    train: bool = True,
    fragment_ids: object = None,
    index_uuid: str | None = None,
    **options: Any,
) -> Built:
    """`create_scalar_index`'s segment, written and not committed: over the live rows of the
    fragments `fragment_ids` (None: every fragment), covering those."""
    column = core.lance_schema.canonical_column(column)
    kind = str(index_type).upper() if isinstance(index_type, str) else None
    kind = "INVERTED" if kind == "FTS" else kind
    if kind not in SCALAR_INDEX_TYPES:
        raise InvalidInputError(
            f"{core.uri}: index type must be one of {', '.join(SCALAR_INDEX_TYPES)}, "
            f"not {index_type!r}"
        )
    if kind not in _BUILDERS:
        raise UnsupportedFeatureError(
            f"{core.uri}: Quiver builds BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM, "
            f"INVERTED, MINHASHLSH and RTREE scalar indices, not {kind} yet"
        )
    # pylance ignores the options of NGRAM, BLOOMFILTER (its 8192 items at 0.00057 stand)
    # and RTREE (its pages stay 4096 boxes)
    if options and kind not in ("INVERTED", "NGRAM", "BLOOMFILTER", "MINHASHLSH", "RTREE"):
        raise InvalidInputError(f"{core.uri}: unknown {kind} index option {sorted(options)[0]!r}")
    params: Any = _fts.index_params(options, core.uri) if kind == "INVERTED" else None
    if kind == "MINHASHLSH":
        params = _minhash.MinHashParams.from_options(options, core.uri)
    # train=False: an index of no rows yet, which optimize_indices fills (as pylance's)
    field = _indexed_field(core, column)
    fragments, covers = _chosen(core, fragment_ids)
    arrow_type = field.arrow_type
    elements = kind == "INVERTED" and bool(params.get(_fts.LIST_ELEMENT))
    if kind == "BLOOMFILTER":
        check_bloom_type(column, arrow_type)
    elif kind == "RTREE":
        _rtree.check_field(column, field.to_arrow())
    elif elements:  # pylance's index of list elements: its own name, lists of strings
        _fts.list_elements(pa.array([], arrow_type), np.zeros(0, np.uint64), core.uri)
        name = f"{column}_list_element_idx" if name is None else name
    else:
        check_type(kind, column, arrow_type)
    details = _BUILDERS[kind][1]
    name, same_name, new_uuid = _name_and_uuid(
        core, column, field.id, details, name, replace, index_uuid
    )
    if not train:
        fragments, covers = [], set()
    segment, directory = build_segment(
        core, kind, field.id, column, name, new_uuid, fragments, core.version, covers, params,
        untrained=not train,
    )  # fmt: skip
    return Built(segment, directory, _BUILDERS[kind][2], same_name)


def create_index(
    core: DatasetCore,
    column: str,
    index_type: str,
    name: str | None = None,
    metric: str = "L2",
    replace: bool = False,
    num_partitions: int | None = None,
    ivf_centroids: object = None,
    pq_codebook: object = None,
    num_sub_vectors: int | None = None,
    *,
    num_bits: int | None = None,
    sample_rate: int = 256,
    max_iters: int = 50,
    target_partition_size: int | None = None,
    index_uuid: str | None = None,
    train: bool = True,
    fragment_ids: object = None,
    seed: int | None = None,
    progress: _vector.Progress | None = None,
    m: int | None = None,
    ef_construction: int | None = None,
    max_level: int | None = None,
    rabitq_model: str | None = None,
) -> DatasetCore:
    """Build an IVF index (IVF_FLAT, IVF_PQ, IVF_SQ or an IVF_HNSW_* form) of the vector column
    `column` over every live row of this version and commit it as the next version (pylance's
    `create_index`, with its parameters and defaults; `seed` makes a build repeatable;
    `progress` hears of each stage, "commit" last); the new version."""
    _whole(core, index_type, fragment_ids)
    built = build_index(
        core, column, index_type, name, metric, replace, num_partitions, ivf_centroids,
        pq_codebook, num_sub_vectors, num_bits=num_bits, sample_rate=sample_rate,
        max_iters=max_iters, target_partition_size=target_partition_size, index_uuid=index_uuid,
        train=train, seed=seed, progress=progress, m=m, ef_construction=ef_construction,
        max_level=max_level, rabitq_model=rabitq_model,
    )  # fmt: skip
    if progress is not None and built.directory is not None:
        progress({"stage": "commit", "index": built.segment.name})
    return commit_built(core, built)


def build_index(
    core: DatasetCore,
    column: str,
    index_type: str,
    name: str | None = None,
    metric: str = "L2",
    replace: bool = False,
    num_partitions: int | None = None,
    ivf_centroids: object = None,
    pq_codebook: object = None,
    num_sub_vectors: int | None = None,
    *,
    num_bits: int | None = None,
    sample_rate: int = 256,
    max_iters: int = 50,
    target_partition_size: int | None = None,
    index_uuid: str | None = None,
    train: bool = True,
    fragment_ids: object = None,
    seed: int | None = None,
    progress: _vector.Progress | None = None,
    m: int | None = None,
    ef_construction: int | None = None,
    max_level: int | None = None,
    rabitq_model: str | None = None,
) -> Built:
    """`create_index`'s segment, written and not committed: over the live rows of the
    fragments `fragment_ids` (None: every fragment), covering those; a scalar index type
    builds that index's (pylance resolves a scalar index's column as `canonical_column`
    does, a vector index's only as spelled)."""
    kind = str(index_type).upper() if isinstance(index_type, str) else None
    if kind in SCALAR_INDEX_TYPES:
        return build_scalar_index(
            core,
            column,
            kind,
            name,
            replace=replace,
            train=train,
            fragment_ids=fragment_ids,
            index_uuid=index_uuid,
        )
    if kind not in VECTOR_INDEX_TYPES:
        if kind is not None and kind.startswith("IVF_"):
            raise UnsupportedFeatureError(
                f"{core.uri}: Quiver builds {', '.join(VECTOR_INDEX_TYPES)} vector indices, "
                f"not {kind} yet"
            )
        raise InvalidInputError(
            f"{core.uri}: index type must be one of {', '.join(VECTOR_INDEX_TYPES)} or a "
            f"scalar index type, not {index_type!r}"
        )
    field = _indexed_field(core, column)
    fragments, covers = _chosen(core, fragment_ids)
    live = sum(f.count_rows() for f in fragments)
    params = _vector.vector_params(
        core,
        column,
        kind,
        metric,
        num_partitions=num_partitions,
        num_sub_vectors=num_sub_vectors,
        num_bits=num_bits,
        sample_rate=sample_rate,
        max_iters=max_iters,
        target_partition_size=target_partition_size,
        live_rows=live,
        hnsw=(m, ef_construction, max_level),
    )
    centroids, codebook, rabitq = _vector.check_given(
        core.uri, params, ivf_centroids, pq_codebook, rabitq_model
    )
    if centroids is not None:
        if num_partitions is not None and len(centroids) != params.num_partitions:
            raise InvalidInputError(
                f"{core.uri}: ivf_centroids has {len(centroids)} clusters, but "
                f"num_partitions={params.num_partitions}"
            )
        params = dataclasses.replace(params, num_partitions=len(centroids))
    name, same_name, new_uuid = _name_and_uuid(
        core, column, field.id, VECTOR_DETAILS, name, replace, index_uuid
    )
    if not train:  # pylance's untrained index: its kind and parameters, no files, no rows
        details = (VECTOR_DETAILS, params.details())
        version = params.index_version
        segment = segment_record(new_uuid, name, field.id, core.version, (), details, version, ())
        return Built(segment, None, (), same_name)
    segment, directory = _vector.build_vector_segment(
        core,
        params,
        column,
        field.id,
        name,
        new_uuid,
        fragments,
        core.version,
        covers,
        centroids=centroids,
        codebook=codebook,
        rabitq=rabitq,
        rng=np.random.default_rng(seed),
        progress=progress,
    )
    return Built(segment, directory, _vector.FILES, same_name)


@dataclass(frozen=True)
class Built:
    """An index segment written and not committed: its manifest record, directory (None:
    no files) and file names, and the segments its commit replaces."""

    segment: table_pb2.IndexMetadata
    directory: str | None
    files: tuple[str, ...]
    replaces: list[IndexEntry]


def commit_built(core: DatasetCore, built: Built) -> DatasetCore:
    """Commit a built segment as pylance's CreateIndex (the segments it replaces removed);
    its files are removed if the commit fails."""
    body = transaction_pb2.Transaction.CreateIndex(
        new_indices=[built.segment], removed_indices=[e.pb for e in built.replaces]
    )
    try:
        return commit_index_body(core, body)
    except BaseException:
        if built.directory is not None:
            discard(core.store, built.directory, built.files)
        raise


def _whole(core: DatasetCore, index_type: object, fragment_ids: object) -> None:
    """Refuse `fragment_ids` where an index is committed at once: pylance builds a segment of
    some fragments with `create_index_uncommitted` (committed by
    `commit_existing_index_segments`)."""
    if fragment_ids is not None:
        raise InvalidInputError(
            f"{core.uri}: {str(index_type).upper()} distributed indexing uses "
            "create_index_uncommitted(..., fragment_ids=...) and "
            "commit_existing_index_segments"
        )


def _chosen(core: DatasetCore, fragment_ids: object) -> tuple[list[LanceFragment], set[int]]:
    """The fragments an index segment is built over (all of them when None) and their ids;
    refused as pylance refuses ids the version does not have."""
    fragments = fragments_of(core)
    if fragment_ids is None:
        return fragments, {int(f.fragment_id) for f in fragments}
    if isinstance(fragment_ids, (str, bytes)) or not hasattr(fragment_ids, "__iter__"):
        raise InvalidInputError(f"{core.uri}: fragment_ids must be a list of fragment ids")
    wanted = set()
    for f in fragment_ids:
        if isinstance(f, bool) or not isinstance(f, (int, np.integer)):
            raise InvalidInputError(f"{core.uri}: fragment id {f!r} is not an integer")
        wanted.add(int(f))
    by_id = {int(f.fragment_id): f for f in fragments}
    missing = sorted(wanted - by_id.keys())
    if missing:
        raise InvalidInputError(
            f"{core.uri}: fragment {missing[0]} is not in version {core.version}"
        )
    return [by_id[i] for i in sorted(wanted)], wanted


def build_segment(
    core: DatasetCore,
    kind: str,
    field_id: int,
    column: str,
    name: str,
    new_uuid: _uuid.UUID,
    fragments: list[LanceFragment],
    dataset_version: int,
    covers: set[int] | None = None,
    params: Any = None,
    previous: list[IndexEntry] | None = None,
    untrained: bool = False,
) -> tuple[table_pb2.IndexMetadata, str]:
    """Write one index segment of `kind` over the live rows of `fragments` into
    `_indices/<uuid>/`; its manifest record (covering `covers`, default those fragments)
    and directory. A BTREE holds row addresses (index version 1 says so on a dataset with
    stable row ids), a BITMAP row ids, as pylance 14 writes them; they are equal without
    stable row ids."""
    build, details, names = _BUILDERS[kind]
    by_address = kind in ("BTREE", "ZONEMAP", "BLOOMFILTER")
    table = Scanner(
        core, fragments, columns=[column], with_row_id=not by_address, with_row_address=by_address
    ).to_table()
    values = table.column(column).combine_chunks()
    row_ids = table.column((ROW_ADDRESS_FIELD if by_address else ROW_ID_FIELD).name).to_numpy()
    directory = f"_indices/{new_uuid}"
    try:
        if kind == "INVERTED":
            assert params is not None
            old = [_where(core, e) for e in previous or []]
            files = _fts.build_inverted(
                core.store, directory, values, row_ids, index_file_version(core), params, old,
                untrained=untrained,
            )  # fmt: skip
        elif kind == "MINHASHLSH":
            version = index_file_version(core)
            files = _minhash.build_minhash(
                core.store,
                directory,
                values,
                row_ids,
                params,
                "2.1" if version == "2.0" else version,
            )
        elif kind == "RTREE":
            field = core.lance_schema.field_at(column).to_arrow()
            files = _rtree.build_rtree(
                core.store, directory, values, row_ids, index_file_version(core),
                _rtree.check_field(column, field),
            )  # fmt: skip
        elif kind == "BLOOMFILTER" and previous:
            files = build_bloomfilter(
                core.store,
                directory,
                values,
                row_ids,
                index_file_version(core),
                [_where(core, e) for e in previous],
                {int(f.id): int(f.physical_rows) for f in core.manifest.pb.fragments},
            )
        else:
            files = build(core.store, directory, values, row_ids, index_file_version(core))
    except BaseException:
        discard(core.store, directory, names)
        raise
    covered = {int(f.fragment_id) for f in fragments} if covers is None else covers
    # pylance 14 writes LABEL_LIST as version 1, a BTREE of stable row ids too
    stable_btree = kind == "BTREE" and core.manifest.uses_stable_row_ids
    segment = segment_record(
        new_uuid,
        name,
        field_id,
        dataset_version,
        covered,
        (details, _details_value(kind, values.type, params, delta=previous is not None)),
        _fts.format_version(params or {})
        if kind == "INVERTED"
        else int(kind == "LABEL_LIST" or stable_btree),
        files,
    )
    return segment, directory


def _details_value(
    kind: str, value_type: pa.DataType, params: Any, *, delta: bool = False
) -> bytes:
    if kind == "ZONEMAP":
        return zonemap_details(value_type)
    if kind == "MINHASHLSH":
        assert params is not None
        return params.details()
    if kind == "INVERTED":
        assert params is not None
        # pylance's optimize_indices records format 2 in a new segment's details whatever
        # the index's format (its manifest version and files keep the index's own)
        return _fts.details(params, _fts.INDEX_VERSION if delta else None)
    return b""


def _where(core: DatasetCore, entry: IndexEntry) -> tuple[Any, str]:
    base = entry.pb.base_id if entry.pb.HasField("base_id") else None
    return core.resolve(entry.directory, base, relative_to_root=True)


def inverted_params(core: DatasetCore, entry: IndexEntry) -> dict[str, Any]:
    """The parameters an INVERTED segment was built with (to build its delta)."""
    from quiver.format.index.fts.index import open_inverted

    store, directory = _where(core, entry)
    index = open_inverted(store, directory, entry.uuid)
    block = max((p.block for p in index.partitions), default=_fts.BLOCK)
    params = _fts.params_of(index.params, index.format_version, block)
    if _fts.lists_elements(entry.details):
        params[_fts.LIST_ELEMENT] = True
    return params


def optimize_indices(
    core: DatasetCore,
    *,
    num_indices_to_merge: int | None = None,
    index_names: list[str] | None = None,
    retrain: bool = False,
    progress: _vector.Progress | None = None,
) -> DatasetCore | None:
    """Bring indices up to date with appended fragments, as pylance's `optimize_indices`:
    per index, the newest `num_indices_to_merge` segments (1 by default) and the fragments
    no segment covers become one new segment (removing the merged ones); with 0, the
    unindexed fragments get a segment of their own. Indices with nothing to add are left
    alone; nothing to do commits nothing (None). Vector segments keep the centroids and
    codebook of the newest merged segment (new rows join its partitions); `retrain` trains
    a new model and rebuilds every segment of a vector index as one (it changes nothing for
    scalar indices). The new version, committed as one CreateIndex."""
    if num_indices_to_merge is not None and (
        isinstance(num_indices_to_merge, bool)
        or not isinstance(num_indices_to_merge, int)
        or num_indices_to_merge < 0
    ):
        raise InvalidInputError(
            f"{core.uri}: num_indices_to_merge must be an integer >= 0, not "
            f"{num_indices_to_merge!r}"
        )
    merge = 1 if num_indices_to_merge is None else num_indices_to_merge
    by_name: dict[str, list[IndexEntry]] = {}
    for entry in indices_of(core.manifest):
        by_name.setdefault(entry.name, []).append(entry)
    if index_names is not None:
        unknown = sorted(set(index_names) - set(by_name))
        if unknown:
            raise IndexNotFoundError(f"{core.uri}: no index named {', '.join(unknown)}")
        by_name = {n: by_name[n] for n in index_names}
    kinds = {name: segment_kind(segs[0]) for name, segs in by_name.items()}
    unsupported = sorted(n for n, k in kinds.items() if k is None)
    if unsupported:
        raise UnsupportedFeatureError(
            f"{core.uri}: Quiver optimizes BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM, "
            "INVERTED, MINHASHLSH and IVF indices, not "
            f"{', '.join(unsupported)} "
            "yet (name the others in index_names)"
        )
    fragments = {int(f.fragment_id): f for f in fragments_of(core)}
    names_by_id = core.lance_schema.column_paths()
    new: list[table_pb2.IndexMetadata] = []
    removed: list[table_pb2.IndexMetadata] = []
    written: list[tuple[str, str]] = []
    try:
        for name, segments in by_name.items():
            kind = kinds[name]
            covered = set().union(*(s.fragment_ids or set() for s in segments))
            unindexed = sorted(set(fragments) - covered)
            merged = segments[len(segments) - merge :] if merge else []
            retrained = retrain and kind == VECTOR
            if retrained:  # a new model over every row: all segments become one
                merged = segments
            elif not unindexed and len(merged) < 2:
                continue
            field_id = segments[0].field_ids[0]
            column = names_by_id.get(field_id)
            if column is None:  # a field inside a list: pylance's to rebuild
                raise UnsupportedFeatureError(
                    f"{core.uri}: index {name!r} covers a field inside a list, which Quiver "
                    "cannot optimize yet"
                )
            covers = set(unindexed).union(*(s.fragment_ids or set() for s in merged))
            scanned = [fragments[f] for f in sorted(covers) if f in fragments]
            # the version a merged segment was built from, as pylance records it: the oldest
            # merged one's (zone maps merging segments are trained afresh: this version)
            # (an untrained segment, covering nothing, counts as none, except for INVERTED
            # indices, whose merges keep the segments' partitions: pylance's)
            trained = [s for s in merged if s.fragment_ids or kind == "INVERTED"]
            if kind == "RTREE":  # rebuilt over the live rows: what compaction left counts none
                covers &= set(fragments)
                trained = [s for s in trained if set(s.fragment_ids or ()) & covers]
            version = min((s.dataset_version for s in trained), default=core.version)
            if kind == "ZONEMAP" and len(merged) > 1:
                version = core.version
            if kind == VECTOR:
                live = sum(f.count_rows() for f in scanned)
                params, model = _vector.segment_model(core, (merged or segments)[-1], column, live)
                segment, directory = _vector.build_vector_segment(
                    core,
                    params,
                    column,
                    field_id,
                    name,
                    _uuid.uuid4(),
                    scanned,
                    version,
                    covers,
                    model=None if retrained else model,
                    progress=progress,
                )
            elif kind in ("INVERTED", "BLOOMFILTER"):
                # pylance's way: the merged segments' partitions (zones) kept as they are,
                # more for the rest
                params = segment_params(core, kind, segments[-1])
                with carried_as_of_now(core, kind, merged) as carried:
                    segment, directory = build_segment(
                        core, kind, field_id, column, name, _uuid.uuid4(),
                        [fragments[f] for f in unindexed], version, covers, params, carried,
                    )  # fmt: skip
            else:  # rebuilt from the rows (a MinHash segment's signatures are the same)
                params = segment_params(core, kind, segments[-1])
                segment, directory = build_segment(
                    core, kind, field_id, column, name, _uuid.uuid4(), scanned, version, covers,
                    params,
                )  # fmt: skip
            written.append((directory, kind))
            new.append(segment)
            removed.extend(s.pb for s in merged)
        if not new:
            return None
        return commit_index_body(
            core, transaction_pb2.Transaction.CreateIndex(new_indices=new, removed_indices=removed)
        )
    except BaseException:
        for directory, kind in written:
            discard(core.store, directory, _vector.FILES if kind == VECTOR else _BUILDERS[kind][2])
        raise


def drop_index(core: DatasetCore, name: str) -> DatasetCore:
    """Remove every segment of the index `name` as the next version (pylance's
    `drop_index`); its files stay for `cleanup_old_versions`."""
    segments = [e for e in indices_of(core.manifest) if e.name == name]
    if not segments:
        raise IndexNotFoundError(f"{core.uri}: index {name!r} not found")
    body = transaction_pb2.Transaction.CreateIndex(removed_indices=[e.pb for e in segments])
    return commit_index_body(core, body)


def segment_params(core: DatasetCore, kind: str, entry: IndexEntry) -> Any:
    """What a new segment of `entry`'s index is built with: an INVERTED index's analyzer
    parameters, a MINHASHLSH index's MinHashParams, else None."""
    if kind == "INVERTED":
        return inverted_params(core, entry)
    if kind == "MINHASHLSH":
        return _minhash.MinHashParams.from_details(entry.details, core.uri)
    return None


def segment_kind(entry: IndexEntry) -> str | None:
    """The kind of index Quiver builds a segment as (a scalar type, or VECTOR for every IVF
    index), None for the others."""
    if entry.details_type == VECTOR_DETAILS:
        return VECTOR
    return next((k for k, (_, d, _) in _BUILDERS.items() if d == entry.details_type), None)
