"""Sanity checks of the compatibility corpus: it builds, pylance opens it, features are there."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from corpus import (
    BUILDERS,
    CORPUS_STORAGE_VERSIONS,
    DISCOVERED_EXCLUSIONS,
    NO_STRUCT_VALIDITY,
    TYPE_COLUMNS,
    TYPE_EXCLUSIONS,
    UNSTABLE_DATASETS,
    CorpusDataset,
    build_corpus,
    excluded,
    probe_type,
    pylance_table,
    types_table,
    unstable_overlays,
)

pytestmark = pytest.mark.compat

EXPECTED = [
    (version, name)
    for version in CORPUS_STORAGE_VERSIONS
    for name, _ in BUILDERS
    if not excluded(version, name) and name not in UNSTABLE_DATASETS
]


def _entry(corpus: list[CorpusDataset], version: str, name: str) -> CorpusDataset:
    """The corpus dataset ``name`` written at ``version``."""
    found = [d for d in corpus if d.storage_version == version and d.name == name]
    assert found, f"{name}@{version} missing: {DISCOVERED_EXCLUSIONS.get((version, name))}"
    return found[0]


def _field_ids(fields: list) -> set[int]:
    """All field ids of a LanceSchema field list, nested ones included."""
    ids: set[int] = set()
    for field in fields:
        ids.add(field.id())
        ids |= _field_ids(field.children())
    return ids


def _by_id(table: pa.Table) -> dict[int, dict]:
    """Rows of ``table`` keyed by their ``id`` column."""
    return {row["id"]: row for row in table.to_pylist()}


def _ipc(table: pa.Table) -> pa.Buffer:
    """``table`` serialized as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_corpus_is_complete(corpus: list[CorpusDataset]) -> None:
    """Every expected dataset was written and nothing failed unexpectedly."""
    assert sorted((d.storage_version, d.name) for d in corpus) == sorted(EXPECTED)
    unexpected = {k: v for k, v in DISCOVERED_EXCLUSIONS.items() if k[0] in CORPUS_STORAGE_VERSIONS}
    assert unexpected == {}
    assert len({d.uri for d in corpus}) == len(corpus)
    assert all(Path(d.uri).is_dir() and d.features for d in corpus)


@pytest.mark.parametrize(("version", "name"), EXPECTED, ids=[f"{n}-{v}" for v, n in EXPECTED])
def test_every_version_opens(corpus: list[CorpusDataset], version: str, name: str) -> None:
    """pylance reads every version listed by ``versions()`` of every dataset."""
    entry = _entry(corpus, version, name)
    ds = lance.dataset(entry.uri)
    assert ds.data_storage_version == ("0.1" if version == "legacy" else version)
    for info in ds.versions():
        table = pylance_table(entry.uri, info["version"])
        assert table.num_rows == lance.dataset(entry.uri, version=info["version"]).count_rows()


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_types(corpus: list[CorpusDataset], version: str) -> None:
    """The types dataset has every supported column, metadata, fragments and nulls."""
    entry = _entry(corpus, version, "types")
    ds = lance.dataset(entry.uri)
    expected = {c for c in TYPE_COLUMNS if not excluded(version, c)}
    assert set(ds.schema.names) == {"id", "name_nn"} | expected
    assert len(ds.get_fragments()) >= 3
    assert ds.schema.metadata[b"corpus"] == b"types"
    assert ds.schema.field("int32").metadata[b"unit"] == b"cm"
    assert ds.schema.field("struct").type.field("a").metadata == {b"child": b"yes"}
    table = pylance_table(entry.uri)
    assert table.num_rows == 3000
    assert not table.schema.field("id").nullable
    assert table.column("id").to_pylist() == list(range(3000))
    long_text = table.column("long_text").drop_null()
    assert min(len(s.as_py().encode()) for s in long_text) >= 300
    if version == "legacy":
        # Legacy files store no validity: pylance reads nulls back as zeros, empty lists...
        assert table.column("int32").null_count == 0
        assert table.column("list_i32").null_count == 0
        # ...but strings keep nulls, and an empty string is read back as null.
        assert table.column("utf8").null_count > 0
        assert table.column("utf8")[0].as_py() is None
        return
    no_nulls = {"constant", "empty_struct"}
    if version in NO_STRUCT_VALIDITY:
        no_nulls |= {n for n in expected if pa.types.is_struct(table.schema.field(n).type)}
    for field in table.schema:
        if field.nullable and field.name not in no_nulls:
            assert table.column(field.name).null_count > 0, field.name
    assert table.column("utf8")[0].as_py() == ""


