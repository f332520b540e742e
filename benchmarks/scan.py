"""Scan benchmark: our engine vs pylance on the same ~1 GB dataset, in one run.

    .venv/bin/python -m benchmarks.scan [--storage-version 2.2] [--rows 4000000]

Prints throughput and the ratio ours / pylance for a full scan, a projected scan
(two numeric columns) and a 1 %-selective filtered scan. The dataset is written once
by pylance under benchmarks/.data/ and reused.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import lance
import pyarrow as pa

from benchmarks.data import ROWS, batches, schema_
from format.dataset import dataset

HERE = Path(__file__).resolve().parent


def ensure_dataset(rows: int, storage_version: str) -> str:
    """Write the benchmark dataset with pylance unless it already exists."""
    uri = HERE / ".data" / f"scan-{storage_version}-{rows}.lance"
    if not uri.exists():
        reader = pa.RecordBatchReader.from_batches(schema_(), batches(rows))
        lance.write_dataset(reader, str(uri), data_storage_version=storage_version)
    return str(uri)


def _best(ds: object, kwargs: dict, repeat: int) -> tuple[float, pa.Table]:
    """Best wall time of `ds.to_table(**kwargs)` over `repeat` runs, and its result."""
    times = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = ds.to_table(**kwargs)
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    """Run the three scans with both engines and print a results table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--storage-version", default="2.2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    uri = ensure_dataset(args.rows, args.storage_version)
    size = sum(p.stat().st_size for p in Path(uri).rglob("*") if p.is_file())
    threshold = args.rows // 100
    cases = {
        "full scan": {},
        "projected scan (id, value)": {"columns": ["id", "value"]},
        "filtered scan (1 %)": {"filter": f"id < {threshold}"},
    }
    ref, ours = lance.dataset(uri), dataset(uri)
    print(f"dataset: {uri} ({size / 1e6:.0f} MB, {args.rows} rows, {args.storage_version})")
    print("| case | pylance s | ours s | ours MB/s | ratio ours/pylance |")
    print("|---|---|---|---|---|")
    for name, kwargs in cases.items():
        t_ref, a = _best(ref, kwargs, args.repeat)
        t_ours, b = _best(ours, kwargs, args.repeat)
        assert a.num_rows == b.num_rows, (name, a.num_rows, b.num_rows)
        mb = b.nbytes / 1e6
        print(f"| {name} | {t_ref:.3f} | {t_ours:.3f} | {mb / t_ours:.0f} | {t_ref / t_ours:.2f} |")


if __name__ == "__main__":
    main()
