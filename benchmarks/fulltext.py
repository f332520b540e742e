"""Full-text search benchmark: Quiver against a Flight server over pylance's search.

    .venv/bin/python -m benchmarks.fulltext [--rows 1000000] [--queries 200] [--rounds 3]
        [--searches | --minhash]

A corpus of short documents (10 words each, drawn from a 50,000-word vocabulary with
Zipf frequencies) is written by pylance, with an INVERTED and an NGRAM index pylance builds.
Two servers, each in its own process, serve the same files (hard links):

- `quiver`: `quiver serve`;
- `pylance`: a Flight server whose DoGet runs pylance's `to_table(full_text_query=...)`, or
  `to_table(filter=...)` for a filtered read (the dataset opened once, as a server keeps
  it); its ticket is the request, so a client may skip GetFlightInfo, and a list of queries
  is a batch (one `to_table` each, pylance having no batch search), each one's rows after
  its `query_index`.

Single queries: each of `--queries` queries (one to three words: frequent, middling and
rare ones) asks for the 10 best rows, one query at a time, the servers alternating query by
query, in three passes: GetFlightInfo + DoGet on both, each query seen for the first time
("first sight, tickets": its words' posting lists read and weighed); then one round trip on
both (Quiver: `Client.full_text_search`'s DoExchange with the search in its descriptor; the
reference: a DoGet of the request); then GetFlightInfo + DoGet again ("tickets"). Every
answer's ids are checked equal (tied scores aside). Figures: queries per second, the median
latency, the ratio (Quiver's queries per second / the reference's).

Batches: all `--queries` queries in one round trip (Quiver: `full_text_search_batch`),
`--rounds` times, alternating; answers checked equal per query. Figures: queries per second
of the median round, the ratio, each server's peak RSS over the whole run.

Filters: `--queries` reads of `contains(text, needle)` (whole rare words, and four letters
of middling words) with GetFlightInfo + DoGet of every endpoint on both servers, which
narrow them with the NGRAM index; answers checked equal. Figures as for single queries.

MinHash (also alone with `--minhash`): near-duplicate searches in process, a MINHASHLSH index
pylance built, each query a document with its last word changed; answers checked equal.

Builds (also alone with `--builds`): `create_scalar_index("text", ...)` of INVERTED (the
default tokenizer, and the `ngram` one), NGRAM and MINHASHLSH by pylance and by Quiver's
engine on copies of the data, each in a fresh process (Quiver's with the allocator
settings `quiver serve` runs with), alternating, `--rounds` times; the ratio is pylance's
seconds / Quiver's (above 1 Quiver builds faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from benchmarks.flight import Server, _linked_root

HERE = Path(__file__).resolve().parent
LIMIT = 10
_PYLANCE_SERVER = textwrap.dedent(
    """
    import json, sys, warnings
    import lance
    import pyarrow as pa
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
            schema = ds.scanner(columns=req.get("columns"), filter=req.get("filter"),
                                full_text_query=req.get("full_text_query"),
                                limit=req.get("limit")).projected_schema
            ep = flight.FlightEndpoint(descriptor.command, [self.location])
            return flight.FlightInfo(schema, descriptor, [ep], -1, -1)

        def do_get(self, context, ticket):
            # the ticket is the request: GetFlightInfo's, or a client's own (one round trip);
            # a list of queries is a batch, each one's rows after its query_index
            req = json.loads(ticket.ticket)
            ds, queries = open_dataset(req["dataset"]), req.get("full_text_query")
            if queries is None:  # a filtered read
                return flight.RecordBatchStream(
                    ds.to_table(columns=req.get("columns"), filter=req["filter"]))
            batch = isinstance(queries, list)
            tables = []
            for i, q in enumerate(queries if batch else [queries]):
                t = ds.to_table(columns=req.get("columns"), full_text_query=q,
                                limit=req.get("limit"))
                if batch:
                    t = t.add_column(0, "query_index", pa.array([i] * t.num_rows, pa.int32()))
                tables.append(t)
            return flight.RecordBatchStream(pa.concat_tables(tables))

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
    ds = lance.dataset(str(path))
    if not any(i["type"] == "NGram" for i in ds.list_indices()):
        ds.create_scalar_index("text", "NGRAM")
    return path, vocabulary


def queries(vocabulary: list[str], n: int) -> list[str]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        band = [(0, 50), (50, 2_000), (2_000, 50_000)][i % 3]
        words = rng.integers(*band, size=1 + i % 3)
        out.append(" ".join(vocabulary[w] for w in words))
    return out


def _command(query: str | list[str]) -> bytes:
    doc = {"dataset": "docs", "full_text_query": query, "limit": LIMIT, "columns": ["id"]}
    return json.dumps(doc).encode()


def _ticketed(client: flight.FlightClient, query: str) -> tuple[float, pa.Table]:
    """GetFlightInfo + DoGet (either server)."""
    t0 = time.perf_counter()
    info = client.get_flight_info(flight.FlightDescriptor.for_command(_command(query)))
    table = client.do_get(info.endpoints[0].ticket).read_all()
    return time.perf_counter() - t0, table


