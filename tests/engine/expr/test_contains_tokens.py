"""pylance's `contains_tokens(text, 'words')`, compared with pylance: in filters (alone, negated,
combined, over an INVERTED-indexed column), as a projection, in `LanceDataset.sql`, and over
random texts and queries."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table
from fulltext_corpus import docs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver.format.dataset import dataset
from quiver.format.errors import FilterBindError

pytestmark = pytest.mark.compat

EDGES = [
    "Quick brown fox",
    "lazy_dog",
    "quick-dog running",
    "naïve café",
    "x² y",
    "ab12 cd",
    "",
    None,
    "дом кот",
    "東京 タワー",
    "nai\u0308ve",
    "ΣΊΣΥΦΟΣ σίσυφος",
    "สวัสดี ครับ",
    "हिन्दी भाषा",
    "كَتَبَ الولد",
    "Ⓐbc def",
]


def _table() -> pa.Table:
    texts = EDGES + docs(400, 5)
    return pa.table(
        {
            "id": pa.array(range(len(texts)), pa.int64()),
            "text": texts,
            "n": pa.array([i % 13 for i in range(len(texts))], pa.int32()),
        }
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("tokens") / "ds")
    lance.write_dataset(_table(), path)
    return path


FILTERS = [
    "contains_tokens(text, 'dog')",
    "contains_tokens(text, 'lazy')",
    "contains_tokens(text, 'lazy_dog')",
    "contains_tokens(text, 'dog quick')",
    "contains_tokens(text, 'quick,dog!!')",
    "contains_tokens(text, 'Quick')",
    "contains_tokens(text, 'café')",
    "contains_tokens(text, 'x²')",
    "contains_tokens(text, '²')",
    "contains_tokens(text, 'кот')",
    "contains_tokens(text, 'タワー')",
    "contains_tokens(text, 'nai')",
    "contains_tokens(text, 'σίσυφος')",
    "contains_tokens(text, 'สวัสดี')",
    "contains_tokens(text, 'สว')",
    "contains_tokens(text, 'हिन')",
    "contains_tokens(text, 'हि')",
    "contains_tokens(text, 'كَتَبَ')",
    "contains_tokens(text, 'ك')",
    "contains_tokens(text, 'Ⓐbc')",
    "contains_tokens(text, 'bc')",
    "contains_tokens(text, '')",
    "contains_tokens(text, ' - ')",
    "contains_tokens(text, NULL)",
    "contains_tokens(NULL, 'a')",
    "contains_tokens(text, 'apple banana')",
    "contains_tokens(text, 'apple apple')",
    "contains_tokens(text, 'the') AND n > 5",
    "NOT contains_tokens(text, 'the')",
    "contains_tokens(text, 'river') OR contains_tokens(text, 'mountains')",
    "contains_tokens(n, '7')",
    "contains_tokens('a b c', 'c')",
    "contains_tokens(text, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')",
]


@pytest.mark.parametrize("sql", FILTERS)
def test_filter_matches_pylance(uri: str, sql: str) -> None:
    expected = lance.dataset(uri).to_table(filter=sql)
    assert_same_table(dataset(uri).to_table(filter=sql), expected, sql)


def test_counts_are_not_trivial(uri: str) -> None:
    """The filters above keep some rows and drop others (each assertion can fail)."""
    ds = lance.dataset(uri)
    kept = [ds.count_rows(filter=sql) for sql in FILTERS]
    assert sum(0 < k < ds.count_rows() for k in kept) >= 15


@pytest.mark.parametrize("sql", ["contains_tokens(text, 'the fox')", "contains_tokens(text, '')"])
def test_projection_matches_pylance(uri: str, sql: str) -> None:
    expected = lance.dataset(uri).to_table(columns={"id": "id", "c": sql})
    assert_same_table(dataset(uri).to_table(columns={"id": "id", "c": sql}), expected, sql)


def test_over_an_indexed_column(tmp_path: Path) -> None:
    """An INVERTED index (lower-cased, stemmed tokens) does not change what matches."""
    path = str(tmp_path / "indexed")
    lance.write_dataset(_table(), path)
    lance.dataset(path).create_scalar_index("text", "INVERTED")
    for sql in ("contains_tokens(text, 'Quick')", "contains_tokens(text, 'running dogs')"):
        expected = lance.dataset(path).to_table(filter=sql)
        assert_same_table(dataset(path).to_table(filter=sql), expected, sql)


def test_in_sql(uri: str) -> None:
    for query in (
        "SELECT id FROM dataset WHERE contains_tokens(text, 'apple fox') ORDER BY id",
        "SELECT id, contains_tokens(text, 'the') AS c FROM dataset ORDER BY id",
        "SELECT count(*) AS k FROM dataset WHERE NOT contains_tokens(text, 'river')",
    ):
        theirs = pa.Table.from_batches(lance.dataset(uri).sql(query).build().to_batch_records())
        ours = pa.Table.from_batches(dataset(uri).sql(query).build().to_batch_records())
        assert ours.to_pylist() == theirs.to_pylist(), query
        assert ours.num_rows > 0


def test_refused(uri: str) -> None:
    for sql in (
        "contains_tokens(text)",
        "contains_tokens(text, 'a', 'b')",
        "contains_tokens(text, text)",  # pylance reads a batch's first text as the query
        "contains_tokens(text, 3)",
    ):
        with pytest.raises(FilterBindError, match="contains_tokens"):
            dataset(uri).to_table(filter=sql)


_PIECES = st.sampled_from(
    ["a", "b", "ab", "Ab", "é", "e\u0301", "1", "²", "_", "-", " ", ",", "ß", "ж", "東", "\t"]
    + ["ส", "ั", "ि", "्", "\u064e", "Ⓐ"]  # Thai and Devanagari marks, a virama, a fatha
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    texts=st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=20),
    query=st.lists(_PIECES, max_size=5).map("".join),
)
def test_random_texts_match_pylance(tmp_path_factory, texts: list[str], query: str) -> None:
    path = str(tmp_path_factory.mktemp("random") / "ds")
    lance.write_dataset(pa.table({"text": texts}), path)
    sql = f"contains_tokens(text, '{query}')"
    expected = lance.dataset(path).to_table(filter=sql)
    assert_same_table(dataset(path).to_table(filter=sql), expected, sql)
