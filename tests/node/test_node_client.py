"""The Node.js client (`clients/node`) against real `quiver serve` processes.

One root holds datasets written by pylance (the corpus' every-type table at 2.2 and legacy,
the many-version history with tags) and by Quiver (a multi-fragment table with exact 64-bit
values and a dictionary column, and one with a damaged data file). Three servers serve it on
loopback: a plain one that advertises a dead replica before itself (so every endpoint read
goes through the location fallback), one with Basic → Bearer auth over TLS (short token
lifetime, so renewal is exercised) and one that asks for client certificates (mutual TLS).

For every read case the Python client (`clients.Client`) reads first and its table is
written as an Arrow IPC stream; Node's test runner (`node --test clients/node/test/`) then
compares what the Node client reads with it (schema, types, values, nulls). The Node tests
write datasets of their own (and change their rows with `update`, `merge` and `backfill`) and
leave the tables they expect as IPC streams; pylance reads those datasets back here and they
must be equal.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.clients import Client
from quiver.flight_server.auth import hash_password
from quiver.format.dataset import dataset as quiver_dataset
from quiver.format.dataset import write_dataset

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "flight"))

from corpus import _build_history, _build_types  # noqa: E402
from fulltext_corpus import text_table  # noqa: E402
from server_process import free_port  # noqa: E402
from tls_certs import make_tls_material  # noqa: E402

USERS = {
    "alice": ("alice-Pa55word!", {"read": ["*"], "write": ["*"]}),
    "reader": ("reader-Pa55word!", {"read": ["q_*"]}),  # reads the q_ datasets, writes nothing
}

QUERY_VECTOR = [0.1, -0.3, 0.7, 0.0, 0.25, -0.5, 0.9, 0.05]
# name -> (dataset, Node read options). The Python client reads each the same way first
# (a vector or hybrid search with `Client.nearest` / `Client.hybrid`).
READ_CASES: dict[str, tuple[str, dict]] = {
    "types_full": ("pl_types", {}),
    "types_projection": ("pl_types", {"columns": ["uint64", "dict_str", "struct", "id"]}),
    "types_filter": ("pl_types", {"filter": "int32 > 0 AND utf8 IS NOT NULL"}),
    "types_limit": ("pl_types", {"limit": 1234}),
    "types_legacy_full": ("pl_types_legacy", {}),
    "history_latest": ("pl_history", {}),
    "history_version_2": ("pl_history", {"version": 2}),
    "history_tag": ("pl_history", {"tag": "after_rename"}),
    "history_filter": (
        "pl_history",
        {"filter": "x > 5 AND label LIKE 'a%'", "columns": ["id", "x"]},
    ),
    "history_as_of_v3": ("pl_history", {"asOf": None}),  # filled in with version 3's time
    "sales_full": ("q_sales", {}),
    "sales_v1": ("q_sales", {"version": 1}),
    "sales_tag_first": ("q_sales", {"tag": "first"}),
    "sales_filter": (
        "q_sales",
        {"filter": "big < 0 OR cat = 'gamma'", "columns": ["id", "big", "cat"]},
    ),
    "sales_limit_filter": ("q_sales", {"filter": "id % 7 = 3", "limit": 50}),
    "sales_empty": ("q_sales", {"filter": "id < 0"}),
    "wide": ("q_wide", {}),
    "texts_search": ("fts_texts", {"fullTextQuery": "apple fox", "limit": 12}),
    "texts_batch": (
        "fts_texts",
        {"fullTextQuery": ["apple fox", "river", "nothing-here"], "limit": 5},
    ),
    "vectors_nearest": ("hy_docs", {"nearest": {"column": "v", "q": QUERY_VECTOR, "k": 7}}),
    "vectors_nearest_two": (
        "hy_docs",
        {"nearest": {"column": "v", "q": [QUERY_VECTOR, [0.5] * 8], "k": 3}, "columns": ["id"]},
    ),
    "hybrid_rrf": (
        "hy_docs",
        {
            "nearest": {"column": "v", "q": QUERY_VECTOR, "k": 10},
            "fullTextQuery": "apple fox",
            "limit": 10,
            "hybrid": {"fusion": "rrf"},
        },
    ),
    "hybrid_linear": (
        "hy_docs",
        {
            "nearest": {"column": "v", "q": QUERY_VECTOR, "k": 6, "nprobes": 2},
            "fullTextQuery": {"match": {"terms": "river blue", "column": "text"}},
            "limit": 6,
            "hybrid": {"fusion": "linear", "weight": 0.7, "normalize": "rank"},
            "filter": "id > 10",
            "columns": ["id", "text"],
        },
    ),
    "texts_structured": (
        "fts_texts",
        {
            "fullTextQuery": {
                "match": {"terms": "river blue", "column": "text", "operator": "And"}
            },
            "filter": "cat = 'c1'",
            "prefilter": True,
        },
    ),
}
# Columns whose values the Python side also writes as exact text (64-bit ints as decimals).
EXACT_COLUMNS = {
    "types_full": ["id", "int64", "uint64", "utf8", "dict_str", "sorted"],
    "sales_full": ["id", "big", "ubig", "cat"],
}

# Datasets Node changed with `update` / `merge` (which rewrite the rows they change into new
# fragments: the row order is the engine's) or `backfill`: they are compared in `id` order.
ID_ORDERED = {"node_updated", "node_merged", "node_merge_pk", "node_backfilled"}

PY_OPTION = {
    "asOf": "as_of",
    "withRowId": "with_row_id",
    "maxRowsPerEndpoint": "max_rows_per_endpoint",
    "fullTextQuery": "full_text_query",
    "fastSearch": "fast_search",
}


SEARCH_OPTION = {"refineFactor": "refine_factor", "rrfK": "rrf_k"}


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH: install Node.js >= 18 (Debian: apt-get install nodejs npm)"
        )
    if not (NODE_DIR / "node_modules" / "apache-arrow").is_dir():
        pytest.fail("clients/node has no node_modules: run `npm ci` there (`make test` does)")
    return node


def _sales(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    big = [None if i % 11 == 0 else (i * 7_919_000_000_007 % (2**63)) * (-1 if i % 3 else 1)
           for i in ids]  # fmt: skip
    big[0:2] = [2**63 - 1, -(2**63)] if start == 0 else big[0:2]
    cats = pa.array([["alpha", "beta", "gamma", None][i % 4] for i in ids]).dictionary_encode()
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "big": pa.array(big, pa.int64()),
            "ubig": pa.array([2**64 - 1 - i for i in ids], pa.uint64()),
            "cat": cats,
            "x": pa.array([None if i % 5 == 0 else i * 0.5 for i in ids], pa.float64()),
            "point": pa.array(
                [None if i % 13 == 0 else {"a": i % 100, "b": f"p{i}"} for i in ids],
                pa.struct([("a", pa.int32()), ("b", pa.string())]),
            ),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in ids], pa.list_(pa.string())),
        }
    )


def _build_root(root: Path) -> None:
    """The datasets of the servers' root."""
    root.mkdir(parents=True)
    # the demo datasets `make serve` creates: what the example reads
    subprocess.run([sys.executable, "-m", "quiver", "demo", "--root", str(root)], check=True,
                   cwd=ROOT, capture_output=True)  # fmt: skip
    _build_types(root / "pl_types.lance", "2.2")
    _build_types(root / "pl_types_legacy.lance", "legacy")
    _build_history(root / "pl_history.lance", "2.2")
    texts = lance.write_dataset(text_table(800, 61), str(root / "fts_texts.lance"))
    texts.create_scalar_index("text", "INVERTED")
    # vectors beside texts: vector, full-text and hybrid searches
    rng = np.random.default_rng(62)
    hybrid = text_table(600, 62)
    vectors = rng.normal(size=(hybrid.num_rows, 8)).astype(np.float32)
    hybrid = hybrid.append_column("v", pa.FixedSizeListArray.from_arrays(vectors.ravel(), 8))
    hy = lance.write_dataset(hybrid, str(root / "hy_docs.lance"))
    hy.create_scalar_index("text", "INVERTED")
    hy.create_index("v", "IVF_FLAT", num_partitions=4)
    sales = str(root / "q_sales.lance")
    write_dataset(_sales(0, 3000), sales, max_rows_per_file=400)
    write_dataset(_sales(3000, 1000), sales, mode="append", max_rows_per_file=400)
    quiver_dataset(sales).tags.create("first", 1)
    # ~12 MB in one fragment: batches above gRPC's default 4 MiB message limit
    wide = pa.table({"id": pa.array(range(120_000), pa.int64()),
                     "s": pa.array([f"{i:08d}" + "x" * 92 for i in range(120_000)])})  # fmt: skip
    write_dataset(wide, str(root / "q_wide.lance"))
    broken = root / "q_broken.lance"
    write_dataset(_sales(0, 500), str(broken))
    for data_file in (broken / "data").iterdir():  # truncated: the read must say data_corrupt
        data_file.write_bytes(data_file.read_bytes()[: data_file.stat().st_size // 3])


@contextlib.contextmanager
def _serve(root: Path, log: Path, port: int, *args: str) -> Iterator[None]:
    """`quiver serve` on `root` at 127.0.0.1:`port` in its own process, SIGTERMed after."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "quiver.flight_server", "serve", "--root", str(root), "--port",
             str(port), "--exit-with-parent", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"quiver serve exited: {log.read_text()[-2000:]}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError("quiver serve did not start") from None
                    time.sleep(0.1)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _auth_file(path: Path) -> Path:
    users = {
        name: {"password": hash_password(pw), **rights} for name, (pw, rights) in USERS.items()
    }
    path.write_text(json.dumps({"users": users}))
    return path


def _python_read(qc: Client, dataset: str, options: dict) -> pa.Table:
    """What the Python client reads for a case's Node options."""
    options = dict(options)
    nearest, hybrid = options.pop("nearest", None), options.pop("hybrid", None)
    kw = {PY_OPTION.get(k, k): v for k, v in options.items()}
    if nearest is None:
        return qc.read(dataset, **kw)
    search = {SEARCH_OPTION.get(k, k): v for k, v in nearest.items()}
    column, q, k = search.pop("column"), search.pop("q"), search.pop("k", 10)
    if hybrid is None:
        return qc.nearest(dataset, column, q, k, **search, **kw)
    text = kw.pop("full_text_query")
    kw.pop("limit", None)
    fusion = {SEARCH_OPTION.get(k, k): v for k, v in hybrid.items()}
    return qc.hybrid(dataset, column, q, text, k, **fusion, **search, **kw)


def _expected(uri: str, out: Path) -> dict:
    """Every read case through the Python client, saved as IPC streams; the cases for Node."""
    cases = {}
    with Client(uri) as qc:
        as_of_v3 = next(v for v in qc.versions("pl_history") if v["version"] == 3)["timestamp"]
        for name, (ds, options) in READ_CASES.items():
            options = dict(options)
            if "asOf" in options:
                options["asOf"] = as_of_v3
            table = _python_read(qc, ds, options)
            path = out / f"{name}.arrows"
            with pa.ipc.new_stream(path, table.schema) as writer:
                writer.write_table(table)
            exact = {}
            for column in EXACT_COLUMNS.get(name, []):
                values = table.column(column)
                if pa.types.is_dictionary(values.type):
                    values = values.cast(values.type.value_type)
                exact[column] = [None if v is None else str(v) for v in values.to_pylist()]
            cases[name] = {
                "dataset": ds,
                "options": options,
                "expected": str(path),
                "rows": table.num_rows,
                "exact": exact,
            }
    return cases


def _server_codes() -> list[str]:
    """Every error code the server's error classes carry."""
    from quiver.flight_server import errors

    codes, todo = {"internal"}, [errors.QuiverError]  # internal: what anything else becomes
    while todo:
        cls = todo.pop()
        if isinstance(cls.code, str):
            codes.add(cls.code)
        todo.extend(cls.__subclasses__())
    return sorted(codes)


def _pylance_equal(uri: Path, expected: pa.Table, *, by_id: bool = False) -> None:
    """The dataset as pylance reads it equals the table the Node client wrote (with `by_id`,
    both in `id` order)."""
    got = lance.dataset(str(uri)).to_table()
    if by_id:
        got, expected = got.sort_by("id"), expected.sort_by("id")
    assert got.schema.names == expected.schema.names
    for name in expected.schema.names:
        want, have = expected.column(name), got.column(name)
        assert have.type == want.type, (name, have.type, want.type)
        if pa.types.is_dictionary(want.type):
            want, have = want.cast(want.type.value_type), have.cast(have.type.value_type)
        assert have.to_pylist() == want.to_pylist(), name


def test_node_client(tmp_path: Path) -> None:
    node = _node()
    data = tmp_path / "data"
    _build_root(data)
    tls = make_tls_material(tmp_path / "tls")
    auth = _auth_file(tmp_path / "auth.json")
    out = tmp_path / "expected"
    out.mkdir()
    written = tmp_path / "written"
    written.mkdir()
    ports = [free_port() for _ in range(4)]
    while len(set(ports)) < 4:
        ports = [free_port() for _ in range(4)]
    dead, plain, secure, mutual = (f"127.0.0.1:{p}" for p in ports)  # nothing listens on dead
    tls_args = ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key)]
    logs = tmp_path / "logs"
    logs.mkdir()
    plain_uri = f"grpc://{plain}"
    with (
        _serve(data, logs / "plain.log", ports[1], "--advertise", f"grpc://{dead}",
               "--advertise", plain_uri),
        _serve(data, logs / "auth.log", ports[2], *tls_args, "--auth-file", str(auth),
               "--token-ttl", "3"),
        _serve(data, logs / "mtls.log", ports[3], *tls_args, "--tls-client-ca", str(tls.ca_cert)),
    ):  # fmt: skip
        cases = _expected(plain_uri, out)
        config = {
            "uri": plain_uri,
            "deadLocation": f"grpc://{dead}",
            "authUri": f"grpc+tls://{secure}",
            "mtlsUri": f"grpc+tls://{mutual}",
            "users": {name: pw for name, (pw, _) in USERS.items()},
            "tls": {
                k: str(getattr(tls, k))
                for k in (
                    "ca_cert",
                    "client_cert",
                    "client_key",
                    "other_ca_cert",
                    "other_client_cert",
                    "other_client_key",
                )
            },  # fmt: skip
            "cases": cases,
            "serverCodes": _server_codes(),
            "writtenDir": str(written),
        }
        config_path = tmp_path / "config.json"
        config_path.write_text(json.dumps(config, indent=1))
        env = {**os.environ, "QUIVER_NODE_TEST_CONFIG": str(config_path)}
        result = subprocess.run(
            [
                node,
                "--test",
                "--test-reporter=spec",
                *sorted(map(str, NODE_DIR.glob("test/*.test.js"))),
            ],
            cwd=NODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=480,
        )
        (tmp_path / "node-report.txt").write_text(result.stdout + result.stderr)
        report = result.stdout[-20000:] + result.stderr[-5000:]
        assert result.returncode == 0, report
        totals = dict(re.findall(r"^ℹ (\w+) (\d+)$", result.stdout, re.MULTILINE))
        # nothing skipped (no test ran without its server), and every case of READ_CASES ran
        assert totals.get("fail") == "0" and totals.get("skipped") == "0", report
        assert int(totals.get("pass", 0)) >= len(READ_CASES) + 30, report
        example = subprocess.run(
            [node, "examples/read_write.js", plain_uri],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert example.returncode == 0, example.stdout + example.stderr
        assert 'tag "first"' in example.stdout and "9007199254740993n" in example.stdout
        # What Node wrote, as pylance reads it.
        tables = sorted(written.glob("*.arrows"))
        assert {p.stem for p in tables} >= {
            "node_created",
            "node_overwritten",
            "node_staged",
            *ID_ORDERED,
        }
        for path in tables:
            with pa.ipc.open_stream(path) as reader:
                expected = reader.read_all()
            _pylance_equal(data / f"{path.stem}.lance", expected, by_id=path.stem in ID_ORDERED)
