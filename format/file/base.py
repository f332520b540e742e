"""The interface every data-file reader implements, whatever the file version.

A data file holds some of a fragment's columns for all of its `physical_rows` rows. The
fragment reader asks each of its files for the same row ranges and batch size, so the
arrays they yield line up row for row and can be zipped into record batches.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.table.schema import LanceField

DEFAULT_BATCH_SIZE = 8192
# What an unexpected Arrow / numpy failure on hostile bytes looks like: readers name it as
# corruption of the file and page at fault.
DECODE_ERRORS = (pa.ArrowException, ValueError, TypeError, IndexError, OverflowError)
TOMBSTONE = -2  # a DataFile field id whose column was dropped


def split_ranges(ranges: Sequence[tuple[int, int]], batch_size: int) -> Iterator[tuple[int, int]]:
    """The steps a reader yields: each range cut at `batch_size` rows from its start."""
    for start, stop in ranges:
        for s in range(start, stop, batch_size):
            yield s, min(s + batch_size, stop)


@dataclass(frozen=True)
class PageBreaks:
    """Where one column's pages start, in rows (plus its end), and how many stored bytes a
    row of it takes: a read step that crosses one of those starts stitches the column's
    pieces together, a copy of the step's whole column."""

    starts: np.ndarray
    row_bytes: float


def page_aligned_ranges(
    ranges: Sequence[tuple[int, int]], batch_size: int, breaks: Sequence[PageBreaks]
) -> list[tuple[int, int]]:
    """`ranges` cut into steps of `batch_size // 2` to `batch_size` rows (the last of a range
    may be shorter) that end at page starts, so that few steps stitch pages.

    Each next end is chosen among the page starts up to two steps ahead (reached in one step
    or two equal ones), the end of the range and a plain full step: the one whose steps
    stitch the fewest stored bytes per row, counting a page start left less than half a step
    after it (the next step cannot stop there, so it stitches), then the farthest. Each step
    is one range of the result: `split_ranges(result, batch_size)` yields exactly them."""
    kept = [b for b in breaks if b.row_bytes > 0 and len(b.starts) > 2]  # 1 page: no stitch
    half = batch_size // 2
    if not kept or half < 1:
        return list(split_ranges(ranges, batch_size))
    # Plain lists and bisect: a column has a few dozen pages, and numpy's per-call cost made
    # this a tenth of a 2.0 full scan's Python time.
    columns = [(np.asarray(b.starts, dtype=np.int64).tolist(), b.row_bytes) for b in kept]
    candidates = sorted({x for starts, _ in columns for x in starts})

    def next_start(starts: list[int], row: int) -> int:
        """The first page start after `row` (the last page start if none)."""
        return starts[min(bisect_right(starts, row), len(starts) - 1)]

    out: list[tuple[int, int]] = []
    for first, stop in ranges:
        cur, stop = int(first), int(stop)
        while cur < stop:
            reach = min(cur + 2 * batch_size, stop)
            lo, up = bisect_left(candidates, cur + half), bisect_left(candidates, reach)
            ends = {*candidates[lo:up], min(cur + batch_size, stop), reach}
            nxt = [next_start(starts, cur) for starts, _ in columns]
            best: tuple[float, int] | None = None
            for x in ends:
                cost = 0.0
                for (starts, weight), crossed in zip(columns, nxt, strict=True):
                    after = next_start(starts, x)
                    if crossed < x or (after < x + half and after < stop and x < stop):
                        cost += weight
                if best is None or (cost, -x) < (best[0], -best[1]):  # cheapest, then farthest
                    best = (cost, x)
            assert best is not None
            x = best[1]
            if x - cur > batch_size:  # two equal steps
                mid = cur + (x - cur + 1) // 2
                out.append((cur, mid))
                cur = mid
            out.append((cur, x))
            cur = x
    return out


def check_read_args(
    path: str, ranges: Sequence[tuple[int, int]], batch_size: int, num_rows: int
) -> None:
    """Refuse a non-positive batch size and ranges that are unsorted, overlapping or outside
    [0, num_rows), naming the file."""
    if batch_size <= 0:
        raise InvalidInputError(f"{path}: batch_size must be positive, got {batch_size}")
    prev = 0
    for start, stop in ranges:
        if start < prev or stop < start or stop > num_rows:
            raise InvalidInputError(
                f"{path}: row ranges must be sorted, disjoint and within [0, {num_rows}); "
                f"got ({start}, {stop})"
            )
        prev = stop


def checked_take_indices(path: str, indices: np.ndarray, num_rows: int) -> np.ndarray:
    """`indices` as int64 after checking they are 1-D integers, sorted, unique and inside
    [0, num_rows), naming the file."""
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise InvalidInputError(f"{path}: take indices must be one-dimensional")
    if len(idx):
        if idx.dtype.kind not in "ui":
            raise InvalidInputError(f"{path}: take indices must be integers")
        # few numpy calls: a search takes a handful of rows per fragment, often
        ordered = len(idx) == 1 or bool((idx[1:] > idx[:-1]).all())
        low, high = (idx[0], idx[-1]) if ordered else (idx.min(), idx.max())
        if (idx.dtype.kind == "i" and int(low) < 0) or int(high) >= num_rows:
            raise InvalidInputError(f"{path}: take index out of range for {num_rows} rows")
        if not ordered:
            raise InvalidInputError(f"{path}: take indices must be sorted and unique")
    return idx.astype(np.int64, copy=False)


