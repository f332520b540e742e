"""Flight SQL tests' shared parts: the datasets, a `quiver serve` to connect ADBC's Flight SQL
driver to, and the oracle: the same SQL run by DataFusion over tables pylance reads."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import datafusion
import lance
import numpy as np
import pyarrow as pa
from datafusion.catalog import Schema

from quiver.format.dataset import write_dataset

FACT_ROWS = 6_000


def facts_table(rows: int = FACT_ROWS, seed: int = 3) -> pa.Table:
    """A fact table with nulls, strings, timestamps, booleans and a list column."""
    rng = np.random.default_rng(seed)
    value = rng.normal(50, 20, rows).round(3)
    value_mask = rng.random(rows) < 0.05
    grp = np.array(["g0", "g1", "g2", "g3", "g4"])[rng.integers(0, 5, rows)]
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "grp": pa.array(grp),
            "value": pa.array(value, mask=value_mask),
            "qty": pa.array(rng.integers(0, 100, rows).astype(np.int32)),
            "flag": pa.array(rng.random(rows) < 0.3),
            "ts": pa.array(
                (np.int64(1_700_000_000_000_000) + np.arange(rows) * 1_000_000).astype(
                    "datetime64[us]"
                )
            ),
            "tags": pa.array([[f"t{i % 7}", f"t{i % 3}"] for i in range(rows)]),
        }
    )


def dims_table() -> pa.Table:
    return pa.table(
        {
            "grp": ["g0", "g1", "g2", "g3", "g9"],
            "label": ["zero", "one", "two", "three", "nine"],
            "weight": [1.0, 2.0, 3.0, 4.0, 9.0],
        }
    )


def write_datasets(root: Path) -> None:
    """facts (several fragments, storage 2.1), legacy (the same rows in storage 0.1),
    team/dims and history (two versions)."""
    facts = facts_table()
    write_dataset(
        facts, str(root / "facts.lance"), max_rows_per_file=1_500, data_storage_version="2.1"
    )
    write_dataset(
        facts, str(root / "legacy.lance"), max_rows_per_file=2_000, data_storage_version="0.1"
    )
    write_dataset(dims_table(), str(root / "team" / "dims.lance"))
    # history: version 1 tagged `first`, then 100 rows appended by pylance
    history = str(root / "history.lance")
    write_dataset(facts, history, max_rows_per_file=3_000)
    lance.dataset(history).tags.create("first", 1)
    lance.write_dataset(facts_table(100, seed=9), history, mode="append")


def oracle_context(root: Path) -> datafusion.SessionContext:
    """DataFusion over every dataset under `root` as pylance reads it (latest versions)."""
    ctx = datafusion.SessionContext(
        datafusion.SessionConfig().set(
            "datafusion.sql_parser.map_string_types_to_utf8view", "false"
        )
    )
    schemas: set[str] = set()
    for path in sorted(p.parent for p in root.rglob("_versions")):
        name = str(path.relative_to(root))[: -len(".lance")]
        schema, _, table = name.rpartition("/")
        if schema and schema not in schemas:
            ctx.catalog().register_schema(schema, Schema.memory_schema())
            schemas.add(schema)
        data = lance.dataset(str(path)).to_table()
        target = f"{schema}.{table}" if schema else table
        ctx.register_record_batches(target, [data.to_batches()])
    return ctx


def oracle(root: Path, query: str) -> pa.Table:
    """`query` run by DataFusion over pylance's reads of the datasets under `root`."""
    return oracle_context(root).sql(query).to_arrow_table()


@contextmanager
def connect(uri: str, **kwargs: Any) -> Iterator[Any]:
    """An ADBC Flight SQL connection in autocommit mode (Quiver has no transactions)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conn = flight_sql.connect(uri, autocommit=True, **kwargs)
    try:
        yield conn
    finally:
        conn.close()


def fetch(conn: Any, query: str, parameters: Any = None) -> pa.Table:
    """One query's whole result as an Arrow table."""
    with conn.cursor() as cur:
        cur.execute(query, parameters)
        return cur.fetch_arrow_table()


def same_rows(got: pa.Table, want: pa.Table, *, ordered: bool = True) -> None:
    """Equal tables: names, types, values and nulls (sorted first unless `ordered`)."""
    assert got.schema.names == want.schema.names
    assert [f.type for f in got.schema] == [f.type for f in want.schema], (got.schema, want.schema)
    if not ordered:
        keys = [(n, "ascending") for n in got.schema.names if _sortable(got.schema.field(n).type)]
        got, want = got.sort_by(keys), want.sort_by(keys)
    assert got.to_pylist() == want.to_pylist()


def _sortable(t: pa.DataType) -> bool:
    return not (pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t))
