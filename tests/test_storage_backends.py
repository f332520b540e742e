"""Nothing in the read path assumes a local filesystem: datasets read from `memory://`."""

from __future__ import annotations

from pathlib import Path

import fsspec
import lance
import pyarrow as pa

from format.dataset import dataset


def _copy_to_memory(local: Path, prefix: str) -> str:
    fs = fsspec.filesystem("memory")
    for path in local.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())
    return f"memory://{prefix}"


def test_corpus_reads_from_memory_store(corpus):
    checked = 0
    for ds in corpus:
        if ds.name not in ("types", "history", "deletes_bitmap", "stable_row_ids"):
            continue
        uri = _copy_to_memory(Path(ds.uri), f"mem-{ds.storage_version}-{ds.name}")
        ref = lance.dataset(ds.uri)
        ours = dataset(uri)
        assert ours.version == ref.version
        expected = ref.to_table(columns=ref.schema.names[:6], with_row_id=True)
        got = ours.to_table(columns=ref.schema.names[:6], with_row_id=True)
        assert got.schema == expected.schema
        # NaN-free columns only: values compared exactly
        for name in expected.column_names:
            if not pa.types.is_floating(expected.schema.field(name).type):
                assert got.column(name).equals(expected.column(name)), (ds.name, name)
        first = ref.versions()[0]["version"]
        assert ours.checkout_version(first).count_rows() == ref.checkout_version(first).count_rows()
        checked += 1
    assert checked == 8  # four datasets at two storage versions
