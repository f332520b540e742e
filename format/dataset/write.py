"""`write_dataset`: stream Arrow data into data files, one fragment per file, then commit.

Memory stays bounded whatever the input size: batches flow straight into the current file
writer, which flushes pages as they fill. The schema of appended data is checked before
any file is written, and files written by a failed call are removed (best effort; cleanup
removes whatever a killed writer leaves behind).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from quiver.format.dataset.blob_writes import fits_blob_v2, is_blob_v2, stored_schema, to_blob_v2
from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import (
    DatasetAlreadyExistsError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from quiver.format.file.base import DataFileWriter, WrittenFile
from quiver.format.file.blob_values import ExternalBlobs, SidecarOpener
from quiver.format.io.store import ObjectStore, discard, open_store
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.commit import commit_transaction
from quiver.format.table.manifest import STORAGE_VERSIONS
from quiver.format.table.schema import LanceSchema, check_new_schema
from quiver.format.table.transaction import (
    IDEMPOTENCY_KEY,
    ManifestContext,
    check_writable,
    new_transaction,
)

DEFAULT_STORAGE_VERSION = "2.2"  # pylance 14's default
DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
DEFAULT_MAX_ROWS_PER_GROUP = 1024
WRITABLE_VERSIONS = ("0.1", "2.0", "2.1", "2.2", "2.3")
_VERSION_ALIASES = {"legacy": "0.1", "0.1": "0.1", "stable": DEFAULT_STORAGE_VERSION, "next": "2.3"}

Mode = Literal["create", "append", "overwrite"]


def normalize_storage_version(version: str | None) -> str:
    """ "legacy"/"0.1", "2.0", ... -> the manifest's version string; refuses what we can't write."""
    if version is None:
        return DEFAULT_STORAGE_VERSION
    v = _VERSION_ALIASES.get(str(version), str(version))
    if v not in STORAGE_VERSIONS:
        raise InvalidInputError(f"unknown data_storage_version {version!r}")
    if v not in WRITABLE_VERSIONS:
        raise UnsupportedFeatureError(
            f"writing storage version {v} is not supported (writable: "
            f"{', '.join(WRITABLE_VERSIONS)})"
        )
    return v


def data_file_name() -> str:
    """A new data file name as pylance makes them: 24 binary digits + 26 hex digits."""
    raw = uuid.uuid4().bytes
    return "".join(f"{b:08b}" for b in raw[:3]) + raw[3:].hex() + ".lance"


def to_reader(data: Any, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """Anything Arrow-like (table, batch, reader, batches, C stream) as a RecordBatchReader."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if isinstance(data, Iterable) and schema is not None:
        return pa.RecordBatchReader.from_batches(schema, data)
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return pa.Table.from_pandas(data, schema=schema, preserve_index=False).to_reader()
    except ImportError:
        pass
    raise InvalidInputError(
        f"cannot write {type(data).__name__}: pass an Arrow table, record batch(es) "
        "with a schema, or a RecordBatchReader"
    )


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """`batch` with exactly the names and types of `schema` (casting when they differ)."""
    if batch.schema.equals(schema, check_metadata=False):
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    if batch.num_columns != len(schema):
        raise SchemaMismatchError(f"{where}: batch columns {batch.schema.names} != {schema.names}")
    arrays = []
    for col, f in zip(batch.columns, schema, strict=True):
        try:
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(f"{where}: column {f.name!r}: {e}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def open_writer(
    sink: Any,
    schema: LanceSchema,
    storage_version: str,
    *,
    max_rows_per_group: int,
    path: str,
    sidecars: SidecarOpener | None = None,
    external: ExternalBlobs | None = None,
) -> DataFileWriter:
    """A data file writer for one storage version (`sidecars` opens the file's blob
    sidecars, for blob v2 values too large to keep inline)."""
    if storage_version == "0.1":
        from quiver.format.file.legacy_writer import LegacyFileWriter

        return LegacyFileWriter(
            sink, schema, max_rows_per_group=max_rows_per_group, path_for_errors=path
        )
    if storage_version in ("2.1", "2.2", "2.3"):
        from quiver.format.file.v21.writer import StructuralFileWriter

        return StructuralFileWriter(
            sink,
            schema,
            version=storage_version,
            path_for_errors=path,
            sidecars=sidecars,
            external=external,
        )
    from quiver.format.file.v20.writer import V2FileWriter

    return V2FileWriter(sink, schema, version=storage_version, path_for_errors=path)


