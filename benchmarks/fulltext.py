"""Full-text search benchmark: Quiver against a Flight server over pylance's search.

    .venv/bin/python -m benchmarks.fulltext [--rows 1000000] [--queries 200] [--rounds 3]

A corpus of short documents (10 words each, drawn from a 50,000-word vocabulary with
Zipf frequencies) is written by pylance, with an INVERTED index pylance builds. Two servers,
each in its own process, serve the same files (hard links):

- `quiver`: `quiver serve`;
- `pylance`: a Flight server whose DoGet runs pylance's `to_table(full_text_query=...)`
  (the dataset opened once, as a server keeps it).

Single queries: each of `--queries` queries (one to three words: frequent, middling and
rare ones) is a GetFlightInfo and a DoGet for the 10 best rows, one query at a time, the
servers alternating query by query; every answer's ids are checked equal (tied scores
aside). Figures: queries per second, the median latency, the ratio (Quiver's queries per
second / the reference's) and each server's peak RSS.

Builds: `create_scalar_index("text", "INVERTED")` by pylance and by Quiver's engine on
copies of the data, alternating, `--rounds` times; the ratio is pylance's seconds /
Quiver's (above 1 Quiver builds faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from benchmarks.flight import Server, _linked_root

HERE = Path(__file__).resolve().parent
LIMIT = 10
_PYLANCE_SERVER = textwrap.dedent(
    """
    import json, sys, warnings
    import lance
    import pyarrow.flight as flight
    warnings.simplefilter("ignore")

    root, port = sys.argv[1], int(sys.argv[2])
    opened = {}

    def open_dataset(name):
        if name not in opened:
            opened[name] = lance.dataset(f"{root}/{name}.lance")
        return opened[name]

    class PylanceServer(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            req = json.loads(descriptor.command)
            ds = open_dataset(req["dataset"])
            schema = ds.scanner(columns=req.get("columns"), full_text_query=req["full_text_query"],
                                limit=req.get("limit")).projected_schema
            ep = flight.FlightEndpoint(descriptor.command, [self.location])
            return flight.FlightInfo(schema, descriptor, [ep], -1, -1)

        def do_get(self, context, ticket):
            req = json.loads(ticket.ticket)
            table = open_dataset(req["dataset"]).to_table(
                columns=req.get("columns"), full_text_query=req["full_text_query"],
                limit=req.get("limit"))
            return flight.RecordBatchStream(table)

    server = PylanceServer(f"grpc://127.0.0.1:{port}")
    server.location = flight.Location.for_grpc_tcp("127.0.0.1", port)
    server.serve()
    """
)


def corpus(rows: int) -> tuple[Path, list[str]]:
    """The corpus (written and indexed by pylance once) and its vocabulary by frequency."""
    rng = np.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    vocabulary = ["".join(rng.choice(letters, 7)) for _ in range(50_000)]
    path = HERE / ".data" / f"fulltext-{rows}.lance"
    if not path.exists():
        weights = 1.0 / np.arange(1, len(vocabulary) + 1)
        words = np.array(vocabulary)[
            rng.choice(len(vocabulary), (rows, 10), p=weights / weights.sum())
        ]
        texts = [" ".join(w) for w in words]
        table = pa.table({"id": pa.array(range(rows), pa.int64()), "text": texts})
        tmp = path.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        ds = lance.write_dataset(table, str(tmp), max_rows_per_file=250_000)
        ds.create_scalar_index("text", "INVERTED")
        tmp.rename(path)
    return path, vocabulary


def queries(vocabulary: list[str], n: int) -> list[str]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        band = [(0, 50), (50, 2_000), (2_000, 50_000)][i % 3]
        words = rng.integers(*band, size=1 + i % 3)
        out.append(" ".join(vocabulary[w] for w in words))
    return out


def _search(client: flight.FlightClient, query: str) -> tuple[float, pa.Table]:
    command = {"dataset": "docs", "full_text_query": query, "limit": LIMIT, "columns": ["id"]}
    t0 = time.perf_counter()
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    table = client.do_get(info.endpoints[0].ticket).read_all()
    return time.perf_counter() - t0, table


def _same(a: pa.Table, b: pa.Table, query: str) -> None:
    """The same scores; the same ids outside the last tie band (pylance orders ties
    arbitrarily)."""
    sa, sb = a["_score"].to_numpy(), b["_score"].to_numpy()
    assert len(sa) == len(sb) and np.allclose(np.sort(sa), np.sort(sb), rtol=1e-5), query
    if len(sa):
        last = sa.min() * (1 + 1e-5)
        ids_a = {i for i, s in zip(a["id"].to_pylist(), sa, strict=True) if s > last}
        ids_b = {i for i, s in zip(b["id"].to_pylist(), sb, strict=True) if s > last}
        assert ids_a == ids_b, query


def single_queries(path: Path, vocabulary: list[str], n: int) -> None:
    with (
        tempfile.TemporaryDirectory(dir=path.parent) as a,
        tempfile.TemporaryDirectory(dir=path.parent) as b,
    ):
        root_q = _linked_root(Path(a), path)
        root_p = _linked_root(Path(b), path)
        for root in (root_q, root_p):
            (root / path.name).rename(root / "docs.lance")
        quiver = Server(
            "quiver",
            [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(root_q),
             "--exit-with-parent"],
        )  # fmt: skip
        pylance = Server("pylance", [sys.executable, "-c", _PYLANCE_SERVER, str(root_p)])
        try:
            quiver.ready()
            pylance.ready()
            clients = {
                "quiver": flight.connect(f"grpc://127.0.0.1:{quiver.port}"),
                "pylance": flight.connect(f"grpc://127.0.0.1:{pylance.port}"),
            }
            batch = queries(vocabulary, n)
            for c in clients.values():  # warm: indices opened, files cached
                for q in batch[:6]:
                    _search(c, q)
            quiver.reset_peak()
            pylance.reset_peak()
            times: dict[str, list[float]] = {"quiver": [], "pylance": []}
            for i, q in enumerate(batch):
                order = ("quiver", "pylance") if i % 2 == 0 else ("pylance", "quiver")
                got = {}
                for name in order:
                    seconds, got[name] = _search(clients[name], q)
                    times[name].append(seconds)
                _same(got["pylance"], got["quiver"], q)
            qps = {k: len(v) / sum(v) for k, v in times.items()}
            print(f"single queries ({n}, top {LIMIT}): Quiver {qps['quiver']:.0f} q/s "
                  f"(median {statistics.median(times['quiver']) * 1000:.2f} ms, peak "
                  f"{quiver.peak_mb():.0f} MB); pylance server {qps['pylance']:.0f} q/s "
                  f"(median {statistics.median(times['pylance']) * 1000:.2f} ms, peak "
                  f"{pylance.peak_mb():.0f} MB); ratio {qps['quiver'] / qps['pylance']:.2f}x",
                  flush=True)  # fmt: skip
        finally:
            quiver.stop()
            pylance.stop()


def builds(path: Path, rounds: int) -> None:
    import quiver

    table = lance.dataset(str(path)).to_table(columns=["id", "text"])
    seconds: dict[str, list[float]] = {"quiver": [], "pylance": []}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        for i in range(rounds):
            for name in ("quiver", "pylance") if i % 2 == 0 else ("pylance", "quiver"):
                copy = Path(tmp) / f"{name}-{i}.lance"
                lance.write_dataset(table, str(copy), max_rows_per_file=250_000)
                t0 = time.perf_counter()
                if name == "pylance":
                    lance.dataset(str(copy)).create_scalar_index("text", "INVERTED")
                else:
                    quiver.dataset(str(copy)).create_scalar_index("text", "INVERTED")
                seconds[name].append(time.perf_counter() - t0)
                shutil.rmtree(copy)
    q, p = statistics.median(seconds["quiver"]), statistics.median(seconds["pylance"])
    print(f"INVERTED build: Quiver {q:.2f} s, pylance {p:.2f} s; ratio {p / q:.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    path, vocabulary = corpus(args.rows)
    print(f"{args.rows:,} documents; {os.cpu_count()} cores", flush=True)
    single_queries(path, vocabulary, args.queries)
    builds(path, args.rounds)


if __name__ == "__main__":
    main()
