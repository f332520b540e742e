"""Nearest-neighbour search over a dataset version: pylance's `to_table(nearest=...)`.

The plan is pylance's. With a vector index on the column (and the query's metric, if given,
the index's): an IVF search of the index and its deltas (`format.index.vector.search`)
finds k * refine_factor rows per query; with a refine factor they are measured again on
their vectors and the best k kept. Fragments the index does not cover are searched exactly
and merged, every row then measured on its vector. Without an index (or `use_index`
false, or another metric) the search is exact. Deleted rows are never candidates. With
`prefilter` the filter chooses the rows searched; without, it drops rows from the k found.

A 2-D `q` is a batch of queries: the result has a `query_index` column first (int32) and up
to k rows per query, in query order, each query's rows by distance, then row id.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment, shared_fragments
from quiver.format.dataset.scan import ROW_ADDRESS_FIELD, ROW_COLUMNS, ROW_ID_FIELD, Scanner
from quiver.format.dataset.scan_extras import RowMask
from quiver.format.dataset.take import column_at
from quiver.format.errors import ColumnNotFoundError, InvalidInputError
from quiver.format.expr import filter_mask as _filter_mask
from quiver.format.index.vector.build import untrained
from quiver.format.index.vector.distance import metric_name, paired
from quiver.format.index.vector.flat import TopK, nearest_in_lists, vector_matrix
from quiver.format.index.vector.index import ReusedIndex, VectorIndex, open_vector_index
from quiver.format.index.vector.search import (
    XTR_OVERFETCH,
    Candidates,
    RowFilter,
    ivf_search,
    xtr_scores,
)
from quiver.format.numeric import sorted_member
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of

DISTANCE = "_distance"
QUERY_INDEX = "query_index"
DEFAULT_K = 10
NEAREST_KEYS = (
    "column",
    "q",
    "k",
    "metric",
    "nprobes",
    "minimum_nprobes",
    "maximum_nprobes",
    "refine_factor",
    "use_index",
    "ef",
    "distance_range",
    "search_effort",
    "approx_mode",
)
APPROX_MODES = ("fast", "normal", "accurate")
_FLOATS = (pa.float16(), pa.float32(), pa.float64())


def _count(where: str, name: str, value: Any, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise InvalidInputError(f"{where}: {name} must be an integer, not {value!r}")
    if value < minimum:
        raise InvalidInputError(f"{where}: {name} must be >= {minimum}, not {value}")
    return int(value)


@dataclass(frozen=True)
class NearestQuery:
    """A validated `nearest` request against one dataset version."""

    column: str
    queries: np.ndarray  # (n, dim) float32
    batch: bool  # q was 2-D: answer with query_index
    k: int
    metric: str | None
    minimum_nprobes: int | None
    maximum_nprobes: int | None
    refine_factor: int | None
    use_index: bool
    # distances kept: lower <= d < upper (pylance's distance_range; infinities: no bound)
    distance_range: tuple[float, float] = (-math.inf, math.inf)
    # a multivector column (lists of vectors): `queries` are the vectors of one query
    multivector: bool = False
    # nodes an HNSW graph search keeps (None: 1.5 times the rows it looks for)
    ef: int | None = None
    # pylance's initial IVF budget in [0, 1] (None: its automatic choice; see `search`)
    search_effort: float | None = None
    # how IVF_RQ segments estimate distances ("fast", "normal", "accurate"; others ignore it)
    approx_mode: str = "normal"

    @classmethod
    def parse(cls, core: DatasetCore, nearest: Any) -> NearestQuery:
        """Check a pylance-shaped `nearest` dict against the dataset's schema."""
        where = f"{core.uri}: nearest"
        if not isinstance(nearest, dict):
            raise InvalidInputError(f"{where} must be a dict, not {type(nearest).__name__}")
        unknown = sorted(set(nearest) - set(NEAREST_KEYS))
        if unknown:
            raise InvalidInputError(
                f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(NEAREST_KEYS)})"
            )
        column = nearest.get("column")
        if not isinstance(column, str):
            raise InvalidInputError(f"{where}: 'column' must name the vector column")
        schema = core.lance_schema  # a nested column by its path (the walk only for those)
        if column not in schema.names and column not in schema.column_paths().values():
            raise ColumnNotFoundError(f"{where}: column {column!r} is not in the dataset")
        dtype = schema.field_at(column).to_arrow().type
        multivector = (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) and (
            pa.types.is_fixed_size_list(dtype.value_type)
        )
        vector = dtype.value_type if multivector else dtype
        if not pa.types.is_fixed_size_list(vector) or vector.value_type not in _FLOATS:
            raise InvalidInputError(
                f"{where}: column {column!r} is {dtype}, not a vector (fixed-size list of floats)"
            )
        queries, batch = _query_matrix(nearest.get("q"), vector.list_size, f"{where} on {column!r}")
        batch &= not multivector  # several vectors are one query of a multivector column
        nprobes = _count(where, "nprobes", nearest.get("nprobes"), 1)
        lo = _count(where, "minimum_nprobes", nearest.get("minimum_nprobes"), 0)
        hi = _count(where, "maximum_nprobes", nearest.get("maximum_nprobes"), 0)
        effort = nearest.get("search_effort")
        if effort is not None:
            if isinstance(effort, bool) or not isinstance(effort, (int, float)):
                raise InvalidInputError(f"{where}: search_effort must be a number in [0, 1]")
            if not (math.isfinite(effort) and 0 <= effort <= 1):
                raise InvalidInputError(f"{where}: search_effort {effort} is not in [0, 1]")
            effort = float(effort)
        if nprobes is not None and effort is None:  # (an effort ignores nprobes)
            lo = hi = nprobes
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInputError(f"{where}: minimum_nprobes {lo} > maximum_nprobes {hi}")
        ef = _count(where, "ef", nearest.get("ef"), 1)  # HNSW only: IVF indices ignore it
        approx_mode = nearest.get("approx_mode", "normal")
        if approx_mode not in APPROX_MODES:
            raise InvalidInputError(
                f"{where}: approx_mode must be one of 'fast', 'normal', or 'accurate', got "
                f"{approx_mode!r}"
            )
        metric = nearest.get("metric")
        use_index = nearest.get("use_index", True)
        if not isinstance(use_index, bool):
            raise InvalidInputError(f"{where}: use_index must be true or false")
        return cls(
            column=column,
            queries=queries,
            batch=batch,
            k=_count(where, "k", nearest.get("k"), 1) or DEFAULT_K,
            metric=None if metric is None else metric_name(metric, where=where),
            minimum_nprobes=lo,
            maximum_nprobes=hi,
            refine_factor=_count(where, "refine_factor", nearest.get("refine_factor"), 1),
            use_index=use_index,
            distance_range=_distance_range(where, nearest.get("distance_range")),
            multivector=multivector,
            ef=ef,
            search_effort=effort,
            approx_mode=approx_mode,
        )


