"""Searches from the Python client: `Client.nearest`, `Client.nearest_batch`,
`Client.full_text_search`, `Client.full_text_search_batch` and `Client.hybrid`.

```python
with Client("grpc://127.0.0.1:8815") as qc:
    qc.nearest("docs", "vec", q, k=10, nprobes=20, filter="lang = 'en'", prefilter=True)
    qc.nearest_batch("docs", "vec", queries, k=10, nprobes=20)   # (n, dim) -> query_index
    qc.full_text_search("docs", "lance arrow", limit=10)
    qc.full_text_search_batch("docs", ["lance", "arrow flight"], limit=10)  # -> query_index
```

`nearest` sends the query vector (or a few, as a list) inside a CMD descriptor and gets the
answer in one round trip: a DoExchange to which it writes nothing (the same descriptor also
plans a GetFlightInfo + DoGet read, for clients that prefer tickets). `nearest_batch` sends
any number of query vectors through one DoExchange, as record batches of `batch_rows`
vectors written by a thread of their own while the answers are read, so neither side waits
on the other; each answer row carries the `query_index` of its query (0-based, in the order
given). The full-text searches send their queries inside the descriptor too: one round trip
for one query or a batch of them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from quiver.wire.requests import json_bytes, nearest_object, read_command

# Query vectors per record batch of a DoExchange.
BATCH_ROWS = 1024


def _command(client: Any, dataset: str, nearest: dict[str, Any], options: dict[str, Any]) -> bytes:
    return json_bytes(read_command(dataset, nearest=nearest, **client._scoped(options)))


def search(
    client: Any,
    dataset: str,
    column: str,
    q: Any,
    k: int = 10,
    *,
    search_options: dict[str, Any],
    read_options: dict[str, Any],
) -> pa.Table:
    """The nearest rows to `q` (one vector, or a list of them: `query_index` first);
    `client` is a `clients.Client`."""
    nearest = nearest_object(column, np.asarray(q, dtype=np.float32), k, **search_options)
    return _answer(client, _command(client, dataset, nearest, read_options))


def _answer(client: Any, command: bytes) -> pa.Table:
    """The answer to a search a CMD descriptor holds whole: one DoExchange, nothing sent."""
    descriptor = flight.FlightDescriptor.for_command(command)

    def call(c: flight.FlightClient, o: flight.FlightCallOptions) -> pa.Table:
        writer, reader = c.do_exchange(descriptor, o)
        try:
            writer.done_writing()  # the search is in the descriptor: no batches
            return reader.read_all()
        finally:
            writer.close()

    return client._rpc(call)


def _query_batches(queries: Any, batch_rows: int) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    matrix = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
    if matrix.ndim != 2 or not matrix.shape[0] or not matrix.shape[1]:
        raise ValueError("queries must be a non-empty (n, dim) array of query vectors")
    dim = matrix.shape[1]
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), dim)
    schema = pa.schema([pa.field("q", vectors.type)])
    batches = [
        pa.record_batch([vectors.slice(s, batch_rows)], schema=schema)
        for s in range(0, len(vectors), batch_rows)
    ]
    return schema, batches


def search_batch(
    client: Any,
    dataset: str,
    column: str,
    queries: Any,
    k: int = 10,
    *,
    batch_rows: int = BATCH_ROWS,
    search_options: dict[str, Any],
    read_options: dict[str, Any],
) -> pa.Table:
    """The nearest rows to each of `queries` ((n, dim)), through one DoExchange."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be at least 1")
    schema, batches = _query_batches(queries, batch_rows)
    nearest = nearest_object(column, None, k, **search_options)
    descriptor = flight.FlightDescriptor.for_command(
        _command(client, dataset, nearest, read_options)
    )

    def call(c: flight.FlightClient, o: flight.FlightCallOptions) -> pa.Table:
        writer, reader = c.do_exchange(descriptor, o)
        failure: list[BaseException] = []

        def send() -> None:
            try:
                writer.begin(schema)
                for batch in batches:
                    writer.write_batch(batch)
                writer.done_writing()
            except BaseException as e:  # noqa: BLE001 - the reader shows the server's error
                failure.append(e)

        sender = threading.Thread(target=send, name="quiver-nearest-send", daemon=True)
        sender.start()
        try:
            answer = reader.read_all()
        finally:
            sender.join()
            writer.close()
        if failure and not isinstance(failure[0], flight.FlightError):
            raise failure[0]
        return answer

    return client._rpc(call)


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Search options (metric, nprobes...) apart from read options (filter, columns...)."""
    search_keys = ("metric", "nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "ef")
    search_keys += ("use_index", "distance_range", "search_effort", "approx_mode")
    read_keys = ("columns", "filter", "prefilter", "with_row_id", "version", "tag", "as_of")
    read_keys += ("branch", "search_filter")
    unknown = sorted(set(options) - set(search_keys) - set(read_keys))
    if unknown:
        raise TypeError(f"unknown nearest option {unknown[0]!r}")
    searching = {k: v for k, v in options.items() if k in search_keys and v is not None}
    reading = {k: v for k, v in options.items() if k in read_keys and v is not None}
    if isinstance(reading.get("columns"), str) or (
        "columns" in reading and not isinstance(reading["columns"], Sequence)
    ):
        raise TypeError("columns must be a sequence of column names")
    return searching, reading


_TEXT_OPTIONS = ("columns", "filter", "prefilter", "with_row_id", "fast_search")
_TEXT_OPTIONS += ("version", "tag", "as_of", "branch", "search_filter")


def _text_command(
    client: Any, dataset: str, query: Any, limit: int | None, options: dict[str, Any]
) -> bytes:
    unknown = sorted(set(options) - set(_TEXT_OPTIONS))
    if unknown:
        raise TypeError(f"unknown full-text search option {unknown[0]!r}")
    reading = client._scoped({k: v for k, v in options.items() if v is not None})
    return json_bytes(read_command(dataset, full_text_query=query, limit=limit, **reading))


class Searches:
    """The full-text and hybrid searches of `clients.Client` (a mixin: it calls the
    client's `_rpc`)."""

    def full_text_search(
        self, dataset: str, query: str | dict[str, Any], limit: int | None = 10, **options: Any
    ) -> pa.Table:
        """The `limit` rows matching `query` best (a string, `{"query", "columns"}` or a
        structured query), best first with `_score`, in one round trip. Options:
        `columns`, `filter`, `prefilter`, `with_row_id`, `fast_search`, `version` / `tag` /
        `as_of`."""
        if isinstance(query, list):
            raise TypeError("full_text_search takes one query; full_text_search_batch a list")
        return _answer(self, _text_command(self, dataset, query, limit, options))

    def full_text_search_batch(
        self,
        dataset: str,
        queries: Sequence[str | dict[str, Any]],
        limit: int | None = 10,
        **options: Any,
    ) -> pa.Table:
        """Each query's `limit` best rows, in one round trip: the queries' answers in turn,
        each row after the `query_index` of its query (0-based, in the order given). The
        server reads every answer's rows at once. Options as `full_text_search`'s."""
        if isinstance(queries, (str, dict)) or not len(queries):
            raise TypeError("queries must be a non-empty list of full-text queries")
        return _answer(self, _text_command(self, dataset, list(queries), limit, options))

    def hybrid(
        self,
        dataset: str,
        column: str,
        q: Any,
        text: str | dict[str, Any],
        k: int = 10,
        *,
        fusion: str = "rrf",
        rrf_k: float | None = None,
        weight: float | None = None,
        normalize: str | None = None,
        **options: Any,
    ) -> pa.Table:
        """The k best rows of a vector search (`q` by `column`) and a full-text search
        (`text`: a string, `{"query", "columns"}` or a structured query) fused as LanceDB's
        hybrid search fuses them: reciprocal rank fusion (`rrf_k`) or a linear combination
        (`weight` for the vector side), scores normalised by value or rank. The rows come
        best first with `_relevance_score`, in one round trip. Options as `Client.nearest`'s
        (nprobes, refine_factor, columns, filter, prefilter, with_row_id, version...)."""
        searching, reading = split_options(options)
        hybrid = {"fusion": fusion, "rrf_k": rrf_k, "weight": weight, "normalize": normalize}
        reading = {
            **reading,
            "full_text_query": text,
            "limit": k,
            "hybrid": {key: v for key, v in hybrid.items() if v is not None},
        }
        return search(self, dataset, column, q, k, search_options=searching, read_options=reading)
