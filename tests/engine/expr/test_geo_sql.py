"""Spatial functions in `LanceDataset.sql` against pylance 14's `sql` (its DataFusion with
geodatafusion) on the same GeoArrow columns, and against shapely where pylance fails (native
polygons and linestrings given to some functions, interleaved points, its constant-first
containment): predicates and measures in WHERE, SELECT and ORDER BY (with a LIMIT), the
constructors and `st_astext` as pylance writes WKT; columns outside spatial calls untouched."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
import shapely
from test_geo_functions import POLY, shapes  # noqa: F401 (the fixture)

from quiver.format.dataset import dataset
from quiver.format.dataset.sql.spatial import wkt
from quiver.format.errors import InvalidInputError

pytestmark = pytest.mark.compat


def _sql(ds: object, sql: str) -> pa.Table:
    return pa.Table.from_batches(ds.sql(sql).build().to_batch_records())  # type: ignore[attr-defined]


SAME_AS_PYLANCE = [
    "SELECT id FROM dataset WHERE st_intersects(pt, {poly}) ORDER BY id",
    "SELECT id FROM dataset WHERE ST_Intersects(pg, {poly}) AND id > 5 ORDER BY id",
    "SELECT id, st_within(dataset.pt, {poly}) AS w FROM dataset ORDER BY id",
    "SELECT id, st_touches(pg, ln) AS t, st_equals(wkb, wkb) AS e FROM dataset ORDER BY id",
    "SELECT id, st_distance(ln, pg) AS d FROM dataset ORDER BY id",
    "SELECT id, st_area(wkb) AS a FROM dataset ORDER BY id",
    "SELECT id, st_distance(pt, st_point(1.0, 1.0)) AS d FROM dataset ORDER BY d, id LIMIT 7",
    "SELECT count(*) AS n FROM dataset WHERE st_disjoint(wkb, {poly})",
    "SELECT id, st_x(st_point(1.5, 2.0)) AS x, st_y(st_point(1.5, 2.0)) AS y FROM dataset "
    "ORDER BY id LIMIT 2",
    "SELECT id, pt, wkb FROM dataset WHERE st_intersects(wkb, st_geomfromwkb("
    "X'0101000000000000000000F03F0000000000000040')) OR id < 3 ORDER BY id",
]


@pytest.mark.parametrize("template", SAME_AS_PYLANCE)
def test_spatial_sql_answers_as_pylance(shapes, template: str) -> None:  # noqa: F811
    uri, _ = shapes
    sql = template.format(poly=POLY)
    want, got = _sql(lance.dataset(uri), sql), _sql(dataset(uri), sql)
    assert got.column_names == want.column_names, sql
    for name in want.column_names:
        if pa.types.is_floating(want.schema.field(name).type):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=sql)
        else:
            assert got[name].to_pylist() == want[name].to_pylist(), (sql, name)
    # geometry columns outside spatial calls keep their encoding
    assert got.schema.types == want.schema.types, sql


def test_spatial_sql_answers_as_shapely(shapes) -> None:  # noqa: F811
    """What pylance's sql fails on or answers wrongly: areas and centroids of native
    polygons, interleaved points, a constant polygon containing points."""
    uri, geoms = shapes
    poly = shapely.box(0, 0, 10, 10)
    pg = np.where([g is None for g in geoms["pg"]], shapely.Point(), geoms["pg"])
    got = _sql(dataset(uri), "SELECT st_area(pg) AS a, st_covers(pg, st_centroid(pg)) AS c "
                             "FROM dataset ORDER BY id")  # fmt: skip
    np.testing.assert_allclose(got["a"], shapely.area(pg))
    assert all(got["c"].to_pylist())
    inside = _sql(dataset(uri), f"SELECT id FROM dataset WHERE st_contains({POLY}, pti)")
    expected = np.flatnonzero(shapely.contains(poly, geoms["pti"]))
    assert sorted(inside["id"].to_pylist()) == expected.tolist()
    centroids = _sql(dataset(uri), "SELECT st_centroid(wkb) AS c FROM dataset ORDER BY id")
    field = centroids.schema.field("c")
    assert field.metadata == {b"ARROW:extension:name": b"geoarrow.wkb"}
    want = [None if g is None else shapely.centroid(g) for g in geoms["wkb"]]
    for value, g in zip(centroids["c"].to_pylist(), want, strict=True):
        assert (value is None) == (g is None)
        if g is not None:
            assert shapely.from_wkb(value).equals_exact(g, 1e-9)


def test_st_astext_writes_wkt_as_pylance(shapes) -> None:  # noqa: F811
    uri, _ = shapes
    texts = [
        "POINT(1 2)", "POINT(1.5 -2.25)", "POINT(1e20 0.000001)", "POINT(-0 3)",
        "LINESTRING(0 0, 1 1, 2 0.5)", "POLYGON((0 0, 10 0, 10 10, 0 0),(1 1, 2 1, 2 2, 1 1))",
        "MULTIPOINT((1 2),(3 4))", "MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)),((5 5, 6 5, 6 6, 5 5)))",
        "GEOMETRYCOLLECTION(POINT(1 2), LINESTRING(0 0, 1 1))", "POINT Z (1 2 3)",
        "LINESTRING Z (1 2 3, 4 5 6)",
    ]  # fmt: skip
    for text in texts:
        sql = f"SELECT st_astext(st_geomfromtext('{text}')) AS t FROM dataset LIMIT 1"
        want = _sql(lance.dataset(uri), sql)["t"][0].as_py()
        assert _sql(dataset(uri), sql)["t"][0].as_py() == want
        assert wkt(shapely.from_wkt(text)) == want


def test_spatial_errors_and_nulls(shapes) -> None:  # noqa: F811
    uri, _ = shapes
    sql = "SELECT st_x(st_geomfromtext('LINESTRING(1 2, 3 4)')) AS x FROM dataset LIMIT 1"
    assert (
        _sql(dataset(uri), sql)["x"].to_pylist() == _sql(lance.dataset(uri), sql)["x"].to_pylist()
    )
    with pytest.raises(InvalidInputError) as e:
        _sql(dataset(uri), "SELECT st_geomfromtext('POINT(1 2') FROM dataset")
    assert "ParseException" in str(e.value)
    assert "Traceback" not in str(e.value) and "spatial.py" not in str(e.value)


def test_queries_without_spatial_calls_are_untouched(shapes) -> None:  # noqa: F811
    uri, _ = shapes
    sql = 'SELECT id, "pt" FROM dataset WHERE id < 3 ORDER BY id DESC NULLS LAST'
    assert _sql(dataset(uri), sql).equals(_sql(lance.dataset(uri), sql))
    with pytest.raises(InvalidInputError, match="st_nope"):
        _sql(dataset(uri), "SELECT st_nope(pt) FROM dataset")
