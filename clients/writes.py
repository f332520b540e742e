"""Writes through a Quiver server: `write` (one DoPut committed at once, idempotent and
resent on `Unavailable`), and the two-step `stage` / `commit` / `abort` of fragments that
Spark's writers use. A mixin of `clients.Client`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from quiver.clients.data import DataLike
from quiver.clients.errors import InvalidArgument, QuiverError, Unavailable
from quiver.wire.requests import MODES, put_command


def new_key() -> str:
    """A fresh idempotency key (a write's own, when the caller gives none)."""
    return uuid.uuid4().hex


class Writes:
    """`Client` methods that write data (they call its `_put` and `action`)."""

    def write(
        self,
        dataset: str,
        data: DataLike,
        *,
        mode: str = "append",
        idempotency_key: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Write and commit in one call (`mode`: append, create or overwrite).

        Returns the server's answer, `{"version": N, "rows": R}` (and `"duplicate": True`
        when the key had committed already). Every write carries an idempotency key (a
        fresh one unless given): when the server answers `Unavailable` (its storage kept
        failing, the commit may or may not have landed), data that can be sent again (a
        table, a batch, rows; not a stream) is sent again up to `retries` times with the
        same key, so the rows are committed once.
        """
        key = idempotency_key or new_key()
        return self._resent(put_command(dataset, mode=mode, idempotency_key=key), data, retries)

    def _acted(self, name: str, body: dict[str, Any], retries: int) -> Any:
        """The action `name`, sent again (the same body, so the same key) up to `retries`
        times on `Unavailable`; 0 for a body without a key."""
        return _again(lambda: self.action(name, body), retries)  # type: ignore[attr-defined]

    def _resent(self, command: Mapping[str, Any], data: DataLike, retries: int) -> Any:
        """`_put` of a keyed `command`, sent again (same key) on `Unavailable` when `data`
        can be sent again (a table, a batch, rows; not a stream)."""
        again = isinstance(data, pa.Table | pa.RecordBatch | Mapping | list)
        send = self._put  # type: ignore[attr-defined]
        return _again(lambda: send(command, data), retries if again else 0)

    def stage(
        self, dataset: str, data: DataLike, *, mode: str = "append", job: str | None = None
    ) -> list[str]:
        """Write data files without committing; the opaque fragments to `commit` or `abort`.

        Stage with the mode of the commit to come: fragments staged for `append` can only
        be committed by an append (the server refuses them for create or overwrite). Puts
        staged under one `job` are settled together: the job's commit or abort removes the
        files of its puts the commit does not list (e.g. failed task attempts), and the job
        takes no puts after that.
        """
        answer = self._put(put_command(dataset, mode=mode, commit=False, job=job), data)
        fragments = answer.get("fragments")
        if not isinstance(fragments, list):
            raise QuiverError("the server answered a staged DoPut without fragments")
        return [str(f) for f in fragments]

    def commit(
        self,
        dataset: str,
        fragments: Sequence[str],
        *,
        operation: str = "append",
        read_version: int | None = None,
        idempotency_key: str | None = None,
        job: str | None = None,
        retries: int = 3,
    ) -> dict[str, Any]:
        """Make staged fragments visible in one new version (all or none).

        Raises `CommitConflict` (with `.retryable` and `.version`) when a concurrent commit
        won; the same `idempotency_key` never commits twice. With `job`, also ends that
        staging job, removing its puts' files that are not committed. A keyed commit is
        sent again (same key) up to `retries` times on `Unavailable`: the server could not
        tell whether it landed, and the key settles it.
        """
        if operation not in MODES:
            raise InvalidArgument(f"operation must be one of {', '.join(MODES)}, not {operation!r}")
        body: dict[str, Any] = {
            "dataset": dataset,
            "operation": operation,
            "fragments": list(fragments),
        }
        if read_version is not None:
            body["read_version"] = read_version
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        if job is not None:
            body["job"] = job
        return self._acted("commit", body, retries if idempotency_key is not None else 0)

    def abort(
        self, dataset: str, fragments: Sequence[str] = (), *, job: str | None = None
    ) -> dict[str, Any] | None:
        """Remove the files of staged fragments that will never be committed; with `job`,
        those of every put staged under the job too, and end the job."""
        body: dict[str, Any] = {"dataset": dataset, "fragments": list(fragments)}
        if job is not None:
            body["job"] = job
        return self.action("abort", body)


def _again(send: Callable[[], Any], retries: int) -> Any:
    """`send()`, called again up to `retries` times, with backoff, while it raises
    `Unavailable` (a keyed write whose outcome the server could not tell)."""
    for attempt in range(retries + 1):
        try:
            return send()
        except Unavailable:
            if attempt == retries:
                raise
            time.sleep(min(0.5 * 2**attempt, 8.0))
    raise AssertionError("unreachable")
