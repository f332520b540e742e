"""Searches from SQL over Flight SQL (ADBC's driver against a real `quiver serve`):
`search`, `vector_search` and `hybrid_search` answer as pylance's `to_table(full_text_query=
...)` and nearest search (and the engine's hybrid fusion) answer on the same dataset, as
tables SQL filters, groups and joins; parameters, time travel, rights and refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_manager
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fulltext_corpus import assert_same_answers, search, text_table
from lance.query import FullTextOperator, MatchQuery
from server_process import quiver_serve
from sql_helpers import connect, fetch

from quiver.flight_server.auth import hash_password
from quiver.format.dataset import dataset, write_dataset

pytestmark = pytest.mark.compat

DIM = 4


def _with_vectors(table: pa.Table, seed: int) -> pa.Table:
    vectors = np.random.default_rng(seed).standard_normal((table.num_rows, DIM), np.float32)
    return table.append_column(
        "vec", pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM)
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """docs: an INVERTED index pylance built, then rows it does not cover and deletes;
    mine: the same rows with the index Quiver built; labels: a small table to join."""
    root = tmp_path_factory.mktemp("sqlsearch")
    uri = str(root / "docs.lance")
    ds = lance.write_dataset(_with_vectors(text_table(800, 21), 1), uri, max_rows_per_file=300)
    ds.create_scalar_index("text", "INVERTED")
    lance.write_dataset(_with_vectors(text_table(120, 22, start=800), 2), uri, mode="append")
    lance.dataset(uri).delete("id % 11 = 3")
    write_dataset(_with_vectors(text_table(800, 21), 1), str(root / "mine.lance"))
    dataset(str(root / "mine.lance")).create_scalar_index("text", "INVERTED", with_position=True)
    labels = pa.table({"cat": ["c0", "c1", "c2"], "label": ["zero", "one", "two"]})
    lance.write_dataset(labels, str(root / "labels.lance"))
    users = {
        "reader": {"password": hash_password("reader-Pa55!"), "read": ["*"]},
        "labelsonly": {"password": hash_password("labels-Pa55!"), "read": ["labels"]},
    }
    auth = root.parent / f"{root.name}-auth.json"
    auth.write_text(json.dumps({"users": users}))
    with quiver_serve(root, "--auth-file", str(auth)) as (address, _pid):
        yield address, root


def _login(address: str, user: str = "reader"):  # noqa: ANN202 - an ADBC connection
    password = {"reader": "reader-Pa55!", "labelsonly": "labels-Pa55!"}[user]
    return connect(address, db_kwargs={"username": user, "password": password})


def _keyed(table: pa.Table) -> pa.Table:
    """`id` and `_score` as `assert_same_answers` compares them (`id` is unique here)."""
    return pa.table({"_score": table["_score"], "_rowid": table["id"]}).select(["_rowid", "_score"])


def _theirs(root: Path, name: str, **kw: object) -> pa.Table:
    table = search(lance.dataset(str(root / f"{name}.lance")), **kw)
    return pa.table({"_rowid": table["id"], "_score": table["_score"]})


CASES = [
    ("'apple fox'", {"full_text_query": "apple fox"}),
    ("'running dogs', 7", {"full_text_query": "running dogs", "limit": 7}),
    ("'apple', 5, 'title'", {"full_text_query": {"query": "apple", "columns": ["title"]},
                             "limit": 5}),
    ("'blue river', 20, 'text'", {"full_text_query": {"query": "blue river", "columns": ["text"]},
                                  "limit": 20}),
    ("'café', 10, NULL, 'cat = ''c1'''", {"full_text_query": "café", "filter": "cat = 'c1'",
                                          "prefilter": True}),
    ("'{\"match\": {\"terms\": \"quick fox\", \"column\": \"text\", \"operator\": \"And\"}}', 15",
     {"full_text_query": MatchQuery("quick fox", "text", operator=FullTextOperator.AND),
      "limit": 15}),
]  # fmt: skip


@pytest.mark.parametrize(("name"), ["docs", "mine"])
@pytest.mark.parametrize(("arguments", "options"), CASES)
def test_search_answers_as_pylance(
    served: tuple[str, Path], name: str, arguments: str, options: dict
) -> None:
    address, root = served
    with _login(address) as conn:
        ours = fetch(conn, f"SELECT * FROM search('{name}', {arguments})")
    want = lance.dataset(str(root / f"{name}.lance")).schema
    assert ours.schema.names == [*want.names, "_score"]
    assert [f.type for f in ours.schema][:-1] == [f.type for f in want]
    assert ours.schema.field("_score").type == pa.float32()
    if "limit" not in options:
        options = {**options, "limit": 10}
    assert_same_answers(_theirs(root, name, **options), _keyed(ours), f"{name}: {arguments}")


def test_search_rows_are_whole(served: tuple[str, Path]) -> None:
    """Every column of a found row is the row's (compared with the dataset by id)."""
    address, root = served
    with _login(address) as conn:
        ours = fetch(conn, "SELECT * FROM search('docs', 'apple banana', 30)")
    rows = lance.dataset(str(root / "docs.lance")).to_table(
        filter=f"id IN {tuple(ours['id'].to_pylist())}"
    )
    by_id = {r["id"]: r for r in rows.to_pylist()}
    for row in ours.to_pylist():
        score = row.pop("_score")
        assert score > 0
        assert row == by_id[row["id"]]


