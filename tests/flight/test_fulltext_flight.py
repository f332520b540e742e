"""Full-text search over Flight: a CMD descriptor's `full_text_query` answered by a real
`quiver serve` as pylance answers `to_table(full_text_query=...)` on the same dataset, from
the Python client and from plain pyarrow.flight; refusals with their codes."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from fulltext_corpus import assert_same_answers, text_table
from server_process import quiver_serve

from quiver.clients import Client
from quiver.clients.errors import InvalidArgument

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("fts")
    ds = lance.write_dataset(text_table(900, 11), str(root / "docs.lance"), max_rows_per_file=300)
    ds.create_scalar_index("text", "INVERTED")
    lance.write_dataset(text_table(100, 12, start=900), str(root / "docs.lance"), mode="append")
    lance.dataset(str(root / "docs.lance")).delete("id % 9 = 4")
    lance.write_dataset(text_table(10, 13), str(root / "plain.lance"))
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


def _pylance(root: Path, **kw: object) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lance.dataset(str(root / "docs.lance")).to_table(
            columns=["id"], with_row_id=True, **kw
        )


@pytest.mark.parametrize(
    "options",
    [
        {"full_text_query": "apple fox"},
        {"full_text_query": "running dogs", "limit": 7},
        {"full_text_query": "café", "filter": "cat = 'c1'", "prefilter": True},
        {"full_text_query": {"query": "blue river", "columns": ["text"]}, "limit": 20},
        {"full_text_query": "search tables", "fast_search": True},
    ],
)
def test_client_reads_as_pylance(served: tuple[str, Path], options: dict) -> None:
    uri, root = served
    with Client(uri) as qc:
        ours = qc.read("docs", columns=["id"], with_row_id=True, **options)
    assert_same_answers(_pylance(root, **options), ours, str(options))


def test_combined_fields_over_flight(served: tuple[str, Path]) -> None:
    """pylance's CombinedFieldsQuery in its serde form: BM25F over an indexed and an
    unindexed column, as pylance scores it."""
    from lance.query import CombinedFieldsQuery

    uri, root = served
    body = {"query": "apple river", "columns": ["text", "title"], "boost": [2.0, 1.0]}
    with Client(uri) as qc:
        ours = qc.read(
            "docs", columns=["id"], with_row_id=True, limit=9,
            full_text_query={"combined_fields": body},
        )  # fmt: skip
    query = CombinedFieldsQuery("apple river", ["text", "title"], boosts=[2.0, 1.0])
    assert_same_answers(_pylance(root, full_text_query=query, limit=9), ours, "combined")


def test_plain_flight_descriptor(served: tuple[str, Path]) -> None:
    uri, root = served
    client = fl.connect(uri)
    cmd = {"dataset": "docs", "full_text_query": "apple", "columns": ["id"], "limit": 5}
    info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))
    assert len(info.endpoints) == 1
    assert info.schema.names == ["id", "_score"]
    table = client.do_get(info.endpoints[0].ticket).read_all()
    theirs = _pylance(root, full_text_query="apple", limit=5)
    assert table["_score"].to_pylist() == pytest.approx(theirs["_score"].to_pylist(), rel=1e-6)
    client.close()


def test_ticket_read_again(served: tuple[str, Path]) -> None:
    """The first DoGet runs the search its GetFlightInfo built, a second one builds it from
    the ticket: the same answer, pylance's."""
    uri, root = served
    client = fl.connect(uri)
    cmd = {
        "dataset": "docs",
        "full_text_query": "blue fox",
        "columns": ["id"],
        "with_row_id": True,
        "limit": 9,
    }
    info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))
    first = client.do_get(info.endpoints[0].ticket).read_all()
    again = client.do_get(info.endpoints[0].ticket).read_all()
    assert again.equals(first)
    assert first.num_rows == 9
    assert_same_answers(_pylance(root, full_text_query="blue fox", limit=9), first, "blue fox")
    client.close()


def test_refusals(served: tuple[str, Path]) -> None:
    uri, _ = served
    with Client(uri) as qc:
        with pytest.raises(InvalidArgument, match="INVERTED index"):
            qc.read("plain", full_text_query="apple")
        with pytest.raises(InvalidArgument, match="does not hold text"):
            qc.read("docs", full_text_query={"query": "apple", "columns": ["id"]})
        with pytest.raises(InvalidArgument, match="position is not found"):
            qc.read("docs", full_text_query='"quick fox"')  # a phrase needs positions
        with pytest.raises(InvalidArgument, match="max_rows_per_endpoint"):
            qc.flight_info("docs", full_text_query="apple", max_rows_per_endpoint=5)
    client = fl.connect(uri)
    for bad in (42, [], ["apple", 7], {"query": 1}, ["x"] * 10_001):
        cmd = {"dataset": "docs", "full_text_query": bad}
        with pytest.raises(fl.FlightError):
            client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))
    alone = {"dataset": "docs", "full_text_query": "apple", "hybrid": {"fusion": "rrf"}}
    with pytest.raises(fl.FlightError, match="hybrid"):
        client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(alone)))
    client.close()


