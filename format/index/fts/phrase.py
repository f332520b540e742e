"""Whether a document's token positions hold a phrase, by pylance 14's two rules.

A phrase is its analysed tokens `t_0 .. t_{k-1}` with their positions `q_i` in the query
(removed words keep their slots, so only differences matter). For a document, `P_i` are
the sorted positions of `t_i` (a repeated token has the same list each time), and a
token's relative position is `p - q_i`. Order is enforced; `slop` is the extra positions
each adjacent pair may have between them (not a total); there are no transpositions.

- `indexed_match`, for rows an index answers: with slop 0, some relative position all
  tokens share; otherwise pylance's greedy walk of one cursor per token (its posting
  iterators), which misses some placements when tokens repeat and is not monotonic in
  slop: a faithful port, so the answers are pylance's.
- `scanned_match`, for rows read and analysed (no index covers them): any placement with
  `0 <= r_{i+1} - r_i <= slop` for every adjacent pair.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


def indexed_match(positions: Sequence[Sequence[int]], offsets: Sequence[int], slop: int) -> bool:
    """pylance's rule for indexed rows (`positions[i]`: sorted positions of token i)."""
    k = len(positions)
    if k == 1:
        return bool(positions[0])
    if slop == 0:
        shared = {p - offsets[0] for p in positions[0]}
        for i in range(1, k):
            shared &= {p - offsets[i] for p in positions[i]}
            if not shared:
                return False
        return True
    cursor = [0] * k
    while True:
        furthest = None
        holds = True
        for i in range(k - 1):
            if cursor[i] >= len(positions[i]) or cursor[i + 1] >= len(positions[i + 1]):
                return False
            a = positions[i][cursor[i]] - offsets[i]
            b = positions[i + 1][cursor[i + 1]] - offsets[i + 1]
            move = a if a > b else max(a + 1, b - slop)
            furthest = move if furthest is None else max(furthest, move)
            if not a <= b <= a + slop:
                holds = False
                break
        if holds:
            return True
        assert furthest is not None
        for i in range(k):
            if cursor[i] < len(positions[i]):
                target = max(0, furthest + offsets[i])
                cursor[i] = bisect_left(positions[i], target, lo=cursor[i])


def scanned_match(positions: Sequence[Sequence[int]], offsets: Sequence[int], slop: int) -> bool:
    """pylance's rule for scanned rows: some placement, pair by pair within `slop`."""
    reach = sorted({p - offsets[0] for p in positions[0]})
    for i in range(1, len(positions)):
        nxt = []
        for r in sorted({p - offsets[i] for p in positions[i]}):
            j = bisect_left(reach, r - slop)
            if j < len(reach) and reach[j] <= r:
                nxt.append(r)
        reach = nxt
        if not reach:
            return False
    return bool(reach)
