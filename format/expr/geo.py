"""Spatial SQL functions in filters, on GeoArrow columns, as pylance 14 (geodatafusion) takes
them, evaluated with shapely (GEOS).

A column is a geometry when its field carries a GeoArrow extension name: the native
encodings (`geoarrow.point`, `.linestring`, `.polygon`, `.multipoint`, `.multilinestring`,
`.multipolygon`, with separated (struct) or interleaved coordinates), `geoarrow.wkb`,
`geoarrow.wkt` and `geoarrow.box`. Constants (`st_geomfromtext`, `st_geomfromwkb`,
`st_point`, `st_centroid` of a constant) are folded into WKB once; everything else runs as
an Arrow scalar function over each batch's geometries, so filters keep being one Arrow
expression. A NULL geometry gives NULL.

The functions are pylance 14's: the predicates `st_intersects`, `st_contains`, `st_within`,
`st_covers`, `st_coveredby`, `st_disjoint`, `st_touches`, `st_equals`, `st_crosses`,
`st_overlaps`; `st_distance` and `st_area` (float64); `st_centroid`; and the constructors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.expr.functions_array import register_function

__all__ = [
    "CONSTRUCTORS",
    "apply",
    "GEOARROW",
    "MEASURES",
    "NATIVE_DEPTHS",
    "PREDICATES",
    "geo_kind",
    "geo_udf",
    "geometries",
    "ragged_coordinates",
    "wkb_of",
]

EXTENSION_KEY = b"ARROW:extension:name"
GEOARROW = (
    "geoarrow.point",
    "geoarrow.linestring",
    "geoarrow.polygon",
    "geoarrow.multipoint",
    "geoarrow.multilinestring",
    "geoarrow.multipolygon",
    "geoarrow.wkb",
    "geoarrow.wkt",
    "geoarrow.box",
)
WKB = "geoarrow.wkb"  # how constants and computed geometries travel

PREDICATES = (
    "st_intersects",
    "st_contains",
    "st_within",
    "st_covers",
    "st_coveredby",
    "st_disjoint",
    "st_touches",
    "st_equals",
    "st_crosses",
    "st_overlaps",
)
MEASURES = {"st_distance": 2, "st_area": 1}  # name -> arguments (float64 results)
CONSTRUCTORS = ("st_geomfromtext", "st_geomfromwkb", "st_point", "st_centroid")


def _shapely() -> Any:
    import shapely

    return shapely


def geo_kind(field: pa.Field) -> str | None:
    """The GeoArrow encoding of a field (its extension name), or None."""
    name = (field.metadata or {}).get(EXTENSION_KEY)
    if name is None:
        return None
    text = name.decode("utf-8", "replace")
    return text if text in GEOARROW else None


def _coords(array: pa.Array) -> np.ndarray:
    """(n, 2 or 3) float64 coordinates of a native point array (struct or interleaved)."""
    if pa.types.is_struct(array.type):
        flat = array.flatten()
        return np.column_stack(
            [np.asarray(c.to_numpy(zero_copy_only=False), np.float64) for c in flat]
        )
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
        values = array.flatten() if array.offset or array.null_count else array.values
        return np.asarray(values.to_numpy(zero_copy_only=False), np.float64).reshape(-1, width)
    raise TypeError(f"not a GeoArrow coordinate array: {array.type}")


def ragged_coordinates(array: pa.Array, depth: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Coordinates and offsets (outermost first) of `depth` levels of lists of points,
    each level's offsets starting at 0."""
    offsets: list[np.ndarray] = []
    level = array
    for _ in range(depth):
        o = level.offsets.to_numpy().astype(np.int64)
        child = level.values.slice(int(o[0]), int(o[-1] - o[0]))
        offsets.append(o - o[0])
        level = child
    return _coords(level), offsets


_NATIVE = {
    "geoarrow.point": (0, "POINT"),
    "geoarrow.linestring": (1, "LINESTRING"),
    "geoarrow.polygon": (2, "POLYGON"),
    "geoarrow.multipoint": (1, "MULTIPOINT"),
    "geoarrow.multilinestring": (2, "MULTILINESTRING"),
    "geoarrow.multipolygon": (3, "MULTIPOLYGON"),
}
NATIVE_DEPTHS = {kind: depth for kind, (depth, _) in _NATIVE.items()}  # levels of lists


