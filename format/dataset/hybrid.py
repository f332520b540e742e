"""Hybrid search: a nearest-neighbour search and a full-text search fused into one ranking,
as LanceDB's hybrid queries fuse them.

Both searches run with the same `limit`, filter and projection: the `limit` nearest rows
(`format.dataset.nearest`) and the `limit` best full-text matches
(`format.dataset.fulltext`). Then:

1. Normalisation (``normalize="score"``, the default): `_distance` and `_score` are each
   scaled to [0, 1] by their minimum and range. With ``"rank"`` they are replaced by their
   ranks in ascending order first (1 for the nearest, and for the lowest score).
2. Fusion:
   - ``"rrf"`` (reciprocal rank fusion, the default): a row scores the sum of
     ``1 / (rank + rrf_k)`` over the lists holding it, ranks from 1 in each list's order;
   - ``"linear"``: ``weight * (1 - distance) + (1 - weight) * score``, a missing distance
     counting 1 and a missing score 0 (when one search finds nothing, the other's
     ``1 - distance`` or score alone).
3. The rows of both lists, nearest ones first, each once, sorted by that
   `_relevance_score` (float32), best first; ties keep that order. The first `limit` are
   the answer, with the projected columns and `_relevance_score` (then `_rowid` if asked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fulltext import SCORE, FullTextSearch
from quiver.format.dataset.nearest import DISTANCE, NearestSearch
from quiver.format.dataset.scan import ROW_ID_FIELD
from quiver.format.errors import InvalidInputError

RELEVANCE = "_relevance_score"
FUSIONS = ("rrf", "linear")
NORMALIZE = ("score", "rank")


def _normalized(values: np.ndarray) -> np.ndarray:
    """Scaled to [0, 1] by minimum and range, in float32 as LanceDB computes it (when the
    range is 0: minus the minimum, unless everything is 0)."""
    values = values.astype(np.float32)
    if not len(values):
        return values
    low, high = values.min(), values.max()
    spread = np.float32(high - low)
    if spread != 0:
        return ((values - low) / spread).astype(np.float32)
    return (values - low).astype(np.float32) if high != 0 else values


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1 in ascending order of the values (LanceDB ranks both lists so: the best
    score then ranks last, the largest, and normalises to 1)."""
    order = np.argsort(values)
    out = np.empty(len(values), np.float32)
    out[order] = np.arange(1, len(values) + 1)
    return out


