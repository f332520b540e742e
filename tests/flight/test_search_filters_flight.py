"""Search filters over Flight: a CMD descriptor's `search_filter` (a full-text query
filtering a vector search, a vector search filtering a full-text search) answered by a real
`quiver serve` as pylance answers the same filters in process; through GetFlightInfo +
DoGet and the Python client's DoExchange."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import lance
import lance.query as lq
import numpy as np
import pyarrow.flight as fl
import pytest
from lance.dataset import VectorSearchQuery
from server_process import quiver_serve

from quiver.clients import Client
from quiver.clients.errors import InvalidArgument, Unimplemented

sys.path.insert(0, str(Path(__file__).parents[1] / "engine" / "dataset"))
from test_search_filters import _query_vector, _table  # noqa: E402

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("search-filters")
    lance.write_dataset(_table(300, 1), str(root / "docs.lance"), max_rows_per_file=100)
    lance.dataset(str(root / "docs.lance")).create_scalar_index("text", "INVERTED")
    with quiver_serve(root) as (uri, _pid):
        yield uri, root


def _pylance(root: Path, **kw: object):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lance.dataset(str(root / "docs.lance")).to_table(columns=["id"], **kw)


def test_text_filtered_by_vectors_over_flight(served: tuple[str, Path]) -> None:
    uri, root = served
    q = _query_vector(str(root / "docs.lance"), 7)
    for prefilter in (False, True):
        want = _pylance(
            root, full_text_query="kiwi", filter=VectorSearchQuery("vec", q, 8), prefilter=prefilter
        )
        with Client(uri) as qc:
            got = qc.read(
                "docs", columns=["id"], full_text_query="kiwi", prefilter=prefilter,
                search_filter={"nearest": {"column": "vec", "q": q, "k": 8}},
            )  # fmt: skip
        assert got["id"].to_pylist() == want["id"].to_pylist(), prefilter
        np.testing.assert_allclose(got["_score"], want["_score"], rtol=1e-5)


def test_vectors_filtered_by_text_over_flight(served: tuple[str, Path]) -> None:
    uri, root = served
    q = _query_vector(str(root / "docs.lance"), 4)
    for prefilter in (False, True):
        want = _pylance(
            root, nearest={"column": "vec", "q": q, "k": 10}, prefilter=prefilter,
            filter={"expr_filter": "cat != 'c2'", "search_filter": lq.MatchQuery("kiwi", "text")},
        )  # fmt: skip
        with Client(uri) as qc:
            got = qc.nearest(
                "docs", "vec", q, k=10, columns=["id"], prefilter=prefilter, filter="cat != 'c2'",
                search_filter={"full_text_query": {"match": {"terms": "kiwi", "column": "text"}}},
            )  # fmt: skip
        assert got["id"].to_pylist() == want["id"].to_pylist(), prefilter
        np.testing.assert_allclose(got["_distance"], want["_distance"], rtol=1e-5)
    # a plain Flight client: GetFlightInfo + DoGet of the one endpoint
    cmd = {
        "dataset": "docs",
        "nearest": {"column": "vec", "q": q.tolist(), "k": 10},
        "columns": ["id"],
        "search_filter": {"full_text_query": "kiwi"},
    }
    client = fl.connect(uri)
    info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(cmd)))
    table = client.do_get(info.endpoints[0].ticket).read_all()
    want = _pylance(
        root, nearest={"column": "vec", "q": q, "k": 10}, filter=lq.MatchQuery("kiwi", "text")
    )
    assert table["id"].to_pylist() == want["id"].to_pylist()
    client.close()


def test_bad_search_filters_are_refused(served: tuple[str, Path]) -> None:
    uri, _ = served
    q = np.zeros(8, np.float32)
    with Client(uri) as qc:
        with pytest.raises(InvalidArgument, match="search_filter"):
            qc.read("docs", search_filter={"full_text_query": "kiwi"})  # no search to filter
        with pytest.raises(InvalidArgument, match="search_filter"):
            qc.read("docs", full_text_query="kiwi", search_filter={"nope": 1})
        with pytest.raises(Unimplemented, match="only match queries"):
            qc.nearest(
                "docs", "vec", q, columns=["id"],
                search_filter={"full_text_query": {"phrase": {"terms": "kiwi"}}},
            )  # fmt: skip
