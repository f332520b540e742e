"""Spatial functions in filters (`format.expr.geo`): their binding. `GeoFunctions` is a part
of `format.expr.bind.Binder`."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.expr import geo
from quiver.format.expr import types as T
from quiver.format.expr.typed import NULL_BOOL, Typed, const


class GeoFunctions:
    """Binding of `st_*` calls (a Binder part)."""

    def _geo_function(self, node: exp.Expression) -> Typed | None:
        if isinstance(node, exp.StDistance):
            name, args = "st_distance", [node.this, node.expression]
        elif isinstance(node, exp.StPoint):
            name, args = "st_point", [node.this, node.expression]
        elif isinstance(node, exp.Anonymous):
            name, args = str(node.this).lower(), list(node.expressions)
        else:
            return None
        arity = 1 if name in ("st_geomfromtext", "st_geomfromwkb", "st_centroid", "st_area") else 2
        if name not in (*geo.PREDICATES, *geo.MEASURES, *geo.CONSTRUCTORS):
            return None
        if len(args) != arity:
            raise self.bind_error(f"{name} takes {arity} argument{'s' * (arity > 1)}")
        bound = [self.bind(a) for a in args]
        if name == "st_point":
            return self._geo_point(bound)
        if name in ("st_geomfromtext", "st_geomfromwkb"):
            return self._geo_parsed(name, bound[0])
        for x in bound:
            if x.geo is None and not x.is_null_const:
                raise self.bind_error(
                    f"{name} needs geometries (GeoArrow columns or st_geomfromtext, "
                    f"st_geomfromwkb, st_point), got {x.sql or 'a value'} ({x.type})"
                )
        if any(x.is_null_const for x in bound):
            out = pa.bool_() if name in geo.PREDICATES else pa.float64()
            return const(NULL_BOOL) if out == pa.bool_() else const(pa.scalar(None, out))
        sql = f"{name}({', '.join(x.sql for x in bound)})"
        if all(x.const for x in bound):
            try:
                folded = geo.apply(name, [(x.value, x.geo) for x in bound], 1)[0]
            except Exception as e:  # noqa: BLE001 - GEOS errors name the geometry
                raise self.bind_error(f"cannot evaluate {sql}: {e}") from None
            out = const(folded, sql)
            return replace(out, geo=geo.WKB) if name == "st_centroid" else out
        call = geo.geo_udf(name, [x.type for x in bound], [str(x.geo) for x in bound])
        out_type = pa.bool_() if name in geo.PREDICATES else pa.float64()
        if name == "st_centroid":
            return Typed(
                type=pa.binary(), expr=call(*[x.expression() for x in bound]), sql=sql, geo=geo.WKB
            )
        return Typed(type=out_type, expr=call(*[x.expression() for x in bound]), sql=sql)

    def _geo_parsed(self, name: str, x: Typed) -> Typed:
        """`st_geomfromtext` of a string or `st_geomfromwkb` of binary: the value read as
        WKT or WKB (a constant parsed once)."""
        text = name == "st_geomfromtext"
        wanted = T.is_string if text else T.is_binary
        if x.is_null_const:
            return replace(const(pa.scalar(None, pa.binary())), geo=geo.WKB)
        if not wanted(x.type):
            kind = "a string of WKT" if text else "binary WKB"
            raise self.bind_error(f"{name} needs {kind}, got {x.sql or 'a value'} ({x.type})")
        kind = "geoarrow.wkt" if text else geo.WKB
        if not x.const:
            return replace(x, geo=kind)
        try:
            shapes = geo.geometries(x.value, kind)
        except Exception as e:  # noqa: BLE001 - shapely's parse errors say where
            raise self.bind_error(f"{name}: not a geometry: {e}") from None
        return replace(const(geo.wkb_of(shapes)[0], f"{name}({x.sql})"), geo=geo.WKB)

    def _geo_point(self, bound: list[Typed]) -> Typed:
        """`st_point(x, y)`: a point of two numbers."""
        for v in bound:
            if not (T.is_numeric(v.type) or v.is_null_const):
                raise self.bind_error(
                    f"st_point needs numbers, got {v.sql or 'a value'} ({v.type})"
                )
        x, y = (self._cast(v, pa.float64()) for v in bound)
        if x.const and y.const:
            if not (x.value.is_valid and y.value.is_valid):
                return replace(const(pa.scalar(None, pa.binary())), geo=geo.WKB)
            point = pa.StructArray.from_arrays(
                [pa.array([x.value]), pa.array([y.value])], ["x", "y"]
            )
            wkb = geo.wkb_of(geo.geometries(point, "geoarrow.point"))[0]
            return replace(const(wkb, f"st_point({x.sql}, {y.sql})"), geo=geo.WKB)
        expr = pc.make_struct(x.expression(), y.expression(), field_names=["x", "y"])
        kind = pa.struct([("x", pa.float64()), ("y", pa.float64())])
        return Typed(type=kind, expr=expr, sql=f"st_point({x.sql}, {y.sql})", geo="geoarrow.point")
