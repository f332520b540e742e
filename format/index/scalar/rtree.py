"""RTREE indices (pylance 14's, over GeoArrow columns): a packed Hilbert R-tree.

`page_data.lance` holds rows of (`bbox`: a non-null `geoarrow.box` struct of xmin, ymin,
xmax, ymax; `id`: uint64). First the items: each non-null geometry's bounding box and row
address, sorted by the Hilbert value of the box's centre over the extent of all of them
(16 bits a side). Then each level of parents: one box per page of `page_size` rows of the
level below (its `id` the page's number in that level), until a level fits in one page.
The schema's metadata says `page_size`, `bbox` (the extent, JSON), `num_items` and
`num_pages`. `nulls.lance` holds one row, the row id map of the NULL geometries.

A search walks the levels from the top, reading only the pages whose parent box meets the
query box: the items whose boxes meet it are the candidates (the filter itself is still
evaluated on each).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.expr.geo import (
    NATIVE_DEPTHS,
    PREDICATES,
    geo_kind,
    geometries,
    ragged_coordinates,
)
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.scalar.build import row_id_map
from quiver.format.index.scalar.rows import parse_row_id_map
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

__all__ = [
    "DETAILS",
    "FILES",
    "PAGE_FILE",
    "RTreeIndex",
    "build_rtree",
    "check_field",
    "spatial_box",
]

PAGE_FILE = "page_data.lance"
NULLS_FILE = "nulls.lance"
FILES = (PAGE_FILE, NULLS_FILE)
DETAILS = "/lance.index.pb.RTreeIndexDetails"
PAGE_SIZE = 4096
_BOX = pa.struct(
    [pa.field(n, pa.float64(), nullable=False) for n in ("xmin", "ymin", "xmax", "ymax")]
)
_HILBERT_MAX = 0xFFFF


def check_field(column: str, field: pa.Field) -> str:
    """The GeoArrow encoding of an RTREE's column; a column of anything else is refused,
    as pylance refuses it."""
    kind = geo_kind(field)
    if kind is None:
        raise InvalidInputError(
            f"an RTREE index needs a GeoArrow column (a geoarrow.* extension type): "
            f"{column!r} is {field.type}"
        )
    return kind


def bounds_of(values: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(n, 4) float64 boxes of GeoArrow `values` and which are non-null (native encodings
    from their coordinates, the others through shapely)."""
    import shapely

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if kind in NATIVE_DEPTHS:
        return _native_bounds(values, NATIVE_DEPTHS[kind])
    shapes = geometries(values, kind)
    valid = ~shapely.is_missing(shapes)
    boxes = np.full((len(shapes), 4), np.nan)
    if valid.any():
        boxes[valid] = shapely.bounds(shapes[valid])
    return boxes, valid


