"""Codecs Lance 2.3 adds to the `CompressiveEncoding` tree, as pylance 14 writes them.

* `Range{bits, start, step}`: `start + step * i`, no buffer (each chunk restarts at i = 0);
* `Delta{bits, base, deltas}`: `base` then running sums of the count - 1 `deltas`;
* `Rle` with any run-value encoding (e.g. a Range) and 8/16/32/64-bit run lengths; one
  buffer per chunk holds ``[u64 values byte size][run values][run lengths]``;
* `Variable` whose offsets use any encoding ("generic offsets"): two buffers per chunk,
  the `count + 1` offsets (from 0, into the chunk's bytes) and the bytes;
* `Dictionary` inside a block (sparse positions and list counts):
  ``[u64 indices size][u64 items size][indices][items]``.

`decode` is called by `compression._decode` for exactly the encodings `is_v23` names and is
handed that decoder back (`inner`) for the children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.file.v21.gather import I64, as_i64, gather
from quiver.format.proto import encodings_v2_1_pb2 as pb

Inner = Callable[[pb.CompressiveEncoding, list, str, bool], pa.Array]

_WORDS = {32: np.uint32, 64: np.uint64}
_LENGTHS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def is_v23(enc: pb.CompressiveEncoding) -> bool:
    """Whether `enc` (its top node) is one of the 2.3 forms this module decodes."""
    kind = enc.WhichOneof("compression")
    if kind in ("range", "delta"):
        return True
    if kind == "variable":
        return enc.variable.offsets.WhichOneof("compression") != "flat"
    if kind == "rle":
        values, lengths = enc.rle.values, enc.rle.run_lengths
        return values.WhichOneof("compression") != "flat" or (
            lengths.WhichOneof("compression") == "flat" and lengths.flat.bits_per_value != 8
        )
    return False


def handles(enc: pb.CompressiveEncoding, bufs: Sequence, block: bool) -> bool:
    """Whether `decode` (not the 2.1/2.2 decoder) reads `enc` over `bufs`: the 2.3 forms,
    and blocks the 2.2 writers never made (a Dictionary; a FixedSizeList with validity in
    one buffer, laid out row by row as in full-zip pages)."""
    if is_v23(enc):
        return True
    kind = enc.WhichOneof("compression")
    if not block or len(bufs) != 1:
        return False
    if kind == "dictionary":
        return True
    if kind == "fixed_size_list":
        node = enc
        while node.WhichOneof("compression") == "fixed_size_list":
            if node.fixed_size_list.has_validity:
                return True
            node = node.fixed_size_list.values
    return False


def has_payload(enc: pb.CompressiveEncoding) -> bool:
    """Whether `enc` stores anything in a buffer (Range and Constant live in the metadata)."""
    kind = enc.WhichOneof("compression")
    if kind in ("range", "constant"):
        return False
    if kind == "delta":
        return enc.delta.HasField("deltas") and has_payload(enc.delta.deltas)
    if kind == "dictionary":
        return has_payload(enc.dictionary.indices) or has_payload(enc.dictionary.items)
    if kind == "rle":
        return has_payload(enc.rle.values) or has_payload(enc.rle.run_lengths)
    return True


def _width(bits: int, what: str, where: str) -> type:
    if bits not in _WORDS:
        raise UnsupportedFeatureError(f"{where}: {what} of {bits}-bit values (expected 32 or 64)")
    return _WORDS[bits]


def _fixed(values: np.ndarray, bits: int) -> pa.Array:
    typ = pa.uint32() if bits == 32 else pa.uint64()
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)])


def _local_index(counts: np.ndarray) -> np.ndarray:
    """0..counts[i]-1 for every chunk i, concatenated."""
    counts = as_i64(counts)
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=I64) - starts


def range_values(enc: pb.Range, counts: np.ndarray, where: str) -> pa.Array:
    """Range: `start + step * i` per chunk (i from 0 in each chunk)."""
    bits = int(enc.uncompressed_bits_per_value)
    dt = _width(bits, "Range", where)
    if enc.step == 0:
        raise CorruptFileError(where, "Range with step 0")
    i = _local_index(counts).astype(np.uint64)
    out = (np.uint64(enc.start) + np.uint64(enc.step) * i).astype(dt)
    if len(i) and int(enc.start) + int(enc.step) * (int(counts.max()) - 1) >= 1 << bits:
        raise CorruptFileError(where, f"Range overflows its {bits}-bit values")
    return _fixed(out, bits)


def _counts(bufs: list) -> np.ndarray:
    return as_i64(bufs[0].counts)


def delta_values(enc: pb.Delta, bufs: list, where: str, block: bool, inner: Inner) -> pa.Array:
    """Delta: per chunk `base`, then `base` plus the running sums of its count - 1 deltas."""
    bits = int(enc.uncompressed_bits_per_value)
    dt = _width(bits, "Delta", where)
    counts = _counts(bufs)
    if (counts < 0).any():
        raise CorruptFileError(where, "Delta with a negative value count")
    n_deltas = np.maximum(counts - 1, 0)
    if not n_deltas.any():
        deltas = np.zeros(0, dtype=dt)
    elif not enc.HasField("deltas"):
        raise CorruptFileError(where, "Delta of several values without deltas")
    else:
        ch = bufs[0]
        child = [type(ch)(ch.data, ch.starts, ch.sizes, n_deltas), *bufs[1:]]
        arr = inner(enc.deltas, child, where, block)
        deltas = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(dt)
        if len(deltas) != int(n_deltas.sum()):
            raise CorruptFileError(where, f"Delta has {len(deltas)} deltas, expected {n_deltas}")
    # each chunk: [base, d0, d1, ...], summed within the chunk (wrapping like the writer's)
    nz = counts > 0
    firsts = (np.cumsum(counts) - counts)[nz]
    steps = np.zeros(int(counts.sum()), dtype=dt)
    mask = np.ones(len(steps), dtype=bool)
    mask[firsts] = False
    steps[mask] = deltas
    steps[firsts] = np.asarray(enc.base, dtype=np.uint64).astype(dt)
    total = np.cumsum(steps, dtype=dt)
    before = np.zeros(len(firsts), dtype=dt)
    before[1:] = total[firsts[1:] - 1]
    total -= np.repeat(before, counts[nz])
    return _fixed(total, bits)


def _frames(ch: object, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk: (values start, values size, lengths start) of a framed Rle buffer."""
    sizes = as_i64(ch.sizes)
    if (sizes < 8).any():
        raise CorruptFileError(where, "Rle block shorter than its 8-byte header")
    head = gather(ch.data, as_i64(ch.starts), np.full(len(sizes), 8, I64), where, "Rle header")
    vsize = head.view("<u8").astype(np.uint64)
    if (vsize > (sizes - 8).astype(np.uint64)).any():
        raise CorruptFileError(where, "Rle block claims more run-value bytes than it holds")
    vsize = vsize.astype(I64)
    return as_i64(ch.starts) + 8, vsize, as_i64(ch.starts) + 8 + vsize


