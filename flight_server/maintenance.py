"""Scheduled maintenance (`--maintenance-interval`): compaction and index updates of every
dataset under the root, so that steady small appends do not leave reads walking hundreds
of small fragments and indices missing the newest ones.

Each round opens every dataset's latest version and
- compacts it (`compact_files` with its defaults) when it has `--maintenance-fragments` or
  more fragments under the compacted size;
- brings its indices up to date (`optimize_indices`: the new fragments into a segment of
  their own) when one of them misses a fragment.

Both are ordinary commits, safe beside writers: a compaction that loses to a concurrent
delete or update of its fragments is planned again on the new version (up to
`COMPACTION_ATTEMPTS` times); that and any other failure leaves the dataset for the next
round (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from quiver.flight_server import metrics
from quiver.flight_server.memory import release_free_memory
from quiver.flight_server.names import discover
from quiver.format.dataset import LanceDataset, dataset
from quiver.format.dataset.compaction import target_rows
from quiver.format.errors import CommitConflictError

log = logging.getLogger("quiver.maintenance")
_T = TypeVar("_T")
# A compaction that loses to a concurrent update of its fragments is planned again on the
# new version this many times in one round.
COMPACTION_ATTEMPTS = 4


@dataclass
class RoundStats:
    """What one round did."""

    datasets: int = 0
    compacted: int = 0
    fragments_removed: int = 0
    indices_updated: int = 0
    conflicts: int = 0  # compactions planned again after losing to a concurrent commit
    failed: int = 0


class Maintenance:
    """One maintenance round per `run()` over the datasets of a server's root."""

    def __init__(self, handles: Any, min_fragments: int) -> None:
        self.handles = handles
        self.min_fragments = min_fragments

    def run(self) -> RoundStats:
        stats = RoundStats()
        h = self.handles
        for found in discover(h.root, h.storage_options):
            stats.datasets += 1
            try:
                self._compact(found.name, stats)
                self._update_indices(found.name, stats)
            except Exception as e:  # noqa: BLE001 - one dataset must not stop the round
                stats.failed += 1
                log.warning("maintenance of %r skipped this round: %s", found.name, e)
        if stats.compacted or stats.indices_updated:
            # a compaction's decoded batches and an index build's buffers are free now, but
            # glibc keeps them in its heaps while streams run beside: give them back
            release_free_memory()
        log.debug("maintenance round: %s", stats)
        return stats

    def _latest(self, name: str) -> LanceDataset:
        return dataset(self.handles.uri(name), storage_options=self.handles.storage_options)

    def _retried(self, name: str, step: Callable[[LanceDataset], _T], stats: RoundStats) -> _T:
        """`step` on the latest version, planned again on the newer one when a concurrent
        commit wins (an update or delete of the same fragments: upserts touch small
        fragments all the time)."""
        for attempt in range(COMPACTION_ATTEMPTS):
            try:
                return step(self._latest(name))
            except CommitConflictError as e:
                if not e.retryable or attempt + 1 == COMPACTION_ATTEMPTS:
                    raise
                stats.conflicts += 1
        raise AssertionError("unreachable")

    def _compact(self, name: str, stats: RoundStats) -> None:
        ds = self._latest(name)
        target = target_rows(ds.core)
        small = sum(1 for f in ds.manifest.pb.fragments if int(f.physical_rows) < target)
        if small < self.min_fragments:
            return

        def compact(d: LanceDataset) -> tuple[Any, int]:
            return d.optimize.compact_files(), d.version

        done, version = self._retried(name, compact, stats)
        if done.fragments_removed:
            metrics.committed("compact")
            stats.compacted += 1
            stats.fragments_removed += done.fragments_removed
            log.info(
                "maintenance compacted %r: %d fragments into %d (version %d)",
                name,
                done.fragments_removed,
                done.fragments_added,
                version,
            )

    def _update_indices(self, name: str, stats: RoundStats) -> None:
        def update(ds: LanceDataset) -> list[str]:
            fragments = {int(f.id) for f in ds.manifest.pb.fragments}
            stale = sorted(
                {
                    i["name"]
                    for i in ds.list_indices()
                    if not fragments <= set(i.get("fragment_ids") or ())
                    and not i["name"].startswith("__")
                }
            )
            if stale:
                ds.optimize.optimize_indices(index_names=stale)
            return stale

        stale = self._retried(name, update, stats)
        if stale:
            metrics.committed("optimize_indices")
            stats.indices_updated += 1
            log.info("maintenance updated the indices %s of %r", stale, name)
