"""Vector-index benchmark: IVF_PQ (or IVF_RQ) builds by Quiver next to pylance's, on one table.

    .venv/bin/python -m benchmarks.vector_index [--rows 1000000] [--rounds 3] [--kind IVF_RQ]

The table (cached under benchmarks/.data/, written once by pylance, storage version 2.2,
1 M-row fragments): `id` int64 and `v`, 128 float32 values a row near a 24-dimensional
subspace (embeddings have a low intrinsic dimension). The build: IVF_PQ on `v` with
pylance's defaults for the row count (partitions = rows / 8,192) and 16 sub-vectors, l2
(`--kind IVF_RQ`: RaBitQ codes of pylance's default 5 bits, partitions = rows / 4,096),
by Quiver (`quiver.dataset(uri).create_index`) and by pylance
(`lance.dataset(uri).create_index`) with the same arguments, timed from the dataset's open
to the committed version.

Each build runs in a fresh Python process (imports done before the clock starts) that prints
its time and its peak RSS (VmHWM); rounds interleave the two engines; each figure is the
median over rounds, each ratio the median of per-round ratios (pylance s / Quiver s: above 1
Quiver is faster). Builds replace the index, so every round builds on the same data.

Then each engine builds its index on a copy of the table (data files hard-linked): recall@10
of 100 queries (nprobes 20) against the exact neighbours, and the queries per second of
pylance's own search on each index (one query a call; rounds interleaved, the first one
warming the caches, the median of the rest), so that pylance's search on Quiver's index is
compared with its search on its own. Last, the same build through a Quiver server's
`create_index` action: the server's peak RSS while it builds (the vectors are 512 MB at
1 M rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from benchmarks.flight import Server

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
DIM = 128
SUB_VECTORS = 16
FRAGMENT_ROWS = 1_000_000
QUERIES = 100
K = 10
NPROBES = 20

_CHILD = """
import json, sys, time
engine, uri, kind, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
import lance, quiver
open_ = quiver.dataset if engine == "quiver" else lance.dataset
started = time.perf_counter()
open_(uri).create_index("v", kind, replace=True, **params)
seconds = time.perf_counter() - started
peak = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak = int(line.split()[1]) / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak}))
"""


def _draw(rng: np.random.Generator, n: int) -> np.ndarray:
    """Vectors near a 24-dimensional subspace of the 128 (embeddings have a low intrinsic
    dimension): a random mix of 24 directions, plus a little noise."""
    basis = np.random.default_rng(11).normal(size=(24, DIM)).astype(np.float32)
    latent = rng.normal(size=(n, 24)).astype(np.float32)
    return latent @ basis + rng.normal(scale=0.1, size=(n, DIM)).astype(np.float32)


def table_path(rows: int) -> str:
    """The benchmark table (written once by pylance, a batch at a time)."""
    path = DATA / f"vectors_{rows}.lance"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(7)
        schema = pa.schema({"id": pa.int64(), "v": pa.list_(pa.float32(), DIM)})

        def batches():
            for start in range(0, rows, 100_000):
                n = min(100_000, rows - start)
                v = _draw(rng, n)
                yield pa.record_batch(
                    [
                        pa.array(np.arange(start, start + n)),
                        pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
                    ],
                    schema=schema,
                )

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        lance.write_dataset(
            reader, str(path), max_rows_per_file=FRAGMENT_ROWS, data_storage_version="2.2"
        )
    return str(path)


def build(
    engine: str, uri: str, partitions: int, kind: str = "IVF_PQ", **params: object
) -> dict[str, float]:
    """One index build in a fresh process: its seconds and peak RSS in MB (IVF_PQ with
    SUB_VECTORS sub-vectors unless told otherwise)."""
    if kind == "IVF_PQ":
        params.setdefault("num_sub_vectors", SUB_VECTORS)
    params = {"num_partitions": partitions, **params}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, engine, uri, kind, json.dumps(params)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "LANCE_LOG": "error"},
    )
    if run.returncode != 0:
        raise RuntimeError(f"{engine} {kind} build failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def exact(uri: str, queries: np.ndarray) -> list[set[int]]:
    """The true K nearest ids of each query (pylance's exact search)."""
    ds = lance.dataset(uri)
    out = []
    for q in queries:
        t = ds.to_table(nearest={"column": "v", "q": q, "k": K, "use_index": False}, columns=["id"])
        out.append(set(t.column("id").to_pylist()))
    return out


def recall(uri: str, queries: np.ndarray, truth: list[set[int]]) -> float:
    """pylance's indexed search of every query: recall@K."""
    ds = lance.dataset(uri)
    hits = 0
    for q, want in zip(queries, truth, strict=True):
        t = ds.to_table(nearest={"column": "v", "q": q, "k": K, "nprobes": NPROBES}, columns=["id"])
        hits += len(set(t.column("id").to_pylist()) & want)
    return hits / (K * len(queries))


def queries_per_second(uri: str, queries: np.ndarray) -> float:
    """One pass of pylance's indexed search over every query, one query a call."""
    ds = lance.dataset(uri)
    started = time.perf_counter()
    for q in queries:
        ds.to_table(nearest={"column": "v", "q": q, "k": K, "nprobes": NPROBES}, columns=["id"])
    return len(queries) / (time.perf_counter() - started)


def twin(uri: str, engine: str) -> str:
    """A copy of the table whose data files are hard links (each engine's index in its own)."""
    path = f"{uri[: -len('.lance')]}_{engine}.lance"
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(uri, path, copy_function=os.link)
    return path


def server_build(uri: str, partitions: int, kind: str) -> tuple[float, float]:
    """The build through a Quiver server's create_index action: seconds and the server's
    peak RSS while it builds (MB)."""
    from quiver.clients import Client

    root = Path(uri).parent
    argv = [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(root)]
    server = Server("quiver", [*argv, "--exit-with-parent"])
    try:
        server.ready()
        with Client(f"grpc://127.0.0.1:{server.port}") as client:
            client.describe(Path(uri).stem)  # the server's imports and caches, before the window
            server.reset_peak()
            started = time.perf_counter()
            client.create_index(
                Path(uri).stem,
                "v",
                kind,
                num_partitions=partitions,
                num_sub_vectors=SUB_VECTORS if kind == "IVF_PQ" else None,
                replace=True,
            )
            seconds = time.perf_counter() - started
        return seconds, server.peak_mb()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", choices=["IVF_PQ", "IVF_RQ"], default="IVF_PQ")
    args = parser.parse_args()
    uri = table_path(args.rows)
    kind = args.kind
    partitions = min(max(1, args.rows // (8192 if kind == "IVF_PQ" else 4096)), 4096)
    results: dict[str, list[dict[str, float]]] = {"quiver": [], "pylance": []}
    for r in range(args.rounds):
        for engine in ["quiver", "pylance"] if r % 2 == 0 else ["pylance", "quiver"]:
            results[engine].append(build(engine, uri, partitions, kind))
    ours, theirs = results["quiver"], results["pylance"]
    ratios = [t["seconds"] / o["seconds"] for o, t in zip(ours, theirs, strict=True)]

    queries = _draw(np.random.default_rng(99), QUERIES)
    truth = exact(uri, queries)
    copies = {engine: twin(uri, engine) for engine in ("quiver", "pylance")}
    for engine, path in copies.items():
        build(engine, path, partitions, kind)
    quality = {engine: [recall(path, queries, truth)] for engine, path in copies.items()}
    speed: dict[str, list[float]] = {"quiver": [], "pylance": []}
    for r in range(1 + 2 * args.rounds):  # the first round warms each index's caches
        for engine in ["quiver", "pylance"] if r % 2 == 0 else ["pylance", "quiver"]:
            speed[engine].append(queries_per_second(copies[engine], queries))
    for engine in quality:
        quality[engine].append(statistics.median(speed[engine][1:]))
    served_seconds, served_peak = server_build(uri, partitions, kind)

    def cell(runs: list[dict[str, float]]) -> str:
        seconds = statistics.median(x["seconds"] for x in runs)
        peak = max(x["peak_mb"] for x in runs)
        return f"{seconds:.2f} ({peak:,.0f} MB)"

    shape = f"{SUB_VECTORS} sub-vectors" if kind == "IVF_PQ" else "5 bits"
    print(
        f"{args.rows:,} x {DIM} float32, {kind} {partitions} partitions x {shape}, "
        f"{args.rounds} rounds, medians\n"
    )
    print("| build | pylance s (peak RSS) | Quiver s (peak RSS) | Quiver / pylance |")
    print("|---|---|---|---|")
    print(f"| {kind} on `v` | {cell(theirs)} | {cell(ours)} | {statistics.median(ratios):.2f} |")
    print(f"\n{QUERIES} queries, k {K}, nprobes {NPROBES}, searched by pylance\n")
    print("| index built by | recall@10 | pylance queries/s |")
    print("|---|---|---|")
    for engine, label in (("pylance", "pylance"), ("quiver", "Quiver")):
        found, qps = quality[engine]
        print(f"| {label} | {found:.3f} | {qps:,.0f} |")
    print(
        f"\nThrough a server's create_index action: {served_seconds:.2f} s, server peak RSS "
        f"{served_peak:,.0f} MB"
    )


if __name__ == "__main__":
    main()
