"""What a version's indices are, in pylance's shapes: `list_indices`, `describe_indices` and
`index_statistics` (the scalar types' own figures read from their lookup files)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from quiver.format.errors import IndexNotFoundError, InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.index.pruning import Core, scalar_kind
from quiver.format.index.scalar.bitmap import BitmapIndex
from quiver.format.index.scalar.btree import BTreeIndex
from quiver.format.index.scalar.ngram import POSTINGS_FILE
from quiver.format.index.scalar.rtree import RTreeIndex
from quiver.format.index.vector.build import details_kind, untrained
from quiver.format.index.vector.index import INDEX_FILE as VECTOR_INDEX_FILE
from quiver.format.index.vector.index import open_vector_index
from quiver.format.index.vector.ivf import IVF_KEY, read_message
from quiver.format.index.vector.pq import ProductQuantizer
from quiver.format.index.vector.rq import RaBitQ
from quiver.format.index.vector.sq import ScalarQuantizer
from quiver.format.proto import index_pb2
from quiver.format.table.frag_reuse import FRAG_REUSE_INDEX
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of

# pylance's names of index types, by the message of their details
_TYPE_NAMES = {
    "BTreeIndexDetails": "BTree",
    "BitmapIndexDetails": "Bitmap",
    "LabelListIndexDetails": "LabelList",
    "InvertedIndexDetails": "Inverted",
    "NGramIndexDetails": "NGram",
    "ZoneMapIndexDetails": "ZoneMap",
    "BloomFilterIndexDetails": "BloomFilter",
    "JsonIndexDetails": "Json",
}


@dataclass(frozen=True)
class IndexDescription:
    """One index (all its segments) as pylance's `describe_indices` shows it."""

    name: str
    type_url: str
    index_type: str
    num_rows_indexed: int
    fields: list[int]
    field_names: list[str]
    num_segments: int
    total_size_bytes: int | None


def index_type(core: Core, entry: IndexEntry) -> str:
    """pylance's name of an index's type ("BTree", "Bitmap", "IVF_PQ", ...); a vector
    index's is recorded in its index file; one committed without details is "Unknown", as
    pylance lists it."""
    kind = entry.pb.index_details.type_url.rsplit(".", 1)[-1]
    if kind in _TYPE_NAMES:
        return _TYPE_NAMES[kind]
    if kind == "VectorIndexDetails" and untrained(entry.files, entry.fragment_ids):
        return details_kind(index_pb2.VectorIndexDetails.FromString(entry.details))
    if kind == "VectorIndexDetails" or any(p == "index.idx" for p, _ in entry.files):
        store, directory = _where(core, entry)
        file = IndexFile(store, f"{directory}/index.idx")
        try:
            raw = file.metadata.get("lance:index")
        finally:
            file.close()
        if raw:
            return str(json.loads(raw).get("type", "Vector"))
        return "Vector"
    return kind.removesuffix("IndexDetails") or "Unknown"


def list_indices(core: Core) -> list[dict[str, Any]]:
    """Every user index of the version, by name: name, type, uuid, fields (names), version
    (the dataset version it was built on), fragment_ids (a set) and base_id."""
    names = core.manifest.schema.column_paths()
    out = []
    for e in sorted((e for v in _by_name(core).values() for e in v), key=lambda e: e.name):
        out.append(
            {
                "name": e.name,
                "type": index_type(core, e),
                "uuid": e.uuid,
                "fields": [names.get(f, str(f)) for f in e.field_ids],
                "version": e.dataset_version,
                "fragment_ids": set(e.fragment_ids or ()),
                "base_id": int(e.pb.base_id) if e.pb.HasField("base_id") else None,
            }
        )
    return out


def describe_indices(core: Core) -> list[IndexDescription]:
    """One description per index name (its segments together), as pylance's."""
    names = core.manifest.schema.column_paths()
    live = _live_rows(core)
    out = []
    for name, segments in sorted(_by_name(core).items()):
        first = segments[0]
        covered = set().union(*(s.fragment_ids or () for s in segments))
        out.append(
            IndexDescription(
                name=name,
                type_url=first.details_type,
                index_type=index_type(core, first),
                num_rows_indexed=sum(live.get(f, 0) for f in covered),
                fields=list(first.field_ids),
                field_names=[names.get(f, str(f)) for f in first.field_ids],
                num_segments=len(segments),
                total_size_bytes=(
                    sum(size for s in segments for _, size in s.files)
                    if any(s.files for s in segments)
                    else None  # pylance's for an index of no files (an untrained one)
                ),
            )
        )
    return out