def column_map(
    path: str, fields: Sequence[int], column_indices: Sequence[int], num_columns: int
) -> dict[int, int]:
    """Field id -> column index of a v2 data file (tombstones and -1 columns skipped)."""
    if len(fields) != len(column_indices):
        raise CorruptFileError(
            path, f"DataFile lists {len(fields)} field ids but {len(column_indices)} column indices"
        )
    out: dict[int, int] = {}
    for fid, col in zip(fields, column_indices, strict=True):
        if fid == TOMBSTONE or col < 0:
            continue
        if col >= num_columns:
            raise CorruptFileError(
                path, f"field id {fid} maps to column {col} but the file has {num_columns} columns"
            )
        out[int(fid)] = int(col)
    return out


@dataclass(frozen=True)
class ListBytes:
    """Rows of a list-of-binary column: every value's bytes back to back, where each value
    starts (one more offset than values), and where each row's values start (one more
    than rows)."""

    data: np.ndarray  # uint8
    value_offsets: np.ndarray  # int64
    row_values: np.ndarray  # int64

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row i's values: their bytes back to back and their offsets from 0."""
        a, b = int(self.row_values[i]), int(self.row_values[i + 1])
        offsets = self.value_offsets[a : b + 1]
        first = int(offsets[0])
        return self.data[first : int(offsets[-1])], offsets - first

    @staticmethod
    def of(column: pa.Array | pa.ChunkedArray) -> ListBytes:
        """The flat form of an Arrow list-of-binary column (a null row holds no values)."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        lists = column.cast(pa.large_list(pa.large_binary()))
        if lists.null_count:  # a null row's offsets may span values: rebuild it empty
            rows = [x if x is not None else [] for x in lists.to_pylist()]
            lists = pa.array(rows, pa.large_list(pa.large_binary()))
        row_values = np.frombuffer(lists.buffers()[1], np.int64, len(lists) + 1, lists.offset * 8)
        values = lists.values
        value_offsets = np.frombuffer(
            values.buffers()[1], np.int64, len(values) + 1, values.offset * 8
        )
        data_buffer = values.buffers()[2]
        data = np.frombuffer(data_buffer, np.uint8) if data_buffer else np.zeros(0, np.uint8)
        return ListBytes(data, value_offsets.astype(np.int64), row_values.astype(np.int64))


class DataFileReader(ABC):
    """Reads columns of one data file.

    `fields` arguments are top-level dataset fields already pruned (with
    `LanceField.project_ids`) to the field ids this file stores; each returned array has
    exactly `field.arrow_type` and `stop - start` (or `len(indices)`) rows.
    """

    path: str
    num_rows: int

    @abstractmethod
    def read(
        self,
        fields: Sequence[LanceField],
        ranges: Sequence[tuple[int, int]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[list[pa.Array]]:
        """Stream `fields` over sorted, disjoint row ranges, one step per `split_ranges` item.

        Only the pages of the requested columns that overlap the ranges are fetched, and
        memory stays bounded by roughly one page per column plus one step.
        """

    @abstractmethod
    def take(self, fields: Sequence[LanceField], indices: np.ndarray) -> list[pa.Array]:
        """The rows at sorted, unique physical offsets `indices` (uint64), one array per field."""

    def read_at_once(
        self, fields: Sequence[LanceField], ranges: Sequence[tuple[int, int]]
    ) -> list[pa.Array]:
        """`fields` over a few short, sorted, disjoint row `ranges`, back to back, one array
        per field: the lookups of an index file at scattered places, all read together
        where the format allows (here: a streaming `read` of them)."""
        most = max((b - a for a, b in ranges), default=1)
        steps = list(self.read(fields, ranges, batch_size=max(1, most)))
        if not steps:
            return [pa.array([], type=f.arrow_type) for f in fields]
        return [pa.concat_arrays([s[i] for s in steps]) for i in range(len(fields))]

    def page_breaks(self, fields: Sequence[LanceField]) -> list[PageBreaks]:
        """The page starts of the row-aligned columns `fields` read, for `page_aligned_ranges`
        (none where the format has no such pages or they are not known cheaply)."""
        return []

    def take_list_bytes(self, field: LanceField, indices: np.ndarray) -> ListBytes | None:
        """Rows at sorted, unique `indices` of a list-of-binary `field` as flat bytes, where
        the reader has a lean way to (an index's posting lists); None: take them as lists."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release any open handle."""


@dataclass(frozen=True)
class WrittenFile:
    """What a finished data file holds, as the manifest's `DataFile` entry needs it."""

    num_rows: int
    size_bytes: int
    fields: list[int]  # field ids, in the order of `column_indices`
    column_indices: list[int]
    major_version: int  # as recorded in the manifest (2.0 files: 2, 0)
    minor_version: int


class DataFileWriter(ABC):
    """Writes one data file, streaming: pages are flushed as they fill, so memory stays
    bounded by about one page per column whatever the number of rows."""

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Append rows; `batch` has exactly the columns and types of the writer's schema."""

    @abstractmethod
    def finish(self) -> WrittenFile:
        """Flush the remaining pages, write metadata and footer; the sink is then complete."""

    def add_global_buffer(self, data: bytes) -> int:
        """Write `data` as a global buffer of the file now and return its position in the
        global buffer table (1, 2, ...: 0 is the file descriptor written by `finish`).
        Index files keep protobuf messages there (centroids, codebooks)."""
        if self._finished:
            raise InvalidInputError(f"{self.path}: add_global_buffer() after finish()")
        self._global_buffers.append(self._out.buffer(data))
        return len(self._global_buffers)
