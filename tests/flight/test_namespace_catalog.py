"""Namespace and table metadata semantics the clients rely on: create modes, properties,
paging, cascading drops, declared tables, registration of a table's own location."""

from __future__ import annotations

from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest
from namespace_helpers import ARROW, Served, call, ipc_stream, namespace_server

from quiver.clients import Client

ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with namespace_server(tmp_path_factory.mktemp("catalog")) as s:
        yield s


def _create_table(served: Served, table_id: str) -> None:
    a = call(
        served.url, "POST", f"/v1/table/{table_id}/create", ipc_stream(ROWS), content_type=ARROW
    )
    assert a.status == 200, a.data


def test_create_modes_and_properties(served: Served) -> None:
    url = served.url
    assert call(url, "POST", "/v1/namespace/p/create", {"properties": {"owner": "ana"}}).json == {
        "properties": {"owner": "ana"}
    }
    assert call(url, "POST", "/v1/namespace/p/describe", {}).json == {
        "properties": {"owner": "ana"}
    }
    assert call(url, "POST", "/v1/namespace/p/create", {"mode": "ExistOk"}).status == 200
    again = call(
        url, "POST", "/v1/namespace/p/create", {"mode": "Overwrite", "properties": {"a": "b"}}
    )
    assert again.status == 200
    assert call(url, "POST", "/v1/namespace/p/describe", {}).json == {"properties": {"a": "b"}}
    assert call(url, "POST", "/v1/namespace/p/create", {"mode": "Create"}).code == 2


def test_paging_lists(served: Served) -> None:
    for name in ("pg1", "pg2", "pg3"):
        assert call(served.url, "POST", f"/v1/namespace/{name}/create", {}).status == 200
    for t in ("a", "b", "c"):
        _create_table(served, f"pg1%24{t}")
    seen, token = [], None
    while True:
        query = "limit=2" + (f"&page_token={token}" if token else "")
        page = call(served.url, "GET", f"/v1/namespace/pg1/table/list?{query}").json
        seen += page["tables"]
        token = page.get("page_token")
        if not token:
            break
    assert seen == ["a", "b", "c"]
    first = call(served.url, "GET", "/v1/namespace/%24/list?limit=1").json
    assert len(first["namespaces"]) == 1 and first["page_token"] == first["namespaces"][0]


def test_declared_tables(served: Served) -> None:
    url = served.url
    call(url, "POST", "/v1/namespace/d/create", {})
    declared = call(url, "POST", "/v1/table/d%24later/declare", {"properties": {"team": "x"}})
    assert declared.json["properties"] == {"team": "x"}
    assert call(url, "GET", "/v1/namespace/d/table/list").json == {"tables": ["later"]}
    hidden = call(url, "GET", "/v1/namespace/d/table/list?include_declared=false")
    assert hidden.json == {"tables": []}
    described = call(url, "POST", "/v1/table/d%24later/describe", {"check_declared": True}).json
    assert described["is_only_declared"] is True and described["properties"] == {"team": "x"}
    assert call(url, "POST", "/v1/table/d%24later/count_rows", {}).json == 0
    # a create turns it into a table, keeping its properties
    _create_table(served, "d%24later")
    described = call(url, "POST", "/v1/table/d%24later/describe", {"check_declared": True}).json
    assert described["is_only_declared"] is False and described["properties"] == {"team": "x"}
    assert call(url, "POST", "/v1/table/d%24later/count_rows", {}).json == 2
    # a declared location elsewhere is refused: Quiver keeps the layout
    elsewhere = call(url, "POST", "/v1/table/d%24other/declare", {"location": "/data/x.lance"})
    assert elsewhere.code == 0


def test_deregister_keeps_the_data_and_register_brings_it_back(served: Served) -> None:
    url = served.url
    call(url, "POST", "/v1/namespace/r/create", {})
    _create_table(served, "r%24t")
    own = {"location": "r/t.lance", "properties": {"k": "v"}}
    assert call(url, "POST", "/v1/table/r%24t/register", own).code == 5  # registered already
    updated = call(url, "POST", "/v1/table/r%24t/register", {**own, "mode": "Overwrite"})
    assert updated.status == 200, updated.data
    assert call(url, "POST", "/v1/table/r%24t/describe", {}).json["properties"] == {"k": "v"}

    gone = call(url, "POST", "/v1/table/r%24t/deregister", {})
    assert gone.status == 200 and gone.json["id"] == ["r", "t"]
    parked = gone.json["location"]
    assert (served.root / parked / "_versions").is_dir()  # the data is kept
    assert call(url, "POST", "/v1/table/r%24t/exists", {}).code == 4
    assert call(url, "GET", "/v1/namespace/r/table/list").json == {"tables": []}
    with Client(served.flight) as client:
        assert "r/t" not in client.datasets()

    back = call(url, "POST", "/v1/table/r%24back/register", {"location": parked})
    assert back.status == 200, back.data
    assert call(url, "POST", "/v1/table/r%24back/count_rows", {}).json == 2
    assert call(url, "POST", "/v1/table/r%24back/describe", {}).json["properties"] == {"k": "v"}
    assert call(url, "POST", "/v1/table/r%24again/register", {"location": parked}).code == 13
    assert call(url, "POST", "/v1/table/r%24x/register", {"location": "/etc"}).code == 13
    assert call(url, "POST", "/v1/table/r%24x/register", {"location": "r/back.lance"}).code == 0
    assert call(url, "POST", "/v1/table/r%24none/register", {"location": "r/none.lance"}).code == 13


