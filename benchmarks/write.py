"""Write benchmark: `write_dataset` throughput and 1-row commit latency, ours vs pylance.

    .venv/bin/python -m benchmarks.write [--rows 4000000] [--commits 50] [--storage-version 2.2]

Both engines write the same in-memory benchmark table (storage version 2.2 unless
`--storage-version` says otherwise) to fresh directories; then each makes `--commits`
sequential one-row appends to its own dataset.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import lance
import pyarrow as pa

from benchmarks.data import ROWS, batches, schema_
from quiver.format.dataset import write_dataset


def _throughput(table: pa.Table, root: Path, repeat: int, version: str) -> tuple[float, float]:
    best = {"pylance": float("inf"), "ours": float("inf")}
    for i in range(repeat):
        for name, write in (("pylance", lance.write_dataset), ("ours", write_dataset)):
            target = root / f"{name}-{i}"
            t0 = time.perf_counter()
            write(table, str(target), data_storage_version=version)
            best[name] = min(best[name], time.perf_counter() - t0)
            shutil.rmtree(target)
    return best["pylance"], best["ours"]


def _latencies(write, uri: str, commits: int, version: str) -> list[float]:  # noqa: ANN001
    row = pa.table({"id": pa.array([0], pa.int64())})
    write(row, uri, data_storage_version=version)
    write(row, uri, mode="append")  # warm-up: lazy imports, caches
    out = []
    for i in range(commits):
        t = pa.table({"id": pa.array([i + 1], pa.int64())})
        t0 = time.perf_counter()
        write(t, uri, mode="append")
        out.append(time.perf_counter() - t0)
    return out


def _p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]


def main() -> None:
    """Run both measurements and print a results table with ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--storage-version", default="2.2", choices=["2.0", "2.1", "2.2"])
    args = parser.parse_args()
    table = pa.Table.from_batches(list(batches(args.rows)), schema=schema_())
    mb = table.nbytes / 1e6
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as tmp:
        root = Path(tmp)
        v = args.storage_version
        t_ref, t_ours = _throughput(table, root, args.repeat, v)
        lat_ref = _latencies(lance.write_dataset, str(root / "lat-pylance"), args.commits, v)
        lat_ours = _latencies(write_dataset, str(root / "lat-ours"), args.commits, v)
    print(f"table: {args.rows} rows, {mb:.0f} MB in memory, storage version {v}")
    print("| measure | pylance | ours | ratio |")
    print("|---|---|---|---|")
    print(
        f"| write_dataset throughput (MB/s) | {mb / t_ref:.0f} | {mb / t_ours:.0f} "
        f"| {t_ref / t_ours:.2f} (ours/pylance throughput) |"
    )
    for name, f in (("median", statistics.median), ("p95", _p95)):
        a, b = f(lat_ref) * 1000, f(lat_ours) * 1000
        label = f"1-row append latency, {name} (ms)"
        print(f"| {label} | {a:.1f} | {b:.1f} | {a / b:.2f} (pylance/ours) |")


if __name__ == "__main__":
    main()
