"""Lance 2.3 pieces on their own: the 2.3 codecs and planar pages, including damaged ones.

Whole datasets against pylance are in tests/test_read_compat.py and test_write_compat.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.v21 import planar
from quiver.format.file.v21.compression import decode_block
from quiver.format.file.v21.layers import Layer
from quiver.format.file.v21.page import PageWhere
from quiver.format.proto import encodings_v2_1_pb2 as pb
from quiver.format.proto import encodings_v2_3_pb2 as p23
from quiver.format.table.schema import LanceSchema

WHERE = PageWhere("f.lance", "column 0 page 0")
EMPTY = np.zeros(0, dtype=np.uint8)


def _u64(values: list[int]) -> np.ndarray:
    return np.frombuffer(np.array(values, dtype="<u8").tobytes(), dtype=np.uint8)


def test_range_and_delta():
    rng = pb.CompressiveEncoding(range=pb.Range(uncompressed_bits_per_value=64, start=5, step=3))
    assert decode_block(rng, EMPTY, 4, "w").to_pylist() == [5, 8, 11, 14]
    with pytest.raises(CorruptFileError, match="step 0"):
        bad = pb.CompressiveEncoding(range=pb.Range(uncompressed_bits_per_value=32, start=1))
        decode_block(bad, EMPTY, 2, "w")
    with pytest.raises(UnsupportedFeatureError, match="Range of 16-bit"):
        bad = pb.CompressiveEncoding(range=pb.Range(uncompressed_bits_per_value=16, step=1))
        decode_block(bad, EMPTY, 2, "w")
    delta = pb.CompressiveEncoding(
        delta=pb.Delta(
            uncompressed_bits_per_value=64,
            base=10,
            deltas=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=64)),
        )
    )
    out = decode_block(delta, _u64([1, 2, 3]), 4, "w")
    assert out.type == pa.uint64() and out.to_pylist() == [10, 11, 13, 16]
    with pytest.raises(CorruptFileError):
        decode_block(delta, _u64([1]), 4, "w")  # 3 deltas needed


def test_block_dictionary_and_metadata_rle():
    items = pb.CompressiveEncoding(range=pb.Range(uncompressed_bits_per_value=64, start=1, step=1))
    idx = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8))
    enc = pb.CompressiveEncoding(
        dictionary=pb.Dictionary(indices=idx, items=items, num_dictionary_items=4)
    )
    frame = np.concatenate([_u64([5, 0]), np.array([0, 3, 3, 1, 2], dtype=np.uint8)])
    assert decode_block(enc, frame, 5, "w").to_pylist() == [1, 4, 4, 2, 3]
    bad = frame.copy()
    bad[16 + 1] = 9  # index 9 of 4 items
    with pytest.raises(CorruptFileError, match="dictionary index"):
        decode_block(enc, bad, 5, "w")
    with pytest.raises(CorruptFileError, match="Dictionary parts"):
        decode_block(enc, frame[:18], 5, "w")
    # offsets [0, 3, 3] as runs (0 once, 3 twice) of a Range of values and of lengths
    rle = pb.CompressiveEncoding(
        rle=pb.Rle(
            values=pb.CompressiveEncoding(
                range=pb.Range(uncompressed_bits_per_value=64, start=0, step=3)
            ),
            run_lengths=pb.CompressiveEncoding(
                range=pb.Range(uncompressed_bits_per_value=32, start=1, step=1)
            ),
        )
    )
    assert decode_block(rle, EMPTY, 3, "w").to_pylist() == [0, 3, 3]
    with pytest.raises(CorruptFileError, match="add up"):
        decode_block(rle, EMPTY, 2, "w")  # runs of 1 and 2 cannot make 2


def test_dense_planar_pages_need_their_grammar():
    msg = p23.PlanarLayout()
    msg.structure.dense.layers.extend([Layer.NULLABLE_ITEM])
    msg.values.constant.scalar = b"\x07\x00"
    with pytest.raises(CorruptFileError, match="all-valid"):
        planar.to_page_layout(msg, WHERE)
    msg.values.none.SetInParent()
    assert planar.to_page_layout(msg, WHERE).constant_layout.layers == [Layer.NULLABLE_ITEM]
    msg.ClearField("values")
    with pytest.raises(CorruptFileError, match="value plane"):
        planar.to_page_layout(msg, WHERE)


def _list_field() -> list:
    schema = LanceSchema.from_arrow(pa.schema([("l", pa.list_(pa.int16()))]))
    top = schema.fields[0]
    return [top, top.children[0]]


def test_sparse_pages_round_trip_and_refuse_damage():
    # rows: [7, null], null, [], [7]  ->  levels in the file's numbering
    layers = [Layer.NULLABLE_ITEM, Layer.NULL_AND_EMPTY_LIST]
    rep = np.array([1, 0, 1, 1, 1], dtype=np.uint16)
    defs = np.array([0, 1, 2, 3, 0], dtype=np.uint16)
    msg, bufs = planar.sparse_from_levels(layers, rep, defs, 4, b"\x07\x00")
    page = planar.to_page_layout(msg, WHERE)
    assert isinstance(page, planar.SparsePage)
    path = _list_field()
    got = planar.sparse_path_array(page, bufs, 4, path, pa.int16(), WHERE)
    assert got.equals(pa.array([[7, None], None, [], [7]], pa.list_(pa.int16())))
    msg.structure.sparse.layers[0].list.num_child_slots = 4
    page = planar.to_page_layout(msg, WHERE)
    with pytest.raises(CorruptFileError, match="not 4 children"):
        planar.sparse_path_array(page, bufs, 4, path, pa.int16(), WHERE)
    with pytest.raises(CorruptFileError, match="too few buffers"):
        planar.sparse_path_array(page, bufs[:1], 4, path, pa.int16(), WHERE)
    one = planar.to_page_layout(msg, WHERE)
    with pytest.raises(UnsupportedFeatureError, match="sparse layers"):
        planar.sparse_path_array(one, bufs, 4, path[1:], pa.int16(), WHERE)
