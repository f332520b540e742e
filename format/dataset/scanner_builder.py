"""pylance's `ScannerBuilder`: a scan configured by chained calls, then `to_scanner()`.

    scan = ScannerBuilder(ds).columns(["id"]).filter("x > 1").limit(10).to_scanner()

Each call sets what the keyword of the same meaning of `LanceDataset.scanner` sets, so
`to_scanner()` is that scan; with `substrait_aggregate`, it is the scan's rows aggregated
by a Substrait plan (`format.dataset.sql.aggregate`). Calls of pylance's that only tune its
own reader are checked and change nothing here (`batch_readahead`, `use_stats`,
`query_parallelism`): Quiver reads ahead by fragments, bounded by bytes (`io_buffer_size`
sets that bound). `with_index_segments`, `row_addr_prefilter` and `scan_stats_callback` are
`format.dataset.scan_extras`'. pylance's Python query objects are refused by name.

`LanceDataset.scanner` takes pylance's keywords of these calls too (`pylance_keywords`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from quiver.format.dataset.blobs import as_bytes
from quiver.format.dataset.fragment import LanceFragment
from quiver.format.dataset.scan_extras import segment_ids
from quiver.format.dataset.search_filter import search_filter_of
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.expr import expression_to_sql

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset


class ScannerBuilder:
    """A scan of `ds`, configured call by call (each returns the builder)."""

    def __init__(self, ds: LanceDataset) -> None:
        self.ds = ds
        self._options: dict[str, Any] = {}
        self._aggregate: bytes | None = None
        self._search_filter: Any = None

    # -- what is read ---------------------------------------------------------------------
    def columns(self, cols: list[str] | dict[str, str] | None = None) -> ScannerBuilder:
        """Column names (nested paths too), or a dict of output name to SQL expression."""
        if cols is not None and not isinstance(cols, list | dict):
            raise TypeError(f"columns must be a list or dict[name, expression], got {type(cols)}")
        return self._set("columns", cols)

    def filter(self, filter: Any) -> ScannerBuilder:
        """A SQL filter or a `pyarrow.compute.Expression`; or a search filtering the search
        (a full-text query or a `VectorSearchQuery`: `format.dataset.search_filter`), kept
        beside it; or pylance's dict of both (`expr_filter`, `search_filter`)."""
        if isinstance(filter, dict) and set(filter) <= {"expr_filter", "search_filter"}:
            for key in ("expr_filter", "search_filter"):
                if filter.get(key) is not None:
                    self.filter(filter[key])
            return self
        if isinstance(filter, str | pc.Expression):
            return self._set("filter", filter)
        found = search_filter_of(self.ds.uri, filter)  # refuses what is no filter
        assert found is not None
        self._search_filter = filter
        return self

    def prefilter(self, prefilter: bool) -> ScannerBuilder:
        """Whether a search applies the filter before finding its nearest rows."""
        return self._set("prefilter", prefilter)

    def limit(self, n: int | None = None) -> ScannerBuilder:
        if n is not None and int(n) < 0:
            raise InvalidInputError("Limit must be non-negative")
        return self._set("limit", n)

    def offset(self, n: int | None = None) -> ScannerBuilder:
        if n is not None and int(n) < 0:
            raise InvalidInputError("Offset must be non-negative")
        return self._set("offset", n)

    def with_fragments(self, fragments: Iterable[LanceFragment] | None) -> ScannerBuilder:
        """Only these fragments of the version."""
        if fragments is not None:
            fragments = list(fragments)
            for f in fragments:
                if not isinstance(f, LanceFragment):
                    raise TypeError(
                        f"fragments must be an iterable of LanceFragment. Got {type(f)} instead."
                    )
        return self._set("fragments", fragments)

    def with_row_id(self, with_row_id: bool = True) -> ScannerBuilder:
        return self._set("with_row_id", with_row_id)

    def with_row_address(self, with_row_address: bool = True) -> ScannerBuilder:
        return self._set("with_row_address", with_row_address)

    def include_deleted_rows(self, flag: bool) -> ScannerBuilder:
        return self._set("include_deleted_rows", flag)

    def blob_handling(self, blob_handling: str | None) -> ScannerBuilder:
        return self._set("blob_handling", blob_handling)

    def order_by(self, orderings: list[Any] | None) -> ScannerBuilder:
        """Sort keys: names or `ColumnOrdering`s."""
        return self._set("order_by", orderings)

    def use_scalar_index(self, use_scalar_index: bool = True) -> ScannerBuilder:
        return self._set("use_scalar_index", use_scalar_index)

    # -- searches -------------------------------------------------------------------------
    def nearest(
        self,
        column: str,
        q: Any,
        k: int | None = None,
        metric: str | None = None,
        nprobes: int | None = None,
        minimum_nprobes: int | None = None,
        maximum_nprobes: int | None = None,
        refine_factor: int | None = None,
        use_index: bool = True,
        ef: int | None = None,
        query_parallelism: int | None = None,
        approx_mode: str = "normal",
        distance_range: tuple[float | None, float | None] | None = None,
        search_effort: float | None = None,
    ) -> ScannerBuilder:
        """A nearest-neighbour search (the keys of `scanner(nearest={...})`)."""
        query = {"column": column, "q": q, "use_index": use_index}
        if approx_mode != "normal":
            query["approx_mode"] = approx_mode
        optional = {
            "k": k,
            "metric": metric,
            "nprobes": nprobes,
            "minimum_nprobes": minimum_nprobes,
            "maximum_nprobes": maximum_nprobes,
            "refine_factor": refine_factor,
            "ef": ef,
            "distance_range": distance_range,
            "search_effort": search_effort,
        }
        query.update({key: v for key, v in optional.items() if v is not None})
        return self._set("nearest", query)

    def full_text_search(self, query: Any, columns: list[str] | None = None) -> ScannerBuilder:
        """A full-text search: a query string (over `columns`, else every indexed column),
        or a query in its dict form."""
        if isinstance(query, str) and columns is not None:
            query = {"query": query, "columns": columns}
        return self._set("full_text_query", query)

    def fast_search(self, flag: bool) -> ScannerBuilder:
        """Search only what indices cover."""
        return self._set("fast_search", flag)

    # -- batches and reading --------------------------------------------------------------
    def batch_size(self, batch_size: int) -> ScannerBuilder:
        return self._set("batch_size", batch_size)

    def batch_size_bytes(self, batch_size_bytes: int) -> ScannerBuilder:
        """Batches of about this many bytes at most (and `batch_size` rows)."""
        return self._set("batch_bytes", batch_size_bytes)

    def io_buffer_size(self, io_buffer_size: int) -> ScannerBuilder:
        """Bytes of decoded batches read ahead at most."""
        if int(io_buffer_size) <= 0:
            raise InvalidInputError("io_buffer_size must be greater than 0")
        return self._set("readahead_bytes", io_buffer_size)

    def fragment_readahead(self, nfragments: int | None = None) -> ScannerBuilder:
        if nfragments is not None and int(nfragments) < 0:
            raise InvalidInputError("fragment_readahead must be non-negative")
        return self._set("fragment_readahead", nfragments)

    def batch_readahead(self, nbatches: int | None = None) -> ScannerBuilder:
        """Checked; Quiver reads ahead by fragments and bytes, not batches."""
        if nbatches is not None and int(nbatches) <= 0:
            raise InvalidInputError("batch_readahead must be greater than 0")
        return self

    def use_stats(self, use_stats: bool = True) -> ScannerBuilder:
        """Accepted: it changes no result."""
        return self

    def scan_in_order(self, scan_in_order: bool = True) -> ScannerBuilder:
        return self._set("scan_in_order", scan_in_order)

    def strict_batch_size(self, strict_batch_size: bool = False) -> ScannerBuilder:
        return self._set("strict_batch_size", strict_batch_size)

    def late_materialization(self, late_materialization: bool | list[str]) -> ScannerBuilder:
        return self._set("late_materialization", late_materialization)

    # -- restrictions and statistics (`format.dataset.scan_extras`) -----------------------
    def with_index_segments(self, index_segments: Iterable[Any] | None) -> ScannerBuilder:
        """A vector search reads only these segments (uuids) of its index."""
        given = None if index_segments is None else segment_ids(self.ds.uri, index_segments)
        return self._set("index_segments", given)

    def row_addr_prefilter(
        self, allowlist: bytes | None = None, blocklist: bytes | None = None
    ) -> ScannerBuilder:
        """Rows kept to those a serialized row id map names, rid of those another names
        (neither: no mask), before a search ranks and a scan's offset and limit."""
        self._set("row_addr_allowlist", allowlist)
        return self._set("row_addr_blocklist", blocklist)

    def minhash_search(self, query: Any) -> ScannerBuilder:
        """A near-duplicate search (a `MinHashQuery`) over a MINHASHLSH index."""
        from quiver.format.dataset.minhash import is_minhash_query

        if not is_minhash_query(query):
            raise TypeError(f"minhash_search expects a MinHashQuery, got {type(query).__name__}")
        return self._set("nearest", query)

    def scan_stats_callback(self, callback: Any) -> ScannerBuilder:
        """Called with the scan's `ScanStatistics` once it has been read to its end."""
        return self._set("scan_stats_callback", callback)

    def disable_scoring_autoprojection(self, disable: bool = True) -> ScannerBuilder:
        """Whether a search leaves `_score` / `_distance` out unless the columns name it."""
        return self._set("autoproject", None if not disable else False)

    # -- the aggregate and the result -----------------------------------------------------
    def substrait_aggregate(self, aggregate: bytes) -> ScannerBuilder:
        """Aggregate the scan's rows by a serialized Substrait plan whose root is an
        AggregateRel."""
        self._aggregate = aggregate
        return self

    def apply_defaults(self, default_opts: dict[str, Any]) -> ScannerBuilder:
        """Call the setter of each option's name with its value (a dict: as keywords)."""
        for key, value in default_opts.items():
            setter = (
                None if key.startswith("_") or key in _NOT_OPTIONS else getattr(self, key, None)
            )
            if setter is None:
                raise InvalidInputError(f"Unknown option {key}")
            setter(**value) if isinstance(value, dict) else setter(value)
        return self

    def to_scanner(self) -> Any:
        """The planned scan (or aggregate): `to_table`, `to_batches`, `to_reader`..."""
        options = dict(self._options)
        if self._search_filter is not None:
            options["filter"] = {
                "expr_filter": options.get("filter"),
                "search_filter": self._search_filter,
            }
        if self._aggregate is None:
            return self.ds.scanner(**options)
        from quiver.format.dataset.sql.aggregate import AggregateScan
        from quiver.format.dataset.sql.table import View

        if options.get("limit") is not None or options.get("offset") is not None:
            raise InvalidInputError(
                f"{self.ds.uri}: Cannot use limit/offset with aggregate. Apply limit to the "
                "result instead."
            )
        if options.get("order_by"):
            raise InvalidInputError(
                f"{self.ds.uri}: Cannot use order_by with aggregate. Apply ordering to the "
                "result instead."
            )
        for unused in ("columns", "batch_size", "batch_bytes"):
            options.pop(unused, None)  # the aggregate decides its columns and batches
        where = options.get("filter")
        if isinstance(where, pc.Expression):
            where = expression_to_sql(where, dataset=self.ds.uri)
        view = View(blob_bytes=as_bytes(self.ds.uri, options.get("blob_handling")), where=where)
        source = lambda cols: self.ds.scanner(cols, **options)  # noqa: E731
        return AggregateScan(self.ds, self._aggregate, source, view, options.get("fragments"))

    def _set(self, key: str, value: Any) -> ScannerBuilder:
        if value is None:
            self._options.pop(key, None)
        else:
            self._options[key] = value
        return self

    def _refuse(self, what: str) -> None:
        raise UnsupportedFeatureError(f"{self.ds.uri}: {what} is not supported by Quiver")