def test_types_pages_2_0(corpus: list[CorpusDataset]) -> None:
    """The 2.0 data files have columns split into several pages."""
    from lance.file import LanceFileReader

    entry = _entry(corpus, "2.0", "types")
    fragment = lance.dataset(entry.uri).get_fragments()[0]
    path = Path(entry.uri) / "data" / fragment.data_files()[0].path
    columns = LanceFileReader(str(path)).metadata().columns
    assert max(len(c.pages) for c in columns) > 1


def test_types_table_is_deterministic() -> None:
    """Rebuilding the types table gives the same data."""
    columns = [c for c in TYPE_COLUMNS if not excluded("2.0", c)]
    first, second = (types_table(columns, "2.0", files=2, rows=50) for _ in range(2))
    assert _ipc(first).equals(_ipc(second))  # bytes, since NaN != NaN in Table.equals


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_history(corpus: list[CorpusDataset], version: str) -> None:
    """Many versions, schema evolution, tags and a branch invisible from the main line."""
    entry = _entry(corpus, version, "history")
    ds = lance.dataset(entry.uri)
    assert len(ds.versions()) >= 13
    tags = ds.tags.list()
    assert tags["v2tag"]["version"] == 2 and tags["after_rename"]["version"] == 11
    assert pylance_table(entry.uri, "v2tag").equals(pylance_table(entry.uri, 2))
    assert {"label", "z"} <= set(ds.schema.names) and not {"s", "f"} & set(ds.schema.names)
    assert {"s", "f"} <= set(lance.dataset(entry.uri, version=1).schema.names)
    assert 2 not in {f.fragment_id for f in ds.get_fragments()}
    assert 2 in {f.fragment_id for f in lance.dataset(entry.uri, version=6).get_fragments()}
    assert (Path(entry.uri) / "tree" / "dev").is_dir()
    assert max(pylance_table(entry.uri, columns=["id"]).column("id").to_pylist()) < 10_000


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_stable_row_ids(corpus: list[CorpusDataset], version: str) -> None:
    """After compaction row ids differ from row addresses and have holes."""
    entry = _entry(corpus, version, "stable_row_ids")
    ds = lance.dataset(entry.uri)
    assert all(f.metadata.row_id_meta is not None for f in ds.get_fragments())
    table = pylance_table(entry.uri, with_row_id=True, with_row_address=True)
    row_ids = table.column("_rowid").to_pylist()
    addresses = table.column("_rowaddr").to_pylist()
    assert any(r != a for r, a in zip(row_ids, addresses, strict=True))
    assert len(set(row_ids)) == len(row_ids) < max(row_ids) + 1


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_deletion_files(corpus: list[CorpusDataset], version: str) -> None:
    """Bitmap (.bin) and Arrow (.arrow) deletion files are both present."""
    bitmap = Path(_entry(corpus, version, "deletes_bitmap").uri)
    assert list((bitmap / "_deletions").glob("*.bin"))
    big = [
        f.metadata.deletion_file
        for f in lance.dataset(str(bitmap)).get_fragments()
        if f.metadata.deletion_file
    ]
    assert any(d.file_type == "bitmap" and d.num_deleted_rows > 5000 for d in big)
    arrow = Path(_entry(corpus, version, "deletes_arrow").uri)
    assert list((arrow / "_deletions").glob("*.arrow"))
    assert not list((arrow / "_deletions").glob("*.bin"))


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_empty_datasets(corpus: list[CorpusDataset], version: str) -> None:
    """Zero-row datasets, fully deleted datasets and zero-row appends."""
    empty = lance.dataset(_entry(corpus, version, "empty").uri)
    assert empty.count_rows() == 0 and not empty.get_fragments() and empty.schema.names
    uri = _entry(corpus, version, "all_deleted").uri
    assert not lance.dataset(uri).get_fragments()
    assert pylance_table(uri).num_rows == 0 and pylance_table(uri, 1).num_rows == 300
    uri = _entry(corpus, version, "empty_append").uri
    frags = [[f.fragment_id for f in lance.dataset(uri, version=v).get_fragments()] for v in (1, 2)]
    assert frags[0] == frags[1]


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_data_files(corpus: list[CorpusDataset], version: str) -> None:
    """Several data files per fragment, stale field ids and -2 tombstones."""
    ds = lance.dataset(_entry(corpus, version, "multi_file").uri)
    assert max(len(f.data_files()) for f in ds.get_fragments()) >= 3
    if version != "legacy":  # a column added as all-null has no data file in old fragments
        n_str = ds.lance_schema.field("n_str").id()
        assert any(all(n_str not in df.fields for df in f.data_files()) for f in ds.get_fragments())
        assert pylance_table(ds.uri, columns=["n_str"]).column(0).null_count == ds.count_rows()
    ds = lance.dataset(_entry(corpus, version, "altered_type").uri)
    assert ds.schema.field("x").type == pa.int64()
    assert ds.schema.field("s").type == pa.large_string()
    stored = {i for f in ds.get_fragments() for df in f.data_files() for i in df.fields}
    assert stored - _field_ids(ds.lance_schema.fields())
    ds = lance.dataset(_entry(corpus, version, "tombstone").uri)
    assert any(-2 in df.fields for f in ds.get_fragments() for df in f.data_files())
    by_id = _by_id(pylance_table(ds.uri))
    assert by_id[1]["x"] == -1 and by_id[299]["x"] == -299 and 3 not in by_id


