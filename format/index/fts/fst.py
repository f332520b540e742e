"""Token dictionaries of INVERTED indices: maps from token bytes to token ids stored as a
finite-state transducer, the format of the Rust ``fst`` crate (0.4, format version 3) that
pylance writes in ``part_{P}_tokens.lance``.

The transducer is a byte array of nodes. A node is addressed by the offset of its last
byte (its state byte); its transitions, their outputs and target addresses lie in the bytes
before it. Following a key's bytes from the root and summing the outputs taken (plus the
final output of the last node, which must be final) gives the key's value. After the nodes
come the key count, the root's address and a checksum; address 0 is the final node with no
transitions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from quiver.format.errors import CorruptFileError

# inputs frequent enough to be coded in the state byte (index k > 0 means _COMMON[k - 1])
_COMMON = b"te/oasripcnw.hlm-du012g=:bf3y5&_4v9678k%?xCDASFIBEjPTzRNM+LOqHGW"
_EMPTY = 0
_INDEX_THRESHOLD = 32  # nodes with more transitions carry a 256-byte lookup table too


def _uint(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "little") if size else 0


class FstMap:
    """A read-only token -> id map over the bytes of one ``fst`` transducer."""

    def __init__(self, data: bytes, where: str) -> None:
        self._data = data = bytes(data)
        self._where = where
        if len(data) < 36:
            raise CorruptFileError(where, "token dictionary shorter than its header and footer")
        version, _kind = struct.unpack_from("<QQ", data, 0)
        if not 1 <= version <= 3:
            raise CorruptFileError(where, f"token dictionary of fst format version {version}")
        self._version = version
        end = len(data) - (4 if version >= 3 else 0)
        self.num_keys, self._root = struct.unpack_from("<QQ", data, end - 16)
        if not 0 <= self._root < end:
            raise CorruptFileError(where, "token dictionary root outside the data")

    def _node(self, addr: int) -> tuple[bool, int, list[tuple[int, int, int]]]:
        """(final, final output, [(input byte, output, target address)]) of a node."""
        if addr == _EMPTY:
            return True, 0, []
        d = self._data
        state = d[addr]
        kind = state >> 6
        if kind == 0b11:  # one transition to the node written just before, output 0
            common = state & 0x3F
            at = addr if common else addr - 1
            byte = _COMMON[common - 1] if common else d[addr - 1]
            return False, 0, [(byte, 0, at - 1)]
        if kind == 0b10:  # one transition with output and target delta
            common = state & 0x3F
            width = 0 if common else 1
            byte = _COMMON[common - 1] if common else d[addr - 1]
            sizes = d[addr - width - 1]
            tsize, osize = sizes >> 4, sizes & 0x0F
            delta = _uint(d, addr - width - 1 - tsize, tsize)
            output = _uint(d, addr - width - 1 - tsize - osize, osize)
            end = addr - width - 1 - tsize - osize
            return False, 0, [(byte, output, _EMPTY if delta == 0 else end - delta)]
        final, n, tsize, osize, base, outputs_at, end = self._many(addr, state)
        transitions = []
        for i in range(n):
            delta = _uint(d, base - n - (i + 1) * tsize, tsize)
            output = _uint(d, outputs_at - (i + 1) * osize, osize)
            transitions.append((d[base - 1 - i], output, _EMPTY if delta == 0 else end - delta))
        final_output = _uint(d, outputs_at - n * osize - osize, osize) if final else 0
        return final, final_output, transitions

    def _many(self, addr: int, state: int) -> tuple[bool, int, int, int, int, int, int]:
        """Where a node of several transitions keeps them: (final, transitions, target
        width, output width, the end of its inputs, the end of its outputs, the address
        target deltas count back from)."""
        d = self._data
        final = bool(state & 0x40)
        n = state & 0x3F
        width = 0 if n else 1
        if not n:
            n = d[addr - 1]
            if n == 1:
                n = 256
        sizes = d[addr - width - 1]
        tsize, osize = sizes >> 4, sizes & 0x0F
        index = 256 if self._version >= 2 and n > _INDEX_THRESHOLD else 0
        base = addr - width - 1 - index
        outputs_at = addr - width - 1 - (n + n * tsize + index)
        end = outputs_at - n * osize - (osize if final else 0)
        return final, n, tsize, osize, base, outputs_at, end

    def get(self, token: str) -> int | None:
        """The id of `token`, or None when the dictionary does not hold it."""
        addr, total = self._root, 0
        try:
            for byte in token.encode("utf-8"):
                step = self._follow(addr, byte)
                if step is None:
                    return None
                output, addr = step
                total += output
            final, final_output, _ = self._node(addr)
        except IndexError:
            raise CorruptFileError(self._where, "token dictionary node outside the data") from None
        return total + final_output if final else None

    def _follow(self, addr: int, byte: int) -> tuple[int, int] | None:
        """(output, target) of the transition on `byte` out of node `addr`, or None: the
        one transition decoded, not every one (`_node`), for lookups."""
        if addr == _EMPTY:
            return None
        d = self._data
        state = d[addr]
        if state >> 7:  # kinds 0b10 and 0b11: one transition
            inp, output, target = self._node(addr)[2][0]
            return (output, target) if inp == byte else None
        _, n, tsize, osize, base, outputs_at, end = self._many(addr, state)
        # inputs lie backwards before `base` (input i at base - 1 - i), each at most once
        at = d.find(bytes((byte,)), base - n, base)
        if at < 0:
            return None
        i = base - 1 - at
        delta = _uint(d, base - n - (i + 1) * tsize, tsize)
        output = _uint(d, outputs_at - (i + 1) * osize, osize)
        return output, (_EMPTY if delta == 0 else end - delta)

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (token, id), in byte order of the tokens."""
        stack = [(self._root, b"", 0)]
        while stack:
            addr, prefix, total = stack.pop()
            final, final_output, transitions = self._node(addr)
            if final:
                yield prefix.decode("utf-8", "replace"), total + final_output
            for inp, output, target in reversed(transitions):
                stack.append((target, prefix + bytes([inp]), total + output))
