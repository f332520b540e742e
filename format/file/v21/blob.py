"""Blob pages (`BlobLayout`): the column's values live out of line; the page holds their
descriptions, encoded with an inner layout as a packed struct ``(position u64, size u64)``.

Null (or empty-list) entries have no blob: their description has ``size == 0`` and carries
the levels instead, ``position = def << 16 | rep`` (``position == 0`` with size 0 is an empty,
valid blob). The outer `layers` describe the column's rep/def structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.v21.layers import max_def, max_rep, parse_layers
from quiver.format.file.v21.page import DecodedPage, PageWhere
from quiver.format.proto import encodings_v2_1_pb2 as pb

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
