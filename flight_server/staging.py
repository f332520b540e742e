"""A ledger of staged data files (written by DoPut(commit=false), not yet committed).

Staged files are referenced by no manifest, so nothing in the Lance format tells a finished
upload from a forgotten one. Each staging put leaves a small record beside the dataset,
``_quiver_staging/<job>/<record>.json`` listing its files; Lance readers ignore the directory.
The records let the server

- remove, when a job commits or aborts, the files of every other attempt staged under the
  same job (a Spark task that died after staging, the loser of a speculative attempt), and
  refuse staging into a job that already ended (``_done`` marker), and
- sweep files whose staging expired without a commit (a driver that died), since their
  signed fragment strings can no longer be committed.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from quiver.format.io.store import ObjectStore

STAGING_DIR = "_quiver_staging"
DONE_MARKER = "_done"
JOB_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

log = logging.getLogger("quiver.staging")


@dataclass(frozen=True)
class Record:
    """One staging put: its job, record id, creation time (unix s) and data file paths."""

    job: str
    record: str
    created: float
    files: tuple[str, ...]  # relative to the dataset's data/ directory


def valid_job(job: str) -> bool:
    """Whether `job` can name a staging job (a path segment: no slashes, no dots first)."""
    return bool(JOB_PATTERN.match(job)) and job != DONE_MARKER


AUTO_JOB_PREFIX = "_put-"  # named jobs start with a letter or digit, so never clash


def new_job() -> str:
    """A fresh job id, for puts that name none (one put, one job)."""
    return f"{AUTO_JOB_PREFIX}{uuid.uuid4().hex}"


class StagingLedger:
    """The staging records of one dataset."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _path(self, *parts: str) -> str:
        return "/".join((STAGING_DIR, *parts))

    # -- writing ----------------------------------------------------------------------
    def record(self, job: str, files: Iterable[str]) -> str:
        """Record a staging put's files under `job`; returns the record id."""
        rec = uuid.uuid4().hex
        body = {"files": list(files), "created": time.time()}
        self.store.put(self._path(job, f"{rec}.json"), json.dumps(body).encode())
        return rec

    def finish(self, job: str) -> None:
        """Mark `job` ended (committed or aborted): later puts into it are refused."""
        if not self.finished(job):
            self.store.put(self._path(job, DONE_MARKER), str(time.time()).encode())

    def finished(self, job: str) -> bool:
        """Whether `job` has ended."""
        return self.store.exists(self._path(job, DONE_MARKER))

    def drop(self, job: str, record: str) -> None:
        """Forget one record (its files were committed or removed)."""
        self.store.delete(self._path(job, f"{record}.json"))

    # -- reading ----------------------------------------------------------------------
    def jobs(self) -> list[str]:
        """Every job with a directory in the ledger."""
        return self.store.list_subdirs(STAGING_DIR)

    def records(self, job: str) -> list[Record]:
        """The job's records; unreadable ones (a put cut off mid-write) are skipped."""
        names = [n for n, _, _ in self.store.list_dir(self._path(job)) if n.endswith(".json")]
        found = (self.read(job, n[: -len(".json")]) for n in names)
        return [r for r in found if r is not None]

    def read(self, job: str, record: str) -> Record | None:
        """One record, or None if it is gone or unreadable."""
        try:
            body = json.loads(self.store.read_all(self._path(job, f"{record}.json")))
            files = tuple(str(f) for f in body["files"])
            created = float(body["created"])
        except FileNotFoundError:
            return None  # dropped meanwhile
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable staging record %s/%s skipped", job, record)
            return None
        return Record(job, record, created, files)

    def finished_at(self, job: str) -> float | None:
        """When `job` ended (unix s), or None while it runs."""
        try:
            return float(self.store.read_all(self._path(job, DONE_MARKER)))
        except FileNotFoundError:
            return None
        except ValueError:
            return 0.0

    def remove_job(self, job: str) -> None:
        """Delete the job's directory (its records must already be settled)."""
        for name, _, _ in self.store.list_dir(self._path(job)):
            self.store.delete(self._path(job, name))
        self.store.remove_empty_dir(self._path(job))
        self.store.remove_empty_dir(STAGING_DIR)


class Sweeper:
    """Runs `sweep()` every `interval` seconds on a daemon thread until stopped (the staging
    sweep, and scheduled maintenance under the name `what`)."""

    def __init__(
        self, sweep: Callable[[], object], interval: float, what: str = "staging sweep"
    ) -> None:
        self._sweep = sweep
        self._interval = interval
        self._what = what
        self._stop = threading.Event()
        name = "quiver-" + what.replace(" ", "-")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Sweeper:
        """Start sweeping (the first sweep runs one interval from now)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the sweep in progress, if any."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                stats = self._sweep()
                log.debug("%s: %s", self._what, stats)
            except Exception:  # noqa: BLE001 - keep sweeping; the next run may succeed
                log.exception("%s failed", self._what)
