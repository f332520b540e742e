"""Blob columns read as files: `take_blobs` (file-like handles doing ranged reads) and
`read_blobs` (whole payloads, coalesced per file), over every blob layout pylance 14 writes.

A scan returns a blob column as descriptions of where each value's bytes are; this module
turns them into bytes. Legacy blobs (2.0 / 2.1 files, a binary field marked
`lance-encoding:blob`) are (position, size) ranges of the data file itself. Blob v2 (2.2
files, the `lance.blob.v2` type) adds a kind: inline (a range of the data file), packed (a
range of a sidecar file shared by several values), dedicated (a whole sidecar file) or
external (a range of any URI). Sidecars sit in a directory named for the data file,
`data/<stem>/<blob_id>.blob`, the id written as 32 bits in reverse, as data files are named.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.dataset import take as _take
from quiver.format.dataset.blob_writes import to_blob_v2
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import LanceFragment, fragments_of
from quiver.format.dataset.scan import ROW_ADDRESS_FIELD, Scanner
from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.file.blob_values import (
    DEDICATED,
    EXTERNAL,
    INLINE,
    PACKED,
    ExternalBlobs,
    sidecar_name,
)
from quiver.format.io.store import FileReader, ObjectStore, open_store
from quiver.format.table.manifest import storage_version_of_file
from quiver.format.table.schema import LanceField

DEFAULT_BUFFER_SIZE = 512 * 1024  # sequential read-ahead of a BlobFile, as pylance's


@dataclass(frozen=True)
class BlobLocation:
    """Where one blob's bytes are: `size` bytes at `position` of `path` in `store`."""

    store: ObjectStore
    path: str
    position: int
    size: int

    @property
    def uri(self) -> str:
        return self.store.uri_of(self.path)


def locate_blobs(
    core: DatasetCore,
    frags: Sequence[LanceFragment],
    column: str,
    ids: _take.Indices | None = None,
    addresses: _take.Indices | None = None,
    indices: _take.Indices | None = None,
) -> list[tuple[int, BlobLocation | None]]:
    """(row address, where its blob is) of `column` for the rows selected by exactly one of
    row `ids`, row `addresses` or `indices` (positions among the live rows), in the order
    given; None for a null value. A deleted or missing row is an error, as in pylance."""
    if sum(v is not None for v in (ids, addresses, indices)) != 1:
        raise InvalidInputError("give exactly one of ids, addresses or indices")
    field = core.manifest.schema.field(column, dataset=core.uri)
    if not field.is_blob:
        raise InvalidInputError(f"{core.uri}: column {column!r} is not a blob column")
    projection = [column]
    if indices is not None:
        rows = _take.take(core, frags, indices, projection, with_row_address=True)
    elif addresses is not None:
        rows = _take.take_addresses(core, frags, addresses, projection)
    else:
        rows = _take.take_rows(core, frags, ids, projection, with_row_address=True)
    asked = len(
        _take.check_indices(next(v for v in (ids, addresses, indices) if v is not None), "rows")
    )
    if rows.num_rows != asked:
        what = "row ids" if ids is not None else "row addresses"
        raise InvalidInputError(
            f"{core.uri} version {core.version}: {asked - rows.num_rows} of the {what} asked "
            "for are deleted or not in this version"
        )
    desc = rows.column(column).combine_chunks()
    addrs = rows.column(ROW_ADDRESS_FIELD.name).to_numpy()
    return _locations(core, {f.fragment_id: f for f in frags}, field.id, desc, addrs)


def _locations(
    core: DatasetCore,
    by_id: dict[int, LanceFragment],
    field_id: int,
    desc: pa.StructArray,
    addrs: np.ndarray,
) -> list[tuple[int, BlobLocation | None]]:
    """(row address, location) of each blob description of the field `field_id`."""
    files: dict[int, tuple[ObjectStore, str, bool]] = {}
    out: list[tuple[int, BlobLocation | None]] = []
    valid = desc.is_valid().to_numpy(zero_copy_only=False)
    fields = {name: desc.field(name).to_numpy(zero_copy_only=False) for name in _names(desc)}
    for i, addr in enumerate(addrs.tolist()):
        position, size = int(fields["position"][i]), int(fields["size"][i])
        fid = addr >> 32
        if valid[i] and fid not in files:
            files[fid] = _data_file(core, by_id[fid], field_id)
        # the 2.0 writer describes a null as (1, 0)
        if not valid[i] or (files[fid][2] and size == 0 and position == 1):
            out.append((addr, None))
            continue
        store, path, _ = files[fid]
        kind = int(fields["kind"][i]) if "kind" in fields else INLINE
        if kind in (PACKED, DEDICATED):
            stem = path.rsplit(".", 1)[0]
            path = f"{stem}/{sidecar_name(int(fields['blob_id'][i]))}"
        elif kind == EXTERNAL:
            base = int(fields["blob_id"][i])
            store, path = _external(core, str(fields["blob_uri"][i]), base or None)
            if position == 0 and size == 0:  # the whole object
                size = store.size(path)
        elif kind != INLINE:
            raise CorruptFileError(core.store.uri_of(path), f"blob of unknown kind {kind}")
        out.append((addr, BlobLocation(store, path, position, size)))
    return out


