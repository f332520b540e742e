"""The lean take of list-of-binary rows (`IndexFile.take_list_bytes`: an index's posting
lists) against the generic take of the same rows, on files of several pages, layouts the
lean path does not read, and damaged repetition indices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from quiver.format.errors import CorruptFileError
from quiver.format.file.base import ListBytes
from quiver.format.file.v20.writer import V2FileWriter
from quiver.format.file.v21.writer import StructuralFileWriter
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store
from quiver.format.table.schema import LanceSchema

LISTS = pa.large_list(pa.large_binary())


def _lists(rows: int, value_bytes: tuple[int, int], seed: int = 0) -> pa.Array:
    """`rows` lists of 1-40 values of random bytes, sizes in `value_bytes`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        sizes = rng.integers(*value_bytes, size=int(rng.integers(1, 40)))
        out.append([rng.bytes(int(n)) for n in sizes])
    return pa.array(out, LISTS)


def _file(tmp_path: Path, column: pa.Array, version: str = "2.2") -> IndexFile:
    """An index file of one column `postings` (small pages: several per column)."""
    table = pa.table({"postings": column, "n": pa.array(np.arange(len(column)), pa.uint32())})
    schema = LanceSchema.from_arrow(table.schema)
    with open(tmp_path / "f.lance", "wb") as sink:
        if version == "2.0":
            writer = V2FileWriter(sink, schema, path_for_errors="f.lance", page_bytes=1 << 16)
        else:
            writer = StructuralFileWriter(
                sink, schema, version=version, path_for_errors="f.lance", page_bytes=1 << 16
            )
        writer.write(table)
        writer.finish()
    return IndexFile(open_store(str(tmp_path)), "f.lance")


def _rows(found: ListBytes, count: int) -> list[list[bytes]]:
    out = []
    for i in range(count):
        data, offsets = found.row(i)
        out.append([data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    return out


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_lean_take_equals_the_generic_take_across_pages(tmp_path: Path, version: str) -> None:
    column = _lists(600, (200, 3000))
    with _file(tmp_path, column, version) as f:
        field = f.field("postings")
        pages = f._reader._plan([field])[0][1][0].info.pages
        assert len(pages) > 3  # rows come from several pages, in one take
        rng = np.random.default_rng(1)
        for size in (1, 2, 7, 64, 600):
            rows = np.sort(rng.choice(600, size, replace=False)).astype(np.uint64)
            lean = f._reader.take_list_bytes(field, rows)
            assert lean is not None  # full-zip pages of plain values: read lean
            assert _rows(lean, size) == column.take(pa.array(rows)).to_pylist()
            assert _rows(f.take_list_bytes("postings", rows), size) == _rows(lean, size)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_other_layouts_are_taken_generically(tmp_path: Path, version: str) -> None:
    # small values go into mini-block pages (2.2), and 2.0 files have no full-zip pages
    column = _lists(300, (1, 12))
    with _file(tmp_path, column, version) as f:
        rows = np.array([0, 5, 17, 299], np.uint64)
        assert f._reader.take_list_bytes(f.field("postings"), rows) is None
        found = f.take_list_bytes("postings", rows)
        assert _rows(found, 4) == column.take(pa.array(rows)).to_pylist()


def test_flat_form_of_arrow_lists_with_nulls_and_slices() -> None:
    column = pa.array([[b"ab", b""], None, [b"xyz"], []], LISTS)
    for part in (column, column.slice(1), pa.chunked_array([column.slice(0, 2), column[2:]])):
        found = ListBytes.of(part)
        expected = [x or [] for x in part.to_pylist()]
        assert _rows(found, len(expected)) == expected


def test_a_damaged_repetition_index_is_named(tmp_path: Path) -> None:
    column = _lists(400, (200, 3000))
    with _file(tmp_path, column) as f:
        col = f._reader._plan([f.field("postings")])[0][1][0]
        ri_pos, ri_size = col.info.pages[0].buffers[1]
    raw = bytearray((tmp_path / "f.lance").read_bytes())
    # row 1's end before its start
    raw[ri_pos + 8 : ri_pos + 16] = (2**40).to_bytes(8, "little")
    (tmp_path / "f.lance").write_bytes(bytes(raw))
    with _file_reopened(tmp_path) as f:
        with pytest.raises(CorruptFileError, match="repetition index"):
            f.take_list_bytes("postings", np.array([0, 1], np.uint64))


def _file_reopened(tmp_path: Path) -> IndexFile:
    return IndexFile(open_store(str(tmp_path)), "f.lance")
