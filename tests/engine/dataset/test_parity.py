"""Operations where our engine once differed from pylance (issue 13), run through both.

Each test applies the same operation with pylance and with our engine and compares the
results (values, types, nulls) and pylance's view of the dataset our engine wrote.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
from compare import assert_same_table

from format.dataset import dataset, write_dataset


def test_take_across_fragments_with_different_null_holding_dictionaries(tmp_path: Path):
    first = pa.table({"d": pa.array(["a", None, "b", "a"]).dictionary_encode(), "i": range(4)})
    second = pa.table({"d": pa.array(["x", "y", None, "x"]).dictionary_encode(), "i": range(4, 8)})
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    write_dataset(first, ours, data_storage_version="2.0")
    write_dataset(second, ours, mode="append")
    lance.write_dataset(first, ref, data_storage_version="2.0")
    lance.write_dataset(second, ref, mode="append")
    for indices in ([0, 3], [0, 3, 5, 6], [6, 1, 4]):
        expected = lance.dataset(ref).take(indices)
        assert expected.column("d").null_count > 0 or indices == [0, 3]
        assert_same_table(dataset(ours).take(indices), expected, f"ours take {indices}")
        assert_same_table(dataset(ref).take(indices), expected, f"theirs take {indices}")
        assert_same_table(lance.dataset(ours).take(indices), expected, f"pylance on ours {indices}")
