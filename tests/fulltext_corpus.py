"""A text corpus for full-text search tests, and the comparison of search answers with
pylance's (tied scores compared as sets: pylance orders and cuts ties arbitrarily)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

WORDS = (
    "apple apples banana running runs ran runner the a of and to in is it data dataset "
    "datasets lance arrow flight server servers quick quickly brown fox foxes jumps jumped "
    "over lazy dog dogs café naïve résumé Straße ÉCOLE index indexes indexing search "
    "searching searched vector vectors table tables query queries score scoring rank "
    "ranking text texts token tokens tokenizer stem stemming word words river rivers "
    "mountain mountains blue green red yellow seven eight nine 2024 42 x y z"
).split()
LONG = "a" * 45
QUERIES = [
    "apple",
    "running fox",
    "the quick brown fox",
    "Apples APPLE apple",
    "datasets index",
    "café ecole",
    "naive resume strasse",
    "of the and",
    "nothing-here-at-all",
    "searching tokens stemming",
    f"{LONG} dog",
    "42 seven",
]


def docs(n: int, seed: int) -> list[str | None]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(WORDS))]
    out: list[str | None] = []
    for i in range(n):
        length = rng.randint(0, 30)
        if length == 0:
            out.append(None if i % 2 else "")
            continue
        words = rng.choices(WORDS, weights, k=length)
        if rng.random() < 0.05:
            words.append(LONG)
        out.append(rng.choice([" ", ", ", "-", ". "]).join(words))
    return out


def text_table(n: int, seed: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "text": docs(n, seed),
            "title": docs(n, seed + 100),
            "cat": [f"c{i % 4}" for i in range(start, start + n)],
        }
    )


def search(ds: Any, **kw: Any) -> pa.Table:
    """A search's `id` and `_rowid` (other columns when `kw` names them), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(**{"columns": ["id"], "with_row_id": True, **kw})


def assert_same_answers(theirs: pa.Table, ours: pa.Table, what: str) -> None:
    """The same scores (1e-6 relative), every row's score as pylance's; rows outside the
    last tie band the same (pylance orders and cuts tied scores arbitrarily)."""
    assert ours.column_names == theirs.column_names, what
    a, b = theirs["_score"].to_numpy(), ours["_score"].to_numpy()
    assert len(a) == len(b), (what, len(a), len(b))
    np.testing.assert_allclose(np.sort(b), np.sort(a), rtol=1e-6, err_msg=what)
    assert np.all(np.diff(b) <= 0), f"{what}: not best first"
    got = dict(zip(ours["_rowid"].to_pylist(), b.tolist(), strict=True))
    want = dict(zip(theirs["_rowid"].to_pylist(), a.tolist(), strict=True))
    for row in set(got) & set(want):
        assert abs(got[row] - want[row]) <= 1e-6 * abs(want[row]), (what, row)
    if len(a):
        last = a.min()
        assert {r for r, s in got.items() if s > last * (1 + 1e-6)} == {
            r for r, s in want.items() if s > last * (1 + 1e-6)
        }, what
