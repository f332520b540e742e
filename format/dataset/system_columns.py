"""pylance's system columns that are not stored: `_rowoffset`, `_row_created_at_version`
and `_row_last_updated_at_version`, computed from row addresses.

`_rowoffset` is a row's position among the live rows of the whole version (the index
`take` uses), whatever fragments a scan reads; the two version columns come from the
fragments' row version sequences (version 1 where a fragment records none, as pylance
reads them). pylance accepts the version columns in filters, not `_rowoffset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.numeric import unique_sorted
from quiver.format.proto import table_pb2
from quiver.format.table.deletion import deletion_file_path, read_deletion_file

if TYPE_CHECKING:  # fragments import the scan, which imports this module
    from quiver.format.dataset.fragment import LanceFragment

ROW_OFFSET = "_rowoffset"
CREATED_AT = "_row_created_at_version"
LAST_UPDATED_AT = "_row_last_updated_at_version"
SYSTEM_FIELDS: dict[str, pa.Field] = {
    name: pa.field(name, pa.uint64()) for name in (ROW_OFFSET, CREATED_AT, LAST_UPDATED_AT)
}
# the system columns a filter may use (pylance: "Column _rowoffset does not exist")
FILTERABLE = (CREATED_AT, LAST_UPDATED_AT)


class SystemColumns:
    """Computes system columns for rows given by address, over one dataset version."""

    def __init__(self, core: DatasetCore, fragments: Sequence[LanceFragment]) -> None:
        self._core = core
        self._fragments = {f.fragment_id: f for f in fragments}
        self._starts: dict[int, int] | None = None

    def _fragment(self, fragment_id: int) -> LanceFragment:
        frag = self._fragments.get(fragment_id)
        if frag is None:  # addresses only ever come from the fragments scanned
            raise KeyError(f"{self._core.uri}: fragment {fragment_id} is not being read")
        return frag

    def _live_starts(self) -> dict[int, int]:
        """Fragment id -> live rows of the version before it."""
        if self._starts is None:
            counts = []
            for pb in self._core.manifest.pb.fragments:
                known = self._fragments.get(int(pb.id))
                if known is not None:
                    counts.append(known.count_rows())
                else:
                    counts.append(int(pb.physical_rows) - _deleted_rows(self._core, pb))
            ids = [int(pb.id) for pb in self._core.manifest.pb.fragments]
            starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)[:-1]])
            self._starts = dict(zip(ids, starts.tolist(), strict=True))
        return self._starts

    def arrays(self, addresses: np.ndarray, names: Sequence[str]) -> list[pa.Array]:
        """The columns `names` (system column names) for rows at `addresses` (uint64)."""
        addresses = np.asarray(addresses, dtype=np.uint64)
        fids = (addresses >> np.uint64(32)).astype(np.int64)
        offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
        out = {name: np.empty(len(addresses), np.uint64) for name in names}
        unique = unique_sorted(fids)
        for fid in unique:
            sel = slice(None) if len(unique) == 1 else fids == fid
            frag = self._fragment(int(fid))
            rows = offsets[sel]
            if ROW_OFFSET in out:
                deleted = frag.deleted_offsets.astype(np.int64)
                before = np.searchsorted(deleted, rows) if len(deleted) else 0
                out[ROW_OFFSET][sel] = self._live_starts()[int(fid)] + rows - before
            if CREATED_AT in out:
                out[CREATED_AT][sel] = frag.created_at_versions[rows]
            if LAST_UPDATED_AT in out:
                out[LAST_UPDATED_AT][sel] = frag.last_updated_at_versions[rows]
        return [pa.array(out[name], pa.uint64()) for name in names]

    def add(self, batch: pa.RecordBatch, names: Sequence[str]) -> pa.RecordBatch:
        """`batch` (which holds `_rowaddr`) with the system columns `names` appended."""
        if not names:
            return batch
        arrays = self.arrays(batch.column("_rowaddr").to_numpy(), names)
        fields = list(batch.schema) + [SYSTEM_FIELDS[n] for n in names]
        return pa.RecordBatch.from_arrays(
            list(batch.columns) + arrays, schema=pa.schema(fields, metadata=batch.schema.metadata)
        )


def _deleted_rows(core: DatasetCore, pb: table_pb2.DataFragment) -> int:
    """How many rows of a fragment are deleted (its deletion file is read only where the
    manifest does not record the count)."""
    if not pb.HasField("deletion_file"):
        return 0
    d = pb.deletion_file
    if d.num_deleted_rows:
        return int(d.num_deleted_rows)
    bitmap = d.file_type == table_pb2.DeletionFile.BITMAP
    path = deletion_file_path(int(pb.id), d.read_version, d.id, bitmap)
    store, path = core.resolve(path, d.base_id if d.HasField("base_id") else None)
    return len(read_deletion_file(store, path, d.file_type))
