"""The physical form of a leaf page's visible values, as the 2.1+ page encoders consume it.

`physical` turns an Arrow array of visible value slots into one of

* `FixedValues`: ``bits`` per value (1 for bool, LSB first) as a flat byte array, wrapped in
  `FixedSizeList` layers for fixed_size_list leaves (each layer's item validity optional);
* `VariableValues`: int64 offsets (nulls zero length) and the value bytes;
* `NullValues`: the null type (no data).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.errors import UnsupportedFeatureError
from quiver.format.file.types import fixed_bits, is_var_binary
from quiver.format.file.v21.shred import valid_mask


@dataclass
class FslLayer:
    """One fixed_size_list level: items per value and the items' validity (None: no nulls)."""

    size: int
    validity: np.ndarray | None  # bool per item


@dataclass
class FixedValues:
    """Fixed-width values: `data` holds `count * prod(sizes) * bits / 8` bytes (bits packed
    for bool)."""

    count: int
    bits: int  # of one innermost item
    data: np.ndarray  # uint8; for bits == 1 one byte (0/1) per item, packed later per chunk
    fsl: list[FslLayer] = field(default_factory=list)  # outermost first

    @property
    def items_per_value(self) -> int:
        """Innermost items per value."""
        n = 1
        for layer in self.fsl:
            n *= layer.size
        return n

    @property
    def value_bits(self) -> int:
        """Bits of one whole value."""
        return self.bits * self.items_per_value


@dataclass
class VariableValues:
    """Variable-width values: `offsets` (count + 1, from 0) into `data`."""

    count: int
    offsets: np.ndarray  # int64
    data: np.ndarray  # uint8
    offset_bits: int = 32  # 64 for large_string / large_binary

    @property
    def max_length(self) -> int:
        """The longest value in bytes."""
        return int(np.max(np.diff(self.offsets))) if self.count else 0


@dataclass
class NullValues:
    """Values of the null type."""

    count: int


Physical = FixedValues | VariableValues | NullValues


def _fixed_data(arr: pa.Array, bits: int) -> np.ndarray:
    """The value bytes of `arr` (any offset); bools unpacked to one 0/1 byte per value."""
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.zeros(n if bits == 1 else n * bits // 8, dtype=np.uint8)
    raw = np.frombuffer(buf, dtype=np.uint8)
    if bits == 1:
        return np.unpackbits(raw, count=arr.offset + n, bitorder="little")[arr.offset :]
    w = bits // 8
    return raw[arr.offset * w : (arr.offset + n) * w]


def physical(arr: pa.Array, where: str) -> Physical:
    """The physical values of a page's visible slots."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return NullValues(n)
    if pa.types.is_dictionary(t):
        return physical(arr.dictionary_decode(), where)
    if is_var_binary(t):
        return _variable(arr)
    if pa.types.is_fixed_size_list(t):
        layers = []
        cur = arr
        count = n
        while pa.types.is_fixed_size_list(cur.type):
            k = cur.type.list_size
            items = cur.values.slice(cur.offset * k, len(cur) * k)
            layers.append(FslLayer(k, valid_mask(items)))
            cur = items
        bits = fixed_bits(cur.type)
        if bits is None:
            raise UnsupportedFeatureError(f"{where}: no Lance 2.1+ encoding for {t}")
        return FixedValues(count, bits, _fixed_data(cur, bits), layers)
    bits = fixed_bits(t)
    if bits is None:
        raise UnsupportedFeatureError(f"{where}: no Lance 2.1+ encoding for {t}")
    return FixedValues(n, bits, _fixed_data(arr, bits))


def _variable(arr: pa.Array) -> VariableValues:
    n = len(arr)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bits = 64 if large else 32
    if n == 0:
        return VariableValues(0, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8), bits)
    _, raw_off, raw_data = arr.buffers()[:3]
    offs = np.frombuffer(raw_off, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)
    offs = offs[arr.offset :].astype(np.int64)
    if arr.null_count:
        valid = valid_mask(arr)
        lengths = np.diff(offs)
        if np.any(lengths[~valid]):  # null slots backed by bytes: rebuild with empty nulls
            empty = pa.scalar(
                b"" if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type) else "",
                arr.type,
            )
            return _variable(pc.if_else(pa.array(valid), arr, empty))
    base, end = int(offs[0]), int(offs[-1])
    data = (
        np.frombuffer(raw_data, dtype=np.uint8)[base:end]
        if raw_data is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return VariableValues(n, offs - base, data, bits)