def test_drop_namespace_cascade(served: Served) -> None:
    url = served.url
    call(url, "POST", "/v1/namespace/c/create", {})
    call(url, "POST", "/v1/namespace/c%24inner/create", {})
    _create_table(served, "c%24inner%24t")
    assert call(url, "POST", "/v1/namespace/c/drop", {}).code == 3
    assert call(url, "POST", "/v1/namespace/c/drop", {"behavior": "Cascade"}).status == 200
    assert not (served.root / "c").exists()
    assert call(url, "POST", "/v1/namespace/c/drop", {"mode": "Skip"}).status == 200
    assert call(url, "POST", "/v1/namespace/c/drop", {}).code == 1


def test_rename_across_namespaces(served: Served) -> None:
    url = served.url
    call(url, "POST", "/v1/namespace/from/create", {})
    call(url, "POST", "/v1/namespace/to/create", {})
    _create_table(served, "from%24t")
    _create_table(served, "to%24taken")
    taken = call(
        url,
        "POST",
        "/v1/table/from%24t/rename",
        {"new_table_name": "taken", "new_namespace_id": ["to"]},
    )
    assert taken.code == 5
    moved = call(
        url,
        "POST",
        "/v1/table/from%24t/rename",
        {"new_table_name": "u", "new_namespace_id": ["to"]},
    )
    assert moved.status == 200
    assert call(url, "POST", "/v1/table/to%24u/count_rows", {}).json == 2
    assert call(url, "POST", "/v1/table/from%24t/exists", {}).code == 4


def test_query_options(served: Served) -> None:
    url = served.url
    rows = pa.table(
        {
            "id": pa.array(range(10), pa.int64()),
            "vector": pa.array([[float(i), 0.0] for i in range(10)], pa.list_(pa.float32(), 2)),
        }
    )
    made = call(url, "POST", "/v1/table/q/create", ipc_stream(rows), content_type=ARROW)
    assert made.status == 200

    def query(**body: object) -> pa.Table:
        a = call(url, "POST", "/v1/table/q/query", {"vector": {}, **body})
        assert a.status == 200, a.data
        assert a.headers["content-type"] == "application/vnd.apache.arrow.file"
        return a.table()

    aliased = query(k=3, offset=2, columns={"column_aliases": {"ident": "id"}})
    assert aliased.to_pydict() == {"ident": [2, 3, 4]}
    with_ids = query(k=2, columns={"column_names": ["id"]}, with_row_id=True)
    assert with_ids.column_names == ["id", "_rowid"]
    near = query(k=2, offset=1, vector={"single_vector": [5.0, 0.0]}, columns=["id"])
    assert near["id"].to_pylist() == [4, 6]  # after the nearest (5), k = 2 more
    assert near.column_names == ["id", "_distance"]
    # lower_bound <= distance < upper_bound: squared distances 0, 1, 1, 4, 4, ... from 5
    ranged = query(k=5, vector={"single_vector": [5.0, 0.0]}, lower_bound=0.5, upper_bound=4.0)
    assert sorted(ranged["id"].to_pylist()) == [4, 6]
    assert query(k=0)["id"].to_pylist() == list(range(10))
    filtered = query(k=10, filter="id >= 8", version=1)
    assert filtered["id"].to_pylist() == [8, 9]


