"""`quiver serve --exit-with-parent`: a server a script starts stops when the script dies,
even killed outright (no `finally` of the script's runs), so no server is left orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a parent that starts the server, prints its pid, then waits to be killed
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    server = subprocess.Popen(
        [sys.executable, "-m", "quiver", "serve", "--root", sys.argv[1], "--port", "0",
         "--drain-seconds", "1", *sys.argv[2:]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print(server.pid, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not reaped yet) is gone too
        return f.read().split(")")[-1].split()[0] != "Z"


def _orphan_after_parent_killed(tmp_path: Path, *flags: str, wait: float = 20) -> tuple[int, bool]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    server = int(parent.stdout.readline())
    time.sleep(3)  # the server is up (or at least started) before its parent dies
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + wait
    while time.time() < deadline and _alive(server):
        time.sleep(0.2)
    return server, _alive(server)


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_server_dies_with_the_script_that_started_it(tmp_path: Path) -> None:
    server, alive = _orphan_after_parent_killed(tmp_path, "--exit-with-parent")
    assert not alive, f"quiver serve {server} outlived its killed parent"


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_without_the_flag_a_server_outlives_its_parent(tmp_path: Path) -> None:
    server, alive = _orphan_after_parent_killed(tmp_path, wait=3)
    try:
        assert alive  # the flag is what stops it (a server under a supervisor keeps serving)
    finally:
        if _alive(server):
            os.kill(server, signal.SIGKILL)
