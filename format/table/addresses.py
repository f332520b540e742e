"""Where rows went: maps from the row addresses of rewritten fragments to new ones.

A row address is a fragment id (high 32 bits) and a physical offset (low 32 bits).
Compaction moves the live rows of its old fragments, in order, into new fragments; an
`AddressMap` records that move for every physical row of the old fragments (deleted ones
map to `GONE`). Indices are remapped with one (`format.index.scalar.remap`), a Rewrite is
rebased over concurrent deletions with one (`format.table.commit`), and the fragment reuse
index replays the moves of compactions that deferred their remap
(`format.table.frag_reuse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quiver.format.errors import CorruptFileError, LanceError

__all__ = ["GONE", "AddressMap", "Moved"]

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
GONE = np.uint64(np.iinfo(np.uint64).max)  # a deleted row: no new address


@dataclass(frozen=True)
class Moved:
    """One rewrite group: old fragments (id, physical rows, live mask or None for all) whose
    live rows, in order, became the rows of the new fragments (id, rows)."""

    old: Sequence[tuple[int, int, np.ndarray | None]]
    new: Sequence[tuple[int, int]]


@dataclass(frozen=True)
class AddressMap:
    """Where compaction moved each physical row of the rewritten fragments."""

    fragments: np.ndarray  # sorted old fragment ids (uint64)
    starts: np.ndarray  # where each fragment's rows start in `targets` (int64)
    lengths: np.ndarray  # physical rows of each (int64)
    targets: np.ndarray  # new address per old physical row, GONE when deleted (uint64)

    @classmethod
    def build(cls, groups: Sequence[Moved]) -> AddressMap:
        """The map of every group; each group's live rows must fill its new fragments."""
        ids, lengths, parts = [], [], []
        for g in groups:
            new = [
                (np.uint64(fid) << _SHIFT) | np.arange(rows, dtype=np.uint64) for fid, rows in g.new
            ]
            sequence = np.concatenate(new) if new else np.empty(0, np.uint64)
            live_rows = sum(r if m is None else int(np.count_nonzero(m)) for _, r, m in g.old)
            if live_rows != len(sequence):
                raise LanceError(
                    f"compaction moved {live_rows} live rows of fragments "
                    f"{[f for f, _, _ in g.old]} into {len(sequence)} new rows"
                )
            used = 0
            for fid, rows, live in g.old:
                target = np.full(rows, GONE, dtype=np.uint64)
                where = np.arange(rows) if live is None else np.flatnonzero(live)
                target[where] = sequence[used : used + len(where)]
                used += len(where)
                ids.append(fid)
                lengths.append(rows)
                parts.append(target)
        return cls._of(ids, lengths, parts)

    @classmethod
    def _of(cls, ids: list[int], lengths: list[int], parts: list[np.ndarray]) -> AddressMap:
        order = np.argsort(np.asarray(ids, dtype=np.uint64), kind="stable")
        fragments = np.asarray(ids, dtype=np.uint64)[order]
        if len(np.unique(fragments)) != len(fragments):
            raise LanceError(f"compaction rewrites a fragment twice: {fragments.tolist()}")
        sizes = np.asarray(lengths, dtype=np.int64)[order]
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        targets = [parts[i] for i in order]
        return cls(
            fragments,
            starts,
            sizes,
            np.concatenate(targets) if targets else np.empty(0, np.uint64),
        )

    def then(self, later: AddressMap, where: str) -> AddressMap:
        """One map doing this one's moves and then `later`'s: rows this map moved into
        fragments `later` rewrote end where `later` put them; `later`'s own fragments keep
        their moves (fragment ids are never reused, so the two never name one fragment)."""
        if not len(later.fragments):
            return self
        moved, _ = later.apply(self.targets, where)
        ids = [*self.fragments.tolist(), *later.fragments.tolist()]
        lengths = [*self.lengths.tolist(), *later.lengths.tolist()]
        parts = [moved[s : s + n] for s, n in zip(self.starts, self.lengths, strict=True)]
        ends = later.starts + later.lengths
        parts += [later.targets[s:e] for s, e in zip(later.starts, ends, strict=True)]
        return AddressMap._of(ids, lengths, parts)

    def apply(self, addresses: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
        """The new address of each of `addresses` (unchanged outside the rewritten
        fragments) and a mask of those still alive (False: the row was deleted)."""
        addresses = np.asarray(addresses, dtype=np.uint64)
        out = addresses.copy()
        if not len(self.fragments) or not len(addresses):
            return out, out != GONE
        frag = addresses >> _SHIFT
        pos = np.searchsorted(self.fragments, frag)
        pos_c = np.minimum(pos, len(self.fragments) - 1)
        moved = self.fragments[pos_c] == frag
        offsets = (addresses[moved] & _LOW).astype(np.int64)
        if np.any(offsets >= self.lengths[pos_c[moved]]):
            raise CorruptFileError(where, "index names a row past the end of its fragment")
        out[moved] = self.targets[self.starts[pos_c[moved]] + offsets]
        keep = out != GONE
        return out, keep

    def covers(self, fragment: int) -> bool:
        """Whether compaction rewrote `fragment`."""
        i = int(np.searchsorted(self.fragments, np.uint64(fragment)))
        return i < len(self.fragments) and int(self.fragments[i]) == fragment

    def length(self, fragment: int) -> int:
        """Physical rows of a rewritten fragment."""
        return int(self.lengths[int(np.searchsorted(self.fragments, np.uint64(fragment)))])
