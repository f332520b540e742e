"""Every DoAction of DESIGN.md §3 end to end, checked against format and pylance."""

from __future__ import annotations

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from flight_helpers import (
    Served,
    assert_clean_error,
    files_under,
    table,
)

from quiver.flight_server.actions import ACTIONS
from quiver.flight_server.sql.front import SQL_ACTIONS
from quiver.format.dataset import dataset, write_dataset

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


ALL_ACTIONS = {
    "create_index",
    "optimize_indices",
    "drop_index",
    "commit",
    "abort",
    "apply_staged",
    "describe",
    "list_versions",
    "delete",
    "update",
    "restore",
    "create_tag",
    "take_blobs",
    "read_blob",
    "create_branch",
    "list_branches",
    "delete_branch",
    "delete_tag",
    "list_tags",
    "add_columns",
    "drop_columns",
    "alter_columns",
    "compact",
    "cleanup",
    "drop_dataset",
    "healthcheck",
}


def both(uri: str, version: int | str | None = None) -> pa.Table:
    ours = dataset(uri, version=version).to_table()
    assert ours.equals(lance.dataset(uri, version=version).to_table())
    return ours


def make(served: Served, name: str, n: int = 100, per_file: int = 25) -> str:
    uri = served.path(name)
    write_dataset(table(n), uri, mode="create", max_rows_per_file=per_file)
    return uri


def test_list_actions_names_every_action_with_one_line(served: Served) -> None:
    listed = {a.type: a.description for a in served.client.list_actions()}
    assert set(listed) == ALL_ACTIONS | set(SQL_ACTIONS)
    assert ALL_ACTIONS == set(ACTIONS)
    assert all(d and "\n" not in d for d in listed.values())


def test_healthcheck(served: Served) -> None:
    assert served.action("healthcheck")["status"] == "serving"
    assert served.action("healthcheck", b"")["status"] == "serving"
    served.server.service.set_serving(False)
    try:
        with pytest.raises(fl.FlightUnavailableError) as e:
            served.action("healthcheck")
        assert_clean_error(e.value, "unavailable", served.root)
    finally:
        served.server.service.set_serving(True)


def test_describe_and_list_versions(served: Served, name: str) -> None:
    uri = make(served, name)
    served.put(name, table(10, start=100))
    d = served.action("describe", {"dataset": name})
    assert d["dataset"] == name and d["version"] == 2 and d["latest_version"] == 2
    assert d["rows"] == 110 and d["fragments"] == 5 and d["data_storage_version"] == "2.2"
    assert [f["name"] for f in d["schema"]] == dataset(uri).schema.names
    assert d["schema"][0] == {"name": "id", "type": "int64", "nullable": True}
    assert d["timestamp"].endswith("Z")
    old = served.action("describe", {"dataset": name, "version": 1})
    assert old["version"] == 1 and old["rows"] == 100 and old["latest_version"] == 2
    versions = served.action("list_versions", {"dataset": name})["versions"]
    assert [(v["version"], v["rows"], v["fragments"]) for v in versions] == [
        (1, 100, 4),
        (2, 110, 5),
    ]
    assert [v["version"] for v in lance.dataset(uri).versions()] == [1, 2]


def test_delete_and_restore(served: Served, name: str) -> None:
    uri = make(served, name)
    result = served.action("delete", {"dataset": name, "predicate": "id < 30 OR s IS NULL"})
    assert result == {"version": 2, "deleted_rows": 100 - both(uri).num_rows}
    want = table(100).filter(
        pc.invert(pc.or_kleene(pc.less(pc.field("id"), 30), pc.field("s").is_null()))
    )
    assert both(uri).equals(want)
    assert served.read(name).equals(want)
    restored = served.action("restore", {"dataset": name, "version": 1})
    assert restored["version"] == 3
    assert both(uri).equals(table(100))
    served.action("create_tag", {"dataset": name, "tag": "trimmed", "version": 2})
    assert served.action("restore", {"dataset": name, "tag": "trimmed"})["version"] == 4
    assert both(uri).equals(want)
    assert served.action("restore", {"dataset": name, "version": 1})["version"] == 5
    assert served.action("restore", {"dataset": name, "version": "trimmed"})["version"] == 6
    assert both(uri).equals(want)


