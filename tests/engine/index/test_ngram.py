"""NGRAM indices: Quiver's trigram tokens are pylance's on every kind of text, the files it
builds are pylance's (byte for byte from storage version 2.1 on), both engines use either
engine's index for `contains`, `starts_with`, LIKE and literal regular expressions with the
answers of a plain scan (after appends, deletes, `optimize_indices` and with stable row
ids), and an index leaves negated and too-short needles to the scan."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from lance.file import LanceFileReader
from pyroaring import BitMap64

import quiver
from quiver.format.errors import InvalidInputError
from quiver.format.index.scalar import ngram
from quiver.format.index.scalar.ngram import text_tokens

# pieces texts are made of: ASCII words in every case, digits, punctuation, letters that
# fold (accents, ligatures, ß, ¼, ℃, full-width, circled), letters folding to upper case,
# Unicode 16's outlined letters, CJK, emoji, combining marks, and 'VVV' (token 0)
PIECES = [
    "hello", "World", "HELLO", "abcd", "abcxbcd", "q1w2e3", "foo-bar", "x.y", "a b",
    "café", "naïve", "Straße", "ÆON", "œuvre", "ﬁsh", "x¼y", "ab℃", "ᴭbc", "ａｂｃ", "①②③",
    "ǅemal", "İstanbul", "ΣΊΣΥΦΟΣ", "日本語", "😀ok", "e\u0301te", "\U0001ccd6\U0001ccd7z",
    "\ua7f1ss", "VVV", "Ǣx", "ℏbar", "", "ab", "z",
]  # fmt: skip
FILTERS = [
    ("contains(text, 'hello')", True),
    ("contains(text, 'HELLO')", True),
    ("contains(text, 'Straße')", True),
    ("contains(text, 'naïve')", True),
    ("contains(text, 'ahe')", True),  # shares its token with 'abC' (ab℃)
    ("contains(text, 'ive')", True),  # naïve folds to naive: a candidate, not an answer
    ("contains(text, 'zzz')", True),
    ("text LIKE '%abcd%'", True),
    ("text LIKE 'hel%rld'", True),
    ("text LIKE '%hello%wo%'", True),
    ("starts_with(text, 'hello')", True),
    ("regexp_like(text, 'abcd')", True),
    ("regexp_like(text, '^abcd')", True),
    ("contains(text, 'hello') AND id > 100", True),
    ("contains(text, 'hello') OR contains(text, 'café')", True),
    ("NOT contains(text, 'hello')", False),
    ("text NOT LIKE '%abc%'", False),
    ("contains(text, 'ab')", False),  # no trigram
    ("text LIKE '%a_cd%'", False),  # no literal run of three
    ("text ILIKE '%hello%'", False),
    ("regexp_like(text, 'ab.d')", False),
    ("contains(text, 'abc') OR id < 5", False),
]


def _texts(n: int, seed: int = 0) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.03:
            out.append(None)
            continue
        words = [PIECES[i] for i in rng.integers(0, len(PIECES), rng.integers(0, 6))]
        out.append(rng.choice([" ", "", "-"]).join(words))
    return out


def _table(n: int, seed: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "text": _texts(n, seed)})


def _index_dir(path: str, name: str = "text_idx") -> list[str]:
    return [
        f"{path}/_indices/{i['uuid']}"
        for i in lance.dataset(path).list_indices()
        if i["name"] == name
    ]


def _postings(directory: str) -> dict[int, list[int]]:
    table = LanceFileReader(f"{directory}/ngram_postings.lance").read_all().to_table()
    return {
        t: sorted(BitMap64.deserialize(p))
        for t, p in zip(
            table.column("tokens").to_pylist(),
            table.column("posting_list").to_pylist(),
            strict=True,
        )
    }


def test_tokens_are_pylances_on_every_kind_of_text(tmp_path: Path) -> None:
    """Each row's tokens in pylance's own index equal `text_tokens` of its text, and the
    build's vectorised and per-text paths agree."""
    texts = _texts(3000, seed=1) + PIECES + [chr(c) * 3 for c in range(0x80, 0x3000, 7)]
    path = str(tmp_path / "t")
    lance.write_dataset(pa.table({"text": texts}), path, max_rows_per_file=1000)
    lance.dataset(path).create_scalar_index("text", "NGRAM")
    (directory,) = _index_dir(path)
    by_row: dict[int, set[int]] = {}
    for token, rows in _postings(directory).items():
        for r in rows:
            address = (r >> 32) * 1000 + (r & 0xFFFFFFFF)
            by_row.setdefault(address, set()).add(token)
    for i, text in enumerate(texts):
        want = {ngram.NULL_TOKEN} if text is None else text_tokens(text)
        assert by_row.get(i, set()) == want, (i, text)
    ids = np.arange(len(texts), dtype=np.uint64)
    tokens, owners = ngram._chunk_pairs(pa.array(texts, pa.large_string()), ids)
    got: dict[int, set[int]] = {}
    for t, o in zip(tokens.tolist(), owners.tolist(), strict=True):
        got.setdefault(o, set()).add(t)
    assert got == by_row


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_files_are_pylances(tmp_path: Path, version: str) -> None:
    """The same tokens and posting lists as pylance's index of the same rows (the same bytes
    from 2.1 on), the same manifest record, and pylance uses Quiver's index."""
    table = _table(4000)
    ours, theirs = str(tmp_path / "q"), str(tmp_path / "p")
    lance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=1500)
    lance.dataset(theirs).delete("id % 11 = 3")
    shutil.copytree(theirs, ours)
    lance.dataset(theirs).create_scalar_index("text", "NGRAM")
    quiver.dataset(ours).create_scalar_index("text", "NGRAM")
    (mine,), (pylances,) = _index_dir(ours), _index_dir(theirs)
    assert _postings(mine) == _postings(pylances)
    if version != "2.0":
        with open(f"{mine}/ngram_postings.lance", "rb") as a:
            with open(f"{pylances}/ngram_postings.lance", "rb") as b:
                assert a.read() == b.read()
    [entry] = lance.dataset(ours).list_indices()
    [reference] = lance.dataset(theirs).list_indices()
    for key in ("name", "type", "fields", "fragment_ids", "version"):
        assert entry[key] == reference[key], key
    ds = lance.dataset(ours)
    for sql, _ in FILTERS[:8]:
        assert "ScalarIndexQuery" in ds.scanner(filter=sql).explain_plan(), sql
        assert_same_table(ds.to_table(filter=sql).sort_by("id"), table_ref(theirs, sql), sql)


