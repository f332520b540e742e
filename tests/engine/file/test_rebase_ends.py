"""`_kernels.rebase_ends`: a 2.0 Binary page's stored end offsets as Arrow's, checked in one
pass, against a plain Python reading of the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format import _kernels


def _reference(ends: list[int], has_prev: bool, adjustment: int, most: int):
    """(status, prev, last, offsets) as the kernel defines them: the first problem in row
    order wins."""
    prev = ends[0] if has_prev else 0
    rows = ends[1:] if has_prev else ends
    if adjustment and prev >= adjustment:
        return _kernels.NULL_ENDS, prev, None, None
    before = prev
    out = [0]
    for v in rows:  # in order: a decrease before the first null is corruption either way
        if adjustment and v >= adjustment:
            return _kernels.NULL_ENDS, prev, None, None
        if v < before:
            return _kernels.DECREASING, prev, v, None
        if v - prev > most:
            return _kernels.TOO_WIDE, prev, v - prev, None
        out.append(v - prev)
        before = v
    return _kernels.OK, prev, (rows[-1] if rows else prev), out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 1 << 40), min_size=1, max_size=40),
    st.sampled_from([2, 4, 8]),
    st.booleans(),
    st.sampled_from([0, 1 << 20, 1 << 39]),
    st.sampled_from([np.int32, np.int64]),
    st.booleans(),
)
def test_rebase_ends_matches_python(ends, width, has_prev, adjustment, out_type, ascending):
    if ascending:
        ends = sorted(ends)
    ends = [v % (1 << (8 * width)) for v in ends]
    raw = np.array(ends, dtype=f"<u{width}").tobytes()
    out = np.full(len(ends) + (0 if has_prev else 1), -7, dtype=out_type)
    most = np.iinfo(out_type).max
    status, prev, last = _kernels.rebase_ends(raw, width, has_prev, adjustment, out)
    want_status, want_prev, want_last, want_out = _reference(ends, has_prev, adjustment, most)
    assert status == want_status
    assert prev == want_prev
    if status != _kernels.NULL_ENDS:
        assert last == want_last
    if status == _kernels.OK:
        assert out.tolist() == want_out


def test_rebase_ends_refuses_mismatched_buffers():
    raw = np.array([1, 2, 3], dtype="<u8").tobytes()
    cases = [
        (raw, 8, True, 0, np.zeros(4, np.int32)),  # one more than the rows: 3
        (raw, 8, False, 0, np.zeros(3, np.int32)),  # rows + 1 = 4
        (raw, 3, True, 0, np.zeros(3, np.int32)),  # 24 bytes are not 3-byte ends
        (raw, 8, True, 0, np.zeros(3, np.int16)),  # int32 or int64 offsets only
        (b"", 8, True, 0, np.zeros(1, np.int32)),  # no end before the first row
    ]
    for args in cases:
        with pytest.raises(ValueError, match="rebase_ends"):
            _kernels.rebase_ends(*args)
