"""RTREE indices over GeoArrow columns, against pylance 14: Quiver reads pylance's (spatial
filters narrowed, the same answers and statistics), writes pylance's (the same boxes and row
ids in the same Hilbert order, the same null rows; pylance narrows its filters with them),
and keeps them through writes, compaction (left as pylance leaves them), optimize_indices
and deferred compactions as pylance does."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
import shapely

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store
from quiver.format.table.indices import indices_of

_POINT = pa.struct([("x", pa.float64()), ("y", pa.float64())])
BOX = "st_geomfromtext('POLYGON((10 10, 40 10, 40 30, 10 30, 10 10))')"
FILTERS = [
    f"st_intersects(geom, {BOX})",
    f"st_within(geom, {BOX}) AND id % 2 = 0",
    f"st_coveredby(geom, {BOX}) OR id = 7",
    "st_distance(geom, st_point(50, 50)) < 3",
    "st_distance(st_point(20, 80), geom) <= 4.5",
    f"NOT st_intersects(geom, {BOX})",
    f"st_disjoint(geom, {BOX}) AND id < 300",
    "geom IS NULL",
]


def _geoms(kind: str, n: int, seed: int) -> tuple[pa.Array, pa.Field]:
    """`n` random geometries of one GeoArrow encoding, every 13th NULL."""
    rng = np.random.default_rng(seed)
    xs, ys = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    nulls = np.arange(n) % 13 == 5
    if kind == "point":
        array = pa.StructArray.from_arrays(
            [pa.array(xs), pa.array(ys)], names=["x", "y"], mask=pa.array(nulls)
        )
    else:
        w, h = rng.uniform(0.1, 3, n), rng.uniform(0.1, 3, n)
        boxes = shapely.box(xs, ys, xs + w, ys + h)
        if kind == "wkb":
            array = pa.array(shapely.to_wkb(boxes).tolist(), pa.binary(), mask=nulls)
        else:
            rings = [[[{"x": a, "y": b} for a, b in g.exterior.coords]] for g in boxes]
            array = pa.array(rings, pa.list_(pa.list_(_POINT)), mask=nulls)
    name = {"point": "geoarrow.point", "wkb": "geoarrow.wkb", "polygon": "geoarrow.polygon"}
    return array, pa.field("geom", array.type, metadata={"ARROW:extension:name": name[kind]})


def _write(uri: str, kind: str, n: int, seed: int = 0, mode: str = "create", **kw) -> None:
    array, field = _geoms(kind, n, seed)
    ids = pa.array(np.arange(seed * 100_000, seed * 100_000 + n))
    table = pa.Table.from_arrays(
        [ids, array], schema=pa.schema([pa.field("id", pa.int64()), field])
    )
    lance.write_dataset(table, uri, mode=mode, max_rows_per_file=2500, **kw)


def _rows(uri: str, sql: str, engine) -> list[int]:
    return sorted(engine(uri).to_table(filter=sql, columns=["id"])["id"].to_pylist())


def _index_dir(uri: str) -> Path:
    [entry] = [e for e in indices_of(dataset(uri).core.manifest) if e.name == "geom_idx"]
    return Path(uri) / entry.directory


def _contents(uri: str) -> tuple[pa.Table, dict, bytes]:
    store = open_store(str(_index_dir(uri)))
    with IndexFile(store, "page_data.lance") as f:
        pages, meta = f.read(["bbox", "id"]), dict(f.metadata)
    with IndexFile(store, "nulls.lance") as f:
        nulls = f.read(["nulls"]).column(0)[0].as_py()
    return pages, meta, nulls


@pytest.mark.parametrize("kind", ["point", "polygon", "wkb"])
def test_quiver_writes_pylance_s_rtree(tmp_path: Path, kind: str) -> None:
    """Built by each engine on twins: the same boxes and row ids in the same order (10,000
    rows: leaves and a parent level), the same metadata and null rows; each engine narrows
    and answers with the other's index as with its own."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri in (ours, theirs):
        _write(uri, kind, 10_000)
    dataset(ours).create_scalar_index("geom", "RTREE")
    lance.dataset(theirs).create_scalar_index("geom", "RTREE")
    mine, their = _contents(ours), _contents(theirs)
    assert mine[0].equals(their[0])
    assert mine[1] == their[1] and mine[1]["num_pages"] == b"4"
    assert mine[2] == their[2]
    for sql in FILTERS:
        expected = _rows(theirs, sql, lance.dataset)
        for uri in (ours, theirs):
            for engine in (dataset, lance.dataset):
                assert _rows(uri, sql, engine) == expected, (sql, uri, engine)
    narrowed = FILTERS[0]
    assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter=narrowed).explain_plan()
    for uri in (ours, theirs):
        assert "narrowed by geom_idx" in dataset(uri).scanner(filter=narrowed).explain_plan(True)
    stats = dataset(theirs).index_statistics("geom_idx")["indices"][0]
    theirs_stats = lance.dataset(theirs).stats.index_stats("geom_idx")["indices"][0]
    assert stats["page_offsets"] == theirs_stats["page_offsets"]
    assert len(stats["page_offsets"]) == 4
    assert {k: stats[k] for k in ("page_size", "num_pages", "num_items")} == {
        k: theirs_stats[k] for k in ("page_size", "num_pages", "num_items")
    }
    # (pylance's statistics show the extent as its JSON parser reads it, a few ulps off)
    assert stats["bbox"] == pytest.approx(theirs_stats["bbox"], rel=1e-12)