# the builder's methods that are not options
_NOT_OPTIONS = {"apply_defaults", "to_scanner", "ds"}
# pylance's `scanner` keywords that Quiver's has under other names or not at all: the call
# of the builder that takes each
_KEYWORD_CALLS = {
    "batch_size_bytes": "batch_size_bytes",
    "io_buffer_size": "io_buffer_size",
    "batch_readahead": "batch_readahead",
    "use_stats": "use_stats",
    "scan_stats_callback": "scan_stats_callback",
    "disable_scoring_autoprojection": "disable_scoring_autoprojection",
    "index_segments": "with_index_segments",
}


@dataclass(frozen=True)
class Keywords:
    """pylance's `scanner` keywords as Quiver's scanner takes them."""

    batch_bytes: int | None
    readahead_bytes: int | None
    autoproject: bool  # whether a search's score or distance ends its columns
    index_segments: tuple[str, ...] | None
    allowlist: Any
    blocklist: Any
    stats_callback: Any


def pylance_keywords(
    ds: LanceDataset, options: dict[str, Any], batch_bytes: int | None, readahead: int | None
) -> Keywords:
    """pylance's `scanner` keywords among `options` that Quiver's scanner knows under other
    names or not at all, taken out and checked as the builder's calls check them."""
    builder = ScannerBuilder(ds)
    for key, call in _KEYWORD_CALLS.items():
        value = options.pop(key, None)
        if value is not None:
            getattr(builder, call)(value)
    builder.row_addr_prefilter(
        options.pop("row_addr_allowlist", None), options.pop("row_addr_blocklist", None)
    )
    given = builder._options
    return Keywords(
        given.get("batch_bytes", batch_bytes),
        given.get("readahead_bytes", readahead),
        given.get("autoproject", options.pop("autoproject", True)),
        given.get("index_segments"),
        given.get("row_addr_allowlist"),
        given.get("row_addr_blocklist"),
        given.get("scan_stats_callback"),
    )
