"""HNSW benchmark: IVF_HNSW_* builds and searches by Quiver next to pylance's, on one table.

    .venv/bin/python -m benchmarks.hnsw [--rows 200000] [--kind IVF_HNSW_SQ]
                                        [--partitions 16] [--rounds 3] [--queries 200]

The table is `benchmarks.vector_index`'s (128 float32 values a row near a 24-dimensional
subspace, written once by pylance, cached under benchmarks/.data/). The build: `--kind` on `v`,
l2, `--partitions` partitions, pylance's graph defaults (m 20, ef_construction 150), by Quiver
(`quiver.dataset(uri).create_index`) and by pylance (`lance.dataset(uri).create_index`), each
in a fresh process that prints its seconds (from the dataset's open to the committed version)
and peak RSS; rounds interleave the engines; figures are medians, ratios medians of per-round
ratios (pylance s / Quiver s: above 1 Quiver is faster).

Then each engine builds its index on a copy of the table (data files hard-linked), and on each
index, with k = 10 and pylance's default probing and ef:
- recall@10 of pylance's search against the exact neighbours (pylance's flat search);
- queries per second, one query a call, rounds interleaved, first query of each run warming
  the caches: pylance in this process, Quiver's engine in this process (`quiver.dataset`),
  and Quiver over Flight (`Client.nearest` against `quiver serve` on loopback); and a batch of
  every query in one call: pylance's 2-D `q`, Quiver's `Client.nearest_batch`.
Quiver's and pylance's answers on the same index are compared (the share of queries with the
same ids in the same order).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import lance
import numpy as np

import quiver
from benchmarks.flight import Server
from benchmarks.vector_index import _draw, build, exact, table_path, twin
from quiver.clients import Client

K = 10


def _ids(table: object) -> list[int]:
    return table.column("id").to_pylist()  # type: ignore[attr-defined]


def searches(uri: str, queries: np.ndarray, client: Client, name: str) -> dict[str, object]:
    """Each way of searching the index of `uri`: a function running every query, returning
    each query's ids."""
    theirs, ours = lance.dataset(uri), quiver.dataset(uri)
    nearest = {"column": "v", "k": K}

    def one_by_one(ds: object) -> list[list[int]]:
        return [_ids(ds.to_table(nearest={**nearest, "q": q}, columns=["id"])) for q in queries]

    def pylance_batch() -> list[list[int]]:
        t = theirs.to_table(nearest={**nearest, "q": queries}, columns=["id"])
        return _per_query(t.column("query_index").to_numpy(), _ids(t), len(queries))

    def quiver_batch() -> list[list[int]]:
        t = client.nearest_batch(name, "v", queries, k=K, columns=["id"])
        return _per_query(t.column("query_index").to_numpy(), _ids(t), len(queries))

    return {
        "pylance, single": lambda: one_by_one(theirs),
        "Quiver engine, single": lambda: one_by_one(ours),
        "Quiver over Flight, single": lambda: [
            _ids(client.nearest(name, "v", q, k=K, columns=["id"])) for q in queries
        ],
        "pylance, batch": pylance_batch,
        "Quiver over Flight, batch": quiver_batch,
    }


def _per_query(index: np.ndarray, ids: list[int], n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    for q, i in zip(index.tolist(), ids, strict=True):
        out[q].append(i)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--kind", default="IVF_HNSW_SQ")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    uri = table_path(args.rows)
    runs: dict[str, list[dict[str, float]]] = {"quiver": [], "pylance": []}
    for r in range(args.rounds):
        for engine in ("quiver", "pylance") if r % 2 == 0 else ("pylance", "quiver"):
            runs[engine].append(build(engine, uri, args.partitions, args.kind))
    ratio = statistics.median(
        p["seconds"] / q["seconds"] for p, q in zip(runs["pylance"], runs["quiver"], strict=True)
    )
    print(f"\n{args.kind}, {args.rows:,} rows x 128, {args.partitions} partitions, l2:\n")
    print("| build | seconds | peak RSS MB |")
    print("|---|---|---|")
    for engine in ("quiver", "pylance"):
        sec = statistics.median(x["seconds"] for x in runs[engine])
        peak = statistics.median(x["peak_mb"] for x in runs[engine])
        print(f"| {engine} | {sec:.1f} | {peak:.0f} |")
    print(f"| ratio (pylance s / Quiver s) | {ratio:.2f}x | |")

    queries = _draw(np.random.default_rng(99), args.queries)
    truth = exact(uri, queries)
    twins = {engine: twin(uri, engine) for engine in ("quiver", "pylance")}
    for engine, path in twins.items():
        build(engine, path, args.partitions, args.kind)
    root = Path(uri).parent
    argv = [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(root)]
    server = Server("quiver", [*argv, "--exit-with-parent"])
    try:
        server.ready()
        with Client(f"grpc://127.0.0.1:{server.port}") as client:
            for engine, path in twins.items():
                ways = searches(path, queries, client, Path(path).stem)
                answers = {way: run() for way, run in ways.items()}  # warm, and the answers
                theirs, ours = answers["pylance, single"], answers["Quiver engine, single"]
                same = np.mean([a == b for a, b in zip(theirs, ours, strict=True)])
                hits = sum(len(set(a) & t) for a, t in zip(theirs, truth, strict=True))
                timings: dict[str, list[float]] = {way: [] for way in ways}
                for r in range(args.rounds):
                    order = list(ways) if r % 2 == 0 else list(reversed(ways))
                    for way in order:
                        started = time.perf_counter()
                        ways[way]()
                        timings[way].append(len(queries) / (time.perf_counter() - started))
                print(
                    f"\n{engine}'s index: recall@10 {hits / (K * len(queries)):.3f}, "
                    f"Quiver's answers = pylance's on {same:.0%} of queries\n"
                )
                print("| search | queries/s |")
                print("|---|---|")
                for way, qps in timings.items():
                    print(f"| {way} | {statistics.median(qps):,.0f} |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