def test_one_round_trip_and_batches(served: tuple[str, Path]) -> None:
    """`full_text_search` answers in one DoExchange as GetFlightInfo + DoGet answer;
    `full_text_search_batch` answers each query as it alone would be answered, after its
    `query_index`, also through a ticket; a postfilter, a prefilter and pins apply to each."""
    uri, root = served
    queries = ["apple fox", "running dogs", "café", {"query": "blue river", "columns": ["text"]}]
    queries += ["nothing-here-at-all", "the quick brown fox"]
    with Client(uri) as qc:
        for extra in ({}, {"filter": "id % 2 = 0"}, {"filter": "cat = 'c1'", "prefilter": True}):
            for q in queries:
                one = qc.full_text_search("docs", q, limit=6, columns=["id"], **extra)
                assert one.equals(
                    qc.read("docs", full_text_query=q, limit=6, columns=["id"], **extra)
                )
                # a postfilter after a limit keeps what the limit cut among tied scores,
                # which pylance orders arbitrarily: compared with pylance without a limit
                limit = None if "filter" in extra and not extra.get("prefilter") else 6
                with_ids = qc.full_text_search(
                    "docs", q, limit=limit, columns=["id"], with_row_id=True, **extra
                )
                want = _pylance(root, full_text_query=q, limit=limit, **extra)
                assert_same_answers(want, with_ids, f"{q} {extra}")
            batch = qc.full_text_search_batch("docs", queries, limit=6, columns=["id"], **extra)
            assert batch.column_names == ["query_index", "id", "_score"]
            for i, q in enumerate(queries):
                mine = batch.filter(pa.compute.equal(batch["query_index"], i)).drop(["query_index"])
                assert mine.equals(qc.full_text_search("docs", q, limit=6, columns=["id"], **extra))
            ticketed = qc.read("docs", full_text_query=queries, limit=6, columns=["id"], **extra)
            assert ticketed.equals(batch)
        pinned = qc.full_text_search_batch("docs", ["apple"], limit=None, version=2)
        v2 = lance.dataset(str(root / "docs.lance"), version=2)
        assert pinned.num_rows == v2.to_table(full_text_query="apple").num_rows
        with pytest.raises(TypeError, match="non-empty list"):
            qc.full_text_search_batch("docs", "apple")
        with pytest.raises(TypeError, match="full_text_search_batch"):
            qc.full_text_search("docs", ["apple"])
        with pytest.raises(TypeError, match="unknown full-text search option"):
            qc.full_text_search("docs", "apple", nprobes=3)
        with pytest.raises(InvalidArgument, match="one text query"):
            qc.hybrid("docs", "vec", [0.0], ["a", "b"])


def test_hybrid_over_flight(tmp_path: Path) -> None:
    """A hybrid search in one DoExchange (and as a GetFlightInfo + DoGet read) answers as
    the engine's, which is checked against LanceDB's fusion in the engine's tests."""
    import numpy as np

    from quiver.format.dataset import dataset

    table = text_table(600, 81)
    vectors = np.random.default_rng(3).standard_normal((600, 4)).astype(np.float32)
    table = table.append_column(
        "vec", pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), 4)
    )
    root = tmp_path / "root"
    root.mkdir()
    ds = lance.write_dataset(table, str(root / "docs.lance"))
    ds.create_scalar_index("text", "INVERTED")
    q = vectors[5] + 0.01
    engine = dataset(str(root / "docs.lance"))
    with quiver_serve(root) as (uri, _pid), Client(uri) as qc:
        for fusion, extra in (("rrf", {"rrf_k": 30}), ("linear", {"weight": 0.4})):
            got = qc.hybrid(
                "docs", "vec", q, "apple fox", k=8, fusion=fusion, columns=["id"], **extra
            )
            want = engine.to_table(
                nearest={"column": "vec", "q": q},
                full_text_query="apple fox",
                limit=8,
                columns=["id"],
                hybrid={"fusion": fusion, **extra},
            )
            assert got.equals(want), fusion
        cmd = {
            "dataset": "docs",
            "nearest": {"column": "vec", "q": q.tolist()},
            "full_text_query": "apple",
            "limit": 5,
            "columns": ["id"],
        }
        client = fl.connect(uri)
        info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))
        assert info.schema.names == ["id", "_relevance_score"]
        assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 5
        bad = {**cmd, "hybrid": {"fusion": "max"}}
        with pytest.raises(fl.FlightError, match="fusion"):
            client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(bad)))
        client.close()
