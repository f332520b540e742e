"""Flight SQL benchmark: Quiver over Flight SQL through ADBC next to DuckDB over pylance.

    .venv/bin/python -m benchmarks.sql [--rows 4000000] [--rounds 5]
    .venv/bin/python -m benchmarks.sql --memory [--rows 20000000]

Throughput mode, on the benchmark table (benchmarks/data.py, written by pylance, 1 M-row
fragments, storage 2.2) and a small dimension dataset (one label per category):
- `quiver`: `quiver serve` in its own process; the client connects with ADBC's Flight SQL
  driver (`adbc_driver_flightsql`), runs each query and fetches the whole result as Arrow;
- `duckdb`: DuckDB in this process over `lance.dataset(...)` (pylance's scans, with
  projection and filter pushdown) fetching the same result as Arrow: the local
  alternative to a server.
Five queries: a count with a filter, a group-by, a top-k, a join with the dimension, and a
full projection (every column). Rounds interleave the two; each figure is the median over
rounds and each ratio the median of per-round ratios (DuckDB's seconds / Quiver's: above 1
Quiver is faster). Both results are checked equal. The server's peak RSS over each query's
rounds is printed. The full projection's rounds also time `memory`: a Flight SQL server
that holds the table decoded in memory (read by pylance) and streams it as Quiver does (one
endpoint, 4 MiB batches) to the same ADBC driver: what the transport and the client cost
with no reading at all, the bound a server that reads files can approach.

Memory mode: the group-by on a 20 M-row table, the server's peak RSS.

Engines mode (`--engines`): the two SQL engines Quiver could embed, side by side in this
process over the same Quiver scans (`format.dataset.sql.table.QuiverTable`, a
`pyarrow.dataset.Dataset` both take with projection and filter pushdown): DataFusion (what
Quiver runs) and DuckDB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import lance
import pyarrow as pa

from benchmarks.data import ROWS
from benchmarks.flight import Server, _linked_root
from benchmarks.scan import ensure_dataset, warm_page_cache

LABELS = {
    "alpha": "greek-1",
    "beta": "greek-1",
    "gamma": "greek-2",
    "delta": "greek-2",
    "epsilon": "greek-3",
    "zeta": "greek-3",
    "eta": "greek-4",
    "theta": "greek-4",
}
QUERIES = {
    "count with a filter": "SELECT count(*) AS n FROM {t} WHERE value > 0.9",
    "group-by": (
        "SELECT category, count(*) AS n, avg(value) AS mean FROM {t} GROUP BY category "
        "ORDER BY category"
    ),
    "top-k": "SELECT id, value FROM {t} ORDER BY value DESC LIMIT 10",
    "join with a dimension": (
        "SELECT d.label, count(*) AS n, max(f.value) AS top FROM {t} f JOIN dims d "
        "ON f.category = d.category WHERE f.value < 0.5 GROUP BY d.label ORDER BY d.label"
    ),
    "full projection": "SELECT * FROM {t}",
}


# A Flight SQL server holding the whole table decoded (read by pylance): every query answers
# the table, as one endpoint of 4 MiB batches (Quiver's batch bytes). It answers
# what ADBC's driver asks before a query (GetSqlInfo, CreatePreparedStatement), with the
# protocol's messages from Quiver's compiled .proto.
_MEMORY_SQL_SERVER = textwrap.dedent(
    """
    import sys
    import lance
    import pyarrow.flight as flight
    from quiver.flight_server.sql.messages import pack, sql, unpack
    from quiver.flight_server.sql.metadata import sql_info_table

    uri, port = sys.argv[1], int(sys.argv[2])
    table = lance.dataset(uri).to_table().combine_chunks()
    rows = max(1, table.num_rows * (4 << 20) // table.nbytes)
    prepared = sql.ActionCreatePreparedStatementResult(
        prepared_statement_handle=b"table", dataset_schema=table.schema.serialize().to_pybytes()
    )

    class Memory(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            command = unpack(descriptor.command)
            if isinstance(command, sql.CommandGetSqlInfo):
                info = sql_info_table(list(command.info), "1")
                self.info = info
                return flight.FlightInfo(
                    info.schema, descriptor, [flight.FlightEndpoint(b"info", [])], -1, -1
                )
            endpoint = flight.FlightEndpoint(b"table", [])
            return flight.FlightInfo(table.schema, descriptor, [endpoint], -1, -1)

        def do_action(self, context, action):
            if action.type == "CreatePreparedStatement":
                return [flight.Result(pack(prepared))]
            return []

        def do_get(self, context, ticket):
            if ticket.ticket == b"info":
                return flight.RecordBatchStream(self.info)
            return flight.GeneratorStream(table.schema, table.to_batches(max_chunksize=rows))

    Memory(f"grpc://127.0.0.1:{port}").serve()
    """
)


def _connect(port: int):  # noqa: ANN202 - an ADBC connection
    import adbc_driver_flightsql.dbapi as flight_sql

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return flight_sql.connect(f"grpc://127.0.0.1:{port}", autocommit=True)


def _quiver(conn, query: str) -> tuple[float, pa.Table]:  # noqa: ANN001
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(query)
        table = cur.fetch_arrow_table()
    return time.perf_counter() - t0, table


def _duckdb(con, query: str) -> tuple[float, pa.Table]:  # noqa: ANN001
    t0 = time.perf_counter()
    table = con.sql(query).to_arrow_table()
    return time.perf_counter() - t0, table


def _same(a: pa.Table, b: pa.Table, query: str) -> None:
    """Equal results (row for row where the query orders them; float aggregates to 1e-9)."""
    if a.num_rows != b.num_rows or a.column_names != b.column_names:
        raise AssertionError(f"{query}: {a.num_rows} rows vs {b.num_rows}")
    if a.num_rows > 1000:
        return  # the full projection: counted (both read the same files)
    for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True):
        for k in x:
            u, v = x[k], y[k]
            if isinstance(u, float):
                assert abs(u - v) <= 1e-9 * max(1.0, abs(u)), (query, k, u, v)
            else:
                assert u == v, (query, k, u, v)


def _dims(root: Path) -> str:
    uri = str(root / "dims.lance")
    lance.write_dataset(pa.table({"category": list(LABELS), "label": list(LABELS.values())}), uri)
    return uri


def _serve(root: Path) -> Server:
    quiver = [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(root)]
    server = Server("quiver", [*quiver, "--exit-with-parent"])
    server.ready()
    return server


def throughput(args: argparse.Namespace) -> None:
    import duckdb

    uri = Path(ensure_dataset(args.rows, "2.2"))
    warm_page_cache(str(uri))
    name = uri.name[: -len(".lance")]
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        root = _linked_root(Path(tmp), uri)
        dims = _dims(root)
        server = _serve(root)
        held = Server("memory", [sys.executable, "-c", _MEMORY_SQL_SERVER, str(uri)])
        try:
            held.ready()
            conn = _connect(server.port)
            held_conn = _connect(held.port)
            con = duckdb.connect()
            con.register("bench", lance.dataset(str(uri)))
            con.register("dims", lance.dataset(dims))
            print(f"{args.rows:,} rows; {args.rounds} rounds; {os.cpu_count()} cores")
            print("| query | Quiver over Flight SQL (ADBC) s | DuckDB over pylance s | "
                  "ratio | rows | server peak RSS MB |")  # fmt: skip
            print("|---|---|---|---|---|---|")
            for label, template in QUERIES.items():
                ours = template.format(t=f'"{name}"')
                theirs = template.format(t="bench")
                whole = label == "full projection"
                _quiver(conn, ours), _duckdb(con, theirs)  # warm both
                if whole:
                    _quiver(held_conn, ours)
                server.reset_peak()
                q_times, d_times, ratios, m_ratios = [], [], [], []
                for _ in range(args.rounds):
                    q, q_table = _quiver(conn, ours)
                    del q_table
                    d, d_table = _duckdb(con, theirs)
                    del d_table
                    q_times.append(q)
                    d_times.append(d)
                    ratios.append(d / q)
                    if whole:
                        m, m_table = _quiver(held_conn, ours)
                        if m_table.num_rows != args.rows:
                            raise AssertionError(f"memory server: {m_table.num_rows} rows")
                        del m_table
                        m_ratios.append((m, d / m))
                peak = server.peak_mb()
                _, q_table = _quiver(conn, ours)
                _, d_table = _duckdb(con, theirs)
                _same(q_table, d_table, label)
                print(f"| {label} | {statistics.median(q_times):.3f} | "
                      f"{statistics.median(d_times):.3f} | {statistics.median(ratios):.2f}x | "
                      f"{q_table.num_rows:,} | {peak:,.0f} |", flush=True)  # fmt: skip
                del q_table, d_table
                if m_ratios:
                    held_s = statistics.median(m for m, _ in m_ratios)
                    held_ratio = statistics.median(r for _, r in m_ratios)
            conn.close()
            held_conn.close()
            print(f"full projection from a Flight SQL server holding the table in memory: "
                  f"{held_s:.3f} s, {held_ratio:.2f}x DuckDB over pylance")  # fmt: skip
        finally:
            held.stop()
            server.stop()


def memory(args: argparse.Namespace) -> None:
    """The server's peak RSS while one client runs the group-by on a large table."""
    uri = Path(ensure_dataset(args.rows, "2.2"))
    warm_page_cache(str(uri))
    name = uri.name[: -len(".lance")]
    query = QUERIES["group-by"].format(t=f'"{name}"')
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        root = _linked_root(Path(tmp), uri)
        server = _serve(root)
        try:
            conn = _connect(server.port)
            idle = server.peak_mb()
            server.reset_peak()
            seconds, table = _quiver(conn, query)
            print(f"{args.rows:,} rows, group-by over Flight SQL: {seconds:.2f} s, "
                  f"{table.num_rows} groups, server peak RSS {server.peak_mb():,.0f} MB "
                  f"(idle {idle:,.0f} MB)")  # fmt: skip
            conn.close()
        finally:
            server.stop()


def engines(args: argparse.Namespace) -> None:
    """DataFusion and DuckDB over the same Quiver tables, in this process."""
    import datafusion
    import duckdb

    import quiver
    from quiver.format.dataset.sql.table import QuiverTable

    uri = Path(ensure_dataset(args.rows, "2.2"))
    warm_page_cache(str(uri))
    with tempfile.TemporaryDirectory(dir=uri.parent) as tmp:
        table = QuiverTable(quiver.dataset(str(uri)), "bench", 2)
        dims = QuiverTable(quiver.dataset(_dims(Path(tmp))), "dims", 1)
        ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(2))
        ctx.register_dataset("bench", table)
        ctx.register_dataset("dims", dims)
        con = duckdb.connect()
        con.register("bench", table)
        con.register("dims", dims)

        def run_datafusion(query: str) -> tuple[float, pa.Table]:
            t0 = time.perf_counter()
            result = pa.RecordBatchReader.from_stream(ctx.sql(query)).read_all()
            return time.perf_counter() - t0, result

        print("| query | DataFusion over Quiver s | DuckDB over Quiver s |")
        print("|---|---|---|")
        for label, template in QUERIES.items():
            query = template.format(t="bench")
            run_datafusion(query), _duckdb(con, query)
            times: dict[str, list[float]] = {"datafusion": [], "duckdb": []}
            for _ in range(args.rounds):
                times["datafusion"].append(run_datafusion(query)[0])
                times["duckdb"].append(_duckdb(con, query)[0])
            print(f"| {label} | {statistics.median(times['datafusion']):.3f} | "
                  f"{statistics.median(times['duckdb']):.3f} |", flush=True)  # fmt: skip


def local(args: argparse.Namespace) -> None:
    """`LanceDataset.sql` in this process: Quiver's engine against pylance's on the same
    dataset, rounds interleaved (the join needs a second table, which `sql` has not)."""
    import quiver

    uri = str(ensure_dataset(args.rows, "2.2"))
    warm_page_cache(uri)
    engines = {"quiver": quiver.dataset(uri), "pylance": lance.dataset(uri)}

    def run(engine: str, query: str) -> tuple[float, pa.Table]:
        t0 = time.perf_counter()
        reader = engines[engine].sql(query).build().to_stream_reader()
        result = reader.read_all()
        return time.perf_counter() - t0, result

    print(f"{args.rows:,} rows; {args.rounds} rounds; {os.cpu_count()} cores")
    print("| query | Quiver `sql` s | pylance `sql` s | ratio | rows |")
    print("|---|---|---|---|---|")
    for label, template in QUERIES.items():
        if "dims" in template:
            continue
        query = template.format(t="dataset")
        run("quiver", query), run("pylance", query)  # warm both
        times: dict[str, list[float]] = {"quiver": [], "pylance": []}
        ratios = []
        for _ in range(args.rounds):
            q = run("quiver", query)[0]
            p = run("pylance", query)[0]
            times["quiver"].append(q)
            times["pylance"].append(p)
            ratios.append(p / q)
        _, ours = run("quiver", query)
        _, theirs = run("pylance", query)
        _same(ours, theirs, label)
        print(f"| {label} | {statistics.median(times['quiver']):.3f} | "
              f"{statistics.median(times['pylance']):.3f} | {statistics.median(ratios):.2f}x | "
              f"{ours.num_rows:,} |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--engines", action="store_true")
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args()
    if args.local:
        args.rows = args.rows or ROWS
        local(args)
    elif args.engines:
        args.rows = args.rows or ROWS
        engines(args)
    elif args.memory:
        args.rows = args.rows or 20_000_000
        memory(args)
    else:
        args.rows = args.rows or ROWS
        throughput(args)


if __name__ == "__main__":
    main()
