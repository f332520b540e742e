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

from quiver.clients import Client
from quiver.clients.errors import InvalidArgument as ClientInvalidArgument
from quiver.format.dataset import write_dataset
from quiver.wire.requests import merge_command
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


def _staging_files(uri: str) -> list[str]:
    return [p for p in files_under(uri) if p.startswith("data/")]


def test_staged_merges_of_many_writers_commit_once(served: Served, name: str, tmp_path) -> None:
    """Three writers stage shares of an upsert under one job (one of them twice, as a
    retried task would); applying the listed fragments commits one Update, a repeated
    apply with the same key answers the same version, and no staged file is left."""
    ours, ref = _twins(served, name, tmp_path)
    qc = Client(served.uri)
    before = _staging_files(ours)
    shares = [table(10, 0), table(10, 55), table(5, 100)]
    job, fragments = "upsert-job-1", []
    for share in shares:
        fragments += qc.stage_source(name, share, job=job)
    qc.stage_source(name, shares[0], job=job)  # a failed attempt's copy: never listed
    spec = merge_command(name, "id")["merge"]
    got = qc.apply_staged(name, fragments, merge=spec, job=job, idempotency_key="k1")
    source = pa.concat_tables(shares)
    want = (
        lance.dataset(ref)
        .merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source)
    )
    assert (got["inserted_rows"], got["updated_rows"], got["version"]) == (
        want["num_inserted_rows"],
        want["num_updated_rows"],
        2,
    )
    _same(ours, ref, "staged upsert")
    assert set(before) <= set(_staging_files(ours))
    again = qc.apply_staged(name, fragments, merge=spec, job=job, idempotency_key="k1")
    assert again["version"] == 2 and again.get("duplicate")
    assert lance.dataset(ours).version == 2
    # only the data files the versions reference are left: the sources and the failed
    # attempt's copy are gone
    referenced = {
        f"data/{df.path}"
        for v in lance.dataset(ours).versions()
        for frag in lance.dataset(ours, version=v["version"]).get_fragments()
        for df in frag.data_files()
    }
    assert set(_staging_files(ours)) == referenced
    with pytest.raises(ClientInvalidArgument, match="apply_staged"):
        qc.commit(name, qc.stage_source(name, shares[1]))
    qc.close()


def test_staged_backfills_by_row_address(served: Served, name: str, tmp_path) -> None:
    ours, _ = _twins(served, name, tmp_path)
    qc = Client(served.uri)
    rows = qc.read(name, columns=["id", "x", "_rowaddr"])
    score = pa.compute.multiply(rows["x"], 2.0)
    halves = [rows.slice(0, 30), rows.slice(30)]
    fragments = []
    for half, values in zip(halves, [score.slice(0, 30), score.slice(30)], strict=True):
        src = pa.table({"_rowaddr": half["_rowaddr"], "score": values})
        fragments += qc.stage_source(name, src, job="bf")
    added = qc.apply_staged(name, fragments, backfill="add_columns", job="bf")
    assert added == {"version": 2, "rows": 60}
    got = lance.dataset(ours).to_table(columns=["id", "x", "score"]).sort_by("id")
    assert got.column("score").to_pylist() == [x * 2 for x in got.column("x").to_pylist()]
    fix = pa.table({"_rowaddr": rows["_rowaddr"].slice(0, 5), "x": pa.array([-1.0] * 5)})
    updated = qc.apply_staged(name, qc.stage_source(name, fix), backfill="update_columns")
    assert updated["updated_rows"] == 5 and updated["version"] == 3
    ids = set(rows["id"].slice(0, 5).to_pylist())
    for row in lance.dataset(ours).to_table(columns=["id", "x"]).to_pylist():
        assert (row["x"] == -1.0) == (row["id"] in ids)
    bad = pa.table({"_rowaddr": pa.array([999 << 32], pa.uint64()), "zz": [1]})
    with pytest.raises(ClientInvalidArgument, match="not a live row"):
        qc.apply_staged(name, qc.stage_source(name, bad), backfill="add_columns")
    assert lance.dataset(ours).version == 3
    qc.close()


def test_backfill_puts(served: Served, name: str, tmp_path) -> None:
    ours, ref = _twins(served, name, tmp_path)
    qc = Client(served.uri)
    rows = qc.read(name, columns=["id", "x", "_rowaddr"])
    source = pa.table({"_rowaddr": rows["_rowaddr"], "half": pa.compute.divide(rows["x"], 2.0)})
    assert qc.backfill(name, source) == {"version": 2, "rows": 60}
    lance.dataset(ref).add_columns({"half": "x / 2.0"})
    _same(ours, ref, "backfill put")
    fix = pa.table({"_rowaddr": rows["_rowaddr"], "half": pa.compute.negate(source["half"])})
    assert qc.backfill(name, fix, "update_columns")["updated_rows"] == 60
    lance.dataset(ref).update({"half": "-half"})
    _same(ours, ref, "update_columns put")
    before = files_under(ours)
    for cmd, message in [
        ({"backfill": "explode"}, "backfill"),
        (
            {"backfill": "add_columns", "mode": "append"},
            "only 'dataset', 'backfill' and 'idempotency_key'",
        ),
    ]:
        with pytest.raises(fl.FlightError, match=message):
            _merge_put(served, {"dataset": name, **cmd}, source)
    with pytest.raises(ClientInvalidArgument, match="already exists"):
        qc.backfill(name, source)
    assert files_under(ours) == before
    qc.close()
