"""Backfill benchmark: one new float64 column for every row of a table, Quiver next to
pylance, in process and from Spark.

    .venv/bin/python -m benchmarks.backfill [--rows 4000000] [--rounds 3]

The table is benchmarks/row_changes.py's (cached under benchmarks/.data/, storage 2.2, 1 M-row
fragments, columns id, value, category, vec). The new column is `doubled = value * 2`.

- Engine, in process, timed from the dataset's open: Quiver's
  `format.dataset.dataset(uri).add_columns(t)`, `t` holding `_rowaddr` and `doubled`,
  against pylance's `lance.dataset(uri).add_columns(a)`, `a` holding `doubled` alone in
  scan order (pylance's Arrow data aligned with the rows). Both tables come from one read
  of `_rowaddr, value` made before the timing; the read checks that the scan order is the
  row address order, so the two tables give every row the same value.
- Spark `local[2]` (benchmarks/spark.py's session), `quiver serve` in its own process:
  both pipelines read `_rowaddr, value` through Quiver's reader and compute `value * 2`;
  the Quiver job writes it back with `clients.spark.changes.add_columns` (each task stages
  its rows on the server, one commit applies them), the reference brings the column to the
  driver (`DataFrame.toArrow()`), sorts it by `_rowaddr` (= scan order) and calls pylance's
  `add_columns` there. Both timings include the same Spark read.

Every run is on a fresh copy of the pristine dataset (shutil.copytree and a sync, not
timed); rounds alternate the two ways (Quiver, reference, Quiver, reference...); each figure
is the median over rounds, each ratio the median of per-round ratios (reference s / Quiver
s: above 1 Quiver is faster). Each way first runs once on a small table, not counted. After
the first round both results are read back with pylance and checked: every data file of
the pristine copy is still there, each fragment keeping its files; `doubled` sorted by id is
the same both ways and equals `value * 2`. The server's peak RSS (VmHWM, reset before each
Spark run) is the maximum over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.data import ROWS
from benchmarks.flight import Server
from benchmarks.row_changes import (
    DATA,
    STORAGE_VERSION,
    WARMUP_ROWS,
    drop_copy,
    ensure_dataset,
    fresh_copy,
)
from benchmarks.spark import session
from quiver.clients import Client
from quiver.format.dataset import dataset

NEW = "doubled"
ADDR = "_rowaddr"
WAYS = ("quiver", "reference")


def sources(pristine: Path) -> tuple[pa.Table, pa.Table]:
    """(`_rowaddr` + `doubled` for Quiver, `doubled` alone in scan order for pylance), from
    one pylance read of `_rowaddr, value`; refuses a scan order that is not address order."""
    t = lance.dataset(str(pristine)).to_table(columns=["value"], with_row_address=True)
    addr = t[ADDR].to_numpy()
    if not np.all(addr[1:] > addr[:-1]):
        raise AssertionError(f"{pristine}: pylance's scan order is not _rowaddr order")
    doubled = pc.multiply(t["value"], 2.0)
    return pa.table({ADDR: t[ADDR], NEW: doubled}), pa.table({NEW: doubled})


def engine_ways(pristine: Path) -> dict[str, Callable[[Path, str], None]]:
    """Each way's call on a copy (its path and its name in the server's root)."""
    by_address, aligned = sources(pristine)
    return {
        "quiver": lambda uri, _name: dataset(str(uri)).add_columns(by_address),
        "reference": lambda uri, _name: lance.dataset(str(uri)).add_columns(aligned),
    }


def spark_ways(spark: Any, url: str) -> dict[str, Callable[[Path, str], None]]:
    """The Spark job through Quiver and the reference pipeline (the same read, the column
    collected on the driver and added by pylance)."""
    from quiver.clients.spark import changes

    def computed(name: str) -> Any:
        reader = spark.read.format("quiver").option("uri", url).option("dataset", name)
        df = reader.option("columns", f"{ADDR},value").load()
        return df.select(ADDR, (df.value * 2).alias(NEW))

    def quiver(_uri: Path, name: str) -> None:
        changes.add_columns(computed(name), uri=url, dataset=name)

    def reference(uri: Path, name: str) -> None:
        table = computed(name).toArrow().sort_by(ADDR)  # _rowaddr reads as decimal(20, 0)
        lance.dataset(str(uri)).add_columns(table.select([NEW]))

    return {"quiver": quiver, "reference": reference}


def _files(uri: Path) -> dict[int, set[str]]:
    """Each fragment's data file names."""
    frags = lance.dataset(str(uri)).get_fragments()
    return {f.fragment_id: {d.path for d in f.data_files()} for f in frags}


def verify(label: str, pristine: Path, results: dict[str, Path]) -> None:
    """No data file rewritten, and the same new column both ways, equal to `value * 2`."""
    before = _files(pristine)
    tables = {}
    for way, uri in results.items():
        after = _files(uri)
        if after.keys() != before.keys():
            raise AssertionError(f"{label} {way}: fragments {sorted(after)}, not {sorted(before)}")
        for frag, names in before.items():
            if not names < after[frag]:
                raise AssertionError(
                    f"{label} {way}: fragment {frag} has files {sorted(after[frag])}, which do "
                    f"not extend its old {sorted(names)}"
                )
            for name in names:
                old, new = pristine / "data" / name, uri / "data" / name
                if not new.exists() or new.stat().st_size != old.stat().st_size:
                    raise AssertionError(f"{label} {way}: data file {name} was rewritten")
        ds = lance.dataset(str(uri))
        tables[way] = ds.to_table(columns=["id", "value", NEW]).sort_by("id")
    ref = tables["reference"]
    if not ref[NEW].equals(pc.multiply(ref["value"], 2.0)):
        raise AssertionError(f"{label}: pylance's {NEW} is not value * 2")
    if not tables["quiver"].equals(ref):
        raise AssertionError(f"{label}: Quiver's {NEW} differs from pylance's")