def check_options(
    where: str, limit: object, fusion: object, rrf_k: object, weight: object, normalize: object
) -> None:
    """InvalidInputError naming a fusion option out of its range."""
    if fusion not in FUSIONS:
        raise InvalidInputError(f"{where}: hybrid fusion must be one of {', '.join(FUSIONS)}")
    if normalize not in NORMALIZE:
        raise InvalidInputError(f"{where}: hybrid normalize must be one of {', '.join(NORMALIZE)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"{where}: a hybrid search's limit must be at least 1")
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or rrf_k <= 0:
        raise InvalidInputError(f"{where}: rrf_k must be greater than 0")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
        raise InvalidInputError(f"{where}: weight must be between 0 and 1")


def hybrid_table(
    core: DatasetCore,
    nearest: dict[str, Any],
    full_text_query: Any,
    *,
    limit: int = 10,
    fusion: str = "rrf",
    rrf_k: float = 60,
    weight: float = 0.7,
    normalize: str = "score",
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    prefilter: bool = False,
    with_row_id: bool = False,
) -> pa.Table:
    """The fused answer of a vector search and a full-text search (see the module doc)."""
    check_options(core.uri, limit, fusion, rrf_k, weight, normalize)
    _one_text(core.uri, full_text_query)
    names = list(core.lance_schema.names) if columns is None else list(columns)
    names = [n for n in names if n not in (DISTANCE, SCORE, RELEVANCE, ROW_ID_FIELD.name)]
    common: dict[str, Any] = {
        "columns": [*names, ROW_ID_FIELD.name],
        "filter": filter,
        "prefilter": prefilter,
    }
    vectors = NearestSearch(core, {**nearest, "k": limit}, **common).to_table()
    texts = FullTextSearch(core, full_text_query, limit=limit, **common).to_table()
    vector_ids = vectors.column(ROW_ID_FIELD.name).to_numpy()
    text_ids = texts.column(ROW_ID_FIELD.name).to_numpy()
    distances = vectors.column(DISTANCE).to_numpy().astype(np.float32)
    scores = texts.column(SCORE).to_numpy().astype(np.float32)
    if normalize == "rank":
        distances, scores = _ranks(distances), _ranks(scores)
    distances, scores = _normalized(distances), _normalized(scores)
    # every row once, the vector search's first
    first_text = ~np.isin(text_ids, vector_ids)
    rows = pa.concat_tables(
        [vectors.select([*names, ROW_ID_FIELD.name]), texts.select([*names, ROW_ID_FIELD.name])]
    ).filter(pa.array(np.concatenate([np.ones(len(vector_ids), bool), first_text])))
    ids = rows.column(ROW_ID_FIELD.name).to_numpy()
    if fusion == "rrf":
        relevance = np.zeros(len(ids), np.float64)
        for found in (vector_ids, text_ids):
            where_in = {int(r): i for i, r in enumerate(found, start=1)}
            relevance += [1 / (where_in[int(r)] + rrf_k) if int(r) in where_in else 0 for r in ids]
    elif not len(text_ids) or not len(vector_ids):  # one list alone is not weighted
        relevance = (1 - distances.astype(np.float64)) if len(vector_ids) else scores
    else:
        by_vector = dict(zip(vector_ids.tolist(), distances.tolist(), strict=True))
        by_text = dict(zip(text_ids.tolist(), scores.tolist(), strict=True))
        relevance = np.array(
            [
                weight * (1 - by_vector.get(int(r), 1.0)) + (1 - weight) * by_text.get(int(r), 0.0)
                for r in ids
            ],
            np.float64,
        )
    relevance32 = relevance.astype(np.float32)
    order = np.argsort(-relevance32, kind="stable")[:limit]
    out = rows.take(pa.array(order))
    out = out.append_column(pa.field(RELEVANCE, pa.float32()), pa.array(relevance32[order]))
    keep = [*names, RELEVANCE] + ([ROW_ID_FIELD.name] if with_row_id else [])
    return out.select(keep)


class HybridSearch:
    """A planned hybrid search (its schema known before it runs), for the Flight server."""

    def __init__(
        self,
        core: DatasetCore,
        nearest: dict[str, Any],
        full_text_query: Any,
        *,
        limit: int | None = None,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        prefilter: bool = False,
        with_row_id: bool = False,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - {"fusion", "rrf_k", "weight", "normalize"})
        if unknown:
            raise InvalidInputError(f"{core.uri}: unknown hybrid option {unknown[0]!r}")
        check_options(
            core.uri,
            10 if limit is None else limit,
            options.get("fusion", "rrf"),
            options.get("rrf_k", 60),
            options.get("weight", 0.7),
            options.get("normalize", "score"),
        )
        _one_text(core.uri, full_text_query)
        self._args = (core, nearest, full_text_query)
        self._kw: dict[str, Any] = {
            "limit": 10 if limit is None else limit,
            "columns": columns,
            "filter": filter,
            "prefilter": prefilter,
            "with_row_id": with_row_id,
            **options,
        }
        names = list(core.lance_schema.names) if columns is None else list(columns)
        names = [n for n in names if n not in (DISTANCE, SCORE, RELEVANCE, ROW_ID_FIELD.name)]
        # planned (not run) to check columns, vector and query, and to know the schema
        NearestSearch(core, nearest, columns=names, filter=filter, prefilter=prefilter)
        base = FullTextSearch(core, full_text_query, columns=names, filter=filter).schema
        fields = [base.field(n) for n in names] + [pa.field(RELEVANCE, pa.float32())]
        if with_row_id:
            fields.append(ROW_ID_FIELD)
        self.schema = pa.schema(fields, metadata=base.metadata)

    def to_table(self) -> pa.Table:
        return hybrid_table(*self._args, **self._kw).cast(self.schema)


def _one_text(uri: str, full_text_query: Any) -> None:
    if isinstance(full_text_query, list):
        raise InvalidInputError(f"{uri}: a hybrid search takes one text query, not a batch")
