"""Randomized differential test: sequences of operations alternating between pylance and our
engine on one dataset, every version compared through both engines after every operation.

One seed per stable-row-id setting runs by default; more on demand:
`QUIVER_DIFFERENTIAL_SEEDS=40 pytest tests/engine/dataset/test_differential.py` runs seeds
0..39, `QUIVER_DIFFERENTIAL_SEEDS=7,12` those two. A failure prints the operations so far.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

import format.dataset as ours_engine
from format.dataset import dataset

STEPS = 30
ENGINES: dict[str, Any] = {"pylance": lance, "ours": ours_engine}


def _seeds() -> list[int]:
    spec = os.environ.get("QUIVER_DIFFERENTIAL_SEEDS", "").strip()
    if not spec:
        return [0]
    if "," in spec or not spec.isdigit():
        return [int(s) for s in spec.split(",") if s.strip()]
    return list(range(int(spec)))


class _Sequence:
    """One dataset, the random operations applied to it, and their log."""

    def __init__(self, uri: str, seed: int, stable: bool) -> None:
        self.uri = uri
        self.rng = random.Random(seed)
        self.stable = stable
        self.next_id = 0
        self.names = 0
        self.log: list[str] = []

    # -- data --------------------------------------------------------------------------
    def rows(self, schema: pa.Schema, n: int) -> pa.Table:
        """`n` new rows for `schema`: fresh ids, random values and nulls in other columns."""
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        columns = []
        for field in schema:
            if field.name == "id":
                columns.append(pa.array(ids, field.type))
                continue
            t = field.type
            null = [self.rng.random() < 0.2 for _ in ids]
            if pa.types.is_integer(t):
                values = [None if z else self.rng.randint(-100, 100) for z in null]
            elif pa.types.is_floating(t):
                values = [None if z else self.rng.uniform(-10, 10) for z in null]
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                values = [None if z else f"v{self.rng.randint(0, 50)}" for z in null]
            else:
                values = [None] * n
            columns.append(pa.array(values, t))
        return pa.Table.from_arrays(columns, schema=schema)

    def base_table(self, n: int) -> pa.Table:
        schema = pa.schema(
            [pa.field("id", pa.int64()), pa.field("f", pa.float32()), pa.field("s", pa.string())]
        )
        return self.rows(schema, n)

    def fresh_name(self) -> str:
        self.names += 1
        return f"c{self.names}"

    # -- operations ----------------------------------------------------------------------
    def step(self, k: int) -> None:
        """Apply one random operation with a random engine."""
        name = self.rng.choice(["pylance", "ours"])
        engine = ENGINES[name]
        ds = engine.dataset(self.uri)
        schema = lance.dataset(self.uri).schema
        others = [n for n in schema.names if n != "id"]
        ops: list[tuple[str, Callable[[], Any]]] = []
        n = self.rng.randint(1, 15)
        ops.append(
            ("append", lambda: engine.write_dataset(self.rows(schema, n), self.uri, mode="append"))
        )
        if self.rng.random() < 0.3:
            table = self.base_table(self.rng.randint(1, 20))
            ops.append(
                ("overwrite", lambda: engine.write_dataset(table, self.uri, mode="overwrite"))
            )
        mod, rem = self.rng.randint(2, 6), self.rng.randint(0, 5)
        ops.append((f"delete id % {mod} = {rem}", lambda: ds.delete(f"id % {mod} = {rem}")))
        new = self.fresh_name()
        sql = self.rng.choice(["id * 2", "CAST(id AS INT)", "id % 7"])
        ops.append((f"add_columns {new}={sql}", lambda: ds.add_columns({new: sql})))
        if len(others) >= 2:
            victim = self.rng.choice(others)
            ops.append((f"drop_columns {victim}", lambda: ds.drop_columns([victim])))
        if others:
            col = self.rng.choice(others)
            renamed = self.fresh_name()
            ops.append(
                (
                    f"rename {col}->{renamed}",
                    lambda: ds.alter_columns({"path": col, "name": renamed}),
                )
            )
            wider = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}.get(schema.field(col).type)
            if wider is not None:
                ops.append(
                    (
                        f"cast {col} to {wider}",
                        lambda: ds.alter_columns({"path": col, "data_type": wider}),
                    )
                )
        target = self.rng.choice([5, 20, 1000])
        ops.append(
            (
                f"compact_files target={target}",
                lambda: ds.optimize.compact_files(target_rows_per_fragment=target),
            )
        )
        ops.append(
            (
                "cleanup_old_versions",
                lambda: ds.cleanup_old_versions(
                    older_than=dt.timedelta(0), error_if_tagged_old_versions=False
                ),
            )
        )
        versions = [v["version"] for v in lance.dataset(self.uri).versions()]
        old = self.rng.choice(versions)
        ops.append((f"restore {old}", lambda: engine.dataset(self.uri, version=old).restore()))
        tag = f"t{k}"
        ops.append((f"tag {tag}", lambda: ds.tags.create(tag, ds.version)))
        ops.append(
            (
                "pylance create_scalar_index id",
                lambda: lance.dataset(self.uri).create_scalar_index("id", "BTREE", replace=True),
            )
        )
        what, run = self.rng.choice(ops)
        self.log.append(f"{k}: {name} {what}")
        run()

    # -- comparison ----------------------------------------------------------------------
    def compare(self) -> None:
        """Every version, read through both engines, alike; the same versions and tags."""
        ref = lance.dataset(self.uri)
        mine = dataset(self.uri)
        versions = [v["version"] for v in ref.versions()]
        assert [v["version"] for v in mine.versions()] == versions
        assert {t: v["version"] for t, v in mine.tags.list().items()} == {
            t: v["version"] for t, v in ref.tags.list().items()
        }
        for v in versions:
            theirs, ours = lance.dataset(self.uri, version=v), dataset(self.uri, version=v)
            assert_same_table(ours.to_table(), theirs.to_table(), f"version {v}")
            assert ours.data_storage_version == theirs.data_storage_version
            for filt in ("id % 3 = 0", "id < 10"):
                assert ours.count_rows(filt) == theirs.count_rows(filt), (v, filt)
        assert_same_table(
            mine.to_table(columns=["id"], with_row_id=True),
            ref.to_table(columns=["id"], with_row_id=True),
            "row ids of the latest version",
        )


@pytest.mark.compat
@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
@pytest.mark.parametrize("seed", _seeds())
def test_random_operation_sequences_agree(tmp_path: Path, seed: int, stable: bool):
    seq = _Sequence(str(tmp_path / "ds"), seed, stable)
    writer = seq.rng.choice(["pylance", "ours"])
    ENGINES[writer].write_dataset(
        seq.base_table(12), seq.uri, max_rows_per_file=5, enable_stable_row_ids=stable
    )
    seq.log.append(f"create by {writer} (stable row ids {stable})")
    for k in range(STEPS):
        try:
            seq.step(k)
            seq.compare()
        except Exception as e:
            raise AssertionError(f"seed {seed}, after:\n" + "\n".join(seq.log)) from e
