"""Scan benchmark: our engine vs pylance on the same ~1 GB dataset, in one run.

    .venv/bin/python -m benchmarks.scan [--storage-versions 2.0,2.2] [--rows 4000000]
                                        [--rounds 5]

`to_table` of a full scan, a projection (two numeric columns) and a 1 % filter, then the full
scan and the projection streamed with `to_batches` (default batch size, each batch dropped as
it comes), by pylance and by our engine in alternating rounds on the same dataset (written once
by pylance under benchmarks/.data/); prints median seconds and the median of the per-round
speed ratios (pylance seconds / ours: above 1 we are faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import lance
import pyarrow as pa

from benchmarks.data import ROWS, batches, schema_
from quiver.format.dataset import dataset

HERE = Path(__file__).resolve().parent


def ensure_dataset(rows: int, storage_version: str) -> str:
    """Write the benchmark dataset with pylance unless it already exists."""
    uri = HERE / ".data" / f"scan-{storage_version}-{rows}.lance"
    if not uri.exists():
        reader = pa.RecordBatchReader.from_batches(schema_(), batches(rows))
        lance.write_dataset(reader, str(uri), data_storage_version=storage_version)
    return str(uri)


def warm_page_cache(uri: str) -> None:
    """Load the dataset's files into the page cache the same way on every run: each file is
    dropped from the cache and read back sequentially. How the cached pages were first
    loaded otherwise carries over between runs: files faulted in through a memory map stay
    in small (4 KiB) folios, while a sequential read gives large ones that one page-table
    entry maps 2 MiB of. Servers that map the files (Quiver) then spend less time mapping;
    those that copy (pylance, the in-memory server) barely notice."""
    for path in sorted(Path(uri).rglob("*")):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while os.read(fd, 8 << 20):
                pass
        finally:
            os.close(fd)


def _timed(ds: object, kwargs: dict) -> tuple[float, int, int]:
    """Seconds, rows and bytes of one read: `to_table`, or `to_batches` with `batches`."""
    kwargs = dict(kwargs)
    t0 = time.perf_counter()
    if kwargs.pop("batches", False):
        rows = nbytes = 0
        for batch in ds.to_batches(**kwargs):
            rows, nbytes = rows + batch.num_rows, nbytes + batch.nbytes
    else:
        result = ds.to_table(**kwargs)
        rows, nbytes = result.num_rows, result.nbytes
    return time.perf_counter() - t0, rows, nbytes


def main() -> None:
    """Run the three scans with both engines, interleaved, and print a results table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--storage-versions", default="2.0,2.2")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cases = {
        "full scan": {},
        "projection (id, value)": {"columns": ["id", "value"]},
        "filter value < 0.01 (1 %)": {"filter": "value < 0.01"},
        "full scan, `to_batches`": {"batches": True},
        "projection (id, value), `to_batches`": {"columns": ["id", "value"], "batches": True},
    }
    print("| storage | case | pylance s | ours s | ours MB/s | speed: pylance s / ours s |")
    print("|---|---|---|---|---|---|")
    for version in args.storage_versions.split(","):
        uri = ensure_dataset(args.rows, version)
        warm_page_cache(uri)
        ref, ours = lance.dataset(uri), dataset(uri)
        for name, kwargs in cases.items():
            _timed(ref, kwargs), _timed(ours, kwargs)  # warm-up: page cache, lazy imports
            t_ref, t_ours = [], []
            for _ in range(args.rounds):
                t, a, _ = _timed(ref, kwargs)
                t_ref.append(t)
                t, b, nbytes = _timed(ours, kwargs)
                t_ours.append(t)
                assert a == b, (name, a, b)
            mb = nbytes / 1e6
            ratio = statistics.median(r / o for r, o in zip(t_ref, t_ours, strict=True))
            tr, to = statistics.median(t_ref), statistics.median(t_ours)
            print(
                f"| {version} | {name} | {tr:.3f} | {to:.3f} | {mb / to:,.0f} | {ratio:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
