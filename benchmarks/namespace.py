"""REST namespace benchmark: Quiver's namespace next to pylance's reference adapter.

    .venv/bin/python -m benchmarks.namespace [--rows 4000000] [--rounds 5]

The same calls go to two servers, each in its own process, over the same files (hard links
of the benchmark table, benchmarks/data.py, written by pylance, storage 2.2):

- `quiver`: `quiver serve --namespace-port`;
- `reference`: pylance 14's own REST adapter over a directory namespace
  (`lance.namespace.RestAdapter("dir", ...)`), the implementation the namespace clients are
  tested against.

Cases: QueryTable answers (an Arrow IPC file, read whole by the client) for every column,
for two columns, for a 1 % filter and for the first 10 matching rows; and CountTableRows with
a filter. Rounds interleave the servers; each figure is the median over rounds, each ratio
the median of per-round ratios (the reference's seconds / Quiver's: above 1 Quiver is
faster). Answers are checked equal; each server's peak RSS over a case's rounds is printed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.flight import Server, _free_port, _linked_root, _wait_ready
from benchmarks.scan import ensure_dataset, warm_page_cache

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "every column": ("query", {"k": 0, "vector": {}}),
    "two columns": ("query", {"k": 0, "vector": {}, "columns": {"column_names": ["id", "value"]}}),
    "1 % filter": (
        "query",
        {
            "k": 0,
            "vector": {},
            "filter": "value < 0.01",
            "columns": {"column_names": ["id", "value"]},
        },
    ),
    "first 10 matching": ("query", {"k": 10, "vector": {}, "filter": "value > 0.5"}),
    "count with a filter": ("count_rows", {"predicate": "value > 0.9"}),
}
_REFERENCE = (
    "import sys, time\n"
    "from lance.namespace import RestAdapter\n"
    "a = RestAdapter('dir', {'root': sys.argv[1]}, host='127.0.0.1', port=int(sys.argv[2]))\n"
    "a.start()\n"
    "time.sleep(1e9)\n"
)


def _call(port: int, table: str, route: str, body: dict[str, Any]) -> tuple[float, Any]:
    """One request; (seconds, the answer: a table, or the count)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request(
        "POST",
        f"/v1/table/{table}/{route}",
        body=json.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"{route}: {answer.status} {data[:300]!r}")
    result: Any = json.loads(data) if route == "count_rows" else None
    if result is None:
        result = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    return time.perf_counter() - t0, result


def _same(a: Any, b: Any, label: str) -> None:
    if isinstance(a, pa.Table):
        assert a.num_rows == b.num_rows and a.column_names == b.column_names, label
        if a.num_rows <= 100_000:
            key = a.column_names[0]
            assert a.sort_by(key).equals(b.sort_by(key)), label
    else:
        assert a == b, (label, a, b)


def throughput(args: argparse.Namespace) -> None:
    uri = Path(ensure_dataset(args.rows, "2.2"))
    warm_page_cache(str(uri))
    name = uri.name[: -len(".lance")]
    with (
        tempfile.TemporaryDirectory(dir=uri.parent) as a,
        tempfile.TemporaryDirectory(dir=uri.parent) as b,
    ):
        quiver_root, reference_root = _linked_root(Path(a), uri), _linked_root(Path(b), uri)
        namespace_port = _free_port()
        quiver = Server(
            "quiver",
            [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(quiver_root),
             "--namespace-port", str(namespace_port), "--exit-with-parent"],
        )  # fmt: skip
        reference = Server("reference", [sys.executable, "-c", _REFERENCE, str(reference_root)])
        try:
            quiver.ready()
            _wait_ready(namespace_port)
            reference.ready()
            ports = {"quiver": namespace_port, "reference": reference.port}
            print(f"{args.rows:,} rows; {args.rounds} rounds; {os.cpu_count()} cores")
            print("| case | Quiver s | reference s | ratio | rows | Quiver peak RSS MB | "
                  "reference peak RSS MB |")  # fmt: skip
            print("|---|---|---|---|---|---|---|")
            for label, (route, body) in CASES.items():
                for port in ports.values():
                    _call(port, name, route, body)  # warm
                quiver.reset_peak()
                reference.reset_peak()
                times: dict[str, list[float]] = {"quiver": [], "reference": []}
                ratios = []
                for i in range(args.rounds):
                    order = ["quiver", "reference"] if i % 2 == 0 else ["reference", "quiver"]
                    got = {}
                    for server in order:
                        seconds, got[server] = _call(ports[server], name, route, body)
                        times[server].append(seconds)
                    _same(got["quiver"], got["reference"], label)
                    ratios.append(times["reference"][-1] / times["quiver"][-1])
                    del got
                _, answer = _call(ports["quiver"], name, route, body)
                rows = answer.num_rows if isinstance(answer, pa.Table) else 1
                print(f"| {label} | {statistics.median(times['quiver']):.3f} | "
                      f"{statistics.median(times['reference']):.3f} | "
                      f"{statistics.median(ratios):.2f}x | {rows:,} | {quiver.peak_mb():,.0f} | "
                      f"{reference.peak_mb():,.0f} |", flush=True)  # fmt: skip
        finally:
            quiver.stop()
            reference.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    throughput(parser.parse_args())


if __name__ == "__main__":
    main()
