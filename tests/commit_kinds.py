"""Every kind of commit a client makes through the server, with its effect on a model of
the rows: for tests that disturb commits (kills, storage faults) and check each change
landed exactly once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.clients import Client


class Model:
    """The rows the changes make: id -> v."""

    def __init__(self, n: int) -> None:
        self.rows = dict.fromkeys(range(n), 0)
        self.next_id = n

    def table(self) -> pa.Table:
        ids = np.array(sorted(self.rows), np.int64)
        return pa.table({"id": ids, "v": np.array([self.rows[i] for i in ids], np.int64)})


def _rows(ids: np.ndarray, v: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(np.full(len(ids), v))})


# a client, an idempotency key and the client's retries -> the answer
Request = Callable[[Client, str, int], Any]


def _append(model: Model, trial: int) -> Request:
    new = np.arange(model.next_id, model.next_id + 300)
    model.next_id += 300
    for i in new.tolist():
        model.rows[i] = 0
    return lambda c, k, r: c.write("t", _rows(new, 0), idempotency_key=k, retries=r)


def _merge(model: Model, trial: int) -> Request:
    rng = np.random.default_rng(trial)
    old = np.sort(rng.choice(sorted(model.rows), 60, replace=False))
    fresh = np.arange(model.next_id, model.next_id + 10)
    model.next_id += 10
    for i in [*old.tolist(), *fresh.tolist()]:
        model.rows[i] = trial
    upsert = _rows(np.concatenate([old, fresh]), trial)
    return lambda c, k, r: c.merge("t", upsert, "id", idempotency_key=k, retries=r)


def _update(model: Model, trial: int) -> Request:
    m = trial % 7
    for i in model.rows:
        if i % 7 == m:
            model.rows[i] += 1
    return lambda c, k, r: c.update(
        "t", {"v": "v + 1"}, f"id % 7 = {m}", idempotency_key=k, retries=r
    )


def _delete(model: Model, trial: int) -> Request:
    m = trial % 97
    for i in [i for i in model.rows if i % 97 == m]:
        del model.rows[i]
    return lambda c, k, r: c.delete("t", f"id % 97 = {m}", idempotency_key=k, retries=r)


# each kind of commit: the request, its effect on the model applied once
KINDS: dict[str, Callable[[Model, int], Request]] = {
    "append": _append,
    "merge": _merge,
    "update": _update,
    "delete": _delete,
    "compact": lambda m, t: lambda c, k, r: c.compact("t", target_rows_per_fragment=2_000),
    "index": lambda m, t: lambda c, k, r: c.create_index("t", "id", "BTREE", replace=True),
    "cleanup": lambda m, t: lambda c, k, r: c.cleanup("t", older_than=0),
}
