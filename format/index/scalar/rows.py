"""Row id sets as index searches return them: sorted unique uint64 numpy arrays, and the
serialized row id maps (`RowIdTreeMap`) pylance stores in BITMAP indices."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import numpy as np
from pyroaring import BitMap

from quiver.format.errors import CorruptFileError
from quiver.format.numeric import unique_sorted

EMPTY = np.empty(0, dtype=np.uint64)
_U32 = struct.Struct("<I")


def union_all(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted unique union of row id arrays."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return EMPTY
    if len(parts) == 1:
        return unique_sorted(parts[0])
    return unique_sorted(np.concatenate(parts))


def parse_row_id_map(blob: bytes, physical_rows: Mapping[int, int], where: str) -> np.ndarray:
    """The row ids of one serialized row id map: a u32 count of entries, each a u32
    fragment (the ids' high 32 bits), a u32 byte size and a roaring bitmap of the low 32
    bits, size 0 meaning every row of that fragment. Fragments not in `physical_rows` (no
    longer in the dataset) are left out."""
    view = memoryview(blob)
    try:
        (count,) = _U32.unpack_from(view, 0)
        pos = 4
        parts = []
        for _ in range(count):
            frag, size = _U32.unpack_from(view, pos)[0], _U32.unpack_from(view, pos + 4)[0]
            pos += 8
            if pos + size > len(view):
                raise CorruptFileError(where, "row id map runs past the end of its bitmap")
            if frag in physical_rows:
                if size == 0:
                    low = np.arange(physical_rows[frag], dtype=np.uint64)
                else:
                    bitmap = BitMap.deserialize(bytes(view[pos : pos + size]))
                    low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.uint64)
                parts.append((np.uint64(frag) << np.uint64(32)) | low)
            pos += size
    except struct.error:
        raise CorruptFileError(where, "truncated row id map in a bitmap index") from None
    except ValueError as e:  # pyroaring refuses a malformed bitmap
        raise CorruptFileError(where, f"bad roaring bitmap in a bitmap index: {e}") from None
    return union_all(parts)
