"""The server streams a dataset several times larger than its memory bound, and concurrent
streams share its memory budget (they wait, never fail)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from server_process import peak_rss_mb, quiver_serve

from benchmarks.data import batches, schema_
from format.dataset import write_dataset

pytestmark = pytest.mark.slow
ROWS = 8_000_000  # about 1.7 GB in Arrow
RSS_LIMIT_MB = 600


def test_server_rss_stays_bounded_while_streaming(tmp_path: Path):
    reader = pa.RecordBatchReader.from_batches(schema_(), batches(ROWS, batch_rows=250_000))
    write_dataset(reader, str(tmp_path / "big.lance"), max_rows_per_file=1_000_000)
    with quiver_serve(tmp_path) as (uri, pid):
        client = fl.connect(uri)
        info = client.get_flight_info(fl.FlightDescriptor.for_path("big"))
        total_rows = total_bytes = 0
        for endpoint in info.endpoints:
            for chunk in client.do_get(endpoint.ticket):  # consume without keeping
                total_rows += chunk.data.num_rows
                total_bytes += chunk.data.nbytes
        peak = peak_rss_mb(pid)
    assert total_rows == ROWS
    assert total_bytes > 2.5 * RSS_LIMIT_MB * 1e6  # the dataset really is several times larger
    assert peak < RSS_LIMIT_MB, f"server peak RSS {peak:.0f} MB"


BUDGET_ROWS = 300_000
BUDGET_CLIENTS = 6


def test_streams_over_the_memory_budget_wait_and_all_finish(tmp_path: Path):
    """Six clients stream every endpoint at once through a 32 MiB budget: each stream holds
    about 12 MB (three 32,768-row batches of ~120-byte rows), so some must wait for others;
    none fails and every client gets every row exactly once."""
    ids = pa.array(range(BUDGET_ROWS), pa.int64())
    text = pc.binary_repeat(pc.utf8_lpad(pc.cast(ids, pa.string()), 10, "0"), 10)
    data = pa.table({"id": ids, "x": pc.multiply(ids, 0.5), "s": text})
    write_dataset(data, str(tmp_path / "t.lance"), max_rows_per_file=50_000)
    expected = np.arange(BUDGET_ROWS, dtype=np.int64)
    results: list[tuple[int, np.ndarray, int]] = []
    errors: list[BaseException] = []
    args = ("--memory-budget", "32MiB", "--batch-size", "32768", "--log-level", "DEBUG")
    with quiver_serve(tmp_path, *args) as (uri, pid):

        def client_thread() -> None:
            try:
                client = fl.connect(uri)
                info = client.get_flight_info(fl.FlightDescriptor.for_path("t"))
                rows, found, chars = 0, [], 0
                for endpoint in info.endpoints:
                    for chunk in client.do_get(endpoint.ticket):
                        batch = chunk.data
                        rows += batch.num_rows
                        found.append(batch.column("id").to_numpy())
                        chars += pc.sum(pc.utf8_length(batch.column("s"))).as_py()
                client.close()
                results.append((rows, np.sort(np.concatenate(found)), chars))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=client_thread) for _ in range(BUDGET_CLIENTS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(1.0, 120 - (time.monotonic() - started)))
        assert not any(t.is_alive() for t in threads), "the clients did not finish"
        peak = peak_rss_mb(pid)
    assert errors == []
    assert len(results) == BUDGET_CLIENTS
    for rows, ids_seen, chars in results:
        assert rows == BUDGET_ROWS and np.array_equal(ids_seen, expected)
        assert chars == BUDGET_ROWS * 100
    log = (tmp_path / "server.log").read_text()
    assert "waits for" in log and "admitted after" in log, "no stream had to wait"
    assert '"status":"ok"' in log and '"status":"internal"' not in log
    print(f"server peak RSS {peak:.0f} MB")
