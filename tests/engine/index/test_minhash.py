"""MINHASHLSH indices: built as pylance 14 builds them, searched as it searches them.

The signature procedure is checked against the known answers of Lance's specification;
indices built by each engine are compared file content against file content (signatures and
band tables equal), and every search is run by both engines on indices of both engines,
after appends (unindexed rows signed on the fly), deletions, `optimize_indices` and
compaction, with filters, `fast_search`, limits and offsets: the same rows in the same
order, the same distances.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from lance.query import MinHashQuery as PylanceQuery

from quiver.format._kernels import minhash_bands, minhash_sign
from quiver.format.dataset import MinHashQuery, ScannerBuilder, dataset
from quiver.format.errors import InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.index.scalar import minhash as minhash_index
from quiver.format.index.scalar.minhash import _PAGE_TABLE_KEY as PAGE_TABLE_KEY
from quiver.format.index.scalar.minhash import MinHashParams, _coefficients
from quiver.format.io.store import open_store

WORDS = [f"w{i}" for i in range(60)]


def test_the_signature_procedure_gives_the_specification_s_known_answers():
    """Lance's MinHash specification, version 0: num_hashes 4, num_bands 2, shingle 2."""
    coef = _coefficients(4)
    assert [hex(int(v)) for v in coef] == [
        "0xbdd732262feb6e95", "0x47526757130f9f53", "0x9bc585a244823f3", "0x37e9671c45376d5d",
        "0x28efe333b266f103", "0x581ce1ff0e4ae394", "0xde4431fa3c80db06", "0xccf635ee9e9e2fa4",
        "0x5705b8770b3d7dd5", "0x9e54d738297f77af", "0x3474724a775b19bf", "0x7e348a0e451650bf",
    ]  # fmt: skip
    params = MinHashParams(num_hashes=4, num_bands=2, shingle_size=2)
    texts = pa.array(["The quick brown fox", "Fox", "", "  \n", None])
    signatures, signed = params.sign(texts)
    assert signed.tolist() == [True, True, False, False, False]
    assert signatures[0].tolist() == [0xB00F, 0x59D6, 0x511A, 0xCD2C]
    assert signatures[1].tolist() == [0x2970, 0xD6DB, 0x65F8, 0xADFC]
    keys = params.band_keys(signatures[:2])
    assert keys.tolist() == [
        [0x00F30F3501D458EA, 0x01AEC5DF28D04915],
        [0x003CF6E803312ECA, 0x017C5504FBC83F36],
    ]


def test_the_kernels_refuse_what_does_not_fit():
    out, has = np.empty(4, np.uint16), np.empty(1, np.uint8)
    coef = _coefficients(4)
    ends = np.array([3], np.int64)
    with pytest.raises(ValueError, match="token ends outside"):
        minhash_sign(b"ab", ends, np.array([1], np.int64), 2, coef, out, has)
    with pytest.raises(ValueError, match="document ends outside"):
        minhash_sign(b"abc", ends, np.array([2], np.int64), 2, coef, out, has)
    with pytest.raises(ValueError, match="bad shingle"):
        minhash_sign(b"abc", ends, np.array([1], np.int64), 0, coef, out, has)
    with pytest.raises(ValueError, match="bad widths"):
        minhash_bands(np.zeros(6, np.uint16), 6, 4, np.empty(4, np.uint64))


def _texts(n: int, seed: int) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = [
        " ".join(rng.choice(WORDS, int(rng.integers(1, 14)))) for _ in range(n)
    ]
    for i in range(0, n, 37):
        out[i] = None
    for i in range(5, n, 41):
        out[i] = ""
    return out


