"""The IVF and HNSW scoring kernels (`ivf_topk`, `hnsw_topk`) refuse arguments that do not
fit together with a ValueError or TypeError naming the kernel, hold no buffer after a
refusal, and keep the best rows of a well-formed call."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from quiver.format import _kernels

DIM, ROWS = 4, 5


def _call(kernel: str, **over: Any) -> None:
    """One flat (IVF_FLAT, l2) call over one partition of ROWS rows, one query, top 3."""
    args: dict[str, Any] = {
        "kind": _kernels.IVF_FLAT,
        "metric": _kernels.METRIC_L2,
        "queries": np.zeros((1, DIM)),
        "width": DIM,
        "scale": 1.0,
        "start": 0.0,
        "step": 1.0,
        "pair_query": np.zeros(1, np.int64),
        "pair_slot": np.zeros(1, np.int64),
        "pair_base": np.zeros(1),
        "data": (np.arange(ROWS * DIM, dtype=np.float32).reshape(ROWS, DIM),),
        "ids": (np.arange(ROWS, dtype=np.uint64) + 100,),
        "bias": None,
        "graphs": ((0, 1, np.zeros(ROWS, np.int32), np.zeros(ROWS + 1, np.int64), np.zeros(0)),),
        "masks": (None,),
        "ef": 5,
        "fetch": 3,
        "out_ids": np.zeros((1, 3), np.uint64),
        "out_dist": np.zeros((1, 3), np.float32),
        "out_count": np.zeros(1, np.int64),
    }
    args.update(over)
    head = [args[k] for k in list(args)[:13]]
    tail = [args[k] for k in ("fetch", "out_ids", "out_dist", "out_count")]
    if kernel == "ivf_topk":
        _kernels.ivf_topk(*head, *tail)
    else:
        graphs = tuple(
            (g[0], g[1], g[2], g[3], np.asarray(g[4], np.uint32)) if isinstance(g, tuple) else g
            for g in args["graphs"]
        )
        _kernels.hnsw_topk(*head, graphs, args["masks"], args["ef"], *tail)


BAD = {
    "unknown kind": {"kind": 9},
    "a pair's partition missing": {"pair_slot": np.array([3])},
    "row ids and data of different rows": {"ids": (np.arange(4, dtype=np.uint64),)},
    "more data than row ids": {"data": (np.ones((ROWS, DIM), np.float32), np.ones(2))},
    "bias of another length": {"bias": (None, None)},
    "a heap count past fetch": {"out_count": np.array([7])},
    "data that is no buffer": {"data": (object(),)},
    "row ids that are no buffer": {"ids": (object(),)},
}
BAD_HNSW = {
    "ef below fetch": {"ef": 1},
    "a mask of another length": {"masks": (np.zeros(2, np.uint8),)},
    "masks of another count": {"masks": (None, None)},
    "no graph": {"graphs": ()},
    "an entry point past the rows": {
        "graphs": ((9, 1, np.zeros(ROWS, np.int32), np.zeros(ROWS + 1, np.int64), []),)
    },
    "a graph that is no tuple": {"graphs": (5,)},
}


@pytest.mark.parametrize(
    ("kernel", "case"),
    [("ivf_topk", c) for c in BAD] + [("hnsw_topk", c) for c in [*BAD, *BAD_HNSW]],
)
def test_bad_arguments_are_refused_and_release_every_buffer(kernel: str, case: str) -> None:
    over = {**BAD, **BAD_HNSW}[case]
    data = np.ones((ROWS, DIM), np.float32)
    over = {"data": (data,), **over}
    held = sys.getrefcount(data)
    with pytest.raises((ValueError, TypeError), match=kernel):
        _call(kernel, **over)
    assert sys.getrefcount(data) == held


@pytest.mark.parametrize("kernel", ["ivf_topk", "hnsw_topk"])
def test_a_well_formed_call_keeps_the_nearest_rows(kernel: str) -> None:
    out_ids, out_dist = np.zeros((1, 3), np.uint64), np.zeros((1, 3), np.float32)
    count = np.zeros(1, np.int64)
    if kernel == "ivf_topk":
        _call(kernel, out_ids=out_ids, out_dist=out_dist, out_count=count)
    else:  # a one-level graph: every row a neighbour of every other
        n = ROWS
        neighbours = np.array([j for i in range(n) for j in range(n) if j != i], np.uint32)
        offsets = np.arange(0, n * (n - 1) + 1, n - 1, dtype=np.int64)
        graph = (0, 1, np.arange(n, dtype=np.int32), offsets, neighbours)
        _call(kernel, graphs=(graph,), out_ids=out_ids, out_dist=out_dist, out_count=count)
    assert count[0] == 3
    order = np.argsort(out_dist[0])
    assert out_ids[0][order].tolist() == [100, 101, 102]  # the rows nearest the origin
