"""Flight benchmark: a full scan through Quiver next to the transport limit and pylance.

    .venv/bin/python -m benchmarks.flight [--rows 4000000] [--repeat 3]

In one run, on the same ~850 MB dataset:
- Quiver: `quiver serve` in its own process; the client pulls every endpoint in parallel;
- transport limit: a plain pyarrow Flight server (own process) streaming the same table
  from memory, split into as many endpoints as Quiver serves;
- pylance reading the dataset locally;
then DoPut + commit of the table into a new Quiver dataset vs pylance `write_dataset`.
"""

from __future__ import annotations

import argparse
import shutil
import socket
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
from benchmarks.scan import ensure_dataset

ROOT = Path(__file__).resolve().parent.parent

_MEMORY_SERVER = textwrap.dedent(
    """
    import sys
    import lance
    import pyarrow.flight as flight

    uri, port, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    table = lance.dataset(uri).to_table()
    step = -(-table.num_rows // parts)
    slices = [table.slice(i * step, step) for i in range(parts)]

    class Memory(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            eps = [flight.FlightEndpoint(str(i).encode(), [self.location]) for i in range(parts)]
            return flight.FlightInfo(table.schema, descriptor, eps, table.num_rows, -1)

        def do_get(self, context, ticket):
            return flight.RecordBatchStream(slices[int(ticket.ticket)])

    server = Memory(f"grpc://127.0.0.1:{port}")
    server.location = flight.Location.for_grpc_tcp("127.0.0.1", port)
    print("ready", flush=True)
    server.serve()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"no server on port {port}")


def _pull_all(port: int, descriptor: flight.FlightDescriptor) -> pa.Table:
    """GetFlightInfo, then every endpoint in parallel threads, each on its own connection."""
    info = flight.connect(f"grpc://127.0.0.1:{port}").get_flight_info(descriptor)

    def pull(endpoint: flight.FlightEndpoint) -> pa.Table:
        client = flight.connect(f"grpc://127.0.0.1:{port}")
        return client.do_get(endpoint.ticket).read_all()

    with ThreadPoolExecutor(max_workers=8) as pool:
        tables = list(pool.map(pull, info.endpoints))
    return pa.concat_tables(tables)


def _best(fn, repeat: int) -> tuple[float, pa.Table]:  # noqa: ANN001
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    """Run the measurements and print a results table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--storage-version", default="2.2")
    args = parser.parse_args()
    uri = Path(ensure_dataset(args.rows, args.storage_version))
    name = uri.name[: -len(".lance")]
    parts = len(lance.dataset(str(uri)).get_fragments())
    quiver_port, memory_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        serve_root = Path(tmp)
        (serve_root / uri.name).symlink_to(uri)
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "flight_server", "serve", "--root", str(serve_root),
                 "--port", str(quiver_port)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                [sys.executable, "-c", _MEMORY_SERVER, str(uri), str(memory_port), str(parts)],
                cwd=ROOT, stdout=subprocess.DEVNULL,
            ),
        ]  # fmt: skip
        try:
            _wait_ready(quiver_port)
            _wait_ready(memory_port)
            time.sleep(1.0)  # the memory server loads the table before answering
            desc = flight.FlightDescriptor.for_path(name)
            t_mem, mem = _best(lambda: _pull_all(memory_port, desc), args.repeat)
            t_q, got = _best(lambda: _pull_all(quiver_port, desc), args.repeat)
            t_pl, ref = _best(lambda: lance.dataset(str(uri)).to_table(), args.repeat)
            assert got.num_rows == ref.num_rows == mem.num_rows
            mb = ref.nbytes / 1e6
            client = flight.connect(f"grpc://127.0.0.1:{quiver_port}")

            def put() -> None:
                target = f"put-{time.time_ns()}"
                cmd = f'{{"dataset": "{target}", "mode": "create"}}'.encode()
                writer, reader = client.do_put(flight.FlightDescriptor.for_command(cmd), ref.schema)
                writer.write_table(ref, max_chunksize=65536)
                writer.done_writing()
                reader.read()
                writer.close()

            def pylance_write() -> None:
                target = serve_root / f"pl-{time.time_ns()}.lance"
                lance.write_dataset(ref, str(target), data_storage_version=args.storage_version)
                shutil.rmtree(target)

            t_put, _ = _best(put, 1)
            t_plw, _ = _best(pylance_write, 1)
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=30)
    print(
        f"dataset: {args.rows} rows, {mb:.0f} MB in Arrow, {parts} fragments "
        f"({args.storage_version})"
    )
    rows = [
        ("in-memory Flight server (transport limit)", t_mem, "1.00"),
        ("Quiver full scan over Flight", t_q, f"{t_mem / t_q:.2f} of the limit"),
        ("pylance local read", t_pl, f"{t_pl / t_q:.2f} (pylance time / Quiver time)"),
        ("Quiver DoPut + commit", t_put, f"{t_plw / t_put:.2f} of pylance write_dataset"),
        ("pylance write_dataset (local)", t_plw, ""),
    ]
    print("| measure | seconds | MB/s | ratio |")
    print("|---|---|---|---|")
    for label, seconds, ratio in rows:
        print(f"| {label} | {seconds:.3f} | {mb / seconds:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
