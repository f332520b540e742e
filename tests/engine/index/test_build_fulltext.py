"""INVERTED indices built by Quiver: pylance lists them and searches them with the same
answers as its own index of the same data (and Quiver does too), with each tokenizer
option; deltas after appends (`optimize_indices`), replacing, refusals; over Flight's
`create_index` action and the namespace's CreateTableIndex."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from fulltext_corpus import QUERIES, assert_same_answers, search, text_table

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

pytestmark = pytest.mark.compat


def _pair(tmp_path: Path, table: pa.Table, **options: Any) -> tuple[str, str]:
    """The same data twice: indexed by Quiver, and by pylance."""
    ours, theirs = str(tmp_path / "quiver"), str(tmp_path / "pylance")
    lance.write_dataset(table, ours, max_rows_per_file=500)
    lance.write_dataset(table, theirs, max_rows_per_file=500)
    dataset(ours).create_scalar_index("text", "INVERTED", **options)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", **options)
    return ours, theirs


def _same_everywhere(ours: str, theirs: str, what: str, options=({}, {"limit": 6})) -> None:
    reference = lance.dataset(theirs)
    for query in QUERIES:
        for extra in options:
            want = search(reference, full_text_query=query, **extra)
            label = f"{what} {query!r} {extra}"
            assert_same_answers(
                want,
                search(lance.dataset(ours), full_text_query=query, **extra),
                f"pylance: {label}",
            )
            assert_same_answers(
                want, search(dataset(ours), full_text_query=query, **extra), f"quiver: {label}"
            )


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"remove_stop_words": False, "stem": False, "ascii_folding": False},
        {"base_tokenizer": "whitespace", "lower_case": False},
        {"base_tokenizer": "raw"},
        {"max_token_length": 6},
        {"with_position": True},
        {"format_version": 3, "with_position": True},
        {"format_version": "v2", "block_size": 128},
        {"base_tokenizer": "ngram"},
        {
            "base_tokenizer": "ngram",
            "min_ngram_length": 1,
            "max_ngram_length": 4,
            "lower_case": False,
            "with_position": True,
        },
        {
            "base_tokenizer": "ngram",
            "min_ngram_length": 2,
            "max_ngram_length": 5,
            "prefix_only": True,
        },
    ],
    ids=[
        "default",
        "plain",
        "whitespace",
        "raw",
        "short",
        "positions",
        "format-3",
        "format-v2",
        "ngram",
        "ngram-1-4",
        "ngram-prefix",
    ],  # fmt: skip
)
def test_pylance_searches_quiver_indices_as_its_own(tmp_path: Path, options: dict) -> None:
    ours, theirs = _pair(tmp_path, text_table(1500, 41), **options)
    [entry] = lance.dataset(ours).list_indices()
    assert entry["type"] == "Inverted" and entry["fields"] == ["text"]
    stats = lance.dataset(ours).stats.index_stats("text_idx")
    assert stats["num_unindexed_rows"] == 0
    # the format version pylance records, in the manifest and the index's files
    assert _format_of(ours) == _format_of(theirs)
    _same_everywhere(ours, theirs, str(options))


@pytest.mark.parametrize("tokenizer", ["simple", "ngram"])
def test_a_memory_limit_builds_partitions_within_it(tmp_path: Path, tokenizer: str) -> None:
    """`memory_limit` (MiB) bounds the occurrences one partition is built from: a small
    one builds several partitions, each written before the next is analysed, which both
    engines search with the statistics of all (the same answers as pylance's one)."""
    from quiver.format.index.fts import build

    options = {"base_tokenizer": tokenizer, "with_position": True}
    ours, theirs = _pair(tmp_path, text_table(1500, 43), **options)
    [directory] = (Path(ours) / "_indices").iterdir()
    assert len(list(directory.glob("part_*_docs.lance"))) == 1
    dataset(ours).create_scalar_index("text", "INVERTED", replace=True, memory_limit=1, **options)
    directory = Path(ours) / "_indices" / dataset(ours).list_indices()[0]["uuid"]
    budget = build.occurrence_budget({"memory_limit": 1})
    parts = sorted(directory.glob("part_*_docs.lance"))
    assert len(parts) > 1, budget
    assert b"memory_limit" not in (directory / "metadata.lance").read_bytes()
    _same_everywhere(ours, theirs, f"{tokenizer} in {len(parts)} partitions")
    with pytest.raises(InvalidInputError, match="memory_limit"):
        dataset(ours).create_scalar_index("text", "INVERTED", replace=True, memory_limit=0)


@pytest.mark.parametrize("options", [{}, {"with_position": True}, {"format_version": 3}])
def test_postings_encoded_in_many_groups_are_one_encoding(
    tmp_path: Path, options: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token groups of a few postings, encoded two at a time, make the files one group
    makes, byte for byte; pylance answers from them as from its own index."""
    from quiver.format.index.fts import build

    ours, theirs = _pair(tmp_path, text_table(1500, 47), **options)
    monkeypatch.setattr(build, "_ENCODED_POSTINGS", 64)
    grouped = str(tmp_path / "grouped")
    shutil.copytree(ours, grouped)
    dataset(grouped).create_scalar_index("text", "INVERTED", replace=True, **options)
    _same_everywhere(grouped, theirs, f"groups of 32 postings {options}")

    def files(path: str) -> dict[str, bytes]:
        [index] = dataset(path).list_indices()
        directory = Path(path) / "_indices" / index["uuid"]
        return {f.name: f.read_bytes() for f in directory.glob("part_*")}

    assert files(grouped) == files(ours)


def _format_of(path: str) -> tuple[int, str, bytes]:
    """An INVERTED index's manifest version, its metadata file's format_version and its
    details' last field (the posting format)."""
    from quiver.format.index.files import IndexFile
    from quiver.format.table.indices import indices_of

    ds = dataset(path)
    [entry] = indices_of(ds._core.manifest)
    with IndexFile(ds._core.store, f"_indices/{entry.uuid}/metadata.lance") as meta:
        version = meta.metadata["format_version"].decode()
    return entry.pb.index_version, version, entry.pb.index_details.value[-2:]


def test_format_3_indices_of_either_engine_stay_format_3(tmp_path: Path) -> None:
    """A format 3 index (128-document blocks) after appends, each engine's
    optimize_indices and compaction: still format 3, and answered alike."""
    ours, theirs = _pair(tmp_path, text_table(900, 46), format_version=3)
    for path in (ours, theirs):
        lance.write_dataset(text_table(200, 47, start=900), path, mode="append")
    dataset(ours).optimize.optimize_indices()
    lance.dataset(theirs).optimize.optimize_indices()
    # pylance's delta records format 2 in its details, format 3 in the manifest and files
    assert _format_of(ours) == _format_of(theirs) == (3, "3", b"x\x02")
    _same_everywhere(ours, theirs, "optimized")
    for path in (ours, theirs):
        lance.write_dataset(text_table(100, 48, start=1100), path, mode="append")
    lance.dataset(ours).optimize.optimize_indices()  # pylance's delta on Quiver's index
    dataset(theirs).optimize.optimize_indices()  # and the reverse
    dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=10_000)
    assert _format_of(ours)[:2] == (3, "3")
    _same_everywhere(ours, theirs, "compacted")


def test_the_environment_s_format_version_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANCE_FTS_FORMAT_VERSION", "3")  # pylance's variable
    ours, theirs = _pair(tmp_path, text_table(300, 50))
    assert _format_of(ours) == _format_of(theirs) == (3, "3", b"x\x03")


def test_appends_deletes_and_optimize(tmp_path: Path) -> None:
    ours, theirs = _pair(tmp_path, text_table(900, 42))
    for path in (ours, theirs):
        lance.write_dataset(text_table(200, 43, start=900), path, mode="append")
        lance.dataset(path).delete("id % 6 = 2")
    _same_everywhere(ours, theirs, "appended", ({}, {"limit": 4}, {"fast_search": True}))
    dataset(ours).optimize.optimize_indices()  # Quiver's delta segment over the new rows
    lance.dataset(theirs).optimize.optimize_indices()
    assert lance.dataset(ours).stats.index_stats("text_idx")["num_unindexed_rows"] == 0
    _same_everywhere(ours, theirs, "optimized")


@pytest.mark.parametrize(
    ("built_by", "options"),
    [("pylance", {}), ("pylance", {"with_position": True}), ("quiver", {})],
    ids=["pylance-index", "pylance-positions", "quiver-index"],
)
def test_compaction_remaps_as_pylance(tmp_path: Path, built_by: str, options: dict) -> None:
    """Quiver's compaction writes the index again over the rows it still holds (two
    partitions, deletions inside and outside the rewritten fragments), as pylance's own
    compaction of the same data does: the same coverage, documents and statistics, and
    every query answered alike by both engines."""
    ours, theirs = str(tmp_path / "quiver"), str(tmp_path / "pylance")
    lance.write_dataset(text_table(1800, 44), theirs, max_rows_per_file=300)
    if built_by == "pylance":
        lance.dataset(theirs).create_scalar_index("text", "INVERTED", **options)
    else:
        dataset(theirs).create_scalar_index("text", "INVERTED", **options)
    lance.write_dataset(text_table(400, 45, start=1800), theirs, mode="append")
    lance.dataset(theirs).optimize.optimize_indices()  # a second partition
    lance.dataset(theirs).delete("id % 9 = 4 OR id BETWEEN 200 AND 520")
    shutil.copytree(theirs, ours)
    # the first fragments are rewritten; the last ones keep their deleted rows
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=900)
    dataset(ours).optimize.compact_files(target_rows_per_fragment=900)
    [mine], [reference] = lance.dataset(ours).list_indices(), lance.dataset(theirs).list_indices()
    assert mine["fragment_ids"] == reference["fragment_ids"]
    for key in ("num_indexed_rows", "num_unindexed_rows"):
        want = lance.dataset(theirs).stats.index_stats("text_idx")[key]
        assert lance.dataset(ours).stats.index_stats("text_idx")[key] == want, key
    _same_everywhere(ours, theirs, f"compacted {built_by}", ({}, {"limit": 5}))
    for phrase in ('"quick brown"', '"the lazy dog"', '"apple running"') if options else ():
        want = search(lance.dataset(theirs), full_text_query=phrase)
        assert_same_answers(want, search(lance.dataset(ours), full_text_query=phrase), phrase)
        assert_same_answers(want, search(dataset(ours), full_text_query=phrase), phrase)


