"""Concurrent writers on one dataset: ours and pylance's, in separate processes.

8 processes (4 Quiver, 4 pylance) append 12 one-row batches each at the same time; every
append must be present exactly once and every version readable by both engines. Then
deletes of disjoint rows race appends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset, write_dataset

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

_WORKER = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    engine, uri, writer, start, task, n = sys.argv[1:7]
    writer, n = int(writer), int(n)
    while time.time() < float(start):
        time.sleep(0.001)
    if engine == "quiver":
        from quiver.format.dataset import dataset, write_dataset
        append = lambda t: write_dataset(t, uri, mode="append")
        delete = lambda p: dataset(uri).delete(p)
    else:
        import lance
        append = lambda t: lance.write_dataset(t, uri, mode="append")
        delete = lambda p: lance.dataset(uri).delete(p)
    for i in range(n):
        if task == "append":
            append(pa.table({"writer": pa.array([writer], pa.int64()),
                             "seq": pa.array([i], pa.int64())}))
        else:
            delete(f"writer = {writer} AND seq = {i}")
    """
)


def _run_all(uri: str, jobs: list[tuple[str, int, str, int]], timeout: float = 300) -> None:
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, engine, uri, str(w), str(start), task, str(n)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for engine, w, task, n in jobs
    ]
    failures = []
    for (engine, w, task, _), p in zip(jobs, procs, strict=True):
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            failures.append(f"{engine} writer {w} ({task}) exited {p.returncode}:\n{err[-2000:]}")
    assert not failures, "\n".join(failures)


def _check_every_version(uri: str) -> None:
    ref = lance.dataset(uri)
    for v in range(1, ref.version + 1):
        theirs = ref.checkout_version(v).to_table()
        assert dataset(uri, version=v).to_table() == theirs, f"version {v}"


def test_eight_writers_append_concurrently(tmp_path: Path):
    uri = str(tmp_path / "ds")
    schema = pa.schema([("writer", pa.int64()), ("seq", pa.int64())])
    write_dataset(schema.empty_table(), uri, data_storage_version="2.0")
    jobs = [("quiver" if w < 4 else "pylance", w, "append", 12) for w in range(8)]
    _run_all(uri, jobs)
    table = lance.dataset(uri).to_table().sort_by([("writer", "ascending"), ("seq", "ascending")])
    expected = [(w, i) for w in range(8) for i in range(12)]
    got = list(
        zip(table.column("writer").to_pylist(), table.column("seq").to_pylist(), strict=True)
    )
    assert got == expected  # all 96 appends, each exactly once
    assert lance.dataset(uri).version == 97
    _check_every_version(uri)


def test_deletes_race_appends(tmp_path: Path):
    uri = str(tmp_path / "ds")
    seed = pa.table(
        {
            "writer": pa.array([w for w in range(4) for _ in range(10)], pa.int64()),
            "seq": pa.array([i for _ in range(4) for i in range(10)], pa.int64()),
        }
    )
    write_dataset(seed, uri, data_storage_version="2.0", max_rows_per_file=20)
    jobs = [
        ("quiver", 0, "delete", 10),
        ("pylance", 1, "delete", 10),
        ("quiver", 2, "delete", 10),
        ("pylance", 3, "delete", 10),
        ("quiver", 10, "append", 10),
        ("pylance", 11, "append", 10),
    ]
    _run_all(uri, jobs)
    table = lance.dataset(uri).to_table().sort_by([("writer", "ascending"), ("seq", "ascending")])
    expected = [(w, i) for w in (10, 11) for i in range(10)]
    got = list(
        zip(table.column("writer").to_pylist(), table.column("seq").to_pylist(), strict=True)
    )
    assert got == expected
    assert dataset(uri).to_table() == lance.dataset(uri).to_table()
    _check_every_version(uri)