def with_blob_values(
    core: DatasetCore, rows: pa.Table | pa.RecordBatch, addresses: np.ndarray
) -> pa.Table | pa.RecordBatch:
    """`rows` (columns of `core`'s version, blob columns as their descriptions) with every
    blob column holding its values again, as the dataset's schema types them (binary, or
    the `lance.blob.v2` struct), to be written anew: what compaction, updates and merges
    rewrite. `addresses` are the rows' addresses. External references stay references, as
    pylance keeps them (the writer is told so: `REWRITE_EXTERNAL`, `carried_references`);
    one through a registered base path, or a range the column's type cannot hold, is
    refused rather than copied in."""
    schema = core.manifest.schema
    by_id: dict[int, LanceFragment] | None = None
    for name in rows.schema.names:
        field = _top_level_blob(core, name)
        if field is None:
            continue
        if by_id is None:
            by_id = {f.fragment_id: f for f in fragments_of(core)}
        desc = rows.column(name)
        if isinstance(desc, pa.ChunkedArray):
            desc = desc.combine_chunks()
        target = schema.field(name, dataset=core.uri).to_arrow()
        external = np.zeros(len(desc), bool)
        if "kind" in _names(desc):
            external = np.nan_to_num(desc.field("kind").to_numpy(zero_copy_only=False)) == 3
            external &= desc.is_valid().to_numpy(zero_copy_only=False)
        kept = desc.filter(pa.array(~external)) if external.any() else desc
        located = _locations(core, by_id, field.id, kept, addresses[~external])
        read = iter(data for _, data in read_located(located))
        values = pa.array([None if e else next(read) for e in external.tolist()], pa.large_binary())
        if field.is_blob_v2:
            values = to_blob_v2(values, target, core.uri)
            if external.any():
                values = _with_references(core, name, values, desc, external)
        at = rows.schema.get_field_index(name)
        rows = rows.set_column(at, target, values)
    return rows


# how rewrites write the external references they carry (they were in the dataset already)
REWRITE_EXTERNAL = ExternalBlobs(allow_outside_bases=True)


def carried_references(core: DatasetCore, rows: pa.Table) -> ExternalBlobs:
    """How to write rows some of which come from `rows` (a version's rows with their blob
    values, `with_blob_values`): the external references they hold
    are kept; others are refused, as new data's are."""
    uris: set[str] = set()
    for name in rows.schema.names:
        field = _top_level_blob(core, name)
        if field is None or not field.is_blob_v2:
            continue
        column = rows.column(name)
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        for chunk in chunks:
            storage = chunk.storage if isinstance(chunk, pa.ExtensionArray) else chunk
            uris |= {u for u in storage.field("uri").to_pylist() if u is not None}
    return ExternalBlobs(carried=frozenset(uris))


def _with_references(
    core: DatasetCore, name: str, values: pa.Array, desc: pa.StructArray, external: np.ndarray
) -> pa.Array:
    """The blob v2 `values` with the rows marked `external` given their URI (and range)."""
    storage = values.storage if isinstance(values, pa.ExtensionArray) else values
    names = [storage.type.field(i).name for i in range(storage.type.num_fields)]
    rows = np.flatnonzero(external)
    if (desc.field("blob_id").to_numpy(zero_copy_only=False)[rows] != 0).any():
        raise UnsupportedFeatureError(
            f"{core.uri}: column {name!r} holds external blobs through a registered base path, "
            "which rows rewritten here cannot keep yet"
        )
    pos = desc.field("position").to_numpy(zero_copy_only=False)
    size = desc.field("size").to_numpy(zero_copy_only=False)
    ranged = (pos[rows] != 0) | (size[rows] != 0)
    if ranged.any() and "position" not in names:
        raise UnsupportedFeatureError(
            f"{core.uri}: column {name!r} holds ranges of external blobs, which its type "
            "(data, uri) cannot carry through a rewrite"
        )
    uri = pa.array(
        [desc.field("blob_uri")[i].as_py() if e else None for i, e in enumerate(external)],
        pa.utf8(),
    )
    children = {n: storage.field(n) for n in names}
    children["uri"] = uri
    if "position" in names:
        keep = external & ((pos != 0) | (size != 0))
        children["position"] = pa.array(np.where(keep, pos, 0), pa.uint64(), mask=~keep)
        children["size"] = pa.array(np.where(keep, size, 0), pa.uint64(), mask=~keep)
    mask = storage.is_null() if storage.null_count else None
    if mask is not None:
        mask = pc.and_(mask, pa.array(~external))
    struct = pa.StructArray.from_arrays(
        [children[n] for n in names], fields=list(storage.type), mask=mask
    )
    if isinstance(values, pa.ExtensionArray):
        return pa.ExtensionArray.from_storage(values.type, struct)
    return struct


