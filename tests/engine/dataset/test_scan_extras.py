"""pylance 14's row address prefilter (`row_addr_allowlist` / `_blocklist`), index segments
of a vector search and scan statistics callback, against pylance: the same rows through both
engines, by `scanner` keywords and by the builder's calls."""

from __future__ import annotations

import logging

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.dataset import ScannerBuilder as PylanceBuilder

from quiver.format.dataset import ScannerBuilder, dataset
from quiver.format.errors import InvalidInputError
from quiver.format.index.scalar.build import row_id_map

N = 300


def _map(addresses: list[int]) -> bytes:
    """A serialized row id map (pylance's RowAddrTreeMap) of row addresses."""
    return row_id_map(np.sort(np.asarray(addresses, np.uint64)))


ALLOW = _map([0, 1, 2, 5, 10, (1 << 32) + 3, (2 << 32) + 50, (2 << 32) + 60])
BLOCK = _map([1, 10, (1 << 32) + 3])
Q = np.random.default_rng(9).normal(size=4).astype(np.float32)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three fragments: a vector column (IVF_FLAT of two segments) and text (INVERTED)."""
    path = str(tmp_path_factory.mktemp("extras") / "d.lance")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(N, 4)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(N)),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4),
            "t": pa.array([f"w{i % 5} x{i % 7}" for i in range(N)]),
        }
    )
    lance.write_dataset(table.slice(0, 200), path, max_rows_per_file=100)
    lance.dataset(path).create_index("v", "IVF_FLAT", num_partitions=2)
    lance.write_dataset(table.slice(200), path, mode="append")
    lance.dataset(path).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(path).create_scalar_index("t", "INVERTED")
    return path


SCANS = [
    {"row_addr_allowlist": ALLOW},
    {"row_addr_blocklist": BLOCK},
    {"row_addr_allowlist": ALLOW, "row_addr_blocklist": BLOCK},
    {"row_addr_allowlist": ALLOW, "filter": "id > 1"},
    {"row_addr_allowlist": ALLOW, "limit": 3, "offset": 1},
    {"row_addr_blocklist": BLOCK, "limit": 5, "offset": 8, "with_row_id": True},
    {"row_addr_allowlist": ALLOW, "with_row_address": True},
    {"row_addr_allowlist": ALLOW, "nearest": {"column": "v", "q": Q, "k": 3}},
    {"row_addr_blocklist": BLOCK, "nearest": {"column": "v", "q": Q, "k": 4}},
    {
        "row_addr_allowlist": ALLOW,
        "nearest": {"column": "v", "q": Q, "k": 3},
        "filter": "id < 100",
        "prefilter": True,
    },
]


@pytest.mark.parametrize("options", SCANS)
def test_row_address_masks_as_pylance(uri: str, options: dict) -> None:
    expected = lance.dataset(uri).scanner(columns=["id"], **options).to_table()
    got = dataset(uri).scanner(columns=["id"], **options).to_table()
    if "nearest" in options:  # (distances to float rounding)
        assert got["id"].to_pylist() == expected["id"].to_pylist()
    else:
        assert got.equals(expected)


def test_full_text_masked_as_pylance(uri: str) -> None:
    """The same rows and scores (pylance orders equal scores its own way)."""

    def answers(ds: object) -> list:
        scan = ds.scanner(  # type: ignore[attr-defined]
            columns=["id"], full_text_query="w0", row_addr_allowlist=ALLOW
        )
        table = scan.to_table()
        scores = np.round(table["_score"], 5).tolist()
        return sorted(zip(table["id"].to_pylist(), scores, strict=True))

    assert answers(dataset(uri)) == answers(lance.dataset(uri))
    assert [i for i, _ in answers(dataset(uri))] == [0, 5, 10, 250, 260]


def test_builder_calls(uri: str) -> None:
    ours = ScannerBuilder(dataset(uri)).columns(["id"]).row_addr_prefilter(ALLOW, BLOCK)
    theirs = PylanceBuilder(lance.dataset(uri)).columns(["id"]).row_addr_prefilter(ALLOW, BLOCK)
    assert ours.to_scanner().to_table().equals(theirs.to_scanner().to_table())
    cleared = ours.row_addr_prefilter().to_scanner().to_table()
    assert cleared.num_rows == N


def test_index_segments_as_pylance(uri: str) -> None:
    """A vector search of some segments answers among their rows only (none of the
    unindexed ones), as pylance's."""
    segments = [str(s.uuid) for d in lance.dataset(uri).describe_indices() if d.name == "v_idx"
                for s in d.segments]  # fmt: skip
    assert len(segments) == 2
    for chosen in ([segments[0]], [segments[1]], segments):
        search = {"columns": ["id"], "nearest": {"column": "v", "q": Q, "k": 5}}
        expected = lance.dataset(uri).scanner(index_segments=chosen, **search).to_table()
        got = dataset(uri).scanner(index_segments=chosen, **search).to_table()
        assert got["id"].to_pylist() == expected["id"].to_pylist()
        built = ScannerBuilder(dataset(uri)).columns(["id"]).nearest("v", Q, k=5)
        assert built.with_index_segments(chosen).to_scanner().to_table()["id"].equals(got["id"])
    nearest = {"column": "v", "q": Q, "k": 5}
    for bad, why in [
        ([], "empty"),
        (["00000000-0000-0000-0000-000000000000"], "no segment"),
        (["x"], "not a uuid"),
    ]:
        with pytest.raises(InvalidInputError, match=why):
            dataset(uri).scanner(nearest=nearest, index_segments=bad).to_table()
    with pytest.raises(InvalidInputError, match="only supported for vector search"):
        dataset(uri).scanner(index_segments=segments).to_table()


def test_scan_statistics(uri: str, caplog: pytest.LogCaptureFixture) -> None:
    seen = []
    table = dataset(uri).scanner(columns=["id"], scan_stats_callback=seen.append).to_table()
    assert table.num_rows == N
    [stats] = seen
    theirs = []
    lance.dataset(uri).scanner(columns=["id"], scan_stats_callback=theirs.append).to_table()
    assert stats.all_counts == theirs[0].all_counts
    assert stats.bytes_read > 0 and stats.iops > 0
    for name in ("index_cache_hits", "index_comparisons", "indices_loaded", "parts_loaded"):
        assert isinstance(getattr(stats, name), int)

    def fails(_: object) -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR):
        assert dataset(uri).scanner(columns=["id"], scan_stats_callback=fails).to_table().num_rows
    assert "scan_stats_callback failed" in caplog.text


def test_bad_masks_are_refused(uri: str) -> None:
    for bad, why in [("x", "must be bytes"), (b"\x05\x00", "not a serialized row id map")]:
        with pytest.raises(InvalidInputError, match=why):
            dataset(uri).scanner(row_addr_allowlist=bad).to_table()
