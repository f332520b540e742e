"""IVF_HNSW_FLAT, IVF_HNSW_SQ and IVF_HNSW_PQ indices, read and built.

pylance 14's indices are searched as pylance searches them: the same graph walk (entry point,
greedy descent, the bottom level keeping `ef` nodes), so the same rows in the same order for
every metric, `k`, `nprobes`, `ef`, refine factor, prefilter (a sparse one scans the partition
instead, as pylance does) and postfilter, after deletions. Indices Quiver builds are pylance's
own: pylance lists, describes and reports them as its own, searches them with Quiver's
answers, at a recall close to that of the index it builds itself. Both stay right through
appends, deletes, `optimize_indices` and compaction by either engine.
"""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import quiver
from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.index.vector.hnsw import read_graph
from quiver.format.index.vector.index import open_vector_index
from quiver.format.io.store import open_store
from quiver.format.proto import index_pb2
from quiver.format.table.indices import indices_of

DIM = 16
ROWS = 3000
KINDS = ("IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ")
METRICS = ("l2", "cosine", "dot")


def _table(n: int = ROWS, start: int = 0, seed: int = 0) -> pa.Table:
    """Clustered vectors, as embeddings are."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, DIM)).astype(np.float32) * 2
    v = centres[rng.integers(0, 12, n)] + rng.normal(size=(n, DIM)).astype(np.float32)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)
    return pa.table({"id": pa.array(np.arange(start, start + n)), "v": vec})


def _queries(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32) * 2


def _options(kind: str, metric: str) -> dict:
    extra = {"num_sub_vectors": 4} if kind.endswith("PQ") else {}
    return {"metric": metric, "num_partitions": 3, **extra}


def _same(path: str, nearest: dict, **kw: object) -> None:
    """Quiver's and pylance's searches agree: the same rows in the same order (rows of equal
    distance in either order), distances within 1e-4 relative."""
    ours = quiver.dataset(path).to_table(nearest=nearest, columns=["id"], **kw)
    theirs = lance.dataset(path).to_table(nearest=nearest, columns=["id"], **kw)
    a, b = ours.column("_distance").to_numpy(), theirs.column("_distance").to_numpy()
    what = f"{ {k: v for k, v in nearest.items() if k != 'q'} } {kw}"
    assert len(a) == len(b), what
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=what)
    assert _by_distance(ours) == _by_distance(theirs), what


def _by_distance(result: pa.Table) -> list[set[int]]:
    groups: dict[float, set[int]] = {}
    ids, dists = result.column("id").to_pylist(), result.column("_distance").to_pylist()
    for i, d in zip(ids, dists, strict=True):
        groups.setdefault(round(d, 3), set()).add(i)
    return [groups[d] for d in sorted(groups)]


def _searches(path: str, queries: np.ndarray) -> None:
    """Every search option through both engines."""
    for q in queries:
        base = {"column": "v", "q": q}
        _same(path, {**base, "k": 10})
        _same(path, {**base, "k": 5, "nprobes": 2})
        _same(path, {**base, "k": 10, "ef": 40})
        _same(path, {**base, "k": 10, "refine_factor": 2})
        _same(path, {**base, "k": 10}, filter="id < 1500", prefilter=True)
        _same(path, {**base, "k": 10}, filter="id < 150", prefilter=True)  # scanned, not walked
        _same(path, {**base, "k": 10}, filter="id % 3 = 1")


def _recall(path: str, metric: str, queries: np.ndarray) -> float:
    ds = lance.dataset(path)
    hits = 0
    for q in queries:
        nearest = {"column": "v", "q": q, "k": 10, "metric": metric}
        got = ds.to_table(nearest=nearest, columns=["id"]).column("id").to_pylist()
        exact = ds.to_table(nearest={**nearest, "use_index": False}, columns=["id"])
        hits += len(set(got) & set(exact.column("id").to_pylist()))
    return hits / (10 * len(queries))


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("kind", KINDS)
def test_both_engines_search_either_engine_s_index_alike(
    tmp_path: Path, kind: str, metric: str
) -> None:
    theirs, ours = str(tmp_path / "pylance.lance"), str(tmp_path / "quiver.lance")
    for path in (theirs, ours):
        lance.write_dataset(_table(), path, max_rows_per_file=1000)
    lance.dataset(theirs).create_index("v", kind, **_options(kind, metric))
    quiver.dataset(ours).create_index("v", kind, seed=3, **_options(kind, metric))
    for path in (theirs, ours):
        lance.dataset(path).delete("id % 11 = 4")
        _searches(path, _queries(4))
    # Quiver's index is pylance's own: listed, described and reported alike
    described = [lance.dataset(p).describe_indices()[0] for p in (theirs, ours)]
    assert [(d.name, d.field_names) for d in described] == [("v_idx", ["v"])] * 2
    stats = [lance.dataset(p).stats.index_stats("v_idx") for p in (theirs, ours)]
    assert [s["index_type"] for s in stats] == [kind] * 2
    assert [s["indices"][0]["sub_index"].keys() for s in stats] == [
        stats[0]["indices"][0]["sub_index"].keys()
    ] * 2
    # (SQ bounds aside: pylance's JSON parser reads some of them a unit in the last place off)
    ours_stats = quiver.dataset(ours).stats.index_stats("v_idx")
    for s in (ours_stats, stats[1]):
        for segment in s["indices"] + s["segments"]:
            segment["sub_index"].pop("bounds", None)
    assert ours_stats == stats[1]
    # graphs and codebooks are trained at random in both engines: over 40 queries the two
    # recalls differ from build to build with a spread (sd) of about 0.03
    queries = _queries(40, seed=11)
    assert _recall(ours, metric, queries) >= _recall(theirs, metric, queries) - 0.1


def test_files_and_commit_as_pylance_writes_them(tmp_path: Path) -> None:
    theirs, ours = str(tmp_path / "pylance.lance"), str(tmp_path / "quiver.lance")
    for path in (theirs, ours):
        lance.write_dataset(_table(), path)
    options = {"num_partitions": 2, "num_sub_vectors": 4}
    lance.dataset(theirs).create_index("v", "IVF_HNSW_PQ", **options)
    quiver.dataset(ours).create_index(
        "v", "IVF_HNSW_PQ", m=12, ef_construction=60, max_level=5, **options
    )
    files = {}
    for who, path in (("pylance", theirs), ("quiver", ours)):
        ds = lance.dataset(path)
        op = ds.read_transaction(ds.version).operation
        [segment] = op.new_indices
        store = open_store(path)
        with IndexFile(store, f"_indices/{segment.uuid}/index.idx") as f:
            files[who] = (f.schema.to_arrow(), dict(f.metadata), f.num_rows)
    (schema_a, meta_a, _), (schema_b, meta_b, rows_b) = files["pylance"], files["quiver"]
    assert rows_b > ROWS  # every row on the bottom level, and some above
    assert schema_a.remove_metadata() == schema_b.remove_metadata()
    assert meta_a.keys() == meta_b.keys()
    # the details name the graph parameters: pylance's defaults, or those given
    details = []
    for path in (theirs, ours):
        [entry] = indices_of(quiver.dataset(path)._core.manifest)
        details.append(index_pb2.VectorIndexDetails.FromString(entry.details))
    assert (details[0].hnsw.m, details[0].hnsw.ef_construction, details[0].hnsw.max_level) == (
        20,
        150,
        7,
    )
    assert (details[1].hnsw.m, details[1].hnsw.ef_construction, details[1].hnsw.max_level) == (
        12,
        60,
        5,
    )
    assert details[0].runtime_hints.keys() == details[1].runtime_hints.keys()
    # every list within its bounds: 2m on the bottom level, m above, on max_level levels
    stats = lance.dataset(ours).stats.index_stats("v_idx")["indices"][0]
    sub = stats["sub_index"]
    assert sub["params"] == {"max_level": 5, "m": 12, "ef_construction": 60, "prefetch_distance": 2}
    assert len(sub["level_offsets"]) == 6
    index = open_vector_index(open_store(ours), f"_indices/{stats['uuid']}", stats["uuid"], "v")
    for p in range(2):
        graph = index.partition(p).graph
        sizes = np.diff(graph.offsets)
        bottom = graph.rows[0]
        above = graph.rows[1:][graph.rows[1:] >= 0]
        assert 1 <= sizes[bottom].min() and sizes[bottom].max() <= 24
        assert sizes[above].max(initial=0) <= 12 and graph.rows.shape[0] <= 5
        assert (graph.rows[:, graph.entry] >= 0).all()  # the entry point is on every level


@pytest.mark.parametrize("builder", ["pylance", "quiver"])
def test_indices_stay_right_through_writes_of_both_engines(tmp_path: Path, builder: str) -> None:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(_table(), path, max_rows_per_file=600)
    engine = lance if builder == "pylance" else quiver
    engine.dataset(path).create_index("v", "IVF_HNSW_SQ", num_partitions=3)
    queries = _queries(3, seed=5)
    quiver.dataset(path).delete("id % 5 = 0")
    lance.dataset(path).insert(_table(800, start=ROWS, seed=1))
    _searches(path, queries[:1])
    quiver.dataset(path).optimize.optimize_indices()
    _searches(path, queries[1:2])
    quiver.dataset(path).optimize.compact_files(target_rows_per_fragment=2000)
    _searches(path, queries[2:])
    lance.dataset(path).delete("id % 7 = 0")
    lance.dataset(path).optimize.compact_files(target_rows_per_fragment=4000)
    _searches(path, queries[:1])
    stats = lance.dataset(path).stats.index_stats("v_idx")
    assert stats["num_unindexed_rows"] == 0
    assert stats["num_indexed_rows"] == quiver.dataset(path).count_rows()


def test_ef_below_k_is_refused_as_pylance_refuses_it(tmp_path: Path) -> None:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(_table(600), path)
    lance.dataset(path).create_index("v", "IVF_HNSW_FLAT", num_partitions=1)
    q = _queries(1)[0]
    for nearest in ({"k": 10, "ef": 5}, {"k": 10, "ef": 12, "refine_factor": 2}):
        nearest = {"column": "v", "q": q, **nearest}
        with pytest.raises(Exception, match="ef must be greater than or equal to k"):
            lance.dataset(path).to_table(nearest=nearest)
        with pytest.raises(InvalidInputError, match="ef .* must be greater than or equal to k"):
            quiver.dataset(path).to_table(nearest=nearest)
    with pytest.raises(InvalidInputError, match="m must be a positive integer"):
        quiver.dataset(path).create_index("v", "IVF_HNSW_SQ", name="x", m=0)


def test_a_graph_naming_rows_past_its_partition_is_refused() -> None:
    table = pa.table(
        {
            "__vector_id": pa.array([0, 1], pa.uint32()),
            "__neighbors": pa.array([[1], [7]], pa.list_(pa.uint32())),
        }
    )
    meta = {"entry_point": 0, "level_offsets": [0, 2]}
    with pytest.raises(CorruptFileError, match="past its 2 rows"):
        read_graph(table, meta, 2, "index.idx")
    with pytest.raises(CorruptFileError, match="do not fit"):
        read_graph(table, {"entry_point": 5, "level_offsets": [0, 2]}, 2, "index.idx")
    both = pa.table(
        {
            "__vector_id": pa.array([0, 1, 1], pa.uint32()),
            "__neighbors": pa.array([[1], [0], []], pa.list_(pa.uint32())),
        }
    )
    good = read_graph(both, {"entry_point": 1, "level_offsets": [0, 2, 3, 3]}, 2, "x")
    assert good.rows.tolist() == [[0, 1], [-1, 2]]  # the empty third level is not kept
    assert good.offsets.tolist() == [0, 1, 2, 2] and good.neighbors.tolist() == [1, 0]
