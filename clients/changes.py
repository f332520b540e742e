"""Row-level changes through a Quiver server: `update` (an action) and `merge` (a merge
DoPut of the source rows: upserts, insert-if-not-exists, matched deletes, replace-range
merges), each committed as one new version. A mixin of `clients.Client`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quiver.clients.writes import new_key
from quiver.wire.requests import backfill_command, merge_command


class RowChanges:
    """`Client` methods that change rows in place (they call its `action` and `_put`)."""

    def update(
        self,
        dataset: str,
        updates: Mapping[str, str],
        where: str | None = None,
        *,
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Set columns to SQL expressions (`{"score": "score * 2"}`) on the rows matching
        `where` (every row when None), in one new version (pylance's `update`). Keyed and
        sent again on `Unavailable` as `write` is: `score * 2` applies once.

        Returns `{"version": N, "updated_rows": R}` (`{"version", "duplicate": True}` when
        the key had committed already).
        """
        body: dict[str, Any] = {"dataset": dataset, "updates": dict(updates)}
        if where is not None:
            body["where"] = where
        body["idempotency_key"] = idempotency_key or new_key()
        return self._acted("update", body, retries)  # type: ignore[attr-defined]

    def delete(
        self,
        dataset: str,
        predicate: str,
        *,
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Delete the rows matching a SQL predicate, in one new version (keyed and sent
        again on `Unavailable` as `update` is).

        Returns `{"version": N, "deleted_rows": R}`.
        """
        body = {"dataset": dataset, "predicate": predicate}
        body["idempotency_key"] = idempotency_key or new_key()
        return self._acted("delete", body, retries)  # type: ignore[attr-defined]

    def merge(
        self,
        dataset: str,
        data: Any,
        on: str | Sequence[str] | None = None,
        *,
        when_matched: str = "update_all",
        matched_condition: str | None = None,
        when_not_matched: str | None = "insert_all",
        when_not_matched_by_source: str | None = None,
        by_source_filter: str | None = None,
        conflict_retries: int | None = None,
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Merge `data` into `dataset` on the `on` columns (default: its unenforced primary
        key), in one new version, as pylance's `merge_insert` does. The defaults upsert.
        Like `write`, the merge carries an idempotency key (a fresh one unless given) and
        is sent again up to `retries` times on `Unavailable`: it commits once.

        `when_matched`: "update_all" (only where `matched_condition`, SQL over `source.`
        and `target.` columns, holds), "delete", "fail" or "nothing"; `when_not_matched`:
        "insert_all" or None; `when_not_matched_by_source`: "delete" (only target rows
        matching `by_source_filter`, when given) or None.

        Returns `{"version", "rows", "inserted_rows", "updated_rows", "deleted_rows"}`.
        """
        command = merge_command(
            dataset,
            list(on) if on is not None and not isinstance(on, str) else on,
            when_matched=when_matched,
            matched_condition=matched_condition,
            when_not_matched=when_not_matched,
            when_not_matched_by_source=when_not_matched_by_source,
            by_source_filter=by_source_filter,
            conflict_retries=conflict_retries,
            idempotency_key=idempotency_key or new_key(),
        )
        return self._resent(command, data, retries)  # type: ignore[attr-defined]

    def backfill(
        self,
        dataset: str,
        data: Any,
        mode: str = "add_columns",
        *,
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Apply rows naming their `_rowaddr` (read with `columns=[..., "_rowaddr"]`) in one
        version: new columns (`mode` "add_columns"; rows not named get NULL, no data file is
        rewritten) or new values of existing columns ("update_columns"). Keyed and sent
        again on `Unavailable` as `write` is.

        Returns `{"version", "rows"}` (and `"updated_rows"` for update_columns).
        """
        command = backfill_command(dataset, mode, idempotency_key or new_key())
        return self._resent(command, data, retries)  # type: ignore[attr-defined]

    def stage_source(self, dataset: str, data: Any, *, job: str | None = None) -> list[str]:
        """Stage rows as the source of a change to come (a share of an upsert or a
        backfill, `_rowaddr` included): the fragment strings to `apply_staged`."""
        return self.stage(dataset, data, mode="source", job=job)

    def apply_staged(
        self,
        dataset: str,
        fragments: Sequence[str],
        *,
        merge: Mapping[str, Any] | None = None,
        backfill: str | None = None,
        job: str | None = None,
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Apply staged sources (of many writers) as one change, committed once: a merge
        (`merge` is `merge_command(...)["merge"]`) or a backfill by row address
        (`backfill`: "add_columns" or "update_columns"). With `job`, the job's other
        attempts' files go too; with `idempotency_key`, a repeated call answers the version
        the first made (`"duplicate": true`) instead of applying the rows again, and the
        call is sent again (same key) up to `retries` times on `Unavailable`."""
        body: dict[str, Any] = {"dataset": dataset, "fragments": list(fragments)}
        if merge is not None:
            body["merge"] = dict(merge)
        if backfill is not None:
            body["backfill"] = backfill
        if job is not None:
            body["job"] = job
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        resent = retries if idempotency_key is not None else 0  # only a key makes it safe
        return self._acted("apply_staged", body, resent)  # type: ignore[attr-defined]