def _distance_range(where: str, value: Any) -> tuple[float, float]:
    """pylance's `distance_range`: (lower, upper), either None (no bound)."""
    if value is None:
        return (-math.inf, math.inf)
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or len(value) != 2:
        raise InvalidInputError(
            f"{where}: distance_range must be a tuple of (lower_bound, upper_bound)"
        )
    bounds = []
    for bound, default in zip(value, (-math.inf, math.inf), strict=True):
        if bound is None:
            bounds.append(default)
        elif isinstance(bound, bool) or not isinstance(bound, (int, float, np.number)):
            raise InvalidInputError(f"{where}: distance_range bounds must be numbers or None")
        elif math.isnan(float(bound)):
            raise InvalidInputError(f"{where}: a distance_range bound is NaN")
        else:
            bounds.append(float(bound))
    return bounds[0], bounds[1]


def _query_matrix(q: Any, dim: int, where: str) -> tuple[np.ndarray, bool]:
    """The query vector(s) as an (n, dim) float32 matrix, and whether q was a batch."""
    if q is None:
        raise InvalidInputError(f"{where}: 'q' (the query vector) is missing")
    if isinstance(q, (pa.ChunkedArray, pa.Array)):
        q = q.to_pylist() if pa.types.is_list(q.type) or pa.types.is_fixed_size_list(q.type) else q
    try:
        arr = np.asarray(q.to_numpy(zero_copy_only=False) if isinstance(q, pa.Array) else q)
        arr = arr.astype(np.float32)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"{where}: 'q' must be a vector of numbers or a list of them"
        ) from None
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise InvalidInputError(f"{where}: 'q' must be one vector or a non-empty list of vectors")
    batch = arr.ndim == 2
    matrix = arr if batch else arr[None, :]
    if matrix.shape[1] != dim:
        raise InvalidInputError(
            f"{where}: query vector has {matrix.shape[1]} values, the column {dim}"
        )
    return np.ascontiguousarray(matrix), batch


