"""Fuzzy matching as pylance 14 expands a fuzzy `MatchQuery` (`fuzziness` a whole number
other than 0; None and 0 are exact).

- The query is split as the simple tokenizer splits it, nothing more (no lower-casing,
  stemming, stop words or folding); each token keeps its position.
- Query tokens are expanded in order against the index's whole token set (every
  partition's), in byte order: the tokens starting with the token's first
  `prefix_length` characters within `fuzziness` Levenshtein edits of it (inserts, deletes
  and substitutions of characters; a transposition is two). The exact token has no
  priority. `max_expansions` is one budget for the whole query: once spent, later tokens
  get nothing.
- Each expansion is a term of its own (a token chosen for two query positions counts
  twice), scored by BM25 and summed.
- A token reached before the budget is spent whose automaton would pass pylance's 10,000
  states refuses the query, as pylance refuses it (`format.index.fts.automaton`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from quiver.format.errors import InvalidInputError
from quiver.format.index.fts.automaton import too_large

_LAST = chr(0x10FFFF)  # after every token that starts with a prefix (bar this character)


def within(query: str, candidates: Sequence[str], limit: int) -> np.ndarray:
    """Which `candidates` are at most `limit` Levenshtein edits from `query` (code points),
    all at once: the distance table's rows over the query's characters, each a numpy row
    over every candidate."""
    if not candidates:
        return np.zeros(0, bool)
    lengths = np.array([len(c) for c in candidates], np.int64)
    width = int(lengths.max())
    chars = np.full((len(candidates), width), -1, np.int64)
    for i, c in enumerate(candidates):
        chars[i, : len(c)] = [ord(x) for x in c]
    prev = np.tile(np.arange(width + 1, dtype=np.int64), (len(candidates), 1))
    for i, q in enumerate(query, 1):
        cur = np.empty_like(prev)
        cur[:, 0] = i
        differs = chars != ord(q)
        for j in range(1, width + 1):
            cur[:, j] = np.minimum(
                np.minimum(prev[:, j] + 1, cur[:, j - 1] + 1), prev[:, j - 1] + differs[:, j - 1]
            )
        prev = cur
    return prev[np.arange(len(candidates)), lengths] <= limit


def expand(
    tokens: Sequence[tuple[int, str]],
    vocabulary: Sequence[str],
    fuzziness: int,
    max_expansions: int,
    prefix_length: int,
) -> list[tuple[int, str]]:
    """(query position, index token) pairs a fuzzy query searches, in the order chosen;
    `vocabulary` sorted."""
    chosen: list[tuple[int, str]] = []
    for position, token in tokens:
        remaining = max_expansions - len(chosen)
        if remaining <= 0:
            break
        refused = too_large(token, fuzziness, prefix_length)
        if refused is not None:
            raise InvalidInputError(f"fuzzy token {token!r} at distance {fuzziness}: {refused}")
        prefix = token[:prefix_length]
        start = bisect_left(vocabulary, prefix)
        end = bisect_left(vocabulary, prefix + _LAST) if prefix else len(vocabulary)
        near = [
            t
            for t in vocabulary[start:end]
            if abs(len(t) - len(token)) <= fuzziness and t.startswith(prefix)
        ]
        found = [t for t, ok in zip(near, within(token, near, fuzziness), strict=True) if ok]
        for t in found[:remaining]:
            if (position, t) not in chosen:
                chosen.append((position, t))
    return chosen
