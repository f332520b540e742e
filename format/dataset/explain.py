"""`explain_plan()`: what a scan will do, in Quiver's terms: the version and fragments read,
the columns returned, the filter and what the scalar indices leave of it (fragments skipped,
candidate rows read in blocks), offset, limit, order and batches."""

from __future__ import annotations

from typing import Any

from quiver.format.index.pruning import BLOCK_ROWS


def explain(
    scan: Any,
    *,
    verbose: bool = False,
    order: list[Any] | None = None,
    window: tuple[int, int | None] | None = None,
) -> str:
    """The plan of a `Scanner` as text; for an ordered scan, of the sort above it too, and
    its `window` (offset, limit)."""
    core = scan._dataset
    frags = scan._fragments
    deleted = sum(int(f.metadata.deletion_file.num_deleted_rows) for f in frags)
    live = sum(f.physical_rows for f in frags) - deleted
    branch = f" on branch {core.branch!r}" if core.branch else ""
    lines = [
        f"Scan {core.uri} version {core.version}{branch} ({core.data_storage_version} files)",
        f"  fragments: {len(frags)}, {live:,} live rows",
        f"  columns returned: {', '.join(scan._projection.names) or '(none)'}{_ids(scan)}",
    ]
    if scan._filter is not None:
        lines.append(f"  filter: {scan._filter.sql} (reads {', '.join(scan._filter.columns)})")
        pruning = scan.index_pruning
        if pruning is None:
            lines.append("    no index narrows it: every row is read and tested")
        else:
            skipped = [f.fragment_id for f in frags if not pruning.may_match(f.fragment_id)]
            lines.append(
                f"    narrowed by {', '.join(pruning.indices)}: {len(skipped)} fragments "
                f"skipped, {len(pruning.rows):,} candidate rows in {len(pruning.covered)} "
                f"indexed fragments read in blocks of {BLOCK_ROWS:,} rows; fragments the "
                "indices do not cover are read whole"
            )
            if verbose:
                lines.append(f"    skipped fragments: {skipped}")
    if order:
        keys = ", ".join(
            f"{o.column_name} {'ASC' if o.ascending else 'DESC'} "
            f"NULLS {'FIRST' if o.nulls_first else 'LAST'}"
            for o in order
        )
        lines.append(f"  then every row sorted by {keys}")
    offset, limit = window or (scan._offset, scan._limit)
    if offset or limit is not None:
        lines.append(f"  offset {offset}, limit {limit}")
    step = scan._read_step()
    decoded = f" (decoded {step:,} rows at a time)" if step > scan._batch_size else ""
    lines.append(
        f"  batches of up to {scan._batch_size:,} rows{decoded}, {scan._fragment_readahead} "
        "fragments decoded ahead"
    )
    if verbose:
        lines.append(f"  fragment ids: {[f.fragment_id for f in frags]}")
    return "\n".join(lines)


def _ids(scan: Any) -> str:
    """The row id columns a scan adds."""
    wanted = (("_rowid", scan._with_row_id), ("_rowaddr", scan._with_row_address))
    return "".join(f" + {name}" for name, on in wanted if on)