def blob_value_steps(
    core: DatasetCore,
    rows: pa.RecordBatch,
    addresses: np.ndarray,
) -> Iterator[pa.RecordBatch]:
    """`with_blob_values` of `rows` in pieces holding at most `BLOB_BATCH_BYTES` of blobs
    (one row at least), so a rewrite's memory stays bounded whatever the blobs' sizes."""
    sizes = _blob_sizes(core, rows)
    start = 0
    for stop in _cuts(sizes, BLOB_BATCH_BYTES):
        piece = rows.slice(start, stop - start)
        yield with_blob_values(core, piece, addresses[start:stop])
        start = stop


def _blob_sizes(core: DatasetCore, rows: pa.RecordBatch) -> np.ndarray:
    """Bytes of blobs per row of `rows` (blob columns as descriptions)."""
    sizes = np.zeros(rows.num_rows, np.int64)
    for name in rows.schema.names:
        if _top_level_blob(core, name) is not None:
            size = rows.column(name).field("size").to_numpy(zero_copy_only=False)
            sizes += np.nan_to_num(size).astype(np.int64)
    return sizes


def _names(desc: pa.StructArray) -> list[str]:
    return [desc.type.field(i).name for i in range(desc.type.num_fields)]


def _data_file(
    core: DatasetCore, frag: LanceFragment, field_id: int
) -> tuple[ObjectStore, str, bool]:
    """The store and path of the data file holding `field_id` in `frag`, and whether it is a
    2.0 file."""
    for df in frag.metadata.files:
        if field_id in df.fields:
            base = df.base_id if df.HasField("base_id") else None
            store, path = core.resolve(f"data/{df.path}", base)
            v20 = storage_version_of_file(df.file_major_version, df.file_minor_version) == "2.0"
            return store, path, v20
    raise CorruptFileError(
        core.store.uri_of(core.manifest.path),
        f"fragment {frag.fragment_id} has no data file holding field {field_id}",
    )


def _external(core: DatasetCore, uri: str, base_id: int | None) -> tuple[ObjectStore, str]:
    """An external blob as a store and a path: a path relative to a registered base path
    (`base_id`), or an absolute URI (its directory and file name)."""
    if base_id is not None:
        return core.resolve(uri, base_id, relative_to_root=True)
    parent, _, name = uri.rstrip("/").rpartition("/")
    if not parent or not name:
        raise CorruptFileError(core.uri, f"external blob URI {uri!r} names no file")
    return open_store(parent, core.storage_options), name


def read_located(
    located: Sequence[tuple[int, BlobLocation | None]],
) -> list[tuple[int, bytes | None]]:
    """(row address, bytes) of each located blob, the ranges of one file read together
    (coalesced)."""
    locations = [loc for _, loc in located]
    out: list[bytes | None] = [None] * len(locations)
    by_file: dict[tuple[str, str], list[int]] = {}
    for i, loc in enumerate(locations):
        if loc is not None:
            by_file.setdefault((loc.store.uri, loc.path), []).append(i)
    for members in by_file.values():
        first = locations[members[0]]
        assert first is not None
        with first.store.open(first.path) as reader:
            ranges = [(locations[i].position, locations[i].size) for i in members]  # type: ignore[union-attr]
            _check_ranges(reader, ranges)
            for i, data in zip(members, reader.read_ranges(ranges), strict=True):
                out[i] = bytes(data)
    return [(addr, data) for (addr, _), data in zip(located, out, strict=True)]


def _check_ranges(reader: FileReader, ranges: Sequence[tuple[int, int]]) -> None:
    ends = np.array([p + s for p, s in ranges], dtype=np.uint64)
    if len(ends) and int(ends.max()) > reader.size:
        raise CorruptFileError(
            reader.store.uri_of(reader.path),
            f"a blob ends at byte {int(ends.max())} of a file of {reader.size} bytes",
        )