def rle_values(enc: pb.Rle, bufs: list, where: str, block: bool, inner: Inner) -> pa.Array:
    """Rle with any run-value encoding and 8..64-bit run lengths (framed, one buffer)."""
    if not (has_payload(enc.values) or has_payload(enc.run_lengths)):
        return _metadata_rle(enc, bufs[0], _counts(bufs), where, inner)
    lengths_enc = enc.run_lengths
    if lengths_enc.WhichOneof("compression") != "flat":
        raise UnsupportedFeatureError(f"{where}: Rle run lengths that are not Flat")
    lbits = int(lengths_enc.flat.bits_per_value)
    if lbits not in _LENGTHS:
        raise CorruptFileError(where, f"Rle run lengths of {lbits} bits")
    ch = bufs[0]
    counts = _counts(bufs)
    vstart, vsize, lstart = _frames(ch, where)
    lsize = as_i64(ch.sizes) - 8 - vsize
    lw = lbits // 8
    if (lsize % lw).any():
        raise CorruptFileError(where, "Rle run lengths are not whole values")
    runs = lsize // lw
    raw = gather(ch.data, lstart, lsize, where, "Rle run lengths")
    lengths = raw.view(_LENGTHS[lbits]).astype(I64)
    Chunks = type(ch)
    vals = inner(enc.values, [Chunks(ch.data, vstart, vsize, runs)], where, True)
    if len(vals) != len(lengths):
        raise CorruptFileError(where, f"Rle has {len(vals)} run values, {len(lengths)} lengths")
    per_chunk = np.add.reduceat(lengths, np.cumsum(runs) - runs) if len(runs) else runs
    per_chunk = np.where(runs > 0, per_chunk, 0)
    if (per_chunk != counts).any() or (lengths < 0).any():
        i = int(np.argmax(per_chunk != counts))
        raise CorruptFileError(
            where, f"Rle runs of chunk {i} cover {int(per_chunk[i])} values, not {counts[i]}"
        )
    return vals.take(pa.array(np.repeat(np.arange(len(lengths)), lengths)))


def _metadata_rle(
    enc: pb.Rle, ch: object, counts: np.ndarray, where: str, inner: Inner
) -> pa.Array:
    """Rle whose run values and lengths both live in the metadata (e.g. two Ranges): per
    chunk, as many runs as it takes for the lengths to add up to its count."""
    Chunks = type(ch)
    none = np.zeros(len(counts), dtype=I64)
    meta = Chunks(np.zeros(0, np.uint8), none, none, counts)  # at most `count` runs a chunk
    lengths = np.asarray(inner(enc.run_lengths, [meta], where, True).to_numpy()).astype(I64)
    if (lengths <= 0).any():
        raise CorruptFileError(where, "Rle with a run of length 0")
    firsts = np.cumsum(counts) - counts
    within = np.cumsum(lengths) - np.repeat(np.cumsum(lengths)[firsts - 1] * (firsts > 0), counts)
    runs = np.zeros(len(counts), dtype=I64)
    for i, (f, c) in enumerate(zip(firsts.tolist(), counts.tolist(), strict=True)):
        k = int(np.searchsorted(within[f : f + c], c)) + 1 if c else 0
        if c and (k > c or within[f + k - 1] != c):
            raise CorruptFileError(where, f"Rle runs of chunk {i} do not add up to {c} values")
        runs[i] = k
    keep = np.concatenate([np.arange(f, f + k) for f, k in zip(firsts, runs, strict=True)])
    vals = inner(enc.values, [Chunks(meta.data, none, none, runs)], where, True)
    return vals.take(pa.array(np.repeat(np.arange(len(keep)), lengths[keep.astype(I64)])))


