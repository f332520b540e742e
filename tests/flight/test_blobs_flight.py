"""Blob columns over Flight: a scan returns their descriptions (as pylance's does) or,
with `blob_handling: "all_binary"`, their bytes, in batches cut to a byte budget; the
Python client reads them too. Each read compared with pylance's on the same dataset."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_take_blobs_reads_ranges_as_pylance(served: Served, name: str, version: str) -> None:
    ref = _blobs_dataset(served, name, version)
    client = Client(served.uri)
    picks = [3, 0, 5, 1]
    files = client.take_blobs(name, "b", indices=picks, buffer_size=4096)
    theirs = ref.take_blobs("b", indices=picks)
    assert [f is None for f in files] == [f is None for f in theirs] == [False, False, True, False]
    big, mine = files[0], theirs[0]
    assert big.size() == mine.size() == 3_000_000
    assert big.read(10) == mine.read(10) and big.tell() == 10
    big.seek(-7, 2)
    assert big.read() == mine.read_range(3_000_000 - 7, 7)
    ranges = [(0, 5), (1_500_000, 1000), (2_999_999, 1)]
    assert big.read_ranges(ranges) == mine.read_ranges(ranges)
    assert files[1].read() == b"A" * 5 and files[3].read() == b""
    assert client.read_blobs(name, "b", indices=picks) == ref.read_blobs("b", indices=picks)
    rows = ref.to_table(columns=["id"], with_row_id=True)
    ids = rows["_rowid"].to_pylist()
    assert client.read_blobs(name, "b", ids=ids) == ref.read_blobs("b", ids=ids)
    # the blobs located stay readable after the dataset changes (pinned to their version)
    lance.dataset(served.path(name)).delete("id = 3")
    assert big.read_range(0, 4) == b"DDDD"


def test_bad_blob_reads_are_clean_errors(served: Served, name: str) -> None:
    _blobs_dataset(served, name, "2.2")
    bad = [
        ({"dataset": name, "column": "b"}, "exactly one"),
        ({"dataset": name, "column": "id", "indices": [0]}, "not a blob column"),
        ({"dataset": name, "column": "b", "indices": [99]}, "out of range"),
        ({"dataset": name, "column": "b", "indices": [-1]}, "non-negative"),
    ]
    for body, text in bad:
        with pytest.raises(fl.FlightError) as e:
            served.action("take_blobs", body)
        assert text in assert_clean_error(e.value, "invalid_argument", served.root)
    found = served.action("take_blobs", {"dataset": name, "column": "b", "indices": [5, 2]})
    null_address = found["blobs"][0]["row_address"]
    assert found["blobs"][0]["size"] is None and found["blobs"][1]["size"] == 70_000
    base = {"dataset": name, "column": "b", "version": found["version"]}
    for extra, text in (
        ({"address": null_address}, "null"),
        ({"address": found["blobs"][1]["row_address"], "offset": 70_001}, "past the blob"),
        ({"address": found["blobs"][1]["row_address"], "length": 70_001}, "ends past"),
    ):
        with pytest.raises(fl.FlightError) as e:
            served.action("read_blob", {**base, **extra})
        assert text in assert_clean_error(e.value, "invalid_argument", served.root)


def test_blob_columns_written_over_flight(served: Served, name: str) -> None:
    """A DoPut of a blob column (a binary field marked `lance-encoding:blob`) writes it as
    pylance would: blob v2 in a new dataset, its large values in sidecars."""
    values = [b"small", None, b"p" * 100_000, b"d" * 5_000_000]
    rows = pa.table({"id": range(4), "b": values}, schema=SCHEMA)
    client = Client(served.uri)
    client.write(name, rows, mode="create")
    client.write(name, rows.slice(0, 2), mode="append")
    ref = lance.dataset(served.path(name))
    assert ref.schema.field("b").type.extension_name == "lance.blob.v2"
    got = [f and f.readall() for f in ref.take_blobs("b", indices=range(6))]
    assert got == values + values[:2]
    kinds = [d and d["kind"] for d in ref.to_table()["b"].to_pylist()]
    assert kinds == [0, None, 1, 2, 0, None]


def test_long_ranges_take_several_calls(
    served: Served, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read_blob answers at most BLOB_RANGE_BYTES; the client reads longer ranges in
    several calls, and a call without a length says how much it answered."""
    from quiver.clients import blobs as client_blobs
    from quiver.flight_server import blob_reads

    ref = _blobs_dataset(served, name, "2.2")
    for module in (client_blobs, blob_reads):
        monkeypatch.setattr(module, "BLOB_RANGE_BYTES", 1_000_000)
    (big,) = Client(served.uri).take_blobs(name, "b", indices=[3])
    assert big.read_range(500, 2_500_000) == ref.take_blobs("b", indices=[3])[0].read_range(
        500, 2_500_000
    )
    found = served.action("take_blobs", {"dataset": name, "column": "b", "indices": [3]})
    body = {"dataset": name, "column": "b", "version": found["version"]}
    body["address"] = found["blobs"][0]["row_address"]
    answers = list(served.client.do_action(fl.Action("read_blob", json.dumps(body).encode())))
    header = json.loads(answers[0].body.to_pybytes())
    assert header["length"] == 1_000_000 == sum(a.body.size for a in answers[1:])
