"""Blob columns over Flight: a scan returns their descriptions (as pylance's does) or,
with `blob_handling: "all_binary"`, their bytes, in batches cut to a byte budget; the
Python client reads them too. Each read compared with pylance's on the same dataset."""

from __future__ import annotations

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error

from quiver.clients import Client
from quiver.format.dataset import blobs as _blobs
from tests.compare import assert_same_table

served = flight_helpers.served
name = flight_helpers.name

BLOB = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
SCHEMA = pa.schema([pa.field("id", pa.int64()), BLOB])


def _blobs_dataset(served: Served, name: str, version: str) -> lance.LanceDataset:
    sizes = [5, 0, 70_000, 3_000_000, 100]
    values = [bytes([65 + i]) * n for i, n in enumerate(sizes)] + [None]
    rows = pa.table({"id": list(range(len(values))), "b": values}, schema=SCHEMA)
    return lance.write_dataset(rows, served.path(name), data_storage_version=version)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_blob_reads_match_pylance(served: Served, name: str, version: str) -> None:
    ref = _blobs_dataset(served, name, version)
    for handling in (None, "all_binary"):
        cmd = {"dataset": name, "filter": "id > 0"}
        if handling:
            cmd["blob_handling"] = handling
        want = ref.to_table(filter="id > 0", blob_handling=handling or "blobs_descriptions")
        assert_same_table(served.read(cmd), want, f"blob_handling {handling}")
    client = Client(served.uri)
    got = client.read(name, columns=["b"], blob_handling="all_binary")
    assert got["b"].to_pylist() == ref.to_table(blob_handling="all_binary")["b"].to_pylist()
    streamed = client.reader(name, blob_handling="all_binary").read_all()
    assert streamed.equals(ref.to_table(blob_handling="all_binary"))


def test_blob_batches_stay_under_the_byte_budget(
    served: Served, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = _blobs_dataset(served, name, "2.2")
    monkeypatch.setattr(_blobs, "BLOB_BATCH_BYTES", 1_000_000)  # the server runs in-process
    info = served.info({"dataset": name, "blob_handling": "all_binary"})
    reader = served.client.do_get(info.endpoints[0].ticket)
    sizes = [batch.data.num_rows for batch in reader]
    assert sizes == [3, 1, 2]  # the 3 MB blob alone, the rest under 1 MB per batch
    assert served.read_info(info).equals(ref.to_table(blob_handling="all_binary"))


def test_bad_blob_handling_is_an_invalid_argument(served: Served, name: str) -> None:
    _blobs_dataset(served, name, "2.1")
    for cmd, text in (
        ({"dataset": name, "blob_handling": "bytes"}, "blob_handling"),
        (
            {"dataset": name, "blob_handling": "all_binary", "full_text_query": "x"},
            "not to searches",
        ),
    ):
        with pytest.raises(fl.FlightError) as e:
            served.info(cmd)
        assert text in assert_clean_error(e.value, "invalid_argument", served.root)