def table_ref(path: str, sql: str) -> pa.Table:
    return lance.dataset(path).to_table(filter=sql).sort_by("id")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A dataset with pylance's NGRAM index, a fragment appended after it and deletions."""
    path = str(tmp_path_factory.mktemp("ngram") / "d")
    lance.write_dataset(_table(6000, seed=2), path, max_rows_per_file=1500)
    lance.dataset(path).create_scalar_index("text", "NGRAM")
    lance.write_dataset(_table(700, seed=3), path, mode="append")
    lance.dataset(path).delete("id % 7 = 0")
    return path


def test_statistics_as_pylance(indexed: str) -> None:
    ours = quiver.dataset(indexed).index_statistics("text_idx")
    theirs = lance.dataset(indexed).stats.index_stats("text_idx")
    assert ours == theirs


@pytest.mark.parametrize(("sql", "served"), FILTERS)
def test_filters_answer_as_a_scan(indexed: str, sql: str, served: bool) -> None:
    """Quiver answers through pylance's index as pylance does, the appended fragment
    scanned whole; served filters narrow the scan, the others read everything."""
    ours = quiver.dataset(indexed)
    scanner = ours.scanner(filter=sql)
    pruning = scanner.index_pruning
    assert (pruning is not None) == served, sql
    if pruning is not None:
        assert 4 not in pruning.covered and pruning.covered == {0, 1, 2, 3}
    got = scanner.to_table().sort_by([("id", "ascending")])
    assert_same_table(got, table_ref(indexed, sql), sql)


def test_few_candidates_are_taken_row_by_row(tmp_path: Path) -> None:
    """A rare needle's candidates are read row by row (not the blocks around them), with
    the scan's answers, deleted rows left out."""
    path = str(tmp_path / "d")
    texts = [f"row {i} plain words" for i in range(20_000)]
    for i in (5, 7_000, 19_999):
        texts[i] = f"row {i} with a rarewordx inside"
    lance.write_dataset(pa.table({"id": range(20_000), "text": texts}), path)
    quiver.dataset(path).create_scalar_index("text", "NGRAM")
    lance.dataset(path).delete("id = 7000")
    ds = quiver.dataset(path)
    scanner = ds.scanner(filter="contains(text, 'rarewordx')", with_row_id=True)
    assert scanner.index_pruning is not None and len(scanner.index_pruning.rows) == 3
    got = scanner.to_table()
    assert got.column("id").to_pylist() == [5, 19_999]
    assert got.column("_rowid").to_pylist() == [5, 19_999]


