"""Spatial functions in `LanceDataset.sql`: pylance 14's `st_*` functions (geodatafusion's
in its DataFusion) over the dataset's GeoArrow columns, run by Quiver's DataFusion.

DataFusion's Python functions take fixed argument types, and a geometry may be any of the
GeoArrow encodings (`format.expr.geo`). So a query naming an `st_*` function has each
geometry column inside such a call read through a function of its own that turns it into
WKB (`__quiver_wkb_<n>(pt)`: the rewrite replaces only those column references, found by
sqlglot's tokenizer, and leaves the rest of the text as written), and every `st_*` function
takes and gives WKB:

- the predicates `st_intersects`, `st_contains`, `st_within`, `st_covers`,
  `st_coveredby`, `st_disjoint`, `st_touches`, `st_equals`, `st_crosses`, `st_overlaps`
  (boolean), `st_distance` and `st_area` (float64), `st_x` and `st_y` of points;
- `st_point`, `st_geomfromtext`, `st_geomfromwkb` and `st_centroid` make geometries
  (WKB, as `geoarrow.wkb`; pylance gives its own native or union encodings), and
  `st_astext` their text.

The geometry functions are shapely's (GEOS), as in filters; a NULL geometry gives NULL.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.expr import geo

__all__ = ["spatial_query"]

_CALL = re.compile(r"\bst_\w+\s*\(", re.IGNORECASE)
_WKB_FIELD = pa.field("geometry", pa.binary(), metadata={geo.EXTENSION_KEY: geo.WKB.encode()})
_MORE = {"st_astext": (1, pa.string()), "st_x": (1, pa.float64()), "st_y": (1, pa.float64())}


def spatial_query(sql: str, schema: pa.Schema) -> tuple[str, list[Any]]:
    """The query as DataFusion runs it and the functions it needs registered: the text
    unchanged and none when it calls no `st_*` function."""
    if not _CALL.search(sql):
        return sql, []
    columns = {f.name: f for f in schema if geo.geo_kind(f) is not None}
    text, wrapped = _wrap_columns(sql, columns)
    functions = [_converter(n, columns[name]) for n, name in enumerate(wrapped)]
    return text, functions + _functions()


def _converter_name(column: str, names: list[str]) -> str:
    return f"__quiver_wkb_{names.index(column)}"


def _wrap_columns(sql: str, columns: dict[str, pa.Field]) -> tuple[str, list[str]]:
    """`sql` with every geometry column reference inside an `st_*` call read as WKB, and
    the columns so read (in the order of their converters' numbers)."""
    from sqlglot import tokenize
    from sqlglot.tokens import TokenType

    tokens = tokenize(sql, read="postgres")
    used: list[str] = []
    edits: list[tuple[int, int, str]] = []
    stack: list[bool] = []  # per open parenthesis: whether it opens an st_* call
    for i, token in enumerate(tokens):
        kind = token.token_type
        following = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        if kind == TokenType.L_PAREN:
            previous = tokens[i - 1] if i else None
            call = (
                previous is not None
                and previous.token_type == TokenType.VAR
                and previous.text.lower().startswith("st_")
            )
            stack.append(call)
            continue
        if kind == TokenType.R_PAREN:
            if stack:
                stack.pop()
            continue
        if not any(stack) or following in (TokenType.L_PAREN, TokenType.DOT):
            continue
        if kind == TokenType.VAR:
            name = token.text.lower()  # DataFusion folds unquoted names to lower case
        elif kind == TokenType.IDENTIFIER:
            name = token.text
        else:
            continue
        if name not in columns:
            continue
        start = token.start
        if i >= 2 and tokens[i - 1].token_type == TokenType.DOT:
            start = tokens[i - 2].start  # a qualified reference: `dataset.pt`
        if name not in used:
            used.append(name)
        edits.append((start, token.end + 1, name))
    out = sql
    for start, end, name in reversed(edits):
        out = f"{out[:start]}{_converter_name(name, used)}({out[start:end]}){out[end:]}"
    return out, used


def _udf(func: Any, inputs: list[Any], output: Any, name: str) -> Any:
    from datafusion import udf

    return udf(func, inputs, output, "immutable", name=name)


def _converter(number: int, field: pa.Field) -> Any:
    """`__quiver_wkb_<number>`: a geometry column's values as WKB."""
    kind = geo.geo_kind(field)
    assert kind is not None

    def convert(values: pa.Array) -> pa.Array:
        return geo.wkb_of(geo.geometries(values, kind))

    return _udf(convert, [field], _WKB_FIELD, f"__quiver_wkb_{number}")


def _functions() -> list[Any]:
    """The `st_*` functions over WKB."""
    out = []
    for fn in geo.PREDICATES:
        out.append(_udf(_over_wkb(fn), [pa.binary()] * 2, pa.bool_(), fn))
    for fn, arity in geo.MEASURES.items():
        out.append(_udf(_over_wkb(fn), [pa.binary()] * arity, pa.float64(), fn))
    out.append(_udf(_over_wkb("st_centroid"), [pa.binary()], _WKB_FIELD, "st_centroid"))
    out.append(_udf(_from_text, [pa.string()], _WKB_FIELD, "st_geomfromtext"))
    out.append(_udf(_from_wkb, [pa.binary()], _WKB_FIELD, "st_geomfromwkb"))
    out.append(_udf(_point, [pa.float64(), pa.float64()], _WKB_FIELD, "st_point"))
    for fn, (arity, kind) in _MORE.items():
        out.append(_udf(_unary(fn), [pa.binary()] * arity, kind, fn))
    return out


def _over_wkb(fn: str) -> Any:
    def run(*values: pa.Array) -> pa.Array:
        return geo.apply(fn, [(v, geo.WKB) for v in values], len(values[0]))

    return run


def _from_text(values: pa.Array) -> pa.Array:
    return geo.wkb_of(geo.geometries(values, "geoarrow.wkt"))


def _from_wkb(values: pa.Array) -> pa.Array:
    return geo.wkb_of(geo.geometries(values, geo.WKB))


def _point(x: pa.Array, y: pa.Array) -> pa.Array:
    import shapely

    valid = ~(np.asarray(x.is_null()) | np.asarray(y.is_null()))
    xs = np.asarray(x.fill_null(0).to_numpy(zero_copy_only=False), np.float64)
    ys = np.asarray(y.fill_null(0).to_numpy(zero_copy_only=False), np.float64)
    points = np.asarray(shapely.points(xs, ys), dtype=object)
    points[~valid] = None
    return geo.wkb_of(points)


def _unary(fn: str) -> Any:
    def run(values: pa.Array) -> pa.Array:
        import shapely

        geoms = geo.geometries(values, geo.WKB)
        missing = np.asarray(shapely.is_missing(geoms))
        filled = np.where(missing, shapely.from_wkt("POINT EMPTY"), geoms)
        if fn == "st_astext":
            texts = [None if m else wkt(g) for g, m in zip(geoms, missing, strict=True)]
            return pa.array(texts, pa.string())
        coords = shapely.get_x(filled) if fn == "st_x" else shapely.get_y(filled)
        points = np.asarray(shapely.get_type_id(filled)) == 0  # other shapes: NULL
        return pa.array(np.asarray(coords, np.float64), pa.float64(), mask=missing | ~points)

    return run


def _number(x: float) -> str:
    """A coordinate as Rust prints an f64: the shortest digits, never an exponent."""
    return np.format_float_positional(x, trim="-")


def wkt(g: Any) -> str:
    """A geometry's WKT as pylance's `st_astext` writes it (the `wkt` crate): no space
    after the type, none after the commas, coordinates as Rust prints them."""

    def points(coords: Any) -> str:
        return ",".join(" ".join(_number(v) for v in c) for c in coords)

    def ring_list(polygon: Any) -> str:
        rings = [polygon.exterior, *polygon.interiors]
        return ",".join(f"({points(r.coords)})" for r in rings)

    kind = g.geom_type
    dims = " Z" if g.has_z else ""  # (shapely keeps no M)
    if g.is_empty:
        return f"{kind.upper()}{dims} EMPTY"
    if kind == "Point":
        body = points(g.coords)
    elif kind in ("LineString", "LinearRing"):
        kind, body = "LineString", points(g.coords)
    elif kind == "Polygon":
        body = ring_list(g)
    elif kind == "MultiPoint":
        body = ",".join(f"({points(p.coords)})" for p in g.geoms)
    elif kind == "MultiLineString":
        body = ",".join(f"({points(x.coords)})" for x in g.geoms)
    elif kind == "MultiPolygon":
        body = ",".join(f"({ring_list(x)})" for x in g.geoms)
    else:
        body = ",".join(wkt(x) for x in g.geoms)
    return f"{kind.upper()}{dims}({body})"
