"""`take_items`: dictionary items gathered per row by the compiled loop (2.0 dictionary pages
directly, 2.1+ ones through `to_logical`), compared whole with Arrow's
`take` over hostile items (empty, unicode, longer than the loop's 16-byte store, sliced
arrays) and every index width."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format import _kernels
from quiver.format.errors import CorruptFileError
from quiver.format.file.items import item_table, take_items
from quiver.format.file.v21.page import PageWhere
from quiver.format.file.v21.unravel import to_logical

_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


def _reference(items: pa.Array, idx: np.ndarray, base: int) -> pa.Array:
    null = idx.astype(np.int64) < base
    at = pa.array(idx.astype(np.int64) - base, pa.int64(), mask=null if null.any() else None)
    return items.take(at)


@st.composite
def _case(draw: st.DrawFn) -> tuple[pa.Array, np.ndarray, int]:
    binary = draw(st.booleans())
    values = draw(st.lists(st.binary(max_size=40) if binary else _TEXT, min_size=1, max_size=300))
    items = pa.array(values, pa.binary() if binary else pa.string())
    cut = draw(st.integers(0, len(items) - 1))
    items = items.slice(cut)  # offsets that do not start at the buffer's start
    base = draw(st.integers(0, 1))
    dtype = draw(st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64]))
    top = min(len(items) + base - 1, np.iinfo(dtype).max)
    idx = np.array(draw(st.lists(st.integers(0, top), max_size=2000)), dtype=dtype)
    return items, idx, base


@settings(max_examples=300, deadline=None)
@given(_case())
def test_take_items_matches_arrows_take(case: tuple[pa.Array, np.ndarray, int]) -> None:
    items, idx, base = case
    got = take_items(items, idx, base=base)
    got.validate(full=True)
    assert got.type == items.type
    assert got.equals(_reference(items, idx, base))


@pytest.mark.parametrize(
    "items",
    [
        pa.array(["a", None, "ccc"]),  # null items: Arrow's take
        pa.array(["a", "bb", "ccc"], pa.large_string()),  # 64-bit offsets: Arrow's take
        pa.array([1, 2, 3], pa.int32()),
    ],
)
def test_other_items_take_arrows_path(items: pa.Array) -> None:
    idx = np.array([3, 0, 1, 2, 2, 1], dtype=np.uint8)
    assert take_items(items, idx, base=1).equals(_reference(items, idx, 1))


def test_long_items_and_no_rows() -> None:
    items = pa.array(["x" * 1000, "", "é" * 9, "y"])
    idx = np.array([0, 1, 2, 3, 0, 3, 2, 1] * 50, dtype=np.uint32)
    assert take_items(items, idx).equals(_reference(items, idx, 0))
    empty = take_items(items, np.zeros(0, dtype=np.uint8))
    assert empty.type == pa.string() and len(empty) == 0
    none = pa.array([], pa.string())  # a dictionary of no items: every row null
    idx = np.zeros(3, dtype=np.uint8)
    assert take_items(none, idx, base=1).equals(pa.nulls(3, pa.string()))


def test_the_kernel_refuses_what_it_was_not_given() -> None:
    """An index past the items, items outside the data or data without the 16 spare bytes
    raise ValueError: the loop never reads or writes outside its buffers."""
    bounds = np.array([0, 3, 5], dtype=np.int64)
    data = np.zeros(5 + 16, dtype=np.uint8)
    ends = np.empty(3, dtype=np.int32)
    ok = np.array([1, 0], dtype=np.uint8)
    out, nulls = _kernels.take_items(bounds, data, ok, 1, 0, ends)
    assert len(out) == 5 + 16 and nulls == 0
    out, nulls = _kernels.take_items(bounds, data, ok, 1, 1, ends)  # index 0: a null row
    assert nulls == 1 and ends.tolist() == [0, 3, 3]
    with pytest.raises(ValueError):
        _kernels.take_items(bounds, data, np.array([2, 0], np.uint8), 1, 0, ends)
    with pytest.raises(ValueError):
        _kernels.take_items(bounds, data, np.array([3, 0], np.uint8), 1, 1, ends)
    with pytest.raises(ValueError):
        _kernels.take_items(bounds, data[:20], ok, 1, 0, ends)
    with pytest.raises(ValueError):
        _kernels.take_items(np.array([0, 6, 5], np.int64), data, ok, 1, 0, ends)
    with pytest.raises(ValueError):
        _kernels.take_items(bounds, data, ok, 3, 0, ends)


@st.composite
def _page(draw: st.DrawFn) -> tuple[pa.Array, pa.Array, np.ndarray | None, pa.DataType]:
    """A 2.1+ dictionary page as the reader holds it: large_binary items, integer indices
    of any width or sign, and row validity (null rows may hold any index in range)."""
    t = draw(st.sampled_from([pa.string(), pa.binary()]))
    values = draw(st.lists(_TEXT, min_size=1, max_size=50))
    items = pa.array([v.encode() for v in values], pa.large_binary())
    items = items.slice(draw(st.integers(0, len(items) - 1)))
    dtype = draw(st.sampled_from(["uint8", "uint16", "uint32", "int32", "int64"]))
    top = min(len(items) - 1, 127)
    idx = pa.array(draw(st.lists(st.integers(0, top), max_size=1000)), pa.from_numpy_dtype(dtype))
    valid = None
    if draw(st.booleans()):
        valid = np.array(
            draw(st.lists(st.booleans(), min_size=len(idx), max_size=len(idx))), dtype=bool
        )
    return items, idx, valid, t


@settings(max_examples=200, deadline=None)
@given(_page())
def test_v21_dictionary_pages_gather_as_arrows_take(
    page: tuple[pa.Array, pa.Array, np.ndarray | None, pa.DataType],
) -> None:
    items, idx, valid, t = page
    where = PageWhere("f.lance", "column 0 page 0")
    got = to_logical(idx, t, valid, items, where)
    got.validate(full=True)
    mask = None if valid is None else pa.array(~valid)
    want = items.take(idx).cast(pa.large_binary()).cast(t)
    if mask is not None:
        want = pc.if_else(mask, pa.scalar(None, t), want)
    assert got.type == t
    assert got.equals(want)
    # the same rows from a table kept for the page (a prepared step reader's)
    kept = to_logical(idx, t, valid, items, where, item_table(items, t))
    assert kept.type == t and kept.equals(want)


def test_v21_dictionary_rows_that_could_overflow_int32_take_arrows_path() -> None:
    """Rows that might pass int32 offsets (rows x longest item) are left to Arrow's take,
    which copes with what they actually hold."""
    items = pa.array([b"", b"x" * (1 << 20)], pa.large_binary())
    idx = pa.array(np.r_[np.zeros(3000, dtype=np.uint16), 1].astype(np.uint16))
    got = to_logical(idx, pa.binary(), None, items, PageWhere("f.lance", "column 0 page 0"))
    assert got.equals(items.take(idx).cast(pa.binary()))


def test_v21_dictionary_validity_of_the_wrong_length_is_corruption() -> None:
    items = pa.array([b"a", b"b"], pa.large_binary())
    idx = pa.array([0, 1, 1], pa.uint8())
    with pytest.raises(CorruptFileError, match="2 validity entries for 3 values"):
        to_logical(idx, pa.string(), np.ones(2, bool), items, PageWhere("f", "column 0 page 0"))
