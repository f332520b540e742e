"""Vector indices of multivector columns (lists of vectors, as ColBERT-style embeddings store
them), against pylance 14: its indices searched with its answers (each query vector's
entries scored as pylance scores them, XTR), Quiver's indices built with pylance's entries
and searched by pylance with Quiver's answers, through appends, deletions, filters, refine
factors, `optimize_indices` and compaction."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from vectors import assert_same_neighbours, pylance_nearest

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError

pytestmark = pytest.mark.compat

DIM = 16
# every kind but the HNSW forms (see test_hnsw_forms_answer_near_pylance)
KINDS = {"IVF_FLAT": {}, "IVF_PQ": {"num_sub_vectors": 4}, "IVF_SQ": {}}
SEARCHES = [
    {"nprobes": 5},
    {"nprobes": 1},
    {},
    {"nprobes": 2, "refine_factor": 3},
    {"k": 3, "minimum_nprobes": 2},
]
FILTERS = [{}, {"filter": "id % 3 = 0", "prefilter": True}, {"filter": "id % 2 = 0"}]


def _table(rng: np.random.Generator, rows: int, start: int = 0) -> pa.Table:
    """Rows of 0-4 vectors, every 41st null."""
    values = [
        None if (start + i) % 41 == 0 else rng.standard_normal((int(rng.integers(0, 5)), DIM))
        for i in range(rows)
    ]
    lists = [None if v is None else v.astype(np.float32).tolist() for v in values]
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + rows)),
            "mv": pa.array(lists, pa.list_(pa.list_(pa.float32(), DIM))),
        }
    )


def _same(uri: str, seed: int, what: str, searches: list[dict] = SEARCHES) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(4):
        q = rng.standard_normal((1 + trial % 4, DIM)).astype(np.float32)
        for search in searches:
            for extra in FILTERS:
                nearest = {"column": "mv", "q": q, "k": 7, **search}
                kwargs = {"nearest": nearest, "columns": ["id"], **extra}
                ours = dataset(uri).to_table(**kwargs)
                label = f"{what}: {len(q)} query vectors, {search} {extra}"
                assert_same_neighbours(ours, pylance_nearest(uri, **kwargs), label)


@pytest.mark.parametrize("kind", KINDS)
def test_pylance_indices_of_multivector_columns_answer_as_pylance(
    tmp_path: Path, kind: str
) -> None:
    rng = np.random.default_rng(3)
    uri = str(tmp_path / "mv.lance")
    lance.write_dataset(_table(rng, 700), uri, max_rows_per_file=300).create_index(
        "mv", kind, num_partitions=5, metric="cosine", **KINDS[kind]
    )
    _same(uri, 1, f"{kind}, pylance's index")
    lance.write_dataset(_table(rng, 90, 700), uri, mode="append")  # not indexed
    lance.dataset(uri).delete("id % 7 = 0")
    _same(uri, 2, f"{kind}, appended and deleted rows", SEARCHES[:2] + SEARCHES[3:4])


@pytest.mark.parametrize("kind", KINDS)
def test_quiver_builds_multivector_indices_pylance_searches(tmp_path: Path, kind: str) -> None:
    """Quiver's index holds an entry per vector of every row (null and empty rows none), as
    pylance's does; pylance lists and searches it with Quiver's answers; its recall against
    exact search is about that of pylance's own index."""
    rng = np.random.default_rng(4)
    table = _table(rng, 800)
    ours_uri, theirs_uri = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    lance.write_dataset(table, ours_uri, max_rows_per_file=300)
    lance.write_dataset(table, theirs_uri, max_rows_per_file=300).create_index(
        "mv", kind, num_partitions=4, metric="cosine", **KINDS[kind]
    )
    with pytest.raises(InvalidInputError, match="supports only cosine"):
        dataset(ours_uri).create_index("mv", kind, num_partitions=4, metric="l2", **KINDS[kind])
    dataset(ours_uri).create_index("mv", kind, num_partitions=4, metric="cosine", **KINDS[kind])
    (listed,) = lance.dataset(ours_uri).list_indices()
    assert listed["type"] == kind and listed["fields"] == ["mv"]

    def entries(uri: str) -> tuple[int, int]:
        stats = lance.dataset(uri).stats.index_stats("mv_idx")
        return stats["num_indexed_rows"], sum(p["size"] for p in stats["indices"][0]["partitions"])

    assert entries(ours_uri) == entries(theirs_uri)
    _same(ours_uri, 5, f"{kind}, Quiver's index", SEARCHES[:2])
    recall = {ours_uri: [], theirs_uri: []}
    for q in np.random.default_rng(6).standard_normal((12, 2, DIM)).astype(np.float32):
        nearest = {"column": "mv", "q": q, "k": 8, "nprobes": 2}
        exact = dataset(ours_uri).to_table(
            nearest={**nearest, "use_index": False, "metric": "cosine"}, columns=["id"]
        )
        for uri in recall:
            found = lance.dataset(uri).to_table(nearest=nearest, columns=["id"])
            hits = set(found["id"].to_pylist()) & set(exact["id"].to_pylist())
            recall[uri].append(len(hits) / 8)
    assert np.mean(recall[ours_uri]) >= np.mean(recall[theirs_uri]) - 0.15, recall


