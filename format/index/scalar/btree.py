"""BTREE indices as pylance writes them: `page_lookup.lance` (min, max, null_count and
page_idx of each page) over `page_data.lance` (every indexed value, sorted with nulls first,
beside its row id; page N is rows [N * batch_size, (N + 1) * batch_size)).

A search picks the pages whose [min, max] meets the query's intervals, reads them and
evaluates the exact predicate on their values. The file is sorted, so the matches of one
interval are one run of rows: the rows just outside the pages read are checked to lie
outside the interval, and if not (pages no longer aligned, as after pylance drops rows from
pages when remapping) every value is read instead. Answers never depend on the alignment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.index.files import IndexFile
from quiver.format.index.scalar.query import Bounds, Leaf
from quiver.format.index.scalar.rows import union_all
from quiver.format.io.store import ObjectStore

LOOKUP_FILE = "page_lookup.lance"
DATA_FILE = "page_data.lance"
DEFAULT_BATCH_SIZE = 4096
VALUES, IDS = "values", "ids"


@dataclass(frozen=True)
class BTreeIndex:
    """The page lookup of one BTREE index (small, kept in memory) and where its pages are."""

    store: ObjectStore
    directory: str
    mins: pa.Array  # per page, in page order
    maxs: pa.Array
    null_counts: np.ndarray
    batch_size: int

    @classmethod
    def load(cls, store: ObjectStore, directory: str) -> BTreeIndex:
        """Read the page lookup of the index in `directory` (relative to `store`)."""
        lookup = IndexFile(store, f"{directory}/{LOOKUP_FILE}")
        try:
            table = lookup.read(["min", "max", "null_count", "page_idx"])
            batch_size = int(lookup.metadata.get("batch_size", b"%d" % DEFAULT_BATCH_SIZE))
        finally:
            lookup.close()
        order = np.argsort(table.column("page_idx").to_numpy(), kind="stable")
        table = table.take(pa.array(order))
        return cls(
            store,
            directory,
            table.column("min").combine_chunks(),
            table.column("max").combine_chunks(),
            table.column("null_count").to_numpy().astype(np.int64),
            batch_size,
        )

    @property
    def pages(self) -> int:
        return len(self.mins)

    def search(self, leaf: Leaf) -> np.ndarray:
        """Sorted row ids where `leaf`'s predicate is TRUE among the indexed rows."""
        data = IndexFile(self.store, f"{self.directory}/{DATA_FILE}")
        try:
            spans = self._spans(leaf, data)
            if spans is None:
                spans = [(0, data.num_rows)]
            found = []
            for start, stop in spans:
                rows = data.read([VALUES, IDS], start, stop)
                keep = leaf.matches(rows.column(VALUES).combine_chunks())
                found.append(rows.column(IDS).to_numpy()[keep])
            return union_all(found)
        finally:
            data.close()

    def _spans(self, leaf: Leaf, data: IndexFile) -> list[tuple[int, int]] | None:
        """Row spans of page_data that hold every match, or None for all of it."""
        n, size = data.num_rows, self.batch_size
        if leaf.only_nulls:
            pages = np.flatnonzero(self.null_counts > 0)
            if not len(pages):
                return []
            stop = min((int(pages[-1]) + 1) * size, n)
            after = self._value(data, stop)
            return [(0, stop)] if after is None or after.is_valid else None
        if leaf.intervals is None or self._negative_nan_first(leaf):
            return None
        spans = []
        for bounds in leaf.intervals:
            span = self._interval(leaf, bounds, data)
            if span is None:
                return None
            if span[1] > span[0]:
                spans.append(span)
        return _merge(spans)

    def _interval(self, leaf: Leaf, b: Bounds, data: IndexFile) -> tuple[int, int] | None:
        """The rows of the pages meeting one interval, if the rows around them prove that
        no match lies outside; None otherwise."""
        chosen = np.ones(self.pages, dtype=bool)
        if b.lower is not None:
            chosen &= leaf.truth(b.lower, self.maxs)
        if b.upper is not None:
            # a page holding nulls and values has a null min (nulls sort first)
            open_below = self.mins.is_null().to_numpy(
                zero_copy_only=False
            ) & self.maxs.is_valid().to_numpy(zero_copy_only=False)
            chosen &= leaf.truth(b.upper, self.mins) | open_below
        pages = np.flatnonzero(chosen)
        if not len(pages):
            # every value lies in some page's [min, max]; none meets the interval
            return (0, 0)
        n, size = data.num_rows, self.batch_size
        start, stop = min(int(pages[0]) * size, n), min((int(pages[-1]) + 1) * size, n)
        before = self._value(data, start - 1)
        if before is not None and before.is_valid:
            if b.lower is None or leaf.truth(b.lower, pa.array([before]))[0]:
                return None
        after = self._value(data, stop)
        if after is not None:
            if b.upper is None or not after.is_valid or leaf.truth(b.upper, pa.array([after]))[0]:
                return None
        return (start, stop)

    def _negative_nan_first(self, leaf: Leaf) -> bool:
        """Whether the values start with a negative NaN: pylance sorts floats in total order
        (-NaN first), where filters put every NaN above all numbers, so pages cannot be
        chosen by bounds."""
        if not pa.types.is_floating(leaf.field.type) or not len(self.mins):
            return False
        mins = self.mins.to_numpy(zero_copy_only=False)
        return bool(np.any(np.isnan(mins) & np.signbit(mins)))

    @staticmethod
    def _value(data: IndexFile, row: int) -> pa.Scalar | None:
        """The value at one row of page_data, or None outside the file."""
        if row < 0 or row >= data.num_rows:
            return None
        return data.take([VALUES], np.array([row])).column(VALUES)[0]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out
