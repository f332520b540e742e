"""What decoding one 2.1+ page yields, whatever its layout: levels plus visible values.

`rep`/`defs` hold one uint16 per level entry (None when the page has none); `values` is the
*physical* array of visible items (null item slots included, with garbage values), or the
dictionary indices when `dictionary` is set. `layers` are innermost first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError
from quiver.format.file.v21.layers import Layer


@dataclass
class DecodedPage:
    """A decoded page: levels, visible physical values and the page's layer stack."""

    layers: list[Layer]
    num_rows: int
    rep: np.ndarray | None
    defs: np.ndarray | None
    values: pa.Array
    dictionary: pa.Array | None = None


@dataclass(frozen=True)
class PageWhere:
    """File and page identity for error messages."""

    path: str
    page: str  # "column 3 (field 'x', id 4) page 0"

    def corrupt(self, reason: str) -> CorruptFileError:
        """A CorruptFileError about this page."""
        return CorruptFileError(self.path, f"{self.page}: {reason}")

    @property
    def full(self) -> str:
        """The file and page, as the codecs' `where` argument."""
        return f"{self.path} {self.page}"


def levels_array(arr: pa.Array, count: int, what: str, where: PageWhere) -> np.ndarray:
    """Decoded repetition/definition levels as uint16 numpy, checked to hold `count` entries."""
    out = arr.to_numpy(zero_copy_only=False)
    if len(out) != count:
        raise where.corrupt(f"{what} levels decode to {len(out)} entries, expected {count}")
    return out.astype(np.uint16, copy=False)


def raw_u16(buf: bytes | memoryview, what: str, where: PageWhere) -> np.ndarray:
    """An uncompressed little-endian u16 level buffer."""
    if len(buf) % 2:
        raise where.corrupt(f"{what} level buffer of odd size {len(buf)}")
    return np.frombuffer(buf, dtype="<u2").astype(np.uint16, copy=False)
