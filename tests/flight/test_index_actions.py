"""Index builds over Flight: the `create_index` and `drop_index` actions build and drop in
the server what the engine's `create_scalar_index` / `drop_index` do, seen by pylance as its
own indices and used by Quiver's pruned reads; bad requests get their codes."""

from __future__ import annotations

import json
from pathlib import Path

import flight_helpers
import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.clients import Client
from quiver.clients.errors import InvalidArgument, NotFound

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "cat": pa.array([f"c{i % 4}" for i in range(n)]),
            "v": pa.array([[1.0, 2.0]] * n, pa.list_(pa.float32(), 2)),
        }
    )


def test_build_use_and_drop_over_flight(served, name) -> None:
    path = served.path(name)
    lance.write_dataset(_rows(20_000), path, max_rows_per_file=5_000)
    with Client(served.uri) as qc:
        done = qc.create_index(name, "id", "BTREE")
        assert done == {"version": 2, "name": "id_idx"}
        assert qc.create_index(name, "cat", "bitmap", name="by_cat")["name"] == "by_cat"
        indices = {i["name"]: i["type"] for i in lance.dataset(path).list_indices()}
        assert indices == {"id_idx": "BTree", "by_cat": "Bitmap"}
        # the index prunes: one fragment's endpoint for a point read
        info = qc.flight_info(name, filter="id = 12345")
        assert len(info.endpoints) == 1
        assert qc.read(name, filter="id = 12345").column("id").to_pylist() == [12345]
        assert qc.read(name, filter="cat = 'c1'").num_rows == 5_000
        ds = lance.dataset(path)
        assert ds.to_table(filter="cat = 'c1'").num_rows == 5_000
        assert qc.optimize_indices(name) == {"version": 3, "optimized": False}
        qc.write(name, _rows(100))  # a fragment no index covers
        assert qc.optimize_indices(name, index_names=["id_idx"]) == {
            "version": 5,
            "optimized": True,
        }
        segments = {
            i["name"]: sorted(i["fragment_ids"]) for i in lance.dataset(path).list_indices()
        }
        assert segments == {"id_idx": [0, 1, 2, 3, 4], "by_cat": [0, 1, 2, 3]}
        assert qc.read(name, filter="id = 50").num_rows == 2
        assert qc.drop_index(name, "by_cat")["version"] == 6
        assert [i["name"] for i in lance.dataset(path).list_indices()] == ["id_idx"]


def test_deferred_compaction_over_flight(served, name) -> None:
    """`compact` with `defer_index_remap` leaves the BTREE as it is and records the moves:
    reads over Flight are still narrowed by it (one endpoint), and pylance reads the same
    rows through its fragment reuse index."""
    path = served.path(name)
    lance.write_dataset(_rows(20_000), path, max_rows_per_file=5_000)
    with Client(served.uri) as qc:
        qc.create_index(name, "id", "BTREE")
        qc.delete(name, "id % 4 = 0")
        done = qc.compact(name, defer_index_remap=True)
        assert done["fragments_removed"] == 4 and done["fragments_added"] == 1
        ds = lance.dataset(path)
        assert [d.name for d in ds.describe_indices()] == ["__lance_frag_reuse", "id_idx"]
        assert len(qc.flight_info(name, filter="id = 12345").endpoints) == 1
        assert qc.read(name, filter="id in (12344, 12345)").column("id").to_pylist() == [12345]
        assert ds.to_table(filter="id in (12344, 12345)")["id"].to_pylist() == [12345]
        with pytest.raises(InvalidArgument, match="defer_index_remap"):
            qc.compact(name, defer_index_remap="yes")  # type: ignore[arg-type]


def test_rtree_index_over_flight(served, name) -> None:
    """An RTREE built over Flight is pylance's, and narrows spatial reads to the fragment
    holding the box's points (one endpoint)."""
    path = served.path(name)
    xs = np.arange(20_000, dtype=np.float64)
    points = pa.StructArray.from_arrays([pa.array(xs), pa.array(xs / 2)], names=["x", "y"])
    geom = pa.field("geom", points.type, metadata={"ARROW:extension:name": "geoarrow.point"})
    table = pa.Table.from_arrays(
        [pa.array(np.arange(20_000)), points],
        schema=pa.schema([pa.field("id", pa.int64()), geom]),
    )
    lance.write_dataset(table, path, max_rows_per_file=5_000)
    with Client(served.uri) as qc:
        assert qc.create_index(name, "geom", "RTREE") == {"version": 2, "name": "geom_idx"}
        [index] = lance.dataset(path).describe_indices()
        assert index.index_type == "RTree"
        box = "POLYGON((100 40, 110 40, 110 60, 100 60, 100 40))"
        sql = f"st_intersects(geom, st_geomfromtext('{box}'))"
        assert len(qc.flight_info(name, filter=sql).endpoints) == 1
        assert qc.read(name, filter=sql).column("id").to_pylist() == list(range(100, 111))
        assert lance.dataset(path).to_table(filter=sql)["id"].to_pylist() == list(range(100, 111))


