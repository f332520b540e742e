"""The best rows of one query word by its posting blocks' stored best scores (block-max
pruning): a search for one word with a limit decodes the blocks its best rows can be in,
not the word's whole posting list (a frequent word's 600,000 postings are 4,700 blocks; its
ten best rows are in a few dozen).

Each block stores its best weight under its partition's statistics (pylance 14's builds and
Quiver's alike). A search weighs with the statistics of everything it searches, so a stored
score becomes an upper bound by rescaling: times the ratio of the idfs, times the ratio of
the mean lengths where the search's is the larger (a document's length term shrinks by that
ratio at most), with a margin for float rounding. Blocks are decoded best bound first, in
rounds twice as large each time, until `top` live rows weigh more than every bound left: no
block left can hold a better row, nor one tied with one of them. What was decoded is kept
for the word's next searches (`BlockMax`).

Every decoded block is checked against its bound. A row scoring above its block's bound
means the stored scores are not bounds (an index written otherwise), and `BlockMax.best`
answers None: the caller searches the whole list.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from quiver.format.index.fts import bm25
from quiver.format.index.fts.index import InvertedIndex, Partition
from quiver.format.index.fts.postings import BLOCK, decode_blocks

# relative margin on rescaled bounds: stored scores are within a few float32 ulps (1e-7)
# of the weights they bound
SLACK = 1e-5
FIRST_ROUND = 8  # blocks decoded in the first round (at least twice the limit's worth)


class _List:
    """One partition's posting list of the word: its blocks and their bounds."""

    def __init__(
        self,
        part: Partition,
        token_id: int,
        blocks: tuple[np.ndarray, ...],
        token_idf: np.float32,
        avgdl: np.float32,
    ) -> None:
        self.part, self.length = part, int(part.df[token_id])
        self.data, self.offsets, scores = blocks
        self.order = np.argsort(-scores, kind="stable")  # best first
        docs = len(part.row_ids)
        own_idf = float(bm25.idf(self.length, docs))
        own_avgdl = float(bm25.mean_length(part.total_tokens, docs))
        scale = float(token_idf) / own_idf * max(1.0, float(avgdl) / own_avgdl) * (1 + SLACK)
        self.bounds = scores.astype(np.float64) * scale

    def weigh(
        self, blocks: np.ndarray, token_idf: np.float32, avgdl: np.float32
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Row ids and weights of the postings of `blocks` (ascending), None where one
        weighs more than its block's bound."""
        where = self.part.invert.path
        docs, freqs = decode_blocks(
            self.data, self.offsets, blocks, self.length, self.part.codec, where
        )
        rows, weights, _ = bm25.gathered(
            docs, freqs, self.part.row_ids, self.part.lengths, token_idf, avgdl, where
        )
        best = np.maximum.reduceat(weights, np.arange(len(blocks)) * BLOCK)
        if (best > self.bounds[blocks]).any():
            return None
        return rows, weights


class BlockMax:
    """One query word's posting lists (every partition of every segment searched), their
    blocks visited best bound first and decoded only as deep as searches have needed.

    Decoded rows whose weight beats every bound left are final: `rows` and `weights` hold
    them ranked (weight, then row id), and a search takes its first live ones. The other
    decoded rows wait for the bounds to fall below them. A search that needs more decodes
    the next blocks (twice as many as so far), so a word's blocks are decoded once however
    often it is searched, and a frequent word's few best blocks are all most searches
    read."""

    def __init__(self, lists: list[_List], token_idf: np.float32, avgdl: np.float32) -> None:
        self.lists, self.token_idf, self.avgdl = lists, token_idf, avgdl
        if len(lists) == 1:
            self.bounds, self.order = lists[0].bounds, lists[0].order
            self.owner = np.zeros(len(self.bounds), np.int64)
            self.number = np.arange(len(self.bounds))
        else:
            self.bounds = np.concatenate([x.bounds for x in lists])
            self.order = np.argsort(-self.bounds, kind="stable")
            self.owner = np.repeat(np.arange(len(lists)), [len(x.bounds) for x in lists])
            self.number = np.concatenate([np.arange(len(x.bounds)) for x in lists])
        self.valid = bool(np.isfinite(self.bounds).all())
        # (ranked rows, their weights, blocks decoded in `order`), replaced as one
        self.ranked = (np.empty(0, np.uint64), np.empty(0, np.float32), 0)
        self._waiting = (np.empty(0, np.uint64), np.empty(0, np.float32))
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The bytes it holds: the blocks as read, their bounds and order, what was decoded."""
        read = sum(x.data.nbytes + x.offsets.nbytes for x in self.lists)
        return read + 32 * len(self.bounds) + 12 * (len(self.ranked[0]) + len(self._waiting[0]))

    def best(
        self, top: int, live: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(row ids ascending, weights) of the `top` best live rows holding the word (all of
        them when fewer), ties by row id; None where the stored block scores turn out not
        to bound the weights."""
        while self.valid:
            rows, weights, done = self.ranked
            found = _first_live(rows, top, live)
            if len(found) >= top or done == len(self.order):
                found = found[:top]
                by_row = np.argsort(rows[found], kind="stable")
                return rows[found][by_row], weights[found][by_row]
            with self._lock:
                if self.ranked[2] == done:
                    self._deeper(max(FIRST_ROUND, done, 2 * (top // BLOCK + 1)))
        return None

    def _deeper(self, size: int) -> None:
        """Decode the next `size` blocks; rank the rows no block left can beat."""
        rows_before, weights_before, done = self.ranked
        chosen = self.order[done : done + size]
        rows, weights = [self._waiting[0]], [self._waiting[1]]
        for i in np.unique(self.owner[chosen]):
            blocks = np.sort(self.number[chosen[self.owner[chosen] == i]])
            weighed = self.lists[i].weigh(blocks, self.token_idf, self.avgdl)
            if weighed is None:
                self.valid = False
                return
            rows.append(weighed[0])
            weights.append(weighed[1])
        pool_rows, pool_weights = np.concatenate(rows), np.concatenate(weights)
        done += len(chosen)
        after = self.bounds[self.order[done]] if done < len(self.order) else -np.inf
        sure = pool_weights > after
        ranked = np.lexsort((pool_rows[sure], -pool_weights[sure]))
        # every row ranked before is better than these: they come after
        self._waiting = (pool_rows[~sure], pool_weights[~sure])
        self.ranked = (
            np.concatenate([rows_before, pool_rows[sure][ranked]]),
            np.concatenate([weights_before, pool_weights[sure][ranked]]),
            done,
        )


def _first_live(rows: np.ndarray, top: int, live: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Positions of the first `top` (or more) live `rows`, checked in growing steps."""
    found: list[np.ndarray] = []
    count, at, step = 0, 0, max(top, 16)
    while count < top and at < len(rows):
        keep = np.flatnonzero(live(rows[at : at + step])) + at
        found.append(keep)
        count += len(keep)
        at += step
        step *= 4
    return np.concatenate(found) if found else np.empty(0, np.int64)


def word_blocks(
    indices: Sequence[InvertedIndex], token: str, token_idf: np.float32, avgdl: np.float32
) -> BlockMax:
    """`token`'s posting lists in `indices`, weighed under the search's `token_idf` and
    `avgdl`, ready for `BlockMax.best`."""
    lists = [
        _List(part, tid, blocks, token_idf, avgdl)
        for index in indices
        for part, tid, blocks in index.blocks(token)
    ]
    return BlockMax(lists, token_idf, avgdl)
