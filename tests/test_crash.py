"""A writer killed with SIGKILL at random points never leaves an unreadable dataset or loses
a committed row: every version that exists reads fully, in both engines."""

from __future__ import annotations

import datetime
import os
import random
import signal
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
TRIALS = 50

# Imports once, then forks one writer per trial: each child appends until it is killed, and
# the parent reaps it. (A fresh interpreter per trial spent a second of CPU importing.)
_WRITERS = textwrap.dedent(
    """
    import os, sys
    import pyarrow as pa
    from quiver.format.dataset import dataset, write_dataset
    uri = sys.argv[1]
    print("ready", flush=True)
    for _ in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    n = dataset(uri).count_rows()
                    big = pa.table({"seq": pa.array(range(n, n + 2000), pa.int64()),
                                    "pad": pa.array(["x" * 50] * 2000)})
                    write_dataset(big, uri, mode="append", max_rows_per_file=700)
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print("killed" if os.WIFSIGNALED(status) else f"exited {status}", flush=True)
    """
)


def test_sigkill_at_random_points_never_corrupts(tmp_path: Path):
    uri = str(tmp_path / "ds")
    write_dataset(
        pa.table({"seq": pa.array([], pa.int64()), "pad": pa.array([], pa.string())}),
        uri,
        data_storage_version="2.0",
    )
    rng = random.Random(1234)
    writers = subprocess.Popen(
        [sys.executable, "-c", _WRITERS, uri],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writers.stdin is not None and writers.stdout is not None
    assert writers.stdout.readline().strip() == "ready"
    try:
        for trial in range(TRIALS):
            writers.stdin.write("go\n")
            writers.stdin.flush()
            pid = int(writers.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(pid, signal.SIGKILL)
            assert writers.stdout.readline().strip() == "killed", f"trial {trial}"
            _check_after_kill(uri, trial)
    finally:
        writers.kill()
        writers.wait(timeout=30)
    assert lance.dataset(uri).version > TRIALS // 4  # the writers did commit, killed or not
    for v in range(1, lance.dataset(uri).version + 1):
        n = 2000 * (v - 1)
        assert dataset(uri, version=v).count_rows() == n
        assert lance.dataset(uri, version=v).count_rows() == n
    # what the killed writers left behind is removable by cleanup, and nothing else goes
    ds = dataset(uri)
    rows = ds.to_table()
    ds.cleanup_old_versions(older_than=datetime.timedelta(0), delete_unverified=True)
    referenced = {df.path for f in dataset(uri).get_fragments() for df in f.data_files()}
    assert {p.name for p in (Path(uri) / "data").iterdir()} == referenced
    assert lance.dataset(uri).to_table() == rows


def _check_after_kill(uri: str, trial: int) -> None:
    ref = lance.dataset(uri)
    latest = ref.to_table().column("seq").to_pylist()
    # every commit appended 2000 consecutive rows on top of the previous version
    assert latest == list(range(len(latest))), f"trial {trial}: rows lost or duplicated"
    assert len(latest) == 2000 * (ref.version - 1), f"trial {trial}"
    assert dataset(uri).count_rows() == len(latest)