class RowLocator:
    """Where row ids live in one version: which are live, and their row addresses."""

    def __init__(self, core: DatasetCore, fragments: Sequence[LanceFragment]) -> None:
        self._frags = {f.fragment_id: f for f in fragments}
        self._stable = core.manifest.uses_stable_row_ids
        ids = np.array(sorted(self._frags), dtype=np.uint64)
        self._frag_ids = ids
        self._physical = np.array([self._frags[int(i)].physical_rows for i in ids], np.uint64)
        deleted = [
            (np.uint64(f.fragment_id) << np.uint64(32)) | f.deleted_offsets.astype(np.uint64)
            for f in fragments
            if f.num_deletions
        ]
        self._deleted = np.sort(np.concatenate(deleted)) if deleted else np.empty(0, np.uint64)
        if self._stable:
            row_ids, addresses = [], []
            for f in fragments:
                rid = f.row_ids
                if rid is None:
                    continue
                base = np.uint64(f.fragment_id) << np.uint64(32)
                addr = base + np.arange(f.physical_rows, dtype=np.uint64)
                rid = np.asarray(rid, dtype=np.uint64)
                if f.num_deletions:  # an updated row's id also names its deleted old copy
                    keep = np.ones(f.physical_rows, dtype=bool)
                    keep[f.deleted_offsets] = False
                    rid, addr = rid[keep], addr[keep]
                row_ids.append(rid)
                addresses.append(addr)
            all_ids = np.concatenate(row_ids) if row_ids else np.empty(0, np.uint64)
            order = np.argsort(all_ids, kind="stable")
            self._sorted_ids = all_ids[order]
            self._sorted_addr = (
                np.concatenate(addresses)[order] if addresses else np.empty(0, np.uint64)
            )

    def addresses(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row addresses of `row_ids` and whether each is a live row of this version."""
        ids = np.asarray(row_ids, dtype=np.uint64)
        if self._stable:
            pos = np.searchsorted(self._sorted_ids, ids)
            inside = pos < len(self._sorted_ids)
            found = inside.copy()
            found[inside] = self._sorted_ids[pos[inside]] == ids[inside]
            addr = np.zeros(len(ids), np.uint64)
            addr[found] = self._sorted_addr[pos[found]]
        else:
            addr, found = ids, np.ones(len(ids), dtype=bool)
        frag = addr >> np.uint64(32)
        offset = addr & np.uint64(0xFFFFFFFF)
        slot = np.searchsorted(self._frag_ids, frag)
        known = slot < len(self._frag_ids)
        known[known] = self._frag_ids[slot[known]] == frag[known]
        live = found & known
        live[live] = offset[live] < self._physical[slot[live]]
        if len(self._deleted):
            hit = np.searchsorted(self._deleted, addr)
            gone = hit < len(self._deleted)
            gone[gone] = self._deleted[hit[gone]] == addr[gone]
            live &= ~gone
        return addr, live

    def live(self, row_ids: np.ndarray) -> np.ndarray:
        """Which of `row_ids` are live rows of this version."""
        return self.addresses(row_ids)[1]

    def take(
        self, row_ids: np.ndarray, projection: Any, read_schema: pa.Schema, **row_columns: bool
    ) -> pa.Table:
        """The rows of live `row_ids`, in the order given (read_schema: projection + row
        id columns as asked by `with_row_id` / `with_row_address`)."""
        addr, live = self.addresses(row_ids)
        if not live.all():
            raise InvalidInputError("take of a row id that is not a live row")
        if not len(addr):
            return read_schema.empty_table()
        # each distinct address read once, fragment by fragment in address order
        uniq, inverse = np.unique(addr, return_inverse=True)
        frag = uniq >> np.uint64(32)
        cuts = [0, *(np.flatnonzero(frag[1:] != frag[:-1]) + 1).tolist(), len(uniq)]
        pieces = [
            self._frags[int(frag[a])].take_physical(
                projection, read_schema, uniq[a:b] & np.uint64(0xFFFFFFFF), **row_columns
            )
            for a, b in itertools.pairwise(cuts)
        ]
        table = pa.Table.from_batches(pieces, schema=read_schema)
        return table.take(pa.array(inverse.reshape(-1)))


def with_measure(base: pa.Schema, names: list[str], measure: str, autoproject: bool) -> list:
    """A search's result fields: the projection's (`base`, asked for as `names`) with the
    float32 `measure` (`_distance`, `_score`) where the names put it, else after the
    columns and before the row id columns they did not name; left out when not named and
    not `autoproject` (pylance's disable_scoring_autoprojection)."""
    fields = list(base)
    field = pa.field(measure, pa.float32())
    if measure in names:
        fields.insert(names.index(measure), field)
    elif autoproject:
        rows = [f for f in fields if f.name in ROW_COLUMNS and f.name not in names]
        fields = [f for f in fields if f not in rows] + [field] + rows
    return fields


def take_answers(
    core: DatasetCore,
    scanner: Scanner,
    locator: RowLocator,
    row_ids: np.ndarray,
    postfilter: bool,
) -> tuple[pa.Table, np.ndarray | None]:
    """A search's answer rows, in the order of `row_ids`, with the columns of `scanner`'s
    projection (and the row id columns it asks for). With `postfilter`, the filter's
    columns and both row id columns are read too, and the rows the filter drops are left
    out: then also the mask of the ids kept (None without)."""
    projection, read_schema = scanner._projection, scanner._schema
    row_columns = {
        "with_row_id": scanner._with_row_id,
        "with_row_address": scanner._with_row_address,
    }
    if postfilter:
        wanted = scanner._filter.columns if scanner._filter is not None else []
        extra = [c for c in wanted if c not in projection.names and c not in ROW_COLUMNS]
        projection = core.lance_schema.project(list(projection.names) + extra)
        row_columns = {"with_row_id": True, "with_row_address": True}
        base = projection.to_arrow(blob_descriptions=True)
        read_schema = pa.schema(
            list(base) + [ROW_ID_FIELD, ROW_ADDRESS_FIELD], metadata=base.metadata
        )
    rows = locator.take(row_ids, projection, read_schema, **row_columns)
    if not postfilter or scanner._filter is None:
        return rows, None
    keep = np.asarray(_filter_mask(rows, scanner._filter.expression).fill_null(False))
    return rows.filter(pa.array(keep)), keep


def _vector_index(core: DatasetCore, column: str) -> list[IndexEntry]:
    """The index (and its deltas: same name) pylance would use for `column`, or []."""
    field_id = core.lance_schema.field_at(column).id
    entries = indices_of(core.manifest)
    first = next((e for e in entries if field_id in e.field_ids), None)
    if first is None:
        return []
    # an untrained segment (pylance's train=False) covers nothing: searched as no index
    return [e for e in entries if e.name == first.name and not untrained(e.files, e.fragment_ids)]


def _open(core: DatasetCore, entry: IndexEntry) -> VectorIndex | ReusedIndex:
    base = entry.pb.base_id if entry.pb.HasField("base_id") else None
    store, directory = core.resolve(entry.directory, base, relative_to_root=True)
    index = open_vector_index(store, directory, entry.uuid, entry.name)
    reuse = frag_reuse_of(core.manifest)
    return index if reuse is None else ReusedIndex(index, reuse)


_LOCATORS: weakref.WeakKeyDictionary[DatasetCore, RowLocator] = weakref.WeakKeyDictionary()


class LocatedSearch:
    """A search of `core` over `_fragments` whose answers are row ids: `locator` says where
    they live (made on first use, once per version for the version's shared fragments)."""

    core: DatasetCore
    _fragments: Sequence[LanceFragment]

    @functools.cached_property
    def locator(self) -> RowLocator:
        if self._fragments is not shared_fragments(self.core):
            return RowLocator(self.core, self._fragments)
        found = _LOCATORS.get(self.core)
        if found is None:
            found = _LOCATORS.setdefault(self.core, RowLocator(self.core, self._fragments))
        return found


class NearestSearch(LocatedSearch):
    """One planned search: query, filter and projection over a dataset version."""

    def __init__(
        self,
        core: DatasetCore,
        nearest: Any,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        prefilter: bool = False,
        with_row_id: bool = False,
        with_row_address: bool = False,
        autoproject: bool = True,
        row_mask: RowMask | None = None,
        index_segments: Sequence[str] | None = None,
    ) -> None:
        self.core = core
        self.autoproject = autoproject  # `_distance` ends the columns unless they place it
        self.row_mask = row_mask  # pylance's row address prefilter
        # pylance's with_index_segments: only these segments' rows are searched
        self.query = NearestQuery.parse(core, nearest)
        if not isinstance(prefilter, bool):
            raise InvalidInputError(f"{core.uri}: prefilter must be true or false")
        names = list(core.lance_schema.names) if columns is None else list(columns)
        if self.query.batch and (QUERY_INDEX in core.lance_schema.names or QUERY_INDEX in names):
            raise InvalidInputError(
                f"{core.uri}: a batch of queries adds {QUERY_INDEX!r}, a column of the dataset"
            )
        self.names = names
        data = [c for c in names if c != DISTANCE]
        self._fragments = shared_fragments(core)
        # the scanner checks columns and filter, and knows the projection's schema
        scanner = Scanner(
            core,
            self._fragments,
            columns=data,
            filter=filter,
            with_row_id=with_row_id,
            with_row_address=with_row_address,
        )
        self._scanner = scanner
        self.filter = filter
        self.prefilter = prefilter
        self.entries = _vector_index(core, self.query.column) if self.query.use_index else []
        self.only_segments = index_segments is not None
        if index_segments is not None:
            known = {e.uuid for e in self.entries}
            missing = [s for s in index_segments if s not in known]
            if missing:
                raise InvalidInputError(
                    f"{core.uri}: no segment {missing[0]} in the vector index of "
                    f"{self.query.column!r}"
                )
            self.entries = [e for e in self.entries if e.uuid in set(index_segments)]
        self.indices = [_open(core, e) for e in self.entries]
        if self.indices and self.query.metric not in (None, self.indices[0].metric):
            self.indices, self.entries = [], []  # another metric: pylance searches exactly
        self.metric = self.indices[0].metric if self.indices else self.query.metric or "l2"

    # -- schema ---------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        """The schema of the result."""
        base = self._scanner.projected_schema
        fields = with_measure(base, self.names, DISTANCE, self.autoproject)
        if self.query.batch:
            fields.insert(0, pa.field(QUERY_INDEX, pa.int32(), nullable=False))
        return pa.schema(fields, metadata=base.metadata)

    # -- execution ------------------------------------------------------------------------
    def _scan(self, fragments: Sequence[LanceFragment], columns: list[str], filtered: bool):
        return Scanner(
            self.core,
            fragments,
            columns=columns,
            filter=self.filter if filtered else None,
            with_row_id=True,
        ).to_batches()

    def _exact(self, fragments: Sequence[LanceFragment], k: int) -> Candidates:
        """The k nearest rows per query among `fragments` (filtered when prefiltering)."""
        top = TopK(self.metric, self.query.queries, k, self.query.distance_range)
        col = self.query.column
        for batch in self._scan(fragments, [col], self.prefilter and self.filter is not None):
            ids = batch.column(ROW_ID_FIELD.name).to_numpy().astype(np.uint64, copy=False)
            if self.row_mask is not None:
                kept = self.row_mask.keep(ids)
                batch, ids = batch.filter(pa.array(kept)), ids[kept]
            if self.query.multivector:
                top.add_multivectors(ids, batch.column(col))
            else:
                top.add(ids, batch.column(col))
        return Candidates(*top.result())

    def _measure(self, found: Candidates) -> Candidates:
        """`found` measured again on the rows' vectors (rows without a vector dropped)."""
        if not len(found.query):
            return found
        uniq, inverse = np.unique(found.row_ids, return_inverse=True)
        schema = self.core.lance_schema.path_projection(self.query.column)
        read = schema.to_arrow(blob_descriptions=True)
        rows = self.locator.take(uniq, schema, read)
        vectors = column_at(rows, self.query.column).combine_chunks()
        if self.query.multivector:  # one query: summed over its vectors, the nearest
            has, nearest = nearest_in_lists(self.metric, vectors, self.query.queries)
            measured = np.full(len(uniq), np.nan, np.float32)
            measured[has] = nearest.sum(axis=0, dtype=np.float32)
            keep = has[inverse]
            return Candidates(found.query[keep], found.row_ids[keep], measured[inverse][keep])
        keep = np.asarray(vectors.is_valid())[inverse]
        dist = paired(self.metric, vector_matrix(vectors)[inverse], self.query.queries[found.query])
        return Candidates(found.query[keep], found.row_ids[keep], dist[keep])

    def _allowed(self) -> tuple[RowFilter | None, np.ndarray | None]:
        """Which row ids an index search may return (None: all it holds), and all of them
        when a prefilter makes that a known list."""
        locator = self.locator
        covered = self._covered()
        if not (self.prefilter and self.filter is not None):
            # the index may hold rows of fragments its bitmap no longer names (rewritten
            # in place, or removed): only rows of covered, existing fragments are answers
            inside = _fragment_set(covered)
            if not self.core.manifest.uses_stable_row_ids:
                frags = {f.fragment_id: f for f in self._fragments}
                if all(i in frags and not frags[i].num_deletions for i in covered):
                    # row ids are addresses, and every covered row is live
                    return (lambda ids: inside(ids >> np.uint64(32))), None

            def live_and_covered(row_ids: np.ndarray) -> np.ndarray:
                addr, live = locator.addresses(row_ids)
                return live & inside(addr >> np.uint64(32))

            return live_and_covered, None
        ids = [
            b.column(ROW_ID_FIELD.name).to_numpy()
            for b in self._scan([f for f in self._fragments if f.fragment_id in covered], [], True)
        ]
        allowed = np.sort(np.concatenate(ids).astype(np.uint64)) if ids else np.empty(0, np.uint64)

        return (lambda row_ids: sorted_member(allowed, row_ids)), allowed

    def _per_segment(self, allowed: RowFilter | None) -> list[RowFilter | None]:
        """One filter per segment of a delta index: a segment answers only for rows now in
        fragments it covers (with stable row ids, an updated row's id is in the segment of
        its old fragment and in the one covering its new fragment)."""
        if len(self.entries) < 2:
            return [allowed]
        stable = self.core.manifest.uses_stable_row_ids
        locator = self.locator

        def covering(entry: IndexEntry) -> RowFilter | None:
            if entry.fragment_ids is None:
                return allowed
            inside = np.array(sorted(entry.fragment_ids), dtype=np.uint64)

            def keep(row_ids: np.ndarray) -> np.ndarray:
                ok = np.ones(len(row_ids), bool) if allowed is None else allowed(row_ids)
                addr = locator.addresses(row_ids)[0] if stable else row_ids
                return ok & np.isin(addr >> np.uint64(32), inside)

            return keep

        return [covering(e) for e in self.entries]

    def _covered(self) -> set[int]:
        """Fragment ids the index (with its deltas) covers."""
        covered: set[int] = set()
        for e in self.entries:
            if e.fragment_ids is None:  # an old index without a bitmap: take it as covering all
                return {f.fragment_id for f in self._fragments}
            covered |= set(e.fragment_ids)
        return covered

    def candidates(self) -> Candidates:
        """The rows found per query, best first (before a postfilter), only those within the
        query's distance range: an index keeps the nearest rows inside it by its own
        distances, a refine measures them again and keeps those still inside."""
        q, k = self.query, self.query.k
        lower, upper = q.distance_range
        if not self.indices:
            return self._exact(self._fragments, k)
        allowed, allowed_ids = self._allowed()
        if self.row_mask is not None:
            allowed, allowed_ids = _masked(allowed, allowed_ids, self.row_mask)
        fetch = k * (q.refine_factor or 1)
        if q.ef is not None and q.ef < fetch and any(ix.hnsw for ix in self.indices):
            raise InvalidInputError(
                f"{self.core.uri}: nearest: ef ({q.ef}) must be greater than or equal to k "
                f"({fetch}, with the refine factor)"
            )
        # a multivector query's vectors each keep k x 10 entries (graph searches at least
        # as many nodes)
        per_vector = k * XTR_OVERFETCH if q.multivector else fetch
        found = ivf_search(
            self.indices,
            q.queries,
            k,
            per_vector,
            minimum=1 if q.minimum_nprobes is None else q.minimum_nprobes,
            maximum=q.maximum_nprobes,
            allowed=self._per_segment(allowed),
            allowed_ids=allowed_ids,
            distance_range=q.distance_range,
            ef=q.ef if q.ef is None else max(q.ef, per_vector),
            effort=q.search_effort,
            approx_mode=q.approx_mode,
        )
        if q.multivector:  # each of the query's vectors searched: their entries scored
            found = xtr_scores(found, len(q.queries)).best(fetch)
        if q.refine_factor is not None:
            found = self._measure(found).within(lower, upper).best(k)
        covered = self._covered()
        rest = [f for f in self._fragments if f.fragment_id not in covered]
        if rest and not self.only_segments:
            if q.refine_factor is None:
                found = self._measure(found).within(lower, upper)
            found = Candidates.concat([found, self._exact(rest, k)]).best(k)
        return found.within(lower, upper)

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the result (as a scanner names it)."""
        return self.schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The result as record batches."""
        yield from self.to_table().to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        """The result as a record batch reader."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def run(self, queries: np.ndarray) -> pa.Table:
        """This search (column, options, filter, projection) for another batch of query
        vectors, an (n, dim) matrix; the result has `query_index` first."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.query.queries.shape[1]:
            raise InvalidInputError(
                f"{self.core.uri}: query vectors of shape {q.shape}, expected "
                f"(n, {self.query.queries.shape[1]})"
            )
        self.query = dataclasses.replace(self.query, queries=q, batch=True)
        return self.to_table()

    def to_table(self) -> pa.Table:
        """Run the search: the result rows with `_distance` (and `query_index`)."""
        found = self.candidates()
        postfilter = self.filter is not None and not self.prefilter
        rows, keep = take_answers(self.core, self._scanner, self.locator, found.row_ids, postfilter)
        query, distance = found.query, found.distance
        if keep is not None:
            query, distance = query[keep], distance[keep]
        out = self.schema
        columns = []
        for f in out:
            if f.name == QUERY_INDEX and self.query.batch:
                columns.append(pa.array(query.astype(np.int32), pa.int32()))
            elif f.name == DISTANCE:
                columns.append(pa.array(distance, pa.float32()))
            else:
                columns.append(column_at(rows, f.name))  # (a nested field: by its path)
        return pa.Table.from_arrays(columns, schema=out)


def _masked(
    allowed: RowFilter | None, ids: np.ndarray | None, mask: RowMask
) -> tuple[RowFilter, np.ndarray | None]:
    """A search's row filter (and known rows) kept to a row address mask."""
    if ids is not None:
        ids = ids[mask.keep(ids)]
    if allowed is None:
        return mask.keep, ids
    return (lambda row_ids: allowed(row_ids) & mask.keep(row_ids)), ids


def _fragment_set(ids: set[int]) -> Callable[[np.ndarray], np.ndarray]:
    """Membership of fragment ids in `ids` as one table lookup per row (each probed
    partition asks it of all its rows)."""
    table = np.zeros(max(ids, default=0) + 2, dtype=bool)
    table[list(ids)] = True
    last = np.uint64(len(table) - 1)  # past every member: False

    def member(frags: np.ndarray) -> np.ndarray:
        return table[np.minimum(frags, last)]

    return member


def nearest_table(
    core: DatasetCore,
    nearest: Any,
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    prefilter: bool = False,
    with_row_id: bool = False,
    with_row_address: bool = False,
    limit: int | None = None,
    offset: int | None = None,
) -> pa.Table:
    """pylance's `to_table(nearest=..., ...)` on one version (see the module docstring)."""
    table = NearestSearch(
        core,
        nearest,
        columns=columns,
        filter=filter,
        prefilter=prefilter,
        with_row_id=with_row_id,
        with_row_address=with_row_address,
    ).to_table()
    start = offset or 0
    return table.slice(start, limit) if limit is not None or start else table