def test_ngram_index_over_flight(served, name) -> None:
    """An NGRAM index built over Flight is pylance's, and narrows `contains` reads to the
    fragments holding the needle's trigrams."""
    path = served.path(name)
    texts = [f"row {i} plain words" for i in range(20_000)]
    texts[12_345] = "row 12345 holds a rarewordx"
    table = pa.table({"id": np.arange(20_000, dtype=np.int64), "text": texts})
    lance.write_dataset(table, path, max_rows_per_file=5_000)
    with Client(served.uri) as qc:
        assert qc.create_index(name, "text", "NGRAM") == {"version": 2, "name": "text_idx"}
        [index] = lance.dataset(path).list_indices()
        assert index["type"] == "NGram" and index["fragment_ids"] == {0, 1, 2, 3}
        sql = "contains(text, 'rarewordx')"
        assert len(qc.flight_info(name, filter=sql).endpoints) == 1
        assert qc.read(name, filter=sql).column("id").to_pylist() == [12_345]
        assert "ScalarIndexQuery" in lance.dataset(path).scanner(filter=sql).explain_plan()


def test_bloom_filter_index_over_flight(served, name) -> None:
    """A BLOOMFILTER built over Flight is pylance's, narrows equality reads to the zones
    that may hold the value, and is kept up to date by optimize_indices."""
    path = served.path(name)
    table = pa.table(
        {"id": np.arange(40_000, dtype=np.int64), "key": [f"k{i}" for i in range(40_000)]}
    )
    lance.write_dataset(table, path, max_rows_per_file=10_000)
    with Client(served.uri) as qc:
        assert qc.create_index(name, "key", "BLOOMFILTER") == {"version": 2, "name": "key_idx"}
        [index] = lance.dataset(path).list_indices()
        assert index["type"] == "BloomFilter" and index["fragment_ids"] == {0, 1, 2, 3}
        sql = "key = 'k23456'"
        assert len(qc.flight_info(name, filter=sql).endpoints) == 1
        assert qc.read(name, filter=sql).column("id").to_pylist() == [23_456]
        qc.write(name, pa.table({"id": [-1], "key": ["extra"]}))
        qc.optimize_indices(name)
        [index] = lance.dataset(path).list_indices()
        assert index["fragment_ids"] == {0, 1, 2, 3, 4}
        assert qc.read(name, filter="key = 'extra'").column("id").to_pylist() == [-1]


def test_bad_index_requests_get_their_codes(served, name) -> None:
    lance.write_dataset(_rows(100), served.path(name))
    with Client(served.uri) as qc:
        with pytest.raises(InvalidArgument, match="index type"):
            qc.create_index(name, "id", "FOO")
        with pytest.raises(InvalidArgument, match="RTREE index needs a GeoArrow column"):
            qc.create_index(name, "cat", "RTREE")
        with pytest.raises(InvalidArgument, match="NGRAM index needs a text column"):
            qc.create_index(name, "id", "NGRAM")
        with pytest.raises(InvalidArgument, match="nope"):
            qc.create_index(name, "nope", "BTREE")
        with pytest.raises(InvalidArgument, match="scalar values"):
            qc.create_index(name, "v", "BTREE")
        with pytest.raises(NotFound):
            qc.create_index(f"{name}_missing", "id", "BTREE")
        with pytest.raises(NotFound, match="nothing"):
            qc.drop_index(name, "nothing")
        with pytest.raises(InvalidArgument):
            qc.action("create_index", {"dataset": name, "column": "id"})  # no index_type
    assert lance.dataset(served.path(name)).list_indices() == []


def _vectors(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 8)).astype(np.float32)
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64) + seed * 100_000,
            "v": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 8),
        }
    )


