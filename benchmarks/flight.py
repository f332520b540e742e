"""Flight benchmark: Quiver next to a Flight server over pylance and the transport limit.

    .venv/bin/python -m benchmarks.flight [--rows 4000000] [--rounds 5]
                                          [--storage-versions 2.0,2.2] [--no-write]
    .venv/bin/python -m benchmarks.flight --memory [--rows 20000000] [--clients 4]

Throughput mode, per storage version, on the benchmark table (benchmarks/data.py, written by
pylance with 1 M-row fragments), three servers each in its own process:
- `memory`: a plain pyarrow Flight server streaming the table from memory, one endpoint per
  fragment (the transport limit; full scans only);
- `pylance`: a minimal Flight server over pylance (one endpoint per fragment, DoGet streams
  `fragment.to_batches(columns=, filter=)`): what a user would otherwise write;
- `quiver`: `quiver serve`.
Before the servers start, every data file is dropped from the page cache and read back
sequentially (`benchmarks.scan.warm_page_cache`), so each run starts from the same warm cache.
A client pulls every endpoint of one GetFlightInfo with 4 threads. Rounds interleave the
servers; each figure is the median over rounds, each ratio the median of per-round ratios.
Every server's peak RSS (VmHWM, reset before each case) is printed. Then the latency of
small reads on one kept connection (a GetFlightInfo; a one-row read `id = N`: GetFlightInfo
and each endpoint's DoGet in turn), and DoPut + commit of the table into a new Quiver
dataset vs pylance `write_dataset` (unless `--no-write`).

Memory mode: 4 client processes each stream every endpoint of the dataset at once (full scan,
then the 1 % filter), discarding what they receive; prints each server's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.flight as flight

from benchmarks.data import ROWS
from benchmarks.scan import ensure_dataset, warm_page_cache

ROOT = Path(__file__).resolve().parent.parent
CLIENT_THREADS = 4
FILTER = "value < 0.01"  # 1 % of the rows: `value` is uniform in [0, 1)
PROJECTION = ["id", "value"]
CALLS = 20  # small reads per server per round

_MEMORY_SERVER = textwrap.dedent(
    """
    import sys
    import lance
    import pyarrow.flight as flight

    uri, port = sys.argv[1], int(sys.argv[2])
    ds = lance.dataset(uri)
    slices = [f.to_table() for f in ds.get_fragments()]
    schema = slices[0].schema

    class Memory(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            eps = [flight.FlightEndpoint(str(i).encode(), [self.location])
                   for i in range(len(slices))]
            return flight.FlightInfo(schema, descriptor, eps, -1, -1)

        def do_get(self, context, ticket):
            return flight.RecordBatchStream(slices[int(ticket.ticket)])

    server = Memory(f"grpc://127.0.0.1:{port}")
    server.location = flight.Location.for_grpc_tcp("127.0.0.1", port)
    print("ready", flush=True)
    server.serve()
    """
)

# What a user puts in front of pylance: one endpoint per fragment, the ticket names the
# fragment, the projection and the filter; DoGet streams the fragment's batches.
_PYLANCE_SERVER = textwrap.dedent(
    """
    import json, sys
    import lance
    import pyarrow as pa
    import pyarrow.flight as flight

    root, port = sys.argv[1], int(sys.argv[2])

    class PylanceServer(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            req = json.loads(descriptor.command)
            ds = lance.dataset(f"{root}/{req['dataset']}.lance")
            schema = ds.scanner(columns=req.get("columns"), filter=req.get("filter")
                                ).projected_schema
            eps = [flight.FlightEndpoint(json.dumps({**req, "fragment": f.fragment_id}).encode(),
                                         [self.location]) for f in ds.get_fragments()]
            return flight.FlightInfo(schema, descriptor, eps, -1, -1)

        def do_get(self, context, ticket):
            req = json.loads(ticket.ticket)
            frag = lance.dataset(f"{root}/{req['dataset']}.lance").get_fragment(req["fragment"])
            scanner = frag.scanner(columns=req.get("columns"), filter=req.get("filter"))
            return flight.RecordBatchStream(scanner.to_reader())

    server = PylanceServer(f"grpc://127.0.0.1:{port}")
    server.location = flight.Location.for_grpc_tcp("127.0.0.1", port)
    print("ready", flush=True)
    server.serve()
    """
)

# Memory mode: one client process streaming every endpoint with 4 threads, keeping nothing.
_DRAIN_CLIENT = textwrap.dedent(
    """
    import sys
    from concurrent.futures import ThreadPoolExecutor
    import pyarrow.flight as flight

    port, command = int(sys.argv[1]), sys.argv[2].encode()
    client = flight.connect(f"grpc://127.0.0.1:{port}")
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command))

    def drain(endpoint):
        rows = 0
        for chunk in flight.connect(f"grpc://127.0.0.1:{port}").do_get(endpoint.ticket):
            rows += chunk.data.num_rows
        return rows

    with ThreadPoolExecutor(4) as pool:
        print(sum(pool.map(drain, info.endpoints)))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, timeout: float = 300) -> None:
    """Wait until a Flight server on `port` answers ListFlights-free calls (a TCP connect is
    not enough: the memory server loads its table before it listens)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"no server on port {port}")


class Server:
    """One server process: its port, and its peak RSS since the last reset."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.port = _free_port()
        log = os.environ.get("QUIVER_BENCH_SERVER_LOG")  # where servers' logs go, if set
        self.proc = subprocess.Popen(
            [*argv, str(self.port)] if name != "quiver" else [*argv, "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "ab") if log else subprocess.DEVNULL,  # noqa: SIM115
        )

    def ready(self) -> None:
        _wait_ready(self.port)

    def reset_peak(self) -> None:
        """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM)."""
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")

    def peak_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _start_servers(
    serve_root: Path, uri: Path, with_memory: bool, quiver_args: list[str]
) -> dict[str, Server]:
    py = sys.executable
    quiver = [
        py,
        "-m",
        "quiver.flight_server",
        "serve",
        "--root",
        str(serve_root),
        "--exit-with-parent",
    ]
    quiver += list(quiver_args)
    servers = {
        "quiver": Server("quiver", quiver),
        "pylance": Server("pylance", [py, "-c", _PYLANCE_SERVER, str(serve_root)]),
    }
    if with_memory:
        servers["memory"] = Server("memory", [py, "-c", _MEMORY_SERVER, str(uri)])
    for s in servers.values():
        s.ready()
    return servers


def _command(name: str, columns: list[str] | None, filt: str | None) -> bytes:
    doc: dict = {"dataset": name}
    if columns is not None:
        doc["columns"] = columns
    if filt is not None:
        doc["filter"] = filt
    return json.dumps(doc).encode()


def _pull_all(port: int, command: bytes) -> tuple[int, int]:
    """GetFlightInfo, then every endpoint with 4 threads, each on its own connection;
    returns (rows, bytes)."""
    info = flight.connect(f"grpc://127.0.0.1:{port}").get_flight_info(
        flight.FlightDescriptor.for_command(command)
    )

    def pull(endpoint: flight.FlightEndpoint) -> pa.Table:
        client = flight.connect(f"grpc://127.0.0.1:{port}")
        return client.do_get(endpoint.ticket).read_all()

    with ThreadPoolExecutor(max_workers=CLIENT_THREADS) as pool:
        tables = list(pool.map(pull, info.endpoints))
    return sum(t.num_rows for t in tables), sum(t.nbytes for t in tables)


def _measure(servers: dict[str, Server], name: str, rounds: int, version: str) -> list[str]:
    """Run every case `rounds` times, interleaving servers; markdown rows of the results."""
    cases = [
        ("full scan", None, None, ["memory", "pylance", "quiver"]),
        ("projection id, value", PROJECTION, None, ["pylance", "quiver"]),
        ("filter value < 0.01 (1 %)", None, FILTER, ["pylance", "quiver"]),
    ]
    out = []
    for label, columns, filt, who in cases:
        who = [w for w in who if w in servers]
        cmd = _command(name, columns, filt)
        times: dict[str, list[float]] = {w: [] for w in who}
        peaks: dict[str, float] = dict.fromkeys(who, 0.0)
        rows: dict[str, int] = {}
        nbytes = 0
        for w in who:  # warm-up round (page cache, lazy imports), not counted
            _pull_all(servers[w].port, cmd)
        for _ in range(rounds):
            for w in who:
                servers[w].reset_peak()
                t0 = time.perf_counter()
                rows[w], nbytes = _pull_all(servers[w].port, cmd)
                times[w].append(time.perf_counter() - t0)
                peaks[w] = max(peaks[w], servers[w].peak_mb())
        if len(set(rows.values())) != 1:
            raise AssertionError(f"{label}: servers returned different row counts {rows}")
        mb = nbytes / 1e6
        for w in who:
            t = statistics.median(times[w])
            ratios = []
            if w == "quiver":
                for ref in ("pylance", "memory"):
                    if ref in times:
                        per_round = [a / b for a, b in zip(times[ref], times[w], strict=True)]
                        ratios.append(f"{statistics.median(per_round):.2f}× {ref}")
            out.append(
                f"| {version} | {label} | {w} | {t:.3f} | {mb / t:,.0f} | {peaks[w]:,.0f} | "
                f"{', '.join(ratios)} |"
            )
    return out


def _small_read(client: flight.FlightClient, name: str, rows: int | None, rng: random.Random):
    """A GetFlightInfo of the whole dataset (`rows` None), or a one-row read: GetFlightInfo
    with `id = N`, then each endpoint's DoGet in turn."""
    if rows is None:
        client.get_flight_info(flight.FlightDescriptor.for_command(_command(name, None, None)))
        return
    filt = f"id = {rng.randrange(rows)}"
    info = client.get_flight_info(flight.FlightDescriptor.for_command(_command(name, None, filt)))
    got = sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
    if got != 1:
        raise AssertionError(f"{filt} returned {got} rows")


def _latency(
    servers: dict[str, Server], name: str, rows: int, rounds: int, version: str
) -> list[str]:
    """Small reads on one kept connection, as a latency-bound client makes them; median
    seconds per call over `CALLS` calls per round, rounds interleaving the servers."""
    who = [w for w in ("pylance", "quiver") if w in servers]
    clients = {w: flight.connect(f"grpc://127.0.0.1:{servers[w].port}") for w in who}
    rng = random.Random(7)
    out = []
    for label, n_rows in (("GetFlightInfo", None), ("one-row read `id = N`", rows)):
        times: dict[str, list[float]] = {w: [] for w in who}
        for w in who:  # warm-up
            _small_read(clients[w], name, n_rows, rng)
        for _ in range(rounds):
            for w in who:
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    _small_read(clients[w], name, n_rows, rng)
                times[w].append((time.perf_counter() - t0) / CALLS)
        for w in who:
            ratio = ""
            if w == "quiver" and "pylance" in times:
                per_round = [a / b for a, b in zip(times["pylance"], times[w], strict=True)]
                ratio = f"{statistics.median(per_round):.2f}× pylance"
            t = statistics.median(times[w])
            out.append(f"| {version} | {label}, per call | {w} | {t:.4f} | | | {ratio} |")
    for c in clients.values():
        c.close()
    return out


def _write_rows(servers: dict[str, Server], uri: Path, serve_root: Path, version: str) -> list:
    table = lance.dataset(str(uri)).to_table()
    client = flight.connect(f"grpc://127.0.0.1:{servers['quiver'].port}")

    def put() -> None:
        target = f"put-{time.time_ns()}"
        cmd = json.dumps({"dataset": target, "mode": "create"})  # 2.2, the default
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(cmd.encode()),
                                       table.schema)  # fmt: skip
        writer.write_table(table, max_chunksize=65536)
        writer.done_writing()
        reader.read()
        writer.close()
        client.do_action(flight.Action("drop_dataset", json.dumps({"dataset": target}).encode()))

    def pylance_write() -> None:
        target = serve_root / f"pl-{time.time_ns()}.lance"
        lance.write_dataset(table, str(target), data_storage_version=version)
        shutil.rmtree(target)

    t_put, t_pl = [], []
    for _ in range(2):
        for fn, sink in ((put, t_put), (pylance_write, t_pl)):
            t0 = time.perf_counter()
            fn()
            sink.append(time.perf_counter() - t0)
    mb = table.nbytes / 1e6
    tq, tp = statistics.median(t_put), statistics.median(t_pl)
    return [
        f"| {version} | DoPut + commit | quiver | {tq:.3f} | {mb / tq:,.0f} | | "
        f"{tp / tq:.2f}× pylance write_dataset |",
        f"| {version} | write_dataset (local) | pylance | {tp:.3f} | {mb / tp:,.0f} | | |",
    ]


