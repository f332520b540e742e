"""The benchmark table: 4 M rows (~700 MB in Arrow) of int64, uniform float64, low- and
high-cardinality strings and fixed_size_list<float32, 32>, generated deterministically and
vectorised. The data has no order a statistics-based pruner could use."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

ROWS = 4_000_000
_ALPHABET = np.frombuffer(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", np.uint8
)
_LEVELS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def _random_strings(rng: np.random.Generator, n: int, lo: int, hi: int) -> pa.Array:
    lengths = rng.integers(lo, hi, n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = _ALPHABET[rng.integers(0, len(_ALPHABET), int(offsets[-1]))]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)).cast(
        pa.string()
    )


def batches(rows: int = ROWS, batch_rows: int = 500_000, seed: int = 7):
    """Yield the benchmark table in record batches (so generation stays in bounded memory)."""
    rng = np.random.default_rng(seed)
    schema = schema_()
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        vec = rng.standard_normal(n * 32, dtype=np.float32)
        yield pa.record_batch(
            [
                pa.array(np.arange(start, start + n, dtype=np.int64)),
                pa.array(rng.random(n)),  # uniform [0, 1): `value < 0.01` keeps 1 %
                pa.DictionaryArray.from_arrays(
                    pa.array(rng.integers(0, len(_LEVELS), n, dtype=np.int32)), _LEVELS
                ).cast(pa.string()),
                _random_strings(rng, n, 20, 100),
                pa.FixedSizeListArray.from_arrays(pa.array(vec), 32),
            ],
            schema=schema,
        )


def schema_() -> pa.Schema:
    """Schema of the benchmark table."""
    return pa.schema(
        [
            ("id", pa.int64()),
            ("value", pa.float64()),
            ("category", pa.string()),
            ("text", pa.string()),
            ("vector", pa.list_(pa.float32(), 32)),
        ]
    )
