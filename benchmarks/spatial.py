"""Spatial filters and RTREE builds: Quiver's engine against pylance's, in one process.

    .venv/bin/python -m benchmarks.spatial [--rows 1000000] [--rounds 5]

`--rows` random points (`geoarrow.point`, separated x and y in 0..1000) in four fragments,
written by pylance. Builds: `create_scalar_index("geom", "RTREE")` by each engine on its
own copy, alternating, `--rounds` times (the median; the ratio is pylance's seconds /
Quiver's, above 1 Quiver builds faster). Filters, each engine reading its own index,
alternating query by query, `--rounds` rounds: a box holding 1% of the points (the RTREE
narrows it), the points within 5 of a point (`st_distance`, narrowed), and `st_within` a
strip with an unindexed term beside it; every answer's ids checked equal. Figures: the
median milliseconds per query and the ratio (pylance's / Quiver's).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from quiver.format.dataset import dataset

FILTERS = {
    "box (1%)": "st_intersects(geom, st_geomfromtext("
    "'POLYGON((100 100, 200 100, 200 200, 100 200, 100 100))'))",
    "within 5 of a point": "st_distance(geom, st_point(500, 500)) < 5",
    "strip, and a term": "st_within(geom, st_geomfromtext("
    "'POLYGON((0 0, 1000 0, 1000 20, 0 20, 0 0))')) AND id % 2 = 0",
}


def _write(uri: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    points = pa.StructArray.from_arrays(
        [pa.array(rng.uniform(0, 1000, rows)), pa.array(rng.uniform(0, 1000, rows))],
        names=["x", "y"],
    )
    geom = pa.field("geom", points.type, metadata={"ARROW:extension:name": "geoarrow.point"})
    table = pa.Table.from_arrays(
        [pa.array(np.arange(rows)), points], schema=pa.schema([pa.field("id", pa.int64()), geom])
    )
    lance.write_dataset(table, uri, max_rows_per_file=-(-rows // 4))


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="quiver-spatial-"))
    try:
        base = str(root / "base.lance")
        _write(base, args.rows)
        ours, theirs = str(root / "ours.lance"), str(root / "theirs.lance")
        builds: dict[str, list[float]] = {"quiver": [], "pylance": []}
        for _ in range(args.rounds):
            for name, uri, build in (
                ("quiver", ours, lambda u: dataset(u).create_scalar_index("geom", "RTREE")),
                (
                    "pylance",
                    theirs,
                    lambda u: lance.dataset(u).create_scalar_index("geom", "RTREE"),
                ),
            ):
                shutil.rmtree(uri, ignore_errors=True)
                shutil.copytree(base, uri)
                builds[name].append(_seconds(lambda b=build, u=uri: b(u)))
        q, p = statistics.median(builds["quiver"]), statistics.median(builds["pylance"])
        print(f"RTREE build, {args.rows:,} points: Quiver {q:.2f} s, pylance {p:.2f} s, "
              f"ratio {p / q:.2f}")  # fmt: skip
        print("| filter | rows | Quiver ms | pylance ms | ratio |")
        print("|---|---|---|---|---|")
        for label, sql in FILTERS.items():
            times: dict[str, list[float]] = {"quiver": [], "pylance": []}
            found = {}
            for _ in range(args.rounds):
                for name, open_, uri in (
                    ("quiver", dataset, ours),
                    ("pylance", lance.dataset, theirs),
                ):  # noqa: E501
                    ds = open_(uri)
                    start = time.perf_counter()
                    table = ds.to_table(filter=sql, columns=["id"])
                    times[name].append(time.perf_counter() - start)
                    found[name] = sorted(table["id"].to_pylist())
                if found["quiver"] != found["pylance"]:
                    raise AssertionError(f"{label}: the engines answer differently")
            q, p = statistics.median(times["quiver"]), statistics.median(times["pylance"])
            print(f"| {label} | {len(found['quiver']):,} | {q * 1000:.1f} | {p * 1000:.1f} | "
                  f"{p / q:.2f} |")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