def _native_bounds(values: pa.Array, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes of native GeoArrow geometries: each one's coordinates' extremes."""
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    coords, offsets = ragged_coordinates(values, depth)
    starts = np.arange(len(values) + 1, dtype=np.int64)
    for level in offsets:  # each geometry's range of coordinates
        starts = level[starts]
    xy = coords[:, :2]
    has = starts[1:] > starts[:-1]
    valid &= has
    boxes = np.full((len(values), 4), np.nan)
    if valid.any():
        at = starts[:-1][has]
        lo = np.minimum.reduceat(xy, at, axis=0)
        hi = np.maximum.reduceat(xy, at, axis=0)
        # (reduceat over a range that runs to the next non-empty geometry's start: the
        # empty ones between hold no coordinates, so each range is exactly one geometry's)
        boxes[has] = np.column_stack([lo, hi])
    return boxes, valid


def hilbert(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The index of each (x, y) cell (16-bit coordinates) along a Hilbert curve (uint32),
    by the branch-free bit construction of the curve's quadrant states."""
    m = np.uint32(0xFFFF)
    x, y = x.astype(np.uint32), y.astype(np.uint32)
    a, b = x ^ y, m ^ (x ^ y)
    c, d = m ^ (x | y), x & (y ^ m)
    a, b, c, d = (
        a | (b >> 1),
        (a >> 1) ^ a,
        ((c >> 1) ^ (b & (d >> 1))) ^ c,
        ((a & (c >> 1)) ^ (d >> 1)) ^ d,
    )
    for shift in (2, 4):
        s = np.uint32(shift)
        a, b, c, d = (
            (a & (a >> s)) ^ (b & (b >> s)),
            (a & (b >> s)) ^ (b & ((a ^ b) >> s)),
            c ^ ((a & (c >> s)) ^ (b & (d >> s))),
            d ^ ((b & (c >> s)) ^ ((a ^ b) & (d >> s))),
        )
    eight = np.uint32(8)
    c = c ^ ((a & (c >> eight)) ^ (b & (d >> eight)))
    d = d ^ ((b & (c >> eight)) ^ ((a ^ b) & (d >> eight)))
    a, b = c ^ (c >> np.uint32(1)), d ^ (d >> np.uint32(1))
    i0 = x ^ y
    i1 = b | (m ^ (i0 | a))
    return (_spread(i1) << np.uint32(1)) | _spread(i0)


def _spread(v: np.ndarray) -> np.ndarray:
    """The 16 low bits of `v` moved to the even bits."""
    for shift, mask in ((8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555)):
        v = (v | (v << np.uint32(shift))) & np.uint32(mask)
    return v


def _levels(num_items: int, page_size: int) -> list[int]:
    """Rows of each level, items first, up to the one that fits in a page."""
    sizes = [num_items]
    while sizes[-1] > page_size:
        sizes.append(math.ceil(sizes[-1] / page_size))
    return sizes


def _page_boxes(boxes: np.ndarray, page_size: int) -> np.ndarray:
    """The box of each page of `boxes`."""
    starts = np.arange(0, len(boxes), page_size)
    return np.column_stack(
        [
            np.minimum.reduceat(boxes[:, 0], starts),
            np.minimum.reduceat(boxes[:, 1], starts),
            np.maximum.reduceat(boxes[:, 2], starts),
            np.maximum.reduceat(boxes[:, 3], starts),
        ]
    )


def build_rtree(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    addresses: np.ndarray,
    version: str,
    kind: str,
    page_size: int = PAGE_SIZE,
) -> list[tuple[str, int]]:
    """Write an RTREE of GeoArrow `values` (`kind`: their encoding; row addresses beside,
    in scan order) into `directory`; (file, size) pairs."""
    addresses = np.asarray(addresses, dtype=np.uint64)
    boxes, valid = bounds_of(values, kind)
    items, ids = boxes[valid], addresses[valid]
    if len(items):
        lo, hi = items[:, :2].min(axis=0), items[:, 2:].max(axis=0)
        extent = hi - lo
        extent[extent == 0] = 1.0
        centres = (items[:, :2] + items[:, 2:]) / 2
        cells = np.floor(_HILBERT_MAX * (centres - lo) / extent)
        order = np.argsort(hilbert(cells[:, 0], cells[:, 1]), kind="stable")
        items, ids = items[order], ids[order]
        total = {"minx": lo[0], "miny": lo[1], "maxx": hi[0], "maxy": hi[1]}
    else:
        total = {"minx": None, "miny": None, "maxx": None, "maxy": None}  # (as pylance's)
    sizes = _levels(len(items), page_size)
    levels_boxes, levels_ids = [items], [ids]
    for size in sizes[1:]:
        levels_boxes.append(_page_boxes(levels_boxes[-1], page_size))
        levels_ids.append(np.arange(size, dtype=np.uint64))
    all_boxes = np.concatenate(levels_boxes) if len(items) else np.empty((0, 4))
    all_ids = np.concatenate(levels_ids) if len(items) else np.empty(0, np.uint64)
    metadata = {
        "page_size": str(page_size),
        "bbox": json.dumps(total, separators=(",", ":")),
        "num_items": str(len(items)),
        "num_pages": str(sum(math.ceil(s / page_size) for s in sizes) if len(items) else 0),
    }
    box_field = pa.field(
        "bbox", _BOX, nullable=False, metadata={"ARROW:extension:name": "geoarrow.box"}
    )
    fields = [box_field, pa.field("id", pa.uint64(), nullable=False)]
    schema = LanceSchema.from_arrow(pa.schema(fields, metadata=metadata))
    columns = [pa.array(all_boxes[:, i], pa.float64()) for i in range(4)]
    table = pa.table(
        [pa.StructArray.from_arrays(columns, fields=list(_BOX)), pa.array(all_ids, pa.uint64())],
        schema=schema.to_arrow(),
    )
    size = write_index_file(store, f"{directory}/{PAGE_FILE}", schema, [table], version)
    nulls_schema = LanceSchema.from_arrow(pa.schema([pa.field("nulls", pa.binary(), False)]))
    nulls = pa.table({"nulls": pa.array([row_id_map(addresses[~valid])], pa.binary())})
    nulls_table = nulls.cast(nulls_schema.to_arrow())
    nulls_size = write_index_file(
        store, f"{directory}/{NULLS_FILE}", nulls_schema, [nulls_table], version
    )
    return [(PAGE_FILE, size), (NULLS_FILE, nulls_size)]


@dataclass
class RTreeIndex:
    """An open RTREE: its levels' sizes and its top level's boxes (lower pages read as a
    search needs them)."""

    store: ObjectStore
    directory: str
    page_size: int
    sizes: list[int]

    @classmethod
    def load(cls, store: ObjectStore, directory: str) -> RTreeIndex:
        with IndexFile(store, f"{directory}/{PAGE_FILE}") as f:
            meta = f.metadata or {}
            try:
                page_size = int(meta.get("page_size", b"4096"))
                num_items = int(meta["num_items"])
            except (KeyError, ValueError):
                raise CorruptFileError(
                    f.path, "RTREE metadata lacks page_size / num_items"
                ) from None
            if page_size < 2:
                raise CorruptFileError(f.path, f"RTREE page_size {page_size}")
            sizes = _levels(num_items, page_size)
            if sum(sizes) != f.num_rows and num_items:
                raise CorruptFileError(
                    f.path, f"RTREE of {num_items} items has {f.num_rows} rows, not {sum(sizes)}"
                )
        return cls(store, directory, page_size, sizes)

    def statistics(self) -> dict[str, Any]:
        """pylance's figures of a segment: page size, pages, items, the extent and the
        first row of each page (all levels)."""
        with IndexFile(self.store, f"{self.directory}/{PAGE_FILE}") as f:
            extent = json.loads((f.metadata or {}).get("bbox", b"{}"))
        offsets = [
            start + page * self.page_size
            for start, size in zip(
                np.cumsum([0, *self.sizes[:-1]]).tolist(), self.sizes, strict=True
            )
            for page in range(math.ceil(size / self.page_size))
        ]
        return {
            "page_size": self.page_size,
            "num_pages": len(offsets),
            "num_items": self.sizes[0],
            "bbox": extent,
            "page_offsets": offsets,
        }

    def search(self, box: tuple[float, float, float, float]) -> np.ndarray:
        """Sorted row addresses of the items whose boxes meet `box` (xmin, ymin, xmax,
        ymax)."""
        if not self.sizes[0]:
            return np.empty(0, np.uint64)
        starts = np.concatenate(([0], np.cumsum(self.sizes)))
        with IndexFile(self.store, f"{self.directory}/{PAGE_FILE}") as f:
            level = len(self.sizes) - 1
            ranges = [(int(starts[level]), int(starts[level + 1]))]
            while True:
                boxes, ids = [], []
                for lo, hi in ranges:
                    rows = f.read(["bbox", "id"], lo, hi)
                    boxes.append(rows.column("bbox").combine_chunks())
                    ids.append(rows.column("id").to_numpy())
                found = np.concatenate(ids)[_meeting(boxes, box)]
                if level == 0:
                    return np.sort(found.astype(np.uint64))
                level -= 1
                base, end = int(starts[level]), int(starts[level + 1])
                ranges = [
                    (base + int(p) * self.page_size, min(end, base + (int(p) + 1) * self.page_size))
                    for p in np.sort(found)
                ]
                if not ranges:
                    return np.empty(0, np.uint64)

    def null_rows(self, physical_rows: Mapping[int, int]) -> np.ndarray:
        """Sorted row addresses of the NULL geometries of the fragments in
        `physical_rows`."""
        with IndexFile(self.store, f"{self.directory}/{NULLS_FILE}") as f:
            blob = f.read(["nulls"]).column(0)[0].as_py()
            return parse_row_id_map(blob, physical_rows, f.path)


def _meeting(boxes: list[pa.StructArray], box: tuple[float, float, float, float]) -> np.ndarray:
    """Which of the boxes meet `box`."""
    cols = [
        np.concatenate([b.field(n).to_numpy(zero_copy_only=False) for b in boxes])
        for n in ("xmin", "ymin", "xmax", "ymax")
    ]
    xmin, ymin, xmax, ymax = box
    return (cols[0] <= xmax) & (cols[2] >= xmin) & (cols[1] <= ymax) & (cols[3] >= ymin)


def spatial_box(
    node: exp.Expression,
    is_column: Callable[[exp.Expression], bool],
    constant: Callable[[exp.Expression], Any],
) -> tuple[float, float, float, float] | None:
    """The box outside which no row can satisfy `node`: a spatial predicate (any but
    `st_disjoint`) of the column (`is_column`) and a constant geometry (`constant` binds
    one, or None), or `st_distance` of them below (or at most) a constant, the box grown
    by it; None for anything else."""
    distance = 0.0
    call = node
    if isinstance(node, (exp.LT, exp.LTE, exp.GT, exp.GTE)):
        left, right = node.this, node.expression
        if isinstance(node, (exp.GT, exp.GTE)):
            left, right = right, left
        if not isinstance(left, exp.StDistance):
            return None
        bound = _number(right)
        if bound is None:
            return None
        distance, call = bound, left
    if isinstance(call, exp.StDistance):
        args = [call.this, call.expression]
    elif isinstance(call, exp.Anonymous) and str(call.this).lower() in PREDICATES:
        if str(call.this).lower() == "st_disjoint":
            return None
        args = list(call.expressions)
    else:
        return None
    if len(args) != 2 or distance < 0 or not math.isfinite(distance):
        return None
    first, second = args
    other = second if is_column(first) else first if is_column(second) else None
    if other is None:
        return None
    value = constant(other)
    if value is None:
        return None
    import shapely

    shape = geometries(value.value, value.geo)[0]
    if shape is None or shapely.is_empty(shape):
        return None
    xmin, ymin, xmax, ymax = (float(v) for v in shapely.bounds(shape))
    return (xmin - distance, ymin - distance, xmax + distance, ymax + distance)


def _number(node: exp.Expression) -> float | None:
    """A numeric literal (signed), or None."""
    sign = 1.0
    while isinstance(node, (exp.Neg, exp.Paren)):
        sign = -sign if isinstance(node, exp.Neg) else sign
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return sign * float(node.this)
        except ValueError:
            return None
    return None
