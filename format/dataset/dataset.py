"""`LanceDataset`: pylance's dataset API over one resolved version (`DatasetCore`).

Every method delegates: reads to fragments and scans, schema evolution, compaction and
cleanup to their modules, which take and return cores; mutations move the facade to the
version they commit, as pylance's do. `dataset()` and `write_dataset()` open and create.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset import backfill, cleanup, compaction, evolution
from quiver.format.dataset import blobs as _blobs
from quiver.format.dataset import indexing as _indexing
from quiver.format.dataset import metadata as _metadata
from quiver.format.dataset import take as _take
from quiver.format.dataset import update as _update
from quiver.format.dataset import write as _write
from quiver.format.dataset.blobs import BlobBytesScan
from quiver.format.dataset.cleanup import CleanupStats
from quiver.format.dataset.clone import deep_clone, shallow_clone
from quiver.format.dataset.compaction import CompactionMetrics
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.deleted_rows import DeletedRowsScan
from quiver.format.dataset.distributed_indexing import DistributedIndexMethods, stage_inverted
from quiver.format.dataset.fragment import LanceFragment, fragment_of, fragments_of
from quiver.format.dataset.fulltext import FullTextSearch
from quiver.format.dataset.history import version_history
from quiver.format.dataset.hybrid import hybrid_table
from quiver.format.dataset.merge_insert import MergeInsertBuilder
from quiver.format.dataset.minhash import is_minhash_query
from quiver.format.dataset.nearest import NearestSearch, nearest_table
from quiver.format.dataset.ordering import OrderedScan
from quiver.format.dataset.refs import Branches, Tags, create_branch
from quiver.format.dataset.row_changes import DEFAULT_CONFLICT_RETRIES, DEFAULT_RETRY_TIMEOUT
from quiver.format.dataset.scan import Scanner
from quiver.format.dataset.scan_plan import plan_scan
from quiver.format.dataset.session import SessionMethods
from quiver.format.dataset.stats import LanceStats
from quiver.format.dataset.validate import validate as _validate
from quiver.format.errors import InvalidInputError
from quiver.format.file.base import DEFAULT_BATCH_SIZE
from quiver.format.index.scalar import catalog as _catalog
from quiver.format.io.store import open_store
from quiver.format.proto import transaction_pb2
from quiver.format.table.manifest import Manifest
from quiver.format.table.schema import LanceSchema
from quiver.format.table.transaction import new_transaction
from quiver.format.table.versions import Reference

if TYPE_CHECKING:
    from quiver.format.dataset.sql.query import SqlQueryBuilder

AnyScan = Scanner | NearestSearch | FullTextSearch | OrderedScan | DeletedRowsScan | BlobBytesScan


def dataset(
    uri: str,
    version: Reference = None,
    asof: dt.datetime | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LanceDataset:
    """Open a Lance dataset at its latest version, a version number, a tag or a timestamp."""
    return LanceDataset(DatasetCore.open(str(uri), version, asof, storage_options))


def write_dataset(
    data: Any,
    uri: str | LanceDataset,
    schema: pa.Schema | None = None,
    mode: _write.Mode = "create",
    *,
    max_rows_per_file: int = _write.DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = _write.DEFAULT_MAX_ROWS_PER_GROUP,
    data_storage_version: str | None = None,
    enable_stable_row_ids: bool = False,
    storage_options: dict[str, Any] | None = None,
    commit_message: str | None = None,
    idempotency_key: str | None = None,
    config: dict[str, str] | None = None,
    allow_external_blob_outside_bases: bool = False,
    external_blob_mode: str = "reference",
) -> LanceDataset:
    """Create, append to or overwrite a Lance dataset from Arrow data (pylance's signature;
    see `format.dataset.write.write_dataset`); `uri` may be a dataset, to write to the
    branch it is on."""
    if isinstance(uri, LanceDataset):
        storage_options = storage_options or uri.core.storage_options
        uri = uri.uri
    core = _write.write_dataset(
        data, uri, schema, mode, max_rows_per_file=max_rows_per_file,
        max_rows_per_group=max_rows_per_group, data_storage_version=data_storage_version,
        enable_stable_row_ids=enable_stable_row_ids, storage_options=storage_options,
        commit_message=commit_message, idempotency_key=idempotency_key, config=config,
        allow_external_blob_outside_bases=allow_external_blob_outside_bases,
        external_blob_mode=external_blob_mode,
    )  # fmt: skip
    return LanceDataset(core)


class LanceDataset(_blobs.BlobMethods, SessionMethods, DistributedIndexMethods):
    """A dataset pinned to one version: pylance's API over a `DatasetCore`. Mutations
    commit a new version and move this object to it, as pylance's do."""

    def __init__(self, core: DatasetCore) -> None:
        self._core = core

    @property
    def core(self) -> DatasetCore:
        """The resolved version behind this facade (store, manifest, options)."""
        return self._core

    def _advance(self, core: DatasetCore) -> None:
        """Move this object to a version just committed."""
        self._core = core

    # -- identity ---------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self._core.uri

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._core.version

    @property
    def latest_version(self) -> int:
        """The newest committed version (listed now)."""
        return self._core.latest_version()

    @property
    def manifest(self) -> Manifest:
        """The decoded manifest of this version."""
        return self._core.manifest

    @property
    def lance_schema(self) -> LanceSchema:
        """The schema with Lance field ids."""
        return self._core.lance_schema

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self._core.schema

    @property
    def data_storage_version(self) -> str:
        """Storage version of the data files ("0.1", "2.0", "2.1", "2.2")."""
        return self._core.data_storage_version

    @property
    def tags(self) -> Tags:
        """The dataset's tags."""
        return Tags(self._core)

    @property
    def stats(self) -> LanceStats:
        """Statistics of this version (pylance's `ds.stats`)."""
        return LanceStats(self._core, self.index_statistics)

    @property
    def branches(self) -> Branches:
        """The dataset's branches."""
        return Branches(self._core)

    def create_branch(self, branch: str, reference: Reference = None) -> LanceDataset:
        """Create a branch from a version (this one by default; a number on this branch, a
        tag, or (branch, number)) and return the dataset on it."""
        return LanceDataset(create_branch(self._core, branch, reference))

    def config(self) -> dict[str, str]:
        """Table configuration of this version (a method, as pylance's)."""
        return dict(self._core.manifest.pb.config)

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata of this version."""
        return dict(self._core.manifest.pb.table_metadata)

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema's metadata of this version."""
        return {k: v.decode() for k, v in self._core.manifest.pb.schema_metadata.items()}

    def update_config(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """Set (or with None remove) table config keys; the config after."""
        self._advance(_metadata.update_config(self._core, values, replace=replace))
        return self.config()

    def delete_config_keys(self, keys: list[str]) -> None:
        """Remove table config keys."""
        self._advance(_metadata.delete_config_keys(self._core, keys))

    def update_metadata(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """Set (or remove) table metadata keys; the table metadata after."""
        self._advance(_metadata.update_metadata(self._core, values, replace=replace))
        return self.metadata

    def update_schema_metadata(
        self, values: dict[str, str | None], *, replace: bool = False
    ) -> dict[str, str]:
        """Set (or remove) schema metadata keys; the schema metadata after."""
        self._advance(_metadata.update_schema_metadata(self._core, values, replace=replace))
        return self.schema_metadata

    def update_field_metadata(
        self, field_updates: dict[str, dict[str, str | None]], *, replace: bool = False
    ) -> None:
        """Set (or remove) metadata keys of fields named by path ("st.x")."""
        self._advance(_metadata.update_field_metadata(self._core, field_updates, replace=replace))

    def replace_schema_metadata(self, new_metadata: dict[str, str]) -> None:
        """The schema's metadata replaced (pylance's older form)."""
        self.update_schema_metadata(new_metadata, replace=True)

    def replace_field_metadata(self, field_name: str, new_metadata: dict[str, str]) -> None:
        """A field's metadata replaced (pylance's older form)."""
        self.update_field_metadata({field_name: new_metadata}, replace=True)

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    # -- versions ---------------------------------------------------------------------
    def versions(self) -> list[dict[str, Any]]:
        """Every version with its commit time and summary statistics, oldest first."""
        return version_history(self._core.store)

    def checkout_version(self, version: Reference) -> LanceDataset:
        """The same dataset at another version: a number on this branch, a tag, or
        (branch, number), where a None branch is the main line and None the latest."""
        return LanceDataset(self._core.checkout(version))

    # -- fragments and scans ----------------------------------------------------------
    def get_fragments(self) -> list[LanceFragment]:
        """The fragments of this version."""
        return fragments_of(self._core)

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """One fragment by id, or None."""
        return fragment_of(self._core, fragment_id)

    def scanner(
        self,
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
    ) -> AnyScan:
        """Plan a scan: projection (names, or a dict of SQL projections), filter (SQL or a
        `pyarrow.compute.Expression`), limit/offset, row id and system columns; with one
        fragment, `physical_range` (start, stop) limits it to those physical rows. Fragments
        are decoded `fragment_readahead` at a time in background threads, queueing at most
        `readahead_bytes` of batches (at least one per thread); `batch_bytes` caps batches at
        about that many bytes (never under 1024 rows) as well as `batch_size` rows.
        `nearest` plans a nearest-neighbour search instead (`format.dataset.nearest`), with
        the filter applied before it when `prefilter`; `full_text_query` a full-text search
        (`format.dataset.fulltext`; `fast_search` leaves out rows no index covers).
        pylance's `order_by` sorts the rows (`format.dataset.ordering`); `use_scalar_index`
        False reads without index pruning; `late_materialization`, `scan_in_order` and
        `strict_batch_size` change no result here (batches already hold `batch_size` rows,
        in order). pylance's `row_addr_allowlist` / `_blocklist`, `index_segments` and
        `scan_stats_callback` are `format.dataset.scan_extras`' (see `scan_plan`)."""
        return plan_scan(
            self, self._core, columns, filter, limit, offset, batch_size,
            with_row_id=with_row_id, with_row_address=with_row_address, fragments=fragments,
            fragment_readahead=fragment_readahead, physical_range=physical_range,
            readahead_bytes=readahead_bytes, batch_bytes=batch_bytes, nearest=nearest,
            prefilter=prefilter, full_text_query=full_text_query, fast_search=fast_search,
            **options,
        )  # fmt: skip

    def to_table(
        self,
        columns: Sequence[str] | dict[str, str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
        nearest: dict[str, Any] | None = None,
        prefilter: bool = False,
        full_text_query: str | dict[str, Any] | None = None,
        fast_search: bool = False,
        hybrid: dict[str, Any] | None = None,
        **options: Any,
    ) -> pa.Table:
        """Read the (projected, filtered, limited) rows as one table; with `nearest`, the
        nearest neighbours of a query vector (or of each of a batch), pylance's shape; with
        `full_text_query`, the rows matching it best first, with `_score`; with both, the
        two fused as LanceDB's hybrid search fuses them (`format.dataset.hybrid`; `hybrid`:
        fusion "rrf" | "linear", rrf_k, weight, normalize "score" | "rank"); scan options
        (`order_by`...) as `scanner`'s."""
        if options or not (filter is None or isinstance(filter, str | pc.Expression)):
            # scan options, or a search filtering the search (`format.dataset.search_filter`)
            return self.scanner(
                columns, filter, limit, offset, batch_size, with_row_id=with_row_id,
                with_row_address=with_row_address, nearest=nearest, prefilter=prefilter,
                full_text_query=full_text_query, fast_search=fast_search, **options,
            ).to_table()  # fmt: skip
        if full_text_query is not None and nearest is not None:
            return hybrid_table(
                self._core,
                nearest,
                full_text_query,
                limit=10 if limit is None else limit,
                columns=columns,  # type: ignore[arg-type]
                filter=filter,  # type: ignore[arg-type]
                prefilter=prefilter,
                with_row_id=with_row_id,
                **(hybrid or {}),
            )
        if full_text_query is not None:
            return self.scanner(
                columns, filter, limit, offset, with_row_id=with_row_id,
                with_row_address=with_row_address, prefilter=prefilter,
                full_text_query=full_text_query, fast_search=fast_search,
            ).to_table()  # fmt: skip
        if nearest is not None and not is_minhash_query(nearest):
            return nearest_table(
                self._core, nearest, columns=columns, filter=filter, prefilter=prefilter,
                with_row_id=with_row_id, with_row_address=with_row_address, limit=limit,
                offset=offset,
            )  # fmt: skip
        return self.scanner(
            columns, filter, limit, offset, batch_size, with_row_id=with_row_id,
            with_row_address=with_row_address, nearest=nearest, prefilter=prefilter,
            fast_search=fast_search,
        ).to_table()  # fmt: skip

    def validate(self) -> None:
        """Check this version's consistency as pylance does (CorruptFileError if not)."""
        _validate(self._core)

    def to_pandas(self, **kwargs: Any) -> Any:
        """`to_table(**kwargs)` as a pandas DataFrame."""
        return self.to_table(**kwargs).to_pandas()

    def to_batches(self, **kwargs: Any) -> Any:
        """Stream rows as record batches (same options as `scanner`)."""
        return self.scanner(**kwargs).to_batches()

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of live rows, optionally matching a filter."""
        if filter is None:
            return sum(f.count_rows() for f in self.get_fragments())
        return self.scanner(columns=[], filter=filter).count_rows()

    # -- indices ----------------------------------------------------------------------
    def list_indices(self) -> list[dict[str, Any]]:
        """The version's indices in pylance's shape (fragment_ids a set of ints)."""
        return _catalog.list_indices(self._core)

    def describe_indices(self) -> list[_catalog.IndexDescription]:
        """One description per index: type, fields, rows indexed, segments, size."""
        return _catalog.describe_indices(self._core)

    def remap_row_addrs(self, addrs: Any) -> pa.Array | None:
        """Row addresses now of rows deferred compactions moved (see `_catalog`)."""
        return _catalog.remap_row_addrs(self._core, addrs)

    def index_statistics(self, index_name: str) -> dict[str, Any]:
        """pylance's statistics of one index; IndexNotFoundError (a KeyError) if none."""
        return _catalog.index_statistics(self._core, index_name)

    def create_scalar_index(
        self,
        column: str,
        index_type: str,
        name: str | None = None,
        *,
        replace: bool = True,
        train: bool = True,
        fragment_ids: Sequence[int] | None = None,
        index_uuid: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Build a scalar index of `column` over the live rows and commit it as the next
        version (pylance's `create_scalar_index`: named `{column}_idx` by default, replacing
        an index of the same name unless `replace=False`; INVERTED takes pylance's
        tokenizer options in `kwargs`; with `fragment_ids`, an INVERTED index's partition
        is staged for `merge_index_metadata`, committing nothing)."""
        if fragment_ids is not None and str(index_type).upper() in ("INVERTED", "FTS"):
            return stage_inverted(self._core, column, fragment_ids, index_uuid, kwargs)
        core = _indexing.create_scalar_index(
            self._core,
            column,
            index_type,
            name,
            replace=replace,
            train=train,
            fragment_ids=fragment_ids,
            index_uuid=index_uuid,
            **kwargs,
        )
        self._advance(core)

    def create_index(
        self,
        column: str,
        index_type: str,
        name: str | None = None,
        metric: str = "L2",
        replace: bool = False,
        num_partitions: int | None = None,
        ivf_centroids: np.ndarray | None = None,
        pq_codebook: np.ndarray | None = None,
        num_sub_vectors: int | None = None,
        *,
        train: bool = True,
        fragment_ids: Sequence[int] | None = None,
        index_uuid: str | None = None,
        target_partition_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Build an IVF index (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_HNSW_FLAT / _PQ / _SQ) of the vector
        column `column` and commit it as the next version (pylance's `create_index`, its
        defaults included; options `num_bits`, `sample_rate`, `max_iters`, HNSW's `m`,
        `ef_construction`, `max_level`, `seed`, which makes a build repeatable, and `progress`,
        a callable told of each stage as a dict). A scalar index type builds that index."""
        unknown = sorted(set(kwargs) - set(_indexing.VECTOR_OPTIONS))
        if unknown:
            raise InvalidInputError(f"{self.uri}: create_index has no option {', '.join(unknown)}")
        core = _indexing.create_index(
            self._core,
            column,
            index_type,
            name,
            metric,
            replace,
            num_partitions,
            ivf_centroids,
            pq_codebook,
            num_sub_vectors,
            train=train,
            fragment_ids=fragment_ids,
            index_uuid=index_uuid,
            target_partition_size=target_partition_size,
            **kwargs,
        )
        self._advance(core)

    def drop_index(self, name: str) -> None:
        """Drop every segment of the index `name` as the next version (pylance's
        `drop_index`); its files stay until `cleanup_old_versions`."""
        self._advance(_indexing.drop_index(self._core, name))

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first `num_rows` rows."""
        return self.scanner(limit=num_rows, **kwargs).to_table()

    def take(
        self,
        indices: Sequence[int] | np.ndarray | pa.Array,
        columns: Sequence[str] | dict[str, str] | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.Table:
        """Rows by position among the live rows of this version, in the order given
        (`columns` a list, or a dict of SQL projections, as in `scanner`)."""
        frags = self.get_fragments()
        return _take.take(self._core, frags, indices, columns, with_row_id, with_row_address)

    def take_rows(
        self,
        row_ids: Sequence[int] | np.ndarray | pa.Array,
        columns: Sequence[str] | dict[str, str] | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> pa.Table:
        """Rows by row id (stable row ids, else row addresses), in the order given; ids of
        deleted or missing rows are left out, as pylance's `_take_rows` does."""
        frags = self.get_fragments()
        return _take.take_rows(self._core, frags, row_ids, columns, with_row_id, with_row_address)

    # pylance's name for it
    _take_rows = take_rows

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether the dataset gives rows stable ids (a manifest feature flag)."""
        return self._core.manifest.uses_stable_row_ids

    @property
    def max_field_id(self) -> int:
        """The largest field id the schema or any data file of this version uses (a dropped
        column's id counts while a data file still holds it), as pylance counts it."""
        in_files = (
            i for frag in self._core.manifest.pb.fragments for df in frag.files for i in df.fields
        )
        return max(max((f.id for f in self.lance_schema.walk()), default=-1), *in_files, -1)

    # -- mutations ----------------------------------------------------------------------
    def sql(self, sql: str) -> SqlQueryBuilder:
        """A SQL query over this version (pylance's): the dataset is table `dataset`."""
        from quiver.format.dataset.sql.query import SqlQueryBuilder

        return SqlQueryBuilder(self, sql)

    def insert(self, data: Any, *, mode: _write.Mode = "append", **kwargs: Any) -> None:
        """Write `data` to this dataset (its branch) and move to the new version: pylance's
        `insert`, `write_dataset(data, self, mode=mode, **kwargs)`."""
        self._advance(write_dataset(data, self, mode=mode, **kwargs).core)

    def delete(
        self,
        predicate: str | pc.Expression,
        *,
        conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
        retry_timeout: dt.timedelta = DEFAULT_RETRY_TIMEOUT,
    ) -> dict[str, int]:
        """Delete the rows matching a SQL predicate (or Expression), as one new version;
        returns `{"num_deleted_rows": n}`, the rows this call deleted.

        Each touched fragment gets a deletion file holding its old and new deleted rows;
        fragments left with no live row are dropped. A version is committed even when no
        row matches, as pylance does.
        """
        core, stats = _update.delete(
            self._core, predicate, conflict_retries=conflict_retries, retry_timeout=retry_timeout
        )
        self._advance(core)
        return stats

    def update(
        self,
        updates: dict[str, str],
        where: str | pc.Expression | None = None,
        *,
        conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
        retry_timeout: dt.timedelta = DEFAULT_RETRY_TIMEOUT,
    ) -> dict[str, int]:
        """Set columns to SQL expressions on the rows matching `where` (all rows when
        None), as one new version; returns `{"num_rows_updated": n}` (pylance's
        `update`). The rows are rewritten into new fragments and their old copies deleted."""
        core, stats = _update.update(
            self._core,
            updates,
            where,
            conflict_retries=conflict_retries,
            retry_timeout=retry_timeout,
        )
        self._advance(core)
        return stats

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Start a merge of source rows into this dataset, matched on the `on` columns
        (default: the unenforced primary key); see `MergeInsertBuilder`."""
        return MergeInsertBuilder(self, on)

    def add_columns(
        self,
        transforms: Any,
        read_columns: Sequence[str] | None = None,
        reader_schema: pa.Schema | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Add columns from SQL expressions, all-null fields, Arrow data (aligned with the
        rows, or naming each row's `_rowaddr`) or a function of each batch."""
        udf = callable(transforms) and not hasattr(transforms, "__arrow_c_stream__")
        if read_columns is not None and not udf:
            raise InvalidInputError("read_columns is only for a function computing the columns")
        if udf:
            core = backfill.add_columns_udf(
                self._core, transforms, read_columns, batch_size or DEFAULT_BATCH_SIZE
            )
        elif backfill.names_rows(transforms):
            core = backfill.add_columns_by_address(self._core, transforms, schema=reader_schema)
        else:
            core = evolution.add_columns(
                self._core, transforms, reader_schema=reader_schema, batch_size=batch_size
            )
        self._advance(core)

    def merge(
        self,
        data_obj: Any,
        left_on: str,
        right_on: str | None = None,
        schema: pa.Schema | None = None,
    ) -> None:
        """Add the columns of `data_obj` joined on `left_on` = `right_on` (pylance's
        `merge`): each row takes the last matching source row's values, NULL when none.
        No existing data file is rewritten."""
        self._advance(
            backfill.merge_columns(self._core, data_obj, left_on, right_on, schema=schema)
        )

    def update_columns(self, data: Any, schema: pa.Schema | None = None) -> dict[str, int]:
        """Rewrite existing columns in place from rows naming their `_rowaddr` (a
        backfill of corrected values; the other rows keep theirs): one new data file per
        touched fragment, committed as an `Update` rewriting columns. Returns
        `{"num_rows_updated": n}`."""
        core, stats = backfill.update_columns_by_address(self._core, data, schema=schema)
        self._advance(core)
        return stats

    def drop_columns(self, columns: Sequence[str]) -> None:
        """Remove columns from the schema (data files are left as they are)."""
        self._advance(evolution.drop_columns(self._core, columns))

    def alter_columns(self, *alterations: dict[str, Any]) -> None:
        """Rename, change nullability or change the type of columns (pylance's dict form)."""
        self._advance(evolution.alter_columns(self._core, *alterations))

    def shallow_clone(
        self,
        target_path: str,
        reference: Reference = None,
        storage_options: dict[str, Any] | None = None,
    ) -> LanceDataset:
        """A new dataset at `target_path` sharing this one's files through a base path.

        The clone starts at the referenced version (number, tag, or this version) and
        copies no data: its manifest points every existing file at the source's root.
        """
        source = self._core if reference is None else self._core.checkout(reference)
        target = open_store(str(target_path), storage_options)
        tag = reference if isinstance(reference, str) else None
        return LanceDataset(shallow_clone(source, target, tag=tag, storage_options=storage_options))

    def deep_clone(
        self,
        target_path: str,
        reference: Reference = None,
        storage_options: dict[str, Any] | None = None,
    ) -> LanceDataset:
        """A new dataset at `target_path` with a copy of every file the referenced version
        (this one by default) uses: it needs nothing of this dataset afterwards."""
        source = self._core if reference is None else self._core.checkout(reference)
        target = open_store(str(target_path), storage_options)
        return LanceDataset(deep_clone(source, target, storage_options=storage_options))

    @property
    def optimize(self) -> DatasetOptimizer:
        """Table maintenance (pylance's `ds.optimize`): `compact_files(...)`."""
        return DatasetOptimizer(self)

    def cleanup_old_versions(
        self,
        older_than: dt.timedelta | None = None,
        retain_versions: int | None = None,
        *,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
        versions: Sequence[int] | None = None,
    ) -> CleanupStats:
        """Remove old versions and the files only they used."""
        return cleanup.cleanup_old_versions(
            self._core,
            older_than,
            retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
            versions=versions,
        )

    def restore(self) -> None:
        """Make this (old) version the latest again, as a new version."""
        body = transaction_pb2.Transaction.Restore(version=self.version)
        self._advance(self._core.commit(new_transaction(self.latest_version, "restore", body)))


class DatasetOptimizer:
    """pylance's ``ds.optimize`` namespace (compaction, index updates)."""

    def __init__(self, ds: LanceDataset) -> None:
        self._ds = ds

    def compact_files(
        self,
        *,
        target_rows_per_fragment: int | None = None,
        max_rows_per_group: int | None = None,
        materialize_deletions: bool | None = None,
        materialize_deletions_threshold: float | None = None,
        num_threads: int | None = None,
        **options: Any,
    ) -> CompactionMetrics:
        """Compact small fragments (see `compaction.compact_files` for the other options
        pylance takes); the dataset moves to the version committed, if any."""
        core, metrics = compaction.compact_files(
            self._ds.core,
            target_rows_per_fragment=target_rows_per_fragment,
            max_rows_per_group=max_rows_per_group,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            num_threads=num_threads,
            **options,
        )
        self._ds._advance(core)
        return metrics

    def optimize_indices(
        self,
        *,
        num_indices_to_merge: int | None = None,
        index_names: list[str] | None = None,
        retrain: bool = False,
        progress: Callable[[dict[str, Any]], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """Add the fragments no index segment covers to the indices, as pylance's
        `optimize_indices` (see `indexing.optimize_indices`); the dataset moves to the
        version committed, if any."""
        if kwargs:
            raise InvalidInputError(
                f"{self._ds.uri}: optimize_indices has no option {', '.join(sorted(kwargs))}"
            )
        core = _indexing.optimize_indices(
            self._ds.core,
            num_indices_to_merge=num_indices_to_merge,
            index_names=index_names,
            retrain=retrain,
            progress=progress,
        )
        if core is not None:
            self._ds._advance(core)