def _write(path: str, n: int = 900, stable: bool = False) -> list[str | None]:
    texts = _texts(n, 1)
    for i in range(3, n, 50):  # near duplicates: the same text with its last word changed
        base = texts[i - 1]
        if base:
            texts[i] = base.rsplit(" ", 1)[0] + " changed"
    table = pa.table({"id": np.arange(n, dtype=np.int64), "text": texts})
    lance.write_dataset(table, path, max_rows_per_file=n // 3, enable_stable_row_ids=stable)
    return texts


def _twins(tmp_path: Path, stable: bool = False) -> tuple[str, str, list[str | None]]:
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    texts = _write(ours, stable=stable)
    shutil.copytree(ours, theirs)
    dataset(ours).create_scalar_index("text", "MINHASHLSH")
    lance.dataset(theirs).create_scalar_index("text", "MINHASHLSH")
    return ours, theirs, texts


def _files(uri: str) -> dict[str, pa.Table]:
    (entry,) = [i for i in lance.dataset(uri).list_indices() if i["type"] == "MinHashLsh"]
    store = open_store(uri)
    out = {}
    for name in ("signatures.lance", "bands.lance"):
        file = IndexFile(store, f"_indices/{entry['uuid']}/{name}")
        try:
            columns = [f.name for f in file.schema.fields]
            out[name] = file.read(columns)
            out[name + " metadata"] = file.metadata
            if name == "bands.lance":  # the last key of every page of the band table
                out["page table"] = file.global_buffer(int(file.text(PAGE_TABLE_KEY)))
        finally:
            file.close()
    return out


@pytest.mark.parametrize("slices", [None, 97], ids=["whole", "in-slices"])
def test_quiver_s_index_holds_pylance_s_signatures_and_bands(tmp_path: Path, monkeypatch, slices):
    """Built at once or signed and banded in slices of rows on every core (as a column of
    more than 2^17 rows is), the files hold pylance's signatures, bands and page table."""
    if slices:
        monkeypatch.setattr(minhash_index, "_SIGN_SLICE_ROWS", slices)
        monkeypatch.setattr(minhash_index, "PAGE_ROWS", 64)  # pages across the bands' parts
    ours, theirs, texts = _twins(tmp_path)
    mine, ref = _files(ours), _files(theirs)
    if slices:  # both engines search the index of small pages as pylance's
        monkeypatch.setattr(minhash_index, "LOADED", minhash_index.ByteLRU(0))  # page by page
        _search_all(ours, theirs, texts, "64-row pages")
    if not slices:
        assert mine["page table"] == ref["page table"]
    else:  # pylance's pages hold 4096 rows: the table of 64-row pages, from its band table
        keys = ref["bands.lance"].column("band_key").to_numpy()
        assert mine["page table"] == keys[63::64].astype("<u8").tobytes() + (
            keys[-1:].astype("<u8").tobytes() if len(keys) % 64 else b""
        )
    for name in ("signatures.lance", "bands.lance"):
        assert_same_table(mine[name], ref[name], name)
        if not slices:
            assert mine[name + " metadata"] == ref[name + " metadata"], name
    q = [i for i in lance.dataset(ours).list_indices() if i["name"] == "text_idx"]
    r = [i for i in lance.dataset(theirs).list_indices() if i["name"] == "text_idx"]
    assert [(i["type"], i["fields"], i["fragment_ids"]) for i in q] == [
        (i["type"], i["fields"], i["fragment_ids"]) for i in r
    ]


SEARCHES = {
    "plain": {},
    "limit and offset": {"limit": 4, "offset": 2},
    "postfilter": {"filter": "id % 2 = 0", "limit": 8},
    "prefilter": {"filter": "id % 2 = 0", "prefilter": True, "limit": 8},
    "columns and row ids": {"columns": ["id"], "with_row_id": True},
    "fast search": {"fast_search": True},
}


def _search_all(uri_ours: str, uri_theirs: str, texts: list[str | None], what: str) -> None:
    queries = [t for t in texts[:400:67] if t] + [texts[3] or "w1 w2", "nothing of the kind"]
    for q in queries:
        for name, kwargs in SEARCHES.items():
            answers = []
            for uri in (uri_ours, uri_theirs):
                answers.append(dataset(uri).to_table(nearest=MinHashQuery(q, "text"), **kwargs))
                answers.append(
                    lance.dataset(uri).to_table(nearest=PylanceQuery(q, "text"), **kwargs)
                )
            for got in answers[:-1]:
                assert_same_table(got, answers[-1], f"{what}, {name}, {q!r}")


def test_both_engines_search_both_engines_indices_alike(tmp_path: Path):
    ours, theirs, texts = _twins(tmp_path)
    _search_all(ours, theirs, texts, "as built")


@pytest.mark.parametrize("stable", [False, True])
def test_searches_after_appends_deletions_optimize_and_compaction(tmp_path: Path, stable: bool):
    ours, theirs, texts = _twins(tmp_path, stable)
    more = _texts(200, 7)
    more[0] = texts[2]  # a copy of an indexed row, unindexed
    extra = pa.table({"id": np.arange(900, 1100, dtype=np.int64), "text": more})
    for uri in (ours, theirs):
        lance.write_dataset(extra, uri, mode="append")
    _search_all(ours, theirs, texts + more, "after an append")
    for uri in (ours, theirs):
        lance.dataset(uri).delete("id % 7 = 2")
    _search_all(ours, theirs, texts + more, "after deletions")
    dataset(ours).optimize.optimize_indices()
    lance.dataset(theirs).optimize.optimize_indices()
    _search_all(ours, theirs, texts + more, "after optimize_indices")
    dataset(ours).optimize.compact_files(target_rows_per_fragment=2000)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2000)
    _search_all(ours, theirs, texts + more, "after compaction")


