"""Index-pruned reads: which fragments and rows a filter can match, found with the scalar
indices (BTREE, BITMAP, NGRAM) of a version, so scans and Flight plans skip the rest.

The filter's syntax tree is walked through AND, OR and NOT (pushed down by De Morgan, which
holds in SQL's three-valued logic). Each largest subtree that reads only one indexed column
is a leaf: the engine's own binder turns it into an Arrow predicate, evaluated on the
index's values, so a leaf's rows are exactly those where the scan finds it TRUE. A node's
answer is (covered fragments, row addresses): within the covered fragments, no row outside
the set can match; rows of other fragments (appended after the index was built) always
may. Scans still evaluate the whole filter on the rows they read, and deletions still
apply: pruning only ever removes rows that cannot match.

An NGRAM index answers `contains(column, 'text')`, `starts_with`, LIKE and literal regular
expressions with the rows holding every trigram of their literal text: more rows than match
(the scan drops the others), so it answers no negated leaf.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from sqlglot import exp

from quiver.format.errors import LanceError, UnsupportedFeatureError
from quiver.format.expr.bind import Binder
from quiver.format.expr.parse import parse_filter
from quiver.format.expr.typed import flatten, unparen
from quiver.format.expr.values import exact_constant
from quiver.format.index.filter_nodes import (
    FLIPPED,
    bare_column,
    field_at,
    has_column,
    is_null_test,
    literal_texts,
)
from quiver.format.index.scalar.bitmap import BitmapIndex
from quiver.format.index.scalar.bloom import BloomIndex
from quiver.format.index.scalar.btree import BTreeIndex
from quiver.format.index.scalar.ngram import NGramIndex, text_tokens
from quiver.format.index.scalar.query import Bounds, Leaf
from quiver.format.index.scalar.rows import EMPTY
from quiver.format.index.scalar.rtree import RTreeIndex, spatial_box
from quiver.format.io.lru import ByteLRU
from quiver.format.io.store import ObjectStore
from quiver.format.numeric import unique_sorted
from quiver.format.table.frag_reuse import FRAG_REUSE_INDEX, FragReuse
from quiver.format.table.indices import IndexEntry, frag_reuse_of, indices_of
from quiver.format.table.manifest import Manifest
from quiver.format.table.rowids import (
    offsets_in_segments,
    row_id_segments,
    row_id_sequence_of,
)
from quiver.format.table.schema import path_parts

log = logging.getLogger("quiver.index")

# Rows a pruned fragment reads around each candidate: scattered candidates are read in
# blocks of this many rows (the filter drops the others), so a fragment is a few reads.
BLOCK_ROWS = 1024
# IN lists longer than this choose BTREE pages as one interval from their least to their
# greatest item rather than one per item.
MAX_IN_INTERVALS = 64
# Loaded index lookups kept per process (index files never change once written: their
# directory is a fresh uuid).
LOOKUP_ENTRIES = 256
LOOKUP_BYTES = 256 << 20
# A filter's pruning and its indices' answers, per version: what one read's GetFlightInfo
# and DoGets share. A filter seldom comes back once the dataset has moved on a version, so
# only the recent few are kept (a budget of the lookups' size filled with one-off answers
# within minutes under steady reads and writes).
ANSWER_ENTRIES = 64
ANSWER_BYTES = 32 << 20


class Core(Protocol):
    """What pruning needs of a dataset version (format.dataset's DatasetCore)."""

    uri: str
    manifest: Manifest

    def resolve(
        self, path: str, base_id: int | None, *, relative_to_root: bool = False
    ) -> tuple[ObjectStore, str]: ...


@dataclass(frozen=True)
class IndexPruning:
    """Where a filter can match: in `covered` fragments only at `rows` (sorted row
    addresses), anywhere in the others; `indices` names the indices used."""

    covered: frozenset[int]
    rows: np.ndarray
    indices: tuple[str, ...]

    def offsets(self, fragment_id: int) -> np.ndarray | None:
        """Sorted physical offsets that may match in one fragment; None when any may."""
        if fragment_id not in self.covered:
            return None
        base = np.uint64(fragment_id) << np.uint64(32)
        lo, hi = np.searchsorted(self.rows, [base, base + np.uint64(1 << 32)])
        return (self.rows[lo:hi] - base).astype(np.int64)

    def candidates(self, fragment_id: int, ranges: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """The offsets that may match inside `ranges` (sorted physical row ranges) of one
        fragment; None when the fragment is not covered."""
        offsets = self.offsets(fragment_id)
        if offsets is None:
            return None
        if not ranges:
            return offsets[:0]
        starts = np.array([s for s, _ in ranges], dtype=np.int64)
        stops = np.array([e for _, e in ranges], dtype=np.int64)
        at = np.searchsorted(starts, offsets, side="right") - 1
        inside = (at >= 0) & (offsets < stops[np.maximum(at, 0)])
        return offsets[inside]

    def may_match(self, fragment_id: int, row_range: tuple[int, int] | None = None) -> bool:
        """Whether a fragment (or physical rows [start, stop) of it) can hold matches."""
        offsets = self.offsets(fragment_id)
        if offsets is None:
            return True
        if row_range is None:
            return len(offsets) > 0
        lo, hi = np.searchsorted(offsets, list(row_range))
        return bool(hi > lo)

    def narrow(
        self, fragment_id: int, ranges: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int]] | None:
        """`ranges` (sorted physical row ranges) cut down to the blocks of BLOCK_ROWS rows
        holding candidates; None when the fragment is not covered (read all of it)."""
        offsets = self.offsets(fragment_id)
        if offsets is None:
            return None
        if not len(offsets) or not ranges:
            return []
        blocks = unique_sorted(offsets // BLOCK_ROWS)
        # runs of consecutive blocks become one range
        breaks = np.flatnonzero(np.diff(blocks) > 1)
        starts = blocks[np.concatenate(([0], breaks + 1))] * BLOCK_ROWS
        stops = (blocks[np.concatenate((breaks, [len(blocks) - 1]))] + 1) * BLOCK_ROWS
        out: list[tuple[int, int]] = []
        for s, e in ranges:
            i = int(np.searchsorted(stops, s, side="right"))
            j = int(np.searchsorted(starts, e, side="left"))
            for a, b in zip(starts[i:j].tolist(), stops[i:j].tolist(), strict=True):
                lo, hi = max(a, s), min(b, e)
                if hi > lo:
                    out.append((lo, hi))
        return out


@dataclass(frozen=True)
class _Answer:
    covered: frozenset[int]
    rows: np.ndarray


_lookups: ByteLRU[Any] = ByteLRU(LOOKUP_BYTES, LOOKUP_ENTRIES)
_answers: ByteLRU[Any] = ByteLRU(ANSWER_BYTES, ANSWER_ENTRIES)


def scalar_kind(entry: IndexEntry) -> str | None:
    """ "BTREE", "BITMAP", "NGRAM" or "BLOOMFILTER" for the scalar indices pruning reads,
    else None."""
    kind = entry.details_type.rsplit(".", 1)[-1]
    if kind == "BTreeIndexDetails":
        return "BTREE"
    if kind == "BitmapIndexDetails":
        return "BITMAP"
    if kind == "NGramIndexDetails":
        return "NGRAM"
    if kind == "BloomFilterIndexDetails":
        return "BLOOMFILTER"
    if kind == "RTreeIndexDetails":
        return "RTREE"
    names = {path for path, _ in entry.files}
    if not entry.details_type and "page_lookup.lance" in names:
        return "BTREE"
    if not entry.details_type and "bitmap_page_lookup.lance" in names:
        return "BITMAP"
    return None


def prune(core: Core, sql: str, filter_schema: pa.Schema) -> IndexPruning | None:
    """The fragments and rows filter `sql` can match, found with the version's BTREE,
    BITMAP and NGRAM indices; None when no index narrows it. `filter_schema` is the schema the scan
    compiled the filter against (columns and row id columns)."""
    manifest = core.manifest
    frags = manifest.pb.fragments
    if not manifest.pb.HasField("index_section") or not frags:
        return None
    # stable row ids: the BITMAP, NGRAM and RTREE indices hold row ids, looked up in each
    # covered fragment's row id sequence (`_RowIds`), the BTREE and BLOOMFILTER addresses
    stable = any(f.WhichOneof("row_id_sequence") for f in frags)
    if stable and not all(f.WhichOneof("row_id_sequence") for f in frags):
        return None
    entries = indices_of(manifest, system=True)
    if any(e.is_system and e.name != FRAG_REUSE_INDEX for e in entries):
        return None  # a MemWAL index: rows not in the fragments yet
    if stable and frag_reuse_of(manifest) is not None:
        return None
    indexed = _indexed_columns(core, entries, stable)
    by_column = _usable_indices(indexed)
    ngrams = _segments_of(indexed, "NGRAM")
    blooms = _segments_of(indexed, "BLOOMFILTER")
    rtrees = _segments_of(indexed, "RTREE")
    if not by_column and not ngrams and not blooms and not rtrees:
        return None
    # the same filter on the same version and indices (a read's GetFlightInfo and DoGets)
    segments = [s for v in [*ngrams.values(), *blooms.values(), *rtrees.values()] for s in v]
    uuids = sorted(e.uuid for e in [*by_column.values(), *segments])
    key = ("pruning", core.uri, manifest.version, tuple(uuids), sql, filter_schema)
    found = _answers.get(key)
    if found is not None:
        return found or None
    physical = {int(f.id): int(f.physical_rows) for f in frags}
    walker = _Walker(core, sql, filter_schema, by_column, physical, ngrams, blooms)
    walker.reuse = frag_reuse_of(manifest)
    walker.rtrees = rtrees
    walker.row_ids = _RowIds(core) if stable else None
    try:
        answer = walker.visit(parse_filter(sql, dataset=core.uri), False)
    except (
        LanceError,
        pa.ArrowException,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        RecursionError,
    ) as e:
        # an index that cannot be used leaves the scan whole, never wrong
        log.warning("%s: indices not used for filter %r: %s", core.uri, sql, e)
        return None
    pruning = None
    if answer is not None and answer.covered:
        pruning = IndexPruning(answer.covered, answer.rows, tuple(sorted(walker.used)))
    _answers.put(key, pruning or False, 512 + (pruning.rows.nbytes if pruning else 0))
    return pruning


def _indexed_columns(
    core: Core, entries: list[IndexEntry], stable: bool
) -> list[tuple[str, str, IndexEntry]]:
    """(column, kind, entry) of the scalar indices pruning reads (index version 0, and the
    BTREE of a dataset with `stable` row ids) that cover one column: a top-level one, or a
    field nested in structs, named by its path as filters name it (`meta.lang`)."""
    paths = core.manifest.schema.column_paths()
    out = []
    for e in entries:
        if len(e.field_ids) != 1 or e.field_ids[0] not in paths or e.fragment_ids is None:
            continue
        kind = scalar_kind(e)
        if kind is not None and (e.index_version == 0 or (stable and _holds_addresses(e))):
            out.append((paths[e.field_ids[0]], kind, e))
    return out


def _holds_addresses(entry: IndexEntry) -> bool:
    """Whether an index holds row addresses where the dataset has stable row ids: pylance
    14's BTREE of such a dataset (index version 1) does, and a BLOOMFILTER's zones are
    always fragments' row offsets; its BITMAP, NGRAM and RTREE indices hold the row ids
    (index version 0)."""
    kind = scalar_kind(entry)
    return (kind == "BTREE" and entry.index_version == 1) or kind == "BLOOMFILTER"


def _usable_indices(indexed: list[tuple[str, str, IndexEntry]]) -> dict[str, IndexEntry]:
    """Column -> a BTREE or BITMAP index over it that pruning can read
    (`indexed`: `_indexed_columns`'s)."""
    out: dict[str, IndexEntry] = {}
    for column, kind, e in indexed:
        if kind in ("BTREE", "BITMAP"):
            out.setdefault(column, e)
    return out


def _segments_of(
    indexed: list[tuple[str, str, IndexEntry]], wanted: str
) -> dict[str, list[IndexEntry]]:
    """Column -> the segments of one NGRAM (or BLOOMFILTER, RTREE) index
    over it (they cover disjoint fragments; `indexed`: `_indexed_columns`'s)."""
    out: dict[str, list[IndexEntry]] = {}
    for column, kind, e in indexed:
        if kind == wanted and (column not in out or out[column][0].name == e.name):
            out.setdefault(column, []).append(e)
    return out


class _Walker:
    """Answers each node of one filter's syntax tree (see the module docstring)."""

    def __init__(
        self,
        core: Core,
        sql: str,
        schema: pa.Schema,
        by_column: dict[str, IndexEntry],
        physical: Mapping[int, int],
        ngrams: dict[str, list[IndexEntry]] | None = None,
        blooms: dict[str, list[IndexEntry]] | None = None,
    ) -> None:
        self.core = core
        self.sql = sql
        self.schema = schema
        self.by_column = by_column
        self.ngrams = ngrams or {}
        self.blooms = blooms or {}
        self.physical = physical
        self.used: set[str] = set()
        # a fragment reuse index: indices' row addresses of fragments compactions rewrote
        # are moved to the rows' new places (see `_answer`)
        self.reuse: FragReuse | None = None
        self.rtrees: dict[str, list[IndexEntry]] = {}  # RTREE segments by column
        self.row_ids: _RowIds | None = None  # stable row ids: where they live

    @functools.cached_property
    def nested(self) -> list[str]:
        """The indexed columns that are fields nested in structs (dotted paths)."""
        columns = {*self.by_column, *self.ngrams, *self.blooms, *self.rtrees}
        return sorted(c for c in columns if c not in self.schema.names)

    def _path(self, column: str) -> tuple[str, ...]:
        """A nested column's path (a Leaf's), nothing for a top-level one."""
        return () if column in self.schema.names else tuple(path_parts(column))

    @property
    def index_physical(self) -> Mapping[int, int]:
        """Physical rows of the fragments an index may name: those of this version and,
        under a fragment reuse index, those compactions rewrote (row ids: see `_EveryKey`)."""
        if self.row_ids is not None:
            return _EveryKey()
        if self.reuse is None:
            return self.physical
        return {**self.reuse.old_physical_rows, **self.physical}

    def visit(self, node: exp.Expression, negated: bool) -> _Answer | None:
        node = unparen(node)
        if isinstance(node, exp.Not):
            return self.visit(node.this, not negated)
        if isinstance(node, (exp.And, exp.Or)):
            children = flatten(node, type(node))
            if isinstance(node, exp.And) and not negated:
                return _all_of([self._conjunct(c) for c in self._ranges_joined(children)])
            conjunction = isinstance(node, exp.And) != negated
            parts = [self.visit(c, negated) for c in children]
            return _all_of(parts) if conjunction else _any_of(parts)
        target = exp.Not(this=node.copy()) if negated else node
        bound = self._bind(target)
        if bound is None:
            return None
        column, predicate = bound
        segments = self.ngrams.get(column)
        if segments and not negated:
            literals = literal_texts(node, column)
            tokens = set().union(*map(text_tokens, literals)) if literals else set()
            if tokens:
                return _segments_answer([self._ngram_search(e, tokens) for e in segments])
        if column in self.rtrees and not negated:
            return self._spatial_search(node, column)
        entry = self.by_column.get(column)
        field = field_at(self.schema, column)
        if entry is None and column in self.blooms and not negated:
            return self._bloom_search(node, column, field)
        if entry is None or pa.types.is_dictionary(field.type):
            return None
        leaf = Leaf(
            field,
            predicate,
            key=f"{target.sql()}::{field.type}",
            intervals=None if negated else self._intervals(node, column),
            only_nulls=not negated and is_null_test(node, column),
            path=self._path(column),
        )
        return self._search(entry, leaf)

    def _bind(self, target: exp.Expression) -> tuple[str, Any] | None:
        """(the one column `target` reads, its Arrow predicate), or None when it reads
        several columns or does not bind on its own."""
        binder = Binder(self.sql, self.schema, self.core.uri)
        try:
            predicate = binder.bind_root(target).expression()
        except (LanceError, pa.ArrowException, ValueError, TypeError, KeyError, AttributeError):
            return None  # the whole filter bound, so this only leaves the subtree unpruned
        if len(binder.columns) != 1:
            return None
        (column,) = binder.columns
        refs = list(target.find_all(exp.Column))
        for key in self.nested:  # one indexed field nested in that column, read alone
            if key.startswith(column + ".") and refs and all(bare_column(r, key) for r in refs):
                return key, predicate
        return column, predicate

    def _ranges_joined(self, conjuncts: list[exp.Expression]) -> list[Any]:
        """The conjuncts of an AND, those comparing one BTREE- or BITMAP-indexed column
        with constants gathered into one `_Range` per column: `id >= 5 AND id < 9` is one
        lookup of the rows in [5, 9), not the rows of each side intersected (each side
        alone may hold most of the table)."""
        out: list[Any] = []
        ranges: dict[str, _Range] = {}
        for node in map(unparen, conjuncts):
            column = self._compared_column(node)
            intervals = self._intervals(node, column) if column is not None else None
            if column is None or intervals is None:
                out.append(node)
            elif column in ranges:
                ranges[column].add(node, intervals)
            else:
                ranges[column] = _Range(column, [node], intervals)
                out.append(ranges[column])
        return out

    def _compared_column(self, node: exp.Expression) -> str | None:
        """The indexed column (BTREE or BITMAP, no NGRAM) `node` compares, when one side
        of a comparison, BETWEEN or IN is that bare column."""
        if not isinstance(node, (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)):
            return None
        sides = [node.this] + ([node.expression] if not isinstance(node, exp.In) else [])
        for column in self.by_column:
            if column not in self.ngrams and any(bare_column(s, column) for s in sides):
                return column
        return None

    def _conjunct(self, part: Any) -> _Answer | None:
        """The answer to one conjunct of an AND: a node, or a `_Range` of several."""
        if not isinstance(part, _Range):
            return self.visit(part, False)
        if len(part.nodes) == 1:
            return self.visit(part.nodes[0], False)
        target = part.nodes[0].copy()
        for node in part.nodes[1:]:
            target = exp.And(this=target, expression=node.copy())
        bound = self._bind(target)
        field = field_at(self.schema, part.column) if bound is not None else None
        if bound is None or bound[0] != part.column or pa.types.is_dictionary(field.type):
            return _all_of([self.visit(n, False) for n in part.nodes])
        leaf = Leaf(
            field,
            bound[1],
            key=f"{target.sql()}::{field.type}",
            intervals=part.intervals,
            path=self._path(part.column),
        )
        return self._search(self.by_column[part.column], leaf)

    def _search(self, entry: IndexEntry, leaf: Leaf) -> _Answer:
        """A BTREE's or BITMAP's answer to a leaf."""

        def search(store: ObjectStore, directory: str) -> np.ndarray:
            if scalar_kind(entry) == "BTREE":
                return _loaded(BTreeIndex, store, directory).search(leaf)
            return _loaded(BitmapIndex, store, directory).search(leaf, self.index_physical)

        return self._answer(entry, leaf.key, search)

    def _spatial_search(self, node: exp.Expression, column: str) -> _Answer | None:
        """An RTREE's answer to a spatial predicate of the column and a constant geometry
        (or `st_distance(column, g) < d`): the rows whose boxes meet the constant's box
        (grown by d); None for other nodes."""

        def constant(arg: exp.Expression) -> Any:
            value = Binder(self.sql, self.schema, self.core.uri).bind(arg)
            return value if value.const and value.geo and not value.is_null_const else None

        box = spatial_box(node, lambda n: bare_column(n, column) is not None, constant)
        if box is None:
            return None
        answers = [
            self._answer(e, ("rtree", box), lambda s, d: _loaded(RTreeIndex, s, d).search(box))
            for e in self.rtrees[column]
        ]
        return _segments_answer(answers)

    def _bloom_search(self, node: exp.Expression, column: str, field: pa.Field) -> _Answer | None:
        """A BLOOMFILTER's answer to `column = v`, `column IN (...)` or `column IS NULL`:
        the rows of the zones that may hold a value (exactly the null rows); None for
        other nodes or values the column's type cannot hold exactly."""
        if is_null_test(node, column):
            asked: Any = "null"

            # zones are row offsets, stable row ids or not
            physical = self.physical if self.row_ids is not None else self.index_physical

            def search(store: ObjectStore, directory: str) -> np.ndarray:
                return _loaded(BloomIndex, store, directory).null_rows(physical)
        else:
            values = self._constants(node, column, field.type)
            if values is None:
                return None
            asked = tuple(repr(v) for v in values)

            def search(store: ObjectStore, directory: str) -> np.ndarray:
                return _loaded(BloomIndex, store, directory).search(values, field.type)

        answers = [self._answer(e, asked, search) for e in self.blooms[column]]
        return _segments_answer(answers)

    def _constants(
        self, node: exp.Expression, column: str, type_: pa.DataType
    ) -> list[pa.Scalar] | None:
        """The values `node` compares the bare column with for equality (`=` or IN), as
        scalars of the column's type; None when it is something else, or a value is not
        exactly one of the column's (then no index answers it, the scan does)."""
        if isinstance(node, exp.EQ):
            if bare_column(node.this, column) is not None:
                items = [node.expression]
            elif bare_column(node.expression, column) is not None:
                items = [node.this]
            else:
                return None
        elif isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
            if bare_column(node.this, column) is None:
                return None
            items = list(node.expressions)
        else:
            return None
        if any(has_column(i) for i in items):
            return None
        out = []
        for item in items:
            value = exact_constant(item.sql(), type_)
            if value is None:
                return None
            if value.is_valid:  # `= NULL` and `IN (NULL)` match no row
                out.append(value)
        return out

    def _ngram_search(self, entry: IndexEntry, tokens: set[int]) -> _Answer:
        """The rows of an NGRAM index holding every one of `tokens`."""
        return self._answer(
            entry,
            tuple(sorted(tokens)),
            lambda store, directory: _loaded(NGramIndex, store, directory).rows_with_all(tokens),
        )

    def _answer(
        self, entry: IndexEntry, asked: Any, search: Callable[[ObjectStore, str], np.ndarray]
    ) -> _Answer:
        """One index's answer (`search` of its store and directory, kept per version and
        `asked`), restricted to the fragments it covers now."""
        covered = frozenset(entry.fragment_ids or ()).intersection(self.physical)
        key = ("answer", self.core.uri, self.core.manifest.version, entry.uuid, asked)
        rows = _answers.get(key)
        if rows is None:
            store, directory = self.core.resolve(
                entry.directory,
                entry.pb.base_id if entry.pb.HasField("base_id") else None,
                relative_to_root=True,
            )
            rows = search(store, directory)
            if self.row_ids is not None and not _holds_addresses(entry):
                rows = self.row_ids.addresses(unique_sorted(rows), covered)
            else:
                if self.reuse is not None:
                    moved, alive = self.reuse.apply(rows)
                    rows = unique_sorted(moved[alive])
                rows = _within(rows, covered)
            _answers.put(key, rows, rows.nbytes + 256)
        self.used.add(entry.name)
        return _Answer(covered, rows)

    def _intervals(self, node: exp.Expression, column: str) -> tuple[Bounds, ...] | None:
        """Intervals of the column's values outside which `node` cannot be TRUE, for
        choosing BTREE pages; None when the node is not a comparison, BETWEEN or IN of
        the bare column with constants."""
        col = bare_column(node.this if hasattr(node, "this") else None, column)
        if isinstance(node, (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
            kind, other = type(node), node.expression
            if col is None:
                col = bare_column(node.expression, column)
                kind, other = FLIPPED[kind], node.this
            if col is None or has_column(other):
                return None
            lower = {exp.EQ: exp.GTE, exp.GT: exp.GT, exp.GTE: exp.GTE}.get(kind)
            upper = {exp.EQ: exp.LTE, exp.LT: exp.LT, exp.LTE: exp.LTE}.get(kind)
            return (self._bounds(col, lower, other, upper, other),)
        if col is None:
            return None
        if isinstance(node, exp.Between):
            low, high = node.args.get("low"), node.args.get("high")
            if low is None or high is None or has_column(low) or has_column(high):
                return None
            return (self._bounds(col, exp.GTE, low, exp.LTE, high),)
        if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
            items = node.expressions
            if any(has_column(i) for i in items) or len(items) > MAX_IN_INTERVALS:
                return None
            return tuple(self._bounds(col, exp.GTE, i, exp.LTE, i) for i in items)
        return None

    def _bounds(
        self, col: exp.Expression, lower: type | None, lo: Any, upper: type | None, hi: Any
    ) -> Bounds:
        def bind(kind: type | None, value: exp.Expression) -> Any:
            if kind is None:
                return None
            node = kind(this=col.copy(), expression=value.copy())
            return Binder(self.sql, self.schema, self.core.uri).bind_root(node).expression()

        return Bounds(bind(lower, lo), bind(upper, hi))


@dataclass
class _Range:
    """Conjuncts comparing one indexed column with constants, and the intervals outside
    which their AND cannot be TRUE (each pair of intervals met)."""

    column: str
    nodes: list[exp.Expression]
    intervals: tuple[Bounds, ...]

    def add(self, node: exp.Expression, intervals: tuple[Bounds, ...]) -> None:
        self.nodes.append(node)
        if len(self.intervals) * len(intervals) <= MAX_IN_INTERVALS:
            self.intervals = tuple(_meet(a, b) for a in self.intervals for b in intervals)
        elif len(intervals) < len(self.intervals):
            self.intervals = intervals  # either side's intervals hold every match


def _meet(a: Bounds, b: Bounds) -> Bounds:
    """The interval where both `a` and `b` hold: each side's predicates ANDed."""

    def both(x: Any, y: Any) -> Any:
        return y if x is None else x if y is None else x & y

    return Bounds(both(a.lower, b.lower), both(a.upper, b.upper))


def _loaded(kind: Any, store: ObjectStore, directory: str) -> Any:
    """An index's lookup, read once per process."""
    key = ("index", kind.__name__, store.uri, directory)
    index = _lookups.get(key)
    if index is None:
        index = kind.load(store, directory)
        arrays = [
            getattr(index, a)
            for a in ("mins", "maxs", "keys", "tokens", "filters")
            if hasattr(index, a)
        ]
        # a BLOOMFILTER's filters are (zones, bytes) pairs of arrays
        flat = [x for a in arrays for x in (a if isinstance(a, list) else [a])]
        size = sum(x.nbytes if hasattr(x, "nbytes") else sum(y.nbytes for y in x) for x in flat)
        _lookups.put(key, index, size + 1024)
    return index


def _segments_answer(answers: list[_Answer]) -> _Answer:
    """The answer of an index's segments (they cover disjoint fragments): their rows and
    fragments together."""
    rows = np.concatenate([a.rows for a in answers])
    covered = frozenset().union(*(a.covered for a in answers))
    return _Answer(covered, unique_sorted(rows) if len(answers) > 1 else rows)


class _RowIds:
    """Where the row ids of a version with stable row ids live: the row addresses, in given
    fragments, of the rows whose ids an index answered. Each fragment's row id sequence is
    searched segment by segment (`format.table.rowids.offsets_in_segments`), so a range of
    ids costs a binary search, not its ids materialised; its segments are parsed once per
    pruning. A deleted row's address may be among them (an updated row's old copy keeps its
    id): the scan drops deleted rows, and an answer only has to hold every row that can
    match."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.fragments = {int(f.id): f for f in core.manifest.pb.fragments}
        self._segments: dict[int, list[Any]] = {}

    def addresses(self, ids: np.ndarray, fragments: frozenset[int]) -> np.ndarray:
        """Sorted row addresses, in `fragments`, of the rows whose id is in `ids` (sorted)."""
        parts = []
        for fid in sorted(fragments):
            offsets = offsets_in_segments(self._of(fid), ids)
            parts.append((np.uint64(fid) << np.uint64(32)) | offsets.astype(np.uint64))
        return np.concatenate(parts) if parts else EMPTY

    def _of(self, fid: int) -> list[Any]:
        """A fragment's row id segments (read from the manifest or its file once)."""
        found = self._segments.get(fid)
        if found is None:
            frag = self.fragments[fid]
            data = row_id_sequence_of(
                frag, lambda path: self.core.resolve(path, None, relative_to_root=True)
            )
            assert data is not None  # (`prune` reads stable row ids only where all have them)
            source = f"{self.core.uri}: fragment {fid} row ids"
            found = row_id_segments(data, source=source, expected_len=int(frag.physical_rows))
            self._segments[fid] = found
        return found


class _EveryKey:
    """The `physical_rows` a bitmap index's row id map is read with when it holds stable
    row ids: every high 32 bits kept (they name no fragment); an entry standing for a whole
    fragment means nothing there, and stops the pruning."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: int) -> int:
        raise UnsupportedFeatureError(
            "a bitmap index of stable row ids with a whole-fragment entry"
        )


def _fragments_of(rows: np.ndarray) -> np.ndarray:
    return (rows >> np.uint64(32)).astype(np.int64)


def _within(rows: np.ndarray, fragments: frozenset[int]) -> np.ndarray:
    """The rows that belong to `fragments`."""
    if not len(rows):
        return EMPTY
    keep = np.isin(_fragments_of(rows), np.fromiter(fragments, dtype=np.int64))
    return rows if keep.all() else rows[keep]


def _all_of(parts: list[_Answer | None]) -> _Answer | None:
    """AND: in fragments every known part covers, rows all of them hold; where only some
    cover, the rows those hold."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    out = known[0]
    for p in known[1:]:
        both = out.covered & p.covered
        pieces = [
            np.intersect1d(_within(out.rows, both), _within(p.rows, both), assume_unique=True),
            _within(out.rows, out.covered - p.covered),
            _within(p.rows, p.covered - out.covered),
        ]
        out = _Answer(out.covered | p.covered, unique_sorted(np.concatenate(pieces)))
    return out


def _any_of(parts: list[_Answer | None]) -> _Answer | None:
    """OR: only fragments every part covers are covered, with the union of their rows."""
    if any(p is None for p in parts):
        return None
    covered = frozenset.intersection(*(p.covered for p in parts))
    if not covered:
        return None
    rows = unique_sorted(np.concatenate([_within(p.rows, covered) for p in parts]))
    return _Answer(covered, rows.astype(np.uint64))