def test_compaction_leaves_format_1_indices_covering_the_rest(tmp_path: Path) -> None:
    """A format 1 index (which Quiver does not write) is not remapped: compaction succeeds,
    the index covers none of the new fragments, and both engines answer by searching the
    rewritten rows unindexed."""
    path = str(tmp_path / "v1")
    lance.write_dataset(text_table(1200, 46), path, max_rows_per_file=300)
    lance.write_dataset(text_table(600, 47, start=1200), path, mode="append")
    lance.dataset(path).create_scalar_index("text", "INVERTED", format_version=1)
    lance.dataset(path).delete("id < 250")
    dataset(path).optimize.compact_files(target_rows_per_fragment=600)
    [entry] = lance.dataset(path).list_indices()
    fragments = {f.fragment_id for f in lance.dataset(path).get_fragments()}
    assert entry["fragment_ids"] & fragments == {4}  # the appended file, left alone
    for query in QUERIES:
        want = search(lance.dataset(path), full_text_query=query)
        assert_same_answers(want, search(dataset(path), full_text_query=query), query)


def test_replace_and_refusals(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(text_table(100, 44), path)
    ours = dataset(path)
    ours.create_scalar_index("text", "FTS")
    ours.create_scalar_index("text", "INVERTED", stem=False)  # replaces text_idx
    assert [i["name"] for i in lance.dataset(path).list_indices()] == ["text_idx"]
    with pytest.raises(InvalidInputError, match="unknown INVERTED index option"):
        ours.create_scalar_index("text", "INVERTED", stemming=True)
    with pytest.raises(InvalidInputError, match="text column"):
        ours.create_scalar_index("id", "INVERTED")
    with pytest.raises(UnsupportedFeatureError, match="tokenizer"):
        ours.create_scalar_index("text", "INVERTED", base_tokenizer="jieba/default")
    with pytest.raises(InvalidInputError, match="unknown BTREE index option"):
        ours.create_scalar_index("id", "BTREE", stem=False)
    with pytest.raises(InvalidInputError, match="incompatible with block_size=256"):
        ours.create_scalar_index("text", "INVERTED", format_version=2, block_size=256)
    with pytest.raises(InvalidInputError, match="format_version must be 1, 2 or 3"):
        ours.create_scalar_index("text", "INVERTED", format_version="v9")
    with pytest.raises(InvalidInputError, match="block_size must be 128 or 256"):
        ours.create_scalar_index("text", "INVERTED", block_size=64)
    from lance.query import DocumentGranularity

    ours.create_scalar_index("text", "INVERTED", document_granularity=DocumentGranularity.ROW)
    with pytest.raises(InvalidInputError, match="list of strings, not string"):
        ours.create_scalar_index(
            "text", "INVERTED", document_granularity=DocumentGranularity.LIST_ELEMENT
        )
    with pytest.raises(InvalidInputError, match="document_granularity must be"):
        ours.create_scalar_index("text", "INVERTED", document_granularity="page")
    with pytest.raises(UnsupportedFeatureError, match="not format 1"):
        ours.create_scalar_index("text", "INVERTED", format_version=1)


def test_flight_and_namespace_build(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flight"))
    from namespace_helpers import call, namespace_server

    from quiver.clients import Client

    root = tmp_path / "root"
    root.mkdir()
    lance.write_dataset(text_table(400, 45), str(root / "a.lance"))
    lance.write_dataset(text_table(400, 45), str(root / "b.lance"))
    reference = str(tmp_path / "ref")
    lance.write_dataset(text_table(400, 45), reference)
    lance.dataset(reference).create_scalar_index("text", "INVERTED", stem=False)
    with namespace_server(root) as served:
        with Client(served.flight) as qc:
            built = qc.create_index("a", "text", "INVERTED", params={"stem": False})
            assert built["name"] == "text_idx"
        body = {"column": "text", "index_type": "FTS", "stem": False}
        assert call(served.url, "POST", "/v1/table/b/create_index", body).status == 200
    for name in ("a", "b"):
        ours = str(root / f"{name}.lance")
        [entry] = lance.dataset(ours).describe_indices()
        assert entry.index_type == "Inverted"
        _same_everywhere(ours, reference, f"built through {name}", ({"limit": 5},))


@pytest.mark.parametrize("chunk", [None, 37], ids=["one chunk", "many chunks"])
@pytest.mark.parametrize("base", ["simple", "whitespace", "raw", "ngram", "code"])
def test_bulk_analysis_is_the_per_text_analysis(
    base: str, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Analyzer.occurrences` (Arrow's split where a text allows) finds exactly the tokens
    and positions the per-text analyzer does, ids numbered by first appearance; also when
    the texts are split many chunks at a time, each next one on a worker."""
    from fulltext_corpus import docs

    from quiver.format.index.fts import analyzer as module
    from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams

    if chunk is not None:
        monkeypatch.setattr(module, "_BULK_ROWS", chunk)

    texts = docs(400, 7) + [
        "Ünïcödé\u00a0mixed ascii",
        "tab\tsep\x0bvt",
        "  ",
        "x" * 50,
        "İstanbul",
    ]
    for params in (
        AnalyzerParams(base_tokenizer=base),
        AnalyzerParams(
            base_tokenizer=base, stem=False, remove_stop_words=False, max_token_length=4
        ),
    ):
        analyzer = Analyzer(params)
        found = analyzer.occurrences(pa.array(texts, pa.string()))
        got = [
            (row, pos, found.vocabulary[t])
            for row, pos, t in zip(found.rows, found.positions, found.token_ids, strict=True)
        ]
        want = [
            (row, pos, tok)
            for row, text in enumerate(texts)
            for pos, tok in analyzer.positioned(text)
        ]
        assert got == want, params
        first_seen = list(dict.fromkeys(tok for _, _, tok in want))
        assert found.vocabulary == first_seen


def test_posting_encoding_decodes_to_its_postings() -> None:
    """Every token's blocks, encoded in one pass, decode to its documents and frequencies,
    and each block and token carries its best score."""
    import numpy as np

    from quiver.format.index.fts.encode import encode_postings
    from quiver.format.index.fts.postings import VARINT, decode_postings

    rng = np.random.default_rng(3)
    df = np.array([1, 127, 128, 129, 300, 256, 5, 1000])
    docs, freqs = [], []
    for n in df:
        gaps = rng.choice([1, 2, 200, 70_000, 1 << 27], size=n, p=[0.5, 0.2, 0.2, 0.09, 0.01])
        docs.append(np.cumsum(gaps) - gaps[0] + rng.integers(0, 1 << 20))
        freqs.append(rng.choice([1, 2, 3, 90_000], size=n, p=[0.7, 0.2, 0.09, 0.01]))
    bounds = np.concatenate([[0], np.cumsum(df)])
    scores = rng.random(bounds[-1]).astype(np.float32)
    column, best = encode_postings(
        bounds, np.concatenate(docs).astype(np.uint32), np.concatenate(freqs), scores
    )
    for t, n in enumerate(df):
        blobs = column[t].as_py()
        ids, fr = decode_postings(blobs, int(n), VARINT, "test")
        np.testing.assert_array_equal(ids, docs[t])
        np.testing.assert_array_equal(fr, freqs[t])
        mine = scores[bounds[t] : bounds[t + 1]]
        assert best[t] == mine.max()
        heads = [np.frombuffer(b[:4], "<f4")[0] for b in blobs]
        assert heads == [mine[i : i + 128].max() for i in range(0, int(n), 128)]


def test_malformed_posting_blocks_are_refused() -> None:
    """A full block cut short, or with a width over 32, or with bytes after its
    frequencies: a CorruptFileError naming the file and the block, never a wrong list."""
    import numpy as np

    from quiver.format.errors import CorruptFileError
    from quiver.format.index.fts.encode import encode_postings
    from quiver.format.index.fts.postings import VARINT, decode_postings

    n = 3 * 128
    column, _ = encode_postings(
        np.array([0, n]),
        np.arange(0, 2 * n, 2, dtype=np.uint32),
        np.ones(n, np.int64),
        np.ones(n, np.float32),
    )
    blobs = column[0].as_py()
    ids, _ = decode_postings(blobs, n, VARINT, "part_0_invert.lance")
    np.testing.assert_array_equal(ids, np.arange(0, 2 * n, 2))
    second = blobs[1]
    wide = second[:8] + bytes([33]) + second[9:]
    for bad, problem in (
        (second[:9], "shorter than its header"),
        (second[:-1], "of the wrong size"),
        (second + b"\0", "of the wrong size"),
        (wide, "shorter than its document ids"),
    ):
        with pytest.raises(CorruptFileError, match=rf"part_0_invert.lance.*{problem}.*block 1"):
            decode_postings([blobs[0], bad, blobs[2]], n, VARINT, "part_0_invert.lance")


def test_tail_blocks_decode_every_width_and_refuse_damage() -> None:
    """The partial last block's LEB128 ids and frequencies (one to five bytes each) decode
    to what was encoded; one cut inside a number, with a byte left over, or holding a
    number wider than 35 bits is refused by name."""
    import numpy as np

    from quiver.format.errors import CorruptFileError
    from quiver.format.index.fts.encode import encode_postings
    from quiver.format.index.fts.postings import VARINT, decode_postings, read_varints

    rng = np.random.default_rng(3)
    n = 2 * 128 + 77
    docs = np.cumsum(rng.choice([1, 200, 40_000, 3_000_000, 300_000_000], n)).astype(np.uint32)
    freqs = rng.choice([1, 130, 20_000, 4_000_000], n)
    column, _ = encode_postings(np.array([0, n]), docs, freqs, np.ones(n, np.float32))
    blobs = column[0].as_py()
    ids, counts = decode_postings(blobs, n, VARINT, "part_0_invert.lance")
    np.testing.assert_array_equal(ids, docs)
    np.testing.assert_array_equal(counts, freqs)
    tail = blobs[-1]
    for bad, problem in (
        (tail[:-1] + bytes([tail[-1] | 0x80]), "ends inside a number"),
        (tail + b"\x01", "longer than its numbers"),
    ):
        with pytest.raises(CorruptFileError, match=rf"part_0_invert.lance.*{problem}"):
            decode_postings([*blobs[:-1], bad], n, VARINT, "part_0_invert.lance")
    with pytest.raises(CorruptFileError, match="more than 35 bits"):
        read_varints(np.array([0x80] * 5 + [1], np.uint8), 1, "f")
    values, used = read_varints(np.array([5, 0xFF, 0x7F, 0], np.uint8), 2, "f")
    assert values.tolist() == [5, 16383] and used == 3


def test_pylance_phrase_queries_on_quiver_positions(tmp_path: Path) -> None:
    """Positions Quiver writes are the ones pylance writes: pylance answers phrase queries
    (slop 0 to 2) on Quiver's index as on its own, after an append and optimize too, and
    Quiver's encoding decodes back to the analyzer's positions."""
    from lance.query import PhraseQuery

    table = text_table(1200, 51)
    long_rows = pa.table(
        {
            "id": [5000, 5001],
            "text": [" ".join(["apple banana"] * 150), "banana " * 300 + "cherry"],
            "title": ["x", "y"],
            "cat": ["c0", "c1"],
        }
    )
    ours, theirs = _pair(tmp_path, pa.concat_tables([table, long_rows]), with_position=True)
    phrases = ["quick brown", "brown fox", "the lazy dog", "apple banana", "banana cherry"]
    phrases += ["running runs", "data dataset", "blue green red"]

    def same(what: str) -> None:
        for text in phrases:
            for slop in (0, 1, 2):
                q = PhraseQuery(text, "text", slop=slop)
                assert_same_answers(
                    search(lance.dataset(theirs), full_text_query=q),
                    search(lance.dataset(ours), full_text_query=q),
                    f"{what} {text!r} slop {slop}",
                )

    same("built")
    for path in (ours, theirs):
        lance.write_dataset(text_table(200, 52, start=900), path, mode="append")
    dataset(ours).optimize.optimize_indices()
    lance.dataset(theirs).optimize.optimize_indices()
    same("optimized")


MARKED = [
    "สวัสดี ครับ",  # Thai vowel signs: letters to Rust, not to Python's \w
    "हिन्दी भाषा",  # Devanagari: vowel signs join a word, the virama splits it
    "كَتَبَ الولد",  # Arabic harakat
    "Ⓐbc def",  # a circled letter
    "naïve x_y ²",
    "ภาษาไทย สวัสดี",
    "שָׁלוֹם עולם",  # Hebrew points
]
MARKED_QUERIES = ["สวัสดี", "สว", "हिन्दी", "हिन", "हि", "كَتَبَ", "ك", "Ⓐbc", "bc", "שָׁלוֹם", "x"]


@pytest.mark.parametrize("base", ["simple", "code"])
def test_words_with_combining_marks_are_pylance_s_tokens(tmp_path: Path, base: str) -> None:
    """Words whose letters carry combining marks (Thai, Devanagari, Arabic, Hebrew) and
    circled letters are single tokens, as Rust's `is_alphanumeric` has them: each engine
    answers every query alike on either engine's index."""
    table = pa.table({"id": list(range(len(MARKED))), "text": MARKED})
    options: dict[str, Any] = {"base_tokenizer": base, "stem": False, "remove_stop_words": False}
    for who in ("ours", "theirs"):
        lance.write_dataset(table, str(tmp_path / who))
    dataset(str(tmp_path / "ours")).create_scalar_index("text", "INVERTED", **options)
    lance.dataset(str(tmp_path / "theirs")).create_scalar_index("text", "INVERTED", **options)
    found = 0
    for query in MARKED_QUERIES:
        answers = [
            sorted(engine(str(tmp_path / who)).to_table(full_text_query=query)["id"].to_pylist())
            for who in ("ours", "theirs")
            for engine in (dataset, lance.dataset)
        ]
        assert all(a == answers[0] for a in answers), (query, answers)
        found += bool(answers[0])
    assert found >= 6
