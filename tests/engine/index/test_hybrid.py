"""Hybrid search (a vector search and a full-text search fused): Quiver's answer against
LanceDB's own fusion code (`LanceHybridQueryBuilder._combine_hybrid_results` with its RRF
and linear rerankers) applied to the two searches' answers, with each normalisation."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
from fulltext_corpus import text_table

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError

pytestmark = pytest.mark.compat
DIM = 8


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> str:
    table = text_table(1500, 71)
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((table.num_rows, DIM)).astype(np.float32)
    table = table.append_column(
        "vec", pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM)
    )
    path = str(tmp_path_factory.mktemp("hybrid") / "docs.lance")
    ds = lance.write_dataset(table, path, max_rows_per_file=500)
    ds.create_scalar_index("text", "INVERTED")
    ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    return path


def _reference(ours, nearest, text, limit, reranker, norm, **kw) -> pa.Table:
    from lancedb.query import LanceHybridQueryBuilder

    columns = ["id", "cat"]
    vectors = ours.to_table(
        nearest={**nearest, "k": limit}, columns=[*columns, "_distance"], with_row_id=True, **kw
    )
    texts = ours.to_table(
        full_text_query=text, limit=limit, columns=[*columns, "_score"], with_row_id=True, **kw
    )
    return LanceHybridQueryBuilder._combine_hybrid_results(
        texts, vectors, norm, text, reranker, limit, True
    )


@pytest.mark.parametrize("norm", ["score", "rank"])
@pytest.mark.parametrize("fusion", ["rrf", "linear"])
def test_fusion_matches_lancedb(docs: str, fusion: str, norm: str) -> None:
    from lancedb.rerankers import LinearCombinationReranker, RRFReranker

    ours = dataset(docs)
    q = np.random.default_rng(8).standard_normal(DIM).astype(np.float32)
    nearest = {"column": "vec", "q": q, "nprobes": 4}
    for text, limit, kw in (
        ("apple fox", 10, {}),
        ("river blue mountains", 25, {"filter": "cat != 'c2'", "prefilter": True}),
        ("nothing-at-all", 5, {}),
    ):
        if fusion == "rrf":
            reranker, options = RRFReranker(K=40), {"fusion": "rrf", "rrf_k": 40}
        else:
            reranker = LinearCombinationReranker(weight=0.6)
            options = {"fusion": "linear", "weight": 0.6}
        want = _reference(ours, nearest, text, limit, reranker, norm, **kw)
        got = ours.to_table(
            nearest=nearest,
            full_text_query=text,
            limit=limit,
            columns=["id", "cat"],
            with_row_id=True,
            hybrid={**options, "normalize": norm},
            **kw,
        )
        assert got.column_names == ["id", "cat", "_relevance_score", "_rowid"]
        assert got["_rowid"].to_pylist() == want["_rowid"].to_pylist(), (text, fusion, norm)
        np.testing.assert_allclose(
            got["_relevance_score"].to_numpy(), want["_relevance_score"].to_numpy(), rtol=1e-5
        )


def test_hybrid_refusals(docs: str) -> None:
    ours = dataset(docs)
    nearest = {"column": "vec", "q": np.zeros(DIM, np.float32)}
    for bad in ({"fusion": "max"}, {"normalize": "z"}, {"rrf_k": 0}, {"weight": 2}):
        with pytest.raises(InvalidInputError):
            ours.to_table(nearest=nearest, full_text_query="apple", hybrid=bad)
    with pytest.raises(InvalidInputError, match="to_table"):
        ours.scanner(nearest=nearest, full_text_query="apple")
