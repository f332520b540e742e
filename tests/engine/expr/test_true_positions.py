"""`true_positions` reads a mask's TRUE rows off its bitmaps exactly as Arrow finds them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format.expr import true_positions


@st.composite
def masks(draw: st.DrawFn) -> pa.Array:
    """Boolean arrays of every density, with and without nulls, sliced at any bit."""
    n = draw(st.integers(0, 600))
    density = draw(st.sampled_from([0.0, 0.002, 0.05, 0.5, 0.97, 1.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = rng.random(n) < density
    nulls = rng.random(n) < draw(st.sampled_from([0.0, 0.2]))
    arr = pa.array(values, mask=nulls if nulls.any() else None)
    first = draw(st.integers(0, n))
    return arr.slice(first, draw(st.integers(0, n - first)))


@settings(max_examples=400, deadline=None)
@given(masks(), st.booleans())
def test_same_positions_as_arrow(mask: pa.Array, chunked: bool) -> None:
    want = pc.indices_nonzero(mask).to_numpy().astype(np.int64)
    given_mask = pa.chunked_array([mask.slice(0, len(mask) // 2), mask.slice(len(mask) // 2)])
    got = true_positions(given_mask if chunked else mask)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