def test_the_builder_and_the_scanner_search_too(tmp_path: Path):
    ours, _, texts = _twins(tmp_path)
    q = texts[10] or "w1"
    ds = dataset(ours)
    via_builder = ScannerBuilder(ds).minhash_search(MinHashQuery(q, "text")).limit(5)
    via_scanner = ds.scanner(nearest=PylanceQuery(q, "text"), limit=5)
    ref = lance.dataset(ours).to_table(nearest=PylanceQuery(q, "text"), limit=5)
    assert_same_table(via_builder.to_scanner().to_table(), ref, "builder")
    assert_same_table(via_scanner.to_table(), ref, "scanner")
    assert "MinHashSearch" in via_scanner.explain_plan()
    with pytest.raises(TypeError, match="expects a MinHashQuery"):
        ScannerBuilder(ds).minhash_search("text")


def test_bad_minhash_requests_are_refused(tmp_path: Path):
    path = str(tmp_path / "d.lance")
    _write(path, 60)
    ds = dataset(path)
    with pytest.raises(InvalidInputError, match="needs a MINHASHLSH index on 'text'"):
        ds.to_table(nearest=MinHashQuery("w1 w2", "text"))
    with pytest.raises(InvalidInputError, match="needs a text column"):
        ds.create_scalar_index("id", "MINHASHLSH")
    with pytest.raises(InvalidInputError, match="multiple of num_bands"):
        ds.create_scalar_index("text", "MINHASHLSH", num_hashes=100, num_bands=16)
    with pytest.raises(InvalidInputError, match="num_hashes <= 4096"):
        ds.create_scalar_index("text", "MINHASHLSH", num_hashes=8192, num_bands=16)
    with pytest.raises(InvalidInputError, match="custom_stop_words"):
        ds.create_scalar_index("text", "MINHASHLSH", tokenizer={"custom_stop_words": ["a"]})
    with pytest.raises(InvalidInputError, match="unknown MINHASHLSH index option 'bands'"):
        ds.create_scalar_index("text", "MINHASHLSH", bands=4)
    assert lance.dataset(path).list_indices() == []  # nothing committed


def test_other_parameters_are_recorded_and_pylance_searches_with_them(tmp_path: Path):
    """pylance 14's Python call builds its defaults whatever it is given; Quiver builds what
    is asked for, recorded in the details, and pylance signs its queries by them."""
    path = str(tmp_path / "d.lance")
    texts = _write(path)
    dataset(path).create_scalar_index(
        "text", "MINHASHLSH", num_hashes=64, num_bands=8, shingle_size=2,
        tokenizer={"base_tokenizer": "whitespace"},
    )  # fmt: skip
    for q in [t for t in texts[:300:31] if t]:
        ours = dataset(path).to_table(nearest=MinHashQuery(q, "text"), limit=6)
        theirs = lance.dataset(path).to_table(nearest=PylanceQuery(q, "text"), limit=6)
        assert_same_table(ours, theirs, q)
        assert ours.num_rows >= 1


