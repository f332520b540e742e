"""Row-change benchmark: an upsert and an update of 1 % of the rows, Quiver next to pylance.

    .venv/bin/python -m benchmarks.row_changes [--rows 4000000] [--rounds 5]

The table (cached under benchmarks/.data/, written once by pylance, storage version 2.2,
1 M-row fragments): `id` int64 unique, `value` uniform float64, `category` a string of 8
levels, `vec` fixed_size_list<float32, 16>. Two operations:
- upsert 1 %: `merge_insert("id").when_matched_update_all().when_not_matched_insert_all()`
  of a full-schema source of rows / 100 rows, half with existing ids (updates), half new;
- update 1 %: `update({"value": "value + 1"}, where="id % 100 = 7")`.
Each is run three ways: Quiver's engine in this process (`format.dataset.dataset(uri)`),
pylance in this process (`lance.dataset(uri)`), both timed from the dataset's open, and over
Flight: `clients.Client.merge` / `.update` against `quiver serve` in its own process. The
Flight server over pylance in benchmarks/flight.py only reads, so the Flight figure's
reference is pylance's call in this process: it counts the transport and the server, the
reference does not.

Every run is on a fresh copy of the pristine dataset (shutil.copytree and a sync, not
timed); rounds interleave the three ways; each figure is the median over rounds, each ratio
the median of per-round ratios (reference s / Quiver s: above 1 Quiver is faster). Each way
first runs once on a small table (lazy imports, caches), not counted. After the first round
the three results are read back with pylance, sorted by id and compared, and the changed-row
counts each way reports are checked. The server's peak RSS (VmHWM, reset before each call)
is the maximum over rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from benchmarks.data import ROWS
from benchmarks.flight import Server
from quiver.clients import Client
from quiver.format.dataset import dataset

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
FRAGMENT_ROWS = 1_000_000
STORAGE_VERSION = "2.2"  # format.dataset.write_dataset's default (pylance 14's)
WARMUP_ROWS = 10_000
DIM = 16
LEVELS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("value", pa.float64()),
        ("category", pa.string()),
        ("vec", pa.list_(pa.float32(), DIM)),
    ]
)
UPDATES = {"value": "value + 1"}
WHERE = "id % 100 = 7"


def _batch(rng: np.random.Generator, ids: np.ndarray) -> pa.RecordBatch:
    n = len(ids)
    vec = rng.standard_normal(n * DIM, dtype=np.float32)
    return pa.record_batch(
        [
            pa.array(ids, pa.int64()),
            pa.array(rng.random(n)),
            pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, len(LEVELS), n, dtype=np.int32)), LEVELS
            ).cast(pa.string()),
            pa.FixedSizeListArray.from_arrays(pa.array(vec), DIM),
        ],
        schema=SCHEMA,
    )


def ensure_dataset(rows: int) -> Path:
    """The pristine table, written by pylance unless it already exists."""
    uri = DATA / f"changes-{STORAGE_VERSION}-{rows}.lance"
    if not uri.exists():
        rng = np.random.default_rng(7)
        step = 500_000
        reader = pa.RecordBatchReader.from_batches(
            SCHEMA,
            (_batch(rng, np.arange(s, min(s + step, rows))) for s in range(0, rows, step)),
        )
        tmp = uri.with_name(uri.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        lance.write_dataset(
            reader,
            str(tmp),
            max_rows_per_file=FRAGMENT_ROWS,
            data_storage_version=STORAGE_VERSION,
        )
        tmp.rename(uri)  # an interrupted write never looks like a cached dataset
    return uri


def upsert_source(rows: int) -> pa.Table:
    """rows / 100 source rows (at least 2) in random order: half with existing ids (each
    once), half with new ids past the end; fresh values in every column."""
    rng = np.random.default_rng(11)
    n = max(2, rows // 100)
    old = rng.choice(rows, n // 2, replace=False)
    ids = rng.permutation(np.concatenate([old, np.arange(rows, rows + n - n // 2)]))
    return pa.Table.from_batches([_batch(rng, ids)])


def _expected(op: str, rows: int) -> tuple[int, int]:
    """(updated, inserted) rows the operation must report on a `rows`-row table."""
    if op == "upsert":
        n = max(2, rows // 100)
        return n // 2, n - n // 2
    return len(range(7, rows, 100)), 0


def _counts(stats: dict) -> tuple[int, int]:
    """(updated, inserted) from any of the three ways' answers (pylance's `num_updated_rows`
    / `num_rows_updated`, Quiver's `updated_rows`...)."""
    return tuple(sum(v for k, v in stats.items() if w in k) for w in ("updated", "inserted"))


def _local(open_: Callable, op: str, source: pa.Table) -> Callable[[Path], dict]:
    """One engine's call in this process, opening the dataset first."""

    def run(uri: Path) -> dict:
        ds = open_(str(uri))
        if op == "upsert":
            builder = ds.merge_insert("id").when_matched_update_all()
            return builder.when_not_matched_insert_all().execute(source)
        return ds.update(UPDATES, where=WHERE)

    return run


def _remote(client: Client, op: str, source: pa.Table) -> Callable[[str], dict]:
    """The same call over Flight, on dataset `name` of the server's root."""

    def run(name: str) -> dict:
        if op == "upsert":
            return client.merge(name, source, "id")
        return client.update(name, UPDATES, WHERE)

    return run


