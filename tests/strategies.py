"""Shared hypothesis strategies and random Arrow data for the file-format tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st


def arrow_types(leaves: list[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    """Random Arrow types 2.0 can store: leaves nested in lists, fixed-size lists and structs."""

    def extend(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        return st.one_of(
            st.builds(pa.list_, children),
            st.builds(pa.large_list, children),
            st.lists(children, min_size=1, max_size=3).map(
                lambda ts: pa.struct([(f"f{i}", t) for i, t in enumerate(ts)])
            ),
        )

    return st.recursive(st.sampled_from(leaves), extend, max_leaves=4)


def random_array(t: pa.DataType, n: int, rng: np.random.Generator, p_null: float) -> pa.Array:
    """Random values of type `t` (no struct-level nulls: 2.0 cannot store them)."""
    mask = rng.random(n) < p_null if p_null else None
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [random_array(f.type, n, rng, p_null) for f in t], fields=list(t)
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lens = rng.integers(0, 4, n)
        offsets = np.concatenate(([0], np.cumsum(lens)))
        items = random_array(t.value_type, int(offsets[-1]), rng, p_null)
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        off = pa.array(offsets, pa.int64() if pa.types.is_large_list(t) else pa.int32())
        return cls.from_arrays(off, items, mask=pa.array(mask) if mask is not None else None)
    if pa.types.is_fixed_size_list(t):
        items = random_array(t.value_type, n * t.list_size, rng, p_null)
        return pa.FixedSizeListArray.from_arrays(
            items, t.list_size, mask=pa.array(mask) if mask is not None else None
        )
    if pa.types.is_dictionary(t):
        idx = pa.array(rng.integers(0, 5, n).astype(np.int16), mask=mask)
        return pa.DictionaryArray.from_arrays(idx, pa.array(["a", "bb", "", "ccc", "dé"]))
    if pa.types.is_boolean(t):
        return pa.array(rng.random(n) < 0.5, mask=mask)
    if pa.types.is_floating(t):
        return pa.array(rng.standard_normal(n).astype(t.to_pandas_dtype()), t, mask=mask)
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        vals = rng.integers(info.min, info.max, n, dtype=info.dtype, endpoint=True)
        return pa.array(vals, t, mask=mask)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        size = int(rng.choice([5, 3 * n + 1]))
        pool = [f"w{i}" * int(k) for i, k in enumerate(rng.integers(0, 4, size))]
        return pa.array([pool[int(k)] for k in rng.integers(0, size, n)], t, mask=mask)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([bytes(int(k)) for k in rng.integers(0, 5, n)], t, mask=mask)
    if pa.types.is_fixed_size_binary(t):
        return pa.array([bytes([int(k)]) * 3 for k in rng.integers(0, 256, n)], t, mask=mask)
    if pa.types.is_date32(t):
        return pa.array(rng.integers(0, 30000, n).astype(np.int32), t, mask=mask)
    if pa.types.is_timestamp(t):
        return pa.array(rng.integers(0, 2**50, n), t, mask=mask)
    if pa.types.is_decimal(t):
        return pa.array(rng.integers(-(10**12), 10**12, n), pa.int64(), mask=mask).cast(t)
    raise AssertionError(t)