def geometries(array: pa.Array | pa.ChunkedArray | pa.Scalar, kind: str) -> np.ndarray:
    """The shapely geometries of a GeoArrow array (None where NULL)."""
    shapely = _shapely()
    if isinstance(array, pa.Scalar):
        array = pa.array([array.as_py()], array.type) if array.is_valid else pa.nulls(1, array.type)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if kind == "geoarrow.wkb":
        out = shapely.from_wkb(np.asarray(array.to_pylist(), dtype=object))
    elif kind == "geoarrow.wkt":
        out = shapely.from_wkt(np.asarray(array.to_pylist(), dtype=object))
    elif kind == "geoarrow.box":
        cols = [np.asarray(c.to_numpy(zero_copy_only=False), np.float64) for c in array.flatten()]
        out = shapely.box(cols[0], cols[1], cols[2], cols[3])
    else:
        depth, name = _NATIVE[kind]
        coords, offsets = ragged_coordinates(array, depth)
        geometry_type = getattr(shapely.GeometryType, name)
        if depth == 0:
            out = shapely.points(coords)
        else:
            out = shapely.from_ragged_array(geometry_type, coords, tuple(reversed(offsets)))
    out = np.asarray(out, dtype=object)
    if array.null_count:
        out[np.asarray(array.is_null().to_numpy(zero_copy_only=False))] = None
    return out


def wkb_of(geoms: np.ndarray) -> pa.Array:
    """Geometries as a WKB binary array (NULL where None)."""
    return pa.array(_shapely().to_wkb(geoms), pa.binary())


def _evaluate(fn: str, geoms: list[np.ndarray]) -> tuple[np.ndarray, pa.DataType]:
    shapely = _shapely()
    if fn in PREDICATES:
        op = {"st_coveredby": shapely.covered_by}.get(fn) or getattr(shapely, fn[3:])
        return np.asarray(op(*geoms), dtype=bool), pa.bool_()
    if fn == "st_distance":
        return np.asarray(shapely.distance(*geoms), np.float64), pa.float64()
    if fn == "st_area":
        return np.asarray(shapely.area(*geoms), np.float64), pa.float64()
    if fn == "st_centroid":
        return shapely.centroid(*geoms), pa.binary()
    raise ValueError(f"no spatial function {fn}")


def apply(fn: str, args: list[tuple[Any, str]], length: int) -> pa.Array:
    """`fn` over geometry arguments (arrays or scalars with their GeoArrow kind)."""
    shapely = _shapely()
    geoms = []
    valid = np.ones(length, bool)
    for value, kind in args:
        g = geometries(value, kind)
        if len(g) == 1 and length != 1:
            g = np.repeat(g, length)
        valid &= ~shapely.is_missing(g)
        geoms.append(g)
    empty = shapely.from_wkt("POINT EMPTY")
    values, out_type = _evaluate(fn, [np.where(valid, g, empty) for g in geoms])
    if out_type == pa.binary():
        values = np.asarray(values, dtype=object)
        values[~valid] = None
        return wkb_of(values)
    return pa.array(values, out_type, mask=~valid)


def geo_udf(fn: str, types: list[pa.DataType], kinds: list[str]) -> Callable[..., pc.Expression]:
    """An Arrow scalar function computing `fn` over arguments of `types` (GeoArrow
    `kinds`), registered once per process; call it with the arguments' expressions."""
    if fn in PREDICATES:
        out_type = pa.bool_()
    else:
        out_type = pa.binary() if fn == "st_centroid" else pa.float64()
    signature = repr((fn, [str(t) for t in types], kinds))
    name = register_function(
        f"quiver_{fn}_{hashlib.sha1(signature.encode()).hexdigest()[:12]}",
        lambda *values: apply(fn, list(zip(values, kinds, strict=True)), _length(values)),
        {f"g{i}": t for i, t in enumerate(types)},
        out_type,
    )

    def call(*exprs: pc.Expression) -> pc.Expression:
        return pc.Expression._call(name, list(exprs))

    return call


def _length(values: tuple[Any, ...]) -> int:
    """The batch's rows: the length of its array arguments (scalars broadcast)."""
    return max((len(v) for v in values if not isinstance(v, pa.Scalar)), default=1)