def fresh_copy(pristine: Path, target: Path) -> Path:
    """A copy of the pristine dataset at `target`, on disk before any timing starts."""
    shutil.copytree(pristine, target)
    os.sync()  # the copy's dirty pages are written back before the timing, not during it
    return target


def drop_copy(path: Path) -> None:
    """Delete a copy, its pages written back before the next timing."""
    shutil.rmtree(path)
    os.sync()


class Ways:
    """The three ways of running one operation, each on its own copy of a pristine dataset
    placed in the server's root (`root`)."""

    def __init__(self, root: Path, server: Server, client: Client) -> None:
        self.root, self.server, self.client = root, server, client

    def run(
        self, op: str, pristine: Path, source: pa.Table, tag: str
    ) -> dict[str, tuple[float, tuple[int, int], Path]]:
        """Run the operation each way, in turn; way -> (seconds, counts, result copy)."""
        out = {}
        for way, open_ in (("quiver", dataset), ("pylance", lance.dataset)):
            uri = fresh_copy(pristine, self.root / f"{op}-{way}-{tag}.lance")
            call = _local(open_, op, source)
            t0 = time.perf_counter()
            stats = call(uri)
            out[way] = (time.perf_counter() - t0, _counts(stats), uri)
        name = f"{op}-flight-{tag}"
        uri = fresh_copy(pristine, self.root / f"{name}.lance")
        call = _remote(self.client, op, source)
        self.server.reset_peak()
        t0 = time.perf_counter()
        stats = call(name)
        out["flight"] = (time.perf_counter() - t0, _counts(stats), uri)
        return out

    def discard(self, results: dict[str, tuple[float, tuple[int, int], Path]]) -> None:
        """Delete the result copies (the server's through drop_dataset, so it forgets it)."""
        for way, (_, _, uri) in results.items():
            if way == "flight":
                self.client.drop_dataset(uri.name[: -len(".lance")])
                os.sync()
            else:
                drop_copy(uri)


def _verify(op: str, rows: int, results: dict) -> None:
    """Every way reported the expected changed-row counts and wrote the same table."""
    want = _expected(op, rows)
    for way, (_, counts, _) in results.items():
        if counts != want:
            raise AssertionError(f"{op} {way}: (updated, inserted) {counts}, expected {want}")
    tables = {w: lance.dataset(str(u)).to_table().sort_by("id") for w, (_, _, u) in results.items()}
    ref = tables.pop("pylance")
    if ref.num_rows != rows + want[1]:
        raise AssertionError(f"{op}: pylance left {ref.num_rows} rows")
    for way, table in tables.items():
        if not table.equals(ref):
            raise AssertionError(f"{op}: the table {way} wrote differs from pylance's")


def main() -> None:
    """Time both operations three ways, interleaved, and print a results table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--quiver-arg", action="append", default=[], help="a flag for quiver serve (repeat)"
    )
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    pristine, small = ensure_dataset(args.rows), ensure_dataset(WARMUP_ROWS)
    sources = {"upsert": upsert_source(args.rows), "update": None}
    small_sources = {"upsert": upsert_source(WARMUP_ROWS), "update": None}
    size = sum(p.stat().st_size for p in pristine.rglob("*") if p.is_file())
    frags = len(lance.dataset(str(pristine)).get_fragments())
    print(
        f"table: {args.rows:,} rows, {frags} fragments, {size / 1e6:,.0f} MB on disk "
        f"(storage {STORAGE_VERSION}); source of the upsert: {sources['upsert'].num_rows:,} "
        f"rows; median of {args.rounds} rounds"
    )
    print(
        "reference of the Flight rows: pylance in process (benchmarks/flight.py's Flight "
        "server over pylance cannot write)"
    )
    print(
        "| operation | Quiver way | Quiver s | reference | reference s | ratio "
        "| server peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|")
    labels = {
        "upsert": "upsert 1 % (merge_insert update_all + insert_all)",
        "update": f"update 1 % (`value + 1` where `{WHERE}`)",
    }
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        root = Path(tmp)
        py = sys.executable
        server = Server(
            "quiver",
            [py, "-m", "quiver.flight_server", "serve", "--root", str(root), "--exit-with-parent"]
            + list(args.quiver_arg),
        )
        try:
            server.ready()
            with Client(f"grpc://127.0.0.1:{server.port}") as client:
                ways = Ways(root, server, client)
                for op in ("upsert", "update"):
                    ways.discard(ways.run(op, small, small_sources[op], "warmup"))
                    times: dict[str, list[float]] = {"quiver": [], "pylance": [], "flight": []}
                    peak = 0.0
                    for r in range(args.rounds):
                        results = ways.run(op, pristine, sources[op], f"r{r}")
                        peak = max(peak, server.peak_mb())
                        for way, (seconds, _, _) in results.items():
                            times[way].append(seconds)
                        if r == 0:
                            _verify(op, args.rows, results)
                        ways.discard(results)
                    ref = times["pylance"]
                    t_ref = statistics.median(ref)
                    for way, label, rss in (
                        ("quiver", "engine, in process", ""),
                        ("flight", "Client over Flight (quiver serve)", f"{peak:,.0f}"),
                    ):
                        ratio = statistics.median(
                            a / b for a, b in zip(ref, times[way], strict=True)
                        )
                        print(
                            f"| {labels[op]} | {label} | {statistics.median(times[way]):.3f} "
                            f"| pylance, in process | {t_ref:.3f} | {ratio:.2f} | {rss} |",
                            flush=True,
                        )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
