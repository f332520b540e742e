"""A dataset's version history as pylance's `versions()` lists it."""

from __future__ import annotations

from typing import Any

from quiver.format.io.store import ObjectStore
from quiver.format.table import versions as _versions


def version_history(store: ObjectStore) -> list[dict[str, Any]]:
    """Every version of the dataset (or branch) at `store` with its commit time and summary
    statistics, oldest first."""
    out = []
    entries = _versions.list_manifests(store)
    for v in sorted(entries):
        m = _versions.load_manifest(store, entries[v])
        frags = m.pb.fragments
        deleted = sum(f.deletion_file.num_deleted_rows for f in frags)
        physical = sum(f.physical_rows for f in frags)
        out.append(
            {
                "version": v,
                "timestamp": _versions.shown_time(m.pb.timestamp.ToNanoseconds()),
                "metadata": {
                    "total_data_file_rows": str(physical),
                    "total_data_files": str(sum(len(f.files) for f in frags)),
                    "total_deletion_file_rows": str(deleted),
                    "total_deletion_files": str(
                        sum(1 for f in frags if f.HasField("deletion_file"))
                    ),
                    "total_files_size": str(sum(d.file_size_bytes for f in frags for d in f.files)),
                    "total_fragments": str(len(frags)),
                    "total_rows": str(physical - deleted),
                },
            }
        )
    return out
