"""Blob pages. Legacy blob columns in 2.1+ files are `BlobLayout` pages: the values live
out of line and the page holds their descriptions, encoded with an inner layout as a packed
struct ``(position u64, size u64)``. Null (or empty-list) entries have no blob: their
description has ``size == 0`` and carries the levels instead, ``position = def << 16 | rep``
(``position == 0`` with size 0 is an empty, valid blob). The outer `layers` describe the
column's rep/def structure.

Blob v2 columns (2.2) are full-zip pages of `VariablePackedStruct` values, one per valid
row: ``kind u8, position u64, size u64, blob_id u32, uri (u32 length + bytes)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.v21.layers import Layer, max_def, max_rep, parse_layers
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.file.v21.page_encoders import (
    EncodedPage,
    PageInput,
    _flat,
    _full_zip,
    _mini_block,
)
from quiver.format.file.v21.values import FixedValues, VariableValues
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.proto import file_pb2

InnerDecoder = Callable[[pb.PageLayout, Sequence[bytes | memoryview], int, PageWhere], DecodedPage]


def decode_blob(
    layout: pb.BlobLayout,
    bufs: Sequence[bytes | memoryview],
    num_rows: int,
    where: PageWhere,
    decode_inner: InnerDecoder,
) -> DecodedPage:
    """Decode a blob page to its descriptions: struct<position: uint64, size: uint64> values
    with the levels recovered from the null entries."""
    layers = parse_layers(layout.layers, where.full)
    if max_rep(layers):
        raise UnsupportedFeatureError(f"{where.full}: blob columns inside lists")
    inner = decode_inner(layout.inner_layout, bufs, num_rows, where)
    desc = inner.values
    if inner.rep is not None or inner.dictionary is not None:
        raise where.corrupt("blob descriptions with their own repetition levels or dictionary")
    if not pa.types.is_struct(desc.type) or desc.type.num_fields != 2:
        raise where.corrupt(f"blob descriptions of physical type {desc.type}")
    pos = desc.field(0).to_numpy(zero_copy_only=False).astype(np.uint64)
    size = desc.field(1).to_numpy(zero_copy_only=False).astype(np.uint64)
    if len(pos) != num_rows:
        raise where.corrupt(f"{len(pos)} blob descriptions for {num_rows} rows")
    special = (size == 0) & (pos != 0)
    defs = None
    if max_def(layers):
        defs = np.where(special, (pos >> np.uint64(16)) & np.uint64(0xFFFF), 0).astype(np.uint16)
        if int(defs.max(initial=0)) > max_def(layers):
            raise where.corrupt(f"blob def level {int(defs.max())} above {max_def(layers)}")
    values = pa.StructArray.from_arrays(
        [pa.array(pos, pa.uint64()), pa.array(size, pa.uint64())], names=["position", "size"]
    )
    return DecodedPage(layers, num_rows, None, defs, values)


def encode_blob_legacy(page: PageInput) -> EncodedPage:
    """A legacy blob page: the descriptions (position, size), nulls carrying their levels,
    as a mini-block of 128-bit packed structs inside a `BlobLayout`."""
    desc = page.values
    pos = desc.field("position").to_numpy(zero_copy_only=False).astype("<u8")
    size = desc.field("size").to_numpy(zero_copy_only=False).astype("<u8")
    if page.defs is not None:
        null = page.defs > 0
        pos[null] = page.defs[null].astype("<u8") << np.uint64(16)
        size[null] = 0
    pairs = np.empty((len(pos), 2), "<u8")
    pairs[:, 0], pairs[:, 1] = pos, size
    vals = FixedValues(len(pos), 128, pairs.view(np.uint8).reshape(-1))
    inner = PageInput(
        layers=[Layer.ALL_VALID_ITEM],
        rep=None,
        defs=None,
        visible=None,
        values=desc,
        num_rows=page.num_rows,
        version=page.version,
        dictionary=False,
    )
    enc = pb.CompressiveEncoding()
    enc.packed_struct.bits_per_value.extend([64, 64])
    enc.packed_struct.values.CopyFrom(_flat(128))
    encoded = _mini_block(inner, vals, enc)
    layout = pb.BlobLayout(inner_layout=encoded.layout)
    layout.layers.extend(int(x) for x in page.layers)
    return EncodedPage(pb.PageLayout(blob_layout=layout), encoded.buffers)


_V2_ROW = np.dtype(
    [("kind", "u1"), ("position", "<u8"), ("size", "<u8"), ("blob_id", "<u4"), ("uri", "<u4")]
)


def encode_blob_v2(page: PageInput) -> EncodedPage:
    """A blob v2 page: full-zip rows of packed descriptions (nulls are a control word)."""
    desc = page.values
    n = len(desc)
    fixed = np.zeros(n, _V2_ROW)
    for name in ("kind", "position", "size", "blob_id"):
        fixed[name] = np.nan_to_num(desc.field(name).to_numpy(zero_copy_only=False))
    uris = desc.field("blob_uri").fill_null("").cast(pa.large_binary())
    uri_offsets = np.frombuffer(uris.buffers()[1], np.int64)[uris.offset : uris.offset + n + 1]
    uri_len = np.diff(uri_offsets)
    fixed["uri"] = uri_len
    valid = np.ones(n, bool) if page.defs is None else page.defs == 0
    lengths = np.where(valid, _V2_ROW.itemsize + uri_len, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    raw = fixed.view(np.uint8).reshape(n, _V2_ROW.itemsize)
    uri_bytes = np.frombuffer(uris.buffers()[2] or b"", np.uint8)
    if not uri_len.any():  # no external references: every row the same width
        data = raw[valid].reshape(-1).copy()
    else:
        data = np.empty(int(offsets[-1]), np.uint8)
        for i in np.flatnonzero(valid).tolist():
            at = int(offsets[i])
            data[at : at + _V2_ROW.itemsize] = raw[i]
            lo = int(uri_offsets[i])
            data[at + _V2_ROW.itemsize : int(offsets[i + 1])] = uri_bytes[lo : lo + uri_len[i]]
    encoded = _full_zip(page, VariableValues(n, offsets, data, 32))
    # pylance sizes the row index for every row holding a description (nulls included)
    fz = encoded.layout.full_zip_layout
    control = (fz.bits_rep + fz.bits_def + 7) // 8
    bound = n * (control + 4 + _V2_ROW.itemsize) + int(uri_len.sum())
    encoded.buffers[1] = np.asarray(encoded.buffers[1]).astype(_index_dtype(bound))
    packed = pb.VariablePackedStruct()
    for bits in (8, 64, 64, 32):
        packed.fields.add(value=_flat(bits), bits_per_value=bits)
    uri_field = packed.fields.add(bits_per_length=32)
    uri_field.value.variable.offsets.CopyFrom(_flat(32))
    encoded.layout.full_zip_layout.value_compression.CopyFrom(
        pb.CompressiveEncoding(variable_packed_struct=packed)
    )
    return encoded


def _index_dtype(top: int) -> str:
    return "<u1" if top < 1 << 8 else "<u2" if top < 1 << 16 else "<u4" if top < 1 << 32 else "<u8"


def file_blob_field(field: file_pb2.Field) -> file_pb2.Field:
    """A blob v2 field as its data file's schema lists it (pylance's form): a packed struct
    of the descriptions, not the logical `data` / `uri` struct."""
    out = file_pb2.Field(
        name=field.name,
        id=field.id,
        parent_id=field.parent_id,
        logical_type="struct",
        nullable=field.nullable,
    )
    out.metadata["lance-encoding:packed"] = b"true"  # in pylance's order
    out.metadata["lance-encoding:blob"] = b"true"
    return out


def file_blob_field_children() -> list[file_pb2.Field]:
    """The description fields following a blob v2 field in its data file's schema."""
    return [
        file_pb2.Field(name=name, id=-1, parent_id=-1, logical_type=lt, encoding=enc)
        for name, lt, enc in (
            ("kind", "uint8", file_pb2.PLAIN),
            ("position", "uint64", file_pb2.PLAIN),
            ("size", "uint64", file_pb2.PLAIN),
            ("blob_id", "uint32", file_pb2.PLAIN),
            ("blob_uri", "string", file_pb2.VAR_BINARY),
        )
    ]