def index_statistics(core: Core, name: str) -> dict[str, Any]:
    """pylance's `index_statistics(name)`: type, segments, rows and fragments indexed and
    not, and for BTREE (min, max, pages), BITMAP (distinct values) and NGRAM (tokens)
    indices their own figures."""
    segments = _by_name(core).get(name)
    if segments is None:
        known = ", ".join(sorted(_by_name(core))) or "none"
        raise IndexNotFoundError(f'{core.uri}: index "{name}" not found; indices: {known}')
    reuse = frag_reuse_of(core.manifest)
    if name == FRAG_REUSE_INDEX and reuse is not None:
        return {"num_versions": len(reuse.versions)}
    live = _live_rows(core)
    covered = set().union(*(s.fragment_ids or () for s in segments)) & live.keys()
    per_segment = [_segment_statistics(core, s) for s in segments]
    created = [int(s.pb.created_at) for s in segments if s.pb.HasField("created_at")]
    # an untrained vector index (pylance's train=False) has no type to report yet
    unset = _untrained_vector(segments[0])
    return {
        "index_type": "N/A" if unset else index_type(core, segments[0]),
        "name": name,
        "num_indices": len(segments),
        "num_segments": len(segments),
        "indices": per_segment,
        "segments": per_segment,
        "num_indexed_fragments": len(covered),
        "num_indexed_rows": sum(live[f] for f in covered),
        "num_unindexed_fragments": len(live.keys() - covered),
        "num_unindexed_rows": sum(n for f, n in live.items() if f not in covered),
        "num_indexed_rows_per_delta": [
            sum(live.get(f, 0) for f in s.fragment_ids or ()) for s in segments
        ],
        "updated_at_timestamp_ms": max(created) if created else None,
    }


def _untrained_vector(entry: IndexEntry) -> bool:
    return entry.details_type.endswith("VectorIndexDetails") and untrained(
        entry.files, entry.fragment_ids
    )


def _segment_statistics(core: Core, entry: IndexEntry) -> dict[str, Any]:
    if _untrained_vector(entry):
        return {}
    kind = scalar_kind(entry)
    store, directory = _where(core, entry)
    if kind == "BTREE":
        index = BTreeIndex.load(store, directory)
        return {
            "min": _shown_scalar(index.mins[0]) if index.pages else None,
            "max": _shown_scalar(index.maxs[-1]) if index.pages else None,
            "num_pages": index.pages,
        }
    if kind == "BITMAP":
        return {"num_bitmaps": len(BitmapIndex.load(store, directory).keys)}
    if entry.details_type.endswith("VectorIndexDetails"):
        return _vector_statistics(store, directory, entry)
    if entry.details_type.endswith("ZoneMapIndexDetails"):
        with IndexFile(store, f"{directory}/zonemap.lance") as f:
            size = int(f.metadata.get("rows_per_zone", b"8192"))
            return {"num_zones": f.num_rows, "rows_per_zone": size}
    if entry.details_type.endswith("BloomFilterIndexDetails"):
        with IndexFile(store, f"{directory}/bloomfilter.lance") as f:
            return {
                "type": "BloomFilter",
                "num_blocks": f.num_rows,
                "number_of_items": int(f.metadata.get("bloomfilter_item", b"8192")),
                "probability": float(f.metadata.get("bloomfilter_probability", b"0.00057")),
            }
    if kind == "NGRAM":
        with IndexFile(store, f"{directory}/{POSTINGS_FILE}") as f:
            return {"num_ngrams": f.num_rows}
    if kind == "RTREE":
        return RTreeIndex.load(store, directory).statistics()
    if entry.details_type.endswith("LabelListIndexDetails"):
        with IndexFile(store, f"{directory}/bitmap_page_lookup.lance") as f:
            return {"num_bitmaps": f.num_rows}
    return {"index_type": index_type(core, entry), "uuid": entry.uuid}


