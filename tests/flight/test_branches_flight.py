"""Branches over Flight: created, listed, read (scans, filters through an index, searches),
written (DoPut, staged commits, merges, deletes, indices, compaction) and deleted through
the raw protocol and the Python client, each step checked through pylance."""

from __future__ import annotations

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error, table

from quiver.clients import Client
from quiver.clients.errors import NotFound as ClientNotFound
from tests.compare import assert_same_table

served = flight_helpers.served
name = flight_helpers.name


def _branch(
    served: Served, name: str, branch: str, version: int | None = None
) -> lance.LanceDataset:
    return lance.dataset(served.path(name)).checkout_version((branch, version))


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_a_branch_through_the_raw_protocol(served: Served, name: str) -> None:
    served.put(name, table(40), mode="create")
    served.action("create_index", {"dataset": name, "column": "id", "index_type": "BTREE"})
    served.put(name, table(5, start=100))  # main: version 3
    made = served.action("create_branch", {"dataset": name, "name": "dev", "version": 2})
    assert made == {"name": "dev", "version": 2}
    assert served.put(name, table(3, start=200), branch="dev")["version"] == 3
    served.action("delete", {"dataset": name, "branch": "dev", "predicate": "id < 10"})
    want = _branch(served, name, "dev").to_table()
    assert want.num_rows == 40 + 3 - 10
    got = served.read({"dataset": name, "branch": "dev"})
    assert_same_table(_sorted(got), _sorted(want), "branch read")
    flt = {"dataset": name, "branch": "dev", "filter": "id >= 5 AND id < 15"}
    assert_same_table(
        _sorted(served.read(flt)),
        _sorted(_branch(served, name, "dev").to_table(filter="id >= 5 AND id < 15")),
        "filtered branch read",
    )
    old = served.read({"dataset": name, "branch": "dev", "version": 2})
    assert_same_table(
        _sorted(old), _sorted(lance.dataset(served.path(name), version=2).to_table()), "v2"
    )
    # the main line is untouched, and version 3 of main is not version 3 of dev
    assert served.read({"dataset": name}).num_rows == 45
    assert served.read({"dataset": name, "version": 3}).num_rows == 45
    described = served.action("describe", {"dataset": name, "branch": "dev"})
    assert (described["branch"], described["version"], described["rows"]) == ("dev", 4, 33)
    listed = served.action("list_branches", {"dataset": name})["branches"]
    assert [(b["name"], b["parent_branch"], b["parent_version"]) for b in listed] == [
        ("dev", None, 2)
    ]
    versions = served.action("list_versions", {"dataset": name, "branch": "dev"})["versions"]
    assert [v["version"] for v in versions] == [2, 3, 4]


def test_branch_requests_refused_cleanly(served: Served, name: str) -> None:
    served.put(name, table(10), mode="create")
    cases = [
        (lambda: served.read({"dataset": name, "branch": "nope"}), "not_found"),
        (lambda: served.put(name, table(1), branch="nope"), "not_found"),
        (lambda: served.put(name, table(1), branch="x", mode="create"), "not_found"),
        (lambda: served.read({"dataset": name, "branch": "a b"}), "invalid_argument"),
        (lambda: served.read({"dataset": name, "branch": 3}), "invalid_argument"),
        (
            lambda: served.action("create_branch", {"dataset": name, "name": "main"}),
            "invalid_argument",
        ),
        (
            lambda: served.action("create_branch", {"dataset": name, "name": "b", "version": 9}),
            "not_found",
        ),
        (lambda: served.action("delete_branch", {"dataset": name, "name": "nope"}), "not_found"),
        (
            lambda: served.action("drop_dataset", {"dataset": name, "branch": "b"}),
            "invalid_argument",
        ),
    ]
    for call, code in cases:
        with pytest.raises(fl.FlightError) as e:
            call()
        assert_clean_error(e.value, code, served.root)
    served.action("create_branch", {"dataset": name, "name": "b"})
    with pytest.raises(fl.FlightError) as e:
        served.action("create_branch", {"dataset": name, "name": "b"})
    assert_clean_error(e.value, "already_exists", served.root)
    served.action("create_branch", {"dataset": name, "name": "c", "branch": "b"})
    with pytest.raises(fl.FlightError) as e:
        served.action("delete_branch", {"dataset": name, "name": "b"})
    assert_clean_error(e.value, "commit_conflict", served.root)
    assert set(lance.dataset(served.path(name)).branches.list()) == {"b", "c"}
    assert lance.dataset(served.path(name)).version == 1  # nothing reached the main line


def test_the_python_client_on_a_branch(served: Served, name: str) -> None:
    client = Client(served.uri)
    client.write(name, table(30), mode="create")
    client.create_index(name, "id", "BTREE")
    client.create_index(name, "s", "INVERTED")
    client.create_branch(name, "dev")
    dev = client.branch("dev")
    dev.write(name, table(4, start=500))
    fragments = dev.stage(name, table(2, start=600))
    dev.commit(name, fragments)
    merged = dev.merge(name, table(3, start=500).set_column(1, "x", pa.array([9.0] * 3)), on="id")
    assert (merged["updated_rows"], merged["inserted_rows"]) == (3, 0)
    dev.update(name, {"s": "'dev'"}, where="id >= 600")
    dev.compact(name)
    dev.create_tag(name, "on-dev")
    want = _branch(served, name, "dev").to_table()
    assert_same_table(_sorted(dev.read(name)), _sorted(want), "client branch read")
    assert_same_table(
        _sorted(client.read(name, branch="dev", filter="id > 550")),
        _sorted(_branch(served, name, "dev").to_table(filter="id > 550")),
        "branch as a read option",
    )
    tagged = lance.dataset(served.path(name), version="on-dev")
    assert tagged.version == _branch(served, name, "dev").version
    found = dev.full_text_search(name, "s3", limit=None, columns=["id"])
    expected = _branch(served, name, "dev").to_table(full_text_query="s3", columns=["id"])
    assert sorted(found.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    assert found.num_rows == 3  # ids 3, 16 and 29
    tags = client.tags(name)
    assert tags["on-dev"]["branch"] == "dev"
    assert client.read(name).num_rows == 30  # the main line
    assert [b["name"] for b in client.branches(name)] == ["dev"]
    assert client.branch("main").read(name).num_rows == 30
    client.delete_tag(name, "on-dev")
    client.delete_branch(name, "dev")
    with pytest.raises(ClientNotFound):
        dev.read(name)
    assert lance.dataset(served.path(name)).branches.list() == {}
    client.close()
