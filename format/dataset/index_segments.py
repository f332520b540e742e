"""What every index segment a build writes shares: the Lance file version of its files
(the dataset's storage version; 2.0 for a legacy dataset, as pylance writes them), its
manifest record (`IndexMetadata`), and the segments a merge carries, as of now."""

from __future__ import annotations

import contextlib
import time
import uuid as _uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace

from google.protobuf import any_pb2
from pyroaring import BitMap

from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import UnsupportedFeatureError
from quiver.format.index.scalar.remap import discard, remap_index
from quiver.format.proto import table_pb2
from quiver.format.table.indices import IndexEntry, frag_reuse_of

__all__ = ["carried_as_of_now", "index_file_version", "segment_record"]


def index_file_version(core: DatasetCore) -> str:
    """The file version of a build's index files: the dataset's storage version, 2.0 for a
    legacy dataset."""
    version = core.data_storage_version
    return "2.0" if version in ("0.1", "legacy") else version


def segment_record(
    new_uuid: _uuid.UUID,
    name: str,
    field_id: int,
    dataset_version: int,
    covers: Iterable[int],
    details: tuple[str, bytes],
    index_version: int,
    files: Iterable[tuple[str, int]],
) -> table_pb2.IndexMetadata:
    """A segment's manifest record: its fragments, details (type URL, value), index
    version and files (sorted by name), created now."""
    type_url, value = details
    return table_pb2.IndexMetadata(
        uuid=table_pb2.UUID(uuid=new_uuid.bytes),
        name=name,
        fields=[field_id],
        dataset_version=dataset_version,
        fragment_bitmap=BitMap(covers).serialize(),
        index_details=any_pb2.Any(type_url=type_url, value=value),
        index_version=index_version,
        created_at=time.time_ns() // 1_000_000,
        files=[table_pb2.IndexFile(path=p, size_bytes=s) for p, s in sorted(files)],
    )


@contextlib.contextmanager
def carried_as_of_now(
    core: DatasetCore, kind: str, segments: list[IndexEntry]
) -> Iterator[list[IndexEntry]]:
    """INVERTED segments a merge carries (their partitions kept as they are), the moves of
    the version's fragment reuse index applied first, as pylance merges them: a segment
    holding rows of fragments those compactions rewrote is remapped into a scratch folder
    beside it (its documents then at the rows' addresses now, those the compactions
    dropped gone), removed once the merge is written. One Quiver cannot write again
    (format 1) is carried as it is: readers replay the moves over it."""
    reuse = frag_reuse_of(core.manifest)
    if reuse is None or kind != "INVERTED":  # (a BLOOMFILTER's zones are replayed when read)
        yield segments
        return
    rewritten = set(reuse.old_physical_rows)
    out, scratch = [], []
    try:
        for e in segments:
            recorded = (
                set(BitMap.deserialize(e.pb.fragment_bitmap)) if e.pb.fragment_bitmap else set()
            )
            if not recorded & rewritten:
                out.append(e)
                continue
            base = e.pb.base_id if e.pb.HasField("base_id") else None
            store, directory = core.resolve(e.directory, base, relative_to_root=True)
            try:
                r = remap_index(store, directory, "INVERTED", e.pb, reuse.address_map)
            except UnsupportedFeatureError:
                out.append(e)
                continue
            scratch.append((store, r))
            out.append(replace(e, uuid=str(_uuid.UUID(bytes=bytes(r.rewritten.new_id.uuid)))))
        yield out
    finally:
        for store, r in scratch:
            discard(store, r.directory, [f.path for f in r.rewritten.new_index_files])
