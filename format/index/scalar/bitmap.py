"""BITMAP indices as pylance writes them: `bitmap_page_lookup.lance`, one row per distinct
value (null included) with the serialized row id map of the rows holding it.

A search evaluates the exact predicate on the distinct values (kept in memory) and reads
only the bitmaps of those where it is TRUE."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.index.files import IndexFile
from quiver.format.index.scalar.query import Leaf
from quiver.format.index.scalar.rows import EMPTY, parse_row_id_map, union_all
from quiver.format.io.store import ObjectStore

LOOKUP_FILE = "bitmap_page_lookup.lance"
KEYS, BITMAPS = "keys", "bitmaps"


@dataclass(frozen=True)
class BitmapIndex:
    """The distinct values of one BITMAP index and where their bitmaps are."""

    store: ObjectStore
    directory: str
    keys: pa.Array

    @classmethod
    def load(cls, store: ObjectStore, directory: str) -> BitmapIndex:
        """Read the distinct values of the index in `directory` (relative to `store`)."""
        lookup = IndexFile(store, f"{directory}/{LOOKUP_FILE}")
        try:
            keys = lookup.read([KEYS]).column(KEYS).combine_chunks()
        finally:
            lookup.close()
        return cls(store, directory, keys)

    def search(self, leaf: Leaf, physical_rows: Mapping[int, int]) -> np.ndarray:
        """Sorted row ids where `leaf`'s predicate is TRUE among the indexed rows of the
        fragments in `physical_rows` (fragment id -> rows)."""
        hits = np.flatnonzero(leaf.matches(self.keys))
        if not len(hits):
            return EMPTY
        path = f"{self.directory}/{LOOKUP_FILE}"
        lookup = IndexFile(self.store, path)
        try:
            blobs = lookup.take([BITMAPS], hits).column(BITMAPS)
        finally:
            lookup.close()
        return union_all([parse_row_id_map(b.as_py(), physical_rows, lookup.path) for b in blobs])