def variable_values(enc: pb.Variable, bufs: list, where: str, inner: Inner) -> pa.Array:
    """Variable with generic offsets: per chunk `count + 1` offsets (any encoding) from 0
    into the chunk's byte buffer (the next buffer). Returns large_binary."""
    if len(bufs) < 2 and has_payload(enc.offsets):
        kind = enc.offsets.WhichOneof("compression")
        raise UnsupportedFeatureError(
            f"{where}: Variable offsets compressed with {kind} in one buffer (2.3 writes such "
            "offsets and the bytes in two)"
        )
    if enc.HasField("values"):
        raise UnsupportedFeatureError(f"{where}: Variable with compressed value bytes")
    # offsets without a payload (e.g. a Range) leave the chunk's one buffer to the bytes
    offs_ch, data_ch = (bufs[0], bufs[1]) if has_payload(enc.offsets) else (bufs[0], bufs[0])
    counts = _counts(bufs)
    Chunks = type(offs_ch)
    arr = inner(
        enc.offsets, [Chunks(offs_ch.data, offs_ch.starts, offs_ch.sizes, counts + 1)], where, True
    )
    offs = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(I64)
    if len(offs) != int((counts + 1).sum()):
        raise CorruptFileError(where, f"{len(offs)} Variable offsets for {counts} values")
    last = np.cumsum(counts + 1) - 1
    keep = np.ones(len(offs), dtype=bool)
    keep[last] = False
    lo, hi = offs[keep], offs[np.flatnonzero(keep) + 1]
    chunk = np.repeat(np.arange(len(counts)), counts)
    sizes = as_i64(data_ch.sizes)
    if (lo < 0).any() or (hi < lo).any() or (hi > sizes[chunk]).any():
        raise CorruptFileError(where, "Variable offsets out of order or outside their bytes")
    data = gather(data_ch.data, as_i64(data_ch.starts)[chunk] + lo, hi - lo, where, "Variable")
    out = np.zeros(len(lo) + 1, dtype=I64)
    np.cumsum(hi - lo, out=out[1:])
    return pa.Array.from_buffers(
        pa.large_binary(), len(lo), [None, pa.py_buffer(out), pa.py_buffer(data)]
    )


def dictionary_values(enc: pb.Dictionary, bufs: list, where: str, inner: Inner) -> pa.Array:
    """Dictionary in a block: ``[u64 indices size][u64 items size][indices][items]``."""
    ch = bufs[0]
    if len(ch.counts) != 1:
        raise UnsupportedFeatureError(f"{where}: Dictionary compression inside mini-block chunks")
    start, size = int(ch.starts[0]), int(ch.sizes[0])
    if size < 16:
        raise CorruptFileError(where, f"Dictionary block of {size} bytes has no header")
    head = gather(ch.data, np.array([start]), np.array([16]), where, "Dictionary header")
    n_idx, n_items = (int(x) for x in head.view("<u8"))
    if n_idx + n_items > size - 16:
        raise CorruptFileError(where, f"Dictionary parts of {n_idx} + {n_items} bytes in {size}")
    Chunks = type(ch)
    one = np.ones(1, dtype=I64)
    n = int(enc.num_dictionary_items)
    items_ch = Chunks(ch.data, one * (start + 16 + n_idx), one * n_items, one * n)
    items = inner(enc.items, [items_ch], where, True)
    idx_ch = Chunks(ch.data, one * (start + 16), one * n_idx, as_i64(ch.counts))
    ix = np.asarray(inner(enc.indices, [idx_ch], where, True).to_numpy(zero_copy_only=False))
    ix = ix.astype(I64)
    if len(ix) and (ix.min() < 0 or ix.max() >= len(items)):
        raise CorruptFileError(where, f"dictionary index beyond the {len(items)} items")
    return items.take(pa.array(ix))


def decode(
    enc: pb.CompressiveEncoding, bufs: list, where: str, block: bool, inner: Inner
) -> pa.Array:
    """Decode one of the 2.3 forms (`is_v23`, or a block Dictionary) over chunk buffers."""
    kind = enc.WhichOneof("compression")
    if kind == "range":
        return range_values(enc.range, _counts(bufs), where)
    if kind == "delta":
        return delta_values(enc.delta, bufs, where, block, inner)
    if kind == "rle":
        return rle_values(enc.rle, bufs, where, block, inner)
    if kind == "variable":
        return variable_values(enc.variable, bufs, where, inner)
    if kind == "dictionary":
        return dictionary_values(enc.dictionary, bufs, where, inner)
    raise UnsupportedFeatureError(f"{where}: compression {kind}")