@pytest.mark.parametrize("stable", [False, True])
def test_optimize_and_segments_as_pylance(tmp_path: Path, stable: bool) -> None:
    """optimize_indices merges the new fragments into the index (a delta segment with
    num_indices_to_merge=0) as pylance does: pylance and Quiver answer through the result
    as a scan; with stable row ids the posting lists hold row ids, found in the fragments'
    row id sequences to narrow the scan."""
    ours, theirs = str(tmp_path / "q"), str(tmp_path / "p")
    kw = {"enable_stable_row_ids": True} if stable else {}
    lance.write_dataset(_table(3000, seed=4), theirs, max_rows_per_file=1000, **kw)
    if stable:  # rows move: their ids no longer equal their addresses
        lance.dataset(theirs).delete("id < 500")
        lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2000)
    shutil.copytree(theirs, ours)
    lance.dataset(theirs).create_scalar_index("text", "NGRAM")
    quiver.dataset(ours).create_scalar_index("text", "NGRAM")
    assert _postings(_index_dir(ours)[0]) == _postings(_index_dir(theirs)[0])
    for path in (ours, theirs):
        lance.write_dataset(_table(800, seed=5), path, mode="append")
    quiver.dataset(ours).optimize.optimize_indices()
    lance.dataset(theirs).optimize.optimize_indices()
    assert _postings(_index_dir(ours)[0]) == _postings(_index_dir(theirs)[0])
    for path in (ours, theirs):
        lance.write_dataset(_table(300, seed=6), path, mode="append")
    quiver.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    segments = sorted(len(i["fragment_ids"]) for i in lance.dataset(ours).list_indices())
    assert segments == sorted(len(i["fragment_ids"]) for i in lance.dataset(theirs).list_indices())
    assert len(segments) == 2
    for sql, served in FILTERS:
        want = table_ref(theirs, sql)
        assert_same_table(table_ref(ours, sql), want, sql)
        q = quiver.dataset(ours).scanner(filter=sql)
        if served:  # both segments narrow the scan (row ids found in the fragments)
            assert q.index_pruning is not None and len(q.index_pruning.covered) == len(
                lance.dataset(ours).get_fragments()
            )
        assert_same_table(q.to_table().sort_by("id"), want, sql)


def test_compaction_remaps_as_pylance(tmp_path: Path) -> None:
    """Compaction writes the index again with the new row addresses, as pylance's does (the
    same tokens and rows, a token whose rows were all deleted kept with none); both engines
    answer through it, over the new fragments, as a scan."""
    ours, theirs = str(tmp_path / "q"), str(tmp_path / "p")
    table = _table(4000, seed=7)
    texts = table.column("text").to_pylist()
    texts[700] = texts[701] = "qjjq"  # trigrams of deleted rows only
    table = table.set_column(1, "text", pa.array(texts))
    lance.write_dataset(table, theirs, max_rows_per_file=500)
    lance.dataset(theirs).create_scalar_index("text", "NGRAM")
    lance.dataset(theirs).delete("id % 5 = 1 OR id BETWEEN 600 AND 900 OR text = 'z'")
    shutil.copytree(theirs, ours)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=1500)
    quiver.dataset(ours).optimize.compact_files(target_rows_per_fragment=1500)
    (mine,), (pylances,) = _index_dir(ours), _index_dir(theirs)
    postings = _postings(mine)
    assert postings == _postings(pylances)
    assert postings[ngram._token("qjj")] == []
    [entry] = lance.dataset(ours).list_indices()
    [reference] = lance.dataset(theirs).list_indices()
    assert entry["fragment_ids"] == reference["fragment_ids"]
    ds = lance.dataset(ours)
    for sql, served in FILTERS:
        want = table_ref(theirs, sql)
        assert_same_table(ds.to_table(filter=sql).sort_by("id"), want, sql)
        q = quiver.dataset(ours).scanner(filter=sql)
        assert (q.index_pruning is not None) == served, sql
        assert_same_table(q.to_table().sort_by("id"), want, sql)
        if served:
            assert "ScalarIndexQuery" in ds.scanner(filter=sql).explain_plan(), sql


def test_refusals_and_options_as_pylance(tmp_path: Path) -> None:
    """An NGRAM index needs a text column; options are ignored, as pylance ignores them."""
    path = str(tmp_path / "d")
    lance.write_dataset(
        pa.table(
            {"n": [1, 2], "text": ["abc", "bcd"], "v": pa.array(["xyz", "yzw"], pa.large_string())}
        ),
        path,
    )
    ds = quiver.dataset(path)
    with pytest.raises(InvalidInputError, match="NGRAM index needs a text column: 'n'"):
        ds.create_scalar_index("n", "NGRAM")
    with pytest.raises(TypeError, match="must be a string"):
        lance.dataset(path).create_scalar_index("n", "NGRAM")
    ds.create_scalar_index("text", "ngram", ngram_length=5)
    ds = quiver.dataset(path)
    ds.create_scalar_index("v", "NGRAM", name="v_grams")
    names = sorted(i["name"] for i in lance.dataset(path).list_indices())
    assert names == ["text_idx", "v_grams"]
    for sql in ("contains(text, 'bcd')", "contains(v, 'yzw')"):
        assert "ScalarIndexQuery" in lance.dataset(path).scanner(filter=sql).explain_plan()
        assert quiver.dataset(path).to_table(filter=sql).num_rows == 1