def test_vector_index_builds_over_flight_report_progress(served, name) -> None:
    path = served.path(name)
    lance.write_dataset(_vectors(6_000), path, max_rows_per_file=2_000)
    stages: list[dict] = []
    budget = served.server.budget
    admitted = budget.admitted_total
    with Client(served.uri) as qc:
        done = qc.create_index(
            name,
            "v",
            "IVF_PQ",
            num_partitions=4,
            num_sub_vectors=4,
            metric="cosine",
            progress=stages.append,
        )
        assert done == {"version": 2, "name": "v_idx"}
        # the build held its memory in the server's budget, beside streams, and let it go
        assert budget.admitted_total == admitted + 1 and budget.in_use == 0
        assert budget.peak >= 6_000 * 8 * 4
        names = [s["stage"] for s in stages]
        assert list(dict.fromkeys(names))[:3] == ["sample", "train", "encode"]
        assert names[-2:] == ["write", "commit"]
        # training reports each part: the centroids, then the 4 sub-vectors' codebooks
        trained = [(s.get("done"), s.get("total")) for s in stages if s["stage"] == "train"]
        assert trained == [(None, None), *((i, 5) for i in range(1, 6))]
        encoded = [s for s in stages if s["stage"] == "encode"]
        assert encoded[-1]["done"] == encoded[-1]["total"] == 6_000
        [idx] = lance.dataset(path).list_indices()
        assert idx["type"] == "IVF_PQ"
        stats = lance.dataset(path).stats.index_stats("v_idx")["indices"][0]
        assert stats["metric_type"] == "cosine" and stats["num_partitions"] == 4
        q = _vectors(1, seed=7).column("v").to_pylist()[0]
        ours = qc.nearest(name, "v", q, k=5, nprobes=2, metric="cosine")
        theirs = lance.dataset(path).to_table(
            nearest={"column": "v", "q": q, "k": 5, "nprobes": 2, "metric": "cosine"}
        )
        assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()
        # centroids given as JSON arrays; without progress one result
        centroids = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
        done = qc.create_index(name, "v", "IVF_FLAT", name="flat", ivf_centroids=centroids)
        assert done["name"] == "flat"
        qc.write(name, _vectors(500, seed=1))
        coverage = qc.describe(name)["index_coverage"]
        assert coverage == {
            n: {"segments": 1, "unindexed_fragments": [3], "unindexed_rows": 500}
            for n in ("v_idx", "flat")
        }
        stages.clear()
        assert qc.optimize_indices(name, index_names=["v_idx"], progress=stages.append) == {
            "version": 5,
            "optimized": True,
        }
        assert [s["stage"] for s in stages] == ["encode"] * (len(stages) - 1) + ["write"]
        assert qc.optimize_indices(name, retrain=True)["optimized"]
        assert qc.describe(name)["index_coverage"]["flat"] == {
            "segments": 1,
            "unindexed_fragments": [],
            "unindexed_rows": 0,
        }
        for idx in lance.dataset(path).list_indices():
            assert sorted(idx["fragment_ids"]) == [0, 1, 2, 3]


def test_hnsw_index_built_and_searched_over_flight(served, name) -> None:
    """An IVF_HNSW_SQ index built by the create_index action with its graph options, then
    searched with `ef`: pylance's answers on the same index; ef below k is refused."""
    path = served.path(name)
    lance.write_dataset(_vectors(3_000), path, max_rows_per_file=1_000)
    with Client(served.uri) as qc:
        stages: list[dict] = []
        done = qc.create_index(
            name, "v", "IVF_HNSW_SQ", num_partitions=2, m=8, ef_construction=40,
            progress=stages.append,
        )  # fmt: skip
        assert done == {"version": 2, "name": "v_idx"}
        assert "graphs" in [s["stage"] for s in stages]
        sub = lance.dataset(path).stats.index_stats("v_idx")["indices"][0]["sub_index"]
        assert sub["index_type"] == "HNSW" and sub["params"]["m"] == 8
        for seed in (7, 8):
            q = _vectors(1, seed=seed).column("v").to_pylist()[0]
            for options in ({"k": 5}, {"k": 5, "ef": 30, "nprobes": 1}):
                ours = qc.nearest(name, "v", q, **options)
                theirs = lance.dataset(path).to_table(nearest={"column": "v", "q": q, **options})
                assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()
        with pytest.raises(InvalidArgument, match="ef .3. must be greater than or equal to k"):
            qc.nearest(name, "v", q, k=5, ef=3)


def test_untrained_indices_over_flight(served, name) -> None:
    """`train: false` builds an index of no rows (vector and scalar), which the
    optimize_indices action trains over every row, as pylance's engine does."""
    path = served.path(name)
    lance.write_dataset(_vectors(2_000), path, max_rows_per_file=1_000)
    with Client(served.uri) as qc:
        qc.create_index(name, "v", "IVF_HNSW_SQ", num_partitions=2, train=False)
        qc.create_index(name, "id", "BTREE", train=False)
        stats = lance.dataset(path).stats
        assert stats.index_stats("v_idx")["index_type"] == "N/A"
        assert stats.index_stats("id_idx")["num_indexed_rows"] == 0
        q = _vectors(1, seed=3).column("v").to_pylist()[0]
        exact = lance.dataset(path).to_table(nearest={"column": "v", "q": q, "k": 4})
        assert qc.nearest(name, "v", q, k=4).column("id") == exact.column("id")
        assert qc.optimize_indices(name)["optimized"]
        stats = lance.dataset(path).stats
        assert stats.index_stats("v_idx")["num_indexed_rows"] == 2_000
        assert stats.index_stats("id_idx")["num_indexed_rows"] == 2_000
        assert lance.dataset(path).stats.index_stats("v_idx")["index_type"] == "IVF_HNSW_SQ"


