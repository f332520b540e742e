"""IVF_RQ (RaBitQ) indices: those pylance 14 builds searched by Quiver's engine with
pylance's answers (every metric, one to nine bits a dimension, dimensions a power of two or
not, nprobes given or pylance's own, refine factors, each `approx_mode`, prefilters and
postfilters, appended and
deleted rows; the statistics pylance reports), and those Quiver builds: each row encoded as
pylance encodes it (codes and factors to the bit, given pylance's rotation), searched by
pylance with Quiver's answers, about as good as pylance's own; extended by optimize_indices
and remapped by compaction by either engine; bad parameters refused as pylance refuses them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset

pytestmark = pytest.mark.compat


def _write(path: Path, dim: int, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, dim)).astype(np.float32) * 3
    x = (centers[rng.integers(0, 6, rows)] + rng.normal(size=(rows, dim))).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(rows)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim),
        }
    )
    lance.write_dataset(table, str(path), max_rows_per_file=rows // 2)
    return x


def _answers(ds: Any, **kw: Any) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(columns=["id"], with_row_id=True, **kw)


def _same(uri: str, queries: np.ndarray, searches: list[dict], what: str) -> None:
    """The same rows in the same order, distances within float32 rounding (pylance's and
    Quiver's agree to the bit on AVX-512 machines; other CPUs sum pylance's lanes otherwise)."""
    for q in queries:
        for search in searches:
            for extra in ({}, {"filter": "id % 3 = 0", "prefilter": True}, {"filter": "id < 900"}):
                kw = {"nearest": {"column": "vec", "q": q, **search}, **extra}
                theirs, ours = _answers(lance.dataset(uri), **kw), _answers(dataset(uri), **kw)
                label = f"{what} {search} {extra}"
                assert ours["_rowid"].equals(theirs["_rowid"]), label
                a, b = ours["_distance"].to_numpy(), theirs["_distance"].to_numpy()
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=label)


SEARCHES = [
    {"k": 10, "nprobes": 1},
    {"k": 10, "nprobes": 3},
    {"k": 5},
    {"k": 7, "nprobes": 2, "refine_factor": 3},
    # pylance's approx_mode: the sign bits' estimate alone, or a 16-bit FastScan table
    {"k": 10, "nprobes": 3, "approx_mode": "fast"},
    {"k": 10, "nprobes": 3, "approx_mode": "accurate"},
    {"k": 6, "approx_mode": "accurate", "refine_factor": 2},
]


@pytest.mark.parametrize(
    ("metric", "dim", "bits"),
    [("l2", 32, 1), ("l2", 40, 5), ("cosine", 64, 3), ("dot", 24, 9), ("l2", 128, 2)],
)
def test_pylance_rq_indices_answer_as_pylance(
    tmp_path: Path, metric: str, dim: int, bits: int
) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, dim, 1800, dim + bits)
    lance.dataset(str(uri)).create_index(
        "vec", "IVF_RQ", metric=metric, num_partitions=5, num_bits=bits
    )
    rng = np.random.default_rng(bits)
    queries = x[rng.integers(0, len(x), 3)] + rng.normal(size=(3, dim)).astype(np.float32) * 0.3
    _same(str(uri), queries, SEARCHES, f"{metric} d{dim} b{bits}")


def test_rq_statistics_appends_deletes_and_refusals(tmp_path: Path) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, 32, 1600, 4)
    lance.dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=4, num_bits=4)
    theirs = lance.dataset(str(uri)).stats.index_stats("vec_idx")
    ours = dataset(str(uri)).stats.index_stats("vec_idx")
    assert {k: v for k, v in ours.items() if k != "updated_at_timestamp_ms"} == {
        k: v for k, v in theirs.items() if k != "updated_at_timestamp_ms"
    }
    appended = pa.table(
        {
            "id": pa.array(np.arange(1600, 1700)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x[:100].ravel() + 0.01), 32),
        }
    )
    lance.write_dataset(appended, str(uri), mode="append")
    lance.dataset(str(uri)).delete("id % 7 = 0")
    _same(str(uri), x[[3, 500]], SEARCHES[:3], "after an append and a delete")
    # Quiver's optimize_indices encodes the appended rows with the index's own rotation
    dataset(str(uri)).optimize.optimize_indices()
    assert lance.dataset(str(uri)).stats.index_stats("vec_idx")["num_unindexed_rows"] == 0
    _same(str(uri), x[[3, 500]], SEARCHES[:3], "after Quiver's optimize_indices")
    # compaction remaps the index: its codes unpacked, given the new row ids, packed again
    dataset(str(uri)).optimize.compact_files(target_rows_per_fragment=100_000)
    assert lance.dataset(str(uri)).stats.index_stats("vec_idx")["num_unindexed_rows"] == 0
    _same(str(uri), x[[3, 500]], [{"k": 10, "nprobes": 4}], "after Quiver's compaction")


# -- builds ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("metric", "dim", "bits"),
    [
        ("l2", 32, 1),
        ("l2", 40, 5),
        ("cosine", 64, 3),
        ("dot", 24, 9),
        ("l2", 72, 7),
        ("dot", 16, 2),
    ],
)
def test_rows_encoded_as_pylance_encodes_them(
    tmp_path: Path, metric: str, dim: int, bits: int
) -> None:
    """pylance builds; Quiver encodes every row again with that index's rotation, centroids
    and partitions: the same sign codes, extended codes and factors, to the bit, and the
    packed layouts round-trip."""
    from quiver.format.index.vector import rq as _rq
    from quiver.format.index.vector import rq_build
    from quiver.format.index.vector.index import open_vector_index
    from quiver.format.table.indices import indices_of

    uri = tmp_path / "rq.lance"
    x = _write(uri, dim, 1500, 7 * dim + bits)
    lance.dataset(str(uri)).create_index(
        "vec", "IVF_RQ", metric=metric, num_partitions=4, num_bits=bits
    )
    index = dataset(str(uri)).core
    entry = indices_of(index.manifest)[0]
    vi = open_vector_index(index.store, entry.directory, entry.uuid, entry.name)
    q = vi.storage
    ids = lance.dataset(str(uri)).to_table(columns=["id"], with_row_id=True)
    where = dict(zip(ids["_rowid"].to_pylist(), ids["id"].to_pylist(), strict=True))
    width = dim // 8
    for p in range(vi.ivf.num_partitions):
        stored = vi.rq_partition(p)
        rows = x[[where[int(r)] for r in stored.row_ids]]
        if metric == "cosine":
            rows = _rq.normalized(rows)
        records = rq_build.encode(q, vi.ivf.centroids, rows, np.full(len(rows), p))
        bits_ = np.unpackbits(records[:, :width], axis=1, bitorder="little")
        nibbles = (bits_.reshape(len(rows), dim // 4, 4).astype(np.int64) << np.arange(4)).sum(-1)
        assert np.array_equal(nibbles, stored.nibbles)
        factors = records[:, width : width + 12].copy().view("<f4")
        for i, name in enumerate(("add", "scale", "error")):
            assert np.array_equal(factors[:, i], getattr(stored, name)), name
        signs = rq_build._pack_signs(records[:, :width])
        assert np.array_equal(
            _rq._unpack_signs(signs.ravel(), len(rows), width), records[:, :width]
        )
        if bits > 1:
            at = width + 12
            assert np.array_equal(records[:, at : at + dim], stored.ex)
            ex_factors = records[:, at + dim :].copy().view("<f4")
            assert np.array_equal(ex_factors[:, 0], stored.add_ex)
            assert np.array_equal(ex_factors[:, 1], stored.scale_ex)
            packed = rq_build._pack_ex(records[:, at : at + dim], bits - 1)
            assert np.array_equal(_rq._unpack_ex(packed, bits - 1, dim), records[:, at : at + dim])


@pytest.mark.parametrize(
    ("metric", "dim", "bits"),
    [("l2", 32, 1), ("l2", 40, 5), ("cosine", 64, 3), ("dot", 24, 9), ("l2", 128, 2)],
)
def test_quiver_built_rq_indices_are_searched_alike(
    tmp_path: Path, metric: str, dim: int, bits: int
) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, dim, 1800, dim + bits)
    dataset(str(uri)).create_index("vec", "IVF_RQ", metric=metric, num_partitions=5, num_bits=bits)
    theirs = lance.dataset(str(uri))
    [described] = theirs.describe_indices()
    assert described.index_type == "IVF_RQ"
    assert theirs.stats.index_stats("vec_idx")["indices"][0]["sub_index"]["num_bits"] == bits
    rng = np.random.default_rng(bits)
    queries = x[rng.integers(0, len(x), 3)] + rng.normal(size=(3, dim)).astype(np.float32) * 0.3
    _same(str(uri), queries, SEARCHES, f"Quiver-built {metric} d{dim} b{bits}")


def test_quiver_built_manifest_entry_and_recall(tmp_path: Path) -> None:
    """The manifest entry as pylance writes one (index version 2, the `rq` details, pylance's
    hints); recall@10 against exact search about pylance's own index's."""
    from quiver.format.proto import index_pb2
    from quiver.format.table.indices import indices_of

    x = _write(tmp_path / "q", 64, 4000, 11)
    _write(tmp_path / "p", 64, 4000, 11)
    dataset(str(tmp_path / "q")).create_index("vec", "IVF_RQ", num_partitions=6, seed=7)
    lance.dataset(str(tmp_path / "p")).create_index("vec", "IVF_RQ", num_partitions=6)
    entries = [indices_of(dataset(str(tmp_path / n)).core.manifest)[0].pb for n in ("q", "p")]
    assert entries[0].index_version == entries[1].index_version == 2
    details = [index_pb2.VectorIndexDetails.FromString(e.index_details.value) for e in entries]
    assert details[0] == details[1]
    assert details[0].rq.num_bits == 5
    rng = np.random.default_rng(3)
    recall = {"q": 0, "p": 0}
    for _ in range(50):
        q = x[rng.integers(0, len(x))] + rng.normal(size=64).astype(np.float32) * 0.5
        truth = set(np.argsort(((x - q) ** 2).sum(axis=1))[:10].tolist())
        for name in recall:
            found = _answers(lance.dataset(str(tmp_path / name)), nearest={
                "column": "vec", "q": q, "k": 10, "nprobes": 3})["id"].to_pylist()  # fmt: skip
            recall[name] += len(truth & set(found))
    # Of 500. pylance's builds draw a fresh rotation each time (recall 455-480 over repeated
    # builds of this table), so the margin covers its spread, not a loss of Quiver's.
    assert recall["q"] >= recall["p"] - 25, recall


def test_pylance_extends_and_compacts_quiver_built(tmp_path: Path) -> None:
    uri = tmp_path / "rq.lance"
    x = _write(uri, 32, 1600, 5)
    dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=4, num_bits=4)
    appended = pa.table(
        {
            "id": pa.array(np.arange(1600, 1800)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x[:200].ravel() + 0.01), 32),
        }
    )
    lance.write_dataset(appended, str(uri), mode="append")
    lance.dataset(str(uri)).optimize.optimize_indices()
    _same(str(uri), x[[3, 900]], SEARCHES[:3], "after pylance's optimize_indices")
    lance.dataset(str(uri)).delete("id % 5 = 0")
    lance.dataset(str(uri)).optimize.compact_files(target_rows_per_fragment=100_000)
    _same(str(uri), x[[3, 900]], [{"k": 10, "nprobes": 4}], "after pylance's compaction")


def test_bad_rq_parameters_refused(tmp_path: Path) -> None:
    from quiver.format.errors import InvalidInputError

    uri = tmp_path / "rq.lance"
    _write(uri, 12, 300, 1)
    with pytest.raises(InvalidInputError, match="divisible by 8 for IVF_RQ"):
        dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=2)
    uri = tmp_path / "rq8.lance"
    _write(uri, 16, 300, 1)
    for bits in (0, 10, 2.5, "5"):
        with pytest.raises(InvalidInputError, match="num_bits must be in 1..=9"):
            dataset(str(uri)).create_index("vec", "IVF_RQ", num_partitions=2, num_bits=bits)
    assert not dataset(str(uri)).list_indices()
    q = np.zeros(16, np.float32)
    for mode in ("quick", None, 1):
        with pytest.raises(InvalidInputError, match="approx_mode must be one of"):
            dataset(str(uri)).to_table(nearest={"column": "vec", "q": q, "approx_mode": mode})


def test_rows_at_their_centroid_and_kernel_arguments() -> None:
    """A row equal to its centroid (a zero residual) gets zero extended codes and finite
    factors; the kernels refuse buffers of the wrong size."""
    from quiver.format import _kernels
    from quiver.format.index.vector import rq_build

    rng = np.random.default_rng(5)
    q = rq_build.new_quantizer(16, 4, "l2", rng)
    centroids = rng.normal(size=(2, 16)).astype(np.float32)
    rows = np.vstack([centroids[1], centroids[0] + 1.0]).astype(np.float32)
    records = rq_build.encode(q, centroids, rows, np.array([1, 0]))
    at = 16 // 8 + 12
    assert not records[0, at : at + 16].any()
    assert np.isfinite(records[:, 2:at].copy().view("<f4")).all()
    with pytest.raises(ValueError, match="rq_rotate"):
        _kernels.rq_rotate(np.zeros(12, np.float32), 12, np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="rq_ex_codes"):
        _kernels.rq_ex_codes(
            np.zeros(16, np.float32), 16, 9, np.zeros(16, np.uint8), np.zeros(1, np.float32)
        )


@pytest.mark.parametrize(("metric", "bits"), [("l2", 5), ("dot", 1), ("cosine", 3)])
def test_distance_ranges_fill_k_inside_the_range(tmp_path: Path, metric: str, bits: int) -> None:
    """With a distance_range, rows outside it never enter the search's heap (pylance's):
    k rows inside the range when there are, not the range applied to the k best."""
    uri = tmp_path / "rq.lance"
    x = _write(uri, 32, 1500, bits)
    dataset(str(uri)).create_index("vec", "IVF_RQ", metric=metric, num_partitions=3, num_bits=bits)
    for q in x[[4, 700]] + np.float32(0.05):
        base = _answers(lance.dataset(str(uri)), nearest={"column": "vec", "q": q, "k": 20})
        d = base["_distance"].to_numpy()
        for bounds in ((None, float(d[8])), (float(d[2]), float(d[15])), (float(d[1]), None)):
            search = {"k": 10, "nprobes": 2, "distance_range": bounds}
            kw = {"nearest": {"column": "vec", "q": q, **search}}
            theirs, ours = (
                _answers(lance.dataset(str(uri)), **kw),
                _answers(dataset(str(uri)), **kw),
            )
            assert ours["_rowid"].equals(theirs["_rowid"]), (metric, bounds)
            assert ours.num_rows == 10 or bounds[1] is not None, bounds


@pytest.mark.parametrize(("metric", "bits"), [("l2", 5), ("cosine", 2), ("dot", 9)])
def test_a_given_rotation_builds_pylance_s_rows(tmp_path: Path, metric: str, bits: int) -> None:
    """`rabitq_model` (pylance's `build_rq_model`) and the same centroids: Quiver's
    `auxiliary.idx` holds pylance's rows, codes and factors, column for column."""
    from lance.lance import indices

    _same_rows_from(
        tmp_path, metric, bits, indices.build_rq_model(32, num_bits=bits, dtype="float32")
    )


# A rotation under which one row (481, of the first partition) has two code steps of its
# rescale sweep at the same t: pylance's unstable sort leaves dimension 27's step before
# dimension 22's, and in that order the sweep's float32 sums pick a rescale near 576.6 (in
# dimension order, one near 604.5: codes 228, 25, 158, ... for pylance's 229, 24, 151, ...).
TIED_STEPS_MODEL = (
    '{"rotate_mat_position":null,"fast_rotation_signs":[215,206,183,155,189,5,147,184,183,105,'
    '202,97,143,0,41,120],"rotation_type":"fast","code_dim":32,"num_bits":9,"packed":false,'
    '"query_estimator":"raw_query"}'
)


def test_rescale_steps_at_one_t_taken_in_pylance_s_order(tmp_path: Path) -> None:
    _same_rows_from(tmp_path, "dot", 9, TIED_STEPS_MODEL)


# Under any rotation: with these rows (3,000, seed 313) row 71 is 115.678307 from the first
# centroid and 115.678288 from the fourth; a matrix product of the whole chunk ranks them the
# other way round from pylance's float32 distance.
NEAR_TIE_MODEL = (
    '{"rotate_mat_position":null,"fast_rotation_signs":[238,185,66,12,99,196,162,234,234,74,'
    '227,158,66,215,212,34],"rotation_type":"fast","code_dim":32,"num_bits":9,"packed":false,'
    '"query_estimator":"raw_query"}'
)


def test_a_row_between_two_centroids_goes_where_pylance_puts_it(tmp_path: Path) -> None:
    _same_rows_from(tmp_path, "l2", 9, NEAR_TIE_MODEL, rows=3000, seed=313)


def _same_rows_from(
    tmp_path: Path, metric: str, bits: int, model: str, *, rows: int = 1500, seed: int = 9
) -> None:
    """Quiver and pylance build with rotation `model` and the same centroids: the same
    `auxiliary.idx`, column for column."""
    from lance.file import LanceFileReader

    x = _write(tmp_path / "q", 32, rows, seed)
    _write(tmp_path / "p", 32, rows, seed)
    centroids = x[:4]
    for name, engine in (("q", dataset), ("p", lance.dataset)):
        engine(str(tmp_path / name)).create_index(
            "vec", "IVF_RQ", metric=metric, num_bits=bits, ivf_centroids=centroids,
            rabitq_model=model,
        )  # fmt: skip
    tables = [
        LanceFileReader(str(next((tmp_path / n / "_indices").glob("*/auxiliary.idx"))))
        .read_all()
        .to_table()
        for n in ("q", "p")
    ]
    assert tables[0].schema.metadata == tables[1].schema.metadata
    assert tables[0].equals(tables[1])


def test_bad_rotations_refused(tmp_path: Path) -> None:
    import json

    from lance.lance import indices

    from quiver.format.errors import InvalidInputError

    uri = tmp_path / "rq.lance"
    _write(uri, 16, 300, 1)
    model = json.loads(indices.build_rq_model(16, num_bits=3, dtype="float32"))
    for change, message in (
        ({"num_bits": 5}, "num_bits=5 does not match requested num_bits=3"),
        ({"code_dim": 24}, "dimension=24 does not match vector dimension=16"),
        ({"rotation_type": "matrix"}, "matrix rotation"),
        ({"fast_rotation_signs": [1, 2]}, "must be 8 bytes"),
    ):
        with pytest.raises(InvalidInputError, match=message):
            dataset(str(uri)).create_index(
                "vec", "IVF_RQ", num_partitions=2, num_bits=3,
                rabitq_model=json.dumps({**model, **change}),
            )  # fmt: skip
    with pytest.raises(InvalidInputError, match="invalid rabitq_model JSON"):
        dataset(str(uri)).create_index("vec", "IVF_RQ", num_bits=3, rabitq_model="{")
    with pytest.raises(InvalidInputError, match="option of IVF_RQ"):
        dataset(str(uri)).create_index("vec", "IVF_FLAT", rabitq_model=json.dumps(model))
    assert not dataset(str(uri)).list_indices()
