"""The REST namespace driven by the real clients from PyPI: pylance's RestNamespace,
lancedb's `connect_namespace`, the generated `lance-namespace` REST client; and what they
write read back over Flight (and the reverse)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lance.namespace as lns
import lancedb
import numpy as np
import pyarrow as pa
import pytest
from fulltext_corpus import text_table
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    NamespaceExistsRequest,
)
from lance_namespace.errors import (
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from namespace_helpers import Served, ipc_stream, namespace_server

from quiver.clients import Client

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
VECTORS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "vector": pa.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], pa.list_(pa.float32(), 2)),
    }
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with namespace_server(tmp_path_factory.mktemp("ns")) as s:
        yield s


def test_pylance_creates_appends_and_reads_through_the_namespace(served: Served) -> None:
    ns = lns.RestNamespace(uri=served.url)
    ns.create_namespace(CreateNamespaceRequest(id=["py"]))
    assert "py" in ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces
    ns.namespace_exists(NamespaceExistsRequest(id=["py"]))
    with pytest.raises(NamespaceNotFoundError):
        ns.namespace_exists(NamespaceExistsRequest(id=["nope"]))

    lance.write_dataset(ROWS, namespace_client=ns, table_id=["py", "t"], mode="create")
    assert lance.dataset(namespace_client=ns, table_id=["py", "t"]).to_table() == ROWS
    lance.write_dataset(ROWS, namespace_client=ns, table_id=["py", "t"], mode="append")
    ds = lance.dataset(namespace_client=ns, table_id=["py", "t"])
    assert ds.to_table() == pa.concat_tables([ROWS, ROWS])
    assert ns.list_tables(ListTablesRequest(id=["py"])).tables == ["t"]

    # the files are where Flight serves dataset py/t
    assert (served.root / "py" / "t.lance" / "_versions").is_dir()
    with Client(served.flight) as client:
        got = client.read("py/t").sort_by("id")
    assert got == pa.concat_tables([ROWS, ROWS]).sort_by("id")

    described = ns.describe_table(DescribeTableRequest(id=["py", "t"], load_detailed_metadata=True))
    assert described.version == 2
    assert [f.name for f in described.var_schema.fields] == ["id", "name"]
    assert described.metadata["total_rows"] == "6"

    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=["py", "missing"]))
    with pytest.raises(TableAlreadyExistsError):
        lance.write_dataset(ROWS, namespace_client=ns, table_id=["py", "t"], mode="create")
    with pytest.raises(NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=["py"]))
    dropped = ns.drop_table(DropTableRequest(id=["py", "t"]))
    assert dropped.id == ["py", "t"]
    assert not (served.root / "py" / "t.lance").exists()
    ns.drop_namespace(DropNamespaceRequest(id=["py"]))
    assert "py" not in ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces


def test_a_flight_write_is_a_namespace_table(served: Served) -> None:
    with Client(served.flight) as client:
        client.write("fl/sub/rows", ROWS, mode="create")
    ns = lns.RestNamespace(uri=served.url)
    assert ns.list_namespaces(ListNamespacesRequest(id=["fl"])).namespaces == ["sub"]
    assert ns.list_tables(ListTablesRequest(id=["fl", "sub"])).tables == ["rows"]
    assert lance.dataset(namespace_client=ns, table_id=["fl", "sub", "rows"]).to_table() == ROWS


def test_lancedb_connect_namespace(served: Served) -> None:
    db = lancedb.connect_namespace("rest", {"uri": served.url})
    db.create_namespace(["ldb"])
    table = db.create_table("tbl", VECTORS, namespace_path=["ldb"])
    assert db.list_tables(namespace_path=["ldb"]).tables == ["tbl"]
    table = db.open_table("tbl", namespace_path=["ldb"])
    assert table.count_rows() == 3
    assert table.search([0.1, 0.2]).limit(2).to_arrow()["id"].to_pylist() == [1, 2]
    table.add(VECTORS)
    assert table.count_rows() == 6
    with pytest.raises(TableNotFoundError):
        db.open_table("zzz", namespace_path=["ldb"])

    # scans pushed down to the server's QueryTable (an Arrow IPC file back)
    pushed = lancedb.connect_namespace(
        "rest", {"uri": served.url}, namespace_client_pushdown_operations=["QueryTable"]
    )
    got = pushed.open_table("tbl", namespace_path=["ldb"]).search().where("id = 2").limit(5)
    assert got.to_arrow()["id"].to_pylist() == [2, 2]

    db.rename_table("tbl", "renamed", cur_namespace_path=["ldb"], new_namespace_path=["ldb"])
    assert db.list_tables(namespace_path=["ldb"]).tables == ["renamed"]
    assert db.open_table("renamed", namespace_path=["ldb"]).count_rows() == 6
    db.drop_table("renamed", namespace_path=["ldb"])
    db.drop_namespace(["ldb"])
    assert "ldb" not in db.list_namespaces().namespaces


def test_lancedb_hybrid_search_through_query_table(served: Served) -> None:
    """lancedb's hybrid search over the namespace: its vector and full-text QueryTable
    calls answered by Quiver (the FTS index built by CreateTableIndex), fused by lancedb as
    when it opens the same files itself."""
    rng = np.random.default_rng(3)
    table = text_table(400, 9).append_column(
        "vector",
        pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(1600, np.float32)), 4),
    )
    db = lancedb.connect_namespace(
        "rest", {"uri": served.url}, namespace_client_pushdown_operations=["QueryTable"]
    )
    db.create_namespace(["hy"])
    db.create_table("docs", table, namespace_path=["hy"])
    remote = db.open_table("docs", namespace_path=["hy"])
    remote.create_fts_index("text")
    local = lancedb.connect(str(served.root / "hy")).open_table("docs")
    q = [0.1, 0.2, -0.3, 0.5]
    for text, limit in (("apple fox", 5), ("river blue mountains", 12), ("zzz-nothing", 4)):
        got = remote.search(query_type="hybrid").vector(q).text(text).limit(limit).to_arrow()
        want = local.search(query_type="hybrid").vector(q).text(text).limit(limit).to_arrow()
        assert got["id"].to_pylist() == want["id"].to_pylist(), text
        assert got["_relevance_score"].to_pylist() == want["_relevance_score"].to_pylist()
    db.drop_table("docs", namespace_path=["hy"])
    db.drop_namespace(["hy"])


def test_data_plane_through_the_generated_rest_client(served: Served) -> None:
    from lance_namespace_urllib3_client import ApiClient, Configuration
    from lance_namespace_urllib3_client.api import NamespaceApi, TableApi
    from lance_namespace_urllib3_client.exceptions import ApiException
    from lance_namespace_urllib3_client.models import (
        CountTableRowsRequest,
        DeleteFromTableRequest,
        QueryTableRequest,
        QueryTableRequestVector,
        TableExistsRequest,
        UpdateTableRequest,
    )
    from lance_namespace_urllib3_client.models import (
        CreateNamespaceRequest as RawCreateNamespace,
    )

    api = ApiClient(Configuration(host=served.url))
    namespaces, tables = NamespaceApi(api), TableApi(api)
    namespaces.create_namespace(id="u3", create_namespace_request=RawCreateNamespace())
    created = tables.create_table(id="u3$t", body=ipc_stream(VECTORS))
    assert created.version == 1
    count = tables.count_table_rows(id="u3$t", count_table_rows_request=CountTableRowsRequest())
    assert count == 3

    def query(**fields: object) -> pa.Table:
        request = QueryTableRequest(k=10, vector=QueryTableRequestVector(), **fields)
        data = tables.query_table(id="u3$t", query_table_request=request)
        return pa.ipc.open_file(pa.BufferReader(bytes(data))).read_all()

    assert query(filter="id > 1") == VECTORS.filter(pa.compute.field("id") > 1)
    inserted = tables.insert_into_table(id="u3$t", body=ipc_stream(VECTORS), mode="append")
    assert inserted.num_inserted_rows == 3 and inserted.version == 2
    merged = tables.merge_insert_into_table(
        id="u3$t",
        body=ipc_stream(
            pa.table({"id": pa.array([3, 4], pa.int64()), "vector": VECTORS["vector"][:2]})
        ),
        on=["id"],
        when_matched_update_all=True,
        when_not_matched_insert_all=True,
    )
    assert (merged.num_updated_rows, merged.num_inserted_rows) == (2, 1)
    updated = tables.update_table(
        id="u3$t",
        update_table_request=UpdateTableRequest(predicate="id = 4", updates=[["id", "40"]]),
    )
    assert updated.updated_rows == 1
    tables.delete_from_table(
        id="u3$t", delete_from_table_request=DeleteFromTableRequest(predicate="id = 1")
    )
    ids = sorted(query()["id"].to_pylist())
    assert ids == [2, 2, 3, 3, 40]
    with Client(served.flight) as client:
        assert sorted(client.read("u3/t")["id"].to_pylist()) == ids
    with pytest.raises(ApiException) as missing:
        tables.table_exists(id="u3$nope", table_exists_request=TableExistsRequest())
    assert missing.value.status == 404 and '"code": 4' in missing.value.body


def test_hnsw_index_through_the_generated_rest_client(served: Served) -> None:
    """CreateTableIndex builds an IVF_HNSW_SQ index with the spec's graph options; QueryTable
    searches it with `ef` as pylance searches the same files."""
    from lance_namespace_urllib3_client import ApiClient, Configuration
    from lance_namespace_urllib3_client.api import NamespaceApi, TableApi
    from lance_namespace_urllib3_client.models import (
        CreateNamespaceRequest as RawCreateNamespace,
    )
    from lance_namespace_urllib3_client.models import (
        CreateTableIndexRequest,
        QueryTableRequest,
        QueryTableRequestVector,
    )

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((1200, 4)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(1200)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4),
        }
    )
    api = ApiClient(Configuration(host=served.url))
    namespaces, tables = NamespaceApi(api), TableApi(api)
    namespaces.create_namespace(id="g", create_namespace_request=RawCreateNamespace())
    tables.create_table(id="g$t", body=ipc_stream(table))
    request = CreateTableIndexRequest(
        column="vector", index_type="IVF_HNSW_SQ", num_partitions=2, m=8, ef_construction=40
    )
    tables.create_table_index(id="g$t", create_table_index_request=request)
    path = str(served.root / "g" / "t.lance")
    sub = lance.dataset(path).stats.index_stats("vector_idx")["indices"][0]["sub_index"]
    assert sub["index_type"] == "HNSW" and sub["params"]["m"] == 8
    q = [0.3, -0.2, 0.9, 0.1]
    request = QueryTableRequest(k=7, ef=20, vector=QueryTableRequestVector(single_vector=q))
    data = tables.query_table(id="g$t", query_table_request=request)
    got = pa.ipc.open_file(pa.BufferReader(bytes(data))).read_all()
    want = lance.dataset(path).to_table(nearest={"column": "vector", "q": q, "k": 7, "ef": 20})
    assert got["id"].to_pylist() == want["id"].to_pylist()


def test_ready_line_names_the_namespace(tmp_path: Path) -> None:
    with namespace_server(tmp_path / "r") as s:
        assert s.url.startswith("http://127.0.0.1:")
        log = (tmp_path / "r" / "server.log").read_text()
        assert f"namespace on {s.url}" in log
