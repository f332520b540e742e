"""Every dataset of the pylance-written corpus, at every version, reads exactly as pylance reads it.

Whole tables are compared (schema with types and nullability, values, nulls, row order),
with and without projections, filters, limits, offsets and row id columns.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table
from corpus import CorpusDataset, build_corpus

from quiver.format.dataset import dataset
from quiver.format.expr import compile_filter

pytestmark = [pytest.mark.compat, pytest.mark.slow]

# The structural (2.1+) versions of the corpus, written once per session.
STRUCTURAL_VERSIONS = ("2.1", "2.2", "2.3")


# (storage version, dataset) -> why Quiver does not read it yet.
NOT_READ_YET: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="session")
def structural_corpus(tmp_path_factory: pytest.TempPathFactory) -> list[CorpusDataset]:
    """The corpus at the 2.1, 2.2 and 2.3 storage versions (minus `NOT_READ_YET`)."""
    built = build_corpus(tmp_path_factory.mktemp("corpus_v21"), STRUCTURAL_VERSIONS)
    return [ds for ds in built if (ds.storage_version, ds.name) not in NOT_READ_YET]


@pytest.fixture
def corpus(corpus, structural_corpus):
    """Every corpus dataset: legacy and 2.0 (conftest) plus 2.1, 2.2 and 2.3."""
    return [*corpus, *structural_corpus]


def _filter_oracle(ref: lance.LanceDataset, flt: str, storage_version: str) -> pa.Table:
    """pylance's filtered table; on legacy files, where pylance's filter can see nulls its own
    reads turn into zeros, its unfiltered table filtered by Arrow instead."""
    expected = ref.to_table(filter=flt)
    if ref.describe_indices():  # an index-driven scan returns rows in index order, not ours
        expected = ref.to_table().filter(compile_filter(flt, ref.schema).expression)
        assert expected.sort_by(expected.column_names[0]).equals(
            ref.to_table(filter=flt).sort_by(expected.column_names[0])
        ), f"pylance's indexed filter {flt} disagrees with its scan"
    elif storage_version == "legacy":
        compiled = compile_filter(flt, ref.schema)
        consistent = ref.to_table().filter(compiled.expression)
        if consistent.num_rows != expected.num_rows:
            return consistent
    return expected


def _filters_for(schema: pa.Schema) -> list[str]:
    """A few filters that exercise each kind of column the schema has."""
    out = []
    for f in schema:
        name = f"`{f.name}`" if not f.name.isidentifier() else f.name
        t = f.type
        if pa.types.is_integer(t):
            out += [f"{name} > 3", f"{name} IS NULL", f"{name} IN (1, 2, 5) OR {name} < 0"]
        elif pa.types.is_floating(t) and not pa.types.is_float16(t):
            out.append(f"{name} BETWEEN -0.5 AND 0.5")
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            out += [f"{name} LIKE 'a%'", f"{name} IS NOT NULL AND {name} <> ''"]
        elif pa.types.is_boolean(t):
            out.append(f"NOT {name}")
        if len(out) >= 6:
            break
    return out


def test_every_version_reads_like_pylance(corpus):
    checked = 0
    for ds in corpus:
        ref_ds = lance.dataset(ds.uri)
        for v in ref_ds.versions():
            version = v["version"]
            ref = ref_ds.checkout_version(version)
            ours = dataset(ds.uri, version=version)
            what = f"{ds.name} ({ds.storage_version}) v{version}"
            assert ours.schema.equals(ref.schema, check_metadata=False), what
            assert_same_table(ours.to_table(), ref.to_table(), what)
            assert ours.count_rows() == ref.count_rows(), what
            assert [f.fragment_id for f in ours.get_fragments()] == [
                f.fragment_id for f in ref.get_fragments()
            ], what
            checked += 1
    assert checked >= len(corpus)


def test_projection_filter_limit_offset_and_row_ids(corpus):
    for ds in corpus:
        ref, ours = lance.dataset(ds.uri), dataset(ds.uri)
        what = f"{ds.name} ({ds.storage_version})"
        names = ref.schema.names
        cols = names[::-2] or names
        assert_same_table(ours.to_table(columns=cols), ref.to_table(columns=cols), f"{what} {cols}")
        n = ref.count_rows()
        for limit, offset in [(5, None), (None, 7), (13, n // 3), (0, None), (10, n + 5)]:
            assert_same_table(
                ours.to_table(limit=limit, offset=offset),
                ref.to_table(limit=limit, offset=offset),
                f"{what} limit={limit} offset={offset}",
            )
        assert_same_table(
            ours.to_table(columns=cols[:1], with_row_id=True),
            ref.to_table(columns=cols[:1], with_row_id=True),
            f"{what} with_row_id",
        )
        assert_same_table(
            ours.to_table(columns=cols[:1], with_row_address=True),
            ref.to_table(columns=cols[:1], with_row_address=True),
            f"{what} with_row_address",
        )
        for flt in _filters_for(ref.schema):
            expected = _filter_oracle(ref, flt, ds.storage_version)
            assert_same_table(ours.to_table(filter=flt), expected, f"{what} filter {flt}")
            assert ours.count_rows(filter=flt) == expected.num_rows, flt
            sub = ours.to_table(filter=flt, limit=3, offset=1, columns=cols[:2])
            assert_same_table(sub, expected.select(cols[:2]).slice(1, 3), f"{what} {flt} limit")


def test_take_and_fragments(corpus):
    for ds in corpus:
        ref, ours = lance.dataset(ds.uri), dataset(ds.uri)
        n = ref.count_rows()
        if n == 0:
            continue
        idx = sorted({0, n - 1, n // 2, n // 3, 1 % n})
        idx = [idx[-1], *idx[:-1], idx[0]]  # out of order, with a duplicate
        assert_same_table(ours.take(idx), ref.take(idx), f"{ds.name} take {idx}")
        for fo, fr in zip(ours.get_fragments(), ref.get_fragments(), strict=True):
            assert fo.count_rows() == fr.count_rows()
            assert_same_table(fo.to_table(), fr.to_table(), f"{ds.name} fragment {fo.fragment_id}")


def test_streaming_batches_are_bounded(corpus):
    for ds in corpus:
        ours = dataset(ds.uri)
        scanner = ours.scanner(batch_size=64)
        batches = list(scanner.to_batches())
        assert all(b.num_rows <= 64 for b in batches)
        total = pa.Table.from_batches(batches, schema=scanner.projected_schema) if batches else None
        if total is not None:
            assert_same_table(total, lance.dataset(ds.uri).to_table(), f"{ds.name} batch_size=64")
