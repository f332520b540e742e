"""Index builds through a Quiver server: `create_index` builds a BTREE or BITMAP index in
the server and commits it, `drop_index` drops one (actions; pylance uses the indices as its
own). A mixin of `clients.Client`."""

from __future__ import annotations

from typing import Any


class IndexActions:
    """`Client` methods that build and drop indices (they call its `action`)."""

    def create_index(
        self,
        dataset: str,
        column: str,
        index_type: str,
        *,
        name: str | None = None,
        replace: bool | None = None,
    ) -> dict[str, Any]:
        """Build a BTREE or BITMAP index of `column` in the server and commit it (pylance's
        `create_scalar_index`: named `{column}_idx` by default, replacing the index of that
        name unless `replace=False`); `{"version", "name"}`."""
        body: dict[str, Any] = {"dataset": dataset, "column": column, "index_type": index_type}
        if name is not None:
            body["name"] = name
        if replace is not None:
            body["replace"] = replace
        return self.action("create_index", body)  # type: ignore[attr-defined]

    def optimize_indices(
        self,
        dataset: str,
        *,
        num_indices_to_merge: int | None = None,
        index_names: list[str] | None = None,
    ) -> dict[str, Any]:
        """Index the fragments appended since the indices were built (pylance's
        `optimize_indices`: by default the newest segment of each index is rebuilt with
        them; `num_indices_to_merge=0` adds a segment of their own); `{"version",
        "optimized"}` (False: nothing to index)."""
        body: dict[str, Any] = {"dataset": dataset}
        if num_indices_to_merge is not None:
            body["num_indices_to_merge"] = num_indices_to_merge
        if index_names is not None:
            body["index_names"] = list(index_names)
        return self.action("optimize_indices", body)  # type: ignore[attr-defined]

    def drop_index(self, dataset: str, name: str) -> dict[str, Any]:
        """Drop the index `name` (every segment) as a new version; `{"version"}`."""
        return self.action("drop_index", {"dataset": dataset, "name": name})  # type: ignore[attr-defined]
