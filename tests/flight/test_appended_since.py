"""The `appended_since` read: only the rows appends added after a version, end to end
through a real server, each endpoint pinned to the version that appended its fragment."""

from __future__ import annotations

import json

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error, table

from quiver.clients import Client, QuiverError
from quiver.clients.errors import InvalidArgument

served = flight_helpers.served
name = flight_helpers.name


def by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_appended_rows_only(served: Served, name: str) -> None:
    uri = served.path(name)
    with Client(served.uri) as qc:
        qc.write(name, table(20), mode="create")  # v1
        qc.write(name, table(10, start=20), mode="append")  # v2
        qc.delete(name, "id < 3 OR id = 25")  # v3: also rows v2 appended
        qc.compact(name)  # v4 (and maybe a reserve_fragments version before it)
        qc.create_tag(name, "mark")  # no version
        lance.write_dataset(table(9, start=30), uri, mode="append", max_rows_per_file=4)
        latest = qc.describe(name)["version"]
        appended = table(10, start=20)
        later = table(9, start=30)

        got = qc.read(name, appended_since=1)
        assert by_id(got).equals(pa.concat_tables([appended, later]))  # deleted 25 still there
        assert by_id(qc.read(name, appended_since=0)).equals(table(39))
        assert qc.read(name, appended_since=2, version=latest - 1).num_rows == 0
        assert qc.read(name, appended_since=latest).num_rows == 0
        assert by_id(qc.read(name, appended_since=latest - 1)).equals(later)

        info = qc.flight_info(name, appended_since=1)
        pinned = [json.loads(e.app_metadata)["version"] for e in info.endpoints]
        assert pinned == [2, latest, latest, latest]  # 9 rows in files of 4
        assert info.total_records == 19
        assert json.loads(info.app_metadata)["version"] == latest

        # projection and filter apply as in whole-version reads
        some = qc.read(name, appended_since=1, columns=["id", "s"], filter="id % 2 = 0")
        want = pa.concat_tables([appended, later]).select(["id", "s"])
        want = want.filter(pc.equal(pc.bit_wise_and(want["id"], 1), 0))
        assert by_id(some).equals(want)

        # a retried endpoint reads the same rows after more deletes and a compaction
        qc.delete(name, "id >= 30")
        qc.compact(name)
        again = qc.read(name, appended_since=1)
        assert by_id(again).equals(by_id(got))


def test_bad_requests(served: Served, name: str) -> None:
    with Client(served.uri) as qc:
        qc.write(name, table(5), mode="create")
        with pytest.raises(InvalidArgument, match="appended_since 3 is after version 1"):
            qc.read(name, appended_since=3)
        with pytest.raises(InvalidArgument, match="cannot be combined with 'limit'"):
            qc.read(name, appended_since=0, limit=2)
    for bad in (-1, "1", True):
        cmd = json.dumps({"dataset": name, "appended_since": bad})
        with pytest.raises(fl.FlightError) as e:
            served.client.get_flight_info(fl.FlightDescriptor.for_command(cmd))
        assert_clean_error(e.value, "invalid_argument", served.root)


REFUSED = {
    "overwrite": ("overwrite", "replaced every row"),
    "add_columns": ("merge", "changed the schema"),
    "drop_columns": ("project", "changed the schema"),
    "alter_columns": ("project", "columns dropped or renamed"),
    "restore": ("restore", "restored an older version"),
    "update": ("update", "rewrote rows in place"),
}


@pytest.mark.parametrize("op", sorted(REFUSED))
def test_refused_operations(served: Served, name: str, op: str) -> None:
    with Client(served.uri) as qc:
        qc.write(name, table(5), mode="create")  # v1
        qc.write(name, table(5, start=5), mode="append")  # v2
        if op == "overwrite":
            qc.write(name, table(3, start=100), mode="overwrite")
        elif op == "add_columns":
            qc.add_columns(name, {"y": "id * 2"})
        elif op == "drop_columns":
            qc.drop_columns(name, ["flag"])
        elif op == "alter_columns":
            qc.alter_columns(name, {"path": "flag", "name": "flag2"})
        elif op == "restore":
            qc.restore(name, 1)
        else:
            lance.dataset(served.path(name)).update({"x": "x + 1"}, where="id = 6")
        assert qc.describe(name)["version"] == 3
        operation, why = REFUSED[op]
        with pytest.raises(QuiverError) as e:
            qc.read(name, appended_since=1)
        err = e.value
        assert err.code == "failed_precondition"
        assert err.details["version"] == 3 and err.details["operation"] == operation
        assert f"dataset {name!r}" in err.message and why in err.message
        assert "version 3" in err.message and str(served.root) not in err.message
        # before it and after it the appends can still be followed
        assert by_id(qc.read(name, appended_since=1, version=2)).equals(table(5, start=5))
        assert qc.read(name, appended_since=3).num_rows == 0