def _linked_root(tmp: Path, uri: Path) -> Path:
    """A serving root holding only the benchmark dataset, its files hard-linked (not copied;
    Quiver refuses symbolic links that lead out of its root)."""
    shutil.copytree(uri, tmp / uri.name, copy_function=os.link)
    return tmp


def throughput(args: argparse.Namespace) -> None:
    print("| storage | case | server | seconds | MB/s | peak RSS MB | Quiver ratio |")
    print("|---|---|---|---|---|---|---|")
    for version in args.storage_versions.split(","):
        uri = Path(ensure_dataset(args.rows, version))
        warm_page_cache(str(uri))
        name = uri.name[: -len(".lance")]
        with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
            root = _linked_root(Path(tmp), uri)
            servers = _start_servers(root, uri, True, args.quiver_arg)
            try:
                for row in _measure(servers, name, args.rounds, version):
                    print(row, flush=True)
                for row in _latency(servers, name, args.rows, args.rounds, version):
                    print(row, flush=True)
                if args.write and version == "2.2":
                    for row in _write_rows(servers, uri, root, version):
                        print(row, flush=True)
            finally:
                for s in servers.values():
                    s.stop()


def memory(args: argparse.Namespace) -> None:
    """Peak RSS of each server while `--clients` processes stream the dataset at once."""
    version = args.storage_versions.split(",")[-1]
    uri = Path(ensure_dataset(args.rows, version))
    warm_page_cache(str(uri))
    name = uri.name[: -len(".lance")]
    size = sum(p.stat().st_size for p in uri.rglob("*") if p.is_file())
    print(f"dataset: {args.rows} rows, {size / 1e9:.1f} GB on disk ({version}), "
          f"{args.clients} clients")  # fmt: skip
    print("| case | server | seconds | peak RSS MB |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        root = _linked_root(Path(tmp), uri)
        servers = _start_servers(root, uri, False, args.quiver_arg)
        try:
            for label, filt in (("full scan", None), ("filter 1 %", FILTER)):
                cmd = _command(name, None, filt).decode()
                for w, server in servers.items():
                    server.reset_peak()
                    t0 = time.perf_counter()
                    clients = [
                        subprocess.Popen(
                            [sys.executable, "-c", _DRAIN_CLIENT, str(server.port), cmd],
                            stdout=subprocess.PIPE,
                        )
                        for _ in range(args.clients)
                    ]
                    counts = [int(c.communicate()[0]) for c in clients]
                    seconds = time.perf_counter() - t0
                    if filt is None and any(c != args.rows for c in counts):
                        raise AssertionError(f"{w}: clients read {counts} rows")
                    print(f"| {label} | {w} | {seconds:.1f} | {server.peak_mb():,.0f} |",
                          flush=True)  # fmt: skip
        finally:
            for s in servers.values():
                s.stop()


def main() -> None:
    """Parse arguments and run the chosen mode."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--storage-versions", default="2.0,2.2")
    parser.add_argument("--no-write", dest="write", action="store_false")
    parser.add_argument("--memory", action="store_true", help="peak RSS with many clients")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--quiver-arg", action="append", default=[], help="a flag for quiver serve (repeat)"
    )
    args = parser.parse_args()
    if args.memory:
        args.rows = args.rows or 5 * ROWS
        memory(args)
    else:
        args.rows = args.rows or ROWS
        throughput(args)


if __name__ == "__main__":
    main()
