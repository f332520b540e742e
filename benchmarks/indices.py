"""Index-build benchmark: scalar index builds by Quiver next to pylance's, on one table.

    .venv/bin/python -m benchmarks.indices [--rows 4000000] [--rounds 5] [--only KIND]

The table (cached under benchmarks/.data/, written once by pylance, storage version 2.2,
1 M-row fragments): `id` int64 unique in random order, `value` uniform float64 rounded to
3 decimals, `category` a string of 8 levels. Five builds: a BTREE on `id`, a BTREE on
`value`, a BITMAP on `category`, a ZONEMAP on `value` and a BLOOMFILTER on `id`, each by Quiver
(`quiver.dataset(uri).create_scalar_index`) and by pylance
(`lance.dataset(uri).create_scalar_index`) with the same arguments, timed from the
dataset's open to the committed version.

Each build runs in a fresh Python process (imports done before the clock starts) that prints
its time and its peak RSS (VmHWM); rounds interleave the two engines; each figure is the
median over rounds, each ratio the median of per-round ratios (pylance s / Quiver s: above 1
Quiver is faster). Builds replace the index of the same name, so every round builds on the
same data. After the first round the two indices are compared: the same rows for a few
filters, read by pylance with each index.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
FRAGMENT_ROWS = 1_000_000
LEVELS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
BUILDS = [
    ("id", "BTREE"),
    ("value", "BTREE"),
    ("category", "BITMAP"),
    ("value", "ZONEMAP"),
    ("id", "BLOOMFILTER"),
]
CHECKS = {
    "id": ["id = 12345", "id BETWEEN 1000 AND 1100"],
    "value": ["value = 0.5", "value < 0.001"],
    "category": ["category = 'gamma'"],
}

_CHILD = """
import json, sys, time
engine, uri, column, kind, name = sys.argv[1:6]
import lance, quiver
open_ = quiver.dataset if engine == "quiver" else lance.dataset
started = time.perf_counter()
open_(uri).create_scalar_index(column, kind, name=name, replace=True)
seconds = time.perf_counter() - started
peak = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak = int(line.split()[1]) / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak}))
"""


def table_path(rows: int) -> str:
    """The benchmark table (written once by pylance)."""
    path = DATA / f"indices_{rows}.lance"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(7)
        table = pa.table(
            {
                "id": rng.permutation(rows).astype(np.int64),
                "value": np.round(rng.random(rows), 3),
                "category": pa.array(np.array(LEVELS)[rng.integers(0, len(LEVELS), rows)]),
            }
        )
        lance.write_dataset(
            table, str(path), max_rows_per_file=FRAGMENT_ROWS, data_storage_version="2.2"
        )
    return str(path)


def build(engine: str, uri: str, column: str, kind: str) -> dict[str, float]:
    """One build in a fresh process: its seconds and peak RSS in MB."""
    name = f"{engine}_{column}_{kind.lower()}"
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, engine, uri, column, kind, name],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if run.returncode != 0:
        raise RuntimeError(f"{engine} {kind} on {column} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def check(uri: str, column: str, kind: str) -> None:
    """pylance answers alike with Quiver's index and with its own (and without either)."""
    ds = lance.dataset(uri)
    for f in CHECKS[column]:
        want = ds.scanner(filter=f, use_scalar_index=False).to_table().sort_by("id")
        got = ds.to_table(filter=f).sort_by("id")
        if not got.equals(want):
            raise AssertionError(f"{kind} on {column}: {f} answers differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="one index type (BTREE, BITMAP, ZONEMAP, BLOOMFILTER)")
    args = parser.parse_args()
    uri = table_path(args.rows)
    builds = [b for b in BUILDS if args.only is None or b[1] == args.only.upper()]
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for column, kind in builds:
            engines = ["quiver", "pylance"] if r % 2 == 0 else ["pylance", "quiver"]
            for engine in engines:
                results.setdefault((engine, column, kind), []).append(
                    build(engine, uri, column, kind)
                )
            if r == 0:
                check(uri, column, kind)
    print(f"{args.rows:,} rows, {args.rounds} rounds, medians\n")
    print("| build | pylance s (peak RSS) | Quiver s (peak RSS) | Quiver / pylance |")
    print("|---|---|---|---|")
    for column, kind in builds:
        ours, theirs = results[("quiver", column, kind)], results[("pylance", column, kind)]
        ratios = [t["seconds"] / o["seconds"] for o, t in zip(ours, theirs, strict=True)]

        def cell(runs: list[dict[str, float]]) -> str:
            seconds = statistics.median(x["seconds"] for x in runs)
            peak = max(x["peak_mb"] for x in runs)
            return f"{seconds:.3f} ({peak:,.0f} MB)"

        print(
            f"| {kind} on `{column}` | {cell(theirs)} | {cell(ours)} | "
            f"{statistics.median(ratios):.2f} |"
        )


if __name__ == "__main__":
    main()
