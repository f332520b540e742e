"""`StructuralFileWriter`: streams Arrow record batches into a Lance 2.1 or 2.2 data file.

Only leaf fields get columns (struct, list and map layers live in the leaves' repetition
and definition levels). Each incoming column is cut into row slices of about one page,
shredded (`shred.py`) into per-leaf levels and visible values, and buffered per leaf; a
leaf writes a page (`page_encoders.py`) as soon as about `page_bytes` are buffered, so
memory stays at about one page per column. The container (64-byte aligned buffers,
`FileDescriptor`, column metadata, offset tables, footer ``2.1`` / ``2.2``) is the one all
v2 files share.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.file.base import DataFileWriter, WrittenFile
from quiver.format.file.blob_values import BlobSpill, ExternalBlobs, SidecarOpener, thresholds
from quiver.format.file.container import (
    COLUMN_ENCODING_URL,
    FOOTER_VERSIONS,
    PAGE_LAYOUT_URL,
    any_bytes,
)
from quiver.format.file.v20.encode import DEFAULT_PAGE_BYTES, MAX_PAGE_BYTES
from quiver.format.file.v20.writer import (
    _Output,
    check_batch_schema,
    check_writer_args,
    write_tail,
)
from quiver.format.file.v21 import planar
from quiver.format.file.v21 import shred as sh
from quiver.format.file.v21.blob import (
    encode_blob_legacy,
    encode_blob_v2,
    file_blob_field,
    file_blob_field_children,
)
from quiver.format.file.v21.layers import max_def
from quiver.format.file.v21.page_encoders import EncodedPage, PageInput, TooDense, encode_page
from quiver.format.proto import encodings_v2_0_pb2, file2_pb2, file_pb2
from quiver.format.table.schema import LanceSchema

SUPPORTED_VERSIONS = ("2.1", "2.2", "2.3")
_PIN_SLACK = 64 * 1024
_COLUMN_ENCODING = any_bytes(
    COLUMN_ENCODING_URL, encodings_v2_0_pb2.ColumnEncoding(values={}).SerializeToString()
)


@dataclass
class _Leaf:
    """One leaf column: its path, buffered shredded pieces and its metadata so far."""

    path: sh.LeafPath
    column: int
    meta: file2_pb2.ColumnMetadata
    pieces: list[sh.Shredded] = field(default_factory=list)
    buffered: int = 0
    rows_written: int = 0
    peak: int = 0
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        self.seen = np.zeros(2 * len(self.path.kinds) + 1, dtype=bool)


def _piece_bytes(p: sh.Shredded) -> int:
    return p.values.nbytes + 4 * p.num_entries


def _compact(p: sh.Shredded) -> sh.Shredded:
    """`p`, with its values copied if they are a small slice of much larger buffers."""
    v = p.values
    if v.get_total_buffer_size() > 2 * v.nbytes + _PIN_SLACK:
        return sh.Shredded(p.rep, p.defs, pa.concat_arrays([v]), p.num_rows)
    return p


def _dict_index_bits(t: pa.DataType) -> int:
    """The key width of a dictionary-typed leaf (0 for any other type)."""
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    return t.index_type.bit_width if pa.types.is_dictionary(t) else 0


# Bytes of queued pages that make the writer encode and write them before the batch ends.
PENDING_BYTES = 64 << 20
# Queued bytes worth the threads' hand-off (small appends encode on the calling thread).
PARALLEL_BYTES = 1 << 20
_ENCODE_THREADS = max(1, min(os.cpu_count() or 1, 4))
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _encoders() -> ThreadPoolExecutor:
    """The threads that encode pages of different columns at once (made on first use)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(_ENCODE_THREADS, thread_name_prefix="quiver-encode"))
        return _POOL[0]