def test_mixed_file_versions(corpus: list[CorpusDataset]) -> None:
    """A 2.0 dataset with data files of two file versions."""
    ds = lance.dataset(_entry(corpus, "2.0", "mixed_file_versions").uri)
    versions = {
        (df.file_major_version, df.file_minor_version)
        for f in ds.get_fragments()
        for df in f.data_files()
    }
    assert versions == {(2, 0), (2, 1)}


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_overwrite_and_names(corpus: list[CorpusDataset], version: str) -> None:
    """Overwrite/restore schemas, odd column names, v1 manifest paths, cleaned versions."""
    uri = _entry(corpus, version, "overwrite").uri
    schemas = [lance.dataset(uri, version=v).schema for v in (1, 2, 4)]
    assert schemas[0] != schemas[1] and schemas[0] == schemas[2]
    assert pylance_table(uri).equals(pylance_table(uri, 1))
    uri = _entry(corpus, version, "odd_names").uri
    assert {"with space", "日本語", "emoji🙂", "a-dash"} <= set(lance.dataset(uri).schema.names)
    uri = _entry(corpus, version, "v1_manifest_paths").uri
    assert (Path(uri) / "_versions" / "1.manifest").is_file()
    assert not (Path(_entry(corpus, version, "history").uri) / "_versions" / "1.manifest").exists()
    uri = _entry(corpus, version, "cleaned").uri
    assert 1 not in [v["version"] for v in lance.dataset(uri).versions()]
    assert pylance_table(uri, "kept").num_rows == 300


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_encodings_blob_index(corpus: list[CorpusDataset], version: str) -> None:
    """Encoding metadata, blob descriptions and scalar indices."""
    ds = lance.dataset(_entry(corpus, version, "encodings").uri)
    assert ds.schema.field("zstd_str").metadata[b"lance-encoding:compression"] == b"zstd"
    if version != "legacy":
        blob = pylance_table(_entry(corpus, version, "blob").uri)
        assert pa.types.is_struct(blob.schema.field("blob").type)
    ds = lance.dataset(_entry(corpus, version, "indexed").uri)
    assert len(ds.describe_indices()) == 2


@pytest.mark.parametrize("version", CORPUS_STORAGE_VERSIONS)
def test_overlay(tmp_path: Path, version: str) -> None:
    """Data overlays (opt-in): refused by default, layered newest-wins when enabled."""
    built = build_corpus(tmp_path, (version,), names=["overlay"], include_unstable=True)
    entry = _entry(built, version, "overlay")
    assert build_corpus(tmp_path / "default", (version,), names=["overlay"]) == []
    with pytest.raises(ValueError, match="cannot be read by this version"):
        lance.dataset(entry.uri)
    with unstable_overlays():
        ds = lance.dataset(entry.uri)
        assert len(ds.get_fragments()[0].metadata.overlays) == 2
        rows = _by_id(pylance_table(entry.uri))
    assert {7, 20, 301}.isdisjoint(rows)
    assert [rows[i]["x"] for i in (3, 5, 10)] == [-1, -100, -4]
    assert (rows[3]["s"], rows[5]["s"], rows[300]["s"]) == ("ov1", "ov2", "frag1")
    assert rows[3]["f"] == 1e300


TYPE_PROBES = sorted(
    (version, column)
    for version in CORPUS_STORAGE_VERSIONS
    for (v, column) in TYPE_EXCLUSIONS
    if v in ("*", version)
)


@pytest.mark.parametrize(("version", "column"), TYPE_PROBES)
def test_type_exclusions_still_fail(tmp_path: Path, version: str, column: str) -> None:
    """Each recorded type exclusion still fails in pylance (else the corpus should include it)."""
    assert probe_type(column, version, tmp_path / "probe") is not None
