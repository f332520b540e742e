"""The server streams a dataset several times larger than its memory bound."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
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