class BlobFile(io.BufferedIOBase):
    """One blob as a read-only, seekable binary file: reads are ranged reads of the file
    holding it (a local pread or an object-store range request), sequential ones through a
    read-ahead buffer of `buffer_size` bytes."""

    def __init__(self, location: BlobLocation, buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        super().__init__()
        if buffer_size < 0:
            raise InvalidInputError(f"buffer_size must be >= 0, not {buffer_size}")
        self.location = location
        self._buffer_size = buffer_size
        self._pos = 0
        self._buf = b""
        self._buf_at = 0
        self._reader: FileReader | None = None

    def size(self) -> int:
        """The blob's length in bytes."""
        return self.location.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size()}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence: {whence}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        end = self.size() if size is None or size < 0 else min(self.size(), self._pos + size)
        if end <= self._pos:
            return b""
        if not (self._buf_at <= self._pos and end <= self._buf_at + len(self._buf)):
            fetch = max(end - self._pos, self._buffer_size)
            fetch = min(fetch, self.size() - self._pos)
            self._buf, self._buf_at = self._fetch(self._pos, fetch), self._pos
        data = self._buf[self._pos - self._buf_at : end - self._buf_at]
        self._pos = end
        return data

    read1 = read

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        memoryview(b).cast("B")[: len(data)] = data
        return len(data)

    readinto1 = readinto

    def read_range(self, offset: int, length: int) -> bytes:
        """`length` bytes at `offset` of the blob, without moving the cursor."""
        return self.read_ranges([(offset, length)])[0]

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several (offset, length) ranges of the blob in one coalesced read, without
        moving the cursor."""
        self._check_open()
        for offset, length in ranges:
            if offset < 0 or length < 0 or offset + length > self.size():
                raise InvalidInputError(
                    f"range {offset}+{length} is outside the blob of {self.size()} bytes"
                )
        base = self.location.position
        return [bytes(d) for d in self._open().read_ranges([(base + o, n) for o, n in ranges])]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._buf = b""
        super().close()

    def __repr__(self) -> str:
        return f"<BlobFile size={self.size()}>"

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed blob file")

    def _open(self) -> FileReader:
        if self._reader is None:
            self._reader = self.location.store.open(self.location.path)
            end = self.location.position + self.location.size
            if end > self._reader.size:
                raise CorruptFileError(
                    self.location.uri,
                    f"the blob ends at byte {end} of a file of {self._reader.size} bytes",
                )
        return self._reader

    def _fetch(self, offset: int, length: int) -> bytes:
        return bytes(self._open().read(self.location.position + offset, length))


BLOB_HANDLING = ("blobs_descriptions", "all_descriptions", "all_binary")
BLOB_BATCH_BYTES = 64 << 20  # the blob bytes one batch of an all_binary scan holds at most


def as_bytes(uri: str, handling: str | None) -> bool:
    """Whether a scan's `blob_handling` asks for blob bytes rather than descriptions."""
    if handling is not None and handling not in BLOB_HANDLING:
        raise InvalidInputError(
            f"{uri}: blob_handling {handling!r} is not one of {', '.join(BLOB_HANDLING)}"
        )
    return handling == "all_binary"


