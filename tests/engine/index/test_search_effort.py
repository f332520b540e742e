"""pylance 14's `search_effort` (the initial IVF budget, in [0, 1]): every query answered
as pylance answers it, over IVF_FLAT, IVF_PQ, IVF_RQ and IVF_HNSW_SQ, with and without
`minimum_nprobes`, `maximum_nprobes` and an `nprobes` the effort overrides."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from vectors import assert_same_neighbours

from quiver.format.dataset import ScannerBuilder, dataset
from quiver.format.errors import InvalidInputError

OPTIONS = [{}, {"minimum_nprobes": 3}, {"maximum_nprobes": 20}, {"nprobes": 7}]


@pytest.mark.parametrize(
    ("kind", "metric", "extra"),
    [
        ("IVF_FLAT", "l2", {}),
        ("IVF_PQ", "cosine", {"num_sub_vectors": 4}),
        ("IVF_RQ", "l2", {}),
        ("IVF_HNSW_SQ", "l2", {}),
    ],
)
def test_search_effort_as_pylance(tmp_path: Path, kind: str, metric: str, extra: dict) -> None:
    rng = np.random.default_rng(len(kind))
    rows, dim = 4000, 16
    vectors = rng.normal(size=(rows, dim)).astype(np.float32)
    uri = str(tmp_path / "v")
    table = pa.table(
        {
            "id": pa.array(np.arange(rows)),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        }
    )
    lance.write_dataset(table, uri)
    lance.dataset(uri).create_index("v", kind, num_partitions=48, metric=metric, **extra)
    queries = rng.normal(size=(3, dim)).astype(np.float32)
    for effort in (0.0, 0.25, 0.6, 1.0):
        for options in OPTIONS:
            for q in queries:
                nearest = {"column": "v", "q": q, "k": 20, "search_effort": effort, **options}
                expected = lance.dataset(uri).to_table(columns=["id"], nearest=nearest)
                got = dataset(uri).to_table(columns=["id"], nearest=nearest)
                what = f"effort {effort} {options}"
                assert_same_neighbours(got, expected, what)
    built = ScannerBuilder(dataset(uri)).nearest("v", queries[0], k=5, search_effort=0.1)
    assert built.to_scanner().to_table().num_rows == 5
    for bad in (1.5, -0.1, float("nan"), "x"):
        with pytest.raises(InvalidInputError, match="search_effort"):
            dataset(uri).to_table(nearest={"column": "v", "q": queries[0], "search_effort": bad})
