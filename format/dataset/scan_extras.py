"""pylance 14's scan restrictions beyond filters, and its scan statistics.

- `row_addr_allowlist` / `row_addr_blocklist` (`ScannerBuilder.row_addr_prefilter`): rows
  kept to those a serialized row id map names (the format of a BITMAP index's maps: per
  fragment, a portable roaring bitmap of offsets, none for all of its rows), and rid of
  those another names. Keyed by `_rowid` (a row's address without stable row ids), applied
  before a search ranks (a prefilter) and before a scan's offset and limit.
- `index_segments` (`with_index_segments`): a vector search reads only these segments of
  its index, and no other rows (pylance refuses it for anything but a vector search, and
  an empty list).
- `scan_stats_callback`: called once a scan has been read to its end with a
  `ScanStatistics` (pylance's names: `all_counts` of fragments, ranges and rows scanned,
  `bytes_read`, `iops` and `requests` of the dataset's storage meanwhile; the cache and
  index counters pylance's planner keeps are 0 here). An error in the callback is logged,
  not raised, as pylance does.
"""

from __future__ import annotations

import logging
import time
import uuid as _uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.index.scalar.rows import parse_row_id_map
from quiver.format.numeric import sorted_member

__all__ = ["MaskedScan", "RowMask", "ScanStatistics", "StatsScan", "segment_ids"]

log = logging.getLogger("quiver.scan")
_ROW_ID = "_rowid"


@dataclass(frozen=True)
class RowMask:
    """Sorted row ids a scan keeps (`allow`, None: all) and drops (`block`)."""

    allow: np.ndarray | None
    block: np.ndarray | None

    @classmethod
    def parse(cls, core: DatasetCore, allow: Any, block: Any) -> RowMask | None:
        """The mask of serialized row id maps (bytes), or None when neither is given."""
        if allow is None and block is None:
            return None
        physical = {int(f.id): int(f.physical_rows) for f in core.manifest.pb.fragments}
        return cls(*(_parsed(core.uri, v, what, physical) for v, what in
                     ((allow, "allowlist"), (block, "blocklist"))))  # fmt: skip

    def keep(self, row_ids: np.ndarray) -> np.ndarray:
        """Which of `row_ids` the mask keeps."""
        ids = np.asarray(row_ids, dtype=np.uint64)
        out = np.ones(len(ids), bool) if self.allow is None else sorted_member(self.allow, ids)
        if self.block is not None:
            out &= ~sorted_member(self.block, ids)
        return out

    def fragments(self) -> set[int] | None:
        """The fragments an allowlist names (None: every fragment may hold kept rows)."""
        if self.allow is None:
            return None
        return set(np.unique(self.allow >> np.uint64(32)).tolist())


def _parsed(uri: str, value: Any, what: str, physical: dict[int, int]) -> np.ndarray | None:
    if value is None:
        return None
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidInputError(
            f"{uri}: the row address {what} must be bytes (a serialized row id map), not "
            f"{type(value).__name__}"
        )
    try:
        return parse_row_id_map(bytes(value), physical, f"row address {what}")
    except CorruptFileError as e:
        raise InvalidInputError(
            f"{uri}: the row address {what} is not a serialized row id map: {e}"
        ) from None


def segment_ids(uri: str, given: Iterable[Any]) -> tuple[str, ...]:
    """`index_segments` as uuid strings (strings or `uuid.UUID`s); an empty list refused,
    as pylance refuses it."""
    if isinstance(given, (str, bytes)):
        given = [given]
    out = []
    for g in given:
        try:
            out.append(str(g if isinstance(g, _uuid.UUID) else _uuid.UUID(str(g))))
        except ValueError:
            raise InvalidInputError(f"{uri}: index segment {g!r} is not a uuid") from None
    if not out:
        raise InvalidInputError(f"{uri}: with_index_segments does not accept an empty list")
    return tuple(out)


class MaskedScan:
    """A scan's rows kept to a `RowMask` before its offset and limit: the scan `make`
    plans (with `_rowid`, no offset or limit) read over the fragments the mask can keep."""

    def __init__(
        self,
        make: Callable[..., Any],
        mask: RowMask,
        *,
        limit: int | None,
        offset: int | None,
        with_row_id: bool,
    ) -> None:
        self._inner = make(with_row_id=True, limit=None, offset=None)
        self._mask = mask
        self._limit, self._offset = limit, offset or 0
        self._keep_id = with_row_id
        schema = self._inner.projected_schema
        self.projected_schema = schema if with_row_id else schema.remove(
            schema.get_field_index(_ROW_ID)
        )  # fmt: skip

    @property
    def schema(self) -> pa.Schema:
        return self.projected_schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        skip, left = self._offset, self._limit
        for batch in self._inner.to_batches():
            if left is not None and left <= 0:
                return
            kept = batch.filter(pa.array(self._mask.keep(batch.column(_ROW_ID).to_numpy())))
            if skip:
                dropped = min(skip, kept.num_rows)
                kept, skip = kept.slice(dropped), skip - dropped
            if left is not None:
                kept = kept.slice(0, left)
                left -= kept.num_rows
            if not self._keep_id:
                kept = kept.drop_columns([_ROW_ID])
            if kept.num_rows:
                yield kept

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.projected_schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        return sum(b.num_rows for b in self.to_batches())

    def explain_plan(self, verbose: bool = False) -> str:
        kept = "all" if self._mask.allow is None else f"{len(self._mask.allow):,}"
        dropped = 0 if self._mask.block is None else len(self._mask.block)
        head = f"Row address mask: {kept} rows allowed, {dropped:,} blocked, then offset and limit"
        return head + "\n" + self._inner.explain_plan(verbose)


@dataclass
class ScanStatistics:
    """pylance's `ScanStatistics` of one scan, as far as Quiver counts them."""

    all_counts: dict[str, int] = field(default_factory=dict)
    all_times: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    iops: int = 0
    requests: int = 0
    index_cache_hits: int = 0
    index_cache_misses: int = 0
    index_comparisons: int = 0
    indices_loaded: int = 0
    parts_loaded: int = 0


class StatsScan:
    """A scan that calls `callback` with its `ScanStatistics` once read to its end."""

    def __init__(self, inner: Any, callback: Callable[[ScanStatistics], Any], core: Any) -> None:
        if not callable(callback):
            raise InvalidInputError(f"{core.uri}: scan_stats_callback must be callable")
        self._inner, self._callback, self._core = inner, callback, core

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        before = self._core.store.io.snapshot()
        start = time.perf_counter_ns()
        rows = 0
        for batch in self._inner.to_batches():
            rows += batch.num_rows
            yield batch
        after = self._core.store.io.snapshot()
        fragments = len(self._core.manifest.pb.fragments)
        iops = after.read_iops - before.read_iops
        stats = ScanStatistics(
            all_counts={
                "fragments_scanned": fragments,
                "ranges_scanned": fragments,
                "rows_scanned": rows,
            },
            all_times={"elapsed_compute": time.perf_counter_ns() - start},
            bytes_read=after.read_bytes - before.read_bytes,
            iops=iops,
            requests=iops,
        )
        try:
            self._callback(stats)
        except Exception:  # noqa: BLE001 - pylance logs a callback's error, never raises it
            log.exception("%s: the scan_stats_callback failed", self._core.uri)

    def to_table(self) -> pa.Table:
        schema = getattr(self._inner, "projected_schema", None)
        batches = list(self.to_batches())
        if schema is None:
            return pa.Table.from_batches(batches)
        return pa.Table.from_batches(batches, schema=schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._inner.projected_schema, self.to_batches())
