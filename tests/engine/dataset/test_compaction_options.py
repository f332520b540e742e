"""pylance 14's newer `compact_files` options through both engines on twin datasets: the
fragments after (rows per fragment, in order), the rows, the metrics and the new files'
storage version compared with pylance's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError

SIZES = [60, 60, 500, 40, 40, 40, 30, 30]


def _twins(tmp_path: Path, version: str = "2.0") -> tuple[str, str]:
    base = str(tmp_path / "base")
    start = 0
    for i, n in enumerate(SIZES):
        rows = pa.table(
            {"a": pa.array(range(start, start + n), pa.int64()), "s": [f"v{k}" for k in range(n)]}
        )
        lance.write_dataset(
            rows, base, mode="create" if i == 0 else "append", data_storage_version=version
        )
        start += n
    lance.dataset(base).delete("a % 9 = 0")
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)
    return ours, theirs


def _layout(uri: str) -> list[int]:
    return [f.physical_rows for f in lance.dataset(uri).get_fragments()]


def _metrics(m: Any) -> tuple[int, int, int, int]:
    return (m.fragments_removed, m.fragments_added, m.files_removed, m.files_added)


OPTIONS = [
    {"excluded_fragment_ids": [4]},
    {"excluded_fragment_ids": [0, 99, 99]},
    {"max_source_fragments": 3},
    {"max_source_fragments": 1},
    {"max_source_rows": 150},
    {"max_source_rows": 1000},
    {"max_source_bytes": 1},
    {"data_storage_version": "2.1"},
    {"compaction_mode": "try_binary_copy"},
    {"batch_size": 7},
    {"max_bytes_per_file": 1 << 30},
    {"max_bytes_per_file": 600},  # checked as pages are flushed: small files stay whole
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_compaction_options_as_pylance(tmp_path: Path, options: dict) -> None:
    ours, theirs = _twins(tmp_path)
    mine = dataset(ours).optimize.compact_files(target_rows_per_fragment=100, **options)
    ref = lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100, **options)
    assert _metrics(mine) == _metrics(ref)
    assert _layout(ours) == _layout(theirs)
    assert lance.dataset(ours).to_table() == lance.dataset(theirs).to_table()
    versions = {
        (df.file_major_version, df.file_minor_version)
        for f in lance.dataset(ours).get_fragments()
        for df in [f.metadata.data_files()[0]]
    }
    expected = {
        (df.file_major_version, df.file_minor_version)
        for f in lance.dataset(theirs).get_fragments()
        for df in [f.metadata.data_files()[0]]
    }
    assert versions == expected


def test_compaction_option_defaults_from_the_config(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path)
    for uri in (ours, theirs):
        lance.dataset(uri).update_config(
            {
                "lance.compaction.target_rows_per_fragment": "100",
                "lance.compaction.max_source_fragments": "3",
            }
        )
    dataset(ours).optimize.compact_files()
    lance.dataset(theirs).optimize.compact_files()
    assert _layout(ours) == _layout(theirs)


def test_compaction_options_refused(tmp_path: Path) -> None:
    ours, _ = _twins(tmp_path)
    ds = dataset(ours)
    version = ds.version
    for options, error in [
        ({"compaction_mode": "force_binary_copy"}, UnsupportedFeatureError),  # deleted rows
        ({"defer_index_remap": "yes"}, InvalidInputError),
        ({"compaction_mode": "fast"}, InvalidInputError),
        ({"max_source_rows": 0}, InvalidInputError),
        ({"data_storage_version": "legacy"}, InvalidInputError),
        ({"no_such_option": 1}, InvalidInputError),
    ]:
        with pytest.raises(error):
            ds.optimize.compact_files(target_rows_per_fragment=100, **options)
    assert lance.dataset(ours).version == version


def _copy_twins(tmp_path: Path, version: str, stable: bool) -> tuple[str, str]:
    """Twins of small fragments without deletions (binary copy's case), several pages each."""
    base = str(tmp_path / "copy-base")
    start = 0
    for i, n in enumerate([40, 25, 60, 30, 45]):
        ids = range(start, start + n)
        rows = pa.table(
            {
                "a": pa.array(ids, pa.int64()),
                "s": [None if k % 5 == 0 else f"v{k}" for k in ids],
                "l": [[k] * (k % 3) for k in ids],
                "st": [{"x": k, "y": [f"y{k}"] * (k % 2)} for k in ids],
            }
        )
        lance.write_dataset(
            rows,
            base,
            mode="create" if i == 0 else "append",
            data_storage_version=version,
            max_rows_per_group=16,
            enable_stable_row_ids=stable,
        )
        start += n
    ours, theirs = str(tmp_path / "copy-ours"), str(tmp_path / "copy-theirs")
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)
    return ours, theirs


def _new_files(uri: str) -> list[bytes]:
    return [
        (Path(uri) / "data" / f.data_files()[0].path).read_bytes()
        for f in lance.dataset(uri).get_fragments()
    ]


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("mode", ["try_binary_copy", "force_binary_copy"])
def test_binary_copy_writes_pylances_files(
    tmp_path: Path, mode: str, version: str, stable: bool
) -> None:
    """Pages copied without decoding them: the same files as pylance's, byte for byte, the
    same fragments, rows and row ids (2.0 files: buffers back to back, a struct's column
    one page for every row)."""
    ours, theirs = _copy_twins(tmp_path, version, stable)
    mine = dataset(ours).optimize.compact_files(target_rows_per_fragment=70, compaction_mode=mode)
    ref = lance.dataset(theirs).optimize.compact_files(
        target_rows_per_fragment=70, compaction_mode=mode
    )
    assert _metrics(mine) == _metrics(ref) and _layout(ours) == _layout(theirs)
    assert _new_files(ours) == _new_files(theirs)
    columns = ["a", "_rowid", "_rowaddr"]
    assert lance.dataset(ours).to_table(columns=columns) == lance.dataset(theirs).to_table(
        columns=columns
    )
    assert dataset(ours).to_table() == lance.dataset(theirs).to_table()


def test_binary_copy_where_pylance_would_not(tmp_path: Path) -> None:
    """Deleted rows rule binary copy out: "try" re-encodes (as pylance), "force" refuses
    (as pylance) and commits nothing."""
    ours, theirs = _copy_twins(tmp_path, "2.1", False)
    for uri in (ours, theirs):
        lance.dataset(uri).delete("a = 3")
    version = lance.dataset(ours).version
    with pytest.raises(UnsupportedFeatureError, match="deleted rows"):
        dataset(ours).optimize.compact_files(compaction_mode="force_binary_copy")
    with pytest.raises(OSError, match="binary copy is not supported"):
        lance.dataset(theirs).optimize.compact_files(compaction_mode="force_binary_copy")
    assert lance.dataset(ours).version == version
    dataset(ours).optimize.compact_files(compaction_mode="try_binary_copy")
    lance.dataset(theirs).optimize.compact_files(compaction_mode="try_binary_copy")
    assert _layout(ours) == _layout(theirs)
    assert lance.dataset(ours).to_table() == lance.dataset(theirs).to_table()