def test_optimize_and_compaction_keep_multivector_indices(tmp_path: Path) -> None:
    """Appended rows indexed by `optimize_indices` (a delta segment) and compaction remapping
    the entries, by Quiver's engine: pylance answers as Quiver does after each."""
    rng = np.random.default_rng(8)
    uri = str(tmp_path / "mv.lance")
    lance.write_dataset(_table(rng, 500), uri, max_rows_per_file=100)
    dataset(uri).create_index("mv", "IVF_PQ", num_partitions=4, metric="cosine", num_sub_vectors=4)
    dataset(uri).insert(_table(rng, 120, 500))
    dataset(uri).optimize.optimize_indices()
    assert len(lance.dataset(uri).list_indices()) == 1
    _same(uri, 9, "after optimize_indices", SEARCHES[:2])
    dataset(uri).delete("id % 5 = 0")
    dataset(uri).optimize.compact_files(target_rows_per_fragment=400)
    _same(uri, 10, "after compaction", SEARCHES[:2])


def test_hnsw_forms_answer_near_pylance(tmp_path: Path) -> None:
    """IVF_HNSW_* indices of multivector columns: with one query vector the same rows and
    distances as pylance; with several, pylance's deep graph results (the entries that give
    rows a vector did not find their similarity) can differ from Quiver's, so the rows found
    mostly agree and every distance is the same measure."""
    rng = np.random.default_rng(12)
    uri = str(tmp_path / "mv.lance")
    lance.write_dataset(_table(rng, 700), uri).create_index(
        "mv", "IVF_HNSW_SQ", num_partitions=3, metric="cosine"
    )
    agree = []
    for trial in range(8):
        q = rng.standard_normal((1 + trial % 3, DIM)).astype(np.float32)
        kwargs = {"nearest": {"column": "mv", "q": q, "k": 7, "nprobes": 3}, "columns": ["id"]}
        ours, theirs = dataset(uri).to_table(**kwargs), pylance_nearest(uri, **kwargs)
        if len(q) == 1:
            assert_same_neighbours(ours, theirs, "HNSW, one query vector")
        shared = set(ours["id"].to_pylist()) & set(theirs["id"].to_pylist())
        agree.append(len(shared) / 7)
        spread = np.abs(ours["_distance"].to_numpy() - theirs["_distance"].to_numpy())
        assert spread.max() < 0.1 * len(q)
    assert np.mean(agree) >= 0.8, agree
    # an ef below the k x 10 entries each query vector keeps: raised to them, not refused
    few = {"column": "mv", "q": q, "k": 7, "nprobes": 3, "ef": 10}
    assert dataset(uri).to_table(nearest=few, columns=["id"]).num_rows == 7
