"""Quiver's full-text query objects (`quiver.format.dataset.query`), built as pylance's
(`lance.query`) are: the same rows and scores for each kind, and pylance's own objects
refused with a pointer to Quiver's."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance import query as theirs

from quiver.format.dataset import dataset
from quiver.format.dataset import query as ours
from quiver.format.errors import UnsupportedFeatureError


def _queries(q: object) -> list:
    m, op = q.MatchQuery, q.FullTextOperator  # type: ignore[attr-defined]
    return [
        m("w0 x1", "t"),
        m("w0 x1", "t", operator=op.AND),
        m("w0x", "t", fuzziness=1, boost=2.0),
        m("w0 w1", "u", prefix_length=1),
        q.PhraseQuery("w0 x1", "t"),  # type: ignore[attr-defined]
        q.PhraseQuery("w0 x2", "t", slop=1),  # type: ignore[attr-defined]
        q.BoostQuery(m("w0", "t"), m("x1", "t"), negative_boost=0.3),  # type: ignore[attr-defined]
        q.MultiMatchQuery("w0", ["t", "u"], boosts=[2.0, 1.0]),  # type: ignore[attr-defined]
        q.BooleanQuery(  # type: ignore[attr-defined]
            [
                (q.Occur.MUST, m("w0", "t")),
                (q.Occur.SHOULD, m("w1", "u")),  # type: ignore[attr-defined]
                (q.Occur.MUST_NOT, m("x1", "t")),
            ]  # type: ignore[attr-defined]
        ),  # fmt: skip
    ]


def test_query_objects_answer_as_pylance_s(tmp_path: Path) -> None:
    uri = str(tmp_path / "d")
    n = 400
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "t": pa.array([f"w{i % 5} x{i % 7} w{i % 3}" for i in range(n)]),
            "u": pa.array([f"w{i % 4} y{i % 2}" for i in range(n)]),
        }
    )
    lance.write_dataset(table, uri, max_rows_per_file=150)
    for column in ("t", "u"):
        lance.dataset(uri).create_scalar_index(column, "INVERTED", with_position=True)
    for mine, pylance_s in zip(_queries(ours), _queries(theirs), strict=True):
        expected = lance.dataset(uri).to_table(full_text_query=pylance_s, columns=["id"])
        got = dataset(uri).to_table(full_text_query=mine, columns=["id"])

        def answers(t: pa.Table) -> list:
            ids, scores = t["id"].to_pylist(), np.round(t["_score"], 4).tolist()
            return sorted(zip(ids, scores, strict=True))

        assert answers(got) == answers(expected), mine
        assert got.num_rows, mine
        assert mine.query_type().value == pylance_s.query_type().value
    with pytest.raises(UnsupportedFeatureError, match="quiver.format.dataset.query"):
        dataset(uri).to_table(full_text_query=theirs.MatchQuery("w0", "t"))
    with pytest.raises(ValueError, match="one value per column"):
        ours.MultiMatchQuery("w0", ["t", "u"], boosts=[1.0])
