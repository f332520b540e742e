"""The soak benchmark, short: one server on S3 (moto) under readers, appenders, upserting
writers, cleanup and scheduled maintenance; every row checked at the end
(`benchmarks/soak.py`; `make bench-soak` runs it for 30 minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_short_soak_keeps_every_row_and_compacts() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--minutes", "0.5", "--window", "10",
         "--readers", "2", "--appenders", "2", "--append-every", "1", "--upserters", "2",
         "--upsert-every", "3", "--maintenance", "5", "--cleanup", "10"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rows: all correct" in out.stdout
    assert "every acknowledged row there: True" in out.stdout
    windows = [line for line in out.stdout.splitlines() if line.startswith("| 0.")]
    assert len(windows) == 3
    # maintenance compacted while the writers wrote
    assert int(windows[-1].split("|")[10]) >= 1, out.stdout
