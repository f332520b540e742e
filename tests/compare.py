"""Whole-result comparisons shared by the compatibility tests (NaN equal to NaN)."""

from __future__ import annotations

import math

import pyarrow as pa


def same_values(a: object, b: object) -> bool:
    """Python-value equality where NaN equals NaN (Arrow's equals says it doesn't) and types
    must match (1 is not 1.0 or True)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def assert_same_table(ours: pa.Table, ref: pa.Table, what: str) -> None:
    """Whole-table equality: schema (types, nullability), values, nulls and row order."""
    assert ours.schema.equals(ref.schema, check_metadata=False), (
        f"{what}: schema differs\nours:\n{ours.schema}\nreference:\n{ref.schema}"
    )
    assert ours.num_rows == ref.num_rows, f"{what}: {ours.num_rows} rows, reference {ref.num_rows}"
    for name in ref.column_names:
        a, b = ours.column(name), ref.column(name)
        if a.equals(b):
            continue
        if a.null_count != b.null_count or not same_values(a.to_pylist(), b.to_pylist()):
            raise AssertionError(f"{what}: column {name!r} differs\nours: {a}\nreference: {b}")