def check_append_schema(
    data: pa.Schema, target: LanceSchema, dataset: str, *, legacy: bool = False
) -> list[str]:
    """Refuse appended data whose columns differ from the dataset's; returns the columns to
    write, in the dataset's order. Nullable columns may be left out (pylance's rule: they
    read as NULL, the new files don't hold them), except in legacy (0.1) datasets, whose
    every file must hold every column (pylance appends there, then can't read)."""
    want = target.to_arrow()
    have = {f.name: f for f in data}
    missing = [f.name for f in want if f.name not in have and (legacy or not f.nullable)]
    extra = [n for n in have if n not in want.names]
    wrong = [
        f"{f.name} ({have[f.name].type} instead of {f.type})"
        for f in want
        if f.name in have
        and not _stored_type(have[f.name].type).equals(f.type)
        and not (is_blob_v2(f) and fits_blob_v2(have[f.name].type, f))
    ]
    problems = []
    if missing:
        problems.append("missing columns " + ", ".join(missing))
    if extra:
        problems.append("unexpected columns " + ", ".join(extra))
    if wrong:
        problems.append("differently typed columns " + ", ".join(wrong))
    if problems:
        raise SchemaMismatchError(
            f"cannot append to {dataset}: {'; '.join(problems)} (dataset schema: "
            + ", ".join(f"{f.name}: {f.type}" for f in want)
            + ")"
        )
    return [name for name in want.names if name in have]


def _stored_type(dtype: pa.DataType) -> pa.DataType:
    """The type a column is stored (and read back) as: views become plain strings/binary."""
    return LanceSchema.from_arrow(pa.schema([pa.field("x", dtype)])).fields[0].arrow_type


@dataclass
class _FileInProgress:
    name: str
    sink: Any
    writer: DataFileWriter
    rows: int = 0


def write_fragment_files(
    store: ObjectStore,
    reader: pa.RecordBatchReader,
    schema: LanceSchema,
    storage_version: str,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
    columns: list[str] | None = None,
    dictionaries: dict[int, pa.Array] | None = None,
    max_bytes_per_file: int | None = None,
    external: ExternalBlobs | None = None,
) -> list[table_pb2.DataFragment]:
    """Write the stream into data files of at most `max_rows_per_file` rows; one fragment each.
    With `max_bytes_per_file`, a file is also closed once it holds that many bytes (after the
    batch that reached it).

    The fragments have no id yet (the commit assigns them). On error every file written
    so far is removed. Legacy files' dictionary values are collected into `dictionaries`.
    """
    if max_rows_per_file < 1 or max_rows_per_group < 1:
        raise InvalidInputError("max_rows_per_file and max_rows_per_group must be positive")
    arrow = schema.to_arrow()
    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    current: _FileInProgress | None = None

    def finish() -> None:
        nonlocal current
        assert current is not None
        info: WrittenFile = current.writer.finish()
        current.sink.close()
        if dictionaries is not None and not dictionaries:
            dictionaries.update(getattr(current.writer, "dictionaries", None) or {})
        fragments.append(_fragment(current.name, info))
        current = None

    try:
        for batch in _batches(reader, columns, arrow, store.uri):
            offset = 0
            while offset < batch.num_rows:
                if current is None:
                    name = data_file_name()
                    written.append(name)
                    sink = store.open_write(f"data/{name}")
                    current = _FileInProgress(name, sink, None)  # type: ignore[arg-type]
                    current.writer = open_writer(
                        sink,
                        schema,
                        storage_version,
                        max_rows_per_group=max_rows_per_group,
                        path=store.uri_of(f"data/{name}"),
                        sidecars=_sidecars(store, name),
                        external=external,
                    )
                take = min(batch.num_rows - offset, max_rows_per_file - current.rows)
                current.writer.write(batch.slice(offset, take))
                current.rows += take
                offset += take
                full = max_bytes_per_file is not None and current.sink.tell() >= max_bytes_per_file
                if current.rows >= max_rows_per_file or full:
                    finish()
        if current is not None:
            finish()
    except BaseException:
        if current is not None:
            discard(current.sink)
        for name in written:
            with contextlib.suppress(Exception):
                store.delete(f"data/{name}")
            with contextlib.suppress(Exception):
                store.delete_tree(f"data/{_stem(name)}")
        raise
    return fragments


def _stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _sidecars(store: ObjectStore, name: str) -> SidecarOpener:
    """Opens the blob sidecars of data file `name`: `data/<stem>/<sidecar name>`."""
    return lambda sidecar: store.open_write(f"data/{_stem(name)}/{sidecar}")


