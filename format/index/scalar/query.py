"""What a scalar index is asked: an exact predicate on its one column, plus, for a BTREE,
the bounds that choose the pages that can hold matches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.expr import filter_mask


@dataclass(frozen=True)
class Bounds:
    """One interval of values: `lower` is TRUE from some value up (x >= lo, x > lo),
    `upper` up to some value (x <= hi, x < hi); None leaves that side open."""

    lower: pc.Expression | None
    upper: pc.Expression | None


@dataclass(frozen=True)
class Leaf:
    """A predicate reading only `field`'s column, bound by the filter engine, so evaluating
    it on an index's values gives exactly the scan's answer for those rows."""

    field: pa.Field
    predicate: pc.Expression
    key: str  # identifies the predicate (its SQL and the column type), for caching answers
    # where matches can sit in sorted values: intervals, or None when anywhere
    intervals: tuple[Bounds, ...] | None = None
    only_nulls: bool = False  # the predicate is `column IS NULL`
    # a field nested in structs: the names from the top-level column down (`field` the last)
    path: tuple[str, ...] = ()

    def values_table(self, values: pa.Array) -> pa.Table:
        """A one-column table of `values` under the column's name and type (a nested
        field's values inside structs named along its path, as the predicate reads them)."""
        if values.type != self.field.type:
            values = values.cast(self.field.type)
        if len(self.path) > 1:
            column: pa.Array = values
            for name in reversed(self.path[1:]):
                column = pa.StructArray.from_arrays([column], names=[name])
            return pa.table({self.path[0]: column})
        return pa.table({self.field.name: values})

    def truth(self, expression: pc.Expression, values: pa.Array) -> np.ndarray:
        """Where `expression` is TRUE (not FALSE, not NULL) over `values`, as a bool mask."""
        if len(values) == 0:
            return np.zeros(0, dtype=bool)
        mask = filter_mask(self.values_table(values), expression)
        return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)

    def matches(self, values: pa.Array) -> np.ndarray:
        """Where the predicate is TRUE over `values`."""
        return self.truth(self.predicate, values)