def _one_trip(
    name: str, client: flight.FlightClient, query: str | list[str]
) -> tuple[float, pa.Table]:
    """One round trip: Quiver's DoExchange with the search in its descriptor
    (`Client.full_text_search`), the reference's DoGet of a ticket that is the request."""
    t0 = time.perf_counter()
    if name == "quiver":
        descriptor = flight.FlightDescriptor.for_command(_command(query))
        writer, reader = client.do_exchange(descriptor)
        writer.done_writing()
        table = reader.read_all()
        writer.close()
    else:
        table = client.do_get(flight.Ticket(_command(query))).read_all()
    return time.perf_counter() - t0, table


def needles(vocabulary: list[str], n: int) -> list[str]:
    """`contains` needles: whole rare words (a few rows each), and four letters of middling
    words (hundreds to thousands of rows)."""
    rng = np.random.default_rng(2)
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(vocabulary[int(rng.integers(2_000, 50_000))])
        else:
            word = vocabulary[int(rng.integers(50, 2_000))]
            start = int(rng.integers(0, 4))
            out.append(word[start : start + 4])
    return out


def _filtered(client: flight.FlightClient, needle: str) -> tuple[float, pa.Table]:
    """GetFlightInfo + DoGet of every endpoint (either server) of a `contains` read."""
    command = json.dumps(
        {"dataset": "docs", "columns": ["id", "text"], "filter": f"contains(text, '{needle}')"}
    ).encode()
    t0 = time.perf_counter()
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
    parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
    seconds = time.perf_counter() - t0
    return seconds, pa.concat_tables(parts).sort_by("id")


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


def _qps(times: dict[str, list[float]], queries: int) -> dict[str, float]:
    return {k: queries / sum(v) for k, v in times.items()}


def searches(path: Path, vocabulary: list[str], n: int, rounds: int) -> None:
    """Single queries (tickets, then one round trip) and batches against both servers."""
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
                    _ticketed(c, q)
            quiver.reset_peak()
            pylance.reset_peak()
            phases = (
                ("first sight, tickets", None),  # each query's words read for the first time
                ("one round trip", _one_trip),
                ("tickets", None),
            )
            for label, run in phases:
                times: dict[str, list[float]] = {"quiver": [], "pylance": []}
                for i, q in enumerate(batch):
                    order = ("quiver", "pylance") if i % 2 == 0 else ("pylance", "quiver")
                    got = {}
                    for name in order:
                        if run is None:
                            seconds, got[name] = _ticketed(clients[name], q)
                        else:
                            seconds, got[name] = run(name, clients[name], q)
                        times[name].append(seconds)
                    _same(got["pylance"], got["quiver"], q)
                qps = _qps(times, n)
                print(f"single queries, {label} ({n}, top {LIMIT}): Quiver {qps['quiver']:.0f} "
                      f"q/s (median {statistics.median(times['quiver']) * 1000:.2f} ms); "
                      f"pylance server {qps['pylance']:.0f} q/s (median "
                      f"{statistics.median(times['pylance']) * 1000:.2f} ms); ratio "
                      f"{qps['quiver'] / qps['pylance']:.2f}x", flush=True)  # fmt: skip
            seconds: dict[str, list[float]] = {"quiver": [], "pylance": []}
            for r in range(rounds):
                order = ("quiver", "pylance") if r % 2 == 0 else ("pylance", "quiver")
                got = {}
                for name in order:
                    t, got[name] = _one_trip(name, clients[name], batch)
                    seconds[name].append(t)
                for i, q in enumerate(batch):
                    pick = {
                        k: v.filter(pc.equal(v["query_index"], i)).drop(["query_index"])
                        for k, v in got.items()
                    }
                    _same(pick["pylance"], pick["quiver"], q)
            med = {k: statistics.median(v) for k, v in seconds.items()}
            batch_line = (f"batches of {n} queries (one round trip, {rounds} rounds): Quiver "
                  f"{n / med['quiver']:.0f} q/s ({med['quiver'] * 1000:.0f} ms, peak "
                  f"{quiver.peak_mb():.0f} MB); pylance server {n / med['pylance']:.0f} q/s "
                  f"({med['pylance'] * 1000:.0f} ms, peak {pylance.peak_mb():.0f} MB); ratio "
                  f"{med['pylance'] / med['quiver']:.2f}x")  # fmt: skip
            print(batch_line, flush=True)
            times = {"quiver": [], "pylance": []}
            rows = 0
            for i, needle in enumerate(needles(vocabulary, n)):
                order = ("quiver", "pylance") if i % 2 == 0 else ("pylance", "quiver")
                got = {}
                for name in order:
                    seconds_, got[name] = _filtered(clients[name], needle)
                    times[name].append(seconds_)
                assert got["quiver"].equals(got["pylance"]), needle
                rows += got["quiver"].num_rows
            qps = _qps(times, n)
            print(f"contains filters through the NGRAM index ({n}, {rows / n:.0f} rows each on "
                  f"average): Quiver {qps['quiver']:.0f} q/s (median "
                  f"{statistics.median(times['quiver']) * 1000:.2f} ms); pylance server "
                  f"{qps['pylance']:.0f} q/s (median "
                  f"{statistics.median(times['pylance']) * 1000:.2f} ms); ratio "
                  f"{qps['quiver'] / qps['pylance']:.2f}x", flush=True)  # fmt: skip
        finally:
            quiver.stop()
            pylance.stop()


