"""A real `quiver serve` in its own process, for load and memory tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def quiver_serve(root: Path, *args: str, timeout: float = 60) -> Iterator[tuple[str, int]]:
    """Run `python -m flight_server serve` on `root`; yields (uri, pid); SIGTERMs it after."""
    port = free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiver", "serve", "--root", str(root), "--port", str(port),
         "--exit-with-parent", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )  # fmt: skip
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {(root / 'server.log').read_text()[-2000:]}")
        # The ready line comes after every listener (Flight, health, metrics) is up; the
        # Flight port alone accepts connections before the metrics endpoint exists.
        if b"quiver: serving" in (root / "server.log").read_bytes():
            break
        if time.time() > deadline:
            proc.kill()
            raise TimeoutError("quiver serve did not start")
        time.sleep(0.1)
    try:
        yield f"grpc://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")
