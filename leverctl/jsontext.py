"""``json.dumps(obj, indent=2)``, the same text, faster and in pieces.

A report of a million records is a JSON document of a million rows. The
standard library indents in Python (its C encoder does not indent before
Python 3.14), at some 20 µs a row, and returns the whole text at once. Here
each value is spelled as the standard encoder spells it (strings through its
own C escaper, floats by ``float.__repr__``), objects and lists are laid out
as ``indent=2`` lays them out, and the text comes in pieces (one per element
of the outer lists) that a caller writes as they come. Anything other than
plain dicts with string keys, lists, tuples, strings, ints, floats, bools
and None is handed to ``json.dumps`` itself, so the text is always its text
(tests/test_jsontext.py holds the two to each other).
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Iterator

_enc = json.encoder.encode_basestring_ascii  # the C escaper json.dumps uses (ensure_ascii)
_PAD = ["\n" + "  " * i for i in range(64)]
MAX_LEVEL = 60  # deeper than any report: json.dumps lays it out
STREAM_DEPTH = 2  # containers this shallow are laid out element by element; deeper ones as one string each
PIECE = 1 << 16  # characters gathered before a piece is handed on
_KEYS: dict = {}  # a key -> its text and the colon after it


class Rows:
    """A list made as it is written: ``n`` elements that ``make()`` yields,
    laid out as a list of them (a report's million rows, never all built at
    once). Only this module writes it; json.dumps does not know it."""

    __slots__ = ("n", "make")

    def __init__(self, n: int, make: Callable[[], Iterable[Any]]):
        self.n = n
        self.make = make

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        return iter(self.make())


class Flat:
    """A JSON object given as its keys (one tuple, shared by every row of a
    kind) and its values in that order: a report's row, spelled exactly as
    ``json.dumps`` spells ``dict(zip(keys, values))`` without that dict being
    made, from a template of the keys' text made once per depth. Only this
    module writes it; :meth:`as_dict` is the object to give anything else."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: tuple[str, ...], values: tuple):
        self.keys = keys
        self.values = values

    def as_dict(self) -> dict:
        return dict(zip(self.keys, self.values))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Flat) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]


_FLATS: dict = {}  # (id(keys), level) -> (keys, the text before each value)


def _flat(o: Flat, level: int, allow_nan: bool, memo: dict) -> str:
    keys = o.keys
    hit = _FLATS.get((id(keys), level))
    if hit is None or hit[0] is not keys:
        if not keys or len(set(keys)) != len(keys) or not all(type(k) is str for k in keys):
            return _text(o.as_dict(), level, allow_nan, memo)
        inner = _PAD[level + 1]
        heads = tuple(("{" if i == 0 else ",") + inner + _enc(k) + ": " for i, k in enumerate(keys))
        hit = _FLATS[(id(keys), level)] = (keys, heads)
    parts = []
    for h, k, v in zip(hit[1], keys, o.values):
        tv = type(v)
        if tv is str:
            parts.append(h + _enc(v))
        elif tv is float and v - v == 0.0:  # finite
            parts.append(h + float.__repr__(v))
        elif v is None:
            parts.append(h + "null")
        elif k == "levers":
            parts.append(h + _levers(v, level + 1, allow_nan, memo))
        else:
            parts.append(h + _text(v, level + 1, allow_nan, memo))
    parts.append(_PAD[level] + "}")
    return "".join(parts)


def pieces(obj: Any, *, allow_nan: bool = True) -> Iterator[str]:
    """The text of ``json.dumps(obj, indent=2, allow_nan=allow_nan)``, in
    pieces of about PIECE characters whose concatenation is exactly that text."""
    buf: list[str] = []
    size = 0
    for text in _pieces(obj, 0, allow_nan, {}):
        buf.append(text)
        size += len(text)
        if size >= PIECE:
            yield "".join(buf)
            buf, size = [], 0
    if buf:
        yield "".join(buf)


def dumps(obj: Any, *, allow_nan: bool = True) -> str:
    return "".join(pieces(obj, allow_nan=allow_nan))


def _pieces(o: Any, level: int, allow_nan: bool, memo: dict) -> Iterator[str]:
    t = type(o)
    if level >= STREAM_DEPTH or not ((t is dict and o and all(type(k) is str for k in o))
                                     or ((t is list or t is tuple or t is Rows) and len(o))):
        yield _text(o, level, allow_nan, memo)
        return
    inner, outer = _PAD[level + 1], _PAD[level]
    if t is dict:
        sep = "{" + inner
        for k, v in o.items():
            yield sep + _enc(k) + ": "
            sep = "," + inner
            if k == "levers":
                yield _levers(v, level + 1, allow_nan, memo)
            else:
                yield from _pieces(v, level + 1, allow_nan, memo)
        yield outer + "}"
    else:
        sep = "[" + inner
        for v in o:
            yield sep
            sep = "," + inner
            yield from _pieces(v, level + 1, allow_nan, memo)
        yield outer + "]"


def _levers(v: Any, level: int, allow_nan: bool, memo: dict) -> str:
    """A lever set: the records of one sweep share a few thousand, each
    spelled once (kept by identity; the document holds them all meanwhile)."""
    key = (id(v), level)
    hit = memo.get(key)
    if hit is not None and hit[0] is v:
        return hit[1]
    text = _text(v, level, allow_nan, memo)
    memo[key] = (v, text)
    return text


def _text(o: Any, level: int, allow_nan: bool, memo: dict) -> str:
    t = type(o)
    if level >= MAX_LEVEL:
        t = None  # json.dumps below
    if t is str:
        return _enc(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if t is int:
        return int.__repr__(o)
    if t is float:
        if math.isfinite(o):
            return float.__repr__(o)
        return json.dumps(o, indent=2, allow_nan=allow_nan)  # NaN and infinities: its spelling, or its error
    if t is Flat:
        return _flat(o, level, allow_nan, memo)
    if t is dict:
        if not o:
            return "{}"
        # A report's rows are mostly strings and finite floats under a few
        # keys: those are spelled here, without a call each, and each key's
        # text is made once (a million rows, at cluster scale).
        parts = []
        for k, v in o.items():
            kt = _KEYS.get(k)
            if kt is None:
                if type(k) is not str:
                    break  # json.dumps below decides
                kt = _enc(k) + ": "
                if len(_KEYS) < 4096:
                    _KEYS[k] = kt
            tv = type(v)
            if tv is str:
                parts.append(kt + _enc(v))
            elif tv is float and v - v == 0.0:  # finite
                parts.append(kt + float.__repr__(v))
            elif v is None:
                parts.append(kt + "null")
            elif k == "levers":
                parts.append(kt + _levers(v, level + 1, allow_nan, memo))
            else:
                parts.append(kt + _text(v, level + 1, allow_nan, memo))
        else:
            inner = _PAD[level + 1]
            return "{" + inner + ("," + inner).join(parts) + _PAD[level] + "}"
    elif t is list or t is tuple or t is Rows:
        if not len(o):
            return "[]"
        inner = _PAD[level + 1]
        return "[" + inner + ("," + inner).join(_text(v, level + 1, allow_nan, memo) for v in o) \
            + _PAD[level] + "]"
    # Anything else (keys that are not strings, subclasses, unknown types): json.dumps decides.
    text = json.dumps(o.as_dict() if type(o) is Flat else o, indent=2, allow_nan=allow_nan)
    return text.replace("\n", _PAD[level]) if level else text