class Bench:
    """Runs the ways of one comparison on fresh copies placed in the server's root."""

    def __init__(self, root: Path, server: Server, client: Client) -> None:
        self.root, self.server, self.client = root, server, client

    def once(
        self, ways: dict[str, Callable[[Path, str], None]], pristine: Path, tag: str
    ) -> dict[str, tuple[float, float, Path]]:
        """Each way once, in turn: way -> (seconds, server peak RSS MB, result copy)."""
        out = {}
        for way, call in ways.items():
            name = f"{tag}-{way}"
            uri = fresh_copy(pristine, self.root / f"{name}.lance")
            self.server.reset_peak()
            t0 = time.perf_counter()
            call(uri, name)
            out[way] = (time.perf_counter() - t0, self.server.peak_mb(), uri)
        return out

    def discard(self, results: dict[str, tuple[float, float, Path]]) -> None:
        """Delete the result copies, through the server (which may hold them open)."""
        for _, _, uri in results.values():
            self.client.drop_dataset(uri.name[: -len(".lance")])
            if uri.exists():
                drop_copy(uri)
            os.sync()

    def rounds(
        self,
        label: str,
        ways: dict[str, Callable[[Path, str], None]],
        warmup_ways: dict[str, Callable[[Path, str], None]],
        pristine: Path,
        small: Path,
        rounds: int,
    ) -> tuple[dict[str, list[float]], dict[str, float]]:
        """A warm-up on the small table, then `rounds` rounds; seconds and peak RSS per way."""
        self.discard(self.once(warmup_ways, small, f"{label}-warmup"))
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        peaks = dict.fromkeys(WAYS, 0.0)
        for r in range(rounds):
            results = self.once(ways, pristine, f"{label}-r{r}")
            for way, (seconds, peak, _) in results.items():
                times[way].append(seconds)
                peaks[way] = max(peaks[way], peak)
            if r == 0:
                verify(label, pristine, {w: u for w, (_, _, u) in results.items()})
            self.discard(results)
        return times, peaks


def _row(label: str, qway: str, rway: str, times: dict, rss: str) -> str:
    q, ref = times["quiver"], times["reference"]
    ratio = statistics.median(a / b for a, b in zip(ref, q, strict=True))
    return (
        f"| {label} | {qway} | {statistics.median(q):.3f} | {rway} | "
        f"{statistics.median(ref):.3f} | {ratio:.2f} | {rss} |"
    )


def main() -> None:
    """Time the backfill both ways, in process and from Spark, and print a results table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    pristine, small = ensure_dataset(args.rows), ensure_dataset(WARMUP_ROWS)
    size = sum(p.stat().st_size for p in pristine.rglob("*") if p.is_file())
    frags = len(lance.dataset(str(pristine)).get_fragments())
    print(
        f"table: {args.rows:,} rows, {frags} fragments, {size / 1e6:,.0f} MB on disk "
        f"(storage {STORAGE_VERSION}); new column `{NEW} = value * 2` (float64) for every "
        f"row; median of {args.rounds} rounds"
    )
    print(
        "engine rows: timed from the dataset's open, the source tables prepared before; "
        "Spark rows (local[2], quiver serve in its own process): both timings include the "
        "same Spark read of `_rowaddr, value` through Quiver"
    )
    print(
        "| backfill | Quiver way | Quiver s | reference | reference s | ratio "
        "| server peak RSS MB (Quiver / reference) |"
    )
    print("|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        root = Path(tmp)
        server = Server(
            "quiver", [sys.executable, "-m", "quiver.flight_server", "serve", "--root", tmp]
        )
        try:
            server.ready()
            url = f"grpc://127.0.0.1:{server.port}"
            with Client(url) as client:
                bench = Bench(root, server, client)
                label = f"add 1 float64 column, {args.rows:,} rows"
                engine = engine_ways(pristine), engine_ways(small)
                times, _ = bench.rounds("engine", *engine, pristine, small, args.rounds)
                print(
                    _row(
                        label,
                        "engine `add_columns(table with _rowaddr)`, in process",
                        "pylance `add_columns(aligned table)`, in process",
                        times,
                        "",
                    ),
                    flush=True,
                )
                spark = session()
                try:
                    ways = spark_ways(spark, url)
                    times, peaks = bench.rounds("spark", ways, ways, pristine, small, args.rounds)
                finally:
                    spark.stop()
                print(
                    _row(
                        label,
                        "Spark: read via Quiver, `changes.add_columns`",
                        "Spark: read via Quiver, `toArrow()`, pylance `add_columns` on the driver",
                        times,
                        f"{peaks['quiver']:,.0f} / {peaks['reference']:,.0f}",
                    ),
                    flush=True,
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
