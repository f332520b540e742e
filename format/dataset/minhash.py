"""pylance's MinHash search: `nearest=MinHashQuery(text, column)` over a MINHASHLSH index.

    ds.to_table(nearest=MinHashQuery("some near duplicate text", "text"), limit=10)

The query text is signed as the index signs its rows (`format.index.scalar.minhash`), and
the rows sharing a band key with it are the candidates: in each segment, through its band
table; in fragments no segment covers (appended since), by signing their texts on the fly,
unless `fast_search`. Each candidate's `_distance` is 1 - the fraction of signature values
it shares with the query; the `limit` (default 10) nearest after `offset` come back, nearest
first, ties by row id. Deleted rows and rows of fragments a segment no longer covers are
never answers; a filter keeps rows before the ranking with `prefilter`, after it without.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.answers import TableAnswer
from quiver.format.dataset.fragment import LanceFragment, fragments_of
from quiver.format.dataset.nearest import (
    DISTANCE,
    LocatedSearch,
    NearestSearch,
    take_answers,
    with_measure,
)
from quiver.format.dataset.scan import ROW_ID_FIELD, Scanner
from quiver.format.dataset.scan_extras import RowMask
from quiver.format.errors import InvalidInputError
from quiver.format.index.scalar.minhash import (
    MINHASH_DETAILS,
    MinHashParams,
    distances,
    search_segment,
)
from quiver.format.index.vector.build import untrained
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of

if TYPE_CHECKING:
    from quiver.format.dataset.core import DatasetCore

DEFAULT_LIMIT = 10


class MinHashQuery:
    """A near-duplicate search of `text` in `column` (pylance's `lance.query.MinHashQuery`,
    which Quiver takes too)."""

    def __init__(self, text: str, column: str) -> None:
        self.text = text
        self.column = column

    def __repr__(self) -> str:
        return f"MinHashQuery(text={self.text!r}, column={self.column!r})"


def is_minhash_query(nearest: Any) -> bool:
    """Whether `nearest` is a MinHash query (Quiver's or pylance's class)."""
    return isinstance(nearest, MinHashQuery) or (
        type(nearest).__name__ == "MinHashQuery"
        and hasattr(nearest, "text")
        and hasattr(nearest, "column")
    )


def search_nearest(core: DatasetCore, nearest: Any, **options: Any) -> Any:
    """The planned search of `scanner(nearest=...)`: a MinHash search for a MinHash query
    (with `limit`, `offset` and `fast_search`), else a vector search."""
    if is_minhash_query(nearest):
        options.pop("index_segments", None)  # (refused for these before)
        return MinHashSearch(core, nearest, **options)
    for used_by_minhash_only in ("limit", "offset", "fast_search"):
        options.pop(used_by_minhash_only, None)
    return NearestSearch(core, nearest, **options)


def minhash_entries(core: DatasetCore, column: str) -> list[IndexEntry]:
    """The segments of the MINHASHLSH index of `column` (empty when there is none)."""
    field_id = core.lance_schema.field(column).id
    entries = [
        e
        for e in indices_of(core.manifest)
        if e.details_type == MINHASH_DETAILS and field_id in e.field_ids
    ]
    first = entries[0].name if entries else None
    return [e for e in entries if e.name == first]


class MinHashSearch(LocatedSearch, TableAnswer):
    """One planned MinHash search over a dataset version."""

    def __init__(
        self,
        core: DatasetCore,
        query: Any,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        prefilter: bool = False,
        with_row_id: bool = False,
        with_row_address: bool = False,
        limit: int | None = None,
        offset: int | None = None,
        fast_search: bool = False,
        autoproject: bool = True,
        row_mask: RowMask | None = None,
    ) -> None:
        self.core = core
        self.row_mask = row_mask  # pylance's row address prefilter
        text, self.column = query.text, query.column
        if not isinstance(text, str) or not isinstance(self.column, str):
            raise InvalidInputError(f"{core.uri}: a MinHashQuery needs a text and a column name")
        self.text = text
        kind = core.lance_schema.field(self.column).to_arrow().type  # ColumnNotFoundError
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise InvalidInputError(f"{core.uri}: column {self.column!r} does not hold text")
        self.entries = minhash_entries(core, self.column)
        if not self.entries:
            raise InvalidInputError(
                f"{core.uri}: a MinHash search needs a MINHASHLSH index on {self.column!r}"
            )
        self.params = MinHashParams.from_details(self.entries[0].details, core.uri)
        for e in self.entries[1:]:
            if MinHashParams.from_details(e.details, core.uri) != self.params:
                raise InvalidInputError(f"{core.uri}: the segments of {e.name!r} differ")
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and (isinstance(value, bool) or int(value) < 0):
                raise InvalidInputError(f"{core.uri}: {name} must be non-negative")
        self.limit = DEFAULT_LIMIT if limit is None else int(limit)
        self.offset = int(offset or 0)
        self.filter, self.prefilter, self.fast_search = filter, prefilter, fast_search
        self.autoproject = autoproject
        self.names = list(core.lance_schema.names) if columns is None else list(columns)
        self._fragments = fragments_of(core)
        self._scanner = Scanner(
            core,
            self._fragments,
            columns=[c for c in self.names if c != DISTANCE],
            filter=filter,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
        )

    # -- schema ---------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        """The projection, `_distance` (float32) where the columns put it or after them
        (before the row id columns), as pylance's."""
        base = self._scanner.projected_schema
        fields = with_measure(base, self.names, DISTANCE, self.autoproject)
        return pa.schema(fields, metadata=base.metadata)

    projected_schema = schema

    # -- searching ------------------------------------------------------------------------
    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, distances) of the answers, nearest first (before a postfilter)."""
        signature, signed = self.params.sign(pa.array([self.text], pa.large_string()))
        if not signed[0]:
            return np.empty(0, np.uint64), np.empty(0, np.float32)
        keys = self.params.band_keys(signature)[0]
        allowed = self._allowed()
        ids, dist = [], []
        covered: set[int] = set()
        for entry in self.entries:
            if untrained(entry.files, entry.fragment_ids):
                continue
            inside = entry.fragment_ids or set()
            covered |= inside
            found, d = self._segment(entry, keys, signature[0])
            if len(found):
                addr, live = self.locator.addresses(found)
                live &= np.isin(addr >> np.uint64(32), np.array(sorted(inside), np.uint64))
                ids.append(found[live])
                dist.append(d[live])
        if not self.fast_search:
            rest = [f for f in self._fragments if f.fragment_id not in covered]
            found, d = self._unindexed(rest, keys, signature[0])
            ids.append(found)
            dist.append(d)
        row_ids = np.concatenate(ids) if ids else np.empty(0, np.uint64)
        found_dist = np.concatenate(dist) if dist else np.empty(0, np.float32)
        if self.row_mask is not None:
            keep = self.row_mask.keep(row_ids)
            row_ids, found_dist = row_ids[keep], found_dist[keep]
        if allowed is not None:
            keep = np.isin(row_ids, allowed)
            row_ids, found_dist = row_ids[keep], found_dist[keep]
        order = np.lexsort((row_ids, found_dist))[self.offset : self.offset + self.limit]
        return row_ids[order].astype(np.uint64), found_dist[order].astype(np.float32)

    def _segment(
        self, entry: IndexEntry, keys: np.ndarray, signature: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        base = entry.pb.base_id if entry.pb.HasField("base_id") else None
        store, directory = self.core.resolve(entry.directory, base, relative_to_root=True)
        row_ids, signatures = search_segment(store, directory, self.params, keys)
        row_ids = row_ids.astype(np.uint64)
        reuse = frag_reuse_of(self.core.manifest)
        if reuse is not None:  # rows compactions moved (GONE: dropped, never live)
            row_ids = reuse.apply(row_ids)[0]
        return row_ids, distances(signature, signatures)

    def _unindexed(
        self, fragments: list[LanceFragment], keys: np.ndarray, signature: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows of fragments no segment covers sharing a band key with the query."""
        ids, dist = [], []
        wanted = np.sort(keys)
        scan = Scanner(self.core, fragments, columns=[self.column], with_row_id=True)
        for batch in scan.to_batches():
            sigs, signed = self.params.sign(batch.column(0))
            row_keys = self.params.band_keys(sigs)
            hit = signed & np.isin(row_keys, wanted).any(axis=1)
            if hit.any():
                ids.append(batch.column(ROW_ID_FIELD.name).to_numpy()[hit])
                dist.append(distances(signature, sigs[hit]))
        if not ids:
            return np.empty(0, np.uint64), np.empty(0, np.float32)
        return np.concatenate(ids).astype(np.uint64), np.concatenate(dist)

    def _allowed(self) -> np.ndarray | None:
        """With a prefilter, the row ids the filter keeps (sorted), else None."""
        if not (self.prefilter and self.filter is not None):
            return None
        scan = Scanner(self.core, self._fragments, columns=[], filter=self.filter, with_row_id=True)
        ids = [b.column(ROW_ID_FIELD.name).to_numpy() for b in scan.to_batches()]
        return np.sort(np.concatenate(ids).astype(np.uint64)) if ids else np.empty(0, np.uint64)

    def to_table(self) -> pa.Table:
        """Run the search: the answers with their `_distance`, nearest first."""
        row_ids, dist = self.candidates()
        postfilter = self.filter is not None and not self.prefilter
        rows, keep = take_answers(self.core, self._scanner, self.locator, row_ids, postfilter)
        if keep is not None:
            dist = dist[keep]
        columns = [
            pa.array(dist, pa.float32()) if f.name == DISTANCE else rows.column(f.name)
            for f in self.schema
        ]
        return pa.Table.from_arrays(columns, schema=self.schema)

    def explain_plan(self, verbose: bool = False) -> str:
        """What the search does, in Quiver's terms."""
        segments = [e for e in self.entries if not untrained(e.files, e.fragment_ids)]
        return (
            f"MinHashSearch: column={self.column}, segments={len(segments)}, "
            f"num_hashes={self.params.num_hashes}, num_bands={self.params.num_bands}, "
            f"limit={self.limit}, offset={self.offset}, unindexed="
            f"{'skipped' if self.fast_search else 'signed on the fly'}, filter={self.filter} "
            f"({'prefilter' if self.prefilter else 'postfilter'})"
        )