def test_segments_built_apart_merge_and_commit_in_either_engine(tmp_path: Path):
    """create_index_uncommitted over fragment sets, merge_existing_index_segments, then
    commit_existing_index_segments: by each engine, answering as one index built at once."""
    whole = str(tmp_path / "whole.lance")
    texts = _write(whole)
    lance.dataset(whole).create_scalar_index("text", "MINHASHLSH")
    for engine in (dataset, lance.dataset):
        path = str(tmp_path / f"apart-{engine.__module__}.lance")
        _write(path)
        ds = engine(path)
        parts = [ds.create_index_uncommitted("text", "MINHASHLSH", fragment_ids=ids)
                 for ids in ([0, 1], [2])]  # fmt: skip
        merged = ds.merge_existing_index_segments(parts)
        ds.commit_existing_index_segments("text_idx", "text", [merged])
        for q in [t for t in texts[:300:43] if t]:
            want = lance.dataset(whole).to_table(nearest=PylanceQuery(q, "text"), limit=5)
            for reader in (dataset, lance.dataset):
                query = MinHashQuery(q, "text") if reader is dataset else PylanceQuery(q, "text")
                got = reader(path).to_table(nearest=query, limit=5)
                assert_same_table(got, want, f"{engine.__module__} segments, {q!r}")


def test_a_segment_too_big_to_hold_is_searched_page_by_page(tmp_path: Path, monkeypatch):
    """Segments over half the cache are read a band page at a time (the pages held in
    their own cache): the same answers as a segment held whole."""
    from quiver.format.index.scalar import minhash as index_module

    ours, _, texts = _twins(tmp_path)
    queries = [t for t in texts[:300:29] if t]
    whole = [dataset(ours).to_table(nearest=MinHashQuery(q, "text")) for q in queries]
    monkeypatch.setattr(index_module, "LOADED", index_module.ByteLRU(0))
    monkeypatch.setattr(index_module, "PAGES", index_module.ByteLRU(1 << 20))
    for q, want in zip(queries, whole, strict=True):
        assert_same_table(dataset(ours).to_table(nearest=MinHashQuery(q, "text")), want, q)
    assert index_module.PAGES.nbytes > 0


@pytest.mark.parametrize("failing", ["signatures.lance", "bands.lance", "band keys"])
def test_a_failed_file_write_stops_the_build_and_commits_nothing(
    tmp_path: Path, monkeypatch, failing: str
):
    """Either of a segment's two files (written at once, on two threads) failing, or the
    band keys before the band table: the build raises that failure, the other write stops
    early, and no index is committed."""
    uri = str(tmp_path / "ds.lance")
    _write(uri, n=3000)
    monkeypatch.setattr(minhash_index, "_ROWS_PER_WRITE", 16)  # many batches in each file
    real = minhash_index.write_index_file
    batches: dict[str, int] = {}
    failed = threading.Event()

    def write(store, path, schema, tables, version, **kw):  # noqa: ANN001, ANN202
        name = path.rsplit("/", 1)[-1]

        def counted():  # noqa: ANN202
            for i, table in enumerate(tables):
                batches[name] = i + 1
                if name == failing and i == 3:
                    failed.set()
                    raise OSError(f"disk full writing {name}")
                if name != failing and i == 3:
                    # the other file waits for the failure (it would otherwise often be written
                    # whole first: the band table is sorted before its first batch), then for
                    # the build to have seen it
                    assert failed.wait(30)
                    time.sleep(0.3)
                yield table

        return real(store, path, schema, counted(), version, **kw)

    monkeypatch.setattr(minhash_index, "write_index_file", write)
    if failing == "band keys":

        def band_keys(self, signatures):  # noqa: ANN001, ANN202
            failed.set()
            raise MemoryError("no room for the band keys")

        monkeypatch.setattr(MinHashParams, "band_keys", band_keys)
    version = dataset(uri).version
    with pytest.raises(OSError if failing != "band keys" else MemoryError):
        dataset(uri).create_scalar_index("text", "MINHASHLSH")
    other = "bands.lance" if failing == "signatures.lance" else "signatures.lance"
    # written whole: 2,837 documents with text in 178 batches of 16 signatures, and 720
    # batches of 64 band rows
    whole = {"signatures.lance": 178, "bands.lance": 720}
    assert batches.get(other, 0) < whole[other]  # stopped, not written to its end
    assert dataset(uri).version == version
    assert not [i for i in lance.dataset(uri).list_indices() if i["type"] == "MinHashLsh"]