class StructuralFileWriter(DataFileWriter):
    """Writes one Lance data file of version 2.1, 2.2 or 2.3 to a binary sink, streaming."""

    def __init__(
        self,
        sink: BinaryIO,
        schema: LanceSchema,
        *,
        version: str = "2.2",
        path_for_errors: str,
        page_bytes: int = DEFAULT_PAGE_BYTES,
        max_page_bytes: int = MAX_PAGE_BYTES,
        dictionaries: bool = True,
        sidecars: SidecarOpener | None = None,
        external: ExternalBlobs | None = None,
    ) -> None:
        """`sidecars` opens the data file's blob sidecars (blob v2 values too large to keep
        inline); without it such values are refused. `external` says how blob values given
        as a URI are written (refused by default, as pylance refuses them)."""
        self.path = path_for_errors
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedFeatureError(
                f"{self.path}: StructuralFileWriter writes file versions "
                f"{', '.join(SUPPORTED_VERSIONS)}, not {version!r}"
            )
        check_writer_args(self.path, schema, page_bytes, max_page_bytes)
        self.version = version
        self.schema = schema
        self.arrow_schema = schema.to_arrow()
        self.page_bytes = page_bytes
        self.max_page_bytes = max_page_bytes
        self.auto_dictionaries = dictionaries
        self._out = _Output(sink)
        self._leaves: list[list[_Leaf]] = []
        column = 0
        for f in schema.fields:
            if version == "2.1" and any(x.logical_type == "map" for x in f.walk()):
                raise UnsupportedFeatureError(
                    f"{self.path}: field {f.name!r} holds a map, which Lance file version 2.1 "
                    "cannot store; use file version 2.2"
                )
            if f.is_blob_v2 and version == "2.1":
                raise UnsupportedFeatureError(
                    f"{self.path}: blob v2 field {f.name!r} needs file version 2.2 or later"
                )
            if f.is_blob and version == "2.3":
                raise UnsupportedFeatureError(
                    f"{self.path}: blob field {f.name!r}: blob columns are not written in "
                    "Lance 2.3 files"
                )
            leaves = []
            for path in sh.leaf_paths(f, self.path):
                leaves.append(_Leaf(path, column, file2_pb2.ColumnMetadata()))
                column += 1
            self._leaves.append(leaves)
        self.num_rows = 0
        self._pending: list[tuple[_Leaf, sh.Shredded]] = []
        self._pending_bytes = 0
        self._finished = False
        self._global_buffers: list[tuple[int, int]] = []
        self._failed = False
        self._spill = BlobSpill(
            lambda data: self._out.buffer(data)[0],
            lambda: self._out.pos,
            sidecars,
            self.path,
            external,
        )

    # -- public API ---------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; `batch` has exactly the columns and types of the writer's schema."""
        if self._finished:
            raise InvalidInputError(f"{self.path}: write() after finish()")
        if self._failed:
            raise InvalidInputError(f"{self.path}: the writer failed earlier; start a new file")
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        check_batch_schema(self.path, batch, self.arrow_schema)
        n = batch.num_rows
        if n == 0:
            return
        try:
            for f, leaves, col in zip(self.schema.fields, self._leaves, batch.columns, strict=True):
                if f.is_blob:  # the bytes go out of line now; the column holds where
                    col = self._blob_descriptions(f, col)
                self._append(f, leaves, col)
            self._drain()
        except BaseException:
            self._failed = True
            raise
        self.num_rows += n

    def _append(self, f, leaves: list[_Leaf], col: pa.Array) -> None:  # noqa: ANN001
        n = len(col)
        size = max(1, col.nbytes)
        step = max(1, n * self.page_bytes // size) if size > self.page_bytes else n
        for start in range(0, n, step):
            piece = col.slice(start, min(step, n - start)) if step < n else col
            for leaf, (path, shredded) in zip(leaves, sh.shred(f, piece, self.path), strict=True):
                assert leaf.path.name == path.name
                shredded = _compact(shredded)
                size = _piece_bytes(shredded)
                if leaf.pieces and leaf.buffered + size > self.max_page_bytes:
                    self._flush(leaf)
                leaf.pieces.append(shredded)
                leaf.buffered += size
                leaf.peak = max(leaf.peak, leaf.buffered)
                if leaf.buffered >= self.page_bytes:
                    self._flush(leaf)

    def _blob_descriptions(self, f, col: pa.Array) -> pa.Array:  # noqa: ANN001
        where = f"{self.path}: blob field {f.name!r}"
        if f.is_blob_v2:
            return self._spill.v2(col, thresholds(f.metadata, where))
        return self._spill.legacy(col, null_description=True)

    @property
    def sidecars(self) -> list[str]:
        """File names of the blob sidecars written so far (next to the data file)."""
        return list(self._spill.sidecars)

    # -- pages ----------------------------------------------------------------------------
    def _flush(self, leaf: _Leaf) -> None:
        """Queue the leaf's buffered values as a page to encode; pages are encoded and
        written when a batch has been taken in (`_drain`), or sooner when the queue grows."""
        if not leaf.pieces:
            return
        data = sh.concat(leaf.pieces)
        leaf.pieces, leaf.buffered = [], 0
        self._pending.append((leaf, data))
        self._pending_bytes += _piece_bytes(data)
        if self._pending_bytes >= PENDING_BYTES:
            self._drain()

    def _drain(self) -> None:
        """Encode the queued pages and write them in queue order (so the file is the same
        whichever way they were encoded). Different columns' pages are encoded on several
        threads (numpy and Arrow release the GIL); one column's pages stay in order on one
        thread, as each page's layers depend on the pages before it."""
        pending, queued = self._pending, self._pending_bytes
        self._pending, self._pending_bytes = [], 0
        if not pending:
            return
        by_leaf: dict[int, list[int]] = {}
        for i, (leaf, _) in enumerate(pending):
            by_leaf.setdefault(leaf.column, []).append(i)
        pages: list[list[tuple[int, EncodedPage]]] = [[] for _ in pending]

        def encode(indices: list[int]) -> None:
            for i in indices:
                pages[i] = self._encode_pages(*pending[i])

        groups = list(by_leaf.values())
        if len(groups) > 1 and _ENCODE_THREADS > 1 and queued >= PARALLEL_BYTES:
            for done in [_encoders().submit(encode, g) for g in groups]:
                done.result()
        else:
            for g in groups:
                encode(g)
        for (leaf, _), encoded in zip(pending, pages, strict=True):
            for rows, page in encoded:
                self._emit(leaf, rows, page)

    def _encode_pages(self, leaf: _Leaf, data: sh.Shredded) -> list[tuple[int, EncodedPage]]:
        """`data` encoded as one page, or split by rows when a chunk cannot hold it; the
        pages with their row counts."""
        where = f"{self.path}: column {leaf.path.name!r}"
        try:
            return [(data.num_rows, self._encode(leaf, data, where))]
        except TooDense:
            if data.num_rows <= 1:
                try:  # full-zip pages have no chunk limits
                    return [(data.num_rows, self._encode(leaf, data, where, full_zip=True))]
                except TooDense:
                    raise UnsupportedFeatureError(
                        f"{where}: one row holds more nested levels than a page of this type "
                        "can describe"
                    ) from None
            half = data.num_rows // 2
            return [
                *self._encode_pages(leaf, sh.slice_rows(data, leaf.path, 0, half)),
                *self._encode_pages(leaf, sh.slice_rows(data, leaf.path, half, data.num_rows)),
            ]

    def _encode(self, leaf: _Leaf, data: sh.Shredded, where: str, **kw: bool) -> EncodedPage:
        inp = self._page_input(leaf, data)
        if leaf.path.field.is_blob:
            blob_v2 = leaf.path.field.is_blob_v2
            return encode_blob_v2(inp) if blob_v2 else encode_blob_legacy(inp)
        page = encode_page(inp, where, **kw)
        return planar.planar_page(page, inp) if self.version == "2.3" else page

    def _page_input(self, leaf: _Leaf, data: sh.Shredded) -> PageInput:
        path = leaf.path
        # Layer kinds only ever widen from page to page: pylance 14 miscounts nulls when a
        # later page of a column declares a layer all-valid that an earlier page declared
        # nullable (its own files fail the same way).
        leaf.seen |= sh.seen_codes(path, data.defs)
        # pylance 14 also miscounts a struct's nulls when the struct sits above a list and
        # its layer changes kind between pages (even all-valid -> nullable, in its own
        # files too): such struct layers are always declared nullable.
        for d in path.structs_above_lists():
            leaf.seen[2 * d + 1] = True
        if len(path.kinds) > 1 and not np.any(data.defs == 0):
            # An all-null page must declare its struct ancestors nullable, or pylance 14
            # miscounts the struct's nulls (its own files fail the same way).
            for d, kind in enumerate(path.kinds[:-1]):
                if kind == "item":
                    leaf.seen[2 * d + 1] = True
        layers = sh.layer_kinds(path, leaf.seen)
        defs = None
        if max_def(layers):
            defs = sh.def_table(path, layers)[data.defs]
        visible = sh.visible(path, data.defs) if path.has_list else None
        return PageInput(
            layers=layers,
            rep=data.rep,
            defs=defs,
            visible=visible,
            values=data.values,
            num_rows=data.num_rows,
            version=self.version,
            dictionary=self.auto_dictionaries,
            dict_index_bits=_dict_index_bits(path.field.arrow_type),
        )

    def _emit(self, leaf: _Leaf, rows: int, page: EncodedPage) -> None:
        pm = leaf.meta.pages.add()
        for buf in page.buffers:
            data = (
                buf
                if isinstance(buf, bytes | memoryview)
                else memoryview(np.ascontiguousarray(buf)).cast("B")
            )
            pos, size = self._out.buffer(data)
            pm.buffer_offsets.append(pos)
            pm.buffer_sizes.append(size)
        pm.length = rows
        url = planar.PLANAR_LAYOUT_URL if self.version == "2.3" else PAGE_LAYOUT_URL
        pm.encoding.direct.encoding = any_bytes(url, page.layout.SerializeToString())
        pm.priority = leaf.rows_written
        leaf.rows_written += rows

    # -- finish ---------------------------------------------------------------------------
    def finish(self) -> WrittenFile:
        """Flush the remaining pages, write metadata and footer; the sink is then complete."""
        if self._finished:
            raise InvalidInputError(f"{self.path}: finish() called twice")
        if self._failed:
            raise InvalidInputError(f"{self.path}: the writer failed earlier; start a new file")
        self._finished = True
        self._spill.close()
        leaves = [leaf for group in self._leaves for leaf in group]
        for leaf in leaves:
            self._flush(leaf)
        self._drain()
        out = self._out
        desc = file_pb2.FileDescriptor(length=self.num_rows)
        blob_v2 = {f.id for f in self.schema.fields if f.is_blob_v2}
        for pb in self.schema.to_protos():
            if pb.logical_type.startswith("dict:"):
                pb.dictionary.SetInParent()
            if pb.parent_id in blob_v2:
                continue  # a blob v2 field's data file lists its descriptions' fields
            desc.schema.fields.append(pb)
            if pb.id in blob_v2:
                desc.schema.fields[-1].CopyFrom(file_blob_field(pb))
                desc.schema.fields.extend(file_blob_field_children())
        for k, v in self.schema.metadata.items():
            desc.schema.metadata[k] = v if isinstance(v, bytes) else str(v).encode()
        for leaf in leaves:
            leaf.meta.encoding.direct.encoding = _COLUMN_ENCODING
        metas = [leaf.meta.SerializeToString() for leaf in leaves]
        write_tail(out, self.version, desc.SerializeToString(), metas, self._global_buffers)
        major, minor = FOOTER_VERSIONS[self.version]
        return WrittenFile(
            num_rows=self.num_rows,
            size_bytes=out.pos,
            fields=[leaf.path.field.id for leaf in leaves],
            column_indices=[leaf.column for leaf in leaves],
            major_version=major,
            minor_version=minor,
        )

    # -- introspection --------------------------------------------------------------------
    @property
    def peak_buffered_bytes(self) -> dict[int, int]:
        """Per column: the most bytes ever buffered before a page was written."""
        return {leaf.column: leaf.peak for group in self._leaves for leaf in group}

    @property
    def pages_written(self) -> dict[int, int]:
        """Per column: pages written so far."""
        return {leaf.column: len(leaf.meta.pages) for group in self._leaves for leaf in group}
