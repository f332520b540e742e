"""IVF_RQ (RaBitQ) indices pylance 14 builds, searched by Quiver's engine with pylance's answers:
every metric, one to nine bits a dimension, dimensions a power of two or not, nprobes given
or pylance's own, refine factors, prefilters and postfilters, appended and deleted rows; the
statistics pylance reports; what Quiver does not do yet (builds, optimize_indices) refused by
name, and compaction leaving the index to the rows it did not rewrite."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import UnsupportedFeatureError

pytestmark = pytest.mark.compat


def _write(path: Path, dim: int, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, dim)).astype(np.float32) * 3
    x = (centers[rng.integers(0, 6, rows)] + rng.normal(size=(rows, dim))).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(rows)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim),
        }
    )
    lance.write_dataset(table, str(path), max_rows_per_file=rows // 2)
    return x


def _answers(ds: Any, **kw: Any) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(columns=["id"], with_row_id=True, **kw)


def _same(uri: str, queries: np.ndarray, searches: list[dict], what: str) -> None:
    """The same rows in the same order, distances within float32 rounding (pylance's and
    Quiver's agree to the bit on AVX-512 machines; other CPUs sum pylance's lanes otherwise)."""
    for q in queries:
        for search in searches:
            for extra in ({}, {"filter": "id % 3 = 0", "prefilter": True}, {"filter": "id < 900"}):
                kw = {"nearest": {"column": "vec", "q": q, **search}, **extra}
                theirs, ours = _answers(lance.dataset(uri), **kw), _answers(dataset(uri), **kw)
                label = f"{what} {search} {extra}"
                assert ours["_rowid"].equals(theirs["_rowid"]), label
                a, b = ours["_distance"].to_numpy(), theirs["_distance"].to_numpy()
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=label)


SEARCHES = [
    {"k": 10, "nprobes": 1},
    {"k": 10, "nprobes": 3},
    {"k": 5},
    {"k": 7, "nprobes": 2, "refine_factor": 3},
]


@pytest.mark.parametrize(
    ("metric", "dim", "bits"),
    [("l2", 32, 1), ("l2", 40, 5), ("cosine", 64, 3), ("dot", 24, 9), ("l2", 128, 2)],
)
def test_pylance_rq_indices_answer_as_pylance(
    tmp_path: Path, metric: str, dim: int, bits: int
) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, dim, 1800, dim + bits)
    lance.dataset(str(uri)).create_index(
        "vec", "IVF_RQ", metric=metric, num_partitions=5, num_bits=bits
    )
    rng = np.random.default_rng(bits)
    queries = x[rng.integers(0, len(x), 3)] + rng.normal(size=(3, dim)).astype(np.float32) * 0.3
    _same(str(uri), queries, SEARCHES, f"{metric} d{dim} b{bits}")


def test_rq_statistics_appends_deletes_and_refusals(tmp_path: Path) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, 32, 1600, 4)
    lance.dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=4, num_bits=4)
    theirs = lance.dataset(str(uri)).stats.index_stats("vec_idx")
    ours = dataset(str(uri)).stats.index_stats("vec_idx")
    assert {k: v for k, v in ours.items() if k != "updated_at_timestamp_ms"} == {
        k: v for k, v in theirs.items() if k != "updated_at_timestamp_ms"
    }
    appended = pa.table(
        {
            "id": pa.array(np.arange(1600, 1700)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x[:100].ravel() + 0.01), 32),
        }
    )
    lance.write_dataset(appended, str(uri), mode="append")
    lance.dataset(str(uri)).delete("id % 7 = 0")
    _same(str(uri), x[[3, 500]], SEARCHES[:3], "after an append and a delete")
    with pytest.raises(UnsupportedFeatureError, match="IVF_RQ"):
        dataset(str(uri)).optimize.optimize_indices()
    with pytest.raises(UnsupportedFeatureError, match="IVF_RQ"):
        dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=2, replace=True)
    # compaction leaves the index to the rows it did not rewrite; the rest is searched exactly
    dataset(str(uri)).optimize.compact_files(target_rows_per_fragment=100_000)
    _same(str(uri), x[[3, 500]], [{"k": 10, "nprobes": 4}], "after Quiver's compaction")
