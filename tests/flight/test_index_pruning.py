"""Index-pruned reads through a real server: GetFlightInfo gives no endpoint to fragments a
BTREE or BITMAP index rules out, DoGet reads only candidate rows, and what comes back is
pylance's answer; `describe` lists the indices."""

from __future__ import annotations

import flight_helpers
import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from flight_helpers import Served

from quiver.clients import Client

served = flight_helpers.served
name = flight_helpers.name

ROWS, PER_FILE = 4000, 500


def _rows(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(k, pa.int64()),
            "cat": pa.array([f"c{x % 7}" for x in k], mask=k % 11 == 0),
            "x": pa.array(k * 0.5),
        }
    )


def _build(served: Served, name: str) -> str:
    """A pylance dataset of 8 fragments, id under a BTREE and cat under a BITMAP, then an
    unindexed fragment appended and rows deleted through the server."""
    uri = served.path(name)
    ds = lance.write_dataset(_rows(0, ROWS), uri, max_rows_per_file=PER_FILE)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    with Client(served.uri) as qc:
        qc.write(name, _rows(ROWS, 300), mode="append")
        qc.delete(name, "id % 9 = 4")
    return uri


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_selective_filter_gets_endpoints_of_candidate_fragments(served: Served, name: str):
    uri = _build(served, name)
    # id 1234 is in fragment 2, id 4100 in the appended fragment 8, which no index covers
    sql = "id = 1234 OR id = 4100"
    info = served.info({"dataset": name, "filter": sql})
    frags = [e.app_metadata for e in info.endpoints]
    assert len(info.endpoints) == 2, frags
    got = served.read_info(info)
    assert_same_table(_sorted(got), _sorted(lance.dataset(uri).to_table(filter=sql)), sql)
    assert got.column("id").to_pylist() == [1234, 4100]
    unpruned = served.info({"dataset": name, "filter": "x < 10 OR id = 3"})
    assert len(unpruned.endpoints) == ROWS // PER_FILE + 1


@pytest.mark.parametrize(
    "sql",
    [
        "id BETWEEN 990 AND 1010",
        "id IN (5, 6, 3999, 4299)",
        "cat = 'c3' AND id < 700",
        "cat IS NULL AND id > 3500",
        "NOT (cat <> 'c1') OR id = 2",
        "id >= 3990 AND x > 0",
        "cat IN ('c2', 'c5') AND NOT (id > 100)",
    ],
)
def test_indexed_filters_read_what_pylance_reads(served: Served, name: str, sql: str):
    uri = _build(served, name)
    want = _sorted(lance.dataset(uri).to_table(filter=sql))
    got = served.read({"dataset": name, "filter": sql})
    assert_same_table(_sorted(got), want, sql)
    # cut into row ranges, the ranges without candidates get no endpoint
    info = served.info({"dataset": name, "filter": sql, "max_rows_per_endpoint": 100})
    if want.num_rows < 25:
        assert len(info.endpoints) <= want.num_rows + 3, sql  # + the unindexed fragment
    assert_same_table(_sorted(served.read_info(info)), want, f"{sql} in ranges")


def test_describe_lists_indices(served: Served, name: str):
    uri = _build(served, name)
    described = served.action("describe", {"dataset": name})["indices"]
    ref = {i["name"]: i for i in lance.dataset(uri).list_indices()}
    assert [i["name"] for i in described] == sorted(ref)
    for i in described:
        r = ref[i["name"]]
        assert (i["type"], i["columns"], i["uuid"]) == (r["type"], r["fields"], r["uuid"])
        assert i["fragments"] == sorted(r["fragment_ids"]) == list(range(ROWS // PER_FILE))
    with Client(served.uri) as qc:
        assert qc.describe(name)["indices"] == described