def test_rtree_through_writes_as_pylance(tmp_path: Path) -> None:
    """The same steps on twins, the index built and kept by each engine: appends,
    optimize_indices (merged and as a delta), deletes, compaction (which leaves the index
    covering the old fragments, as pylance leaves it), optimize after it (rebuilt over the
    live rows) and a deferred compaction: the same coverage and answers after each."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    steps = [
        ("index", lambda e, u: e(u).create_scalar_index("geom", "RTREE")),
        ("append", lambda e, u: _write(u, "point", 800, seed=1, mode="append")),
        ("optimize", lambda e, u: e(u).optimize.optimize_indices()),
        ("append again", lambda e, u: _write(u, "point", 300, seed=2, mode="append")),
        ("delta", lambda e, u: e(u).optimize.optimize_indices(num_indices_to_merge=0)),
        ("delete", lambda e, u: e(u).delete("id % 3 = 0")),
        ("deferred", lambda e, u: e(u).optimize.compact_files(defer_index_remap=True)),
        ("append late", lambda e, u: _write(u, "point", 200, seed=3, mode="append")),
        ("compact", lambda e, u: e(u).optimize.compact_files()),
        ("optimize after", lambda e, u: e(u).optimize.optimize_indices()),
    ]
    for uri in (ours, theirs):
        _write(uri, "point", 6_000)
    for step, run in steps:
        run(dataset, ours)
        run(lance.dataset, theirs)

        def coverage(uri: str) -> list:
            return sorted(
                (e.name, sorted(e.fragment_ids or ()), e.dataset_version)
                for e in indices_of(dataset(uri).core.manifest, system=True)
            )

        assert coverage(ours) == coverage(theirs), step
        for sql in FILTERS[:4]:
            expected = _rows(theirs, sql, lance.dataset)
            assert _rows(ours, sql, dataset) == expected, (step, sql)
            assert _rows(ours, sql, lance.dataset) == expected, (step, sql)


def test_untrained_and_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "d")
    _write(uri, "point", 500)
    dataset(uri).create_scalar_index("geom", "RTREE", train=False)
    stats = dataset(uri).index_statistics("geom_idx")["indices"][0]
    assert stats["num_items"] == 0 and stats["num_pages"] == 0
    assert _rows(uri, FILTERS[0], dataset) == _rows(uri, FILTERS[0], lance.dataset)
    dataset(uri).optimize.optimize_indices()
    items = dataset(uri).index_statistics("geom_idx")["indices"][0]["num_items"]
    assert items == 500 - len(range(5, 500, 13))  # the NULL geometries are not items
    with pytest.raises(InvalidInputError, match="needs a GeoArrow column"):
        dataset(uri).create_scalar_index("id", "RTREE")


@pytest.mark.parametrize("builder", ["quiver", "pylance"])
def test_stable_row_ids_are_pruned_through_the_rtree(tmp_path: Path, builder: str) -> None:
    """With stable row ids an RTREE holds row ids (each engine writes them so): a spatial
    filter's candidates are the rows holding those ids, wherever updates and compaction
    moved them; answers as pylance's and the unindexed scan's."""
    uri = str(tmp_path / "s")
    _write(uri, "point", 6000, enable_stable_row_ids=True)
    lance.dataset(uri).update({"id": "id + 1000000"}, where="id % 7 = 0 AND id < 3000")
    (dataset if builder == "quiver" else lance.dataset)(uri).create_scalar_index("geom", "RTREE")
    dataset(uri).update({"id": "id + 2000000"}, where="id % 11 = 0 AND id > 3000")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=4000)
    ours = dataset(uri)
    assert ours.has_stable_row_ids
    for sql in FILTERS:
        expected = sorted(
            lance.dataset(uri).to_table(filter=sql, columns=["id"], use_scalar_index=False)
            .column("id").to_pylist()
        )  # fmt: skip
        assert _rows(uri, sql, dataset) == expected, sql
        assert _rows(uri, sql, lance.dataset) == expected, sql
    for sql in (FILTERS[0], FILTERS[1], FILTERS[3], FILTERS[4]):  # (not an OR with `id`)
        pruning = ours.scanner(filter=sql).index_pruning
        assert pruning is not None and pruning.covered, sql
        assert "narrowed by geom_idx" in ours.scanner(filter=sql).explain_plan(True), sql