def test_branches_through_the_namespace(served: Served) -> None:
    """ListTableBranches / CreateTableBranch / DeleteTableBranch, and the data routes on a
    branch: what they write is on the branch only, as pylance reads it."""
    url = served.url
    rows = pa.table({"id": pa.array(range(6), pa.int64()), "x": [float(i) for i in range(6)]})
    assert call(url, "POST", "/v1/table/br/create", ipc_stream(rows), content_type=ARROW).status
    assert call(url, "POST", "/v1/table/br/branches/create", {"name": "dev"}).status == 200
    again = call(url, "POST", "/v1/table/br/branches/create", {"name": "dev"})
    assert (again.status, again.code) == (409, 23)
    more = pa.table({"id": pa.array([10, 11], pa.int64()), "x": [10.0, 11.0]})
    added = call(
        url, "POST", "/v1/table/br/insert?branch=dev", ipc_stream(more), content_type=ARROW
    )
    assert added.status == 200 and added.json["num_inserted_rows"] == 2
    deleted = call(url, "POST", "/v1/table/br/delete", {"predicate": "id < 2", "branch": "dev"})
    assert deleted.status == 200
    updated = call(
        url, "POST", "/v1/table/br/update", {"updates": [["x", "x * 2"]], "branch": "dev"}
    )
    assert updated.status == 200 and updated.json["updated_rows"] == 6
    assert call(url, "POST", "/v1/table/br/count_rows", {"branch": "dev"}).json == 6
    assert call(url, "POST", "/v1/table/br/count_rows", {}).json == 6
    got = call(url, "POST", "/v1/table/br/query", {"k": 10, "vector": {}, "branch": "dev"})
    dev = lance.dataset(str(served.root / "br.lance")).checkout_version(("dev", None)).to_table()
    assert got.table().sort_by("id").equals(dev.sort_by("id"))
    assert sorted(dev.column("id").to_pylist()) == [2, 3, 4, 5, 10, 11]
    assert lance.dataset(str(served.root / "br.lance")).to_table().equals(rows)  # main untouched
    listed = call(url, "POST", "/v1/table/br/branches/list", {}).json["branches"]
    assert list(listed) == ["dev"] and listed["dev"]["parentVersion"] == 1
    assert listed["dev"]["manifestSize"] > 0 and "parentBranch" not in listed["dev"]
    call(url, "POST", "/v1/table/br/branches/create", {"name": "fix", "from_branch": "dev"})
    assert (
        call(url, "POST", "/v1/table/br/branches/list", {}).json["branches"]["fix"]["parentBranch"]
        == "dev"
    )
    missing = call(url, "POST", "/v1/table/br/count_rows", {"branch": "nope"})
    assert (missing.status, missing.code) == (404, 22)
    made = call(
        url, "POST", "/v1/table/br/tags/create", {"tag": "d3", "version": 3, "branch": "dev"}
    )
    assert made.status == 200
    tags = call(url, "POST", "/v1/table/br/tags/list", {}).json["tags"]
    assert tags["d3"]["version"] == 3 and tags["d3"]["branch"] == "dev"
    assert call(url, "POST", "/v1/table/br/tags/version", {"tag": "d3"}).json == {
        "version": 3,
        "branch": "dev",
    }
    indexed = call(
        url,
        "POST",
        "/v1/table/br/create_scalar_index",
        {"column": "id", "index_type": "BTREE", "branch": "dev"},
    )
    assert indexed.status == 200
    on_dev = lance.dataset(str(served.root / "br.lance")).checkout_version(("dev", None))
    assert [i.name for i in on_dev.describe_indices()] == ["id_idx"]
    assert not lance.dataset(str(served.root / "br.lance")).describe_indices()
    refused = call(url, "POST", "/v1/table/br/tags/list", {"branch": "dev"})
    assert refused.code == 0  # routes that do not act on a branch say so
    versions = call(url, "POST", "/v1/table/br/version/list?branch=dev").json["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3, 4, 5]  # 5: the index
    assert versions[-1]["manifest_path"].split("/")[-4:-2] == ["tree", "dev"]
    described = call(
        url, "POST", "/v1/table/br/describe", {"branch": "dev", "load_detailed_metadata": True}
    ).json
    assert described["version"] == 5 and described["location"].endswith("br.lance")
    stats = call(url, "POST", "/v1/table/br/stats", {"branch": "dev"}).json
    on_dev = lance.dataset(str(served.root / "br.lance")).checkout_version(("dev", None))
    assert stats["num_rows"] == sum(f.physical_rows for f in on_dev.get_fragments())
    assert call(url, "POST", "/v1/table/br/restore", {"version": 2, "branch": "dev"}).status == 200
    restored = lance.dataset(str(served.root / "br.lance")).checkout_version(("dev", None))
    assert restored.version == 6 and restored.count_rows() == 8
    assert call(url, "POST", "/v1/table/br/branches/delete", {"name": "fix"}).status == 200
    gone = call(url, "POST", "/v1/table/br/branches/delete", {"name": "fix"})
    assert (gone.status, gone.code) == (404, 22)
