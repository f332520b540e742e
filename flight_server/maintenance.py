"""Scheduled maintenance (`--maintenance-interval`): compaction and index updates of every
dataset under the root, so that steady small appends do not leave reads walking hundreds
of small fragments and indices missing the newest ones.

Each round opens every dataset's latest version and
- compacts it (`compact_files` with its defaults) when it has `--maintenance-fragments` or
  more fragments under the compacted size;
- brings its indices up to date (`optimize_indices`: the new fragments into a segment of
  their own) when one of them misses a fragment.

Both are ordinary commits, safe beside writers: a compaction that loses to a concurrent
delete or update of its fragments, or any other failure, leaves the dataset for the next
round (logged, counted under the `maintenance` commits' failures).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from quiver.flight_server import metrics
from quiver.flight_server.names import discover
from quiver.format.dataset import LanceDataset, dataset
from quiver.format.dataset.compaction import target_rows

log = logging.getLogger("quiver.maintenance")


@dataclass
class RoundStats:
    """What one round did."""

    datasets: int = 0
    compacted: int = 0
    fragments_removed: int = 0
    indices_updated: int = 0
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
                ds = dataset(h.uri(found.name), storage_options=h.storage_options)
                self._compact(found.name, ds, stats)
                self._update_indices(found.name, ds, stats)
            except Exception as e:  # noqa: BLE001 - one dataset must not stop the round
                stats.failed += 1
                log.warning("maintenance of %r skipped this round: %s", found.name, e)
        log.debug("maintenance round: %s", stats)
        return stats

    def _compact(self, name: str, ds: LanceDataset, stats: RoundStats) -> None:
        target = target_rows(ds.core)
        small = sum(1 for f in ds.manifest.pb.fragments if int(f.physical_rows) < target)
        if small < self.min_fragments:
            return
        done = ds.optimize.compact_files()
        if done.fragments_removed:
            metrics.committed("compact")
            stats.compacted += 1
            stats.fragments_removed += done.fragments_removed
            log.info(
                "maintenance compacted %r: %d fragments into %d (version %d)",
                name,
                done.fragments_removed,
                done.fragments_added,
                ds.version,
            )

    def _update_indices(self, name: str, ds: LanceDataset, stats: RoundStats) -> None:
        fragments = {int(f.id) for f in ds.manifest.pb.fragments}
        stale = [
            i["name"]
            for i in ds.list_indices()
            if not fragments <= set(i.get("fragment_ids") or ()) and not i["name"].startswith("__")
        ]
        if not stale:
            return
        before = ds.version
        ds.optimize.optimize_indices(index_names=sorted(set(stale)))
        if ds.version != before:
            metrics.committed("optimize_indices")
            stats.indices_updated += 1
            log.info("maintenance updated the indices %s of %r", sorted(set(stale)), name)