def _vector_statistics(store: Any, directory: str, entry: IndexEntry) -> dict[str, Any]:
    """A vector index segment's figures as pylance reports them: type, metric, partitions
    and their sizes, the storage ("sub index"), the centroids (unless
    LANCE_INCLUDE_VECTOR_CENTROIDS=false, as pylance) and the k-means loss."""
    index = open_vector_index(store, directory, entry.uuid, entry.name)
    storage, metric = index.storage, index.metric
    if isinstance(storage, ProductQuantizer):
        sub: dict[str, Any] = {
            "metric_type": "l2" if storage.residual else metric,
            "nbits": storage.bits,
            "num_sub_vectors": storage.num_sub_vectors,
            "dimension": index.dimension,
            "index_type": "PQ",
            "transposed": True,
        }
    elif isinstance(storage, ScalarQuantizer):
        sub = {
            "dim": index.dimension,
            "num_bits": 8,
            "bounds": {"start": storage.start, "end": storage.end},
            "index_type": "SQ",
            "metric_type": metric,
        }
    elif isinstance(storage, RaBitQ):  # its storage metadata, as written
        sub = {
            "rotate_mat_position": None,
            "fast_rotation_signs": storage.signs.tolist(),
            "rotation_type": "fast",
            "code_dim": storage.dimension,
            "num_bits": storage.num_bits,
            "packed": storage.packed,
            "query_estimator": "raw_query",
            "index_type": "RQ",
            "metric_type": metric,
        }
    else:
        sub = {"dim": index.dimension, "index_type": "FLAT", "metric_type": metric}
    if index.hnsw:  # the first partition's graph, then the storage, as pylance reports it
        sub = {**index.graph_metadata[0], **sub, "index_type": "HNSW"}
    with IndexFile(store, f"{directory}/{VECTOR_INDEX_FILE}") as f:
        ivf = read_message(f, IVF_KEY, index_pb2.IVF)
    out: dict[str, Any] = {
        "index_type": index.kind,
        "uuid": entry.uuid,
        "uri": store.uri_of(f"{directory}/{VECTOR_INDEX_FILE}"),
        "metric_type": metric,
        "num_partitions": index.ivf.num_partitions,
        "sub_index": sub,
        "partitions": [{"size": int(n)} for n in index.ivf.lengths],
    }
    if os.environ.get("LANCE_INCLUDE_VECTOR_CENTROIDS", "true").lower() != "false":
        out["centroids"] = index.ivf.centroids.astype(float).tolist()
    out["loss"] = ivf.loss if ivf.HasField("loss") else None
    out["index_file_version"] = "V3"
    return out


def _shown_scalar(scalar: Any) -> str:
    """An Arrow scalar as pylance's statistics print it: timestamps as their integer count
    of units (as Rust's Display of the value), others by `_shown`."""
    if pa.types.is_timestamp(scalar.type) and scalar.is_valid:
        return str(scalar.value)
    return _shown(scalar.as_py())


def _shown(value: Any) -> str:
    """A value as pylance's statistics print it (Rust's Display: 1.0 is "1", NaN "NaN",
    null "NULL")."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):  # binaries in hex, as Rust prints them
        return value.hex()
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
    return str(value)


def _where(core: Core, entry: IndexEntry) -> tuple[Any, str]:
    base = entry.pb.base_id if entry.pb.HasField("base_id") else None
    return core.resolve(entry.directory, base, relative_to_root=True)


def _by_name(core: Core) -> dict[str, list[IndexEntry]]:
    """The version's indices by name, its fragment reuse index too (pylance lists it)."""
    out: dict[str, list[IndexEntry]] = {}
    for e in indices_of(core.manifest, system=True):
        if not e.is_system or e.name == FRAG_REUSE_INDEX:
            out.setdefault(e.name, []).append(e)
    return out


def _live_rows(core: Core) -> dict[int, int]:
    """Fragment id -> live rows, from the manifest."""
    out = {}
    for f in core.manifest.pb.fragments:
        deleted = f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0
        out[int(f.id)] = int(f.physical_rows) - int(deleted)
    return out


def remap_row_addrs(core: Core, addrs: Any) -> pa.Array | None:
    """pylance's `remap_row_addrs`: row addresses moved across the compactions the
    version's fragment reuse index records (null: a row a compaction dropped; an address
    of no such compaction unchanged); None without a fragment reuse index."""
    reuse = frag_reuse_of(core.manifest)
    if reuse is None:
        return None
    try:
        given = addrs if isinstance(addrs, (pa.Array, pa.ChunkedArray)) else pa.array(addrs)
        given = given.cast(pa.uint64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise InvalidInputError(f"{core.uri}: remap_row_addrs takes row addresses: {e}") from None
    if isinstance(given, pa.ChunkedArray):
        given = given.combine_chunks()
    valid = given.is_valid().to_numpy(zero_copy_only=False)
    moved, alive = reuse.apply(given.fill_null(0).to_numpy())
    return pa.array(moved, pa.uint64(), mask=~(alive & valid))