def test_rq_index_built_and_searched_over_flight(served, name) -> None:
    """An IVF_RQ index built by the create_index action with a given rotation
    (`rabitq_model`): pylance's answers on it."""
    import json

    from lance.lance import indices

    model = indices.build_rq_model(8, num_bits=3, dtype="float32")
    path = served.path(name)
    lance.write_dataset(_vectors(2_000), path, max_rows_per_file=1_000)
    with Client(served.uri) as qc:
        built = qc.create_index(
            name, "v", "IVF_RQ", num_partitions=2, num_bits=3, rabitq_model=model
        )
        assert built == {"version": 2, "name": "v_idx"}
        stats = lance.dataset(path).stats.index_stats("v_idx")
        assert stats["index_type"] == "IVF_RQ"
        signs = stats["indices"][0]["sub_index"]["fast_rotation_signs"]
        assert signs == json.loads(model)["fast_rotation_signs"]
        for seed in (7, 8):
            q = _vectors(1, seed=seed).column("v").to_pylist()[0]
            ours = qc.nearest(name, "v", q, k=5, nprobes=2)
            theirs = lance.dataset(path).to_table(
                nearest={"column": "v", "q": q, "k": 5, "nprobes": 2}, columns=["id"]
            )
            assert ours.column("id").to_pylist() == theirs.column("id").to_pylist()


def test_bad_vector_index_requests_get_their_codes(served, name) -> None:
    lance.write_dataset(_vectors(300), served.path(name))
    with Client(served.uri) as qc:
        with pytest.raises(InvalidArgument, match="num_sub_vectors are required"):
            qc.create_index(name, "v", "IVF_PQ", progress=lambda _: None)
        with pytest.raises(InvalidArgument, match="divisible"):
            qc.create_index(name, "v", "IVF_PQ", num_sub_vectors=3)
        with pytest.raises(InvalidArgument, match="metric"):
            qc.create_index(name, "v", "IVF_FLAT", metric="hamming")
        with pytest.raises(InvalidArgument, match="IVF_RQ num_bits must be in 1..=9"):
            qc.create_index(name, "v", "IVF_RQ", num_bits=12)
        with pytest.raises(InvalidArgument, match="vector indices"):
            qc.action(
                "create_index",
                {"dataset": name, "column": "id", "index_type": "BTREE", "num_partitions": 2},
            )
        with pytest.raises(InvalidArgument, match="arrays of numbers"):
            qc.action(
                "create_index",
                {
                    "dataset": name,
                    "column": "v",
                    "index_type": "IVF_FLAT",
                    "ivf_centroids": [[1, 2], [3]],
                },
            )
        with pytest.raises(InvalidArgument, match="progress"):
            qc.action(
                "create_index",
                {"dataset": name, "column": "v", "index_type": "IVF_FLAT", "progress": "yes"},
            )
    assert lance.dataset(served.path(name)).list_indices() == []


def test_a_cancelled_build_commits_nothing(served, name) -> None:
    """A client whose call ends (here its deadline) while the build trains stops it at its
    next stage: no version, no index file left."""
    import threading
    import time

    import pyarrow.flight as fl

    path = served.path(name)
    rng = np.random.default_rng(3)
    v = rng.normal(size=(70_000, 64)).astype(np.float32)
    table = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 64)})
    lance.write_dataset(table, path)
    body = {
        "dataset": name,
        "column": "v",
        "index_type": "IVF_PQ",
        "num_partitions": 8,
        "num_sub_vectors": 32,
        "progress": True,
    }
    client = fl.connect(served.uri)
    seen = []
    with pytest.raises(fl.FlightError):  # the deadline passes while it trains
        options = fl.FlightCallOptions(timeout=1.0)
        action = fl.Action("create_index", json.dumps(body).encode())
        for result in client.do_action(action, options):
            seen.append(json.loads(result.body.to_pybytes()))
    assert seen and seen[0]["progress"]["stage"] == "sample"
    deadline = time.monotonic() + 120
    # the server runs in this process: its build thread ends at the build's next stage
    while any(t.name == "quiver-action" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the build did not stop"
        time.sleep(0.2)
    indices = Path(path) / "_indices"
    assert lance.dataset(path).version == 1
    assert lance.dataset(path).list_indices() == []
    assert not (indices.exists() and any(f.is_file() for f in indices.rglob("*")))