_BUILD = textwrap.dedent(
    """
    import json, sys, time, warnings
    warnings.simplefilter("ignore")
    engine, path, kind, options = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    if engine == "quiver":
        import quiver
        from quiver.flight_server.memory import tune_allocator
        tune_allocator()  # the allocator settings `quiver serve` runs with
        ds = quiver.dataset(path)
    else:
        import lance
        ds = lance.dataset(path)
    t0 = time.perf_counter()
    ds.create_scalar_index("text", kind, **json.loads(options))
    print(time.perf_counter() - t0)
    """
)


def builds(path: Path, rounds: int, kind: str, **options: object) -> None:
    """Each build of a `kind` index (with `options`) in a fresh process (as a server or a
    job runs one), engines alternating."""
    table = lance.dataset(str(path)).to_table(columns=["id", "text"])
    seconds: dict[str, list[float]] = {"quiver": [], "pylance": []}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        for i in range(rounds):
            for name in ("quiver", "pylance") if i % 2 == 0 else ("pylance", "quiver"):
                copy = Path(tmp) / f"{name}-{i}.lance"
                lance.write_dataset(table, str(copy), max_rows_per_file=250_000)
                out = subprocess.run(
                    [sys.executable, "-c", _BUILD, name, str(copy), kind, json.dumps(options)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                seconds[name].append(float(out.stdout.split()[-1]))
                shutil.rmtree(copy)
    q, p = statistics.median(seconds["quiver"]), statistics.median(seconds["pylance"])
    what = " ".join([kind, *(f"{k}={v}" for k, v in options.items())])
    print(f"{what} build: Quiver {q:.2f} s, pylance {p:.2f} s; ratio {p / q:.2f}x", flush=True)


def near_duplicates(path: Path, queries: int, rounds: int) -> None:
    """MinHash searches in process on a MINHASHLSH index pylance built: each query a
    document with its last word changed, engines alternating query by query; answers
    checked equal."""
    from lance.query import MinHashQuery as PylanceQuery

    import quiver
    from quiver.format.dataset import MinHashQuery

    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        copy = Path(tmp) / "minhash.lance"
        shutil.copytree(path, copy)
        lance.dataset(str(copy)).create_scalar_index("text", "MINHASHLSH")
        texts = lance.dataset(str(copy)).take(
            np.random.default_rng(3).choice(lance.dataset(str(copy)).count_rows(), queries),
            columns=["text"],
        ).column(0).to_pylist()  # fmt: skip
        asks = [t.rsplit(" ", 1)[0] + " different" for t in texts if t]
        engines = {"quiver": quiver.dataset(str(copy)), "pylance": lance.dataset(str(copy))}
        kinds = {"quiver": MinHashQuery, "pylance": PylanceQuery}
        times: dict[str, list[float]] = {"quiver": [], "pylance": []}
        for r in range(rounds):
            for q in asks:
                found = {}
                for name in ("quiver", "pylance") if r % 2 == 0 else ("pylance", "quiver"):
                    t0 = time.perf_counter()
                    answer = engines[name].to_table(
                        nearest=kinds[name](q, "text"), columns=["id"], limit=10
                    )
                    times[name].append(time.perf_counter() - t0)
                    found[name] = answer.column("id").to_pylist()
                assert found["quiver"] == found["pylance"], q
    q, p = statistics.median(times["quiver"]), statistics.median(times["pylance"])
    print(f"MinHash searches ({len(asks)} x {rounds}): Quiver {q * 1e3:.2f} ms, pylance "
          f"{p * 1e3:.2f} ms; ratio {p / q:.2f}x", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--minhash", action="store_true", help="only the MINHASHLSH figures")
    parser.add_argument(
        "--searches", action="store_true", help="only the searches and filters over Flight"
    )
    parser.add_argument("--builds", action="store_true", help="only the index builds")
    args = parser.parse_args()
    path, vocabulary = corpus(args.rows)
    print(f"{args.rows:,} documents; {os.cpu_count()} cores", flush=True)
    if not args.minhash:
        if not args.builds:
            searches(path, vocabulary, args.queries, args.rounds)
        if args.searches:
            return
        builds(path, args.rounds, "INVERTED")
        builds(path, args.rounds, "INVERTED", base_tokenizer="ngram")
        builds(path, args.rounds, "NGRAM")
        if args.builds:
            return
    builds(path, args.rounds, "MINHASHLSH")
    near_duplicates(path, args.queries, args.rounds)


if __name__ == "__main__":
    main()
