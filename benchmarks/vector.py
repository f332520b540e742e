"""Vector search benchmark: queries per second and recall@10, Quiver over Flight and pylance.

    .venv/bin/python -m benchmarks.vector [--rows 1000000] [--dim 128] [--queries 100]
                                          [--nprobes 20] [--partitions 1024] [--rounds 3]

The dataset (cached under benchmarks/.data/vector/, built once by pylance with an IVF_PQ
index of `--partitions` partitions and dim / 8 sub-vectors) holds `--rows` vectors drawn
around 2,000 random centres of a 32-dimensional subspace, projected to `--dim` with a little
noise (clustered and of low intrinsic dimension, as embeddings are), plus an id. The queries are
`--queries` more vectors from the same distribution. Exact neighbours come from a brute-force
search in numpy; recall@10 is the share of them each engine's 10 results hold, averaged.

Six ways to run the same queries (k = 10, nprobes as given), rounds interleaved, medians:
- pylance, single: `ds.to_table(nearest=...)` once per query, in this process;
- pylance, batch: one `to_table(nearest=...)` with all the queries as a 2-D `q`;
- Quiver over Flight, single: `Client.nearest` per query (one DoExchange whose descriptor
  carries the query) against `quiver serve` on loopback, in its own process;
- Quiver over Flight, batch: `Client.nearest_batch`, all the queries in one DoExchange;
- both batches again with refine_factor 10 (candidates measured again on their vectors).
The first query of each is run once before timing (index and partitions loaded).

Where the time goes (2 cores shared with the client; py-spy on the server, wall-clock timers
around the server's phases, cProfile in process; per query unless said):

Before (GetFlightInfo + DoGet; 135 single / 545 batch q/s, pylance 656 / 3264 that run):
- a Python loop over the probed partitions of each query: per partition a float64 PQ table
  for every (query, partition) pair, a numpy gather of codes x rows and an argpartition;
  search ~1.7 ms single (score 0.7, tables 0.3, argpartition 0.2), batch of 100: tables
  88 ms, scoring 80 ms;
- two round trips: GetFlightInfo plans the search (dataset open, NearestSearch, q signed
  into a ticket as JSON), DoGet verifies the ticket, opens again and plans again (~1.5 ms);
- the take of the k rows by row id (~0.55 ms) and a full stable argsort of every centroid.

After (one DoExchange; quiet machine: ~390 single / ~3,400-4,300 batch q/s, pylance ~690 /
~3,500; refine_factor 10: ~1,430, pylance ~750):
- single, 2.5 ms a query at the client: server handler 2.06 ms = take of 10 rows 0.66
  (format/dataset/fragment.py + file/v21/reader.py: opening the fragment's file each call is
  half of it), IVF search 0.55 (the kernel 0.12, the rest numpy set-up), request JSON parse
  0.15 (flight_server/protocol.parse_object: a Python hook per float and a re-serialisation
  of the whole document), search set-up 0.14, dataset open + name checks + auth + write
  ~0.56; then the access log line, metrics and gRPC (~0.5), the client 0.42 ms of CPU;
- batch of 100, 22 ms in the server: kernel 14 ms (two threads; 37 M table lookups over a
  working set larger than L2), take of 1,000 rows 2.5, centroid distances 1.4 (OpenBLAS
  threads: 0.5 when single-threaded), partition cache lookups 0.8, probe order 0.55,
  query tables 0.5.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from quiver.clients import Client

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / ".data" / "vector"
K = 10
COLUMNS = ["id", "_distance"]
REFINE = 10
CENTRES = 2000
LATENT = 32


def _vectors(rng: np.random.Generator, model: tuple[np.ndarray, np.ndarray], n: int) -> np.ndarray:
    """n vectors around the model's centres in a LATENT-dimensional subspace, projected to
    the full dimension, plus a little noise (embeddings have a low intrinsic dimension)."""
    centres, projection = model
    which = rng.integers(0, len(centres), n)
    latent = centres[which] + rng.standard_normal((n, LATENT)).astype(np.float32)
    noise = rng.standard_normal((n, projection.shape[1])).astype(np.float32) * 0.1
    return (latent @ projection + noise).astype(np.float32)


def _model(dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CENTRES, LATENT)).astype(np.float32) * 2
    projection = rng.standard_normal((LATENT, dim)).astype(np.float32) / np.sqrt(LATENT)
    return centres, projection


def ensure_dataset(rows: int, dim: int, partitions: int) -> tuple[str, str]:
    """(serve root, dataset name), writing and indexing the dataset with pylance if absent."""
    name = f"vectors-v3-{rows}-{dim}-{partitions}"
    uri = DATA / f"{name}.lance"
    if not (uri / "_indices").exists():
        rng = np.random.default_rng(1)
        model = _model(dim)

        def batches():
            for start in range(0, rows, 100_000):
                n = min(100_000, rows - start)
                vec = _vectors(rng, model, n)
                yield pa.record_batch(
                    [
                        pa.array(np.arange(start, start + n)),
                        pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
                    ],
                    names=["id", "vec"],
                )

        schema = pa.schema([("id", pa.int64()), ("vec", pa.list_(pa.float32(), dim))])
        DATA.mkdir(parents=True, exist_ok=True)
        ds = lance.write_dataset(
            pa.RecordBatchReader.from_batches(schema, batches()), str(uri), mode="overwrite"
        )
        t0 = time.perf_counter()
        ds.create_index(
            "vec", "IVF_PQ", num_partitions=partitions, num_sub_vectors=dim // 8, metric="l2"
        )
        print(f"built the IVF_PQ index in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return str(DATA), name


def _queries(n: int, dim: int) -> np.ndarray:
    return _vectors(np.random.default_rng(99), _model(dim), n)


def exact_neighbours(uri: str, queries: np.ndarray) -> np.ndarray:
    """Ids of the k nearest rows of each query, by brute force (float64 distances)."""
    table = lance.dataset(uri).to_table(columns=["id", "vec"])
    ids = table.column("id").to_numpy()
    vec = table.column("vec").combine_chunks()
    x = vec.values.to_numpy().reshape(len(vec), -1).astype(np.float32)
    xx = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    out = []
    for q in queries.astype(np.float64):
        d = xx - 2.0 * (x @ q.astype(np.float32)).astype(np.float64) + q @ q
        best = np.argpartition(d, K)[: K * 4]
        exact = ((x[best].astype(np.float64) - q) ** 2).sum(1)
        out.append(ids[best[np.argsort(exact, kind="stable")[:K]]])
    return np.stack(out)


def recall(found: list[np.ndarray], exact: np.ndarray) -> float:
    """Mean share of the exact k neighbours found."""
    return float(
        np.mean([len(np.intersect1d(f, e)) / K for f, e in zip(found, exact, strict=True)])
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "quiver.flight_server",
            "serve",
            "--root",
            root,
            "--port",
            str(port),
            "--exit-with-parent",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"grpc://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("quiver serve did not start")


def main() -> None:
    """Run the four ways interleaved and print the results table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--nprobes", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root, name = ensure_dataset(args.rows, args.dim, args.partitions)
    uri = f"{root}/{name}.lance"
    queries = _queries(args.queries, args.dim)
    exact = exact_neighbours(uri, queries)
    search = {"column": "vec", "k": K, "nprobes": args.nprobes}
    ds = lance.dataset(uri)
    proc, server = _serve(root)
    try:
        with Client(server) as qc, warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def pylance_single() -> list[np.ndarray]:
                return [
                    ds.to_table(nearest={**search, "q": q}, columns=COLUMNS)["id"].to_numpy()
                    for q in queries
                ]

            def pylance_batch() -> list[np.ndarray]:
                t = ds.to_table(nearest={**search, "q": queries}, columns=COLUMNS)
                return _per_query(t, len(queries))

            def quiver_single() -> list[np.ndarray]:
                return [
                    qc.nearest(name, "vec", q, K, nprobes=args.nprobes, columns=COLUMNS)[
                        "id"
                    ].to_numpy()
                    for q in queries
                ]

            def quiver_batch() -> list[np.ndarray]:
                t = qc.nearest_batch(name, "vec", queries, K, nprobes=args.nprobes, columns=COLUMNS)
                return _per_query(t, len(queries))

            def pylance_refined() -> list[np.ndarray]:
                nearest = {**search, "q": queries, "refine_factor": REFINE}
                return _per_query(ds.to_table(nearest=nearest, columns=COLUMNS), len(queries))

            def quiver_refined() -> list[np.ndarray]:
                t = qc.nearest_batch(
                    name,
                    "vec",
                    queries,
                    K,
                    nprobes=args.nprobes,
                    refine_factor=REFINE,
                    columns=COLUMNS,
                )
                return _per_query(t, len(queries))

            ways = {
                "pylance (local), single queries": pylance_single,
                "pylance (local), batch of all": pylance_batch,
                f"pylance (local), batch, refine_factor {REFINE}": pylance_refined,
                "Quiver over Flight, single queries": quiver_single,
                "Quiver over Flight, batch (DoExchange)": quiver_batch,
                f"Quiver over Flight, batch, refine_factor {REFINE}": quiver_refined,
            }
            ds.to_table(nearest={**search, "q": queries[0]}, columns=COLUMNS)  # warm up
            qc.nearest(name, "vec", queries[0], K, nprobes=args.nprobes, columns=COLUMNS)
            times: dict[str, list[float]] = {w: [] for w in ways}
            recalls: dict[str, float] = {}
            for r in range(args.rounds):
                order = list(ways)[r % len(ways) :] + list(ways)[: r % len(ways)]
                for way in order:
                    t0 = time.perf_counter()
                    found = ways[way]()
                    times[way].append(time.perf_counter() - t0)
                    recalls[way] = recall(found, exact)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"{args.rows:,} vectors of {args.dim}, IVF_PQ {args.partitions} partitions, "
        f"{args.dim // 8} sub-vectors, nprobes {args.nprobes}, k {K}, {args.queries} queries, "
        f"median of {args.rounds} rounds"
    )
    print("| engine, mode | queries/s | s for all | recall@10 |")
    print("|---|---|---|---|")
    for way in ways:
        med = statistics.median(times[way])
        qps = args.queries / med
        print(f"| {way} | {qps:,.0f} | {med:.3f} | {recalls[way]:.3f} |")


def _per_query(table: pa.Table, n: int) -> list[np.ndarray]:
    index = table.column("query_index").to_numpy()
    ids = table.column("id").to_numpy()
    return [ids[index == i] for i in range(n)]


if __name__ == "__main__":
    main()