class BlobBytesScan:
    """pylance's `blob_handling="all_binary"`: a scan whose blob columns hold their bytes
    (large_binary) instead of their descriptions, each batch's blobs read together."""

    def __init__(self, scan: object, core: DatasetCore, *, keep_address: bool) -> None:
        if not isinstance(scan, Scanner):
            raise InvalidInputError(
                f"{core.uri}: blob_handling='all_binary' applies to plain scans (not to "
                "nearest, full-text, ordered or deleted-row scans)"
            )
        self._scan = scan
        self._core = core
        self._keep_address = keep_address
        self._by_id = {f.fragment_id: f for f in scan._fragments}
        out = scan.projected_schema
        self._blob_ids: dict[str, int] = {}
        fields = []
        for f in out:
            lance_field = _top_level_blob(core, f.name)
            if lance_field is not None:
                self._blob_ids[f.name] = lance_field.id
                meta = None if lance_field.is_blob_v2 else f.metadata
                f = pa.field(f.name, pa.large_binary(), f.nullable, meta)
            if f.name != ROW_ADDRESS_FIELD.name or keep_address:
                fields.append(f)
        self.projected_schema = pa.schema(fields, metadata=out.metadata)

    def __getattr__(self, name: str) -> object:  # the scan's planning: pruning, estimates
        return getattr(self._scan, name)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The scan's batches with their blobs read; a batch whose blobs would hold more
        than `BLOB_BATCH_BYTES` is cut into several (one row at least), so memory stays
        bounded by the budget and the largest blob."""
        return self._read(self._scan.to_batches())

    def to_step_batches(self, step_bytes: int) -> Iterator[pa.RecordBatch]:
        """The scan's steps (`Scanner.to_step_batches`) with their blobs read, cut as
        `to_batches` cuts them."""
        return self._read(self._scan.to_step_batches(step_bytes))

    def _read(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            sizes = _blob_sizes(self._core, batch)
            start = 0
            for stop in _cuts(sizes, BLOB_BATCH_BYTES):
                yield self._with_bytes(batch.slice(start, stop - start))
                start = stop

    def _with_bytes(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        addrs = batch.column(ROW_ADDRESS_FIELD.name).to_numpy(zero_copy_only=False)
        columns = []
        for f in self.projected_schema:
            col = batch.column(f.name)
            if f.name in self._blob_ids:
                located = _locations(self._core, self._by_id, self._blob_ids[f.name], col, addrs)
                col = pa.array([data for _, data in read_located(located)], pa.large_binary())
            columns.append(col)
        return pa.RecordBatch.from_arrays(columns, schema=self.projected_schema)

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.projected_schema)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        return self._scan.count_rows()


def _cuts(sizes: np.ndarray, budget: int) -> list[int]:
    """Ends of consecutive row ranges each holding at most `budget` bytes (or one row)."""
    ends, total = [], 0
    for i, n in enumerate(sizes.tolist()):
        if total and total + n > budget:
            ends.append(i)
            total = 0
        total += n
    ends.append(len(sizes))
    return ends


def _top_level_blob(core: DatasetCore, name: str) -> LanceField | None:
    for f in core.manifest.schema.fields:
        if f.name == name:
            return f if f.is_blob else None
    return None


class BlobMethods:
    """pylance's blob methods of `LanceDataset` (a mixin over its `_core` and fragments)."""

    _core: DatasetCore
    get_fragments: Callable[[], list[LanceFragment]]

    def take_blobs(
        self,
        blob_column: str,
        ids: _take.Indices | None = None,
        addresses: _take.Indices | None = None,
        indices: _take.Indices | None = None,
        *,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
    ) -> list[BlobFile | None]:
        """The blobs of the selected rows (exactly one of row `ids`, row `addresses` or
        `indices`) as file-like objects reading them on demand; None for a null value."""
        where = locate_blobs(self._core, self.get_fragments(), blob_column, ids, addresses, indices)
        return [loc and BlobFile(loc, buffer_size) for _, loc in where]

    def read_blobs(
        self,
        blob_column: str,
        ids: _take.Indices | None = None,
        addresses: _take.Indices | None = None,
        indices: _take.Indices | None = None,
        **options: Any,
    ) -> list[tuple[int, bytes | None]]:
        """(row address, bytes or None) of the selected rows' blobs, read together
        (pylance's `io_buffer_size` and `preserve_order` change nothing here: the answer is
        in the order asked)."""
        _check_options(options)
        where = locate_blobs(self._core, self.get_fragments(), blob_column, ids, addresses, indices)
        return read_located(where)

    def read_blob_ranges(
        self,
        blob_column: str,
        requests: Sequence[tuple[int, int, int]],
        *,
        selector: str,
        **options: Any,
    ) -> list[tuple[int, int, bytes | None]]:
        """(request index, row address, bytes) of each `(row, offset, length)` request, the
        row an id, address or index as `selector` says; None for a null blob."""
        _check_options(options)
        if selector not in ("ids", "addresses", "indices"):
            raise InvalidInputError(
                f"selector must be one of 'ids', 'addresses', or 'indices', got {selector!r}"
            )
        rows = [int(r) for r, _, _ in requests]
        found = dict.fromkeys(rows)
        unique = list(found)
        where = locate_blobs(self._core, self.get_fragments(), blob_column, **{selector: unique})
        found.update(zip(unique, where, strict=True))
        out: list[tuple[int, int, bytes | None]] = []
        files: dict[int, BlobFile] = {}
        try:
            for i, (row, offset, length) in enumerate(requests):
                addr, loc = found[int(row)]  # type: ignore[misc]
                if loc is None:
                    out.append((i, addr, None))
                    continue
                blob = files.setdefault(addr, BlobFile(loc, buffer_size=0))
                out.append((i, addr, blob.read_range(int(offset), int(length))))
        finally:
            for blob in files.values():
                blob.close()
        return out


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - {"io_buffer_size", "preserve_order"})
    if unknown:
        raise InvalidInputError(f"unexpected blob read option {unknown[0]!r}")
