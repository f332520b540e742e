"""Vectors nested in structs (`meta.vec`): searched by their path, flat and through IVF
indices either engine builds, as pylance searches them (rows under a null parent hold no
vector). Over Flight: `tests/flight/test_nearest.py`."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from vectors import DIM, assert_same_neighbours, pylance_nearest

from quiver.format.dataset import dataset

COLUMN = "meta.vec"


def _table(rows: int, start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, DIM)).astype(np.float32) + 0.25
    ids = np.arange(start, start + rows)
    meta = pa.StructArray.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM), pa.array(ids % 7)],
        names=["vec", "k"],
        mask=pa.array(ids % 29 == 0),  # null parents: no vector
    )
    return pa.table({"id": ids, "meta": meta})


def _dataset(path: Path, builder: str | None, kind: str = "IVF_PQ", metric: str = "l2") -> str:
    """Written by pylance, indexed by `builder` (None: no index), then appended to (rows
    no index covers) and deleted from."""
    uri = str(path)
    lance.write_dataset(_table(2000, 0, 1), uri, max_rows_per_file=800)
    if builder is not None:
        engine = lance.dataset if builder == "pylance" else dataset
        options = {"num_sub_vectors": 4} if kind == "IVF_PQ" else {}
        engine(uri).create_index(COLUMN, kind, metric=metric, num_partitions=4, **options)
    lance.write_dataset(_table(200, 2000, 2), uri, mode="append")
    lance.dataset(uri).delete("id % 11 = 0")
    return uri


CASES = [
    {},
    {"columns": ["id"], "with_row_id": True},
    {"filter": "meta.k = 3", "prefilter": True, "columns": ["id", "meta"]},
    {"nearest": {"refine_factor": 2, "k": 7}},
    {"columns": ["meta.k", "_distance", "id"], "filter": "id > 50"},  # a nested field's values
]


@pytest.mark.parametrize(
    ("builder", "kind", "metric"),
    [(None, None, "l2"), ("pylance", "IVF_PQ", "l2"), ("quiver", "IVF_PQ", "l2"),
     ("quiver", "IVF_FLAT", "cosine"), ("pylance", "IVF_HNSW_SQ", "l2")],
)  # fmt: skip
def test_nested_vectors_search_as_pylance(
    tmp_path: Path, builder: str | None, kind: str | None, metric: str
) -> None:
    uri = _dataset(tmp_path / "v.lance", builder, kind or "IVF_PQ", metric)
    if builder is not None:  # either engine's index listed alike, by the column's path
        listed = [(i["name"], i["fields"]) for i in lance.dataset(uri).list_indices()]
        assert listed == [("meta.vec_idx", [COLUMN])]
        assert [(i["name"], i["fields"]) for i in dataset(uri).list_indices()] == listed
    q = np.random.default_rng(5).standard_normal((3, DIM)).astype(np.float32)
    for case in CASES:
        nearest = {"column": COLUMN, "q": q[0], "k": 10, "nprobes": 4, **case.get("nearest", {})}
        options = {k: v for k, v in case.items() if k != "nearest"}
        want = pylance_nearest(uri, nearest=nearest, **options)
        assert_same_neighbours(dataset(uri).to_table(nearest=nearest, **options), want, str(case))
    batch = {"column": COLUMN, "q": q, "k": 5, "nprobes": 4}
    want = pylance_nearest(uri, nearest=batch, columns=["id"])
    assert_same_neighbours(dataset(uri).to_table(nearest=batch, columns=["id"]), want, "batch")
