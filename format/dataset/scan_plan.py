"""`LanceDataset.scanner`: which scan a call plans.

A plain scan (`format.dataset.scan`), a full-text or nearest-neighbour search, a scan sorted
by `order_by`, one of deleted rows too, or one of blob columns as bytes; around any of them
pylance 14's row address mask and statistics callback (`format.dataset.scan_extras`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from quiver.format.dataset import blobs as _blobs
from quiver.format.dataset.blobs import BlobBytesScan
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.deleted_rows import DeletedRowsScan
from quiver.format.dataset.fragment import LanceFragment, shared_fragments
from quiver.format.dataset.fulltext import FullTextSearch
from quiver.format.dataset.minhash import is_minhash_query, search_nearest
from quiver.format.dataset.ordering import OrderedScan, scan_options
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.scan_extras import MaskedScan, RowMask, StatsScan
from quiver.format.dataset.scanner_builder import pylance_keywords
from quiver.format.dataset.search_filter import filtered_search, search_filter_of
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

if TYPE_CHECKING:
    from quiver.format.dataset.dataset import LanceDataset

__all__ = ["plan_scan"]


def plan_scan(
    ds: LanceDataset,
    core: DatasetCore,
    columns: Sequence[str] | dict[str, str] | None = None,
    filter: str | pc.Expression | None = None,
    limit: int | None = None,
    offset: int | None = None,
    batch_size: int | None = None,
    *,
    with_row_id: bool = False,
    with_row_address: bool = False,
    fragments: Sequence[LanceFragment] | None = None,
    fragment_readahead: int | None = None,
    physical_range: tuple[int, int] | None = None,
    readahead_bytes: int | None = None,
    batch_bytes: int | None = None,
    nearest: dict[str, Any] | None = None,
    prefilter: bool = False,
    full_text_query: str | dict[str, Any] | None = None,
    fast_search: bool = False,
    **options: Any,
) -> Any:
    """The scan `ds.scanner(...)` plans (see `LanceDataset.scanner`)."""
    kw = pylance_keywords(ds, options, batch_bytes, readahead_bytes)
    batch_bytes, readahead_bytes, autoproject = kw.batch_bytes, kw.readahead_bytes, kw.autoproject
    if kw.stats_callback is not None:
        inner = ds.scanner(columns, filter, limit, offset, batch_size, with_row_id=with_row_id,
            with_row_address=with_row_address, fragments=fragments,
            fragment_readahead=fragment_readahead, physical_range=physical_range,
            readahead_bytes=readahead_bytes, batch_bytes=batch_bytes, nearest=nearest,
            prefilter=prefilter, full_text_query=full_text_query, fast_search=fast_search,
            index_segments=kw.index_segments, row_addr_allowlist=kw.allowlist,
            row_addr_blocklist=kw.blocklist, autoproject=autoproject, **options)  # fmt: skip
        return StatsScan(inner, kw.stats_callback, core)
    if kw.index_segments is not None and (nearest is None or is_minhash_query(nearest)):
        raise InvalidInputError(
            f"{ds.uri}: with_index_segments is only supported for vector search"
        )
    mask = RowMask.parse(core, kw.allowlist, kw.blocklist)
    search = search_filter_of(ds.uri, filter)
    if search is not None and search.text is None and search.vector is None:
        filter = search.expr  # pylance's dict form of a SQL filter alone
    elif search is not None:  # a search filtering another
        return filtered_search(
            core, search, columns=columns, nearest=nearest, full_text_query=full_text_query,
            prefilter=prefilter, limit=limit, offset=offset, fast_search=fast_search,
            with_row_id=with_row_id, with_row_address=with_row_address,
            autoproject=autoproject, mask=mask,
        )  # fmt: skip
    if mask is not None and nearest is None and full_text_query is None:
        if options.get("order_by") or options.get("include_deleted_rows"):
            raise UnsupportedFeatureError(
                f"{ds.uri}: a row address mask with order_by or include_deleted_rows"
            )
        kept = mask.fragments()
        chosen = fragments if fragments is not None else shared_fragments(core)
        if kept is not None:
            chosen = [f for f in chosen if f.fragment_id in kept]

        def make(**given: Any) -> Any:
            return ds.scanner(columns, filter, batch_size=batch_size, fragments=chosen,
                with_row_address=with_row_address, fragment_readahead=fragment_readahead,
                readahead_bytes=readahead_bytes, batch_bytes=batch_bytes,
                **given, **options)  # fmt: skip

        return MaskedScan(make, mask, limit=limit, offset=offset, with_row_id=with_row_id)
    if _blobs.as_bytes(ds.uri, options.pop("blob_handling", None)):
        inner = ds.scanner(columns, filter, limit, offset, batch_size, fragments=fragments,
            with_row_id=with_row_id, with_row_address=True, **options)  # fmt: skip
        return BlobBytesScan(inner, core, keep_address=with_row_address)
    order_by, use_scalar_index = scan_options(ds.uri, options)
    if options.get("include_deleted_rows"):
        ids = {"with_row_id": with_row_id, "with_row_address": with_row_address}
        inner = ds.scanner(columns, filter, limit, offset, batch_size, **ids)
        return DeletedRowsScan(inner, ds.uri)  # type: ignore[arg-type]
    if order_by:
        names = None if columns is None else list(columns)
        if isinstance(columns, dict):
            raise InvalidInputError(f"{ds.uri}: order_by with SQL projections")
        extra = [k.column_name for k in order_by if names and k.column_name not in names]
        inner = ds.scanner(names and names + extra, filter, batch_size=batch_size,
                           with_row_id=with_row_id, with_row_address=with_row_address,
                           use_scalar_index=use_scalar_index)  # fmt: skip
        return OrderedScan(inner, order_by, limit=limit, offset=offset,
                           batch_size=batch_size, dropped=extra)  # fmt: skip
    if full_text_query is not None:
        if nearest is not None:
            raise InvalidInputError(
                f"{ds.uri}: a hybrid search (nearest with full_text_query) is a table: "
                "call to_table"
            )
        return FullTextSearch(
            core, full_text_query, columns=columns, filter=filter,  # type: ignore[arg-type]
            prefilter=prefilter, with_row_id=with_row_id, with_row_address=with_row_address,
            limit=limit, offset=offset, fast_search=fast_search, autoproject=autoproject,
            row_mask=mask,
        )  # fmt: skip
    if nearest is not None:  # a vector search, or a MinHash one
        return search_nearest(
            core, nearest, columns=columns, filter=filter, prefilter=prefilter,
            with_row_id=with_row_id, with_row_address=with_row_address, autoproject=autoproject,
            limit=limit, offset=offset, fast_search=fast_search, row_mask=mask,
            index_segments=kw.index_segments,
        )  # fmt: skip
    return Scanner(
        core,
        fragments if fragments is not None else shared_fragments(core),
        columns=columns,
        filter=filter,
        limit=limit,
        offset=offset,
        batch_size=batch_size,
        with_row_id=with_row_id,
        with_row_address=with_row_address,
        fragment_readahead=fragment_readahead,
        physical_range=physical_range,
        readahead_bytes=readahead_bytes,
        batch_bytes=batch_bytes,
        use_scalar_index=use_scalar_index,
    )
