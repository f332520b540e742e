"""`_kernels.split_words`, the loop INVERTED builds tokenize with: on random texts (runs of
separators, empty and null texts, sliced arrays, multi-byte UTF-8 for the whitespace
tokenizer) each occurrence is the word, text and place a plain Python split gives, distinct
words numbered by first appearance; offsets that lie and outputs too small are refused."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from quiver.format import _kernels
from quiver.format.index.fts.analyzer import _SEPARATOR_BYTES


def _split(texts: pa.Array, rows: np.ndarray, separators: np.ndarray) -> tuple[list, list]:
    validity, offsets, data = texts.buffers()
    nbytes = len(data) if data is not None else 0
    n = nbytes + len(rows) + 1
    out = (
        np.empty(n, np.int32),
        np.empty(n, np.int32),
        np.empty(n, np.uint32),
        np.empty(max(nbytes, 1), np.uint8),
        np.empty(n + 1, np.int64),
    )
    got, distinct = _kernels.split_words(
        data or pa.py_buffer(b""), offsets, validity, texts.offset, rows, separators, *out
    )
    word, row, place, text, ends = out
    words = [bytes(text[ends[d] : ends[d + 1]]).decode() for d in range(distinct)]
    return [(words[word[i]], int(row[i]), int(place[i])) for i in range(got)], words


def _reference(texts: list[str | None], rows: np.ndarray, separators: np.ndarray) -> tuple:
    occurrences, words = [], []
    for i, r in enumerate(rows.tolist()):
        text = texts[r]
        if text is None:
            continue
        spaced = bytes(32 if separators[b] else b for b in text.encode())
        for place, w in enumerate(x for x in spaced.split(b" ") if x):
            occurrences.append((w.decode(), i, place))
            if w.decode() not in words:
                words.append(w.decode())
    return occurrences, words


@pytest.mark.parametrize("tokenizer", ["simple", "whitespace"])
@pytest.mark.parametrize("seed", range(4))
def test_occurrences_are_a_plain_split_s(tokenizer: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    alphabet = list("abcXYZ09 ,.-\t\n") + (["é", "日本"] if tokenizer == "whitespace" else [])
    texts: list[str | None] = [
        None if rng.random() < 0.05 else "".join(rng.choice(alphabet, rng.integers(0, 40)))
        for _ in range(300)
    ]
    array = pa.array([None, "skipped by the slice", *texts], pa.large_string()).slice(2)
    rows = np.sort(rng.choice(len(texts), 200, replace=False)).astype(np.int64)
    separators = _SEPARATOR_BYTES[tokenizer]
    assert _split(array, rows, separators) == _reference(texts, rows, separators)


def test_bad_offsets_and_small_outputs_are_refused() -> None:
    texts = pa.array(["one two", "three"], pa.large_string())
    validity, offsets, data = texts.buffers()
    separators = _SEPARATOR_BYTES["simple"]

    def call(rows: list[int], size: int = 16, offsets: object = offsets) -> None:
        out = (
            np.empty(size, np.int32),
            np.empty(size, np.int32),
            np.empty(size, np.uint32),
            np.empty(64, np.uint8),
            np.empty(size + 1, np.int64),
        )
        _kernels.split_words(data, offsets, validity, 0, np.array(rows, np.int64), separators, *out)

    call([0, 1])
    with pytest.raises(ValueError, match="offsets lie outside"):
        call([2])
    with pytest.raises(ValueError, match="offsets lie outside"):
        call([-1])
    lying = np.array([0, 7, 900], np.int64)
    with pytest.raises(ValueError, match="offsets lie outside"):
        call([1], offsets=lying)
    with pytest.raises(ValueError, match="too small"):
        call([0, 1], size=2)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        _kernels.split_words(data, offsets, validity, 0, np.array([0]), separators[:10], *(
            np.empty(4, np.int32), np.empty(4, np.int32), np.empty(4, np.uint32),
            np.empty(8, np.uint8), np.empty(5, np.int64),
        ))  # fmt: skip