def test_tags(served: Served, name: str) -> None:
    uri = make(served, name)
    served.put(name, table(1, start=100))
    assert served.action("create_tag", {"dataset": name, "tag": "v1", "version": 1}) == {
        "tag": "v1",
        "version": 1,
    }
    assert served.action("create_tag", {"dataset": name, "tag": "now"})["version"] == 2
    tags = served.action("list_tags", {"dataset": name})["tags"]
    assert {t: v["version"] for t, v in tags.items()} == {"now": 2, "v1": 1}
    assert {t: v["version"] for t, v in lance.dataset(uri).tags.list().items()} == {
        "now": 2,
        "v1": 1,
    }
    assert served.read({"dataset": name, "tag": "v1"}).equals(both(uri, version=1))
    with pytest.raises(fl.FlightError) as e:
        served.action("create_tag", {"dataset": name, "tag": "v1", "version": 2})
    assert_clean_error(e.value, "already_exists", served.root)
    with pytest.raises(fl.FlightError) as e:
        served.action("create_tag", {"dataset": name, "tag": "v9", "version": 9})
    assert_clean_error(e.value, "not_found", served.root)
    assert served.action("delete_tag", {"dataset": name, "tag": "v1"})["deleted"] is True
    assert set(served.action("list_tags", {"dataset": name})["tags"]) == {"now"}
    with pytest.raises(fl.FlightError) as e:
        served.action("delete_tag", {"dataset": name, "tag": "v1"})
    assert_clean_error(e.value, "not_found", served.root)


def test_schema_evolution(served: Served, name: str) -> None:
    uri = make(served, name)
    assert (
        served.action("add_columns", {"dataset": name, "columns": {"y": "id * 2"}})["version"] == 2
    )
    got = served.read({"dataset": name, "columns": ["id", "y"]})
    assert got.column("y").to_pylist() == [i * 2 for i in range(100)]
    assert served.action("drop_columns", {"dataset": name, "columns": ["tags"]})["version"] == 3
    result = served.action(
        "alter_columns",
        {
            "dataset": name,
            "alterations": [
                {"path": "s", "name": "label"},
                {"path": "y", "data_type": "int32"},
                {"path": "x", "nullable": True},
            ],
        },
    )
    assert result["version"] == 4
    final = both(uri)
    assert final.schema.names == ["id", "x", "label", "flag", "y"]
    assert final.schema.field("y").type == pa.int32()
    assert served.read(name).equals(final)
    with pytest.raises(fl.FlightError) as e:
        served.action("drop_columns", {"dataset": name, "columns": ["nope"]})
    assert_clean_error(e.value, "invalid_argument", served.root)
    with pytest.raises(fl.FlightError) as e:
        served.action(
            "alter_columns", {"dataset": name, "alterations": [{"path": "x", "data_type": "int99"}]}
        )
    assert_clean_error(e.value, "invalid_argument", served.root)


def test_compact_and_cleanup(served: Served, name: str) -> None:
    uri = make(served, name, n=100, per_file=10)
    served.action("delete", {"dataset": name, "predicate": "id % 10 = 3"})
    before = both(uri)
    result = served.action("compact", {"dataset": name, "target_rows_per_fragment": 1000})
    # as pylance 14: a ReserveFragments version (3), then the Rewrite (4)
    assert result["version"] == 4 and result["fragments_removed"] == 10
    assert result["fragments_added"] == 1
    assert both(uri).sort_by("id").equals(before.sort_by("id"))
    stats = served.action("cleanup", {"dataset": name, "older_than_seconds": 0})
    assert stats["old_versions"] == 3 and stats["data_files_removed"] >= 10
    assert [v["version"] for v in lance.dataset(uri).versions()] == [4]
    assert served.read(name).sort_by("id").equals(before.sort_by("id"))
    # versions a ticket pinned are gone after cleanup: a clean not_found
    with pytest.raises(fl.FlightError) as e:
        served.info({"dataset": name, "version": 1})
    assert_clean_error(e.value, "not_found", served.root)


def test_cleanup_refuses_tagged_versions(served: Served, name: str) -> None:
    make(served, name)
    served.put(name, table(1, start=100))
    served.action("create_tag", {"dataset": name, "tag": "keep", "version": 1})
    with pytest.raises(fl.FlightError) as e:
        served.action("cleanup", {"dataset": name, "older_than_seconds": 0})
    assert_clean_error(e.value, "failed_precondition", served.root)


def test_drop_dataset(served: Served, name: str) -> None:
    make(served, f"ns/{name}")
    info = served.info(f"ns/{name}")
    assert served.action("drop_dataset", {"dataset": f"ns/{name}"}) == {
        "dataset": f"ns/{name}",
        "dropped": True,
    }
    assert files_under(served.path(f"ns/{name}")) == []
    with pytest.raises(fl.FlightError) as e:
        served.client.do_get(info.endpoints[0].ticket).read_all()
    assert_clean_error(e.value, "not_found", served.root)
    with pytest.raises(fl.FlightError) as e:
        served.action("drop_dataset", {"dataset": f"ns/{name}"})
    assert_clean_error(e.value, "not_found", served.root)
    # a new dataset under the same name: old tickets do not read it
    served.put(f"ns/{name}", table(3), mode="create")
    with pytest.raises(fl.FlightError) as e:
        served.client.do_get(info.endpoints[0].ticket).read_all()
    assert_clean_error(e.value, "not_found", served.root)
    assert served.read(f"ns/{name}").equals(table(3))
