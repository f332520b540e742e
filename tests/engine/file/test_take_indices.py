"""`checked_take_indices`: a take's row indices are 1-D integers, sorted, unique and inside
the file, or the take is refused naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from quiver.format.errors import InvalidInputError
from quiver.format.file.base import checked_take_indices


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.uint32])
def test_accepted_as_int64(dtype: type) -> None:
    out = checked_take_indices("f.lance", np.array([0, 3, 9], dtype), 10)
    assert out.dtype == np.int64 and out.tolist() == [0, 3, 9]
    assert checked_take_indices("f.lance", np.array([4], dtype), 5).tolist() == [4]
    assert len(checked_take_indices("f.lance", np.array([], dtype), 0)) == 0


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        (np.array([[1, 2]]), "one-dimensional"),
        (np.array([0.0, 1.0]), "integers"),
        (np.array([-1, 2]), "out of range"),
        (np.array([2, 10]), "out of range"),
        (np.array([10]), "out of range"),
        (np.array([3, 1]), "sorted and unique"),
        (np.array([1, 1]), "sorted and unique"),
        (np.array([5, 1, 12]), "out of range"),  # the range is checked first
        (np.array([5, -1, 2]), "out of range"),
    ],
)
def test_refused(indices: np.ndarray, message: str) -> None:
    with pytest.raises(InvalidInputError, match=f"f.lance: .*{message}"):
        checked_take_indices("f.lance", indices, 10)