def _batches(
    reader: pa.RecordBatchReader, columns: list[str] | None, schema: pa.Schema, uri: str
) -> Iterator[pa.RecordBatch]:
    """The input batches in the dataset's column order and exact types."""
    for batch in reader:
        if columns is not None:
            batch = batch.select(columns)
        if not batch.schema.equals(schema, check_metadata=False):
            try:  # views to plain types, list item names; columns already right stay as they are
                arrays = [
                    c
                    if c.type.equals(f.type)
                    else to_blob_v2(c, f, uri)
                    if is_blob_v2(f)
                    else c.cast(f.type)
                    for c, f in zip(batch.columns, schema, strict=True)
                ]
                batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(f"{uri}: batch does not match the schema: {e}") from None
        for field, col in zip(schema, batch.columns, strict=True):
            if not field.nullable and col.null_count:
                raise SchemaMismatchError(
                    f"{uri}: column {field.name!r} is not nullable but the data has "
                    f"{col.null_count} null(s)"
                )
        if batch.num_rows:
            yield batch


def _fragment(name: str, info: WrittenFile) -> table_pb2.DataFragment:
    return table_pb2.DataFragment(
        files=[
            table_pb2.DataFile(
                path=name,
                fields=info.fields,
                column_indices=info.column_indices,
                file_major_version=info.major_version,
                file_minor_version=info.minor_version,
                file_size_bytes=info.size_bytes,
            )
        ],
        physical_rows=info.num_rows,
    )


def write_dataset(
    data: Any,
    uri: str,
    schema: pa.Schema | None = None,
    mode: Mode = "create",
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP,
    data_storage_version: str | None = None,
    enable_stable_row_ids: bool = False,
    storage_options: dict[str, Any] | None = None,
    commit_message: str | None = None,
    idempotency_key: str | None = None,
    config: dict[str, str] | None = None,
    allow_external_blob_outside_bases: bool = False,
    external_blob_mode: str = "reference",
) -> DatasetCore:
    """Create, append to or overwrite a Lance dataset from Arrow data (pylance's signature);
    the version committed (`format.dataset.dataset.write_dataset` wraps it in the facade).
    Blob values given as a URI are stored as references to it (allowed only outside
    registered bases, there being none: `allow_external_blob_outside_bases`) or read in
    (`external_blob_mode="ingest"`)."""
    if mode not in ("create", "append", "overwrite"):
        raise InvalidInputError(f"mode must be create, append or overwrite, not {mode!r}")
    external = ExternalBlobs(
        allow_external_blob_outside_bases, external_blob_mode, storage_options=storage_options
    )
    uri = str(uri)
    store = open_store(uri, storage_options)
    reader = to_reader(data, schema)
    entries = _versions.list_manifests(store)
    latest = _versions.load_manifest(store, entries[max(entries)]) if entries else None
    if mode == "create" and latest is not None:
        raise DatasetAlreadyExistsError(f"a dataset already exists at {uri} (use mode='append')")
    if latest is not None:
        check_writable(latest, uri)  # before any file is written
    properties = {}
    if commit_message:
        properties["__lance_commit_message"] = commit_message
    if idempotency_key:
        properties[IDEMPOTENCY_KEY] = idempotency_key
    if mode == "append" and latest is not None:
        version = latest.data_storage_version
        order = check_append_schema(reader.schema, latest.schema, uri, legacy=version == "0.1")
        frags = write_fragment_files(
            store,
            reader,
            latest.schema.project(order),
            version,
            max_rows_per_file=max_rows_per_file,
            max_rows_per_group=max_rows_per_group,
            columns=order,
            external=external,
        )
        txn = new_transaction(
            latest.version,
            "append",
            transaction_pb2.Transaction.Append(fragments=frags),
            properties=properties,
        )
        ctx = ManifestContext(storage_version=version)
    else:
        if data_storage_version is None and latest is not None:
            version = latest.data_storage_version  # pylance keeps it unless told otherwise
        else:
            version = normalize_storage_version(data_storage_version)
        check_new_schema(reader.schema, uri)
        lance_schema = LanceSchema.from_arrow(stored_schema(reader.schema, version, uri))
        dictionaries: dict[int, pa.Array] = {}
        frags = write_fragment_files(
            store,
            reader,
            lance_schema,
            version,
            max_rows_per_file=max_rows_per_file,
            max_rows_per_group=max_rows_per_group,
            dictionaries=dictionaries,
            external=external,
        )
        body = transaction_pb2.Transaction.Overwrite(
            fragments=frags, schema=lance_schema.to_protos()
        )
        for k, v in lance_schema.metadata.items():
            body.schema_metadata[k] = v
        txn = new_transaction(
            latest.version if latest is not None else 0, "overwrite", body, properties=properties
        )
        ctx = ManifestContext(
            storage_version=version,
            stable_row_ids=enable_stable_row_ids,
            config=dict(config or {}),
        )
        if dictionaries:
            from quiver.format.file.legacy_writer import encode_dictionaries

            ctx.legacy_dictionaries = encode_dictionaries(dictionaries)
    result = commit_transaction(store, txn, ctx=ctx)
    return DatasetCore(store, result.manifest, storage_options)
