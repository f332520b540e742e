"""pylance 14's `code` tokenizer (`create_scalar_index(..., "INVERTED", analyzer="code")`):
source code split into identifiers and, optionally, operators, as its indices hold them.

- An identifier is a run of letters, digits and underscores (Unicode letters and digits
  too); everything else separates, and operators are kept as tokens with
  `index_operators` (longest match first: `>>>=`, `===`, `->`, `+`...; `.`, `@`, `#`,
  brackets and quotes never are).
- With `split_identifiers` an identifier is split at its underscores and camel-case
  boundaries (a lower-case letter before an upper-case one; the last of several upper-case
  letters before a lower-case one: `XMLHttpRequest` is `XML`, `Http`, `Request`), and with
  `split_on_numerics` between letters and digits (`i18n`: `i`, `18`, `n`). An identifier
  of one part at most (`__init__`) stays whole; one of several is its parts, each at its
  own position, with `preserve_original` the identifier itself first at the first part's.

Positions count the tokens emitted (removed operators leave none). Found by reading
pylance's indices of crafted texts (`tests/engine/index/test_fulltext_code.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from quiver.format.alphanumeric import is_alphanumeric

_OPERATORS = frozenset(
    """>>>= !== === <=> <<= >>= >>> **= &&= ||= ??= //= != && ** ++ += -- -= -> // :: := <-
    << <= == => >= >> ?? |> || *= /= %= &= |= ^= ~= ! % & * + - / : < = > ? ^ | ~""".split()
)
_LONGEST = max(len(op) for op in _OPERATORS)
_OPERATOR_CHARS = frozenset("".join(_OPERATORS))


@dataclass(frozen=True)
class CodeOptions:
    """The code tokenizer's flags (pylance's defaults)."""

    split_identifiers: bool = False
    split_on_numerics: bool = True
    preserve_original: bool = True
    index_operators: bool = False


def _word_char(c: str) -> bool:
    return c == "_" or is_alphanumeric(c)


def code_tokens(text: str, options: CodeOptions) -> list[tuple[int, str]]:
    """(position, token) pairs of `text`, before lower-casing and the other filters."""
    out: list[tuple[int, str]] = []
    position, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if _word_char(c):
            j = i + 1
            while j < n and _word_char(text[j]):
                j += 1
            word = text[i:j]
            parts = identifier_parts(word, options.split_on_numerics)
            if not options.split_identifiers or len(parts) <= 1:
                out.append((position, word))
                position += 1
            else:
                if options.preserve_original:
                    out.append((position, word))
                for part in parts:
                    out.append((position, part))
                    position += 1
            i = j
        elif c in _OPERATOR_CHARS:
            op = next(
                text[i : i + k]
                for k in range(min(_LONGEST, n - i), 0, -1)
                if text[i : i + k] in _OPERATORS
            )
            if options.index_operators:
                out.append((position, op))
                position += 1
            i += len(op)
        else:
            i += 1
    return out


def identifier_parts(word: str, numerics: bool) -> list[str]:
    """An identifier's parts: split at underscores, camel-case boundaries and (with
    `numerics`) between letters and digits; empty parts dropped."""
    parts: list[str] = []
    for piece in word.split("_"):
        start = 0
        for k in range(1, len(piece)):
            a, b = piece[k - 1], piece[k]
            after = piece[k + 1] if k + 1 < len(piece) else ""
            camel = (a.islower() and b.isupper()) or (
                a.isupper() and b.isupper() and after.islower()
            )
            digits = numerics and (a.isdigit() != b.isdigit())
            if camel or digits:
                parts.append(piece[start:k])
                start = k
        if piece:
            parts.append(piece[start:])
    return [p for p in parts if p]
