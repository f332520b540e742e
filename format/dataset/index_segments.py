"""What every index segment a build writes shares: the Lance file version of its files
(the dataset's storage version; 2.0 for a legacy dataset, as pylance writes them) and its
manifest record (`IndexMetadata`)."""

from __future__ import annotations

import time
import uuid as _uuid
from collections.abc import Iterable

from google.protobuf import any_pb2
from pyroaring import BitMap

from quiver.format.dataset.core import DatasetCore
from quiver.format.proto import table_pb2

__all__ = ["index_file_version", "segment_record"]


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