def test_searches_are_tables_sql_works_on(served: tuple[str, Path]) -> None:
    address, root = served
    # every match (a limit would cut a tie of scores, whose rows each engine picks apart)
    found = _theirs(root, "docs", full_text_query="apple", limit=5000)
    assert 60 < found.num_rows < 5000
    ids = found["_rowid"].to_pylist()
    cats = lance.dataset(str(root / "docs.lance")).to_table(columns=["id", "cat"])
    cat_of = dict(zip(cats["id"].to_pylist(), cats["cat"].to_pylist(), strict=True))
    counts: dict[str, int] = {}
    for i in ids:
        counts[cat_of[i]] = counts.get(cat_of[i], 0) + 1
    labels = {"c0": "zero", "c1": "one", "c2": "two"}
    with _login(address) as conn:
        grouped = fetch(
            conn,
            "SELECT cat, count(*) AS n FROM search('docs', 'apple', 5000) "
            "GROUP BY cat ORDER BY cat",
        )
        assert grouped.to_pylist() == [{"cat": c, "n": counts[c]} for c in sorted(counts)]
        joined = fetch(
            conn,
            "SELECT l.label, count(*) AS n FROM search('docs', 'apple', 5000) s "
            "JOIN labels l ON s.cat = l.cat GROUP BY l.label ORDER BY l.label",
        )
        want = sorted((labels[c], n) for c, n in counts.items() if c in labels)
        assert [(r["label"], r["n"]) for r in joined.to_pylist()] == want
        top = fetch(
            conn,
            "SELECT id FROM search('docs', 'apple', 5000) WHERE cat <> 'c3' "
            "ORDER BY _score DESC, id LIMIT 5",
        )
        assert len(top) == 5
        assert all(cat_of[i] != "c3" for i in top["id"].to_pylist())
        assert set(top["id"].to_pylist()) <= set(ids)


def test_parameters_and_time_travel(served: tuple[str, Path]) -> None:
    address, root = served
    with _login(address) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT id, _score FROM search('docs', $1, $2)", ("running fox", 6))
            ours = cur.fetch_arrow_table()
            cur.execute("SELECT id, _score FROM search('docs', $1, $2)", ("apple", 4))
            again = cur.fetch_arrow_table()
        first = fetch(conn, "SELECT id, _score FROM search('docs@v2', 'apple fox', 10)")
    assert_same_answers(
        _theirs(root, "docs", full_text_query="running fox", limit=6), _keyed(ours), "param"
    )
    assert_same_answers(
        _theirs(root, "docs", full_text_query="apple", limit=4), _keyed(again), "param 2"
    )
    # version 2: the index built, before the append and the deletes
    v2 = search(
        lance.dataset(str(root / "docs.lance"), version=2), full_text_query="apple fox", limit=10
    )
    assert_same_answers(
        pa.table({"_rowid": v2["id"], "_score": v2["_score"]}), _keyed(first), "docs@v2"
    )
    assert v2.num_rows == 10


def test_vector_search_answers_as_pylance(served: tuple[str, Path]) -> None:
    address, root = served
    q = [0.3, -0.2, 1.1, 0.05]
    with _login(address) as conn:
        ours = fetch(conn, f"SELECT id, _distance FROM vector_search('docs', 'vec', {q}, 7)")
        filtered = fetch(
            conn,
            f"SELECT id, _distance FROM vector_search('docs', 'vec', {q}, 5, 'cat = ''c2''')",
        )
    ds = lance.dataset(str(root / "docs.lance"))
    want = ds.to_table(columns=["id"], nearest={"column": "vec", "q": q, "k": 7})
    assert ours["id"].to_pylist() == want["id"].to_pylist()
    np.testing.assert_allclose(ours["_distance"], want["_distance"], rtol=1e-5)
    want = ds.to_table(
        columns=["id"], nearest={"column": "vec", "q": q, "k": 5}, filter="cat = 'c2'",
        prefilter=True,
    )  # fmt: skip
    assert filtered["id"].to_pylist() == want["id"].to_pylist()


