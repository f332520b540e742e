"""About the memory an index build holds at its peak, for a server's budget of concurrent
builds (`flight_server.actions`)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from quiver.format.dataset import vector_indexing as _vector
from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import fragments_of
from quiver.format.errors import LanceError
from quiver.format.file.types import fixed_bits
from quiver.format.index.vector import rq_build
from quiver.format.index.vector.build import VECTOR_INDEX_TYPES
from quiver.format.index.vector.hnsw import BUILD_GROUP, GROUP_BYTES

__all__ = ["build_memory"]


def build_memory(core: DatasetCore, column: str, index_type: str, **options: Any) -> int:
    """About the bytes a build of an index of `column` holds at its peak (for a server's
    memory budget): a scalar index holds the column's values, their row ids and the sort's
    copies; a vector index its training sample, one batch of vectors and every row's code.
    Options are `create_index`'s (unknown or bad ones are left to the build to refuse)."""
    kind = str(index_type).upper()
    rows = sum(f.count_rows() for f in fragments_of(core))
    try:
        arrow_type = core.lance_schema.project([column]).to_arrow().field(0).type
    except LanceError:
        return 1  # the build names the missing column
    if kind in VECTOR_INDEX_TYPES and _vector.is_multivector(arrow_type):
        arrow_type = arrow_type.value_type  # about a vector a row counted
    if kind in VECTOR_INDEX_TYPES and pa.types.is_fixed_size_list(arrow_type):
        dim = arrow_type.list_size
        try:
            params = _vector.vector_params(
                core,
                column,
                kind,
                options.get("metric") or "l2",
                num_partitions=options.get("num_partitions"),
                num_sub_vectors=options.get("num_sub_vectors") or 1,
                num_bits=options.get("num_bits"),
                sample_rate=options.get("sample_rate") or 256,
                max_iters=options.get("max_iters") or 50,
                target_partition_size=options.get("target_partition_size"),
                live_rows=rows,
            )
        except LanceError:
            return 1
        sample = min(params.training_rows(), rows) * dim * 4 * 2
        batch = min(_vector.BATCH_ROWS, rows) * dim * 4 * 4
        code = {
            "IVF_PQ": params.num_sub_vectors * params.num_bits // 8,
            "IVF_SQ": dim,
            "IVF_FLAT": dim * 4,
            "IVF_RQ": rq_build.record_width(dim, params.num_bits),
        }[params.storage_kind]
        graphs = 0
        if params.hnsw is not None:  # a group of partitions' graphs built at once
            per = -(-rows // params.num_partitions)
            part = min(rows, max(per, min(per * BUILD_GROUP, GROUP_BYTES // (dim * 4))))
            graphs = part * (dim * 4 + params.hnsw.m * 3 * 8 * 2)
        return sample + batch + rows * (code + 12) * 2 + graphs
    bits = fixed_bits(arrow_type.value_type if kind == "LABEL_LIST" else arrow_type)
    width = 16 if bits is None else max(1, bits // 8)  # variable-width values: a guess
    return rows * (width + 8) * 5
