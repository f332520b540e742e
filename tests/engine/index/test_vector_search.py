"""Nearest-neighbour search in the engine against pylance 14's `to_table(nearest=...)` on the
same datasets: IVF_FLAT, IVF_PQ and IVF_SQ indices built by pylance with each metric, rows
appended after the index (searched exactly and merged) and deleted rows, with and without
filters, prefilter, refine factors and batches of queries; flat search when no index."""

from __future__ import annotations

import itertools

import lance
import numpy as np
import pyarrow as pa
import pytest
from vectors import DIM, KINDS, METRICS, assert_same_neighbours, build, pylance_nearest

from quiver.format.dataset import dataset
from quiver.format.errors import ColumnNotFoundError, InvalidInputError, UnsupportedFeatureError
from quiver.format.index.vector import search as ivf
from quiver.format.index.vector.ivf import nearest_first

pytestmark = pytest.mark.compat

OPTIONS = [
    {},
    {"columns": ["id"], "with_row_id": True},
    {"filter": "id % 3 = 0"},  # a postfilter: fewer than k rows may remain
    {"filter": "id % 3 = 0", "prefilter": True},
    {"filter": "id < 40", "prefilter": True},  # fewer matching rows than k
    {"filter": "cat = 'c1'", "prefilter": True, "columns": ["cat", "_distance", "id"]},
]
SEARCHES = [
    {"nprobes": 2},
    {"nprobes": 3, "refine_factor": 3},
    {"nprobes": 1, "k": 25},
    {"nprobes": 6},
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """One dataset per index type and metric (indexed, appended to, deleted from)."""
    root = tmp_path_factory.mktemp("vectors")
    return {
        (kind, metric): build(root / f"{kind}_{metric}.lance", kind, metric)
        for kind, metric in itertools.product(KINDS, METRICS)
    }


def queries(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return list(rng.standard_normal((n, DIM)).astype(np.float32))


def compare(uri: str, what: str, **kwargs: object) -> None:
    ours = dataset(uri).to_table(**kwargs)
    assert_same_neighbours(ours, pylance_nearest(uri, **kwargs), what)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("kind", KINDS)
def test_index_search_matches_pylance(indexed, kind: str, metric: str) -> None:
    """Every option with half the searches, a different half for each option (and each
    search with every option across the kinds and metrics)."""
    uri = indexed[(kind, metric)]
    [q] = queries(KINDS.index(kind) * 3 + METRICS.index(metric), 1)
    shift = KINDS.index(kind) + METRICS.index(metric)
    for i, options in enumerate(OPTIONS):
        for search in (SEARCHES[(i + shift) % 4], SEARCHES[(i + shift + 2) % 4]):
            nearest = {"column": "vec", "q": q, "k": 10, **search}
            compare(uri, f"{kind}/{metric} {options} {search}", nearest=nearest, **options)


def test_metric_other_than_the_index_searches_exactly(indexed) -> None:
    uri = indexed[("IVF_PQ", "l2")]
    for q in queries(3, 2):
        for metric in ("cosine", "dot"):
            nearest = {"column": "vec", "q": q, "k": 7, "nprobes": 1, "metric": metric}
            compare(uri, f"metric {metric} on an l2 index", nearest=nearest, columns=["id"])


def test_flat_search_is_exact(tmp_path) -> None:
    uri = build(tmp_path / "flat.lance", None)
    ours = dataset(uri)
    table = ours.to_table(columns=["vec", "id"])
    vectors = np.stack(table.column("vec").to_numpy(zero_copy_only=False)).astype(np.float64)
    ids = table.column("id").to_numpy()
    for q, metric in zip(queries(4, 3), METRICS, strict=True):
        x = q.astype(np.float64)
        if metric == "l2":
            exact = ((vectors - x) ** 2).sum(1)
        elif metric == "dot":
            exact = 1 - vectors @ x
        else:
            exact = 1 - vectors @ x / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(x))
        best = np.argsort(exact, kind="stable")[:12]
        got = ours.to_table(
            nearest={"column": "vec", "q": q, "k": 12, "metric": metric}, columns=["id"]
        )
        assert got.column("id").to_numpy().tolist() == ids[best].tolist(), metric
        assert np.allclose(got.column("_distance").to_numpy(), exact[best], rtol=1e-5, atol=1e-6)
        for options in OPTIONS:
            nearest = {"column": "vec", "q": q, "k": 12, "metric": metric}
            compare(uri, f"flat {metric} {options}", nearest=nearest, **options)


def test_use_index_false_searches_exactly(indexed) -> None:
    uri = indexed[("IVF_SQ", "cosine")]
    for q in queries(5, 2):
        nearest = {"column": "vec", "q": q, "k": 9, "use_index": False, "metric": "cosine"}
        compare(uri, "use_index false", nearest=nearest, filter="id > 100", prefilter=True)


@pytest.mark.parametrize("kind", KINDS)
def test_batches_of_queries_match_pylance(indexed, kind: str) -> None:
    uri = indexed[(kind, "l2")]
    batch = np.stack(queries(6, 5))
    for search in ({"nprobes": 2}, {"nprobes": 2, "refine_factor": 2}, {"use_index": False}):
        for options in ({"columns": ["id"], "with_row_id": True}, {"filter": "id % 2 = 0"}):
            nearest = {"column": "vec", "q": batch, "k": 6, **search}
            compare(uri, f"batch {kind} {search} {options}", nearest=nearest, **options)
    one = dataset(uri).to_table(nearest={"column": "vec", "q": batch[2], "k": 6, "nprobes": 2})
    many = dataset(uri).to_table(nearest={"column": "vec", "q": batch, "k": 6, "nprobes": 2})
    third = many.filter(many.column("query_index").to_numpy() == 2).drop(["query_index"])
    assert third.equals(one)


@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("kind", KINDS)
def test_distance_range_matches_pylance(indexed, kind: str, metric: str) -> None:
    """pylance's `distance_range` (lower <= d < upper): the k nearest rows inside it, by the
    index's distances, again after a refine, exactly for rows no index covers (and with the
    index not used: the same exact search for every kind, run on the first)."""
    uri = indexed[(kind, metric)]
    batch = np.stack(queries(9, 2))
    everything = {"column": "vec", "k": 400, "use_index": False, "metric": metric}
    searches = [{"nprobes": 2}, {"nprobes": 3, "refine_factor": 2}]
    if kind == KINDS[0]:
        searches.append({"use_index": False})
    filters = ({}, {"filter": "id % 3 = 0", "prefilter": True})
    for i, q in enumerate(batch):
        exact = lance.dataset(uri).to_table(nearest={**everything, "q": q}, columns=["id"])
        d = np.sort(exact.column("_distance").to_numpy())
        # bounds halfway between rows, so that no engine's rounding decides a row
        lower, upper = float(d[4] + d[5]) / 2, float(d[40] + d[41]) / 2
        for j, bounds in enumerate(((lower, upper), (None, upper), (lower, None), (upper, lower))):
            for k, search in enumerate(searches):
                options = filters[(i + j + k) % 2]  # each pair of bounds and search meets both
                nearest = {"column": "vec", "q": q, "k": 10, "distance_range": bounds, **search}
                what = f"{kind}/{metric} query {i} {bounds} {search} {options}"
                compare(uri, what, nearest=nearest, **options)
        got = dataset(uri).to_table(
            nearest={**everything, "q": q, "distance_range": (lower, upper)}
        )
        assert got.num_rows == 36  # every row inside: rows 5 to 40 of the exact order
    nearest = {"column": "vec", "q": batch, "k": 6, "nprobes": 2, "distance_range": (lower, None)}
    compare(uri, f"batch {kind}/{metric}", nearest=nearest, columns=["id"])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("kind", KINDS)
def test_threads_and_query_chunks_match_pylance(
    indexed, monkeypatch, kind: str, metric: str
) -> None:
    """The kernel's work cut over threads (within a query too) and queries searched a few at
    a time give pylance's answer."""
    monkeypatch.setattr(ivf, "THREAD_WORK", 1)
    monkeypatch.setattr(ivf, "CHUNK_BYTES", 1)
    uri = indexed[(kind, metric)]
    batch = np.stack(queries(12, 7))
    searches = ({"nprobes": 3}, {"nprobes": 1, "refine_factor": 4}, {"nprobes": 6})
    filters = ({"columns": ["id"]}, {"filter": "id < 60", "prefilter": True})
    shift = KINDS.index(kind) + METRICS.index(metric)
    for i, search_options in enumerate(searches):
        options = filters[(i + shift) % 2]  # each search with each filter across the cases
        nearest = {"column": "vec", "q": batch, "k": 8, **search_options}
        what = f"threads {kind}/{metric} {search_options} {options}"
        compare(uri, what, nearest=nearest, **options)
        nearest = {**nearest, "q": batch[3]}
        compare(uri, f"{what}, one query", nearest=nearest, **options)


def test_nearest_first_is_a_stable_sort() -> None:
    """The partial sort of centroid distances keeps the full stable sort's order, ties by
    partition included (integers make many ties, some across the cut)."""
    rng = np.random.default_rng(13)
    for high in (3, 40):
        dist = rng.integers(0, high, (50, 64)).astype(np.float64)
        for depth in (1, 2, 5, 15, 16, 64):
            expected = np.argsort(dist, axis=1, kind="stable")[:, :depth]
            assert np.array_equal(nearest_first(dist, depth), expected), (high, depth)


@pytest.mark.parametrize("kind", ["IVF_PQ", "IVF_FLAT"])
def test_stable_row_ids(tmp_path, kind: str) -> None:
    uri = build(tmp_path / "stable.lance", kind, "l2", stable=True)
    for q in queries(7, 2):
        for options in OPTIONS[:4]:
            for search in SEARCHES[:2]:
                nearest = {"column": "vec", "q": q, "k": 10, **search}
                compare(uri, f"stable {kind} {options} {search}", nearest=nearest, **options)


def test_index_deltas_and_default_probes(tmp_path) -> None:
    """optimize_indices without merging makes a delta index over the new fragment; both are
    searched (and without nprobes, the default probing)."""
    uri = build(tmp_path / "deltas.lance", "IVF_PQ", "l2", delete=None)
    ds = lance.dataset(uri)
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert len(lance.dataset(uri).list_indices()) == 2
    lance.dataset(uri).delete("id % 13 = 1")
    for q in queries(8, 3):
        for search in ({"nprobes": 2}, {}, {"minimum_nprobes": 2}, {"refine_factor": 2}):
            for options in ({}, {"filter": "id < 30", "prefilter": True}):
                nearest = {"column": "vec", "q": q, "k": 10, **search}
                compare(uri, f"deltas {search} {options}", nearest=nearest, **options)


def test_scanner_and_batches_carry_the_search(indexed) -> None:
    uri = indexed[("IVF_FLAT", "dot")]
    q = queries(9, 1)[0]
    nearest = {"column": "vec", "q": q, "k": 5, "nprobes": 2}
    ds = dataset(uri)
    scanner = ds.scanner(nearest=nearest, columns=["id"], filter="id > 10", prefilter=True)
    table = scanner.to_table()
    assert scanner.projected_schema == table.schema
    batches = ds.to_batches(nearest=nearest, columns=["id"], filter="id > 10", prefilter=True)
    assert sum(b.num_rows for b in batches) == table.num_rows == 5
    limited = ds.to_table(nearest=nearest, columns=["id"], limit=2, offset=1)
    assert limited.equals(table.slice(1, 2)) or limited.num_rows == 2


def test_bad_requests_name_what_is_wrong(indexed) -> None:
    ds = dataset(indexed[("IVF_PQ", "l2")])
    q = queries(10, 1)[0]
    cases = [
        ({"column": "nope", "q": q}, ColumnNotFoundError, "nope"),
        ({"column": "id", "q": q}, InvalidInputError, "not a vector"),
        ({"column": "vec", "q": q[:5]}, InvalidInputError, "5 values"),
        ({"column": "vec", "q": q, "k": 0}, InvalidInputError, "k must be >= 1"),
        ({"column": "vec", "q": q, "nprobes": 0}, InvalidInputError, "nprobes"),
        ({"column": "vec", "q": q, "refine_factor": 0}, InvalidInputError, "refine_factor"),
        ({"column": "vec", "q": q, "metric": "manhattan"}, InvalidInputError, "manhattan"),
        ({"column": "vec", "q": q, "metric": "hamming"}, UnsupportedFeatureError, "hamming"),
        ({"column": "vec", "q": q, "nprobs": 2}, InvalidInputError, "nprobs"),
        ({"column": "vec", "q": "abc"}, InvalidInputError, "'q'"),
        ({"column": "vec"}, InvalidInputError, "'q'"),
        (
            {"column": "vec", "q": q, "minimum_nprobes": 3, "maximum_nprobes": 2},
            InvalidInputError,
            "minimum_nprobes",
        ),
        ({"column": "vec", "q": q, "distance_range": (1.0,)}, InvalidInputError, "lower_bound"),
        ({"column": "vec", "q": q, "distance_range": ("a", 1)}, InvalidInputError, "numbers"),
        ({"column": "vec", "q": q, "distance_range": (float("nan"), 1)}, InvalidInputError, "NaN"),
    ]
    for nearest, error, text in cases:
        with pytest.raises(error, match=text) as info:
            ds.to_table(nearest=nearest)
        assert ds.uri in str(info.value), str(info.value)


def test_multivector_columns_searched_as_pylance(tmp_path) -> None:
    """A column of lists of vectors: a row's distance is, summed over the query's vectors,
    the distance to its nearest vector; null and empty rows never come back, and an index
    left aside (use_index=False) is searched exactly (indices: test_multivector_index.py)."""
    rng = np.random.default_rng(41)
    vectors = [
        rng.standard_normal((int(rng.integers(0, 5)), DIM)).astype(np.float32) for _ in range(400)
    ]
    rows = [None if i % 37 == 0 else v.tolist() for i, v in enumerate(vectors)]
    uri = str(tmp_path / "multi.lance")
    table = pa.table(
        {"id": range(400), "mv": pa.array(rows, pa.list_(pa.list_(pa.float32(), DIM)))}
    )
    lance.write_dataset(table, uri, max_rows_per_file=150)
    q = rng.standard_normal((3, DIM)).astype(np.float32)
    for metric in METRICS:
        for options in ({}, {"filter": "id % 3 = 0", "prefilter": True}, {"filter": "id < 200"}):
            nearest = {"column": "mv", "q": q, "k": 9, "metric": metric}
            compare(
                uri, f"multivector {metric} {options}", nearest=nearest, columns=["id"], **options
            )
    ranged = {"column": "mv", "q": q[0], "k": 9, "distance_range": (1.0, None)}
    compare(uri, "one query vector, a range", nearest=ranged, columns=["id"])
    assert "query_index" not in dataset(uri).to_table(nearest={"column": "mv", "q": q}).schema.names
    lance.dataset(uri).create_index("mv", "IVF_FLAT", num_partitions=2, metric="cosine")
    exact = {"column": "mv", "q": q, "k": 5, "use_index": False, "metric": "cosine"}
    compare(uri, "multivector, index left aside", nearest=exact, columns=["id"])


@pytest.mark.parametrize("metric", METRICS)
def test_default_probing_picks_pylance_s_partitions(tmp_path, metric: str) -> None:
    """Without nprobes, the partitions probed are pylance 14's (a ratio of the nearest
    centroid's distance, within bounds, by k; every partition for dot): on 48 partitions, for
    queries near and far from the data and k of each bucket, the same rows as pylance (for
    cosine, whose bounds are measured less surely, at least as near rows, and the same rows
    for nearly every query)."""
    rng = np.random.default_rng(4)
    n, dim = 24_000, 8
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    uri = str(tmp_path / "p.lance")
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        }
    )
    lance.write_dataset(table, uri).create_index(
        "vec", "IVF_FLAT", num_partitions=48, metric=metric
    )
    agreed = 0
    for i, q in enumerate(rng.standard_normal((12, dim)).astype(np.float32)):
        q = q * (0.2, 1.0, 4.0)[i % 3]
        for k in (1, 4, 15):
            nearest = {"column": "vec", "q": q, "k": k}
            ours = dataset(uri).to_table(nearest=nearest, columns=["id"])
            theirs = lance.dataset(uri).to_table(nearest=nearest, columns=["id"])
            same = ours.column("id").to_pylist() == theirs.column("id").to_pylist()
            if metric != "cosine":
                assert same, (i, k)
                continue
            agreed += same
            a, b = ours.column("_distance").to_numpy(), theirs.column("_distance").to_numpy()
            assert len(a) == len(b) and (a <= b + 1e-6).all(), (i, k)
    assert metric != "cosine" or agreed >= 34, agreed  # of 36


def test_the_comparison_forgives_ties_only() -> None:
    """`assert_same_neighbours` takes rows of one distance in either order, and another row
    of the last distance at the end (a tie past k), nothing else."""

    def result(ids: list[int], distances: list[float]) -> pa.Table:
        return pa.table({"id": ids, "_distance": pa.array(distances, pa.float32())})

    ref = result([1, 2, 3, 4], [0.5, 1.0, 1.0, 2.0])
    assert_same_neighbours(result([1, 3, 2, 4], [0.5, 1.0, 1.0, 2.0]), ref, "tie swapped")
    assert_same_neighbours(result([1, 2, 3, 9], [0.5, 1.0, 1.0, 2.0000001]), ref, "tie past k")
    for ids, distances in (
        ([2, 1, 3, 4], [0.5, 1.0, 1.0, 2.0]),  # rows of different distances swapped
        ([1, 2, 9, 4], [0.5, 1.0, 1.0, 2.0]),  # another row inside the results
        ([1, 2, 3, 9], [0.5, 1.0, 1.0, 2.0001]),  # a nearer row than the last one missed
    ):
        with pytest.raises(AssertionError):
            assert_same_neighbours(result(ids, distances), ref, "wrong")
