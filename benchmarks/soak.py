"""Soak: one Quiver server on S3 (moto) under long mixed load, with maintenance on.

    .venv/bin/python -m benchmarks.soak [--minutes 30] [--window 60] [--readers 16] [--read-every 4]
        [--appenders 4] [--append-every 4] [--upserters 2] [--upsert-every 10]
        [--maintenance 15] [--cleanup 120]
    make bench-soak

moto's S3 server runs in its own process; `quiver serve` on an `s3://` root in another,
with `--maintenance-interval` (compaction and index updates). A table of 10,000 rows with a
BTREE index on `id` takes, at once and for the whole run, from this process's threads:

- `--readers` readers, each a filtered read of 1,000 consecutive ids every `--read-every`
  seconds (the index answers for indexed fragments; two endpoints at a time);
- `--appenders` appenders, each appending 100 new rows every `--append-every` seconds
  (Client.write: an idempotency key, resent on unavailable);
- `--upserters` upserting writers, each merging on `id`, every `--upsert-every` seconds,
  100 existing rows of its own (even or odd ids) with a new value and 10 new rows;
- a cleanup every `--cleanup` seconds (versions older than a minute).

Every `--window` seconds a line: operations per second by kind, the readers' p50 / p99
latency, errors, the server's RSS, the table's fragments and the compactions so far (the
server's metrics). At the end: every row checked
(each id once, the appended and inserted ids all there, each upserted row holding its
writer's last acknowledged value), and the goals: the server's RSS at the end within 20 %
of its RSS a sixth into the run (5 minutes of 30), and the readers' p99 in the last window
within 1.5x the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.flight import Server, _free_port

ROOT = Path(__file__).resolve().parent.parent
BASE_ROWS = 10_000
_MOTO = (
    "import sys; sys.path.insert(0, 'tests');"
    "from moto_atomic import moto_s3\n"
    "with moto_s3('soak') as endpoint:\n"
    "    print(endpoint, flush=True)\n"
    "    sys.stdin.read()\n"
)


class Recorder:
    """Latencies and errors by operation, per window."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.last_error: dict[str, str] = {}

    def timed(self, kind: str, call: object) -> object:
        t0 = time.perf_counter()
        try:
            out = call()  # type: ignore[operator]
        except Exception as e:  # noqa: BLE001 - counted, reported
            with self.lock:
                self.errors[kind] += 1
                self.last_error[kind] = f"{type(e).__name__}: {str(e)[:200]}"
            return None
        with self.lock:
            self.times[kind].append(time.perf_counter() - t0)
        return out

    def take(self) -> tuple[dict[str, list[float]], dict[str, int]]:
        with self.lock:
            times, errors = self.times, self.errors
            self.times, self.errors = defaultdict(list), defaultdict(int)
        return times, errors


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _table(ids: np.ndarray, value: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(np.full(len(ids), value), pa.int64())}
    )


