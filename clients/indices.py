"""Index builds through a Quiver server: `create_index` builds a scalar (BTREE, BITMAP) or
vector (IVF_FLAT, IVF_PQ, IVF_SQ) index in the server and commits it, `optimize_indices`
brings indices up to date with appended rows, `drop_index` drops one (actions; pylance uses
the indices as its own). Builds can report their progress as they run. A mixin of
`clients.Client`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow.flight as flight

# Told of each stage of a build: {"stage": "sample" | "train" | "encode" | ..., "index", ...}
Progress = Callable[[dict[str, Any]], None]


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
        metric: str | None = None,
        num_partitions: int | None = None,
        num_sub_vectors: int | None = None,
        num_bits: int | None = None,
        sample_rate: int | None = None,
        max_iters: int | None = None,
        target_partition_size: int | None = None,
        ivf_centroids: np.ndarray | None = None,
        pq_codebook: np.ndarray | None = None,
        m: int | None = None,
        ef_construction: int | None = None,
        max_level: int | None = None,
        rabitq_model: str | None = None,
        train: bool | None = None,
        progress: Progress | None = None,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Build an index of `column` in the server and commit it; `{"version", "name"}`.

        A BTREE or BITMAP index as pylance's `create_scalar_index` builds it (named
        `{column}_idx` by default, replacing the index of that name unless `replace=False`);
        an IVF_FLAT, IVF_PQ, IVF_SQ or IVF_RQ index, or an IVF_HNSW_* form (`m`,
        `ef_construction`, `max_level` shape the graphs), as pylance's `create_index` (its
        parameters and defaults: `replace=False`, l2, partitions from the row count; PQ needs
        `num_sub_vectors`; `rabitq_model` fixes an IVF_RQ index's rotation). `train=False`
        builds an index of no rows, which `optimize_indices` trains. An INVERTED (full-text)
        index takes pylance's tokenizer options in `params` (`{"stem": False,
        "base_tokenizer": "whitespace", ...}`). `progress` is called with each stage of the
        build as the server reports it."""
        body: dict[str, Any] = {"dataset": dataset, "column": column, "index_type": index_type}
        options = {
            "name": name,
            "replace": replace,
            "metric": metric,
            "num_partitions": num_partitions,
            "num_sub_vectors": num_sub_vectors,
            "num_bits": num_bits,
            "sample_rate": sample_rate,
            "max_iters": max_iters,
            "target_partition_size": target_partition_size,
            "m": m,
            "ef_construction": ef_construction,
            "max_level": max_level,
            "rabitq_model": rabitq_model,
            "train": train,
            "ivf_centroids": None if ivf_centroids is None else np.asarray(ivf_centroids).tolist(),
            "pq_codebook": None if pq_codebook is None else np.asarray(pq_codebook).tolist(),
            "params": params,
        }
        body.update({k: v for k, v in options.items() if v is not None})
        return self._build("create_index", body, progress)

    def optimize_indices(
        self,
        dataset: str,
        *,
        num_indices_to_merge: int | None = None,
        index_names: list[str] | None = None,
        retrain: bool | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Index the fragments appended since the indices were built (pylance's
        `optimize_indices`: by default the newest segment of each index is rebuilt with
        them; `num_indices_to_merge=0` adds a segment of their own; `retrain=True` trains
        vector indices again); `{"version", "optimized"}` (False: nothing to index)."""
        body: dict[str, Any] = {"dataset": dataset}
        if num_indices_to_merge is not None:
            body["num_indices_to_merge"] = num_indices_to_merge
        if index_names is not None:
            body["index_names"] = list(index_names)
        if retrain is not None:
            body["retrain"] = retrain
        return self._build("optimize_indices", body, progress)

    def drop_index(self, dataset: str, name: str) -> dict[str, Any]:
        """Drop the index `name` (every segment) as a new version; `{"version"}`."""
        return self.action("drop_index", {"dataset": dataset, "name": name})  # type: ignore[attr-defined]

    def _build(self, name: str, body: dict[str, Any], progress: Progress | None) -> Any:
        """Run a build action; with `progress`, hand each stage to it as it arrives."""
        if progress is None:
            return self.action(name, body)  # type: ignore[attr-defined]
        action = flight.Action(name, json.dumps({**body, "progress": True}).encode())

        def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> Any:
            result = None
            for answer in client.do_action(action, options):
                doc = json.loads(answer.body.to_pybytes())
                if isinstance(doc, dict) and list(doc) == ["progress"]:
                    progress(doc["progress"])
                else:
                    result = doc
            return result

        return self._rpc(run)  # type: ignore[attr-defined]