def test_hybrid_search_answers_as_the_engine(served: tuple[str, Path]) -> None:
    """The fusion itself is checked against LanceDB's in the engine's tests."""
    address, root = served
    q = [0.3, -0.2, 1.1, 0.05]
    with _login(address) as conn:
        ours = fetch(
            conn,
            f"SELECT id, _relevance_score FROM hybrid_search('docs', 'apple fox', 'vec', {q}, 8)",
        )
    want = dataset(str(root / "docs.lance")).to_table(
        columns=["id"], nearest={"column": "vec", "q": q}, full_text_query="apple fox", limit=8
    )
    assert ours.equals(want)


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ("search('nowhere', 'apple')", "NOT_FOUND", "dataset 'nowhere' does not exist"),
        ("search('docs')", "INVALID_ARGUMENT", r"takes 2 to 5 arguments, not 1"),
        ("search('docs', 'apple', 0)", "INVALID_ARGUMENT", "limit.*positive integer"),
        ("vector_search('docs', 'vec', [1, 2, 3, 4], 100001)", "INVALID_ARGUMENT",
         "at most 100,000"),
        ("search('docs', 'apple', 'ten')", "INVALID_ARGUMENT", "limit.*positive integer"),
        ("search('docs', NULL)", "INVALID_ARGUMENT", r"argument 2 \(query\) is NULL"),
        ("search('docs', 'apple', 5, 'nope')", "INVALID_ARGUMENT", "nope"),
        ("search('docs', '{\"match\": {\"terms\": \"a\"}}', 5, 'text')", "INVALID_ARGUMENT",
         "names its columns itself"),
        ("search('docs', 'apple', 5, NULL, 'nope > 1')", "INVALID_ARGUMENT", "nope"),
        ("search('docs@v9', 'apple')", "NOT_FOUND", "no version or tag 'v9'"),
        ("search($1, 'apple')", "INVALID_ARGUMENT", "cannot be a parameter"),
        ("vector_search('docs', 'vec', [1, 2], 3)", "INVALID_ARGUMENT", "dimension|2"),
        ("vector_search('docs', 'text', [1, 2, 3, 4])", "INVALID_ARGUMENT", "text"),
        ("vector_search('docs', 'vec', ['a'])", "INVALID_ARGUMENT", "array of numbers"),
        ("search('docs', '{\"phrase\": {\"terms\": \"quick fox\", \"column\": \"text\"}}')",
         "INVALID_ARGUMENT", "position"),
    ],
)  # fmt: skip
def test_refusals(served: tuple[str, Path], query: str, code: str, message: str) -> None:
    address, _ = served
    with _login(address) as conn:
        with pytest.raises(adbc_driver_manager.Error, match=f"{code}.*{message}"):
            fetch(conn, f"SELECT * FROM {query}")


def test_a_column_reference_is_refused(served: tuple[str, Path]) -> None:
    address, _ = served
    with _login(address) as conn:
        with pytest.raises(adbc_driver_manager.Error, match="must be a constant"):
            fetch(conn, "SELECT * FROM labels l, search('docs', l.label)")


def test_rights_apply_to_searches(served: tuple[str, Path]) -> None:
    address, _ = served
    with _login(address, "labelsonly") as conn:
        assert fetch(conn, "SELECT count(*) AS n FROM labels").to_pylist() == [{"n": 3}]
        for query in (
            "SELECT * FROM search('docs', 'apple')",
            "SELECT * FROM vector_search('docs', 'vec', [1, 2, 3, 4])",
            "SELECT * FROM labels JOIN search('mine', 'apple') s ON labels.cat = s.cat",
        ):
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHORIZED|denied"):
                fetch(conn, query)


def test_prepared_search_schema(served: tuple[str, Path]) -> None:
    """A statement's schema, asked before its parameters are bound, is its answer's."""
    address, _ = served
    query = "SELECT * FROM search('docs', $1, 3)"
    with _login(address) as conn, conn.cursor() as cur:
        schema = cur.adbc_execute_schema(query)
        cur.execute(query, ("apple",))
        answer = cur.fetch_arrow_table()
    assert answer.num_rows == 3
    assert pc.all(pc.greater(answer["_score"], 0)).as_py()
    assert schema.equals(answer.schema)


def test_contains_tokens_in_flight_sql(served: tuple[str, Path]) -> None:
    """pylance's `contains_tokens` filter function: the rows pylance's filter keeps."""
    address, root = served
    with _login(address) as conn:
        ours = fetch(
            conn, "SELECT id FROM docs WHERE contains_tokens(text, 'apple fox') ORDER BY id"
        )
    want = lance.dataset(str(root / "docs.lance")).to_table(
        columns=["id"], filter="contains_tokens(text, 'apple fox')"
    )
    assert ours["id"].to_pylist() == sorted(want["id"].to_pylist())
    assert 0 < ours.num_rows < 500


def test_a_branch_whose_name_holds_a_slash(served: tuple[str, Path]) -> None:
    """`docs#feat/x` is branch `feat/x` of `docs` (the folders are split off before it)."""
    address, root = served
    branch = dataset(str(root / "mine.lance")).create_branch("feat/x")
    branch.delete("id % 2 = 0")
    with _login(address) as conn:
        on_branch = fetch(conn, "SELECT id, _score FROM search('mine#feat/x', 'apple', 40)")
    want = branch.to_table(full_text_query="apple", limit=40, columns=["id"])
    assert_same_answers(
        pa.table({"_rowid": want["id"], "_score": want["_score"]}), _keyed(on_branch), "branch"
    )
    assert on_branch.num_rows == 40 and all(i % 2 for i in on_branch["id"].to_pylist())