def soak(args: argparse.Namespace) -> int:
    from quiver.clients import Client

    moto = subprocess.Popen(
        [sys.executable, "-c", _MOTO], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    endpoint = moto.stdout.readline().strip()  # type: ignore[union-attr]
    os.environ["QUIVER_STORAGE_OPTIONS"] = json.dumps(
        {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )
    metrics_port = _free_port()
    server = Server(
        "quiver",
        [sys.executable, "-m", "quiver.flight_server", "serve", "--root", "s3://soak/root",
         "--exit-with-parent", "--maintenance-interval", str(args.maintenance),
         "--metrics-port", str(metrics_port)],
    )  # fmt: skip
    stop = threading.Event()
    rec = Recorder()
    threads: list[threading.Thread] = []
    try:
        server.ready()
        uri = f"grpc://127.0.0.1:{server.port}"
        admin = Client(uri)
        admin.write("t", _table(np.arange(BASE_ROWS), 0), mode="create")
        admin.create_index("t", "id", "BTREE")
        appended: list[list[int]] = [[] for _ in range(args.appenders)]
        inserted: list[list[int]] = [[] for _ in range(args.upserters)]
        last_value: list[dict[int, int]] = [{} for _ in range(args.upserters)]

        def reader(r: int) -> None:
            client, rng = Client(uri), random.Random(r)
            while not stop.is_set():
                lo = rng.randrange(0, BASE_ROWS - 1000)
                where = f"id >= {lo} AND id < {lo + 1000}"
                rec.timed("read", lambda where=where: client.read("t", filter=where, parallel=2))
                stop.wait(args.read_every)

        def appender(a: int) -> None:
            client, step = Client(uri), 0
            while not stop.is_set():
                ids = 10_000_000 * (a + 1) + 100 * step + np.arange(100)
                rows = _table(ids, -1)
                if rec.timed("append", lambda rows=rows: client.write("t", rows)) is not None:
                    appended[a].extend(ids.tolist())
                step += 1
                stop.wait(args.append_every)

        def upserter(u: int) -> None:
            client, rng, step = Client(uri), np.random.default_rng(u), 1
            mine = np.arange(u, BASE_ROWS, 2)
            while not stop.is_set():
                old = np.sort(rng.choice(mine, 100, replace=False))
                new = 100_000_000 * (u + 1) + 10 * step + np.arange(10)
                data = _table(np.concatenate([old, new]), step)
                if rec.timed("upsert", lambda data=data: client.merge("t", data, "id")) is not None:
                    inserted[u].extend(new.tolist())
                    for i in old.tolist():
                        last_value[u][i] = step
                step += 1
                stop.wait(args.upsert_every)

        def cleaner() -> None:
            client = Client(uri)
            while not stop.wait(args.cleanup):
                rec.timed("cleanup", lambda: client.cleanup("t", older_than=60))

        for target, n in ((reader, args.readers), (appender, args.appenders),
                          (upserter, args.upserters), (lambda _: cleaner(), 1)):  # fmt: skip
            for i in range(n):
                threads.append(threading.Thread(target=target, args=(i,), daemon=True))
        start = time.monotonic()
        for t in threads:
            t.start()
        windows = []
        print("| minute | reads/s | appends/s | upserts/s | read p50 ms | read p99 ms | "
              "errors | server RSS MB | fragments | compactions |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        end = start + 60 * args.minutes
        while time.monotonic() < end:
            time.sleep(min(args.window, max(0.0, end - time.monotonic())))
            times, errors = rec.take()
            reads = sorted(times["read"])
            p50 = statistics.median(reads) * 1e3 if reads else float("nan")
            p99 = reads[int(0.99 * (len(reads) - 1))] * 1e3 if reads else float("nan")
            rss = _rss_mb(server.proc.pid)
            frags = admin.describe("t")["fragments"]
            compactions = _commits(metrics_port, "compact")
            elapsed = time.monotonic() - start
            span = args.window
            windows.append((elapsed, p99, rss))
            print(f"| {elapsed / 60:.1f} | {len(times['read']) / span:.0f} | "
                  f"{len(times['append']) / span:.1f} | {len(times['upsert']) / span:.1f} | "
                  f"{p50:.1f} | {p99:.1f} | {sum(errors.values())} | {rss:.0f} | {frags} | "
                  f"{compactions} |",
                  flush=True)  # fmt: skip
        stop.set()
        for t in threads:
            t.join(timeout=120)
        for kind, message in rec.last_error.items():
            print(f"last {kind} error: {message}")
        ok = _check(admin, appended, inserted, last_value)
        early = next(w for w in windows if w[0] >= 60 * args.minutes / 6 - 1e-9)
        rss_ratio = windows[-1][2] / early[2]
        p99_ratio = windows[-1][1] / windows[0][1]
        print(f"server RSS: {early[2]:.0f} MB at {early[0] / 60:.1f} min, {windows[-1][2]:.0f} "
              f"MB at the end ({rss_ratio:.2f}x; goal <= 1.20x); read p99: "
              f"{windows[0][1]:.1f} ms in the first window, {windows[-1][1]:.1f} ms in the "
              f"last ({p99_ratio:.2f}x; goal <= 1.50x); rows: "
              f"{'all correct' if ok else 'WRONG'}")  # fmt: skip
        return 0 if ok else 1
    finally:
        stop.set()
        server.stop()
        moto.stdin.close()  # type: ignore[union-attr]
        moto.terminate()
        moto.wait(timeout=30)


def _commits(port: int, operation: str) -> int:
    """The server's count of commits of `operation` so far (its Prometheus metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = rf'^quiver_commits_total{{operation="{operation}"}} ([0-9.e+]+)$'
    found = re.search(pattern, text, re.M)
    return int(float(found.group(1))) if found else 0


def _check(
    admin: object,
    appended: list[list[int]],
    inserted: list[list[int]],
    last_value: list[dict[int, int]],
) -> bool:
    """Every id once; the base, appended and inserted ids all there (and only those of
    failed calls besides, whose outcome was unknown); each upserted row's value its
    writer's last acknowledged one or a later unacknowledged one."""
    table = admin.read("t")  # type: ignore[attr-defined]
    ids = table.column("id").to_numpy()
    values = dict(zip(ids.tolist(), table.column("v").to_pylist(), strict=True))
    unique = len(np.unique(ids)) == len(ids)
    expected = set(range(BASE_ROWS)) | {i for a in appended for i in a}
    expected |= {i for u in inserted for i in u}
    present = expected <= set(values)
    extra = len(set(values) - expected)
    stale = sum(values[i] < v for lv in last_value for i, v in lv.items())
    print(f"rows: {len(ids)}, ids unique: {unique}, every acknowledged row there: {present}, "
          f"rows of unacknowledged calls: {extra}, upserted values older than acknowledged: "
          f"{stale}")  # fmt: skip
    return unique and present and stale == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--window", type=float, default=60)
    parser.add_argument("--readers", type=int, default=16)
    parser.add_argument("--read-every", type=float, default=4)
    parser.add_argument("--appenders", type=int, default=4)
    parser.add_argument("--append-every", type=float, default=4)
    parser.add_argument("--upserters", type=int, default=2)
    parser.add_argument("--upsert-every", type=float, default=10)
    parser.add_argument("--maintenance", type=int, default=15)
    parser.add_argument("--cleanup", type=float, default=120)
    sys.exit(soak(parser.parse_args()))


if __name__ == "__main__":
    main()
