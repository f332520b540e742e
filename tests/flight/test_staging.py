"""The staging ledger: jobs settle every attempt, and expired stagings are swept.

A real server on loopback writes the files; what is left on disk is checked file by file and
the dataset is read back with pylance.
"""

from __future__ import annotations

import time

import flight_helpers
import lance
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error, files_under, table

from quiver.flight_server.staging import STAGING_DIR, StagingLedger
from quiver.format.io.store import open_store

served = flight_helpers.served
name = flight_helpers.name


def data_files(served: Served, name: str) -> list[str]:
    return [f for f in files_under(served.path(name)) if f.startswith("data/")]


def ledger_files(served: Served, name: str) -> list[str]:
    return [f for f in files_under(served.path(name)) if f.startswith(STAGING_DIR)]


def commit(served: Served, name: str, fragments: list[str], **extra: object) -> dict:
    body = {"dataset": name, "operation": "append", "fragments": fragments, **extra}
    return served.action("commit", body)


def test_job_commit_removes_other_attempts_and_ends_the_job(served: Served, name: str) -> None:
    served.put(name, table(10), mode="create")
    before = set(data_files(served, name))
    winner = served.put(name, table(5, start=10), commit=False, job="job-a")["fragments"]
    # a speculative or failed attempt of the same task whose message never reached the driver
    served.put(name, table(5, start=10), commit=False, job="job-a")
    assert len(data_files(served, name)) == len(before) + 2
    assert commit(served, name, winner, job="job-a")["version"] == 2
    assert lance.dataset(served.path(name)).to_table().equals(table(15))
    after = set(data_files(served, name))
    assert len(after - before) == 1  # the loser's file is gone, the winner's committed
    assert ledger_files(served, name) == [f"{STAGING_DIR}/job-a/_done"]
    # a late attempt cannot join the ended job and leaves nothing behind
    with pytest.raises(fl.FlightError) as exc:
        served.put(name, table(5, start=10), commit=False, job="job-a")
    assert "already been committed or aborted" in assert_clean_error(exc.value, "invalid_argument")
    assert set(data_files(served, name)) == after


def test_job_abort_removes_files_of_attempts_the_driver_never_heard_of(
    served: Served, name: str
) -> None:
    served.put(name, table(10), mode="create")
    before = data_files(served, name)
    served.put(name, table(5), commit=False, job="job-b")  # the task died after staging
    served.put(name, table(5), commit=False, job="job-b")
    result = served.action("abort", {"dataset": name, "fragments": [], "job": "job-b"})
    assert result == {"removed_files": 2, "kept_files": 0}
    assert data_files(served, name) == before
    assert lance.dataset(served.path(name)).to_table().equals(table(10))


def test_job_abort_of_a_new_dataset_leaves_no_directory(served: Served, name: str) -> None:
    served.put(name, table(5), mode="create", commit=False, job="job-c")
    served.action("abort", {"dataset": name, "job": "job-c"})
    assert files_under(served.path(name)) == []


def test_commit_without_job_forgets_its_records(served: Served, name: str) -> None:
    staged = served.put(name, table(5), mode="create", commit=False)["fragments"]
    assert len(ledger_files(served, name)) == 1
    served.action("commit", {"dataset": name, "operation": "create", "fragments": staged})
    assert ledger_files(served, name) == []


def test_bad_job_names_are_refused(served: Served, name: str) -> None:
    for bad in ["", "../x", "_put-x", "a/b", "x" * 129, 7]:
        with pytest.raises(fl.FlightError) as exc:
            served.put(name, table(1), commit=False, job=bad)
        assert_clean_error(exc.value, "invalid_argument")
    with pytest.raises(fl.FlightError) as exc:
        served.put(name, table(1), job="committing-put")  # jobs are for staging puts
    assert "'job'" in assert_clean_error(exc.value, "invalid_argument")
    assert files_under(served.path(name)) == []


def test_sweep_removes_expired_stagings_only(
    served: Served, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = served.server.service
    served.put(name, table(10), mode="create")
    committed = set(data_files(served, name))
    expired = served.put(name, table(5, start=10), commit=False)["fragments"]
    served.put(name, table(5, start=10), commit=False, job="job-d")
    later = time.time() + service.staged_ttl + 3600
    fresh = served.put(name, table(5, start=10), commit=False)["fragments"]  # still committable
    # nothing has expired yet: the sweep keeps everything
    assert service.sweep_staging()["removed_files"] == 0
    assert len(data_files(served, name)) == len(committed) + 3
    monkeypatch.setattr(time, "time", lambda: later)
    # an expired fragment can no longer be committed, and the sweep removes its file
    with pytest.raises(fl.FlightError) as exc:
        commit(served, name, expired)
    assert "expired" in assert_clean_error(exc.value, "invalid_argument")
    monkeypatch.undo()
    stats = service.sweep_staging(now=later)
    assert stats["removed_files"] == 3  # the expired, the job's, and (by time) the fresh one
    assert set(data_files(served, name)) == committed
    assert ledger_files(served, name) == []
    with pytest.raises(fl.FlightError):
        commit(served, name, fresh)  # its file is gone: refused, nothing committed
    assert lance.dataset(served.path(name)).to_table().equals(table(10))


def test_sweep_keeps_files_a_commit_made_visible(served: Served, name: str) -> None:
    service = served.server.service
    staged = served.put(name, table(5), mode="create", commit=False)["fragments"]
    served.action("commit", {"dataset": name, "operation": "create", "fragments": staged})
    # a ledger record left behind (e.g. a crash between commit and settling) is harmless
    files = [f.removeprefix("data/") for f in data_files(served, name)]
    StagingLedger(open_store(served.path(name))).record("job-e", files)
    stats = service.sweep_staging(now=time.time() + service.staged_ttl + 3600)
    assert stats["removed_files"] == 0 and stats["records"] == 1
    assert lance.dataset(served.path(name)).to_table().equals(table(5))


def test_sweep_removes_a_never_committed_new_dataset(served: Served, name: str) -> None:
    service = served.server.service
    served.put(name, table(5), mode="create", commit=False)
    service.sweep_staging(now=time.time() + service.staged_ttl + 3600)
    assert files_under(served.path(name)) == []


def test_staging_settings_are_validated() -> None:
    from quiver.flight_server.config import ConfigError, ServerConfig

    with pytest.raises(ConfigError, match="--staged-ttl"):
        ServerConfig(staged_ttl=5)
    with pytest.raises(ConfigError, match="--sweep-interval"):
        ServerConfig(sweep_interval=-1)
    config = ServerConfig.from_args(
        ["--staged-ttl", "120"], {"QUIVER_SWEEP_INTERVAL": "0", "QUIVER_STAGED_TTL": "99"}
    )
    assert (config.staged_ttl, config.sweep_interval) == (120, 0)
