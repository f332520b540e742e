"""update and merge over Flight, from the raw protocol and the Python client, against the
same calls through pylance on a twin dataset; bad requests commit nothing."""

from __future__ import annotations

import json

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error, files_under, table

from clients import Client
from clients.errors import InvalidArgument as ClientInvalidArgument
from format.dataset import write_dataset
from tests.compare import assert_same_table

served = flight_helpers.served
name = flight_helpers.name


def _twins(served: Served, name: str, tmp_path) -> tuple[str, str]:
    ours = served.path(name)
    ref = str(tmp_path / "ref.lance")
    for uri in (ours, ref):
        write_dataset(table(60), uri, mode="create", max_rows_per_file=20)
    return ours, ref


def _same(ours: str, ref: str, what: str) -> None:
    got = lance.dataset(ours).to_table().sort_by("id")
    want = lance.dataset(ref).to_table().sort_by("id")
    assert_same_table(got, want, what)
    assert lance.dataset(ours).version == lance.dataset(ref).version, what


def _merge_put(served: Served, cmd: dict, data: pa.Table) -> dict:
    descriptor = fl.FlightDescriptor.for_command(json.dumps(cmd))
    writer, reader = served.client.do_put(descriptor, data.schema)
    writer.write_table(data)
    writer.done_writing()
    answer = reader.read()
    writer.close()
    return json.loads(answer.to_pybytes())


def test_update_action_is_pylances(served: Served, name: str, tmp_path) -> None:
    ours, ref = _twins(served, name, tmp_path)
    body = {"dataset": name, "updates": {"x": "x * 3", "s": "'new'"}, "where": "id % 5 = 1"}
    got = served.action("update", body)
    want = lance.dataset(ref).update({"x": "x * 3", "s": "'new'"}, "id % 5 = 1")
    assert got == {"version": 2, "updated_rows": want["num_rows_updated"]}
    _same(ours, ref, "update action")
    assert (
        served.action("update", {"dataset": name, "updates": {"flag": "NOT flag"}})["updated_rows"]
        == 60
    )


def test_merge_put_is_pylances(served: Served, name: str, tmp_path) -> None:
    ours, ref = _twins(served, name, tmp_path)
    source = table(10, 55)  # 5 matching rows, 5 new
    got = _merge_put(served, {"dataset": name, "merge": {"on": ["id"]}}, source)
    want = (
        lance.dataset(ref)
        .merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source)
    )
    assert got == {
        "version": 2,
        "rows": 10,
        "inserted_rows": want["num_inserted_rows"],
        "updated_rows": want["num_updated_rows"],
        "deleted_rows": want["num_deleted_rows"],
    }
    _same(ours, ref, "upsert put")
    # replace a range: rows 0..9 not in the source go, matched rows are updated
    source = table(5, 3)
    cmd = {
        "dataset": name,
        "merge": {
            "on": ["id"],
            "when_not_matched": "insert_all",
            "when_not_matched_by_source": "delete",
            "by_source_filter": "id < 10",
        },
    }
    got = _merge_put(served, cmd, source)
    want = (
        lance.dataset(ref)
        .merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete("id < 10")
        .execute(source)
    )
    assert (got["inserted_rows"], got["updated_rows"], got["deleted_rows"]) == (
        want["num_inserted_rows"],
        want["num_updated_rows"],
        want["num_deleted_rows"],
    )
    _same(ours, ref, "replace-range put")


def test_client_update_and_merge(served: Served, name: str, tmp_path) -> None:
    ours, ref = _twins(served, name, tmp_path)
    qc = Client(served.uri)
    assert qc.update(name, {"x": "-x"}, "id < 4") == {"version": 2, "updated_rows": 4}
    lance.dataset(ref).update({"x": "-x"}, "id < 4")
    src = table(3, 58).select(["id", "x"])  # a partial schema: the other columns kept
    answer = qc.merge(name, src, "id", when_not_matched=None)
    assert (answer["updated_rows"], answer["inserted_rows"]) == (2, 0)
    lance.dataset(ref).merge_insert("id").when_matched_update_all().execute(src)
    _same(ours, ref, "client merge")
    answer = qc.merge(name, table(2, 0), ["id"], when_matched="delete", when_not_matched=None)
    assert answer["deleted_rows"] == 2
    lance.dataset(ref).merge_insert("id").when_matched_delete().execute(table(2, 0))
    _same(ours, ref, "client matched delete")
    with pytest.raises(ClientInvalidArgument, match="Ambiguous"):
        qc.merge(name, pa.concat_tables([table(1, 30), table(1, 30)]), "id")
    qc.close()


@pytest.mark.parametrize(
    "cmd, message, code",
    [
        ({"merge": {"on": ["nope"]}}, "'nope'", "invalid_argument"),
        ({"merge": {"on": "id"}}, "list of column names", "invalid_argument"),
        ({"merge": {"when_matched": "explode"}}, "when_matched", "invalid_argument"),
        ({"merge": {"on": ["id"], "bogus": 1}}, "bogus", "invalid_argument"),
        ({"merge": {"on": ["id"]}, "mode": "append"}, "commits at once", "invalid_argument"),
        (
            {"merge": {"on": ["id"], "when_matched": "fail"}},
            "when_matched_fail",
            "invalid_argument",
        ),
    ],
)
def test_bad_merges_commit_nothing(served: Served, name: str, cmd, message, code) -> None:
    uri = served.path(name)
    write_dataset(table(20), uri, mode="create")
    before = files_under(uri)
    with pytest.raises(fl.FlightError) as err:
        _merge_put(served, {"dataset": name, **cmd}, table(3, 10))
    assert_clean_error(err.value, code)
    assert message in str(err.value)
    assert files_under(uri) == before


@pytest.mark.parametrize(
    "body, message, code",
    [
        ({"updates": {}}, "'updates'", "invalid_argument"),
        ({"updates": {"nope": "1"}}, "'nope'", "invalid_argument"),
        ({"updates": {"x": "x +"}}, "x +", "invalid_argument"),
        ({"updates": {"x": "1"}, "where": "nope > 1"}, "nope", "invalid_argument"),
    ],
)
def test_bad_updates_commit_nothing(served: Served, name: str, body, message, code) -> None:
    uri = served.path(name)
    write_dataset(table(20), uri, mode="create")
    before = files_under(uri)
    with pytest.raises(fl.FlightError) as err:
        served.action("update", {"dataset": name, **body})
    assert_clean_error(err.value, code)
    assert message in str(err.value)
    assert files_under(uri) == before
